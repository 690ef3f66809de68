/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One training step of one rank: a pipeline schedule over the micro-batches (Megatron's
 * 1F1B, GPipe, or Megatron's interleaved 1F1B), with the backward handed to a second host
 * thread (as PyTorch's autograd engine runs it), then the data-parallel reduction (one
 * all-reduce, or DDP's buckets during the backward) and the optimizer.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "ddp.h"
#include "fsdp.h"
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

/* ---- Forward and backward of one micro-batch through one model chunk ----------------------- */

struct microbatch {
	int *tokens;      /* first stage: kept for the embedding's backward */
	float *head_grad; /* last stage: the loss gradient, computed with the forward */
};

/* Whether a chunk of this rank begins with the embedding (the first virtual stage) or ends
 * in the head and loss (the last one). Without model chunks: the first and last stages. */
static bool holds_embedding(const struct tt_rank *r, int chunk)
{
	return r->first_stage && chunk == 0;
}

static bool holds_head(const struct tt_rank *r, int chunk)
{
	return r->last_stage && chunk == r->chunks - 1;
}

/* Returns the chunk's output (NULL where it ends in the loss). */
static float *forward_step(struct tt_rank *r, struct microbatch *m, int chunk, int mb, float *input)
{
	float *x = holds_embedding(r, chunk) ? tt_embed_forward(r, mb, &m[mb].tokens) : input;
	int first = chunk * r->chunk_layers;

	for (int l = first; l < first + r->chunk_layers; l++) {
		x = tt_layer_forward(r, l, mb, x);
		if (l == first && mb == 0 && chunk == 0 && r->cfg->sync_every &&
		    (r->step + 1) % r->cfg->sync_every == 0)
			tt_check_cuda(cudaStreamSynchronize(r->compute), "cudaStreamSynchronize");
	}
	if (!holds_head(r, chunk))
		return x;
	m[mb].head_grad = tt_head_forward_backward(r, mb, x);
	return NULL;
}

struct backward_job {
	struct tt_rank *r;
	struct microbatch *m;
	int chunk, mb;
	float *dy, *dx;
};

/* Every schedule runs each chunk's backwards in micro-batch order, so the last micro-batch's
 * makes gradients final: the DDP buckets are told as each part finishes (the other
 * micro-batches run as under DDP's no_sync). */
static void backward_step(void *arg)
{
	struct backward_job *job = arg;
	struct tt_rank *r = job->r;
	bool last = job->mb == r->cfg->microbatches - 1, head = holds_head(r, job->chunk);
	float *dy = head ? job->m[job->mb].head_grad : job->dy;
	int first = job->chunk * r->chunk_layers;

	if (last && head)
		tt_ddp_head_ready(r);
	for (int l = first + r->chunk_layers - 1; l >= first; l--) {
		dy = tt_layer_backward(r, l, job->mb, dy);
		if (last)
			tt_ddp_layer_ready(r, l);
	}
	if (holds_embedding(r, job->chunk)) {
		tt_embed_backward(r, job->m[job->mb].tokens, dy);
		dy = NULL;
		if (last)
			tt_ddp_embedding_ready(r);
	}
	job->dx = dy;
}

/* Returns the chunk's input gradient (NULL where it begins with the embedding). */
static float *backward(struct tt_rank *r, struct tt_worker *w, struct microbatch *m, int chunk,
                       int mb, float *dy)
{
	struct backward_job job = {r, m, chunk, mb, dy, NULL};

	run_on(w, backward_step, &job);
	return job.dx;
}

/* ---- The 1F1B and GPipe schedules ------------------------------------------------------------ */

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
 *
 * GPipe (torch.distributed.pipelining's ScheduleGPipe) is the same with every
 * micro-batch in the warm-up: all forwards, then all backwards in micro-batch order
 * 0..M-1, as 1F1B runs them, so gradients accumulate in the same order and come out the
 * same bits. Between two stages the messages run forwards 0..M-1, then gradients 0..M-1,
 * in the same order on both sides, so no exchange can wait for one not yet posted.
 */
static void pipeline(struct tt_rank *r, struct tt_worker *w, struct microbatch *m)
{
	int microbatches = r->cfg->microbatches;
	int warmup = r->cfg->pp - r->stage - 1;
	int fwd = 0, bwd = 0;
	float *input = NULL, *grad = NULL;

	if (warmup > microbatches || r->cfg->schedule == TT_SCHEDULE_GPIPE)
		warmup = microbatches;
	for (int i = 0; i < warmup; i++) {
		tt_p2p(r, NULL, NULL, from_prev(r, &input), NULL);
		float *out = forward_step(r, m, 0, fwd++, input);
		tt_p2p(r, r->last_stage ? NULL : out, NULL, NULL, NULL);
	}
	int steady = microbatches - warmup;
	if (steady > 0)
		tt_p2p(r, NULL, NULL, from_prev(r, &input), NULL);
	for (int i = 0; i < steady; i++) {
		float *out = forward_step(r, m, 0, fwd++, input);
		grad = NULL;
		tt_p2p(r, r->last_stage ? NULL : out, NULL, NULL, from_next(r, &grad));
		float *dx = backward(r, w, m, 0, bwd++, grad);
		input = NULL;
		if (i == steady - 1)
			tt_p2p(r, NULL, r->first_stage ? NULL : dx, NULL, NULL);
		else
			tt_p2p(r, NULL, r->first_stage ? NULL : dx, from_prev(r, &input), NULL);
	}
	for (int i = 0; i < warmup; i++) {
		grad = NULL;
		tt_p2p(r, NULL, NULL, NULL, from_next(r, &grad));
		float *dx = backward(r, w, m, 0, bwd++, grad);
		tt_p2p(r, NULL, r->first_stage ? NULL : dx, NULL, NULL);
	}
}

/* ---- Megatron's interleaved 1F1B ------------------------------------------------------------- */

/* Received tensors per chunk, first in first out: activations for the chunk's next
 * forwards, or gradients for its next backwards. */
struct chunk_queues {
	float **items; /* [chunks][microbatches] */
	int *pushed, *popped;
	int per_chunk;
};

static void queues_init(struct chunk_queues *q, const struct tt_rank *r)
{
	q->per_chunk = r->cfg->microbatches;
	q->items = calloc((size_t)(r->chunks * q->per_chunk), sizeof(*q->items));
	q->pushed = calloc((size_t)r->chunks, sizeof(*q->pushed));
	q->popped = calloc((size_t)r->chunks, sizeof(*q->popped));
	if (!q->items || !q->pushed || !q->popped) {
		fprintf(stderr, "tinytrain: out of host memory\n");
		exit(1);
	}
}

static void queue_push(struct chunk_queues *q, int chunk, float *t)
{
	q->items[chunk * q->per_chunk + q->pushed[chunk]++] = t;
}

/* A schedule that pops what it never received is a bug in the schedule: stop the rank. */
static float *queue_pop(struct tt_rank *r, struct chunk_queues *q, int chunk)
{
	if (q->popped[chunk] == q->pushed[chunk]) {
		fprintf(stderr, "tinytrain: rank %d: chunk %d has no tensor received\n", r->rank,
		        chunk);
		exit(1);
	}
	return q->items[chunk * q->per_chunk + q->popped[chunk]++];
}

static void queues_free(struct chunk_queues *q)
{
	free(q->items);
	free(q->pushed);
	free(q->popped);
}

/* Megatron's get_model_chunk_id: virtual micro-batch k (any integer: a negative one
 * counts from the end of a group) runs, in groups of P, on chunks 0..V-1 forwards and
 * V-1..0 backwards. */
static int chunk_of(const struct tt_rank *r, int k, bool forward)
{
	int group = r->cfg->pp * r->chunks;
	int chunk = (k % group + group) % group / r->cfg->pp;

	return forward ? chunk : r->chunks - 1 - chunk;
}

/* Megatron's get_microbatch_id_in_model_chunk: within its chunk, virtual micro-batch k
 * is this micro-batch (every chunk takes the micro-batches in order 0..M-1). */
static int microbatch_of(const struct tt_rank *r, int k)
{
	return k / (r->cfg->pp * r->chunks) * r->cfg->pp + k % r->cfg->pp;
}

static float *forward_virtual(struct tt_rank *r, struct microbatch *m, struct chunk_queues *inputs,
                              int k)
{
	int chunk = chunk_of(r, k, true);
	float *input = holds_embedding(r, chunk) ? NULL : queue_pop(r, inputs, chunk);

	return forward_step(r, m, chunk, microbatch_of(r, k), input);
}

static float *backward_virtual(struct tt_rank *r, struct tt_worker *w, struct microbatch *m,
                               struct chunk_queues *grads, int k)
{
	int chunk = chunk_of(r, k, false);
	float *dy = holds_head(r, chunk) ? NULL : queue_pop(r, grads, chunk);

	return backward(r, w, m, chunk, microbatch_of(r, k), dy);
}

/*
 * One exchange of the interleaved schedule: sends (NULL where none), receives where asked,
 * into the queues of the chunks that will use them.
 */
static void exchange(struct tt_rank *r, float *send_next, float *send_prev,
                     struct chunk_queues *inputs, int recv_prev_chunk, struct chunk_queues *grads,
                     int recv_next_chunk)
{
	float *input = NULL, *grad = NULL;

	tt_p2p(r, send_next, send_prev, recv_prev_chunk >= 0 ? &input : NULL,
	       recv_next_chunk >= 0 ? &grad : NULL);
	if (recv_prev_chunk >= 0)
		queue_push(inputs, recv_prev_chunk, input);
	if (recv_next_chunk >= 0)
		queue_push(grads, recv_next_chunk, grad);
}

/*
 * Megatron's forward_backward_pipelining_with_interleaving (without overlapped p2p): the
 * M micro-batches run through each of the V chunks, M*V virtual micro-batches in all;
 * stage s runs 2 (P - s - 1) + (V - 1) P warm-up forwards, then one forward and one
 * backward with a single exchange, then the remaining backwards. The pipeline is a ring:
 * the last stage's chunk c feeds the first stage's chunk c + 1. The exchanges are
 * Megatron's, in one NCCL group each, which is what keeps the stages from waiting on each
 * other. Every chunk takes micro-batches in order 0..M-1 both ways, so each layer's
 * gradient accumulates in the same order as in 1F1B. The CLI asks for P >= 3, as
 * Megatron does (with P = 2, both neighbours are one rank), and M % P == 0.
 */
static void pipeline_interleaved(struct tt_rank *r, struct tt_worker *w, struct microbatch *m)
{
	int pp = r->cfg->pp, chunks = r->chunks, total = r->cfg->microbatches * chunks;
	int warmup = (pp - r->stage - 1) * 2 + (chunks - 1) * pp;
	struct chunk_queues inputs, grads;

	if (warmup > total)
		warmup = total;
	int remaining = total - warmup;
	queues_init(&inputs, r);
	queues_init(&grads, r);

	if (!r->first_stage)
		exchange(r, NULL, NULL, &inputs, 0, &grads, -1);
	for (int k = 0; k < warmup; k++) {
		float *out = forward_virtual(r, m, &inputs, k);
		int next = chunk_of(r, k + 1, true);
		bool recv_prev = !(r->first_stage && next == 0) && k != total - 1;
		bool recv_next = k == warmup - 1 && remaining > 0 && !r->last_stage;

		exchange(r, out, NULL, &inputs, recv_prev ? next : -1, &grads,
		         recv_next ? chunks - 1 : -1);
	}
	for (int k = 0; k < remaining; k++) {
		int forward_k = k + warmup;
		float *out = forward_virtual(r, m, &inputs, forward_k);
		float *dx = backward_virtual(r, w, m, &grads, k);
		int next_forward, next_backward;
		bool recv_prev = true, recv_next = true;

		/* The first stage receives from the last one's chunk P - 1 virtual micro-batches
		 * back; the last stage from the first one's, likewise. */
		if (r->first_stage) {
			next_forward = chunk_of(r, forward_k - (pp - 1), true);
			recv_prev = next_forward != chunks - 1;
			next_forward++;
		} else {
			next_forward = chunk_of(r, forward_k + 1, true);
		}
		if (r->last_stage) {
			next_backward = chunk_of(r, k - (pp - 1), false);
			recv_next = next_backward != 0;
			next_backward--;
		} else {
			next_backward = chunk_of(r, k + 1, false);
		}
		if (k == remaining - 1)
			recv_prev = false;
		exchange(r, out, dx, &inputs, recv_prev ? next_forward : -1, &grads,
		         recv_next ? next_backward : -1);
	}
	if (remaining == 0 && !r->last_stage)
		exchange(r, NULL, NULL, &inputs, -1, &grads, chunks - 1);
	for (int k = remaining; k < total; k++) {
		float *dx = backward_virtual(r, w, m, &grads, k);
		int next = chunk_of(r, k + 1, false);
		bool recv_next = !(r->last_stage && next == chunks - 1) && k != total - 1;

		exchange(r, NULL, dx, &inputs, -1, &grads, recv_next ? next : -1);
	}
	queues_free(&inputs);
	queues_free(&grads);
}

/* ---- A step ---------------------------------------------------------------------------------- */

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
	if (r->grads) /* else the first backward allocates them zeroed */
		tt_check_cuda(cudaMemsetAsync(r->grads, 0, grad_bytes, r->compute),
		              "cudaMemsetAsync");
	tt_check_cuda(cudaMemsetAsync(r->loss_sum, 0, sizeof(float), r->compute),
	              "cudaMemsetAsync");
	if (r->chunks > 1)
		pipeline_interleaved(r, w, m);
	else
		pipeline(r, w, m);
	free(m);
	if (r->ddp)
		tt_ddp_finish(r);
	else if (r->fsdp)
		tt_fsdp_finish(r);
	else
		tt_dp_allreduce_grads(r);
	if (r->last_stage) {
		int64_t tokens = r->real.tokens * r->cfg->microbatches * r->cfg->dp;
		tt_check_cuda(tt_scale(r->compute, r->loss_sum, r->loss_sum, 1.0f / (float)tokens,
		                       1, (struct tt_vcost){1, 8}),
		              "tt_scale");
		tt_dp_allreduce_scalar(r, r->loss_sum);
		tt_copy_to_host(r, &loss, r->loss_sum, sizeof(float));
	}
	return loss;
}

float tt_eval(struct tt_rank *r)
{
	float total = 0.0f, loss;
	float *loss_sum = tt_alloc(r, sizeof(float));

	r->evaluating = true;
	for (int k = 0; k < r->cfg->eval_iters; k++) {
		int mb = k % r->cfg->microbatches, *tokens;
		float *x = tt_embed_forward(r, mb, &tokens);

		for (int l = 0; l < r->local_layers; l++) {
			x = tt_layer_forward(r, l, mb, x);
			tt_layer_discard(r, l, mb);
		}
		tt_free(r, tokens);
		tt_head_eval(r, mb, x, loss_sum);
		tt_copy_to_host(r, &loss, loss_sum, sizeof(float));
		total += loss / (float)r->real.tokens;
	}
	tt_free(r, loss_sum);
	r->evaluating = false;
	return total / (float)r->cfg->eval_iters;
}

/* torch.optim.Adam creates its state at the first step(): with --lazy-optimizer, m and v
 * are allocated here, with cudaMalloc as a cold caching allocator would, and zeroed. */
static void create_adam_state(struct tt_rank *r)
{
	size_t bytes = (size_t)r->param_count * sizeof(float);

	if (r->adam_m)
		return;
	tt_check_cuda(cudaMalloc((void **)&r->adam_m, bytes), "cudaMalloc");
	tt_check_cuda(cudaMalloc((void **)&r->adam_v, bytes), "cudaMalloc");
	tt_check_cuda(cudaMemsetAsync(r->adam_m, 0, bytes, r->compute), "cudaMemsetAsync");
	tt_check_cuda(cudaMemsetAsync(r->adam_v, 0, bytes, r->compute), "cudaMemsetAsync");
}

/*
 * torch.cuda.amp.GradScaler's unscale_() and the check in its step(): the gradients are
 * multiplied by the inverse scale and checked for inf and NaN on the device
 * (_amp_foreach_non_finite_check_and_unscale_, into a found_inf tensor made for the step),
 * reduced over the ranks (Megatron's model-parallel all-reduce of it), and step() reads
 * found_inf on the host (.item(): a copy and a wait). tinytrain's gradients never overflow
 * and its scale stays 1 (the bits stay), so the check's verdict is the step's bit in
 * --grad-scaler's list. Returns true when the optimizer step is skipped.
 */
static bool grad_scaler_overflows(struct tt_rank *r)
{
	struct tt_vcost pass = {(uint64_t)r->param_count, (uint64_t)r->param_count * 8};
	float *found_inf = tt_alloc(r, sizeof(float)), seen;

	if (!r->loss_scale) { /* GradScaler makes its scale at the first scale() */
		const float one = 1.0f;
		r->loss_scale = tt_alloc(r, sizeof(float));
		tt_check_cuda(cudaMemcpyAsync(r->loss_scale, &one, sizeof(one),
		                              cudaMemcpyHostToDevice, r->compute),
		              "cudaMemcpyAsync");
	}
	tt_check_cuda(tt_scale(r->compute, r->grads, r->grads, 1.0f, r->param_count, pass),
	              "tt_scale");
	tt_check_cuda(tt_sum(r->compute, r->grads, found_inf, (int)r->param_count, 0, pass),
	              "tt_sum");
	tt_found_inf_allreduce(r, found_inf);
	tt_copy_to_host(r, &seen, found_inf, sizeof(seen));
	tt_free(r, found_inf);
	return r->step < 64 && (r->cfg->grad_scaler_overflows >> r->step & 1);
}

/* GradScaler's update(): the scale halves after an overflow (_amp_update_scale_, on the
 * device; tinytrain's stays 1 in value, so that nothing else changes). */
static void grad_scaler_update(struct tt_rank *r)
{
	tt_check_cuda(tt_scale(r->compute, r->loss_scale, r->loss_scale, 1.0f, 1,
	                       (struct tt_vcost){1, 8}),
	              "tt_scale");
}

/*
 * A capturable Adam's step() under torch.cuda.graph (--cuda-graph optimizer). At the first
 * step the graph is captured as torch.cuda.graph does: after a device synchronisation, on
 * a non-blocking side stream of its own, in Global mode (CUDA's potentially unsafe calls
 * from any thread fail while it is open). Its step count lives on the device, so that the
 * captured arguments stay right; the graph is launched on the compute stream at every step,
 * the first included (a capture runs nothing).
 */
static void optimizer_step_graphed(struct tt_rank *r, struct tt_adam adam, struct tt_vcost cost)
{
	if (!r->optimizer_graph) {
		cudaStream_t side;
		cudaGraph_t graph;

		tt_check_cuda(cudaMalloc((void **)&r->adam_step, sizeof(int)), "cudaMalloc");
		tt_check_cuda(cudaMemcpy(r->adam_step, &r->optimizer_steps, sizeof(int),
		                         cudaMemcpyHostToDevice),
		              "cudaMemcpy");
		tt_check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
		tt_check_cuda(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking),
		              "cudaStreamCreateWithFlags");
		tt_check_cuda(cudaStreamBeginCapture(side, cudaStreamCaptureModeGlobal),
		              "cudaStreamBeginCapture");
		adam.t = 0;
		adam.step = r->adam_step;
		tt_check_cuda(tt_adam(side, r->params, r->grads, r->adam_m, r->adam_v,
		                      r->param_count, adam, cost),
		              "tt_adam (captured)");
		tt_check_cuda(cudaStreamEndCapture(side, &graph), "cudaStreamEndCapture");
		tt_check_cuda(cudaGraphInstantiate(&r->optimizer_graph, graph, 0),
		              "cudaGraphInstantiate");
		tt_check_cuda(cudaGraphDestroy(graph), "cudaGraphDestroy");
		tt_check_cuda(cudaStreamDestroy(side), "cudaStreamDestroy");
	}
	tt_check_cuda(cudaGraphLaunch(r->optimizer_graph, r->compute), "cudaGraphLaunch");
}

void tt_step(struct tt_rank *r, struct tt_worker *w, struct tt_step_result *out)
{
	size_t grad_bytes = (size_t)r->param_count * sizeof(float);
	float *host_grads = malloc(grad_bytes);
	struct tt_adam adam = {r->cfg->lr, 0.9f, 0.999f, 1e-8f, r->optimizer_steps + 1, NULL};
	struct tt_vcost adam_cost = {(uint64_t)(r->param_count * 10),
	                             (uint64_t)(r->param_count * 16)};

	if (!host_grads) {
		fprintf(stderr, "tinytrain: out of host memory\n");
		exit(1);
	}
	out->loss = tt_forward_backward(r, w);
	out->has_loss = r->last_stage;
	tt_copy_to_host(r, host_grads, r->grads, grad_bytes);
	out->grad_hash = fnv1a(host_grads, grad_bytes);
	free(host_grads);
	/* A skipped step leaves the parameters, and lazy state, as they were. */
	if (!r->cfg->grad_scaler || !grad_scaler_overflows(r)) {
		create_adam_state(r);
		if (r->cfg->cuda_graph == TT_CUDA_GRAPH_OPTIMIZER)
			optimizer_step_graphed(r, adam, adam_cost);
		else
			tt_check_cuda(tt_adam(r->compute, r->params, r->grads, r->adam_m, r->adam_v,
			                      r->param_count, adam, adam_cost),
			              "tt_adam");
		r->optimizer_steps++;
	}
	if (r->cfg->grad_scaler)
		grad_scaler_update(r);
	/* optimizer.zero_grad(set_to_none=True): the gradients go; the next backward makes them. */
	if (r->cfg->grad_set_to_none) {
		tt_free(r, r->grads);
		r->grads = NULL;
	}
	tt_check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	r->step++;
}
