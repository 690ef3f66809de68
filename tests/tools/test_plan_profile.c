/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Runs the built `lynx plan PROFILE...` (<build>/bin/lynx beside this test) on small profiles
 * written into the scratch directory: the plan file and summary for one stage and for a
 * two-stage pipeline, and exit status 2 with the reason for a truncated file, a wrong
 * version, a group beyond its layer's kernels, a missing stage, the offload planner and a
 * model option; profiles of two runs (one planned, which one said; --run for the other).
 */
#define _GNU_SOURCE
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "../harness.h"

static char lynx[PATH_MAX + 16];

/* Runs "lynx plan <args>" inside the scratch directory, keeping one stream; in UTC, for the
 * runs' starts printed in local time. */
static struct result plan(enum stream stream, const char *args)
{
	char cmd[8192];

	snprintf(cmd, sizeof(cmd), "sh -c \"cd '%s' && TZ=UTC '%s' plan %s\"", scratch, lynx, args);
	return run_clean(stream, cmd);
}

/* Host times of a layer's forward and backward and of the iteration. */
#define FWD_TIME \
	"{\"source\": \"host\", \"ns\": 3000, \"min_ns\": 3000, \"max_ns\": 3000, \"samples\": 4}"
#define BWD_TIME \
	"{\"source\": \"host\", \"ns\": 4000, \"min_ns\": 4000, \"max_ns\": 4000, \"samples\": 4}"
#define ITER_TIME                                                                      \
	"{\"source\": \"host\", \"ns\": 50000, \"min_ns\": 50000, \"max_ns\": 50000, " \
	"\"samples\": 2}"

/* One layer: 3 forward kernels (a TP all-reduce before the last), 4 backward kernels. */
#define LAYER(i)                                                                 \
	"{\"index\": " #i ", \"forward\": " FWD_TIME ", \"backward\": " BWD_TIME \
	", \"saved_bytes\": 14336, "                                             \
	"\"kernels\": {\"forward\": [\"ln\", \"gemm\", \"gelu\"], "              \
	"\"backward\": [\"gelu_bwd\", \"dgrad\", \"wgrad\", \"ln_bwd\"]}}"

/* Its saved buffers: the layer's input (4 KiB), the GEMM's output (8 KiB), GELU's (2 KiB). */
#define GROUPS(l, gemm_producer)                                                                   \
	"{\"layer\": " #l ", \"bytes\": 4096, \"producer\": -1, \"first_consumer\": 3, "           \
	"\"last_consumer\": 3}, {\"layer\": " #l ", \"bytes\": 8192, \"producer\": " gemm_producer \
	", \"first_consumer\": 1, \"last_consumer\": 2}, {\"layer\": " #l                          \
	", \"bytes\": 2048, \"producer\": 2, \"first_consumer\": 0, \"last_consumer\": 0}"

#define TP_FWD(l)                                                                               \
	"{\"kind\": \"tp_fwd\", \"call\": \"ncclAllReduce\", \"comm\": 1, \"peer\": -1, "       \
	"\"count\": 1024, \"bytes\": 4096, \"microbatch\": 0, \"layer\": " #l ", \"ordinal\": " \
	"0, \"kernel\": 2, \"offset_ns\": 100, \"duration\": {\"source\": \"unknown\"}, "       \
	"\"idle\": {\"source\": \"unknown\"}}"

#define RECV(kind)                                                                              \
	"{\"kind\": \"" kind "\", \"call\": \"ncclRecv\", \"comm\": 0, \"peer\": 1, "           \
	"\"count\": 1024, \"bytes\": 4096, \"microbatch\": 0, \"layer\": -1, \"ordinal\": -1, " \
	"\"kernel\": -1, \"offset_ns\": 50, \"duration\": {\"source\": \"unknown\"}, "          \
	"\"idle\": {\"source\": \"unknown\"}}"

/*
 * A stage's profile: 2 layers, 2 micro-batches, `warmup` warm-up forwards, `windows` after
 * the TP ones (a comma first). Memory at the peak: 1 MiB of weights, 28 KiB saved.
 */
static void write_profile(const char *name, int warmup, const char *gemm_producer,
                          const char *windows, const char *version)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", scratch, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f,
	        "{\"format\": \"lynx-profile\", \"version\": %s, \"rank\": 0, \"world\": 2,\n"
	        "\"environment\": {\"pid\": 1, \"gpu\": \"unknown\", \"driver\": \"unknown\", "
	        "\"nccl\": \"unknown\"},\n"
	        "\"iteration\": {\"period_tokens\": 10, \"count\": 2, \"prefix_events\": 0, "
	        "\"events\": 100, \"time\": " ITER_TIME "},\n"
	        "\"microbatches\": 2, \"warmup_forwards\": %d, \"rerun\": false,\n"
	        "\"layers\": [" LAYER(0) ", " LAYER(1) "],\n",
	        version, warmup);
	fprintf(f, "\"groups\": [" GROUPS(0, "%s") ", " GROUPS(1, "%s") "],\n", gemm_producer,
	        gemm_producer);
	fprintf(f, "\"windows\": [" TP_FWD(0) ", " TP_FWD(1) "%s],\n", windows);
	fprintf(f, "\"memory\": {\"source\": \"host\", \"peak_bytes\": 1077248, \"buffers\": 12, "
	           "\"at_peak\": {\"weight\": 1048576, \"saved_activation\": 28672, "
	           "\"workspace\": 0, \"temporary\": 0, \"other\": 0}}}\n");
	assert_int_equal(fclose(f), 0);
}

/* Makes profile `name` rank `rank` of a run of `world` ranks that torchrun named id, started
 * at unix time started. */
static void set_run(const char *name, int rank, int world, const char *id, long long started)
{
	char cmd[PATH_MAX + 512];

	snprintf(cmd, sizeof(cmd),
	         "sed -i -e 's/\"rank\": 0, \"world\": 2,/\"rank\": %d, \"world\": %d, \"run\": "
	         "{\"id\": \"%s\", \"source\": \"TORCHELASTIC_RUN_ID\", \"started\": %lld},/' "
	         "'%s/%s'",
	         rank, world, id, started, scratch, name);
	assert_int_equal(system(cmd), 0);
}

static char *read_scratch(const char *name)
{
	char path[PATH_MAX];
	char *text;

	snprintf(path, sizeof(path), "%s/%s", scratch, name);
	text = slurp(path);
	if (!text)
		fail_msg("%s was not written", path);
	return text;
}

static void test_plan_from_one_profile_writes_the_plan(void **state)
{
	/* 1 MiB static + 20000 bytes: keeping both layers' 14 KiB does not fit. */
	struct result r;
	char *json;

	write_profile("one.json", 0, "1", "", "1");
	r = plan(OUT, "one.json --budget 1068576 --out one.plan.json");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, "1 profile: 1 stage, 2 layers, 2 micro-batches; budget "
	                               "1.02 MiB; planner heu"));
	assert_non_null(strstr(r.text, "layer: 3 ops, 3 groups, forward 0.003 ms"));
	assert_non_null(strstr(r.text, "stage 0: layers 0-1 (2), peak"));
	assert_non_null(strstr(r.text, "(static 1.00 MiB)"));
	assert_non_null(strstr(r.text, ", fits,"));
	assert_non_null(strstr(r.text, "g0.input"));
	assert_non_null(strstr(r.text, "plan written to one.plan.json"));
	json = read_scratch("one.plan.json");
	assert_non_null(strstr(json, "\"format\":\t\"lynx-plan\""));
	assert_non_null(strstr(json, "\"budget_bytes\":\t1068576"));
	assert_non_null(strstr(json, "\"g1.gemm\""));
	assert_non_null(strstr(json, "recompute"));
	free(json);
	free(r.text);

	/* A budget that no plan meets: the best one is written, to look at, and the exit
	 * status says that it does not fit. */
	r = plan(ERR, "one.json --budget 1050000 --out tight.plan.json");
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.text, "the heu plan does not fit the budget"));
	free(r.text);
	json = read_scratch("tight.plan.json");
	assert_non_null(json);
	free(json);

	/* The default budget is the measured peak: everything is kept. */
	r = plan(OUT, "one.json --planner none --out none.plan.json");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, "budget 1.03 MiB; planner none"));
	assert_non_null(strstr(r.text, ", fits,"));
	free(r.text);
}

static void test_plan_from_a_pipeline_orders_its_stages(void **state)
{
	struct result r;
	char *json;

	write_profile("last.json", 0, "1", ", " RECV("pp_recv_fwd"), "1");
	write_profile("first.json", 1, "1", ", " RECV("pp_recv_bwd"), "1");
	r = plan(OUT, "last.json first.json --planner full --out pp.plan.json");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, "2 profiles: 2 stages, 4 layers, 2 micro-batches"));
	assert_non_null(strstr(r.text, "stage 0: layers 0-1 (2)"));
	assert_non_null(strstr(r.text, "stage 1: layers 2-3 (2)"));
	json = read_scratch("pp.plan.json");
	assert_non_null(strstr(json, "\"planner\":\t\"full\""));
	assert_non_null(strstr(json, "\"stage\":\t1"));
	free(json);
	free(r.text);
}

/* Directories, one per node (LYNX_OUT=out/%h): their profile.<rank>.json, merged; one
 * without profiles is refused by name when alone, left out among others. */
static void test_plan_reads_per_node_directories(void **state)
{
	struct result r;

	write_profile("last.json", 0, "1", ", " RECV("pp_recv_fwd"), "1");
	write_profile("first.json", 1, "1", ", " RECV("pp_recv_bwd"), "1");
	char cmd[3 * PATH_MAX];
	snprintf(cmd, sizeof(cmd),
	         "cd '%s' && rm -rf node0 node1 node2 && mkdir node0 node1 node2 && "
	         "cp first.json node0/profile.0.json && cp last.json node1/profile.1.json",
	         scratch);
	assert_int_equal(system(cmd), 0);
	r = plan(OUT, "node0 node1 --planner full --out nodes.plan.json");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, "2 profiles: 2 stages, 4 layers, 2 micro-batches"));
	free(r.text);
	r = plan(ERR, "node2 --planner full --out nodes.plan.json");
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.text, "node2: no profile.<rank>.json in this directory"));
	free(r.text);
	/* Among several, as a launcher's own directory under out/proc-%p: left out, said. */
	r = plan(ERR, "node0 node2 node1 --planner full --out nodes.plan.json");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, "node2: no profile.<rank>.json here; left out"));
	free(r.text);
	r = plan(ERR, "node2 node2/ --planner full --out nodes.plan.json");
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.text, "none of the 2 directories holds a profile.<rank>.json"));
	free(r.text);
	/* --granule: planned as recompute mode plans on the device, and the plan says so. */
	r = plan(OUT,
	         "node0 node1 --planner full --granule 4K --budget 64M --out granule.plan.json");
	assert_int_equal(r.status, 0);
	free(r.text);
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/granule.plan.json", scratch);
	char *json = slurp(path);
	assert_non_null(json);
	assert_non_null(strstr(json, "\"granule_bytes\":\t4096"));
	free(json);
	r = plan(ERR, "--model gpt-1.3b --cluster a100-nvlink --granule 1M --out m.json");
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.text, "--granule needs profiles"));
	free(r.text);
}

/* --budget-percent: each stage gets that share of its own measured peak. */
static void test_plan_takes_a_budget_per_stage_in_percent(void **state)
{
	struct result r;

	write_profile("last.json", 0, "1", ", " RECV("pp_recv_fwd"), "1");
	write_profile("first.json", 1, "1", ", " RECV("pp_recv_bwd"), "1");
	r = plan(OUT, "last.json first.json --budget-percent 100 --out pc.plan.json");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, "budget per stage, at most "));
	assert_non_null(strstr(r.text, ", fits,")); /* HEU holds each stage to its own */
	free(r.text);
}

static void test_plan_refuses_bad_profiles_with_exit_2(void **state)
{
	static const struct {
		const char *args, *message;
	} cases[] = {
	        {"cut.json", "cut.json: not valid JSON: the text ends early (after 300 bytes"},
	        {"v2.json", "v2.json: version: 2 is not supported"},
	        {"beyond.json",
	         "beyond.json: group 1's producer 9 is beyond layer 0's 3 forward kernels"},
	        {"first.json", "no profile of pipeline stage 1 of 2"},
	        {"missing.json", "missing.json: cannot open it: No such file or directory"},
	        {"one.json --planner offload", "the offload planner needs the host link"},
	        {"one.json --tp 2", "--tp describes a model"},
	        {"one.json --budget 1000", "is below stage 0's static memory"},
	        {"one.json --budget-percent 101", "--budget-percent 101 is not between 1 and 100"},
	        {"one.json --budget-percent 0", "is not a positive integer"},
	        {"one.json --budget-percent 1", "is below stage 0's static memory"},
	};
	char cmd[PATH_MAX * 2 + 64];

	write_profile("one.json", 0, "1", "", "1");
	write_profile("first.json", 1, "1", ", " RECV("pp_recv_bwd"), "1");
	write_profile("v2.json", 0, "1", "", "2");
	write_profile("beyond.json", 0, "9", "", "1");
	snprintf(cmd, sizeof(cmd), "head -c 300 '%s/one.json' > '%s/cut.json'", scratch, scratch);
	assert_int_equal(system(cmd), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct result r = plan(ERR, cases[i].args);

		assert_int_equal(r.status, 2);
		if (!strstr(r.text, cases[i].message))
			fail_msg("'%s': expected '%s' in: %s", cases[i].args, cases[i].message,
			         r.text);
		free(r.text);
	}
}

/*
 * `lynx plan DIR/profile.*.json` after two launches into one DIR: a 4-rank run without a
 * pipeline (ranks 2 and 3 remain) and a newer 2-rank pipeline (ranks 0 and 1). The newest
 * run is planned, and stderr says so; --run plans the other; an unknown --run, or --run
 * without profiles, is a usage error.
 */
static void test_plan_takes_one_run_of_two(void **state)
{
	struct result r;

	(void)state;
	write_profile("runs.0.json", 1, "1", ", " RECV("pp_recv_bwd"), "1");
	write_profile("runs.1.json", 0, "1", ", " RECV("pp_recv_fwd"), "1");
	write_profile("runs.2.json", 0, "1", "", "1");
	write_profile("runs.3.json", 0, "1", "", "1");
	set_run("runs.0.json", 0, 2, "b-7", 1795796401); /* 2026-11-27 16:20:01 UTC */
	set_run("runs.1.json", 1, 2, "b-7", 1795796403);
	set_run("runs.2.json", 2, 4, "a-3", 1795792801); /* an hour before */
	set_run("runs.3.json", 3, 4, "a-3", 1795792801);

	r = plan(OUT, "runs.*.json --planner none --budget 1G --out two-runs.plan.json");
	assert_int_equal(r.status, 0);
	assert_non_null(
	        strstr(r.text, "2 profiles of run b-7: 2 stages, 4 layers, 2 micro-batches"));
	free(r.text);
	r = plan(ERR, "runs.*.json --planner none --budget 1G --out two-runs.plan.json");
	assert_int_equal(r.status, 0);
	assert_string_equal(r.text,
	                    "lynx plan: the 4 profiles come from 2 runs: reading run b-7 (2 ranks "
	                    "of 2, started 2026-11-27 16:20:01), the newest; the other: run a-3 "
	                    "(2 ranks of 4); --run ID picks one\n");
	free(r.text);

	r = plan(OUT, "runs.*.json --run a-3 --planner none --budget 1G --out two-runs.plan.json");
	assert_int_equal(r.status, 0);
	assert_non_null(
	        strstr(r.text, "2 profiles of run a-3: 1 stage, 2 layers, 2 micro-batches"));
	free(r.text);
	r = plan(ERR, "--run=a-3 runs.*.json --planner none --budget 1G --out two-runs.plan.json");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, "reading run a-3 (2 ranks of 4, started 2026-11-27 "
	                               "15:20:01), as --run asks; the other: run b-7 (2 ranks of "
	                               "2)"));
	free(r.text);

	r = plan(ERR, "runs.*.json --run c-1");
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.text, "lynx plan: --run c-1: no such run among the profiles "
	                               "(they hold: b-7, a-3)\n"));
	free(r.text);
	r = plan(ERR, "--run b-7 --budget 1G");
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.text, "--run picks among profiles"));
	free(r.text);

	/* One run: nothing on stderr. */
	r = plan(ERR,
	         "runs.0.json runs.1.json --planner none --budget 1G --out two-runs.plan.json");
	assert_int_equal(r.status, 0);
	assert_string_equal(r.text, "");
	free(r.text);
}

static int setup(void **state)
{
	snprintf(lynx, sizeof(lynx), "%s/bin/lynx", build_dir);
	if (access(lynx, X_OK)) {
		fprintf(stderr, "test_plan_profile: needs %s (make lynx)\n", lynx);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (harness_init(argv[0], "test-plan-profile"))
		return 1;

	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_plan_from_one_profile_writes_the_plan),
	        cmocka_unit_test(test_plan_from_a_pipeline_orders_its_stages),
	        cmocka_unit_test(test_plan_reads_per_node_directories),
	        cmocka_unit_test(test_plan_takes_a_budget_per_stage_in_percent),
	        cmocka_unit_test(test_plan_refuses_bad_profiles_with_exit_2),
	        cmocka_unit_test(test_plan_takes_one_run_of_two),
	};

	return harness_finish(cmocka_run_group_tests(tests, setup, NULL));
}
