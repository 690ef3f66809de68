/* SPDX-License-Identifier: Apache-2.0 */
/* tinytrain's kernel registration and launch wrappers, generated from the kernel table. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"
#include "kernels_table.h"
#include "launch.h"
#include "simgpu.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define THREADS_PER_BLOCK 256

/* Size and alignment of one kernel parameter, as CUDA packs it. */
struct param_layout {
	size_t size, align;
};

#define P(type) {sizeof(type), _Alignof(type)},

/* name_params[]: the layout of each kernel's parameters, virtual cost last. */
#define DEFINE_LAYOUT(name, parameters)                                                     \
	static const struct param_layout name##_params[] = {parameters P(struct tt_vcost)}; \
	_Static_assert(ARRAY_SIZE(name##_params) <= SIMGPU_MAX_PARAMS,                      \
	               #name " has too many parameters");
TT_KERNELS(DEFINE_LAYOUT)
#undef DEFINE_LAYOUT

/* name_target: the host stub simgpu returned (what cudaLaunchKernel takes) and, for the
 * driver APIs, its CUfunction. */
#define DEFINE_TARGET(name, parameters) static struct tt_launch_target name##_target;
TT_KERNELS(DEFINE_TARGET)
#undef DEFINE_TARGET

/* A wrapper's argument array has one entry per parameter of its kernel. */
#define CHECK_ARGS(name, args)                                        \
	_Static_assert(ARRAY_SIZE(args) == ARRAY_SIZE(name##_params), \
	               #name ": argument count differs from the kernel table")

/* ---- Virtual cost ----------------------------------------------------------------------- */

/* The one cost function: the caller's virtual cost, parameter `last` of every kernel. */
static uint64_t vcost_ns(void **params, size_t last)
{
	return tt_cost_ns(TT_ARG(params, last, struct tt_vcost));
}

/* simgpu's cost callback is not told how many parameters its kernel has, so each kernel gets
 * a one-line callback that names the index of its last parameter. */
#define DEFINE_COST(name, parameters)                                                     \
	static uint64_t name##_cost(const struct simgpu_launch_dims *dims, void **params) \
	{                                                                                 \
		return vcost_ns(params, ARRAY_SIZE(name##_params) - 1);                   \
	}
TT_KERNELS(DEFINE_COST)
#undef DEFINE_COST

/* ---- Registration ----------------------------------------------------------------------- */

static int register_kernel(const void **stub, const char *name, const struct param_layout *layout,
                           unsigned int num_params,
                           void (*body)(const struct simgpu_launch_dims *, void **),
                           uint64_t (*cost)(const struct simgpu_launch_dims *, void **))
{
	struct simgpu_kernel_desc desc = {
	        .name = name,
	        .num_params = num_params,
	        .body = body,
	        .cost_ns = cost,
	};

	for (unsigned int i = 0; i < num_params; i++) {
		desc.param_sizes[i] = layout[i].size;
		desc.param_aligns[i] = layout[i].align;
	}
	/* Idempotent: a second call keeps the stubs the first one got. */
	if (!*stub)
		*stub = simgpu_kernel_register(&desc);
	return *stub ? 0 : -1;
}

int tt_kernels_register(void)
{
	int err = 0;

#define REGISTER(name, parameters)                                        \
	err |= register_kernel(&name##_target.stub, #name, name##_params, \
	                       ARRAY_SIZE(name##_params), name##_body, name##_cost);
	TT_KERNELS(REGISTER)
#undef REGISTER
	return err ? -1 : 0;
}

/* ---- Launch APIs and wrappers ---------------------------------------------------------- */

/* Set once per process by tt_kernels_use_launch, before the backward thread starts (its
 * creation orders the writes before its reads). */
static enum tt_launch_api gemm_api = TT_LAUNCH_API_RUNTIME, other_api = TT_LAUNCH_API_RUNTIME;
static atomic_uint_fast64_t launches;

static bool is_driver_api(enum tt_launch_api api)
{
	return api == TT_LAUNCH_API_DRIVER || api == TT_LAUNCH_API_DRIVER_EX;
}

/* Every kernel's CUfunction, once, as cuBLASLt and Triton load theirs up front. */
static int resolve_functions(void)
{
	int err = 0;

#define RESOLVE(name, parameters) err |= tt_launch_resolve(&name##_target, #name);
	TT_KERNELS(RESOLVE)
#undef RESOLVE
	return err ? -1 : 0;
}

int tt_kernels_use_launch(enum tt_launch_api gemm, enum tt_launch_api other)
{
	if (tt_launch_prepare(gemm) || tt_launch_prepare(other))
		return -1;
	if ((is_driver_api(gemm) || is_driver_api(other)) && resolve_functions())
		return -1;
	gemm_api = gemm;
	other_api = other;
	return 0;
}

/* Set once by tt_kernels_use_modules, before the other threads start. */
static int loaded_modules;
static _Thread_local int current_module = -1;

int tt_kernels_use_modules(int modules)
{
	static const char *const names[] = {
#define NAME(name, parameters) #name,
	        TT_KERNELS(NAME)
#undef NAME
	};
	static const char image[] =
#define LINE(name, parameters) #name "\n"
	        TT_KERNELS(LINE)
#undef LINE
	        ;
	struct tt_launch_target *targets[] = {
#define TARGET(name, parameters) &name##_target,
	        TT_KERNELS(TARGET)
#undef TARGET
	};
	CUfunction functions[ARRAY_SIZE(names)];

	for (size_t k = 0; k < ARRAY_SIZE(targets); k++) {
		targets[k]->in_module = calloc((size_t)modules, sizeof(CUfunction));
		if (!targets[k]->in_module) {
			fprintf(stderr, "tinytrain: out of memory for %d kernel modules\n",
			        modules);
			return -1;
		}
	}
	for (int m = 0; m < modules; m++) {
		if (tt_launch_load_module(image, names, ARRAY_SIZE(names), functions))
			return -1;
		for (size_t k = 0; k < ARRAY_SIZE(targets); k++)
			targets[k]->in_module[m] = functions[k];
	}
	loaded_modules = modules;
	return 0;
}

void tt_kernels_enter_module(int module)
{
	current_module = module < loaded_modules ? module : -1;
}

uint64_t tt_kernels_launch_count(void)
{
	return atomic_load_explicit(&launches, memory_order_relaxed);
}

/* A 1-D launch of one thread per unit of work, at least one block, through api: the body
 * does all of it, the geometry only makes traces look like a real launch. */
static cudaError_t launch_with(enum tt_launch_api api, const struct tt_launch_target *target,
                               int64_t work, void **args, cudaStream_t stream)
{
	int64_t blocks = (work + THREADS_PER_BLOCK - 1) / THREADS_PER_BLOCK;
	struct tt_launch_target module_target;
	cudaError_t err;

	if (blocks < 1)
		blocks = 1;
	if (blocks > INT32_MAX)
		blocks = INT32_MAX;
	if (current_module >= 0 && is_driver_api(api)) {
		module_target = *target;
		module_target.function = target->in_module[current_module];
		target = &module_target;
	}
	err = tt_launch(api, target, (dim3){(unsigned int)blocks, 1, 1},
	                (dim3){THREADS_PER_BLOCK, 1, 1}, args, stream);
	if (err == cudaSuccess)
		atomic_fetch_add_explicit(&launches, 1, memory_order_relaxed);
	return err;
}

/* Every kernel but the GEMM. */
static cudaError_t launch(const struct tt_launch_target *target, int64_t work, void **args,
                          cudaStream_t stream)
{
	return launch_with(other_api, target, work, args, stream);
}

cudaError_t tt_gemm(cudaStream_t stream, const struct tt_gemm *g, struct tt_vcost cost)
{
	struct tt_gemm p;

	if (!g || g->batch < 0 || g->m < 0 || g->n < 0 || g->k < 0)
		return cudaErrorInvalidValue;
	p = *g;
	void *args[] = {&p.trans_a, &p.trans_b,  &p.batch,     &p.m,        &p.n, &p.k,
	                &p.a,       &p.stride_a, &p.b,         &p.stride_b, &p.c, &p.stride_c,
	                &p.alpha,   &p.beta,     &p.workspace, &cost};
	CHECK_ARGS(tt_gemm, args);
	return launch_with(gemm_api, &tt_gemm_target, (int64_t)p.batch * p.m * p.n, args, stream);
}

cudaError_t tt_layernorm_fwd(cudaStream_t stream, struct tt_layernorm_args a, struct tt_vcost cost)
{
	void *args[] = {&a, &cost};
	CHECK_ARGS(tt_layernorm_fwd, args);

	if (a.rows < 0 || a.cols < 1)
		return cudaErrorInvalidValue;
	return launch(&tt_layernorm_fwd_target, a.rows, args, stream);
}

cudaError_t tt_layernorm_fwd_flat(cudaStream_t stream, const float *x, float *y, const float *gamma,
                                  const float *beta, float *mean, float *rstd, int rows, int cols,
                                  struct tt_vcost cost)
{
	void *args[] = {&x, &y, &gamma, &beta, &mean, &rstd, &rows, &cols, &cost};
	CHECK_ARGS(tt_layernorm_fwd_flat, args);

	if (rows < 0 || cols < 1)
		return cudaErrorInvalidValue;
	return launch(&tt_layernorm_fwd_flat_target, rows, args, stream);
}

cudaError_t tt_layernorm_bwd(cudaStream_t stream, struct tt_layernorm_grad_args a,
                             struct tt_vcost cost)
{
	void *args[] = {&a, &cost};
	CHECK_ARGS(tt_layernorm_bwd, args);

	if (a.rows < 0 || a.cols < 1)
		return cudaErrorInvalidValue;
	return launch(&tt_layernorm_bwd_target, a.rows, args, stream);
}

cudaError_t tt_embedding_fwd(cudaStream_t stream, const int *tokens, float *const *table_ref,
                             float *out, int tokens_n, int hidden, struct tt_vcost cost)
{
	void *args[] = {&tokens, &table_ref, &out, &tokens_n, &hidden, &cost};
	CHECK_ARGS(tt_embedding_fwd, args);

	if (tokens_n < 0 || hidden < 0)
		return cudaErrorInvalidValue;
	return launch(&tt_embedding_fwd_target, (int64_t)tokens_n * hidden, args, stream);
}

cudaError_t tt_embedding_fwd_direct(cudaStream_t stream, const int *tokens, const float *table,
                                    float *out, int tokens_n, int hidden, struct tt_vcost cost)
{
	void *args[] = {&tokens, &table, &out, &tokens_n, &hidden, &cost};
	CHECK_ARGS(tt_embedding_fwd_direct, args);

	if (tokens_n < 0 || hidden < 0)
		return cudaErrorInvalidValue;
	return launch(&tt_embedding_fwd_direct_target, (int64_t)tokens_n * hidden, args, stream);
}

cudaError_t tt_embedding_bwd(cudaStream_t stream, const int *tokens, const float *dout,
                             float *dtable, int tokens_n, int hidden, struct tt_vcost cost)
{
	void *args[] = {&tokens, &dout, &dtable, &tokens_n, &hidden, &cost};
	CHECK_ARGS(tt_embedding_bwd, args);

	if (tokens_n < 0 || hidden < 0)
		return cudaErrorInvalidValue;
	return launch(&tt_embedding_bwd_target, (int64_t)tokens_n * hidden, args, stream);
}

cudaError_t tt_softmax_fwd(cudaStream_t stream, const float *x, float *y, int rows, int cols,
                           int causal, struct tt_vcost cost)
{
	void *args[] = {&x, &y, &rows, &cols, &causal, &cost};
	CHECK_ARGS(tt_softmax_fwd, args);

	if (rows < 0 || cols < 1)
		return cudaErrorInvalidValue;
	return launch(&tt_softmax_fwd_target, (int64_t)rows * cols, args, stream);
}

cudaError_t tt_softmax_bwd(cudaStream_t stream, const float *y, const float *dy, float *dx,
                           int rows, int cols, struct tt_vcost cost)
{
	void *args[] = {&y, &dy, &dx, &rows, &cols, &cost};
	CHECK_ARGS(tt_softmax_bwd, args);

	if (rows < 0 || cols < 1)
		return cudaErrorInvalidValue;
	return launch(&tt_softmax_bwd_target, (int64_t)rows * cols, args, stream);
}

cudaError_t tt_dropout_fwd(cudaStream_t stream, const float *x, float *y, uint8_t *mask, int64_t n,
                           float p, uint64_t seed, uint64_t offset, struct tt_vcost cost)
{
	void *args[] = {&x, &y, &mask, &n, &p, &seed, &offset, &cost};
	CHECK_ARGS(tt_dropout_fwd, args);

	if (n < 0 || !(p >= 0.0f && p < 1.0f))
		return cudaErrorInvalidValue;
	return launch(&tt_dropout_fwd_target, n, args, stream);
}

cudaError_t tt_dropout_bwd(cudaStream_t stream, const float *dy, const uint8_t *mask, float *dx,
                           int64_t n, float p, struct tt_vcost cost)
{
	void *args[] = {&dy, &mask, &dx, &n, &p, &cost};
	CHECK_ARGS(tt_dropout_bwd, args);

	if (n < 0 || !(p >= 0.0f && p < 1.0f))
		return cudaErrorInvalidValue;
	return launch(&tt_dropout_bwd_target, n, args, stream);
}

cudaError_t tt_gelu_fwd(cudaStream_t stream, const float *x, float *y, int64_t n,
                        struct tt_vcost cost)
{
	void *args[] = {&x, &y, &n, &cost};
	CHECK_ARGS(tt_gelu_fwd, args);

	if (n < 0)
		return cudaErrorInvalidValue;
	return launch(&tt_gelu_fwd_target, n, args, stream);
}

cudaError_t tt_gelu_bwd(cudaStream_t stream, const float *x, const float *dy, float *dx, int64_t n,
                        struct tt_vcost cost)
{
	void *args[] = {&x, &dy, &dx, &n, &cost};
	CHECK_ARGS(tt_gelu_bwd, args);

	if (n < 0)
		return cudaErrorInvalidValue;
	return launch(&tt_gelu_bwd_target, n, args, stream);
}

cudaError_t tt_axpy(cudaStream_t stream, float alpha, const float *x, float *y, int64_t n,
                    struct tt_vcost cost)
{
	void *args[] = {&alpha, &x, &y, &n, &cost};
	CHECK_ARGS(tt_axpy, args);

	if (n < 0)
		return cudaErrorInvalidValue;
	return launch(&tt_axpy_target, n, args, stream);
}

static int heads_valid(struct tt_heads s)
{
	return s.batch >= 0 && s.seq >= 0 && s.heads >= 0 && s.d >= 0;
}

static int64_t heads_elems(struct tt_heads s)
{
	return (int64_t)s.batch * s.seq * s.heads * s.d;
}

cudaError_t tt_split_qkv(cudaStream_t stream, struct tt_heads shape, const float *qkv, float *q,
                         float *k, float *v, struct tt_vcost cost)
{
	void *args[] = {&shape, &qkv, &q, &k, &v, &cost};
	CHECK_ARGS(tt_split_qkv, args);

	if (!heads_valid(shape))
		return cudaErrorInvalidValue;
	return launch(&tt_split_qkv_target, 3 * heads_elems(shape), args, stream);
}

cudaError_t tt_join_qkv_grad(cudaStream_t stream, struct tt_heads shape, const float *dq,
                             const float *dk, const float *dv, float *dqkv, struct tt_vcost cost)
{
	void *args[] = {&shape, &dq, &dk, &dv, &dqkv, &cost};
	CHECK_ARGS(tt_join_qkv_grad, args);

	if (!heads_valid(shape))
		return cudaErrorInvalidValue;
	return launch(&tt_join_qkv_grad_target, 3 * heads_elems(shape), args, stream);
}

cudaError_t tt_merge_heads(cudaStream_t stream, struct tt_heads shape, const float *ctx, float *out,
                           struct tt_vcost cost)
{
	void *args[] = {&shape, &ctx, &out, &cost};
	CHECK_ARGS(tt_merge_heads, args);

	if (!heads_valid(shape))
		return cudaErrorInvalidValue;
	return launch(&tt_merge_heads_target, heads_elems(shape), args, stream);
}

cudaError_t tt_split_merged_grad(cudaStream_t stream, struct tt_heads shape, const float *dout,
                                 float *dctx, struct tt_vcost cost)
{
	void *args[] = {&shape, &dout, &dctx, &cost};
	CHECK_ARGS(tt_split_merged_grad, args);

	if (!heads_valid(shape))
		return cudaErrorInvalidValue;
	return launch(&tt_split_merged_grad_target, heads_elems(shape), args, stream);
}

cudaError_t tt_cross_entropy(cudaStream_t stream, const float *logits, const int *targets,
                             float *losses, float *dlogits, int rows, int vocab, float grad_scale,
                             struct tt_vcost cost)
{
	void *args[] = {&logits, &targets, &losses, &dlogits, &rows, &vocab, &grad_scale, &cost};
	CHECK_ARGS(tt_cross_entropy, args);

	if (rows < 0 || vocab < 1)
		return cudaErrorInvalidValue;
	return launch(&tt_cross_entropy_target, (int64_t)rows * vocab, args, stream);
}

cudaError_t tt_sum(cudaStream_t stream, const float *x, float *out, int n, int accumulate,
                   struct tt_vcost cost)
{
	void *args[] = {&x, &out, &n, &accumulate, &cost};
	CHECK_ARGS(tt_sum, args);

	if (n < 0)
		return cudaErrorInvalidValue;
	return launch(&tt_sum_target, n, args, stream);
}

cudaError_t tt_scale(cudaStream_t stream, const float *x, float *y, float alpha, int64_t n,
                     struct tt_vcost cost)
{
	void *args[] = {&x, &y, &alpha, &n, &cost};
	CHECK_ARGS(tt_scale, args);

	if (n < 0)
		return cudaErrorInvalidValue;
	return launch(&tt_scale_target, n, args, stream);
}

cudaError_t tt_fill(cudaStream_t stream, void *ptr, int64_t bytes, int value, struct tt_vcost cost)
{
	void *args[] = {&ptr, &bytes, &value, &cost};
	CHECK_ARGS(tt_fill, args);

	if (bytes < 0)
		return cudaErrorInvalidValue;
	return launch(&tt_fill_target, bytes, args, stream);
}

cudaError_t tt_adam(cudaStream_t stream, float *param, const float *grad, float *m, float *v,
                    int64_t n, struct tt_adam hyper, struct tt_vcost cost)
{
	void *args[] = {&param, &grad, &m, &v, &n, &hyper, &cost};
	CHECK_ARGS(tt_adam, args);

	if (n < 0 || (hyper.step ? hyper.t != 0 : hyper.t < 1))
		return cudaErrorInvalidValue;
	return launch(&tt_adam_target, n, args, stream);
}
