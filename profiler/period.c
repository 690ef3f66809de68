/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Finds the training iteration: tokenises the trace into signatures of the work it
 * launches, finds the stretches that repeat (runs), and picks the period of a training
 * iteration among them (period.h states the rules).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fnv.h"
#include "period.h"

/* ---- Signatures -------------------------------------------------------------------------- */

static uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	h ^= h >> 31;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 29;
	return h;
}

static uint64_t mix_string(uint64_t h, const char *s)
{
	return mix(h, lynx_fnv1a_string(s));
}

uint64_t lynx_prof_signature(const struct lynx_prof_event *ev)
{
	uint64_t h = mix(0x1234567ull, (uint64_t)ev->kind + 1);

	if (ev->nested || ev->captured)
		return 0;
	switch (ev->kind) {
	case LYNX_PROF_LAUNCH:
		/* The kernel by its name where it has one: the same kernel through several
		 * handles is one token. */
		h = mix(h, ev->u.launch.name_hash ? ev->u.launch.name_hash : ev->u.launch.function);
		for (int i = 0; i < 3; i++)
			h = mix(mix(h, ev->u.launch.grid[i]), ev->u.launch.block[i]);
		h = mix(h, ev->u.launch.shared);
		break;
	case LYNX_PROF_COLL:
	case LYNX_PROF_P2P:
		h = mix_string(h, ev->hook);
		h = mix(mix(h, ev->u.nccl.count), (uint64_t)(uint32_t)ev->u.nccl.type);
		h = mix(mix(h, (uint64_t)(uint32_t)ev->u.nccl.op),
		        (uint64_t)(uint32_t)ev->u.nccl.peer);
		break;
	case LYNX_PROF_GROUP:
	case LYNX_PROF_SYNC:
	case LYNX_PROF_HOST_FUNC:
		h = mix_string(h, ev->hook);
		break;
	case LYNX_PROF_COPY:
		h = mix(mix(h, (uint64_t)(uint32_t)ev->u.copy.direction), ev->u.copy.bytes);
		break;
	case LYNX_PROF_MEMSET:
		h = mix(h, ev->u.mem.bytes);
		break;
	case LYNX_PROF_GRAPH:
		if (!strstr(ev->hook, "GraphLaunch"))
			return 0;
		h = mix(mix_string(h, ev->hook), ev->u.sync.handle);
		break;
	default:
		return 0;
	}
	return h ? h : 1;
}

int lynx_prof_tokenise(const struct lynx_prof_trace *trace, size_t first, size_t end,
                       struct lynx_prof_tokens *out)
{
	size_t n = 0;

	memset(out, 0, sizeof(*out));
	if (end > trace->count)
		end = trace->count;
	if (first >= end)
		return 0;
	out->sig = malloc((end - first) * sizeof(*out->sig));
	out->event = malloc((end - first) * sizeof(*out->event));
	if (!out->sig || !out->event) {
		lynx_prof_tokens_free(out);
		return -ENOMEM;
	}
	for (size_t i = first; i < end; i++) {
		uint64_t sig = lynx_prof_signature(&trace->events[i]);
		if (!sig)
			continue;
		out->sig[n] = sig;
		out->event[n++] = (uint32_t)i;
	}
	out->count = n;
	return 0;
}

void lynx_prof_tokens_free(struct lynx_prof_tokens *tokens)
{
	free(tokens->sig);
	free(tokens->event);
	memset(tokens, 0, sizeof(*tokens));
}

/* ---- Runs -------------------------------------------------------------------------------- */

struct pos {
	uint64_t sig;
	size_t at;
};

static int by_sig(const void *a, const void *b)
{
	const struct pos *x = a, *y = b;

	if (x->sig != y->sig)
		return x->sig < y->sig ? -1 : 1;
	return x->at < y->at ? -1 : x->at > y->at;
}

static int by_size(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;

	return x < y ? -1 : x > y;
}

/* The distinct distances between consecutive occurrences of a signature, up to n / 2. */
static int candidates(const uint64_t *sig, size_t n, size_t **out, size_t *count)
{
	struct pos *p = malloc(n * sizeof(*p));
	size_t *q = malloc(n * sizeof(*q)), k = 0;

	if (!p || !q) {
		free(p);
		free(q);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		p[i] = (struct pos){sig[i], i};
	qsort(p, n, sizeof(*p), by_sig);
	for (size_t i = 1; i < n; i++)
		if (p[i].sig == p[i - 1].sig && p[i].at - p[i - 1].at <= n / 2)
			q[k++] = p[i].at - p[i - 1].at;
	free(p);
	qsort(q, k, sizeof(*q), by_size);
	size_t m = 0;
	for (size_t i = 0; i < k; i++)
		if (!m || q[m - 1] != q[i])
			q[m++] = q[i];
	*out = q;
	*count = m;
	return 0;
}

static int push_run(struct lynx_prof_run **runs, size_t *count, size_t *cap,
                    struct lynx_prof_run run)
{
	if (*count == *cap) {
		size_t n = *cap ? 2 * *cap : 256;
		struct lynx_prof_run *r = realloc(*runs, n * sizeof(*r));
		if (!r)
			return -ENOMEM;
		*runs = r;
		*cap = n;
	}
	(*runs)[(*count)++] = run;
	return 0;
}

int lynx_prof_find_runs(const uint64_t *sig, size_t n, struct lynx_prof_run **runs, size_t *count)
{
	size_t *q, nq, cap = 0;
	int err;

	*runs = NULL;
	*count = 0;
	if (n < 2)
		return 0;
	if ((err = candidates(sig, n, &q, &nq)))
		return err;
	for (size_t c = 0; c < nq && !err; c++) {
		size_t period = q[c], start = 0;
		for (size_t i = 0; i + period <= n && !err; i++) {
			bool match = i + period < n && sig[i] == sig[i + period];
			if (match)
				continue;
			/* matches over [start, i): the stretch [start, i + period) has the period
			 */
			if (i - start >= period)
				err = push_run(runs, count, &cap,
				               (struct lynx_prof_run){start, i + period, period});
			start = i + 1;
		}
	}
	free(q);
	if (err) {
		free(*runs);
		*runs = NULL;
		*count = 0;
	}
	return err;
}

/* ---- The iteration ----------------------------------------------------------------------- */

static int by_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The number of distinct signatures in sig[0..n); 0 when out of memory. */
size_t lynx_prof_distinct(const uint64_t *sig, size_t n)
{
	uint64_t *copy = malloc((n ? n : 1) * sizeof(*copy));
	size_t d = 0;

	if (!copy)
		return 0;
	memcpy(copy, sig, n * sizeof(*copy));
	qsort(copy, n, sizeof(*copy), by_u64);
	for (size_t i = 0; i < n; i++)
		d += !i || copy[i] != copy[i - 1];
	free(copy);
	return d;
}

static uint64_t spread(uint64_t v)
{
	v ^= v >> 33;
	v *= 0xff51afd7ed558ccdull;
	v ^= v >> 33;
	return v;
}

uint64_t lynx_prof_unit_key(const uint64_t *unit, size_t period)
{
	uint64_t key = spread(period);

	for (size_t i = 0; i < period; i++)
		key += spread(unit[i]);
	return key;
}

/* What each period's runs say about it. */
struct period_score {
	size_t period, covered; /* tokens inside some run of this period */
	size_t best;            /* the index of its longest run */
	size_t distinct;        /* distinct signatures in one unit of that run */
	size_t reach;           /* where its last run ends */
	size_t runs, nruns;     /* its runs: runs[runs .. runs + nruns), in start order */
	bool excluded;          /* taken over, or tried and repeats fewer than two whole times */
};

static bool is_sync(const struct lynx_prof_trace *trace, const struct lynx_prof_tokens *tok,
                    size_t i)
{
	return trace->events[tok->event[i]].kind == LYNX_PROF_SYNC;
}

static uint64_t token_time(const struct lynx_prof_trace *trace, const struct lynx_prof_tokens *tok,
                           size_t i)
{
	return trace->events[tok->event[i]].t_ns;
}

/* One start an iteration can take in a run's unit, with what ranks it (phase()). */
struct phase_choice {
	size_t offset;
	uint64_t gap;
	bool sync;
};

static int by_rank(const void *a, const void *b)
{
	const struct phase_choice *x = a, *y = b;

	if (x->sync != y->sync)
		return x->sync ? -1 : 1;
	if (x->gap != y->gap)
		return x->gap > y->gap ? -1 : 1;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/*
 * The offset in [0, period) of the run's unit where an iteration starts: after a host
 * synchronisation (the first token after a row of them) when the unit has one, ranked by
 * the host-time gap before the token summed over the run; otherwise the longest gap. That
 * is the rank-th choice (0: the best); PHASE_NONE when there is none, PHASE_NOMEM. Past the
 * best, only offsets after a host synchronisation are choices, and only in a unit that has
 * one: a host synchronisation inside a step (a check every few steps) can wait longer than
 * the step's end, and an iteration started there cuts a layer stack in two.
 */
#define PHASE_NONE ((size_t)-1)
#define PHASE_NOMEM ((size_t)-2)
static size_t phase(const struct lynx_prof_trace *trace, const struct lynx_prof_tokens *tok,
                    const struct lynx_prof_run *run, size_t rank)
{
	size_t p = run->period, n = 0, chosen = PHASE_NONE;
	struct phase_choice *c = malloc(p * sizeof(*c));

	if (!c)
		return PHASE_NOMEM;
	for (size_t j = 0; j < p; j++) {
		size_t first = run->start + j;
		uint64_t gap = 0;
		if (first == 0) /* the trace's first token has no predecessor: the next unit */
			first += p;
		if (first >= run->end)
			continue;
		bool sync = is_sync(trace, tok, first - 1) && !is_sync(trace, tok, first);
		for (size_t i = first; i < run->end; i += p)
			gap += token_time(trace, tok, i) - token_time(trace, tok, i - 1);
		c[n++] = (struct phase_choice){j, gap, sync};
	}
	qsort(c, n, sizeof(*c), by_rank);
	if (rank < n && (!rank || c[rank].sync))
		chosen = c[rank].offset;
	free(c);
	return chosen;
}

static int iteration_push(struct lynx_prof_iterations *out, size_t *cap,
                          struct lynx_prof_iteration it)
{
	if (out->count == *cap) {
		size_t n = *cap ? 2 * *cap : 16;
		struct lynx_prof_iteration *a = realloc(out->iter, n * sizeof(*a));
		if (!a)
			return -ENOMEM;
		out->iter = a;
		*cap = n;
	}
	out->iter[out->count++] = it;
	return 0;
}

/* Scores each period that has runs; runs come grouped by period, in start order. */
static int score_periods(const struct lynx_prof_tokens *tok, const struct lynx_prof_run *runs,
                         size_t nruns, struct period_score **out, size_t *count)
{
	struct period_score *s = malloc((nruns ? nruns : 1) * sizeof(*s));
	size_t n = 0;

	if (!s)
		return -ENOMEM;
	for (size_t i = 0; i < nruns;) {
		size_t j = i, covered = 0, reach = 0, best = i;
		for (; j < nruns && runs[j].period == runs[i].period; j++) {
			size_t from = runs[j].start > reach ? runs[j].start : reach;
			if (runs[j].end > from)
				covered += runs[j].end - from;
			if (runs[j].end > reach)
				reach = runs[j].end;
			if (runs[j].end - runs[j].start > runs[best].end - runs[best].start)
				best = j;
		}
		s[n++] = (struct period_score){
		        runs[i].period,
		        covered,
		        best,
		        lynx_prof_distinct(tok->sig + runs[best].start, runs[i].period),
		        reach,
		        i,
		        j - i,
		        false};
		i = j;
	}
	*out = s;
	*count = n;
	return 0;
}

/*
 * Whether `later` took over from `earlier`: a sequence that repeated and stopped, followed
 * by another that began as it ended (the two overlap by less than a unit of the later) and
 * still repeats at the end of the trace. The trainer does something else now: fp16's first
 * steps, whose loss scale overflows, skip the optimizer, and then every step runs it; a
 * set-up loop ends and training begins. A period whose runs lie inside another's stretch (a
 * training step within "k steps and an evaluation", an iteration within two) is no such
 * thing.
 */
static bool taken_over(const struct lynx_prof_run *runs, const struct period_score *earlier,
                       const struct period_score *later, size_t tokens)
{
	size_t earlier_first = runs[earlier->runs].start, later_first = runs[later->runs].start;

	return later_first > earlier_first && later_first + later->period >= earlier->reach &&
	       earlier->reach + earlier->period < tokens && later->reach + later->period >= tokens;
}

/* Excludes each period that another took over from (taken_over): what the trainer no
 * longer does is not its iteration, however much of the trace it covers so far. */
static void exclude_taken_over(const struct lynx_prof_run *runs, struct period_score *s, size_t n,
                               size_t tokens)
{
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < n && !s[i].excluded; j++)
			s[i].excluded = j != i && taken_over(runs, &s[i], &s[j], tokens);
}

/* How many of the tokens that a's runs cover lie inside b's runs (each list in start
 * order; a's runs of one period do not overlap one another by a whole unit, and a token
 * counted twice only makes a look more like b's). */
static size_t covered_inside(const struct lynx_prof_run *runs, const struct period_score *a,
                             const struct period_score *b)
{
	size_t inside = 0;

	for (size_t i = a->runs; i < a->runs + a->nruns; i++)
		for (size_t j = b->runs; j < b->runs + b->nruns; j++) {
			size_t from = runs[i].start > runs[j].start ? runs[i].start : runs[j].start;
			size_t to = runs[i].end < runs[j].end ? runs[i].end : runs[j].end;
			inside += to > from ? to - from : 0;
		}
	return inside;
}

/* The chosen period among those not excluded, or n when every one is. A smaller period
 * wins over the best-covering one only where it repeats inside that one's runs: a step
 * inside "k steps and an evaluation". One that covers other stretches of the trace is
 * another sequence (the steps around a skipped optimizer step repeat without it). */
static size_t choose_period(const struct lynx_prof_run *runs, const struct period_score *s,
                            size_t n)
{
	size_t top = n;

	for (size_t i = 0; i < n; i++)
		if (!s[i].excluded && (top == n || s[i].covered > s[top].covered))
			top = i;
	for (size_t i = 0; i < n && top < n; i++) /* periods come in increasing order */
		if (!s[i].excluded && 2 * s[i].covered >= s[top].covered &&
		    100 * s[i].distinct >= 95 * s[top].distinct &&
		    (i == top || 2 * covered_inside(runs, &s[i], &s[top]) >= s[i].covered))
			return i;
	return top;
}

/*
 * When the program synchronises with the host at all, an iteration holds a
 * synchronisation: a trainer learns its loss, or waits for its step, once per iteration or
 * every few. Short repeats that hold none (initialisation filling one buffer after another,
 * a loop over the parameters, a layer) are never the iteration, however many tokens they
 * cover; nor is a unit without a launch (synchronisations and copies one after another).
 * Keeps, in order, the runs whose unit holds both (every unit of a run holds the same
 * tokens); returns how many. A trace without any synchronisation keeps every run.
 */
static size_t keep_runs_with_sync(const struct lynx_prof_trace *trace,
                                  const struct lynx_prof_tokens *tok, struct lynx_prof_run *runs,
                                  size_t nruns)
{
	size_t kept = 0;
	bool syncs = false;

	for (size_t i = 0; i < tok->count && !syncs; i++)
		syncs = is_sync(trace, tok, i);
	if (!syncs)
		return nruns;
	for (size_t r = 0; r < nruns; r++) {
		bool sync = false, launch = false;
		for (size_t i = runs[r].start; i < runs[r].start + runs[r].period; i++) {
			sync = sync || is_sync(trace, tok, i);
			launch = launch || trace->events[tok->event[i]].kind == LYNX_PROF_LAUNCH;
		}
		if (sync && launch)
			runs[kept++] = runs[r];
	}
	return kept;
}

/* Whether the run's unit is one of units, or a repetition of one. */
static bool run_is_one_of(const struct lynx_prof_tokens *tok, const struct lynx_prof_run *run,
                          const struct lynx_prof_unit *units, size_t count)
{
	const uint64_t *sig = tok->sig + run->start;

	for (size_t u = 0; u < count; u++) {
		size_t p = units[u].period, i = 0;
		if (!p || run->period % p || lynx_prof_unit_key(sig, p) != units[u].key)
			continue;
		while (i + p < run->period && sig[i] == sig[i + p])
			i++;
		if (i + p >= run->period)
			return true;
	}
	return false;
}

/* Keeps, in order, the runs whose unit is none of units nor a repetition of one; returns
 * how many. */
static size_t drop_runs_of(const struct lynx_prof_tokens *tok, struct lynx_prof_run *runs,
                           size_t nruns, const struct lynx_prof_unit *units, size_t count)
{
	size_t kept = 0;

	for (size_t r = 0; r < nruns; r++)
		if (!run_is_one_of(tok, &runs[r], units, count))
			runs[kept++] = runs[r];
	return kept;
}

/* Lists the whole iterations in every run of the chosen period, aligned on unit. */
static int list_iterations(const struct lynx_prof_trace *trace, const struct lynx_prof_tokens *tok,
                           const struct lynx_prof_run *runs, size_t nruns, const uint64_t *unit,
                           size_t p, struct lynx_prof_iterations *out)
{
	size_t cap = 0, next = 0; /* the first token a new iteration may start at */

	for (size_t r = 0; r < nruns; r++) {
		if (runs[r].period != p)
			continue;
		for (size_t x = runs[r].start > next ? runs[r].start : next; x + p <= runs[r].end;
		     x++) {
			if (tok->sig[x] != unit[0] || memcmp(tok->sig + x, unit, p * sizeof(*unit)))
				continue;
			for (; x + p <= runs[r].end; x += p) {
				struct lynx_prof_iteration it;
				it.first = x ? tok->event[x - 1] + 1 : tok->event[0];
				it.end = tok->event[x + p - 1] + 1;
				it.t_start_ns = trace->events[it.first].t_ns;
				it.t_end_ns = trace->events[it.end - 1].t_ns;
				int err = iteration_push(out, &cap, it);
				if (err)
					return err;
			}
			next = x;
			break;
		}
	}
	return 0;
}

int lynx_prof_find_iterations(const struct lynx_prof_trace *trace, struct lynx_prof_iterations *out,
                              char *why, size_t why_len)
{
	return lynx_prof_find_iterations_phase(trace, NULL, 0, 0, out, why, why_len);
}

int lynx_prof_find_iterations_phase(const struct lynx_prof_trace *trace,
                                    const struct lynx_prof_unit *not_iterations, size_t count,
                                    size_t phase_rank, struct lynx_prof_iterations *out, char *why,
                                    size_t why_len)
{
	struct lynx_prof_tokens tok;
	struct lynx_prof_run *runs = NULL;
	struct period_score *scores = NULL;
	size_t nruns = 0, nscores = 0;
	int err;

	memset(out, 0, sizeof(*out));
	if (why_len)
		why[0] = 0;
	if ((err = lynx_prof_tokenise(trace, 0, trace->count, &tok)))
		goto out;
	if ((err = lynx_prof_find_runs(tok.sig, tok.count, &runs, &nruns)))
		goto out_tokens;
	size_t repeats = nruns;
	nruns = keep_runs_with_sync(trace, &tok, runs, nruns);
	size_t with_sync = nruns;
	nruns = drop_runs_of(&tok, runs, nruns, not_iterations, count);
	if ((err = score_periods(&tok, runs, nruns, &scores, &nscores)))
		goto out_runs;
	if (!nscores) {
		if (with_sync)
			snprintf(
			        why, why_len,
			        "in %zu tokens (%zu events), every repeating sequence that holds a "
			        "host synchronisation was found to have no layers",
			        tok.count, trace->count);
		else if (repeats)
			snprintf(why, why_len,
			         "no repeating sequence holds a host synchronisation in %zu tokens "
			         "(%zu events): no iteration has repeated yet",
			         tok.count, trace->count);
		else
			snprintf(why, why_len,
			         "no repeating launch sequence in %zu tokens (%zu events)",
			         tok.count, trace->count);
		err = -EINVAL;
		goto out_scores;
	}
	exclude_taken_over(runs, scores, nscores, tok.count);
	/* A period that repeats fewer than two whole times (a set-up loop over one stage's two
	 * layers, say, in a run of one step) gives way to the next. */
	for (size_t c; (c = choose_period(runs, scores, nscores)) < nscores;
	     scores[c].excluded = true) {
		const struct lynx_prof_run *best = &runs[scores[c].best];
		size_t p = scores[c].period, j = phase(trace, &tok, best, phase_rank);
		if (j == PHASE_NOMEM) {
			err = -ENOMEM;
			goto out_scores;
		}
		if (j == PHASE_NONE) {
			snprintf(why, why_len,
			         "the iteration of %zu tokens has no start choice %zu", p,
			         phase_rank + 1);
			err = -ENOENT;
			goto out_scores;
		}
		/* the unit at the phase lies inside the best run, which holds two whole units */
		const uint64_t *unit = tok.sig + best->start + j;
		out->period = p;
		out->unit_key = lynx_prof_unit_key(unit, p);
		out->count = 0;
		if ((err = list_iterations(trace, &tok, runs, nruns, unit, p, out)))
			goto out_scores;
		if (out->count >= 2)
			break;
	}
	if (out->count < 2) {
		snprintf(why, why_len,
		         "no repeating sequence that holds a host synchronisation repeats twice "
		         "whole in %zu tokens (%zu events): no iteration has repeated yet",
		         tok.count, trace->count);
		err = -EINVAL;
		goto out_scores;
	}
	out->prefix_end = out->iter[0].first;
out_scores:
	free(scores);
out_runs:
	free(runs);
out_tokens:
	lynx_prof_tokens_free(&tok);
out:
	if (err) {
		if (err == -ENOMEM)
			snprintf(why, why_len, "out of memory");
		lynx_prof_iterations_free(out);
	}
	return err;
}

void lynx_prof_iterations_free(struct lynx_prof_iterations *iterations)
{
	free(iterations->iter);
	memset(iterations, 0, sizeof(*iterations));
}
