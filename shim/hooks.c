/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The exported wrappers, generated from hooks.def: for every hook, the wrapper, the
 * resolver its real-table entry starts as, and (GENERIC hooks) the active body that
 * counts, forwards and records.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "executor.h"
#include "hooks.h"
#include "log.h"
#include "record.h"

/* ---- Resolving real functions --------------------------------------------------------- */

/* libcuda.so.1 as the process loaded it (the driver is never loaded by Lynx itself unless
 * a driver hook is called, which means the trainer asked for the driver). */
static void *libcuda_handle(void)
{
	static void *_Atomic handle;
	void *h = atomic_load_explicit(&handle, memory_order_acquire);

	if (!h) {
		h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
		if (!h)
			h = dlopen("libcuda.so.1", RTLD_LAZY);
		atomic_store_explicit(&handle, h, memory_order_release);
	}
	return h;
}

/*
 * symbol in the libraries loaded after Lynx, else in the loaded library `soname`. The
 * second look is for libraries a program loaded into a local scope, which RTLD_NEXT does
 * not search: Python's extension modules and ctypes.CDLL load so, and PyTorch's wheels load
 * libnccl.so.2 (a dependency of libtorch_cuda.so, and preloaded by ctypes) that way. The
 * program's calls still reach Lynx: the preloaded library comes first in every scope.
 */
static void *loaded_symbol(const char *soname, const char *symbol)
{
	void *real = lynx_real_dlsym(RTLD_NEXT, symbol), *lib;

	if (real)
		return real;
	lib = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
	if (!lib)
		return NULL;
	real = lynx_real_dlsym(lib, symbol);
	dlclose(lib); /* RTLD_NOLOAD took a reference; the program still holds its own */
	return real;
}

void *lynx_resolve_real(enum lynx_hook_id id)
{
	const struct lynx_hook_info *hook = &lynx_hooks[id];
	char name[128];

	switch (hook->layer) {
	case LYNX_LAYER_RUNTIME:
		return loaded_symbol("libcudart.so.13", hook->symbol);
	case LYNX_LAYER_DRIVER:
		return libcuda_handle() ? lynx_real_dlsym(libcuda_handle(), hook->symbol) : NULL;
	case LYNX_LAYER_NCCL:
		/* ncclX in NCCL is a weak alias of the strong pncclX, which Lynx does not
		 * define: the real function is always reachable under that name. */
		snprintf(name, sizeof(name), "p%s", hook->symbol);
		return loaded_symbol("libnccl.so.2", name);
	}
	return NULL;
}

/*
 * A communicator's size and this rank in it, from NCCL itself (ncclCommSplit's caller
 * names a key, not a rank). Off the common path: communicators are made a few times per
 * job. Leaves *nranks 0 and *rank -1 when NCCL cannot say.
 */
static void comm_shape(ncclComm_t comm, int *nranks, int *rank)
{
	ncclResult_t (*count)(const ncclComm_t, int *) =
	        (ncclResult_t(*)(const ncclComm_t, int *))loaded_symbol("libnccl.so.2",
	                                                                "pncclCommCount");
	ncclResult_t (*user_rank)(const ncclComm_t, int *) =
	        (ncclResult_t(*)(const ncclComm_t, int *))loaded_symbol("libnccl.so.2",
	                                                                "pncclCommUserRank");
	int n = 0, r = -1;

	if (!count || !user_rank || count(comm, &n) != ncclSuccess ||
	    user_rank(comm, &r) != ncclSuccess || n < 1 || r < 0 || r >= n)
		return;
	*nranks = n;
	*rank = r;
}

/* What a hook returns when the real library lacks the function. */
#define LYNX_MISSING_RUNTIME cudaErrorNotSupported
#define LYNX_MISSING_DRIVER CUDA_ERROR_NOT_SUPPORTED
#define LYNX_MISSING_NCCL ncclInternalError

#define LYNX_HOOK(layer, symbol, procname, version, variant, kind, body, ret, params, args,        \
                  record)                                                                          \
	static ret resolve_##symbol params                                                         \
	{                                                                                          \
		void *real = lynx_resolve_real(LYNX_HOOK_##symbol);                                \
		if (!real) {                                                                       \
			lynx_warn_once("%s: not found in the loaded library", #symbol);            \
			return LYNX_MISSING_##layer;                                               \
		}                                                                                  \
		/* Only over this resolver: a test's fake or lynx_launches_refuse stays. */        \
		ret(*expected) params = resolve_##symbol;                                          \
		atomic_compare_exchange_strong(&lynx_real.symbol, &expected, (ret(*) params)real); \
		return lynx_real_fn(symbol) args;                                                  \
	}
#include "hooks.def"
#undef LYNX_HOOK

struct lynx_real_table lynx_real = {
#define LYNX_HOOK(layer, symbol, ...) .symbol = resolve_##symbol,
#include "hooks.def"
#undef LYNX_HOOK
};

/* ---- Generic active bodies ------------------------------------------------------------- */

/* Record expressions of hooks.def, over the hook's own parameter names. `result` is the
 * real function's return value; outputs are read only when it succeeded. */
#define LYNX_AS_U64(x) ((uint64_t)(uintptr_t)(x))
#define LYNX_RECORD_NONE()
#define LYNX_RECORD_ALLOC(out, bytes, stream)                                       \
	lynx_record_mem(call.event, result == 0 && (out) ? LYNX_AS_U64(*(out)) : 0, \
	                (uint64_t)(bytes), LYNX_AS_U64(stream))
#define LYNX_RECORD_FREE(ptr, stream) \
	lynx_record_mem(call.event, LYNX_AS_U64(ptr), 0, LYNX_AS_U64(stream))
#define LYNX_RECORD_MEMSET(ptr, bytes, stream) \
	lynx_record_mem(call.event, LYNX_AS_U64(ptr), (uint64_t)(bytes), LYNX_AS_U64(stream))
#define LYNX_RECORD_MEM(ptr, bytes) \
	lynx_record_mem(call.event, LYNX_AS_U64(ptr), (uint64_t)(bytes), 0)
#define LYNX_RECORD_COPY(dst, src, bytes, direction, stream)                                \
	lynx_record_copy(call.event, LYNX_AS_U64(dst), LYNX_AS_U64(src), (uint64_t)(bytes), \
	                 (int)(direction), LYNX_AS_U64(stream))
#define LYNX_RECORD_NEW_HANDLE(out) \
	lynx_record_handle(call.event, 0, result == 0 && (out) ? LYNX_AS_U64(*(out)) : 0)
#define LYNX_RECORD_HANDLE(stream, handle) \
	lynx_record_handle(call.event, LYNX_AS_U64(stream), LYNX_AS_U64(handle))
#define LYNX_RECORD_LAUNCH(function, grid, block, shared, stream)                           \
	lynx_record_launch(call.event, LYNX_AS_U64(function), (grid).x, (grid).y, (grid).z, \
	                   (block).x, (block).y, (block).z, (uint32_t)(shared),             \
	                   LYNX_AS_U64(stream))
#define LYNX_RECORD_LAUNCH_CONFIG(config, function) \
	lynx_record_launch_config(call.event, (config), LYNX_AS_U64(function))
#define LYNX_RECORD_NCCL(send, recv, count, type, op, peer, comm, stream)                     \
	lynx_record_nccl(call.event, LYNX_AS_U64(send), LYNX_AS_U64(recv), (uint64_t)(count), \
	                 (int)(type), (int)(op), (int)(peer), LYNX_AS_U64(comm),              \
	                 LYNX_AS_U64(stream))
/* A group call took effect: ncclInProgress is a non-blocking communicator's success. */
#define LYNX_GROUP_TOOK(result) ((result) == ncclSuccess || (result) == ncclInProgress)
#define LYNX_RECORD_GROUP(delta)                                                      \
	do {                                                                          \
		lynx_record_group(call.event, LYNX_GROUP_TOOK(result) ? (delta) : 0); \
		if ((delta) < 0 && lynx_group_depth == 0)                             \
			lynx_time_group_ended();                                      \
	} while (0)
/* A new communicator: its handle, and its size and this rank in it (ncclInProgress is a
 * non-blocking communicator on its way; its shape is known from the arguments). Its unique
 * id, the same on every rank, names the job's run when it is the largest (lifecycle.h). */
#define LYNX_RECORD_COMM_INIT(out, nranks, rank, id)                                   \
	do {                                                                           \
		bool made_ = result == ncclSuccess || result == ncclInProgress;        \
		lynx_record_comm(call.event, made_ && (out) ? LYNX_AS_U64(*(out)) : 0, \
		                 made_ ? (nranks) : 0, made_ ? (rank) : -1);           \
		if (made_)                                                             \
			lynx_note_nccl_rank(nranks, rank, &(id), sizeof(id));          \
	} while (0)
/* A communicator split from another: NCCL orders its ranks by key, so they are asked. */
#define LYNX_RECORD_COMM_SPLIT(out)                                                               \
	do {                                                                                      \
		int size_ = 0, rank_ = -1;                                                        \
		if (result == ncclSuccess && (out) && *(out))                                     \
			comm_shape(*(out), &size_, &rank_);                                       \
		lynx_record_comm(call.event,                                                      \
		                 result == ncclSuccess && (out) ? LYNX_AS_U64(*(out)) : 0, size_, \
		                 rank_);                                                          \
	} while (0)

/* Host synchronisations end with lynx_call_end_sync; the choice folds at compile time. */
#define LYNX_END(kind) (LYNX_EV_##kind == LYNX_EV_SYNC ? lynx_call_end_sync : lynx_call_end)

/* Which record kinds are stream-ordered work, timed on the device while the profiler
 * learns (lynx_time_begin): the stream is their last argument, or the launch config's. */
#define LYNX_TIME_NONE()
#define LYNX_TIME_ALLOC(out, bytes, stream)
#define LYNX_TIME_FREE(ptr, stream)
#define LYNX_TIME_MEMSET(ptr, bytes, stream) lynx_time_begin(&call, LYNX_AS_U64(stream))
#define LYNX_TIME_MEM(ptr, bytes)
#define LYNX_TIME_COPY(dst, src, bytes, direction, stream) \
	lynx_time_begin(&call, LYNX_AS_U64(stream))
#define LYNX_TIME_NEW_HANDLE(out)
#define LYNX_TIME_HANDLE(stream, handle)
#define LYNX_TIME_LAUNCH(function, grid, block, shared, stream) \
	lynx_time_begin(&call, LYNX_AS_U64(stream))
#define LYNX_TIME_LAUNCH_CONFIG(config, function) \
	lynx_time_begin(&call, (config) ? LYNX_AS_U64((config)->stream) : 0)
#define LYNX_TIME_NCCL(send, recv, count, type, op, peer, comm, stream) \
	lynx_time_begin(&call, LYNX_AS_U64(stream))
#define LYNX_TIME_GROUP(delta)
#define LYNX_TIME_COMM_INIT(out, nranks, rank, id)
#define LYNX_TIME_COMM_SPLIT(out)

/*
 * What recompute mode's executor (executor.h) does before the real call, by record kind:
 * true when it served the call itself (an activation's allocation or free in its arena),
 * which the hook then reports as a success without calling the real function. The guard
 * looks at every device address the call names. One load each when there is nothing to do.
 */
#define LYNX_EXEC_NONE() false
#define LYNX_EXEC_ALLOC(out, bytes, stream) \
	lynx_exec_alloc(call.id, (void *)(out), (uint64_t)(bytes), LYNX_AS_U64(stream))
#define LYNX_EXEC_FREE(ptr, stream) lynx_exec_free(call.id, LYNX_AS_U64(ptr), LYNX_AS_U64(stream))
#define LYNX_EXEC_MEMSET(ptr, bytes, stream) \
	(lynx_exec_guard(call.id, LYNX_AS_U64(ptr), LYNX_AS_U64(stream)), false)
#define LYNX_EXEC_MEM(ptr, bytes) false
#define LYNX_EXEC_COPY(dst, src, bytes, direction, stream)                \
	(lynx_exec_guard(call.id, LYNX_AS_U64(dst), LYNX_AS_U64(stream)), \
	 lynx_exec_guard(call.id, LYNX_AS_U64(src), LYNX_AS_U64(stream)), false)
#define LYNX_EXEC_NEW_HANDLE(out) false
#define LYNX_EXEC_HANDLE(stream, handle) false
#define LYNX_EXEC_LAUNCH(function, grid, block, shared, stream) false /* at the driver launch */
#define LYNX_EXEC_LAUNCH_CONFIG(config, function) false
#define LYNX_EXEC_NCCL(send, recv, count, type, op, peer, comm, stream)                        \
	(lynx_exec_guard(call.id, LYNX_AS_U64(send), LYNX_AS_U64(stream)),                     \
	 lynx_exec_guard(call.id, LYNX_AS_U64(recv), LYNX_AS_U64(stream)),                     \
	 lynx_exec_window(call.id, LYNX_AS_U64(send), LYNX_AS_U64(recv), LYNX_AS_U64(stream)), \
	 false)
#define LYNX_EXEC_GROUP(delta) false
#define LYNX_EXEC_COMM_INIT(out, nranks, rank, id) false
#define LYNX_EXEC_COMM_SPLIT(out) false

/*
 * Whether the call is refused because data was lost (hooks.h, lynx_data_lost), by record
 * kind: every kind but the runtime's launches, whose nested driver launch refuses (the
 * driver launches refuse through lynx_launches_refuse, at no cost until then).
 */
#define LYNX_LOST_CHECK_NONE() lynx_data_is_lost()
#define LYNX_LOST_CHECK_ALLOC(out, bytes, stream) lynx_data_is_lost()
#define LYNX_LOST_CHECK_FREE(ptr, stream) lynx_data_is_lost()
#define LYNX_LOST_CHECK_MEMSET(ptr, bytes, stream) lynx_data_is_lost()
#define LYNX_LOST_CHECK_MEM(ptr, bytes) lynx_data_is_lost()
#define LYNX_LOST_CHECK_COPY(dst, src, bytes, direction, stream) lynx_data_is_lost()
#define LYNX_LOST_CHECK_NEW_HANDLE(out) lynx_data_is_lost()
#define LYNX_LOST_CHECK_HANDLE(stream, handle) lynx_data_is_lost()
#define LYNX_LOST_CHECK_LAUNCH(function, grid, block, shared, stream) false
#define LYNX_LOST_CHECK_LAUNCH_CONFIG(config, function) false
#define LYNX_LOST_CHECK_NCCL(send, recv, count, type, op, peer, comm, stream) lynx_data_is_lost()
#define LYNX_LOST_CHECK_GROUP(delta) lynx_data_is_lost()
#define LYNX_LOST_CHECK_COMM_INIT(out, nranks, rank, id) lynx_data_is_lost()
#define LYNX_LOST_CHECK_COMM_SPLIT(out) lynx_data_is_lost()

#define LYNX_HOOK(layer, symbol, procname, version, variant, kind, body, ret, params, args, \
                  record)                                                                   \
	LYNX_ACTIVE_##body(layer, symbol, kind, ret, params, args, record)
#define LYNX_ACTIVE_CUSTOM(layer, symbol, kind, ret, params, args, record)
/* The data-lost check comes after the executor's guard, which may be what lost it. */
#define LYNX_ACTIVE_GENERIC(layer, symbol, kind, ret, params, args, record) \
	static ret lynx_active_##symbol params                              \
	{                                                                   \
		struct lynx_call call;                                      \
		ret result;                                                 \
                                                                            \
		lynx_call_begin(&call, LYNX_HOOK_##symbol);                 \
		LYNX_TIME_##record;                                         \
		if (LYNX_EXEC_##record)                                     \
			result = (ret)0;                                    \
		else if (LYNX_LOST_CHECK_##record)                          \
			result = LYNX_LOST_##layer;                         \
		else                                                        \
			result = lynx_real_fn(symbol) args;                 \
		lynx_call_reserve(&call, 0);                                \
		LYNX_RECORD_##record;                                       \
		LYNX_END(kind)(&call, (int)result);                         \
		return result;                                              \
	}
#include "hooks.def"
#undef LYNX_HOOK
#undef LYNX_ACTIVE_CUSTOM
#undef LYNX_ACTIVE_GENERIC

/* ---- Exported wrappers ------------------------------------------------------------------ */

/*
 * Each wrapper also gets a hidden alias, lynx_wrap_<symbol>, which the answer table
 * points to: inside a shared library, the address of an exported name is whatever wins
 * symbol lookup, and the table must name Lynx's own wrapper.
 */
#define LYNX_HOOK(layer, symbol, procname, version, variant, kind, body, ret, params, args, \
                  record)                                                                   \
	LYNX_EXPORT ret symbol params                                                       \
	{                                                                                   \
		if (!atomic_load_explicit(&lynx_intercepting, memory_order_relaxed))        \
			return lynx_real_fn(symbol) args;                                   \
		return lynx_active_##symbol args;                                           \
	}                                                                                   \
	extern __typeof__(symbol) lynx_wrap_##symbol                                        \
	        __attribute__((alias(#symbol), visibility("hidden")));
#include "hooks.def"
#undef LYNX_HOOK

const struct lynx_hook_info lynx_hooks[LYNX_HOOK_COUNT] = {
#define LYNX_HOOK(layer, symbol, procname, version, variant, kind, body, ret, params, args, \
                  record)                                                                   \
	[LYNX_HOOK_##symbol] = {#symbol,                                                    \
	                        LYNX_PROCNAME_##layer(procname),                            \
	                        version,                                                    \
	                        LYNX_LAYER_##layer,                                         \
	                        LYNX_VARIANT_##variant,                                     \
	                        LYNX_EV_##kind,                                             \
	                        (void *)lynx_wrap_##symbol},
#define LYNX_PROCNAME_RUNTIME(procname) NULL
#define LYNX_PROCNAME_DRIVER(procname) #procname
#define LYNX_PROCNAME_NCCL(procname) NULL
#include "hooks.def"
#undef LYNX_HOOK
};

/* ---- Answers for cuGetProcAddress and dlsym ------------------------------------------------ */

/*
 * Linear in the hooks (196); called when a library looks entry points up (start-up,
 * dlsym), never per CUDA call. The candidate's real function is resolved on the way, so
 * the comparison is with what the driver would have handed out.
 */
void *lynx_wrapper_for(const char *name, void *real)
{
	if (!name || !real)
		return real;
	for (int id = 0; id < LYNX_HOOK_COUNT; id++) {
		const struct lynx_hook_info *hook = &lynx_hooks[id];
		bool named = !strcmp(hook->symbol, name) ||
		             (hook->procname && !strcmp(hook->procname, name));
		if (!named || hook->layer == LYNX_LAYER_RUNTIME)
			continue;
		if (lynx_resolve_real((enum lynx_hook_id)id) == real)
			return hook->wrapper;
	}
	return real;
}
