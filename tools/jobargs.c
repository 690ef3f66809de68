/* SPDX-License-Identifier: Apache-2.0 */
/* The shared command line of a model's job: its parser and the description it makes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "hf_config.h"
#include "jobargs.h"
#include "lynx.h"
#include "regular_file.h"

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

/* A config.json is a few KiB; anything past this is not one. */
#define HF_CONFIG_MAX_BYTES (1u << 20)

/* Reads the config at path into m's shape and architecture, and its name. */
static int read_hf_config(const char *path, struct lynx_model_desc *m, char *name, size_t name_len,
                          char *why, size_t len)
{
	char *text = NULL, reason[192] = "";
	size_t size = 0;
	int err = lynx_regular_file_read(path, HF_CONFIG_MAX_BYTES, &text, &size, reason,
	                                 sizeof(reason));

	if (err) {
		snprintf(why, len, "cannot read the config %s: %s", path,
		         reason[0] ? reason : strerror(-err));
		return -EINVAL;
	}
	err = lynx_hf_config_parse(text, size, m, name, name_len, reason, sizeof(reason));
	free(text);
	if (err)
		snprintf(why, len, "%s: %s", path, reason);
	return err ? -EINVAL : 0;
}

int lynx_jobargs_model(const struct lynx_job_args *a, const struct lynx_model_preset *preset,
                       struct lynx_model_desc *m, char *name, size_t name_len, char *why,
                       size_t len)
{
	uint32_t pp = a->pp ? a->pp : 1;
	uint64_t global = (uint64_t)(a->micro_batches ? a->micro_batches : 4ull * pp) *
	                  a->micro_batch * a->dp;

	if (a->hf_config) {
		*m = (struct lynx_model_desc){0};
		if (read_hf_config(a->hf_config, m, name, name_len, why, len))
			return -EINVAL;
	} else {
		lynx_preset_fill_model(preset, m);
		snprintf(name, name_len, "%s", preset->name);
	}
	m->layers = a->layers ? a->layers : m->layers;
	m->hidden = a->hidden ? a->hidden : m->hidden;
	m->heads = a->heads ? a->heads : m->heads;
	m->seq = a->seq ? a->seq : m->seq;
	m->vocab = a->vocab ? a->vocab : m->vocab;
	m->arch.kv_heads = a->kv_heads ? a->kv_heads : m->arch.kv_heads;
	m->arch.ffn = a->ffn ? a->ffn : m->arch.ffn;
	if (a->attention) {
		m->arch.attention = lynx_model_find_attention(a->attention);
		if (m->arch.attention == LYNX_ATTENTION_COUNT) {
			snprintf(why, len, "--attention '%s' is not flash or unfused",
			         a->attention);
			return -EINVAL;
		}
	}
	m->tp = a->tp ? a->tp : 1;
	m->pp = pp;
	m->dp = a->dp;
	m->cp = a->cp ? a->cp : 1;
	m->vp = a->vp ? a->vp : 1;
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

/* A percentage as the PERCENT settings take it (lynx_percent_parse()), "%" optional here, in
 * hundredths of a percent (19% -> 1900). */
static int parse_percent(const char *opt, const char *text, uint32_t *bp, char *why, size_t len)
{
	char with_sign[32];

	snprintf(with_sign, sizeof(with_sign), "%s%%", text);
	if (lynx_percent_parse(text, bp) &&
	    (strchr(text, '%') || strlen(text) >= sizeof(with_sign) - 1 ||
	     lynx_percent_parse(with_sign, bp))) {
		snprintf(why, len, "%s '%s' is not a percentage from 0 to 100", opt, text);
		return -EINVAL;
	}
	return 0;
}

/* A percentage (parse_percent()) as a slowdown factor (19% -> 1.19). */
static int parse_contention(const char *opt, const char *text, double *factor, char *why,
                            size_t len)
{
	uint32_t bp;

	if (parse_percent(opt, text, &bp, why, len))
		return -EINVAL;
	*factor = 1.0 + bp / 10000.0;
	return 0;
}

int lynx_jobargs_offload_share(const struct lynx_job_args *a, struct lynx_problem_options *opt,
                               char *why, size_t len)
{
	if (!a->offload_share)
		return 0;
	if (parse_percent("--offload-share", a->offload_share, &opt->offload_share_bp, why, len))
		return -EINVAL;
	opt->offload_share_set = true;
	return 0;
}

int lynx_jobargs_interference(const struct lynx_job_args *a, struct lynx_interference base,
                              struct lynx_interference *out, char *why, size_t len)
{
	*out = base;
	if (a->contention &&
	    parse_contention("--contention", a->contention, &out->compute, why, len))
		return -EINVAL;
	if (a->contention_comm &&
	    parse_contention("--contention-comm", a->contention_comm, &out->comm, why, len))
		return -EINVAL;
	return 0;
}
