/* SPDX-License-Identifier: Apache-2.0 */
/*
 * COIN-OR CBC's C interface, loaded at run time (dlopen of libCbcSolver.so.3) so that Lynx
 * builds and runs without it, for the planners that solve a MILP (OPT, opt.c; Checkmate,
 * checkmate.c); and the one definition of the optimality gap they report.
 *
 * Ownership: lynx_cbc_open() takes a reference on the library, lynx_cbc_close() drops it;
 * each solve opens its own (dlopen counts references). A loaded struct lynx_cbc is read-only,
 * and CBC models are per solve: any number of solves may run at once.
 */
#ifndef LYNX_POLICY_CBC_H
#define LYNX_POLICY_CBC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <coin/Cbc_C_Interface.h>

#include "plan.h"
#include "problem.h"

#define LYNX_CBC_LIBRARY "libCbcSolver.so.3"

/* The CBC functions the planners call, resolved by name from the library. */
#define LYNX_CBC_FUNCTIONS(X)          \
	X(Cbc_newModel)                \
	X(Cbc_deleteModel)             \
	X(Cbc_addCol)                  \
	X(Cbc_addRow)                  \
	X(Cbc_loadProblem)             \
	X(Cbc_setInteger)              \
	X(Cbc_setObjSense)             \
	X(Cbc_setMIPStartI)            \
	X(Cbc_setMaximumSeconds)       \
	X(Cbc_setAllowableGap)         \
	X(Cbc_setLogLevel)             \
	X(Cbc_setParameter)            \
	X(Cbc_solve)                   \
	X(Cbc_bestSolution)            \
	X(Cbc_getObjValue)             \
	X(Cbc_getBestPossibleObjValue) \
	X(Cbc_isProvenOptimal)         \
	X(Cbc_isProvenInfeasible)

struct lynx_cbc {
	void *lib;
#define LYNX_CBC_MEMBER(f) __typeof__(f) *f;
	LYNX_CBC_FUNCTIONS(LYNX_CBC_MEMBER)
#undef LYNX_CBC_MEMBER
};

/*
 * Loads CBC from `library` (NULL: LYNX_CBC_LIBRARY) into c. Returns 0; -ENOENT with one
 * sentence in why, which starts "CBC is not available" when the library cannot be loaded
 * and names the missing function when it lacks one. On failure c holds nothing to close.
 */
int lynx_cbc_open(struct lynx_cbc *c, const char *library, char *why, size_t len);

/* Drops what lynx_cbc_open() loaded; c may be zeroed. */
void lynx_cbc_close(struct lynx_cbc *c);

/*
 * What one micro-batch's forward and backward take on stage st without recomputation, in
 * ms: the constant part of the stage's per-micro-batch time, whose variable part (the time
 * recomputation adds) the MILPs minimise.
 */
double lynx_cbc_stage_base_ms(const struct lynx_problem *p, const struct lynx_problem_stage *st);

/*
 * The gaps of a solve whose objective (added ms per micro-batch) is obj with lower bound
 * `bound`, on a stage whose base is base_ms. *gap is relative to the whole micro-batch time,
 * (obj - bound) / (base + obj): a gap on the added time alone is ill-conditioned when
 * windows hide nearly all of it, and that one, (obj - bound) / obj (0 when obj is 0), goes
 * to *added_gap. Both are at least 0.
 */
void lynx_cbc_gaps(double obj, double bound, double base_ms, double *gap, double *added_gap);

/*
 * Copies start's decisions into plan, both for problem p (start may be uniform): the start an
 * exact planner gives lynx_cbc_plan_stages(), which its stages keep until they are solved.
 */
void lynx_cbc_copy_start(const struct lynx_problem *p, const struct lynx_plan *start,
                         struct lynx_plan *plan);

/*
 * The least time a stage's solve is started with. A solve costs more than its CBC limit:
 * building the model, and CBC's own steps before it first looks at its clock (given 1 ms on a
 * 12-layer OPT stage of gpt-22b, CBC still took 0.08 to 0.18 s, and found nothing). A solve
 * started with less would overrun the deadline for nothing; and a floor this low still lets
 * solves of milliseconds (Checkmate's; OPT's on small stages) use what a round leaves.
 */
#define LYNX_CBC_MIN_SOLVE_S 0.05

/* One stage's solve by an exact planner: whether CBC found a plan, proved it, and its gaps. */
struct lynx_cbc_stage_solve {
	bool solved, optimal;
	bool infeasible; /* not solved: CBC proved that no plan fits the budget */
	double gap, added_gap;
};

/*
 * Solves stage s within budget into plan (its rows of stage s) in `seconds` of wall time
 * (at least LYNX_CBC_MIN_SOLVE_S), building the model included: CBC gets what building
 * leaves, and does not run when it leaves nothing. Returns 0 (out->solved false when CBC found
 * nothing; plan unchanged then) or -ENOMEM.
 */
typedef int (*lynx_cbc_stage_fn)(void *ctx, uint32_t s, uint64_t budget, double seconds,
                                 struct lynx_plan *plan, struct lynx_cbc_stage_solve *out);

/* How an exact planner searches: its stage solve, its limit and what the plan starts from. */
struct lynx_cbc_search {
	unsigned max_rounds; /* solve rounds at most (budget re-tightening) */
	double limit_s;      /* the whole search's wall time, from `started`: every stage, round */
	double started;      /* when the planner started, on `now` */
	/* The clock of limit_s and started, in seconds; NULL: lynx_planner_now() (planner.h). A
	 * planner reads it when it starts, so that its set-up (the starting plan, loading CBC)
	 * counts against its limit. Tests give one that their solve advances, to simulate solves
	 * that take time. */
	double (*now)(void);
	lynx_cbc_stage_fn solve;
	void *ctx; /* solve's */
	/* What the plan holds on entry for each stage, named for the note ("HEU's plan"); a
	 * stage CBC does not solve keeps it. NULL: the plan holds no start, and such a stage is
	 * an error. */
	const char *start;
};

struct lynx_cbc_rounds {
	/* Every searched stage holds the solution of its latest solve; and each was proved,
	 * with no round cut short by the time limit. */
	bool solved, optimal;
	double gap, added_gap; /* the largest over the stages; NAN when not solved */
	double solve_s;        /* wall time of the solves */
	unsigned rounds;       /* solve rounds (budget re-tightening) */
	uint32_t searched;     /* stages searched: all, or p->searched_stage */
	uint32_t kept;         /* ... never solved: they keep the start */
	/* Why the search stopped short ("" when it did not): the time limit, with the stages
	 * that keep the start or stay over budget; or CBC's proof that none fits. */
	char note[100];
};

/*
 * The exact planners' outer loop (OPT, Checkmate): solves every stage with search->solve (only
 * p->searched_stage when p->search_one_stage: the others keep the plan's start), replays the
 * plan in the checker, and solves again, with its budget lowered by the excess, each stage
 * whose replayed peak overflows, up to search->max_rounds rounds.
 *
 * Time: search->limit_s bounds the whole search, counted from search->started (the planner's
 * start), not each solve. Each solve gets the time left divided by the solves still to run in
 * its round, so that a round whose solves all run to their limits ends at the deadline; what
 * solves that stop early (proved within the gap) leave goes to the next ones and to later
 * rounds. A solve gets at least LYNX_CBC_MIN_SOLVE_S and never more than what is left; with
 * less than that left, no solve starts. The wall time is then bounded by the limit plus what
 * one solve takes beyond its share: building its model, and CBC's overrun of its own limit
 * (CBC checks its clock between steps; tenths of a second on OPT's stages of 12 layers).
 *
 * A stage that is not solved, because the deadline came first or CBC found nothing in its
 * share, keeps its plan: the start (search->start), or its solution of an earlier round. Then
 * out->solved and out->optimal are false and out->note says what happened; when the deadline
 * ends the rounds, the latest solutions stand. The plan's predictions are always the
 * checker's, of the plan returned.
 *
 * Returns 0; -ESRCH with why when a stage is not solved and search->start is NULL; -ENOMEM;
 * the checker's errors.
 */
int lynx_cbc_plan_stages(const struct lynx_problem *p, struct lynx_plan *plan,
                         const struct lynx_cbc_search *search, struct lynx_cbc_rounds *out,
                         char *why, size_t len);

#endif /* LYNX_POLICY_CBC_H */
