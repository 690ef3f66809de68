/* SPDX-License-Identifier: Apache-2.0 */
/* COIN-OR CBC loaded at run time, and the MILP planners' gap (cbc.h). */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cbc.h"
#include "checker.h"
#include "planner.h"

static const struct {
	const char *name;
	size_t offset;
} cbc_symbols[] = {
#define CBC_SYMBOL(f) {#f, offsetof(struct lynx_cbc, f)},
        LYNX_CBC_FUNCTIONS(CBC_SYMBOL)
#undef CBC_SYMBOL
};

int lynx_cbc_open(struct lynx_cbc *c, const char *library, char *why, size_t len)
{
	if (!library)
		library = LYNX_CBC_LIBRARY;
	memset(c, 0, sizeof(*c));
	c->lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
	if (!c->lib) {
		snprintf(why, len, "CBC is not available (%s)", dlerror());
		return -ENOENT;
	}
	for (size_t i = 0; i < sizeof(cbc_symbols) / sizeof(cbc_symbols[0]); i++) {
		void *sym = dlsym(c->lib, cbc_symbols[i].name);

		if (!sym) {
			snprintf(why, len, "CBC (%s) has no %s", library, cbc_symbols[i].name);
			lynx_cbc_close(c);
			return -ENOENT;
		}
		/* Through memcpy: ISO C has no cast from an object pointer to a function's. */
		memcpy((char *)c + cbc_symbols[i].offset, &sym, sizeof(sym));
	}
	return 0;
}

void lynx_cbc_close(struct lynx_cbc *c)
{
	if (c->lib)
		dlclose(c->lib);
	memset(c, 0, sizeof(*c));
}

double lynx_cbc_stage_base_ms(const struct lynx_problem *p, const struct lynx_problem_stage *st)
{
	double t = st->layers * (p->layer.fwd_s + p->layer.bwd_s);

	if (st->embedding.present)
		t += st->embedding.fwd_s + st->embedding.bwd_s;
	if (st->head.present)
		t += st->head.fwd_s + st->head.bwd_s;
	return t * 1e3;
}

void lynx_cbc_gaps(double obj, double bound, double base_ms, double *gap, double *added_gap)
{
	*gap = fmax(0, (obj - bound) / (base_ms + obj));
	*added_gap = obj > 1e-9 ? fmax(0, (obj - bound) / obj) : 0;
}

void lynx_cbc_copy_start(const struct lynx_problem *p, const struct lynx_plan *start,
                         struct lynx_plan *plan)
{
	for (uint32_t s = 0; s < p->n_stages; s++)
		for (uint32_t l = 0; l < p->stages[s].layers; l++)
			for (uint32_t g = 0; g < p->layer.n_groups; g++)
				*lynx_plan_decision(plan, s, l, g) = *lynx_plan_get(start, s, l, g);
}

/* Whether stage s is searched (problem.h: search_one_stage), or keeps its start. */
static bool searched(const struct lynx_problem *p, uint32_t s)
{
	return !p->search_one_stage || s == p->searched_stage;
}

static double gib(uint64_t bytes)
{
	return (double)bytes / (1024.0 * 1024.0 * 1024.0);
}

/* One search's state, per stage: the solve loop's and what its note needs. */
struct search_state {
	uint64_t *budget;
	bool *redo;
	bool *ever;       /* solved in some round: the plan holds a solution, not the start */
	bool *last_ok;    /* its latest solve, not skipped, found the solution the plan holds */
	bool *proved;     /* ... and proved it */
	double *gap;      /* [2 · n]: the latest solution's gap, then its added_gap */
	bool out_of_time; /* the deadline skipped a solve, or CBC found nothing in its share */
	bool over;        /* the deadline ended the rounds with stage over_stage over budget */
	uint32_t over_stage, failed; /* failed: the first stage not solved; UINT32_MAX: none */
	uint64_t failed_budget;
};

static void state_free(struct search_state *st)
{
	free(st->budget);
	free(st->redo);
	free(st->ever);
	free(st->last_ok);
	free(st->proved);
	free(st->gap);
}

static int state_init(struct search_state *st, const struct lynx_problem *p)
{
	size_t n = p->n_stages + 1;

	*st = (struct search_state){.failed = UINT32_MAX};
	st->budget = calloc(n, sizeof(*st->budget));
	st->redo = calloc(n, sizeof(*st->redo));
	st->ever = calloc(n, sizeof(*st->ever));
	st->last_ok = calloc(n, sizeof(*st->last_ok));
	st->proved = calloc(n, sizeof(*st->proved));
	st->gap = calloc(2 * n, sizeof(*st->gap));
	if (!st->budget || !st->redo || !st->ever || !st->last_ok || !st->proved || !st->gap) {
		state_free(st);
		*st = (struct search_state){0};
		return -ENOMEM;
	}
	for (uint32_t s = 0; s < p->n_stages; s++) {
		st->budget[s] = lynx_problem_stage_budget(p, s);
		st->redo[s] = searched(p, s);
	}
	return 0;
}

/*
 * Records that stage s was not solved: skipped (ss NULL: the deadline came first) or left
 * without a solution by CBC. Returns 0; -ESRCH with why when the stage has nothing to keep.
 */
static int not_solved(const struct lynx_cbc_search *search, struct search_state *st, uint32_t s,
                      const struct lynx_cbc_stage_solve *ss, char *why, size_t len)
{
	bool infeasible = ss && ss->infeasible;

	st->last_ok[s] = false;
	st->out_of_time = st->out_of_time || !infeasible;
	if (st->failed == UINT32_MAX) {
		st->failed = s;
		st->failed_budget = st->budget[s];
	}
	if (search->start || st->ever[s])
		return 0;
	if (!ss)
		snprintf(why, len, "the time limit of %.3g s ran out before stage %u was solved",
		         search->limit_s, s);
	else if (infeasible)
		snprintf(why, len, "CBC proved that no plan fits stage %u within %.3g GiB", s,
		         gib(st->budget[s]));
	else
		snprintf(why, len, "CBC found no plan for stage %u within %.3g GiB in %.3g s", s,
		         gib(st->budget[s]), search->limit_s);
	return -ESRCH;
}

/* Solves, or skips, every stage of this round that needs it. Returns 0, -ENOMEM, -ESRCH. */
static int run_round(const struct lynx_problem *p, struct lynx_plan *plan,
                     const struct lynx_cbc_search *search, double (*now)(void), unsigned round,
                     struct search_state *st, struct lynx_cbc_rounds *out, char *why, size_t len)
{
	double deadline = search->started + search->limit_s;
	uint32_t to_run = 0;
	int err = 0;

	for (uint32_t s = 0; s < p->n_stages; s++)
		to_run += st->redo[s] && searched(p, s);
	for (uint32_t s = 0; !err && s < p->n_stages; s++) {
		struct lynx_cbc_stage_solve ss;
		double t0, left, seconds;

		if (!st->redo[s] || !searched(p, s))
			continue;
		st->redo[s] = false;
		t0 = now();
		left = deadline - t0;
		/* An even share of what is left among the solves still to run in this round. */
		seconds = fmin(left, fmax(left / to_run--, LYNX_CBC_MIN_SOLVE_S));
		if (!(left >= LYNX_CBC_MIN_SOLVE_S)) {
			err = not_solved(search, st, s, NULL, why, len);
			continue;
		}
		err = search->solve(search->ctx, s, st->budget[s], seconds, plan, &ss);
		out->solve_s += now() - t0;
		out->rounds = round;
		if (err)
			break;
		if (!ss.solved) {
			err = not_solved(search, st, s, &ss, why, len);
			continue;
		}
		st->ever[s] = st->last_ok[s] = true;
		st->proved[s] = ss.optimal;
		st->gap[s] = ss.gap;
		st->gap[p->n_stages + s] = ss.added_gap;
	}
	return err;
}

/* out's verdict and note, once the rounds are over. */
static void conclude(const struct lynx_problem *p, const struct lynx_cbc_search *search,
                     const struct search_state *st, struct lynx_cbc_rounds *out)
{
	const char *start = search->start ? search->start : "its start";
	uint32_t first_kept = UINT32_MAX;

	out->solved = true;
	out->optimal = !st->over;
	for (uint32_t s = 0; s < p->n_stages; s++) {
		if (!searched(p, s))
			continue;
		out->solved = out->solved && st->last_ok[s];
		out->optimal = out->optimal && st->last_ok[s] && st->proved[s];
		out->gap = fmax(out->gap, st->gap[s]);
		out->added_gap = fmax(out->added_gap, st->gap[p->n_stages + s]);
		out->searched++;
		if (!st->ever[s]) {
			out->kept++;
			first_kept = first_kept == UINT32_MAX ? s : first_kept;
		}
	}
	if (!out->solved)
		out->gap = out->added_gap = NAN;
	if (out->kept && st->out_of_time && out->kept == 1)
		snprintf(out->note, sizeof(out->note), "time limit %g s reached: stage %u keeps %s",
		         search->limit_s, first_kept, start);
	else if (out->kept && st->out_of_time)
		snprintf(out->note, sizeof(out->note),
		         "time limit %g s reached: %u stages keep %s, from stage %u",
		         search->limit_s, out->kept, start, first_kept);
	else if (out->kept == 1)
		snprintf(out->note, sizeof(out->note),
		         "the MILP has no plan for stage %u within %.3g GiB: it keeps %s",
		         first_kept, gib(st->budget[first_kept]), start);
	else if (out->kept)
		snprintf(out->note, sizeof(out->note),
		         "the MILP has no plan for %u stages, from stage %u: they keep %s",
		         out->kept, first_kept, start);
	else if (st->over)
		snprintf(out->note, sizeof(out->note),
		         "time limit %g s reached: stage %u over budget after %u round%s",
		         search->limit_s, st->over_stage, out->rounds, out->rounds == 1 ? "" : "s");
	else if (!out->solved)
		snprintf(out->note, sizeof(out->note),
		         "CBC found no plan for stage %u within %.3g GiB in round %u", st->failed,
		         gib(st->failed_budget), out->rounds);
}

int lynx_cbc_plan_stages(const struct lynx_problem *p, struct lynx_plan *plan,
                         const struct lynx_cbc_search *search, struct lynx_cbc_rounds *out,
                         char *why, size_t len)
{
	double (*now)(void) = search->now ? search->now : lynx_planner_now;
	struct search_state st;
	int err = state_init(&st, p);

	memset(out, 0, sizeof(*out));
	for (unsigned round = 1; !err && round <= search->max_rounds; round++) {
		uint32_t over = UINT32_MAX;
		bool again = false;

		err = run_round(p, plan, search, now, round, &st, out, why, len);
		if (!err)
			err = lynx_checker_settle(p, plan, round < search->max_rounds, st.budget,
			                          st.redo, &again, why, len);
		/* Only the searched stages are solved again. */
		for (uint32_t s = p->n_stages; !err && again && s-- > 0;)
			over = st.redo[s] && searched(p, s) ? s : over;
		if (err || over == UINT32_MAX)
			break;
		if (!(search->started + search->limit_s - now() >= LYNX_CBC_MIN_SOLVE_S)) {
			/* Out of time between rounds: the plans solved so far stand. */
			st.over = true;
			st.over_stage = over;
			break;
		}
	}
	if (!err) {
		conclude(p, search, &st, out);
	} else {
		out->solved = out->optimal = false;
		out->gap = out->added_gap = NAN;
	}
	state_free(&st);
	return err;
}
