/* SPDX-License-Identifier: Apache-2.0 */
/* One training step of one rank (schedule.c) and the thread that runs its backward. */
#ifndef TINYTRAIN_SCHEDULE_H
#define TINYTRAIN_SCHEDULE_H

#include "model.h"

struct tt_step_result {
	bool has_loss; /* the last pipeline stage reports the loss */
	float loss;    /* mean token loss over the global batch */
	uint64_t grad_hash;
};

/* A second host thread that runs the backward passes; NULL if it cannot start. */
struct tt_worker;
struct tt_worker *tt_worker_start(int device);
void tt_worker_stop(struct tt_worker *w);

/* Zeroes the gradients, runs every micro-batch forward and backward through the
 * pipeline and reduces the gradients over data-parallel ranks. Returns the mean token
 * loss of the global batch on the last stage (0 elsewhere). No update. */
float tt_forward_backward(struct tt_rank *r, struct tt_worker *w);

/* Runs one step: pipeline (forward and backward of every micro-batch), data-parallel
 * gradient reduction, loss, gradient hash (before the update), Adam. With w NULL the
 * backward runs on the calling thread. */
void tt_step(struct tt_rank *r, struct tt_worker *w, struct tt_step_result *out);

/*
 * nanoGPT's estimate_loss(), as --eval-every runs it before a step: --eval-iters forward
 * passes under model.eval() and no_grad (dropout off, nothing kept for a backward), each on
 * local micro-batch k's tokens of this step, each loss read by the host (loss.item()).
 * Returns their mean token loss. A rank that holds the whole model (--pp 1) only.
 */
float tt_eval(struct tt_rank *r);

#endif /* TINYTRAIN_SCHEDULE_H */
