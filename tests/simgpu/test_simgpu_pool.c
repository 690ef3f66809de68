/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simgpu's memory pools and module/library loading: the default pool through the runtime
 * and the driver, attributes that round-trip, used and reserved bytes that follow the
 * allocations made through each pool, trimming, CUDA's destroy rules; modules and
 * libraries whose images list registered kernels, whose functions launch and compute, and
 * whose lookups fail as CUDA's do. Driver functions come from cudaGetDriverEntryPoint*.
 * Capacity is 64 MiB (main).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#include "test_kernels.h"

#define N 64 /* floats per buffer */
#define PAGE 4096

/* The driver entry points these tests call, as a program without -lcuda gets them. */
static struct {
	PFN_cuDeviceGetDefaultMemPool_v11020 cuDeviceGetDefaultMemPool;
	PFN_cuMemPoolCreate_v11020 cuMemPoolCreate;
	PFN_cuMemPoolDestroy_v11020 cuMemPoolDestroy;
	PFN_cuMemPoolSetAttribute_v11020 cuMemPoolSetAttribute;
	PFN_cuMemPoolGetAttribute_v11020 cuMemPoolGetAttribute;
	PFN_cuMemAllocFromPoolAsync_v11020 cuMemAllocFromPoolAsync;
	PFN_cuModuleLoadData_v2000 cuModuleLoadData;
	PFN_cuModuleLoadDataEx_v2010 cuModuleLoadDataEx;
	PFN_cuModuleGetFunction_v2000 cuModuleGetFunction;
	PFN_cuModuleUnload_v2000 cuModuleUnload;
	PFN_cuLibraryLoadData_v12000 cuLibraryLoadData;
	PFN_cuLibraryGetKernel_v12000 cuLibraryGetKernel;
	PFN_cuLibraryUnload_v12000 cuLibraryUnload;
	PFN_cuLaunchKernel_v4000 cuLaunchKernel;
	PFN_cuFuncGetName_v12030 cuFuncGetName;
	PFN_cuFuncGetParamInfo_v12040 cuFuncGetParamInfo;
	PFN_cuKernelGetName_v12030 cuKernelGetName;
} drv;

static void *driver_entry(const char *name)
{
	enum cudaDriverEntryPointQueryResult found;
	void *fn = NULL;

	if (cudaGetDriverEntryPointByVersion(name, &fn, 13000, cudaEnableDefault, &found) ||
	    found != cudaDriverEntryPointSuccess)
		return NULL;
	return fn;
}

static int resolve_driver(void **state)
{
#define RESOLVE(name)                                         \
	drv.name = (__typeof__(drv.name))driver_entry(#name); \
	if (!drv.name)                                        \
		return -1;
	RESOLVE(cuDeviceGetDefaultMemPool)
	RESOLVE(cuMemPoolCreate)
	RESOLVE(cuMemPoolDestroy)
	RESOLVE(cuMemPoolSetAttribute)
	RESOLVE(cuMemPoolGetAttribute)
	RESOLVE(cuMemAllocFromPoolAsync)
	RESOLVE(cuModuleLoadData)
	RESOLVE(cuModuleLoadDataEx)
	RESOLVE(cuModuleGetFunction)
	RESOLVE(cuModuleUnload)
	RESOLVE(cuLibraryLoadData)
	RESOLVE(cuLibraryGetKernel)
	RESOLVE(cuLibraryUnload)
	RESOLVE(cuLaunchKernel)
	RESOLVE(cuFuncGetName)
	RESOLVE(cuFuncGetParamInfo)
	RESOLVE(cuKernelGetName)
#undef RESOLVE
	return 0;
}

static uint64_t attr(cudaMemPool_t pool, enum cudaMemPoolAttr which)
{
	cuuint64_t value = 0xdead;

	assert_int_equal(cudaMemPoolGetAttribute(pool, which, &value), cudaSuccess);
	return value;
}

static cudaMemPool_t new_pool(size_t max_size)
{
	struct cudaMemPoolProps props = {
	        .allocType = cudaMemAllocationTypePinned,
	        .location = {cudaMemLocationTypeDevice, 0},
	        .maxSize = max_size,
	};
	cudaMemPool_t pool = NULL;

	assert_int_equal(cudaMemPoolCreate(&pool, &props), cudaSuccess);
	assert_non_null(pool);
	return pool;
}

static size_t current_bytes(void)
{
	struct simgpu_memory_stats stats;

	simgpu_memory_stats(&stats);
	return stats.current_bytes;
}

/* Every float of the device buffer equals want. */
static void assert_floats(const float *dev, int n, float want)
{
	float host[N];

	assert_true(n <= N);
	assert_int_equal(cudaMemcpy(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost),
	                 cudaSuccess);
	for (int i = 0; i < n; i++)
		if (host[i] != want)
			fail_msg("element %d is %g, want %g", i, host[i], want);
}

/* ---- Pools ----------------------------------------------------------------------------- */

static void test_the_default_pool_is_per_device_and_the_same_through_both_apis(void **state)
{
	cudaMemPool_t rt0 = NULL, rt1 = NULL;
	CUmemoryPool d0 = NULL, d1 = NULL;

	assert_int_equal(cudaDeviceGetDefaultMemPool(&rt0, 0), cudaSuccess);
	assert_int_equal(cudaDeviceGetDefaultMemPool(&rt1, 1), cudaSuccess);
	assert_int_equal(drv.cuDeviceGetDefaultMemPool(&d0, 0), CUDA_SUCCESS);
	assert_int_equal(drv.cuDeviceGetDefaultMemPool(&d1, 1), CUDA_SUCCESS);
	assert_non_null(rt0);
	assert_ptr_equal(rt0, d0);
	assert_ptr_equal(rt1, d1);
	assert_ptr_not_equal(rt0, rt1);

	assert_int_equal(cudaDeviceGetDefaultMemPool(&rt0, 99), cudaErrorInvalidDevice);
	assert_int_equal(cudaDeviceGetDefaultMemPool(NULL, 0), cudaErrorInvalidValue);
	assert_int_equal(drv.cuDeviceGetDefaultMemPool(&d0, 99), CUDA_ERROR_INVALID_DEVICE);
	assert_int_equal(drv.cuDeviceGetDefaultMemPool(NULL, 0), CUDA_ERROR_INVALID_VALUE);
	cudaGetLastError();
}

static void test_attributes_round_trip_and_read_only_ones_are_refused(void **state)
{
	cudaMemPool_t pools[2];
	cuuint64_t value;
	int flag;

	assert_int_equal(cudaDeviceGetDefaultMemPool(&pools[0], 0), cudaSuccess);
	pools[1] = new_pool(0);
	for (int i = 0; i < 2; i++) {
		cudaMemPool_t pool = pools[i];

		assert_int_equal(attr(pool, cudaMemPoolAttrReleaseThreshold), 0);
		value = UINT64_MAX; /* what PyTorch's cudaMallocAsync backend sets */
		assert_int_equal(
		        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &value),
		        cudaSuccess);
		assert_true(attr(pool, cudaMemPoolAttrReleaseThreshold) == UINT64_MAX);
		/* The driver sees the same pool. */
		value = 0;
		assert_int_equal(
		        drv.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &value),
		        CUDA_SUCCESS);
		assert_true(value == UINT64_MAX);
		value = 1 << 20;
		assert_int_equal(
		        drv.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &value),
		        CUDA_SUCCESS);
		assert_int_equal(attr(pool, cudaMemPoolAttrReleaseThreshold), 1 << 20);

		/* Reuse policies: enabled by default, as in CUDA. */
		assert_int_equal(
		        cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &flag),
		        cudaSuccess);
		assert_int_equal(flag, 1);
		flag = 0;
		assert_int_equal(
		        cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &flag),
		        cudaSuccess);
		flag = 7;
		assert_int_equal(
		        cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &flag),
		        cudaSuccess);
		assert_int_equal(flag, 0);
		flag = 1;
		assert_int_equal(
		        cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &flag),
		        cudaSuccess);

		/* Read-only values, non-zero high marks, unknown attributes, NULL values. */
		value = 0;
		assert_int_equal(
		        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &value),
		        cudaErrorInvalidValue);
		assert_int_equal(
		        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &value),
		        cudaErrorInvalidValue);
		value = 5;
		assert_int_equal(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &value),
		                 cudaErrorInvalidValue);
		assert_int_equal(
		        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &value),
		        cudaErrorInvalidValue);
		assert_int_equal(cudaMemPoolGetAttribute(pool, (enum cudaMemPoolAttr)99, &value),
		                 cudaErrorInvalidValue);
		assert_int_equal(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, NULL),
		                 cudaErrorInvalidValue);
		assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
	}
	value = 0;
	assert_int_equal(cudaMemPoolSetAttribute(pools[0], cudaMemPoolAttrReleaseThreshold, &value),
	                 cudaSuccess);
	assert_int_equal(cudaMemPoolDestroy(pools[1]), cudaSuccess);
}

static void test_used_and_reserved_bytes_follow_the_pools_allocations(void **state)
{
	cudaMemPool_t pool = new_pool(0), def;
	cudaStream_t s;
	void *a, *b, *c;
	cuuint64_t zero = 0;

	assert_int_equal(cudaDeviceGetDefaultMemPool(&def, 0), cudaSuccess);
	assert_int_equal(cudaStreamCreate(&s), cudaSuccess);
	uint64_t def_used = attr(def, cudaMemPoolAttrUsedMemCurrent);

	/* Sizes are accounted in whole 4 KiB pages, as the device's own accounting. */
	assert_int_equal(cudaMallocFromPoolAsync(&a, 1000, pool, s), cudaSuccess);
	assert_int_equal(attr(pool, cudaMemPoolAttrUsedMemCurrent), PAGE);
	assert_int_equal(cudaMallocFromPoolAsync(&b, 2 * PAGE, pool, s), cudaSuccess);
	assert_int_equal(attr(pool, cudaMemPoolAttrUsedMemCurrent), 3 * PAGE);
	assert_int_equal(attr(pool, cudaMemPoolAttrReservedMemCurrent), 3 * PAGE);
	assert_int_equal(attr(pool, cudaMemPoolAttrUsedMemHigh), 3 * PAGE);
	assert_int_equal(attr(pool, cudaMemPoolAttrReservedMemHigh), 3 * PAGE);
	/* Another pool's allocations are not this pool's, nor the other way round. */
	assert_int_equal(attr(def, cudaMemPoolAttrUsedMemCurrent), def_used);
	assert_int_equal(cudaMallocAsync(&c, 5 * PAGE, s), cudaSuccess);
	assert_int_equal(attr(def, cudaMemPoolAttrUsedMemCurrent), def_used + 5 * PAGE);
	assert_int_equal(attr(pool, cudaMemPoolAttrUsedMemCurrent), 3 * PAGE);

	/* A free returns the bytes at once; the high marks stay until reset to zero. */
	assert_int_equal(cudaFreeAsync(b, s), cudaSuccess);
	assert_int_equal(attr(pool, cudaMemPoolAttrUsedMemCurrent), PAGE);
	assert_int_equal(attr(pool, cudaMemPoolAttrReservedMemCurrent), PAGE);
	assert_int_equal(attr(pool, cudaMemPoolAttrUsedMemHigh), 3 * PAGE);
	assert_int_equal(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero),
	                 cudaSuccess);
	assert_int_equal(attr(pool, cudaMemPoolAttrUsedMemHigh), PAGE);
	assert_int_equal(attr(pool, cudaMemPoolAttrReservedMemHigh), 3 * PAGE);
	assert_int_equal(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero),
	                 cudaSuccess);
	assert_int_equal(attr(pool, cudaMemPoolAttrReservedMemHigh), PAGE);

	/* cudaFree of a stream-ordered allocation (CUDA allows it) is accounted too. */
	assert_int_equal(cudaFree(a), cudaSuccess);
	assert_int_equal(attr(pool, cudaMemPoolAttrUsedMemCurrent), 0);
	assert_int_equal(cudaFreeAsync(c, s), cudaSuccess);
	assert_int_equal(attr(def, cudaMemPoolAttrUsedMemCurrent), def_used);
	assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
	assert_int_equal(cudaMemPoolDestroy(pool), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
}

static void test_allocations_from_a_created_and_the_default_pool_hold_results(void **state)
{
	cudaMemPool_t pool = new_pool(0), def;
	cudaStream_t s;
	float *x, *y, *z;
	CUdeviceptr w = 0;
	size_t base = current_bytes();

	assert_int_equal(cudaDeviceGetDefaultMemPool(&def, 0), cudaSuccess);
	assert_int_equal(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
	assert_int_equal(cudaMallocFromPoolAsync((void **)&x, N * sizeof(float), pool, s),
	                 cudaSuccess);
	assert_int_equal(cudaMallocFromPoolAsync((void **)&y, N * sizeof(float), def, s),
	                 cudaSuccess);
	assert_int_equal(cudaMallocFromPoolAsync_ptsz((void **)&z, N * sizeof(float), pool, 0),
	                 cudaSuccess);
	assert_int_equal(drv.cuMemAllocFromPoolAsync(&w, N * sizeof(float), pool, s), CUDA_SUCCESS);
	assert_int_equal(current_bytes(), base + 4 * PAGE);
	assert_int_equal(launch_fill(s, 1000, x, 2.0f, N), cudaSuccess);
	assert_int_equal(launch_copy(s, 1000, x, y, N), cudaSuccess);
	assert_int_equal(launch_copy(s, 1000, y, (float *)w, N), cudaSuccess);
	assert_int_equal(launch_fill(0, 1000, z, 5.0f, N), cudaSuccess);
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
	assert_floats(y, N, 2.0f);
	assert_floats((float *)w, N, 2.0f);
	assert_floats(z, N, 5.0f);

	/* Bad arguments, as CUDA answers them. */
	assert_int_equal(cudaMallocFromPoolAsync((void **)&x, 0, pool, s), cudaErrorInvalidValue);
	assert_int_equal(cudaMallocFromPoolAsync(NULL, 16, pool, s), cudaErrorInvalidValue);
	assert_int_equal(cudaMallocFromPoolAsync((void **)&x, 16, NULL, s), cudaErrorInvalidValue);
	assert_int_equal(cudaMallocFromPoolAsync((void **)&x, 16, (cudaMemPool_t)&base, s),
	                 cudaErrorInvalidValue);
	cudaGetLastError();

	assert_int_equal(cudaFreeAsync(x, s), cudaSuccess);
	assert_int_equal(cudaFreeAsync(y, s), cudaSuccess);
	assert_int_equal(cudaFreeAsync(z, s), cudaSuccess);
	assert_int_equal(cudaFreeAsync((void *)w, s), cudaSuccess);
	assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
	assert_int_equal(current_bytes(), base);
	assert_int_equal(cudaMemPoolDestroy(pool), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
}

static void test_a_pools_maximum_size_limits_its_allocations(void **state)
{
	cudaMemPool_t pool = new_pool(2 * PAGE);
	void *a, *b;

	assert_int_equal(cudaMallocFromPoolAsync(&a, 2 * PAGE, pool, 0), cudaSuccess);
	assert_int_equal(cudaMallocFromPoolAsync(&b, 1, pool, 0), cudaErrorMemoryAllocation);
	assert_int_equal(cudaGetLastError(), cudaErrorMemoryAllocation);
	assert_int_equal(cudaFreeAsync(a, 0), cudaSuccess);
	assert_int_equal(cudaMallocFromPoolAsync(&b, PAGE, pool, 0), cudaSuccess);
	assert_int_equal(cudaFreeAsync(b, 0), cudaSuccess);
	/* Beyond the device's capacity (64 MiB), whatever the pool's size. */
	assert_int_equal(cudaMallocAsync(&a, 65ull << 20, 0), cudaErrorMemoryAllocation);
	cudaGetLastError();
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
	assert_int_equal(cudaMemPoolDestroy(pool), cudaSuccess);
}

static void test_trim_is_accepted_and_has_nothing_to_release(void **state)
{
	cudaMemPool_t def;
	void *a;

	assert_int_equal(cudaDeviceGetDefaultMemPool(&def, 0), cudaSuccess);
	assert_int_equal(cudaMallocAsync(&a, PAGE, 0), cudaSuccess);
	size_t before = current_bytes();
	uint64_t used = attr(def, cudaMemPoolAttrUsedMemCurrent);
	assert_int_equal(cudaMemPoolTrimTo(def, 0), cudaSuccess);
	assert_int_equal(current_bytes(), before);
	assert_int_equal(attr(def, cudaMemPoolAttrReservedMemCurrent), used);
	assert_int_equal(cudaFreeAsync(a, 0), cudaSuccess);
	assert_int_equal(cudaMemPoolTrimTo(def, 1 << 20), cudaSuccess);
	assert_int_equal(cudaMemPoolTrimTo(NULL, 0), cudaErrorInvalidValue);
	cudaGetLastError();
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
}

/*
 * A release threshold (PyTorch's cudaMallocAsync backend sets UINT64_MAX on the default
 * pool): what is freed stays device memory in use, reserved by the pool, and its next
 * allocations reuse it; a trim gives it back to the device.
 */
static void test_a_release_threshold_keeps_freed_memory_until_a_trim(void **state)
{
	cudaMemPool_t def;
	cuuint64_t keep_all = UINT64_MAX, keep_none = 0;
	void *a, *b;

	assert_int_equal(cudaDeviceGetDefaultMemPool(&def, 0), cudaSuccess);
	assert_int_equal(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReleaseThreshold, &keep_all),
	                 cudaSuccess);
	size_t before = current_bytes();
	uint64_t used = attr(def, cudaMemPoolAttrUsedMemCurrent);
	assert_int_equal(cudaMallocAsync(&a, 4 * PAGE, 0), cudaSuccess);
	assert_int_equal(current_bytes(), before + 4 * PAGE);
	assert_int_equal(cudaFreeAsync(a, 0), cudaSuccess);
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
	/* Freed, and still in use on the device: the pool keeps it. */
	assert_int_equal(current_bytes(), before + 4 * PAGE);
	assert_int_equal(attr(def, cudaMemPoolAttrUsedMemCurrent), used);
	assert_int_equal(attr(def, cudaMemPoolAttrReservedMemCurrent), used + 4 * PAGE);
	/* Reused: no new device memory for what the pool keeps. */
	assert_int_equal(cudaMallocAsync(&b, 2 * PAGE, 0), cudaSuccess);
	assert_int_equal(current_bytes(), before + 4 * PAGE);
	assert_int_equal(cudaFreeAsync(b, 0), cudaSuccess);
	assert_int_equal(cudaMemPoolTrimTo(def, 0), cudaSuccess);
	assert_int_equal(current_bytes(), before);
	assert_int_equal(attr(def, cudaMemPoolAttrReservedMemCurrent), used);
	assert_int_equal(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReleaseThreshold, &keep_none),
	                 cudaSuccess);
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
}

static void test_destroy_refuses_default_pools_and_waits_for_outstanding_blocks(void **state)
{
	cudaMemPool_t def, empty = new_pool(0), busy = new_pool(0);
	CUmemoryPool ddef;
	float *x;
	void *y;
	cuuint64_t value;
	size_t base = current_bytes();

	/* A device's default pool cannot be destroyed. */
	assert_int_equal(cudaDeviceGetDefaultMemPool(&def, 0), cudaSuccess);
	assert_int_equal(cudaMemPoolDestroy(def), cudaErrorInvalidValue);
	assert_int_equal(drv.cuDeviceGetDefaultMemPool(&ddef, 3), CUDA_SUCCESS);
	assert_int_equal(drv.cuMemPoolDestroy(ddef), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(attr(def, cudaMemPoolAttrReleaseThreshold), 0);

	/* An empty pool goes at once; its handle is no longer valid. */
	assert_int_equal(cudaMemPoolDestroy(empty), cudaSuccess);
	assert_int_equal(cudaMemPoolGetAttribute(empty, cudaMemPoolAttrUsedMemCurrent, &value),
	                 cudaErrorInvalidValue);
	assert_int_equal(cudaMemPoolDestroy(empty), cudaErrorInvalidValue);

	/* A pool with an outstanding allocation: the call succeeds, the handle is invalid at
	 * once, and the allocation stays usable until it is freed (ASan checks the rest). */
	assert_int_equal(cudaMallocFromPoolAsync((void **)&x, N * sizeof(float), busy, 0),
	                 cudaSuccess);
	assert_int_equal(cudaMemPoolDestroy(busy), cudaSuccess);
	assert_int_equal(cudaMallocFromPoolAsync(&y, PAGE, busy, 0), cudaErrorInvalidValue);
	assert_int_equal(cudaMemPoolTrimTo(busy, 0), cudaErrorInvalidValue);
	assert_int_equal(cudaMemPoolDestroy(busy), cudaErrorInvalidValue);
	cudaGetLastError();
	assert_int_equal(launch_fill(0, 1000, x, 4.0f, N), cudaSuccess);
	assert_floats(x, N, 4.0f);
	assert_int_equal(current_bytes(), base + PAGE);
	assert_int_equal(cudaFreeAsync(x, 0), cudaSuccess);
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
	assert_int_equal(current_bytes(), base);
}

static void test_pool_properties_are_checked(void **state)
{
	struct cudaMemPoolProps props = {
	        .allocType = cudaMemAllocationTypePinned,
	        .location = {cudaMemLocationTypeDevice, 99},
	};
	CUmemPoolProps dprops = {
	        .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
	        .location = {CU_MEM_LOCATION_TYPE_DEVICE, 99},
	};
	cudaMemPool_t pool;
	CUmemoryPool dpool;

	assert_int_equal(cudaMemPoolCreate(&pool, &props), cudaErrorInvalidDevice);
	assert_int_equal(drv.cuMemPoolCreate(&dpool, &dprops), CUDA_ERROR_INVALID_VALUE);
	props.location = (struct cudaMemLocation){cudaMemLocationTypeHost, 0};
	assert_int_equal(cudaMemPoolCreate(&pool, &props), cudaErrorNotSupported);
	props.location = (struct cudaMemLocation){cudaMemLocationTypeDevice, 1};
	props.allocType = cudaMemAllocationTypeInvalid;
	assert_int_equal(cudaMemPoolCreate(&pool, &props), cudaErrorInvalidValue);
	assert_int_equal(cudaMemPoolCreate(&pool, NULL), cudaErrorInvalidValue);
	assert_int_equal(cudaMemPoolCreate(NULL, &props), cudaErrorInvalidValue);
	cudaGetLastError();

	/* A pool of device 1, with IPC handle types asked for (accepted, not modelled). */
	props.allocType = cudaMemAllocationTypePinned;
	props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
	assert_int_equal(cudaMemPoolCreate(&pool, &props), cudaSuccess);
	assert_int_equal(cudaMemPoolDestroy(pool), cudaSuccess);
}

/* Lookups are free in virtual time; management calls cost one runtime and one driver call. */
static void test_pool_queries_cost_no_virtual_time(void **state)
{
	cudaMemPool_t def;
	cuuint64_t value = 0;

	assert_int_equal(cudaDeviceGetDefaultMemPool(&def, 0), cudaSuccess);
	uint64_t t0 = simgpu_now_ns();
	uint64_t calls = simgpu_counter("cuMemPoolGetAttribute");
	assert_int_equal(cudaDeviceGetDefaultMemPool(&def, 0), cudaSuccess);
	assert_int_equal(cudaMemPoolGetAttribute(def, cudaMemPoolAttrUsedMemHigh, &value),
	                 cudaSuccess);
	assert_int_equal(simgpu_now_ns(), t0);
	assert_int_equal(simgpu_counter("cuMemPoolGetAttribute"), calls + 1);
	assert_int_equal(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReleaseThreshold, &value),
	                 cudaSuccess);
	assert_int_equal(simgpu_now_ns(), t0 + 2 * 500);
}

static void test_a_capturing_stream_cannot_allocate_from_a_pool(void **state)
{
	cudaMemPool_t pool = new_pool(0);
	cudaStream_t s;
	cudaGraph_t graph = NULL;
	void *p;

	assert_int_equal(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
	assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
	assert_int_equal(cudaMallocFromPoolAsync(&p, PAGE, pool, s),
	                 cudaErrorStreamCaptureUnsupported);
	assert_int_equal(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
	cudaGetLastError();
	assert_int_equal(attr(pool, cudaMemPoolAttrUsedMemCurrent), 0);
	assert_int_equal(cudaMemPoolDestroy(pool), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
}

/* ---- Modules and libraries -------------------------------------------------------------- */

static CUresult launch_fill_function(CUfunction f, uint64_t ns, float *out, float value, int n)
{
	void *args[] = {&ns, &out, &value, &n};

	return drv.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL);
}

static void test_a_modules_functions_run_its_kernels_under_handles_of_their_own(void **state)
{
	CUmodule mod = NULL, again = NULL;
	CUfunction fill = NULL, copy = NULL, missing = (CUfunction)&mod, same = NULL;
	const char *name = NULL;
	size_t offset = 0, size = 0;
	float *a, *b;

	assert_int_equal(cudaMalloc((void **)&a, N * sizeof(float)), cudaSuccess);
	assert_int_equal(cudaMalloc((void **)&b, N * sizeof(float)), cudaSuccess);
	assert_int_equal(drv.cuModuleLoadData(&mod, "fill\ncopy\n"), CUDA_SUCCESS);
	assert_non_null(mod);
	assert_int_equal(drv.cuModuleGetFunction(&fill, mod, "fill"), CUDA_SUCCESS);
	assert_int_equal(drv.cuModuleGetFunction(&copy, mod, "copy"), CUDA_SUCCESS);
	/* Handles of the module's own, as a GPU gives each load of the same code: the
	 * registered kernels' are others. Asked again, the module answers the same one. */
	assert_ptr_not_equal(fill, fill_kernel);
	assert_ptr_not_equal(copy, copy_kernel);
	assert_int_equal(drv.cuModuleGetFunction(&same, mod, "fill"), CUDA_SUCCESS);
	assert_ptr_equal(same, fill);
	assert_int_equal(drv.cuModuleLoadData(&again, "fill\n"), CUDA_SUCCESS);
	assert_int_equal(drv.cuModuleGetFunction(&same, again, "fill"), CUDA_SUCCESS);
	assert_ptr_not_equal(same, fill);
	assert_ptr_not_equal(same, fill_kernel);
	assert_int_equal(drv.cuModuleUnload(again), CUDA_SUCCESS);
	/* Metadata and launches work on them as on the kernel. */
	assert_int_equal(drv.cuFuncGetName(&name, fill), CUDA_SUCCESS);
	assert_string_equal(name, "fill");
	assert_int_equal(drv.cuFuncGetParamInfo(copy, 2, &offset, &size), CUDA_SUCCESS);
	assert_int_equal(offset, 16);
	assert_int_equal(size, sizeof(float *));

	assert_int_equal(launch_fill_function(fill, 1000, a, 6.0f, N), CUDA_SUCCESS);
	{
		uint64_t ns = 1000;
		int n = N;
		void *args[] = {&ns, &a, &b, &n};
		assert_int_equal(drv.cuLaunchKernel(copy, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL),
		                 CUDA_SUCCESS);
	}
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
	assert_floats(b, N, 6.0f);

	/* A name the image does not list, or no registered kernel has: not found. */
	assert_int_equal(drv.cuModuleGetFunction(&missing, mod, "saxpy"), CUDA_ERROR_NOT_FOUND);
	assert_ptr_equal(missing, (CUfunction)&mod);
	assert_int_equal(drv.cuModuleGetFunction(&missing, mod, "fil"), CUDA_ERROR_NOT_FOUND);
	assert_int_equal(drv.cuModuleGetFunction(NULL, mod, "fill"), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(drv.cuModuleGetFunction(&missing, mod, NULL), CUDA_ERROR_INVALID_VALUE);

	/* Unload ends the module, not its kernels. */
	assert_int_equal(drv.cuModuleUnload(mod), CUDA_SUCCESS);
	assert_int_equal(drv.cuModuleGetFunction(&fill, mod, "fill"), CUDA_ERROR_INVALID_HANDLE);
	assert_int_equal(drv.cuModuleUnload(mod), CUDA_ERROR_INVALID_HANDLE);
	assert_int_equal(launch_fill_function(fill, 1000, b, 7.0f, N), CUDA_SUCCESS);
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
	assert_floats(b, N, 7.0f);
	assert_int_equal(cudaFree(a), cudaSuccess);
	assert_int_equal(cudaFree(b), cudaSuccess);
}

static void test_an_image_is_a_list_of_names_and_anything_else_is_refused(void **state)
{
	static const char elf[] = "\x7f"
	                          "ELF\x02\x01\x01";
	CUmodule mod = NULL, other = NULL;
	CUjit_option options[] = {CU_JIT_OPTIMIZATION_LEVEL};
	void *values[] = {(void *)(uintptr_t)3};
	CUfunction f;
	const char *name = NULL;
	char image[] = "  fill \r\n\n\tunregistered\t\n";

	/* Blanks and CRLF around names, empty lines; the caller may free the image after. */
	assert_int_equal(drv.cuModuleLoadData(&mod, image), CUDA_SUCCESS);
	memset(image, 'x', sizeof(image) - 1);
	assert_int_equal(drv.cuModuleGetFunction(&f, mod, "fill"), CUDA_SUCCESS);
	assert_int_equal(drv.cuFuncGetName(&name, f), CUDA_SUCCESS);
	assert_string_equal(name, "fill");
	/* Listed, but no kernel has that name; registered, but not listed. */
	assert_int_equal(drv.cuModuleGetFunction(&f, mod, "unregistered"), CUDA_ERROR_NOT_FOUND);
	assert_int_equal(drv.cuModuleGetFunction(&f, mod, "copy"), CUDA_ERROR_NOT_FOUND);

	assert_int_equal(drv.cuModuleLoadData(&other, ""), CUDA_ERROR_INVALID_IMAGE);
	assert_int_equal(drv.cuModuleLoadData(&other, " \n\t\r\n"), CUDA_ERROR_INVALID_IMAGE);
	assert_int_equal(drv.cuModuleLoadData(&other, elf), CUDA_ERROR_INVALID_IMAGE);
	assert_int_equal(drv.cuModuleLoadData(&other, "fill copy\n"), CUDA_ERROR_INVALID_IMAGE);
	assert_int_equal(drv.cuModuleLoadData(&other, "//\n// Generated by NVIDIA NVVM Compiler\n"
	                                              ".version 8.0\n.target sm_90\n"),
	                 CUDA_ERROR_INVALID_IMAGE);
	assert_int_equal(drv.cuModuleLoadData(&other, NULL), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(drv.cuModuleLoadData(NULL, "fill"), CUDA_ERROR_INVALID_VALUE);
	assert_null(other);

	/* JIT options mean nothing without code: checked for shape, then ignored. */
	assert_int_equal(drv.cuModuleLoadDataEx(&other, "copy", 1, NULL, NULL),
	                 CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(drv.cuModuleLoadDataEx(&other, "copy", 1, options, values), CUDA_SUCCESS);
	assert_int_equal(drv.cuModuleGetFunction(&f, other, "copy"), CUDA_SUCCESS);
	assert_int_equal(drv.cuFuncGetName(&name, f), CUDA_SUCCESS);
	assert_string_equal(name, "copy");
	assert_int_equal(drv.cuModuleUnload(other), CUDA_SUCCESS);
	assert_int_equal(drv.cuModuleUnload(mod), CUDA_SUCCESS);
}

static void test_a_librarys_kernels_launch_with_cuLaunchKernel(void **state)
{
	CUlibrary lib = NULL;
	CUmodule mod = NULL;
	CUkernel k = NULL;
	const char *name = NULL;
	float *a;

	assert_int_equal(cudaMalloc((void **)&a, N * sizeof(float)), cudaSuccess);
	assert_int_equal(drv.cuLibraryLoadData(&lib, "copy\nfill", NULL, NULL, 0, NULL, NULL, 0),
	                 CUDA_SUCCESS);
	assert_int_equal(drv.cuLibraryGetKernel(&k, lib, "fill"), CUDA_SUCCESS);
	assert_ptr_not_equal(k, fill_kernel); /* the library's own, as a module's */
	assert_int_equal(drv.cuKernelGetName(&name, k), CUDA_SUCCESS);
	assert_string_equal(name, "fill");
	/* CUDA lets a CUkernel stand for a CUfunction in cuLaunchKernel. */
	assert_int_equal(launch_fill_function((CUfunction)k, 1000, a, 9.0f, N), CUDA_SUCCESS);
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
	assert_floats(a, N, 9.0f);
	assert_int_equal(drv.cuLibraryGetKernel(&k, lib, "axpy"), CUDA_ERROR_NOT_FOUND);

	/* A library is not a module, nor the other way round. */
	assert_int_equal(drv.cuModuleLoadData(&mod, "fill"), CUDA_SUCCESS);
	assert_int_equal(drv.cuLibraryGetKernel(&k, (CUlibrary)mod, "fill"),
	                 CUDA_ERROR_INVALID_HANDLE);
	assert_int_equal(drv.cuModuleUnload((CUmodule)lib), CUDA_ERROR_INVALID_HANDLE);
	assert_int_equal(drv.cuLibraryUnload((CUlibrary)mod), CUDA_ERROR_INVALID_HANDLE);
	assert_int_equal(drv.cuModuleUnload(mod), CUDA_SUCCESS);

	assert_int_equal(drv.cuLibraryLoadData(&lib, "fill", NULL, NULL, 2, NULL, NULL, 0),
	                 CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(drv.cuLibraryUnload(lib), CUDA_SUCCESS);
	assert_int_equal(drv.cuLibraryGetKernel(&k, lib, "fill"), CUDA_ERROR_INVALID_HANDLE);
	assert_int_equal(drv.cuLibraryUnload(lib), CUDA_ERROR_INVALID_HANDLE);
	assert_int_equal(cudaFree(a), cudaSuccess);
}

int main(void)
{
	setenv("SIMGPU_MEM_CAPACITY", "64M", 1);
	setenv("SIMGPU_API_COST_NS", "500", 1);
	test_kernels_register();

	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(
	                test_the_default_pool_is_per_device_and_the_same_through_both_apis),
	        cmocka_unit_test(test_attributes_round_trip_and_read_only_ones_are_refused),
	        cmocka_unit_test(test_used_and_reserved_bytes_follow_the_pools_allocations),
	        cmocka_unit_test(test_allocations_from_a_created_and_the_default_pool_hold_results),
	        cmocka_unit_test(test_a_pools_maximum_size_limits_its_allocations),
	        cmocka_unit_test(test_trim_is_accepted_and_has_nothing_to_release),
	        cmocka_unit_test(test_a_release_threshold_keeps_freed_memory_until_a_trim),
	        cmocka_unit_test(
	                test_destroy_refuses_default_pools_and_waits_for_outstanding_blocks),
	        cmocka_unit_test(test_pool_properties_are_checked),
	        cmocka_unit_test(test_pool_queries_cost_no_virtual_time),
	        cmocka_unit_test(test_a_capturing_stream_cannot_allocate_from_a_pool),
	        cmocka_unit_test(
	                test_a_modules_functions_run_its_kernels_under_handles_of_their_own),
	        cmocka_unit_test(test_an_image_is_a_list_of_names_and_anything_else_is_refused),
	        cmocka_unit_test(test_a_librarys_kernels_launch_with_cuLaunchKernel),
	};
	return cmocka_run_group_tests_name("simgpu_pool", tests, resolve_driver, NULL);
}
