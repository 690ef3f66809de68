/* SPDX-License-Identifier: Apache-2.0 */
/* The tensor-parallel collectives of a layer (layer.def); the ops and groups of one job's
 * layer are model.c's. */
#include "layer.h"

/* The LYNX_OPS()/LYNX_COMMS()/LYNX_GROUPS() masks are 32-bit. */
_Static_assert(LYNX_OP_COUNT <= 32, "op masks are 32-bit");
_Static_assert(LYNX_COMM_COUNT <= 32, "comm masks are 32-bit");
_Static_assert(LYNX_GROUP_COUNT <= 32, "group masks are 32-bit");

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

const char *lynx_layer_coll_name(enum lynx_coll coll)
{
	static const char *const names[LYNX_COLL_COUNT] = {
#define LYNX_COLL_NAME(id, name) [LYNX_COLL_##id] = name,
	        LYNX_COLL_LIST(LYNX_COLL_NAME)
#undef LYNX_COLL_NAME
	};

	return (unsigned)coll < LYNX_COLL_COUNT ? names[coll] : "unknown";
}
