/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lynx's exact planner (OPT): per stage, a MILP over every layer's keep / rebuild-on-demand /
 * rebuild-in-window decisions, solved by COIN-OR CBC with HEU's plan as the MIP start; opt.c
 * describes the formulation. The checker confirms the result, and its numbers are the plan's
 * prediction; the plan carries the MILP's optimality gap.
 *
 * The time limit bounds the whole search, HEU's plan included, over every stage and round
 * (cbc.h: lynx_cbc_plan_stages() shares it among the solves). A stage the limit leaves
 * without a solution keeps HEU's plan, and the plan's note says so ("time limit 10 s
 * reached: stage 2 keeps HEU's plan"); the plan is then not called proven.
 *
 * CBC is loaded at run time (cbc.h: dlopen of libCbcSolver.so.3), so Lynx builds and runs
 * without it: when it is missing, when a solve fails, or when no stage is solved, OPT returns
 * HEU's plan and says so in the plan's note. It also returns HEU's plan, with a note, when the
 * checker finds HEU's faster: OPT is never slower than HEU by the checker.
 *
 * Thread safety: no shared state; any number of solves may run at once.
 */
#ifndef LYNX_POLICY_OPT_H
#define LYNX_POLICY_OPT_H

#include <stdbool.h>
#include <stddef.h>

#include "cbc.h"
#include "plan.h"
#include "problem.h"

#define LYNX_OPT_DEFAULT_TIME_LIMIT_S 60.0
#define LYNX_OPT_LIBRARY LYNX_CBC_LIBRARY

struct lynx_opt_options {
	double time_limit_s; /* the whole search; <= 0: LYNX_OPT_DEFAULT_TIME_LIMIT_S */
	double stop_gap;     /* CBC stops at this gap (opt.c says relative to what); <= 0: 1e-3 */
	const char *library; /* NULL: LYNX_OPT_LIBRARY; tests name a missing one */
	int log_level;       /* CBC's, 0: silent */
};

/* What a solve did, for tests and reports. */
struct lynx_opt_report {
	bool solved;       /* CBC returned a solution for every searched stage, in its last solve */
	bool optimal;      /* ... and proved each within stop_gap, with no round cut short */
	bool used_heu;     /* the plan is HEU's (see plan->note) */
	double gap;        /* the largest stage gap (opt.c); NAN when not solved */
	double added_gap;  /* the same on the added time alone, (added - bound) / added */
	double solve_s;    /* CBC's wall time, all stages and rounds */
	double heu_step_s; /* the checker's step time of HEU's plan */
	double milp_step_s; /* the checker's step time of the MILP's plan; NAN when none */
	unsigned rounds;    /* solves of the slowest-converging stage (budget re-tightening) */
	unsigned searched;  /* stages searched: all, or problem.h's searched_stage */
	unsigned kept;      /* ... never solved within the limit: they keep HEU's plan */
};

/*
 * Plans problem p into plan (uninitialised on entry) with options o (NULL: defaults); fills
 * report when not NULL. Returns 0 (with HEU's plan and a note when CBC cannot help); -EINVAL
 * or -ENOMEM as HEU does. On failure plan holds nothing to free.
 */
int lynx_opt_plan(const struct lynx_problem *p, const struct lynx_opt_options *o,
                  struct lynx_plan *plan, struct lynx_opt_report *report, char *why, size_t len);

#endif /* LYNX_POLICY_OPT_H */
