/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small CUDA program for the shim's tests, run under LD_PRELOAD=liblynx.so on simgpu:
 *   probe threads N   8 threads each launch N kernels and make N stream-ordered
 *                     allocations on their own streams, at the same time
 *   probe fork        uses CUDA, forks a child that never does, and goes on using CUDA
 *   probe graph N     captures GRAPH_KERNELS launches into a CUDA graph and launches it
 *                     N times; prints the sum they computed
 * Exits 0 when every call succeeded (and the sum is right).
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "simgpu.h"

#define THREADS 8
#define GRAPH_KERNELS 3

static const void *kernel;
static long per_thread;

static void add_body(const struct simgpu_launch_dims *dims, void **params)
{
	float *x = *(float **)params[0];

	x[0] += *(float *)params[1];
}

static int failed(cudaError_t err, const char *what)
{
	if (err == cudaSuccess)
		return 0;
	fprintf(stderr, "probe: %s: %s\n", what, cudaGetErrorString(err));
	return 1;
}

static void *worker(void *arg)
{
	cudaStream_t stream;
	float *x, one = 1.0f;
	int bad = failed(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");

	bad |= failed(cudaMallocAsync((void **)&x, sizeof(float), stream), "cudaMallocAsync");
	bad |= failed(cudaMemsetAsync(x, 0, sizeof(float), stream), "cudaMemsetAsync");
	for (long i = 0; i < per_thread && !bad; i++) {
		void *args[] = {&x, &one};
		float *scratch;
		bad |= failed(cudaLaunchKernel(kernel, (dim3){1, 1, 1}, (dim3){32, 1, 1}, args, 0,
		                               stream),
		              "cudaLaunchKernel");
		bad |= failed(cudaMallocAsync((void **)&scratch, 256, stream), "cudaMallocAsync");
		bad |= failed(cudaFreeAsync(scratch, stream), "cudaFreeAsync");
	}
	float result = 0;
	bad |= failed(cudaMemcpyAsync(&result, x, sizeof(float), cudaMemcpyDeviceToHost, stream),
	              "cudaMemcpyAsync");
	bad |= failed(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
	if (!bad && result != (float)per_thread) {
		fprintf(stderr, "probe: thread %ld summed %g, want %ld\n", (long)(intptr_t)arg,
		        result, per_thread);
		bad = 1;
	}
	cudaFreeAsync(x, stream);
	cudaStreamSynchronize(stream);
	cudaStreamDestroy(stream);
	return (void *)(intptr_t)bad;
}

static int run_threads(void)
{
	pthread_t threads[THREADS];
	int bad = 0;

	for (long t = 0; t < THREADS; t++)
		pthread_create(&threads[t], NULL, worker, (void *)(intptr_t)t);
	for (int t = 0; t < THREADS; t++) {
		void *result;
		pthread_join(threads[t], &result);
		bad |= (int)(intptr_t)result;
	}
	return bad;
}

static int run_fork(void)
{
	void *p;
	int status;

	if (failed(cudaMalloc(&p, 4096), "cudaMalloc"))
		return 1;
	pid_t pid = fork();
	if (pid == 0)
		exit(getpid() > 0 ? 0 : 1); /* a child that never touches CUDA */
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		return 1;
	return failed(cudaFree(p), "cudaFree") | failed(cudaDeviceSynchronize(), "sync");
}

static int expect_capture_status(cudaStream_t stream, enum cudaStreamCaptureStatus want)
{
	enum cudaStreamCaptureStatus status;

	if (failed(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing"))
		return 1;
	if (status == want)
		return 0;
	fprintf(stderr, "probe: capture status %d, want %d\n", (int)status, (int)want);
	return 1;
}

/* One capture of GRAPH_KERNELS additions of 1 to x, replayed `launches` times. */
static int run_graph(long launches)
{
	cudaStream_t stream;
	cudaGraph_t graph = NULL;
	cudaGraphExec_t exec = NULL;
	float *x, one = 1.0f, sum = 0;
	int bad = failed(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");

	bad |= failed(cudaMalloc((void **)&x, sizeof(float)), "cudaMalloc");
	bad |= failed(cudaMemsetAsync(x, 0, sizeof(float), stream), "cudaMemsetAsync");
	bad |= expect_capture_status(stream, cudaStreamCaptureStatusNone);
	bad |= failed(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal),
	              "cudaStreamBeginCapture");
	bad |= expect_capture_status(stream, cudaStreamCaptureStatusActive);
	for (int i = 0; i < GRAPH_KERNELS && !bad; i++) {
		void *args[] = {&x, &one};
		bad |= failed(cudaLaunchKernel(kernel, (dim3){1, 1, 1}, (dim3){32, 1, 1}, args, 0,
		                               stream),
		              "cudaLaunchKernel");
	}
	bad |= failed(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
	if (bad)
		return 1;
	bad |= failed(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
	for (long i = 0; i < launches && !bad; i++)
		bad |= failed(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
	bad |= failed(cudaMemcpyAsync(&sum, x, sizeof(float), cudaMemcpyDeviceToHost, stream),
	              "cudaMemcpyAsync");
	bad |= failed(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
	if (!bad && sum != (float)(GRAPH_KERNELS * launches)) {
		fprintf(stderr, "probe: the graph summed %g, want %ld\n", sum,
		        GRAPH_KERNELS * launches);
		bad = 1;
	}
	bad |= failed(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
	bad |= failed(cudaGraphDestroy(graph), "cudaGraphDestroy");
	bad |= failed(cudaFree(x), "cudaFree");
	bad |= failed(cudaStreamDestroy(stream), "cudaStreamDestroy");
	if (!bad)
		printf("probe graph: %d kernels x %ld launches = %g\n", GRAPH_KERNELS, launches,
		       sum);
	return bad;
}

int main(int argc, char **argv)
{
	struct simgpu_kernel_desc desc = {
	        .name = "probe_add",
	        .num_params = 2,
	        .param_sizes = {sizeof(float *), sizeof(float)},
	        .body = add_body,
	};

	kernel = simgpu_kernel_register(&desc);
	if (argc == 3 && !strcmp(argv[1], "threads")) {
		per_thread = atol(argv[2]);
		return run_threads();
	}
	if (argc == 2 && !strcmp(argv[1], "fork"))
		return run_fork();
	if (argc == 3 && !strcmp(argv[1], "graph"))
		return run_graph(atol(argv[2]));
	fprintf(stderr, "usage: probe threads N | probe fork | probe graph N\n");
	return 2;
}
