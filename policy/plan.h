/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A plan: what to do with each activation group of each layer of each pipeline stage, and
 * what its planner predicts (step time, peak memory per stage), with its JSON form
 * ("format": "lynx-plan", "version": 1; plan.c describes the fields).
 *
 * Decisions are per group, either one row shared by all of a stage's layers (uniform) or one
 * row per layer. A plan refers to a problem (problem.h) for its groups and windows: the
 * writer names them, the reader resolves the names against the problem it is given.
 *
 * Ownership: lynx_plan_init() and lynx_plan_read_json() allocate; lynx_plan_free() releases.
 * A plan is not shared between threads while it is written.
 */
#ifndef LYNX_POLICY_PLAN_H
#define LYNX_POLICY_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "problem.h"

#define LYNX_PLAN_FORMAT "lynx-plan"
#define LYNX_PLAN_VERSION 1

/* What happens to a group after its layer's forward: X(id, name). */
#define LYNX_ACTION_LIST(X)                           \
	X(KEEP, "keep")                               \
	X(OFFLOAD, "offload")                         \
	X(RECOMPUTE_IN_WINDOW, "recompute_in_window") \
	X(RECOMPUTE_ON_DEMAND, "recompute_on_demand")

enum lynx_action {
#define LYNX_ACTION_ENUM(id, name) LYNX_ACTION_##id,
	LYNX_ACTION_LIST(LYNX_ACTION_ENUM)
#undef LYNX_ACTION_ENUM
	        LYNX_ACTION_COUNT
};

struct lynx_decision {
	enum lynx_action action;
	uint32_t window; /* RECOMPUTE_IN_WINDOW: index into the stage's problem windows */
};

struct lynx_plan_stage {
	uint32_t layers;
	bool uniform; /* one row of decisions for all layers */
	/* uniform ? 1 : layers rows of the problem's n_groups decisions */
	struct lynx_decision (*rows)[LYNX_PROBLEM_MAX_GROUPS];
	uint64_t peak_bytes; /* predicted */
};

struct lynx_plan {
	char planner[32];
	bool fits;            /* every stage's predicted peak is within budget_bytes */
	double step_time_s;   /* predicted */
	double search_time_s; /* what the planner took */
	double gap;     /* an exact planner's optimality gap, (obj - bound) / obj; NAN: none */
	char note[128]; /* what the planner wants said about this plan ("" when nothing) */
	/* The run whose profiles it was made from (profile.h's run id; "" for a model's plan or
	 * profiles that name none), set by whoever planned from them: a plan file says which
	 * launch it came from. */
	char run[128];
	uint64_t budget_bytes;
	uint32_t n_groups;
	uint32_t n_stages;
	struct lynx_plan_stage *stages;
};

const char *lynx_plan_action_name(enum lynx_action a);

/* The action called name, or LYNX_ACTION_COUNT. */
enum lynx_action lynx_plan_find_action(const char *name);

/*
 * Sets plan to one that keeps everything, shaped for problem p (its stages, layers and
 * groups), with uniform rows if uniform. Returns 0 or -ENOMEM (plan then holds nothing).
 */
int lynx_plan_init(struct lynx_plan *plan, const struct lynx_problem *p, const char *planner,
                   bool uniform);

void lynx_plan_free(struct lynx_plan *plan);

/* The decision for group g of stage-local layer `layer` (the shared row if uniform). */
struct lynx_decision *lynx_plan_decision(struct lynx_plan *plan, uint32_t stage, uint32_t layer,
                                         uint32_t g);
const struct lynx_decision *lynx_plan_get(const struct lynx_plan *plan, uint32_t stage,
                                          uint32_t layer, uint32_t g);

/*
 * Lowers plan to what Lynx's executor runs: a group rebuilt in or out of a window whose
 * producer run reads a temporary (problem.h's reads_freed) is offloaded instead, as the
 * executor's examination would refuse the replay and offload it. Needs plan to fit p.
 * Returns how many decisions changed (0 for problems built from models).
 */
uint32_t lynx_plan_lower(const struct lynx_problem *p, struct lynx_plan *plan);

/*
 * Checks that plan fits problem p: as many stages, layers and groups; no group without ops
 * (the layer's input) is recomputed; every window index exists in its stage. Returns 0, or
 * -EINVAL with one sentence in why.
 */
int lynx_plan_validate(const struct lynx_plan *plan, const struct lynx_problem *p, char *why,
                       size_t len);

/*
 * The plan as JSON text (malloc'd, the caller frees), naming groups and windows from p.
 * NULL on allocation failure.
 */
char *lynx_plan_to_json(const struct lynx_plan *plan, const struct lynx_problem *p);

/*
 * The "granule_bytes" a plan's JSON text names (the problem it was made for had saved
 * buffers below it as no groups), so that a reader builds that problem; 0 when it names
 * none, or the text is not a plan (lynx_plan_from_json then says why).
 */
uint64_t lynx_plan_json_granule(const char *text);

/* The largest plan file read (LYNX_PLAN): plans are kilobytes; this only bounds a mistake. */
#define LYNX_PLAN_MAX_FILE_BYTES (64u << 20)

/*
 * Parses JSON text into plan for problem p, and validates it. Returns 0; -EINVAL with the
 * offending field's path and the reason in why ("stages[1].decisions[3].q_k: unknown action
 * 'drop'"); -ENOMEM. On failure plan holds nothing to free.
 */
int lynx_plan_from_json(const char *text, const struct lynx_problem *p, struct lynx_plan *plan,
                        char *why, size_t len);

#endif /* LYNX_POLICY_PLAN_H */
