/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The offload baseline: Kuaishou's pipeline-aware activation offloading (Yuan et al., USENIX
 * ATC'24), with the offloaded share α chosen to fit the budget. The checker (checker.h) models
 * their schedule: copies to pinned host memory on a side stream while the forwards run,
 * prefetches one backward ahead into buffers held until the consumer; its numbers are the
 * plan's prediction. Nothing is recomputed.
 *
 * What α means here. The layer's groups are ranked largest first (every copy runs at the same
 * link rate, so bytes per transfer second is bytes), and a stage's plan is a step t of a ladder
 * from 0 (keep all) to G·n (offload all G groups of all n layers): with t = k·n + i, layers
 * 0 .. i - 1 offload the k + 1 largest groups and the others the k largest. α is the share of
 * the stage's activation bytes that this offloads. Earlier layers offload first: their
 * activations wait longest for their backward, so their copies have the most time.
 *
 * Kuaishou's rules. Their design needs PP >= 3: with one or two stages nothing is offloaded,
 * and the plan's note says so. The last stage's last chunk is not offloaded; without virtual
 * stages the last stage is one chunk, whose forward is followed at once by its backward, so
 * the last stage offloads nothing; with v of them (interleaved 1F1B) its first v - 1 chunks
 * climb the ladder below, as the other stages' layers do.
 *
 * Search, per stage, by the checker. A stage's memory depends on its own decisions only (and
 * weakly, through timing, on its neighbours'), so all stages are searched in the same replays:
 * 1. coarse: t = k·n for k = 0 .. G, stopping at each stage's first k that fits;
 * 2. fine: a bisection of i in (k - 1)·n .. k·n, assuming the peak falls as t grows there;
 * 3. confirmation: a stage that the final replay finds over budget goes back to k·n (which
 *    fitted), up to a few rounds.
 * A stage that no step fits takes the step with the lowest peak (not always full offload: when
 * the link cannot keep up, copies queue and groups wait longer on the device) and the plan says
 * fits = false. About G + log2(n) + 2 replays: tens of milliseconds on the GPT presets.
 *
 * With α given (the problem's offload_share_bp) there is no search: every stage that may
 * offload takes the first step whose α reaches it, as Kuaishou's runs set their ratio, and the
 * checker says what that costs and whether it fits.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checker.h"
#include "planner.h"

#define MAX_CONFIRM_ROUNDS 4

struct ladder {
	uint32_t n_order;
	uint32_t order[LYNX_PROBLEM_MAX_GROUPS]; /* groups, largest first */
};

/* The non-empty groups, largest first; equal sizes in layer.def order. */
static void rank_groups(const struct lynx_problem_layer *L, struct ladder *ld)
{
	ld->n_order = 0;
	for (uint32_t g = 0; g < L->n_groups; g++) {
		uint32_t i = ld->n_order++;

		if (!L->groups[g].bytes) {
			ld->n_order--;
			continue;
		}
		while (i > 0 && L->groups[ld->order[i - 1]].bytes < L->groups[g].bytes) {
			ld->order[i] = ld->order[i - 1];
			i--;
		}
		ld->order[i] = g;
	}
}

/* The layers of stage s that may offload, its first ones: all but the last stage's last model
 * chunk (Kuaishou's rule; without virtual stages that chunk is the whole stage). */
static uint32_t ladder_layers(const struct lynx_problem *p, uint32_t s)
{
	uint32_t last, end;

	lynx_problem_chunk_layers(p, s, lynx_problem_chunks(p) - 1, &last, &end);
	return s + 1 < p->n_stages ? end : last;
}

/* Sets stage s of plan to ladder step t. */
static void set_step(const struct lynx_problem *p, const struct ladder *ld, struct lynx_plan *plan,
                     uint32_t s, uint32_t t)
{
	uint32_t n = ladder_layers(p, s);

	for (uint32_t l = 0; l < p->stages[s].layers; l++) {
		uint32_t k = l < n ? t / n + (l < t % n) : 0;

		for (uint32_t r = 0; r < ld->n_order; r++)
			lynx_plan_decision(plan, s, l, ld->order[r])->action =
			        r < k ? LYNX_ACTION_OFFLOAD : LYNX_ACTION_KEEP;
	}
}

/* The share of stage s's activation bytes that step t offloads. */
static double alpha_of(const struct lynx_problem *p, const struct ladder *ld, uint32_t s,
                       uint32_t t)
{
	const struct lynx_problem_layer *L = &p->layer;
	uint32_t n = ladder_layers(p, s);
	double off = 0, all = 0;

	for (uint32_t g = 0; g < L->n_groups; g++)
		all += (double)L->groups[g].bytes * p->stages[s].layers;
	for (uint32_t l = 0; l < n; l++) {
		uint32_t k = t / n + (l < t % n);

		for (uint32_t r = 0; r < k && r < ld->n_order; r++)
			off += (double)L->groups[ld->order[r]].bytes;
	}
	return all > 0 ? off / all : 0;
}

/* Per stage: the search's state. */
struct stage_search {
	bool eligible;   /* Kuaishou's rules allow it to offload */
	bool found;      /* some coarse step fits */
	uint32_t lo, hi; /* bisection: lo does not fit, hi fits */
	uint32_t best;   /* no step fits: the one with the lowest peak so far */
	uint64_t best_peak;
	uint32_t step; /* the step in the plan */
};

/* Replays plan and records each stage's peak into peak[]. */
static int replay(const struct lynx_problem *p, const struct lynx_plan *plan, uint64_t *peak,
                  char *why, size_t len)
{
	struct lynx_checker_result r;
	int err = lynx_checker_replay(p, plan, &r, why, len);

	if (err)
		return err;
	memcpy(peak, r.peak_bytes, p->n_stages * sizeof(*peak));
	lynx_checker_free(&r);
	return 0;
}

/* Step 1: the coarse scan, k groups per layer. */
static int coarse(const struct lynx_problem *p, const struct ladder *ld, struct lynx_plan *plan,
                  struct stage_search *ss, uint64_t *peak, char *why, size_t len)
{
	for (uint32_t k = 0; k <= ld->n_order; k++) {
		bool open = false;
		int err;

		for (uint32_t s = 0; s < p->n_stages; s++)
			if (k == 0 || (ss[s].eligible && !ss[s].found)) {
				ss[s].step = k * ladder_layers(p, s);
				set_step(p, ld, plan, s, ss[s].step);
			}
		err = replay(p, plan, peak, why, len);
		if (err)
			return err;
		for (uint32_t s = 0; s < p->n_stages; s++) {
			if (ss[s].found || (k > 0 && !ss[s].eligible))
				continue;
			if (peak[s] <= lynx_problem_stage_budget(p, s)) {
				ss[s].found = true;
				ss[s].hi = ss[s].step;
				ss[s].lo = k ? ss[s].step - ladder_layers(p, s) : 0;
			} else if (k == 0 || peak[s] < ss[s].best_peak) {
				ss[s].best = ss[s].step;
				ss[s].best_peak = peak[s];
			}
			open = open || (ss[s].eligible && !ss[s].found);
		}
		/* Stages done stay at their fitting step from here on. */
		for (uint32_t s = 0; s < p->n_stages; s++)
			if (ss[s].found)
				set_step(p, ld, plan, s, ss[s].hi);
		if (!open)
			break;
	}
	return 0;
}

/* Step 2: the bisection within the last coarse interval, all stages in the same replays. */
static int bisect(const struct lynx_problem *p, const struct ladder *ld, struct lynx_plan *plan,
                  struct stage_search *ss, uint64_t *peak, char *why, size_t len)
{
	for (;;) {
		bool open = false;
		int err;

		for (uint32_t s = 0; s < p->n_stages; s++) {
			if (ss[s].found && ss[s].hi > 0 && ss[s].lo + 1 < ss[s].hi) {
				ss[s].step = ss[s].lo + (ss[s].hi - ss[s].lo) / 2;
				open = true;
			} else {
				ss[s].step = ss[s].found ? ss[s].hi : ss[s].best;
			}
			set_step(p, ld, plan, s, ss[s].step);
		}
		if (!open)
			return 0;
		err = replay(p, plan, peak, why, len);
		if (err)
			return err;
		for (uint32_t s = 0; s < p->n_stages; s++) {
			if (!ss[s].found || ss[s].step == ss[s].hi)
				continue;
			if (peak[s] <= lynx_problem_stage_budget(p, s))
				ss[s].hi = ss[s].step;
			else
				ss[s].lo = ss[s].step;
		}
	}
}

/* α given: each stage that may offload at the first step that offloads that share. */
static void given_share(const struct lynx_problem *p, const struct ladder *ld,
                        struct lynx_plan *plan, struct stage_search *ss)
{
	const double alpha = p->offload_share_bp / 10000.0;

	for (uint32_t s = 0; s < p->n_stages; s++) {
		uint32_t last = ld->n_order * ladder_layers(p, s);

		ss[s].step = 0;
		while (ss[s].eligible && ss[s].step < last &&
		       alpha_of(p, ld, s, ss[s].step) < alpha - 1e-12)
			ss[s].step++;
		set_step(p, ld, plan, s, ss[s].step);
	}
}

/* The plan's note: Kuaishou's PP rule, whether it fits, α by stage. */
static void write_note(const struct lynx_problem *p, const struct ladder *ld,
                       struct lynx_plan *plan, const struct stage_search *ss)
{
	size_t at = 0, size = sizeof(plan->note);

	if (p->n_stages < 3) {
		snprintf(plan->note, size, "offload needs PP >= 3 (Kuaishou); nothing offloaded");
		return;
	}
	at += (size_t)snprintf(plan->note, size,
	                       "%salpha by stage:", plan->fits ? "" : "no offload ratio fits; ");
	for (uint32_t s = 0; s < p->n_stages && at < size; s++)
		at += (size_t)snprintf(plan->note + at, size - at, " %.2f",
		                       alpha_of(p, ld, s, ss[s].step));
}

int lynx_planner_offload(const struct lynx_problem *p, struct lynx_plan *plan, char *why,
                         size_t len)
{
	struct stage_search *ss = calloc(p->n_stages, sizeof(*ss));
	uint64_t *peak = calloc(p->n_stages, sizeof(*peak));
	struct lynx_checker_result r = {0};
	struct ladder ld;
	int err = ss && peak ? lynx_plan_init(plan, p, "offload", false) : -ENOMEM;

	if (err)
		goto out;
	rank_groups(&p->layer, &ld);
	for (uint32_t s = 0; s < p->n_stages; s++)
		ss[s].eligible = p->n_stages >= 3 && ladder_layers(p, s) > 0 && p->d2h.busbw > 0 &&
		                 p->h2d.busbw > 0;
	if (p->offload_share_set)
		given_share(p, &ld, plan, ss);
	else
		err = coarse(p, &ld, plan, ss, peak, why, len);
	if (!err && !p->offload_share_set)
		err = bisect(p, &ld, plan, ss, peak, why, len);
	for (int round = 0; !err && round < MAX_CONFIRM_ROUNDS; round++) {
		bool again = false;

		err = lynx_checker_replay(p, plan, &r, why, len);
		if (err)
			break;
		for (uint32_t s = 0; s < p->n_stages; s++) {
			uint32_t n = ladder_layers(p, s), coarse_hi = ss[s].hi + (n ? n : 1) - 1;

			coarse_hi -= n ? coarse_hi % n : coarse_hi;
			if (!ss[s].found || r.peak_bytes[s] <= lynx_problem_stage_budget(p, s) ||
			    ss[s].step == coarse_hi || round + 1 == MAX_CONFIRM_ROUNDS)
				continue;
			ss[s].step = coarse_hi;
			set_step(p, &ld, plan, s, coarse_hi);
			again = true;
		}
		if (!again)
			break;
		lynx_checker_free(&r);
	}
	if (err)
		goto out;
	lynx_checker_store(&r, plan);
	lynx_checker_free(&r);
	write_note(p, &ld, plan, ss);
out:
	if (err && plan->stages)
		lynx_plan_free(plan);
	free(ss);
	free(peak);
	return err;
}
