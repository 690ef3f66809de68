/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tinytrain's kernel table (private to the kernels): the one list of kernels and their
 * parameter layouts, from which kernels.c generates registration, stubs and cost callbacks,
 * and which declares the bodies that kernels_dense.c and kernels_elementwise.c define.
 */
#ifndef TINYTRAIN_KERNELS_TABLE_H
#define TINYTRAIN_KERNELS_TABLE_H

#include <stdint.h>

#include "kernels.h"
#include "simgpu.h"

/*
 * X(name, parameters): `name` is the simgpu kernel name (what traces and tools match),
 * the launch wrapper in kernels.h and, with _body, the body's name. The parameters are
 * P(type) in launch order; the user of the list defines P. Every kernel also takes a
 * struct tt_vcost as its last parameter: the expansions append it, so no entry can forget
 * it. Bodies read their parameters by index in this order, and each wrapper passes them in
 * this order (kernels.c checks the count). Pointers travel as separate parameters, so that
 * a tool scanning parameter words sees each one, except where kernels.h puts them in a
 * by-value struct on purpose (layer norm).
 */
#define TT_KERNELS(X)                                                                            \
	X(tt_gemm,                                                                               \
	  P(int) P(int) P(int) P(int) P(int) P(int) P(const float *) P(int64_t) P(const float *) \
	          P(int64_t) P(float *) P(int64_t) P(float) P(float) P(float *))                 \
	X(tt_layernorm_fwd, P(struct tt_layernorm_args))                                         \
	X(tt_layernorm_fwd_flat, P(const float *) P(float *) P(const float *) P(const float *)   \
	                                 P(float *) P(float *) P(int) P(int))                    \
	X(tt_layernorm_bwd, P(struct tt_layernorm_grad_args))                                    \
	X(tt_embedding_fwd, P(const int *) P(float *const *) P(float *) P(int) P(int))           \
	X(tt_embedding_fwd_direct, P(const int *) P(const float *) P(float *) P(int) P(int))     \
	X(tt_embedding_bwd, P(const int *) P(const float *) P(float *) P(int) P(int))            \
	X(tt_softmax_fwd, P(const float *) P(float *) P(int) P(int) P(int))                      \
	X(tt_softmax_bwd, P(const float *) P(const float *) P(float *) P(int) P(int))            \
	X(tt_dropout_fwd,                                                                        \
	  P(const float *) P(float *) P(uint8_t *) P(int64_t) P(float) P(uint64_t) P(uint64_t))  \
	X(tt_dropout_bwd, P(const float *) P(const uint8_t *) P(float *) P(int64_t) P(float))    \
	X(tt_gelu_fwd, P(const float *) P(float *) P(int64_t))                                   \
	X(tt_gelu_bwd, P(const float *) P(const float *) P(float *) P(int64_t))                  \
	X(tt_axpy, P(float) P(const float *) P(float *) P(int64_t))                              \
	X(tt_split_qkv, P(struct tt_heads) P(const float *) P(float *) P(float *) P(float *))    \
	X(tt_join_qkv_grad,                                                                      \
	  P(struct tt_heads) P(const float *) P(const float *) P(const float *) P(float *))      \
	X(tt_merge_heads, P(struct tt_heads) P(const float *) P(float *))                        \
	X(tt_split_merged_grad, P(struct tt_heads) P(const float *) P(float *))                  \
	X(tt_cross_entropy,                                                                      \
	  P(const float *) P(const int *) P(float *) P(float *) P(int) P(int) P(float))          \
	X(tt_sum, P(const float *) P(float *) P(int) P(int))                                     \
	X(tt_scale, P(const float *) P(float *) P(float) P(int64_t))                             \
	X(tt_fill, P(void *) P(int64_t) P(int))                                                  \
	X(tt_adam, P(float *) P(const float *) P(float *) P(float *) P(int64_t) P(struct tt_adam))

/* Parameter i of a kernel body, read as CUDA passes it (params[i] points at its bytes). */
#define TT_ARG(params, i, type) (*(type *)(params)[i])

/* The bodies: each runs the whole grid at once on the host, when simgpu applies the
 * launch's effect. */
#define TT_DECLARE_BODY(name, parameters) \
	void name##_body(const struct simgpu_launch_dims *dims, void **params);
TT_KERNELS(TT_DECLARE_BODY)
#undef TT_DECLARE_BODY

#endif /* TINYTRAIN_KERNELS_TABLE_H */
