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

/* The architecture choices of a layer, each an X(id, name) list; the first entry of each
 * is GPT's (Megatron-LM's default), so a zeroed description is a GPT layer. */
#define LYNX_MLP_LIST(X) \
	X(GELU, "gelu")  \
	X(SWIGLU, "swiglu")
#define LYNX_NORM_LIST(X)         \
	X(LAYERNORM, "layernorm") \
	X(RMSNORM, "rmsnorm")
#define LYNX_ATTENTION_LIST(X) \
	X(UNFUSED, "unfused")  \
	X(FLASH, "flash")
#define LYNX_POSITION_LIST(X) \
	X(LEARNED, "learned") \
	X(ROTARY, "rotary")

#define LYNX_ARCH_ENUM(prefix, id, name) LYNX_##prefix##_##id,
enum lynx_mlp {
#define LYNX_MLP_ENUM(id, name) LYNX_ARCH_ENUM(MLP, id, name)
	LYNX_MLP_LIST(LYNX_MLP_ENUM)
#undef LYNX_MLP_ENUM
	        LYNX_MLP_COUNT
};
enum lynx_norm {
#define LYNX_NORM_ENUM(id, name) LYNX_ARCH_ENUM(NORM, id, name)
	LYNX_NORM_LIST(LYNX_NORM_ENUM)
#undef LYNX_NORM_ENUM
	        LYNX_NORM_COUNT
};
enum lynx_attention {
#define LYNX_ATTENTION_ENUM(id, name) LYNX_ARCH_ENUM(ATTENTION, id, name)
	LYNX_ATTENTION_LIST(LYNX_ATTENTION_ENUM)
#undef LYNX_ATTENTION_ENUM
	        LYNX_ATTENTION_COUNT
};
enum lynx_position {
#define LYNX_POSITION_ENUM(id, name) LYNX_ARCH_ENUM(POSITION, id, name)
	LYNX_POSITION_LIST(LYNX_POSITION_ENUM)
#undef LYNX_POSITION_ENUM
	        LYNX_POSITION_COUNT
};
#undef LYNX_ARCH_ENUM

/*
 * What a layer is made of (layer.def reads every field). Zeroed, it is Megatron-LM's GPT
 * layer of Korthikanti et al.: GeLU MLP of 4h, LayerNorm, biases, dropout, unfused
 * attention, learned positions, tied embeddings. Llama is SwiGLU, RMSNorm, no biases, no
 * dropout, rotary positions, untied embeddings, usually flash attention and, from Llama 2
 * 70B on, grouped-query attention.
 */
struct lynx_layer_arch {
	enum lynx_mlp mlp;
	enum lynx_norm norm;
	enum lynx_attention attention;
	enum lynx_position position;
	uint32_t ffn;      /* f, the MLP's inner width; 0: 4h */
	uint32_t kv_heads; /* k, key/value heads (GQA; 1: MQA); 0: a */
	bool no_bias;      /* the linear layers and norms have no biases */
	bool no_dropout;   /* dropout off: no masks kept, no dropout kernels */
	bool untied;       /* the output layer has its own weights, not the word embedding's */
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
	/* c, context-parallel size (Megatron's --context-parallel-size): every rank holds s/c
	 * of each sequence, and flash attention's ring passes keys and values around; 0: 1. */
	uint32_t cp;
	bool sp; /* Megatron sequence parallelism (shards LayerNorm/dropout by t) */
	struct lynx_layer_arch arch;
	/* v, virtual pipeline stages per rank (Megatron's --virtual-pipeline-model-parallel-size):
	 * every rank holds v model chunks of L/(p·v) layers, chunk k of rank r holding global
	 * chunk k·p + r, and runs Megatron's interleaved 1F1B; 0: 1 (plain 1F1B). */
	uint32_t vp;
};

/* The names of the architecture choices ("swiglu", "flash", ...), and the choice called
 * name (exact), or the list's COUNT. */
const char *lynx_model_mlp_name(enum lynx_mlp v);
const char *lynx_model_norm_name(enum lynx_norm v);
const char *lynx_model_attention_name(enum lynx_attention v);
const char *lynx_model_position_name(enum lynx_position v);
enum lynx_mlp lynx_model_find_mlp(const char *name);
enum lynx_norm lynx_model_find_norm(const char *name);
enum lynx_attention lynx_model_find_attention(const char *name);
enum lynx_position lynx_model_find_position(const char *name);

/* c: cp, or 1 when 0. */
uint32_t lynx_model_cp(const struct lynx_model_desc *m);

/* The most virtual pipeline stages a description takes (Megatron's runs use a few). */
#define LYNX_MODEL_MAX_VP 64

/* v: vp, or 1 when 0. */
uint32_t lynx_model_vp(const struct lynx_model_desc *m);

/* N, the tokens of one micro-batch on one rank: b·s/c. */
uint64_t lynx_model_tokens(const struct lynx_model_desc *m);

/* f: arch.ffn, or 4h when 0. */
uint32_t lynx_model_ffn(const struct lynx_model_desc *m);

/* k: arch.kv_heads, or a when 0. */
uint32_t lynx_model_kv_heads(const struct lynx_model_desc *m);

/*
 * Checks that m describes a job Megatron-LM can run with a uniform pipeline split: every
 * field positive, h % a == 0, a % t == 0, k divides a and k % t == 0 (k key/value heads,
 * as Megatron's query groups), f % t == 0, p <= L, L % p == 0, B % (b·d) == 0, s % t == 0
 * under sequence parallelism; with c > 1, flash attention (Megatron runs context
 * parallelism through Transformer Engine's), s % 2c == 0 (its load-balanced chunks) and
 * (s/c) % t == 0 under sequence parallelism; with v > 1 (interleaved 1F1B, as Megatron
 * allows it), v <= LYNX_MODEL_MAX_VP, p >= 2, L % (p·v) == 0 and m % p == 0 (m = B/(b·d)
 * micro-batches), and no uneven split; architecture choices each of its list, and byte and FLOP
 * counts that fit 64 bits. Uneven stage splits are the partitioner's business, not the
 * description's. Returns 0, or -EINVAL with one sentence naming the first failed check and its
 * values in why (if why is not NULL; truncated to len).
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
 * Forward passes of one model chunk that stage (0-based) runs before its first backward:
 * under 1F1B min(p - stage - 1, m); under interleaved 1F1B, Megatron's
 * min(2·(p - stage - 1) + (v - 1)·p, m·v), or all m·v when m == p. 0 for a stage >= p.
 */
uint32_t lynx_model_chunk_warmup(const struct lynx_model_desc *m, uint32_t stage);

/*
 * Micro-batches whose activations stage (0-based) holds at its peak: under 1F1B
 * min(p - stage, m); interleaved, the chunks in flight (the warm-up's and one more, at most
 * m·v) over v, rounded up. Stage 0 holds the most. 0 for a stage >= p.
 */
uint32_t lynx_model_inflight(const struct lynx_model_desc *m, uint32_t stage);

/*
 * One layer of job m on one rank, as layer.def describes it for m's architecture. An op or
 * group that the architecture does not have (flash attention keeps no scores; a layer
 * without dropout keeps no masks) is not present and has zero sizes; the masks of the
 * present ones name present ops and groups only.
 */
struct lynx_layer_op_shape {
	const char *name;
	enum lynx_op_kind kind;
	bool present;
	uint64_t flops;         /* forward FLOPs on one rank */
	uint64_t operand_bytes; /* what a GEMM reads and writes, for its roofline */
	uint64_t fwd_ew_bytes;  /* element-wise traffic of its forward ... */
	uint64_t bwd_ew_bytes;  /* ... and of its backward, always memory-bound */
};

struct lynx_layer_group_shape {
	const char *name;
	enum lynx_block block;
	bool present;
	uint64_t bytes;        /* per layer and micro-batch, on one rank */
	uint32_t ops;          /* LYNX_OPS() rerun to rebuild it; 0: the layer's input */
	uint32_t comms;        /* LYNX_COMMS() that rerun needs */
	uint32_t deps;         /* LYNX_GROUPS() that must be resident to rebuild it */
	uint32_t readers;      /* LYNX_OPS() whose backward reads it */
	enum lynx_op consumer; /* its first reader in the backward: freed after that op */
};

struct lynx_layer_shape {
	struct lynx_layer_op_shape ops[LYNX_OP_COUNT];
	struct lynx_layer_group_shape groups[LYNX_GROUP_COUNT];
};

void lynx_model_layer(const struct lynx_model_desc *m, struct lynx_layer_shape *shape);

/*
 * Activation bytes one rank saves per transformer layer and micro-batch under baseline r:
 * the sum of lynx_model_group_bytes() over the groups lynx_model_group_kept(). For GPT this
 * is Korthikanti et al.'s Table 2 (sbh = s·b·h):
 *   NONE       t = 1: sbh(34 + 5as/h); TP: sbh(10 + 24/t + 5as/(ht)); TP+SP: sbh(34/t + 5as/(ht))
 *   SELECTIVE  TP: sbh(10 + 24/t);  TP+SP: sbh·34/t
 *   FULL       2sbh, the layer's input; 2sbh/t under sequence parallelism, where Megatron
 *              keeps the input sharded (the table prints the unsharded row only).
 * tests/policy/test_policy_model.c holds the closed forms, independently.
 */
uint64_t lynx_model_act_bytes(const struct lynx_model_desc *m, enum lynx_recompute r);

/* Bytes one rank saves for group g per layer and micro-batch; 0 for an absent group. */
uint64_t lynx_model_group_bytes(const struct lynx_model_desc *m, enum lynx_group g);

/*
 * Whether Megatron's baseline r keeps group g (present in m's layer) from the forward to the
 * backward: NONE keeps all; SELECTIVE drops what its checkpointed core attention keeps and
 * the projection does not: with unfused attention the groups of the 5as²b term (softmax
 * output, its dropout mask and output), with flash attention the log-sum-exp; FULL keeps
 * only the layer's input.
 */
bool lynx_model_group_kept(const struct lynx_model_desc *m, enum lynx_group g,
                           enum lynx_recompute r);

/*
 * Forward FLOPs of one layer and micro-batch over all TP and CP ranks, as the kernels
 * compute them:
 * GPT 24bsh² + 4bs²h. Unfused attention computes every score of the causal mask; flash
 * attention skips the masked half (2bs²h).
 */
uint64_t lynx_model_layer_fwd_flops(const struct lynx_model_desc *m);

/* Forward FLOPs of op on one rank; the ops of a layer sum to the above / t. */
uint64_t lynx_model_op_fwd_flops(const struct lynx_model_desc *m, enum lynx_op op);

/*
 * Model FLOPs per iteration (forward + backward, no recomputation), the numerator of MFU.
 * Convention: causal attention counts half its score FLOPs (QK^T and PV: 2bs²h forward per
 * layer, not 4bs²h), whatever kernel runs it, as MFU is usually reported; the GEMMs count
 * 2 FLOPs per multiply-add; element-wise work counts nothing. GPT: 72·B·L·s·h²·(1 + s/(12h) +
 * v/(12hL)), which is Korthikanti et al.'s formula with half its s/(6h) attention term.
 * As a double: it overflows 64 bits beyond ~1T.
 */
double lynx_model_iter_flops(const struct lynx_model_desc *m);

/*
 * Hardware FLOPs per iteration under baseline r, what the kernels compute (attention as in
 * lynx_model_layer_fwd_flops()):
 *   NONE       three forwards of every layer, and the logits'
 *   FULL       one more forward of every layer; GPT: 96·B·L·s·h²·(1 + s/(6h) + v/(16hL))
 *   SELECTIVE  with unfused attention, Korthikanti et al.'s 72·B·L·s·h²·(1 + s/(3h) +
 *              v/(12hL)) as published: it charges 24·B·L·s²·h for attention, 8·B·L·s²·h
 *              more than the 12 + 4 that one extra forward of the core attention would cost;
 *              we reproduce the paper. With flash attention, one more flash forward.
 */
double lynx_model_iter_hw_flops(const struct lynx_model_desc *m, enum lynx_recompute r);

/*
 * Parameters of one layer, whole: QKV h(h + 2kd) (d = h/a, the head size), projection h²,
 * FC1 hf (2hf for SwiGLU's gate and up), FC2 fh, plus their biases, and two norms (2h each
 * for LayerNorm with bias, h otherwise). GPT: 12h² + 13h.
 */
uint64_t lynx_model_layer_params(const struct lynx_model_desc *m);

/* The share of one TP rank: weights and column-parallel biases split by t, the row-parallel
 * biases and norms replicated. GPT: (12h² + 7h)/t + 6h. */
uint64_t lynx_model_layer_params_per_rank(const struct lynx_model_desc *m);

/* Parameters of one norm (the layer's or the final one): 2h for LayerNorm with bias, else h. */
uint64_t lynx_model_norm_params(const struct lynx_model_desc *m);

/* Parameters of the model: L layers, the word embedding (v·h), learned positions (s·h), the
 * final norm, and an untied output layer (v·h); tied, it shares the word embedding. */
uint64_t lynx_model_params(const struct lynx_model_desc *m);

#endif /* LYNX_POLICY_MODEL_H */
