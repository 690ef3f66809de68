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
 * head's activations, and every resident group of every layer and micro-batch; while a
 * rebuild runs, also the largest scratch of the groups it rebuilds (problem.h: a replay's
 * workspace).
 *
 * Offloading (Yuan et al., USENIX ATC'24, as policy/offload.c plans it). An offloaded group is
 * copied to host memory by the stage's device-to-host copy engine, queued when its producer
 * ends; it stays resident until that copy ends. The compute stream waits for it only where
 * an allocation would take the stage over its budget: as Lynx's executor holds a budget, the
 * allocation first waits for the copies out in flight, which free their groups as they end
 * (counted in offload_wait_s; on a slow link the budget then costs time, not memory).
 * Kuaishou's offloading (problems from models) also paces itself: a forward pass's copies out
 * run while the next forward pass runs, and the pass after that waits for them (counted in
 * offload_wait_s too). Its prefetch is issued one backward pass ahead (under interleaved
 * 1F1B, the stage's next backward pass's chunk): the offloaded groups of micro-batch j are brought
 * back from the start of the backward of j - 1 (for j = 0, from the start of the forward just
 * before the first backward; never before j's forward ended, which matters on the last stage),
 * in the order the backward consumes them, into buffers allocated at issue and freed after
 * their consumer. A host-to-device copy starts when the engine is free and the group's copy
 * out has ended; a group still being copied out when its prefetch is issued holds its memory
 * and its buffer until then (queued copies are not taken back). Each engine is FIFO, one per
 * direction, and a copy of B bytes takes latency + B / busbw of the problem's d2h or h2d
 * link. When a consumer's prefetch has not ended, the compute stream waits: that wait is
 * offloading's time cost. A problem built from profiles (restore_by_layer) restores as
 * Lynx's executor does instead: each layer's offloaded groups as the host issues that
 * layer's backward, which, the host running ahead of the device, is counted from the start
 * of the backward of the layer above it (the top layer's from its own).
 *
 * A rebuild that reads an offloaded group not on the device brings it back first, as the
 * executor does: its buffer is allocated then, its copy queued on the host-to-device engine,
 * and the rebuild (and the compute stream, or the window's idle time) waits for it; its
 * prefetch later finds it there. A rebuild also waits for a prefetch still under way of a
 * group it reads.
 *
 * Not modelled: rebuilds in a window run at full speed beside the collective (no contention
 * for SMs or memory bandwidth); copies do not contend with collectives or pipeline transfers
 * that share PCIe (a100-pcie), nor slow the kernels.
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
	uint64_t offload_bytes;   /* copied to host memory, all stages and micro-batches */
	double offload_wait_s; /* compute streams' waits for prefetches and copies out, all stages
	                        */
};

/*
 * Replays plan on problem p into out. Returns 0; -EINVAL when the plan does not fit the
 * problem (lynx_plan_validate()), offloads without a host link, or needs a group that cannot
 * be rebuilt, with one sentence in why; -ENOMEM.
 * On success the caller frees out with lynx_checker_free(); on failure out holds nothing to
 * free. O(m · L · (ops + groups)) time and O(m · L · groups) memory per iteration:
 * milliseconds for the GPT presets.
 */
int lynx_checker_replay(const struct lynx_problem *p, const struct lynx_plan *plan,
                        struct lynx_checker_result *out, char *why, size_t len);

void lynx_checker_free(struct lynx_checker_result *c);

/* Stores r's step time, fit and per-stage peaks in plan, as its prediction. */
void lynx_checker_store(const struct lynx_checker_result *r, struct lynx_plan *plan);

/*
 * The planners' refinement step: lowers plan to what the executor runs (lynx_plan_lower()),
 * replays it, stores the checker's step time, fit and
 * per-stage peaks in it, and, when tighten is set, lowers budget[s] by the excess of each
 * stage that overflows p's budget (while the excess is below budget[s]). redo[s] says
 * whether stage s was lowered and must be planned again; *again whether any was. Without
 * tighten, budget and redo may be NULL (to replay and store only). Returns
 * lynx_checker_replay()'s error, with why.
 */
int lynx_checker_settle(const struct lynx_problem *p, struct lynx_plan *plan, bool tighten,
                        uint64_t *budget, bool *redo, bool *again, char *why, size_t len);

#endif /* LYNX_POLICY_CHECKER_H */
