/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Splitting one training iteration into forward and backward layer segments.
 *
 * Identical layers launch the same kernels in the same order: the forward of a
 * micro-batch through a stage is a run (period.h) of one motif repeated once per layer,
 * and its backward is a run of another motif. Within one iteration the layer motifs are
 * the atomic runs (no run of a shorter period covers half of them, which rules out
 * "forward + backward of a micro-batch" and multiples of a layer) that cover the most
 * tokens; runs with the same motif (period and signature multiset, so whatever rotation
 * a run starts at) form a class. Among the classes that cover at least a tenth of the
 * iteration, the forward is the first to start and the backward the next: a loop over the
 * parameters after the backward (an optimizer, a per-layer hash) repeats once per layer
 * too, but comes later. Each run of a class is one micro-batch, in launch order. NCCL
 * calls are tokens, so TP all-reduces belong to the motif and PP sends and receives
 * separate micro-batches; when that finds no layers, the collectives are left out and it
 * looks again (data parallelism all-reduces gradient buckets during the backward, at
 * places that follow the buckets, not the layers). Then each inner loop (a block of up to
 * 8 launches repeated back to back, once per sequence, chunk, head or expert, which can be
 * most of a layer's launches and would be taken for the layer) counts as one turn, with
 * the collectives and without them. Forward stacks that follow each other with no backward
 * stack and no pipeline send or receive between them are such a loop, not micro-batches,
 * and that look is refused. The thread is not part of a token, so a backward on another
 * thread is found the same way.
 *
 * Full recompute runs each layer's forward again just before its backward: the backward
 * motif then holds the forward motif, every layer reruns, and each backward segment
 * includes its rerun forward (the planner sees the layer's real backward cost). Megatron's
 * block recompute reruns the forward of a stage's first N layers only: a backward stack is
 * then L-N plain backward units, then N units that hold the forward unit first; its uniform
 * method reruns a group of N layers' forwards back to back before the group's backwards,
 * which looks like a short forward stack that is not apart from the next. No one motif
 * covers such a stack. When the stacks disagree or are not apart, each backward is read
 * unit by unit instead: a layer's unit is the forwards it reruns, if any, then the plain
 * backward unit; the forward stacks are the full-length runs of the forward unit that no
 * backward unit follows, and the layers whose forwards are rerun are marked.
 *
 * Limits: a stage with one layer has no repeat and is refused; a segment boundary can sit
 * a few tokens early when the code just before a stack ends like a layer (the embedding
 * before the first forward layer); a run's phase is where its repetition starts.
 */
#ifndef LYNX_PROF_SEGMENT_H
#define LYNX_PROF_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>

#include "event.h"
#include "period.h"

struct lynx_prof_segment {
	size_t first, end; /* trace indices, end exclusive */
};

struct lynx_prof_layers {
	size_t layers;                 /* this stage's layers */
	size_t microbatches;           /* forward (and backward) stacks in the iteration */
	size_t fwd_period, bwd_period; /* tokens per layer in each direction */
	bool *reruns; /* [layer]: its backward reruns its forward first (full or block recompute) */
	struct lynx_prof_segment *fwd, *bwd; /* [microbatch * layers + layer] */
};

/*
 * Segments iteration it of trace. Returns 0; -EINVAL with the reason in why when no two
 * layer motifs are found or they disagree (a different number of layers or micro-batches
 * forward and backward), or a layer reruns its forward in one micro-batch's backward and
 * not in another's; -ENOMEM.
 */
int lynx_prof_segment_layers(const struct lynx_prof_trace *trace,
                             const struct lynx_prof_iteration *it, struct lynx_prof_layers *out,
                             char *why, size_t why_len);
void lynx_prof_layers_free(struct lynx_prof_layers *layers);

#endif /* LYNX_PROF_SEGMENT_H */
