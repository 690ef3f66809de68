/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lynx HEU with offloading: HEU's plan (heu.c), which keeps or rebuilds, then, group by
 * group, rebuilding replaced by a copy to pinned host memory wherever the checker finds the
 * step faster and the budget still held. A copy runs on the copy engines beside compute and
 * comes back one backward ahead (checker.h), so on a fast enough link it hides what a
 * rebuild on demand or beyond its window's idle time would cost; it also holds memory
 * longer (until its copy out ends, and from its prefetch on), which the checker weighs.
 *
 * Search. Groups are tried by rebuild time, the most expensive first. Each is switched to
 * OFFLOAD in every layer of every stage where it is rebuilt, and kept so if the checker's
 * step is shorter and the plan fits as well as before; else in each stage alone. A group
 * that another rebuilt group of its layer depends on stays rebuilt (the checker refuses a
 * rebuild from an offloaded group). Without a host link (busbw 0) the plan is HEU's. At
 * most G · (S + 1) replays after HEU's: milliseconds each on the GPT presets.
 *
 * The plan's numbers are the last accepted replay's, so the checker confirms them.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checker.h"
#include "planner.h"

/* The stage's rows of decisions: one if uniform, else one per layer. */
static uint32_t rows_of(const struct lynx_plan_stage *st)
{
	return st->uniform ? 1 : st->layers;
}

static bool is_rebuilt(enum lynx_action a)
{
	return a == LYNX_ACTION_RECOMPUTE_IN_WINDOW || a == LYNX_ACTION_RECOMPUTE_ON_DEMAND;
}

/* Whether another group rebuilt in this row needs group g resident. */
static bool needed_by_a_rebuild(const struct lynx_problem_layer *L, const struct lynx_decision *row,
                                uint32_t g)
{
	for (uint32_t h = 0; h < L->n_groups; h++)
		if (h != g && is_rebuilt(row[h].action) && (L->groups[h].deps & (1u << g)))
			return true;
	return false;
}

static uint64_t largest_peak(const struct lynx_checker_result *r)
{
	uint64_t most = 0;

	for (uint32_t s = 0; s < r->n_stages; s++)
		most = r->peak_bytes[s] > most ? r->peak_bytes[s] : most;
	return most;
}

/* Whether `tried` may replace `best`: no slower, and fitting (or, where neither fits, no
 * higher at its highest stage). Equal steps are taken: offloading one group rarely shortens
 * the step while another group rebuilt by the same ops still reruns them. */
static bool no_worse(const struct lynx_checker_result *tried,
                     const struct lynx_checker_result *best)
{
	if (tried->step_time_s > best->step_time_s)
		return false;
	if (tried->fits)
		return true;
	return !best->fits && largest_peak(tried) <= largest_peak(best);
}

/*
 * Offloads group g where it is rebuilt, in stage `only` (or every stage: p->n_stages), and
 * keeps that if the checker finds it better than *best (which it then becomes); else puts
 * the decisions back. Returns 0 or -ENOMEM.
 */
static int try_offload(const struct lynx_problem *p, struct lynx_plan *plan, uint32_t g,
                       uint32_t only, struct lynx_checker_result *best)
{
	const struct lynx_problem_layer *L = &p->layer;
	struct lynx_checker_result tried;
	struct lynx_decision *saved;
	size_t rows = 0, k = 0;
	uint32_t changed = 0;
	char why[256];
	int err;

	for (uint32_t s = 0; s < plan->n_stages; s++)
		rows += rows_of(&plan->stages[s]);
	if (!(saved = malloc((rows ? rows : 1) * sizeof(*saved))))
		return -ENOMEM;
	for (uint32_t s = 0; s < plan->n_stages; s++) {
		for (uint32_t r = 0; r < rows_of(&plan->stages[s]); r++) {
			struct lynx_decision *row = plan->stages[s].rows[r];
			saved[k++] = row[g];
			if ((only == p->n_stages || s == only) && is_rebuilt(row[g].action) &&
			    !needed_by_a_rebuild(L, row, g)) {
				row[g] = (struct lynx_decision){.action = LYNX_ACTION_OFFLOAD};
				changed++;
			}
		}
	}
	err = changed ? lynx_checker_replay(p, plan, &tried, why, sizeof(why)) : -EINVAL;
	if (!err && no_worse(&tried, best)) {
		lynx_checker_free(best);
		*best = tried;
	} else {
		if (!err)
			lynx_checker_free(&tried);
		k = 0;
		for (uint32_t s = 0; s < plan->n_stages; s++)
			for (uint32_t r = 0; r < rows_of(&plan->stages[s]); r++)
				plan->stages[s].rows[r][g] = saved[k++];
	}
	free(saved);
	return err == -ENOMEM ? err : 0;
}

int lynx_planner_mixed(const struct lynx_problem *p, struct lynx_plan *plan, char *why, size_t len)
{
	const struct lynx_problem_layer *L = &p->layer;
	struct lynx_checker_result best;
	uint32_t order[LYNX_PROBLEM_MAX_GROUPS], n = 0;
	int err = lynx_planner_heu(p, plan, why, len);

	if (err)
		return err;
	snprintf(plan->planner, sizeof(plan->planner), "mixed");
	if (!(p->d2h.busbw > 0 && p->h2d.busbw > 0)) {
		snprintf(plan->note, sizeof(plan->note), "no host link: HEU's plan");
		return 0;
	}
	if ((err = lynx_checker_replay(p, plan, &best, why, len))) {
		lynx_plan_free(plan);
		return err;
	}
	/* Groups by rebuild time, most expensive first. */
	for (uint32_t g = 0; g < L->n_groups; g++) {
		uint32_t i = n++;
		while (i > 0 && L->groups[order[i - 1]].recompute_s < L->groups[g].recompute_s) {
			order[i] = order[i - 1];
			i--;
		}
		order[i] = g;
	}
	for (uint32_t i = 0; i < n && !err; i++) {
		err = try_offload(p, plan, order[i], p->n_stages, &best);
		for (uint32_t s = 0; s < p->n_stages && !err && p->n_stages > 1; s++)
			err = try_offload(p, plan, order[i], s, &best);
	}
	if (err) {
		lynx_checker_free(&best);
		lynx_plan_free(plan);
		snprintf(why, len, "out of memory");
		return err;
	}
	lynx_checker_store(&best, plan);
	lynx_checker_free(&best);
	return 0;
}
