/* SPDX-License-Identifier: Apache-2.0 */
/* Allocation lifetimes, references and buffer classes from a trace (lifetime.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lifetime.h"

static const char *const class_names[] = {
#define LYNX_PROF_CLASS_NAME(id, name) name,
        LYNX_PROF_CLASSES(LYNX_PROF_CLASS_NAME)
#undef LYNX_PROF_CLASS_NAME
};

const char *lynx_prof_class_name(enum lynx_prof_class cls)
{
	if ((unsigned int)cls >= LYNX_PROF_CLASS_COUNT)
		return NULL;
	return class_names[cls];
}

__attribute__((format(printf, 3, 4))) static void set_why(char *why, size_t why_len,
                                                          const char *fmt, ...)
{
	va_list ap;

	if (!why || !why_len)
		return;
	va_start(ap, fmt);
	vsnprintf(why, why_len, fmt, ap);
	va_end(ap);
}

/* Grows *array (of size elements) to hold at least need; 0 or -ENOMEM. */
static int grow(void **array, size_t *cap, size_t need, size_t size)
{
	size_t n = *cap ? *cap : 64;
	void *p;

	if (need <= *cap)
		return 0;
	while (n < need) {
		if (n > SIZE_MAX / 2 / size)
			return -ENOMEM;
		n *= 2;
	}
	p = realloc(*array, n * size);
	if (!p)
		return -ENOMEM;
	*array = p;
	*cap = n;
	return 0;
}

/* ---- Which call the program made ------------------------------------------------------ */

/*
 * For each event, the call the program made: itself when not nested, else the next
 * non-nested event of the same thread (nested events are committed before their
 * enclosing call), or itself when the thread has none. O(events x threads).
 */
static uint32_t *enclosing_calls(const struct lynx_prof_trace *trace)
{
	uint32_t *call = malloc((trace->count ? trace->count : 1) * sizeof(*call));
	struct {
		uint32_t tid, next;
	} *threads = NULL;
	size_t nthreads = 0, cap = 0;

	if (!call)
		return NULL;
	for (size_t i = trace->count; i-- > 0;) {
		const struct lynx_prof_event *ev = &trace->events[i];
		size_t t;

		for (t = 0; t < nthreads && threads[t].tid != ev->tid; t++)
			;
		if (t == nthreads) {
			if (grow((void **)&threads, &cap, nthreads + 1, sizeof(*threads))) {
				free(threads);
				free(call);
				return NULL;
			}
			threads[nthreads].tid = ev->tid;
			threads[nthreads++].next = LYNX_PROF_NONE;
		}
		call[i] = (uint32_t)i;
		if (!ev->nested)
			threads[t].next = (uint32_t)i;
		else if (threads[t].next != LYNX_PROF_NONE)
			call[i] = threads[t].next;
	}
	free(threads);
	return call;
}

/* A nested ALLOC/FREE whose enclosing call is a successful one of the same kind and
 * pointer: the same allocation, counted at the enclosing call. */
static bool is_duplicate(const struct lynx_prof_trace *trace, const uint32_t *call, size_t i)
{
	const struct lynx_prof_event *ev = &trace->events[i], *outer;

	if (!ev->nested || call[i] == i)
		return false;
	outer = &trace->events[call[i]];
	return outer->kind == ev->kind && outer->result == 0 && outer->u.mem.ptr == ev->u.mem.ptr;
}

static bool is_host(const struct lynx_prof_event *ev)
{
	return ev->hook && strstr(ev->hook, "Host");
}

/* ---- The live set: buffer ids sorted by address --------------------------------------- */

struct live {
	uint32_t *ids;
	size_t count, cap;
};

/* The first position whose buffer starts above addr. */
static size_t live_upper(const struct live *live, const struct lynx_prof_buffer *buffers,
                         uint64_t addr)
{
	size_t lo = 0, hi = live->count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (buffers[live->ids[mid]].ptr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The live buffer holding addr, or LYNX_PROF_NONE. */
static uint32_t live_find(const struct live *live, const struct lynx_prof_buffer *buffers,
                          uint64_t addr)
{
	size_t pos = live_upper(live, buffers, addr);
	const struct lynx_prof_buffer *b;

	if (pos == 0)
		return LYNX_PROF_NONE;
	b = &buffers[live->ids[pos - 1]];
	return addr - b->ptr < b->bytes ? live->ids[pos - 1] : LYNX_PROF_NONE;
}

static void live_remove_at(struct live *live, size_t pos)
{
	memmove(&live->ids[pos], &live->ids[pos + 1], (live->count - pos - 1) * sizeof(uint32_t));
	live->count--;
}

/* ---- Building ------------------------------------------------------------------------- */

struct raw_ref {
	uint32_t buffer, event;
	uint64_t offset;
};

struct builder {
	const struct lynx_prof_trace *trace;
	struct lynx_prof_lifetimes *lt;
	size_t buffer_cap;
	struct live live;
	struct raw_ref *raw;
	size_t raw_count, raw_cap;
};

static void end_buffer(struct builder *b, uint32_t id, size_t event)
{
	struct lynx_prof_buffer *buf = &b->lt->buffers[id];

	buf->free_event = (uint32_t)event;
	buf->free_ns = b->trace->events[event].t_ns;
}

static int on_alloc(struct builder *b, size_t i)
{
	const struct lynx_prof_event *ev = &b->trace->events[i];
	struct lynx_prof_lifetimes *lt = b->lt;
	uint64_t ptr = ev->u.mem.ptr, bytes = ev->u.mem.bytes;
	size_t pos;
	uint32_t id;

	if (!bytes || ptr + bytes < ptr)
		return 0;
	/* Live buffers under the new range were freed unseen: end them here. */
	pos = live_upper(&b->live, lt->buffers, ptr + bytes - 1);
	while (pos > 0) {
		uint32_t old = b->live.ids[pos - 1];
		const struct lynx_prof_buffer *o = &lt->buffers[old];

		if (o->ptr + o->bytes <= ptr)
			break;
		end_buffer(b, old, i);
		live_remove_at(&b->live, pos - 1);
		lt->overlaps++;
		pos--;
	}
	if (lt->count >= UINT32_MAX - 1 ||
	    grow((void **)&lt->buffers, &b->buffer_cap, lt->count + 1, sizeof(*lt->buffers)) ||
	    grow((void **)&b->live.ids, &b->live.cap, b->live.count + 1, sizeof(uint32_t)))
		return -ENOMEM;
	id = (uint32_t)lt->count++;
	lt->buffers[id] = (struct lynx_prof_buffer){
	        .ptr = ptr,
	        .bytes = bytes,
	        .stream = ev->stream,
	        .alloc_event = (uint32_t)i,
	        .free_event = LYNX_PROF_NONE,
	        .alloc_ns = ev->t_ns,
	        .producer = LYNX_PROF_NONE,
	        .last_consumer = LYNX_PROF_NONE,
	        .cls = LYNX_PROF_CLASS_OTHER,
	        .span = LYNX_PROF_NONE,
	};
	memmove(&b->live.ids[pos + 1], &b->live.ids[pos], (b->live.count - pos) * sizeof(uint32_t));
	b->live.ids[pos] = id;
	b->live.count++;
	return 0;
}

static void on_free(struct builder *b, size_t i)
{
	uint64_t ptr = b->trace->events[i].u.mem.ptr;
	size_t pos = live_upper(&b->live, b->lt->buffers, ptr);

	if (pos == 0 || b->lt->buffers[b->live.ids[pos - 1]].ptr != ptr) {
		b->lt->unmatched_frees++;
		return;
	}
	end_buffer(b, b->live.ids[pos - 1], i);
	live_remove_at(&b->live, pos - 1);
}

/* Records a reference from event (the program's call) if addr is inside a live buffer. */
static int reference(struct builder *b, uint64_t addr, uint32_t event)
{
	uint32_t id = live_find(&b->live, b->lt->buffers, addr);
	uint64_t offset;

	if (id == LYNX_PROF_NONE)
		return 0;
	offset = addr - b->lt->buffers[id].ptr;
	/* The same call naming the same buffer twice (two words, or a runtime call and its
	 * driver call) is one reference, at its lowest offset. */
	for (size_t k = b->raw_count; k-- > 0 && b->raw[k].event == event;) {
		if (b->raw[k].buffer == id) {
			if (offset < b->raw[k].offset)
				b->raw[k].offset = offset;
			return 0;
		}
	}
	if (grow((void **)&b->raw, &b->raw_cap, b->raw_count + 1, sizeof(*b->raw)))
		return -ENOMEM;
	b->raw[b->raw_count++] = (struct raw_ref){.buffer = id, .event = event, .offset = offset};
	return 0;
}

static int scan_event(struct builder *b, size_t i, uint32_t call)
{
	const struct lynx_prof_event *ev = &b->trace->events[i];
	int err = 0;

	switch (ev->kind) {
	case LYNX_PROF_LAUNCH:
		if (!ev->u.launch.params)
			return 0;
		for (uint32_t off = 0; !err && off + 8 <= ev->u.launch.param_bytes; off += 8) {
			uint64_t word;

			memcpy(&word, ev->u.launch.params + off, sizeof(word));
			err = reference(b, word, call);
		}
		return err;
	case LYNX_PROF_COPY:
		err = reference(b, ev->u.copy.dst, call);
		return err ? err : reference(b, ev->u.copy.src, call);
	case LYNX_PROF_MEMSET:
		return reference(b, ev->u.mem.ptr, call);
	case LYNX_PROF_COLL:
	case LYNX_PROF_P2P:
		err = reference(b, ev->u.nccl.send, call);
		return err ? err : reference(b, ev->u.nccl.recv, call);
	default:
		return 0;
	}
}

/*
 * A buffer whose first reference is a kernel that names it alone (it reads nothing: a
 * fill), followed by a kernel that names it and other buffers, is produced by that second
 * kernel: PyTorch under torch.use_deterministic_algorithms fills every new tensor (NaN)
 * before the kernel that computes it overwrites it, and replaying the fill rebuilds
 * nothing (the H200 run refused 72 such replays). Where the second kernel does not
 * overwrite the whole buffer (zeros, then an accumulation), the replay's examination
 * finds the difference and the buffer is offloaded instead. Returns 0 or -ENOMEM.
 */
static int past_initialisers(struct builder *b)
{
	struct lynx_prof_lifetimes *lt = b->lt;
	const struct lynx_prof_trace *t = b->trace;
	uint8_t *named = calloc(t->count ? t->count : 1, 1); /* buffers an event names, capped */

	if (!named)
		return -ENOMEM;
	for (size_t r = 0; r < lt->ref_count; r++)
		if (named[lt->refs[r].event] < 2)
			named[lt->refs[r].event]++;
	for (size_t id = 0; id < lt->count; id++) {
		struct lynx_prof_buffer *buf = &lt->buffers[id];
		if (buf->ref_count < 2)
			continue;
		uint32_t first = lt->refs[buf->first_ref].event;
		uint32_t next = lt->refs[buf->first_ref + 1].event;
		const struct lynx_prof_event *f = &t->events[first], *n = &t->events[next];
		if (f->kind == LYNX_PROF_LAUNCH && !f->nested && named[first] == 1 &&
		    n->kind == LYNX_PROF_LAUNCH && !n->nested && named[next] > 1)
			buf->producer = next;
	}
	free(named);
	return 0;
}

/* Groups the raw references by buffer, keeping event order (a stable counting sort). */
static int gather_refs(struct builder *b)
{
	struct lynx_prof_lifetimes *lt = b->lt;
	size_t *start = calloc(lt->count + 1, sizeof(*start));

	if (!start)
		return -ENOMEM;
	lt->refs = malloc((b->raw_count ? b->raw_count : 1) * sizeof(*lt->refs));
	if (!lt->refs) {
		free(start);
		return -ENOMEM;
	}
	for (size_t k = 0; k < b->raw_count; k++)
		start[b->raw[k].buffer + 1]++;
	for (size_t id = 0; id < lt->count; id++)
		start[id + 1] += start[id];
	for (size_t id = 0; id < lt->count; id++) {
		lt->buffers[id].first_ref = start[id];
		lt->buffers[id].ref_count = 0;
	}
	for (size_t k = 0; k < b->raw_count; k++) {
		struct lynx_prof_buffer *buf = &lt->buffers[b->raw[k].buffer];
		struct lynx_prof_ref *last =
		        buf->ref_count ? &lt->refs[buf->first_ref + buf->ref_count - 1] : NULL;

		/* A nested call's references and its enclosing call's, apart. */
		if (last && last->event == b->raw[k].event) {
			if (b->raw[k].offset < last->offset)
				last->offset = b->raw[k].offset;
			continue;
		}
		lt->refs[buf->first_ref + buf->ref_count++] = (struct lynx_prof_ref){
		        .event = b->raw[k].event, .offset = b->raw[k].offset};
	}
	/* Close the gaps left by merged references. */
	lt->ref_count = 0;
	for (size_t id = 0; id < lt->count; id++) {
		struct lynx_prof_buffer *buf = &lt->buffers[id];

		memmove(&lt->refs[lt->ref_count], &lt->refs[buf->first_ref],
		        buf->ref_count * sizeof(*lt->refs));
		buf->first_ref = lt->ref_count;
		lt->ref_count += buf->ref_count;
		if (buf->ref_count) {
			buf->producer = lt->refs[buf->first_ref].event;
			buf->last_consumer = lt->refs[buf->first_ref + buf->ref_count - 1].event;
		}
	}
	free(start);
	return past_initialisers(b);
}

int lynx_prof_lifetimes_build(const struct lynx_prof_trace *trace, struct lynx_prof_lifetimes *out,
                              char *why, size_t why_len)
{
	struct builder b = {.trace = trace, .lt = out};
	uint32_t *call = NULL;
	int err = 0;

	memset(out, 0, sizeof(*out));
	if (trace->count >= UINT32_MAX) {
		set_why(why, why_len, "trace of %zu events: too many", trace->count);
		return -EINVAL;
	}
	for (size_t i = 1; i < trace->count; i++) {
		if (trace->events[i].t_ns < trace->events[i - 1].t_ns) {
			set_why(why, why_len,
			        "event %zu: time goes back (the trace is not in time order)", i);
			return -EINVAL;
		}
	}
	call = enclosing_calls(trace);
	if (!call) {
		err = -ENOMEM;
		goto out_free;
	}
	for (size_t i = 0; !err && i < trace->count; i++) {
		const struct lynx_prof_event *ev = &trace->events[i];

		if (ev->kind == LYNX_PROF_ALLOC || ev->kind == LYNX_PROF_FREE) {
			if (ev->result != 0 || !ev->u.mem.ptr || is_host(ev))
				continue;
			if (is_duplicate(trace, call, i)) {
				out->duplicates++;
				continue;
			}
			if (ev->kind == LYNX_PROF_ALLOC)
				err = on_alloc(&b, i);
			else
				on_free(&b, i);
			continue;
		}
		if (ev->result == 0)
			err = scan_event(&b, i, call[i]);
	}
	if (!err)
		err = gather_refs(&b);
out_free:
	free(call);
	free(b.raw);
	free(b.live.ids);
	if (err) {
		lynx_prof_lifetimes_free(out);
		set_why(why, why_len, "out of memory");
	}
	return err;
}

/* ---- Classification ------------------------------------------------------------------- */

/* A forward or backward half of a layer span, for lookups by event. */
struct half {
	uint32_t begin, end, span;
	bool backward;
};

static int cmp_half(const void *a, const void *b)
{
	const struct half *x = a, *y = b;

	return (x->begin > y->begin) - (x->begin < y->begin);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* The half holding event, or NULL. Halves are sorted and do not overlap. */
static const struct half *half_of(const struct half *halves, size_t n, uint32_t event)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (halves[mid].begin <= event)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || event >= halves[lo - 1].end)
		return NULL;
	return &halves[lo - 1];
}

/* Whether a sorted boundary lies in (alloc, free]; free LYNX_PROF_NONE is the end of time. */
static bool crosses(const uint32_t *bounds, size_t n, uint32_t alloc, uint32_t free_event)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (bounds[mid] <= alloc)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && bounds[lo] <= free_event;
}

static int check_span(const struct lynx_prof_span *s, size_t event_count, const char *what,
                      size_t k, char *why, size_t why_len)
{
	if (s->begin > s->end || s->end > event_count) {
		set_why(why, why_len, "%s %zu: [%u, %u) is not a range of the %zu events", what, k,
		        s->begin, s->end, event_count);
		return -EINVAL;
	}
	return 0;
}

static int check_structure(const struct lynx_prof_structure *s, size_t event_count, char *why,
                           size_t why_len)
{
	for (size_t k = 0; k < s->iteration_count; k++) {
		if (check_span(&s->iterations[k], event_count, "iteration", k, why, why_len))
			return -EINVAL;
		if (k && s->iterations[k].begin < s->iterations[k - 1].end) {
			set_why(why, why_len, "iteration %zu: overlaps or precedes the one before",
			        k);
			return -EINVAL;
		}
	}
	for (size_t k = 0; k < s->layer_count; k++) {
		const struct lynx_prof_layer_span *l = &s->layers[k];

		if (check_span(&l->forward, event_count, "layer span forward", k, why, why_len) ||
		    check_span(&l->backward, event_count, "layer span backward", k, why, why_len))
			return -EINVAL;
		if (l->iteration >= s->iteration_count) {
			set_why(why, why_len, "layer span %zu: iteration %u of %zu", k,
			        l->iteration, s->iteration_count);
			return -EINVAL;
		}
	}
	return 0;
}

/* A reference inside a layer span: the offset it touched and the span's layer. */
struct pair {
	uint64_t offset;
	uint32_t layer;
};

static int cmp_pair(const void *a, const void *b)
{
	const struct pair *x = a, *y = b;

	if (x->offset != y->offset)
		return (x->offset > y->offset) - (x->offset < y->offset);
	return (x->layer > y->layer) - (x->layer < y->layer);
}

struct classifier {
	const struct lynx_prof_structure *s;
	struct lynx_prof_lifetimes *lt;
	uint32_t *iter_bounds, *all_bounds;
	size_t iter_count, all_count;
	struct half *halves;
	size_t half_count;
	/* Scratch, one entry per reference of the buffer at hand. */
	struct pair *pairs;
	uint32_t *spans;
};

static size_t sort_unique(uint32_t *v, size_t n)
{
	size_t m = 0;

	qsort(v, n, sizeof(*v), cmp_u32);
	for (size_t k = 0; k < n; k++)
		if (!m || v[m - 1] != v[k])
			v[m++] = v[k];
	return m;
}

static int prepare(struct classifier *c)
{
	const struct lynx_prof_structure *s = c->s;
	size_t max_refs = 0;

	c->iter_bounds = malloc((s->iteration_count + 1) * sizeof(uint32_t));
	c->all_bounds = malloc((s->iteration_count + 1 + 4 * s->layer_count) * sizeof(uint32_t));
	c->halves = malloc((2 * s->layer_count + 1) * sizeof(*c->halves));
	for (size_t id = 0; id < c->lt->count; id++)
		if (c->lt->buffers[id].ref_count > max_refs)
			max_refs = c->lt->buffers[id].ref_count;
	c->pairs = malloc((max_refs + 1) * sizeof(*c->pairs));
	c->spans = malloc((max_refs + 1) * sizeof(*c->spans));
	if (!c->iter_bounds || !c->all_bounds || !c->halves || !c->pairs || !c->spans)
		return -ENOMEM;
	for (size_t k = 0; k < s->iteration_count; k++)
		c->iter_bounds[c->iter_count++] = s->iterations[k].begin;
	if (s->iteration_count)
		c->iter_bounds[c->iter_count++] = s->iterations[s->iteration_count - 1].end;
	memcpy(c->all_bounds, c->iter_bounds, c->iter_count * sizeof(uint32_t));
	c->all_count = c->iter_count;
	for (size_t k = 0; k < s->layer_count; k++) {
		const struct lynx_prof_layer_span *l = &s->layers[k];

		c->all_bounds[c->all_count++] = l->forward.begin;
		c->all_bounds[c->all_count++] = l->forward.end;
		c->all_bounds[c->all_count++] = l->backward.begin;
		c->all_bounds[c->all_count++] = l->backward.end;
		if (l->forward.begin < l->forward.end)
			c->halves[c->half_count++] =
			        (struct half){l->forward.begin, l->forward.end, (uint32_t)k, false};
		if (l->backward.begin < l->backward.end)
			c->halves[c->half_count++] = (struct half){
			        l->backward.begin, l->backward.end, (uint32_t)k, true};
	}
	c->iter_count = sort_unique(c->iter_bounds, c->iter_count);
	c->all_count = sort_unique(c->all_bounds, c->all_count);
	qsort(c->halves, c->half_count, sizeof(*c->halves), cmp_half);
	return 0;
}

/*
 * Parameter words that name memory only by chance: a 32-bit integer beside the upper half
 * of a pointer left on the trainer's stack (the padding of a by-value struct: tinytrain's
 * layer norm backward ends in an int and 4 such bytes), or two packed integers. Their low
 * 32 bits are small, so they can name a buffer only just past a 4 GiB line it crosses.
 * Words below PACKED_INT_LIMIT past a line, beyond a buffer's first byte, still count for
 * its lifetime (the safe side) but not as layers sharing it: one per layer made an
 * optimizer state that straddled a line a "workspace", and its bytes were taken off the
 * plan's budget until no plan fitted.
 */
#define PACKED_INT_LIMIT (1ull << 20)

static bool maybe_packed_integer(const struct lynx_prof_buffer *buf, uint64_t offset)
{
	return offset != 0 && ((buf->ptr + offset) & 0xffffffffull) < PACKED_INT_LIMIT;
}

/* Whether events of two different layers reference buf at one offset. O(r log r) in its
 * references r. */
static bool shared_by_layers(struct classifier *c, const struct lynx_prof_buffer *buf)
{
	size_t n = 0;

	for (size_t k = 0; k < buf->ref_count; k++) {
		const struct lynx_prof_ref *r = &c->lt->refs[buf->first_ref + k];
		const struct half *h = half_of(c->halves, c->half_count, r->event);

		if (h && !maybe_packed_integer(buf, r->offset))
			c->pairs[n++] = (struct pair){r->offset, c->s->layers[h->span].layer};
	}
	qsort(c->pairs, n, sizeof(*c->pairs), cmp_pair);
	for (size_t k = 1; k < n; k++)
		if (c->pairs[k].offset == c->pairs[k - 1].offset &&
		    c->pairs[k].layer != c->pairs[k - 1].layer)
			return true;
	return false;
}

/* The layer span whose forward and backward both reference buf, allocated before that
 * backward began; LYNX_PROF_NONE if none. */
static uint32_t saved_span(struct classifier *c, const struct lynx_prof_buffer *buf)
{
	size_t n = 0;

	for (size_t k = 0; k < buf->ref_count; k++) {
		const struct half *h =
		        half_of(c->halves, c->half_count, c->lt->refs[buf->first_ref + k].event);

		if (!h)
			continue;
		if (!h->backward) {
			if (!n || c->spans[n - 1] != h->span)
				c->spans[n++] = h->span;
			continue;
		}
		if (buf->alloc_event >= c->s->layers[h->span].backward.begin)
			continue;
		for (size_t j = 0; j < n; j++)
			if (c->spans[j] == h->span)
				return h->span;
	}
	return LYNX_PROF_NONE;
}

static enum lynx_prof_class classify(struct classifier *c, struct lynx_prof_buffer *buf)
{
	if (crosses(c->iter_bounds, c->iter_count, buf->alloc_event, buf->free_event))
		return shared_by_layers(c, buf) ? LYNX_PROF_CLASS_WORKSPACE
		                                : LYNX_PROF_CLASS_WEIGHT;
	if (buf->free_event != LYNX_PROF_NONE &&
	    !crosses(c->all_bounds, c->all_count, buf->alloc_event, buf->free_event))
		return LYNX_PROF_CLASS_TEMPORARY;
	buf->span = saved_span(c, buf);
	return buf->span != LYNX_PROF_NONE ? LYNX_PROF_CLASS_SAVED : LYNX_PROF_CLASS_OTHER;
}

/* A change of live bytes at an event: frees sort before allocations at one event. */
struct delta {
	uint32_t event;
	bool alloc;
	uint32_t buffer;
};

static int cmp_delta(const void *a, const void *b)
{
	const struct delta *x = a, *y = b;

	if (x->event != y->event)
		return (x->event > y->event) - (x->event < y->event);
	return (int)x->alloc - (int)y->alloc;
}

static void raise_to(uint64_t *most, uint64_t bytes)
{
	if (bytes > *most)
		*most = bytes;
}

/* Live bytes by class at an event in the range find_peak looks at: a candidate peak. Its
 * non-saved bytes count outside the layer spans when the event is in none (outside). */
static void consider_peak(struct lynx_prof_lifetimes *lt, bool outside,
                          const uint64_t live[LYNX_PROF_CLASS_COUNT], uint64_t total,
                          uint32_t event)
{
	uint64_t non_saved = total - live[LYNX_PROF_CLASS_SAVED];

	raise_to(&lt->non_saved_peak_bytes, non_saved);
	if (outside)
		raise_to(&lt->non_saved_outside_bytes, non_saved);
	if (total > lt->peak_bytes) {
		lt->peak_bytes = total;
		lt->peak_event = event;
		memcpy(lt->peak_by_class, live, sizeof(lt->peak_by_class));
	}
}

/*
 * The peak and its breakdown by class, and the non-saved peak, inside the identical
 * iterations (spans [begin, end), in order). Only there are activations classified; a
 * different first iteration's are "other". That iteration often reaches the same total
 * (optimizer state made at start-up, the same activations), so a peak taken over the whole
 * trace would report no saved bytes at it, and every budget would look below static
 * memory. The same holds for a step between two runs of identical iterations (one that
 * synchronises once more, every few steps). What is live on entry to an iteration counts
 * too: a caching allocator may allocate nothing there.
 */
static int find_peak(struct lynx_prof_lifetimes *lt, const struct classifier *c, size_t event_count,
                     const struct lynx_prof_span *its, size_t n_its)
{
	struct delta *d = malloc((2 * lt->count + 1) * sizeof(*d));
	uint64_t live[LYNX_PROF_CLASS_COUNT] = {0}, total = 0;
	bool entered = false; /* iteration `cur` has been entered */
	size_t n = 0, cur = 0, e = 0;
	bool outside = true, was = true;

	free(lt->non_saved_after);
	lt->non_saved_after = calloc(event_count + 1, sizeof(uint64_t));
	lt->non_saved_events = event_count;
	lt->non_saved_outside_bytes = 0;
	if (!d || !lt->non_saved_after) {
		free(d);
		return -ENOMEM;
	}
	for (size_t id = 0; id < lt->count; id++) {
		d[n++] = (struct delta){lt->buffers[id].alloc_event, true, (uint32_t)id};
		if (lt->buffers[id].free_event != LYNX_PROF_NONE)
			d[n++] = (struct delta){lt->buffers[id].free_event, false, (uint32_t)id};
	}
	qsort(d, n, sizeof(*d), cmp_delta);
	lt->peak_bytes = 0;
	lt->peak_event = LYNX_PROF_NONE;
	lt->non_saved_peak_bytes = 0;
	memset(lt->peak_by_class, 0, sizeof(lt->peak_by_class));
	for (size_t k = 0; k < n; k++) {
		const struct lynx_prof_buffer *buf = &lt->buffers[d[k].buffer];
		uint32_t event = d[k].event;

		/* Events before this one: what was live after the last change. */
		for (; e < event && e < event_count; e++)
			lt->non_saved_after[e] = total - live[LYNX_PROF_CLASS_SAVED];
		while (cur < n_its &&
		       event >= its[cur].end) { /* past it: live on entry if unseen */
			if (!entered)
				consider_peak(lt, true, live, total, its[cur].begin);
			cur++;
			entered = false;
		}
		if (cur < n_its && !entered && event >= its[cur].begin) {
			entered = true;
			consider_peak(lt, true, live, total, its[cur].begin);
		}
		/* Out of a layer span: what is live on leaving it counts outside too. */
		outside = !half_of(c->halves, c->half_count, event);
		if (entered && outside && !was)
			consider_peak(lt, true, live, total, event);
		was = outside;
		if (!d[k].alloc) {
			live[buf->cls] -= buf->bytes;
			total -= buf->bytes;
			continue;
		}
		live[buf->cls] += buf->bytes;
		total += buf->bytes;
		if (entered)
			consider_peak(lt, outside, live, total, event);
	}
	for (; e < event_count; e++)
		lt->non_saved_after[e] = total - live[LYNX_PROF_CLASS_SAVED];
	for (; cur < n_its; cur++, entered = false)
		if (!entered)
			consider_peak(lt, true, live, total, its[cur].begin);
	free(d);
	return 0;
}

int lynx_prof_lifetimes_classify(struct lynx_prof_lifetimes *lt,
                                 const struct lynx_prof_structure *structure, size_t event_count,
                                 char *why, size_t why_len)
{
	struct classifier c = {.s = structure, .lt = lt};
	int err;

	err = check_structure(structure, event_count, why, why_len);
	if (err)
		return err;
	free(lt->saved_bytes);
	lt->saved_count = structure->layer_count;
	lt->saved_bytes = calloc(lt->saved_count + 1, sizeof(*lt->saved_bytes));
	err = lt->saved_bytes ? prepare(&c) : -ENOMEM;
	for (size_t id = 0; !err && id < lt->count; id++) {
		struct lynx_prof_buffer *buf = &lt->buffers[id];

		buf->span = LYNX_PROF_NONE;
		buf->cls = classify(&c, buf);
		if (buf->cls == LYNX_PROF_CLASS_WORKSPACE &&
		    buf->bytes > lt->largest_workspace_bytes)
			lt->largest_workspace_bytes = buf->bytes;
		if (buf->cls == LYNX_PROF_CLASS_SAVED)
			lt->saved_bytes[buf->span] += buf->bytes;
	}
	if (!err && structure->iteration_count)
		err = find_peak(lt, &c, event_count, structure->iterations,
		                structure->iteration_count);
	else if (!err)
		err = find_peak(lt, &c, event_count, &(struct lynx_prof_span){0, UINT32_MAX}, 1);
	if (err)
		set_why(why, why_len, "out of memory");
	free(c.iter_bounds);
	free(c.all_bounds);
	free(c.halves);
	free(c.pairs);
	free(c.spans);
	return err;
}

uint64_t lynx_prof_lifetimes_saved_bytes(const struct lynx_prof_lifetimes *lt,
                                         const struct lynx_prof_structure *structure,
                                         uint32_t layer, uint32_t microbatch)
{
	uint64_t most = 0;

	for (size_t k = 0; k < structure->layer_count && k < lt->saved_count; k++) {
		const struct lynx_prof_layer_span *l = &structure->layers[k];

		if (l->layer == layer && l->microbatch == microbatch && lt->saved_bytes[k] > most)
			most = lt->saved_bytes[k];
	}
	return most;
}

const struct lynx_prof_buffer *lynx_prof_lifetimes_find(const struct lynx_prof_lifetimes *lt,
                                                        uint64_t addr, uint32_t event)
{
	for (size_t id = lt->count; id-- > 0;) {
		const struct lynx_prof_buffer *buf = &lt->buffers[id];

		if (buf->alloc_event <= event &&
		    (buf->free_event == LYNX_PROF_NONE || event < buf->free_event) &&
		    addr - buf->ptr < buf->bytes)
			return buf;
	}
	return NULL;
}

void lynx_prof_lifetimes_free(struct lynx_prof_lifetimes *lt)
{
	free(lt->buffers);
	free(lt->refs);
	free(lt->saved_bytes);
	free(lt->non_saved_after);
	memset(lt, 0, sizeof(*lt));
}
