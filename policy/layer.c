/* SPDX-License-Identifier: Apache-2.0 */
/* The info tables of a GPT layer's ops, collectives and activation groups (layer.def). */
#include <string.h>

#include "layer.h"

/* The LYNX_OPS()/LYNX_COMMS()/LYNX_GROUPS() masks are 32-bit. */
_Static_assert(LYNX_OP_COUNT <= 32, "op masks are 32-bit");
_Static_assert(LYNX_COMM_COUNT <= 32, "comm masks are 32-bit");
_Static_assert(LYNX_GROUP_COUNT <= 32, "group masks are 32-bit");

/* Unwraps a parenthesised tuple of layer.def into an initialiser list. */
#define LYNX_TUPLE(...) __VA_ARGS__

const struct lynx_layer_op_info lynx_layer_ops[LYNX_OP_COUNT] = {
#define LYNX_LAYER_OP(id, op_name, op_kind, flops, operand_bytes, fwd, bwd) \
	[LYNX_OP_##id] = {                                                  \
	        .name = op_name,                                            \
	        .kind = LYNX_OP_KIND_##op_kind,                             \
	        .flops_nh2 = LYNX_FLOPS_NH2 flops,                          \
	        .flops_bs2h = LYNX_FLOPS_BS2H flops,                        \
	        .operands = {LYNX_TUPLE operand_bytes},                     \
	        .fwd_ew = {LYNX_TUPLE fwd},                                 \
	        .bwd_ew = {LYNX_TUPLE bwd},                                 \
	},
#define LYNX_FLOPS_NH2(nh2, bs2h) (nh2)
#define LYNX_FLOPS_BS2H(nh2, bs2h) (bs2h)
#include "layer.def"
#undef LYNX_FLOPS_NH2
#undef LYNX_FLOPS_BS2H
};

const struct lynx_layer_comm_info lynx_layer_comms[LYNX_COMM_COUNT] = {
#define LYNX_LAYER_COMM(id, comm_name, op_before, ftp, fsp, btp, bsp, hidden_by) \
	[LYNX_COMM_##id] = {                                                     \
	        .name = comm_name,                                               \
	        .before = LYNX_OP_##op_before,                                   \
	        .fwd_tp = LYNX_COLL_##ftp,                                       \
	        .fwd_sp = LYNX_COLL_##fsp,                                       \
	        .bwd_tp = LYNX_COLL_##btp,                                       \
	        .bwd_sp = LYNX_COLL_##bsp,                                       \
	        .bwd_hidden_by = LYNX_OP_##hidden_by,                            \
	},
#include "layer.def"
};

const struct lynx_layer_group_info lynx_layer_groups[LYNX_GROUP_COUNT] = {
#define LYNX_LAYER_GROUP(id, group_name, group_block, c_sbh, c_as2b, split, op_mask, comm_mask, \
                         dep_mask, consumer_op)                                                 \
	[LYNX_GROUP_##id] = {                                                                   \
	        .name = group_name,                                                             \
	        .block = LYNX_BLOCK_##group_block,                                              \
	        .sbh = c_sbh,                                                                   \
	        .as2b = c_as2b,                                                                 \
	        .tp_split = split,                                                              \
	        .ops = op_mask,                                                                 \
	        .comms = comm_mask,                                                             \
	        .deps = dep_mask,                                                               \
	        .consumer = LYNX_OP_##consumer_op,                                              \
	},
#include "layer.def"
};

const char *lynx_layer_coll_name(enum lynx_coll coll)
{
	static const char *const names[LYNX_COLL_COUNT] = {
#define LYNX_COLL_NAME(id, name) [LYNX_COLL_##id] = name,
	        LYNX_COLL_LIST(LYNX_COLL_NAME)
#undef LYNX_COLL_NAME
	};

	return (unsigned)coll < LYNX_COLL_COUNT ? names[coll] : "unknown";
}

enum lynx_group lynx_layer_find_group(const char *name)
{
	for (int g = 0; g < LYNX_GROUP_COUNT; g++)
		if (!strcmp(lynx_layer_groups[g].name, name))
			return (enum lynx_group)g;
	return LYNX_GROUP_COUNT;
}
