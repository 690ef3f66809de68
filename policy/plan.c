/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Plans: their decisions, validation against a problem, and their JSON form:
 *
 *   {"format": "lynx-plan", "version": 1,
 *    "planner": "selective", "fits": true, "step_time_s": 1.25, "search_time_s": 2e-06,
 *    "budget_bytes": 85899345920,
 *    "gap": 0.004, "note": "...", "run": "torchelastic-3f2a",
 *    "stages": [{"stage": 0, "layers": 10, "peak_bytes": 30064771072,
 *                "decisions": {"ln1_in": "keep", "softmax_out": "recompute_on_demand",
 *                              "q_k": {"recompute_in_window":
 *                                      {"kind": "tp_fwd", "layer": 3, "op": "attn_bda"}},
 *                              ...}}]}
 *
 * "decisions" is one object for all of the stage's layers (a uniform plan) or an array with
 * one object per layer. Each object names every group of the problem's layer exactly once.
 * An action is "keep", "offload", "recompute_on_demand", or an object whose one key
 * "recompute_in_window" names a window of the stage by kind, and by layer and op for TP
 * windows. Byte counts are integers below 2^53, which every JSON reader holds exactly.
 * Rebuilds that share a window occurrence run in group order (the layer's groups list their
 * dependencies first), one layer and micro-batch after another. "gap" (an exact planner's
 * optimality gap), "note" and "run" (the run of the profiles planned from) are optional:
 * written only when set, read when present. So is "granule_bytes": a problem built from
 * profiles with a granule has no groups for the buffers below it, and a plan for it names
 * its groups; read against a problem of another granule, it is refused.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "refuse.h"
#include "plan.h"

const char *lynx_plan_action_name(enum lynx_action a)
{
	static const char *const names[LYNX_ACTION_COUNT] = {
#define LYNX_ACTION_NAME(id, name) [LYNX_ACTION_##id] = name,
	        LYNX_ACTION_LIST(LYNX_ACTION_NAME)
#undef LYNX_ACTION_NAME
	};

	return (unsigned)a < LYNX_ACTION_COUNT ? names[a] : "unknown";
}

enum lynx_action lynx_plan_find_action(const char *name)
{
	for (int a = 0; a < LYNX_ACTION_COUNT; a++)
		if (!strcmp(lynx_plan_action_name(a), name))
			return (enum lynx_action)a;
	return LYNX_ACTION_COUNT;
}

int lynx_plan_init(struct lynx_plan *plan, const struct lynx_problem *p, const char *planner,
                   bool uniform)
{
	*plan = (struct lynx_plan){
	        .budget_bytes = p->budget_bytes, .n_groups = p->layer.n_groups, .gap = NAN};
	snprintf(plan->planner, sizeof(plan->planner), "%s", planner);
	plan->stages = calloc(p->n_stages ? p->n_stages : 1, sizeof(*plan->stages));
	if (!plan->stages)
		return -ENOMEM;
	plan->n_stages = p->n_stages;
	for (uint32_t s = 0; s < p->n_stages; s++) {
		struct lynx_plan_stage *ps = &plan->stages[s];
		uint32_t rows = uniform ? 1 : p->stages[s].layers;

		ps->layers = p->stages[s].layers;
		ps->uniform = uniform;
		/* calloc zeroes every decision to KEEP (0), window 0. */
		ps->rows = calloc(rows ? rows : 1, sizeof(*ps->rows));
		if (!ps->rows) {
			lynx_plan_free(plan);
			return -ENOMEM;
		}
	}
	return 0;
}

void lynx_plan_free(struct lynx_plan *plan)
{
	if (plan->stages)
		for (uint32_t s = 0; s < plan->n_stages; s++)
			free(plan->stages[s].rows);
	free(plan->stages);
	plan->stages = NULL;
	plan->n_stages = 0;
}

struct lynx_decision *lynx_plan_decision(struct lynx_plan *plan, uint32_t stage, uint32_t layer,
                                         uint32_t g)
{
	struct lynx_plan_stage *ps = &plan->stages[stage];

	return &ps->rows[ps->uniform ? 0 : layer][g];
}

const struct lynx_decision *lynx_plan_get(const struct lynx_plan *plan, uint32_t stage,
                                          uint32_t layer, uint32_t g)
{
	const struct lynx_plan_stage *ps = &plan->stages[stage];

	return &ps->rows[ps->uniform ? 0 : layer][g];
}

uint32_t lynx_plan_lower(const struct lynx_problem *p, struct lynx_plan *plan)
{
	const struct lynx_problem_layer *L = &p->layer;
	uint32_t changed = 0;

	for (uint32_t s = 0; s < plan->n_stages; s++) {
		uint32_t rows = plan->stages[s].uniform ? 1 : plan->stages[s].layers;

		for (uint32_t l = 0; l < rows; l++)
			for (uint32_t g = 0; g < L->n_groups; g++) {
				struct lynx_decision *d = lynx_plan_decision(plan, s, l, g);

				if (!L->groups[g].reads_freed ||
				    (d->action != LYNX_ACTION_RECOMPUTE_ON_DEMAND &&
				     d->action != LYNX_ACTION_RECOMPUTE_IN_WINDOW))
					continue;
				*d = (struct lynx_decision){.action = LYNX_ACTION_OFFLOAD};
				changed++;
			}
	}
	return changed;
}

int lynx_plan_validate(const struct lynx_plan *plan, const struct lynx_problem *p, char *why,
                       size_t len)
{
	if (plan->n_stages != p->n_stages)
		return lynx_policy_refuse(why, len, "the plan has %u stages, the problem %u",
		                          plan->n_stages, p->n_stages);
	if (plan->n_groups != p->layer.n_groups)
		return lynx_policy_refuse(why, len,
		                          "the plan has %u groups per layer, the problem %u",
		                          plan->n_groups, p->layer.n_groups);
	for (uint32_t s = 0; s < p->n_stages; s++) {
		const struct lynx_plan_stage *ps = &plan->stages[s];
		const struct lynx_problem_stage *st = &p->stages[s];

		if (ps->layers != st->layers)
			return lynx_policy_refuse(
			        why, len, "stage %u: the plan has %u layers, the problem %u", s,
			        ps->layers, st->layers);
		for (uint32_t l = 0; l < (ps->uniform ? 1 : ps->layers); l++)
			for (uint32_t g = 0; g < p->layer.n_groups; g++) {
				const struct lynx_decision *d = &ps->rows[l][g];
				const char *name = p->layer.groups[g].name;

				if ((unsigned)d->action >= LYNX_ACTION_COUNT)
					return lynx_policy_refuse(
					        why, len,
					        "stage %u layer %u group %s: bad action %d", s, l,
					        name, (int)d->action);
				if (d->action != LYNX_ACTION_KEEP &&
				    d->action != LYNX_ACTION_OFFLOAD && !p->layer.groups[g].ops)
					return lynx_policy_refuse(
					        why, len,
					        "stage %u layer %u group %s: it is the layer's "
					        "input and cannot be recomputed inside the layer",
					        s, l, name);
				if (d->action == LYNX_ACTION_RECOMPUTE_IN_WINDOW &&
				    d->window >= st->n_windows)
					return lynx_policy_refuse(
					        why, len,
					        "stage %u layer %u group %s: window %u does not "
					        "exist (the stage has %u)",
					        s, l, name, d->window, st->n_windows);
			}
	}
	return 0;
}

/* ---- Writer ---- */

/*
 * Numbers are printed here rather than by cJSON, which keeps 15 significant digits when they
 * read back "close enough": %.17g round-trips every double, %llu every integer below 2^53.
 */
/* v exactly (%.17g); JSON has no infinity or NaN: those are written as null, which the
 * reader refuses with the key's name instead of the whole file being unreadable. */
static bool add_double(cJSON *o, const char *key, double v)
{
	char buf[32];

	if (!isfinite(v))
		return cJSON_AddNullToObject(o, key) != NULL;
	snprintf(buf, sizeof(buf), "%.17g", v);
	return cJSON_AddRawToObject(o, key, buf) != NULL;
}

static bool add_uint(cJSON *o, const char *key, uint64_t v)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
	return cJSON_AddRawToObject(o, key, buf) != NULL;
}

static cJSON *window_json(const struct lynx_problem *p, const struct lynx_window *w)
{
	cJSON *o = cJSON_CreateObject();
	bool ok = o != NULL;

	ok = ok && cJSON_AddStringToObject(o, "kind", lynx_problem_window_kind_name(w->kind));
	if (ok && w->layer >= 0)
		ok = add_uint(o, "layer", (uint64_t)w->layer);
	if (ok && w->op >= 0)
		ok = cJSON_AddStringToObject(o, "op", p->layer.ops[w->op].name) != NULL;
	if (!ok) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

static cJSON *row_json(const struct lynx_problem *p, const struct lynx_problem_stage *st,
                       const struct lynx_decision *row)
{
	cJSON *o = cJSON_CreateObject();

	if (!o)
		return NULL;
	for (uint32_t g = 0; g < p->layer.n_groups; g++) {
		const struct lynx_decision *d = &row[g];
		cJSON *action, *ref;

		if (d->action == LYNX_ACTION_RECOMPUTE_IN_WINDOW) {
			action = cJSON_CreateObject();
			ref = action ? window_json(p, &st->windows[d->window]) : NULL;
			if (ref)
				cJSON_AddItemToObject(action, "recompute_in_window", ref);
			else
				cJSON_Delete(action);
			action = ref ? action : NULL;
		} else {
			action = cJSON_CreateString(lynx_plan_action_name(d->action));
		}
		if (!action) {
			cJSON_Delete(o);
			return NULL;
		}
		cJSON_AddItemToObject(o, p->layer.groups[g].name, action);
	}
	return o;
}

static cJSON *stage_json(const struct lynx_plan *plan, const struct lynx_problem *p, uint32_t s)
{
	const struct lynx_plan_stage *ps = &plan->stages[s];
	cJSON *o = cJSON_CreateObject(), *decisions = NULL;
	bool ok = o != NULL;

	ok = ok && add_uint(o, "stage", s);
	ok = ok && add_uint(o, "layers", ps->layers);
	ok = ok && add_uint(o, "peak_bytes", ps->peak_bytes);
	if (ok && ps->uniform) {
		decisions = row_json(p, &p->stages[s], ps->rows[0]);
	} else if (ok) {
		decisions = cJSON_CreateArray();
		for (uint32_t l = 0; decisions && l < ps->layers; l++) {
			cJSON *row = row_json(p, &p->stages[s], ps->rows[l]);

			if (!row) {
				cJSON_Delete(decisions);
				decisions = NULL;
				break;
			}
			cJSON_AddItemToArray(decisions, row);
		}
	}
	if (!decisions) {
		cJSON_Delete(o);
		return NULL;
	}
	cJSON_AddItemToObject(o, "decisions", decisions);
	return o;
}

char *lynx_plan_to_json(const struct lynx_plan *plan, const struct lynx_problem *p)
{
	cJSON *root = cJSON_CreateObject(), *stages;
	bool ok = root != NULL;
	char *text = NULL;

	ok = ok && cJSON_AddStringToObject(root, "format", LYNX_PLAN_FORMAT);
	ok = ok && add_uint(root, "version", LYNX_PLAN_VERSION);
	ok = ok && cJSON_AddStringToObject(root, "planner", plan->planner);
	ok = ok && cJSON_AddBoolToObject(root, "fits", plan->fits);
	ok = ok && add_double(root, "step_time_s", plan->step_time_s);
	ok = ok && add_double(root, "search_time_s", plan->search_time_s);
	ok = ok && add_uint(root, "budget_bytes", plan->budget_bytes);
	if (ok && !isnan(plan->gap))
		ok = add_double(root, "gap", plan->gap);
	if (ok && plan->note[0])
		ok = cJSON_AddStringToObject(root, "note", plan->note) != NULL;
	if (ok && plan->run[0])
		ok = cJSON_AddStringToObject(root, "run", plan->run) != NULL;
	if (ok && p->granule_bytes)
		ok = add_uint(root, "granule_bytes", p->granule_bytes);
	stages = ok ? cJSON_AddArrayToObject(root, "stages") : NULL;
	ok = stages != NULL;
	for (uint32_t s = 0; ok && s < plan->n_stages; s++) {
		cJSON *st = stage_json(plan, p, s);

		ok = st != NULL;
		if (ok)
			cJSON_AddItemToArray(stages, st);
	}
	if (ok)
		text = cJSON_Print(root);
	cJSON_Delete(root);
	return text;
}

/* ---- Reader ---- */

/* Where the reader is in the document, for its messages: "stages[1].decisions[3].q_k". */
struct path {
	char buf[128];
};

static const char *at(struct path *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static const char *at(struct path *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p->buf, sizeof(p->buf), fmt, ap);
	va_end(ap);
	return p->buf;
}

static int get_item(const cJSON *obj, const char *key, const char *where, cJSON **out, char *why,
                    size_t len)
{
	*out = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (!*out)
		return lynx_policy_refuse(why, len, "%s%s%s: missing", where, *where ? "." : "",
		                          key);
	return 0;
}

/* A non-negative integer below 2^53 (exact as a JSON double). */
static int get_uint(const cJSON *obj, const char *key, const char *where, uint64_t *out, char *why,
                    size_t len)
{
	cJSON *it;
	int err = get_item(obj, key, where, &it, why, len);
	const char *dot = *where ? "." : "";

	if (err)
		return err;
	if (!cJSON_IsNumber(it))
		return lynx_policy_refuse(why, len, "%s%s%s: not a number", where, dot, key);
	if (it->valuedouble < 0 || it->valuedouble >= 9007199254740992.0 ||
	    it->valuedouble != floor(it->valuedouble))
		return lynx_policy_refuse(why, len, "%s%s%s: %.17g is not an integer in [0, 2^53)",
		                          where, dot, key, it->valuedouble);
	*out = (uint64_t)it->valuedouble;
	return 0;
}

static int get_seconds(const cJSON *obj, const char *key, double *out, char *why, size_t len)
{
	cJSON *it;
	int err = get_item(obj, key, "", &it, why, len);

	if (err)
		return err;
	if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0) || isinf(it->valuedouble))
		return lynx_policy_refuse(why, len, "%s: not a finite number of seconds >= 0", key);
	*out = it->valuedouble;
	return 0;
}

static int read_window(const cJSON *ref, const struct lynx_problem *p,
                       const struct lynx_problem_stage *st, const char *where, uint32_t *out,
                       char *why, size_t len)
{
	const cJSON *kind = cJSON_GetObjectItemCaseSensitive(ref, "kind");
	const cJSON *layer = cJSON_GetObjectItemCaseSensitive(ref, "layer");
	const cJSON *op = cJSON_GetObjectItemCaseSensitive(ref, "op");
	enum lynx_window_kind k;
	int32_t l = -1, o = -1;
	int w;

	if (!cJSON_IsObject(ref))
		return lynx_policy_refuse(why, len,
		                          "%s: a window must be an object {\"kind\": ...}", where);
	if (!cJSON_IsString(kind))
		return lynx_policy_refuse(why, len, "%s.kind: missing or not a string", where);
	k = lynx_problem_find_window_kind(kind->valuestring);
	if (k == LYNX_WINDOW_KIND_COUNT)
		return lynx_policy_refuse(why, len, "%s.kind: unknown window kind '%s'", where,
		                          kind->valuestring);
	if (layer) {
		if (!cJSON_IsNumber(layer) || layer->valuedouble < 0 ||
		    layer->valuedouble != floor(layer->valuedouble) ||
		    layer->valuedouble >= st->layers)
			return lynx_policy_refuse(why, len,
			                          "%s.layer: not a layer of this stage (0..%u)",
			                          where, st->layers - 1);
		l = (int32_t)layer->valuedouble;
	}
	if (op) {
		if (!cJSON_IsString(op) ||
		    (o = lynx_problem_find_op(&p->layer, op->valuestring)) < 0)
			return lynx_policy_refuse(why, len, "%s.op: not an op of the layer", where);
	}
	w = lynx_problem_find_window(st, k, l, o);
	if (w < 0 && l >= 0)
		return lynx_policy_refuse(why, len, "%s: stage %u has no %s window in layer %d%s%s",
		                          where, st->index, kind->valuestring, l,
		                          o >= 0 ? " at op " : "", o >= 0 ? op->valuestring : "");
	if (w < 0)
		return lynx_policy_refuse(why, len, "%s: stage %u has no %s window%s%s", where,
		                          st->index, kind->valuestring, o >= 0 ? " at op " : "",
		                          o >= 0 ? op->valuestring : "");
	*out = (uint32_t)w;
	return 0;
}

static int read_row(const cJSON *obj, const struct lynx_problem *p,
                    const struct lynx_problem_stage *st, const char *where,
                    struct lynx_decision *row, char *why, size_t len)
{
	uint32_t seen = 0;
	const cJSON *it;
	struct path sub;

	if (!cJSON_IsObject(obj))
		return lynx_policy_refuse(why, len, "%s: not an object of group decisions", where);
	cJSON_ArrayForEach(it, obj)
	{
		int g = lynx_problem_find_group(&p->layer, it->string);
		enum lynx_action a;

		at(&sub, "%s.%s", where, it->string);
		if (g < 0)
			return lynx_policy_refuse(why, len, "%s: no such group in the layer",
			                          sub.buf);
		if (seen & (1u << g))
			return lynx_policy_refuse(why, len, "%s: given twice", sub.buf);
		seen |= 1u << g;
		if (cJSON_IsString(it)) {
			a = lynx_plan_find_action(it->valuestring);
			if (a == LYNX_ACTION_COUNT || a == LYNX_ACTION_RECOMPUTE_IN_WINDOW)
				return lynx_policy_refuse(
				        why, len,
				        "%s: unknown action '%s' (keep, offload, "
				        "recompute_on_demand, or {\"recompute_in_window\": "
				        "WINDOW})",
				        sub.buf, it->valuestring);
			row[g] = (struct lynx_decision){.action = a};
		} else if (cJSON_IsObject(it) && cJSON_GetArraySize(it) == 1 &&
		           cJSON_GetObjectItemCaseSensitive(it, "recompute_in_window")) {
			int err;
			char ref_where[160];

			snprintf(ref_where, sizeof(ref_where), "%s.recompute_in_window", sub.buf);
			row[g].action = LYNX_ACTION_RECOMPUTE_IN_WINDOW;
			err = read_window(it->child, p, st, ref_where, &row[g].window, why, len);
			if (err)
				return err;
		} else {
			return lynx_policy_refuse(
			        why, len,
			        "%s: an action is a string or {\"recompute_in_window\": WINDOW}",
			        sub.buf);
		}
	}
	for (uint32_t g = 0; g < p->layer.n_groups; g++)
		if (!(seen & (1u << g)))
			return lynx_policy_refuse(why, len, "%s.%s: missing", where,
			                          p->layer.groups[g].name);
	return 0;
}

static int read_stage(const cJSON *obj, const struct lynx_problem *p, uint32_t s,
                      struct lynx_plan *plan, char *why, size_t len)
{
	const struct lynx_problem_stage *st = &p->stages[s];
	struct lynx_plan_stage *ps = &plan->stages[s];
	const cJSON *decisions;
	struct path where, sub;
	uint64_t index, layers;
	cJSON *it;
	int err;

	at(&where, "stages[%u]", s);
	if (!cJSON_IsObject(obj))
		return lynx_policy_refuse(why, len, "%s: not an object", where.buf);
	err = get_uint(obj, "stage", where.buf, &index, why, len);
	err = err ? err : get_uint(obj, "layers", where.buf, &layers, why, len);
	err = err ? err : get_uint(obj, "peak_bytes", where.buf, &ps->peak_bytes, why, len);
	err = err ? err : get_item(obj, "decisions", where.buf, &it, why, len);
	if (err)
		return err;
	if (index != s)
		return lynx_policy_refuse(why, len,
		                          "%s.stage: %llu, expected %u (stages are in order)",
		                          where.buf, (unsigned long long)index, s);
	if (layers != st->layers)
		return lynx_policy_refuse(
		        why, len, "%s.layers: %llu, but the problem's stage %u has %u layers",
		        where.buf, (unsigned long long)layers, s, st->layers);
	decisions = it;
	ps->layers = st->layers;
	ps->uniform = cJSON_IsObject(decisions);
	if (!ps->uniform) {
		if (!cJSON_IsArray(decisions))
			return lynx_policy_refuse(
			        why, len,
			        "%s.decisions: an object (all layers) or an array (one object "
			        "per layer)",
			        where.buf);
		if ((uint32_t)cJSON_GetArraySize(decisions) != st->layers)
			return lynx_policy_refuse(why, len, "%s.decisions: %d rows for %u layers",
			                          where.buf, cJSON_GetArraySize(decisions),
			                          st->layers);
	}
	free(ps->rows);
	ps->rows = calloc(ps->uniform ? 1 : st->layers, sizeof(*ps->rows));
	if (!ps->rows)
		return -ENOMEM;
	if (ps->uniform)
		return read_row(decisions, p, st, at(&sub, "%s.decisions", where.buf), ps->rows[0],
		                why, len);
	for (uint32_t l = 0; l < st->layers; l++) {
		err = read_row(cJSON_GetArrayItem(decisions, (int)l), p, st,
		               at(&sub, "%s.decisions[%u]", where.buf, l), ps->rows[l], why, len);
		if (err)
			return err;
	}
	return 0;
}

static int read_plan(const cJSON *root, const struct lynx_problem *p, struct lynx_plan *plan,
                     char *why, size_t len)
{
	cJSON *it, *stages;
	int err;

	if (!cJSON_IsObject(root))
		return lynx_policy_refuse(why, len, "the document is not a JSON object");
	it = cJSON_GetObjectItemCaseSensitive(root, "format");
	if (!cJSON_IsString(it) || strcmp(it->valuestring, LYNX_PLAN_FORMAT))
		return lynx_policy_refuse(why, len,
		                          "format: missing or not \"" LYNX_PLAN_FORMAT "\"");
	it = cJSON_GetObjectItemCaseSensitive(root, "version");
	if (!cJSON_IsNumber(it))
		return lynx_policy_refuse(why, len, "version: missing or not a number");
	if (it->valuedouble != LYNX_PLAN_VERSION)
		return lynx_policy_refuse(why, len,
		                          "version: %g is not supported (this reader knows %d)",
		                          it->valuedouble, LYNX_PLAN_VERSION);
	it = cJSON_GetObjectItemCaseSensitive(root, "planner");
	if (!cJSON_IsString(it) || !*it->valuestring ||
	    strlen(it->valuestring) >= sizeof(plan->planner))
		return lynx_policy_refuse(why, len,
		                          "planner: missing, empty, or longer than %zu characters",
		                          sizeof(plan->planner) - 1);
	snprintf(plan->planner, sizeof(plan->planner), "%s", it->valuestring);
	it = cJSON_GetObjectItemCaseSensitive(root, "fits");
	if (!cJSON_IsBool(it))
		return lynx_policy_refuse(why, len, "fits: missing or not true/false");
	plan->fits = cJSON_IsTrue(it);
	err = get_seconds(root, "step_time_s", &plan->step_time_s, why, len);
	err = err ? err : get_seconds(root, "search_time_s", &plan->search_time_s, why, len);
	err = err ? err : get_uint(root, "budget_bytes", "", &plan->budget_bytes, why, len);
	if (err)
		return err;
	it = cJSON_GetObjectItemCaseSensitive(root, "gap");
	if (it && (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < 0))
		return lynx_policy_refuse(why, len, "gap: not a finite number >= 0");
	plan->gap = it ? it->valuedouble : NAN;
	it = cJSON_GetObjectItemCaseSensitive(root, "note");
	if (it && !cJSON_IsString(it))
		return lynx_policy_refuse(why, len, "note: not a string");
	if (it)
		snprintf(plan->note, sizeof(plan->note), "%s", it->valuestring);
	it = cJSON_GetObjectItemCaseSensitive(root, "run");
	if (it && (!cJSON_IsString(it) || strlen(it->valuestring) >= sizeof(plan->run)))
		return lynx_policy_refuse(why, len,
		                          "run: not a string of fewer than %zu characters",
		                          sizeof(plan->run));
	if (it)
		snprintf(plan->run, sizeof(plan->run), "%s", it->valuestring);
	uint64_t granule = 0;
	if (cJSON_GetObjectItemCaseSensitive(root, "granule_bytes") &&
	    (err = get_uint(root, "granule_bytes", "", &granule, why, len)))
		return err;
	if (granule != p->granule_bytes)
		return lynx_policy_refuse(
		        why, len,
		        "granule_bytes: the plan was made with buffers below %llu "
		        "bytes as no groups, this problem with %llu",
		        (unsigned long long)granule, (unsigned long long)p->granule_bytes);
	stages = cJSON_GetObjectItemCaseSensitive(root, "stages");
	if (!cJSON_IsArray(stages))
		return lynx_policy_refuse(why, len, "stages: missing or not an array");
	if ((uint32_t)cJSON_GetArraySize(stages) != p->n_stages)
		return lynx_policy_refuse(why, len, "stages: %d stages, but the problem has %u",
		                          cJSON_GetArraySize(stages), p->n_stages);
	for (uint32_t s = 0; s < p->n_stages; s++) {
		err = read_stage(cJSON_GetArrayItem(stages, (int)s), p, s, plan, why, len);
		if (err)
			return err;
	}
	return lynx_plan_validate(plan, p, why, len);
}

int lynx_plan_from_json(const char *text, const struct lynx_problem *p, struct lynx_plan *plan,
                        char *why, size_t len)
{
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithOpts(text, &end, true);
	int err;

	if (!root) {
		*plan = (struct lynx_plan){0};
		return lynx_policy_refuse(why, len, "not valid JSON (at byte %td)",
		                          end ? end - text : 0);
	}
	err = lynx_plan_init(plan, p, "", true);
	if (!err)
		err = read_plan(root, p, plan, why, len);
	if (err)
		lynx_plan_free(plan);
	cJSON_Delete(root);
	return err;
}

uint64_t lynx_plan_json_granule(const char *text)
{
	cJSON *root = text ? cJSON_Parse(text) : NULL;
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "granule_bytes");
	uint64_t granule = 0;

	if (cJSON_IsNumber(it) && it->valuedouble >= 0 && it->valuedouble < 9007199254740992.0)
		granule = (uint64_t)it->valuedouble;
	cJSON_Delete(root);
	return granule;
}
