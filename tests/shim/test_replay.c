/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tests of kernel replay and verification on simgpu's driver (dlopened from build/simgpu,
 * reached through cuGetProcAddress like the shim does), with kernels of this file registered
 * through simgpu's API: redirected replays, pointers inside by-value structs, words left
 * alone, non-determinism, a pointer read from device memory, in-place accumulation,
 * temporaries, records that cannot be replayed, and launches that fail; then examination
 * (inputs, workspaces, updated operands, memory read or written through pointers stored in
 * device memory, limits) and refreshing a segment's parameters; then launches made with a
 * launch config (cudaLaunchKernelExC, cuLaunchKernelEx and their per-thread forms, with
 * kernelParams or `extra`), replayed through cuLaunchKernelEx with the attributes kept, and
 * attributes that make a launch one that cannot be replayed.
 *
 * Each kernel is first launched for real and recorded the way the shim's launch hook records
 * it: a recorder event whose payload is the packed parameter bytes (cuFuncGetParamInfo), and
 * a launch config's attributes, copied by the hook's own function (launch_attrs.h).
 * cuLaunchKernelEx in the replay's table is a spy that keeps the last config it was given.
 * simgpu reads SIMGPU_FAULTS once per process, so the failing-launch suite runs in a child
 * forked before simgpu is loaded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include "../harness.h"
#include "simgpu_driver.h"
#include "../simgpu/simgpu.h"
#include "launch_attr.h"
#include "launch_attrs.h"
#include "log.h"
#include "recorder.h"
#include "replay.h"

#define N 64 /* floats per test buffer */

static struct lynx_replay_driver driver;
static PFN_cuStreamCreate_v2000 stream_create;
static PFN_cuStreamDestroy_v4000 stream_destroy;
static uint64_t (*call_count)(const char *symbol);
static void (*memory_stats)(struct simgpu_memory_stats *out);

/* simgpu's launches with a launch config: the driver's two forms and the runtime's (its
 * libcudart.so.13, which reaches the same driver through cuGetProcAddress). */
static PFN_cuLaunchKernelEx_v11060 launch_ex, launch_ex_ptsz;
static cudaError_t (*launch_exc)(const cudaLaunchConfig_t *, const void *, void **);
static cudaError_t (*launch_exc_ptsz)(const cudaLaunchConfig_t *, const void *, void **);

/* What the replay's cuLaunchKernelEx was last given, its attributes copied. */
static struct {
	unsigned int calls;
	CUlaunchConfig config;
	CUfunction function;
	CUlaunchAttribute attrs[LYNX_LAUNCH_MAX_ATTRS];
} spy;

static CUresult spy_launch_kernel_ex(const CUlaunchConfig *config, CUfunction f, void **params,
                                     void **extra)
{
	spy.calls++;
	spy.config = *config;
	spy.function = f;
	memset(spy.attrs, 0, sizeof(spy.attrs));
	if (config->attrs && config->numAttrs <= LYNX_LAUNCH_MAX_ATTRS)
		memcpy(spy.attrs, config->attrs, config->numAttrs * sizeof(*config->attrs));
	return launch_ex(config, f, params, extra);
}

/* ---- Kernels ----------------------------------------------------------------------------- */

static const void *scale_kernel, *scale_struct_kernel, *add_one_kernel, *stamp_kernel,
        *fill_through_kernel, *echo_words_kernel, *accumulate_kernel, *add_bias_kernel,
        *staged_kernel, *scale_amax_kernel, *gather_kernel, *gather_direct_kernel, *mirror_kernel;

/* scale(x, y, a, n): y = a * x. */
static void scale_body(const struct simgpu_launch_dims *dims, void **params)
{
	const float *x = *(const float **)params[0];
	float *y = *(float **)params[1];
	float a = *(float *)params[2];
	int n = *(int *)params[3];

	for (int i = 0; i < n; i++)
		y[i] = a * x[i];
}

/* scale_struct(args): the same, with the pointers inside a by-value struct. */
struct scale_args {
	const float *x;
	float *y;
	float a;
	int n;
};

static void scale_struct_body(const struct simgpu_launch_dims *dims, void **params)
{
	struct scale_args args = *(struct scale_args *)params[0];

	for (int i = 0; i < args.n; i++)
		args.y[i] = args.a * args.x[i];
}

/* add_one(x, y, n): y = x + 1. */
static void add_one_body(const struct simgpu_launch_dims *dims, void **params)
{
	const float *x = *(const float **)params[0];
	float *y = *(float **)params[1];
	int n = *(int *)params[2];

	for (int i = 0; i < n; i++)
		y[i] = x[i] + 1.0f;
}

/* stamp(counter, out, n): out = ++*counter, everywhere. Not deterministic by design. */
static void stamp_body(const struct simgpu_launch_dims *dims, void **params)
{
	unsigned int *counter = *(unsigned int **)params[0];
	float *out = *(float **)params[1];
	int n = *(int *)params[2];
	float stamp = (float)++*counter;

	for (int i = 0; i < n; i++)
		out[i] = stamp;
}

/* fill_through(out_ref, value, n): (*out_ref)[0..n) = value; the output pointer lives in
 * device memory, like tinytrain's embedding table. */
static void fill_through_body(const struct simgpu_launch_dims *dims, void **params)
{
	float *const *out_ref = *(float *const **)params[0];
	float value = *(float *)params[1];
	int n = *(int *)params[2];

	for (int i = 0; i < n; i++)
		(*out_ref)[i] = value;
}

/* echo_words(out, a, b, c): out[0..3) = a, b, c, so a test sees the words as launched. */
static void echo_words_body(const struct simgpu_launch_dims *dims, void **params)
{
	uint64_t *out = *(uint64_t **)params[0];

	for (int i = 0; i < 3; i++)
		out[i] = *(uint64_t *)params[1 + i];
}

/* accumulate(x, y, n): y += x, in place. */
static void accumulate_body(const struct simgpu_launch_dims *dims, void **params)
{
	const float *x = *(const float **)params[0];
	float *y = *(float **)params[1];
	int n = *(int *)params[2];

	for (int i = 0; i < n; i++)
		y[i] += x[i];
}

/* add_bias(out, x, bias, n): out = x + bias[i % 4]. */
static void add_bias_body(const struct simgpu_launch_dims *dims, void **params)
{
	float *out = *(float **)params[0];
	const float *x = *(const float **)params[1];
	const float *bias = *(const float **)params[2];
	int n = *(int *)params[3];

	for (int i = 0; i < n; i++)
		out[i] = x[i] + bias[i % 4];
}

/* staged(x, ws, y, n): ws = 3x, then y = ws + 1, like a GEMM that stages its result in a
 * shared workspace: the workspace is written before it is read. */
static void staged_body(const struct simgpu_launch_dims *dims, void **params)
{
	const float *x = *(const float **)params[0];
	float *ws = *(float **)params[1];
	float *y = *(float **)params[2];
	int n = *(int *)params[3];

	for (int i = 0; i < n; i++)
		ws[i] = 3.0f * x[i];
	for (int i = 0; i < n; i++)
		y[i] = ws[i] + 1.0f;
}

/* scale_amax(x, meta, y, n): y = x * meta[0], and meta[1] += sum |x|, like FP8 scaling
 * that reads its scale from the buffer it accumulates a statistic into. */
static void scale_amax_body(const struct simgpu_launch_dims *dims, void **params)
{
	const float *x = *(const float **)params[0];
	float *meta = *(float **)params[1];
	float *y = *(float **)params[2];
	int n = *(int *)params[3];

	for (int i = 0; i < n; i++) {
		y[i] = x[i] * meta[0];
		meta[1] += x[i] < 0 ? -x[i] : x[i];
	}
}

/* gather(tokens, table_ref, out, n): out = (*table_ref)[tokens[i]]; the table pointer lives
 * in device memory, as in tinytrain's embedding. */
static void gather_body(const struct simgpu_launch_dims *dims, void **params)
{
	const int *tokens = *(const int **)params[0];
	const float *const *table_ref = *(const float *const **)params[1];
	float *out = *(float **)params[2];
	int n = *(int *)params[3];

	for (int i = 0; i < n; i++)
		out[i] = (*table_ref)[tokens[i]];
}

/* gather_direct(tokens, table, out, n): the same, the table named by its parameters. */
static void gather_direct_body(const struct simgpu_launch_dims *dims, void **params)
{
	const int *tokens = *(const int **)params[0];
	const float *table = *(const float **)params[1];
	float *out = *(float **)params[2];
	int n = *(int *)params[3];

	for (int i = 0; i < n; i++)
		out[i] = table[tokens[i]];
}

/* mirror(x, copy_ref, y, n): y = x, and x again into *copy_ref, a pointer in device memory. */
static void mirror_body(const struct simgpu_launch_dims *dims, void **params)
{
	const float *x = *(const float **)params[0];
	float *const *copy_ref = *(float *const **)params[1];
	float *y = *(float **)params[2];
	int n = *(int *)params[3];

	for (int i = 0; i < n; i++)
		y[i] = (*copy_ref)[i] = x[i];
}

/* Registers a kernel of four parameters: three pointers and an int. */
static const void *
register_three_pointers(const void *(*kernel_register)(const struct simgpu_kernel_desc *),
                        const char *name, void (*body)(const struct simgpu_launch_dims *, void **))
{
	const size_t ptr = sizeof(void *);

	return kernel_register(&(struct simgpu_kernel_desc){
	        .name = name,
	        .num_params = 4,
	        .param_sizes = {ptr, ptr, ptr, sizeof(int)},
	        .body = body,
	});
}

static int register_kernels(const void *(*kernel_register)(const struct simgpu_kernel_desc *))
{
	const size_t ptr = sizeof(void *);

	add_bias_kernel = register_three_pointers(kernel_register, "add_bias", add_bias_body);
	staged_kernel = register_three_pointers(kernel_register, "staged", staged_body);
	scale_amax_kernel = register_three_pointers(kernel_register, "scale_amax", scale_amax_body);
	gather_kernel = register_three_pointers(kernel_register, "gather", gather_body);
	gather_direct_kernel =
	        register_three_pointers(kernel_register, "gather_direct", gather_direct_body);
	mirror_kernel = register_three_pointers(kernel_register, "mirror", mirror_body);
	if (!add_bias_kernel || !staged_kernel || !scale_amax_kernel || !gather_kernel ||
	    !gather_direct_kernel || !mirror_kernel)
		return -1;

	scale_kernel = kernel_register(&(struct simgpu_kernel_desc){
	        .name = "scale",
	        .num_params = 4,
	        .param_sizes = {ptr, ptr, sizeof(float), sizeof(int)},
	        .body = scale_body,
	});
	scale_struct_kernel = kernel_register(&(struct simgpu_kernel_desc){
	        .name = "scale_struct",
	        .num_params = 1,
	        .param_sizes = {sizeof(struct scale_args)},
	        .body = scale_struct_body,
	});
	add_one_kernel = kernel_register(&(struct simgpu_kernel_desc){
	        .name = "add_one",
	        .num_params = 3,
	        .param_sizes = {ptr, ptr, sizeof(int)},
	        .body = add_one_body,
	});
	stamp_kernel = kernel_register(&(struct simgpu_kernel_desc){
	        .name = "stamp",
	        .num_params = 3,
	        .param_sizes = {ptr, ptr, sizeof(int)},
	        .body = stamp_body,
	});
	fill_through_kernel = kernel_register(&(struct simgpu_kernel_desc){
	        .name = "fill_through",
	        .num_params = 3,
	        .param_sizes = {ptr, sizeof(float), sizeof(int)},
	        .body = fill_through_body,
	});
	echo_words_kernel = kernel_register(&(struct simgpu_kernel_desc){
	        .name = "echo_words",
	        .num_params = 4,
	        .param_sizes = {ptr, 8, 8, 8},
	        .body = echo_words_body,
	});
	accumulate_kernel = kernel_register(&(struct simgpu_kernel_desc){
	        .name = "accumulate",
	        .num_params = 3,
	        .param_sizes = {ptr, ptr, sizeof(int)},
	        .body = accumulate_body,
	});
	return scale_kernel && scale_struct_kernel && add_one_kernel && stamp_kernel &&
	                       fill_through_kernel && echo_words_kernel && accumulate_kernel
	               ? 0
	               : -1;
}

/* ---- simgpu ------------------------------------------------------------------------------ */

/* Loads simgpu's libcuda.so.1, initialises it, fills the replay table and registers the
 * kernels. Returns 0 or -1. */
static int simgpu_load(void)
{
	void *libcuda;
	const void *(*kernel_register)(const struct simgpu_kernel_desc *);

	if (!(libcuda = simgpu_driver_load()))
		return -1;
	kernel_register = (const void *(*)(const struct simgpu_kernel_desc *))dlsym(
	        libcuda, "simgpu_kernel_register");
	call_count = (uint64_t(*)(const char *))dlsym(libcuda, "simgpu_counter");
	memory_stats =
	        (void (*)(struct simgpu_memory_stats *))dlsym(libcuda, "simgpu_memory_stats");
	if (!kernel_register || !call_count || !memory_stats)
		return -1;
	stream_create = (PFN_cuStreamCreate_v2000)simgpu_proc("cuStreamCreate", 2000, NULL);
	stream_destroy = (PFN_cuStreamDestroy_v4000)simgpu_proc("cuStreamDestroy", 4000, NULL);
	if (!stream_create || !stream_destroy ||
	    lynx_replay_driver_resolve(&driver, simgpu_proc, NULL))
		return -1;
	launch_ex = driver.launch_kernel_ex;
	driver.launch_kernel_ex = spy_launch_kernel_ex;
	CUdriverProcAddressQueryResult found;
	if (simgpu_get_proc_address("cuLaunchKernelEx", (void **)&launch_ex_ptsz, 11060,
	                            CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
	                            &found) != CUDA_SUCCESS ||
	    found != CU_GET_PROC_ADDRESS_SUCCESS || launch_ex_ptsz == launch_ex)
		return -1;
	char path[1200];
	snprintf(path, sizeof(path), "%s/simgpu/libcudart.so.13", build_dir);
	void *libcudart = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!libcudart)
		return -1;
	launch_exc = (cudaError_t(*)(const cudaLaunchConfig_t *, const void *, void **))dlsym(
	        libcudart, "cudaLaunchKernelExC");
	launch_exc_ptsz = (cudaError_t(*)(const cudaLaunchConfig_t *, const void *, void **))dlsym(
	        libcudart, "cudaLaunchKernelExC_ptsz");
	if (!launch_exc || !launch_exc_ptsz)
		return -1;
	return register_kernels(kernel_register);
}

/* ---- Helpers ----------------------------------------------------------------------------- */

static size_t physical_bytes(void)
{
	struct simgpu_memory_stats stats;

	memory_stats(&stats);
	return stats.current_bytes;
}

static CUdeviceptr device_alloc(size_t bytes)
{
	CUdeviceptr ptr = 0;

	assert_int_equal(driver.mem_alloc(&ptr, bytes), CUDA_SUCCESS);
	return ptr;
}

static void upload(CUstream stream, CUdeviceptr dst, const void *src, size_t bytes)
{
	assert_int_equal(driver.memcpy_htod_async(dst, src, bytes, stream), CUDA_SUCCESS);
	assert_int_equal(driver.stream_synchronize(stream), CUDA_SUCCESS);
}

static void download(CUstream stream, void *dst, CUdeviceptr src, size_t bytes)
{
	assert_int_equal(driver.memcpy_dtoh_async(dst, src, bytes, stream), CUDA_SUCCESS);
	assert_int_equal(driver.stream_synchronize(stream), CUDA_SUCCESS);
}

/* Floats with every mantissa bit in play, so that a replay that is merely close shows. */
static void inputs(float *x)
{
	for (int i = 0; i < N; i++)
		x[i] = (float)i * 0.3713f + 1.0f / 3.0f;
}

/* A launch recorded as the shim records it: an event, the packed parameters after it, and
 * a launch config's attributes after those. */
struct recording {
	struct lynx_event event;
	unsigned char payload[1024];
};

/* Records kernel's launch with args into *rec (1x1x1 blocks of `threads` threads): the
 * parameters packed at their cuFuncGetParamInfo offsets. */
static void record_launch(const void *kernel, void **args, unsigned int threads,
                          struct recording *rec)
{
	CUfunction f = (CUfunction)(uintptr_t)kernel;
	uint32_t count = 0, bytes = 0;
	size_t offset, size;

	memset(rec, 0, sizeof(*rec));
	while (driver.func_get_param_info(f, count, &offset, &size) == CUDA_SUCCESS) {
		assert_true(offset + size <= sizeof(rec->payload));
		memcpy(rec->payload + offset, args[count], size);
		if (offset + size > bytes)
			bytes = (uint32_t)(offset + size);
		count++;
	}
	rec->event.kind = LYNX_EV_LAUNCH;
	rec->event.u.launch.function = (uint64_t)(uintptr_t)kernel;
	for (int i = 0; i < 3; i++)
		rec->event.u.launch.grid[i] = rec->event.u.launch.block[i] = 1;
	rec->event.u.launch.block[0] = threads;
	rec->event.u.launch.param_count = count;
	rec->event.u.launch.param_bytes = bytes;
}

/* Launches kernel on stream with args, records it into *rec and fills *kernel from the
 * record. */
static void launch_recorded(CUstream stream, const void *kernel, void **args, struct recording *rec,
                            struct lynx_replay_kernel *out)
{
	CUfunction f = (CUfunction)(uintptr_t)kernel;

	record_launch(kernel, args, 1, rec);
	assert_int_equal(driver.launch_kernel(f, 1, 1, 1, 1, 1, 1, 0, stream, args, NULL),
	                 CUDA_SUCCESS);
	assert_int_equal(driver.stream_synchronize(stream), CUDA_SUCCESS);
	assert_true(lynx_replay_kernel_from_event(&rec->event, out));
	assert_ptr_equal(out->params, rec->payload);
}

static struct lynx_replay_segment *segment_of(const struct lynx_replay_kernel *kernels,
                                              size_t count)
{
	struct lynx_replay_segment *segment = NULL;

	assert_int_equal(lynx_replay_segment_create(&driver, kernels, count, &segment), 0);
	assert_non_null(segment);
	assert_int_equal(lynx_replay_segment_kernels(segment), count);
	return segment;
}

struct fixture {
	CUstream stream;
	size_t physical_before;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f || stream_create(&f->stream, 0) != CUDA_SUCCESS) {
		free(f);
		return -1;
	}
	f->physical_before = physical_bytes();
	*state = f;
	return 0;
}

/* Fails if a test left device memory behind: verification's own scratch included. */
static int teardown(void **state)
{
	struct fixture *f = *state;
	size_t leaked = physical_bytes() - f->physical_before;
	CUresult destroyed = stream_destroy(f->stream);

	free(f);
	if (leaked || destroyed != CUDA_SUCCESS) {
		fprintf(stderr, "%zu bytes of device memory left, stream destroy %d\n", leaked,
		        (int)destroyed);
		return -1;
	}
	return 0;
}

/* ---- Tests ------------------------------------------------------------------------------- */

static void test_a_redirected_replay_reproduces_bit_for_bit(void **state)
{
	struct fixture *f = *state;
	CUdeviceptr x = device_alloc(N * 4), y = device_alloc(N * 4), z = device_alloc(N * 4);
	float a = 1.7f, host_x[N], host_y[N], host_z[N], after[N];
	int n = N;
	struct recording rec;
	struct lynx_replay_kernel kernel;
	struct lynx_replay_check check;
	struct lynx_replay_stats stats;

	inputs(host_x);
	upload(f->stream, x, host_x, sizeof(host_x));
	launch_recorded(f->stream, scale_kernel, (void *[]){&x, &y, &a, &n}, &rec, &kernel);
	download(f->stream, host_y, y, sizeof(host_y));
	struct lynx_replay_segment *segment = segment_of(&kernel, 1);
	assert_null(lynx_replay_segment_unsupported(segment, NULL));

	/* Verification, with scratch of its own: y redirected, x read in place. */
	assert_int_equal(lynx_replay_verify(segment, f->stream,
	                                    &(struct lynx_replay_range){y, N * 4}, NULL, 1, NULL, 0,
	                                    &check),
	                 LYNX_REPLAY_REPRODUCES);
	assert_int_equal(check.verdict, LYNX_REPLAY_REPRODUCES);
	assert_int_equal(check.rewritten, 1);
	assert_false(check.restore_failed);
	assert_non_null(strstr(check.reason, "bit for bit"));
	download(f->stream, after, y, sizeof(after));
	assert_memory_equal(after, host_y, sizeof(after));

	/* A plain replay into z gives y's bytes, and leaves y alone. */
	memset(host_z, 0, sizeof(host_z));
	upload(f->stream, z, host_z, sizeof(host_z));
	assert_int_equal(lynx_replay_launch(segment, f->stream,
	                                    &(struct lynx_replay_redirect){y, N * 4, z}, 1, &stats),
	                 0);
	assert_int_equal(driver.stream_synchronize(f->stream), CUDA_SUCCESS);
	assert_int_equal(stats.rewritten, 1);
	assert_int_equal(stats.launched, 1);
	assert_int_equal(stats.error, CUDA_SUCCESS);
	download(f->stream, host_z, z, sizeof(host_z));
	assert_memory_equal(host_z, host_y, sizeof(host_z));

	/* The record's bytes are the segment's own copy: the caller may reuse them. */
	memset(rec.payload, 0, sizeof(rec.payload));
	assert_int_equal(lynx_replay_verify(segment, f->stream,
	                                    &(struct lynx_replay_range){y, N * 4}, &z, 1, NULL, 0,
	                                    &check),
	                 LYNX_REPLAY_REPRODUCES);

	lynx_replay_segment_destroy(segment);
	driver.mem_free(x);
	driver.mem_free(y);
	driver.mem_free(z);
}

static void test_a_pointer_inside_a_by_value_struct_is_redirected(void **state)
{
	struct fixture *f = *state;
	CUdeviceptr x = device_alloc(N * 4), y = device_alloc(N * 4), z = device_alloc(N * 4);
	struct scale_args args = {(const float *)x, (float *)y, 2.5f, N};
	float host_x[N], host_y[N], host_z[N], sentinel[N];
	struct recording rec;
	struct lynx_replay_kernel kernel;
	struct lynx_replay_check check;
	struct lynx_replay_stats stats;

	inputs(host_x);
	upload(f->stream, x, host_x, sizeof(host_x));
	launch_recorded(f->stream, scale_struct_kernel, (void *[]){&args}, &rec, &kernel);
	assert_int_equal(kernel.param_count, 1);
	assert_int_equal(kernel.param_bytes, sizeof(struct scale_args));
	download(f->stream, host_y, y, sizeof(host_y));
	struct lynx_replay_segment *segment = segment_of(&kernel, 1);

	assert_int_equal(lynx_replay_verify(segment, f->stream,
	                                    &(struct lynx_replay_range){y, N * 4}, NULL, 1, NULL, 0,
	                                    &check),
	                 LYNX_REPLAY_REPRODUCES);
	assert_int_equal(check.rewritten, 1);

	/* y now holds something else (its address reused): the replay writes z only. */
	for (int i = 0; i < N; i++)
		sentinel[i] = -1.0f;
	upload(f->stream, y, sentinel, sizeof(sentinel));
	assert_int_equal(lynx_replay_launch(segment, f->stream,
	                                    &(struct lynx_replay_redirect){y, N * 4, z}, 1, &stats),
	                 0);
	assert_int_equal(driver.stream_synchronize(f->stream), CUDA_SUCCESS);
	assert_int_equal(stats.rewritten, 1);
	download(f->stream, host_z, z, sizeof(host_z));
	assert_memory_equal(host_z, host_y, sizeof(host_z));
	download(f->stream, host_y, y, sizeof(host_y));
	assert_memory_equal(host_y, sentinel, sizeof(host_y));

	lynx_replay_segment_destroy(segment);
	driver.mem_free(x);
	driver.mem_free(y);
	driver.mem_free(z);
}

static void test_words_outside_every_from_range_are_left_alone(void **state)
{
	struct fixture *f = *state;
	CUdeviceptr out = device_alloc(24), other = device_alloc(64), z = device_alloc(24);
	/* a: inside out (redirected to the same offset in z); b: one past out's end; c: another
	 * allocation. b and c look like pointers but lie in no from-range. */
	uint64_t a = out + 8, b = out + 24, c = other + 8;
	uint64_t words[3], zero[3] = {0};
	struct recording rec;
	struct lynx_replay_kernel kernel;
	struct lynx_replay_stats stats;

	launch_recorded(f->stream, echo_words_kernel, (void *[]){&out, &a, &b, &c}, &rec, &kernel);
	download(f->stream, words, out, sizeof(words));
	assert_int_equal(words[0], a);
	assert_int_equal(words[2], c);
	struct lynx_replay_segment *segment = segment_of(&kernel, 1);

	upload(f->stream, z, zero, sizeof(zero));
	assert_int_equal(lynx_replay_launch(segment, f->stream,
	                                    &(struct lynx_replay_redirect){out, 24, z}, 1, &stats),
	                 0);
	assert_int_equal(driver.stream_synchronize(f->stream), CUDA_SUCCESS);
	assert_int_equal(stats.rewritten, 2); /* out itself, and a */
	download(f->stream, words, z, sizeof(words));
	assert_int_equal(words[0], z + 8);
	assert_int_equal(words[1], b);
	assert_int_equal(words[2], c);

	lynx_replay_segment_destroy(segment);
	driver.mem_free(out);
	driver.mem_free(other);
	driver.mem_free(z);
}

static void test_a_nondeterministic_kernel_differs(void **state)
{
	struct fixture *f = *state;
	CUdeviceptr counter = device_alloc(4), out = device_alloc(N * 4);
	unsigned int zero = 0, count;
	int n = N;
	float host_out[N];
	struct recording rec;
	struct lynx_replay_kernel kernel;
	struct lynx_replay_check check;

	upload(f->stream, counter, &zero, sizeof(zero));
	launch_recorded(f->stream, stamp_kernel, (void *[]){&counter, &out, &n}, &rec, &kernel);
	struct lynx_replay_segment *segment = segment_of(&kernel, 1);

	assert_int_equal(lynx_replay_verify(segment, f->stream,
	                                    &(struct lynx_replay_range){out, N * 4}, NULL, 1, NULL,
	                                    0, &check),
	                 LYNX_REPLAY_DIFFERS);
	assert_int_equal(check.output, 0);
	/* 1.0f is 00 00 80 3f and 2.0f is 00 00 00 40, little-endian: byte 2 differs first. */
	assert_int_equal(check.offset, 2);
	assert_non_null(strstr(check.reason, "output 0 differs"));
	/* The counter is read in place (it is no output): the replay did increment it. */
	download(f->stream, &count, counter, sizeof(count));
	assert_int_equal(count, 2);
	download(f->stream, host_out, out, sizeof(host_out));
	for (int i = 0; i < N; i++)
		assert_true(host_out[i] == 1.0f);

	lynx_replay_segment_destroy(segment);
	driver.mem_free(counter);
	driver.mem_free(out);
}

static void test_an_output_pointer_read_from_device_memory_is_caught_and_undone(void **state)
{
	struct fixture *f = *state;
	CUdeviceptr out = device_alloc(N * 4), ref = device_alloc(sizeof(CUdeviceptr));
	float value = 3.25f, before[N], after[N];
	int n = N;
	struct recording rec;
	struct lynx_replay_kernel kernel;
	struct lynx_replay_check check;

	upload(f->stream, ref, &out, sizeof(out));
	launch_recorded(f->stream, fill_through_kernel, (void *[]){&ref, &value, &n}, &rec,
	                &kernel);
	download(f->stream, before, out, sizeof(before));
	struct lynx_replay_segment *segment = segment_of(&kernel, 1);

	assert_int_equal(lynx_replay_verify(segment, f->stream,
	                                    &(struct lynx_replay_range){out, N * 4}, NULL, 1, NULL,
	                                    0, &check),
	                 LYNX_REPLAY_WRITES_THROUGH_DEVICE_POINTER);
	assert_int_equal(check.output, 0);
	assert_int_equal(check.offset, 0);
	assert_int_equal(check.rewritten, 0); /* ref is an input, read in place */
	assert_false(check.restore_failed);
	assert_non_null(strstr(check.reason, "reads a pointer from device memory"));
	download(f->stream, after, out, sizeof(after));
	assert_memory_equal(after, before, sizeof(after));

	lynx_replay_segment_destroy(segment);
	driver.mem_free(out);
	driver.mem_free(ref);
}

static void test_an_in_place_accumulation_differs_and_keeps_the_original(void **state)
{
	struct fixture *f = *state;
	CUdeviceptr x = device_alloc(N * 4), y = device_alloc(N * 4);
	float host_x[N], before[N], after[N];
	int n = N;
	struct recording rec;
	struct lynx_replay_kernel kernel;
	struct lynx_replay_check check;

	inputs(host_x);
	upload(f->stream, x, host_x, sizeof(host_x));
	upload(f->stream, y, host_x, sizeof(host_x));
	launch_recorded(f->stream, accumulate_kernel, (void *[]){&x, &y, &n}, &rec, &kernel);
	download(f->stream, before, y, sizeof(before));
	struct lynx_replay_segment *segment = segment_of(&kernel, 1);

	assert_int_equal(lynx_replay_verify(segment, f->stream,
	                                    &(struct lynx_replay_range){y, N * 4}, NULL, 1, NULL, 0,
	                                    &check),
	                 LYNX_REPLAY_DIFFERS);
	download(f->stream, after, y, sizeof(after));
	assert_memory_equal(after, before, sizeof(after));

	lynx_replay_segment_destroy(segment);
	driver.mem_free(x);
	driver.mem_free(y);
}

/* Two kernels, x -> tmp -> y, with tmp's address reused after the segment ran. */
struct two_kernel_segment {
	CUdeviceptr x, tmp, y;
	float host_y[N];
	struct recording rec[2];
	struct lynx_replay_kernel kernels[2];
};

static void run_two_kernels(CUstream stream, struct two_kernel_segment *s)
{
	float a = 2.0f, host_x[N];
	int n = N;

	s->x = device_alloc(N * 4);
	s->tmp = device_alloc(N * 4);
	s->y = device_alloc(N * 4);
	inputs(host_x);
	upload(stream, s->x, host_x, sizeof(host_x));
	launch_recorded(stream, scale_kernel, (void *[]){&s->x, &s->tmp, &a, &n}, &s->rec[0],
	                &s->kernels[0]);
	launch_recorded(stream, add_one_kernel, (void *[]){&s->tmp, &s->y, &n}, &s->rec[1],
	                &s->kernels[1]);
	download(stream, s->host_y, s->y, sizeof(s->host_y));
}

static void free_two_kernels(struct two_kernel_segment *s)
{
	driver.mem_free(s->x);
	driver.mem_free(s->tmp);
	driver.mem_free(s->y);
}

static void test_temporaries_are_redirected_to_scratch(void **state)
{
	struct fixture *f = *state;
	struct two_kernel_segment s;
	float sentinel[N], host_tmp[N], after[N];
	struct lynx_replay_check check;

	run_two_kernels(f->stream, &s);
	for (int i = 0; i < N; i++)
		sentinel[i] = -7.0f;
	upload(f->stream, s.tmp, sentinel, sizeof(sentinel));
	CUdeviceptr tmp_scratch = device_alloc(N * 4);
	struct lynx_replay_segment *segment = segment_of(s.kernels, 2);

	assert_int_equal(lynx_replay_verify(
	                         segment, f->stream, &(struct lynx_replay_range){s.y, N * 4}, NULL,
	                         1, &(struct lynx_replay_redirect){s.tmp, N * 4, tmp_scratch}, 1,
	                         &check),
	                 LYNX_REPLAY_REPRODUCES);
	assert_int_equal(check.rewritten, 3); /* tmp twice, y once */
	download(f->stream, host_tmp, s.tmp, sizeof(host_tmp));
	assert_memory_equal(host_tmp, sentinel, sizeof(host_tmp));
	download(f->stream, after, s.y, sizeof(after));
	assert_memory_equal(after, s.host_y, sizeof(after));

	lynx_replay_segment_destroy(segment);
	driver.mem_free(tmp_scratch);
	free_two_kernels(&s);
}

static void test_records_that_cannot_be_replayed_launch_nothing(void **state)
{
	struct fixture *f = *state;
	struct two_kernel_segment s;
	struct lynx_replay_kernel broken[2];
	struct lynx_replay_segment *segment;
	struct lynx_replay_check check;
	struct lynx_replay_stats stats;
	const char *why;
	size_t which = 99;

	run_two_kernels(f->stream, &s);
	uint64_t launches = call_count("cuLaunchKernel");

	/* No parameter bytes (a launch the hook could not capture), in the second kernel. */
	memcpy(broken, s.kernels, sizeof(broken));
	broken[1].params = NULL;
	segment = segment_of(broken, 2);
	why = lynx_replay_segment_unsupported(segment, &which);
	assert_non_null(why);
	assert_string_equal(why, "no recorded parameter bytes");
	assert_int_equal(which, 1);
	assert_int_equal(lynx_replay_launch(segment, f->stream, NULL, 0, &stats), -ENOTSUP);
	assert_int_equal(stats.launched, 0);
	assert_int_equal(lynx_replay_verify(segment, f->stream,
	                                    &(struct lynx_replay_range){s.y, N * 4}, NULL, 1, NULL,
	                                    0, &check),
	                 LYNX_REPLAY_UNSUPPORTED);
	assert_int_equal(check.kernel, 1);
	assert_non_null(strstr(check.reason, "kernel 1 cannot be replayed"));
	lynx_replay_segment_destroy(segment);

	/* Parameters beyond the recorded bytes (a truncated payload). */
	memcpy(broken, s.kernels, sizeof(broken));
	broken[0].param_bytes = 12;
	segment = segment_of(broken, 2);
	why = lynx_replay_segment_unsupported(segment, &which);
	assert_non_null(why);
	assert_string_equal(why, "parameters beyond the recorded bytes");
	assert_int_equal(which, 0);
	lynx_replay_segment_destroy(segment);

	/* A record that saw fewer parameters than the function has. */
	memcpy(broken, s.kernels, sizeof(broken));
	broken[1].param_count = 2;
	segment = segment_of(broken, 2);
	why = lynx_replay_segment_unsupported(segment, &which);
	assert_non_null(why);
	assert_string_equal(why, "the function has more parameters than recorded");
	lynx_replay_segment_destroy(segment);

	/* A handle the driver does not know. */
	memcpy(broken, s.kernels, sizeof(broken));
	broken[0].function = (CUfunction)(uintptr_t)&which;
	segment = segment_of(broken, 2);
	why = lynx_replay_segment_unsupported(segment, &which);
	assert_non_null(why);
	assert_string_equal(why, "the driver gives no parameter layout for the function");
	lynx_replay_segment_destroy(segment);

	assert_int_equal(call_count("cuLaunchKernel"), launches);
	free_two_kernels(&s);
}

static void test_bad_arguments_are_refused(void **state)
{
	struct fixture *f = *state;
	struct two_kernel_segment s;
	struct lynx_replay_driver incomplete = driver;
	struct lynx_replay_segment *segment = NULL;
	struct lynx_replay_check check;
	uint64_t launches;

	run_two_kernels(f->stream, &s);
	launches = call_count("cuLaunchKernel");
	incomplete.mem_free = NULL;
	assert_int_equal(lynx_replay_segment_create(&incomplete, s.kernels, 2, &segment), -EINVAL);
	assert_null(segment);
	assert_int_equal(lynx_replay_segment_create(&driver, s.kernels, 0, &segment), -EINVAL);
	segment = segment_of(s.kernels, 2);

	/* A redirect from 0 would capture every null pointer. */
	assert_int_equal(lynx_replay_launch(segment, f->stream,
	                                    &(struct lynx_replay_redirect){0, 4096, s.y}, 1, NULL),
	                 -EINVAL);
	assert_int_equal(
	        lynx_replay_verify(segment, f->stream,
	                           (struct lynx_replay_range[]){{s.y, N * 4}, {s.y + 4, 4}}, NULL,
	                           2, NULL, 0, &check),
	        LYNX_REPLAY_INVALID);
	assert_non_null(strstr(check.reason, "overlap"));
	struct lynx_replay_examination how = {0};
	assert_int_equal(lynx_replay_examine(segment, f->stream,
	                                     &(struct lynx_replay_range){s.y, N * 4}, 1, NULL, 0,
	                                     &how, &check),
	                 LYNX_REPLAY_INVALID);
	assert_non_null(strstr(check.reason, "no range_of"));
	assert_int_equal(lynx_replay_examine(segment, f->stream,
	                                     &(struct lynx_replay_range){s.y, N * 4}, 1, NULL, 0,
	                                     NULL, &check),
	                 LYNX_REPLAY_INVALID);
	assert_int_equal(call_count("cuLaunchKernel"), launches);

	assert_string_equal(lynx_replay_verdict_name(LYNX_REPLAY_WRITES_THROUGH_DEVICE_POINTER),
	                    "WRITES_THROUGH_DEVICE_POINTER");
	assert_string_equal(lynx_replay_verdict_name(LYNX_REPLAY_VERDICT_COUNT), "UNKNOWN");
	assert_string_equal(lynx_replay_verdict_name(LYNX_REPLAY_READS_HIDDEN_MEMORY),
	                    "READS_HIDDEN_MEMORY");
	assert_string_equal(lynx_replay_role_name(LYNX_REPLAY_SCRATCH), "scratch");
	assert_string_equal(lynx_replay_role_name(LYNX_REPLAY_ROLE_COUNT), "unknown");
	assert_non_null(strstr(lynx_replay_verdict_text(LYNX_REPLAY_REPRODUCES), "bit for bit"));

	struct lynx_event alloc = {.kind = LYNX_EV_ALLOC};
	struct lynx_replay_kernel unused;
	assert_false(lynx_replay_kernel_from_event(&alloc, &unused));

	lynx_replay_segment_destroy(segment);
	free_two_kernels(&s);
}

/* In the child with SIMGPU_FAULTS=cuLaunchKernel@4=719: the two original launches are calls
 * 1 and 2, the replay's are 3 and 4. */
static void test_a_failing_launch_is_reported_and_the_original_restored(void **state)
{
	struct fixture *f = *state;
	struct two_kernel_segment s;
	struct lynx_replay_check check;
	float after[N];

	run_two_kernels(f->stream, &s);
	assert_int_equal(call_count("cuLaunchKernel"), 2);
	struct lynx_replay_segment *segment = segment_of(s.kernels, 2);
	CUdeviceptr tmp_scratch = device_alloc(N * 4);

	assert_int_equal(lynx_replay_verify(
	                         segment, f->stream, &(struct lynx_replay_range){s.y, N * 4}, NULL,
	                         1, &(struct lynx_replay_redirect){s.tmp, N * 4, tmp_scratch}, 1,
	                         &check),
	                 LYNX_REPLAY_LAUNCH_FAILED);
	assert_int_equal(check.kernel, 1);
	assert_int_equal(check.error, CUDA_ERROR_LAUNCH_FAILED);
	assert_false(check.restore_failed);
	assert_non_null(strstr(check.reason, "kernel 1"));
	assert_int_equal(call_count("cuLaunchKernel"), 4);
	download(f->stream, after, s.y, sizeof(after));
	assert_memory_equal(after, s.host_y, sizeof(after));

	lynx_replay_segment_destroy(segment);
	driver.mem_free(tmp_scratch);
	free_two_kernels(&s);
}

/* ---- Examination ------------------------------------------------------------------------- */

/* The test's own allocations, for range_of: which one holds an address. */
struct allocations {
	size_t count;
	CUdeviceptr base[8];
	size_t size[8];
	unsigned char *before[8]; /* each one's contents, from remember() */
};

static bool range_of_table(CUdeviceptr addr, CUdeviceptr *base, size_t *size, void *arg)
{
	const struct allocations *t = arg;

	for (size_t i = 0; i < t->count; i++) {
		if (addr - t->base[i] < t->size[i]) {
			*base = t->base[i];
			*size = t->size[i];
			return true;
		}
	}
	return false;
}

static CUdeviceptr tracked_alloc(struct allocations *t, size_t bytes)
{
	assert_true(t->count < 8);
	t->size[t->count] = bytes;
	return t->base[t->count++] = device_alloc(bytes);
}

/* Takes every allocation's contents, for assert_unchanged. */
static void remember(CUstream stream, struct allocations *t)
{
	for (size_t i = 0; i < t->count; i++) {
		free(t->before[i]);
		t->before[i] = malloc(t->size[i]);
		assert_non_null(t->before[i]);
		download(stream, t->before[i], t->base[i], t->size[i]);
	}
}

/* Every allocation, outputs and operands alike, holds what remember() saw. */
static void assert_unchanged(CUstream stream, const struct allocations *t)
{
	for (size_t i = 0; i < t->count; i++) {
		unsigned char *now = malloc(t->size[i]);

		assert_non_null(now);
		download(stream, now, t->base[i], t->size[i]);
		assert_memory_equal(now, t->before[i], t->size[i]);
		free(now);
	}
}

static void free_allocations(struct allocations *t)
{
	for (size_t i = 0; i < t->count; i++) {
		driver.mem_free(t->base[i]);
		free(t->before[i]);
	}
	memset(t, 0, sizeof(*t));
}

static struct lynx_replay_examination examination(struct allocations *t,
                                                  struct lynx_replay_operand *operands,
                                                  size_t capacity, size_t max_bytes)
{
	return (struct lynx_replay_examination){
	        .range_of = range_of_table,
	        .range_arg = t,
	        .max_operand_bytes = max_bytes,
	        .operands = operands,
	        .operand_capacity = capacity,
	};
}

static void assert_operand(const struct lynx_replay_operand *op, uint32_t kernel, uint32_t offset,
                           uint64_t displacement, size_t size, enum lynx_replay_role role)
{
	assert_int_equal(op->kernel, kernel);
	assert_int_equal(op->offset, offset);
	assert_int_equal(op->displacement, displacement);
	assert_int_equal(op->size, size);
	assert_string_equal(lynx_replay_role_name(op->role), lynx_replay_role_name(role));
}

/* scale(w + 16 -> tmp), then add_bias(tmp, bias = w -> out): one allocation w named by two
 * words, of two kernels, at two displacements. */
struct biased_segment {
	struct allocations t;
	CUdeviceptr w, tmp, out;
	struct recording rec[2];
	struct lynx_replay_kernel kernels[2];
};

static void run_biased(CUstream stream, struct biased_segment *s)
{
	float host_w[N + 4], a = 1.5f;
	int n = N;
	CUdeviceptr x;

	memset(&s->t, 0, sizeof(s->t));
	s->w = tracked_alloc(&s->t, (N + 4) * 4);
	s->tmp = tracked_alloc(&s->t, N * 4);
	s->out = tracked_alloc(&s->t, N * 4);
	for (int i = 0; i < 4; i++)
		host_w[i] = 0.25f * (float)(i + 1);
	inputs(host_w + 4);
	upload(stream, s->w, host_w, sizeof(host_w));
	x = s->w + 16;
	launch_recorded(stream, scale_kernel, (void *[]){&x, &s->tmp, &a, &n}, &s->rec[0],
	                &s->kernels[0]);
	launch_recorded(stream, add_bias_kernel, (void *[]){&s->out, &s->tmp, &s->w, &n},
	                &s->rec[1], &s->kernels[1]);
}

static void test_examine_finds_inputs_read_in_place(void **state)
{
	struct fixture *f = *state;
	struct biased_segment s;
	struct lynx_replay_operand ops[4];
	struct lynx_replay_check check;

	run_biased(f->stream, &s);
	struct lynx_replay_segment *segment = segment_of(s.kernels, 2);
	struct lynx_replay_examination how = examination(&s.t, ops, 4, 1 << 20);
	struct lynx_replay_range outputs[] = {{s.tmp, N * 4}, {s.out, N * 4}};

	remember(f->stream, &s.t);
	assert_int_equal(lynx_replay_examine(segment, f->stream, outputs, 2, NULL, 0, &how, &check),
	                 LYNX_REPLAY_REPRODUCES);
	assert_int_equal(check.verdict, LYNX_REPLAY_REPRODUCES);
	assert_int_equal(check.rewritten, 3); /* tmp in both kernels, out in the second */
	assert_int_equal(how.operand_count, 2);
	assert_operand(&ops[0], 0, 0, 16, (N + 4) * 4, LYNX_REPLAY_INPUT);
	assert_operand(&ops[1], 1, 16, 0, (N + 4) * 4, LYNX_REPLAY_INPUT);
	assert_non_null(strstr(check.reason, "2 parameter words name other memory: 2 read in "
	                                     "place, 0 scratch"));
	assert_unchanged(f->stream, &s.t);

	lynx_replay_segment_destroy(segment);
	free_allocations(&s.t);
}

static void test_examine_finds_a_workspace_written_before_it_is_read(void **state)
{
	struct fixture *f = *state;
	struct allocations t = {0};
	CUdeviceptr x = tracked_alloc(&t, N * 4), ws = tracked_alloc(&t, N * 4),
	            y = tracked_alloc(&t, N * 4);
	float host_x[N], later[N];
	int n = N;
	struct recording rec;
	struct lynx_replay_kernel kernel;
	struct lynx_replay_operand ops[4];
	struct lynx_replay_check check;
	struct lynx_replay_examination how = examination(&t, ops, 4, 1 << 20);

	inputs(host_x);
	upload(f->stream, x, host_x, sizeof(host_x));
	launch_recorded(f->stream, staged_kernel, (void *[]){&x, &ws, &y, &n}, &rec, &kernel);
	/* A later GEMM staged its own result in the shared workspace since: a replay that
	 * rewrites it is seen to write it. */
	for (int i = 0; i < N; i++)
		later[i] = -5.0f - (float)i;
	upload(f->stream, ws, later, sizeof(later));
	struct lynx_replay_segment *segment = segment_of(&kernel, 1);

	remember(f->stream, &t);
	assert_int_equal(lynx_replay_examine(segment, f->stream,
	                                     &(struct lynx_replay_range){y, N * 4}, 1, NULL, 0,
	                                     &how, &check),
	                 LYNX_REPLAY_REPRODUCES);
	assert_int_equal(how.operand_count, 2);
	assert_operand(&ops[0], 0, 0, 0, N * 4, LYNX_REPLAY_INPUT);
	assert_operand(&ops[1], 0, 8, 0, N * 4, LYNX_REPLAY_SCRATCH);
	assert_non_null(strstr(check.reason, "1 read in place, 1 scratch"));
	assert_unchanged(f->stream, &t); /* the workspace holds the later GEMM's bytes */

	lynx_replay_segment_destroy(segment);
	free_allocations(&t);
}

static void test_examine_refuses_outputs_that_depend_on_memory_the_replay_updates(void **state)
{
	struct fixture *f = *state;
	struct allocations t = {0};
	CUdeviceptr x = tracked_alloc(&t, N * 4), meta = tracked_alloc(&t, 16),
	            y = tracked_alloc(&t, N * 4);
	float host_x[N], host_meta[4] = {0.75f, 0.0f, 0.0f, 0.0f};
	int n = N;
	struct recording rec;
	struct lynx_replay_kernel kernel;
	struct lynx_replay_operand ops[4];
	struct lynx_replay_check check;
	struct lynx_replay_examination how = examination(&t, ops, 4, 1 << 20);

	inputs(host_x);
	upload(f->stream, x, host_x, sizeof(host_x));
	upload(f->stream, meta, host_meta, sizeof(host_meta));
	launch_recorded(f->stream, scale_amax_kernel, (void *[]){&x, &meta, &y, &n}, &rec, &kernel);
	struct lynx_replay_segment *segment = segment_of(&kernel, 1);

	/* Replayed in place, the output is the same (the scale did not change)... */
	remember(f->stream, &t);
	assert_int_equal(lynx_replay_examine(segment, f->stream,
	                                     &(struct lynx_replay_range){y, N * 4}, 1, NULL, 0,
	                                     &how, &check),
	                 LYNX_REPLAY_UPDATES_OPERAND);
	/* ...but meta is written (its sum), and the output depends on what it held. */
	assert_int_equal(check.kernel, 0);
	assert_int_equal(check.word, 8);
	assert_int_equal(check.output, 0);
	assert_false(check.restore_failed);
	assert_non_null(strstr(check.reason, "kernel 0's parameter word at byte 8"));
	assert_non_null(strstr(check.reason, "outputs depend on what it held"));
	/* Every replay's sum was taken back: meta[1] holds the first run's alone. */
	assert_unchanged(f->stream, &t);

	lynx_replay_segment_destroy(segment);
	free_allocations(&t);
}

/* tokens, a table, a device word holding the table's address, an output. */
struct gather_segment {
	struct allocations t;
	CUdeviceptr tokens, table, ref, out;
};

static void prepare_gather(CUstream stream, struct gather_segment *s)
{
	int host_tokens[N];
	float host_table[16];

	memset(&s->t, 0, sizeof(s->t));
	s->tokens = tracked_alloc(&s->t, sizeof(host_tokens));
	s->table = tracked_alloc(&s->t, sizeof(host_table));
	s->ref = tracked_alloc(&s->t, sizeof(CUdeviceptr));
	s->out = tracked_alloc(&s->t, N * 4);
	for (int i = 0; i < N; i++)
		host_tokens[i] = (i * 7) % 16;
	for (int i = 0; i < 16; i++)
		host_table[i] = (float)i * 0.3713f + 1.0f / 3.0f;
	upload(stream, s->tokens, host_tokens, sizeof(host_tokens));
	upload(stream, s->table, host_table, sizeof(host_table));
	upload(stream, s->ref, &s->table, sizeof(s->table));
}

static void test_examine_catches_a_kernel_reading_through_a_pointer_in_device_memory(void **state)
{
	struct fixture *f = *state;
	struct gather_segment s;
	int n = N;
	struct recording rec;
	struct lynx_replay_kernel kernel;
	struct lynx_replay_operand ops[4];
	struct lynx_replay_check check;

	prepare_gather(f->stream, &s);
	launch_recorded(f->stream, gather_kernel, (void *[]){&s.tokens, &s.ref, &s.out, &n}, &rec,
	                &kernel);
	struct lynx_replay_segment *segment = segment_of(&kernel, 1);
	struct lynx_replay_examination how = examination(&s.t, ops, 4, 1 << 20);
	struct lynx_replay_range output = {s.out, N * 4};

	/* Verification reads everything but the output in place: it sees nothing wrong. */
	remember(f->stream, &s.t);
	assert_int_equal(lynx_replay_verify(segment, f->stream, &output, NULL, 1, NULL, 0, &check),
	                 LYNX_REPLAY_REPRODUCES);
	/* With tokens and the table's word moved, and the table (which only the word names)
	 * poisoned, the output changes. */
	assert_int_equal(lynx_replay_examine(segment, f->stream, &output, 1, NULL, 0, &how, &check),
	                 LYNX_REPLAY_READS_HIDDEN_MEMORY);
	assert_int_equal(check.output, 0);
	assert_int_equal(check.offset, 0);
	assert_int_equal(check.kernel, 0);
	assert_int_equal(check.word, 8);
	assert_false(check.restore_failed);
	assert_non_null(strstr(check.reason, "reads a pointer from device memory"));
	assert_non_null(strstr(check.reason, "kernel 0's parameter word at byte 8 names"));
	assert_int_equal(how.operand_count, 2);
	assert_unchanged(f->stream, &s.t);
	lynx_replay_segment_destroy(segment);

	/* The same lookup with the table named by its parameters: an input like any other. */
	launch_recorded(f->stream, gather_direct_kernel,
	                (void *[]){&s.tokens, &s.table, &s.out, &n}, &rec, &kernel);
	segment = segment_of(&kernel, 1);
	remember(f->stream, &s.t);
	assert_int_equal(lynx_replay_examine(segment, f->stream, &output, 1, NULL, 0, &how, &check),
	                 LYNX_REPLAY_REPRODUCES);
	assert_int_equal(how.operand_count, 2);
	assert_operand(&ops[0], 0, 0, 0, N * sizeof(int), LYNX_REPLAY_INPUT);
	assert_operand(&ops[1], 0, 8, 0, 16 * sizeof(float), LYNX_REPLAY_INPUT);
	assert_unchanged(f->stream, &s.t);

	lynx_replay_segment_destroy(segment);
	free_allocations(&s.t);
}

static void test_examine_catches_a_write_through_a_pointer_in_device_memory(void **state)
{
	struct fixture *f = *state;
	struct allocations t = {0};
	CUdeviceptr x = tracked_alloc(&t, N * 4), y = tracked_alloc(&t, N * 4),
	            mirror = tracked_alloc(&t, N * 4), ref = tracked_alloc(&t, sizeof(mirror));
	float host_x[N], since[N];
	int n = N;
	struct recording rec;
	struct lynx_replay_kernel kernel;
	struct lynx_replay_operand ops[4];
	struct lynx_replay_check check;
	struct lynx_replay_examination how = examination(&t, ops, 4, 1 << 20);

	inputs(host_x);
	upload(f->stream, x, host_x, sizeof(host_x));
	upload(f->stream, ref, &mirror, sizeof(mirror));
	launch_recorded(f->stream, mirror_kernel, (void *[]){&x, &ref, &y, &n}, &rec, &kernel);
	for (int i = 0; i < N; i++)
		since[i] = -1.0f;
	upload(f->stream, mirror, since, sizeof(since)); /* reused since */
	struct lynx_replay_segment *segment = segment_of(&kernel, 1);

	remember(f->stream, &t);
	assert_int_equal(lynx_replay_examine(segment, f->stream,
	                                     &(struct lynx_replay_range){y, N * 4}, 1, NULL, 0,
	                                     &how, &check),
	                 LYNX_REPLAY_WRITES_THROUGH_DEVICE_POINTER);
	assert_true(check.operand_memory);
	assert_int_equal(check.offset, 0);
	assert_int_equal(check.kernel, 0);
	assert_int_equal(check.word, 8);
	assert_non_null(strstr(check.reason, "memory its parameters do not name"));
	assert_non_null(strstr(check.reason, "kernel 0's parameter word at byte 8 names"));
	/* The first replay wrote the mirror in place, and that was undone too. */
	assert_unchanged(f->stream, &t);

	lynx_replay_segment_destroy(segment);
	free_allocations(&t);
}

static void test_examine_undoes_what_the_first_replay_wrote_in_place(void **state)
{
	struct fixture *f = *state;
	struct allocations t = {0};
	CUdeviceptr counter = tracked_alloc(&t, 4), out = tracked_alloc(&t, N * 4);
	unsigned int zero = 0;
	int n = N;
	struct recording rec;
	struct lynx_replay_kernel kernel;
	struct lynx_replay_operand ops[4];
	struct lynx_replay_check check;
	struct lynx_replay_examination how = examination(&t, ops, 4, 1 << 20);

	upload(f->stream, counter, &zero, sizeof(zero));
	launch_recorded(f->stream, stamp_kernel, (void *[]){&counter, &out, &n}, &rec, &kernel);
	struct lynx_replay_segment *segment = segment_of(&kernel, 1);

	/* The first pass is verification's, which increments the counter in place (see
	 * test_a_nondeterministic_kernel_differs) and ends the examination: the counter is put
	 * back all the same. */
	remember(f->stream, &t);
	assert_int_equal(lynx_replay_examine(segment, f->stream,
	                                     &(struct lynx_replay_range){out, N * 4}, 1, NULL, 0,
	                                     &how, &check),
	                 LYNX_REPLAY_DIFFERS);
	assert_int_equal(check.offset, 2);
	assert_non_null(strstr(check.reason, "output 0 differs"));
	assert_int_equal(how.operand_count, 1);
	assert_operand(&ops[0], 0, 0, 0, 4, LYNX_REPLAY_INPUT);
	assert_unchanged(f->stream, &t);

	lynx_replay_segment_destroy(segment);
	free_allocations(&t);
}

/* Under a device memory limit too small for its scratch and operand copies it puts itself
 * off before replaying anything (NO_ROOM: the caller may try again); at the limit it runs. */
static void test_examine_takes_no_more_device_memory_than_allowed(void **state)
{
	struct fixture *f = *state;
	struct biased_segment s;
	struct lynx_replay_operand ops[4];
	struct lynx_replay_check check;

	run_biased(f->stream, &s);
	struct lynx_replay_segment *segment = segment_of(s.kernels, 2);
	struct lynx_replay_range outputs[] = {{s.tmp, N * 4}, {s.out, N * 4}};
	struct lynx_replay_examination how = examination(&s.t, ops, 4, 1 << 20);
	/* Scratch for both outputs and a copy of w, the one operand allocation. */
	size_t need = 2 * N * 4 + (N + 4) * 4;
	uint64_t launches = call_count("cuLaunchKernel");

	remember(f->stream, &s.t);
	how.max_device_bytes = need - 1;
	assert_int_equal(lynx_replay_examine(segment, f->stream, outputs, 2, NULL, 0, &how, &check),
	                 LYNX_REPLAY_NO_ROOM);
	assert_int_equal(call_count("cuLaunchKernel"), launches);
	char want[96];
	snprintf(want, sizeof(want), "checking it takes %zu bytes of device memory, %zu allowed",
	         need, need - 1);
	assert_non_null(strstr(check.reason, want));
	assert_unchanged(f->stream, &s.t);
	how.max_device_bytes = need;
	assert_int_equal(lynx_replay_examine(segment, f->stream, outputs, 2, NULL, 0, &how, &check),
	                 LYNX_REPLAY_REPRODUCES);
	assert_unchanged(f->stream, &s.t);
	lynx_replay_segment_destroy(segment);
	free_allocations(&s.t);
}

static void test_examine_refuses_memory_beyond_its_limits(void **state)
{
	struct fixture *f = *state;
	struct biased_segment s;
	struct gather_segment g;
	struct lynx_replay_operand ops[4];
	struct lynx_replay_check check;
	struct recording rec;
	struct lynx_replay_kernel kernel;
	int n = N;

	run_biased(f->stream, &s);
	struct lynx_replay_segment *segment = segment_of(s.kernels, 2);
	struct lynx_replay_range outputs[] = {{s.tmp, N * 4}, {s.out, N * 4}};
	struct lynx_replay_examination how = examination(&s.t, ops, 4, N * 4);
	uint64_t launches = call_count("cuLaunchKernel");

	/* w is N * 4 + 16 bytes. */
	remember(f->stream, &s.t);
	assert_int_equal(lynx_replay_examine(segment, f->stream, outputs, 2, NULL, 0, &how, &check),
	                 LYNX_REPLAY_TOO_LARGE);
	assert_int_equal(check.kernel, 0);
	assert_int_equal(check.word, 0);
	assert_non_null(strstr(check.reason, "too large or too scattered"));
	assert_non_null(strstr(check.reason, "kernel 0's parameter word at byte 0"));
	assert_non_null(strstr(check.reason, "at most 256"));
	/* Room for one word of the two. */
	how = examination(&s.t, ops, 1, 1 << 20);
	assert_int_equal(lynx_replay_examine(segment, f->stream, outputs, 2, NULL, 0, &how, &check),
	                 LYNX_REPLAY_TOO_LARGE);
	assert_int_equal(how.operand_count, 2);
	assert_int_equal(check.kernel, 1);
	assert_int_equal(check.word, 16);
	assert_operand(&ops[0], 0, 0, 16, (N + 4) * 4, LYNX_REPLAY_INPUT);
	/* No room at all. */
	how = examination(&s.t, NULL, 0, 0);
	assert_int_equal(lynx_replay_examine(segment, f->stream, outputs, 2, NULL, 0, &how, &check),
	                 LYNX_REPLAY_TOO_LARGE);
	assert_int_equal(how.operand_count, 2);
	assert_int_equal(call_count("cuLaunchKernel"), launches); /* refused before replaying */
	assert_unchanged(f->stream, &s.t);
	lynx_replay_segment_destroy(segment);
	free_allocations(&s.t);

	/* What a pointer stored in the operands leads to counts too: the table's 64 bytes. */
	prepare_gather(f->stream, &g);
	launch_recorded(f->stream, gather_kernel, (void *[]){&g.tokens, &g.ref, &g.out, &n}, &rec,
	                &kernel);
	segment = segment_of(&kernel, 1);
	how = examination(&g.t, ops, 4, N * sizeof(int) + sizeof(CUdeviceptr));
	remember(f->stream, &g.t);
	assert_int_equal(lynx_replay_examine(segment, f->stream,
	                                     &(struct lynx_replay_range){g.out, N * 4}, 1, NULL, 0,
	                                     &how, &check),
	                 LYNX_REPLAY_TOO_LARGE);
	assert_int_equal(check.kernel, 0);
	assert_int_equal(check.word, 8);
	assert_non_null(strstr(check.reason, "what pointers stored in it lead to"));
	assert_unchanged(f->stream, &g.t);
	lynx_replay_segment_destroy(segment);
	free_allocations(&g.t);
}

static void test_refresh_takes_a_later_launch_of_the_same_kernel_only(void **state)
{
	struct fixture *f = *state;
	CUdeviceptr x = device_alloc(N * 4), x2 = device_alloc(N * 4), y = device_alloc(N * 4),
	            z = device_alloc(N * 4);
	float a = 1.7f, a2 = -0.625f, host_x[N], expected[N], host_z[N];
	int n = N;
	uint64_t tail = 0;
	struct recording rec, later_rec;
	struct lynx_replay_kernel kernel, later, other;

	inputs(host_x);
	upload(f->stream, x, host_x, sizeof(host_x));
	for (int i = 0; i < N; i++)
		host_x[i] = 2.0f - host_x[i];
	upload(f->stream, x2, host_x, sizeof(host_x));
	launch_recorded(f->stream, scale_kernel, (void *[]){&x, &y, &a, &n}, &rec, &kernel);
	struct lynx_replay_segment *segment = segment_of(&kernel, 1);
	/* The next iteration's launch: other pointers, another scale. */
	launch_recorded(f->stream, scale_kernel, (void *[]){&x2, &y, &a2, &n}, &later_rec, &later);
	download(f->stream, expected, y, sizeof(expected));

	other = later;
	other.function = (CUfunction)(uintptr_t)add_one_kernel;
	assert_int_equal(lynx_replay_segment_refresh(segment, 0, &other), -EINVAL);
	other = later;
	other.param_bytes = 16;
	assert_int_equal(lynx_replay_segment_refresh(segment, 0, &other), -EINVAL);
	other = later;
	other.grid[0] = 2;
	assert_int_equal(lynx_replay_segment_refresh(segment, 0, &other), -EINVAL);
	other = later;
	other.shared_mem = 128;
	assert_int_equal(lynx_replay_segment_refresh(segment, 0, &other), -EINVAL);
	assert_int_equal(lynx_replay_segment_refresh(segment, 1, &later), -EINVAL);
	assert_int_equal(lynx_replay_segment_word(segment, 0, 0), x);

	assert_int_equal(lynx_replay_segment_refresh(segment, 0, &later), 0);
	memset(later_rec.payload, 0, sizeof(later_rec.payload)); /* copied, not referenced */
	assert_int_equal(lynx_replay_segment_word(segment, 0, 0), x2);
	assert_int_equal(lynx_replay_segment_word(segment, 0, 8), y);
	memcpy(&tail, &a2, 4);
	memcpy((unsigned char *)&tail + 4, &n, 4);
	assert_int_equal(lynx_replay_segment_word(segment, 0, 16), tail);
	assert_int_equal(lynx_replay_segment_word(segment, 0, 20), 0); /* past the end */
	assert_int_equal(lynx_replay_segment_word(segment, 1, 0), 0);

	/* A replay reads the new pointers and scale. */
	assert_int_equal(lynx_replay_launch(segment, f->stream,
	                                    &(struct lynx_replay_redirect){y, N * 4, z}, 1, NULL),
	                 0);
	download(f->stream, host_z, z, sizeof(host_z));
	assert_memory_equal(host_z, expected, sizeof(host_z));

	lynx_replay_segment_destroy(segment);
	driver.mem_free(x);
	driver.mem_free(x2);
	driver.mem_free(y);
	driver.mem_free(z);
}

/* ---- Launch configs ---------------------------------------------------------------------- */

/* How a launch with a launch config is made. */
enum config_way {
	DRIVER_EX,            /* cuLaunchKernelEx, kernelParams, on the stream given */
	DRIVER_EX_PTSZ_EXTRA, /* cuLaunchKernelEx_ptsz, `extra`, on the per-thread default stream */
	RUNTIME_EXC,          /* cudaLaunchKernelExC, on the stream given */
	RUNTIME_EXC_PTSZ,     /* cudaLaunchKernelExC_ptsz, on the per-thread default stream */
};

/* The same attribute as a replay passes it: the rest zeroed. */
static CUlaunchAttribute clean(CUlaunchAttributeID id, const void *value, size_t bytes)
{
	return attr(id, value, bytes, 0);
}

/*
 * Launches kernel with args and a launch config of attrs[0..n) (one block of 32 threads),
 * one of the four ways, waits for it, and records it as the shim records the driver launch
 * it is, or that the runtime's launch is made through (the runtime's cudaLaunchAttribute is
 * the driver's, by layout): the parameters, then the attributes by the hook's own function.
 * Fills *out from the record.
 */
static void launch_config_recorded(CUstream stream, const void *kernel, void **args,
                                   enum config_way way, const CUlaunchAttribute *attrs, uint32_t n,
                                   struct recording *rec, struct lynx_replay_kernel *out)
{
	CUfunction f = (CUfunction)(uintptr_t)kernel;
	bool per_thread = way == DRIVER_EX_PTSZ_EXTRA || way == RUNTIME_EXC_PTSZ;

	record_launch(kernel, args, 32, rec);
	size_t packed_bytes = rec->event.u.launch.param_bytes;
	assert_true(lynx_launch_payload_bytes((uint32_t)packed_bytes, true, n) <=
	            sizeof(rec->payload));
	lynx_launch_attrs_record(&rec->event, attrs, n);
	CUlaunchConfig config = {.gridDimX = 1,
	                         .gridDimY = 1,
	                         .gridDimZ = 1,
	                         .blockDimX = 32,
	                         .blockDimY = 1,
	                         .blockDimZ = 1,
	                         .hStream = per_thread ? NULL : stream,
	                         .attrs = (CUlaunchAttribute *)attrs,
	                         .numAttrs = n};
	cudaLaunchConfig_t runtime_config = {.gridDim = {1, 1, 1},
	                                     .blockDim = {32, 1, 1},
	                                     .stream = per_thread ? NULL : (cudaStream_t)stream,
	                                     .attrs = (cudaLaunchAttribute *)attrs,
	                                     .numAttrs = n};
	void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, rec->payload, CU_LAUNCH_PARAM_BUFFER_SIZE,
	                 &packed_bytes, CU_LAUNCH_PARAM_END};

	switch (way) {
	case DRIVER_EX:
		assert_int_equal(launch_ex(&config, f, args, NULL), CUDA_SUCCESS);
		break;
	case DRIVER_EX_PTSZ_EXTRA:
		assert_int_equal(launch_ex_ptsz(&config, f, NULL, extra), CUDA_SUCCESS);
		break;
	case RUNTIME_EXC:
		assert_int_equal(launch_exc(&runtime_config, kernel, args), cudaSuccess);
		break;
	case RUNTIME_EXC_PTSZ:
		assert_int_equal(launch_exc_ptsz(&runtime_config, kernel, args), cudaSuccess);
		break;
	}
	assert_int_equal(driver.stream_synchronize(per_thread ? CU_STREAM_PER_THREAD : stream),
	                 CUDA_SUCCESS);
	assert_true(lynx_replay_kernel_from_event(&rec->event, out));
	assert_true(out->config);
	assert_int_equal(out->attr_count, n);
	assert_int_equal(out->block[0], 32);
}

/* The spy saw one launch of function on stream, one block of 32 threads, with want[0..n). */
static void assert_spied(unsigned int calls_before, const void *function, CUstream stream,
                         const CUlaunchAttribute *want, uint32_t n)
{
	assert_int_equal(spy.calls, calls_before + 1);
	assert_ptr_equal(spy.function, function);
	assert_ptr_equal(spy.config.hStream, stream);
	assert_int_equal(spy.config.gridDimX * spy.config.gridDimY * spy.config.gridDimZ, 1);
	assert_int_equal(spy.config.blockDimX, 32);
	assert_int_equal(spy.config.blockDimY * spy.config.blockDimZ, 1);
	assert_int_equal(spy.config.sharedMemBytes, 0);
	assert_int_equal(spy.config.numAttrs, n);
	if (n)
		assert_memory_equal(spy.attrs, want, n * sizeof(*want));
}

/*
 * A GEMM-like launch through cuLaunchKernelEx, on a stream of its own, with five attributes:
 * recorded with them by value; replayed (verified, launched, examined) through
 * cuLaunchKernelEx only, on the replay's stream, with the cluster and the cooperative launch
 * and without the three that tie it to the trainer (its stream's serialisation, its
 * priority, its completion event), bit for bit.
 */
static void
test_a_launch_config_replays_through_cuLaunchKernelEx_with_the_attributes_kept(void **state)
{
	struct fixture *f = *state;
	struct allocations t = {0};
	CUdeviceptr x = tracked_alloc(&t, N * 4), y = tracked_alloc(&t, N * 4), z;
	float a = 1.7f, host_x[N], host_y[N], host_z[N];
	int n = N, on = 1, priority = -2;
	unsigned int one[3] = {1, 1, 1};
	struct {
		CUevent event;
		int flags;
	} completion = {(CUevent)(uintptr_t)0x5eed, 0};
	const CUlaunchAttribute attrs[] = {
	        attr(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, &on, sizeof(on), 0xab),
	        attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, one, sizeof(one), 0xab),
	        attr(CU_LAUNCH_ATTRIBUTE_PRIORITY, &priority, sizeof(priority), 0xab),
	        attr(CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &on, sizeof(on), 0xab),
	        attr(CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT, &completion, sizeof(completion),
	             0xab),
	};
	const CUlaunchAttribute kept[] = {
	        clean(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, one, sizeof(one)),
	        clean(CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &on, sizeof(on)),
	};
	struct lynx_replay_operand ops[4];
	struct lynx_replay_examination how = examination(&t, ops, 4, 1 << 20);
	struct recording rec;
	struct lynx_replay_kernel kernel;
	struct lynx_replay_check check;
	struct lynx_replay_stats stats;
	CUstream original;

	assert_int_equal(stream_create(&original, 0), CUDA_SUCCESS);
	z = device_alloc(N * 4);
	inputs(host_x);
	upload(original, x, host_x, sizeof(host_x));
	launch_config_recorded(original, scale_kernel, (void *[]){&x, &y, &a, &n}, DRIVER_EX, attrs,
	                       5, &rec, &kernel);
	assert_memory_equal(kernel.attrs, attrs, sizeof(attrs)); /* as the trainer gave them */
	download(original, host_y, y, sizeof(host_y));
	struct lynx_replay_segment *segment = segment_of(&kernel, 1);
	assert_null(lynx_replay_segment_unsupported(segment, NULL));
	uint64_t plain = call_count("cuLaunchKernel"), ex = call_count("cuLaunchKernelEx");

	unsigned int calls = spy.calls;
	assert_int_equal(lynx_replay_verify(segment, f->stream,
	                                    &(struct lynx_replay_range){y, N * 4}, NULL, 1, NULL, 0,
	                                    &check),
	                 LYNX_REPLAY_REPRODUCES);
	assert_spied(calls, scale_kernel, f->stream, kept, 2);

	calls = spy.calls;
	assert_int_equal(lynx_replay_launch(segment, f->stream,
	                                    &(struct lynx_replay_redirect){y, N * 4, z}, 1, &stats),
	                 0);
	assert_int_equal(stats.launched, 1);
	assert_spied(calls, scale_kernel, f->stream, kept, 2);
	download(f->stream, host_z, z, sizeof(host_z));
	assert_memory_equal(host_z, host_y, sizeof(host_z));

	remember(f->stream, &t);
	assert_int_equal(lynx_replay_examine(segment, f->stream,
	                                     &(struct lynx_replay_range){y, N * 4}, 1, NULL, 0,
	                                     &how, &check),
	                 LYNX_REPLAY_REPRODUCES);
	assert_int_equal(how.operand_count, 1);
	assert_operand(&ops[0], 0, 0, 0, N * 4, LYNX_REPLAY_INPUT);
	assert_unchanged(f->stream, &t);
	/* Every replay went through cuLaunchKernelEx: none through cuLaunchKernel. */
	assert_int_equal(call_count("cuLaunchKernel"), plain);
	assert_int_equal(call_count("cuLaunchKernelEx"), ex + (spy.calls - calls) + 1);
	assert_ptr_equal(spy.config.hStream, f->stream);

	lynx_replay_segment_destroy(segment);
	driver.mem_free(z);
	free_allocations(&t);
	assert_int_equal(stream_destroy(original), CUDA_SUCCESS);
}

/* cudaLaunchKernelExC and its per-thread form (on the per-thread default stream): recorded
 * as the driver launch the runtime makes, replayed on the replay's stream, bit for bit. */
static void test_runtime_launch_configs_replay_bit_for_bit(void **state)
{
	struct fixture *f = *state;
	const enum config_way ways[] = {RUNTIME_EXC, RUNTIME_EXC_PTSZ};
	unsigned int one[3] = {1, 1, 1};
	struct {
		CUevent event;
		int flags, trigger_at_block_start;
	} programmatic = {(CUevent)(uintptr_t)0xe7e, 0, 1};
	const CUlaunchAttribute attrs[] = {
	        attr(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT, &programmatic, sizeof(programmatic),
	             0x5a),
	        attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, one, sizeof(one), 0x5a),
	};
	const CUlaunchAttribute kept =
	        clean(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, one, sizeof(one));

	for (size_t w = 0; w < sizeof(ways) / sizeof(ways[0]); w++) {
		CUdeviceptr x = device_alloc(N * 4), y = device_alloc(N * 4);
		float a = 0.375f + (float)w, host_x[N];
		int n = N;
		struct recording rec;
		struct lynx_replay_kernel kernel;
		struct lynx_replay_check check;

		inputs(host_x);
		upload(f->stream, x, host_x, sizeof(host_x));
		uint64_t launches =
		        call_count(w ? "cudaLaunchKernelExC_ptsz" : "cudaLaunchKernelExC");
		launch_config_recorded(f->stream, scale_kernel, (void *[]){&x, &y, &a, &n}, ways[w],
		                       attrs, 2, &rec, &kernel);
		assert_int_equal(call_count(w ? "cudaLaunchKernelExC_ptsz" : "cudaLaunchKernelExC"),
		                 launches + 1);
		struct lynx_replay_segment *segment = segment_of(&kernel, 1);
		unsigned int calls = spy.calls;
		assert_int_equal(lynx_replay_verify(segment, f->stream,
		                                    &(struct lynx_replay_range){y, N * 4}, NULL, 1,
		                                    NULL, 0, &check),
		                 LYNX_REPLAY_REPRODUCES);
		assert_int_equal(check.rewritten, 1);
		assert_spied(calls, scale_kernel, f->stream, &kept, 1);
		lynx_replay_segment_destroy(segment);
		driver.mem_free(x);
		driver.mem_free(y);
	}
}

/* cuLaunchKernelEx_ptsz with the parameters packed in `extra` (a by-value struct holding the
 * pointers): the record's packed bytes replay through kernelParams, redirected, bit for bit,
 * on the replay's stream rather than the per-thread default stream it ran on. */
static void test_packed_extra_parameters_replay_like_kernel_params(void **state)
{
	struct fixture *f = *state;
	CUdeviceptr x = device_alloc(N * 4), y = device_alloc(N * 4);
	struct scale_args args = {(const float *)x, (float *)y, -1.25f, N};
	CUlaunchMemSyncDomain domain = CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE;
	const CUlaunchAttribute attrs[] = {
	        attr(CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN, &domain, sizeof(domain), 0x77)};
	const CUlaunchAttribute kept =
	        clean(CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN, &domain, sizeof(domain));
	float host_x[N];
	struct recording rec;
	struct lynx_replay_kernel kernel;
	struct lynx_replay_check check;

	inputs(host_x);
	upload(f->stream, x, host_x, sizeof(host_x));
	launch_config_recorded(f->stream, scale_struct_kernel, (void *[]){&args},
	                       DRIVER_EX_PTSZ_EXTRA, attrs, 1, &rec, &kernel);
	assert_int_equal(kernel.param_bytes, sizeof(struct scale_args));
	struct lynx_replay_segment *segment = segment_of(&kernel, 1);
	assert_int_equal(lynx_replay_segment_word(segment, 0, 8), y);
	unsigned int calls = spy.calls;
	assert_int_equal(lynx_replay_verify(segment, f->stream,
	                                    &(struct lynx_replay_range){y, N * 4}, NULL, 1, NULL, 0,
	                                    &check),
	                 LYNX_REPLAY_REPRODUCES);
	assert_int_equal(check.rewritten, 1);
	assert_spied(calls, scale_struct_kernel, f->stream, &kept, 1);
	lynx_replay_segment_destroy(segment);
	driver.mem_free(x);
	driver.mem_free(y);
}

/*
 * Attributes a replay cannot honour: one that makes a CUDA graph's node, one Lynx does not
 * know, more than a record holds, none recorded. Each makes the kernel unsupported with a
 * reason naming it (verification and examination say UNSUPPORTED, never DIFFERS), and
 * nothing is launched; the same segment without them reproduces.
 */
static void test_a_launch_attribute_a_replay_cannot_honour_is_named_not_a_difference(void **state)
{
	struct fixture *f = *state;
	struct two_kernel_segment s;
	unsigned int one[3] = {1, 1, 1};
	struct {
		int updatable;
		CUgraphDeviceNode node;
	} updatable = {1, NULL};
	int on = 1;
	CUlaunchAttribute attrs[LYNX_LAUNCH_MAX_ATTRS + 1];
	const struct {
		CUlaunchAttributeID id;
		const void *value;
		size_t bytes;
		uint32_t count; /* attributes given */
		bool recorded;
		const char *why;
	} cases[] = {
	        {CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE, &updatable, sizeof(updatable), 2,
	         true,
	         "launch attribute DEVICE_UPDATABLE_KERNEL_NODE (13): it makes a CUDA graph's node "
	         "(valid only while capturing) and hands the node back"},
	        {(CUlaunchAttributeID)15, &on, sizeof(on), 2, true,
	         "launch attribute 15, which Lynx does not know (it may tie the launch to a stream "
	         "or an event)"},
	        {CU_LAUNCH_ATTRIBUTE_PRIORITY, &on, sizeof(on), LYNX_LAUNCH_MAX_ATTRS + 1, true,
	         "9 launch attributes (a record holds at most 8)"},
	        {CU_LAUNCH_ATTRIBUTE_PRIORITY, &on, sizeof(on), 2, false,
	         "2 launch attributes, not recorded"},
	};
	struct lynx_replay_operand ops[4];
	struct allocations t = {0};
	struct lynx_replay_examination how = examination(&t, ops, 4, 1 << 20);
	struct lynx_replay_range outputs[2];
	struct lynx_replay_kernel kernels[2];
	struct lynx_replay_check check;
	struct lynx_replay_stats stats;
	struct recording rec;
	float a = 2.0f;
	int n = N;

	/* scale(x -> tmp) plainly, then scale(tmp -> y) with a launch config. */
	run_two_kernels(f->stream, &s);
	attrs[0] = attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, one, sizeof(one), 0);
	launch_config_recorded(f->stream, scale_kernel, (void *[]){&s.tmp, &s.y, &a, &n}, DRIVER_EX,
	                       attrs, 1, &rec, &s.kernels[1]);
	download(f->stream, s.host_y, s.y, sizeof(s.host_y));
	outputs[0] = (struct lynx_replay_range){s.tmp, N * 4};
	outputs[1] = (struct lynx_replay_range){s.y, N * 4};
	t.count = 1;
	t.base[0] = s.x;
	t.size[0] = N * 4;
	uint64_t plain = call_count("cuLaunchKernel"), ex = call_count("cuLaunchKernelEx");
	unsigned int calls = spy.calls;

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		size_t which = 99;
		for (uint32_t i = 1; i <= LYNX_LAUNCH_MAX_ATTRS; i++)
			attrs[i] = attr(cases[c].id, cases[c].value, cases[c].bytes, 0);
		memcpy(kernels, s.kernels, sizeof(kernels));
		kernels[1].attr_count = cases[c].count;
		kernels[1].attrs = cases[c].recorded ? attrs : NULL;
		struct lynx_replay_segment *segment = segment_of(kernels, 2);
		const char *why = lynx_replay_segment_unsupported(segment, &which);
		assert_non_null(why);
		assert_string_equal(why, cases[c].why);
		assert_int_equal(which, 1);
		assert_int_equal(
		        lynx_replay_verify(segment, f->stream, outputs, NULL, 2, NULL, 0, &check),
		        LYNX_REPLAY_UNSUPPORTED);
		assert_int_equal(check.kernel, 1);
		assert_non_null(strstr(check.reason, "kernel 1 cannot be replayed: "));
		assert_non_null(strstr(check.reason, cases[c].why));
		assert_int_equal(
		        lynx_replay_examine(segment, f->stream, outputs, 2, NULL, 0, &how, &check),
		        LYNX_REPLAY_UNSUPPORTED);
		assert_non_null(strstr(check.reason, cases[c].why));
		assert_int_equal(lynx_replay_launch(segment, f->stream, NULL, 0, &stats), -ENOTSUP);
		assert_int_equal(stats.launched, 0);
		lynx_replay_segment_destroy(segment);
	}
	assert_int_equal(spy.calls, calls);
	assert_int_equal(call_count("cuLaunchKernel"), plain);
	assert_int_equal(call_count("cuLaunchKernelEx"), ex);

	/* The kept cluster alone: the two kernels, each through its own entry point. */
	struct lynx_replay_segment *segment = segment_of(s.kernels, 2);
	assert_int_equal(lynx_replay_verify(segment, f->stream, outputs, NULL, 2, NULL, 0, &check),
	                 LYNX_REPLAY_REPRODUCES);
	assert_int_equal(call_count("cuLaunchKernel"), plain + 1);
	assert_int_equal(spy.calls, calls + 1);
	lynx_replay_segment_destroy(segment);
	free_two_kernels(&s);
}

/*
 * A later launch of a producer launched with a config refreshes its segment when the
 * attributes a replay passes are the same (the trainer's stack bytes around them, and the
 * ones a replay drops, may differ), and not when those differ or it has no config.
 */
static void test_refresh_compares_the_attributes_a_replay_passes(void **state)
{
	struct fixture *f = *state;
	CUdeviceptr x = device_alloc(N * 4), x2 = device_alloc(N * 4), y = device_alloc(N * 4);
	float a = 1.5f, a2 = -3.0f, host_x[N];
	int n = N, low = 0, high = -5, on = 1;
	unsigned int one[3] = {1, 1, 1}, two[3] = {2, 1, 1};
	struct {
		CUevent event;
		int flags;
	} first = {(CUevent)(uintptr_t)0x1111, 0}, second = {(CUevent)(uintptr_t)0x2222, 0};
	const CUlaunchAttribute attrs[] = {
	        attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, one, sizeof(one), 0x11),
	        attr(CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT, &first, sizeof(first), 0x11),
	        attr(CU_LAUNCH_ATTRIBUTE_PRIORITY, &low, sizeof(low), 0x11),
	};
	CUlaunchAttribute later_attrs[] = {
	        attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, one, sizeof(one), 0xee),
	        attr(CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT, &second, sizeof(second), 0xee),
	        attr(CU_LAUNCH_ATTRIBUTE_PRIORITY, &high, sizeof(high), 0xee),
	        attr(CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &on, sizeof(on), 0xee),
	};
	struct recording rec, later_rec;
	struct lynx_replay_kernel kernel, later, other;

	inputs(host_x);
	upload(f->stream, x, host_x, sizeof(host_x));
	upload(f->stream, x2, host_x, sizeof(host_x));
	launch_config_recorded(f->stream, scale_kernel, (void *[]){&x, &y, &a, &n}, DRIVER_EX,
	                       attrs, 3, &rec, &kernel);
	struct lynx_replay_segment *segment = segment_of(&kernel, 1);
	launch_config_recorded(f->stream, scale_kernel, (void *[]){&x2, &y, &a2, &n}, DRIVER_EX,
	                       later_attrs, 3, &later_rec, &later);

	other = later;
	other.config = false;
	assert_int_equal(lynx_replay_segment_refresh(segment, 0, &other), -EINVAL);
	other = later;
	other.attrs = later_attrs; /* a cooperative launch now */
	other.attr_count = 4;
	assert_int_equal(lynx_replay_segment_refresh(segment, 0, &other), -EINVAL);
	CUlaunchAttribute wider[3];
	memcpy(wider, later.attrs, sizeof(wider));
	wider[0] = attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, two, sizeof(two), 0xee);
	other = later;
	other.attrs = wider;
	assert_int_equal(lynx_replay_segment_refresh(segment, 0, &other), -EINVAL);
	assert_int_equal(lynx_replay_segment_word(segment, 0, 0), x);

	assert_int_equal(lynx_replay_segment_refresh(segment, 0, &later), 0);
	assert_int_equal(lynx_replay_segment_word(segment, 0, 0), x2);

	lynx_replay_segment_destroy(segment);
	driver.mem_free(x);
	driver.mem_free(x2);
	driver.mem_free(y);
}

static int run_suite(const char *name, const struct CMUnitTest *tests, size_t count)
{
	if (simgpu_load()) {
		fprintf(stderr, "%s: cannot load simgpu from %s/simgpu\n", name, build_dir);
		return 1;
	}
	return _cmocka_run_group_tests(name, tests, count, NULL, NULL);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_a_redirected_replay_reproduces_bit_for_bit,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                test_a_pointer_inside_a_by_value_struct_is_redirected, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_words_outside_every_from_range_are_left_alone,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(test_a_nondeterministic_kernel_differs, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(
	                test_an_output_pointer_read_from_device_memory_is_caught_and_undone, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(
	                test_an_in_place_accumulation_differs_and_keeps_the_original, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(test_temporaries_are_redirected_to_scratch, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_records_that_cannot_be_replayed_launch_nothing,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(test_bad_arguments_are_refused, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_examine_finds_inputs_read_in_place, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(
	                test_examine_finds_a_workspace_written_before_it_is_read, setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                test_examine_refuses_outputs_that_depend_on_memory_the_replay_updates,
	                setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                test_examine_catches_a_kernel_reading_through_a_pointer_in_device_memory,
	                setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                test_examine_catches_a_write_through_a_pointer_in_device_memory, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(
	                test_examine_undoes_what_the_first_replay_wrote_in_place, setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                test_examine_takes_no_more_device_memory_than_allowed, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_examine_refuses_memory_beyond_its_limits,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                test_refresh_takes_a_later_launch_of_the_same_kernel_only, setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                test_a_launch_config_replays_through_cuLaunchKernelEx_with_the_attributes_kept,
	                setup, teardown),
	        cmocka_unit_test_setup_teardown(test_runtime_launch_configs_replay_bit_for_bit,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                test_packed_extra_parameters_replay_like_kernel_params, setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                test_a_launch_attribute_a_replay_cannot_honour_is_named_not_a_difference,
	                setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                test_refresh_compares_the_attributes_a_replay_passes, setup, teardown),
	};
	const struct CMUnitTest faulty[] = {
	        cmocka_unit_test_setup_teardown(
	                test_a_failing_launch_is_reported_and_the_original_restored, setup,
	                teardown),
	};
	int status = 0, failed;
	pid_t child;

	if (harness_init(argv[0], "test-replay"))
		return 1;
	lynx_log_open(LYNX_LOG_ERROR, NULL);
	fflush(NULL);
	child = fork();
	if (child == 0) {
		setenv("SIMGPU_FAULTS", "cuLaunchKernel@4=719", 1);
		exit(run_suite("replay_launch_faults", faulty, sizeof(faulty) / sizeof(faulty[0])));
	}
	if (child < 0 || waitpid(child, &status, 0) != child)
		return harness_finish(1);
	failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	failed |= run_suite("replay", tests, sizeof(tests) / sizeof(tests[0])) != 0;
	return harness_finish(failed);
}
