/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tests of the device timing marks (shim/timing.c) on simgpu's driver, dlopened from
 * build/simgpu and reached through cuGetProcAddress as the shim reaches the real one. A test
 * kernel has a known virtual cost, so marks around it must resolve to exactly that duration,
 * on one timeline across streams; unreached marks are -EAGAIN, unknown ones -ENOENT, the
 * pool's end gives 0, and a failing event record is reported.
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../harness.h"
#include "../simgpu/simgpu.h"
#include "simgpu_driver.h"
#include "timing.h"

#define KERNEL_NS 250000 /* the test kernel's virtual duration */

static struct lynx_timing_driver driver;
static PFN_cuStreamCreate_v2000 stream_create;
static PFN_cuStreamSynchronize_v2000 stream_synchronize;
static PFN_cuStreamWaitEvent_v3020 stream_wait_event;
static PFN_cuEventCreate_v2000 event_create;
static PFN_cuEventRecord_v2000 event_record;
static PFN_cuLaunchKernel_v4000 launch_kernel;
static const void *busy_kernel;
static bool fail_records; /* the wrapped event_record below fails while set */

static void busy_body(const struct simgpu_launch_dims *dims, void **params)
{
}

static uint64_t busy_cost(const struct simgpu_launch_dims *dims, void **params)
{
	return KERNEL_NS;
}

static CUresult record_or_fail(CUevent event, CUstream stream)
{
	return fail_records ? CUDA_ERROR_LAUNCH_FAILED : event_record(event, stream);
}

static int simgpu_load(void)
{
	void *libcuda = simgpu_driver_load();
	const void *(*kernel_register)(const struct simgpu_kernel_desc *);

	if (!libcuda)
		return -1;
	kernel_register = (const void *(*)(const struct simgpu_kernel_desc *))dlsym(
	        libcuda, "simgpu_kernel_register");
	if (!kernel_register)
		return -1;
	stream_create = (PFN_cuStreamCreate_v2000)simgpu_proc("cuStreamCreate", 2000, NULL);
	stream_synchronize =
	        (PFN_cuStreamSynchronize_v2000)simgpu_proc("cuStreamSynchronize", 2000, NULL);
	stream_wait_event =
	        (PFN_cuStreamWaitEvent_v3020)simgpu_proc("cuStreamWaitEvent", 3020, NULL);
	event_create = (PFN_cuEventCreate_v2000)simgpu_proc("cuEventCreate", 2000, NULL);
	event_record = (PFN_cuEventRecord_v2000)simgpu_proc("cuEventRecord", 2000, NULL);
	launch_kernel = (PFN_cuLaunchKernel_v4000)simgpu_proc("cuLaunchKernel", 4000, NULL);
	driver = (struct lynx_timing_driver){
	        .event_create = event_create,
	        .event_record = record_or_fail,
	        .event_elapsed = (CUresult(*)(float *, CUevent, CUevent))simgpu_proc(
	                "cuEventElapsedTime", 2000, NULL),
	        .event_destroy = (CUresult(*)(CUevent))simgpu_proc("cuEventDestroy", 4000, NULL),
	};
	busy_kernel = kernel_register(&(struct simgpu_kernel_desc){
	        .name = "busy", .num_params = 0, .body = busy_body, .cost_ns = busy_cost});
	return stream_create && stream_synchronize && stream_wait_event && event_create &&
	                       event_record && launch_kernel && driver.event_elapsed &&
	                       driver.event_destroy && busy_kernel
	               ? 0
	               : -1;
}

static CUstream new_stream(void)
{
	CUstream s = NULL;

	assert_int_equal(stream_create(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
	return s;
}

static void busy(CUstream s)
{
	assert_int_equal(launch_kernel((CUfunction)(uintptr_t)busy_kernel, 1, 1, 1, 1, 1, 1, 0, s,
	                               NULL, NULL),
	                 CUDA_SUCCESS);
}

static int64_t resolved(uint32_t mark)
{
	int64_t ns = -1;

	assert_int_equal(lynx_timing_resolve(mark, &ns), 0);
	return ns;
}

static int setup(void **state)
{
	fail_records = false;
	return lynx_timing_init(&driver, 1024);
}

static int teardown(void **state)
{
	lynx_timing_release();
	return 0;
}

/*
 * Marks around a kernel measure its virtual duration when the stream is busy before it (as
 * in a training step: the start mark completes when the work ahead does). On an idle stream
 * the start mark completes at once and the interval also holds the launch's latency (simgpu's
 * API cost here), which the first mark shows. A second stream that waits for the first
 * starts after it, on the same timeline.
 */
static void test_marks_measure_a_kernel_across_streams(void **state)
{
	CUstream a = new_stream(), b = new_stream();
	CUevent done;
	uint32_t idle_start = lynx_timing_mark(a);

	busy(a);
	uint32_t start = lynx_timing_mark(a);
	busy(a);
	uint32_t end = lynx_timing_mark(a);
	assert_int_equal(event_create(&done, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
	assert_int_equal(event_record(done, a), CUDA_SUCCESS);
	assert_int_equal(stream_wait_event(b, done, 0), CUDA_SUCCESS);
	uint32_t b_start = lynx_timing_mark(b);
	busy(b);
	uint32_t b_end = lynx_timing_mark(b);
	assert_true(idle_start && start && end && b_start && b_end);
	assert_int_equal(lynx_timing_used(), 5);
	assert_int_equal(stream_synchronize(b), CUDA_SUCCESS);

	assert_int_equal(resolved(idle_start), 0);
	assert_true(resolved(start) > KERNEL_NS); /* the launch latency, then the kernel */
	/* Float milliseconds: within a microsecond. */
	assert_true(llabs(resolved(end) - resolved(start) - KERNEL_NS) <= 1000);
	assert_true(resolved(b_start) >= resolved(end));
	assert_true(llabs(resolved(b_end) - resolved(b_start) - KERNEL_NS) <= 1000);
}

/* A mark behind unfinished work is not ready yet; once the stream is done, it resolves. */
static void test_unreached_marks_wait_and_unknown_ones_are_refused(void **state)
{
	CUstream s = new_stream();
	uint32_t first = lynx_timing_mark(s);
	int64_t ns;

	for (int i = 0; i < 8; i++)
		busy(s);
	uint32_t later = lynx_timing_mark(s);
	assert_int_equal(lynx_timing_resolve(later, &ns), -EAGAIN);
	assert_int_equal(stream_synchronize(s), CUDA_SUCCESS);
	assert_true(llabs(resolved(later) - resolved(first) - 8 * KERNEL_NS) <= 8000);
	assert_int_equal(lynx_timing_resolve(0, &ns), -ENOENT);
	assert_int_equal(lynx_timing_resolve(5000, &ns), -ENOENT);
	/* Reserved but never recorded. */
	uint32_t unrecorded = lynx_timing_reserve();
	assert_true(unrecorded != 0);
	assert_int_equal(lynx_timing_resolve(unrecorded, &ns), -ENOENT);
}

/* The pool is bounded: past its end a mark is 0, and the count stays at the maximum. */
static void test_the_pool_runs_out_cleanly(void **state)
{
	CUstream s = new_stream();

	lynx_timing_release();
	assert_int_equal(lynx_timing_init(&driver, 300), 0);
	for (int i = 0; i < 300; i++)
		assert_true(lynx_timing_mark(s) != 0);
	assert_int_equal(lynx_timing_mark(s), 0);
	assert_int_equal(lynx_timing_reserve(), 0);
	assert_int_equal(lynx_timing_used(), 300);
}

/* A failing event record is reported and leaves that mark unresolvable; others go on. */
static void test_a_failing_record_is_reported(void **state)
{
	CUstream s = new_stream();
	uint32_t good = lynx_timing_mark(s), bad = lynx_timing_reserve();
	int64_t ns;

	fail_records = true;
	assert_int_equal(lynx_timing_record(bad, s), -EIO);
	fail_records = false;
	assert_int_equal(stream_synchronize(s), CUDA_SUCCESS);
	assert_int_equal(resolved(good), 0);
	assert_int_equal(lynx_timing_resolve(bad, &ns), -ENOENT);
	assert_int_equal(lynx_timing_init(NULL, 10), -EINVAL);
}

/* Every "step_time_ns" value in tinytrain's output, in order; returns how many (at most n). */
static size_t step_times(const char *out, uint64_t *ns, size_t n)
{
	static const char key[] = "\"step_time_ns\":";
	size_t k = 0;

	for (const char *p = strstr(out, key); p && k < n; p = strstr(p + 1, key))
		ns[k++] = strtoull(p + strlen(key), NULL, 10);
	return k;
}

/*
 * Short kernels (a small virtual model): the host sets the pace, and the sample's two
 * marks per launch slow the iterations they time. The profile's iteration time must still
 * be the trainer's own step time, within 2%: it comes from the anchors of the iterations
 * without the sample.
 */
static void test_the_profiles_iteration_time_is_the_trainers_on_short_kernels(void **state)
{
	char env[4096], cmd[1400];
	uint64_t steps[16], slowest = 0;

	snprintf(env, sizeof(env), "LD_PRELOAD=%s/liblynx.so LYNX_MODE=profile LYNX_OUT=%s/short",
	         build_dir, scratch);
	/* This build's tinytrain: a sanitizer's liblynx.so needs the program built with it. */
	snprintf(cmd, sizeof(cmd),
	         "%s/bin/tinytrain --nproc 1 --layers 4 --microbatches 2 --steps 10 "
	         "--virtual-hidden 256 --virtual-heads 8 --virtual-seq 128 --virtual-batch 1",
	         build_dir);
	struct output o = run(env, cmd);
	assert_int_equal(o.exit_code, 0);
	size_t n = step_times(o.out, steps, 16);
	assert_int_equal(n, 10);
	for (size_t i = 0; i < n; i++)
		slowest = steps[i] > slowest ? steps[i] : slowest;
	uint64_t steady = steps[n - 1];
	/* The sample does slow its steps: without the anchors the profile would be wrong. */
	assert_true(slowest > steady + steady / 5);
	const char *line = strstr(o.err, "identical iterations of ");
	assert_non_null(line);
	double ms = strtod(line + strlen("identical iterations of "), NULL);
	assert_non_null(strstr(line, "ms (device time)"));
	double ratio = ms * 1e6 / (double)steady;
	if (ratio < 0.98 || ratio > 1.02)
		fail_msg("profile iteration %.3f ms, the trainer's step %.3f ms", ms,
		         (double)steady / 1e6);
	release(&o);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_marks_measure_a_kernel_across_streams, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(
	                test_unreached_marks_wait_and_unknown_ones_are_refused, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_the_pool_runs_out_cleanly, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_a_failing_record_is_reported, setup, teardown),
	        cmocka_unit_test(test_the_profiles_iteration_time_is_the_trainers_on_short_kernels),
	};

	if (harness_init(argv[0], "test_timing") || simgpu_load()) {
		fprintf(stderr, "cannot load simgpu's driver from %s/simgpu\n", build_dir);
		return 1;
	}
	return harness_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
