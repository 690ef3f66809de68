/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy/cbc: the exact planners' outer loop shares one time limit among all its solves, from
 * the planner's start, never gives a solve more than is left, hands what fast solves leave to
 * the later ones, and keeps the start, with a note, on a stage the limit or CBC leaves
 * unsolved. A fake solve on a simulated clock stands in for CBC, so no check depends on this
 * machine's speed or load, and CBC need not be installed.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cbc.h"
#include "checker.h"
#include "planner.h"

#define LIMIT_S 1.0
#define MAX_SOLVES 64

/* The simulated clock: only the fake solve advances it. */
static double fake_now;

static double fake_clock(void)
{
	return fake_now;
}

/* What the fake solve does, and what it saw. */
struct fake {
	const struct lynx_problem *p;
	const struct lynx_plan *full; /* full recomputation: what a "solution" writes */
	double use;                   /* simulated time a solve takes, as a share of its seconds */
	int unsolved, infeasible;     /* a stage CBC finds nothing for (proved infeasible); -1 */
	int overflows; /* a stage whose first solve writes keep-all (overflows by a little); -1 */
	unsigned n;
	uint32_t stage[MAX_SOLVES];
	uint64_t budget[MAX_SOLVES];
	double at[MAX_SOLVES], seconds[MAX_SOLVES];
};

static int fake_solve(void *ctx, uint32_t s, uint64_t budget, double seconds,
                      struct lynx_plan *plan, struct lynx_cbc_stage_solve *out)
{
	struct fake *f = ctx;
	bool first = budget == lynx_problem_stage_budget(f->p, s);

	assert_true(f->n < MAX_SOLVES);
	f->stage[f->n] = s;
	f->budget[f->n] = budget;
	f->at[f->n] = fake_now;
	f->seconds[f->n++] = seconds;
	fake_now += f->use * seconds;
	*out = (struct lynx_cbc_stage_solve){.gap = NAN, .added_gap = NAN};
	if ((int)s == f->unsolved || (int)s == f->infeasible) {
		out->infeasible = (int)s == f->infeasible;
		return 0;
	}
	for (uint32_t l = 0; l < f->p->stages[s].layers; l++)
		for (uint32_t g = 0; g < f->p->layer.n_groups; g++)
			*lynx_plan_decision(plan, s, l, g) =
			        (int)s == f->overflows && first
			                ? (struct lynx_decision){.action = LYNX_ACTION_KEEP}
			                : *lynx_plan_get(f->full, s, l, g);
	*out = (struct lynx_cbc_stage_solve){.solved = true, .optimal = true, .gap = 0.001 * s};
	return 0;
}

/*
 * gpt-1.3b on NVLink, t = 8, p = 4, at a budget where keeping everything overflows on every
 * stage and full recomputation fits on every stage: halfway between full's largest peak and
 * none's smallest (1.21 and 1.46 GiB).
 */
static void build(struct lynx_problem *p)
{
	struct lynx_model_desc m;
	struct lynx_problem_options opt = {0};
	struct lynx_plan full, none;
	char why[256] = "";

	lynx_preset_fill_model(lynx_preset_find_model("gpt-1.3b"), &m);
	m.tp = 8;
	m.pp = 4;
	m.dp = 1;
	m.micro_batch = 1;
	m.global_batch = 16;
	m.sp = false;
	for (int pass = 0; pass < 2; pass++) {
		if (lynx_problem_from_model(&m, lynx_preset_find_cluster("a100-nvlink"), &opt, p,
		                            why, sizeof(why)))
			fail_msg("problem refused: %s", why);
		if (pass)
			break;
		if (lynx_planner_run(lynx_planner_find("full"), p, &full, why, sizeof(why)) ||
		    lynx_planner_run(lynx_planner_find("none"), p, &none, why, sizeof(why)))
			fail_msg("a baseline refused: %s", why);
		uint64_t full_max = 0, none_min = UINT64_MAX;
		for (uint32_t s = 0; s < p->n_stages; s++) {
			if (full.stages[s].peak_bytes > full_max)
				full_max = full.stages[s].peak_bytes;
			if (none.stages[s].peak_bytes < none_min)
				none_min = none.stages[s].peak_bytes;
		}
		assert_true(full_max < none_min);
		opt.budget_bytes = (full_max + none_min) / 2;
		lynx_plan_free(&full);
		lynx_plan_free(&none);
		lynx_problem_free(p);
	}
}

/* The fixture: a problem, full recomputation's plan, a fake, a plan that keeps everything. */
struct fixture {
	struct lynx_problem p;
	struct lynx_plan full, plan;
	struct fake fake;
	struct lynx_cbc_search search;
	struct lynx_cbc_rounds out;
	char why[256];
};

static int setup(void **state)
{
	struct fixture *x = calloc(1, sizeof(*x));
	char why[256] = "";

	assert_non_null(x);
	build(&x->p);
	if (lynx_planner_run(lynx_planner_find("full"), &x->p, &x->full, why, sizeof(why)))
		fail_msg("full refused: %s", why);
	assert_int_equal(lynx_plan_init(&x->plan, &x->p, "fake", false), 0);
	x->fake = (struct fake){.p = &x->p,
	                        .full = &x->full,
	                        .use = 1,
	                        .unsolved = -1,
	                        .infeasible = -1,
	                        .overflows = -1};
	fake_now = 1000;
	x->search = (struct lynx_cbc_search){.max_rounds = 6,
	                                     .limit_s = LIMIT_S,
	                                     .started = fake_now,
	                                     .now = fake_clock,
	                                     .solve = fake_solve,
	                                     .ctx = &x->fake,
	                                     .start = "the start"};
	*state = x;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *x = *state;

	lynx_plan_free(&x->plan);
	lynx_plan_free(&x->full);
	lynx_problem_free(&x->p);
	free(x);
	return 0;
}

static int run(struct fixture *x)
{
	return lynx_cbc_plan_stages(&x->p, &x->plan, &x->search, &x->out, x->why, sizeof(x->why));
}

/* Whether stage s of x's plan keeps everything (the start). */
static bool keeps_all(const struct fixture *x, uint32_t s)
{
	for (uint32_t l = 0; l < x->p.stages[s].layers; l++)
		for (uint32_t g = 0; g < x->p.layer.n_groups; g++)
			if (lynx_plan_get(&x->plan, s, l, g)->action != LYNX_ACTION_KEEP)
				return false;
	return true;
}

/* No solve is given more than what is left of the limit when it starts. */
static void assert_within_deadline(const struct fixture *x)
{
	double deadline = x->search.started + x->search.limit_s;

	for (unsigned i = 0; i < x->fake.n; i++) {
		assert_true(x->fake.seconds[i] >= LYNX_CBC_MIN_SOLVE_S);
		assert_true(x->fake.at[i] + x->fake.seconds[i] <= deadline + 1e-12);
	}
}

/*
 * Solves that each run to their limit share the limit evenly and end at the deadline: the
 * seconds given add up to the limit, not to the limit per stage.
 */
static void test_cbc_solves_that_run_to_their_limit_share_it_evenly(void **state)
{
	struct fixture *x = *state;
	double sum = 0;

	assert_int_equal(run(x), 0);
	assert_int_equal(x->fake.n, x->p.n_stages);
	for (unsigned i = 0; i < x->fake.n; i++) {
		assert_int_equal(x->fake.stage[i], i);
		assert_true(fabs(x->fake.seconds[i] - LIMIT_S / x->p.n_stages) < 1e-9);
		sum += x->fake.seconds[i];
	}
	assert_true(sum <= LIMIT_S + 1e-9);
	assert_within_deadline(x);
	assert_true(x->out.solved && x->out.optimal);
	assert_int_equal(x->out.kept, 0);
	assert_int_equal(x->out.searched, x->p.n_stages);
	assert_true(fabs(x->out.gap - 0.001 * (x->p.n_stages - 1)) < 1e-12);
	assert_true(fabs(x->out.solve_s - LIMIT_S) < 1e-9);
	assert_string_equal(x->out.note, "");
	assert_true(x->plan.fits);
}

/* The planner's set-up counts: a search that starts 0.6 s into a 1 s limit has 0.4 s. */
static void test_cbc_limit_counts_from_the_planners_start(void **state)
{
	struct fixture *x = *state;
	double sum = 0;

	x->search.started = fake_now - 0.6;
	assert_int_equal(run(x), 0);
	assert_int_equal(x->fake.n, x->p.n_stages);
	for (unsigned i = 0; i < x->fake.n; i++)
		sum += x->fake.seconds[i];
	assert_true(fabs(sum - 0.4) < 1e-9);
	assert_within_deadline(x);
}

/* What a solve that stops early leaves goes to the ones after it; none gets more than is left. */
static void test_cbc_fast_solves_leave_their_time_to_the_next(void **state)
{
	struct fixture *x = *state;

	x->fake.use = 0.1;
	assert_int_equal(run(x), 0);
	assert_int_equal(x->fake.n, x->p.n_stages);
	for (unsigned i = 1; i < x->fake.n; i++)
		assert_true(x->fake.seconds[i] > x->fake.seconds[i - 1]);
	assert_within_deadline(x);
	assert_true(x->out.solved);
}

/*
 * Solves that overrun their limits (CBC stops between its steps) run the limit out: the stages
 * left keep the start, the search succeeds, is not called optimal, and its note says so.
 */
static void test_cbc_stages_past_the_deadline_keep_the_start(void **state)
{
	struct fixture *x = *state;

	x->fake.use = 2;
	assert_int_equal(run(x), 0);
	assert_true(x->fake.n >= 1 && x->fake.n < x->p.n_stages);
	assert_within_deadline(x);
	assert_false(x->out.solved);
	assert_false(x->out.optimal);
	assert_true(isnan(x->out.gap));
	assert_int_equal(x->out.kept, x->p.n_stages - x->fake.n);
	for (uint32_t s = 0; s < x->p.n_stages; s++)
		assert_true(keeps_all(x, s) == (s >= x->fake.n));
	/* 0.25 s given, 0.5 used; then 0.17 and 0.33; then 0.08 and 0.17: nothing left. */
	assert_int_equal(x->fake.n, 3);
	assert_string_equal(x->out.note, "time limit 1 s reached: stage 3 keeps the start");
}

/* CBC finds nothing in its share for one stage: it keeps the start, the others are solved. */
static void test_cbc_unsolved_stage_keeps_the_start_with_a_note(void **state)
{
	struct fixture *x = *state;

	x->fake.unsolved = 2;
	x->fake.use = 0;
	assert_int_equal(run(x), 0);
	assert_false(x->out.solved);
	assert_false(x->out.optimal);
	assert_int_equal(x->out.kept, 1);
	assert_string_equal(x->out.note, "time limit 1 s reached: stage 2 keeps the start");
	for (uint32_t s = 0; s < x->p.n_stages; s++)
		assert_true(keeps_all(x, s) == (s == 2));
	/* Its start overflows, so later rounds try it again, lower, within what is left. */
	assert_true(x->fake.n > x->p.n_stages);
	assert_within_deadline(x);
}

/* A stage the MILP proves infeasible keeps the start; the note blames the budget, not time. */
static void test_cbc_infeasible_stage_says_so(void **state)
{
	struct fixture *x = *state;

	x->fake.infeasible = 1;
	x->fake.use = 0;
	assert_int_equal(run(x), 0);
	assert_int_equal(x->out.kept, 1);
	assert_non_null(strstr(x->out.note, "the MILP has no plan for stage 1 within"));
	assert_non_null(strstr(x->out.note, "it keeps the start"));
	assert_true(keeps_all(x, 1));
}

/* Without a start to keep, a stage left unsolved is an error that names it. */
static void test_cbc_without_a_start_an_unsolved_stage_is_an_error(void **state)
{
	struct fixture *x = *state;

	x->search.start = NULL;
	x->fake.unsolved = 2;
	assert_int_equal(run(x), -ESRCH);
	assert_non_null(strstr(x->why, "stage 2"));
	assert_false(x->out.solved);

	x->fake.unsolved = -1;
	x->fake.n = 0;
	fake_now = x->search.started + LIMIT_S;
	assert_int_equal(run(x), -ESRCH);
	assert_int_equal(x->fake.n, 0);
	assert_non_null(strstr(x->why, "ran out before stage 0"));
}

/*
 * Re-tightening rounds share the same deadline: with time left, a stage that overflows is
 * solved again, at a lower budget, within what is left.
 */
static void test_cbc_rounds_after_the_first_obey_the_deadline(void **state)
{
	struct fixture *x = *state;

	x->fake.overflows = 1;
	x->fake.use = 0.1;
	assert_int_equal(run(x), 0);
	assert_int_equal(x->out.rounds, 2);
	assert_int_equal(x->fake.n, x->p.n_stages + 1);
	assert_int_equal(x->fake.stage[x->p.n_stages], 1);
	assert_true(x->fake.budget[x->p.n_stages] < lynx_problem_stage_budget(&x->p, 1));
	assert_within_deadline(x);
	assert_true(x->out.solved && x->out.optimal);
	assert_true(x->plan.fits);
	assert_string_equal(x->out.note, "");
}

/*
 * When every solve of the first round runs to its limit, there is no time for a second: the
 * first round's plan stands, with the checker's numbers, and the note names the stage still
 * over budget.
 */
static void test_cbc_no_round_starts_past_the_deadline(void **state)
{
	struct fixture *x = *state;

	x->fake.overflows = 1;
	assert_int_equal(run(x), 0);
	assert_int_equal(x->fake.n, x->p.n_stages);
	assert_int_equal(x->out.rounds, 1);
	assert_true(x->out.solved);
	assert_false(x->out.optimal);
	assert_int_equal(x->out.kept, 0);
	assert_false(x->plan.fits);
	assert_true(x->plan.stages[1].peak_bytes > lynx_problem_stage_budget(&x->p, 1));
	assert_string_equal(x->out.note,
	                    "time limit 1 s reached: stage 1 over budget after 1 round");
}

/* A rank searches its own stage: that one gets the whole limit, the others keep the start. */
static void test_cbc_one_searched_stage_gets_the_whole_limit(void **state)
{
	struct fixture *x = *state;

	x->p.search_one_stage = true;
	x->p.searched_stage = 2;
	x->fake.use = 1;
	assert_int_equal(run(x), 0);
	assert_int_equal(x->fake.n, 1);
	assert_int_equal(x->fake.stage[0], 2);
	assert_true(fabs(x->fake.seconds[0] - LIMIT_S) < 1e-9);
	assert_int_equal(x->out.searched, 1);
	assert_int_equal(x->out.kept, 0);
	for (uint32_t s = 0; s < x->p.n_stages; s++)
		assert_true(keeps_all(x, s) == (s != 2));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define TEST(t) cmocka_unit_test_setup_teardown(t, setup, teardown)
	        TEST(test_cbc_solves_that_run_to_their_limit_share_it_evenly),
	        TEST(test_cbc_limit_counts_from_the_planners_start),
	        TEST(test_cbc_fast_solves_leave_their_time_to_the_next),
	        TEST(test_cbc_stages_past_the_deadline_keep_the_start),
	        TEST(test_cbc_unsolved_stage_keeps_the_start_with_a_note),
	        TEST(test_cbc_infeasible_stage_says_so),
	        TEST(test_cbc_without_a_start_an_unsolved_stage_is_an_error),
	        TEST(test_cbc_rounds_after_the_first_obey_the_deadline),
	        TEST(test_cbc_no_round_starts_past_the_deadline),
	        TEST(test_cbc_one_searched_stage_gets_the_whole_limit),
#undef TEST
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
