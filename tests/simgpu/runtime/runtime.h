/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simgpu's runtime layer (libcudart.so.13): what its files share.
 *
 * The runtime reaches the driver only as the real libcudart does: it dlopens
 * libcuda.so.1, looks up cuGetProcAddress_v2 and asks it for every driver function it
 * uses, once with CU_GET_PROC_ADDRESS_LEGACY_STREAM (for the plain entry points) and once
 * with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (for the _ptsz/_ptds ones). It never
 * calls the simgpu core for device work, so a shim that hooks the driver sees every call.
 * The only libsimgpu functions it calls are simgpu_api_enter and those of simgpu.h.
 *
 * Every entry point has the same shape: simgpu_runtime_enter first (counts the call,
 * returns an injected fault, runs the one-time initialisation and makes the thread's
 * device current), then argument checks, then one driver call whose CUresult is
 * translated by simgpu_runtime_result. Every failure is recorded as the thread's last
 * error (cudaGetLastError).
 *
 * Thread safety: every entry point may be called from any thread. The driver tables are
 * written once, under pthread_once, and read-only afterwards.
 */
#ifndef SIMGPU_RUNTIME_H
#define SIMGPU_RUNTIME_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>

#include "core.h"

/*
 * The driver functions the runtime uses: X(field, procname, pfn). `field` is the ABI
 * name (what cuGetProcAddress answers at CUDART_VERSION with the legacy flag), `procname`
 * the name asked for, `pfn` the cudaTypedefs.h type of that ABI. In the per-thread table
 * the same field holds the _ptsz/_ptds variant where one exists (cuda.h guarantees the
 * same signature), else the legacy function, as cuGetProcAddress documents.
 *
 * cuCtxSynchronize at 13000 is cuCtxSynchronize_v2, which takes the context to
 * synchronise (NULL: the current one).
 */
#define SIMGPU_RUNTIME_DRIVER_CALLS(X)                                                            \
	X(cuGetProcAddress_v2, "cuGetProcAddress", PFN_cuGetProcAddress_v12000)                   \
	X(cuGetErrorName, "cuGetErrorName", PFN_cuGetErrorName_v6000)                             \
	X(cuInit, "cuInit", PFN_cuInit_v2000)                                                     \
	X(cuDriverGetVersion, "cuDriverGetVersion", PFN_cuDriverGetVersion_v2020)                 \
	X(cuDeviceGet, "cuDeviceGet", PFN_cuDeviceGet_v2000)                                      \
	X(cuDeviceGetCount, "cuDeviceGetCount", PFN_cuDeviceGetCount_v2000)                       \
	X(cuDeviceGetName, "cuDeviceGetName", PFN_cuDeviceGetName_v2000)                          \
	X(cuDeviceGetAttribute, "cuDeviceGetAttribute", PFN_cuDeviceGetAttribute_v2000)           \
	X(cuDeviceTotalMem_v2, "cuDeviceTotalMem", PFN_cuDeviceTotalMem_v3020)                    \
	X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",                                   \
	  PFN_cuDevicePrimaryCtxRetain_v7000)                                                     \
	X(cuCtxSetCurrent, "cuCtxSetCurrent", PFN_cuCtxSetCurrent_v4000)                          \
	X(cuCtxSynchronize_v2, "cuCtxSynchronize", PFN_cuCtxSynchronize_v13000)                   \
	X(cuCtxGetStreamPriorityRange, "cuCtxGetStreamPriorityRange",                             \
	  PFN_cuCtxGetStreamPriorityRange_v5050)                                                  \
	X(cuMemAlloc_v2, "cuMemAlloc", PFN_cuMemAlloc_v3020)                                      \
	X(cuMemFree_v2, "cuMemFree", PFN_cuMemFree_v3020)                                         \
	X(cuMemAllocHost_v2, "cuMemAllocHost", PFN_cuMemAllocHost_v3020)                          \
	X(cuMemFreeHost, "cuMemFreeHost", PFN_cuMemFreeHost_v2000)                                \
	X(cuMemGetInfo_v2, "cuMemGetInfo", PFN_cuMemGetInfo_v3020)                                \
	X(cuMemAllocAsync, "cuMemAllocAsync", PFN_cuMemAllocAsync_v11020)                         \
	X(cuMemFreeAsync, "cuMemFreeAsync", PFN_cuMemFreeAsync_v11020)                            \
	X(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool",                                 \
	  PFN_cuDeviceGetDefaultMemPool_v11020)                                                   \
	X(cuMemPoolCreate, "cuMemPoolCreate", PFN_cuMemPoolCreate_v11020)                         \
	X(cuMemPoolDestroy, "cuMemPoolDestroy", PFN_cuMemPoolDestroy_v11020)                      \
	X(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", PFN_cuMemPoolSetAttribute_v11020)       \
	X(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", PFN_cuMemPoolGetAttribute_v11020)       \
	X(cuMemPoolTrimTo, "cuMemPoolTrimTo", PFN_cuMemPoolTrimTo_v11020)                         \
	X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", PFN_cuMemAllocFromPoolAsync_v11020) \
	X(cuMemcpy, "cuMemcpy", PFN_cuMemcpy_v4000)                                               \
	X(cuMemcpyAsync, "cuMemcpyAsync", PFN_cuMemcpyAsync_v4000)                                \
	X(cuMemsetD8_v2, "cuMemsetD8", PFN_cuMemsetD8_v3020)                                      \
	X(cuMemsetD8Async, "cuMemsetD8Async", PFN_cuMemsetD8Async_v3020)                          \
	X(cuStreamCreate, "cuStreamCreate", PFN_cuStreamCreate_v2000)                             \
	X(cuStreamCreateWithPriority, "cuStreamCreateWithPriority",                               \
	  PFN_cuStreamCreateWithPriority_v5050)                                                   \
	X(cuStreamDestroy_v2, "cuStreamDestroy", PFN_cuStreamDestroy_v4000)                       \
	X(cuStreamSynchronize, "cuStreamSynchronize", PFN_cuStreamSynchronize_v2000)              \
	X(cuStreamQuery, "cuStreamQuery", PFN_cuStreamQuery_v2000)                                \
	X(cuStreamWaitEvent, "cuStreamWaitEvent", PFN_cuStreamWaitEvent_v3020)                    \
	X(cuStreamGetPriority, "cuStreamGetPriority", PFN_cuStreamGetPriority_v5050)              \
	X(cuStreamGetFlags, "cuStreamGetFlags", PFN_cuStreamGetFlags_v5050)                       \
	X(cuStreamIsCapturing, "cuStreamIsCapturing", PFN_cuStreamIsCapturing_v10000)             \
	X(cuEventCreate, "cuEventCreate", PFN_cuEventCreate_v2000)                                \
	X(cuEventDestroy_v2, "cuEventDestroy", PFN_cuEventDestroy_v4000)                          \
	X(cuEventRecord, "cuEventRecord", PFN_cuEventRecord_v2000)                                \
	X(cuEventQuery, "cuEventQuery", PFN_cuEventQuery_v2000)                                   \
	X(cuEventSynchronize, "cuEventSynchronize", PFN_cuEventSynchronize_v2000)                 \
	X(cuEventElapsedTime_v2, "cuEventElapsedTime", PFN_cuEventElapsedTime_v12080)             \
	X(cuLaunchKernel, "cuLaunchKernel", PFN_cuLaunchKernel_v4000)                             \
	X(cuLaunchKernelEx, "cuLaunchKernelEx", PFN_cuLaunchKernelEx_v11060)                      \
	X(cuLaunchHostFunc, "cuLaunchHostFunc", PFN_cuLaunchHostFunc_v10000)                      \
	X(cuKernelGetFunction, "cuKernelGetFunction", PFN_cuKernelGetFunction_v12000)             \
	X(cuStreamBeginCapture_v2, "cuStreamBeginCapture", PFN_cuStreamBeginCapture_v10010)       \
	X(cuStreamEndCapture, "cuStreamEndCapture", PFN_cuStreamEndCapture_v10000)                \
	X(cuStreamGetCaptureInfo_v3, "cuStreamGetCaptureInfo", PFN_cuStreamGetCaptureInfo_v12030) \
	X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags",                             \
	  PFN_cuGraphInstantiateWithFlags_v11040)                                                 \
	X(cuGraphLaunch, "cuGraphLaunch", PFN_cuGraphLaunch_v10000)                               \
	X(cuGraphExecDestroy, "cuGraphExecDestroy", PFN_cuGraphExecDestroy_v10000)                \
	X(cuGraphDestroy, "cuGraphDestroy", PFN_cuGraphDestroy_v10000)

/* One table of driver entry points; the field names are the ABI names above. */
struct simgpu_runtime_driver {
#define SIMGPU_RUNTIME_DRIVER_FIELD(field, procname, pfn) pfn field;
	SIMGPU_RUNTIME_DRIVER_CALLS(SIMGPU_RUNTIME_DRIVER_FIELD)
#undef SIMGPU_RUNTIME_DRIVER_FIELD
};

/* What an entry point needs before it reaches the driver. */
enum simgpu_runtime_need {
	/* Initialisation only (device queries, entry points): no current context. */
	SIMGPU_RUNTIME_NO_CONTEXT,
	/* The thread's device current; stream handles name the legacy default stream. */
	SIMGPU_RUNTIME_LEGACY,
	/* As LEGACY, through the _ptsz/_ptds driver functions (per-thread default stream). */
	SIMGPU_RUNTIME_PER_THREAD,
};

/*
 * The first call of every entry point that reaches the driver. Calls simgpu_api_enter(id),
 * initialises the runtime once per process, makes the thread's device current if `need`
 * asks for it, and points *drv at the driver table to use. Returns cudaSuccess, or the
 * injected fault or initialisation error, already recorded as the thread's last error.
 */
cudaError_t simgpu_runtime_enter(enum simgpu_api_id id, enum simgpu_runtime_need need,
                                 const struct simgpu_runtime_driver **drv);

/* Records err as the thread's last error unless it is cudaSuccess or cudaErrorNotReady
 * (which CUDA does not treat as an error), and returns it. */
cudaError_t simgpu_runtime_fail(cudaError_t err);

/* Translates a driver result and records it (simgpu_runtime_fail). */
cudaError_t simgpu_runtime_result(CUresult res);

/* Devices the driver reported at initialisation. */
int simgpu_runtime_device_count(void);
/* The thread's current device ordinal (0 until cudaSetDevice). */
int simgpu_runtime_device(void);
/* Writes the driver handle of ordinal `device`; false if there is no such device. */
bool simgpu_runtime_device_handle(int device, CUdevice *out);
/* Makes `device` the thread's current device and its primary context current.
 * cudaErrorInvalidDevice (recorded) for an ordinal that does not exist. */
cudaError_t simgpu_runtime_set_device(int device);

/*
 * The kernel-launch entry points of crt/device_functions.h, which nvcc-generated code
 * calls for <<<>>> in CUDA 13. The CUDA headers declare them for C++ only.
 */
cudaError_t __cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                               size_t sharedMem, cudaStream_t stream);
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                    size_t sharedMem, cudaStream_t stream);

#endif /* SIMGPU_RUNTIME_H */
