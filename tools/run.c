/* SPDX-License-Identifier: Apache-2.0 */
/* `lynx run`: preloads liblynx.so into a command, sets Lynx's settings, and execs it. */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "libpath.h"
#include "lynx.h"
#include "run.h"

/*
 * PyTorch's allocator setting, and the value that gives Lynx one allocation per tensor
 * (cuMemAllocAsync). PyTorch 2.9 also reads PYTORCH_ALLOC_CONF, which wins when set.
 */
#define ALLOC_CONF "PYTORCH_CUDA_ALLOC_CONF"
#define ALLOC_CONF_NEW "PYTORCH_ALLOC_CONF"
#define ALLOC_BACKEND "backend:cudaMallocAsync"

/* lynx run's options: each sets one LYNX_* variable for the command (options.def). */
static const struct run_flag {
	const char *flag, *arg;
	enum lynx_option_id option;
	bool recompute_only; /* applies to recompute mode only */
	const char *help;
} run_flags[] = {
        {"--mode", "MODE", LYNX_OPT_LYNX_MODE, false, NULL},
        {"--out", "DIR", LYNX_OPT_LYNX_OUT, false, "where profiles, traces and plans go"},
        {"--budget", "SIZE|N%", LYNX_OPT_LYNX_BUDGET, false,
         "memory per rank: a size, or N% of its measured peak"},
        {"--max-slowdown", "P%", LYNX_OPT_LYNX_MAX_SLOWDOWN, true,
         "without --budget, save the most memory predicted within P% of the iteration"},
        {"--planner", "NAME", LYNX_OPT_LYNX_PLANNER, true, NULL},
        {"--plan", "FILE", LYNX_OPT_LYNX_PLAN, true, "a plan to follow instead of planning"},
};
#define RUN_FLAGS (sizeof(run_flags) / sizeof(run_flags[0]))

void lynx_run_help(FILE *out)
{
	fprintf(out, "Runs COMMAND with liblynx.so first in LD_PRELOAD (after sanitizer runtimes,\n"
	             "which must stay first), so that every process it starts is observed.\n\n");
	for (size_t k = 0; k < RUN_FLAGS; k++) {
		const struct run_flag *f = &run_flags[k];
		const struct lynx_option_info *o = &lynx_options[f->option];
		char left[40];

		snprintf(left, sizeof(left), "%s %s", f->flag, f->arg);
		fprintf(out, "  %-18s sets %s%s\n", left, o->name,
		        f->recompute_only ? " (recompute mode only)" : "");
		if (f->help)
			fprintf(out, "  %-18s %s\n", "", f->help);
		if (!strcmp(o->kind, "ENUM"))
			fprintf(out, "  %-18s one of %s (default %s)\n", "", o->values,
			        o->default_value);
	}
	fprintf(out,
	        "\nAn option not given leaves the environment's setting in place.\nSizes: %s.\n"
	        "--max-slowdown applies without a budget; its default, %s, applies whenever\n"
	        "recompute mode has no budget.\n\n"
	        "It sets " ALLOC_CONF "=" ALLOC_BACKEND "\n"
	        "unless " ALLOC_CONF " or " ALLOC_CONF_NEW " is set already:\n"
	        "Lynx evicts per-tensor allocations. A user's setting is kept; when it lacks\n"
	        "that backend, a note says that Lynx can profile but not evict.\n\n"
	        "liblynx.so is $LYNX_LIB when set, else <bin>/../liblynx.so (build tree), else\n"
	        "<bin>/../lib/liblynx.so (install), where <bin> holds this lynx.\n\n"
	        "Exit status: COMMAND's own; 2 for a bad command line or no liblynx.so; 127 when\n"
	        "COMMAND is not found, 126 when it cannot be executed.\n",
	        LYNX_SIZE_UNITS_HELP, lynx_options[LYNX_OPT_LYNX_MAX_SLOWDOWN].default_value);
}

/*
 * Matches "--name VALUE" or "--name=VALUE" at argv[*i]. Returns 1 and sets *value (and
 * advances *i past a separate value), 0 when argv[*i] is another option, -1 when the value
 * is missing.
 */
static int option_value(int argc, char **argv, int *i, const char *name, const char **value)
{
	size_t len = strlen(name);
	const char *arg = argv[*i];

	if (strncmp(arg, name, len))
		return 0;
	if (arg[len] == '=') {
		*value = arg + len + 1;
		return 1;
	}
	if (arg[len])
		return 0;
	if (*i + 1 >= argc || !strcmp(argv[*i + 1], "--"))
		return -1;
	*value = argv[++*i];
	return 1;
}

/* The values given on the command line, by option (NULL: not given), as the parser's
 * environment. */
static const char *given[LYNX_OPT_COUNT];

static const char *lookup_given(const char *name)
{
	for (int id = 0; id < LYNX_OPT_COUNT; id++)
		if (!strcmp(name, lynx_options[id].name))
			return given[id];
	return NULL;
}

/* What a refused value of option o should have been. */
static const char *expected(const struct lynx_option_info *o, char *buf, size_t len)
{
	if (!strcmp(o->kind, "ENUM"))
		snprintf(buf, len, "one of %s", o->values);
	else if (!strcmp(o->kind, "PERCENT"))
		snprintf(buf, len, "a percentage from 0%% to 100%%, at most two decimals");
	else if (!strcmp(o->kind, "SHARE"))
		snprintf(buf, len, "a size (%s) or a percentage from 1%% to 100%%",
		         LYNX_SIZE_UNITS_HELP);
	else
		snprintf(buf, len, "a valid value");
	return buf;
}

/* Checks the values given (as liblynx.so will parse them): 0, or a usage error. */
static int check_given(void)
{
	struct lynx_config cfg;
	char what[400];
	bool recompute;

	for (size_t k = 0; k < RUN_FLAGS; k++) {
		const struct run_flag *f = &run_flags[k];
		const char *value = given[f->option];
		const char *saved[LYNX_OPT_COUNT];

		if (!value)
			continue;
		if (!*value)
			return lynx_usage_error("run", "%s needs a value (%s)", f->flag, f->arg);
		/* This option alone, so that a refusal is this one's. */
		memcpy(saved, given, sizeof(saved));
		memset(given, 0, sizeof(given));
		given[f->option] = value;
		int refused = lynx_config_parse(&cfg, lookup_given, NULL);
		memcpy(given, saved, sizeof(saved));
		if (refused)
			return lynx_usage_error(
			        "run", "%s '%s' is not %s", f->flag, value,
			        expected(&lynx_options[f->option], what, sizeof(what)));
	}
	if (given[LYNX_OPT_LYNX_BUDGET] && given[LYNX_OPT_LYNX_MAX_SLOWDOWN])
		return lynx_usage_error("run", "give --budget or --max-slowdown, not both (a "
		                               "budget leaves the slowdown to the plan)");
	/* The mode the command will run in: --mode, else the environment's, else the
	 * default (a bad one in the environment: the default, as liblynx.so will say). */
	const char *mode = given[LYNX_OPT_LYNX_MODE];
	if (!mode)
		given[LYNX_OPT_LYNX_MODE] = getenv(lynx_options[LYNX_OPT_LYNX_MODE].name);
	lynx_config_parse(&cfg, lookup_given, NULL);
	given[LYNX_OPT_LYNX_MODE] = mode;
	recompute = cfg.mode == LYNX_MODE_RECOMPUTE;
	for (size_t k = 0; k < RUN_FLAGS; k++)
		if (run_flags[k].recompute_only && given[run_flags[k].option] && !recompute)
			return lynx_usage_error("run",
			                        "%s applies to recompute mode only: add --mode "
			                        "recompute",
			                        run_flags[k].flag);
	return 0;
}

static const char *lookup_env(const char *name)
{
	return getenv(name);
}

/* Sanitizer runtimes refuse to run unless they come first in LD_PRELOAD. */
static bool is_sanitizer_runtime(const char *entry, size_t len)
{
	static const char *const prefixes[] = {"libasan", "libtsan", "libclang_rt."};
	const char *base = entry;

	for (size_t i = 0; i < len; i++)
		if (entry[i] == '/')
			base = entry + i + 1;
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (!strncmp(base, prefixes[i], strlen(prefixes[i])))
			return true;
	return false;
}

/*
 * The new LD_PRELOAD (malloc'd): lib first, then the old entries; sanitizer runtimes at the
 * head of the old list stay ahead of lib. An old list that names lib already is kept as it
 * is (`lynx run` inside `lynx run`). Entries are separated by ':' or ' ', as ld.so reads
 * them. Returns NULL when out of memory.
 */
static char *preload_list(const char *lib, const char *old)
{
	size_t lib_len = strlen(lib), old_len = old ? strlen(old) : 0;
	size_t head = 0; /* bytes of old held by leading sanitizer runtimes (and separators) */
	bool in_head = true;
	char *list, *p;

	for (size_t at = 0; at < old_len;) {
		size_t len = strcspn(old + at, ": ");

		if (len == lib_len && !strncmp(old + at, lib, len))
			return strdup(old);
		if (len && !is_sanitizer_runtime(old + at, len))
			in_head = false;
		at += len + (at + len < old_len);
		if (in_head)
			head = at;
	}
	list = malloc(old_len + lib_len + 3);
	if (!list)
		return NULL;
	p = list;
	if (head) {
		memcpy(p, old, head);
		p += head;
		if (p[-1] != ':' && p[-1] != ' ')
			*p++ = ':';
	}
	memcpy(p, lib, lib_len);
	p += lib_len;
	if (head < old_len) {
		*p++ = ':';
		memcpy(p, old + head, old_len - head);
		p += old_len - head;
	}
	*p = '\0';
	return list;
}

/*
 * Leaves a user's allocator setting alone; otherwise asks PyTorch for cudaMallocAsync.
 * Notes on stderr when Lynx is on and the user's setting lacks that backend.
 */
static int set_alloc_conf(void)
{
	const char *name = getenv(ALLOC_CONF_NEW) ? ALLOC_CONF_NEW
	                   : getenv(ALLOC_CONF)   ? ALLOC_CONF
	                                          : NULL;
	struct lynx_config cfg;

	if (!name)
		return setenv(ALLOC_CONF, ALLOC_BACKEND, 1) ? -errno : 0;
	lynx_config_parse(&cfg, lookup_env, NULL);
	if (cfg.mode != LYNX_MODE_OFF && !strstr(getenv(name), "cudaMallocAsync"))
		fprintf(stderr,
		        "lynx run: note: keeping %s=%s; without " ALLOC_BACKEND
		        " Lynx sees PyTorch's cached segments, not tensors: it can profile but "
		        "not evict\n",
		        name, getenv(name));
	return 0;
}

int lynx_run_main(int argc, char **argv)
{
	char lib[PATH_MAX], tried[2 * PATH_MAX + 64];
	char *preload;
	int i, err;

	memset(given, 0, sizeof(given));
	for (i = 1; i < argc && strcmp(argv[i], "--"); i++) {
		int got = 0;

		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return lynx_command_help("run");
		for (size_t k = 0; k < RUN_FLAGS && !got; k++)
			got = option_value(argc, argv, &i, run_flags[k].flag,
			                   &given[run_flags[k].option]);
		if (got < 0)
			return lynx_usage_error("run", "%s needs a value", argv[i]);
		if (got)
			continue;
		if (argv[i][0] == '-')
			return lynx_usage_error("run", "unknown option '%s'", argv[i]);
		return lynx_usage_error("run", "missing '--' before the command ('%s')", argv[i]);
	}
	if (i >= argc)
		return lynx_usage_error("run", "missing '--' and a command to run");
	if (i + 1 >= argc)
		return lynx_usage_error("run", "no command after '--'");
	if ((err = check_given()))
		return err;

	err = lynx_libpath_find(lib, sizeof(lib), tried, sizeof(tried));
	if (err) {
		fprintf(stderr,
		        "lynx run: cannot find liblynx.so (looked at %s); build it (make lynx) or "
		        "set LYNX_LIB to its path\n",
		        tried);
		return LYNX_EXIT_USAGE;
	}
	preload = preload_list(lib, getenv("LD_PRELOAD"));
	bool env_ok = preload && !setenv("LD_PRELOAD", preload, 1);
	for (size_t k = 0; k < RUN_FLAGS && env_ok; k++) {
		enum lynx_option_id id = run_flags[k].option;
		env_ok = !given[id] || !setenv(lynx_options[id].name, given[id], 1);
	}
	if (!env_ok || set_alloc_conf()) {
		fprintf(stderr, "lynx run: cannot set the environment: %s\n", strerror(errno));
		free(preload);
		return LYNX_EXIT_FAIL;
	}
	free(preload);

	execvp(argv[i + 1], &argv[i + 1]);
	err = errno;
	fprintf(stderr, "lynx run: cannot run '%s': %s\n", argv[i + 1], strerror(err));
	return err == ENOENT ? 127 : 126;
}
