/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simgpu's runtime (libcudart.so.13): every launch form computes the right numbers, each
 * runtime call reaches the driver through cuGetProcAddress as exactly one driver call,
 * errors follow CUDA's last-error rules, and faults and bad settings surface as CUDA does.
 * Only CUDA runtime calls and simgpu.h are used; driver functions come from
 * cudaGetDriverEntryPoint*, as a program without -lcuda would get them.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "simgpu.h"

/* crt/device_functions.h declares these for C++ only. */
cudaError_t __cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                               size_t sharedMem, cudaStream_t stream);
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                    size_t sharedMem, cudaStream_t stream);

#define N 128
#define ONE ((dim3){1, 1, 1})

/* ---- The axpy kernel: y = a * x + y over n elements, 1000 ns per element ---------------- */

static const void *axpy;
static int unregistered_symbol; /* an address simgpu knows nothing about */

static void axpy_body(const struct simgpu_launch_dims *dims, void **params)
{
	float a = *(float *)params[0];
	const float *x = *(const float **)params[1];
	float *y = *(float **)params[2];
	int n = *(int *)params[3];

	for (int i = 0; i < n; i++)
		y[i] = a * x[i] + y[i];
}

static uint64_t axpy_cost(const struct simgpu_launch_dims *dims, void **params)
{
	return 1000ull * (uint64_t) * (int *)params[3];
}

static int register_axpy(void **state)
{
	struct simgpu_kernel_desc desc = {
	        .name = "axpy",
	        .num_params = 4,
	        .param_sizes = {sizeof(float), sizeof(float *), sizeof(float *), sizeof(int)},
	        .body = axpy_body,
	        .cost_ns = axpy_cost,
	};

	axpy = simgpu_kernel_register(&desc);
	return axpy ? 0 : -1;
}

/* Device buffers x = i and y = 2i, and the launch arguments for y = 3x + y. */
struct axpy_run {
	float a;
	float *x, *y;
	int n;
	void *args[4];
};

static void axpy_prepare(struct axpy_run *run, int n)
{
	float host[N];

	assert_true(n <= N);
	run->a = 3.0f;
	run->n = n;
	assert_int_equal(cudaMalloc((void **)&run->x, N * sizeof(float)), cudaSuccess);
	assert_int_equal(cudaMalloc((void **)&run->y, N * sizeof(float)), cudaSuccess);
	for (int i = 0; i < N; i++)
		host[i] = (float)i;
	assert_int_equal(cudaMemcpy(run->x, host, sizeof(host), cudaMemcpyHostToDevice),
	                 cudaSuccess);
	for (int i = 0; i < N; i++)
		host[i] = 2.0f * (float)i;
	assert_int_equal(cudaMemcpy(run->y, host, sizeof(host), cudaMemcpyHostToDevice),
	                 cudaSuccess);
	run->args[0] = &run->a;
	run->args[1] = &run->x;
	run->args[2] = &run->y;
	run->args[3] = &run->n;
}

static void axpy_free(struct axpy_run *run)
{
	assert_int_equal(cudaFree(run->x), cudaSuccess);
	assert_int_equal(cudaFree(run->y), cudaSuccess);
}

/* After a synchronising call: y = 5i where one launch ran, 2i beyond n. */
static void axpy_check_and_free(struct axpy_run *run)
{
	float host[N];

	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
	assert_int_equal(cudaMemcpy(host, run->y, sizeof(host), cudaMemcpyDeviceToHost),
	                 cudaSuccess);
	for (int i = 0; i < N; i++)
		assert_true(host[i] == (float)(i < run->n ? 5 * i : 2 * i));
	axpy_free(run);
}

/* Sum of the counters of driver functions (cu*, not cuda*): how often libcuda was called. */
static uint64_t driver_calls(void)
{
	int fd = memfd_create("simgpu-counters", 0);
	unsigned long long count;
	uint64_t total = 0;
	char symbol[128];
	FILE *f;

	assert_true(fd >= 0);
	simgpu_counters_dump(fd);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	f = fdopen(fd, "r");
	assert_non_null(f);
	while (fscanf(f, "%127s %llu", symbol, &count) == 2)
		if (!strncmp(symbol, "cu", 2) && strncmp(symbol, "cuda", 4))
			total += count;
	fclose(f);
	return total;
}

/* ---- Launch forms ----------------------------------------------------------------------- */

/* Which entry point a launch test uses, and the driver function it must reach. */
enum launch_form {
	LAUNCH_KERNEL,
	LAUNCH_KERNEL_PTSZ,
	GET_KERNEL_LAUNCH,
	GET_KERNEL_LAUNCH_PTSZ,
	LAUNCH_KERNEL_EX,
	LAUNCH_KERNEL_EX_PTSZ,
};

static const char *const form_driver_symbol[] = {
        [LAUNCH_KERNEL] = "cuLaunchKernel",      [LAUNCH_KERNEL_PTSZ] = "cuLaunchKernel_ptsz",
        [GET_KERNEL_LAUNCH] = "cuLaunchKernel",  [GET_KERNEL_LAUNCH_PTSZ] = "cuLaunchKernel_ptsz",
        [LAUNCH_KERNEL_EX] = "cuLaunchKernelEx", [LAUNCH_KERNEL_EX_PTSZ] = "cuLaunchKernelEx_ptsz",
};

static cudaError_t launch_with(enum launch_form form, struct axpy_run *run, cudaStream_t stream)
{
	cudaLaunchAttribute attr = {.id = cudaLaunchAttributePriority, .val.priority = 0};
	cudaLaunchConfig_t config = {
	        .gridDim = ONE,
	        .blockDim = ONE,
	        .stream = stream,
	        .attrs = &attr,
	        .numAttrs = 1,
	};
	cudaKernel_t kernel = NULL;

	switch (form) {
	case LAUNCH_KERNEL:
		return cudaLaunchKernel(axpy, ONE, ONE, run->args, 0, stream);
	case LAUNCH_KERNEL_PTSZ:
		return cudaLaunchKernel_ptsz(axpy, ONE, ONE, run->args, 0, stream);
	case GET_KERNEL_LAUNCH:
		assert_int_equal(__cudaGetKernel(&kernel, axpy), cudaSuccess);
		return __cudaLaunchKernel(kernel, ONE, ONE, run->args, 0, stream);
	case GET_KERNEL_LAUNCH_PTSZ:
		assert_int_equal(__cudaGetKernel(&kernel, axpy), cudaSuccess);
		return __cudaLaunchKernel_ptsz(kernel, ONE, ONE, run->args, 0, stream);
	case LAUNCH_KERNEL_EX:
		return cudaLaunchKernelExC(&config, axpy, run->args);
	case LAUNCH_KERNEL_EX_PTSZ:
		return cudaLaunchKernelExC_ptsz(&config, axpy, run->args);
	}
	return cudaErrorInvalidValue;
}

static void check_launch_form(enum launch_form form, cudaStream_t stream)
{
	struct axpy_run run;
	uint64_t launches;

	axpy_prepare(&run, 40);
	launches = simgpu_counter(form_driver_symbol[form]);
	assert_int_equal(launch_with(form, &run, stream), cudaSuccess);
	assert_int_equal(simgpu_counter(form_driver_symbol[form]), launches + 1);
	axpy_check_and_free(&run);
}

static void test_cudaLaunchKernel_computes_axpy(void **state)
{
	check_launch_form(LAUNCH_KERNEL, 0);
}

static void test_cudaLaunchKernel_ptsz_computes_axpy_on_the_per_thread_stream(void **state)
{
	check_launch_form(LAUNCH_KERNEL_PTSZ, 0);
	check_launch_form(LAUNCH_KERNEL_PTSZ, cudaStreamPerThread);
}

static void test___cudaLaunchKernel_computes_axpy_with_the_kernel_of___cudaGetKernel(void **state)
{
	check_launch_form(GET_KERNEL_LAUNCH, cudaStreamLegacy);
	check_launch_form(GET_KERNEL_LAUNCH_PTSZ, 0);
}

static void test_cudaLaunchKernelExC_computes_axpy_with_attributes(void **state)
{
	cudaStream_t stream;

	assert_int_equal(cudaStreamCreate(&stream), cudaSuccess);
	check_launch_form(LAUNCH_KERNEL_EX, stream);
	check_launch_form(LAUNCH_KERNEL_EX_PTSZ, 0);
	assert_int_equal(cudaStreamDestroy(stream), cudaSuccess);
}

/* cuLaunchKernelEx with parameters packed by cuFuncGetParamInfo into an `extra` buffer. */
static void
test_cuLaunchKernelEx_from_the_entry_point_computes_axpy_from_a_packed_buffer(void **state)
{
	PFN_cuLaunchKernelEx_v11060 launch_ex = NULL;
	PFN_cuFuncGetParamInfo_v12040 param_info = NULL;
	enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
	CUlaunchConfig config = {.gridDimX = 1,
	                         .gridDimY = 1,
	                         .gridDimZ = 1,
	                         .blockDimX = 1,
	                         .blockDimY = 1,
	                         .blockDimZ = 1};
	unsigned char buffer[64];
	size_t offset, size, buffer_size = 0;
	struct axpy_run run;

	assert_int_equal(cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", (void **)&launch_ex,
	                                                  12000, cudaEnableDefault, &found),
	                 cudaSuccess);
	assert_int_equal(found, cudaDriverEntryPointSuccess);
	assert_int_equal(cudaGetDriverEntryPointByVersion("cuFuncGetParamInfo",
	                                                  (void **)&param_info, 12040,
	                                                  cudaEnableDefault, NULL),
	                 cudaSuccess);
	assert_non_null(launch_ex);
	assert_non_null(param_info);

	axpy_prepare(&run, 33);
	memset(buffer, 0, sizeof(buffer));
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(param_info((CUfunction)axpy, i, &offset, &size), CUDA_SUCCESS);
		assert_true(offset + size <= sizeof(buffer));
		memcpy(buffer + offset, run.args[i], size);
		buffer_size = offset + size;
	}
	assert_int_equal(param_info((CUfunction)axpy, 4, &offset, &size), CUDA_ERROR_INVALID_VALUE);
	void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE,
	                 &buffer_size, CU_LAUNCH_PARAM_END};
	uint64_t launches = simgpu_counter("cuLaunchKernelEx");
	assert_int_equal(launch_ex(&config, (CUfunction)axpy, NULL, extra), CUDA_SUCCESS);
	assert_int_equal(simgpu_counter("cuLaunchKernelEx"), launches + 1);
	axpy_check_and_free(&run);
}

static void test_unknown_host_function_is_an_invalid_device_function(void **state)
{
	const void *bogus = &unregistered_symbol;
	cudaLaunchConfig_t config = {.gridDim = ONE, .blockDim = ONE};
	cudaKernel_t kernel = NULL;
	cudaFunction_t func = NULL;
	void *args[1] = {NULL};

	assert_int_equal(cudaLaunchKernel(bogus, ONE, ONE, args, 0, 0),
	                 cudaErrorInvalidDeviceFunction);
	assert_int_equal(cudaLaunchKernelExC_ptsz(&config, bogus, args),
	                 cudaErrorInvalidDeviceFunction);
	assert_int_equal(__cudaGetKernel(&kernel, bogus), cudaErrorInvalidDeviceFunction);
	assert_null(kernel);
	assert_int_equal(cudaGetFuncBySymbol(&func, bogus), cudaErrorInvalidDeviceFunction);
	assert_int_equal(cudaGetLastError(), cudaErrorInvalidDeviceFunction);

	assert_int_equal(cudaGetFuncBySymbol(&func, axpy), cudaSuccess);
	assert_non_null(func);
	assert_int_equal(__cudaGetKernel(&kernel, axpy), cudaSuccess);
	assert_ptr_equal(kernel, axpy);
}

static void run_host_func(void *flag)
{
	*(int *)flag += 1;
}

static void test_host_functions_run_once_the_stream_is_synchronised(void **state)
{
	int ran = 0, ran_ptsz = 0;
	cudaStream_t stream;

	assert_int_equal(cudaStreamCreate(&stream), cudaSuccess);
	assert_int_equal(cudaLaunchHostFunc(stream, run_host_func, &ran), cudaSuccess);
	assert_int_equal(cudaLaunchHostFunc_ptsz(0, run_host_func, &ran_ptsz), cudaSuccess);
	assert_int_equal(cudaStreamSynchronize(stream), cudaSuccess);
	assert_int_equal(cudaStreamSynchronize_ptsz(0), cudaSuccess);
	assert_int_equal(ran, 1);
	assert_int_equal(ran_ptsz, 1);
	assert_int_equal(cudaStreamDestroy(stream), cudaSuccess);
}

/* ---- The driver path -------------------------------------------------------------------- */

static void test_runtime_reaches_the_driver_through_cuGetProcAddress_v2(void **state)
{
	assert_int_equal(cudaFree(NULL), cudaSuccess); /* initialises, as in CUDA */
	assert_true(simgpu_counter("cuGetProcAddress_v2") > 0);
	assert_true(simgpu_counter("cuInit") >= 1);
	assert_true(simgpu_counter("cuDevicePrimaryCtxRetain") >= 1);
	assert_true(simgpu_counter("cuCtxSetCurrent") >= 1);
}

/* One runtime call each, in an order that keeps every call valid. */
struct forward_env {
	void *dev, *tmp, *async_buf, *pinned;
	float host[N];
	cudaStream_t stream, made, made_flags, made_priority;
	cudaEvent_t start, end, made_event, made_event_flags;
	struct axpy_run run;
	cudaLaunchConfig_t config;
	cudaKernel_t kernel;
	cudaFunction_t func;
	float ms;
	int value, least, greatest, host_func_ran;
	unsigned int flags;
	size_t free_bytes, total_bytes;
	enum cudaStreamCaptureStatus capture;
	cudaGraph_t graph, graph_ptsz;
	cudaGraphExec_t exec;
	void *entry;
	cudaMemPool_t default_pool, pool;
	struct cudaMemPoolProps pool_props;
	cuuint64_t pool_value;
	void *pool_buf, *pool_buf_ptsz;
};

#define FORWARD_CASES(X)                                                                           \
	X(cudaMalloc, "cuMemAlloc_v2", cudaMalloc(&e->tmp, 4096))                                  \
	X(cudaFree, "cuMemFree_v2", cudaFree(e->tmp))                                              \
	X(cudaMallocHost, "cuMemAllocHost_v2", cudaMallocHost(&e->pinned, 4096))                   \
	X(cudaFreeHost, "cuMemFreeHost", cudaFreeHost(e->pinned))                                  \
	X(cudaMallocAsync, "cuMemAllocAsync", cudaMallocAsync(&e->async_buf, 4096, e->stream))     \
	X(cudaFreeAsync, "cuMemFreeAsync", cudaFreeAsync(e->async_buf, e->stream))                 \
	X(cudaMallocAsync_ptsz, "cuMemAllocAsync_ptsz",                                            \
	  cudaMallocAsync_ptsz(&e->async_buf, 4096, 0))                                            \
	X(cudaFreeAsync_ptsz, "cuMemFreeAsync_ptsz", cudaFreeAsync_ptsz(e->async_buf, 0))          \
	X(cudaDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool",                                \
	  cudaDeviceGetDefaultMemPool(&e->default_pool, 0))                                        \
	X(cudaMemPoolSetAttribute, "cuMemPoolSetAttribute",                                        \
	  cudaMemPoolSetAttribute(e->default_pool, cudaMemPoolAttrReleaseThreshold,                \
	                          &e->pool_value))                                                 \
	X(cudaMemPoolGetAttribute, "cuMemPoolGetAttribute",                                        \
	  cudaMemPoolGetAttribute(e->default_pool, cudaMemPoolAttrUsedMemHigh, &e->pool_value))    \
	X(cudaMemPoolTrimTo, "cuMemPoolTrimTo", cudaMemPoolTrimTo(e->default_pool, 0))             \
	X(cudaMemPoolCreate, "cuMemPoolCreate", cudaMemPoolCreate(&e->pool, &e->pool_props))       \
	X(cudaMallocFromPoolAsync, "cuMemAllocFromPoolAsync",                                      \
	  cudaMallocFromPoolAsync(&e->pool_buf, 4096, e->pool, e->stream))                         \
	X(cudaMallocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync_ptsz",                            \
	  cudaMallocFromPoolAsync_ptsz(&e->pool_buf_ptsz, 4096, e->pool, 0))                       \
	X(cudaMemPoolDestroy, "cuMemPoolDestroy", cudaMemPoolDestroy(e->pool))                     \
	X(cudaMemGetInfo, "cuMemGetInfo_v2", cudaMemGetInfo(&e->free_bytes, &e->total_bytes))      \
	X(cudaMemcpy, "cuMemcpy", cudaMemcpy(e->dev, e->host, 256, cudaMemcpyHostToDevice))        \
	X(cudaMemcpy_ptds, "cuMemcpy_ptds",                                                        \
	  cudaMemcpy_ptds(e->host, e->dev, 256, cudaMemcpyDefault))                                \
	X(cudaMemcpyAsync, "cuMemcpyAsync",                                                        \
	  cudaMemcpyAsync(e->dev, e->host, 256, cudaMemcpyHostToDevice, e->stream))                \
	X(cudaMemcpyAsync_ptsz, "cuMemcpyAsync_ptsz",                                              \
	  cudaMemcpyAsync_ptsz(e->dev, e->host, 256, cudaMemcpyHostToDevice, 0))                   \
	X(cudaMemset, "cuMemsetD8_v2", cudaMemset(e->dev, 1, 256))                                 \
	X(cudaMemset_ptds, "cuMemsetD8_v2_ptds", cudaMemset_ptds(e->dev, 2, 256))                  \
	X(cudaMemsetAsync, "cuMemsetD8Async", cudaMemsetAsync(e->dev, 3, 256, e->stream))          \
	X(cudaMemsetAsync_ptsz, "cuMemsetD8Async_ptsz", cudaMemsetAsync_ptsz(e->dev, 4, 256, 0))   \
	X(cudaStreamCreate, "cuStreamCreate", cudaStreamCreate(&e->made))                          \
	X(cudaStreamDestroy, "cuStreamDestroy_v2", cudaStreamDestroy(e->made))                     \
	X(cudaStreamCreateWithFlags, "cuStreamCreate",                                             \
	  cudaStreamCreateWithFlags(&e->made_flags, cudaStreamNonBlocking))                        \
	X(cudaStreamGetFlags, "cuStreamGetFlags", cudaStreamGetFlags(e->made_flags, &e->flags))    \
	X(cudaStreamGetFlags_ptsz, "cuStreamGetFlags_ptsz", cudaStreamGetFlags_ptsz(0, &e->flags)) \
	X(cudaStreamCreateWithPriority, "cuStreamCreateWithPriority",                              \
	  cudaStreamCreateWithPriority(&e->made_priority, 0, 0))                                   \
	X(cudaStreamGetPriority, "cuStreamGetPriority",                                            \
	  cudaStreamGetPriority(e->made_priority, &e->value))                                      \
	X(cudaStreamGetPriority_ptsz, "cuStreamGetPriority_ptsz",                                  \
	  cudaStreamGetPriority_ptsz(0, &e->value))                                                \
	X(cudaStreamIsCapturing, "cuStreamIsCapturing",                                            \
	  cudaStreamIsCapturing(e->stream, &e->capture))                                           \
	X(cudaStreamIsCapturing_ptsz, "cuStreamIsCapturing_ptsz",                                  \
	  cudaStreamIsCapturing_ptsz(0, &e->capture))                                              \
	X(cudaDeviceGetStreamPriorityRange, "cuCtxGetStreamPriorityRange",                         \
	  cudaDeviceGetStreamPriorityRange(&e->least, &e->greatest))                               \
	X(cudaEventCreate, "cuEventCreate", cudaEventCreate(&e->made_event))                       \
	X(cudaEventDestroy, "cuEventDestroy_v2", cudaEventDestroy(e->made_event))                  \
	X(cudaEventCreateWithFlags, "cuEventCreate",                                               \
	  cudaEventCreateWithFlags(&e->made_event_flags, cudaEventDisableTiming))                  \
	X(cudaEventRecord, "cuEventRecord", cudaEventRecord(e->start, e->stream))                  \
	X(cudaLaunchKernel, "cuLaunchKernel",                                                      \
	  cudaLaunchKernel(axpy, ONE, ONE, e->run.args, 0, e->stream))                             \
	X(cudaLaunchKernel_ptsz, "cuLaunchKernel_ptsz",                                            \
	  cudaLaunchKernel_ptsz(axpy, ONE, ONE, e->run.args, 0, e->stream))                        \
	X(__cudaGetKernel, "cuKernelGetFunction", __cudaGetKernel(&e->kernel, axpy))               \
	X(cudaGetFuncBySymbol, "cuKernelGetFunction", cudaGetFuncBySymbol(&e->func, axpy))         \
	X(__cudaLaunchKernel, "cuLaunchKernel",                                                    \
	  __cudaLaunchKernel(e->kernel, ONE, ONE, e->run.args, 0, e->stream))                      \
	X(__cudaLaunchKernel_ptsz, "cuLaunchKernel_ptsz",                                          \
	  __cudaLaunchKernel_ptsz(e->kernel, ONE, ONE, e->run.args, 0, e->stream))                 \
	X(cudaLaunchKernelExC, "cuLaunchKernelEx",                                                 \
	  cudaLaunchKernelExC(&e->config, axpy, e->run.args))                                      \
	X(cudaLaunchKernelExC_ptsz, "cuLaunchKernelEx_ptsz",                                       \
	  cudaLaunchKernelExC_ptsz(&e->config, axpy, e->run.args))                                 \
	X(cudaLaunchHostFunc, "cuLaunchHostFunc",                                                  \
	  cudaLaunchHostFunc(e->stream, run_host_func, &e->host_func_ran))                         \
	X(cudaLaunchHostFunc_ptsz, "cuLaunchHostFunc_ptsz",                                        \
	  cudaLaunchHostFunc_ptsz(e->stream, run_host_func, &e->host_func_ran))                    \
	X(cudaEventRecord_ptsz, "cuEventRecord_ptsz", cudaEventRecord_ptsz(e->end, e->stream))     \
	X(cudaStreamWaitEvent, "cuStreamWaitEvent", cudaStreamWaitEvent(e->made_flags, e->end, 0)) \
	X(cudaStreamWaitEvent_ptsz, "cuStreamWaitEvent_ptsz",                                      \
	  cudaStreamWaitEvent_ptsz(0, e->end, 0))                                                  \
	X(cudaStreamBeginCapture, "cuStreamBeginCapture_v2",                                       \
	  cudaStreamBeginCapture(e->stream, cudaStreamCaptureModeRelaxed))                         \
	X(cudaStreamGetCaptureInfo, "cuStreamGetCaptureInfo_v3",                                   \
	  cudaStreamGetCaptureInfo(e->stream, &e->capture, NULL, NULL, NULL, NULL, NULL))          \
	X(cudaStreamEndCapture, "cuStreamEndCapture", cudaStreamEndCapture(e->stream, &e->graph))  \
	X(cudaGraphInstantiate, "cuGraphInstantiateWithFlags",                                     \
	  cudaGraphInstantiate(&e->exec, e->graph, 0))                                             \
	X(cudaGraphLaunch, "cuGraphLaunch", cudaGraphLaunch(e->exec, e->stream))                   \
	X(cudaStreamBeginCapture_ptsz, "cuStreamBeginCapture_v2_ptsz",                             \
	  cudaStreamBeginCapture_ptsz(0, cudaStreamCaptureModeRelaxed))                            \
	X(cudaStreamGetCaptureInfo_ptsz, "cuStreamGetCaptureInfo_v3_ptsz",                         \
	  cudaStreamGetCaptureInfo_ptsz(0, &e->capture, NULL, NULL, NULL, NULL, NULL))             \
	X(cudaStreamEndCapture_ptsz, "cuStreamEndCapture_ptsz",                                    \
	  cudaStreamEndCapture_ptsz(0, &e->graph_ptsz))                                            \
	X(cudaGraphLaunch_ptsz, "cuGraphLaunch_ptsz", cudaGraphLaunch_ptsz(e->exec, 0))            \
	X(cudaGraphExecDestroy, "cuGraphExecDestroy", cudaGraphExecDestroy(e->exec))               \
	X(cudaGraphDestroy, "cuGraphDestroy", cudaGraphDestroy(e->graph))                          \
	X(cudaStreamSynchronize, "cuStreamSynchronize", cudaStreamSynchronize(e->stream))          \
	X(cudaStreamSynchronize_ptsz, "cuStreamSynchronize_ptsz", cudaStreamSynchronize_ptsz(0))   \
	X(cudaStreamQuery, "cuStreamQuery", cudaStreamQuery(e->stream))                            \
	X(cudaStreamQuery_ptsz, "cuStreamQuery_ptsz", cudaStreamQuery_ptsz(0))                     \
	X(cudaEventQuery, "cuEventQuery", cudaEventQuery(e->end))                                  \
	X(cudaEventSynchronize, "cuEventSynchronize", cudaEventSynchronize(e->end))                \
	X(cudaEventElapsedTime, "cuEventElapsedTime_v2",                                           \
	  cudaEventElapsedTime(&e->ms, e->start, e->end))                                          \
	X(cudaDeviceSynchronize, "cuCtxSynchronize_v2", cudaDeviceSynchronize())                   \
	X(cudaGetDeviceCount, "cuDeviceGetCount", cudaGetDeviceCount(&e->value))                   \
	X(cudaDeviceGetAttribute, "cuDeviceGetAttribute",                                          \
	  cudaDeviceGetAttribute(&e->value, cudaDevAttrWarpSize, 0))                               \
	X(cudaDriverGetVersion, "cuDriverGetVersion", cudaDriverGetVersion(&e->value))             \
	X(cudaGetDriverEntryPointByVersion, "cuGetProcAddress_v2",                                 \
	  cudaGetDriverEntryPointByVersion("cuMemAlloc", &e->entry, 13000, cudaEnableDefault,      \
	                                   NULL))                                                  \
	X(cudaGetDriverEntryPointByVersion_ptsz, "cuGetProcAddress_v2",                            \
	  cudaGetDriverEntryPointByVersion_ptsz("cuMemAlloc", &e->entry, 13000, cudaEnableDefault, \
	                                        NULL))

#define FORWARD_CALL(runtime, driver, expr)                         \
	static cudaError_t forward_##runtime(struct forward_env *e) \
	{                                                           \
		return expr;                                        \
	}
FORWARD_CASES(FORWARD_CALL)
#undef FORWARD_CALL

static const struct forward_case {
	const char *runtime, *driver;
	cudaError_t (*call)(struct forward_env *e);
} forward_cases[] = {
#define FORWARD_ROW(runtime, driver, expr) {#runtime, driver, forward_##runtime},
        FORWARD_CASES(FORWARD_ROW)
#undef FORWARD_ROW
};

static void test_every_runtime_call_forwards_exactly_one_driver_call(void **state)
{
	struct forward_env env = {0}, *e = &env;

	assert_int_equal(cudaMalloc(&e->dev, 4096), cudaSuccess);
	assert_int_equal(cudaStreamCreate(&e->stream), cudaSuccess);
	assert_int_equal(cudaEventCreate(&e->start), cudaSuccess);
	assert_int_equal(cudaEventCreate(&e->end), cudaSuccess);
	axpy_prepare(&e->run, 8);
	e->config = (cudaLaunchConfig_t){.gridDim = ONE, .blockDim = ONE, .stream = e->stream};
	e->pool_props = (struct cudaMemPoolProps){
	        .allocType = cudaMemAllocationTypePinned,
	        .location = {cudaMemLocationTypeDevice, 0},
	};

	for (size_t i = 0; i < sizeof(forward_cases) / sizeof(forward_cases[0]); i++) {
		const struct forward_case *c = &forward_cases[i];
		uint64_t runtime_before = simgpu_counter(c->runtime);
		uint64_t driver_before = simgpu_counter(c->driver);
		uint64_t total_before = driver_calls();
		cudaError_t err = c->call(e);
		uint64_t runtime_calls = simgpu_counter(c->runtime) - runtime_before;
		uint64_t driver_calls_named = simgpu_counter(c->driver) - driver_before;
		uint64_t driver_calls_all = driver_calls() - total_before;

		if (err != cudaSuccess || runtime_calls != 1 || driver_calls_named != 1 ||
		    driver_calls_all != 1)
			print_error("%s -> %s: %s, %llu runtime calls, %llu named and %llu driver "
			            "calls in all\n",
			            c->runtime, c->driver, cudaGetErrorName(err),
			            (unsigned long long)runtime_calls,
			            (unsigned long long)driver_calls_named,
			            (unsigned long long)driver_calls_all);
		assert_int_equal(err, cudaSuccess);
		assert_int_equal(runtime_calls, 1);
		assert_int_equal(driver_calls_named, 1);
		assert_int_equal(driver_calls_all, 1);
	}
	assert_int_equal(e->host_func_ran, 2);
	assert_int_equal(cudaGraphDestroy(e->graph_ptsz), cudaSuccess);
	/* The destroyed pool's allocations outlived it; freeing them is allowed. */
	assert_int_equal(cudaFreeAsync(e->pool_buf, e->stream), cudaSuccess);
	assert_int_equal(cudaFreeAsync_ptsz(e->pool_buf_ptsz, 0), cudaSuccess);

	assert_int_equal(cudaEventDestroy(e->made_event_flags), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(e->made_flags), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(e->made_priority), cudaSuccess);
	assert_int_equal(cudaEventDestroy(e->start), cudaSuccess);
	assert_int_equal(cudaEventDestroy(e->end), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(e->stream), cudaSuccess);
	assert_int_equal(cudaFree(e->dev), cudaSuccess);
	assert_int_equal(cudaFree(e->run.x), cudaSuccess);
	assert_int_equal(cudaFree(e->run.y), cudaSuccess);
}

static void test_entry_points_honour_stream_flags_and_versions(void **state)
{
	PFN_cuLaunchKernel_v4000 legacy = NULL, per_thread = NULL;
	PFN_cuMemAlloc_v3020 mem_alloc = NULL;
	enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
	CUdeviceptr dptr = 0;
	struct axpy_run run;

	/* cudaEnableDefault: legacy from the plain form, per-thread from the _ptsz form. */
	assert_int_equal(cudaGetDriverEntryPoint("cuLaunchKernel", (void **)&legacy,
	                                         cudaEnableDefault, &found),
	                 cudaSuccess);
	assert_int_equal(found, cudaDriverEntryPointSuccess);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
	assert_int_equal(cudaGetDriverEntryPoint_ptsz("cuLaunchKernel", (void **)&per_thread,
	                                              cudaEnableDefault, NULL),
	                 cudaSuccess);
#pragma GCC diagnostic pop
	assert_non_null(legacy);
	assert_non_null(per_thread);
	assert_true(legacy != per_thread);

	axpy_prepare(&run, 16);
	uint64_t plain_before = simgpu_counter("cuLaunchKernel");
	uint64_t ptsz_before = simgpu_counter("cuLaunchKernel_ptsz");
	assert_int_equal(legacy((CUfunction)axpy, 1, 1, 1, 1, 1, 1, 0, NULL, run.args, NULL),
	                 CUDA_SUCCESS);
	assert_int_equal(simgpu_counter("cuLaunchKernel"), plain_before + 1);
	assert_int_equal(simgpu_counter("cuLaunchKernel_ptsz"), ptsz_before);
	run.n = 8; /* the second launch adds 3x again to the first 8 elements */
	assert_int_equal(per_thread((CUfunction)axpy, 1, 1, 1, 1, 1, 1, 0, NULL, run.args, NULL),
	                 CUDA_SUCCESS);
	assert_int_equal(simgpu_counter("cuLaunchKernel_ptsz"), ptsz_before + 1);
	float host[N];
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
	assert_int_equal(cudaMemcpy(host, run.y, sizeof(host), cudaMemcpyDeviceToHost),
	                 cudaSuccess);
	for (int i = 0; i < N; i++)
		assert_true(host[i] == (float)(i < 8 ? 8 * i : i < 16 ? 5 * i : 2 * i));
	axpy_free(&run);

	/* The version picks the ABI: cuMemAlloc at 3020 is cuMemAlloc_v2. */
	assert_int_equal(cudaGetDriverEntryPointByVersion("cuMemAlloc", (void **)&mem_alloc, 3020,
	                                                  cudaEnableLegacyStream, &found),
	                 cudaSuccess);
	assert_non_null(mem_alloc);
	uint64_t v2_before = simgpu_counter("cuMemAlloc_v2");
	assert_int_equal(mem_alloc(&dptr, 4096), CUDA_SUCCESS);
	assert_int_equal(simgpu_counter("cuMemAlloc_v2"), v2_before + 1);
	assert_int_equal(cudaFree((void *)dptr), cudaSuccess);

	assert_int_equal(
	        cudaGetDriverEntryPointByVersion("cuMemAlloc", (void **)&mem_alloc, 13000, 4, NULL),
	        cudaErrorInvalidValue);
	assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
}

/* cuda.h and cuda_runtime_api.h (13.0): success, a NULL pointer, and the status says why. */
static void test_entry_point_of_an_unknown_symbol_is_null_with_success(void **state)
{
	enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSuccess;
	void *missing = &found;

	assert_int_equal(cudaGetDriverEntryPointByVersion("cuNoSuchFunction", &missing, 13000,
	                                                  cudaEnableDefault, &found),
	                 cudaSuccess);
	assert_null(missing);
	assert_int_equal(found, cudaDriverEntryPointSymbolNotFound);
}

/* ---- Errors, devices, memory -------------------------------------------------------------- */

static void test_last_error_is_kept_until_read_once(void **state)
{
	int device = -1;

	cudaGetLastError(); /* start clean whatever earlier tests left */
	assert_int_equal(cudaPeekAtLastError(), cudaSuccess);
	assert_int_equal(cudaSetDevice(999), cudaErrorInvalidDevice);
	assert_int_equal(cudaGetDevice(&device), cudaSuccess); /* success does not clear it */
	assert_int_equal(device, 0);
	assert_int_equal(cudaPeekAtLastError(), cudaErrorInvalidDevice);
	assert_int_equal(cudaPeekAtLastError(), cudaErrorInvalidDevice);
	assert_int_equal(cudaGetLastError(), cudaErrorInvalidDevice);
	assert_int_equal(cudaGetLastError(), cudaSuccess);
	assert_int_equal(cudaPeekAtLastError(), cudaSuccess);
}

static void *last_error_of_new_thread(void *arg)
{
	*(cudaError_t *)arg = cudaPeekAtLastError();
	return NULL;
}

static void test_last_error_belongs_to_the_thread(void **state)
{
	cudaError_t other = cudaErrorUnknown;
	pthread_t thread;

	assert_int_equal(cudaSetDevice(-1), cudaErrorInvalidDevice);
	assert_int_equal(pthread_create(&thread, NULL, last_error_of_new_thread, &other), 0);
	assert_int_equal(pthread_join(thread, NULL), 0);
	assert_int_equal(other, cudaSuccess);
	assert_int_equal(cudaGetLastError(), cudaErrorInvalidDevice);
}

static void test_error_names_and_strings_match_cuda(void **state)
{
	assert_string_equal(cudaGetErrorName(cudaSuccess), "cudaSuccess");
	assert_string_equal(cudaGetErrorString(cudaSuccess), "no error");
	assert_string_equal(cudaGetErrorName(cudaErrorMemoryAllocation),
	                    "cudaErrorMemoryAllocation");
	assert_string_equal(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
	assert_string_equal(cudaGetErrorString(cudaErrorInvalidDevice), "invalid device ordinal");
	assert_string_equal(cudaGetErrorName(cudaErrorInvalidDeviceFunction),
	                    "cudaErrorInvalidDeviceFunction");
	assert_string_equal(cudaGetErrorName((cudaError_t)12345), "unrecognized error code");
	assert_string_equal(cudaGetErrorString((cudaError_t)12345), "unrecognized error code");
}

static void test_versions_are_runtime_13000_and_the_drivers_own(void **state)
{
	int runtime = 0, driver = 0;

	assert_int_equal(cudaRuntimeGetVersion(&runtime), cudaSuccess);
	assert_int_equal(runtime, 13000);
	assert_int_equal(cudaDriverGetVersion(&driver), cudaSuccess);
	assert_true(driver >= 13000);
	assert_int_equal(cudaRuntimeGetVersion(NULL), cudaErrorInvalidValue);
	assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
}

static void *device_of_new_thread(void *arg)
{
	int *out = arg;
	void *p = NULL;

	out[1] = cudaGetDevice(&out[0]);
	out[2] = cudaMalloc(&p, 4096);
	out[3] = cudaFree(p);
	return NULL;
}

static void test_current_device_is_per_thread_and_binds_a_context(void **state)
{
	int count = 0, device = -1, other[4] = {-1, -1, -1, -1};
	pthread_t thread;

	assert_int_equal(cudaGetDeviceCount(&count), cudaSuccess);
	assert_true(count >= 2);
	assert_int_equal(cudaSetDevice(count), cudaErrorInvalidDevice);
	assert_int_equal(cudaGetLastError(), cudaErrorInvalidDevice);
	assert_int_equal(cudaSetDevice(1), cudaSuccess);
	assert_int_equal(cudaGetDevice(&device), cudaSuccess);
	assert_int_equal(device, 1);

	/* A new thread starts on device 0 and makes its own context current. */
	uint64_t set_current = simgpu_counter("cuCtxSetCurrent");
	assert_int_equal(pthread_create(&thread, NULL, device_of_new_thread, other), 0);
	assert_int_equal(pthread_join(thread, NULL), 0);
	assert_int_equal(other[0], 0);
	assert_int_equal(other[1], cudaSuccess);
	assert_int_equal(other[2], cudaSuccess);
	assert_int_equal(other[3], cudaSuccess);
	assert_int_equal(simgpu_counter("cuCtxSetCurrent"), set_current + 1);

	assert_int_equal(cudaSetDevice(0), cudaSuccess);
	assert_int_equal(cudaGetDevice(&device), cudaSuccess);
	assert_int_equal(device, 0);
}

static void test_device_properties_describe_the_simulated_device(void **state)
{
	struct cudaDeviceProp prop;
	struct simgpu_memory_stats stats;
	int value = 0;

	memset(&prop, 0xff, sizeof(prop));
	assert_int_equal(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
	simgpu_memory_stats(&stats);
	assert_true(strlen(prop.name) > 0 && strlen(prop.name) < sizeof(prop.name));
	assert_int_equal(prop.totalGlobalMem, stats.capacity_bytes);
	assert_int_equal(prop.major, 9);
	assert_int_equal(prop.minor, 0);
	assert_int_equal(prop.warpSize, 32);
	assert_true(prop.multiProcessorCount > 0);
	assert_true(prop.maxThreadsPerBlock >= 1024);
	assert_int_equal(prop.maxThreadsDim[0], prop.maxThreadsPerBlock);
	assert_true(prop.maxGridSize[0] > 65535);
	assert_true(prop.sharedMemPerBlock > 0);
	assert_int_equal(prop.uuid.bytes[0], 0); /* not modelled: zero, not left as garbage */

	assert_int_equal(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, 0),
	                 cudaSuccess);
	assert_int_equal(value, prop.multiProcessorCount);
	assert_int_equal(cudaDeviceGetAttribute(&value, cudaDevAttrComputeCapabilityMajor, 1),
	                 cudaSuccess);
	assert_int_equal(value, prop.major);

	assert_int_equal(cudaGetDeviceProperties(&prop, 4096), cudaErrorInvalidDevice);
	assert_int_equal(cudaDeviceGetAttribute(&value, cudaDevAttrWarpSize, -1),
	                 cudaErrorInvalidDevice);
	assert_int_equal(cudaGetLastError(), cudaErrorInvalidDevice);
}

static void test_null_and_zero_sized_requests_succeed_without_the_driver(void **state)
{
	void *p = &p;
	uint64_t before;

	assert_int_equal(cudaFree(NULL), cudaSuccess); /* once initialised */
	cudaGetLastError();                            /* start clean */
	before = driver_calls();
	assert_int_equal(cudaFree(NULL), cudaSuccess);
	assert_int_equal(cudaFreeHost(NULL), cudaSuccess);
	assert_int_equal(cudaMalloc(&p, 0), cudaSuccess);
	assert_null(p);
	assert_int_equal(driver_calls(), before);
	assert_int_equal(cudaGetLastError(), cudaSuccess);
}

static void test_bad_copy_direction_is_refused_before_the_driver(void **state)
{
	float host[4] = {0}, *dev = NULL;
	uint64_t copies = simgpu_counter("cuMemcpy");

	assert_int_equal(cudaMalloc((void **)&dev, sizeof(host)), cudaSuccess);
	assert_int_equal(cudaMemcpy(dev, host, sizeof(host), (enum cudaMemcpyKind)5),
	                 cudaErrorInvalidMemcpyDirection);
	assert_int_equal(cudaMemcpyAsync(dev, host, sizeof(host), (enum cudaMemcpyKind) - 1, 0),
	                 cudaErrorInvalidMemcpyDirection);
	assert_int_equal(simgpu_counter("cuMemcpy"), copies);
	assert_int_equal(cudaGetLastError(), cudaErrorInvalidMemcpyDirection);
	assert_int_equal(cudaFree(dev), cudaSuccess);
}

static void test_memset_and_pool_allocations_hold_the_bytes_written(void **state)
{
	unsigned char host[256];
	size_t free_before, free_after, total;
	unsigned char *dev = NULL, *pooled = NULL;
	cudaStream_t stream;

	assert_int_equal(cudaMemGetInfo(&free_before, &total), cudaSuccess);
	assert_int_equal(cudaMalloc((void **)&dev, 64 << 20), cudaSuccess);
	assert_int_equal(cudaMemGetInfo(&free_after, &total), cudaSuccess);
	assert_true(free_before - free_after >= (size_t)64 << 20);

	assert_int_equal(cudaMemset(dev, 0x5a, sizeof(host)), cudaSuccess);
	assert_int_equal(cudaMemset_ptds(dev + 128, 0x1c7, 64), cudaSuccess); /* low byte */
	assert_int_equal(cudaMemcpy(host, dev, sizeof(host), cudaMemcpyDeviceToHost), cudaSuccess);
	for (size_t i = 0; i < sizeof(host); i++)
		assert_int_equal(host[i], i >= 128 && i < 192 ? 0xc7 : 0x5a);

	assert_int_equal(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
	assert_int_equal(cudaMallocAsync((void **)&pooled, sizeof(host), stream), cudaSuccess);
	assert_int_equal(cudaMemsetAsync(pooled, 0x33, sizeof(host), stream), cudaSuccess);
	assert_int_equal(
	        cudaMemcpyAsync(host, pooled, sizeof(host), cudaMemcpyDeviceToHost, stream),
	        cudaSuccess);
	assert_int_equal(cudaFreeAsync(pooled, stream), cudaSuccess);
	assert_int_equal(cudaStreamSynchronize(stream), cudaSuccess);
	for (size_t i = 0; i < sizeof(host); i++)
		assert_int_equal(host[i], 0x33);

	assert_int_equal(cudaStreamDestroy(stream), cudaSuccess);
	assert_int_equal(cudaFree(dev), cudaSuccess);
}

/* ---- Streams and events ------------------------------------------------------------------ */

static void test_stream_attributes_round_trip(void **state)
{
	int least = 0, greatest = 0, priority = 1;
	unsigned int flags = 7;
	enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusActive;
	cudaStream_t stream;

	assert_int_equal(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
	assert_true(greatest <= least);
	assert_int_equal(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest),
	                 cudaSuccess);
	assert_int_equal(cudaStreamGetPriority(stream, &priority), cudaSuccess);
	assert_int_equal(priority, greatest);
	assert_int_equal(cudaStreamGetFlags(stream, &flags), cudaSuccess);
	assert_int_equal(flags, cudaStreamNonBlocking);
	assert_int_equal(cudaStreamIsCapturing(stream, &capture), cudaSuccess);
	assert_int_equal(capture, cudaStreamCaptureStatusNone);
	assert_int_equal(cudaStreamDestroy(stream), cudaSuccess);
}

static void test_query_of_a_busy_stream_is_not_ready_and_not_an_error(void **state)
{
	struct axpy_run run;
	cudaStream_t stream;

	assert_int_equal(cudaStreamCreate(&stream), cudaSuccess);
	axpy_prepare(&run, N); /* 128 us of virtual work */
	cudaGetLastError();    /* start clean */
	assert_int_equal(cudaLaunchKernel(axpy, ONE, ONE, run.args, 0, stream), cudaSuccess);
	assert_int_equal(cudaStreamQuery(stream), cudaErrorNotReady);
	assert_int_equal(cudaPeekAtLastError(), cudaSuccess);
	assert_int_equal(cudaStreamSynchronize(stream), cudaSuccess);
	assert_int_equal(cudaStreamQuery(stream), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(stream), cudaSuccess);
	axpy_check_and_free(&run);
}

static void test_elapsed_time_between_events_is_the_kernels_virtual_cost(void **state)
{
	struct axpy_run warm_up, timed;
	cudaEvent_t start, end;
	cudaStream_t stream;
	float ms = -1.0f;
	const float expected = (float)(100000 / 1e6);

	axpy_prepare(&warm_up, N); /* 128 us */
	axpy_prepare(&timed, 100); /* 100 us */
	assert_int_equal(cudaStreamCreate(&stream), cudaSuccess);
	assert_int_equal(cudaEventCreate(&start), cudaSuccess);
	assert_int_equal(cudaEventCreateWithFlags(&end, cudaEventBlockingSync), cudaSuccess);
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);

	/* The warm-up keeps the stream busy, so both records and the timed kernel queue
	 * behind it and the host's own API time does not enter the measurement. */
	assert_int_equal(cudaLaunchKernel(axpy, ONE, ONE, warm_up.args, 0, stream), cudaSuccess);
	assert_int_equal(cudaEventRecord(start, stream), cudaSuccess);
	assert_int_equal(cudaLaunchKernel(axpy, ONE, ONE, timed.args, 0, stream), cudaSuccess);
	assert_int_equal(cudaEventRecord_ptsz(end, stream), cudaSuccess);
	assert_int_equal(cudaEventSynchronize(end), cudaSuccess);
	assert_int_equal(cudaEventQuery(end), cudaSuccess);
	assert_int_equal(cudaEventElapsedTime(&ms, start, end), cudaSuccess);
	print_message("elapsed %.9g ms, expected %.9g ms\n", ms, expected);
	assert_true(ms == expected);

	assert_int_equal(cudaEventDestroy(start), cudaSuccess);
	assert_int_equal(cudaEventDestroy(end), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(stream), cudaSuccess);
	axpy_check_and_free(&timed);
	axpy_free(&warm_up);
}

static void test_waiting_on_an_event_orders_a_copy_after_a_kernel(void **state)
{
	cudaStream_t producer, consumer;
	cudaEvent_t done;
	struct axpy_run run;
	float *pinned = NULL;

	assert_int_equal(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
	assert_int_equal(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
	assert_int_equal(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), cudaSuccess);
	assert_int_equal(cudaMallocHost((void **)&pinned, N * sizeof(float)), cudaSuccess);
	axpy_prepare(&run, N);

	assert_int_equal(cudaLaunchKernel(axpy, ONE, ONE, run.args, 0, producer), cudaSuccess);
	assert_int_equal(cudaEventRecord(done, producer), cudaSuccess);
	assert_int_equal(cudaStreamWaitEvent(consumer, done, 0), cudaSuccess);
	assert_int_equal(
	        cudaMemcpyAsync(pinned, run.y, N * sizeof(float), cudaMemcpyDeviceToHost, consumer),
	        cudaSuccess);
	assert_int_equal(cudaStreamSynchronize(consumer), cudaSuccess);
	for (int i = 0; i < N; i++)
		assert_true(pinned[i] == (float)(5 * i));

	assert_int_equal(cudaFreeHost(pinned), cudaSuccess);
	assert_int_equal(cudaEventDestroy(done), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(producer), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(consumer), cudaSuccess);
	axpy_check_and_free(&run);
}

/* ---- Fresh processes: settings are read at the first CUDA call ---------------------------- */

/*
 * Runs body in a forked child whose environment has name=value before its first CUDA
 * call. The child writes `count` results into results; its stderr goes into err.
 * Needs a parent that has not made a CUDA call yet (see main).
 */
static void run_in_fresh_child(const char *name, const char *value,
                               void (*body)(cudaError_t *results), cudaError_t *results,
                               size_t count, char *err, size_t err_len)
{
	int result_pipe[2], err_pipe[2], status = -1;
	size_t got = 0;
	ssize_t n;

	assert_int_equal(pipe(result_pipe), 0);
	assert_int_equal(pipe(err_pipe), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		cudaError_t out[8] = {cudaSuccess};

		dup2(err_pipe[1], STDERR_FILENO);
		setenv(name, value, 1);
		body(out);
		if (write(result_pipe[1], out, count * sizeof(out[0])) < 0)
			_exit(2);
		_exit(0);
	}
	close(result_pipe[1]);
	close(err_pipe[1]);
	while (got < count * sizeof(results[0]) && (n = read(result_pipe[0], (char *)results + got,
	                                                     count * sizeof(results[0]) - got)) > 0)
		got += (size_t)n;
	n = read(err_pipe[0], err, err_len - 1);
	err[n > 0 ? n : 0] = 0;
	close(result_pipe[0]);
	close(err_pipe[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(got, count * sizeof(results[0]));
}

static void three_mallocs(cudaError_t *out)
{
	void *p[3] = {NULL, NULL, NULL};

	for (int i = 0; i < 3; i++)
		out[i] = cudaMalloc(&p[i], 4096);
	out[3] = cudaGetLastError();
	out[4] = p[1] == NULL ? cudaSuccess : cudaErrorUnknown;
}

static void test_injected_fault_fails_only_the_chosen_call(void **state)
{
	cudaError_t r[5];
	char err[1024];

	run_in_fresh_child("SIMGPU_FAULTS", "cudaMalloc@2=2", three_mallocs, r, 5, err,
	                   sizeof(err));
	assert_int_equal(r[0], cudaSuccess);
	assert_int_equal(r[1], cudaErrorMemoryAllocation);
	assert_int_equal(r[2], cudaSuccess);
	assert_int_equal(r[3], cudaErrorMemoryAllocation); /* a fault is a recorded error */
	assert_int_equal(r[4], cudaSuccess);               /* no pointer on failure */
}

static void calls_after_bad_setting(cudaError_t *out)
{
	void *p = NULL;
	int count = 0;

	out[0] = cudaMalloc(&p, 4096);
	out[1] = cudaFree(NULL);
	out[2] = cudaGetDeviceCount(&count);
	out[3] = cudaGetLastError();
	out[4] = cudaGetLastError();
}

static size_t count_substrings(const char *text, const char *needle)
{
	size_t n = 0;

	for (const char *at = strstr(text, needle); at; at = strstr(at + 1, needle))
		n++;
	return n;
}

static void test_bad_setting_fails_every_call_with_an_initialisation_error(void **state)
{
	cudaError_t r[5];
	char err[4096];

	run_in_fresh_child("SIMGPU_MEM_CAPACITY", "12Q", calls_after_bad_setting, r, 5, err,
	                   sizeof(err));
	assert_int_equal(r[0], cudaErrorInitializationError);
	assert_int_equal(r[1], cudaErrorInitializationError);
	assert_int_equal(r[2], cudaErrorInitializationError);
	assert_int_equal(r[3], cudaErrorInitializationError);
	assert_int_equal(r[4], cudaSuccess);
	assert_non_null(strstr(err, "SIMGPU_MEM_CAPACITY"));
	assert_int_equal(count_substrings(err, "libcudart"), 1); /* reported once */
}

int main(void)
{
	/* These fork children that must make the process's first CUDA call: run them
	 * before anything else touches CUDA. */
	const struct CMUnitTest fresh_process_tests[] = {
	        cmocka_unit_test(test_injected_fault_fails_only_the_chosen_call),
	        cmocka_unit_test(test_bad_setting_fails_every_call_with_an_initialisation_error),
	};
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_runtime_reaches_the_driver_through_cuGetProcAddress_v2),
	        cmocka_unit_test(test_cudaLaunchKernel_computes_axpy),
	        cmocka_unit_test(test_cudaLaunchKernel_ptsz_computes_axpy_on_the_per_thread_stream),
	        cmocka_unit_test(
	                test___cudaLaunchKernel_computes_axpy_with_the_kernel_of___cudaGetKernel),
	        cmocka_unit_test(test_cudaLaunchKernelExC_computes_axpy_with_attributes),
	        cmocka_unit_test(
	                test_cuLaunchKernelEx_from_the_entry_point_computes_axpy_from_a_packed_buffer),
	        cmocka_unit_test(test_unknown_host_function_is_an_invalid_device_function),
	        cmocka_unit_test(test_host_functions_run_once_the_stream_is_synchronised),
	        cmocka_unit_test(test_every_runtime_call_forwards_exactly_one_driver_call),
	        cmocka_unit_test(test_entry_points_honour_stream_flags_and_versions),
	        cmocka_unit_test(test_entry_point_of_an_unknown_symbol_is_null_with_success),
	        cmocka_unit_test(test_last_error_is_kept_until_read_once),
	        cmocka_unit_test(test_last_error_belongs_to_the_thread),
	        cmocka_unit_test(test_error_names_and_strings_match_cuda),
	        cmocka_unit_test(test_versions_are_runtime_13000_and_the_drivers_own),
	        cmocka_unit_test(test_current_device_is_per_thread_and_binds_a_context),
	        cmocka_unit_test(test_device_properties_describe_the_simulated_device),
	        cmocka_unit_test(test_null_and_zero_sized_requests_succeed_without_the_driver),
	        cmocka_unit_test(test_bad_copy_direction_is_refused_before_the_driver),
	        cmocka_unit_test(test_memset_and_pool_allocations_hold_the_bytes_written),
	        cmocka_unit_test(test_stream_attributes_round_trip),
	        cmocka_unit_test(test_query_of_a_busy_stream_is_not_ready_and_not_an_error),
	        cmocka_unit_test(test_elapsed_time_between_events_is_the_kernels_virtual_cost),
	        cmocka_unit_test(test_waiting_on_an_event_orders_a_copy_after_a_kernel),
	};
	int failed = cmocka_run_group_tests_name("simgpu_runtime_fresh_process",
	                                         fresh_process_tests, NULL, NULL);

	return failed + cmocka_run_group_tests_name("simgpu_runtime", tests, register_axpy, NULL);
}
