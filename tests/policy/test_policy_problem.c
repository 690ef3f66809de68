/* SPDX-License-Identifier: Apache-2.0 */
/* policy/problem: a model description becomes stages, groups, windows and budgets. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "cost.h"
#include "problem.h"

static struct lynx_model_desc job(const char *gpt, uint32_t t, uint32_t p, uint32_t d, uint32_t b,
                                  uint32_t m, bool sp)
{
	struct lynx_model_desc desc;

	lynx_preset_fill_model(lynx_preset_find_model(gpt), &desc);
	desc.tp = t;
	desc.pp = p;
	desc.dp = d;
	desc.micro_batch = b;
	desc.global_batch = b * d * m;
	desc.sp = sp;
	return desc;
}

static void build(const struct lynx_model_desc *m, const char *cluster,
                  const struct lynx_problem_options *opt, struct lynx_problem *p)
{
	char why[256] = "";

	if (lynx_problem_from_model(m, lynx_preset_find_cluster(cluster), opt, p, why, sizeof(why)))
		fail_msg("lynx_problem_from_model refused: %s", why);
}

static void assert_within(const char *what, double got, double want, double tol)
{
	if (fabs(got - want) > tol)
		fail_msg("%s: got %.6g, want %.6g ± %.3g", what, got, want, tol);
}

/* The layer's ops, waits and groups are layer.def's with cost.c's times. */
static void test_layer_carries_the_cost_model(void **state)
{
	struct lynx_model_desc m = job("gpt-22b", 8, 1, 1, 4, 1, false);
	struct lynx_layer_cost lc;
	struct lynx_problem p;
	uint64_t total = 0;

	build(&m, "a100-nvlink", NULL, &p);
	assert_int_equal(lynx_cost_layer(&m, lynx_preset_find_cluster("a100-nvlink"), &lc, NULL, 0),
	                 0);
	assert_int_equal(p.layer.n_ops, LYNX_OP_COUNT);
	assert_int_equal(p.layer.n_groups, LYNX_GROUP_COUNT);
	assert_within("layer forward", p.layer.fwd_s, lc.fwd_s, 1e-12);
	assert_within("layer backward", p.layer.bwd_s, lc.bwd_s, 1e-12);
	/* Without SP the forward waits at the two row-parallel all-reduces only. */
	assert_within("wait before attn_bda", p.layer.ops[LYNX_OP_ATTN_BDA].wait_fwd_s,
	              lc.comm_fwd_s[LYNX_COMM_ATTN_OUT], 1e-15);
	assert_true(p.layer.ops[LYNX_OP_QKV].wait_fwd_s == 0);
	for (int g = 0; g < LYNX_GROUP_COUNT; g++) {
		const struct lynx_problem_group *pg = &p.layer.groups[g];

		assert_string_equal(pg->name, lc.shape.groups[g].name);
		assert_int_equal(pg->bytes, lynx_model_group_bytes(&m, g));
		assert_within(pg->name, pg->recompute_s, lc.group_recompute_s[g], 1e-15);
		assert_int_equal(pg->consumer, lc.shape.groups[g].consumer);
		total += pg->bytes;
	}
	assert_int_equal(total, lynx_model_act_bytes(&m, LYNX_RECOMPUTE_NONE));
	assert_int_equal(p.layer.groups[LYNX_GROUP_LN1_IN].producer, -1);
	assert_int_equal(p.layer.groups[LYNX_GROUP_MLP_MASK].producer, LYNX_OP_MLP_BDA);
	lynx_problem_free(&p);
}

/*
 * A layer without some of layer.def's ops and groups (Llama: flash attention, no dropout)
 * has only its own, renumbered in forward order, with masks, producers and consumers that
 * name the same ops and groups as the model's layer.
 */
static void test_an_architecture_keeps_only_its_ops_and_groups(void **state)
{
	struct lynx_model_desc m = job("llama2-70b", 8, 4, 1, 1, 8, true);
	struct lynx_layer_cost lc;
	struct lynx_problem p;
	uint64_t total = 0;
	int ops = 0, groups = 0;

	build(&m, "h100-nvlink", NULL, &p);
	assert_int_equal(lynx_cost_layer(&m, lynx_preset_find_cluster("h100-nvlink"), &lc, NULL, 0),
	                 0);
	for (int op = 0; op < LYNX_OP_COUNT; op++)
		if (lc.shape.ops[op].present)
			assert_int_equal(lynx_problem_find_op(&p.layer, lc.shape.ops[op].name),
			                 ops++);
	assert_int_equal(p.layer.n_ops, ops);
	assert_true(ops < LYNX_OP_COUNT);
	assert_int_equal(lynx_problem_find_op(&p.layer, "softmax"), -1);
	for (int g = 0; g < LYNX_GROUP_COUNT; g++) {
		const struct lynx_layer_group_shape *gs = &lc.shape.groups[g];
		const struct lynx_problem_group *pg;

		if (!gs->present)
			continue;
		pg = &p.layer.groups[groups];
		assert_int_equal(lynx_problem_find_group(&p.layer, gs->name), groups++);
		assert_int_equal(pg->bytes, gs->bytes);
		assert_string_equal(p.layer.ops[pg->consumer].name,
		                    lc.shape.ops[gs->consumer].name);
		for (int d = 0; d < LYNX_GROUP_COUNT; d++)
			if (gs->deps & (1u << d))
				assert_true(pg->deps &
				            (1u << lynx_problem_find_group(
				                     &p.layer, lc.shape.groups[d].name)));
		total += pg->bytes;
	}
	assert_int_equal(p.layer.n_groups, groups);
	assert_int_equal(total, lynx_model_act_bytes(&m, LYNX_RECOMPUTE_NONE));
	/* The flash kernel rebuilds the attention's output and its log-sum-exp. */
	assert_int_equal(p.layer.groups[lynx_problem_find_group(&p.layer, "lse")].ops,
	                 1u << lynx_problem_find_op(&p.layer, "flash_attn"));
	lynx_problem_free(&p);
}

/*
 * What the checker and the planners' accounting rely on: a group's dependencies are produced
 * before it and consumed no earlier than it in the backward, it is produced before it is
 * consumed, and any two groups rerun either the same ops or disjoint ones.
 */
static void test_group_order_supports_the_rebuild_rules(void **state)
{
	struct lynx_model_desc m = job("gpt-13b", 8, 4, 1, 1, 8, true);
	struct lynx_problem p;

	build(&m, "a100-nvlink", NULL, &p);
	for (uint32_t g = 0; g < p.layer.n_groups; g++) {
		const struct lynx_problem_group *pg = &p.layer.groups[g];

		assert_true(pg->consumer >= pg->producer);
		for (uint32_t d = 0; d < p.layer.n_groups; d++) {
			const struct lynx_problem_group *dep = &p.layer.groups[d];

			if (pg->deps & (1u << d)) {
				assert_true(d < g);
				assert_true(dep->producer <= pg->producer);
				assert_true(dep->consumer <= pg->consumer);
			}
			assert_true(dep->ops == pg->ops || !(dep->ops & pg->ops));
		}
	}
	lynx_problem_free(&p);
}

/* 1F1B: stage s holds min(p - s, m) micro-batches and runs min(p - s - 1, m) warm-up
 * forwards; the embedding is on the first stage, the head on the last. */
static void test_stages_follow_1f1b(void **state)
{
	struct lynx_model_desc m = job("gpt-13b", 8, 4, 1, 1, 3, false);
	struct lynx_problem p;
	const uint32_t inflight[] = {3, 3, 2, 1}, warmup[] = {3, 2, 1, 0};

	build(&m, "a100-nvlink", NULL, &p);
	assert_int_equal(p.n_stages, 4);
	assert_int_equal(p.micro_batches, 3);
	assert_int_equal(p.gpus, 32);
	for (uint32_t s = 0; s < 4; s++) {
		const struct lynx_problem_stage *st = &p.stages[s];

		assert_int_equal(st->layers, 10);
		assert_int_equal(st->first_layer, 10 * s);
		assert_int_equal(st->inflight, inflight[s]);
		assert_int_equal(st->warmup, warmup[s]);
		assert_true(st->embedding.present == (s == 0));
		assert_true(st->head.present == (s == 3));
		assert_true((st->recv_fwd_s > 0) == (s > 0));
		assert_true((st->recv_bwd_s > 0) == (s < 3));
	}
	/* Korthikanti et al. 4.3: the head keeps 4sbh/t + 4sbv/t under SP; the embedding its
	 * dropout mask. Here without SP: 4sbh + 4sbv/t and sbh. */
	assert_int_equal(p.stages[3].head.act_bytes, 4ull * 2048 * 5120 + 4ull * 2048 * 51200 / 8);
	assert_int_equal(p.stages[0].embedding.act_bytes, 2048ull * 5120);
	assert_true(p.stages[3].head.fwd_s > 0 && p.stages[3].head.bwd_s > p.stages[3].head.fwd_s);
	lynx_problem_free(&p);
}

/*
 * Interleaved 1F1B (Narayanan et al. 2021, as Megatron-LM's schedule runs it): p = 2, v = 2,
 * m = 4. Stage 0 warms up with 2·(p - 1) + (v - 1)·p = 4 forward passes, chunks 0 0 1 1 of
 * micro-batches 0 1 0 1; backward passes run the chunks in reverse. Both stages receive.
 */
static void test_interleaved_stages_follow_megatrons_order(void **state)
{
	struct lynx_model_desc m = job("gpt-1.3b", 1, 2, 1, 1, 4, false);
	struct lynx_problem p;
	/* (forward, chunk, micro-batch) of every pass of stage 0, then of stage 1. */
	static const int want[2][16][3] = {
	        {{1, 0, 0},
	         {1, 0, 1},
	         {1, 1, 0},
	         {1, 1, 1},
	         {1, 0, 2},
	         {0, 1, 0},
	         {1, 0, 3},
	         {0, 1, 1},
	         {1, 1, 2},
	         {0, 0, 0},
	         {1, 1, 3},
	         {0, 0, 1},
	         {0, 1, 2},
	         {0, 1, 3},
	         {0, 0, 2},
	         {0, 0, 3}},
	        {{1, 0, 0},
	         {1, 0, 1},
	         {1, 1, 0},
	         {0, 1, 0},
	         {1, 1, 1},
	         {0, 1, 1},
	         {1, 0, 2},
	         {0, 0, 0},
	         {1, 0, 3},
	         {0, 0, 1},
	         {1, 1, 2},
	         {0, 1, 2},
	         {1, 1, 3},
	         {0, 1, 3},
	         {0, 0, 2},
	         {0, 0, 3}},
	};

	(void)state;
	m.vp = 2;
	build(&m, "a100-nvlink", NULL, &p);
	assert_int_equal(lynx_problem_chunks(&p), 2);
	assert_int_equal(p.stages[0].chunk_warmup, 4);
	assert_int_equal(p.stages[1].chunk_warmup, 2);
	/* Passes in flight at the peak, over v: (4 + 1) / 2 and (2 + 1) / 2, rounded up. */
	assert_int_equal(p.stages[0].inflight, 3);
	assert_int_equal(p.stages[1].inflight, 2);
	for (uint32_t s = 0; s < 2; s++) {
		assert_true(p.stages[s].recv_fwd_s > 0 && p.stages[s].recv_bwd_s > 0);
		for (uint32_t a = 0; a < 16; a++) {
			struct lynx_pass x = lynx_problem_pass(&p, s, a);
			if (x.forward != want[s][a][0] || x.chunk != (uint32_t)want[s][a][1] ||
			    x.microbatch != (uint32_t)want[s][a][2])
				fail_msg("stage %u pass %u: %s chunk %u micro-batch %u, want %s %d "
				         "%d",
				         s, a, x.forward ? "forward" : "backward", x.chunk,
				         x.microbatch, want[s][a][0] ? "forward" : "backward",
				         want[s][a][1], want[s][a][2]);
		}
	}
	lynx_problem_free(&p);
	/* m == p: Megatron runs every forward pass first. */
	m = job("gpt-1.3b", 1, 2, 1, 1, 2, false);
	m.vp = 2;
	build(&m, "a100-nvlink", NULL, &p);
	assert_int_equal(p.stages[1].chunk_warmup, 4);
	assert_true(lynx_problem_pass(&p, 1, 3).forward && !lynx_problem_pass(&p, 1, 4).forward);
	lynx_problem_free(&p);
	/* Without virtual stages the passes are 1F1B's micro-batches. */
	m = job("gpt-13b", 8, 4, 1, 1, 3, false);
	build(&m, "a100-nvlink", NULL, &p);
	assert_int_equal(lynx_problem_chunks(&p), 1);
	for (uint32_t a = 0; a < 6; a++)
		assert_int_equal(lynx_problem_pass(&p, 3, a).microbatch, a / 2);
	lynx_problem_free(&p);
}

/* Megatron's mixed precision: 18 bytes per parameter, or 6 + 12/d with the distributed
 * optimizer; the first stage adds the embeddings, the last the final LayerNorm and, with
 * p > 1, its copy of the word embedding. */
static void test_static_memory_follows_megatron_accounting(void **state)
{
	struct lynx_model_desc m = job("gpt-13b", 8, 4, 2, 1, 4, false);
	struct lynx_problem_options dist = {.distributed_optimizer = true};
	struct lynx_problem p, q;
	uint64_t layer = lynx_model_layer_params_per_rank(&m), word = 51200ull / 8 * 5120;

	build(&m, "a100-nvlink", NULL, &p);
	build(&m, "a100-nvlink", &dist, &q);
	assert_int_equal(p.stages[0].params, 10 * layer + word + 2048ull * 5120);
	assert_int_equal(p.stages[1].params, 10 * layer);
	assert_int_equal(p.stages[3].params, 10 * layer + 2 * 5120 + word);
	for (uint32_t s = 0; s < 4; s++) {
		assert_int_equal(p.stages[s].static_bytes, 18 * p.stages[s].params);
		assert_int_equal(q.stages[s].static_bytes,
		                 6 * p.stages[s].params + 12 * p.stages[s].params / 2);
	}
	assert_int_equal(lynx_problem_max_static_bytes(&p), p.stages[0].static_bytes);
	/* Two data-parallel ranks reduce gradients; the tied embeddings sync on the ends. */
	assert_true(p.stages[1].grad_reduce_s > 0);
	assert_true(p.stages[0].grad_reduce_s > p.stages[1].grad_reduce_s);
	assert_true(q.stages[1].optimizer_s < p.stages[1].optimizer_s);
	lynx_problem_free(&p);
	lynx_problem_free(&q);
}

/* TP windows sit at every op with a wait, in every layer; PP windows where a stage receives;
 * DP where gradients are reduced. Their capacity is the idle time. */
static void test_windows_are_where_the_stream_waits(void **state)
{
	struct lynx_model_desc m = job("gpt-13b", 8, 4, 1, 1, 8, true);
	struct lynx_problem p;
	uint32_t count[LYNX_WINDOW_KIND_COUNT] = {0};
	const struct lynx_problem_stage *st;
	int w;

	build(&m, "a100-nvlink", NULL, &p);
	st = &p.stages[1];
	for (uint32_t i = 0; i < st->n_windows; i++)
		count[st->windows[i].kind]++;
	/* Under SP all four boundaries wait in the forward; the backward's all-gathers of the
	 * row-parallel outputs are exposed. */
	assert_int_equal(count[LYNX_WINDOW_TP_FWD], 4 * 10);
	assert_int_equal(count[LYNX_WINDOW_TP_BWD] % 10, 0);
	assert_true(count[LYNX_WINDOW_TP_BWD] >= 2 * 10);
	assert_int_equal(count[LYNX_WINDOW_PP_RECV_FWD], 1);
	assert_int_equal(count[LYNX_WINDOW_PP_RECV_BWD], 1);
	assert_int_equal(count[LYNX_WINDOW_DP_GRAD], 0);
	w = lynx_problem_find_window(st, LYNX_WINDOW_TP_FWD, 3, LYNX_OP_QKV);
	assert_true(w >= 0);
	assert_within("TP window capacity", st->windows[w].capacity_s,
	              p.layer.ops[LYNX_OP_QKV].wait_fwd_s, 0);
	w = lynx_problem_find_window(st, LYNX_WINDOW_PP_RECV_BWD, -1, -1);
	assert_within("PP window capacity", st->windows[w].capacity_s, st->recv_bwd_s, 0);
	assert_int_equal(lynx_problem_find_window(&p.stages[0], LYNX_WINDOW_PP_RECV_FWD, -1, -1),
	                 -1);
	assert_int_equal(lynx_problem_find_window(&p.stages[3], LYNX_WINDOW_PP_RECV_BWD, -1, -1),
	                 -1);
	assert_int_equal(lynx_problem_find_window_kind("pp_recv_bwd"), LYNX_WINDOW_PP_RECV_BWD);
	assert_int_equal(lynx_problem_find_window_kind("nope"), LYNX_WINDOW_KIND_COUNT);
	assert_string_equal(lynx_problem_window_kind_name(LYNX_WINDOW_DP_GRAD), "dp_grad");
	lynx_problem_free(&p);
}

/*
 * Contention, worked by hand. Compute 1.25 times slower and transfers 1.6 times slower while
 * they overlap; 1 s of kernels, a transfer of 1 s from t = 0.2 s: alone until 0.2 s, then 0.8 s
 * of kernels take 1.0 s and move the transfer 1.0 / 1.6 s, whose other 0.375 s run alone.
 */
static void test_contention_slows_both_sides_of_an_overlap(void **state)
{
	const struct lynx_interference f = {1.25, 1.6}, none = {0, 0}, compute = {1.25, 1};
	double comm_end, end, share, slope;

	end = lynx_overlap(&f, 1.0, 0.2, 1.0, &comm_end);
	assert_within("end", end, 1.2, 1e-12);
	assert_within("comm_end", comm_end, 1.2 + 0.375, 1e-12);
	/* The transfer ends first: 0.5 s of it take 0.8 s, in which 0.64 s of kernels run. */
	end = lynx_overlap(&f, 2.0, 0, 0.5, &comm_end);
	assert_within("comm_end", comm_end, 0.8, 1e-12);
	assert_within("end", end, 0.8 + (2.0 - 0.64), 1e-12);
	/* No contention, or no transfer: the kernels' own time. */
	assert_within("lynx_overlap", lynx_overlap(&none, 0.7, 0, 1.0, &comm_end), 0.7, 1e-12);
	assert_within("comm_end", comm_end, 1.0, 1e-12);
	assert_within("lynx_overlap", lynx_overlap(NULL, 0.7, 0, 0, &comm_end), 0.7, 1e-12);
	assert_within("lynx_overlap", lynx_overlap(&f, 0.1, 0.2, 1.0, &comm_end), 0.1, 1e-12);
	assert_within("comm_end", comm_end, 1.2, 1e-12);

	/* A window of 1 s: without contention work beyond it; with compute alone, beyond 1/1.25. */
	assert_within("lynx_window_delay", lynx_window_delay(&none, 0.9, 1.0), 0, 1e-12);
	assert_within("lynx_window_delay", lynx_window_delay(&none, 1.5, 1.0), 0.5, 1e-12);
	assert_within("lynx_window_delay", lynx_window_delay(&compute, 0.8, 1.0), 0, 1e-12);
	assert_within("lynx_window_delay", lynx_window_delay(&compute, 1.0, 1.0), 0.2, 1e-12);
	assert_within("lynx_window_delay", lynx_window_delay(&f, 0.5, 0), 0.5, 1e-12);
	lynx_window_delay_lines(&none, &share, &slope);
	assert_within("share", share, 1, 1e-12);
	assert_within("slope", slope, 0, 1e-12);
	/* The delay's two lines are the overlap's own ends, at every work and figure. */
	for (double c = 1; c <= LYNX_INTERFERENCE_MAX; c += 0.25)
		for (double k = 1; k <= LYNX_INTERFERENCE_MAX; k += 0.25)
			for (double w = 0; w <= 3; w += 0.125) {
				const struct lynx_interference g = {c, k};
				double e = lynx_overlap(&g, w, 0, 1.0, &comm_end);
				double done = e > comm_end ? e : comm_end;

				assert_within("delay", lynx_window_delay(&g, w, 1.0), done - 1.0,
				              1e-12);
			}
}

static void test_budget_defaults_to_gpu_memory_and_must_cover_static_memory(void **state)
{
	struct lynx_model_desc m = job("gpt-22b", 8, 1, 1, 4, 1, false);
	struct lynx_problem_options tight = {.budget_bytes = 10ull << 30};
	struct lynx_problem p;
	char why[256] = "";

	build(&m, "a100-nvlink", NULL, &p);
	assert_int_equal(p.budget_bytes, lynx_preset_find_gpu("a100-80gb")->mem_bytes);
	/* The host link for offloading is the cluster's, the same both ways. */
	assert_true(p.d2h.busbw == lynx_preset_find_cluster("a100-nvlink")->host.busbw);
	assert_true(p.h2d.busbw == p.d2h.busbw && p.h2d.latency_s > 0);
	lynx_problem_free(&p);
	assert_int_equal(lynx_problem_from_model(&m, lynx_preset_find_cluster("a100-nvlink"),
	                                         &tight, &p, why, sizeof(why)),
	                 -EINVAL);
	assert_non_null(strstr(why, "budget"));
	assert_non_null(strstr(why, "static memory"));
	assert_null(p.stages);
}

static void test_invalid_models_are_refused_with_a_reason(void **state)
{
	struct lynx_model_desc m = job("gpt-13b", 8, 4, 1, 1, 4, false);
	struct lynx_problem p;
	char why[256] = "";

	m.heads = 7;
	assert_int_equal(lynx_problem_from_model(&m, lynx_preset_find_cluster("a100-nvlink"), NULL,
	                                         &p, why, sizeof(why)),
	                 -EINVAL);
	assert_non_null(strstr(why, "not divisible"));
	m = job("gpt-13b", 8, 80, 1, 1, 4, false);
	assert_int_equal(lynx_problem_from_model(&m, lynx_preset_find_cluster("a100-nvlink"), NULL,
	                                         &p, why, sizeof(why)),
	                 -EINVAL);
	assert_non_null(strstr(why, "exceeds the number of layers"));
	/* Virtual stages: pipeline parallelism, chunks that split L evenly, m a multiple of p. */
	const struct {
		uint32_t p, v, layers, m;
		const char *why;
	} vp[] = {
	        {1, 2, 40, 4, "need pipeline parallelism"},
	        {4, 3, 40, 4, "model chunks"},
	        {4, 2, 40, 6, "a multiple of p=4"},
	};
	for (size_t i = 0; i < sizeof(vp) / sizeof(vp[0]); i++) {
		m = job("gpt-13b", 8, vp[i].p, 1, 1, vp[i].m, false);
		m.layers = vp[i].layers;
		m.vp = vp[i].v;
		assert_int_equal(lynx_problem_from_model(&m,
		                                         lynx_preset_find_cluster("a100-nvlink"),
		                                         NULL, &p, why, sizeof(why)),
		                 -EINVAL);
		if (!strstr(why, vp[i].why))
			fail_msg("p=%u v=%u L=%u m=%u: \"%s\" does not say \"%s\"", vp[i].p,
			         vp[i].v, vp[i].layers, vp[i].m, why, vp[i].why);
	}
	uint32_t split[] = {10, 10, 10, 10};
	struct lynx_problem_options opt = {.stage_layers = split};
	m = job("gpt-13b", 8, 4, 1, 1, 4, false);
	m.vp = 2;
	assert_int_equal(lynx_problem_from_model(&m, lynx_preset_find_cluster("a100-nvlink"), &opt,
	                                         &p, why, sizeof(why)),
	                 -EINVAL);
	assert_non_null(strstr(why, "even split"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_layer_carries_the_cost_model),
	        cmocka_unit_test(test_an_architecture_keeps_only_its_ops_and_groups),
	        cmocka_unit_test(test_group_order_supports_the_rebuild_rules),
	        cmocka_unit_test(test_stages_follow_1f1b),
	        cmocka_unit_test(test_interleaved_stages_follow_megatrons_order),
	        cmocka_unit_test(test_static_memory_follows_megatron_accounting),
	        cmocka_unit_test(test_windows_are_where_the_stream_waits),
	        cmocka_unit_test(test_contention_slows_both_sides_of_an_overlap),
	        cmocka_unit_test(test_budget_defaults_to_gpu_memory_and_must_cover_static_memory),
	        cmocka_unit_test(test_invalid_models_are_refused_with_a_reason),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
