/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Runtime memory pools, each one driver call. cudaMemPool_t is the driver's CUmemoryPool
 * and cudaMemPoolAttr shares CUmemPool_attribute's values, so both pass through as they
 * are; pool properties are translated field by field.
 */
#include "runtime.h"

SIMGPU_EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
	const struct simgpu_runtime_driver *drv;
	CUdevice dev;
	cudaError_t err = simgpu_runtime_enter(SIMGPU_API_cudaDeviceGetDefaultMemPool,
	                                       SIMGPU_RUNTIME_NO_CONTEXT, &drv);

	if (err != cudaSuccess)
		return err;
	if (!memPool)
		return simgpu_runtime_fail(cudaErrorInvalidValue);
	if (!simgpu_runtime_device_handle(device, &dev))
		return simgpu_runtime_fail(cudaErrorInvalidDevice);
	return simgpu_runtime_result(drv->cuDeviceGetDefaultMemPool(memPool, dev));
}

/* A device location names a runtime ordinal, which becomes the driver's device handle. */
SIMGPU_EXPORT cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool,
                                            const struct cudaMemPoolProps *poolProps)
{
	const struct simgpu_runtime_driver *drv;
	CUmemPoolProps props;
	cudaError_t err =
	        simgpu_runtime_enter(SIMGPU_API_cudaMemPoolCreate, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	if (!memPool || !poolProps)
		return simgpu_runtime_fail(cudaErrorInvalidValue);
	props = (CUmemPoolProps){
	        .allocType = (CUmemAllocationType)poolProps->allocType,
	        .handleTypes = (CUmemAllocationHandleType)poolProps->handleTypes,
	        .location = {(CUmemLocationType)poolProps->location.type, poolProps->location.id},
	        .win32SecurityAttributes = poolProps->win32SecurityAttributes,
	        .maxSize = poolProps->maxSize,
	        .usage = poolProps->usage,
	};
	if (poolProps->location.type == cudaMemLocationTypeDevice) {
		CUdevice dev;
		if (!simgpu_runtime_device_handle(poolProps->location.id, &dev))
			return simgpu_runtime_fail(cudaErrorInvalidDevice);
		props.location.id = dev;
	}
	return simgpu_runtime_result(drv->cuMemPoolCreate(memPool, &props));
}

SIMGPU_EXPORT cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err =
	        simgpu_runtime_enter(SIMGPU_API_cudaMemPoolDestroy, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuMemPoolDestroy(memPool));
}

SIMGPU_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                                  void *value)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(SIMGPU_API_cudaMemPoolSetAttribute,
	                                       SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(
	        drv->cuMemPoolSetAttribute(memPool, (CUmemPool_attribute)attr, value));
}

SIMGPU_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                                  void *value)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(SIMGPU_API_cudaMemPoolGetAttribute,
	                                       SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(
	        drv->cuMemPoolGetAttribute(memPool, (CUmemPool_attribute)attr, value));
}

SIMGPU_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err =
	        simgpu_runtime_enter(SIMGPU_API_cudaMemPoolTrimTo, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuMemPoolTrimTo(memPool, minBytesToKeep));
}

static cudaError_t malloc_from_pool(enum simgpu_api_id id, enum simgpu_runtime_need need,
                                    void **ptr, size_t size, cudaMemPool_t memPool,
                                    cudaStream_t stream)
{
	const struct simgpu_runtime_driver *drv;
	CUdeviceptr dptr = 0;
	CUresult res;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	if (!ptr)
		return simgpu_runtime_fail(cudaErrorInvalidValue);
	res = drv->cuMemAllocFromPoolAsync(&dptr, size, memPool, stream);
	if (res == CUDA_SUCCESS)
		*ptr = (void *)dptr;
	return simgpu_runtime_result(res);
}

SIMGPU_EXPORT cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                                  cudaStream_t stream)
{
	return malloc_from_pool(SIMGPU_API_cudaMallocFromPoolAsync, SIMGPU_RUNTIME_LEGACY, ptr,
	                        size, memPool, stream);
}

SIMGPU_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size,
                                                       cudaMemPool_t memPool, cudaStream_t stream)
{
	return malloc_from_pool(SIMGPU_API_cudaMallocFromPoolAsync_ptsz, SIMGPU_RUNTIME_PER_THREAD,
	                        ptr, size, memPool, stream);
}
