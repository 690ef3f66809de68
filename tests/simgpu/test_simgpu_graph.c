/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simgpu's CUDA graphs: captured work takes effect only when the graph runs, every launch
 * replays it with the captured costs (hand-computed times), fork/join across streams,
 * CUDA's capture states and errors (illegal calls fail and invalidate the capture), and
 * the capture modes' rules for unsafe calls.
 * Settings (main): every API call costs 500 ns, so a runtime call (one driver call)
 * advances the host clock by 1000 ns; device memory bandwidth is 1 byte/ns, so a memset
 * of n bytes lasts n ns; concurrent kernels get 50% each.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "test_kernels.h"

#define CALL 1000 /* host time of one runtime call */
#define N 64      /* floats per buffer */

/* Settles all queued work and returns the host clock. */
static uint64_t settle(void)
{
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
	return simgpu_now_ns();
}

static void *device_alloc(size_t bytes)
{
	void *p = NULL;

	assert_int_equal(cudaMalloc(&p, bytes), cudaSuccess);
	assert_int_equal(cudaMemset(p, 0, bytes), cudaSuccess);
	return p;
}

static cudaStream_t new_stream(unsigned int flags)
{
	cudaStream_t s;

	assert_int_equal(cudaStreamCreateWithFlags(&s, flags), cudaSuccess);
	return s;
}

static enum cudaStreamCaptureStatus capture_status(cudaStream_t s)
{
	enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive + 7;

	assert_int_equal(cudaStreamIsCapturing(s, &status), cudaSuccess);
	return status;
}

/* Every float of the device buffer equals want. */
static void assert_floats(const float *dev, float want)
{
	float host[N];

	assert_int_equal(cudaMemcpy(host, dev, sizeof(host), cudaMemcpyDeviceToHost), cudaSuccess);
	for (int i = 0; i < N; i++)
		if (host[i] != want)
			fail_msg("element %d is %g, want %g", i, host[i], want);
}

static void assert_bytes(const void *dev, size_t bytes, unsigned char want)
{
	unsigned char *host = malloc(bytes);

	assert_non_null(host);
	assert_int_equal(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
	for (size_t i = 0; i < bytes; i++)
		if (host[i] != want)
			fail_msg("byte %zu is %#x, want %#x", i, host[i], want);
	free(host);
}

static cudaGraphExec_t instantiate(cudaGraph_t graph)
{
	cudaGraphExec_t exec = NULL;

	assert_non_null(graph);
	assert_int_equal(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
	assert_non_null(exec);
	return exec;
}

/* ---- Replay ----------------------------------------------------------------------------- */

struct chain {
	float *a, *b, *c;
	unsigned char *d;
};

#define MEMSET_BYTES 4096
/* The chain's cost: 10 + 20 + 30 us of kernels, then a 4096-byte memset at 1 byte/ns. */
#define CHAIN_NS (10000 + 20000 + 30000 + MEMSET_BYTES)

/* Three dependent kernels and a memset: a = 3, b = a, c = b, d = 0x11. */
static void issue_chain(cudaStream_t s, const struct chain *ch)
{
	assert_int_equal(launch_fill(s, 10000, ch->a, 3.0f, N), cudaSuccess);
	assert_int_equal(launch_copy(s, 20000, ch->a, ch->b, N), cudaSuccess);
	assert_int_equal(launch_copy(s, 30000, ch->b, ch->c, N), cudaSuccess);
	assert_int_equal(cudaMemsetAsync(ch->d, 0x11, MEMSET_BYTES, s), cudaSuccess);
}

static void chain_reset(const struct chain *ch)
{
	assert_int_equal(cudaMemset(ch->a, 0, N * sizeof(float)), cudaSuccess);
	assert_int_equal(cudaMemset(ch->b, 0, N * sizeof(float)), cudaSuccess);
	assert_int_equal(cudaMemset(ch->c, 0, N * sizeof(float)), cudaSuccess);
	assert_int_equal(cudaMemset(ch->d, 0, MEMSET_BYTES), cudaSuccess);
}

static void test_three_launches_replay_the_captured_ops_at_three_times_their_cost(void **state)
{
	cudaStream_t s = new_stream(cudaStreamNonBlocking);
	struct chain ch = {device_alloc(N * sizeof(float)), device_alloc(N * sizeof(float)),
	                   device_alloc(N * sizeof(float)), device_alloc(MEMSET_BYTES)};
	cudaGraph_t graph = NULL;
	uint64_t kernels = simgpu_counter("cuLaunchKernel");

	/* Eagerly: the device is busy for CHAIN_NS from the first call's end. */
	uint64_t h0 = settle();
	issue_chain(s, &ch);
	assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
	assert_int_equal(simgpu_now_ns(), h0 + CALL + CHAIN_NS);
	assert_floats(ch.c, 3.0f);
	chain_reset(&ch);

	assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
	issue_chain(s, &ch);
	assert_int_equal(cudaStreamEndCapture(s, &graph), cudaSuccess);
	cudaGraphExec_t exec = instantiate(graph);

	/* Three launches, issued 1000 ns apart, run back to back: 3 x CHAIN_NS. */
	h0 = settle();
	for (int i = 0; i < 3; i++)
		assert_int_equal(cudaGraphLaunch(exec, s), cudaSuccess);
	assert_int_equal(simgpu_now_ns(), h0 + 3 * CALL);
	assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
	assert_int_equal(simgpu_now_ns(), h0 + CALL + 3 * CHAIN_NS);
	assert_floats(ch.a, 3.0f);
	assert_floats(ch.b, 3.0f);
	assert_floats(ch.c, 3.0f);
	assert_bytes(ch.d, MEMSET_BYTES, 0x11);
	/* The replays booked the kernels themselves: no launch reached the driver. */
	assert_int_equal(simgpu_counter("cuLaunchKernel"), kernels + 6);

	assert_int_equal(cudaGraphExecDestroy(exec), cudaSuccess);
	assert_int_equal(cudaGraphDestroy(graph), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
	cudaFree(ch.a);
	cudaFree(ch.b);
	cudaFree(ch.c);
	cudaFree(ch.d);
}

static void test_captured_work_takes_effect_only_when_the_graph_runs(void **state)
{
	cudaStream_t s = new_stream(cudaStreamNonBlocking);
	float *x = device_alloc(N * sizeof(float));
	unsigned char *y = device_alloc(MEMSET_BYTES);
	cudaGraph_t graph = NULL;
	float value = 5.0f;

	assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
	assert_int_equal(launch_fill(s, 1000, x, value, N), cudaSuccess);
	assert_int_equal(cudaMemsetAsync(y, 0x22, MEMSET_BYTES, s), cudaSuccess);
	assert_int_equal(cudaStreamEndCapture(s, &graph), cudaSuccess);
	value = 9.0f; /* the launch's parameter bytes were copied at capture */

	/* Nothing was queued: the stream is idle and the buffers are untouched. */
	assert_int_equal(cudaStreamQuery(s), cudaSuccess);
	settle();
	assert_floats(x, 0.0f);
	assert_bytes(y, MEMSET_BYTES, 0);

	cudaGraphExec_t exec = instantiate(graph);
	for (int run = 0; run < 2; run++) {
		assert_int_equal(cudaMemset(x, 0, N * sizeof(float)), cudaSuccess);
		assert_int_equal(cudaMemset(y, 0, MEMSET_BYTES), cudaSuccess);
		assert_int_equal(cudaGraphLaunch(exec, s), cudaSuccess);
		/* Queued, not applied, until the host observes completion. */
		assert_int_equal(cudaStreamQuery(s), cudaErrorNotReady);
		assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
		assert_floats(x, 5.0f);
		assert_bytes(y, MEMSET_BYTES, 0x22);
	}

	assert_int_equal(cudaGraphExecDestroy(exec), cudaSuccess);
	assert_int_equal(cudaGraphDestroy(graph), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
	cudaFree(x);
	cudaFree(y);
}

/* ---- Capture states --------------------------------------------------------------------- */

static void test_capture_status_is_none_active_invalidated_then_none(void **state)
{
	cudaStream_t s = new_stream(cudaStreamNonBlocking);
	float *x = device_alloc(N * sizeof(float));
	enum cudaStreamCaptureStatus status;
	unsigned long long id = 0;
	cudaGraph_t graph = NULL, capturing = NULL;
	const cudaGraphNode_t *deps = NULL;
	const cudaGraphEdgeData *edges = NULL;
	size_t count = 99;

	assert_int_equal(capture_status(s), cudaStreamCaptureStatusNone);
	assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
	assert_int_equal(capture_status(s), cudaStreamCaptureStatusActive);
	assert_int_equal(
	        cudaStreamGetCaptureInfo(s, &status, &id, &capturing, &deps, &edges, &count),
	        cudaSuccess);
	assert_int_equal(status, cudaStreamCaptureStatusActive);
	assert_true(id > 0);
	assert_non_null(capturing);
	assert_int_equal(count, 0);
	assert_int_equal(launch_fill(s, 1000, x, 1.0f, N), cudaSuccess);
	assert_int_equal(cudaStreamGetCaptureInfo(s, &status, NULL, NULL, &deps, &edges, &count),
	                 cudaSuccess);
	assert_int_equal(count, 1); /* the next op depends on the launch */
	assert_non_null(deps[0]);
	assert_int_equal(edges[0].type, 0);
	/* The graph being captured into is neither instantiable nor destroyable yet. */
	cudaGraphExec_t exec = NULL;
	assert_int_equal(cudaGraphInstantiate(&exec, capturing, 0), cudaErrorIllegalState);
	assert_int_equal(cudaGraphDestroy(capturing), cudaErrorIllegalState);
	/* A second capture on the same stream, and capture of the legacy stream, are refused. */
	assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal),
	                 cudaErrorIllegalState);
	assert_int_equal(cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal),
	                 cudaErrorStreamCaptureUnsupported);

	assert_int_equal(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
	assert_int_equal(capture_status(s), cudaStreamCaptureStatusInvalidated);
	assert_int_equal(launch_fill(s, 1000, x, 2.0f, N), cudaErrorStreamCaptureInvalidated);
	assert_int_equal(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
	assert_null(graph);
	assert_int_equal(capture_status(s), cudaStreamCaptureStatusNone);
	assert_int_equal(cudaStreamEndCapture(s, &graph), cudaErrorIllegalState);

	/* The per-thread default stream captures too; meanwhile the legacy stream, which it
	 * synchronises with, cannot be asked (and is not invalidated for asking). */
	assert_int_equal(cudaStreamBeginCapture_ptsz(0, cudaStreamCaptureModeGlobal), cudaSuccess);
	assert_int_equal(cudaStreamIsCapturing_ptsz(0, &status), cudaSuccess);
	assert_int_equal(status, cudaStreamCaptureStatusActive);
	assert_int_equal(cudaStreamIsCapturing(cudaStreamLegacy, &status),
	                 cudaErrorStreamCaptureImplicit);
	assert_int_equal(cudaStreamEndCapture_ptsz(0, &graph), cudaSuccess);
	assert_int_equal(cudaStreamIsCapturing_ptsz(0, &status), cudaSuccess);
	assert_int_equal(status, cudaStreamCaptureStatusNone);
	assert_int_equal(cudaGraphDestroy(graph), cudaSuccess);
	cudaGetLastError();

	assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
	cudaFree(x);
}

/* ---- Capture-illegal calls -------------------------------------------------------------- */

struct illegal_env {
	cudaStream_t s;
	float *x;
	void *freed, *p;
	float host[N];
};

typedef cudaError_t (*illegal_call)(struct illegal_env *e);

static cudaError_t sync_the_stream(struct illegal_env *e)
{
	return cudaStreamSynchronize(e->s);
}
static cudaError_t query_the_stream(struct illegal_env *e)
{
	return cudaStreamQuery(e->s);
}
static cudaError_t device_malloc(struct illegal_env *e)
{
	return cudaMalloc(&e->p, 4096);
}
static cudaError_t device_free(struct illegal_env *e)
{
	return cudaFree(e->freed);
}
static cudaError_t pinned_malloc(struct illegal_env *e)
{
	return cudaMallocHost(&e->p, 4096);
}
static cudaError_t blocking_copy(struct illegal_env *e)
{
	return cudaMemcpy(e->host, e->x, sizeof(e->host), cudaMemcpyDeviceToHost);
}
static cudaError_t device_synchronize(struct illegal_env *e)
{
	return cudaDeviceSynchronize();
}
static cudaError_t pageable_async_copy(struct illegal_env *e)
{
	return cudaMemcpyAsync(e->host, e->x, sizeof(e->host), cudaMemcpyDeviceToHost, e->s);
}
static cudaError_t stream_ordered_malloc(struct illegal_env *e)
{
	return cudaMallocAsync(&e->p, 4096, e->s);
}
static cudaError_t destroy_the_stream(struct illegal_env *e)
{
	return cudaStreamDestroy(e->s);
}

static void test_capture_illegal_calls_fail_and_invalidate_the_capture(void **state)
{
	static const struct {
		const char *name;
		illegal_call call;
	} calls[] = {
	        {"cudaStreamSynchronize", sync_the_stream},
	        {"cudaStreamQuery", query_the_stream},
	        {"cudaMalloc", device_malloc},
	        {"cudaFree", device_free},
	        {"cudaMallocHost", pinned_malloc},
	        {"cudaMemcpy", blocking_copy},
	        {"cudaDeviceSynchronize", device_synchronize},
	        {"cudaMemcpyAsync to pageable memory", pageable_async_copy},
	        {"cudaMallocAsync", stream_ordered_malloc},
	        {"cudaStreamDestroy", destroy_the_stream},
	};
	struct illegal_env e = {.s = new_stream(cudaStreamNonBlocking),
	                        .x = device_alloc(N * sizeof(float)),
	                        .freed = device_alloc(4096)};

	for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
		cudaGraph_t graph = (cudaGraph_t)&e;
		e.p = NULL;
		assert_int_equal(cudaStreamBeginCapture(e.s, cudaStreamCaptureModeGlobal),
		                 cudaSuccess);
		assert_int_equal(launch_fill(e.s, 1000, e.x, 1.0f, N), cudaSuccess);
		cudaError_t err = calls[i].call(&e);
		if (err != cudaErrorStreamCaptureUnsupported)
			fail_msg("%s during capture: %s", calls[i].name, cudaGetErrorName(err));
		assert_null(e.p);
		assert_int_equal(capture_status(e.s), cudaStreamCaptureStatusInvalidated);
		assert_int_equal(cudaStreamEndCapture(e.s, &graph),
		                 cudaErrorStreamCaptureInvalidated);
		assert_null(graph);
		assert_int_equal(capture_status(e.s), cudaStreamCaptureStatusNone);
	}
	/* Nothing captured ran, and the refused free did not free. */
	assert_floats(e.x, 0.0f);
	assert_int_equal(cudaFree(e.freed), cudaSuccess);
	cudaGetLastError();

	assert_int_equal(cudaStreamDestroy(e.s), cudaSuccess);
	cudaFree(e.x);
}

static void test_a_captured_event_cannot_be_queried_and_the_capture_goes_on(void **state)
{
	cudaStream_t s = new_stream(cudaStreamNonBlocking);
	float *x = device_alloc(N * sizeof(float));
	cudaEvent_t ev;
	cudaGraph_t graph = NULL;
	float ms;

	assert_int_equal(cudaEventCreate(&ev), cudaSuccess);
	assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
	assert_int_equal(launch_fill(s, 1000, x, 1.0f, N), cudaSuccess);
	assert_int_equal(cudaEventRecord(ev, s), cudaSuccess);
	assert_int_equal(cudaEventQuery(ev), cudaErrorCapturedEvent);
	assert_int_equal(cudaEventSynchronize(ev), cudaErrorCapturedEvent);
	assert_int_equal(cudaEventElapsedTime(&ms, ev, ev), cudaErrorCapturedEvent);
	assert_int_equal(capture_status(s), cudaStreamCaptureStatusActive);
	assert_int_equal(cudaStreamEndCapture(s, &graph), cudaSuccess);
	/* Out of the capture, the event is an ordinary one again. */
	assert_int_equal(cudaEventRecord(ev, s), cudaSuccess);
	assert_int_equal(cudaEventSynchronize(ev), cudaSuccess);
	cudaGetLastError();

	assert_int_equal(cudaGraphDestroy(graph), cudaSuccess);
	assert_int_equal(cudaEventDestroy(ev), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
	cudaFree(x);
}

static void test_legacy_stream_work_while_a_blocking_stream_captures_is_implicit(void **state)
{
	cudaStream_t blocking = new_stream(cudaStreamDefault);
	cudaStream_t non_blocking = new_stream(cudaStreamNonBlocking);
	float *x = device_alloc(N * sizeof(float));
	cudaGraph_t graph = NULL;

	/* Relaxed: only the implicit dependency is at stake. */
	assert_int_equal(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeRelaxed),
	                 cudaSuccess);
	assert_int_equal(launch_fill(cudaStreamLegacy, 1000, x, 1.0f, N),
	                 cudaErrorStreamCaptureImplicit);
	assert_int_equal(capture_status(blocking), cudaStreamCaptureStatusInvalidated);
	assert_int_equal(cudaStreamEndCapture(blocking, &graph), cudaErrorStreamCaptureInvalidated);

	/* A non-blocking stream does not synchronise with the legacy stream. */
	assert_int_equal(cudaStreamBeginCapture(non_blocking, cudaStreamCaptureModeRelaxed),
	                 cudaSuccess);
	assert_int_equal(launch_fill(cudaStreamLegacy, 1000, x, 1.0f, N), cudaSuccess);
	assert_int_equal(cudaStreamEndCapture(non_blocking, &graph), cudaSuccess);
	assert_int_equal(cudaGraphDestroy(graph), cudaSuccess);
	assert_floats(x, 1.0f);
	cudaGetLastError();

	assert_int_equal(cudaStreamDestroy(blocking), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(non_blocking), cudaSuccess);
	cudaFree(x);
}

/* ---- Capture modes ---------------------------------------------------------------------- */

struct other_thread {
	cudaStream_t s;
	cudaError_t malloc_result, end_result;
};

/* cudaMalloc (and cudaFree when it succeeded) on another thread. */
static void *malloc_elsewhere(void *arg)
{
	struct other_thread *t = arg;
	void *p = NULL;

	t->malloc_result = cudaMalloc(&p, 4096);
	if (t->malloc_result == cudaSuccess)
		t->malloc_result = cudaFree(p);
	return NULL;
}

static cudaError_t malloc_on_another_thread(void)
{
	struct other_thread t = {0};
	pthread_t thread;

	assert_int_equal(pthread_create(&thread, NULL, malloc_elsewhere, &t), 0);
	assert_int_equal(pthread_join(thread, NULL), 0);
	return t.malloc_result;
}

static void *end_elsewhere(void *arg)
{
	struct other_thread *t = arg;
	cudaGraph_t graph = NULL;

	t->end_result = cudaStreamEndCapture(t->s, &graph);
	return NULL;
}

static void test_capture_modes_decide_who_may_make_unsafe_calls(void **state)
{
	cudaStream_t s = new_stream(cudaStreamNonBlocking);
	cudaGraph_t graph = NULL;
	void *p = NULL;

	/* Relaxed: nobody is prohibited. */
	assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
	assert_int_equal(cudaMalloc(&p, 4096), cudaSuccess);
	assert_int_equal(cudaFree(p), cudaSuccess);
	assert_int_equal(malloc_on_another_thread(), cudaSuccess);
	assert_int_equal(capture_status(s), cudaStreamCaptureStatusActive);
	assert_int_equal(cudaStreamEndCapture(s, &graph), cudaSuccess);
	assert_int_equal(cudaGraphDestroy(graph), cudaSuccess);

	/* ThreadLocal: only the capturing thread is. */
	assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
	assert_int_equal(malloc_on_another_thread(), cudaSuccess);
	assert_int_equal(capture_status(s), cudaStreamCaptureStatusActive);
	assert_int_equal(cudaMalloc(&p, 4096), cudaErrorStreamCaptureUnsupported);
	assert_int_equal(capture_status(s), cudaStreamCaptureStatusInvalidated);
	assert_int_equal(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);

	/* Global: every thread is; and only the capturing thread may end the capture. */
	assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
	struct other_thread t = {.s = s};
	pthread_t thread;
	assert_int_equal(pthread_create(&thread, NULL, end_elsewhere, &t), 0);
	assert_int_equal(pthread_join(thread, NULL), 0);
	assert_int_equal(t.end_result, cudaErrorStreamCaptureWrongThread);
	assert_int_equal(capture_status(s), cudaStreamCaptureStatusActive);
	assert_int_equal(malloc_on_another_thread(), cudaErrorStreamCaptureUnsupported);
	assert_int_equal(capture_status(s), cudaStreamCaptureStatusInvalidated);
	assert_int_equal(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
	assert_int_equal(malloc_on_another_thread(), cudaSuccess);
	cudaGetLastError();

	assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
}

/* ---- Several streams --------------------------------------------------------------------- */

static void test_a_fork_joined_back_replays_both_branches_concurrently(void **state)
{
	cudaStream_t s1 = new_stream(cudaStreamNonBlocking), s2 = new_stream(cudaStreamNonBlocking);
	float *a = device_alloc(N * sizeof(float)), *b = device_alloc(N * sizeof(float));
	float *c = device_alloc(N * sizeof(float));
	cudaEvent_t fork, join;
	cudaGraph_t graph = NULL;

	assert_int_equal(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), cudaSuccess);
	assert_int_equal(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), cudaSuccess);
	assert_int_equal(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal), cudaSuccess);
	assert_int_equal(launch_fill(s1, 10000, a, 4.0f, N), cudaSuccess);
	assert_int_equal(cudaEventRecord(fork, s1), cudaSuccess);
	assert_int_equal(capture_status(s2), cudaStreamCaptureStatusNone);
	assert_int_equal(cudaStreamWaitEvent(s2, fork, 0), cudaSuccess);
	assert_int_equal(capture_status(s2), cudaStreamCaptureStatusActive); /* joined */
	assert_int_equal(launch_copy(s2, 10000, a, b, N), cudaSuccess);
	assert_int_equal(launch_fill(s1, 10000, c, 6.0f, N), cudaSuccess);
	assert_int_equal(cudaEventRecord(join, s2), cudaSuccess);
	assert_int_equal(cudaStreamEndCapture(s2, &graph), cudaErrorStreamCaptureUnmatched);
	assert_int_equal(cudaStreamWaitEvent(s1, join, 0), cudaSuccess);
	assert_int_equal(cudaStreamEndCapture(s1, &graph), cudaSuccess);
	assert_int_equal(capture_status(s2), cudaStreamCaptureStatusNone);
	cudaGraphExec_t exec = instantiate(graph);

	/* a [1000, 11000); then b's copy [11000, 21000) and c's fill, sharing compute with it
	 * at half speed until 21000 and alone after: [11000, 26000). */
	uint64_t h0 = settle();
	assert_int_equal(cudaGraphLaunch(exec, s1), cudaSuccess);
	assert_int_equal(cudaStreamSynchronize(s1), cudaSuccess);
	assert_int_equal(simgpu_now_ns(), h0 + CALL + 25000);
	assert_floats(b, 4.0f);
	assert_floats(c, 6.0f);
	cudaGetLastError();

	assert_int_equal(cudaGraphExecDestroy(exec), cudaSuccess);
	assert_int_equal(cudaGraphDestroy(graph), cudaSuccess);
	assert_int_equal(cudaEventDestroy(fork), cudaSuccess);
	assert_int_equal(cudaEventDestroy(join), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(s1), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(s2), cudaSuccess);
	cudaFree(a);
	cudaFree(b);
	cudaFree(c);
}

static void test_unjoined_forks_and_outside_dependencies_fail_the_capture(void **state)
{
	cudaStream_t s1 = new_stream(cudaStreamNonBlocking), s2 = new_stream(cudaStreamNonBlocking);
	float *x = device_alloc(N * sizeof(float));
	cudaEvent_t ev;
	cudaGraph_t graph = (cudaGraph_t)&ev;

	assert_int_equal(cudaEventCreate(&ev), cudaSuccess);
	/* s2 forks off and never comes back. */
	assert_int_equal(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal), cudaSuccess);
	assert_int_equal(cudaEventRecord(ev, s1), cudaSuccess);
	assert_int_equal(cudaStreamWaitEvent(s2, ev, 0), cudaSuccess);
	assert_int_equal(launch_fill(s2, 1000, x, 1.0f, N), cudaSuccess);
	assert_int_equal(cudaStreamEndCapture(s1, &graph), cudaErrorStreamCaptureUnjoined);
	assert_null(graph);
	assert_int_equal(capture_status(s1), cudaStreamCaptureStatusNone);
	assert_int_equal(capture_status(s2), cudaStreamCaptureStatusNone);

	/* Waiting on work outside the capture. */
	assert_int_equal(cudaEventRecord(ev, s2), cudaSuccess);
	assert_int_equal(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal), cudaSuccess);
	assert_int_equal(cudaStreamWaitEvent(s1, ev, 0), cudaErrorStreamCaptureIsolation);
	assert_int_equal(cudaStreamEndCapture(s1, &graph), cudaErrorStreamCaptureInvalidated);
	assert_floats(x, 0.0f);
	cudaGetLastError();

	assert_int_equal(cudaEventDestroy(ev), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(s1), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(s2), cudaSuccess);
	cudaFree(x);
}

/* ---- Executable graphs ------------------------------------------------------------------- */

static void test_an_executable_graph_outlives_its_graph_and_its_launches_stay_ordered(void **state)
{
	cudaStream_t s1 = new_stream(cudaStreamNonBlocking), s2 = new_stream(cudaStreamNonBlocking);
	float *x = device_alloc(N * sizeof(float));
	cudaGraph_t graph = NULL;

	assert_int_equal(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal), cudaSuccess);
	assert_int_equal(launch_fill(s1, 10000, x, 2.0f, N), cudaSuccess);
	assert_int_equal(cudaStreamEndCapture(s1, &graph), cudaSuccess);
	cudaGraphExec_t exec = instantiate(graph);
	assert_int_equal(cudaGraphDestroy(graph), cudaSuccess);

	/* The launch on s2 waits for the one on s1: [1000, 11000), then [11000, 21000). */
	uint64_t h0 = settle();
	assert_int_equal(cudaGraphLaunch(exec, s1), cudaSuccess);
	assert_int_equal(cudaGraphLaunch(exec, s2), cudaSuccess);
	assert_int_equal(cudaStreamSynchronize(s2), cudaSuccess);
	assert_int_equal(simgpu_now_ns(), h0 + CALL + 2 * 10000);
	assert_floats(x, 2.0f);

	/* A graph launch cannot itself be captured (simgpu has no child graph nodes). */
	assert_int_equal(cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal), cudaSuccess);
	assert_int_equal(cudaGraphLaunch(exec, s2), cudaErrorStreamCaptureUnsupported);
	assert_int_equal(cudaStreamEndCapture(s2, &graph), cudaErrorStreamCaptureInvalidated);

	assert_int_equal(cudaGraphExecDestroy(exec), cudaSuccess);
	assert_int_equal(cudaGraphLaunch(exec, s1), cudaErrorInvalidResourceHandle);
	assert_int_equal(cudaGraphExecDestroy(exec), cudaErrorInvalidResourceHandle);
	cudaGetLastError();

	assert_int_equal(cudaStreamDestroy(s1), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(s2), cudaSuccess);
	cudaFree(x);
}

int main(void)
{
	setenv("SIMGPU_API_COST_NS", "500", 1);
	setenv("SIMGPU_HBM_BW", "1G", 1);
	setenv("SIMGPU_CONCURRENT_SHARE_PCT", "50", 1);
	test_kernels_register();

	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(
	                test_three_launches_replay_the_captured_ops_at_three_times_their_cost),
	        cmocka_unit_test(test_captured_work_takes_effect_only_when_the_graph_runs),
	        cmocka_unit_test(test_capture_status_is_none_active_invalidated_then_none),
	        cmocka_unit_test(test_capture_illegal_calls_fail_and_invalidate_the_capture),
	        cmocka_unit_test(test_a_captured_event_cannot_be_queried_and_the_capture_goes_on),
	        cmocka_unit_test(
	                test_legacy_stream_work_while_a_blocking_stream_captures_is_implicit),
	        cmocka_unit_test(test_capture_modes_decide_who_may_make_unsafe_calls),
	        cmocka_unit_test(test_a_fork_joined_back_replays_both_branches_concurrently),
	        cmocka_unit_test(test_unjoined_forks_and_outside_dependencies_fail_the_capture),
	        cmocka_unit_test(
	                test_an_executable_graph_outlives_its_graph_and_its_launches_stay_ordered),
	};
	return cmocka_run_group_tests_name("simgpu_graph", tests, NULL, NULL);
}
