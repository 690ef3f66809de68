/* SPDX-License-Identifier: Apache-2.0 */
/* Korthikanti et al.'s memory and FLOP formulas on a GPT job description. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "refuse.h"
#include "model.h"

/* a·b·c, or false if it does not fit 64 bits. */
static bool mul3(uint64_t a, uint64_t b, uint64_t c, uint64_t *out)
{
	uint64_t ab;

	return !__builtin_mul_overflow(a, b, &ab) && !__builtin_mul_overflow(ab, c, out);
}

/* Whether the largest integers this file computes fit: 34·sbh and 5·as²b (activation bytes),
 * 24·bsh² + 4·bs²h (layer FLOPs), and L·(12h² + 13h) + (v + s)·h + 2h (parameters). */
static bool fits_64_bits(const struct lynx_model_desc *m)
{
	uint64_t sbh, as2b, dense, attn, flops, layer, params, x;

	return mul3(m->seq, m->micro_batch, m->hidden, &sbh) && mul3(sbh, 34, 1, &x) &&
	       mul3(m->heads, (uint64_t)m->seq * m->seq, m->micro_batch, &as2b) &&
	       mul3(as2b, 5, 1, &x) && mul3(sbh, m->hidden, 24, &dense) &&
	       mul3(sbh, m->seq, 4, &attn) && !__builtin_add_overflow(dense, attn, &flops) &&
	       mul3(m->hidden, m->hidden, 13, &layer) && mul3(layer, m->layers, 1, &params) &&
	       mul3((uint64_t)m->vocab + m->seq + 2, m->hidden, 1, &x) &&
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
	if (m->sp && m->seq % m->tp)
		return lynx_policy_refuse(
		        why, len,
		        "sequence parallelism splits the sequence: s=%u is not divisible by t=%u",
		        m->seq, m->tp);
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

uint32_t lynx_model_micro_batches(const struct lynx_model_desc *m)
{
	return m->global_batch / (m->micro_batch * m->dp);
}

uint32_t lynx_model_stage_layers(const struct lynx_model_desc *m)
{
	return m->layers / m->pp;
}

uint32_t lynx_model_inflight(const struct lynx_model_desc *m, uint32_t stage)
{
	uint32_t micro = lynx_model_micro_batches(m);

	if (stage >= m->pp)
		return 0;
	return m->pp - stage < micro ? m->pp - stage : micro;
}

static uint64_t sbh_of(const struct lynx_model_desc *m)
{
	return (uint64_t)m->seq * m->micro_batch * m->hidden;
}

static uint64_t as2b_of(const struct lynx_model_desc *m)
{
	return (uint64_t)m->heads * m->seq * m->seq * m->micro_batch;
}

/*
 * Every division below is exact: t divides a (validated) and a divides h, so t divides sbh
 * and as²b.
 */
uint64_t lynx_model_act_bytes(const struct lynx_model_desc *m, enum lynx_recompute r)
{
	uint64_t sbh = sbh_of(m), as2b = as2b_of(m), t = m->tp;

	switch (r) {
	case LYNX_RECOMPUTE_NONE:
		if (m->sp)
			return 34 * (sbh / t) + 5 * (as2b / t);
		return 10 * sbh + 24 * (sbh / t) + 5 * (as2b / t);
	case LYNX_RECOMPUTE_SELECTIVE:
		return m->sp ? 34 * (sbh / t) : 10 * sbh + 24 * (sbh / t);
	case LYNX_RECOMPUTE_FULL:
		return m->sp ? 2 * (sbh / t) : 2 * sbh;
	case LYNX_RECOMPUTE_COUNT:
		break;
	}
	return 0;
}

uint64_t lynx_model_group_bytes(const struct lynx_model_desc *m, enum lynx_group g)
{
	const struct lynx_layer_group_info *gi = &lynx_layer_groups[g];
	uint64_t div = gi->tp_split || m->sp ? m->tp : 1;

	return gi->sbh * (sbh_of(m) / div) + gi->as2b * (as2b_of(m) / div);
}

bool lynx_model_group_kept(enum lynx_group g, enum lynx_recompute r)
{
	const struct lynx_layer_group_info *gi = &lynx_layer_groups[g];

	switch (r) {
	case LYNX_RECOMPUTE_NONE:
		return true;
	case LYNX_RECOMPUTE_SELECTIVE:
		return gi->as2b == 0;
	case LYNX_RECOMPUTE_FULL:
		return gi->ops == 0;
	case LYNX_RECOMPUTE_COUNT:
		break;
	}
	return true;
}

uint64_t lynx_model_layer_fwd_flops(const struct lynx_model_desc *m)
{
	uint64_t sbh = sbh_of(m);

	return 24 * sbh * m->hidden + 4 * sbh * m->seq;
}

uint64_t lynx_model_op_fwd_flops(const struct lynx_model_desc *m, enum lynx_op op)
{
	const struct lynx_layer_op_info *oi = &lynx_layer_ops[op];
	uint64_t sbh = sbh_of(m);

	return (oi->flops_nh2 * sbh * m->hidden + oi->flops_bs2h * sbh * m->seq) / m->tp;
}

/* 72·B·L·s·h² · (1 + s/(6h)·k_s + v/(12hL)·k_v), expanded so that each term is exact up to
 * double rounding: 72BLsh² + 12·k_s·BLs²h + 6·k_v·Bshv. */
static double iter_flops(const struct lynx_model_desc *m, double dense, double attn, double logit)
{
	double B = m->global_batch, L = m->layers, s = m->seq, h = m->hidden, v = m->vocab;

	return dense * B * L * s * h * h + attn * B * L * s * s * h + logit * B * s * h * v;
}

double lynx_model_iter_flops(const struct lynx_model_desc *m)
{
	return iter_flops(m, 72, 12, 6);
}

double lynx_model_iter_hw_flops(const struct lynx_model_desc *m, enum lynx_recompute r)
{
	switch (r) {
	case LYNX_RECOMPUTE_NONE:
		break;
	case LYNX_RECOMPUTE_SELECTIVE:
		/* 72BLsh²·s/(3h) = 24BLs²h */
		return iter_flops(m, 72, 24, 6);
	case LYNX_RECOMPUTE_FULL:
		/* 96BLsh²·(1 + s/(6h) + v/(16hL)) = 96BLsh² + 16BLs²h + 6Bshv */
		return iter_flops(m, 96, 16, 6);
	case LYNX_RECOMPUTE_COUNT:
		break;
	}
	return lynx_model_iter_flops(m);
}

uint64_t lynx_model_layer_params(const struct lynx_model_desc *m)
{
	uint64_t h = m->hidden;

	return 12 * h * h + 13 * h;
}

uint64_t lynx_model_layer_params_per_rank(const struct lynx_model_desc *m)
{
	uint64_t h = m->hidden;

	return (12 * h * h + 7 * h) / m->tp + 6 * h;
}

uint64_t lynx_model_params(const struct lynx_model_desc *m)
{
	uint64_t h = m->hidden;

	return m->layers * lynx_model_layer_params(m) + ((uint64_t)m->vocab + m->seq) * h + 2 * h;
}
