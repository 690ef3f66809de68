/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Allocation lifetimes (profiler/lifetime.c): buffers from synthetic traces (a runtime
 * call and its nested driver call counted once, address reuse, pointers into the middle
 * of a buffer, stale pointers, host memory), references from launches, copies, memsets
 * and collectives, the classes of a small two-layer training loop, saved bytes and peak;
 * and on a real trace, tinytrain under liblynx.so, the buffers match its allocations.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "lifetime.h"

/* ---- Synthetic traces ------------------------------------------------------------------- */

#define MAX_EVENTS 1024
#define MAX_WORDS 8

struct tb {
	struct lynx_prof_event ev[MAX_EVENTS];
	uint64_t words[MAX_EVENTS][MAX_WORDS]; /* launch parameters */
	size_t count;
	uint32_t tid;
};

static struct lynx_prof_event *add(struct tb *tb, const char *hook, enum lynx_prof_kind kind,
                                   bool nested)
{
	struct lynx_prof_event *e;

	assert_true(tb->count < MAX_EVENTS);
	e = &tb->ev[tb->count];
	*e = (struct lynx_prof_event){
	        .t_ns = 1000 + 10 * tb->count,
	        .tid = tb->tid ? tb->tid : 1,
	        .index = (uint32_t)tb->count,
	        .hook = hook,
	        .kind = kind,
	        .nested = nested,
	        .stream = 0x10,
	};
	tb->count++;
	return e;
}

static uint32_t last(const struct tb *tb)
{
	return (uint32_t)tb->count - 1;
}

/* cudaMallocAsync as the shim records it: the nested driver call, then the runtime call. */
static uint32_t alloc(struct tb *tb, uint64_t ptr, uint64_t bytes)
{
	add(tb, "cuMemAllocAsync", LYNX_PROF_ALLOC, true)->u.mem =
	        (typeof(tb->ev[0].u.mem)){ptr, bytes};
	add(tb, "cudaMallocAsync", LYNX_PROF_ALLOC, false)->u.mem =
	        (typeof(tb->ev[0].u.mem)){ptr, bytes};
	return last(tb);
}

static uint32_t release(struct tb *tb, uint64_t ptr)
{
	add(tb, "cuMemFreeAsync", LYNX_PROF_FREE, true)->u.mem.ptr = ptr;
	add(tb, "cudaFreeAsync", LYNX_PROF_FREE, false)->u.mem.ptr = ptr;
	return last(tb);
}

/* A runtime launch: the nested cuLaunchKernel carries the parameter words (plus an int
 * that is no pointer), the runtime call carries none. Returns the runtime call. */
static uint32_t launch_words(struct tb *tb, const uint64_t *words, size_t n)
{
	struct lynx_prof_event *e = add(tb, "cuLaunchKernel", LYNX_PROF_LAUNCH, true);

	assert_true(n < MAX_WORDS);
	memcpy(tb->words[last(tb)], words, n * sizeof(*words));
	tb->words[last(tb)][n] = 42;
	e->u.launch.function = 0xf00;
	e->u.launch.param_count = (uint32_t)n + 1;
	e->u.launch.param_bytes = (uint32_t)(8 * (n + 1));
	e->u.launch.params = (const uint8_t *)tb->words[last(tb)];
	add(tb, "cudaLaunchKernel", LYNX_PROF_LAUNCH, false)->u.launch.function = 0xf00;
	return last(tb);
}

#define LAUNCH(tb, ...)                                     \
	launch_words((tb), (const uint64_t[]){__VA_ARGS__}, \
	             sizeof((const uint64_t[]){__VA_ARGS__}) / sizeof(uint64_t))

static struct lynx_prof_trace trace_of(struct tb *tb)
{
	return (struct lynx_prof_trace){.pid = 1, .events = tb->ev, .count = tb->count};
}

static void build(struct tb *tb, struct lynx_prof_lifetimes *lt)
{
	struct lynx_prof_trace trace = trace_of(tb);
	char why[256] = "";

	if (lynx_prof_lifetimes_build(&trace, lt, why, sizeof(why)))
		fail_msg("build: %s", why);
}

static const struct lynx_prof_ref *ref(const struct lynx_prof_lifetimes *lt,
                                       const struct lynx_prof_buffer *b, size_t k)
{
	assert_true(k < b->ref_count);
	return &lt->refs[b->first_ref + k];
}

/* ---- Buffers and references ------------------------------------------------------------- */

static void test_lifetime_counts_a_runtime_call_and_its_driver_call_once(void **state)
{
	struct tb *tb = calloc(1, sizeof(*tb));
	struct lynx_prof_lifetimes lt;

	uint32_t a = alloc(tb, 0x1000, 256);
	uint32_t k = LAUNCH(tb, 0x1000);
	uint32_t f = release(tb, 0x1000);
	build(tb, &lt);

	assert_int_equal(lt.count, 1);
	assert_int_equal(lt.duplicates, 2);
	assert_int_equal(lt.unmatched_frees, 0);
	const struct lynx_prof_buffer *b = &lt.buffers[0];
	assert_int_equal(b->ptr, 0x1000);
	assert_int_equal(b->bytes, 256);
	assert_int_equal(b->stream, 0x10);
	/* The calls the program made, not the driver calls inside them. */
	assert_int_equal(b->alloc_event, a);
	assert_int_equal(b->free_event, f);
	assert_int_equal(b->alloc_ns, tb->ev[a].t_ns);
	assert_int_equal(b->free_ns, tb->ev[f].t_ns);
	assert_int_equal(b->ref_count, 1);
	assert_int_equal(b->producer, k);
	assert_int_equal(b->last_consumer, k);
	assert_int_equal(lt.buffers[0].cls, LYNX_PROF_CLASS_OTHER);
	lynx_prof_lifetimes_free(&lt);
	free(tb);
}

static void test_lifetime_counts_a_nested_allocation_without_an_enclosing_one(void **state)
{
	struct tb *tb = calloc(1, sizeof(*tb));
	struct lynx_prof_lifetimes lt;

	/* NCCL allocating inside ncclCommInitRank: only the driver call is an ALLOC. */
	add(tb, "cuMemAlloc_v2", LYNX_PROF_ALLOC, true)->u.mem.ptr = 0x8000;
	tb->ev[0].u.mem.bytes = 4096;
	add(tb, "ncclCommInitRank", LYNX_PROF_COMM, false);
	/* A failed allocation and a host allocation are no buffers. */
	add(tb, "cudaMalloc", LYNX_PROF_ALLOC, false)->u.mem =
	        (typeof(tb->ev[0].u.mem)){0x20000, 64};
	tb->ev[last(tb)].result = 2;
	add(tb, "cudaMallocHost", LYNX_PROF_ALLOC, false)->u.mem =
	        (typeof(tb->ev[0].u.mem)){0x30000, 64};
	add(tb, "cudaFreeHost", LYNX_PROF_FREE, false)->u.mem.ptr = 0x30000;
	build(tb, &lt);

	assert_int_equal(lt.count, 1);
	assert_int_equal(lt.duplicates, 0);
	assert_int_equal(lt.unmatched_frees, 0);
	assert_int_equal(lt.buffers[0].alloc_event, 0);
	assert_int_equal(lt.buffers[0].free_event, LYNX_PROF_NONE);
	assert_int_equal(lt.buffers[0].free_ns, 0);
	lynx_prof_lifetimes_free(&lt);
	free(tb);
}

static void test_lifetime_address_reuse_after_free_is_a_new_buffer(void **state)
{
	struct tb *tb = calloc(1, sizeof(*tb));
	struct lynx_prof_lifetimes lt;

	alloc(tb, 0x1000, 256);
	uint32_t k1 = LAUNCH(tb, 0x1000);
	release(tb, 0x1000);
	uint32_t stale = LAUNCH(tb, 0x1000); /* a freed address: no buffer */
	alloc(tb, 0x1000, 128);
	uint32_t k2 = LAUNCH(tb, 0x1010);
	build(tb, &lt);

	assert_int_equal(lt.count, 2);
	assert_int_equal(lt.buffers[0].ref_count, 1);
	assert_int_equal(lt.buffers[0].producer, k1);
	assert_int_equal(lt.buffers[1].bytes, 128);
	assert_int_equal(lt.buffers[1].ref_count, 1);
	assert_int_equal(lt.buffers[1].producer, k2);
	assert_int_equal(ref(&lt, &lt.buffers[1], 0)->offset, 0x10);
	assert_int_equal(lt.ref_count, 2);
	/* Looked up by address and time. */
	assert_ptr_equal(lynx_prof_lifetimes_find(&lt, 0x1080, k1), &lt.buffers[0]);
	assert_null(lynx_prof_lifetimes_find(&lt, 0x1000, stale));
	assert_ptr_equal(lynx_prof_lifetimes_find(&lt, 0x1000, k2), &lt.buffers[1]);
	assert_null(lynx_prof_lifetimes_find(&lt, 0x1080, k2));
	lynx_prof_lifetimes_free(&lt);
	free(tb);
}

static void test_lifetime_finds_pointers_into_the_middle_but_not_past_the_end(void **state)
{
	struct tb *tb = calloc(1, sizeof(*tb));
	struct lynx_prof_lifetimes lt;

	alloc(tb, 0x1000, 256);
	alloc(tb, 0x2000, 64);
	uint32_t k1 = LAUNCH(tb, 0x10ff, 0x2000 + 64); /* last byte; one past the end */
	uint32_t k2 = LAUNCH(tb, 0x1040, 0x1008);      /* one buffer twice: one reference */
	LAUNCH(tb, 0x0fff, 0x3000);                    /* before and between: nothing */
	build(tb, &lt);

	assert_int_equal(lt.count, 2);
	assert_int_equal(lt.buffers[0].ref_count, 2);
	assert_int_equal(ref(&lt, &lt.buffers[0], 0)->event, k1);
	assert_int_equal(ref(&lt, &lt.buffers[0], 0)->offset, 0xff);
	assert_int_equal(ref(&lt, &lt.buffers[0], 1)->event, k2);
	assert_int_equal(ref(&lt, &lt.buffers[0], 1)->offset, 0x8);
	assert_int_equal(lt.buffers[1].ref_count, 0);
	assert_int_equal(lt.buffers[1].producer, LYNX_PROF_NONE);
	lynx_prof_lifetimes_free(&lt);
	free(tb);
}

static void test_lifetime_copies_memsets_and_collectives_reference_buffers(void **state)
{
	struct tb *tb = calloc(1, sizeof(*tb));
	struct lynx_prof_lifetimes lt;

	alloc(tb, 0x1000, 256);
	alloc(tb, 0x2000, 256);
	add(tb, "cudaMemsetAsync", LYNX_PROF_MEMSET, false)->u.mem =
	        (typeof(tb->ev[0].u.mem)){0x1000, 256};
	uint32_t m = last(tb);
	struct lynx_prof_event *c = add(tb, "cudaMemcpyAsync", LYNX_PROF_COPY, false);
	c->u.copy.dst = 0x2000;
	c->u.copy.src = 0x1000;
	c->u.copy.bytes = 256;
	uint32_t cp = last(tb);
	struct lynx_prof_event *n = add(tb, "ncclAllReduce", LYNX_PROF_COLL, false);
	n->u.nccl.send = 0x2000;
	n->u.nccl.recv = 0x2000;
	uint32_t ar = last(tb);
	/* A host-to-device copy from host memory touches only its destination. */
	c = add(tb, "cudaMemcpy", LYNX_PROF_COPY, false);
	c->u.copy.dst = 0x1000;
	c->u.copy.src = 0x7fff00000000ull;
	uint32_t h2d = last(tb);
	build(tb, &lt);

	assert_int_equal(lt.buffers[0].ref_count, 3);
	assert_int_equal(lt.buffers[0].producer, m);
	assert_int_equal(ref(&lt, &lt.buffers[0], 1)->event, cp);
	assert_int_equal(lt.buffers[0].last_consumer, h2d);
	assert_int_equal(lt.buffers[1].ref_count, 2);
	assert_int_equal(lt.buffers[1].producer, cp);
	assert_int_equal(lt.buffers[1].last_consumer, ar);
	lynx_prof_lifetimes_free(&lt);
	free(tb);
}

static void test_lifetime_allocation_over_a_live_buffer_ends_it(void **state)
{
	struct tb *tb = calloc(1, sizeof(*tb));
	struct lynx_prof_lifetimes lt;

	alloc(tb, 0x1000, 256);
	uint32_t again = alloc(tb, 0x1080, 256); /* its free was never seen */
	add(tb, "cudaFree", LYNX_PROF_FREE, false)->u.mem.ptr = 0x5000;
	build(tb, &lt);

	assert_int_equal(lt.count, 2);
	assert_int_equal(lt.overlaps, 1);
	assert_int_equal(lt.unmatched_frees, 1);
	assert_int_equal(lt.buffers[0].free_event, again);
	assert_int_equal(lt.buffers[1].free_event, LYNX_PROF_NONE);
	lynx_prof_lifetimes_free(&lt);
	free(tb);
}

/*
 * PyTorch under torch.use_deterministic_algorithms fills each new tensor before the kernel
 * that computes it: a first kernel that names the buffer alone, then one that names it and
 * its inputs. That second kernel is the producer. A fill followed by a kernel that names
 * the buffer alone again (an in-place update) leaves the fill as the producer.
 */
static void test_lifetime_producer_is_past_a_fill(void **state)
{
	struct tb *tb = calloc(1, sizeof(*tb));
	struct lynx_prof_lifetimes lt;

	(void)state;
	alloc(tb, 0x1000, 256); /* x, the input */
	LAUNCH(tb, 0x1000);
	alloc(tb, 0x2000, 256); /* y = f(x), filled first */
	uint32_t fill_y = LAUNCH(tb, 0x2000);
	uint32_t compute_y = LAUNCH(tb, 0x1000, 0x2000);
	alloc(tb, 0x3000, 256); /* z: filled, then updated in place */
	uint32_t fill_z = LAUNCH(tb, 0x3000);
	LAUNCH(tb, 0x3000);
	build(tb, &lt);

	assert_int_equal(lt.count, 3);
	assert_int_equal(lt.buffers[1].producer, compute_y);
	assert_int_not_equal(lt.buffers[1].producer, fill_y);
	assert_int_equal(lt.buffers[1].ref_count, 2); /* the fill is still a reference */
	assert_int_equal(lt.buffers[2].producer, fill_z);
	lynx_prof_lifetimes_free(&lt);
	free(tb);
}

static void test_lifetime_refuses_a_trace_out_of_time_order(void **state)
{
	struct tb *tb = calloc(1, sizeof(*tb));
	struct lynx_prof_lifetimes lt;
	char why[256] = "";

	alloc(tb, 0x1000, 256);
	LAUNCH(tb, 0x1000);
	tb->ev[2].t_ns = 1;
	struct lynx_prof_trace trace = trace_of(tb);
	assert_int_equal(lynx_prof_lifetimes_build(&trace, &lt, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "event 2"));
	assert_int_equal(lt.count, 0);
	assert_null(lt.buffers);
	free(tb);
}

/* ---- Classes ---------------------------------------------------------------------------- */

/*
 * A two-layer model, two micro-batches, two iterations (forward of every micro-batch,
 * then their backwards), on one flat weight buffer (layer l at offset 256 l), with a
 * workspace every GEMM shares. Layer l's forward on micro-batch m keeps s (saved) and
 * passes x[l + 1] on; its backward reads s, x[l] and the weights. x[0] comes from the
 * embedding (outside the layers); x[2] goes to the head and is freed there.
 */
enum { LAYERS = 2, MBS = 2, ITERS = 2 };
#define W 0x100000ull
#define W_BYTES 512
#define WS 0x200000ull
#define WS_BYTES 2048
#define OPT 0x300000ull
#define S_BYTES(l) (1000 + 100 * (l))
#define X_BYTES 512
#define TMP_BYTES 64
#define G_BYTES 4096

struct model {
	struct tb tb;
	struct lynx_prof_span iterations[ITERS];
	struct lynx_prof_layer_span layers[ITERS * LAYERS * MBS];
	size_t layer_count;
	uint64_t next;        /* bump allocator: addresses are never reused here */
	bool eager_optimizer; /* optimizer state made at start-up, not at the first step */
	uint64_t stray_word;  /* carried by every backward launch when not 0 (struct padding) */
	uint64_t setup_tmp, x[ITERS][MBS][LAYERS + 1], s[ITERS][MBS][LAYERS], tmp, g;
};

static uint64_t bump(struct model *m, uint64_t bytes)
{
	uint64_t p = m->next;

	m->next += (bytes + 0xfff) & ~0xfffull;
	return p;
}

static struct lynx_prof_layer_span *span_of(struct model *m, uint32_t it, uint32_t l, uint32_t mb)
{
	for (size_t k = 0; k < m->layer_count; k++)
		if (m->layers[k].iteration == it && m->layers[k].layer == l &&
		    m->layers[k].microbatch == mb)
			return &m->layers[k];
	assert_true(m->layer_count < ITERS * LAYERS * MBS);
	m->layers[m->layer_count] = (struct lynx_prof_layer_span){it, l, mb, {0, 0}, {0, 0}};
	return &m->layers[m->layer_count++];
}

static void iteration(struct model *m, uint32_t it)
{
	struct tb *tb = &m->tb;

	m->iterations[it].begin = (uint32_t)tb->count;
	for (uint32_t mb = 0; mb < MBS; mb++) {
		uint64_t *x = m->x[it][mb];
		alloc(tb, x[0] = bump(m, X_BYTES), X_BYTES);
		LAUNCH(tb, x[0], W + W_BYTES - 8); /* the embedding */
		for (uint32_t l = 0; l < LAYERS; l++) {
			struct lynx_prof_layer_span *sp = span_of(m, it, l, mb);
			uint64_t s = m->s[it][mb][l] = bump(m, S_BYTES(l));
			uint64_t tmp = bump(m, TMP_BYTES);
			sp->forward.begin = (uint32_t)tb->count;
			alloc(tb, tmp, TMP_BYTES);
			LAUNCH(tb, x[l], W + 256 * l, tmp, WS);
			alloc(tb, s, S_BYTES(l));
			LAUNCH(tb, tmp, s, WS);
			release(tb, tmp);
			alloc(tb, x[l + 1] = bump(m, X_BYTES), X_BYTES);
			LAUNCH(tb, s, x[l + 1]);
			sp->forward.end = (uint32_t)tb->count;
		}
		LAUNCH(tb, x[LAYERS], W); /* the head */
		release(tb, x[LAYERS]);
	}
	for (uint32_t mb = 0; mb < MBS; mb++) {
		for (uint32_t l = LAYERS; l-- > 0;) {
			struct lynx_prof_layer_span *sp = span_of(m, it, l, mb);
			uint64_t g = bump(m, G_BYTES);
			sp->backward.begin = (uint32_t)tb->count;
			alloc(tb, g, G_BYTES);
			LAUNCH(tb, m->s[it][mb][l], m->x[it][mb][l], W + 256 * l, WS, g,
			       m->stray_word);
			release(tb, g);
			release(tb, m->s[it][mb][l]);
			release(tb, m->x[it][mb][l]);
			sp->backward.end = (uint32_t)tb->count;
		}
	}
	if (it == 0 && !m->eager_optimizer)
		alloc(tb, OPT, W_BYTES); /* optimizer state, made lazily at the first step */
	LAUNCH(tb, W, OPT);
	m->iterations[it].end = (uint32_t)tb->count;
}

/* A second optimizer state across the 4 GiB line at 0x100000000, made at start-up. */
#define LINE_STATE (0x100000000ull - 256)

static struct model *model_trace_stray(bool eager_optimizer, uint64_t stray_word)
{
	struct model *m = calloc(1, sizeof(*m));

	m->next = 0x1000000;
	m->eager_optimizer = eager_optimizer;
	m->stray_word = stray_word;
	alloc(&m->tb, W, W_BYTES);
	if (eager_optimizer)
		alloc(&m->tb, OPT, W_BYTES);
	if (stray_word)
		alloc(&m->tb, LINE_STATE, W_BYTES);
	alloc(&m->tb, WS, WS_BYTES);
	alloc(&m->tb, m->setup_tmp = bump(m, 64), 64);
	LAUNCH(&m->tb, m->setup_tmp, W);
	release(&m->tb, m->setup_tmp);
	for (uint32_t it = 0; it < ITERS; it++)
		iteration(m, it);
	return m;
}

static struct model *model_trace_with(bool eager_optimizer)
{
	return model_trace_stray(eager_optimizer, 0);
}

static struct model *model_trace(void)
{
	return model_trace_with(false);
}

static struct lynx_prof_structure structure_of(const struct model *m)
{
	return (struct lynx_prof_structure){m->iterations, ITERS, m->layers, m->layer_count};
}

static enum lynx_prof_class class_at(const struct lynx_prof_lifetimes *lt, uint64_t ptr)
{
	for (size_t id = 0; id < lt->count; id++)
		if (lt->buffers[id].ptr == ptr)
			return lt->buffers[id].cls;
	fail_msg("no buffer at 0x%llx", (unsigned long long)ptr);
	return LYNX_PROF_CLASS_COUNT;
}

static void classify(struct model *m, struct lynx_prof_lifetimes *lt)
{
	struct lynx_prof_structure s = structure_of(m);
	char why[256] = "";

	build(&m->tb, lt);
	if (lynx_prof_lifetimes_classify(lt, &s, m->tb.count, why, sizeof(why)))
		fail_msg("classify: %s", why);
}

static void test_lifetime_classifies_weights_workspace_temporaries_and_saved(void **state)
{
	struct model *m = model_trace();
	struct lynx_prof_lifetimes lt;

	classify(m, &lt);
	assert_int_equal(class_at(&lt, W), LYNX_PROF_CLASS_WEIGHT);
	assert_int_equal(class_at(&lt, OPT), LYNX_PROF_CLASS_WEIGHT);
	assert_int_equal(class_at(&lt, WS), LYNX_PROF_CLASS_WORKSPACE);
	assert_int_equal(class_at(&lt, m->setup_tmp), LYNX_PROF_CLASS_TEMPORARY);
	for (size_t id = 0; id < lt.count; id++) {
		const struct lynx_prof_buffer *b = &lt.buffers[id];
		if (b->bytes == TMP_BYTES && b->ptr != m->setup_tmp)
			assert_int_equal(b->cls, LYNX_PROF_CLASS_TEMPORARY);
		if (b->bytes == G_BYTES)
			assert_int_equal(b->cls, LYNX_PROF_CLASS_TEMPORARY);
	}
	for (uint32_t it = 0; it < ITERS; it++) {
		for (uint32_t mb = 0; mb < MBS; mb++) {
			for (uint32_t l = 0; l < LAYERS; l++) {
				const struct lynx_prof_layer_span *sp = span_of(m, it, l, mb);
				uint32_t want = (uint32_t)(sp - m->layers);
				const struct lynx_prof_buffer *s = lynx_prof_lifetimes_find(
				        &lt, m->s[it][mb][l], sp->backward.begin);
				const struct lynx_prof_buffer *x = lynx_prof_lifetimes_find(
				        &lt, m->x[it][mb][l], sp->backward.begin);
				assert_non_null(s);
				assert_non_null(x);
				assert_int_equal(s->cls, LYNX_PROF_CLASS_SAVED);
				assert_int_equal(s->span, want);
				/* The layer's input: the embedding's or the layer before's output.
				 */
				assert_int_equal(x->cls, LYNX_PROF_CLASS_SAVED);
				assert_int_equal(x->span, want);
				assert_int_equal(lt.saved_bytes[want], S_BYTES(l) + X_BYTES);
			}
			/* The stage's output dies in the head: neither temporary nor saved. */
			assert_int_equal(class_at(&lt, m->x[it][mb][LAYERS]),
			                 LYNX_PROF_CLASS_OTHER);
		}
	}
	struct lynx_prof_structure s = structure_of(m);
	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t mb = 0; mb < MBS; mb++)
			assert_int_equal(lynx_prof_lifetimes_saved_bytes(&lt, &s, l, mb),
			                 S_BYTES(l) + X_BYTES);
	assert_int_equal(lynx_prof_lifetimes_saved_bytes(&lt, &s, LAYERS, 0), 0);
	lynx_prof_lifetimes_free(&lt);
	free(m);
}

static void test_lifetime_peak_is_at_a_first_backward_with_its_breakdown(void **state)
{
	struct model *m = model_trace();
	struct lynx_prof_lifetimes lt;
	uint64_t saved = 0, sum = 0;

	classify(m, &lt);
	for (uint32_t l = 0; l < LAYERS; l++)
		saved += MBS * (S_BYTES(l) + X_BYTES);
	/* In the second iteration (the optimizer state is live by then): every
	 * micro-batch's activations, the weights, the optimizer state, the workspace and one
	 * gradient temporary. */
	assert_int_equal(lt.peak_by_class[LYNX_PROF_CLASS_SAVED], saved);
	assert_int_equal(lt.peak_by_class[LYNX_PROF_CLASS_WEIGHT], 2 * W_BYTES);
	assert_int_equal(lt.peak_by_class[LYNX_PROF_CLASS_WORKSPACE], WS_BYTES);
	assert_int_equal(lt.peak_by_class[LYNX_PROF_CLASS_TEMPORARY], G_BYTES);
	assert_int_equal(lt.peak_by_class[LYNX_PROF_CLASS_OTHER], 0);
	for (int c = 0; c < LYNX_PROF_CLASS_COUNT; c++)
		sum += lt.peak_by_class[c];
	assert_int_equal(lt.peak_bytes, sum);
	const struct lynx_prof_layer_span *first = span_of(m, 1, LAYERS - 1, 0);
	assert_true(lt.peak_event >= first->backward.begin);
	assert_true(lt.peak_event < first->backward.end);
	assert_int_equal(m->tb.ev[lt.peak_event].kind, LYNX_PROF_ALLOC);
	lynx_prof_lifetimes_free(&lt);
	free(m);
}

/*
 * Every layer's backward launch carries one more word, the same in each layer: the padding
 * after an int in a by-value struct, holding the upper half of a pointer the trainer's
 * stack held before (0x00000001 beside an int 1). Past the 4 GiB line that the second
 * optimizer state crosses, it names that state at one offset from every layer: not a
 * workspace. The same word elsewhere inside the state does make it one.
 */
static void test_lifetime_an_integer_beside_stale_padding_makes_no_workspace(void **state)
{
	struct model *m = model_trace_stray(false, 0x100000001ull);
	struct lynx_prof_lifetimes lt;

	classify(m, &lt);
	assert_int_equal(class_at(&lt, LINE_STATE), LYNX_PROF_CLASS_WEIGHT);
	assert_int_equal(class_at(&lt, WS), LYNX_PROF_CLASS_WORKSPACE);
	assert_int_equal(lt.peak_by_class[LYNX_PROF_CLASS_WORKSPACE], WS_BYTES);
	/* Still a reference: the state's lifetime covers it. */
	const struct lynx_prof_buffer *b =
	        lynx_prof_lifetimes_find(&lt, LINE_STATE, (uint32_t)m->tb.count - 1);
	assert_non_null(b);
	assert_true(b->ref_count >= (size_t)ITERS * MBS * LAYERS);
	lynx_prof_lifetimes_free(&lt);
	free(m);

	m = model_trace_stray(false, LINE_STATE + 64); /* below the line: a shared offset */
	classify(m, &lt);
	assert_int_equal(class_at(&lt, LINE_STATE), LYNX_PROF_CLASS_WORKSPACE);
	lynx_prof_lifetimes_free(&lt);
	free(m);
}

/*
 * The profiler found the second iteration only (the first differed). With the optimizer
 * state made at start-up, the first iteration reaches the same total first, with its
 * activations unclassified: the peak must be the steady one, with its saved bytes.
 */
static void test_lifetime_peak_is_taken_in_a_steady_iteration(void **state)
{
	struct model *m = model_trace_with(true);
	struct lynx_prof_layer_span steady[LAYERS * MBS];
	size_t n = 0;
	uint64_t saved = 0;
	char why[256] = "";

	for (size_t k = 0; k < m->layer_count; k++)
		if (m->layers[k].iteration == 1) {
			steady[n] = m->layers[k];
			steady[n++].iteration = 0; /* the structure's first iteration */
		}
	struct lynx_prof_structure s = {&m->iterations[1], 1, steady, n};
	struct lynx_prof_lifetimes lt;
	build(&m->tb, &lt);
	if (lynx_prof_lifetimes_classify(&lt, &s, m->tb.count, why, sizeof(why)))
		fail_msg("classify: %s", why);
	for (uint32_t l = 0; l < LAYERS; l++)
		saved += MBS * (S_BYTES(l) + X_BYTES);
	assert_int_equal(lt.peak_by_class[LYNX_PROF_CLASS_SAVED], saved);
	assert_int_equal(lt.peak_by_class[LYNX_PROF_CLASS_OTHER], 0);
	assert_true(lt.peak_event >= m->iterations[1].begin);
	assert_true(lt.peak_event < m->iterations[1].end);
	assert_int_equal(lt.non_saved_peak_bytes, 2 * W_BYTES + WS_BYTES + G_BYTES);
	assert_int_equal(lt.largest_workspace_bytes, WS_BYTES);
	lynx_prof_lifetimes_free(&lt);
	free(m);
}

/*
 * Where the non-saved bytes are live (what a plan cannot evict, moment by moment): after
 * each event, so that the profile can say it per kernel. In a steady layer's backward, the
 * weights, the optimizer state and the workspace with the gradient temporary; in its
 * forward, with the GEMM's temporary; outside the layers, at most with the last layer's
 * output that the head reads and frees.
 */
static void test_lifetime_places_the_non_saved_bytes(void **state)
{
	struct model *m = model_trace();
	struct lynx_prof_lifetimes lt;
	const struct lynx_prof_layer_span *sp = span_of(m, 1, 0, 0);
	uint64_t fwd = 0, bwd = 0, base = 2 * W_BYTES + WS_BYTES;

	classify(m, &lt);
	assert_int_equal(lt.non_saved_events, m->tb.count);
	for (uint32_t e = sp->forward.begin; e < sp->forward.end; e++)
		fwd = lt.non_saved_after[e] > fwd ? lt.non_saved_after[e] : fwd;
	for (uint32_t e = sp->backward.begin; e < sp->backward.end; e++)
		bwd = lt.non_saved_after[e] > bwd ? lt.non_saved_after[e] : bwd;
	assert_int_equal(fwd, base + TMP_BYTES);
	assert_int_equal(bwd, base + G_BYTES);
	assert_int_equal(lt.non_saved_after[sp->backward.end], base);
	assert_int_equal(lt.non_saved_outside_bytes, base + X_BYTES);
	assert_int_equal(lt.non_saved_peak_bytes, base + G_BYTES);
	lynx_prof_lifetimes_free(&lt);
	free(m);
}

static void test_lifetime_without_structure_only_temporaries_and_other(void **state)
{
	struct model *m = model_trace();
	struct lynx_prof_lifetimes lt;
	struct lynx_prof_structure none = {0};
	char why[256];

	build(&m->tb, &lt);
	assert_int_equal(lynx_prof_lifetimes_classify(&lt, &none, m->tb.count, why, sizeof(why)),
	                 0);
	assert_int_equal(class_at(&lt, W), LYNX_PROF_CLASS_OTHER);
	assert_int_equal(class_at(&lt, m->s[0][0][0]), LYNX_PROF_CLASS_TEMPORARY);
	assert_int_equal(lt.saved_count, 0);
	lynx_prof_lifetimes_free(&lt);
	free(m);
}

static void test_lifetime_classify_refuses_bad_spans(void **state)
{
	struct model *m = model_trace();
	struct lynx_prof_lifetimes lt;
	struct lynx_prof_structure s = structure_of(m);
	char why[256] = "";

	build(&m->tb, &lt);
	m->layers[3].backward.end = (uint32_t)m->tb.count + 1;
	assert_int_equal(lynx_prof_lifetimes_classify(&lt, &s, m->tb.count, why, sizeof(why)),
	                 -EINVAL);
	assert_non_null(strstr(why, "layer span backward 3"));
	m->layers[3].backward.end = m->layers[3].backward.begin;
	m->layers[1].iteration = ITERS;
	assert_int_equal(lynx_prof_lifetimes_classify(&lt, &s, m->tb.count, why, sizeof(why)),
	                 -EINVAL);
	assert_non_null(strstr(why, "layer span 1"));
	m->layers[1].iteration = 0;
	m->iterations[1].begin = m->iterations[0].end - 1;
	assert_int_equal(lynx_prof_lifetimes_classify(&lt, &s, m->tb.count, why, sizeof(why)),
	                 -EINVAL);
	assert_non_null(strstr(why, "iteration 1"));
	lynx_prof_lifetimes_free(&lt);
	free(m);
}

static void test_lifetime_class_names_come_from_the_list(void **state)
{
	assert_string_equal(lynx_prof_class_name(LYNX_PROF_CLASS_SAVED), "saved_activation");
	assert_string_equal(lynx_prof_class_name(LYNX_PROF_CLASS_WORKSPACE), "workspace");
	assert_null(lynx_prof_class_name(LYNX_PROF_CLASS_COUNT));
}

/* ---- A real trace: tinytrain under liblynx.so ------------------------------------------- */

static char build_dir[1024]; /* build/, from argv[0] = build/tests/test_lifetime */
static char scratch[1100];

/* Runs tinytrain (1 rank, 2 layers, 2 micro-batches, 2 steps) with LYNX_EVENTS and reads
 * the rank's trace (the file with the most events: the launcher only makes an NCCL id).
 * Returns the peak_bytes tinytrain printed for its first step. */
static uint64_t tinytrain_trace(struct lynx_prof_trace *trace)
{
	char cmd[8192], path[1400], why[256] = "";
	struct dirent *entry;
	uint64_t peak = 0;
	DIR *d;

	snprintf(cmd, sizeof(cmd),
	         "LD_PRELOAD=%s/liblynx.so LYNX_MODE=profile LYNX_EVENTS=%s/ev "
	         "%s/bin/tinytrain --nproc 1 --layers 2 --microbatches 2 --steps 2 >%s/out",
	         build_dir, scratch, build_dir, scratch);
	assert_int_equal(system(cmd), 0);
	snprintf(path, sizeof(path), "%s/out", scratch);
	FILE *out = fopen(path, "r");
	assert_non_null(out);
	char line[512];
	assert_non_null(fgets(line, sizeof(line), out));
	fclose(out);
	const char *p = strstr(line, "\"peak_bytes\":");
	assert_non_null(p);
	peak = strtoull(p + strlen("\"peak_bytes\":"), NULL, 10);

	memset(trace, 0, sizeof(*trace));
	d = opendir(scratch);
	assert_non_null(d);
	while ((entry = readdir(d))) {
		struct lynx_prof_trace t;
		if (strncmp(entry->d_name, "ev.", 3))
			continue;
		snprintf(path, sizeof(path), "%s/%s", scratch, entry->d_name);
		if (lynx_prof_trace_read(path, &t, why, sizeof(why)))
			fail_msg("%s: %s", path, why);
		if (t.count > trace->count) {
			lynx_prof_trace_free(trace);
			*trace = t;
		} else {
			lynx_prof_trace_free(&t);
		}
	}
	closedir(d);
	assert_true(trace->count > 0);
	return peak;
}

static bool is(const struct lynx_prof_event *ev, const char *hook)
{
	return !ev->nested && ev->result == 0 && !strcmp(ev->hook, hook);
}

static void test_lifetime_on_tinytrain_matches_its_allocations(void **state)
{
	struct lynx_prof_trace trace;
	struct lynx_prof_lifetimes lt;
	size_t mallocs = 0, nested = 0, syncs = 0;
	struct lynx_prof_span iterations[2];
	uint32_t sync_at[8];
	char why[256] = "";

	uint64_t simgpu_peak = tinytrain_trace(&trace);
	for (size_t i = 0; i < trace.count; i++) {
		const struct lynx_prof_event *ev = &trace.events[i];
		mallocs += is(ev, "cudaMallocAsync");
		nested += ev->nested && (!strcmp(ev->hook, "cuMemAllocAsync") ||
		                         !strcmp(ev->hook, "cuMemFreeAsync"));
		/* Each step is bracketed by device synchronisations (its timing). */
		if (is(ev, "cudaDeviceSynchronize") && syncs < 8)
			sync_at[syncs++] = (uint32_t)i;
	}
	if (lynx_prof_lifetimes_build(&trace, &lt, why, sizeof(why)))
		fail_msg("build: %s", why);

	/* One buffer per cudaMallocAsync, each counted once, every free matched. */
	assert_int_equal(lt.count, mallocs);
	assert_int_equal(lt.duplicates, nested);
	assert_int_equal(lt.unmatched_frees, 0);
	assert_int_equal(lt.overlaps, 0);
	/* Every tensor is written by a kernel, a copy or a memset that names it. */
	for (size_t id = 0; id < lt.count; id++)
		if (lt.buffers[id].producer == LYNX_PROF_NONE)
			fail_msg("buffer %zu (%llu bytes) never referenced", id,
			         (unsigned long long)lt.buffers[id].bytes);

	/* Two steps: the persistent buffers are the seven tinytrain never frees (weights,
	 * gradients, two Adam moments, the workspace, the loss sum, the embedding pointer);
	 * every buffer made inside a step is a temporary, with no layer spans given. */
	assert_true(syncs >= 4);
	iterations[0] = (struct lynx_prof_span){sync_at[0], sync_at[1] + 1};
	iterations[1] = (struct lynx_prof_span){sync_at[2], sync_at[3] + 1};
	struct lynx_prof_structure s = {iterations, 2, NULL, 0};
	if (lynx_prof_lifetimes_classify(&lt, &s, trace.count, why, sizeof(why)))
		fail_msg("classify: %s", why);
	size_t weights = 0, never_freed = 0;
	for (size_t id = 0; id < lt.count; id++) {
		const struct lynx_prof_buffer *b = &lt.buffers[id];
		weights += b->cls == LYNX_PROF_CLASS_WEIGHT;
		never_freed += b->free_event == LYNX_PROF_NONE;
		if (b->alloc_event >= iterations[0].begin && b->alloc_event < iterations[1].end)
			assert_int_equal(b->cls, LYNX_PROF_CLASS_TEMPORARY);
	}
	assert_int_equal(never_freed, 7);
	assert_int_equal(weights, 7);
	assert_int_equal(lt.buffers[0].bytes, lt.buffers[3].bytes); /* params .. adam_v */
	/* Requested bytes: at most simgpu's physical peak, which rounds allocations up. */
	assert_true(lt.peak_bytes <= simgpu_peak);
	assert_true(lt.peak_bytes >= simgpu_peak * 9 / 10);
	lynx_prof_lifetimes_free(&lt);
	lynx_prof_trace_free(&trace);
}

int main(int argc, char **argv)
{
	const char *slash = strrchr(argv[0], '/');
	char resolved[1200];

	snprintf(resolved, sizeof(resolved), "%.*s/..", slash ? (int)(slash - argv[0]) : 1,
	         slash ? argv[0] : ".");
	if (!realpath(resolved, build_dir))
		return 1;
	snprintf(scratch, sizeof(scratch), "%s/test-lifetime.%d", build_dir, (int)getpid());
	mkdir(scratch, 0755);

	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_lifetime_counts_a_runtime_call_and_its_driver_call_once),
	        cmocka_unit_test(test_lifetime_counts_a_nested_allocation_without_an_enclosing_one),
	        cmocka_unit_test(test_lifetime_address_reuse_after_free_is_a_new_buffer),
	        cmocka_unit_test(test_lifetime_finds_pointers_into_the_middle_but_not_past_the_end),
	        cmocka_unit_test(test_lifetime_copies_memsets_and_collectives_reference_buffers),
	        cmocka_unit_test(test_lifetime_allocation_over_a_live_buffer_ends_it),
	        cmocka_unit_test(test_lifetime_producer_is_past_a_fill),
	        cmocka_unit_test(test_lifetime_refuses_a_trace_out_of_time_order),
	        cmocka_unit_test(test_lifetime_classifies_weights_workspace_temporaries_and_saved),
	        cmocka_unit_test(test_lifetime_peak_is_at_a_first_backward_with_its_breakdown),
	        cmocka_unit_test(test_lifetime_peak_is_taken_in_a_steady_iteration),
	        cmocka_unit_test(test_lifetime_places_the_non_saved_bytes),
	        cmocka_unit_test(test_lifetime_an_integer_beside_stale_padding_makes_no_workspace),
	        cmocka_unit_test(test_lifetime_without_structure_only_temporaries_and_other),
	        cmocka_unit_test(test_lifetime_classify_refuses_bad_spans),
	        cmocka_unit_test(test_lifetime_class_names_come_from_the_list),
	        cmocka_unit_test(test_lifetime_on_tinytrain_matches_its_allocations),
	};
	int failed = cmocka_run_group_tests_name("lifetime", tests, NULL, NULL);
	char rm[1200];
	snprintf(rm, sizeof(rm), "rm -rf %s", scratch);
	if (!failed && system(rm))
		return 1;
	return failed;
}
