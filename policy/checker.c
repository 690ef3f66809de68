/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The independent checker: each stage walks its 1F1B action sequence op by op, twice. The
 * first walk, untimed, numbers every event and assigns each window decision to the latest
 * valid occurrence of its window. The second, timed, runs all stages together (a stage's
 * forward waits for the previous stage's, its backward for the next stage's), rebuilding on
 * demand and in windows, and counts memory after every allocation.
 *
 * Offloading runs on two copy engines per stage, FIFO each. A device-to-host copy is queued
 * when its group is produced; the group stays resident until the copy ends, and the frees
 * that came due are applied before every allocation (copies end in queue order, so a FIFO
 * of cells suffices). A prefetch allocates its buffer when it is issued and queues the
 * host-to-device copy behind both engines' earlier work; the consumer waits for it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refuse.h"
#include "checker.h"

/*
 * The state of one group of one layer and micro-batch. OUTBOUND: its own memory is resident
 * and freed when its device-to-host copy ends. INBOUND: its prefetch buffer is allocated; it
 * counts as resident from then, as the consumer waits for the copy.
 */
enum { RESIDENT = 1, CONSUMED = 2, OUTBOUND = 4, INBOUND = 8 };

/* How many copies of its group a state holds on the device: two while both copies run. */
static uint64_t copies(uint8_t state)
{
	if (state & (OUTBOUND | INBOUND))
		return !!(state & OUTBOUND) + !!(state & INBOUND);
	return !!(state & RESIDENT);
}

/* A window decision of group g of layer l, micro-batch j, bound to occurrence `occ`. */
struct target {
	uint64_t occ;
	uint32_t j, l, g;
};

struct stage_sim {
	const struct lynx_problem *p;
	const struct lynx_problem_layer *L;
	const struct lynx_problem_stage *st;
	const struct lynx_plan *plan;
	uint32_t s, n, m;
	uint32_t v;    /* model chunks (interleaved 1F1B); 1 */
	bool timed;    /* false: the numbering walk */
	uint32_t next; /* next pass of the schedule (lynx_problem_pass()), 0 .. 2·m·v - 1 */

	double now; /* when the compute stream is next free */
	/* mem: static_bytes and the saved bytes resident; non_saved: what is live besides
	 * saved activations at this moment (the stage's non_saved_*, or static_bytes). */
	uint64_t mem, peak, non_saved;
	uint8_t *state; /* [j][l][g] */

	int *tp_fwd, *tp_bwd; /* [l][op]: window index, or -1 */
	int pp_fwd, pp_bwd, dp;

	uint64_t seq;          /* events so far */
	uint64_t *drop_seq;    /* [j][l]: the event that dropped the layer's groups */
	uint64_t prev_bwd_seq; /* the end of the last backward */
	uint64_t *win_last;    /* [window]: its latest occurrence */
	struct target *targets;
	size_t n_targets, cap, cursor;

	double window_work, window_overflow, on_demand;
	uint64_t fallbacks;

	/* Offloading (timed walk only; nothing when the stage offloads nothing). */
	bool offloads;
	double d2h_free, h2d_free; /* when each copy engine is next free */
	double *d2h_end, *h2d_end; /* [j][l][g]: when the group's copies end */
	size_t *outq;              /* cells in device-to-host order */
	size_t out_head, out_tail;
	uint8_t *forward_done; /* [chunk][j]: that forward pass has run */
	/* Kuaishou's pacing: when the copies out queued by the k-th forward pass end. */
	double *copied_by_pass;
	uint32_t forward_passes;
	bool backward_started;
	int64_t deferred; /* pass (chunk·m + j) whose prefetch waits for its forward; -1: none */
	double offload_wait;
	uint64_t offload_bytes;
	int err;
	char *why;
	size_t len;
};

static uint8_t *state_of(struct stage_sim *ss, uint32_t j, uint32_t l)
{
	return &ss->state[((size_t)j * ss->n + l) * ss->L->n_groups];
}

static enum lynx_action action_of(const struct stage_sim *ss, uint32_t l, uint32_t g)
{
	return lynx_plan_get(ss->plan, ss->s, l, g)->action;
}

static bool rebuilt(enum lynx_action a)
{
	return a == LYNX_ACTION_RECOMPUTE_ON_DEMAND || a == LYNX_ACTION_RECOMPUTE_IN_WINDOW;
}

static void give(struct stage_sim *ss, uint64_t bytes)
{
	ss->mem -= bytes;
}

/* Frees the groups whose device-to-host copies have ended by now. */
static void drain(struct stage_sim *ss)
{
	while (ss->out_head < ss->out_tail) {
		size_t c = ss->outq[ss->out_head];

		if (ss->d2h_end[c] > ss->now)
			break;
		ss->out_head++;
		if (ss->state[c] & OUTBOUND) {
			ss->state[c] &= ~OUTBOUND;
			if (!(ss->state[c] & INBOUND))
				ss->state[c] &= ~RESIDENT;
			give(ss, ss->L->groups[c % ss->L->n_groups].bytes);
		}
	}
}

/* Device memory in use now: the saved bytes resident beside the moment's non-saved ones. */
static uint64_t in_use(const struct stage_sim *ss)
{
	return ss->mem - ss->st->static_bytes + ss->non_saved;
}

/*
 * The walk reaches a moment whose non-saved bytes the stage knows (problem.h's
 * non_saved_known): what is resident counts beside them from now on. Unknown: their most,
 * static_bytes, at every moment.
 */
static void at_moment(struct stage_sim *ss, uint64_t non_saved)
{
	if (!ss->timed || !ss->st->non_saved_known)
		return;
	ss->non_saved = non_saved;
	if (in_use(ss) > ss->peak)
		ss->peak = in_use(ss);
}

static void take(struct stage_sim *ss, uint64_t bytes)
{
	uint64_t budget = lynx_problem_stage_budget(ss->p, ss->s);

	if (ss->offloads)
		drain(ss);
	/*
	 * As Lynx's executor holds the budget: an allocation that would take the stage over
	 * it first waits for the copies to host memory in flight, each of which frees its group
	 * as it ends (a slow host link costs time here, not memory).
	 */
	while (ss->offloads && ss->timed && in_use(ss) + bytes > budget &&
	       ss->out_head < ss->out_tail) {
		double end = ss->d2h_end[ss->outq[ss->out_head]];

		if (end > ss->now) {
			ss->offload_wait += end - ss->now;
			ss->now = end;
		}
		drain(ss);
	}
	ss->mem += bytes;
	if (in_use(ss) > ss->peak)
		ss->peak = in_use(ss);
}

static double max2(double a, double b)
{
	return a > b ? a : b;
}

/* A copy of `bytes` over link k. */
static double copy_s(const struct lynx_link *k, uint64_t bytes)
{
	return k->latency_s + (double)bytes / k->busbw;
}

static size_t cell_of(const struct stage_sim *ss, uint32_t j, uint32_t l, uint32_t g)
{
	return ((size_t)j * ss->n + l) * ss->L->n_groups + g;
}

/*
 * Offloaded group g of layer l, micro-batch j, brought back now, by its prefetch or for a
 * rebuild that reads it (as the executor brings back what a replay names): its buffer
 * allocated, and its copy queued on the host-to-device engine behind earlier copies and its
 * own copy out. A prefetch later finds a group brought back for a rebuild there. Returns when
 * the copy ends.
 */
static double bring_back(struct stage_sim *ss, uint32_t j, uint32_t l, uint32_t g)
{
	size_t c = cell_of(ss, j, l, g);
	uint8_t *st = state_of(ss, j, l);

	take(ss, ss->L->groups[g].bytes);
	st[g] |= RESIDENT | INBOUND;
	ss->h2d_free = max2(max2(ss->now, ss->h2d_free), ss->d2h_end[c]) +
	               copy_s(&ss->p->h2d, ss->L->groups[g].bytes);
	ss->h2d_end[c] = ss->h2d_free;
	return ss->h2d_end[c];
}

/*
 * Rebuilds the groups `want` of layer l, micro-batch j, that are not resident, with their
 * missing dependencies and dropped siblings (same ops). An offloaded dependency is not
 * rebuilt but brought back by copy, and the rebuild waits for every copy of a dependency
 * still under way. Returns the time it takes: each op rerun once, after those copies.
 */
static double rebuild(struct stage_sim *ss, uint32_t j, uint32_t l, uint32_t want)
{
	const struct lynx_problem_layer *L = ss->L;
	uint8_t *st = state_of(ss, j, l);
	uint32_t resident = 0, consumed = 0, offloaded = 0, read = 0, set, prev = 0, ops = 0;
	uint64_t scratch = 0;
	double t = 0, copied = ss->now;

	for (uint32_t g = 0; g < L->n_groups; g++) {
		resident |= (st[g] & RESIDENT) ? 1u << g : 0;
		consumed |= (st[g] & CONSUMED) ? 1u << g : 0;
		offloaded |= action_of(ss, l, g) == LYNX_ACTION_OFFLOAD ? 1u << g : 0;
	}
	set = want & ~resident;
	while (set != prev) {
		prev = set;
		for (uint32_t g = 0; g < L->n_groups; g++) {
			if (!(set & (1u << g)) || (offloaded & (1u << g)))
				continue;
			read |= L->groups[g].deps;
			set |= L->groups[g].deps & ~resident;
			for (uint32_t h = 0; h < L->n_groups; h++)
				if (L->groups[h].ops == L->groups[g].ops &&
				    !((resident | consumed) & (1u << h)) &&
				    rebuilt(action_of(ss, l, h)))
					set |= 1u << h;
		}
	}
	for (uint32_t g = 0; g < L->n_groups; g++) {
		if (!(set & (1u << g)))
			continue;
		if (offloaded & (1u << g)) {
			copied = max2(copied, bring_back(ss, j, l, g));
			continue;
		}
		if (!L->groups[g].ops && !ss->err)
			ss->err = lynx_policy_refuse(
			        ss->why, ss->len,
			        "stage %u layer %u micro-batch %u: group %s is needed but "
			        "is not resident and cannot be rebuilt",
			        ss->s, l, j, L->groups[g].name);
		ops |= L->groups[g].ops;
		if (L->groups[g].scratch_bytes > scratch)
			scratch = L->groups[g].scratch_bytes;
		take(ss, L->groups[g].bytes);
		st[g] |= RESIDENT;
	}
	for (uint32_t g = 0; g < L->n_groups; g++)
		if ((read & resident & (1u << g)) && (st[g] & INBOUND))
			copied = max2(copied, ss->h2d_end[cell_of(ss, j, l, g)]);
	/* The rebuild's scratch, beside everything it rebuilt, while it runs: one replay's at
	 * a time, so the largest of the groups it rebuilt. */
	if (ops && scratch) {
		take(ss, scratch);
		give(ss, scratch);
	}
	/* A dependency rebuilt after its own consumer is needed only for this rebuild. */
	for (uint32_t g = 0; g < L->n_groups; g++)
		if ((set & consumed) & (1u << g)) {
			give(ss, L->groups[g].bytes);
			st[g] &= ~(RESIDENT | INBOUND);
		}
	for (uint32_t op = 0; op < L->n_ops; op++)
		if (ops & (1u << op))
			t += L->ops[op].rerun_s;
	return (copied - ss->now) + t;
}

/*
 * An occurrence of window w (-1: none) as the next event. Numbering walk: remember it.
 * Timed walk: rebuild what was assigned to it; returns that work in seconds.
 */
static double occur(struct stage_sim *ss, int w)
{
	uint64_t seq = ++ss->seq;
	double work = 0;

	if (w < 0)
		return 0;
	if (!ss->timed) {
		ss->win_last[w] = seq;
		return 0;
	}
	while (ss->cursor < ss->n_targets && ss->targets[ss->cursor].occ == seq) {
		uint32_t j = ss->targets[ss->cursor].j, l = ss->targets[ss->cursor].l, mask = 0;

		while (ss->cursor < ss->n_targets && ss->targets[ss->cursor].occ == seq &&
		       ss->targets[ss->cursor].j == j && ss->targets[ss->cursor].l == l)
			mask |= 1u << ss->targets[ss->cursor++].g;
		work += rebuild(ss, j, l, mask);
	}
	return work;
}

/*
 * A window occurrence of fixed idle time (TP): the stream waits `idle` for a collective that the
 * rebuilds overlap from its start, and longer where they do not fit (lynx_window_delay()).
 */
static void occur_fixed(struct stage_sim *ss, int w, double idle)
{
	double work = occur(ss, w), delay;

	if (!ss->timed)
		return;
	delay = lynx_window_delay(&ss->p->interference, work, idle);
	ss->now += idle + delay;
	ss->window_work += work;
	ss->window_overflow += delay;
}

/*
 * Waiting for a transfer that arrives at `ready` (PP), with window w open meanwhile. The
 * transfer is in flight for its last `transfer` seconds, where the rebuilds and it slow each
 * other (lynx_overlap()); before that, the stream waits for the sending stage.
 */
static void occur_until(struct stage_sim *ss, int w, double ready, double transfer)
{
	double work = occur(ss, w), idle, start, comm, comm_end, done;

	if (!ss->timed)
		return;
	idle = max2(0, ready - ss->now);
	start = ready - transfer - ss->now;
	comm = transfer;
	if (start < 0) {
		comm = max2(0, transfer + start);
		start = 0;
	}
	done = lynx_overlap(&ss->p->interference, work, start, comm, &comm_end);
	done = max2(done, comm_end);
	ss->window_work += work;
	ss->window_overflow += max2(0, done - idle);
	ss->now += max2(idle, done);
}

static void push_target(struct stage_sim *ss, uint64_t occ, uint32_t j, uint32_t l, uint32_t g)
{
	if (ss->n_targets == ss->cap) {
		size_t cap = ss->cap ? 2 * ss->cap : 1024;
		struct target *t = realloc(ss->targets, cap * sizeof(*t));

		if (!t) {
			ss->err = -ENOMEM;
			return;
		}
		ss->targets = t;
		ss->cap = cap;
	}
	ss->targets[ss->n_targets++] = (struct target){.occ = occ, .j = j, .l = l, .g = g};
}

/*
 * The groups of layer l produced by the forward of op (-1: the layer's input). An offloaded
 * group is queued on the device-to-host engine now and stays resident until its copy ends.
 */
static void produce(struct stage_sim *ss, uint32_t j, uint32_t l, int32_t op)
{
	uint8_t *st = state_of(ss, j, l);

	for (uint32_t g = 0; g < ss->L->n_groups; g++) {
		uint64_t bytes = ss->L->groups[g].bytes;
		size_t c;

		if (ss->L->groups[g].producer != op)
			continue;
		take(ss, bytes);
		st[g] = RESIDENT;
		if (action_of(ss, l, g) != LYNX_ACTION_OFFLOAD)
			continue;
		c = cell_of(ss, j, l, g);
		st[g] |= OUTBOUND;
		ss->d2h_free = max2(ss->now, ss->d2h_free) + copy_s(&ss->p->d2h, bytes);
		ss->d2h_end[c] = ss->d2h_free;
		ss->outq[ss->out_tail++] = c;
		ss->offload_bytes += bytes;
	}
}

/*
 * Brings layer l's offloaded groups of micro-batch j back, in the order the backward consumes
 * them: each buffer is allocated now and its host-to-device copy queued behind the engine's
 * earlier copies and the group's own device-to-host copy. A group whose copy out has not
 * ended holds both its own memory (until that copy ends) and its buffer: the buffers are
 * separate, as Kuaishou's ping-pong buffers are, and a copy queued on a stream is not taken
 * back. A group already brought back for a rebuild stays as it is.
 */
static void prefetch_layer(struct stage_sim *ss, uint32_t j, uint32_t l)
{
	const struct lynx_problem_layer *L = ss->L;
	uint8_t *st = state_of(ss, j, l);

	for (uint32_t op = L->n_ops; op-- > 0;)
		for (uint32_t g = 0; g < L->n_groups; g++)
			if (L->groups[g].consumer == (int32_t)op &&
			    action_of(ss, l, g) == LYNX_ACTION_OFFLOAD && !(st[g] & INBOUND))
				bring_back(ss, j, l, g);
}

/* Micro-batch j's offloaded groups in model chunk c, last layer first (Kuaishou's prefetch). */
static void prefetch(struct stage_sim *ss, uint32_t j, uint32_t c)
{
	uint32_t first, end;

	lynx_problem_chunk_layers(ss->p, ss->s, c, &first, &end);
	drain(ss);
	for (uint32_t l = end; l-- > first;)
		prefetch_layer(ss, j, l);
}

/*
 * Kuaishou's prefetch, at the start of pass ss->next of the timed walk: a backward pass issues
 * the prefetch of the stage's next backward pass (1F1B: micro-batch j + 1's); the forward pass
 * just before the first backward issues that of the first. A pass whose forward has not run
 * yet (the last stage's, which has no warm-up) is prefetched at the end of its forward.
 */
static void start_action(struct stage_sim *ss, bool fwd)
{
	const uint32_t passes = 2 * ss->m * ss->v;
	uint32_t a = ss->next + 1;
	struct lynx_pass next = {.forward = true};

	if (!ss->timed || !ss->offloads || ss->p->restore_by_layer)
		return;
	if (fwd && (ss->backward_started || a >= passes ||
	            (next = lynx_problem_pass(ss->p, ss->s, a)).forward))
		return;
	while (!fwd && a < passes && (next = lynx_problem_pass(ss->p, ss->s, a)).forward)
		a++;
	if (next.forward)
		return;
	if (ss->forward_done[(size_t)next.chunk * ss->m + next.microbatch])
		prefetch(ss, next.microbatch, next.chunk);
	else
		ss->deferred = (int64_t)next.chunk * ss->m + next.microbatch;
}

/*
 * Kuaishou's pacing, at the start of a forward pass's compute: a pass's copies to host memory
 * run while the next forward pass runs, so the one after waits for them (the activations
 * they free are what the next pass's memory reuses).
 */
static void pace(struct stage_sim *ss)
{
	double end;

	if (!ss->timed || !ss->offloads || ss->p->restore_by_layer || ss->forward_passes < 2)
		return;
	end = ss->copied_by_pass[ss->forward_passes - 2];
	if (end > ss->now) {
		ss->offload_wait += end - ss->now;
		ss->now = end;
	}
	drain(ss);
}

static void end_forward(struct stage_sim *ss, uint32_t j, uint32_t chunk)
{
	if (!ss->timed || !ss->offloads || ss->p->restore_by_layer)
		return;
	ss->copied_by_pass[ss->forward_passes++] = ss->d2h_free;
	ss->forward_done[(size_t)chunk * ss->m + j] = 1;
	if (ss->deferred == (int64_t)chunk * ss->m + j) {
		ss->deferred = -1;
		prefetch(ss, j, chunk);
	}
}

/* Micro-batch j's forward through model chunk `chunk`, its input ready (received) then. */
static void forward(struct stage_sim *ss, uint32_t j, uint32_t chunk, double ready)
{
	const struct lynx_problem_layer *L = ss->L;
	const struct lynx_problem_stage *st = ss->st;
	uint32_t first, end;

	lynx_problem_chunk_layers(ss->p, ss->s, chunk, &first, &end);
	start_action(ss, true);
	at_moment(ss, st->non_saved_outside);
	occur_until(ss, ss->pp_fwd, ready, st->recv_fwd_s);
	pace(ss);
	if (ss->timed && st->embedding.present && chunk == 0) {
		at_moment(ss, st->embedding.non_saved_fwd);
		take(ss, st->embedding.act_bytes);
		ss->now += st->embedding.fwd_s;
	}
	for (uint32_t l = first; l < end; l++) {
		/* The layer's input arrives at its first op's moment. */
		at_moment(ss, st->non_saved_fwd[0]);
		if (ss->timed)
			produce(ss, j, l, -1);
		for (uint32_t op = 0; op < L->n_ops; op++) {
			int w = ss->tp_fwd[l * L->n_ops + op];

			at_moment(ss, st->non_saved_fwd[op]);
			if (w >= 0)
				occur_fixed(ss, w, L->ops[op].wait_fwd_s);
			else if (ss->timed)
				ss->now += L->ops[op].wait_fwd_s;
			ss->seq++;
			if (ss->timed) {
				ss->now += L->ops[op].fwd_s;
				produce(ss, j, l, (int32_t)op);
			}
		}
		if (ss->timed) {
			uint8_t *gs = state_of(ss, j, l);

			for (uint32_t g = 0; g < L->n_groups; g++)
				if (rebuilt(action_of(ss, l, g)) && (gs[g] & RESIDENT)) {
					give(ss, L->groups[g].bytes);
					gs[g] &= ~RESIDENT;
				}
		}
		ss->drop_seq[(size_t)j * ss->n + l] = ++ss->seq;
	}
	if (ss->timed && st->head.present && chunk == ss->v - 1) {
		at_moment(ss, st->head.non_saved_fwd);
		take(ss, st->head.act_bytes);
		ss->now += st->head.fwd_s;
	}
	at_moment(ss, st->non_saved_outside);
	end_forward(ss, j, chunk);
}

/* Before the backward of op in layer l: bind window decisions, or rebuild what is missing. */
static void consume(struct stage_sim *ss, uint32_t j, uint32_t l, uint32_t op)
{
	const struct lynx_problem_layer *L = ss->L;
	uint8_t *gs = state_of(ss, j, l);
	uint32_t missing = 0;

	for (uint32_t g = 0; g < L->n_groups; g++) {
		const struct lynx_decision *d = lynx_plan_get(ss->plan, ss->s, l, g);

		if (L->groups[g].consumer != (int32_t)op)
			continue;
		if (!ss->timed && d->action == LYNX_ACTION_RECOMPUTE_IN_WINDOW) {
			uint64_t occ = ss->win_last[d->window];

			if (occ && occ > ss->drop_seq[(size_t)j * ss->n + l] &&
			    occ > ss->prev_bwd_seq)
				push_target(ss, occ, j, l, g);
			else
				ss->fallbacks++;
		}
		if (ss->timed && d->action == LYNX_ACTION_OFFLOAD && (gs[g] & RESIDENT)) {
			double wait = ss->h2d_end[cell_of(ss, j, l, g)] - ss->now;

			if (wait > 0) {
				ss->now += wait;
				ss->offload_wait += wait;
			}
		}
		if (ss->timed && !(gs[g] & RESIDENT))
			missing |= 1u << g;
	}
	if (missing) {
		double t = rebuild(ss, j, l, missing);

		ss->now += t;
		ss->on_demand += t;
	}
}

/* Micro-batch j's backward through model chunk `chunk`, its gradient ready then. */
static void backward(struct stage_sim *ss, uint32_t j, uint32_t chunk, double ready)
{
	const struct lynx_problem_layer *L = ss->L;
	const struct lynx_problem_stage *st = ss->st;
	uint32_t first, end;

	lynx_problem_chunk_layers(ss->p, ss->s, chunk, &first, &end);
	start_action(ss, false);
	ss->backward_started = ss->backward_started || ss->timed;
	at_moment(ss, st->non_saved_outside);
	occur_until(ss, ss->pp_bwd, ready, st->recv_bwd_s);
	if (ss->timed && st->head.present && chunk == ss->v - 1) {
		at_moment(ss, st->head.non_saved_bwd);
		ss->now += st->head.bwd_s;
		give(ss, st->head.act_bytes);
	}
	for (uint32_t l = end; l-- > first;) {
		/* Lynx's executor restores each layer's groups as the host issues that layer's
		 * backward, and the host runs ahead of the device: a layer's groups count from the
		 * start of the layer above's backward (the top layer's from its own). */
		if (ss->timed && ss->offloads && ss->p->restore_by_layer) {
			drain(ss);
			prefetch_layer(ss, j, l);
			if (l > 0)
				prefetch_layer(ss, j, l - 1);
		}
		for (uint32_t op = L->n_ops; op-- > 0;) {
			int w = ss->tp_bwd[l * L->n_ops + op];

			at_moment(ss, st->non_saved_bwd[op]);
			consume(ss, j, l, op);
			ss->seq++;
			if (ss->timed) {
				uint8_t *gs = state_of(ss, j, l);

				ss->now += L->ops[op].bwd_s;
				for (uint32_t g = 0; g < L->n_groups; g++) {
					if (L->groups[g].consumer != (int32_t)op)
						continue;
					give(ss, copies(gs[g]) * L->groups[g].bytes);
					gs[g] = CONSUMED;
				}
			}
			if (w >= 0)
				occur_fixed(ss, w, L->ops[op].wait_bwd_s);
			else if (ss->timed)
				ss->now += L->ops[op].wait_bwd_s;
		}
	}
	if (ss->timed && st->embedding.present && chunk == 0) {
		at_moment(ss, st->embedding.non_saved_bwd);
		ss->now += st->embedding.bwd_s;
		give(ss, st->embedding.act_bytes);
	}
	at_moment(ss, st->non_saved_outside);
	ss->prev_bwd_seq = ++ss->seq;
}

static int by_occurrence(const void *a, const void *b)
{
	const struct target *x = a, *y = b;

	if (x->occ != y->occ)
		return x->occ < y->occ ? -1 : 1;
	if (x->j != y->j)
		return x->j < y->j ? -1 : 1;
	if (x->l != y->l)
		return x->l < y->l ? -1 : 1;
	return x->g < y->g ? -1 : x->g > y->g;
}

static int sim_init(struct stage_sim *ss, const struct lynx_problem *p,
                    const struct lynx_plan *plan, uint32_t s, char *why, size_t len)
{
	const struct lynx_problem_stage *st = &p->stages[s];
	size_t cells = (size_t)p->micro_batches * st->layers;
	size_t slots = (size_t)st->layers * p->layer.n_ops;

	*ss = (struct stage_sim){
	        .p = p,
	        .L = &p->layer,
	        .st = st,
	        .plan = plan,
	        .s = s,
	        .n = st->layers,
	        .m = p->micro_batches,
	        .v = lynx_problem_chunks(p),
	        .pp_fwd = lynx_problem_find_window(st, LYNX_WINDOW_PP_RECV_FWD, -1, -1),
	        .pp_bwd = lynx_problem_find_window(st, LYNX_WINDOW_PP_RECV_BWD, -1, -1),
	        .dp = lynx_problem_find_window(st, LYNX_WINDOW_DP_GRAD, -1, -1),
	        .deferred = -1,
	        .why = why,
	        .len = len,
	};
	ss->state = calloc(cells * p->layer.n_groups + 1, 1);
	ss->drop_seq = calloc(cells + 1, sizeof(*ss->drop_seq));
	ss->win_last = calloc(st->n_windows + 1, sizeof(*ss->win_last));
	ss->tp_fwd = malloc((slots + 1) * sizeof(int));
	ss->tp_bwd = malloc((slots + 1) * sizeof(int));
	if (!ss->state || !ss->drop_seq || !ss->win_last || !ss->tp_fwd || !ss->tp_bwd)
		return -ENOMEM;
	for (uint32_t l = 0; l < (plan->stages[s].uniform ? 1 : st->layers); l++)
		for (uint32_t g = 0; g < p->layer.n_groups; g++)
			ss->offloads = ss->offloads ||
			               lynx_plan_get(plan, s, l, g)->action == LYNX_ACTION_OFFLOAD;
	if (ss->offloads) {
		ss->d2h_end = calloc(cells * p->layer.n_groups, sizeof(double));
		ss->h2d_end = calloc(cells * p->layer.n_groups, sizeof(double));
		ss->outq = calloc(cells * p->layer.n_groups, sizeof(size_t));
		ss->forward_done = calloc((size_t)p->micro_batches * ss->v, 1);
		ss->copied_by_pass = calloc((size_t)p->micro_batches * ss->v, sizeof(double));
		if (!ss->d2h_end || !ss->h2d_end || !ss->outq || !ss->forward_done ||
		    !ss->copied_by_pass)
			return -ENOMEM;
	}
	for (size_t i = 0; i < slots; i++)
		ss->tp_fwd[i] = ss->tp_bwd[i] = -1;
	for (uint32_t w = 0; w < st->n_windows; w++) {
		const struct lynx_window *win = &st->windows[w];
		size_t slot = (size_t)win->layer * p->layer.n_ops + win->op;

		if (win->kind == LYNX_WINDOW_TP_FWD)
			ss->tp_fwd[slot] = (int)w;
		else if (win->kind == LYNX_WINDOW_TP_BWD)
			ss->tp_bwd[slot] = (int)w;
	}
	return 0;
}

static void sim_free(struct stage_sim *ss)
{
	free(ss->state);
	free(ss->drop_seq);
	free(ss->win_last);
	free(ss->tp_fwd);
	free(ss->tp_bwd);
	free(ss->targets);
	free(ss->d2h_end);
	free(ss->h2d_end);
	free(ss->outq);
	free(ss->forward_done);
	free(ss->copied_by_pass);
}

/* The numbering walk of one stage: every action in order, no time, no memory. */
static void number(struct stage_sim *ss)
{
	for (uint32_t a = 0; a < 2 * ss->m * ss->v; a++) {
		struct lynx_pass pass = lynx_problem_pass(ss->p, ss->s, a);

		if (pass.forward)
			forward(ss, pass.microbatch, pass.chunk, 0);
		else
			backward(ss, pass.microbatch, pass.chunk, 0);
	}
	occur(ss, ss->dp);
	if (ss->n_targets)
		qsort(ss->targets, ss->n_targets, sizeof(*ss->targets), by_occurrence);
	ss->timed = true;
	ss->seq = 0;
	ss->prev_bwd_seq = 0;
	ss->mem = ss->st->static_bytes;
	ss->non_saved = ss->st->non_saved_known ? ss->st->non_saved_outside : ss->st->static_bytes;
	ss->peak = ss->non_saved;
}

/* Where the end of pass (stage s, chunk c, micro-batch j) is kept in end_f and end_b. */
static size_t pass_at(uint32_t s, uint32_t c, uint32_t j, uint32_t v, uint32_t m)
{
	return ((size_t)s * v + c) * m + j;
}

/*
 * The timed walk of all stages together. A pass starts once the pass it waits for
 * (lynx_problem_pass_waits_for()) has ended and its transfer arrived. 1F1B and its interleaved form
 * never deadlock, so sweeping the stages until every pass ran terminates.
 */
static int run_pipeline(struct stage_sim *ss, uint32_t p, uint32_t m, double *end_f, double *end_b)
{
	const uint32_t v = ss[0].v;
	uint32_t done = 0;

	while (done < p) {
		bool progress = false;

		done = 0;
		for (uint32_t s = 0; s < p; s++) {
			while (ss[s].next < 2 * m * v && !ss[s].err) {
				struct lynx_pass pass = lynx_problem_pass(ss[s].p, s, ss[s].next);
				const uint32_t j = pass.microbatch, c = pass.chunk;
				double *ends = pass.forward ? end_f : end_b, ready = ss[s].now;
				uint32_t from_s, from_c;

				if (lynx_problem_pass_waits_for(ss[s].p, s, &pass, &from_s,
				                                &from_c)) {
					double end = ends[pass_at(from_s, from_c, j, v, m)];
					if (end < 0)
						break;
					ready = end + (pass.forward ? ss[s].st->recv_fwd_s
					                            : ss[s].st->recv_bwd_s);
				}
				if (pass.forward)
					forward(&ss[s], j, c, ready);
				else
					backward(&ss[s], j, c, ready);
				ends[pass_at(s, c, j, v, m)] = ss[s].now;
				ss[s].next++;
				progress = true;
			}
			if (ss[s].err)
				return ss[s].err;
			done += ss[s].next == 2 * m * v;
		}
		if (!progress && done < p)
			return -EDEADLK;
	}
	return 0;
}

/* OFFLOAD needs a host link. */
static int check_offload(const struct lynx_problem *p, const struct lynx_plan *plan, char *why,
                         size_t len)
{
	const struct lynx_problem_layer *L = &p->layer;

	if (p->d2h.busbw > 0 && p->h2d.busbw > 0)
		return 0;
	for (uint32_t s = 0; s < p->n_stages; s++)
		for (uint32_t l = 0; l < (plan->stages[s].uniform ? 1 : p->stages[s].layers); l++)
			for (uint32_t g = 0; g < L->n_groups; g++)
				if (lynx_plan_get(plan, s, l, g)->action == LYNX_ACTION_OFFLOAD)
					return lynx_policy_refuse(
					        why, len,
					        "stage %u layer %u group %s: offload needs a host "
					        "link, and the problem has none",
					        s, l, L->groups[g].name);
	return 0;
}

int lynx_checker_replay(const struct lynx_problem *p, const struct lynx_plan *plan,
                        struct lynx_checker_result *out, char *why, size_t len)
{
	uint32_t n = p->n_stages, m = p->micro_batches;
	size_t passes = (size_t)n * m * lynx_problem_chunks(p);
	struct stage_sim *ss = calloc(n, sizeof(*ss));
	double *end_f = malloc(passes * sizeof(double));
	double *end_b = malloc(passes * sizeof(double));
	int err = lynx_plan_validate(plan, p, why, len);

	*out = (struct lynx_checker_result){.n_stages = n, .fits = true};
	out->peak_bytes = calloc(n, sizeof(*out->peak_bytes));
	out->end_s = calloc(n, sizeof(*out->end_s));
	if (!err && (!ss || !end_f || !end_b || !out->peak_bytes || !out->end_s))
		err = -ENOMEM;
	if (!err)
		err = check_offload(p, plan, why, len);
	for (uint32_t s = 0; !err && s < n; s++) {
		err = sim_init(&ss[s], p, plan, s, why, len);
		if (!err) {
			number(&ss[s]);
			err = ss[s].err;
		}
	}
	if (!err) {
		for (size_t i = 0; i < passes; i++)
			end_f[i] = end_b[i] = -1;
		err = run_pipeline(ss, n, m, end_f, end_b);
		if (err == -EDEADLK)
			err = lynx_policy_refuse(
			        why, len, "internal error: the pipeline schedule deadlocked");
	}
	for (uint32_t s = 0; !err && s < n; s++) {
		occur_fixed(&ss[s], ss[s].dp, ss[s].st->grad_reduce_s);
		if (ss[s].dp < 0)
			ss[s].now += ss[s].st->grad_reduce_s;
		ss[s].now += ss[s].st->optimizer_s;
		if (ss[s].mem != ss[s].st->static_bytes)
			err = lynx_policy_refuse(
			        why, len,
			        "internal error: stage %u ends holding %llu bytes, not its "
			        "static %llu",
			        s, (unsigned long long)ss[s].mem,
			        (unsigned long long)ss[s].st->static_bytes);
		out->peak_bytes[s] = ss[s].peak;
		out->end_s[s] = ss[s].now;
		out->fits = out->fits && ss[s].peak <= lynx_problem_stage_budget(p, s);
		out->step_time_s = max2(out->step_time_s, ss[s].now);
		out->window_work_s += ss[s].window_work;
		out->window_overflow_s += ss[s].window_overflow;
		out->on_demand_s += ss[s].on_demand;
		out->fallbacks += ss[s].fallbacks;
		out->offload_bytes += ss[s].offload_bytes;
		out->offload_wait_s += ss[s].offload_wait;
	}
	for (uint32_t s = 0; ss && s < n; s++)
		sim_free(&ss[s]);
	free(ss);
	free(end_f);
	free(end_b);
	if (err)
		lynx_checker_free(out);
	return err;
}

void lynx_checker_free(struct lynx_checker_result *c)
{
	free(c->peak_bytes);
	free(c->end_s);
	c->peak_bytes = NULL;
	c->end_s = NULL;
}

void lynx_checker_store(const struct lynx_checker_result *r, struct lynx_plan *plan)
{
	plan->step_time_s = r->step_time_s;
	plan->fits = r->fits;
	for (uint32_t s = 0; s < r->n_stages && s < plan->n_stages; s++)
		plan->stages[s].peak_bytes = r->peak_bytes[s];
}

int lynx_checker_settle(const struct lynx_problem *p, struct lynx_plan *plan, bool tighten,
                        uint64_t *budget, bool *redo, bool *again, char *why, size_t len)
{
	struct lynx_checker_result r;
	int err;

	/* What the executor would run is what the planner's next round must see. */
	lynx_plan_lower(p, plan);
	*again = false;
	if ((err = lynx_checker_replay(p, plan, &r, why, len)))
		return err;
	lynx_checker_store(&r, plan);
	for (uint32_t s = 0; s < p->n_stages; s++) {
		uint64_t excess = r.peak_bytes[s] > lynx_problem_stage_budget(p, s)
		                          ? r.peak_bytes[s] - lynx_problem_stage_budget(p, s)
		                          : 0;

		bool lower = tighten && excess && budget[s] > excess;

		if (redo)
			redo[s] = lower;
		if (lower) {
			budget[s] -= excess;
			*again = true;
		}
	}
	lynx_checker_free(&r);
	return 0;
}
