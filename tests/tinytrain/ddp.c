/* SPDX-License-Identifier: Apache-2.0 */
/* DDP-style gradient buckets: assignment by size, readiness, launch in order, copy back. */
#include <stdio.h>
#include <stdlib.h>

#include "ddp.h"

#define BF16 2 /* the virtual model's bytes per element */

/* The tensors of one layer. */
enum {
	LAYER_TENSORS = 0
#define COUNT_TENSOR(field, elements) +1
	TT_LAYER_TENSORS(COUNT_TENSOR, unused)
#undef COUNT_TENSOR
};

/* Gradient groups that become final together: a layer (its index), or one of these. */
enum { GROUP_HEAD = -1, GROUP_EMBEDDING = -2 };

/* One gradient tensor: its place in r->grads, its virtual size, its group and bucket. */
struct ddp_tensor {
	int64_t offset, count, virtual_count;
	int group, bucket;
};

/* Tensors [first, first + count) of the list, laid out in that order in flat. */
struct ddp_bucket {
	int first, count;
	int pending; /* tensors not final yet in this step */
	int64_t elements, virtual_elements;
	float *flat; /* cudaMalloc'd at the first launch */
};

struct tt_ddp {
	struct ddp_tensor *tensors; /* reverse model order */
	int tensor_count;
	struct ddp_bucket *buckets;
	int bucket_count;
	int next; /* the next bucket to launch */
};

static void add_tensor(struct tt_ddp *ddp, const struct tt_rank *r, const float *grad,
                       int64_t count, int64_t virtual_count, int group)
{
	ddp->tensors[ddp->tensor_count++] = (struct ddp_tensor){
	        .offset = grad - r->grads,
	        .count = count,
	        .virtual_count = virtual_count,
	        .group = group,
	};
}

/* The rank's gradient tensors in model order (embedding, layers, final norm, head), as
 * model.parameters() lists them. */
static void list_tensors(struct tt_ddp *ddp, const struct tt_rank *r)
{
	const struct tt_shape *s = &r->real, *v = &r->virt;

	if (r->first_stage)
		add_tensor(ddp, r, r->eg.embedding, s->vocab * s->hidden, v->vocab * v->hidden,
		           GROUP_EMBEDDING);
	for (int l = 0; l < r->local_layers; l++) {
		int64_t virtual_counts[] = {
#define VIRTUAL_COUNT(field, elements) (elements),
		        TT_LAYER_TENSORS(VIRTUAL_COUNT, v)
#undef VIRTUAL_COUNT
		};
		int i = 0;
#define ADD_LAYER_TENSOR(field, elements) \
	add_tensor(ddp, r, r->g[l].field, (elements), virtual_counts[i++], l);
		TT_LAYER_TENSORS(ADD_LAYER_TENSOR, s)
#undef ADD_LAYER_TENSOR
	}
	if (r->last_stage) {
		add_tensor(ddp, r, r->eg.lnf_gamma, s->hidden, v->hidden, GROUP_HEAD);
		add_tensor(ddp, r, r->eg.lnf_beta, s->hidden, v->hidden, GROUP_HEAD);
		add_tensor(ddp, r, r->eg.head, s->hidden * s->vocab, v->hidden * v->vocab,
		           GROUP_HEAD);
	}
}

/* The order the backward produces them in, which DDP approximates by reversing the
 * parameters. */
static void reverse_tensors(struct tt_ddp *ddp)
{
	for (int i = 0, j = ddp->tensor_count - 1; i < j; i++, j--) {
		struct ddp_tensor t = ddp->tensors[i];
		ddp->tensors[i] = ddp->tensors[j];
		ddp->tensors[j] = t;
	}
}

/* The Reducer's assignment by size: a bucket takes tensors in order until it holds at
 * least cap bytes, so it ends with the tensor that reaches the cap (or passes it alone). */
static void assign_buckets(struct tt_ddp *ddp, int64_t cap_bytes)
{
	int64_t bytes = 0;

	for (int i = 0; i < ddp->tensor_count; i++) {
		struct ddp_tensor *t = &ddp->tensors[i];
		struct ddp_bucket *b;

		if (bytes == 0)
			ddp->buckets[ddp->bucket_count++].first = i;
		b = &ddp->buckets[ddp->bucket_count - 1];
		t->bucket = ddp->bucket_count - 1;
		b->count++;
		b->elements += t->count;
		b->virtual_elements += t->virtual_count;
		bytes += t->count * (int64_t)sizeof(float);
		if (bytes >= cap_bytes)
			bytes = 0;
	}
	for (int b = 0; b < ddp->bucket_count; b++)
		ddp->buckets[b].pending = ddp->buckets[b].count;
}

struct tt_ddp *tt_ddp_create(struct tt_rank *r)
{
	int most = LAYER_TENSORS * r->local_layers + 4; /* and embedding, final norm, head */
	struct tt_ddp *ddp;

	if (!r->cfg->ddp_bucket_kb || r->cfg->dp == 1)
		return NULL;
	ddp = tt_calloc(1, sizeof(*ddp));
	ddp->tensors = tt_calloc((size_t)most, sizeof(*ddp->tensors));
	ddp->buckets = tt_calloc((size_t)most, sizeof(*ddp->buckets));
	list_tensors(ddp, r);
	reverse_tensors(ddp);
	assign_buckets(ddp, (int64_t)r->cfg->ddp_bucket_kb * 1024);
	return ddp;
}

void tt_ddp_destroy(struct tt_ddp *ddp)
{
	if (!ddp)
		return;
	for (int b = 0; b < ddp->bucket_count; b++)
		cudaFree(ddp->buckets[b].flat);
	free(ddp->tensors);
	free(ddp->buckets);
	free(ddp);
}

/* Copies between each tensor of bucket b and its place in the flat buffer, on the
 * compute stream. */
static void copy_bucket(struct tt_rank *r, const struct ddp_bucket *b, bool into_flat)
{
	int64_t pos = 0;

	for (int i = b->first; i < b->first + b->count; i++) {
		const struct ddp_tensor *t = &r->ddp->tensors[i];
		float *grad = r->grads + t->offset, *flat = b->flat + pos;
		size_t bytes = (size_t)t->count * sizeof(float);

		tt_check_cuda(cudaMemcpyAsync(into_flat ? flat : grad, into_flat ? grad : flat,
		                              bytes, cudaMemcpyDeviceToDevice, r->compute),
		              "cudaMemcpyAsync");
		pos += t->count;
	}
}

static void launch_bucket(struct tt_rank *r, struct ddp_bucket *b)
{
	if (!b->flat)
		tt_check_cuda(cudaMalloc((void **)&b->flat, (size_t)b->elements * sizeof(float)),
		              "cudaMalloc");
	copy_bucket(r, b, true);
	tt_dp_allreduce_async(r, b->flat, b->elements, (uint64_t)b->virtual_elements * BF16);
}

static void mark_ready(struct tt_rank *r, int group)
{
	struct tt_ddp *ddp = r->ddp;

	if (!ddp)
		return;
	for (int i = 0; i < ddp->tensor_count; i++)
		if (ddp->tensors[i].group == group)
			ddp->buckets[ddp->tensors[i].bucket].pending--;
	while (ddp->next < ddp->bucket_count && ddp->buckets[ddp->next].pending == 0)
		launch_bucket(r, &ddp->buckets[ddp->next++]);
}

void tt_ddp_head_ready(struct tt_rank *r)
{
	mark_ready(r, GROUP_HEAD);
}

void tt_ddp_layer_ready(struct tt_rank *r, int layer)
{
	mark_ready(r, layer);
}

void tt_ddp_embedding_ready(struct tt_rank *r)
{
	mark_ready(r, GROUP_EMBEDDING);
}

void tt_ddp_finish(struct tt_rank *r)
{
	struct tt_ddp *ddp = r->ddp;

	if (!ddp)
		return;
	if (ddp->next != ddp->bucket_count) {
		fprintf(stderr,
		        "tinytrain: rank %d: %d of %d gradient buckets never became ready\n",
		        r->rank, ddp->bucket_count - ddp->next, ddp->bucket_count);
		exit(1);
	}
	tt_compute_waits_for_comm(r);
	for (int b = 0; b < ddp->bucket_count; b++) {
		copy_bucket(r, &ddp->buckets[b], false);
		ddp->buckets[b].pending = ddp->buckets[b].count;
	}
	ddp->next = 0;
}
