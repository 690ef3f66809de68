/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The calls `make bench` counts instructions of: N launches (cuLaunchKernel) or N
 * stream-ordered allocations (cuMemAllocAsync), through the driver API, on simgpu.
 *   bench_calls launch|alloc N
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "simgpu.h"

static void noop_body(const struct simgpu_launch_dims *dims, void **params)
{
}

static int check(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS) {
		fprintf(stderr, "bench_calls: %s failed: %d\n", what, (int)r);
		exit(1);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct simgpu_kernel_desc desc = {
	        .name = "bench_noop",
	        .num_params = 3,
	        .param_sizes = {sizeof(void *), sizeof(int), sizeof(float)},
	        .body = noop_body,
	};
	CUdevice dev;
	CUcontext ctx;
	CUstream stream;
	long n = argc > 2 ? atol(argv[2]) : 0;

	if (argc != 3 || n <= 0 || (strcmp(argv[1], "launch") && strcmp(argv[1], "alloc"))) {
		fprintf(stderr, "usage: bench_calls launch|alloc N\n");
		return 2;
	}
	CUfunction f = (CUfunction)simgpu_kernel_register(&desc);
	check(cuInit(0), "cuInit");
	check(cuDeviceGet(&dev, 0), "cuDeviceGet");
	check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	if (!strcmp(argv[1], "launch")) {
		void *ptr = NULL;
		int count = 1;
		float scale = 2.0f;
		void *params[] = {&ptr, &count, &scale};
		for (long i = 0; i < n; i++)
			check(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL),
			      "cuLaunchKernel");
	} else {
		for (long i = 0; i < n; i++) {
			CUdeviceptr p;
			check(cuMemAllocAsync(&p, 4096, stream), "cuMemAllocAsync");
		}
	}
	return 0;
}
