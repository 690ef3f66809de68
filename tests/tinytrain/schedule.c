/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One training step of one rank: Megatron's non-interleaved 1F1B pipeline schedule over
 * the micro-batches, with the backward handed to a second host thread (as PyTorch's
 * autograd engine runs it), then the data-parallel reduction and the optimizer.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "schedule.h"

/* ---- The backward thread ----------------------------------------------------------------- */

struct tt_worker {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	void (*job)(void *arg);
	void *arg;
	int device;
	bool ready, pending, quit;
};

static void *worker_main(void *arg)
{
	struct tt_worker *w = arg;

	/* The current device is per thread, as in CUDA; autograd threads set theirs too. */
	tt_check_cuda(cudaSetDevice(w->device), "cudaSetDevice");
	pthread_mutex_lock(&w->lock);
	w->ready = true;
	pthread_cond_broadcast(&w->cond);
	for (;;) {
		while (!w->pending && !w->quit)
			pthread_cond_wait(&w->cond, &w->lock);
		if (w->quit)
			break;
		pthread_mutex_unlock(&w->lock);
		w->job(w->arg);
		pthread_mutex_lock(&w->lock);
		w->pending = false;
		pthread_cond_broadcast(&w->cond);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

struct tt_worker *tt_worker_start(int device)
{
	struct tt_worker *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->device = device;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	if (pthread_create(&w->thread, NULL, worker_main, w)) {
		free(w);
		return NULL;
	}
	/* Its first CUDA call advances the virtual clock: let it happen before any step
	 * starts, so that step times do not depend on thread timing. */
	pthread_mutex_lock(&w->lock);
	while (!w->ready)
		pthread_cond_wait(&w->cond, &w->lock);
	pthread_mutex_unlock(&w->lock);
	return w;
}

void tt_worker_stop(struct tt_worker *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->quit = true;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
	free(w);
}

/* Runs job on the worker and waits for it: the two threads never call CUDA at once, so
 * runs stay deterministic. Without a worker, runs it here. */
static void run_on(struct tt_worker *w, void (*job)(void *arg), void *arg)
{
	if (!w) {
		job(arg);
		return;
	}
	pthread_mutex_lock(&w->lock);
	w->job = job;
	w->arg = arg;
	w->pending = true;
	pthread_cond_broadcast(&w->cond);
	while (w->pending)
		pthread_cond_wait(&w->cond, &w->lock);
	pthread_mutex_unlock(&w->lock);
}

/* ---- Forward and backward of one micro-batch through the stage ------------------------------ */

struct microbatch {
	int *tokens;      /* first stage: kept for the embedding's backward */
	float *head_grad; /* last stage: the loss gradient, computed with the forward */
};

/* Returns the stage's output (NULL on the last stage, which ends in the loss). */
static float *forward_step(struct tt_rank *r, struct microbatch *m, int mb, float *input)
{
	float *x = r->first_stage ? tt_embed_forward(r, mb, &m[mb].tokens) : input;

	for (int l = 0; l < r->local_layers; l++)
		x = tt_layer_forward(r, l, mb, x);
	if (!r->last_stage)
		return x;
	m[mb].head_grad = tt_head_forward_backward(r, mb, x);
	return NULL;
}

struct backward_job {
	struct tt_rank *r;
	struct microbatch *m;
	int mb;
	float *dy, *dx;
};

static void backward_step(void *arg)
{
	struct backward_job *job = arg;
	struct tt_rank *r = job->r;
	float *dy = r->last_stage ? job->m[job->mb].head_grad : job->dy;

	for (int l = r->local_layers - 1; l >= 0; l--)
		dy = tt_layer_backward(r, l, job->mb, dy);
	if (r->first_stage) {
		tt_embed_backward(r, job->m[job->mb].tokens, dy);
		dy = NULL;
	}
	job->dx = dy;
}

static float *backward(struct tt_rank *r, struct tt_worker *w, struct microbatch *m, int mb,
                       float *dy)
{
	struct backward_job job = {r, m, mb, dy, NULL};

	run_on(w, backward_step, &job);
	return job.dx;
}

/* ---- The 1F1B schedule ------------------------------------------------------------------------
 */

static float **from_prev(struct tt_rank *r, float **slot)
{
	return r->first_stage ? NULL : slot;
}

static float **from_next(struct tt_rank *r, float **slot)
{
	return r->last_stage ? NULL : slot;
}

/*
 * Megatron's forward_backward_pipelining_without_interleaving: stage s runs
 * min(P - s - 1, M) warm-up forwards, then alternates one forward and one backward,
 * then drains the remaining backwards. Sends and receives that face each other go in
 * one group, so that neighbouring stages never wait on each other.
 */
static void pipeline(struct tt_rank *r, struct tt_worker *w, struct microbatch *m)
{
	int microbatches = r->cfg->microbatches;
	int warmup = r->cfg->pp - r->stage - 1;
	int fwd = 0, bwd = 0;
	float *input = NULL, *grad = NULL;

	if (warmup > microbatches)
		warmup = microbatches;
	for (int i = 0; i < warmup; i++) {
		tt_p2p(r, NULL, NULL, from_prev(r, &input), NULL);
		float *out = forward_step(r, m, fwd++, input);
		tt_p2p(r, r->last_stage ? NULL : out, NULL, NULL, NULL);
	}
	int steady = microbatches - warmup;
	if (steady > 0)
		tt_p2p(r, NULL, NULL, from_prev(r, &input), NULL);
	for (int i = 0; i < steady; i++) {
		float *out = forward_step(r, m, fwd++, input);
		grad = NULL;
		tt_p2p(r, r->last_stage ? NULL : out, NULL, NULL, from_next(r, &grad));
		float *dx = backward(r, w, m, bwd++, grad);
		input = NULL;
		if (i == steady - 1)
			tt_p2p(r, NULL, r->first_stage ? NULL : dx, NULL, NULL);
		else
			tt_p2p(r, NULL, r->first_stage ? NULL : dx, from_prev(r, &input), NULL);
	}
	for (int i = 0; i < warmup; i++) {
		grad = NULL;
		tt_p2p(r, NULL, NULL, NULL, from_next(r, &grad));
		float *dx = backward(r, w, m, bwd++, grad);
		tt_p2p(r, NULL, r->first_stage ? NULL : dx, NULL, NULL);
	}
}

/* ---- A step ------------------------------------------------------------------------------------
 */

static uint64_t fnv1a(const void *data, size_t bytes)
{
	const unsigned char *p = data;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < bytes; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

float tt_forward_backward(struct tt_rank *r, struct tt_worker *w)
{
	size_t grad_bytes = (size_t)r->param_count * sizeof(float);
	struct microbatch *m = calloc((size_t)r->cfg->microbatches, sizeof(*m));
	float loss = 0.0f;

	if (!m) {
		fprintf(stderr, "tinytrain: out of host memory\n");
		exit(1);
	}
	tt_check_cuda(cudaMemsetAsync(r->grads, 0, grad_bytes, r->compute), "cudaMemsetAsync");
	tt_check_cuda(cudaMemsetAsync(r->loss_sum, 0, sizeof(float), r->compute),
	              "cudaMemsetAsync");
	pipeline(r, w, m);
	free(m);
	tt_dp_allreduce_grads(r);
	if (r->last_stage) {
		int64_t tokens = r->real.tokens * r->cfg->microbatches * r->cfg->dp;
		tt_check_cuda(tt_scale(r->compute, r->loss_sum, r->loss_sum, 1.0f / (float)tokens,
		                       1, (struct tt_vcost){1, 8}),
		              "tt_scale");
		tt_dp_allreduce_scalar(r, r->loss_sum);
		tt_check_cuda(cudaMemcpy(&loss, r->loss_sum, sizeof(float), cudaMemcpyDeviceToHost),
		              "cudaMemcpy");
	}
	return loss;
}

void tt_step(struct tt_rank *r, struct tt_worker *w, struct tt_step_result *out)
{
	size_t grad_bytes = (size_t)r->param_count * sizeof(float);
	float *host_grads = malloc(grad_bytes);
	struct tt_adam adam = {r->cfg->lr, 0.9f, 0.999f, 1e-8f, r->step + 1};
	struct tt_vcost adam_cost = {(uint64_t)(r->param_count * 10),
	                             (uint64_t)(r->param_count * 16)};

	if (!host_grads) {
		fprintf(stderr, "tinytrain: out of host memory\n");
		exit(1);
	}
	out->loss = tt_forward_backward(r, w);
	out->has_loss = r->last_stage;
	tt_check_cuda(cudaMemcpy(host_grads, r->grads, grad_bytes, cudaMemcpyDeviceToHost),
	              "cudaMemcpy");
	out->grad_hash = fnv1a(host_grads, grad_bytes);
	free(host_grads);
	tt_check_cuda(tt_adam(r->compute, r->params, r->grads, r->adam_m, r->adam_v, r->param_count,
	                      adam, adam_cost),
	              "tt_adam");
	tt_check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	r->step++;
}
