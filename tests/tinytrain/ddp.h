/* SPDX-License-Identifier: Apache-2.0 */
/*
 * DDP-style gradient buckets (--ddp-buckets KB), as torch DDP's Reducer does them: the
 * rank's gradient tensors, in reverse model order (head first, embedding last), are
 * grouped into buckets of about KB KiB. In the backward of the last micro-batch (the
 * others run under no_sync), as soon as every gradient of a bucket is final, the compute
 * stream copies them into the bucket's flat buffer and the communication stream, after
 * an event wait, sums it over data-parallel ranks, overlapping the rest of the backward.
 * Buckets launch in order, as the Reducer launches them. Each flat buffer is allocated
 * with cudaMalloc when its bucket first launches, inside the first backward, and kept.
 *
 * Without the switch, or with --dp 1 (nothing to reduce), there are no buckets: every
 * function below does nothing and tt_dp_allreduce_grads reduces (or not) as before.
 *
 * Ownership: the rank owns its buckets (r->ddp). Thread safety: called by whichever thread
 * drives the rank at the time (the backward thread included), one at a time.
 */
#ifndef TINYTRAIN_DDP_H
#define TINYTRAIN_DDP_H

#include "model.h"

/* The buckets of a rank whose model is built; NULL when there are none. Exits on
 * failure, as the rest of the set-up does. */
struct tt_ddp *tt_ddp_create(struct tt_rank *r);
void tt_ddp_destroy(struct tt_ddp *ddp);

/* In the backward of the last micro-batch: these gradients are final. Launches every
 * bucket that this completes, in bucket order. */
void tt_ddp_head_ready(struct tt_rank *r); /* final norm and head: the last stage */
void tt_ddp_layer_ready(struct tt_rank *r, int layer);
void tt_ddp_embedding_ready(struct tt_rank *r); /* the first stage */

/* After the backward: the compute stream waits for every bucket's all-reduce and copies
 * the sums back into r->grads. Every bucket must have launched. */
void tt_ddp_finish(struct tt_rank *r);

#endif /* TINYTRAIN_DDP_H */
