/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Kernels shared by simgpu's tests, each with an explicit virtual cost so that tests can
 * compute expected times by hand:
 *   fill(ns, out, value, n):      out[0..n) = value
 *   copy(ns, src, dst, n):        dst[0..n) = src[0..n)
 * Include once per test binary; call test_kernels_register() before the first launch.
 */
#ifndef SIMGPU_TEST_KERNELS_H
#define SIMGPU_TEST_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "simgpu.h"

static const void *fill_kernel, *copy_kernel;

static void fill_body(const struct simgpu_launch_dims *dims, void **params)
{
	float *out = *(float **)params[1];
	float value = *(float *)params[2];
	int n = *(int *)params[3];

	for (int i = 0; i < n; i++)
		out[i] = value;
}

static void copy_body(const struct simgpu_launch_dims *dims, void **params)
{
	const float *src = *(const float **)params[1];
	float *dst = *(float **)params[2];
	int n = *(int *)params[3];

	for (int i = 0; i < n; i++)
		dst[i] = src[i];
}

/* Both kernels take their virtual duration as parameter 0. */
static uint64_t cost_from_param(const struct simgpu_launch_dims *dims, void **params)
{
	return *(uint64_t *)params[0];
}

static inline void test_kernels_register(void)
{
	struct simgpu_kernel_desc fill = {
	        .name = "fill",
	        .num_params = 4,
	        .param_sizes = {sizeof(uint64_t), sizeof(float *), sizeof(float), sizeof(int)},
	        .body = fill_body,
	        .cost_ns = cost_from_param,
	};
	struct simgpu_kernel_desc copy = {
	        .name = "copy",
	        .num_params = 4,
	        .param_sizes = {sizeof(uint64_t), sizeof(float *), sizeof(float *), sizeof(int)},
	        .body = copy_body,
	        .cost_ns = cost_from_param,
	};

	if (!fill_kernel)
		fill_kernel = simgpu_kernel_register(&fill);
	if (!copy_kernel)
		copy_kernel = simgpu_kernel_register(&copy);
}

static inline cudaError_t launch_fill(cudaStream_t stream, uint64_t ns, float *out, float value,
                                      int n)
{
	void *args[] = {&ns, &out, &value, &n};

	return cudaLaunchKernel(fill_kernel, (dim3){1, 1, 1}, (dim3){1, 1, 1}, args, 0, stream);
}

static inline cudaError_t launch_copy(cudaStream_t stream, uint64_t ns, const float *src,
                                      float *dst, int n)
{
	void *args[] = {&ns, &src, &dst, &n};

	return cudaLaunchKernel(copy_kernel, (dim3){1, 1, 1}, (dim3){1, 1, 1}, args, 0, stream);
}

#endif /* SIMGPU_TEST_KERNELS_H */
