/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The independent checker: an event-level simulation of one training iteration under 1F1B,
 * every stage and every micro-batch, op by op, that replays a plan on a problem and
 * recomputes its step time and each stage's peak memory. It shares no accounting code with
 * the planners: it reads the problem's numbers and the plan's decisions, nothing else.
 *
 * The rules it applies are the problem's (problem.h): a dropped group is freed at the end of
 * its layer's forward; a group needed by a backward op and not resident is rebuilt on demand
 * just before it, on the compute stream, together with every dependency that is not
 * resident (which then stays until its own consumer) and every dropped sibling produced by
 * the same ops; a group assigned to a window is rebuilt in that window's latest valid
 * occurrence, where the rebuild costs nothing while the window's idle time lasts and delays
 * the compute stream by what exceeds it, and it holds memory from that occurrence to its
 * consumer. Memory is counted after every allocation: static memory, the embedding's and the
 * head's activations, and every resident group of every layer and micro-batch.
 *
 * Not modelled (yet): OFFLOAD decisions are refused; rebuilds in a window run at full speed
 * beside the collective (no contention for SMs or memory bandwidth).
 */
#ifndef LYNX_POLICY_CHECKER_H
#define LYNX_POLICY_CHECKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plan.h"
#include "problem.h"

struct lynx_checker_result {
	double step_time_s; /* the slowest stage's end, optimizer step included */
	bool fits;          /* every stage's peak is within the problem's budget */
	uint32_t n_stages;
	uint64_t *peak_bytes;     /* per stage */
	double *end_s;            /* per stage: when its optimizer step ends */
	double window_work_s;     /* recompute run in windows, all stages and micro-batches */
	double window_overflow_s; /* the part of it that delayed a compute stream */
	double on_demand_s;       /* recompute on a compute stream's critical path */
	uint64_t fallbacks;       /* window decisions rebuilt on demand: no valid occurrence came */
};

/*
 * Replays plan on problem p into out. Returns 0; -EINVAL when the plan does not fit the
 * problem (lynx_plan_validate()), uses OFFLOAD, or needs a group that cannot be rebuilt, with
 * one sentence in why; -ENOMEM. On success the caller frees out with lynx_checker_free(); on
 * failure out holds nothing to free. O(m · L · (ops + groups)) time and O(m · L · groups)
 * memory per iteration: milliseconds for the GPT presets.
 */
int lynx_checker_replay(const struct lynx_problem *p, const struct lynx_plan *plan,
                        struct lynx_checker_result *out, char *why, size_t len);

void lynx_checker_free(struct lynx_checker_result *c);

#endif /* LYNX_POLICY_CHECKER_H */
