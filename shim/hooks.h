/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the hooks share: ids, the real-function table, the hook descriptions and the
 * call bracket every active hook body runs inside.
 *
 * Every exported wrapper has the same shape: when Lynx does not intercept (LYNX_MODE=off,
 * or before the first call decided it), one predictable branch and an indirect call to
 * the real function; otherwise lynx_active_<symbol>, which counts the call, calls the real
 * function, and records an event unless the shim itself is the caller.
 *
 * Thread safety: everything here may be used from any thread; no locks on these paths.
 */
#ifndef LYNX_HOOKS_H
#define LYNX_HOOKS_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* nccl.h pulls in the fp16/bf16 headers, which trip -Wundef and -Wstrict-prototypes. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "recorder.h"

#define LYNX_EXPORT __attribute__((visibility("default")))

/* nccl.h declares these without a prototype. */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

/* The CUDA 13 headers declare these for C++ only. */
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                               size_t sharedMem, cudaStream_t stream);
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                    size_t sharedMem, cudaStream_t stream);

enum lynx_hook_id {
#define LYNX_HOOK(layer, symbol, ...) LYNX_HOOK_##symbol,
#include "hooks.def"
#undef LYNX_HOOK
	LYNX_HOOK_COUNT
};

enum lynx_layer { LYNX_LAYER_RUNTIME, LYNX_LAYER_DRIVER, LYNX_LAYER_NCCL };
enum lynx_variant { LYNX_VARIANT_PLAIN, LYNX_VARIANT_PTSZ, LYNX_VARIANT_PTDS };

struct lynx_hook_info {
	const char *symbol;
	const char *procname;
	int version;
	uint8_t layer;   /* enum lynx_layer */
	uint8_t variant; /* enum lynx_variant */
	uint8_t kind;    /* enum lynx_event_kind */
	void *wrapper;   /* the exported wrapper: what cuGetProcAddress and dlsym hand out */
};
extern const struct lynx_hook_info lynx_hooks[LYNX_HOOK_COUNT];

/*
 * The real functions. Each entry starts as a resolver that looks the real function up
 * (dlsym) on first use, stores it and calls it, so the wrappers never test for it.
 * Tests may store fakes here (the SQLite aSyscall[] pattern).
 */
struct lynx_real_table {
#define LYNX_HOOK(layer, symbol, procname, version, variant, kind, body, ret, params, args, \
                  record)                                                                   \
	ret(*_Atomic symbol) params;
#include "hooks.def"
#undef LYNX_HOOK
};
extern struct lynx_real_table lynx_real;

#define lynx_real_fn(symbol) atomic_load_explicit(&lynx_real.symbol, memory_order_relaxed)

/* False in LYNX_MODE=off: the wrappers then only forward. True before the first call,
 * which decides. */
extern atomic_bool lynx_intercepting;

/* Calls each hook received while intercepting (the shim's own calls included). */
extern _Atomic uint64_t lynx_calls[LYNX_HOOK_COUNT];

/* The bracket around one intercepted call. */
struct lynx_call {
	struct lynx_event *event; /* NULL: not recorded (the shim's own call, ring full, or not
	                             profiling) */
	enum lynx_hook_id id;
	uint32_t mark_start;   /* timing.h mark recorded before the real call; 0: not timed */
	uint64_t timed_stream; /* the stream that mark went to */
};

/* Before the real call: counts it, notes that the thread is inside a hook, and runs the
 * one-time initialisation on the first call. */
void lynx_call_begin(struct lynx_call *call, enum lynx_hook_id id);
/* After the real call: reserves the call's event with payload_bytes of payload, unless
 * the shim itself is the caller (lynx_nested_begin) or Lynx is not recording; calls the
 * library made inside another hook carry LYNX_EVENT_NESTED (they are committed before
 * the outer call's event). Returns the event, also in call->event, or NULL. */
struct lynx_event *lynx_call_reserve(struct lynx_call *call, size_t payload_bytes);
/* Commits the event with the real function's result. After a top-level host
 * synchronisation, lynx_call_end_sync also lets the online profiler (profiling.h) look at
 * what it has learnt. */
void lynx_call_end(struct lynx_call *call, int result);
/* lynx_call_end for the hooks that make the host wait for the device (kind SYNC). */
void lynx_call_end_sync(struct lynx_call *call, int result);

/*
 * Device timing of stream-ordered work (launches, copies, memsets, NCCL calls) while the
 * profiler learns: a mark on the stream before the real call (here) and one after it
 * (lynx_call_reserve). NCCL calls inside a group are issued at the outermost
 * ncclGroupEnd, so their end marks wait for it (lynx_time_group_ended). Only top-level
 * calls are timed, never during a graph capture, never the shim's own calls. Off the
 * warm-up, one relaxed load. Kernel-level timing (lynx_timing_kernels) covers one sampled
 * warm-up iteration; the others time their NCCL calls and the first stream-ordered call
 * after each host synchronisation only (the iteration's anchors).
 *
 * lynx_slow_paths: the hot paths' reasons to leave the common case, one bit each, so
 * that a driver launch checks timing and the executor's guard (executor.h) in one load.
 */
extern _Atomic uint32_t lynx_slow_paths;
#define LYNX_SLOW_TIMING 1u /* device timing while the profiler learns */
#define LYNX_SLOW_GUARD 2u  /* recompute mode has activations not plainly resident */
#define LYNX_SLOW_LOST 4u   /* lynx_data_lost: the program's calls fail from now on */
/* Sets or clears one of the bits above (the others are left as they are). */
void lynx_slow_path_switch(uint32_t bit, bool on);

/*
 * Lynx lost bytes of the trainer's that it cannot rebuild (an activation neither restored
 * nor replayed, memory an examination could not put back). The trainer must not go on as
 * if nothing happened: from this call on, every launch, copy, memset, allocation,
 * synchronisation and NCCL call of the program fails, as after a sticky device fault, with
 * the errors below, and stderr says why (fmt: what was lost), once, whatever LYNX_LOG says.
 * The shim's own calls go on (they do not pass through the hooks' bodies).
 */
void lynx_data_lost(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* lynx_data_lost's part for the driver's launches (hooks_launch.c). */
void lynx_launches_refuse(void);
#define LYNX_LOST_RUNTIME cudaErrorLaunchFailure
#define LYNX_LOST_DRIVER CUDA_ERROR_LAUNCH_FAILED
#define LYNX_LOST_NCCL ncclUnhandledCudaError
static inline bool lynx_data_is_lost(void)
{
	return __builtin_expect(
	        atomic_load_explicit(&lynx_slow_paths, memory_order_relaxed) & LYNX_SLOW_LOST, 0);
}
/* While timing: every kind of stream-ordered work (the sampled iteration), or only NCCL
 * calls (the rest of warm-up). */
extern atomic_bool lynx_timing_kernels;
void lynx_time_begin_slow(struct lynx_call *call, uint64_t stream);
static inline void lynx_time_begin(struct lynx_call *call, uint64_t stream)
{
	if (__builtin_expect(atomic_load_explicit(&lynx_slow_paths, memory_order_relaxed) &
	                             LYNX_SLOW_TIMING,
	                     0))
		lynx_time_begin_slow(call, stream);
}
/* After the outermost ncclGroupEnd on this thread: records the deferred end marks. */
void lynx_time_group_ended(void);

/* ncclCommInitRank's rank and size, for the largest communicator seen: the process's rank
 * in the job (its profile is profile.<rank>.json). -1 until one is created. That
 * communicator's unique id (id[0..len), hashed) names the job's run (lifecycle.h's
 * lynx_job_run) when nothing in the environment does. */
void lynx_note_nccl_rank(int nranks, int rank, const void *id, size_t len);
int lynx_job_rank(void);
int lynx_job_world(void);
/* True when LYNX_OUT is a pattern that may give the job's processes different directories
 * (%p, %h, %q{VAR}): the ranks then see no profile but their own. */
bool lynx_output_private(void);
/* Intercepted calls in progress on this thread (1: the program's own call; more: the
 * library called back into a hook), and whether the shim itself is the caller. */
int lynx_call_depth(void);
bool lynx_call_own(void);

/* Around calls the shim makes itself (e.g. parameter layout queries): they are counted,
 * like any call through a wrapper, but not recorded. */
void lynx_nested_begin(void);
void lynx_nested_end(void);

/*
 * Stream capture (hooks_graph.c). The begin-capture hooks count a capture when the real
 * call succeeds; the end-capture hooks uncount it when the capture ended, whether it
 * succeeded or failed with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED or _UNJOINED (the other
 * errors leave it open). A runtime call and the driver call it makes change the count
 * once. Streams that joined a capture (by waiting on an event recorded in it) are not
 * counted: they leave it with the stream where it began.
 *
 * DESIGN.md: "while any stream captures, Lynx observes only". lynx_capture_active() is
 * what the executor checks before it issues any CUDA call of its own (an eviction, a
 * restore, a replay, a synchronisation): while it is true, the executor does nothing and
 * the hooks only forward and record, since under CUDA's Global capture mode an unsafe call
 * on any thread (cudaMalloc, a blocking copy, a synchronisation) would invalidate the
 * trainer's capture. A relaxed load: a capture that another thread begins just after the
 * check is not seen, so the executor must also treat a capture error from its own call as
 * "back off", never as a failure to report to the trainer. Lock-free, callable anywhere.
 */
extern _Atomic int lynx_capturing_streams;
static inline bool lynx_capture_active(void)
{
	return atomic_load_explicit(&lynx_capturing_streams, memory_order_relaxed) > 0;
}

/* The active bodies of CUSTOM hooks (hooks_procaddr.c, hooks_launch.c, hooks_graph.c). */
#define LYNX_HOOK(layer, symbol, procname, version, variant, kind, body, ret, params, args, \
                  record)                                                                   \
	LYNX_DECLARE_ACTIVE_##body(symbol, ret, params)
#define LYNX_DECLARE_ACTIVE_GENERIC(symbol, ret, params)
#define LYNX_DECLARE_ACTIVE_CUSTOM(symbol, ret, params) ret lynx_active_##symbol params;
#include "hooks.def"
#undef LYNX_HOOK
#undef LYNX_DECLARE_ACTIVE_GENERIC
#undef LYNX_DECLARE_ACTIVE_CUSTOM

/*
 * The wrapper that stands for a real driver or NCCL function pointer, if Lynx hooks it;
 * else real itself. Used by cuGetProcAddress, cudaGetDriverEntryPoint and dlsym answers.
 * procname (or symbol) narrows the search; real is compared with each candidate's real
 * function, so the answer is exactly the ABI the caller was given.
 */
void *lynx_wrapper_for(const char *name, void *real);

/* The name of a kernel some hooked launch ran (from the launch layout cache, filled at
 * its first launch), or NULL if Lynx has not seen it launched. Lock-free. */
const char *lynx_launch_function_name(uint64_t function);

/* The same name, and in *name_hash the hash of the whole name (lynx_fnv1a_string(); 0
 * without a name): what signatures take a kernel by (profiler/event.h). Lock-free. */
const char *lynx_launch_function_identity(uint64_t function, uint64_t *name_hash);

/* Resolves hook id's real function now (dlsym); NULL if the library lacks it. */
void *lynx_resolve_real(enum lynx_hook_id id);

/* The real dlsym (interpose_dlsym.c), for the shim's own lookups. */
void *lynx_real_dlsym(void *handle, const char *name);

#endif /* LYNX_HOOKS_H */
