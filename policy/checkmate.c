/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Checkmate baseline (checkmate.h): Jain et al.'s optimal rematerialisation, restricted,
 * as Checkmate is, to keeping or recomputing, on Lynx's problem, one MILP per stage solved by
 * CBC (cbc.h).
 *
 * From Checkmate's ILP to this one. Checkmate chooses, over a fixed topological order, which
 * op to recompute in which stage (R[t,i]) and what stays resident (S[t,i]). Here the order is
 * the stage's 1F1B schedule and a dropped group is rebuilt on demand right before its
 * consumer (problem.h), so for each layer l and unit u (units.h: the groups the same ops
 * rebuild; dropping part of a unit costs the same rerun and saves less) there is one binary,
 * x[l,u] = 1 when u is dropped and rebuilt on demand, 0 when kept. Checkmate's dependency
 * constraint, R[t,v] <= R[t,u] + S[t,u], holds by the problem's rule: a rebuild first rebuilds
 * every dropped dependency, which then stays until its own consumer, later in the backward;
 * the units rerun disjoint ops, so each dropped unit's ops run once and the time adds up.
 * The layer's input cannot be rebuilt and is always kept.
 *
 * Objective: Checkmate's total recompute cost, here the time it adds to one micro-batch's
 * backward on the stage, sum r_u · x[l,u] (ms). The step time is the 1F1B recurrence over the
 * stages' forward and backward durations (planner.c), non-decreasing in each, and the stages'
 * memory constraints are independent, so the per-stage minima minimise the step time too.
 *
 * Memory, at every event point where an on-demand plan can peak: the end of each layer's
 * forward of the last in-flight micro-batch, and the end of the head's (planner.c's closed
 * form, the same rows as OPT's without window rebuilds). With k in-flight micro-batches
 * (interleaved, passes in flight over v: an estimate, which the checker then confirms),
 * `all` a layer's bytes and kept(l') = all - sum_u b_u · x[l',u], after layer l's forward
 *     static + k·emb + (k - 1)·sum_l' kept(l') + sum_{l' < l} kept(l') + all <= B
 * (layer l still holds its dropped groups), and after the head's
 *     static + k·emb + k·sum_l' kept(l') + head <= B.
 * Backward points are dominated: a backward rebuilds at most one layer's dropped groups, after
 * freeing at least the head (planner.c). Written as "bytes saved >= excess of keeping all".
 *
 * Size: n · U binaries (480 for a 48-layer stage of 10 units) and n + 1 rows, a multi-
 * dimensional knapsack; the layers are identical, so it is symmetric, but CBC's root cuts
 * and the MIP start close it within milliseconds to seconds on the GPT presets.
 *
 * As OPT does, Checkmate replays its plan in the checker and re-solves a stage whose replayed
 * peak exceeds the budget with the budget lowered by the excess (up to MAX_ROUNDS; the closed
 * form is the checker's count, so one round is the rule), then keeps the faster of its plan
 * and its starting plan by the checker. The plan's step time, peaks and fits are the
 * checker's.
 *
 * Time: o->time_limit_s counts from lynx_checkmate_plan()'s start (the starting plan and
 * loading CBC included) and bounds every stage's solves, over every round (cbc.h). The MILP's
 * plan starts as a copy of the starting plan: a stage left without a solution, or not searched
 * (problem.h: search_one_stage), keeps the starting plan's decisions, and the note says so.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbc.h"
#include "checker.h"
#include "checkmate.h"
#include "planner.h"
#include "units.h"

#define MAX_ROUNDS 4
#define MIB (1024.0 * 1024.0)
#define MS 1e3
#define DEFAULT_STOP_GAP 1e-4

/* One stage's MILP: column l · U + u is x[l,u] (see the top comment). */
struct stage_model {
	const struct lynx_problem *p;
	const struct lynx_problem_stage *st;
	uint32_t s, n;
	const struct lynx_layer_units *lu;
};

/* Adds every column and row of m within `budget` to CBC model cm; col and val: n · U each. */
static void build(const struct lynx_cbc *c, Cbc_Model *cm, const struct stage_model *m,
                  uint64_t budget, int *col, double *val)
{
	const struct lynx_problem_stage *st = m->st;
	uint32_t U = m->lu->n_units, n = m->n;
	/* Micro-batches kept at the peak (interleaved: passes in flight over v). */
	const double k = lynx_problem_held_micro_batches(m->p, m->s);
	double emb = st->embedding.present ? (double)st->embedding.act_bytes : 0;
	double head = st->head.present ? (double)st->head.act_bytes : 0;
	double all = (double)m->lu->all_bytes;
	double base = (double)st->static_bytes + (double)st->inflight * emb;

	for (uint32_t l = 0; l < n; l++)
		for (uint32_t u = 0; u < U; u++)
			c->Cbc_addCol(cm, "", 0, 1, m->lu->units[u].rerun_s * MS, 1, 0, NULL, NULL);
	/* Event point e: after layer e's forward (e < n), or after the head's (e == n). */
	for (uint32_t e = 0; e <= n; e++) {
		double kept_all = e < n ? base + ((k - 1) * n + e + 1) * all
		                        : base + (double)k * n * all + head;
		double excess = (kept_all - (double)budget) / MIB;
		int nz = 0;

		if (e == n && !st->head.present)
			continue; /* the last layer's point holds at least as much */
		if (excess <= 0)
			continue; /* keeping everything fits at this point */
		for (uint32_t l = 0; l < n; l++)
			for (uint32_t u = 0; u < U; u++) {
				/* Copies of (l, u)'s bytes resident at e when kept. */
				double copies = e < n ? k - 1 + (l < e) : k;

				if (copies > 0) {
					col[nz] = (int)(l * U + u);
					val[nz++] = copies * (double)m->lu->units[u].bytes / MIB;
				}
			}
		c->Cbc_addRow(cm, "", nz, col, val, 'G', excess);
	}
}

/* Whether plan `from` rebuilds unit u of layer l of stage s: any of its groups dropped. */
static bool dropped(const struct lynx_plan *from, uint32_t s, uint32_t l, const struct lynx_unit *u)
{
	for (uint32_t g = 0; g < LYNX_PROBLEM_MAX_GROUPS; g++)
		if ((u->groups & (1u << g)) &&
		    lynx_plan_get(from, s, l, g)->action != LYNX_ACTION_KEEP)
			return true;
	return false;
}

/* Writes the solution x of stage m->s into plan. */
static void write_stage(const struct stage_model *m, const double *x, struct lynx_plan *plan)
{
	uint32_t U = m->lu->n_units;

	for (uint32_t l = 0; l < m->n; l++)
		for (uint32_t u = 0; u < U; u++) {
			enum lynx_action a = x[l * U + u] > 0.5 ? LYNX_ACTION_RECOMPUTE_ON_DEMAND
			                                        : LYNX_ACTION_KEEP;

			for (uint32_t g = 0; g < m->p->layer.n_groups; g++)
				if (m->lu->units[u].groups & (1u << g))
					*lynx_plan_decision(plan, m->s, l, g) =
					        (struct lynx_decision){.action = a};
		}
}

/*
 * Solves stage s within `budget`, starting from `from`, into plan, in `seconds` (building the
 * model included). Returns 0 (out->solved false when CBC found nothing) or -ENOMEM.
 */
static int solve_stage(const struct lynx_cbc *c, const struct lynx_checkmate_options *o,
                       const struct lynx_problem *p, const struct lynx_layer_units *lu, uint32_t s,
                       uint64_t budget, double seconds, const struct lynx_plan *from,
                       struct lynx_plan *plan, struct lynx_cbc_stage_solve *out)
{
	struct stage_model m = {
	        .p = p, .st = &p->stages[s], .s = s, .n = p->stages[s].layers, .lu = lu};
	size_t cols = (size_t)m.n * lu->n_units + 1;
	int *col = malloc(cols * sizeof(*col));
	double *val = malloc(cols * sizeof(*val)), *x0 = malloc(cols * sizeof(*x0));
	double t0 = lynx_planner_now(), base_ms = lynx_cbc_stage_base_ms(p, m.st), cbc_s;
	Cbc_Model *cm = col && val && x0 ? c->Cbc_newModel() : NULL;
	int err = 0;

	*out = (struct lynx_cbc_stage_solve){.gap = NAN, .added_gap = NAN};
	if (!cm) {
		err = -ENOMEM;
		goto out;
	}
	build(c, cm, &m, budget, col, val);
	c->Cbc_setObjSense(cm, 1);
	c->Cbc_setLogLevel(cm, o->log_level);
	/* CBC 2.10 crashes (CglPreProcess::postProcess) when its time limit stops it while
	 * preprocessing: a short share of the deadline made that common. */
	c->Cbc_setParameter(cm, "preprocess", "off");
	/* The share covers building the model too: CBC gets what building left, if any. */
	cbc_s = seconds - (lynx_planner_now() - t0);
	if (!(cbc_s > 0))
		goto out;
	c->Cbc_setMaximumSeconds(cm, cbc_s);
	c->Cbc_setAllowableGap(cm, o->stop_gap * base_ms);
	for (uint32_t l = 0; l < m.n; l++)
		for (uint32_t u = 0; u < lu->n_units; u++) {
			col[l * lu->n_units + u] = (int)(l * lu->n_units + u);
			x0[l * lu->n_units + u] = dropped(from, s, l, &lu->units[u]);
		}
	c->Cbc_setMIPStartI(cm, (int)(cols - 1), col, x0);
	c->Cbc_solve(cm);
	if (c->Cbc_bestSolution(cm)) {
		write_stage(&m, c->Cbc_bestSolution(cm), plan);
		out->solved = true;
		lynx_cbc_gaps(c->Cbc_getObjValue(cm), c->Cbc_getBestPossibleObjValue(cm), base_ms,
		              &out->gap, &out->added_gap);
		out->optimal = c->Cbc_isProvenOptimal(cm) || out->gap <= o->stop_gap;
	} else {
		out->infeasible = c->Cbc_isProvenInfeasible(cm);
	}
out:
	if (cm)
		c->Cbc_deleteModel(cm);
	free(col);
	free(val);
	free(x0);
	return err;
}

/* What solve_one needs besides the stage and its budget. */
struct solve_ctx {
	const struct lynx_cbc *c;
	const struct lynx_checkmate_options *o;
	const struct lynx_problem *p;
	const struct lynx_layer_units *lu;
	const struct lynx_plan *from;
};

static int solve_one(void *ctx, uint32_t s, uint64_t budget, double seconds, struct lynx_plan *plan,
                     struct lynx_cbc_stage_solve *out)
{
	const struct solve_ctx *x = ctx;

	return solve_stage(x->c, x->o, x->p, x->lu, s, budget, seconds, x->from, plan, out);
}

/*
 * The MILP's plan into plan (initialised), starting from `start` (its decisions are copied
 * in: a stage CBC does not solve keeps them), within what is left of o->time_limit_s since
 * `started`; plan->note says where the limit stopped it short. Returns 0 with rep's solve
 * fields set; -ENOMEM; a checker refusal, with why.
 */
static int milp_plan(const struct lynx_cbc *c, const struct lynx_checkmate_options *o,
                     const struct lynx_problem *p, const struct lynx_plan *start, double started,
                     struct lynx_plan *plan, struct lynx_checkmate_report *rep, char *why,
                     size_t len)
{
	struct lynx_layer_units lu;
	struct solve_ctx ctx = {c, o, p, &lu, start};
	char name[48];
	struct lynx_cbc_search search = {.max_rounds = MAX_ROUNDS,
	                                 .limit_s = o->time_limit_s,
	                                 .started = started,
	                                 .solve = solve_one,
	                                 .ctx = &ctx,
	                                 .start = name};
	struct lynx_cbc_rounds r;
	int err;

	snprintf(name, sizeof(name), "%s's plan", rep->start);
	lynx_layer_units_find(&p->layer, &lu);
	lynx_cbc_copy_start(p, start, plan);
	err = lynx_cbc_plan_stages(p, plan, &search, &r, why, len);
	rep->solved = r.solved;
	rep->optimal = r.optimal;
	rep->gap = r.gap;
	rep->added_gap = r.added_gap;
	rep->solve_s += r.solve_s;
	rep->rounds = r.rounds;
	rep->searched = r.searched;
	rep->kept = r.kept;
	snprintf(plan->note, sizeof(plan->note), "%s", r.note);
	return err;
}

/* The on-demand baselines Checkmate may start from. */
static const struct {
	const char *name;
	lynx_planner_fn plan;
} starts[] = {
        {"none", lynx_planner_none},
        {"selective", lynx_planner_selective},
        {"full", lynx_planner_full},
        {"dtr", lynx_planner_dtr},
};

/*
 * The starting plan: the fastest baseline that fits by the checker, or the one with the
 * least peak when none fits. Its predictions are the checker's; *name is its planner.
 * Returns 0; -ENOMEM; or a checker refusal with why. A baseline that cannot plan this
 * problem (-EINVAL: selective on a layer without attention ops) is left out.
 */
static int pick_start(const struct lynx_problem *p, struct lynx_plan *start, const char **name,
                      char *why, size_t len)
{
	uint64_t *budget = calloc(p->n_stages + 1, sizeof(*budget));
	bool *redo = calloc(p->n_stages + 1, sizeof(*redo));
	uint64_t best_peak = UINT64_MAX;
	bool have = false;
	int err = budget && redo ? 0 : -ENOMEM;

	for (size_t i = 0; !err && i < sizeof(starts) / sizeof(starts[0]); i++) {
		struct lynx_plan cand;
		uint64_t peak = 0;
		bool again, better;
		char ignored[160];

		err = starts[i].plan(p, &cand, ignored, sizeof(ignored));
		if (err == -EINVAL) {
			err = 0;
			continue;
		}
		if (err)
			break;
		err = lynx_checker_settle(p, &cand, false, budget, redo, &again, why, len);
		if (err) {
			lynx_plan_free(&cand);
			break;
		}
		for (uint32_t s = 0; s < p->n_stages; s++)
			peak = cand.stages[s].peak_bytes > peak ? cand.stages[s].peak_bytes : peak;
		better = !have || (cand.fits && !start->fits) ||
		         (cand.fits && cand.step_time_s < start->step_time_s) ||
		         (!cand.fits && !start->fits && peak < best_peak);
		if (better) {
			if (have)
				lynx_plan_free(start);
			*start = cand;
			*name = starts[i].name;
			best_peak = peak;
			have = true;
		} else {
			lynx_plan_free(&cand);
		}
	}
	if (err && have)
		lynx_plan_free(start);
	if (!err && !have) {
		snprintf(why, len, "checkmate: no on-demand baseline can plan this problem");
		err = -EINVAL;
	}
	free(budget);
	free(redo);
	return err;
}

int lynx_checkmate_plan(const struct lynx_problem *p, const struct lynx_checkmate_options *o,
                        struct lynx_plan *plan, struct lynx_checkmate_report *report, char *why,
                        size_t len)
{
	double started = lynx_planner_now();
	struct lynx_checkmate_options opt = o ? *o : (struct lynx_checkmate_options){0};
	struct lynx_checkmate_report rep = {.gap = NAN, .added_gap = NAN, .milp_step_s = NAN};
	struct lynx_plan start, milp;
	struct lynx_cbc c;
	char reason[200] = "";
	int err;

	if (!(opt.time_limit_s > 0))
		opt.time_limit_s = LYNX_CHECKMATE_DEFAULT_TIME_LIMIT_S;
	if (!(opt.stop_gap > 0))
		opt.stop_gap = DEFAULT_STOP_GAP;
	err = pick_start(p, &start, &rep.start, why, len);
	if (err)
		return err;
	rep.start_step_s = start.step_time_s;
	if (!start.fits) {
		/* Full recomputation holds the least at every event point: nothing fits. */
		snprintf(reason, sizeof(reason), "no on-demand plan fits the budget");
		err = 1;
	} else {
		err = lynx_cbc_open(&c, opt.library, reason, sizeof(reason));
	}
	if (!err) {
		err = lynx_plan_init(&milp, p, "checkmate", false);
		if (!err) {
			err = milp_plan(&c, &opt, p, &start, started, &milp, &rep, reason,
			                sizeof(reason));
			if (err)
				lynx_plan_free(&milp);
		}
		lynx_cbc_close(&c);
	}
	if (err == -ENOMEM) {
		lynx_plan_free(&start);
		return err;
	}
	if (!err) {
		rep.milp_step_s = milp.step_time_s;
		if (rep.kept && rep.kept == rep.searched) {
			/* No stage solved: the MILP's plan is the starting plan. */
			snprintf(reason, sizeof(reason), "%s", milp.note);
			lynx_plan_free(&milp);
			err = 1;
		} else if (milp.fits && milp.step_time_s <= start.step_time_s) {
			lynx_plan_free(&start);
			*plan = milp;
			plan->gap = rep.gap;
		} else if (milp.note[0]) {
			/* Stopped short: the note says why the MILP's plan loses. */
			snprintf(reason, sizeof(reason), "%s", milp.note);
			lynx_plan_free(&milp);
			err = 1;
		} else {
			snprintf(reason, sizeof(reason),
			         "the checker finds it better (MILP %.6g s%s, gap %.2g%%)",
			         milp.step_time_s, milp.fits ? "" : ", over budget", 100 * rep.gap);
			lynx_plan_free(&milp);
			err = 1;
		}
	}
	if (err) {
		*plan = start;
		snprintf(plan->planner, sizeof(plan->planner), "checkmate");
		rep.used_start = true;
		snprintf(plan->note, sizeof(plan->note), "%s's plan: %s", rep.start, reason);
	}
	if (report)
		*report = rep;
	return 0;
}

/* The planner table's entry: the problem's search limit (the command's --time-limit), if
 * set, bounds the whole search. */
int lynx_planner_checkmate(const struct lynx_problem *p, struct lynx_plan *plan, char *why,
                           size_t len)
{
	struct lynx_checkmate_options o = {.time_limit_s = p->search_seconds};

	return lynx_checkmate_plan(p, &o, plan, NULL, why, len);
}
