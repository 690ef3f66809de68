/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy/partition: the DP finds the cost model's optimum (brute force over every split of
 * small jobs), is never worse than the uniform split, moves layers off the last stage when a
 * large vocabulary makes the head dominate, builds problems with uneven splits, and prints
 * Megatron's flags.
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

#include "partition.h"

/* gpt-1.3b's shape with L layers on t = 2, p stages, m micro-batches; vocab v (0: preset). */
static void job(struct lynx_model_desc *m, uint32_t L, uint32_t p, uint32_t micro, uint32_t v)
{
	lynx_preset_fill_model(lynx_preset_find_model("gpt-1.3b"), m);
	m->layers = L;
	m->tp = 2;
	m->pp = p;
	m->dp = 1;
	m->micro_batch = 1;
	m->global_batch = micro;
	if (v)
		m->vocab = v;
}

static void find(const struct lynx_model_desc *m, uint64_t budget, const char *planner,
                 struct lynx_partition *pt)
{
	struct lynx_problem_options opt = {.budget_bytes = budget};
	char why[256] = "";

	if (lynx_partition_find(m, lynx_preset_find_cluster("a100-nvlink"), &opt,
	                        planner ? lynx_planner_find(planner) : NULL, pt, why, sizeof(why)))
		fail_msg("partition refused: %s", why);
}

/* The least predicted time over every split of L layers into 3 stages, by enumeration. */
static double brute_force_3(const struct lynx_partition *pt, uint32_t *best)
{
	double min = INFINITY;
	uint32_t L = pt->n_layers, split[3];

	for (split[0] = 1; split[0] <= L - 2; split[0]++)
		for (split[1] = 1; split[0] + split[1] <= L - 1; split[1]++) {
			double t;

			split[2] = L - split[0] - split[1];
			t = lynx_partition_predict(pt, split);
			if (t < min) {
				min = t;
				memcpy(best, split, sizeof(split));
			}
		}
	return min;
}

static void test_partition_dp_matches_brute_force_l8_p3(void **state)
{
	/* The roomy budget, a tight one that forces recompute, and a large vocabulary. */
	static const struct {
		uint64_t budget;
		uint32_t vocab;
	} cases[] = {{0, 0}, {6ull << 30, 0}, {0, 400000}, {12ull << 30, 400000}};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct lynx_model_desc m;
		struct lynx_partition pt;
		uint32_t best[3];
		double brute;

		job(&m, 8, 3, 12, cases[i].vocab);
		find(&m, cases[i].budget, NULL, &pt);
		assert_int_equal(pt.evaluations, 3 * 6);
		brute = brute_force_3(&pt, best);
		assert_true(isfinite(brute));
		assert_true(fabs(pt.dp.predicted_s - brute) <= 1e-12 * brute);
		assert_true(fabs(lynx_partition_predict(&pt, pt.dp.layers) - brute) <=
		            1e-12 * brute);
		assert_int_equal(pt.dp.layers[0] + pt.dp.layers[1] + pt.dp.layers[2], 8);
		lynx_partition_free(&pt);
	}
}

static void test_partition_never_worse_than_uniform(void **state)
{
	static const char *const planners[] = {"heu", "full", "dtr"};

	for (size_t i = 0; i < sizeof(planners) / sizeof(planners[0]); i++) {
		struct lynx_model_desc m;
		struct lynx_partition pt;

		job(&m, 12, 4, 16, 0);
		find(&m, 8ull << 30, planners[i], &pt);
		assert_string_equal(pt.planner, planners[i]);
		assert_true(pt.dp.predicted_s <= pt.uniform.predicted_s);
		assert_true(pt.megatron.predicted_s <= pt.uniform.predicted_s);
		assert_true(pt.dp.predicted_s <= pt.megatron.predicted_s);
		assert_true(pt.best.checked && pt.uniform.checked);
		assert_true(pt.best.checked_s <= pt.uniform.checked_s);
		lynx_partition_free(&pt);
	}
}

static void test_partition_moves_layers_off_a_heavy_head(void **state)
{
	struct lynx_model_desc m;
	struct lynx_partition pt;

	/* A 1M-token vocabulary: the head's GEMM and logits outweigh several layers. */
	job(&m, 16, 4, 16, 1u << 20);
	find(&m, 0, NULL, &pt);
	assert_true(pt.fits);
	assert_true(pt.best.layers[3] < 4);
	assert_true(pt.dp.predicted_s < 0.97 * pt.uniform.predicted_s);
	assert_true(pt.best.checked_s < pt.uniform.checked_s);
	lynx_partition_free(&pt);
}

static void test_partition_uneven_split_builds_a_problem(void **state)
{
	static const uint32_t split[] = {3, 5, 4};
	struct lynx_problem_options opt = {.stage_layers = split};
	struct lynx_model_desc m;
	struct lynx_problem p;
	char why[256] = "";

	job(&m, 12, 3, 6, 0);
	assert_int_equal(lynx_problem_from_model(&m, lynx_preset_find_cluster("a100-nvlink"), &opt,
	                                         &p, why, sizeof(why)),
	                 0);
	assert_int_equal(p.stages[1].layers, 5);
	assert_int_equal(p.stages[2].first_layer, 8);
	assert_int_equal(p.stages[1].params, 5 * lynx_model_layer_params_per_rank(&m));
	{
		/* A plan of the uneven split survives its JSON form. */
		struct lynx_plan plan, back;
		char *text, *again;

		assert_int_equal(
		        lynx_planner_run(lynx_planner_find("heu"), &p, &plan, why, sizeof(why)), 0);
		text = lynx_plan_to_json(&plan, &p);
		assert_non_null(text);
		assert_int_equal(lynx_plan_from_json(text, &p, &back, why, sizeof(why)), 0);
		assert_int_equal(back.stages[1].layers, 5);
		again = lynx_plan_to_json(&back, &p);
		assert_string_equal(text, again);
		free(text);
		free(again);
		lynx_plan_free(&plan);
		lynx_plan_free(&back);
	}
	lynx_problem_free(&p);

	m.layers = 13;
	assert_int_equal(lynx_problem_from_model(&m, lynx_preset_find_cluster("a100-nvlink"), &opt,
	                                         &p, why, sizeof(why)),
	                 -EINVAL);
	assert_non_null(strstr(why, "add up to 12"));
	assert_int_equal(lynx_model_validate(&m, why, sizeof(why)), -EINVAL);
}

static void test_partition_refuses_invalid_models(void **state)
{
	struct lynx_model_desc m;
	struct lynx_partition pt;
	char why[256] = "";

	job(&m, 3, 4, 8, 0);
	assert_int_equal(lynx_partition_find(&m, lynx_preset_find_cluster("a100-nvlink"), NULL,
	                                     NULL, &pt, why, sizeof(why)),
	                 -EINVAL);
	assert_non_null(strstr(why, "exceeds the number of layers"));
	job(&m, 10, 4, 8, 0);
	m.heads = 7;
	assert_int_equal(lynx_partition_find(&m, lynx_preset_find_cluster("a100-nvlink"), NULL,
	                                     NULL, &pt, why, sizeof(why)),
	                 -EINVAL);
	assert_non_null(strstr(why, "not divisible"));
}

static void test_partition_prints_megatron_flags(void **state)
{
	static const uint32_t uniform[] = {10, 10, 10, 10}, ends[] = {11, 10, 10, 9},
	                      uneven[] = {9, 10, 11, 10};
	char buf[256];

	assert_true(lynx_partition_megatron_flags(uniform, 4, buf, sizeof(buf)));
	assert_string_equal(buf, "--pipeline-model-parallel-size 4");
	assert_true(lynx_partition_megatron_flags(ends, 4, buf, sizeof(buf)));
	assert_string_equal(buf, "--pipeline-model-parallel-size 4 "
	                         "--decoder-first-pipeline-num-layers 11 "
	                         "--decoder-last-pipeline-num-layers 9");
	assert_false(lynx_partition_megatron_flags(uneven, 4, buf, sizeof(buf)));
	assert_string_equal(buf, "--pipeline-model-parallel-size 4 "
	                         "--pipeline-model-parallel-layout \"Et*9|t*10|t*11|t*10,L\"");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_partition_dp_matches_brute_force_l8_p3),
	        cmocka_unit_test(test_partition_never_worse_than_uniform),
	        cmocka_unit_test(test_partition_moves_layers_off_a_heavy_head),
	        cmocka_unit_test(test_partition_uneven_split_builds_a_problem),
	        cmocka_unit_test(test_partition_refuses_invalid_models),
	        cmocka_unit_test(test_partition_prints_megatron_flags),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
