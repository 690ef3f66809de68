/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tests of the LYNX_* settings' parser (shim/config.c): sizes in words (decimals, binary
 * and decimal units), percentages, enums, and a bad value refused with one line while its
 * default stays.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "executor.h"

static uint64_t size_of(const char *text)
{
	uint64_t v = 12345;

	if (lynx_size_parse(text, &v))
		fail_msg("'%s' refused", text);
	return v;
}

static void refused(const char *text)
{
	uint64_t v = 12345;

	if (lynx_size_parse(text, &v) != -EINVAL)
		fail_msg("'%s' taken as %llu", text, (unsigned long long)v);
	assert_int_equal(v, 12345); /* untouched */
}

static void test_config_sizes_take_units_and_decimals(void **state)
{
	assert_int_equal(size_of("0"), 0);
	assert_int_equal(size_of("4096"), 4096);
	assert_int_equal(size_of("4096B"), 4096);
	assert_int_equal(size_of("512M"), 512ull << 20);
	assert_int_equal(size_of("512MiB"), 512ull << 20);
	assert_int_equal(size_of("4G"), 4ull << 30);
	assert_int_equal(size_of("2T"), 2ull << 40);
	assert_int_equal(size_of("7300K"), 7300ull << 10);
	/* Powers of 1000 where the unit says so. */
	assert_int_equal(size_of("70GB"), 70000000000ull);
	assert_int_equal(size_of("1KB"), 1000);
	assert_int_equal(size_of("3TB"), 3000000000000ull);
	/* Decimals, whatever the unit; a fraction of a byte is dropped. */
	assert_int_equal(size_of("4.5M"), 4718592);
	assert_int_equal(size_of("4.5MB"), 4500000);
	assert_int_equal(size_of("0.5GiB"), 1ull << 29);
	assert_int_equal(size_of("1.25K"), 1280);
	assert_int_equal(size_of("0.001K"), 1);
	assert_int_equal(size_of("0.0001K"), 0);
	assert_int_equal(size_of("1.000000000001T"), (1ull << 40) + 1);
	/* 2^64 - 2^40 + (2^40 - 1.1): the largest size short of 2^64 with 12 decimals. */
	assert_int_equal(size_of("16777215.999999999999T"), UINT64_MAX - 1);
}

static void test_config_sizes_refuse_the_rest(void **state)
{
	refused("");
	refused("-1");
	refused("+1");
	refused(" 4G");
	refused("4G ");
	refused("4 G");
	refused("4g");
	refused("4Gb");
	refused("4GiBs");
	refused("4Q");
	refused("M");
	refused(".5M");
	refused("5.M");
	refused("1.5"); /* bytes are whole */
	refused("1.5B");
	refused("1.0");
	refused("1e6");
	refused("0x100");
	refused("1.0000000000001T"); /* 13 decimals */
	refused("18446744073709551616");
	refused("16777216T");
	refused("16777215.9999999999999T");
	assert_int_equal(size_of("18446744073709551615"), UINT64_MAX);
}

/* A fake environment: each test sets these. */
static const char *env_budget, *env_planner, *env_ring, *env_slowdown, *env_fault;

static const char *lookup(const char *name)
{
	if (!strcmp(name, "LYNX_BUDGET"))
		return env_budget;
	if (!strcmp(name, "LYNX_PLANNER"))
		return env_planner;
	if (!strcmp(name, "LYNX_RING_BYTES"))
		return env_ring;
	if (!strcmp(name, "LYNX_MAX_SLOWDOWN"))
		return env_slowdown;
	if (!strcmp(name, "LYNX_FAULT"))
		return env_fault;
	return NULL;
}

static char warned[4][512];
static int warnings;

static void warn(const char *line)
{
	if (warnings < 4)
		snprintf(warned[warnings], sizeof(warned[0]), "%s", line);
	warnings++;
}

static void test_config_reads_slowdowns_in_hundredths_of_a_percent(void **state)
{
	static const struct {
		const char *text;
		int bp; /* -1: refused */
		const char *shown;
	} cases[] = {
	        {"2%", 200, "2%"},    {"0%", 0, "0%"},         {"100%", 10000, "100%"},
	        {"0.5%", 50, "0.5%"}, {"1.25%", 125, "1.25%"}, {"2.50%", 250, "2.5%"},
	        {"101%", -1, NULL},   {"2", -1, NULL},         {"%", -1, NULL},
	        {".5%", -1, NULL},    {"1.%", -1, NULL},       {"1.255%", -1, NULL},
	        {"-1%", -1, NULL},    {"2 %", -1, NULL},       {"00002%", -1, NULL},
	        {"2%%", -1, NULL},
	};
	struct lynx_config cfg;
	char text[32];

	env_budget = env_planner = env_ring = NULL;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		env_slowdown = cases[i].text, warnings = 0;
		int refused = lynx_config_parse(&cfg, lookup, warn);
		if (cases[i].bp < 0) {
			assert_int_equal(refused, 1);
			assert_int_equal(cfg.max_slowdown, 200); /* the default */
			assert_non_null(strstr(warned[0], "is not a percentage from 0% to 100%"));
			continue;
		}
		if (refused)
			fail_msg("'%s' refused: %s", cases[i].text, warned[0]);
		assert_int_equal(cfg.max_slowdown, cases[i].bp);
		lynx_config_format(&cfg, LYNX_OPT_LYNX_MAX_SLOWDOWN, text, sizeof(text));
		assert_string_equal(text, cases[i].shown);
	}
	env_slowdown = NULL;
}

static void test_config_reads_budgets_in_words_and_percentages(void **state)
{
	struct lynx_config cfg;

	env_budget = "4.5GiB", env_planner = "opt", env_ring = "1.5M", warnings = 0;
	assert_int_equal(lynx_config_parse(&cfg, lookup, warn), 0);
	assert_int_equal(cfg.budget.bytes, 4831838208ull);
	assert_int_equal(cfg.budget.percent, 0);
	assert_string_equal(lynx_options[LYNX_OPT_LYNX_PLANNER].name, "LYNX_PLANNER");
	char text[64];
	lynx_config_format(&cfg, LYNX_OPT_LYNX_PLANNER, text, sizeof(text));
	assert_string_equal(text, "opt");
	assert_int_equal(cfg.ring_bytes, 1572864);
	/* Planning's contention defaults: the presets' 19% for compute, none for transfers. */
	assert_int_equal(cfg.contention, 1900);
	assert_int_equal(cfg.contention_comm, 0);

	env_budget = "60%";
	assert_int_equal(lynx_config_parse(&cfg, lookup, warn), 0);
	assert_int_equal(cfg.budget.percent, 60);
	assert_int_equal(cfg.budget.bytes, 0);
	assert_int_equal(warnings, 0);
}

static void test_config_refuses_a_bad_value_with_one_line_and_keeps_the_default(void **state)
{
	struct lynx_config cfg;

	env_budget = "4.5Q", env_planner = "fastest", env_ring = "4.5", warnings = 0;
	assert_int_equal(lynx_config_parse(&cfg, lookup, warn), 3);
	assert_int_equal(warnings, 3);
	assert_int_equal(cfg.budget.bytes, 0);
	assert_int_equal(cfg.budget.percent, 0);
	assert_int_equal(cfg.ring_bytes, 4ull << 20);
	char text[64];
	lynx_config_format(&cfg, LYNX_OPT_LYNX_PLANNER, text, sizeof(text));
	assert_string_equal(text, "heu");
	/* Each line names the variable, the value and what is allowed. */
	assert_non_null(strstr(warned[0], "LYNX_BUDGET='4.5Q' is not a size"));
	assert_non_null(strstr(warned[0], "4.5GiB"));
	assert_non_null(strstr(warned[0], "using the default '0'"));
	assert_non_null(strstr(warned[1], "LYNX_PLANNER='fastest' is not one of heu|opt"));
	assert_non_null(strstr(warned[2], "LYNX_RING_BYTES='4.5' is not a size"));
}

/*
 * LYNX_FAULT's values come from faults.h's LYNX_EXEC_FAULTS, joined by bars: each name
 * parses to its own enum value, which the profiling layer hands to the executor as is, and
 * no other is listed (a name with a bar in it, or a broken join, fails here).
 */
static void test_config_fault_values_are_the_executors_faults(void **state)
{
	static const struct {
		const char *name;
		int fault;
	} faults[] = {
#define FAULT_ENTRY(id, name) {name, LYNX_EXEC_FAULT_##id},
	        LYNX_EXEC_FAULTS(FAULT_ENTRY)
#undef FAULT_ENTRY
	};
	const char *values = lynx_options[LYNX_OPT_LYNX_FAULT].values;
	struct lynx_config cfg;
	size_t listed = 1;

	(void)state;
	for (const char *c = values; *c; c++)
		listed += *c == '|';
	assert_int_equal(listed, LYNX_EXEC_FAULT_COUNT);
	env_budget = env_planner = env_ring = env_slowdown = NULL;
	for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) {
		env_fault = faults[i].name, warnings = 0;
		lynx_config_parse(&cfg, lookup, warn);
		assert_int_equal(warnings, 0);
		assert_int_equal(cfg.fault, faults[i].fault);
	}
	env_fault = NULL;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_config_sizes_take_units_and_decimals),
	        cmocka_unit_test(test_config_sizes_refuse_the_rest),
	        cmocka_unit_test(test_config_reads_slowdowns_in_hundredths_of_a_percent),
	        cmocka_unit_test(test_config_reads_budgets_in_words_and_percentages),
	        cmocka_unit_test(
	                test_config_refuses_a_bad_value_with_one_line_and_keeps_the_default),
	        cmocka_unit_test(test_config_fault_values_are_the_executors_faults),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
