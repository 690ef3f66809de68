/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A decoder layer's anatomy (layer.def) evaluated for one job, and the memory, FLOP and
 * parameter counts built on it; for GPT these are Korthikanti et al.'s formulas, exactly.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "refuse.h"
#include "model.h"

/* a·b·c, or false if it does not fit 64 bits. */
static bool mul3(uint64_t a, uint64_t b, uint64_t c, uint64_t *out)
{
	uint64_t ab;

	return !__builtin_mul_overflow(a, b, &ab) && !__builtin_mul_overflow(ab, c, out);
}

uint32_t lynx_model_cp(const struct lynx_model_desc *m)
{
	return m->cp ? m->cp : 1;
}

uint32_t lynx_model_vp(const struct lynx_model_desc *m)
{
	return m->vp ? m->vp : 1;
}

uint64_t lynx_model_tokens(const struct lynx_model_desc *m)
{
	return (uint64_t)m->seq / lynx_model_cp(m) * m->micro_batch;
}

uint32_t lynx_model_ffn(const struct lynx_model_desc *m)
{
	return m->arch.ffn ? m->arch.ffn : 4 * m->hidden;
}

uint32_t lynx_model_kv_heads(const struct lynx_model_desc *m)
{
	return m->arch.kv_heads ? m->arch.kv_heads : m->heads;
}

/* The widest row any GEMM of the layer reads or writes: QKV's h + 2kd, SwiGLU's 2f, or s. */
static uint64_t widest(const struct lynx_model_desc *m)
{
	uint64_t qkv = m->hidden + 2ull * lynx_model_kv_heads(m) * (m->hidden / m->heads);
	uint64_t f1 = 2ull * lynx_model_ffn(m), w = qkv > f1 ? qkv : f1;

	return w > m->seq ? w : m->seq;
}

/* Whether the largest integers this file computes fit: 34·sbh and 5·as²b (activation bytes),
 * 8·sbh·w for the widest GEMM w (layer FLOPs and operands), L·h·(4h + 3w) + (2v + s + 2)·h
 * (parameters). Called after the divisibility checks, so h/a is exact. */
static bool fits_64_bits(const struct lynx_model_desc *m)
{
	uint64_t sbh, as2b, flops, layer, params, x, w = widest(m);

	return mul3(m->seq, m->micro_batch, m->hidden, &sbh) && mul3(sbh, 34, 1, &x) &&
	       mul3(m->heads, (uint64_t)m->seq * m->seq, m->micro_batch, &as2b) &&
	       mul3(as2b, 5, 1, &x) && mul3(sbh, w, 8, &flops) &&
	       mul3(m->hidden, 4ull * m->hidden + 3 * w, 1, &layer) &&
	       mul3(layer, m->layers, 1, &params) &&
	       mul3(2ull * m->vocab + m->seq + 2, m->hidden, 1, &x) &&
	       !__builtin_add_overflow(params, x, &x);
}

/* lynx_model_validate(), with L % p == 0 checked only if even. */
static int validate(const struct lynx_model_desc *m, bool even, char *why, size_t len)
{
	const struct {
		const char *what;
		uint32_t value;
	} positive[] = {
	        {"layers L", m->layers},
	        {"hidden size h", m->hidden},
	        {"heads a", m->heads},
	        {"sequence length s", m->seq},
	        {"vocabulary v", m->vocab},
	        {"micro-batch b", m->micro_batch},
	        {"global batch B", m->global_batch},
	        {"tensor-parallel size t", m->tp},
	        {"pipeline size p", m->pp},
	        {"data-parallel size d", m->dp},
	};

	for (size_t i = 0; i < sizeof(positive) / sizeof(positive[0]); i++)
		if (!positive[i].value)
			return lynx_policy_refuse(why, len, "%s must be positive",
			                          positive[i].what);
	if (m->hidden % m->heads)
		return lynx_policy_refuse(
		        why, len, "hidden size h=%u is not divisible by the number of heads a=%u",
		        m->hidden, m->heads);
	if (m->heads % m->tp)
		return lynx_policy_refuse(
		        why, len, "heads a=%u are not divisible by the tensor-parallel size t=%u",
		        m->heads, m->tp);
	if ((unsigned)m->arch.mlp >= LYNX_MLP_COUNT || (unsigned)m->arch.norm >= LYNX_NORM_COUNT ||
	    (unsigned)m->arch.attention >= LYNX_ATTENTION_COUNT ||
	    (unsigned)m->arch.position >= LYNX_POSITION_COUNT)
		return lynx_policy_refuse(why, len,
		                          "unknown architecture choice (mlp %d, norm %d, "
		                          "attention %d, position %d)",
		                          m->arch.mlp, m->arch.norm, m->arch.attention,
		                          m->arch.position);
	if (m->heads % lynx_model_kv_heads(m))
		return lynx_policy_refuse(
		        why, len,
		        "key/value heads k=%u do not divide the attention heads a=%u "
		        "(grouped-query "
		        "attention shares each key/value head among a/k query heads)",
		        lynx_model_kv_heads(m), m->heads);
	if (lynx_model_kv_heads(m) % m->tp)
		return lynx_policy_refuse(
		        why, len,
		        "key/value heads k=%u are not divisible by the tensor-parallel size t=%u "
		        "(Megatron splits the query groups over the TP ranks)",
		        lynx_model_kv_heads(m), m->tp);
	if (lynx_model_ffn(m) % m->tp)
		return lynx_policy_refuse(
		        why, len,
		        "the MLP width f=%u is not divisible by the tensor-parallel size t=%u",
		        lynx_model_ffn(m), m->tp);
	if (lynx_model_cp(m) > 1 && m->arch.attention != LYNX_ATTENTION_FLASH)
		return lynx_policy_refuse(
		        why, len,
		        "context parallelism c=%u needs flash attention (Megatron runs it through "
		        "Transformer Engine's)",
		        lynx_model_cp(m));
	if (m->seq % (2ull * lynx_model_cp(m)) && lynx_model_cp(m) > 1)
		return lynx_policy_refuse(
		        why, len,
		        "context parallelism splits each sequence into 2c chunks: s=%u is not "
		        "divisible by 2c=%u",
		        m->seq, 2 * lynx_model_cp(m));
	if (m->pp > m->layers)
		return lynx_policy_refuse(why, len,
		                          "pipeline size p=%u exceeds the number of layers L=%u",
		                          m->pp, m->layers);
	if (even && m->layers % m->pp)
		return lynx_policy_refuse(
		        why, len,
		        "L=%u layers do not split evenly over p=%u pipeline stages "
		        "(uneven splits come from the partitioner)",
		        m->layers, m->pp);
	if ((uint64_t)m->global_batch % ((uint64_t)m->micro_batch * m->dp))
		return lynx_policy_refuse(
		        why, len,
		        "global batch B=%u is not a multiple of micro-batch b=%u times "
		        "data-parallel size d=%u",
		        m->global_batch, m->micro_batch, m->dp);
	if (lynx_model_vp(m) > 1) {
		uint32_t v = lynx_model_vp(m), micro = lynx_model_micro_batches(m);

		if (v > LYNX_MODEL_MAX_VP)
			return lynx_policy_refuse(
			        why, len, "virtual pipeline stages v=%u: at most %d are taken", v,
			        LYNX_MODEL_MAX_VP);
		if (m->pp < 2)
			return lynx_policy_refuse(why, len,
			                          "virtual pipeline stages v=%u need pipeline "
			                          "parallelism (p=%u)",
			                          v, m->pp);
		if (!even)
			return lynx_policy_refuse(
			        why, len,
			        "virtual pipeline stages v=%u take an even split of "
			        "the layers, not the partitioner's",
			        v);
		if (m->layers % ((uint64_t)m->pp * v))
			return lynx_policy_refuse(why, len,
			                          "L=%u layers do not split evenly into p·v=%llu "
			                          "model chunks",
			                          m->layers, (unsigned long long)m->pp * v);
		if (micro % m->pp)
			return lynx_policy_refuse(
			        why, len,
			        "interleaved 1F1B needs the micro-batches m=%u to be "
			        "a multiple of p=%u",
			        micro, m->pp);
	}
	if (m->sp && (m->seq / lynx_model_cp(m)) % m->tp)
		return lynx_policy_refuse(
		        why, len,
		        "sequence parallelism splits the sequence: s%s=%u is not divisible by t=%u",
		        lynx_model_cp(m) > 1 ? "/c" : "", m->seq / lynx_model_cp(m), m->tp);
	if (!fits_64_bits(m))
		return lynx_policy_refuse(
		        why, len,
		        "shape too large: per-layer byte, FLOP or parameter counts overflow "
		        "64 bits (L=%u, h=%u, a=%u, s=%u, v=%u, b=%u)",
		        m->layers, m->hidden, m->heads, m->seq, m->vocab, m->micro_batch);
	return 0;
}

int lynx_model_validate(const struct lynx_model_desc *m, char *why, size_t len)
{
	return validate(m, true, why, len);
}

int lynx_model_validate_split(const struct lynx_model_desc *m, const uint32_t *stage_layers,
                              char *why, size_t len)
{
	uint64_t sum = 0;
	int err = validate(m, false, why, len);

	for (uint32_t s = 0; !err && s < m->pp; s++) {
		if (!stage_layers[s])
			return lynx_policy_refuse(why, len, "pipeline stage %u has no layers", s);
		sum += stage_layers[s];
	}
	if (!err && sum != m->layers)
		return lynx_policy_refuse(
		        why, len, "the stages' layers add up to %llu, not to the model's L=%u",
		        (unsigned long long)sum, m->layers);
	return err;
}

const char *lynx_model_recompute_name(enum lynx_recompute r)
{
	static const char *const names[LYNX_RECOMPUTE_COUNT] = {
#define LYNX_RECOMPUTE_NAME(id, name) [LYNX_RECOMPUTE_##id] = name,
	        LYNX_RECOMPUTE_LIST(LYNX_RECOMPUTE_NAME)
#undef LYNX_RECOMPUTE_NAME
	};

	return (unsigned)r < LYNX_RECOMPUTE_COUNT ? names[r] : "unknown";
}

#define LYNX_ARCH_NAME(prefix, id, name) [LYNX_##prefix##_##id] = name,
#define LYNX_MLP_NAME(id, name) LYNX_ARCH_NAME(MLP, id, name)
#define LYNX_NORM_NAME(id, name) LYNX_ARCH_NAME(NORM, id, name)
#define LYNX_ATTENTION_NAME(id, name) LYNX_ARCH_NAME(ATTENTION, id, name)
#define LYNX_POSITION_NAME(id, name) LYNX_ARCH_NAME(POSITION, id, name)
static const char *const mlp_names[LYNX_MLP_COUNT] = {LYNX_MLP_LIST(LYNX_MLP_NAME)};
static const char *const norm_names[LYNX_NORM_COUNT] = {LYNX_NORM_LIST(LYNX_NORM_NAME)};
static const char *const attention_names[LYNX_ATTENTION_COUNT] = {
        LYNX_ATTENTION_LIST(LYNX_ATTENTION_NAME)};
static const char *const position_names[LYNX_POSITION_COUNT] = {
        LYNX_POSITION_LIST(LYNX_POSITION_NAME)};

static const char *name_of(const char *const *names, unsigned n, unsigned v)
{
	return v < n ? names[v] : "unknown";
}

/* The index of name in names[0..n), or n. */
static unsigned find_name(const char *const *names, unsigned n, const char *name)
{
	unsigned i = 0;

	while (i < n && strcmp(names[i], name))
		i++;
	return i;
}

const char *lynx_model_mlp_name(enum lynx_mlp v)
{
	return name_of(mlp_names, LYNX_MLP_COUNT, v);
}

const char *lynx_model_norm_name(enum lynx_norm v)
{
	return name_of(norm_names, LYNX_NORM_COUNT, v);
}

const char *lynx_model_attention_name(enum lynx_attention v)
{
	return name_of(attention_names, LYNX_ATTENTION_COUNT, v);
}

const char *lynx_model_position_name(enum lynx_position v)
{
	return name_of(position_names, LYNX_POSITION_COUNT, v);
}

enum lynx_mlp lynx_model_find_mlp(const char *name)
{
	return (enum lynx_mlp)find_name(mlp_names, LYNX_MLP_COUNT, name);
}

enum lynx_norm lynx_model_find_norm(const char *name)
{
	return (enum lynx_norm)find_name(norm_names, LYNX_NORM_COUNT, name);
}

enum lynx_attention lynx_model_find_attention(const char *name)
{
	return (enum lynx_attention)find_name(attention_names, LYNX_ATTENTION_COUNT, name);
}

enum lynx_position lynx_model_find_position(const char *name)
{
	return (enum lynx_position)find_name(position_names, LYNX_POSITION_COUNT, name);
}

uint32_t lynx_model_micro_batches(const struct lynx_model_desc *m)
{
	return m->global_batch / (m->micro_batch * m->dp);
}

uint32_t lynx_model_stage_layers(const struct lynx_model_desc *m)
{
	return m->layers / m->pp;
}

uint32_t lynx_model_chunk_warmup(const struct lynx_model_desc *m, uint32_t stage)
{
	uint64_t micro = lynx_model_micro_batches(m), v = lynx_model_vp(m), passes = micro * v;
	uint64_t w;

	if (stage >= m->pp)
		return 0;
	if (v == 1)
		w = m->pp - stage - 1;
	else if (micro == m->pp) /* Megatron runs every forward first then */
		w = passes;
	else
		w = 2ull * (m->pp - stage - 1) + (v - 1) * m->pp;
	return (uint32_t)(w < passes ? w : passes);
}

uint32_t lynx_model_inflight(const struct lynx_model_desc *m, uint32_t stage)
{
	uint64_t v = lynx_model_vp(m), passes = lynx_model_micro_batches(m) * v;
	uint64_t held = lynx_model_chunk_warmup(m, stage) + 1ull;

	if (stage >= m->pp)
		return 0;
	held = held < passes ? held : passes;
	return (uint32_t)((held + v - 1) / v);
}

/* The ops and groups of job m's layer, evaluated from layer.def (see its names). */
void lynx_model_layer(const struct lynx_model_desc *m, struct lynx_layer_shape *shape)
{
	const uint64_t t = m->tp, h = m->hidden, N = lynx_model_tokens(m);
	const uint64_t R = m->sp ? N / t : N, ht = h / t, dh = h / m->heads;
	const uint64_t kvt = lynx_model_kv_heads(m) * dh / t, ft = lynx_model_ffn(m) / t;
	const bool flash = m->arch.attention == LYNX_ATTENTION_FLASH;
	const bool swiglu = m->arch.mlp == LYNX_MLP_SWIGLU;
	const bool rotary = m->arch.position == LYNX_POSITION_ROTARY;
	const uint64_t dropout = !m->arch.no_dropout, bias = !m->arch.no_bias;
	const uint64_t kst = flash ? kvt : ht, f1t = swiglu ? 2 * ft : ft;
	const uint64_t A = m->heads * N / t, S = A * m->seq;
	const enum lynx_op_kind GEMM = LYNX_OP_KIND_GEMM, BGEMM = LYNX_OP_KIND_BGEMM;
	const enum lynx_op_kind FLASH = LYNX_OP_KIND_FLASH, EW = LYNX_OP_KIND_EW;
	const enum lynx_block ATTN = LYNX_BLOCK_ATTN, MLP = LYNX_BLOCK_MLP, NORM = LYNX_BLOCK_NORM;
	uint32_t present_ops = 0, present_groups = 0;

	*shape = (struct lynx_layer_shape){0};
#define LYNX_LAYER_OP(id, op_name, op_kind, when, op_flops, operands, fwd_ew, bwd_ew) \
	if (when) {                                                                   \
		shape->ops[LYNX_OP_##id] = (struct lynx_layer_op_shape){              \
		        .name = op_name,                                              \
		        .kind = op_kind,                                              \
		        .present = true,                                              \
		        .flops = op_flops,                                            \
		        .operand_bytes = operands,                                    \
		        .fwd_ew_bytes = fwd_ew,                                       \
		        .bwd_ew_bytes = bwd_ew,                                       \
		};                                                                    \
		present_ops |= LYNX_OPS(id);                                          \
	}
#include "layer.def"
#define LYNX_LAYER_GROUP(id, group_name, group_block, when, group_bytes, op_mask, comm_mask,     \
                         dep_mask, reader_mask)                                                  \
	shape->groups[LYNX_GROUP_##id] = (struct lynx_layer_group_shape){                        \
	        .name = group_name,                                                              \
	        .block = group_block,                                                            \
	        .present = (when),                                                               \
	        .bytes = (when) ? (group_bytes) : 0,                                             \
	        .ops = (op_mask)&present_ops,                                                    \
	        .comms = comm_mask,                                                              \
	        .deps = dep_mask,                                                                \
	        .readers = (reader_mask)&present_ops,                                            \
	        .consumer = (enum lynx_op)__builtin_ctz(((reader_mask)&present_ops) | 1u << 31), \
	};                                                                                       \
	if (when)                                                                                \
		present_groups |= LYNX_GROUPS(id);
#include "layer.def"
	/* An absent dependency stands for its own deps (without dropout, the context GEMM
	 * reads the softmax output: DROPOUT_OUT -> SOFTMAX_OUT); deps come first, so the
	 * substitution ends. */
	for (int g = 0; g < LYNX_GROUP_COUNT; g++) {
		struct lynx_layer_group_shape *gs = &shape->groups[g];
		uint32_t absent;

		while ((absent = gs->deps & ~present_groups)) {
			int d = __builtin_ctz(absent);

			gs->deps = (gs->deps & ~(1u << d)) | shape->groups[d].deps;
		}
	}
	for (int g = 0; g < LYNX_GROUP_COUNT; g++)
		if (!(present_groups & (1u << g)))
			shape->groups[g].ops = shape->groups[g].comms = shape->groups[g].deps =
			        shape->groups[g].readers = 0;
}

/* Whether baseline r keeps group g of shape (lynx_model_group_kept()). Selective drops what
 * the core attention alone makes and alone reads: not its output, which the projection
 * reads too. */
static bool kept_in(const struct lynx_layer_shape *shape, enum lynx_group g, enum lynx_recompute r)
{
	const struct lynx_layer_group_shape *gs = &shape->groups[g];

	switch (r) {
	case LYNX_RECOMPUTE_NONE:
		return true;
	case LYNX_RECOMPUTE_SELECTIVE:
		return !gs->ops || ((gs->ops | gs->readers) & ~LYNX_CORE_ATTENTION_OPS);
	case LYNX_RECOMPUTE_FULL:
		return gs->ops == 0;
	case LYNX_RECOMPUTE_COUNT:
		break;
	}
	return true;
}

uint64_t lynx_model_act_bytes(const struct lynx_model_desc *m, enum lynx_recompute r)
{
	struct lynx_layer_shape shape;
	uint64_t sum = 0;

	lynx_model_layer(m, &shape);
	for (int g = 0; g < LYNX_GROUP_COUNT; g++)
		if (shape.groups[g].present && kept_in(&shape, g, r))
			sum += shape.groups[g].bytes;
	return sum;
}

uint64_t lynx_model_group_bytes(const struct lynx_model_desc *m, enum lynx_group g)
{
	struct lynx_layer_shape shape;

	lynx_model_layer(m, &shape);
	return shape.groups[g].bytes;
}

bool lynx_model_group_kept(const struct lynx_model_desc *m, enum lynx_group g,
                           enum lynx_recompute r)
{
	struct lynx_layer_shape shape;

	lynx_model_layer(m, &shape);
	return kept_in(&shape, g, r);
}

uint64_t lynx_model_op_fwd_flops(const struct lynx_model_desc *m, enum lynx_op op)
{
	struct lynx_layer_shape shape;

	lynx_model_layer(m, &shape);
	return shape.ops[op].flops;
}

uint64_t lynx_model_layer_fwd_flops(const struct lynx_model_desc *m)
{
	struct lynx_layer_shape shape;
	uint64_t sum = 0;

	lynx_model_layer(m, &shape);
	for (int op = 0; op < LYNX_OP_COUNT; op++)
		sum += shape.ops[op].flops;
	return sum * m->tp * lynx_model_cp(m);
}

/* Forward FLOPs of one layer and micro-batch over all TP ranks, split into the core
 * attention's (as computed) and the rest. */
static void layer_flops(const struct lynx_model_desc *m, double *dense, double *attention)
{
	struct lynx_layer_shape shape;

	lynx_model_layer(m, &shape);
	*dense = *attention = 0;
	for (int op = 0; op < LYNX_OP_COUNT; op++)
		*(LYNX_CORE_ATTENTION_OPS & (1u << op) ? attention : dense) +=
		        (double)shape.ops[op].flops * m->tp * lynx_model_cp(m);
}

/* Per iteration: (B/b) micro-batches of L layers, the dense part (forward FLOPs `dense`)
 * run `layer_passes` times and the attention (`attention`, as counted) `attention_passes`
 * times, plus the logits, a [N, h] x [h, v] GEMM forward and twice backward. */
static double iter_flops(const struct lynx_model_desc *m, double dense, double layer_passes,
                         double attention, double attention_passes)
{
	double micro = (double)m->global_batch / m->micro_batch;

	return micro * m->layers * (layer_passes * dense + attention_passes * attention) +
	       3.0 * 2 * m->global_batch * m->seq * (double)m->hidden * m->vocab;
}

double lynx_model_iter_flops(const struct lynx_model_desc *m)
{
	/* Causal: half of QK^T and PV's 4bs²h forward, three passes. */
	double causal = 2.0 * m->micro_batch * m->seq * (double)m->seq * m->hidden;
	double dense, computed;

	layer_flops(m, &dense, &computed);
	return iter_flops(m, dense, 3, causal, 3);
}

double lynx_model_iter_hw_flops(const struct lynx_model_desc *m, enum lynx_recompute r)
{
	double dense, computed;

	layer_flops(m, &dense, &computed);
	switch (r) {
	case LYNX_RECOMPUTE_NONE:
		break;
	case LYNX_RECOMPUTE_SELECTIVE:
		/* The paper's unfused charge: three more attention forwards; flash: one. */
		return iter_flops(m, dense, 3, computed,
		                  m->arch.attention == LYNX_ATTENTION_FLASH ? 4 : 6);
	case LYNX_RECOMPUTE_FULL:
		return iter_flops(m, dense, 4, computed, 4);
	case LYNX_RECOMPUTE_COUNT:
		break;
	}
	return iter_flops(m, dense, 3, computed, 3);
}

uint64_t lynx_model_norm_params(const struct lynx_model_desc *m)
{
	bool with_bias = m->arch.norm == LYNX_NORM_LAYERNORM && !m->arch.no_bias;

	return (with_bias ? 2ull : 1ull) * m->hidden;
}

/* The layer's split weights (QKV, projection, FC1, FC2) and column-parallel biases, whole. */
static uint64_t split_params(const struct lynx_model_desc *m)
{
	uint64_t h = m->hidden, f = lynx_model_ffn(m);
	uint64_t qkv = h + 2ull * lynx_model_kv_heads(m) * (h / m->heads);
	uint64_t f1 = m->arch.mlp == LYNX_MLP_SWIGLU ? 2 * f : f, bias = !m->arch.no_bias;

	return h * qkv + h * h + h * f1 + f * h + bias * (qkv + f1);
}

/* The row-parallel biases (projection, FC2) and the two norms, replicated on every TP rank. */
static uint64_t replicated_params(const struct lynx_model_desc *m)
{
	return (m->arch.no_bias ? 0 : 2ull * m->hidden) + 2 * lynx_model_norm_params(m);
}

uint64_t lynx_model_layer_params(const struct lynx_model_desc *m)
{
	return split_params(m) + replicated_params(m);
}

uint64_t lynx_model_layer_params_per_rank(const struct lynx_model_desc *m)
{
	return split_params(m) / m->tp + replicated_params(m);
}

uint64_t lynx_model_params(const struct lynx_model_desc *m)
{
	uint64_t h = m->hidden, word = (uint64_t)m->vocab * h;
	uint64_t positions = m->arch.position == LYNX_POSITION_LEARNED ? (uint64_t)m->seq * h : 0;

	return m->layers * lynx_model_layer_params(m) + word + positions +
	       lynx_model_norm_params(m) + (m->arch.untied ? word : 0);
}
