/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Runs the built `lynx plan` (<build>/bin/lynx beside <build>/tests/test_lynx_plan): the plan
 * file it writes (which it reads back itself before saying so), its summary, --partition's
 * split and Megatron flags, and the exit status and message of bad input. Planning from
 * profiles: test_plan_profile.c.
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

/* Runs "lynx plan <args>" in a clean environment inside the scratch directory (the plan
 * files it writes land there), keeping one stream. */
static struct result plan(enum stream stream, const char *args)
{
	char cmd[8192];

	snprintf(cmd, sizeof(cmd), "sh -c \"cd '%s' && '%s' plan %s\"", scratch, lynx, args);
	return run_clean(stream, cmd);
}

static int count(const char *text, const char *needle)
{
	int n = 0;

	for (const char *at = text; (at = strstr(at, needle)); at += strlen(needle))
		n++;
	return n;
}

static char *read_file(const char *name)
{
	char path[PATH_MAX];
	char *text;

	snprintf(path, sizeof(path), "%s/%s", scratch, name);
	text = slurp(path);
	if (!text)
		fail_msg("%s was not written", path);
	return text;
}

static void test_plan_writes_a_plan_file_and_a_summary(void **state)
{
	struct result r = plan(OUT, "--model gpt-1.3b --cluster a100-nvlink --tp 2 --pp 2 "
	                            "--budget 8G --out a.json");
	char *json;

	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, "planner heu"));
	assert_non_null(strstr(r.text, "stage 0: layers 0-11 (12) +embedding"));
	assert_non_null(strstr(r.text, "stage 1: layers 12-23 (12) +head"));
	assert_non_null(strstr(r.text, "plan written to a.json"));
	json = read_file("a.json");
	assert_non_null(strstr(json, "\"format\":\t\"lynx-plan\""));
	assert_non_null(strstr(json, "\"planner\":\t\"heu\""));
	assert_int_equal(count(json, "\"peak_bytes\":"), 2);
	free(json);
	free(r.text);
}

static void test_plan_runs_the_planner_named(void **state)
{
	struct result r = plan(OUT, "--model gpt-1.3b --cluster a100-nvlink --tp 2 --pp 2 "
	                            "--planner full --out full.json");
	char *json;

	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, "planner full"));
	json = read_file("full.json");
	assert_non_null(strstr(json, "\"planner\":\t\"full\""));
	assert_non_null(strstr(json, "recompute_on_demand"));
	free(json);
	free(r.text);
}

static void test_plan_partition_prints_split_and_megatron_flags(void **state)
{
	/* A 1M-token vocabulary: the head outweighs layers, so the last stage gets fewer. */
	struct result r = plan(OUT, "--model gpt-1.3b --cluster a100-nvlink --tp 2 --pp 4 "
	                            "--layers 16 --vocab 1048576 --partition --out part.json");
	char *json;

	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, "uniform   4/4/4/4"));
	assert_non_null(
	        strstr(r.text, "megatron: --num-layers 16 --pipeline-model-parallel-size 4"));
	assert_non_null(strstr(r.text, "--decoder-last-pipeline-num-layers") ||
	                strstr(r.text, "--pipeline-model-parallel-layout"));
	assert_null(strstr(r.text, "stage 3: layers 12-15 (4) +head"));
	json = read_file("part.json");
	assert_int_equal(count(json, "\"stage\":"), 4);
	free(json);
	free(r.text);
}

static void test_plan_uneven_layers_need_partition(void **state)
{
	struct result r = plan(ERR, "--model gpt-1.3b --cluster a100-nvlink --pp 5 --out x.json");

	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.text, "do not split evenly"));
	assert_non_null(strstr(r.text, "--partition"));
	free(r.text);
	r = plan(OUT, "--model gpt-1.3b --cluster a100-nvlink --pp 5 --partition --out x.json");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, "plan written to x.json"));
	free(r.text);
}

static void test_plan_bad_input_exits_2_with_a_reason(void **state)
{
	static const struct {
		const char *args, *message;
	} cases[] = {
	        {"--cluster a100-nvlink", "--model is required"},
	        {"--model gpt-1.3b", "--cluster is required"},
	        {"--model gpt-9t --cluster a100-nvlink", "unknown model 'gpt-9t'"},
	        {"--model gpt-1.3b --cluster a100-nvlink --planner magic", "unknown planner"},
	        {"--model gpt-1.3b --cluster a100-nvlink --tp 3", "not divisible"},
	        {"--model gpt-1.3b --cluster a100-nvlink --pp 30 --partition",
	         "exceeds the number of layers"},
	        {"--model gpt-1.3b --cluster a100-nvlink --budget 1G", "below stage 0's static"},
	        {"--model gpt-1.3b --cluster a100-nvlink --budget lots", "is not a size"},
	        {"--model gpt-1.3b --cluster a100-nvlink --frobnicate", "unknown argument"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct result r = plan(ERR, cases[i].args);

		assert_int_equal(r.status, 2);
		if (!strstr(r.text, cases[i].message))
			fail_msg("'%s': expected '%s' in: %s", cases[i].args, cases[i].message,
			         r.text);
		free(r.text);
	}
}

static int setup(void **state)
{
	snprintf(lynx, sizeof(lynx), "%s/bin/lynx", build_dir);
	if (access(lynx, X_OK)) {
		fprintf(stderr, "test_lynx_plan: needs %s (make lynx)\n", lynx);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (harness_init(argv[0], "test-lynx-plan"))
		return 1;

	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_plan_writes_a_plan_file_and_a_summary),
	        cmocka_unit_test(test_plan_runs_the_planner_named),
	        cmocka_unit_test(test_plan_partition_prints_split_and_megatron_flags),
	        cmocka_unit_test(test_plan_uneven_layers_need_partition),
	        cmocka_unit_test(test_plan_bad_input_exits_2_with_a_reason),
	};

	return harness_finish(cmocka_run_group_tests(tests, setup, NULL));
}
