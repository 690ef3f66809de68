/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Driver launches (cuLaunchKernel, cuLaunchKernelEx and their per-thread forms): each
 * recorded with its function, geometry and parameter bytes, given as kernelParams or packed
 * in `extra`, and a launch config's attributes (launch_attrs.h). Parameter layouts come from
 * cuFuncGetParamInfo (or cuKernelGetParamInfo, for CUkernel handles), asked once per
 * function and cached in an insert-only, lock-free table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor.h"
#include "fnv.h"
#include "hooks.h"
#include "launch_attrs.h"
#include "log.h"
#include "record.h"

/* Parameters beyond these are not captured (the event says how many there were). */
#define MAX_PARAMS 128
#define MAX_PARAM_BYTES LYNX_LAUNCH_MAX_PARAM_BYTES
#define CACHE_SLOTS 4096 /* power of two; functions beyond it are looked up every launch */

struct func_info {
	uint64_t function;
	uint32_t count; /* parameters */
	uint32_t bytes; /* end of the last parameter: the packed buffer's size */
	bool gaps;      /* alignment padding between parameters: zeroed in the payload */
	uint32_t fits;  /* leading parameters that lie within MAX_PARAM_BYTES */
	uint32_t offset[MAX_PARAMS], size[MAX_PARAMS];
	char name[128];     /* cuFuncGetName's (or cuKernelGetName's) answer, or "" */
	uint64_t name_hash; /* lynx_fnv1a_string(name), 0 without a name */
};

static struct func_info *_Atomic cache[CACHE_SLOTS];

/* Asks the driver for the layout, through Lynx's own wrappers, so that the calls are
 * counted like the trainer's (simgpu and Lynx then agree on every count). */
static struct func_info *query_layout(uint64_t function)
{
	struct func_info *info = calloc(1, sizeof(*info));
	bool kernel = false;

	if (!info)
		return NULL;
	info->function = function;
	for (uint32_t i = 0; i < MAX_PARAMS; i++) {
		size_t offset = 0, size = 0;
		CUresult r = kernel ? cuKernelGetParamInfo((CUkernel)(uintptr_t)function, i,
		                                           &offset, &size)
		                    : cuFuncGetParamInfo((CUfunction)(uintptr_t)function, i,
		                                         &offset, &size);
		/* A CUkernel handle passed where a CUfunction is expected: ask the other way. */
		if (i == 0 && !kernel && r == CUDA_ERROR_INVALID_HANDLE) {
			kernel = true;
			i--;
			continue;
		}
		if (r != CUDA_SUCCESS)
			break;
		info->offset[i] = (uint32_t)offset;
		info->size[i] = (uint32_t)size;
		info->count = i + 1;
		if (offset + size > info->bytes)
			info->bytes = (uint32_t)(offset + size);
	}
	const char *name = NULL;
	if ((kernel ? cuKernelGetName(&name, (CUkernel)(uintptr_t)function)
	            : cuFuncGetName(&name, (CUfunction)(uintptr_t)function)) == CUDA_SUCCESS &&
	    name && *name) {
		snprintf(info->name, sizeof(info->name), "%s", name);
		/* Hashed once here, not per launch, and whole: templated kernels' mangled
		 * names can share the first 127 characters. Signatures take a kernel by it. */
		info->name_hash = lynx_fnv1a_string(name);
	}
	uint32_t packed = 0;
	for (uint32_t i = 0; i < info->count; i++)
		packed += info->size[i];
	info->gaps = packed != info->bytes;
	while (info->fits < info->count &&
	       info->offset[info->fits] + info->size[info->fits] <= MAX_PARAM_BYTES)
		info->fits++;
	return info;
}

static struct func_info *layout_lookup(uint64_t function)
{
	uint64_t h = function * 0x9E3779B97F4A7C15ull;

	for (uint32_t probe = 0; probe < 16; probe++) {
		uint32_t slot = (uint32_t)((h >> 40) + probe) & (CACHE_SLOTS - 1);
		struct func_info *info = atomic_load_explicit(&cache[slot], memory_order_acquire);
		if (info && info->function == function)
			return info;
		if (info)
			continue;
		/* A miss: the queries are nested calls, counted but not recorded. */
		lynx_nested_begin();
		struct func_info *fresh = query_layout(function);
		lynx_nested_end();
		struct func_info *expected = NULL;
		if (!fresh)
			return NULL;
		if (atomic_compare_exchange_strong_explicit(&cache[slot], &expected, fresh,
		                                            memory_order_acq_rel,
		                                            memory_order_acquire))
			return fresh;
		free(fresh); /* another thread filled the slot first */
		if (expected->function == function)
			return expected;
	}
	lynx_warn_once("more than %d kernels: launch parameter layouts are not cached",
	               CACHE_SLOTS);
	return NULL;
}

/* One parameter: 4- and 8-byte values (nearly all of them) without a call to memcpy. */
static inline void copy_param(unsigned char *dst, const void *src, uint32_t size)
{
	if (size == 8)
		__builtin_memcpy(dst, src, 8);
	else if (size == 4)
		__builtin_memcpy(dst, src, 4);
	else
		memcpy(dst, src, size);
}

/* The cache's first probe, inline: a launch of a known kernel costs a hash and a compare. */
static inline struct func_info *layout_of(uint64_t function)
{
	uint32_t slot = (uint32_t)((function * 0x9E3779B97F4A7C15ull) >> 40) & (CACHE_SLOTS - 1);
	struct func_info *info = atomic_load_explicit(&cache[slot], memory_order_acquire);

	return info && info->function == function ? info : layout_lookup(function);
}

/* The cached layout of a function launched before, or NULL; never queries the driver. */
static const struct func_info *cached(uint64_t function)
{
	uint32_t slot = (uint32_t)((function * 0x9E3779B97F4A7C15ull) >> 40);

	for (uint32_t probe = 0; probe < 16; probe++) {
		struct func_info *info = atomic_load_explicit(
		        &cache[(slot + probe) & (CACHE_SLOTS - 1)], memory_order_acquire);
		if (!info || info->function == function)
			return info;
	}
	return NULL;
}

const char *lynx_launch_function_name(uint64_t function)
{
	const struct func_info *info = cached(function);

	return info && info->name[0] ? info->name : NULL;
}

const char *lynx_launch_function_identity(uint64_t function, uint64_t *name_hash)
{
	const struct func_info *info = cached(function);

	*name_hash = info ? info->name_hash : 0;
	return info && info->name[0] ? info->name : NULL;
}

/* Copies the parameters (one pointer each, or one packed buffer) into the payload,
 * padding zeroed so that the same launch always records the same bytes. */
static void capture_params(struct lynx_event *ev, const struct func_info *info, void **params,
                           void **extra)
{
	unsigned char *payload = (unsigned char *)(ev + 1);
	uint32_t room = info->bytes < MAX_PARAM_BYTES ? info->bytes : MAX_PARAM_BYTES;

	ev->u.launch.param_count = info->count;
	ev->u.launch.param_bytes = room;
	if (params) {
		if (info->gaps || room < info->bytes)
			memset(payload, 0, room);
		for (uint32_t i = 0; i < info->fits; i++)
			copy_param(payload + info->offset[i], params[i], info->size[i]);
		return;
	}
	for (size_t i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
		if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER && extra[i + 1]) {
			memcpy(payload, extra[i + 1], room);
			return;
		}
	}
	memset(payload, 0, room);
}

/* The executor's guard (executor.h) over every 8-byte word of the parameters, struct
 * fields included: an evicted activation a kernel names is restored before it runs. */
static __attribute__((noinline, cold)) void guard_params(enum lynx_hook_id id,
                                                         const struct func_info *info,
                                                         void **params, void **extra,
                                                         CUstream stream)
{
	const unsigned char *packed = NULL;
	uint64_t word;

	for (size_t i = 0; !params && extra && extra[i] != CU_LAUNCH_PARAM_END; i += 2)
		if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
			packed = extra[i + 1];
	for (uint32_t i = 0; i < info->fits; i++) {
		const unsigned char *value = params   ? params[i]
		                             : packed ? packed + info->offset[i]
		                                      : NULL;
		if (!value)
			return;
		for (uint32_t at = 0; at + 8 <= info->size[i]; at += 8) {
			__builtin_memcpy(&word, value + at, 8);
			lynx_exec_guard_slow(id, word, (uint64_t)(uintptr_t)stream);
		}
	}
}

/* Before the real call: the function's layout, the executor's guard, and the event, with
 * room for the parameters. */
static inline __attribute__((always_inline)) struct func_info *
launch_begin(struct lynx_call *call, enum lynx_hook_id id, CUfunction f, CUstream stream,
             void **params, void **extra)
{
	struct func_info *info;

	info = layout_of((uint64_t)(uintptr_t)f);
	lynx_call_begin(call, id);
	/* One load for both slow paths: device timing, and the executor's guard. */
	uint32_t slow = atomic_load_explicit(&lynx_slow_paths, memory_order_acquire);
	if (__builtin_expect(slow, 0)) {
		if (slow & LYNX_SLOW_TIMING)
			lynx_time_begin_slow(call, (uint64_t)(uintptr_t)stream);
		if ((slow & LYNX_SLOW_GUARD) && info)
			guard_params(id, info, params, extra, stream);
	}
	return info;
}

/* After the real call: what was launched, where, with which parameters, and (config not
 * NULL: cuLaunchKernelEx) with which attributes. */
static inline __attribute__((always_inline)) void
launch_end(struct lynx_call *call, const struct func_info *info, CUfunction f,
           const uint32_t grid[3], const uint32_t block[3], uint32_t shared, CUstream stream,
           const CUlaunchConfig *config, void **params, void **extra, CUresult result)
{
	uint32_t param_bytes =
	        info ? (info->bytes < MAX_PARAM_BYTES ? info->bytes : MAX_PARAM_BYTES) : 0;
	uint32_t payload = config ? lynx_launch_payload_bytes(param_bytes, true, config->numAttrs)
	                          : param_bytes;

	if (lynx_call_reserve(call, payload)) {
		lynx_record_launch(call->event, (uint64_t)(uintptr_t)f, grid[0], grid[1], grid[2],
		                   block[0], block[1], block[2], shared,
		                   (uint64_t)(uintptr_t)stream);
		if (info)
			capture_params(call->event, info, params, extra);
		if (config)
			lynx_launch_attrs_record(call->event, config->attrs, config->numAttrs);
	}
	lynx_call_end(call, result);
}

CUresult lynx_active_cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                    unsigned int bx, unsigned int by, unsigned int bz,
                                    unsigned int shared, CUstream stream, void **params,
                                    void **extra)
{
	struct lynx_call call;
	struct func_info *info =
	        launch_begin(&call, LYNX_HOOK_cuLaunchKernel, f, stream, params, extra);
	CUresult result = lynx_real_fn(cuLaunchKernel)(f, gx, gy, gz, bx, by, bz, shared, stream,
	                                               params, extra);

	launch_end(&call, info, f, (uint32_t[]){gx, gy, gz}, (uint32_t[]){bx, by, bz}, shared,
	           stream, NULL, params, extra, result);
	return result;
}

CUresult lynx_active_cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                         unsigned int gz, unsigned int bx, unsigned int by,
                                         unsigned int bz, unsigned int shared, CUstream stream,
                                         void **params, void **extra)
{
	struct lynx_call call;
	struct func_info *info =
	        launch_begin(&call, LYNX_HOOK_cuLaunchKernel_ptsz, f, stream, params, extra);
	CUresult result = lynx_real_fn(cuLaunchKernel_ptsz)(f, gx, gy, gz, bx, by, bz, shared,
	                                                    stream, params, extra);

	launch_end(&call, info, f, (uint32_t[]){gx, gy, gz}, (uint32_t[]){bx, by, bz}, shared,
	           stream, NULL, params, extra, result);
	return result;
}

/* cuLaunchKernelEx: the geometry and stream come in the config, with attributes. A NULL
 * config is the driver's to refuse: recorded as a launch with no geometry. */
static void config_dims(const CUlaunchConfig *config, uint32_t grid[3], uint32_t block[3])
{
	grid[0] = config ? config->gridDimX : 0;
	grid[1] = config ? config->gridDimY : 0;
	grid[2] = config ? config->gridDimZ : 0;
	block[0] = config ? config->blockDimX : 0;
	block[1] = config ? config->blockDimY : 0;
	block[2] = config ? config->blockDimZ : 0;
}

CUresult lynx_active_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                                      void **extra)
{
	struct lynx_call call;
	struct func_info *info = launch_begin(&call, LYNX_HOOK_cuLaunchKernelEx, f,
	                                      config ? config->hStream : NULL, params, extra);
	CUresult result = lynx_real_fn(cuLaunchKernelEx)(config, f, params, extra);
	uint32_t grid[3], block[3];

	config_dims(config, grid, block);
	launch_end(&call, info, f, grid, block, config ? config->sharedMemBytes : 0,
	           config ? config->hStream : NULL, config, params, extra, result);
	return result;
}

CUresult lynx_active_cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                           void **params, void **extra)
{
	struct lynx_call call;
	struct func_info *info = launch_begin(&call, LYNX_HOOK_cuLaunchKernelEx_ptsz, f,
	                                      config ? config->hStream : NULL, params, extra);
	CUresult result = lynx_real_fn(cuLaunchKernelEx_ptsz)(config, f, params, extra);
	uint32_t grid[3], block[3];

	config_dims(config, grid, block);
	launch_end(&call, info, f, grid, block, config ? config->sharedMemBytes : 0,
	           config ? config->hStream : NULL, config, params, extra, result);
	return result;
}

/* ---- After lost data: the launches refuse ------------------------------------------------ */

/*
 * The driver's launches fail once data is lost (hooks.h, lynx_data_lost). Their real
 * functions are swapped for these, so that a launch pays nothing for the check until then,
 * and a launch whose own guard lost the data reads the swapped entry after the guard.
 */
static CUresult refuse_cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                      unsigned int gz, unsigned int bx, unsigned int by,
                                      unsigned int bz, unsigned int shared, CUstream stream,
                                      void **params, void **extra)
{
	return LYNX_LOST_DRIVER;
}

static CUresult refuse_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                                        void **extra)
{
	return LYNX_LOST_DRIVER;
}

void lynx_launches_refuse(void)
{
	atomic_store(&lynx_real.cuLaunchKernel, refuse_cuLaunchKernel);
	atomic_store(&lynx_real.cuLaunchKernel_ptsz, refuse_cuLaunchKernel);
	atomic_store(&lynx_real.cuLaunchKernelEx, refuse_cuLaunchKernelEx);
	atomic_store(&lynx_real.cuLaunchKernelEx_ptsz, refuse_cuLaunchKernelEx);
}
