/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Recompute mode end to end, for what its plans save and cost and what it says: tinytrain
 * under liblynx.so with LYNX_MODE=recompute, as in test_executor.c (which checks the
 * executor's correctness), and:
 *  - with activations the larger share of memory (--seq 64 --batch 4), LYNX_BUDGET=6M and
 *    the mixed planner offload on the second stage and replay part of the first stage,
 *    and take the first stage's peak at least 40% below tinytrain's --recompute none,
 *    its peak within 5% of the plan's prediction and its step time from 10% under to
 *    5% over it, every rank's peak within the budget, in at most 1.05 times its step
 *    time and 0.85 times that of its --recompute full; every rank within the budget
 *    from the first planned step on, where the first stage refuses the examinations that
 *    would exceed it (NO_ROOM); part of the first stage replayed in the backward's
 *    all-reduces, each checked there once;
 *  - without a budget, a plan within LYNX_MAX_SLOWDOWN (2%): said, evicting on the first
 *    stage, the same results, and a slowdown achieved above it warned;
 *  - where HEU's plan does not fit (the first stage at --recompute full's peak), HEU with
 *    offloads (mixed) is taken, and holds the budget;
 *  - a budget no plan can reach: a warning on every rank, no plan, the same results;
 *  - every other reason to do nothing: one WARN line per rank;
 *  - without a shared directory, each rank plans its own stage, and a stage's peers follow
 *    one plan though each times its kernels with its own noise.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../harness.h"
#include "recompute_runs.h"

/* tinytrain's own baseline (no Lynx) with --recompute mode and longer sequences; steps
 * after the first take the same time and memory, so a short run tells them. */
static struct output run_baseline(const char *mode, const char *steps)
{
	char cmd[1600];

	snprintf(cmd, sizeof(cmd),
	         "%s/bin/tinytrain " PP2_TP2 " " MODEL " --seq 64 --batch 4 "
	         "--recompute %s %s",
	         build_dir, mode, steps);
	return run(simgpu_env(), cmd);
}

static void test_long_sequences_meet_the_memory_and_time_targets(void **state)
{
	struct step_line none[MAX_LINES], full[MAX_LINES], b[MAX_LINES];
	struct output o_none = run_baseline("none", ""), o_full = run_baseline("full", "--steps 2");
	char env[4096], cmd[1600];

	snprintf(env, sizeof(env),
	         "%s LD_PRELOAD=%s/liblynx.so LYNX_MODE=recompute LYNX_OUT=%s/long "
	         "LYNX_BUDGET=6M",
	         simgpu_env(), build_dir, scratch);
	snprintf(cmd, sizeof(cmd), "%s/bin/tinytrain " PP2_TP2 " " MODEL " --seq 64 --batch 4",
	         build_dir);
	struct output o = run(env, cmd);
	size_t n = assert_identical(&o_none, &o, none, b);

	assert_int_equal(parse_lines(o_full.out, full, MAX_LINES), 8); /* steps 0 and 1 */
	/* The plan's prediction for the first stage, from rank 0's plan line: HEU with
	 * offloads, which the checker predicts faster than HEU on simgpu's idle host link. */
	const char *line = strstr(o.err, "lynx[rank 0]: recompute plan (mixed, budget 6.00 MiB");
	assert_non_null(line);
	const char *at = strstr(line, "predicted peak ");
	assert_non_null(at);
	double predicted = atof(at + strlen("predicted peak ")) * 1024 * 1024;
	/* And its step time, against keeping everything. */
	at = strstr(line, ", iteration ");
	assert_non_null(at);
	double slowdown = 1.0 + atof(at + strlen(", iteration ")) / 100.0;
	/* The plan offloads, on both stages, the groups whose producers read a temporary
	 * (the profile says which: the executor could not replay them), so no examination
	 * finds one; it rebuilds or offloads the rest. */
	for (int rank = 0; rank < 4; rank++)
		assert_true(stat_of(o.err, rank, "offloaded (") > 0);
	assert_null(strstr(o.err, "FREED_OPERAND"));
	/* The first stage rebuilds part of its activations in the tensor-parallel all-reduces
	 * of the backward: checked there once, then replayed there on the replay stream. */
	for (int rank = 0; rank < 2; rank++) {
		char path[1300];
		assert_true(stat_of(o.err, rank, "restored by replay") > 0);
		assert_true(stat_of(o.err, rank, "activations planned for a window") > 0);
		assert_true(stat_of(o.err, rank, "checked there") > 0);
		assert_int_equal(stat_of(o.err, rank, "refused (replayed on demand)"), 0);
		assert_true(stat_of(o.err, rank, "replays in windows") > 0);
		assert_int_equal(stat_of(o.err, rank, "left to the guard"), 0);
		snprintf(path, sizeof(path), "%s/long/executor.%d.json", scratch, rank);
		char *text = slurp(path);
		assert_non_null(text);
		assert_non_null(strstr(text, "{\"name\": \"check window\""));
		assert_non_null(strstr(text, "{\"name\": \"replay in window\""));
		free(text);
	}
	/* The plan offloads what cannot be replayed, and counts an offloaded activation back
	 * from the start of the layer above's backward, where the executor restores it as the
	 * host runs ahead. In the first step after the examinations the host ran further
	 * ahead: rank 0 went 16 KiB over. The executor said so and offloaded more from the next
	 * step on. So: within 1% of the budget from the first planned step (the first below
	 * none's peak), within it in the last (below), and any excess announced. */
	bool over = false;
	for (size_t i = 0; i < n; i++) {
		bool planned = b[i].peak_bytes < none[i].peak_bytes;
		if (planned && (double)b[i].peak_bytes > 1.01 * (double)(6ll << 20))
			fail_msg("rank %zu peaks %lld bytes at step %zu, 1%% over the budget",
			         i % 4, b[i].peak_bytes, i / 4);
		over = over || (planned && b[i].peak_bytes > 6ll << 20);
	}
	if (over)
		assert_non_null(strstr(o.err, "over the budget (at call "));
	for (size_t i = n - 4; i < n; i++) {
		/* Every rank within the budget: the plan is made for it less what warm-up had
		 * in use beyond its tensors, counting a replay's workspace scratch beside each
		 * rebuild, and the executor keeps room for that scratch. */
		assert_true(b[i].peak_bytes <= 6ll << 20);
		if (i % 4 < 2) { /* the first stage, which holds the most */
			assert_true((double)b[i].peak_bytes <= 0.60 * (double)none[i].peak_bytes);
			/* Within 5% of the plan's prediction in memory in use. In time at most
			 * 5% over it, and at most 10% under: the plan is pessimistic about
			 * rebuilds on demand (predicted +9.2%, +3.6% taken: docs/measurements.md,
			 * "Recompute mode without a budget"). */
			assert_true((double)b[i].peak_bytes <= 1.05 * predicted);
			assert_true((double)b[i].peak_bytes >= 0.95 * predicted);
			double step = slowdown * (double)none[i].step_time_ns;
			assert_true((double)b[i].step_time_ns <= 1.05 * step);
			assert_true((double)b[i].step_time_ns >= 0.90 * step);
		}
		assert_true((double)b[i].step_time_ns <= 1.05 * (double)none[i].step_time_ns);
		assert_true((double)b[i].step_time_ns <=
		            0.85 * (double)full[4 + i % 4].step_time_ns);
	}
	release(&o_none);
	release(&o_full);
	release(&o);
}

/* The achieved slowdown rank's executor summary reports ("achieved 260.376 ms (+1.1%"), in
 * percent; NAN when there is none (a rank that evicts nothing arms no executor). */
static double achieved_percent(const char *err, int rank)
{
	char prefix[64];

	snprintf(prefix, sizeof(prefix), "lynx[rank %d]: executor: time: ", rank);
	const char *line = strstr(err, prefix);
	const char *at = line ? strstr(line, " ms (") : NULL;
	return at ? atof(at + strlen(" ms (")) : NAN;
}

/*
 * Recompute mode without a budget plans at the smallest budget predicted within
 * LYNX_MAX_SLOWDOWN (2% by default): it says so, evicts on the first stage, which then holds
 * less, and training is identical. An achieved slowdown above it is warned, and only then.
 */
static void test_without_a_budget_plans_within_the_max_slowdown(void **state)
{
	struct step_line a[MAX_LINES], b[MAX_LINES];
	struct output plain = plain_pp2_tp2();
	struct output o = run_trainer(PP2_TP2, "", "slowdown");
	size_t n = assert_identical(&plain, &o, a, b);

	assert_int_equal(count_of(o.err, "no LYNX_BUDGET: the smallest predicted within "
	                                 "LYNX_MAX_SLOWDOWN=2% (the default)"),
	                 4);
	for (int rank = 0; rank < 2; rank++) {
		assert_true(stat_of(o.err, rank, "evicted (") > 0);
		assert_false(isnan(achieved_percent(o.err, rank)));
	}
	for (size_t i = n - 4; i < n; i++)
		if (i % 4 < 2)
			assert_true(b[i].peak_bytes < a[i].peak_bytes);
	int over = 0;
	for (int rank = 0; rank < 4; rank++)
		over += achieved_percent(o.err, rank) > 2.0; /* false for NAN */
	assert_int_equal(count_of(o.err, "over LYNX_MAX_SLOWDOWN=2%"), over);
	release(&o);
}

/*
 * At tinytrain's --recompute full peak as the budget, HEU's plan fits neither stage (it only
 * keeps or rebuilds what it can replay, and on the last stage, one micro-batch in flight,
 * its own plan would not even reach full recomputation's memory without its floor); HEU
 * with offloads (mixed) fits both, and is taken: every rank holds the budget from its first
 * planned step, bit-identically.
 */
static void test_where_heu_does_not_fit_its_plan_with_offloads_is_taken(void **state)
{
	struct step_line none[MAX_LINES], b[MAX_LINES];
	struct output o_none = run_baseline("none", "");
	char env[4096], cmd[1600];
	const long long budget = 4374528; /* --recompute full's peak on the first stage */

	(void)state;
	snprintf(env, sizeof(env),
	         "%s LD_PRELOAD=%s/liblynx.so LYNX_MODE=recompute LYNX_OUT=%s/atfull "
	         "LYNX_BUDGET=%lld",
	         simgpu_env(), build_dir, scratch, budget);
	snprintf(cmd, sizeof(cmd), "%s/bin/tinytrain " PP2_TP2 " " MODEL " --seq 64 --batch 4",
	         build_dir);
	struct output o = run(env, cmd);
	size_t n = assert_identical(&o_none, &o, none, b);

	for (int rank = 0; rank < 4; rank++) {
		char line[64];
		snprintf(line, sizeof(line), "lynx[rank %d]: recompute plan (mixed, ", rank);
		assert_non_null(strstr(o.err, line));
		assert_true(stat_of(o.err, rank, "evicted (") > 0);
	}
	assert_null(strstr(o.err, "no plan fits"));
	bool planned[4] = {false, false, false, false};
	for (size_t i = 0; i < n; i++) {
		planned[i % 4] |= b[i].peak_bytes < none[i].peak_bytes;
		if (planned[i % 4] && b[i].peak_bytes > budget)
			fail_msg("rank %zu peaks %lld bytes at step %zu, over the %lld budget",
			         i % 4, b[i].peak_bytes, i / 4, budget);
	}
	assert_true(planned[0] && planned[1] && planned[2] && planned[3]);
	release(&o_none);
	release(&o);
}

static void test_a_budget_out_of_reach_warns_and_changes_nothing(void **state)
{
	struct step_line a[MAX_LINES], b[MAX_LINES];
	struct output plain = plain_pp2_tp2();
	struct output o = run_trainer(PP2_TP2, "LYNX_BUDGET=1M", "unreachable");

	assert_identical(&plain, &o, a, b);
	assert_int_equal(count_of(o.err, "recompute mode: no plan: the memory budget"), 4);
	assert_null(strstr(o.err, "executor: "));
	release(&o);
}

/* Lines at WARN level that contain what. */
static int warn_lines(const char *err, const char *what)
{
	int n = 0;

	for (const char *line = err; line && *line; line = strchr(line, '\n'), line += !!line) {
		const char *end = strchr(line, '\n');
		const char *warn = strstr(line, " WARN "), *at = strstr(line, what);
		n += warn && at && (!end || (warn < end && at < end));
	}
	return n;
}

/* The lines of text that contain any of needles (NULL-terminated), in a static buffer: what a
 * failure message shows of a long stderr, which cmocka would cut short. */
static const char *lines_with(const char *text, const char *const *needles)
{
	static char buf[4000];
	size_t used = 0;

	buf[0] = '\0';
	for (const char *line = text; line && *line; line = strchr(line, '\n'), line += !!line) {
		size_t len = strcspn(line, "\n");
		bool hit = false;

		for (const char *const *n = needles; *n && !hit; n++) {
			const char *at = strstr(line, *n);

			hit = at && at < line + len;
		}
		if (hit && used + len + 2 < sizeof(buf))
			used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%.*s\n", (int)len,
			                         line);
	}
	return buf;
}

/*
 * Never silent: each reason Lynx does nothing (no profile, no plan, no eviction, a budget
 * not held) is one WARN line per rank at the default log level, and training goes on with
 * the same results.
 */
static void test_every_reason_to_do_nothing_is_one_warn_line_per_rank(void **state)
{
	static const struct {
		const char *name, *steps, *lynx_env, *reason;
		bool plan_is_a_fifo; /* LYNX_PLAN names a named pipe no one writes: never waited on
		                      */
	} cases[] = {
	        {"one-step", "1", "", "no profile: no repeating sequence", false},
	        /* Shorter than warm-up: a profile at exit, with host times, and no plan. */
	        {"short", "4", "", "the job ended before warm-up did", false},
	        {"static", "10", "LYNX_BUDGET=1M", "recompute mode: no plan: the memory budget",
	         false},
	        {"no-plan-file", "10", "LYNX_PLAN=/nonexistent/plan.json",
	         "LYNX_PLAN='/nonexistent/plan.json' cannot be read (cannot open it: No such file",
	         false},
	        {"plan-fifo", "10", "", "cannot be read (it is a named pipe, not a regular file",
	         true},
	        /* A plan predicted over the budget is not armed: this rank trains unchanged. */
	        {"over-budget", "10", "LYNX_PLANNER=none LYNX_BUDGET=95%",
	         "no plan fits this rank's budget", false},
	        /* A budget below one ring: no thread is recorded (a small LYNX_RING_BYTES drops
	         * events too, but how many depends on the drainer's timing). */
	        {"recorder-budget", "10", "LYNX_RECORDER_BUDGET=64K", "the recorder dropped",
	         false},
	};
	static const char *const lengths[] = {"1", "4", "10"}; /* the cases' steps */
	struct output bare[3];
	char env[4096], cmd[1600], fifo[1200] = "", path[1300];

	/* A small job: what is checked is what Lynx says, not what it saves. */
	for (int k = 0; k < 3; k++) {
		snprintf(cmd, sizeof(cmd),
		         "%s/bin/tinytrain --nproc 2 --pp 2 --layers 4 --microbatches 2 --steps %s",
		         build_dir, lengths[k]);
		bare[k] = run(simgpu_env(), cmd);
		assert_int_equal(bare[k].exit_code, 0);
	}
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int length = 0;
		while (length < 2 && strcmp(lengths[length], cases[i].steps))
			length++;
		const struct output *plain = &bare[length];
		struct step_line a[MAX_LINES], b[MAX_LINES];

		if (cases[i].plan_is_a_fifo) {
			snprintf(fifo, sizeof(fifo), "LYNX_PLAN=%s/plan.fifo", scratch);
			assert_int_equal(mkfifo(fifo + strlen("LYNX_PLAN="), 0600), 0);
		}
		snprintf(env, sizeof(env),
		         "%s LD_PRELOAD=%s/liblynx.so LYNX_MODE=recompute LYNX_OUT=%s/%s %s %s",
		         simgpu_env(), build_dir, scratch, cases[i].name, cases[i].lynx_env,
		         cases[i].plan_is_a_fifo ? fifo : "");
		/* A rank that waits on the pipe would hang the suite: fail it instead. */
		snprintf(cmd, sizeof(cmd),
		         "timeout -k 5 120 %s/bin/tinytrain --nproc 2 --pp 2 --layers 4 "
		         "--microbatches 2 --steps %s",
		         build_dir, cases[i].steps);
		struct output o = run(env, cmd);
		size_t n = parse_lines(plain->out, a, MAX_LINES);
		assert_int_equal(o.exit_code, 0);
		assert_true(n > 0);
		assert_int_equal(parse_lines(o.out, b, MAX_LINES), n);
		for (size_t k = 0; k < n; k++) /* loss and gradients; times may differ */
			assert_string_equal(a[k].results, b[k].results);
		if (warn_lines(o.err, cases[i].reason) != 2) {
			printf("# %s: the run's stderr:\n%s", cases[i].name, o.err);
			fail_msg(
			        "%s: want one WARN line per rank with '%s', got %d; its WARN lines "
			        "(the whole stderr is above):\n%s",
			        cases[i].name, cases[i].reason, warn_lines(o.err, cases[i].reason),
			        lines_with(o.err, (const char *[]){" WARN ", NULL}));
		}
		/* No plan from a profile made at exit. */
		snprintf(path, sizeof(path), "%s/%s/plan.json", scratch, cases[i].name);
		if (!strcmp(cases[i].name, "short"))
			assert_int_equal(access(path, F_OK), -1);
		release(&o);
	}
	/* Profiling only, the same short job: rank 0 makes no what-if from host times, and
	 * says why in its summary. */
	snprintf(env, sizeof(env), "%s LD_PRELOAD=%s/liblynx.so LYNX_MODE=profile LYNX_OUT=%s/%s",
	         simgpu_env(), build_dir, scratch, "short-profile");
	snprintf(cmd, sizeof(cmd),
	         "%s/bin/tinytrain --nproc 2 --pp 2 --layers 4 --microbatches 2 --steps 4",
	         build_dir);
	struct output o = run(env, cmd);
	assert_int_equal(o.exit_code, 0);
	assert_int_equal(count_of(o.err, "lynx[rank 0]: what-if: none: the job ended before "
	                                 "warm-up did"),
	                 1);
	assert_null(strstr(o.err, "what-if (Lynx HEU"));
	release(&o);
	for (int k = 0; k < 3; k++)
		release(&bare[k]);
}

/*
 * A trainer whose layers Lynx cannot find (a stage of one layer has no repeat): one WARN line
 * per rank that names the iteration (the longest sequence passed over, not the last, which
 * can be a set-up loop of 3 tokens) and why it has no layers; the same results.
 */
static void test_layers_not_found_says_why_for_the_iteration(void **state)
{
	const char *args = "--nproc 2 --pp 2 --layers 2 --microbatches 2 --steps 10";
	char env[4096], cmd[1600];
	struct step_line a[MAX_LINES], b[MAX_LINES];

	(void)state;
	snprintf(cmd, sizeof(cmd), "%s/bin/tinytrain %s", build_dir, args);
	struct output plain = run(simgpu_env(), cmd);
	snprintf(env, sizeof(env), "%s LD_PRELOAD=%s/liblynx.so LYNX_MODE=recompute LYNX_OUT=%s/%s",
	         simgpu_env(), build_dir, scratch, "one-layer");
	struct output o = run(env, cmd);
	assert_int_equal(plain.exit_code, 0);
	assert_int_equal(o.exit_code, 0);
	size_t n = parse_lines(plain.out, a, MAX_LINES);
	assert_int_equal(parse_lines(o.out, b, MAX_LINES), n);
	for (size_t k = 0; k < n; k++)
		assert_string_equal(a[k].results, b[k].results);
	if (warn_lines(o.err, "no profile: ") != 2 || warn_lines(o.err, "the longest, ") != 2 ||
	    warn_lines(o.err, "the last iteration has no layers: the second layer motif") != 2)
		fail_msg("want one WARN line per rank naming the iteration and why; stderr:\n%s",
		         o.err);
	release(&plain);
	release(&o);
}

/*
 * No shared file system: LYNX_OUT=.../proc-%p gives every process its own directory, so no
 * rank sees another's profile (a worker forked at the end gets one too). Each plans its own stage
 * from its own profile at once, at LYNX_BUDGET=60% of its own peak: results identical; a rank
 * whose plan fits evicts and holds at least 25% less than the plain run, one whose best plan
 * misses the budget says so and trains unchanged (the last stage: alone, without the pipeline's
 * windows, its head keeps it above 60%). The first stage's plan fits.
 */
static void test_each_rank_plans_alone_without_a_shared_directory(void **state)
{
	char env[4096], cmd[1600];
	struct step_line a[MAX_LINES], b[MAX_LINES];

	/* Each rank forks a worker after the last step, with the plan armed: the worker's exit
	 * must not trip over the parent's executor (it crashed once). */
	snprintf(cmd, sizeof(cmd),
	         "%s/bin/tinytrain --nproc 2 --pp 2 --layers 4 --microbatches 4 --seq 64 --batch 4 "
	         "--steps 13 --fork-worker-after 13",
	         build_dir);
	snprintf(env, sizeof(env), "%s " NO_LEAK_CHECK, simgpu_env());
	struct output plain = run(env, cmd);
	snprintf(env, sizeof(env),
	         "%s LD_PRELOAD=%s/liblynx.so LYNX_MODE=recompute LYNX_OUT='%s/solo/proc-%%p' "
	         "LYNX_BUDGET=60%% " NO_LEAK_CHECK,
	         simgpu_env(), build_dir, scratch);
	struct output o = run(env, cmd);
	size_t n = assert_same_results(&plain, &o, a, b);

	assert_int_equal(n, 2 * STEPS);
	int unarmed = 0;
	for (int rank = 0; rank < 2; rank++) {
		const struct step_line *alone = &b[n - 2 + rank], *bare = &a[n - 2 + rank];
		if (stat_of(o.err, rank, "evicted (") <= 0) {
			unarmed++;
			assert_int_equal(alone->peak_bytes, bare->peak_bytes);
		} else if ((double)alone->peak_bytes > 0.75 * (double)bare->peak_bytes) {
			fail_msg("%s: peak %lld, plain %lld", alone->results, alone->peak_bytes,
			         bare->peak_bytes);
		}
	}
	assert_true(stat_of(o.err, 0, "evicted (") > 0);
	assert_int_equal(count_of(o.err, "stage 0 of 1"), 2); /* each rank, alone */
	/* No warning about planning alone: only the budget's, once per rank left unchanged. */
	assert_int_equal(count_of(o.err, "no plan fits this rank's budget"), unarmed);
	if (count_of(o.err, " WARN ") != unarmed)
		fail_msg("a warning besides the budget's:\n%s", o.err);
	release(&plain);
	release(&o);
}

/*
 * Peers that plan alone decide alike though a GPU times each rank's kernels differently:
 * the demo's layout (TP 2, PP 2) with every kernel's time within 3% of its own
 * (SIMGPU_JITTER_PCT), each process with its own LYNX_OUT. Every stage's two ranks follow
 * one plan (lynx report compares their plan hashes), and results stay identical. Before
 * solo planning rounded its times and took windows at their least idle, both stages' peers
 * planned differently here.
 */
static void test_peers_that_plan_alone_follow_one_plan_despite_timing_noise(void **state)
{
	char env[4096], cmd[3000];
	struct step_line a[MAX_LINES], b[MAX_LINES];

	snprintf(cmd, sizeof(cmd),
	         "%s/bin/tinytrain " PP2_TP2 " --layers 4 --microbatches 4 --seq 64 --batch 4 "
	         "--steps 10",
	         build_dir);
	snprintf(env, sizeof(env), "%s SIMGPU_JITTER_PCT=3 " NO_LEAK_CHECK, simgpu_env());
	struct output plain = run(env, cmd);
	snprintf(env, sizeof(env),
	         "%s SIMGPU_JITTER_PCT=3 LD_PRELOAD=%s/liblynx.so LYNX_MODE=recompute "
	         "LYNX_OUT='%s/noisy/proc-%%p' LYNX_BUDGET=85%% " NO_LEAK_CHECK,
	         simgpu_env(), build_dir, scratch);
	struct output o = run(env, cmd);

	assert_same_results(&plain, &o, a, b);
	for (int rank = 0; rank < 4; rank++)
		assert_true(stat_of(o.err, rank, "evicted (") > 0);
	/* As a user would: the launcher's own directory, without a profile, is left out. */
	snprintf(cmd, sizeof(cmd), "%s/bin/lynx report %s/noisy/proc-*", build_dir, scratch);
	struct output rep = run("", cmd);
	assert_int_equal(rep.exit_code, 0);
	if (!strstr(rep.out, "  stage 0: its 2 ranks follow one plan (") ||
	    !strstr(rep.out, "  stage 1: its 2 ranks follow one plan ("))
		fail_msg("peers planned differently:\n%s", rep.out);
	release(&plain);
	release(&o);
	release(&rep);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_long_sequences_meet_the_memory_and_time_targets),
	        cmocka_unit_test(test_without_a_budget_plans_within_the_max_slowdown),
	        cmocka_unit_test(test_where_heu_does_not_fit_its_plan_with_offloads_is_taken),
	        cmocka_unit_test(test_a_budget_out_of_reach_warns_and_changes_nothing),
	        cmocka_unit_test(test_every_reason_to_do_nothing_is_one_warn_line_per_rank),
	        cmocka_unit_test(test_layers_not_found_says_why_for_the_iteration),
	        cmocka_unit_test(test_each_rank_plans_alone_without_a_shared_directory),
	        cmocka_unit_test(test_peers_that_plan_alone_follow_one_plan_despite_timing_noise),
	};
	int failed;

	(void)argc;
	if (harness_init(argv[0], "test-recompute-targets"))
		return 1;
	failed = harness_run_tests("test_recompute_targets", tests,
	                           sizeof(tests) / sizeof(tests[0]), NULL, plain_teardown);
	return harness_finish(failed);
}
