/* SPDX-License-Identifier: Apache-2.0 */
/* Device-side timing marks: see timing.h. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "timing.h"

/* Events are created this many at a time: creating one costs a driver call, which would
 * otherwise land on the timed call's path. */
#define CHUNK 256

static struct lynx_timing_driver driver;
static CUevent *events;           /* max_marks of them; chunk by chunk */
static _Atomic bool *chunk_ready; /* per chunk: its events exist */
static _Atomic uint8_t *recorded; /* per mark: cuEventRecord succeeded */
static int64_t *resolved_ns;      /* per mark, once resolved (resolve's caller only) */
static uint8_t *resolved;         /* per mark: resolved_ns holds its time */
static uint32_t max_marks;
static _Atomic uint32_t next_mark = 1;
static pthread_mutex_t chunk_lock = PTHREAD_MUTEX_INITIALIZER;

static void free_bookkeeping(void)
{
	free(events);
	free((void *)chunk_ready);
	free((void *)recorded);
	free(resolved_ns);
	free(resolved);
	events = NULL;
	chunk_ready = NULL;
	recorded = NULL;
	resolved_ns = NULL;
	resolved = NULL;
	max_marks = 0;
	atomic_store(&next_mark, 1);
}

void lynx_timing_forget(void)
{
	pthread_mutex_init(&chunk_lock, NULL);
	free_bookkeeping();
}

void lynx_timing_release(void)
{
	if (events && driver.event_destroy) {
		for (uint32_t c = 0; c * CHUNK < max_marks; c++) {
			if (!atomic_load(&chunk_ready[c]))
				continue;
			for (uint32_t i = c * CHUNK; i < max_marks && i < (c + 1) * CHUNK; i++)
				if (events[i])
					driver.event_destroy(events[i]);
		}
	}
	free_bookkeeping();
}

int lynx_timing_init(const struct lynx_timing_driver *d, uint32_t marks)
{
	lynx_timing_release();
	if (!d || !d->event_create || !d->event_record || !d->event_elapsed || !d->event_destroy ||
	    !marks)
		return -EINVAL;
	driver = *d;
	events = calloc(marks, sizeof(*events));
	chunk_ready = calloc(marks / CHUNK + 1, sizeof(*chunk_ready));
	recorded = calloc(marks, sizeof(*recorded));
	resolved_ns = calloc(marks, sizeof(*resolved_ns));
	resolved = calloc(marks, sizeof(*resolved));
	if (!events || !chunk_ready || !recorded || !resolved_ns || !resolved) {
		lynx_timing_release();
		return -ENOMEM;
	}
	max_marks = marks;
	return 0;
}

/* Creates the events of mark's chunk unless they exist. False when the driver refuses. */
static bool ensure_chunk(uint32_t mark)
{
	uint32_t c = (mark - 1) / CHUNK;
	bool ok = true;

	if (atomic_load_explicit(&chunk_ready[c], memory_order_acquire))
		return true;
	pthread_mutex_lock(&chunk_lock);
	if (!atomic_load(&chunk_ready[c])) {
		for (uint32_t i = c * CHUNK; i < max_marks && i < (c + 1) * CHUNK && ok; i++)
			ok = driver.event_create(&events[i], CU_EVENT_DEFAULT) == CUDA_SUCCESS;
		if (ok)
			atomic_store_explicit(&chunk_ready[c], true, memory_order_release);
	}
	pthread_mutex_unlock(&chunk_lock);
	return ok;
}

uint32_t lynx_timing_reserve(void)
{
	uint32_t mark;

	if (!max_marks)
		return 0;
	mark = atomic_fetch_add_explicit(&next_mark, 1, memory_order_relaxed);
	if (mark == 0 || mark > max_marks) {
		/* Keep the counter from wrapping back into range. */
		atomic_store_explicit(&next_mark, max_marks + 1, memory_order_relaxed);
		return 0;
	}
	return ensure_chunk(mark) ? mark : 0;
}

int lynx_timing_record(uint32_t mark, CUstream stream)
{
	if (!mark || mark > max_marks)
		return -ENOENT;
	if (driver.event_record(events[mark - 1], stream) != CUDA_SUCCESS)
		return -EIO;
	atomic_store_explicit(&recorded[mark - 1], 1, memory_order_release);
	return 0;
}

uint32_t lynx_timing_mark(CUstream stream)
{
	uint32_t mark = lynx_timing_reserve();

	return mark && !lynx_timing_record(mark, stream) ? mark : 0;
}

int lynx_timing_resolve(uint32_t mark, int64_t *ns)
{
	float ms = 0;
	CUresult r;

	if (!mark || mark > max_marks || !atomic_load(&recorded[mark - 1]) ||
	    !atomic_load(&recorded[0]))
		return -ENOENT;
	if (resolved[mark - 1]) {
		*ns = resolved_ns[mark - 1];
		return 0;
	}
	/* One driver call per mark, then cached: a mark the device has not reached answers
	 * CUDA_ERROR_NOT_READY. */
	r = mark == 1 ? CUDA_SUCCESS : driver.event_elapsed(&ms, events[0], events[mark - 1]);
	if (r == CUDA_ERROR_NOT_READY)
		return -EAGAIN;
	if (r != CUDA_SUCCESS)
		return -EIO;
	resolved_ns[mark - 1] = (int64_t)((double)ms * 1e6 + (ms < 0 ? -0.5 : 0.5));
	resolved[mark - 1] = 1;
	*ns = resolved_ns[mark - 1];
	return 0;
}

uint32_t lynx_timing_used(void)
{
	uint32_t next = atomic_load(&next_mark);

	return next - 1 < max_marks ? next - 1 : max_marks;
}
