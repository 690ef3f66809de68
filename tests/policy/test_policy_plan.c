/* SPDX-License-Identifier: Apache-2.0 */
/* policy/plan: decisions, validation, and the lynx-plan JSON writer and reader. */
#define _GNU_SOURCE
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

#include "plan.h"

/* gpt-13b, t = 8, p = 2, SP: every window kind but DP appears. */
static struct lynx_problem problem;

static int setup(void **state)
{
	struct lynx_model_desc m;
	char why[256];

	lynx_preset_fill_model(lynx_preset_find_model("gpt-13b"), &m);
	m.tp = 8;
	m.pp = 2;
	m.global_batch = 4;
	m.sp = true;
	if (lynx_problem_from_model(&m, lynx_preset_find_cluster("a100-nvlink"), NULL, &problem,
	                            why, sizeof(why))) {
		fprintf(stderr, "setup: %s\n", why);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	lynx_problem_free(&problem);
	return 0;
}

static void set(struct lynx_plan *plan, uint32_t s, uint32_t l, enum lynx_group g,
                enum lynx_action a, int window)
{
	struct lynx_decision *d = lynx_plan_decision(plan, s, l, g);

	assert_true(window >= -1);
	d->action = a;
	d->window = window < 0 ? 0 : (uint32_t)window;
}

/* A per-layer plan that uses every action but offload and several window kinds. */
static void mixed_plan(struct lynx_plan *plan)
{
	const struct lynx_problem_stage *st0 = &problem.stages[0], *st1 = &problem.stages[1];

	assert_int_equal(lynx_plan_init(plan, &problem, "test", false), 0);
	plan->fits = true;
	plan->step_time_s = 1.0 / 3;
	plan->search_time_s = 1.25e-6;
	plan->stages[0].peak_bytes = 12345678901ull;
	plan->stages[1].peak_bytes = (1ull << 53) - 1;
	set(plan, 0, 0, LYNX_GROUP_SOFTMAX_OUT, LYNX_ACTION_RECOMPUTE_ON_DEMAND, -1);
	set(plan, 0, 3, LYNX_GROUP_Q_K, LYNX_ACTION_RECOMPUTE_IN_WINDOW,
	    lynx_problem_find_window(st0, LYNX_WINDOW_TP_FWD, 4, LYNX_OP_ATTN_BDA));
	set(plan, 0, 19, LYNX_GROUP_ACT_IN, LYNX_ACTION_RECOMPUTE_IN_WINDOW,
	    lynx_problem_find_window(st0, LYNX_WINDOW_PP_RECV_BWD, -1, -1));
	set(plan, 1, 7, LYNX_GROUP_FC2_IN, LYNX_ACTION_RECOMPUTE_IN_WINDOW,
	    lynx_problem_find_window(st1, LYNX_WINDOW_PP_RECV_FWD, -1, -1));
	set(plan, 1, 0, LYNX_GROUP_LN1_IN, LYNX_ACTION_OFFLOAD, -1);
}

static void assert_plans_equal(const struct lynx_plan *a, const struct lynx_plan *b)
{
	assert_string_equal(a->planner, b->planner);
	assert_true(a->fits == b->fits);
	assert_true(a->step_time_s == b->step_time_s);
	assert_true(a->search_time_s == b->search_time_s);
	assert_int_equal(a->budget_bytes, b->budget_bytes);
	assert_int_equal(a->n_stages, b->n_stages);
	for (uint32_t s = 0; s < a->n_stages; s++) {
		assert_int_equal(a->stages[s].peak_bytes, b->stages[s].peak_bytes);
		assert_true(a->stages[s].uniform == b->stages[s].uniform);
		for (uint32_t l = 0; l < a->stages[s].layers; l++)
			for (uint32_t g = 0; g < a->n_groups; g++) {
				const struct lynx_decision *x = lynx_plan_get(a, s, l, g),
				                           *y = lynx_plan_get(b, s, l, g);

				assert_int_equal(x->action, y->action);
				if (x->action == LYNX_ACTION_RECOMPUTE_IN_WINDOW)
					assert_int_equal(x->window, y->window);
			}
	}
}

static void test_json_round_trip_keeps_every_decision(void **state)
{
	struct lynx_plan plan, back;
	char why[256] = "";
	char *text, *again;

	mixed_plan(&plan);
	snprintf(plan.run, sizeof(plan.run), "torchelastic-3f2a"); /* the profiles' run */
	text = lynx_plan_to_json(&plan, &problem);
	assert_non_null(text);
	assert_non_null(strstr(text, "\"format\":\t\"lynx-plan\""));
	assert_non_null(strstr(text, "\"run\":\t\"torchelastic-3f2a\""));
	assert_non_null(strstr(text, "\"recompute_in_window\""));
	assert_non_null(strstr(text, "\"pp_recv_bwd\""));
	if (lynx_plan_from_json(text, &problem, &back, why, sizeof(why)))
		fail_msg("reader refused the writer's output: %s", why);
	assert_plans_equal(&plan, &back);
	assert_string_equal(back.run, "torchelastic-3f2a");
	again = lynx_plan_to_json(&back, &problem);
	assert_string_equal(text, again);
	free(text);
	free(again);
	lynx_plan_free(&plan);
	lynx_plan_free(&back);
}

static void test_uniform_plans_write_one_decision_object(void **state)
{
	struct lynx_plan plan, back;
	char why[256] = "";
	char *text;

	assert_int_equal(lynx_plan_init(&plan, &problem, "uniform", true), 0);
	set(&plan, 1, 0, LYNX_GROUP_SOFTMAX_OUT, LYNX_ACTION_RECOMPUTE_ON_DEMAND, -1);
	text = lynx_plan_to_json(&plan, &problem);
	assert_non_null(strstr(text, "\"decisions\":\t{"));
	assert_null(strstr(text, "\"decisions\":\t["));
	assert_int_equal(lynx_plan_from_json(text, &problem, &back, why, sizeof(why)), 0);
	assert_true(back.stages[1].uniform);
	assert_int_equal(lynx_plan_get(&back, 1, 17, LYNX_GROUP_SOFTMAX_OUT)->action,
	                 LYNX_ACTION_RECOMPUTE_ON_DEMAND);
	assert_plans_equal(&plan, &back);
	free(text);
	lynx_plan_free(&plan);
	lynx_plan_free(&back);
}

/* Replaces the first occurrence of from with to in text (into a new string). */
static char *edit(const char *text, const char *from, const char *to)
{
	const char *at = strstr(text, from);
	char *out;

	if (!at) {
		fail_msg("'%s' not in the document", from);
		return NULL;
	}
	assert_true(asprintf(&out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from)) > 0);
	return out;
}

/* The reader's message for text; fails if it accepts it. */
static void assert_refused(const char *text, const char *expect)
{
	struct lynx_plan plan;
	char why[256] = "";

	assert_int_equal(lynx_plan_from_json(text, &problem, &plan, why, sizeof(why)), -EINVAL);
	if (!strstr(why, expect))
		fail_msg("message '%s' does not say '%s'", why, expect);
	assert_null(plan.stages);
}

/* A number JSON cannot hold (a planner's infinite step time) is written as null, so the
 * file stays JSON and the reader names the field. */
static void test_a_non_finite_number_is_written_as_null_and_refused(void **state)
{
	struct lynx_plan plan;
	char *text;

	mixed_plan(&plan);
	plan.step_time_s = INFINITY;
	text = lynx_plan_to_json(&plan, &problem);
	assert_non_null(text);
	assert_non_null(strstr(text, "\"step_time_s\":\tnull"));
	assert_refused(text, "step_time_s");
	free(text);
	lynx_plan_free(&plan);
}

static void test_reader_names_the_field_and_the_reason(void **state)
{
	struct lynx_plan plan;
	char *text, *bad;
	static const struct {
		const char *from, *to, *expect;
	} cases[] = {
	        {"\"lynx-plan\"", "\"lynx-profile\"", "format"},
	        {"\"version\":\t1", "\"version\":\t2", "version: 2 is not supported"},
	        {"\"planner\":\t\"test\"", "\"planner\":\t7", "planner"},
	        {"\"fits\":\ttrue", "\"fits\":\t1", "fits"},
	        {"\"step_time_s\":\t", "\"step_time_s\":\t-", "step_time_s"},
	        {"\"budget_bytes\":\t", "\"budget_bytes\":\t-", "budget_bytes: -"},
	        {"\"peak_bytes\":\t12345678901", "\"peak_bytes\":\t\"big\"",
	         "stages[0].peak_bytes: not a number"},
	        {"\"layers\":\t20", "\"layers\":\t21", "stages[0].layers: 21"},
	        {"\"stage\":\t0", "\"stage\":\t1", "stages[0].stage"},
	        {"\"ln1_in\":\t\"keep\"", "\"ln1_in\":\t\"drop\"",
	         "stages[0].decisions[0].ln1_in: unknown action 'drop'"},
	        {"\"ln1_in\":\t\"keep\"", "\"ln1_inx\":\t\"keep\"",
	         "stages[0].decisions[0].ln1_inx: no such group"},
	        {"\"ln1_in\":\t\"keep\",", "", "stages[0].decisions[0].ln1_in: missing"},
	        {"\"qkv_in\":\t\"keep\"", "\"ln1_in\":\t\"keep\"",
	         "stages[0].decisions[0].ln1_in: given twice"},
	        {"\"ln1_in\":\t\"keep\"", "\"ln1_in\":\t\"recompute_on_demand\"",
	         "input and cannot be recomputed"},
	        {"\"kind\":\t\"tp_fwd\"", "\"kind\":\t\"tp_sideways\"", "unknown window kind"},
	        {"\"layer\":\t4", "\"layer\":\t40", "q_k.recompute_in_window.layer"},
	        {"\"op\":\t\"attn_bda\"", "\"op\":\t\"fc2\"",
	         "no tp_fwd window in layer 4 at op fc2"},
	        {"\"kind\":\t\"pp_recv_fwd\"", "\"kind\":\t\"pp_recv_bwd\"",
	         "stage 1 has no pp_recv_bwd window"},
	        {"\"stages\":\t[", "\"stages\":\t[{}, ", "stages: 3 stages"},
	        {"{", "[", "not valid JSON"},
	        /* cJSON reads 1e309 as infinity, which JSON cannot write back (the fuzzer's find)
	         */
	        {"\"fits\":\ttrue", "\"fits\":\ttrue, \"gap\": 1e309",
	         "gap: not a finite number >= 0"},
	};

	mixed_plan(&plan);
	text = lynx_plan_to_json(&plan, &problem);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bad = edit(text, cases[i].from, cases[i].to);
		assert_refused(bad, cases[i].expect);
		free(bad);
	}
	assert_refused("", "not valid JSON");
	assert_refused("[]", "not a JSON object");
	free(text);
	lynx_plan_free(&plan);
}

static void test_validate_refuses_plans_that_do_not_fit_the_problem(void **state)
{
	struct lynx_plan plan;
	char why[256] = "";

	assert_int_equal(lynx_plan_init(&plan, &problem, "x", true), 0);
	assert_int_equal(lynx_plan_validate(&plan, &problem, why, sizeof(why)), 0);
	set(&plan, 0, 0, LYNX_GROUP_V, LYNX_ACTION_RECOMPUTE_IN_WINDOW, 9999);
	assert_int_equal(lynx_plan_validate(&plan, &problem, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "window 9999 does not exist"));
	set(&plan, 0, 0, LYNX_GROUP_V, LYNX_ACTION_KEEP, -1);
	plan.stages[1].layers = 3;
	assert_int_equal(lynx_plan_validate(&plan, &problem, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "stage 1"));
	lynx_plan_free(&plan);
}

static void test_action_names_round_trip(void **state)
{
	for (int a = 0; a < LYNX_ACTION_COUNT; a++)
		assert_int_equal(lynx_plan_find_action(lynx_plan_action_name(a)), a);
	assert_int_equal(lynx_plan_find_action("evict"), LYNX_ACTION_COUNT);
	assert_string_equal(lynx_plan_action_name(LYNX_ACTION_COUNT), "unknown");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_json_round_trip_keeps_every_decision),
	        cmocka_unit_test(test_uniform_plans_write_one_decision_object),
	        cmocka_unit_test(test_reader_names_the_field_and_the_reason),
	        cmocka_unit_test(test_a_non_finite_number_is_written_as_null_and_refused),
	        cmocka_unit_test(test_validate_refuses_plans_that_do_not_fit_the_problem),
	        cmocka_unit_test(test_action_names_round_trip),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
