/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Splits one iteration into forward and backward layer segments from its repeated
 * kernel motifs (segment.h states the method and its limits).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segment.h"

static size_t covered(const struct lynx_prof_run *r)
{
	return (r->end - r->start) / r->period * r->period;
}

/* True when runs of a shorter period cover at least half of r: r is then made of smaller
 * repeats (a micro-batch's forward and backward, or several layers at once). O(runs) per
 * call with a mark array over r. */
static bool atomic(const struct lynx_prof_run *runs, size_t n, const struct lynx_prof_run *r,
                   unsigned char *mark)
{
	size_t len = r->end - r->start, hit = 0;

	memset(mark, 0, len);
	for (size_t i = 0; i < n; i++) {
		const struct lynx_prof_run *o = &runs[i];
		if (o->period >= r->period || o->end <= r->start || o->start >= r->end)
			continue;
		size_t from = o->start > r->start ? o->start : r->start;
		size_t to = o->end < r->end ? o->end : r->end;
		memset(mark + (from - r->start), 1, to - from);
	}
	for (size_t i = 0; i < len; i++)
		hit += mark[i];
	return 2 * hit < len;
}

static int by_cover(const void *a, const void *b)
{
	const struct lynx_prof_run *x = a, *y = b;
	size_t cx = covered(x), cy = covered(y);

	if (cx != cy)
		return cx > cy ? -1 : 1;
	if (x->period != y->period)
		return x->period < y->period ? -1 : 1;
	return x->start < y->start ? -1 : x->start > y->start;
}

static int by_start(const void *a, const void *b)
{
	const struct lynx_prof_run *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

struct class
{
	uint64_t key;
	size_t covered, count;
	size_t first_start;
};

/* True when unit a (length na) occurs in unit b (length nb) read cyclically. */
static bool contains_cyclic(const uint64_t *b, size_t nb, const uint64_t *a, size_t na)
{
	if (na > nb)
		return false;
	for (size_t s = 0; s < nb; s++) {
		size_t k = 0;
		while (k < na && b[(s + k) % nb] == a[k])
			k++;
		if (k == na)
			return true;
	}
	return false;
}

/*
 * A run can start early when the code before a stack ends like a layer (the last stage's
 * final layer norm backward before the first layer's backward). Within the run's slack,
 * start where one unit's first and last tokens come from the same thread: the launching
 * thread changes at the stack's edge, never inside a layer.
 */
static void align_on_threads(const struct lynx_prof_trace *trace,
                             const struct lynx_prof_tokens *tok, struct lynx_prof_run *r)
{
	size_t slack = r->end - r->start - covered(r);

	for (size_t d = 0; d <= slack; d++) {
		size_t a = r->start + d;
		if (trace->events[tok->event[a]].tid ==
		    trace->events[tok->event[a + r->period - 1]].tid) {
			r->start = a;
			return;
		}
	}
}

/* Fills the segments of one class's runs (sorted by start). */
static void fill(const struct lynx_prof_tokens *tok, const struct lynx_prof_iteration *it,
                 const struct lynx_prof_run *runs, size_t n, size_t layers, bool reverse,
                 struct lynx_prof_segment *seg)
{
	for (size_t m = 0; m < n; m++) {
		const struct lynx_prof_run *r = &runs[m];
		for (size_t u = 0; u < layers; u++) {
			size_t a = r->start + u * r->period, b = a + r->period;
			size_t layer = reverse ? layers - 1 - u : u;
			seg[m * layers + layer] = (struct lynx_prof_segment){
			        a ? tok->event[a - 1] + 1 : it->first, tok->event[b - 1] + 1};
		}
	}
}

/*
 * Whether forward stacks a then b (b the next to start) could be two micro-batches: a
 * backward stack starts between them (1F1B, or one micro-batch at a time), or a pipeline
 * send or receive lies between them (GPipe and interleaved schedules send each forward's
 * output on). Stacks that follow each other with neither are an inner loop of the layer
 * (one launch sequence per expert, head or chunk) taken for the layers. The backward
 * stacks' starts are bwd_starts[0..nb) when given, else bwd[0..nb)'s.
 */
static bool apart(const struct lynx_prof_trace *trace, const struct lynx_prof_tokens *tok,
                  const struct lynx_prof_run *a, const struct lynx_prof_run *b,
                  const struct lynx_prof_run *bwd, size_t nb, const size_t *bwd_starts)
{
	for (size_t i = 0; i < nb; i++) {
		size_t start = bwd_starts ? bwd_starts[i] : bwd[i].start;
		if (start >= a->end && start < b->start)
			return true;
	}
	for (size_t t = a->start; t < b->start; t++)
		if (trace->events[tok->event[t]].kind == LYNX_PROF_P2P)
			return true;
	return false;
}

/* True when tokens [t, t + n) of tok are unit[0..n). */
static bool matches(const struct lynx_prof_tokens *tok, size_t t, const uint64_t *unit, size_t n)
{
	return t + n <= tok->count && !memcmp(tok->sig + t, unit, n * sizeof(*unit));
}

/* The end of the forward stack among fr[0..nf) (layers each) that token t lies in; 0 when
 * it lies in none. */
static size_t in_forward_stack(const struct lynx_prof_run *fr, size_t nf, size_t layers, size_t t)
{
	for (size_t i = 0; i < nf; i++)
		if (t >= fr[i].start && t < fr[i].start + layers * fr[i].period)
			return fr[i].start + layers * fr[i].period;
	return 0;
}

/*
 * Megatron's block recompute (--recompute-method block --recompute-num-layers N): the first
 * N layers of a stage rerun their forward just before their backward, the others keep what
 * they saved. A micro-batch's backward stack is then L-N backward units B, then N units F.B
 * (the forward unit, then B), and one motif covers part of it only. It is read from F and B
 * instead. F is the forward stacks' unit; B follows a forward unit that lies outside every
 * forward stack (a rerun), for as many tokens as the backward motif bwd has, less F's when
 * that motif holds F. A backward stack starts where F.B or B first matches outside the
 * forward stacks, and is read unit by unit, F.B before B, until it holds a backward of every
 * layer; a rerunning layer's backward segment holds its rerun forward. Returns 0 with out
 * filled, -EINVAL with why (or an empty why when no forward runs outside the forward stacks:
 * not this shape), -ENOMEM.
 */
static int mixed_backward(const struct lynx_prof_trace *trace, const struct lynx_prof_tokens *tok,
                          const struct lynx_prof_iteration *it, const struct lynx_prof_run *fr,
                          size_t nf, size_t layers, const struct lynx_prof_run *bwd,
                          struct lynx_prof_layers *out, char *why, size_t why_len)
{
	const uint64_t *f = tok->sig + fr[0].start;
	size_t pf = fr[0].period, pb = bwd->period, rerun_at = tok->count;

	why[0] = 0;
	if (contains_cyclic(tok->sig + bwd->start, bwd->period, f, pf))
		pb -= pf;
	for (size_t t = 0; t < tok->count && rerun_at == tok->count; t++) {
		size_t skip = in_forward_stack(fr, nf, layers, t);
		if (skip)
			t = skip - 1;
		else if (matches(tok, t, f, pf))
			rerun_at = t;
	}
	if (rerun_at == tok->count || !pb || rerun_at + pf + pb > tok->count)
		return -EINVAL;
	const uint64_t *b = tok->sig + rerun_at + pf;

	size_t *unit_start = malloc(nf * layers * sizeof(*unit_start));
	size_t *stack_start = malloc(nf * sizeof(*stack_start));
	bool *reruns = calloc(nf * layers, sizeof(*reruns));
	size_t stacks = 0;
	int err = 0;
	if (!unit_start || !stack_start || !reruns) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t t = 0; t < tok->count && !err;) {
		size_t skip = in_forward_stack(fr, nf, layers, t);
		bool rerun = matches(tok, t, f, pf) && matches(tok, t + pf, b, pb);
		if (skip || (!rerun && !matches(tok, t, b, pb))) {
			t = skip ? skip : t + 1;
			continue;
		}
		if (stacks == nf) {
			snprintf(why, why_len, "a backward at token %zu beyond %zu stacks", t, nf);
			err = -EINVAL;
			break;
		}
		stack_start[stacks] = t;
		for (size_t u = 0; u < layers; u++) {
			rerun = matches(tok, t, f, pf) && matches(tok, t + pf, b, pb);
			if (in_forward_stack(fr, nf, layers, t) ||
			    (!rerun && !matches(tok, t, b, pb))) {
				snprintf(why, why_len,
				         "the backward stack at token %zu ends after %zu of %zu "
				         "layers",
				         stack_start[stacks], u, layers);
				err = -EINVAL;
				break;
			}
			unit_start[stacks * layers + u] = t;
			reruns[stacks * layers + u] = rerun;
			t += (rerun ? pf : 0) + pb;
		}
		stacks++;
	}
	if (!err && stacks != nf) {
		snprintf(why, why_len, "%zu forward stacks but %zu backward stacks", nf, stacks);
		err = -EINVAL;
	}
	for (size_t i = 0; i + 1 < nf && !err; i++)
		if (!apart(trace, tok, &fr[i], &fr[i + 1], NULL, stacks, stack_start)) {
			snprintf(why, why_len,
			         "forward stacks at tokens %zu and %zu follow each other with no "
			         "backward and no pipeline send or receive between them",
			         fr[i].start, fr[i + 1].start);
			err = -EINVAL;
		}
	if (err)
		goto out;
	for (size_t m = 1; m < nf && !err; m++)
		for (size_t u = 0; u < layers && !err; u++)
			if (reruns[m * layers + u] != reruns[u]) {
				snprintf(why, why_len,
				         "layer %zu %s its forward in micro-batch 0's backward "
				         "and %s in micro-batch %zu's",
				         layers - 1 - u, reruns[u] ? "reruns" : "does not rerun",
				         reruns[u] ? "does not" : "does", m);
				err = -EINVAL;
			}
	if (err)
		goto out;
	out->fwd = calloc(nf * layers, sizeof(*out->fwd));
	out->bwd = calloc(nf * layers, sizeof(*out->bwd));
	out->reruns = calloc(layers, sizeof(*out->reruns));
	if (!out->fwd || !out->bwd || !out->reruns) {
		err = -ENOMEM;
		goto out;
	}
	out->layers = layers;
	out->microbatches = nf;
	out->fwd_period = pf;
	out->bwd_period = pb;
	for (size_t u = 0; u < layers; u++)
		out->reruns[layers - 1 - u] = reruns[u];
	fill(tok, it, fr, nf, layers, false, out->fwd);
	for (size_t m = 0; m < nf; m++)
		for (size_t u = 0; u < layers; u++) {
			size_t a = unit_start[m * layers + u];
			size_t end = a + (reruns[m * layers + u] ? pf : 0) + pb;
			out->bwd[m * layers + layers - 1 - u] = (struct lynx_prof_segment){
			        a ? tok->event[a - 1] + 1 : it->first, tok->event[end - 1] + 1};
		}
out:
	free(unit_start);
	free(stack_start);
	free(reruns);
	return err;
}

static int classify(const struct lynx_prof_trace *trace, const struct lynx_prof_tokens *tok,
                    const struct lynx_prof_iteration *it, struct lynx_prof_run *acc, size_t nacc,
                    struct lynx_prof_layers *out, char *why, size_t why_len)
{
	struct class *cls = calloc(nacc, sizeof(*cls));
	uint64_t *keys = malloc(nacc * sizeof(*keys));
	size_t ncls = 0;
	int err = 0;

	if (!cls || !keys) {
		err = -ENOMEM;
		goto out;
	}
	qsort(acc, nacc, sizeof(*acc), by_start);
	for (size_t i = 0; i < nacc; i++) {
		size_t c = 0;
		keys[i] = lynx_prof_unit_key(tok->sig + acc[i].start, acc[i].period);
		while (c < ncls && cls[c].key != keys[i])
			c++;
		if (c == ncls)
			cls[ncls++] = (struct class){keys[i], 0, 0, acc[i].start};
		cls[c].covered += covered(&acc[i]);
		cls[c].count++;
	}
	if (ncls < 2) {
		snprintf(why, why_len, "found %zu layer motif(s), need a forward and a backward",
		         ncls);
		err = -EINVAL;
		goto out;
	}
	/*
	 * Among the motifs that are a real share of the work (a layer stack is, a kernel
	 * launched twice in a row is not), the forward is the first to start and the backward
	 * the next one: the backward follows the forward it differentiates. Later stacks are
	 * not layers: an optimizer or a loop over the parameters that the trainer runs per
	 * layer repeats as many times as there are layers, after the backward. Classes were
	 * made in start order.
	 */
	size_t pick[2], picked = 0, largest_other = 0;
	for (size_t c = 0; c < ncls; c++) {
		if (10 * cls[c].covered >= tok->count && picked < 2)
			pick[picked++] = c;
		else if (cls[c].covered > largest_other)
			largest_other = cls[c].covered;
	}
	if (picked < 2) {
		snprintf(why, why_len,
		         "the second layer motif covers %zu of %zu tokens (under 10%%): "
		         "one layer per stage?",
		         largest_other, tok->count);
		err = -EINVAL;
		goto out;
	}
	const struct class *fwd = &cls[pick[0]], *bwd = &cls[pick[1]];
	/* Gather each class's runs together, in start order. */
	struct lynx_prof_run *fr = malloc(nacc * sizeof(*fr)), *br = malloc(nacc * sizeof(*br));
	size_t nf = 0, nb = 0;
	if (!fr || !br) {
		free(fr);
		free(br);
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < nacc; i++) {
		align_on_threads(trace, tok, &acc[i]);
		if (keys[i] == fwd->key)
			fr[nf++] = acc[i];
		else if (keys[i] == bwd->key)
			br[nb++] = acc[i];
	}
	for (size_t i = 0; i + 1 < nf && !err; i++)
		if (!apart(trace, tok, &fr[i], &fr[i + 1], br, nb, NULL)) {
			snprintf(why, why_len,
			         "forward stacks at tokens %zu and %zu follow each other with no "
			         "backward and no pipeline send or receive between them: a loop "
			         "inside the layer (%zu launches a turn), not the layers",
			         fr[i].start, fr[i + 1].start, fr[i].period);
			err = -EINVAL;
		}
	size_t layers = (fr[0].end - fr[0].start) / fr[0].period;
	bool stacks_checked = !err, mixed = false;
	for (size_t i = 0; i < nf + nb && !err; i++) {
		const struct lynx_prof_run *r = i < nf ? &fr[i] : &br[i - nf];
		if ((r->end - r->start) / r->period != layers) {
			snprintf(why, why_len,
			         "%s stack at token %zu has %zu layers, the first forward %zu",
			         i < nf ? "forward" : "backward", r->start,
			         (r->end - r->start) / r->period, layers);
			err = -EINVAL;
		}
	}
	if (!err && nf != nb) {
		snprintf(why, why_len, "%zu forward stacks but %zu backward stacks", nf, nb);
		err = -EINVAL;
	}
	/* Stacks that disagree may be backwards of layers with and without a rerun. */
	if (stacks_checked && err == -EINVAL) {
		char mixed_why[256];
		int m = mixed_backward(trace, tok, it, fr, nf, layers, &br[0], out, mixed_why,
		                       sizeof(mixed_why));
		if (m == 0)
			err = 0, mixed = true;
		else if (m == -ENOMEM)
			err = m;
		else if (mixed_why[0] && why_len > strlen(why) + 1)
			snprintf(why + strlen(why), why_len - strlen(why),
			         " (as a backward of layers with and without a rerun: %s)",
			         mixed_why);
	}
	if (!err && !mixed) {
		out->layers = layers;
		out->microbatches = nf;
		out->fwd_period = fr[0].period;
		out->bwd_period = br[0].period;
		bool rerun = contains_cyclic(tok->sig + br[0].start, br[0].period,
		                             tok->sig + fr[0].start, fr[0].period);
		out->fwd = calloc(nf * layers, sizeof(*out->fwd));
		out->bwd = calloc(nf * layers, sizeof(*out->bwd));
		out->reruns = calloc(layers, sizeof(*out->reruns));
		if (!out->fwd || !out->bwd || !out->reruns) {
			err = -ENOMEM;
		} else {
			for (size_t k = 0; k < layers; k++)
				out->reruns[k] = rerun;
			fill(tok, it, fr, nf, layers, false, out->fwd);
			fill(tok, it, br, nb, layers, true, out->bwd);
		}
	}
	free(fr);
	free(br);
out:
	free(cls);
	free(keys);
	return err;
}

/* Segments the iteration from tokens tok (segment.h's method). */
static int segment_tokens(const struct lynx_prof_trace *trace, const struct lynx_prof_iteration *it,
                          const struct lynx_prof_tokens *tok, struct lynx_prof_layers *out,
                          char *why, size_t why_len)
{
	struct lynx_prof_run *runs = NULL, *acc = NULL;
	unsigned char *mark = NULL;
	size_t nruns = 0, nacc = 0;
	int err;

	if ((err = lynx_prof_find_runs(tok->sig, tok->count, &runs, &nruns)))
		return err;
	mark = malloc(tok->count ? tok->count : 1);
	acc = malloc((nruns ? nruns : 1) * sizeof(*acc));
	if (!mark || !acc) {
		err = -ENOMEM;
		goto out;
	}
	/* Atomic runs, the best-covering first; keep those that overlap no kept run by half. */
	struct lynx_prof_run *cand = malloc((nruns ? nruns : 1) * sizeof(*cand));
	size_t ncand = 0;
	if (!cand) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < nruns; i++)
		if (atomic(runs, nruns, &runs[i], mark))
			cand[ncand++] = runs[i];
	qsort(cand, ncand, sizeof(*cand), by_cover);
	for (size_t i = 0; i < ncand; i++) {
		size_t a = cand[i].start, b = a + covered(&cand[i]), overlap = 0;
		for (size_t k = 0; k < nacc; k++) {
			size_t c = acc[k].start, d = c + covered(&acc[k]);
			size_t from = a > c ? a : c, to = b < d ? b : d;
			if (to > from)
				overlap += to - from;
		}
		if (2 * overlap < b - a)
			acc[nacc++] = cand[i];
	}
	free(cand);
	err = nacc ? classify(trace, tok, it, acc, nacc, out, why, why_len) : -EINVAL;
	if (!nacc)
		snprintf(why, why_len, "no repeated motif in the iteration's %zu tokens",
		         tok->count);
out:
	free(mark);
	free(acc);
	free(runs);
	return err;
}

/* out empty, with room for every token of tok; false (out freed) when out of memory. */
static bool empty_like(const struct lynx_prof_tokens *tok, struct lynx_prof_tokens *out)
{
	out->sig = malloc((tok->count ? tok->count : 1) * sizeof(*out->sig));
	out->event = malloc((tok->count ? tok->count : 1) * sizeof(*out->event));
	out->count = 0;
	if (out->sig && out->event)
		return true;
	lynx_prof_tokens_free(out);
	return false;
}

/*
 * tok without its collectives, copies and memsets (kernels, pipeline sends and receives
 * stay). Data parallelism all-reduces gradient buckets during the backward, from the
 * backward's own thread, at places that follow the buckets' sizes, not the layers: DDP
 * copies each finished bucket's gradients into its flat buffer and all-reduces it, every
 * few layers, which breaks the backward motif. Without them the layers repeat, and what
 * was left out still falls inside the segments that hold its place. Tensor parallelism's
 * collectives sit at the same place in every layer, so the first look, with them, finds
 * those layers.
 */
static int without_collectives(const struct lynx_prof_trace *trace,
                               const struct lynx_prof_tokens *tok, struct lynx_prof_tokens *out)
{
	if (!empty_like(tok, out))
		return -ENOMEM;
	for (size_t i = 0; i < tok->count; i++) {
		enum lynx_prof_kind kind = trace->events[tok->event[i]].kind;
		if (kind == LYNX_PROF_COLL || kind == LYNX_PROF_COPY || kind == LYNX_PROF_MEMSET)
			continue;
		out->sig[out->count] = tok->sig[i];
		out->event[out->count++] = tok->event[i];
	}
	return 0;
}

/* The longest inner loop turn (launches per turn) that without_inner_loops() collapses: an
 * expert's, a head's or a chunk's few kernels, shorter than any layer. */
#define INNER_LOOP_MAX_PERIOD 8

/*
 * Collapses, in place, every stretch of tokens [0, n) made of one block of p tokens repeated
 * back to back into that block once; each of its tokens keeps the event of the stretch's
 * last turn, so that a segment ending with the block takes the whole stretch and the next
 * one starts after it. Returns the new count.
 */
static size_t collapse_turns(uint64_t *sig, uint32_t *event, size_t n, size_t p)
{
	size_t kept = 0, i = 0;

	while (i < n) {
		size_t turns = 1;
		while (i + (turns + 1) * p <= n &&
		       !memcmp(sig + i + turns * p, sig + i, p * sizeof(*sig)))
			turns++;
		if (turns < 2) {
			sig[kept] = sig[i];
			event[kept++] = event[i++];
			continue;
		}
		for (size_t j = 0; j < p; j++) {
			sig[kept + j] = sig[i + j];
			event[kept + j] = event[i + (turns - 1) * p + j];
		}
		kept += p;
		i += turns * p;
	}
	return kept;
}

/*
 * tok with every inner loop made one turn: a block of at most INNER_LOOP_MAX_PERIOD
 * launches that the trainer repeats back to back, once per sequence, chunk, head or expert
 * (tinytrain's attention dropout, one launch per sequence; a mixture of experts run one
 * expert after another, a few kernels each). Such a loop is a run of a shorter period inside
 * each layer, and once it is half of the layer's launches the layer's own run no longer looks
 * atomic: the loop is taken for the layer. Shorter turns are collapsed first, so that a loop
 * of one kernel inside a longer turn does not hide the longer one.
 */
static int without_inner_loops(const struct lynx_prof_trace *trace,
                               const struct lynx_prof_tokens *tok, struct lynx_prof_tokens *out)
{
	(void)trace;
	if (!empty_like(tok, out))
		return -ENOMEM;
	memcpy(out->sig, tok->sig, tok->count * sizeof(*out->sig));
	memcpy(out->event, tok->event, tok->count * sizeof(*out->event));
	out->count = tok->count;
	for (size_t p = 1; p <= INNER_LOOP_MAX_PERIOD; p++)
		out->count = collapse_turns(out->sig, out->event, out->count, p);
	return 0;
}

/*
 * The looks at an iteration's tokens, in the order they are tried:
 * LYNX_SEGMENT_LOOK(name, from, leave_out, text): look `from`'s tokens with leave_out
 * applied (the first look is the tokens as recorded, from nothing).
 */
#define LYNX_SEGMENT_LOOKS                                                                   \
	LYNX_SEGMENT_LOOK(AS_RECORDED, AS_RECORDED, NULL, "")                                \
	LYNX_SEGMENT_LOOK(WITHOUT_COLLECTIVES, AS_RECORDED, without_collectives,             \
	                  "without its collectives and copies")                              \
	LYNX_SEGMENT_LOOK(WITHOUT_INNER_LOOPS, AS_RECORDED, without_inner_loops,             \
	                  "with each inner loop as one turn")                                \
	LYNX_SEGMENT_LOOK(WITHOUT_BOTH, WITHOUT_COLLECTIVES, without_inner_loops,            \
	                  "without collectives and copies, and with each inner loop as one " \
	                  "turn")

enum segment_look {
#define LYNX_SEGMENT_LOOK(name, from, leave_out, text) LOOK_##name,
	LYNX_SEGMENT_LOOKS
#undef LYNX_SEGMENT_LOOK
	        LOOK_COUNT
};

static const struct {
	enum segment_look from;
	int (*leave_out)(const struct lynx_prof_trace *trace, const struct lynx_prof_tokens *tok,
	                 struct lynx_prof_tokens *out);
	const char *text;
} looks[] = {
#define LYNX_SEGMENT_LOOK(name, from, leave_out, text) {LOOK_##from, leave_out, text},
        LYNX_SEGMENT_LOOKS
#undef LYNX_SEGMENT_LOOK
};

static bool same_tokens(const struct lynx_prof_tokens *a, const struct lynx_prof_tokens *b)
{
	return a->count == b->count && !memcmp(a->event, b->event, a->count * sizeof(*a->event));
}

int lynx_prof_segment_layers(const struct lynx_prof_trace *trace,
                             const struct lynx_prof_iteration *it, struct lynx_prof_layers *out,
                             char *why, size_t why_len)
{
	struct lynx_prof_tokens look[LOOK_COUNT] = {0};
	char look_why[256];
	int err = -EINVAL;

	memset(out, 0, sizeof(*out));
	if (why_len)
		why[0] = 0;
	/*
	 * The tokens as recorded first: tensor parallelism's collectives sit at the same place
	 * in every layer and help. Then without what breaks the motif when it does not: data
	 * parallelism's bucket all-reduces, inner loops of one kernel, or both. A look that
	 * finds nothing adds its reason to why; one that left nothing out is not made again.
	 */
	for (int k = 0; k < LOOK_COUNT && err == -EINVAL; k++) {
		struct lynx_prof_tokens *tok = &look[k];
		int made = k == LOOK_AS_RECORDED
		                   ? lynx_prof_tokenise(trace, it->first, it->end, tok)
		                   : looks[k].leave_out(trace, &look[looks[k].from], tok);
		if (made) {
			err = made;
			break;
		}
		bool seen = false;
		for (int e = 0; e < k && !seen; e++)
			seen = same_tokens(tok, &look[e]);
		if (seen)
			continue;
		lynx_prof_layers_free(out);
		err = segment_tokens(trace, it, tok, out, look_why, sizeof(look_why));
		if (err == -EINVAL && why_len > strlen(why) + 1)
			snprintf(why + strlen(why), why_len - strlen(why), "%s%s%s%s",
			         k ? "; " : "", looks[k].text, k ? ": " : "", look_why);
	}
	for (int k = 0; k < LOOK_COUNT; k++)
		lynx_prof_tokens_free(&look[k]);
	if (err) {
		if (err == -ENOMEM)
			snprintf(why, why_len, "out of memory");
		lynx_prof_layers_free(out);
	}
	return err;
}

void lynx_prof_layers_free(struct lynx_prof_layers *layers)
{
	free(layers->fwd);
	free(layers->bwd);
	free(layers->reruns);
	memset(layers, 0, sizeof(*layers));
}
