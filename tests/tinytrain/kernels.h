/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tinytrain's kernels: simgpu kernels with real float32 arithmetic on small real
 * dimensions, and a virtual cost given by the caller (the cost of the same op on the
 * virtual model, see cost.h). Each launch wrapper enqueues exactly one kernel on the
 * given stream, through the launch API chosen with tt_kernels_use_launch (cudaLaunchKernel
 * by default), and returns its result.
 *
 * Layouts are row-major. Every kernel is deterministic: the same inputs give the same
 * bits, which the recompute baselines and Lynx's replay rely on.
 *
 * Deliberate hazards that a real trainer has (see hazards.def) live here:
 *  - every GEMM stages its result in one shared workspace before writing C;
 *  - dropout takes its seed and offset by value;
 *  - layer norm takes its tensor pointers inside a by-value struct;
 *  - the embedding reads its table pointer from device memory.
 * Thread safety: register once before forking ranks; launches from any thread.
 */
#ifndef TINYTRAIN_KERNELS_H
#define TINYTRAIN_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "cost.h"

/* Registers every kernel with simgpu. Returns 0, or -1 if simgpu refused one. */
int tt_kernels_register(void);

/*
 * CUDA's kernel launch APIs: X(id, name in messages). The driver APIs take a CUfunction,
 * found with cudaGetFuncBySymbol, and are reached through cudaGetDriverEntryPointByVersion,
 * as PyTorch and Triton reach them (tinytrain does not link libcuda).
 */
#define TT_LAUNCH_APIS(X)                    \
	X(RUNTIME, "cudaLaunchKernel")       \
	X(RUNTIME_EX, "cudaLaunchKernelExC") \
	X(DRIVER, "cuLaunchKernel")          \
	X(DRIVER_EX, "cuLaunchKernelEx")

enum tt_launch_api {
#define TT_LAUNCH_API_ENUM(id, name) TT_LAUNCH_API_##id,
	TT_LAUNCH_APIS(TT_LAUNCH_API_ENUM)
#undef TT_LAUNCH_API_ENUM
	        TT_LAUNCH_API_COUNT
};

/*
 * Makes the GEMM (tt_gemm) go through gemm_api and every other kernel through other_api
 * from now on; cudaLaunchKernel for both until called. Needs the current device set
 * (the driver paths resolve each kernel's CUfunction), and must come before any launch
 * of the process's other threads. Returns 0, or -1 after printing why to stderr.
 */
int tt_kernels_use_launch(enum tt_launch_api gemm_api, enum tt_launch_api other_api);

/*
 * Loads `modules` modules that each hold every kernel (cuModuleLoadData), as torch.compile
 * under DDP loads the Triton kernels of each graph piece from a module of its own: the same
 * kernels, by name, through other CUfunctions. From then on a driver API launch made between
 * tt_kernels_enter_module(m) and tt_kernels_enter_module(-1) on the same thread goes through
 * module m's function. After tt_kernels_use_launch; returns 0, or -1 after printing why.
 */
int tt_kernels_use_modules(int modules);

/* This thread's launches go through module m's functions from now on; -1 (or a module not
 * loaded): through the kernels' own. */
void tt_kernels_enter_module(int module);

/* Kernels this process has launched successfully, counted by the launch wrappers (any
 * thread): the ground truth for a profiler's launch count. */
uint64_t tt_kernels_launch_count(void);

/*
 * C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b] for b in [0, batch), where op(X) is X
 * or its transpose (trans_a/trans_b), op(A) is M x K, op(B) is K x N, C is M x N, and
 * A[b] = A + b * stride_a (likewise B, C), in elements. beta is 0 (overwrite) or 1
 * (accumulate). The result is computed into `workspace` (at least batch*M*N floats),
 * then copied to C: the shared-workspace hazard. With workspace == NULL it writes C
 * directly (hazard switched off).
 */
struct tt_gemm {
	int trans_a, trans_b;
	int batch, m, n, k;
	const float *a;
	int64_t stride_a;
	const float *b;
	int64_t stride_b;
	float *c;
	int64_t stride_c;
	float alpha, beta;
	float *workspace;
};
cudaError_t tt_gemm(cudaStream_t stream, const struct tt_gemm *g, struct tt_vcost cost);

/* Layer norm over the last dimension (cols), eps 1e-5. The pointers travel inside the
 * by-value struct: the "pointers in a by-value parameter struct" hazard. The _flat form
 * takes the same pointers as separate parameters (hazard switched off). */
struct tt_layernorm_args {
	const float *x;
	float *y;
	const float *gamma, *beta;
	float *mean, *rstd; /* rows each, written by forward, read by backward */
	int rows, cols;
};
cudaError_t tt_layernorm_fwd(cudaStream_t stream, struct tt_layernorm_args args,
                             struct tt_vcost cost);
cudaError_t tt_layernorm_fwd_flat(cudaStream_t stream, const float *x, float *y, const float *gamma,
                                  const float *beta, float *mean, float *rstd, int rows, int cols,
                                  struct tt_vcost cost);
/* dx = (accumulate ? dx : 0) + d/dx; dgamma, dbeta accumulate (+=). */
struct tt_layernorm_grad_args {
	const float *x, *dy, *gamma, *mean, *rstd;
	float *dx, *dgamma, *dbeta;
	int rows, cols, accumulate;
};
cudaError_t tt_layernorm_bwd(cudaStream_t stream, struct tt_layernorm_grad_args args,
                             struct tt_vcost cost);

/* out[t] = table[tokens[t]] for t < tokens_n; table_ref points to device memory that holds
 * the table pointer (read at run time: the "pointer in device memory" hazard). */
cudaError_t tt_embedding_fwd(cudaStream_t stream, const int *tokens, float *const *table_ref,
                             float *out, int tokens_n, int hidden, struct tt_vcost cost);
/* The same with the table pointer as a parameter (hazard switched off). */
cudaError_t tt_embedding_fwd_direct(cudaStream_t stream, const int *tokens, const float *table,
                                    float *out, int tokens_n, int hidden, struct tt_vcost cost);
/* dtable[tokens[t]] += dout[t], in token order (deterministic). */
cudaError_t tt_embedding_bwd(cudaStream_t stream, const int *tokens, const float *dout,
                             float *dtable, int tokens_n, int hidden, struct tt_vcost cost);

/* Row-wise softmax of x (rows x cols) into y. With causal != 0, rows are grouped by
 * `cols` (each row r is query r % cols of an s x s block) and entries j > r % cols are 0. */
cudaError_t tt_softmax_fwd(cudaStream_t stream, const float *x, float *y, int rows, int cols,
                           int causal, struct tt_vcost cost);
/* dx = y * (dy - sum(dy * y)) row-wise. */
cudaError_t tt_softmax_bwd(cudaStream_t stream, const float *y, const float *dy, float *dx,
                           int rows, int cols, struct tt_vcost cost);

/*
 * Dropout with probability p: mask[i] = keep(seed, offset + i) (1 kept, 0 dropped), from a
 * counter-based hash, so the same (seed, offset) gives the same mask; y = x * mask / (1-p).
 * seed and offset are passed by value. With p == 0, mask is all ones and y = x. y may equal
 * x (in place).
 */
cudaError_t tt_dropout_fwd(cudaStream_t stream, const float *x, float *y, uint8_t *mask, int64_t n,
                           float p, uint64_t seed, uint64_t offset, struct tt_vcost cost);
/* dx = dy * mask / (1-p). dx may equal dy (in place). */
cudaError_t tt_dropout_bwd(cudaStream_t stream, const float *dy, const uint8_t *mask, float *dx,
                           int64_t n, float p, struct tt_vcost cost);

/* y = gelu(x) (tanh approximation); dx = dy * gelu'(x). */
cudaError_t tt_gelu_fwd(cudaStream_t stream, const float *x, float *y, int64_t n,
                        struct tt_vcost cost);
cudaError_t tt_gelu_bwd(cudaStream_t stream, const float *x, const float *dy, float *dx, int64_t n,
                        struct tt_vcost cost);

/* y += alpha * x, in place (the residual add and gradient accumulation). */
cudaError_t tt_axpy(cudaStream_t stream, float alpha, const float *x, float *y, int64_t n,
                    struct tt_vcost cost);

/*
 * Head split and merge for attention with `heads` local heads of size d over
 * batch x seq tokens. qkv is (batch*seq, 3*heads*d) laid out [q | k | v], each part
 * (heads, d) per token; q, k, v are (batch, heads, seq, d). merge: ctx (batch, heads, seq, d)
 * -> out (batch*seq, heads*d). The backward of split writes dqkv from dq, dk, dv; the
 * backward of merge is split_merged (out-grad -> ctx-grad layout).
 */
struct tt_heads {
	int batch, seq, heads, d;
};
cudaError_t tt_split_qkv(cudaStream_t stream, struct tt_heads shape, const float *qkv, float *q,
                         float *k, float *v, struct tt_vcost cost);
cudaError_t tt_join_qkv_grad(cudaStream_t stream, struct tt_heads shape, const float *dq,
                             const float *dk, const float *dv, float *dqkv, struct tt_vcost cost);
cudaError_t tt_merge_heads(cudaStream_t stream, struct tt_heads shape, const float *ctx, float *out,
                           struct tt_vcost cost);
cudaError_t tt_split_merged_grad(cudaStream_t stream, struct tt_heads shape, const float *dout,
                                 float *dctx, struct tt_vcost cost);

/*
 * Cross-entropy over rows of logits (rows x vocab) against targets: losses[r] =
 * -log softmax(logits[r])[targets[r]]; dlogits = (softmax - onehot) * grad_scale.
 * The forward also writes dlogits, so that the head needs no second pass.
 */
cudaError_t tt_cross_entropy(cudaStream_t stream, const float *logits, const int *targets,
                             float *losses, float *dlogits, int rows, int vocab, float grad_scale,
                             struct tt_vcost cost);
/* *out = sum of x[0..n) in index order (deterministic), written or added (accumulate). */
cudaError_t tt_sum(cudaStream_t stream, const float *x, float *out, int n, int accumulate,
                   struct tt_vcost cost);

/* y = alpha * x (may be in place). */
cudaError_t tt_scale(cudaStream_t stream, const float *x, float *y, float alpha, int64_t n,
                     struct tt_vcost cost);

/* Every one of the bytes bytes at ptr set to value: PyTorch's fill of a new tensor under
 * torch.use_deterministic_algorithms (NaN for floats), a kernel that names its buffer alone. */
cudaError_t tt_fill(cudaStream_t stream, void *ptr, int64_t bytes, int value, struct tt_vcost cost);

/* Adam step `t` (1-based) on n parameters with bias correction, no weight decay. With
 * `step` (device memory: PyTorch's capturable Adam keeps its step count in a tensor so that
 * a CUDA graph can replay the update), t is 0 and the kernel adds one to *step and takes
 * that instead: a graph captured once counts on. */
struct tt_adam {
	float lr, beta1, beta2, eps;
	int t;
	int *step;
};
cudaError_t tt_adam(cudaStream_t stream, float *param, const float *grad, float *m, float *v,
                    int64_t n, struct tt_adam hyper, struct tt_vcost cost);

#endif /* TINYTRAIN_KERNELS_H */
