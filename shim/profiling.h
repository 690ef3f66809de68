/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The online profiler: what liblynx.so learns in process during warm-up, and the files it
 * writes into LYNX_OUT.
 *
 * From the first intercepted call, every drained event is also kept in memory (a trace in
 * arrival order, profiler/event.h) and stream-ordered work is timed on the device
 * (timing.h): every launch, copy, memset and NCCL call until two identical iterations are
 * confirmed (the kernel-level sample), then NCCL calls only. Whenever the trainer synchronises with
 * the device (a natural iteration boundary, and off the launch path) and the trace has grown by a
 * quarter since the last look, the profiler looks for the iteration (profiler/period.h). Once it
 * has seen LYNX_WARMUP identical iterations of a period that still held after the trace grew by
 * half since that period was first found (a micro-batch repeats long before an iteration
 * does), it stops timing and collecting, resolves the timing
 * marks, builds the profile (profiler/build.h) and writes profile.<rank>.json and the
 * warm-up's timeline as trace.<rank>.json (profiler/chrome_trace.h). If the
 * device has not reached every mark yet, it tries again at the next synchronisation (a few
 * times, then goes on with what is resolved) rather than wait. At exit, a run whose
 * warm-up never completed gets a profile of the iterations it did see (at least two), and
 * the stderr summary is printed.
 *
 * Costs, all within warm-up: two event records per timed call (timing.h), one drain and
 * a period search at some synchronisations (the search is linear in the events times the
 * candidate periods), and the events' memory (about 200 bytes each plus launch parameter
 * bytes). After warm-up the consumer drops events at once.
 *
 * Thread safety: consume runs on the recorder's draining thread (one at a time); at_sync
 * on any trainer thread (one looks at a time, the others return at once); start, at_exit
 * and after_fork where lifecycle.c calls them.
 */
#ifndef LYNX_PROFILING_H
#define LYNX_PROFILING_H

#include <stdbool.h>

#include "config.h"
#include "event.h"
#include "recorder.h"

/* Sets up collection and timing for cfg (profile and recompute modes, LYNX_WARMUP > 0);
 * output_ok: LYNX_OUT is writable. Returns whether the profiler is on, and so wants events.
 * Problems are logged once; Lynx then goes on without the profile. */
bool lynx_profiling_start(const struct lynx_config *cfg, bool output_ok);

/* The recorder's consumer side: keeps the event while learning. */
void lynx_profiling_consume(const struct lynx_event *event);

/* The recorder's event as the profiler sees it (profiler/event.h); a launch's parameter
 * bytes are not copied: out points into ev. The executor tokenises live calls with it. */
void lynx_profiling_event_view(const struct lynx_event *ev, struct lynx_prof_event *out);

/* Before the program's timed stream work during warm-up (lifecycle.c's timing path), in
 * recompute mode: notes the device memory in use (cuMemGetInfo), for the planning budget. */
void lynx_profiling_sample_memory(void);

/* After a top-level host synchronisation by the trainer. */
void lynx_profiling_at_sync(void);

/* At exit, after the recorder's last drain: finishes an incomplete warm-up if it can, and
 * prints the summary. */
void lynx_profiling_at_exit(void);

/* Around fork: the trace's lock is held across it, so that a child never inherits a trace
 * half-way through a change. before_fork takes it; after_fork_in_parent releases it;
 * after_fork (the child) starts over: the parent's events and timing events are not the
 * child's, and a child of a process done learning does not learn. */
void lynx_profiling_before_fork(void);
void lynx_profiling_after_fork_in_parent(void);
void lynx_profiling_after_fork(void);
/* A forked child's own LYNX_OUT (a pattern with %p): where it writes from now on. */
void lynx_profiling_set_output(const char *out_dir, bool output_ok);

#endif /* LYNX_PROFILING_H */
