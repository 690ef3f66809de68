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

/* Where unit a (length na) first occurs in unit b (length nb) read cyclically; nb when it
 * does not. */
static size_t find_cyclic(const uint64_t *b, size_t nb, const uint64_t *a, size_t na)
{
	if (na > nb)
		return nb;
	for (size_t s = 0; s < nb; s++) {
		size_t k = 0;
		while (k < na && b[(s + k) % nb] == a[k])
			k++;
		if (k == na)
			return s;
	}
	return nb;
}

/* The segment of tokens [a, b): from just after the token before a (the iteration's first
 * event for the first token) to b's last token's event. */
static struct lynx_prof_segment segment_of(const struct lynx_prof_tokens *tok,
                                           const struct lynx_prof_iteration *it, size_t a, size_t b)
{
	return (struct lynx_prof_segment){a ? tok->event[a - 1] + 1 : it->first,
	                                  tok->event[b - 1] + 1};
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
			seg[m * layers + layer] = segment_of(tok, it, a, b);
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

/* The forward and plain backward units a recomputing backward is read with. */
struct units {
	const uint64_t *f, *b;
	size_t pf, pb;
};

/* How many forward units F, back to back, start at token t and are followed by B: a layer's
 * backward unit, with the forwards it reruns first; -1 when no B follows them. */
static long backward_unit(const struct lynx_prof_tokens *tok, const struct units *u, size_t t)
{
	long k = 0;

	while (matches(tok, t + (size_t)k * u->pf, u->f, u->pf))
		k++;
	return matches(tok, t + (size_t)k * u->pf, u->b, u->pb) ? k : -1;
}

/* A reading of an iteration's backward stacks (mixed_backward()). */
struct reading {
	struct lynx_prof_run *fwd; /* the forward stacks: fr's runs that are no rerun */
	size_t nf;
	size_t *unit_start; /* [stack * layers + u]: u-th unit, layer layers - 1 - u */
	long *reruns;       /* [stack * layers + u]: the forwards that unit reruns first */
	size_t *stack_start;
	size_t stacks;
};

/*
 * Reads the backward stacks of tok with units u (mixed_backward()): 0, or -EINVAL with why.
 * The forward stacks are fr's runs of `layers` units, and the first `layers` of a longer run
 * that B follows (a group's reruns right after a forward stack, as an interleaved schedule
 * can run them); when whole_groups, only those of `layers` units that no B follows: a group
 * of every layer of a stage reruns them all back to back before the backwards, but a real
 * forward stack may also be followed at once by a backward (a pipeline stage's steady
 * state), so that reading comes second.
 */
static int read_backwards(const struct lynx_prof_trace *trace, const struct lynx_prof_tokens *tok,
                          const struct lynx_prof_run *fr, size_t nfr, size_t layers,
                          const struct units *u, bool whole_groups, struct reading *rd, char *why,
                          size_t why_len)
{
	rd->nf = 0;
	for (size_t i = 0; i < nfr; i++) {
		size_t units = (fr[i].end - fr[i].start) / fr[i].period;
		bool then_b = matches(tok, fr[i].start + units * fr[i].period, u->b, u->pb);
		/* A forward stack and a group's reruns right after it are one run of F. */
		if ((units == layers && !(whole_groups && then_b)) || (units > layers && then_b)) {
			rd->fwd[rd->nf] = fr[i];
			rd->fwd[rd->nf++].end = fr[i].start + layers * fr[i].period;
		}
	}
	rd->stacks = 0;
	for (size_t t = 0; t < tok->count;) {
		size_t skip = in_forward_stack(rd->fwd, rd->nf, layers, t);
		if (skip || backward_unit(tok, u, t) < 0) {
			t = skip ? skip : t + 1;
			continue;
		}
		if (rd->stacks == rd->nf) {
			snprintf(why, why_len, "a backward at token %zu beyond %zu stacks", t,
			         rd->nf);
			return -EINVAL;
		}
		rd->stack_start[rd->stacks] = t;
		for (size_t k = 0; k < layers; k++) {
			long rerun = backward_unit(tok, u, t);
			size_t at = rd->stacks * layers + k;
			if (in_forward_stack(rd->fwd, rd->nf, layers, t) || rerun < 0 ||
			    (size_t)rerun > layers - k) {
				snprintf(why, why_len,
				         "the backward stack at token %zu ends after %zu of %zu "
				         "layers",
				         rd->stack_start[rd->stacks], k, layers);
				return -EINVAL;
			}
			rd->unit_start[at] = t;
			rd->reruns[at] = rerun;
			t += (size_t)rerun * u->pf + u->pb;
		}
		rd->stacks++;
	}
	if (rd->stacks != rd->nf || !rd->nf) {
		snprintf(why, why_len, "%zu forward stacks but %zu backward stacks", rd->nf,
		         rd->stacks);
		return -EINVAL;
	}
	for (size_t i = 0; i + 1 < rd->nf; i++)
		if (!apart(trace, tok, &rd->fwd[i], &rd->fwd[i + 1], NULL, rd->stacks,
		           rd->stack_start)) {
			snprintf(why, why_len,
			         "forward stacks at tokens %zu and %zu follow each other with no "
			         "backward and no pipeline send or receive between them",
			         rd->fwd[i].start, rd->fwd[i + 1].start);
			return -EINVAL;
		}
	/* Without a rerun this is no recomputing backward, and what a plain reading found
	 * wrong stands (an inner loop's turns would read as plain units). */
	long reruns = 0;
	for (size_t k = 0; k < layers; k++)
		reruns += rd->reruns[k];
	if (!reruns) {
		snprintf(why, why_len, "no layer's backward reruns a forward");
		return -EINVAL;
	}
	for (size_t m = 1; m < rd->nf; m++)
		for (size_t k = 0; k < layers; k++)
			if (rd->reruns[m * layers + k] != rd->reruns[k]) {
				snprintf(
				        why, why_len,
				        "layer %zu's backward reruns %ld forwards in micro-batch 0 "
				        "and %ld in micro-batch %zu",
				        layers - 1 - k, rd->reruns[k], rd->reruns[m * layers + k],
				        m);
				return -EINVAL;
			}
	return 0;
}

/*
 * A backward that reruns the forward of some layers (Megatron's recompute methods): a layer's
 * backward unit is then B, the plain backward, after the forward units F it reruns, if any.
 * Under the block method (--recompute-method block --recompute-num-layers N) a stack is L-N
 * units B, then N units F.B; under the uniform method (groups of N layers checkpointed
 * together) each group's top layer's unit is F^N.B, the others' B. No one motif covers such a
 * stack, so it is read with F, the forward stacks' unit, and B: the backward motif bwd less
 * F's when that motif holds F (F.B cut after F), else bwd's own, from the phase its run
 * starts at, or the first of its rotations that reads every stack. A stack starts where a
 * unit first matches outside the forward stacks (runs of L units of F; failing that, those
 * that no B follows, read_backwards()), and is read unit by unit until it holds a backward
 * of every layer; a layer's backward segment holds the forwards its unit reruns, and the
 * layers whose forwards those are rerun. Returns 0 with out filled, -EINVAL with why,
 * -ENOMEM.
 */
static int mixed_backward(const struct lynx_prof_trace *trace, const struct lynx_prof_tokens *tok,
                          const struct lynx_prof_iteration *it, const struct lynx_prof_run *fr,
                          size_t nfr, size_t layers, const struct lynx_prof_run *bwd,
                          struct lynx_prof_layers *out, char *why, size_t why_len)
{
	const uint64_t *unit = tok->sig + bwd->start;
	size_t pf = fr[0].period, period = bwd->period, rotations = period, from = 0;
	struct reading rd = {malloc(nfr * sizeof(*rd.fwd)),
	                     0,
	                     malloc(nfr * layers * sizeof(*rd.unit_start)),
	                     calloc(nfr * layers, sizeof(*rd.reruns)),
	                     malloc(nfr * sizeof(*rd.stack_start)),
	                     0};
	uint64_t *b = malloc(period * sizeof(*b));
	char first_why[256] = "";
	int err = -EINVAL;

	if (!rd.fwd || !rd.unit_start || !rd.reruns || !rd.stack_start || !b) {
		err = -ENOMEM;
		goto out;
	}
	/* Where F ends in bwd's unit read cyclically: B starts there, and only there. */
	size_t f_at = period > pf ? find_cyclic(unit, period, tok->sig + fr[0].start, pf) : period;
	if (f_at < period) {
		from = f_at + pf;
		rotations = 1;
	}
	struct units u = {tok->sig + fr[0].start, b, pf, rotations == 1 ? period - pf : period};
	for (size_t r = 0; r < 2 * rotations && err == -EINVAL; r++) {
		char later_why[256];
		for (size_t k = 0; k < u.pb; k++)
			b[k] = unit[(from + r % rotations + k) % period];
		err = read_backwards(trace, tok, fr, nfr, layers, &u, r >= rotations, &rd,
		                     r ? later_why : first_why,
		                     r ? sizeof(later_why) : sizeof(first_why));
	}
	snprintf(why, why_len, "%s", first_why); /* what the phase of bwd's run gives */
	if (err)
		goto out;
	out->fwd = calloc(rd.nf * layers, sizeof(*out->fwd));
	out->bwd = calloc(rd.nf * layers, sizeof(*out->bwd));
	out->reruns = calloc(layers, sizeof(*out->reruns));
	if (!out->fwd || !out->bwd || !out->reruns) {
		err = -ENOMEM;
		goto out;
	}
	out->layers = layers;
	out->microbatches = rd.nf;
	out->fwd_period = pf;
	out->bwd_period = u.pb;
	fill(tok, it, rd.fwd, rd.nf, layers, false, out->fwd);
	for (size_t k = 0; k < layers; k++)
		for (long j = 0; j < rd.reruns[k]; j++)
			out->reruns[layers - 1 - k - (size_t)j] = true;
	for (size_t m = 0; m < rd.nf; m++)
		for (size_t k = 0; k < layers; k++) {
			size_t a = rd.unit_start[m * layers + k];
			size_t end = a + (size_t)rd.reruns[m * layers + k] * pf + u.pb;
			out->bwd[m * layers + layers - 1 - k] = segment_of(tok, it, a, end);
		}
out:
	free(rd.fwd);
	free(rd.unit_start);
	free(rd.reruns);
	free(rd.stack_start);
	free(b);
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
	/* Forward stacks not apart may be a group's rerun forwards (Megatron's uniform method,
	 * before their backwards), not an inner loop: mixed_backward() tells them apart. */
	bool apart_all = !err, mixed = false;
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
	/* Stacks that disagree may be backwards of layers with and without reruns. */
	if (err == -EINVAL) {
		char mixed_why[256];
		int m = mixed_backward(trace, tok, it, fr, nf, layers, &br[0], out, mixed_why,
		                       sizeof(mixed_why));
		if (m == 0)
			err = 0, mixed = true;
		else if (m == -ENOMEM)
			err = m;
		else if (apart_all && mixed_why[0] && why_len > strlen(why) + 1)
			snprintf(why + strlen(why), why_len - strlen(why),
			         " (as a backward of layers with and without a rerun: %.200s)",
			         mixed_why);
	}
	if (!err && !mixed) {
		out->layers = layers;
		out->microbatches = nf;
		out->fwd_period = fr[0].period;
		out->bwd_period = br[0].period;
		bool rerun = find_cyclic(tok->sig + br[0].start, br[0].period,
		                         tok->sig + fr[0].start, fr[0].period) < br[0].period;
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
