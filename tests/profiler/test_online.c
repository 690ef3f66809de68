/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Profiling-only mode end to end: tinytrain (pp=2, tp=2, L=8, M=4, virtual gpt-1.3b, every
 * hazard on) under liblynx.so with LYNX_MODE=profile writes profile.<rank>.json during
 * warm-up. The profile is checked against the ground truth of simgpu's own timeline
 * (SIMGPU_TRACE, one Chrome trace per rank process), never against constants:
 *  - every rank finds the iteration and exactly L/pp layers, with device times;
 *  - each layer's saved-activation bytes are exactly tinytrain's own count (--report-saved),
 *    here and under selective and full recompute;
 *  - each layer's forward and backward time is within 2% of the span of the same kernel
 *    sequence on simgpu's compute track;
 *  - every tensor-parallel window's duration and compute-idle time are within 2% of the
 *    matching all-reduce on simgpu's network track, less its overlap with compute;
 *  - every pipeline window is there, one per micro-batch and direction, and its idle time
 *    is within 2% of the compute stream's wait for that transfer on simgpu's timeline;
 *  - trace.<rank>.json passes the trace-event checker, with slices, flows and counters.
 * And training results (loss, gradient hash, peak memory) are identical at every step
 * with and without profiling; the virtual step time pays for device timing only during
 * warm-up, and the bound on that cost is checked.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "../harness.h"
#include "chrome_check.h"
#include "profile.h"

#define LAYERS 8
#define PP 2
#define TP 2
#define MICROBATCHES 4
#define STEPS 10
#define TRAINER_ARGS                                                                      \
	"build/bin/tinytrain --nproc 4 --pp 2 --tp 2 --dp 1 --layers 8 --microbatches 4 " \
	"--steps 10 --report-saved"

/*
 * The commands below name the programs as build/... (the default BUILD): run_built runs
 * them from this binary's own build directory instead, so that a sanitizer pass
 * (BUILD=build-san-address) tests its own shim and trainer.
 */
static void in_this_build(const char *text, char *out, size_t len)
{
	size_t n = 0;

	for (const char *p = text; *p && n + 1 < len; p++) {
		if (!strncmp(p, "build/", 6) && (p == text || p[-1] == ' ' || p[-1] == '=')) {
			n += (size_t)snprintf(out + n, len - n, "%s/", build_dir);
			p += 5;
			continue;
		}
		out[n++] = *p;
	}
	out[n < len ? n : len - 1] = '\0';
}

static struct output run_built(const char *env, const char *cmd)
{
	char e[8192], c[4096];

	in_this_build(env, e, sizeof(e));
	in_this_build(cmd, c, sizeof(c));
	return run(e, c);
}

/* A slice of simgpu's timeline, in ns. */
struct slice {
	const char *name;
	double start, end;
};

struct timeline {
	cJSON *root;
	struct slice *compute, *net;
	size_t n_compute, n_net;
};

static void timeline_read(const char *path, struct timeline *tl)
{
	char *text = slurp(path);
	const cJSON *e;

	assert_non_null(text);
	memset(tl, 0, sizeof(*tl));
	tl->root = cJSON_Parse(text);
	free(text);
	assert_non_null(tl->root);
	const cJSON *events = cJSON_GetObjectItem(tl->root, "traceEvents");
	size_t n = (size_t)cJSON_GetArraySize(events);
	tl->compute = calloc(n + 1, sizeof(*tl->compute));
	tl->net = calloc(n + 1, sizeof(*tl->net));
	cJSON_ArrayForEach(e, events)
	{
		const cJSON *ph = cJSON_GetObjectItem(e, "ph"),
		            *cat = cJSON_GetObjectItem(e, "cat");
		if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "X") || !cJSON_IsString(cat))
			continue;
		struct slice s = {cJSON_GetObjectItem(e, "name")->valuestring,
		                  cJSON_GetObjectItem(e, "ts")->valuedouble * 1000.0, 0};
		s.end = s.start + cJSON_GetObjectItem(e, "dur")->valuedouble * 1000.0;
		if (!strcmp(cat->valuestring, "compute"))
			tl->compute[tl->n_compute++] = s;
		else if (!strcmp(cat->valuestring, "net"))
			tl->net[tl->n_net++] = s;
	}
}

static void timeline_free(struct timeline *tl)
{
	free(tl->compute);
	free(tl->net);
	cJSON_Delete(tl->root);
}

static int by_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/*
 * The median span of every occurrence of the kernel sequence k on the compute track: from
 * the first kernel's start to the last one's end, extended to the end of any network slice
 * that starts inside (the profile's segments hold their collectives). 0 when none.
 */
static double truth_span(const struct timeline *tl, const struct lynx_profile_kernels *k)
{
	double *spans = calloc(tl->n_compute + 1, sizeof(*spans));
	size_t n = 0;

	for (size_t i = 0; k->count && i + k->count <= tl->n_compute; i++) {
		size_t j = 0;
		while (j < k->count && !strcmp(tl->compute[i + j].name, k->name[j]))
			j++;
		if (j < k->count)
			continue;
		double start = tl->compute[i].start, end = tl->compute[i + k->count - 1].end;
		for (size_t c = 0; c < tl->n_net; c++)
			if (tl->net[c].start >= start && tl->net[c].start < end &&
			    tl->net[c].end > end)
				end = tl->net[c].end;
		spans[n++] = end - start;
		i += k->count - 1;
	}
	qsort(spans, n, sizeof(*spans), by_double);
	double median = n ? spans[(n - 1) / 2] : 0;
	free(spans);
	return median;
}

/* A network slice's time with no compute kernel running. */
static double truth_idle(const struct timeline *tl, const struct slice *s)
{
	double busy = 0;

	for (size_t i = 0; i < tl->n_compute; i++) {
		double a = fmax(tl->compute[i].start, s->start),
		       b = fmin(tl->compute[i].end, s->end);
		busy += b > a ? b - a : 0;
	}
	return s->end - s->start - busy;
}

/*
 * A pipeline transfer's window: the compute stream waits from the end of its last kernel
 * before the transfer completes until that completion (simgpu's slice is the transfer alone;
 * the wait for the peer stage comes before it).
 */
static double truth_wait(const struct timeline *tl, const struct slice *s)
{
	double last_end = 0;

	for (size_t i = 0; i < tl->n_compute; i++)
		if (tl->compute[i].end <= s->end && tl->compute[i].end > last_end)
			last_end = tl->compute[i].end;
	return s->end - last_end;
}

static void assert_within(double measured, double truth, double share, double slack_ns,
                          const char *what)
{
	if (fabs(measured - truth) > share * truth + slack_ns)
		fail_msg("%s: measured %.0f ns, simgpu says %.0f ns", what, measured, truth);
}

static char out_dir[1200];

static struct output run_profiled(void)
{
	char env[4000];

	snprintf(out_dir, sizeof(out_dir), "%s/out", scratch);
	snprintf(env, sizeof(env),
	         "LD_LIBRARY_PATH=build/simgpu LD_PRELOAD=build/liblynx.so LYNX_MODE=profile "
	         "LYNX_OUT=%s SIMGPU_TRACE=%s/simgpu",
	         out_dir, out_dir);
	return run_built(env, TRAINER_ARGS);
}

/* tinytrain's own count of the bytes each local layer's forward keeps (--report-saved):
 * the line {"step":-1,"rank":R,"saved_layer_bytes":[...]}. Returns how many it read. */
static size_t saved_truth(const char *out, int rank, uint64_t *bytes, size_t max)
{
	char key[64];
	const char *p;
	size_t n = 0;

	snprintf(key, sizeof(key), "{\"step\":-1,\"rank\":%d,\"saved_layer_bytes\":[", rank);
	p = strstr(out, key);
	if (!p)
		return 0;
	p += strlen(key);
	while (n < max && *p && *p != ']') {
		char *end;
		bytes[n++] = strtoull(p, &end, 10);
		p = *end == ',' ? end + 1 : end;
	}
	return n;
}

static void check_rank(int rank, const char *trainer_out)
{
	char path[1500];
	struct lynx_profile p;
	struct timeline tl;
	char why[256];

	snprintf(path, sizeof(path), "%s/profile.%d.json", out_dir, rank);
	if (lynx_profile_read(path, &p, why, sizeof(why)))
		fail_msg("rank %d: %s", rank, why);
	assert_int_equal(p.rank, rank);
	assert_int_equal(p.world, PP * TP);
	assert_int_equal(p.layer_count, LAYERS / PP);
	assert_int_equal(p.microbatches, MICROBATCHES);
	assert_true(p.iteration.count >= 3);
	assert_int_equal(p.iteration.time.source, LYNX_PROFILE_SOURCE_DEVICE);
	/* Stage 0 of 2 runs one warm-up forward; the last stage none. */
	assert_int_equal(p.warmup_forwards, rank / TP == 0 ? 1 : 0);

	/* Saved-activation bytes per layer: exactly what tinytrain keeps. */
	uint64_t truth[LAYERS];
	assert_int_equal(saved_truth(trainer_out, rank, truth, LAYERS), p.layer_count);
	for (size_t l = 0; l < p.layer_count; l++)
		assert_int_equal(p.layers[l].saved_bytes, truth[l]);

	snprintf(path, sizeof(path), "%s/simgpu.%d.json", out_dir, p.env.pid);
	timeline_read(path, &tl);
	for (size_t l = 0; l < p.layer_count; l++) {
		const struct lynx_profile_layer *layer = &p.layers[l];
		char what[64];
		assert_int_equal(layer->forward.source, LYNX_PROFILE_SOURCE_DEVICE);
		assert_int_equal(layer->backward.source, LYNX_PROFILE_SOURCE_DEVICE);
		assert_non_null(layer->fwd_kernels.ns);
		snprintf(what, sizeof(what), "rank %d layer %zu forward", rank, l);
		assert_within((double)layer->forward.ns, truth_span(&tl, &layer->fwd_kernels), 0.02,
		              0, what);
		snprintf(what, sizeof(what), "rank %d layer %zu backward", rank, l);
		assert_within((double)layer->backward.ns, truth_span(&tl, &layer->bwd_kernels),
		              0.02, 0, what);
	}

	/* Windows, in call order, against the network slices of the last warm-up iteration:
	 * every step issues the same calls, so window w is slice w of some step. */
	size_t tp = 0, pp = 0, per_kind[LYNX_PROFILE_WINDOW_KIND_COUNT] = {0};
	for (size_t w = 0; w < p.window_count; w++)
		per_kind[p.windows[w].kind]++;
	assert_int_equal(tl.n_net % p.window_count, 0);
	for (size_t w = 0; w < p.window_count; w++) {
		const struct lynx_profile_window *win = &p.windows[w];
		const struct slice *s = &tl.net[tl.n_net - p.window_count + w];
		bool tensor = win->kind == LYNX_PROFILE_WINDOW_TP_FWD ||
		              win->kind == LYNX_PROFILE_WINDOW_TP_BWD;
		char what[64];
		assert_string_equal(s->name, win->call);
		assert_int_equal(win->idle.source, LYNX_PROFILE_SOURCE_DEVICE);
		snprintf(what, sizeof(what), "rank %d window %zu idle", rank, w);
		if (tensor) {
			snprintf(what, sizeof(what), "rank %d window %zu duration", rank, w);
			assert_within((double)win->duration.ns, s->end - s->start, 0.02, 0, what);
			snprintf(what, sizeof(what), "rank %d window %zu idle", rank, w);
			assert_within((double)win->idle.ns, truth_idle(&tl, s), 0.02, 0, what);
			tp++;
		} else {
			pp++;
			assert_within((double)win->idle.ns, truth_wait(&tl, s), 0.02, 0, what);
		}
	}
	/* Two all-reduces per layer and direction (attention and MLP), per micro-batch. */
	assert_int_equal(tp, 2 * 2 * p.layer_count * MICROBATCHES);
	assert_int_equal(pp, 2 * MICROBATCHES);
	if (rank / TP == 0) {
		assert_int_equal(per_kind[LYNX_PROFILE_WINDOW_PP_SEND_FWD], MICROBATCHES);
		assert_int_equal(per_kind[LYNX_PROFILE_WINDOW_PP_RECV_BWD], MICROBATCHES);
	} else {
		assert_int_equal(per_kind[LYNX_PROFILE_WINDOW_PP_RECV_FWD], MICROBATCHES);
		assert_int_equal(per_kind[LYNX_PROFILE_WINDOW_PP_SEND_BWD], MICROBATCHES);
	}
	timeline_free(&tl);
	lynx_profile_free(&p);

	/* The warm-up's timeline, beside the profile: valid trace-event JSON with device slices
	 * and cross-stream flows. */
	struct lynx_prof_chrome_stats stats;
	snprintf(path, sizeof(path), "%s/trace.%d.json", out_dir, rank);
	char *trace = slurp(path);
	assert_non_null(trace);
	if (lynx_prof_chrome_check(trace, strlen(trace), &stats, why, sizeof(why)))
		fail_msg("%s: %s", path, why);
	assert_true(stats.slices > 0);
	assert_true(stats.flows > 0);
	assert_true(stats.counters > 0);
	free(trace);
}

static void test_profile_mode_matches_simgpu_timeline(void **state)
{
	struct output o = run_profiled();

	assert_int_equal(o.exit_code, 0);
	for (int rank = 0; rank < PP * TP; rank++)
		check_rank(rank, o.out);
	/* The summary at exit, once per rank. */
	assert_non_null(strstr(o.err, "lynx[rank 0]: "));
	assert_non_null(strstr(o.err, "lynx[rank 3]: "));
	assert_non_null(strstr(o.err, "(device time)"));
	/* tinytrain frees what a layer saved after the layer's backward, past most of its
	 * readers. */
	const char *held = strstr(o.err, "lynx[rank 0]: saved activations held past their last "
	                                 "reader: ");
	assert_non_null(held);
	assert_true(atof(held + strlen("lynx[rank 0]: saved activations held past their last "
	                               "reader: ")) > 0);
	/* Rank 0's what-if over both stages' profiles, with the ladder of budgets. */
	assert_non_null(strstr(o.err, "lynx[rank 0]: what-if (Lynx HEU over 2 stages"));
	assert_non_null(strstr(o.err, "% less), iteration +"));
	release(&o);
}

/* One line of tinytrain's output: the fields that are training results, and the time. */
struct step_line {
	char results[256];
	long long step_time_ns;
};

static size_t parse_lines(const char *text, struct step_line *lines, size_t max)
{
	size_t n = 0;

	for (const char *line = text; *line && n < max;) {
		const char *end = strchr(line, '\n');
		if (!strncmp(line, "{\"step\":-1,", strlen("{\"step\":-1,"))) { /* saved bytes */
			line = end ? end + 1 : line + strlen(line);
			continue;
		}
		const char *t = strstr(line, ",\"step_time_ns\":");
		assert_non_null(t);
		snprintf(lines[n].results, sizeof(lines[n].results), "%.*s", (int)(t - line), line);
		lines[n++].step_time_ns = atoll(t + strlen(",\"step_time_ns\":"));
		line = end ? end + 1 : line + strlen(line);
	}
	return n;
}

static void test_profile_mode_leaves_results_unchanged(void **state)
{
	struct output plain = run_built("LD_LIBRARY_PATH=build/simgpu", TRAINER_ARGS);
	struct output profiled = run_profiled();
	struct step_line a[STEPS * 4], b[STEPS * 4];
	size_t n;

	assert_int_equal(plain.exit_code, 0);
	assert_int_equal(profiled.exit_code, 0);
	n = parse_lines(plain.out, a, STEPS * 4);
	assert_int_equal(n, STEPS * 4);
	assert_int_equal(parse_lines(profiled.out, b, STEPS * 4), n);
	size_t slower = 0;
	for (size_t i = 0; i < n; i++) {
		/* Loss, gradient hash and peak memory: byte for byte. */
		assert_string_equal(a[i].results, b[i].results);
		/* Time: device timing costs two event records per NCCL call during warm-up,
		 * and per launch too in the sampled iteration, and the step that ends warm-up
		 * resolves every mark once. */
		double ratio = (double)b[i].step_time_ns / (double)a[i].step_time_ns;
		assert_true(ratio < 1.25);
		slower += ratio > 1.001;
	}
	/* Only the step that resolved the marks is more than 0.1% slower, on each rank. */
	assert_true(slower <= 4);
	/* After warm-up, steps take exactly as long as without Lynx. */
	for (size_t i = n - 4; i < n; i++)
		assert_int_equal(a[i].step_time_ns, b[i].step_time_ns);
	release(&plain);
	release(&profiled);
}

/* Pipeline-only and data-parallel-only layouts under Megatron's full recompute, its block
 * recompute (the first layers of each stage only), its uniform recompute (groups of layers
 * rerun together) and selective recompute: every rank still
 * finds its L/pp layers, device-timed, sees the rerun forwards of the layers that have them,
 * and counts exactly the bytes tinytrain keeps. */
static void test_profile_mode_finds_layers_in_other_layouts(void **state)
{
	const struct {
		const char *args, *recompute;
		int ranks, layers;
		int reruns; /* the first layers of a stage that rerun their forward */
	} layouts[] = {
	        {"--nproc 4 --pp 4 --tp 1 --dp 1", "full", 4, LAYERS / 4, LAYERS / 4},
	        {"--nproc 4 --pp 1 --tp 1 --dp 4", "full", 4, LAYERS, LAYERS},
	        {"--nproc 4 --pp 2 --tp 2 --dp 1", "selective", 4, LAYERS / 2, 0},
	        {"--nproc 4 --pp 2 --tp 2 --dp 1", "full --recompute-layers 1", 4, LAYERS / 2, 1},
	        {"--nproc 2 --pp 1 --tp 1 --dp 2", "full --recompute-layers 5", 2, LAYERS, 5},
	        {"--nproc 2 --pp 2 --tp 1 --dp 1", "full --recompute-groups 3", 2, LAYERS / 2,
	         LAYERS / 2},
	};

	for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
		char env[4000], cmd[512], path[1500], why[256];
		snprintf(out_dir, sizeof(out_dir), "%s/layout%zu", scratch, l);
		snprintf(env, sizeof(env),
		         "LD_LIBRARY_PATH=build/simgpu LD_PRELOAD=build/liblynx.so LYNX_OUT=%s",
		         out_dir);
		snprintf(cmd, sizeof(cmd),
		         "build/bin/tinytrain %s --layers 8 --microbatches 4 --steps 10 "
		         "--recompute %s --report-saved",
		         layouts[l].args, layouts[l].recompute);
		struct output o = run_built(env, cmd);
		assert_int_equal(o.exit_code, 0);
		for (int rank = 0; rank < layouts[l].ranks; rank++) {
			struct lynx_profile p;
			snprintf(path, sizeof(path), "%s/profile.%d.json", out_dir, rank);
			if (lynx_profile_read(path, &p, why, sizeof(why)))
				fail_msg("%s rank %d: %s", layouts[l].args, rank, why);
			uint64_t truth[LAYERS];
			assert_int_equal(p.layer_count, layouts[l].layers);
			for (size_t k = 0; k < p.layer_count; k++)
				assert_int_equal(p.layers[k].reruns_forward,
				                 (int)k < layouts[l].reruns);
			assert_int_equal(saved_truth(o.out, rank, truth, LAYERS), p.layer_count);
			for (size_t k = 0; k < p.layer_count; k++)
				assert_int_equal(p.layers[k].saved_bytes, truth[k]);
			assert_int_equal(p.layers[0].forward.source, LYNX_PROFILE_SOURCE_DEVICE);
			lynx_profile_free(&p);
		}
		release(&o);
	}
}

/*
 * Recompute mode plans online once every rank's profile is in LYNX_OUT: plan.json (rank 0),
 * one summary line per rank; LYNX_PLAN replays a given plan; a corrupt LYNX_PLAN warns and
 * the run completes; training results are unchanged. At simgpu's default 2 MiB granule
 * tinytrain's activations are too small for the executor's arena: no plan fits then, and
 * each rank says why. At 4 KiB they are evicted (test_executor checks what that saves).
 */
static void test_recompute_mode_plans_online(void **state)
{
	char env[4000], plan[1300], why[1300];
	struct step_line a[STEPS * 4], b[STEPS * 4];
	struct output plain =
	        run_built("LD_LIBRARY_PATH=build/simgpu SIMGPU_VMM_GRANULARITY=4K", TRAINER_ARGS);

	/* At the default 2 MiB granule every activation stays: no plan fits, each rank says
	 * why, and the job runs unchanged. */
	snprintf(env, sizeof(env),
	         "LD_LIBRARY_PATH=build/simgpu LD_PRELOAD=build/liblynx.so LYNX_MODE=recompute "
	         "LYNX_OUT=%s/granule LYNX_BUDGET=2180K",
	         scratch);
	struct output o = run_built(env, TRAINER_ARGS);
	assert_int_equal(o.exit_code, 0);
	assert_int_equal(count_of(o.err, "smaller than the device's 2.00 MiB VMM granule, which "
	                                 "Lynx cannot evict"),
	                 PP * TP);
	release(&o);

	snprintf(out_dir, sizeof(out_dir), "%s/recompute", scratch);
	snprintf(env, sizeof(env),
	         "LD_LIBRARY_PATH=build/simgpu SIMGPU_VMM_GRANULARITY=4K "
	         "LD_PRELOAD=build/liblynx.so "
	         "LYNX_MODE=recompute LYNX_OUT=%s LYNX_BUDGET=2180K",
	         out_dir);
	o = run_built(env, TRAINER_ARGS);
	assert_int_equal(o.exit_code, 0);
	/* The budget counts the device's memory in use, so the plan is made for less: what
	 * warm-up had in use beyond its tensors (simgpu's 4 KiB pages) is taken off. */
	/* HEU's plan, or HEU with offloads where the checker predicts that faster. */
	assert_int_equal(count_of(o.err, ", budget 2.13 MiB; planned for "), PP * TP);
	const char *line0 = strstr(o.err, "lynx[rank 0]: recompute plan (");
	const char *line3 = strstr(o.err, "lynx[rank 3]: recompute plan (");
	assert_non_null(line0);
	assert_non_null(line3);
	for (const char *const *line = (const char *const[]){line0, line3, NULL}; *line; line++) {
		const char *budget = strstr(*line, ", budget 2.13 MiB; planned for ");
		assert_true(budget && budget < strchr(*line, '\n'));
	}
	assert_true(atof(strstr(line0, "planned for ") + strlen("planned for ")) < 2.13);
	assert_non_null(strstr(line0, "), stage 0 of 2"));
	assert_non_null(strstr(line3, "), stage 1 of 2"));
	assert_true(strstr(line0, "), stage 0 of 2") < strchr(line0, '\n'));
	assert_true(strstr(line3, "), stage 1 of 2") < strchr(line3, '\n'));
	size_t n = parse_lines(plain.out, a, STEPS * 4);
	assert_int_equal(parse_lines(o.out, b, STEPS * 4), n);
	for (size_t i = 0; i < n; i++) { /* the same results; the peaks are what changes */
		char *pa = strstr(a[i].results, ",\"peak_bytes\":");
		char *pb = strstr(b[i].results, ",\"peak_bytes\":");
		assert_non_null(pa);
		assert_non_null(pb);
		*pa = *pb = '\0';
		assert_string_equal(a[i].results, b[i].results);
	}
	/* The link measured goes into each profile, for the planners' offloading. */
	snprintf(plan, sizeof(plan), "%s/profile.0.json", out_dir);
	char *profile = slurp(plan);
	assert_non_null(profile);
	assert_non_null(strstr(profile, "\"host_link\":\t{\n\t\t\"d2h_bytes_per_s\":\t"));
	free(profile);

	snprintf(plan, sizeof(plan), "%s/plan.json", out_dir);
	char *text = slurp(plan);
	assert_non_null(text);
	assert_non_null(strstr(text, "\"lynx-plan\""));
	free(text);
	release(&o);

	/* The same plan through LYNX_PLAN, into another directory. */
	snprintf(env, sizeof(env),
	         "LD_LIBRARY_PATH=build/simgpu LD_PRELOAD=build/liblynx.so LYNX_MODE=recompute "
	         "LYNX_OUT=%s/given LYNX_PLAN=%s",
	         scratch, plan);
	o = run_built(env, TRAINER_ARGS);
	assert_int_equal(o.exit_code, 0);
	assert_int_equal(count_of(o.err, ": recompute plan (LYNX_PLAN "), PP * TP);
	release(&o);

	/* A corrupt plan: a warning per rank, no plan, the run goes on. */
	snprintf(why, sizeof(why), "%s/corrupt.json", scratch);
	FILE *f = fopen(why, "w");
	assert_non_null(f);
	fputs("{\"format\": \"lynx-plan\", \"version\": 1, \"stages\": [", f);
	fclose(f);
	snprintf(env, sizeof(env),
	         "LD_LIBRARY_PATH=build/simgpu LD_PRELOAD=build/liblynx.so LYNX_MODE=recompute "
	         "LYNX_OUT=%s/corrupt LYNX_PLAN=%s",
	         scratch, why);
	o = run_built(env, TRAINER_ARGS);
	assert_int_equal(o.exit_code, 0);
	assert_int_equal(count_of(o.err, "recompute mode: no plan: "), PP * TP);
	assert_int_equal(count_of(o.err, ": recompute plan ("), 0);
	assert_int_equal(parse_lines(o.out, b, STEPS * 4), n);
	release(&o);
	release(&plain);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_profile_mode_matches_simgpu_timeline),
	        cmocka_unit_test(test_profile_mode_leaves_results_unchanged),
	        cmocka_unit_test(test_profile_mode_finds_layers_in_other_layouts),
	        cmocka_unit_test(test_recompute_mode_plans_online),
	};

	if (harness_init(argv[0], "test_online"))
		return 1;
	return harness_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
