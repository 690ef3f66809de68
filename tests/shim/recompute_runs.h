/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the recompute-mode end-to-end tests share (test_executor.c: the executor's
 * correctness; test_recompute_targets.c: what its plans save and cost, and what it says):
 * tinytrain's model and layouts, simgpu's settings, running it with or without liblynx.so,
 * reading its step lines and the executor's summary lines, and the pp2 tp2 run without
 * Lynx that most tests compare with. Header-only; include after <cmocka.h> and harness.h.
 */
#ifndef LYNX_TESTS_SHIM_RECOMPUTE_RUNS_H
#define LYNX_TESTS_SHIM_RECOMPUTE_RUNS_H

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Warm-up takes 7 iterations; the first one followed has the examinations and is not
 * timed; the last two end before their time is read. */
#define STEPS 13
#define MAX_LINES (STEPS * 4)
#define PP2_TP2 "--nproc 4 --pp 2 --tp 2 --dp 1"
#define MODEL "--layers 8 --microbatches 4 --virtual-model gpt-1.3b --steps 13"
/* simgpu's settings for every run: small granules, and a short wait for a rank that died.
 * Programs and libraries are the build directory's this binary is in (BUILD=...), never
 * another's. */
#define SIMGPU_ENV "LD_LIBRARY_PATH=%s/simgpu SIMGPU_VMM_GRANULARITY=4K SIMGPU_NCCL_TIMEOUT_MS=5000"

/*
 * For runs whose processes end without tearing down (a rank stopped by a failure, a worker
 * forked from a multithreaded rank): under ASan, LeakSanitizer's exit check there reports
 * the abandoned state as leaks (in a forked child it warns that false leaks are possible)
 * or its tracer crashes. Those runs are about exit status and results, not leaks; the
 * shell expands it when the harness runs the command. No effect without ASan.
 */
#define NO_LEAK_CHECK "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0"

/* SIMGPU_ENV for this build directory. */
static inline const char *simgpu_env(void)
{
	static char env[1200];

	snprintf(env, sizeof(env), SIMGPU_ENV, build_dir);
	return env;
}

/* One line of tinytrain's output: the training results, the peak and the time. */
struct step_line {
	char results[160]; /* step, rank, loss, grad_hash */
	long long peak_bytes, step_time_ns;
};

static inline size_t parse_lines(const char *text, struct step_line *lines, size_t max)
{
	size_t n = 0;

	for (const char *line = text; *line && n < max;) {
		const char *end = strchr(line, '\n');
		const char *peak = strstr(line, ",\"peak_bytes\":");
		const char *time = strstr(line, ",\"step_time_ns\":");
		if (!peak || !time || (end && peak > end))
			break;
		snprintf(lines[n].results, sizeof(lines[n].results), "%.*s", (int)(peak - line),
		         line);
		lines[n].peak_bytes = atoll(peak + strlen(",\"peak_bytes\":"));
		lines[n++].step_time_ns = atoll(time + strlen(",\"step_time_ns\":"));
		line = end ? end + 1 : line + strlen(line);
	}
	return n;
}

/*
 * The number just before `words` on rank's executor summary lines ("lynx[rank 0]:
 * executor: ... 12 evicted"), or -1 when there is none.
 */
static inline long long stat_of(const char *err, int rank, const char *words)
{
	char prefix[64];

	snprintf(prefix, sizeof(prefix), "lynx[rank %d]: executor: ", rank);
	for (const char *line = strstr(err, prefix); line; line = strstr(line + 1, prefix)) {
		const char *end = strchr(line, '\n');
		const char *at = strstr(line, words);
		if (!at || (end && at > end))
			continue;
		const char *digits = at;
		while (digits > line && digits[-1] == ' ')
			digits--;
		while (digits > line && isdigit((unsigned char)digits[-1]))
			digits--;
		return atoll(digits);
	}
	return -1;
}

static inline struct output run_trainer(const char *layout, const char *lynx_env, const char *dir)
{
	char env[8192], cmd[1600];

	if (lynx_env)
		snprintf(env, sizeof(env),
		         "%s LD_PRELOAD=%s/liblynx.so LYNX_MODE=recompute LYNX_OUT=%s/%s %s",
		         simgpu_env(), build_dir, scratch, dir, lynx_env);
	else
		snprintf(env, sizeof(env), "%s", simgpu_env());
	snprintf(cmd, sizeof(cmd), "%s/bin/tinytrain %s " MODEL, build_dir, layout);
	return run(env, cmd);
}

/* Both runs exit 0 with the same training results at every step and rank; returns the
 * lines. */
static inline size_t assert_same_results(const struct output *plain, const struct output *lynx,
                                         struct step_line *a, struct step_line *b)
{
	size_t n = parse_lines(plain->out, a, MAX_LINES);

	assert_int_equal(plain->exit_code, 0);
	assert_int_equal(lynx->exit_code, 0);
	assert_int_equal(parse_lines(lynx->out, b, MAX_LINES), n);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(a[i].results, b[i].results);
	return n;
}

/* As assert_same_results, for run_trainer's runs: all of MODEL's steps on 4 ranks. */
static inline size_t assert_identical(const struct output *plain, const struct output *lynx,
                                      struct step_line *a, struct step_line *b)
{
	size_t n = assert_same_results(plain, lynx, a, b);

	assert_int_equal(n, MAX_LINES);
	return n;
}

/* The pp2 tp2 run without Lynx, that most tests compare with: made at the first call (a
 * subset of the tests, LYNX_TESTS, may not need it). */
static struct output plain_run;
static bool plain_run_made;

static inline struct output plain_pp2_tp2(void)
{
	if (!plain_run_made) {
		plain_run = run_trainer(PP2_TP2, NULL, NULL);
		plain_run_made = true;
	}
	return plain_run;
}

static inline int plain_teardown(void **state)
{
	(void)state;
	if (plain_run_made)
		release(&plain_run);
	plain_run_made = false;
	return 0;
}

#endif
