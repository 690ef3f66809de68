/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lynx's heuristic planner (HEU): per stage, a Pareto set of policies for one representative
 * layer, then a multiple-choice knapsack over the stage's identical layers; the independent
 * checker confirms the result, and its numbers are the plan's prediction.
 *
 * 1. Units. The layer's groups that share the same ops are rebuilt together (the checker
 *    rebuilds dropped siblings with each other), so HEU decides per unit: keep, rebuild on
 *    demand, or rebuild in a window. Dropping part of a unit costs the same time as dropping
 *    all of it and saves less, so units are kept or dropped whole. The units of layer.def
 *    rerun disjoint ops, so times add up over units.
 * 2. Windows available to layer l of stage s, with the occurrence that serves micro-batch j:
 *    - TP_FWD of layer l and PP_RECV_FWD, in the forward that precedes j's backward under
 *      1F1B: only on stages with warm-up forwards, and not in the cool-down, so they serve
 *      max(m - warmup, 1) of m micro-batches (the rest fall back to on demand);
 *    - PP_RECV_BWD, just before j's backward;
 *    - TP_BWD of layer l + 1 (all of l's units) and of layer l itself at op o (units whose
 *      consumers come before o), in j's backward. The top layer has no layer l + 1: its
 *      decisions for those fall back to on demand (counted as (n - 1)/n served).
 *    A window's idle time is shared by everything assigned to its occurrence; PP windows are
 *    shared by the stage's n layers, so each layer gets 1/n of their idle time. A unit goes
 *    into window w only if each dropped dependency is in w or in a window that occurs before
 *    it (the checker would otherwise rebuild the dependency inside w as well).
 * 3. Cost of a policy, per layer and micro-batch: time = on-demand reruns + for each window,
 *    served · delay(work, idle) + (1 - served) · work, where delay is what the work adds to
 *    the window under the problem's interference (lynx_window_delay(): max(0, work - idle)
 *    without contention). A unit the executor cannot replay (its groups read a temporary:
 *    reads_freed) is offloaded when dropped (lynx_plan_lower()): it takes no window, and
 *    costs what the layer's offloaded bytes take to copy each way beyond the layer's forward
 *    (to the host) and backward (back), on the problem's host link. Memory: the k = inflight
 *    copies of the kept bytes, plus "held" bytes: what a forward-side window (TP_FWD,
 *    PP_RECV_*) rebuilds is resident at the stage's peak (the end of the forward before j's
 *    backward), once; what a TP_BWD window rebuilds is resident only after part of j's
 *    backward freed its activations, and is counted in the transient term (the dropped bytes
 *    of the layer, resident at the end of its forward).
 * 4. Pareto set: for each of the 2^units drop sets, the TP_BWD windows take what they can (no
 *    memory cost, never slower than on demand), then a greedy chain moves units to
 *    forward-side windows by time saved per byte held; every step is a candidate. The
 *    candidates not dominated in (peak-held bytes, transient bytes, time) remain.
 * 5. Knapsack: the layers are identical, so HEU picks two policies a and b and how many
 *    layers take a (the LP optimum of a multiple-choice knapsack over identical classes uses
 *    at most two, adjacent on the convex hull): O(n · P²). The stage's peak is estimated as
 *    planner.c's on-demand formula (larger transients in the earlier layers) plus the held
 *    bytes. Interleaved (v model chunks), a pass keeps a chunk's layers, and a stage holds
 *    its chunks' passes for different spans (find_moments()); the estimate either counts the
 *    passes in flight over v for every layer, or weighs each chunk by the passes it has in
 *    flight at each backward pass, the most of those moments. Both are planned (step 6).
 * 6. Confirmation. The estimate ignores pipeline timing (PP idle time is not exact) and
 *    counts held bytes conservatively, so HEU replays the plan in the checker; a stage whose
 *    replayed peak exceeds the budget is planned again with its budget lowered by the excess
 *    (up to 8 rounds). It also plans with on-demand policies only, replays that, and keeps
 *    the faster plan that fits (interleaved, with each of the two estimates: four plans).
 *    The plan's step time, peaks and fits are the checker's.
 * 7. Polish. Mixing two policies leaves the integer knapsack's slack unused, and the
 *    estimate is conservative, so the replayed peak may sit below the budget. HEU then keeps
 *    a unit rebuilt on demand in one layer, making room if needed by rebuilding other kept
 *    units of the stage (greedily, the cheapest per byte or the cheapest first): the move
 *    that saves the most rerun time and fits the slack, in the highest layer of those that
 *    save alike. A move stays only if the checker says the plan still fits and is faster (up
 *    to MAX_POLISH replays; a refused move is undone with the numbers it had, no replay
 *    spent, and its unit is not tried again in that layer's chunk). Without it HEU trailed
 *    the exact on-demand MILP (checkmate) by up to 0.004% on NVLink, where windows add little;
 *    with contention charged, windows there add nothing, and only shares down to a quarter and
 *    16 replays made HEU match it on every job of bench_policy (llama3-8b, a100-nvlink, at
 *    a quarter of the way from full's peak to none's had trailed it by 0.0016%). Then
 *    relocations (polish_swaps()): a kept unit given up in a lower layer for one rebuilt on
 *    demand in a higher layer that reruns no faster and holds no more, which the estimate
 *    cannot rank and the checker's step can (up to MAX_SWAPS replays, each tried once).
 * 8. Where keeping everything fits a stage, the stage keeps everything
 *    (keep_where_it_fits()); where the plan misses a stage's budget, the stage takes full
 *    recomputation's plan if the checker finds that lower (floor_at_full()).
 *
 * Search time: 2^10 drop sets · a few chain steps, a Pareto filter and the knapsack: about a
 * millisecond per stage on the GPT presets, plus the checker's replays.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checker.h"
#include "planner.h"
#include "units.h"

#define MAX_UNITS LYNX_PROBLEM_MAX_GROUPS
#define MAX_WINDOWS 24
#define MAX_ROUNDS 8
/* Checker replays the polish may spend: each is a fraction of a millisecond (a 48-layer
 * stage's search stays within bench_policy's 10 ms). */
#define MAX_POLISH 16
/* Checker replays the polish's relocations may spend after its moves (polish_swaps()). */
#define MAX_SWAPS 16
#define KEEP (-1)
#define ON_DEMAND (-2)

/* Groups rebuilt by the same ops. */
/* A window as the representative layer sees it. */
struct lwin {
	enum lynx_window_kind kind;
	int32_t op;        /* TP windows: the op; -1 for PP */
	bool next_layer;   /* TP_BWD of layer l + 1 */
	int key;           /* order of occurrence for one micro-batch */
	double idle_s;     /* per layer */
	double served;     /* share of micro-batches it serves */
	bool held;         /* its rebuilds are resident at the stage's peak */
	int32_t min_after; /* TP_BWD of the layer itself: units must be consumed before this op */
};

struct policy {
	uint64_t kept, held, transient;
	uint64_t scratch; /* the most scratch one of the groups it rebuilds takes (problem.h) */
	double time_s;
	int8_t choice[MAX_UNITS]; /* KEEP, ON_DEMAND or a window of struct heu_layer */
};

/* Interleaved stages: the model chunks and distinct moments the estimate tracks, at most. */
#define MAX_CHUNKS 16
#define MAX_MOMENTS 32

/* At a backward pass's start: the passes of each chunk in flight, and the running chunk. */
struct moment {
	uint16_t held[MAX_CHUNKS];
	uint16_t running;
};

struct heu_layer {
	uint32_t n_units, n_wins;
	struct lynx_unit units[MAX_UNITS];
	struct lwin wins[MAX_WINDOWS];
	uint64_t input_bytes; /* groups that cannot be rebuilt: always kept */
	/* The problem planned: its interference (how a window's rebuilds and its transfer slow
	 * each other), host link and layer times. */
	const struct lynx_problem *p;
	/*
	 * Units (bit u) whose groups the executor cannot replay (reads_freed): dropping one
	 * offloads it (lynx_plan_lower()), so it costs copies, not reruns, and takes no window.
	 * The copies of one layer's offloaded bytes hide behind its forward (to the host) and
	 * the backward of the layer above it (back), on the problem's host link.
	 */
	uint32_t offloaded;
	struct policy *pol;
	size_t n_pol, cap_pol;
	size_t *hull, n_hull; /* knapsack(): indices into pol */
	/* Interleaved (find_moments()): the distinct moments where the stage can peak; none
	 * when not interleaved, or beyond MAX_CHUNKS or MAX_MOMENTS (the uniform estimate). */
	uint32_t n_moments;
	struct moment moments[MAX_MOMENTS];
};

/*
 * Interleaved 1F1B holds a chunk's passes for different spans: on the first stage, with
 * p = 4 and v = 2, the first backward finds 7 passes of chunk 0 in flight and 4 of chunk 1.
 * So what a layer keeps weighs by its chunk. Walks stage s's schedule and records each
 * distinct moment a backward pass starts.
 */
static void find_moments(const struct lynx_problem *p, uint32_t s, struct heu_layer *h)
{
	const uint32_t v = lynx_problem_chunks(p);
	struct moment now = {{0}, 0};

	h->n_moments = 0;
	if (v == 1 || v > MAX_CHUNKS)
		return;
	for (uint32_t a = 0; a < 2 * p->micro_batches * v; a++) {
		struct lynx_pass x = lynx_problem_pass(p, s, a);
		bool seen = false;

		if (x.forward) {
			now.held[x.chunk]++;
			continue;
		}
		now.running = (uint16_t)x.chunk;
		for (uint32_t i = 0; i < h->n_moments && !seen; i++)
			seen = !memcmp(&h->moments[i], &now, sizeof(now));
		if (!seen && h->n_moments == MAX_MOMENTS) {
			h->n_moments = 0; /* too many to track: the uniform estimate */
			return;
		}
		if (!seen)
			h->moments[h->n_moments++] = now;
		now.held[x.chunk]--;
	}
}

/* HEU keeps the units in its per-layer state, next to its windows and policies. */
static void find_units(struct heu_layer *h)
{
	const struct lynx_problem_layer *L = &h->p->layer;
	bool host_link = h->p->d2h.busbw > 0 && h->p->h2d.busbw > 0;
	struct lynx_layer_units lu;

	lynx_layer_units_find(L, &lu);
	memcpy(h->units, lu.units, lu.n_units * sizeof(lu.units[0]));
	h->n_units = lu.n_units;
	for (uint32_t u = 0; u < lu.n_units; u++) {
		bool freed = true;

		for (uint32_t g = 0; g < L->n_groups; g++)
			if (lu.units[u].groups & (1u << g))
				freed = freed && L->groups[g].reads_freed;
		if (freed && host_link)
			h->offloaded |= 1u << u;
	}
	h->input_bytes += lu.input_bytes;
}

static void add_win(struct heu_layer *h, struct lwin w)
{
	if (h->n_wins < MAX_WINDOWS && w.idle_s > 0 && w.served > 0)
		h->wins[h->n_wins++] = w;
}

/* The windows of stage st that can serve its representative layer (see the top comment). */
static void find_windows(const struct lynx_problem *p, const struct lynx_problem_stage *st,
                         struct heu_layer *h)
{
	const struct lynx_problem_layer *L = &p->layer;
	uint32_t n = st->layers, m = p->micro_batches, ops = L->n_ops;
	double fwd_served = 0;

	if (st->warmup >= 1)
		fwd_served = (double)(m > st->warmup ? m - st->warmup : 1) / m;
	add_win(h, (struct lwin){.kind = LYNX_WINDOW_PP_RECV_FWD,
	                         .op = -1,
	                         .key = 0,
	                         .idle_s = st->recv_fwd_s / n,
	                         .served = fwd_served,
	                         .held = true,
	                         .min_after = -1});
	for (uint32_t op = 0; op < ops; op++)
		add_win(h, (struct lwin){.kind = LYNX_WINDOW_TP_FWD,
		                         .op = (int32_t)op,
		                         .key = 1 + (int)op,
		                         .idle_s = L->ops[op].wait_fwd_s,
		                         .served = fwd_served,
		                         .held = true,
		                         .min_after = -1});
	add_win(h, (struct lwin){.kind = LYNX_WINDOW_PP_RECV_BWD,
	                         .op = -1,
	                         .key = 1 + (int)ops,
	                         .idle_s = st->recv_bwd_s / n,
	                         .served = 1,
	                         .held = true,
	                         .min_after = -1});
	for (uint32_t op = ops; op-- > 0;)
		add_win(h, (struct lwin){.kind = LYNX_WINDOW_TP_BWD,
		                         .op = (int32_t)op,
		                         .next_layer = true,
		                         .key = 2 + (int)(2 * ops - 1 - op),
		                         .idle_s = L->ops[op].wait_bwd_s,
		                         .served = (double)(n - 1) / n,
		                         .min_after = -1});
	for (uint32_t op = ops; op-- > 0;)
		add_win(h, (struct lwin){.kind = LYNX_WINDOW_TP_BWD,
		                         .op = (int32_t)op,
		                         .key = 2 + (int)(3 * ops - 1 - op),
		                         .idle_s = L->ops[op].wait_bwd_s,
		                         .served = 1,
		                         .min_after = (int32_t)op});
}

/* Whether unit u may be rebuilt in window w, given the other units' choices. */
static bool fits_window(const struct heu_layer *h, const int8_t *choice, uint32_t u, uint32_t w)
{
	const struct lwin *win = &h->wins[w];

	if (win->min_after >= 0 && h->units[u].max_consumer >= win->min_after)
		return false;
	for (uint32_t d = 0; d < h->n_units; d++) {
		if (!(h->units[u].deps & (1u << d)) || choice[d] == KEEP)
			continue;
		if (choice[d] == ON_DEMAND || h->wins[choice[d]].key > win->key)
			return false;
	}
	return true;
}

/* The stall of offloading `bytes` in `copies` copies per layer and micro-batch: each way, what
 * its copies take beyond the compute they hide behind. */
static double offload_stall(const struct heu_layer *h, uint64_t bytes, uint32_t copies)
{
	const struct lynx_problem *p = h->p;
	double out, back;

	if (!bytes)
		return 0;
	out = copies * p->d2h.latency_s + (double)bytes / p->d2h.busbw - p->layer.fwd_s;
	back = copies * p->h2d.latency_s + (double)bytes / p->h2d.busbw - p->layer.bwd_s;
	return (out > 0 ? out : 0) + (back > 0 ? back : 0);
}

/* Time and memory of the policy whose choices are set. */
static void evaluate(const struct heu_layer *h, struct policy *pol)
{
	double work[MAX_WINDOWS] = {0};
	uint64_t offloaded = 0;
	uint32_t copies = 0;

	pol->kept = h->input_bytes;
	pol->held = pol->transient = pol->scratch = 0;
	pol->time_s = 0;
	for (uint32_t u = 0; u < h->n_units; u++) {
		int c = pol->choice[u];

		if (c == KEEP) {
			pol->kept += h->units[u].bytes;
			continue;
		}
		pol->transient += h->units[u].bytes;
		if (h->offloaded & (1u << u)) {
			offloaded += h->units[u].bytes;
			copies += (uint32_t)__builtin_popcount(h->units[u].groups);
			continue;
		}
		for (uint32_t g = 0; g < h->p->layer.n_groups; g++)
			if ((h->units[u].groups & (1u << g)) &&
			    h->p->layer.groups[g].scratch_bytes > pol->scratch)
				pol->scratch = h->p->layer.groups[g].scratch_bytes;
		if (c == ON_DEMAND) {
			pol->time_s += h->units[u].rerun_s;
			continue;
		}
		work[c] += h->units[u].rerun_s;
		if (h->wins[c].held)
			pol->held += h->units[u].bytes;
	}
	pol->time_s += offload_stall(h, offloaded, copies);
	for (uint32_t w = 0; w < h->n_wins; w++) {
		double over = lynx_window_delay(&h->p->interference, work[w], h->wins[w].idle_s);

		pol->time_s += h->wins[w].served * over + (1 - h->wins[w].served) * work[w];
	}
}

static int push_policy(struct heu_layer *h, const struct policy *pol)
{
	if (h->n_pol == h->cap_pol) {
		size_t cap = h->cap_pol ? 2 * h->cap_pol : 4096;
		struct policy *np = realloc(h->pol, cap * sizeof(*np));

		if (!np)
			return -ENOMEM;
		h->pol = np;
		h->cap_pol = cap;
	}
	h->pol[h->n_pol++] = *pol;
	return 0;
}

/* The rerun time assigned to each window by pol's choices. */
static void window_work(const struct heu_layer *h, const struct policy *pol, double *work)
{
	memset(work, 0, h->n_wins * sizeof(*work));
	for (uint32_t u = 0; u < h->n_units; u++)
		if (pol->choice[u] >= 0)
			work[pol->choice[u]] += h->units[u].rerun_s;
}

/* The time saved by moving an on-demand rerun of r seconds into window w holding `work`. */
static double saving(const struct heu_layer *h, const struct lwin *w, double work, double r)
{
	double before = lynx_window_delay(&h->p->interference, work, w->idle_s);
	double after = lynx_window_delay(&h->p->interference, work + r, w->idle_s);

	return r - w->served * (after - before) - (1 - w->served) * r;
}

/*
 * The candidates of drop set `drop`: TP_BWD windows first, then a greedy chain into
 * forward-side windows, by time saved per byte held. windows false: on demand only.
 */
static int candidates(struct heu_layer *h, uint32_t drop, bool windows)
{
	struct policy pol = {0};
	double work[MAX_WINDOWS];
	int err;

	for (uint32_t u = 0; u < h->n_units; u++)
		pol.choice[u] = drop & (1u << u) ? ON_DEMAND : KEEP;
	window_work(h, &pol, work);
	for (uint32_t u = 0; windows && u < h->n_units; u++) {
		int best = -1;
		double best_gain = 0;

		if (!(drop & (1u << u)) || (h->offloaded & (1u << u)))
			continue;
		for (uint32_t w = 0; w < h->n_wins; w++) {
			double gain;

			if (h->wins[w].held || !fits_window(h, pol.choice, u, w))
				continue;
			gain = saving(h, &h->wins[w], work[w], h->units[u].rerun_s);
			if (gain > best_gain) {
				best = (int)w;
				best_gain = gain;
			}
		}
		if (best >= 0) {
			pol.choice[u] = (int8_t)best;
			work[best] += h->units[u].rerun_s;
		}
	}
	evaluate(h, &pol);
	err = push_policy(h, &pol);
	while (!err && windows) {
		int bu = -1, bw = -1;
		double best = 0;

		for (uint32_t u = 0; u < h->n_units; u++) {
			if (pol.choice[u] != ON_DEMAND || (h->offloaded & (1u << u)))
				continue;
			for (uint32_t w = 0; w < h->n_wins; w++) {
				double gain;

				if (!h->wins[w].held || !fits_window(h, pol.choice, u, w))
					continue;
				gain = saving(h, &h->wins[w], work[w], h->units[u].rerun_s) /
				       (double)(h->units[u].bytes + 1);
				if (gain > best) {
					best = gain;
					bu = (int)u;
					bw = (int)w;
				}
			}
		}
		if (bu < 0)
			break;
		pol.choice[bu] = (int8_t)bw;
		work[bw] += h->units[bu].rerun_s;
		evaluate(h, &pol);
		err = push_policy(h, &pol);
	}
	return err;
}

static int by_time(const void *a, const void *b)
{
	const struct policy *x = a, *y = b;

	if (x->time_s != y->time_s)
		return x->time_s < y->time_s ? -1 : 1;
	if (x->kept != y->kept)
		return x->kept < y->kept ? -1 : 1;
	return (x->held > y->held) - (x->held < y->held);
}

/*
 * Keeps the policies no other beats in time, kept, held and transient bytes. The policies
 * are sorted by time, so a policy is dominated only by one already kept. O(N · P).
 */
static void pareto(struct heu_layer *h)
{
	size_t kept = 0;

	qsort(h->pol, h->n_pol, sizeof(*h->pol), by_time);
	for (size_t i = 0; i < h->n_pol; i++) {
		const struct policy *x = &h->pol[i];
		bool dominated = false;

		for (size_t k = 0; k < kept && !dominated; k++)
			dominated = h->pol[k].kept <= x->kept && h->pol[k].held <= x->held &&
			            h->pol[k].transient + h->pol[k].scratch <=
			                    x->transient + x->scratch;
		if (!dominated)
			h->pol[kept++] = *x;
	}
	h->n_pol = kept;
}

/*
 * The stage's estimated peak with c layers of policy a first, then n - c of b. Interleaved
 * (v model chunks), the passes in flight other than the one running each keep 1/v of a
 * micro-batch's kept bytes, and the running one holds at most a chunk of one policy.
 */
static uint64_t estimate_peak(const struct heu_layer *h, const struct lynx_problem_stage *st,
                              const struct policy *a, const struct policy *b, uint32_t c)
{
	uint32_t n = st->layers, v = lynx_problem_chunks(h->p);
	uint64_t emb = st->embedding.present ? st->embedding.act_bytes : 0;
	uint64_t head = st->head.present ? st->head.act_bytes : 0;
	uint64_t kept = c * a->kept + (n - c) * b->kept, held = c * a->held + (n - c) * b->held;
	uint64_t worst = kept + head;

	if (v > 1 && h->n_moments) {
		uint64_t most = 0;

		/* Policy a's layers come first. */
		for (uint32_t i = 0; i < h->n_moments; i++) {
			const struct moment *mo = &h->moments[i];
			uint64_t at = st->static_bytes + (uint64_t)st->inflight * emb + held;

			for (uint32_t k = 0, lo, hi; k < v; k++) {
				lynx_problem_chunk_layers(h->p, st->index, k, &lo, &hi);
				uint32_t na = c <= lo   ? 0
				              : c >= hi ? hi - lo
				                        : c - lo,
				         nb = hi - lo - na;
				uint64_t chunk = na * a->kept + nb * b->kept;

				if (k != mo->running) {
					at += mo->held[k] * chunk;
					continue;
				}
				uint64_t run = chunk + (k == v - 1 ? head : 0);
				if (na && na * a->kept + a->transient + a->scratch > run)
					run = na * a->kept + a->transient + a->scratch;
				if (nb && chunk + b->transient + b->scratch > run)
					run = chunk + b->transient + b->scratch;
				at += (mo->held[k] - 1ull) * chunk + run;
			}
			most = at > most ? at : most;
		}
		return most;
	}
	if (v > 1) {
		uint32_t first, per; /* chunk 0: layers [0, per) */
		lynx_problem_chunk_layers(h->p, st->index, 0, &first, &per);
		uint64_t chunk = (c < per ? c : per) * a->kept + (c < per ? per - c : 0) * b->kept;

		worst = (kept + v - 1) / v + head;
		if (c > 0 && chunk + a->transient + a->scratch > worst)
			worst = chunk + a->transient + a->scratch;
		if (c < n && per * b->kept + b->transient + b->scratch > worst)
			worst = per * b->kept + b->transient + b->scratch;
		return st->static_bytes + (uint64_t)st->inflight * emb +
		       (uint64_t)(st->passes_inflight - 1) * ((kept + v - 1) / v) + worst + held;
	}

	/* At the end of a layer's forward: the layers below it, its kept and dropped bytes (and
	 * as its backward rebuilds them, a rebuild's scratch). */
	if (c > 0 && c * a->kept + a->transient + a->scratch > worst)
		worst = c * a->kept + a->transient + a->scratch;
	if (c < n && kept + b->transient + b->scratch > worst)
		worst = kept + b->transient + b->scratch;
	return st->static_bytes + (uint64_t)st->inflight * emb +
	       (uint64_t)(st->inflight - 1) * kept + worst + held;
}

/* The stage's choice: c layers of policy a, then b. */
struct pick {
	size_t a, b;
	uint32_t c;
	double time_s;
	uint64_t peak;
};

/* What policy x adds to the stage's peak per layer, transients aside. */
static uint64_t weight(const struct heu_layer *h, const struct lynx_problem_stage *st,
                       const struct policy *x)
{
	return (uint64_t)(lynx_problem_held_micro_batches(h->p, st->index) * (double)x->kept) +
	       x->held;
}

/*
 * The lower convex hull of the policies in (weight, time), fastest first, into hull; returns
 * its size. The policies are sorted by time, so a monotone chain over them does: O(P).
 */
static size_t lower_hull(const struct lynx_problem_stage *st, const struct heu_layer *h,
                         size_t *hull)
{
	size_t n = 0;

	for (size_t i = 0; i < h->n_pol; i++) {
		double wi = (double)weight(h, st, &h->pol[i]), ti = h->pol[i].time_s;

		if (n && weight(h, st, &h->pol[hull[n - 1]]) <= weight(h, st, &h->pol[i]))
			continue; /* slower and no lighter: above the hull */
		while (n >= 2) {
			const struct policy *a = &h->pol[hull[n - 2]], *b = &h->pol[hull[n - 1]];
			double wa = (double)weight(h, st, a), wb = (double)weight(h, st, b);

			/* b lies on or above the segment a-i: drop it. */
			if ((b->time_s - a->time_s) * (wa - wi) >= (ti - a->time_s) * (wa - wb))
				n--;
			else
				break;
		}
		hull[n++] = i;
	}
	return n;
}

/*
 * The multiple-choice knapsack over the stage's identical layers: c layers take policy a,
 * the others b, where b is on the lower convex hull of (weight, time) (an LP optimum mixes two
 * adjacent hull points; any a lets the integer solution round better). The least time whose
 * estimated peak is within budget, or the least peak if none is. O(n · P · hull).
 */
static struct pick knapsack(const struct lynx_problem_stage *st, const struct heu_layer *h,
                            const size_t *hull, size_t n_hull, uint64_t budget)
{
	struct pick best = {.time_s = INFINITY, .peak = UINT64_MAX}, low = best;
	uint32_t n = st->layers;

	for (size_t i = 0; i < h->n_pol; i++) {
		for (size_t k = 0; k < n_hull; k++) {
			/* The policy with the larger transient goes first. */
			size_t a = h->pol[i].transient >= h->pol[hull[k]].transient ? i : hull[k];
			size_t b = a == i ? hull[k] : i;

			for (uint32_t c = (a == b ? n : 0); c <= n; c++) {
				uint64_t peak = estimate_peak(h, st, &h->pol[a], &h->pol[b], c);
				double t = c * h->pol[a].time_s + (n - c) * h->pol[b].time_s;

				if (peak < low.peak || (peak == low.peak && t < low.time_s))
					low = (struct pick){a, b, c, t, peak};
				if (peak <= budget &&
				    (t < best.time_s || (t == best.time_s && peak < best.peak)))
					best = (struct pick){a, b, c, t, peak};
			}
		}
	}
	return best.time_s < INFINITY ? best : low;
}

/* The stage window index of h's window w for layer l, or -1 (fall back to on demand). */
static int stage_window(const struct lynx_problem_stage *st, const struct lwin *w, uint32_t l)
{
	if (w->kind == LYNX_WINDOW_PP_RECV_FWD || w->kind == LYNX_WINDOW_PP_RECV_BWD)
		return lynx_problem_find_window(st, w->kind, -1, -1);
	if (w->next_layer && l + 1 >= st->layers)
		return -1;
	return lynx_problem_find_window(st, w->kind, (int32_t)(l + (w->next_layer ? 1 : 0)), w->op);
}

/* Writes policy pol into layer l of stage s. */
static void write_layer(const struct lynx_problem *p, const struct heu_layer *h,
                        const struct policy *pol, struct lynx_plan *plan, uint32_t s, uint32_t l)
{
	for (uint32_t u = 0; u < h->n_units; u++) {
		int c = pol->choice[u],
		    w = c >= 0 ? stage_window(&p->stages[s], &h->wins[c], l) : -1;

		for (uint32_t g = 0; g < p->layer.n_groups; g++) {
			struct lynx_decision *d;

			if (!(h->units[u].groups & (1u << g)))
				continue;
			d = lynx_plan_decision(plan, s, l, g);
			if (c == KEEP)
				*d = (struct lynx_decision){.action = LYNX_ACTION_KEEP};
			else if (w < 0)
				*d = (struct lynx_decision){
				        .action = LYNX_ACTION_RECOMPUTE_ON_DEMAND};
			else
				*d = (struct lynx_decision){.action =
				                                    LYNX_ACTION_RECOMPUTE_IN_WINDOW,
				                            .window = (uint32_t)w};
		}
	}
}

/* Plans stage s within `budget` into plan, with the candidates of h (built for s). */
static void plan_stage(const struct lynx_problem *p, const struct heu_layer *h,
                       struct lynx_plan *plan, uint32_t s, uint64_t budget)
{
	const struct lynx_problem_stage *st = &p->stages[s];
	struct pick pk = knapsack(st, h, h->hull, h->n_hull, budget);

	for (uint32_t l = 0; l < st->layers; l++)
		write_layer(p, h, &h->pol[l < pk.c ? pk.a : pk.b], plan, s, l);
	plan->stages[s].peak_bytes = pk.peak;
}

/* The Pareto set of stage s's representative layer; by_chunk: the interleaved estimate weighs
 * each chunk's layers by the passes it holds (find_moments()), else all alike. */
static int build_layer(const struct lynx_problem *p, uint32_t s, bool windows, bool by_chunk,
                       struct heu_layer *h)
{
	int err = 0;

	memset(h, 0, sizeof(*h));
	h->p = p;
	find_units(h);
	if (by_chunk)
		find_moments(p, s, h);
	if (windows)
		find_windows(p, &p->stages[s], h);
	for (uint32_t drop = 0; !err && drop < (1u << h->n_units); drop++)
		err = candidates(h, drop, windows);
	if (!err)
		pareto(h);
	h->hull = err ? NULL : malloc(h->n_pol * sizeof(*h->hull));
	if (!err && !h->hull)
		err = -ENOMEM;
	if (!err)
		h->n_hull = lower_hull(&p->stages[s], h, h->hull);
	return err;
}

/*
 * Plans every stage, replays the plan in the checker and lowers the budget of any stage that
 * overflows, until all fit or MAX_ROUNDS. Fills plan's predictions from the checker.
 */
static int plan_all(const struct lynx_problem *p, bool windows, bool by_chunk,
                    struct lynx_plan *plan, char *why, size_t len)
{
	struct heu_layer *h = calloc(p->n_stages, sizeof(*h));
	uint64_t *budget = calloc(p->n_stages, sizeof(*budget));
	bool *redo = calloc(p->n_stages, sizeof(*redo));
	int err = h && budget && redo ? lynx_plan_init(plan, p, "heu", false) : -ENOMEM;

	for (uint32_t s = 0; !err && s < p->n_stages; s++) {
		budget[s] = lynx_problem_stage_budget(p, s);
		err = build_layer(p, s, windows, by_chunk, &h[s]);
		if (!err)
			plan_stage(p, &h[s], plan, s, budget[s]);
	}
	for (int round = 0; !err && round < MAX_ROUNDS; round++) {
		bool again;

		err = lynx_checker_settle(p, plan, round + 1 < MAX_ROUNDS, budget, redo, &again,
		                          why, len);
		if (err || !again)
			break;
		for (uint32_t s = 0; s < p->n_stages; s++)
			if (redo[s])
				plan_stage(p, &h[s], plan, s, budget[s]);
	}
	for (uint32_t s = 0; h && s < p->n_stages; s++) {
		free(h[s].pol);
		free(h[s].hull);
	}
	free(h);
	free(budget);
	free(redo);
	if (err && plan->stages)
		lynx_plan_free(plan);
	return err;
}

/* A stage whose layers all have the same row (no layer-specific window) becomes uniform. */
static void compact(const struct lynx_problem *p, struct lynx_plan *plan)
{
	for (uint32_t s = 0; s < p->n_stages; s++) {
		struct lynx_plan_stage *ps = &plan->stages[s];
		bool same = true;

		for (uint32_t l = 1; l < ps->layers && same; l++)
			same = !memcmp(ps->rows[l], ps->rows[0], sizeof(ps->rows[0]));
		ps->uniform = same;
	}
}

/* Whether every group of unit u in layer l of stage s has this action. */
static bool unit_is(const struct lynx_plan *plan, const struct lynx_unit *u, uint32_t s, uint32_t l,
                    uint32_t n_groups, enum lynx_action action)
{
	for (uint32_t g = 0; g < n_groups; g++)
		if ((u->groups & (1u << g)) && lynx_plan_get(plan, s, l, g)->action != action)
			return false;
	return true;
}

static void set_unit(struct lynx_plan *plan, const struct lynx_unit *u, uint32_t s, uint32_t l,
                     uint32_t n_groups, enum lynx_action action)
{
	for (uint32_t g = 0; g < n_groups; g++)
		if (u->groups & (1u << g))
			*lynx_plan_decision(plan, s, l, g) =
			        (struct lynx_decision){.action = action};
}

/* Units rebuilt to make room for a polish move, at most. */
#define MAX_DROPS 8
/* A polish move in one stage: keep unit `keep` of layer kl (rebuilt on demand) and, to make
 * room, rebuild on demand the kept units drop[i] of layers dl[i]. */
struct move {
	uint32_t s, kl, keep;
	uint32_t n_drops, dl[MAX_DROPS], drop[MAX_DROPS];
	double gain; /* rerun time saved per micro-batch */
};

/* A kept unit that could make room: what rebuilding it costs, in all and per byte freed. */
struct room {
	uint32_t l, u;
	double rerun_s, per_byte;
};

static int by_cost_per_byte(const void *a, const void *b)
{
	double x = ((const struct room *)a)->per_byte, y = ((const struct room *)b)->per_byte;

	return x < y ? -1 : x > y;
}

static int by_cost(const void *a, const void *b)
{
	double x = ((const struct room *)a)->rerun_s, y = ((const struct room *)b)->rerun_s;

	return x < y ? -1 : x > y;
}

/* Orders in which the greedy takes room: the cheapest per byte, or the cheapest at all (a
 * few small units may free what one large one would, for less). */
static int (*const room_orders[])(const void *, const void *) = {by_cost_per_byte, by_cost};

/*
 * What keeping a unit in one more layer adds to the stage's peak, by the estimate: its bytes
 * in each in-flight micro-batch (share 1), of which not all are resident at the peak. When
 * no move fits by that, the polish tries more optimistic shares in turn: the checker decides,
 * and a move it refuses is not tried again.
 */
static const double need_shares[] = {1.0, 0.9, 0.75, 0.5, 0.25};

/* What the polish knows of one stage while it searches: the plan's kept units that could make
 * room (rooms, space for the stage's layers times units), and tried[l], the units of layer l
 * whose moves the checker refused. */
struct stage_search {
	const struct lynx_problem *p;
	const struct lynx_layer_units *lu;
	uint32_t s;
	const uint32_t *tried;
	struct room *rooms;
	uint32_t n_rooms;
	uint64_t slack; /* the budget less the plan's replayed peak */
};

/* Fills ss's rooms and slack from the plan's stage ss->s. */
static void find_rooms(struct stage_search *ss, const struct lynx_plan *plan)
{
	const struct lynx_problem *p = ss->p;
	uint64_t peak = plan->stages[ss->s].peak_bytes,
	         budget = lynx_problem_stage_budget(p, ss->s);

	ss->slack = budget > peak ? budget - peak : 0;
	ss->n_rooms = 0;
	for (uint32_t l = 0; l < p->stages[ss->s].layers; l++)
		for (uint32_t u = 0; u < ss->lu->n_units; u++) {
			const struct lynx_unit *unit = &ss->lu->units[u];
			if (unit->bytes &&
			    unit_is(plan, unit, ss->s, l, p->layer.n_groups, LYNX_ACTION_KEEP))
				ss->rooms[ss->n_rooms++] = (struct room){
				        l, u, unit->rerun_s, unit->rerun_s / (double)unit->bytes};
		}
}

/*
 * Completes move m, whose keep is set and m->gain its rerun time, with the drops that make
 * room for it from ss's rooms in their current order (never the same unit elsewhere: that
 * frees only what keeping takes), at `share` of the kept bytes' estimate. Becomes *best if it
 * fits that way and gains more.
 */
static void complete_move(const struct stage_search *ss, double share, struct move m,
                          struct move *best)
{
	const double held = lynx_problem_held_micro_batches(ss->p, ss->s);
	uint64_t freed = 0, need = (uint64_t)(held * (double)ss->lu->units[m.keep].bytes * share);

	for (uint32_t r = 0; need > ss->slack + freed && r < ss->n_rooms; r++) {
		if (ss->rooms[r].u == m.keep)
			continue;
		if (m.n_drops == MAX_DROPS || m.gain <= best->gain)
			break;
		m.dl[m.n_drops] = ss->rooms[r].l;
		m.drop[m.n_drops++] = ss->rooms[r].u;
		freed += (uint64_t)(held * (double)ss->lu->units[ss->rooms[r].u].bytes);
		m.gain -= ss->rooms[r].rerun_s;
	}
	if (need <= ss->slack + freed && m.gain > best->gain)
		*best = m;
}

/* Whether unit k of layer l is rebuilt on demand, and no move of it was refused there. */
static bool keepable(const struct stage_search *ss, const struct lynx_plan *plan, uint32_t l,
                     uint32_t k)
{
	return !(ss->tried[l] & (1u << k)) &&
	       unit_is(plan, &ss->lu->units[k], ss->s, l, ss->p->layer.n_groups,
	               LYNX_ACTION_RECOMPUTE_ON_DEMAND);
}

/*
 * The move of stage ss->s with the largest gain that fits its slack at `share`: keep one unit
 * rebuilt on demand, making room greedily from the stage's other kept units in each of
 * room_orders. Of moves with the same gain (the same unit kept in any layer saves the same
 * rerun time), the one in the highest layer wins, where the checker is likelier to find room:
 * its backward comes first and gives its activations back first, and under interleaved 1F1B
 * the later chunks hold fewer passes in flight (on gpt-13b's first stage with two virtual
 * stages, 7 of chunk 0 and 4 of chunk 1). Each refused move costs a checker replay, of
 * MAX_POLISH: in the other order the polish spent all of them there on the first chunk's
 * layers, every one refused, where the second chunk's fit.
 */
static void best_move(struct stage_search *ss, const struct lynx_plan *plan, double share,
                      struct move *best)
{
	const uint32_t layers = ss->p->stages[ss->s].layers;

	for (size_t order = 0; order < sizeof(room_orders) / sizeof(room_orders[0]); order++) {
		qsort(ss->rooms, ss->n_rooms, sizeof(*ss->rooms), room_orders[order]);
		for (uint32_t kl = layers; kl-- > 0;)
			for (uint32_t k = 0; k < ss->lu->n_units; k++)
				if (keepable(ss, plan, kl, k))
					complete_move(
					        ss, share,
					        (struct move){.s = ss->s,
					                      .kl = kl,
					                      .keep = k,
					                      .gain = ss->lu->units[k].rerun_s},
					        best);
	}
}

static void apply_move(struct lynx_plan *plan, const struct lynx_layer_units *lu,
                       const struct move *m, uint32_t n_groups, bool undo)
{
	set_unit(plan, &lu->units[m->keep], m->s, m->kl, n_groups,
	         undo ? LYNX_ACTION_RECOMPUTE_ON_DEMAND : LYNX_ACTION_KEEP);
	for (uint32_t i = 0; i < m->n_drops; i++)
		set_unit(plan, &lu->units[m->drop[i]], m->s, m->dl[i], n_groups,
		         undo ? LYNX_ACTION_KEEP : LYNX_ACTION_RECOMPUTE_ON_DEMAND);
}

/*
 * A move the checker refused: its unit is not tried again in its layer's chunk (the stage,
 * without virtual stages). The chunk's lower layers hold at least what the refused one did at
 * the stage's peak (best_move() tries the top layer first), and a move there makes room with
 * the same drops: on gpt-13b with two virtual stages, the five layers of a chunk gave the
 * checker the same peak, a replay each.
 */
static void refused(const struct lynx_problem *p, const struct move *m, uint32_t *tried)
{
	const uint32_t v = lynx_problem_chunks(p), per = p->stages[m->s].layers / v;
	uint32_t first, end;

	/* The last chunk holds the rest (lynx_problem_chunk_layers()). */
	lynx_problem_chunk_layers(p, m->s, m->kl / per < v ? m->kl / per : v - 1, &first, &end);
	for (uint32_t l = first; l < end; l++)
		tried[l] |= 1u << m->keep;
}

/* The polish's per-layer marks are bitmasks over a layer's units. */
_Static_assert(LYNX_PROBLEM_MAX_GROUPS <= 32, "tried[] holds one bit per unit");

/* The best move over every stage at the first share where one fits; m->gain stays 0 when
 * there is none. */
static void find_move(const struct lynx_problem *p, const struct lynx_plan *plan,
                      struct stage_search *search, struct move *m)
{
	for (uint32_t s = 0; s < p->n_stages; s++)
		find_rooms(&search[s], plan);
	for (size_t k = 0; k < sizeof(need_shares) / sizeof(need_shares[0]) && m->gain <= 0; k++)
		for (uint32_t s = 0; s < p->n_stages; s++)
			best_move(&search[s], plan, need_shares[k], m);
}

/*
 * Applies move m to plan and replays it: it stays (*kept) where the checker finds the plan
 * within its budget and faster. Otherwise it is undone, and so are the plan's numbers (the
 * lowering the settle did is undone with it), from peaks (space for every stage), so no
 * replay is spent on that.
 */
static int try_move(const struct lynx_problem *p, const struct lynx_layer_units *lu,
                    const struct move *m, uint64_t *peaks, struct lynx_plan *plan, bool *kept,
                    char *why, size_t len)
{
	double before = plan->step_time_s;
	bool again;
	int err;

	for (uint32_t s = 0; s < p->n_stages; s++)
		peaks[s] = plan->stages[s].peak_bytes;
	apply_move(plan, lu, m, p->layer.n_groups, false);
	err = lynx_checker_settle(p, plan, false, NULL, NULL, &again, why, len);
	*kept = !err && plan->fits && plan->step_time_s < before;
	if (!err && !*kept) {
		apply_move(plan, lu, m, p->layer.n_groups, true);
		plan->step_time_s = before;
		plan->fits = true;
		for (uint32_t s = 0; s < p->n_stages; s++)
			plan->stages[s].peak_bytes = peaks[s];
	}
	return err;
}

/*
 * A relocation: keep unit `keep` in layer kl instead of unit `drop` in layer dl (m.drop[0]),
 * where the estimate sees no loss (keep reruns no faster than drop) and no more memory held.
 * The estimate cannot rank them, the checker's step can: where a rebuild on demand falls in
 * the pipeline's schedule decides whether it delays the step. On gpt-13b with two virtual
 * stages (a100-nvlink, half-way), HEU kept the first GEMM's input in its second stage's
 * layers 0 and 1; Checkmate keeps them in layer 9 and was 0.0057% faster.
 */
struct relocation {
	uint32_t s, kl, keep, dl, drop;
};

static bool same_relocation(const struct relocation *a, const struct move *m)
{
	return a->s == m->s && a->kl == m->kl && a->keep == m->keep && a->dl == m->dl[0] &&
	       a->drop == m->drop[0];
}

/*
 * The next relocation not tried before (tried[0..n)), into m: the kept layer from the top
 * down and the given-up one from the bottom up, so that kept activations move towards the
 * layers whose backward comes first (best_move() says why those hold less). False when
 * none is left.
 */
static bool next_relocation(struct stage_search *search, const struct lynx_plan *plan,
                            const struct relocation *tried, size_t n, struct move *m)
{
	const struct lynx_problem *p = search[0].p;
	const struct lynx_layer_units *lu = search[0].lu;

	for (uint32_t s = 0; s < p->n_stages; s++) {
		const double held = lynx_problem_held_micro_batches(p, s);
		struct stage_search *ss = &search[s];

		find_rooms(ss, plan); /* in layer order, bottom up */
		for (uint32_t kl = p->stages[s].layers; kl-- > 0;)
			for (uint32_t k = 0; k < lu->n_units; k++) {
				if (!unit_is(plan, &lu->units[k], s, kl, p->layer.n_groups,
				             LYNX_ACTION_RECOMPUTE_ON_DEMAND))
					continue;
				for (uint32_t r = 0; r < ss->n_rooms; r++) {
					const struct room *room = &ss->rooms[r];
					bool seen = false;

					if (room->l >= kl)
						break; /* the rooms are in layer order */
					if (lu->units[k].rerun_s < room->rerun_s ||
					    held * (double)lu->units[k].bytes >
					            (double)ss->slack +
					                    held * (double)lu->units[room->u].bytes)
						continue;
					*m = (struct move){.s = s,
					                   .kl = kl,
					                   .keep = k,
					                   .n_drops = 1,
					                   .dl = {room->l},
					                   .drop = {room->u},
					                   .gain = lu->units[k].rerun_s -
					                           room->rerun_s};
					for (size_t i = 0; i < n && !seen; i++)
						seen = same_relocation(&tried[i], m);
					if (!seen)
						return true;
				}
			}
	}
	return false;
}

/* Tries, once each, up to MAX_SWAPS relocations (struct relocation); each stays only if the
 * checker finds the plan still fits and is faster. */
static int polish_swaps(const struct lynx_problem *p, const struct lynx_layer_units *lu,
                        struct stage_search *search, uint64_t *peaks, struct lynx_plan *plan,
                        char *why, size_t len)
{
	struct relocation tried[MAX_SWAPS];
	size_t n = 0;
	struct move m;
	int err = 0;

	while (!err && plan->fits && n < MAX_SWAPS && next_relocation(search, plan, tried, n, &m)) {
		bool kept;

		tried[n++] = (struct relocation){m.s, m.kl, m.keep, m.dl[0], m.drop[0]};
		err = try_move(p, lu, &m, peaks, plan, &kept, why, len);
	}
	return err;
}

/* Step 7: see the top of the file. plan fits and carries the checker's numbers. */
static int polish(const struct lynx_problem *p, struct lynx_plan *plan, char *why, size_t len)
{
	struct lynx_layer_units lu;
	uint32_t *tried = NULL; /* by stage and layer: units whose moves were refused */
	uint64_t *peaks = NULL; /* the stages' predicted peaks before a move */
	struct stage_search *search = NULL;
	uint32_t max_layers = 0;
	int err = 0;

	lynx_layer_units_find(&p->layer, &lu);
	for (uint32_t s = 0; s < p->n_stages; s++)
		max_layers = p->stages[s].layers > max_layers ? p->stages[s].layers : max_layers;
	tried = calloc((size_t)p->n_stages * max_layers + 1, sizeof(*tried));
	peaks = calloc(p->n_stages, sizeof(*peaks));
	search = calloc(p->n_stages, sizeof(*search));
	if (!tried || !peaks || !search)
		err = -ENOMEM;
	for (uint32_t s = 0; !err && s < p->n_stages; s++) {
		search[s] = (struct stage_search){p, &lu, s, &tried[s * max_layers], NULL, 0, 0};
		search[s].rooms = calloc((size_t)max_layers * LYNX_PROBLEM_MAX_GROUPS + 1,
		                         sizeof(struct room));
		if (!search[s].rooms)
			err = -ENOMEM;
	}
	for (int replay = 0; !err && plan->fits && replay < MAX_POLISH; replay++) {
		struct move m = {.gain = 0};
		bool kept;

		find_move(p, plan, search, &m);
		if (m.gain <= 0)
			break;
		err = try_move(p, &lu, &m, peaks, plan, &kept, why, len);
		if (!err && !kept)
			refused(p, &m, &tried[m.s * max_layers]);
	}
	if (!err)
		err = polish_swaps(p, &lu, search, peaks, plan, why, len);
	for (uint32_t s = 0; search && s < p->n_stages; s++)
		free(search[s].rooms);
	free(search);
	free(peaks);
	free(tried);
	return err;
}

/*
 * A stage where keeping every activation fits its budget keeps them all: nothing is faster
 * there, and nothing needs its peak lowered. (The knapsack can take an offload of a group
 * the executor cannot replay at no time cost where its copies hide, and the checker then
 * finds that stage's peak above keeping's: a copy out still running holds the group beside
 * its copy back.) A checker replay of keeping everything where a stage may fit so, and
 * one of the plan when a stage changed.
 */
static int keep_where_it_fits(const struct lynx_problem *p, struct lynx_plan *plan, char *why,
                              size_t len)
{
	struct lynx_checker_result r;
	struct lynx_plan keep;
	bool changed = false, may_fit = false;
	uint64_t layer_bytes = 0;
	int err;

	/* Keeping holds at least every group of every layer for the micro-batches a stage has
	 * in flight, beside its static memory: where that is over the budget, no replay. */
	for (uint32_t g = 0; g < p->layer.n_groups; g++)
		layer_bytes += p->layer.groups[g].bytes;
	for (uint32_t s = 0; s < p->n_stages && !may_fit; s++) {
		const struct lynx_problem_stage *st = &p->stages[s];
		uint64_t emb = st->embedding.present ? st->embedding.act_bytes : 0;
		may_fit = st->static_bytes +
		                  (uint64_t)(lynx_problem_held_micro_batches(p, s) *
		                             (double)(st->layers * layer_bytes)) +
		                  (uint64_t)st->inflight * emb <=
		          lynx_problem_stage_budget(p, s);
	}
	if (!may_fit)
		return 0;
	if ((err = lynx_plan_init(&keep, p, plan->planner, true)))
		return err;
	err = lynx_checker_replay(p, &keep, &r, why, len);
	lynx_plan_free(&keep);
	if (err)
		return err;
	for (uint32_t s = 0; s < p->n_stages; s++) {
		const struct lynx_plan_stage *st = &plan->stages[s];
		bool kept = true;

		if (r.peak_bytes[s] > lynx_problem_stage_budget(p, s))
			continue;
		for (uint32_t l = 0; l < (st->uniform ? 1 : st->layers); l++)
			for (uint32_t g = 0; g < p->layer.n_groups; g++) {
				struct lynx_decision *d = lynx_plan_decision(plan, s, l, g);
				kept = kept && d->action == LYNX_ACTION_KEEP;
				*d = (struct lynx_decision){.action = LYNX_ACTION_KEEP};
			}
		changed = changed || !kept;
	}
	lynx_checker_free(&r);
	if (!changed)
		return 0;
	if ((err = lynx_checker_replay(p, plan, &r, why, len)))
		return err;
	lynx_checker_store(&r, plan);
	lynx_checker_free(&r);
	return 0;
}

/*
 * Step 8: the floor. Where the plan misses a stage's budget, the knapsack's least estimated
 * peak need not be the least the checker finds (on a last stage, with one micro-batch in
 * flight and the head's activations beside the layers', the estimate's terms rank wrongly),
 * yet the least memory a rebuild plan reaches is known: every unit rebuilt on demand, as
 * Megatron's full recomputation, lowered as the executor runs it. A stage over its budget
 * takes that wherever the checker finds it lower, so HEU never plans more memory than full
 * recomputation; `mixed` then offloads from there.
 */
static int floor_at_full(const struct lynx_problem *p, struct lynx_plan *plan, char *why,
                         size_t len)
{
	struct lynx_plan full;
	bool again, changed = false;
	int err;

	if (plan->fits)
		return 0;
	err = lynx_planner_full(p, &full, why, len);
	if (!err) {
		err = lynx_checker_settle(p, &full, false, NULL, NULL, &again, why, len);
		for (uint32_t s = 0; !err && s < p->n_stages; s++) {
			uint64_t mine = plan->stages[s].peak_bytes;

			if (mine <= lynx_problem_stage_budget(p, s) ||
			    full.stages[s].peak_bytes >= mine)
				continue;
			for (uint32_t l = 0; l < plan->stages[s].layers; l++)
				for (uint32_t g = 0; g < p->layer.n_groups; g++)
					*lynx_plan_decision(plan, s, l, g) =
					        *lynx_plan_get(&full, s, l, g);
			changed = true;
		}
		lynx_plan_free(&full);
	}
	if (!err && changed)
		err = lynx_checker_settle(p, plan, false, NULL, NULL, &again, why, len);
	return err;
}

int lynx_planner_heu(const struct lynx_problem *p, struct lynx_plan *plan, char *why, size_t len)
{
	struct lynx_plan alt;
	/* With and without windows; interleaved, also with each chunk weighed by what it holds
	 * (its estimate is closer, yet its checker rounds need not end faster): the best. */
	int tries = lynx_problem_chunks(p) > 1 ? 4 : 2;
	int err = plan_all(p, true, false, plan, why, len);

	for (int t = 1; !err && t < tries; t++) {
		if ((err = plan_all(p, t % 2 == 0, t >= 2, &alt, why, len)))
			break;
		if ((alt.fits && !plan->fits) ||
		    (alt.fits == plan->fits && alt.step_time_s < plan->step_time_s)) {
			lynx_plan_free(plan);
			*plan = alt;
		} else {
			lynx_plan_free(&alt);
		}
	}
	if (err) {
		if (plan->stages)
			lynx_plan_free(plan);
		return err;
	}
	err = polish(p, plan, why, len);
	if (!err)
		err = keep_where_it_fits(p, plan, why, len);
	if (!err)
		err = floor_at_full(p, plan, why, len);
	if (err) {
		lynx_plan_free(plan);
		return err;
	}
	compact(p, plan);
	return 0;
}
