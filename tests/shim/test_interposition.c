/* SPDX-License-Identifier: Apache-2.0 */
/*
 * liblynx.so under tinytrain on simgpu: exact pass-through (byte-identical output in off
 * and profile modes), every call accounted for (Lynx's count of each hooked function equals
 * simgpu's count of calls received, in every process), errors passed through unchanged,
 * bad settings refused harmlessly, and silence in processes that never use CUDA. Along the
 * way, each profile names its run from TORCHELASTIC_RUN_ID, SLURM_JOB_ID or NCCL's unique id.
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

#include "../harness.h"

static const char *const layouts[] = {
        "--nproc 4 --pp 2 --tp 2 --dp 1 --layers 4 --microbatches 4 --steps 2",
        "--nproc 4 --pp 1 --tp 1 --dp 4 --layers 2 --microbatches 2 --steps 2",
};

static void tinytrain_cmd(char *buf, size_t len, const char *layout)
{
	snprintf(buf, len, "%s/bin/tinytrain %s", build_dir, layout);
}

/* Each dirs[r]/profile.<r>.json names the run from source: with id, that id, else one id that
 * all the ranks share. */
static void assert_ranks_name_the_run(const char *const *dirs, int ranks, const char *source,
                                      const char *id)
{
	char path[1700], first[160] = "", want[200];

	for (int r = 0; r < ranks; r++) {
		snprintf(path, sizeof(path), "%s/profile.%d.json", dirs[r], r);
		char *text = slurp(path), *at, got[160];
		if (!text)
			fail_msg("no %s", path);
		at = strstr(text, "\"run\":\t{\n\t\t\"id\":\t\"");
		if (!at ||
		    sscanf(at + strlen("\"run\":\t{\n\t\t\"id\":\t\""), "%159[^\"]", got) != 1)
			fail_msg("%s names no run", path);
		snprintf(want, sizeof(want), "\"%s\",\n\t\t\"source\":\t\"%s\"", got, source);
		if (!strstr(at, want))
			fail_msg("%s: run %s is not from %s", path, got, source);
		if (id)
			assert_string_equal(got, id);
		else if (r)
			assert_string_equal(got, first);
		else
			snprintf(first, sizeof(first), "%s", got);
		free(text);
	}
}

/*
 * Interception itself changes nothing, to the byte. Device timing (LYNX_TIMING=device, the
 * default) is off here: its event records cost virtual time during warm-up, so the step
 * times differ then; tests/profiler/test_online.c checks that the results do not.
 */
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
			         "LD_PRELOAD=%s/liblynx.so LYNX_MODE=%s LYNX_TIMING=off "
			         "LYNX_OUT=%s/out TORCHELASTIC_RUN_ID=elastic-%zu",
			         build_dir, modes[m], scratch, l);
			struct output shimmed = run(env, cmd);
			assert_int_equal(shimmed.exit_code, 0);
			if (strcmp(bare.out, shimmed.out))
				fail_msg("%s under LYNX_MODE=%s differs:\n%s\nvs\n%s", layouts[l],
				         modes[m], bare.out, shimmed.out);
			/* Quiet at the default log level, but for profile mode's summary. */
			for (const char *line = shimmed.err; *line;) {
				if (strncmp(line, "lynx[rank ", strlen("lynx[rank ")))
					fail_msg("unexpected stderr under LYNX_MODE=%s: %s",
					         modes[m], line);
				line = strchr(line, '\n') ? strchr(line, '\n') + 1 : "";
			}
			release(&shimmed);
		}
		release(&bare);
	}
	/* torchrun's id names the run in every rank's profile. */
	snprintf(env, sizeof(env), "%s/out", scratch);
	const char *out[] = {env, env, env, env};
	assert_ranks_name_the_run(out, 4, "TORCHELASTIC_RUN_ID", "elastic-1");
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

	assert_non_null(calls);
	assert_non_null(dump);
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
	snprintf(
	        env, sizeof(env),
	        "-u TORCHELASTIC_RUN_ID -u SLURM_JOB_ID LD_PRELOAD=%s/liblynx.so LYNX_MODE=profile "
	        "LYNX_OUT=%s SIMGPU_COUNTERS=%s/simgpu",
	        build_dir, dir, dir);
	struct output o = run(env, cmd);
	assert_int_equal(o.exit_code, 0);
	release(&o);
	/* Without torchrun or Slurm, the world communicator's unique id names the run. */
	const char *dirs[] = {dir, dir, dir, dir};
	assert_ranks_name_the_run(dirs, 4, "nccl_unique_id", NULL);

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

static void test_bad_settings_warn_once_and_the_run_goes_on(void **state)
{
	char cmd[2048], env[4096];

	tinytrain_cmd(cmd, sizeof(cmd), "--nproc 2 --tp 2 --layers 2 --steps 2");
	struct output bare = run("", cmd);
	snprintf(env, sizeof(env),
	         "LD_PRELOAD=%s/liblynx.so LYNX_MODE=bogus LYNX_TIMING=off LYNX_LOG=7x "
	         "LYNX_OUT=/proc/lynx-cannot",
	         build_dir);
	struct output shimmed = run(env, cmd);

	assert_int_equal(shimmed.exit_code, 0);
	assert_string_equal(shimmed.out, bare.out);
	/* One line per problem, per process (the launcher and two ranks initialise Lynx;
	 * each says it once, and only once). */
	int processes = count_of(shimmed.err, "LYNX_MODE='bogus'");
	assert_true(processes >= 1);
	assert_int_equal(count_of(shimmed.err, "LYNX_LOG='7x'"), processes);
	assert_int_equal(count_of(shimmed.err, "LYNX_OUT='/proc/lynx-cannot'"), processes);
	assert_non_null(strstr(shimmed.err, "off|profile|recompute"));
	release(&bare);
	release(&shimmed);
}

/*
 * LYNX_OUT=.../proc-%p: every process (the launcher and each forked rank) writes into a
 * directory of its own, named by its process id, as on nodes that share no file system;
 * each rank's profile lands in its own. Training is unchanged.
 */
static void test_lynx_out_patterns_give_each_process_its_directory(void **state)
{
	char cmd[2048], env[4096], dir[1300];
	int dirs = 0, profiles = 0;
	struct dirent *e;

	tinytrain_cmd(cmd, sizeof(cmd), "--nproc 2 --pp 2 --layers 4 --microbatches 4 --steps 10");
	struct output bare = run("", cmd);
	snprintf(dir, sizeof(dir), "%s/per-process", scratch);
	snprintf(
	        env, sizeof(env),
	        "-u TORCHELASTIC_RUN_ID SLURM_JOB_ID=4711 SLURM_STEP_ID=2 LD_PRELOAD=%s/liblynx.so "
	        "LYNX_MODE=profile LYNX_TIMING=off LYNX_OUT='%s/proc-%%p'",
	        build_dir, dir);
	struct output o = run(env, cmd);
	assert_int_equal(o.exit_code, 0);
	assert_string_equal(o.out, bare.out);
	DIR *d = opendir(dir);
	assert_non_null(d);
	char rank_dirs[2][1600];
	const char *rank_dir[2] = {rank_dirs[0], rank_dirs[1]};
	while ((e = readdir(d))) {
		char calls[1700], any[1700];
		int pid;
		if (sscanf(e->d_name, "proc-%d", &pid) != 1)
			continue;
		dirs++;
		snprintf(calls, sizeof(calls), "%s/%s/calls.%d.json", dir, e->d_name, pid);
		assert_int_equal(access(calls, R_OK), 0);
		for (int r = 0; r < 2; r++) {
			snprintf(any, sizeof(any), "%s/%s/profile.%d.json", dir, e->d_name, r);
			if (!access(any, R_OK)) {
				snprintf(rank_dirs[r], sizeof(rank_dirs[r]), "%s/%s", dir,
				         e->d_name);
				profiles++;
			}
		}
	}
	closedir(d);
	assert_int_equal(dirs, 3);     /* the launcher and two ranks */
	assert_int_equal(profiles, 2); /* one per rank, each in its own directory */
	/* Slurm's job and step name the run, the same in each directory. */
	assert_ranks_name_the_run(rank_dir, 2, "SLURM_JOB_ID", "4711.2");
	assert_int_equal(count_of(o.err, "LYNX_OUT"), 0);
	release(&bare);
	release(&o);
}

/* A number in Lynx's calls file: "key":N, or -1. */
static long calls_value(const char *json, const char *key)
{
	char quoted[160];
	const char *at;

	snprintf(quoted, sizeof(quoted), "\"%s\":", key);
	at = strstr(json, quoted);
	return at ? atol(at + strlen(quoted)) : -1;
}

/* The calls of every hooked function in a calls file, summed. */
static long calls_total(const char *json)
{
	long total = 0;

	for (const char *p = strstr(json, "\"calls\":{") + 9; *p == '"';) {
		p = strchr(p + 1, '"') + 2;
		total += atol(p);
		p += strspn(p, "0123456789");
		p += *p == ',';
	}
	return total;
}

/* The one calls.<pid>.json in dir (the probe is one process). */
static char *only_calls_file(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *entry;
	char path[1600] = "";

	assert_non_null(d);
	while ((entry = readdir(d)))
		if (!strncmp(entry->d_name, "calls.", 6))
			snprintf(path, sizeof(path), "%s/%s", dir, entry->d_name);
	closedir(d);
	char *calls = slurp(path);
	if (!calls)
		fail_msg("no calls file in %s", dir);
	return calls;
}

/* Eight threads launch and allocate at once: every call is counted once, and every call
 * but the shim's own layout queries is recorded or counted as dropped. Under
 * SAN=thread this is the race check. */
static void test_eight_threads_calling_at_once_are_all_accounted_for(void **state)
{
	char env[4096], cmd[2048], dir[1200];
	const long per_thread = 300;

	snprintf(dir, sizeof(dir), "%s/threads", scratch);
	/* Timing off: every call but the layout queries below is then the probe's own. No
	 * online profile: the probe's threads repeat no iteration, which profile mode would
	 * say. */
	snprintf(env, sizeof(env),
	         "LD_PRELOAD=%s/liblynx.so LYNX_MODE=profile LYNX_TIMING=off LYNX_WARMUP=0 "
	         "LYNX_OUT=%s",
	         build_dir, dir);
	snprintf(cmd, sizeof(cmd), "%s/bin/probe threads %ld", build_dir, per_thread);
	struct output o = run(env, cmd);
	assert_int_equal(o.exit_code, 0);
	assert_string_equal(o.err, "");
	release(&o);

	char *calls = only_calls_file(dir);
	/* Each thread: one launch, one allocation and one free per iteration, plus its own
	 * buffer's allocation and free. */
	assert_int_equal(calls_value(calls, "cudaLaunchKernel"), 8 * per_thread);
	assert_int_equal(calls_value(calls, "cuLaunchKernel"), 8 * per_thread);
	assert_int_equal(calls_value(calls, "cudaMallocAsync"), 8 * (per_thread + 1));
	assert_int_equal(calls_value(calls, "cuMemAllocAsync"), 8 * (per_thread + 1));
	assert_int_equal(calls_value(calls, "cuMemFreeAsync"), 8 * (per_thread + 1));
	/* The shim's own layout and name queries: counted, never recorded. */
	const char *const queries[] = {"cuFuncGetParamInfo", "cuKernelGetParamInfo",
	                               "cuFuncGetName", "cuKernelGetName"};
	long internal = 0;
	for (size_t q = 0; q < sizeof(queries) / sizeof(queries[0]); q++)
		if (calls_value(calls, queries[q]) > 0)
			internal += calls_value(calls, queries[q]);
	assert_int_equal(calls_value(calls, "recorded") + calls_value(calls, "dropped"),
	                 calls_total(calls) - internal);
	free(calls);
}

struct expected_count {
	const char *symbol;
	long count;
};

/*
 * Runs `probe <mode> <arg>` under the shim with SIMGPU_COUNTERS, checks its output, that
 * Lynx's count of every hooked function equals simgpu's, and the counts wanted. Returns
 * the calls file (free it).
 */
static char *run_probe_counted(const char *mode, long arg, const char *want_out,
                               const struct expected_count *want, size_t wanted)
{
	char env[4096], cmd[2048], dir[1200], calls_path[1600] = "", dump_path[1600];
	int pid = 0;

	snprintf(dir, sizeof(dir), "%s/%s", scratch, mode);
	mkdir(dir, 0755);
	snprintf(env, sizeof(env),
	         "LD_PRELOAD=%s/liblynx.so LYNX_MODE=profile LYNX_OUT=%s SIMGPU_COUNTERS=%s/simgpu",
	         build_dir, dir, dir);
	snprintf(cmd, sizeof(cmd), "%s/bin/probe %s %ld", build_dir, mode, arg);
	struct output o = run(env, cmd);
	assert_int_equal(o.exit_code, 0);
	assert_string_equal(o.out, want_out);
	/* Nothing on stderr but, from a probe that launches kernels, the one line saying it is
	 * too short to profile (never silent about that). */
	if (*o.err && !(count_of(o.err, "\n") == 1 && strstr(o.err, " WARN ") &&
	                strstr(o.err, "no profile at exit: ")))
		fail_msg("unexpected stderr:\n%s", o.err);
	release(&o);

	DIR *d = opendir(dir);
	struct dirent *entry;
	assert_non_null(d);
	while ((entry = readdir(d)))
		if (sscanf(entry->d_name, "calls.%d.json", &pid) == 1)
			snprintf(calls_path, sizeof(calls_path), "%s/%s", dir, entry->d_name);
	closedir(d);
	assert_true(pid > 0);
	snprintf(dump_path, sizeof(dump_path), "%s/simgpu.%d", dir, pid);
	assert_true(compare_counts(calls_path, dump_path) > 20);

	char *calls = slurp(calls_path);
	assert_non_null(calls);
	for (size_t i = 0; i < wanted; i++)
		if (calls_value(calls, want[i].symbol) != want[i].count)
			fail_msg("%s: %ld calls, want %ld", want[i].symbol,
			         calls_value(calls, want[i].symbol), want[i].count);
	return calls;
}

/* A CUDA graph captured once and launched many times: each call counted once by Lynx and
 * by simgpu alike, and the calls made while the capture was open flagged as captured. */
static void test_graph_capture_and_replay_are_counted_exactly(void **state)
{
	static const struct expected_count want[] = {
	        {"cudaStreamBeginCapture", 1}, {"cuStreamBeginCapture_v2", 1},
	        {"cudaStreamEndCapture", 1},   {"cuStreamEndCapture", 1},
	        {"cudaStreamIsCapturing", 2},  {"cuStreamIsCapturing", 2},
	        {"cudaLaunchKernel", 3},       {"cuLaunchKernel", 3},
	        {"cudaGraphInstantiate", 1},   {"cuGraphInstantiateWithFlags", 1},
	        {"cudaGraphLaunch", 7},        {"cuGraphLaunch", 7},
	        {"cudaGraphExecDestroy", 1},   {"cuGraphExecDestroy", 1},
	        {"cudaGraphDestroy", 1},       {"cuGraphDestroy", 1},
	};
	char *calls = run_probe_counted("graph", 7, "probe graph: 3 kernels x 7 launches = 21\n",
	                                want, sizeof(want) / sizeof(want[0]));

	/* Inside the capture: both begin-capture calls, one status query and the three
	 * launches, each as a runtime call and the driver call it made. */
	assert_int_equal(calls_value(calls, "captured"), 2 * (1 + 1 + 3));
	free(calls);
}

/* PyTorch's cudaMallocAsync backend: the default pool and its attributes, stream-ordered
 * allocations (one from the pool by name), trim; each call counted once by Lynx and by
 * simgpu alike, as a runtime call and the driver call it made. */
static void test_memory_pool_calls_are_counted_exactly(void **state)
{
	static const struct expected_count want[] = {
	        {"cudaDeviceGetDefaultMemPool", 1},
	        {"cuDeviceGetDefaultMemPool", 1},
	        {"cudaMemPoolSetAttribute", 1},
	        {"cuMemPoolSetAttribute", 1},
	        {"cudaMallocAsync", 5},
	        {"cuMemAllocAsync", 5},
	        {"cudaMallocFromPoolAsync", 1},
	        {"cuMemAllocFromPoolAsync", 1},
	        {"cudaFreeAsync", 6},
	        {"cuMemFreeAsync", 6},
	        {"cudaMemPoolGetAttribute", 5},
	        {"cuMemPoolGetAttribute", 5},
	        {"cudaMemPoolTrimTo", 1},
	        {"cuMemPoolTrimTo", 1},
	};
	char *calls = run_probe_counted("pool", 5, "probe pool: 6 allocations, high 65536 bytes\n",
	                                want, sizeof(want) / sizeof(want[0]));

	/* Every call was recorded (the shim made none of its own here). */
	assert_int_equal(calls_value(calls, "dropped"), 0);
	assert_int_equal(calls_value(calls, "recorded"), calls_total(calls));
	free(calls);
}

/* Triton-style loading through driver entry points: the module and library calls, and the
 * launches of the functions found in them, counted once each. */
static void test_module_and_library_calls_are_counted_exactly(void **state)
{
	static const struct expected_count want[] = {
	        {"cuModuleLoadData", 1},   {"cuModuleGetFunction", 1}, {"cuModuleUnload", 1},
	        {"cuLibraryLoadData", 1},  {"cuLibraryGetKernel", 1},  {"cuLibraryUnload", 1},
	        {"cuLaunchKernel", 2 * 6},
	};
	char *calls = run_probe_counted("module", 6, "probe module: 2 x 6 launches = 12\n", want,
	                                sizeof(want) / sizeof(want[0]));

	/* Seven entry points looked up; no runtime launch (absent from the file). */
	assert_int_equal(calls_value(calls, "cudaGetDriverEntryPointByVersion"), 7);
	assert_int_equal(calls_value(calls, "cudaLaunchKernel"), -1);
	free(calls);
}

static void test_a_forked_child_that_never_uses_cuda_works(void **state)
{
	char env[4096], cmd[2048];

	snprintf(env, sizeof(env), "LD_PRELOAD=%s/liblynx.so LYNX_MODE=profile LYNX_OUT=%s/fork",
	         build_dir, scratch);
	snprintf(cmd, sizeof(cmd), "%s/bin/probe fork", build_dir);
	struct output o = run(env, cmd);
	assert_int_equal(o.exit_code, 0);
	assert_string_equal(o.err, "");
	release(&o);
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
	if (harness_init(argv[0], "test-interposition"))
		return 1;

	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_off_and_profile_modes_print_identical_bytes),
	        cmocka_unit_test(test_every_call_is_accounted_for),
	        cmocka_unit_test(test_injected_errors_reach_the_trainer_unchanged),
	        cmocka_unit_test(test_bad_settings_warn_once_and_the_run_goes_on),
	        cmocka_unit_test(test_lynx_out_patterns_give_each_process_its_directory),
	        cmocka_unit_test(test_eight_threads_calling_at_once_are_all_accounted_for),
	        cmocka_unit_test(test_graph_capture_and_replay_are_counted_exactly),
	        cmocka_unit_test(test_memory_pool_calls_are_counted_exactly),
	        cmocka_unit_test(test_module_and_library_calls_are_counted_exactly),
	        cmocka_unit_test(test_a_forked_child_that_never_uses_cuda_works),
	        cmocka_unit_test(test_processes_without_cuda_see_nothing),
	};
	int failed = cmocka_run_group_tests_name("interposition", tests, NULL, NULL);
	return harness_finish(failed);
}
