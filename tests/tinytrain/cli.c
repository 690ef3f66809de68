/* SPDX-License-Identifier: Apache-2.0 */
/* tinytrain's command line: strict parsing and the checks that make a run meaningful. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tinytrain.h"

/* Virtual models: the shapes of Korthikanti et al. (s = 2048, v = 51200). */
#define TT_VIRTUAL_MODELS(X)                    \
	X("gpt-1.3b", 2048, 16, 2048, 8, 51200) \
	X("gpt-7b", 4096, 32, 2048, 4, 51200)   \
	X("gpt-22b", 6144, 64, 2048, 4, 51200)

struct virtual_model {
	const char *name;
	struct tt_dims dims;
};

static const struct virtual_model virtual_models[] = {
#define TT_VIRTUAL_ENTRY(name, h, a, s, b, v) {name, {h, a, s, b, v}},
        TT_VIRTUAL_MODELS(TT_VIRTUAL_ENTRY)
#undef TT_VIRTUAL_ENTRY
};

static const char *const hazard_names[] = {
#define TT_HAZARD(id, name, help) name,
#include "hazards.def"
#undef TT_HAZARD
};

static const char *const hazard_help[] = {
#define TT_HAZARD(id, name, help) help,
#include "hazards.def"
#undef TT_HAZARD
};

static const char *const recompute_names[] = {
#define TT_RECOMPUTE_NAME(id, name) name,
        TT_RECOMPUTE_MODES(TT_RECOMPUTE_NAME)
#undef TT_RECOMPUTE_NAME
};

const char *tt_hazard_name(enum tt_hazard hazard)
{
	return hazard_names[hazard];
}

const char *tt_recompute_name(enum tt_recompute mode)
{
	return recompute_names[mode];
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: tinytrain --nproc N --pp P --tp T --dp D --layers L --microbatches M\n"
	        "                 --steps S [--recompute none|full|selective]\n"
	        "                 [--seq S --batch B]\n"
	        "                 [--virtual-model gpt-1.3b|gpt-7b|gpt-22b]\n"
	        "                 [--virtual-hidden H --virtual-heads A --virtual-seq S "
	        "--virtual-batch B]\n"
	        "                 [--seed K] [--no-hazard NAME]... [--report-saved]\n"
	        "\n"
	        "Trains a GPT-style model on simgpu with N = P*T*D ranks (pipeline, tensor and\n"
	        "data parallel), printing one JSON line per step and rank, ordered by step then\n"
	        "rank: step, rank, loss (last pipeline stage, reduced over data parallel; null\n"
	        "elsewhere), grad_hash, peak_bytes, step_time_ns (virtual). --report-saved first\n"
	        "prints a line per rank with step -1 and saved_layer_bytes: the bytes each local\n"
	        "layer's forward keeps for its backward (its input included), the most over\n"
	        "micro-batches.\n"
	        "\n"
	        "Real dimensions (the arithmetic): hidden 64, 8 heads, sequence 16 (--seq),\n"
	        "micro-batch 2 (--batch), vocabulary 128: longer sequences and larger batches\n"
	        "make activations a larger share of memory. Virtual dimensions set the costs\n"
	        "and communication sizes; default gpt-1.3b.\n"
	        "\n"
	        "Hazards (all on; --no-hazard NAME switches one off):\n");
	for (int i = 0; i < TT_HAZARD_COUNT; i++)
		fprintf(f, "  %-18s %s\n", hazard_names[i], hazard_help[i]);
}

/* Prints "tinytrain: <problem>" and the way to help; returns the usage exit code, 2. */
__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tinytrain: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n(see tinytrain --help)\n");
	return 2;
}

/* A whole positive decimal int, or -1. */
static int parse_positive(const char *text)
{
	char *end;
	errno = 0;
	long v = strtol(text, &end, 10);

	if (errno || end == text || *end || v < 1 || v > 1 << 20)
		return -1;
	return (int)v;
}

static int lookup(const char *const *names, int count, const char *name)
{
	for (int i = 0; i < count; i++)
		if (!strcmp(names[i], name))
			return i;
	return -1;
}

enum {
	OPT_NPROC = 256,
	OPT_PP,
	OPT_TP,
	OPT_DP,
	OPT_LAYERS,
	OPT_MICROBATCHES,
	OPT_STEPS,
	OPT_RECOMPUTE,
	OPT_SEQ,
	OPT_BATCH,
	OPT_VIRTUAL_MODEL,
	OPT_VIRTUAL_HIDDEN,
	OPT_VIRTUAL_HEADS,
	OPT_VIRTUAL_SEQ,
	OPT_VIRTUAL_BATCH,
	OPT_SEED,
	OPT_NO_HAZARD,
	OPT_REPORT_SAVED,
	OPT_HELP,
};

static const struct option long_options[] = {
        {"nproc", required_argument, NULL, OPT_NPROC},
        {"pp", required_argument, NULL, OPT_PP},
        {"tp", required_argument, NULL, OPT_TP},
        {"dp", required_argument, NULL, OPT_DP},
        {"layers", required_argument, NULL, OPT_LAYERS},
        {"microbatches", required_argument, NULL, OPT_MICROBATCHES},
        {"steps", required_argument, NULL, OPT_STEPS},
        {"recompute", required_argument, NULL, OPT_RECOMPUTE},
        {"seq", required_argument, NULL, OPT_SEQ},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"virtual-model", required_argument, NULL, OPT_VIRTUAL_MODEL},
        {"virtual-hidden", required_argument, NULL, OPT_VIRTUAL_HIDDEN},
        {"virtual-heads", required_argument, NULL, OPT_VIRTUAL_HEADS},
        {"virtual-seq", required_argument, NULL, OPT_VIRTUAL_SEQ},
        {"virtual-batch", required_argument, NULL, OPT_VIRTUAL_BATCH},
        {"seed", required_argument, NULL, OPT_SEED},
        {"no-hazard", required_argument, NULL, OPT_NO_HAZARD},
        {"report-saved", no_argument, NULL, OPT_REPORT_SAVED},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
};

static void set_defaults(struct tt_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->pp = cfg->tp = cfg->dp = 1;
	cfg->layers = 2;
	cfg->microbatches = 1;
	cfg->steps = 1;
	cfg->seed = 1234;
	cfg->recompute = TT_RECOMPUTE_NONE;
	cfg->real = (struct tt_dims){64, 8, 16, 2, 128};
	cfg->virt = virtual_models[0].dims;
	cfg->virtual_name = virtual_models[0].name;
	cfg->dropout = 0.1f;
	cfg->lr = 1e-3f;
	for (int i = 0; i < TT_HAZARD_COUNT; i++)
		cfg->hazard[i] = true;
}

/* Checks what no single option can: the parallel layout against the model. */
static int check_layout(const struct tt_config *cfg)
{
	if (cfg->nproc != cfg->pp * cfg->tp * cfg->dp)
		return usage_error("--nproc %d is not pp*tp*dp = %d*%d*%d = %d", cfg->nproc,
		                   cfg->pp, cfg->tp, cfg->dp, cfg->pp * cfg->tp * cfg->dp);
	if (cfg->layers % cfg->pp)
		return usage_error("--layers %d is not divisible by --pp %d", cfg->layers, cfg->pp);
	if (cfg->real.heads % cfg->tp || cfg->virt.heads % cfg->tp)
		return usage_error("--tp %d must divide the heads (%d real, %d virtual)", cfg->tp,
		                   cfg->real.heads, cfg->virt.heads);
	if (cfg->virt.hidden % cfg->virt.heads)
		return usage_error("virtual hidden %d is not divisible by its %d heads",
		                   cfg->virt.hidden, cfg->virt.heads);
	return 0;
}

int tt_parse_args(int argc, char **argv, struct tt_config *cfg)
{
	int opt, value;

	set_defaults(cfg);
	opterr = 0;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", long_options, NULL)) != -1) {
		int *positive = NULL;

		switch (opt) {
		case OPT_NPROC:
			positive = &cfg->nproc;
			break;
		case OPT_PP:
			positive = &cfg->pp;
			break;
		case OPT_TP:
			positive = &cfg->tp;
			break;
		case OPT_DP:
			positive = &cfg->dp;
			break;
		case OPT_LAYERS:
			positive = &cfg->layers;
			break;
		case OPT_MICROBATCHES:
			positive = &cfg->microbatches;
			break;
		case OPT_STEPS:
			positive = &cfg->steps;
			break;
		case OPT_SEQ:
			positive = &cfg->real.seq;
			break;
		case OPT_BATCH:
			positive = &cfg->real.batch;
			break;
		case OPT_VIRTUAL_HIDDEN:
			positive = &cfg->virt.hidden;
			break;
		case OPT_VIRTUAL_HEADS:
			positive = &cfg->virt.heads;
			break;
		case OPT_VIRTUAL_SEQ:
			positive = &cfg->virt.seq;
			break;
		case OPT_VIRTUAL_BATCH:
			positive = &cfg->virt.batch;
			break;
		case OPT_SEED:
			positive = &value;
			break;
		case OPT_RECOMPUTE:
			value = lookup(recompute_names, 3, optarg);
			if (value < 0)
				return usage_error("unknown --recompute '%s' (none|full|selective)",
				                   optarg);
			cfg->recompute = (enum tt_recompute)value;
			continue;
		case OPT_VIRTUAL_MODEL:
			value = -1;
			for (size_t i = 0; i < sizeof(virtual_models) / sizeof(virtual_models[0]);
			     i++)
				if (!strcmp(virtual_models[i].name, optarg))
					value = (int)i;
			if (value < 0)
				return usage_error(
				        "unknown --virtual-model '%s' (gpt-1.3b|gpt-7b|gpt-22b)",
				        optarg);
			cfg->virt = virtual_models[value].dims;
			cfg->virtual_name = virtual_models[value].name;
			continue;
		case OPT_NO_HAZARD:
			value = lookup(hazard_names, TT_HAZARD_COUNT, optarg);
			if (value < 0)
				return usage_error("unknown hazard '%s' (see --help)", optarg);
			cfg->hazard[value] = false;
			continue;
		case OPT_REPORT_SAVED:
			cfg->report_saved = true;
			continue;
		case OPT_HELP:
			usage(stdout);
			return 1;
		default:
			return usage_error("unknown or incomplete option '%s'", argv[optind - 1]);
		}
		if ((*positive = parse_positive(optarg)) < 0)
			return usage_error("'%s' is not a positive integer", optarg);
		if (opt == OPT_SEED)
			cfg->seed = (uint64_t)value;
		else if (opt >= OPT_VIRTUAL_HIDDEN && opt <= OPT_VIRTUAL_BATCH)
			cfg->virtual_name = "custom";
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (!cfg->nproc)
		cfg->nproc = cfg->pp * cfg->tp * cfg->dp;
	return check_layout(cfg);
}
