/* SPDX-License-Identifier: Apache-2.0 */
/* FSDP-style sharded layers: gathers, gradient reduce-scatters, the replicated rest. */
#include <stdio.h>
#include <stdlib.h>

#include "fsdp.h"
#include "simgpu.h"

#define BF16 2 /* the virtual model's bytes per element */

/* One layer's gather: the buffer and the event the compute stream waits on. */
struct fsdp_gather {
	float *full; /* NULL when not gathered */
	cudaEvent_t done;
};

struct tt_fsdp {
	cudaStream_t unshard;        /* the all-gathers' stream */
	int64_t layer_elements;      /* one layer's flat parameters */
	int64_t shard_elements;      /* layer_elements / dp */
	uint64_t virtual_shard;      /* a shard's virtual bytes: what each rank sends */
	float **layer_params;        /* [local_layers]: the layer's part of r->params */
	float **layer_grads;         /* [local_layers]: and of r->grads */
	struct fsdp_gather *gathers; /* [local_layers] */
	float **layer_grad_full;     /* [local_layers]: the backward's gradient buffer, or NULL */
	int64_t layers_elements; /* the layers' part of r->params; the replicated rest follows */
	int layers;              /* the rank's local layers */
};

struct tt_fsdp *tt_fsdp_create(struct tt_rank *r)
{
	const struct tt_shape *v = &r->virt;
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
	f->virtual_shard = (uint64_t)(12 * v->hidden * v->local_hidden + 4 * v->hidden) * BF16 /
	                   (uint64_t)r->cfg->dp;
	f->layer_params = tt_calloc((size_t)r->local_layers, sizeof(*f->layer_params));
	f->layer_grads = tt_calloc((size_t)r->local_layers, sizeof(*f->layer_grads));
	f->layer_grad_full = tt_calloc((size_t)r->local_layers, sizeof(*f->layer_grad_full));
	f->gathers = tt_calloc((size_t)r->local_layers, sizeof(*f->gathers));
	tt_check_cuda(cudaStreamCreateWithFlags(&f->unshard, cudaStreamNonBlocking),
	              "cudaStreamCreateWithFlags");
	for (int l = 0; l < r->local_layers; l++) {
		f->layer_params[l] = r->params + (int64_t)l * per_layer;
		f->layer_grads[l] = r->grads + (int64_t)l * per_layer;
		tt_check_cuda(cudaEventCreateWithFlags(&f->gathers[l].done, cudaEventDisableTiming),
		              "cudaEventCreateWithFlags");
		/* Only a gathered buffer holds a layer's parameters from here on. */
		r->w[l] = (struct tt_layer_weights){0};
		r->g[l] = (struct tt_layer_weights){0};
	}
	f->layers_elements = (int64_t)r->local_layers * per_layer;
	return f;
}

void tt_fsdp_destroy(struct tt_fsdp *f)
{
	if (!f)
		return;
	cudaStreamDestroy(f->unshard);
	for (int l = 0; l < f->layers; l++)
		cudaEventDestroy(f->gathers[l].done);
	free(f->layer_params);
	free(f->layer_grads);
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
	const float *shard = f->layer_params[layer] + r->dp_rank * f->shard_elements;

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
	                      f->layer_grads[layer] + r->dp_rank * f->shard_elements,
	                      f->shard_elements,
	                      (struct tt_vcost){f->virtual_shard / BF16, 3 * f->virtual_shard}),
	              "tt_axpy");
	tt_check_cuda(cudaFreeAsync(shard_sum, r->comm), "cudaFreeAsync");
	tt_check_cuda(cudaFreeAsync(full, r->comm), "cudaFreeAsync");
}

void tt_fsdp_finish(struct tt_rank *r)
{
	struct tt_fsdp *f = r->fsdp;
	int64_t rest;

	if (!f)
		return;
	tt_compute_waits_for_comm(r);
	rest = r->param_count - f->layers_elements;
	if (rest) {
		/* The embedding and the head, at their virtual size. */
		const struct tt_shape *v = &r->virt;
		uint64_t bytes = 0;

		if (r->first_stage)
			bytes += (uint64_t)(v->vocab * v->hidden) * BF16;
		if (r->last_stage)
			bytes += (uint64_t)(v->hidden * v->vocab + 2 * v->hidden) * BF16;
		tt_dp_allreduce_async(r, r->grads + f->layers_elements, rest, bytes);
		tt_compute_waits_for_comm(r);
	}
}
