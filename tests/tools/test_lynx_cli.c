/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Runs the built lynx command (<build>/bin/lynx beside <build>/tests/test_lynx_cli) in a
 * clean environment and checks its exit statuses and output: help, run, env, doctor.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "faults.h"
#include "lynx.h"

/* Every option of options.def: the names and defaults that `lynx env` must show. */
static const struct {
	const char *name, *default_value, *values;
} options[] = {
#define LYNX_OPTION(name, kind, field, def, values, help) {#name, def, values},
#include "options.def"
#undef LYNX_OPTION
};

/* Every hook of hooks.def, with the layer whose library `lynx doctor` checks it in. */
static const struct {
	const char *layer, *symbol;
} hooks[] = {
#define LYNX_HOOK(layer, symbol, ...) {#layer, #symbol},
#include "hooks.def"
#undef LYNX_HOOK
};

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* <build> (from this test's own path), <build>/bin/lynx, <build>/liblynx.so resolved, and a
 * scratch directory that is every command's cwd. */
static char build[PATH_MAX], lynx[PATH_MAX + 16], lib[PATH_MAX], tmp[PATH_MAX];

enum stream { OUT, ERR };

/* What one command printed on the stream asked for, and how it ended. */
struct result {
	char *text;
	int status; /* exit status, or -1 when it did not exit normally */
};

/*
 * Runs "env -i <vars> lynx <args>" in tmp through sh, capturing one stream (the other is
 * discarded). vars and args are shell words. An ASan build of liblynx.so may be preloaded
 * into programs that are not: ASan's link-order check is turned off for them.
 */
static struct result run_lynx(enum stream stream, const char *vars, const char *args)
{
	struct result r = {NULL, -1};
	size_t size = 0, used = 0;
	char *cmd;
	FILE *pipe;
	int status;

	assert_true(asprintf(&cmd,
	                     "cd '%s' && env -i PATH=/usr/bin:/bin "
	                     "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0 %s '%s' %s %s",
	                     tmp, vars, lynx, args,
	                     stream == OUT ? "2>/dev/null" : "2>&1 >/dev/null") > 0);
	pipe = popen(cmd, "r");
	assert_non_null(pipe);
	for (;;) {
		if (size - used < 4096) {
			size = size ? 2 * size : 65536;
			r.text = realloc(r.text, size);
			assert_non_null(r.text);
		}
		size_t n = fread(r.text + used, 1, size - used - 1, pipe);
		if (!n)
			break;
		used += n;
	}
	r.text[used] = '\0';
	status = pclose(pipe);
	r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	free(cmd);
	return r;
}

/* The line of text that starts with prefix, copied into line; false when none. */
static bool find_line(const char *text, const char *prefix, char *line, size_t len)
{
	size_t plen = strlen(prefix);

	for (const char *at = text; at && *at; at = strchr(at, '\n'), at = at ? at + 1 : NULL) {
		if (!strncmp(at, prefix, plen)) {
			snprintf(line, len, "%.*s", (int)strcspn(at, "\n"), at);
			return true;
		}
	}
	return false;
}

static void write_file(const char *path, const char *content)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(content, f);
	assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
	char exe[PATH_MAX], path[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n <= 0)
		return -1;
	exe[n] = '\0';
	/* <build>/tests/test_lynx_cli */
	*strrchr(exe, '/') = '\0';
	*strrchr(exe, '/') = '\0';
	snprintf(build, sizeof(build), "%s", exe);
	snprintf(lynx, sizeof(lynx), "%s/bin/lynx", build);
	snprintf(path, sizeof(path), "%s/liblynx.so", build);
	if (access(lynx, X_OK) || !realpath(path, lib)) {
		fprintf(stderr, "test_lynx_cli: needs %s and %s (make lynx)\n", lynx, path);
		return -1;
	}
	snprintf(tmp, sizeof(tmp), "/tmp/test_lynx_cli.XXXXXX");
	if (!mkdtemp(tmp))
		return -1;
	snprintf(path, sizeof(path), "%s/empty", tmp);
	if (mkdir(path, 0700))
		return -1;
	snprintf(path, sizeof(path), "%s/broken", tmp);
	return mkdir(path, 0700);
}

static int teardown(void **state)
{
	char *cmd;

	if (asprintf(&cmd, "rm -rf '%s'", tmp) < 0)
		return -1;
	int rc = system(cmd);
	free(cmd);
	return rc ? -1 : 0;
}

static void test_help_and_version_exit_zero(void **state)
{
	struct result r = run_lynx(OUT, "", "--help");

	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, "run"));
	assert_non_null(strstr(r.text, "env"));
	assert_non_null(strstr(r.text, "doctor"));
	free(r.text);

	r = run_lynx(OUT, "", "help");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, "doctor"));
	free(r.text);

	r = run_lynx(OUT, "", "help run");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, "--mode"));
	free(r.text);

	r = run_lynx(OUT, "", "--version");
	assert_int_equal(r.status, 0);
	assert_string_equal(r.text, "lynx " LYNX_VERSION "\n");
	free(r.text);

	r = run_lynx(OUT, "", "version");
	assert_int_equal(r.status, 0);
	assert_string_equal(r.text, "lynx " LYNX_VERSION "\n");
	free(r.text);
}

static void test_unknown_command_exits_2_with_usage_on_stderr(void **state)
{
	struct result out = run_lynx(OUT, "", "frobnicate");
	struct result err = run_lynx(ERR, "", "frobnicate");

	assert_int_equal(out.status, 2);
	assert_string_equal(out.text, "");
	assert_non_null(strstr(err.text, "unknown command 'frobnicate'"));
	assert_non_null(strstr(err.text, "usage: lynx"));
	free(out.text);
	free(err.text);

	out = run_lynx(OUT, "", "");
	assert_int_equal(out.status, 2);
	free(out.text);
}

static void test_run_without_dashdash_or_command_exits_2(void **state)
{
	static const char *const bad[] = {"run",    "run env",    "run --mode off env",
	                                  "run --", "run --mode", "run --frob -- env"};

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct result r = run_lynx(ERR, "", bad[i]);

		if (r.status != 2)
			fail_msg("'lynx %s' exited %d, not 2", bad[i], r.status);
		assert_non_null(strstr(r.text, "usage: lynx run"));
		free(r.text);
	}
}

static void test_run_bogus_mode_names_allowed_values(void **state)
{
	struct result r = run_lynx(ERR, "", "run --mode bogus -- env");

	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.text, "'bogus'"));
	assert_non_null(strstr(r.text, options[0].values)); /* LYNX_MODE, first in options.def */
	assert_string_equal(options[0].name, "LYNX_MODE");
	free(r.text);
}

static void test_run_sets_preload_mode_out_and_allocator(void **state)
{
	struct result r = run_lynx(OUT, "", "run --mode recompute --out=/tmp/lynx-o -- env");
	char want[PATH_MAX + 32];

	assert_int_equal(r.status, 0);
	snprintf(want, sizeof(want), "\nLD_PRELOAD=%s\n", lib);
	assert_non_null(strstr(r.text, want));
	assert_non_null(strstr(r.text, "\nLYNX_MODE=recompute\n"));
	assert_non_null(strstr(r.text, "\nLYNX_OUT=/tmp/lynx-o\n"));
	assert_non_null(strstr(r.text, "\nPYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync\n"));
	free(r.text);

	/* Without --mode, the environment's LYNX_MODE stays as the user set it. */
	r = run_lynx(OUT, "LYNX_MODE=off", "run -- env");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, "\nLYNX_MODE=off\n"));
	assert_null(strstr(r.text, "LYNX_OUT="));
	free(r.text);
}

/* The budget, the planner and a plan, asked for in words: set for the command as given
 * (liblynx.so reads them), checked first as liblynx.so will read them. */
static void test_run_takes_budget_planner_and_plan(void **state)
{
	static const struct {
		const char *env, *args, *sets[3];
	} good[] = {
	        {"",
	         "run --mode recompute --budget 4.5GiB --planner opt --plan=p.json -- env",
	         {"\nLYNX_BUDGET=4.5GiB\n", "\nLYNX_PLANNER=opt\n", "\nLYNX_PLAN=p.json\n"}},
	        /* A percentage, and profile mode's what-if takes a budget too. */
	        {"", "run --budget 60% -- env", {"\nLYNX_BUDGET=60%\n"}},
	        {"",
	         "run --mode recompute --max-slowdown 0.5% -- env",
	         {"\nLYNX_MAX_SLOWDOWN=0.5%\n"}},
	        /* The environment's recompute mode is the mode. */
	        {"LYNX_MODE=recompute",
	         "run --planner checkmate -- env",
	         {"\nLYNX_PLANNER=checkmate\n"}},
	};
	struct result r;

	for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
		r = run_lynx(OUT, good[i].env, good[i].args);
		assert_int_equal(r.status, 0);
		for (size_t k = 0; k < ARRAY_SIZE(good[i].sets) && good[i].sets[k]; k++)
			if (!strstr(r.text, good[i].sets[k]))
				fail_msg("'lynx %s' did not set %s", good[i].args, good[i].sets[k]);
		free(r.text);
	}

	static const struct {
		const char *args, *says;
	} bad[] = {
	        {"run --budget 4.5Q -- env", "--budget '4.5Q' is not a size"},
	        {"run --budget 101% -- env", "or a percentage from 1% to 100%"},
	        {"run --budget= -- env", "--budget needs a value"},
	        {"run --mode recompute --planner fastest -- env", "is not one of heu|opt"},
	        {"run --planner opt -- env", "--planner applies to recompute mode only"},
	        {"run --mode profile --plan p.json -- env", "--plan applies to recompute mode"},
	        {"run --mode recompute --max-slowdown 2.5 -- env", "is not a percentage"},
	        {"run --mode recompute --max-slowdown 101% -- env", "from 0% to 100%"},
	        {"run --mode recompute --budget 6M --max-slowdown 2% -- env", "not both"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		r = run_lynx(ERR, "", bad[i].args);
		if (r.status != 2 || !strstr(r.text, bad[i].says))
			fail_msg("'lynx %s' exited %d saying:\n%s", bad[i].args, r.status, r.text);
		free(r.text);
	}
}

static void test_run_keeps_user_allocator_setting(void **state)
{
	struct result out =
	        run_lynx(OUT, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "run -- env");
	struct result err =
	        run_lynx(ERR, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "run -- true");

	assert_int_equal(out.status, 0);
	assert_non_null(strstr(out.text, "\nPYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"));
	assert_null(strstr(out.text, "cudaMallocAsync"));
	assert_int_equal(err.status, 0);
	assert_non_null(strstr(err.text, "can profile but not evict"));
	free(out.text);
	free(err.text);

	/* PyTorch 2.9's name counts as the user's setting too. */
	out = run_lynx(OUT, "PYTORCH_ALLOC_CONF=backend:cudaMallocAsync", "run -- env");
	assert_int_equal(out.status, 0);
	assert_null(strstr(out.text, "PYTORCH_CUDA_ALLOC_CONF="));
	free(out.text);
}

static void test_run_prepends_to_user_preload_after_sanitizers(void **state)
{
	char want[2 * PATH_MAX];
	struct result r = run_lynx(OUT, "LD_PRELOAD=/nonexistent/libother.so", "run -- env");

	assert_int_equal(r.status, 0);
	snprintf(want, sizeof(want), "\nLD_PRELOAD=%s:/nonexistent/libother.so\n", lib);
	assert_non_null(strstr(r.text, want));
	free(r.text);

	r = run_lynx(OUT, "LD_PRELOAD='/nonexistent/libasan.so.8 /nonexistent/libother.so'",
	             "run -- env");
	assert_int_equal(r.status, 0);
	snprintf(want, sizeof(want),
	         "\nLD_PRELOAD=/nonexistent/libasan.so.8 %s:/nonexistent/libother.so\n", lib);
	assert_non_null(strstr(r.text, want));
	free(r.text);

	/* Nested: liblynx.so is not preloaded twice. */
	snprintf(want, sizeof(want), "LD_PRELOAD=%s:/nonexistent/libother.so", lib);
	r = run_lynx(OUT, want, "run -- env");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, want));
	free(r.text);
}

static void test_run_without_library_exits_2(void **state)
{
	struct result r = run_lynx(ERR, "LYNX_LIB=/nonexistent/liblynx.so", "run -- env");

	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.text, "cannot find liblynx.so"));
	assert_non_null(strstr(r.text, "LYNX_LIB=/nonexistent/liblynx.so"));
	free(r.text);
}

/* A LYNX_LIB that ld.so would skip (leaving the job to run without Lynx, exit 0) is refused:
 * a text file, and a program (position-independent, so ET_DYN like a library). */
static void test_run_refuses_a_lynx_lib_that_is_no_shared_object(void **state)
{
	char vars[PATH_MAX + 32];
	struct result r = run_lynx(ERR, "LYNX_LIB=/etc/passwd", "run -- env");

	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.text, "LYNX_LIB=/etc/passwd (not an ELF shared object)"));
	free(r.text);
	snprintf(vars, sizeof(vars), "LYNX_LIB=%s/bin/lynx", build);
	r = run_lynx(ERR, vars, "run -- env");
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.text, "(not an ELF shared object)"));
	free(r.text);
}

static void test_run_uses_lynx_lib_and_passes_exit_status(void **state)
{
	char vars[PATH_MAX + 32], want[PATH_MAX + 32], libm[PATH_MAX];
	struct result r;

	/* Any shared object will do as the library (the C library's libm here): env only
	 * prints it. */
	assert_non_null(realpath("/lib/x86_64-linux-gnu/libm.so.6", libm));
	snprintf(vars, sizeof(vars), "LYNX_LIB=%s", libm);
	r = run_lynx(OUT, vars, "run -- env");
	assert_int_equal(r.status, 0);
	snprintf(want, sizeof(want), "\nLD_PRELOAD=%s\n", libm);
	assert_non_null(strstr(r.text, want));
	free(r.text);

	r = run_lynx(OUT, "", "run -- sh -c 'exit 7'");
	assert_int_equal(r.status, 7);
	free(r.text);

	r = run_lynx(ERR, "", "run -- /nonexistent/trainer --steps 3");
	assert_int_equal(r.status, 127);
	assert_non_null(strstr(r.text, "cannot run '/nonexistent/trainer'"));
	free(r.text);
}

static void test_env_lists_every_option_with_its_default(void **state)
{
	struct result r = run_lynx(OUT, "LYNX_WARMUP=5", "env");
	char prefix[128], line[1024], def[128];

	assert_int_equal(r.status, 0);
	for (size_t i = 0; i < ARRAY_SIZE(options); i++) {
		snprintf(prefix, sizeof(prefix), "%s ", options[i].name);
		if (!find_line(r.text, prefix, line, sizeof(line)))
			fail_msg("`lynx env` does not list %s", options[i].name);
		snprintf(def, sizeof(def), " %s ",
		         *options[i].default_value ? options[i].default_value : "\"\"");
		if (!strstr(line, def))
			fail_msg("%s: no default '%s' in: %s", options[i].name, def, line);
	}
	assert_true(find_line(r.text, "LYNX_WARMUP ", line, sizeof(line)));
	assert_non_null(strstr(line, " 5 "));
	assert_non_null(strstr(line, " env "));
	free(r.text);
}

static void test_env_bad_value_warns_and_shows_default(void **state)
{
	struct result r = run_lynx(OUT, "LYNX_LOG=7x LYNX_MOED=recompute", "env");
	char line[1024];

	assert_int_equal(r.status, 0);
	assert_true(find_line(r.text, "LYNX_LOG ", line, sizeof(line)));
	assert_non_null(strstr(line, " warn "));
	assert_non_null(strstr(line, " invalid "));
	assert_true(find_line(r.text, "  warning: LYNX_LOG='7x'", line, sizeof(line)));
	assert_non_null(strstr(line, "error|warn|info|debug|trace"));
	assert_non_null(strstr(line, "using the default 'warn'"));
	assert_true(find_line(r.text, "warning: LYNX_MOED ", line, sizeof(line)));
	free(r.text);
}

/* LYNX_BUDGET is a size or a percentage of each rank's peak: 1% to 100%, nothing else. */
static void test_env_budget_takes_a_size_or_a_percentage(void **state)
{
	static const struct {
		const char *value, *shown;
	} good[] = {{"60%", " 60% "}, {"100%", " 100% "},    {"1%", " 1% "},
	            {"6M", " 6M "},   {"4.5GiB", " 4608M "}, {"70GB", " 68359375K "}};
	static const char *const bad[] = {"0%",  "101%", "%",    "60%%", "6M%",
	                                  "-5%", "60 %", "4.5%", "4.5",  "4.5Q"};
	char vars[128], line[1024];

	for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
		snprintf(vars, sizeof(vars), "LYNX_BUDGET='%s'", good[i].value);
		struct result r = run_lynx(OUT, vars, "env");
		assert_int_equal(r.status, 0);
		assert_true(find_line(r.text, "LYNX_BUDGET ", line, sizeof(line)));
		if (!strstr(line, good[i].shown) || !strstr(line, " env "))
			fail_msg("LYNX_BUDGET=%s: %s", good[i].value, line);
		free(r.text);
	}
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		snprintf(vars, sizeof(vars), "LYNX_BUDGET='%s'", bad[i]);
		struct result r = run_lynx(OUT, vars, "env");
		assert_int_equal(r.status, 0);
		assert_true(find_line(r.text, "LYNX_BUDGET ", line, sizeof(line)));
		if (!strstr(line, " invalid "))
			fail_msg("LYNX_BUDGET=%s accepted: %s", bad[i], line);
		assert_true(find_line(r.text, "  warning: LYNX_BUDGET=", line, sizeof(line)));
		assert_non_null(strstr(line, "is not a size ("));
		assert_non_null(strstr(line, ") or a percentage"));
		free(r.text);
	}
}

static void test_doctor_passes_on_simgpu(void **state)
{
	char vars[PATH_MAX + 32], line[PATH_MAX + 256], prefix[128], where[PATH_MAX + 64];
	struct result r;

	snprintf(vars, sizeof(vars), "LD_LIBRARY_PATH=%s/simgpu", build);
	r = run_lynx(OUT, vars, "doctor --verbose --require-nccl");
	if (r.status != 0)
		fail_msg("doctor on simgpu exited %d:\n%s", r.status, r.text);
	assert_true(find_line(r.text, "libcuda.so.1 ", line, sizeof(line)));
	snprintf(where, sizeof(where), "%s/simgpu/libcuda.so.1", build);
	assert_non_null(strstr(line, where));
	assert_non_null(strstr(line, "(13000)"));
	assert_true(find_line(r.text, "libcudart.so.13 ", line, sizeof(line)));
	assert_non_null(strstr(line, "(13000)"));
	assert_true(find_line(r.text, "libnccl.so.2 ", line, sizeof(line)));
	assert_non_null(strstr(line, "(22809)"));
	for (size_t i = 0; i < ARRAY_SIZE(hooks); i++) {
		snprintf(prefix, sizeof(prefix), "  %s ", hooks[i].symbol);
		if (!find_line(r.text, prefix, line, sizeof(line)))
			fail_msg("doctor does not list hook %s", hooks[i].symbol);
		if (!strstr(line, " ok "))
			fail_msg("hook %s (%s) does not resolve: %s", hooks[i].symbol,
			         hooks[i].layer, line);
	}
	assert_true(find_line(r.text, "doctor: ok", line, sizeof(line)));
	free(r.text);

	/* Under `lynx run`, doctor drops liblynx.so, whose dlsym answers are its own wrappers. */
	snprintf(where, sizeof(where), "run -- '%s' doctor", lynx);
	r = run_lynx(OUT, vars, where);
	if (r.status != 0)
		fail_msg("doctor under lynx run exited %d:\n%s", r.status, r.text);
	free(r.text);
}

static void test_doctor_fails_without_a_driver(void **state)
{
	char vars[PATH_MAX + 32], line[PATH_MAX + 256];
	struct result r;

	snprintf(vars, sizeof(vars), "LD_LIBRARY_PATH=%s/empty", tmp);
	r = run_lynx(OUT, vars, "doctor");
	assert_true(find_line(r.text, "libcuda.so.1 ", line, sizeof(line)));
	if (strstr(line, " ok ")) {
		free(r.text);
		skip(); /* the loader cache has a real driver: this machine cannot lack one */
	}
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(line, "FAIL"));
	assert_non_null(strstr(line, "absent"));
	assert_true(find_line(r.text, "driver hooks ", line, sizeof(line)));
	assert_non_null(strstr(line, "not checked"));
	assert_true(find_line(r.text, "doctor: ", line, sizeof(line)));
	assert_non_null(strstr(line, "cannot run"));
	free(r.text);
}

static void test_doctor_fails_on_a_broken_driver(void **state)
{
	char path[PATH_MAX + 32], line[PATH_MAX + 256];
	struct result r;

	snprintf(path, sizeof(path), "%s/broken/libcuda.so.1", tmp);
	write_file(path, "not an ELF file\n");
	snprintf(path, sizeof(path), "LD_LIBRARY_PATH=%s/broken", tmp);
	r = run_lynx(OUT, path, "doctor");
	assert_int_equal(r.status, 1);
	assert_true(find_line(r.text, "libcuda.so.1 ", line, sizeof(line)));
	assert_non_null(strstr(line, "FAIL"));
	assert_non_null(strstr(line, "cannot load"));
	free(r.text);

	r = run_lynx(ERR, "", "doctor --frob");
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.text, "usage: lynx doctor"));
	free(r.text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_help_and_version_exit_zero),
	        cmocka_unit_test(test_unknown_command_exits_2_with_usage_on_stderr),
	        cmocka_unit_test(test_run_without_dashdash_or_command_exits_2),
	        cmocka_unit_test(test_run_bogus_mode_names_allowed_values),
	        cmocka_unit_test(test_run_sets_preload_mode_out_and_allocator),
	        cmocka_unit_test(test_run_takes_budget_planner_and_plan),
	        cmocka_unit_test(test_run_keeps_user_allocator_setting),
	        cmocka_unit_test(test_run_prepends_to_user_preload_after_sanitizers),
	        cmocka_unit_test(test_run_without_library_exits_2),
	        cmocka_unit_test(test_run_refuses_a_lynx_lib_that_is_no_shared_object),
	        cmocka_unit_test(test_run_uses_lynx_lib_and_passes_exit_status),
	        cmocka_unit_test(test_env_lists_every_option_with_its_default),
	        cmocka_unit_test(test_env_bad_value_warns_and_shows_default),
	        cmocka_unit_test(test_env_budget_takes_a_size_or_a_percentage),
	        cmocka_unit_test(test_doctor_passes_on_simgpu),
	        cmocka_unit_test(test_doctor_fails_without_a_driver),
	        cmocka_unit_test(test_doctor_fails_on_a_broken_driver),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
