/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simgpu's effects: queued work changes memory when the host observes completion, in
 * virtual-time order, so a missing stream dependency gives wrong data every run.
 * Device memory is host memory in simgpu, which lets these tests peek at it directly.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "test_kernels.h"

#define N 16

struct buffers {
	cudaStream_t producer, consumer;
	cudaEvent_t produced;
	float *x, *y, *pinned;
};

static int setup(void **state)
{
	struct buffers *b = calloc(1, sizeof(*b));

	cudaStreamCreate(&b->producer);
	cudaStreamCreate(&b->consumer);
	cudaEventCreateWithFlags(&b->produced, cudaEventDisableTiming);
	cudaMalloc((void **)&b->x, N * sizeof(float));
	cudaMalloc((void **)&b->y, N * sizeof(float));
	cudaMallocHost((void **)&b->pinned, N * sizeof(float));
	cudaMemset(b->x, 0, N * sizeof(float));
	cudaMemset(b->y, 0, N * sizeof(float));
	for (int i = 0; i < N; i++)
		b->pinned[i] = -1;
	*state = b;
	return cudaDeviceSynchronize() == cudaSuccess ? 0 : -1;
}

static int teardown(void **state)
{
	struct buffers *b = *state;

	cudaFree(b->x);
	cudaFree(b->y);
	cudaFreeHost(b->pinned);
	cudaEventDestroy(b->produced);
	cudaStreamDestroy(b->producer);
	cudaStreamDestroy(b->consumer);
	free(b);
	return 0;
}

static void test_kernel_effects_wait_until_the_host_observes_completion(void **state)
{
	struct buffers *b = *state;

	launch_fill(b->producer, 10, b->x, 7, N);
	assert_true(b->x[0] == 0); /* queued, not yet observed */
	cudaStreamSynchronize(b->producer);
	assert_true(b->x[0] == 7 && b->x[N - 1] == 7);
}

static void test_copy_missing_its_wait_reads_stale_data(void **state)
{
	struct buffers *b = *state;

	launch_fill(b->producer, 100000, b->x, 1, N);
	cudaMemcpyAsync(b->pinned, b->x, N * sizeof(float), cudaMemcpyDeviceToHost, b->consumer);
	cudaDeviceSynchronize();
	assert_true(b->pinned[0] == 0);
	assert_true(b->x[0] == 1);
}

static void test_copy_after_its_wait_reads_fresh_data(void **state)
{
	struct buffers *b = *state;

	launch_fill(b->producer, 100000, b->x, 1, N);
	cudaEventRecord(b->produced, b->producer);
	cudaStreamWaitEvent(b->consumer, b->produced, 0);
	cudaMemcpyAsync(b->pinned, b->x, N * sizeof(float), cudaMemcpyDeviceToHost, b->consumer);
	cudaDeviceSynchronize();
	assert_true(b->pinned[0] == 1);
}

static void test_kernel_missing_its_wait_reads_stale_data(void **state)
{
	struct buffers *b = *state;

	for (int run = 0; run < 3; run++) {
		cudaMemset(b->x, 0, N * sizeof(float));
		cudaMemset(b->y, 0, N * sizeof(float));
		launch_fill(b->producer, 100000, b->x, 1, N);
		launch_copy(b->consumer, 1000, b->x, b->y, N);
		cudaDeviceSynchronize();
		assert_true(b->y[0] == 0); /* every run, not by luck */
	}
}

static void test_kernel_after_its_wait_reads_fresh_data(void **state)
{
	struct buffers *b = *state;

	launch_fill(b->producer, 100000, b->x, 1, N);
	cudaEventRecord(b->produced, b->producer);
	cudaStreamWaitEvent(b->consumer, b->produced, 0);
	launch_copy(b->consumer, 1000, b->x, b->y, N);
	cudaDeviceSynchronize();
	assert_true(b->y[0] == 1);
}

static void test_async_copy_from_pageable_memory_takes_the_bytes_at_issue(void **state)
{
	struct buffers *b = *state;
	float pageable[N];

	for (int i = 0; i < N; i++)
		pageable[i] = 3;
	launch_fill(b->producer, 100000, b->y, 5, N); /* keeps the stream busy */
	cudaMemcpyAsync(b->x, pageable, sizeof(pageable), cudaMemcpyHostToDevice, b->producer);
	for (int i = 0; i < N; i++)
		pageable[i] = 4;
	cudaStreamSynchronize(b->producer);
	assert_true(b->x[0] == 3);
}

static void record_order(void *arg)
{
	int *slot = arg;

	*slot = slot[-1] + 1;
}

static void test_host_functions_run_in_stream_order(void **state)
{
	struct buffers *b = *state;
	int order[3] = {0, 0, 0};

	launch_fill(b->producer, 5000, b->x, 1, N);
	cudaLaunchHostFunc(b->producer, record_order, &order[1]);
	cudaLaunchHostFunc(b->producer, record_order, &order[2]);
	assert_int_equal(order[1], 0);
	cudaStreamSynchronize(b->producer);
	assert_int_equal(order[1], 1);
	assert_int_equal(order[2], 2);
}

int main(void)
{
	test_kernels_register();
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(
	                test_kernel_effects_wait_until_the_host_observes_completion, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(test_copy_missing_its_wait_reads_stale_data, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_copy_after_its_wait_reads_fresh_data, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_kernel_missing_its_wait_reads_stale_data,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(test_kernel_after_its_wait_reads_fresh_data, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(
	                test_async_copy_from_pageable_memory_takes_the_bytes_at_issue, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(test_host_functions_run_in_stream_order, setup,
	                                        teardown),
	};
	return cmocka_run_group_tests_name("simgpu_effects", tests, NULL, NULL);
}
