/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The planning problem of a decoder model's job on a named cluster: the layer from layer.def
 * and cost.c,
 * the embedding and head, static memory, pipeline and data-parallel communication.
 *
 * What is assumed beyond cost.c (each an estimate; none is calibrated):
 * - Static memory follows Megatron-LM's mixed-precision accounting: per parameter, the bf16
 *   weight (2 bytes) and fp32 gradient buffer (4), plus the fp32 master weight and Adam's two
 *   moments (12), divided by d under the distributed optimizer: 18 bytes, or 6 + 12/d. The
 *   CUDA context, NCCL buffers, allocator fragmentation and activation-gradient buffers are
 *   not counted: lower the budget to leave room for them.
 * - Parameters per rank: the stage's layers (model.c), the vocabulary-parallel word embedding
 *   (v·h/t) and learned position embedding (s·h; none with rotary) on the first stage, the
 *   final norm (model.c) on the last, which also holds the output layer (v·h/t): its own
 *   weights when untied, a copy of the word embedding when tied and p > 1.
 * - Pipeline: Megatron's scatter-gather send/recv moves 2sbh/t bytes per rank between
 *   neighbour stages (t·d ranks apart); the all-gather that follows is not counted. Sends do
 *   not stall the sender.
 * - After the last backward: the fp32 gradients are all-reduced over d ranks (reduce-scatter
 *   plus a bf16 all-gather of the weights under the distributed optimizer), not overlapped
 *   with the backward; with p > 1 and tied embeddings the first and last stages also
 *   all-reduce the word embedding's gradient. Adam then reads and writes 28 bytes per parameter it
 * owns (fp32 gradient, master weight and moments) and writes 2 (the bf16 weight), memory-bound.
 * - Embedding, per rank: vocabulary-parallel lookup (2Nh written), its all-reduce (a
 *   reduce-scatter under SP), learned position add (4Rh) and dropout (5Rh); it keeps the
 *   dropout mask (Rh). Backward: dropout (5Rh) and position gradient (2Rh), a scatter-add
 *   into the fp32 word-embedding gradient (10Nh), SP's all-gather. N = b·s tokens, R = N/t under
 * SP.
 * - Head and loss: final LayerNorm (4Rh; backward 16Rh), SP's all-gather, the output GEMM
 *   (2Nhv/t FLOPs, its roofline as cost.c's GEMMs) and the vocabulary-parallel cross-entropy
 *   (16Nv/t bytes forward, 8Nv/t backward, three all-reduces of 4N bytes). It keeps the
 *   LayerNorm and GEMM inputs and the fp32 logits: 4Nh + 4Nv/t, or 4Rh + 4Nv/t under SP
 *   (Korthikanti et al., section 4.3). The backward all-reduces (SP: reduce-scatters) the
 *   input gradient, not overlapped.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refuse.h"
#include "cost.h"
#include "problem.h"

/* A mask over layer.def's ids (bit id) as a mask over the problem's indices (index[id]). */
static uint32_t remap(uint32_t mask, const int8_t *index, int count)
{
	uint32_t out = 0;

	for (int id = 0; id < count; id++)
		if ((mask & (1u << id)) && index[id] >= 0)
			out |= 1u << index[id];
	return out;
}

/*
 * The layer of layer.def with cost.c's times: the ops and groups the model's architecture
 * has, in layer.def's order, numbered from 0 without the absent ones.
 */
static void fill_layer(const struct lynx_layer_cost *lc, struct lynx_problem_layer *l)
{
	const struct lynx_layer_shape *shape = &lc->shape;
	int8_t op_index[LYNX_OP_COUNT], group_index[LYNX_GROUP_COUNT];

	/* A model has no recorded collectives to map (problem.h). */
	for (int k = 0; k < LYNX_PROBLEM_MAX_COLLECTIVES; k++)
		l->tp_fwd_op[k] = l->tp_bwd_op[k] = -1;
	for (int op = 0; op < LYNX_OP_COUNT; op++) {
		struct lynx_problem_op *o = &l->ops[l->n_ops];

		op_index[op] = -1;
		if (!shape->ops[op].present)
			continue;
		op_index[op] = (int8_t)l->n_ops++;
		snprintf(o->name, sizeof(o->name), "%s", shape->ops[op].name);
		o->fwd_s = lc->op_fwd_s[op];
		o->bwd_s = lc->op_bwd_s[op];
	}
	for (int i = 0; i < LYNX_COMM_COUNT; i++) {
		struct lynx_problem_op *o = &l->ops[op_index[lynx_layer_comms[i].before]];

		o->wait_fwd_s += lc->comm_fwd_s[i];
		o->wait_bwd_s += lc->comm_bwd_exposed_s[i];
	}
	for (uint32_t op = 0; op < l->n_ops; op++) {
		struct lynx_problem_op *o = &l->ops[op];

		o->rerun_s = o->fwd_s + o->wait_fwd_s;
		l->fwd_s += o->fwd_s + o->wait_fwd_s;
		l->bwd_s += o->bwd_s + o->wait_bwd_s;
	}
	for (int g = 0; g < LYNX_GROUP_COUNT; g++)
		group_index[g] = shape->groups[g].present ? (int8_t)l->n_groups++ : -1;
	for (int g = 0; g < LYNX_GROUP_COUNT; g++) {
		const struct lynx_layer_group_shape *gs = &shape->groups[g];
		struct lynx_problem_group *pg;

		if (group_index[g] < 0)
			continue;
		pg = &l->groups[group_index[g]];
		snprintf(pg->name, sizeof(pg->name), "%s", gs->name);
		pg->bytes = gs->bytes;
		pg->ops = remap(gs->ops, op_index, LYNX_OP_COUNT);
		pg->deps = remap(gs->deps, group_index, LYNX_GROUP_COUNT);
		pg->consumer = op_index[gs->consumer];
		pg->producer = -1;
		for (uint32_t op = 0; op < l->n_ops; op++) {
			if (!(pg->ops & (1u << op)))
				continue;
			pg->producer = (int32_t)op;
			pg->recompute_s += l->ops[op].rerun_s;
		}
	}
}

/* A GEMM of `flops` moving `bytes`, at the slower of its two rates (as cost.c). */
static double roofline(const struct lynx_layer_cost *lc, double flops, double bytes)
{
	double compute = flops / lc->gemm_flops_per_s, memory = bytes / lc->mem_bytes_per_s;

	return compute > memory ? compute : memory;
}

static void fill_embedding(const struct lynx_model_desc *m, const struct lynx_layer_cost *lc,
                           struct lynx_problem_part *e)
{
	double n = (double)lynx_model_tokens(m), h = m->hidden;
	double r = m->sp ? n / m->tp : n;
	uint64_t hidden_bytes = 2ull * lynx_model_tokens(m) * m->hidden;
	const struct lynx_link *tp = lc->tp_link;
	bool learned = m->arch.position == LYNX_POSITION_LEARNED, dropout = !m->arch.no_dropout;

	e->present = true;
	e->fwd_s =
	        (2 * n * h + ((learned ? 4 : 0) + (dropout ? 5 : 0)) * r * h) /
	                lc->mem_bytes_per_s +
	        lynx_cost_collective_s(tp, m->sp ? LYNX_COLL_REDUCE_SCATTER : LYNX_COLL_ALL_REDUCE,
	                               m->tp, hidden_bytes);
	e->bwd_s =
	        (((learned ? 2 : 0) + (dropout ? 5 : 0)) * r * h + 10 * n * h) /
	                lc->mem_bytes_per_s +
	        (m->sp ? lynx_cost_collective_s(tp, LYNX_COLL_ALL_GATHER, m->tp, hidden_bytes) : 0);
	e->act_bytes =
	        dropout ? (m->sp ? lynx_model_tokens(m) / m->tp : lynx_model_tokens(m)) * m->hidden
	                : 0;
}

static void fill_head(const struct lynx_model_desc *m, const struct lynx_layer_cost *lc,
                      struct lynx_problem_part *hd)
{
	uint64_t tokens = lynx_model_tokens(m);
	double n = (double)tokens, h = m->hidden, vt = (double)m->vocab / m->tp;
	double r = m->sp ? n / m->tp : n;
	uint64_t hidden_bytes = 2ull * tokens * m->hidden;
	uint64_t loss_bytes = 4ull * tokens;
	const struct lynx_link *tp = lc->tp_link;
	double gemm = roofline(lc, 2 * n * h * vt, 2 * n * h + 2 * n * vt + 2 * h * vt);
	double gather =
	        m->sp ? lynx_cost_collective_s(tp, LYNX_COLL_ALL_GATHER, m->tp, hidden_bytes) : 0;
	double dgrad_comm = lynx_cost_collective_s(
	        tp, m->sp ? LYNX_COLL_REDUCE_SCATTER : LYNX_COLL_ALL_REDUCE, m->tp, hidden_bytes);
	uint64_t kept_hidden = 4ull * (m->sp ? tokens / m->tp : tokens) * m->hidden;

	hd->present = true;
	hd->fwd_s = (4 * r * h + 16 * n * vt) / lc->mem_bytes_per_s + gather + gemm +
	            3 * lynx_cost_collective_s(tp, LYNX_COLL_ALL_REDUCE, m->tp, loss_bytes);
	hd->bwd_s =
	        (16 * r * h + 8 * n * vt) / lc->mem_bytes_per_s + gather + 2 * gemm + dgrad_comm;
	hd->act_bytes = kept_hidden + 4ull * tokens * (m->vocab / m->tp);
}

/* Megatron's mixed precision: 2 + 4 bytes per parameter, plus 12 over d_opt ranks. */
static uint64_t static_bytes(uint64_t params, uint32_t d_opt)
{
	return 6 * params + 12 * params / d_opt;
}

static void fill_stage(const struct lynx_model_desc *m, const struct lynx_cluster *c,
                       const struct lynx_layer_cost *lc, const struct lynx_problem_options *opt,
                       uint32_t s, uint32_t first_layer, struct lynx_problem_stage *st)
{
	uint32_t p = m->pp, micro = lynx_model_micro_batches(m);
	/* Gradients are reduced, and optimizer states sharded, over the d·c ranks that hold the
	 * same weights; Megatron orders ranks TP, CP, DP, PP. */
	uint32_t grad_ranks = m->dp * lynx_model_cp(m);
	uint32_t d_opt = opt->distributed_optimizer ? grad_ranks : 1;
	uint64_t word = (uint64_t)m->vocab / m->tp * m->hidden;
	uint64_t p2p_bytes = 2ull * lynx_model_tokens(m) * m->hidden / m->tp;
	const struct lynx_link *pp_link = lynx_cost_link(c, 2, m->tp * grad_ranks);
	const struct lynx_link *dp_link = lynx_cost_link(c, grad_ranks, m->tp);

	st->index = s;
	st->layers = opt->stage_layers ? opt->stage_layers[s] : lynx_model_stage_layers(m);
	st->first_layer = first_layer;
	st->inflight = lynx_model_inflight(m, s);
	st->warmup = p - s - 1 < micro ? p - s - 1 : micro;
	st->chunk_warmup = lynx_model_chunk_warmup(m, s);
	st->passes_inflight = st->chunk_warmup + 1 < micro * lynx_model_vp(m)
	                              ? st->chunk_warmup + 1
	                              : micro * lynx_model_vp(m);
	st->params = st->layers * lynx_model_layer_params_per_rank(m);
	if (s == 0) {
		fill_embedding(m, lc, &st->embedding);
		st->params += word;
		if (m->arch.position == LYNX_POSITION_LEARNED)
			st->params += (uint64_t)m->seq * m->hidden;
	}
	if (s == p - 1) {
		fill_head(m, lc, &st->head);
		st->params += lynx_model_norm_params(m) + (p > 1 || m->arch.untied ? word : 0);
	}
	st->static_bytes = static_bytes(st->params, d_opt);
	/* Interleaved, the first stage receives its later chunks' activations from the last,
	 * and the last stage its earlier chunks' gradients from the first. */
	if (s > 0 || lynx_model_vp(m) > 1)
		st->recv_fwd_s = lynx_cost_collective_s(pp_link, LYNX_COLL_SEND_RECV, 2, p2p_bytes);
	if (s < p - 1 || lynx_model_vp(m) > 1)
		st->recv_bwd_s = lynx_cost_collective_s(pp_link, LYNX_COLL_SEND_RECV, 2, p2p_bytes);
	if (opt->distributed_optimizer)
		st->grad_reduce_s = lynx_cost_collective_s(dp_link, LYNX_COLL_REDUCE_SCATTER,
		                                           grad_ranks, 4 * st->params) +
		                    lynx_cost_collective_s(dp_link, LYNX_COLL_ALL_GATHER,
		                                           grad_ranks, 2 * st->params);
	else
		st->grad_reduce_s = lynx_cost_collective_s(dp_link, LYNX_COLL_ALL_REDUCE,
		                                           grad_ranks, 4 * st->params);
	if (p > 1 && (s == 0 || s == p - 1) && !m->arch.untied)
		st->grad_reduce_s +=
		        lynx_cost_collective_s(lynx_cost_link(c, 2, (p - 1) * m->tp * grad_ranks),
		                               LYNX_COLL_ALL_REDUCE, 2, 4 * word);
	st->optimizer_s = (28.0 * st->params / d_opt + 2.0 * st->params) / lc->mem_bytes_per_s;
}

static void add_window(struct lynx_window *w, uint32_t *n, enum lynx_window_kind kind,
                       int32_t layer, int32_t op, double capacity_s)
{
	if (w)
		w[*n] = (struct lynx_window){
		        .kind = kind, .layer = layer, .op = op, .capacity_s = capacity_s};
	(*n)++;
}

/* The stage's windows: TP by layer and op, then PP, then DP. NULL w: count only. */
static uint32_t list_windows(const struct lynx_problem_layer *l,
                             const struct lynx_problem_stage *st, struct lynx_window *w)
{
	uint32_t n = 0;

	for (uint32_t lay = 0; lay < st->layers; lay++)
		for (uint32_t op = 0; op < l->n_ops; op++) {
			if (l->ops[op].wait_fwd_s > 0)
				add_window(w, &n, LYNX_WINDOW_TP_FWD, (int32_t)lay, (int32_t)op,
				           l->ops[op].wait_fwd_s);
			if (l->ops[op].wait_bwd_s > 0)
				add_window(w, &n, LYNX_WINDOW_TP_BWD, (int32_t)lay, (int32_t)op,
				           l->ops[op].wait_bwd_s);
		}
	if (st->recv_fwd_s > 0)
		add_window(w, &n, LYNX_WINDOW_PP_RECV_FWD, -1, -1, st->recv_fwd_s);
	if (st->recv_bwd_s > 0)
		add_window(w, &n, LYNX_WINDOW_PP_RECV_BWD, -1, -1, st->recv_bwd_s);
	if (st->grad_reduce_s > 0)
		add_window(w, &n, LYNX_WINDOW_DP_GRAD, -1, -1, st->grad_reduce_s);
	return n;
}

int lynx_problem_from_model(const struct lynx_model_desc *m, const struct lynx_cluster *c,
                            const struct lynx_problem_options *opt, struct lynx_problem *p,
                            char *why, size_t len)
{
	static const struct lynx_problem_options defaults;
	struct lynx_model_desc even = *m;
	struct lynx_layer_cost lc;
	uint32_t first = 0;
	char a[64], b[64];
	int err;

	*p = (struct lynx_problem){0};
	if (!opt)
		opt = &defaults;
	if (opt->stage_layers) {
		err = lynx_model_validate_split(m, opt->stage_layers, why, len);
		if (err)
			return err;
		/* cost.c prices one layer, which L and the split do not change; it validates
		 * the uniform way, so it gets a description with L = p. */
		even.layers = m->pp;
	}
	err = lynx_cost_layer(&even, c, &lc, why, len);
	if (err)
		return err;
	p->model = *m;
	p->cluster = c;
	p->micro_batches = lynx_model_micro_batches(m);
	p->virtual_stages = lynx_model_vp(m);
	p->offload_share_set = opt->offload_share_set;
	p->offload_share_bp = opt->offload_share_bp;
	p->budget_bytes = opt->budget_bytes ? opt->budget_bytes : c->gpu->mem_bytes;
	p->search_seconds = opt->search_seconds;
	p->search_one_stage = opt->search_one_stage;
	p->searched_stage = opt->searched_stage;
	p->d2h = p->h2d = c->host;
	p->interference = opt->interference.compute > 0 ? opt->interference : c->interference;
	p->gpus = m->tp * m->pp * m->dp * lynx_model_cp(m);
	p->peak_flops = c->gpu->peak_flops;
	p->model_flops = lynx_model_iter_flops(m);
	fill_layer(&lc, &p->layer);

	p->n_stages = m->pp;
	p->stages = calloc(m->pp, sizeof(*p->stages));
	if (!p->stages)
		return -ENOMEM;
	for (uint32_t s = 0; s < m->pp; s++) {
		struct lynx_problem_stage *st = &p->stages[s];

		fill_stage(m, c, &lc, opt, s, first, st);
		first += st->layers;
		if (st->static_bytes > p->budget_bytes) {
			err = lynx_policy_refuse(
			        why, len,
			        "the memory budget %s is below stage %u's static memory %s "
			        "(weights, gradients and optimizer states of %llu parameters)",
			        lynx_policy_bytes(p->budget_bytes, a, sizeof(a)), s,
			        lynx_policy_bytes(st->static_bytes, b, sizeof(b)),
			        (unsigned long long)st->params);
			goto out_free;
		}
		st->n_windows = list_windows(&p->layer, st, NULL);
		st->windows = calloc(st->n_windows ? st->n_windows : 1, sizeof(*st->windows));
		if (!st->windows) {
			err = -ENOMEM;
			goto out_free;
		}
		list_windows(&p->layer, st, st->windows);
	}
	return 0;

out_free:
	lynx_problem_free(p);
	return err;
}

struct lynx_pass lynx_problem_pass(const struct lynx_problem *p, uint32_t s, uint32_t a)
{
	const uint32_t v = lynx_problem_chunks(p), n = p->n_stages, passes = p->micro_batches * v;
	const uint32_t w = v > 1 ? p->stages[s].chunk_warmup : p->stages[s].warmup;
	struct lynx_pass pass = {.forward = true};
	uint32_t k = a;

	if (a >= w) {
		uint32_t i = a - w, steady = passes - w;

		if (i < 2 * steady) {
			pass.forward = i % 2 == 0;
			k = pass.forward ? w + i / 2 : i / 2;
		} else {
			pass.forward = false;
			k = steady + (i - 2 * steady);
		}
	}
	if (v == 1) {
		pass.microbatch = k;
		return pass;
	}
	pass.microbatch = k / (n * v) * n + k % n;
	pass.chunk = k % (n * v) / n;
	if (!pass.forward)
		pass.chunk = v - 1 - pass.chunk;
	return pass;
}

bool lynx_problem_pass_waits_for(const struct lynx_problem *p, uint32_t s,
                                 const struct lynx_pass *pass, uint32_t *from_stage,
                                 uint32_t *from_chunk)
{
	const uint32_t n = p->n_stages, v = lynx_problem_chunks(p);

	if (pass->forward) {
		if (s == 0 && pass->chunk == 0)
			return false;
		*from_stage = s ? s - 1 : n - 1;
		*from_chunk = s ? pass->chunk : pass->chunk - 1;
		return true;
	}
	if (s == n - 1 && pass->chunk == v - 1)
		return false;
	*from_stage = s < n - 1 ? s + 1 : 0;
	*from_chunk = s < n - 1 ? pass->chunk : pass->chunk + 1;
	return true;
}

void lynx_problem_free(struct lynx_problem *p)
{
	if (p->stages)
		for (uint32_t s = 0; s < p->n_stages; s++)
			free(p->stages[s].windows);
	free(p->stages);
	p->stages = NULL;
	p->n_stages = 0;
}

const char *lynx_problem_window_kind_name(enum lynx_window_kind kind)
{
	static const char *const names[LYNX_WINDOW_KIND_COUNT] = {
#define LYNX_WINDOW_KIND_NAME(id, name) [LYNX_WINDOW_##id] = name,
	        LYNX_WINDOW_KIND_LIST(LYNX_WINDOW_KIND_NAME)
#undef LYNX_WINDOW_KIND_NAME
	};

	return (unsigned)kind < LYNX_WINDOW_KIND_COUNT ? names[kind] : "unknown";
}

enum lynx_window_kind lynx_problem_find_window_kind(const char *name)
{
	for (int k = 0; k < LYNX_WINDOW_KIND_COUNT; k++)
		if (!strcmp(lynx_problem_window_kind_name(k), name))
			return (enum lynx_window_kind)k;
	return LYNX_WINDOW_KIND_COUNT;
}

int lynx_problem_find_window(const struct lynx_problem_stage *st, enum lynx_window_kind kind,
                             int32_t layer, int32_t op)
{
	for (uint32_t w = 0; w < st->n_windows; w++)
		if (st->windows[w].kind == kind && st->windows[w].layer == layer &&
		    st->windows[w].op == op)
			return (int)w;
	return -1;
}

int lynx_problem_find_op(const struct lynx_problem_layer *l, const char *name)
{
	for (uint32_t op = 0; op < l->n_ops; op++)
		if (!strcmp(l->ops[op].name, name))
			return (int)op;
	return -1;
}

int lynx_problem_find_group(const struct lynx_problem_layer *l, const char *name)
{
	for (uint32_t g = 0; g < l->n_groups; g++)
		if (!strcmp(l->groups[g].name, name))
			return (int)g;
	return -1;
}

uint64_t lynx_problem_max_static_bytes(const struct lynx_problem *p)
{
	uint64_t max = 0;

	for (uint32_t s = 0; s < p->n_stages; s++)
		if (p->stages[s].static_bytes > max)
			max = p->stages[s].static_bytes;
	return max;
}

/* A slowdown as applied: at least 1 (0 is unset). */
static double slowdown(double x)
{
	return x > 1 ? x : 1;
}

double lynx_overlap(const struct lynx_interference *f, double work_s, double comm_start_s,
                    double comm_s, double *comm_end_s)
{
	double c = slowdown(f ? f->compute : 1), k = slowdown(f ? f->comm : 1), t, work_left;

	if (comm_start_s < 0)
		comm_start_s = 0;
	if (!(work_s > comm_start_s) || !(comm_s > 0)) {
		*comm_end_s = comm_start_s + (comm_s > 0 ? comm_s : 0);
		return work_s > 0 ? work_s : 0;
	}
	/* Alone until the transfer starts, then both slowed until one is done. */
	t = comm_start_s;
	work_left = work_s - comm_start_s;
	if (work_left * c <= comm_s * k) {
		t += work_left * c;
		*comm_end_s = t + (comm_s - work_left * c / k);
		return t;
	}
	t += comm_s * k;
	*comm_end_s = t;
	return t + (work_left - comm_s * k / c);
}

void lynx_window_delay_lines(const struct lynx_interference *f, double *cap_share,
                             double *shared_slope)
{
	double c = slowdown(f ? f->compute : 1), k = slowdown(f ? f->comm : 1);

	*cap_share = 1 - k + k / c;
	*shared_slope = c * (1 - 1 / k);
}

double lynx_window_delay(const struct lynx_interference *f, double work_s, double idle_s)
{
	double cap_share, shared_slope, delay;

	if (!(work_s > 0))
		return 0;
	if (!(idle_s > 0))
		return work_s;
	lynx_window_delay_lines(f, &cap_share, &shared_slope);
	delay = work_s - cap_share * idle_s;
	if (shared_slope * work_s > delay)
		delay = shared_slope * work_s;
	return delay > 0 ? delay : 0;
}
