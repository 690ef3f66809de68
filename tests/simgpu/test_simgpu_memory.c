/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simgpu's memory: capacity and out-of-memory, accounting, faults on freed and unmapped
 * ranges (checked in forked children), VMM following CUDA's rules, and the
 * stream-ordered pool. Capacity is 64 MiB (main); the VMM granularity is the default.
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
	};
	return cmocka_run_group_tests_name("simgpu_memory", tests, NULL, NULL);
}
