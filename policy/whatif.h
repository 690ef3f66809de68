/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The what-if of profiling-only mode: from the job's profiles (one per rank), what Lynx's
 * HEU planner predicts it would save in memory and cost in time, against keeping every
 * activation. Numbers are the independent checker's replay of each plan on the problem that
 * lynx_problem_from_profile() builds, so they carry its approximations (the optimizer step
 * left out; profiling-only mode measures no host link, and HEU does not offload anyway).
 *
 * Without a budget, a ladder: the stage peaks' activation share (the peak above the static
 * memory) cut to 75%, 50% and 25%; with one, that budget alone.
 */
#ifndef LYNX_POLICY_WHATIF_H
#define LYNX_POLICY_WHATIF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "plan.h"

struct lynx_profile; /* profiler/profile.h */

#define LYNX_WHATIF_MAX_ROWS 3

struct lynx_whatif_row {
	uint64_t budget_bytes;
	bool fits;       /* by the checker, every stage */
	double step_s;   /* predicted iteration, optimizer step not included */
	uint64_t peak;   /* the largest stage peak */
	double search_s; /* HEU's search time */
};

struct lynx_whatif {
	uint32_t stages;
	double base_step_s;  /* keeping everything */
	uint64_t base_peak;  /* keeping everything: the largest stage peak */
	uint64_t static_max; /* the largest stage static memory: no plan goes below it */
	/* The most layers of a stage whose forward the trainer reruns itself (Megatron's block
	 * recompute): left as they are, the plans are over the others. */
	uint32_t trainer_recomputed;
	struct lynx_whatif_row rows[LYNX_WHATIF_MAX_ROWS];
	size_t n_rows;
};

/*
 * Fills out from ranks[0..n) (every pipeline stage's profile at least). budget_bytes 0: the
 * ladder. interference: the contention planning assumes; NULL: LYNX_INTERFERENCE_DEFAULT.
 * Returns 0; -EINVAL with one sentence in why (the profiles do not make a problem:
 * lynx_problem_from_profile's reasons); -ENOMEM.
 */
int lynx_whatif_from_profiles(const struct lynx_profile *const *ranks, size_t n,
                              uint64_t budget_bytes, const struct lynx_interference *interference,
                              struct lynx_whatif *out, char *why, size_t len);

/* Prints w as a few lines, each starting with tag. */
void lynx_whatif_print(FILE *f, const char *tag, const struct lynx_whatif *w);

/*
 * Recompute mode's planning online: the job's plan from its profiles, with the planner
 * called planner under opt (problem.h: budget_bytes, 0: the measured peak; budget_percent,
 * a share of each stage's own peak; solo, ranks[0]'s stage alone; search_seconds and
 * search_one_stage for a searching planner), or, when plan_json is not NULL, the
 * plan it holds (LYNX_PLAN), checked against the problem. out holds the problem and the plan
 * (free with lynx_whatif_plan_free); row the checker's replay of it; keep (when not NULL) the
 * replay of keeping everything, to compare with. Returns 0; -EINVAL with one sentence in why
 * (the profiles make no problem, an unknown planner, a plan for another job); -ENOMEM.
 */
struct lynx_whatif_plan {
	struct lynx_problem *problem;
	struct lynx_plan *plan;
};
int lynx_whatif_plan(const struct lynx_profile *const *ranks, size_t n,
                     const struct lynx_problem_options *opt, const char *planner,
                     const char *plan_json, struct lynx_whatif_plan *out,
                     struct lynx_whatif_row *row, struct lynx_whatif_row *keep, char *why,
                     size_t len);
void lynx_whatif_plan_free(struct lynx_whatif_plan *out);

/* Decisions of stage s of the plan, counted over its layers and groups, by action. */
void lynx_whatif_count_actions(const struct lynx_whatif_plan *wp, uint32_t s, uint32_t counts[4]);

#endif /* LYNX_POLICY_WHATIF_H */
