/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Runtime kernel launches and host functions. In simgpu a kernel's host stub (what
 * simgpu_kernel_register returns) is also its CUfunction and its CUkernel, so the runtime
 * hands the stub to the driver as it is; the driver refuses what it does not know.
 */
#include <limits.h>
#include <string.h>

#include "runtime.h"

/*
 * Most launch attributes cudaLaunchKernelExC accepts. There are 17 attribute ids, each
 * meaningful once, so a longer list is a caller's mistake; the bound keeps the
 * translated copy on the stack.
 */
#define LAUNCH_ATTRS_MAX 32

_Static_assert(sizeof(cudaLaunchAttribute) == sizeof(CUlaunchAttribute),
               "cudaLaunchAttribute and CUlaunchAttribute must have the same layout");
_Static_assert(sizeof(cudaLaunchAttributeValue) == sizeof(CUlaunchAttributeValue),
               "launch attribute values must have the same layout");
_Static_assert((int)cudaLaunchAttributePriority == (int)CU_LAUNCH_ATTRIBUTE_PRIORITY,
               "launch attribute ids must share their values");

/* A launch the driver refuses for its function handle is an invalid device function. */
static cudaError_t launch_result(CUresult res)
{
	if (res == CUDA_ERROR_INVALID_HANDLE)
		return simgpu_runtime_fail(cudaErrorInvalidDeviceFunction);
	return simgpu_runtime_result(res);
}

static cudaError_t launch(enum simgpu_api_id id, enum simgpu_runtime_need need, const void *func,
                          dim3 grid, dim3 block, void **args, size_t shared_mem,
                          cudaStream_t stream)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	if (shared_mem > UINT_MAX)
		return simgpu_runtime_fail(cudaErrorInvalidValue);
	return launch_result(drv->cuLaunchKernel((CUfunction)func, grid.x, grid.y, grid.z, block.x,
	                                         block.y, block.z, (unsigned int)shared_mem, stream,
	                                         args, NULL));
}

SIMGPU_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim,
                                           void **args, size_t sharedMem, cudaStream_t stream)
{
	return launch(SIMGPU_API_cudaLaunchKernel, SIMGPU_RUNTIME_LEGACY, func, gridDim, blockDim,
	              args, sharedMem, stream);
}

SIMGPU_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
                                                void **args, size_t sharedMem, cudaStream_t stream)
{
	return launch(SIMGPU_API_cudaLaunchKernel_ptsz, SIMGPU_RUNTIME_PER_THREAD, func, gridDim,
	              blockDim, args, sharedMem, stream);
}

SIMGPU_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                             void **args, size_t sharedMem, cudaStream_t stream)
{
	return launch(SIMGPU_API___cudaLaunchKernel, SIMGPU_RUNTIME_LEGACY, kernel, gridDim,
	              blockDim, args, sharedMem, stream);
}

SIMGPU_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                                  void **args, size_t sharedMem,
                                                  cudaStream_t stream)
{
	return launch(SIMGPU_API___cudaLaunchKernel_ptsz, SIMGPU_RUNTIME_PER_THREAD, kernel,
	              gridDim, blockDim, args, sharedMem, stream);
}

/*
 * The driver's function behind a host stub, checked with cuKernelGetFunction: a stub
 * the driver does not know is an invalid device function. have_result says whether the
 * caller was given somewhere to put the answer.
 */
static cudaError_t stub_function(enum simgpu_api_id id, const void *stub, bool have_result,
                                 CUfunction *out)
{
	const struct simgpu_runtime_driver *drv;
	CUresult res;
	cudaError_t err = simgpu_runtime_enter(id, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	if (!have_result)
		return simgpu_runtime_fail(cudaErrorInvalidValue);
	if (!stub)
		return simgpu_runtime_fail(cudaErrorInvalidDeviceFunction);
	res = drv->cuKernelGetFunction(out, (CUkernel)stub);
	if (res == CUDA_ERROR_INVALID_HANDLE || res == CUDA_ERROR_NOT_FOUND)
		return simgpu_runtime_fail(cudaErrorInvalidDeviceFunction);
	return simgpu_runtime_result(res);
}

/* What nvcc's <<<>>> calls once per kernel (CUDA 13): the stub is the kernel handle. */
SIMGPU_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr)
{
	CUfunction func;
	cudaError_t err =
	        stub_function(SIMGPU_API___cudaGetKernel, entryFuncAddr, kernelPtr != NULL, &func);

	if (err != cudaSuccess)
		return err;
	*kernelPtr = (cudaKernel_t)entryFuncAddr;
	return cudaSuccess;
}

SIMGPU_EXPORT cudaError_t cudaGetFuncBySymbol(cudaFunction_t *functionPtr, const void *symbolPtr)
{
	CUfunction func;
	cudaError_t err = stub_function(SIMGPU_API_cudaGetFuncBySymbol, symbolPtr,
	                                functionPtr != NULL, &func);

	if (err != cudaSuccess)
		return err;
	*functionPtr = (cudaFunction_t)func;
	return cudaSuccess;
}

/* cudaLaunchConfig_t -> CUlaunchConfig; the attribute ids and values share their layout. */
static cudaError_t launch_ex(enum simgpu_api_id id, enum simgpu_runtime_need need,
                             const cudaLaunchConfig_t *config, const void *func, void **args)
{
	const struct simgpu_runtime_driver *drv;
	CUlaunchAttribute attrs[LAUNCH_ATTRS_MAX];
	CUlaunchConfig cu_config;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	if (!config || config->dynamicSmemBytes > UINT_MAX || config->numAttrs > LAUNCH_ATTRS_MAX ||
	    (config->numAttrs && !config->attrs))
		return simgpu_runtime_fail(cudaErrorInvalidValue);
	for (unsigned int i = 0; i < config->numAttrs; i++) {
		memset(&attrs[i], 0, sizeof(attrs[i]));
		attrs[i].id = (CUlaunchAttributeID)config->attrs[i].id;
		memcpy(&attrs[i].value, &config->attrs[i].val, sizeof(attrs[i].value));
	}
	cu_config = (CUlaunchConfig){
	        .gridDimX = config->gridDim.x,
	        .gridDimY = config->gridDim.y,
	        .gridDimZ = config->gridDim.z,
	        .blockDimX = config->blockDim.x,
	        .blockDimY = config->blockDim.y,
	        .blockDimZ = config->blockDim.z,
	        .sharedMemBytes = (unsigned int)config->dynamicSmemBytes,
	        .hStream = config->stream,
	        .attrs = config->numAttrs ? attrs : NULL,
	        .numAttrs = config->numAttrs,
	};
	return launch_result(drv->cuLaunchKernelEx(&cu_config, (CUfunction)func, args, NULL));
}

SIMGPU_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
                                              void **args)
{
	return launch_ex(SIMGPU_API_cudaLaunchKernelExC, SIMGPU_RUNTIME_LEGACY, config, func, args);
}

SIMGPU_EXPORT cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config,
                                                   const void *func, void **args)
{
	return launch_ex(SIMGPU_API_cudaLaunchKernelExC_ptsz, SIMGPU_RUNTIME_PER_THREAD, config,
	                 func, args);
}

static cudaError_t launch_host_func(enum simgpu_api_id id, enum simgpu_runtime_need need,
                                    cudaStream_t stream, cudaHostFn_t fn, void *user_data)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuLaunchHostFunc(stream, fn, user_data));
}

SIMGPU_EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
	return launch_host_func(SIMGPU_API_cudaLaunchHostFunc, SIMGPU_RUNTIME_LEGACY, stream, fn,
	                        userData);
}

SIMGPU_EXPORT cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn,
                                                  void *userData)
{
	return launch_host_func(SIMGPU_API_cudaLaunchHostFunc_ptsz, SIMGPU_RUNTIME_PER_THREAD,
	                        stream, fn, userData);
}
