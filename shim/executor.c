/* SPDX-License-Identifier: Apache-2.0 */
/* The executor: see executor.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <uthash.h>
#include <utlist.h>

#include "arena.h"
#include "executor.h"
#include "log.h"
#include "period.h"
#include "profiling.h"
#include "replay.h"
#include "summary.h"

/* Actions kept for the executor's trace: the first ones of a run (about 3 MB). */
#define MAX_TRACED (1u << 16)

/* Tries of a restore that ran out of memory before it gives up (executor.h). */
#define RESTORE_ATTEMPTS 8

/* Replay's limits: activations whose producer is awaited at once, kernels of a producer,
 * pointer words of a kernel, parameter words that name other memory in one producer, the
 * memory an examination may copy, and how deep restoring a replay's evicted inputs may
 * nest. Beyond them an activation is offloaded instead. */
#define MAX_AWAITING 64
#define MAX_PRODUCER_KERNELS 8
#define MAX_POINTER_WORDS 32
#define MAX_OPERANDS 64
#define MAX_EXAMINED_BYTES (256ull << 20)
#define MAX_REPLAY_DEPTH 32
/* Trainer streams a replay is ordered against. */
#define MAX_STREAMS 8

atomic_bool lynx_exec_armed;
/* Arena allocations not plainly resident: LYNX_SLOW_GUARD is set while it is not 0. */
static _Atomic uint32_t attention;

/*
 * The driver calls the executor makes besides the arena's: LYNX_EXEC_DRIVER_CALL(field,
 * symbol, version), as arena.h's table.
 */
#define LYNX_EXEC_DRIVER_CALLS                                                               \
	LYNX_EXEC_DRIVER_CALL(ctx_get_device, cuCtxGetDevice, 2000)                          \
	LYNX_EXEC_DRIVER_CALL(ctx_synchronize, cuCtxSynchronize, 2000)                       \
	LYNX_EXEC_DRIVER_CALL(stream_create, cuStreamCreate, 2000)                           \
	LYNX_EXEC_DRIVER_CALL(stream_create_with_priority, cuStreamCreateWithPriority, 5050) \
	LYNX_EXEC_DRIVER_CALL(ctx_stream_priorities, cuCtxGetStreamPriorityRange, 5050)      \
	LYNX_EXEC_DRIVER_CALL(stream_wait_event, cuStreamWaitEvent, 3020)                    \
	LYNX_EXEC_DRIVER_CALL(event_create, cuEventCreate, 2000)                             \
	LYNX_EXEC_DRIVER_CALL(event_record, cuEventRecord, 2000)                             \
	LYNX_EXEC_DRIVER_CALL(event_query, cuEventQuery, 2000)                               \
	LYNX_EXEC_DRIVER_CALL(event_synchronize, cuEventSynchronize, 2000)                   \
	LYNX_EXEC_DRIVER_CALL(memcpy_dtoh_async, cuMemcpyDtoHAsync, 3020)                    \
	LYNX_EXEC_DRIVER_CALL(memcpy_htod_async, cuMemcpyHtoDAsync, 3020)                    \
	LYNX_EXEC_DRIVER_CALL(mem_alloc_host, cuMemAllocHost, 3020)                          \
	LYNX_EXEC_DRIVER_CALL(mem_free_host, cuMemFreeHost, 2000)                            \
	LYNX_EXEC_DRIVER_CALL(mem_alloc_async, cuMemAllocAsync, 11020)                       \
	LYNX_EXEC_DRIVER_CALL(mem_free_async, cuMemFreeAsync, 11020)                         \
	LYNX_EXEC_DRIVER_CALL(mem_get_info, cuMemGetInfo, 3020)                              \
	LYNX_EXEC_DRIVER_CALL(event_elapsed, cuEventElapsedTime, 2000)

/* Replay's examination asks this for memory outside the arena; optional (without it,
 * RECOMPUTE decisions are offloaded). */
typedef PFN_cuMemGetAddressRange_v3020 address_range_fn;

struct exec_driver {
#define LYNX_EXEC_DRIVER_CALL(field, symbol, version) PFN_##symbol##_v##version field;
	LYNX_EXEC_DRIVER_CALLS
#undef LYNX_EXEC_DRIVER_CALL
};

/* Where one scripted activation is in its cycle. */
enum buf_state {
	BUF_NONE,       /* no live instance (not routed this iteration, or freed) */
	BUF_RESIDENT,   /* mapped; ready_pending: a restore's copy may still be running */
	BUF_OFFLOADING, /* its copy to host is queued; still mapped */
	BUF_EVICTED,    /* unmapped, address kept; the bytes are in host memory */
};

/* A launch of a producer, as captured before its examination: the parameters, and the
 * allocation each pointer word named as it ran (so that the examination can refuse a
 * producer whose inputs were freed since: replaying it would read unmapped memory). */
struct captured_launch {
	struct lynx_replay_kernel kernel;
	uint32_t n_pointers;
	bool too_many_pointers;
	struct pointer_word {
		uint32_t offset;
		CUdeviceptr base;
		size_t size;
	} pointers[MAX_POINTER_WORDS];
	unsigned char params[]; /* kernel.param_bytes */
};

/* What is known of a RECOMPUTE activation's producer (executor.h). */
enum producer_state {
	PRODUCER_UNEXAMINED, /* offloaded until its producer is captured and examined */
	PRODUCER_REPLAYED,   /* reproduces: evicted without a copy, restored by replay */
	PRODUCER_REFUSED,    /* offloaded for good; the reason was logged */
};

/* A RECOMPUTE activation's window (executor.h, "Windows"). */
enum window_state {
	WINDOW_NONE,      /* replayed on demand: no window planned, or its check failed */
	WINDOW_UNCHECKED, /* offloaded once more, and checked at the window */
	WINDOW_CHECKED,   /* replayed in its window */
};

/* One script buffer: its instance in the current iteration, and what it owns across
 * iterations (pinned host memory and events, made once). */
struct exec_buf {
	const struct lynx_prof_script_buffer *sb;
	enum lynx_exec_action action;
	CUdeviceptr addr; /* in the arena; 0: none */
	enum buf_state state;
	bool ready_pending; /* consumers must wait for `ready` */
	bool free_pending;  /* the trainer freed it; `freed` says when its stream got there */
	bool donated;       /* its memory went to another allocation; its mapping is hollow */
	bool counted;       /* in `attention` */
	bool listed;        /* in the poll list */
	void *host;         /* pinned, sb->bytes; NULL until the first offload */
	/* RECOMPUTE only. awaiting: allocated in this iteration, its producer not all seen
	 * yet; captured: this instance's producer was seen (and, once replayed, the segment
	 * holds its parameters; misfit: a launch did not fit the segment); by_replay: this
	 * instance was evicted without a copy; examine: it was restored by copy, and its
	 * producer is examined at its next use. */
	enum producer_state producer;
	bool awaiting, captured, misfit, by_replay, examine;
	bool copied_out; /* this instance was offloaded: `host` holds its bytes */
	enum window_state window;
	uint32_t window_token; /* LYNX_EXEC_NO_WINDOW: none */
	/* The window's check in flight: its replay's bytes are copied to check_host (pinned),
	 * done at `checked`; compared with `host` once that and the offload are done. */
	bool check_pending;
	void *check_host;
	uint32_t n_launches;      /* of its producer, seen in this iteration */
	uint32_t chain;           /* replays that a replay of it makes, itself included (examine) */
	uint64_t producer_serial; /* the launch that started it: siblings share it */
	CUfunction producer_function;                         /* the first one's */
	struct captured_launch *launch[MAX_PRODUCER_KERNELS]; /* kept until examined */
	struct lynx_replay_segment *segment;                  /* once examined and replayed */
	struct lynx_replay_operand *operands;
	uint32_t n_operands;
	CUevent used, copied, ready, freed, checked;
	UT_hash_handle hh; /* by addr */
	struct exec_buf *prev, *next;
};

static struct {
	pthread_mutex_t lock;
	bool ever_armed;
	struct lynx_prof_script script;
	struct exec_buf *bufs;
	uint32_t *evict_order, *restore_order; /* buffer indices by their token */
	uint32_t *window_order;                /* those with a window, by its token */
	size_t alloc_cursor, evict_cursor, restore_cursor, window_cursor, n_windowed;
	bool tracking;
	uint32_t pos;     /* tokens matched in this iteration */
	uint32_t ordinal; /* counted allocations since the last token */
	uint64_t prev_sig;
	struct exec_buf *by_addr; /* uthash */
	struct exec_buf *polled;  /* utlist: copies, restores and frees in flight */
	struct lynx_arena *arena;
	struct exec_driver drv;
	CUstream offload_stream, restore_stream;
	CUstream replay_stream; /* low priority: replays in windows, window checks */
	enum lynx_exec_fault fault;
	struct lynx_exec_expectation expect;
	CUevent iteration_start[3]; /* recorded at each iteration's first token, in turn */
	bool examined_in[3];        /* an examination ran in that iteration: not timed */
	uint64_t started;           /* iterations whose start was recorded */
	struct lynx_exec_stats stats;
	struct traced {
		uint8_t kind; /* LYNX_EXEC_EVENTS */
		uint32_t buf;
		uint64_t start_ns, end_ns; /* CLOCK_MONOTONIC */
	} * traced;
	uint32_t n_traced;
	uint64_t untraced;
	uint64_t evicted_now;
	uint32_t planned[LYNX_EXEC_ACTION_COUNT];
	uint32_t too_small;           /* evictions planned for activations below a granule: kept */
	bool serves[LYNX_HOOK_COUNT]; /* device allocations the arena may serve */
	bool frees[LYNX_HOOK_COUNT];  /* frees of such allocations; async_free: stream-ordered */
	bool async_free[LYNX_HOOK_COUNT];
	bool async_alloc[LYNX_HOOK_COUNT];
	/* Launches a producer may be captured from: cuLaunchKernel and its per-thread form
	 * (cuLaunchKernelEx's attributes are not recorded, so it cannot be replayed). */
	bool replayable[LYNX_HOOK_COUNT];
	/* Replay: its driver table, the activations whose producer is awaited, and what
	 * examinations concluded (the first reason of each verdict, for the summary). */
	bool can_replay;
	struct lynx_replay_driver replay_drv;
	address_range_fn address_range;
	struct exec_buf *awaiting[MAX_AWAITING];
	uint32_t n_awaiting;
	uint64_t launch_serial; /* launches captured from */
	/* The trainer's streams seen, each with an event marking how far it got. */
	CUstream streams[MAX_STREAMS];
	CUevent stream_marks[MAX_STREAMS];
	uint32_t n_streams;
	int replay_depth;
	uint64_t verdicts[LYNX_REPLAY_VERDICT_COUNT];
	char verdict_reason[LYNX_REPLAY_VERDICT_COUNT][320];
	/* The window about to be called: each trainer stream's mark before the call, its
	 * buffers, whether the replay stream waits for the marks yet; marked_at is the token
	 * plus one (0: none). What window checks concluded. */
	CUevent window_marks[MAX_STREAMS];
	uint32_t window_marked_at, window_marked_streams;
	uint64_t window_send, window_recv;
	bool window_fenced;
	uint64_t windows_checked, windows_refused;
	char window_refusal[320];
} ex = {.lock = PTHREAD_MUTEX_INITIALIZER};

const char *lynx_exec_action_name(enum lynx_exec_action a)
{
	static const char *const names[] = {
#define LYNX_EXEC_ACTION_NAME(id, name) name,
	        LYNX_EXEC_ACTIONS(LYNX_EXEC_ACTION_NAME)
#undef LYNX_EXEC_ACTION_NAME
	};

	return (unsigned)a < LYNX_EXEC_ACTION_COUNT ? names[a] : "unknown";
}

/* ---- The driver ------------------------------------------------------------------------- */

/*
 * A driver function for the executor's and the arena's tables: Lynx's own wrapper when it
 * hooks that ABI (the calls are then counted like the trainer's, and the executor makes them
 * inside lynx_nested_begin/end so they are neither recorded nor tracked), else the real one.
 */
static void *lookup(const char *symbol, int version, void *arg)
{
	CUdriverProcAddressQueryResult status;
	void *fn = NULL;

	(void)arg;
	for (int id = 0; id < LYNX_HOOK_COUNT; id++) {
		const struct lynx_hook_info *h = &lynx_hooks[id];
		if (h->layer == LYNX_LAYER_DRIVER && h->variant == LYNX_VARIANT_PLAIN &&
		    h->version == version && h->procname && !strcmp(h->procname, symbol))
			return h->wrapper;
	}
	if (lynx_real_fn(cuGetProcAddress_v2)(symbol, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT,
	                                      &status) != CUDA_SUCCESS)
		return NULL;
	return fn;
}

/* The stream a hook's stream argument means (0 in a per-thread variant: this thread's). */
static CUstream stream_of(enum lynx_hook_id id, uint64_t stream)
{
	if (!stream && lynx_hooks[id].variant != LYNX_VARIANT_PLAIN)
		return CU_STREAM_PER_THREAD;
	return (CUstream)(uintptr_t)stream;
}

static void driver_failed(const char *what, CUresult r)
{
	ex.stats.failures++;
	lynx_warn_once("recompute mode: %s failed (CUDA error %d); the activation stays as it was",
	               what, (int)r);
}

/* ---- Bookkeeping -------------------------------------------------------------------------- */

enum trace_kind {
#define LYNX_EXEC_EVENT_ENUM(id, name) TRACE_##id,
	LYNX_EXEC_EVENTS(LYNX_EXEC_EVENT_ENUM)
#undef LYNX_EXEC_EVENT_ENUM
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One action for the trace, from start_ns (0: an instant, now) to now. */
static void trace(enum trace_kind kind, const struct exec_buf *b, uint64_t start_ns)
{
	uint64_t end = now_ns();

	if (!ex.traced || ex.n_traced >= MAX_TRACED) {
		ex.untraced++;
		return;
	}
	ex.traced[ex.n_traced++] = (struct traced){(uint8_t)kind, (uint32_t)(b - ex.bufs),
	                                           start_ns ? start_ns : end, end};
}

/* Whether b needs polling: a copy, a restore or a free in flight. */
static bool in_flight(const struct exec_buf *b)
{
	return b->state == BUF_OFFLOADING || b->ready_pending || b->free_pending;
}

static void finish_check(struct exec_buf *b, bool wait);

/* Keeps `attention` (and so the guard's switch) and the poll list in step with b's state. */
static void update(struct exec_buf *b)
{
	bool needs_guard = b->addr && (b->state != BUF_RESIDENT || b->ready_pending || b->examine);
	bool polled = (b->addr && in_flight(b)) || b->check_pending; /* a check outlives it */

	if (needs_guard != b->counted) {
		/* Under ex.lock: the 0 <-> 1 transitions switch the hooks' guard. */
		if (needs_guard && atomic_fetch_add(&attention, 1) == 0)
			lynx_slow_path_switch(LYNX_SLOW_GUARD, true);
		else if (!needs_guard && atomic_fetch_sub(&attention, 1) == 1)
			lynx_slow_path_switch(LYNX_SLOW_GUARD, false);
		b->counted = needs_guard;
	}
	if (polled != b->listed) {
		if (polled)
			DL_APPEND(ex.polled, b);
		else
			DL_DELETE(ex.polled, b);
		b->listed = polled;
	}
}

/* Makes stream wait for event: the ordering every side-stream copy and every reuse of
 * memory rests on (LYNX_FAULT=skip-stream-waits drops it, for the test that shows it). */
static CUresult wait_for(CUstream stream, CUevent event)
{
	if (ex.fault == LYNX_EXEC_FAULT_SKIP_STREAM_WAITS)
		return CUDA_SUCCESS;
	return ex.drv.stream_wait_event(stream, event, 0);
}

static bool done(CUevent e)
{
	return ex.drv.event_query(e) == CUDA_SUCCESS;
}

static void evicted_add(int64_t bytes)
{
	ex.evicted_now = (uint64_t)((int64_t)ex.evicted_now + bytes);
	if (ex.evicted_now > ex.stats.peak_evicted_bytes)
		ex.stats.peak_evicted_bytes = ex.evicted_now;
}

/* Gives b's memory back to the arena; its stream and side streams are done with it. */
static void finish_free(struct exec_buf *b)
{
	int err = lynx_arena_free(ex.arena, b->addr);

	if (err)
		lynx_warn_once("recompute mode: an activation could not be freed: %s",
		               strerror(-err));
	if (b->state == BUF_EVICTED)
		evicted_add(-(int64_t)b->sb->bytes);
	HASH_DEL(ex.by_addr, b);
	b->state = BUF_NONE;
	b->ready_pending = b->free_pending = b->donated = false;
	b->examine = false; /* an examination belongs to the instance that was restored */
	b->addr = 0;
	update(b);
}

/* b's copy to host has ended: unmap it (its memory goes back, or stays with the owner it
 * was given to). */
static void evict(struct exec_buf *b)
{
	int err = lynx_arena_evict(ex.arena, b->addr);

	if (err) {
		ex.stats.failures++;
		b->state = BUF_RESIDENT;
		if (b->donated)
			lynx_error("recompute mode: cannot unmap an activation whose memory was "
			           "reused (%s): it now reads another tensor's bytes",
			           strerror(-err));
		else
			lynx_warn_once("recompute mode: cannot evict an activation: %s",
			               strerror(-err));
	} else {
		b->state = BUF_EVICTED;
		b->donated = false; /* unmapped: nothing hollow left */
		ex.stats.evictions++;
		trace(TRACE_EVICT, b, 0);
		ex.stats.evicted_bytes += b->sb->bytes;
		evicted_add((int64_t)b->sb->bytes);
	}
	update(b);
}

/* Waits for b's copy to host (an offload whose memory was already reused, needed back
 * before the host saw the copy end) and evicts it. The host stalls; the device, which
 * has the work queued up to here, does not. */
static void settle(struct exec_buf *b)
{
	uint64_t start = now_ns();

	ex.stats.stalls++;
	ex.drv.event_synchronize(b->copied);
	trace(TRACE_STALL, b, start);
	evict(b);
}

/* Everything in flight that has completed: evictions after their copy, restores, frees. */
static void poll(void)
{
	struct exec_buf *b, *tmp;

	DL_FOREACH_SAFE (ex.polled, b, tmp) {
		if (b->check_pending && done(b->checked) && done(b->copied))
			finish_check(b, false);
		if (b->state == BUF_OFFLOADING && done(b->copied))
			evict(b);
		if (b->ready_pending && done(b->ready))
			b->ready_pending = false;
		if (b->free_pending && b->state != BUF_OFFLOADING && !b->ready_pending &&
		    done(b->freed))
			finish_free(b);
		else
			update(b);
	}
}

/* ---- Eviction and restoration ------------------------------------------------------------ */

/* After the call on `stream` that last uses b in the forward: the copy to host. */
static void start_offload(struct exec_buf *b, CUstream stream)
{
	size_t bytes = b->sb->bytes;
	CUresult r;

	if (b->check_pending)
		finish_check(b, true); /* it compares with the bytes about to be overwritten */
	if (!b->host && (r = ex.drv.mem_alloc_host(&b->host, bytes)) != CUDA_SUCCESS) {
		b->host = NULL;
		driver_failed("cuMemAllocHost for an offload", r);
		return;
	}
	if ((r = ex.drv.event_record(b->used, stream)) ||
	    (r = wait_for(ex.offload_stream, b->used)) ||
	    (r = ex.drv.memcpy_dtoh_async(b->host, b->addr, bytes, ex.offload_stream)) ||
	    (r = ex.drv.event_record(b->copied, ex.offload_stream))) {
		driver_failed("the offload copy", r);
		return;
	}
	b->state = BUF_OFFLOADING;
	b->by_replay = false;
	b->copied_out = true;
	ex.stats.offloads++;
	trace(TRACE_OFFLOAD, b, 0);
	update(b);
}

/* The same for an activation whose producer is replayed: no copy, only the point after
 * which its memory may go. */
static void start_discard(struct exec_buf *b, CUstream stream)
{
	CUresult r = ex.drv.event_record(b->copied, stream);

	if (r != CUDA_SUCCESS) {
		driver_failed("the event of an eviction", r);
		return;
	}
	b->state = BUF_OFFLOADING;
	b->by_replay = true;
	ex.stats.discards++;
	trace(TRACE_DISCARD, b, 0);
	update(b);
}

/* Completes every free whose stream got there, waiting for them if wait: room for a
 * restore that ran out of memory. */
static void complete_frees(bool wait)
{
	struct exec_buf *b, *tmp;

	DL_FOREACH_SAFE (ex.polled, b, tmp) {
		if (!b->free_pending || b->state == BUF_OFFLOADING || b->ready_pending)
			continue;
		if (wait)
			ex.drv.event_synchronize(b->freed);
		if (done(b->freed))
			finish_free(b);
	}
}

/*
 * Keeps the budget before `bytes` of new memory are taken (executor.h, lynx_exec_arm):
 * waits for the oldest evictions and frees in flight, whose memory goes back then.
 */
static void reclaim_for(uint64_t bytes)
{
	size_t free_bytes, total;
	struct exec_buf *b, *tmp;

	if (!ex.expect.budget_bytes)
		return;
	DL_FOREACH_SAFE (ex.polled, b, tmp) {
		if (ex.drv.mem_get_info(&free_bytes, &total) != CUDA_SUCCESS ||
		    total < free_bytes || total - free_bytes + bytes <= ex.expect.budget_bytes)
			return;
		uint64_t start = now_ns();
		if (b->state == BUF_OFFLOADING && !b->donated && !b->free_pending) {
			ex.stats.budget_stalls++;
			ex.drv.event_synchronize(b->copied);
			trace(TRACE_BUDGET_STALL, b, start);
			evict(b);
		} else if (b->free_pending && b->state == BUF_RESIDENT && !b->donated) {
			ex.stats.budget_stalls++;
			if (b->ready_pending)
				ex.drv.event_synchronize(b->ready);
			ex.drv.event_synchronize(b->freed);
			trace(TRACE_BUDGET_STALL, b, start);
			finish_free(b);
		}
	}
}

/*
 * Memory that the device is about to be done with, for a new owner of size bytes whose
 * work goes to stream: an activation freed by the trainer whose stream has not reached the
 * free yet, or one whose copy to host is queued. The stream waits for that point; the
 * donor is marked. NULL when there is none of that size (or no stream to order on).
 */
static struct exec_buf *take_spare(size_t bytes, CUstream stream, struct exec_buf * not )
{
	size_t g = lynx_arena_granularity(ex.arena), size = (bytes + g - 1) & ~(g - 1);
	struct exec_buf *b;

	DL_FOREACH (ex.polled, b) {
		if (b == not || b->donated || ((b->sb->bytes + g - 1) & ~(g - 1)) != size)
			continue;
		CUevent until = b->free_pending && b->state == BUF_RESIDENT      ? b->freed
		                : b->state == BUF_OFFLOADING && !b->free_pending ? b->copied
		                                                                 : NULL;
		if (!until || wait_for(stream, until) != CUDA_SUCCESS)
			continue;
		return b;
	}
	return NULL;
}

/* ---- Replay ---------------------------------------------------------------------------- */

static bool make_resident(struct exec_buf *b, CUstream stream);
static bool range_of(CUdeviceptr addr, CUdeviceptr *base, size_t *size, void *arg);

/* The executor's buffer based at addr (locked), or NULL. */
static struct exec_buf *find_buf(CUdeviceptr addr)
{
	struct exec_buf *b = NULL;

	HASH_FIND(hh, ex.by_addr, &addr, sizeof(addr), b);
	return b;
}

/* Whether a launch names b: an aligned word of its parameter bytes lies inside it. */
static bool launch_names(const struct lynx_replay_kernel *k, const struct exec_buf *b)
{
	const unsigned char *p = k->params;
	uint64_t word;

	for (uint32_t at = 0; p && at + 8 <= k->param_bytes; at += 8) {
		__builtin_memcpy(&word, p + at, 8);
		if (word >= b->addr && word - b->addr < b->sb->bytes)
			return true;
	}
	return false;
}

/* The end of b's producer: the launches that named it, one after another, are all seen
 * (or it is evicted, or the iteration ends). */
static void end_capture(struct exec_buf *b)
{
	for (uint32_t i = 0; b->awaiting && i < ex.n_awaiting; i++) {
		if (ex.awaiting[i] == b) {
			ex.awaiting[i] = ex.awaiting[--ex.n_awaiting];
			break;
		}
	}
	if (b->awaiting && b->producer == PRODUCER_REPLAYED)
		b->captured =
		        !b->misfit && b->n_launches == lynx_replay_segment_kernels(b->segment);
	else if (b->awaiting)
		b->captured = b->n_launches > 0;
	ex.stats.producers += b->awaiting && b->captured;
	b->awaiting = false;
}

/* A freshly allocated RECOMPUTE activation: the next launch that names it starts its
 * producer. */
static void await_producer(struct exec_buf *b)
{
	b->captured = b->misfit = b->examine = b->copied_out = false;
	b->n_launches = 0;
	if (b->action != LYNX_EXEC_RECOMPUTE || !ex.can_replay || b->producer == PRODUCER_REFUSED ||
	    ex.n_awaiting >= MAX_AWAITING)
		return;
	b->awaiting = true;
	ex.awaiting[ex.n_awaiting++] = b;
}

/* Launch k of b's producer, seen in this iteration: kept for the examination, or put into
 * the examined segment (the same functions and geometry, this iteration's pointers). */
static void keep_launch(struct exec_buf *b, const struct lynx_replay_kernel *k)
{
	uint32_t i = b->n_launches++;

	if (!i) {
		b->producer_function = k->function;
		b->producer_serial = ex.launch_serial;
	}
	if (b->producer == PRODUCER_REPLAYED) {
		if (i >= lynx_replay_segment_kernels(b->segment) ||
		    lynx_replay_segment_refresh(b->segment, i, k)) {
			b->misfit = true;
			lynx_warn_once("recompute mode: an activation's producer was launched "
			               "differently than when it was examined; that instance is "
			               "offloaded");
		}
		return;
	}
	struct captured_launch *c = realloc(b->launch[i], sizeof(*c) + k->param_bytes);
	if (!c) {
		b->n_launches = i; /* the producer as seen so far; examination will tell */
		return;
	}
	b->launch[i] = c;
	memcpy(c->params, k->params, k->param_bytes);
	c->kernel = *k;
	c->kernel.params = c->params;
	c->n_pointers = 0;
	c->too_many_pointers = false;
	for (uint32_t at = 0; at + 8 <= k->param_bytes; at += 8) {
		struct pointer_word p = {.offset = at};
		uint64_t word;
		__builtin_memcpy(&word, c->params + at, 8);
		if (!range_of((CUdeviceptr)word, &p.base, &p.size, NULL))
			continue;
		if (c->n_pointers == MAX_POINTER_WORDS)
			c->too_many_pointers = true;
		else
			c->pointers[c->n_pointers++] = p;
	}
}

/* Whether the memory b's captured producer named as it ran is still allocated, as it was;
 * if not, the reason in check. */
static bool operands_still_allocated(const struct exec_buf *b, struct lynx_replay_check *check)
{
	for (uint32_t i = 0; i < b->n_launches; i++) {
		const struct captured_launch *c = b->launch[i];
		if (c->too_many_pointers) {
			check->verdict = LYNX_REPLAY_TOO_LARGE;
			snprintf(check->reason, sizeof(check->reason),
			         "kernel %u names more than %d allocations", i, MAX_POINTER_WORDS);
			return false;
		}
		for (uint32_t j = 0; j < c->n_pointers; j++) {
			const struct pointer_word *p = &c->pointers[j];
			CUdeviceptr base;
			size_t size;
			uint64_t word;
			__builtin_memcpy(&word, c->params + p->offset, 8);
			if (range_of((CUdeviceptr)word, &base, &size, NULL) && base == p->base &&
			    size == p->size)
				continue;
			check->verdict = LYNX_REPLAY_FREED_OPERAND;
			snprintf(
			        check->reason, sizeof(check->reason),
			        "kernel %u's parameter word at byte %u names memory freed since it "
			        "ran (a temporary)",
			        i, p->offset);
			return false;
		}
	}
	return true;
}

/*
 * A successful launch of the program's (locked). For each awaited activation: the first
 * launch that names it starts its producer, and the launches right after it that name it
 * with the same function continue it (one per sequence of a batch, say); any other launch
 * ends it. A consumer that happens to follow with the same function joins it harmlessly:
 * what it writes goes to scratch, which the examination shows.
 */
static void capture(const struct lynx_event *ev)
{
	struct lynx_replay_kernel k;

	if (!ex.n_awaiting || ev->result != CUDA_SUCCESS ||
	    !lynx_replay_kernel_from_event(ev, &k) || !k.params)
		return;
	ex.launch_serial++;
	for (uint32_t i = 0; i < ex.n_awaiting;) {
		struct exec_buf *b = ex.awaiting[i];
		bool names = b->addr && launch_names(&k, b);
		size_t most = b->producer == PRODUCER_REPLAYED
		                      ? lynx_replay_segment_kernels(b->segment)
		                      : MAX_PRODUCER_KERNELS;
		if (names && b->n_launches < most &&
		    (!b->n_launches || k.function == b->producer_function)) {
			keep_launch(b, &k);
			i++;
		} else if (!b->n_launches && b->addr) {
			i++; /* its producer has not started yet */
		} else {
			end_capture(b); /* moves the last one to i */
		}
	}
}

/* A stream the trainer issued work to (locked). */
static void note_stream(CUstream stream)
{
	for (uint32_t i = 0; i < ex.n_streams; i++)
		if (ex.streams[i] == stream)
			return;
	if (ex.n_streams == MAX_STREAMS ||
	    ex.drv.event_create(&ex.stream_marks[ex.n_streams], CU_EVENT_DISABLE_TIMING) ||
	    ex.drv.event_create(&ex.window_marks[ex.n_streams], CU_EVENT_DISABLE_TIMING))
		return;
	ex.streams[ex.n_streams++] = stream;
}

/*
 * A replay on stream is fenced against the trainer's other streams, as the examination was
 * by the idle device: it waits for the work they have queued (after == NULL, before the
 * replay), and they wait for it (after: its event, recorded on stream after the replay).
 * With one stream, nothing.
 */
static CUresult fence_replay(CUstream stream, CUevent after)
{
	CUresult r = CUDA_SUCCESS;

	for (uint32_t i = 0; i < ex.n_streams && r == CUDA_SUCCESS; i++) {
		if (ex.streams[i] == stream)
			continue;
		if (after)
			r = wait_for(ex.streams[i], after);
		else if ((r = ex.drv.event_record(ex.stream_marks[i], ex.streams[i])) ==
		         CUDA_SUCCESS)
			r = wait_for(stream, ex.stream_marks[i]);
	}
	return r;
}

/*
 * Scratch for memory a replay writes besides its activation (a workspace), stream-ordered
 * on the replay's stream so that it is held only while the replay runs, not at the peak
 * the plan counted. Out of memory: as a restore (RESTORE_ATTEMPTS). 0 when there is none.
 */
static CUdeviceptr scratch_alloc(size_t size, CUstream stream)
{
	CUdeviceptr p = 0;

	reclaim_for(size);
	for (int attempt = 0; attempt < RESTORE_ATTEMPTS; attempt++) {
		if (ex.drv.mem_alloc_async(&p, size, stream) == CUDA_SUCCESS)
			return p;
		complete_frees(attempt > 0);
		if (attempt > 1)
			ex.drv.ctx_synchronize();
	}
	return 0;
}

/* The replay's parameter word that names other memory: an evicted activation it reads
 * comes back first, on the same stream. */
static void bring_back(uint64_t word, CUstream stream, const struct exec_buf *owner)
{
	struct lynx_arena_range range;
	struct exec_buf *c;

	if (lynx_arena_find(ex.arena, (CUdeviceptr)word, &range) && (c = find_buf(range.base)) &&
	    c != owner)
		make_resident(c, stream);
}

/*
 * Relaunches b's producer, captured in this iteration, on stream: into b's memory (mapped
 * again by the caller), or with into != 0 into that scratch instead. Inputs are read in
 * place (evicted ones restored first), memory it writes besides b goes to scratch. Fenced
 * against the trainer's other streams, unless the replay stream already waits for a
 * window's marks. A failed launch is tried once more with the device idle. Returns 0 or
 * -EIO.
 */
static int relaunch(struct exec_buf *b, CUstream stream, CUdeviceptr into)
{
	struct lynx_replay_redirect redirects[2 * MAX_OPERANDS + 1]; /* siblings', examined */
	struct lynx_replay_stats stats;
	uint64_t scratch_bytes = 0;
	size_t n = 0;
	int err = -EIO;

	if (ex.replay_depth >= MAX_REPLAY_DEPTH)
		return -EIO;
	ex.replay_depth++;
	if (!(ex.window_fenced && stream == ex.replay_stream) &&
	    fence_replay(stream, NULL) != CUDA_SUCCESS)
		goto out;
	if (into)
		redirects[n++] = (struct lynx_replay_redirect){b->addr, b->sb->bytes, into};
	for (uint32_t i = 0; i < b->n_operands; i++) {
		const struct lynx_replay_operand *op = &b->operands[i];
		uint64_t word = lynx_replay_segment_word(b->segment, op->kernel, op->offset);
		CUdeviceptr from = (CUdeviceptr)(word - op->displacement);
		size_t j = 0;

		if (op->role == LYNX_REPLAY_INPUT) {
			bring_back(word, stream, b);
			continue;
		}
		while (j < n && redirects[j].from != from)
			j++;
		if (j < n)
			continue; /* another word into the same memory: the same scratch */
		CUdeviceptr to = scratch_alloc(op->size, stream);
		if (!to)
			goto out;
		redirects[n++] = (struct lynx_replay_redirect){from, op->size, to};
		scratch_bytes += op->size;
	}
	for (int attempt = 0; attempt < 2 && err; attempt++) {
		if (attempt) {
			ex.stats.replay_failures++;
			ex.drv.ctx_synchronize();
		}
		err = ex.fault == LYNX_EXEC_FAULT_FAIL_REPLAY && !attempt
		              ? -EIO
		              : lynx_replay_launch(b->segment, stream, redirects, n, &stats);
	}
	if (!err && scratch_bytes > ex.stats.replay_scratch_bytes)
		ex.stats.replay_scratch_bytes = scratch_bytes;
out:
	ex.replay_depth--;
	for (size_t i = into ? 1 : 0; i < n; i++)
		ex.drv.mem_free_async(redirects[i].to, stream);
	return err ? -EIO : 0;
}

/* Relaunches b's producer into b's memory (relaunch). Returns false when b could not be
 * refilled: its bytes are lost. */
static bool replay_into(struct exec_buf *b, CUstream stream)
{
	uint64_t start = now_ns();

	if (!relaunch(b, stream, 0)) {
		ex.stats.replays++;
		trace(TRACE_REPLAY, b, start);
		return true;
	}
	ex.stats.failures++;
	b->producer = PRODUCER_REFUSED; /* later instances are offloaded */
	lynx_error("recompute mode: the producer of layer %u's activation %u (micro-batch %u) "
	           "could not be replayed; its bytes are lost and training results will differ",
	           b->sb->layer, b->sb->index, b->sb->microbatch);
	return false;
}

/* Which allocation holds addr, for the examination: an activation of the arena, else what
 * the driver says. */
static bool range_of(CUdeviceptr addr, CUdeviceptr *base, size_t *size, void *arg)
{
	struct lynx_arena_range range;
	struct exec_buf *b;

	(void)arg;
	if (lynx_arena_find(ex.arena, addr, &range)) {
		b = find_buf(range.base);
		*base = range.base;
		*size = b ? b->sb->bytes : range.size;
		/* Freed by the trainer (its free queued), or its memory given away: gone. */
		return range.state == LYNX_ARENA_RESIDENT && addr - *base < *size &&
		       !(b && (b->free_pending || b->donated));
	}
	return ex.address_range(base, size, addr) == CUDA_SUCCESS;
}

/*
 * b's siblings: other activations whose producer started at the same launch (a dropout's
 * output and its mask). A replay for b writes them too, and the examination cannot tell
 * that write from a read, since it writes the same bytes; restoring them first would hold
 * their memory early. So each is redirected to scratch, in the examination (redirects,
 * scratch it allocates: b must not depend on what they held) and in every replay (one
 * SCRATCH operand per word that names one, in operands). Returns how many redirects, or
 * -1 when there is no memory (what was allocated is in redirects[0..]).
 */
static int sibling_redirects(const struct exec_buf *b, struct lynx_replay_redirect *redirects,
                             size_t *n_redirects, struct lynx_replay_operand *operands,
                             size_t *n_operands)
{
	struct lynx_arena_range range;
	struct exec_buf *c;
	uint64_t word;

	*n_redirects = *n_operands = 0;
	for (uint32_t i = 0; i < b->n_launches; i++) {
		for (uint32_t at = 0; at + 8 <= b->launch[i]->kernel.param_bytes; at += 8) {
			__builtin_memcpy(&word, b->launch[i]->params + at, 8);
			if (!lynx_arena_find(ex.arena, (CUdeviceptr)word, &range) ||
			    !(c = find_buf(range.base)) || c == b || !c->n_launches ||
			    c->producer_serial != b->producer_serial ||
			    word - c->addr >= c->sb->bytes || *n_operands == MAX_OPERANDS)
				continue;
			operands[(*n_operands)++] = (struct lynx_replay_operand){
			        i, at, word - c->addr, c->sb->bytes, LYNX_REPLAY_SCRATCH};
			size_t j = 0;
			while (j < *n_redirects && redirects[j].from != c->addr)
				j++;
			if (j < *n_redirects || j == MAX_OPERANDS)
				continue;
			CUdeviceptr to = 0;
			if (ex.replay_drv.mem_alloc(&to, c->sb->bytes) != CUDA_SUCCESS)
				return -1;
			redirects[(*n_redirects)++] =
			        (struct lynx_replay_redirect){c->addr, c->sb->bytes, to};
		}
	}
	return 0;
}

/*
 * The first instance of b restored by copy, at its first use in the backward on stream:
 * replay its producer beside it and examine the result (replay.h), with every activation
 * the producer names resident and the device idle. The verdict holds for b from then on.
 */
static void examine(struct exec_buf *b, CUstream stream)
{
	struct lynx_replay_operand operands[2 * MAX_OPERANDS], *found = operands + MAX_OPERANDS;
	struct lynx_replay_redirect siblings[MAX_OPERANDS];
	size_t n_siblings = 0, n_sibling_words = 0;
	struct lynx_replay_examination how = {.range_of = range_of,
	                                      .max_operand_bytes = MAX_EXAMINED_BYTES,
	                                      .operands = found,
	                                      .operand_capacity = MAX_OPERANDS};
	struct lynx_replay_range output = {b->addr, b->sb->bytes};
	struct lynx_replay_kernel kernels[MAX_PRODUCER_KERNELS];
	struct lynx_replay_check check = {.verdict = LYNX_REPLAY_NO_MEMORY};
	uint64_t start = now_ns();
	uint64_t word;

	b->examine = false;
	update(b);
	if (ex.started)
		ex.examined_in[(ex.started - 1) % 3] = true;
	for (uint32_t i = 0; i < b->n_launches; i++) {
		for (uint32_t at = 0; at + 8 <= b->launch[i]->kernel.param_bytes; at += 8) {
			__builtin_memcpy(&word, b->launch[i]->params + at, 8);
			bring_back(word, stream, b);
		}
	}
	ex.drv.ctx_synchronize();
	for (uint32_t i = 0; i < b->n_launches; i++)
		kernels[i] = b->launch[i]->kernel;
	if (!operands_still_allocated(b, &check))
		; /* check says why */
	else if (sibling_redirects(b, siblings, &n_siblings, operands, &n_sibling_words))
		snprintf(check.reason, sizeof(check.reason), "no memory for its siblings' scratch");
	else if (!lynx_replay_segment_create(&ex.replay_drv, kernels, b->n_launches, &b->segment))
		lynx_replay_examine(b->segment, stream, &output, 1, siblings, n_siblings, &how,
		                    &check);
	else
		snprintf(check.reason, sizeof(check.reason), "no memory for the segment");
	for (size_t i = 0; i < n_siblings; i++)
		ex.replay_drv.mem_free(siblings[i].to);
	size_t n_operands = n_sibling_words + how.operand_count;
	/* Replays nest through evicted inputs that are replayed too: bound the chain. */
	b->chain = 1;
	for (size_t i = 0; check.verdict == LYNX_REPLAY_REPRODUCES && i < how.operand_count; i++) {
		struct lynx_arena_range range;
		struct exec_buf *c;
		word = lynx_replay_segment_word(b->segment, found[i].kernel, found[i].offset);
		if (found[i].role == LYNX_REPLAY_INPUT &&
		    lynx_arena_find(ex.arena, (CUdeviceptr)word, &range) &&
		    (c = find_buf(range.base)) && c->producer == PRODUCER_REPLAYED &&
		    c->chain + 1 > b->chain)
			b->chain = c->chain + 1;
	}
	if (check.verdict == LYNX_REPLAY_REPRODUCES && b->chain > MAX_REPLAY_DEPTH / 2) {
		check.verdict = LYNX_REPLAY_TOO_LARGE;
		snprintf(check.reason, sizeof(check.reason),
		         "its replay would replay %u evicted inputs in a chain (at most %d)",
		         b->chain - 1, MAX_REPLAY_DEPTH / 2 - 1);
	}
	if (check.verdict == LYNX_REPLAY_REPRODUCES &&
	    !(b->operands = malloc((n_operands ? n_operands : 1) * sizeof(*operands)))) {
		check.verdict = LYNX_REPLAY_NO_MEMORY;
		snprintf(check.reason, sizeof(check.reason), "no host memory");
	}
	if (check.restore_failed)
		lynx_error(
		        "recompute mode: examining layer %u's activation %u left memory it names "
		        "poisoned: %s; training results will differ",
		        b->sb->layer, b->sb->index, check.reason);
	if (!ex.verdicts[check.verdict]++)
		snprintf(ex.verdict_reason[check.verdict], sizeof(ex.verdict_reason[0]),
		         "layer %u activation %u: %s", b->sb->layer, b->sb->index, check.reason);
	if (check.verdict == LYNX_REPLAY_REPRODUCES) {
		memmove(operands + n_sibling_words, found, how.operand_count * sizeof(*operands));
		memcpy(b->operands, operands, n_operands * sizeof(*operands));
		b->n_operands = (uint32_t)n_operands;
		b->producer = PRODUCER_REPLAYED;
	} else {
		b->producer = PRODUCER_REFUSED;
		lynx_replay_segment_destroy(b->segment);
		b->segment = NULL;
	}
	if (!b->sb->microbatch)
		lynx_info("recompute mode: layer %u activation %u: %s: %s", b->sb->layer,
		          b->sb->index,
		          b->producer == PRODUCER_REPLAYED ? "recomputed by replay from now on"
		                                           : "offloaded instead",
		          check.reason);
	for (uint32_t i = 0; i < MAX_PRODUCER_KERNELS; i++) {
		free(b->launch[i]);
		b->launch[i] = NULL;
	}
	trace(TRACE_EXAMINE, b, start);
}

/*
 * Maps memory at b's address again, refills it on stream (a copy back, or a replay of its
 * producer) and records `ready` there. The memory is a spare's if there is one, else new.
 * Out of memory: first the frees already done, then waiting for the pending ones. Returns
 * 0 or the arena's error (b then stays evicted).
 */
static int restore(struct exec_buf *b, CUstream stream)
{
	struct exec_buf *donor = take_spare(b->sb->bytes, stream, b);
	int err = -ENOMEM;
	CUresult r;

	if (donor && !(err = lynx_arena_restore_from(ex.arena, b->addr, donor->addr))) {
		donor->donated = true;
	} else {
		reclaim_for(b->sb->bytes);
		err = lynx_arena_restore(ex.arena, b->addr);
	}
	/* Out of memory: the frees the host has seen done, then every one pending, then the
	 * whole device idle (a transient failure, another process's memory), a few times. */
	for (int attempt = 0; err == -ENOMEM && attempt < RESTORE_ATTEMPTS; attempt++) {
		if (!attempt)
			ex.stats.oom_waits++;
		complete_frees(attempt > 0);
		if (attempt > 1)
			ex.drv.ctx_synchronize();
		err = lynx_arena_restore(ex.arena, b->addr);
	}
	if (err)
		return err;
	b->state = BUF_RESIDENT;
	evicted_add(-(int64_t)b->sb->bytes);
	if (b->by_replay) {
		if (replay_into(b, stream) &&
		    ex.drv.event_record(b->ready, stream) == CUDA_SUCCESS &&
		    fence_replay(stream, b->ready) == CUDA_SUCCESS)
			b->ready_pending = true;
		update(b);
		return 0;
	}
	if ((r = ex.drv.memcpy_htod_async(b->addr, b->host, b->sb->bytes, stream)) ||
	    (r = ex.drv.event_record(b->ready, stream))) {
		/* Mapped but not filled: the trainer would read garbage. Synchronise and copy
		 * once more, blocking; this is the path of last resort. */
		driver_failed("the restore copy", r);
		ex.drv.ctx_synchronize();
		if (ex.drv.memcpy_htod_async(b->addr, b->host, b->sb->bytes, NULL) == CUDA_SUCCESS)
			ex.drv.ctx_synchronize();
	} else {
		b->ready_pending = true;
	}
	/* The first instance restored by copy: its producer is examined at its next use. */
	b->examine = b->captured && b->producer == PRODUCER_UNEXAMINED && b->n_launches;
	update(b);
	return 0;
}

/* The restore token came: bring b back on the restore stream, or cancel its eviction. */
static void prefetch(struct exec_buf *b)
{
	if (b->state == BUF_OFFLOADING && !b->donated) {
		b->state = BUF_RESIDENT; /* the copy runs on, unused */
		ex.stats.cancelled++;
		update(b);
		return;
	}
	/* Replayed by the guard, on the consumer's stream: a replay ahead of it, on another
	 * stream, could read inputs the consumer's stream is still changing. */
	if (b->by_replay)
		return;
	if (b->state == BUF_OFFLOADING)
		settle(b);
	if (b->state != BUF_EVICTED)
		return;
	if (ex.fault == LYNX_EXEC_FAULT_FAIL_PREFETCH || restore(b, ex.restore_stream)) {
		ex.stats.prefetch_failures++; /* the guard restores it on demand */
		return;
	}
	ex.stats.prefetches++;
	trace(TRACE_RESTORE_AHEAD, b, 0);
}

/* ---- Windows ------------------------------------------------------------------------------ */

/* Whether b's replay reads an allocation that the window's collective uses: the two would
 * run at once. */
static bool reads_window_buffers(const struct exec_buf *b)
{
	for (uint32_t i = 0; i < b->n_operands; i++) {
		const struct lynx_replay_operand *op = &b->operands[i];
		struct lynx_arena_range range;
		CUdeviceptr base;
		size_t size;

		if (op->role != LYNX_REPLAY_INPUT)
			continue;
		uint64_t word = lynx_replay_segment_word(b->segment, op->kernel, op->offset);
		if (lynx_arena_find(ex.arena, (CUdeviceptr)word, &range)) {
			base = range.base;
			size = range.size;
		} else if (ex.address_range(&base, &size, (CUdeviceptr)word) != CUDA_SUCCESS) {
			base = (CUdeviceptr)word; /* unknown: the word itself */
			size = 1;
		}
		if ((ex.window_send && ex.window_send - base < size) ||
		    (ex.window_recv && ex.window_recv - base < size))
			return true;
	}
	return false;
}

/* The replay stream waits for the trainer's streams as they were before the window's
 * call: once per window. */
static bool fence_window(void)
{
	for (uint32_t i = 0; !ex.window_fenced && i < ex.window_marked_streams; i++)
		if (wait_for(ex.replay_stream, ex.window_marks[i]) != CUDA_SUCCESS)
			return false;
	ex.window_fenced = true;
	return true;
}

/* The window check's verdict (start_check); wait: for its copies first (the host stalls). */
static void finish_check(struct exec_buf *b, bool wait)
{
	const char *why = NULL;

	if (wait) {
		ex.drv.event_synchronize(b->checked);
		ex.drv.event_synchronize(b->copied);
	}
	b->check_pending = false;
	if (memcmp(b->check_host, b->host, b->sb->bytes))
		why = "a replay there differs: what it reads changes between the window and the "
		      "activation's use";
	ex.drv.mem_free_host(b->check_host);
	b->check_host = NULL;
	ex.windows_checked++;
	b->window = why ? WINDOW_NONE : WINDOW_CHECKED;
	if (why && !ex.windows_refused++)
		snprintf(ex.window_refusal, sizeof(ex.window_refusal), "layer %u activation %u: %s",
		         b->sb->layer, b->sb->index, why);
	if (!b->sb->microbatch)
		lynx_info("recompute mode: layer %u activation %u: %s%s", b->sb->layer,
		          b->sb->index,
		          why ? "replayed on demand, not in its window: "
		              : "replayed in its window from now on",
		          why ? why : "");
	update(b);
}

/* b's window check could not be made: it is replayed on demand. */
static void refuse_window(struct exec_buf *b, const char *why)
{
	ex.windows_checked++;
	b->window = WINDOW_NONE;
	if (!ex.windows_refused++)
		snprintf(ex.window_refusal, sizeof(ex.window_refusal), "layer %u activation %u: %s",
		         b->sb->layer, b->sb->index, why);
}

/*
 * b's window, in the iteration after its examination, where b was offloaded once more:
 * its producer is replayed exactly as it will be in later windows (behind the marks, the
 * trainer's streams waiting for it), but into scratch, whose bytes are copied to the host
 * and compared with the offloaded ones once both copies are done (poll). No host wait, so
 * the iteration runs as the steady state will, and the scratch is held only for its copy.
 */
static void start_check(struct exec_buf *b)
{
	uint64_t start = now_ns();
	size_t bytes = b->sb->bytes;
	CUdeviceptr out = 0;
	CUresult r = CUDA_SUCCESS;

	if (reads_window_buffers(b)) {
		refuse_window(b, "it reads a buffer of the window's own collective");
		return;
	}
	if (!b->check_host && ex.drv.mem_alloc_host(&b->check_host, bytes) != CUDA_SUCCESS) {
		b->check_host = NULL;
		return; /* tried again at the next iteration's window */
	}
	if (!fence_window() || !(out = scratch_alloc(bytes, ex.replay_stream)))
		return;
	if (relaunch(b, ex.replay_stream, out) ||
	    (r = ex.drv.memcpy_dtoh_async(b->check_host, out, bytes, ex.replay_stream)) ||
	    (r = ex.drv.event_record(b->checked, ex.replay_stream)) ||
	    (r = fence_replay(ex.replay_stream, b->checked))) {
		ex.drv.mem_free_async(out, ex.replay_stream);
		if (r)
			driver_failed("a window's check", r);
		ex.drv.ctx_synchronize(); /* nothing of it left running */
		refuse_window(b, "its replay there failed");
		return;
	}
	ex.drv.mem_free_async(out, ex.replay_stream);
	b->check_pending = true;
	update(b);
	trace(TRACE_WINDOW_CHECK, b, start);
}

/* b's window: its replay on the replay stream, behind the marks; the trainer's streams
 * then wait for it (restore). What cannot start here is left to the guard. */
static void replay_in_window(struct exec_buf *b)
{
	uint64_t start = now_ns();

	if (b->state == BUF_OFFLOADING && !b->donated) {
		b->state = BUF_RESIDENT; /* still mapped and intact: nothing to replay */
		ex.stats.cancelled++;
		update(b);
		return;
	}
	if (b->state == BUF_OFFLOADING)
		settle(b);
	if (b->state != BUF_EVICTED || !b->by_replay)
		return;
	if (reads_window_buffers(b) || !fence_window() || restore(b, ex.replay_stream)) {
		ex.stats.window_misses++;
		return;
	}
	ex.stats.window_replays++;
	trace(TRACE_WINDOW_REPLAY, b, start);
}

/* Token t, b's window, has been called. */
static void at_window(struct exec_buf *b, uint32_t t)
{
	if (b->producer != PRODUCER_REPLAYED || !b->captured || b->window == WINDOW_NONE)
		return;
	if (ex.window_marked_at != t + 1) {
		ex.stats.window_misses++; /* the call was not seen before it was made */
		return;
	}
	if (b->window == WINDOW_UNCHECKED) {
		if (b->copied_out && !b->check_pending)
			start_check(b);
		return;
	}
	replay_in_window(b);
}

/* ---- Measuring what is achieved ---------------------------------------------------------- */

/* Device memory in use now (on a GPU: the whole device's, this rank's in practice). */
static void sample_memory(void)
{
	size_t free_bytes = 0, total = 0;

	if (ex.drv.mem_get_info(&free_bytes, &total) == CUDA_SUCCESS && total >= free_bytes &&
	    total - free_bytes > ex.stats.peak_used_bytes)
		ex.stats.peak_used_bytes = total - free_bytes;
}

/*
 * An iteration starts on stream: an event there, and the device time of the iteration two
 * starts back if both its events are done (never waited for). Iterations that overlap the
 * host's stalls count as they ran.
 */
static void iteration_started(CUstream stream)
{
	CUevent now = ex.iteration_start[ex.started % 3];
	float ms;

	if (ex.started >= 2) {
		CUevent a = ex.iteration_start[(ex.started - 2) % 3];
		CUevent b = ex.iteration_start[(ex.started - 1) % 3];
		/* An iteration with examinations (the device idled for each) is not the steady
		 * state the plan predicts. */
		if (!ex.examined_in[(ex.started - 2) % 3] && done(b) &&
		    ex.drv.event_elapsed(&ms, a, b) == CUDA_SUCCESS && ms > 0) {
			ex.stats.timed_iterations++;
			ex.stats.iteration_ns += (uint64_t)((double)ms * 1e6);
		}
	}
	ex.examined_in[ex.started % 3] = false;
	if (ex.drv.event_record(now, stream) == CUDA_SUCCESS)
		ex.started++;
	else
		ex.started = 0;
}

/* ---- The tracker ------------------------------------------------------------------------------
 */

static void reset_cursors(void)
{
	ex.alloc_cursor = ex.evict_cursor = ex.restore_cursor = ex.window_cursor = 0;
	ex.window_marked_at = 0;
	ex.ordinal = 0;
	while (ex.n_awaiting)
		end_capture(ex.awaiting[ex.n_awaiting - 1]);
}

/* Token t's call, on stream, has been issued: start what the script places after it. */
static void act(uint32_t t, CUstream stream)
{
	const uint32_t n = (uint32_t)ex.script.n_buffers;
	const size_t before = ex.evict_cursor + ex.restore_cursor;

	while (ex.evict_cursor < n &&
	       ex.bufs[ex.evict_order[ex.evict_cursor]].sb->last_forward_token <= t) {
		struct exec_buf *b = &ex.bufs[ex.evict_order[ex.evict_cursor++]];
		end_capture(b); /* what names it from here on is not its producer */
		if (b->sb->last_forward_token != t || !b->addr || b->state != BUF_RESIDENT ||
		    b->action == LYNX_EXEC_KEEP || lynx_capture_active())
			continue;
		/* Offloaded once more while its window is checked: the check compares with
		 * the copy. */
		if (b->producer == PRODUCER_REPLAYED && b->captured &&
		    b->window != WINDOW_UNCHECKED)
			start_discard(b, stream);
		else
			start_offload(b, stream);
	}
	while (ex.restore_cursor < n &&
	       ex.bufs[ex.restore_order[ex.restore_cursor]].sb->restore_token <= t) {
		struct exec_buf *b = &ex.bufs[ex.restore_order[ex.restore_cursor++]];
		if (b->addr && !lynx_capture_active())
			prefetch(b);
	}
	while (ex.window_cursor < ex.n_windowed &&
	       ex.bufs[ex.window_order[ex.window_cursor]].window_token <= t) {
		struct exec_buf *b = &ex.bufs[ex.window_order[ex.window_cursor++]];
		if (b->window_token == t && b->addr && !lynx_capture_active())
			at_window(b, t);
	}
	ex.window_marked_at = 0;
	ex.window_fenced = false;
	/* The peak is near an eviction or a restore: look there (a driver call each). */
	if (ex.evict_cursor + ex.restore_cursor != before || !(t % 64))
		sample_memory();
}

/* The driver launch nested in this thread's current top-level call, for capture(). */
static __thread struct {
	struct lynx_event event;
	unsigned char payload[4096]; /* hooks_launch.c's MAX_PARAM_BYTES */
	bool waiting;
} nested_launch __attribute__((tls_model("initial-exec")));

void lynx_exec_after(const struct lynx_event *ev)
{
	struct lynx_prof_event pe;
	uint64_t sig;
	bool nested = nested_launch.waiting; /* this call's, or nothing */

	nested_launch.waiting = false;
	if (!ev || !atomic_load_explicit(&lynx_exec_armed, memory_order_acquire))
		return;
	lynx_profiling_event_view(ev, &pe);
	lynx_nested_begin();
	pthread_mutex_lock(&ex.lock);
	if (ex.polled && !lynx_capture_active())
		poll();
	if (ex.can_replay &&
	    (ev->kind == LYNX_EV_LAUNCH || ev->kind == LYNX_EV_COPY || ev->kind == LYNX_EV_MEMSET ||
	     ev->kind == LYNX_EV_COLL || ev->kind == LYNX_EV_P2P))
		note_stream(stream_of((enum lynx_hook_id)ev->hook, ev->stream));
	if (ev->kind == LYNX_EV_LAUNCH && ex.tracking && ex.replayable[ev->hook])
		capture(ev); /* a driver launch called by the program itself */
	else if (ev->kind == LYNX_EV_LAUNCH && ex.tracking && nested &&
	         lynx_hooks[ev->hook].layer == LYNX_LAYER_RUNTIME)
		capture(&nested_launch.event); /* the runtime's launch, made by the driver's */
	if (lynx_prof_script_counts_alloc(&pe)) {
		ex.ordinal += ex.tracking;
		goto out;
	}
	if (!(sig = lynx_prof_signature(&pe)))
		goto out;
	if (!ex.tracking) {
		/* The iteration starts right after its last token (a host synchronisation). */
		if (ex.prev_sig != ex.script.sig[ex.script.n_tokens - 1] ||
		    sig != ex.script.sig[0]) {
			ex.prev_sig = sig;
			goto out;
		}
		ex.tracking = true;
		ex.pos = 0;
		reset_cursors();
		ex.started = 0; /* a lost stretch is not an iteration's time */
	} else if (sig != ex.script.sig[ex.pos]) {
		ex.tracking = false;
		reset_cursors();
		ex.stats.lost++;
		lynx_info("recompute mode: call %u of the iteration is not the learned one; "
		          "evicting nothing until the next iteration starts",
		          ex.pos);
		ex.prev_sig = sig;
		goto out;
	}
	if (!ex.pos && !lynx_capture_active())
		iteration_started(stream_of((enum lynx_hook_id)ev->hook, ev->stream));
	act(ex.pos, stream_of((enum lynx_hook_id)ev->hook, ev->stream));
	ex.prev_sig = sig;
	ex.ordinal = 0;
	if (++ex.pos == ex.script.n_tokens) {
		ex.pos = 0;
		ex.stats.iterations++;
		reset_cursors();
	}
out:
	pthread_mutex_unlock(&ex.lock);
	lynx_nested_end();
}

void lynx_exec_launched(const struct lynx_event *ev)
{
	/* Kept until the call above it ends: a producer only if that is the runtime's kernel
	 * launch (not, say, a kernel NCCL launches inside a collective). */
	nested_launch.waiting =
	        ev && ex.replayable[ev->hook] && !lynx_capture_active() &&
	        ev->size <= sizeof(nested_launch.event) + sizeof(nested_launch.payload);
	if (nested_launch.waiting)
		memcpy(&nested_launch.event, ev, ev->size);
}

/* ---- The hooks' side ----------------------------------------------------------------------- */

/* The script buffer whose place this allocation is, or NULL. */
static struct exec_buf *scripted_here(uint64_t bytes)
{
	const uint32_t n = (uint32_t)ex.script.n_buffers;

	while (ex.alloc_cursor < n) {
		const struct lynx_prof_script_buffer *sb = ex.bufs[ex.alloc_cursor].sb;
		if (sb->alloc_token > ex.pos ||
		    (sb->alloc_token == ex.pos && sb->alloc_ordinal >= ex.ordinal))
			break;
		ex.alloc_cursor++;
	}
	if (ex.alloc_cursor >= n)
		return NULL;
	struct exec_buf *b = &ex.bufs[ex.alloc_cursor];
	if (b->sb->alloc_token != ex.pos || b->sb->alloc_ordinal != ex.ordinal ||
	    b->sb->bytes != bytes || b->action == LYNX_EXEC_KEEP)
		return NULL;
	return b;
}

bool lynx_exec_alloc_slow(enum lynx_hook_id id, void *out, uint64_t bytes, uint64_t stream)
{
	struct exec_buf *b;
	CUdeviceptr addr = 0;
	bool served = false;

	if (!ex.serves[id] || !out || lynx_call_own() || lynx_call_depth() != 1 ||
	    lynx_capture_active())
		return false;
	lynx_nested_begin();
	pthread_mutex_lock(&ex.lock);
	if (!ex.tracking || !(b = scripted_here(bytes))) {
		reclaim_for(bytes); /* the trainer's own allocator will take new memory */
		goto out;
	}
	if (b->addr && b->free_pending)
		complete_frees(false); /* last iteration's instance, if its free is done */
	if (b->addr) {
		ex.stats.route_failures++;
		goto out;
	}
	struct exec_buf *donor =
	        ex.async_alloc[id] ? take_spare(bytes, stream_of(id, stream), b) : NULL;
	if (donor && !lynx_arena_alloc_from(ex.arena, donor->addr, bytes, &addr)) {
		donor->donated = true;
		ex.stats.reused++;
	} else if ((reclaim_for(bytes), lynx_arena_alloc(ex.arena, bytes, &addr))) {
		ex.stats.route_failures++;
		goto out;
	}
	b->addr = addr;
	b->state = BUF_RESIDENT;
	HASH_ADD(hh, ex.by_addr, addr, sizeof(b->addr), b);
	await_producer(b);
	memcpy(out, &addr, sizeof(addr)); /* void ** and CUdeviceptr * alike: 8 bytes */
	ex.stats.routed++;
	served = true;
out:
	pthread_mutex_unlock(&ex.lock);
	lynx_nested_end();
	return served;
}

bool lynx_exec_free_slow(enum lynx_hook_id id, uint64_t ptr, uint64_t stream)
{
	struct lynx_arena_range range;
	struct exec_buf *b;
	bool served = false;

	if (!ex.frees[id] || !ptr || lynx_call_own() || lynx_call_depth() != 1 ||
	    !lynx_arena_find(ex.arena, (CUdeviceptr)ptr, &range) || range.base != ptr)
		return false;
	lynx_nested_begin();
	pthread_mutex_lock(&ex.lock);
	if (!(b = find_buf((CUdeviceptr)ptr)))
		goto out;
	served = true;
	if (ex.async_free[id]) {
		CUresult r = ex.drv.event_record(b->freed, stream_of(id, stream));
		if (r == CUDA_SUCCESS) {
			b->free_pending = true;
			update(b);
			goto out;
		}
		driver_failed("the event of a stream-ordered free", r);
	}
	/* A plain free synchronises the device, as cudaFree does. */
	ex.drv.ctx_synchronize();
	finish_free(b);
out:
	pthread_mutex_unlock(&ex.lock);
	lynx_nested_end();
	return served;
}

/*
 * Before b is touched on stream: a copy or a discard in flight is cancelled, an evicted
 * activation is restored, the stream waits for a restore in flight, and a first restored
 * instance has its producer examined. Returns false if b could not be made resident.
 */
static bool make_resident(struct exec_buf *b, CUstream stream)
{
	if (b->state == BUF_OFFLOADING && b->donated)
		settle(b); /* its memory is another's now: it comes back like an evicted one */
	switch (b->state) {
	case BUF_OFFLOADING:
		/* Touched again before its copy ended: it stays (the copy runs on unused). */
		b->state = BUF_RESIDENT;
		ex.stats.cancelled++;
		update(b);
		break;
	case BUF_EVICTED:
		if (restore(b, stream)) {
			lynx_error("recompute mode: cannot restore an evicted activation (out of "
			           "device memory even after waiting for frees); the next kernel "
			           "that reads it will fault");
			return false;
		}
		ex.stats.on_demand++;
		trace(TRACE_RESTORE_ON_DEMAND, b, 0);
		if (b->examine) /* restored by copy here, where a replay would be made */
			examine(b, stream);
		break;
	case BUF_RESIDENT:
		if (b->ready_pending) {
			CUresult r = wait_for(stream, b->ready);
			if (r != CUDA_SUCCESS) {
				driver_failed("a wait for a restore", r);
				ex.drv.event_synchronize(b->ready);
			}
			ex.stats.waits++;
			trace(TRACE_CONSUMER_WAIT, b, 0);
		}
		if (b->examine)
			examine(b, stream);
		break;
	case BUF_NONE:
		break;
	}
	return true;
}

void lynx_exec_guard_slow(enum lynx_hook_id id, uint64_t addr, uint64_t stream)
{
	struct lynx_arena_range range;
	struct exec_buf *b;

	if (!addr || lynx_call_own() || !lynx_arena_find(ex.arena, (CUdeviceptr)addr, &range) ||
	    (range.state == LYNX_ARENA_RESIDENT && !atomic_load(&attention)))
		return;
	lynx_nested_begin();
	pthread_mutex_lock(&ex.lock);
	if ((b = find_buf(range.base)))
		make_resident(b, stream_of(id, stream));
	pthread_mutex_unlock(&ex.lock);
	lynx_nested_end();
}

void lynx_exec_window_slow(enum lynx_hook_id id, uint64_t send, uint64_t recv, uint64_t stream)
{
	if (!ex.n_windowed || !ex.can_replay || lynx_call_own() || lynx_call_depth() != 1 ||
	    lynx_capture_active())
		return;
	lynx_nested_begin();
	pthread_mutex_lock(&ex.lock);
	if (ex.tracking && ex.window_cursor < ex.n_windowed &&
	    ex.bufs[ex.window_order[ex.window_cursor]].window_token == ex.pos) {
		note_stream(stream_of(id, stream));
		ex.window_marked_at = 0;
		for (uint32_t i = 0; i < ex.n_streams; i++)
			if (ex.drv.event_record(ex.window_marks[i], ex.streams[i]) != CUDA_SUCCESS)
				goto out;
		ex.window_marked_streams = ex.n_streams;
		ex.window_marked_at = ex.pos + 1;
		ex.window_send = send;
		ex.window_recv = recv;
	}
out:
	pthread_mutex_unlock(&ex.lock);
	lynx_nested_end();
}

/* ---- Arming ---------------------------------------------------------------------------------- */

/* Which hooks allocate and free device memory the arena may stand in for. */
static void classify_hooks(void)
{
	static const char *const allocs[] = {
	        "cudaMalloc",    "cudaMallocAsync", "cudaMallocAsync_ptsz", "cuMemAlloc",
	        "cuMemAlloc_v2", "cuMemAllocAsync", "cuMemAllocAsync_ptsz"};
	static const char *const frees[] = {
	        "cudaFree",     "cudaFreeAsync",  "cudaFreeAsync_ptsz", "cuMemFree",
	        "cuMemFree_v2", "cuMemFreeAsync", "cuMemFreeAsync_ptsz"};

	for (int id = 0; id < LYNX_HOOK_COUNT; id++) {
		const char *s = lynx_hooks[id].symbol;
		for (size_t i = 0; i < sizeof(allocs) / sizeof(allocs[0]); i++)
			ex.serves[id] |= !strcmp(s, allocs[i]);
		for (size_t i = 0; i < sizeof(frees) / sizeof(frees[0]); i++)
			ex.frees[id] |= !strcmp(s, frees[i]);
		ex.async_free[id] = ex.frees[id] && strstr(s, "Async");
		ex.async_alloc[id] = ex.serves[id] && strstr(s, "Async");
		ex.replayable[id] =
		        !strcmp(s, "cuLaunchKernel") || !strcmp(s, "cuLaunchKernel_ptsz");
	}
}

static int token_cmp_evict(const void *a, const void *b)
{
	uint32_t x = ex.bufs[*(const uint32_t *)a].sb->last_forward_token;
	uint32_t y = ex.bufs[*(const uint32_t *)b].sb->last_forward_token;

	return x < y ? -1 : x > y;
}

static int token_cmp_restore(const void *a, const void *b)
{
	uint32_t x = ex.bufs[*(const uint32_t *)a].sb->restore_token;
	uint32_t y = ex.bufs[*(const uint32_t *)b].sb->restore_token;

	return x < y ? -1 : x > y;
}

static int token_cmp_window(const void *a, const void *b)
{
	uint32_t x = ex.bufs[*(const uint32_t *)a].window_token;
	uint32_t y = ex.bufs[*(const uint32_t *)b].window_token;

	return x < y ? -1 : x > y;
}

static int copy_script(const struct lynx_prof_script *s)
{
	size_t n = s->n_buffers;

	ex.script = *s;
	ex.script.nccl_tokens = NULL; /* the caller's: windows come with the decisions */
	ex.script.n_nccl = 0;
	ex.script.sig = malloc(s->n_tokens * sizeof(*s->sig));
	ex.script.buffers = malloc((n ? n : 1) * sizeof(*s->buffers));
	ex.bufs = calloc(n ? n : 1, sizeof(*ex.bufs));
	ex.evict_order = malloc((n ? n : 1) * sizeof(*ex.evict_order));
	ex.restore_order = malloc((n ? n : 1) * sizeof(*ex.restore_order));
	ex.window_order = malloc((n ? n : 1) * sizeof(*ex.window_order));
	if (!ex.script.sig || !ex.script.buffers || !ex.bufs || !ex.evict_order ||
	    !ex.restore_order || !ex.window_order)
		return -ENOMEM;
	memcpy(ex.script.sig, s->sig, s->n_tokens * sizeof(*s->sig));
	memcpy(ex.script.buffers, s->buffers, n * sizeof(*s->buffers));
	return 0;
}

static void free_script(void)
{
	for (size_t i = 0; ex.bufs && i < ex.script.n_buffers; i++) {
		for (uint32_t k = 0; k < MAX_PRODUCER_KERNELS; k++)
			free(ex.bufs[i].launch[k]);
		free(ex.bufs[i].operands);
		lynx_replay_segment_destroy(ex.bufs[i].segment); /* host memory only */
	}
	ex.n_awaiting = 0;
	free(ex.script.sig);
	free(ex.script.buffers);
	free(ex.bufs);
	free(ex.evict_order);
	free(ex.restore_order);
	free(ex.window_order);
	memset(&ex.script, 0, sizeof(ex.script));
	ex.bufs = NULL;
	ex.evict_order = ex.restore_order = ex.window_order = NULL;
	ex.n_windowed = 0;
}

/* The streams and each evicted buffer's events. */
static CUresult make_cuda_objects(void)
{
	int least, greatest;
	CUresult r;

	/* Replays in windows yield to the trainer's kernels (least is the lowest priority). */
	if ((r = ex.drv.stream_create(&ex.offload_stream, CU_STREAM_NON_BLOCKING)) ||
	    (r = ex.drv.stream_create(&ex.restore_stream, CU_STREAM_NON_BLOCKING)) ||
	    (r = ex.drv.ctx_stream_priorities(&least, &greatest)) ||
	    (r = ex.drv.stream_create_with_priority(&ex.replay_stream, CU_STREAM_NON_BLOCKING,
	                                            least)))
		return r;
	for (int i = 0; i < 3; i++)
		if ((r = ex.drv.event_create(&ex.iteration_start[i], CU_EVENT_DEFAULT)))
			return r;
	for (size_t i = 0; i < ex.script.n_buffers; i++) {
		struct exec_buf *b = &ex.bufs[i];
		if (b->action == LYNX_EXEC_KEEP)
			continue;
		if ((r = ex.drv.event_create(&b->used, CU_EVENT_DISABLE_TIMING)) ||
		    (r = ex.drv.event_create(&b->copied, CU_EVENT_DISABLE_TIMING)) ||
		    (r = ex.drv.event_create(&b->ready, CU_EVENT_DISABLE_TIMING)) ||
		    (r = ex.drv.event_create(&b->freed, CU_EVENT_DISABLE_TIMING)) ||
		    (r = ex.drv.event_create(&b->checked, CU_EVENT_DISABLE_TIMING)))
			return r;
	}
	return CUDA_SUCCESS;
}

int lynx_exec_arm(const struct lynx_prof_script *script, const struct lynx_exec_decision *decisions,
                  const struct lynx_exec_expectation *expect, enum lynx_exec_fault fault)
{
	struct lynx_arena_driver arena_driver;
	uint64_t evict_bytes = 0;
	CUdevice device;
	CUresult r;
	int err;

	if (atomic_load(&lynx_exec_armed) || ex.ever_armed || !script->n_tokens)
		return -EINVAL;
	lynx_nested_begin();
	if ((err = copy_script(script)))
		goto fail;
	ex.traced = malloc(MAX_TRACED * sizeof(*ex.traced)); /* NULL: no trace, counted */
	classify_hooks();
	ex.fault = fault;
	ex.expect = *expect;
#define LYNX_EXEC_DRIVER_CALL(field, symbol, version) \
	ex.drv.field = (PFN_##symbol##_v##version)lookup(#symbol, version, NULL);
	LYNX_EXEC_DRIVER_CALLS
#undef LYNX_EXEC_DRIVER_CALL
	err = -EIO;
	if (lynx_arena_driver_resolve(&arena_driver, lookup, NULL)) {
		lynx_warn("recompute mode: the driver lacks the VMM calls; training goes on "
		          "unchanged");
		goto fail;
	}
#define LYNX_EXEC_DRIVER_CALL(field, symbol, version)                              \
	if (!ex.drv.field) {                                                       \
		lynx_warn("recompute mode: the driver lacks %s; training goes on " \
		          "unchanged",                                             \
		          #symbol);                                                \
		goto fail;                                                         \
	}
	LYNX_EXEC_DRIVER_CALLS
#undef LYNX_EXEC_DRIVER_CALL
	/* Without these, RECOMPUTE decisions are offloaded (the summary says so). */
	ex.address_range = (address_range_fn)lookup("cuMemGetAddressRange", 3020, NULL);
	ex.can_replay =
	        !lynx_replay_driver_resolve(&ex.replay_drv, lookup, NULL) && ex.address_range;
	if ((r = ex.drv.ctx_get_device(&device))) {
		lynx_warn("recompute mode: no current CUDA device (CUDA error %d); training goes "
		          "on unchanged",
		          (int)r);
		goto fail;
	}
	for (size_t i = 0; i < script->n_buffers; i++)
		evict_bytes += decisions[i].action != LYNX_EXEC_KEEP ? script->buffers[i].bytes : 0;
	/* Room for one iteration's evicted activations; the arena grows if it needs more. */
	if ((err = lynx_arena_create(&arena_driver, (int)device, evict_bytes ? evict_bytes : 1,
	                             &ex.arena))) {
		lynx_warn("recompute mode: cannot create the VMM arena: %s; training goes on "
		          "unchanged",
		          strerror(-err));
		goto fail;
	}
	/* An activation smaller than a granule would take a whole one: it stays. */
	evict_bytes = 0;
	for (size_t i = 0; i < script->n_buffers; i++) {
		struct exec_buf *b = &ex.bufs[i];
		b->sb = &ex.script.buffers[i];
		b->action = decisions[i].action;
		if (b->action != LYNX_EXEC_KEEP &&
		    b->sb->bytes < lynx_arena_granularity(ex.arena)) {
			b->action = LYNX_EXEC_KEEP;
			ex.too_small++;
		}
		ex.planned[b->action]++;
		evict_bytes += b->action != LYNX_EXEC_KEEP ? b->sb->bytes : 0;
		ex.evict_order[i] = ex.restore_order[i] = (uint32_t)i;
		/* A window must come after the forward is done with it and before its use. */
		b->window_token = decisions[i].window_token;
		if (b->action != LYNX_EXEC_RECOMPUTE ||
		    b->window_token <= b->sb->last_forward_token ||
		    b->window_token >= b->sb->first_backward_token)
			b->window_token = LYNX_EXEC_NO_WINDOW;
		b->window = b->window_token == LYNX_EXEC_NO_WINDOW ? WINDOW_NONE : WINDOW_UNCHECKED;
		if (b->window_token != LYNX_EXEC_NO_WINDOW)
			ex.window_order[ex.n_windowed++] = (uint32_t)i;
	}
	err = -EINVAL;
	if (!evict_bytes)
		goto fail;
	qsort(ex.evict_order, script->n_buffers, sizeof(uint32_t), token_cmp_evict);
	qsort(ex.restore_order, script->n_buffers, sizeof(uint32_t), token_cmp_restore);
	qsort(ex.window_order, ex.n_windowed, sizeof(uint32_t), token_cmp_window);
	if ((r = make_cuda_objects())) {
		lynx_warn("recompute mode: cannot prepare the executor's streams and events (CUDA "
		          "error %d); training goes on unchanged",
		          (int)r);
		err = -EIO;
		goto fail;
	}
	ex.ever_armed = true;
	atomic_store(&lynx_exec_armed, true);
	lynx_nested_end();
	return 0;
fail:
	lynx_arena_destroy(ex.arena);
	ex.arena = NULL;
	free_script();
	memset(ex.planned, 0, sizeof(ex.planned));
	ex.too_small = 0;
	lynx_nested_end();
	return err;
}

/* ---- Reporting ------------------------------------------------------------------------------- */

void lynx_exec_stats(struct lynx_exec_stats *out)
{
	pthread_mutex_lock(&ex.lock);
	*out = ex.stats;
	pthread_mutex_unlock(&ex.lock);
}

static double percent(double now, double before)
{
	return before > 0 ? 100.0 * (now / before - 1.0) : 0.0;
}

/* Planned beside achieved: memory and iteration time, each against warm-up without a plan. */
static void print_achieved(FILE *f, const char *tag, const struct lynx_exec_stats *s)
{
	const struct lynx_exec_expectation *e = &ex.expect;
	double measured = (double)e->measured_peak_bytes;

	fprintf(f,
	        "%s: executor: memory: warm-up peak %.2f MiB; planned %.2f MiB (%+.1f%%); seen "
	        "in use at the executor's actions at most %.2f MiB (%+.1f%%; cuMemGetInfo, the "
	        "context's own memory included)\n",
	        tag, lynx_prof_mib(e->measured_peak_bytes), lynx_prof_mib(e->predicted_peak_bytes),
	        percent((double)e->predicted_peak_bytes, measured),
	        lynx_prof_mib(s->peak_used_bytes), percent((double)s->peak_used_bytes, measured));
	if (!s->timed_iterations || !e->measured_iteration_ns) {
		fprintf(f, "%s: executor: time: no followed iteration was timed\n", tag);
		return;
	}
	double achieved = (double)s->iteration_ns / (double)s->timed_iterations;
	fprintf(f,
	        "%s: executor: time: warm-up iteration %.3f ms; planned %+.1f%%; achieved %.3f "
	        "ms (%+.1f%%, the mean of %" PRIu64 " followed iterations, device time)\n",
	        tag, (double)e->measured_iteration_ns / 1e6, 100.0 * (e->predicted_slowdown - 1.0),
	        achieved / 1e6, percent(achieved, (double)e->measured_iteration_ns),
	        s->timed_iterations);
}

/* What became of the RECOMPUTE decisions: examinations by verdict, replays, failures. */
static void print_replay(FILE *f, const char *tag, const struct lynx_exec_stats *s)
{
	if (!ex.planned[LYNX_EXEC_RECOMPUTE])
		return;
	if (!ex.can_replay) {
		fprintf(f,
		        "%s: executor: replay: the driver lacks what kernel replay needs; "
		        "activations planned for recompute were offloaded\n",
		        tag);
		return;
	}
	uint64_t refused = 0;

	for (int v = 0; v < LYNX_REPLAY_VERDICT_COUNT; v++)
		refused += v != LYNX_REPLAY_REPRODUCES ? ex.verdicts[v] : 0;
	fprintf(f,
	        "%s: executor: replay: %" PRIu64 " producers captured; %" PRIu64
	        " examined and replayed from then on, %" PRIu64 " refused (offloaded instead); "
	        "%" PRIu64 " evicted without a copy, %" PRIu64 " restored by replay (%" PRIu64
	        " launches failed and were tried again); at most %.2f MiB of scratch for one "
	        "replay\n",
	        tag, s->producers, ex.verdicts[LYNX_REPLAY_REPRODUCES], refused, s->discards,
	        s->replays, s->replay_failures, lynx_prof_mib(s->replay_scratch_bytes));
	for (int v = 0; v < LYNX_REPLAY_VERDICT_COUNT; v++)
		if (v != LYNX_REPLAY_REPRODUCES && ex.verdicts[v])
			fprintf(f,
			        "%s: executor: replay refused %" PRIu64 " times: %s (first: %s)\n",
			        tag, ex.verdicts[v], lynx_replay_verdict_name(v),
			        ex.verdict_reason[v]);
	if (!ex.n_windowed)
		return;
	fprintf(f,
	        "%s: executor: windows: %zu activations planned for a window; %" PRIu64
	        " checked there, %" PRIu64 " refused (replayed on demand); %" PRIu64
	        " replays in windows, %.1f%% of all replays; %" PRIu64 " left to the guard\n",
	        tag, ex.n_windowed, ex.windows_checked, ex.windows_refused, s->window_replays,
	        s->replays ? 100.0 * (double)s->window_replays / (double)s->replays : 0.0,
	        s->window_misses);
	if (ex.windows_refused)
		fprintf(f, "%s: executor: window refused (first: %s)\n", tag, ex.window_refusal);
}

void lynx_exec_print_summary(FILE *f, const char *tag)
{
	struct lynx_arena_stats arena;
	struct lynx_exec_stats s;

	if (!ex.ever_armed)
		return;
	lynx_exec_stats(&s);
	lynx_arena_stats(ex.arena, &arena);
	fprintf(f,
	        "%s: executor: %" PRIu64 " iterations followed (%" PRIu64 " times lost); of %zu "
	        "scripted activations %u kept (%u of them below a %zu KiB granule), %u offloaded, "
	        "%u planned for recompute\n",
	        tag, s.iterations, s.lost, ex.script.n_buffers, ex.planned[LYNX_EXEC_KEEP],
	        ex.too_small, lynx_arena_granularity(ex.arena) / 1024,
	        ex.planned[LYNX_EXEC_OFFLOAD], ex.planned[LYNX_EXEC_RECOMPUTE]);
	print_replay(f, tag, &s);
	fprintf(f,
	        "%s: executor: %" PRIu64 " allocations served by the arena (%" PRIu64
	        " of them with reused memory, %" PRIu64 " left to the trainer's allocator), "
	        "%" PRIu64 " evicted (%.2f MiB in all, at most %.2f MiB at once), %" PRIu64
	        " evictions cancelled\n",
	        tag, s.routed, s.reused, s.route_failures, s.evictions,
	        lynx_prof_mib(s.evicted_bytes), lynx_prof_mib(s.peak_evicted_bytes), s.cancelled);
	fprintf(f,
	        "%s: executor: restores: %" PRIu64 " ahead of use on the restore stream, %" PRIu64
	        " on demand (%" PRIu64 " could not start ahead), %" PRIu64
	        " consumer waits, %" PRIu64 " host stalls (and %" PRIu64
	        " for the budget), %" PRIu64 " after waiting for frees; %" PRIu64
	        " driver failures; arena peak resident %.2f MiB\n",
	        tag, s.prefetches, s.on_demand, s.prefetch_failures, s.waits, s.stalls,
	        s.budget_stalls, s.oom_waits, s.failures, lynx_prof_mib(arena.peak_resident_bytes));
	print_achieved(f, tag, &s);
}

int lynx_exec_write_trace(const char *path, int rank)
{
	static const char *const names[] = {
#define LYNX_EXEC_EVENT_NAME(id, name) name,
	        LYNX_EXEC_EVENTS(LYNX_EXEC_EVENT_NAME)
#undef LYNX_EXEC_EVENT_NAME
	};
	uint64_t origin;
	FILE *f;
	int err = 0;

	if (!ex.ever_armed)
		return -ENOENT;
	if (!(f = fopen(path, "w")))
		return -errno;
	pthread_mutex_lock(&ex.lock);
	origin = ex.n_traced ? ex.traced[0].start_ns : 0;
	fprintf(f,
	        "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"what\": \"Lynx executor, host "
	        "time\", \"actions_left_out\": %" PRIu64 "},\n\"traceEvents\": [\n"
	        "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, \"tid\": 0, "
	        "\"args\": {\"name\": \"rank %d executor\"}}",
	        ex.untraced, rank, rank);
	for (uint32_t i = 0; i < ex.n_traced; i++) {
		const struct traced *t = &ex.traced[i];
		const struct lynx_prof_script_buffer *sb = ex.bufs[t->buf].sb;
		double ts = (double)(t->start_ns - origin) / 1e3;
		double dur = (double)(t->end_ns - t->start_ns) / 1e3;
		fprintf(f, ",\n{\"name\": \"%s\", \"pid\": %d, \"tid\": 1, \"ts\": %.3f, ",
		        names[t->kind], rank, ts);
		if (dur > 0)
			fprintf(f, "\"ph\": \"X\", \"dur\": %.3f, ", dur);
		else
			fprintf(f, "\"ph\": \"i\", \"s\": \"t\", ");
		fprintf(f, "\"args\": {\"layer\": %u, \"microbatch\": %u, \"bytes\": %" PRIu64 "}}",
		        sb->layer, sb->microbatch, sb->bytes);
	}
	pthread_mutex_unlock(&ex.lock);
	fprintf(f, "\n]}\n");
	if (ferror(f))
		err = -EIO;
	if (fclose(f) && !err)
		err = -errno;
	return err;
}

void lynx_exec_after_fork(void)
{
	/* The parent's CUDA objects are not the child's; its memory is ours to drop. */
	atomic_store(&lynx_exec_armed, false);
	atomic_store(&attention, 0);
	lynx_slow_path_switch(LYNX_SLOW_GUARD, false);
	pthread_mutex_init(&ex.lock, NULL);
	ex.by_addr = NULL;
	ex.polled = NULL;
	ex.arena = NULL;
	free(ex.traced);
	ex.traced = NULL;
	ex.n_traced = 0;
	free_script();
}
