/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The recorder: events from the hooks go into per-thread ring buffers, lock-free and
 * allocation-free on the hot path, and are drained off it by a background thread (and at
 * flush) into one consumer. A full ring drops the event and counts it; the producer never
 * blocks. Rings are allocated once per thread within a global budget; threads beyond it
 * are not recorded (counted).
 *
 * Thread safety: reserve/commit from any thread (each uses its own ring: single
 * producer); drain from one thread at a time (single consumer, serialised inside).
 */
#ifndef LYNX_RECORDER_H
#define LYNX_RECORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum lynx_event_kind {
#define LYNX_EVENT(id, name, payload) LYNX_EV_##id,
#include "events.def"
#undef LYNX_EVENT
	LYNX_EV_COUNT
};

/* The call was made inside another intercepted call on the same thread: a driver call
 * the CUDA runtime made while serving the trainer's runtime call. */
#define LYNX_EVENT_NESTED 0x80
/* The call returned while a stream was capturing a CUDA graph (lynx_capture_active(), on
 * any stream of the process, not necessarily this call's). Stream-ordered work issued to a
 * capturing stream is recorded like any call, but did not run: it runs at each launch of
 * the graph (cudaGraphLaunch). A successful begin-capture call carries the flag; the
 * end-capture call that closes the last capture does not. */
#define LYNX_EVENT_CAPTURED 0x40

/*
 * One event. Records are variable-length: `size` bytes in all, a multiple of 8, of which
 * the bytes after the struct are the payload (a launch's parameter bytes).
 */
struct lynx_event {
	uint32_t size;
	uint16_t hook;  /* the hook id (shim/hooks.def) */
	uint8_t kind;   /* enum lynx_event_kind */
	uint8_t flags;  /* kind-specific (see each payload) */
	uint32_t tid;   /* recording thread (gettid) */
	int32_t result; /* what the real function returned */
	/* Device timing marks (timing.h) around stream-ordered work while the profiler
	 * learns: recorded on the call's stream just before and just after it; 0: none. */
	uint32_t mark_start, mark_end;
	uint64_t host_ns; /* CLOCK_MONOTONIC at the call */
	uint64_t stream;  /* the stream handle, or 0 */
	union {
		struct {
			uint64_t ptr, bytes;
		} mem;
		struct {
			uint64_t dst, src, bytes;
			int32_t direction;
		} copy;
		struct {
			uint64_t function; /* CUfunction / CUkernel / host stub as launched */
			uint32_t grid[3], block[3], shared_mem;
			uint32_t param_count, param_bytes; /* payload: param_bytes packed bytes */
			/* Made with a launch config (cuLaunchKernelEx), with attr_count
			 * attributes: the payload holds them too (launch_attrs.h). */
			uint16_t attr_count;
			uint8_t config;
		} launch;
		struct {
			uint64_t handle; /* stream or event concerned */
		} sync;
		struct {
			uint64_t comm, sendbuf, recvbuf, count;
			int32_t datatype, op, peer, group_depth;
		} nccl;
	} u;
};

/* Sets the per-thread ring size and total budget (bytes). Call before the first reserve;
 * later calls are ignored. Returns 0. */
int lynx_recorder_configure(size_t ring_bytes, size_t budget_bytes);

/*
 * Room for an event with payload_bytes of payload in the calling thread's ring, or NULL
 * if the ring is full, the event is over half a ring, or the thread has no ring (the
 * drop is counted). Reserve sets size, tid and host_ns; the caller fills the rest and
 * commits before reserving again (a second reserve abandons the first). Commit rewrites
 * size, so assigning a whole struct is safe; committing NULL or twice does nothing.
 */
struct lynx_event *lynx_recorder_reserve(size_t payload_bytes);
void lynx_recorder_commit(struct lynx_event *event);

/* Called for every drained event, in each thread's order (threads interleave). */
typedef void (*lynx_event_consumer)(const struct lynx_event *event, void *arg);
void lynx_recorder_set_consumer(lynx_event_consumer consumer, void *arg);

/* Drains every ring into the consumer now; returns the events drained. */
size_t lynx_recorder_drain(void);
/* Starts the background thread that drains every interval_ms (idempotent). */
int lynx_recorder_start_drainer(unsigned int interval_ms);
/* Stops the drainer and drains what is left (at exit). */
void lynx_recorder_stop(void);

struct lynx_recorder_stats {
	uint64_t recorded, dropped, drained;
	uint32_t threads, threads_unrecorded;
};
void lynx_recorder_stats(struct lynx_recorder_stats *out);

/* In a forked child: forget the parent's rings and drainer (their threads are gone) and
 * reset the stats. The configuration is kept and may be changed again until the child's
 * first reserve. */
void lynx_recorder_after_fork(void);

#endif /* LYNX_RECORDER_H */
