/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Finding the training iteration in one process's trace, and the repeat machinery that
 * segment.c shares.
 *
 * A trace is first tokenised: each event that shapes the work (a launch, an NCCL call, a
 * copy, a memset, a host synchronisation, a graph launch) becomes a 64-bit signature of
 * what it does, never of where: kernel function and geometry, NCCL operation and count,
 * copy direction and size. Allocations, frees, event records and waits are left out
 * (their addresses and, in a warm-up iteration, their number differ), as are calls the
 * CUDA library made inside another intercepted call (nested) and calls recorded during a
 * graph capture. The launching thread is not part of a signature, so a backward launched
 * from another thread still repeats.
 *
 * A run is a stretch of tokens with a period q: tok[i] == tok[i + q] for every i in
 * [start, end - q), with end - start >= 2q (at least two full repetitions).
 *
 * Ownership: every out struct is filled with malloc'ed arrays that the matching _free
 * releases. No global state; all functions are reentrant.
 */
#ifndef LYNX_PROF_PERIOD_H
#define LYNX_PROF_PERIOD_H

#include <stddef.h>
#include <stdint.h>

#include "event.h"

struct lynx_prof_tokens {
	uint64_t *sig;   /* the signatures, in trace order */
	uint32_t *event; /* the trace index of each token's event */
	size_t count;
};

/* The event's signature, or 0 when it is no token (see above). The executor tokenises
 * live calls with it, so a change here changes what a recorded iteration matches. */
uint64_t lynx_prof_signature(const struct lynx_prof_event *ev);

/* Tokenises events [first, end) of trace. Returns 0 or -ENOMEM. */
int lynx_prof_tokenise(const struct lynx_prof_trace *trace, size_t first, size_t end,
                       struct lynx_prof_tokens *out);
void lynx_prof_tokens_free(struct lynx_prof_tokens *tokens);

struct lynx_prof_run {
	size_t start, end; /* token indices, end exclusive */
	size_t period;     /* tokens per repetition; (end - start) / period repetitions */
};

/*
 * Every maximal run of sig[0..n) whose period is a candidate: a distance between two
 * consecutive occurrences of one signature (every period whose unit holds some signature
 * exactly once is one). O(n * candidates) time; fine for 10^5 tokens and a few hundred
 * candidates. Returns 0 or -ENOMEM; *runs is malloc'ed (NULL when *count is 0).
 */
int lynx_prof_find_runs(const uint64_t *sig, size_t n, struct lynx_prof_run **runs, size_t *count);

/* The number of distinct signatures in sig[0..n) (0 when out of memory). */
size_t lynx_prof_distinct(const uint64_t *sig, size_t n);

/*
 * A repeating unit's key: its period and the sum of its spread signatures, so that the
 * same unit read from any rotation (a run that starts elsewhere in it) has the same key.
 * Layer motifs (segment.c) and units that are not the iteration (below) are named by it.
 */
uint64_t lynx_prof_unit_key(const uint64_t *unit, size_t period);

struct lynx_prof_iteration {
	size_t first, end;             /* trace indices, end exclusive */
	uint64_t t_start_ns, t_end_ns; /* host times of its first and last event */
};

struct lynx_prof_iterations {
	size_t period;     /* tokens per iteration */
	uint64_t unit_key; /* lynx_prof_unit_key of one iteration's tokens */
	size_t prefix_end; /* trace index of the first iteration: what comes before is set-up,
	                      lazy initialisation or a first iteration that differs */
	struct lynx_prof_iteration *iter; /* identical iterations, in order */
	size_t count;
};

/*
 * Finds the training iteration: the smallest period whose runs cover at least half as
 * many tokens as the best-covering period and whose unit holds at least 95% of that
 * period's distinct signatures. The second rule keeps a layer (a short period that covers
 * much of the trace but lacks the optimizer, the loss...) from passing for an iteration,
 * and the first lets a training iteration win over "k iterations and an eval step". A
 * period that stopped repeating where another began, which still repeats at the end of the
 * trace, is left out: the trainer no longer does it (fp16's first steps skip the optimizer
 * while the loss scale overflows; a set-up loop ends). Iterations start right after a host
 * synchronisation when the unit holds one (the one followed by the longest host-time gap),
 * otherwise after the longest gap; a different first iteration ends up in the prefix. Only whole
 * iterations are listed (at least 2). Returns 0, or -EINVAL with the reason in why (no repeating
 * structure), or -ENOMEM.
 */
int lynx_prof_find_iterations(const struct lynx_prof_trace *trace, struct lynx_prof_iterations *out,
                              char *why, size_t why_len);

/* A repeating unit, by its key and period: one found not to be the iteration. */
struct lynx_prof_unit {
	uint64_t key;
	size_t period;
};

/*
 * The same, leaving out the runs of the units in not_iterations, and of their repetitions
 * (a run whose unit is k copies of one): repeating sequences already found to be something
 * else, such as a set-up loop over the parameters that synchronises once per tensor (a
 * model moved to the device one tensor at a time) and has no layers to segment; a warm-up
 * that ruled one out looks on past it. The iterations start at the phase_rank-th choice of
 * start (0: the one above); past the first, only starts right after a host synchronisation
 * are choices: the build tries them when the first cuts a layer stack (a synchronisation
 * inside the step, every few steps). -ENOENT, with why, when there is no such choice.
 */
int lynx_prof_find_iterations_phase(const struct lynx_prof_trace *trace,
                                    const struct lynx_prof_unit *not_iterations, size_t count,
                                    size_t phase_rank, struct lynx_prof_iterations *out, char *why,
                                    size_t why_len);
void lynx_prof_iterations_free(struct lynx_prof_iterations *iterations);

#endif /* LYNX_PROF_PERIOD_H */
