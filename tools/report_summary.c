/* SPDX-License-Identifier: Apache-2.0 */
/* summary.<rank>.json, read strictly: see report_summary.h. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "report_summary.h"

static int refuse(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* The object's member key (a dotted path for messages is the caller's). */
static const cJSON *member(const cJSON *obj, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(obj, key);
}

/* A whole number from 0 to 2^53 (what JSON's doubles hold exactly) at obj.key. */
static int count_at(const cJSON *obj, const char *section, const char *key, uint64_t *out,
                    char *why, size_t len)
{
	const cJSON *v = member(obj, key);

	if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > 9007199254740992.0 ||
	    v->valuedouble != floor(v->valuedouble))
		return refuse(why, len, "%s.%s is not a whole number from 0 to 2^53", section, key);
	*out = (uint64_t)v->valuedouble;
	return 0;
}

static int text_at(const cJSON *obj, const char *section, const char *key, char *out, size_t size,
                   char *why, size_t len)
{
	const cJSON *v = member(obj, key);

	if (!cJSON_IsString(v) || strlen(v->valuestring) >= size)
		return refuse(why, len, "%s.%s is not a string of fewer than %zu bytes", section,
		              key, size);
	memcpy(out, v->valuestring, strlen(v->valuestring) + 1);
	return 0;
}

static const cJSON *section_of(const cJSON *root, const char *key, char *why, size_t len)
{
	const cJSON *s = member(root, key);

	if (!cJSON_IsObject(s))
		refuse(why, len, "no \"%s\" object", key);
	return cJSON_IsObject(s) ? s : NULL;
}

/* memory.curve: absent or null, or {"iteration_ns": N, "points": [[t, bytes], ...]} with t
 * from 0 to N in order. */
static int parse_curve(const cJSON *mem, struct lynx_summary *out, char *why, size_t len)
{
	const cJSON *curve = member(mem, "curve"), *n, *points, *p;
	double last = 0;

	out->n_curve = 0;
	if (!curve || cJSON_IsNull(curve))
		return 0;
	if (!cJSON_IsObject(curve))
		return refuse(why, len, "memory.curve is neither null nor an object");
	n = member(curve, "iteration_ns");
	if (!cJSON_IsNumber(n) || !(n->valuedouble > 0) || !isfinite(n->valuedouble))
		return refuse(why, len, "memory.curve.iteration_ns is not a positive number");
	out->curve_ns = n->valuedouble;
	points = member(curve, "points");
	if (!cJSON_IsArray(points))
		return refuse(why, len, "no \"memory.curve.points\" array");
	cJSON_ArrayForEach(p, points)
	{
		const cJSON *t = cJSON_GetArrayItem(p, 0), *b = cJSON_GetArrayItem(p, 1);
		if (out->n_curve == LYNX_SUMMARY_MAX_CURVE)
			return refuse(why, len, "memory.curve has more than %d points",
			              LYNX_SUMMARY_MAX_CURVE);
		if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) != 2 || !cJSON_IsNumber(t) ||
		    !cJSON_IsNumber(b) || !(t->valuedouble >= last) ||
		    !(t->valuedouble <= out->curve_ns) || !(b->valuedouble >= 0) ||
		    !isfinite(b->valuedouble))
			return refuse(
			        why, len,
			        "memory.curve.points[%zu] is not [ns within the iteration, in "
			        "order; bytes]",
			        out->n_curve);
		last = t->valuedouble;
		out->curve_t[out->n_curve] = t->valuedouble;
		out->curve_bytes[out->n_curve++] = b->valuedouble;
	}
	return 0;
}

static int parse(const cJSON *root, struct lynx_summary *out, char *why, size_t len)
{
	const cJSON *v, *plan, *mem, *step, *ev, *replay, *d;
	uint64_t version, rank;

	if (!cJSON_IsObject(root))
		return refuse(why, len, "not a JSON object");
	v = member(root, "format");
	if (!cJSON_IsString(v) || strcmp(v->valuestring, "lynx-summary"))
		return refuse(why, len, "not a lynx-summary file (\"format\")");
	if (count_at(root, "summary", "version", &version, why, len) ||
	    count_at(root, "summary", "rank", &rank, why, len))
		return -EINVAL;
	if (version != 1)
		return refuse(why, len, "version %llu, not 1", (unsigned long long)version);
	if (rank > 1u << 24)
		return refuse(why, len, "rank %llu is out of range", (unsigned long long)rank);
	out->rank = (int)rank;
	const cJSON *run = member(root, "run");
	out->run_id[0] = 0;
	if (run && !cJSON_IsObject(run))
		return refuse(why, len, "\"run\" is not an object");
	if (run && member(run, "id") && !cJSON_IsNull(member(run, "id")) &&
	    text_at(run, "run", "id", out->run_id, sizeof(out->run_id), why, len))
		return -EINVAL;
	if (!(plan = section_of(root, "plan", why, len)) ||
	    !(mem = section_of(root, "memory", why, len)) ||
	    !(step = section_of(root, "step", why, len)) ||
	    !(ev = section_of(root, "evictions", why, len)) ||
	    !(replay = section_of(root, "replay", why, len)))
		return -EINVAL;
	if (text_at(plan, "plan", "planner", out->planner, sizeof(out->planner), why, len) ||
	    count_at(plan, "plan", "budget_bytes", &out->budget_bytes, why, len))
		return -EINVAL;
	v = member(plan, "hash");
	if (!v)
		out->plan_hash[0] = 0;
	else if (text_at(plan, "plan", "hash", out->plan_hash, sizeof(out->plan_hash), why, len))
		return -EINVAL;
	v = member(plan, "max_slowdown");
	if (cJSON_IsNull(v))
		out->max_slowdown[0] = 0;
	else if (text_at(plan, "plan", "max_slowdown", out->max_slowdown, sizeof(out->max_slowdown),
	                 why, len))
		return -EINVAL;
	if (!cJSON_IsObject(d = member(plan, "decisions")))
		return refuse(why, len, "no \"plan.decisions\" object");
	if (count_at(d, "plan.decisions", "keep", &out->keep, why, len) ||
	    count_at(d, "plan.decisions", "offload", &out->offload, why, len) ||
	    count_at(d, "plan.decisions", "recompute", &out->recompute, why, len) ||
	    count_at(mem, "memory", "measured_peak_bytes", &out->measured_peak_bytes, why, len) ||
	    count_at(mem, "memory", "predicted_peak_bytes", &out->predicted_peak_bytes, why, len) ||
	    count_at(mem, "memory", "achieved_peak_bytes", &out->achieved_peak_bytes, why, len) ||
	    count_at(step, "step", "measured_ns", &out->measured_ns, why, len) ||
	    count_at(ev, "evictions", "offloaded", &out->offloaded, why, len) ||
	    count_at(ev, "evictions", "replayed", &out->replayed, why, len) ||
	    parse_curve(mem, out, why, len))
		return -EINVAL;
	v = member(step, "predicted_slowdown");
	if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !isfinite(v->valuedouble))
		return refuse(why, len, "step.predicted_slowdown is not a positive number");
	out->predicted_slowdown = v->valuedouble;
	v = member(step, "achieved_ns");
	out->achieved_known = !cJSON_IsNull(v);
	if (out->achieved_known) {
		if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || !isfinite(v->valuedouble))
			return refuse(why, len, "step.achieved_ns is neither null nor a number");
		out->achieved_ns = v->valuedouble;
	}
	const cJSON *refused = member(replay, "refused"), *r;
	if (!cJSON_IsArray(refused))
		return refuse(why, len, "no \"replay.refused\" array");
	out->n_refused = 0;
	cJSON_ArrayForEach(r, refused)
	{
		if (out->n_refused == LYNX_SUMMARY_MAX_REFUSALS)
			return refuse(why, len, "more than %d kinds of refused replays",
			              LYNX_SUMMARY_MAX_REFUSALS);
		if (text_at(r, "replay.refused[]", "verdict", out->refused[out->n_refused].verdict,
		            sizeof(out->refused[0].verdict), why, len) ||
		    count_at(r, "replay.refused[]", "count", &out->refused[out->n_refused].count,
		             why, len))
			return -EINVAL;
		out->n_refused++;
	}
	return 0;
}

int lynx_summary_parse(const char *text, size_t len, struct lynx_summary *out, char *why,
                       size_t why_len)
{
	cJSON *root = cJSON_ParseWithLength(text, len);

	memset(out, 0, sizeof(*out));
	if (!root)
		return refuse(why, why_len, "not JSON (near byte %zu)",
		              cJSON_GetErrorPtr() ? (size_t)(cJSON_GetErrorPtr() - text) : 0);
	int err = parse(root, out, why, why_len);
	cJSON_Delete(root);
	if (err)
		memset(out, 0, sizeof(*out));
	return err;
}
