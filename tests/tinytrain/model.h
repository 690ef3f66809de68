/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One rank of tinytrain: its share of the model (pipeline stage, tensor-parallel shard),
 * its streams and communicators, and the per-layer forward and backward.
 *
 * Ownership: a rank owns everything here; device memory is allocated with cudaMallocAsync
 * on the compute stream, as PyTorch's cudaMallocAsync backend does, except what a real
 * trainer creates lazily with cudaMalloc (Adam's state with --lazy-optimizer, DDP's
 * bucket buffers).
 * Thread safety: one rank is driven by one host thread at a time (the backward may run
 * on a second thread, handed over and waited for).
 */
#ifndef TINYTRAIN_MODEL_H
#define TINYTRAIN_MODEL_H

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdint.h>

#include "kernels.h"
#include "tinytrain.h"

/* Sizes of one rank's share, real (the arithmetic) and virtual (the costs). */
struct tt_shape {
	int64_t tokens; /* micro-batch * seq */
	int64_t batch, seq, hidden, local_hidden, local_heads, head_dim, local_ffn, vocab;
};

/*
 * One layer's tensors in their order in the flat buffers, with their element counts for
 * a shape s: X(field, elements). The model (carving) and the gradient buckets (ddp.c)
 * both expand it.
 */
#define TT_LAYER_TENSORS(X, s)                      \
	X(ln1_gamma, (s)->hidden)                   \
	X(ln1_beta, (s)->hidden)                    \
	X(qkv, (s)->hidden * 3 * (s)->local_hidden) \
	X(proj, (s)->local_hidden *(s)->hidden)     \
	X(ln2_gamma, (s)->hidden)                   \
	X(ln2_beta, (s)->hidden)                    \
	X(fc1, (s)->hidden *(s)->local_ffn)         \
	X(fc2, (s)->local_ffn *(s)->hidden)

/* One layer's weights (or their gradients: the same layout, another base). */
struct tt_layer_weights {
#define TT_LAYER_FIELD(field, elements) float *field;
	TT_LAYER_TENSORS(TT_LAYER_FIELD, unused)
#undef TT_LAYER_FIELD
};

/* Embedding (first stage) and head (last stage) weights. */
struct tt_edge_weights {
	float *embedding;                   /* vocab x hidden */
	float *lnf_gamma, *lnf_beta, *head; /* head: hidden x vocab */
};

/* What a layer's forward keeps for its backward; NULL where the mode recomputes. */
struct tt_acts {
	float *x; /* the layer input: kept in every mode */
	float *ln1, *ln1_mean, *ln1_rstd;
	float *q, *k, *v;
	float *probs, *probs_dropped;
	uint8_t *attn_mask;
	float *merged;
	uint8_t *mask1;
	float *x2; /* input + attention branch: input of the second layer norm */
	float *ln2, *ln2_mean, *ln2_rstd;
	float *fc1, *gelu;
	uint8_t *mask2;
};

struct tt_ddp;
struct tt_fsdp;

struct tt_rank {
	const struct tt_config *cfg;
	int rank, stage, tp_rank, dp_rank, device;
	int local_layers;
	/* Model chunks (interleaved schedule; else 1) of chunk_layers layers each: local layer
	 * l is in chunk l / chunk_layers (tt_global_layer). */
	int chunks, chunk_layers;
	bool first_stage, last_stage;
	struct tt_shape real, virt;

	ncclComm_t world, tp_comm, dp_comm;
	cudaStream_t compute, comm;
	cudaEvent_t compute_ready, comm_done; /* the handshakes between the two streams */

	float *params, *grads;
	float *adam_m, *adam_v; /* NULL until the first step with --lazy-optimizer */
	float *loss_scale;      /* --grad-scaler's scale: NULL until its first step */
	int optimizer_steps;    /* taken, Adam's step count (GradScaler skips some) */
	/* --cuda-graph optimizer: Adam's step count on the device, and the step's graph, from
	 * the first optimizer step on (NULL before). */
	int *adam_step;
	cudaGraphExec_t optimizer_graph;
	int64_t param_count;
	struct tt_layer_weights *w, *g; /* [local_layers] */
	struct tt_edge_weights ew, eg;
	float *workspace;      /* the shared GEMM workspace, or NULL */
	float **embedding_ref; /* device memory holding ew.embedding */
	float *loss_sum;       /* device scalar: this rank's summed token losses */

	struct tt_acts *acts;       /* [local_layers * microbatches] */
	int64_t *saved_layer_bytes; /* [local_layers]: the most a forward kept (tt_acts_bytes) */
	struct tt_ddp *ddp;         /* the gradient buckets, or NULL (ddp.h) */
	struct tt_fsdp *fsdp;       /* the sharded layers, or NULL (fsdp.h) */
	bool evaluating;            /* in tt_eval: dropout off */
	int step;
};

/* Places the rank in the grid, joins its communicators (nccl_id: the world's
 * ncclUniqueId), creates its streams and builds its model; exits on failure. */
void tt_rank_setup(struct tt_rank *r, const struct tt_config *cfg, int rank, const void *nccl_id);
void tt_rank_teardown(struct tt_rank *r);

/* The model's index of local layer `layer`: Megatron's layout, where stage s holds layers
 * [s * L/P, (s + 1) * L/P), and with V chunks, chunk c holds the layers of virtual stage
 * c * P + s. */
int tt_global_layer(const struct tt_rank *r, int layer);

/* Copies device memory written on the compute stream to the host, once that stream is
 * done with it. */
void tt_copy_to_host(struct tt_rank *r, void *dst, const void *src, size_t bytes);

/* Reports a CUDA or NCCL failure and ends the rank: tinytrain is a test program. */
void tt_check_cuda(cudaError_t err, const char *what);
void tt_check_nccl(ncclResult_t res, const char *what);

/* The gradients exist from here on: with --grad-set-to-none the step's first backward
 * allocates them (zeroed), as autograd does after zero_grad(set_to_none=True); else they
 * always do. */
void tt_grads_ready(struct tt_rank *r);

/* Zeroed host memory for n elements of size bytes (at least one); exits when there is none,
 * as the rest of the set-up does. */
void *tt_calloc(size_t n, size_t size);

/* Device memory on the compute stream (stream-ordered). */
void *tt_alloc(struct tt_rank *r, size_t bytes);
void tt_free(struct tt_rank *r, void *ptr);

/* Points w's tensors into base, in TT_LAYER_TENSORS order (w may be NULL when base is);
 * returns the floats one layer takes. */
int64_t tt_carve_layer(float *base, const struct tt_shape *s, struct tt_layer_weights *w);

/* Builds the rank's weights (deterministic in the seed, identical to an unsharded model's
 * slice), gradients, optimizer state and workspace. */
void tt_model_init(struct tt_rank *r);

/* Forward of local layer `layer` for micro-batch `mb`: takes ownership of x (the input),
 * returns the output, and keeps in acts what the recompute mode says. */
float *tt_layer_forward(struct tt_rank *r, int layer, int mb, float *x);
/* The bytes of the buffers a holds: what a layer's forward keeps for its backward, its input
 * included. */
int64_t tt_acts_bytes(const struct tt_rank *r, const struct tt_acts *a);
/* After a forward under evaluation (no_grad): frees what it kept, its input included. */
void tt_layer_discard(struct tt_rank *r, int layer, int mb);
/* Backward: consumes dy (the output gradient) and the layer's acts; returns dx. */
float *tt_layer_backward(struct tt_rank *r, int layer, int mb, float *dy);

/* First stage: the embedding of micro-batch mb's tokens (the tokens stay for backward). */
float *tt_embed_forward(struct tt_rank *r, int mb, int **tokens_out);
void tt_embed_backward(struct tt_rank *r, const int *tokens, float *dx);
/* Last stage: final norm, head and loss (added to r->loss_sum); returns the gradient
 * of the loss with respect to x. Frees x. */
float *tt_head_forward_backward(struct tt_rank *r, int mb, float *x);

/* Last stage, under evaluation: final norm, head and the token losses of micro-batch mb,
 * their sum written to the device scalar loss_sum (not added to it). Frees x. */
void tt_head_eval(struct tt_rank *r, int mb, float *x, float *loss_sum);

/* Communication with PyTorch-style stream handshakes (comm.c). The buffer is used on the
 * communication stream; the compute stream waits for the result. */
/* fp16's loss scaler: every rank's found_inf becomes the largest of them (Megatron
 * reduces it over the model-parallel group, so that every stage skips the same steps; here
 * over all ranks, which gives the same verdict), on the communication stream. */
void tt_found_inf_allreduce(struct tt_rank *r, float *found_inf);
void tt_tp_allreduce(struct tt_rank *r, float *buf, int64_t count, uint64_t virtual_bytes);
/* Frees a buffer that the communication stream used: the recordStream-style free. */
void tt_free_after_comm(struct tt_rank *r, void *ptr);
/*
 * One pipeline exchange, as Megatron's p2p_communicate: any of send to the next stage,
 * send to the previous one, receive from the previous one, receive from the next one, in
 * one NCCL group (NULL where absent), in that order. The stages form a ring (the last
 * stage's next is the first), which only the interleaved schedule uses. Received buffers
 * are new (tokens x hidden). Send buffers are freed once the sends are done.
 */
void tt_p2p(struct tt_rank *r, float *send_next, float *send_prev, float **recv_prev,
            float **recv_next);
/* The virtual model's bytes per element (bf16). */
#define TT_VIRTUAL_BYTES 2
/* One layer's parameters at the virtual model's size, in bytes, on this rank (its tensor-
 * parallel part); and the embedding's and head's, where this stage has them. */
uint64_t tt_virtual_layer_bytes(const struct tt_rank *r);
uint64_t tt_virtual_edge_bytes(const struct tt_rank *r);
/* Sums the gradients over data-parallel ranks. */
void tt_dp_allreduce_grads(struct tt_rank *r);
/* Sums buf over data-parallel ranks on the communication stream, once the compute stream
 * reaches its current point; the compute stream does not wait (tt_compute_waits_for_comm). */
void tt_dp_allreduce_async(struct tt_rank *r, float *buf, int64_t count, uint64_t virtual_bytes);
/* The compute stream waits for everything queued on the communication stream so far. */
void tt_compute_waits_for_comm(struct tt_rank *r);
/* Sums a device scalar over data-parallel ranks. */
void tt_dp_allreduce_scalar(struct tt_rank *r, float *value);

/* The global micro-batch index of local micro-batch mb (data-parallel ranks take
 * consecutive ranges), and the tokens of a sequence (seq + 1 of them: input and target). */
int tt_global_microbatch(const struct tt_rank *r, int mb);
void tt_tokens(const struct tt_config *cfg, int step, int global_mb, int *tokens);

#endif /* TINYTRAIN_MODEL_H */
