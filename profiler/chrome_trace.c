/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Writes one rank's trace as Chrome trace-event JSON (chrome_trace.h says what each track
 * holds and on which clock).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "atomic_file.h"
#include "chrome_trace.h"
#include "lifetime.h"
#include "period.h"
#include "segment.h"

struct stream_track {
	uint64_t handle;
	uint64_t last_end; /* host-clock ns where its last device-timed slice ends */
	bool timed_seen;
};

/* A cross-stream wait: the record it waits on, the wait, and where the record marker went. */
struct flow {
	uint32_t record, wait;
	uint64_t record_ns;
};

/* The device span of a thread's nested calls since its last call of its own: a runtime call
 * that was not timed borrows the span of the driver call it made. */
struct nested_span {
	uint32_t tid;
	uint64_t start, end; /* device ns; end 0: none */
};

struct writer {
	FILE *f;
	const struct lynx_prof_trace *t;
	const struct lynx_profile *profile;
	int32_t rank, world;
	int pid;           /* the Chrome process id */
	uint64_t t0;       /* host ns of ts 0 */
	int64_t shift;     /* device ns + shift = host ns */
	size_t timed;      /* stream items drawn on the device clock */
	bool first_event;  /* no comma before the next event */
	bool have_windows; /* NCCL calls carry window kinds from the profile */

	struct stream_track *streams;
	size_t stream_count;
	uint32_t *threads; /* host threads, by first call */
	size_t thread_count;
	struct flow *flows;            /* in wait order */
	struct flow_ref *flows_by_rec; /* the flows, by record */
	size_t flow_count;
	struct nested_span *nested;
	size_t nested_count;
	signed char *window; /* per event: a window kind, or -1 */

	struct lynx_prof_iterations its;
	bool have_its;
	char its_why[240];
	struct lynx_prof_layers *layers; /* per iteration; fwd NULL where segmenting failed */
	size_t segmented;
	struct lynx_prof_span *iter_spans;
	struct lynx_prof_layer_span *spans;
	size_t span_count;
	struct lynx_prof_lifetimes lt;
	bool have_lt;
	char lt_why[240];
};

/* ---- JSON pieces ---------------------------------------------------------------------------- */

static void put_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if (*c == '"' || *c == '\\')
			fprintf(f, "\\%c", *c);
		else if (*c < 0x20)
			fprintf(f, "\\u%04x", *c);
		else
			fputc(*c, f);
	}
	fputc('"', f);
}

/* Microseconds with exact nanoseconds: "12.345". */
static void put_us(FILE *f, uint64_t ns)
{
	fprintf(f, "%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000));
}

static uint64_t rel(const struct writer *w, uint64_t host_ns)
{
	return host_ns > w->t0 ? host_ns - w->t0 : 0;
}

/* Opens one event up to its timestamp: the caller adds dur, args... and calls close_event. */
static void open_event(struct writer *w, const char *ph, const char *name, const char *cat,
                       uint32_t tid, uint64_t host_ns)
{
	fputs(w->first_event ? "\n" : ",\n", w->f);
	w->first_event = false;
	fprintf(w->f, "{\"ph\":\"%s\",\"name\":", ph);
	put_string(w->f, name);
	if (cat) {
		fputs(",\"cat\":", w->f);
		put_string(w->f, cat);
	}
	fprintf(w->f, ",\"pid\":%d,\"tid\":%" PRIu32 ",\"ts\":", w->pid, tid);
	put_us(w->f, rel(w, host_ns));
}

static void close_event(struct writer *w)
{
	fputc('}', w->f);
}

static void metadata(struct writer *w, const char *what, uint32_t tid, const char *key,
                     const char *text, long number)
{
	fputs(w->first_event ? "\n" : ",\n", w->f);
	w->first_event = false;
	fprintf(w->f,
	        "{\"ph\":\"M\",\"name\":\"%s\",\"pid\":%d,\"tid\":%" PRIu32 ",\"args\":{\"%s\":",
	        what, w->pid, tid, key);
	if (text)
		put_string(w->f, text);
	else
		fprintf(w->f, "%ld", number);
	fputs("}}", w->f);
}

/* ---- What the events are -------------------------------------------------------------------- */

/* Work a stream runs in order: it gets a slice or an instant on the stream's track. */
static bool is_stream_work(const struct lynx_prof_event *e)
{
	switch (e->kind) {
	case LYNX_PROF_LAUNCH:
	case LYNX_PROF_COPY:
	case LYNX_PROF_MEMSET:
	case LYNX_PROF_HOST_FUNC:
	case LYNX_PROF_COLL:
	case LYNX_PROF_P2P:
		return true;
	case LYNX_PROF_GRAPH:
		return e->hook && strstr(e->hook, "GraphLaunch");
	default:
		return false;
	}
}

/* The program's own successful call that put something on a stream (a graph capture only
 * records work, it runs nothing). */
static bool on_stream(const struct lynx_prof_event *e)
{
	if (e->nested || e->captured || e->result != 0)
		return false;
	return is_stream_work(e) || e->kind == LYNX_PROF_EVENT_RECORD ||
	       e->kind == LYNX_PROF_STREAM_WAIT;
}

static bool is_timed(const struct lynx_prof_event *e)
{
	return (e->dev_start_ns || e->dev_end_ns) && e->dev_end_ns >= e->dev_start_ns;
}

static const char *kind_name(const struct lynx_prof_event *e)
{
	const char *name = lynx_prof_kind_name(e->kind);

	return name ? name : "unknown";
}

/* ---- Preparation: streams, threads, flows, the device shift ------------------------------ */

/* Linear in the streams (a few per process: compute, communication, a side stream or two). */
static struct stream_track *find_stream(struct writer *w, uint64_t handle)
{
	for (size_t i = 0; i < w->stream_count; i++)
		if (w->streams[i].handle == handle)
			return &w->streams[i];
	return NULL;
}

static int add_stream(struct writer *w, uint64_t handle)
{
	struct stream_track *grown;

	if (find_stream(w, handle))
		return 0;
	grown = realloc(w->streams, (w->stream_count + 1) * sizeof(*grown));
	if (!grown)
		return -ENOMEM;
	w->streams = grown;
	w->streams[w->stream_count++] = (struct stream_track){.handle = handle};
	return 0;
}

static int add_thread(struct writer *w, uint32_t tid)
{
	uint32_t *grown;

	for (size_t i = 0; i < w->thread_count; i++)
		if (w->threads[i] == tid)
			return 0;
	grown = realloc(w->threads, (w->thread_count + 1) * sizeof(*grown));
	if (!grown)
		return -ENOMEM;
	w->threads = grown;
	w->threads[w->thread_count++] = tid;
	return 0;
}

/* The last record of each event handle, for matching waits. */
struct last_record {
	uint64_t handle, stream;
	uint32_t event;
};

/*
 * Pairs each cross-stream wait with the record it waits on. Linear in the distinct event
 * handles per record and wait: fine for the few hundred events a framework's pool holds.
 */
static int find_flows(struct writer *w)
{
	const struct lynx_prof_trace *t = w->t;
	struct last_record *last = NULL;
	size_t last_count = 0, cap = 0;
	int err = 0;

	for (size_t i = 0; i < t->count; i++) {
		const struct lynx_prof_event *e = &t->events[i];
		size_t k;

		if (!on_stream(e) ||
		    (e->kind != LYNX_PROF_EVENT_RECORD && e->kind != LYNX_PROF_STREAM_WAIT))
			continue;
		for (k = 0; k < last_count && last[k].handle != e->u.sync.handle; k++)
			;
		if (e->kind == LYNX_PROF_EVENT_RECORD) {
			if (k == last_count) {
				if (last_count == cap) {
					size_t n = cap ? 2 * cap : 16;
					struct last_record *grown =
					        realloc(last, n * sizeof(*grown));
					if (!grown) {
						err = -ENOMEM;
						goto out;
					}
					last = grown;
					cap = n;
				}
				last_count++;
			}
			last[k] = (struct last_record){e->u.sync.handle, e->stream, (uint32_t)i};
			continue;
		}
		if (k == last_count || last[k].stream == e->stream)
			continue;
		struct flow *grown = realloc(w->flows, (w->flow_count + 1) * sizeof(*grown));
		if (!grown) {
			err = -ENOMEM;
			goto out;
		}
		w->flows = grown;
		w->flows[w->flow_count++] = (struct flow){last[k].event, (uint32_t)i, 0};
	}
out:
	free(last);
	return err;
}

/* A flow by the record it starts at, for emitting record markers as the walk reaches them. */
struct flow_ref {
	uint32_t record, wait, flow;
};

static int by_record(const void *a, const void *b)
{
	const struct flow_ref *x = a, *y = b;

	if (x->record != y->record)
		return x->record < y->record ? -1 : 1;
	return (x->wait > y->wait) - (x->wait < y->wait);
}

static int order_flows(struct writer *w)
{
	w->flows_by_rec = malloc((w->flow_count + 1) * sizeof(*w->flows_by_rec));
	if (!w->flows_by_rec)
		return -ENOMEM;
	for (size_t i = 0; i < w->flow_count; i++)
		w->flows_by_rec[i] =
		        (struct flow_ref){w->flows[i].record, w->flows[i].wait, (uint32_t)i};
	qsort(w->flows_by_rec, w->flow_count, sizeof(*w->flows_by_rec), by_record);
	return 0;
}

/* The smallest shift that puts no timed work before the return of its call. */
static void device_shift(struct writer *w)
{
	bool any = false;

	for (size_t i = 0; i < w->t->count; i++) {
		const struct lynx_prof_event *e = &w->t->events[i];
		int64_t d;
		if (!is_timed(e))
			continue;
		d = (int64_t)e->t_ns - (int64_t)e->dev_start_ns;
		if (!any || d > w->shift)
			w->shift = d;
		any = true;
	}
}

static int prepare(struct writer *w)
{
	const struct lynx_prof_trace *t = w->t;
	int err;

	for (size_t i = 0; i < t->count; i++) {
		const struct lynx_prof_event *e = &t->events[i];
		if (on_stream(e) && (err = add_stream(w, e->stream)))
			return err;
		if (!e->nested && (err = add_thread(w, e->tid)))
			return err;
	}
	device_shift(w);
	if ((err = find_flows(w)) || (err = order_flows(w)))
		return err;
	return 0;
}

/* ---- Structure: iterations, layer segments, lifetimes ------------------------------------ */

static int find_structure(struct writer *w)
{
	const struct lynx_prof_trace *t = w->t;
	size_t n = 0;
	int err;

	err = lynx_prof_find_iterations(t, &w->its, w->its_why, sizeof(w->its_why));
	if (err == -ENOMEM)
		return err;
	w->have_its = !err;
	if (w->have_its) {
		w->layers = calloc(w->its.count, sizeof(*w->layers));
		w->iter_spans = calloc(w->its.count, sizeof(*w->iter_spans));
		if (!w->layers || !w->iter_spans)
			return -ENOMEM;
		for (size_t i = 0; i < w->its.count; i++) {
			char reason[200];
			err = lynx_prof_segment_layers(t, &w->its.iter[i], &w->layers[i], reason,
			                               sizeof(reason));
			if (err == -ENOMEM)
				return err;
			if (err) {
				memset(&w->layers[i], 0, sizeof(w->layers[i]));
				snprintf(w->its_why, sizeof(w->its_why), "iteration %zu: %s", i,
				         reason);
			} else {
				w->segmented++;
			}
			w->iter_spans[i] = (struct lynx_prof_span){(uint32_t)w->its.iter[i].first,
			                                           (uint32_t)w->its.iter[i].end};
			n += w->layers[i].layers * w->layers[i].microbatches;
		}
		w->spans = calloc(n ? n : 1, sizeof(*w->spans));
		if (!w->spans)
			return -ENOMEM;
		for (size_t i = 0; i < w->its.count; i++) {
			const struct lynx_prof_layers *l = &w->layers[i];
			for (size_t m = 0; l->fwd && m < l->microbatches; m++)
				for (size_t k = 0; k < l->layers; k++) {
					const struct lynx_prof_segment *f =
					        &l->fwd[m * l->layers + k];
					const struct lynx_prof_segment *b =
					        &l->bwd[m * l->layers + k];
					w->spans[w->span_count++] = (struct lynx_prof_layer_span){
					        (uint32_t)i,
					        (uint32_t)k,
					        (uint32_t)m,
					        {(uint32_t)f->first, (uint32_t)f->end},
					        {(uint32_t)b->first, (uint32_t)b->end}};
				}
		}
	}
	err = lynx_prof_lifetimes_build(t, &w->lt, w->lt_why, sizeof(w->lt_why));
	if (err == -ENOMEM)
		return err;
	if (err)
		return 0;
	w->have_lt = true;
	struct lynx_prof_structure s = {w->iter_spans, w->have_its ? w->its.count : 0, w->spans,
	                                w->span_count};
	err = lynx_prof_lifetimes_classify(&w->lt, &s, t->count, w->lt_why, sizeof(w->lt_why));
	if (err == -ENOMEM)
		return err;
	if (err) { /* the buffers stand; only their classes are unknown */
		for (size_t i = 0; i < w->lt.count; i++)
			w->lt.buffers[i].cls = LYNX_PROF_CLASS_OTHER;
	}
	return 0;
}

/* The program's NCCL calls in [first, end) match the profile's windows one for one. */
static bool windows_match(const struct writer *w, const struct lynx_prof_iteration *it)
{
	const struct lynx_profile *p = w->profile;
	size_t k = 0;

	for (size_t i = it->first; i < it->end; i++) {
		const struct lynx_prof_event *e = &w->t->events[i];
		if (e->nested || (e->kind != LYNX_PROF_COLL && e->kind != LYNX_PROF_P2P))
			continue;
		if (k == p->window_count || !e->hook || strcmp(e->hook, p->windows[k].call) ||
		    e->u.nccl.count != p->windows[k].count)
			return false;
		k++;
	}
	return k == p->window_count;
}

/* Labels the NCCL calls of the iteration the profile's windows describe (the last one whose
 * calls match them). */
static int label_windows(struct writer *w)
{
	const struct lynx_profile *p = w->profile;

	if (!p || !w->have_its || !p->window_count)
		return 0;
	for (size_t i = w->its.count; i-- > 0;) {
		const struct lynx_prof_iteration *it = &w->its.iter[i];
		size_t k = 0;
		if (!windows_match(w, it))
			continue;
		w->window = malloc(w->t->count);
		if (!w->window)
			return -ENOMEM;
		memset(w->window, -1, w->t->count);
		for (size_t j = it->first; j < it->end; j++) {
			const struct lynx_prof_event *e = &w->t->events[j];
			if (!e->nested && (e->kind == LYNX_PROF_COLL || e->kind == LYNX_PROF_P2P))
				w->window[j] = (signed char)p->windows[k++].kind;
		}
		w->have_windows = true;
		return 0;
	}
	return 0;
}

/* ---- The events ------------------------------------------------------------------------------ */

static void stream_name(uint64_t handle, char *buf, size_t len)
{
	if (handle == 0)
		snprintf(buf, len, "stream 0 (default)");
	else if (handle == 1)
		snprintf(buf, len, "stream 0x1 (legacy default)");
	else if (handle == 2)
		snprintf(buf, len, "stream 0x2 (per-thread default)");
	else
		snprintf(buf, len, "stream 0x%" PRIx64, handle);
}

static void write_metadata(struct writer *w)
{
	char name[128];

	if (w->rank >= 0 && w->world >= 0)
		snprintf(name, sizeof(name), "rank %d of %d (pid %d)", w->rank, w->world,
		         w->t->pid);
	else if (w->rank >= 0)
		snprintf(name, sizeof(name), "rank %d (pid %d)", w->rank, w->t->pid);
	else
		snprintf(name, sizeof(name), "pid %d", w->t->pid);
	metadata(w, "process_name", 0, "name", name, 0);
	metadata(w, "process_sort_index", 0, "sort_index", NULL, w->pid);
	if (w->have_its) {
		metadata(w, "thread_name", LYNX_CHROME_TID_LAYERS, "name",
		         "iterations and layers (host time)", 0);
		metadata(w, "thread_sort_index", LYNX_CHROME_TID_LAYERS, "sort_index", NULL, 0);
	}
	for (size_t i = 0; i < w->stream_count; i++) {
		stream_name(w->streams[i].handle, name, sizeof(name));
		metadata(w, "thread_name", LYNX_CHROME_TID_STREAM0 + (uint32_t)i, "name", name, 0);
		metadata(w, "thread_sort_index", LYNX_CHROME_TID_STREAM0 + (uint32_t)i,
		         "sort_index", NULL, 1 + (long)i);
	}
	for (size_t i = 0; i < w->thread_count; i++) {
		snprintf(name, sizeof(name), "thread %" PRIu32 "%s (API calls)", w->threads[i],
		         (int)w->threads[i] == w->t->pid ? " main" : "");
		metadata(w, "thread_name", w->threads[i], "name", name, 0);
		metadata(w, "thread_sort_index", w->threads[i], "sort_index", NULL, 1000 + (long)i);
	}
}

/* The event's own arguments, shared by its host instant and its stream item. */
static void put_payload(struct writer *w, const struct lynx_prof_event *e)
{
	FILE *f = w->f;

	switch (e->kind) {
	case LYNX_PROF_LAUNCH:
		fprintf(f,
		        ",\"grid\":[%" PRIu32 ",%" PRIu32 ",%" PRIu32 "],\"block\":[%" PRIu32
		        ",%" PRIu32 ",%" PRIu32 "],\"shared\":%" PRIu32,
		        e->u.launch.grid[0], e->u.launch.grid[1], e->u.launch.grid[2],
		        e->u.launch.block[0], e->u.launch.block[1], e->u.launch.block[2],
		        e->u.launch.shared);
		break;
	case LYNX_PROF_ALLOC:
	case LYNX_PROF_FREE:
	case LYNX_PROF_MEMSET:
	case LYNX_PROF_VMM:
		fprintf(f, ",\"ptr\":\"0x%" PRIx64 "\",\"bytes\":%" PRIu64, e->u.mem.ptr,
		        e->u.mem.bytes);
		break;
	case LYNX_PROF_COPY:
		fprintf(f, ",\"bytes\":%" PRIu64 ",\"direction\":%" PRId32, e->u.copy.bytes,
		        e->u.copy.direction);
		break;
	case LYNX_PROF_COLL:
	case LYNX_PROF_P2P:
		fprintf(f, ",\"count\":%" PRIu64 ",\"type\":%" PRId32 ",\"comm\":\"0x%" PRIx64 "\"",
		        e->u.nccl.count, e->u.nccl.type, e->u.nccl.comm);
		if (e->kind == LYNX_PROF_P2P)
			fprintf(f, ",\"peer\":%" PRId32, e->u.nccl.peer);
		if (w->window && w->window[e->index] >= 0)
			fprintf(f, ",\"window\":\"%s\"",
			        lynx_profile_window_kind_name(w->window[e->index]));
		break;
	case LYNX_PROF_STREAM:
	case LYNX_PROF_EVENT_RECORD:
	case LYNX_PROF_STREAM_WAIT:
	case LYNX_PROF_SYNC:
	case LYNX_PROF_QUERY:
	case LYNX_PROF_GRAPH:
		if (e->u.sync.handle)
			fprintf(f, ",\"handle\":\"0x%" PRIx64 "\"", e->u.sync.handle);
		break;
	default:
		break;
	}
}

static void host_call(struct writer *w, const struct lynx_prof_event *e)
{
	open_event(w, "i", e->hook ? e->hook : "?", kind_name(e), e->tid, e->t_ns);
	fprintf(w->f, ",\"s\":\"t\",\"args\":{\"clock\":\"host\",\"event\":%" PRIu32, e->index);
	if (e->stream)
		fprintf(w->f, ",\"stream\":\"0x%" PRIx64 "\"", e->stream);
	if (e->kind == LYNX_PROF_LAUNCH && e->u.launch.name) {
		fputs(",\"kernel\":", w->f);
		put_string(w->f, e->u.launch.name);
	}
	put_payload(w, e);
	if (e->result)
		fprintf(w->f, ",\"result\":%" PRId32, e->result);
	if (e->captured)
		fputs(",\"captured\":true", w->f);
	fputs("}", w->f);
	close_event(w);
}

static uint32_t stream_tid(const struct writer *w, const struct stream_track *s)
{
	return LYNX_CHROME_TID_STREAM0 + (uint32_t)(s - w->streams);
}

/* Where the stream stands now: the end of its last device slice, or the call's host time. */
static uint64_t stream_now(const struct stream_track *s, const struct lynx_prof_event *e)
{
	return s->timed_seen && s->last_end > e->t_ns ? s->last_end : e->t_ns;
}

static void marker(struct writer *w, const struct stream_track *s, const struct lynx_prof_event *e,
                   uint64_t ns, size_t flow, bool out)
{
	open_event(w, "X", out ? "record" : "wait", "sync", stream_tid(w, s), ns);
	fprintf(w->f,
	        ",\"dur\":0,\"bind_id\":%zu,\"%s\":true,\"args\":{\"clock\":\"%s\",\"event\":"
	        "%" PRIu32 ",\"handle\":\"0x%" PRIx64 "\",\"call\":",
	        flow + 1, out ? "flow_out" : "flow_in", s->timed_seen ? "device" : "host", e->index,
	        e->u.sync.handle);
	put_string(w->f, e->hook ? e->hook : "?");
	fputs("}", w->f);
	close_event(w);
}

/* The record and wait markers of the flows that start or end at event e. rec_cursor walks
 * flows_by_rec; waits come in the flows' own order. */
static void sync_markers(struct writer *w, struct stream_track *s, const struct lynx_prof_event *e,
                         size_t *rec_cursor, size_t *wait_cursor)
{
	if (e->kind == LYNX_PROF_EVENT_RECORD) {
		uint64_t ns = stream_now(s, e);
		while (*rec_cursor < w->flow_count &&
		       w->flows_by_rec[*rec_cursor].record == e->index) {
			size_t k = w->flows_by_rec[(*rec_cursor)++].flow;
			w->flows[k].record_ns = ns;
			marker(w, s, e, ns, k, true);
		}
		return;
	}
	while (*wait_cursor < w->flow_count && w->flows[*wait_cursor].wait == e->index) {
		size_t k = (*wait_cursor)++;
		uint64_t ns = stream_now(s, e);
		marker(w, s, e, ns > w->flows[k].record_ns ? ns : w->flows[k].record_ns, k, false);
	}
}

/* Device-timed work as a slice; a start before the stream's last end (timer noise: a stream
 * runs its work in order) is moved to that end, and says by how much. */
static void device_slice(struct writer *w, struct stream_track *s, const struct lynx_prof_event *e,
                         const char *name, uint64_t dev_start, uint64_t dev_end)
{
	uint64_t start = (uint64_t)((int64_t)dev_start + w->shift);
	uint64_t end = (uint64_t)((int64_t)dev_end + w->shift), moved = 0;

	if (s->timed_seen && start < s->last_end) {
		moved = s->last_end - start;
		start = s->last_end;
	}
	if (end < start)
		end = start;
	open_event(w, "X", name, kind_name(e), stream_tid(w, s), start);
	fputs(",\"dur\":", w->f);
	put_us(w->f, end - start);
	fprintf(w->f, ",\"args\":{\"clock\":\"device\",\"event\":%" PRIu32 ",\"call\":", e->index);
	put_string(w->f, e->hook ? e->hook : "?");
	put_payload(w, e);
	if (moved)
		fprintf(w->f, ",\"start_moved_ns\":%" PRIu64, moved);
	fputs("}", w->f);
	close_event(w);
	s->last_end = end;
	s->timed_seen = true;
	w->timed++;
}

static void host_instant(struct writer *w, struct stream_track *s, const struct lynx_prof_event *e,
                         const char *name)
{
	open_event(w, "i", name, kind_name(e), stream_tid(w, s), e->t_ns);
	fprintf(w->f,
	        ",\"s\":\"t\",\"args\":{\"clock\":\"host\",\"note\":\"call return; not timed on "
	        "the device\",\"event\":%" PRIu32 ",\"call\":",
	        e->index);
	put_string(w->f, e->hook ? e->hook : "?");
	put_payload(w, e);
	fputs("}", w->f);
	close_event(w);
}

static struct nested_span *nested_of(struct writer *w, uint32_t tid)
{
	for (size_t i = 0; i < w->nested_count; i++)
		if (w->nested[i].tid == tid)
			return &w->nested[i];
	return NULL;
}

static int note_nested(struct writer *w, const struct lynx_prof_event *e)
{
	struct nested_span *n = nested_of(w, e->tid);

	if (!n) {
		struct nested_span *grown =
		        realloc(w->nested, (w->nested_count + 1) * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		w->nested = grown;
		n = &w->nested[w->nested_count++];
		*n = (struct nested_span){.tid = e->tid};
	}
	if (!n->end || e->dev_start_ns < n->start)
		n->start = e->dev_start_ns;
	if (e->dev_end_ns > n->end)
		n->end = e->dev_end_ns;
	return 0;
}

static void stream_item(struct writer *w, const struct lynx_prof_event *e,
                        const struct nested_span *borrowed, size_t *rec_cursor, size_t *wait_cursor)
{
	struct stream_track *s = find_stream(w, e->stream);
	char addr[32];
	const char *name = e->hook ? e->hook : "?";

	if (e->kind == LYNX_PROF_EVENT_RECORD || e->kind == LYNX_PROF_STREAM_WAIT) {
		sync_markers(w, s, e, rec_cursor, wait_cursor);
		return;
	}
	if (e->kind == LYNX_PROF_LAUNCH) {
		snprintf(addr, sizeof(addr), "0x%" PRIx64, e->u.launch.function);
		name = e->u.launch.name ? e->u.launch.name : addr;
	}
	if (is_timed(e))
		device_slice(w, s, e, name, e->dev_start_ns, e->dev_end_ns);
	else if (borrowed && borrowed->end)
		device_slice(w, s, e, name, borrowed->start, borrowed->end);
	else
		host_instant(w, s, e, name);
}

static int write_calls(struct writer *w)
{
	size_t rec_cursor = 0, wait_cursor = 0;
	int err;

	for (size_t i = 0; i < w->t->count; i++) {
		const struct lynx_prof_event *e = &w->t->events[i];
		struct nested_span *n = nested_of(w, e->tid), borrowed = {0};

		if (e->nested) {
			if (is_timed(e) && (err = note_nested(w, e)))
				return err;
			continue;
		}
		if (n) { /* this call ends what its thread's nested calls were part of */
			borrowed = *n;
			n->end = 0;
		}
		host_call(w, e);
		if (on_stream(e))
			stream_item(w, e, &borrowed, &rec_cursor, &wait_cursor);
	}
	return 0;
}

/* Host time before events [first, end): the return of the call before them. */
static uint64_t span_start(const struct lynx_prof_trace *t, size_t first)
{
	return t->events[first ? first - 1 : first].t_ns;
}

static void host_slice(struct writer *w, const char *name, const char *cat, size_t first,
                       size_t end)
{
	uint64_t a = span_start(w->t, first), b = w->t->events[end - 1].t_ns;

	open_event(w, "X", name, cat, LYNX_CHROME_TID_LAYERS, a);
	fputs(",\"dur\":", w->f);
	put_us(w->f, b > a ? b - a : 0);
	fprintf(w->f, ",\"args\":{\"clock\":\"host\",\"events\":[%zu,%zu]", first, end);
}

static void write_layers(struct writer *w)
{
	size_t span = 0;
	char name[96];

	if (!w->have_its)
		return;
	for (size_t i = 0; i < w->its.count; i++) {
		const struct lynx_prof_iteration *it = &w->its.iter[i];
		const struct lynx_prof_layers *l = &w->layers[i];

		snprintf(name, sizeof(name), "iteration %zu", i);
		host_slice(w, name, "iteration", it->first, it->end);
		if (l->fwd)
			fprintf(w->f, ",\"layers\":%zu,\"microbatches\":%zu", l->layers,
			        l->microbatches);
		fputs("}", w->f);
		close_event(w);
		for (size_t m = 0; l->fwd && m < l->microbatches; m++)
			for (size_t k = 0; k < l->layers; k++, span++) {
				const struct lynx_prof_segment *f = &l->fwd[m * l->layers + k];
				const struct lynx_prof_segment *b = &l->bwd[m * l->layers + k];
				snprintf(name, sizeof(name), "layer %zu fwd mb %zu", k, m);
				host_slice(w, name, "layer_fwd", f->first, f->end);
				if (w->have_lt && span < w->lt.saved_count)
					fprintf(w->f, ",\"saved_bytes\":%" PRIu64,
					        w->lt.saved_bytes[span]);
				fputs("}", w->f);
				close_event(w);
				snprintf(name, sizeof(name), "layer %zu bwd mb %zu", k, m);
				host_slice(w, name, "layer_bwd", b->first, b->end);
				fputs(l->reruns[k] ? ",\"reruns_forward\":true}" : "}", w->f);
				close_event(w);
			}
	}
}

/* ---- Counters ------------------------------------------------------------------------------ */

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

static void memory_counters(struct writer *w, uint64_t ns, uint64_t total,
                            const uint64_t live[LYNX_PROF_CLASS_COUNT])
{
	open_event(w, "C", "device memory", "memory", 0, ns);
	fprintf(w->f, ",\"args\":{\"bytes\":%" PRIu64 "}", total);
	close_event(w);
	open_event(w, "C", "device memory by class", "memory", 0, ns);
	fputs(",\"args\":{", w->f);
	for (int c = 0; c < LYNX_PROF_CLASS_COUNT; c++)
		fprintf(w->f, "%s\"%s\":%" PRIu64, c ? "," : "", lynx_prof_class_name(c), live[c]);
	fputs("}", w->f);
	close_event(w);
}

/* Live bytes after each allocation and free, in event order with an event's frees first (so
 * the largest value written is lifetime.h's peak). */
static int write_memory(struct writer *w)
{
	const struct lynx_prof_lifetimes *lt = &w->lt;
	uint64_t live[LYNX_PROF_CLASS_COUNT] = {0}, total = 0;
	struct delta *d;
	size_t n = 0;

	if (!w->have_lt || !lt->count)
		return 0;
	d = malloc(2 * lt->count * sizeof(*d));
	if (!d)
		return -ENOMEM;
	for (size_t id = 0; id < lt->count; id++) {
		d[n++] = (struct delta){lt->buffers[id].alloc_event, true, (uint32_t)id};
		if (lt->buffers[id].free_event != LYNX_PROF_NONE)
			d[n++] = (struct delta){lt->buffers[id].free_event, false, (uint32_t)id};
	}
	qsort(d, n, sizeof(*d), cmp_delta);
	memory_counters(w, w->t0, 0, live);
	for (size_t k = 0; k < n; k++) {
		const struct lynx_prof_buffer *b = &lt->buffers[d[k].buffer];
		if (d[k].alloc) {
			live[b->cls] += b->bytes;
			total += b->bytes;
		} else {
			live[b->cls] -= b->bytes;
			total -= b->bytes;
		}
		if (k + 1 == n || d[k + 1].event != d[k].event)
			memory_counters(w, w->t->events[d[k].event].t_ns, total, live);
	}
	free(d);
	return 0;
}

struct vmm_handle {
	uint64_t handle, bytes;
};

/* Physical memory behind VMM mappings: cuMemCreate adds, cuMemRelease of its handle removes.
 * Linear in the live handles per release; fine for the few thousand an arena holds. */
static int write_vmm(struct writer *w)
{
	struct vmm_handle *live = NULL;
	size_t count = 0, cap = 0;
	uint64_t total = 0;

	for (size_t i = 0; i < w->t->count; i++) {
		const struct lynx_prof_event *e = &w->t->events[i];
		if (e->kind != LYNX_PROF_VMM || e->result || !e->hook)
			continue;
		if (!strcmp(e->hook, "cuMemCreate")) {
			if (count == cap) {
				size_t n = cap ? 2 * cap : 64;
				struct vmm_handle *grown = realloc(live, n * sizeof(*grown));
				if (!grown) {
					free(live);
					return -ENOMEM;
				}
				live = grown;
				cap = n;
			}
			live[count++] = (struct vmm_handle){e->u.mem.ptr, e->u.mem.bytes};
			total += e->u.mem.bytes;
		} else if (!strcmp(e->hook, "cuMemRelease")) {
			size_t k = count;
			while (k > 0 && live[k - 1].handle != e->u.mem.ptr)
				k--;
			if (!k)
				continue;
			total -= live[k - 1].bytes;
			live[k - 1] = live[--count];
		} else {
			continue;
		}
		open_event(w, "C", "vmm physical memory", "memory", 0, e->t_ns);
		fprintf(w->f, ",\"args\":{\"bytes\":%" PRIu64 "}", total);
		close_event(w);
	}
	free(live);
	return 0;
}

/* ---- The file ------------------------------------------------------------------------------- */

static void write_other_data(struct writer *w)
{
	FILE *f = w->f;

	fprintf(f, "\"otherData\":{\"pid\":%d,\"rank\":", w->t->pid);
	fprintf(f, w->rank >= 0 ? "%d" : "null", w->rank);
	fputs(",\"world\":", f);
	fprintf(f, w->world >= 0 ? "%d" : "null", w->world);
	/* The run the profile names (its ranks' shared id), so that a reused directory's
	 * timelines are told apart; null without one. */
	fputs(",\"run\":", f);
	if (w->profile && w->profile->run.known && w->profile->run.id[0])
		put_string(f, w->profile->run.id);
	else
		fputs("null", f);
	fprintf(f, ",\"t0_ns\":%" PRIu64 ",\"host_clock\":", w->t0);
	put_string(f, "CLOCK_MONOTONIC at each call's return; ts = (t - t0_ns) / 1000");
	fprintf(f, ",\"device_timed_items\":%zu,\"device_shift_ns\":", w->timed);
	if (w->timed)
		fprintf(f, "%" PRId64, w->shift);
	else
		fputs("null", f);
	fputs(",\"layers\":", f);
	if (!w->have_its) {
		char text[sizeof(w->its_why) + 8];
		snprintf(text, sizeof(text), "none: %s", w->its_why);
		put_string(f, text);
	} else if (w->segmented < w->its.count) {
		char text[sizeof(w->its_why) + 80];
		snprintf(text, sizeof(text), "%zu of %zu iterations segmented; %s", w->segmented,
		         w->its.count, w->its_why);
		put_string(f, text);
	} else {
		fprintf(f, "\"%zu iterations segmented\"", w->its.count);
	}
	fputs(",\"memory\":", f);
	if (w->have_lt) {
		fprintf(f, "{\"allocations\":%zu,\"peak_bytes\":%" PRIu64 "}", w->lt.count,
		        w->lt.peak_bytes);
	} else {
		char text[sizeof(w->lt_why) + 8];
		snprintf(text, sizeof(text), "none: %s", w->lt_why);
		put_string(f, text);
	}
	fprintf(f, ",\"cross_stream_waits\":%zu,\"windows\":%s}", w->flow_count,
	        w->have_windows ? "\"from the profile\"" : "null");
}

static int write_all(struct writer *w)
{
	int err;

	fprintf(w->f,
	        "{\"format\":\"%s\",\"version\":%d,\"displayTimeUnit\":\"ns\",\"traceEvents\":[",
	        LYNX_TRACE_FORMAT, LYNX_TRACE_VERSION);
	w->first_event = true;
	write_metadata(w);
	if ((err = write_calls(w)))
		return err;
	write_layers(w);
	if ((err = write_memory(w)) || (err = write_vmm(w)))
		return err;
	fputs("\n],\n", w->f);
	write_other_data(w);
	fputs("}\n", w->f);
	return 0;
}

static void writer_free(struct writer *w)
{
	if (w->layers)
		for (size_t i = 0; i < w->its.count; i++)
			lynx_prof_layers_free(&w->layers[i]);
	free(w->layers);
	free(w->iter_spans);
	free(w->spans);
	if (w->have_its)
		lynx_prof_iterations_free(&w->its);
	if (w->have_lt)
		lynx_prof_lifetimes_free(&w->lt);
	free(w->streams);
	free(w->threads);
	free(w->flows);
	free(w->flows_by_rec);
	free(w->nested);
	free(w->window);
}

static int fail(char *why, size_t len, const char *path, int err)
{
	if (why && len)
		snprintf(why, len, "cannot write %s: %s", path, strerror(-err));
	return err;
}

int lynx_prof_write_chrome_trace(const struct lynx_prof_trace *trace,
                                 const struct lynx_profile *profile,
                                 const struct lynx_prof_chrome_options *opt, const char *path,
                                 char *why, size_t len)
{
	struct writer w = {.t = trace, .profile = profile, .rank = -1, .world = -1};
	int err;

	if (opt) {
		w.rank = opt->rank;
		w.world = opt->world;
	}
	if (profile && w.rank < 0)
		w.rank = profile->rank;
	if (profile && w.world < 0)
		w.world = profile->world;
	w.pid = w.rank >= 0 ? w.rank : trace->pid;
	w.t0 = trace->count ? trace->events[0].t_ns : 0;
	if ((err = prepare(&w)) || (err = find_structure(&w)) || (err = label_windows(&w)))
		goto out;
	struct lynx_atomic_file file;
	if ((err = lynx_atomic_file_open(&file, path)))
		goto out;
	w.f = file.f;
	err = write_all(&w);
	if (err)
		lynx_atomic_file_abort(&file);
	else
		err = lynx_atomic_file_commit(&file);
out:
	writer_free(&w);
	if (err == -ENOMEM && why && len)
		snprintf(why, len, "out of memory writing %s", path);
	else if (err)
		fail(why, len, path, err);
	return err;
}
