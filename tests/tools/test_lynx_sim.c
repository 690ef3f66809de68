/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Runs the built `lynx sim` (<build>/bin/lynx beside <build>/tests/test_lynx_sim) and checks
 * its table, JSON and CSV, the sweep, and the exit status and message of bad input.
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
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "../harness.h"

static char lynx[PATH_MAX + 16];

/* Runs "lynx sim <args>" in a clean environment, keeping one stream. */
static struct result sim(enum stream stream, const char *args)
{
	char cmd[8192];

	/* OPT's solves get a second per stage: the tests are about the table, not the MILP. */
	snprintf(cmd, sizeof(cmd), "'%s' sim --time-limit 1 %s", lynx, args);
	return run_clean(stream, cmd);
}

static int count(const char *text, const char *needle)
{
	int n = 0;

	for (const char *at = text; (at = strstr(at, needle)); at += strlen(needle))
		n++;
	return n;
}

static int words(const char *line)
{
	int n = 0;

	for (const char *at = line; *at; at++)
		n += at[0] != ' ' && (at == line || at[-1] == ' ');
	return n;
}

/* The line of text that starts with prefix, copied into line; fails when there is none. */
static void line_of(const char *text, const char *prefix, char *line, size_t len)
{
	size_t plen = strlen(prefix);

	for (const char *at = text; at && *at; at = strchr(at, '\n'), at = at ? at + 1 : NULL)
		if (!strncmp(at, prefix, plen)) {
			snprintf(line, len, "%.*s", (int)strcspn(at, "\n"), at);
			return;
		}
	fail_msg("no line starts with '%s' in:\n%s", prefix, text);
}

static int setup(void **state)
{
	snprintf(lynx, sizeof(lynx), "%s/bin/lynx", build_dir);
	if (access(lynx, X_OK)) {
		fprintf(stderr, "test_lynx_sim: needs %s (make lynx)\n", lynx);
		return -1;
	}
	return 0;
}

static void test_table_has_one_row_per_planner(void **state)
{
	struct result r =
	        sim(OUT, "--model gpt-13b --cluster a100-nvlink --tp 8 --pp 4 --microbatches 8");
	char line[512];
	double step, speedup;

	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, "gpt-13b on a100-nvlink: t=8 p=4 d=1"));
	assert_non_null(strstr(r.text, "8 micro-batches"));
	line_of(r.text, "full ", line, sizeof(line));
	assert_int_equal(sscanf(line, "full %lf %lfx", &step, &speedup), 2);
	assert_true(step > 0 && speedup == 1.0);
	line_of(r.text, "none ", line, sizeof(line));
	assert_int_equal(sscanf(line, "none %lf %lfx", &step, &speedup), 2);
	assert_true(speedup > 1.2 && speedup < 1.5);
	/* planner, step, speedup, MFU, fits, search (value and unit), then four stages' peaks. */
	line_of(r.text, "selective ", line, sizeof(line));
	assert_int_equal(words(line), 7 + 4);
	line_of(r.text, "dtr ", line, sizeof(line));
	assert_int_equal(words(line), 7 + 4);
	line_of(r.text, "offload ", line, sizeof(line));
	assert_true(words(line) >= 7 + 4); /* and its note: alpha by stage */
	line_of(r.text, "heu ", line, sizeof(line));
	assert_int_equal(words(line), 7 + 4);
	assert_null(strstr(r.text, "unchecked"));
	free(r.text);
}

/* Korthikanti et al.'s 22B configuration: without recomputation it does not fit in 80 GB. */
static void test_22b_needs_recomputation_on_a100(void **state)
{
	struct result r = sim(OUT, "--model gpt-22b --cluster a100-nvlink --tp 8 --micro-batch 4 "
	                           "--microbatches 1 --planners none,selective");
	char line[512];

	assert_int_equal(r.status, 0);
	line_of(r.text, "none ", line, sizeof(line));
	assert_non_null(strstr(line, "OOM"));
	line_of(r.text, "selective ", line, sizeof(line));
	assert_non_null(strstr(line, " yes "));
	line_of(r.text, "full ", line, sizeof(line));
	assert_non_null(strstr(line, " yes "));
	free(r.text);
}

static void test_json_lists_every_planner_with_per_stage_peaks(void **state)
{
	struct result r = sim(OUT, "--model gpt-13b --cluster a100-nvlink --tp 8 --pp 4 --json");
	const char *planners[] = {"none",    "full", "selective", "checkmate", "dtr",
	                          "offload", "heu",  "mixed",     "opt"};
	const int n = (int)(sizeof(planners) / sizeof(planners[0]));
	const char *peaks;
	char needle[64];

	assert_int_equal(r.status, 0);
	assert_int_equal(r.text[0], '{');
	assert_non_null(strstr(r.text, "\"planners\":"));
	for (int i = 0; i < n; i++) {
		snprintf(needle, sizeof(needle), "\"planner\":\t\"%s\"", planners[i]);
		assert_int_equal(count(r.text, needle), 1);
	}
	assert_int_equal(count(r.text, "\"step_time_s\":"), n);
	assert_int_equal(count(r.text, "\"mfu\":"), n);
	assert_int_equal(count(r.text, "\"search_time_s\":"), n);
	assert_int_equal(count(r.text, "\"checked\":\ttrue"), n);
	assert_non_null(strstr(r.text, "\"speedup_vs_full\":\t1,"));
	peaks = strstr(r.text, "\"peak_bytes\":\t[");
	assert_non_null(peaks);
	assert_int_equal(count(strndupa(peaks, strcspn(peaks, "]")), ","), 3);
	free(r.text);
}

static void test_csv_has_a_header_and_a_row_per_planner(void **state)
{
	struct result r = sim(OUT, "--model gpt-6.7b --cluster h100-nvlink --tp 4 --pp 2 --dp 2 "
	                           "--sp --budget 40G --csv");

	assert_int_equal(r.status, 0);
	assert_true(!strncmp(r.text, "model,cluster,tp,pp,dp,", 23));
	/*
	 * The header and one row per planner: none, full, selective, checkmate, dtr, offload,
	 * heu, mixed, opt.
	 */
	assert_int_equal(count(r.text, "\n"), 10);
	assert_int_equal(count(r.text, "gpt-6.7b,h100-nvlink,4,2,2,1,1,8,42949672960,"), 9);
	free(r.text);
}

static void test_sweep_runs_the_papers_range(void **state)
{
	/* Sweeps compare the fast planners: OPT's solves over six models are its own test's. */
	struct result r = sim(OUT, "--sweep --cluster a100-nvlink --tp 8 --pp 4 "
	                           "--planners none,selective,dtr,offload,heu");

	assert_int_equal(r.status, 0);
	assert_int_equal(count(r.text, " on a100-nvlink: "), 6);
	assert_non_null(strstr(r.text, "gpt-1.3b on"));
	assert_non_null(strstr(r.text, "gpt-22b on"));
	assert_null(strstr(r.text, "gpt-175b"));
	free(r.text);

	r = sim(OUT, "--sweep --cluster a100-pcie --tp 8 --pp 2 --json --planners heu");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, "\"models\":"));
	assert_int_equal(count(r.text, "\"model\":"), 6);
	free(r.text);
}

/* Each bad input exits 2 with a message that says what is wrong. */
/* --planners chooses what is compared; full, the reference of every speedup, stays. */
static void test_planners_option_chooses_the_rows(void **state)
{
	struct result r = sim(OUT, "--model gpt-1.3b --cluster a100-nvlink --tp 8 --pp 2 "
	                           "--planners heu,dtr --csv");

	assert_int_equal(r.status, 0);
	assert_int_equal(count(r.text, "\n"), 4); /* header, full, dtr, heu */
	assert_non_null(strstr(r.text, ",full,"));
	assert_null(strstr(r.text, ",opt,"));
	free(r.text);
	r = sim(ERR, "--model gpt-1.3b --cluster a100-nvlink --planners heu,magic");
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.text, "unknown planner 'magic'"));
	free(r.text);
}

static void test_bad_input_exits_2_with_a_reason(void **state)
{
	static const struct {
		const char *args, *message;
	} cases[] = {
	        {"--model gpt-99b --cluster a100-nvlink", "unknown model 'gpt-99b'"},
	        {"--model gpt-13b --cluster b100", "unknown cluster 'b100'"},
	        {"--model gpt-13b --cluster a100-nvlink --heads 7", "not divisible by the number"},
	        {"--model gpt-13b --cluster a100-nvlink --tp 8 --pp 80",
	         "exceeds the number of layers"},
	        {"--model gpt-13b --cluster a100-nvlink --tp 8 --budget 1G",
	         "below stage 0's static memory"},
	        {"--model gpt-13b --cluster a100-nvlink --tp eight",
	         "--tp 'eight' is not a positive"},
	        {"--model gpt-13b --cluster a100-nvlink --tp 0", "is not a positive integer"},
	        {"--model gpt-13b --cluster a100-nvlink --budget 12Q", "is not a size"},
	        {"--model gpt-13b", "--cluster is required"},
	        {"--cluster a100-nvlink", "--model is required"},
	        {"--sweep --model gpt-13b --cluster a100-nvlink", "drop --model"},
	        {"--model gpt-13b --cluster a100-nvlink --json --csv", "exclude each other"},
	        {"--model gpt-13b --cluster a100-nvlink --wat", "unknown argument '--wat'"},
	        {"--model gpt-13b --cluster a100-nvlink --pp", "--pp needs a value"},
	        {"--model gpt-13b --cluster a100-nvlink --sp", "needs --tp 2 or more"},
	        {"--model gpt-13b --hf-config x.json --cluster a100-nvlink", "exclude each other"},
	        {"--hf-config /nonexistent/config.json --cluster a100-nvlink",
	         "cannot read the config /nonexistent/config.json"},
	        {"--model llama-7b --cluster h100-nvlink --attention fused",
	         "--attention 'fused' is not flash or unfused"},
	        {"--model llama2-70b --cluster h100-nvlink --tp 16", "are not divisible by the"},
	        {"--model gpt-13b --cluster a100-nvlink --contention 101",
	         "--contention '101' is not a percentage from 0 to 100"},
	        {"--model gpt-13b --cluster a100-nvlink --contention-comm -5%",
	         "--contention-comm '-5%' is not a percentage"},
	        {"--model gpt-13b --cluster a100-nvlink --vp 2", "need pipeline parallelism"},
	        {"--model gpt-13b --cluster a100-nvlink --pp 4 --vp 3", "model chunks"},
	        {"--model gpt-13b --cluster a100-nvlink --pp 4 --vp 2 --microbatches 6",
	         "a multiple of p=4"},
	        {"--model gpt-13b --cluster a100-nvlink --offload-share 1.5x",
	         "--offload-share '1.5x' is not a percentage"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct result out = sim(OUT, cases[i].args), err = sim(ERR, cases[i].args);

		if (out.status != 2 || !strstr(err.text, cases[i].message))
			fail_msg("lynx sim %s: exit %d, stderr '%s' (want 2 and '%s')",
			         cases[i].args, out.status, err.text, cases[i].message);
		assert_string_equal(out.text, "");
		free(out.text);
		free(err.text);
	}
}

/* Meta's huggyllama/llama-7b config.json, as Hugging Face serves it. */
static const char llama_7b_config[] =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"bos_token_id\": 1, \"eos_token_id\": 2,"
        " \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"intermediate_size\": 11008,"
        " \"initializer_range\": 0.02, \"max_position_embeddings\": 2048,"
        " \"model_type\": \"llama\", \"num_attention_heads\": 32, \"num_hidden_layers\": 32,"
        " \"pad_token_id\": 0, \"rms_norm_eps\": 1e-06, \"tie_word_embeddings\": false,"
        " \"torch_dtype\": \"float16\", \"transformers_version\": \"4.28.0.dev0\","
        " \"use_cache\": true, \"vocab_size\": 32000}\n";

/* A CSV row without its model name (column 1) and search time (column 15), into out. */
static void comparable(const char *row, char *out, size_t len)
{
	size_t used = 0;
	int column = 1;

	for (const char *at = row; *at && used + 1 < len; at++) {
		if (column != 1 && column != 15)
			out[used++] = *at;
		column += *at == ',';
	}
	out[used] = '\0';
}

/* The config at `path`, written from text. */
static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

/*
 * A Llama preset plans, and reading Meta's config.json gives the same job: the same rows
 * once the model's name is set aside. GQA's Llama 2 70B and Llama 3 8B plan too.
 */
static void test_llama_from_a_preset_and_from_its_config_agree(void **state)
{
	char path[1200], args[1400];
	struct result preset, config;

	snprintf(path, sizeof(path), "%s/llama-7b.json", scratch);
	write_file(path, llama_7b_config);
	preset = sim(OUT, "--model llama-7b --cluster h100-nvlink --tp 2 --pp 2 --csv "
	                  "--planners none,heu");
	snprintf(args, sizeof(args),
	         "--hf-config %s --cluster h100-nvlink --tp 2 --pp 2 --csv --planners none,heu",
	         path);
	config = sim(OUT, args);
	assert_int_equal(preset.status, 0);
	assert_int_equal(config.status, 0);
	/* Rows differ in the name and the search time only. */
	assert_int_equal(count(preset.text, "\nllama-7b,h100-nvlink,2,2,1,0,1,8,"), 3);
	assert_int_equal(count(config.text, "\nllama,h100-nvlink,2,2,1,0,1,8,"), 3);
	for (const char *planner = "none"; planner;
	     planner = strcmp(planner, "none") ? NULL : "heu") {
		char want[64], a[512], b[512], ca[512], cb[512];

		snprintf(want, sizeof(want), "llama-7b,h100-nvlink,2,2,1,0,1,8,85520809984,%s,",
		         planner);
		line_of(preset.text, want, a, sizeof(a));
		snprintf(want, sizeof(want), "llama,h100-nvlink,2,2,1,0,1,8,85520809984,%s,",
		         planner);
		line_of(config.text, want, b, sizeof(b));
		comparable(a, ca, sizeof(ca));
		comparable(b, cb, sizeof(cb));
		assert_string_equal(ca, cb);
	}
	free(preset.text);
	free(config.text);
	for (const char *model = "llama2-70b"; model;
	     model = strcmp(model, "llama2-70b") ? NULL : "llama3-8b") {
		snprintf(args, sizeof(args),
		         "--model %s --cluster h100-nvlink --tp 8 --pp 4 --sp "
		         "--planners none,full,heu",
		         model);
		preset = sim(OUT, args);
		if (preset.status != 0 || !strstr(preset.text, "heu "))
			fail_msg("lynx sim %s: exit %d:\n%s", args, preset.status, preset.text);
		free(preset.text);
	}
}

/* Tensor parallelism across nodes is a warning; a job no planner fits exits 1 and says why. */
static void test_warnings_and_a_job_that_fits_nowhere(void **state)
{
	struct result r = sim(ERR, "--model gpt-13b --cluster a100-nvlink --tp 40 --planners none");

	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, "warning: --tp 40 spans 5 nodes of 8 GPUs"));
	free(r.text);
	r = sim(ERR, "--model llama3-70b --cluster h100-nvlink --tp 8 --pp 2 --seq 32768 "
	             "--planners none,heu");
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.text, "no planner fits the budget"));
	free(r.text);
}

/* A sweep without --tp and --pp runs each preset at the fewest GPUs where full recomputation
 * fits, and says which; where no layout does, it says why. */
static void test_sweep_chooses_a_layout_that_fits(void **state)
{
	struct result err = sim(ERR, "--sweep --cluster a100-nvlink --planners none");
	struct result out = sim(OUT, "--sweep --cluster a100-nvlink --planners none");

	assert_int_equal(err.status, 0);
	assert_int_equal(count(err.text, "--sweep chose t="), 6);
	assert_non_null(strstr(err.text, "gpt-20b: --sweep chose t=8 p=1,"));
	assert_non_null(strstr(out.text, "gpt-20b on a100-nvlink: t=8 p=1 d=1"));
	free(err.text);
	free(out.text);
	err = sim(ERR, "--sweep --cluster a100-nvlink --planners none --budget 300M");
	assert_int_equal(err.status, 2);
	assert_int_equal(count(err.text, "--sweep chose"), 0);
	assert_int_equal(count(err.text, "lynx sim: gpt-"), 6);
	assert_non_null(strstr(err.text, "lynx sim: gpt-22b: t=8 p=48: "));
	free(err.text);
}

/* HEU's step time in a --json answer. */
static double heu_step(const char *json)
{
	const char *at = strstr(json, "\"planner\":\t\"heu\"");

	assert_non_null(at);
	at = strstr(at, "\"step_time_s\":");
	assert_non_null(at);
	return strtod(at + strlen("\"step_time_s\":"), NULL);
}

/*
 * --contention reaches the planning: on PCIe, where HEU rebuilds inside the long tensor-parallel
 * collectives, rebuilds that run twice as slow there cost time; without contention they cost
 * no more than at the cluster's own 19% (there the windows still hold them).
 */
static void test_contention_changes_what_windows_cost(void **state)
{
	const char *job = "--model gpt-13b --cluster a100-pcie --tp 8 --pp 4 --budget 10G "
	                  "--planners heu --json";
	char args[512];
	struct result r;
	double step[3];
	const char *given[3] = {"--contention 0", "", "--contention 100 --contention-comm 100%"};

	for (int i = 0; i < 3; i++) {
		snprintf(args, sizeof(args), "%s %s", job, given[i]);
		r = sim(OUT, args);
		assert_int_equal(r.status, 0);
		step[i] = heu_step(r.text);
		free(r.text);
	}
	printf("# heu on a100-pcie: contention 0%% %.6f s, the cluster's %.6f s, 100%%/100%% "
	       "%.6f s\n",
	       step[0], step[1], step[2]);
	assert_true(step[0] <= step[1]);
	assert_true(step[1] < step[2]);
}

/* The first "step_time_s" of the planner's entry, and its first stage's peak. */
static double planner_number(const char *json, const char *planner, const char *key)
{
	char name[64];
	const char *at;

	snprintf(name, sizeof(name), "\"planner\":\t\"%s\"", planner);
	at = strstr(json, name);
	assert_non_null(at);
	at = strstr(at, key);
	assert_non_null(at);
	at += strlen(key);
	while (*at == ' ' || *at == '\t' || *at == '[' || *at == '\n')
		at++;
	return strtod(at, NULL);
}

/*
 * --vp: interleaved 1F1B shrinks the bubble and holds more on the first stage; --offload-share
 * fixes the offload planner's share, so that more of it holds less.
 */
static void test_virtual_stages_and_a_given_offload_share(void **state)
{
	const char *job = "--model gpt-13b --cluster a100-nvlink --tp 8 --pp 4 --microbatches 8 "
	                  "--planners none,offload --json";
	const char *given[] = {"--vp 1", "--vp 2", "--vp 2 --offload-share 50",
	                       "--vp 2 --offload-share 100%"};
	double step[4], peak[4];
	char args[512];

	for (int i = 0; i < 4; i++) {
		snprintf(args, sizeof(args), "%s %s", job, given[i]);
		struct result r = sim(OUT, args);
		assert_int_equal(r.status, 0);
		assert_non_null(strstr(r.text, i ? "\"vp\":\t2" : "\"vp\":\t1"));
		step[i] = planner_number(r.text, "none", "\"step_time_s\":");
		peak[i] = planner_number(r.text, "offload", "\"peak_bytes\":");
		free(r.text);
	}
	printf("# gpt-13b t8 p4 m8: none %.4f s at v=1, %.4f s at v=2; offload's first stage "
	       "%.3g, %.3g, %.3g, %.3g bytes\n",
	       step[0], step[1], peak[0], peak[1], peak[2], peak[3]);
	assert_true(step[1] < step[0]);
	assert_true(peak[1] > peak[0]);
	assert_true(peak[2] < peak[1] && peak[3] < peak[2]);
}

static void test_help_lists_options_and_planners(void **state)
{
	struct result r = sim(OUT, "--help");

	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.text, "usage: lynx sim"));
	assert_non_null(strstr(r.text, "--microbatches M"));
	assert_non_null(strstr(r.text, "selective"));
	assert_non_null(strstr(r.text, "dtr"));
	assert_non_null(strstr(r.text, "offload"));
	assert_non_null(strstr(r.text, "heu"));
	free(r.text);
}

int main(int argc, char **argv)
{
	if (harness_init(argv[0], "test-lynx-sim"))
		return 1;

	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_table_has_one_row_per_planner),
	        cmocka_unit_test(test_22b_needs_recomputation_on_a100),
	        cmocka_unit_test(test_json_lists_every_planner_with_per_stage_peaks),
	        cmocka_unit_test(test_csv_has_a_header_and_a_row_per_planner),
	        cmocka_unit_test(test_sweep_runs_the_papers_range),
	        cmocka_unit_test(test_planners_option_chooses_the_rows),
	        cmocka_unit_test(test_bad_input_exits_2_with_a_reason),
	        cmocka_unit_test(test_llama_from_a_preset_and_from_its_config_agree),
	        cmocka_unit_test(test_virtual_stages_and_a_given_offload_share),
	        cmocka_unit_test(test_warnings_and_a_job_that_fits_nowhere),
	        cmocka_unit_test(test_sweep_chooses_a_layout_that_fits),
	        cmocka_unit_test(test_contention_changes_what_windows_cost),
	        cmocka_unit_test(test_help_lists_options_and_planners),
	};

	return harness_finish(cmocka_run_group_tests(tests, setup, NULL));
}
