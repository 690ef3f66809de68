/* SPDX-License-Identifier: Apache-2.0 */
/* The lynx command: one table of subcommands, and its help, usage errors and version. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doctor.h"
#include "env.h"
#include "lynx.h"
#include "plan.h"
#include "profile.h"
#include "report.h"
#include "run.h"
#include "sim.h"

static int help_main(int argc, char **argv);
static int version_main(int argc, char **argv);

/* A subcommand. main gets argv from the command's name on; it returns the exit status. */
struct lynx_command {
	const char *name;
	int (*main)(int argc, char **argv);
	const char *synopsis; /* the arguments, after "lynx NAME" */
	const char *summary;  /* one line, for `lynx --help` */
	void (*details)(FILE *out);
};

/* Every subcommand, in the order `lynx --help` lists them. */
static const struct lynx_command commands[] = {
        {"run", lynx_run_main,
         "[--mode MODE] [--out DIR] [--budget SIZE|N% | --max-slowdown P%] [--planner NAME] "
         "[--plan FILE] -- COMMAND [ARGS...]",
         "run a training command with liblynx.so preloaded", lynx_run_help},
        {"env", lynx_env_main, "", "show every LYNX_* setting: value here, default, meaning",
         lynx_env_help},
        {"doctor", lynx_doctor_main, "[--verbose] [--require-nccl]",
         "check that CUDA, NCCL and every hooked symbol can be found here", lynx_doctor_help},
        {"sim", lynx_sim_main,
         "--model NAME|--hf-config FILE|--sweep --cluster NAME [--tp T] [--pp P] [--dp D] "
         "[--microbatches M] "
         "[--micro-batch B] [--budget BYTES] [--sp] [--json|--csv]",
         "compare every planner on a job built from a preset or a Hugging Face config",
         lynx_sim_help},
        {"profile", lynx_profile_main,
         "EVENTS.jsonl [-o FILE] [--trace FILE] [--rank R] [--world W] | --read FILE",
         "build one rank's profile from a LYNX_EVENTS dump, or check a profile", lynx_profile_help},
        {"report", lynx_report_main, "[--run ID] DIR [DIR...]",
         "tables, report.svg and report.html from the profile.<rank>.json (and "
         "trace.<rank>.json) in DIR, or in one DIR per node",
         lynx_report_help},
        {"plan", lynx_plan_main,
         "PROFILE|DIR... [--run ID] [--budget BYTES|--budget-percent N] [--granule BYTES] "
         "[--contention PCT] [--planner P] "
         "[--out FILE] | --model NAME|--hf-config FILE --cluster NAME "
         "[--tp T] [--pp P] [--budget BYTES] [--contention PCT] [--planner P] [--out FILE] "
         "[--partition]",
         "plan a job, from its profiles or a model description, and write the plan",
         lynx_plan_help},
        {"version", version_main, "", "print lynx's version (as --version)", NULL},
        {"help", help_main, "[COMMAND]", "show this help, or a command's", NULL},
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static const struct lynx_command *find_command(const char *name)
{
	for (size_t i = 0; i < N_COMMANDS; i++)
		if (!strcmp(commands[i].name, name))
			return &commands[i];
	return NULL;
}

static void print_usage(FILE *out)
{
	fprintf(out, "usage: lynx COMMAND [ARGS...]\n"
	             "       lynx --help | --version\n\ncommands:\n");
	for (size_t i = 0; i < N_COMMANDS; i++)
		fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
	fprintf(out, "\n`lynx help COMMAND` shows a command's options.\n");
}

int lynx_command_help(const char *name)
{
	const struct lynx_command *c = find_command(name);

	if (!c)
		return LYNX_EXIT_USAGE;
	printf("usage: lynx %s%s%s\n\n%s.\n", c->name, *c->synopsis ? " " : "", c->synopsis,
	       c->summary);
	if (c->details) {
		printf("\n");
		c->details(stdout);
	}
	return LYNX_EXIT_OK;
}

int lynx_profile_file_rank(const char *name)
{
	char *end;
	long r;

	if (strncmp(name, "profile.", 8) || name[8] < '0' || name[8] > '9')
		return -1;
	errno = 0;
	r = strtol(name + 8, &end, 10);
	if (errno || strcmp(end, ".json") || r < 0 || r >= LYNX_MAX_RANKS)
		return -1;
	return (int)r;
}

int lynx_usage_error(const char *name, const char *fmt, ...)
{
	const struct lynx_command *c = find_command(name);
	va_list ap;

	fprintf(stderr, "lynx %s: ", name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	if (c)
		fprintf(stderr, "usage: lynx %s%s%s\nTry 'lynx help %s'.\n", c->name,
		        *c->synopsis ? " " : "", c->synopsis, c->name);
	return LYNX_EXIT_USAGE;
}

static int help_main(int argc, char **argv)
{
	if (argc == 1) {
		print_usage(stdout);
		return LYNX_EXIT_OK;
	}
	if (argc > 2)
		return lynx_usage_error("help", "expected one command name, got %d", argc - 1);
	if (!find_command(argv[1]))
		return lynx_usage_error("help", "unknown command '%s'", argv[1]);
	return lynx_command_help(argv[1]);
}

static int version_main(int argc, char **argv)
{
	(void)argv;
	if (argc > 1)
		return lynx_usage_error("version", "takes no arguments");
	printf("lynx %s\n", LYNX_VERSION);
	return LYNX_EXIT_OK;
}

int main(int argc, char **argv)
{
	const struct lynx_command *c;

	if (argc < 2) {
		print_usage(stderr);
		return LYNX_EXIT_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		print_usage(stdout);
		return LYNX_EXIT_OK;
	}
	if (!strcmp(argv[1], "--version"))
		return version_main(1, argv + 1);
	c = find_command(argv[1]);
	if (!c) {
		fprintf(stderr, "lynx: unknown command '%s'\n\n", argv[1]);
		print_usage(stderr);
		return LYNX_EXIT_USAGE;
	}
	return c->main(argc - 1, argv + 1);
}
