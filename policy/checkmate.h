/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Checkmate baseline (Jain et al., MLSys 2020) on Lynx's problem: per stage, the optimal
 * keep / rebuild-on-demand decision of every layer's groups, as a MILP solved by COIN-OR CBC
 * (cbc.h), with no windows and no offloading; checkmate.c describes the formulation. It
 * starts from the fastest on-demand baseline that fits (none, selective, full, dtr), the
 * checker confirms the result, and its numbers are the plan's prediction; the plan carries
 * the MILP's optimality gap, defined as OPT's (cbc.h).
 *
 * The time limit bounds the whole search, the starting plan included, over every stage and
 * round (cbc.h: lynx_cbc_plan_stages()); a stage it leaves without a solution keeps the
 * starting plan's decisions, and the plan's note says so.
 *
 * When CBC is missing, when no stage is solved, or when the checker finds the starting plan
 * faster, Checkmate returns the starting plan and says so in the plan's note (as OPT returns
 * HEU's): other planners, and `lynx sim`, keep working.
 *
 * Thread safety: no shared state; any number of solves may run at once.
 */
#ifndef LYNX_POLICY_CHECKMATE_H
#define LYNX_POLICY_CHECKMATE_H

#include <stdbool.h>
#include <stddef.h>

#include "plan.h"
#include "problem.h"

#define LYNX_CHECKMATE_DEFAULT_TIME_LIMIT_S 60.0

struct lynx_checkmate_options {
	double time_limit_s; /* the whole search; <= 0: LYNX_CHECKMATE_DEFAULT_TIME_LIMIT_S */
	double stop_gap;     /* CBC stops at this gap (cbc.h's definition); <= 0: 1e-4 */
	const char *library; /* NULL: LYNX_CBC_LIBRARY; tests name a missing one */
	int log_level;       /* CBC's, 0: silent */
};

/* What a solve did, for tests and reports. */
struct lynx_checkmate_report {
	bool solved;       /* CBC returned a solution for every searched stage, in its last solve */
	bool optimal;      /* ... and proved each within stop_gap, with no round cut short */
	bool used_start;   /* the plan is the starting plan (see plan->note) */
	const char *start; /* the starting plan's planner: "none", "selective", "full", "dtr" */
	double gap;        /* the largest stage gap (cbc.h); NAN when not solved */
	double added_gap;  /* the same on the added time alone */
	double solve_s;    /* CBC's wall time, all stages and rounds */
	double start_step_s; /* the checker's step time of the starting plan */
	double milp_step_s;  /* the checker's step time of the MILP's plan; NAN when none */
	unsigned rounds;     /* solves of the slowest-converging stage (budget re-tightening) */
	unsigned searched;   /* stages searched: all, or problem.h's searched_stage */
	unsigned kept;       /* ... never solved within the limit: they keep the starting plan */
};

/*
 * Plans problem p into plan (uninitialised on entry) with options o (NULL: defaults); fills
 * report when not NULL. Returns 0 (with the starting plan and a note when CBC cannot help);
 * -EINVAL or -ENOMEM as the baselines do. On failure plan holds nothing to free.
 */
int lynx_checkmate_plan(const struct lynx_problem *p, const struct lynx_checkmate_options *o,
                        struct lynx_plan *plan, struct lynx_checkmate_report *report, char *why,
                        size_t len);

#endif /* LYNX_POLICY_CHECKMATE_H */
