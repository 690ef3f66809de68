/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Allocation lifetimes: every device allocation of a trace as a buffer (address range,
 * allocating and freeing events, the launches, copies, memsets and NCCL calls that
 * referenced it), then a class per buffer from the job's structure (iterations, layer
 * segments): weight/persistent, temporary, saved activation, workspace or other; the saved
 * activation bytes of each layer and micro-batch; and the peak of live bytes by class.
 *
 * How it is found, and what it cannot see:
 *  - Allocations. ALLOC and FREE events of device memory (cudaMalloc, cudaMallocAsync,
 *    cudaMallocFromPoolAsync, their driver forms and variants). Host allocations (hooks
 *    whose name contains "Host") and VMM events are not buffers. A runtime call and the
 *    driver call it makes are both recorded, the driver one nested and committed first:
 *    a nested ALLOC or FREE whose enclosing call (the next non-nested event of the same
 *    thread) is a successful ALLOC or FREE of the same pointer is skipped, so each
 *    allocation counts once, as the call the program made. A nested allocation with no
 *    such enclosing call (NCCL allocating inside ncclCommInitRank) counts on its own.
 *    Failed calls (result != 0) and null pointers are ignored. A stream-ordered free
 *    ends the lifetime at the host call, not when the stream reaches it.
 *  - References. Every 8-byte-aligned word of a launch's recorded parameter bytes that
 *    points into a live buffer ([ptr, ptr + bytes) at that event) is a reference; so are a
 *    copy's source and destination, a memset's pointer and a collective's or
 *    point-to-point call's send and recv buffers. Pointers inside by-value structs are
 *    found (the struct's bytes are scanned); pointers the kernel reads from device memory
 *    are invisible; a plain integer parameter that happens to equal a live address is a
 *    false reference (unlikely with 64-bit device addresses). Launches without recorded
 *    parameters (runtime launches: their nested driver launch carries them) add nothing;
 *    CUDA graph launches replay kernels the trace does not show. A reference is attributed
 *    to the call the program made: a nested event's references belong to its enclosing
 *    non-nested event. Reads and writes look the same, so the first referencing event is
 *    called the producer; for a buffer written by a memset or copy first, that is the
 *    producer too. One exception: a first kernel that names the buffer alone (a fill,
 *    such as PyTorch's deterministic NaN fill of new tensors) followed by a kernel that
 *    names it and other buffers: the second is the producer.
 *  - Order. Events are walked in trace order, which must be time order (trace.c merges
 *    the threads by time): a trace whose times decrease is refused.
 *
 * Ownership: a lynx_prof_lifetimes owns its arrays; free with lynx_prof_lifetimes_free.
 * Nothing here keeps a pointer into the trace. Not thread-safe; no global state.
 */
#ifndef LYNX_PROF_LIFETIME_H
#define LYNX_PROF_LIFETIME_H

#include <stddef.h>
#include <stdint.h>

#include "event.h"

/* No event: a buffer still live at the end of the trace, never referenced, ... */
#define LYNX_PROF_NONE UINT32_MAX

/* The buffer classes, declared once: X(ID, name) for each. */
#define LYNX_PROF_CLASSES(X)         \
	X(OTHER, "other")            \
	X(WEIGHT, "weight")          \
	X(TEMPORARY, "temporary")    \
	X(SAVED, "saved_activation") \
	X(WORKSPACE, "workspace")

enum lynx_prof_class {
#define LYNX_PROF_CLASS_ENUM(id, name) LYNX_PROF_CLASS_##id,
	LYNX_PROF_CLASSES(LYNX_PROF_CLASS_ENUM)
#undef LYNX_PROF_CLASS_ENUM
	        LYNX_PROF_CLASS_COUNT
};

/* [begin, end) in trace event indices. */
struct lynx_prof_span {
	uint32_t begin, end;
};

/* One layer's work on one micro-batch in one iteration (segment.c's output). */
struct lynx_prof_layer_span {
	uint32_t iteration; /* index into lynx_prof_structure.iterations */
	uint32_t layer, microbatch;
	struct lynx_prof_span forward, backward;
};

/*
 * The job's structure, as the classification needs it. Iterations are sorted and do not
 * overlap; no two layer spans (forward or backward) overlap. Either array may be empty.
 */
struct lynx_prof_structure {
	const struct lynx_prof_span *iterations;
	size_t iteration_count;
	const struct lynx_prof_layer_span *layers;
	size_t layer_count;
};

/* A reference: the event (the program's call) and the lowest offset it touched. */
struct lynx_prof_ref {
	uint32_t event;
	uint64_t offset;
};

struct lynx_prof_buffer {
	uint64_t ptr, bytes;
	uint64_t stream;      /* of the allocating call (0: the default stream or a plain one) */
	uint32_t alloc_event; /* trace indices; free_event LYNX_PROF_NONE: live at the end */
	uint32_t free_event;
	uint64_t alloc_ns, free_ns; /* free_ns 0 when never freed */
	size_t first_ref;           /* refs[first_ref, first_ref + ref_count), in event order */
	size_t ref_count;
	uint32_t producer;      /* the first referencing event (past a fill), or LYNX_PROF_NONE */
	uint32_t last_consumer; /* the last referencing event, or LYNX_PROF_NONE */
	enum lynx_prof_class cls;
	uint32_t span; /* saved activations: the owning lynx_prof_structure.layers index */
};

struct lynx_prof_lifetimes {
	struct lynx_prof_buffer *buffers; /* in allocation order */
	size_t count;
	struct lynx_prof_ref *refs;
	size_t ref_count;
	/* lynx_prof_lifetimes_classify's results. */
	uint64_t *saved_bytes; /* per structure.layers entry */
	size_t saved_count;
	uint64_t peak_bytes; /* most live device bytes at once */
	uint32_t peak_event; /* the allocation that reached it (or the first steady event) */
	uint64_t peak_by_class[LYNX_PROF_CLASS_COUNT]; /* live bytes of each class then */
	/* Most live bytes besides saved activations at once within the structure's iterations
	 * (anywhere without them), often in a backward, with its gradients: what evicting
	 * activations cannot lower. */
	uint64_t non_saved_peak_bytes;
	/* Live bytes besides saved activations after each event of the trace (its frees come
	 * before its allocations, so also the most during it): non_saved_events entries, NULL
	 * when the classification failed. And their most outside every layer span within the
	 * iterations (all of it without layer spans), what is live on leaving one included. */
	uint64_t *non_saved_after;
	size_t non_saved_events;
	uint64_t non_saved_outside_bytes;
	/* The largest WORKSPACE buffer: the scratch that one replay of a kernel writing a
	 * workspace takes (a replay writes workspaces to scratch of their size). */
	uint64_t largest_workspace_bytes;
	/* Diagnostics. */
	size_t duplicates;      /* nested ALLOC/FREE events counted as their enclosing call */
	size_t unmatched_frees; /* FREE of an address that starts no live buffer */
	size_t overlaps;        /* live buffers ended by a new allocation over them */
};

/*
 * Builds the buffers and their references from trace. Returns 0, -EINVAL with a reason
 * in why (a trace out of time order), or -ENOMEM; on error out is empty. Classes are
 * LYNX_PROF_CLASS_OTHER until lynx_prof_lifetimes_classify. O(events x parameter words x
 * log live buffers) plus O(live) per allocation; fine below 10^5 live buffers.
 */
int lynx_prof_lifetimes_build(const struct lynx_prof_trace *trace, struct lynx_prof_lifetimes *out,
                              char *why, size_t why_len);

/*
 * Classifies every buffer against the structure, in this order:
 *  - persistent: live across an iteration boundary (an iteration's begin, or the last
 *    iteration's end). WORKSPACE if events of two or more different layers (inside layer
 *    spans) reference it at the same offset (a scratch area the layers share), words
 *    that may be an integer packed beside a pointer's upper half (within 1 MiB past a
 *    4 GiB line, beyond the buffer's first byte) left out; WEIGHT otherwise (weights,
 *    even in one flat buffer, are referenced at each layer's own offsets; optimizer
 *    states, gradients and other long-lived buffers land here too);
 *  - TEMPORARY: no layer span or iteration boundary between its allocation and its free
 *    (allocated and freed inside one segment, or inside one stretch between segments);
 *  - SAVED: referenced in the forward and in the backward of one layer span (same layer,
 *    micro-batch and iteration) and allocated before that backward began. It belongs to
 *    that span (the first such one): a layer's input, produced by the layer before it
 *    and kept for this layer's backward, counts for this layer, as in Korthikanti et
 *    al.'s accounting;
 *  - OTHER: the rest (set-up buffers, a stage's output freed after the loss, ...).
 * Then saved_bytes (per layer span) and the peak. Returns 0, -EINVAL with a reason in why
 * (a span out of range, reversed or with a bad iteration index), or -ENOMEM.
 */
int lynx_prof_lifetimes_classify(struct lynx_prof_lifetimes *lt,
                                 const struct lynx_prof_structure *structure, size_t event_count,
                                 char *why, size_t why_len);

/* The saved activation bytes of (layer, microbatch): the largest over the iterations of
 * the classified structure; 0 when no span matches. */
uint64_t lynx_prof_lifetimes_saved_bytes(const struct lynx_prof_lifetimes *lt,
                                         const struct lynx_prof_structure *structure,
                                         uint32_t layer, uint32_t microbatch);

/* The buffer holding addr at event (allocated at or before it, not yet freed), or NULL.
 * O(buffers). */
const struct lynx_prof_buffer *lynx_prof_lifetimes_find(const struct lynx_prof_lifetimes *lt,
                                                        uint64_t addr, uint32_t event);

void lynx_prof_lifetimes_free(struct lynx_prof_lifetimes *lt);

/* "weight", "saved_activation", ...; NULL for an unknown class. */
const char *lynx_prof_class_name(enum lynx_prof_class cls);

#endif /* LYNX_PROF_LIFETIME_H */
