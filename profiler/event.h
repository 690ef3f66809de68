/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The events the profiler learns from: one process's intercepted calls, in the order
 * they were recorded (per thread; threads interleave by time). Filled either from a
 * LYNX_EVENTS dump (trace.c, offline: tests and `lynx report`) or, later, in-process from
 * the shim's recorder. The profiler never calls CUDA: it only reads these.
 *
 * Ownership: a trace owns its events and everything they point to (hook names are
 * interned, parameter bytes live in the trace's arena); free with lynx_prof_trace_free.
 */
#ifndef LYNX_PROF_EVENT_H
#define LYNX_PROF_EVENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The same kinds as the shim records (shim/events.def, the one list). */
enum lynx_prof_kind {
#define LYNX_EVENT(id, name, payload) LYNX_PROF_##id,
#include "events.def"
#undef LYNX_EVENT
	LYNX_PROF_KIND_COUNT
};

struct lynx_prof_event {
	uint64_t t_ns;    /* host time of the call (CLOCK_MONOTONIC, at its return) */
	uint32_t tid;     /* the calling thread */
	uint32_t index;   /* position in the trace */
	const char *hook; /* the intercepted function, e.g. "cuLaunchKernel" (interned) */
	enum lynx_prof_kind kind;
	bool nested;   /* made by the CUDA library inside another intercepted call */
	bool captured; /* recorded while a stream was capturing a CUDA graph */
	int32_t result;
	uint64_t stream; /* handle as the program passed it (0: the default stream) */
	/* The device's timeline for stream-ordered work that the shim timed with events: when
	 * it started and ended on its stream, in ns from the process's first timing event
	 * (one per-rank timeline across streams). 0 and 0: not timed. */
	uint64_t dev_start_ns, dev_end_ns;
	union {
		struct {
			uint64_t ptr, bytes;
		} mem; /* ALLOC, FREE, MEMSET, VMM */
		struct {
			uint64_t dst, src, bytes;
			int32_t direction;
		} copy; /* COPY */
		struct {
			uint64_t function;
			/* the kernel's name (interned), or NULL: the dump had none */
			const char *name;
			/* lynx_fnv1a_string(name), 0 without a name: what makes two launches
			 * the same kernel in a signature. A kernel loaded by several modules
			 * (each torch.compile graph loads its own Triton kernels) has a
			 * function handle per module, and one name. */
			uint64_t name_hash;
			uint32_t grid[3], block[3], shared;
			uint32_t param_count, param_bytes;
			const uint8_t *params; /* param_bytes bytes, or NULL (runtime launches) */
		} launch;                      /* LAUNCH */
		struct {
			uint64_t handle;
		} sync; /* STREAM, EVENT_RECORD, STREAM_WAIT, SYNC, QUERY, GRAPH, COMM */
		struct {
			uint64_t comm, send, recv, count;
			int32_t type, op, peer, group_depth;
		} nccl; /* COLL, P2P, GROUP */
	} u;
};

struct lynx_prof_trace {
	int pid;
	struct lynx_prof_event *events;
	size_t count;
	void *storage; /* private: the arena behind hook names and parameter bytes */
};

/*
 * Reads a LYNX_EVENTS file (format "lynx-events", version 1), with the events ordered by
 * host time (ties keep the file's order), so threads interleave by time. Returns 0, or -EINVAL with
 * a reason in why naming the line and the field (a truncated or corrupted file is refused, never
 * half-read), or -errno if the file cannot be read.
 */
int lynx_prof_trace_read(const char *path, struct lynx_prof_trace *out, char *why, size_t why_len);
void lynx_prof_trace_free(struct lynx_prof_trace *trace);

/*
 * Building a trace in process (the shim's online profiler): init an empty trace, append
 * events as they come (the hook name, the kernel name and params[0..param_bytes) are
 * copied into the trace's storage; ev->index is set to the arrival order), then sort it by
 * host time before the profiler reads it. The names passed to append must be stable: the
 * same address always holds the same text (they are interned by address). init and append return 0
 * or -ENOMEM (append leaves the trace as it was).
 */
int lynx_prof_trace_init(struct lynx_prof_trace *trace, int pid);
int lynx_prof_trace_append(struct lynx_prof_trace *trace, const struct lynx_prof_event *ev,
                           const uint8_t *params);
/* Orders the events by host time, ties by index, then renumbers index. */
void lynx_prof_trace_sort(struct lynx_prof_trace *trace);

/* "launch", "alloc", ... (events.def's names); NULL for an unknown kind. */
const char *lynx_prof_kind_name(enum lynx_prof_kind kind);

#endif /* LYNX_PROF_EVENT_H */
