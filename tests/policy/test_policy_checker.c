/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy/checker: the independent 1F1B simulation agrees with every planner's prediction,
 * and applies the window rules: idle capacity, fallbacks, and longer lifetimes.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "checker.h"
#include "planner.h"

struct job {
	const char *gpt, *cluster;
	uint32_t t, p, d, b, m;
	bool sp;
	uint64_t budget_gib; /* 0: the GPU's memory */
	uint32_t v;          /* virtual stages (interleaved 1F1B); 0: 1 */
};

static void build(const struct job *j, struct lynx_problem *p)
{
	struct lynx_model_desc m;
	struct lynx_problem_options opt = {.budget_bytes = j->budget_gib << 30,
	                                   .search_seconds = 1};
	char why[256] = "";

	lynx_preset_fill_model(lynx_preset_find_model(j->gpt), &m);
	m.tp = j->t;
	m.pp = j->p;
	m.dp = j->d;
	m.micro_batch = j->b;
	m.global_batch = j->b * j->d * j->m;
	m.sp = j->sp;
	m.vp = j->v;
	if (lynx_problem_from_model(&m, lynx_preset_find_cluster(j->cluster), &opt, p, why,
	                            sizeof(why)))
		fail_msg("problem refused: %s", why);
}

static void check(const struct lynx_problem *p, const struct lynx_plan *plan,
                  struct lynx_checker_result *c)
{
	char why[256] = "";

	if (lynx_checker_replay(p, plan, c, why, sizeof(why)))
		fail_msg("checker refused %s: %s", plan->planner, why);
}

static void assert_close(const char *what, double got, double want)
{
	if (fabs(got - want) > 1e-9 * fabs(want))
		fail_msg("%s: got %.12g, want %.12g", what, got, want);
}

/*
 * Every planner's predicted step time and per-stage peaks are what the checker finds, over
 * pipelines deep and shallow, fewer micro-batches than stages, SP, data parallelism, PCIe,
 * budgets that make DTR work, and interleaved 1F1B.
 */
static void test_checker_agrees_with_every_planner(void **state)
{
	static const struct job jobs[] = {
	        {"gpt-22b", "a100-nvlink", 8, 1, 1, 4, 1, false, 0, 0},
	        {"gpt-22b", "a100-nvlink", 8, 1, 1, 4, 3, true, 70, 0},
	        {"gpt-13b", "a100-nvlink", 8, 4, 1, 1, 16, false, 14, 0},
	        {"gpt-13b", "h800-nvlink", 8, 4, 2, 2, 3, true, 0, 0},
	        {"gpt-1.3b", "a100-pcie", 1, 2, 2, 2, 8, false, 30, 0},
	        {"gpt-6.7b", "a100-pcie", 4, 8, 1, 1, 12, false, 9, 0},
	        {"gpt-20b", "h100-nvlink", 8, 11, 1, 1, 5, true, 0, 0},
	        {"gpt-13b", "a100-nvlink", 8, 4, 1, 1, 8, false, 14, 2},
	        {"gpt-1.3b", "a100-pcie", 1, 2, 2, 2, 8, false, 30, 3},
	        {"gpt-13b", "h800-nvlink", 8, 4, 1, 1, 4, true, 0, 5},
	};

	for (size_t i = 0; i < sizeof(jobs) / sizeof(jobs[0]); i++) {
		struct lynx_problem p;

		build(&jobs[i], &p);
		for (int k = 0; k < LYNX_PLANNER_COUNT; k++) {
			struct lynx_plan plan;
			struct lynx_checker_result c;
			char what[96], why[256] = "";

			/* OPT's MILP takes seconds per stage on these jobs: test_policy_opt
			 * checks its plans against the checker. */
			if (k == LYNX_PLANNER_OPT)
				continue;

			if (lynx_planner_run(&lynx_planners[k], &p, &plan, why, sizeof(why)))
				fail_msg("%s refused job %zu: %s", lynx_planners[k].name, i, why);
			check(&p, &plan, &c);
			snprintf(what, sizeof(what), "job %zu %s step", i, plan.planner);
			assert_close(what, c.step_time_s, plan.step_time_s);
			assert_true(c.fits == plan.fits);
			for (uint32_t s = 0; s < p.n_stages; s++)
				if (c.peak_bytes[s] != plan.stages[s].peak_bytes)
					fail_msg("job %zu %s stage %u: checker peak %llu, planner "
					         "%llu",
					         i, plan.planner, s,
					         (unsigned long long)c.peak_bytes[s],
					         (unsigned long long)plan.stages[s].peak_bytes);
			/* The baselines rebuild on demand only; HEU, mixed (HEU's plan with
			 * offloading) and OPT may use windows. */
			if (k != LYNX_PLANNER_HEU && k != LYNX_PLANNER_MIXED &&
			    k != LYNX_PLANNER_OPT)
				assert_true(c.window_work_s == 0 && c.fallbacks == 0);
			lynx_checker_free(&c);
			lynx_plan_free(&plan);
		}
		lynx_problem_free(&p);
	}
}

/* Takes out the costs at the ends: the embedding's and the head's times, the pipeline
 * transfers, the gradient reduction and the optimizer, and every window but TP's. */
static void without_the_ends(struct lynx_problem *p)
{
	for (uint32_t s = 0; s < p->n_stages; s++) {
		struct lynx_problem_stage *st = &p->stages[s];

		st->embedding.fwd_s = st->embedding.bwd_s = 0;
		st->head.fwd_s = st->head.bwd_s = 0;
		st->recv_fwd_s = st->recv_bwd_s = 0;
		st->grad_reduce_s = st->optimizer_s = 0;
		for (uint32_t w = 0; w < st->n_windows; w++)
			if (st->windows[w].kind != LYNX_WINDOW_TP_FWD &&
			    st->windows[w].kind != LYNX_WINDOW_TP_BWD)
				st->windows[w].capacity_s = 0;
	}
}

/*
 * With no costs at the ends (embedding, head, transfers, gradient reduction, optimizer),
 * identical stages take the textbook 1F1B time (m + p - 1)·(F + B).
 */
static void test_uniform_stages_take_the_textbook_1f1b_time(void **state)
{
	const struct job j = {"gpt-13b", "a100-nvlink", 8, 4, 1, 1, 6, false, 0, 0};
	struct lynx_problem p;
	struct lynx_plan plan;
	struct lynx_checker_result c;
	double fb;

	build(&j, &p);
	without_the_ends(&p);
	fb = 10 * (p.layer.fwd_s + p.layer.bwd_s);
	assert_int_equal(lynx_planner_none(&p, &plan, NULL, 0), 0);
	check(&p, &plan, &c);
	assert_close("checker", c.step_time_s, (6 + 4 - 1) * fb);
	assert_close("planner", plan.step_time_s, (6 + 4 - 1) * fb);
	lynx_checker_free(&c);
	lynx_plan_free(&plan);
	lynx_problem_free(&p);
}

/*
 * Interleaved, the same stages take Narayanan et al.'s (m + (p - 1)/v)·(F + B): the bubble
 * shrinks v times. The first stage holds 1 + (p - 1)/(p·v) times the activations of 1F1B
 * (Megatron's warm-up of 2·(p - 1) + (v - 1)·p passes, plus one), without the embedding's.
 */
static void test_interleaved_stages_shrink_the_bubble_by_v(void **state)
{
	double none_act = 0;

	for (uint32_t v = 1; v <= 5; v += v == 1 ? 1 : 3) {
		const struct job j = {"gpt-13b", "a100-nvlink", 8, 4, 1, 1, 8, false, 0, v};
		struct lynx_problem p;
		struct lynx_plan plan;
		struct lynx_checker_result c;
		double fb;
		char what[64];

		build(&j, &p);
		without_the_ends(&p);
		for (uint32_t s = 0; s < p.n_stages; s++)
			p.stages[s].embedding.act_bytes = 0;
		fb = 10 * (p.layer.fwd_s + p.layer.bwd_s);
		assert_int_equal(lynx_planner_none(&p, &plan, NULL, 0), 0);
		check(&p, &plan, &c);
		snprintf(what, sizeof(what), "v=%u checker", v);
		assert_close(what, c.step_time_s, (8 + 3.0 / v) * fb);
		snprintf(what, sizeof(what), "v=%u planner", v);
		assert_close(what, plan.step_time_s, (8 + 3.0 / v) * fb);
		double act = (double)(c.peak_bytes[0] - p.stages[0].static_bytes);
		if (v == 1)
			none_act = act;
		snprintf(what, sizeof(what), "v=%u first stage's activations", v);
		if (v > 1)
			assert_close(what, act / none_act, 1 + 3.0 / (4 * v));
		lynx_checker_free(&c);
		lynx_plan_free(&plan);
		lynx_problem_free(&p);
	}
}

/* settle stores the replay in the plan and lowers only overflowing stages' budgets, by their
 * excess, and only when asked to tighten. */
static void test_settle_lowers_overflowing_budgets_by_their_excess(void **state)
{
	const struct job j = {"gpt-13b", "a100-nvlink", 8, 4, 1, 1, 8, false, 12, 0};
	struct lynx_problem p;
	struct lynx_plan plan;
	struct lynx_checker_result c;
	uint64_t budget[4];
	bool redo[4], again, any_over = false, any_under = false;
	char why[256] = "";

	build(&j, &p);
	assert_int_equal(p.n_stages, 4);
	assert_int_equal(lynx_planner_none(&p, &plan, NULL, 0), 0);
	check(&p, &plan, &c);
	for (uint32_t s = 0; s < 4; s++)
		budget[s] = p.budget_bytes;
	assert_int_equal(
	        lynx_checker_settle(&p, &plan, false, budget, redo, &again, why, sizeof(why)), 0);
	assert_false(again);
	assert_true(plan.step_time_s == c.step_time_s);
	assert_true(plan.fits == c.fits);
	for (uint32_t s = 0; s < 4; s++) {
		assert_false(redo[s]);
		assert_true(budget[s] == p.budget_bytes);
		assert_true(plan.stages[s].peak_bytes == c.peak_bytes[s]);
	}

	assert_int_equal(
	        lynx_checker_settle(&p, &plan, true, budget, redo, &again, why, sizeof(why)), 0);
	for (uint32_t s = 0; s < 4; s++) {
		bool over = c.peak_bytes[s] > p.budget_bytes;

		any_over |= over;
		any_under |= !over;
		assert_int_equal(redo[s], over);
		assert_true(budget[s] == (over ? p.budget_bytes - (c.peak_bytes[s] - p.budget_bytes)
		                               : p.budget_bytes));
	}
	assert_int_equal(again, any_over);
	/* The budget makes the first stages overflow and the last fit without recompute. */
	assert_true(any_over && any_under);
	lynx_checker_free(&c);
	lynx_plan_free(&plan);
	lynx_problem_free(&p);
}

/* A plan shaped like the selective baseline whose dropped groups of layer l are rebuilt in
 * window(l), or on demand where window(l) is -1. */
static void window_plan(const struct lynx_problem *p, uint32_t s, uint32_t groups,
                        int (*window)(const struct lynx_problem_stage *st, uint32_t l),
                        struct lynx_plan *plan)
{
	const struct lynx_problem_stage *st = &p->stages[s];

	assert_int_equal(lynx_plan_init(plan, p, "window", false), 0);
	for (uint32_t l = 0; l < st->layers; l++) {
		int w = window(st, l);

		for (uint32_t g = 0; g < p->layer.n_groups; g++) {
			struct lynx_decision *d = lynx_plan_decision(plan, s, l, g);

			if (!(groups & (1u << g)))
				continue;
			d->action = w < 0 ? LYNX_ACTION_RECOMPUTE_ON_DEMAND
			                  : LYNX_ACTION_RECOMPUTE_IN_WINDOW;
			d->window = w < 0 ? 0 : (uint32_t)w;
		}
	}
}

/* The projection's all-reduce of the next layer; none after the last. */
static int next_layers_all_reduce(const struct lynx_problem_stage *st, uint32_t l)
{
	return l + 1 < st->layers ? lynx_problem_find_window(st, LYNX_WINDOW_TP_FWD, (int32_t)l + 1,
	                                                     LYNX_OP_ATTN_BDA)
	                          : -1;
}

static int on_demand(const struct lynx_problem_stage *st, uint32_t l)
{
	return -1;
}

static int last_layers_all_reduce(const struct lynx_problem_stage *st, uint32_t l)
{
	return lynx_problem_find_window(st, LYNX_WINDOW_TP_FWD, (int32_t)st->layers - 1,
	                                LYNX_OP_ATTN_BDA);
}

static int dp_window(const struct lynx_problem_stage *st, uint32_t l)
{
	return lynx_problem_find_window(st, LYNX_WINDOW_DP_GRAD, -1, -1);
}

/*
 * GELU's output (fc2_in) is cheap to rebuild: inside the next layer's all-reduce it costs no
 * time. Only the last layer's, with no later window, is planned on demand: one stage, so the
 * step is the no-recompute step plus that.
 */
static void test_a_rebuild_that_fits_its_window_is_free(void **state)
{
	const struct job j = {"gpt-22b", "a100-nvlink", 8, 1, 1, 4, 2, false, 0, 0};
	struct lynx_problem p;
	struct lynx_plan none, plan;
	struct lynx_checker_result c;
	double gelu;

	build(&j, &p);
	gelu = p.layer.ops[LYNX_OP_ACT].rerun_s;
	assert_true(gelu < p.layer.ops[LYNX_OP_ATTN_BDA].wait_fwd_s);
	assert_int_equal(lynx_planner_none(&p, &none, NULL, 0), 0);
	window_plan(&p, 0, LYNX_GROUPS(FC2_IN), next_layers_all_reduce, &plan);
	check(&p, &plan, &c);
	assert_close("window work", c.window_work_s, 2 * 47 * gelu);
	assert_true(c.window_overflow_s == 0);
	assert_close("on demand", c.on_demand_s, 2 * gelu);
	assert_int_equal(c.fallbacks, 0);
	assert_close("step", c.step_time_s, none.step_time_s + 2 * gelu);
	lynx_checker_free(&c);
	lynx_plan_free(&plan);
	lynx_plan_free(&none);
	lynx_problem_free(&p);
}

/*
 * The core attention does not fit the all-reduce: the excess delays the stream. On one
 * stage every extra second is on the critical path.
 */
static void test_window_overflow_lands_on_the_critical_path(void **state)
{
	const struct job j = {"gpt-22b", "a100-nvlink", 8, 1, 1, 4, 2, false, 0, 0};
	const uint32_t core =
	        LYNX_GROUPS(SOFTMAX_OUT) | LYNX_GROUPS(SOFTMAX_MASK) | LYNX_GROUPS(DROPOUT_OUT);
	struct lynx_problem p;
	struct lynx_plan none, plan;
	struct lynx_checker_result c;

	build(&j, &p);
	assert_int_equal(lynx_planner_none(&p, &none, NULL, 0), 0);
	window_plan(&p, 0, core, next_layers_all_reduce, &plan);
	check(&p, &plan, &c);
	assert_true(c.window_overflow_s > 0);
	assert_true(c.window_overflow_s < c.window_work_s);
	assert_int_equal(c.fallbacks, 0);
	assert_close("step", c.step_time_s, none.step_time_s + c.on_demand_s + c.window_overflow_s);
	lynx_checker_free(&c);
	lynx_plan_free(&plan);
	lynx_plan_free(&none);
	lynx_problem_free(&p);
}

/*
 * Contention: the core attention rebuilt in the next layer's all-reduce runs slower while the
 * all-reduce is in flight, and slows it. Each of the 2 · 47 occurrences then delays the stream
 * by lynx_window_delay() of its work, not by work - idle; the step follows on one stage.
 */
static void test_contention_prices_each_window_by_its_delay(void **state)
{
	const struct job j = {"gpt-22b", "a100-nvlink", 8, 1, 1, 4, 2, false, 0, 0};
	const uint32_t core =
	        LYNX_GROUPS(SOFTMAX_OUT) | LYNX_GROUPS(SOFTMAX_MASK) | LYNX_GROUPS(DROPOUT_OUT);
	const struct lynx_interference cases[] = {{1, 1}, {1.19, 1}, {1.19, 1.1}, {2, 2}};
	double idle, work, previous = 0;
	struct lynx_problem p;
	struct lynx_plan none, plan;
	struct lynx_checker_result c;

	build(&j, &p);
	idle = p.layer.ops[LYNX_OP_ATTN_BDA].wait_fwd_s;
	assert_int_equal(lynx_planner_none(&p, &none, NULL, 0), 0);
	window_plan(&p, 0, core, next_layers_all_reduce, &plan);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		p.interference = cases[i];
		check(&p, &plan, &c);
		work = c.window_work_s / (2 * 47);
		assert_close("overflow", c.window_overflow_s,
		             2 * 47 * lynx_window_delay(&cases[i], work, idle));
		if (i == 0)
			assert_close("no contention", c.window_overflow_s, 2 * 47 * (work - idle));
		assert_close("step", c.step_time_s,
		             none.step_time_s + c.on_demand_s + c.window_overflow_s);
		assert_true(c.window_overflow_s > previous);
		previous = c.window_overflow_s;
		lynx_checker_free(&c);
	}
	lynx_plan_free(&plan);
	lynx_plan_free(&none);
	lynx_problem_free(&p);
}

/*
 * Rebuilding early lengthens a tensor's life. The core attention of layers 0-46, rebuilt in
 * the last layer's all-reduce, is held from the end of the forward through the backward: the
 * peak is the no-recompute peak. Rebuilt on demand, it is not.
 */
static void test_early_rebuilds_hold_memory_until_their_consumer(void **state)
{
	const struct job j = {"gpt-22b", "a100-nvlink", 8, 1, 1, 4, 1, false, 200, 0};
	const uint32_t core =
	        LYNX_GROUPS(SOFTMAX_OUT) | LYNX_GROUPS(SOFTMAX_MASK) | LYNX_GROUPS(DROPOUT_OUT);
	struct lynx_problem p;
	struct lynx_plan none, early, late;
	struct lynx_checker_result cn, ce, cl;

	build(&j, &p);
	assert_int_equal(lynx_planner_none(&p, &none, NULL, 0), 0);
	window_plan(&p, 0, core, last_layers_all_reduce, &early);
	for (uint32_t g = 0; g < p.layer.n_groups; g++)
		if (core & (1u << g))
			lynx_plan_decision(&early, 0, 47, g)->action = LYNX_ACTION_KEEP;
	window_plan(&p, 0, core, on_demand, &late);
	check(&p, &none, &cn);
	check(&p, &early, &ce);
	check(&p, &late, &cl);
	assert_int_equal(ce.fallbacks, 0);
	assert_true(ce.window_work_s > 0);
	assert_int_equal(ce.peak_bytes[0], cn.peak_bytes[0]);
	assert_true(cl.peak_bytes[0] < cn.peak_bytes[0]);
	lynx_checker_free(&cn);
	lynx_checker_free(&ce);
	lynx_checker_free(&cl);
	lynx_plan_free(&none);
	lynx_plan_free(&early);
	lynx_plan_free(&late);
	lynx_problem_free(&p);
}

/*
 * A rebuild holds the scratch of the groups it rebuilds while it runs (problem.h's
 * scratch_bytes, from profiles: the workspaces their producers name), and only theirs:
 * scratch on the groups selective recomputation keeps changes nothing, on those it rebuilds
 * it raises the peak by as much at the rebuild that sets it.
 */
static void test_a_rebuild_holds_the_scratch_of_what_it_rebuilds(void **state)
{
	const struct job j = {"gpt-1.3b", "a100-nvlink", 1, 1, 1, 4, 1, false, 0, 0};
	const uint64_t scratch = 1ull << 30;
	struct lynx_problem p;
	struct lynx_plan plan;
	struct lynx_checker_result base, on_kept, on_rebuilt;
	uint32_t rebuilt = 0;

	build(&j, &p);
	assert_int_equal(lynx_planner_selective(&p, &plan, NULL, 0), 0);
	check(&p, &plan, &base);
	for (uint32_t g = 0; g < p.layer.n_groups; g++)
		if (lynx_plan_get(&plan, 0, 0, g)->action == LYNX_ACTION_RECOMPUTE_ON_DEMAND)
			rebuilt |= 1u << g;
	assert_true(rebuilt != 0);
	for (uint32_t g = 0; g < p.layer.n_groups; g++)
		p.layer.groups[g].scratch_bytes = rebuilt & (1u << g) ? 0 : scratch;
	check(&p, &plan, &on_kept);
	assert_int_equal(on_kept.peak_bytes[0], base.peak_bytes[0]);
	for (uint32_t g = 0; g < p.layer.n_groups; g++)
		p.layer.groups[g].scratch_bytes = rebuilt & (1u << g) ? scratch : 0;
	check(&p, &plan, &on_rebuilt);
	assert_true(on_rebuilt.peak_bytes[0] > base.peak_bytes[0]);
	assert_true(on_rebuilt.peak_bytes[0] <= base.peak_bytes[0] + scratch);
	assert_true(on_rebuilt.peak_bytes[0] >= p.stages[0].static_bytes + scratch);
	lynx_checker_free(&base);
	lynx_checker_free(&on_kept);
	lynx_checker_free(&on_rebuilt);
	lynx_plan_free(&plan);
	lynx_problem_free(&p);
}

/* The gradient reduction comes after every backward: decisions for it all fall back, and the
 * plan runs exactly as its on-demand twin. */
static void test_windows_after_the_consumer_fall_back_to_on_demand(void **state)
{
	const struct job j = {"gpt-13b", "a100-nvlink", 8, 1, 2, 1, 3, false, 0, 0};
	struct lynx_problem p;
	struct lynx_plan in_dp, twin;
	struct lynx_checker_result a, b;
	uint32_t groups = LYNX_GROUPS(ACT_IN) | LYNX_GROUPS(FC2_IN);

	build(&j, &p);
	assert_true(lynx_problem_find_window(&p.stages[0], LYNX_WINDOW_DP_GRAD, -1, -1) >= 0);
	window_plan(&p, 0, groups, dp_window, &in_dp);
	window_plan(&p, 0, groups, on_demand, &twin);
	check(&p, &in_dp, &a);
	check(&p, &twin, &b);
	assert_int_equal(a.fallbacks, 3 * 40 * 2);
	assert_true(a.window_work_s == 0);
	assert_close("step", a.step_time_s, b.step_time_s);
	assert_int_equal(a.peak_bytes[0], b.peak_bytes[0]);
	lynx_checker_free(&a);
	lynx_checker_free(&b);
	lynx_plan_free(&in_dp);
	lynx_plan_free(&twin);
	lynx_problem_free(&p);
}

/*
 * Which occurrence serves which backward under 1F1B (p = 2, m = 4). Stage 0 (one warm-up
 * forward): B(j) is preceded by F(j + 1), except B(3) in the cool-down, where all 20 layers
 * fall back. Stage 1 (none): B(j) follows F(j), whose later layers serve earlier ones; the
 * last layer's window (layer 0) comes before its drop and falls back, once per micro-batch.
 */
static int next_layer_wrapping(const struct lynx_problem_stage *st, uint32_t l)
{
	return lynx_problem_find_window(st, LYNX_WINDOW_TP_FWD, (int32_t)((l + 1) % st->layers),
	                                LYNX_OP_ATTN_BDA);
}

static void test_1f1b_decides_which_occurrence_serves_a_backward(void **state)
{
	const struct job j = {"gpt-13b", "a100-nvlink", 8, 2, 1, 1, 4, false, 0, 0};
	struct lynx_problem p;
	struct lynx_plan plan;
	struct lynx_checker_result c;

	build(&j, &p);
	assert_int_equal(lynx_plan_init(&plan, &p, "window", false), 0);
	for (uint32_t s = 0; s < 2; s++)
		for (uint32_t l = 0; l < 20; l++) {
			struct lynx_decision *d =
			        lynx_plan_decision(&plan, s, l, LYNX_GROUP_FC2_IN);

			d->action = LYNX_ACTION_RECOMPUTE_IN_WINDOW;
			d->window = (uint32_t)next_layer_wrapping(&p.stages[s], l);
		}
	check(&p, &plan, &c);
	assert_int_equal(c.fallbacks, 20 + 4);
	assert_close("window work", c.window_work_s,
	             (2 * 4 * 20 - 24) * p.layer.ops[LYNX_OP_ACT].rerun_s);
	lynx_checker_free(&c);
	lynx_plan_free(&plan);
	lynx_problem_free(&p);
}

/* Offloading needs a host link; a plan for another pipeline does not fit. */
static void test_offload_without_a_host_link_and_mismatched_plans_are_refused(void **state)
{
	const struct job j = {"gpt-13b", "a100-nvlink", 8, 2, 1, 1, 4, false, 0, 0};
	const struct job k = {"gpt-13b", "a100-nvlink", 8, 4, 1, 1, 4, false, 0, 0};
	struct lynx_problem p, q;
	struct lynx_plan plan;
	struct lynx_checker_result c;
	char why[256] = "";

	build(&j, &p);
	build(&k, &q);
	assert_int_equal(lynx_plan_init(&plan, &p, "x", true), 0);
	lynx_plan_decision(&plan, 1, 0, LYNX_GROUP_V)->action = LYNX_ACTION_OFFLOAD;
	p.d2h.busbw = 0;
	assert_int_equal(lynx_checker_replay(&p, &plan, &c, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "host link"));
	assert_null(c.peak_bytes);
	assert_int_equal(lynx_checker_replay(&q, &plan, &c, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "stages"));
	lynx_plan_free(&plan);
	lynx_problem_free(&p);
	lynx_problem_free(&q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_checker_agrees_with_every_planner),
	        cmocka_unit_test(test_uniform_stages_take_the_textbook_1f1b_time),
	        cmocka_unit_test(test_interleaved_stages_shrink_the_bubble_by_v),
	        cmocka_unit_test(test_a_rebuild_that_fits_its_window_is_free),
	        cmocka_unit_test(test_window_overflow_lands_on_the_critical_path),
	        cmocka_unit_test(test_contention_prices_each_window_by_its_delay),
	        cmocka_unit_test(test_early_rebuilds_hold_memory_until_their_consumer),
	        cmocka_unit_test(test_a_rebuild_holds_the_scratch_of_what_it_rebuilds),
	        cmocka_unit_test(test_windows_after_the_consumer_fall_back_to_on_demand),
	        cmocka_unit_test(test_1f1b_decides_which_occurrence_serves_a_backward),
	        cmocka_unit_test(test_offload_without_a_host_link_and_mismatched_plans_are_refused),
	        cmocka_unit_test(test_settle_lowers_overflowing_budgets_by_their_excess),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
