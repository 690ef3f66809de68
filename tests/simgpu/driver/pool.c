/* SPDX-License-Identifier: Apache-2.0 */
/* simgpu driver: memory pools and allocation from a named pool (cuMemAllocFromPoolAsync). */
#include "driver.h"

/*
 * What simgpu models: pools of device memory of one of this process's devices. Host and
 * host-NUMA pools are not modelled (CUDA_ERROR_NOT_SUPPORTED); handle types for IPC, the
 * usage bits and the Windows security attributes are accepted and ignored (no pool is
 * shared between simulated processes). maxSize is honoured.
 */
static CUresult pool_props_check(const CUmemPoolProps *props)
{
	if (!props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	switch (props->location.type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		return simgpu_driver_device_valid(props->location.id) ? CUDA_SUCCESS
		                                                      : CUDA_ERROR_INVALID_VALUE;
	case CU_MEM_LOCATION_TYPE_HOST:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
		return CUDA_ERROR_NOT_SUPPORTED;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static CUresult alloc_from_pool(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                CUstream hStream, bool per_thread)
{
	struct CUstream_st *stream = simgpu_stream_get(hStream, per_thread);

	if (!dptr || !pool)
		return CUDA_ERROR_INVALID_VALUE;
	if (!stream)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_mem_alloc_async(dptr, bytesize, pool, stream);
}

SIMGPU_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuDeviceGetDefaultMemPool);

	if (err)
		return err;
	if (!pool_out)
		return CUDA_ERROR_INVALID_VALUE;
	if (!simgpu_driver_device_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	*pool_out = simgpu_pool_default(dev);
	return CUDA_SUCCESS;
}
SIMGPU_DRIVER_LOCAL_NAME(cuDeviceGetDefaultMemPool);

SIMGPU_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemPoolCreate);
	CUresult res;

	if (err)
		return err;
	if (!pool)
		return CUDA_ERROR_INVALID_VALUE;
	res = pool_props_check(poolProps);
	if (res != CUDA_SUCCESS)
		return res;
	return simgpu_pool_create(pool, poolProps->maxSize);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemPoolCreate);

/* A pool with allocations outstanding goes when the last of them is freed, as in CUDA. */
SIMGPU_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemPoolDestroy);

	if (err)
		return err;
	return simgpu_pool_destroy(pool);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemPoolDestroy);

SIMGPU_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                             void *value)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemPoolSetAttribute);

	if (err)
		return err;
	return simgpu_pool_set_attribute(pool, attr, value);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemPoolSetAttribute);

SIMGPU_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                             void *value)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemPoolGetAttribute);

	if (err)
		return err;
	return simgpu_pool_get_attribute(pool, attr, value);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemPoolGetAttribute);

/* Nothing to release: simgpu returns a block's memory at its free (see core.h). */
SIMGPU_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemPoolTrimTo);

	if (err)
		return err;
	return simgpu_pool_trim(pool, minBytesToKeep);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemPoolTrimTo);

SIMGPU_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
                                               CUmemoryPool pool, CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemAllocFromPoolAsync);

	if (err)
		return err;
	return alloc_from_pool(dptr, bytesize, pool, hStream, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemAllocFromPoolAsync);

SIMGPU_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                    CUmemoryPool pool, CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemAllocFromPoolAsync_ptsz);

	if (err)
		return err;
	return alloc_from_pool(dptr, bytesize, pool, hStream, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemAllocFromPoolAsync_ptsz);
