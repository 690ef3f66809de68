/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The executor: recompute mode's hands. Armed once a plan exists (profiling.c), it follows
 * the live calls along the learned iteration (profiler/script.h), serves the allocations
 * of the activations the plan evicts from the VMM arena (arena.h), evicts each one once its
 * forward is done with it, and brings it back before its backward needs it.
 *
 * Eviction (DESIGN.md, "Eviction and restoration"). After the call that last uses an
 * activation in the forward, an event is recorded on that call's stream; the offload
 * stream waits for it and copies the activation into pinned host memory; once that copy is
 * seen complete (polled at later calls, never waited for), the activation's memory is
 * unmapped and released, its address kept. Restoration maps new memory at the address and
 * copies the bytes back: at the script's restore token (its layer's backward begins), on
 * the restore stream, or, if a call touches the activation before that (the guard), on the
 * call's own stream first. Consumers on any stream wait for the restore's event before
 * they run. So correctness never depends on a window arriving: the guard restores
 * whatever a call touches.
 *
 * Memory is reused in stream order, as a stream-ordered allocator does: the host runs far
 * ahead of the device and sees copies and frees end late, so an allocation or a restore
 * first takes the memory of an activation whose copy or free is queued (arena.h's
 * alloc_from and restore_from), its stream waiting for that point. To keep the plan's
 * budget, it may instead wait for such a point on the host (lynx_exec_arm).
 *
 * What the plan says and what is done: OFFLOAD is done as above. RECOMPUTE decisions are
 * done by kernel replay (replay.h). The tracker captures each such activation's
 * producer: the first driver launch (cuLaunchKernel or cuLaunchKernelEx, made by the program
 * or by the runtime's launch it called) after its allocation whose parameters name it, and
 * the launches of the same function right after it that name it too. The first
 * instance is still evicted by copy; when the guard restores it, the producer is replayed
 * into scratch beside it and examined (lynx_replay_examine, the device idle): only a
 * producer that reproduces it bit for bit, reading nothing its parameters do not name, is
 * replayed from then on. Later instances are then evicted without a copy (unmapped once
 * the call that last used them is done) and, when the guard finds one evicted, the
 * producer captured in that iteration is relaunched on the consumer's own stream, in
 * stream order: its inputs hold what they held when it was examined, at the same point of
 * the same iteration. Memory it writes besides the activation (a workspace) goes to
 * scratch; evicted activations it reads are restored first; with several trainer streams
 * it is fenced against the others both ways. A refused producer, or an instance whose
 * producer was not seen, is offloaded as before; the reason is logged.
 *
 * Windows. A RECOMPUTE decision may name the NCCL call in whose idle time it is to be
 * replayed (the plan's RECOMPUTE_IN_WINDOW, mapped to a token). Before that call is
 * issued, an event marks how far each trainer stream got; after it, the producer is
 * relaunched on the low-priority replay stream behind those marks, so it runs while the
 * collective does, and every trainer stream waits for it before its next work. The
 * replay then reads what the trainer's streams held at the window, which is not what they
 * hold at the consumer. So one instance after the examination is offloaded again, and at
 * its window the producer is replayed just as it will be there, but into scratch, whose
 * bytes are copied to the host and compared with the offloaded ones once both copies are
 * done (no host wait): equal, and later instances are replayed in their window; different,
 * or a check that cannot be made, and on demand. The replay stream's work between the
 * marks and the replay comes from the thread that made the window's call. A producer that reads a
 * buffer of the window's own collective (which runs beside it) is replayed on demand. Correctness
 * still never depends on a window: an instance not brought back in its window is replayed by the
 * guard.
 *
 * Limits: the guard sees pointers in kernel parameters (also inside by-value structs),
 * copies, memsets and NCCL buffers; a kernel that reads an activation's address from device
 * memory, or a CUDA graph launched after capture, is not seen. Nothing is done while a
 * stream captures a graph. The tracker passes over host synchronisations that differ from
 * the script (one more, or some fewer: they change neither the work nor the memory); it is
 * lost at the first other call that differs and resynchronises at the next iteration's
 * start; while lost nothing new is evicted. Forward and backward calls must not interleave across
 * threads (they do not under 1F1B with PyTorch autograd or tinytrain).
 *
 * Thread safety: every entry point may be called from any trainer thread; the state is
 * under one mutex. Once armed, the tracker takes it at each of the program's top-level
 * calls (a signature and a compare); allocations, frees and the guard take it only for the
 * arena's allocations (lynx_arena_find, lock-free, decides). Before arming, and for calls
 * the executor has nothing to do with, the hooks pay one atomic load.
 */
#ifndef LYNX_EXECUTOR_H
#define LYNX_EXECUTOR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "faults.h"
#include "hooks.h"
#include "profile.h"
#include "recorder.h"
#include "script.h"

/* What the executor does with one scripted activation: X(ID, name). */
#define LYNX_EXEC_ACTIONS(X)                                                         \
	X(KEEP, "keep")           /* served by the trainer's allocator, untouched */ \
	X(OFFLOAD, "offload")     /* evicted, restored by copy from host */          \
	X(RECOMPUTE, "recompute") /* evicted, restored by replaying its producer */

enum lynx_exec_action {
#define LYNX_EXEC_ACTION_ENUM(id, name) LYNX_EXEC_##id,
	LYNX_EXEC_ACTIONS(LYNX_EXEC_ACTION_ENUM)
#undef LYNX_EXEC_ACTION_ENUM
	        LYNX_EXEC_ACTION_COUNT
};

enum lynx_exec_fault {
#define LYNX_EXEC_FAULT_ENUM(id, name) LYNX_EXEC_FAULT_##id,
	LYNX_EXEC_FAULTS(LYNX_EXEC_FAULT_ENUM)
#undef LYNX_EXEC_FAULT_ENUM
	        LYNX_EXEC_FAULT_COUNT
};

/* LYNX_EXEC_STAT(field, meaning): what the executor counts, for the exit summary. */
#define LYNX_EXEC_STATS                                                                          \
	LYNX_EXEC_STAT(iterations, "iterations followed from start to end")                      \
	LYNX_EXEC_STAT(lost, "times the live calls left the script")                             \
	LYNX_EXEC_STAT(syncs_passed,                                                             \
	               "host synchronisations passed over, more or fewer than learned")          \
	LYNX_EXEC_STAT(calls_missing,                                                            \
	               "other calls of the iteration that did not come, passed over")            \
	LYNX_EXEC_STAT(routed, "allocations served from the arena")                              \
	LYNX_EXEC_STAT(route_failures, "scripted allocations left to the trainer's allocator")   \
	LYNX_EXEC_STAT(reused, "allocations given memory the device was about to be done with")  \
	LYNX_EXEC_STAT(offloads, "copies to host started")                                       \
	LYNX_EXEC_STAT(evictions, "activations unmapped after their copy")                       \
	LYNX_EXEC_STAT(cancelled, "evictions cancelled: touched before their copy ended")        \
	LYNX_EXEC_STAT(prefetches, "restores started on the restore stream")                     \
	LYNX_EXEC_STAT(prefetch_failures, "restores that could not map memory in time")          \
	LYNX_EXEC_STAT(on_demand, "restores made by the guard on the consumer's stream")         \
	LYNX_EXEC_STAT(waits, "consumer streams made to wait for a restore")                     \
	LYNX_EXEC_STAT(stalls, "host waits for a copy to host whose memory was reused")          \
	LYNX_EXEC_STAT(budget_stalls, "host waits for memory, to keep the budget")               \
	LYNX_EXEC_STAT(oom_waits, "restores that first had to wait for frees")                   \
	LYNX_EXEC_STAT(failures, "driver failures (the activation stayed as it was)")            \
	LYNX_EXEC_STAT(host_waits, "stream waits that failed, made by the host instead")         \
	LYNX_EXEC_STAT(promoted, "activations the plan kept, offloaded to hold the budget")      \
	LYNX_EXEC_STAT(windows_deferred,                                                         \
	               "window rebuilds made at the activation's use, to hold the budget")       \
	LYNX_EXEC_STAT(pool_trims, "trims of the memory the default pool kept, for the budget")  \
	LYNX_EXEC_STAT(pool_trimmed_bytes, "bytes those trims gave back to the device")          \
	LYNX_EXEC_STAT(producers, "producers captured for activations planned for recompute")    \
	LYNX_EXEC_STAT(chained, "producers replayed after the writers of temporaries they read") \
	LYNX_EXEC_STAT(discards, "evictions without a copy (restored by replay)")                \
	LYNX_EXEC_STAT(replays, "restores by replaying the producer")                            \
	LYNX_EXEC_STAT(sibling_restores, "restores written in place by a sibling's replay")      \
	LYNX_EXEC_STAT(replay_failures, "replays whose launch failed (then tried again)")        \
	LYNX_EXEC_STAT(replay_scratch_bytes, "most scratch one replay took (freed after it)")    \
	LYNX_EXEC_STAT(window_replays, "replays made in their window, on the replay stream")     \
	LYNX_EXEC_STAT(window_misses, "window replays left to the guard (could not start)")      \
	LYNX_EXEC_STAT(evicted_bytes, "bytes evicted, summed")                                   \
	LYNX_EXEC_STAT(peak_evicted_bytes, "most bytes evicted at once")                         \
	LYNX_EXEC_STAT(peak_used_bytes,                                                          \
	               "most device memory in use seen (cuMemGetInfo), at actions")              \
	LYNX_EXEC_STAT(timed_iterations, "followed iterations timed on the device")              \
	LYNX_EXEC_STAT(iteration_ns, "the median of their device times (of the last 64)")

struct lynx_exec_stats {
#define LYNX_EXEC_STAT(field, meaning) uint64_t field;
	LYNX_EXEC_STATS
#undef LYNX_EXEC_STAT
};

/* True once armed: the hooks' one load before calling in. The guard's own switch is
 * hooks.h's LYNX_SLOW_GUARD bit: set while some arena allocation is not plainly resident
 * (being evicted, evicted, being restored), when there is something to look at. */
extern atomic_bool lynx_exec_armed;

/* What the plan promised this rank, and what warm-up measured without it: the summary sets
 * what was achieved beside them. */
struct lynx_exec_expectation {
	uint64_t measured_peak_bytes;   /* the profile's peak, no plan */
	uint64_t predicted_peak_bytes;  /* the plan's, for this rank's stage */
	uint64_t measured_iteration_ns; /* the profile's iteration time, no plan */
	double predicted_slowdown;      /* the plan's iteration time over keeping everything */
	/* The plan's memory budget, which the executor keeps (see lynx_exec_arm); 0: none. */
	uint64_t budget_bytes;
	/* The scratch a replay is expected to take (the profile's workspaces, which the plan
	 * left room for): kept free for it from the first planned step, before any replay has
	 * shown its own. */
	uint64_t replay_scratch_bytes;
	/* The budget is the user's (LYNX_BUDGET), not one the planner chose: an examination
	 * that would take the device over it is refused (executor_replay.c). */
	bool budget_asked;
	/* Activations below a VMM granule that the plan evicts share granules (shim/pack.h,
	 * LYNX_PACK); false: each is kept, as it would take a whole granule. */
	bool pack_small;
	/* The slowdown asked for (LYNX_MAX_SLOWDOWN, 1.02 for 2%), and its text; 0: none. An
	 * achieved one above it is warned at exit. */
	double max_slowdown;
	char max_slowdown_text[16];
	char planner[32]; /* the plan's planner, or "LYNX_PLAN" */
	/*
	 * Predicts the iteration again as the executor follows the plan: actions[i] is what
	 * scripted activation i now gets (an examination's refusal offloads a planned rebuild
	 * for good, lynx_exec's budget keeper offloads kept ones, one below a granule is kept).
	 * Sets *slowdown (over keeping everything) and *peak_bytes (device terms); returns
	 * false when it cannot. Called at the end of a followed iteration in which the actions
	 * changed, on the trainer's thread under the executor's lock: no CUDA call. NULL: the
	 * summary shows the plan's prediction alone.
	 */
	bool (*repredict)(const enum lynx_exec_action *actions, size_t n, double *slowdown,
	                  uint64_t *peak_bytes);
	/* The job these files are of, as the profile names it (the run its ranks share) and
	 * its world size (-1: unknown), written into the summary and the trace. */
	struct lynx_profile_run run;
	int world;
};

/* What to do with one scripted activation and, for RECOMPUTE, where: the token of the
 * NCCL call in whose window it is replayed, or LYNX_EXEC_NO_WINDOW (on demand). */
#define LYNX_EXEC_NO_WINDOW UINT32_MAX
struct lynx_exec_decision {
	enum lynx_exec_action action;
	uint32_t window_token;
};

/*
 * Arms the executor with script (copied) and one decision per script buffer, on the calling
 * thread's current CUDA context: creates the arena, two streams and the events.
 *
 * The budget. The host runs ahead of the device, so memory the plan counts as evicted may
 * still be held, by a copy to host or a free the host has not seen end, when the trainer
 * allocates. Before any device allocation or restore that needs new memory, while what
 * cuMemGetInfo says is in use plus the request would exceed expect->budget_bytes, the
 * executor waits for the oldest such copy or free and lets its memory go (the host stalls;
 * the device has the work queued). With nothing left to wait for it goes over. On a GPU
 * cuMemGetInfo also counts the CUDA context and other processes: the budget is then kept
 * with room to spare, at the cost of more stalls.
 *
 * Returns 0;
 * -EINVAL (a script without tokens, nothing to evict: nothing armed), -ENOMEM, or -EIO (a
 * driver call failed; logged); on failure nothing is armed and the trainer runs on
 * untouched.
 */
int lynx_exec_arm(const struct lynx_prof_script *script, const struct lynx_exec_decision *decisions,
                  const struct lynx_exec_expectation *expect, enum lynx_exec_fault fault);

/*
 * The smallest activation the executor can evict on the current device: its minimum VMM
 * granularity (a smaller one would take a whole granule, and is kept). 0 when the driver
 * cannot say. For the planner, before arming (lynx_problem_options.granule_bytes).
 */
size_t lynx_exec_eviction_granule(void);

/*
 * Hook side. Each returns at once unless armed, and ignores the shim's own calls.
 * lynx_exec_alloc: before a device allocation (hook id, its out pointer, size, stream):
 * true when the executor served it (the pointer is written; the hook skips the real call
 * and returns success). lynx_exec_free: before a free: true when ptr was the executor's
 * (freed once its stream reaches the free). lynx_exec_guard: before stream work that
 * touches addr (any address in a kernel parameter, a copy's ends, a memset, an NCCL
 * buffer) on stream: restores or waits as needed. lynx_exec_window: before an NCCL call
 * (its buffers, stream), after the guard: marks the trainer's streams if the call is a
 * window where replays are planned.
 */
bool lynx_exec_alloc_slow(enum lynx_hook_id id, void *out, uint64_t bytes, uint64_t stream);
bool lynx_exec_free_slow(enum lynx_hook_id id, uint64_t ptr, uint64_t stream);
void lynx_exec_guard_slow(enum lynx_hook_id id, uint64_t addr, uint64_t stream);
void lynx_exec_window_slow(enum lynx_hook_id id, uint64_t send, uint64_t recv, uint64_t stream);

static inline bool lynx_exec_alloc(enum lynx_hook_id id, void *out, uint64_t bytes, uint64_t stream)
{
	return __builtin_expect(atomic_load_explicit(&lynx_exec_armed, memory_order_acquire), 0) &&
	       lynx_exec_alloc_slow(id, out, bytes, stream);
}

static inline bool lynx_exec_free(enum lynx_hook_id id, uint64_t ptr, uint64_t stream)
{
	return __builtin_expect(atomic_load_explicit(&lynx_exec_armed, memory_order_acquire), 0) &&
	       lynx_exec_free_slow(id, ptr, stream);
}

static inline void lynx_exec_guard(enum lynx_hook_id id, uint64_t addr, uint64_t stream)
{
	if (__builtin_expect(atomic_load_explicit(&lynx_slow_paths, memory_order_acquire) &
	                             LYNX_SLOW_GUARD,
	                     0))
		lynx_exec_guard_slow(id, addr, stream);
}

static inline void lynx_exec_window(enum lynx_hook_id id, uint64_t send, uint64_t recv,
                                    uint64_t stream)
{
	if (__builtin_expect(atomic_load_explicit(&lynx_exec_armed, memory_order_acquire), 0))
		lynx_exec_window_slow(id, send, recv, stream);
}

/* After a top-level call of the program returned, with its event (the tracker). */
void lynx_exec_after(const struct lynx_event *ev);

/* After a driver launch nested in the program's call (the runtime's cudaLaunchKernel or
 * cudaLaunchKernelExC calling cuLaunchKernel or cuLaunchKernelEx), with its event, parameter
 * bytes and attributes: producers are captured from these. */
void lynx_exec_launched(const struct lynx_event *ev);

/* The counters so far. */
void lynx_exec_stats(struct lynx_exec_stats *out);

/* The exit summary's lines (nothing if never armed); tag prefixes each line. */
void lynx_exec_print_summary(FILE *f, const char *tag);

/*
 * Writes the summary's numbers to path (summary.<rank>.json, atomically) as JSON that
 * `lynx report` reads: {"format": "lynx-summary", "version": 1, "rank", "plan": {planner,
 * budget_bytes, max_slowdown or null, decisions {keep, offload, recompute}}, "memory":
 * {measured_peak_bytes (warm-up, no plan), predicted_peak_bytes, achieved_peak_bytes (the
 * most cuMemGetInfo showed at the executor's actions)}, "step": {measured_ns,
 * predicted_slowdown, achieved_ns (the median of the timed followed iterations; null when
 * none was timed), timed_iterations}, "evictions": {offloaded, replayed, bytes,
 * peak_bytes}, "replay": {reproduces, refused: [{verdict, count, first}]}, "stats":
 * {every LYNX_EXEC_STATS field}}. Returns 0, -ENOENT when never armed (nothing to
 * summarise), -ENOMEM or a write's -errno.
 */
int lynx_exec_write_summary(const char *path, int rank);

/* What the executor's trace shows, one slice per action: X(ID, name). */
#define LYNX_EXEC_EVENTS(X)                                                      \
	X(OFFLOAD, "offload")                     /* copy to host queued */      \
	X(EVICT, "evict")                         /* unmapped after it */        \
	X(RESTORE_AHEAD, "restore ahead")         /* at the restore token */     \
	X(RESTORE_ON_DEMAND, "restore on demand") /* by the guard */             \
	X(DISCARD, "discard")                     /* evicted without a copy */   \
	X(REPLAY, "replay")                       /* restored by its producer */ \
	X(SIBLING_REPLAY, "replay beside")        /* by a sibling's replay */    \
	X(EXAMINE, "examine")                     /* its producer, once */       \
	X(WINDOW_CHECK, "check window")           /* a replay at its window */   \
	X(WINDOW_REPLAY, "replay in window")      /* on the replay stream */     \
	X(CONSUMER_WAIT, "consumer waits")        /* a stream waits for one */   \
	X(STALL, "host stall")                    /* for a reused copy */        \
	X(BUDGET_STALL, "budget stall")           /* for memory */

/*
 * Writes the executor's first actions (up to a fixed number; the file says how many were
 * left out) as a Chrome trace at path: one track per rank, host time, a slice per action
 * with its activation's layer, micro-batch and bytes. Plain file I/O (safe at exit).
 * Returns 0, -ENOENT when the executor never ran, or -errno / -ENOMEM.
 */
int lynx_exec_write_trace(const char *path, int rank);

/* In a forked child: the parent's arena and streams are not ours; stay disarmed. */
void lynx_exec_after_fork(void);

const char *lynx_exec_action_name(enum lynx_exec_action a);

#endif /* LYNX_EXECUTOR_H */
