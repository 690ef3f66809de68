/* SPDX-License-Identifier: Apache-2.0 */
/*
 * FSDP-style sharded layers (--fsdp), as torch's FullyShardedDataParallel runs a model
 * whose transformer blocks are each wrapped with FULL_SHARD:
 * - each data-parallel rank owns 1/D of every layer's flat parameters: the slice at
 *   dp_rank of the layer's part of r->params (and of r->grads and Adam's state);
 * - before a layer's forward the rank all-gathers the layer's parameters from every
 *   rank's slice into a new buffer, on a stream of its own (FSDP's unshard stream); the
 *   compute stream waits for it, and frees it when the forward ends (reshard after
 *   forward);
 * - the backward gathers again, one layer ahead (BACKWARD_PRE: the next layer's gather is
 *   issued before this layer's backward computes), and writes the layer's gradient into
 *   a new zeroed buffer, which the communication stream reduce-scatters, adds into this
 *   rank's slice of r->grads and frees, every micro-batch (no no_sync); the compute
 *   stream waits for none of it until the backward ends;
 * - the embedding and the head stay replicated: their gradients are all-reduced after the
 *   backward (tt_fsdp_finish).
 * The rank still holds the whole r->params (laid out and initialised as the unsharded
 * model's), but a layer's kernels only ever read a gathered buffer: the other ranks'
 * slices in r->params are never read, and stay as initialised (their gradients are zero
 * here, so Adam leaves them). Outside a gather, r->w[l] and r->g[l] are NULL.
 *
 * Without the switch, or with --dp 1 (nothing to shard), there is no FSDP state and
 * every function below does nothing.
 *
 * Ownership: the rank owns its state (r->fsdp). Thread safety: called by whichever thread
 * drives the rank at the time (the backward thread included), one at a time.
 */
#ifndef TINYTRAIN_FSDP_H
#define TINYTRAIN_FSDP_H

#include "model.h"

/* The sharded layers of a rank whose model is built; NULL when there are none. Exits on
 * failure (a layer that does not split evenly over the data-parallel ranks included), as
 * the rest of the set-up does. */
struct tt_fsdp *tt_fsdp_create(struct tt_rank *r);
void tt_fsdp_destroy(struct tt_fsdp *fsdp);

/* Around a layer's forward: the gather (r->w[layer] valid until the end), then the free. */
void tt_fsdp_forward_begin(struct tt_rank *r, int layer);
void tt_fsdp_forward_end(struct tt_rank *r, int layer);
/* Around a layer's backward: its gather (prefetched or now) and its zeroed gradient
 * buffer (r->g[layer]), the next layer's gather issued; then the reduce-scatter. */
void tt_fsdp_backward_begin(struct tt_rank *r, int layer);
void tt_fsdp_backward_end(struct tt_rank *r, int layer);

/* After the backward: the compute stream waits for every reduce-scatter, and the
 * replicated parameters' gradients are summed over data-parallel ranks. */
void tt_fsdp_finish(struct tt_rank *r);

#endif /* TINYTRAIN_FSDP_H */
