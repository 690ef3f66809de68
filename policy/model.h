/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A GPT training job's description (shape, batch, parallelism) and the exact formulas of
 * Korthikanti et al. (arXiv 2205.05198) on it: activation bytes per layer (Table 2) and per
 * recomputable group, FLOPs per layer and per iteration (appendix), parameter counts.
 * Pure functions of their arguments: no state, safe from any thread.
 */
#ifndef LYNX_POLICY_MODEL_H
#define LYNX_POLICY_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layer.h"

/* Megatron-LM's recomputation baselines: X(id, name). */
#define LYNX_RECOMPUTE_LIST(X)    \
	X(NONE, "none")           \
	X(SELECTIVE, "selective") \
	X(FULL, "full")

enum lynx_recompute {
#define LYNX_RECOMPUTE_ENUM(id, name) LYNX_RECOMPUTE_##id,
	LYNX_RECOMPUTE_LIST(LYNX_RECOMPUTE_ENUM)
#undef LYNX_RECOMPUTE_ENUM
	        LYNX_RECOMPUTE_COUNT
};

/* Korthikanti et al.'s notation in the comments. */
struct lynx_model_desc {
	uint32_t layers;       /* L */
	uint32_t hidden;       /* h */
	uint32_t heads;        /* a */
	uint32_t seq;          /* s */
	uint32_t vocab;        /* v */
	uint32_t micro_batch;  /* b */
	uint32_t global_batch; /* B, sequences per iteration over all data-parallel ranks */
	uint32_t tp;           /* t, tensor-parallel size */
	uint32_t pp;           /* p, pipeline stages */
	uint32_t dp;           /* d, data-parallel size */
	bool sp;               /* Megatron sequence parallelism (shards LayerNorm/dropout by t) */
};

/*
 * Checks that m describes a job Megatron-LM can run with a uniform pipeline split: every
 * field positive, h % a == 0, a % t == 0, p <= L, L % p == 0, B % (b·d) == 0, s % t == 0
 * under sequence parallelism, and byte and FLOP counts that fit 64 bits. Uneven stage
 * splits are the partitioner's business, not the description's. Returns 0, or -EINVAL
 * with one sentence naming the first failed check and its values in why (if why is not
 * NULL; truncated to len).
 */
int lynx_model_validate(const struct lynx_model_desc *m, char *why, size_t len);

/*
 * The same checks for an uneven pipeline split, where stage s holds stage_layers[s] layers
 * (m->pp entries): every check of lynx_model_validate() but L % p == 0, then every stage
 * holds at least one layer and the counts add up to L.
 */
int lynx_model_validate_split(const struct lynx_model_desc *m, const uint32_t *stage_layers,
                              char *why, size_t len);

/* The functions below expect a description that lynx_model_validate() accepted. */

const char *lynx_model_recompute_name(enum lynx_recompute r);

/* Micro-batches per iteration per pipeline: B / (b·d). */
uint32_t lynx_model_micro_batches(const struct lynx_model_desc *m);

/* Layers per pipeline stage: L / p. */
uint32_t lynx_model_stage_layers(const struct lynx_model_desc *m);

/*
 * Micro-batches whose activations stage (0-based) holds at its peak under 1F1B:
 * min(p - stage, micro-batches). Stage 0 holds the most. 0 for a stage >= p.
 */
uint32_t lynx_model_inflight(const struct lynx_model_desc *m, uint32_t stage);

/*
 * Activation bytes one rank saves per transformer layer and micro-batch, as Korthikanti et
 * al.'s Table 2 (exact integers; sbh = s·b·h):
 *   NONE       t = 1: sbh(34 + 5as/h); TP: sbh(10 + 24/t + 5as/(ht)); TP+SP: sbh(34/t + 5as/(ht))
 *   SELECTIVE  TP: sbh(10 + 24/t);  TP+SP: sbh·34/t
 *   FULL       2sbh, the layer's input; 2sbh/t under sequence parallelism, where Megatron
 *              keeps the input sharded (the table prints the unsharded row only).
 * The same totals are the sums of lynx_model_group_bytes() over the kept groups; this
 * function computes them from the closed forms, independently, so each checks the other.
 */
uint64_t lynx_model_act_bytes(const struct lynx_model_desc *m, enum lynx_recompute r);

/* Bytes one rank saves for group g per layer and micro-batch (layer.def's coefficients). */
uint64_t lynx_model_group_bytes(const struct lynx_model_desc *m, enum lynx_group g);

/*
 * Whether Megatron's baseline r keeps group g from the forward to the backward: NONE keeps
 * all; SELECTIVE drops the groups of the 5as²b term (softmax output, its dropout mask and
 * output); FULL keeps only the layer's input.
 */
bool lynx_model_group_kept(enum lynx_group g, enum lynx_recompute r);

/* Forward FLOPs of one layer and micro-batch over all TP ranks: 24bsh² + 4bs²h. */
uint64_t lynx_model_layer_fwd_flops(const struct lynx_model_desc *m);

/* Forward FLOPs of op on one rank, from layer.def; the ops of a layer sum to the above / t. */
uint64_t lynx_model_op_fwd_flops(const struct lynx_model_desc *m, enum lynx_op op);

/* Model FLOPs per iteration (forward + backward, no recomputation), the numerator of MFU:
 * 72·B·L·s·h²·(1 + s/(6h) + v/(12hL)). As a double: it overflows 64 bits beyond ~1T. */
double lynx_model_iter_flops(const struct lynx_model_desc *m);

/*
 * Hardware FLOPs per iteration under baseline r (the appendix's formulas):
 *   NONE       the model FLOPs
 *   FULL       96·B·L·s·h²·(1 + s/(6h) + v/(16hL)): one more forward of every layer
 *   SELECTIVE  72·B·L·s·h²·(1 + s/(3h) + v/(12hL)), as published. Note that it charges
 *              24·B·L·s²·h for attention, 8·B·L·s²·h more than the 12 + 4 that one extra
 *              forward of the core attention would cost; we reproduce the paper.
 */
double lynx_model_iter_hw_flops(const struct lynx_model_desc *m, enum lynx_recompute r);

/* Parameters of one layer, whole: QKV 3h²+3h, projection h²+h, FC1 4h²+4h, FC2 4h²+h,
 * two LayerNorms 4h: 12h² + 13h. */
uint64_t lynx_model_layer_params(const struct lynx_model_desc *m);

/* The share of one TP rank: weights and column-parallel biases split by t, the row-parallel
 * biases and LayerNorms replicated: (12h² + 7h)/t + 6h. */
uint64_t lynx_model_layer_params_per_rank(const struct lynx_model_desc *m);

/* Parameters of the model: L layers, the word (v·h) and position (s·h) embeddings, and the
 * final LayerNorm (2h); the output layer shares the word embedding. */
uint64_t lynx_model_params(const struct lynx_model_desc *m);

#endif /* LYNX_POLICY_MODEL_H */
