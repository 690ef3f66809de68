/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for the LYNX_* settings parser (shim/config.c), run by `make fuzz`. The
 * input is an environment, one NAME=VALUE a line (a later line for the same name wins, names
 * that are no option are ignored, as getenv would never see them). Parsing must never crash
 * (ASan and UBSan watch) and must keep its contract: one warning per refused value, naming
 * the variable; a refused value leaves the default; an accepted ENUM or PATH value reads
 * back as given; and what `lynx env` prints of the result is itself accepted and prints the
 * same.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The environment that lookup() shows: values[i] is option i's, or NULL when unset. */
static const char *values[LYNX_OPT_COUNT];

/* What warn() saw during one parse. */
static int warnings;
static bool refused[LYNX_OPT_COUNT];

static const char *lookup(const char *name)
{
	for (int i = 0; i < LYNX_OPT_COUNT; i++)
		if (!strcmp(lynx_options[i].name, name))
			return values[i];
	abort(); /* the parser asked for a variable that options.def does not declare */
}

static void warn(const char *line)
{
	warnings++;
	for (int i = 0; i < LYNX_OPT_COUNT; i++) {
		size_t n = strlen(lynx_options[i].name);

		/* "NAME='value' is not ...": the "=" tells LYNX_LOG from LYNX_LOG_FILE. */
		if (!strncmp(line, lynx_options[i].name, n) && line[n] == '=') {
			if (!values[i] || refused[i])
				abort(); /* a warning for a variable that was not set, or twice */
			refused[i] = true;
			return;
		}
	}
	abort(); /* a warning that does not name its variable */
}

/* Parses the environment in values[] into cfg; checks that warnings match the count. */
static void parse(struct lynx_config *cfg)
{
	int n;

	warnings = 0;
	memset(refused, 0, sizeof(refused));
	n = lynx_config_parse(cfg, lookup, warn);
	if (n != warnings)
		abort(); /* the count of refused values is not the count of warnings */
}

/* Splits text (NUL-terminated, modified) into values[]. */
static void split(char *text)
{
	memset(values, 0, sizeof(values));
	for (char *line = text, *next; line; line = next) {
		char *eq;

		next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		eq = strchr(line, '=');
		if (!eq)
			continue;
		*eq = 0;
		for (int i = 0; i < LYNX_OPT_COUNT; i++)
			if (!strcmp(lynx_options[i].name, line))
				values[i] = eq + 1;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lynx_config defaults, cfg, again;
	/* Formatted values: a PATH is at most the whole input; the others are short. */
	size_t len = size + 64;
	char *text = malloc(size + 1), *shown[LYNX_OPT_COUNT] = {0};
	char *a = malloc(len), *b = malloc(len);

	if (!text || !a || !b)
		goto out;
	memset(values, 0, sizeof(values));
	parse(&defaults);
	if (warnings)
		abort(); /* a default that its own parser refuses */

	memcpy(text, data, size);
	text[size] = 0;
	split(text);
	parse(&cfg);
	for (int i = 0; i < LYNX_OPT_COUNT; i++) {
		const char *kind = lynx_options[i].kind;

		lynx_config_format(&cfg, (enum lynx_option_id)i, a, len);
		if (refused[i] || !values[i]) {
			lynx_config_format(&defaults, (enum lynx_option_id)i, b, len);
			if (strcmp(a, b))
				abort(); /* a refused or unset value did not leave the default */
		} else if ((!strcmp(kind, "ENUM") || !strcmp(kind, "PATH") ||
		            !strcmp(kind, "TEXT")) &&
		           strcmp(a, values[i])) {
			abort(); /* an accepted value reads back as something else */
		}
		shown[i] = strdup(a);
		if (!shown[i])
			goto out;
	}

	/* What `lynx env` shows must parse back to itself. */
	for (int i = 0; i < LYNX_OPT_COUNT; i++)
		values[i] = shown[i];
	parse(&again);
	if (warnings)
		abort(); /* the parser refuses what the formatter wrote */
	for (int i = 0; i < LYNX_OPT_COUNT; i++) {
		lynx_config_format(&again, (enum lynx_option_id)i, b, len);
		if (strcmp(shown[i], b))
			abort(); /* not a fixed point */
	}
out:
	for (int i = 0; i < LYNX_OPT_COUNT; i++)
		free(shown[i]);
	free(text);
	free(a);
	free(b);
	return 0;
}
