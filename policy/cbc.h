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

#include <stddef.h>

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
	X(Cbc_setObjSense)             \
	X(Cbc_setMIPStartI)            \
	X(Cbc_setMaximumSeconds)       \
	X(Cbc_setAllowableGap)         \
	X(Cbc_setLogLevel)             \
	X(Cbc_solve)                   \
	X(Cbc_bestSolution)            \
	X(Cbc_getObjValue)             \
	X(Cbc_getBestPossibleObjValue) \
	X(Cbc_isProvenOptimal)

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

/* One stage's solve by an exact planner: whether CBC found a plan, proved it, and its gaps. */
struct lynx_cbc_stage_solve {
	bool solved, optimal;
	double gap, added_gap;
};

/* Solves stage s within budget into plan (its rows of stage s). Returns 0 (out->solved false
 * when CBC found nothing) or -ENOMEM. */
typedef int (*lynx_cbc_stage_fn)(void *ctx, uint32_t s, uint64_t budget, struct lynx_plan *plan,
                                 struct lynx_cbc_stage_solve *out);

struct lynx_cbc_rounds {
	bool solved, optimal;  /* every stage solved; and proved */
	double gap, added_gap; /* the largest over the stages; NAN when not solved */
	double solve_s;        /* wall time of the solves */
	unsigned rounds;       /* solve rounds (budget re-tightening) */
};

/*
 * The exact planners' outer loop (OPT, Checkmate): solves every stage with solve (only
 * p->searched_stage when p->search_one_stage: the others keep the plan's start), replays
 * the plan in the checker, and solves again, with its budget lowered by the excess, each
 * stage whose replayed peak overflows, up to max_rounds. The plan's predictions are the
 * checker's. Returns 0; -ESRCH with why when CBC finds no plan for a stage within
 * time_limit_s (named in why); -ENOMEM; the checker's errors.
 */
int lynx_cbc_plan_stages(const struct lynx_problem *p, struct lynx_plan *plan, unsigned max_rounds,
                         double time_limit_s, lynx_cbc_stage_fn solve, void *ctx,
                         struct lynx_cbc_rounds *out, char *why, size_t len);

#endif /* LYNX_POLICY_CBC_H */
