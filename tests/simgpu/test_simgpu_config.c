/* SPDX-License-Identifier: Apache-2.0 */
/* simgpu's settings: strict parsing, clear refusals, and refusal at initialisation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "core.h"

/* The settings a test pretends the environment holds: name=value pairs, NULL-ended. */
static const char *const *fake_env;

static const char *fake_lookup(const char *name)
{
	size_t len = strlen(name);

	for (const char *const *kv = fake_env; kv && *kv; kv++)
		if (!strncmp(*kv, name, len) && (*kv)[len] == '=')
			return *kv + len + 1;
	return NULL;
}

static int parse(const char *const *env, struct simgpu_config *c, char *why, size_t len)
{
	fake_env = env;
	return simgpu_config_parse(c, why, len, fake_lookup);
}

static void test_defaults_describe_an_h200(void **state)
{
	struct simgpu_config c;
	char why[256] = "";

	assert_int_equal(parse(NULL, &c, why, sizeof(why)), 0);
	assert_int_equal(c.capacity_bytes, 141ull << 30);
	assert_int_equal(c.vmm_granularity, 2u << 20);
	assert_int_equal(c.net_bytes_per_s, 450000000000ull);
	assert_string_equal(c.faults, "");
}

static void test_sizes_use_powers_of_1024_and_rates_powers_of_1000(void **state)
{
	const char *const env[] = {"SIMGPU_MEM_CAPACITY=3M", "SIMGPU_H2D_BW=25G",
	                           "SIMGPU_VMM_GRANULARITY=64K", "SIMGPU_API_COST_NS=0", NULL};
	struct simgpu_config c;
	char why[256];

	assert_int_equal(parse(env, &c, why, sizeof(why)), 0);
	assert_int_equal(c.capacity_bytes, 3u << 20);
	assert_int_equal(c.h2d_bytes_per_s, 25000000000ull);
	assert_int_equal(c.vmm_granularity, 64u << 10);
	assert_int_equal(c.api_cost_ns, 0);
}

/* Each bad value is refused with a reason that names the variable and the value. */
static void test_bad_values_are_refused_with_a_reason(void **state)
{
	static const char *const bad[] = {
	        "SIMGPU_MEM_CAPACITY=12Q",
	        "SIMGPU_MEM_CAPACITY=",
	        "SIMGPU_MEM_CAPACITY=-1",
	        "SIMGPU_MEM_CAPACITY=1GB",
	        "SIMGPU_VMM_GRANULARITY=3000",
	        "SIMGPU_VMM_GRANULARITY=1K",
	        "SIMGPU_API_COST_NS=2K",
	        "SIMGPU_API_COST_NS=1.5",
	        "SIMGPU_CONCURRENT_SHARE_PCT=101",
	        "SIMGPU_OVERLAP_SLOWDOWN_PCT=99",
	        "SIMGPU_NET_BW=0",
	        "SIMGPU_DEVICE_COUNT=0",
	        "SIMGPU_MEM_CAPACITY=99999999999999999999",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *const env[] = {bad[i], NULL};
		struct simgpu_config c;
		char why[256] = "";
		size_t name_len = strchr(bad[i], '=') - bad[i];

		assert_int_not_equal(parse(env, &c, why, sizeof(why)), 0);
		assert_true(strncmp(why, bad[i], name_len) == 0);
		assert_non_null(strstr(why, bad[i] + name_len + 1));
	}
}

/* Runs a child with one bad setting; returns cuInit's result, and its stderr in err. */
static int init_in_child(const char *name, const char *value, char *err, size_t len)
{
	int pipefd[2], status;
	CUresult result = CUDA_SUCCESS;

	assert_int_equal(pipe(pipefd), 0);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(pipefd[1], STDERR_FILENO);
		setenv(name, value, 1);
		_exit((int)simgpu_core_init());
	}
	close(pipefd[1]);
	ssize_t n = read(pipefd[0], err, len - 1);
	err[n > 0 ? n : 0] = 0;
	close(pipefd[0]);
	waitpid(pid, &status, 0);
	if (WIFEXITED(status))
		result = (CUresult)WEXITSTATUS(status);
	return (int)result;
}

static void test_initialisation_refuses_a_bad_setting(void **state)
{
	char err[512];

	assert_int_equal(init_in_child("SIMGPU_MEM_CAPACITY", "12Q", err, sizeof(err)),
	                 CUDA_ERROR_INVALID_VALUE);
	assert_non_null(strstr(err, "SIMGPU_MEM_CAPACITY='12Q'"));
}

static void test_fault_specifications_are_checked(void **state)
{
	static const char *const bad[] = {
	        "cudaMallocc@1=2", "cudaMalloc@0=2",  "cudaMalloc@1=0",
	        "cudaMalloc=2",    "cudaMalloc@1=2,", "cudaMalloc@x=2",
	};
	char err[512];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(init_in_child("SIMGPU_FAULTS", bad[i], err, sizeof(err)),
		                 CUDA_ERROR_INVALID_VALUE);
		assert_non_null(strstr(err, "SIMGPU_FAULTS"));
	}
	assert_int_equal(init_in_child("SIMGPU_FAULTS", "cudaMalloc@2=2,ncclAllReduce@1=5", err,
	                               sizeof(err)),
	                 CUDA_SUCCESS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_defaults_describe_an_h200),
	        cmocka_unit_test(test_sizes_use_powers_of_1024_and_rates_powers_of_1000),
	        cmocka_unit_test(test_bad_values_are_refused_with_a_reason),
	        cmocka_unit_test(test_initialisation_refuses_a_bad_setting),
	        cmocka_unit_test(test_fault_specifications_are_checked),
	};
	return cmocka_run_group_tests_name("simgpu_config", tests, NULL, NULL);
}
