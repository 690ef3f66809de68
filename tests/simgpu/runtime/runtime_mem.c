/* SPDX-License-Identifier: Apache-2.0 */
/* Runtime memory management: allocation, copies and memsets, each one driver call. */
#include "runtime.h"

/* cudaMemcpyHostToHost .. cudaMemcpyDefault; the driver infers the direction from the
 * pointers (unified addressing), so the kind is only checked. */
static bool memcpy_kind_valid(enum cudaMemcpyKind kind)
{
	return kind >= cudaMemcpyHostToHost && kind <= cudaMemcpyDefault;
}

SIMGPU_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	const struct simgpu_runtime_driver *drv;
	CUdeviceptr dptr = 0;
	CUresult res;
	cudaError_t err = simgpu_runtime_enter(SIMGPU_API_cudaMalloc, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	if (!devPtr)
		return simgpu_runtime_fail(cudaErrorInvalidValue);
	/* CUDA answers a zero-byte request with NULL and success; the driver would refuse. */
	if (size == 0) {
		*devPtr = NULL;
		return cudaSuccess;
	}
	res = drv->cuMemAlloc_v2(&dptr, size);
	if (res == CUDA_SUCCESS)
		*devPtr = (void *)dptr;
	return simgpu_runtime_result(res);
}

/* cudaFree(NULL) succeeds without a driver call (and, as in CUDA, initialises). */
SIMGPU_EXPORT cudaError_t cudaFree(void *devPtr)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(SIMGPU_API_cudaFree, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess || !devPtr)
		return err;
	return simgpu_runtime_result(drv->cuMemFree_v2((CUdeviceptr)devPtr));
}

SIMGPU_EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err =
	        simgpu_runtime_enter(SIMGPU_API_cudaMallocHost, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	if (!ptr)
		return simgpu_runtime_fail(cudaErrorInvalidValue);
	return simgpu_runtime_result(drv->cuMemAllocHost_v2(ptr, size));
}

/* cudaFreeHost(NULL) succeeds without a driver call, like free(NULL). */
SIMGPU_EXPORT cudaError_t cudaFreeHost(void *ptr)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err =
	        simgpu_runtime_enter(SIMGPU_API_cudaFreeHost, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess || !ptr)
		return err;
	return simgpu_runtime_result(drv->cuMemFreeHost(ptr));
}

static cudaError_t malloc_async(enum simgpu_api_id id, enum simgpu_runtime_need need, void **devPtr,
                                size_t size, cudaStream_t hStream)
{
	const struct simgpu_runtime_driver *drv;
	CUdeviceptr dptr = 0;
	CUresult res;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	if (!devPtr)
		return simgpu_runtime_fail(cudaErrorInvalidValue);
	res = drv->cuMemAllocAsync(&dptr, size, hStream);
	if (res == CUDA_SUCCESS)
		*devPtr = (void *)dptr;
	return simgpu_runtime_result(res);
}

SIMGPU_EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
	return malloc_async(SIMGPU_API_cudaMallocAsync, SIMGPU_RUNTIME_LEGACY, devPtr, size,
	                    hStream);
}

SIMGPU_EXPORT cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
	return malloc_async(SIMGPU_API_cudaMallocAsync_ptsz, SIMGPU_RUNTIME_PER_THREAD, devPtr,
	                    size, hStream);
}

static cudaError_t free_async(enum simgpu_api_id id, enum simgpu_runtime_need need, void *devPtr,
                              cudaStream_t hStream)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuMemFreeAsync((CUdeviceptr)devPtr, hStream));
}

SIMGPU_EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
	return free_async(SIMGPU_API_cudaFreeAsync, SIMGPU_RUNTIME_LEGACY, devPtr, hStream);
}

SIMGPU_EXPORT cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
	return free_async(SIMGPU_API_cudaFreeAsync_ptsz, SIMGPU_RUNTIME_PER_THREAD, devPtr,
	                  hStream);
}

SIMGPU_EXPORT cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err =
	        simgpu_runtime_enter(SIMGPU_API_cudaMemGetInfo, SIMGPU_RUNTIME_LEGACY, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(drv->cuMemGetInfo_v2(free_bytes, total_bytes));
}

static cudaError_t memcpy_sync(enum simgpu_api_id id, enum simgpu_runtime_need need, void *dst,
                               const void *src, size_t count, enum cudaMemcpyKind kind)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	if (!memcpy_kind_valid(kind))
		return simgpu_runtime_fail(cudaErrorInvalidMemcpyDirection);
	return simgpu_runtime_result(drv->cuMemcpy((CUdeviceptr)dst, (CUdeviceptr)src, count));
}

SIMGPU_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                                     enum cudaMemcpyKind kind)
{
	return memcpy_sync(SIMGPU_API_cudaMemcpy, SIMGPU_RUNTIME_LEGACY, dst, src, count, kind);
}

SIMGPU_EXPORT cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count,
                                          enum cudaMemcpyKind kind)
{
	return memcpy_sync(SIMGPU_API_cudaMemcpy_ptds, SIMGPU_RUNTIME_PER_THREAD, dst, src, count,
	                   kind);
}

static cudaError_t memcpy_async(enum simgpu_api_id id, enum simgpu_runtime_need need, void *dst,
                                const void *src, size_t count, enum cudaMemcpyKind kind,
                                cudaStream_t stream)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	if (!memcpy_kind_valid(kind))
		return simgpu_runtime_fail(cudaErrorInvalidMemcpyDirection);
	return simgpu_runtime_result(
	        drv->cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, count, stream));
}

SIMGPU_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                          enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return memcpy_async(SIMGPU_API_cudaMemcpyAsync, SIMGPU_RUNTIME_LEGACY, dst, src, count,
	                    kind, stream);
}

SIMGPU_EXPORT cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
                                               enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return memcpy_async(SIMGPU_API_cudaMemcpyAsync_ptsz, SIMGPU_RUNTIME_PER_THREAD, dst, src,
	                    count, kind, stream);
}

static cudaError_t memset_sync(enum simgpu_api_id id, enum simgpu_runtime_need need, void *devPtr,
                               int value, size_t count)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(
	        drv->cuMemsetD8_v2((CUdeviceptr)devPtr, (unsigned char)value, count));
}

SIMGPU_EXPORT cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
	return memset_sync(SIMGPU_API_cudaMemset, SIMGPU_RUNTIME_LEGACY, devPtr, value, count);
}

SIMGPU_EXPORT cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count)
{
	return memset_sync(SIMGPU_API_cudaMemset_ptds, SIMGPU_RUNTIME_PER_THREAD, devPtr, value,
	                   count);
}

static cudaError_t memset_async(enum simgpu_api_id id, enum simgpu_runtime_need need, void *devPtr,
                                int value, size_t count, cudaStream_t stream)
{
	const struct simgpu_runtime_driver *drv;
	cudaError_t err = simgpu_runtime_enter(id, need, &drv);

	if (err != cudaSuccess)
		return err;
	return simgpu_runtime_result(
	        drv->cuMemsetD8Async((CUdeviceptr)devPtr, (unsigned char)value, count, stream));
}

SIMGPU_EXPORT cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count,
                                          cudaStream_t stream)
{
	return memset_async(SIMGPU_API_cudaMemsetAsync, SIMGPU_RUNTIME_LEGACY, devPtr, value, count,
	                    stream);
}

SIMGPU_EXPORT cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count,
                                               cudaStream_t stream)
{
	return memset_async(SIMGPU_API_cudaMemsetAsync_ptsz, SIMGPU_RUNTIME_PER_THREAD, devPtr,
	                    value, count, stream);
}
