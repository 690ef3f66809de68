/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A two-rank data-parallel step written against the CUDA runtime and NCCL only (plus
 * simgpu's kernel registration): each rank computes y = a*x + b on its shard, then the
 * ranks all-reduce y on a communication stream joined to the compute stream by events,
 * as PyTorch's process group does. Run on simgpu, every run prints the same bytes:
 * results and virtual times alike.
 *
 *   simgpu_example [RANKS]     (default 2)
 */
#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "simgpu.h"

#define N 4096
#define MAX_RANKS 8

#define CHECK_CUDA(call)                                                              \
	do {                                                                          \
		cudaError_t err_ = (call);                                            \
		if (err_ != cudaSuccess) {                                            \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
			        cudaGetErrorString(err_));                            \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

#define CHECK_NCCL(call)                                                              \
	do {                                                                          \
		ncclResult_t res_ = (call);                                           \
		if (res_ != ncclSuccess) {                                            \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
			        ncclGetErrorString(res_));                            \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

static void axpb_body(const struct simgpu_launch_dims *dims, void **params)
{
	float a = *(float *)params[0], b = *(float *)params[1];
	const float *x = *(const float **)params[2];
	float *y = *(float **)params[3];
	int n = *(int *)params[4];

	for (int i = 0; i < n; i++)
		y[i] = a * x[i] + b;
}

/* As if each element cost 2 FLOPs on a 1 TFLOP/s device, plus a launch floor. */
static uint64_t axpb_cost(const struct simgpu_launch_dims *dims, void **params)
{
	return 3000 + 2 * (uint64_t) * (int *)params[4];
}

static const void *axpb;

static void run_rank(int rank, int ranks, ncclUniqueId id)
{
	cudaStream_t compute, comm;
	cudaEvent_t start, computed, reduced;
	ncclComm_t nccl;
	float *x, *y, host[N];
	float a = 2.0f, b = (float)rank, compute_ms, step_ms;
	int n = N;

	CHECK_CUDA(cudaSetDevice(rank));
	CHECK_NCCL(ncclCommInitRank(&nccl, ranks, id, rank));
	CHECK_CUDA(cudaStreamCreate(&compute));
	CHECK_CUDA(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking));
	CHECK_CUDA(cudaEventCreate(&start));
	CHECK_CUDA(cudaEventCreate(&computed));
	CHECK_CUDA(cudaEventCreate(&reduced));
	CHECK_CUDA(cudaMalloc((void **)&x, sizeof(host)));
	CHECK_CUDA(cudaMalloc((void **)&y, sizeof(host)));
	for (int i = 0; i < N; i++)
		host[i] = (float)(rank * N + i) / N;
	CHECK_CUDA(cudaMemcpy(x, host, sizeof(host), cudaMemcpyHostToDevice));

	void *args[] = {&a, &b, &x, &y, &n};
	CHECK_CUDA(cudaEventRecord(start, compute));
	CHECK_CUDA(
	        cudaLaunchKernel(axpb, (dim3){N / 256, 1, 1}, (dim3){256, 1, 1}, args, 0, compute));
	CHECK_CUDA(cudaEventRecord(computed, compute));
	CHECK_CUDA(cudaStreamWaitEvent(comm, computed, 0));
	CHECK_NCCL(ncclAllReduce(y, y, N, ncclFloat, ncclSum, nccl, comm));
	CHECK_CUDA(cudaEventRecord(reduced, comm));
	CHECK_CUDA(cudaStreamWaitEvent(compute, reduced, 0));
	CHECK_CUDA(cudaMemcpyAsync(host, y, sizeof(host), cudaMemcpyDeviceToHost, compute));
	CHECK_CUDA(cudaStreamSynchronize(compute));
	CHECK_CUDA(cudaEventElapsedTime(&compute_ms, start, computed));
	CHECK_CUDA(cudaEventElapsedTime(&step_ms, start, reduced));

	double checksum = 0;
	for (int i = 0; i < N; i++)
		checksum += host[i] * (double)(i % 7 + 1);
	printf("rank %d: y[0..3] = %.6f %.6f %.6f %.6f, checksum %.6f\n", rank, host[0], host[1],
	       host[2], host[3], checksum);
	printf("rank %d: compute %.6f ms, step %.6f ms, host clock %" PRIu64 " ns\n", rank,
	       compute_ms, step_ms, simgpu_now_ns());

	ncclCommDestroy(nccl);
	cudaFree(x);
	cudaFree(y);
}

int main(int argc, char **argv)
{
	int ranks = argc > 1 ? atoi(argv[1]) : 2;
	int pipes[MAX_RANKS][2];
	pid_t pids[MAX_RANKS];
	ncclUniqueId id;
	int failed = 0;

	if (ranks < 1 || ranks > MAX_RANKS) {
		fprintf(stderr, "usage: %s [RANKS 1..%d]\n", argv[0], MAX_RANKS);
		return 2;
	}
	struct simgpu_kernel_desc desc = {
	        .name = "axpb",
	        .num_params = 5,
	        .param_sizes = {sizeof(float), sizeof(float), sizeof(float *), sizeof(float *),
	                        sizeof(int)},
	        .body = axpb_body,
	        .cost_ns = axpb_cost,
	};
	axpb = simgpu_kernel_register(&desc);
	CHECK_NCCL(ncclGetUniqueId(&id));
	fflush(stdout);

	/* Ranks print into pipes; the launcher prints them in rank order. */
	for (int r = 0; r < ranks; r++) {
		if (pipe(pipes[r]))
			return 1;
		pids[r] = fork();
		if (pids[r] == 0) {
			dup2(pipes[r][1], STDOUT_FILENO);
			run_rank(r, ranks, id);
			/* exit, not _exit: a rank runs its exit handlers (simgpu's, a tool's). */
			exit(0);
		}
		close(pipes[r][1]);
	}
	for (int r = 0; r < ranks; r++) {
		char buf[4096];
		ssize_t got;
		int status;

		while ((got = read(pipes[r][0], buf, sizeof(buf))) > 0)
			fwrite(buf, 1, (size_t)got, stdout);
		close(pipes[r][0]);
		waitpid(pids[r], &status, 0);
		if (!WIFEXITED(status) || WEXITSTATUS(status)) {
			fprintf(stderr, "rank %d failed\n", r);
			failed = 1;
		}
	}
	return failed;
}
