/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The planners, behind one interface (planners.def): each takes a problem and fills a plan
 * with its decisions and its own prediction of the step time and of every stage's peak
 * memory. Predictions come from the planners' accounting (planner.c), which the independent
 * checker (checker.h) must confirm. A planner that finds no plan within the budget still
 * returns its best one, with fits false: it says so rather than fail.
 * Planners keep no state: any number may run at once on one problem.
 */
#ifndef LYNX_POLICY_PLANNER_H
#define LYNX_POLICY_PLANNER_H

#include <stddef.h>

#include "plan.h"
#include "problem.h"

/*
 * A planner: fills plan (uninitialised on entry) for problem p. Returns 0; -EINVAL with one
 * sentence in why; -ENOMEM. On failure plan holds nothing to free.
 */
typedef int (*lynx_planner_fn)(const struct lynx_problem *p, struct lynx_plan *plan, char *why,
                               size_t len);

struct lynx_planner {
	const char *name;
	lynx_planner_fn plan;
	bool searches; /* planners.def: an exact search, seconds to minutes */
	bool budgeted; /* planners.def: its plan depends on the budget */
	const char *summary;
};

enum lynx_planner_id {
#define LYNX_PLANNER(id, ...) LYNX_PLANNER_##id,
#include "planners.def"
	LYNX_PLANNER_COUNT
};

#define LYNX_PLANNER(id, name, fn, searches, budgeted, summary) \
	int fn(const struct lynx_problem *p, struct lynx_plan *plan, char *why, size_t len);
#include "planners.def"

extern const struct lynx_planner lynx_planners[LYNX_PLANNER_COUNT];

/* The planner called name, or NULL. */
const struct lynx_planner *lynx_planner_find(const char *name);

/*
 * Runs planner pl on p into plan and records its name and its search time (wall clock,
 * monotonic). A plan that rebuilds what the executor cannot replay is lowered
 * (lynx_plan_lower()) and its prediction is then the checker's. Returns what the planner
 * returns, or the checker's refusal of the lowered plan (plan then holds nothing).
 */
int lynx_planner_run(const struct lynx_planner *pl, const struct lynx_problem *p,
                     struct lynx_plan *plan, char *why, size_t len);

/* The planners' clock: CLOCK_MONOTONIC, in seconds: search times, and the time limits of the
 * searching planners (cbc.h) and of mixed. */
double lynx_planner_now(void);

#endif /* LYNX_POLICY_PLANNER_H */
