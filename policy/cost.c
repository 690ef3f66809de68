/* SPDX-License-Identifier: Apache-2.0 */
/* The per-layer time model: a roofline per op of layer.def and ring collectives. */
#include <errno.h>
#include <math.h>

#include "cost.h"

/*
 * One op, forward and backward. GEMMs take the slower of their FLOPs at the sustained
 * GEMM rate and their operand traffic at the sustained memory rate (the attention GEMMs,
 * with K = h/a, are often memory-bound); the backward runs two GEMMs as large as the
 * forward's, flash attention's 2.5 (it reruns QK^T, then computes dV, dP, dQ and dK).
 * Element-wise traffic always runs at the memory rate.
 */
static void cost_op(const struct lynx_layer_op_shape *os, enum lynx_op op,
                    struct lynx_layer_cost *lc)
{
	double gemm = 0;

	if (!os->present)
		return;
	if (os->kind != LYNX_OP_KIND_EW) {
		gemm = (double)os->flops / lc->gemm_flops_per_s;
		if ((double)os->operand_bytes / lc->mem_bytes_per_s > gemm)
			gemm = (double)os->operand_bytes / lc->mem_bytes_per_s;
	}
	lc->op_fwd_s[op] = gemm + (double)os->fwd_ew_bytes / lc->mem_bytes_per_s;
	lc->op_bwd_s[op] = (os->kind == LYNX_OP_KIND_FLASH ? 2.5 : 2) * gemm +
	                   (double)os->bwd_ew_bytes / lc->mem_bytes_per_s;
	lc->op_wgrad_s[op] = os->kind == LYNX_OP_KIND_GEMM ? gemm : 0;
}

/*
 * Context parallelism's ring attention (Transformer Engine's, as Megatron runs it): in c - 1
 * steps each rank passes its keys and values (4·N·kd/t bytes) to the next CP rank while it
 * computes attention on the ones it holds; the backward passes them again with their
 * gradients, twice the bytes. Each pass overlaps the attention kernels, so the attention
 * takes the longer of its compute and its ring. CP ranks are t apart (Megatron's order:
 * TP, CP, DP, PP).
 */
static void cost_context_ring(const struct lynx_model_desc *m, const struct lynx_cluster *c,
                              struct lynx_layer_cost *lc)
{
	uint32_t cp = lynx_model_cp(m);
	const struct lynx_link *link;
	uint64_t kv_bytes;
	double fwd, bwd;

	if (cp == 1)
		return;
	link = lynx_cost_link(c, cp, m->tp);
	kv_bytes =
	        4 * lynx_model_tokens(m) * lynx_model_kv_heads(m) * (m->hidden / m->heads) / m->tp;
	fwd = (cp - 1) * lynx_cost_collective_s(link, LYNX_COLL_SEND_RECV, 2, kv_bytes);
	bwd = (cp - 1) * lynx_cost_collective_s(link, LYNX_COLL_SEND_RECV, 2, 2 * kv_bytes);
	lc->context_ring_fwd_s = fwd;
	lc->context_ring_bwd_s = bwd;
	lc->op_fwd_s[LYNX_OP_SCORES] = fmax(lc->op_fwd_s[LYNX_OP_SCORES], fwd);
	lc->op_bwd_s[LYNX_OP_SCORES] = fmax(lc->op_bwd_s[LYNX_OP_SCORES], bwd);
}

int lynx_cost_layer(const struct lynx_model_desc *m, const struct lynx_cluster *c,
                    struct lynx_layer_cost *lc, char *why, size_t len)
{
	/* Every TP collective moves the full hidden state of the rank's tokens, 16-bit. */
	uint64_t comm_bytes = 2ull * lynx_model_tokens(m) * m->hidden;
	int err = lynx_model_validate(m, why, len);

	if (err)
		return err;
	*lc = (struct lynx_layer_cost){
	        .gemm_flops_per_s = c->gpu->peak_flops * c->gpu->gemm_eff,
	        .mem_bytes_per_s = c->gpu->mem_bw * c->gpu->mem_eff,
	        .tp_link = lynx_cost_link(c, m->tp, 1),
	};
	lynx_model_layer(m, &lc->shape);
	for (int op = 0; op < LYNX_OP_COUNT; op++)
		cost_op(&lc->shape.ops[op], op, lc);
	cost_context_ring(m, c, lc);
	for (int op = 0; op < LYNX_OP_COUNT; op++) {
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
		        lynx_cost_rerun_s(lc, lc->shape.groups[g].ops, lc->shape.groups[g].comms);
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
