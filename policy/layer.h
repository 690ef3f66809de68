/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The structure of one decoder transformer layer (layer.def): the ids of its ops, its
 * tensor-parallel collectives and its recomputable activation groups, over every
 * architecture, and the collectives' constant table. What one job's layer has, and its
 * sizes, is model.h's lynx_model_layer(). Pure data: no state, safe from any thread.
 */
#ifndef LYNX_POLICY_LAYER_H
#define LYNX_POLICY_LAYER_H

#include <stdbool.h>
#include <stdint.h>

enum lynx_op_kind {
	LYNX_OP_KIND_GEMM,  /* weights x activations: has a weight gradient */
	LYNX_OP_KIND_BGEMM, /* batched activations x activations (attention) */
	LYNX_OP_KIND_FLASH, /* fused attention: its backward reruns the scores */
	LYNX_OP_KIND_EW,    /* element-wise: memory-bound */
};

/* Collectives, costed as NCCL's ring algorithm (cost.c): X(id, name). */
#define LYNX_COLL_LIST(X)                   \
	X(NONE, "none")                     \
	X(ALL_REDUCE, "all_reduce")         \
	X(ALL_GATHER, "all_gather")         \
	X(REDUCE_SCATTER, "reduce_scatter") \
	X(SEND_RECV, "send_recv")

enum lynx_coll {
#define LYNX_COLL_ENUM(id, name) LYNX_COLL_##id,
	LYNX_COLL_LIST(LYNX_COLL_ENUM)
#undef LYNX_COLL_ENUM
	        LYNX_COLL_COUNT
};

/* Korthikanti et al.'s three parts of a layer's activations. */
enum lynx_block { LYNX_BLOCK_ATTN, LYNX_BLOCK_MLP, LYNX_BLOCK_NORM };

enum lynx_op {
	LYNX_OP_NONE = -1,
#define LYNX_LAYER_OP(id, ...) LYNX_OP_##id,
#include "layer.def"
	LYNX_OP_COUNT
};

enum lynx_comm {
#define LYNX_LAYER_COMM(id, ...) LYNX_COMM_##id,
#include "layer.def"
	LYNX_COMM_COUNT
};

enum lynx_group {
#define LYNX_LAYER_GROUP(id, ...) LYNX_GROUP_##id,
#include "layer.def"
	LYNX_GROUP_COUNT
};

/* Bit masks over ops, comms and groups (the tables hold fewer than 32 of each). */
#define LYNX_OPS(id) (1u << LYNX_OP_##id)
#define LYNX_COMMS(id) (1u << LYNX_COMM_##id)
#define LYNX_GROUPS(id) (1u << LYNX_GROUP_##id)

/*
 * What Megatron's selective recomputation reruns: its checkpointed CoreAttention module,
 * QK^T, softmax, dropout and PV, or the flash kernel in the scores' place. PV's output (proj_in)
 * stays saved, as the projection's input, but rerunning the checkpointed function recomputes it
 * anyway.
 */
#define LYNX_CORE_ATTENTION_OPS \
	(LYNX_OPS(SCORES) | LYNX_OPS(SOFTMAX) | LYNX_OPS(ATTN_DROPOUT) | LYNX_OPS(CONTEXT))

struct lynx_layer_comm_info {
	const char *name;
	enum lynx_op before; /* the forward issues it just before this op */
	enum lynx_coll fwd_tp, fwd_sp, bwd_tp, bwd_sp;
	enum lynx_op bwd_hidden_by; /* whose weight-gradient GEMM overlaps it; NONE: exposed */
};

extern const struct lynx_layer_comm_info lynx_layer_comms[LYNX_COMM_COUNT];

/* Name of a collective algorithm ("all_reduce", ...), for reports. */
const char *lynx_layer_coll_name(enum lynx_coll coll);

#endif /* LYNX_POLICY_LAYER_H */
