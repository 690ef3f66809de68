/* SPDX-License-Identifier: Apache-2.0 */
/* policy/model: Korthikanti et al.'s activation-memory and FLOP formulas, exactly, for GPT;
 * the same layer description for Llama shapes, flash attention and GQA. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "model.h"
#include "presets.h"

static struct lynx_model_desc shape(uint32_t L, uint32_t h, uint32_t a, uint32_t s, uint32_t b,
                                    uint32_t t, bool sp)
{
	return (struct lynx_model_desc){
	        .layers = L,
	        .hidden = h,
	        .heads = a,
	        .seq = s,
	        .vocab = 51200,
	        .micro_batch = b,
	        .global_batch = b,
	        .tp = t,
	        .pp = 1,
	        .dp = 1,
	        .sp = sp,
	};
}

/* Korthikanti et al.'s 22B model (Table 3) as run for their per-layer timings. */
static struct lynx_model_desc gpt22b(uint32_t t, bool sp)
{
	return shape(48, 6144, 64, 2048, 4, t, sp);
}

/* Llama-7B (SwiGLU 11008, RMSNorm, no biases or dropout, rotary, untied, 32 heads of
 * 128) with flash attention, at sequence length s and micro-batch b, over t ranks. */
static struct lynx_model_desc llama(uint32_t t, uint32_t s, uint32_t b)
{
	struct lynx_model_desc m = shape(32, 4096, 32, s, b, t, false);

	m.vocab = 32000;
	m.arch = (struct lynx_layer_arch){
	        .mlp = LYNX_MLP_SWIGLU,
	        .norm = LYNX_NORM_RMSNORM,
	        .attention = LYNX_ATTENTION_FLASH,
	        .position = LYNX_POSITION_ROTARY,
	        .ffn = 11008,
	        .no_bias = true,
	        .no_dropout = true,
	        .untied = true,
	};
	return m;
}

/*
 * Table 2 for the 22B layer, by hand: sbh = 2048·4·6144 = 50,331,648 and
 * as²b = 64·2048²·4 = 1,073,741,824, so with t = 8:
 *   no parallelism (t = 1)  34·sbh + 5·as²b                 = 7,079,985,152
 *   tensor parallel         10·sbh + 24·sbh/8 + 5·as²b/8     = 1,325,400,064
 *   tensor + sequence       34·sbh/8 + 5·as²b/8              =   884,998,144
 *   TP + selective          10·sbh + 24·sbh/8                =   654,311,424
 *   TP + SP + selective     34·sbh/8                         =   213,909,504
 *   full recompute          2·sbh                            =   100,663,296
 */
static void test_act_bytes_match_table2_for_the_22b_layer(void **state)
{
	struct lynx_model_desc none = gpt22b(1, false), tp = gpt22b(8, false),
	                       tpsp = gpt22b(8, true);

	assert_int_equal(lynx_model_act_bytes(&none, LYNX_RECOMPUTE_NONE), 7079985152ull);
	assert_int_equal(lynx_model_act_bytes(&tp, LYNX_RECOMPUTE_NONE), 1325400064ull);
	assert_int_equal(lynx_model_act_bytes(&tpsp, LYNX_RECOMPUTE_NONE), 884998144ull);
	assert_int_equal(lynx_model_act_bytes(&tp, LYNX_RECOMPUTE_SELECTIVE), 654311424ull);
	assert_int_equal(lynx_model_act_bytes(&tpsp, LYNX_RECOMPUTE_SELECTIVE), 213909504ull);
	assert_int_equal(lynx_model_act_bytes(&tp, LYNX_RECOMPUTE_FULL), 100663296ull);
	assert_int_equal(lynx_model_act_bytes(&none, LYNX_RECOMPUTE_FULL), 100663296ull);
}

/* Shapes over the papers' range, with every t that divides a, and odd micro-batches. */
static const struct lynx_model_desc shapes[] = {
        {24, 2048, 16, 2048, 51200, 1, 1, 1, 1, 1, 0, false, {0}, 0}, /* gpt-1.3b */
        {24, 2048, 16, 2048, 51200, 3, 3, 2, 1, 1, 0, false, {0}, 0},
        {32, 2560, 32, 2048, 51200, 2, 2, 4, 1, 1, 0, false, {0}, 0},
        {40, 5120, 40, 2048, 51200, 1, 1, 8, 1, 1, 0, false, {0}, 0},
        {44, 6144, 64, 1024, 51200, 5, 5, 4, 1, 1, 0, false, {0}, 0},
        {96, 12288, 96, 2048, 51200, 1, 1, 8, 1, 1, 0, false, {0}, 0},   /* 175B */
        {105, 20480, 128, 2048, 51200, 1, 1, 8, 1, 1, 0, false, {0}, 0}, /* 530B */
        {128, 25600, 160, 2048, 51200, 1, 1, 8, 1, 1, 0, false, {0}, 0}, /* 1T */
        {2, 64, 4, 16, 100, 7, 7, 2, 1, 1, 0, false, {0}, 0},
};

/*
 * Table 2's rows, each written over one common denominator h·t so that the check shares no
 * arithmetic with model.c: e.g. sbh·(10 + 24/t + 5as/(ht)) = sbh·(10ht + 24h + 5as)/(ht).
 */
static uint64_t table2(const struct lynx_model_desc *m, bool sp, enum lynx_recompute r)
{
	unsigned __int128 sbh = (unsigned __int128)m->seq * m->micro_batch * m->hidden;
	unsigned __int128 h = m->hidden, t = m->tp, as = (unsigned __int128)m->heads * m->seq;
	unsigned __int128 num;

	if (r == LYNX_RECOMPUTE_FULL)
		return (uint64_t)(sp ? 2 * sbh / t : 2 * sbh);
	if (r == LYNX_RECOMPUTE_SELECTIVE)
		num = sp ? 34 * h : 10 * h * t + 24 * h;
	else
		num = sp ? 34 * h + 5 * as : 10 * h * t + 24 * h + 5 * as;
	assert_true(sbh * num % (h * t) == 0);
	return (uint64_t)(sbh * num / (h * t));
}

static void test_act_bytes_match_table2_for_many_shapes(void **state)
{
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		for (int sp = 0; sp <= 1; sp++) {
			struct lynx_model_desc m = shapes[i];

			m.sp = sp;
			assert_int_equal(lynx_model_validate(&m, NULL, 0), 0);
			for (int r = 0; r < LYNX_RECOMPUTE_COUNT; r++)
				assert_int_equal(lynx_model_act_bytes(&m, r), table2(&m, sp, r));
		}
	}
}

/* With t = 1 the TP row is the no-parallelism row: sbh(34 + 5as/h). */
static void test_tp_row_with_one_rank_is_the_no_parallelism_row(void **state)
{
	struct lynx_model_desc m = shapes[0];
	uint64_t sbh = 2048ull * 1 * 2048;

	assert_int_equal(lynx_model_act_bytes(&m, LYNX_RECOMPUTE_NONE),
	                 34 * sbh + 5ull * 16 * 2048 * 2048 * 1);
}

/* Section 4.1's breakdown without parallelism: attention 11sbh + 5as²b (QKV input 2sbh,
 * Q and K 4sbh, softmax 2as²b, its mask as²b, its dropout 2as²b, V 2sbh, projection input
 * 2sbh, mask sbh), MLP 19sbh (2 + 8 + 8 + 1), LayerNorms 4sbh. */
static void test_groups_follow_korthikanti_breakdown(void **state)
{
	struct lynx_model_desc m = gpt22b(1, false);
	const uint64_t sbh = 50331648ull, as2b = 1073741824ull;
	uint64_t block[3] = {0, 0, 0};

	assert_int_equal(lynx_model_group_bytes(&m, LYNX_GROUP_QKV_IN), 2 * sbh);
	assert_int_equal(lynx_model_group_bytes(&m, LYNX_GROUP_Q_K), 4 * sbh);
	assert_int_equal(lynx_model_group_bytes(&m, LYNX_GROUP_SOFTMAX_OUT), 2 * as2b);
	assert_int_equal(lynx_model_group_bytes(&m, LYNX_GROUP_SOFTMAX_MASK), as2b);
	assert_int_equal(lynx_model_group_bytes(&m, LYNX_GROUP_DROPOUT_OUT), 2 * as2b);
	assert_int_equal(lynx_model_group_bytes(&m, LYNX_GROUP_V), 2 * sbh);
	assert_int_equal(lynx_model_group_bytes(&m, LYNX_GROUP_PROJ_IN), 2 * sbh);
	assert_int_equal(lynx_model_group_bytes(&m, LYNX_GROUP_ATTN_MASK), sbh);
	assert_int_equal(lynx_model_group_bytes(&m, LYNX_GROUP_FC1_IN), 2 * sbh);
	assert_int_equal(lynx_model_group_bytes(&m, LYNX_GROUP_ACT_IN), 8 * sbh);
	assert_int_equal(lynx_model_group_bytes(&m, LYNX_GROUP_FC2_IN), 8 * sbh);
	assert_int_equal(lynx_model_group_bytes(&m, LYNX_GROUP_MLP_MASK), sbh);
	struct lynx_layer_shape shape;

	lynx_model_layer(&m, &shape);
	for (int g = 0; g < LYNX_GROUP_COUNT; g++)
		block[shape.groups[g].block] += shape.groups[g].bytes;
	assert_int_equal(block[LYNX_BLOCK_ATTN], 11 * sbh + 5 * as2b);
	assert_int_equal(block[LYNX_BLOCK_MLP], 19 * sbh);
	assert_int_equal(block[LYNX_BLOCK_NORM], 4 * sbh);
}

/* Under TP the replicated groups (10sbh) stay whole and the rest shrink by t; under SP all
 * shrink. */
static void test_tensor_parallelism_splits_only_the_sharded_groups(void **state)
{
	struct lynx_model_desc tp = gpt22b(8, false), sp = gpt22b(8, true);
	const uint64_t sbh = 50331648ull;

	assert_int_equal(lynx_model_group_bytes(&tp, LYNX_GROUP_LN1_IN), 2 * sbh);
	assert_int_equal(lynx_model_group_bytes(&tp, LYNX_GROUP_ATTN_MASK), sbh);
	assert_int_equal(lynx_model_group_bytes(&tp, LYNX_GROUP_ACT_IN), sbh);
	assert_int_equal(lynx_model_group_bytes(&sp, LYNX_GROUP_LN1_IN), sbh / 4);
	assert_int_equal(lynx_model_group_bytes(&sp, LYNX_GROUP_ATTN_MASK), sbh / 8);
}

static void test_baselines_keep_what_megatron_keeps(void **state)
{
	struct lynx_model_desc m = gpt22b(8, false), flash = llama(8, 4096, 1);

	for (int g = 0; g < LYNX_GROUP_COUNT; g++) {
		bool scores = g == LYNX_GROUP_SOFTMAX_OUT || g == LYNX_GROUP_SOFTMAX_MASK ||
		              g == LYNX_GROUP_DROPOUT_OUT;

		assert_true(lynx_model_group_kept(&m, g, LYNX_RECOMPUTE_NONE));
		assert_int_equal(lynx_model_group_kept(&m, g, LYNX_RECOMPUTE_SELECTIVE), !scores);
		assert_int_equal(lynx_model_group_kept(&m, g, LYNX_RECOMPUTE_FULL),
		                 g == LYNX_GROUP_LN1_IN);
	}
	/* Flash attention keeps no scores: selective recomputation drops its log-sum-exp,
	 * 4·a·s·b bytes, and nothing else. */
	assert_int_equal(lynx_model_act_bytes(&flash, LYNX_RECOMPUTE_NONE) -
	                         lynx_model_act_bytes(&flash, LYNX_RECOMPUTE_SELECTIVE),
	                 4ull * 32 / 8 * 4096);
}

/* Every architecture the description has, for the structural checks below. */
static struct lynx_model_desc variant(unsigned bits)
{
	struct lynx_model_desc m = shape(4, 256, 8, 64, 2, 2, bits & 64);

	m.arch = (struct lynx_layer_arch){
	        .mlp = bits & 1 ? LYNX_MLP_SWIGLU : LYNX_MLP_GELU,
	        .norm = bits & 2 ? LYNX_NORM_RMSNORM : LYNX_NORM_LAYERNORM,
	        .attention = bits & 4 ? LYNX_ATTENTION_FLASH : LYNX_ATTENTION_UNFUSED,
	        .position = bits & 8 ? LYNX_POSITION_ROTARY : LYNX_POSITION_LEARNED,
	        .no_bias = bits & 16,
	        .no_dropout = bits & 32,
	        .kv_heads = bits & 4 ? 2 : 0,
	        .ffn = bits & 1 ? 688 : 0,
	};
	return m;
}

/*
 * In every architecture, rebuilding a group may only need present groups produced before
 * it, so recomputation follows the forward order and the dependency graph has no cycle; it
 * reruns present ops; its consumer is present and comes at or before its deps' consumers in
 * forward order (a rebuilt dependency is still needed). GPT has every op and group but
 * none; the names within one layer differ.
 */
static void test_every_architecture_is_a_forward_ordered_dag(void **state)
{
	for (unsigned bits = 0; bits < 128; bits++) {
		struct lynx_model_desc m = variant(bits);
		struct lynx_layer_shape shape;
		uint32_t ops = 0, groups = 0;

		assert_int_equal(lynx_model_validate(&m, NULL, 0), 0);
		lynx_model_layer(&m, &shape);
		for (int op = 0; op < LYNX_OP_COUNT; op++)
			ops |= (uint32_t)shape.ops[op].present << op;
		for (int g = 0; g < LYNX_GROUP_COUNT; g++)
			groups |= (uint32_t)shape.groups[g].present << g;
		for (int g = 0; g < LYNX_GROUP_COUNT; g++) {
			const struct lynx_layer_group_shape *gs = &shape.groups[g];

			if (!gs->present)
				continue;
			assert_true(gs->bytes > 0);
			assert_int_equal(gs->deps >> g, 0);
			assert_int_equal(gs->deps & ~groups, 0);
			assert_int_equal(gs->ops & ~ops, 0);
			assert_int_equal(gs->ops == 0, g == LYNX_GROUP_LN1_IN);
			assert_int_equal(gs->comms >> LYNX_COMM_COUNT, 0);
			assert_true(gs->consumer >= 0 && gs->consumer < LYNX_OP_COUNT);
			assert_true(ops & (1u << gs->consumer));
			for (int d = 0; d < g; d++)
				if (gs->deps & (1u << d))
					assert_true(shape.groups[d].consumer <= gs->consumer);
			for (int other = 0; other < g; other++)
				if (shape.groups[other].present)
					assert_string_not_equal(shape.groups[other].name, gs->name);
		}
		if (bits == 0 || bits == 64) {
			assert_int_equal(ops, (1u << LYNX_OP_COUNT) - 1);
			assert_int_equal(groups, (1u << LYNX_GROUP_COUNT) - 1);
		}
	}
}

struct bad_case {
	struct lynx_model_desc m;
	const char *reason;
};

static void test_validate_refuses_bad_jobs_with_a_reason(void **state)
{
	struct lynx_model_desc ok = gpt22b(8, true);
	struct bad_case bad[] = {
	        {ok, "layers L must be positive"},
	        {ok, "h=6000 is not divisible by the number of heads a=64"},
	        {ok, "heads a=64 are not divisible by the tensor-parallel size t=3"},
	        {ok, "p=49 exceeds the number of layers L=48"},
	        {ok, "L=48 layers do not split evenly over p=5"},
	        {ok, "global batch B=6 is not a multiple of micro-batch b=4"},
	        {ok, "s=2047 is not divisible by t=8"},
	        {ok, "overflow 64 bits"},
	        {ok, "tensor-parallel size t must be positive"},
	        {ok, "key/value heads k=5 do not divide the attention heads a=64"},
	        {ok, "key/value heads k=4 are not divisible by the tensor-parallel size t=8"},
	        {ok, "MLP width f=1001 is not divisible by the tensor-parallel size t=8"},
	        {ok, "unknown architecture choice"},
	        {ok, "context parallelism c=2 needs flash attention"},
	        {ok, "s=2048 is not divisible by 2c=4096"},
	        {ok, "s/c=256 is not divisible by t=3"},
	};
	char why[256];

	bad[0].m.layers = 0;
	bad[1].m.hidden = 6000;
	bad[2].m.tp = 3;
	bad[3].m.pp = 49;
	bad[4].m.pp = 5;
	bad[5].m.global_batch = 6;
	bad[6].m.seq = 2047;
	bad[7].m.micro_batch = 1u << 31;
	bad[7].m.global_batch = 1u << 31;
	bad[8].m.tp = 0;
	bad[9].m.arch.kv_heads = 5;
	bad[10].m.arch.kv_heads = 4;
	bad[11].m.arch.ffn = 1001;
	bad[12].m.arch.attention = LYNX_ATTENTION_COUNT;
	bad[13].m.cp = 2;
	bad[14].m.cp = 2048;
	bad[14].m.arch.attention = LYNX_ATTENTION_FLASH;
	bad[15].m.cp = 8;
	bad[15].m.tp = 3;
	bad[15].m.heads = 63;
	bad[15].m.hidden = 63 * 96;
	bad[15].m.arch.attention = LYNX_ATTENTION_FLASH;
	assert_int_equal(lynx_model_validate(&ok, why, sizeof(why)), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		strcpy(why, "");
		assert_int_equal(lynx_model_validate(&bad[i].m, why, sizeof(why)), -EINVAL);
		if (!strstr(why, bad[i].reason))
			fail_msg("case %zu: reason \"%s\" lacks \"%s\"", i, why, bad[i].reason);
	}
	/* The same job is fine without sequence parallelism, and why may be NULL. */
	bad[6].m.sp = false;
	assert_int_equal(lynx_model_validate(&bad[6].m, NULL, 0), 0);
	assert_int_equal(lynx_model_validate(&bad[0].m, NULL, 0), -EINVAL);
}

/* 24bsh² + 4bs²h for the 22B layer: 24·4·2048·6144² + 4·4·2048²·6144 = 7,834,020,347,904. */
static void test_layer_flops_match_the_appendix(void **state)
{
	struct lynx_model_desc m = gpt22b(1, false);

	assert_int_equal(lynx_model_layer_fwd_flops(&m), 7834020347904ull);
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		uint64_t sum = 0;

		for (int op = 0; op < LYNX_OP_COUNT; op++)
			sum += lynx_model_op_fwd_flops(&shapes[i], op);
		assert_int_equal(sum * shapes[i].tp, lynx_model_layer_fwd_flops(&shapes[i]));
	}
}

static void assert_close(double got, double want, double rel)
{
	if (fabs(got - want) > rel * fabs(want))
		fail_msg("got %.17g, want %.17g (relative tolerance %g)", got, want, rel);
}

/*
 * 22B, B = 4. Model FLOPs, causal attention counted at half: 72·4·48·2048·6144²·(1 +
 * 2048/(12·6144) + 51200/(12·6144·48)) = 1,113,873,998,413,824. Hardware FLOPs, as the paper's
 * appendix (unfused attention computes every score): 72·…·(1 + s/(6h) + v/(12hL)) =
 * 1,143,560,812,363,776; full recomputation 96·…·(1 + s/(6h) + v/(16hL)) =
 * 1,519,593,789,063,168; selective 72·…·(1 + s/(3h) + v/(12hL)) = 1,202,934,440,263,680.
 */
static void test_iteration_flops_match_the_appendix(void **state)
{
	struct lynx_model_desc m = gpt22b(8, false);
	double layer = (double)lynx_model_layer_fwd_flops(&m), micro = 4.0 / 4.0;
	double logits = 6.0 * 4 * 2048 * 6144 * 51200, masked = 2.0 * 4 * 2048 * 2048 * 6144;

	assert_close(lynx_model_iter_flops(&m), 1113873998413824.0, 1e-15);
	assert_close(lynx_model_iter_hw_flops(&m, LYNX_RECOMPUTE_NONE), 1143560812363776.0, 1e-15);
	assert_close(lynx_model_iter_hw_flops(&m, LYNX_RECOMPUTE_FULL), 1519593789063168.0, 1e-15);
	assert_close(lynx_model_iter_hw_flops(&m, LYNX_RECOMPUTE_SELECTIVE), 1202934440263680.0,
	             1e-15);
	/* Three passes of every layer plus the logits; the model FLOPs leave out the masked
	 * half of the scores; full recomputation adds one more forward of every layer. */
	assert_close(lynx_model_iter_hw_flops(&m, LYNX_RECOMPUTE_NONE),
	             3 * 48 * micro * layer + logits, 1e-15);
	assert_close(lynx_model_iter_flops(&m), 3 * 48 * micro * (layer - masked) + logits, 1e-15);
	assert_close(lynx_model_iter_hw_flops(&m, LYNX_RECOMPUTE_FULL),
	             4 * 48 * micro * layer + logits, 1e-15);
	/* Scales with the global batch. */
	m.global_batch = 8;
	assert_close(lynx_model_iter_flops(&m), 2 * 1113873998413824.0, 1e-15);
}

/*
 * Flash attention computes only the unmasked half of the scores, so its hardware FLOPs are
 * the model FLOPs; the model FLOPs do not depend on the kernel. Llama-7B's layer at s = 4096,
 * b = 1: 2N(h(h + 2kd) + h² + 2hf + fh) + 2bs²h.
 */
static void test_flash_computes_what_the_model_flops_count(void **state)
{
	struct lynx_model_desc flash = llama(1, 4096, 1), unfused = flash;
	const double N = 4096, h = 4096, f = 11008;
	double dense = 2 * N * (h * 3 * h + h * h + 2 * h * f + f * h);

	unfused.arch.attention = LYNX_ATTENTION_UNFUSED;
	assert_close((double)lynx_model_layer_fwd_flops(&flash), dense + 2 * N * N * h, 1e-15);
	assert_close((double)lynx_model_layer_fwd_flops(&unfused), dense + 4 * N * N * h, 1e-15);
	assert_close(lynx_model_iter_flops(&flash), lynx_model_iter_flops(&unfused), 1e-15);
	assert_close(lynx_model_iter_hw_flops(&flash, LYNX_RECOMPUTE_NONE),
	             lynx_model_iter_flops(&flash), 1e-15);
	assert_true(lynx_model_iter_hw_flops(&unfused, LYNX_RECOMPUTE_NONE) >
	            lynx_model_iter_flops(&unfused));
}

/*
 * A Llama layer with flash attention keeps no s² term. Per layer and micro-batch, t = 1:
 * norms' and QKV's inputs 8sbh, Q and K 2sbh(1 + k/a), V 2sbh·k/a, the output 2sbh, the
 * log-sum-exp 4asb, SwiGLU's gate and up 4sbf and FC2's input 2sbf. Under TP the norms'
 * inputs stay whole (8sbh) and the rest shrink by t; GQA shrinks K and V by a/k.
 */
static void test_llama_layers_keep_what_flash_and_swiglu_keep(void **state)
{
	struct lynx_model_desc m = llama(1, 4096, 1), gqa = llama(8, 4096, 2);
	const uint64_t sbh = 4096ull * 4096, sbf = 4096ull * 11008, asb = 32ull * 4096;
	struct lynx_layer_shape shape;

	assert_int_equal(lynx_model_act_bytes(&m, LYNX_RECOMPUTE_NONE),
	                 8 * sbh + 4 * sbh + 2 * sbh + 2 * sbh + 4 * asb + 4 * sbf + 2 * sbf);
	assert_int_equal(lynx_model_act_bytes(&m, LYNX_RECOMPUTE_FULL), 2 * sbh);
	lynx_model_layer(&m, &shape);
	assert_string_equal(shape.groups[LYNX_GROUP_SOFTMAX_OUT].name, "lse");
	assert_string_equal(shape.groups[LYNX_GROUP_ACT_IN].name, "swiglu_in");
	assert_string_equal(shape.ops[LYNX_OP_SCORES].name, "flash_attn");
	assert_int_equal(shape.ops[LYNX_OP_SCORES].kind, LYNX_OP_KIND_FLASH);
	assert_false(shape.groups[LYNX_GROUP_SOFTMAX_MASK].present);
	assert_false(shape.groups[LYNX_GROUP_ATTN_MASK].present);
	assert_false(shape.ops[LYNX_OP_SOFTMAX].present);
	/* Flash's output is read by its own backward too: freed after it, not after the
	 * projection's; rebuilding it reruns flash from Q, K and V. */
	assert_int_equal(shape.groups[LYNX_GROUP_PROJ_IN].consumer, LYNX_OP_SCORES);
	assert_int_equal(shape.groups[LYNX_GROUP_PROJ_IN].deps, LYNX_GROUPS(Q_K) | LYNX_GROUPS(V));
	/* Llama 2 70B's grouping, 8 key/value heads for 64, on 8 ranks at b = 2. */
	gqa.hidden = 8192;
	gqa.heads = 64;
	gqa.arch.kv_heads = 8;
	gqa.arch.ffn = 28672;
	assert_int_equal(lynx_model_validate(&gqa, NULL, 0), 0);
	lynx_model_layer(&gqa, &shape);
	assert_int_equal(shape.groups[LYNX_GROUP_Q_K].bytes, 2ull * 8192 * (1024 + 128));
	assert_int_equal(shape.groups[LYNX_GROUP_V].bytes, 2ull * 8192 * 128);
	/* Unfused attention expands the key/value heads before its GEMMs and keeps them so. */
	gqa.arch.attention = LYNX_ATTENTION_UNFUSED;
	lynx_model_layer(&gqa, &shape);
	assert_int_equal(shape.groups[LYNX_GROUP_V].bytes, 2ull * 8192 * 1024);
	assert_string_equal(shape.groups[LYNX_GROUP_SOFTMAX_OUT].name, "softmax_out");
	/* No dropout: the context GEMM reads the softmax output itself. */
	assert_int_equal(shape.groups[LYNX_GROUP_PROJ_IN].deps,
	                 LYNX_GROUPS(SOFTMAX_OUT) | LYNX_GROUPS(V));
}

/*
 * Context parallelism gives each rank s/c of every sequence: a flash layer keeps exactly 1/c
 * of its activations per rank (no term grows with s²), and the layer's FLOPs over all ranks
 * stay the same (each rank's queries meet every key).
 */
static void test_context_parallelism_splits_the_sequence(void **state)
{
	struct lynx_model_desc one = llama(4, 8192, 1), two = one;

	two.cp = 2;
	one.sp = two.sp = true;
	assert_int_equal(lynx_model_validate(&two, NULL, 0), 0);
	for (int r = 0; r < LYNX_RECOMPUTE_COUNT; r++)
		assert_int_equal(2 * lynx_model_act_bytes(&two, r), lynx_model_act_bytes(&one, r));
	assert_int_equal(lynx_model_layer_fwd_flops(&two), lynx_model_layer_fwd_flops(&one));
	assert_int_equal(lynx_model_op_fwd_flops(&two, LYNX_OP_SCORES) * 2,
	                 lynx_model_op_fwd_flops(&one, LYNX_OP_SCORES));
	assert_true(lynx_model_iter_flops(&two) == lynx_model_iter_flops(&one));
}

/* Meta's published parameter counts, from the Hugging Face checkpoints. */
static void test_llama_parameter_counts(void **state)
{
	struct lynx_model_desc m = llama(1, 2048, 1);

	assert_int_equal(lynx_model_params(&m), 6738415616ull);
	m.layers = 40, m.hidden = 5120, m.heads = 40, m.arch.ffn = 13824;
	assert_int_equal(lynx_model_params(&m), 13015864320ull);
	m.layers = 80, m.hidden = 8192, m.heads = 64, m.arch.kv_heads = 8, m.arch.ffn = 28672;
	assert_int_equal(lynx_model_params(&m), 68976648192ull);
	m.vocab = 128256;
	assert_int_equal(lynx_model_params(&m), 70553706496ull);
	m.layers = 32, m.hidden = 4096, m.heads = 32, m.arch.ffn = 14336;
	assert_int_equal(lynx_model_params(&m), 8030261248ull);
	/* Per TP rank: the split weights by t, the two RMSNorms whole. */
	m.tp = 8;
	assert_int_equal(lynx_model_layer_params_per_rank(&m),
	                 (4096ull * (4096 + 2 * 1024) + 4096ull * 4096 + 3ull * 4096 * 14336) / 8 +
	                         2 * 4096);
}

static void test_parameter_counts(void **state)
{
	struct lynx_model_desc m = gpt22b(1, false);
	const uint64_t h = 6144;

	assert_int_equal(lynx_model_layer_params(&m), 12 * h * h + 13 * h);
	assert_int_equal(lynx_model_layer_params_per_rank(&m), lynx_model_layer_params(&m));
	m.tp = 8;
	/* 12h²/8 + 7h/8 + 6h: every rank holds 1/t of the split tensors and all the rest. */
	assert_int_equal(lynx_model_layer_params_per_rank(&m), 12 * h * h / 8 + 7 * h / 8 + 6 * h);
	assert_int_equal(lynx_model_params(&m),
	                 48 * (12 * h * h + 13 * h) + (51200 + 2048) * h + 2 * h);
}

static void test_micro_batches_and_1f1b_inflight(void **state)
{
	struct lynx_model_desc m = gpt22b(8, false);

	m.pp = 4;
	m.dp = 2;
	m.micro_batch = 1;
	m.global_batch = 16;
	assert_int_equal(lynx_model_validate(&m, NULL, 0), 0);
	assert_int_equal(lynx_model_micro_batches(&m), 8);
	assert_int_equal(lynx_model_stage_layers(&m), 12);
	assert_int_equal(lynx_model_inflight(&m, 0), 4);
	assert_int_equal(lynx_model_inflight(&m, 3), 1);
	assert_int_equal(lynx_model_inflight(&m, 4), 0);
	/* Fewer micro-batches than stages: nobody holds more than there are. */
	m.global_batch = 4;
	assert_int_equal(lynx_model_inflight(&m, 0), 2);
	assert_int_equal(lynx_model_inflight(&m, 3), 1);
}

static void test_recompute_names(void **state)
{
	assert_string_equal(lynx_model_recompute_name(LYNX_RECOMPUTE_NONE), "none");
	assert_string_equal(lynx_model_recompute_name(LYNX_RECOMPUTE_SELECTIVE), "selective");
	assert_string_equal(lynx_model_recompute_name(LYNX_RECOMPUTE_FULL), "full");
	assert_string_equal(lynx_model_recompute_name(LYNX_RECOMPUTE_COUNT), "unknown");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_act_bytes_match_table2_for_the_22b_layer),
	        cmocka_unit_test(test_act_bytes_match_table2_for_many_shapes),
	        cmocka_unit_test(test_tp_row_with_one_rank_is_the_no_parallelism_row),
	        cmocka_unit_test(test_groups_follow_korthikanti_breakdown),
	        cmocka_unit_test(test_tensor_parallelism_splits_only_the_sharded_groups),
	        cmocka_unit_test(test_baselines_keep_what_megatron_keeps),
	        cmocka_unit_test(test_every_architecture_is_a_forward_ordered_dag),
	        cmocka_unit_test(test_validate_refuses_bad_jobs_with_a_reason),
	        cmocka_unit_test(test_layer_flops_match_the_appendix),
	        cmocka_unit_test(test_iteration_flops_match_the_appendix),
	        cmocka_unit_test(test_flash_computes_what_the_model_flops_count),
	        cmocka_unit_test(test_llama_layers_keep_what_flash_and_swiglu_keep),
	        cmocka_unit_test(test_llama_parameter_counts),
	        cmocka_unit_test(test_context_parallelism_splits_the_sequence),
	        cmocka_unit_test(test_parameter_counts),
	        cmocka_unit_test(test_micro_batches_and_1f1b_inflight),
	        cmocka_unit_test(test_recompute_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
