/* SPDX-License-Identifier: Apache-2.0 */
/* simgpu driver: kernel launches, host functions and kernel metadata. */
#include "driver.h"

/*
 * A registered kernel's host stub is also its CUfunction and its CUkernel, so every
 * handle kind resolves through simgpu_kernel_find.
 */
static CUresult launch(const void *f, const struct simgpu_launch_dims *dims, CUstream hStream,
                       bool per_thread, void **kernelParams, void **extra)
{
	struct simgpu_kernel *kernel = simgpu_kernel_find(f);
	struct CUstream_st *stream = simgpu_stream_get(hStream, per_thread);

	if (!kernel || !stream)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_launch(kernel, dims, stream, kernelParams, extra,
	                     simgpu_driver_current_device());
}

static CUresult launch_kernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                              unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                              unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                              bool per_thread, void **kernelParams, void **extra)
{
	struct simgpu_launch_dims dims = {
	        .grid = {gridDimX, gridDimY, gridDimZ},
	        .block = {blockDimX, blockDimY, blockDimZ},
	        .shared_mem_bytes = sharedMemBytes,
	};

	return launch(f, &dims, hStream, per_thread, kernelParams, extra);
}

/* Launch attributes (clusters, priorities, programmatic serialisation) are not modelled. */
static CUresult launch_kernel_ex(const CUlaunchConfig *config, CUfunction f, bool per_thread,
                                 void **kernelParams, void **extra)
{
	struct simgpu_launch_dims dims;

	if (!config || (config->numAttrs && !config->attrs))
		return CUDA_ERROR_INVALID_VALUE;
	dims = (struct simgpu_launch_dims){
	        .grid = {config->gridDimX, config->gridDimY, config->gridDimZ},
	        .block = {config->blockDimX, config->blockDimY, config->blockDimZ},
	        .shared_mem_bytes = config->sharedMemBytes,
	};
	return launch(f, &dims, config->hStream, per_thread, kernelParams, extra);
}

static CUresult launch_host_func(CUstream hStream, CUhostFn fn, void *userData, bool per_thread)
{
	struct CUstream_st *stream = simgpu_stream_get(hStream, per_thread);

	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	if (!stream)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_launch_host_func(stream, fn, userData);
}

/* Either out-pointer may be NULL. Past the last parameter: CUDA_ERROR_INVALID_VALUE. */
static CUresult param_info(const void *handle, size_t index, size_t *offset, size_t *size)
{
	const struct simgpu_kernel *kernel = simgpu_kernel_find(handle);
	size_t off, sz;
	CUresult res;

	if (!kernel)
		return CUDA_ERROR_INVALID_HANDLE;
	res = simgpu_kernel_param_info(kernel, index, &off, &sz);
	if (res != CUDA_SUCCESS)
		return res;
	if (offset)
		*offset = off;
	if (size)
		*size = sz;
	return CUDA_SUCCESS;
}

static CUresult kernel_name(const char **name, const void *handle)
{
	const struct simgpu_kernel *kernel = simgpu_kernel_find(handle);

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!kernel)
		return CUDA_ERROR_INVALID_HANDLE;
	*name = simgpu_kernel_name(kernel);
	return CUDA_SUCCESS;
}

/* ---- Launches -------------------------------------------------------------------------- */

SIMGPU_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                      unsigned int gridDimZ, unsigned int blockDimX,
                                      unsigned int blockDimY, unsigned int blockDimZ,
                                      unsigned int sharedMemBytes, CUstream hStream,
                                      void **kernelParams, void **extra)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuLaunchKernel);

	if (err)
		return err;
	return launch_kernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
	                     sharedMemBytes, hStream, false, kernelParams, extra);
}
SIMGPU_DRIVER_LOCAL_NAME(cuLaunchKernel);

SIMGPU_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                           unsigned int gridDimY, unsigned int gridDimZ,
                                           unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes,
                                           CUstream hStream, void **kernelParams, void **extra)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuLaunchKernel_ptsz);

	if (err)
		return err;
	return launch_kernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
	                     sharedMemBytes, hStream, true, kernelParams, extra);
}
SIMGPU_DRIVER_LOCAL_NAME(cuLaunchKernel_ptsz);

SIMGPU_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
                                        void **kernelParams, void **extra)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuLaunchKernelEx);

	if (err)
		return err;
	return launch_kernel_ex(config, f, false, kernelParams, extra);
}
SIMGPU_DRIVER_LOCAL_NAME(cuLaunchKernelEx);

SIMGPU_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                             void **kernelParams, void **extra)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuLaunchKernelEx_ptsz);

	if (err)
		return err;
	return launch_kernel_ex(config, f, true, kernelParams, extra);
}
SIMGPU_DRIVER_LOCAL_NAME(cuLaunchKernelEx_ptsz);

SIMGPU_EXPORT CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuLaunchHostFunc);

	if (err)
		return err;
	return launch_host_func(hStream, fn, userData, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuLaunchHostFunc);

SIMGPU_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuLaunchHostFunc_ptsz);

	if (err)
		return err;
	return launch_host_func(hStream, fn, userData, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuLaunchHostFunc_ptsz);

/* ---- Kernel metadata ------------------------------------------------------------------- */

SIMGPU_EXPORT CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                          size_t *paramSize)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuFuncGetParamInfo);

	if (err)
		return err;
	return param_info(func, paramIndex, paramOffset, paramSize);
}
SIMGPU_DRIVER_LOCAL_NAME(cuFuncGetParamInfo);

SIMGPU_EXPORT CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset,
                                            size_t *paramSize)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuKernelGetParamInfo);

	if (err)
		return err;
	return param_info(kernel, paramIndex, paramOffset, paramSize);
}
SIMGPU_DRIVER_LOCAL_NAME(cuKernelGetParamInfo);

SIMGPU_EXPORT CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuFuncGetName);

	if (err)
		return err;
	return kernel_name(name, hfunc);
}
SIMGPU_DRIVER_LOCAL_NAME(cuFuncGetName);

SIMGPU_EXPORT CUresult cuKernelGetName(const char **name, CUkernel hfunc)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuKernelGetName);

	if (err)
		return err;
	return kernel_name(name, hfunc);
}
SIMGPU_DRIVER_LOCAL_NAME(cuKernelGetName);

/* The CUfunction of a registered kernel is the same pointer as its CUkernel. */
SIMGPU_EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuKernelGetFunction);

	if (err)
		return err;
	if (!pFunc)
		return CUDA_ERROR_INVALID_VALUE;
	if (!simgpu_kernel_find(kernel))
		return CUDA_ERROR_INVALID_HANDLE;
	*pFunc = (CUfunction)kernel;
	return CUDA_SUCCESS;
}
SIMGPU_DRIVER_LOCAL_NAME(cuKernelGetFunction);
