/* SPDX-License-Identifier: Apache-2.0 */
/*
 * State shared by the core's own files (config, counters, scheduler, effects, memory,
 * kernels, trace). Nothing outside tests/simgpu/core includes this.
 *
 * Locking: `simgpu.lock` guards everything here except the atomics (the host clock and
 * the counters), which simgpu_api_enter updates without it. Functions suffixed _locked
 * expect the lock held.
 */
#ifndef SIMGPU_CORE_INTERNAL_H
#define SIMGPU_CORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "core.h"

#define SIMGPU_PAGE 4096u
#define SIMGPU_NS_PER_S 1000000000ull

enum simgpu_resource {
	SIMGPU_RES_COMPUTE, /* kernels, memsets, device-to-device copies */
	SIMGPU_RES_H2D,     /* copy engine, host to device */
	SIMGPU_RES_D2H,     /* copy engine, device to host */
	SIMGPU_RES_NET,     /* the link between ranks */
	SIMGPU_RES_NONE,    /* host functions, markers: no resource, no duration */
	SIMGPU_RES_COUNT
};

struct simgpu_interval {
	uint64_t start, end;
};

/* Busy intervals on one resource, kept while they can still overlap new work. */
struct simgpu_timeline {
	struct simgpu_interval *items;
	size_t count, cap;
	uint64_t free_at; /* end of the last booking: copy engines and the link are FIFO */
};

struct CUstream_st {
	uint32_t magic;
	uint32_t id; /* 0 legacy, then in creation order; the trace's track */
	unsigned int flags;
	int priority;
	bool legacy;
	uint64_t tail; /* virtual time by which all work queued so far has ended */
	struct CUstream_st *next;
};

struct CUevent_st {
	uint32_t magic;
	unsigned int flags;
	bool recorded;
	uint64_t time;
	struct CUevent_st *next;
};

/* A queued effect: fn(arg) runs when the host observes time >= end; arg is freed after. */
struct simgpu_effect {
	uint64_t end;
	uint64_t seq;
	void (*fn)(void *arg);
	void *arg;
};

struct simgpu_core {
	pthread_mutex_t lock;
	struct simgpu_config config;
	int setup_status; /* CUresult of the one-time set-up */
	atomic_bool initialized;
	_Atomic uint64_t host_now;
	uint64_t next_seq;

	struct CUstream_st legacy_stream;
	struct CUstream_st *streams; /* every live stream, legacy included */
	uint32_t next_stream_id;
	struct CUevent_st *events;
	struct simgpu_timeline timelines[SIMGPU_RES_COUNT];

	struct simgpu_effect *heap; /* min-heap on (end, seq) */
	size_t heap_count, heap_cap;

	_Atomic uint64_t error_count;
};

extern struct simgpu_core simgpu;

/* One-time set-up (configuration, address window), shared by simgpu_api_enter and
 * simgpu_core_init. Returns the CUresult of the set-up. */
CUresult simgpu_core_setup(void);

/* Raises the host clock to at least t. */
void host_advance_to(uint64_t t);

/* Scheduler (sched.c). */
uint64_t sched_ready_locked(const struct CUstream_st *stream);
/*
 * Places `work_ns` of work on `res` for `stream`, no earlier than the stream allows:
 * returns the end and writes the start. Updates the stream's tail and the timeline,
 * and records the trace slice.
 */
uint64_t sched_book_locked(struct CUstream_st *stream, enum simgpu_resource res, uint64_t work_ns,
                           const char *name, uint64_t *start_out);
/* Raises a stream's tail to t (a wait). */
void sched_stream_wait_locked(struct CUstream_st *stream, uint64_t t);
/* Host waits until t: the clock advances and every effect ending by then is applied. */
void sched_host_wait_locked(uint64_t t);
uint64_t sched_device_tail_locked(void);
uint64_t transfer_ns(uint64_t bytes, uint64_t bytes_per_s);

/* Effects (effects.c). */
void effects_push_locked(uint64_t end, void (*fn)(void *arg), void *arg);
void effects_apply_until_locked(uint64_t t);

/* Memory (memory.c). */
CUresult memory_setup(void);

/* Trace (trace.c). */
void trace_slice_locked(const char *name, uint32_t track, enum simgpu_resource res, uint64_t start,
                        uint64_t end);
void trace_write_at_exit(void);

/* Counters (counters.c). */
CUresult counters_setup(char *why, size_t why_len);
void counters_write_at_exit(void);

#endif /* SIMGPU_CORE_INTERNAL_H */
