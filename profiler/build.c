/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Builds one rank's profile from its trace: iterations, layer segments, lifetimes, windows
 * (build.h says what each number means and where it comes from).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build.h"
#include "lifetime.h"
#include "period.h"
#include "segment.h"

size_t lynx_prof_nccl_type_size(int32_t type)
{
	/* ncclDataType_t: int8, uint8, int32, uint32, int64, uint64, float16, float32, float64,
	 * bfloat16, float8 e4m3, float8 e5m2 (nccl.h, 2.19 and later). */
	static const unsigned char size[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

	return type >= 0 && (size_t)type < sizeof(size) ? size[type] : 0;
}

__attribute__((format(printf, 3, 4))) static int refuse(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (why && len) {
		va_start(ap, fmt);
		vsnprintf(why, len, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* Host time before events [first, end): the return of the call before them. */
static uint64_t span_start(const struct lynx_prof_trace *t, size_t first)
{
	return t->events[first ? first - 1 : first].t_ns;
}

static uint64_t span_ns(const struct lynx_prof_trace *t, size_t first, size_t end)
{
	uint64_t a = span_start(t, first), b = t->events[end - 1].t_ns;

	return b > a ? b - a : 0;
}

/* Work the shim timed on the device (dev_* are 0 and 0 otherwise). */
static bool is_timed(const struct lynx_prof_event *e)
{
	return e->dev_start_ns || e->dev_end_ns;
}

/* Device time of events [first, end): from the earliest start to the latest end of the
 * timed work among them. False when none was timed. */
static bool device_span(const struct lynx_prof_trace *t, size_t first, size_t end, uint64_t *ns)
{
	uint64_t start = UINT64_MAX, stop = 0;

	for (size_t i = first; i < end; i++) {
		const struct lynx_prof_event *e = &t->events[i];
		if (!is_timed(e))
			continue;
		start = e->dev_start_ns < start ? e->dev_start_ns : start;
		stop = e->dev_end_ns > stop ? e->dev_end_ns : stop;
	}
	if (start == UINT64_MAX)
		return false;
	*ns = stop > start ? stop - start : 0;
	return true;
}

/*
 * Samples of one duration, device-timed where the shim timed the work, host-timed
 * otherwise; a time is made of device samples when there is any (host spans of the
 * same work also count the launch overhead, so the two are not mixed).
 */
struct samples {
	uint64_t *device, *host;
	size_t n_device, n_host;
};

static int samples_init(struct samples *s, size_t cap)
{
	s->device = calloc(cap + 1, sizeof(*s->device));
	s->host = calloc(cap + 1, sizeof(*s->host));
	s->n_device = s->n_host = 0;
	return s->device && s->host ? 0 : -ENOMEM;
}

static void samples_free(struct samples *s)
{
	free(s->device);
	free(s->host);
}

bool lynx_prof_fully_timed(const struct lynx_prof_trace *t, size_t first, size_t end)
{
	size_t launches = 0;

	for (size_t i = first; i < end; i++) {
		const struct lynx_prof_event *e = &t->events[i];
		if (e->kind != LYNX_PROF_LAUNCH || e->nested)
			continue;
		if (!is_timed(e))
			return false;
		launches++;
	}
	return launches > 0;
}

static void samples_add(struct samples *s, const struct lynx_prof_trace *t, size_t first,
                        size_t end)
{
	uint64_t ns;

	if (lynx_prof_fully_timed(t, first, end) && device_span(t, first, end, &ns))
		s->device[s->n_device++] = ns;
	else
		s->host[s->n_host++] = span_ns(t, first, end);
}

static bool is_program_launch(const struct lynx_prof_event *e)
{
	return e->kind == LYNX_PROF_LAUNCH && !e->nested;
}

static bool is_nccl_call(const struct lynx_prof_event *e)
{
	return (e->kind == LYNX_PROF_COLL || e->kind == LYNX_PROF_P2P) && !e->nested;
}

/* Stream-ordered work the shim times: launches, copies, memsets and NCCL calls. */
static bool is_stream_work(const struct lynx_prof_event *e)
{
	return !e->nested && (e->kind == LYNX_PROF_LAUNCH || e->kind == LYNX_PROF_COPY ||
	                      e->kind == LYNX_PROF_MEMSET || e->kind == LYNX_PROF_COLL ||
	                      e->kind == LYNX_PROF_P2P);
}

/* The program's launches in [first, at). */
static int32_t launches_before(const struct lynx_prof_trace *t, size_t first, size_t at)
{
	int32_t n = 0;

	for (size_t i = first; i < at; i++)
		n += is_program_launch(&t->events[i]);
	return n;
}

static int by_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static int by_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The median (the lower middle one), range and count of v[0..n); sorts v. */
static struct lynx_profile_time median_time(uint64_t *v, size_t n, enum lynx_profile_source source)
{
	if (!n)
		return (struct lynx_profile_time){.source = LYNX_PROFILE_SOURCE_UNKNOWN};
	qsort(v, n, sizeof(*v), by_u64);
	return (struct lynx_profile_time){.source = source,
	                                  .ns = v[(n - 1) / 2],
	                                  .min_ns = v[0],
	                                  .max_ns = v[n - 1],
	                                  .samples = (uint32_t)n};
}

static struct lynx_profile_time samples_time(struct samples *s)
{
	if (s->n_device)
		return median_time(s->device, s->n_device, LYNX_PROFILE_SOURCE_DEVICE);
	return median_time(s->host, s->n_host, LYNX_PROFILE_SOURCE_HOST);
}

static void scale_time(struct lynx_profile_time *t, double factor)
{
	if (t->source != LYNX_PROFILE_SOURCE_DEVICE)
		return;
	t->ns = (uint64_t)((double)t->ns * factor + 0.5);
	t->min_ns = (uint64_t)((double)t->min_ns * factor + 0.5);
	t->max_ns = (uint64_t)((double)t->max_ns * factor + 0.5);
}

static void scale_kernels(struct lynx_profile_kernels *k, double factor)
{
	for (size_t i = 0; k->ns && i < k->count; i++)
		k->ns[i] = (uint64_t)((double)k->ns[i] * factor + 0.5);
}

/*
 * The sample's marks (two per launch) slow the iteration they time when the host, not the
 * device, sets the pace: short kernels. Layer and kernel device times come from that
 * iteration, so they are scaled by how much faster the iterations without the sample ran
 * (factor < 1): Lynx's own cost taken off, in proportion. Device-bound iterations run as
 * fast either way, and keep their times.
 */
static void unsample_layers(struct lynx_profile *p, double factor)
{
	for (size_t l = 0; l < p->layer_count; l++) {
		scale_time(&p->layers[l].forward, factor);
		scale_time(&p->layers[l].backward, factor);
		scale_kernels(&p->layers[l].fwd_kernels, factor);
		scale_kernels(&p->layers[l].bwd_kernels, factor);
	}
}

/* An iteration's anchor (see anchored_iteration_time). */
struct anchor {
	bool found;
	size_t ordinal;    /* of the anchor among the iteration's stream work */
	uint64_t start_ns; /* its device start */
	bool sampled;      /* the iteration holds kernel-level timing besides */
};

/* The iteration's first timed piece of stream work that directly follows a host
 * synchronisation: the shim times that one in every warm-up iteration. */
static struct anchor iteration_anchor(const struct lynx_prof_trace *t,
                                      const struct lynx_prof_iteration *it)
{
	struct anchor a = {0};
	bool after_sync = false;
	size_t work = 0;

	/* An iteration usually begins right after the synchronisation that ended the last. */
	for (size_t i = it->first; i-- > 0 && !is_stream_work(&t->events[i]);) {
		if (t->events[i].kind == LYNX_PROF_SYNC && !t->events[i].nested) {
			after_sync = true;
			break;
		}
	}
	for (size_t i = it->first; i < it->end; i++) {
		const struct lynx_prof_event *e = &t->events[i];
		if (e->kind == LYNX_PROF_SYNC && !e->nested) {
			after_sync = true;
			continue;
		}
		if (!is_stream_work(e))
			continue;
		if (after_sync && is_timed(e) && !a.found)
			a = (struct anchor){true, work, e->dev_start_ns, a.sampled};
		else if (e->kind == LYNX_PROF_LAUNCH && is_timed(e))
			a.sampled = true;
		after_sync = false;
		work++;
	}
	return a;
}

/*
 * The iteration's device time, start to start as the trainer's own step time counts it:
 * from one iteration's anchor to the next one's at the same place. Iterations that hold
 * the sample are left out, as its marks slow them. False without such a pair.
 */
static bool anchored_iteration_time(const struct lynx_prof_trace *t,
                                    const struct lynx_prof_iterations *its,
                                    struct lynx_profile_time *out)
{
	uint64_t *periods = calloc(its->count + 1, sizeof(*periods));
	struct anchor prev = {0};
	size_t n = 0;

	if (!periods)
		return false;
	for (size_t i = 0; i < its->count; i++) {
		struct anchor a = iteration_anchor(t, &its->iter[i]);
		if (prev.found && !prev.sampled && a.found && a.ordinal == prev.ordinal &&
		    a.start_ns > prev.start_ns)
			periods[n++] = a.start_ns - prev.start_ns;
		prev = a;
	}
	if (n)
		*out = median_time(periods, n, LYNX_PROFILE_SOURCE_DEVICE);
	free(periods);
	return n > 0;
}

static int kernel_names(const struct lynx_prof_trace *t, const struct lynx_prof_segment *s,
                        struct lynx_profile_kernels *k)
{
	size_t n = (size_t)launches_before(t, s->first, s->end), j = 0;
	char addr[32];

	k->count = 0;
	k->name = n ? calloc(n, sizeof(*k->name)) : NULL;
	if (n && !k->name)
		return -ENOMEM;
	k->count = n;
	for (size_t i = s->first; i < s->end; i++) {
		const struct lynx_prof_event *e = &t->events[i];
		if (!is_program_launch(e))
			continue;
		snprintf(addr, sizeof(addr), "0x%" PRIx64, e->u.launch.function);
		k->name[j] = strdup(e->u.launch.name ? e->u.launch.name : addr);
		if (!k->name[j])
			return -ENOMEM;
		/* Each kernel's own device time, when the shim timed this segment. */
		if (is_timed(e) && !k->ns && !(k->ns = calloc(n, sizeof(*k->ns))))
			return -ENOMEM;
		if (is_timed(e))
			k->ns[j] = e->dev_end_ns > e->dev_start_ns ? e->dev_end_ns - e->dev_start_ns
			                                           : 0;
		j++;
	}
	return 0;
}

/* The most non-saved bytes live at each of k's kernels (profile.h) over segment s: an event
 * counts for the kernel whose launch it precedes or is, the last kernel's for those after. */
static void non_saved_over(const struct lynx_prof_trace *t, const struct lynx_prof_lifetimes *lt,
                           const struct lynx_prof_segment *s, struct lynx_profile_kernels *k)
{
	size_t at = 0;

	for (size_t e = s->first; e < s->end && e < lt->non_saved_events && k->count; e++) {
		size_t i = at < k->count ? at : k->count - 1;
		if (lt->non_saved_after[e] > k->non_saved_bytes[i])
			k->non_saved_bytes[i] = lt->non_saved_after[e];
		at += is_program_launch(&t->events[e]);
	}
}

/* What the build keeps between its steps. */
struct build {
	const struct lynx_prof_trace *t;
	struct lynx_prof_iterations its;
	struct lynx_prof_layers *layers; /* per iteration; .fwd NULL where segmenting failed */
	size_t chosen;                   /* the iteration windows, kernels and groups describe */
	struct lynx_prof_span *iter_spans;
	struct lynx_prof_layer_span *spans;
	size_t span_count;
	struct lynx_prof_lifetimes lt;
	bool have_lt;
};

/* The iterations found and their segments, for another try or the end. */
static void iterations_free(struct build *b)
{
	for (size_t i = 0; b->layers && i < b->its.count; i++)
		lynx_prof_layers_free(&b->layers[i]);
	free(b->layers);
	b->layers = NULL;
	b->chosen = 0;
	lynx_prof_iterations_free(&b->its);
}

static void build_free(struct build *b)
{
	iterations_free(b);
	free(b->iter_spans);
	free(b->spans);
	if (b->have_lt)
		lynx_prof_lifetimes_free(&b->lt);
}

/* Segments every iteration; the chosen one is the last that segments, and the others must
 * agree with it (same layers and micro-batches) to count. */
static int segment_all(struct build *b, char *why, size_t len)
{
	char reason[256] = "";
	bool found = false;

	b->layers = calloc(b->its.count, sizeof(*b->layers));
	if (!b->layers)
		return -ENOMEM;
	for (size_t i = b->its.count; i-- > 0;) {
		int err = lynx_prof_segment_layers(b->t, &b->its.iter[i], &b->layers[i], reason,
		                                   sizeof(reason));
		if (err == -ENOMEM)
			return err;
		if (err) {
			memset(&b->layers[i], 0, sizeof(b->layers[i]));
			if (!found && i + 1 == b->its.count)
				return refuse(why, len, "the last iteration has no layers: %s",
				              reason);
			continue;
		}
		/* The chosen iteration is the last that segments, preferring one the shim
		 * timed at kernel level (its windows' idle times and kernel times need it). */
		if (!found ||
		    (!lynx_prof_fully_timed(b->t, b->its.iter[b->chosen].first,
		                            b->its.iter[b->chosen].end) &&
		     lynx_prof_fully_timed(b->t, b->its.iter[i].first, b->its.iter[i].end) &&
		     b->layers[i].layers == b->layers[b->chosen].layers &&
		     b->layers[i].microbatches == b->layers[b->chosen].microbatches)) {
			found = true;
			b->chosen = i;
		} else if (b->layers[i].layers != b->layers[b->chosen].layers ||
		           b->layers[i].microbatches != b->layers[b->chosen].microbatches) {
			lynx_prof_layers_free(&b->layers[i]);
			memset(&b->layers[i], 0, sizeof(b->layers[i]));
		}
	}
	return 0;
}

/* Events [first, end) of forward (or backward) stack m of segmented layers l. */
static struct lynx_prof_segment stack_of(const struct lynx_prof_layers *l, size_t m, bool backward)
{
	const struct lynx_prof_segment *s = backward ? l->bwd : l->fwd;
	size_t a = m * l->layers, z = a + l->layers - 1;

	/* A backward stack runs its layers last to first. */
	return backward ? (struct lynx_prof_segment){s[z].first, s[a].end}
	                : (struct lynx_prof_segment){s[a].first, s[z].end};
}

/*
 * Pairs each backward stack with the forward stack it differentiates, by what it reads: the
 * bytes of buffers that forward stack made. Segmentation numbers stacks in start order,
 * right for 1F1B and GPipe, where micro-batches run backward in their forward order, but not
 * for Megatron's interleaved schedule (each model chunk's stacks count as micro-batches, and
 * the backward visits the chunks last to first). Reorders l->bwd by forward stack; keeps the
 * order when the data do not pair every stack one to one. O(buffer references).
 */
static int pair_backwards(const struct lynx_prof_lifetimes *lt, struct lynx_prof_layers *l)
{
	size_t m = l->microbatches, n = l->layers;
	uint64_t *score = calloc(m * m + 1, sizeof(*score));
	size_t *match = calloc(m + 1, sizeof(*match));
	struct lynx_prof_segment *bwd = calloc(m * n + 1, sizeof(*bwd));
	bool identity = true, *used = calloc(m + 1, sizeof(*used));
	int err = score && match && bwd && used ? 0 : -ENOMEM;

	for (size_t i = 0; !err && i < lt->count; i++) {
		const struct lynx_prof_buffer *buf = &lt->buffers[i];
		size_t f = m, from = 0;
		for (size_t k = 0; k < m && f == m; k++) {
			struct lynx_prof_segment s = stack_of(l, k, false);
			f = buf->alloc_event >= s.first && buf->alloc_event < s.end ? k : m;
		}
		for (size_t r = 0; f < m && r < buf->ref_count; r++) {
			uint32_t ev = lt->refs[buf->first_ref + r].event;
			for (size_t j = from; j < m; j++) {
				struct lynx_prof_segment s = stack_of(l, j, true);
				if (ev >= s.first && ev < s.end) {
					score[j * m + f] += buf->bytes;
					from = j; /* references come in event order */
					break;
				}
			}
		}
	}
	/* Greedy: the strongest pair first; every backward stack must find its own. */
	for (size_t round = 0; !err && round < m; round++) {
		size_t bj = m, bf = m;
		for (size_t j = 0; j < m; j++)
			for (size_t f = 0; f < m && match[j] == 0; f++)
				if (!used[f] && score[j * m + f] &&
				    (bj == m || score[j * m + f] > score[bj * m + bf])) {
					bj = j;
					bf = f;
				}
		if (bj == m)
			goto out; /* some stack reads nothing a forward made: keep the order */
		match[bj] = bf + 1;
		used[bf] = true;
		identity = identity && bj == bf;
	}
	if (!err && !identity) {
		for (size_t j = 0; j < m; j++)
			memcpy(&bwd[(match[j] - 1) * n], &l->bwd[j * n], n * sizeof(*bwd));
		memcpy(l->bwd, bwd, m * n * sizeof(*bwd));
	}
out:
	free(score);
	free(match);
	free(bwd);
	free(used);
	return err;
}

/* The lifetimes, classified against every segmented iteration's layers. */
static int lifetimes(struct build *b, char *why, size_t len)
{
	size_t n = 0;
	int err;

	err = lynx_prof_lifetimes_build(b->t, &b->lt, why, len);
	if (err)
		return err;
	b->have_lt = true;
	for (size_t i = 0; i < b->its.count; i++)
		if (b->layers[i].fwd && b->layers[i].microbatches > 1 &&
		    (err = pair_backwards(&b->lt, &b->layers[i])))
			return err;
	b->iter_spans = calloc(b->its.count, sizeof(*b->iter_spans));
	if (!b->iter_spans)
		return -ENOMEM;
	for (size_t i = 0; i < b->its.count; i++) {
		b->iter_spans[i] = (struct lynx_prof_span){(uint32_t)b->its.iter[i].first,
		                                           (uint32_t)b->its.iter[i].end};
		n += b->layers[i].layers * b->layers[i].microbatches;
	}
	b->spans = calloc(n ? n : 1, sizeof(*b->spans));
	if (!b->spans)
		return -ENOMEM;
	for (size_t i = 0; i < b->its.count; i++) {
		const struct lynx_prof_layers *l = &b->layers[i];
		for (size_t m = 0; l->fwd && m < l->microbatches; m++)
			for (size_t k = 0; k < l->layers; k++) {
				const struct lynx_prof_segment *f = &l->fwd[m * l->layers + k];
				const struct lynx_prof_segment *bw = &l->bwd[m * l->layers + k];
				b->spans[b->span_count++] = (struct lynx_prof_layer_span){
				        (uint32_t)i,
				        (uint32_t)k,
				        (uint32_t)m,
				        {(uint32_t)f->first, (uint32_t)f->end},
				        {(uint32_t)bw->first, (uint32_t)bw->end}};
			}
	}
	struct lynx_prof_structure s = {b->iter_spans, b->its.count, b->spans, b->span_count};
	return lynx_prof_lifetimes_classify(&b->lt, &s, b->t->count, why, len);
}

/* Layer k's per-kernel non-saved bytes in one direction, over every steady iteration and
 * micro-batch; left NULL when the lifetimes have none. */
static int kernel_non_saved(const struct build *b, size_t k, bool backward,
                            struct lynx_profile_kernels *kernels)
{
	if (!b->lt.non_saved_after)
		return 0;
	if (!(kernels->non_saved_bytes = calloc(kernels->count + 1, sizeof(uint64_t))))
		return -ENOMEM;
	for (size_t i = 0; i < b->its.count; i++) {
		const struct lynx_prof_layers *li = &b->layers[i];
		for (size_t m = 0; li->fwd && m < li->microbatches && k < li->layers; m++)
			non_saved_over(b->t, &b->lt,
			               backward ? &li->bwd[m * li->layers + k]
			                        : &li->fwd[m * li->layers + k],
			               kernels);
	}
	return 0;
}

static int fill_layers(struct build *b, struct lynx_profile *p)
{
	const struct lynx_prof_layers *c = &b->layers[b->chosen];
	struct lynx_prof_structure s = {b->iter_spans, b->its.count, b->spans, b->span_count};
	struct samples fwd, bwd;
	size_t cap = b->its.count * c->microbatches;
	int err = samples_init(&fwd, cap) | samples_init(&bwd, cap);

	p->layers = calloc(c->layers, sizeof(*p->layers));
	if (err || !p->layers) {
		err = -ENOMEM;
		goto out;
	}
	p->layer_count = c->layers;
	for (size_t k = 0; k < c->layers; k++) {
		struct lynx_profile_layer *l = &p->layers[k];
		fwd.n_device = fwd.n_host = bwd.n_device = bwd.n_host = 0;
		for (size_t i = 0; i < b->its.count; i++) {
			const struct lynx_prof_layers *li = &b->layers[i];
			for (size_t m = 0; li->fwd && m < li->microbatches; m++) {
				const struct lynx_prof_segment *f = &li->fwd[m * li->layers + k];
				const struct lynx_prof_segment *bw = &li->bwd[m * li->layers + k];
				samples_add(&fwd, b->t, f->first, f->end);
				samples_add(&bwd, b->t, bw->first, bw->end);
			}
		}
		l->forward = samples_time(&fwd);
		l->backward = samples_time(&bwd);
		l->reruns_forward = c->reruns[k];
		for (size_t m = 0; m < c->microbatches; m++) {
			uint64_t saved = lynx_prof_lifetimes_saved_bytes(&b->lt, &s, (uint32_t)k,
			                                                 (uint32_t)m);
			l->saved_bytes = saved > l->saved_bytes ? saved : l->saved_bytes;
		}
		if ((err = kernel_names(b->t, &c->fwd[k], &l->fwd_kernels)) ||
		    (err = kernel_names(b->t, &c->bwd[k], &l->bwd_kernels)) ||
		    (err = kernel_non_saved(b, k, false, &l->fwd_kernels)) ||
		    (err = kernel_non_saved(b, k, true, &l->bwd_kernels)))
			goto out;
	}
out:
	samples_free(&fwd);
	samples_free(&bwd);
	return err;
}

/* The position of event e in segment s: launches before it, or -1 outside. */
static int32_t position(const struct lynx_prof_trace *t, const struct lynx_prof_segment *s,
                        uint32_t e)
{
	if (e == LYNX_PROF_NONE || e < s->first || e >= s->end)
		return -1;
	return launches_before(t, s->first, e);
}

/* Whether buf is referenced by event e. O(its references). */
static bool references(const struct build *b, const struct lynx_prof_buffer *buf, uint32_t e)
{
	for (size_t r = 0; r < buf->ref_count; r++)
		if (b->lt.refs[buf->first_ref + r].event == e)
			return true;
	return false;
}

/*
 * The position in f of the last launch of the run that produces buf: its producer, then
 * the program's launches right after it, of the same function, that touch buf too (a
 * kernel launched per sequence), as the executor captures a producer to replay. producer
 * itself when it runs alone, -1 with it.
 */
static int32_t producer_end(const struct build *b, const struct lynx_prof_segment *f,
                            const struct lynx_prof_buffer *buf, int32_t producer)
{
	const struct lynx_prof_trace *t = b->t;
	int32_t end = producer;

	if (producer < 0)
		return producer;
	uint64_t function = t->events[buf->producer].u.launch.function;
	for (uint32_t e = buf->producer + 1; e < f->end; e++) {
		const struct lynx_prof_event *ev = &t->events[e];
		if (!is_program_launch(ev))
			continue;
		if (ev->u.launch.function != function || !references(b, buf, e))
			break;
		end++;
	}
	return end;
}

/* A reference by the event that made it: which buffer that call named. */
struct ref_at {
	uint32_t event;
	uint32_t buffer;
};

static int by_event(const void *a, const void *b)
{
	const struct ref_at *x = a, *y = b;

	if (x->event != y->event)
		return x->event < y->event ? -1 : 1;
	return x->buffer < y->buffer ? -1 : x->buffer > y->buffer;
}

/* Every reference of the lifetimes, ordered by event; NULL when out of memory. */
static struct ref_at *refs_by_event(const struct lynx_prof_lifetimes *lt)
{
	struct ref_at *refs = malloc((lt->ref_count ? lt->ref_count : 1) * sizeof(*refs));

	if (!refs)
		return NULL;
	for (size_t i = 0; i < lt->count; i++)
		for (size_t r = 0; r < lt->buffers[i].ref_count; r++)
			refs[lt->buffers[i].first_ref + r] = (struct ref_at){
			        lt->refs[lt->buffers[i].first_ref + r].event, (uint32_t)i};
	qsort(refs, lt->ref_count, sizeof(*refs), by_event);
	return refs;
}

/* The event of the last launch of a producer run that starts at event first and spans
 * `launches` program launches after it. */
static uint32_t run_end_event(const struct lynx_prof_trace *t, uint32_t first, int32_t launches)
{
	uint32_t end = first;

	for (uint32_t e = first + 1; launches > 0 && e < t->count; e++)
		if (is_program_launch(&t->events[e])) {
			end = e;
			launches--;
		}
	return end;
}

/* Saved activations one producer run may read that a profile lists: a kernel's parameters
 * (4 KiB) name at most 512 pointers, and a run is a few kernels. */
#define MAX_READS 1024

/* The first reference made at event e or after it, in refs (ordered by event). */
static size_t first_ref_at(const struct build *b, const struct ref_at *refs, uint32_t e)
{
	size_t lo = 0, hi = b->lt.ref_count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (refs[mid].event < e)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* A group as fill_groups found it: its buffer, and the event of its first consumer in the
 * backward (the backward's start when none was seen). */
struct group_src {
	uint32_t buffer;
	uint32_t consumer;
};

/* What one group's rebuild reads, gathered over its producer run and the writers it reruns
 * first. */
struct run_reads {
	const struct build *b;
	const struct ref_at *refs;
	const int32_t *group_of;
	size_t g;          /* the group */
	uint32_t buffer;   /* its buffer */
	uint32_t first;    /* its producer run's first event */
	uint32_t consumer; /* its first consumer's event */
	uint32_t reads[MAX_READS], workspaces[MAX_READS], rewritten[LYNX_PROFILE_MAX_WRITERS];
	size_t n_reads, n_workspaces, n_rewritten;
	int in_writer; /* > 0: noting what a writer names */
	struct lynx_profile_group *gr;
};

static bool listed(const uint32_t *list, size_t n, uint32_t x)
{
	for (size_t k = 0; k < n; k++)
		if (list[k] == x)
			return true;
	return false;
}

static bool note_ref(struct run_reads *rr, uint32_t id);

/*
 * Buffer `id`, freed before the consumer: whether a rebuild can write it again. Its producer
 * must be one of the program's launches, nothing but launches may name it from then to the
 * run, and what that launch names must be still allocated at the consumer or written again
 * itself, with at most LYNX_PROFILE_MAX_WRITERS such launches in all.
 * Lynx's executor then replays those writers into scratch before the run
 * (shim/executor_chain.c): each temporary and each workspace its writer names count in the
 * scratch; what the writer reads is not among the rebuild's reads (note_ref).
 */
static bool rewritable(struct run_reads *rr, uint32_t id)
{
	const struct build *b = rr->b;
	const struct lynx_prof_buffer *buf = &b->lt.buffers[id];
	uint32_t e = buf->producer;

	if (listed(rr->rewritten, rr->n_rewritten, id))
		return true;
	if (e == LYNX_PROF_NONE || !is_program_launch(&b->t->events[e]) ||
	    rr->n_rewritten == LYNX_PROFILE_MAX_WRITERS)
		return false;
	/* Only launches may touch it between its writer and the run: a collective or a copy
	 * (a tensor-parallel all-reduce in place, say) changes it where the writer's replay
	 * would not. */
	for (size_t r = 0; r < buf->ref_count; r++) {
		uint32_t at = b->lt.refs[buf->first_ref + r].event;
		if (at > e && at < rr->first && !is_program_launch(&b->t->events[at]))
			return false;
	}
	rr->rewritten[rr->n_rewritten++] = id;
	rr->gr->scratch_bytes += buf->bytes;
	bool ok = true;
	rr->in_writer++;
	for (size_t r = first_ref_at(b, rr->refs, e);
	     ok && r < b->lt.ref_count && rr->refs[r].event == e; r++)
		ok = rr->refs[r].buffer == id || note_ref(rr, rr->refs[r].buffer);
	rr->in_writer--;
	return ok;
}

/* A buffer the rebuild names: a temporary it must write again (false if it cannot), a
 * workspace it takes scratch for, a saved activation of the layer it needs resident. */
static bool note_ref(struct run_reads *rr, uint32_t id)
{
	const struct lynx_prof_buffer *other = &rr->b->lt.buffers[id];
	const struct lynx_prof_buffer *buf = &rr->b->lt.buffers[rr->buffer];

	if (id == rr->buffer)
		return true;
	if (other->free_event != LYNX_PROF_NONE && other->free_event < rr->consumer)
		return rewritable(rr, id);
	if (other->cls == LYNX_PROF_CLASS_WORKSPACE &&
	    !listed(rr->workspaces, rr->n_workspaces, id) && rr->n_workspaces < MAX_READS) {
		rr->workspaces[rr->n_workspaces++] = id;
		rr->gr->scratch_bytes += other->bytes;
	}
	/* What a writer reads is not listed, though the executor brings it back before the
	 * chain's replay (an approximation of the rebuild's memory). Listed, a pack it names
	 * that is produced after this group (from_profile.c orders a pack by its last
	 * producer) must be left out of its dependencies. Tried so, with the problem holding
	 * each group until the trainer frees it (freed_before), pp4's budgets held at 60%
	 * where a stage goes 0.38 MiB over, but the demo at full recompute's peak ran 1.041x
	 * where it runs 1.012x; with the backward's most non-saved bytes at every op, pp4's
	 * first stage had no plan at full recompute's peak (measurements.md, 2026-11-29). */
	int32_t dep = rr->group_of[id];
	if (rr->in_writer || dep < 0 || (size_t)dep == rr->g || other->producer >= rr->first ||
	    other->span != buf->span)
		return true;
	if (!listed(rr->reads, rr->n_reads, (uint32_t)dep) && rr->n_reads < MAX_READS)
		rr->reads[rr->n_reads++] = (uint32_t)dep;
	return true;
}

/* A writer a chain reruns, at forward position at (-1: outside the layer's forward, not
 * listed), into gr's ascending writers. */
static void note_writer(struct lynx_profile_group *gr, int32_t at)
{
	uint32_t k = 0;

	if (at < 0 || at >= gr->producer)
		return;
	while (k < gr->writer_count && gr->writers[k] < at)
		k++;
	if (k < gr->writer_count && gr->writers[k] == at)
		return;
	memmove(&gr->writers[k + 1], &gr->writers[k],
	        (gr->writer_count - k) * sizeof(*gr->writers));
	gr->writers[k] = at;
	gr->writer_count++;
}

/*
 * What group g's producer run reads (profile.h): every buffer its launches name besides the
 * activation itself. One freed before the activation's first consumer (a temporary, read or
 * written) makes the run one the executor cannot replay, unless its writer can be replayed
 * first (rewritable: a chain); a saved activation of the same layer span produced before the
 * run is one the rebuild needs; the workspaces it names, once each, and the temporaries it
 * writes again are the scratch a replay of it takes. group_of: each buffer's group, or -1.
 */
static int fill_reads(const struct build *b, const struct ref_at *refs, const struct group_src *src,
                      const int32_t *group_of, struct lynx_profile *p, size_t g)
{
	struct run_reads *rr;
	struct lynx_profile_group *gr = &p->groups[g];
	uint32_t first = b->lt.buffers[src[g].buffer].producer, last;
	int err = 0;

	gr->reads_known = true;
	gr->scratch_known = true;
	if (first == LYNX_PROF_NONE || gr->producer < 0)
		return 0;
	if (!(rr = calloc(1, sizeof(*rr))))
		return -ENOMEM;
	*rr = (struct run_reads){.b = b,
	                         .refs = refs,
	                         .group_of = group_of,
	                         .g = g,
	                         .buffer = src[g].buffer,
	                         .first = first,
	                         .consumer = src[g].consumer,
	                         .gr = gr};
	last = run_end_event(b->t, first, gr->producer_end - gr->producer);
	for (size_t r = first_ref_at(b, refs, first); r < b->lt.ref_count && refs[r].event <= last;
	     r++)
		if (!note_ref(rr, refs[r].buffer))
			gr->reads_freed = true;
	gr->chained = !gr->reads_freed && rr->n_rewritten > 0;
	for (size_t w = 0; gr->chained && w < rr->n_rewritten; w++)
		note_writer(gr, position(b->t, &b->layers[b->chosen].fwd[gr->layer],
		                         b->lt.buffers[rr->rewritten[w]].producer));
	if (rr->n_reads && !(gr->reads = malloc(rr->n_reads * sizeof(*gr->reads))))
		err = -ENOMEM;
	else if (rr->n_reads) {
		memcpy(gr->reads, rr->reads, rr->n_reads * sizeof(*rr->reads));
		qsort(gr->reads, rr->n_reads, sizeof(*gr->reads), by_u32);
		gr->read_count = (uint32_t)rr->n_reads;
	}
	free(rr);
	return err;
}

/*
 * Where the trainer freed buf against its layer's backward bw (profile.h's freed_before):
 * the backward kernels launched before the free, all of them for a free after the segment
 * or none at all. Unknown for a free before the backward begins or before its last
 * consumer (not seen: a profile's references end at the free).
 */
static void freed_before(const struct build *b, const struct lynx_prof_segment *bw,
                         const struct lynx_prof_buffer *buf, struct lynx_profile_group *g)
{
	uint32_t at = (uint32_t)launches_before(b->t, bw->first, bw->end);

	if (buf->free_event != LYNX_PROF_NONE && buf->free_event < bw->first)
		return;
	if (buf->free_event != LYNX_PROF_NONE && buf->free_event < bw->end)
		at = (uint32_t)launches_before(b->t, bw->first, buf->free_event);
	if (g->last_consumer >= 0 && at <= (uint32_t)g->last_consumer)
		return;
	g->freed_known = true;
	g->freed_before = at;
}

/* The saved activations of each layer on micro-batch 0 of the chosen iteration. */
static int fill_groups(struct build *b, struct lynx_profile *p)
{
	const struct lynx_prof_layers *c = &b->layers[b->chosen];
	size_t n = 0;
	struct group_src *src = NULL;
	int32_t *group_of = NULL;
	struct ref_at *refs = NULL;
	int err = 0;

	for (size_t pass = 0; pass < 2; pass++) {
		if (pass) {
			p->groups = calloc(n ? n : 1, sizeof(*p->groups));
			src = calloc(n ? n : 1, sizeof(*src));
			group_of = malloc((b->lt.count ? b->lt.count : 1) * sizeof(*group_of));
			refs = refs_by_event(&b->lt);
			if (!p->groups || !src || !group_of || !refs) {
				err = -ENOMEM;
				goto out;
			}
			for (size_t i = 0; i < b->lt.count; i++)
				group_of[i] = -1;
		}
		for (size_t k = 0; k < c->layers; k++) {
			for (size_t i = 0; i < b->lt.count; i++) {
				const struct lynx_prof_buffer *buf = &b->lt.buffers[i];
				if (buf->cls != LYNX_PROF_CLASS_SAVED || buf->span >= b->span_count)
					continue;
				const struct lynx_prof_layer_span *sp = &b->spans[buf->span];
				if (sp->iteration != b->chosen || sp->microbatch || sp->layer != k)
					continue;
				if (!pass) {
					n++;
					continue;
				}
				const struct lynx_prof_segment *f = &c->fwd[k], *bw = &c->bwd[k];
				struct group_src *gs = &src[p->group_count];
				*gs = (struct group_src){(uint32_t)i, (uint32_t)bw->first};
				group_of[i] = (int32_t)p->group_count;
				struct lynx_profile_group *g = &p->groups[p->group_count++];
				g->layer = (uint32_t)k;
				g->bytes = buf->bytes;
				g->producer = position(b->t, f, buf->producer);
				g->producer_end = producer_end(b, f, buf, g->producer);
				g->first_consumer = g->last_consumer = -1;
				for (size_t r = 0; r < buf->ref_count; r++) {
					int32_t at = position(b->t, bw,
					                      b->lt.refs[buf->first_ref + r].event);
					if (at < 0)
						continue;
					if (g->first_consumer < 0) {
						g->first_consumer = at;
						gs->consumer = b->lt.refs[buf->first_ref + r].event;
					}
					g->last_consumer = at;
				}
				freed_before(b, bw, buf, g);
			}
		}
	}
	for (size_t g = 0; g < p->group_count && !err; g++)
		err = fill_reads(b, refs, src, group_of, p, g);
out:
	free(src);
	free(group_of);
	free(refs);
	return err;
}

/* A layer segment of the chosen iteration, for placing NCCL calls. */
struct place {
	size_t first, end;
	bool backward;
	int32_t microbatch, layer;
};

static int by_first(const void *a, const void *b)
{
	const struct place *x = a, *y = b;

	return x->first < y->first ? -1 : x->first > y->first;
}

/* Communicators numbered by first use in the trace. */
struct comms {
	uint64_t *handle;
	size_t count;
	bool *tp; /* used by a collective inside a layer segment */
};

static int number_comms(const struct lynx_prof_trace *t, struct comms *c)
{
	size_t cap = 0;

	for (size_t i = 0; i < t->count; i++) {
		const struct lynx_prof_event *e = &t->events[i];
		size_t j = 0;
		if (!is_nccl_call(e))
			continue;
		while (j < c->count && c->handle[j] != e->u.nccl.comm)
			j++;
		if (j < c->count)
			continue;
		if (c->count == cap) {
			cap = cap ? 2 * cap : 8;
			uint64_t *h = realloc(c->handle, cap * sizeof(*h));
			if (!h)
				return -ENOMEM;
			c->handle = h;
		}
		c->handle[c->count++] = e->u.nccl.comm;
	}
	c->tp = calloc(c->count ? c->count : 1, sizeof(*c->tp));
	return c->tp ? 0 : -ENOMEM;
}

static uint32_t comm_index(const struct comms *c, uint64_t handle)
{
	uint32_t j = 0;

	while (j < c->count && c->handle[j] != handle)
		j++;
	return j;
}

static const struct place *containing(const struct place *pl, size_t n, size_t e)
{
	for (size_t i = 0; i < n; i++)
		if (e >= pl[i].first && e < pl[i].end)
			return &pl[i];
	return NULL;
}

static void classify_p2p(const struct lynx_prof_event *e, const struct place *pl, size_t n,
                         size_t at, struct lynx_profile_window *w)
{
	const struct place *prev = NULL, *next = NULL;
	bool recv = strstr(e->hook, "Recv") != NULL;

	for (size_t i = 0; i < n; i++) {
		if (pl[i].end <= at)
			prev = &pl[i];
		if (pl[i].first > at && !next)
			next = &pl[i];
	}
	const struct place *by = recv ? next : prev;
	if (!by)
		return;
	w->microbatch = by->microbatch;
	if (recv)
		w->kind = by->backward ? LYNX_PROFILE_WINDOW_PP_RECV_BWD
		                       : LYNX_PROFILE_WINDOW_PP_RECV_FWD;
	else
		w->kind = by->backward ? LYNX_PROFILE_WINDOW_PP_SEND_BWD
		                       : LYNX_PROFILE_WINDOW_PP_SEND_FWD;
}

/* The stream most timed launches of the iteration went to: the compute stream. A tally per
 * stream (a job uses a handful); beyond TALLY_STREAMS distinct streams, the rest are not
 * counted. */
#define TALLY_STREAMS 64
static uint64_t compute_stream(const struct lynx_prof_trace *t,
                               const struct lynx_prof_iteration *it)
{
	uint64_t stream[TALLY_STREAMS];
	size_t count[TALLY_STREAMS] = {0}, n = 0, best = 0;

	for (size_t i = it->first; i < it->end; i++) {
		const struct lynx_prof_event *e = &t->events[i];
		size_t k = 0;
		if (!is_program_launch(e) || !is_timed(e))
			continue;
		while (k < n && stream[k] != e->stream)
			k++;
		if (k == n && n < TALLY_STREAMS)
			stream[n++] = e->stream;
		if (k < n)
			count[k]++;
	}
	for (size_t k = 1; k < n; k++)
		best = count[k] > count[best] ? k : best;
	return n ? stream[best] : 0;
}

/* The compute stream's timed kernels of one iteration, as intervals sorted by start (one
 * stream runs them one after the other, so they do not overlap). */
struct busy {
	uint64_t (*span)[2];
	size_t count;
};

static int by_span_start(const void *a, const void *b)
{
	uint64_t x = (*(const uint64_t(*)[2])a)[0], y = (*(const uint64_t(*)[2])b)[0];

	return x < y ? -1 : x > y;
}

static int busy_collect(const struct lynx_prof_trace *t, const struct lynx_prof_iteration *it,
                        uint64_t compute, struct busy *out)
{
	out->count = 0;
	out->span = malloc((it->end - it->first + 1) * sizeof(*out->span));
	if (!out->span)
		return -ENOMEM;
	for (size_t i = it->first; i < it->end; i++) {
		const struct lynx_prof_event *e = &t->events[i];
		if (!is_program_launch(e) || !is_timed(e) || e->stream != compute)
			continue;
		out->span[out->count][0] = e->dev_start_ns;
		out->span[out->count++][1] = e->dev_end_ns;
	}
	qsort(out->span, out->count, sizeof(*out->span), by_span_start);
	return 0;
}

/*
 * A timed NCCL call's duration on its stream, and how long the compute stream was idle
 * meanwhile: the call's interval less the compute kernels that overlap it. This is the
 * capacity a window offers to recompute on a side stream. A call on the compute stream
 * itself keeps compute waiting for its whole duration. busy NULL: the iteration's kernels
 * were not timed, the idle time stays unknown. O(log kernels + overlapping kernels).
 */
static void time_window(const struct busy *busy, const struct lynx_prof_event *call,
                        struct lynx_profile_window *w)
{
	uint64_t start = call->dev_start_ns, end = call->dev_end_ns, overlap = 0;
	size_t low = 0, high;

	if (end < start)
		return;
	w->duration = (struct lynx_profile_time){LYNX_PROFILE_SOURCE_DEVICE, end - start,
	                                         end - start, end - start, 1};
	if (!busy)
		return;
	/* The first kernel that ends after the call starts: kernels end in start order. */
	high = busy->count;
	while (low < high) {
		size_t mid = low + (high - low) / 2;
		if (busy->span[mid][1] <= start)
			low = mid + 1;
		else
			high = mid;
	}
	for (size_t k = low; k < busy->count && busy->span[k][0] < end; k++) {
		uint64_t a = busy->span[k][0] > start ? busy->span[k][0] : start;
		uint64_t b = busy->span[k][1] < end ? busy->span[k][1] : end;
		overlap += b > a ? b - a : 0;
	}
	uint64_t idle = end - start > overlap ? end - start - overlap : 0;
	w->idle = (struct lynx_profile_time){LYNX_PROFILE_SOURCE_DEVICE, idle, idle, idle, 1};
}

/*
 * Forwards before the first backward, less one: under 1F1B stage s of p runs p - s - 1
 * warm-up forwards, then one more forward before its first backward (1 then, without a
 * pipeline).
 */
static uint32_t warmup_forwards(const struct lynx_prof_layers *c)
{
	size_t first_bwd = SIZE_MAX;
	uint32_t before = 0;

	for (size_t i = 0; i < c->microbatches * c->layers; i++)
		first_bwd = c->bwd[i].first < first_bwd ? c->bwd[i].first : first_bwd;
	for (size_t m = 0; m < c->microbatches; m++)
		before += c->fwd[m * c->layers].first < first_bwd;
	return before ? before - 1 : 0;
}

static int fill_windows(struct build *b, struct lynx_profile *p)
{
	const struct lynx_prof_layers *c = &b->layers[b->chosen];
	const struct lynx_prof_iteration *it = &b->its.iter[b->chosen];
	const struct lynx_prof_trace *t = b->t;
	size_t n = 2 * c->layers * c->microbatches, count = 0, last_bwd_end = 0;
	struct place *pl = calloc(n ? n : 1, sizeof(*pl));
	struct comms comms = {0};
	uint64_t t0 = span_start(t, it->first);
	int err = pl ? number_comms(t, &comms) : -ENOMEM;
	/* Idle times need the compute kernels of the same iteration timed. */
	struct busy busy = {0};
	bool kernels = lynx_prof_fully_timed(t, it->first, it->end);
	if (!err && kernels)
		err = busy_collect(t, it, compute_stream(t, it), &busy);

	if (err)
		goto out;
	for (size_t m = 0; m < c->microbatches; m++)
		for (size_t k = 0; k < c->layers; k++) {
			const struct lynx_prof_segment *f = &c->fwd[m * c->layers + k];
			const struct lynx_prof_segment *bw = &c->bwd[m * c->layers + k];
			pl[2 * (m * c->layers + k)] =
			        (struct place){f->first, f->end, false, (int32_t)m, (int32_t)k};
			pl[2 * (m * c->layers + k) + 1] =
			        (struct place){bw->first, bw->end, true, (int32_t)m, (int32_t)k};
			last_bwd_end = bw->end > last_bwd_end ? bw->end : last_bwd_end;
		}
	qsort(pl, n, sizeof(*pl), by_first);
	for (size_t i = it->first; i < it->end; i++) {
		const struct lynx_prof_event *e = &t->events[i];
		if (!is_nccl_call(e))
			continue;
		count++;
		/* Tensor parallelism reduces in every layer's forward too; data parallelism's
		 * gradient buckets, overlapped with the backward as DDP does, only there. */
		const struct place *in = containing(pl, n, i);
		if (e->kind == LYNX_PROF_COLL && in && !in->backward)
			comms.tp[comm_index(&comms, e->u.nccl.comm)] = true;
	}
	p->windows = calloc(count ? count : 1, sizeof(*p->windows));
	if (!p->windows) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = it->first; i < it->end; i++) {
		const struct lynx_prof_event *e = &t->events[i];
		if (!is_nccl_call(e))
			continue;
		struct lynx_profile_window *w = &p->windows[p->window_count++];
		const struct place *in = containing(pl, n, i);
		uint32_t comm = comm_index(&comms, e->u.nccl.comm);
		*w = (struct lynx_profile_window){
		        .kind = LYNX_PROFILE_WINDOW_OTHER,
		        .comm = comm,
		        .peer = e->kind == LYNX_PROF_P2P ? e->u.nccl.peer : -1,
		        .count = e->u.nccl.count,
		        .bytes = e->u.nccl.count * lynx_prof_nccl_type_size(e->u.nccl.type),
		        .microbatch = -1,
		        .layer = -1,
		        .ordinal = -1,
		        .kernel = -1,
		        .offset_ns = e->t_ns > t0 ? e->t_ns - t0 : 0,
		        .duration = {.source = LYNX_PROFILE_SOURCE_UNKNOWN},
		        .idle = {.source = LYNX_PROFILE_SOURCE_UNKNOWN}};
		w->call = strdup(e->hook);
		if (!w->call) {
			err = -ENOMEM;
			goto out;
		}
		if (e->kind == LYNX_PROF_P2P) {
			classify_p2p(e, pl, n, i, w);
		} else if (in && comms.tp[comm]) {
			int32_t ordinal = 0;
			for (size_t j = in->first; j < i; j++)
				ordinal +=
				        t->events[j].kind == LYNX_PROF_COLL && !t->events[j].nested;
			w->kind = in->backward ? LYNX_PROFILE_WINDOW_TP_BWD
			                       : LYNX_PROFILE_WINDOW_TP_FWD;
			w->microbatch = in->microbatch;
			w->layer = in->layer;
			w->ordinal = ordinal;
			w->kernel = launches_before(t, in->first, i);
		} else if ((i >= last_bwd_end || (in && in->backward)) && !comms.tp[comm]) {
			w->kind = LYNX_PROFILE_WINDOW_DP_GRAD;
		}
		if (is_timed(e))
			time_window(kernels ? &busy : NULL, e, w);
	}
out:
	free(busy.span);
	free(pl);
	free(comms.handle);
	free(comms.tp);
	return err;
}

/*
 * This rank's pipeline stage, from the communicator that carries every pipeline send and
 * receive of the iteration. In a pipeline group (Megatron's, torch's) its rank is the
 * stage. Over a larger communicator the peers are a stride k away (the ranks of the other
 * parallel dimensions in between, stage-major as Megatron and torchrun lay them out): the
 * stage is then rank / k of size / k. Believed only when it agrees with what the trace
 * shows: every peer is a neighbouring stage, the first stage receives no activations and
 * the last no gradients. Otherwise (sends over several communicators, as per-pair ones do
 * past two stages, peers at uneven strides, or a trace from before communicators were
 * recorded) the stage stays unknown.
 */
static void fill_pipeline(const struct build *b, struct lynx_profile *p)
{
	const struct lynx_prof_iteration *it = &b->its.iter[b->chosen];
	const struct lynx_prof_trace *t = b->t;
	uint64_t comm = 0, size = 0;
	int64_t rank = -1, stride = 0;

	p->pipeline_stage = -1;
	p->pipeline_stages = 0;
	for (size_t i = it->first; i < it->end; i++) {
		const struct lynx_prof_event *e = &t->events[i];
		if (e->kind != LYNX_PROF_P2P || e->nested)
			continue;
		if (comm && e->u.nccl.comm != comm)
			return;
		comm = e->u.nccl.comm;
	}
	for (size_t i = 0; comm && i < it->first; i++) {
		const struct lynx_prof_event *e = &t->events[i];
		if (e->kind == LYNX_PROF_COMM && e->u.nccl.comm == comm && e->u.nccl.count > 0 &&
		    e->u.nccl.peer >= 0 && (uint64_t)e->u.nccl.peer < e->u.nccl.count) {
			rank = e->u.nccl.peer;
			size = e->u.nccl.count;
		}
	}
	if (rank < 0)
		return;
	/* The stride: the nearest peer (an interleaved schedule's ring also reaches from the
	 * last stage to the first, the farthest). */
	for (size_t i = it->first; i < it->end; i++) {
		const struct lynx_prof_event *e = &t->events[i];
		int64_t k = (int64_t)e->u.nccl.peer - rank;
		if (e->kind != LYNX_PROF_P2P || e->nested)
			continue;
		k = k < 0 ? -k : k;
		if (k && (!stride || k < stride))
			stride = k;
	}
	if (!stride || size % (uint64_t)stride)
		return;
	int32_t stage = (int32_t)(rank / stride);
	uint32_t stages = (uint32_t)(size / (uint64_t)stride);
	bool ring = false;
	for (size_t i = it->first; i < it->end; i++) {
		const struct lynx_prof_event *e = &t->events[i];
		int64_t peer = e->u.nccl.peer, k = peer - rank;
		if (e->kind != LYNX_PROF_P2P || e->nested || k == stride || k == -stride)
			continue;
		/* Megatron's interleaved schedule: the last stage feeds the first's next chunk. */
		if (stages > 2 && peer % stride == rank % stride &&
		    ((stage == 0 && peer / stride == stages - 1) ||
		     ((uint32_t)stage == stages - 1 && peer / stride == 0))) {
			ring = true;
			continue;
		}
		return;
	}
	for (size_t w = 0; w < p->window_count && !ring; w++) {
		enum lynx_profile_window_kind k = p->windows[w].kind;
		if ((stage == 0 && k == LYNX_PROFILE_WINDOW_PP_RECV_FWD) ||
		    ((uint32_t)stage == stages - 1 && k == LYNX_PROFILE_WINDOW_PP_RECV_BWD))
			return;
	}
	p->pipeline_stage = stage;
	p->pipeline_stages = stages;
}

static void fill_memory(const struct build *b, struct lynx_profile *p)
{
	p->memory.source = LYNX_PROFILE_SOURCE_HOST;
	p->memory.peak_bytes = b->lt.peak_bytes;
	p->memory.buffers = b->lt.count;
	p->memory.non_saved_peak_bytes = b->lt.non_saved_peak_bytes;
	p->memory.largest_workspace_bytes = b->lt.largest_workspace_bytes;
	p->memory.non_saved_known = b->lt.non_saved_after != NULL;
	p->memory.non_saved_outside_bytes = b->lt.non_saved_outside_bytes;
	/* The peak is the most at any moment: at least what any kernel saw. */
	for (size_t l = 0; l < p->layer_count; l++)
		for (int d = 0; d < 2; d++) {
			const struct lynx_profile_kernels *k =
			        d ? &p->layers[l].bwd_kernels : &p->layers[l].fwd_kernels;
			for (size_t i = 0; k->non_saved_bytes && i < k->count; i++)
				if (k->non_saved_bytes[i] > p->memory.non_saved_peak_bytes)
					p->memory.non_saved_peak_bytes = k->non_saved_bytes[i];
		}
	for (int c = 0; c < LYNX_PROF_CLASS_COUNT; c++)
		for (int m = 0; m < LYNX_PROFILE_MEMORY_CLASS_COUNT; m++)
			if (!strcmp(lynx_prof_class_name(c), lynx_profile_memory_class_name(m)))
				p->memory.at_peak[m] += b->lt.peak_by_class[c];
}

/* The chosen iteration's script; one that cannot be built stays empty (see build.h). */
static int fill_script(const struct build *b, struct lynx_prof_script *script)
{
	const struct lynx_prof_script_input in = {
	        .trace = b->t,
	        .first = b->its.iter[b->chosen].first,
	        .end = b->its.iter[b->chosen].end,
	        .lifetimes = &b->lt,
	        .spans = b->spans,
	        .span_count = b->span_count,
	        .iteration = (uint32_t)b->chosen,
	};
	char why[128];
	int err = lynx_prof_script_build(&in, script, why, sizeof(why));

	return err == -ENOMEM ? err : 0;
}

/* Starts of the iteration tried before giving up on its layers (period.h). */
#define PHASE_TRIES 4

/*
 * Finds the iteration and segments it. Where its best start cuts a layer stack (a host
 * synchronisation inside the step, every few steps, waits longer than the step's end), the
 * next starts after a host synchronisation are tried; the reason given is the first's.
 */
static int find_and_segment(struct build *b, const struct lynx_prof_build_options *opt, char *why,
                            size_t why_len)
{
	char first_why[512] = "";
	int err = -EINVAL;

	for (size_t rank = 0; rank < PHASE_TRIES; rank++) {
		err = lynx_prof_find_iterations_phase(b->t, opt ? opt->not_iterations : NULL,
		                                      opt ? opt->not_iterations_count : 0, rank,
		                                      &b->its, why, why_len);
		if (err == -ENOENT && rank) {
			err = -EINVAL;
			break;
		}
		if (err || (err = segment_all(b, why, why_len)) != -EINVAL)
			return err;
		if (!rank)
			snprintf(first_why, sizeof(first_why), "%s", why);
		iterations_free(b);
	}
	snprintf(why, why_len, "%s", first_why);
	return err;
}

int lynx_prof_build_profile(const struct lynx_prof_trace *trace,
                            const struct lynx_prof_build_options *opt, struct lynx_profile *out,
                            char *why, size_t why_len)
{
	struct build b = {.t = trace};
	struct samples iter_samples = {0};
	int err;

	memset(out, 0, sizeof(*out));
	out->rank = opt ? opt->rank : -1;
	out->world = opt ? opt->world : -1;
	if (opt && opt->run)
		out->run = *opt->run;
	out->env.pid = trace->pid;
	out->env.gpu = strdup("unknown");
	out->env.driver = strdup("unknown");
	out->env.nccl = strdup("unknown");
	if (!out->env.gpu || !out->env.driver || !out->env.nccl) {
		err = -ENOMEM;
		goto out;
	}
	if ((err = find_and_segment(&b, opt, why, why_len)) || (err = lifetimes(&b, why, why_len)))
		goto out;
	if ((err = samples_init(&iter_samples, b.its.count)))
		goto out;
	for (size_t i = 0; i < b.its.count; i++)
		samples_add(&iter_samples, trace, b.its.iter[i].first, b.its.iter[i].end);
	out->iteration.period_tokens = b.its.period;
	out->iteration.count = (uint32_t)b.its.count;
	out->iteration.prefix_events = b.its.prefix_end;
	out->iteration.events = b.its.iter[b.chosen].end - b.its.iter[b.chosen].first;
	struct lynx_profile_time sampled = samples_time(&iter_samples);
	bool anchored = anchored_iteration_time(trace, &b.its, &out->iteration.time);
	if (!anchored)
		out->iteration.time = sampled;
	out->warmup_forwards = warmup_forwards(&b.layers[b.chosen]);
	out->microbatches = (uint32_t)b.layers[b.chosen].microbatches;

	if ((err = fill_layers(&b, out)) || (err = fill_groups(&b, out)) ||
	    (err = fill_windows(&b, out)))
		goto out;
	if (anchored && sampled.source == LYNX_PROFILE_SOURCE_DEVICE &&
	    sampled.ns > out->iteration.time.ns)
		unsample_layers(out, (double)out->iteration.time.ns / (double)sampled.ns);
	fill_pipeline(&b, out);
	fill_memory(&b, out);
	if (opt && opt->script && (err = fill_script(&b, opt->script)))
		goto out;
out:
	samples_free(&iter_samples);
	build_free(&b);
	if (err)
		lynx_profile_free(out);
	return err;
}
