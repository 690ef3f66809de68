/* SPDX-License-Identifier: Apache-2.0 */
/* tinytrain's kernel launches through cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernel
 * and cuLaunchKernelEx. */
#include <cudaTypedefs.h>
#include <stdio.h>

#include "launch.h"

/* The driver ABI asked for: CUDA 12.0's, which every entry point used here had by then. */
#define DRIVER_ABI_VERSION 12000

/* The driver's entry points, NULL until tt_launch_prepare found them. */
static PFN_cuLaunchKernel_v4000 cuLaunchKernel_entry;
static PFN_cuLaunchKernelEx_v11060 cuLaunchKernelEx_entry;

static int driver_entry_point(const char *symbol, void **fn)
{
	enum cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
	cudaError_t err;

	if (*fn)
		return 0;
	err = cudaGetDriverEntryPointByVersion(symbol, fn, DRIVER_ABI_VERSION, cudaEnableDefault,
	                                       &status);
	if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || !*fn) {
		fprintf(stderr, "tinytrain: no driver entry point %s (%s, status %d)\n", symbol,
		        cudaGetErrorString(err), (int)status);
		*fn = NULL;
		return -1;
	}
	return 0;
}

int tt_launch_prepare(enum tt_launch_api api)
{
	switch (api) {
	case TT_LAUNCH_API_DRIVER:
		return driver_entry_point("cuLaunchKernel", (void **)&cuLaunchKernel_entry);
	case TT_LAUNCH_API_DRIVER_EX:
		return driver_entry_point("cuLaunchKernelEx", (void **)&cuLaunchKernelEx_entry);
	default:
		return 0;
	}
}

int tt_launch_load_module(const char *image, const char *const *names, size_t n,
                          CUfunction *functions)
{
	static PFN_cuModuleLoadData_v2000 load;
	static PFN_cuModuleGetFunction_v2000 get;
	CUmodule module = NULL;
	CUresult res;

	if (driver_entry_point("cuModuleLoadData", (void **)&load) ||
	    driver_entry_point("cuModuleGetFunction", (void **)&get))
		return -1;
	if ((res = load(&module, image)) != CUDA_SUCCESS) {
		fprintf(stderr, "tinytrain: cuModuleLoadData failed: error %d\n", (int)res);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		if ((res = get(&functions[i], module, names[i])) != CUDA_SUCCESS) {
			fprintf(stderr, "tinytrain: cuModuleGetFunction(%s) failed: error %d\n",
			        names[i], (int)res);
			return -1;
		}
	}
	return 0;
}

int tt_launch_resolve(struct tt_launch_target *target, const char *name)
{
	cudaFunction_t function = NULL;
	cudaError_t err;

	if (target->function)
		return 0;
	err = cudaGetFuncBySymbol(&function, target->stub);
	if (err != cudaSuccess || !function) {
		fprintf(stderr, "tinytrain: cudaGetFuncBySymbol(%s) failed: %s\n", name,
		        cudaGetErrorString(err));
		return -1;
	}
	target->function = (CUfunction)function;
	return 0;
}

static cudaError_t driver_result(CUresult res)
{
	if (res == CUDA_SUCCESS)
		return cudaSuccess;
	return res == CUDA_ERROR_INVALID_VALUE ? cudaErrorInvalidValue : cudaErrorLaunchFailure;
}

static cudaError_t launch_runtime_ex(const struct tt_launch_target *target, dim3 grid, dim3 block,
                                     void **args, cudaStream_t stream)
{
	cudaLaunchAttribute attrs[1] = {
	        {.id = cudaLaunchAttributeClusterDimension, .val.clusterDim = {1, 1, 1}},
	};
	cudaLaunchConfig_t config = {
	        .gridDim = grid,
	        .blockDim = block,
	        .dynamicSmemBytes = 0,
	        .stream = stream,
	        .attrs = attrs,
	        .numAttrs = 1,
	};

	return cudaLaunchKernelExC(&config, target->stub, args);
}

static cudaError_t launch_driver_ex(const struct tt_launch_target *target, dim3 grid, dim3 block,
                                    void **args, cudaStream_t stream)
{
	CUlaunchAttribute attrs[2] = {
	        {.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, .value.clusterDim = {1, 1, 1}},
	        {.id = CU_LAUNCH_ATTRIBUTE_PRIORITY, .value.priority = 0},
	};
	CUlaunchConfig config = {
	        .gridDimX = grid.x,
	        .gridDimY = grid.y,
	        .gridDimZ = grid.z,
	        .blockDimX = block.x,
	        .blockDimY = block.y,
	        .blockDimZ = block.z,
	        .sharedMemBytes = 0,
	        .hStream = stream,
	        .attrs = attrs,
	        .numAttrs = 2,
	};

	return driver_result(cuLaunchKernelEx_entry(&config, target->function, args, NULL));
}

cudaError_t tt_launch(enum tt_launch_api api, const struct tt_launch_target *target, dim3 grid,
                      dim3 block, void **args, cudaStream_t stream)
{
	switch (api) {
	case TT_LAUNCH_API_RUNTIME:
		return cudaLaunchKernel(target->stub, grid, block, args, 0, stream);
	case TT_LAUNCH_API_RUNTIME_EX:
		return launch_runtime_ex(target, grid, block, args, stream);
	case TT_LAUNCH_API_DRIVER:
		return driver_result(cuLaunchKernel_entry(target->function, grid.x, grid.y, grid.z,
		                                          block.x, block.y, block.z, 0, stream,
		                                          args, NULL));
	case TT_LAUNCH_API_DRIVER_EX:
		return launch_driver_ex(target, grid, block, args, stream);
	default:
		return cudaErrorInvalidValue;
	}
}
