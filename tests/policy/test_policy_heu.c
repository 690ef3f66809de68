/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy/heu: Lynx's HEU planner fits the budget by the checker's count, carries the
 * checker's numbers, uses windows where they exist, never loses to a baseline over the GPT
 * sweep, and searches a 48-layer stage quickly.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "checker.h"
#include "planner.h"

struct job {
	const char *gpt, *cluster;
	uint32_t t, p, b, m;
	bool sp;
	uint64_t budget; /* bytes; 0: the GPU's memory */
	uint32_t v;      /* virtual stages (interleaved 1F1B); 0: 1 */
};

static void build(const struct job *j, struct lynx_problem *p)
{
	struct lynx_model_desc m;
	struct lynx_problem_options opt = {.budget_bytes = j->budget};
	char why[256] = "";

	lynx_preset_fill_model(lynx_preset_find_model(j->gpt), &m);
	m.tp = j->t;
	m.pp = j->p;
	m.dp = 1;
	m.micro_batch = j->b;
	m.global_batch = j->b * j->m;
	m.sp = j->sp;
	m.vp = j->v;
	if (lynx_problem_from_model(&m, lynx_preset_find_cluster(j->cluster), &opt, p, why,
	                            sizeof(why)))
		fail_msg("problem refused: %s", why);
}

static void run(const char *name, const struct lynx_problem *p, struct lynx_plan *plan)
{
	char why[256] = "";

	if (lynx_planner_run(lynx_planner_find(name), p, plan, why, sizeof(why)))
		fail_msg("%s refused: %s", name, why);
}

/* Replays plan; the step time and per-stage peaks must be the plan's own. */
static void replay(const struct lynx_problem *p, const struct lynx_plan *plan,
                   struct lynx_checker_result *r)
{
	char why[256] = "";

	if (lynx_checker_replay(p, plan, r, why, sizeof(why)))
		fail_msg("checker refused the %s plan: %s", plan->planner, why);
}

static uint64_t max_peak(const struct lynx_checker_result *r)
{
	uint64_t max = 0;

	for (uint32_t s = 0; s < r->n_stages; s++)
		max = r->peak_bytes[s] > max ? r->peak_bytes[s] : max;
	return max;
}

/* The checker's numbers of planner `name` on problem p, which it frees. */
static double checked(struct lynx_problem *p, const char *name, uint64_t *peak, bool *fits)
{
	struct lynx_plan plan;
	struct lynx_checker_result r;
	double step;

	run(name, p, &plan);
	replay(p, &plan, &r);
	step = r.step_time_s;
	if (peak)
		*peak = max_peak(&r);
	if (fits)
		*fits = r.fits;
	lynx_checker_free(&r);
	lynx_plan_free(&plan);
	lynx_problem_free(p);
	return step;
}

/* The checker's numbers of planner `name` on job j. */
static double checked_step(const struct job *j, const char *name, uint64_t *peak, bool *fits)
{
	struct lynx_problem p;

	build(j, &p);
	return checked(&p, name, peak, fits);
}

static void test_heu_predictions_are_the_checkers(void **state)
{
	struct job j = {"gpt-13b", "a100-nvlink", 8, 4, 1, 16, false, 10ull << 30, 0};
	struct lynx_problem p;
	struct lynx_plan plan;
	struct lynx_checker_result r;

	build(&j, &p);
	run("heu", &p, &plan);
	assert_string_equal(plan.planner, "heu");
	replay(&p, &plan, &r);
	assert_true(plan.fits);
	assert_true(r.fits);
	assert_true(plan.step_time_s == r.step_time_s);
	for (uint32_t s = 0; s < p.n_stages; s++) {
		assert_true(plan.stages[s].peak_bytes == r.peak_bytes[s]);
		assert_true(r.peak_bytes[s] <= p.budget_bytes);
	}
	lynx_checker_free(&r);
	lynx_plan_free(&plan);
	lynx_problem_free(&p);
}

/* On PCIe, the forward TP collectives are long: HEU rebuilds in them and beats DTR. */
static void test_heu_rebuilds_in_windows_where_they_pay(void **state)
{
	struct job j = {"gpt-13b", "a100-pcie", 8, 4, 1, 16, false, 10ull << 30, 0};
	struct lynx_problem p;
	struct lynx_plan plan;
	struct lynx_checker_result r;
	uint64_t in_window = 0;
	double dtr = checked_step(&j, "dtr", NULL, NULL);

	build(&j, &p);
	run("heu", &p, &plan);
	for (uint32_t s = 0; s < p.n_stages; s++)
		for (uint32_t l = 0; l < p.stages[s].layers; l++)
			for (uint32_t g = 0; g < p.layer.n_groups; g++)
				in_window += lynx_plan_get(&plan, s, l, g)->action ==
				             LYNX_ACTION_RECOMPUTE_IN_WINDOW;
	replay(&p, &plan, &r);
	assert_true(in_window > 0);
	assert_true(r.window_work_s > 0);
	assert_true(r.fits);
	assert_true(r.step_time_s < dtr * 0.99);
	lynx_checker_free(&r);
	lynx_plan_free(&plan);
	lynx_problem_free(&p);
}

/*
 * Under heavy contention (rebuilds and collectives each twice as slow while they overlap) the
 * windows hold less. HEU's plan for that contention, replayed under it, is faster than the plan
 * it makes when told there is none, which overfills the windows; both fit.
 */
static void test_heu_plans_for_the_contention_it_is_given(void **state)
{
	struct job j = {"gpt-13b", "a100-pcie", 8, 4, 1, 16, false, 10ull << 30, 0};
	const struct lynx_interference heavy = {2, 2}, none = {1, 1};
	struct lynx_problem p;
	struct lynx_plan aware, blind;
	struct lynx_checker_result r_aware, r_blind;

	build(&j, &p);
	p.interference = none;
	run("heu", &p, &blind);
	p.interference = heavy;
	run("heu", &p, &aware);
	replay(&p, &aware, &r_aware);
	replay(&p, &blind, &r_blind);
	printf("# under contention 2/2: heu aware %.6f s (window work %.4f s), blind %.6f s "
	       "(window work %.4f s)\n",
	       r_aware.step_time_s, r_aware.window_work_s, r_blind.step_time_s,
	       r_blind.window_work_s);
	assert_true(r_aware.fits);
	assert_true(r_blind.fits);
	assert_true(aware.step_time_s == r_aware.step_time_s);
	assert_true(r_aware.window_work_s < r_blind.window_work_s);
	assert_true(r_aware.step_time_s < r_blind.step_time_s);
	lynx_checker_free(&r_aware);
	lynx_checker_free(&r_blind);
	lynx_plan_free(&aware);
	lynx_plan_free(&blind);
	lynx_problem_free(&p);
}

/* With the GPU's whole memory, nothing needs rebuilding: HEU is `none`. */
static void test_heu_keeps_everything_when_it_fits(void **state)
{
	struct job j = {"gpt-1.3b", "a100-nvlink", 8, 4, 1, 16, false, 0, 0};
	bool fits;
	double none = checked_step(&j, "none", NULL, &fits);

	assert_true(fits);
	assert_true(fabs(checked_step(&j, "heu", NULL, NULL) - none) <= 1e-9 * none);
}

/* Below what full recomputation needs, HEU says it does not fit, and still returns a plan. */
static void test_heu_says_when_nothing_fits(void **state)
{
	struct job j = {"gpt-13b", "a100-nvlink", 8, 4, 4, 16, false, 9ull << 30, 0};
	struct lynx_problem p;
	struct lynx_plan plan;

	build(&j, &p);
	run("heu", &p, &plan);
	assert_false(plan.fits);
	assert_true(plan.step_time_s > 0);
	lynx_plan_free(&plan);
	lynx_problem_free(&p);
}

/*
 * Below full recomputation's peak nothing fits; every stage that HEU's plan leaves over the
 * budget still reaches no more memory than full recomputation's (the least a rebuild plan
 * reaches), over the GPT sweep on both clusters and at one and four sequences per
 * micro-batch, with every group rebuildable, and with every third group one the executor
 * cannot replay (its producer reads a temporary, as profiles find: it is offloaded), where
 * HEU's estimate alone led it above full's peak. (A stage within the budget may take more,
 * to go faster.)
 */
/* Job j's stages that HEU leaves over the budget, 5% below full's peak, against full's; with
 * `freed`, every third rebuildable group cannot be replayed. */
static void assert_below_full(struct job j, bool freed)
{
	struct lynx_problem p;
	struct lynx_plan heu, full;
	struct lynx_checker_result rh, rf;
	uint64_t lo;

	checked_step(&j, "full", &lo, NULL);
	j.budget = lo - lo / 20;
	build(&j, &p);
	for (uint32_t g = 0; g < p.layer.n_groups && freed; g++)
		p.layer.groups[g].reads_freed = p.layer.groups[g].ops && g % 3 == 0;
	run("heu", &p, &heu);
	run("full", &p, &full);
	replay(&p, &heu, &rh);
	replay(&p, &full, &rf);
	assert_false(rh.fits);
	for (uint32_t s = 0; s < p.n_stages; s++)
		if (rh.peak_bytes[s] > j.budget && rh.peak_bytes[s] > rf.peak_bytes[s])
			fail_msg("%s %s b=%u%s: stage %u: heu %llu bytes, full %llu", j.gpt,
			         j.cluster, j.b, freed ? " (unreplayable groups)" : "", s,
			         (unsigned long long)rh.peak_bytes[s],
			         (unsigned long long)rf.peak_bytes[s]);
	lynx_checker_free(&rh);
	lynx_checker_free(&rf);
	lynx_plan_free(&heu);
	lynx_plan_free(&full);
	lynx_problem_free(&p);
}

static void test_heu_below_every_fit_plans_no_more_than_full(void **state)
{
	static const char *const clusters[] = {"a100-nvlink", "a100-pcie"};
	int n = 0;

	for (int g = 0; g < LYNX_MODEL_PRESET_COUNT; g++) {
		if (!lynx_preset_models[g].in_sweep)
			continue;
		for (size_t c = 0; c < sizeof(clusters) / sizeof(clusters[0]); c++)
			for (uint32_t b = 1; b <= 4; b += 3) {
				struct job j = {lynx_preset_models[g].name,
				                clusters[c],
				                8,
				                4,
				                b,
				                16,
				                false,
				                0,
				                0};
				assert_below_full(j, false);
				assert_below_full(j, true);
				n++;
			}
	}
	assert_true(n >= 20);
}

/*
 * The GPT sweep (presets with in_sweep) on both clusters, t=8 p=4, with the budget halfway
 * between full recomputation's peak and no recomputation's: HEU fits and is never slower
 * than a baseline that fits; it averages well above full recomputation.
 */
static void test_heu_never_loses_to_a_baseline_on_the_sweep(void **state)
{
	static const char *const clusters[] = {"a100-nvlink", "a100-pcie"};
	static const char *const baselines[] = {"none", "full", "selective", "dtr"};
	double sum = 0, sum_dtr = 0;
	int n = 0;

	for (size_t c = 0; c < sizeof(clusters) / sizeof(clusters[0]); c++) {
		for (int g = 0; g < LYNX_MODEL_PRESET_COUNT; g++) {
			struct job j = {
			        lynx_preset_models[g].name, clusters[c], 8, 4, 1, 16, false, 0, 0};
			uint64_t lo, hi;
			double heu, full;
			bool fits;

			if (!lynx_preset_models[g].in_sweep)
				continue;
			checked_step(&j, "full", &lo, NULL);
			checked_step(&j, "none", &hi, NULL);
			j.budget = lo + (hi - lo) / 2;
			heu = checked_step(&j, "heu", NULL, &fits);
			if (!fits)
				fail_msg("%s %s: heu does not fit", j.gpt, j.cluster);
			full = checked_step(&j, "full", NULL, NULL);
			for (size_t b = 0; b < sizeof(baselines) / sizeof(baselines[0]); b++) {
				double t = checked_step(&j, baselines[b], NULL, &fits);

				if (fits && heu > t * (1 + 1e-9))
					fail_msg("%s %s: heu %.6f s, %s %.6f s", j.gpt, j.cluster,
					         heu, baselines[b], t);
				if (!strcmp(baselines[b], "dtr"))
					sum_dtr += t / heu;
			}
			sum += full / heu;
			n++;
		}
	}
	print_message("heu over full: %.3fx on average over %d jobs; over dtr %.3fx\n", sum / n, n,
	              sum_dtr / n);
	assert_true(n >= 10);
	assert_true(sum / n >= 1.10);
}

/* planner `name`'s checked step on GPT-13B, t 8, p 4, two virtual stages, 16 micro-batches. */
static double interleaved_step(const char *name, uint64_t budget, uint64_t *peak, bool *fits)
{
	const struct job j = {"gpt-13b", "a100-nvlink", 8, 4, 1, 16, false, budget, 2};
	struct lynx_problem p;

	build(&j, &p);
	return checked(&p, name, peak, fits);
}

/*
 * Interleaved, a chunk's layers are held for as many passes as the chunk has in flight (on
 * the first stage 7 of chunk 0, 4 of chunk 1): HEU weighs them so, and at a quarter and at
 * half of the way from full's peak to none's it beats the exact on-demand MILP (Checkmate)
 * and DTR. Counting every layer alike, it trailed Checkmate by 0.09% at a quarter; without
 * relocations (kept units moved to higher layers where the checker finds that faster), by
 * 0.0057% at half.
 */
static void test_heu_weighs_interleaved_chunks_by_what_they_hold(void **state)
{
	uint64_t lo, hi;
	bool fits;

	interleaved_step("full", 0, &lo, NULL);
	interleaved_step("none", 0, &hi, NULL);
	for (int quarters = 1; quarters <= 2; quarters++) {
		uint64_t budget = lo + (hi - lo) / 4 * (uint64_t)quarters;
		double heu = interleaved_step("heu", budget, NULL, &fits);

		assert_true(fits);
		for (int k = 0; k < 2; k++) {
			const char *name = k ? "dtr" : "checkmate";
			double t = interleaved_step(name, budget, NULL, &fits);

			print_message(
			        "interleaved gpt-13b, %d/4 of the way: heu %.6f s, %s %.6f s\n",
			        quarters, heu, name, t);
			if (fits && heu > t * (1 + 1e-9))
				fail_msg("%d/4: heu %.6f s, %s %.6f s", quarters, heu, name, t);
		}
	}
}

/* A 48-layer stage (GPT-22B, p = 1) plans and fits. Its search time is printed here and held
 * to its target by `make bench-policy`, not by a unit test. */
static void test_heu_plans_a_48_layer_stage(void **state)
{
	struct job j = {"gpt-22b", "a100-nvlink", 8, 1, 4, 4, false, 0, 0};
	struct lynx_problem p;
	struct lynx_plan plan;
	uint64_t lo, hi;
	double best = INFINITY;

	checked_step(&j, "full", &lo, NULL);
	checked_step(&j, "none", &hi, NULL);
	j.budget = lo + (hi - lo) / 2;
	build(&j, &p);
	assert_int_equal(p.stages[0].layers, 48);
	for (int i = 0; i < 5; i++) {
		run("heu", &p, &plan);
		best = plan.search_time_s < best ? plan.search_time_s : best;
		assert_true(plan.fits);
		lynx_plan_free(&plan);
	}
	print_message("heu: %.2f ms for one 48-layer stage\n", best * 1e3);
	lynx_problem_free(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_heu_predictions_are_the_checkers),
	        cmocka_unit_test(test_heu_rebuilds_in_windows_where_they_pay),
	        cmocka_unit_test(test_heu_plans_for_the_contention_it_is_given),
	        cmocka_unit_test(test_heu_keeps_everything_when_it_fits),
	        cmocka_unit_test(test_heu_says_when_nothing_fits),
	        cmocka_unit_test(test_heu_below_every_fit_plans_no_more_than_full),
	        cmocka_unit_test(test_heu_never_loses_to_a_baseline_on_the_sweep),
	        cmocka_unit_test(test_heu_weighs_interleaved_chunks_by_what_they_hold),
	        cmocka_unit_test(test_heu_plans_a_48_layer_stage),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
