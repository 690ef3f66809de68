/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simgpu's virtual time: known schedules give exactly the hand-computed times.
 * Settings (main): every API call costs 500 ns, so a runtime call, which forwards one
 * driver call, advances the host clock by 1000 ns before its work is queued; copy
 * engines move 1 byte/ns; concurrent kernels get 50%; communication slows a kernel
 * to 100/125 of its speed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "core.h"
#include "test_kernels.h"

#define CALL 1000 /* host time of one runtime call */

/* Settles all queued work and returns the host clock. */
static uint64_t settle(void)
{
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
	return simgpu_now_ns();
}

static float *device_floats(int n)
{
	float *p = NULL;

	assert_int_equal(cudaMalloc((void **)&p, n * sizeof(float)), cudaSuccess);
	return p;
}

static void test_single_stream_schedule_matches_hand_computed_times(void **state)
{
	cudaStream_t s;
	cudaEvent_t e0, e1;
	float *x = device_floats(4);
	float ms = 0;

	assert_int_equal(cudaStreamCreate(&s), cudaSuccess);
	assert_int_equal(cudaEventCreate(&e0), cudaSuccess);
	assert_int_equal(cudaEventCreate(&e1), cudaSuccess);
	uint64_t h0 = settle();

	cudaEventRecord(e0, s);         /* at h0+1000 */
	launch_fill(s, 10000, x, 1, 4); /* [h0+2000, h0+12000) */
	launch_fill(s, 5000, x, 2, 4);  /* [h0+12000, h0+17000) */
	cudaEventRecord(e1, s);         /* completes at h0+17000 */
	assert_int_equal(simgpu_now_ns(), h0 + 4 * CALL);
	assert_int_equal(cudaEventSynchronize(e1), cudaSuccess);
	assert_int_equal(simgpu_now_ns(), h0 + 17000);
	assert_int_equal(cudaEventElapsedTime(&ms, e0, e1), cudaSuccess);
	assert_true(ms == (float)(16000 / 1e6));

	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaStreamDestroy(s);
	cudaFree(x);
}

static void test_kernels_on_two_streams_share_compute(void **state)
{
	cudaStream_t s1, s2;
	float *x = device_floats(4), *y = device_floats(4);

	cudaStreamCreate(&s1);
	cudaStreamCreate(&s2);
	uint64_t h0 = settle();

	launch_fill(s1, 10000, x, 1, 4); /* [1000, 11000) */
	launch_fill(s2, 4000, y, 1, 4);  /* from 2000 at half speed: 4000 of work by 10000 */
	assert_int_equal(cudaStreamSynchronize(s2), cudaSuccess);
	assert_int_equal(simgpu_now_ns(), h0 + 10000);
	assert_int_equal(cudaStreamSynchronize(s1), cudaSuccess);
	assert_int_equal(simgpu_now_ns(), h0 + 11000);

	cudaStreamDestroy(s1);
	cudaStreamDestroy(s2);
	cudaFree(x);
	cudaFree(y);
}

static void test_kernel_overlapping_communication_is_slowed(void **state)
{
	cudaStream_t compute, comm;
	float *x = device_floats(4);

	cudaStreamCreate(&compute);
	cudaStreamCreate(&comm);
	uint64_t h0 = settle();

	/* Communication in flight over [h0+1000, h0+5000), booked as the NCCL layer does. */
	struct CUstream_st *comm_stream = simgpu_stream_get(comm, false);
	simgpu_core_lock();
	simgpu_comm_book_locked(comm_stream, h0 + 1000, h0 + 5000, "comm", NULL, NULL);
	simgpu_core_unlock();
	/* From 1000: 4000 ns at 80% does 3200 of 10000; the other 6800 end at 11800. */
	launch_fill(compute, 10000, x, 1, 4);
	assert_int_equal(cudaStreamSynchronize(compute), cudaSuccess);
	assert_int_equal(simgpu_now_ns(), h0 + 11800);

	cudaStreamDestroy(compute);
	cudaStreamDestroy(comm);
	cudaFree(x);
}

static void test_copies_on_one_engine_run_in_issue_order(void **state)
{
	cudaStream_t s1, s2, s3;
	char *host, *dev;

	cudaStreamCreate(&s1);
	cudaStreamCreate(&s2);
	cudaStreamCreate(&s3);
	assert_int_equal(cudaMallocHost((void **)&host, 8000), cudaSuccess);
	assert_int_equal(cudaMalloc((void **)&dev, 8000), cudaSuccess);
	uint64_t h0 = settle();

	cudaMemcpyAsync(dev, host, 4000, cudaMemcpyHostToDevice, s1);        /* [1000, 5000) */
	cudaMemcpyAsync(dev + 4000, host, 4000, cudaMemcpyHostToDevice, s2); /* [5000, 9000) */
	cudaMemcpyAsync(host + 4000, dev, 4000, cudaMemcpyDeviceToHost, s3); /* [3000, 7000) */
	cudaStreamSynchronize(s3);
	assert_int_equal(simgpu_now_ns(), h0 + 7000);
	cudaStreamSynchronize(s2);
	assert_int_equal(simgpu_now_ns(), h0 + 9000);

	cudaStreamDestroy(s1);
	cudaStreamDestroy(s2);
	cudaStreamDestroy(s3);
	cudaFreeHost(host);
	cudaFree(dev);
}

static void test_legacy_stream_waits_for_blocking_streams_only(void **state)
{
	cudaStream_t blocking, non_blocking;
	float *x = device_floats(4), *y = device_floats(4), *z = device_floats(4);

	cudaStreamCreate(&blocking);
	cudaStreamCreateWithFlags(&non_blocking, cudaStreamNonBlocking);
	uint64_t h0 = settle();

	launch_fill(blocking, 10000, x, 1, 4);     /* [1000, 11000) */
	launch_fill(non_blocking, 20000, y, 1, 4); /* half speed to 11000, then full: 26500 */
	/* The legacy stream starts after the blocking stream only, at 11000, and shares
	 * compute with the non-blocking kernel: 1000 of work takes 2000. */
	launch_fill(0, 1000, z, 1, 4);
	cudaStreamSynchronize(0);
	assert_int_equal(simgpu_now_ns(), h0 + 13000);
	cudaStreamSynchronize(non_blocking);
	assert_int_equal(simgpu_now_ns(), h0 + 26500);

	cudaStreamDestroy(blocking);
	cudaStreamDestroy(non_blocking);
	cudaFree(x);
	cudaFree(y);
	cudaFree(z);
}

static void test_query_is_not_ready_until_virtual_time_passes(void **state)
{
	cudaStream_t s;
	float *x = device_floats(4);
	int queries = 0;

	cudaStreamCreate(&s);
	settle();
	launch_fill(s, 10000, x, 1, 4); /* ends 11000 after the launch began */
	while (cudaStreamQuery(s) == cudaErrorNotReady)
		queries++;
	/* Queries at 2000 ... 10000 find it running; the one at 11000 finds it done. */
	assert_int_equal(queries, 9);
	assert_int_equal(cudaGetLastError(), cudaSuccess);

	cudaStreamDestroy(s);
	cudaFree(x);
}

static void test_events_without_timing_refuse_elapsed_time(void **state)
{
	cudaEvent_t plain, untimed;
	float ms;

	cudaEventCreate(&plain);
	cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming);
	cudaEventRecord(plain, 0);
	cudaEventRecord(untimed, 0);
	cudaEventSynchronize(untimed);
	assert_int_equal(cudaEventElapsedTime(&ms, plain, untimed), cudaErrorInvalidResourceHandle);
	cudaGetLastError();
	cudaEventDestroy(plain);
	cudaEventDestroy(untimed);
}

static void test_waiting_on_an_event_orders_streams(void **state)
{
	cudaStream_t producer, consumer;
	cudaEvent_t done;
	float *x = device_floats(4), *y = device_floats(4);

	cudaStreamCreate(&producer);
	cudaStreamCreate(&consumer);
	cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
	uint64_t h0 = settle();

	launch_fill(producer, 10000, x, 1, 4); /* [1000, 11000) */
	cudaEventRecord(done, producer);
	cudaStreamWaitEvent(consumer, done, 0);
	launch_copy(consumer, 3000, x, y, 4); /* [11000, 14000): alone on compute */
	cudaStreamSynchronize(consumer);
	assert_int_equal(simgpu_now_ns(), h0 + 14000);

	cudaEventDestroy(done);
	cudaStreamDestroy(producer);
	cudaStreamDestroy(consumer);
	cudaFree(x);
	cudaFree(y);
}

#define JITTERED 64

/*
 * In a child with SIMGPU_JITTER_PCT=10 (settings are read once per process): the device
 * times of JITTERED 10 us kernels on device `device`, written to times.
 */
static void jittered_times(int device, uint64_t times[JITTERED])
{
	int pipefd[2], status;
	pid_t pid;

	assert_int_equal(pipe(pipefd), 0);
	pid = fork();
	if (pid == 0) {
		cudaEvent_t e0, e1;
		float *x;
		float ms = 0;

		setenv("SIMGPU_JITTER_PCT", "10", 1);
		setenv("SIMGPU_API_COST_NS", "0", 1); /* the events then time the kernel alone */
		if (cudaSetDevice(device) || cudaMalloc((void **)&x, 4 * sizeof(float)) ||
		    cudaEventCreate(&e0) || cudaEventCreate(&e1))
			_exit(2);
		for (int i = 0; i < JITTERED; i++) {
			uint64_t ns;

			cudaEventRecord(e0, 0);
			launch_fill(0, 10000, x, 1, 4);
			cudaEventRecord(e1, 0);
			if (cudaEventSynchronize(e1) || cudaEventElapsedTime(&ms, e0, e1))
				_exit(3);
			ns = (uint64_t)(ms * 1e6 + 0.5);
			if (write(pipefd[1], &ns, sizeof(ns)) != (ssize_t)sizeof(ns))
				_exit(4);
		}
		_exit(0);
	}
	close(pipefd[1]);
	for (int i = 0; i < JITTERED; i++)
		assert_int_equal(read(pipefd[0], &times[i], sizeof(times[i])), sizeof(times[i]));
	close(pipefd[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Jitter is noise: within its bound, different per device, the same from run to run. */
static void test_jitter_varies_kernels_per_device_and_repeats(void **state)
{
	uint64_t a[JITTERED], again[JITTERED], b[JITTERED];
	uint64_t lo = UINT64_MAX, hi = 0;
	size_t same_as_other_device = 0;

	jittered_times(0, a);
	jittered_times(0, again);
	jittered_times(1, b);
	assert_memory_equal(a, again, sizeof(a));
	for (int i = 0; i < JITTERED; i++) {
		/* An event pair around one kernel reads its duration, up to float rounding. */
		assert_in_range(a[i], 9000 - 1, 11000 + 1);
		lo = a[i] < lo ? a[i] : lo;
		hi = a[i] > hi ? a[i] : hi;
		same_as_other_device += a[i] == b[i];
	}
	assert_true(hi - lo > 1000); /* 64 draws spread over the band, not one value */
	assert_true(same_as_other_device < JITTERED / 4);
}

int main(void)
{
	setenv("SIMGPU_API_COST_NS", "500", 1);
	setenv("SIMGPU_H2D_BW", "1G", 1);
	setenv("SIMGPU_D2H_BW", "1G", 1);
	setenv("SIMGPU_CONCURRENT_SHARE_PCT", "50", 1);
	setenv("SIMGPU_OVERLAP_SLOWDOWN_PCT", "125", 1);
	test_kernels_register();

	/* First: its children read their own settings only while this process has made no
	 * CUDA call (simgpu reads them once, and a child inherits them). */
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_jitter_varies_kernels_per_device_and_repeats),
	        cmocka_unit_test(test_single_stream_schedule_matches_hand_computed_times),
	        cmocka_unit_test(test_kernels_on_two_streams_share_compute),
	        cmocka_unit_test(test_kernel_overlapping_communication_is_slowed),
	        cmocka_unit_test(test_copies_on_one_engine_run_in_issue_order),
	        cmocka_unit_test(test_legacy_stream_waits_for_blocking_streams_only),
	        cmocka_unit_test(test_query_is_not_ready_until_virtual_time_passes),
	        cmocka_unit_test(test_events_without_timing_refuse_elapsed_time),
	        cmocka_unit_test(test_waiting_on_an_event_orders_streams),
	};
	return cmocka_run_group_tests_name("simgpu_timing", tests, NULL, NULL);
}
