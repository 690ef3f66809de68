/* SPDX-License-Identifier: Apache-2.0 */
/* Runtime device management: current device, properties, attributes, synchronisation. */
#include <string.h>

#include "runtime.h"

/*
 * The int fields of struct cudaDeviceProp that a device attribute answers:
 * X(field, attribute). name and totalGlobalMem have driver calls of their own; the rest
 * of the struct (texture limits, UUID, NUMA) stays zero.
 */
#define SIMGPU_RUNTIME_DEVICE_PROPS(X)                                                          \
	X(maxThreadsPerBlock, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)                        \
	X(maxThreadsDim[0], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)                                \
	X(maxThreadsDim[1], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)                                \
	X(maxThreadsDim[2], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)                                \
	X(maxGridSize[0], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)                                   \
	X(maxGridSize[1], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)                                   \
	X(maxGridSize[2], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)                                   \
	X(sharedMemPerBlock, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)                   \
	X(totalConstMem, CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY)                             \
	X(warpSize, CU_DEVICE_ATTRIBUTE_WARP_SIZE)                                              \
	X(memPitch, CU_DEVICE_ATTRIBUTE_MAX_PITCH)                                              \
	X(regsPerBlock, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK)                            \
	X(textureAlignment, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT)                              \
	X(texturePitchAlignment, CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT)                   \
	X(surfaceAlignment, CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT)                              \
	X(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)                                  \
	X(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)                                  \
	X(multiProcessorCount, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)                        \
	X(integrated, CU_DEVICE_ATTRIBUTE_INTEGRATED)                                           \
	X(canMapHostMemory, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)                            \
	X(concurrentKernels, CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS)                            \
	X(ECCEnabled, CU_DEVICE_ATTRIBUTE_ECC_ENABLED)                                          \
	X(pciBusID, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)                                             \
	X(pciDeviceID, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)                                       \
	X(pciDomainID, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)                                       \
	X(asyncEngineCount, CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT)                             \
	X(unifiedAddressing, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)                            \
	X(memoryBusWidth, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)                          \
	X(l2CacheSize, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)                                       \
	X(persistingL2CacheMaxSize, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE)           \
	X(accessPolicyMaxWindowSize, CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE)         \
	X(maxThreadsPerMultiProcessor, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)      \
	X(streamPrioritiesSupported, CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED)           \
	X(globalL1CacheSupported, CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED)                \
	X(localL1CacheSupported, CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED)                  \
	X(sharedMemPerMultiprocessor, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR) \
	X(regsPerMultiprocessor, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR)          \
	X(managedMemory, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)                                    \
	X(computePreemptionSupported, CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED)         \
	X(cooperativeLaunch, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)                            \
	X(sharedMemPerBlockOptin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)        \
	X(maxBlocksPerMultiProcessor, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR)        \
	X(reservedSharedMemPerBlock, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK)      \
	X(memoryPoolsSupported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)                     \
	X(clusterLaunch, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH)                                    \
	X(unifiedFunctionPointers, CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS)

SIMGPU_EXPORT cudaError_t cudaGetDeviceCount(int *count)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(SIMGPU_API_cudaGetDeviceCount,
	                                       SIMGPU_RUNTIME_NO_CONTEXT, &drv);

	if (err != cudaSuccess)
		return err;
	if (!count)
		return simgpu_runtime_fail(cudaErrorInvalidValue);
	return simgpu_runtime_result(drv->cuDeviceGetCount(count));
}

/* CUDA 12 semantics: setting a device initialises its primary context at once. */
SIMGPU_EXPORT cudaError_t cudaSetDevice(int device)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err =
	        simgpu_runtime_enter(SIMGPU_API_cudaSetDevice, SIMGPU_RUNTIME_NO_CONTEXT, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_set_device(device);
}

SIMGPU_EXPORT cudaError_t cudaGetDevice(int *device)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err =
	        simgpu_runtime_enter(SIMGPU_API_cudaGetDevice, SIMGPU_RUNTIME_NO_CONTEXT, &drv);

	if (err != cudaSuccess)
		return err;
	if (!device)
		return simgpu_runtime_fail(cudaErrorInvalidValue);
	*device = simgpu_runtime_device();
	return cudaSuccess;
}

/* Several driver calls: the name, the memory size and one attribute per field. */
SIMGPU_EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	const struct simgpu_runtime_driver *drv;
	CUdevice dev;
	CUresult res;
	int value = 0;
	cudaError_t err = simgpu_runtime_enter(SIMGPU_API_cudaGetDeviceProperties,
	                                       SIMGPU_RUNTIME_NO_CONTEXT, &drv);

	if (err != cudaSuccess)
		return err;
	if (!prop)
		return simgpu_runtime_fail(cudaErrorInvalidValue);
	if (!simgpu_runtime_device_handle(device, &dev))
		return simgpu_runtime_fail(cudaErrorInvalidDevice);
	memset(prop, 0, sizeof(*prop));
	res = drv->cuDeviceGetName(prop->name, (int)sizeof(prop->name), dev);
	if (res == CUDA_SUCCESS)
		res = drv->cuDeviceTotalMem_v2(&prop->totalGlobalMem, dev);
#define PROP_QUERY(field, attribute)                                     \
	if (res == CUDA_SUCCESS)                                         \
		res = drv->cuDeviceGetAttribute(&value, attribute, dev); \
	if (res == CUDA_SUCCESS)                                         \
		prop->field = value;
	SIMGPU_RUNTIME_DEVICE_PROPS(PROP_QUERY)
#undef PROP_QUERY
	return simgpu_runtime_result(res);
}

/* cudaDeviceAttr and CUdevice_attribute share their values. */
SIMGPU_EXPORT cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
	const struct simgpu_runtime_driver *drv;
	CUdevice dev;
	cudaError_t err = simgpu_runtime_enter(SIMGPU_API_cudaDeviceGetAttribute,
	                                       SIMGPU_RUNTIME_NO_CONTEXT, &drv);

	if (err != cudaSuccess)
		return err;
	if (!value)
		return simgpu_runtime_fail(cudaErrorInvalidValue);
	if (!simgpu_runtime_device_handle(device, &dev))
		return simgpu_runtime_fail(cudaErrorInvalidDevice);
	return simgpu_runtime_result(
	        drv->cuDeviceGetAttribute(value, (CUdevice_attribute)attr, dev));
}

SIMGPU_EXPORT cudaError_t cudaDeviceSynchronize(void)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err =
	        simgpu_runtime_enter(SIMGPU_API_cudaDeviceSynchronize, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuCtxSynchronize_v2(NULL));
}

SIMGPU_EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority,
                                                           int *greatestPriority)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(SIMGPU_API_cudaDeviceGetStreamPriorityRange,
	                                       SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(
	        drv->cuCtxGetStreamPriorityRange(leastPriority, greatestPriority));
}
