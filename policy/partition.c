/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Pipeline partitioning: a DP over contiguous layer splits, its stages priced by a planner.
 *
 * Candidate stages. Every transformer layer is the same layer (problem.h), so what stage s
 * costs with n layers does not depend on which n: the cache is keyed by (s, n), and
 * p · (L - p + 1) candidates cover every split (the O(L² · p) bound of keying by the first
 * layer too does not arise). Stage s matters: it fixes the embedding (s = 0), the head
 * (s = p - 1), the in-flight micro-batches min(p - s, m) that decide how much must be
 * recomputed, and the pipeline receives. Each candidate is planned as a job of its own: the
 * model with n + p - 1 layers, n on stage s and one on every other stage, which keeps s's
 * static memory, windows and in-flight count. The planner plans it; the plan's other stages
 * are then set to keep everything and the checker replays it, so the recompute the checker
 * counts on compute streams (on demand, and window overflow) is stage s's alone, and so is
 * the peak it reports for s. The neighbours' speed changes the pipeline bubbles in which
 * PP-window rebuilds run, a second-order effect this ignores.
 *
 * The objective (partition.h): T = sum_s a(s, n_s) + (m - 1) · max_s cycle(s, n_s), where
 * a(s, n) = cycle(s, n), plus the tail on the first stage. The max does not decompose, so the
 * DP fixes it: for each threshold C among the candidates' cycles, in increasing order, the
 * least sum over splits whose every stage has cycle <= C is f[p][L] with
 *   f[0][0] = 0, f[s + 1][j + n] = min f[s][j] + a(s, n) over stages with cycle(s, n) <= C,
 * O(p · L²); T(C) = f[p][L] + (m - 1) · C, and the least T over thresholds is the optimum
 * (at C = the optimum's own max the optimum is a candidate; at any C, T(C) bounds the split
 * it finds from above). The thresholds stop once (m - 1) · C plus the unconstrained least
 * sum exceeds the best T found: at most p · L thresholds, O(p² · L³) in all, about 10^8
 * additions for L = 96 and p = 8, and far fewer in practice.
 *
 * The cost model is a model: the split it picks and the uniform split are both planned
 * whole and replayed by the checker, and if the checker finds the DP's split slower, the
 * uniform split is kept (and kept_uniform says so).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checker.h"
#include "partition.h"

static struct lynx_partition_cost *cost_at(const struct lynx_partition *pt, uint32_t s, uint32_t n)
{
	return &pt->costs[(size_t)s * (pt->n_layers + 1) + n];
}

/*
 * Plans candidate (s, n) as a job of its own and fills its cost. Returns 0 (a job that cannot
 * be built, such as static memory above the budget, leaves the cost invalid) or -ENOMEM.
 */
static int evaluate(const struct lynx_model_desc *m, const struct lynx_cluster *c,
                    const struct lynx_problem_options *opt, const struct lynx_planner *pl,
                    uint32_t s, uint32_t n, struct lynx_partition_cost *out)
{
	struct lynx_problem_options o = *opt;
	struct lynx_model_desc probe = *m;
	struct lynx_checker_result r;
	struct lynx_problem p;
	struct lynx_plan plan;
	uint32_t *layers = calloc(m->pp, sizeof(*layers));
	char why[256];
	int err;

	*out = (struct lynx_partition_cost){0};
	if (!layers)
		return -ENOMEM;
	for (uint32_t k = 0; k < m->pp; k++)
		layers[k] = k == s ? n : 1;
	probe.layers = n + m->pp - 1;
	o.stage_layers = layers;
	err = lynx_problem_from_model(&probe, c, &o, &p, why, sizeof(why));
	free(layers);
	if (err)
		return err == -ENOMEM ? err : 0;
	err = pl->plan(&p, &plan, why, sizeof(why));
	if (err)
		goto out_problem;
	for (uint32_t k = 0; k < p.n_stages; k++)
		for (uint32_t l = 0; k != s && l < p.stages[k].layers; l++)
			for (uint32_t g = 0; g < p.layer.n_groups; g++)
				*lynx_plan_decision(&plan, k, l, g) =
				        (struct lynx_decision){.action = LYNX_ACTION_KEEP};
	err = lynx_checker_replay(&p, &plan, &r, why, sizeof(why));
	if (!err) {
		const struct lynx_problem_stage *st = &p.stages[s];

		out->valid = true;
		out->peak_bytes = r.peak_bytes[s];
		out->fits = r.peak_bytes[s] <= p.budget_bytes;
		out->recompute_s = (r.on_demand_s + r.window_overflow_s) / p.micro_batches;
		out->cycle_s = st->layers * (p.layer.fwd_s + p.layer.bwd_s) + st->embedding.fwd_s +
		               st->embedding.bwd_s + st->head.fwd_s + st->head.bwd_s +
		               out->recompute_s + st->recv_fwd_s + st->recv_bwd_s;
		out->tail_s = st->grad_reduce_s + st->optimizer_s;
		lynx_checker_free(&r);
	}
	lynx_plan_free(&plan);
out_problem:
	lynx_problem_free(&p);
	return err == -ENOMEM ? err : 0;
}

/* Whether candidate (s, n) may be used: planned, and within budget unless any_memory. */
static bool usable(const struct lynx_partition *pt, uint32_t s, uint32_t n, bool any_memory)
{
	const struct lynx_partition_cost *k = cost_at(pt, s, n);

	return k->valid && (k->fits || any_memory);
}

static double additive(const struct lynx_partition *pt, uint32_t s, uint32_t n)
{
	const struct lynx_partition_cost *k = cost_at(pt, s, n);

	return k->cycle_s + (s == 0 ? k->tail_s : 0);
}

static double predict(const struct lynx_partition *pt, const uint32_t *layers, bool any_memory)
{
	double sum = 0, max = 0;
	uint64_t total = 0;

	for (uint32_t s = 0; s < pt->n_stages; s++) {
		if (!layers[s] || layers[s] > pt->n_layers || !usable(pt, s, layers[s], any_memory))
			return INFINITY;
		total += layers[s];
		sum += additive(pt, s, layers[s]);
		if (cost_at(pt, s, layers[s])->cycle_s > max)
			max = cost_at(pt, s, layers[s])->cycle_s;
	}
	if (total != pt->n_layers)
		return INFINITY;
	return sum + (double)(pt->micro_batches - 1) * max;
}

double lynx_partition_predict(const struct lynx_partition *pt, const uint32_t *layers)
{
	return predict(pt, layers, false);
}

/*
 * The least sum of a() over splits whose stages all have cycle <= cap, into f ((p + 1) ·
 * (L + 1)) with the choices in pick; the split into layers. Returns the sum or INFINITY.
 */
static double min_sum(const struct lynx_partition *pt, double cap, bool any_memory, double *f,
                      uint32_t *pick, uint32_t *layers)
{
	uint32_t p = pt->n_stages, L = pt->n_layers, w = L + 1;

	for (size_t i = 0; i < (size_t)(p + 1) * w; i++)
		f[i] = INFINITY;
	f[0] = 0;
	for (uint32_t s = 0; s < p; s++)
		for (uint32_t j = s; j + (p - s) <= L; j++) {
			if (f[s * w + j] == INFINITY)
				continue;
			for (uint32_t n = 1; j + n + (p - s - 1) <= L; n++) {
				double v;

				if (!usable(pt, s, n, any_memory) ||
				    cost_at(pt, s, n)->cycle_s > cap)
					continue;
				v = f[s * w + j] + additive(pt, s, n);
				if (v < f[(s + 1) * w + j + n]) {
					f[(s + 1) * w + j + n] = v;
					pick[(s + 1) * w + j + n] = n;
				}
			}
		}
	if (f[p * w + L] == INFINITY)
		return INFINITY;
	for (uint32_t s = p, j = L; s > 0; s--) {
		layers[s - 1] = pick[s * w + j];
		j -= layers[s - 1];
	}
	return f[p * w + L];
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The DP of the top comment into pt->dp. Returns 0 or -ENOMEM. */
static int run_dp(struct lynx_partition *pt, bool any_memory)
{
	uint32_t p = pt->n_stages, L = pt->n_layers;
	size_t cells = (size_t)(p + 1) * (L + 1), n_caps = 0;
	double *f = malloc(cells * sizeof(*f)), *caps = malloc((size_t)p * L * sizeof(*caps));
	uint32_t *pick = calloc(cells, sizeof(*pick)), *split = calloc(p, sizeof(*split));
	double floor_sum;
	int err = f && caps && pick && split ? 0 : -ENOMEM;

	for (uint32_t s = 0; !err && s < p; s++)
		for (uint32_t n = 1; n <= L; n++)
			if (usable(pt, s, n, any_memory))
				caps[n_caps++] = cost_at(pt, s, n)->cycle_s;
	if (err || !n_caps)
		goto out_free;
	qsort(caps, n_caps, sizeof(*caps), by_value);
	floor_sum = min_sum(pt, INFINITY, any_memory, f, pick, split);
	for (size_t i = 0; floor_sum < INFINITY && i < n_caps; i++) {
		double t;

		if (i && caps[i] == caps[i - 1])
			continue;
		if (floor_sum + (double)(pt->micro_batches - 1) * caps[i] >= pt->dp.predicted_s)
			break;
		if (min_sum(pt, caps[i], any_memory, f, pick, split) == INFINITY)
			continue;
		t = predict(pt, split, any_memory);
		if (t < pt->dp.predicted_s) {
			pt->dp.predicted_s = t;
			memcpy(pt->dp.layers, split, p * sizeof(*split));
		}
	}
out_free:
	free(f);
	free(caps);
	free(pick);
	free(split);
	return err;
}

/* The best split with even middle stages (Megatron's first/last flags) into pt->megatron. */
static void best_megatron(struct lynx_partition *pt, bool any_memory)
{
	uint32_t p = pt->n_stages, L = pt->n_layers, *split = pt->megatron.layers;
	uint32_t *best = calloc(p, sizeof(*best));

	if (!best)
		return;
	for (uint32_t first = 1; first <= L; first++)
		for (uint32_t last = 1; first + last <= L; last++) {
			uint32_t rest = L - first - last;
			double t;

			if (p == 1 || (p == 2 && rest) ||
			    (p > 2 && (rest < p - 2 || rest % (p - 2))))
				continue;
			for (uint32_t s = 0; s < p; s++)
				split[s] = s == 0 ? first : s == p - 1 ? last : rest / (p - 2);
			t = predict(pt, split, any_memory);
			if (t < pt->megatron.predicted_s) {
				pt->megatron.predicted_s = t;
				memcpy(best, split, p * sizeof(*best));
			}
		}
	if (p == 1) {
		split[0] = L;
		pt->megatron.predicted_s = predict(pt, split, any_memory);
	} else {
		memcpy(split, best, p * sizeof(*best));
	}
	free(best);
}

/* Plans the whole job with split x->layers and replays it. Returns 0 or -ENOMEM. */
static int check_split(const struct lynx_model_desc *m, const struct lynx_cluster *c,
                       const struct lynx_problem_options *opt, const struct lynx_planner *pl,
                       struct lynx_partition_split *x)
{
	struct lynx_problem_options o = *opt;
	struct lynx_checker_result r;
	struct lynx_problem p;
	struct lynx_plan plan;
	char why[256];
	int err;

	if (x->predicted_s == INFINITY)
		return 0;
	o.stage_layers = x->layers;
	err = lynx_problem_from_model(m, c, &o, &p, why, sizeof(why));
	if (err)
		return err == -ENOMEM ? err : 0;
	err = pl->plan(&p, &plan, why, sizeof(why));
	if (!err) {
		err = lynx_checker_replay(&p, &plan, &r, why, sizeof(why));
		if (!err) {
			x->checked = true;
			x->checked_s = r.step_time_s;
			x->checked_fits = r.fits;
			lynx_checker_free(&r);
		}
		lynx_plan_free(&plan);
	}
	lynx_problem_free(&p);
	return err == -ENOMEM ? err : 0;
}

static int alloc_split(struct lynx_partition_split *x, uint32_t p)
{
	x->layers = calloc(p ? p : 1, sizeof(*x->layers));
	x->predicted_s = INFINITY;
	x->checked_s = NAN;
	return x->layers ? 0 : -ENOMEM;
}

static void copy_split(struct lynx_partition_split *to, const struct lynx_partition_split *from,
                       uint32_t p)
{
	uint32_t *layers = to->layers;

	*to = *from;
	to->layers = layers;
	memcpy(to->layers, from->layers, p * sizeof(*layers));
}

int lynx_partition_find(const struct lynx_model_desc *m, const struct lynx_cluster *c,
                        const struct lynx_problem_options *opt, const struct lynx_planner *pl,
                        struct lynx_partition *out, char *why, size_t len)
{
	static const struct lynx_problem_options defaults;
	struct lynx_problem_options o = opt ? *opt : defaults;
	double start = lynx_planner_now();
	bool any_memory = false;
	uint32_t p = m->pp, L = m->layers;
	int err;

	*out = (struct lynx_partition){0};
	o.stage_layers = NULL;
	if (!pl)
		pl = &lynx_planners[LYNX_PLANNER_HEU];
	out->n_stages = p;
	out->n_layers = L;
	out->micro_batches = lynx_model_micro_batches(m);
	out->budget_bytes = o.budget_bytes ? o.budget_bytes : c->gpu->mem_bytes;
	snprintf(out->planner, sizeof(out->planner), "%s", pl->name);
	out->costs = calloc((size_t)p * (L + 1) + 1, sizeof(*out->costs));
	err = out->costs ? 0 : -ENOMEM;
	err = err ? err : alloc_split(&out->best, p);
	err = err ? err : alloc_split(&out->dp, p);
	err = err ? err : alloc_split(&out->uniform, p);
	err = err ? err : alloc_split(&out->megatron, p);
	for (uint32_t s = 0; !err && s < p; s++)
		out->uniform.layers[s] = m->pp <= L ? L / p + (s < L % p) : 0;
	if (!err && (err = lynx_model_validate_split(m, out->uniform.layers, why, len)))
		goto out_free;
	for (uint32_t s = 0; !err && s < p; s++)
		for (uint32_t n = 1; !err && n + p - 1 <= L; n++) {
			err = evaluate(m, c, &o, pl, s, n, cost_at(out, s, n));
			out->evaluations++;
		}
	if (err)
		goto out_free;
	out->uniform.predicted_s = predict(out, out->uniform.layers, false);
	err = run_dp(out, false);
	if (!err && out->dp.predicted_s == INFINITY) {
		/* No split fits: the least time regardless of memory, and fits stays false. */
		any_memory = true;
		err = run_dp(out, true);
	}
	if (err)
		goto out_free;
	best_megatron(out, any_memory);
	err = check_split(m, c, &o, pl, &out->dp);
	err = err ? err : check_split(m, c, &o, pl, &out->uniform);
	err = err ? err : check_split(m, c, &o, pl, &out->megatron);
	if (err)
		goto out_free;
	out->kept_uniform = out->dp.checked && out->uniform.checked && out->uniform.checked_fits &&
	                    (!out->dp.checked_fits || out->uniform.checked_s < out->dp.checked_s);
	copy_split(&out->best, out->kept_uniform ? &out->uniform : &out->dp, p);
	out->fits = out->best.checked ? out->best.checked_fits : !any_memory;
	out->search_time_s = lynx_planner_now() - start;
	return 0;

out_free:
	lynx_partition_free(out);
	return err;
}

void lynx_partition_free(struct lynx_partition *pt)
{
	free(pt->best.layers);
	free(pt->dp.layers);
	free(pt->uniform.layers);
	free(pt->megatron.layers);
	free(pt->costs);
	*pt = (struct lynx_partition){0};
}

/* Appends printf-style text at *used in buf, never past len. */
static void append(char *buf, size_t len, size_t *used, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

static void append(char *buf, size_t len, size_t *used, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*used >= len)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf + *used, len - *used, fmt, ap);
	va_end(ap);
	*used += n > 0 ? (size_t)n : 0;
}

bool lynx_partition_megatron_flags(const uint32_t *layers, uint32_t n_stages, char *buf, size_t len)
{
	bool even_middle = true, uniform = true;
	size_t used = 0;

	if (len)
		buf[0] = '\0';
	for (uint32_t s = 1; s < n_stages; s++)
		uniform = uniform && layers[s] == layers[0];
	for (uint32_t s = 2; s + 1 < n_stages; s++)
		even_middle = even_middle && layers[s] == layers[1];
	append(buf, len, &used, "--pipeline-model-parallel-size %u", n_stages);
	if (uniform || n_stages < 2)
		return true;
	if (even_middle) {
		append(buf, len, &used,
		       " --decoder-first-pipeline-num-layers %u --decoder-last-pipeline-num-layers "
		       "%u",
		       layers[0], layers[n_stages - 1]);
		return true;
	}
	append(buf, len, &used, " --pipeline-model-parallel-layout \"");
	for (uint32_t s = 0; s < n_stages; s++)
		append(buf, len, &used, "%s%st*%u%s", s ? "|" : "", s == 0 ? "E" : "", layers[s],
		       s + 1 == n_stages ? ",L" : "");
	append(buf, len, &used, "\"");
	return false;
}
