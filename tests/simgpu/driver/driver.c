/* SPDX-License-Identifier: Apache-2.0 */
/* simgpu driver: initialisation, version, devices and primary contexts. */
#include <stdatomic.h>
#include <string.h>

#include "driver.h"

/*
 * One primary context per device, as in CUDA, so that a runtime that retains the
 * context of device n and makes it current reads n back from cuCtxGetDevice. All
 * devices are the same simulated device: a context is only a handle naming its ordinal.
 * Static, so that nothing is allocated or freed (libcuda.so.1 may be dlclosed).
 */
#define MAX_DEVICES SIMGPU_MAX_DEVICES

struct CUctx_st {
	atomic_int refcount;
};

static struct CUctx_st primary_ctx[MAX_DEVICES];
static _Thread_local struct CUctx_st *current_ctx;

/* The primary context of a valid device; NULL beyond MAX_DEVICES. */
static struct CUctx_st *primary_ctx_of(CUdevice dev)
{
	return dev < MAX_DEVICES ? &primary_ctx[dev] : NULL;
}

static CUdevice ctx_device(const struct CUctx_st *ctx)
{
	return (CUdevice)(ctx - primary_ctx);
}

bool simgpu_driver_device_valid(CUdevice dev)
{
	return dev >= 0 && dev < simgpu_device_count();
}

CUdevice simgpu_driver_current_device(void)
{
	return current_ctx ? ctx_device(current_ctx) : 0;
}

/* True if ctx is the primary context of one of this process's devices. */
static bool ctx_valid(const struct CUctx_st *ctx)
{
	return ctx >= primary_ctx && ctx < primary_ctx + MAX_DEVICES &&
	       simgpu_driver_device_valid(ctx_device(ctx));
}

SIMGPU_EXPORT CUresult cuInit(unsigned int Flags)
{
	int fault = simgpu_api_enter(SIMGPU_API_cuInit);

	if (fault)
		return (CUresult)fault;
	if (Flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	return simgpu_core_init();
}
SIMGPU_DRIVER_LOCAL_NAME(cuInit);

SIMGPU_EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
	int fault = simgpu_api_enter(SIMGPU_API_cuDriverGetVersion);

	if (fault)
		return (CUresult)fault;
	if (!driverVersion)
		return CUDA_ERROR_INVALID_VALUE;
	*driverVersion = SIMGPU_DRIVER_VERSION;
	return CUDA_SUCCESS;
}
SIMGPU_DRIVER_LOCAL_NAME(cuDriverGetVersion);

/* The real runtime uses undocumented export tables; simgpu's runtime needs none. */
SIMGPU_EXPORT CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
	int fault = simgpu_api_enter(SIMGPU_API_cuGetExportTable);

	if (fault)
		return (CUresult)fault;
	if (ppExportTable)
		*ppExportTable = NULL;
	return CUDA_ERROR_NOT_SUPPORTED;
}
SIMGPU_DRIVER_LOCAL_NAME(cuGetExportTable);

/* ---- Devices --------------------------------------------------------------------------- */

SIMGPU_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuDeviceGet);

	if (err)
		return err;
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (!simgpu_driver_device_valid(ordinal))
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}
SIMGPU_DRIVER_LOCAL_NAME(cuDeviceGet);

SIMGPU_EXPORT CUresult cuDeviceGetCount(int *count)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuDeviceGetCount);

	if (err)
		return err;
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = simgpu_device_count();
	return CUDA_SUCCESS;
}
SIMGPU_DRIVER_LOCAL_NAME(cuDeviceGetCount);

/* Truncates to len - 1 characters, as CUDA does. */
SIMGPU_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuDeviceGetName);
	const char *src;
	size_t n;

	if (err)
		return err;
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!simgpu_driver_device_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	src = simgpu_device_info()->name;
	n = strnlen(src, (size_t)len - 1);
	memcpy(name, src, n);
	name[n] = '\0';
	return CUDA_SUCCESS;
}
SIMGPU_DRIVER_LOCAL_NAME(cuDeviceGetName);

/*
 * Attributes from the device description, and H200 (SXM, compute capability 9.0) values
 * for the rest, so that cudaGetDeviceProperties fills a plausible cudaDeviceProp.
 * Anything not listed answers 0: a feature simgpu does not model is "not supported".
 */
static int device_attribute(CUdevice_attribute attrib, CUdevice dev)
{
	const struct simgpu_device_info *info = simgpu_device_info();

	switch (attrib) {
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
		return info->sm_count;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
		return info->cc_major;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
		return info->cc_minor;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
		return info->max_threads_per_block;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
		return 64;
	case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
		return info->warp_size;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
	case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
		return 2147483647;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
		return 65535;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
		return 48 * 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
		return 227 * 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
		return 228 * 1024;
	case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK:
		return 1024;
	case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
		return 64 * 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
		return 64 * 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
		return 2048;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
		return 32;
	case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
		return 1980000; /* kHz */
	case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
		return 3201000; /* kHz */
	case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
		return 6144; /* bits */
	case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
		return 50 * 1024 * 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE:
		return 30 * 1024 * 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE:
		return 128 * 1024 * 1024;
	case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
	case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT:
	case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
		return 512;
	case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
		return 2;
	case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO:
		return 2;
	case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
		return 0x18 + dev;
	case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT:
		return 4;
	case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
	case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
	case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
	case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
	case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
	case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS:
		return 1;
	default:
		return 0;
	}
}

SIMGPU_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuDeviceGetAttribute);

	if (err)
		return err;
	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	if (!simgpu_driver_device_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	*pi = device_attribute(attrib, dev);
	return CUDA_SUCCESS;
}
SIMGPU_DRIVER_LOCAL_NAME(cuDeviceGetAttribute);

SIMGPU_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuDeviceTotalMem_v2);

	if (err)
		return err;
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (!simgpu_driver_device_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	*bytes = simgpu_device_info()->total_bytes;
	return CUDA_SUCCESS;
}
SIMGPU_DRIVER_LOCAL_NAME(cuDeviceTotalMem_v2);

/* ---- Contexts -------------------------------------------------------------------------- */

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuDevicePrimaryCtxRetain);
	struct CUctx_st *ctx;

	if (err)
		return err;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (!simgpu_driver_device_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	ctx = primary_ctx_of(dev);
	if (!ctx)
		return CUDA_ERROR_INVALID_DEVICE;
	atomic_fetch_add(&ctx->refcount, 1);
	*pctx = ctx;
	return CUDA_SUCCESS;
}
SIMGPU_DRIVER_LOCAL_NAME(cuDevicePrimaryCtxRetain);

/*
 * The context stays usable when its count drops to zero: simgpu has one device state
 * per process, which a context does not own.
 */
SIMGPU_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuDevicePrimaryCtxRelease_v2);
	struct CUctx_st *ctx;
	int count;

	if (err)
		return err;
	if (!simgpu_driver_device_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	ctx = primary_ctx_of(dev);
	if (!ctx)
		return CUDA_ERROR_INVALID_DEVICE;
	count = atomic_load(&ctx->refcount);
	do {
		if (count == 0)
			return CUDA_ERROR_INVALID_CONTEXT;
	} while (!atomic_compare_exchange_weak(&ctx->refcount, &count, count - 1));
	return CUDA_SUCCESS;
}
SIMGPU_DRIVER_LOCAL_NAME(cuDevicePrimaryCtxRelease_v2);

SIMGPU_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuCtxGetCurrent);

	if (err)
		return err;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = current_ctx;
	return CUDA_SUCCESS;
}
SIMGPU_DRIVER_LOCAL_NAME(cuCtxGetCurrent);

/* NULL unbinds the calling thread, as in CUDA. */
SIMGPU_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuCtxSetCurrent);

	if (err)
		return err;
	if (ctx && !ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	current_ctx = ctx;
	return CUDA_SUCCESS;
}
SIMGPU_DRIVER_LOCAL_NAME(cuCtxSetCurrent);

/*
 * Device 0 when the thread has no current context, where CUDA would answer
 * CUDA_ERROR_INVALID_CONTEXT: simgpu's runtime may ask before it made one current.
 */
SIMGPU_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuCtxGetDevice);

	if (err)
		return err;
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	*device = current_ctx ? ctx_device(current_ctx) : 0;
	return CUDA_SUCCESS;
}
SIMGPU_DRIVER_LOCAL_NAME(cuCtxGetDevice);

/* CUDA 13.0: the context is named; NULL means the calling thread's current one. */
SIMGPU_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuCtxGetDevice_v2);

	if (err)
		return err;
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (ctx && !ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!ctx)
		ctx = current_ctx;
	*device = ctx ? ctx_device(ctx) : 0;
	return CUDA_SUCCESS;
}
SIMGPU_DRIVER_LOCAL_NAME(cuCtxGetDevice_v2);

SIMGPU_EXPORT CUresult cuCtxSynchronize(void)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuCtxSynchronize);

	if (err)
		return err;
	return simgpu_ctx_synchronize();
}
SIMGPU_DRIVER_LOCAL_NAME(cuCtxSynchronize);

/* All contexts share the one simulated device: synchronising any is synchronising it. */
SIMGPU_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuCtxSynchronize_v2);

	if (err)
		return err;
	if (ctx && !ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	return simgpu_ctx_synchronize();
}
SIMGPU_DRIVER_LOCAL_NAME(cuCtxSynchronize_v2);

/* Either pointer may be NULL, as in CUDA. */
SIMGPU_EXPORT CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuCtxGetStreamPriorityRange);
	int least, greatest;

	if (err)
		return err;
	simgpu_stream_priority_range(&least, &greatest);
	if (leastPriority)
		*leastPriority = least;
	if (greatestPriority)
		*greatestPriority = greatest;
	return CUDA_SUCCESS;
}
SIMGPU_DRIVER_LOCAL_NAME(cuCtxGetStreamPriorityRange);
