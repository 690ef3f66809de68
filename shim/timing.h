/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device-side timing from CUDA events ("marks"). While the profiler learns, each timed
 * call gets a mark recorded on its stream just before it is issued (its start) and one
 * just after (its end). Later, from a thread that may wait, every mark is resolved to
 * nanoseconds on one per-process timeline: cuEventElapsedTime from the first mark, which
 * is valid across the streams of a device. So starts and ends on different streams
 * compare directly.
 *
 * A start mark completes when the work queued ahead of it on its stream does, which is when
 * the timed call's work begins; on an idle stream it completes at once, so the interval
 * then also holds the launch's latency (tests/shim/test_timing.c shows both).
 *
 * Precision: cuEventElapsedTime answers float milliseconds (about 0.5 us resolution on
 * NVIDIA GPUs). A mark is resolved against the first mark of its chunk of 256, and chunks'
 * anchors against each other, summed in integer ns, so a mark's precision is that of a short
 * interval, not of its distance from the first mark (a float of 60 s in ms has 4 us steps).
 *
 * Cost: recording a mark is one cuEventRecord (a few microseconds of host time on a real
 * GPU, one API call of virtual time on simgpu); events are created 256 at a time, on the
 * timed call that needs the first of them.
 * Timing is on only during warm-up (profiling.h).
 *
 * The module never links libcuda: the driver functions come in a table (the shim passes
 * its real-function table; tests pass simgpu's). Marks are numbered from 1; 0 means "no
 * mark". Thread safety: lynx_timing_reserve and lynx_timing_record may be called from any
 * thread at once (an atomic counter; chunks are created under a mutex, off the common
 * path); resolve and release from one thread at a time.
 */
#ifndef LYNX_TIMING_H
#define LYNX_TIMING_H

#include <cuda.h>
#include <stdint.h>

struct lynx_timing_driver {
	CUresult (*event_create)(CUevent *event, unsigned int flags);
	CUresult (*event_record)(CUevent event, CUstream stream);
	CUresult (*event_elapsed)(float *ms, CUevent start, CUevent end);
	CUresult (*event_destroy)(CUevent event);
};

/* Prepares room for up to max_marks marks. Returns 0, -EINVAL or -ENOMEM. A second call
 * releases what the first made. */
int lynx_timing_init(const struct lynx_timing_driver *driver, uint32_t max_marks);

/* A new mark's number, not yet recorded; 0 when all are used or an event cannot be made. */
uint32_t lynx_timing_reserve(void);

/* Records mark on stream now. Returns 0, or -EIO when the driver refused (the mark then
 * stays unresolved). */
int lynx_timing_record(uint32_t mark, CUstream stream);

/* lynx_timing_reserve then lynx_timing_record; 0 on any failure. */
uint32_t lynx_timing_mark(CUstream stream);

/*
 * The mark's time in ns from mark 1 (negative when another thread recorded it before mark
 * 1: callers shift the timeline to their earliest mark). Returns 0; -EAGAIN while the device has
 * not reached it (or the first mark) yet; -ENOENT for a mark that was never recorded or is out of
 * range; -EIO when the driver fails.
 */
int lynx_timing_resolve(uint32_t mark, int64_t *ns);

/* Marks handed out so far. */
uint32_t lynx_timing_used(void);

/* Hands out no more marks. Everything stays: a thread that reserved a mark just before may
 * still record it, and marks handed out can still be resolved. Safe from any thread. */
void lynx_timing_close(void);

/* Destroys every event and frees the bookkeeping. Only when no other thread can be timing
 * (the tests; the profiler closes instead). */
void lynx_timing_release(void);

/* In a forked child: forgets the parent's events without destroying them (they belong to
 * the parent's context) and frees the bookkeeping. */
void lynx_timing_forget(void);

#endif /* LYNX_TIMING_H */
