/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `lynx report DIR...`: reads each rank's profile (and timeline) from one directory or one per
 * node, groups the ranks into pipeline stages, prints the tables and writes report.svg by hand
 * (no plotting library) and report.html (report_html.c).
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "chrome_check.h"
#include "../profiler/profile.h" /* not tools/profile.h, which a plain include finds first */
#include "lynx.h"
#include "regular_file.h"
#include "report.h"
#include "report_model.h"
#include "report_summary.h"
#include "summary.h"
#include "../profiler/run.h" /* not tools/run.h, `lynx run` */
#include "whatif.h"

#define SUMMARY_MAX_BYTES (1 << 20) /* a summary is a few KiB */

void lynx_report_help(FILE *out)
{
	fprintf(out,
	        "DIR holds profile.<rank>.json files (`lynx profile EVENTS -o DIR/profile.R.json\n"
	        "--rank R --world W`), and trace.<rank>.json timelines when they were written\n"
	        "(`--trace DIR/trace.R.json`). Ranks with the same layers, micro-batches and\n"
	        "windows form a stage; a stage's layer times are its slowest rank's medians.\n"
	        "report.svg plots, per rank, device memory over one iteration and each stream's\n"
	        "busy share (from the timeline; device-timed work only), and the peak by class.\n"
	        "After a recompute run, each rank's summary.<rank>.json gives a row: the plan,\n"
	        "and peak and step in warm-up, planned and achieved. report.html holds these\n"
	        "tables and the plot on one page that fetches nothing.\n"
	        "\n"
	        "A profile names its run (the launch that wrote it); when DIR holds profiles of\n"
	        "several runs (each launch overwrites only its own ranks' files), the report\n"
	        "reads the newest and says so on stderr. --run ID reads another: an id as that\n"
	        "line prints it (none@<start> for a run without an id, unknown@world<W> for\n"
	        "profiles that name no run). docs/formats.md says how runs are told apart.\n"
	        "\n"
	        "Several DIRs (one per node, when each wrote its own: LYNX_OUT=out/%%h) are read\n"
	        "as one directory: the run is chosen among all their profiles, and each rank's\n"
	        "trace and summary come from the DIR its profile is in. A rank of the run read\n"
	        "with a profile in two DIRs is refused (both named); a DIR without profiles (the\n"
	        "launcher's under LYNX_OUT=out/proc-%%p) is left out, and said; report.svg and\n"
	        "report.html go in the DIR of the run's lowest rank.\n");
}

/* ---- Formatting ---------------------------------------------------------------------------- */

const char *fmt_bytes(uint64_t b, char *buf, size_t len)
{
	if (b >= (1ull << 30))
		snprintf(buf, len, "%.2f GiB", (double)b / (1ull << 30));
	else if (b >= (1ull << 20))
		snprintf(buf, len, "%.2f MiB", (double)b / (1ull << 20));
	else if (b >= 1024)
		snprintf(buf, len, "%.2f KiB", (double)b / 1024);
	else
		snprintf(buf, len, "%llu B", (unsigned long long)b);
	return buf;
}

static const char *fmt_ms(uint64_t ns, char *buf, size_t len)
{
	snprintf(buf, len, "%.3f ms", (double)ns / 1e6);
	return buf;
}

const char *fmt_time(const struct lynx_profile_time *t, char *buf, size_t len)
{
	if (t->source != LYNX_PROFILE_SOURCE_UNKNOWN)
		return fmt_ms(t->ns, buf, len);
	snprintf(buf, len, "unknown");
	return buf;
}

/* ---- The ranks ----------------------------------------------------------------------------- */

/* By rank, then by the order of the DIRs, so that qsort's order is the same every time. */
static int by_rank(const void *a, const void *b)
{
	const struct rank *x = a, *y = b;

	if (x->rank != y->rank)
		return (x->rank > y->rank) - (x->rank < y->rank);
	return (x->dir > y->dir) - (x->dir < y->dir);
}

/* ---- Timelines ----------------------------------------------------------------------------- */

static double num(const cJSON *obj, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *str(const cJSON *obj, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

	return cJSON_IsString(v) ? v->valuestring : "";
}

static int by_ts(const void *a, const void *b)
{
	const struct mem_point *x = a, *y = b;

	return (x->ts > y->ts) - (x->ts < y->ts);
}

struct span {
	double a, b;
};

static int by_start(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	return (x->a > y->a) - (x->a < y->a);
}

/* The length of the union of spans (sorts them). */
static double union_length(struct span *s, size_t n)
{
	double total = 0, a = 0, b = 0;

	if (!n)
		return 0;
	qsort(s, n, sizeof(*s), by_start);
	for (size_t i = 0; i < n; i++) {
		if (i && s[i].a <= b) {
			b = s[i].b > b ? s[i].b : b;
			continue;
		}
		total += b - a;
		a = s[i].a;
		b = s[i].b;
	}
	return total + (b - a);
}

/* The window the plot shows: the last iteration slice, or the whole trace. */
static void find_window(const cJSON *events, struct timeline *tl)
{
	const cJSON *ev;
	bool any = false;

	cJSON_ArrayForEach(ev, events)
	{
		if (!strcmp(str(ev, "ph"), "X") && !strcmp(str(ev, "cat"), "iteration")) {
			tl->start_us = num(ev, "ts");
			tl->end_us = tl->start_us + num(ev, "dur");
			snprintf(tl->label, sizeof(tl->label), "%s", str(ev, "name"));
			any = true;
		}
	}
	if (any)
		return;
	snprintf(tl->label, sizeof(tl->label), "the whole trace (no iteration found)");
	tl->start_us = INFINITY;
	tl->end_us = 0;
	cJSON_ArrayForEach(ev, events)
	{
		if (!strcmp(str(ev, "ph"), "M"))
			continue;
		double ts = num(ev, "ts"), end = ts + num(ev, "dur");
		tl->start_us = ts < tl->start_us ? ts : tl->start_us;
		tl->end_us = end > tl->end_us ? end : tl->end_us;
	}
	if (tl->start_us > tl->end_us)
		tl->start_us = tl->end_us = 0;
}

/* The "device memory" counter inside the window, with its value where the window starts. */
static int memory_series(const cJSON *events, struct timeline *tl)
{
	const cJSON *ev;
	size_t n = 0, cap = 0;
	struct mem_point *all = NULL;

	cJSON_ArrayForEach(ev, events)
	{
		if (strcmp(str(ev, "ph"), "C") || strcmp(str(ev, "name"), "device memory"))
			continue;
		if (n == cap) {
			size_t c = cap ? 2 * cap : 256;
			struct mem_point *grown = realloc(all, c * sizeof(*grown));
			if (!grown) {
				free(all);
				return -ENOMEM;
			}
			all = grown;
			cap = c;
		}
		all[n++] = (struct mem_point){
		        num(ev, "ts"), num(cJSON_GetObjectItemCaseSensitive(ev, "args"), "bytes")};
	}
	if (!n)
		return 0;
	qsort(all, n, sizeof(*all), by_ts);
	tl->mem = malloc((n + 1) * sizeof(*tl->mem));
	if (!tl->mem) {
		free(all);
		return -ENOMEM;
	}
	double at_start = 0;
	for (size_t i = 0; i < n && all[i].ts <= tl->start_us; i++)
		at_start = all[i].bytes;
	tl->mem[tl->mem_count++] = (struct mem_point){tl->start_us, at_start};
	for (size_t i = 0; i < n; i++)
		if (all[i].ts > tl->start_us && all[i].ts <= tl->end_us)
			tl->mem[tl->mem_count++] = all[i];
	free(all);
	return 0;
}

/* Each stream track's items and device-busy time inside the window. */
static int stream_use(const cJSON *events, struct timeline *tl)
{
	const cJSON *ev;
	double *tids = NULL;
	int err = 0;

	cJSON_ArrayForEach(ev, events)
	{
		const cJSON *args = cJSON_GetObjectItemCaseSensitive(ev, "args");
		if (strcmp(str(ev, "ph"), "M") || strcmp(str(ev, "name"), "thread_name") ||
		    strncmp(str(args, "name"), "stream ", 7))
			continue;
		struct stream_use *grown =
		        realloc(tl->streams, (tl->stream_count + 1) * sizeof(*grown));
		double *grown_tids = realloc(tids, (tl->stream_count + 1) * sizeof(*grown_tids));
		if (grown)
			tl->streams = grown;
		if (grown_tids)
			tids = grown_tids;
		if (!grown || !grown_tids) {
			free(tids);
			return -ENOMEM;
		}
		tl->streams[tl->stream_count] = (struct stream_use){.items = 0};
		snprintf(tl->streams[tl->stream_count].name, sizeof(tl->streams[0].name), "%s",
		         str(args, "name"));
		tids[tl->stream_count++] = num(ev, "tid");
	}
	for (size_t s = 0; s < tl->stream_count && !err; s++) {
		struct span *spans = NULL;
		size_t n = 0;
		cJSON_ArrayForEach(ev, events)
		{
			const char *ph = str(ev, "ph");
			double ts = num(ev, "ts"), end = ts + num(ev, "dur");
			if (num(ev, "tid") != tids[s] || (strcmp(ph, "X") && strcmp(ph, "i")) ||
			    end < tl->start_us || ts > tl->end_us)
				continue;
			tl->streams[s].items++;
			if (strcmp(ph, "X") ||
			    strcmp(str(cJSON_GetObjectItemCaseSensitive(ev, "args"), "clock"),
			           "device"))
				continue;
			tl->streams[s].timed = true;
			struct span *grown = realloc(spans, (n + 1) * sizeof(*grown));
			if (!grown) {
				err = -ENOMEM;
				break;
			}
			spans = grown;
			spans[n++] = (struct span){ts > tl->start_us ? ts : tl->start_us,
			                           end < tl->end_us ? end : tl->end_us};
		}
		tl->streams[s].busy_us = union_length(spans, n);
		free(spans);
	}
	free(tids);
	return err;
}

/* Reads DIR/trace.<rank>.json when there: 0 (have_trace says whether it was), -EINVAL with
 * the reason printed, -ENOMEM. */
static int read_timeline(const char *dir, struct rank *r)
{
	char path[4200], why[512];
	size_t len;
	char *text;
	cJSON *root;
	int err;

	snprintf(path, sizeof(path), "%s/trace.%d.json", dir, r->rank);
	err = lynx_regular_file_read(path, LYNX_PROFILE_MAX_FILE_BYTES, &text, &len, why,
	                             sizeof(why));
	if (err == -ENOENT)
		return 0;
	if (err) {
		fprintf(stderr, "lynx report: %s: %s\n", path, why);
		return err == -ENOMEM ? err : -EINVAL;
	}
	err = lynx_prof_chrome_check(text, len, NULL, why, sizeof(why));
	if (err) {
		free(text);
		if (err == -EINVAL)
			fprintf(stderr, "lynx report: %s: %s\n", path, why);
		return err;
	}
	root = cJSON_ParseWithLength(text, len);
	free(text);
	if (!root)
		return -ENOMEM; /* it parsed a moment ago: only memory can fail */
	const cJSON *events =
	        cJSON_IsArray(root) ? root : cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
	find_window(events, &r->tl);
	err = memory_series(events, &r->tl);
	if (!err)
		err = stream_use(events, &r->tl);
	cJSON_Delete(root);
	r->have_trace = !err;
	return err;
}

/* ---- Stages -------------------------------------------------------------------------------- */

static void window_counts(const struct lynx_profile *p, size_t n[LYNX_PROFILE_WINDOW_KIND_COUNT])
{
	memset(n, 0, sizeof(size_t) * LYNX_PROFILE_WINDOW_KIND_COUNT);
	for (size_t i = 0; i < p->window_count; i++)
		n[p->windows[i].kind]++;
}

/* Whether a and b (as many layers) rerun the forward of the same layers. */
static bool same_reruns(const struct lynx_profile *a, const struct lynx_profile *b)
{
	for (size_t l = 0; l < a->layer_count; l++)
		if (a->layers[l].reruns_forward != b->layers[l].reruns_forward)
			return false;
	return true;
}

/* Ranks of one stage run the same layers, micro-batches and windows. */
static bool same_stage(const struct lynx_profile *a, const struct lynx_profile *b)
{
	size_t na[LYNX_PROFILE_WINDOW_KIND_COUNT], nb[LYNX_PROFILE_WINDOW_KIND_COUNT];

	if (a->layer_count != b->layer_count || a->microbatches != b->microbatches ||
	    a->warmup_forwards != b->warmup_forwards || !same_reruns(a, b) ||
	    lynx_profile_pipeline_known(a) != lynx_profile_pipeline_known(b) ||
	    (lynx_profile_pipeline_known(a) && a->pipeline_stage != b->pipeline_stage))
		return false;
	window_counts(a, na);
	window_counts(b, nb);
	return !memcmp(na, nb, sizeof(na));
}

/* Position of a stage in the pipeline: as the profile names it; else from its transfers
 * (the first stage sends activations and receives none, the last receives and sends none);
 * a middle stage's place then comes from its 1F1B warm-up forwards (p - s - 1). */
static int stage_key(const struct lynx_profile *p)
{
	size_t n[LYNX_PROFILE_WINDOW_KIND_COUNT];

	if (lynx_profile_pipeline_known(p))
		return p->pipeline_stage;
	window_counts(p, n);
	if (n[LYNX_PROFILE_WINDOW_PP_SEND_FWD] && !n[LYNX_PROFILE_WINDOW_PP_RECV_FWD])
		return 0;
	if (!n[LYNX_PROFILE_WINDOW_PP_SEND_FWD] && n[LYNX_PROFILE_WINDOW_PP_RECV_FWD])
		return 1 << 30;
	return (1 << 20) - (int)(p->warmup_forwards < (1u << 19) ? p->warmup_forwards : 0);
}

static bool pipelined(const struct lynx_profile *p)
{
	size_t n[LYNX_PROFILE_WINDOW_KIND_COUNT];

	window_counts(p, n);
	return n[LYNX_PROFILE_WINDOW_PP_SEND_FWD] || n[LYNX_PROFILE_WINDOW_PP_RECV_FWD];
}

static int by_pipeline(const void *a, const void *b)
{
	const struct stage *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return (x->first > y->first) - (x->first < y->first);
}

static int group_stages(struct report *rep)
{
	bool any_pp = false;

	rep->stages = calloc(rep->count, sizeof(*rep->stages));
	if (!rep->stages)
		return -ENOMEM;
	for (size_t i = 0; i < rep->count; i++) {
		size_t s;
		for (s = 0; s < rep->stage_count; s++)
			if (same_stage(&rep->ranks[rep->stages[s].first].p, &rep->ranks[i].p))
				break;
		if (s == rep->stage_count)
			rep->stages[rep->stage_count++] =
			        (struct stage){.first = i, .key = stage_key(&rep->ranks[i].p)};
		any_pp |= pipelined(&rep->ranks[i].p);
	}
	qsort(rep->stages, rep->stage_count, sizeof(*rep->stages), by_pipeline);
	for (size_t s = 0; s < rep->stage_count; s++) {
		rep->stages[s].number = any_pp ? (int)s : -1;
		rep->stages[s].pipelined = any_pp;
		for (size_t i = 0; i < rep->count; i++)
			if (same_stage(&rep->ranks[rep->stages[s].first].p, &rep->ranks[i].p))
				rep->ranks[i].stage = s;
	}
	return 0;
}

void stage_name(const struct report *rep, size_t s, char *buf, size_t len)
{
	if (rep->stages[s].pipelined)
		snprintf(buf, len, "stage %d", rep->stages[s].number);
	else if (rep->stage_count == 1)
		snprintf(buf, len, "all ranks");
	else
		snprintf(buf, len, "group %zu", s);
}

/* ---- Tables -------------------------------------------------------------------------------- */

static uint64_t class_bytes(const struct lynx_profile *p, enum lynx_profile_memory_class c)
{
	return p->memory.at_peak[c];
}

static void print_ranks(FILE *out, const struct report *rep)
{
	char a[40], b[40], c[40], st[32];

	fprintf(out, "\n%-5s  %-9s  %6s  %4s  %-14s  %-11s  %-13s  %7s  %s\n", "rank", "stage",
	        "layers", "mb", "iteration", "peak", "saved at peak", "windows", "timeline");
	for (size_t i = 0; i < rep->count; i++) {
		const struct rank *r = &rep->ranks[i];
		stage_name(rep, r->stage, st, sizeof(st));
		fprintf(out, "%-5d  %-9s  %6zu  %4u  %-14s  %-11s  %-13s  %7zu  %s\n", r->rank, st,
		        r->p.layer_count, r->p.microbatches,
		        fmt_time(&r->p.iteration.time, a, sizeof(a)),
		        fmt_bytes(r->p.memory.peak_bytes, b, sizeof(b)),
		        fmt_bytes(class_bytes(&r->p, LYNX_PROFILE_MEMORY_SAVED), c, sizeof(c)),
		        r->p.window_count, r->have_trace ? "yes" : "missing");
	}
}

/* The stage's slowest rank's time for a layer (its median), with that time's source. */
static struct lynx_profile_time slowest(const struct report *rep, size_t s, size_t layer,
                                        bool forward)
{
	struct lynx_profile_time best = {.source = LYNX_PROFILE_SOURCE_UNKNOWN};

	for (size_t i = 0; i < rep->count; i++) {
		const struct rank *r = &rep->ranks[i];
		if (r->stage != s || layer >= r->p.layer_count)
			continue;
		const struct lynx_profile_time *t =
		        forward ? &r->p.layers[layer].forward : &r->p.layers[layer].backward;
		if (t->source != LYNX_PROFILE_SOURCE_UNKNOWN &&
		    (best.source == LYNX_PROFILE_SOURCE_UNKNOWN || t->ns > best.ns))
			best = *t;
	}
	return best;
}

static void print_layers(FILE *out, const struct report *rep, size_t s)
{
	const struct lynx_profile *p = &rep->ranks[rep->stages[s].first].p;
	char a[40], b[40], c[40];
	uint64_t per_mb = 0;

	fprintf(out, "  %-5s  %-12s  %-12s  %-12s  %s\n", "layer", "forward", "backward", "saved",
	        "time source");
	for (size_t k = 0; k < p->layer_count; k++) {
		struct lynx_profile_time f = slowest(rep, s, k, true),
		                         bw = slowest(rep, s, k, false);
		uint64_t saved = 0;
		for (size_t i = 0; i < rep->count; i++)
			if (rep->ranks[i].stage == s && k < rep->ranks[i].p.layer_count &&
			    rep->ranks[i].p.layers[k].saved_bytes > saved)
				saved = rep->ranks[i].p.layers[k].saved_bytes;
		per_mb += saved;
		fprintf(out, "  %-5zu  %-12s  %-12s  %-12s  %s%s%s\n", k,
		        fmt_time(&f, a, sizeof(a)), fmt_time(&bw, b, sizeof(b)),
		        fmt_bytes(saved, c, sizeof(c)), lynx_profile_source_name(f.source),
		        f.source != bw.source ? "/" : "",
		        f.source != bw.source ? lynx_profile_source_name(bw.source) : "");
	}
	fprintf(out,
	        "  activation memory: %s saved per micro-batch (sum over layers; the largest "
	        "rank's)\n",
	        fmt_bytes(per_mb, a, sizeof(a)));
}

static void print_memory(FILE *out, const struct report *rep, size_t s)
{
	char a[40], b[40];

	for (size_t i = 0; i < rep->count; i++) {
		const struct rank *r = &rep->ranks[i];
		if (r->stage != s)
			continue;
		fprintf(out,
		        "  rank %d peak %s (%s, %" PRIu64 " allocations), at the peak:", r->rank,
		        fmt_bytes(r->p.memory.peak_bytes, a, sizeof(a)),
		        lynx_profile_source_name(r->p.memory.source), r->p.memory.buffers);
		for (int c = 0; c < LYNX_PROFILE_MEMORY_CLASS_COUNT; c++) {
			uint64_t bytes = r->p.memory.at_peak[c];
			double share =
			        r->p.memory.peak_bytes
			                ? 100.0 * (double)bytes / (double)r->p.memory.peak_bytes
			                : 0;
			fprintf(out, "%s %s %s (%.1f%%)", c ? "," : "",
			        lynx_profile_memory_class_name(c), fmt_bytes(bytes, b, sizeof(b)),
			        share);
		}
		fprintf(out, "\n");
	}
}

struct kind_total {
	size_t count;
	uint64_t bytes, duration_ns, idle_ns;
	enum lynx_profile_source duration_source, idle_source;
};

/* One rank's windows of one kind. A sum is known only when every window's time is. */
static struct kind_total kind_total(const struct lynx_profile *p, int kind)
{
	struct kind_total t = {.duration_source = LYNX_PROFILE_SOURCE_COUNT,
	                       .idle_source = LYNX_PROFILE_SOURCE_COUNT};

	for (size_t i = 0; i < p->window_count; i++) {
		const struct lynx_profile_window *w = &p->windows[i];
		if ((int)w->kind != kind)
			continue;
		t.count++;
		t.bytes += w->bytes;
		t.duration_ns += w->duration.ns;
		t.idle_ns += w->idle.ns;
		if (t.duration_source == LYNX_PROFILE_SOURCE_COUNT ||
		    w->duration.source == LYNX_PROFILE_SOURCE_UNKNOWN)
			t.duration_source = w->duration.source;
		if (t.idle_source == LYNX_PROFILE_SOURCE_COUNT ||
		    w->idle.source == LYNX_PROFILE_SOURCE_UNKNOWN)
			t.idle_source = w->idle.source;
	}
	return t;
}

static void print_windows(FILE *out, const struct report *rep, size_t s)
{
	const struct lynx_profile *p0 = &rep->ranks[rep->stages[s].first].p;
	char a[40], b[40], c[40], share[24];

	if (!p0->window_count) {
		fprintf(out, "  windows: none (no NCCL call in the iteration)\n");
		return;
	}
	fprintf(out, "  windows per iteration (the stage's slowest rank for times):\n");
	fprintf(out, "  %-12s  %5s  %-12s  %-16s  %-16s  %s\n", "kind", "count", "bytes",
	        "duration", "idle", "share of iteration");
	for (int k = 0; k < LYNX_PROFILE_WINDOW_KIND_COUNT; k++) {
		struct kind_total worst = kind_total(p0, k);
		const struct lynx_profile *wp = p0;
		if (!worst.count)
			continue;
		for (size_t i = 0; i < rep->count; i++) {
			if (rep->ranks[i].stage != s)
				continue;
			struct kind_total t = kind_total(&rep->ranks[i].p, k);
			if (t.duration_source != LYNX_PROFILE_SOURCE_UNKNOWN &&
			    t.duration_ns > worst.duration_ns) {
				worst = t;
				wp = &rep->ranks[i].p;
			}
		}
		bool dur_known = worst.duration_source != LYNX_PROFILE_SOURCE_UNKNOWN;
		bool idle_known = worst.idle_source != LYNX_PROFILE_SOURCE_UNKNOWN;
		if (dur_known)
			snprintf(a, sizeof(a), "%.3f ms %s", (double)worst.duration_ns / 1e6,
			         lynx_profile_source_name(worst.duration_source));
		else
			snprintf(a, sizeof(a), "unknown");
		if (idle_known)
			snprintf(b, sizeof(b), "%.3f ms %s", (double)worst.idle_ns / 1e6,
			         lynx_profile_source_name(worst.idle_source));
		else
			snprintf(b, sizeof(b), "unknown");
		if (dur_known && wp->iteration.time.source != LYNX_PROFILE_SOURCE_UNKNOWN &&
		    wp->iteration.time.ns)
			snprintf(share, sizeof(share), "%.1f%%",
			         100.0 * (double)worst.duration_ns / (double)wp->iteration.time.ns);
		else
			snprintf(share, sizeof(share), "-");
		fprintf(out, "  %-12s  %5zu  %-12s  %-16s  %-16s  %s\n",
		        lynx_profile_window_kind_name(k), worst.count,
		        fmt_bytes(worst.bytes, c, sizeof(c)), a, b, share);
	}
}

static void print_tables(FILE *out, const struct report *rep)
{
	char st[32], a[40];
	int world = -1;

	for (size_t i = 0; i < rep->count; i++)
		if (rep->ranks[i].p.world > world)
			world = rep->ranks[i].p.world;
	/* The run, when the profiles name one: which launch these tables are of. */
	fprintf(out, "%s", rep->where);
	if (rep->run.known && rep->run.id[0])
		fprintf(out, ", run %s (%s, started %s)", rep->run.id,
		        lynx_profile_run_source_name(rep->run.source),
		        lynx_run_local_time((int64_t)rep->run.started, a, sizeof(a)));
	else if (rep->run.known)
		fprintf(out, ", a run without an id (started %s)",
		        lynx_run_local_time((int64_t)rep->run.started, a, sizeof(a)));
	fprintf(out, ": %zu rank%s", rep->count, rep->count == 1 ? "" : "s");
	if (world >= 0)
		fprintf(out, " of %d", world);
	fprintf(out, ", %zu stage%s\n", rep->stage_count, rep->stage_count == 1 ? "" : "s");
	if (world > 0 && (size_t)world > rep->count) {
		fprintf(out, "missing ranks:");
		for (int r = 0, i = 0; r < world; r++) {
			while ((size_t)i < rep->count && rep->ranks[i].rank < r)
				i++;
			if ((size_t)i == rep->count || rep->ranks[i].rank != r)
				fprintf(out, " %d", r);
		}
		fprintf(out, "\n");
	}
	print_ranks(out, rep);
	for (size_t s = 0; s < rep->stage_count; s++) {
		const struct lynx_profile *p = &rep->ranks[rep->stages[s].first].p;
		char rerun[LYNX_PROFILE_RERUN_NOTE_MAX];
		stage_name(rep, s, st, sizeof(st));
		size_t members = 0;
		for (size_t i = 0; i < rep->count; i++)
			members += rep->ranks[i].stage == s;
		fprintf(out, "\n%s (rank%s", st, members == 1 ? "" : "s");
		for (size_t i = 0, n = 0; i < rep->count; i++)
			if (rep->ranks[i].stage == s)
				fprintf(out, "%s%d", n++ ? ", " : " ", rep->ranks[i].rank);
		fprintf(out, "): %zu layers, %u micro-batches, iteration %s%s\n", p->layer_count,
		        p->microbatches, fmt_time(&p->iteration.time, a, sizeof(a)),
		        lynx_profile_rerun_note(p, rerun, sizeof(rerun)));
		print_layers(out, rep, s);
		print_memory(out, rep, s);
		print_windows(out, rep, s);
	}
}

/* ---- The command --------------------------------------------------------------------------- */

static void report_free(struct report *rep)
{
	for (size_t i = 0; i < rep->count; i++) {
		lynx_profile_free(&rep->ranks[i].p);
		free(rep->ranks[i].summary);
		free(rep->ranks[i].tl.mem);
		free(rep->ranks[i].tl.streams);
	}
	free(rep->ranks);
	free(rep->stages);
	free(rep->where);
}

/* A file's modification time in unix seconds, or 0. */
static int64_t modified(const char *path)
{
	struct stat st;

	return stat(path, &st) ? 0 : (int64_t)st.st_mtime;
}

/*
 * Keeps the ranks of one run (--run's, or the newest) and says on stderr which when there were
 * several. Returns 0, or an exit status (messages printed).
 */
static int take_one_run(struct report *rep, const int64_t *mtimes)
{
	const struct lynx_profile **profiles = calloc(rep->count, sizeof(*profiles));
	const struct lynx_run_group *chosen;
	struct lynx_runs runs = {0};
	char about[4400], names[1024];
	size_t kept = 0;
	int status = LYNX_EXIT_OK;

	for (size_t i = 0; profiles && i < rep->count; i++)
		profiles[i] = &rep->ranks[i].p;
	if (!profiles || lynx_runs_group(profiles, mtimes, rep->count, &runs)) {
		fprintf(stderr, "lynx report: out of memory\n");
		free(profiles);
		return LYNX_EXIT_FAIL;
	}
	free(profiles);
	chosen = rep->run_asked ? lynx_runs_find(&runs, rep->run_asked) : &runs.groups[0];
	if (!chosen) {
		lynx_runs_names(&runs, names, sizeof(names));
		status = lynx_usage_error("report", "--run %s: no such run in %s (%s: %s)",
		                          rep->run_asked, rep->where,
		                          rep->dir_count == 1 ? "it holds" : "they hold", names);
		goto out;
	}
	snprintf(about, sizeof(about), "lynx report: %s %s profiles of", rep->where,
	         rep->dir_count == 1 ? "holds" : "hold");
	lynx_runs_print_choice(stderr, about, &runs, chosen, rep->run_asked != NULL);
	rep->run = chosen->run;
	/* Members are ascending indices: the ranks stay sorted. */
	for (size_t i = 0, m = 0; i < rep->count; i++) {
		if (m < chosen->count && chosen->members[m] == i) {
			rep->ranks[kept++] = rep->ranks[i];
			m++;
		} else {
			lynx_profile_free(&rep->ranks[i].p);
		}
	}
	rep->count = kept;
out:
	lynx_runs_free(&runs);
	return status;
}

/*
 * Appends every profile.<rank>.json in rep->dirs[k] to rep->ranks. Returns 0, or an exit status
 * (messages printed; the profiles read so far stay in rep, for report_free).
 */
static int read_dir(struct report *rep, size_t k)
{
	const char *dir = rep->dirs[k];
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[4200], why[512];
	size_t before = rep->count;

	if (!d) {
		fprintf(stderr, "lynx report: %s: %s\n", dir, strerror(errno));
		return LYNX_EXIT_USAGE;
	}
	while ((e = readdir(d))) {
		int rank = lynx_profile_file_rank(e->d_name);
		if (rank < 0)
			continue;
		struct rank *grown = realloc(rep->ranks, (rep->count + 1) * sizeof(*grown));
		if (!grown) {
			closedir(d);
			fprintf(stderr, "lynx report: out of memory\n");
			return LYNX_EXIT_FAIL;
		}
		rep->ranks = grown;
		rep->ranks[rep->count] = (struct rank){.rank = rank, .dir = k};
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		int err = lynx_profile_read(path, &rep->ranks[rep->count].p, why, sizeof(why));
		if (err) {
			closedir(d);
			fprintf(stderr, "lynx report: %s: %s\n", path,
			        why[0] ? why : strerror(-err));
			return LYNX_EXIT_USAGE;
		}
		rep->count++;
		const struct lynx_profile *p = &rep->ranks[rep->count - 1].p;
		if (p->rank >= 0 && p->rank != rank) {
			closedir(d);
			fprintf(stderr, "lynx report: %s: holds rank %d, not %d\n", path, p->rank,
			        rank);
			return LYNX_EXIT_USAGE;
		}
	}
	closedir(d);
	if (rep->count == before && rep->dir_count > 1) {
		/* LYNX_OUT=out/proc-%p gives the launcher (tinytrain's parent, torchrun's agent)
		 * a directory of its own too, with no profile: out/proc-* names it. */
		fprintf(stderr, "lynx report: %s: no profile.<rank>.json here; left out\n", dir);
	} else if (rep->count == before) {
		fprintf(stderr,
		        "lynx report: %s: no profile.<rank>.json here (profile mode writes them: "
		        "`lynx run --mode profile --out %s -- COMMAND`; or, from a LYNX_EVENTS "
		        "dump, `lynx profile EVENTS -o %s/profile.R.json --rank R`)\n",
		        dir, dir, dir);
		return LYNX_EXIT_USAGE;
	}
	return 0;
}

/* The same directory named twice (as itself, through a link, or as "d" and "d/"): its every
 * rank would look like two. Returns 0, or an exit status (message printed). O(dirs^2). */
static int distinct_dirs(const struct report *rep)
{
	struct stat a, b;

	for (size_t i = 1; i < rep->dir_count; i++) {
		if (stat(rep->dirs[i], &a))
			continue; /* read_dir names it */
		for (size_t j = 0; j < i; j++)
			if (!stat(rep->dirs[j], &b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
				return lynx_usage_error("report", "'%s' and '%s' are one directory",
				                        rep->dirs[j], rep->dirs[i]);
	}
	return 0;
}

/*
 * A rank of the run read with a profile in two DIRs: which one is meant cannot be known, so
 * neither is guessed. rep->ranks is sorted by rank. Returns 0, or an exit status (message
 * printed).
 */
static int one_profile_per_rank(const struct report *rep)
{
	for (size_t i = 1; i < rep->count; i++) {
		const struct rank *a = &rep->ranks[i - 1], *b = &rep->ranks[i];
		if (a->rank != b->rank)
			continue;
		fprintf(stderr,
		        "lynx report: rank %d of the run read is in %s/profile.%d.json and in "
		        "%s/profile.%d.json: give the report one of them\n",
		        a->rank, rep->dirs[a->dir], a->rank, rep->dirs[b->dir], b->rank);
		return LYNX_EXIT_USAGE;
	}
	return 0;
}

/* "DIR" or "DIR1 + DIR2 + ...", or NULL when out of memory. */
static char *join_dirs(const char *const *dirs, size_t n)
{
	size_t len = 1;
	char *out;

	for (size_t k = 0; k < n; k++)
		len += strlen(dirs[k]) + 3;
	out = malloc(len);
	if (!out)
		return NULL;
	out[0] = '\0';
	for (size_t k = 0, at = 0; k < n; k++)
		at += (size_t)snprintf(out + at, len - at, "%s%s", k ? " + " : "", dirs[k]);
	return out;
}

/*
 * Reads every profile.<rank>.json in every DIR, as if they were one directory, and keeps one
 * run's. Returns 0, or an exit status (messages printed).
 */
static int read_profiles(struct report *rep)
{
	char path[4200];
	int64_t *mtimes;
	int status;

	if ((status = distinct_dirs(rep)))
		return status;
	size_t named = rep->dir_count;
	for (size_t k = 0; k < rep->dir_count;) {
		size_t before = rep->count;
		if ((status = read_dir(rep, k)))
			return status;
		if (rep->count > before) {
			k++;
			continue;
		}
		/* Left out (read_dir said so): not named in the header either. */
		memmove(&rep->dirs[k], &rep->dirs[k + 1],
		        (rep->dir_count - k - 1) * sizeof(*rep->dirs));
		rep->dir_count--;
	}
	if (!rep->count)
		return lynx_usage_error("report",
		                        "none of the %zu directories holds a "
		                        "profile.<rank>.json",
		                        named);
	if (rep->dir_count < named) {
		free(rep->where);
		if (!(rep->where = join_dirs(rep->dirs, rep->dir_count))) {
			fprintf(stderr, "lynx report: out of memory\n");
			return LYNX_EXIT_FAIL;
		}
	}
	qsort(rep->ranks, rep->count, sizeof(*rep->ranks), by_rank);
	mtimes = calloc(rep->count, sizeof(*mtimes));
	if (!mtimes) {
		fprintf(stderr, "lynx report: out of memory\n");
		return LYNX_EXIT_FAIL;
	}
	for (size_t i = 0; i < rep->count; i++) {
		snprintf(path, sizeof(path), "%s/profile.%d.json", rep->dirs[rep->ranks[i].dir],
		         rep->ranks[i].rank);
		mtimes[i] = modified(path);
	}
	status = take_one_run(rep, mtimes);
	free(mtimes);
	return status ? status : one_profile_per_rank(rep);
}

/* A change against warm-up's measurement, "-21.9%". */
static const char *change(double now, double before, char *buf, size_t len)
{
	if (before > 0)
		snprintf(buf, len, "%+.1f%%", 100.0 * (now / before - 1.0));
	else
		snprintf(buf, len, "-");
	return buf;
}

/*
 * Reads rank r's summary.<rank>.json (written at exit by ranks whose executor was armed),
 * if there is one, into r->summary: a file that cannot be read is named on stderr and left
 * out. Returns 0 or -ENOMEM.
 */
static int read_summary(const struct report *rep, struct rank *r)
{
	char path[4200], why[512];
	char *text;
	size_t len;

	snprintf(path, sizeof(path), "%s/summary.%d.json", rep->dirs[r->dir], r->rank);
	if (access(path, F_OK))
		return 0;
	if (!(r->summary = malloc(sizeof(*r->summary))))
		return -ENOMEM;
	int err = lynx_regular_file_read(path, SUMMARY_MAX_BYTES, &text, &len, why, sizeof(why));
	if (!err) {
		err = lynx_summary_parse(text, len, r->summary, why, sizeof(why));
		free(text);
	}
	/* A summary left by another launch into a reused directory is not this run's. */
	if (!err && r->summary->run_id[0] && rep->run.known && rep->run.id[0] &&
	    strcmp(r->summary->run_id, rep->run.id)) {
		snprintf(why, sizeof(why), "of run %s, not of the run read (%s)",
		         r->summary->run_id, rep->run.id);
		err = -EINVAL;
	}
	if (err) {
		free(r->summary);
		r->summary = NULL;
		if (err == -ENOMEM)
			return err;
		fprintf(stderr, "lynx report: %s: %s; left out\n", path, why);
	}
	return 0;
}

/*
 * Whether the ranks of each stage (its TP and DP peers) follow the same plan, by the plans'
 * hashes in their summaries: ranks that plan alone (LYNX_OUT per node) decide from their own
 * profiles, and peers that evict different activations wait on each other's rebuilds. A
 * line per stage with two or more ranks that name their plan.
 */
static void print_plan_agreement(FILE *out, const struct report *rep)
{
	char st[32];

	for (size_t s = 0; s < rep->stage_count; s++) {
		const struct rank *first = NULL;
		size_t named = 0, differ = 0;
		for (size_t i = 0; i < rep->count; i++) {
			const struct rank *r = &rep->ranks[i];
			if (r->stage != s || !r->summary || !r->summary->plan_hash[0])
				continue;
			named++;
			if (!first)
				first = r;
			else if (strcmp(r->summary->plan_hash, first->summary->plan_hash))
				differ++;
		}
		if (named < 2)
			continue;
		stage_name(rep, s, st, sizeof(st));
		if (!differ) {
			fprintf(out, "  %s: its %zu ranks follow one plan (%s)\n", st, named,
			        first->summary->plan_hash);
			continue;
		}
		fprintf(out, "  %s: its ranks follow different plans:", st);
		for (size_t i = 0; i < rep->count; i++) {
			const struct rank *r = &rep->ranks[i];
			if (r->stage == s && r->summary && r->summary->plan_hash[0])
				fprintf(out, " rank %d %s", r->rank, r->summary->plan_hash);
		}
		fprintf(out, " (peers that evict different activations wait on each other; "
		             "plan together through a shared LYNX_OUT, or give LYNX_PLAN)\n");
	}
}

/*
 * Recompute mode's outcome, per rank, from its summary: the plan, and peak and step planned
 * and achieved beside warm-up's, with evictions and refused replays. Nothing when no rank
 * wrote one.
 */
static void print_recompute(FILE *out, const struct report *rep)
{
	char a[40], b[40], c[40], d[40], e[40], f[40];
	bool header = false;

	for (size_t i = 0; i < rep->count; i++) {
		if (!rep->ranks[i].summary)
			continue;
		const struct lynx_summary s = *rep->ranks[i].summary;
		if (!header) {
			fprintf(out,
			        "\nrecompute mode (summary.<rank>.json): warm-up without a plan, "
			        "planned, achieved\n");
			fprintf(out, "  %-4s  %-9s  %-10s  %-38s  %-30s  %s\n", "rank", "planner",
			        "budget", "peak", "step", "evicted (offload/replay)");
			header = true;
		}
		char peak[96], step[96], refused[160] = "";
		snprintf(peak, sizeof(peak), "%s, %s, %s (%s)",
		         fmt_bytes(s.measured_peak_bytes, a, sizeof(a)),
		         fmt_bytes(s.predicted_peak_bytes, b, sizeof(b)),
		         fmt_bytes(s.achieved_peak_bytes, c, sizeof(c)),
		         change((double)s.achieved_peak_bytes, (double)s.measured_peak_bytes, d,
		                sizeof(d)));
		if (s.achieved_known)
			snprintf(step, sizeof(step), "%.3f ms, %+.1f%%, %s",
			         (double)s.measured_ns / 1e6, 100.0 * (s.predicted_slowdown - 1.0),
			         change(s.achieved_ns, (double)s.measured_ns, e, sizeof(e)));
		else
			snprintf(step, sizeof(step), "%.3f ms, %+.1f%%, not timed",
			         (double)s.measured_ns / 1e6, 100.0 * (s.predicted_slowdown - 1.0));
		for (size_t k = 0; k < s.n_refused; k++)
			snprintf(refused + strlen(refused), sizeof(refused) - strlen(refused),
			         "%s%s %llu",
			         k ? ", " : "; replays refused: ", s.refused[k].verdict,
			         (unsigned long long)s.refused[k].count);
		snprintf(f, sizeof(f), "%s%s%s", s.budget_bytes ? "" : "-",
		         s.budget_bytes ? fmt_bytes(s.budget_bytes, a, sizeof(a)) : "",
		         s.max_slowdown[0] ? "*" : "");
		fprintf(out, "  %-4d  %-9s  %-10s  %-38s  %-30s  %llu/%llu%s\n", s.rank, s.planner,
		        f, peak, step, (unsigned long long)s.offloaded,
		        (unsigned long long)s.replayed, refused);
		if (s.max_slowdown[0])
			fprintf(out,
			        "        (*: the smallest budget predicted within "
			        "LYNX_MAX_SLOWDOWN=%s)\n",
			        s.max_slowdown);
	}
	if (header)
		print_plan_agreement(out, rep);
}

/* What Lynx's HEU would save and cost on this job (policy/whatif.h); profiles that do not
 * make a planning problem (a stage missing, full recompute on) say why instead. */
static void print_whatif(FILE *out, const struct report *rep)
{
	const struct lynx_profile **ranks = calloc(rep->count + 1, sizeof(*ranks));
	struct lynx_whatif w;
	char why[256];

	if (!ranks)
		return;
	for (size_t i = 0; i < rep->count; i++)
		ranks[i] = &rep->ranks[i].p;
	fprintf(out, "\n");
	if (lynx_whatif_from_profiles(ranks, rep->count, 0, NULL, &w, why, sizeof(why)))
		fprintf(out, "what-if: no plan: %s\n", why);
	else
		lynx_whatif_print(out, "lynx report", &w);
	free(ranks);
}

int lynx_report_main(int argc, char **argv)
{
	struct report rep = {0};
	const char **dirs = calloc(argc > 0 ? (size_t)argc : 1, sizeof(*dirs));
	char path[4200], *text = NULL;
	size_t text_len = 0;
	FILE *text_stream;
	int status = LYNX_EXIT_OK, err;

	if (!dirs) {
		fprintf(stderr, "lynx report: out of memory\n");
		return LYNX_EXIT_FAIL;
	}
	rep.dirs = dirs;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			status = lynx_command_help("report");
			goto out;
		}
		if (!strcmp(a, "--run") || !strncmp(a, "--run=", 6)) {
			const char *id = a[5] == '=' ? a + 6 : i + 1 < argc ? argv[++i] : NULL;
			if (!id || !*id) {
				status = lynx_usage_error("report", "--run needs a run id");
				goto out;
			}
			rep.run_asked = id;
			continue;
		}
		if (a[0] == '-' && a[1]) {
			status = lynx_usage_error("report", "unknown option '%s'", a);
			goto out;
		}
		dirs[rep.dir_count++] = a;
	}
	if (!rep.dir_count) {
		status = lynx_usage_error("report",
		                          "expected a directory of profile.<rank>.json files");
		goto out;
	}
	rep.where = join_dirs(rep.dirs, rep.dir_count);
	if (!rep.where) {
		fprintf(stderr, "lynx report: out of memory\n");
		status = LYNX_EXIT_FAIL;
		goto out;
	}
	if ((status = read_profiles(&rep)))
		goto out;
	for (size_t i = 0; i < rep.count; i++) {
		err = read_timeline(rep.dirs[rep.ranks[i].dir], &rep.ranks[i]);
		if (!err && read_summary(&rep, &rep.ranks[i]))
			err = -ENOMEM;
		if (err) {
			if (err != -EINVAL)
				fprintf(stderr, "lynx report: out of memory\n");
			status = err == -EINVAL ? LYNX_EXIT_USAGE : LYNX_EXIT_FAIL;
			goto out;
		}
	}
	if (group_stages(&rep)) {
		fprintf(stderr, "lynx report: out of memory\n");
		status = LYNX_EXIT_FAIL;
		goto out;
	}
	/* The tables once, into text: the terminal and report.html show the same. */
	text_stream = open_memstream(&text, &text_len);
	if (!text_stream) {
		fprintf(stderr, "lynx report: out of memory\n");
		status = LYNX_EXIT_FAIL;
		goto out;
	}
	print_tables(text_stream, &rep);
	print_whatif(text_stream, &rep);
	print_recompute(text_stream, &rep);
	if (fclose(text_stream) || !text) {
		fprintf(stderr, "lynx report: out of memory\n");
		status = LYNX_EXIT_FAIL;
		goto out;
	}
	fputs(text, stdout);
	/* Beside rank 0's profile: out/proc-* names the launcher's directory first. */
	snprintf(path, sizeof(path), "%s/report.svg", rep.dirs[rep.ranks[0].dir]);
	err = lynx_report_write_svg(&rep, path);
	if (!err) {
		printf("\n%s: %zu panel%s\n", path, rep.count, rep.count == 1 ? "" : "s");
		snprintf(path, sizeof(path), "%s/report.html", rep.dirs[rep.ranks[0].dir]);
		err = lynx_report_write_html(&rep, text, path);
	}
	if (err) {
		fprintf(stderr, "lynx report: cannot write %s: %s\n", path, strerror(-err));
		status = LYNX_EXIT_FAIL;
		goto out;
	}
	printf("%s: the tables and the plot, one self-contained page\n", path);
out:
	report_free(&rep);
	free(dirs);
	free(text);
	return status;
}
