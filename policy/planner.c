/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The planners that rebuild on demand only (none, full, selective, dtr) and their own
 * accounting of such plans, in closed form:
 *
 * - Time. A layer's backward grows by rebuilding its dropped groups: every op of their
 *   union, once. That holds because the groups of a layer either rerun the same ops or
 *   disjoint ones (layer.def's siblings: Q/K and V, the dropout mask and output, the
 *   attention mask and LayerNorm input), a rebuilt dependency stays until its consumer, and
 *   dependencies are consumed after their dependents. A stage's forward and backward of one
 *   micro-batch then have fixed durations, and the iteration is the 1F1B recurrence over
 *   them: a forward starts when the stage is free and the previous stage's forward has
 *   arrived, a backward when the next stage's backward has; then gradient reduction and the
 *   optimizer step.
 * - Memory. With no window rebuilds, a stage peaks in the forward that fills its last
 *   in-flight slot: its k - 1 other micro-batches hold their kept groups and embedding
 *   activations; the new one holds its embedding activations, the kept groups of the layers
 *   done so far, and, at the end of some layer l, that layer's dropped groups too; or, on the
 *   last stage, all kept groups and the head's activations. A backward never exceeds it: it
 *   rebuilds at most one layer's dropped groups, after freeing at least the head.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checker.h"
#include "planner.h"

const struct lynx_planner lynx_planners[LYNX_PLANNER_COUNT] = {
#define LYNX_PLANNER(id, planner_name, fn, search, budget, text) \
	[LYNX_PLANNER_##id] = {.name = planner_name,             \
	                       .plan = fn,                       \
	                       .searches = search,               \
	                       .budgeted = budget,               \
	                       .summary = text},
#include "planners.def"
};

const struct lynx_planner *lynx_planner_find(const char *name)
{
	for (int i = 0; i < LYNX_PLANNER_COUNT; i++)
		if (!strcmp(lynx_planners[i].name, name))
			return &lynx_planners[i];
	return NULL;
}

double lynx_planner_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int lynx_planner_run(const struct lynx_planner *pl, const struct lynx_problem *p,
                     struct lynx_plan *plan, char *why, size_t len)
{
	double start = lynx_planner_now();
	int err = pl->plan(p, plan, why, len);

	if (err)
		return err;
	/* A planner that rebuilt what the executor cannot replay: predict what it will run. */
	if (lynx_plan_lower(p, plan)) {
		struct lynx_checker_result r;

		if ((err = lynx_checker_replay(p, plan, &r, why, len))) {
			lynx_plan_free(plan);
			return err;
		}
		lynx_checker_store(&r, plan);
		lynx_checker_free(&r);
	}
	snprintf(plan->planner, sizeof(plan->planner), "%s", pl->name);
	plan->search_time_s = lynx_planner_now() - start;
	return 0;
}

/* ---- Accounting of on-demand plans ---- */

/* Layer l of stage s under plan: kept bytes, dropped bytes, and the backward's extra time. */
struct layer_terms {
	uint64_t kept, dropped;
	double extra_s;
};

static struct layer_terms terms(const struct lynx_problem *p, const struct lynx_plan *plan,
                                uint32_t s, uint32_t l)
{
	const struct lynx_problem_layer *L = &p->layer;
	struct layer_terms t = {0};
	uint32_t ops = 0;

	for (uint32_t g = 0; g < L->n_groups; g++) {
		if (lynx_plan_get(plan, s, l, g)->action == LYNX_ACTION_KEEP) {
			t.kept += L->groups[g].bytes;
		} else {
			t.dropped += L->groups[g].bytes;
			ops |= L->groups[g].ops;
		}
	}
	for (uint32_t op = 0; op < L->n_ops; op++)
		if (ops & (1u << op))
			t.extra_s += L->ops[op].rerun_s;
	return t;
}

/*
 * What layers [first, end) of stage s keep of one micro-batch (*kept), and the most they hold
 * while one of them runs its backward, the dropped groups of that layer rebuilt beside the
 * kept ones of the layers below it, and `top` (the head) beside all of them.
 */
static uint64_t span_worst(const struct lynx_problem *p, const struct lynx_plan *plan, uint32_t s,
                           uint32_t first, uint32_t end, uint64_t top, uint64_t *kept)
{
	uint64_t prefix = 0, worst;

	*kept = 0;
	for (uint32_t l = first; l < end; l++)
		*kept += terms(p, plan, s, l).kept;
	worst = *kept + top;
	for (uint32_t l = first; l < end; l++) {
		struct layer_terms t = terms(p, plan, s, l);

		prefix += t.kept;
		if (prefix + t.dropped > worst)
			worst = prefix + t.dropped;
	}
	return worst;
}

static uint64_t stage_peak(const struct lynx_problem *p, const struct lynx_plan *plan, uint32_t s)
{
	const struct lynx_problem_stage *st = &p->stages[s];
	const uint32_t v = lynx_problem_chunks(p);
	uint64_t emb = st->embedding.present ? st->embedding.act_bytes : 0;
	uint64_t head = st->head.present ? st->head.act_bytes : 0;
	uint64_t kept, worst;

	if (v == 1) {
		worst = span_worst(p, plan, s, 0, st->layers, head, &kept);
		return st->static_bytes + (uint64_t)(st->inflight - 1) * (kept + emb) + emb + worst;
	}
	/* Interleaved: at each backward pass, the other passes in flight, each keeping its
	 * chunk's kept groups and, in the last chunk, the head's; the one running what its chunk
	 * holds at most then; and the embedding's activations of every micro-batch between its
	 * first chunk's forward and backward. */
	uint64_t peak = 0, in_flight = 0, embedded = 0, headed = 0;
	uint64_t chunk_kept[LYNX_MODEL_MAX_VP], chunk_worst[LYNX_MODEL_MAX_VP];

	for (uint32_t c = 0, first, end; c < v; c++) {
		lynx_problem_chunk_layers(p, s, c, &first, &end);
		chunk_worst[c] =
		        span_worst(p, plan, s, first, end, c == v - 1 ? head : 0, &chunk_kept[c]);
	}
	for (uint32_t a = 0; a < 2 * p->micro_batches * v; a++) {
		struct lynx_pass x = lynx_problem_pass(p, s, a);

		if (x.forward) {
			in_flight += chunk_kept[x.chunk];
			embedded += x.chunk == 0;
			headed += x.chunk == v - 1;
			continue;
		}
		headed -= x.chunk == v - 1;
		uint64_t at = st->static_bytes + embedded * emb + headed * head + in_flight -
		              chunk_kept[x.chunk] + chunk_worst[x.chunk];
		peak = at > peak ? at : peak;
		in_flight -= chunk_kept[x.chunk];
		embedded -= x.chunk == 0;
	}
	return peak;
}

/*
 * The pipeline's iteration over the durations of one micro-batch's forward and backward
 * through the layers of each stage's model chunk c (fwd[s·v + c], bwd[s·v + c]; v = 1 without
 * virtual stages), plus the embedding in the first chunk and the head in the last. A pass waits
 * for the pass lynx_problem_pass_waits_for() names, and its transfer. Returns the step time, or
 * a negative value on allocation failure.
 */
static double iteration_s(const struct lynx_problem *p, const double *fwd, const double *bwd)
{
	const uint32_t n = p->n_stages, m = p->micro_batches, v = lynx_problem_chunks(p);
	const size_t passes = (size_t)n * m * v;
	double *f_end = malloc(passes * sizeof(double));
	double *b_end = malloc(passes * sizeof(double));
	double *free_at = calloc(n, sizeof(double));
	uint32_t *next = calloc(n, sizeof(uint32_t));
	double step = -1;
	bool moved = true;

	if (!f_end || !b_end || !free_at || !next)
		goto out;
	for (size_t i = 0; i < passes; i++)
		f_end[i] = b_end[i] = NAN;
	while (moved) {
		moved = false;
		for (uint32_t s = 0; s < n; s++) {
			const struct lynx_problem_stage *st = &p->stages[s];

			for (; next[s] < 2 * m * v; next[s]++, moved = true) {
				struct lynx_pass x = lynx_problem_pass(p, s, next[s]);
				const uint32_t j = x.microbatch, c = x.chunk;
				double start = free_at[s], dep = 0, took;
				uint32_t ds, dc;

				if (lynx_problem_pass_waits_for(p, s, &x, &ds, &dc)) {
					size_t at = ((size_t)ds * v + dc) * m + j;
					dep = x.forward ? f_end[at] + st->recv_fwd_s
					                : b_end[at] + st->recv_bwd_s;
					if (isnan(dep))
						break;
				}
				start = start > dep ? start : dep;
				if (x.forward)
					took = fwd[s * v + c] + (c == 0 ? st->embedding.fwd_s : 0) +
					       (c == v - 1 ? st->head.fwd_s : 0);
				else
					took = bwd[s * v + c] + (c == 0 ? st->embedding.bwd_s : 0) +
					       (c == v - 1 ? st->head.bwd_s : 0);
				free_at[s] = start + took;
				(x.forward ? f_end : b_end)[((size_t)s * v + c) * m + j] =
				        free_at[s];
			}
		}
	}
	step = 0;
	for (uint32_t s = 0; s < n; s++) {
		double end = free_at[s] + p->stages[s].grad_reduce_s + p->stages[s].optimizer_s;

		step = end > step ? end : step;
	}
out:
	free(f_end);
	free(b_end);
	free(free_at);
	free(next);
	return step;
}

/* Fills plan's predictions: per-stage peaks, fits, step time. 0 or -ENOMEM. */
static int predict(const struct lynx_problem *p, struct lynx_plan *plan)
{
	const uint32_t v = lynx_problem_chunks(p);
	double *fwd = calloc((size_t)p->n_stages * v, sizeof(double));
	double *bwd = calloc((size_t)p->n_stages * v, sizeof(double));
	int err = 0;

	if (!fwd || !bwd) {
		err = -ENOMEM;
		goto out;
	}
	plan->fits = true;
	for (uint32_t s = 0; s < p->n_stages; s++) {
		for (uint32_t c = 0, first, end; c < v; c++) {
			lynx_problem_chunk_layers(p, s, c, &first, &end);
			for (uint32_t l = first; l < end; l++) {
				fwd[(size_t)s * v + c] += p->layer.fwd_s;
				bwd[(size_t)s * v + c] +=
				        p->layer.bwd_s + terms(p, plan, s, l).extra_s;
			}
		}
		plan->stages[s].peak_bytes = stage_peak(p, plan, s);
		plan->fits =
		        plan->fits && plan->stages[s].peak_bytes <= lynx_problem_stage_budget(p, s);
	}
	plan->step_time_s = iteration_s(p, fwd, bwd);
	if (plan->step_time_s < 0)
		err = -ENOMEM;
out:
	free(fwd);
	free(bwd);
	return err;
}

/* ---- Megatron-LM's baselines: one row of decisions for every layer ---- */

/* A uniform plan that rebuilds the groups in `drop` (bit g) on demand. */
static int uniform_plan(const struct lynx_problem *p, struct lynx_plan *plan, uint32_t drop)
{
	int err = lynx_plan_init(plan, p, "", true);

	if (err)
		return err;
	for (uint32_t s = 0; s < p->n_stages; s++)
		for (uint32_t g = 0; g < p->layer.n_groups; g++)
			if (drop & (1u << g))
				lynx_plan_decision(plan, s, 0, g)->action =
				        LYNX_ACTION_RECOMPUTE_ON_DEMAND;
	err = predict(p, plan);
	if (err)
		lynx_plan_free(plan);
	return err;
}

int lynx_planner_none(const struct lynx_problem *p, struct lynx_plan *plan, char *why, size_t len)
{
	return uniform_plan(p, plan, 0);
}

/* Everything the layer can rebuild: all but its input. */
int lynx_planner_full(const struct lynx_problem *p, struct lynx_plan *plan, char *why, size_t len)
{
	uint32_t drop = 0;

	for (uint32_t g = 0; g < p->layer.n_groups; g++)
		if (p->layer.groups[g].ops)
			drop |= 1u << g;
	return uniform_plan(p, plan, drop);
}

/*
 * Megatron's selective recomputation drops what its checkpointed core attention produces and
 * the projection does not keep: with unfused attention the groups rebuilt by the scores,
 * softmax and attention dropout ops alone (the softmax output, the dropout's mask and
 * output), from Q and K; with flash attention its log-sum-exp (model.h,
 * lynx_model_group_kept()). Megatron's checkpoint also reruns P·V, whose output the
 * projection keeps anyway; rebuilding exactly the dropped groups skips it, so this baseline
 * is slightly faster than Megatron's (by P·V's forward: 0.17 ms of 20.9 per 22B layer on
 * A100). A problem built from profiles has kernels, not layer.def's ops: it needs ops named
 * as layer.def's core attention.
 */
int lynx_planner_selective(const struct lynx_problem *p, struct lynx_plan *plan, char *why,
                           size_t len)
{
	static const char *const core_ops[] = {"scores", "softmax", "attn_dropout"};
	uint32_t core = 0, drop = 0;

	if (p->cluster) {
		struct lynx_layer_shape shape;

		lynx_model_layer(&p->model, &shape);
		for (int g = 0; g < LYNX_GROUP_COUNT; g++) {
			int i = lynx_problem_find_group(&p->layer, shape.groups[g].name);

			if (shape.groups[g].present && i >= 0 &&
			    !lynx_model_group_kept(&p->model, g, LYNX_RECOMPUTE_SELECTIVE))
				drop |= 1u << i;
		}
		return uniform_plan(p, plan, drop);
	}
	for (size_t i = 0; i < sizeof(core_ops) / sizeof(core_ops[0]); i++) {
		int op = lynx_problem_find_op(&p->layer, core_ops[i]);

		if (op < 0) {
			snprintf(why, len, "selective: the layer has no '%s' op to recompute",
			         core_ops[i]);
			return -EINVAL;
		}
		core |= 1u << op;
	}
	for (uint32_t g = 0; g < p->layer.n_groups; g++)
		if (p->layer.groups[g].ops && !(p->layer.groups[g].ops & ~core))
			drop |= 1u << g;
	return uniform_plan(p, plan, drop);
}

/* ---- DTR (Kirisame et al., ICLR 2021) as a static, budget-driven plan ---- */

/*
 * DTR's cost of evicting group g of layer l: its rebuild together with its evicted
 * neighbourhood (the dropped dependencies it would rebuild first), over its size and its
 * staleness. Staleness, the time between its last use in the forward and its use in the
 * backward, is (n - l) layer forwards and backwards: the same for every group of a layer, and
 * longer for earlier layers, which 1F1B's interleaving stretches alike.
 */
static double dtr_score(const struct lynx_problem *p, const struct lynx_plan *plan, uint32_t s,
                        uint32_t l, uint32_t g)
{
	const struct lynx_problem_layer *L = &p->layer;
	uint32_t set = 1u << g, prev = 0, ops = 0;
	double c = 0, stale = (p->stages[s].layers - l) * (L->fwd_s + L->bwd_s);

	while (set != prev) {
		prev = set;
		for (uint32_t h = 0; h < L->n_groups; h++)
			if (set & (1u << h))
				for (uint32_t d = 0; d < L->n_groups; d++)
					if ((L->groups[h].deps & (1u << d)) &&
					    lynx_plan_get(plan, s, l, d)->action !=
					            LYNX_ACTION_KEEP)
						set |= 1u << d;
	}
	for (uint32_t h = 0; h < L->n_groups; h++)
		if (set & (1u << h))
			ops |= L->groups[h].ops;
	for (uint32_t op = 0; op < L->n_ops; op++)
		if (ops & (1u << op))
			c += L->ops[op].rerun_s;
	return c / ((double)L->groups[g].bytes * stale);
}

/*
 * Greedy, per stage: while the stage's predicted peak exceeds the budget, drop the group with
 * the smallest score. A drop changes only its own layer's scores, so those are cached:
 * O((n · groups)²) per stage, a few milliseconds for 48 layers.
 */
int lynx_planner_dtr(const struct lynx_problem *p, struct lynx_plan *plan, char *why, size_t len)
{
	const struct lynx_problem_layer *L = &p->layer;
	double *score = NULL;
	int err = lynx_plan_init(plan, p, "", false);

	for (uint32_t s = 0; !err && s < p->n_stages; s++) {
		uint32_t n = p->stages[s].layers;

		free(score);
		score = malloc(((size_t)n * L->n_groups + 1) * sizeof(double));
		if (!score) {
			err = -ENOMEM;
			break;
		}
		for (uint32_t l = 0; l < n; l++)
			for (uint32_t g = 0; g < L->n_groups; g++)
				score[l * L->n_groups + g] = L->groups[g].ops && L->groups[g].bytes
				                                     ? dtr_score(p, plan, s, l, g)
				                                     : INFINITY;
		while (stage_peak(p, plan, s) > lynx_problem_stage_budget(p, s)) {
			size_t best = SIZE_MAX;
			uint32_t l;

			for (size_t i = 0; i < (size_t)n * L->n_groups; i++)
				if (score[i] < INFINITY &&
				    (best == SIZE_MAX || score[i] < score[best]))
					best = i;
			if (best == SIZE_MAX)
				break; /* nothing left to drop: predict() reports fits = false */
			l = best / L->n_groups;
			lynx_plan_decision(plan, s, l, best % L->n_groups)->action =
			        LYNX_ACTION_RECOMPUTE_ON_DEMAND;
			for (uint32_t g = 0; g < L->n_groups; g++)
				if (score[l * L->n_groups + g] < INFINITY)
					score[l * L->n_groups + g] =
					        lynx_plan_get(plan, s, l, g)->action ==
					                        LYNX_ACTION_KEEP
					                ? dtr_score(p, plan, s, l, g)
					                : INFINITY;
		}
	}
	free(score);
	if (!err)
		err = predict(p, plan);
	if (err && plan->stages)
		lynx_plan_free(plan);
	return err;
}
