/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The profile's JSON form, written and read here only. Version 1, every key:
 *
 *   {"format": "lynx-profile", "version": 1,
 *    "rank": 0 | null, "world": 4 | null,                    (null: unknown)
 *    "run": {"id": "4711.0", "source": "SLURM_JOB_ID", "started": 1795796401},  (optional)
 *    "environment": {"pid": 1234, "gpu": "unknown", "driver": "unknown", "nccl": "unknown"},
 *    "iteration": {"period_tokens": 1370, "count": 2, "prefix_events": 5120,
 *                  "events": 4400, "time": TIME},
 *    "microbatches": 4, "warmup_forwards": 1, "rerun": false,
 *    "pipeline": {"stage": 1, "stages": 4},                   (optional)
 *    "layers": [{"index": 0, "forward": TIME, "backward": TIME, "saved_bytes": 1048576,
 *                "kernels": {"forward": ["tt_layernorm_fwd", ...], "backward": [...],
 *                            "forward_ns": [5120, ...], "backward_ns": [...]}}, ...],
 *    "groups": [{"layer": 0, "bytes": 65536, "producer": 3, "first_consumer": 10,
 *                "last_consumer": 12, "reads": [0, 2], "reads_freed": true}, ...],
 *    "windows": [{"kind": "tp_fwd", "call": "ncclAllReduce", "comm": 1, "peer": -1,
 *                 "count": 2048, "bytes": 8192, "microbatch": 0, "layer": 0, "ordinal": 0,
 *                 "kernel": 7, "offset_ns": 1500000, "duration": TIME, "idle": TIME}, ...],
 *    "memory": {"source": "host", "peak_bytes": 123456, "buffers": 1206,
 *               "at_peak": {"weight": ..., "saved_activation": ..., "workspace": ...,
 *                           "temporary": ..., "other": ...},
 *               "non_saved_peak_bytes": 45678, "largest_workspace_bytes": 262144},
 *    "host_link": {"d2h_bytes_per_s": 50000000000, "h2d_bytes_per_s": 48000000000,
 *                  "latency_s": 1.2e-05}}
 *
 *   TIME = {"source": "host" | "device", "ns": median, "min_ns": ..., "max_ns": ...,
 *           "samples": n} or {"source": "unknown"}.
 *
 * Integers are below 2^53 (exact in any JSON reader); -1 means "none" for indices. The
 * writer prints keys in this order with cJSON's formatting, so write -> read -> write gives
 * the same bytes. The host link's numbers are the only fractional ones; the writer prints
 * each with the fewest digits (15 to 17) that read back as the same double, where cJSON
 * would keep 15 whenever they come "close enough", so they too survive a round trip exactly.
 *
 * Four keys came after the first version-1 readers, as optional additions they ignore:
 * "warmup_forwards" (0 when absent; at most "microbatches"); a layer's "forward_ns" and
 * "backward_ns", each kernel's device time in launch order, present only when the shim timed
 * the kernels and then exactly as long as the names beside them; memory's
 * "non_saved_peak_bytes" (when absent: the at_peak sum of the classes other than
 * saved_activation); and "host_link", the copy rates to and from pinned host memory
 * (bytes/s, finite and > 0) and a small copy's latency (s, finite, in [0, 1)) that the shim
 * measures in warm-up (all 0 when absent: not measured). The writer always writes
 * "warmup_forwards" and "non_saved_peak_bytes", writes the *_ns arrays exactly when the
 * in-memory ns is not NULL, and "host_link" exactly when lynx_profile_host_link_measured().
 * "pipeline" came later still: this rank's stage and the stage count, written exactly when
 * lynx_profile_pipeline_known(); absent, the stage is unknown. A group's "producer_end"
 * came last (producer when absent; otherwise from producer to the layer's kernel count),
 * written after "producer". "run" came after that: the launch the profile belongs to (its id,
 * where the id came from, one of LYNX_PROFILE_RUN_SOURCES, and the process's start in unix
 * seconds, an integer), written exactly when run.known; absent, the run is unknown. The id is
 * "" exactly when the source is "none", at most LYNX_PROFILE_RUN_ID_MAX bytes, with no control
 * characters (readers print it). A group's "reads" and "reads_freed" came last: the indices of
 * the other groups of its layer that its producer run reads, ascending, and true when the
 * run names memory freed before the group's first consumer; "reads" is written exactly when
 * reads_known, after "last_consumer", and "reads_freed" after it exactly when true ("chained",
 * later, after that exactly when true: the run's temporaries are written again by their
 * writers; never beside "reads_freed"; "writers" beside it, later still, written exactly
 * with "chained": their forward positions, absent in older profiles). Absent,
 * what the run reads is unknown. Memory's "largest_workspace_bytes" came last: the largest
 * single workspace buffer, always written; absent, the at_peak workspace bytes (one replay's
 * scratch counted as every workspace at once). A group's "scratch_bytes" came after: the
 * workspace bytes its producer run names, written last in the group exactly when
 * scratch_known; absent, unknown (memory's largest_workspace_bytes stands for it). Where the
 * non-saved bytes were live came later still: memory's "non_saved_outside_bytes", written
 * last in it, and each layer's kernels' "forward_non_saved_bytes" and
 * "backward_non_saved_bytes" (after the *_ns arrays), all exactly when non_saved_known;
 * absent, unknown (their peak at every moment). A group's "freed_before" came last: how
 * many of its layer's backward kernels ran before the trainer freed it (past
 * "last_consumer"), written last in the group exactly when freed_known; absent, unknown
 * (freed right after its last consumer). A layer's "reruns_forward" came later still:
 * true when its backward reruns its forward first (Megatron's block recompute reruns a
 * stage's first layers only), written after "saved_bytes" exactly when true; absent, the
 * profile's "rerun", which is true exactly when every layer reruns (full recompute).
 */
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "atomic_file.h"
#include "json_text.h"
#include "profile.h"
#include "regular_file.h"

#define MAX_EXACT 9007199254740992.0 /* 2^53 */

const char *lynx_profile_source_name(enum lynx_profile_source s)
{
	static const char *const names[] = {
#define LYNX_PROFILE_SOURCE_NAME(id, name) [LYNX_PROFILE_SOURCE_##id] = name,
	        LYNX_PROFILE_SOURCES(LYNX_PROFILE_SOURCE_NAME)
#undef LYNX_PROFILE_SOURCE_NAME
	};

	return (unsigned)s < LYNX_PROFILE_SOURCE_COUNT ? names[s] : NULL;
}

const char *lynx_profile_window_kind_name(enum lynx_profile_window_kind k)
{
	static const char *const names[] = {
#define LYNX_PROFILE_WINDOW_NAME(id, name) [LYNX_PROFILE_WINDOW_##id] = name,
	        LYNX_PROFILE_WINDOW_KINDS(LYNX_PROFILE_WINDOW_NAME)
#undef LYNX_PROFILE_WINDOW_NAME
	};

	return (unsigned)k < LYNX_PROFILE_WINDOW_KIND_COUNT ? names[k] : NULL;
}

const char *lynx_profile_memory_class_name(enum lynx_profile_memory_class c)
{
	static const char *const names[] = {
#define LYNX_PROFILE_MEMORY_NAME(id, name) [LYNX_PROFILE_MEMORY_##id] = name,
	        LYNX_PROFILE_MEMORY_CLASSES(LYNX_PROFILE_MEMORY_NAME)
#undef LYNX_PROFILE_MEMORY_NAME
	};

	return (unsigned)c < LYNX_PROFILE_MEMORY_CLASS_COUNT ? names[c] : NULL;
}

const char *lynx_profile_run_source_name(enum lynx_profile_run_source s)
{
	static const char *const names[] = {
#define LYNX_PROFILE_RUN_SOURCE_NAME(id, name) [LYNX_PROFILE_RUN_SOURCE_##id] = name,
	        LYNX_PROFILE_RUN_SOURCES(LYNX_PROFILE_RUN_SOURCE_NAME)
#undef LYNX_PROFILE_RUN_SOURCE_NAME
	};

	return (unsigned)s < LYNX_PROFILE_RUN_SOURCE_COUNT ? names[s] : NULL;
}

bool lynx_profile_host_link_measured(const struct lynx_profile_host_link *link)
{
	return isfinite(link->d2h_bytes_per_s) && link->d2h_bytes_per_s > 0 &&
	       isfinite(link->h2d_bytes_per_s) && link->h2d_bytes_per_s > 0 &&
	       isfinite(link->latency_s) && link->latency_s >= 0 && link->latency_s < 1;
}

void lynx_profile_free(struct lynx_profile *p)
{
	if (!p)
		return;
	free(p->env.gpu);
	free(p->env.driver);
	free(p->env.nccl);
	for (size_t i = 0; i < p->layer_count; i++) {
		struct lynx_profile_kernels *k[2] = {&p->layers[i].fwd_kernels,
		                                     &p->layers[i].bwd_kernels};
		for (int d = 0; d < 2; d++) {
			for (size_t j = 0; j < k[d]->count; j++)
				free(k[d]->name[j]);
			free(k[d]->name);
			free(k[d]->ns);
			free(k[d]->non_saved_bytes);
		}
	}
	free(p->layers);
	for (size_t i = 0; i < p->group_count; i++)
		free(p->groups[i].reads);
	free(p->groups);
	for (size_t i = 0; i < p->window_count; i++)
		free(p->windows[i].call);
	free(p->windows);
	memset(p, 0, sizeof(*p));
}

/* ---- Writer ------------------------------------------------------------------------------ */

static bool add_num(cJSON *o, const char *key, double v)
{
	return cJSON_AddNumberToObject(o, key, v) != NULL;
}

/*
 * A finite double, printed here rather than by cJSON (which keeps 15 significant digits when
 * they read back "close enough", losing the last bits): the shortest of 15, 16 and 17 digits
 * that strtod reads back as v (17 always does), with the locale's decimal point made '.'.
 */
static bool add_double(cJSON *o, const char *key, double v)
{
	const char *point = localeconv()->decimal_point;
	char buf[40], *c;

	for (int digits = 15; digits <= 17; digits++) {
		snprintf(buf, sizeof(buf), "%.*g", digits, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	if (point[0] && point[0] != '.' && (c = strchr(buf, point[0])))
		*c = '.';
	return cJSON_AddRawToObject(o, key, buf) != NULL;
}

/* An int32 that is -1 for unknown, written as null. */
static bool add_opt_int(cJSON *o, const char *key, int32_t v)
{
	return v < 0 ? cJSON_AddNullToObject(o, key) != NULL : add_num(o, key, v);
}

static bool add_time(cJSON *o, const char *key, const struct lynx_profile_time *t)
{
	cJSON *obj = cJSON_AddObjectToObject(o, key);
	const char *source = lynx_profile_source_name(t->source);
	bool ok = obj && cJSON_AddStringToObject(obj, "source", source ? source : "unknown");

	if (!ok || t->source == LYNX_PROFILE_SOURCE_UNKNOWN)
		return ok;
	return add_num(obj, "ns", (double)t->ns) && add_num(obj, "min_ns", (double)t->min_ns) &&
	       add_num(obj, "max_ns", (double)t->max_ns) && add_num(obj, "samples", t->samples);
}

static bool add_kernels(cJSON *o, const char *key, const struct lynx_profile_kernels *k)
{
	cJSON *arr = cJSON_AddArrayToObject(o, key);

	for (size_t i = 0; arr && i < k->count; i++) {
		cJSON *s = cJSON_CreateString(k->name[i] ? k->name[i] : "");
		if (!s)
			return false;
		cJSON_AddItemToArray(arr, s);
	}
	return arr != NULL;
}

/* The kernels' device times under key, or nothing when they were not timed. */
/* One number per kernel (values: count of them), or nothing when values is NULL. */
static bool add_kernel_values(cJSON *o, const char *key, const uint64_t *values, size_t count)
{
	cJSON *arr;

	if (!values)
		return true;
	arr = cJSON_AddArrayToObject(o, key);
	for (size_t i = 0; arr && i < count; i++) {
		cJSON *n = cJSON_CreateNumber((double)values[i]);
		if (!n)
			return false;
		cJSON_AddItemToArray(arr, n);
	}
	return arr != NULL;
}

static bool add_layer(cJSON *arr, const struct lynx_profile_layer *l, size_t index)
{
	cJSON *o = cJSON_CreateObject(), *k;
	bool ok = o != NULL;

	if (ok)
		cJSON_AddItemToArray(arr, o);
	ok = ok && add_num(o, "index", (double)index);
	ok = ok && add_time(o, "forward", &l->forward) && add_time(o, "backward", &l->backward);
	ok = ok && add_num(o, "saved_bytes", (double)l->saved_bytes);
	if (ok && l->reruns_forward)
		ok = cJSON_AddBoolToObject(o, "reruns_forward", true) != NULL;
	k = ok ? cJSON_AddObjectToObject(o, "kernels") : NULL;
	return k && add_kernels(k, "forward", &l->fwd_kernels) &&
	       add_kernels(k, "backward", &l->bwd_kernels) &&
	       add_kernel_values(k, "forward_ns", l->fwd_kernels.ns, l->fwd_kernels.count) &&
	       add_kernel_values(k, "backward_ns", l->bwd_kernels.ns, l->bwd_kernels.count) &&
	       add_kernel_values(k, "forward_non_saved_bytes", l->fwd_kernels.non_saved_bytes,
	                         l->fwd_kernels.count) &&
	       add_kernel_values(k, "backward_non_saved_bytes", l->bwd_kernels.non_saved_bytes,
	                         l->bwd_kernels.count);
}

/* A group's "reads", "reads_freed", "chained" and "writers" (profile.c's header). */
static bool add_reads(cJSON *o, const struct lynx_profile_group *g)
{
	cJSON *reads = cJSON_AddArrayToObject(o, "reads");
	for (uint32_t i = 0; reads && i < g->read_count; i++) {
		cJSON *n = cJSON_CreateNumber(g->reads[i]);
		if (!n)
			return false;
		cJSON_AddItemToArray(reads, n);
	}
	if (!reads || (g->reads_freed && !cJSON_AddTrueToObject(o, "reads_freed")))
		return false;
	if (g->chained) {
		cJSON *writers = cJSON_AddTrueToObject(o, "chained")
		                         ? cJSON_AddArrayToObject(o, "writers")
		                         : NULL;
		if (!writers)
			return false;
		for (uint32_t i = 0; i < g->writer_count; i++) {
			cJSON *n = cJSON_CreateNumber(g->writers[i]);
			if (!n)
				return false;
			cJSON_AddItemToArray(writers, n);
		}
	}
	return true;
}

static bool add_group(cJSON *arr, const struct lynx_profile_group *g)
{
	cJSON *o = cJSON_CreateObject();

	if (!o)
		return false;
	cJSON_AddItemToArray(arr, o);
	if (!add_num(o, "layer", g->layer) || !add_num(o, "bytes", (double)g->bytes) ||
	    !add_num(o, "producer", g->producer) || !add_num(o, "producer_end", g->producer_end) ||
	    !add_num(o, "first_consumer", g->first_consumer) ||
	    !add_num(o, "last_consumer", g->last_consumer))
		return false;
	if (g->reads_known && !add_reads(o, g))
		return false;
	if (g->scratch_known && !add_num(o, "scratch_bytes", (double)g->scratch_bytes))
		return false;
	return !g->freed_known || add_num(o, "freed_before", g->freed_before);
}

static bool add_window(cJSON *arr, const struct lynx_profile_window *w)
{
	cJSON *o = cJSON_CreateObject();
	const char *kind = lynx_profile_window_kind_name(w->kind);

	if (!o)
		return false;
	cJSON_AddItemToArray(arr, o);
	return cJSON_AddStringToObject(o, "kind", kind ? kind : "other") &&
	       cJSON_AddStringToObject(o, "call", w->call ? w->call : "") &&
	       add_num(o, "comm", w->comm) && add_num(o, "peer", w->peer) &&
	       add_num(o, "count", (double)w->count) && add_num(o, "bytes", (double)w->bytes) &&
	       add_num(o, "microbatch", w->microbatch) && add_num(o, "layer", w->layer) &&
	       add_num(o, "ordinal", w->ordinal) && add_num(o, "kernel", w->kernel) &&
	       add_num(o, "offset_ns", (double)w->offset_ns) &&
	       add_time(o, "duration", &w->duration) && add_time(o, "idle", &w->idle);
}

static bool add_memory(cJSON *root, const struct lynx_profile_memory *m)
{
	cJSON *o = cJSON_AddObjectToObject(root, "memory"), *at;
	const char *source = lynx_profile_source_name(m->source);
	bool ok = o && cJSON_AddStringToObject(o, "source", source ? source : "unknown") &&
	          add_num(o, "peak_bytes", (double)m->peak_bytes) &&
	          add_num(o, "buffers", (double)m->buffers);

	at = ok ? cJSON_AddObjectToObject(o, "at_peak") : NULL;
	ok = at != NULL;
	for (int c = 0; ok && c < LYNX_PROFILE_MEMORY_CLASS_COUNT; c++)
		ok = add_num(at, lynx_profile_memory_class_name(c), (double)m->at_peak[c]);
	return ok && add_num(o, "non_saved_peak_bytes", (double)m->non_saved_peak_bytes) &&
	       add_num(o, "largest_workspace_bytes", (double)m->largest_workspace_bytes) &&
	       (!m->non_saved_known ||
	        add_num(o, "non_saved_outside_bytes", (double)m->non_saved_outside_bytes));
}

/* The host link, or nothing when it was not measured. */
static bool add_host_link(cJSON *root, const struct lynx_profile_host_link *h)
{
	cJSON *o;

	if (!lynx_profile_host_link_measured(h))
		return true;
	o = cJSON_AddObjectToObject(root, "host_link");
	return o && add_double(o, "d2h_bytes_per_s", h->d2h_bytes_per_s) &&
	       add_double(o, "h2d_bytes_per_s", h->h2d_bytes_per_s) &&
	       add_double(o, "latency_s", h->latency_s);
}

/* The run, or nothing when it is unknown. */
static bool add_run(cJSON *root, const struct lynx_profile_run *run)
{
	const char *source = lynx_profile_run_source_name(run->source);
	cJSON *o;

	if (!run->known)
		return true;
	o = cJSON_AddObjectToObject(root, "run");
	return o && cJSON_AddStringToObject(o, "id", run->id) &&
	       cJSON_AddStringToObject(o, "source", source ? source : "none") &&
	       add_num(o, "started", (double)run->started);
}

static cJSON *profile_json(const struct lynx_profile *p)
{
	cJSON *root = cJSON_CreateObject(), *o, *arr;
	bool ok = root != NULL;

	ok = ok && cJSON_AddStringToObject(root, "format", LYNX_PROFILE_FORMAT);
	ok = ok && add_num(root, "version", LYNX_PROFILE_VERSION);
	ok = ok && add_opt_int(root, "rank", p->rank) && add_opt_int(root, "world", p->world);
	ok = ok && add_run(root, &p->run);
	o = ok ? cJSON_AddObjectToObject(root, "environment") : NULL;
	ok = o && add_num(o, "pid", p->env.pid) &&
	     cJSON_AddStringToObject(o, "gpu", p->env.gpu ? p->env.gpu : "unknown") &&
	     cJSON_AddStringToObject(o, "driver", p->env.driver ? p->env.driver : "unknown") &&
	     cJSON_AddStringToObject(o, "nccl", p->env.nccl ? p->env.nccl : "unknown");
	o = ok ? cJSON_AddObjectToObject(root, "iteration") : NULL;
	ok = o && add_num(o, "period_tokens", (double)p->iteration.period_tokens) &&
	     add_num(o, "count", p->iteration.count) &&
	     add_num(o, "prefix_events", (double)p->iteration.prefix_events) &&
	     add_num(o, "events", (double)p->iteration.events) &&
	     add_time(o, "time", &p->iteration.time);
	ok = ok && add_num(root, "microbatches", p->microbatches) &&
	     add_num(root, "warmup_forwards", p->warmup_forwards) &&
	     cJSON_AddBoolToObject(root, "rerun", lynx_profile_all_rerun(p));
	if (ok && lynx_profile_pipeline_known(p)) {
		o = cJSON_AddObjectToObject(root, "pipeline");
		ok = o && add_num(o, "stage", p->pipeline_stage) &&
		     add_num(o, "stages", p->pipeline_stages);
	}
	arr = ok ? cJSON_AddArrayToObject(root, "layers") : NULL;
	ok = arr != NULL;
	for (size_t i = 0; ok && i < p->layer_count; i++)
		ok = add_layer(arr, &p->layers[i], i);
	arr = ok ? cJSON_AddArrayToObject(root, "groups") : NULL;
	ok = arr != NULL;
	for (size_t i = 0; ok && i < p->group_count; i++)
		ok = add_group(arr, &p->groups[i]);
	arr = ok ? cJSON_AddArrayToObject(root, "windows") : NULL;
	ok = arr != NULL;
	for (size_t i = 0; ok && i < p->window_count; i++)
		ok = add_window(arr, &p->windows[i]);
	ok = ok && add_memory(root, &p->memory) && add_host_link(root, &p->host_link);
	if (!ok) {
		cJSON_Delete(root);
		return NULL;
	}
	return root;
}

char *lynx_profile_to_json(const struct lynx_profile *p)
{
	cJSON *root = profile_json(p);
	char *text = root ? cJSON_Print(root) : NULL, *line;
	size_t len;

	cJSON_Delete(root);
	if (!text)
		return NULL;
	len = strlen(text);
	line = realloc(text, len + 2);
	if (!line) {
		free(text);
		return NULL;
	}
	line[len] = '\n';
	line[len + 1] = '\0';
	return line;
}

int lynx_profile_write(const struct lynx_profile *p, const char *path)
{
	char *text = lynx_profile_to_json(p);
	int err;

	if (!text)
		return -ENOMEM;
	err = lynx_atomic_file_write(path, text);
	free(text);
	return err;
}

/* ---- Reader ------------------------------------------------------------------------------ */

struct reader {
	char *why;
	size_t len;
};

__attribute__((format(printf, 2, 3))) static int refuse(struct reader *r, const char *fmt, ...)
{
	va_list ap;

	if (r->why && r->len) {
		va_start(ap, fmt);
		vsnprintf(r->why, r->len, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* A field's path, "layers[3].forward", for messages. */
struct path {
	char buf[128];
};

__attribute__((format(printf, 2, 3))) static const char *at(struct path *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p->buf, sizeof(p->buf), fmt, ap);
	va_end(ap);
	return p->buf;
}

static const char *dot(const char *where)
{
	return *where ? "." : "";
}

static int get(struct reader *r, const cJSON *obj, const char *where, const char *key,
               const cJSON **out)
{
	*out = cJSON_GetObjectItemCaseSensitive(obj, key);
	return *out ? 0 : refuse(r, "%s%s%s: missing", where, dot(where), key);
}

static int get_object(struct reader *r, const cJSON *obj, const char *where, const char *key,
                      const cJSON **out)
{
	int err = get(r, obj, where, key, out);

	if (!err && !cJSON_IsObject(*out))
		return refuse(r, "%s%s%s: expected an object", where, dot(where), key);
	return err;
}

static int get_array(struct reader *r, const cJSON *obj, const char *where, const char *key,
                     const cJSON **out)
{
	int err = get(r, obj, where, key, out);

	if (!err && !cJSON_IsArray(*out))
		return refuse(r, "%s%s%s: expected an array", where, dot(where), key);
	return err;
}

/* An integer in [min, max], max at most 2^53. */
static int get_int(struct reader *r, const cJSON *obj, const char *where, const char *key,
                   double min, double max, double *out)
{
	const cJSON *it;
	int err = get(r, obj, where, key, &it);

	if (err)
		return err;
	if (!cJSON_IsNumber(it))
		return refuse(r, "%s%s%s: expected a number", where, dot(where), key);
	if (!(it->valuedouble >= min && it->valuedouble <= max) ||
	    it->valuedouble != floor(it->valuedouble))
		return refuse(r, "%s%s%s: expected an integer in [%.0f, %.0f], got %.17g", where,
		              dot(where), key, min, max, it->valuedouble);
	*out = it->valuedouble;
	return 0;
}

static int get_u64(struct reader *r, const cJSON *obj, const char *where, const char *key,
                   uint64_t *out)
{
	double v;
	int err = get_int(r, obj, where, key, 0, MAX_EXACT - 1, &v);

	if (!err)
		*out = (uint64_t)v;
	return err;
}

static int get_u32(struct reader *r, const cJSON *obj, const char *where, const char *key,
                   uint32_t *out)
{
	double v;
	int err = get_int(r, obj, where, key, 0, UINT32_MAX, &v);

	if (!err)
		*out = (uint32_t)v;
	return err;
}

/* A finite number in [min, max) (or (min, max) when min_open), as what. */
static int get_real(struct reader *r, const cJSON *obj, const char *where, const char *key,
                    double min, bool min_open, double max, const char *what, double *out)
{
	const cJSON *it;
	int err = get(r, obj, where, key, &it);
	double v;

	if (err)
		return err;
	if (!cJSON_IsNumber(it))
		return refuse(r, "%s%s%s: expected a number", where, dot(where), key);
	v = it->valuedouble;
	if (!isfinite(v) || (min_open ? !(v > min) : !(v >= min)) || !(v < max))
		return refuse(r, "%s%s%s: expected %s, got %.17g", where, dot(where), key, what, v);
	*out = v;
	return 0;
}

/* An index: -1 (none) up to max. */
static int get_index(struct reader *r, const cJSON *obj, const char *where, const char *key,
                     double max, int32_t *out)
{
	double v;
	int err = get_int(r, obj, where, key, -1, max, &v);

	if (!err)
		*out = (int32_t)v;
	return err;
}

/* null (unknown: -1) or a non-negative int32. */
static int get_opt_int(struct reader *r, const cJSON *obj, const char *where, const char *key,
                       int32_t *out)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
	double v;
	int err;

	if (cJSON_IsNull(it)) {
		*out = -1;
		return 0;
	}
	err = get_int(r, obj, where, key, 0, INT32_MAX, &v);
	if (err == -EINVAL && it && !cJSON_IsNumber(it))
		return refuse(r, "%s%s%s: expected a number or null", where, dot(where), key);
	if (!err)
		*out = (int32_t)v;
	return err;
}

static int get_string(struct reader *r, const cJSON *obj, const char *where, const char *key,
                      char **out)
{
	const cJSON *it;
	int err = get(r, obj, where, key, &it);

	if (err)
		return err;
	if (!cJSON_IsString(it))
		return refuse(r, "%s%s%s: expected a string", where, dot(where), key);
	*out = strdup(it->valuestring);
	return *out ? 0 : -ENOMEM;
}

static int get_bool(struct reader *r, const cJSON *obj, const char *where, const char *key,
                    bool *out)
{
	const cJSON *it;
	int err = get(r, obj, where, key, &it);

	if (err)
		return err;
	if (!cJSON_IsBool(it))
		return refuse(r, "%s%s%s: expected true or false", where, dot(where), key);
	*out = cJSON_IsTrue(it);
	return 0;
}

/* One of names[0..n): its index. */
static int get_name(struct reader *r, const cJSON *obj, const char *where, const char *key,
                    const char *(*name)(int), int n, int *out)
{
	const cJSON *it;
	int err = get(r, obj, where, key, &it);

	if (err)
		return err;
	if (!cJSON_IsString(it))
		return refuse(r, "%s%s%s: expected a string", where, dot(where), key);
	for (int i = 0; i < n; i++)
		if (!strcmp(name(i), it->valuestring)) {
			*out = i;
			return 0;
		}
	return refuse(r, "%s%s%s: unknown value \"%.40s\"", where, dot(where), key,
	              it->valuestring);
}

static const char *source_name(int i)
{
	return lynx_profile_source_name((enum lynx_profile_source)i);
}

static const char *window_kind_name(int i)
{
	return lynx_profile_window_kind_name((enum lynx_profile_window_kind)i);
}

static int get_time(struct reader *r, const cJSON *obj, const char *where, const char *key,
                    struct lynx_profile_time *t)
{
	const cJSON *o;
	struct path p;
	int source, err = get_object(r, obj, where, key, &o);

	if (err)
		return err;
	at(&p, "%s%s%s", where, dot(where), key);
	memset(t, 0, sizeof(*t));
	err = get_name(r, o, p.buf, "source", source_name, LYNX_PROFILE_SOURCE_COUNT, &source);
	if (err)
		return err;
	t->source = (enum lynx_profile_source)source;
	if (t->source == LYNX_PROFILE_SOURCE_UNKNOWN)
		return 0;
	if ((err = get_u64(r, o, p.buf, "ns", &t->ns)) ||
	    (err = get_u64(r, o, p.buf, "min_ns", &t->min_ns)) ||
	    (err = get_u64(r, o, p.buf, "max_ns", &t->max_ns)) ||
	    (err = get_u32(r, o, p.buf, "samples", &t->samples)))
		return err;
	if (t->min_ns > t->ns || t->ns > t->max_ns)
		return refuse(r, "%s: expected min_ns <= ns <= max_ns", p.buf);
	return 0;
}

static int read_kernels(struct reader *r, const cJSON *obj, const char *where, const char *key,
                        struct lynx_profile_kernels *k)
{
	const cJSON *arr, *it;
	int err = get_array(r, obj, where, key, &arr);
	size_t i = 0;

	if (err)
		return err;
	k->count = (size_t)cJSON_GetArraySize(arr);
	k->name = k->count ? calloc(k->count, sizeof(*k->name)) : NULL;
	if (k->count && !k->name) {
		k->count = 0;
		return -ENOMEM;
	}
	cJSON_ArrayForEach(it, arr)
	{
		if (!cJSON_IsString(it))
			return refuse(r, "%s.%s[%zu]: expected a string", where, key, i);
		k->name[i] = strdup(it->valuestring);
		if (!k->name[i])
			return -ENOMEM;
		i++;
	}
	return 0;
}

/*
 * The optional device times of kernels k (already read) at obj's key: absent leaves k->ns
 * NULL; present, one integer per kernel. An empty list still allocates, so that a present
 * key stays present when the profile is written again.
 */
/* An optional array of one integer per kernel of k (named `names`), into *values. */
static int read_kernel_values(struct reader *r, const cJSON *obj, const char *where,
                              const char *key, const char *names,
                              const struct lynx_profile_kernels *k, uint64_t **values)
{
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(obj, key), *it;
	size_t n, i = 0;

	if (!arr)
		return 0;
	if (!cJSON_IsArray(arr))
		return refuse(r, "%s.%s: expected an array", where, key);
	n = (size_t)cJSON_GetArraySize(arr);
	if (n != k->count)
		return refuse(r, "%s.%s: expected %zu entries (one per kernel in %s.%s), got %zu",
		              where, key, k->count, where, names, n);
	*values = calloc(n ? n : 1, sizeof(**values));
	if (!*values)
		return -ENOMEM;
	cJSON_ArrayForEach(it, arr)
	{
		if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0 && it->valuedouble < MAX_EXACT) ||
		    it->valuedouble != floor(it->valuedouble))
			return refuse(r, "%s.%s[%zu]: expected an integer in [0, %.0f]", where, key,
			              i, MAX_EXACT - 1);
		(*values)[i++] = (uint64_t)it->valuedouble;
	}
	return 0;
}

/* Layer i at o; rerun: the profile's "rerun", what an absent "reruns_forward" means. */
static int read_layer(struct reader *r, const cJSON *o, size_t i, bool rerun,
                      struct lynx_profile_layer *l)
{
	struct path p, pk;
	const cJSON *k;
	double index;
	int err;

	at(&p, "layers[%zu]", i);
	if (!cJSON_IsObject(o))
		return refuse(r, "%s: expected an object", p.buf);
	if ((err = get_int(r, o, p.buf, "index", 0, MAX_EXACT - 1, &index)))
		return err;
	if (index != (double)i)
		return refuse(r, "%s.index: expected %zu, got %.0f", p.buf, i, index);
	if ((err = get_time(r, o, p.buf, "forward", &l->forward)) ||
	    (err = get_time(r, o, p.buf, "backward", &l->backward)) ||
	    (err = get_u64(r, o, p.buf, "saved_bytes", &l->saved_bytes)))
		return err;
	l->reruns_forward = rerun;
	if (cJSON_GetObjectItemCaseSensitive(o, "reruns_forward") &&
	    (err = get_bool(r, o, p.buf, "reruns_forward", &l->reruns_forward)))
		return err;
	if ((err = get_object(r, o, p.buf, "kernels", &k)))
		return err;
	at(&pk, "%s.kernels", p.buf);
	if ((err = read_kernels(r, k, pk.buf, "forward", &l->fwd_kernels)) ||
	    (err = read_kernels(r, k, pk.buf, "backward", &l->bwd_kernels)) ||
	    (err = read_kernel_values(r, k, pk.buf, "forward_ns", "forward", &l->fwd_kernels,
	                              &l->fwd_kernels.ns)) ||
	    (err = read_kernel_values(r, k, pk.buf, "backward_ns", "backward", &l->bwd_kernels,
	                              &l->bwd_kernels.ns)) ||
	    (err = read_kernel_values(r, k, pk.buf, "forward_non_saved_bytes", "forward",
	                              &l->fwd_kernels, &l->fwd_kernels.non_saved_bytes)))
		return err;
	return read_kernel_values(r, k, pk.buf, "backward_non_saved_bytes", "backward",
	                          &l->bwd_kernels, &l->bwd_kernels.non_saved_bytes);
}

/* A chained group's optional "writers": ascending forward positions below its producer, at
 * most LYNX_PROFILE_MAX_WRITERS. */
static int read_group_writers(struct reader *r, const cJSON *o, const char *where,
                              struct lynx_profile_group *g)
{
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "writers"), *it;
	int err;

	if (!arr)
		return 0;
	if (!g->chained)
		return refuse(r, "%s.writers: given without \"chained\"", where);
	if ((err = get_array(r, o, where, "writers", &arr)))
		return err;
	if (cJSON_GetArraySize(arr) > LYNX_PROFILE_MAX_WRITERS)
		return refuse(r, "%s.writers: more than %d", where, LYNX_PROFILE_MAX_WRITERS);
	cJSON_ArrayForEach(it, arr)
	{
		uint32_t k = g->writer_count;
		if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0) ||
		    it->valuedouble != floor(it->valuedouble) ||
		    it->valuedouble >= (double)g->producer)
			return refuse(r,
			              "%s.writers[%u]: expected a forward position below the "
			              "producer %d",
			              where, k, g->producer);
		g->writers[k] = (int32_t)it->valuedouble;
		if (k && g->writers[k] <= g->writers[k - 1])
			return refuse(r, "%s.writers[%u]: %d is not above the position before it",
			              where, k, g->writers[k]);
		g->writer_count++;
	}
	return 0;
}

/* A group's optional "reads" and "reads_freed": the indices of other groups among the profile's
 * `limit`, ascending; that they are of its layer is checked once every group is read
 * (read_reads_layers). */
static int read_group_reads(struct reader *r, const cJSON *o, const char *where, size_t i,
                            size_t limit, struct lynx_profile_group *g)
{
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "reads"), *it;
	int err;

	if (!arr) {
		if (cJSON_GetObjectItemCaseSensitive(o, "reads_freed"))
			return refuse(r, "%s.reads_freed: given without \"reads\"", where);
		if (cJSON_GetObjectItemCaseSensitive(o, "chained"))
			return refuse(r, "%s.chained: given without \"reads\"", where);
		return 0;
	}
	if ((err = get_array(r, o, where, "reads", &arr)))
		return err;
	g->reads_known = true;
	if (cJSON_GetObjectItemCaseSensitive(o, "reads_freed") &&
	    (err = get_bool(r, o, where, "reads_freed", &g->reads_freed)))
		return err;
	if (cJSON_GetObjectItemCaseSensitive(o, "chained") &&
	    (err = get_bool(r, o, where, "chained", &g->chained)))
		return err;
	if (g->chained && g->reads_freed)
		return refuse(r,
		              "%s.chained: a run that cannot be replayed (reads_freed) is no "
		              "chain",
		              where);
	if ((err = read_group_writers(r, o, where, g)))
		return err;
	size_t n = (size_t)cJSON_GetArraySize(arr);
	if (!n)
		return 0;
	if (!(g->reads = calloc(n, sizeof(*g->reads))))
		return -ENOMEM;
	cJSON_ArrayForEach(it, arr)
	{
		uint32_t k = g->read_count;
		if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0) ||
		    it->valuedouble != floor(it->valuedouble) || it->valuedouble >= (double)limit ||
		    it->valuedouble == (double)i)
			return refuse(r, "%s.reads[%u]: expected the index of another group", where,
			              k);
		g->reads[k] = (uint32_t)it->valuedouble;
		if (k && g->reads[k] <= g->reads[k - 1])
			return refuse(r, "%s.reads[%u]: %u is not above the index before it", where,
			              k, g->reads[k]);
		g->read_count++;
	}
	return 0;
}

/* Every group that a group reads is of its layer. */
static int read_reads_layers(struct reader *r, const struct lynx_profile *p)
{
	for (size_t i = 0; i < p->group_count; i++)
		for (uint32_t k = 0; k < p->groups[i].read_count; k++)
			if (p->groups[p->groups[i].reads[k]].layer != p->groups[i].layer)
				return refuse(r,
				              "groups[%zu].reads[%u]: group %u is of layer %u, not "
				              "of the group's layer %u",
				              i, k, p->groups[i].reads[k],
				              p->groups[p->groups[i].reads[k]].layer,
				              p->groups[i].layer);
	return 0;
}

static int read_group(struct reader *r, const cJSON *o, size_t i, size_t layers, size_t groups,
                      struct lynx_profile_group *g)
{
	struct path p;
	int err;

	at(&p, "groups[%zu]", i);
	if (!cJSON_IsObject(o))
		return refuse(r, "%s: expected an object", p.buf);
	if ((err = get_u32(r, o, p.buf, "layer", &g->layer)) ||
	    (err = get_u64(r, o, p.buf, "bytes", &g->bytes)) ||
	    (err = get_index(r, o, p.buf, "producer", INT32_MAX, &g->producer)) ||
	    (err = get_index(r, o, p.buf, "first_consumer", INT32_MAX, &g->first_consumer)) ||
	    (err = get_index(r, o, p.buf, "last_consumer", INT32_MAX, &g->last_consumer)))
		return err;
	g->producer_end = g->producer;
	if (cJSON_GetObjectItemCaseSensitive(o, "producer_end") &&
	    (err = get_index(r, o, p.buf, "producer_end", INT32_MAX, &g->producer_end)))
		return err;
	if (g->producer_end < g->producer || (g->producer < 0 && g->producer_end >= 0))
		return refuse(r,
		              "%s.producer_end: %d cannot end a run that starts at the producer %d",
		              p.buf, g->producer_end, g->producer);
	if (g->layer >= layers)
		return refuse(r, "%s.layer: %u is not one of the %zu layers", p.buf, g->layer,
		              layers);
	if ((err = read_group_reads(r, o, p.buf, i, groups, g)))
		return err;
	if (cJSON_GetObjectItemCaseSensitive(o, "scratch_bytes")) {
		g->scratch_known = true;
		if ((err = get_u64(r, o, p.buf, "scratch_bytes", &g->scratch_bytes)))
			return err;
	}
	if (!cJSON_GetObjectItemCaseSensitive(o, "freed_before"))
		return 0;
	g->freed_known = true;
	if ((err = get_u32(r, o, p.buf, "freed_before", &g->freed_before)))
		return err;
	if (g->last_consumer >= 0 && g->freed_before <= (uint32_t)g->last_consumer)
		return refuse(r, "%s.freed_before: %u is not past its last consumer %d", p.buf,
		              g->freed_before, g->last_consumer);
	return 0;
}

static int read_window(struct reader *r, const cJSON *o, size_t i, const struct lynx_profile *pr,
                       struct lynx_profile_window *w)
{
	struct path p;
	int kind, err;

	at(&p, "windows[%zu]", i);
	if (!cJSON_IsObject(o))
		return refuse(r, "%s: expected an object", p.buf);
	if ((err = get_name(r, o, p.buf, "kind", window_kind_name, LYNX_PROFILE_WINDOW_KIND_COUNT,
	                    &kind)))
		return err;
	w->kind = (enum lynx_profile_window_kind)kind;
	if ((err = get_string(r, o, p.buf, "call", &w->call)) ||
	    (err = get_u32(r, o, p.buf, "comm", &w->comm)) ||
	    (err = get_index(r, o, p.buf, "peer", INT32_MAX, &w->peer)) ||
	    (err = get_u64(r, o, p.buf, "count", &w->count)) ||
	    (err = get_u64(r, o, p.buf, "bytes", &w->bytes)) ||
	    (err = get_index(r, o, p.buf, "microbatch", (double)pr->microbatches - 1,
	                     &w->microbatch)) ||
	    (err = get_index(r, o, p.buf, "layer", (double)pr->layer_count - 1, &w->layer)) ||
	    (err = get_index(r, o, p.buf, "ordinal", INT32_MAX, &w->ordinal)) ||
	    (err = get_index(r, o, p.buf, "kernel", INT32_MAX, &w->kernel)) ||
	    (err = get_u64(r, o, p.buf, "offset_ns", &w->offset_ns)) ||
	    (err = get_time(r, o, p.buf, "duration", &w->duration)) ||
	    (err = get_time(r, o, p.buf, "idle", &w->idle)))
		return err;
	return 0;
}

static int read_memory(struct reader *r, const cJSON *root, struct lynx_profile_memory *m)
{
	const cJSON *o, *a;
	int source, err = get_object(r, root, "", "memory", &o);

	if (err ||
	    (err = get_name(r, o, "memory", "source", source_name, LYNX_PROFILE_SOURCE_COUNT,
	                    &source)) ||
	    (err = get_u64(r, o, "memory", "peak_bytes", &m->peak_bytes)) ||
	    (err = get_u64(r, o, "memory", "buffers", &m->buffers)) ||
	    (err = get_object(r, o, "memory", "at_peak", &a)))
		return err;
	m->source = (enum lynx_profile_source)source;
	m->non_saved_peak_bytes = 0;
	for (int c = 0; c < LYNX_PROFILE_MEMORY_CLASS_COUNT; c++) {
		if ((err = get_u64(r, a, "memory.at_peak", lynx_profile_memory_class_name(c),
		                   &m->at_peak[c])))
			return err;
		if (c != LYNX_PROFILE_MEMORY_SAVED)
			m->non_saved_peak_bytes += m->at_peak[c];
	}
	if (cJSON_GetObjectItemCaseSensitive(o, "non_saved_peak_bytes") &&
	    (err = get_u64(r, o, "memory", "non_saved_peak_bytes", &m->non_saved_peak_bytes)))
		return err;
	m->largest_workspace_bytes = m->at_peak[LYNX_PROFILE_MEMORY_WORKSPACE];
	if (cJSON_GetObjectItemCaseSensitive(o, "largest_workspace_bytes") &&
	    (err = get_u64(r, o, "memory", "largest_workspace_bytes", &m->largest_workspace_bytes)))
		return err;
	m->non_saved_known = cJSON_GetObjectItemCaseSensitive(o, "non_saved_outside_bytes");
	if (m->non_saved_known &&
	    (err = get_u64(r, o, "memory", "non_saved_outside_bytes", &m->non_saved_outside_bytes)))
		return err;
	return 0;
}

/* Whether one direction's per-kernel non-saved bytes (NULL: none) are given exactly when
 * the memory's are, none above their peak. */
static int check_non_saved(struct reader *r, const struct lynx_profile_memory *m, size_t layer,
                           const char *key, const struct lynx_profile_kernels *k)
{
	if (!k->non_saved_bytes != !m->non_saved_known)
		return refuse(r,
		              m->non_saved_known ? "layers[%zu].kernels.%s: missing beside "
		                                   "memory.non_saved_outside_bytes"
		                                 : "layers[%zu].kernels.%s: given without "
		                                   "memory.non_saved_outside_bytes",
		              layer, key);
	for (size_t i = 0; k->non_saved_bytes && i < k->count; i++)
		if (k->non_saved_bytes[i] > m->non_saved_peak_bytes)
			return refuse(r,
			              "layers[%zu].kernels.%s[%zu]: above "
			              "memory.non_saved_peak_bytes",
			              layer, key, i);
	return 0;
}

/* Where the non-saved bytes were live: for every kernel of every layer and outside them, or
 * nowhere; none above their peak. */
static int read_non_saved_places(struct reader *r, const struct lynx_profile *p)
{
	const struct lynx_profile_memory *m = &p->memory;
	int err;

	if (m->non_saved_known && m->non_saved_outside_bytes > m->non_saved_peak_bytes)
		return refuse(r, "memory.non_saved_outside_bytes: above non_saved_peak_bytes");
	for (size_t i = 0; i < p->layer_count; i++)
		if ((err = check_non_saved(r, m, i, "forward_non_saved_bytes",
		                           &p->layers[i].fwd_kernels)) ||
		    (err = check_non_saved(r, m, i, "backward_non_saved_bytes",
		                           &p->layers[i].bwd_kernels)))
			return err;
	return 0;
}

/* The optional host link: absent, not measured (all 0). */
static int read_host_link(struct reader *r, const cJSON *root, struct lynx_profile_host_link *h)
{
	static const char rate[] = "a finite rate in bytes/s above 0";
	const cJSON *o;
	int err;

	memset(h, 0, sizeof(*h));
	if (!cJSON_GetObjectItemCaseSensitive(root, "host_link"))
		return 0;
	if ((err = get_object(r, root, "", "host_link", &o)) ||
	    (err = get_real(r, o, "host_link", "d2h_bytes_per_s", 0, true, INFINITY, rate,
	                    &h->d2h_bytes_per_s)) ||
	    (err = get_real(r, o, "host_link", "h2d_bytes_per_s", 0, true, INFINITY, rate,
	                    &h->h2d_bytes_per_s)) ||
	    (err = get_real(r, o, "host_link", "latency_s", 0, false, 1,
	                    "a finite time in seconds in [0, 1)", &h->latency_s)))
		return err;
	return 0;
}

static const char *run_source_name(int i)
{
	return lynx_profile_run_source_name((enum lynx_profile_run_source)i);
}

/* The optional run: absent, unknown (known false). */
static int read_run(struct reader *r, const cJSON *root, struct lynx_profile_run *run)
{
	const cJSON *o, *id;
	int source, err;

	memset(run, 0, sizeof(*run));
	if (!cJSON_GetObjectItemCaseSensitive(root, "run"))
		return 0;
	if ((err = get_object(r, root, "", "run", &o)) || (err = get(r, o, "run", "id", &id)) ||
	    (err = get_name(r, o, "run", "source", run_source_name, LYNX_PROFILE_RUN_SOURCE_COUNT,
	                    &source)) ||
	    (err = get_u64(r, o, "run", "started", &run->started)))
		return err;
	if (!cJSON_IsString(id))
		return refuse(r, "run.id: expected a string");
	if (strlen(id->valuestring) > LYNX_PROFILE_RUN_ID_MAX)
		return refuse(r, "run.id: %zu bytes, expected at most %d", strlen(id->valuestring),
		              LYNX_PROFILE_RUN_ID_MAX);
	for (const unsigned char *c = (const unsigned char *)id->valuestring; *c; c++)
		if (*c < 0x20 || *c == 0x7f)
			return refuse(r, "run.id: a control character (0x%02x) at byte %zu", *c,
			              (size_t)(c - (const unsigned char *)id->valuestring));
	run->source = (enum lynx_profile_run_source)source;
	if (run->source == LYNX_PROFILE_RUN_SOURCE_NONE && id->valuestring[0])
		return refuse(r, "run.id: expected \"\" with source \"none\", got \"%.40s\"",
		              id->valuestring);
	if (run->source != LYNX_PROFILE_RUN_SOURCE_NONE && !id->valuestring[0])
		return refuse(r, "run.id: empty, expected the id that %s gave",
		              lynx_profile_run_source_name(run->source));
	strcpy(run->id, id->valuestring);
	run->known = true;
	return 0;
}

/* The array at key: its size, and a calloc'ed array of n elements of size bytes. */
static int alloc_array(struct reader *r, const cJSON *root, const char *key, size_t size,
                       const cJSON **arr, void **out, size_t *n)
{
	int err = get_array(r, root, "", key, arr);

	if (err)
		return err;
	*n = (size_t)cJSON_GetArraySize(*arr);
	*out = *n ? calloc(*n, size) : NULL;
	if (*n && !*out) {
		*n = 0;
		return -ENOMEM;
	}
	return 0;
}

static int read_profile(struct reader *r, const cJSON *root, struct lynx_profile *p)
{
	const cJSON *o, *arr, *it;
	double version, pid, warmup = 0;
	bool rerun;
	char *format = NULL;
	size_t i;
	int err;

	if (!cJSON_IsObject(root))
		return refuse(r, "the document is not a JSON object");
	if ((err = get_string(r, root, "", "format", &format)))
		return err;
	if (strcmp(format, LYNX_PROFILE_FORMAT)) {
		err = refuse(r, "format: expected \"%s\", got \"%.40s\"", LYNX_PROFILE_FORMAT,
		             format);
		free(format);
		return err;
	}
	free(format);
	if ((err = get_int(r, root, "", "version", 0, INT32_MAX, &version)))
		return err;
	if (version != LYNX_PROFILE_VERSION)
		return refuse(r, "version: %.0f is not supported (this reader knows %s version %d)",
		              version, LYNX_PROFILE_FORMAT, LYNX_PROFILE_VERSION);
	if ((err = get_opt_int(r, root, "", "rank", &p->rank)) ||
	    (err = get_opt_int(r, root, "", "world", &p->world)) ||
	    (err = read_run(r, root, &p->run)))
		return err;
	if ((err = get_object(r, root, "", "environment", &o)) ||
	    (err = get_int(r, o, "environment", "pid", 0, INT32_MAX, &pid)) ||
	    (err = get_string(r, o, "environment", "gpu", &p->env.gpu)) ||
	    (err = get_string(r, o, "environment", "driver", &p->env.driver)) ||
	    (err = get_string(r, o, "environment", "nccl", &p->env.nccl)))
		return err;
	p->env.pid = (int32_t)pid;
	if ((err = get_object(r, root, "", "iteration", &o)) ||
	    (err = get_u64(r, o, "iteration", "period_tokens", &p->iteration.period_tokens)) ||
	    (err = get_u32(r, o, "iteration", "count", &p->iteration.count)) ||
	    (err = get_u64(r, o, "iteration", "prefix_events", &p->iteration.prefix_events)) ||
	    (err = get_u64(r, o, "iteration", "events", &p->iteration.events)) ||
	    (err = get_time(r, o, "iteration", "time", &p->iteration.time)))
		return err;
	if ((err = get_u32(r, root, "", "microbatches", &p->microbatches)) ||
	    (err = get_bool(r, root, "", "rerun", &rerun)))
		return err;
	/* Optional (0: no pipeline, or a profile from before the key); at most m, as 1F1B caps
	 * the warm-up by the micro-batches. */
	if (cJSON_GetObjectItemCaseSensitive(root, "warmup_forwards") &&
	    (err = get_int(r, root, "", "warmup_forwards", 0, p->microbatches, &warmup)))
		return err;
	p->warmup_forwards = (uint32_t)warmup;
	p->pipeline_stage = -1;
	p->pipeline_stages = 0;
	if (cJSON_GetObjectItemCaseSensitive(root, "pipeline")) {
		double stage, stages;

		if ((err = get_object(r, root, "", "pipeline", &o)) ||
		    (err = get_int(r, o, "pipeline", "stages", 1, 1 << 20, &stages)) ||
		    (err = get_int(r, o, "pipeline", "stage", 0, stages - 1, &stage)))
			return err;
		p->pipeline_stage = (int32_t)stage;
		p->pipeline_stages = (uint32_t)stages;
	}

	if ((err = alloc_array(r, root, "layers", sizeof(*p->layers), &arr, (void **)&p->layers,
	                       &p->layer_count)))
		return err;
	i = 0;
	cJSON_ArrayForEach(it, arr)
	{
		if ((err = read_layer(r, it, i, rerun, &p->layers[i])))
			return err;
		i++;
	}
	if (p->layer_count && rerun != lynx_profile_all_rerun(p))
		return refuse(r, "rerun: %s, but %zu of the %zu layers rerun their forward",
		              rerun ? "true" : "false", lynx_profile_rerun_layers(p),
		              p->layer_count);
	if ((err = alloc_array(r, root, "groups", sizeof(*p->groups), &arr, (void **)&p->groups,
	                       &p->group_count)))
		return err;
	i = 0;
	cJSON_ArrayForEach(it, arr)
	{
		if ((err = read_group(r, it, i, p->layer_count, p->group_count, &p->groups[i])))
			return err;
		i++;
	}
	if ((err = read_reads_layers(r, p)))
		return err;
	if ((err = alloc_array(r, root, "windows", sizeof(*p->windows), &arr, (void **)&p->windows,
	                       &p->window_count)))
		return err;
	i = 0;
	cJSON_ArrayForEach(it, arr)
	{
		if ((err = read_window(r, it, i, p, &p->windows[i])))
			return err;
		i++;
	}
	if ((err = read_memory(r, root, &p->memory)) || (err = read_non_saved_places(r, p)))
		return err;
	return read_host_link(r, root, &p->host_link);
}

/* Where cJSON stopped, as "byte N (line L, column C)", and whether the text ends early. */
static int refuse_syntax(struct reader *r, const char *text, size_t len, size_t offset)
{
	size_t line, col;

	lynx_json_position(text, offset < len ? offset : len, &line, &col);
	if (lynx_json_unclosed(text, len))
		return refuse(r,
		              "not valid JSON: the text ends early (after %zu bytes, inside an "
		              "unclosed string, object or array); parsing stopped at byte %zu "
		              "(line %zu, column %zu)",
		              len, offset, line, col);
	return refuse(r, "not valid JSON: parsing stopped at byte %zu (line %zu, column %zu)",
	              offset, line, col);
}

int lynx_profile_from_json(const char *text, size_t len, struct lynx_profile *out, char *why,
                           size_t why_len)
{
	struct reader r = {why, why_len};
	const char *end = NULL, *nul = memchr(text, '\0', len);
	char *copy;
	cJSON *root;
	int err;

	memset(out, 0, sizeof(*out));
	out->rank = out->world = -1;
	if (nul)
		return refuse(&r, "not valid JSON: a NUL byte at byte %zu", (size_t)(nul - text));
	copy = malloc(len + 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, text, len);
	copy[len] = '\0';
	root = cJSON_ParseWithOpts(copy, &end, true);
	if (!root) {
		err = refuse_syntax(&r, copy, len, end && end >= copy ? (size_t)(end - copy) : 0);
		free(copy);
		return err;
	}
	free(copy);
	err = read_profile(&r, root, out);
	cJSON_Delete(root);
	if (err)
		lynx_profile_free(out);
	return err;
}

int lynx_profile_read(const char *path, struct lynx_profile *out, char *why, size_t why_len)
{
	char *text;
	size_t len;
	int err = lynx_regular_file_read(path, LYNX_PROFILE_MAX_FILE_BYTES, &text, &len, why,
	                                 why_len);

	memset(out, 0, sizeof(*out));
	if (err)
		return err;
	err = lynx_profile_from_json(text, len, out, why, why_len);
	free(text);
	return err;
}
