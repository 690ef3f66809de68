/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tinytrain end to end, through its command line: determinism, the recompute baselines
 * (same results, less memory, more time), parallel layouts against one rank, the
 * full-recompute overhead of Korthikanti et al., the shapes of real trainers (schedules,
 * launch APIs, kernel modules, lazy optimizer state, DDP buckets, compute streams: same
 * bits, and the launch count as simgpu sees it), and usage errors.
 */
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <cmocka.h>

static char tinytrain[4096];

#define MAX_LINES 256

struct record {
	int step, rank;
	int has_loss;
	double loss;
	char grad_hash[17];
	uint64_t peak_bytes, step_time_ns, launches;
	uint64_t setup_launches; /* step 0's: kernels launched before it */
};

struct run {
	char *out;
	int exit_code;
	struct record lines[MAX_LINES];
	int count;
};

/* Runs tinytrain with args under the environment assignments env ("" for none); stdout is
 * kept, stderr goes to err_to ("/dev/null" or "&1"). */
static struct run run_with_env(const char *env, const char *args, const char *err_to)
{
	struct run r = {0};
	char cmd[8192];
	size_t cap = 1 << 16, len = 0;

	snprintf(cmd, sizeof(cmd), "%s %s %s 2>%s", env, tinytrain, args, err_to);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	r.out = malloc(cap);
	size_t got;
	while ((got = fread(r.out + len, 1, cap - len - 1, p)) > 0) {
		len += got;
		if (len + 1 == cap)
			r.out = realloc(r.out, cap *= 2);
	}
	r.out[len] = 0;
	int status = pclose(p);
	r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	for (char *line = r.out; line && *line && r.count < MAX_LINES;) {
		struct record *rec = &r.lines[r.count];
		char loss[32];
		if (sscanf(line,
		           "{\"step\":%d,\"rank\":%d,\"loss\":%31[^,],\"grad_hash\":\"%16[0-9a-f]"
		           "\","
		           "\"peak_bytes\":%" SCNu64 ",\"step_time_ns\":%" SCNu64 "}",
		           &rec->step, &rec->rank, loss, rec->grad_hash, &rec->peak_bytes,
		           &rec->step_time_ns) == 6) {
			const char *launches = strstr(line, ",\"launches\":");
			const char *end = strchr(line, '\n');
			rec->has_loss = strcmp(loss, "null") != 0;
			rec->loss = rec->has_loss ? atof(loss) : 0;
			const char *setup = strstr(line, ",\"setup_launches\":");
			if (launches && (!end || launches < end))
				rec->launches =
				        strtoull(launches + strlen(",\"launches\":"), NULL, 10);
			if (setup && (!end || setup < end))
				rec->setup_launches =
				        strtoull(setup + strlen(",\"setup_launches\":"), NULL, 10);
			r.count++;
		}
		line = strchr(line, '\n');
		line = line ? line + 1 : NULL;
	}
	return r;
}

static struct run run_tinytrain(const char *args, const char *err_to)
{
	return run_with_env("", args, err_to);
}

static struct run run_ok(const char *args)
{
	struct run r = run_tinytrain(args, "/dev/null");

	if (r.exit_code != 0)
		fail_msg("tinytrain %s exited %d", args, r.exit_code);
	return r;
}

static void test_same_command_prints_identical_bytes(void **state)
{
	const char *args = "--nproc 4 --pp 2 --tp 2 --dp 1 --layers 4 --microbatches 4 --steps 2";
	struct run a = run_ok(args), b = run_ok(args);

	assert_string_equal(a.out, b.out);
	assert_int_equal(a.count, 8);
	for (int i = 0; i < a.count; i++) {
		assert_int_equal(a.lines[i].step, i / 4);
		assert_int_equal(a.lines[i].rank, i % 4);
		/* Stage 1 (ranks 2, 3) is the last: it reports the loss. */
		assert_int_equal(a.lines[i].has_loss, a.lines[i].rank >= 2);
	}
	free(a.out);
	free(b.out);
}

static void test_recompute_keeps_results_and_trades_memory_for_time(void **state)
{
	const char *base = "--nproc 2 --tp 2 --layers 2 --microbatches 2 --steps 2";
	char args[256];
	struct run runs[3];
	const char *modes[] = {"none", "selective", "full"};

	for (int m = 0; m < 3; m++) {
		snprintf(args, sizeof(args), "%s --recompute %s", base, modes[m]);
		runs[m] = run_ok(args);
		assert_int_equal(runs[m].count, 4);
	}
	for (int i = 0; i < runs[0].count; i++) {
		const struct record *none = &runs[0].lines[i], *sel = &runs[1].lines[i],
		                    *full = &runs[2].lines[i];
		assert_string_equal(none->grad_hash, sel->grad_hash);
		assert_string_equal(none->grad_hash, full->grad_hash);
		assert_true(none->loss == sel->loss && none->loss == full->loss);
		assert_true(full->peak_bytes < sel->peak_bytes);
		assert_true(sel->peak_bytes < none->peak_bytes);
		assert_true(none->step_time_ns < sel->step_time_ns);
		assert_true(sel->step_time_ns < full->step_time_ns);
	}
	for (int m = 0; m < 3; m++)
		free(runs[m].out);
}

/* The losses of every step match one rank's within float tolerance: the layouts compute
 * the same model on the same global batch of 4 micro-batches. */
static void test_parallel_layouts_match_one_rank(void **state)
{
	const char *common = "--layers 4 --steps 3";
	const char *layouts[] = {
	        "--nproc 4 --pp 2 --tp 2 --dp 1 --microbatches 4",
	        "--nproc 4 --pp 1 --tp 2 --dp 2 --microbatches 2",
	        "--nproc 4 --pp 2 --tp 1 --dp 2 --microbatches 2",
	};
	char args[256];

	snprintf(args, sizeof(args), "%s --nproc 1 --microbatches 4", common);
	struct run single = run_ok(args);
	assert_int_equal(single.count, 3);
	for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
		snprintf(args, sizeof(args), "%s %s", common, layouts[l]);
		struct run multi = run_ok(args);
		int compared = 0;
		for (int i = 0; i < multi.count; i++) {
			const struct record *rec = &multi.lines[i];
			double want = single.lines[rec->step].loss;
			if (!rec->has_loss)
				continue;
			if (fabs(rec->loss - want) > 1e-5 * fabs(want))
				fail_msg("%s: step %d rank %d loss %.9g, one rank %.9g", layouts[l],
				         rec->step, rec->rank, rec->loss, want);
			compared++;
		}
		assert_true(compared >= 3);
		free(multi.out);
	}
	free(single.out);
}

static uint64_t step_time(const char *recompute, int layers)
{
	char args[256];

	snprintf(args, sizeof(args),
	         "--nproc 8 --tp 8 --layers %d --microbatches 1 --steps 1 "
	         "--virtual-model gpt-22b --recompute %s",
	         layers, recompute);
	struct run r = run_ok(args);
	uint64_t t = r.lines[0].step_time_ns;
	free(r.out);
	return t;
}

/*
 * Korthikanti et al. measured, per layer of a 22B GPT with TP = 8, 39% overhead for full
 * recompute and 7% for selective (33% is the FLOP count alone). The per-layer time is the
 * difference between 4 and 2 layers.
 */
static void test_recompute_overheads_match_megatron_measurements(void **state)
{
	double none = (double)(step_time("none", 4) - step_time("none", 2));
	double full = (double)(step_time("full", 4) - step_time("full", 2)) / none - 1;
	double selective =
	        (double)(step_time("selective", 4) - step_time("selective", 2)) / none - 1;

	print_message("per-layer overhead: full %.1f%%, selective %.1f%%\n", 100 * full,
	              100 * selective);
	assert_true(full >= 0.33 && full <= 0.39);
	assert_true(selective > 0 && selective < 0.10);
}

/* Hazards change how the work is done, not what it computes (dropout aside, which
 * switched off is no dropout at all): every other one off gives the same bits. */
static void test_switching_off_a_hazard_keeps_the_results(void **state)
{
	const char *base = "--nproc 4 --pp 2 --tp 2 --layers 2 --microbatches 2 --steps 2";
	const char *hazards[] = {"temp-reuse",       "workspace",      "inplace",
	                         "param-struct",     "device-pointer", "backward-thread",
	                         "cross-stream-free"};
	char args[256];
	struct run all_on = run_ok(base);

	for (size_t h = 0; h < sizeof(hazards) / sizeof(hazards[0]); h++) {
		snprintf(args, sizeof(args), "%s --no-hazard %s", base, hazards[h]);
		struct run off = run_ok(args);
		assert_int_equal(off.count, all_on.count);
		for (int i = 0; i < off.count; i++) {
			if (strcmp(off.lines[i].grad_hash, all_on.lines[i].grad_hash) ||
			    off.lines[i].loss != all_on.lines[i].loss)
				fail_msg("--no-hazard %s changed step %d rank %d", hazards[h],
				         off.lines[i].step, off.lines[i].rank);
		}
		free(off.out);
	}
	snprintf(args, sizeof(args), "%s --no-hazard dropout", base);
	struct run no_dropout = run_ok(args);
	assert_string_not_equal(no_dropout.lines[0].grad_hash, all_on.lines[0].grad_hash);
	free(no_dropout.out);
	free(all_on.out);
}

/* ---- Shapes of real trainers ------------------------------------------------------------ */

/* Every line of b has the same step, rank, loss and gradient hash as a's (and launches, if
 * same_launches): the same results, bit for bit. */
static void expect_same_results(const struct run *a, const struct run *b, bool same_launches,
                                const char *what)
{
	if (a->count != b->count || a->count == 0)
		fail_msg("%s: %d lines against %d", what, b->count, a->count);
	for (int i = 0; i < a->count; i++) {
		const struct record *x = &a->lines[i], *y = &b->lines[i];
		if (x->step != y->step || x->rank != y->rank || x->has_loss != y->has_loss ||
		    x->loss != y->loss || strcmp(x->grad_hash, y->grad_hash) ||
		    (same_launches && x->launches != y->launches))
			fail_msg("%s: step %d rank %d differs (loss %.9g/%.9g, hash %s/%s, "
			         "launches %" PRIu64 "/%" PRIu64 ")",
			         what, x->step, x->rank, x->loss, y->loss, x->grad_hash,
			         y->grad_hash, x->launches, y->launches);
	}
}

/* The loss of each step: the last stage's, which every schedule must reproduce. */
static void expect_same_losses(const struct run *a, const struct run *b, const char *what)
{
	int compared = 0;

	for (int i = 0; i < a->count; i++) {
		if (!a->lines[i].has_loss)
			continue;
		assert_true(i < b->count && b->lines[i].has_loss);
		if (a->lines[i].loss != b->lines[i].loss)
			fail_msg("%s: step %d loss %.9g, want %.9g", what, a->lines[i].step,
			         b->lines[i].loss, a->lines[i].loss);
		compared++;
	}
	assert_true(compared > 0);
}

static struct run run_with(const char *base, const char *extra)
{
	char args[512];

	snprintf(args, sizeof(args), "%s %s", base, extra);
	return run_ok(args);
}

/* base alone and with the switch `with` give the same results (expect_same_results). */
static void expect_switch_keeps_bits(const char *base, const char *with)
{
	struct run plain = run_ok(base), switched = run_with(base, with);
	char what[512];

	snprintf(what, sizeof(what), "%s with %s", base, with);
	expect_same_results(&plain, &switched, true, what);
	free(plain.out);
	free(switched.out);
}

/*
 * GPipe runs the backwards in 1F1B's micro-batch order: the same gradients, bit for bit,
 * with every micro-batch's activations alive at once (more memory). The interleaved
 * schedule puts other layers on each rank (other hashes) but computes the same losses,
 * with a smaller pipeline bubble (less time).
 */
static void test_schedules_give_the_same_bits(void **state)
{
	const char *two = "--nproc 2 --pp 2 --layers 4 --microbatches 4 --steps 2";
	const char *four = "--nproc 4 --pp 4 --layers 8 --microbatches 4 --steps 2";
	struct run one_f_one_b = run_with(two, "--schedule 1f1b"),
	           gpipe = run_with(two, "--schedule gpipe");

	expect_same_results(&one_f_one_b, &gpipe, true, "gpipe against 1f1b");
	assert_true(gpipe.lines[0].peak_bytes > one_f_one_b.lines[0].peak_bytes);
	free(one_f_one_b.out);
	free(gpipe.out);

	one_f_one_b = run_ok(four);
	gpipe = run_with(four, "--schedule gpipe");
	struct run interleaved = run_with(four, "--schedule interleaved --virtual-stages 2");
	expect_same_results(&one_f_one_b, &gpipe, true, "gpipe against 1f1b, 4 stages");
	expect_same_losses(&one_f_one_b, &interleaved, "interleaved against 1f1b");
	assert_string_not_equal(interleaved.lines[0].grad_hash, one_f_one_b.lines[0].grad_hash);
	for (int i = 0; i < interleaved.count; i++)
		assert_true(interleaved.lines[i].step_time_ns < one_f_one_b.lines[i].step_time_ns);
	free(one_f_one_b.out);
	free(gpipe.out);
	free(interleaved.out);
}

/* One micro-batch through two stages (no steady 1F1B phase at all) is the one-rank step. */
static void test_one_microbatch_runs_through_a_pipeline(void **state)
{
	const char *pipelined = "--nproc 2 --pp 2 --layers 2 --microbatches 1 --steps 2";
	struct run single = run_ok("--nproc 1 --layers 2 --microbatches 1 --steps 2");

	for (int s = 0; s < 2; s++) {
		struct run r = run_with(pipelined, s ? "--schedule gpipe" : "--schedule 1f1b");
		assert_int_equal(r.count, 4);
		for (int i = 0; i < r.count; i++) {
			assert_int_equal(r.lines[i].has_loss, r.lines[i].rank == 1);
			if (r.lines[i].has_loss)
				assert_true(r.lines[i].loss == single.lines[r.lines[i].step].loss);
		}
		free(r.out);
	}
	free(single.out);
}

/* The sum of simgpu's counters (SIMGPU_COUNTERS=stderr: "symbol count" lines, one set per
 * process) for symbol, in a run's merged output. */
static uint64_t counter(const char *out, const char *symbol)
{
	size_t len = strlen(symbol);
	uint64_t total = 0;

	for (const char *line = out; line && *line;) {
		if (!strncmp(line, symbol, len) && line[len] == ' ')
			total += strtoull(line + len + 1, NULL, 10);
		line = strchr(line, '\n');
		line = line ? line + 1 : NULL;
	}
	return total;
}

/* Every rank launches the same number of kernels in every step, more than none; returns
 * all the run's launches, set-up's included. */
static uint64_t expect_steady_launches(const struct run *r)
{
	uint64_t total = 0;

	for (int i = 0; i < r->count; i++) {
		const struct record *rec = &r->lines[i], *first = &r->lines[rec->rank];
		assert_int_equal(first->step, 0);
		assert_true(rec->launches > 0);
		if (rec->launches != first->launches)
			fail_msg("rank %d launched %" PRIu64 " kernels in step %d, %" PRIu64
			         " in step 0",
			         rec->rank, rec->launches, rec->step, first->launches);
		total += rec->launches + rec->setup_launches;
	}
	return total;
}

/*
 * Each --launch mode gives the same bits and launch counts, and goes through the APIs it
 * names: simgpu counts, over all ranks, as many calls to them as tinytrain counted
 * launches, and none to the others. (simgpu's runtime calls the driver's cuLaunchKernel
 * and cuLaunchKernelEx itself, so those are only checked where the runtime is unused.)
 */
static void test_launch_apis_give_the_same_bits_and_counts(void **state)
{
	const char *args = "--nproc 2 --pp 2 --layers 2 --microbatches 2 --steps 3";
	const struct {
		const char *mode;
		const char *launched_by[2]; /* their counts add up to the launches */
		const char *unused[2];
	} cases[] = {
	        {"runtime", {"cudaLaunchKernel"}, {"cudaLaunchKernelExC", "cudaGetFuncBySymbol"}},
	        {"ex", {"cudaLaunchKernelExC"}, {"cudaLaunchKernel", "cudaGetFuncBySymbol"}},
	        {"driver", {"cuLaunchKernel"}, {"cudaLaunchKernel", "cudaLaunchKernelExC"}},
	        {"driver-ex", {"cuLaunchKernelEx"}, {"cudaLaunchKernel", "cudaLaunchKernelExC"}},
	        {"mixed", {"cudaLaunchKernel", "cuLaunchKernelEx"}, {"cudaLaunchKernelExC"}},
	};
	struct run reference = {0};
	char mode_args[256];

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		snprintf(mode_args, sizeof(mode_args), "%s --launch %s", args, cases[c].mode);
		struct run r = run_with_env("SIMGPU_COUNTERS=stderr", mode_args, "&1");
		if (r.exit_code != 0)
			fail_msg("--launch %s exited %d", cases[c].mode, r.exit_code);
		assert_int_equal(r.count, 6);
		uint64_t launches = expect_steady_launches(&r), counted = 0;
		for (int i = 0; i < 2 && cases[c].launched_by[i]; i++) {
			uint64_t n = counter(r.out, cases[c].launched_by[i]);
			if (n == 0)
				fail_msg("--launch %s: no call to %s", cases[c].mode,
				         cases[c].launched_by[i]);
			counted += n;
		}
		for (int i = 0; i < 2 && cases[c].unused[i]; i++) {
			uint64_t n = counter(r.out, cases[c].unused[i]);
			if (n)
				fail_msg("--launch %s: %" PRIu64 " calls to %s", cases[c].mode, n,
				         cases[c].unused[i]);
		}
		if (counted != launches)
			fail_msg("--launch %s: simgpu saw %" PRIu64 " launches, tinytrain %" PRIu64,
			         cases[c].mode, counted, launches);
		if (c == 0) {
			reference = r;
			continue;
		}
		expect_same_results(&reference, &r, true, cases[c].mode);
		free(r.out);
	}
	free(reference.out);
}

/* Kernels launched through a module per layer (torch.compile's graph pieces under DDP) are
 * the same kernels: the same bits and launches, and every rank loaded the modules. */
static void test_kernel_modules_give_the_same_bits(void **state)
{
	const char *args = "--nproc 2 --pp 2 --layers 4 --microbatches 2 --steps 3";
	struct run plain = run_with(args, "--launch mixed"),
	           modules = run_with_env("SIMGPU_COUNTERS=stderr",
	                                  "--nproc 2 --pp 2 --layers 4 --microbatches 2 --steps 3 "
	                                  "--launch mixed --kernel-modules 1",
	                                  "&1");

	assert_int_equal(modules.exit_code, 0);
	expect_same_results(&plain, &modules, true, "--kernel-modules 1");
	/* One module per layer index, on each of the two ranks. */
	assert_int_equal(counter(modules.out, "cuModuleLoadData"), 2 * 4);
	free(plain.out);
	free(modules.out);
}

/* Adam's state made at the first step (cudaMalloc, zeroed) computes the same bits, and the
 * first step's peak is lower without it. */
static void test_lazy_optimizer_gives_the_same_bits(void **state)
{
	const char *args = "--nproc 2 --pp 2 --layers 2 --microbatches 2 --steps 3";
	struct run eager = run_ok(args), lazy = run_with(args, "--lazy-optimizer");

	expect_same_results(&eager, &lazy, true, "--lazy-optimizer");
	for (int rank = 0; rank < 2; rank++)
		assert_true(lazy.lines[rank].peak_bytes < eager.lines[rank].peak_bytes);
	free(eager.out);
	free(lazy.out);
}

/*
 * Bucketed all-reduces sum the same pairs of elements as the one flat all-reduce: the same
 * bits for any bucket size, with a pipeline too. They overlap the backward (a shorter
 * step) and their flat buffers are cudaMalloc'd. With --dp 1 the switch does nothing.
 */
static void test_ddp_buckets_give_the_same_bits(void **state)
{
	const char *dp = "--nproc 2 --dp 2 --layers 2 --microbatches 2 --steps 2";
	const char *pp_dp = "--nproc 4 --pp 2 --dp 2 --layers 2 --microbatches 2 --steps 2";
	const char *sizes[] = {"--ddp-buckets 1", "--ddp-buckets 64", "--ddp-buckets 100000"};
	struct run flat = run_ok(dp);
	char args[256];

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		snprintf(args, sizeof(args), "%s %s", dp, sizes[i]);
		struct run buckets = run_with_env("SIMGPU_COUNTERS=stderr", args, "&1");
		assert_int_equal(buckets.exit_code, 0);
		expect_same_results(&flat, &buckets, true, sizes[i]);
		assert_true(counter(buckets.out, "cudaMalloc") > 0);
		if (i == 1)
			for (int l = 0; l < flat.count; l++)
				assert_true(buckets.lines[l].step_time_ns <
				            flat.lines[l].step_time_ns);
		free(buckets.out);
	}
	free(flat.out);

	flat = run_with(pp_dp, "--schedule gpipe");
	struct run buckets = run_with(pp_dp, "--schedule gpipe --ddp-buckets 16");
	expect_same_results(&flat, &buckets, true, "--ddp-buckets 16 with --pp 2");
	free(flat.out);
	free(buckets.out);

	flat = run_ok("--layers 2 --steps 2");
	buckets = run_ok("--layers 2 --steps 2 --ddp-buckets 16");
	assert_string_equal(flat.out, buckets.out);
	free(flat.out);
	free(buckets.out);
}

/*
 * FSDP shards each layer: a gather before its forward and again before its backward, and a
 * reduce-scatter of its gradients, per micro-batch. The model is the unsharded one, so the
 * losses are the same bits with one micro-batch (the gradient hashes are of each rank's
 * shards); with --dp 1 nothing changes.
 */
static void test_fsdp_gives_the_same_losses(void **state)
{
	const char *layouts[] = {
	        "--nproc 2 --dp 2 --layers 2 --microbatches 1 --steps 3",
	        "--nproc 4 --tp 2 --dp 2 --layers 2 --microbatches 1 --steps 3",
	        "--nproc 4 --pp 2 --dp 2 --layers 4 --microbatches 1 --steps 3",
	};
	char args[256];

	for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
		struct run flat = run_ok(layouts[i]);
		snprintf(args, sizeof(args), "%s --fsdp", layouts[i]);
		struct run sharded = run_with_env("SIMGPU_COUNTERS=stderr", args, "&1");

		assert_int_equal(sharded.exit_code, 0);
		expect_same_losses(&flat, &sharded, args);
		/* Per rank and step, two gathers and one reduce-scatter per layer. */
		assert_true(counter(sharded.out, "ncclAllGather") > 0);
		assert_int_equal(counter(sharded.out, "ncclAllGather"),
		                 2 * counter(sharded.out, "ncclReduceScatter"));
		free(flat.out);
		free(sharded.out);
	}

	struct run flat = run_ok("--layers 2 --steps 2");
	struct run sharded = run_ok("--layers 2 --steps 2 --fsdp");
	assert_string_equal(flat.out, sharded.out);
	free(flat.out);
	free(sharded.out);
}

/* Q, K and V as views of one allocation compute the same bits, in every recompute mode. */
static void test_fused_qkv_views_give_the_same_bits(void **state)
{
	const char *modes[] = {"--recompute none", "--recompute selective", "--recompute full"};
	char base[256];

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		snprintf(base, sizeof(base),
		         "--nproc 2 --tp 2 --layers 2 --microbatches 2 --steps 2 %s", modes[i]);
		expect_switch_keeps_bits(base, "--fused-qkv");
	}
}

/* Gradients freed after each step and allocated by the next backward give the same bits,
 * with DDP's buckets too (their layout comes from the set-up's gradients). */
static void test_gradients_set_to_none_give_the_same_bits(void **state)
{
	const char *layouts[] = {
	        "--nproc 1 --layers 2 --microbatches 2 --steps 3 --lazy-optimizer",
	        "--nproc 4 --pp 2 --dp 2 --layers 4 --microbatches 2 --steps 3 --ddp-buckets 16",
	};

	for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++)
		expect_switch_keeps_bits(layouts[i], "--grad-set-to-none");
}

/*
 * GradScaler's check and update change no bits where no step overflows (step 7 is not run),
 * under DDP's buckets and lazy state too; a step that overflows computes its gradients as
 * before and skips the optimizer, so only the steps after it differ.
 */
static void test_grad_scaler_skips_only_the_steps_that_overflow(void **state)
{
	const char *layouts[] = {
	        "--nproc 1 --layers 2 --microbatches 2 --steps 3 --lazy-optimizer",
	        "--nproc 2 --dp 2 --layers 2 --microbatches 1 --steps 3 --ddp-buckets 16",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
		struct run plain = run_ok(layouts[i]),
		           scaled = run_with(layouts[i], "--grad-scaler 7");
		struct run skipped = run_with(layouts[i], "--grad-scaler 1");
		/* Three more launches a step: the unscale, the check and the scale's update. */
		expect_same_results(&plain, &scaled, false, "--grad-scaler 7");
		for (int l = 0; l < plain.count; l++)
			assert_int_equal(scaled.lines[l].launches, plain.lines[l].launches + 3);
		assert_int_equal(plain.count, skipped.count);
		for (int l = 0; l < plain.count; l++) {
			bool same = !strcmp(plain.lines[l].grad_hash, skipped.lines[l].grad_hash);
			if (same != (plain.lines[l].step < 2))
				fail_msg("%s --grad-scaler 1: step %d's gradients %s", layouts[i],
				         plain.lines[l].step, same ? "did not change" : "changed");
		}
		free(plain.out);
		free(scaled.out);
		free(skipped.out);
	}
}

/*
 * --cuda-graph optimizer: Adam's step captured once as a graph, its step count on the
 * device, gives the bits of Adam launched at every step, with the loss scaler skipping a
 * step too. A graph launch is no kernel launch: each step after the capture's (which
 * launches Adam into the graph) launches one kernel fewer where the optimizer runs.
 */
static void test_an_optimizer_graph_gives_the_same_bits(void **state)
{
	const struct {
		const char *layout;
		int fewer[3]; /* launches fewer than without the graph, per step */
	} cases[] = {
	        {"--nproc 1 --layers 2 --microbatches 2 --steps 3 --lazy-optimizer "
	         "--launch driver-ex",
	         {0, 1, 1}},
	        {"--nproc 2 --dp 2 --layers 2 --microbatches 1 --steps 3 --ddp-buckets 16 "
	         "--grad-scaler 1 --compute-stream created",
	         {0, 0, 1}},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct run plain = run_ok(cases[i].layout),
		           graphed = run_with(cases[i].layout, "--cuda-graph optimizer");
		expect_same_results(&plain, &graphed, false, "--cuda-graph optimizer");
		for (int l = 0; l < plain.count; l++)
			assert_int_equal(graphed.lines[l].launches,
			                 plain.lines[l].launches -
			                         cases[i].fewer[plain.lines[l].step]);
		free(plain.out);
		free(graphed.out);
	}
}

/* Megatron's block recompute: the first N layers of each stage recompute, the rest keep
 * everything; the same bits as either mode, with memory between theirs. */
static void test_block_recompute_keeps_the_bits_between_the_modes(void **state)
{
	const char *base = "--nproc 2 --pp 2 --layers 8 --microbatches 4 --steps 2 --seq 32";
	struct run none = run_with(base, "--recompute none");
	struct run full = run_with(base, "--recompute full");
	struct run block = run_with(base, "--recompute full --recompute-layers 2");

	expect_same_losses(&none, &block, "--recompute-layers 2");
	for (int l = 0; l < none.count; l++) {
		assert_string_equal(none.lines[l].grad_hash, block.lines[l].grad_hash);
		assert_true(block.lines[l].peak_bytes < none.lines[l].peak_bytes);
		assert_true(block.lines[l].peak_bytes > full.lines[l].peak_bytes);
	}
	free(none.out);
	free(full.out);
	free(block.out);
}

/* Megatron's uniform method: groups of N layers keep their input only and rerun together in
 * the backward; the same bits as no recompute, with more memory than full recompute the
 * larger the group (its activations live at once) and less than none. */
static void test_recompute_groups_keep_the_bits(void **state)
{
	const char *base = "--nproc 2 --pp 2 --layers 8 --microbatches 4 --steps 2 --seq 32";
	struct run none = run_with(base, "--recompute none");
	struct run full = run_with(base, "--recompute full");
	struct run pairs = run_with(base, "--recompute full --recompute-groups 2");
	struct run odd = run_with(base, "--recompute full --recompute-groups 3");

	expect_same_results(&full, &pairs, true, "--recompute-groups 2");
	expect_same_results(&full, &odd, true, "--recompute-groups 3");
	expect_same_losses(&none, &pairs, "--recompute-groups 2");
	for (int l = 0; l < none.count; l++) {
		assert_string_equal(none.lines[l].grad_hash, pairs.lines[l].grad_hash);
		assert_true(pairs.lines[l].peak_bytes > full.lines[l].peak_bytes);
		assert_true(odd.lines[l].peak_bytes > pairs.lines[l].peak_bytes);
		assert_true(odd.lines[l].peak_bytes < none.lines[l].peak_bytes);
	}
	free(none.out);
	free(full.out);
	free(pairs.out);
	free(odd.out);
}

/*
 * Evaluation passes before step 0 and every N-th step change nothing the steps compute or
 * measure (they run before the step's clock and peak), and report a loss near the step's.
 */
static void test_eval_passes_leave_the_steps_alone(void **state)
{
	const char *layouts[] = {
	        "--nproc 1 --layers 2 --microbatches 2 --steps 5",
	        "--nproc 4 --tp 2 --dp 2 --layers 2 --microbatches 1 --steps 5 --fsdp",
	};

	for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
		struct run plain = run_ok(layouts[i]);
		struct run eval = run_with(layouts[i], "--eval-every 2 --eval-iters 3");
		int evals = 0;

		assert_int_equal(plain.count, eval.count);
		for (int l = 0; l < plain.count; l++) {
			const struct record *x = &plain.lines[l], *y = &eval.lines[l];
			const char *line = eval.out;
			assert_true(x->loss == y->loss && !strcmp(x->grad_hash, y->grad_hash));
			assert_true(x->peak_bytes == y->peak_bytes &&
			            x->step_time_ns == y->step_time_ns &&
			            x->launches == y->launches);
			for (int k = 0; k < l; k++)
				line = strchr(line, '\n') + 1;
			const char *end = strchr(line, '\n');
			const char *at = strstr(line, "\"eval_loss\":");
			bool has = at && (!end || at < end);
			assert_int_equal(has, y->step % 2 == 0);
			if (has) {
				double loss = atof(at + strlen("\"eval_loss\":"));
				assert_true(loss > 0.5 * x->loss && loss < 2.0 * x->loss);
				evals++;
			}
		}
		assert_true(evals >= 3);
		free(plain.out);
		free(eval.out);
	}
}

/* Computing on the legacy stream, the handle 0 or a created non-blocking stream gives the
 * same bits (the last needs its explicit synchronisation before each copy to the host). */
static void test_compute_streams_give_the_same_bits(void **state)
{
	const char *args = "--nproc 4 --pp 2 --dp 2 --layers 2 --microbatches 2 --steps 2";
	struct run legacy = run_with(args, "--compute-stream legacy");
	struct run null_handle = run_with(args, "--compute-stream null");
	struct run created = run_with(args, "--compute-stream created --ddp-buckets 16");

	expect_same_results(&legacy, &null_handle, true, "--compute-stream null");
	expect_same_results(&legacy, &created, true, "--compute-stream created");
	free(legacy.out);
	free(null_handle.out);
	free(created.out);
}

/* --report-saved names each rank's layer count, one saved size per layer. */
static void test_report_saved_counts_local_layers(void **state)
{
	struct run r = run_ok("--nproc 4 --pp 4 --layers 8 --microbatches 4 --steps 1 "
	                      "--schedule interleaved --virtual-stages 2 --report-saved");

	for (int rank = 0; rank < 4; rank++) {
		char key[64];
		snprintf(key, sizeof(key), "{\"step\":-1,\"rank\":%d,\"saved_layer_bytes\":[",
		         rank);
		const char *line = strstr(r.out, key);
		assert_non_null(line);
		const char *end = strchr(line, '\n');
		const char *layers = strstr(line, "],\"layers\":2}");
		assert_true(layers && layers < end);
		int commas = 0;
		for (const char *p = line + strlen(key); p < layers; p++)
			commas += *p == ',';
		assert_int_equal(commas, 1);
	}
	free(r.out);
}

static void expect_usage_error(const char *args, const char *message)
{
	struct run r = run_tinytrain(args, "&1");

	if (r.exit_code != 2 || !strstr(r.out, message))
		fail_msg("tinytrain %s: exit %d, output '%s'; want 2 and '%s'", args, r.exit_code,
		         r.out, message);
	free(r.out);
}

static void test_bad_arguments_are_usage_errors(void **state)
{
	expect_usage_error("--pp 2 --layers 3", "not divisible by --pp");
	expect_usage_error("--nproc 3 --tp 2", "is not pp*tp*dp");
	expect_usage_error("--virtual-model gpt-5", "unknown --virtual-model 'gpt-5'");
	expect_usage_error("--recompute some", "unknown --recompute");
	expect_usage_error("--layers two", "not a positive integer");
	expect_usage_error("--tp 16 --nproc 16", "must divide the heads");
	expect_usage_error("--no-hazard everything", "unknown hazard");
	expect_usage_error("--ddp-buckets 0", "--ddp-buckets '0' is not a positive integer");
	expect_usage_error("--schedule foo", "unknown --schedule 'foo' (1f1b|gpipe|interleaved)");
	expect_usage_error("--launch cuda", "unknown --launch 'cuda'");
	expect_usage_error("--compute-stream other", "unknown --compute-stream 'other'");
	expect_usage_error("--kernel-modules 2", "--kernel-modules needs a --launch with a driver");
	expect_usage_error("--launch driver --kernel-modules 0",
	                   "--kernel-modules '0' is not a positive integer");
	expect_usage_error("--virtual-stages 2", "needs --schedule interleaved");
	expect_usage_error("--nproc 2 --pp 2 --layers 2 --eval-every 2",
	                   "--eval-every needs --pp 1");
	expect_usage_error("--eval-iters 2", "--eval-iters needs --eval-every");
	expect_usage_error("--recompute-layers 2", "--recompute-layers needs --recompute");
	expect_usage_error("--recompute selective --recompute-groups 2",
	                   "--recompute-groups needs --recompute full");
	expect_usage_error("--recompute full --recompute-groups 2 --recompute-layers 1",
	                   "one at a time");
	expect_usage_error("--nproc 2 --dp 2 --fsdp --recompute full --recompute-groups 2",
	                   "not modelled with --fsdp");
	expect_usage_error("--nproc 2 --dp 2 --fsdp --grad-set-to-none",
	                   "--grad-set-to-none does not go with --fsdp");
	expect_usage_error("--grad-scaler 1,,2", "--grad-scaler '1,,2' is not a comma-separated");
	expect_usage_error("--grad-scaler 64", "steps from 0 to 63");
	expect_usage_error("--cuda-graph step", "unknown --cuda-graph 'step' (none|optimizer)");
	expect_usage_error("--cuda-graph optimizer --grad-set-to-none",
	                   "not with --grad-set-to-none");
	expect_usage_error("--nproc 2 --dp 2 --fsdp --ddp-buckets 4",
	                   "--fsdp and --ddp-buckets are two ways");
	expect_usage_error("--schedule interleaved --pp 4 --layers 8", "--virtual-stages V >= 2");
	expect_usage_error("--schedule interleaved --virtual-stages 2 --pp 2 --layers 4",
	                   "needs --pp >= 3");
	expect_usage_error("--schedule interleaved --virtual-stages 2 --pp 3 --layers 9",
	                   "not divisible by --pp * --virtual-stages");
	expect_usage_error("--schedule interleaved --virtual-stages 2 --pp 3 --layers 6 "
	                   "--microbatches 4",
	                   "--microbatches 4 is not divisible by --pp 3");

	struct run help = run_tinytrain("--help", "/dev/null");
	assert_int_equal(help.exit_code, 0);
	assert_non_null(strstr(help.out, "usage: tinytrain"));
	free(help.out);
}

int main(int argc, char **argv)
{
	/* build/tests/test_tinytrain_run -> build/bin/tinytrain */
	const char *slash = strrchr(argv[0], '/');
	int dir_len = slash ? (int)(slash - argv[0]) + 1 : 0;

	snprintf(tinytrain, sizeof(tinytrain), "%.*s../bin/tinytrain", dir_len, argv[0]);

	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_same_command_prints_identical_bytes),
	        cmocka_unit_test(test_recompute_keeps_results_and_trades_memory_for_time),
	        cmocka_unit_test(test_parallel_layouts_match_one_rank),
	        cmocka_unit_test(test_recompute_overheads_match_megatron_measurements),
	        cmocka_unit_test(test_switching_off_a_hazard_keeps_the_results),
	        cmocka_unit_test(test_schedules_give_the_same_bits),
	        cmocka_unit_test(test_one_microbatch_runs_through_a_pipeline),
	        cmocka_unit_test(test_launch_apis_give_the_same_bits_and_counts),
	        cmocka_unit_test(test_kernel_modules_give_the_same_bits),
	        cmocka_unit_test(test_lazy_optimizer_gives_the_same_bits),
	        cmocka_unit_test(test_ddp_buckets_give_the_same_bits),
	        cmocka_unit_test(test_fsdp_gives_the_same_losses),
	        cmocka_unit_test(test_fused_qkv_views_give_the_same_bits),
	        cmocka_unit_test(test_gradients_set_to_none_give_the_same_bits),
	        cmocka_unit_test(test_block_recompute_keeps_the_bits_between_the_modes),
	        cmocka_unit_test(test_recompute_groups_keep_the_bits),
	        cmocka_unit_test(test_eval_passes_leave_the_steps_alone),
	        cmocka_unit_test(test_compute_streams_give_the_same_bits),
	        cmocka_unit_test(test_report_saved_counts_local_layers),
	        cmocka_unit_test(test_grad_scaler_skips_only_the_steps_that_overflow),
	        cmocka_unit_test(test_an_optimizer_graph_gives_the_same_bits),
	        cmocka_unit_test(test_bad_arguments_are_usage_errors),
	};
	return cmocka_run_group_tests_name("tinytrain_run", tests, NULL, NULL);
}
