/* SPDX-License-Identifier: Apache-2.0 */
/* The shared command line of a GPT job built from presets: its parser and its description. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "jobargs.h"
#include "lynx.h"

/* Digits only, 1 to 2^32 - 1. */
static int parse_uint(const char *text, uint32_t *out)
{
	char *end;
	unsigned long long v;

	if (text[0] < '0' || text[0] > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(text, &end, 10);
	if (errno || *end || v == 0 || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

int lynx_jobargs_parse(const char *cmd, const struct lynx_option *opts, size_t n, int argc,
                       char **argv, void *base, const char **positional)
{
	for (int i = 1; i < argc; i++) {
		const struct lynx_option *o = NULL;
		const char *arg = argv[i], *value = NULL, *eq;
		size_t len;
		char *field;

		if (!strcmp(arg, "-h") || !strcmp(arg, "--help"))
			return 1;
		if (positional && arg[0] != '-') {
			if (*positional)
				return lynx_usage_error(cmd, "unexpected argument '%s'", arg);
			*positional = arg;
			continue;
		}
		eq = strchr(arg, '=');
		len = eq ? (size_t)(eq - arg) : strlen(arg);
		for (size_t k = 0; k < n && !o; k++)
			if (strlen(opts[k].name) == len && !strncmp(opts[k].name, arg, len))
				o = &opts[k];
		if (!o)
			return lynx_usage_error(cmd, "unknown argument '%s'", arg);
		field = (char *)base + o->offset;
		if (o->kind == LYNX_OPTION_FLAG) {
			if (eq)
				return lynx_usage_error(cmd, "%s takes no value", o->name);
			*(bool *)field = true;
			continue;
		}
		if (eq)
			value = eq + 1;
		else if (i + 1 < argc)
			value = argv[++i];
		if (!value || !*value)
			return lynx_usage_error(cmd, "%s needs a value (%s)", o->name, o->arg);
		if (o->kind == LYNX_OPTION_NAME)
			*(const char **)field = value;
		else if (o->kind == LYNX_OPTION_UINT && parse_uint(value, (uint32_t *)field))
			return lynx_usage_error(cmd, "%s '%s' is not a positive integer", o->name,
			                        value);
		else if (o->kind == LYNX_OPTION_SIZE && lynx_size_parse(value, (uint64_t *)field))
			return lynx_usage_error(cmd, "%s '%s' is not a size (%s)", o->name, value,
			                        LYNX_SIZE_UNITS_HELP);
	}
	return 0;
}

void lynx_jobargs_help(FILE *out, const struct lynx_option *opts, size_t n)
{
	fprintf(out, "options:\n");
	for (size_t i = 0; i < n; i++) {
		char left[48];

		snprintf(left, sizeof(left), "%s%s%s", opts[i].name, opts[i].arg ? " " : "",
		         opts[i].arg ? opts[i].arg : "");
		fprintf(out, "  %-26s %s\n", left, opts[i].help);
	}
}

void lynx_jobargs_list_names(char *buf, size_t len, bool gpts)
{
	size_t used = 0;
	int n = gpts ? LYNX_MODEL_PRESET_COUNT : LYNX_CLUSTER_COUNT;

	buf[0] = '\0';
	for (int i = 0; i < n && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "",
		                         gpts ? lynx_preset_models[i].name
		                              : lynx_preset_clusters[i].name);
}

int lynx_jobargs_model(const struct lynx_job_args *a, const struct lynx_model_preset *gpt,
                       struct lynx_model_desc *m, char *why, size_t len)
{
	uint64_t global = (uint64_t)a->micro_batches * a->micro_batch * a->dp;

	lynx_preset_fill_model(gpt, m);
	m->layers = a->layers ? a->layers : m->layers;
	m->hidden = a->hidden ? a->hidden : m->hidden;
	m->heads = a->heads ? a->heads : m->heads;
	m->seq = a->seq ? a->seq : m->seq;
	m->vocab = a->vocab ? a->vocab : m->vocab;
	m->tp = a->tp;
	m->pp = a->pp;
	m->dp = a->dp;
	m->micro_batch = a->micro_batch;
	m->sp = a->sp;
	if (global > UINT32_MAX) {
		snprintf(why, len, "the global batch M·B·D = %llu is too large",
		         (unsigned long long)global);
		return -EINVAL;
	}
	m->global_batch = (uint32_t)global;
	return 0;
}
