/* SPDX-License-Identifier: Apache-2.0 */
/* Checks Chrome trace-event JSON against the rules chrome_check.h lists. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "chrome_check.h"
#include "json_text.h"

#define EPS_US 0.0005 /* half a nanosecond, in microseconds */

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

/* A slice on a track: an X, or a matched B/E pair (index: the B). */
struct interval {
	double pid, tid, start, end;
	size_t index;
	const char *name;
};

/* A B or an E, before they are matched. */
struct mark {
	double pid, tid, ts;
	size_t index;
	bool begin;
	const char *name; /* NULL: an E without a name */
};

/* A flow event: v1 (s/t/f) keyed by cat and id, v2 by bind_id (cat ""). */
struct flow_end {
	char key[112]; /* "1cat|id" for v1, "2|id" for v2: the two never pair with each other */
	char id[80];
	double ts;
	size_t index;
	char ph; /* 's', 't', 'f'; v2: 'o' (flow_out) or 'i' (flow_in) */
};

struct track {
	double pid, tid;
};

struct checker {
	char *why;
	size_t why_len;
	struct interval *iv;
	size_t iv_count;
	struct mark *marks;
	size_t mark_count;
	struct flow_end *flows;
	size_t flow_count;
	struct track *tracks;
	size_t track_count;
	struct lynx_prof_chrome_stats stats;
};

/* Appends one slot (for the caller to fill) to *array. The capacity is implied by the count: the
 * array doubles whenever the count reaches a power of two, so it is always larger than the count
 * (also for a stack whose count goes down and up again). */
static int push(void **array, size_t *count, size_t size)
{
	if (*count == 0 || (*count & (*count - 1)) == 0) {
		size_t cap = *count ? 2 * *count : 1;
		void *grown = realloc(*array, cap * size);
		if (!grown)
			return -ENOMEM;
		*array = grown;
	}
	(*count)++;
	return 0;
}

static const cJSON *number(const cJSON *obj, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

	return cJSON_IsNumber(v) && isfinite(v->valuedouble) ? v : NULL;
}

static const char *event_name(const cJSON *ev)
{
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(ev, "name");

	return cJSON_IsString(n) ? n->valuestring : "";
}

static int cmp_double(double a, double b)
{
	return (a > b) - (a < b);
}

static int by_track_then_start(const void *a, const void *b)
{
	const struct interval *x = a, *y = b;
	int c;

	if ((c = cmp_double(x->pid, y->pid)) || (c = cmp_double(x->tid, y->tid)) ||
	    (c = cmp_double(x->start, y->start)))
		return c;
	/* Longer first, so that a slice comes before the ones it contains. */
	if ((c = cmp_double(y->end, x->end)))
		return c;
	return (x->index > y->index) - (x->index < y->index);
}

static int by_track_then_ts(const void *a, const void *b)
{
	const struct mark *x = a, *y = b;
	int c;

	if ((c = cmp_double(x->pid, y->pid)) || (c = cmp_double(x->tid, y->tid)) ||
	    (c = cmp_double(x->ts, y->ts)))
		return c;
	return (x->index > y->index) - (x->index < y->index);
}

static int by_key_then_ts(const void *a, const void *b)
{
	const struct flow_end *x = a, *y = b;
	int c = strcmp(x->key, y->key);

	if (c || (c = cmp_double(x->ts, y->ts)))
		return c;
	return (x->index > y->index) - (x->index < y->index);
}

static int by_pid_tid(const void *a, const void *b)
{
	const struct track *x = a, *y = b;
	int c = cmp_double(x->pid, y->pid);

	return c ? c : cmp_double(x->tid, y->tid);
}

/* An id as text: numbers and strings alike ("0x1f" and 31 stay different, as in Chrome). */
static bool id_text(const cJSON *id, char *buf, size_t len)
{
	if (cJSON_IsNumber(id))
		snprintf(buf, len, "n%.17g", id->valuedouble);
	else if (cJSON_IsString(id))
		snprintf(buf, len, "s%s", id->valuestring);
	else
		return false;
	return true;
}

static int add_flow(struct checker *c, const char *cat, const char *id, double ts, size_t index,
                    char ph)
{
	if (push((void **)&c->flows, &c->flow_count, sizeof(*c->flows)))
		return -ENOMEM;
	struct flow_end *f = &c->flows[c->flow_count - 1];
	snprintf(f->key, sizeof(f->key), "%c%s|%s", ph == 'o' || ph == 'i' ? '2' : '1', cat, id);
	snprintf(f->id, sizeof(f->id), "%s", id + 1); /* past the type letter */
	f->ts = ts;
	f->index = index;
	f->ph = ph;
	return 0;
}

static int add_track(struct checker *c, double pid, double tid)
{
	if (push((void **)&c->tracks, &c->track_count, sizeof(*c->tracks)))
		return -ENOMEM;
	c->tracks[c->track_count - 1] = (struct track){pid, tid};
	return 0;
}

/* The flow parts of event i: v1 s/t/f, and v2 bind_id on any event. */
static int check_flow(struct checker *c, const cJSON *ev, size_t i, char ph, double ts)
{
	const cJSON *cat = cJSON_GetObjectItemCaseSensitive(ev, "cat");
	const char *cat_text = cJSON_IsString(cat) ? cat->valuestring : "";
	char id[80];

	if (ph == 's' || ph == 't' || ph == 'f') {
		if (!id_text(cJSON_GetObjectItemCaseSensitive(ev, "id"), id, sizeof(id)))
			return refuse(c->why, c->why_len,
			              "traceEvents[%zu]: flow event '%c' without a numeric or "
			              "string \"id\"",
			              i, ph);
		return add_flow(c, cat_text, id, ts, i, ph);
	}
	const cJSON *bind = cJSON_GetObjectItemCaseSensitive(ev, "bind_id");
	bool out = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ev, "flow_out"));
	bool in = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ev, "flow_in"));
	if (!bind && !out && !in)
		return 0;
	if (!id_text(bind, id, sizeof(id)))
		return refuse(c->why, c->why_len,
		              "traceEvents[%zu]: flow_in or flow_out without a \"bind_id\"", i);
	if (!out && !in)
		return refuse(c->why, c->why_len,
		              "traceEvents[%zu]: \"bind_id\" without flow_in or flow_out", i);
	if (out && add_flow(c, "", id, ts, i, 'o'))
		return -ENOMEM;
	if (in && add_flow(c, "", id, ts, i, 'i'))
		return -ENOMEM;
	return 0;
}

static bool process_scoped(char ph, const cJSON *ev)
{
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(ev, "s");
	const char *name = event_name(ev);

	if (ph == 'C')
		return true;
	if (ph == 'M')
		return !strncmp(name, "process_", 8);
	if (ph == 'i' || ph == 'I')
		return cJSON_IsString(s) &&
		       (!strcmp(s->valuestring, "g") || !strcmp(s->valuestring, "p"));
	return false;
}

static int check_event(struct checker *c, const cJSON *ev, size_t i)
{
	const cJSON *ph_item = cJSON_GetObjectItemCaseSensitive(ev, "ph");
	const cJSON *pid = number(ev, "pid"), *tid = number(ev, "tid"), *ts = number(ev, "ts");
	const cJSON *args = cJSON_GetObjectItemCaseSensitive(ev, "args");
	char ph;

	if (!cJSON_IsObject(ev))
		return refuse(c->why, c->why_len, "traceEvents[%zu]: not an object", i);
	if (!cJSON_IsString(ph_item) || strlen(ph_item->valuestring) != 1 ||
	    !strchr("BEXiICMstfben", ph_item->valuestring[0]))
		return refuse(c->why, c->why_len,
		              "traceEvents[%zu]: \"ph\" missing or not a known phase", i);
	ph = ph_item->valuestring[0];
	if (!pid)
		return refuse(c->why, c->why_len, "traceEvents[%zu] ('%c'): no numeric \"pid\"", i,
		              ph);
	if (ph != 'M' && (!ts || ts->valuedouble < 0))
		return refuse(c->why, c->why_len,
		              "traceEvents[%zu] ('%c' \"%s\"): \"ts\" missing, not a number or "
		              "negative",
		              i, ph, event_name(ev));
	if (!tid && !process_scoped(ph, ev))
		return refuse(c->why, c->why_len,
		              "traceEvents[%zu] ('%c' \"%s\"): no numeric \"tid\"", i, ph,
		              event_name(ev));
	if (ph != 'E' && !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(ev, "name")))
		return refuse(c->why, c->why_len, "traceEvents[%zu] ('%c'): no string \"name\"", i,
		              ph);
	double t = ts ? ts->valuedouble : 0, p = pid->valuedouble, th = tid ? tid->valuedouble : 0;
	switch (ph) {
	case 'X': {
		const cJSON *dur = number(ev, "dur");
		if (!dur || dur->valuedouble < 0)
			return refuse(
			        c->why, c->why_len,
			        "traceEvents[%zu] (X \"%s\"): \"dur\" missing, not a number or "
			        "negative",
			        i, event_name(ev));
		if (push((void **)&c->iv, &c->iv_count, sizeof(*c->iv)) || add_track(c, p, th))
			return -ENOMEM;
		c->iv[c->iv_count - 1] =
		        (struct interval){p, th, t, t + dur->valuedouble, i, event_name(ev)};
		break;
	}
	case 'B':
	case 'E': {
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(ev, "name");
		if (push((void **)&c->marks, &c->mark_count, sizeof(*c->marks)) ||
		    add_track(c, p, th))
			return -ENOMEM;
		c->marks[c->mark_count - 1] = (struct mark){
		        p, th, t, i, ph == 'B', cJSON_IsString(name) ? name->valuestring : NULL};
		break;
	}
	case 'i':
	case 'I':
		c->stats.instants++;
		if (tid && !process_scoped(ph, ev) && add_track(c, p, th))
			return -ENOMEM;
		break;
	case 'C': {
		const cJSON *a;
		if (!cJSON_IsObject(args) || !args->child)
			return refuse(c->why, c->why_len,
			              "traceEvents[%zu] (C \"%s\"): \"args\" must be an object of "
			              "numbers",
			              i, event_name(ev));
		cJSON_ArrayForEach(a, args)
		{
			if (!cJSON_IsNumber(a) || !isfinite(a->valuedouble))
				return refuse(
				        c->why, c->why_len,
				        "traceEvents[%zu] (C \"%s\"): args.%s is not a number", i,
				        event_name(ev), a->string);
		}
		c->stats.counters++;
		break;
	}
	case 'M':
		if (!cJSON_IsObject(args))
			return refuse(c->why, c->why_len,
			              "traceEvents[%zu] (M \"%s\"): \"args\" must be an object", i,
			              event_name(ev));
		c->stats.metadata++;
		break;
	default:
		break;
	}
	return check_flow(c, ev, i, ph, t);
}

/* B/E: matched per track in time order; each pair becomes an interval. */
static int match_begin_end(struct checker *c)
{
	struct mark *stack = NULL;
	size_t depth = 0;
	int err = 0;

	if (c->mark_count) /* qsort may not take the NULL of an empty array */
		qsort(c->marks, c->mark_count, sizeof(*c->marks), by_track_then_ts);
	for (size_t k = 0; k < c->mark_count; k++) {
		const struct mark *m = &c->marks[k];
		if (depth && (stack[depth - 1].pid != m->pid || stack[depth - 1].tid != m->tid)) {
			err = refuse(c->why, c->why_len,
			             "traceEvents[%zu] (B \"%s\"): never ended on its track",
			             stack[depth - 1].index, stack[depth - 1].name);
			goto out;
		}
		if (m->begin) {
			if (push((void **)&stack, &depth, sizeof(*stack))) {
				err = -ENOMEM;
				goto out;
			}
			stack[depth - 1] = *m;
			continue;
		}
		if (!depth) {
			err = refuse(c->why, c->why_len,
			             "traceEvents[%zu] (E): ends no open B on pid %.17g tid %.17g",
			             m->index, m->pid, m->tid);
			goto out;
		}
		const struct mark *b = &stack[depth - 1];
		if (m->name && strcmp(m->name, b->name)) {
			err = refuse(
			        c->why, c->why_len,
			        "traceEvents[%zu] (E \"%s\"): ends B \"%s\" (traceEvents[%zu]) "
			        "that is still open inside it",
			        m->index, m->name, b->name, b->index);
			goto out;
		}
		if (push((void **)&c->iv, &c->iv_count, sizeof(*c->iv))) {
			err = -ENOMEM;
			goto out;
		}
		c->iv[c->iv_count - 1] =
		        (struct interval){b->pid, b->tid, b->ts, m->ts, b->index, b->name};
		depth--;
	}
	if (depth)
		err = refuse(c->why, c->why_len, "traceEvents[%zu] (B \"%s\"): never ended",
		             stack[depth - 1].index, stack[depth - 1].name);
out:
	free(stack);
	return err;
}

/* Slices on one track either nest or are disjoint. */
static int check_nesting(struct checker *c)
{
	size_t *stack = NULL, depth = 0;
	int err = 0;

	if (c->iv_count)
		qsort(c->iv, c->iv_count, sizeof(*c->iv), by_track_then_start);
	for (size_t k = 0; k < c->iv_count; k++) {
		const struct interval *cur = &c->iv[k];
		if (depth && (c->iv[stack[depth - 1]].pid != cur->pid ||
		              c->iv[stack[depth - 1]].tid != cur->tid))
			depth = 0;
		while (depth && c->iv[stack[depth - 1]].end <= cur->start + EPS_US)
			depth--;
		if (depth && cur->end > c->iv[stack[depth - 1]].end + EPS_US) {
			const struct interval *top = &c->iv[stack[depth - 1]];
			err = refuse(
			        c->why, c->why_len,
			        "traceEvents[%zu] (\"%s\", %.3f to %.3f us) partly overlaps "
			        "traceEvents[%zu] (\"%s\", %.3f to %.3f us) on pid %.17g tid %.17g",
			        cur->index, cur->name, cur->start, cur->end, top->index, top->name,
			        top->start, top->end, cur->pid, cur->tid);
			goto out;
		}
		/* A stack of at most k + 1 entries: allocate it once, as large as the slices. */
		if (!stack) {
			stack = malloc(c->iv_count * sizeof(*stack));
			if (!stack) {
				err = -ENOMEM;
				goto out;
			}
		}
		stack[depth++] = k;
	}
	c->stats.slices = c->iv_count;
out:
	free(stack);
	return err;
}

static int check_flows(struct checker *c)
{
	if (c->flow_count)
		qsort(c->flows, c->flow_count, sizeof(*c->flows), by_key_then_ts);
	for (size_t k = 0; k < c->flow_count;) {
		size_t end = k, outs = 0, ins = 0;
		bool open = false;
		while (end < c->flow_count && !strcmp(c->flows[end].key, c->flows[k].key))
			end++;
		for (size_t j = k; j < end; j++) {
			const struct flow_end *f = &c->flows[j];
			const char *id = f->id;
			switch (f->ph) {
			case 's':
				if (open)
					return refuse(
					        c->why, c->why_len,
					        "traceEvents[%zu]: flow id %s starts again before "
					        "it finished",
					        f->index, id);
				open = true;
				break;
			case 't':
			case 'f':
				if (!open)
					return refuse(
					        c->why, c->why_len,
					        "traceEvents[%zu]: flow id %s %s without a start "
					        "('s') before it",
					        f->index, id, f->ph == 'f' ? "ends" : "steps");
				if (f->ph == 'f') {
					open = false;
					c->stats.flows++;
				}
				break;
			case 'o':
				outs++;
				break;
			default:
				ins++;
				break;
			}
		}
		if (open)
			return refuse(c->why, c->why_len,
			              "traceEvents[%zu]: flow id %s starts and never ends ('f')",
			              c->flows[end - 1].index, c->flows[k].id);
		if (!outs != !ins)
			return refuse(c->why, c->why_len,
			              "traceEvents[%zu]: bind_id %s has flow_%s but no flow_%s",
			              c->flows[k].index, c->flows[k].id, outs ? "out" : "in",
			              outs ? "in" : "out");
		if (outs && ins)
			c->stats.flows++;
		k = end;
	}
	return 0;
}

static size_t count_tracks(struct checker *c)
{
	size_t n = 0;

	if (c->track_count)
		qsort(c->tracks, c->track_count, sizeof(*c->tracks), by_pid_tid);
	for (size_t k = 0; k < c->track_count; k++)
		n += !k || by_pid_tid(&c->tracks[k - 1], &c->tracks[k]);
	return n;
}

/* Line and column of byte offset at in text. */
static int parse(const char *text, size_t len, cJSON **root, char *why, size_t why_len)
{
	const char *nul = memchr(text, '\0', len), *end = NULL;
	char *copy;
	size_t line, col;

	if (nul)
		return refuse(why, why_len, "not valid JSON: a NUL byte at byte %zu",
		              (size_t)(nul - text));
	copy = malloc(len + 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, text, len);
	copy[len] = '\0';
	*root = cJSON_ParseWithOpts(copy, &end, true);
	if (!*root) {
		size_t at = end && end >= copy ? (size_t)(end - copy) : 0;
		/* Truncated: unclosed (cJSON may stop anywhere in the last token, so where it
		 * stopped says nothing more), as profile.c reads it. */
		bool early = lynx_json_unclosed(copy, len);
		lynx_json_position(copy, at, &line, &col);
		free(copy);
		if (early)
			return refuse(
			        why, why_len,
			        "not valid JSON: the text ends early (after %zu bytes, inside an "
			        "unclosed string, object or array); parsing stopped at byte %zu "
			        "(line %zu, column %zu)",
			        len, at, line, col);
		return refuse(why, why_len,
		              "not valid JSON: parsing stopped at byte %zu (line %zu, column %zu)",
		              at, line, col);
	}
	free(copy);
	return 0;
}

int lynx_prof_chrome_check(const char *text, size_t len, struct lynx_prof_chrome_stats *stats,
                           char *why, size_t why_len)
{
	struct checker c = {.why = why, .why_len = why_len};
	const cJSON *events, *ev;
	cJSON *root = NULL;
	size_t i = 0;
	int err;

	if ((err = parse(text, len, &root, why, why_len)))
		return err;
	events = cJSON_IsArray(root) ? root : cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
	if (!cJSON_IsArray(events)) {
		err = refuse(why, why_len,
		             "not a trace: expected an array of events or an object with a "
		             "\"traceEvents\" array");
		goto out;
	}
	cJSON_ArrayForEach(ev, events)
	{
		if ((err = check_event(&c, ev, i++)))
			goto out;
	}
	c.stats.events = i;
	if ((err = match_begin_end(&c)) || (err = check_nesting(&c)) || (err = check_flows(&c)))
		goto out;
	c.stats.tracks = count_tracks(&c);
	if (stats)
		*stats = c.stats;
out:
	cJSON_Delete(root);
	free(c.iv);
	free(c.marks);
	free(c.flows);
	free(c.tracks);
	return err;
}
