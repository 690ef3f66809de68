/* SPDX-License-Identifier: Apache-2.0 */
/* Virtual time: the host clock, streams, events, and the placement of work on resources. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define STREAM_MAGIC 0x57AE
#define EVENT_MAGIC 0xE7E7
#define PPM 1000000ull

static __thread struct CUstream_st *thread_default_stream;
static __thread size_t thread_virtual_bytes;
static __thread bool thread_has_virtual_bytes;

void host_advance_to(uint64_t t)
{
	uint64_t now = atomic_load(&simgpu.host_now);

	while (now < t && !atomic_compare_exchange_weak(&simgpu.host_now, &now, t))
		;
}

SIMGPU_EXPORT uint64_t simgpu_now_ns(void)
{
	return atomic_load(&simgpu.host_now);
}

uint64_t simgpu_host_now_locked(void)
{
	return atomic_load(&simgpu.host_now);
}

uint64_t transfer_ns(uint64_t bytes, uint64_t bytes_per_s)
{
	unsigned __int128 ns = (unsigned __int128)bytes * SIMGPU_NS_PER_S + bytes_per_s - 1;

	return (uint64_t)(ns / bytes_per_s);
}

/* ---- Streams -------------------------------------------------------------------------- */

static bool blocking(const struct CUstream_st *s)
{
	return !s->legacy && !(s->flags & CU_STREAM_NON_BLOCKING);
}

/*
 * Earliest start of the next work on a stream. The legacy default stream waits for all
 * blocking streams, and blocking streams wait for the legacy stream: CUDA's implicit
 * synchronisation. Per-thread default streams are ordinary blocking streams.
 */
uint64_t sched_ready_locked(const struct CUstream_st *stream)
{
	uint64_t ready = stream->tail;

	if (stream->legacy) {
		for (struct CUstream_st *s = simgpu.streams; s; s = s->next)
			if (blocking(s) && s->tail > ready)
				ready = s->tail;
	} else if (blocking(stream) && simgpu.legacy_stream.tail > ready) {
		ready = simgpu.legacy_stream.tail;
	}
	return ready;
}

static struct CUstream_st *stream_new_locked(unsigned int flags, int priority)
{
	struct CUstream_st *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->magic = STREAM_MAGIC;
	s->id = simgpu.next_stream_id++;
	s->flags = flags;
	s->priority = priority;
	s->tail = atomic_load(&simgpu.host_now);
	s->next = simgpu.streams;
	simgpu.streams = s;
	return s;
}

static bool stream_live_locked(const struct CUstream_st *stream)
{
	for (struct CUstream_st *s = simgpu.streams; s; s = s->next)
		if (s == stream)
			return true;
	return false;
}

/* Looks a handle up among the live streams: O(streams), which stay few. */
SIMGPU_EXPORT struct CUstream_st *simgpu_stream_get(CUstream handle, bool per_thread)
{
	struct CUstream_st *found = NULL;

	if (handle == CU_STREAM_LEGACY || (!handle && !per_thread))
		return &simgpu.legacy_stream;
	simgpu_core_lock();
	if (handle == CU_STREAM_PER_THREAD || !handle) {
		/* The thread's default stream lives as long as the process. */
		if (!thread_default_stream)
			thread_default_stream = stream_new_locked(0, 0);
		found = thread_default_stream;
	} else if (stream_live_locked(handle)) {
		found = handle;
	}
	simgpu_core_unlock();
	return found;
}

SIMGPU_EXPORT void simgpu_stream_priority_range(int *least, int *greatest)
{
	/* H100/H200 report 0 (lowest) to -5 (highest). */
	*least = 0;
	*greatest = -5;
}

SIMGPU_EXPORT CUresult simgpu_stream_create(struct CUstream_st **out, unsigned int flags,
                                            int priority)
{
	if (!out || (flags & ~(unsigned int)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	if (priority > 0)
		priority = 0;
	if (priority < -5)
		priority = -5;
	simgpu_core_lock();
	*out = stream_new_locked(flags, priority);
	simgpu_core_unlock();
	return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* As in CUDA, destroying a stream with work queued lets that work finish. A capturing
 * stream is not destroyed: its capture is invalidated (it must still be ended). */
SIMGPU_EXPORT CUresult simgpu_stream_destroy(struct CUstream_st *stream)
{
	CUresult status = CUDA_ERROR_INVALID_HANDLE;

	simgpu_core_lock();
	for (struct CUstream_st **link = &simgpu.streams; *link; link = &(*link)->next) {
		if (*link != stream || stream->legacy || stream == thread_default_stream)
			continue;
		if (stream->capture) {
			capture_invalidate_locked(stream->capture);
			status = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
			break;
		}
		*link = stream->next;
		stream->magic = 0;
		free(stream);
		status = CUDA_SUCCESS;
		break;
	}
	simgpu_core_unlock();
	return status;
}

void sched_host_wait_locked(uint64_t t)
{
	host_advance_to(t);
	effects_apply_until_locked(atomic_load(&simgpu.host_now));
}

SIMGPU_EXPORT CUresult simgpu_stream_synchronize(struct CUstream_st *stream)
{
	simgpu_core_lock();
	CUresult status = capture_admit_locked(stream, CAPTURE_REFUSE);
	if (status == CUDA_SUCCESS)
		sched_host_wait_locked(stream->tail);
	simgpu_core_unlock();
	return status;
}

/* Applies what has completed by the host clock; the answer is about the stream alone. */
static CUresult query_locked(uint64_t done_at)
{
	uint64_t now = atomic_load(&simgpu.host_now);

	effects_apply_until_locked(now);
	return done_at <= now ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SIMGPU_EXPORT CUresult simgpu_stream_query(struct CUstream_st *stream)
{
	simgpu_core_lock();
	CUresult status = capture_admit_locked(stream, CAPTURE_REFUSE);
	if (status == CUDA_SUCCESS)
		status = query_locked(stream->tail);
	simgpu_core_unlock();
	return status;
}

void sched_stream_wait_locked(struct CUstream_st *stream, uint64_t t)
{
	if (t > stream->tail)
		stream->tail = t;
}

SIMGPU_EXPORT CUresult simgpu_stream_wait_event(struct CUstream_st *stream,
                                                struct CUevent_st *event)
{
	simgpu_core_lock();
	CUresult status = capture_admit_locked(stream, CAPTURE_RECORD);
	/* A never-recorded event is complete: waiting on it is a no-op, as in CUDA. */
	if (status == CUDA_SUCCESS && !capture_stream_wait_locked(stream, event, &status) &&
	    event->recorded)
		sched_stream_wait_locked(stream, event->time);
	simgpu_core_unlock();
	return status;
}

SIMGPU_EXPORT int simgpu_stream_priority(const struct CUstream_st *stream)
{
	return stream->priority;
}

SIMGPU_EXPORT unsigned int simgpu_stream_flags(const struct CUstream_st *stream)
{
	return stream->flags;
}

uint64_t sched_device_tail_locked(void)
{
	uint64_t tail = 0;

	for (struct CUstream_st *s = simgpu.streams; s; s = s->next)
		if (s->tail > tail)
			tail = s->tail;
	return tail;
}

SIMGPU_EXPORT CUresult simgpu_ctx_synchronize(void)
{
	simgpu_core_lock();
	CUresult status = capture_check_unsafe_locked();
	if (status == CUDA_SUCCESS)
		sched_host_wait_locked(sched_device_tail_locked());
	simgpu_core_unlock();
	return status;
}

/* ---- Events --------------------------------------------------------------------------- */

SIMGPU_EXPORT struct CUevent_st *simgpu_event_get(CUevent handle)
{
	struct CUevent_st *found = NULL;

	simgpu_core_lock();
	for (struct CUevent_st *e = simgpu.events; e && !found; e = e->next)
		if (e == handle)
			found = e;
	simgpu_core_unlock();
	return found;
}

SIMGPU_EXPORT CUresult simgpu_event_create(struct CUevent_st **out, unsigned int flags)
{
	const unsigned int known =
	        CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;

	if (!out || (flags & ~known))
		return CUDA_ERROR_INVALID_VALUE;
	struct CUevent_st *e = calloc(1, sizeof(*e));
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->magic = EVENT_MAGIC;
	e->flags = flags;
	simgpu_core_lock();
	e->next = simgpu.events;
	simgpu.events = e;
	simgpu_core_unlock();
	*out = e;
	return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult simgpu_event_destroy(struct CUevent_st *event)
{
	CUresult status = CUDA_ERROR_INVALID_HANDLE;

	simgpu_core_lock();
	for (struct CUevent_st **link = &simgpu.events; *link; link = &(*link)->next) {
		if (*link != event)
			continue;
		*link = event->next;
		capture_event_forget_locked(event);
		event->magic = 0;
		free(event);
		status = CUDA_SUCCESS;
		break;
	}
	simgpu_core_unlock();
	return status;
}

/* The event completes when the stream reaches it: after the work queued before it, and
 * not before the host recorded it. On a capturing stream it stands for the stream's
 * captured work instead, and nothing is queued. */
SIMGPU_EXPORT CUresult simgpu_event_record(struct CUevent_st *event, struct CUstream_st *stream)
{
	simgpu_core_lock();
	CUresult status = capture_admit_locked(stream, CAPTURE_RECORD);
	if (status != CUDA_SUCCESS || stream->capture) {
		if (status == CUDA_SUCCESS)
			status = capture_event_record_locked(event, stream);
		simgpu_core_unlock();
		return status;
	}
	capture_event_forget_locked(event);
	uint64_t t = sched_ready_locked(stream);
	uint64_t now = atomic_load(&simgpu.host_now);
	if (now > t)
		t = now;
	stream->tail = t;
	event->recorded = true;
	event->time = t;
	simgpu_core_unlock();
	return CUDA_SUCCESS;
}

/* An event last recorded in an open capture stands for work that never runs: querying,
 * waiting for or timing it fails with CUDA_ERROR_CAPTURED_EVENT (the capture goes on). */
SIMGPU_EXPORT CUresult simgpu_event_query(struct CUevent_st *event)
{
	CUresult status = CUDA_ERROR_CAPTURED_EVENT;

	simgpu_core_lock();
	if (!event->capture)
		status = query_locked(event->recorded ? event->time : 0);
	simgpu_core_unlock();
	return status;
}

SIMGPU_EXPORT CUresult simgpu_event_synchronize(struct CUevent_st *event)
{
	CUresult status = CUDA_ERROR_CAPTURED_EVENT;

	simgpu_core_lock();
	if (!event->capture) {
		status = CUDA_SUCCESS;
		if (event->recorded)
			sched_host_wait_locked(event->time);
	}
	simgpu_core_unlock();
	return status;
}

SIMGPU_EXPORT CUresult simgpu_event_elapsed(float *ms, struct CUevent_st *start,
                                            struct CUevent_st *end)
{
	CUresult status = CUDA_SUCCESS;

	if (!ms)
		return CUDA_ERROR_INVALID_VALUE;
	if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING)
		return CUDA_ERROR_INVALID_HANDLE;
	simgpu_core_lock();
	uint64_t now = atomic_load(&simgpu.host_now);
	if (start->capture || end->capture)
		status = CUDA_ERROR_CAPTURED_EVENT;
	else if (!start->recorded || !end->recorded || start->time > now || end->time > now)
		status = CUDA_ERROR_NOT_READY;
	else
		*ms = (float)((double)((int64_t)(end->time - start->time)) / 1e6);
	simgpu_core_unlock();
	return status;
}

/* ---- Placing work ---------------------------------------------------------------------- */

static void timeline_prune(struct simgpu_timeline *tl, uint64_t before)
{
	size_t kept = 0;

	for (size_t i = 0; i < tl->count; i++)
		if (tl->items[i].end > before)
			tl->items[kept++] = tl->items[i];
	tl->count = kept;
}

static void timeline_add(struct simgpu_timeline *tl, uint64_t start, uint64_t end)
{
	if (end > tl->free_at)
		tl->free_at = end;
	if (end == start)
		return;
	if (tl->count == tl->cap) {
		size_t cap = tl->cap ? 2 * tl->cap : 64;
		struct simgpu_interval *items = realloc(tl->items, cap * sizeof(*items));
		if (!items)
			return; /* the interval only shapes later overlaps; dropping it is safe */
		tl->items = items;
		tl->cap = cap;
	}
	tl->items[tl->count++] = (struct simgpu_interval){start, end};
}

static unsigned int active_at(const struct simgpu_timeline *tl, uint64_t t)
{
	unsigned int n = 0;

	for (size_t i = 0; i < tl->count; i++)
		if (tl->items[i].start <= t && t < tl->items[i].end)
			n++;
	return n;
}

/* The next instant after t at which an interval of tl starts or ends. */
static uint64_t next_change(const struct simgpu_timeline *tl, uint64_t t, uint64_t limit)
{
	for (size_t i = 0; i < tl->count; i++) {
		if (tl->items[i].start > t && tl->items[i].start < limit)
			limit = tl->items[i].start;
		if (tl->items[i].end > t && tl->items[i].end < limit)
			limit = tl->items[i].end;
	}
	return limit;
}

/* Speed of compute at t, in parts per million of full speed. */
static uint64_t compute_rate(uint64_t t)
{
	const struct simgpu_config *c = &simgpu.config;
	uint64_t rate = PPM;
	unsigned int overlapped = active_at(&simgpu.timelines[SIMGPU_RES_COMPUTE], t);

	for (unsigned int i = 0; i < overlapped && rate; i++)
		rate = rate * c->concurrent_share_pct / 100;
	if (active_at(&simgpu.timelines[SIMGPU_RES_NET], t))
		rate = rate * 100 / c->overlap_slowdown_pct;
	return rate;
}

/*
 * Walks time forward from `ready`, piecewise at constant speed, until `work_ns` of
 * full-speed work is done. Earlier bookings keep their times; the newcomer adapts.
 * O(k^2) in the k intervals still live, which stay few (they are pruned at the host
 * clock).
 */
static uint64_t place_compute(uint64_t ready, uint64_t work_ns, uint64_t *start_out)
{
	const struct simgpu_timeline *compute = &simgpu.timelines[SIMGPU_RES_COMPUTE];
	const struct simgpu_timeline *net = &simgpu.timelines[SIMGPU_RES_NET];
	unsigned __int128 remaining = (unsigned __int128)work_ns * PPM;
	uint64_t t = ready;
	bool started = false;

	*start_out = ready;
	if (!work_ns)
		return ready;
	for (;;) {
		uint64_t rate = compute_rate(t);
		uint64_t next = next_change(net, t, next_change(compute, t, UINT64_MAX));

		if (rate && !started) {
			*start_out = t;
			started = true;
		}
		if (rate) {
			unsigned __int128 span = (unsigned __int128)(next - t) * rate;
			if (next == UINT64_MAX || remaining <= span)
				return t + (uint64_t)((remaining + rate - 1) / rate);
			remaining -= span;
		}
		t = next;
	}
}

uint64_t sched_book_locked(struct CUstream_st *stream, enum simgpu_resource res, uint64_t work_ns,
                           const char *name, uint64_t *start_out)
{
	struct simgpu_timeline *tl = &simgpu.timelines[res];
	uint64_t now = atomic_load(&simgpu.host_now);
	uint64_t ready = sched_ready_locked(stream);
	uint64_t start, end;

	if (now > ready)
		ready = now;
	for (int r = 0; r < SIMGPU_RES_COUNT; r++)
		timeline_prune(&simgpu.timelines[r], now);
	if (res == SIMGPU_RES_COMPUTE) {
		end = place_compute(ready, work_ns, &start);
	} else {
		/* Copy engines and the link serve one operation at a time, in issue order. */
		start = res == SIMGPU_RES_NONE || ready >= tl->free_at ? ready : tl->free_at;
		end = start + work_ns;
	}
	if (res != SIMGPU_RES_NONE)
		timeline_add(tl, start, end);
	stream->tail = end;
	trace_slice_locked(name, stream->id, res, start, end);
	if (start_out)
		*start_out = start;
	return end;
}

/* ---- Communication, for the NCCL layer -------------------------------------------------- */

SIMGPU_EXPORT uint64_t simgpu_comm_arrival_locked(struct CUstream_st *stream)
{
	uint64_t arrival = sched_ready_locked(stream);
	uint64_t now = atomic_load(&simgpu.host_now);
	uint64_t link_free = simgpu.timelines[SIMGPU_RES_NET].free_at;

	if (now > arrival)
		arrival = now;
	return link_free > arrival ? link_free : arrival;
}

SIMGPU_EXPORT void simgpu_comm_book_locked(struct CUstream_st *stream, uint64_t start, uint64_t end,
                                           const char *name, void (*effect)(void *arg), void *arg)
{
	timeline_prune(&simgpu.timelines[SIMGPU_RES_NET], atomic_load(&simgpu.host_now));
	timeline_add(&simgpu.timelines[SIMGPU_RES_NET], start, end);
	sched_stream_wait_locked(stream, end);
	trace_slice_locked(name, stream->id, SIMGPU_RES_NET, start, end);
	if (effect)
		effects_push_locked(end, effect, arg);
}

SIMGPU_EXPORT void simgpu_effects_apply_until_locked(uint64_t t)
{
	effects_apply_until_locked(t);
}

SIMGPU_EXPORT void simgpu_nccl_next_virtual_bytes(size_t bytes)
{
	thread_virtual_bytes = bytes;
	thread_has_virtual_bytes = true;
}

SIMGPU_EXPORT size_t simgpu_comm_take_virtual_bytes(size_t real_bytes)
{
	if (!thread_has_virtual_bytes)
		return real_bytes;
	thread_has_virtual_bytes = false;
	return thread_virtual_bytes;
}
