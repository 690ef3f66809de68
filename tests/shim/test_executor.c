/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Recompute mode's executor (shim/executor.c) end to end, for its correctness: tinytrain
 * (every hazard on) under liblynx.so with LYNX_MODE=recompute, simgpu's VMM granularity at
 * 4 KiB so that tinytrain's small activations can be evicted. The executor follows the
 * iterations, evicts what the plan says and brings it back, and:
 *  - loss and gradient hash are those of the run without Lynx at every step and rank
 *    (pp2 tp2, pp4 and dp4), while activations are evicted and restored: by copy, and by
 *    replaying their producers once an examination showed that these reproduce them (the
 *    ones that read a freed temporary, or that are followed by an all-reduce, do not);
 *  - so do an offload-only plan (the offload planner on pp4, with the host link warm-up
 *    measured) and a recompute-only one (Megatron's full recompute on pp2 tp2), the
 *    latter with every replay's first launch failing (LYNX_FAULT=fail-replay): each is
 *    tried again, and the summary counts it;
 *  - the steady state's peak memory on the first stage is below the run without Lynx, and
 *    the step time within 5% of it; every rank's last steps hold the budget, where the plan
 *    predicted the first stage a little low (kept activations offloaded to hold it);
 *  - dropping the stream waits the executor relies on (LYNX_FAULT=skip-stream-waits)
 *    breaks training: the identity check above can fail; when they fail
 *    (LYNX_FAULT=fail-stream-waits) the host waits in their place, and nothing changes;
 *  - restores that cannot start ahead (LYNX_FAULT=fail-prefetch) or whose cuMemCreate
 *    fails (SIMGPU_FAULTS) are made on demand or after waiting for frees: same results,
 *    and the summary says so;
 *  - activations below a granule are evicted in packs that share granules, and without
 *    packs no plan fits the same budget;
 *  - bytes that cannot be rebuilt stop the trainer with an error;
 *  - a searching planner runs off the trainer's thread.
 * What its plans save and cost, and what it says when it does nothing, are
 * test_recompute_targets.c's.
 */
#include <glob.h>
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

static void test_recompute_mode_is_bit_identical_and_saves_memory(void **state)
{
	struct step_line a[MAX_LINES], b[MAX_LINES];
	struct output plain = plain_pp2_tp2();
	struct output o = run_trainer(PP2_TP2, "LYNX_BUDGET=2150K", "pp2tp2");
	size_t n = assert_identical(&plain, &o, a, b);

	for (int rank = 0; rank < 4; rank++) {
		/* It did its work: iterations followed, activations evicted and restored. */
		assert_true(stat_of(o.err, rank, "iterations followed") >= 2);
		assert_int_equal(stat_of(o.err, rank, "times lost"), 0);
		assert_true(stat_of(o.err, rank, "evicted (") > 0);
		assert_true(stat_of(o.err, rank, "ahead of use") > 0);
		assert_int_equal(stat_of(o.err, rank, "driver failures"), 0);
		/* Planned beside achieved, timed over the followed iterations that had no
		 * examination and no window check, on the first stage at least (on the second,
		 * those can take every followed iteration that ends before the job does). */
		char untimed[64];
		snprintf(untimed, sizeof(untimed), "lynx[rank %d]: executor: time: no followed",
		         rank);
		assert_true(stat_of(o.err, rank, "followed iterations, device time") >= 1 ||
		            (rank >= 2 && strstr(o.err, untimed)));
		/* Planned for recompute on the first stage, where the budget binds: producers
		 * examined, most replayed, some refused. */
		if (rank >= 2)
			continue;
		assert_true(stat_of(o.err, rank, "examined and replayed") > 0);
		assert_true(stat_of(o.err, rank, "refused (offloaded instead)") > 0);
		/* What the executor did instead is predicted again, beside what is achieved. */
		assert_true(stat_of(o.err, rank, "activations not as planned") >=
		            stat_of(o.err, rank, "refused (offloaded instead)"));
		assert_true(stat_of(o.err, rank, "evicted without a copy") > 0);
		assert_true(stat_of(o.err, rank, "restored by replay") > 0);
		assert_int_equal(stat_of(o.err, rank, "launches failed"), 0);
	}
	assert_non_null(strstr(o.err, "lynx[rank 0]: executor: memory: warm-up peak "));
	/* Every rank holds the budget from its first planned step (the first below its plain
	 * peak) on: the plan counts the activations below a granule, which the executor keeps,
	 * as kept, so it predicts the peak the executor reaches. */
	bool planned[4] = {false};
	for (size_t i = 0; i < n; i++) {
		planned[i % 4] |= b[i].peak_bytes < a[i].peak_bytes;
		if (planned[i % 4] && b[i].peak_bytes > 2150 * 1024)
			fail_msg("rank %zu peaks %lld bytes in step %zu of %zu, over the 2150K "
			         "budget",
			         i % 4, b[i].peak_bytes, i / 4, n / 4);
	}
	for (int rank = 0; rank < 4; rank++)
		assert_true(planned[rank]);
	assert_null(strstr(o.err, "the budget is not held"));
	assert_null(strstr(o.err, "over the budget"));
	/* Each rank's executor trace: its actions as slices, host time. */
	for (int rank = 0; rank < 4; rank++) {
		char path[1300];
		snprintf(path, sizeof(path), "%s/pp2tp2/executor.%d.json", scratch, rank);
		char *text = slurp(path);
		assert_non_null(text);
		assert_non_null(strstr(text, "\"traceEvents\": ["));
		assert_non_null(strstr(text, "{\"name\": \"offload\""));
		assert_non_null(strstr(text, "{\"name\": \"evict\""));
		assert_non_null(strstr(text, "{\"name\": \"restore ahead\""));
		if (rank < 2) { /* recompute planned */
			assert_non_null(strstr(text, "{\"name\": \"examine\""));
			assert_non_null(strstr(text, "{\"name\": \"discard\""));
			assert_non_null(strstr(text, "{\"name\": \"replay\""));
		}
		assert_non_null(strstr(text, "\"actions_left_out\": 0}"));
		free(text);
	}
	/* Rank 0's summary carries the plan as followed: a number, as its refusals changed it. */
	char summary_path[1300];
	snprintf(summary_path, sizeof(summary_path), "%s/pp2tp2/summary.0.json", scratch);
	char *summary = slurp(summary_path);
	assert_non_null(summary);
	assert_non_null(strstr(summary, "\"followed_slowdown\":\t1."));
	assert_non_null(strstr(summary, "\"followed_peak_bytes\":\t"));
	assert_null(strstr(summary, "\"followed_slowdown\":\tnull"));
	free(summary);
	/* Each rank's summary file, as lynx report reads it: one row per rank. */
	char cmd[2600];
	snprintf(cmd, sizeof(cmd), "%s/bin/lynx report %s/pp2tp2", build_dir, scratch);
	struct output rep = run("", cmd);
	assert_int_equal(rep.exit_code, 0);
	assert_non_null(strstr(rep.out, "recompute mode (summary.<rank>.json)"));
	for (int rank = 0; rank < 4; rank++) {
		char row[32];
		/* HEU with offloads, which the checker predicts faster here. */
		snprintf(row, sizeof(row), "\n  %d     mixed      2.10 MiB ", rank);
		assert_non_null(strstr(rep.out, row));
	}
	assert_null(strstr(rep.err, "left out"));
	/* Its plot: each rank's memory over its last followed iteration beside warm-up's. */
	char svg_path[1300];
	snprintf(svg_path, sizeof(svg_path), "%s/pp2tp2/report.svg", scratch);
	char *svg = slurp(svg_path);
	assert_non_null(svg);
	assert_int_equal(count_of(svg, "after (recompute, mixed): in use (cuMemGetInfo), peak "),
	                 4);
	free(svg);
	/* Planned together, the ranks of each stage follow one plan; a rank whose plan differs
	 * is named with its plan's hash. */
	assert_non_null(strstr(rep.out, "  stage 0: its 2 ranks follow one plan ("));
	assert_non_null(strstr(rep.out, "  stage 1: its 2 ranks follow one plan ("));
	release(&rep);
	char edit[2800];
	snprintf(edit, sizeof(edit),
	         "sed -i 's/\"hash\":[[:space:]]*\"[0-9a-f]*\"/\"hash\": \"00000000000000ff\"/' "
	         "%s/pp2tp2/summary.1.json",
	         scratch);
	assert_int_equal(system(edit), 0);
	rep = run("", cmd);
	assert_int_equal(rep.exit_code, 0);
	assert_non_null(strstr(rep.out, "  stage 0: its ranks follow different plans: rank 0 "));
	assert_non_null(strstr(rep.out, " rank 1 00000000000000ff (peers that evict different"));
	release(&rep);
	/* Each summary names its run, as do the warm-up timeline and the executor's trace: one
	 * left by another launch in a reused directory is not taken for this run's. */
	char trace_path[1300];
	snprintf(trace_path, sizeof(trace_path), "%s/pp2tp2/trace.0.json", scratch);
	char *trace = slurp(trace_path);
	assert_non_null(trace);
	assert_non_null(strstr(trace, ",\"run\":\""));
	free(trace);
	snprintf(edit, sizeof(edit),
	         "test $(grep -l '\"run\":\"[^\"]*\",\"world\":4,' %s/pp2tp2/calls.*.json | "
	         "wc -l) -eq 4",
	         scratch);
	assert_int_equal(system(edit), 0); /* each rank's call counts name the run */
	snprintf(edit, sizeof(edit),
	         "sed -i 's/\"id\":[[:space:]]*\"[^\"]*\"/\"id\": \"another-launch\"/' "
	         "%s/pp2tp2/summary.1.json",
	         scratch);
	assert_int_equal(system(edit), 0);
	rep = run("", cmd);
	assert_int_equal(rep.exit_code, 0);
	assert_non_null(strstr(rep.err, "summary.1.json: of run another-launch, not of the run "
	                                "read ("));
	assert_null(strstr(rep.out, "\n  1     heu"));
	release(&rep);
	/* The last step, steady state: the first stage (ranks 0 and 1) holds less, and every
	 * rank's step takes at most 5% longer. */
	for (size_t i = n - 4; i < n; i++) {
		if (i % 4 < 2)
			assert_true(b[i].peak_bytes < a[i].peak_bytes);
		assert_true((double)b[i].step_time_ns <= 1.05 * (double)a[i].step_time_ns);
	}
	release(&o);
}

static void test_other_layouts_stay_bit_identical(void **state)
{
	/* Budgets below each layout's measured peak, so that something is evicted. */
	const struct {
		const char *layout, *budget;
	} runs[] = {
	        {"--nproc 4 --pp 4 --tp 1 --dp 1", "LYNX_BUDGET=2800K LYNX_PLANNER=offload"},
	        {"--nproc 4 --pp 1 --tp 1 --dp 4", "LYNX_BUDGET=7600K"},
	};
	struct step_line a[MAX_LINES], b[MAX_LINES];

	for (size_t l = 0; l < sizeof(runs) / sizeof(runs[0]); l++) {
		char dir[32];
		snprintf(dir, sizeof(dir), "layout%zu", l);
		struct output plain_l = run_trainer(runs[l].layout, NULL, NULL);
		struct output o = run_trainer(runs[l].layout, runs[l].budget, dir);
		assert_identical(&plain_l, &o, a, b);
		assert_true(stat_of(o.err, 0, "evicted (") > 0);
		if (strstr(runs[l].budget, "offload")) { /* an offload-only plan */
			assert_true(stat_of(o.err, 0, "offloaded (") > 0);
			assert_int_equal(stat_of(o.err, 0, "planned for recompute"), 0);
		}
		release(&plain_l);
		release(&o);
	}
}

/*
 * Activations smaller than a VMM granule, packed (shim/pack.h). At 256 KiB granules the demo
 * job's activations at --seq 64 --batch 4 are 1 to 64 KiB: without packs, those a plan
 * would evict stay, and no plan fits 70% of a stage's peak (a warning says why); with packs,
 * every rank evicts them in shared granules, trains bit-identically, and peaks at least 25%
 * below the run without Lynx.
 */
static void test_activations_below_a_granule_are_evicted_in_packs(void **state)
{
	struct step_line a[MAX_LINES], b[MAX_LINES], c[MAX_LINES];
	char env[2048], cmd[1600];
	const char *layout = PP2_TP2 " --seq 64 --batch 4";

	(void)state;
	snprintf(env, sizeof(env), "%s SIMGPU_VMM_GRANULARITY=256K", simgpu_env());
	snprintf(cmd, sizeof(cmd), "%s/bin/tinytrain %s " MODEL, build_dir, layout);
	struct output plain = run(env, cmd);
	struct output packed =
	        run_trainer(layout, "SIMGPU_VMM_GRANULARITY=256K LYNX_BUDGET=70%", "packed");
	struct output unpacked = run_trainer(
	        layout, "SIMGPU_VMM_GRANULARITY=256K LYNX_BUDGET=70% LYNX_PACK=off", "unpacked");
	size_t n = assert_identical(&plain, &packed, a, b);

	assert_identical(&plain, &unpacked, a, c);
	for (int rank = 0; rank < 4; rank++) {
		assert_true(stat_of(packed.err, rank, "below a granule evicted") > 0);
		assert_true(stat_of(packed.err, rank, "times lost") == 0);
		assert_true(stat_of(packed.err, rank, "driver failures") == 0);
	}
	for (size_t i = n - 4; i < n; i++) {
		if (b[i].peak_bytes > a[i].peak_bytes * 3 / 4)
			fail_msg("rank %zu peaks %lld bytes with packs against %lld without Lynx",
			         i % 4, b[i].peak_bytes, a[i].peak_bytes);
		assert_int_equal(c[i].peak_bytes, a[i].peak_bytes);
	}
	assert_non_null(strstr(unpacked.err, "smaller than the device's 256.00 KiB VMM granule"));
	release(&plain);
	release(&packed);
	release(&unpacked);
}

/*
 * A plan that predicts the peak low (LYNX_FAULT=plan-low: it counts the buffers below a
 * granule, which the executor keeps, as evicted, and is made for the whole budget, with no
 * room for what warm-up had in use beyond its tensors): the device goes over in the first planned
 * steps, the executor says so once and offloads kept activations from then on, and the last two
 * steps hold the budget on every rank. Without that correction every step stayed over. DTR's
 * plan rebuilds on demand and copies nothing, so the executor has no copy in flight to wait
 * for: a plan of HEU's with offloads hides so small an error by waiting for its copies, and
 * never needs the correction.
 */
static void test_a_plan_that_predicts_low_is_corrected_to_hold_the_budget(void **state)
{
	struct step_line a[MAX_LINES], b[MAX_LINES];
	struct output plain = plain_pp2_tp2();
	struct output o = run_trainer(
	        PP2_TP2, "LYNX_BUDGET=2150K LYNX_PLANNER=dtr LYNX_FAULT=plan-low", "predictslow");
	size_t n = assert_identical(&plain, &o, a, b);

	for (size_t i = n >= 8 ? n - 8 : 0; i < n; i++)
		if (b[i].peak_bytes > 2150 * 1024)
			fail_msg("rank %zu peaks %lld bytes in step %zu of %zu, over the 2150K "
			         "budget",
			         i % 4, b[i].peak_bytes, i / 4, n / 4);
	assert_non_null(strstr(o.err, "over the budget (at call "));
	assert_true(stat_of(o.err, 0, "of them to hold the budget") > 0);
	assert_null(strstr(o.err, "the budget is not held"));
	release(&o);
}

/* The budget in rank's summary.<rank>.json under dir (0 when it has none). */
static long long summary_budget(const char *dir, int rank)
{
	char path[1300];
	long long budget = 0;

	snprintf(path, sizeof(path), "%s/%s/summary.%d.json", scratch, dir, rank);
	char *text = slurp(path);
	const char *at = text ? strstr(text, "\"budget_bytes\":") : NULL;
	if (at)
		budget = atoll(at + strlen("\"budget_bytes\":"));
	free(text);
	return budget;
}

/*
 * pp4's third stage at 60%: HEU rebuilds both layers' attention in the wait before each
 * micro-batch's backward. Those rebuilds bring back what they read, and tinytrain keeps a
 * layer's saved buffers until its backward ends, where the plan gives each back after its
 * last reader: in the top layer's backward the device would hold both layers and go 0.4 MiB
 * over the budget, with no kept activation to offload there. At the end of the step that
 * examined the producers, the executor foresees that from what the step had in use and
 * makes those window rebuilds at their use; in the steady state it gives back to their
 * windows those it has room for. Every rank that armed a plan holds its budget from the
 * first planned step on (the first under it), bit-identical, and says nothing went over.
 * Without the foresight the step after the examinations went over; before that, every
 * step did.
 */
static void test_window_rebuilds_ahead_of_use_move_to_it_to_hold_the_budget(void **state)
{
	struct step_line a[MAX_LINES], b[MAX_LINES];
	const char *layout = "--nproc 4 --pp 4 --seq 64 --batch 4";
	struct output plain = run_trainer(layout, NULL, NULL);
	struct output o = run_trainer(layout, "LYNX_BUDGET=60%", "deferwindows");
	size_t n = assert_identical(&plain, &o, a, b);

	for (int rank = 0; rank < 4; rank++) {
		long long budget = summary_budget("deferwindows", rank);
		bool planned = false;
		for (size_t i = rank; budget && i < n; i += 4) {
			planned = planned || b[i].peak_bytes <= budget;
			if (planned && b[i].peak_bytes > budget)
				fail_msg(
				        "rank %d peaks %lld bytes in step %zu, after a step within "
				        "its budget of %lld",
				        rank, (long long)b[i].peak_bytes, i / 4, budget);
		}
		assert_true(!budget || planned);
	}
	assert_true(summary_budget("deferwindows", 2) > 0);
	assert_null(strstr(o.err, "over the budget (at call"));
	assert_null(strstr(o.err, "the budget is not held"));
	release(&plain);
	release(&o);
}

/* Without the waits between the compute, offload and restore streams, copies read bytes
 * that are not written yet and memory is reused too early: training goes wrong (different
 * results, or a fault that ends the run). */
static void test_dropping_the_stream_waits_breaks_training(void **state)
{
	struct step_line a[MAX_LINES], b[MAX_LINES];
	struct output plain = plain_pp2_tp2();
	struct output o =
	        run_trainer(PP2_TP2,
	                    "LYNX_BUDGET=2150K LYNX_FAULT=skip-stream-waits "
	                    "SIMGPU_NCCL_TIMEOUT_MS=1500", /* a rank that faults ends it */
	                    "nowait");
	size_t n = parse_lines(plain.out, a, MAX_LINES), m = parse_lines(o.out, b, MAX_LINES);
	bool same = o.exit_code == 0 && m == n;

	for (size_t i = 0; same && i < n; i++)
		same = !strcmp(a[i].results, b[i].results);
	assert_false(same);
	release(&o);
}

/* Every stream wait the executor asks of the driver fails: the host waits for the event
 * instead, so the order holds and nothing is lost (the test above shows that the waits
 * matter); the first failure is said once, and the summary counts the host's waits. */
static void test_failing_stream_waits_are_made_by_the_host(void **state)
{
	struct step_line a[MAX_LINES], b[MAX_LINES];
	struct output plain = plain_pp2_tp2();
	struct output o =
	        run_trainer(PP2_TP2, "LYNX_BUDGET=2150K LYNX_FAULT=fail-stream-waits", "failwait");

	assert_identical(&plain, &o, a, b);
	for (int rank = 0; rank < 4; rank++) {
		assert_true(stat_of(o.err, rank, "evicted (") > 0);
		assert_true(stat_of(o.err, rank, "stream waits made by the host") > 0);
		assert_int_equal(stat_of(o.err, rank, "driver failures"), 0);
	}
	assert_int_equal(count_of(o.err, "cuStreamWaitEvent failed"), 4);
	release(&o);
}

/*
 * The trainer's default memory pool keeps what is freed (PyTorch's cudaMallocAsync backend
 * sets its release threshold so): freed memory stays in use on the device, and no wait for a
 * free brings it down. The executor gives what the pool keeps back to the device when the
 * budget needs it: the last steps hold the budget, with the same results; before, every
 * rank stayed over it and refused every examination.
 */
static void test_a_pool_that_keeps_freed_memory_is_trimmed_to_hold_the_budget(void **state)
{
	struct step_line a[MAX_LINES], b[MAX_LINES];
	struct output plain = run_trainer(PP2_TP2 " --retain-pool", NULL, NULL);
	struct output o = run_trainer(PP2_TP2 " --retain-pool", "LYNX_BUDGET=2150K", "retain");
	size_t n = assert_identical(&plain, &o, a, b);

	for (size_t i = n - 8; i < n; i++)
		if (b[i].peak_bytes > 2150 * 1024)
			fail_msg(
			        "rank %zu peaks %lld bytes in step %zu, over the 2150K budget:\n%s",
			        i % 4, b[i].peak_bytes, i / 4, o.err);
	for (int rank = 0; rank < 2; rank++)
		assert_true(stat_of(o.err, rank, "trims of the default pool") > 0);
	assert_null(strstr(o.err, "the budget is not held"));
	release(&plain);
	release(&o);
}

/*
 * Producers that read a temporary the trainer frees in the forward (the QKV split reads the
 * QKV GEMM's output, the softmax the attention scores, the head merge the attention
 * context) are replayed after that temporary's writer, into scratch. Megatron's full
 * recompute as Lynx runs it rebuilds them bit for bit, where it offloaded them before (96
 * activations a rank). What it still offloads is the last dropout's mask, one per layer and
 * micro-batch (16 a rank): its input, the second GEMM's output, is all-reduced in place
 * before the dropout reads it, which no replay of the GEMM gives back. Siblings (Q, K and V
 * of one split) are written by one replay, as the plan prices them, not one each.
 */
static void test_producers_of_freed_temporaries_are_replayed_after_their_writers(void **state)
{
	struct step_line a[MAX_LINES], b[MAX_LINES];
	struct output plain = plain_pp2_tp2();
	struct output o = run_trainer(PP2_TP2, "LYNX_PLANNER=full", "chains");

	assert_identical(&plain, &o, a, b);
	assert_null(strstr(o.err, "FREED_OPERAND"));
	assert_null(strstr(o.err, "was not found again"));
	for (int rank = 0; rank < 4; rank++) {
		assert_int_equal(stat_of(o.err, rank, "offloaded ("), 4 * 4);
		assert_true(stat_of(o.err, rank, "after the writers of temporaries") > 0);
		assert_true(stat_of(o.err, rank, "restored by replay") > 0);
		/* Q, K and V come from one split: one replay of the chain writes all three. */
		assert_true(stat_of(o.err, rank, "beside a sibling's") > 0);
		assert_true(stat_of(o.err, rank, "restored by replay") +
		                    stat_of(o.err, rank, "beside a sibling's") <=
		            stat_of(o.err, rank, "evicted without a copy"));
	}
	release(&o);
}

/*
 * PyTorch under torch.use_deterministic_algorithms fills every new tensor (NaN) with a kernel
 * of its own before the kernel that computes it. The executor takes the computing kernel for
 * the producer, as the profiler does: on an H200, where the fill was taken, 72 of 79
 * examinations refused (DIFFERS) and nothing was replayed.
 */
static void test_a_fill_before_the_producer_is_passed_over(void **state)
{
	struct step_line a[MAX_LINES], b[MAX_LINES];
	struct output plain = run_trainer(PP2_TP2 " --deterministic-fill", NULL, NULL);
	struct output o = run_trainer(PP2_TP2 " --deterministic-fill", "LYNX_BUDGET=2150K", "fill");

	assert_identical(&plain, &o, a, b);
	assert_null(strstr(o.err, "DIFFERS"));
	for (int rank = 0; rank < 4; rank++) {
		assert_true(stat_of(o.err, rank, "examined and replayed") > 0);
		assert_true(stat_of(o.err, rank, "restored by replay") > 0);
	}
	release(&plain);
	release(&o);
}

/*
 * An executor that loses every iteration evicts nothing, so the memory in use stays above
 * the budget whatever it does: it then leaves the trainer's pool alone (on an H200 a trim at
 * every allocation cost 15% of the step for nothing), and says once where it got lost.
 */
static void test_a_lost_executor_leaves_the_pool_alone(void **state)
{
	struct step_line a[MAX_LINES], b[MAX_LINES];
	struct output plain = run_trainer(PP2_TP2 " --retain-pool", NULL, NULL);
	struct output o = run_trainer(PP2_TP2 " --retain-pool",
	                              "LYNX_BUDGET=2150K LYNX_FAULT=lose-track", "lost");

	(void)state;
	assert_identical(&plain, &o, a, b);
	for (int rank = 0; rank < 4; rank++) {
		assert_int_equal(stat_of(o.err, rank, "iterations followed"), 0);
		assert_true(stat_of(o.err, rank, "times lost") > 0);
		assert_int_equal(stat_of(o.err, rank, "trims of the default pool"), 0);
	}
	assert_non_null(strstr(o.err, "where warm-up saw"));
	assert_non_null(strstr(o.err, "the executor evicted nothing"));
	release(&plain);
	release(&o);
}

static void test_restores_that_cannot_start_ahead_are_made_on_demand(void **state)
{
	struct step_line a[MAX_LINES], b[MAX_LINES];
	struct output plain = plain_pp2_tp2();
	struct output o =
	        run_trainer(PP2_TP2, "LYNX_BUDGET=2150K LYNX_FAULT=fail-prefetch", "noprefetch");

	assert_identical(&plain, &o, a, b);
	for (int rank = 0; rank < 4; rank++) {
		assert_int_equal(stat_of(o.err, rank, "ahead of use"), 0);
		assert_true(stat_of(o.err, rank, "could not start ahead") > 0);
		assert_true(stat_of(o.err, rank, "on demand (") > 0);
	}
	release(&o);
}

/* Megatron's full recompute as Lynx runs it (what cannot be replayed, the profile says
 * which, is offloaded from the plan on, never examined), and the first launch of every
 * replay fails: each is tried again with the device idle, and nothing is lost. */
static void test_a_recompute_only_plan_survives_failing_replays(void **state)
{
	struct step_line a[MAX_LINES], b[MAX_LINES];
	struct output plain = plain_pp2_tp2();
	struct output o =
	        run_trainer(PP2_TP2, "LYNX_PLANNER=full LYNX_FAULT=fail-replay", "failreplay");

	assert_identical(&plain, &o, a, b);
	assert_null(strstr(o.err, "FREED_OPERAND"));
	for (int rank = 0; rank < 4; rank++) {
		long long replays = stat_of(o.err, rank, "restored by replay");
		assert_true(stat_of(o.err, rank, "planned for recompute") > 0);
		assert_true(replays > 0);
		assert_int_equal(stat_of(o.err, rank, "launches failed"), replays);
	}
	release(&o);
}

/*
 * Never wrong: every replay fails, so the bytes of every activation planned for recompute
 * are lost. The trainer must not go on as if nothing happened: its next CUDA call fails as
 * after a device fault, it stops with an error (no step's results printed, since tinytrain
 * prints them only when every rank ends well), and each rank that lost bytes says so once.
 * No rank is killed by a signal: the loss is caught before a kernel reads the bytes.
 */
static void test_lost_bytes_stop_the_trainer_with_an_error(void **state)
{
	struct output o = run_trainer(
	        PP2_TP2, "LYNX_PLANNER=full LYNX_FAULT=lose-replays " NO_LEAK_CHECK, "lose");
	int lost = count_of(o.err, "training data is lost; every CUDA and NCCL call");

	if (o.exit_code == 0 || lost < 1 || lost > 4)
		fail_msg("exit %d, %d ranks said they lost data:\n%s", o.exit_code, lost, o.err);
	assert_string_equal(o.out, "");
	assert_null(strstr(o.err, "signal"));
	assert_null(strstr(o.err, "Segmentation"));
	release(&o);
}

/*
 * A searching planner (checkmate here, whose MILPs take milliseconds) runs off the trainer's
 * thread, over the rank's own stage: the job runs unchanged until its plan is picked up at a
 * later synchronisation and armed. Results identical; each rank either follows the plan or,
 * if the job ended first (a starved thread under load), says so.
 */
static void test_a_search_runs_off_the_trainers_thread(void **state)
{
	struct step_line a[MAX_LINES], b[MAX_LINES];
	struct output plain = plain_pp2_tp2();
	struct output o = run_trainer(
	        PP2_TP2, "LYNX_BUDGET=2150K LYNX_PLANNER=checkmate LYNX_LOG=info", "search");

	assert_identical(&plain, &o, a, b);
	assert_int_equal(count_of(o.err, "checkmate search runs on its own thread, over this "
	                                 "rank's stage"),
	                 4);
	for (int rank = 0; rank < 4; rank++) {
		char done[64];
		snprintf(done, sizeof(done), "lynx[rank %d]: recompute plan (checkmate", rank);
		assert_true(strstr(o.err, done) != NULL ||
		            count_of(o.err, "search had not ended at exit") > 0);
	}
	assert_true(count_of(o.err, "recompute plan (checkmate") +
	                    count_of(o.err, "search had not ended at exit") ==
	            4);
	release(&o);
}

/* The most calls of symbol any process of a run made: simgpu's counter files in dir. */
static long most_calls(const char *dir, const char *symbol)
{
	char pattern[1300], line[256], name[128];
	long most = 0, n;
	glob_t g;

	snprintf(pattern, sizeof(pattern), "%s/calls.*", dir);
	if (glob(pattern, 0, NULL, &g))
		return 0;
	for (size_t i = 0; i < g.gl_pathc; i++) {
		FILE *f = fopen(g.gl_pathv[i], "r");
		while (f && fgets(line, sizeof(line), f))
			if (sscanf(line, "%127s %ld", name, &n) == 2 && !strcmp(name, symbol) &&
			    n > most)
				most = n;
		if (f)
			fclose(f);
	}
	globfree(&g);
	return most;
}

/*
 * simgpu fails 16 cuMemCreate calls spread over the second half of the ones a rank makes
 * (counted in a first run): allocations fall back to the trainer's allocator, restores
 * wait for frees and try again; nothing is lost.
 */
static void test_a_failing_cuMemCreate_during_restores_loses_nothing(void **state)
{
	struct step_line a[MAX_LINES], b[MAX_LINES];
	char env[2048], dir[1200];
	size_t len = 0;
	struct output plain = plain_pp2_tp2();

	snprintf(dir, sizeof(dir), "%s/count", scratch);
	snprintf(env, sizeof(env), "LYNX_BUDGET=2150K SIMGPU_COUNTERS=%s/calls", dir);
	char mkdir_cmd[1300];
	snprintf(mkdir_cmd, sizeof(mkdir_cmd), "mkdir -p %s", dir);
	assert_int_equal(system(mkdir_cmd), 0);
	struct output counted = run_trainer(PP2_TP2, env, "count");
	long calls = most_calls(dir, "cuMemCreate");
	assert_true(calls >= 16);
	release(&counted);

	len += (size_t)snprintf(env, sizeof(env), "LYNX_BUDGET=2150K SIMGPU_FAULTS=");
	for (long k = 0; k < 16; k++)
		len += (size_t)snprintf(env + len, sizeof(env) - len, "%scuMemCreate@%ld=2",
		                        k ? "," : "", calls / 2 + k * (calls - calls / 2) / 16 + 1);
	struct output o = run_trainer(PP2_TP2, env, "nomem");
	assert_identical(&plain, &o, a, b);
	long long waited = 0;
	for (int rank = 0; rank < 4; rank++)
		waited += stat_of(o.err, rank, "after waiting for frees");
	assert_true(waited > 0);
	release(&o);
}

/*
 * tinytrain --sync-every `every` at 2150K against the plain run: identical results, a
 * profile on every rank, and every rank follows at least two iterations, never lost,
 * evicting, with at least `passed` host synchronisations passed over (exactly, when exact).
 */
static void follow_with_extra_syncs(int every, const char *dir, long long passed, bool exact)
{
	struct step_line a[MAX_LINES], b[MAX_LINES];
	char layout[128];

	snprintf(layout, sizeof(layout), "%s --sync-every %d", PP2_TP2, every);
	struct output plain = run_trainer(layout, NULL, NULL);
	struct output o = run_trainer(layout, "LYNX_BUDGET=2150K", dir);
	assert_identical(&plain, &o, a, b);
	assert_null(strstr(o.err, "no profile"));
	for (int rank = 0; rank < 4; rank++) {
		long long seen = stat_of(o.err, rank, "host synchronisations and");
		assert_true(stat_of(o.err, rank, "iterations followed") >= 2);
		assert_int_equal(stat_of(o.err, rank, "times lost"), 0);
		assert_true(exact ? seen == passed : seen >= passed);
		assert_true(stat_of(o.err, rank, "evicted (") > 0);
	}
	release(&plain);
	release(&o);
}

/*
 * A host synchronisation that warm-up did not see (a trainer that checks for NaNs every
 * few steps, here first after warm-up) changes neither the work nor the memory: the
 * executor passes over it and follows the iteration on, instead of losing it.
 */
static void test_a_host_synchronisation_more_than_learned_is_passed_over(void **state)
{
	(void)state;
	follow_with_extra_syncs(11, "extra-sync", 1, true);
}

/*
 * A host synchronisation inside every third step (after the first layer's forward), from
 * the start: warm-up's identical iterations are the steps between, the iteration's start
 * is not taken inside a layer stack, the peak is taken in those steps only, and the
 * executor passes over each extra synchronisation. Before, no profile was made.
 */
static void test_a_check_every_few_steps_is_profiled_and_followed(void **state)
{
	(void)state;
	follow_with_extra_syncs(3, "every-3", 1, false);
}

/*
 * fp16's loss scaler skips the optimizer's step where the gradients overflowed, here once
 * after the plan is armed (step 11), and the step is a CUDA graph (a capturable Adam under
 * torch.cuda.graph) that the executor learned as its iteration's first call. The executor
 * passes over the missing graph and follows the iteration on: identical results, never
 * lost, and every step from the first planned one on within the budget. Before, it lost the
 * iteration at its first call and evicted nothing for a whole step, the last, which went over the
 * budget.
 */
static void test_an_optimizer_step_skipped_after_arming_is_passed_over(void **state)
{
	struct step_line a[MAX_LINES], b[MAX_LINES];
	const char *layout = PP2_TP2 " --grad-scaler 11 --cuda-graph optimizer";
	struct output plain = run_trainer(layout, NULL, NULL);
	struct output o = run_trainer(layout, "LYNX_BUDGET=2150K", "skippedstep");
	size_t n = assert_identical(&plain, &o, a, b);

	(void)state;
	for (size_t rank = 0; rank < 4; rank++) {
		size_t first = rank; /* the first step within the budget: the plan is armed */
		while (first < n && b[first].peak_bytes > 2150 * 1024)
			first += 4;
		assert_true(first / 4 < 11);
		for (size_t i = first; i < n; i += 4)
			if (b[i].peak_bytes > 2150 * 1024)
				fail_msg("rank %zu peaks %lld bytes in step %zu of %zu, over the "
				         "2150K budget",
				         rank, b[i].peak_bytes, i / 4, n / 4);
	}
	for (int rank = 0; rank < 4; rank++) {
		assert_int_equal(stat_of(o.err, rank, "times lost"), 0);
		assert_int_equal(stat_of(o.err, rank, "missing calls passed over"), 1);
		assert_true(stat_of(o.err, rank, "iterations followed") >= 2);
	}
	release(&plain);
	release(&o);
}

/*
 * fp16's loss scaler skips the first ten optimizer steps, so the plan is armed before the
 * trainer first runs its optimizer: at step 10 it captures Adam's step as a CUDA graph on a
 * side stream of its own (Global mode), destroys that stream, and launches the graph from
 * then on. The executor forgets the destroyed stream (it fenced each replay against every
 * trainer stream it had seen, and a destroyed handle failed the replay: "training data is
 * lost", every rank stopped), notes no stream while a capture is open, and passes over
 * what warm-up did not see: identical results, no data lost.
 */
static void test_a_graph_captured_after_arming_on_a_destroyed_stream_loses_nothing(void **state)
{
	struct step_line a[MAX_LINES], b[MAX_LINES];
	const char *layout = PP2_TP2 " --grad-scaler 0,1,2,3,4,5,6,7,8,9 --cuda-graph optimizer";
	struct output plain = run_trainer(layout, NULL, NULL);
	struct output o = run_trainer(layout, "LYNX_BUDGET=2150K", "capturedlate");

	(void)state;
	assert_identical(&plain, &o, a, b);
	assert_null(strstr(o.err, "training data is lost"));
	for (int rank = 0; rank < 4; rank++) {
		assert_true(stat_of(o.err, rank, "iterations followed") >= 1);
		assert_true(stat_of(o.err, rank, "evicted (") > 0);
	}
	release(&plain);
	release(&o);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_recompute_mode_is_bit_identical_and_saves_memory),
	        cmocka_unit_test(test_other_layouts_stay_bit_identical),
	        cmocka_unit_test(test_activations_below_a_granule_are_evicted_in_packs),
	        cmocka_unit_test(test_dropping_the_stream_waits_breaks_training),
	        cmocka_unit_test(test_a_plan_that_predicts_low_is_corrected_to_hold_the_budget),
	        cmocka_unit_test(test_window_rebuilds_ahead_of_use_move_to_it_to_hold_the_budget),
	        cmocka_unit_test(test_failing_stream_waits_are_made_by_the_host),
	        cmocka_unit_test(test_a_pool_that_keeps_freed_memory_is_trimmed_to_hold_the_budget),
	        cmocka_unit_test(test_a_fill_before_the_producer_is_passed_over),
	        cmocka_unit_test(
	                test_producers_of_freed_temporaries_are_replayed_after_their_writers),
	        cmocka_unit_test(test_a_lost_executor_leaves_the_pool_alone),
	        cmocka_unit_test(test_restores_that_cannot_start_ahead_are_made_on_demand),
	        cmocka_unit_test(test_a_recompute_only_plan_survives_failing_replays),
	        cmocka_unit_test(test_lost_bytes_stop_the_trainer_with_an_error),
	        cmocka_unit_test(test_a_search_runs_off_the_trainers_thread),
	        cmocka_unit_test(test_a_failing_cuMemCreate_during_restores_loses_nothing),
	        cmocka_unit_test(test_a_host_synchronisation_more_than_learned_is_passed_over),
	        cmocka_unit_test(test_a_check_every_few_steps_is_profiled_and_followed),
	        cmocka_unit_test(test_an_optimizer_step_skipped_after_arming_is_passed_over),
	        cmocka_unit_test(
	                test_a_graph_captured_after_arming_on_a_destroyed_stream_loses_nothing),
	};
	int failed;

	(void)argc;
	if (harness_init(argv[0], "test-executor"))
		return 1;
	failed = harness_run_tests("test_executor", tests, sizeof(tests) / sizeof(tests[0]), NULL,
	                           plain_teardown);
	return harness_finish(failed);
}
