/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The analytical time model of one decoder transformer layer on one tensor-parallel rank: each
 * op of layer.def at the GPU's sustained GEMM and memory rates (a roofline), each
 * tensor-parallel collective as NCCL's ring algorithm on the cluster's links, and what
 * Megatron's recomputation baselines add to the backward. The planners build on it.
 * Pure functions of their arguments: no state, safe from any thread.
 *
 * Calibration: with the a100-nvlink preset, Korthikanti et al.'s 22B layer (a=64, h=6144,
 * s=2048, b=4, t=8) comes out at 7.70 ms forward and 11.94 ms backward against their
 * 7.7 / 11.9 ms, full recomputation +39.2% (theirs 39%) and selective +5.6% (theirs 7%).
 * The one fitted constant is the A100's GEMM efficiency (presets.def says which are fitted).
 */
#ifndef LYNX_POLICY_COST_H
#define LYNX_POLICY_COST_H

#include <stddef.h>
#include <stdint.h>

#include "layer.h"
#include "model.h"
#include "presets.h"

/* Times of one layer and micro-batch on one rank, in seconds; an op or group the layer does
 * not have takes 0. */
struct lynx_layer_cost {
	struct lynx_layer_shape shape; /* the layer they are of (lynx_model_layer()) */
	double gemm_flops_per_s;       /* sustained: peak_flops · gemm_eff */
	double mem_bytes_per_s;        /* sustained: mem_bw · mem_eff */
	const struct lynx_link *tp_link;

	double op_fwd_s[LYNX_OP_COUNT];
	double op_bwd_s[LYNX_OP_COUNT];   /* all of the op's backward kernels */
	double op_wgrad_s[LYNX_OP_COUNT]; /* its weight-gradient GEMM, part of op_bwd_s */

	/* The collective at each boundary (NONE without one) and how long it takes. */
	enum lynx_coll comm_fwd[LYNX_COMM_COUNT], comm_bwd[LYNX_COMM_COUNT];
	double comm_fwd_s[LYNX_COMM_COUNT];
	double comm_bwd_s[LYNX_COMM_COUNT];
	/* The part of comm_bwd_s not hidden behind the weight-gradient GEMM it overlaps. */
	double comm_bwd_exposed_s[LYNX_COMM_COUNT];

	/* Context parallelism's ring exchange of keys and values in the attention's forward
	 * and backward, which the attention op's time includes (it overlaps the kernels);
	 * 0 without CP. */
	double context_ring_fwd_s, context_ring_bwd_s;

	/* Time to rebuild each group from its deps: its ops and collectives, forward. */
	double group_recompute_s[LYNX_GROUP_COUNT];

	double fwd_s; /* ops + forward collectives (the forward waits for them) */
	double bwd_s; /* ops + exposed backward collectives, without recomputation */
};

/*
 * Fills lc for job m on cluster c. The tensor-parallel group's t ranks are adjacent, so
 * they use NVLink when t <= GPUs per node and the inter-node link otherwise.
 * Returns 0, or -EINVAL if m fails lynx_model_validate() (why gets its reason, as there).
 */
int lynx_cost_layer(const struct lynx_model_desc *m, const struct lynx_cluster *c,
                    struct lynx_layer_cost *lc, char *why, size_t len);

/* Forward time of the ops in ops (LYNX_OPS() mask) and the collectives in comms. */
double lynx_cost_rerun_s(const struct lynx_layer_cost *lc, uint32_t ops, uint32_t comms);

/*
 * What Megatron's baseline r adds to a layer's backward: FULL reruns the whole forward,
 * collectives included (fwd_s); SELECTIVE reruns the core attention
 * (LYNX_CORE_ATTENTION_OPS); NONE adds nothing.
 */
double lynx_cost_recompute_s(const struct lynx_layer_cost *lc, enum lynx_recompute r);

/*
 * Time of one collective over ranks GPUs on link, with bytes the size of the full tensor
 * (the all-reduce buffer, the all-gather's output, the reduce-scatter's input), as NCCL's
 * ring: all-reduce 2(n-1)/n · bytes/busbw + latency; all-gather and reduce-scatter
 * (n-1)/n · bytes/busbw + latency; send/recv bytes/busbw + latency. 0 for NONE, and for a
 * collective over one rank.
 */
double lynx_cost_collective_s(const struct lynx_link *link, enum lynx_coll coll, uint32_t ranks,
                              uint64_t bytes);

/*
 * The link a group of ranks GPUs, stride ranks apart, communicates over: the node's own
 * (NVLink or PCIe) if the group fits in one node (ranks · stride <= GPUs per node), the
 * inter-node NICs otherwise. With Megatron's rank order, TP groups have stride 1, DP
 * groups stride t and PP neighbours stride t·d.
 */
const struct lynx_link *lynx_cost_link(const struct lynx_cluster *c, uint32_t ranks,
                                       uint32_t stride);

#endif /* LYNX_POLICY_COST_H */
