/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lynx HEU with offloading: HEU's plan (heu.c), which keeps or rebuilds, then, group by
 * group, a copy to pinned host memory instead wherever the checker finds the plan better. A
 * copy runs on the copy engines beside compute and comes back before its consumer (checker.h:
 * one backward ahead, or at its layer's backward as Lynx's executor restores), so on a fast
 * enough link it hides what a rebuild on demand or beyond its window's idle time would cost;
 * it also holds memory until its copy out ends, and from its copy back on, which the checker
 * weighs. It is also the only way to evict what cannot be rebuilt.
 *
 * Two starts. Where some groups are rebuilt through a chain (problem.h's chained: their run
 * reads a temporary whose writer is replayed first), HEU also plans the problem in which
 * those groups cannot be rebuilt (offloaded, as before chains were replayed), and the search
 * starts from whichever of the two plans the checker finds better: a way more to rebuild
 * must not leave a greedy search below what it reached without it.
 *
 * Search. Groups are tried by rebuild time, the most expensive first. Each is switched to
 * OFFLOAD in every layer of every stage where it is rebuilt, or kept while it cannot be
 * rebuilt, and kept so if the checker finds the plan no worse (no_worse: while HEU's plan
 * does not fit, closer to the budget; then fitting and no slower); else in each stage alone.
 * A rebuild that reads an offloaded group waits for it to be brought back (checker.h), which
 * the checker weighs too. Without a host link (busbw 0) the plan is HEU's. At most G · (S + 1)
 * replays after HEU's: milliseconds each on the GPT presets. A stage where HEU keeps
 * everything within its budget is left so: an offload there could only tie.
 *
 * The floor. Last, stage by stage, the offload baseline's decisions (offload.c: Kuaishou's,
 * the least share that fits) replace the plan's where the checker finds that no worse, so
 * that mixed is never slower than pure offloading: on a link that hides every copy, the
 * group-by-group search can stop short of it. With fewer than three stages that baseline
 * offloads nothing, and the floor is skipped.
 *
 * The time limit. With p->search_seconds, no group is tried and no floor is laid once that
 * much wall time has passed since mixed started (HEU's search included): every step keeps a
 * plan the checker confirmed, so stopping early leaves a plan no worse than HEU's, and the
 * note says where it stopped.
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

static uint64_t largest_peak(const struct lynx_checker_result *r)
{
	uint64_t most = 0;

	for (uint32_t s = 0; s < r->n_stages; s++)
		most = r->peak_bytes[s] > most ? r->peak_bytes[s] : most;
	return most;
}

/* Whether `tried` may replace `best`. While best does not fit: fitting, or lower at its highest
 * stage, at any time cost (reaching the budget first). Once it fits: fitting and no slower.
 * Equal steps are taken: offloading one group rarely shortens the step while another group
 * rebuilt by the same ops still reruns them. */
static bool no_worse(const struct lynx_checker_result *tried,
                     const struct lynx_checker_result *best)
{
	if (!best->fits)
		return tried->fits || largest_peak(tried) < largest_peak(best);
	return tried->fits && tried->step_time_s <= best->step_time_s;
}

/* A decision the search may turn into OFFLOAD: a rebuild, or keeping a group that cannot be
 * rebuilt (the layer's input, a group whose producer reads a temporary), which only a copy
 * can evict. */
static bool may_offload(const struct lynx_problem_group *g, enum lynx_action a)
{
	return is_rebuilt(a) || (a == LYNX_ACTION_KEEP && !g->ops);
}

/* Whether stage s keeps every group, within its budget: HEU found nothing to gain there. */
static bool keeps_all_within(const struct lynx_problem *p, const struct lynx_plan *plan, uint32_t s)
{
	const struct lynx_plan_stage *st = &plan->stages[s];

	for (uint32_t r = 0; r < rows_of(st); r++)
		for (uint32_t g = 0; g < p->layer.n_groups; g++)
			if (st->rows[r][g].action != LYNX_ACTION_KEEP)
				return false;
	return st->peak_bytes <= lynx_problem_stage_budget(p, s);
}

/*
 * Offloads group g where it may be (may_offload), in stage `only` (or every stage: p->n_stages),
 * except in the stages `left` marks, and keeps that if the checker finds it better than *best
 * (which it then becomes); else puts the decisions back. Returns 0 or -ENOMEM.
 */
static int try_offload(const struct lynx_problem *p, struct lynx_plan *plan, uint32_t g,
                       uint32_t only, const bool *left, struct lynx_checker_result *best)
{
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
			if ((only == p->n_stages || s == only) && !left[s] &&
			    may_offload(&p->layer.groups[g], row[g].action)) {
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

/*
 * The floor: each stage in turn takes the offload baseline's decisions where the checker finds
 * the plan no worse than *best (which then becomes its replay). plan may come back per layer.
 * Returns 0, or an error with nothing changed.
 */
static int offload_floor(const struct lynx_problem *p, struct lynx_plan *plan,
                         struct lynx_checker_result *best, char *why, size_t len)
{
	struct lynx_plan off, tried;
	struct lynx_checker_result r;
	int err;

	if (p->n_stages < 3)
		return 0;
	if ((err = lynx_planner_offload(p, &off, why, len)))
		return err;
	for (uint32_t s = 0; s < p->n_stages && !err; s++) {
		bool differs = false;

		for (uint32_t l = 0; l < p->stages[s].layers; l++)
			for (uint32_t g = 0; g < p->layer.n_groups; g++)
				differs = differs || memcmp(lynx_plan_get(plan, s, l, g),
				                            lynx_plan_get(&off, s, l, g),
				                            sizeof(struct lynx_decision));
		if (!differs)
			continue;
		if ((err = lynx_plan_init(&tried, p, plan->planner, false)))
			break;
		for (uint32_t t = 0; t < p->n_stages; t++)
			for (uint32_t l = 0; l < p->stages[t].layers; l++)
				for (uint32_t g = 0; g < p->layer.n_groups; g++)
					*lynx_plan_decision(&tried, t, l, g) =
					        *lynx_plan_get(t == s ? &off : plan, t, l, g);
		if (lynx_checker_replay(p, &tried, &r, why, len)) {
			lynx_plan_free(&tried);
			continue; /* a stage the checker refuses stays as it was */
		}
		if (!no_worse(&r, best) || (best->fits && !(r.step_time_s < best->step_time_s))) {
			lynx_checker_free(&r);
			lynx_plan_free(&tried);
			continue;
		}
		memcpy(tried.note, plan->note, sizeof(tried.note));
		tried.search_time_s = plan->search_time_s;
		lynx_plan_free(plan);
		*plan = tried;
		lynx_checker_free(best);
		*best = r;
	}
	lynx_plan_free(&off);
	return err;
}

/* Whether `tried` is a better start than `best`: fitting first; of two that do not fit, the
 * lower at its highest stage; of two that do, the shorter step. */
static bool better_start(const struct lynx_checker_result *tried,
                         const struct lynx_checker_result *best)
{
	if (tried->fits != best->fits)
		return tried->fits;
	if (!best->fits)
		return largest_peak(tried) < largest_peak(best);
	return tried->step_time_s < best->step_time_s;
}

/*
 * The second start (the head comment): HEU on p with every chained group made one that
 * cannot be rebuilt. It replaces *plan and *best when the checker finds it better on p.
 * Returns 0, or -ENOMEM with nothing changed.
 */
static int chainless_start(const struct lynx_problem *p, struct lynx_plan *plan,
                           struct lynx_checker_result *best)
{
	struct lynx_checker_result r;
	struct lynx_problem *q;
	struct lynx_plan alt;
	bool chained = false;
	char why[256];
	int err;

	for (uint32_t g = 0; g < p->layer.n_groups; g++)
		chained = chained || p->layer.groups[g].chained;
	if (!chained)
		return 0;
	if (!(q = malloc(sizeof(*q))))
		return -ENOMEM;
	*q = *p;
	for (uint32_t g = 0; g < q->layer.n_groups; g++) {
		struct lynx_problem_group *grp = &q->layer.groups[g];
		grp->reads_freed = grp->reads_freed || grp->chained;
		grp->chained = false;
	}
	err = lynx_planner_heu(q, &alt, why, sizeof(why));
	free(q);
	if (err)
		return err == -ENOMEM ? err : 0;
	if (lynx_checker_replay(p, &alt, &r, why, sizeof(why))) {
		lynx_plan_free(&alt);
		return 0;
	}
	if (!better_start(&r, best)) {
		lynx_checker_free(&r);
		lynx_plan_free(&alt);
		return 0;
	}
	memcpy(alt.planner, plan->planner, sizeof(alt.planner));
	lynx_plan_free(plan);
	*plan = alt;
	lynx_checker_free(best);
	*best = r;
	return 0;
}

static bool out_of_time(const struct lynx_problem *p, double started)
{
	return p->search_seconds > 0 && lynx_planner_now() - started > p->search_seconds;
}

int lynx_planner_mixed(const struct lynx_problem *p, struct lynx_plan *plan, char *why, size_t len)
{
	const struct lynx_problem_layer *L = &p->layer;
	struct lynx_checker_result best;
	uint32_t order[LYNX_PROBLEM_MAX_GROUPS], n = 0;
	bool *left;
	double started = lynx_planner_now();
	int err = lynx_planner_heu(p, plan, why, len);
	uint32_t tried = 0;

	if (err)
		return err;
	snprintf(plan->planner, sizeof(plan->planner), "mixed");
	if (!(p->d2h.busbw > 0 && p->h2d.busbw > 0)) {
		snprintf(plan->note, sizeof(plan->note), "no host link: HEU's plan");
		return 0;
	}
	if (!(left = calloc(p->n_stages, sizeof(*left)))) {
		lynx_plan_free(plan);
		snprintf(why, len, "out of memory");
		return -ENOMEM;
	}
	if ((err = lynx_checker_replay(p, plan, &best, why, len))) {
		free(left);
		lynx_plan_free(plan);
		return err;
	}
	if ((err = chainless_start(p, plan, &best))) {
		free(left);
		lynx_checker_free(&best);
		lynx_plan_free(plan);
		snprintf(why, len, "out of memory");
		return err;
	}
	for (uint32_t s = 0; s < p->n_stages; s++)
		left[s] = keeps_all_within(p, plan, s);
	/* Groups by rebuild time, most expensive first. */
	for (uint32_t g = 0; g < L->n_groups; g++) {
		uint32_t i = n++;
		while (i > 0 && L->groups[order[i - 1]].recompute_s < L->groups[g].recompute_s) {
			order[i] = order[i - 1];
			i--;
		}
		order[i] = g;
	}
	for (; tried < n && !err && !out_of_time(p, started); tried++) {
		err = try_offload(p, plan, order[tried], p->n_stages, left, &best);
		for (uint32_t s = 0; s < p->n_stages && !err && p->n_stages > 1; s++)
			err = try_offload(p, plan, order[tried], s, left, &best);
	}
	free(left);
	if (out_of_time(p, started))
		snprintf(plan->note, sizeof(plan->note),
		         "stopped at its %.0f s limit, %u of %u groups tried, without the offload "
		         "floor",
		         p->search_seconds, tried, n);
	/* A refusal inside the floor leaves the plan as it was: only memory stops mixed. */
	else if (!err && offload_floor(p, plan, &best, why, len) == -ENOMEM)
		err = -ENOMEM;
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
