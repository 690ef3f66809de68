/* SPDX-License-Identifier: Apache-2.0 */
/* Device-side timing marks: see timing.h. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "timing.h"

/* Events are created this many at a time: one driver call each, all on the call that needs
 * the chunk's first mark. The first mark of each chunk is also the chunk's anchor: marks
 * are resolved against it (see resolve_anchor). */
#define CHUNK 256

enum chunk_state { CHUNK_NEW, CHUNK_READY, CHUNK_FAILED };

static struct lynx_timing_driver driver;
static CUevent *events;              /* one per mark; created chunk by chunk */
static _Atomic uint8_t *chunk_state; /* per chunk: enum chunk_state */
static _Atomic uint8_t *recorded;    /* per mark: cuEventRecord succeeded */
static int64_t *resolved_ns;         /* per mark, once resolved (resolve's caller only) */
static uint8_t *resolved;            /* per mark: resolved_ns holds its time */
static int64_t *anchor_ns;           /* per chunk: its anchor's time from mark 1 */
static uint8_t *anchor_known;        /* per chunk: anchor_ns holds it */
static _Atomic uint32_t max_marks;   /* 0 while closed: no mark is handed out */
static uint32_t capacity;            /* the arrays' length, while open or closed */
static _Atomic uint32_t next_mark = 1;
static pthread_mutex_t chunk_lock = PTHREAD_MUTEX_INITIALIZER;

static void free_bookkeeping(void)
{
	free(events);
	free((void *)chunk_state);
	free((void *)recorded);
	free(resolved_ns);
	free(resolved);
	free(anchor_ns);
	free(anchor_known);
	events = NULL;
	chunk_state = NULL;
	recorded = NULL;
	resolved_ns = NULL;
	resolved = NULL;
	anchor_ns = NULL;
	anchor_known = NULL;
	atomic_store(&max_marks, 0);
	capacity = 0;
	atomic_store(&next_mark, 1);
}

void lynx_timing_close(void)
{
	atomic_store(&max_marks, 0);
}

void lynx_timing_forget(void)
{
	pthread_mutex_init(&chunk_lock, NULL);
	free_bookkeeping();
}

void lynx_timing_release(void)
{
	for (uint32_t c = 0; events && driver.event_destroy && c * CHUNK < capacity; c++) {
		if (atomic_load(&chunk_state[c]) != CHUNK_READY)
			continue;
		for (uint32_t i = c * CHUNK; i < capacity && i < (c + 1) * CHUNK; i++)
			driver.event_destroy(events[i]);
	}
	free_bookkeeping();
}

int lynx_timing_init(const struct lynx_timing_driver *d, uint32_t marks)
{
	size_t chunks = marks / CHUNK + 1;

	lynx_timing_release();
	if (!d || !d->event_create || !d->event_record || !d->event_elapsed || !d->event_destroy ||
	    !marks)
		return -EINVAL;
	driver = *d;
	events = calloc(marks, sizeof(*events));
	chunk_state = calloc(chunks, sizeof(*chunk_state));
	recorded = calloc(marks, sizeof(*recorded));
	resolved_ns = calloc(marks, sizeof(*resolved_ns));
	resolved = calloc(marks, sizeof(*resolved));
	anchor_ns = calloc(chunks, sizeof(*anchor_ns));
	anchor_known = calloc(chunks, sizeof(*anchor_known));
	if (!events || !chunk_state || !recorded || !resolved_ns || !resolved || !anchor_ns ||
	    !anchor_known) {
		free_bookkeeping();
		return -ENOMEM;
	}
	capacity = marks;
	atomic_store(&max_marks, marks);
	return 0;
}

/* Creates the events of mark's chunk unless they exist. A chunk the driver refuses (part of
 * it is destroyed again) stays failed: its marks are never handed out. */
static bool ensure_chunk(uint32_t mark)
{
	uint32_t c = (mark - 1) / CHUNK, made = 0;
	uint8_t state = atomic_load_explicit(&chunk_state[c], memory_order_acquire);

	if (state != CHUNK_NEW)
		return state == CHUNK_READY;
	pthread_mutex_lock(&chunk_lock);
	if (atomic_load(&chunk_state[c]) == CHUNK_NEW) {
		uint32_t end = (c + 1) * CHUNK < capacity ? (c + 1) * CHUNK : capacity;
		for (uint32_t i = c * CHUNK; i < end; i++, made++)
			if (driver.event_create(&events[i], CU_EVENT_DEFAULT) != CUDA_SUCCESS)
				break;
		if (c * CHUNK + made < end) {
			for (uint32_t i = c * CHUNK; i < c * CHUNK + made; i++)
				driver.event_destroy(events[i]);
			atomic_store_explicit(&chunk_state[c], CHUNK_FAILED, memory_order_release);
		} else {
			atomic_store_explicit(&chunk_state[c], CHUNK_READY, memory_order_release);
		}
	}
	state = atomic_load(&chunk_state[c]);
	pthread_mutex_unlock(&chunk_lock);
	return state == CHUNK_READY;
}

uint32_t lynx_timing_reserve(void)
{
	uint32_t limit = atomic_load_explicit(&max_marks, memory_order_acquire), mark;

	if (!limit)
		return 0;
	mark = atomic_fetch_add_explicit(&next_mark, 1, memory_order_relaxed);
	if (mark == 0 || mark > limit) {
		/* Keep the counter from wrapping back into range. */
		atomic_store_explicit(&next_mark, limit + 1, memory_order_relaxed);
		return 0;
	}
	return ensure_chunk(mark) ? mark : 0;
}

/*
 * Recording needs only that the mark was handed out: after lynx_timing_close the arrays and
 * events stay, so a thread that reserved a mark just before may still record it (it is then
 * simply never resolved).
 */
int lynx_timing_record(uint32_t mark, CUstream stream)
{
	if (!mark || mark > capacity ||
	    atomic_load(&chunk_state[(mark - 1) / CHUNK]) != CHUNK_READY)
		return -ENOENT;
	CUresult r = driver.event_record(events[mark - 1], stream);
	if (r != CUDA_SUCCESS) {
		/* That call keeps the host's time instead; said once, like every failure. */
		char error[96];
		lynx_warn_once("timing: cuEventRecord failed (%s): calls whose mark is missing are "
		               "timed on the host",
		               lynx_cuda_error_text((int)r, error, sizeof(error)));
		return -EIO;
	}
	atomic_store_explicit(&recorded[mark - 1], 1, memory_order_release);
	return 0;
}

uint32_t lynx_timing_mark(CUstream stream)
{
	uint32_t mark = lynx_timing_reserve();

	return mark && !lynx_timing_record(mark, stream) ? mark : 0;
}

/* Elapsed ns from mark a to mark b, both recorded: 0, -EAGAIN or -EIO. */
static int elapsed(uint32_t a, uint32_t b, int64_t *ns)
{
	float ms = 0;
	CUresult r =
	        a == b ? CUDA_SUCCESS : driver.event_elapsed(&ms, events[a - 1], events[b - 1]);

	if (r == CUDA_ERROR_NOT_READY)
		return -EAGAIN;
	if (r != CUDA_SUCCESS)
		return -EIO;
	*ns = (int64_t)((double)ms * 1e6 + (ms < 0 ? -0.5 : 0.5));
	return 0;
}

/*
 * Chunk c's anchor (its first mark) on the timeline of mark 1, summed in integer ns from
 * anchor to anchor: each step is a float of a short interval, so a mark far from mark 1 keeps
 * float precision of its own chunk, not of the whole warm-up (a float of 60 s in ms has 4 us
 * steps). An anchor that was never recorded falls back to mark 1 directly.
 */
static int resolve_anchor(uint32_t c, int64_t *ns)
{
	uint32_t anchor = c * CHUNK + 1;
	int64_t step;
	int err;

	if (anchor_known[c]) {
		*ns = anchor_ns[c];
		return 0;
	}
	if (c == 0 || !atomic_load(&recorded[anchor - 1])) {
		err = atomic_load(&recorded[anchor - 1]) ? elapsed(1, anchor, &step) : -ENOENT;
	} else {
		int64_t previous;
		uint32_t p = c - 1;
		/* The nearest earlier recorded anchor. */
		while (p > 0 && !atomic_load(&recorded[p * CHUNK]))
			p--;
		err = resolve_anchor(p, &previous);
		if (!err)
			err = elapsed(p * CHUNK + 1, anchor, &step);
		if (!err)
			step += previous;
	}
	if (err)
		return err;
	anchor_ns[c] = step;
	anchor_known[c] = 1;
	*ns = step;
	return 0;
}

int lynx_timing_resolve(uint32_t mark, int64_t *ns)
{
	uint32_t c, anchor;
	int64_t base, offset;
	int err;

	if (!mark || mark > capacity || !atomic_load(&recorded[mark - 1]) ||
	    !atomic_load(&recorded[0]))
		return -ENOENT;
	if (resolved[mark - 1]) {
		*ns = resolved_ns[mark - 1];
		return 0;
	}
	c = (mark - 1) / CHUNK;
	anchor = c * CHUNK + 1;
	err = atomic_load(&recorded[anchor - 1]) ? resolve_anchor(c, &base) : -ENOENT;
	if (err == -EAGAIN) /* the anchor is not reached yet: nor, most likely, the mark */
		return err;
	if (!err) {
		err = elapsed(anchor, mark, &offset);
	} else { /* an anchor that was never recorded: straight from mark 1 */
		base = 0;
		err = elapsed(1, mark, &offset);
	}
	if (err)
		return err;
	resolved_ns[mark - 1] = base + offset;
	resolved[mark - 1] = 1;
	*ns = resolved_ns[mark - 1];
	return 0;
}

uint32_t lynx_timing_used(void)
{
	uint32_t next = atomic_load(&next_mark);

	return next - 1 < capacity ? next - 1 : capacity;
}
