/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The command line of a model's job built from a preset or a Hugging Face config.json,
 * shared by `lynx sim` and `lynx plan`: one option table type and its strict parser
 * (positive integers, sizes with K/M/G/T), the job's options declared once
 * (LYNX_JOB_OPTIONS), and the description they make.
 */
#ifndef LYNX_JOBARGS_H
#define LYNX_JOBARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "model.h"
#include "presets.h"
#include "problem.h"

/* What the job options set; a command's own arguments struct embeds it. */
struct lynx_job_args {
	const char *model, *cluster;
	const char *hf_config; /* a config.json to read instead of a preset */
	const char *attention; /* "flash" or "unfused"; NULL: the model's */
	uint32_t tp, pp, dp, cp, vp, micro_batch, micro_batches;
	uint64_t budget;
	bool sp, distributed_optimizer;
	/* Overrides of the preset's or config's shape; 0: keep. */
	uint32_t layers, hidden, heads, seq, vocab, kv_heads, ffn;
	uint32_t time_limit; /* seconds for a searching planner's whole search; 0: theirs */
	/* How much slower a rebuild, and the transfer it overlaps, run meanwhile: percentages
	 * ("19" or "19%"); NULL: the cluster's (lynx_jobargs_interference()). */
	const char *contention, *contention_comm;
	/* The offload planner's share of activations (Kuaishou's α), a percentage; NULL: the
	 * least share that fits (lynx_jobargs_offload_share()). */
	const char *offload_share;
};

/* The defaults: t = p = 0 (not given: 1 once described, or chosen by `lynx sim --sweep`),
 * d = 1, micro-batch 1, micro-batches 0 (4·P once described). */
#define LYNX_JOB_ARGS_INIT                \
	{                                 \
		.dp = 1, .micro_batch = 1 \
	}

enum lynx_option_kind { LYNX_OPTION_FLAG, LYNX_OPTION_NAME, LYNX_OPTION_UINT, LYNX_OPTION_SIZE };

/* One option: its field is at `offset` in the command's arguments struct. */
struct lynx_option {
	const char *name, *arg; /* arg: NULL for a flag */
	enum lynx_option_kind kind;
	size_t offset;
	const char *help;
};

#define LYNX_OPTION(type, opt, arg, kind, field, help)                    \
	{                                                                 \
		opt, arg, LYNX_OPTION_##kind, offsetof(type, field), help \
	}

/* The job's options, for a command whose arguments struct `type` embeds them as `member`. */
#define LYNX_JOB_OPTIONS(type, member)                                                             \
	LYNX_OPTION(type, "--cluster", "NAME", NAME, member.cluster, "cluster preset (required)"), \
	        LYNX_OPTION(                                                                       \
	                type, "--hf-config", "FILE", NAME, member.hf_config,                       \
	                "a Hugging Face config.json instead of --model (llama, gpt2, gpt_neox)"),  \
	        LYNX_OPTION(type, "--tp", "T", UINT, member.tp,                                    \
	                    "tensor-parallel size (default 1)"),                                   \
	        LYNX_OPTION(type, "--pp", "P", UINT, member.pp, "pipeline stages (default 1)"),    \
	        LYNX_OPTION(type, "--dp", "D", UINT, member.dp, "data-parallel size (default 1)"), \
	        LYNX_OPTION(type, "--cp", "C", UINT, member.cp,                                    \
	                    "context-parallel size (default 1; needs flash attention)"),           \
	        LYNX_OPTION(type, "--vp", "V", UINT, member.vp,                                    \
	                    "virtual pipeline stages per rank: interleaved 1F1B (default 1)"),     \
	        LYNX_OPTION(type, "--microbatches", "M", UINT, member.micro_batches,               \
	                    "micro-batches per pipeline and iteration (default 4·P)"),             \
	        LYNX_OPTION(type, "--micro-batch", "B", UINT, member.micro_batch,                  \
	                    "sequences per micro-batch (default 1)"),                              \
	        LYNX_OPTION(type, "--budget", "BYTES", SIZE, member.budget,                        \
	                    "memory budget per GPU: a size (512M, 4.5GiB, 70GB); 0: the GPU's"),   \
	        LYNX_OPTION(type, "--sp", NULL, FLAG, member.sp, "Megatron sequence parallelism"), \
	        LYNX_OPTION(type, "--distributed-optimizer", NULL, FLAG,                           \
	                    member.distributed_optimizer,                                          \
	                    "optimizer states sharded over the data-parallel ranks"),              \
	        LYNX_OPTION(type, "--layers", "L", UINT, member.layers,                            \
	                    "override the preset's layers"),                                       \
	        LYNX_OPTION(type, "--hidden", "H", UINT, member.hidden,                            \
	                    "override the preset's hidden size"),                                  \
	        LYNX_OPTION(type, "--heads", "A", UINT, member.heads,                              \
	                    "override the preset's attention heads"),                              \
	        LYNX_OPTION(type, "--seq", "S", UINT, member.seq,                                  \
	                    "override the preset's sequence length"),                              \
	        LYNX_OPTION(type, "--vocab", "V", UINT, member.vocab,                              \
	                    "override the preset's vocabulary"),                                   \
	        LYNX_OPTION(type, "--kv-heads", "K", UINT, member.kv_heads,                        \
	                    "override the key/value heads (grouped-query attention)"),             \
	        LYNX_OPTION(type, "--ffn", "F", UINT, member.ffn,                                  \
	                    "override the MLP's inner width"),                                     \
	        LYNX_OPTION(type, "--attention", "KIND", NAME, member.attention,                   \
	                    "flash or unfused (default: the model's; Llama and configs flash)"),   \
	        LYNX_OPTION(type, "--time-limit", "SECONDS", UINT, member.time_limit,              \
	                    "wall time for the whole search of opt and checkmate, and for "        \
	                    "mixed's offloads after HEU (default 60)"),                            \
	        LYNX_OPTION(type, "--contention", "PCT", NAME, member.contention,                  \
	                    "how much slower a rebuild runs while it overlaps a collective or a "  \
	                    "pipeline transfer, 0-100% (default: the cluster's, 19%)"),            \
	        LYNX_OPTION(type, "--contention-comm", "PCT", NAME, member.contention_comm,        \
	                    "how much slower that transfer runs meanwhile, 0-100% (default 0%)"),  \
	        LYNX_OPTION(type, "--offload-share", "PCT", NAME, member.offload_share,            \
	                    "offload this share of activations, 0-100% (Kuaishou's alpha), "       \
	                    "instead of the least that fits")

/*
 * Parses argv[1..] into the struct at base with options opts[0..n). An argument that is not
 * an option goes to *positional (at most one; NULL: none allowed). Returns 0; 1 for -h or
 * --help; LYNX_EXIT_USAGE after a message naming command cmd.
 */
int lynx_jobargs_parse(const char *cmd, const struct lynx_option *opts, size_t n, int argc,
                       char **argv, void *base, const char **positional);

/* The options' help, one line each. */
void lynx_jobargs_help(FILE *out, const struct lynx_option *opts, size_t n);

/* The known preset names, comma-separated, into buf (GPT presets if gpts, else clusters). */
void lynx_jobargs_list_names(char *buf, size_t len, bool gpts);

/*
 * Fills m from preset (or, when a->hf_config is set, from that file; preset is then unused)
 * and a: the overrides, the attention kind, parallelism (t and p 1 when not given),
 * micro-batch, sequence parallelism and global batch M·B·D (M 4·P when not given). name gets what
 * to call the model in messages and reports: the preset's name, or the config's (hf_config.h).
 * Returns 0, or -EINVAL with a sentence in why: an unreadable or refused config file, an unknown
 * attention kind, a global batch that does not fit 32 bits. Validation is lynx_model_validate()'s.
 */
int lynx_jobargs_model(const struct lynx_job_args *a, const struct lynx_model_preset *preset,
                       struct lynx_model_desc *m, char *name, size_t name_len, char *why,
                       size_t len);

/*
 * The contention planning assumes (presets.h's struct lynx_interference): base (the cluster's,
 * or LYNX_INTERFERENCE_DEFAULT for profiles) with a->contention and a->contention_comm applied,
 * each a percentage from 0 to 100 as LYNX_CONTENTION takes it (two decimals at most), "%"
 * optional. Returns 0, or -EINVAL with a sentence in why naming the option.
 */
int lynx_jobargs_interference(const struct lynx_job_args *a, struct lynx_interference base,
                              struct lynx_interference *out, char *why, size_t len);

/* a->offload_share into opt's offload_share_set and offload_share_bp (a percentage as
 * --contention takes it). Returns 0, or -EINVAL with a sentence in why. */
int lynx_jobargs_offload_share(const struct lynx_job_args *a, struct lynx_problem_options *opt,
                               char *why, size_t len);

#endif /* LYNX_JOBARGS_H */
