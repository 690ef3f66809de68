/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The executor's script: one learned iteration, as the places where recompute mode acts.
 *
 * The shim cannot ask the trainer which layer an allocation belongs to. It counts instead:
 * the iteration is a fixed sequence of tokens (period.h's signatures of launches, NCCL
 * calls, copies, memsets, host synchronisations and graph launches), and a saved
 * activation is "the j-th device allocation after the t-th token". The script lists, for
 * each saved activation of every layer and micro-batch of the chosen iteration, where it
 * is allocated, after which token its forward is done with it, at which token its backward
 * first needs it, and from which token a restore may start. The executor (shim/executor.c)
 * follows the live calls along the token sequence and acts at those places. The script also
 * gives the token of each NCCL call, so the executor finds where a profile window is called.
 *
 * Allocations are counted as the executor counts them live: every ALLOC event the program
 * made itself (not nested in another intercepted call, not during a graph capture) of
 * device memory (not a hook with "Host" in its name), successful or not.
 *
 * Ownership: a script owns its arrays; free with lynx_prof_script_free. Read-only once
 * built. No global state.
 */
#ifndef LYNX_PROF_SCRIPT_H
#define LYNX_PROF_SCRIPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "event.h"
#include "lifetime.h"

/* One saved activation of one (layer, micro-batch) of the iteration. Tokens are indices
 * into the script's sig. */
struct lynx_prof_script_buffer {
	uint32_t layer, microbatch;
	/* Its place among the saved activations of its (layer, micro-batch), in allocation
	 * order: the profile's group numbering within a layer (profile.h). */
	uint32_t index;
	uint64_t bytes;
	uint32_t alloc_token;   /* tokens of the iteration before its allocation */
	uint32_t alloc_ordinal; /* device allocations after that token and before it */
	/* The token of its last reference before its layer's backward: once that call's work
	 * is done, the forward needs it no more. */
	uint32_t last_forward_token;
	uint32_t first_backward_token; /* the token of its first reference in the backward */
	/* Where bringing it back starts: the first token of its layer's backward segment,
	 * never before last_forward_token + 1. */
	uint32_t restore_token;
};

struct lynx_prof_script {
	uint64_t *sig; /* the iteration's tokens; the one before sig[0] is sig[n_tokens - 1] */
	uint8_t *kind; /* each token's enum lynx_prof_kind: the executor passes over host
	                  synchronisations that differ, and names what it expected */
	uint32_t n_tokens;
	struct lynx_prof_script_buffer *buffers; /* by alloc_token, then alloc_ordinal */
	size_t n_buffers;
	/* The token of each NCCL call the program made itself (a COLL or P2P event not nested
	 * in another call), in call order: the calls of the profile's windows, so window k is
	 * called at nccl_tokens[k]. A call captured into a graph is no token: the one before
	 * stands for it. Non-decreasing, each below n_tokens. */
	uint32_t *nccl_tokens;
	uint32_t n_nccl;
};

/* A layer span as the build knows it, for the script. */
struct lynx_prof_script_input {
	const struct lynx_prof_trace *trace;
	size_t first, end; /* the chosen iteration's events */
	const struct lynx_prof_lifetimes *lifetimes;
	const struct lynx_prof_layer_span *spans; /* every span; those of `iteration` count */
	size_t span_count;
	uint32_t iteration; /* the chosen iteration's index in the spans */
};

/* Whether ev is an allocation the executor counts (see above). */
bool lynx_prof_script_counts_alloc(const struct lynx_prof_event *ev);

/*
 * Builds the script of the chosen iteration. Returns 0, -EINVAL with the reason in why (an
 * iteration without tokens, a saved activation referenced by no token), or -ENOMEM; on
 * failure out holds nothing to free.
 */
int lynx_prof_script_build(const struct lynx_prof_script_input *in, struct lynx_prof_script *out,
                           char *why, size_t why_len);

void lynx_prof_script_free(struct lynx_prof_script *script);

#endif /* LYNX_PROF_SCRIPT_H */
