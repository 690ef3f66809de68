/* SPDX-License-Identifier: Apache-2.0 */
/* The per-layer time model: a roofline per op of layer.def and ring collectives. */
#include <errno.h>

#include "cost.h"

/* The sizes layer.def's coefficients multiply, on one rank. */
struct units {
	double nh;  /* N·h: tokens of the micro-batch x hidden */
	double nht; /* N·h/t */
	double rh;  /* R·h: the tokens LayerNorm and dropout see (N/t under SP) x hidden */
	double s;   /* S = a·s²·b/t: attention scores */
	double wt;  /* h²/t: a GEMM's weights are w·h²/t bytes per rank */
};

static double ew_bytes(const struct units *u, const struct lynx_ew_coef *c)
{
	return c->r * u->rh + c->nht * u->nht + c->s * u->s;
}

/*
 * One op, forward and backward. GEMMs take the slower of their FLOPs at the sustained
 * GEMM rate and their operand traffic at the sustained memory rate (the attention GEMMs,
 * with K = h/a, are often memory-bound); the backward runs two GEMMs as large as the
 * forward's. Element-wise traffic always runs at the memory rate.
 */
static void cost_op(const struct lynx_model_desc *m, const struct units *u, enum lynx_op op,
                    struct lynx_layer_cost *lc)
{
	const struct lynx_layer_op_info *oi = &lynx_layer_ops[op];
	double flops = (double)lynx_model_op_fwd_flops(m, op);
	double operands = oi->operands.nh * u->nh + oi->operands.nht * u->nht +
	                  oi->operands.s * u->s + oi->operands.w * u->wt;
	double gemm = 0;

	if (oi->kind != LYNX_OP_KIND_EW) {
		gemm = flops / lc->gemm_flops_per_s;
		if (operands / lc->mem_bytes_per_s > gemm)
			gemm = operands / lc->mem_bytes_per_s;
	}
	lc->op_fwd_s[op] = gemm + ew_bytes(u, &oi->fwd_ew) / lc->mem_bytes_per_s;
	lc->op_bwd_s[op] = 2 * gemm + ew_bytes(u, &oi->bwd_ew) / lc->mem_bytes_per_s;
	lc->op_wgrad_s[op] = oi->kind == LYNX_OP_KIND_GEMM ? gemm : 0;
}

int lynx_cost_layer(const struct lynx_model_desc *m, const struct lynx_cluster *c,
                    struct lynx_layer_cost *lc, char *why, size_t len)
{
	double tokens = (double)m->seq * m->micro_batch, h = m->hidden, t = m->tp;
	/* Every TP collective moves the full hidden state of the micro-batch, 16-bit. */
	uint64_t comm_bytes = 2ull * m->seq * m->micro_batch * m->hidden;
	struct units u;
	int err = lynx_model_validate(m, why, len);

	if (err)
		return err;
	u = (struct units){
	        .nh = tokens * h,
	        .nht = tokens * h / t,
	        .rh = (m->sp ? tokens / t : tokens) * h,
	        .s = (double)m->heads * m->seq * m->seq * m->micro_batch / t,
	        .wt = h * h / t,
	};
	*lc = (struct lynx_layer_cost){
	        .gemm_flops_per_s = c->gpu->peak_flops * c->gpu->gemm_eff,
	        .mem_bytes_per_s = c->gpu->mem_bw * c->gpu->mem_eff,
	        .tp_link = lynx_cost_link(c, m->tp, 1),
	};
	for (int op = 0; op < LYNX_OP_COUNT; op++) {
		cost_op(m, &u, op, lc);
		lc->fwd_s += lc->op_fwd_s[op];
		lc->bwd_s += lc->op_bwd_s[op];
	}
	for (int i = 0; i < LYNX_COMM_COUNT; i++) {
		const struct lynx_layer_comm_info *ci = &lynx_layer_comms[i];
		double hidden;

		lc->comm_fwd[i] = m->tp == 1 ? LYNX_COLL_NONE : m->sp ? ci->fwd_sp : ci->fwd_tp;
		lc->comm_bwd[i] = m->tp == 1 ? LYNX_COLL_NONE : m->sp ? ci->bwd_sp : ci->bwd_tp;
		lc->comm_fwd_s[i] =
		        lynx_cost_collective_s(lc->tp_link, lc->comm_fwd[i], m->tp, comm_bytes);
		lc->comm_bwd_s[i] =
		        lynx_cost_collective_s(lc->tp_link, lc->comm_bwd[i], m->tp, comm_bytes);
		hidden = ci->bwd_hidden_by == LYNX_OP_NONE ? 0 : lc->op_wgrad_s[ci->bwd_hidden_by];
		lc->comm_bwd_exposed_s[i] =
		        lc->comm_bwd_s[i] > hidden ? lc->comm_bwd_s[i] - hidden : 0;
		lc->fwd_s += lc->comm_fwd_s[i];
		lc->bwd_s += lc->comm_bwd_exposed_s[i];
	}
	for (int g = 0; g < LYNX_GROUP_COUNT; g++)
		lc->group_recompute_s[g] =
		        lynx_cost_rerun_s(lc, lynx_layer_groups[g].ops, lynx_layer_groups[g].comms);
	return 0;
}

double lynx_cost_rerun_s(const struct lynx_layer_cost *lc, uint32_t ops, uint32_t comms)
{
	double s = 0;

	for (int op = 0; op < LYNX_OP_COUNT; op++)
		if (ops & (1u << op))
			s += lc->op_fwd_s[op];
	for (int i = 0; i < LYNX_COMM_COUNT; i++)
		if (comms & (1u << i))
			s += lc->comm_fwd_s[i];
	return s;
}

double lynx_cost_recompute_s(const struct lynx_layer_cost *lc, enum lynx_recompute r)
{
	switch (r) {
	case LYNX_RECOMPUTE_NONE:
		return 0;
	case LYNX_RECOMPUTE_SELECTIVE:
		return lynx_cost_rerun_s(lc, LYNX_CORE_ATTENTION_OPS, 0);
	case LYNX_RECOMPUTE_FULL:
		return lc->fwd_s;
	case LYNX_RECOMPUTE_COUNT:
		break;
	}
	return 0;
}

double lynx_cost_collective_s(const struct lynx_link *link, enum lynx_coll coll, uint32_t ranks,
                              uint64_t bytes)
{
	double n = ranks, share;

	switch (coll) {
	case LYNX_COLL_ALL_REDUCE:
		share = 2 * (n - 1) / n;
		break;
	case LYNX_COLL_ALL_GATHER:
	case LYNX_COLL_REDUCE_SCATTER:
		share = (n - 1) / n;
		break;
	case LYNX_COLL_SEND_RECV:
		return (double)bytes / link->busbw + link->latency_s;
	case LYNX_COLL_NONE:
	default:
		return 0;
	}
	if (ranks <= 1)
		return 0;
	return share * (double)bytes / link->busbw + link->latency_s;
}

const struct lynx_link *lynx_cost_link(const struct lynx_cluster *c, uint32_t ranks,
                                       uint32_t stride)
{
	return (uint64_t)ranks * stride <= c->gpus_per_node ? &c->intra : &c->inter;
}
