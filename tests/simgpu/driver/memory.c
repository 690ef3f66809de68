/* SPDX-License-Identifier: Apache-2.0 */
/* simgpu driver: allocation, copies and memsets. */
#include "driver.h"

/* True if p lies in the device address window: what a CUdeviceptr argument must name. */
static bool device_ptr(CUdeviceptr p)
{
	return simgpu_mem_is_device((const void *)(uintptr_t)p);
}

/*
 * From the current pool of the stream's device, which is its default pool (simgpu has no
 * cuDeviceSetMemPool). Streams belong to no device in simgpu: the thread's current one
 * stands for it.
 */
static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, CUstream hStream, bool per_thread)
{
	struct CUstream_st *stream = simgpu_stream_get(hStream, per_thread);

	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	if (!stream)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_mem_alloc_async(dptr, bytesize,
	                              simgpu_pool_default(simgpu_driver_current_device()), stream);
}

static CUresult free_async(CUdeviceptr dptr, CUstream hStream, bool per_thread)
{
	struct CUstream_st *stream = simgpu_stream_get(hStream, per_thread);

	if (!stream)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_mem_free_async(dptr, stream);
}

/*
 * Every copy entry point ends here. A blocking copy passes hStream = NULL: the legacy
 * stream, or the calling thread's default stream for the _ptds symbols.
 */
static CUresult copy(void *dst, const void *src, size_t bytes, CUstream hStream, bool per_thread,
                     bool async)
{
	struct CUstream_st *stream = simgpu_stream_get(hStream, per_thread);

	if (!stream)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_memcpy(dst, src, bytes, stream, async);
}

static CUresult copy_htod(CUdeviceptr dst, const void *src, size_t bytes, CUstream hStream,
                          bool per_thread, bool async)
{
	if (!device_ptr(dst))
		return CUDA_ERROR_INVALID_VALUE;
	return copy((void *)(uintptr_t)dst, src, bytes, hStream, per_thread, async);
}

static CUresult copy_dtoh(void *dst, CUdeviceptr src, size_t bytes, CUstream hStream,
                          bool per_thread, bool async)
{
	if (!device_ptr(src))
		return CUDA_ERROR_INVALID_VALUE;
	return copy(dst, (const void *)(uintptr_t)src, bytes, hStream, per_thread, async);
}

static CUresult copy_dtod(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream hStream,
                          bool per_thread, bool async)
{
	if (!device_ptr(dst) || !device_ptr(src))
		return CUDA_ERROR_INVALID_VALUE;
	return copy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes, hStream,
	            per_thread, async);
}

/* Every memset entry point ends here; hStream as for copy(). */
static CUresult fill(CUdeviceptr dst, unsigned int value, unsigned int elem_size, size_t count,
                     CUstream hStream, bool per_thread, bool async)
{
	struct CUstream_st *stream = simgpu_stream_get(hStream, per_thread);

	if (!device_ptr(dst))
		return CUDA_ERROR_INVALID_VALUE;
	if (!stream)
		return CUDA_ERROR_INVALID_HANDLE;
	return simgpu_memset(dst, value, elem_size, count, stream, async);
}

/* ---- Allocation ------------------------------------------------------------------------ */

/* The 32-bit ABI of CUDA 2.0: present so that version selection is observable. */
SIMGPU_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemAlloc);

	if (err)
		return err;
	return CUDA_ERROR_NOT_SUPPORTED;
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemAlloc);

SIMGPU_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemAlloc_v2);

	if (err)
		return err;
	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	return simgpu_mem_alloc(dptr, bytesize);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemAlloc_v2);

/* The 32-bit ABI of CUDA 2.0, as cuMemAlloc. */
SIMGPU_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemFree);

	if (err)
		return err;
	return CUDA_ERROR_NOT_SUPPORTED;
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemFree);

SIMGPU_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemFree_v2);

	if (err)
		return err;
	return simgpu_mem_free(dptr);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemFree_v2);

SIMGPU_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemAllocHost_v2);

	if (err)
		return err;
	if (!pp)
		return CUDA_ERROR_INVALID_VALUE;
	return simgpu_mem_host_alloc(pp, bytesize);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemAllocHost_v2);

SIMGPU_EXPORT CUresult cuMemFreeHost(void *p)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemFreeHost);

	if (err)
		return err;
	return simgpu_mem_host_free(p);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemFreeHost);

SIMGPU_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemGetInfo_v2);

	if (err)
		return err;
	if (!free || !total)
		return CUDA_ERROR_INVALID_VALUE;
	simgpu_mem_info(free, total);
	return CUDA_SUCCESS;
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemGetInfo_v2);

/* The 32-bit ABI of CUDA 2.0, as cuMemAlloc. */
SIMGPU_EXPORT CUresult cuMemGetAddressRange(CUdeviceptr_v1 *pbase, unsigned int *psize,
                                            CUdeviceptr_v1 dptr)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemGetAddressRange);

	if (err)
		return err;
	return CUDA_ERROR_NOT_SUPPORTED;
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemGetAddressRange);

/* Both out-parameters are optional, as in CUDA; an address in no allocation is NOT_FOUND. */
SIMGPU_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemGetAddressRange_v2);

	if (err)
		return err;
	return simgpu_mem_range(pbase, psize, dptr);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemGetAddressRange_v2);

SIMGPU_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemAllocAsync);

	if (err)
		return err;
	return alloc_async(dptr, bytesize, hStream, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemAllocAsync);

SIMGPU_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemAllocAsync_ptsz);

	if (err)
		return err;
	return alloc_async(dptr, bytesize, hStream, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemAllocAsync_ptsz);

SIMGPU_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemFreeAsync);

	if (err)
		return err;
	return free_async(dptr, hStream, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemFreeAsync);

SIMGPU_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemFreeAsync_ptsz);

	if (err)
		return err;
	return free_async(dptr, hStream, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemFreeAsync_ptsz);

/* ---- Copies ---------------------------------------------------------------------------- */

/* Unified addressing: the direction follows from the pointers. */
SIMGPU_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemcpy);

	if (err)
		return err;
	return copy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, ByteCount, NULL, false,
	            false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemcpy);

SIMGPU_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemcpy_ptds);

	if (err)
		return err;
	return copy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, ByteCount, NULL, true,
	            false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemcpy_ptds);

SIMGPU_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                     CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemcpyAsync);

	if (err)
		return err;
	return copy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, ByteCount, hStream, false,
	            true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemcpyAsync);

SIMGPU_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                          CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemcpyAsync_ptsz);

	if (err)
		return err;
	return copy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, ByteCount, hStream, true,
	            true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemcpyAsync_ptsz);

SIMGPU_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemcpyHtoD_v2);

	if (err)
		return err;
	return copy_htod(dstDevice, srcHost, ByteCount, NULL, false, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemcpyHtoD_v2);

SIMGPU_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost,
                                            size_t ByteCount)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemcpyHtoD_v2_ptds);

	if (err)
		return err;
	return copy_htod(dstDevice, srcHost, ByteCount, NULL, true, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemcpyHtoD_v2_ptds);

SIMGPU_EXPORT CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemcpyDtoH_v2);

	if (err)
		return err;
	return copy_dtoh(dstHost, srcDevice, ByteCount, NULL, false, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemcpyDtoH_v2);

SIMGPU_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemcpyDtoH_v2_ptds);

	if (err)
		return err;
	return copy_dtoh(dstHost, srcDevice, ByteCount, NULL, true, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemcpyDtoH_v2_ptds);

SIMGPU_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                       size_t ByteCount)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemcpyDtoD_v2);

	if (err)
		return err;
	return copy_dtod(dstDevice, srcDevice, ByteCount, NULL, false, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemcpyDtoD_v2);

SIMGPU_EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                            size_t ByteCount)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemcpyDtoD_v2_ptds);

	if (err)
		return err;
	return copy_dtod(dstDevice, srcDevice, ByteCount, NULL, true, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemcpyDtoD_v2_ptds);

SIMGPU_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
                                            size_t ByteCount, CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemcpyHtoDAsync_v2);

	if (err)
		return err;
	return copy_htod(dstDevice, srcHost, ByteCount, hStream, false, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemcpyHtoDAsync_v2);

SIMGPU_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
                                                 size_t ByteCount, CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemcpyHtoDAsync_v2_ptsz);

	if (err)
		return err;
	return copy_htod(dstDevice, srcHost, ByteCount, hStream, true, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemcpyHtoDAsync_v2_ptsz);

SIMGPU_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                            CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemcpyDtoHAsync_v2);

	if (err)
		return err;
	return copy_dtoh(dstHost, srcDevice, ByteCount, hStream, false, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemcpyDtoHAsync_v2);

SIMGPU_EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice,
                                                 size_t ByteCount, CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemcpyDtoHAsync_v2_ptsz);

	if (err)
		return err;
	return copy_dtoh(dstHost, srcDevice, ByteCount, hStream, true, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemcpyDtoHAsync_v2_ptsz);

SIMGPU_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                            size_t ByteCount, CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemcpyDtoDAsync_v2);

	if (err)
		return err;
	return copy_dtod(dstDevice, srcDevice, ByteCount, hStream, false, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemcpyDtoDAsync_v2);

SIMGPU_EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                                 size_t ByteCount, CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemcpyDtoDAsync_v2_ptsz);

	if (err)
		return err;
	return copy_dtod(dstDevice, srcDevice, ByteCount, hStream, true, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemcpyDtoDAsync_v2_ptsz);

/* ---- Memsets --------------------------------------------------------------------------- */

SIMGPU_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemsetD8_v2);

	if (err)
		return err;
	return fill(dstDevice, uc, 1, N, NULL, false, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemsetD8_v2);

SIMGPU_EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemsetD8_v2_ptds);

	if (err)
		return err;
	return fill(dstDevice, uc, 1, N, NULL, true, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemsetD8_v2_ptds);

SIMGPU_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemsetD32_v2);

	if (err)
		return err;
	return fill(dstDevice, ui, 4, N, NULL, false, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemsetD32_v2);

SIMGPU_EXPORT CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemsetD32_v2_ptds);

	if (err)
		return err;
	return fill(dstDevice, ui, 4, N, NULL, true, false);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemsetD32_v2_ptds);

SIMGPU_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                       CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemsetD8Async);

	if (err)
		return err;
	return fill(dstDevice, uc, 1, N, hStream, false, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemsetD8Async);

SIMGPU_EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                            CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemsetD8Async_ptsz);

	if (err)
		return err;
	return fill(dstDevice, uc, 1, N, hStream, true, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemsetD8Async_ptsz);

SIMGPU_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                        CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemsetD32Async);

	if (err)
		return err;
	return fill(dstDevice, ui, 4, N, hStream, false, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemsetD32Async);

SIMGPU_EXPORT CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                             CUstream hStream)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemsetD32Async_ptsz);

	if (err)
		return err;
	return fill(dstDevice, ui, 4, N, hStream, true, true);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemsetD32Async_ptsz);
