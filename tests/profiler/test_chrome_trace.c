/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Chrome trace writer (profiler/chrome_trace.c) and the trace-event checker
 * (profiler/chrome_check.c): a recorded tinytrain run (pp2 tp2) written as a timeline that
 * passes the checker, with one track per stream the rank used, every layer slice
 * (layers x micro-batches x iterations, each way), a memory counter whose top is the
 * profile's peak, the profile's windows on their NCCL calls and cross-stream flows; a
 * hand-made trace with device times (slices on the device clock, shifted after their calls,
 * a nested call's time borrowed, an overlap moved, the record/wait markers and their one
 * flow); the checker accepting nested slices and refusing overlaps, negative durations,
 * unpaired flows, open B/E and the rest; atomic writes.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>

#include "build.h"
#include "chrome_check.h"
#include "chrome_trace.h"
#include "record.h"

static char *slurp_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *text;
	long n;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	text = malloc((size_t)n + 1);
	assert_non_null(text);
	assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
	text[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return text;
}

/* Writes trace, checks it with the checker and returns it parsed (cJSON_Delete it). */
static cJSON *write_and_check(const struct lynx_prof_trace *t, const struct lynx_profile *p,
                              const struct lynx_prof_chrome_options *opt, const char *path,
                              struct lynx_prof_chrome_stats *stats, size_t *size)
{
	char why[512];
	size_t len;
	char *text;
	cJSON *root;

	if (lynx_prof_write_chrome_trace(t, p, opt, path, why, sizeof(why)))
		fail_msg("write: %s", why);
	text = slurp_file(path, &len);
	if (lynx_prof_chrome_check(text, len, stats, why, sizeof(why)))
		fail_msg("%s refused: %s", path, why);
	root = cJSON_ParseWithLength(text, len);
	assert_non_null(root);
	free(text);
	if (size)
		*size = len;
	return root;
}

static const char *str(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(v) ? v->valuestring : "";
}

static double num(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static const cJSON *args(const cJSON *o)
{
	return cJSON_GetObjectItemCaseSensitive(o, "args");
}

static bool starts(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

/* The tid of the track whose thread_name starts with prefix and holds part, or -1. */
static double track_named(const cJSON *events, const char *prefix, const char *part)
{
	const cJSON *ev;

	cJSON_ArrayForEach(ev, events)
	{
		const char *name = str(args(ev), "name");
		if (!strcmp(str(ev, "name"), "thread_name") && starts(name, prefix) &&
		    strstr(name, part))
			return num(ev, "tid");
	}
	return -1;
}

/* The tid of the track of stream handle: named "stream 0x<hex>", then the end or a note. */
static double stream_track(const cJSON *events, uint64_t handle)
{
	char want[40];
	const cJSON *ev;

	snprintf(want, sizeof(want), handle ? "stream 0x%llx" : "stream 0",
	         (unsigned long long)handle);
	cJSON_ArrayForEach(ev, events)
	{
		const char *name = str(args(ev), "name");
		size_t n = strlen(want);
		if (!strcmp(str(ev, "name"), "thread_name") && !strncmp(name, want, n) &&
		    (name[n] == '\0' || name[n] == ' '))
			return num(ev, "tid");
	}
	return -1;
}

static bool is_stream_work(const struct lynx_prof_event *e)
{
	return !e->nested && !e->captured && !e->result &&
	       (e->kind == LYNX_PROF_LAUNCH || e->kind == LYNX_PROF_COPY ||
	        e->kind == LYNX_PROF_MEMSET || e->kind == LYNX_PROF_COLL ||
	        e->kind == LYNX_PROF_P2P || e->kind == LYNX_PROF_EVENT_RECORD ||
	        e->kind == LYNX_PROF_STREAM_WAIT);
}

static void check_streams(const struct lynx_prof_trace *t, const cJSON *events)
{
	uint64_t seen[16];
	size_t n = 0, tracks = 0, launches = 0, drawn_launches = 0;
	const cJSON *ev;

	for (size_t i = 0; i < t->count; i++) {
		const struct lynx_prof_event *e = &t->events[i];
		size_t k;
		if (!is_stream_work(e))
			continue;
		launches += e->kind == LYNX_PROF_LAUNCH;
		for (k = 0; k < n && seen[k] != e->stream; k++)
			;
		if (k == n) {
			assert_true(n < 16);
			seen[n++] = e->stream;
		}
	}
	assert_true(n >= 2); /* compute and communication, at least */
	cJSON_ArrayForEach(ev, events)
	{
		tracks += !strcmp(str(ev, "name"), "thread_name") &&
		          starts(str(args(ev), "name"), "stream ");
		drawn_launches += !strcmp(str(ev, "cat"), "launch") &&
		                  num(ev, "tid") >= LYNX_CHROME_TID_STREAM0;
	}
	assert_int_equal(tracks, n);
	assert_int_equal(drawn_launches, launches);
	for (size_t k = 0; k < n; k++) {
		double tid = stream_track(events, seen[k]);
		size_t items = 0;
		assert_true(tid >= LYNX_CHROME_TID_STREAM0);
		cJSON_ArrayForEach(ev, events)
		{
			items += num(ev, "tid") == tid && strcmp(str(ev, "ph"), "M");
		}
		assert_true(items > 0);
	}
}

static void check_layers(const struct lynx_profile *p, const cJSON *events)
{
	size_t fwd = 0, bwd = 0, iterations = 0;
	double its[8][2];
	const cJSON *ev;

	cJSON_ArrayForEach(ev, events)
	{
		if (!strcmp(str(ev, "cat"), "iteration")) {
			assert_true(iterations < 8);
			its[iterations][0] = num(ev, "ts");
			its[iterations++][1] = num(ev, "ts") + num(ev, "dur");
		}
	}
	assert_int_equal(iterations, p->iteration.count);
	cJSON_ArrayForEach(ev, events)
	{
		const char *name = str(ev, "name");
		bool inside = false;
		if (!starts(name, "layer "))
			continue;
		assert_int_equal(num(ev, "tid"), LYNX_CHROME_TID_LAYERS);
		assert_string_equal(str(ev, "ph"), "X");
		fwd += strstr(name, " fwd mb ") != NULL;
		bwd += strstr(name, " bwd mb ") != NULL;
		for (size_t i = 0; i < iterations; i++)
			inside |= num(ev, "ts") >= its[i][0] &&
			          num(ev, "ts") + num(ev, "dur") <= its[i][1] + 1e-6;
		assert_true(inside);
		if (strstr(name, " fwd mb "))
			assert_true(num(args(ev), "saved_bytes") > 0);
	}
	assert_int_equal(fwd, p->layer_count * p->microbatches * p->iteration.count);
	assert_int_equal(bwd, fwd);
}

/* The counter's top is the profile's peak, and the by-class split adds up at every step. */
static void check_memory(const struct lynx_profile *p, const cJSON *events)
{
	double top = 0, total = -1;
	size_t points = 0;
	const cJSON *ev, *c;

	cJSON_ArrayForEach(ev, events)
	{
		if (!strcmp(str(ev, "name"), "device memory")) {
			total = num(args(ev), "bytes");
			top = total > top ? total : top;
			points++;
		} else if (!strcmp(str(ev, "name"), "device memory by class")) {
			double sum = 0;
			cJSON_ArrayForEach(c, args(ev))
			{
				sum += c->valuedouble;
			}
			assert_true(sum == total);
		}
	}
	assert_true(points > 10);
	assert_true(top == (double)p->memory.peak_bytes);
}

static void check_windows(const struct lynx_profile *p, const cJSON *events)
{
	size_t n[LYNX_PROFILE_WINDOW_KIND_COUNT] = {0}, labelled = 0;
	const cJSON *ev;

	for (size_t i = 0; i < p->window_count; i++)
		n[p->windows[i].kind]++;
	cJSON_ArrayForEach(ev, events)
	{
		const char *kind = str(args(ev), "window");
		if (!*kind || num(ev, "tid") < LYNX_CHROME_TID_STREAM0)
			continue;
		labelled++;
		for (int k = 0; k < LYNX_PROFILE_WINDOW_KIND_COUNT; k++)
			if (!strcmp(kind, lynx_profile_window_kind_name(k)))
				n[k]--;
	}
	assert_int_equal(labelled, p->window_count);
	for (int k = 0; k < LYNX_PROFILE_WINDOW_KIND_COUNT; k++)
		assert_int_equal(n[k], 0);
}

/* Each flow goes from a record on one stream to a wait on another, forward in time. */
static void check_flows(const cJSON *events, size_t flows)
{
	const cJSON *ev, *other;
	size_t outs = 0;

	cJSON_ArrayForEach(ev, events)
	{
		if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ev, "flow_out")))
			continue;
		outs++;
		assert_string_equal(str(ev, "name"), "record");
		cJSON_ArrayForEach(other, events)
		{
			if (num(other, "bind_id") != num(ev, "bind_id") || other == ev)
				continue;
			assert_true(
			        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(other, "flow_in")));
			assert_string_equal(str(other, "name"), "wait");
			assert_true(num(other, "tid") != num(ev, "tid"));
			assert_true(num(other, "ts") >= num(ev, "ts"));
			assert_string_equal(str(args(other), "handle"), str(args(ev), "handle"));
		}
	}
	assert_int_equal(outs, flows);
}

static void test_chrome_trace_tinytrain_tracks_layers_memory_and_flows(void **state)
{
	struct recording rec;

	(void)state;
	assert_int_equal(record_tinytrain("--nproc 4 --pp 2 --tp 2 --layers 8 --microbatches 4 "
	                                  "--steps 2",
	                                  &rec),
	                 0);
	assert_int_equal(rec.ranks, 4);
	for (int r = 0; r < rec.ranks; r++) {
		struct lynx_prof_build_options bopt = {.rank = r, .world = 4};
		struct lynx_prof_chrome_options copt = {r, 4};
		struct lynx_prof_chrome_stats stats;
		struct lynx_profile p;
		char path[1200], why[256];
		size_t size, threads = 0, api_tracks = 0;
		uint32_t tids[8];
		const cJSON *ev;

		if (lynx_prof_build_profile(&rec.rank[r], &bopt, &p, why, sizeof(why)))
			fail_msg("pid %d: %s", rec.rank[r].pid, why);
		snprintf(path, sizeof(path), "%s/trace.%d.json", rec.dir, r);
		cJSON *root = write_and_check(&rec.rank[r], &p, &copt, path, &stats, &size);
		const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
		const cJSON *other = cJSON_GetObjectItemCaseSensitive(root, "otherData");

		assert_true(size < 4u << 20);
		assert_string_equal(str(root, "format"), LYNX_TRACE_FORMAT);
		assert_int_equal(num(root, "version"), LYNX_TRACE_VERSION);
		assert_string_equal(str(root, "displayTimeUnit"), "ns");
		cJSON_ArrayForEach(ev, events)
		{
			assert_int_equal(num(ev, "pid"), r);
		}
		check_streams(&rec.rank[r], events);
		assert_int_equal(p.layer_count, 4);
		assert_int_equal(p.microbatches, 4);
		assert_int_equal(p.iteration.count, 2);
		check_layers(&p, events);
		check_memory(&p, events);
		check_windows(&p, events);
		assert_true(stats.flows > 0);
		assert_int_equal(num(other, "cross_stream_waits"), stats.flows);
		check_flows(events, stats.flows);
		/* One track of API calls per host thread: main and the backward thread. */
		for (size_t i = 0; i < rec.rank[r].count; i++) {
			const struct lynx_prof_event *e = &rec.rank[r].events[i];
			size_t k;
			for (k = 0; k < threads && tids[k] != e->tid; k++)
				;
			if (k == threads && !e->nested) {
				assert_true(threads < 8);
				tids[threads++] = e->tid;
			}
		}
		cJSON_ArrayForEach(ev, events)
		{
			api_tracks += strstr(str(args(ev), "name"), "(API calls)") != NULL;
		}
		assert_int_equal(threads, 2);
		assert_int_equal(api_tracks, threads);
		cJSON_Delete(root);
		lynx_profile_free(&p);
	}
	record_release(&rec);
}

/* ---- A hand-made trace with device times ---------------------------------------------------- */

static struct lynx_prof_event ev(uint64_t t, uint32_t tid, const char *hook,
                                 enum lynx_prof_kind kind, bool nested, uint64_t stream)
{
	return (struct lynx_prof_event){.t_ns = t,
	                                .tid = tid,
	                                .hook = hook,
	                                .kind = kind,
	                                .nested = nested,
	                                .stream = stream};
}

static const cJSON *find(const cJSON *events, const char *ph, const char *name, double tid)
{
	const cJSON *e;

	cJSON_ArrayForEach(e, events)
	{
		if (!strcmp(str(e, "ph"), ph) && !strcmp(str(e, "name"), name) &&
		    (tid < 0 || num(e, "tid") == tid))
			return e;
	}
	fail_msg("no %s \"%s\"", ph, name);
	return NULL;
}

static void test_chrome_trace_device_times_slices_and_one_flow(void **state)
{
	enum { A = 0xa0, B = 0xb0, EV = 0xe0 };
	struct lynx_prof_event e[11];
	struct lynx_prof_trace t = {.pid = 4242, .events = e, .count = 11};
	struct lynx_prof_chrome_stats stats;
	char dir[] = "/tmp/test-chrome.XXXXXX", path[64], cmd[96];

	(void)state;
	e[0] = ev(1000, 7, "cudaMalloc", LYNX_PROF_ALLOC, false, 0);
	e[0].u.mem.ptr = 0x10000;
	e[0].u.mem.bytes = 4096;
	/* The driver launch was timed, the runtime launch around it was not: it borrows. */
	e[1] = ev(2000, 7, "cuLaunchKernel", LYNX_PROF_LAUNCH, true, A);
	e[1].dev_start_ns = 500;
	e[1].dev_end_ns = 1500;
	e[2] = ev(2100, 7, "cudaLaunchKernel", LYNX_PROF_LAUNCH, false, A);
	e[2].u.launch.name = "k_a";
	e[2].u.launch.function = 0x100; /* three different kernels: no repeat, no iteration */
	e[3] = ev(3000, 7, "cudaEventRecord", LYNX_PROF_EVENT_RECORD, false, A);
	e[3].u.sync.handle = EV;
	e[4] = ev(3100, 8, "cudaStreamWaitEvent", LYNX_PROF_STREAM_WAIT, false, B);
	e[4].u.sync.handle = EV;
	e[5] = ev(3200, 8, "cudaLaunchKernel", LYNX_PROF_LAUNCH, false, B);
	e[5].u.launch.name = "k_b";
	e[5].u.launch.function = 0x200;
	e[5].dev_start_ns = 1600;
	e[5].dev_end_ns = 2600;
	/* Starts (device clock) before k_a ended on the same stream: moved to that end. */
	e[6] = ev(3300, 7, "cudaLaunchKernel", LYNX_PROF_LAUNCH, false, A);
	e[6].u.launch.name = "k_late";
	e[6].u.launch.function = 0x300;
	e[6].dev_start_ns = 1400;
	e[6].dev_end_ns = 1900;
	e[7] = ev(3400, 7, "cudaMemcpyAsync", LYNX_PROF_COPY, false, A);
	e[7].u.copy.bytes = 64;
	/* A wait on its own stream's record and one on an event never recorded: no flows. */
	e[8] = ev(3500, 7, "cudaStreamWaitEvent", LYNX_PROF_STREAM_WAIT, false, A);
	e[8].u.sync.handle = EV;
	e[9] = ev(3600, 7, "cudaStreamWaitEvent", LYNX_PROF_STREAM_WAIT, false, B);
	e[9].u.sync.handle = 0xf0;
	e[10] = ev(4000, 7, "cudaFree", LYNX_PROF_FREE, false, 0);
	e[10].u.mem.ptr = 0x10000;
	for (uint32_t i = 0; i < 11; i++)
		e[i].index = i;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/trace.json", dir);
	cJSON *root = write_and_check(&t, NULL, NULL, path, &stats, NULL);
	const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
	const cJSON *other = cJSON_GetObjectItemCaseSensitive(root, "otherData");
	double sa = stream_track(events, A), sb = stream_track(events, B);

	/* The shift: the largest (call return - device start), 3300 - 1400 = 1900 ns. */
	assert_int_equal(num(other, "device_shift_ns"), 1900);
	assert_int_equal(num(other, "device_timed_items"), 3);
	if (!starts(str(other, "layers"), "none: "))
		fail_msg("layers: %s", str(other, "layers"));
	assert_int_equal(num(other, "pid"), 4242);
	const cJSON *ka = find(events, "X", "k_a", sa), *kb = find(events, "X", "k_b", sb);
	const cJSON *late = find(events, "X", "k_late", sa);
	/* ts in microseconds from the first event (t = 1000 ns). */
	assert_true(num(ka, "ts") == 1.4 && num(ka, "dur") == 1.0);
	assert_string_equal(str(args(ka), "clock"), "device");
	assert_string_equal(str(args(ka), "call"), "cudaLaunchKernel");
	assert_true(num(kb, "ts") == 2.5 && num(kb, "dur") == 1.0);
	assert_true(num(late, "ts") == 2.4 && num(late, "dur") == 0.4);
	assert_int_equal(num(args(late), "start_moved_ns"), 100);
	const cJSON *copy = find(events, "i", "cudaMemcpyAsync", sa);
	assert_string_equal(str(args(copy), "clock"), "host");
	assert_true(num(copy, "ts") == 2.4);
	/* The record marker sits at the end of A's work before it; the wait no earlier. */
	const cJSON *rec = find(events, "X", "record", sa), *wait = find(events, "X", "wait", sb);
	assert_true(num(rec, "ts") == 2.4 && num(rec, "dur") == 0);
	assert_true(num(wait, "ts") == 2.4);
	assert_int_equal(num(rec, "bind_id"), num(wait, "bind_id"));
	assert_int_equal(stats.flows, 1);
	assert_int_equal(num(other, "cross_stream_waits"), 1);
	/* Streams A and B, host threads 7 and 8. */
	assert_int_equal(stats.tracks, 4);
	assert_true(track_named(events, "thread 7", "(API calls)") == 7);
	/* Memory: 0, 4096, 0. */
	const cJSON *c;
	double top = 0, last = -1;
	cJSON_ArrayForEach(c, events)
	{
		if (!strcmp(str(c, "name"), "device memory")) {
			last = num(args(c), "bytes");
			top = last > top ? last : top;
		}
	}
	assert_true(top == 4096 && last == 0);
	cJSON_Delete(root);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

static void test_chrome_trace_write_is_atomic_and_names_unwritable_path(void **state)
{
	struct lynx_prof_trace empty = {.pid = 9};
	char dir[] = "/tmp/test-chrome.XXXXXX", path[96], why[256], cmd[96];
	struct lynx_prof_chrome_stats stats;
	struct dirent *d;
	int files = 0;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/trace.json", dir);
	cJSON *root = write_and_check(&empty, NULL, NULL, path, &stats, NULL);
	cJSON_Delete(root);
	root = write_and_check(&empty, NULL, NULL, path, &stats, NULL); /* replaces it */
	assert_int_equal(stats.metadata, 2);                            /* process name, order */
	cJSON_Delete(root);
	DIR *dh = opendir(dir);
	assert_non_null(dh);
	while ((d = readdir(dh)))
		files += d->d_name[0] != '.';
	closedir(dh);
	assert_int_equal(files, 1);
	snprintf(path, sizeof(path), "%s/missing/trace.json", dir);
	assert_int_equal(lynx_prof_write_chrome_trace(&empty, NULL, NULL, path, why, sizeof(why)),
	                 -ENOENT);
	assert_non_null(strstr(why, path));
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

/* ---- The checker ------------------------------------------------------------------------------
 */

static void test_chrome_check_accepts_nested_slices_flows_and_counters(void **state)
{
	static const char good[] =
	        "{\"traceEvents\":["
	        "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":1,\"args\":{\"name\":\"p\"}},"
	        "{\"ph\":\"X\",\"name\":\"a\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":10},"
	        "{\"ph\":\"X\",\"name\":\"b\",\"pid\":1,\"tid\":1,\"ts\":2,\"dur\":3},"
	        "{\"ph\":\"X\",\"name\":\"b0\",\"pid\":1,\"tid\":1,\"ts\":5,\"dur\":0},"
	        "{\"ph\":\"X\",\"name\":\"c\",\"pid\":1,\"tid\":1,\"ts\":10,\"dur\":1.5},"
	        "{\"ph\":\"X\",\"name\":\"other track\",\"pid\":1,\"tid\":2,\"ts\":5,\"dur\":10},"
	        "{\"ph\":\"B\",\"name\":\"outer\",\"pid\":2,\"tid\":1,\"ts\":1},"
	        "{\"ph\":\"B\",\"name\":\"inner\",\"pid\":2,\"tid\":1,\"ts\":2},"
	        "{\"ph\":\"E\",\"pid\":2,\"tid\":1,\"ts\":3},"
	        "{\"ph\":\"E\",\"name\":\"outer\",\"pid\":2,\"tid\":1,\"ts\":4},"
	        "{\"ph\":\"s\",\"name\":\"f\",\"cat\":\"x\",\"id\":7,\"pid\":1,\"tid\":1,\"ts\":1},"
	        "{\"ph\":\"f\",\"name\":\"f\",\"cat\":\"x\",\"id\":7,\"pid\":1,\"tid\":2,\"ts\":6,"
	        "\"bp\":\"e\"},"
	        "{\"ph\":\"X\",\"name\":\"r\",\"pid\":1,\"tid\":3,\"ts\":1,\"dur\":0,\"bind_id\":7,"
	        "\"flow_out\":true},"
	        "{\"ph\":\"X\",\"name\":\"w\",\"pid\":1,\"tid\":4,\"ts\":2,\"dur\":0,\"bind_id\":7,"
	        "\"flow_in\":true},"
	        "{\"ph\":\"C\",\"name\":\"mem\",\"pid\":1,\"ts\":0,\"args\":{\"a\":1,\"b\":2.5}},"
	        "{\"ph\":\"i\",\"name\":\"g\",\"pid\":1,\"ts\":3,\"s\":\"g\"},"
	        "{\"ph\":\"i\",\"name\":\"t\",\"pid\":1,\"tid\":5,\"ts\":3,\"s\":\"t\"}"
	        "]}";
	struct lynx_prof_chrome_stats stats;
	char why[256];

	(void)state;
	if (lynx_prof_chrome_check(good, strlen(good), &stats, why, sizeof(why)))
		fail_msg("%s", why);
	assert_int_equal(stats.events, 17);
	assert_int_equal(stats.slices, 9); /* 7 X and 2 B/E pairs */
	assert_int_equal(stats.flows, 2);  /* one v1, one v2 (ids apart) */
	assert_int_equal(stats.counters, 1);
	assert_int_equal(stats.instants, 2);
	assert_int_equal(stats.metadata, 1);
	assert_int_equal(stats.tracks, 6); /* 1/1 1/2 1/3 1/4 1/5 2/1 */
	/* A bare array is a trace too. */
	assert_int_equal(lynx_prof_chrome_check("[]", 2, &stats, why, sizeof(why)), 0);
	assert_int_equal(stats.events, 0);
}

static void test_chrome_check_refuses_bad_traces_with_the_event(void **state)
{
#define EV_X(name, tid, ts, dur)                                                     \
	"{\"ph\":\"X\",\"name\":\"" name "\",\"pid\":1,\"tid\":" #tid ",\"ts\":" #ts \
	",\"dur\":" #dur "}"
	static const struct {
		const char *text, *want;
	} cases[] = {
	        {"[" EV_X("a", 1, 0, 10) "," EV_X("b", 1, 5, 10) "]",
	         "traceEvents[1] (\"b\", 5.000 to 15.000 us) partly overlaps traceEvents[0] "
	         "(\"a\", 0.000 to 10.000 us) on pid 1 tid 1"},
	        {"[" EV_X("a", 1, 0, 10) "," EV_X("b", 1, 2, 3) "," EV_X("c", 1, 4, 2) "]",
	         "traceEvents[2] (\"c\", 4.000 to 6.000 us) partly overlaps traceEvents[1]"},
	        {"[" EV_X("a", 1, 0, -1) "]",
	         "traceEvents[0] (X \"a\"): \"dur\" missing, not a number or negative"},
	        {"[{\"ph\":\"X\",\"name\":\"a\",\"pid\":1,\"tid\":1,\"ts\":0}]", "\"dur\" missing"},
	        {"[{\"ph\":\"s\",\"name\":\"f\",\"id\":3,\"pid\":1,\"tid\":1,\"ts\":0}]",
	         "traceEvents[0]: flow id 3 starts and never ends ('f')"},
	        {"[{\"ph\":\"f\",\"name\":\"f\",\"id\":\"x\",\"pid\":1,\"tid\":1,\"ts\":0}]",
	         "traceEvents[0]: flow id x ends without a start ('s') before it"},
	        {"[{\"ph\":\"s\",\"name\":\"f\",\"id\":3,\"pid\":1,\"tid\":1,\"ts\":0},"
	         "{\"ph\":\"f\",\"name\":\"f\",\"id\":3,\"pid\":1,\"tid\":1,\"ts\":1},"
	         "{\"ph\":\"f\",\"name\":\"f\",\"id\":3,\"pid\":1,\"tid\":1,\"ts\":2}]",
	         "traceEvents[2]: flow id 3 ends without a start"},
	        {"[{\"ph\":\"s\",\"name\":\"f\",\"cat\":\"a\",\"id\":3,\"pid\":1,\"tid\":1,\"ts\":"
	         "0},"
	         "{\"ph\":\"f\",\"name\":\"f\",\"cat\":\"b\",\"id\":3,\"pid\":1,\"tid\":1,\"ts\":1}"
	         "]",
	         "flow id 3"},
	        {"[{\"ph\":\"X\",\"name\":\"r\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":0,\"bind_id\":"
	         "5,"
	         "\"flow_out\":true}]",
	         "traceEvents[0]: bind_id 5 has flow_out but no flow_in"},
	        {"[{\"ph\":\"X\",\"name\":\"r\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":0,"
	         "\"flow_in\":true}]",
	         "flow_in or flow_out without a \"bind_id\""},
	        {"[{\"ph\":\"B\",\"name\":\"a\",\"pid\":1,\"tid\":1,\"ts\":0}]",
	         "traceEvents[0] (B \"a\"): never ended"},
	        {"[{\"ph\":\"B\",\"name\":\"a\",\"pid\":1,\"tid\":1,\"ts\":0},"
	         "{\"ph\":\"B\",\"name\":\"b\",\"pid\":1,\"tid\":1,\"ts\":1},"
	         "{\"ph\":\"E\",\"name\":\"a\",\"pid\":1,\"tid\":1,\"ts\":2}]",
	         "traceEvents[2] (E \"a\"): ends B \"b\" (traceEvents[1])"},
	        {"[{\"ph\":\"E\",\"pid\":1,\"tid\":1,\"ts\":0}]", "ends no open B on pid 1 tid 1"},
	        {"[{\"ph\":\"B\",\"name\":\"a\",\"pid\":1,\"tid\":1,\"ts\":0},"
	         "{\"ph\":\"E\",\"pid\":1,\"tid\":2,\"ts\":1}]",
	         "never ended on its track"},
	        {"[{\"ph\":\"C\",\"name\":\"m\",\"pid\":1,\"ts\":0,\"args\":{\"a\":\"1\"}}]",
	         "traceEvents[0] (C \"m\"): args.a is not a number"},
	        {"[{\"ph\":\"C\",\"name\":\"m\",\"pid\":1,\"ts\":0,\"args\":{}}]",
	         "\"args\" must be an object of numbers"},
	        {"[{\"ph\":\"X\",\"name\":\"a\",\"pid\":1,\"ts\":0,\"dur\":1}]",
	         "traceEvents[0] ('X' \"a\"): no numeric \"tid\""},
	        {"[{\"ph\":\"X\",\"name\":\"a\",\"tid\":1,\"ts\":0,\"dur\":1}]",
	         "no numeric \"pid\""},
	        {"[{\"ph\":\"i\",\"name\":\"a\",\"pid\":1,\"tid\":1}]", "\"ts\" missing"},
	        {"[{\"ph\":\"i\",\"name\":\"a\",\"pid\":1,\"tid\":1,\"ts\":-2}]", "negative"},
	        {"[{\"ph\":\"Q\",\"name\":\"a\",\"pid\":1,\"tid\":1,\"ts\":0}]",
	         "traceEvents[0]: \"ph\" missing or not a known phase"},
	        {"[{\"ph\":\"i\",\"pid\":1,\"tid\":1,\"ts\":0}]", "no string \"name\""},
	        {"[{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":1}]",
	         "\"args\" must be an object"},
	        {"[7]", "traceEvents[0]: not an object"},
	        {"{\"events\":[]}", "not a trace: expected an array of events or an object"},
	        {"[{\"ph\":\"X\"} x]",
	         "not valid JSON: parsing stopped at byte 12 (line 1, column 13)"},
	        {"[{\"ph\":\"X\",",
	         "not valid JSON: the text ends early (after 11 bytes, inside an unclosed"},
	};
#undef EV_X
	char why[512];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		why[0] = '\0';
		int err = lynx_prof_chrome_check(cases[i].text, strlen(cases[i].text), NULL, why,
		                                 sizeof(why));
		if (err != -EINVAL || !strstr(why, cases[i].want))
			fail_msg("case %zu: wanted \"%s\", got %d \"%s\"", i, cases[i].want, err,
			         why);
	}
	assert_int_equal(lynx_prof_chrome_check("[]\0", 3, NULL, why, sizeof(why)), -EINVAL);
	assert_string_equal(why, "not valid JSON: a NUL byte at byte 2");
}

/* Every truncation of a valid trace is refused with a reason, never accepted or crashed on. */
static void test_chrome_check_refuses_every_truncation(void **state)
{
	struct lynx_prof_event e[2];
	struct lynx_prof_trace t = {.pid = 5, .events = e, .count = 2};
	char dir[] = "/tmp/test-chrome.XXXXXX", path[64], why[512], cmd[96];
	size_t len;

	(void)state;
	e[0] = ev(10, 5, "cudaLaunchKernel", LYNX_PROF_LAUNCH, false, 1);
	e[0].dev_start_ns = 1;
	e[0].dev_end_ns = 4;
	e[1] = ev(20, 5, "cudaDeviceSynchronize", LYNX_PROF_SYNC, false, 0);
	e[0].index = 0;
	e[1].index = 1;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/t.json", dir);
	assert_int_equal(lynx_prof_write_chrome_trace(&t, NULL, NULL, path, why, sizeof(why)), 0);
	char *text = slurp_file(path, &len);
	assert_int_equal(lynx_prof_chrome_check(text, len, NULL, why, sizeof(why)), 0);
	for (size_t n = 0; n + 2 < len; n++) {
		why[0] = '\0';
		assert_int_equal(lynx_prof_chrome_check(text, n, NULL, why, sizeof(why)), -EINVAL);
		assert_true(why[0] != '\0');
	}
	free(text);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_chrome_trace_tinytrain_tracks_layers_memory_and_flows),
	        cmocka_unit_test(test_chrome_trace_device_times_slices_and_one_flow),
	        cmocka_unit_test(test_chrome_trace_write_is_atomic_and_names_unwritable_path),
	        cmocka_unit_test(test_chrome_check_accepts_nested_slices_flows_and_counters),
	        cmocka_unit_test(test_chrome_check_refuses_bad_traces_with_the_event),
	        cmocka_unit_test(test_chrome_check_refuses_every_truncation),
	};

	if (argc < 1 || record_init(argv[0])) {
		fprintf(stderr, "cannot find the build directory from %s\n", argc ? argv[0] : "?");
		return 1;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
