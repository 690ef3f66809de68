/* SPDX-License-Identifier: Apache-2.0 */
/*
 * From one rank's trace to its profile: the iterations (period.h), each iteration's layer
 * segments (segment.h), allocation lifetimes and classes (lifetime.h), and the NCCL calls
 * of one iteration classified as windows.
 *
 * What each number is, until the shim times the device:
 *  - Times are host spans (source "host"): a segment [first, end) lasts from the return of
 *    the call before it to the return of its last call, so consecutive segments tile. Each
 *    layer's forward and backward time is the median over every (iteration, micro-batch)
 *    sample; the iteration's time is the median over the iterations. A window's duration
 *    and idle time are "unknown".
 *  - Kernels: the program's launches (not the driver launch nested in a runtime launch) of
 *    the first micro-batch's segment of the last iteration, by the dump's kernel name, or the
 *    function's address ("0x...") when the dump has none.
 *  - Windows: every collective and point-to-point call of the last iteration (the steady
 *    state). A collective inside a layer segment is tp_fwd/tp_bwd; a recv is pp_recv_fwd or
 *    pp_recv_bwd by the direction of the next layer segment, a send pp_send_fwd or
 *    pp_send_bwd by the previous one; a collective after the iteration's last backward
 *    segment on a communicator that no layer segment uses is dp_grad; anything else is
 *    other. Under full recompute (rerun), the collectives of a rerun forward sit in the
 *    backward segment and count as tp_bwd.
 *  - Groups: the saved activations (lifetime.h) of each layer on the first micro-batch of
 *    the last iteration, with the launch positions of their producer and consumers in that
 *    layer's segments. Memory: lifetime.h's peak, each allocation counted once.
 *
 * rank, world, the run and the environment's GPU, driver and NCCL versions are not in a dump:
 * they come from opt (NULL, -1 or a NULL run: unknown).
 */
#ifndef LYNX_PROF_BUILD_H
#define LYNX_PROF_BUILD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "event.h"
#include "period.h"
#include "profile.h"
#include "script.h"

struct lynx_prof_script;

struct lynx_prof_build_options {
	int32_t rank, world;                /* -1: unknown */
	const struct lynx_profile_run *run; /* copied into the profile; NULL: unknown */
	/* Where to put the chosen iteration's executor script (script.h), or NULL. A script
	 * that cannot be built (-EINVAL) is left empty (n_tokens 0); out of memory fails the
	 * build. */
	struct lynx_prof_script *script;
	/* Units the warm-up found not to be the iteration: their runs are left out when the
	 * iteration is looked for (period.h). */
	const struct lynx_prof_unit *not_iterations;
	size_t not_iterations_count;
};

/*
 * Builds trace's profile into out. Returns 0; -EINVAL with the reason in why (no iteration,
 * the last iteration has no layers, ...); -ENOMEM. On failure out holds nothing to free.
 * O(events x layer segments) for the windows, plus what period, segment and lifetime take.
 */
int lynx_prof_build_profile(const struct lynx_prof_trace *trace,
                            const struct lynx_prof_build_options *opt, struct lynx_profile *out,
                            char *why, size_t why_len);

/*
 * Whether the shim timed every program launch of events [first, end) on the device (and
 * there is one): device spans are then the work's time. Kernel-level timing covers one
 * sampled warm-up iteration; the others time their NCCL calls only.
 */
bool lynx_prof_fully_timed(const struct lynx_prof_trace *trace, size_t first, size_t end);

/* The size in bytes of an ncclDataType_t value; 0 for an unknown one. */
size_t lynx_prof_nccl_type_size(int32_t type);

#endif /* LYNX_PROF_BUILD_H */
