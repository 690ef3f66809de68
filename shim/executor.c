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
#include "summary.h"

/* Actions kept for the executor's trace: the first ones of a run (about 3 MB). */
#define MAX_TRACED (1u << 16)

/* Tries of a restore that ran out of memory before it gives up (executor.h). */
#define RESTORE_ATTEMPTS 8

atomic_bool lynx_exec_armed;
/* Arena allocations not plainly resident: LYNX_SLOW_GUARD is set while it is not 0. */
static _Atomic uint32_t attention;

/*
 * The driver calls the executor makes besides the arena's: LYNX_EXEC_DRIVER_CALL(field,
 * symbol, version), as arena.h's table.
 */
#define LYNX_EXEC_DRIVER_CALLS                                             \
	LYNX_EXEC_DRIVER_CALL(ctx_get_device, cuCtxGetDevice, 2000)        \
	LYNX_EXEC_DRIVER_CALL(ctx_synchronize, cuCtxSynchronize, 2000)     \
	LYNX_EXEC_DRIVER_CALL(stream_create, cuStreamCreate, 2000)         \
	LYNX_EXEC_DRIVER_CALL(stream_wait_event, cuStreamWaitEvent, 3020)  \
	LYNX_EXEC_DRIVER_CALL(event_create, cuEventCreate, 2000)           \
	LYNX_EXEC_DRIVER_CALL(event_record, cuEventRecord, 2000)           \
	LYNX_EXEC_DRIVER_CALL(event_query, cuEventQuery, 2000)             \
	LYNX_EXEC_DRIVER_CALL(event_synchronize, cuEventSynchronize, 2000) \
	LYNX_EXEC_DRIVER_CALL(memcpy_dtoh_async, cuMemcpyDtoHAsync, 3020)  \
	LYNX_EXEC_DRIVER_CALL(memcpy_htod_async, cuMemcpyHtoDAsync, 3020)  \
	LYNX_EXEC_DRIVER_CALL(mem_alloc_host, cuMemAllocHost, 3020)        \
	LYNX_EXEC_DRIVER_CALL(mem_get_info, cuMemGetInfo, 3020)            \
	LYNX_EXEC_DRIVER_CALL(event_elapsed, cuEventElapsedTime, 2000)

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
	CUevent used, copied, ready, freed;
	UT_hash_handle hh; /* by addr */
	struct exec_buf *prev, *next;
};

static struct {
	pthread_mutex_t lock;
	bool ever_armed;
	struct lynx_prof_script script;
	struct exec_buf *bufs;
	uint32_t *evict_order, *restore_order; /* buffer indices by their token */
	size_t alloc_cursor, evict_cursor, restore_cursor;
	bool tracking;
	uint32_t pos;     /* tokens matched in this iteration */
	uint32_t ordinal; /* counted allocations since the last token */
	uint64_t prev_sig;
	struct exec_buf *by_addr; /* uthash */
	struct exec_buf *polled;  /* utlist: copies, restores and frees in flight */
	struct lynx_arena *arena;
	struct exec_driver drv;
	CUstream offload_stream, restore_stream;
	enum lynx_exec_fault fault;
	struct lynx_exec_expectation expect;
	CUevent iteration_start[3]; /* recorded at each iteration's first token, in turn */
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

/* Keeps `attention` (and so the guard's switch) and the poll list in step with b's state. */
static void update(struct exec_buf *b)
{
	bool needs_guard = b->addr && (b->state != BUF_RESIDENT || b->ready_pending);
	bool polled = b->addr && in_flight(b);

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
	ex.stats.offloads++;
	trace(TRACE_OFFLOAD, b, 0);
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

/*
 * Maps memory at b's address again, copies its bytes back on stream and records `ready`
 * there. The memory is a spare's if there is one, else new. Out of memory: first the
 * frees already done, then waiting for the pending ones. Returns 0 or the arena's error
 * (b then stays evicted).
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
	b->state = BUF_RESIDENT;
	evicted_add(-(int64_t)b->sb->bytes);
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
		if (done(b) && ex.drv.event_elapsed(&ms, a, b) == CUDA_SUCCESS && ms > 0) {
			ex.stats.timed_iterations++;
			ex.stats.iteration_ns += (uint64_t)((double)ms * 1e6);
		}
	}
	if (ex.drv.event_record(now, stream) == CUDA_SUCCESS)
		ex.started++;
	else
		ex.started = 0;
}

/* ---- The tracker ------------------------------------------------------------------------------
 */

static void reset_cursors(void)
{
	ex.alloc_cursor = ex.evict_cursor = ex.restore_cursor = 0;
	ex.ordinal = 0;
}

/* Token t's call, on stream, has been issued: start what the script places after it. */
static void act(uint32_t t, CUstream stream)
{
	const uint32_t n = (uint32_t)ex.script.n_buffers;
	const size_t before = ex.evict_cursor + ex.restore_cursor;

	while (ex.evict_cursor < n &&
	       ex.bufs[ex.evict_order[ex.evict_cursor]].sb->last_forward_token <= t) {
		struct exec_buf *b = &ex.bufs[ex.evict_order[ex.evict_cursor++]];
		if (b->sb->last_forward_token == t && b->addr && b->state == BUF_RESIDENT &&
		    b->action != LYNX_EXEC_KEEP && !lynx_capture_active())
			start_offload(b, stream);
	}
	while (ex.restore_cursor < n &&
	       ex.bufs[ex.restore_order[ex.restore_cursor]].sb->restore_token <= t) {
		struct exec_buf *b = &ex.bufs[ex.restore_order[ex.restore_cursor++]];
		if (b->addr && !lynx_capture_active())
			prefetch(b);
	}
	/* The peak is near an eviction or a restore: look there (a driver call each). */
	if (ex.evict_cursor + ex.restore_cursor != before || !(t % 64))
		sample_memory();
}

void lynx_exec_after(const struct lynx_event *ev)
{
	struct lynx_prof_event pe;
	uint64_t sig;

	if (!ev || !atomic_load_explicit(&lynx_exec_armed, memory_order_acquire))
		return;
	lynx_profiling_event_view(ev, &pe);
	lynx_nested_begin();
	pthread_mutex_lock(&ex.lock);
	if (ex.polled && !lynx_capture_active())
		poll();
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
	memcpy(out, &addr, sizeof(addr)); /* void ** and CUdeviceptr * alike: 8 bytes */
	ex.stats.routed++;
	served = true;
out:
	pthread_mutex_unlock(&ex.lock);
	lynx_nested_end();
	return served;
}

/* The executor's buffer based at addr (locked), or NULL. */
static struct exec_buf *find_buf(CUdeviceptr addr)
{
	struct exec_buf *b = NULL;

	HASH_FIND(hh, ex.by_addr, &addr, sizeof(addr), b);
	return b;
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

void lynx_exec_guard_slow(enum lynx_hook_id id, uint64_t addr, uint64_t stream)
{
	struct lynx_arena_range range;
	struct exec_buf *b;
	CUstream s;

	if (!addr || lynx_call_own() || !lynx_arena_find(ex.arena, (CUdeviceptr)addr, &range) ||
	    (range.state == LYNX_ARENA_RESIDENT && !atomic_load(&attention)))
		return;
	s = stream_of(id, stream);
	lynx_nested_begin();
	pthread_mutex_lock(&ex.lock);
	if (!(b = find_buf(range.base)))
		goto out;
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
		if (restore(b, s)) {
			lynx_error("recompute mode: cannot restore an evicted activation (out of "
			           "device memory even after waiting for frees); the next kernel "
			           "that reads it will fault");
			goto out;
		}
		ex.stats.on_demand++;
		trace(TRACE_RESTORE_ON_DEMAND, b, 0);
		break;
	case BUF_RESIDENT:
		if (b->ready_pending) {
			CUresult r = wait_for(s, b->ready);
			if (r != CUDA_SUCCESS) {
				driver_failed("a wait for a restore", r);
				ex.drv.event_synchronize(b->ready);
			}
			ex.stats.waits++;
			trace(TRACE_CONSUMER_WAIT, b, 0);
		}
		break;
	case BUF_NONE:
		break;
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

static int copy_script(const struct lynx_prof_script *s)
{
	size_t n = s->n_buffers;

	ex.script = *s;
	ex.script.sig = malloc(s->n_tokens * sizeof(*s->sig));
	ex.script.buffers = malloc((n ? n : 1) * sizeof(*s->buffers));
	ex.bufs = calloc(n ? n : 1, sizeof(*ex.bufs));
	ex.evict_order = malloc((n ? n : 1) * sizeof(*ex.evict_order));
	ex.restore_order = malloc((n ? n : 1) * sizeof(*ex.restore_order));
	if (!ex.script.sig || !ex.script.buffers || !ex.bufs || !ex.evict_order ||
	    !ex.restore_order)
		return -ENOMEM;
	memcpy(ex.script.sig, s->sig, s->n_tokens * sizeof(*s->sig));
	memcpy(ex.script.buffers, s->buffers, n * sizeof(*s->buffers));
	return 0;
}

static void free_script(void)
{
	free(ex.script.sig);
	free(ex.script.buffers);
	free(ex.bufs);
	free(ex.evict_order);
	free(ex.restore_order);
	memset(&ex.script, 0, sizeof(ex.script));
	ex.bufs = NULL;
	ex.evict_order = ex.restore_order = NULL;
}

/* The streams and each evicted buffer's events. */
static CUresult make_cuda_objects(void)
{
	CUresult r;

	if ((r = ex.drv.stream_create(&ex.offload_stream, CU_STREAM_NON_BLOCKING)) ||
	    (r = ex.drv.stream_create(&ex.restore_stream, CU_STREAM_NON_BLOCKING)))
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
		    (r = ex.drv.event_create(&b->freed, CU_EVENT_DISABLE_TIMING)))
			return r;
	}
	return CUDA_SUCCESS;
}

int lynx_exec_arm(const struct lynx_prof_script *script, const enum lynx_exec_action *actions,
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
	if ((r = ex.drv.ctx_get_device(&device))) {
		lynx_warn("recompute mode: no current CUDA device (CUDA error %d); training goes "
		          "on unchanged",
		          (int)r);
		goto fail;
	}
	for (size_t i = 0; i < script->n_buffers; i++)
		evict_bytes += actions[i] != LYNX_EXEC_KEEP ? script->buffers[i].bytes : 0;
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
		b->action = actions[i];
		if (b->action != LYNX_EXEC_KEEP &&
		    b->sb->bytes < lynx_arena_granularity(ex.arena)) {
			b->action = LYNX_EXEC_KEEP;
			ex.too_small++;
		}
		ex.planned[b->action]++;
		evict_bytes += b->action != LYNX_EXEC_KEEP ? b->sb->bytes : 0;
		ex.evict_order[i] = ex.restore_order[i] = (uint32_t)i;
	}
	err = -EINVAL;
	if (!evict_bytes)
		goto fail;
	qsort(ex.evict_order, script->n_buffers, sizeof(uint32_t), token_cmp_evict);
	qsort(ex.restore_order, script->n_buffers, sizeof(uint32_t), token_cmp_restore);
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
	        "%u planned for recompute (restored by copy: replay is not wired yet)\n",
	        tag, s.iterations, s.lost, ex.script.n_buffers, ex.planned[LYNX_EXEC_KEEP],
	        ex.too_small, lynx_arena_granularity(ex.arena) / 1024,
	        ex.planned[LYNX_EXEC_OFFLOAD], ex.planned[LYNX_EXEC_RECOMPUTE]);
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
