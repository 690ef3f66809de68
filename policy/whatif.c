/* SPDX-License-Identifier: Apache-2.0 */
/* The what-if of profiling-only mode: see whatif.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checker.h"
#include "planner.h"
#include "problem.h"
#include "profile.h"
#include "whatif.h"

/* The activation share of the peak each ladder row keeps. */
static const double ladder[LYNX_WHATIF_MAX_ROWS] = {0.75, 0.5, 0.25};

/* The checker's replay of plan on p, as a row; with store, its numbers also become that
 * plan's prediction (lynx_checker_store). */
static int replay_row_store(const struct lynx_problem *p, const struct lynx_plan *plan,
                            struct lynx_plan *store, struct lynx_whatif_row *row, char *why,
                            size_t len)
{
	struct lynx_checker_result r;
	int err = lynx_checker_replay(p, plan, &r, why, len);

	if (err)
		return err;
	row->budget_bytes = p->budget_bytes;
	row->fits = r.fits;
	row->step_s = r.step_time_s;
	row->search_s = plan->search_time_s;
	row->peak = 0;
	for (uint32_t s = 0; s < r.n_stages; s++)
		row->peak = r.peak_bytes[s] > row->peak ? r.peak_bytes[s] : row->peak;
	if (store)
		lynx_checker_store(&r, store);
	lynx_checker_free(&r);
	return 0;
}

/* The checker's replay of plan on p, as a row. */
static int replay_row(const struct lynx_problem *p, const struct lynx_plan *plan,
                      struct lynx_whatif_row *row, char *why, size_t len)
{
	return replay_row_store(p, plan, NULL, row, why, len);
}

/* Runs planner name on the profiles' problem (options base, NULL: defaults) at budget;
 * fills the replayed numbers. */
static int replay(const struct lynx_profile *const *ranks, size_t n,
                  const struct lynx_problem_options *base, uint64_t budget, const char *name,
                  struct lynx_whatif_row *row, struct lynx_problem *keep, char *why, size_t len)
{
	struct lynx_problem_options opt = base ? *base : (struct lynx_problem_options){0};
	struct lynx_problem p;

	opt.budget_bytes = budget;
	opt.budget_percent = 0;
	struct lynx_plan plan;
	int err = lynx_problem_from_profile(ranks, n, &opt, &p, why, len);

	if (err)
		return err;
	err = lynx_planner_run(lynx_planner_find(name), &p, &plan, why, len);
	if (!err) {
		err = replay_row(&p, &plan, row, why, len);
		lynx_plan_free(&plan);
	}
	if (!err && keep)
		*keep = p;
	else
		lynx_problem_free(&p);
	return err;
}

int lynx_whatif_from_profiles(const struct lynx_profile *const *ranks, size_t n,
                              uint64_t budget_bytes, const struct lynx_interference *interference,
                              struct lynx_whatif *out, char *why, size_t len)
{
	struct lynx_problem_options opt = {
	        .interference = interference ? *interference : LYNX_INTERFERENCE_DEFAULT};
	struct lynx_whatif_row base;
	struct lynx_problem p;
	int err;

	memset(out, 0, sizeof(*out));
	/* Keeping everything, at the measured peak (from_profile's default budget). */
	err = replay(ranks, n, &opt, 0, "none", &base, &p, why, len);
	if (err)
		return err;
	out->stages = p.n_stages;
	out->base_step_s = base.step_s;
	out->base_peak = base.peak;
	out->static_max = lynx_problem_max_static_bytes(&p);
	lynx_problem_free(&p);
	for (size_t i = 0; i < n; i++)
		if (lynx_profile_rerun_layers(ranks[i]) > out->trainer_recomputed)
			out->trainer_recomputed = (uint32_t)lynx_profile_rerun_layers(ranks[i]);

	for (size_t i = 0; i < (budget_bytes ? 1 : LYNX_WHATIF_MAX_ROWS); i++) {
		uint64_t budget = budget_bytes;
		if (!budget) {
			uint64_t share = out->base_peak > out->static_max
			                         ? out->base_peak - out->static_max
			                         : 0;
			budget = out->static_max + (uint64_t)((double)share * ladder[i]);
		}
		err = replay(ranks, n, &opt, budget, "heu", &out->rows[out->n_rows], NULL, why,
		             len);
		if (err == -ENOMEM)
			return err;
		/* A budget below some stage's static memory: no plan; the ladder stops. */
		if (err)
			break;
		out->n_rows++;
	}
	return 0;
}

static double mib(uint64_t bytes)
{
	return (double)bytes / (1024.0 * 1024.0);
}

void lynx_whatif_print(FILE *f, const char *tag, const struct lynx_whatif *w)
{
	fprintf(f,
	        "%s: what-if (Lynx HEU over %u stage%s; checker's prediction, optimizer step not "
	        "included): keeping everything peaks at %.2f MiB, %.3f ms per iteration\n",
	        tag, w->stages, w->stages == 1 ? "" : "s", mib(w->base_peak), w->base_step_s * 1e3);
	if (w->trainer_recomputed)
		fprintf(f,
		        "%s:   the trainer reruns the forward of up to %u layer%s a stage itself: "
		        "left as they are, the plans are over the others\n",
		        tag, w->trainer_recomputed, w->trainer_recomputed == 1 ? "" : "s");
	for (size_t i = 0; i < w->n_rows; i++) {
		const struct lynx_whatif_row *r = &w->rows[i];
		double saved =
		        w->base_peak ? 100.0 * (1.0 - (double)r->peak / (double)w->base_peak) : 0.0;
		double cost = w->base_step_s > 0 ? 100.0 * (r->step_s / w->base_step_s - 1.0) : 0.0;
		fprintf(f,
		        "%s:   budget %8.2f MiB: peak %8.2f MiB (%5.1f%% less), iteration "
		        "%+.1f%%%s "
		        "(search %.1f ms)\n",
		        tag, mib(r->budget_bytes), mib(r->peak), saved, cost,
		        r->fits ? "" : ", DOES NOT FIT", r->search_s * 1e3);
	}
	if (!w->n_rows)
		fprintf(f, "%s:   no budget below the peak leaves room above the static memory\n",
		        tag);
}

void lynx_whatif_plan_free(struct lynx_whatif_plan *out)
{
	if (out->plan)
		lynx_plan_free(out->plan);
	if (out->problem)
		lynx_problem_free(out->problem);
	free(out->plan);
	free(out->problem);
	out->plan = NULL;
	out->problem = NULL;
}

/* Bisection steps of budget_within_slowdown: the budget to 1/16384 of the activations'
 * share of the peak, a few milliseconds of HEU per step on a profile's problem. */
#define SLOWDOWN_STEPS 14

/*
 * The smallest budget at which planner's plan fits and is predicted at most max_slowdown_bp
 * slower than keeping everything, by bisection between the largest static memory (no plan
 * goes below it) and the peak of keeping everything (no slowdown): the checker's time
 * grows as the budget shrinks, if not strictly. A searching planner's budget is found with
 * HEU, whose plan it can only better at that budget.
 */
static int budget_within_slowdown(const struct lynx_profile *const *ranks, size_t n,
                                  const struct lynx_problem_options *opt, const char *planner,
                                  uint64_t *budget, char *why, size_t len)
{
	const struct lynx_planner *pl = lynx_planner_find(planner);
	const char *probe = pl && !pl->searches ? planner : "heu";
	struct lynx_whatif_row base, row;
	struct lynx_problem p;
	int err = replay(ranks, n, opt, 0, "none", &base, &p, why, len);

	if (err)
		return err;
	/* hi: keeping everything fits there, by the checker too. */
	uint64_t lo = lynx_problem_max_static_bytes(&p),
	         hi = base.peak > p.budget_bytes ? base.peak : p.budget_bytes;
	double limit = base.step_s * (1.0 + opt->max_slowdown_bp / 10000.0);
	lynx_problem_free(&p);
	for (int step = 0; step < SLOWDOWN_STEPS && hi > lo + 1; step++) {
		uint64_t mid = lo + (hi - lo) / 2;
		char ignored[256];
		err = replay(ranks, n, opt, mid, probe, &row, NULL, ignored, sizeof(ignored));
		if (err == -ENOMEM)
			return err;
		if (!err && row.fits && row.step_s <= limit)
			hi = mid;
		else
			lo = mid;
	}
	*budget = hi;
	return 0;
}

int lynx_whatif_plan(const struct lynx_profile *const *ranks, size_t n,
                     const struct lynx_problem_options *opt, const char *planner,
                     const char *plan_json, struct lynx_whatif_plan *out,
                     struct lynx_whatif_row *row, struct lynx_whatif_row *keep, char *why,
                     size_t len)
{
	const struct lynx_planner *pl = lynx_planner_find(planner ? planner : "heu");
	struct lynx_problem_options chosen = *opt;
	int err;

	out->problem = NULL;
	out->plan = NULL;
	if (opt->max_slowdown_bp && !opt->budget_bytes && !opt->budget_percent && !plan_json &&
	    pl && pl->budgeted) {
		err = budget_within_slowdown(ranks, n, opt, pl->name, &chosen.budget_bytes, why,
		                             len);
		if (err)
			return err;
	}
	out->problem = calloc(1, sizeof(*out->problem));
	if (!out->problem)
		return -ENOMEM;
	err = lynx_problem_from_profile(ranks, n, &chosen, out->problem, why, len);
	if (err) {
		free(out->problem);
		out->problem = NULL;
		return err;
	}
	out->plan = calloc(1, sizeof(*out->plan));
	if (!out->plan) {
		lynx_whatif_plan_free(out);
		return -ENOMEM;
	}
	if (keep) {
		struct lynx_plan none;
		err = lynx_planner_run(lynx_planner_find("none"), out->problem, &none, why, len);
		if (!err) {
			err = replay_row(out->problem, &none, keep, why, len);
			lynx_plan_free(&none);
		}
	}
	if (!err && plan_json)
		err = lynx_plan_from_json(plan_json, out->problem, out->plan, why, len);
	else if (!err && !pl) {
		snprintf(why, len, "no planner called '%s'", planner);
		err = -EINVAL;
	} else if (!err) {
		err = lynx_planner_run(pl, out->problem, out->plan, why, len);
	}
	if (err) {
		/* A failed planner or reader leaves nothing in the plan to free. */
		free(out->plan);
		out->plan = NULL;
		lynx_whatif_plan_free(out);
		return err;
	}
	/* The plan's predictions are the checker's, on this job's problem: they decide whether
	 * a stage is armed. A plan file's own were made for the job it was planned for, and
	 * the baselines' (planner.c) count saved bytes beside the static peak, without the
	 * moments the checker walks through. */
	err = replay_row_store(out->problem, out->plan, out->plan, row, why, len);
	if (err)
		lynx_whatif_plan_free(out);
	return err;
}

void lynx_whatif_count_actions(const struct lynx_whatif_plan *wp, uint32_t s,
                               uint32_t counts[LYNX_ACTION_COUNT])
{
	memset(counts, 0, LYNX_ACTION_COUNT * sizeof(*counts));
	for (uint32_t l = 0; s < wp->problem->n_stages && l < wp->problem->stages[s].layers; l++)
		for (uint32_t g = 0; g < wp->problem->layer.n_groups; g++)
			counts[lynx_plan_get(wp->plan, s, l, g)->action]++;
}
