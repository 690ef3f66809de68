/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A profile's run (profiler/run.c): the id from torchelastic, Slurm or the NCCL unique id's
 * hash, in that order; the process's start from /proc; which profiles are of one run (an id
 * and a world size, starts close together without an id, the world size alone without a
 * run); runs ordered newest first, named for --run, and the line a reader prints about them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "run.h"

static void identify(const struct lynx_run_facts *f, enum lynx_profile_run_source source,
                     const char *id)
{
	struct lynx_profile_run run;

	lynx_run_identify(f, &run);
	assert_true(run.known);
	assert_int_equal(run.source, source);
	assert_string_equal(run.id, id);
	assert_int_equal(run.started, f->started);
}

static void test_run_id_comes_from_torchelastic_then_slurm_then_nccl(void **state)
{
	struct lynx_run_facts f = {.torchelastic_run_id = "elastic-7",
	                           .slurm_job_id = "4711",
	                           .slurm_step_id = "0",
	                           .comm_hashed = true,
	                           .comm_hash = 0xfeedull,
	                           .started = 1795796401};

	(void)state;
	identify(&f, LYNX_PROFILE_RUN_SOURCE_TORCHELASTIC, "elastic-7");
	f.torchelastic_restart_count = "0";
	identify(&f, LYNX_PROFILE_RUN_SOURCE_TORCHELASTIC, "elastic-7");
	/* An elastic restart keeps the id: it is another launch all the same. */
	f.torchelastic_restart_count = "2";
	identify(&f, LYNX_PROFILE_RUN_SOURCE_TORCHELASTIC, "elastic-7.restart2");
	f.torchelastic_restart_count = "two";
	identify(&f, LYNX_PROFILE_RUN_SOURCE_TORCHELASTIC, "elastic-7");
	/* torchrun's default id, the same for every launch, names none. */
	f.torchelastic_run_id = "none";
	identify(&f, LYNX_PROFILE_RUN_SOURCE_SLURM, "4711.0");
	f.torchelastic_run_id = "";
	identify(&f, LYNX_PROFILE_RUN_SOURCE_SLURM, "4711.0");
	f.slurm_step_id = NULL;
	identify(&f, LYNX_PROFILE_RUN_SOURCE_SLURM, "4711");
	f.slurm_job_id = "";
	identify(&f, LYNX_PROFILE_RUN_SOURCE_NCCL, "000000000000feed");
	f.comm_hashed = false;
	identify(&f, LYNX_PROFILE_RUN_SOURCE_NONE, "");
}

static void test_run_id_is_cut_and_cleaned_for_printing(void **state)
{
	char long_id[300];
	struct lynx_run_facts f = {.torchelastic_run_id = "a\tb\nc\x7f"};
	struct lynx_profile_run run;

	(void)state;
	identify(&f, LYNX_PROFILE_RUN_SOURCE_TORCHELASTIC, "a_b_c_");
	memset(long_id, 'x', sizeof(long_id) - 1);
	long_id[sizeof(long_id) - 1] = '\0';
	f.torchelastic_run_id = long_id;
	lynx_run_identify(&f, &run);
	assert_int_equal(strlen(run.id), LYNX_PROFILE_RUN_ID_MAX);
}

static void test_run_hash_is_fnv1a_64(void **state)
{
	(void)state;
	/* The published test vectors. */
	assert_true(lynx_run_hash("", 0) == 0xcbf29ce484222325ull);
	assert_true(lynx_run_hash("a", 1) == 0xaf63dc4c8601ec8cull);
	assert_true(lynx_run_hash("foobar", 6) == 0x85944171f73967e8ull);
}

static void test_run_started_from_proc_text(void **state)
{
	/* A command name with spaces and a ')' of its own; starttime (field 22) is 250000 ticks. */
	static const char self[] = "1234 (a) b (c)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 "
	                           "250000 99 98\n";
	static const char boot[] = "cpu  1 2 3\nintr 5 6 7\nbtime 1795790000\nprocesses 9\n";
	uint64_t started = 0, now = (uint64_t)time(NULL);

	(void)state;
	assert_int_equal(lynx_run_parse_started(self, boot, 100, &started), 0);
	assert_int_equal(started, 1795790000 + 2500);
	assert_int_equal(lynx_run_parse_started(self, "cpu 1\n", 100, &started), -EINVAL);
	assert_int_equal(lynx_run_parse_started("1234 no parenthesis", boot, 100, &started),
	                 -EINVAL);
	assert_int_equal(lynx_run_parse_started("1 (x) S 1 2", boot, 100, &started), -EINVAL);
	assert_int_equal(lynx_run_parse_started(self, boot, 0, &started), -EINVAL);
	/* This process began moments ago. */
	assert_int_equal(lynx_run_process_started(&started), 0);
	assert_true(started <= now + 1 && started + 600 > now);
}

/* A profile with only what grouping reads. */
static struct lynx_profile profile(int world, enum lynx_profile_run_source source, const char *id,
                                   uint64_t started)
{
	struct lynx_profile p = {.rank = 0, .world = world};

	if (id) {
		p.run.known = true;
		p.run.source = source;
		snprintf(p.run.id, sizeof(p.run.id), "%s", id);
		p.run.started = started;
	}
	return p;
}

#define ID(world, id, started) profile(world, LYNX_PROFILE_RUN_SOURCE_SLURM, id, started)
#define NO_ID(world, started) profile(world, LYNX_PROFILE_RUN_SOURCE_NONE, "", started)
#define UNRECORDED(world) profile(world, LYNX_PROFILE_RUN_SOURCE_NONE, NULL, 0)

static void group(const struct lynx_profile *p, const int64_t *mtimes, size_t n,
                  struct lynx_runs *runs)
{
	const struct lynx_profile *ptr[16];

	assert_true(n <= 16);
	for (size_t i = 0; i < n; i++)
		ptr[i] = &p[i];
	assert_int_equal(lynx_runs_group(ptr, mtimes, n, runs), 0);
}

static void members(const struct lynx_run_group *g, const char *name, size_t n, ...)
{
	va_list ap;

	assert_string_equal(g->name, name);
	assert_int_equal(g->count, n);
	va_start(ap, n);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(g->members[i], va_arg(ap, int));
	va_end(ap);
}

/* The directory: a 4-rank run's ranks 2 and 3 beside a newer 2-rank run's 0 and 1. */
static void test_runs_split_by_id_and_world_newest_first(void **state)
{
	struct lynx_profile p[] = {ID(2, "4711", 2000), ID(2, "4711", 2001), ID(4, "4690", 1000),
	                           ID(4, "4690", 1002)};
	struct lynx_runs runs;
	char names[64];

	(void)state;
	group(p, NULL, 4, &runs);
	assert_int_equal(runs.count, 2);
	members(&runs.groups[0], "4711", 2, 0, 1);
	assert_int_equal(runs.groups[0].world, 2);
	assert_int_equal(runs.groups[0].run.started, 2000); /* the earliest rank's */
	members(&runs.groups[1], "4690", 2, 2, 3);
	assert_ptr_equal(lynx_runs_find(&runs, "4690"), &runs.groups[1]);
	assert_null(lynx_runs_find(&runs, "469"));
	lynx_runs_names(&runs, names, sizeof(names));
	assert_string_equal(names, "4711, 4690");
	lynx_runs_free(&runs);

	/* One id under two world sizes is two launches; the older one's name says so. */
	p[2] = ID(4, "4711", 1000);
	p[3] = ID(4, "4711", 1000);
	group(p, NULL, 4, &runs);
	assert_int_equal(runs.count, 2);
	members(&runs.groups[0], "4711", 2, 0, 1);
	members(&runs.groups[1], "4711#2", 2, 2, 3);
	lynx_runs_free(&runs);

	/* One id from two sources is two runs. */
	p[2] = profile(2, LYNX_PROFILE_RUN_SOURCE_TORCHELASTIC, "4711", 2000);
	group(p, NULL, 3, &runs);
	assert_int_equal(runs.count, 2);
	lynx_runs_free(&runs);
}

/* Without an id: the same world, each start within the window of the one before. */
static void test_runs_without_an_id_split_by_start(void **state)
{
	struct lynx_profile p[] = {NO_ID(4, 1000), NO_ID(4, 1050), NO_ID(4, 1100), NO_ID(4, 1161),
	                           NO_ID(2, 1100)};
	struct lynx_runs runs;

	(void)state;
	assert_int_equal(LYNX_RUN_START_WINDOW_S, 60);
	group(p, NULL, 5, &runs);
	assert_int_equal(runs.count, 3);
	members(&runs.groups[0], "none@1161", 1, 3);
	members(&runs.groups[1], "none@1100", 1, 4); /* as recent, but another world */
	members(&runs.groups[2], "none@1000", 3, 0, 1, 2);
	assert_true(lynx_run_same(&p[0], &p[1]));
	assert_false(lynx_run_same(&p[0], &p[2])); /* 100 s apart: only the chain joins them */
	assert_false(lynx_run_same(&p[2], &p[4]));
	lynx_runs_free(&runs);
}

/* Without "run": by world size alone, never with profiles that have one; the newest by the
 * files' modification time. */
static void test_runs_without_a_run_group_by_world_and_file_time(void **state)
{
	struct lynx_profile p[] = {UNRECORDED(4), UNRECORDED(4), UNRECORDED(2), ID(4, "7", 5000),
	                           UNRECORDED(-1)};
	int64_t mtimes[] = {6000, 6100, 4000, 5100, 0};
	struct lynx_runs runs;
	char what[128];

	(void)state;
	group(p, mtimes, 5, &runs);
	assert_int_equal(runs.count, 4);
	members(&runs.groups[0], "unknown@world4", 2, 0, 1);
	assert_int_equal(runs.groups[0].newest_mtime, 6100);
	members(&runs.groups[1], "7", 1, 3); /* started 5000: after 4000, before 6100 */
	members(&runs.groups[2], "unknown@world2", 1, 2);
	members(&runs.groups[3], "unknown", 1, 4);
	assert_true(lynx_run_same(&p[0], &p[1]));
	assert_false(lynx_run_same(&p[0], &p[3]));
	assert_false(lynx_run_same(&p[0], &p[2]));
	setenv("TZ", "UTC", 1);
	tzset();
	lynx_runs_describe(&runs.groups[0], true, what, sizeof(what));
	assert_string_equal(what, "2 ranks of 4, written 1970-01-01 01:41:40");
	lynx_runs_describe(&runs.groups[1], true, what, sizeof(what));
	assert_string_equal(what, "1 rank of 4, started 1970-01-01 01:23:20");
	lynx_runs_describe(&runs.groups[3], true, what, sizeof(what));
	assert_string_equal(what, "1 rank");
	lynx_runs_free(&runs);
}

/* What the reader's line says, in UTC. */
static char *choice_line(const struct lynx_runs *runs, const struct lynx_run_group *chosen,
                         bool asked)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	assert_non_null(f);
	lynx_runs_print_choice(f, "lynx report: DIR holds profiles of", runs, chosen, asked);
	fclose(f);
	return text;
}

static void test_runs_choice_is_one_line_naming_each_run(void **state)
{
	struct lynx_profile p[12] = {ID(4, "4711", 1795796401), ID(4, "4711", 1795796402),
	                             ID(4, "4711", 1795796401), ID(4, "4711", 1795796403),
	                             ID(2, "4690", 1795792801)};
	struct lynx_runs runs;
	char *line;

	(void)state;
	setenv("TZ", "UTC", 1);
	tzset();
	group(p, NULL, 1, &runs);
	line = choice_line(&runs, &runs.groups[0], false);
	assert_string_equal(line, ""); /* one run: nothing */
	free(line);
	lynx_runs_free(&runs);

	group(p, NULL, 5, &runs);
	line = choice_line(&runs, &runs.groups[0], false);
	assert_string_equal(line,
	                    "lynx report: DIR holds profiles of 2 runs: reading run 4711 (4 "
	                    "ranks of 4, started 2026-11-27 16:20:01), the newest; the other: "
	                    "run 4690 (1 rank of 2); --run ID picks one\n");
	free(line);
	line = choice_line(&runs, &runs.groups[1], true);
	assert_string_equal(line, "lynx report: DIR holds profiles of 2 runs: reading run 4690 (1 "
	                          "rank of 2, started 2026-11-27 15:20:01), as --run asks; the "
	                          "other: run 4711 (4 ranks of 4); --run ID picks one\n");
	free(line);
	lynx_runs_free(&runs);

	/* Many stale runs: the newest 8 others named, still one line; profiles without a run
	 * are said to be told apart by world size only. */
	for (int i = 0; i < 11; i++) {
		char id[16];
		snprintf(id, sizeof(id), "r%d", i);
		p[i] = ID(1, id, 1000 + (uint64_t)i);
	}
	p[11] = UNRECORDED(8);
	group(p, NULL, 12, &runs);
	line = choice_line(&runs, &runs.groups[0], false);
	assert_non_null(strstr(line, "of 12 runs: reading run r10 (1 rank of 1, started "));
	assert_non_null(strstr(line, "the others: run r9 (1 rank of 1), run r8 (1 rank of 1), "));
	assert_non_null(strstr(line, ", run r2 (1 rank of 1) and 3 more; --run ID picks one "
	                             "(profiles without a run id are told apart by world size "
	                             "only)\n"));
	assert_ptr_equal(strchr(line, '\n'), line + strlen(line) - 1);
	free(line);
	lynx_runs_free(&runs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_run_id_comes_from_torchelastic_then_slurm_then_nccl),
	        cmocka_unit_test(test_run_id_is_cut_and_cleaned_for_printing),
	        cmocka_unit_test(test_run_hash_is_fnv1a_64),
	        cmocka_unit_test(test_run_started_from_proc_text),
	        cmocka_unit_test(test_runs_split_by_id_and_world_newest_first),
	        cmocka_unit_test(test_runs_without_an_id_split_by_start),
	        cmocka_unit_test(test_runs_without_a_run_group_by_world_and_file_time),
	        cmocka_unit_test(test_runs_choice_is_one_line_naming_each_run),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
