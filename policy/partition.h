/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Recompute-aware pipeline partitioning: which contiguous layers each of the p stages holds,
 * chosen by a dynamic programme over splits that minimises the predicted 1F1B iteration time,
 * each candidate stage priced by a planner's plan for it (HEU by default), so a stage that
 * must recompute more to fit its in-flight micro-batches counts as slower.
 *
 * The cost model (partition.c has the details). Stage s holding n layers costs, per
 * micro-batch, cycle(s, n) = its forward and backward (layers, embedding on the first stage,
 * head and loss on the last), the recompute the plan puts on its compute stream, and its
 * pipeline receives; tail(s, n) = its gradient reduction and optimizer step. For a split
 * n_0..n_{p-1}, with m micro-batches:
 *   T = sum_s cycle(s, n_s) + (m - 1) · max_s cycle(s, n_s) + tail(0, n_0)
 * which is (m + p - 1) · cycle for identical stages, the 1F1B makespan; the first stage runs
 * the pipeline's last backward, so its tail ends the iteration. A candidate stage whose
 * planned peak exceeds the budget is not used.
 *
 * Ownership: lynx_partition_find() allocates; lynx_partition_free() releases. A result is
 * read-only afterwards: any number of threads may read it.
 */
#ifndef LYNX_POLICY_PARTITION_H
#define LYNX_POLICY_PARTITION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "planner.h"
#include "presets.h"
#include "problem.h"

/* What the planner's plan for one candidate stage costs. */
struct lynx_partition_cost {
	bool valid;          /* the stage could be built and planned */
	bool fits;           /* its planned peak is within the budget */
	double cycle_s;      /* per micro-batch: forward, backward, recompute, receives */
	double recompute_s;  /* the part of cycle_s that is recompute on the compute stream */
	double tail_s;       /* gradient reduction and optimizer step */
	uint64_t peak_bytes; /* the checker's peak of the stage under the plan */
};

/* A split: layers[s] for each stage, with its predicted and its checked iteration time. */
struct lynx_partition_split {
	uint32_t *layers;   /* n_stages entries; NULL when there is none */
	double predicted_s; /* the cost model's T; INFINITY when no stage set fits */
	double checked_s;   /* the planner's plan of the whole job, replayed by the checker */
	bool checked;       /* checked_s and checked_fits were measured */
	bool checked_fits;
};

struct lynx_partition {
	uint32_t n_stages, n_layers, micro_batches;
	uint64_t budget_bytes;
	/* The answer: the DP's split, unless the checker found it slower than uniform. */
	struct lynx_partition_split best;
	struct lynx_partition_split dp;      /* the DP's optimum over all contiguous splits */
	struct lynx_partition_split uniform; /* L / p each (remainder to the first stages) */
	/* The best split Megatron's --decoder-first/last-pipeline-num-layers can express: even
	 * middle stages. */
	struct lynx_partition_split megatron;
	bool fits;            /* best: every stage's planned peak within the budget */
	bool kept_uniform;    /* the checker found the DP's split slower, so best is uniform */
	uint32_t evaluations; /* candidate stages planned */
	double search_time_s; /* all of it, checks included */
	struct lynx_partition_cost *costs; /* [s · (n_layers + 1) + n] */
	char planner[32];
};

/*
 * Finds the split of job m (its pp stages, any L >= p) on cluster c for planner pl (NULL:
 * HEU), with opt's budget and optimizer (opt->stage_layers is ignored; opt may be NULL).
 * Plans p · (L - p + 1) candidate stages, each as a small job of its own; O(p² · L³)
 * arithmetic for the DP besides. Returns 0 (check out->fits: no split may fit); -EINVAL with
 * one sentence in why when m is invalid apart from L % p; -ENOMEM. On failure out holds
 * nothing to free.
 */
int lynx_partition_find(const struct lynx_model_desc *m, const struct lynx_cluster *c,
                        const struct lynx_problem_options *opt, const struct lynx_planner *pl,
                        struct lynx_partition *out, char *why, size_t len);

void lynx_partition_free(struct lynx_partition *pt);

/* The cost model's T for split layers (n_stages entries adding up to n_layers), from the
 * candidates pt planned; INFINITY when a stage does not fit or the counts are wrong. */
double lynx_partition_predict(const struct lynx_partition *pt, const uint32_t *layers);

/*
 * Writes Megatron-LM arguments that reproduce split layers into buf (truncated to len):
 * "--pipeline-model-parallel-size P" and, when the split is not uniform,
 * "--decoder-first-pipeline-num-layers N --decoder-last-pipeline-num-layers M" (Megatron
 * spreads the rest evenly over the middle stages), or, when the middle stages are uneven,
 * "--pipeline-model-parallel-layout" with a layout string ("Et*9|t*10|t*10|t*11,L": E the
 * embedding, t a decoder layer, L the loss). Returns true when the first/last flags express
 * the split, false when only the layout flag does.
 */
bool lynx_partition_megatron_flags(const uint32_t *layers, uint32_t n_stages, char *buf,
                                   size_t len);

#endif /* LYNX_POLICY_PARTITION_H */
