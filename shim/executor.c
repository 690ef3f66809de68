/* SPDX-License-Identifier: Apache-2.0 */
/* The executor: see executor.h. Kernel replay and windows are in executor_replay.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <uthash.h>
#include <utlist.h>

#include "arena.h"
#include "atomic_file.h"
#include "executor.h"
#include "fnv.h"
#include "log.h"
#include "period.h"
#include "profiling.h"
#include "replay.h"
#include "summary.h"
#include "executor_internal.h"

atomic_bool lynx_exec_armed;
/* Arena allocations not plainly resident: LYNX_SLOW_GUARD is set while it is not 0. */
static _Atomic uint32_t attention;

struct exec_state lynx_exec_state = {.lock = PTHREAD_MUTEX_INITIALIZER};

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

void driver_failed(const char *what, CUresult r)
{
	char error[96];

	ex.stats.failures++;
	lynx_warn_once("recompute mode: %s failed (%s); the activation stays as it was", what,
	               lynx_cuda_error_text((int)r, error, sizeof(error)));
}

/* ---- Bookkeeping -------------------------------------------------------------------------- */

uint64_t exec_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One action for the trace, from start_ns (0: an instant, now) to now. */
void exec_trace(enum trace_kind kind, const struct exec_buf *b, uint64_t start_ns)
{
	uint64_t end = exec_now_ns();

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
void exec_update(struct exec_buf *b)
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

/*
 * Makes stream wait for event: the ordering every side-stream copy and every reuse of
 * memory rests on (LYNX_FAULT=skip-stream-waits drops it, for the test that shows it).
 * When the device cannot be made to wait, the host waits for the event instead: what is
 * queued on stream from then on follows the event's work all the same, at the cost of a
 * stall. Failing that too, the device is synchronised; only when that fails does the
 * caller see the failure (and keeps the activation as it is).
 */
CUresult exec_wait_for(CUstream stream, CUevent event)
{
	char name[64], host_name[64];
	CUresult r, host;

	if (ex.fault == LYNX_EXEC_FAULT_SKIP_STREAM_WAITS)
		return CUDA_SUCCESS;
	r = ex.fault == LYNX_EXEC_FAULT_FAIL_STREAM_WAITS
	            ? CUDA_ERROR_UNKNOWN
	            : ex.drv.stream_wait_event(stream, event, 0);
	if (r == CUDA_SUCCESS)
		return r;
	host = ex.drv.event_synchronize(event);
	if (host != CUDA_SUCCESS)
		host = ex.drv.ctx_synchronize();
	if (host == CUDA_SUCCESS)
		ex.stats.host_waits++;
	lynx_warn_once("recompute mode: cuStreamWaitEvent failed (%s): the host waits for the "
	               "event instead (%s; later ones counted in the summary)",
	               lynx_cuda_error_text(r, name, sizeof(name)),
	               host == CUDA_SUCCESS
	                       ? "done"
	                       : lynx_cuda_error_text(host, host_name, sizeof(host_name)));
	return host;
}

bool exec_done(CUevent e)
{
	return ex.drv.event_query(e) == CUDA_SUCCESS;
}

void evicted_add(int64_t bytes)
{
	ex.evicted_now = (uint64_t)((int64_t)ex.evicted_now + bytes);
	if (ex.evicted_now > ex.stats.peak_evicted_bytes)
		ex.stats.peak_evicted_bytes = ex.evicted_now;
}

/* ---- Packs' shared memory (pack.h) ------------------------------------------------------ */

/* Whether b's instance needs its memory mapped: resident, or its copy out running. */
static bool needs_mapping(const struct exec_buf *b)
{
	return b->addr && (b->state == BUF_RESIDENT || b->state == BUF_OFFLOADING);
}

/* Whether a member of p other than but has an instance that needs p mapped. */
static bool pack_needed(const struct exec_pack *p, const struct exec_buf *but)
{
	for (uint32_t i = 0; i < p->count; i++) {
		const struct exec_buf *m = &ex.bufs[ex.packing.member[p->first + i]];
		if (m != but && needs_mapping(m))
			return true;
	}
	return false;
}

/* Whether a member of p has an instance (allocated, not yet freed). */
static bool pack_lives(const struct exec_pack *p)
{
	for (uint32_t i = 0; i < p->count; i++)
		if (ex.bufs[ex.packing.member[p->first + i]].addr)
			return true;
	return false;
}

bool exec_pack_mapped(const struct exec_pack *p)
{
	struct lynx_arena_range range;

	return p->base && lynx_arena_find(ex.arena, p->base, &range) &&
	       range.state == LYNX_ARENA_RESIDENT;
}

int exec_map(struct exec_buf *b)
{
	if (!b->pack)
		return lynx_arena_restore(ex.arena, b->addr);
	return exec_pack_mapped(b->pack) ? 0 : lynx_arena_restore(ex.arena, b->pack->base);
}

int exec_unmap(struct exec_buf *b)
{
	struct exec_pack *p = b->pack;

	if (!p)
		return lynx_arena_evict(ex.arena, b->addr);
	if (!exec_pack_mapped(p) || pack_needed(p, b))
		return 0;
	return lynx_arena_evict(ex.arena, p->base);
}

/* A member's instance is gone (b->addr already 0): the pack's memory goes back with its
 * last member, and is unmapped once no member left needs it. */
static int pack_release(struct exec_pack *p)
{
	int err = 0;

	if (!pack_lives(p)) {
		err = lynx_arena_free(ex.arena, p->base);
		HASH_DEL(ex.packs_by_base, p);
		p->base = 0;
	} else if (exec_pack_mapped(p) && !pack_needed(p, NULL)) {
		err = lynx_arena_evict(ex.arena, p->base);
	}
	return err;
}

/* A new instance of packed b: its place in its pack, whose memory is taken or mapped again
 * if need be. Returns 0 or the arena's error (nothing then changed for b). */
static int pack_alloc(struct exec_buf *b, CUdeviceptr *addr)
{
	struct exec_pack *p = b->pack;
	bool mapped = exec_pack_mapped(p);
	int err = 0;

	if (!mapped)
		reclaim_for(p->bytes, false); /* new memory: room for it within the budget */
	if (!p->base) {
		if ((err = lynx_arena_alloc(ex.arena, p->bytes, &p->base)))
			return err;
		HASH_ADD(hh, ex.packs_by_base, base, sizeof(p->base), p);
	} else if (!mapped && (err = lynx_arena_restore(ex.arena, p->base))) {
		return err;
	}
	*addr = p->base + b->pack_offset;
	return 0;
}

/* Gives b's memory back to the arena; its stream and side streams are done with it. */
static void finish_free(struct exec_buf *b)
{
	int err = 0;

	if (!b->pack)
		err = lynx_arena_free(ex.arena, b->addr);
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
	if (b->pack && (err = pack_release(b->pack)))
		lynx_warn_once("recompute mode: a pack of small activations could not be freed "
		               "or unmapped: %s",
		               strerror(-err));
	exec_update(b);
}

/* b's copy to host has ended: unmap it (its memory goes back, or stays with the owner it
 * was given to). */
static void evict(struct exec_buf *b)
{
	int err = exec_unmap(b);
	struct lynx_arena_range range;

	/* A failed unmap leaves it mapped: tried again (a transient driver failure), since a
	 * donated activation left mapped reads its memory's new owner. */
	for (int attempt = 1;
	     err && attempt < EVICT_ATTEMPTS && lynx_arena_find(ex.arena, b->addr, &range) &&
	     range.state == LYNX_ARENA_RESIDENT;
	     attempt++)
		err = exec_unmap(b);

	/* Unmapped, but its memory could not be released: evicted all the same (touching it
	 * faults until it is restored, which maps that memory again; the free releases it). */
	if (err && lynx_arena_find(ex.arena, b->addr, &range) &&
	    range.state == LYNX_ARENA_EVICTED) {
		ex.stats.failures++;
		lynx_warn_once("recompute mode: an evicted activation's memory could not be "
		               "released (%s): it is held until the activation is restored or "
		               "freed, and the budget may not hold meanwhile",
		               strerror(-err));
		err = 0;
	}
	if (err) {
		ex.stats.failures++;
		b->state = BUF_RESIDENT;
		if (b->donated)
			lynx_data_lost("recompute mode: an activation whose memory was given to "
			               "another could not be unmapped: it reads the other "
			               "tensor's bytes");
		else
			lynx_warn_once("recompute mode: cannot evict an activation: %s",
			               strerror(-err));
	} else {
		b->state = BUF_EVICTED;
		b->donated = false; /* unmapped: nothing hollow left */
		ex.stats.evictions++;
		exec_trace(TRACE_EVICT, b, 0);
		ex.stats.evicted_bytes += b->sb->bytes;
		evicted_add((int64_t)b->sb->bytes);
	}
	exec_update(b);
}

bool exec_sync_event(CUevent e)
{
	CUresult r = ex.drv.event_synchronize(e);

	if (r == CUDA_SUCCESS)
		return true;
	driver_failed("a wait for an event (cuEventSynchronize)", r);
	return ex.drv.ctx_synchronize() == CUDA_SUCCESS || exec_done(e);
}

/* Waits for b's copy to host (an offload whose memory was already reused, needed back
 * before the host saw the copy end) and evicts it. The host stalls; the device, which
 * has the work queued up to here, does not. */
void exec_settle(struct exec_buf *b)
{
	uint64_t start = exec_now_ns();

	ex.stats.stalls++;
	if (!exec_sync_event(b->copied)) {
		/* Its memory is another's already, and its copy may not have ended. */
		lynx_data_lost("recompute mode: an offloaded activation's copy to host could not "
		               "be waited for");
		return;
	}
	exec_trace(TRACE_STALL, b, start);
	evict(b);
}

/* Everything in flight that has completed: evictions after their copy, restores, frees. */
static void poll(void)
{
	struct exec_buf *b, *tmp;

	DL_FOREACH_SAFE (ex.polled, b, tmp) {
		if (b->check_pending && exec_done(b->checked) && exec_done(b->copied))
			finish_check(b, false);
		if (b->state == BUF_OFFLOADING && exec_done(b->copied))
			evict(b);
		if (b->ready_pending && exec_done(b->ready))
			b->ready_pending = false;
		if (b->free_pending && b->state != BUF_OFFLOADING && !b->ready_pending &&
		    exec_done(b->freed))
			finish_free(b);
		else
			exec_update(b);
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
	    (r = exec_wait_for(ex.offload_stream, b->used)) ||
	    (r = ex.drv.memcpy_dtoh_async(b->host, b->addr, bytes, ex.offload_stream)) ||
	    (r = ex.drv.event_record(b->copied, ex.offload_stream))) {
		driver_failed("the offload copy", r);
		return;
	}
	b->state = BUF_OFFLOADING;
	b->by_replay = false;
	b->copied_out = true;
	ex.stats.offloads++;
	exec_trace(TRACE_OFFLOAD, b, 0);
	exec_update(b);
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
	exec_trace(TRACE_DISCARD, b, 0);
	exec_update(b);
}

/* Completes every free whose stream got there, waiting for them if wait: room for a
 * restore that ran out of memory. */
void complete_frees(bool wait)
{
	struct exec_buf *b, *tmp;

	DL_FOREACH_SAFE (ex.polled, b, tmp) {
		if (!b->free_pending || b->state == BUF_OFFLOADING || b->ready_pending)
			continue;
		if (wait)
			ex.drv.event_synchronize(b->freed);
		if (exec_done(b->freed))
			finish_free(b);
	}
}

bool exec_device_in_use(uint64_t *bytes)
{
	size_t free_bytes, total;

	if (ex.drv.mem_get_info(&free_bytes, &total) != CUDA_SUCCESS || total < free_bytes)
		return false;
	*bytes = total - free_bytes;
	return true;
}

/*
 * Where the device goes over the budget in this iteration, if it does: each call t of the
 * iteration where it would be over with `after` bytes in use, with the most it would be
 * over there (the worst OVER_POINTS calls). Noted before an allocation, by reclaim_for()
 * (only while the iteration is followed, since the call is what keep_budget() acts on), or
 * foreseen (foresee_budget()).
 */
static void note_over_at(uint32_t t, uint64_t after)
{
	size_t least = 0;

	if (after <= ex.expect.budget_bytes)
		return;
	uint64_t over = after - ex.expect.budget_bytes;
	for (size_t i = 0; i < ex.n_over; i++) {
		if (ex.over[i].token == t) {
			if (over > ex.over[i].bytes)
				ex.over[i].bytes = over;
			return;
		}
		if (ex.over[i].bytes < ex.over[least].bytes)
			least = i;
	}
	if (ex.n_over < OVER_POINTS)
		least = ex.n_over++;
	else if (ex.over[least].bytes >= over)
		return;
	ex.over[least].token = t;
	ex.over[least].bytes = over;
}

/* The device is at `after` bytes in use at the call being followed, after an allocation
 * there: kept for foresee_budget(), and noted where it is over the budget. */
static void note_use(uint64_t after)
{
	if (!ex.tracking)
		return;
	if (after > ex.use_at[ex.pos])
		ex.use_at[ex.pos] = after;
	note_over_at(ex.pos, after);
}

/*
 * Gives up to `over` bytes of the memory that the default pool keeps after frees back to
 * the device: a pool that keeps everything (PyTorch's cudaMallocAsync backend) holds its
 * high-water mark in use, which no wait for a free brings down. What it keeps beyond that it
 * keeps, for its next allocations. True when it kept some and the trim went through
 * (counted); the pool takes new memory again as its allocations need it.
 */
bool exec_trim_pool(uint64_t over)
{
	cuuint64_t reserved = 0, used = 0;

	if (!ex.pool ||
	    ex.drv.mem_pool_get_attribute(ex.pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
	                                  &reserved) != CUDA_SUCCESS ||
	    ex.drv.mem_pool_get_attribute(ex.pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) !=
	            CUDA_SUCCESS ||
	    reserved <= used)
		return false;
	uint64_t give = reserved - used < over ? reserved - used : over;
	CUresult r = ex.drv.mem_pool_trim_to(ex.pool, (size_t)(reserved - give));
	if (r != CUDA_SUCCESS) {
		driver_failed("a trim of the default memory pool (cuMemPoolTrimTo)", r);
		return false;
	}
	ex.stats.pool_trims++;
	ex.stats.pool_trimmed_bytes += give;
	return true;
}

/*
 * Keeps the budget before `bytes` of new memory are taken (executor.h, lynx_exec_arm):
 * first gives back what the default pool keeps (exec_trim_pool(); no wait), then waits for
 * the oldest evictions and frees in flight, whose memory goes back then. Memory
 * other than a replay's scratch keeps room for the largest scratch a replay has taken: a
 * replay comes at its consumer, where the peak is and nothing may be left in flight.
 * Where it still goes over, the call is noted for keep_budget(), when the budget is the
 * user's (one the planner chose within LYNX_MAX_SLOWDOWN is not worth more time). A call
 * on the allocation path: with nothing in flight, an allocation below a granule is not
 * looked at (they are many; the look is a driver call, and no trim or eviction is needed
 * for so little).
 */
void reclaim_for(uint64_t bytes, bool scratch)
{
	uint64_t limit = ex.expect.budget_bytes, room = ex.stats.replay_scratch_bytes, in_use;
	struct exec_buf *b, *tmp;

	if (room < ex.expect.replay_scratch_bytes)
		room = ex.expect.replay_scratch_bytes;
	/* Lost, with nothing in flight: nothing to wait for and nothing to give back (below). */
	if (!limit || (!ex.polled && (!ex.tracking || bytes < lynx_arena_granularity(ex.arena))) ||
	    !exec_device_in_use(&in_use))
		return;
	if (!scratch && room < limit)
		limit -= room;
	/* Only while the iteration is followed: when the executor is lost (or not started) it
	 * evicts nothing, the memory in use stays above the budget, and a trim at every
	 * allocation gives back what the trainer's pool takes again at once (on an H200 that
	 * cost the eager GPT trainer 15% of its step, 400 trims a step, for nothing). */
	if (in_use + bytes > limit && ex.tracking && exec_trim_pool(in_use + bytes - limit) &&
	    !exec_device_in_use(&in_use))
		return;
	DL_FOREACH_SAFE (ex.polled, b, tmp) {
		if (in_use + bytes <= limit)
			goto noted;
		uint64_t start = exec_now_ns();
		/* A wait that fails leaves b as it is, and the budget to the next action. */
		if (b->state == BUF_OFFLOADING && !b->donated && !b->free_pending) {
			ex.stats.budget_stalls++;
			if (!exec_sync_event(b->copied))
				goto noted;
			exec_trace(TRACE_BUDGET_STALL, b, start);
			evict(b);
		} else if (b->free_pending && b->state == BUF_RESIDENT && !b->donated) {
			ex.stats.budget_stalls++;
			if ((b->ready_pending && !exec_sync_event(b->ready)) ||
			    !exec_sync_event(b->freed))
				goto noted;
			exec_trace(TRACE_BUDGET_STALL, b, start);
			finish_free(b);
		} else {
			continue; /* nothing of b's to wait for: in use is as it was */
		}
		if (!exec_device_in_use(&in_use))
			return;
	}
noted:
	if (ex.expect.budget_asked && bytes >= lynx_arena_granularity(ex.arena))
		note_use(in_use + bytes);
}

/*
 * Memory that the device is about to be done with, for a new owner of size bytes whose
 * work goes to stream: an activation freed by the trainer whose stream has not reached the
 * free yet, or one whose copy to host is queued. The stream waits for that point; the
 * donor is marked. NULL when there is none of that size (or no stream to order on).
 */
struct exec_buf *take_spare(size_t bytes, CUstream stream, struct exec_buf * not )
{
	size_t g = lynx_arena_granularity(ex.arena), size = (bytes + g - 1) & ~(g - 1);
	struct exec_buf *b;

	DL_FOREACH (ex.polled, b) {
		if (b == not || b->donated || b->pack ||
		    ((b->sb->bytes + g - 1) & ~(g - 1)) != size)
			continue;
		CUevent until = b->free_pending && b->state == BUF_RESIDENT      ? b->freed
		                : b->state == BUF_OFFLOADING && !b->free_pending ? b->copied
		                                                                 : NULL;
		if (!until || exec_wait_for(stream, until) != CUDA_SUCCESS)
			continue;
		return b;
	}
	return NULL;
}

/* ---- Holding the budget the plan missed -------------------------------------------------- */

/* Creates the events an evicted activation needs (a kept one has none). */
static CUresult make_buf_events(struct exec_buf *b)
{
	CUresult r;

	if ((r = ex.drv.event_create(&b->used, CU_EVENT_DISABLE_TIMING)) ||
	    (r = ex.drv.event_create(&b->copied, CU_EVENT_DISABLE_TIMING)) ||
	    (r = ex.drv.event_create(&b->ready, CU_EVENT_DISABLE_TIMING)) ||
	    (r = ex.drv.event_create(&b->freed, CU_EVENT_DISABLE_TIMING)) ||
	    (r = ex.drv.event_create(&b->checked, CU_EVENT_DISABLE_TIMING)))
		return r;
	return CUDA_SUCCESS;
}

/* Whether activation sb, evicted, is out of device memory at call t of the iteration: its
 * forward is done with it, its backward has not begun to bring it back. */
static bool out_at(const struct lynx_prof_script_buffer *sb, uint32_t t)
{
	return sb->last_forward_token < t && sb->restore_token > t;
}

/* Whether kept activation b could be evicted and out of device memory at call t. */
static bool evictable_at(const struct exec_buf *b, uint32_t t)
{
	return b->action == LYNX_EXEC_KEEP && b->sb->bytes >= lynx_arena_granularity(ex.arena) &&
	       out_at(b->sb, t);
}

/* Whether window-planned activation b is resident at call t only because its window
 * rebuilt it: after the window, before its backward's first use. Rebuilt at that use
 * instead, it (and what its rebuild brought back with it) would be out there. A move keeps
 * b's window_token, so this still says where a moved rebuild made room. */
static bool early_at(const struct exec_buf *b, uint32_t t)
{
	return b->window_token != LYNX_EXEC_NO_WINDOW && b->window_token < t &&
	       b->sb->first_backward_token > t;
}

/* Whether window rebuild b can move to its use, for call t. */
static bool deferrable_at(const struct exec_buf *b, uint32_t t)
{
	return b->window == WINDOW_CHECKED && early_at(b, t);
}

/* Whether b is rebuilt in its window (from the iteration its producer is found replayed in
 * on): planned for one, not moved from it. */
static bool in_window(const struct exec_buf *b)
{
	return b->window_token != LYNX_EXEC_NO_WINDOW && b->window != WINDOW_NONE &&
	       b->producer == PRODUCER_REPLAYED;
}

/* Whether b and c are rebuilt together in one window: the same window, layer and
 * micro-batch (keep_budget() and relax_budget() move such rebuilds together). */
static bool same_window_group(const struct exec_buf *b, const struct exec_buf *c)
{
	return b->window_token == c->window_token && b->sb->layer == c->sb->layer &&
	       b->sb->microbatch == c->sb->microbatch;
}

/* Whether window-planned activation b is rebuilt in its window from the next iteration on
 * for the first time: its examination, in the iteration that just ended (stats.iterations
 * counts it), found its producer replayed, so there it came back at its use. */
static bool foreseen(const struct exec_buf *b)
{
	return in_window(b) && b->examined_iteration + 1 == ex.stats.iterations;
}

/* Whether b is foreseen() and its window would make it resident early at call t. */
static bool foreseen_at(const struct exec_buf *b, uint32_t t)
{
	return foreseen(b) && early_at(b, t);
}

/* What scripted activation b now gets: a planned rebuild whose examination refused it is
 * offloaded for good. */
static enum lynx_exec_action followed_action(const struct exec_buf *b)
{
	return b->action == LYNX_EXEC_RECOMPUTE && b->producer == PRODUCER_REFUSED
	               ? LYNX_EXEC_OFFLOAD
	               : b->action;
}

/* The call from which b is back in device memory anyway: its copy back ahead of its layer's
 * backward, or its use (a rebuild, or a copy back once its producer is examined). */
static uint32_t back_anyway_at(const struct exec_buf *b)
{
	return followed_action(b) == LYNX_EXEC_OFFLOAD ? b->sb->restore_token
	                                               : b->sb->first_backward_token;
}

/*
 * When each scripted activation would come back in an iteration, given from[i] for those
 * rebuilt in their windows (their window's call + 1; UINT32_MAX for the rest): a replay
 * brings back first what it reads, evicted then, and so on for those inputs that are
 * replayed themselves (a copy reads nothing).
 */
static void come_back_with_reads(uint32_t *from)
{
	bool changed = true;

	for (int round = 0; changed && round < MAX_REPLAY_DEPTH; round++) {
		changed = false;
		for (size_t i = 0; i < ex.script.n_buffers; i++) {
			const struct exec_buf *b = &ex.bufs[i];
			if (from[i] == UINT32_MAX || b->action != LYNX_EXEC_RECOMPUTE ||
			    b->producer != PRODUCER_REPLAYED)
				continue;
			for (uint32_t k = 0; k < b->n_reads; k++) {
				uint32_t c = b->reads[k];
				const struct exec_buf *r = &ex.bufs[c];
				/* Evicted when the replay reads it: its forward is done, and it is
				 * not back yet. */
				if (from[i] < from[c] && r->sb->last_forward_token < from[i] - 1 &&
				    back_anyway_at(r) > from[i] - 1) {
					from[c] = from[i];
					changed = true;
				}
			}
		}
	}
}

/* In `extra` (n_tokens + 1, zeroed), the bytes that activations coming back early by
 * from[] (come_back_with_reads()) hold at each call, before they would be back anyway. */
static void early_bytes(const uint32_t *from, int64_t *extra)
{
	const size_t n = ex.script.n_tokens;

	for (size_t i = 0; i < ex.script.n_buffers; i++) {
		uint32_t to = back_anyway_at(&ex.bufs[i]);
		if (from[i] >= to || to > n)
			continue;
		extra[from[i]] += (int64_t)ex.bufs[i].sb->bytes;
		extra[to] -= (int64_t)ex.bufs[i].sb->bytes;
	}
	for (size_t t = 1; t <= n; t++)
		extra[t] += extra[t - 1];
}

/*
 * At the end of an iteration with examinations, where the budget is the user's: what the
 * next one will take. The activations whose producers were found replayed there are rebuilt
 * in their windows from then on, ahead of their use, where this iteration brought them back
 * at their use; from window to use they, and what their replays read, come on top of what
 * this iteration had in use. Notes each call where that takes the device over the budget,
 * by no more than those rebuilds add (what the examinations took themselves is this
 * iteration's alone), for keep_budget() to move them: so the first planned steps hold the
 * budget too (on a 4-stage tinytrain at 60%, the iteration after the examinations went 0.38
 * MiB over, and only the next one held it). The count errs high (an examination's copies
 * in flight are in use_at), so relax_budget() gives back what the steady state has room for.
 */
static void foresee_budget(void)
{
	const size_t n = ex.script.n_tokens, nb = ex.script.n_buffers;
	int64_t *extra = calloc(n + 1, sizeof(*extra));
	uint32_t *from = malloc((nb ? nb : 1) * sizeof(*from));

	ex.n_over = 0;
	if (!extra || !from)
		goto out; /* the iteration after it is watched as every one is */
	for (size_t i = 0; i < nb; i++)
		from[i] = foreseen(&ex.bufs[i]) ? ex.bufs[i].window_token + 1 : UINT32_MAX;
	come_back_with_reads(from);
	early_bytes(from, extra);
	for (uint32_t t = 0; t < n; t++) {
		uint64_t after = ex.use_at[t] + (uint64_t)extra[t], budget = ex.expect.budget_bytes;
		if (!ex.use_at[t] || extra[t] <= 0 || after <= budget)
			continue;
		note_over_at(t,
		             budget + (after - budget < (uint64_t)extra[t] ? after - budget
		                                                           : (uint64_t)extra[t]));
	}
out:
	free(extra);
	free(from);
}

/* Whether a window's check is still under way (its verdict comes in a later iteration). */
static bool checks_pending(void)
{
	for (size_t i = 0; i < ex.script.n_buffers; i++)
		if (ex.bufs[i].check_pending)
			return true;
	return false;
}

/* Whether b is one of the window rebuilds moved with `first` that relax_budget() has not
 * decided on. */
static bool moved_with(const struct exec_buf *b, const struct exec_buf *first)
{
	return b->deferred_foreseen && same_window_group(b, first);
}

/*
 * At the end of a steady iteration (no examination, no window check) that held the user's
 * budget: window rebuilds that foresee_budget() moved to their use go back to their
 * windows, a window's rebuilds of one layer and micro-batch at a time, earliest window
 * first, wherever this iteration's memory with what they hold early (and what their
 * replays read) stays within the budget. Each is decided once: one that takes the device
 * over after all is moved for good by keep_budget().
 */
static void relax_budget(void)
{
	const size_t n = ex.script.n_tokens, nb = ex.script.n_buffers;
	int64_t *base = calloc(n + 1, sizeof(*base)), *with = calloc(n + 1, sizeof(*with));
	uint32_t *from = malloc((nb ? nb : 1) * sizeof(*from));
	bool *back = calloc(nb ? nb : 1, sizeof(*back));
	const uint64_t limit = ex.expect.budget_bytes;
	uint64_t back_bytes = 0;
	size_t n_back = 0, n_moved = 0;

	for (size_t i = 0; i < nb; i++)
		n_moved += ex.bufs[i].deferred_foreseen;
	if (!n_moved || !base || !with || !from || !back)
		goto out; /* tried again at the next iteration's end */
	/* What this iteration's use already holds early. */
	for (size_t i = 0; i < nb; i++)
		from[i] = in_window(&ex.bufs[i]) ? ex.bufs[i].window_token + 1 : UINT32_MAX;
	come_back_with_reads(from);
	early_bytes(from, base);
	for (;;) {
		struct exec_buf *first = NULL;
		bool fits = true;

		for (size_t i = 0; i < nb; i++)
			if (ex.bufs[i].deferred_foreseen &&
			    (!first || ex.bufs[i].window_token < first->window_token))
				first = &ex.bufs[i];
		if (!first)
			break;
		for (size_t i = 0; i < nb; i++) {
			const struct exec_buf *b = &ex.bufs[i];
			from[i] = in_window(b) || back[i] || moved_with(b, first)
			                  ? b->window_token + 1
			                  : UINT32_MAX;
		}
		come_back_with_reads(from);
		memset(with, 0, (n + 1) * sizeof(*with));
		early_bytes(from, with);
		for (uint32_t t = 0; t < n && fits; t++)
			fits = !ex.use_at[t] ||
			       (int64_t)ex.use_at[t] + with[t] - base[t] <= (int64_t)limit;
		for (size_t i = nb; i-- > 0;) {
			struct exec_buf *b = &ex.bufs[i];
			if (!moved_with(b, first))
				continue;
			b->deferred_foreseen = false;
			back[i] = fits;
		}
	}
	for (size_t i = 0; i < nb; i++) {
		if (!back[i])
			continue;
		ex.bufs[i].window = ex.bufs[i].window_was;
		ex.stats.windows_deferred--;
		n_back++;
		back_bytes += ex.bufs[i].sb->bytes;
	}
	if (n_back)
		lynx_info("recompute mode: %zu window rebuilds (%.2f MiB) moved to their use after "
		          "the examinations go back to their windows: the steady state has room "
		          "for them",
		          n_back, lynx_prof_mib(back_bytes));
out:
	free(base);
	free(with);
	free(from);
	free(back);
}

/* Where a step with examinations went over the budget (ex.over): said once, not corrected,
 * since examinations take their memory once. */
static void say_examination_over(void)
{
	uint64_t worst = 0;
	uint32_t at = 0;

	for (size_t k = 0; k < ex.n_over; k++)
		if (ex.over[k].bytes > worst) {
			worst = ex.over[k].bytes;
			at = ex.over[k].token;
		}
	if (worst)
		lynx_warn_once("recompute mode: the step that examined the producers went %.2f MiB "
		               "over the budget (at call %u of an iteration): the examinations "
		               "bring back by copy what is not examined yet and copy what they "
		               "compare, once; a later step that goes over is corrected",
		               lynx_prof_mib(worst), at);
}

/* What keep_budget() changes from the next iteration on: a kept activation offloaded, or a
 * window rebuild moved to the activation's use. */
struct budget_move {
	struct exec_buf *b;
	bool deferred; /* the window rebuild; else the offload */
};

/* The bytes of the activations that keep_budget()'s moves (n of them) take out of device
 * memory at call t. */
static uint64_t moved_out_at(const struct budget_move *moves, size_t n, uint32_t t)
{
	uint64_t bytes = 0;

	for (size_t i = 0; i < n; i++) {
		const struct exec_buf *b = moves[i].b;
		bool out = moves[i].deferred ? early_at(b, t) : out_at(b->sb, t);
		bytes += out ? b->sb->bytes : 0;
	}
	return bytes;
}

/* Of the activations that `can` accepts at call t, the one with the fewest bytes that
 * covers `left`, else the largest; NULL when none. */
static struct exec_buf *pick_cover(bool (*can)(const struct exec_buf *, uint32_t), uint32_t t,
                                   uint64_t left)
{
	struct exec_buf *fit = NULL, *largest = NULL;

	for (size_t i = 0; i < ex.script.n_buffers; i++) {
		struct exec_buf *b = &ex.bufs[i];
		if (!can(b, t))
			continue;
		if (!largest || b->sb->bytes > largest->sb->bytes)
			largest = b;
		if (b->sb->bytes >= left && (!fit || b->sb->bytes < fit->sb->bytes))
			fit = b;
	}
	return fit ? fit : largest;
}

/* Kept activation b is offloaded from the next iteration on. False if its events could not
 * be made (said; nothing changed). */
static bool offload_to_hold_budget(struct exec_buf *b)
{
	CUresult r = make_buf_events(b);

	if (r != CUDA_SUCCESS) {
		driver_failed("the events of an activation offloaded to hold the budget", r);
		return false;
	}
	b->action = LYNX_EXEC_OFFLOAD;
	ex.planned[LYNX_EXEC_KEEP]--;
	ex.planned[LYNX_EXEC_OFFLOAD]++;
	ex.stats.promoted++;
	return true;
}

/*
 * At the end of an iteration that went over the user's budget (note_over_budget(); one
 * with an examination, which takes memory once, does not count): the plan predicted less
 * than the job takes. At each call where the budget went over, from the next iteration on:
 * - activations the plan keeps that could be out of device memory there are offloaded;
 * - then window rebuilds that made activations resident there ahead of their use are made
 *   at that use instead, each with the rest of its window's rebuilds of the same layer and
 *   micro-batch (a rebuild in a window also brings back what it reads, so it can hold more
 *   than the plan saw: a trainer that keeps saved buffers until its layer's backward ends,
 *   where the plan gives each back after its last reader);
 * each the fewest bytes that cover what those already chosen leave (the smallest one that
 * covers it, else the largest, in turn). Offloads come first: they cost copies on an idle
 * link, where a rebuild moved to its use costs its time. Said once at the default level;
 * the summary counts them. Where neither can, the budget is not held, and that is said
 * once.
 */
static void keep_budget(bool examined)
{
	struct budget_move moves[OVER_POINTS * 4];
	size_t n_moves = 0, n_over, n_deferred = 0;
	uint64_t worst = 0, moved = 0, deferred_bytes = 0, short_by = 0;
	uint32_t worst_at = 0, short_at = 0;
	/* After examinations, what is foreseen is acted on, by moving those rebuilds only. */
	bool (*movable)(const struct exec_buf *, uint32_t) = examined ? foreseen_at : deferrable_at;

	if (examined && ex.expect.budget_asked) {
		say_examination_over();
		foresee_budget();
	} else if (examined)
		ex.n_over = 0;
	n_over = ex.n_over;
	ex.n_over = 0;
	/* Only from a steady iteration: one where windows were checked held their replays in
	 * scratch, not ahead of use, so its memory says too little. */
	if (!n_over && !examined && ex.expect.budget_asked &&
	    ex.windows_checked == ex.windows_checked_before && !checks_pending())
		relax_budget();
	ex.windows_checked_before = ex.windows_checked;
	memset(ex.use_at, 0, ex.script.n_tokens * sizeof(*ex.use_at));
	if (!n_over)
		return;
	for (size_t k = 0; k < n_over; k++) {
		uint32_t t = ex.over[k].token;
		uint64_t out = moved_out_at(moves, n_moves, t);
		uint64_t left = ex.over[k].bytes > out ? ex.over[k].bytes - out : 0;
		if (ex.over[k].bytes > worst) {
			worst = ex.over[k].bytes;
			worst_at = t;
		}
		while (left && n_moves < sizeof(moves) / sizeof(moves[0])) {
			struct exec_buf *b = examined ? NULL : pick_cover(evictable_at, t, left);
			if (b) {
				if (!offload_to_hold_budget(b))
					return;
				moved += b->sb->bytes;
				moves[n_moves++] = (struct budget_move){b, false};
				left = b->sb->bytes >= left ? 0 : left - b->sb->bytes;
				continue;
			}
			if (!(b = pick_cover(movable, t, left)))
				break;
			/* With every rebuild of b's window for its layer and micro-batch: one left
			 * there would bring back what they share (siblings written by one replay,
			 * what their replays read), and little would be out. */
			const struct exec_buf *chosen = b;
			for (size_t i = 0; i < ex.script.n_buffers; i++) {
				struct exec_buf *c = &ex.bufs[i];
				if (!same_window_group(c, chosen) || !movable(c, t) ||
				    n_moves == sizeof(moves) / sizeof(moves[0]))
					continue;
				/* Moved as foreseen, it may go back (relax_budget()); moved
				 * because the device went over, it stays. */
				c->deferred_foreseen = examined;
				c->window_was = c->window;
				c->window = WINDOW_NONE; /* at_window() passes it over: on demand */
				ex.stats.windows_deferred++;
				n_deferred++;
				deferred_bytes += c->sb->bytes;
				moves[n_moves++] = (struct budget_move){c, true};
				left = c->sb->bytes >= left ? 0 : left - c->sb->bytes;
			}
		}
		if (left > short_by) {
			short_by = left;
			short_at = t;
		}
	}
	if (n_moves && examined)
		lynx_info("recompute mode: the window rebuilds of activations whose producers "
		          "were just examined would take the device up to %.2f MiB over the "
		          "budget (at call %u of an iteration): %zu of them (%.2f MiB) are made "
		          "at their use instead",
		          lynx_prof_mib(worst), worst_at, n_deferred,
		          lynx_prof_mib(deferred_bytes));
	else if (n_moves)
		lynx_warn_once(
		        "recompute mode: the device went up to %.2f MiB over the budget (at "
		        "call %u of an iteration; the plan predicted less): from the next "
		        "iteration on, %zu more activations (%.2f MiB) are offloaded and %zu "
		        "window rebuilds (%.2f MiB) are made at their use instead (later "
		        "ones counted in the summary)",
		        lynx_prof_mib(worst), worst_at, n_moves - n_deferred, lynx_prof_mib(moved),
		        n_deferred, lynx_prof_mib(deferred_bytes));
	if (short_by && !examined)
		lynx_warn_once("recompute mode: the budget is not held: the device went %.2f MiB "
		               "over it at call %u of an iteration, where no activation the plan "
		               "keeps can be evicted and no window rebuilt one ahead of its use",
		               lynx_prof_mib(short_by), short_at);
}

/*
 * At the end of a followed iteration: when more activations than at the last prediction get
 * another action than planned (refused rebuilds, kept ones offloaded to hold the budget,
 * evictions below a granule kept), the plan is predicted again as followed, so that the
 * summary sets beside what is achieved a prediction of what ran.
 */
static void predict_as_followed(void)
{
	uint32_t deviations = ex.too_small + (uint32_t)ex.stats.promoted;
	enum lynx_exec_action *actions;

	for (size_t i = 0; i < ex.script.n_buffers; i++)
		deviations += followed_action(&ex.bufs[i]) != ex.bufs[i].action;
	if (!ex.expect.repredict || deviations == ex.deviations)
		return;
	actions = malloc(ex.script.n_buffers * sizeof(*actions) + 1);
	if (!actions)
		return; /* tried again at the next iteration's end */
	for (size_t i = 0; i < ex.script.n_buffers; i++)
		actions[i] = followed_action(&ex.bufs[i]);
	ex.followed_known = ex.expect.repredict(actions, ex.script.n_buffers, &ex.followed_slowdown,
	                                        &ex.followed_peak_bytes);
	ex.deviations = deviations;
	free(actions);
}

/* ---- Measuring what is achieved ---------------------------------------------------------- */

/* Device memory in use now (on a GPU: the whole device's, this rank's in practice), kept
 * for the peak and, while an iteration is followed, for its memory curve. */
static void sample_memory(void)
{
	uint64_t in_use;

	if (!exec_device_in_use(&in_use))
		return;
	if (in_use > ex.stats.peak_used_bytes)
		ex.stats.peak_used_bytes = in_use;
	struct exec_curve *c = &ex.curves[ex.curve_now];
	if (ex.tracking && c->n < MAX_CURVE) {
		c->t_ns[c->n] = exec_now_ns();
		c->bytes[c->n++] = in_use;
	}
}

/* At the end of a followed iteration: its curve becomes the last one, unless an examination
 * ran in it (not the steady state). The next iteration's starts empty. */
static void curve_iteration_ended(bool examined)
{
	struct exec_curve *c = &ex.curves[ex.curve_now];

	if (!examined && c->n >= 2) {
		c->end_ns = exec_now_ns();
		ex.curve_now ^= 1;
		ex.curve_done = true;
	}
	c = &ex.curves[ex.curve_now];
	c->n = 0;
	c->start_ns = exec_now_ns();
}

static int by_ns(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The median (the lower middle one) of the iterations timed so far, the last 64 of them. */
static uint64_t median_iteration_ns(void)
{
	uint64_t sorted[EXEC_ITERATION_SAMPLES];
	size_t n = ex.stats.timed_iterations < EXEC_ITERATION_SAMPLES
	                   ? (size_t)ex.stats.timed_iterations
	                   : EXEC_ITERATION_SAMPLES;

	memcpy(sorted, ex.iteration_samples, n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), by_ns);
	return n ? sorted[(n - 1) / 2] : 0;
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
		if (!ex.examined_in[(ex.started - 2) % 3] && exec_done(b) &&
		    ex.drv.event_elapsed(&ms, a, b) == CUDA_SUCCESS && ms > 0) {
			ex.iteration_samples[ex.stats.timed_iterations++ % EXEC_ITERATION_SAMPLES] =
			        (uint64_t)((double)ms * 1e6);
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
			exec_prefetch(b);
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

/*
 * Host synchronisations do not change the device's work or its memory, and their number
 * can differ from one iteration to the next (an allocator that waits on an event only
 * when the event has not completed, a trainer that checks every few steps). A live one
 * more than the script is passed over where it comes (lynx_exec_after). Script calls
 * missing live are passed here, acting at them in order, up to the token that matches sig:
 * any number of synchronisations, and at most MAX_MISSING_CALLS other calls among them (a
 * step that leaves work out: fp16's loss scaler skips the optimizer's step, or its graph,
 * when the gradients overflowed). The guard keeps what the actions at them evict right.
 * True when the cursor now points at that token; false when no such run leads to it
 * within the iteration.
 */
static bool skip_missing(uint64_t sig, CUstream stream)
{
	uint32_t next = ex.pos, others = 0;

	while (next < ex.script.n_tokens && ex.script.sig[next] != sig) {
		if (ex.script.kind[next] != LYNX_PROF_SYNC && ++others > MAX_MISSING_CALLS)
			return false;
		next++;
	}
	if (next == ex.pos || next == ex.script.n_tokens)
		return false;
	for (; ex.pos < next; ex.pos++) {
		act(ex.pos, stream);
		if (ex.script.kind[ex.pos] == LYNX_PROF_SYNC)
			ex.stats.syncs_passed++;
		else
			ex.stats.calls_missing++;
	}
	return true;
}

/* Says, once per run at the default level and after that at INFO, where the live calls
 * left the learned iteration: what was called against what warm-up saw. */
static void note_lost(const struct lynx_prof_event *pe)
{
	const char *expected = lynx_prof_kind_name((enum lynx_prof_kind)ex.script.kind[ex.pos]);
	const char *seen = lynx_prof_kind_name(pe->kind);
	char kernel[96] = "";

	if (pe->kind == LYNX_PROF_LAUNCH && pe->u.launch.name)
		snprintf(kernel, sizeof(kernel), " of %.80s", pe->u.launch.name);
	lynx_log(ex.stats.lost == 1 ? LYNX_LOG_WARN : LYNX_LOG_INFO,
	         "recompute mode: call %u of the iteration is a %s (%s%s) where warm-up saw a %s; "
	         "evicting nothing until the next iteration starts",
	         ex.pos, seen ? seen : "call", pe->hook, kernel,
	         expected ? expected : "different call");
}

/* Whether hook destroys a stream. */
static bool is_stream_destroy(enum lynx_hook_id hook)
{
	return hook == LYNX_HOOK_cudaStreamDestroy || hook == LYNX_HOOK_cuStreamDestroy ||
	       hook == LYNX_HOOK_cuStreamDestroy_v2;
}

/* The driver launch nested in this thread's current top-level call, for exec_capture(). */
static __thread struct {
	struct lynx_event event;
	unsigned char payload[LYNX_LAUNCH_MAX_PAYLOAD]; /* parameters and attributes */
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
	/* Work a stream captures into a graph does not run now: its stream is not noted. */
	if (ex.can_replay && !lynx_capture_active() &&
	    (ev->kind == LYNX_EV_LAUNCH || ev->kind == LYNX_EV_COPY || ev->kind == LYNX_EV_MEMSET ||
	     ev->kind == LYNX_EV_COLL || ev->kind == LYNX_EV_P2P))
		note_stream(stream_of((enum lynx_hook_id)ev->hook, ev->stream));
	if (is_stream_destroy((enum lynx_hook_id)ev->hook) && !ev->result)
		forget_stream(stream_of((enum lynx_hook_id)ev->hook, ev->stream));
	/* Each launch once: a runtime launch by the driver launch it made (which carries the
	 * parameters and attributes), never by both. */
	if (ev->kind == LYNX_EV_LAUNCH && ex.tracking && ex.replayable[ev->hook])
		exec_capture(ev); /* a driver launch called by the program itself */
	else if (ev->kind == LYNX_EV_LAUNCH && ex.tracking && nested &&
	         lynx_hooks[ev->hook].layer == LYNX_LAYER_RUNTIME)
		exec_capture(&nested_launch.event); /* the runtime's launch, made by the driver's */
	else if (ev->kind == LYNX_EV_LAUNCH && ex.tracking)
		exec_unseen_launch(ev); /* a runtime launch with no driver launch seen beneath */
	if (pe.kind == LYNX_PROF_FREE && !pe.nested && !ev->result)
		chain_note_free((CUdeviceptr)pe.u.mem.ptr);
	if (lynx_prof_script_counts_alloc(&pe)) {
		if (ex.tracking && !ev->result)
			chain_remember_alloc((CUdeviceptr)pe.u.mem.ptr);
		ex.ordinal += ex.tracking;
		goto out;
	}
	if (!(sig = lynx_prof_signature(&pe)))
		goto out;
	if (ex.fault == LYNX_EXEC_FAULT_LOSE_TRACK && ex.tracking && ex.pos > 0 &&
	    pe.kind != LYNX_PROF_SYNC)
		sig ^= 1;
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
		ex.curves[ex.curve_now].n = 0;
		ex.curves[ex.curve_now].start_ns = exec_now_ns();
		ex.started = 0; /* a lost stretch is not an iteration's time */
	} else if (sig != ex.script.sig[ex.pos]) {
		if (pe.kind == LYNX_PROF_SYNC) { /* one more than warm-up saw: passed over */
			ex.stats.syncs_passed++;
			goto out;
		}
		if (!skip_missing(sig, stream_of((enum lynx_hook_id)ev->hook, ev->stream))) {
			ex.tracking = false;
			reset_cursors();
			ex.stats.lost++;
			note_lost(&pe);
			ex.prev_sig = sig;
			goto out;
		}
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
		/* One with an examination (it takes memory and time once) is not the steady
		 * state: neither its curve nor its excess over the budget counts. */
		bool examined = ex.started && ex.examined_in[(ex.started - 1) % 3];
		curve_iteration_ended(examined);
		keep_budget(examined);
		predict_as_followed();
		chain_history_settle();
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
		reclaim_for(bytes, false); /* the trainer's own allocator will take new memory */
		goto out;
	}
	if (b->addr && b->free_pending)
		complete_frees(false); /* last iteration's instance, if its free is done */
	if (b->addr) {
		ex.stats.route_failures++;
		goto out;
	}
	struct exec_buf *donor =
	        ex.async_alloc[id] && !b->pack ? take_spare(bytes, stream_of(id, stream), b) : NULL;
	if (b->pack) {
		if (pack_alloc(b, &addr)) {
			ex.stats.route_failures++;
			goto out;
		}
	} else if (donor && !lynx_arena_alloc_from(ex.arena, donor->addr, bytes, &addr)) {
		donor->donated = true;
		ex.stats.reused++;
	} else if ((reclaim_for(bytes, false), lynx_arena_alloc(ex.arena, bytes, &addr))) {
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

	/* A pack's member lies inside its pack's allocation: found by its own address. */
	if (!ex.frees[id] || !ptr || lynx_call_own() || lynx_call_depth() != 1 ||
	    !lynx_arena_find(ex.arena, (CUdeviceptr)ptr, &range) ||
	    (range.base != ptr && !ex.packed))
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
			exec_update(b);
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
bool make_resident(struct exec_buf *b, CUstream stream)
{
	if (b->state == BUF_OFFLOADING && b->donated)
		exec_settle(b); /* its memory is another's now: it comes back like an evicted one */
	switch (b->state) {
	case BUF_OFFLOADING:
		/* Touched again before its copy ended: it stays (the copy runs on unused). */
		b->state = BUF_RESIDENT;
		ex.stats.cancelled++;
		exec_update(b);
		break;
	case BUF_EVICTED:
		int err = exec_restore(b, stream);
		if (err) {
			lynx_data_lost(
			        "recompute mode: layer %u's evicted activation %u (micro-batch "
			        "%u) cannot be mapped again (%s)",
			        b->sb->layer, b->sb->index, b->sb->microbatch,
			        err == -ENOMEM ? "out of device memory, even after waiting "
			                         "for frees"
			                       : strerror(-err));
			return false;
		}
		ex.stats.on_demand++;
		exec_trace(TRACE_RESTORE_ON_DEMAND, b, 0);
		if (b->examine) /* restored by copy here, where a replay would be made */
			exec_examine(b, stream);
		break;
	case BUF_RESIDENT:
		if (b->ready_pending) {
			CUresult r = exec_wait_for(stream, b->ready);
			if (r != CUDA_SUCCESS) {
				driver_failed("a wait for a restore", r);
				if (!exec_sync_event(b->ready))
					lynx_data_lost(
					        "recompute mode: a restore could not be waited "
					        "for before its consumer");
			}
			ex.stats.waits++;
			exec_trace(TRACE_CONSUMER_WAIT, b, 0);
		}
		if (b->examine)
			exec_examine(b, stream);
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
	if ((b = buf_at((CUdeviceptr)addr, range.base)))
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
		ex.replayable[id] = lynx_hooks[id].layer == LYNX_LAYER_DRIVER &&
		                    lynx_hooks[id].kind == LYNX_EV_LAUNCH;
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
	ex.script.kind = malloc(s->n_tokens * sizeof(*s->kind));
	ex.script.buffers = malloc((n ? n : 1) * sizeof(*s->buffers));
	ex.bufs = calloc(n ? n : 1, sizeof(*ex.bufs));
	ex.evict_order = malloc((n ? n : 1) * sizeof(*ex.evict_order));
	ex.restore_order = malloc((n ? n : 1) * sizeof(*ex.restore_order));
	ex.window_order = malloc((n ? n : 1) * sizeof(*ex.window_order));
	ex.use_at = calloc(s->n_tokens ? s->n_tokens : 1, sizeof(*ex.use_at));
	if (!ex.script.sig || !ex.script.kind || !ex.script.buffers || !ex.bufs ||
	    !ex.evict_order || !ex.restore_order || !ex.window_order || !ex.use_at)
		return -ENOMEM;
	memcpy(ex.script.sig, s->sig, s->n_tokens * sizeof(*s->sig));
	memcpy(ex.script.kind, s->kind, s->n_tokens * sizeof(*s->kind));
	memcpy(ex.script.buffers, s->buffers, n * sizeof(*s->buffers));
	return 0;
}

static void free_script(void)
{
	for (size_t i = 0; ex.bufs && i < ex.script.n_buffers; i++) {
		for (uint32_t k = 0; k < MAX_PRODUCER_KERNELS; k++)
			free(ex.bufs[i].launch[k]);
		free(ex.bufs[i].operands);
		chain_forget(&ex.bufs[i]);
		lynx_replay_segment_destroy(ex.bufs[i].segment); /* host memory only */
	}
	chain_history_close();
	ex.n_awaiting = 0;
	free(ex.script.sig);
	free(ex.script.kind);
	free(ex.script.buffers);
	free(ex.bufs);
	free(ex.evict_order);
	free(ex.restore_order);
	free(ex.window_order);
	free(ex.use_at);
	ex.use_at = NULL;
	memset(&ex.script, 0, sizeof(ex.script));
	ex.bufs = NULL;
	ex.evict_order = ex.restore_order = ex.window_order = NULL;
	ex.n_windowed = 0;
	lynx_packing_free(&ex.packing);
	free(ex.packs);
	ex.packs = ex.packs_by_base = NULL;
	ex.packed = 0;
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
		if (b->action != LYNX_EXEC_KEEP && (r = make_buf_events(b)))
			return r;
	}
	return CUDA_SUCCESS;
}

/* The plan this rank follows, as one number: FNV-1a over each scripted activation's place
 * (layer, micro-batch, index), size, action and window, in script order. Ranks of one stage
 * (TP and DP peers) that follow the same plan have the same; `lynx report` compares them. */
static uint64_t plan_hash(const struct lynx_prof_script *script,
                          const struct lynx_exec_decision *decisions)
{
	uint64_t h = LYNX_FNV1A_BASIS;

	for (size_t i = 0; i < script->n_buffers; i++) {
		const struct lynx_prof_script_buffer *sb = &script->buffers[i];
		const uint64_t words[] = {sb->layer,
		                          sb->microbatch,
		                          sb->index,
		                          sb->bytes,
		                          (uint64_t)decisions[i].action,
		                          decisions[i].window_token};
		for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++)
			for (int b = 0; b < 8; b++)
				h = lynx_fnv1a_byte(h, (unsigned char)(words[w] >> (8 * b)));
	}
	return h;
}

size_t lynx_exec_eviction_granule(void)
{
	PFN_cuCtxGetDevice_v2000 get_device =
	        (PFN_cuCtxGetDevice_v2000)lookup("cuCtxGetDevice", 2000, NULL);
	struct lynx_arena_driver arena_driver;
	CUdevice device;
	size_t granule = 0;

	lynx_nested_begin();
	if (!get_device || get_device(&device) != CUDA_SUCCESS ||
	    lynx_arena_driver_resolve(&arena_driver, lookup, NULL) ||
	    lynx_arena_device_granularity(&arena_driver, (int)device, &granule))
		granule = 0;
	lynx_nested_end();
	return granule;
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
	ex.func_name = (func_name_fn)lookup("cuFuncGetName", 12030, NULL);
	ex.kernel_name = (kernel_name_fn)lookup("cuKernelGetName", 12030, NULL);
	ex.can_replay =
	        !lynx_replay_driver_resolve(&ex.replay_drv, lookup, NULL) && ex.address_range;
	if ((r = ex.drv.ctx_get_device(&device))) {
		char error[96];
		lynx_warn("recompute mode: no current CUDA device (%s); training goes on unchanged",
		          lynx_cuda_error_text((int)r, error, sizeof(error)));
		goto fail;
	}
	/* Without it, what the trainer's pool keeps is never given back (exec_trim_pool()). */
	if ((r = ex.drv.device_default_pool(&ex.pool, device))) {
		char error[96];
		ex.pool = NULL;
		lynx_warn("recompute mode: the device's default memory pool cannot be had (%s): "
		          "memory it keeps after frees counts against the budget",
		          lynx_cuda_error_text((int)r, error, sizeof(error)));
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
	/* Activations smaller than a granule share granules where a pack is worth it
	 * (pack.h); any other would take a whole one: it stays. */
	if (expect->pack_small &&
	    (err = lynx_pack_build(ex.script.buffers, decisions, ex.script.n_buffers,
	                           lynx_arena_granularity(ex.arena), &ex.packing))) {
		lynx_warn("recompute mode: cannot pack the activations below a granule: %s; "
		          "training goes on unchanged",
		          strerror(-err));
		goto fail;
	}
	if (ex.packing.n_packs && !(ex.packs = calloc(ex.packing.n_packs, sizeof(*ex.packs)))) {
		lynx_warn("recompute mode: out of memory for the packs; training goes on "
		          "unchanged");
		err = -ENOMEM;
		goto fail;
	}
	for (uint32_t k = 0; k < ex.packing.n_packs; k++)
		ex.packs[k] = (struct exec_pack){.bytes = ex.packing.packs[k].bytes,
		                                 .first = ex.packing.packs[k].first,
		                                 .count = ex.packing.packs[k].count};
	evict_bytes = 0;
	for (size_t i = 0; i < script->n_buffers; i++) {
		struct exec_buf *b = &ex.bufs[i];
		b->sb = &ex.script.buffers[i];
		b->action = decisions[i].action;
		if (b->action != LYNX_EXEC_KEEP && ex.packing.pack_of &&
		    ex.packing.pack_of[i] != LYNX_PACK_NONE) {
			b->pack = &ex.packs[ex.packing.pack_of[i]];
			b->pack_offset = ex.packing.offset[i];
			ex.packed++;
		} else if (b->action != LYNX_EXEC_KEEP &&
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
	ex.plan_hash = plan_hash(script, decisions);
	err = -EINVAL;
	if (!evict_bytes)
		goto fail;
	/* Without its history, a producer that reads a freed temporary is offloaded. */
	if (ex.can_replay && ex.planned[LYNX_EXEC_RECOMPUTE] && chain_history_open())
		lynx_warn("recompute mode: no memory to remember launches: activations whose "
		          "producers read temporaries are offloaded, not recomputed");
	qsort(ex.evict_order, script->n_buffers, sizeof(uint32_t), token_cmp_evict);
	qsort(ex.restore_order, script->n_buffers, sizeof(uint32_t), token_cmp_restore);
	qsort(ex.window_order, ex.n_windowed, sizeof(uint32_t), token_cmp_window);
	if ((r = make_cuda_objects())) {
		char error[96];
		lynx_warn("recompute mode: cannot prepare the executor's streams and events (%s); "
		          "training goes on unchanged",
		          lynx_cuda_error_text((int)r, error, sizeof(error)));
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
	ex.deviations = 0;
	ex.followed_known = false;
	lynx_nested_end();
	return err;
}

/* ---- Reporting ------------------------------------------------------------------------------- */

void lynx_exec_stats(struct lynx_exec_stats *out)
{
	pthread_mutex_lock(&ex.lock);
	*out = ex.stats;
	out->iteration_ns = median_iteration_ns();
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
	double achieved = (double)s->iteration_ns;
	char followed[160] = "";
	if (ex.followed_known)
		snprintf(followed, sizeof(followed),
		         " (%+.1f%% and %.2f MiB as followed: %u activations not as planned)",
		         100.0 * (ex.followed_slowdown - 1.0),
		         lynx_prof_mib(ex.followed_peak_bytes), ex.deviations);
	fprintf(f,
	        "%s: executor: time: warm-up iteration %.3f ms; planned %+.1f%%%s; achieved "
	        "%.3f ms (%+.1f%%, the median of %" PRIu64 " followed iterations, device time)\n",
	        tag, (double)e->measured_iteration_ns / 1e6, 100.0 * (e->predicted_slowdown - 1.0),
	        followed, achieved / 1e6, percent(achieved, (double)e->measured_iteration_ns),
	        s->timed_iterations);
	if (e->max_slowdown > 0 && achieved > e->max_slowdown * (double)e->measured_iteration_ns)
		lynx_warn("recompute mode: the followed iterations took %+.1f%%, over "
		          "LYNX_MAX_SLOWDOWN=%s (the plan was predicted at %+.1f%%): the cost "
		          "model misses part of the executor's cost on this job",
		          percent(achieved, (double)e->measured_iteration_ns), e->max_slowdown_text,
		          100.0 * (e->predicted_slowdown - 1.0));
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
	        " examined and replayed from then on (%" PRIu64
	        " after the writers of temporaries they read), %" PRIu64
	        " refused (offloaded instead); "
	        "%" PRIu64 " evicted without a copy, %" PRIu64 " restored by replay and %" PRIu64
	        " beside a sibling's (%" PRIu64
	        " launches failed and were tried again); at most %.2f MiB of scratch for one "
	        "replay\n",
	        tag, s->producers, ex.verdicts[LYNX_REPLAY_REPRODUCES], s->chained, refused,
	        s->discards, s->replays, s->sibling_restores, s->replay_failures,
	        lynx_prof_mib(s->replay_scratch_bytes));
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
	        " checked there, %" PRIu64 " refused (replayed on demand), %" PRIu64
	        " made at their use to hold the budget; %" PRIu64
	        " replays in windows, %.1f%% of all replays; %" PRIu64 " left to the guard\n",
	        tag, ex.n_windowed, ex.windows_checked, ex.windows_refused, s->windows_deferred,
	        s->window_replays,
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
	        "%s: executor: %" PRIu64 " iterations followed (%" PRIu64 " times lost, %" PRIu64
	        " host synchronisations and %" PRIu64
	        " missing calls passed over); of %zu scripted activations %u kept (%u of "
	        "them below a %zu KiB granule), %u offloaded "
	        "(%" PRIu64 " of them to hold the budget), %u planned for recompute; %u below "
	        "a granule evicted in %u packs\n",
	        tag, s.iterations, s.lost, s.syncs_passed, s.calls_missing, ex.script.n_buffers,
	        ex.planned[LYNX_EXEC_KEEP], ex.too_small, lynx_arena_granularity(ex.arena) / 1024,
	        ex.planned[LYNX_EXEC_OFFLOAD], s.promoted, ex.planned[LYNX_EXEC_RECOMPUTE],
	        ex.packed, ex.packing.n_packs);
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
	        " driver failures (%" PRIu64 " stream waits made by the host); %" PRIu64
	        " trims of the default pool (%.2f MiB given back); arena peak resident %.2f "
	        "MiB\n",
	        tag, s.prefetches, s.on_demand, s.prefetch_failures, s.waits, s.stalls,
	        s.budget_stalls, s.oom_waits, s.failures, s.host_waits, s.pool_trims,
	        lynx_prof_mib(s.pool_trimmed_bytes), lynx_prof_mib(arena.peak_resident_bytes));
	print_achieved(f, tag, &s);
	/* A budget not held, said at the default level: the job ended (or lost the iteration
	 * every time) before the executor could act. */
	if (!s.evictions)
		lynx_warn("recompute mode: the executor evicted nothing before the process ended "
		          "(%" PRIu64 " iterations followed, %" PRIu64 " times lost): %s",
		          s.iterations, s.lost,
		          s.iterations ? "no planned eviction took place"
		          : s.lost ? "the iterations after warm-up never matched the learned one"
		                   : "the job ended before a whole iteration after warm-up");
}

int lynx_exec_write_trace(const char *path, int rank)
{
	static const char *const names[] = {
#define LYNX_EXEC_EVENT_NAME(id, name) name,
	        LYNX_EXEC_EVENTS(LYNX_EXEC_EVENT_NAME)
#undef LYNX_EXEC_EVENT_NAME
	};
	struct lynx_atomic_file file;
	uint64_t origin;
	FILE *f;
	int err;

	if (!ex.ever_armed)
		return -ENOENT;
	if ((err = lynx_atomic_file_open(&file, path)))
		return err;
	f = file.f;
	pthread_mutex_lock(&ex.lock);
	origin = ex.n_traced ? ex.traced[0].start_ns : 0;
	/* The run id as a JSON string (escaped: an id is the launcher's, any printable text). */
	cJSON *id = cJSON_CreateString(ex.expect.run.known ? ex.expect.run.id : "");
	char *id_json = id ? cJSON_PrintUnformatted(id) : NULL;
	cJSON_Delete(id);
	fprintf(f,
	        "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"what\": \"Lynx executor, host "
	        "time\", \"run\": %s, \"world\": %d, \"actions_left_out\": %" PRIu64
	        "},\n\"traceEvents\": [\n"
	        "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, \"tid\": 0, "
	        "\"args\": {\"name\": \"rank %d executor\"}}",
	        id_json ? id_json : "null", ex.expect.world, ex.untraced, rank, rank);
	cJSON_free(id_json);
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
	return lynx_atomic_file_commit(&file); /* a write error shows in its ferror */
}

/* key: value where known, else null. */
static void add_number_or_null(cJSON *o, const char *key, bool known, double value)
{
	if (known)
		cJSON_AddNumberToObject(o, key, value);
	else
		cJSON_AddNullToObject(o, key);
}

/*
 * "curve": the last whole followed iteration's device memory in use (null when none was
 * followed to its end without an examination): its length and at most SUMMARY_CURVE points
 * [ns from its start, bytes], the largest sample of each stretch, so that the peak stays.
 * `lynx report` reads as many (tools/report_summary.h's LYNX_SUMMARY_MAX_CURVE).
 */
#define SUMMARY_CURVE 512
static void add_curve(cJSON *memory)
{
	const struct exec_curve *c = &ex.curves[ex.curve_now ^ 1];
	cJSON *curve, *points;

	pthread_mutex_lock(&ex.lock);
	if (!ex.curve_done || !(curve = cJSON_AddObjectToObject(memory, "curve"))) {
		if (!ex.curve_done)
			cJSON_AddNullToObject(memory, "curve");
		pthread_mutex_unlock(&ex.lock);
		return;
	}
	cJSON_AddNumberToObject(curve, "iteration_ns", (double)(c->end_ns - c->start_ns));
	points = cJSON_AddArrayToObject(curve, "points");
	uint32_t stretches = c->n < SUMMARY_CURVE ? c->n : SUMMARY_CURVE;
	for (uint32_t k = 0; points && k < stretches; k++) {
		uint32_t from = (uint32_t)((uint64_t)k * c->n / stretches);
		uint32_t to = (uint32_t)((uint64_t)(k + 1) * c->n / stretches), best = from;
		for (uint32_t i = from; i < to; i++)
			best = c->bytes[i] > c->bytes[best] ? i : best;
		const double pair[2] = {(double)(c->t_ns[best] - c->start_ns),
		                        (double)c->bytes[best]};
		cJSON_AddItemToArray(points, cJSON_CreateDoubleArray(pair, 2));
	}
	pthread_mutex_unlock(&ex.lock);
}

/* "run": the job's identity, as its profile names it (profile.h's run), and its world
 * size: readers keep one run's files apart from another's in a reused directory. */
static void add_run(cJSON *root, const struct lynx_exec_expectation *e)
{
	cJSON *run = cJSON_AddObjectToObject(root, "run");

	if (!run)
		return;
	if (e->run.known && e->run.id[0])
		cJSON_AddStringToObject(run, "id", e->run.id);
	else
		cJSON_AddNullToObject(run, "id");
	cJSON_AddStringToObject(
	        run, "source", e->run.known ? lynx_profile_run_source_name(e->run.source) : "none");
	cJSON_AddNumberToObject(run, "started", (double)e->run.started);
	cJSON_AddNumberToObject(run, "world", e->world);
}

int lynx_exec_write_summary(const char *path, int rank)
{
	const struct lynx_exec_expectation *e = &ex.expect;
	struct lynx_exec_stats s;
	cJSON *root, *o, *refused;
	int err = -ENOMEM;

	if (!ex.ever_armed)
		return -ENOENT;
	lynx_exec_stats(&s);
	if (!(root = cJSON_CreateObject()))
		return -ENOMEM;
	cJSON_AddStringToObject(root, "format", "lynx-summary");
	cJSON_AddNumberToObject(root, "version", 1);
	cJSON_AddNumberToObject(root, "rank", rank);
	add_run(root, e);
	o = cJSON_AddObjectToObject(root, "plan");
	if (o) {
		cJSON_AddStringToObject(o, "planner", e->planner);
		cJSON_AddNumberToObject(o, "budget_bytes", (double)e->budget_bytes);
		char hash[20];
		snprintf(hash, sizeof(hash), "%016" PRIx64, ex.plan_hash);
		cJSON_AddStringToObject(o, "hash", hash);
		if (e->max_slowdown > 0)
			cJSON_AddStringToObject(o, "max_slowdown", e->max_slowdown_text);
		else
			cJSON_AddNullToObject(o, "max_slowdown");
		cJSON *d = cJSON_AddObjectToObject(o, "decisions");
		if (d) {
			cJSON_AddNumberToObject(d, "keep", ex.planned[LYNX_EXEC_KEEP]);
			cJSON_AddNumberToObject(d, "offload", ex.planned[LYNX_EXEC_OFFLOAD]);
			cJSON_AddNumberToObject(d, "recompute", ex.planned[LYNX_EXEC_RECOMPUTE]);
			cJSON_AddNumberToObject(d, "offloaded_to_hold_budget", (double)s.promoted);
			cJSON_AddNumberToObject(d, "windows_deferred_to_hold_budget",
			                        (double)s.windows_deferred);
			cJSON_AddNumberToObject(d, "kept_below_granule", ex.too_small);
			cJSON_AddNumberToObject(d, "packed", ex.packed);
			cJSON_AddNumberToObject(d, "packs", ex.packing.n_packs);
		}
	}
	if ((o = cJSON_AddObjectToObject(root, "memory"))) {
		cJSON_AddNumberToObject(o, "measured_peak_bytes", (double)e->measured_peak_bytes);
		cJSON_AddNumberToObject(o, "predicted_peak_bytes", (double)e->predicted_peak_bytes);
		add_number_or_null(o, "followed_peak_bytes", ex.followed_known,
		                   (double)ex.followed_peak_bytes);
		cJSON_AddNumberToObject(o, "achieved_peak_bytes", (double)s.peak_used_bytes);
		add_curve(o);
	}
	if ((o = cJSON_AddObjectToObject(root, "step"))) {
		cJSON_AddNumberToObject(o, "measured_ns", (double)e->measured_iteration_ns);
		cJSON_AddNumberToObject(o, "predicted_slowdown", e->predicted_slowdown);
		/* The plan as followed (null: followed as planned, or not predicted). */
		add_number_or_null(o, "followed_slowdown", ex.followed_known, ex.followed_slowdown);
		cJSON_AddNumberToObject(o, "not_as_planned", ex.deviations);
		add_number_or_null(o, "achieved_ns", s.timed_iterations, (double)s.iteration_ns);
		cJSON_AddNumberToObject(o, "timed_iterations", (double)s.timed_iterations);
	}
	if ((o = cJSON_AddObjectToObject(root, "evictions"))) {
		cJSON_AddNumberToObject(o, "offloaded", (double)(s.evictions - s.discards));
		cJSON_AddNumberToObject(o, "replayed", (double)s.discards);
		cJSON_AddNumberToObject(o, "bytes", (double)s.evicted_bytes);
		cJSON_AddNumberToObject(o, "peak_bytes", (double)s.peak_evicted_bytes);
	}
	if ((o = cJSON_AddObjectToObject(root, "replay"))) {
		cJSON_AddNumberToObject(o, "reproduces",
		                        (double)ex.verdicts[LYNX_REPLAY_REPRODUCES]);
		refused = cJSON_AddArrayToObject(o, "refused");
		for (int v = 0; refused && v < LYNX_REPLAY_VERDICT_COUNT; v++) {
			cJSON *r;
			if (v == LYNX_REPLAY_REPRODUCES || !ex.verdicts[v] ||
			    !(r = cJSON_CreateObject()))
				continue;
			cJSON_AddStringToObject(r, "verdict", lynx_replay_verdict_name(v));
			cJSON_AddNumberToObject(r, "count", (double)ex.verdicts[v]);
			cJSON_AddStringToObject(r, "first", ex.verdict_reason[v]);
			cJSON_AddItemToArray(refused, r);
		}
	}
	if ((o = cJSON_AddObjectToObject(root, "stats"))) {
#define LYNX_EXEC_STAT(field, meaning) cJSON_AddNumberToObject(o, #field, (double)s.field);
		LYNX_EXEC_STATS
#undef LYNX_EXEC_STAT
	}
	char *text = cJSON_Print(root);
	if (text)
		err = lynx_atomic_file_write(path, text);
	free(text);
	cJSON_Delete(root);
	return err;
}

void lynx_exec_after_fork(void)
{
	/* The parent's CUDA objects are not the child's; its memory is ours to drop. The child
	 * was never armed: its exit prints and writes nothing of the parent's executor (whose
	 * arena it no longer has). */
	atomic_store(&lynx_exec_armed, false);
	ex.ever_armed = false;
	atomic_store(&attention, 0);
	lynx_slow_path_switch(LYNX_SLOW_GUARD, false);
	pthread_mutex_init(&ex.lock, NULL);
	ex.by_addr = NULL;
	ex.packs_by_base = NULL;
	ex.polled = NULL;
	ex.arena = NULL;
	free(ex.traced);
	ex.traced = NULL;
	ex.n_traced = 0;
	free_script();
}
