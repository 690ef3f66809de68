/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tinytrain: a GPT-style trainer written against the CUDA runtime and NCCL (plus simgpu's
 * kernel registration and memory statistics), used to judge Lynx on memory, time and
 * results. This header holds the configuration every module shares.
 */
#ifndef TINYTRAIN_H
#define TINYTRAIN_H

#include <stdbool.h>
#include <stdint.h>

enum tt_hazard {
#define TT_HAZARD(id, name, help) TT_HAZARD_##id,
#include "hazards.def"
#undef TT_HAZARD
	TT_HAZARD_COUNT
};

#define TT_RECOMPUTE_MODES(X) \
	X(NONE, "none")       \
	X(FULL, "full")       \
	X(SELECTIVE, "selective")

enum tt_recompute {
#define TT_RECOMPUTE_ENUM(id, name) TT_RECOMPUTE_##id,
	TT_RECOMPUTE_MODES(TT_RECOMPUTE_ENUM)
#undef TT_RECOMPUTE_ENUM
};

/* The shape of a GPT model: hidden size, heads, sequence length, micro-batch size, vocabulary. */
struct tt_dims {
	int hidden, heads, seq, batch, vocab;
};

struct tt_config {
	int nproc, pp, tp, dp;
	int layers, microbatches, steps;
	uint64_t seed;
	enum tt_recompute recompute;
	struct tt_dims real; /* what the arithmetic runs on */
	struct tt_dims virt; /* what the cost model and communication sizes describe */
	const char *virtual_name;
	float dropout, lr;
	bool hazard[TT_HAZARD_COUNT];
	/* Print, before the first step, the bytes each local layer's forward keeps for its
	 * backward: the ground truth for profilers (--report-saved). */
	bool report_saved;
};

/*
 * Parses the command line into cfg. Returns 0; 1 after printing --help to stdout; 2 after
 * printing a usage error (naming the problem) to stderr.
 */
int tt_parse_args(int argc, char **argv, struct tt_config *cfg);

const char *tt_hazard_name(enum tt_hazard hazard);
const char *tt_recompute_name(enum tt_recompute mode);

/* Runs one rank's training and writes one JSON line per step to out_fd. Returns 0 on
 * success; prints the failure to stderr and returns 1 otherwise. */
int tt_rank_run(const struct tt_config *cfg, int rank, const void *nccl_id, int out_fd);

#endif /* TINYTRAIN_H */
