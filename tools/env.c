/* SPDX-License-Identifier: Apache-2.0 */
/* `lynx env`: shows every LYNX_* setting as liblynx.so would read it from this environment. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "env.h"
#include "lynx.h"

extern char **environ;

/* Variables that start with LYNX_ but belong to the lynx command, not to options.def. */
static const char *const tool_variables[] = {"LYNX_LIB"};

/* The parser's warning for each refused option, by option id ("" when none). */
static char warnings[LYNX_OPT_COUNT][512];

static const char *lookup_env(const char *name)
{
	return getenv(name);
}

/* Files the parser's warning under the option it names ("LYNX_X='v' is not ..."). */
static void collect_warning(const char *line)
{
	for (int i = 0; i < LYNX_OPT_COUNT; i++) {
		size_t len = strlen(lynx_options[i].name);

		if (!strncmp(line, lynx_options[i].name, len) && line[len] == '=') {
			snprintf(warnings[i], sizeof(warnings[i]), "%s", line);
			return;
		}
	}
}

/*
 * A SIZE value (decimal bytes from lynx_config_format) in the largest K/M/G/T unit that
 * divides it, as the defaults are written: 4194304 -> 4M.
 */
static void size_text(char *text, size_t len)
{
	unsigned long long v = strtoull(text, NULL, 10);
	int unit = 0;

	while (v && v % 1024 == 0 && unit < 4) {
		v /= 1024;
		unit++;
	}
	if (unit)
		snprintf(text, len, "%llu%c", v, "KMGT"[unit - 1]);
}

/* text, or "" written as "" so that an empty value is visible. */
static const char *shown(const char *text)
{
	return *text ? text : "\"\"";
}

/* True when the NAME=VALUE entry names an option of options.def or of this tool. */
static bool is_known_variable(const char *entry)
{
	size_t len = strcspn(entry, "=");

	for (int i = 0; i < LYNX_OPT_COUNT; i++)
		if (strlen(lynx_options[i].name) == len &&
		    !strncmp(entry, lynx_options[i].name, len))
			return true;
	for (size_t i = 0; i < sizeof(tool_variables) / sizeof(tool_variables[0]); i++)
		if (strlen(tool_variables[i]) == len && !strncmp(entry, tool_variables[i], len))
			return true;
	return false;
}

void lynx_env_help(FILE *out)
{
	fprintf(out,
	        "One line per setting: its name; the value liblynx.so would use here; where that\n"
	        "value comes from (env: this environment, default: not set, invalid: set to a\n"
	        "value the parser refuses, so the default is used and a warning line follows);\n"
	        "the default; and what it does. Set LYNX_* variables that Lynx does not know are\n"
	        "listed at the end (a typo keeps its setting at the default). Always exits 0.\n");
}

int lynx_env_main(int argc, char **argv)
{
	struct lynx_config cfg;
	char value[4096];

	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))
		return lynx_command_help("env");
	if (argc > 1)
		return lynx_usage_error("env", "unexpected argument '%s'", argv[1]);

	memset(warnings, 0, sizeof(warnings));
	lynx_config_parse(&cfg, lookup_env, collect_warning);
	printf("%-21s %-12s %-8s %-10s %s\n", "SETTING", "VALUE", "SOURCE", "DEFAULT", "MEANING");
	for (int i = 0; i < LYNX_OPT_COUNT; i++) {
		const struct lynx_option_info *o = &lynx_options[i];
		const char *source = warnings[i][0]    ? "invalid"
		                     : getenv(o->name) ? "env"
		                                       : "default";

		lynx_config_format(&cfg, (enum lynx_option_id)i, value, sizeof(value));
		if (!strcmp(o->kind, "SIZE") || (!strcmp(o->kind, "SHARE") && !strchr(value, '%')))
			size_text(value, sizeof(value));
		printf("%-21s %-12s %-8s %-10s %s", o->name, shown(value), source,
		       shown(o->default_value), o->help);
		if (!strcmp(o->kind, "ENUM") && !strstr(o->help, o->values))
			printf(" [%s]", o->values);
		printf("\n");
		if (warnings[i][0])
			printf("  warning: %s\n", warnings[i]);
	}
	for (char **e = environ; *e; e++)
		if (!strncmp(*e, "LYNX_", 5) && !is_known_variable(*e))
			printf("warning: %.*s is set but is not a Lynx setting; ignored\n",
			       (int)strcspn(*e, "="), *e);
	return LYNX_EXIT_OK;
}
