/* SPDX-License-Identifier: Apache-2.0 */
/*
 * liblynx.so under tinytrain on simgpu: exact pass-through (byte-identical output in off
 * and profile modes), every call accounted for (Lynx's count of each hooked function equals
 * simgpu's count of calls received, in every process), errors passed through unchanged,
 * bad settings refused harmlessly, and silence in processes that never use CUDA.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

static char build_dir[1024]; /* build/, from argv[0] = build/tests/test_interposition */
static char scratch[1100];   /* a fresh directory per run of this binary */

struct output {
	char *out, *err;
	int exit_code;
};

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long len;

	if (!f)
		return strdup("");
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	buf = calloc(1, (size_t)len + 1);
	if (fread(buf, 1, (size_t)len, f) != (size_t)len)
		buf[0] = 0;
	fclose(f);
	return buf;
}

/* Runs "env... cmd" through sh, capturing stdout and stderr separately. */
static struct output run(const char *env, const char *cmd)
{
	char line[16384], out_path[1200], err_path[1200];
	struct output o;

	snprintf(out_path, sizeof(out_path), "%s/stdout", scratch);
	snprintf(err_path, sizeof(err_path), "%s/stderr", scratch);
	snprintf(line, sizeof(line), "cd %s/.. && env %s %s >%s 2>%s", build_dir, env, cmd,
	         out_path, err_path);
	int status = system(line);
	o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	o.out = slurp(out_path);
	o.err = slurp(err_path);
	return o;
}

static void release(struct output *o)
{
	free(o->out);
	free(o->err);
}

static const char *const layouts[] = {
        "--nproc 4 --pp 2 --tp 2 --dp 1 --layers 4 --microbatches 4 --steps 2",
        "--nproc 4 --pp 1 --tp 1 --dp 4 --layers 2 --microbatches 2 --steps 2",
};

static void tinytrain_cmd(char *buf, size_t len, const char *layout)
{
	snprintf(buf, len, "%s/bin/tinytrain %s", build_dir, layout);
}

static void test_off_and_profile_modes_print_identical_bytes(void **state)
{
	char cmd[2048], env[4096];

	for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
		tinytrain_cmd(cmd, sizeof(cmd), layouts[l]);
		struct output bare = run("", cmd);
		assert_int_equal(bare.exit_code, 0);
		const char *modes[] = {"off", "profile"};
		for (int m = 0; m < 2; m++) {
			snprintf(env, sizeof(env),
			         "LD_PRELOAD=%s/liblynx.so LYNX_MODE=%s LYNX_OUT=%s/out", build_dir,
			         modes[m], scratch);
			struct output shimmed = run(env, cmd);
			assert_int_equal(shimmed.exit_code, 0);
			if (strcmp(bare.out, shimmed.out))
				fail_msg("%s under LYNX_MODE=%s differs:\n%s\nvs\n%s", layouts[l],
				         modes[m], bare.out, shimmed.out);
			assert_string_equal(shimmed.err, ""); /* quiet at the default log level */
			release(&shimmed);
		}
		release(&bare);
	}
}

/* Count of `symbol` in a "symbol count" file (simgpu's dump), or -1. */
static long simgpu_count(const char *dump, const char *symbol)
{
	size_t len = strlen(symbol);

	for (const char *line = dump; line && *line; line = strchr(line, '\n') + 1) {
		if (!strncmp(line, symbol, len) && line[len] == ' ')
			return atol(line + len + 1);
		if (!strchr(line, '\n'))
			break;
	}
	return -1;
}

/* Checks every "symbol":count of Lynx's calls file against simgpu's dump of that pid. */
static int compare_counts(const char *calls_path, const char *simgpu_path)
{
	char *calls = slurp(calls_path), *dump = slurp(simgpu_path);
	char *p = strstr(calls, "\"calls\":{");
	int compared = 0;

	assert_non_null(p);
	for (p += 9; *p == '"';) {
		char symbol[128];
		long lynx_count;
		int used;
		assert_int_equal(sscanf(p, "\"%127[^\"]\":%ld%n", symbol, &lynx_count, &used), 2);
		if (simgpu_count(dump, symbol) != lynx_count)
			fail_msg("%s: Lynx counted %ld calls of %s, simgpu received %ld",
			         calls_path, lynx_count, symbol, simgpu_count(dump, symbol));
		compared++;
		p += used;
		if (*p == ',')
			p++;
	}
	free(calls);
	free(dump);
	return compared;
}

static void test_every_call_is_accounted_for(void **state)
{
	char cmd[2048], env[4096], dir[1200];
	int processes = 0, compared = 0;

	snprintf(dir, sizeof(dir), "%s/counts", scratch);
	mkdir(dir, 0755);
	tinytrain_cmd(cmd, sizeof(cmd), layouts[0]);
	snprintf(env, sizeof(env),
	         "LD_PRELOAD=%s/liblynx.so LYNX_MODE=profile LYNX_OUT=%s SIMGPU_COUNTERS=%s/simgpu",
	         build_dir, dir, dir);
	struct output o = run(env, cmd);
	assert_int_equal(o.exit_code, 0);
	release(&o);

	DIR *d = opendir(dir);
	struct dirent *entry;
	while ((entry = readdir(d))) {
		int pid;
		char calls[1600], dump[1600];
		if (sscanf(entry->d_name, "calls.%d.json", &pid) != 1)
			continue;
		snprintf(calls, sizeof(calls), "%s/%s", dir, entry->d_name);
		snprintf(dump, sizeof(dump), "%s/simgpu.%d", dir, pid);
		compared += compare_counts(calls, dump);
		processes++;
	}
	closedir(d);
	/* The launcher and four ranks; each rank uses dozens of hooked functions. */
	assert_int_equal(processes, 5);
	assert_true(compared > 4 * 30);
}

static void test_injected_errors_reach_the_trainer_unchanged(void **state)
{
	char cmd[2048], env[4096];
	const char *fault = "SIMGPU_FAULTS=cudaMallocAsync@40=2";

	tinytrain_cmd(cmd, sizeof(cmd), "--nproc 1 --layers 2 --steps 1");
	snprintf(env, sizeof(env), "%s", fault);
	struct output bare = run(env, cmd);
	snprintf(env, sizeof(env), "%s LD_PRELOAD=%s/liblynx.so LYNX_MODE=profile LYNX_OUT=%s/out",
	         fault, build_dir, scratch);
	struct output shimmed = run(env, cmd);

	assert_int_not_equal(bare.exit_code, 0);
	assert_int_equal(shimmed.exit_code, bare.exit_code);
	assert_non_null(strstr(bare.err, "cudaMallocAsync failed: out of memory"));
	assert_non_null(strstr(shimmed.err, "cudaMallocAsync failed: out of memory"));
	release(&bare);
	release(&shimmed);
}

/* Counts the lines of text that contain needle. */
static int lines_with(const char *text, const char *needle)
{
	int n = 0;

	for (const char *p = text; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

static void test_bad_settings_warn_once_and_the_run_goes_on(void **state)
{
	char cmd[2048], env[4096];

	tinytrain_cmd(cmd, sizeof(cmd), "--nproc 2 --tp 2 --layers 2 --steps 2");
	struct output bare = run("", cmd);
	snprintf(env, sizeof(env),
	         "LD_PRELOAD=%s/liblynx.so LYNX_MODE=bogus LYNX_LOG=7x LYNX_OUT=/proc/lynx-cannot",
	         build_dir);
	struct output shimmed = run(env, cmd);

	assert_int_equal(shimmed.exit_code, 0);
	assert_string_equal(shimmed.out, bare.out);
	/* One line per problem, per process (the launcher and two ranks initialise Lynx;
	 * each says it once, and only once). */
	int processes = lines_with(shimmed.err, "LYNX_MODE='bogus'");
	assert_true(processes >= 1);
	assert_int_equal(lines_with(shimmed.err, "LYNX_LOG='7x'"), processes);
	assert_int_equal(lines_with(shimmed.err, "LYNX_OUT='/proc/lynx-cannot'"), processes);
	assert_non_null(strstr(shimmed.err, "off|profile|recompute"));
	release(&bare);
	release(&shimmed);
}

static void test_processes_without_cuda_see_nothing(void **state)
{
	char env[4096];

	snprintf(env, sizeof(env), "LD_PRELOAD=%s/liblynx.so LYNX_MODE=bogus LYNX_LOG=debug",
	         build_dir);
	struct output o = run(env, "sh -c 'echo fine'");
	assert_int_equal(o.exit_code, 0);
	assert_string_equal(o.out, "fine\n");
	assert_string_equal(o.err, "");
	release(&o);
}

int main(int argc, char **argv)
{
	const char *slash = strrchr(argv[0], '/');
	char resolved[1200];

	snprintf(resolved, sizeof(resolved), "%.*s/..", slash ? (int)(slash - argv[0]) : 1,
	         slash ? argv[0] : ".");
	if (!realpath(resolved, build_dir))
		return 1;
	snprintf(scratch, sizeof(scratch), "%s/test-interposition.%d", build_dir, (int)getpid());
	mkdir(scratch, 0755);

	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_off_and_profile_modes_print_identical_bytes),
	        cmocka_unit_test(test_every_call_is_accounted_for),
	        cmocka_unit_test(test_injected_errors_reach_the_trainer_unchanged),
	        cmocka_unit_test(test_bad_settings_warn_once_and_the_run_goes_on),
	        cmocka_unit_test(test_processes_without_cuda_see_nothing),
	};
	int failed = cmocka_run_group_tests_name("interposition", tests, NULL, NULL);
	char rm[1200];
	snprintf(rm, sizeof(rm), "rm -rf %s", scratch);
	if (!failed && system(rm))
		return 1;
	return failed;
}
