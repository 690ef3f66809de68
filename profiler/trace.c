/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reads a LYNX_EVENTS dump (shim/dump.h, format "lynx-events" version 1) into a
 * struct lynx_prof_trace, strictly: every line must be a JSON object with every key its
 * kind requires, of the right type, or the whole file is refused with the line and the
 * field named. Events are then ordered by host time, so that threads interleave by time
 * (the dump writes each thread's events in drained chunks).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "event.h"
#include "fnv.h"

#define LYNX_EVENTS_FORMAT "lynx-events"
#define LYNX_EVENTS_VERSION 1

/* ---- The arena behind hook names and parameter bytes ------------------------------------ */

struct chunk {
	struct chunk *next;
	size_t used, size;
	unsigned char data[];
};

#define STABLE_CACHE 256 /* power of two */

struct storage {
	struct chunk *chunks;
	const char **names; /* interned hook names */
	size_t name_count, name_cap;
	/* lynx_prof_trace_append's names are the shim's own, whose addresses never change
	 * (hook symbols, launch-cache kernel names): interned by address, direct-mapped. */
	struct {
		const char *source, *interned;
	} stable[STABLE_CACHE];
};

#define CHUNK_BYTES (64 * 1024)

static void *arena_alloc(struct storage *s, size_t bytes)
{
	struct chunk *c = s->chunks;

	bytes = (bytes + 7) & ~(size_t)7;
	if (!c || c->size - c->used < bytes) {
		size_t size = bytes > CHUNK_BYTES ? bytes : CHUNK_BYTES;
		c = malloc(sizeof(*c) + size);
		if (!c)
			return NULL;
		c->used = 0;
		c->size = size;
		c->next = s->chunks;
		s->chunks = c;
	}
	void *p = c->data + c->used;
	c->used += bytes;
	return p;
}

/* Linear in the number of distinct names: hooks (under 200, the shim's whole hook list) and
 * kernel names (tens in a transformer; a job with thousands of distinct kernels would want a
 * hash here), with the last hit tried first since calls come in runs of the same hook. */
static const char *intern(struct storage *s, const char *name)
{
	for (size_t i = s->name_count; i-- > 0;)
		if (!strcmp(s->names[i], name))
			return s->names[i];
	if (s->name_count == s->name_cap) {
		size_t cap = s->name_cap ? 2 * s->name_cap : 64;
		const char **names = realloc(s->names, cap * sizeof(*names));
		if (!names)
			return NULL;
		s->names = names;
		s->name_cap = cap;
	}
	size_t len = strlen(name) + 1;
	char *copy = arena_alloc(s, len);
	if (!copy)
		return NULL;
	memcpy(copy, name, len);
	s->names[s->name_count++] = copy;
	return copy;
}

static void storage_free(struct storage *s)
{
	if (!s)
		return;
	while (s->chunks) {
		struct chunk *next = s->chunks->next;
		free(s->chunks);
		s->chunks = next;
	}
	free(s->names);
	free(s);
}

/* ---- Kinds and their payloads, from events.def ------------------------------------------ */

enum payload {
	PAYLOAD_none,
	PAYLOAD_mem,
	PAYLOAD_copy,
	PAYLOAD_launch,
	PAYLOAD_sync,
	PAYLOAD_nccl
};

static const struct {
	const char *name;
	enum payload payload;
} kinds[LYNX_PROF_KIND_COUNT] = {
#define LYNX_EVENT(id, name, payload) [LYNX_PROF_##id] = {name, PAYLOAD_##payload},
#include "events.def"
#undef LYNX_EVENT
};

const char *lynx_prof_kind_name(enum lynx_prof_kind kind)
{
	return (unsigned)kind < LYNX_PROF_KIND_COUNT ? kinds[kind].name : NULL;
}

/* ---- Strict field readers: each returns 0 or -EINVAL with the reason in why ------------- */

struct reader {
	size_t line;
	char *why;
	size_t why_len;
};

__attribute__((format(printf, 3, 4))) static int refuse(struct reader *r, const char *key,
                                                        const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (key)
		snprintf(r->why, r->why_len, "line %zu: field \"%s\": %s", r->line, key, msg);
	else
		snprintf(r->why, r->why_len, "line %zu: %s", r->line, msg);
	return -EINVAL;
}

static const cJSON *field(struct reader *r, const cJSON *obj, const char *key, int *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

	if (!v)
		*err = refuse(r, key, "missing");
	return v;
}

/* An integer-valued JSON number in [min, max] (both within double's exact range). */
static int get_int(struct reader *r, const cJSON *obj, const char *key, double min, double max,
                   double *out)
{
	int err = 0;
	const cJSON *v = field(r, obj, key, &err);

	if (!v)
		return err;
	if (!cJSON_IsNumber(v))
		return refuse(r, key, "expected a number");
	double d = v->valuedouble;
	if (d != (double)(int64_t)d || d < min || d > max)
		return refuse(r, key, "expected an integer in [%.0f, %.0f], got %g", min, max, d);
	*out = d;
	return 0;
}

static int get_u32(struct reader *r, const cJSON *obj, const char *key, uint32_t *out)
{
	double d;
	int err = get_int(r, obj, key, 0, UINT32_MAX, &d);

	if (!err)
		*out = (uint32_t)d;
	return err;
}

static int get_i32(struct reader *r, const cJSON *obj, const char *key, int32_t *out)
{
	double d;
	int err = get_int(r, obj, key, INT32_MIN, INT32_MAX, &d);

	if (!err)
		*out = (int32_t)d;
	return err;
}

/* Counts and byte sizes: the dump writes them as numbers, exact below 2^53. */
static int get_u64(struct reader *r, const cJSON *obj, const char *key, uint64_t *out)
{
	double d;
	int err = get_int(r, obj, key, 0, 9007199254740992.0, &d);

	if (!err)
		*out = (uint64_t)d;
	return err;
}

static int get_bool(struct reader *r, const cJSON *obj, const char *key, bool *out)
{
	int err = 0;
	const cJSON *v = field(r, obj, key, &err);

	if (!v)
		return err;
	if (!cJSON_IsBool(v))
		return refuse(r, key, "expected true or false");
	*out = cJSON_IsTrue(v);
	return 0;
}

static int get_string(struct reader *r, const cJSON *obj, const char *key, const char **out)
{
	int err = 0;
	const cJSON *v = field(r, obj, key, &err);

	if (!v)
		return err;
	if (!cJSON_IsString(v) || !v->valuestring)
		return refuse(r, key, "expected a string");
	*out = v->valuestring;
	return 0;
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* A pointer or handle: "0x" and 1 to 16 hex digits. */
static int get_handle(struct reader *r, const cJSON *obj, const char *key, uint64_t *out)
{
	const char *s;
	int err = get_string(r, obj, key, &s);
	uint64_t value = 0;
	size_t digits = 0;

	if (err)
		return err;
	if (s[0] != '0' || s[1] != 'x')
		return refuse(r, key, "expected a \"0x...\" handle, got \"%.40s\"", s);
	for (const char *p = s + 2; *p; p++, digits++) {
		int d = hex_digit(*p);
		if (d < 0 || digits == 16)
			return refuse(r, key, "expected a \"0x...\" handle, got \"%.40s\"", s);
		value = value << 4 | (uint64_t)d;
	}
	if (!digits)
		return refuse(r, key, "expected a \"0x...\" handle, got \"%.40s\"", s);
	*out = value;
	return 0;
}

static int get_dim3(struct reader *r, const cJSON *obj, const char *key, uint32_t out[3])
{
	int err = 0;
	const cJSON *v = field(r, obj, key, &err);

	if (!v)
		return err;
	if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 3)
		return refuse(r, key, "expected an array of 3 integers");
	for (int i = 0; i < 3; i++) {
		const cJSON *d = cJSON_GetArrayItem(v, i);
		if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > UINT32_MAX ||
		    d->valuedouble != (double)(uint32_t)d->valuedouble)
			return refuse(r, key, "element %d: expected an integer in [0, %u]", i,
			              UINT32_MAX);
		out[i] = (uint32_t)d->valuedouble;
	}
	return 0;
}

/* "params": two hex digits per byte, decoded into the arena (NULL when empty). */
static int get_params(struct reader *r, struct storage *s, const cJSON *obj,
                      struct lynx_prof_event *ev)
{
	const char *hex;
	int err = get_string(r, obj, "params", &hex);

	if (err)
		return err;
	size_t len = strlen(hex);
	if (len % 2)
		return refuse(r, "params", "odd number of hex digits (%zu)", len);
	if (len / 2 > UINT32_MAX)
		return refuse(r, "params", "too long");
	ev->u.launch.param_bytes = (uint32_t)(len / 2);
	ev->u.launch.params = NULL;
	if (!len)
		return 0;
	uint8_t *bytes = arena_alloc(s, len / 2);
	if (!bytes)
		return -ENOMEM;
	for (size_t i = 0; i < len / 2; i++) {
		int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return refuse(r, "params", "not hex at character %zu", 2 * i);
		bytes[i] = (uint8_t)(hi << 4 | lo);
	}
	ev->u.launch.params = bytes;
	return 0;
}

/* "name": the kernel's name, a string or null; absent in older dumps (NULL then). */
static int get_name(struct reader *r, struct storage *s, const cJSON *obj,
                    struct lynx_prof_event *ev)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, "name");

	ev->u.launch.name = NULL;
	ev->u.launch.name_hash = 0;
	if (!it || cJSON_IsNull(it))
		return 0;
	if (!cJSON_IsString(it))
		return refuse(r, "name", "expected a string or null");
	ev->u.launch.name = intern(s, it->valuestring);
	if (!ev->u.launch.name)
		return -ENOMEM;
	ev->u.launch.name_hash = lynx_fnv1a_string(ev->u.launch.name);
	return 0;
}

static int read_payload(struct reader *r, struct storage *s, const cJSON *obj,
                        struct lynx_prof_event *ev)
{
	int err = 0;

	switch (kinds[ev->kind].payload) {
	case PAYLOAD_none:
		return 0;
	case PAYLOAD_mem:
		if ((err = get_handle(r, obj, "ptr", &ev->u.mem.ptr)) ||
		    (err = get_u64(r, obj, "bytes", &ev->u.mem.bytes)))
			return err;
		return 0;
	case PAYLOAD_copy:
		if ((err = get_handle(r, obj, "dst", &ev->u.copy.dst)) ||
		    (err = get_handle(r, obj, "src", &ev->u.copy.src)) ||
		    (err = get_u64(r, obj, "bytes", &ev->u.copy.bytes)) ||
		    (err = get_i32(r, obj, "dir", &ev->u.copy.direction)))
			return err;
		return 0;
	case PAYLOAD_launch:
		if ((err = get_handle(r, obj, "function", &ev->u.launch.function)) ||
		    (err = get_dim3(r, obj, "grid", ev->u.launch.grid)) ||
		    (err = get_dim3(r, obj, "block", ev->u.launch.block)) ||
		    (err = get_u32(r, obj, "shared", &ev->u.launch.shared)) ||
		    (err = get_u32(r, obj, "param_count", &ev->u.launch.param_count)) ||
		    (err = get_params(r, s, obj, ev)) || (err = get_name(r, s, obj, ev)))
			return err;
		return 0;
	case PAYLOAD_sync:
		return get_handle(r, obj, "handle", &ev->u.sync.handle);
	case PAYLOAD_nccl:
		if ((err = get_handle(r, obj, "comm", &ev->u.nccl.comm)) ||
		    (err = get_handle(r, obj, "send", &ev->u.nccl.send)) ||
		    (err = get_handle(r, obj, "recv", &ev->u.nccl.recv)) ||
		    (err = get_u64(r, obj, "count", &ev->u.nccl.count)) ||
		    (err = get_i32(r, obj, "type", &ev->u.nccl.type)) ||
		    (err = get_i32(r, obj, "op", &ev->u.nccl.op)) ||
		    (err = get_i32(r, obj, "peer", &ev->u.nccl.peer)) ||
		    (err = get_i32(r, obj, "group_depth", &ev->u.nccl.group_depth)))
			return err;
		return 0;
	}
	return refuse(r, "kind", "no payload rule");
}

static int read_event(struct reader *r, struct storage *s, const cJSON *obj,
                      struct lynx_prof_event *ev)
{
	const char *hook, *kind;
	double t;
	uint32_t tid;
	int err;

	memset(ev, 0, sizeof(*ev));
	if ((err = get_int(r, obj, "t", 0, 9007199254740992.0, &t)) ||
	    (err = get_u32(r, obj, "tid", &tid)) || (err = get_string(r, obj, "hook", &hook)) ||
	    (err = get_string(r, obj, "kind", &kind)) ||
	    (err = get_i32(r, obj, "result", &ev->result)) ||
	    (err = get_handle(r, obj, "stream", &ev->stream)) ||
	    (err = get_bool(r, obj, "nested", &ev->nested)) ||
	    (err = get_bool(r, obj, "captured", &ev->captured)))
		return err;
	ev->t_ns = (uint64_t)t;
	ev->tid = tid;
	/* The writer names a kind it does not know "unknown": it carries no payload. */
	ev->kind = LYNX_PROF_OTHER;
	if (strcmp(kind, "unknown")) {
		int k = 0;
		while (k < LYNX_PROF_KIND_COUNT && strcmp(kinds[k].name, kind))
			k++;
		if (k == LYNX_PROF_KIND_COUNT)
			return refuse(r, "kind", "unknown kind \"%.40s\"", kind);
		ev->kind = (enum lynx_prof_kind)k;
	}
	ev->hook = intern(s, hook);
	if (!ev->hook)
		return -ENOMEM;
	return read_payload(r, s, obj, ev);
}

static int read_header(struct reader *r, const cJSON *obj, int *pid)
{
	const char *format;
	double version, value;
	int err;

	if ((err = get_string(r, obj, "format", &format)))
		return err;
	if (strcmp(format, LYNX_EVENTS_FORMAT))
		return refuse(r, "format", "expected \"%s\", got \"%.40s\"", LYNX_EVENTS_FORMAT,
		              format);
	if ((err = get_int(r, obj, "version", 0, INT32_MAX, &version)))
		return err;
	if (version != LYNX_EVENTS_VERSION)
		return refuse(r, "version",
		              "version %.0f is not supported (this reader knows %s version %d)",
		              version, LYNX_EVENTS_FORMAT, LYNX_EVENTS_VERSION);
	if ((err = get_int(r, obj, "pid", 0, INT32_MAX, &value)))
		return err;
	*pid = (int)value;
	return get_int(r, obj, "hooks", 0, INT32_MAX, &value);
}

/* ---- The file ---------------------------------------------------------------------------- */

/* Host time, then the order in the file (each thread's own order). */
static int by_time(const void *a, const void *b)
{
	const struct lynx_prof_event *x = a, *y = b;

	if (x->t_ns != y->t_ns)
		return x->t_ns < y->t_ns ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

static int read_lines(FILE *f, struct reader *r, struct storage *s, struct lynx_prof_trace *out)
{
	char *line = NULL;
	size_t cap = 0, events_cap = 0;
	ssize_t len;
	int err = 0;

	r->line = 0;
	while ((len = getline(&line, &cap, f)) > 0) {
		r->line++;
		if (line[len - 1] != '\n') {
			err = refuse(r, NULL, "truncated: the last line has no newline");
			break;
		}
		cJSON *obj = cJSON_ParseWithLength(line, (size_t)len);
		if (!obj || !cJSON_IsObject(obj)) {
			cJSON_Delete(obj);
			err = refuse(r, NULL, "not a JSON object");
			break;
		}
		if (r->line == 1) {
			err = read_header(r, obj, &out->pid);
		} else {
			if (out->count == events_cap) {
				size_t n = events_cap ? 2 * events_cap : 1024;
				struct lynx_prof_event *e = realloc(out->events, n * sizeof(*e));
				if (!e) {
					cJSON_Delete(obj);
					err = -ENOMEM;
					break;
				}
				out->events = e;
				events_cap = n;
			}
			err = read_event(r, s, obj, &out->events[out->count]);
			if (!err)
				out->events[out->count].index = (uint32_t)out->count;
			out->count++;
		}
		cJSON_Delete(obj);
		if (err)
			break;
	}
	if (!err && ferror(f))
		err = -errno;
	if (!err && r->line == 0)
		err = refuse(r, NULL, "empty file: expected the %s header", LYNX_EVENTS_FORMAT);
	free(line);
	return err;
}

int lynx_prof_trace_read(const char *path, struct lynx_prof_trace *out, char *why, size_t why_len)
{
	struct reader r = {0, why, why_len};
	struct storage *s;
	int err;

	memset(out, 0, sizeof(*out));
	if (why_len)
		why[0] = 0;
	FILE *f = fopen(path, "r");
	if (!f) {
		err = -errno;
		snprintf(why, why_len, "cannot open %s: %s", path, strerror(errno));
		return err;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		fclose(f);
		return -ENOMEM;
	}
	out->storage = s;
	err = read_lines(f, &r, s, out);
	fclose(f);
	if (err == -ENOMEM)
		snprintf(why, why_len, "out of memory at line %zu", r.line);
	if (err) {
		lynx_prof_trace_free(out);
		return err;
	}
	if (out->count > UINT32_MAX) {
		lynx_prof_trace_free(out);
		snprintf(why, why_len, "more than %u events", UINT32_MAX);
		return -EINVAL;
	}
	lynx_prof_trace_sort(out);
	return 0;
}

void lynx_prof_trace_sort(struct lynx_prof_trace *trace)
{
	qsort(trace->events, trace->count, sizeof(*trace->events), by_time);
	for (size_t i = 0; i < trace->count; i++)
		trace->events[i].index = (uint32_t)i;
}

int lynx_prof_trace_init(struct lynx_prof_trace *trace, int pid)
{
	memset(trace, 0, sizeof(*trace));
	trace->pid = pid;
	trace->storage = calloc(1, sizeof(struct storage));
	return trace->storage ? 0 : -ENOMEM;
}

/* The events array grows by doubling; its capacity is not kept in the trace, so it is
 * recomputed: the next power of two at or above count (1024 at least). */
static size_t events_capacity(size_t count)
{
	size_t cap = 1024;

	while (cap < count)
		cap *= 2;
	return cap;
}

/* intern() for a name whose address always holds the same text. */
static const char *intern_stable(struct storage *s, const char *name)
{
	size_t slot = ((uintptr_t)name >> 3) & (STABLE_CACHE - 1);

	if (s->stable[slot].source == name)
		return s->stable[slot].interned;
	const char *interned = intern(s, name);
	if (interned) {
		s->stable[slot].source = name;
		s->stable[slot].interned = interned;
	}
	return interned;
}

int lynx_prof_trace_append(struct lynx_prof_trace *trace, const struct lynx_prof_event *ev,
                           const uint8_t *params)
{
	struct storage *s = trace->storage;
	struct lynx_prof_event copy = *ev;

	if (!s || trace->count >= UINT32_MAX)
		return -ENOMEM;
	if (trace->count == 0 || trace->count == events_capacity(trace->count)) {
		size_t cap = trace->count ? 2 * trace->count : events_capacity(0);
		struct lynx_prof_event *grown = realloc(trace->events, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		trace->events = grown;
	}
	copy.hook = ev->hook ? intern_stable(s, ev->hook) : NULL;
	if (ev->hook && !copy.hook)
		return -ENOMEM;
	if (ev->kind == LYNX_PROF_LAUNCH) {
		copy.u.launch.name = ev->u.launch.name ? intern_stable(s, ev->u.launch.name) : NULL;
		if (ev->u.launch.name && !copy.u.launch.name)
			return -ENOMEM;
		copy.u.launch.params = NULL;
		if (params && ev->u.launch.param_bytes) {
			uint8_t *bytes = arena_alloc(s, ev->u.launch.param_bytes);
			if (!bytes)
				return -ENOMEM;
			memcpy(bytes, params, ev->u.launch.param_bytes);
			copy.u.launch.params = bytes;
		}
	}
	copy.index = (uint32_t)trace->count;
	trace->events[trace->count++] = copy;
	return 0;
}

void lynx_prof_trace_free(struct lynx_prof_trace *trace)
{
	if (!trace)
		return;
	free(trace->events);
	storage_free(trace->storage);
	memset(trace, 0, sizeof(*trace));
}
