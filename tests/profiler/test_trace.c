/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading LYNX_EVENTS dumps (profiler/trace.c): every payload as dump.h documents it,
 * hook names interned, threads ordered by time; truncated, corrupted and wrong-version
 * files refused with the line and the field; a real tinytrain dump read whole.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fnv.h"
#include "record.h"

static char scratch[1100];

#define HEADER "{\"format\":\"lynx-events\",\"version\":1,\"pid\":42,\"hooks\":192}\n"
#define COMMON(t, tid, hook, kind)                                                                 \
	"{\"t\":" #t ",\"tid\":" #tid ",\"hook\":\"" hook "\",\"kind\":\"" kind "\",\"result\":0," \
	"\"stream\":\"0x1\",\"nested\":false,\"captured\":false"
#define LAUNCH(t, tid)                                                                     \
	COMMON(t, tid, "cuLaunchKernel", "launch")                                         \
	",\"function\":\"0xdeadbeef\",\"grid\":[8,2,1],\"block\":[256,1,1],\"shared\":48," \
	"\"params\":\"0100ff7f\",\"param_count\":2}\n"
#define NAMED_LAUNCH(t, tid, name)                                                   \
	COMMON(t, tid, "cuLaunchKernel", "launch")                                   \
	",\"function\":\"0xfeed\",\"grid\":[1,1,1],\"block\":[32,1,1],\"shared\":0," \
	"\"params\":\"\",\"param_count\":0,\"name\":\"" name "\"}\n"
#define ALLOC(t, tid) \
	COMMON(t, tid, "cudaMallocAsync", "alloc") ",\"ptr\":\"0x7f0000001000\",\"bytes\":4096}\n"
#define COLL(t, tid)                                                                        \
	COMMON(t, tid, "ncclAllReduce", "collective")                                       \
	",\"comm\":\"0xc0\",\"send\":\"0x10\",\"recv\":\"0x20\",\"count\":2048,\"type\":7," \
	"\"op\":0,\"peer\":-1,\"group_depth\":0}\n"

static const char good[] = HEADER LAUNCH(300, 7) ALLOC(100, 7) COLL(200, 8)
        NAMED_LAUNCH(400, 8, "triton_poi_fused_0") COMMON(500, 7, "cuInit", "unknown") "}\n";

static const char *write_file(const char *name, const char *text, size_t len)
{
	static char path[1200];

	snprintf(path, sizeof(path), "%s/%s", scratch, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, len, f), len);
	fclose(f);
	return path;
}

/* Reads text as a dump; it must be refused with a reason containing expect. */
static void assert_refused(const char *text, size_t len, const char *expect)
{
	struct lynx_prof_trace t;
	char why[256];

	int err = lynx_prof_trace_read(write_file("bad.jsonl", text, len), &t, why, sizeof(why));
	assert_int_equal(err, -EINVAL);
	if (!strstr(why, expect))
		fail_msg("reason \"%s\" lacks \"%s\"", why, expect);
	assert_null(t.events);
	assert_int_equal(t.count, 0);
}

static void test_trace_reads_every_payload(void **state)
{
	struct lynx_prof_trace t;
	char why[256];

	(void)state;
	assert_int_equal(lynx_prof_trace_read(write_file("good.jsonl", good, strlen(good)), &t, why,
	                                      sizeof(why)),
	                 0);
	assert_int_equal(t.pid, 42);
	assert_int_equal(t.count, 5);
	/* ordered by time across threads: alloc (100), collective (200), launches */
	assert_int_equal(t.events[0].kind, LYNX_PROF_ALLOC);
	assert_int_equal(t.events[0].u.mem.ptr, 0x7f0000001000ull);
	assert_int_equal(t.events[0].u.mem.bytes, 4096);
	assert_int_equal(t.events[1].kind, LYNX_PROF_COLL);
	assert_int_equal(t.events[1].tid, 8);
	assert_int_equal(t.events[1].u.nccl.count, 2048);
	assert_int_equal(t.events[1].u.nccl.peer, -1);
	assert_int_equal(t.events[1].u.nccl.comm, 0xc0);
	const struct lynx_prof_event *l = &t.events[2];
	assert_int_equal(l->kind, LYNX_PROF_LAUNCH);
	assert_int_equal(l->t_ns, 300);
	assert_int_equal(l->stream, 1);
	assert_int_equal(l->u.launch.function, 0xdeadbeef);
	assert_int_equal(l->u.launch.grid[0], 8);
	assert_int_equal(l->u.launch.grid[1], 2);
	assert_int_equal(l->u.launch.block[0], 256);
	assert_int_equal(l->u.launch.shared, 48);
	assert_int_equal(l->u.launch.param_bytes, 4);
	assert_memory_equal(l->u.launch.params, "\x01\x00\xff\x7f", 4);
	assert_string_equal(l->hook, "cuLaunchKernel");
	assert_ptr_equal(l->hook, t.events[3].hook); /* interned */
	/* A kernel's name, where the dump has one, is what signatures take it by. */
	assert_null(l->u.launch.name);
	assert_int_equal(l->u.launch.name_hash, 0);
	assert_string_equal(t.events[3].u.launch.name, "triton_poi_fused_0");
	assert_int_equal(t.events[3].u.launch.name_hash, lynx_fnv1a_string("triton_poi_fused_0"));
	assert_int_equal(t.events[4].kind, LYNX_PROF_OTHER); /* "unknown" */
	for (size_t i = 0; i < t.count; i++)
		assert_int_equal(t.events[i].index, i);
	assert_string_equal(lynx_prof_kind_name(LYNX_PROF_P2P), "p2p");
	assert_null(lynx_prof_kind_name(LYNX_PROF_KIND_COUNT));
	lynx_prof_trace_free(&t);
}

static void test_trace_refuses_truncated_files(void **state)
{
	(void)state;
	/* cut inside the last line */
	assert_refused(good, strlen(good) - 10, "line 6: truncated");
	/* cut inside the header */
	assert_refused(good, 20, "line 1: truncated");
	assert_refused("", 0, "line 0: empty file");
}

static void test_trace_refuses_corrupted_lines(void **state)
{
	char text[4096];

	(void)state;
	snprintf(text, sizeof(text), "%s%s{\"t\":1,\n", HEADER, LAUNCH(300, 7));
	assert_refused(text, strlen(text), "line 3: not a JSON object");
	snprintf(text, sizeof(text), "%s%s", HEADER,
	         "{\"t\":1,\"hook\":\"x\",\"kind\":\"sync\",\"result\":0,\"stream\":\"0x0\","
	         "\"nested\":false,\"captured\":false,\"handle\":\"0x1\"}\n");
	assert_refused(text, strlen(text), "line 2: field \"tid\": missing");
	snprintf(text, sizeof(text), "%s%s", HEADER,
	         COMMON(1, 2, "cudaFree", "free") ",\"ptr\":\"12\",\"bytes\":0}\n");
	assert_refused(text, strlen(text), "line 2: field \"ptr\": expected a \"0x...\" handle");
	snprintf(text, sizeof(text), "%s%s", HEADER,
	         COMMON(1, 2, "cudaFree", "free") ",\"ptr\":\"0x1\",\"bytes\":-3}\n");
	assert_refused(text, strlen(text), "line 2: field \"bytes\": expected an integer");
	snprintf(text, sizeof(text), "%s%s", HEADER, COMMON(1, 2, "cudaFree", "bogus") "}\n");
	assert_refused(text, strlen(text), "line 2: field \"kind\": unknown kind \"bogus\"");
	snprintf(text, sizeof(text), "%s%s", HEADER,
	         COMMON(1, 2, "cuLaunchKernel", "launch") ",\"function\":\"0x1\",\"grid\":[1,1],"
	                                                  "\"block\":[1,1,1],\"shared\":0,"
	                                                  "\"params\":\"\",\"param_count\":0}\n");
	assert_refused(text, strlen(text), "line 2: field \"grid\": expected an array of 3");
	snprintf(text, sizeof(text), "%s%s", HEADER,
	         COMMON(1, 2, "cuLaunchKernel", "launch") ",\"function\":\"0x1\",\"grid\":[1,1,1],"
	                                                  "\"block\":[1,1,1],\"shared\":0,"
	                                                  "\"params\":\"0g\",\"param_count\":0}\n");
	assert_refused(text, strlen(text), "line 2: field \"params\": not hex");
	snprintf(text, sizeof(text), "%s%s", HEADER,
	         COMMON(1, 2, "cudaStreamSynchronize", "sync") ",\"handle\":\"0x1\"}\n"
	                                                       "[1,2]\n");
	assert_refused(text, strlen(text), "line 3: not a JSON object");
	snprintf(text, sizeof(text), "%s%s", HEADER,
	         "{\"t\":1,\"tid\":2,\"hook\":\"x\",\"kind\":\"other\",\"result\":0,"
	         "\"stream\":\"0x0\",\"nested\":1,\"captured\":false}\n");
	assert_refused(text, strlen(text), "line 2: field \"nested\": expected true or false");
}

static void test_trace_refuses_other_formats_and_versions(void **state)
{
	static const char v2[] =
	        "{\"format\":\"lynx-events\",\"version\":2,\"pid\":1,\"hooks\":1}\n";
	static const char other[] = "{\"format\":\"lynx-profile\",\"version\":1,\"pid\":1}\n";
	static const char noversion[] = "{\"format\":\"lynx-events\",\"pid\":1,\"hooks\":1}\n";
	struct lynx_prof_trace t;
	char why[256];

	(void)state;
	assert_refused(v2, strlen(v2),
	               "line 1: field \"version\": version 2 is not supported (this reader "
	               "knows lynx-events version 1)");
	assert_refused(other, strlen(other),
	               "line 1: field \"format\": expected \"lynx-events\", got \"lynx-profile\"");
	assert_refused(noversion, strlen(noversion), "line 1: field \"version\": missing");
	assert_int_equal(lynx_prof_trace_read("/nonexistent/x.jsonl", &t, why, sizeof(why)),
	                 -ENOENT);
	assert_non_null(strstr(why, "cannot open /nonexistent/x.jsonl"));
}

static size_t lines(const char *path)
{
	FILE *f = fopen(path, "r");
	size_t n = 0;
	int c;

	assert_non_null(f);
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

static void test_trace_reads_a_tinytrain_dump_whole(void **state)
{
	struct recording rec;
	char path[1300];

	(void)state;
	assert_int_equal(
	        record_tinytrain("--nproc 2 --pp 2 --layers 4 --microbatches 2 --steps 1", &rec),
	        0);
	assert_int_equal(rec.ranks, 2);
	for (int r = 0; r < rec.ranks; r++) {
		const struct lynx_prof_trace *t = &rec.rank[r];
		size_t launches = 0, with_params = 0;
		snprintf(path, sizeof(path), "%s/ev.%d.jsonl", rec.dir, t->pid);
		assert_int_equal(t->count + 1, lines(path));
		for (size_t i = 0; i < t->count; i++) {
			const struct lynx_prof_event *e = &t->events[i];
			if (i)
				assert_true(e->t_ns >= t->events[i - 1].t_ns);
			if (e->kind != LYNX_PROF_LAUNCH)
				continue;
			launches++;
			with_params += e->u.launch.param_bytes > 0;
			assert_true(e->u.launch.function != 0);
		}
		assert_true(launches > 100);
		assert_int_equal(with_params * 2, launches); /* driver launches nested in runtime */
	}
	record_release(&rec);
}

int main(int argc, char **argv)
{
	(void)argc;
	if (record_init(argv[0]))
		return 1;
	snprintf(scratch, sizeof(scratch), "%s/test-trace.XXXXXX", record_build_dir);
	if (!mkdtemp(scratch))
		return 1;
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_trace_reads_every_payload),
	        cmocka_unit_test(test_trace_refuses_truncated_files),
	        cmocka_unit_test(test_trace_refuses_corrupted_lines),
	        cmocka_unit_test(test_trace_refuses_other_formats_and_versions),
	        cmocka_unit_test(test_trace_reads_a_tinytrain_dump_whole),
	};
	int failed = cmocka_run_group_tests(tests, NULL, NULL);
	char cmd[1200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", scratch);
	if (system(cmd))
		return 1;
	return failed;
}
