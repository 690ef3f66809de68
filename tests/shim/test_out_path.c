/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of LYNX_OUT's patterns (shim/out_path.c): %p, %h, %q{VAR}, %% and what is refused. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "out_path.h"

static const char *fake_env(const char *name)
{
	if (!strcmp(name, "RANK"))
		return "3";
	if (!strcmp(name, "SLURM_JOB_ID"))
		return "777";
	return NULL;
}

static const struct lynx_out_path_facts facts = {4242, "node07", fake_env};

static void expands(const char *pattern, const char *want)
{
	char out[256], problem[160];

	assert_int_equal(
	        lynx_out_path_expand(pattern, &facts, out, sizeof(out), problem, sizeof(problem)),
	        0);
	assert_string_equal(out, want);
	assert_string_equal(problem, "");
}

static void test_out_path_expands_each_pattern(void **state)
{
	expands("lynx-out", "lynx-out");
	expands("out/proc-%p", "out/proc-4242");
	expands("%h/%q{RANK}", "node07/3");
	expands("run-%q{SLURM_JOB_ID}-%h-%p", "run-777-node07-4242");
	expands("100%%", "100%");
	expands("%%p", "%p");
	expands("", "");
}

static void test_out_path_an_unset_variable_becomes_the_process_id(void **state)
{
	char out[256], problem[160];

	assert_int_equal(lynx_out_path_expand("out/r%q{LOCAL_RANK}", &facts, out, sizeof(out),
	                                      problem, sizeof(problem)),
	                 0);
	assert_string_equal(out, "out/r4242");
	assert_non_null(strstr(problem, "LOCAL_RANK is not set"));
}

static void test_out_path_refuses_what_it_does_not_know(void **state)
{
	static const struct {
		const char *pattern, *problem;
	} bad[] = {
	        {"out/%x", "'%x' at offset 4 is not %p, %h, %q{VAR} or %%"},
	        {"out/%", "is not %p"},
	        {"out/%q", "%q must name a variable as %q{NAME} (at offset 4)"},
	        {"out/%q{RANK", "%q must name a variable"},
	        {"out/%q{}", "%q must name a variable"},
	};
	char out[256], problem[160];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(lynx_out_path_expand(bad[i].pattern, &facts, out, sizeof(out),
		                                      problem, sizeof(problem)),
		                 -EINVAL);
		if (!strstr(problem, bad[i].problem))
			fail_msg("%s: %s", bad[i].pattern, problem);
		assert_string_equal(out, bad[i].pattern); /* the pattern itself, as given */
	}
}

static void test_out_path_refuses_an_expansion_too_long(void **state)
{
	char out[8], problem[160];

	assert_int_equal(lynx_out_path_expand("dir-%p-%p", &facts, out, sizeof(out), problem,
	                                      sizeof(problem)),
	                 -ENAMETOOLONG);
	assert_non_null(strstr(problem, "longer than 7 bytes"));
}

static void test_out_path_per_process_only_with_a_pid(void **state)
{
	assert_true(lynx_out_path_per_process("out/%p"));
	assert_true(lynx_out_path_per_process("%h-%p"));
	assert_false(lynx_out_path_per_process("out/%%p"));
	assert_false(lynx_out_path_per_process("out/%h/%q{RANK}"));
	assert_false(lynx_out_path_per_process("lynx-out"));
}

static void test_out_path_private_with_a_pid_a_host_or_a_variable(void **state)
{
	assert_true(lynx_out_path_private("out/%p"));
	assert_true(lynx_out_path_private("out/%h"));
	assert_true(lynx_out_path_private("out/%q{RANK}"));
	assert_false(lynx_out_path_private("out/%%h"));
	assert_false(lynx_out_path_private("lynx-out"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_out_path_expands_each_pattern),
	        cmocka_unit_test(test_out_path_an_unset_variable_becomes_the_process_id),
	        cmocka_unit_test(test_out_path_refuses_what_it_does_not_know),
	        cmocka_unit_test(test_out_path_refuses_an_expansion_too_long),
	        cmocka_unit_test(test_out_path_per_process_only_with_a_pid),
	        cmocka_unit_test(test_out_path_private_with_a_pid_a_host_or_a_variable),
	};

	return cmocka_run_group_tests_name("out_path", tests, NULL, NULL);
}
