/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The event dump (LYNX_EVENTS, shim/dump.c): each payload written as dump.h documents, long
 * lines across buffer writes; and under LD_PRELOAD on simgpu, one file per process whose
 * every line is strict JSON, with exactly as many events as the recorder counted, launch
 * parameters and nested launches as recorded (launch configs too: each launch once, its
 * attributes with the driver launch), through exit, fork and SIGTERM; nothing written
 * without the setting, one warning and no other change with a bad path.
 */
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include <cjson/cJSON.h>

#include "../harness.h"
#include "dump.h"
#include "launch_attrs.h"
#include "recorder.h"

/* tinytrain's tt_gemm: 15 parameters and the virtual cost (tests/tinytrain/kernels_table.h),
 * packed as CUDA packs them: six ints, then pointers and strides, two floats, a pointer
 * and the 16-byte cost, 104 bytes in all. */
#define GEMM_PARAMS 16
#define GEMM_PARAM_BYTES 104

/* ---- Reading a dump, strictly ----------------------------------------------------------- */

/* Each kind's payload keys, from the same list the shim expands (events.def). */
static const struct {
	const char *kind, *payload;
} kinds[] = {
#define LYNX_EVENT(id, name, payload) {name, #payload},
#include "events.def"
#undef LYNX_EVENT
};

static const char *const common_keys[] = {"t",      "tid",    "hook",   "kind",
                                          "result", "stream", "nested", "captured"};

static const struct {
	const char *payload;
	const char *keys[10]; /* NULL-terminated */
} payload_keys[] = {
        {"none", {NULL}},
        {"mem", {"ptr", "bytes"}},
        {"copy", {"dst", "src", "bytes", "dir"}},
        {"launch",
         {"function", "name", "grid", "block", "shared", "params", "param_count", "attrs",
          "attr_count"}},
        {"sync", {"handle"}},
        {"nccl", {"comm", "send", "recv", "count", "type", "op", "peer", "group_depth"}},
};

static bool is_pointer(const cJSON *v)
{
	const char *s = cJSON_GetStringValue(v);

	return s && !strncmp(s, "0x", 2) && strlen(s) > 2 && strlen(s) <= 18 &&
	       strspn(s + 2, "0123456789abcdef") == strlen(s + 2);
}

static const char *const pointer_keys[] = {"stream", "ptr",  "dst",  "src", "function",
                                           "handle", "comm", "send", "recv"};

/* Fails unless ev has exactly the common keys and its kind's payload keys, typed right. */
static void check_event(const cJSON *ev, const char *line)
{
	const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ev, "kind"));
	const char *payload = NULL;
	int want = 0;

	if (!kind)
		fail_msg("no kind: %s", line);
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (!strcmp(kinds[i].kind, kind))
			payload = kinds[i].payload;
	if (!payload)
		fail_msg("unknown kind: %s", line);
	for (size_t i = 0; i < sizeof(common_keys) / sizeof(common_keys[0]); i++, want++)
		if (!cJSON_GetObjectItemCaseSensitive(ev, common_keys[i]))
			fail_msg("no \"%s\": %s", common_keys[i], line);
	for (size_t p = 0; p < sizeof(payload_keys) / sizeof(payload_keys[0]); p++) {
		if (strcmp(payload_keys[p].payload, payload))
			continue;
		for (const char *const *k = payload_keys[p].keys; *k; k++, want++)
			if (!cJSON_GetObjectItemCaseSensitive(ev, *k))
				fail_msg("no \"%s\": %s", *k, line);
	}
	if (cJSON_GetArraySize(ev) != want)
		fail_msg("%d keys, want %d: %s", cJSON_GetArraySize(ev), want, line);
	for (size_t i = 0; i < sizeof(pointer_keys) / sizeof(pointer_keys[0]); i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(ev, pointer_keys[i]);
		if (v && !is_pointer(v))
			fail_msg("\"%s\" is not a \"0x..\" string: %s", pointer_keys[i], line);
	}
	if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(ev, "t")) ||
	    !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(ev, "tid")) ||
	    !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(ev, "hook")) ||
	    !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(ev, "result")) ||
	    !cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(ev, "nested")) ||
	    !cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(ev, "captured")))
		fail_msg("a common key has the wrong type: %s", line);
}

/*
 * Reads a dump: the header (format, version, pid, hooks), then one strict JSON object per
 * line, each checked by check_event. Returns the events as a cJSON array (the caller
 * deletes it). pid 0: any; hooks 0: liblynx.so's (over a hundred).
 */
static cJSON *load_dump(const char *path, int pid, int hooks)
{
	char *text = slurp(path), *line, *end;
	cJSON *events = cJSON_CreateArray(), *header;
	const char *parse_end;

	if (!text)
		fail_msg("cannot read %s", path);
	if (*text && text[strlen(text) - 1] != '\n')
		fail_msg("%s does not end with a newline", path);
	end = strchr(text, '\n');
	assert_non_null(end);
	*end = 0;
	header = cJSON_ParseWithOpts(text, &parse_end, true);
	if (!header)
		fail_msg("%s: the header is not JSON: %s", path, text);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(header, "format")),
	                    "lynx-events");
	assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(header, "version")), 1);
	if (pid)
		assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(header, "pid")), pid);
	if (hooks)
		assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(header, "hooks")), hooks);
	else
		assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(header, "hooks")) > 100);
	assert_int_equal(cJSON_GetArraySize(header), 4);
	cJSON_Delete(header);

	for (line = end + 1; *line; line = end + 1) {
		end = strchr(line, '\n');
		*end = 0;
		cJSON *ev = cJSON_ParseWithOpts(line, &parse_end, true);
		if (!cJSON_IsObject(ev))
			fail_msg("%s: not a JSON object: %s", path, line);
		check_event(ev, line);
		cJSON_AddItemToArray(events, ev);
	}
	free(text);
	return events;
}

static const char *str(const cJSON *ev, const char *key)
{
	const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ev, key));

	return s ? s : "";
}

static double num(const cJSON *ev, const char *key)
{
	return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(ev, key));
}

static bool flag(const cJSON *ev, const char *key)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ev, key));
}

/* ---- The dump module on its own ---------------------------------------------------------- */

static const char *test_hook_name(unsigned int id)
{
	static const char *const names[] = {"cudaMalloc", "cuLaunchKernel", "ncclAllReduce"};

	return id < 3 ? names[id] : NULL;
}

/* An event with room for payload bytes after it (8-byte aligned, like a ring's). */
struct test_event {
	struct lynx_event ev;
	unsigned char payload[8192];
};

static struct lynx_event *event(struct test_event *t, uint16_t hook, uint8_t kind, size_t payload)
{
	memset(t, 0, sizeof(*t));
	t->ev.size = (uint32_t)((sizeof(t->ev) + payload + 7) & ~(size_t)7);
	t->ev.hook = hook;
	t->ev.kind = kind;
	t->ev.tid = 42;
	t->ev.host_ns = 1000;
	return &t->ev;
}

/* A prefix in the scratch directory, and the file this process writes for it. */
static void unit_paths(const char *name, char prefix[1200], char path[1300])
{
	snprintf(prefix, 1200, "%s/%s", scratch, name);
	snprintf(path, 1300, "%s.%d.jsonl", prefix, (int)getpid());
}

static void test_each_payload_is_written_as_documented(void **state)
{
	char prefix[1200], path[1300];
	struct test_event t;
	struct lynx_event *ev;

	unit_paths("unit", prefix, path);
	assert_int_equal(lynx_dump_open(prefix, test_hook_name, 3, NULL), 0);

	ev = event(&t, 0, LYNX_EV_ALLOC, 0);
	ev->u.mem.ptr = 0x7f00dead0000;
	ev->u.mem.bytes = 4096;
	ev->stream = 0x1f;
	ev->flags = LYNX_EVENT_NESTED;
	lynx_dump_event(ev, NULL);

	ev = event(&t, 0, LYNX_EV_COPY, 0);
	ev->u.copy.dst = 1;
	ev->u.copy.src = 0xffffffffffffffff;
	ev->u.copy.bytes = 12;
	ev->u.copy.direction = 2;
	ev->result = -3;
	lynx_dump_event(ev, NULL);

	ev = event(&t, 1, LYNX_EV_LAUNCH, 5);
	ev->u.launch.function = 0xabc;
	ev->u.launch.grid[0] = 7;
	ev->u.launch.grid[1] = 1;
	ev->u.launch.grid[2] = 2;
	ev->u.launch.block[0] = 256;
	ev->u.launch.block[1] = 1;
	ev->u.launch.block[2] = 1;
	ev->u.launch.shared_mem = 48;
	ev->u.launch.param_count = 2;
	ev->u.launch.param_bytes = 5;
	memcpy(t.payload, "\x00\x01\xab\xff\x10", 5);
	ev->flags = LYNX_EVENT_CAPTURED;
	lynx_dump_event(ev, NULL);

	ev = event(&t, 0, LYNX_EV_SYNC, 0);
	ev->u.sync.handle = 0x99;
	lynx_dump_event(ev, NULL);

	ev = event(&t, 2, LYNX_EV_COLL, 0);
	ev->u.nccl.comm = 0xc0;
	ev->u.nccl.sendbuf = 0x10;
	ev->u.nccl.recvbuf = 0x20;
	ev->u.nccl.count = 1024;
	ev->u.nccl.datatype = 7;
	ev->u.nccl.op = 0;
	ev->u.nccl.peer = -1;
	ev->u.nccl.group_depth = 1;
	lynx_dump_event(ev, NULL);

	lynx_dump_event(event(&t, 0, LYNX_EV_OTHER, 0), NULL);
	lynx_dump_event(event(&t, 9, LYNX_EV_OTHER, 0), NULL); /* a hook id out of range */
	lynx_dump_close();
	lynx_dump_event(event(&t, 0, LYNX_EV_OTHER, 0), NULL); /* after close: not written */

	cJSON *events = load_dump(path, getpid(), 3);
	assert_int_equal(cJSON_GetArraySize(events), 7);
	cJSON *e = cJSON_GetArrayItem(events, 0);
	assert_string_equal(str(e, "hook"), "cudaMalloc");
	assert_string_equal(str(e, "kind"), "alloc");
	assert_string_equal(str(e, "ptr"), "0x7f00dead0000");
	assert_int_equal(num(e, "bytes"), 4096);
	assert_string_equal(str(e, "stream"), "0x1f");
	assert_int_equal(num(e, "t"), 1000);
	assert_int_equal(num(e, "tid"), 42);
	assert_true(flag(e, "nested"));
	assert_false(flag(e, "captured"));

	e = cJSON_GetArrayItem(events, 1);
	assert_string_equal(str(e, "kind"), "copy");
	assert_string_equal(str(e, "dst"), "0x1");
	assert_string_equal(str(e, "src"), "0xffffffffffffffff");
	assert_int_equal(num(e, "dir"), 2);
	assert_int_equal(num(e, "result"), -3);
	assert_string_equal(str(e, "stream"), "0x0");

	e = cJSON_GetArrayItem(events, 2);
	assert_string_equal(str(e, "hook"), "cuLaunchKernel");
	assert_string_equal(str(e, "function"), "0xabc");
	char *grid = cJSON_PrintUnformatted(cJSON_GetObjectItem(e, "grid"));
	char *block = cJSON_PrintUnformatted(cJSON_GetObjectItem(e, "block"));
	assert_string_equal(grid, "[7,1,2]");
	assert_string_equal(block, "[256,1,1]");
	free(grid);
	free(block);
	assert_int_equal(num(e, "shared"), 48);
	assert_string_equal(str(e, "params"), "0001abff10");
	assert_int_equal(num(e, "param_count"), 2);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(e, "attrs")), 0);
	assert_int_equal(num(e, "attr_count"), 0);
	assert_true(flag(e, "captured"));
	assert_false(flag(e, "nested"));

	e = cJSON_GetArrayItem(events, 3);
	assert_string_equal(str(e, "kind"), "sync");
	assert_string_equal(str(e, "handle"), "0x99");

	e = cJSON_GetArrayItem(events, 4);
	assert_string_equal(str(e, "hook"), "ncclAllReduce");
	assert_string_equal(str(e, "kind"), "collective");
	assert_string_equal(str(e, "comm"), "0xc0");
	assert_string_equal(str(e, "send"), "0x10");
	assert_string_equal(str(e, "recv"), "0x20");
	assert_int_equal(num(e, "count"), 1024);
	assert_int_equal(num(e, "type"), 7);
	assert_int_equal(num(e, "op"), 0);
	assert_int_equal(num(e, "peer"), -1);
	assert_int_equal(num(e, "group_depth"), 1);

	assert_string_equal(str(cJSON_GetArrayItem(events, 5), "kind"), "other");
	assert_string_equal(str(cJSON_GetArrayItem(events, 6), "hook"), "unknown");
	cJSON_Delete(events);
}

/* Lines of 3000 parameter bytes (6000 hex digits) across many 64 KiB writes, and a record
 * whose param_bytes claims more than it holds. */
static void test_long_lines_cross_buffer_writes_intact(void **state)
{
	char prefix[1200], path[1300];
	struct test_event t;
	const int launches = 100;

	unit_paths("long", prefix, path);
	assert_int_equal(lynx_dump_open(prefix, test_hook_name, 3, NULL), 0);
	for (int i = 0; i < launches; i++) {
		struct lynx_event *ev = event(&t, 1, LYNX_EV_LAUNCH, 3000);
		ev->u.launch.param_bytes = 3000;
		ev->u.launch.param_count = (uint32_t)i;
		for (int b = 0; b < 3000; b++)
			t.payload[b] = (unsigned char)(i + b);
		lynx_dump_event(ev, NULL);
	}
	struct lynx_event *short_record = event(&t, 1, LYNX_EV_LAUNCH, 8);
	short_record->u.launch.param_bytes = 5000;
	memset(t.payload, 0xee, sizeof(t.payload));
	lynx_dump_event(short_record, NULL);
	lynx_dump_close();

	cJSON *events = load_dump(path, getpid(), 3);
	assert_int_equal(cJSON_GetArraySize(events), launches + 1);
	for (int i = 0; i < launches; i++) {
		const char *hex = str(cJSON_GetArrayItem(events, i), "params");
		char want[3];
		assert_int_equal(strlen(hex), 6000);
		assert_int_equal(num(cJSON_GetArrayItem(events, i), "param_count"), i);
		snprintf(want, sizeof(want), "%02x", (unsigned char)(i + 2999));
		assert_memory_equal(hex + 5998, want, 2);
	}
	assert_string_equal(str(cJSON_GetArrayItem(events, launches), "params"),
	                    "eeeeeeeeeeeeeeee");
	cJSON_Delete(events);
}

/* A launch config's attributes: their ids after the parameters; a launch with more than a
 * record holds lists those it holds and counts them all. */
static void test_a_launch_config_is_written_with_its_attribute_ids(void **state)
{
	char prefix[1200], path[1300];
	struct test_event t;
	CUlaunchAttribute attrs[LYNX_LAUNCH_MAX_ATTRS + 1];
	struct lynx_event *ev;

	memset(attrs, 0, sizeof(attrs));
	for (int i = 0; i <= LYNX_LAUNCH_MAX_ATTRS; i++)
		attrs[i].id = (CUlaunchAttributeID)(i + 1);
	unit_paths("config", prefix, path);
	assert_int_equal(lynx_dump_open(prefix, test_hook_name, 3, NULL), 0);
	/* The hook writes past the header, into the record: give it the whole record. */
	ev = event(&t, 1, LYNX_EV_LAUNCH, lynx_launch_payload_bytes(5, true, 2));
	ev->u.launch.param_bytes = 5;
	memcpy(t.payload, "\x00\x01\xab\xff\x10", 5);
	lynx_launch_attrs_record((struct lynx_event *)(void *)&t,
	                         (CUlaunchAttribute[]){attrs[3], attrs[5]}, 2);
	lynx_dump_event(ev, NULL);
	ev = event(&t, 1, LYNX_EV_LAUNCH,
	           lynx_launch_payload_bytes(0, true, LYNX_LAUNCH_MAX_ATTRS + 1));
	lynx_launch_attrs_record((struct lynx_event *)(void *)&t, attrs, LYNX_LAUNCH_MAX_ATTRS + 1);
	lynx_dump_event(ev, NULL);
	lynx_dump_close();

	cJSON *events = load_dump(path, getpid(), 3);
	assert_int_equal(cJSON_GetArraySize(events), 2);
	cJSON *e = cJSON_GetArrayItem(events, 0);
	char *ids = cJSON_PrintUnformatted(cJSON_GetObjectItem(e, "attrs"));
	assert_string_equal(ids, "[4,6]");
	free(ids);
	assert_int_equal(num(e, "attr_count"), 2);
	assert_string_equal(str(e, "params"), "0001abff10"); /* the attributes are not params */
	e = cJSON_GetArrayItem(events, 1);
	ids = cJSON_PrintUnformatted(cJSON_GetObjectItem(e, "attrs"));
	assert_string_equal(ids, "[1,2,3,4,5,6,7,8]");
	free(ids);
	assert_int_equal(num(e, "attr_count"), LYNX_LAUNCH_MAX_ATTRS + 1);
	cJSON_Delete(events);
}

static void test_an_uncreatable_file_leaves_the_dump_off(void **state)
{
	struct test_event t;

	assert_true(lynx_dump_open("/proc/lynx-cannot/ev", test_hook_name, 3, NULL) < 0);
	lynx_dump_event(event(&t, 0, LYNX_EV_OTHER, 0), NULL); /* ignored */
	lynx_dump_flush();
	lynx_dump_close();
	assert_true(lynx_dump_open("", test_hook_name, 3, NULL) < 0);
}

/* ---- Under LD_PRELOAD on simgpu ----------------------------------------------------------- */

/* A fresh directory under scratch. */
static void fresh_dir(char *dir, size_t len, const char *name)
{
	snprintf(dir, len, "%s/%s", scratch, name);
	assert_int_equal(mkdir(dir, 0755), 0);
}

/* Runs cmd under the shim with LYNX_OUT=dir and LYNX_EVENTS=dir/ev; it must succeed
 * quietly. Returns its stdout (the caller frees it). */
/* Device timing off: its event records cost virtual time, and simgpu's example prints
 * its host clock. No online profile (LYNX_WARMUP=0): these runs are too short to learn
 * from, and a profile-mode run that learns nothing says so. */
static char *run_dumped(const char *dir, const char *cmd)
{
	char env[4096];

	snprintf(env, sizeof(env),
	         "LD_PRELOAD=%s/liblynx.so LYNX_MODE=profile LYNX_TIMING=off LYNX_WARMUP=0 "
	         "LYNX_OUT=%s LYNX_EVENTS=%s/ev",
	         build_dir, dir, dir);
	struct output o = run(env, cmd);
	if (o.exit_code)
		fail_msg("%s exited %d: %s", cmd, o.exit_code, o.err);
	assert_string_equal(o.err, "");
	free(o.err);
	return o.out;
}

#define MAX_PIDS 16

/* The pids of the files dir holds named <stem>.<pid>.<ext>; returns how many. */
static int pids_of(const char *dir, const char *stem, const char *ext, int pids[MAX_PIDS])
{
	DIR *d = opendir(dir);
	struct dirent *entry;
	int n = 0;

	assert_non_null(d);
	while ((entry = readdir(d))) {
		const char *name = entry->d_name;
		char *end;
		if (strncmp(name, stem, strlen(stem)) || name[strlen(stem)] != '.')
			continue;
		long pid = strtol(name + strlen(stem) + 1, &end, 10);
		if (pid <= 0 || *end != '.' || strcmp(end + 1, ext))
			continue;
		assert_true(n < MAX_PIDS);
		pids[n++] = (int)pid;
	}
	closedir(d);
	return n;
}

/* A number of calls.<pid>.json's "recorder" object, or -1 without a calls file. */
static long recorder_value(const char *dir, int pid, const char *key)
{
	char path[1300];
	long v = -1;

	snprintf(path, sizeof(path), "%s/calls.%d.json", dir, pid);
	char *text = slurp(path);
	if (!text)
		return -1;
	cJSON *calls = cJSON_Parse(text);
	assert_non_null(calls);
	cJSON *n = cJSON_GetObjectItem(cJSON_GetObjectItem(calls, "recorder"), key);
	if (cJSON_IsNumber(n))
		v = (long)cJSON_GetNumberValue(n);
	cJSON_Delete(calls);
	free(text);
	return v;
}

static cJSON *load_process(const char *dir, int pid)
{
	char path[1300];

	snprintf(path, sizeof(path), "%s/ev.%d.jsonl", dir, pid);
	return load_dump(path, pid, 0);
}

/* Every process that wrote calls.<pid>.json wrote ev.<pid>.jsonl, and the reverse, with
 * one line per event the recorder counted and none dropped. Returns the processes. */
static int check_every_process_dumped_every_event(const char *dir)
{
	int dumps[MAX_PIDS], calls[MAX_PIDS];
	int n = pids_of(dir, "ev", "jsonl", dumps);

	assert_int_equal(pids_of(dir, "calls", "json", calls), n);
	for (int i = 0; i < n; i++) {
		cJSON *events = load_process(dir, dumps[i]);
		long recorded = recorder_value(dir, dumps[i], "recorded");
		if (cJSON_GetArraySize(events) != recorded)
			fail_msg("pid %d: %d event lines, %ld events recorded", dumps[i],
			         cJSON_GetArraySize(events), recorded);
		assert_int_equal(recorder_value(dir, dumps[i], "dropped"), 0);
		cJSON_Delete(events);
	}
	return n;
}

static const char tinytrain_args[] = "--nproc 1 --layers 2 --steps 1";

/* tinytrain (1 rank, 2 layers, 1 step), dumped once into scratch/tinytrain. */
static const char *tinytrain_dir(void)
{
	static char dir[1200];
	char cmd[2048];

	if (!dir[0]) {
		fresh_dir(dir, sizeof(dir), "tinytrain");
		snprintf(cmd, sizeof(cmd), "%s/bin/tinytrain %s", build_dir, tinytrain_args);
		free(run_dumped(dir, cmd));
	}
	return dir;
}

/* The rank's dump: the process with the most events (the launcher only makes an id). */
static cJSON *tinytrain_rank_events(void)
{
	int pids[MAX_PIDS], n = pids_of(tinytrain_dir(), "ev", "jsonl", pids);
	cJSON *best = NULL;

	for (int i = 0; i < n; i++) {
		cJSON *events = load_process(tinytrain_dir(), pids[i]);
		if (!best || cJSON_GetArraySize(events) > cJSON_GetArraySize(best)) {
			cJSON_Delete(best);
			best = events;
		} else {
			cJSON_Delete(events);
		}
	}
	assert_non_null(best);
	return best;
}

static void test_tinytrain_dumps_each_recorded_event_once(void **state)
{
	/* The launcher and its one rank. */
	assert_int_equal(check_every_process_dumped_every_event(tinytrain_dir()), 2);
	cJSON *events = tinytrain_rank_events();
	assert_true(cJSON_GetArraySize(events) > 500);
	cJSON_Delete(events);
}

/* Driver launches carry their parameter bytes; runtime launches record none. tt_gemm's
 * bytes decode to its transposes (0 or 1) and positive sizes. */
static void test_launch_lines_carry_their_parameter_bytes(void **state)
{
	cJSON *events = tinytrain_rank_events(), *ev;
	int gemms = 0, driver = 0, runtime = 0;

	cJSON_ArrayForEach(ev, events)
	{
		if (strcmp(str(ev, "kind"), "launch"))
			continue;
		const char *hex = str(ev, "params");
		if (!strcmp(str(ev, "hook"), "cudaLaunchKernel")) {
			assert_string_equal(hex, "");
			assert_int_equal(num(ev, "param_count"), 0);
			runtime++;
			continue;
		}
		assert_string_equal(str(ev, "hook"), "cuLaunchKernel");
		assert_true(num(ev, "param_count") > 0);
		assert_true(strlen(hex) > 0 && strlen(hex) % 2 == 0);
		driver++;
		if (num(ev, "param_count") != GEMM_PARAMS)
			continue;
		assert_int_equal(strlen(hex), 2 * GEMM_PARAM_BYTES);
		int32_t ints[6];
		for (int i = 0; i < 6; i++) {
			unsigned char b[4];
			for (int k = 0; k < 4; k++)
				assert_int_equal(sscanf(hex + 8 * i + 2 * k, "%2hhx", &b[k]), 1);
			memcpy(&ints[i], b, 4);
		}
		assert_in_range(ints[0], 0, 1); /* trans_a */
		assert_in_range(ints[1], 0, 1); /* trans_b */
		for (int i = 2; i < 6; i++)     /* batch, m, n, k */
			assert_in_range(ints[i], 1, 1 << 20);
		gemms++;
	}
	assert_true(gemms >= 8); /* two layers: several matrix products each way */
	assert_int_equal(driver, runtime);
	cJSON_Delete(events);
}

/* The runtime's cuLaunchKernel is nested and committed first: the thread's next event is
 * the cudaLaunchKernel that made it, not nested, with the same geometry and stream. */
static void test_nested_driver_launches_are_flagged_under_runtime_launches(void **state)
{
	cJSON *events = tinytrain_rank_events();
	int n = cJSON_GetArraySize(events), pairs = 0;

	for (int i = 0; i < n; i++) {
		cJSON *inner = cJSON_GetArrayItem(events, i);
		if (strcmp(str(inner, "hook"), "cuLaunchKernel"))
			continue;
		assert_true(flag(inner, "nested"));
		cJSON *outer = NULL;
		for (int j = i + 1; j < n && !outer; j++)
			if (num(cJSON_GetArrayItem(events, j), "tid") == num(inner, "tid"))
				outer = cJSON_GetArrayItem(events, j);
		assert_non_null(outer);
		assert_string_equal(str(outer, "hook"), "cudaLaunchKernel");
		assert_false(flag(outer, "nested"));
		assert_string_equal(str(outer, "stream"), str(inner, "stream"));
		for (int d = 0; d < 3; d++) {
			assert_int_equal(
			        cJSON_GetArrayItem(cJSON_GetObjectItem(outer, "grid"), d)->valueint,
			        cJSON_GetArrayItem(cJSON_GetObjectItem(inner, "grid"), d)
			                ->valueint);
			assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(outer, "block"), d)
			                         ->valueint,
			                 cJSON_GetArrayItem(cJSON_GetObjectItem(inner, "block"), d)
			                         ->valueint);
		}
		pairs++;
	}
	assert_true(pairs > 20);
	cJSON_Delete(events);
}

/*
 * With small rings, records land on space earlier records used: what a hook does not record
 * still reads as 0, e.g. a runtime launch's parameter count, and events dropped by full
 * rings are not dumped. How many are dropped depends on how fast the drainer runs, so the
 * test asserts only what holds under any schedule: every dumped launch reads 0 there, and
 * more records went through the ring than it holds (it wrapped; the profiler drains on the
 * trainer's thread at its synchronisations too, so that never depends on the drainer).
 */
static void test_reused_ring_space_reads_as_zero(void **state)
{
	char dir[1200], cmd[2048], env[4096];
	int pids[MAX_PIDS], launches = 0;
	long recorded_bytes = 0;

	fresh_dir(dir, sizeof(dir), "wrap");
	snprintf(env, sizeof(env),
	         "LD_PRELOAD=%s/liblynx.so LYNX_MODE=profile LYNX_OUT=%s LYNX_EVENTS=%s/ev "
	         "LYNX_RING_BYTES=16K",
	         build_dir, dir, dir);
	snprintf(cmd, sizeof(cmd), "%s/bin/tinytrain --nproc 1 --layers 2 --steps 30", build_dir);
	struct output o = run(env, cmd);
	assert_int_equal(o.exit_code, 0);
	release(&o);
	int n = pids_of(dir, "ev", "jsonl", pids);
	assert_int_equal(n, 2);
	for (int i = 0; i < n; i++) {
		cJSON *events = load_process(dir, pids[i]), *ev;
		long recorded = recorder_value(dir, pids[i], "recorded");
		assert_int_equal(cJSON_GetArraySize(events), recorded);
		recorded_bytes = recorded * (long)sizeof(struct lynx_event) > recorded_bytes
		                         ? recorded * (long)sizeof(struct lynx_event)
		                         : recorded_bytes;
		cJSON_ArrayForEach(ev, events)
		{
			if (strcmp(str(ev, "hook"), "cudaLaunchKernel"))
				continue;
			assert_int_equal(num(ev, "param_count"), 0);
			assert_string_equal(str(ev, "params"), "");
			launches++;
		}
		cJSON_Delete(events);
	}
	if (recorded_bytes <= 4 * 16384) /* the trainer's ring wrapped four times at least */
		fail_msg("only %ld bytes of records went through a 16 KiB ring", recorded_bytes);
	assert_true(launches > 0);
}

/* Two ranks: NCCL collectives with their communicator, buffers, count and type. */
static void test_collectives_are_dumped_with_their_operands(void **state)
{
	char dir[1200], cmd[2048];
	int pids[MAX_PIDS], collectives = 0;

	fresh_dir(dir, sizeof(dir), "tp2");
	snprintf(cmd, sizeof(cmd), "%s/bin/tinytrain --nproc 2 --tp 2 --layers 2 --steps 1",
	         build_dir);
	free(run_dumped(dir, cmd));
	assert_int_equal(check_every_process_dumped_every_event(dir), 3);
	int n = pids_of(dir, "ev", "jsonl", pids);
	for (int i = 0; i < n; i++) {
		cJSON *events = load_process(dir, pids[i]), *ev;
		cJSON_ArrayForEach(ev, events)
		{
			if (strcmp(str(ev, "kind"), "collective"))
				continue;
			assert_string_not_equal(str(ev, "comm"), "0x0");
			assert_string_not_equal(str(ev, "send"), "0x0");
			assert_true(num(ev, "count") > 0);
			collectives++;
		}
		cJSON_Delete(events);
	}
	assert_true(collectives >= 2);
}

/* simgpu's example: the launcher and each rank (forked) get a file. The ranks end in
 * _exit, which runs no exit handler: they write no calls file, and their events still in
 * the rings or the buffer are lost; what they did write is whole lines. */
static void test_simgpu_example_gets_one_file_per_process(void **state)
{
	char dir[1200], cmd[2048];
	int pids[MAX_PIDS], with_calls = 0;

	fresh_dir(dir, sizeof(dir), "example");
	snprintf(cmd, sizeof(cmd), "%s/bin/simgpu_example 2", build_dir);
	struct output bare = run("", cmd);
	char *out = run_dumped(dir, cmd);
	assert_string_equal(out, bare.out);
	free(out);
	release(&bare);

	int n = pids_of(dir, "ev", "jsonl", pids);
	assert_int_equal(n, 3);
	for (int i = 0; i < n; i++) {
		cJSON *events = load_process(dir, pids[i]);
		long recorded = recorder_value(dir, pids[i], "recorded");
		if (recorded >= 0) {
			assert_int_equal(cJSON_GetArraySize(events), recorded);
			with_calls++;
		}
		cJSON_Delete(events);
	}
	/* The launcher and both ranks end with exit(): every process writes its calls file,
	 * and its dump holds exactly the events it recorded. */
	assert_int_equal(with_calls, 3);
}

/* No .jsonl file unless LYNX_EVENTS is set and not empty; recording goes on. */
static void test_no_file_without_lynx_events(void **state)
{
	char dir[1200], cmd[2048], env[4096];
	int pids[MAX_PIDS];
	const char *settings[] = {"", "LYNX_EVENTS="};

	snprintf(cmd, sizeof(cmd), "%s/bin/tinytrain %s", build_dir, tinytrain_args);
	for (int s = 0; s < 2; s++) {
		snprintf(dir, sizeof(dir), "%s/without-%d", scratch, s);
		snprintf(env, sizeof(env),
		         "LD_PRELOAD=%s/liblynx.so LYNX_MODE=profile LYNX_WARMUP=0 LYNX_OUT=%s %s",
		         build_dir, dir, settings[s]);
		struct output o = run(env, cmd);
		assert_int_equal(o.exit_code, 0);
		assert_string_equal(o.err, "");
		release(&o);
		assert_int_equal(pids_of(dir, "calls", "json", pids), 2);
		assert_true(recorder_value(dir, pids[0], "recorded") > 0 ||
		            recorder_value(dir, pids[1], "recorded") > 0);
		DIR *d = opendir(dir);
		struct dirent *entry;
		while ((entry = readdir(d)))
			if (strstr(entry->d_name, ".jsonl"))
				fail_msg("%s/%s written without LYNX_EVENTS", dir, entry->d_name);
		closedir(d);
	}
}

static void test_an_unwritable_path_warns_once_and_changes_nothing(void **state)
{
	char dir[1200], cmd[2048], env[4096];
	int pids[MAX_PIDS];

	snprintf(dir, sizeof(dir), "%s/unwritable", scratch);
	snprintf(cmd, sizeof(cmd), "%s/bin/tinytrain %s", build_dir, tinytrain_args);
	struct output bare = run("", cmd);
	snprintf(env, sizeof(env),
	         "LD_PRELOAD=%s/liblynx.so LYNX_MODE=profile LYNX_TIMING=off LYNX_WARMUP=0 "
	         "LYNX_OUT=%s LYNX_EVENTS=/proc/lynx-cannot/ev",
	         build_dir, dir);
	struct output o = run(env, cmd);

	assert_int_equal(o.exit_code, 0);
	assert_string_equal(o.out, bare.out);
	/* The launcher warns; its rank, forked from it, does not try again. */
	assert_int_equal(count_of(o.err, "\n"), 1);
	assert_int_equal(count_of(o.err, "LYNX_EVENTS='/proc/lynx-cannot/ev'"), 1);
	int n = pids_of(dir, "calls", "json", pids);
	long recorded = 0;
	for (int i = 0; i < n; i++)
		recorded += recorder_value(dir, pids[i], "recorded");
	assert_true(recorded > 500); /* recording went on */
	release(&o);
	release(&bare);
}

/* A process that forks: the parent's lines are written once (not again by the child,
 * which never uses CUDA and so writes no dump of its own). */
static void test_a_fork_neither_loses_nor_repeats_lines(void **state)
{
	char dir[1200], cmd[2048];
	int pids[MAX_PIDS];

	fresh_dir(dir, sizeof(dir), "fork");
	snprintf(cmd, sizeof(cmd), "%s/bin/probe fork", build_dir);
	free(run_dumped(dir, cmd));
	assert_int_equal(pids_of(dir, "ev", "jsonl", pids), 1);
	cJSON *events = load_process(dir, pids[0]);
	assert_int_equal(cJSON_GetArraySize(events), recorder_value(dir, pids[0], "recorded"));
	assert_true(cJSON_GetArraySize(events) >= 6);
	cJSON_Delete(events);
}

/* Eight threads: the lines of every thread (megabytes: many buffer writes). */
static void test_eight_threads_are_dumped_completely(void **state)
{
	char dir[1200], cmd[2048];

	fresh_dir(dir, sizeof(dir), "threads");
	snprintf(cmd, sizeof(cmd), "%s/bin/probe threads 300", build_dir);
	free(run_dumped(dir, cmd));
	assert_int_equal(check_every_process_dumped_every_event(dir), 1);
}

/* Calls made while a stream captures carry "captured", as counted in calls.<pid>.json. */
/* The attribute ids of an event, as "[4,6]" (the caller frees it). */
static char *attr_ids(const cJSON *ev)
{
	char *ids = cJSON_PrintUnformatted(cJSON_GetObjectItem(ev, "attrs"));

	assert_non_null(ids);
	return ids;
}

/*
 * Launches with a launch config, each of the four ways 3 times (probe ex): each recorded
 * once at the top level, where the profiler looks (the runtime's beside no other); the
 * runtime's made through the driver's cuLaunchKernelEx of its stream semantics, nested
 * just before it; every driver launch with the parameters, however given (kernelParams or
 * `extra`), and the config's two attributes.
 */
static void test_launch_configs_are_dumped_once_with_their_attributes(void **state)
{
	static const char *const top_hooks[] = {"cudaLaunchKernelExC", "cudaLaunchKernelExC_ptsz",
	                                        "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz"};
	char dir[1200], cmd[2048];
	int pids[MAX_PIDS], top[4] = {0}, nested = 0, n;
	const char *params = NULL;

	fresh_dir(dir, sizeof(dir), "ex");
	snprintf(cmd, sizeof(cmd), "%s/bin/probe ex 3", build_dir);
	char *out = run_dumped(dir, cmd);
	assert_string_equal(out, "probe ex: 4 x 3 launches = 12\n");
	free(out);
	assert_int_equal(check_every_process_dumped_every_event(dir), 1);
	pids_of(dir, "ev", "jsonl", pids);
	cJSON *events = load_process(dir, pids[0]);
	n = cJSON_GetArraySize(events);
	for (int i = 0; i < n; i++) {
		cJSON *ev = cJSON_GetArrayItem(events, i);
		const char *hook = str(ev, "hook");
		if (strcmp(str(ev, "kind"), "launch"))
			continue;
		assert_int_equal(num(ev, "result"), 0);
		if (!strncmp(hook, "cuda", 4)) { /* the runtime's: its driver launch records */
			assert_false(flag(ev, "nested"));
			assert_string_equal(str(ev, "params"), "");
			assert_int_equal(num(ev, "attr_count"), 0);
		} else {
			char *ids = attr_ids(ev);
			assert_string_equal(ids, "[4,6]");
			free(ids);
			assert_int_equal(num(ev, "attr_count"), 2);
			assert_int_equal(num(ev, "param_count"), 2);
			/* The pointer, then 1.0f: the same bytes however they were passed. */
			if (!params)
				params = str(ev, "params");
			assert_string_equal(str(ev, "params"), params);
			assert_string_equal(str(ev, "params") + 16, "0000803f");
		}
		if (flag(ev, "nested")) {
			/* The runtime's launch that made it is the thread's next event. */
			cJSON *outer = NULL;
			for (int j = i + 1; j < n && !outer; j++)
				if (num(cJSON_GetArrayItem(events, j), "tid") == num(ev, "tid"))
					outer = cJSON_GetArrayItem(events, j);
			assert_non_null(outer);
			assert_string_equal(str(outer, "hook"),
			                    !strcmp(hook, "cuLaunchKernelEx")
			                            ? "cudaLaunchKernelExC"
			                            : "cudaLaunchKernelExC_ptsz");
			assert_string_equal(str(outer, "stream"), str(ev, "stream"));
			nested++;
			continue;
		}
		size_t k = 0;
		while (k < 4 && strcmp(hook, top_hooks[k]))
			k++;
		if (k == 4)
			fail_msg("a top-level launch through %s", hook);
		top[k]++;
	}
	for (int k = 0; k < 4; k++)
		assert_int_equal(top[k], 3);
	assert_int_equal(nested, 6);
	cJSON_Delete(events);
}

static void test_captured_calls_are_flagged(void **state)
{
	char dir[1200], cmd[2048];
	int pids[MAX_PIDS], captured = 0;

	fresh_dir(dir, sizeof(dir), "graph");
	snprintf(cmd, sizeof(cmd), "%s/bin/probe graph 7", build_dir);
	free(run_dumped(dir, cmd));
	assert_int_equal(check_every_process_dumped_every_event(dir), 1);
	pids_of(dir, "ev", "jsonl", pids);
	cJSON *events = load_process(dir, pids[0]), *ev;
	cJSON_ArrayForEach(ev, events)
	{
		captured += flag(ev, "captured");
	}
	assert_true(captured > 0);
	assert_int_equal(captured, recorder_value(dir, pids[0], "captured"));
	cJSON_Delete(events);
}

/* SIGTERM at its default: the lines drained so far are written by the signal handler.
 * The probe waits half a second after its calls, so the drainer (every 100 ms) has
 * drained them all. */
static void test_sigterm_writes_the_buffered_lines(void **state)
{
	char dir[1200], probe[1200], env[3][1300];
	int pipefd[2], status, pids[MAX_PIDS];
	char ready[16] = "";

	fresh_dir(dir, sizeof(dir), "sigterm");
	snprintf(probe, sizeof(probe), "%s/bin/probe_signal", build_dir);
	snprintf(env[0], sizeof(env[0]), "LD_PRELOAD=%s/liblynx.so", build_dir);
	snprintf(env[1], sizeof(env[1]), "LYNX_OUT=%s", dir);
	snprintf(env[2], sizeof(env[2]), "LYNX_EVENTS=%s/ev", dir);
	assert_int_equal(pipe(pipefd), 0);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(pipefd[1], STDOUT_FILENO);
		close(pipefd[0]);
		for (int i = 0; i < 3; i++)
			putenv(env[i]);
		putenv("LYNX_MODE=profile");
		execl(probe, probe, "default", (char *)NULL);
		_exit(127);
	}
	close(pipefd[1]);
	assert_true(read(pipefd[0], ready, sizeof(ready) - 1) > 0);
	assert_non_null(strstr(ready, "ready"));
	nanosleep(&(struct timespec){.tv_nsec = 500000000}, NULL);
	kill(pid, SIGTERM);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	close(pipefd[0]);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGTERM);

	assert_int_equal(pids_of(dir, "ev", "jsonl", pids), 1);
	cJSON *events = load_process(dir, pids[0]);
	assert_true(cJSON_GetArraySize(events) >= 10); /* 5 cudaMalloc, 5 cudaFree, and more */
	assert_int_equal(cJSON_GetArraySize(events), recorder_value(dir, pids[0], "recorded"));
	cJSON_Delete(events);
}

int main(int argc, char **argv)
{
	if (harness_init(argv[0], "test-dump"))
		return 1;

	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_each_payload_is_written_as_documented),
	        cmocka_unit_test(test_long_lines_cross_buffer_writes_intact),
	        cmocka_unit_test(test_a_launch_config_is_written_with_its_attribute_ids),
	        cmocka_unit_test(test_an_uncreatable_file_leaves_the_dump_off),
	        cmocka_unit_test(test_tinytrain_dumps_each_recorded_event_once),
	        cmocka_unit_test(test_launch_lines_carry_their_parameter_bytes),
	        cmocka_unit_test(test_nested_driver_launches_are_flagged_under_runtime_launches),
	        cmocka_unit_test(test_reused_ring_space_reads_as_zero),
	        cmocka_unit_test(test_collectives_are_dumped_with_their_operands),
	        cmocka_unit_test(test_simgpu_example_gets_one_file_per_process),
	        cmocka_unit_test(test_no_file_without_lynx_events),
	        cmocka_unit_test(test_an_unwritable_path_warns_once_and_changes_nothing),
	        cmocka_unit_test(test_a_fork_neither_loses_nor_repeats_lines),
	        cmocka_unit_test(test_eight_threads_are_dumped_completely),
	        cmocka_unit_test(test_captured_calls_are_flagged),
	        cmocka_unit_test(test_launch_configs_are_dumped_once_with_their_attributes),
	        cmocka_unit_test(test_sigterm_writes_the_buffered_lines),
	};
	int failed = cmocka_run_group_tests_name("dump", tests, NULL, NULL);
	return harness_finish(failed);
}
