/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tests of the host link measurement (shim/host_link.c) on simgpu's driver, dlopened from
 * build/simgpu with its copy bandwidths set apart (20 GB/s to host, 10 GB/s to the device):
 * the rates come out as simgpu's within 0.1% and the latency as its API call's cost; bad
 * arguments and driver failures give their errors and a zeroed result, with everything
 * allocated released.
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../harness.h"
#include "host_link.h"
#include "simgpu_driver.h"

#define D2H_RATE 20e9
#define H2D_RATE 10e9

static struct lynx_host_link_driver driver;
static PFN_cuMemAlloc_v3020 real_mem_alloc;
static PFN_cuMemFree_v3020 real_mem_free;
static PFN_cuMemcpyDtoHAsync_v3020 real_dtoh;
static int live_allocations; /* device allocations made through the wrappers, not freed */
static int fail_alloc_at;    /* the n-th allocation (from 1) fails out of memory; 0: none */
static int allocations;
static bool fail_copies;
static PFN_cuStreamSynchronize_v2000 real_sync;
static int fail_syncs; /* the next this many synchronisations fail (queued work runs on) */

static CUresult sync_or_fail(CUstream stream)
{
	if (fail_syncs > 0) {
		fail_syncs--;
		return CUDA_ERROR_UNKNOWN;
	}
	return real_sync(stream);
}

static CUresult counted_alloc(CUdeviceptr *ptr, size_t bytes)
{
	CUresult r;

	if (++allocations == fail_alloc_at)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if ((r = real_mem_alloc(ptr, bytes)) == CUDA_SUCCESS)
		live_allocations++;
	return r;
}

static CUresult counted_free(CUdeviceptr ptr)
{
	live_allocations--;
	return real_mem_free(ptr);
}

static CUresult dtoh_or_fail(void *dst, CUdeviceptr src, size_t bytes, CUstream stream)
{
	return fail_copies ? CUDA_ERROR_LAUNCH_FAILED : real_dtoh(dst, src, bytes, stream);
}

static int setup(void **state)
{
	CUcontext ctx;

	(void)state;
	/* simgpu reads its settings when it starts. */
	setenv("SIMGPU_D2H_BW", "20G", 1);
	setenv("SIMGPU_H2D_BW", "10G", 1);
	if (!simgpu_driver_load())
		return -1;
	PFN_cuDevicePrimaryCtxRetain_v7000 retain =
	        simgpu_proc("cuDevicePrimaryCtxRetain", 7000, NULL);
	PFN_cuCtxSetCurrent_v4000 set_current = simgpu_proc("cuCtxSetCurrent", 4000, NULL);
	if (retain && set_current && retain(&ctx, 0) == CUDA_SUCCESS)
		set_current(ctx);
	real_mem_alloc = simgpu_proc("cuMemAlloc", 3020, NULL);
	real_mem_free = simgpu_proc("cuMemFree", 3020, NULL);
	real_dtoh = simgpu_proc("cuMemcpyDtoHAsync", 3020, NULL);
	real_sync = simgpu_proc("cuStreamSynchronize", 2000, NULL);
	driver = (struct lynx_host_link_driver){
	        .mem_alloc = counted_alloc,
	        .mem_free = counted_free,
	        .mem_alloc_host = simgpu_proc("cuMemAllocHost", 3020, NULL),
	        .mem_free_host = simgpu_proc("cuMemFreeHost", 2000, NULL),
	        .stream_create = simgpu_proc("cuStreamCreate", 2000, NULL),
	        .stream_destroy = simgpu_proc("cuStreamDestroy", 4000, NULL),
	        .stream_synchronize = sync_or_fail,
	        .event_create = simgpu_proc("cuEventCreate", 2000, NULL),
	        .event_destroy = simgpu_proc("cuEventDestroy", 4000, NULL),
	        .event_record = simgpu_proc("cuEventRecord", 2000, NULL),
	        .event_elapsed = simgpu_proc("cuEventElapsedTime", 2000, NULL),
	        .memcpy_dtoh_async = dtoh_or_fail,
	        .memcpy_htod_async = simgpu_proc("cuMemcpyHtoDAsync", 3020, NULL),
	};
	return real_mem_alloc && real_mem_free && real_dtoh && real_sync && driver.mem_alloc_host &&
	                       driver.mem_free_host && driver.stream_create &&
	                       driver.stream_destroy && driver.stream_synchronize &&
	                       driver.event_create && driver.event_destroy && driver.event_record &&
	                       driver.event_elapsed && driver.memcpy_htod_async
	               ? 0
	               : -1;
}

static int reset(void **state)
{
	(void)state;
	fail_alloc_at = allocations = fail_syncs = 0;
	fail_copies = false;
	return 0;
}

static void assert_zeroed(const struct lynx_host_link *l)
{
	assert_true(l->d2h_bytes_per_s == 0 && l->h2d_bytes_per_s == 0 && l->latency_s == 0);
}

static void test_rates_are_simgpus(void **state)
{
	struct lynx_host_link l;

	(void)state;
	assert_int_equal(lynx_host_link_measure(&driver, LYNX_HOST_LINK_BYTES, &l), 0);
	/* simgpu's copies take their bytes at the rate, after the 2 us of virtual host time the
	 * copy call costs, which the two points cancel. */
	assert_true(l.d2h_bytes_per_s > 0.999 * D2H_RATE && l.d2h_bytes_per_s < 1.001 * D2H_RATE);
	assert_true(l.h2d_bytes_per_s > 0.999 * H2D_RATE && l.h2d_bytes_per_s < 1.001 * H2D_RATE);
	/* That fixed cost is the latency seen. */
	assert_true(l.latency_s > 1.9e-6 && l.latency_s < 2.1e-6);
	assert_int_equal(live_allocations, 0);
}

static void test_bad_arguments_are_refused(void **state)
{
	struct lynx_host_link l = {1, 1, 1};
	struct lynx_host_link_driver missing = driver;

	(void)state;
	missing.event_elapsed = NULL;
	assert_int_equal(lynx_host_link_measure(&missing, LYNX_HOST_LINK_BYTES, &l), -EINVAL);
	assert_zeroed(&l);
	assert_int_equal(lynx_host_link_measure(NULL, LYNX_HOST_LINK_BYTES, &l), -EINVAL);
	l.latency_s = 1;
	assert_int_equal(lynx_host_link_measure(&driver, LYNX_HOST_LINK_SMALL_BYTES, &l), -EINVAL);
	assert_zeroed(&l);
	assert_int_equal(allocations, 0);
}

static void test_no_device_memory_is_enomem(void **state)
{
	struct lynx_host_link l;

	(void)state;
	fail_alloc_at = 1;
	assert_int_equal(lynx_host_link_measure(&driver, LYNX_HOST_LINK_BYTES, &l), -ENOMEM);
	assert_zeroed(&l);
	assert_int_equal(live_allocations, 0);
}

static void test_a_failing_copy_is_eio_and_releases_everything(void **state)
{
	struct lynx_host_link l;

	(void)state;
	fail_copies = true;
	assert_int_equal(lynx_host_link_measure(&driver, LYNX_HOST_LINK_BYTES, &l), -EIO);
	assert_zeroed(&l);
	assert_int_equal(live_allocations, 0);
}

/*
 * A synchronisation that fails returns with the copy still queued: the buffers are freed
 * only once the stream is idle, and left allocated if it never is (simgpu applied a copy
 * into freed memory once, and faulted).
 */
static void test_buffers_are_never_freed_under_a_queued_copy(void **state)
{
	struct lynx_host_link l;

	(void)state;
	fail_syncs = 1; /* the first copy's; release's own succeeds */
	assert_int_equal(lynx_host_link_measure(&driver, LYNX_HOST_LINK_BYTES, &l), -EIO);
	assert_zeroed(&l);
	assert_int_equal(live_allocations, 0);

	fail_syncs = 1000; /* never idle: the device buffer stays (leaked, not freed) */
	assert_int_equal(lynx_host_link_measure(&driver, LYNX_HOST_LINK_BYTES, &l), -EIO);
	assert_int_equal(live_allocations, 1);
	fail_syncs = 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup(test_rates_are_simgpus, reset),
	        cmocka_unit_test_setup(test_bad_arguments_are_refused, reset),
	        cmocka_unit_test_setup(test_no_device_memory_is_enomem, reset),
	        cmocka_unit_test_setup(test_a_failing_copy_is_eio_and_releases_everything, reset),
	        cmocka_unit_test_setup(test_buffers_are_never_freed_under_a_queued_copy, reset),
	};

	(void)argc;
	if (harness_init(argv[0], "test_host_link") || setup(NULL)) {
		fprintf(stderr, "cannot load simgpu's driver from %s/simgpu\n", build_dir);
		return 1;
	}
	return harness_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
