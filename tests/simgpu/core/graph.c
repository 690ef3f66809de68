/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CUDA graphs: stream capture (what may be recorded, what fails and invalidates the
 * capture, as CUDA's rules say), instantiation, and launch (every recorded op booked
 * again, after the ops it depends on).
 *
 * Sizes: captures are few (one per capturing stream), graphs tens to thousands of nodes;
 * capture end walks the streams, the events and the graph (O(nodes + edges)); a launch
 * books every node once.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define GRAPH_MAGIC 0x6A7Au
#define EXEC_MAGIC 0xE8ECu

/* One capture sequence: begun on `origin`, possibly joined by other streams. */
struct simgpu_capture {
	uint64_t id;
	CUstreamCaptureMode mode;
	pthread_t thread; /* the thread that began it */
	bool invalidated;
	struct CUstream_st *origin;
	struct CUgraph_st *graph;
	struct simgpu_capture *next;
};

struct CUgraph_st {
	uint32_t magic;
	bool capturing; /* still being captured into: neither instantiable nor destroyable */
	struct CUgraphNode_st **nodes;
	size_t count, cap;
	struct CUgraph_st *next;
};

/* A node of an executable graph: its own copy of the op, dependencies by index. */
struct exec_node {
	struct simgpu_op op;
	uint32_t *deps;
	size_t ndeps;
};

struct CUgraphExec_st {
	uint32_t magic;
	struct exec_node *nodes;
	size_t count;
	uint64_t last_end; /* end of its latest launch: the next one starts after it */
	struct CUgraphExec_st *next;
};

/* ---- Node sets ---------------------------------------------------------------------- */

static bool set_reserve(struct simgpu_node_set *set, size_t count)
{
	if (count <= set->cap)
		return true;
	size_t cap = set->cap ? 2 * set->cap : 4;
	while (cap < count)
		cap *= 2;
	struct CUgraphNode_st **items = realloc(set->items, cap * sizeof(*items));
	if (!items)
		return false;
	set->items = items;
	set->cap = cap;
	return true;
}

static void set_free(struct simgpu_node_set *set)
{
	free(set->items);
	*set = (struct simgpu_node_set){0};
}

static bool set_contains(const struct simgpu_node_set *set, const struct CUgraphNode_st *node)
{
	for (size_t i = 0; i < set->count; i++)
		if (set->items[i] == node)
			return true;
	return false;
}

static bool set_copy(struct simgpu_node_set *dst, const struct simgpu_node_set *src)
{
	if (!set_reserve(dst, src->count))
		return false;
	if (src->count)
		memcpy(dst->items, src->items, src->count * sizeof(*src->items));
	dst->count = src->count;
	return true;
}

/* Appends src to dst, duplicates and all: O(|src|). */
static bool set_append(struct simgpu_node_set *dst, const struct simgpu_node_set *src)
{
	if (!set_reserve(dst, dst->count + src->count))
		return false;
	if (src->count)
		memcpy(dst->items + dst->count, src->items, src->count * sizeof(*src->items));
	dst->count += src->count;
	return true;
}

/* dst |= src; O(|dst| |src|), both small (a stream's open branches). */
static bool set_union(struct simgpu_node_set *dst, const struct simgpu_node_set *src)
{
	for (size_t i = 0; i < src->count; i++) {
		if (set_contains(dst, src->items[i]))
			continue;
		if (!set_reserve(dst, dst->count + 1))
			return false;
		dst->items[dst->count++] = src->items[i];
	}
	return true;
}

/* ---- Ops -------------------------------------------------------------------------------- */

/* A copy of op's argument for one more queued effect; NULL if out of memory. */
static void *op_clone_arg(const struct simgpu_op *op)
{
	void *copy = malloc(op->arg_bytes ? op->arg_bytes : 1);

	if (!copy)
		return NULL;
	memcpy(copy, op->arg, op->arg_bytes);
	if (op->relocate)
		op->relocate(copy);
	return copy;
}

static void node_free(struct CUgraphNode_st *node)
{
	set_free(&node->deps);
	free(node->op.arg);
	free(node);
}

/* ---- Capture state ------------------------------------------------------------------- */

static bool blocking_stream(const struct CUstream_st *s)
{
	return !s->legacy && !(s->flags & CU_STREAM_NON_BLOCKING);
}

void capture_invalidate_locked(struct simgpu_capture *capture)
{
	capture->invalidated = true;
}

/* A blocking stream that captures: the legacy stream would implicitly wait for it. */
static bool blocking_stream_captures_locked(void)
{
	for (struct simgpu_capture *c = simgpu.captures; c; c = c->next)
		for (struct CUstream_st *s = simgpu.streams; s; s = s->next)
			if (s->capture == c && blocking_stream(s))
				return true;
	return false;
}

static void invalidate_blocking_captures_locked(void)
{
	for (struct CUstream_st *s = simgpu.streams; s; s = s->next)
		if (s->capture && blocking_stream(s))
			capture_invalidate_locked(s->capture);
}

CUresult capture_admit_locked(struct CUstream_st *stream, enum capture_use use)
{
	if (!simgpu.captures)
		return CUDA_SUCCESS;
	if (stream->legacy && blocking_stream_captures_locked()) {
		invalidate_blocking_captures_locked();
		return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	}
	if (!stream->capture)
		return CUDA_SUCCESS;
	if (use == CAPTURE_REFUSE) {
		capture_invalidate_locked(stream->capture);
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	}
	return stream->capture->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}

/* Does capture c forbid potentially unsafe calls on the calling thread? The thread's own
 * mode is always Global (simgpu has no cuThreadExchangeStreamCaptureMode). */
static bool prohibits_unsafe(const struct simgpu_capture *c)
{
	if (c->mode == CU_STREAM_CAPTURE_MODE_RELAXED)
		return false;
	return c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL || pthread_equal(c->thread, pthread_self());
}

CUresult capture_check_unsafe_locked(void)
{
	CUresult status = CUDA_SUCCESS;

	for (struct simgpu_capture *c = simgpu.captures; c; c = c->next) {
		if (!prohibits_unsafe(c))
			continue;
		capture_invalidate_locked(c);
		status = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	}
	return status;
}

/* Records op as a node of the stream's capture, after the stream's dependencies. */
static CUresult capture_add_locked(struct CUstream_st *stream, const struct simgpu_op *op)
{
	struct simgpu_capture *c = stream->capture;
	struct CUgraph_st *g = c->graph;
	struct CUgraphNode_st *node = calloc(1, sizeof(*node));

	if (!node || !set_copy(&node->deps, &stream->deps) || !set_reserve(&stream->deps, 1))
		goto out_nomem;
	if (g->count == g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 16;
		struct CUgraphNode_st **nodes = realloc(g->nodes, cap * sizeof(*nodes));
		if (!nodes)
			goto out_nomem;
		g->nodes = nodes;
		g->cap = cap;
	}
	node->op = *op;
	node->index = (uint32_t)g->count;
	g->nodes[g->count++] = node;
	stream->deps.items[0] = node;
	stream->deps.count = 1;
	return CUDA_SUCCESS;

out_nomem:
	/* A graph missing an op would replay wrongly: the capture cannot succeed. */
	if (node)
		set_free(&node->deps);
	free(node);
	free(op->arg);
	capture_invalidate_locked(c);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult work_issue_locked(struct CUstream_st *stream, const struct simgpu_op *op,
                           uint64_t *end_out)
{
	CUresult status = capture_admit_locked(stream, CAPTURE_RECORD);
	uint64_t end = 0;

	if (status == CUDA_SUCCESS && stream->capture) {
		status = capture_add_locked(stream, op);
	} else if (status == CUDA_SUCCESS) {
		end = sched_book_locked(stream, op->res, op->work_ns, op->name, NULL);
		if (op->effect)
			effects_push_locked(end, op->effect, op->arg);
		else
			free(op->arg);
	} else {
		free(op->arg);
	}
	if (end_out)
		*end_out = end;
	return status;
}

void capture_event_forget_locked(struct CUevent_st *event)
{
	event->capture = NULL;
	set_free(&event->deps);
}

CUresult capture_event_record_locked(struct CUevent_st *event, struct CUstream_st *stream)
{
	if (!set_copy(&event->deps, &stream->deps)) {
		capture_invalidate_locked(stream->capture);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	event->capture = stream->capture;
	return CUDA_SUCCESS;
}

bool capture_stream_wait_locked(struct CUstream_st *stream, struct CUevent_st *event,
                                CUresult *status)
{
	struct simgpu_capture *ec = event->capture, *sc = stream->capture;

	if (!ec && (!sc || !event->recorded))
		return false; /* ordinary, or a never-recorded event: a no-op, as in CUDA */
	if (!ec) {
		/* Work outside the capture cannot be a dependency of a graph node. */
		capture_invalidate_locked(sc);
		*status = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
	} else if (sc && sc != ec) {
		capture_invalidate_locked(sc);
		capture_invalidate_locked(ec);
		*status = CUDA_ERROR_STREAM_CAPTURE_MERGE;
	} else if (sc) {
		*status = set_union(&stream->deps, &event->deps) ? CUDA_SUCCESS
		                                                 : CUDA_ERROR_OUT_OF_MEMORY;
		if (*status != CUDA_SUCCESS)
			capture_invalidate_locked(sc);
	} else if (stream->legacy) {
		/* The legacy stream cannot capture, so it cannot join. */
		capture_invalidate_locked(ec);
		*status = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	} else if (ec->invalidated) {
		*status = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	} else if (!set_copy(&stream->deps, &event->deps)) {
		capture_invalidate_locked(ec);
		*status = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		stream->capture = ec; /* the fork: this stream now records into ec */
		*status = CUDA_SUCCESS;
	}
	return true;
}

/* ---- Begin, end, query ---------------------------------------------------------------- */

static void graph_unlink_locked(struct CUgraph_st *graph)
{
	for (struct CUgraph_st **link = &simgpu.graphs; *link; link = &(*link)->next) {
		if (*link == graph) {
			*link = graph->next;
			return;
		}
	}
}

static void graph_free(struct CUgraph_st *graph)
{
	for (size_t i = 0; i < graph->count; i++)
		node_free(graph->nodes[i]);
	free(graph->nodes);
	graph->magic = 0;
	free(graph);
}

SIMGPU_EXPORT CUresult simgpu_capture_begin(struct CUstream_st *stream, CUstreamCaptureMode mode)
{
	CUresult status = CUDA_SUCCESS;

	if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
	    mode != CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	struct simgpu_capture *c = calloc(1, sizeof(*c));
	struct CUgraph_st *g = calloc(1, sizeof(*g));
	if (!c || !g) {
		free(c);
		free(g);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	simgpu_core_lock();
	if (stream->legacy)
		status = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	else if (stream->capture)
		status = CUDA_ERROR_ILLEGAL_STATE;
	if (status == CUDA_SUCCESS) {
		g->magic = GRAPH_MAGIC;
		g->capturing = true;
		g->next = simgpu.graphs;
		simgpu.graphs = g;
		*c = (struct simgpu_capture){.id = ++simgpu.next_capture_id,
		                             .mode = mode,
		                             .thread = pthread_self(),
		                             .origin = stream,
		                             .graph = g,
		                             .next = simgpu.captures};
		simgpu.captures = c;
		stream->capture = c;
		stream->deps.count = 0;
	}
	simgpu_core_unlock();
	if (status != CUDA_SUCCESS) {
		free(c);
		free(g);
	}
	return status;
}

/*
 * True if some stream that joined c has work that does not lead back to the origin: one
 * of its current dependencies is not an ancestor of (or one of) the origin's. A walk over
 * the origin's ancestors: O(nodes + edges).
 */
static bool capture_unjoined_locked(const struct simgpu_capture *c)
{
	struct CUgraph_st *g = c->graph;
	struct simgpu_node_set stack = {0};
	bool unjoined = false;

	for (size_t i = 0; i < g->count; i++)
		g->nodes[i]->mark = false;
	if (!set_copy(&stack, &c->origin->deps))
		return true; /* cannot tell: refuse rather than replay a wrong graph */
	while (stack.count) {
		struct CUgraphNode_st *n = stack.items[--stack.count];
		if (n->mark)
			continue;
		n->mark = true;
		if (!set_append(&stack, &n->deps)) {
			unjoined = true;
			break;
		}
	}
	set_free(&stack);
	for (struct CUstream_st *s = simgpu.streams; s && !unjoined; s = s->next) {
		if (s->capture != c || s == c->origin)
			continue;
		for (size_t i = 0; i < s->deps.count; i++)
			if (!s->deps.items[i]->mark)
				unjoined = true;
	}
	return unjoined;
}

SIMGPU_EXPORT CUresult simgpu_capture_end(struct CUstream_st *stream, struct CUgraph_st **graph)
{
	struct simgpu_capture *c;
	CUresult status;

	*graph = NULL;
	simgpu_core_lock();
	c = stream->capture;
	if (!c) {
		status = CUDA_ERROR_ILLEGAL_STATE;
		goto out_unlock;
	}
	if (c->origin != stream) {
		status = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
		goto out_unlock;
	}
	if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
	    !pthread_equal(c->thread, pthread_self())) {
		status = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
		goto out_unlock;
	}
	status = c->invalidated               ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
	         : capture_unjoined_locked(c) ? CUDA_ERROR_STREAM_CAPTURE_UNJOINED
	                                      : CUDA_SUCCESS;
	for (struct CUstream_st *s = simgpu.streams; s; s = s->next) {
		if (s->capture != c)
			continue;
		s->capture = NULL;
		set_free(&s->deps);
		free(s->edge_data);
		s->edge_data = NULL;
		s->edge_cap = 0;
	}
	for (struct CUevent_st *e = simgpu.events; e; e = e->next)
		if (e->capture == c)
			capture_event_forget_locked(e);
	for (struct simgpu_capture **link = &simgpu.captures; *link; link = &(*link)->next) {
		if (*link == c) {
			*link = c->next;
			break;
		}
	}
	c->graph->capturing = false;
	if (status == CUDA_SUCCESS) {
		*graph = c->graph;
	} else {
		graph_unlink_locked(c->graph);
		graph_free(c->graph);
	}
	free(c);
out_unlock:
	simgpu_core_unlock();
	return status;
}

SIMGPU_EXPORT CUresult simgpu_capture_info(struct CUstream_st *stream,
                                           struct simgpu_capture_info *out)
{
	CUresult status = CUDA_SUCCESS;
	struct simgpu_capture *c;

	*out = (struct simgpu_capture_info){.status = CU_STREAM_CAPTURE_STATUS_NONE};
	simgpu_core_lock();
	c = stream->capture;
	if (stream->legacy && simgpu.captures && blocking_stream_captures_locked()) {
		status = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	} else if (c && c->invalidated) {
		out->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
	} else if (c) {
		/* Every edge is a plain dependency: the edge data are zeroes. */
		if (stream->edge_cap < stream->deps.count) {
			CUgraphEdgeData *edges = calloc(stream->deps.count, sizeof(*edges));
			if (edges) {
				free(stream->edge_data);
				stream->edge_data = edges;
				stream->edge_cap = stream->deps.count;
			}
		}
		out->status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
		out->id = c->id;
		out->graph = c->graph;
		out->deps = (const CUgraphNode *)stream->deps.items;
		out->count = stream->deps.count;
		out->edges = stream->edge_cap >= out->count ? stream->edge_data : NULL;
	}
	simgpu_core_unlock();
	return status;
}

/* ---- Graphs and executable graphs --------------------------------------------------- */

SIMGPU_EXPORT struct CUgraph_st *simgpu_graph_get(CUgraph handle)
{
	struct CUgraph_st *found = NULL;

	simgpu_core_lock();
	for (struct CUgraph_st *g = simgpu.graphs; g && !found; g = g->next)
		if (g == handle)
			found = g;
	simgpu_core_unlock();
	return found;
}

SIMGPU_EXPORT struct CUgraphExec_st *simgpu_graph_exec_get(CUgraphExec handle)
{
	struct CUgraphExec_st *found = NULL;

	simgpu_core_lock();
	for (struct CUgraphExec_st *x = simgpu.execs; x && !found; x = x->next)
		if (x == handle)
			found = x;
	simgpu_core_unlock();
	return found;
}

static void exec_free(struct CUgraphExec_st *exec)
{
	for (size_t i = 0; i < exec->count; i++) {
		free(exec->nodes[i].op.arg);
		free(exec->nodes[i].deps);
	}
	free(exec->nodes);
	exec->magic = 0;
	free(exec);
}

/* Copies one node into the executable graph: its op (a fresh argument) and its edges. */
static bool exec_node_init(struct exec_node *x, const struct CUgraphNode_st *node)
{
	x->op = node->op;
	x->op.arg = node->op.arg ? op_clone_arg(&node->op) : NULL;
	x->deps = node->deps.count ? malloc(node->deps.count * sizeof(*x->deps)) : NULL;
	if ((node->op.arg && !x->op.arg) || (node->deps.count && !x->deps)) {
		free(x->op.arg);
		free(x->deps);
		*x = (struct exec_node){0};
		return false;
	}
	for (size_t d = 0; d < node->deps.count; d++)
		x->deps[d] = node->deps.items[d]->index;
	x->ndeps = node->deps.count;
	return true;
}

SIMGPU_EXPORT CUresult simgpu_graph_instantiate(struct CUgraphExec_st **out,
                                                struct CUgraph_st *graph, unsigned long long flags)
{
	const unsigned long long known = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
	                                 CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
	                                 CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH |
	                                 CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
	CUresult status = CUDA_SUCCESS;
	struct CUgraphExec_st *exec;

	if (!out || (flags & ~known))
		return CUDA_ERROR_INVALID_VALUE;
	exec = calloc(1, sizeof(*exec));
	if (!exec)
		return CUDA_ERROR_OUT_OF_MEMORY;
	exec->magic = EXEC_MAGIC;
	simgpu_core_lock();
	if (graph->capturing) {
		status = CUDA_ERROR_ILLEGAL_STATE;
		goto out_unlock;
	}
	exec->nodes = graph->count ? calloc(graph->count, sizeof(*exec->nodes)) : NULL;
	if (graph->count && !exec->nodes) {
		status = CUDA_ERROR_OUT_OF_MEMORY;
		goto out_unlock;
	}
	for (; exec->count < graph->count; exec->count++) {
		if (!exec_node_init(&exec->nodes[exec->count], graph->nodes[exec->count])) {
			status = CUDA_ERROR_OUT_OF_MEMORY;
			goto out_unlock;
		}
	}
	exec->next = simgpu.execs;
	simgpu.execs = exec;
	*out = exec;
out_unlock:
	simgpu_core_unlock();
	if (status != CUDA_SUCCESS)
		exec_free(exec);
	return status;
}

/*
 * Each node is booked on a private lane: a non-blocking stream on the launching stream's
 * trace track whose tail is when the node may start (the launch's start, its
 * dependencies' ends). The copies of the effects' arguments are made first, so that a
 * launch either books everything or nothing.
 */
SIMGPU_EXPORT CUresult simgpu_graph_launch(struct CUgraphExec_st *exec, struct CUstream_st *stream)
{
	uint64_t *ends = calloc(exec->count ? exec->count : 1, sizeof(*ends));
	void **args = calloc(exec->count ? exec->count : 1, sizeof(*args));
	CUresult status = CUDA_SUCCESS;

	if (!ends || !args) {
		status = CUDA_ERROR_OUT_OF_MEMORY;
		goto out_free;
	}
	for (size_t i = 0; i < exec->count; i++) {
		const struct simgpu_op *op = &exec->nodes[i].op;
		if (op->effect && op->arg && !(args[i] = op_clone_arg(op))) {
			status = CUDA_ERROR_OUT_OF_MEMORY;
			goto out_free;
		}
	}
	simgpu_core_lock();
	status = capture_admit_locked(stream, CAPTURE_REFUSE);
	if (status != CUDA_SUCCESS) {
		simgpu_core_unlock();
		goto out_free;
	}
	uint64_t start = sched_ready_locked(stream), now = simgpu_host_now_locked();
	if (now > start)
		start = now;
	if (exec->last_end > start)
		start = exec->last_end;
	uint64_t tail = start;
	for (size_t i = 0; i < exec->count; i++) {
		const struct exec_node *x = &exec->nodes[i];
		struct CUstream_st lane = {.id = stream->id, .flags = CU_STREAM_NON_BLOCKING};

		lane.tail = start;
		for (size_t d = 0; d < x->ndeps; d++)
			if (ends[x->deps[d]] > lane.tail)
				lane.tail = ends[x->deps[d]];
		ends[i] = sched_book_locked(&lane, x->op.res, x->op.work_ns, x->op.name, NULL);
		if (ends[i] > tail)
			tail = ends[i];
		if (args[i]) {
			effects_push_locked(ends[i], x->op.effect, args[i]);
			args[i] = NULL; /* queued: the effect queue frees it */
		}
	}
	stream->tail = tail;
	exec->last_end = tail;
	simgpu_core_unlock();
out_free:
	for (size_t i = 0; args && i < exec->count; i++)
		free(args[i]);
	free(args);
	free(ends);
	return status;
}

SIMGPU_EXPORT CUresult simgpu_graph_exec_destroy(struct CUgraphExec_st *exec)
{
	CUresult status = CUDA_ERROR_INVALID_HANDLE;

	simgpu_core_lock();
	for (struct CUgraphExec_st **link = &simgpu.execs; *link; link = &(*link)->next) {
		if (*link == exec) {
			*link = exec->next;
			status = CUDA_SUCCESS;
			break;
		}
	}
	simgpu_core_unlock();
	if (status == CUDA_SUCCESS)
		exec_free(exec);
	return status;
}

SIMGPU_EXPORT CUresult simgpu_graph_destroy(struct CUgraph_st *graph)
{
	CUresult status = CUDA_ERROR_INVALID_HANDLE;

	simgpu_core_lock();
	for (struct CUgraph_st *g = simgpu.graphs; g; g = g->next) {
		if (g != graph)
			continue;
		status = g->capturing ? CUDA_ERROR_ILLEGAL_STATE : CUDA_SUCCESS;
		break;
	}
	if (status == CUDA_SUCCESS)
		graph_unlink_locked(graph);
	simgpu_core_unlock();
	if (status == CUDA_SUCCESS)
		graph_free(graph);
	return status;
}
