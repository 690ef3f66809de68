/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tinytrain's model: a GPT stack with Megatron-style tensor parallelism (column-parallel
 * QKV and FC1, row-parallel projection and FC2, an all-reduce after each in the forward
 * and after each column-parallel input gradient in the backward), and Megatron's
 * recompute baselines: full (keep the layer input, rerun the forward before the
 * backward) and selective (recompute the attention core).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp.h"
#include "model.h"

#define BF16 2 /* the virtual model's bytes per element */

/* ---- Errors and memory ------------------------------------------------------------ */

void tt_check_cuda(cudaError_t err, const char *what)
{
	if (err == cudaSuccess)
		return;
	fprintf(stderr, "tinytrain: %s failed: %s\n", what, cudaGetErrorString(err));
	exit(1);
}

void tt_check_nccl(ncclResult_t res, const char *what)
{
	if (res == ncclSuccess)
		return;
	fprintf(stderr, "tinytrain: %s failed: %s\n", what, ncclGetErrorString(res));
	exit(1);
}

void *tt_calloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);

	if (!p) {
		fprintf(stderr, "tinytrain: out of host memory\n");
		exit(1);
	}
	return p;
}

void *tt_alloc(struct tt_rank *r, size_t bytes)
{
	void *p = NULL;

	tt_check_cuda(cudaMallocAsync(&p, bytes, r->compute), "cudaMallocAsync");
	/* One pass that writes every byte (the same virtual cost as any other such pass). */
	if (r->cfg->deterministic_fill)
		tt_check_cuda(tt_fill(r->compute, p, (int64_t)bytes, 0xff,
		                      (struct tt_vcost){(uint64_t)bytes, (uint64_t)bytes / 2}),
		              "tt_fill");
	return p;
}

void tt_free(struct tt_rank *r, void *ptr)
{
	if (ptr)
		tt_check_cuda(cudaFreeAsync(ptr, r->compute), "cudaFreeAsync");
}

static float *alloc_floats(struct tt_rank *r, int64_t n)
{
	return tt_alloc(r, (size_t)n * sizeof(float));
}

static bool hazard(const struct tt_rank *r, enum tt_hazard h)
{
	return r->cfg->hazard[h];
}

/* A temporary of the forward: freed at once when the hazard is on, so that the next
 * allocations reuse its address; otherwise parked until the layer's forward ends. */
static void free_temp(struct tt_rank *r, void *ptr, void **parked, int *nparked)
{
	if (hazard(r, TT_HAZARD_TEMP_REUSE))
		tt_free(r, ptr);
	else
		parked[(*nparked)++] = ptr;
}

/* ---- Virtual costs ------------------------------------------------------------------ */

static struct tt_vcost gemm_cost(int64_t batch, int64_t m, int64_t n, int64_t k)
{
	return (struct tt_vcost){(uint64_t)(2 * batch * m * n * k),
	                         (uint64_t)(batch * (m * k + k * n + m * n) * BF16)};
}

/* An element-wise pass that reads `reads` and writes `writes` tensors of n elements. */
static struct tt_vcost pass_cost(int64_t n, int reads, int writes)
{
	return (struct tt_vcost){(uint64_t)(4 * n), (uint64_t)(n * (reads + writes) * BF16)};
}

/* ---- Weights ------------------------------------------------------------------------ */

static uint64_t mix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* Entry (i, j) of a full, unsharded weight: the same on every layout of ranks. */
static float weight_value(uint64_t seed, uint64_t tensor, int64_t i, int64_t j)
{
	uint64_t h = mix(seed ^ mix(tensor ^ mix((uint64_t)i ^ mix((uint64_t)j))));

	return ((float)(h >> 40) / (float)(1 << 24) - 0.5f) * 0.1f;
}

enum tensor_kind { T_QKV, T_PROJ, T_FC1, T_FC2, T_EMBEDDING, T_HEAD };

/*
 * Fills a rows x cols local shard. Column-parallel shards take, from each of `parts`
 * column blocks of the full matrix, the block of this tensor-parallel rank; row-parallel
 * shards take this rank's block of rows.
 */
static void fill_shard(float *host, uint64_t seed, uint64_t tensor, int64_t rows, int64_t cols,
                       int parts, int64_t row0, int64_t full_part_cols, int64_t col0)
{
	int64_t part_cols = cols / parts;

	for (int64_t i = 0; i < rows; i++)
		for (int p = 0; p < parts; p++)
			for (int64_t c = 0; c < part_cols; c++)
				host[i * cols + p * part_cols + c] = weight_value(
				        seed, tensor, row0 + i, p * full_part_cols + col0 + c);
}

/*
 * Moves one tensor to the device as PyTorch's `module.to(device)` does with a pageable host
 * tensor: a copy on the stream, a conversion kernel (here a scale by 1, exact), and a wait
 * for the stream before the host buffer is reused. Set-up then repeats once per layer with
 * a host synchronisation in every repeat, as a real trainer's does, and the profiler must
 * not take it for the training iteration.
 */
static void upload(struct tt_rank *r, float *dev, const float *host, int64_t n)
{
	tt_check_cuda(cudaMemcpyAsync(dev, host, (size_t)n * sizeof(float), cudaMemcpyHostToDevice,
	                              r->compute),
	              "cudaMemcpyAsync");
	tt_check_cuda(tt_scale(r->compute, dev, dev, 1.0f, n,
	                       (struct tt_vcost){(uint64_t)n, 8 * (uint64_t)n}),
	              "tt_scale");
	tt_check_cuda(cudaStreamSynchronize(r->compute), "cudaStreamSynchronize");
}

int64_t tt_carve_layer(float *base, const struct tt_shape *s, struct tt_layer_weights *w)
{
	float *p = base;

#define CARVE(field, elements) \
	if (base)              \
		w->field = p;  \
	p += (elements);
	TT_LAYER_TENSORS(CARVE, s)
#undef CARVE
	return p - base;
}

static int64_t carve_edges(float *base, const struct tt_rank *r, struct tt_edge_weights *e)
{
	const struct tt_shape *s = &r->real;
	int64_t used = 0;

	if (r->first_stage) {
		if (base)
			e->embedding = base;
		used += s->vocab * s->hidden;
	}
	if (r->last_stage) {
		if (base) {
			e->lnf_gamma = base + used;
			e->lnf_beta = base + used + s->hidden;
			e->head = base + used + 2 * s->hidden;
		}
		used += 2 * s->hidden + s->hidden * s->vocab;
	}
	return used;
}

/* Lays every tensor of the rank into one flat buffer, so that the data-parallel
 * gradient reduction is one call and the optimizer one launch. */
static void carve_all(struct tt_rank *r, float *base, struct tt_layer_weights *layers,
                      struct tt_edge_weights *edges)
{
	int64_t used = 0;

	for (int l = 0; l < r->local_layers; l++)
		used += tt_carve_layer(base + used, &r->real, &layers[l]);
	carve_edges(base + used, r, edges);
}

void tt_grads_ready(struct tt_rank *r)
{
	size_t bytes = (size_t)r->param_count * sizeof(float);

	if (r->grads)
		return;
	r->grads = tt_alloc(r, bytes);
	tt_check_cuda(cudaMemsetAsync(r->grads, 0, bytes, r->compute), "cudaMemsetAsync");
	carve_all(r, r->grads, r->g, &r->eg);
}

static void init_weights(struct tt_rank *r)
{
	const struct tt_shape *s = &r->real;
	uint64_t seed = r->cfg->seed;
	int64_t hl = s->local_hidden, ffl = s->local_ffn, h = s->hidden;
	int64_t biggest = h * (s->vocab > 3 * h ? s->vocab : 3 * h);
	float *host = malloc((size_t)(biggest > h * ffl ? biggest : h * ffl) * sizeof(float));
	float *ones = malloc((size_t)h * sizeof(float));

	if (!host || !ones) {
		fprintf(stderr, "tinytrain: out of host memory\n");
		exit(1);
	}
	for (int64_t i = 0; i < h; i++)
		ones[i] = 1.0f;
	tt_check_cuda(
	        cudaMemsetAsync(r->params, 0, (size_t)r->param_count * sizeof(float), r->compute),
	        "cudaMemsetAsync");
	for (int l = 0; l < r->local_layers; l++) {
		const struct tt_layer_weights *w = &r->w[l];
		uint64_t t = (uint64_t)tt_global_layer(r, l) * 8;

		upload(r, w->ln1_gamma, ones, h);
		upload(r, w->ln2_gamma, ones, h);
		fill_shard(host, seed, t + T_QKV, h, 3 * hl, 3, 0, h, r->tp_rank * hl);
		upload(r, w->qkv, host, h * 3 * hl);
		fill_shard(host, seed, t + T_PROJ, hl, h, 1, r->tp_rank * hl, h, 0);
		upload(r, w->proj, host, hl * h);
		fill_shard(host, seed, t + T_FC1, h, ffl, 1, 0, 4 * h, r->tp_rank * ffl);
		upload(r, w->fc1, host, h * ffl);
		fill_shard(host, seed, t + T_FC2, ffl, h, 1, r->tp_rank * ffl, h, 0);
		upload(r, w->fc2, host, ffl * h);
	}
	if (r->first_stage) {
		fill_shard(host, seed, 1000000 + T_EMBEDDING, s->vocab, h, 1, 0, h, 0);
		upload(r, r->ew.embedding, host, s->vocab * h);
	}
	if (r->last_stage) {
		upload(r, r->ew.lnf_gamma, ones, h);
		fill_shard(host, seed, 1000000 + T_HEAD, h, s->vocab, 1, 0, s->vocab, 0);
		upload(r, r->ew.head, host, h * s->vocab);
	}
	free(host);
	free(ones);
}

void tt_model_init(struct tt_rank *r)
{
	const struct tt_shape *s = &r->real;
	int64_t per_layer = tt_carve_layer(NULL, s, &(struct tt_layer_weights){0});
	size_t bytes;

	r->param_count = per_layer * r->local_layers + carve_edges(NULL, r, &r->ew);
	bytes = (size_t)r->param_count * sizeof(float);
	r->params = tt_alloc(r, bytes);
	r->grads = tt_alloc(r, bytes);
	if (!r->cfg->lazy_optimizer) {
		r->adam_m = tt_alloc(r, bytes);
		r->adam_v = tt_alloc(r, bytes);
		tt_check_cuda(cudaMemsetAsync(r->adam_m, 0, bytes, r->compute), "cudaMemsetAsync");
		tt_check_cuda(cudaMemsetAsync(r->adam_v, 0, bytes, r->compute), "cudaMemsetAsync");
	}
	r->w = calloc((size_t)r->local_layers, sizeof(*r->w));
	r->g = calloc((size_t)r->local_layers, sizeof(*r->g));
	r->acts = calloc((size_t)(r->local_layers * r->cfg->microbatches), sizeof(*r->acts));
	r->saved_layer_bytes = calloc((size_t)r->local_layers, sizeof(*r->saved_layer_bytes));
	if (!r->w || !r->g || !r->acts || !r->saved_layer_bytes) {
		fprintf(stderr, "tinytrain: out of host memory\n");
		exit(1);
	}
	carve_all(r, r->params, r->w, &r->ew);
	carve_all(r, r->grads, r->g, &r->eg);
	tt_check_cuda(cudaStreamSynchronize(r->compute), "cudaStreamSynchronize");
	init_weights(r);

	/* The largest GEMM output: activations (attention scores, QKV, FC1, logits) and
	 * weight gradients (QKV, FC1/FC2, head). */
	int64_t outputs[] = {
	        s->batch * s->local_heads * s->seq * s->seq,
	        s->tokens * 3 * s->local_hidden,
	        s->tokens * s->local_ffn,
	        s->tokens * s->hidden,
	        s->hidden * 3 * s->local_hidden,
	        s->hidden * s->local_ffn,
	        r->last_stage ? s->tokens * s->vocab : 0,
	        r->last_stage ? s->hidden * s->vocab : 0,
	};
	int64_t ws = 0;
	for (size_t i = 0; i < sizeof(outputs) / sizeof(outputs[0]); i++)
		if (outputs[i] > ws)
			ws = outputs[i];
	r->workspace = hazard(r, TT_HAZARD_SHARED_WORKSPACE) ? alloc_floats(r, ws) : NULL;
	r->loss_sum = alloc_floats(r, 1);
	if (r->first_stage) {
		r->embedding_ref = tt_alloc(r, sizeof(float *));
		tt_check_cuda(cudaMemcpyAsync(r->embedding_ref, &r->ew.embedding, sizeof(float *),
		                              cudaMemcpyHostToDevice, r->compute),
		              "cudaMemcpyAsync");
	}
	tt_check_cuda(cudaStreamSynchronize(r->compute), "cudaStreamSynchronize");
}

/* ---- Kernels with this rank's shapes ---------------------------------------------------- */

/* C (m x n) = op(A) op(B), real and virtual shapes side by side. */
static void gemm(struct tt_rank *r, int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a,
                 const float *b, float *c, float beta, struct tt_vcost cost)
{
	struct tt_gemm g = {
	        .trans_a = ta,
	        .trans_b = tb,
	        .batch = 1,
	        .m = (int)m,
	        .n = (int)n,
	        .k = (int)k,
	        .a = a,
	        .b = b,
	        .c = c,
	        .alpha = 1.0f,
	        .beta = beta,
	        .workspace = r->workspace,
	};

	tt_check_cuda(tt_gemm(r->compute, &g, cost), "tt_gemm");
}

/* y = x W for x (tokens x in) and W (in x out): a new tensor; v_in, v_out are virtual. */
static float *linear_forward(struct tt_rank *r, const float *x, const float *weight, int64_t in,
                             int64_t out, int64_t v_in, int64_t v_out)
{
	float *y = alloc_floats(r, r->real.tokens * out);

	gemm(r, 0, 0, r->real.tokens, out, in, x, weight, y, 0.0f,
	     gemm_cost(1, r->virt.tokens, v_out, v_in));
	return y;
}

/* The backward of y = x W: grad_weight += x^T dy, and returns dx = dy W^T (new). */
static float *linear_backward(struct tt_rank *r, const float *x, const float *weight,
                              float *grad_weight, const float *dy, int64_t in, int64_t out,
                              int64_t v_in, int64_t v_out)
{
	int64_t tokens = r->real.tokens, v_tokens = r->virt.tokens;
	float *dx = alloc_floats(r, tokens * in);

	gemm(r, 1, 0, in, out, tokens, x, dy, grad_weight, 1.0f,
	     gemm_cost(1, v_in, v_out, v_tokens));
	gemm(r, 0, 1, tokens, in, out, dy, weight, dx, 0.0f, gemm_cost(1, v_tokens, v_in, v_out));
	return dx;
}

/* The attention batched GEMMs: batch * local heads blocks of s x s or s x d. */
static void attention_gemm(struct tt_rank *r, int ta, int tb, int64_t m, int64_t n, int64_t k,
                           const float *a, const float *b, float *c, float alpha, int64_t vm,
                           int64_t vn, int64_t vk)
{
	const struct tt_shape *s = &r->real, *v = &r->virt;
	struct tt_gemm g = {
	        .trans_a = ta,
	        .trans_b = tb,
	        .batch = (int)(s->batch * s->local_heads),
	        .m = (int)m,
	        .n = (int)n,
	        .k = (int)k,
	        .a = a,
	        .stride_a = m * k,
	        .b = b,
	        .stride_b = k * n,
	        .c = c,
	        .stride_c = m * n,
	        .alpha = alpha,
	        .beta = 0.0f,
	        .workspace = r->workspace,
	};

	tt_check_cuda(tt_gemm(r->compute, &g, gemm_cost(v->batch * v->local_heads, vm, vn, vk)),
	              "tt_gemm");
}

static void layernorm_fwd(struct tt_rank *r, const float *x, float *y, const float *gamma,
                          const float *beta, float *mean, float *rstd)
{
	const struct tt_shape *s = &r->real;
	struct tt_layernorm_args args = {x,    y,    gamma,          beta,
	                                 mean, rstd, (int)s->tokens, (int)s->hidden};
	struct tt_vcost cost = pass_cost(r->virt.tokens * r->virt.hidden, 1, 1);

	tt_check_cuda(hazard(r, TT_HAZARD_POINTER_STRUCT)
	                      ? tt_layernorm_fwd(r->compute, args, cost)
	                      : tt_layernorm_fwd_flat(r->compute, x, y, gamma, beta, mean, rstd,
	                                              (int)s->tokens, (int)s->hidden, cost),
	              "tt_layernorm_fwd");
}

/* dx (+)= layer-norm backward; dgamma and dbeta accumulate. */
static void layernorm_bwd(struct tt_rank *r, const float *x, const float *dy, const float *gamma,
                          const float *mean, const float *rstd, float *dx, float *dgamma,
                          float *dbeta, int accumulate)
{
	const struct tt_shape *s = &r->real;
	struct tt_layernorm_grad_args args = {
	        x,      dy,    gamma,          mean,           rstd,      dx,
	        dgamma, dbeta, (int)s->tokens, (int)s->hidden, accumulate};

	tt_check_cuda(tt_layernorm_bwd(r->compute, args,
	                               pass_cost(r->virt.tokens * r->virt.hidden, 3, 1)),
	              "tt_layernorm_bwd");
}

/* Dropout seeds: one per (step, layer, micro-batch, site), independent of the layout. */
static uint64_t dropout_seed(const struct tt_rank *r, int layer, int mb, int site)
{
	return mix(r->cfg->seed ^
	           mix(((uint64_t)r->step << 40) ^ ((uint64_t)tt_global_layer(r, layer) << 24) ^
	               ((uint64_t)tt_global_microbatch(r, mb) << 4) ^ (uint64_t)site));
}

/* Evaluation (model.eval()) drops nothing: the kernels run with p = 0. */
static float dropout_p(const struct tt_rank *r)
{
	return hazard(r, TT_HAZARD_DROPOUT_BY_VALUE) && !r->evaluating ? r->cfg->dropout : 0.0f;
}

/* Dropout of a tensor that every tensor-parallel rank holds whole (after an all-reduce):
 * the same mask on every rank. In place. */
static uint8_t *replicated_dropout(struct tt_rank *r, int layer, int mb, int site, float *x)
{
	int64_t n = r->real.tokens * r->real.hidden;
	uint8_t *mask = tt_alloc(r, (size_t)n);

	tt_check_cuda(tt_dropout_fwd(r->compute, x, x, mask, n, dropout_p(r),
	                             dropout_seed(r, layer, mb, site), 0,
	                             pass_cost(r->virt.tokens * r->virt.hidden, 1, 1)),
	              "tt_dropout_fwd");
	return mask;
}

/* ---- Layer forward ------------------------------------------------------------------------ */

static struct tt_acts *acts_of(struct tt_rank *r, int layer, int mb)
{
	return &r->acts[layer * r->cfg->microbatches + mb];
}

/*
 * The attention core from q, k, v: scores, causal softmax, dropout. Keeps probs, the
 * mask and the dropped probabilities in a; selective recompute reruns exactly this, with
 * the same seeds, so the bits come back the same.
 */
static void attention_core_forward(struct tt_rank *r, int layer, int mb, struct tt_acts *a)
{
	const struct tt_shape *s = &r->real, *v = &r->virt;
	int64_t blocks = s->batch * s->local_heads, n = blocks * s->seq * s->seq;
	int64_t vn = v->batch * v->local_heads * v->seq * v->seq;
	float *scores = alloc_floats(r, n);

	attention_gemm(r, 0, 1, s->seq, s->seq, s->head_dim, a->q, a->k, scores,
	               1.0f / sqrtf((float)s->head_dim), v->seq, v->seq, v->head_dim);
	a->probs = alloc_floats(r, n);
	tt_check_cuda(tt_softmax_fwd(r->compute, scores, a->probs, (int)(blocks * s->seq),
	                             (int)s->seq, 1, pass_cost(vn, 1, 1)),
	              "tt_softmax_fwd");
	tt_free(r, scores);
	a->probs_dropped = alloc_floats(r, n);
	a->attn_mask = tt_alloc(r, (size_t)n);
	/* Masks follow global head indices, so that any tensor-parallel layout drops the
	 * same elements as the unsharded model: one launch per sequence of the batch. */
	int64_t per_seq = s->local_heads * s->seq * s->seq;
	int64_t full_heads = s->local_heads * r->cfg->tp;
	for (int64_t b = 0; b < s->batch; b++) {
		uint64_t offset = (uint64_t)((b * full_heads + r->tp_rank * s->local_heads) *
		                             s->seq * s->seq);
		tt_check_cuda(tt_dropout_fwd(r->compute, a->probs + b * per_seq,
		                             a->probs_dropped + b * per_seq,
		                             a->attn_mask + b * per_seq, per_seq, dropout_p(r),
		                             dropout_seed(r, layer, mb, 0), offset,
		                             pass_cost(vn / v->batch, 1, 1)),
		              "tt_dropout_fwd");
	}
}

static void attention_core_free(struct tt_rank *r, struct tt_acts *a)
{
	tt_free(r, a->probs);
	tt_free(r, a->probs_dropped);
	tt_free(r, a->attn_mask);
	a->probs = a->probs_dropped = NULL;
	a->attn_mask = NULL;
}

/* The residual add: into the branch's buffer (in place) or into a new one. */
static float *residual(struct tt_rank *r, const float *x, float *branch)
{
	int64_t n = r->real.tokens * r->real.hidden;
	struct tt_vcost cost = pass_cost(r->virt.tokens * r->virt.hidden, 2, 1);
	float *out = branch;

	if (!hazard(r, TT_HAZARD_INPLACE_RESIDUAL)) {
		out = alloc_floats(r, n);
		tt_check_cuda(cudaMemcpyAsync(out, branch, (size_t)n * sizeof(float),
		                              cudaMemcpyDeviceToDevice, r->compute),
		              "cudaMemcpyAsync");
		tt_free(r, branch);
	}
	tt_check_cuda(tt_axpy(r->compute, 1.0f, x, out, n, cost), "tt_axpy");
	return out;
}

/* Runs the whole forward of a layer from a->x, filling a; returns the output. */
static float *forward_compute(struct tt_rank *r, int layer, int mb, struct tt_acts *a)
{
	const struct tt_shape *s = &r->real, *v = &r->virt;
	const struct tt_layer_weights *w = &r->w[layer];
	struct tt_heads heads = {(int)s->batch, (int)s->seq, (int)s->local_heads, (int)s->head_dim};
	int64_t th = s->tokens * s->hidden, thl = s->tokens * s->local_hidden;
	int64_t vth = v->tokens * v->hidden, vthl = v->tokens * v->local_hidden;
	void *parked[8];
	int nparked = 0;

	a->ln1 = alloc_floats(r, th);
	a->ln1_mean = alloc_floats(r, s->tokens);
	a->ln1_rstd = alloc_floats(r, s->tokens);
	layernorm_fwd(r, a->x, a->ln1, w->ln1_gamma, w->ln1_beta, a->ln1_mean, a->ln1_rstd);

	float *qkv = linear_forward(r, a->ln1, w->qkv, s->hidden, 3 * s->local_hidden, v->hidden,
	                            3 * v->local_hidden);
	if (r->cfg->fused_qkv) {
		/* PyTorch's q, k, v = qkv.split(...): views of one allocation, kept whole. */
		a->q = alloc_floats(r, 3 * thl);
		a->k = a->q + thl;
		a->v = a->q + 2 * thl;
	} else {
		a->q = alloc_floats(r, thl);
		a->k = alloc_floats(r, thl);
		a->v = alloc_floats(r, thl);
	}
	tt_check_cuda(
	        tt_split_qkv(r->compute, heads, qkv, a->q, a->k, a->v, pass_cost(3 * vthl, 1, 1)),
	        "tt_split_qkv");
	free_temp(r, qkv, parked, &nparked);

	attention_core_forward(r, layer, mb, a);
	float *ctx = alloc_floats(r, thl);
	attention_gemm(r, 0, 0, s->seq, s->head_dim, s->seq, a->probs_dropped, a->v, ctx, 1.0f,
	               v->seq, v->head_dim, v->seq);
	a->merged = alloc_floats(r, thl);
	tt_check_cuda(tt_merge_heads(r->compute, heads, ctx, a->merged, pass_cost(vthl, 1, 1)),
	              "tt_merge_heads");
	free_temp(r, ctx, parked, &nparked);

	float *attn = linear_forward(r, a->merged, w->proj, s->local_hidden, s->hidden,
	                             v->local_hidden, v->hidden);
	tt_tp_allreduce(r, attn, th, (uint64_t)vth * BF16);
	a->mask1 = replicated_dropout(r, layer, mb, 1, attn);
	a->x2 = residual(r, a->x, attn);

	a->ln2 = alloc_floats(r, th);
	a->ln2_mean = alloc_floats(r, s->tokens);
	a->ln2_rstd = alloc_floats(r, s->tokens);
	layernorm_fwd(r, a->x2, a->ln2, w->ln2_gamma, w->ln2_beta, a->ln2_mean, a->ln2_rstd);
	a->fc1 =
	        linear_forward(r, a->ln2, w->fc1, s->hidden, s->local_ffn, v->hidden, v->local_ffn);
	a->gelu = alloc_floats(r, s->tokens * s->local_ffn);
	tt_check_cuda(tt_gelu_fwd(r->compute, a->fc1, a->gelu, s->tokens * s->local_ffn,
	                          pass_cost(v->tokens * v->local_ffn, 1, 1)),
	              "tt_gelu_fwd");
	float *fc2 = linear_forward(r, a->gelu, w->fc2, s->local_ffn, s->hidden, v->local_ffn,
	                            v->hidden);
	tt_tp_allreduce(r, fc2, th, (uint64_t)vth * BF16);
	a->mask2 = replicated_dropout(r, layer, mb, 2, fc2);
	float *out = residual(r, a->x2, fc2);

	for (int i = 0; i < nparked; i++)
		tt_free(r, parked[i]);
	return out;
}

/* Frees everything a layer kept except its input (k and v with q, when they are its views). */
static void free_saved(struct tt_rank *r, struct tt_acts *a)
{
	bool views = r->cfg->fused_qkv;
	void *saved[] = {a->ln1,
	                 a->ln1_mean,
	                 a->ln1_rstd,
	                 a->q,
	                 views ? NULL : a->k,
	                 views ? NULL : a->v,
	                 a->merged,
	                 a->mask1,
	                 a->x2,
	                 a->ln2,
	                 a->ln2_mean,
	                 a->ln2_rstd,
	                 a->fc1,
	                 a->gelu,
	                 a->mask2};

	attention_core_free(r, a);
	for (size_t i = 0; i < sizeof(saved) / sizeof(saved[0]); i++)
		tt_free(r, saved[i]);
	*a = (struct tt_acts){.x = a->x};
}

/*
 * Every buffer of struct tt_acts with its size in bytes, from the real shape:
 * X(field, bytes). forward_compute allocates each with exactly this size.
 */
#define TT_ACTS_BUFFERS(X, s)                                                  \
	X(x, (s)->tokens *(s)->hidden * 4)                                     \
	X(ln1, (s)->tokens *(s)->hidden * 4)                                   \
	X(ln1_mean, (s)->tokens * 4)                                           \
	X(ln1_rstd, (s)->tokens * 4)                                           \
	X(q, (s)->tokens *(s)->local_hidden * 4)                               \
	X(k, (s)->tokens *(s)->local_hidden * 4)                               \
	X(v, (s)->tokens *(s)->local_hidden * 4)                               \
	X(probs, (s)->batch *(s)->local_heads *(s)->seq *(s)->seq * 4)         \
	X(probs_dropped, (s)->batch *(s)->local_heads *(s)->seq *(s)->seq * 4) \
	X(attn_mask, (s)->batch *(s)->local_heads *(s)->seq *(s)->seq)         \
	X(merged, (s)->tokens *(s)->local_hidden * 4)                          \
	X(mask1, (s)->tokens *(s)->hidden)                                     \
	X(x2, (s)->tokens *(s)->hidden * 4)                                    \
	X(ln2, (s)->tokens *(s)->hidden * 4)                                   \
	X(ln2_mean, (s)->tokens * 4)                                           \
	X(ln2_rstd, (s)->tokens * 4)                                           \
	X(fc1, (s)->tokens *(s)->local_ffn * 4)                                \
	X(gelu, (s)->tokens *(s)->local_ffn * 4)                               \
	X(mask2, (s)->tokens *(s)->hidden)

int64_t tt_acts_bytes(const struct tt_rank *r, const struct tt_acts *a)
{
	int64_t bytes = 0;

#define TT_ACTS_ADD(field, size) bytes += a->field ? (int64_t)(size) : 0;
	TT_ACTS_BUFFERS(TT_ACTS_ADD, &r->real)
#undef TT_ACTS_ADD
	return bytes;
}

/* --kernel-modules: the layer's kernels through its module's functions, as a graph piece's. */
static void enter_module(const struct tt_rank *r, int layer)
{
	if (r->cfg->kernel_modules)
		tt_kernels_enter_module(layer / r->cfg->kernel_modules);
}

/* The recompute mode of local layer `layer`: with --recompute-layers N (Megatron's block
 * method), only the first N layers of each model chunk recompute. */
static enum tt_recompute recompute_of(const struct tt_rank *r, int layer)
{
	if (r->cfg->recompute_layers && layer % r->chunk_layers >= r->cfg->recompute_layers)
		return TT_RECOMPUTE_NONE;
	return r->cfg->recompute;
}

/* With --recompute-groups N, the first and last local layers of layer's group (N layers
 * of its model chunk, the chunk's last group maybe fewer); layer itself otherwise. */
static int group_first(const struct tt_rank *r, int layer)
{
	int n = r->cfg->recompute_groups;

	return n ? layer - layer % r->chunk_layers % n : layer;
}

static int group_last(const struct tt_rank *r, int layer)
{
	int n = r->cfg->recompute_groups, chunk_end;

	if (!n)
		return layer;
	chunk_end = layer - layer % r->chunk_layers + r->chunk_layers - 1;
	return group_first(r, layer) + n - 1 < chunk_end ? group_first(r, layer) + n - 1
	                                                 : chunk_end;
}

float *tt_layer_forward(struct tt_rank *r, int layer, int mb, float *x)
{
	struct tt_acts *a = acts_of(r, layer, mb);
	float *out;

	*a = (struct tt_acts){.x = x};
	enter_module(r, layer);
	tt_fsdp_forward_begin(r, layer);
	out = forward_compute(r, layer, mb, a);
	if (recompute_of(r, layer) == TT_RECOMPUTE_FULL)
		free_saved(r, a);
	else if (recompute_of(r, layer) == TT_RECOMPUTE_SELECTIVE)
		attention_core_free(r, a);
	if (group_first(r, layer) != layer) { /* a checkpointed group keeps its input only */
		tt_free(r, a->x);
		a->x = NULL;
	}
	tt_fsdp_forward_end(r, layer);
	tt_kernels_enter_module(-1);
	if (r->saved_layer_bytes && tt_acts_bytes(r, a) > r->saved_layer_bytes[layer])
		r->saved_layer_bytes[layer] = tt_acts_bytes(r, a);
	return out;
}

void tt_layer_discard(struct tt_rank *r, int layer, int mb)
{
	struct tt_acts *a = acts_of(r, layer, mb);

	free_saved(r, a);
	tt_free(r, a->x);
	a->x = NULL;
}

/* ---- Layer backward ------------------------------------------------------------------------ */

/*
 * Brings back what the recompute mode dropped, with the same kernels and seeds. A
 * checkpointed group's forwards all run again in its last layer's backward, from the
 * group's input, each layer's output the next one's input, as torch.utils.checkpoint
 * reruns the function it wraps.
 */
static void rematerialise(struct tt_rank *r, int layer, int mb, struct tt_acts *a)
{
	if (r->cfg->recompute_groups) {
		int first = group_first(r, layer);
		float *x = acts_of(r, first, mb)->x;

		if (layer != group_last(r, layer))
			return;
		for (int l = first; l <= layer; l++) {
			struct tt_acts *rerun = acts_of(r, l, mb);
			*rerun = (struct tt_acts){.x = x};
			enter_module(r, l);
			x = forward_compute(r, l, mb, rerun);
		}
		enter_module(r, layer);
		tt_free(r, x);
	} else if (recompute_of(r, layer) == TT_RECOMPUTE_FULL) {
		tt_free(r, forward_compute(r, layer, mb, a));
	} else if (recompute_of(r, layer) == TT_RECOMPUTE_SELECTIVE) {
		attention_core_forward(r, layer, mb, a);
	}
}

/* The MLP's backward: from d(out) (also the residual's gradient) to d(x2), in place. */
static void mlp_backward(struct tt_rank *r, int layer, struct tt_acts *a, float *dy)
{
	const struct tt_shape *s = &r->real, *v = &r->virt;
	const struct tt_layer_weights *w = &r->w[layer];
	const struct tt_layer_weights *g = &r->g[layer];
	int64_t th = s->tokens * s->hidden, tf = s->tokens * s->local_ffn;
	float p = dropout_p(r);

	float *dfc2 = alloc_floats(r, th);
	tt_check_cuda(tt_dropout_bwd(r->compute, dy, a->mask2, dfc2, th, p,
	                             pass_cost(v->tokens * v->hidden, 2, 1)),
	              "tt_dropout_bwd");
	float *dgelu = linear_backward(r, a->gelu, w->fc2, g->fc2, dfc2, s->local_ffn, s->hidden,
	                               v->local_ffn, v->hidden);
	tt_free(r, dfc2);
	tt_check_cuda(tt_gelu_bwd(r->compute, a->fc1, dgelu, dgelu, tf,
	                          pass_cost(v->tokens * v->local_ffn, 2, 1)),
	              "tt_gelu_bwd");
	float *dln2 = linear_backward(r, a->ln2, w->fc1, g->fc1, dgelu, s->hidden, s->local_ffn,
	                              v->hidden, v->local_ffn);
	tt_free(r, dgelu);
	tt_tp_allreduce(r, dln2, th, (uint64_t)(v->tokens * v->hidden) * BF16);
	layernorm_bwd(r, a->x2, dln2, w->ln2_gamma, a->ln2_mean, a->ln2_rstd, dy, g->ln2_gamma,
	              g->ln2_beta, 1);
	tt_free_after_comm(r, dln2);
}

/* The attention's backward: from d(x2) to d(x), in place. */
static void attention_backward(struct tt_rank *r, int layer, struct tt_acts *a, float *dy)
{
	const struct tt_shape *s = &r->real, *v = &r->virt;
	const struct tt_layer_weights *w = &r->w[layer];
	const struct tt_layer_weights *g = &r->g[layer];
	struct tt_heads heads = {(int)s->batch, (int)s->seq, (int)s->local_heads, (int)s->head_dim};
	int64_t th = s->tokens * s->hidden, thl = s->tokens * s->local_hidden;
	int64_t n = s->batch * s->local_heads * s->seq * s->seq;
	int64_t vn = v->batch * v->local_heads * v->seq * v->seq;
	int64_t vthl = v->tokens * v->local_hidden;
	float scale = 1.0f / sqrtf((float)s->head_dim);
	float p = dropout_p(r);

	float *dattn = alloc_floats(r, th);
	tt_check_cuda(tt_dropout_bwd(r->compute, dy, a->mask1, dattn, th, p,
	                             pass_cost(v->tokens * v->hidden, 2, 1)),
	              "tt_dropout_bwd");
	float *dmerged = linear_backward(r, a->merged, w->proj, g->proj, dattn, s->local_hidden,
	                                 s->hidden, v->local_hidden, v->hidden);
	tt_free(r, dattn);
	float *dctx = alloc_floats(r, thl);
	tt_check_cuda(tt_split_merged_grad(r->compute, heads, dmerged, dctx, pass_cost(vthl, 1, 1)),
	              "tt_split_merged_grad");
	tt_free(r, dmerged);

	float *dprobs = alloc_floats(r, n);
	attention_gemm(r, 0, 1, s->seq, s->seq, s->head_dim, dctx, a->v, dprobs, 1.0f, v->seq,
	               v->seq, v->head_dim);
	float *dv = alloc_floats(r, thl);
	attention_gemm(r, 1, 0, s->seq, s->head_dim, s->seq, a->probs_dropped, dctx, dv, 1.0f,
	               v->seq, v->head_dim, v->seq);
	tt_free(r, dctx);
	tt_check_cuda(
	        tt_dropout_bwd(r->compute, dprobs, a->attn_mask, dprobs, n, p, pass_cost(vn, 2, 1)),
	        "tt_dropout_bwd");
	float *dscores = alloc_floats(r, n);
	tt_check_cuda(tt_softmax_bwd(r->compute, a->probs, dprobs, dscores,
	                             (int)(s->batch * s->local_heads * s->seq), (int)s->seq,
	                             pass_cost(vn, 2, 1)),
	              "tt_softmax_bwd");
	tt_free(r, dprobs);
	float *dq = alloc_floats(r, thl), *dk = alloc_floats(r, thl);
	attention_gemm(r, 0, 0, s->seq, s->head_dim, s->seq, dscores, a->k, dq, scale, v->seq,
	               v->head_dim, v->seq);
	attention_gemm(r, 1, 0, s->seq, s->head_dim, s->seq, dscores, a->q, dk, scale, v->seq,
	               v->head_dim, v->seq);
	tt_free(r, dscores);
	float *dqkv = alloc_floats(r, 3 * thl);
	tt_check_cuda(
	        tt_join_qkv_grad(r->compute, heads, dq, dk, dv, dqkv, pass_cost(3 * vthl, 1, 1)),
	        "tt_join_qkv_grad");
	tt_free(r, dq);
	tt_free(r, dk);
	tt_free(r, dv);
	float *dln1 = linear_backward(r, a->ln1, w->qkv, g->qkv, dqkv, s->hidden,
	                              3 * s->local_hidden, v->hidden, 3 * v->local_hidden);
	tt_free(r, dqkv);
	tt_tp_allreduce(r, dln1, th, (uint64_t)(v->tokens * v->hidden) * BF16);
	layernorm_bwd(r, a->x, dln1, w->ln1_gamma, a->ln1_mean, a->ln1_rstd, dy, g->ln1_gamma,
	              g->ln1_beta, 1);
	tt_free_after_comm(r, dln1);
}

float *tt_layer_backward(struct tt_rank *r, int layer, int mb, float *dy)
{
	struct tt_acts *a = acts_of(r, layer, mb);

	tt_grads_ready(r);

	enter_module(r, layer);
	tt_fsdp_backward_begin(r, layer);
	rematerialise(r, layer, mb, a);
	mlp_backward(r, layer, a, dy);
	attention_backward(r, layer, a, dy);
	tt_fsdp_backward_end(r, layer);
	free_saved(r, a);
	tt_free(r, a->x);
	a->x = NULL;
	tt_kernels_enter_module(-1);
	return dy;
}

/* ---- Embedding and head ---------------------------------------------------------------------- */

int tt_global_microbatch(const struct tt_rank *r, int mb)
{
	return r->dp_rank * r->cfg->microbatches + mb;
}

void tt_tokens(const struct tt_config *cfg, int step, int global_mb, int *tokens)
{
	int n = cfg->real.batch * (cfg->real.seq + 1);

	for (int i = 0; i < n; i++)
		tokens[i] = (int)(mix(cfg->seed ^ mix(((uint64_t)step << 32) ^
		                                      ((uint64_t)global_mb << 16) ^ (uint64_t)i)) %
		                  (uint64_t)cfg->real.vocab);
}

/* Device copies of micro-batch mb's inputs (which = 0) or targets (which = 1): per
 * sequence, tokens [0, s) and [1, s] of its s + 1. */
static int *upload_tokens(struct tt_rank *r, int mb, int which)
{
	const struct tt_shape *s = &r->real;
	int all[s->batch * (s->seq + 1)], picked[s->tokens];
	int *dev = tt_alloc(r, sizeof(picked));

	tt_tokens(r->cfg, r->step, tt_global_microbatch(r, mb), all);
	for (int64_t b = 0; b < s->batch; b++)
		for (int64_t i = 0; i < s->seq; i++)
			picked[b * s->seq + i] = all[b * (s->seq + 1) + i + which];
	tt_check_cuda(
	        cudaMemcpyAsync(dev, picked, sizeof(picked), cudaMemcpyHostToDevice, r->compute),
	        "cudaMemcpyAsync");
	return dev;
}

float *tt_embed_forward(struct tt_rank *r, int mb, int **tokens_out)
{
	const struct tt_shape *s = &r->real, *v = &r->virt;
	float *x = alloc_floats(r, s->tokens * s->hidden);
	int *tokens = upload_tokens(r, mb, 0);
	struct tt_vcost cost = pass_cost(v->tokens * v->hidden, 1, 1);

	if (hazard(r, TT_HAZARD_DEVICE_POINTER))
		tt_check_cuda(tt_embedding_fwd(r->compute, tokens, r->embedding_ref, x,
		                               (int)s->tokens, (int)s->hidden, cost),
		              "tt_embedding_fwd");
	else
		tt_check_cuda(tt_embedding_fwd_direct(r->compute, tokens, r->ew.embedding, x,
		                                      (int)s->tokens, (int)s->hidden, cost),
		              "tt_embedding_fwd_direct");
	*tokens_out = tokens;
	return x;
}

void tt_embed_backward(struct tt_rank *r, const int *tokens, float *dx)
{
	const struct tt_shape *s = &r->real, *v = &r->virt;

	tt_grads_ready(r);

	tt_check_cuda(tt_embedding_bwd(r->compute, tokens, dx, r->eg.embedding, (int)s->tokens,
	                               (int)s->hidden, pass_cost(v->tokens * v->hidden, 2, 1)),
	              "tt_embedding_bwd");
	tt_free(r, dx);
	tt_free(r, (void *)tokens);
}

void tt_head_eval(struct tt_rank *r, int mb, float *x, float *loss_sum)
{
	const struct tt_shape *s = &r->real, *v = &r->virt;
	int64_t th = s->tokens * s->hidden, tv = s->tokens * s->vocab;
	float *ln = alloc_floats(r, th), *mean = alloc_floats(r, s->tokens),
	      *rstd = alloc_floats(r, s->tokens);

	layernorm_fwd(r, x, ln, r->ew.lnf_gamma, r->ew.lnf_beta, mean, rstd);
	tt_free(r, x);
	float *logits = linear_forward(r, ln, r->ew.head, s->hidden, s->vocab, v->hidden, v->vocab);
	tt_free(r, ln);
	tt_free(r, mean);
	tt_free(r, rstd);
	int *targets = upload_tokens(r, mb, 1);
	/* The loss kernel writes its gradient too; evaluation throws it away. */
	float *losses = alloc_floats(r, s->tokens), *dlogits = alloc_floats(r, tv);
	tt_check_cuda(tt_cross_entropy(r->compute, logits, targets, losses, dlogits, (int)s->tokens,
	                               (int)s->vocab, 1.0f, pass_cost(v->tokens * v->vocab, 1, 1)),
	              "tt_cross_entropy");
	tt_check_cuda(
	        tt_sum(r->compute, losses, loss_sum, (int)s->tokens, 0, pass_cost(v->tokens, 1, 0)),
	        "tt_sum");
	tt_free(r, logits);
	tt_free(r, losses);
	tt_free(r, dlogits);
	tt_free(r, targets);
}

float *tt_head_forward_backward(struct tt_rank *r, int mb, float *x)
{
	const struct tt_shape *s = &r->real, *v = &r->virt;
	int64_t th = s->tokens * s->hidden, tv = s->tokens * s->vocab;
	int64_t global_tokens = s->tokens * r->cfg->microbatches * r->cfg->dp;
	float *ln = alloc_floats(r, th), *mean = alloc_floats(r, s->tokens),
	      *rstd = alloc_floats(r, s->tokens);

	layernorm_fwd(r, x, ln, r->ew.lnf_gamma, r->ew.lnf_beta, mean, rstd);
	float *logits = linear_forward(r, ln, r->ew.head, s->hidden, s->vocab, v->hidden, v->vocab);
	int *targets = upload_tokens(r, mb, 1);
	float *losses = alloc_floats(r, s->tokens), *dlogits = alloc_floats(r, tv);
	tt_check_cuda(tt_cross_entropy(r->compute, logits, targets, losses, dlogits, (int)s->tokens,
	                               (int)s->vocab, 1.0f / (float)global_tokens,
	                               pass_cost(v->tokens * v->vocab, 1, 1)),
	              "tt_cross_entropy");
	tt_check_cuda(tt_sum(r->compute, losses, r->loss_sum, (int)s->tokens, 1,
	                     pass_cost(v->tokens, 1, 0)),
	              "tt_sum");
	tt_free(r, logits);
	tt_free(r, losses);
	tt_free(r, targets);

	tt_grads_ready(r);
	float *dln = linear_backward(r, ln, r->ew.head, r->eg.head, dlogits, s->hidden, s->vocab,
	                             v->hidden, v->vocab);
	tt_free(r, dlogits);
	tt_free(r, ln);
	float *dx = alloc_floats(r, th);
	layernorm_bwd(r, x, dln, r->ew.lnf_gamma, mean, rstd, dx, r->eg.lnf_gamma, r->eg.lnf_beta,
	              0);
	tt_free(r, dln);
	tt_free(r, mean);
	tt_free(r, rstd);
	tt_free(r, x);
	return dx;
}
