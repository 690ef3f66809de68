/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simgpu's memory: capacity and out-of-memory, accounting, faults on freed and unmapped
 * ranges (checked in forked children), VMM following CUDA's rules, and the
 * stream-ordered pool, and cuMemGetAddressRange over all of them. Capacity is 64 MiB
 * (main); the VMM granularity is the default.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#include "test_kernels.h"

#define MIB (1024ull * 1024)

/* Runs fn in a child; returns the signal that killed it, or 0 if it exited. */
static int signal_of_child(void (*fn)(void *), void *arg)
{
	int status = 0;
	pid_t pid = fork();

	if (pid == 0) {
		/* CMocka's handler would catch the fault and run the suite on in the child. */
		signal(SIGSEGV, SIG_DFL);
		fn(arg);
		_exit(0);
	}
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

static void touch(void *p)
{
	*(volatile char *)p = 1;
}

static void *driver_entry(const char *name)
{
	void *fn = NULL;
	enum cudaDriverEntryPointQueryResult found;

	assert_int_equal(
	        cudaGetDriverEntryPointByVersion(name, &fn, 13000, cudaEnableDefault, &found),
	        cudaSuccess);
	assert_int_equal(found, cudaDriverEntryPointSuccess);
	return fn;
}

static void test_allocation_beyond_capacity_fails_deterministically(void **state)
{
	void *big, *more;
	size_t free_bytes, total;

	assert_int_equal(cudaMalloc(&big, 48 * MIB), cudaSuccess);
	assert_int_equal(cudaMalloc(&more, 20 * MIB), cudaErrorMemoryAllocation);
	assert_int_equal(cudaGetLastError(), cudaErrorMemoryAllocation);
	assert_int_equal(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
	assert_int_equal(total, 64 * MIB);
	assert_int_equal(free_bytes, 16 * MIB);
	assert_int_equal(cudaFree(big), cudaSuccess);
	assert_int_equal(cudaMalloc(&more, 20 * MIB), cudaSuccess);
	assert_int_equal(cudaFree(more), cudaSuccess);
}

static void test_peak_bytes_remember_the_highest_point(void **state)
{
	struct simgpu_memory_stats stats;
	void *a, *b;

	simgpu_memory_reset_peak();
	simgpu_memory_stats(&stats);
	size_t base = stats.current_bytes;
	cudaMalloc(&a, 8 * MIB);
	cudaFree(a);
	cudaMalloc(&b, 5000); /* rounded to two 4 KiB pages */
	simgpu_memory_stats(&stats);
	assert_int_equal(stats.peak_bytes, base + 8 * MIB);
	assert_int_equal(stats.current_bytes, base + 8192);
	cudaFree(b);
}

static void test_access_after_free_faults(void **state)
{
	char *p;

	assert_int_equal(cudaMalloc((void **)&p, 4096), cudaSuccess);
	assert_int_equal(signal_of_child(touch, p), 0);
	cudaFree(p);
	assert_int_equal(signal_of_child(touch, p), SIGSEGV);
}

struct vmm {
	CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
	                   unsigned long long);
	CUresult (*release)(CUmemGenericAllocationHandle);
	CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*address_free)(CUdeviceptr, size_t);
	CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
	                unsigned long long);
	CUresult (*unmap)(CUdeviceptr, size_t);
	CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*granularity)(size_t *, const CUmemAllocationProp *,
	                        CUmemAllocationGranularity_flags);
	CUmemAllocationProp prop;
	CUmemAccessDesc read_write;
};

static int vmm_setup(void **state)
{
	struct vmm *v = calloc(1, sizeof(*v));

	v->create = driver_entry("cuMemCreate");
	v->release = driver_entry("cuMemRelease");
	v->reserve = driver_entry("cuMemAddressReserve");
	v->address_free = driver_entry("cuMemAddressFree");
	v->map = driver_entry("cuMemMap");
	v->unmap = driver_entry("cuMemUnmap");
	v->set_access = driver_entry("cuMemSetAccess");
	v->granularity = driver_entry("cuMemGetAllocationGranularity");
	v->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	v->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	v->read_write.location = v->prop.location;
	v->read_write.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	*state = v;
	return 0;
}

static int vmm_teardown(void **state)
{
	free(*state);
	return 0;
}

static void test_vmm_granularity_is_two_mebibytes(void **state)
{
	struct vmm *v = *state;
	size_t g = 0;

	assert_int_equal(v->granularity(&g, &v->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
	                 CUDA_SUCCESS);
	assert_int_equal(g, 2 * MIB);
}

static void test_vmm_follows_cuda_mapping_rules(void **state)
{
	struct vmm *v = *state;
	CUmemGenericAllocationHandle h, other;
	CUdeviceptr va;
	struct simgpu_memory_stats before, after;

	simgpu_memory_stats(&before);
	assert_int_equal(v->reserve(&va, 8 * MIB, 0, 0, 0), CUDA_SUCCESS);
	assert_int_equal(v->create(&h, 4 * MIB, &v->prop, 0), CUDA_SUCCESS);
	assert_int_equal(v->create(&other, 3 * MIB, &v->prop, 0), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(v->map(va, 4 * MIB, 0, h, 0), CUDA_SUCCESS);
	/* Mapped but not yet accessible. */
	assert_int_equal(signal_of_child(touch, (void *)va), SIGSEGV);
	assert_int_equal(v->set_access(va, 4 * MIB, &v->read_write, 1), CUDA_SUCCESS);
	assert_int_equal(signal_of_child(touch, (void *)va), 0);
	/* Overlaps, partial unmaps and access beyond the mapping are refused. */
	assert_int_equal(v->map(va + 2 * MIB, 2 * MIB, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(v->unmap(va, 2 * MIB), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(v->set_access(va, 8 * MIB, &v->read_write, 1), CUDA_ERROR_INVALID_VALUE);
	assert_int_equal(v->address_free(va, 8 * MIB), CUDA_ERROR_INVALID_VALUE);
	memset((void *)va, 0x5a, 4 * MIB);
	/* Unmapped: the address stays reserved, and access faults. */
	assert_int_equal(v->unmap(va, 4 * MIB), CUDA_SUCCESS);
	assert_int_equal(signal_of_child(touch, (void *)va), SIGSEGV);
	/* Mapped again at the same address, the handle's bytes come back. */
	assert_int_equal(v->map(va, 4 * MIB, 0, h, 0), CUDA_SUCCESS);
	assert_int_equal(v->set_access(va, 4 * MIB, &v->read_write, 1), CUDA_SUCCESS);
	assert_int_equal(((unsigned char *)va)[4 * MIB - 1], 0x5a);
	/* Released while mapped, the memory lives until the unmap. */
	assert_int_equal(v->release(h), CUDA_SUCCESS);
	simgpu_memory_stats(&after);
	assert_int_equal(after.current_bytes, before.current_bytes + 4 * MIB);
	assert_int_equal(v->unmap(va, 4 * MIB), CUDA_SUCCESS);
	simgpu_memory_stats(&after);
	assert_int_equal(after.current_bytes, before.current_bytes);
	assert_int_equal(v->address_free(va, 8 * MIB), CUDA_SUCCESS);
}

static void test_vmm_creation_beyond_capacity_fails(void **state)
{
	struct vmm *v = *state;
	CUmemGenericAllocationHandle h;

	assert_int_equal(v->create(&h, 66 * MIB, &v->prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
}

static void test_stream_ordered_free_lets_the_same_stream_reuse_the_address(void **state)
{
	cudaStream_t s;
	void *a, *b;

	cudaStreamCreate(&s);
	assert_int_equal(cudaMallocAsync(&a, 1 * MIB, s), cudaSuccess);
	assert_int_equal(cudaFreeAsync(a, s), cudaSuccess);
	assert_int_equal(cudaMallocAsync(&b, 1 * MIB, s), cudaSuccess);
	assert_ptr_equal(a, b);
	cudaFreeAsync(b, s);
	cudaStreamSynchronize(s);
	cudaStreamDestroy(s);
}

static void test_reuse_on_another_stream_waits_for_the_free(void **state)
{
	cudaStream_t s1, s2;
	float *a, *b;

	cudaStreamCreate(&s1);
	cudaStreamCreate(&s2);
	cudaMallocAsync((void **)&a, 1 * MIB, s1);
	cudaDeviceSynchronize();
	uint64_t h0 = simgpu_now_ns();
	launch_fill(s1, 100000, a, 1, 4);
	cudaFreeAsync(a, s1); /* completes after the fill, past h0 + 100000 */
	assert_int_equal(cudaMallocAsync((void **)&b, 1 * MIB, s2), cudaSuccess);
	assert_ptr_equal(a, b);
	launch_fill(s2, 10, b, 2, 4);
	cudaStreamSynchronize(s2);
	assert_true(simgpu_now_ns() > h0 + 100000);
	assert_true(b[0] == 2); /* the second fill ran after the first */
	cudaFreeAsync(b, s2);
	cudaDeviceSynchronize();
	cudaStreamDestroy(s1);
	cudaStreamDestroy(s2);
}

static void test_access_after_stream_ordered_free_faults(void **state)
{
	cudaStream_t s;
	void *a;

	cudaStreamCreate(&s);
	cudaMallocAsync(&a, 4096, s);
	cudaStreamSynchronize(s);
	assert_int_equal(signal_of_child(touch, a), 0);
	cudaFreeAsync(a, s);
	cudaStreamSynchronize(s);
	assert_int_equal(signal_of_child(touch, a), SIGSEGV);
	cudaStreamDestroy(s);
}

/* ---- cuMemGetAddressRange ----------------------------------------------------------------- */

#define PAGE 4096ull

static PFN_cuMemGetAddressRange_v3020 address_range(void)
{
	return (PFN_cuMemGetAddressRange_v3020)driver_entry("cuMemGetAddressRange");
}

/* ptr must lie in the allocation [base, base + size). */
static void assert_range(CUdeviceptr ptr, CUdeviceptr base, size_t size)
{
	CUdeviceptr got_base = 0;
	size_t got_size = 0;

	assert_int_equal(address_range()(&got_base, &got_size, ptr), CUDA_SUCCESS);
	assert_int_equal(got_base, base);
	assert_int_equal(got_size, size);
}

static void assert_no_range(CUdeviceptr ptr)
{
	CUdeviceptr base;
	size_t size;

	assert_int_equal(address_range()(&base, &size, ptr), CUDA_ERROR_NOT_FOUND);
}

static void test_address_range_covers_a_cumemalloc_allocation(void **state)
{
	PFN_cuMemAlloc_v3020 mem_alloc = (PFN_cuMemAlloc_v3020)driver_entry("cuMemAlloc");
	PFN_cuMemFree_v3020 mem_free = (PFN_cuMemFree_v3020)driver_entry("cuMemFree");
	const size_t size = 3 * PAGE;
	CUdeviceptr a, b;

	assert_int_equal(mem_alloc(&a, size), CUDA_SUCCESS);
	assert_range(a, a, size);
	assert_range(a + PAGE + 123, a, size);
	assert_range(a + size - 1, a, size);
	/* First fit puts the next allocation right after: one past the end belongs to it. */
	assert_int_equal(mem_alloc(&b, PAGE), CUDA_SUCCESS);
	assert_int_equal(b, a + size);
	assert_range(a + size, b, PAGE);
	assert_int_equal(mem_free(b), CUDA_SUCCESS);
	assert_no_range(a + size);
	assert_range(a + size - 1, a, size);
	assert_int_equal(mem_free(a), CUDA_SUCCESS);
	assert_no_range(a);
}

static void test_address_range_covers_a_cudamalloc_allocation(void **state)
{
	void *p;

	assert_int_equal(cudaMalloc(&p, 16 * PAGE), cudaSuccess);
	assert_range((CUdeviceptr)p + 7 * PAGE, (CUdeviceptr)p, 16 * PAGE);
	assert_int_equal(cudaFree(p), cudaSuccess);
	assert_no_range((CUdeviceptr)p + 7 * PAGE);
}

/* simgpu forgets a stream-ordered block at cudaFreeAsync, before the free completes. */
static void test_address_range_finds_stream_ordered_allocations_until_freed(void **state)
{
	cudaStream_t s;
	void *p;

	assert_int_equal(cudaStreamCreate(&s), cudaSuccess);
	assert_int_equal(cudaMallocAsync(&p, 2 * PAGE, s), cudaSuccess);
	assert_range((CUdeviceptr)p, (CUdeviceptr)p, 2 * PAGE);
	assert_range((CUdeviceptr)p + 2 * PAGE - 1, (CUdeviceptr)p, 2 * PAGE);
	assert_int_equal(cudaFreeAsync(p, s), cudaSuccess);
	assert_no_range((CUdeviceptr)p);
	assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
}

/* Each mapping is its own allocation, accessible or not, even right beside another. */
static void test_address_range_answers_the_vmm_mapping(void **state)
{
	struct vmm *v = *state;
	CUmemGenericAllocationHandle h1, h2;
	CUdeviceptr va;

	assert_int_equal(v->reserve(&va, 8 * MIB, 0, 0, 0), CUDA_SUCCESS);
	assert_int_equal(v->create(&h1, 2 * MIB, &v->prop, 0), CUDA_SUCCESS);
	assert_int_equal(v->create(&h2, 4 * MIB, &v->prop, 0), CUDA_SUCCESS);
	assert_int_equal(v->map(va + 2 * MIB, 2 * MIB, 0, h1, 0), CUDA_SUCCESS);
	assert_int_equal(v->map(va + 4 * MIB, 4 * MIB, 0, h2, 0), CUDA_SUCCESS);
	assert_range(va + 2 * MIB, va + 2 * MIB, 2 * MIB);
	assert_range(va + 4 * MIB - 1, va + 2 * MIB, 2 * MIB);
	assert_range(va + 4 * MIB, va + 4 * MIB, 4 * MIB);
	assert_int_equal(v->set_access(va + 2 * MIB, 6 * MIB, &v->read_write, 1), CUDA_SUCCESS);
	assert_range(va + 3 * MIB, va + 2 * MIB, 2 * MIB);
	assert_range(va + 8 * MIB - 1, va + 4 * MIB, 4 * MIB);
	/* The reserved but unmapped start of the range. */
	assert_no_range(va);
	assert_no_range(va + 2 * MIB - 1);
	/* Unmapped, the range is reserved address space again. */
	assert_int_equal(v->unmap(va + 4 * MIB, 4 * MIB), CUDA_SUCCESS);
	assert_no_range(va + 4 * MIB);
	assert_range(va + 2 * MIB, va + 2 * MIB, 2 * MIB);
	assert_int_equal(v->unmap(va + 2 * MIB, 2 * MIB), CUDA_SUCCESS);
	assert_int_equal(v->release(h1), CUDA_SUCCESS);
	assert_int_equal(v->release(h2), CUDA_SUCCESS);
	assert_int_equal(v->address_free(va, 8 * MIB), CUDA_SUCCESS);
}

static void test_address_range_does_not_find_reserved_unmapped_addresses(void **state)
{
	struct vmm *v = *state;
	CUdeviceptr va;

	assert_int_equal(v->reserve(&va, 4 * MIB, 0, 0, 0), CUDA_SUCCESS);
	assert_no_range(va);
	assert_no_range(va + 3 * MIB);
	assert_no_range(va + 4 * MIB - 1);
	assert_int_equal(v->address_free(va, 4 * MIB), CUDA_SUCCESS);
	assert_no_range(va);
}

static void test_address_range_allows_null_out_parameters(void **state)
{
	PFN_cuMemGetAddressRange_v3020 range = address_range();
	CUdeviceptr base = 0;
	size_t size = 0;
	int on_stack;
	void *p;

	assert_int_equal(cudaMalloc(&p, 2 * PAGE), cudaSuccess);
	assert_int_equal(range(&base, NULL, (CUdeviceptr)p + 1), CUDA_SUCCESS);
	assert_int_equal(base, (CUdeviceptr)p);
	assert_int_equal(range(NULL, &size, (CUdeviceptr)p + 1), CUDA_SUCCESS);
	assert_int_equal(size, 2 * PAGE);
	assert_int_equal(range(NULL, NULL, (CUdeviceptr)p + 1), CUDA_SUCCESS);
	/* Host memory and null are in no allocation, whatever the caller asks for. */
	assert_int_equal(range(NULL, NULL, (CUdeviceptr)&on_stack), CUDA_ERROR_NOT_FOUND);
	assert_int_equal(range(NULL, NULL, 0), CUDA_ERROR_NOT_FOUND);
	assert_int_equal(cudaFree(p), cudaSuccess);
}

/* Counted like every call; a host-side lookup (QUERY), so no virtual time passes. */
static void test_address_range_is_counted_and_free_in_virtual_time(void **state)
{
	PFN_cuMemGetAddressRange_v3020 range = address_range();
	uint64_t calls = simgpu_counter("cuMemGetAddressRange_v2");
	uint64_t now;
	void *p;

	assert_int_not_equal(calls, UINT64_MAX);
	assert_int_equal(cudaMalloc(&p, PAGE), cudaSuccess);
	now = simgpu_now_ns();
	assert_int_equal(range(NULL, NULL, (CUdeviceptr)p), CUDA_SUCCESS);
	assert_int_equal(range(NULL, NULL, 0), CUDA_ERROR_NOT_FOUND);
	assert_int_equal(simgpu_now_ns(), now);
	assert_int_equal(simgpu_counter("cuMemGetAddressRange_v2"), calls + 2);
	assert_int_equal(cudaFree(p), cudaSuccess);
}

int main(void)
{
	setenv("SIMGPU_MEM_CAPACITY", "64M", 1);
	test_kernels_register();
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_allocation_beyond_capacity_fails_deterministically),
	        cmocka_unit_test(test_peak_bytes_remember_the_highest_point),
	        cmocka_unit_test(test_access_after_free_faults),
	        cmocka_unit_test_setup_teardown(test_vmm_granularity_is_two_mebibytes, vmm_setup,
	                                        vmm_teardown),
	        cmocka_unit_test_setup_teardown(test_vmm_follows_cuda_mapping_rules, vmm_setup,
	                                        vmm_teardown),
	        cmocka_unit_test_setup_teardown(test_vmm_creation_beyond_capacity_fails, vmm_setup,
	                                        vmm_teardown),
	        cmocka_unit_test(test_stream_ordered_free_lets_the_same_stream_reuse_the_address),
	        cmocka_unit_test(test_reuse_on_another_stream_waits_for_the_free),
	        cmocka_unit_test(test_access_after_stream_ordered_free_faults),
	        cmocka_unit_test(test_address_range_covers_a_cumemalloc_allocation),
	        cmocka_unit_test(test_address_range_covers_a_cudamalloc_allocation),
	        cmocka_unit_test(test_address_range_finds_stream_ordered_allocations_until_freed),
	        cmocka_unit_test_setup_teardown(test_address_range_answers_the_vmm_mapping,
	                                        vmm_setup, vmm_teardown),
	        cmocka_unit_test_setup_teardown(
	                test_address_range_does_not_find_reserved_unmapped_addresses, vmm_setup,
	                vmm_teardown),
	        cmocka_unit_test(test_address_range_allows_null_out_parameters),
	        cmocka_unit_test(test_address_range_is_counted_and_free_in_virtual_time),
	};
	return cmocka_run_group_tests_name("simgpu_memory", tests, NULL, NULL);
}
