/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Launches made with a launch config (cuLaunchKernelEx[_ptsz], which the runtime's
 * cudaLaunchKernelExC[_ptsz] reaches): how a launch event records the config's attributes,
 * and what a replay does with each attribute.
 *
 * Recording (hooks_launch.c). A LAUNCH event's payload is the kernel's parameter bytes,
 * u.launch.param_bytes of them (at most LYNX_LAUNCH_MAX_PARAM_BYTES). A launch made with a
 * launch config has u.launch.config set and u.launch.attr_count attributes; the first
 * LYNX_LAUNCH_MAX_ATTRS of them follow the parameter bytes, by value (CUlaunchAttribute;
 * the runtime's cudaLaunchAttribute has the same layout and ids), from the next multiple
 * of 8. They are copied as the trainer gave them: one memcpy on the launch path. Their
 * values are read, and normalised, only when a replay is prepared (replay.c).
 *
 * Replay (replay.c). A kernel launched with a config is replayed through cuLaunchKernelEx,
 * on the replay's own stream (the config's hStream is never reused), with the attributes
 * LYNX_LAUNCH_ATTRS keeps. An attribute it refuses, one it does not list, or more of them
 * than a record holds make the kernel one that cannot be replayed, with a reason that says
 * which: the examination then answers UNSUPPORTED, never a replay that merely differs.
 *
 * Thread safety: everything here is a pure function of its arguments.
 */
#ifndef LYNX_LAUNCH_ATTRS_H
#define LYNX_LAUNCH_ATTRS_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "recorder.h"

/* Parameter bytes a launch event holds; a kernel's parameters beyond them are not recorded
 * (the event says how many there were). */
#define LYNX_LAUNCH_MAX_PARAM_BYTES 4096
/* Attributes a launch event holds. cuda.h defines 16 ids, each meaningful once per launch;
 * real launches give a few (cuBLASLt: a cluster and programmatic serialisation; NCCL: a
 * memory-sync domain). A launch with more cannot be replayed (the reason says so). */
#define LYNX_LAUNCH_MAX_ATTRS 8
/* The largest launch payload: what a copy of any launch event needs room for. */
#define LYNX_LAUNCH_MAX_PAYLOAD \
	(LYNX_LAUNCH_MAX_PARAM_BYTES + LYNX_LAUNCH_MAX_ATTRS * sizeof(CUlaunchAttribute))

_Static_assert(LYNX_LAUNCH_MAX_PARAM_BYTES % 8 == 0, "attributes start 8-aligned");

/* Where a launch event's attributes start in its payload: after its parameter bytes, at a
 * multiple of 8 (a CUlaunchAttribute holds pointers; the payload starts 8-aligned). */
static inline uint32_t lynx_launch_attrs_offset(uint32_t param_bytes)
{
	return (param_bytes + 7u) & ~7u;
}

/* How many of a launch's `given` attributes its event holds. */
static inline uint32_t lynx_launch_attrs_recorded(uint32_t given)
{
	return given < LYNX_LAUNCH_MAX_ATTRS ? given : LYNX_LAUNCH_MAX_ATTRS;
}

/* The payload of a launch event: param_bytes of parameters and, for a launch made with a
 * launch config (config), room for the attributes it holds of `given`. */
static inline uint32_t lynx_launch_payload_bytes(uint32_t param_bytes, bool config, uint32_t given)
{
	uint32_t n = config ? lynx_launch_attrs_recorded(given) : 0;

	return n ? lynx_launch_attrs_offset(param_bytes) + n * (uint32_t)sizeof(CUlaunchAttribute)
	         : param_bytes;
}

/*
 * Marks ev as a launch made with a launch config and copies its attributes after the
 * parameter bytes already recorded (u.launch.param_bytes). ev must have been reserved with
 * lynx_launch_payload_bytes(param_bytes, true, given). attrs NULL with `given` non-zero is
 * a launch the driver refuses (CUDA_ERROR_INVALID_VALUE): recorded with no attribute.
 * Nothing for a NULL ev (a call not recorded).
 */
static inline void lynx_launch_attrs_record(struct lynx_event *ev, const CUlaunchAttribute *attrs,
                                            uint32_t given)
{
	if (!ev)
		return;
	if (!attrs)
		given = 0;
	ev->u.launch.config = 1;
	ev->u.launch.attr_count = given < UINT16_MAX ? (uint16_t)given : UINT16_MAX;
	if (given)
		memcpy((unsigned char *)(ev + 1) +
		               lynx_launch_attrs_offset(ev->u.launch.param_bytes),
		       attrs, lynx_launch_attrs_recorded(given) * sizeof(*attrs));
}

/* The attributes a launch event holds (lynx_launch_attrs_recorded(u.launch.attr_count) of
 * them), or NULL when it holds none. */
static inline const CUlaunchAttribute *lynx_launch_attrs_of(const struct lynx_event *ev)
{
	if (!ev->u.launch.config || !ev->u.launch.attr_count)
		return NULL;
	return (const CUlaunchAttribute *)((const unsigned char *)(ev + 1) +
	                                   lynx_launch_attrs_offset(ev->u.launch.param_bytes));
}

/*
 * LYNX_LAUNCH_ATTRS(X): X(name, treatment, member, why) for every launch attribute of CUDA
 * 13.0's cuda.h (CU_LAUNCH_ATTRIBUTE_<name>), with what a replay does with it:
 *   KEEP    passed to the replay's cuLaunchKernelEx: how the kernel must be launched (a
 *           cooperative grid, clusters, the memory-fence domain), or a hint about the kernel
 *           alone, so that the replay runs it as the trainer did;
 *   DROP    left out: it ties the launch to the trainer's stream or events, or to the
 *           original run, and the kernel's results do not depend on it;
 *   REFUSE  the kernel cannot be replayed.
 * An id not listed (a later CUDA's) is refused: it might tie the launch to a stream or an
 * event. member: the field of CUlaunchAttributeValue that holds the value; a kept value is
 * copied from it and the rest of the union zeroed, so that the same launch made twice (from
 * two stack frames of the trainer's) gives the same bytes (lynx_replay_segment_refresh
 * compares them).
 */
#define LYNX_LAUNCH_ATTRS(X)                                                                    \
	X(IGNORE, DROP, pad, "an empty entry")                                                  \
	X(ACCESS_POLICY_WINDOW, DROP, accessPolicyWindow,                                       \
	  "an L2 persistence hint over an address range of the original run, which the replay " \
	  "may have moved")                                                                     \
	X(COOPERATIVE, KEEP, cooperative,                                                       \
	  "a kernel that synchronises its grid needs all its blocks resident at once")          \
	X(SYNCHRONIZATION_POLICY, DROP, syncPolicy,                                             \
	  "how the host waits on the trainer's stream, not how the kernel runs")                \
	X(CLUSTER_DIMENSION, KEEP, clusterDim,                                                  \
	  "the kernel's thread-block clusters: what it computes may depend on them")            \
	X(CLUSTER_SCHEDULING_POLICY_PREFERENCE, KEEP, clusterSchedulingPolicyPreference,        \
	  "how the kernel's clusters are spread: the kernel's own hint")                        \
	X(PROGRAMMATIC_STREAM_SERIALIZATION, DROP, programmaticStreamSerializationAllowed,      \
	  "lets the kernel start before the trainer's previous kernel on its stream ends; "     \
	  "without it the replay starts after its own stream's work, and the kernel's "         \
	  "grid-dependency wait returns at once")                                               \
	X(PROGRAMMATIC_EVENT, DROP, programmaticEvent,                                          \
	  "triggers an event of the trainer's, which a replay must not")                        \
	X(PRIORITY, DROP, priority,                                                             \
	  "the replay runs at its own stream's priority, low on purpose, so that it yields to " \
	  "the trainer")                                                                        \
	X(MEM_SYNC_DOMAIN_MAP, KEEP, memSyncDomainMap,                                          \
	  "which memory-fence domain the kernel's fences use")                                  \
	X(MEM_SYNC_DOMAIN, KEEP, memSyncDomain,                                                 \
	  "which memory-fence domain the kernel's fences use")                                  \
	X(PREFERRED_CLUSTER_DIMENSION, KEEP, preferredClusterDim,                               \
	  "the kernel's preferred clusters, beside CLUSTER_DIMENSION")                          \
	X(LAUNCH_COMPLETION_EVENT, DROP, launchCompletionEvent,                                 \
	  "triggers an event of the trainer's, which a replay must not")                        \
	X(DEVICE_UPDATABLE_KERNEL_NODE, REFUSE, deviceUpdatableKernelNode,                      \
	  "it makes a CUDA graph's node (valid only while capturing) and hands the node back")  \
	X(PREFERRED_SHARED_MEMORY_CARVEOUT, KEEP, sharedMemCarveout,                            \
	  "the kernel's shared-memory carveout hint")                                           \
	X(NVLINK_UTIL_CENTRIC_SCHEDULING, KEEP, nvlinkUtilCentricScheduling,                    \
	  "the kernel's NVLink scheduling hint")

enum lynx_launch_attr_treatment {
	LYNX_LAUNCH_ATTR_KEEP,
	LYNX_LAUNCH_ATTR_DROP,
	LYNX_LAUNCH_ATTR_REFUSE,
};

/* "CLUSTER_DIMENSION" for CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION; NULL for an id not listed. */
const char *lynx_launch_attr_name(unsigned int id);
/* What a replay does with attribute id (LYNX_LAUNCH_ATTRS); REFUSE for an id not listed. */
enum lynx_launch_attr_treatment lynx_launch_attr_treatment(unsigned int id);

/*
 * The attributes a replay of a launch passes to cuLaunchKernelEx: of the launch's `given`
 * attributes, recorded in attrs (the first lynx_launch_attrs_recorded(given)), those that
 * LYNX_LAUNCH_ATTRS keeps, in their order and normalised, into out[0..*kept). Returns NULL,
 * or why the launch cannot be replayed, written into why[0..why_size) (the returned
 * pointer): more attributes than a record holds, attributes not recorded (attrs NULL), or
 * one refused or not listed, named with its id. No allocation; O(given).
 */
const char *lynx_launch_attrs_select(const CUlaunchAttribute *attrs, uint32_t given,
                                     CUlaunchAttribute out[LYNX_LAUNCH_MAX_ATTRS], uint32_t *kept,
                                     char *why, size_t why_size);

#endif /* LYNX_LAUNCH_ATTRS_H */
