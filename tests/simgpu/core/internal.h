/* SPDX-License-Identifier: Apache-2.0 */
/*
 * State shared by the core's own files (config, counters, scheduler, effects, memory,
 * kernels, graphs, trace). Nothing outside tests/simgpu/core includes this.
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

/* A set of graph nodes: what the next op captured in a stream depends on. */
struct simgpu_node_set {
	struct CUgraphNode_st **items;
	size_t count, cap;
};

struct CUstream_st {
	uint32_t magic;
	uint32_t id; /* 0 legacy, then in creation order; the trace's track */
	unsigned int flags;
	int priority;
	bool legacy;
	uint64_t tail; /* virtual time by which all work queued so far has ended */
	/* The capture sequence this stream records into (it began here, or the stream joined
	 * it by waiting on an event recorded in it), or NULL. */
	struct simgpu_capture *capture;
	struct simgpu_node_set deps; /* while capturing: the next op's dependencies */
	CUgraphEdgeData *edge_data;  /* zeroed, parallel to deps (cuStreamGetCaptureInfo) */
	size_t edge_cap;
	struct CUstream_st *next;
};

struct CUevent_st {
	uint32_t magic;
	unsigned int flags;
	bool recorded;
	uint64_t time;
	/* Last recorded inside this (still open) capture sequence, or NULL; deps are the
	 * nodes the record stands for, which a stream that waits on the event depends on. */
	struct simgpu_capture *capture;
	struct simgpu_node_set deps;
	struct CUevent_st *next;
};

/*
 * One operation as the scheduler books it: `work_ns` of work on `res`, then
 * effect(arg) at its end. What a stream queues at once, and what a capture records into
 * a graph and every launch of it books again. `arg` is released with free(); a replay
 * queues a byte copy of it (arg_bytes), which relocate() fixes if it points into itself.
 */
struct simgpu_op {
	enum simgpu_resource res;
	uint64_t work_ns;
	const char *name;          /* trace label: a string literal */
	void (*effect)(void *arg); /* NULL: none */
	void *arg;
	size_t arg_bytes;
	void (*relocate)(void *copy); /* NULL: a plain byte copy is right */
};

/* A captured op: a node of a graph. Nodes depend only on earlier nodes of their graph. */
struct CUgraphNode_st {
	struct simgpu_op op;
	uint32_t index; /* position in the graph */
	bool mark;      /* scratch for graph walks, under the lock */
	struct simgpu_node_set deps;
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
	uint64_t launches; /* kernels launched: SIMGPU_JITTER_PCT's sequence */

	struct CUstream_st legacy_stream;
	struct CUstream_st *streams; /* every live stream, legacy included */
	uint32_t next_stream_id;
	struct CUevent_st *events;
	struct simgpu_timeline timelines[SIMGPU_RES_COUNT];

	struct simgpu_capture *captures; /* open capture sequences (graph.c) */
	struct CUgraph_st *graphs;
	struct CUgraphExec_st *execs;
	uint64_t next_capture_id;

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

/*
 * Capture (graph.c). Every check is free when no capture is open.
 *
 * capture_admit_locked: may an operation on `stream` go on? CAPTURE_RECORD: stream-ordered
 * work, recorded when the stream captures; CAPTURE_REFUSE: something a capture cannot
 * hold (the host waits for or queries the stream, pageable copies, stream-ordered
 * allocation, graph launch). Returns CUDA_SUCCESS;
 * CUDA_ERROR_STREAM_CAPTURE_IMPLICIT for the legacy stream while a blocking stream
 * captures (those captures are invalidated); CUDA_ERROR_STREAM_CAPTURE_INVALIDATED for
 * RECORD on a stream whose capture was invalidated; CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
 * for REFUSE on a capturing stream (its capture is invalidated).
 */
enum capture_use { CAPTURE_RECORD, CAPTURE_REFUSE };
CUresult capture_admit_locked(struct CUstream_st *stream, enum capture_use use);
/*
 * For the potentially unsafe calls of CUDA's capture modes (cudaMalloc, cudaFree, pinned
 * host allocation and free, blocking copies and memsets, device synchronisation):
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED when an open capture prohibits them on this
 * thread (one this thread began in Global or ThreadLocal mode, or one any thread began
 * in Global mode), and those captures are invalidated; else CUDA_SUCCESS.
 */
CUresult capture_check_unsafe_locked(void);
/*
 * Queues op on stream (sched_book_locked, effects_push_locked), or records it into the
 * stream's capture. Admits it first (CAPTURE_RECORD). Takes op->arg in every case: it is
 * freed if the op is refused. *end_out (may be NULL) gets the op's virtual end, or 0 when
 * it was captured.
 */
CUresult work_issue_locked(struct CUstream_st *stream, const struct simgpu_op *op,
                           uint64_t *end_out);
/* Event record on a capturing stream: the event stands for the stream's current
 * dependencies (nothing is queued). */
CUresult capture_event_record_locked(struct CUevent_st *event, struct CUstream_st *stream);
/*
 * Stream wait when the stream or the event belongs to a capture: merges dependencies, or
 * joins a stream to the event's capture. Returns true with *status set if it handled the
 * wait; false for an ordinary wait.
 */
bool capture_stream_wait_locked(struct CUstream_st *stream, struct CUevent_st *event,
                                CUresult *status);
/* Forgets an event's capture record (re-recorded outside capture, or destroyed). */
void capture_event_forget_locked(struct CUevent_st *event);
void capture_invalidate_locked(struct simgpu_capture *capture);

/* Memory (memory.c). */
CUresult memory_setup(void);

/* Memory pools (pool.c): what the stream-ordered allocator needs of them. */
void pool_setup(void);
/* The live pool behind a handle (a default pool, or a created one not destroyed), or
 * NULL. */
struct CUmemPoolHandle_st *pool_find_locked(CUmemoryPool handle);
/* Charges a new block of size bytes to pool; false, and nothing charged, when the pool's
 * maximum size would be exceeded. */
bool pool_charge_locked(struct CUmemPoolHandle_st *pool, uint64_t size);
/* A block charged to pool is gone (pool may be NULL: a block of no pool). A pool destroyed
 * while blocks were outstanding is freed with the last one. */
void pool_uncharge_locked(struct CUmemPoolHandle_st *pool, uint64_t size);
/* Of a new block of size bytes, the bytes the memory pool keeps cover (taken from it): the
 * rest is new device memory. */
uint64_t pool_reuse_locked(struct CUmemPoolHandle_st *pool, uint64_t size);
/* bytes more kept by pool (reused bytes handed back when an allocation fails). */
void pool_keep_locked(struct CUmemPoolHandle_st *pool, uint64_t bytes);
/* Of a block of size bytes freed back to pool (NULL: none), the bytes the pool keeps, up to
 * its release threshold: they stay device memory in use. */
uint64_t pool_retain_locked(struct CUmemPoolHandle_st *pool, uint64_t size);
/* Device memory a pool gave back (memory.c). */
void memory_give_back_locked(uint64_t bytes);

/* Trace (trace.c). */
void trace_slice_locked(const char *name, uint32_t track, enum simgpu_resource res, uint64_t start,
                        uint64_t end);
void trace_write_at_exit(void);

/* Counters (counters.c). */
CUresult counters_setup(char *why, size_t why_len);
void counters_write_at_exit(void);

#endif /* SIMGPU_CORE_INTERNAL_H */
