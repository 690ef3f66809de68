/* SPDX-License-Identifier: Apache-2.0 */
/* FSDP-style sharded layers: gathers, gradient reduce-scatters, the replicated rest. */
#include <stdio.h>
#include <stdlib.h>

#include "fsdp.h"
#include "simgpu.h"

/* One layer's gather: the buffer and the event the compute stream waits on. */
struct fsdp_gather {
	float *full; /* NULL when not gathered */
	cudaEvent_t done;
};

/* r->params (and r->grads) hold each local layer's flat parameters in turn, then the
 * replicated embedding and head. */
struct tt_fsdp {
	cudaStream_t unshard;        /* the all-gathers' stream */
	int64_t layer_elements;      /* one layer's flat parameters */
	int64_t shard_elements;      /* layer_elements / dp */
	uint64_t virtual_shard;      /* a shard's virtual bytes: what each rank sends */
	struct fsdp_gather *gathers; /* [local_layers] */
	float **layer_grad_full;     /* [local_layers]: the backward's gradient buffer, or NULL */
	int layers;                  /* the rank's local layers */
};

/* Where layer's parameters start in base (r->params or r->grads); the replicated rest
 * starts at layer f->layers. */
static float *layer_part(const struct tt_fsdp *f, float *base, int layer)
{
	return base + (int64_t)layer * f->layer_elements;
}

struct tt_fsdp *tt_fsdp_create(struct tt_rank *r)
{
	struct tt_fsdp *f;
	int64_t per_layer;

	if (!r->cfg->fsdp || r->cfg->dp == 1)
		return NULL;
	per_layer = tt_carve_layer(NULL, &r->real, NULL);
	if (per_layer % r->cfg->dp) {
		fprintf(stderr,
		        "tinytrain: --fsdp: a layer's %lld parameters do not split evenly over "
		        "--dp %d ranks\n",
		        (long long)per_layer, r->cfg->dp);
		exit(1);
	}
	f = tt_calloc(1, sizeof(*f));
	f->layers = r->local_layers;
	f->layer_elements = per_layer;
	f->shard_elements = per_layer / r->cfg->dp;
	f->virtual_shard = tt_virtual_layer_bytes(r) / (uint64_t)r->cfg->dp;
	f->layer_grad_full = tt_calloc((size_t)r->local_layers, sizeof(*f->layer_grad_full));
	f->gathers = tt_calloc((size_t)r->local_layers, sizeof(*f->gathers));
	tt_check_cuda(cudaStreamCreateWithFlags(&f->unshard, cudaStreamNonBlocking),
	              "cudaStreamCreateWithFlags");
	for (int l = 0; l < r->local_layers; l++) {
		tt_check_cuda(cudaEventCreateWithFlags(&f->gathers[l].done, cudaEventDisableTiming),
		              "cudaEventCreateWithFlags");
		/* Only a gathered buffer holds a layer's parameters from here on. */
		r->w[l] = (struct tt_layer_weights){0};
		r->g[l] = (struct tt_layer_weights){0};
	}
	return f;
}

void tt_fsdp_destroy(struct tt_fsdp *f)
{
	if (!f)
		return;
	cudaStreamDestroy(f->unshard);
	for (int l = 0; l < f->layers; l++)
		cudaEventDestroy(f->gathers[l].done);
	free(f->layer_grad_full);
	free(f->gathers);
	free(f);
}

/* Issues layer's all-gather on the unshard stream, into a buffer allocated now, once the
 * compute stream reaches its current point (the buffer's allocation, and the optimizer's
 * update of this rank's slice). */
static void gather(struct tt_rank *r, int layer)
{
	struct tt_fsdp *f = r->fsdp;
	struct fsdp_gather *g = &f->gathers[layer];
	const float *shard = layer_part(f, r->params, layer) + r->dp_rank * f->shard_elements;

	if (g->full)
		return;
	g->full = tt_alloc(r, (size_t)f->layer_elements * sizeof(float));
	tt_check_cuda(cudaEventRecord(r->compute_ready, r->compute), "cudaEventRecord");
	tt_check_cuda(cudaStreamWaitEvent(f->unshard, r->compute_ready, 0), "cudaStreamWaitEvent");
	simgpu_nccl_next_virtual_bytes(f->virtual_shard);
	tt_check_nccl(ncclAllGather(shard, g->full, (size_t)f->shard_elements, ncclFloat,
	                            r->dp_comm, f->unshard),
	              "ncclAllGather");
	tt_check_cuda(cudaEventRecord(g->done, f->unshard), "cudaEventRecord");
}

/* The compute stream waits for layer's gather; r->w[layer] names the gathered buffer. */
static void use_gather(struct tt_rank *r, int layer)
{
	struct fsdp_gather *g = &r->fsdp->gathers[layer];

	tt_check_cuda(cudaStreamWaitEvent(r->compute, g->done, 0), "cudaStreamWaitEvent");
	tt_carve_layer(g->full, &r->real, &r->w[layer]);
}

/* Frees layer's gathered buffer: the compute stream was its last user. */
static void reshard(struct tt_rank *r, int layer)
{
	struct fsdp_gather *g = &r->fsdp->gathers[layer];

	tt_free(r, g->full);
	g->full = NULL;
	r->w[layer] = (struct tt_layer_weights){0};
}

void tt_fsdp_forward_begin(struct tt_rank *r, int layer)
{
	if (!r->fsdp)
		return;
	gather(r, layer);
	use_gather(r, layer);
}

void tt_fsdp_forward_end(struct tt_rank *r, int layer)
{
	if (r->fsdp)
		reshard(r, layer);
}

void tt_fsdp_backward_begin(struct tt_rank *r, int layer)
{
	struct tt_fsdp *f = r->fsdp;
	size_t bytes;

	if (!f)
		return;
	bytes = (size_t)f->layer_elements * sizeof(float);
	gather(r, layer);
	/* The backward runs a chunk's layers downwards: prefetch the next one. */
	if (layer % r->chunk_layers)
		gather(r, layer - 1);
	use_gather(r, layer);
	f->layer_grad_full[layer] = tt_alloc(r, bytes);
	tt_check_cuda(cudaMemsetAsync(f->layer_grad_full[layer], 0, bytes, r->compute),
	              "cudaMemsetAsync");
	tt_carve_layer(f->layer_grad_full[layer], &r->real, &r->g[layer]);
}

void tt_fsdp_backward_end(struct tt_rank *r, int layer)
{
	struct tt_fsdp *f = r->fsdp;
	float *full, *shard_sum;

	if (!f)
		return;
	full = f->layer_grad_full[layer];
	f->layer_grad_full[layer] = NULL;
	r->g[layer] = (struct tt_layer_weights){0};
	reshard(r, layer);
	/* On the communication stream, from the compute stream's current point: the sum of
	 * this rank's slice over data-parallel ranks, added into its gradients; both buffers
	 * freed there, as the caching allocator frees what a side stream used last. */
	tt_check_cuda(cudaEventRecord(r->compute_ready, r->compute), "cudaEventRecord");
	tt_check_cuda(cudaStreamWaitEvent(r->comm, r->compute_ready, 0), "cudaStreamWaitEvent");
	tt_check_cuda(cudaMallocAsync((void **)&shard_sum,
	                              (size_t)f->shard_elements * sizeof(float), r->comm),
	              "cudaMallocAsync");
	simgpu_nccl_next_virtual_bytes(f->virtual_shard);
	tt_check_nccl(ncclReduceScatter(full, shard_sum, (size_t)f->shard_elements, ncclFloat,
	                                ncclSum, r->dp_comm, r->comm),
	              "ncclReduceScatter");
	tt_check_cuda(tt_axpy(r->comm, 1.0f, shard_sum,
	                      layer_part(f, r->grads, layer) + r->dp_rank * f->shard_elements,
	                      f->shard_elements,
	                      (struct tt_vcost){f->virtual_shard / TT_VIRTUAL_BYTES,
	                                        3 * f->virtual_shard}),
	              "tt_axpy");
	tt_check_cuda(cudaFreeAsync(shard_sum, r->comm), "cudaFreeAsync");
	tt_check_cuda(cudaFreeAsync(full, r->comm), "cudaFreeAsync");
}

void tt_fsdp_finish(struct tt_rank *r)
{
	struct tt_fsdp *f = r->fsdp;
	float *rest;

	if (!f)
		return;
	tt_compute_waits_for_comm(r);
	rest = layer_part(f, r->grads, f->layers); /* the embedding and the head */
	if (rest < r->grads + r->param_count) {
		tt_dp_allreduce_async(r, rest, r->grads + r->param_count - rest,
		                      tt_virtual_edge_bytes(r));
		tt_compute_waits_for_comm(r);
	}
}
