/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the test binaries that run built programs share: build/ found from argv[0] (the
 * binary is build/tests/test_x), a scratch directory per run, running "env... command" with
 * stdout and stderr captured apart, and reading a file whole. Header-only; include after
 * <cmocka.h>. One test binary, one thread: the globals are the binary's own.
 */
#ifndef LYNX_TESTS_HARNESS_H
#define LYNX_TESTS_HARNESS_H

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char build_dir[1024]; /* absolute build/ */
static char scratch[1100];   /* build/<name>.<pid>, removed after a run without failures */

/* Finds build/ and makes the scratch directory. Returns 0, or -1 if build/ is not found. */
static inline int harness_init(const char *argv0, const char *name)
{
	const char *slash = strrchr(argv0, '/');
	char tests_dir[1200];

	snprintf(tests_dir, sizeof(tests_dir), "%.*s/..", slash ? (int)(slash - argv0) : 1,
	         slash ? argv0 : ".");
	if (!realpath(tests_dir, build_dir))
		return -1;
	snprintf(scratch, sizeof(scratch), "%s/%s.%d", build_dir, name, (int)getpid());
	mkdir(scratch, 0755);
	return 0;
}

/* After the tests: the scratch directory goes unless something failed (it is the evidence).
 * Returns what the binary should exit with. */
static inline int harness_finish(int failed)
{
	char rm[1200];

	snprintf(rm, sizeof(rm), "rm -rf %s", scratch);
	if (!failed && system(rm))
		return 1;
	return failed;
}

/* The whole file, NUL-terminated (free it), or NULL if it cannot be read. */
static inline char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long len;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	buf = calloc(1, (size_t)len + 1);
	if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len)
		buf[0] = 0;
	fclose(f);
	return buf;
}

struct output {
	char *out, *err;
	int exit_code;
};

/*
 * Removes LeakSanitizer's note about a parent's thread in a forked child ("Running thread N
 * was not suspended. False leaks are possible."): SAN=address builds print it in processes
 * forked after Lynx's drainer ran in the parent. It is the sanitizer's bookkeeping across
 * fork, not output of Lynx or the program.
 */
static inline void drop_sanitizer_notes(char *text)
{
	char *line = text, *out = text;

	while (*line) {
		char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line + 1) : strlen(line);
		char *note = strstr(line, "was not suspended. False leaks are possible.");
		if (!note || (end && note > end)) {
			memmove(out, line, len);
			out += len;
		}
		line += len;
	}
	*out = 0;
}

/*
 * Runs "env... cmd" through sh from the repository root, capturing stdout and stderr. Each
 * run's streams stay in the scratch directory (run-N.cmd, .stdout, .stderr), which a
 * failure keeps: the evidence of a failure seen once, and the tail tests/run_tests.sh
 * prints.
 */
static inline struct output run(const char *env, const char *cmd)
{
	static int runs;
	char line[16384], out_path[1200], err_path[1200], cmd_path[1200];
	struct output o;
	int n = ++runs;

	snprintf(out_path, sizeof(out_path), "%s/run-%03d.stdout", scratch, n);
	snprintf(err_path, sizeof(err_path), "%s/run-%03d.stderr", scratch, n);
	snprintf(cmd_path, sizeof(cmd_path), "%s/run-%03d.cmd", scratch, n);
	FILE *f = fopen(cmd_path, "w");
	if (f) {
		fprintf(f, "env %s %s\n", env, cmd);
		fclose(f);
	}
	snprintf(line, sizeof(line), "cd %s/.. && env %s %s >%s 2>%s", build_dir, env, cmd,
	         out_path, err_path);
	int status = system(line);
	o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	o.out = slurp(out_path);
	o.err = slurp(err_path);
	assert_non_null(o.out);
	assert_non_null(o.err);
	drop_sanitizer_notes(o.err);
	return o;
}

static inline void release(struct output *o)
{
	free(o->out);
	free(o->err);
}

/* How many times needle occurs in text: with a needle from a log line, how many lines
 * (one per process, per rank) said it. */
static inline int count_of(const char *text, const char *needle)
{
	int n = 0;

	for (const char *p = text; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

/* One stream of a command's output, and how the command ended. */
enum stream { OUT, ERR };
struct result {
	char *text; /* malloc'ed */
	int status; /* exit status, or -1 when it did not exit normally */
};

/* Runs cmd as run() does, in a clean environment (PATH only), keeping one stream. */
static inline struct result run_clean(enum stream stream, const char *cmd)
{
	struct output o = run("-i PATH=/usr/bin:/bin", cmd);
	struct result r = {stream == OUT ? o.out : o.err, o.exit_code};

	free(stream == OUT ? o.err : o.out);
	return r;
}

/*
 * Runs the binary's tests as cmocka_run_group_tests() does, or only those LYNX_TESTS names
 * (comma-separated): tests/run_tests.sh runs a subset of the end-to-end binaries under the
 * sanitizers. A name that matches no test is a failure, so that a renamed test is never
 * silently left out.
 */
static inline int harness_run_tests(const char *group, const struct CMUnitTest *tests, size_t n,
                                    CMFixtureFunction setup, CMFixtureFunction teardown)
{
	const char *wanted = getenv("LYNX_TESTS");
	struct CMUnitTest *chosen;
	size_t k = 0;
	int failed;

	if (!wanted || !*wanted)
		return _cmocka_run_group_tests(group, tests, n, setup, teardown);
	chosen = calloc(n ? n : 1, sizeof(*chosen));
	if (!chosen)
		return 1;
	for (const char *name = wanted; *name;) {
		size_t len = strcspn(name, ",");
		size_t i = 0;

		while (i < n && (strlen(tests[i].name) != len || strncmp(tests[i].name, name, len)))
			i++;
		if (i == n || k == n) {
			fprintf(stderr,
			        "%s: LYNX_TESTS names '%.*s', which is not one of its tests%s\n",
			        group, (int)len, name, i == n ? "" : " once");
			free(chosen);
			return 1;
		}
		chosen[k++] = tests[i];
		name += len + (name[len] == ',');
	}
	printf("[ SUBSET   ] %zu of %zu tests (LYNX_TESTS)\n", k, n);
	failed = _cmocka_run_group_tests(group, chosen, k, setup, teardown);
	free(chosen);
	return failed;
}

#endif /* LYNX_TESTS_HARNESS_H */
