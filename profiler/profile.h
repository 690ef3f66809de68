/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lynx's profile: what one rank learned about its training iteration, in memory and as the
 * versioned JSON file ("format": "lynx-profile", "version": 1) that profiling-only mode
 * writes and the planners read. This module is the format's one writer and one reader;
 * profile.c describes every key. build.h fills a profile from a trace.
 *
 * Every time carries its source: "host" (spans between host-side call returns, what a
 * LYNX_EVENTS dump knows), "device" (GPU event timing, once the shim records it) or
 * "unknown" (no number at all: nothing pretends). Integer indices use -1 for "none", as
 * policy/problem.h does.
 *
 * Ownership: a struct lynx_profile owns its arrays and strings (malloc'ed); release with
 * lynx_profile_free. A profile is read-only once built: any number of threads may read it.
 */
#ifndef LYNX_PROF_PROFILE_H
#define LYNX_PROF_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LYNX_PROFILE_FORMAT "lynx-profile"
#define LYNX_PROFILE_VERSION 1 /* the major version: a reader refuses any other */

/* Where a time comes from: X(ID, name). */
#define LYNX_PROFILE_SOURCES(X) \
	X(UNKNOWN, "unknown")   \
	X(HOST, "host")         \
	X(DEVICE, "device")

enum lynx_profile_source {
#define LYNX_PROFILE_SOURCE_ENUM(id, name) LYNX_PROFILE_SOURCE_##id,
	LYNX_PROFILE_SOURCES(LYNX_PROFILE_SOURCE_ENUM)
#undef LYNX_PROFILE_SOURCE_ENUM
	        LYNX_PROFILE_SOURCE_COUNT
};

/*
 * What an NCCL call is to the compute stream: X(ID, name). The names shared with
 * policy/problem.h's window kinds mean the same: tp_fwd/tp_bwd (a collective inside a
 * layer's forward/backward segment), pp_recv_fwd (activations received before a forward),
 * pp_recv_bwd (gradients received before a backward), dp_grad (a collective after the
 * iteration's last backward, not on a tensor-parallel communicator). The sends are the
 * other side of the pipeline's transfers; other is everything else (the embedding's or the
 * loss's collectives, set-up).
 */
#define LYNX_PROFILE_WINDOW_KINDS(X)  \
	X(TP_FWD, "tp_fwd")           \
	X(TP_BWD, "tp_bwd")           \
	X(PP_RECV_FWD, "pp_recv_fwd") \
	X(PP_RECV_BWD, "pp_recv_bwd") \
	X(PP_SEND_FWD, "pp_send_fwd") \
	X(PP_SEND_BWD, "pp_send_bwd") \
	X(DP_GRAD, "dp_grad")         \
	X(OTHER, "other")

enum lynx_profile_window_kind {
#define LYNX_PROFILE_WINDOW_ENUM(id, name) LYNX_PROFILE_WINDOW_##id,
	LYNX_PROFILE_WINDOW_KINDS(LYNX_PROFILE_WINDOW_ENUM)
#undef LYNX_PROFILE_WINDOW_ENUM
	        LYNX_PROFILE_WINDOW_KIND_COUNT
};

/* The memory classes of profiler/lifetime.h, by name: X(ID, name). */
#define LYNX_PROFILE_MEMORY_CLASSES(X) \
	X(WEIGHT, "weight")            \
	X(SAVED, "saved_activation")   \
	X(WORKSPACE, "workspace")      \
	X(TEMPORARY, "temporary")      \
	X(OTHER, "other")

enum lynx_profile_memory_class {
#define LYNX_PROFILE_MEMORY_ENUM(id, name) LYNX_PROFILE_MEMORY_##id,
	LYNX_PROFILE_MEMORY_CLASSES(LYNX_PROFILE_MEMORY_ENUM)
#undef LYNX_PROFILE_MEMORY_ENUM
	        LYNX_PROFILE_MEMORY_CLASS_COUNT
};

/*
 * Where a profile's run id comes from: X(ID, name), the name as written. NONE: no id was
 * found (the readers then tell runs apart by world size and start time, profiler/run.h).
 */
#define LYNX_PROFILE_RUN_SOURCES(X)            \
	X(NONE, "none")                        \
	X(TORCHELASTIC, "TORCHELASTIC_RUN_ID") \
	X(SLURM, "SLURM_JOB_ID")               \
	X(NCCL, "nccl_unique_id")

enum lynx_profile_run_source {
#define LYNX_PROFILE_RUN_SOURCE_ENUM(id, name) LYNX_PROFILE_RUN_SOURCE_##id,
	LYNX_PROFILE_RUN_SOURCES(LYNX_PROFILE_RUN_SOURCE_ENUM)
#undef LYNX_PROFILE_RUN_SOURCE_ENUM
	        LYNX_PROFILE_RUN_SOURCE_COUNT
};

/* The longest run id in bytes: a Slurm "JOB.STEP" or a torchelastic id is far shorter. */
#define LYNX_PROFILE_RUN_ID_MAX 127

/*
 * The launch a profile comes from, shared by every rank of it (profiler/run.h finds it and
 * groups profiles by it). Fixed-size, so that a profile can be copied whole and the shim
 * fills it without allocating.
 */
struct lynx_profile_run {
	bool known; /* false: the profile has no "run" (older, or built from a dump) */
	enum lynx_profile_run_source source;
	char id[LYNX_PROFILE_RUN_ID_MAX + 1]; /* "" exactly when source is NONE */
	uint64_t started;                     /* unix seconds when the process started */
};

/* A measured duration: the median of samples, their range, and the source. With source
 * UNKNOWN the numbers are 0 and not written. */
struct lynx_profile_time {
	enum lynx_profile_source source;
	uint64_t ns, min_ns, max_ns;
	uint32_t samples;
};

/* A list of kernels, in launch order: their names and, when the shim timed them on the
 * device (one sampled iteration), each one's duration; ns is NULL when not timed. */
struct lynx_profile_kernels {
	char **name;
	uint64_t *ns; /* device time of each kernel, or NULL: not timed */
	/* The most live bytes besides saved activations while each kernel was issued (from
	 * the launch before it, exclusive, to it: the allocations for its outputs included),
	 * over micro-batches and iterations; NULL: unknown (older profiles). */
	uint64_t *non_saved_bytes;
	size_t count;
};

struct lynx_profile_layer {
	struct lynx_profile_time forward, backward;
	struct lynx_profile_kernels fwd_kernels, bwd_kernels; /* one micro-batch's segment */
	uint64_t saved_bytes; /* saved activations, the largest over micro-batches */
	bool reruns_forward;  /* its backward reruns its forward first (full or block recompute) */
};

/* The most writers of temporaries one rebuild reruns before its producer run (a chain):
 * Lynx's executor replays at most this many (shim/executor_internal.h, MAX_CHAIN_KERNELS). */
#define LYNX_PROFILE_MAX_WRITERS 4

/* A place in a layer's segment: before kernel `kernel` (0-based count of the program's
 * launches in the segment before it); -1: outside the segment (a layer input, ...). */
struct lynx_profile_group {
	uint32_t layer;
	uint64_t bytes;
	int32_t producer; /* forward kernel that first touched it; -1: the layer's input */
	/* The last of the launches right after the producer, of its function, that touch it
	 * too (one per sequence of a batch, say): what rebuilding it relaunches, as the
	 * executor captures a producer. producer when it is alone, or -1 with it. */
	int32_t producer_end;
	int32_t first_consumer; /* first backward kernel that touches it; -1: none seen */
	int32_t last_consumer;  /* last backward kernel that touches it; -1: none seen */
	/*
	 * What its producer run names besides its outputs, from the launches' parameters
	 * (lifetime.h's references), when reads_known: the saved activations of its own layer
	 * produced before the run (reads[0..read_count), indices of other groups of the
	 * profile, ascending), which a rebuild needs resident; and reads_freed, set when the run
	 * names memory that is freed before the activation's first consumer (a temporary): the
	 * executor cannot replay such a run (its examination refuses it) and offloads the
	 * activation instead. Without reads_known (an older profile), reads is NULL and
	 * reads_freed false.
	 */
	bool reads_known;
	bool reads_freed;
	/* When reads_known and not reads_freed: its run reads a temporary freed before that
	 * consumer, which the rebuild writes again first by replaying the temporary's writer
	 * (a chain, at most 4 writers, whose temporaries and workspaces are in scratch_bytes;
	 * what the writers read is not in reads). */
	bool chained;
	/* When chained: the writers' positions among its layer's forward kernels (as
	 * producer's), ascending and distinct, each below producer; a writer outside the
	 * layer's forward is not listed. What a rebuild reruns besides its run. Absent in
	 * older profiles: writer_count 0 (the writers' time is then not counted). */
	int32_t writers[LYNX_PROFILE_MAX_WRITERS];
	uint32_t writer_count;
	uint32_t *reads;
	uint32_t read_count;
	/*
	 * When scratch_known: the bytes of the workspaces its producer run names (lifetime.h's
	 * WORKSPACE class), summed. Lynx's executor replays a run that writes a workspace into
	 * scratch of the workspace's size, so this is the scratch a rebuild of the group takes
	 * (a run that only reads one is counted too). Unknown in older profiles: take
	 * memory.largest_workspace_bytes.
	 */
	bool scratch_known;
	uint64_t scratch_bytes;
	/*
	 * When freed_known: how many of its layer's backward kernels were launched before the
	 * trainer freed it, at most the layer's backward kernel count (freed after its layer's
	 * backward, or later, or never), and past last_consumer. PyTorch frees a saved tensor
	 * when autograd lets go of the node that read it, right after its last consumer;
	 * tinytrain and trainers that keep a layer's context hold it until the layer's backward
	 * ends. Unknown in older profiles: freed right after last_consumer.
	 */
	bool freed_known;
	uint32_t freed_before;
};

struct lynx_profile_window {
	enum lynx_profile_window_kind kind;
	char *call;         /* the NCCL function, e.g. "ncclAllReduce" */
	uint32_t comm;      /* communicator, numbered by first use in the trace */
	int32_t peer;       /* point-to-point peer; -1 for collectives */
	uint64_t count;     /* elements, as the call passed them */
	uint64_t bytes;     /* count times the datatype's size; 0 for an unknown datatype */
	int32_t microbatch; /* of the adjacent layer segment; -1: none */
	int32_t layer;      /* tp_*: the layer; -1 for the others */
	int32_t ordinal;    /* tp_*: the collective's rank among the segment's; -1 otherwise */
	int32_t kernel;     /* tp_*: launches of the segment before it; -1 otherwise */
	uint64_t offset_ns; /* host time of the call from the iteration's start */
	struct lynx_profile_time duration, idle; /* idle: the compute stream's idle time */
};

struct lynx_profile_memory {
	enum lynx_profile_source source;                   /* HOST: from the allocation calls */
	uint64_t peak_bytes;                               /* most live device bytes at once */
	uint64_t at_peak[LYNX_PROFILE_MEMORY_CLASS_COUNT]; /* live bytes by class then */
	/* Most live bytes besides saved activations at any one time (at least the at_peak
	 * sum of the other classes): what a plan cannot evict. */
	uint64_t non_saved_peak_bytes;
	uint64_t buffers; /* allocations counted */
	/* The largest single workspace buffer: the scratch one replay of a kernel that writes a
	 * workspace takes, since a replay writes it to scratch of its size. */
	uint64_t largest_workspace_bytes;
	/* When non_saved_known: the non-saved bytes' most outside every layer's forward and
	 * backward (the loss, the optimizer step, waits between passes), while every layer's
	 * kernels say theirs (non_saved_bytes). A plan's peak is then the most over the
	 * iteration of what it keeps beside the non-saved bytes of that moment, not beside
	 * their peak. Older profiles: unknown. */
	bool non_saved_known;
	uint64_t non_saved_outside_bytes;
};

/* The link to pinned host memory as warm-up measured it (one timed copy each way on an idle
 * stream); all 0: not measured. */
struct lynx_profile_host_link {
	double d2h_bytes_per_s, h2d_bytes_per_s; /* > 0 when measured */
	double latency_s;                        /* a small copy's time beyond bytes / rate */
};

struct lynx_profile {
	int32_t rank, world; /* -1: unknown (written as null) */
	struct lynx_profile_run run;
	struct {
		int32_t pid;
		char *gpu, *driver, *nccl; /* "unknown" until the shim records them */
	} env;
	struct {
		uint64_t period_tokens; /* work signatures per iteration (period.h) */
		uint32_t count;         /* identical iterations found */
		uint64_t prefix_events; /* events before the first one */
		uint64_t events;        /* events of the iteration windows describe (the last) */
		struct lynx_profile_time time;
	} iteration;
	uint32_t microbatches;
	/* Forwards this rank runs before its first backward in one iteration: p - s - 1
	 * under 1F1B on stage s of p (capped by the micro-batches), 0 without a pipeline. */
	uint32_t warmup_forwards;
	/* This rank's pipeline stage and the stage count, from the communicator that carries
	 * all its pipeline sends and receives (its ranks are the stages, in order). Known only
	 * when lynx_profile_pipeline_known(): a zeroed profile, a trace without a pipeline, or
	 * sends over several communicators leave it unknown. */
	int32_t pipeline_stage;
	uint32_t pipeline_stages;
	struct lynx_profile_layer *layers;
	size_t layer_count;
	struct lynx_profile_group *groups; /* by layer, then allocation order */
	size_t group_count;
	struct lynx_profile_window *windows; /* one iteration's NCCL calls, in call order */
	size_t window_count;
	struct lynx_profile_memory memory;
	struct lynx_profile_host_link host_link;
};

/* True when p names its pipeline stage: 0 <= pipeline_stage < pipeline_stages. */
static inline bool lynx_profile_pipeline_known(const struct lynx_profile *p)
{
	return p->pipeline_stages > 0 && p->pipeline_stage >= 0 &&
	       (uint32_t)p->pipeline_stage < p->pipeline_stages;
}

/* How many of p's layers rerun their forward in their backward: all of them under full
 * recompute, the first N of a stage under Megatron's block recompute. */
static inline size_t lynx_profile_rerun_layers(const struct lynx_profile *p)
{
	size_t n = 0;

	for (size_t l = 0; l < p->layer_count; l++)
		n += p->layers[l].reruns_forward;
	return n;
}

/* The time one iteration of p spends rerunning forwards in its backwards: each rerunning
 * layer's forward once per micro-batch (the rerun runs the forward's kernels). 0 when no
 * layer reruns, or when a rerunning layer's forward has no time. */
static inline uint64_t lynx_profile_rerun_ns(const struct lynx_profile *p)
{
	uint64_t ns = 0;

	for (size_t l = 0; l < p->layer_count; l++) {
		const struct lynx_profile_layer *layer = &p->layers[l];
		if (!layer->reruns_forward)
			continue;
		if (layer->forward.source == LYNX_PROFILE_SOURCE_UNKNOWN)
			return 0;
		ns += layer->forward.ns * p->microbatches;
	}
	return ns;
}

/* True when every layer of p reruns its forward (full recompute; the JSON's "rerun"). */
static inline bool lynx_profile_all_rerun(const struct lynx_profile *p)
{
	return p->layer_count && lynx_profile_rerun_layers(p) == p->layer_count;
}

/* The profile as JSON text (malloc'ed, ends in a newline), or NULL when out of memory. */
char *lynx_profile_to_json(const struct lynx_profile *p);

/*
 * Writes the profile to path atomically: a temporary file in the same directory, flushed,
 * then renamed over path. Returns 0, -ENOMEM or -errno (the temporary file is removed).
 */
int lynx_profile_write(const struct lynx_profile *p, const char *path);

/*
 * Reads a profile from text[0..len) (no NUL needed). Returns 0; -EINVAL with one sentence
 * in why naming the field's path ("layers[3].forward.ns: ...") or, for text that is not
 * JSON, the byte offset where parsing stopped; -ENOMEM. On failure out holds nothing to
 * free. Unknown keys are ignored (a minor version may add some); another major version is
 * refused.
 */
int lynx_profile_from_json(const char *text, size_t len, struct lynx_profile *out, char *why,
                           size_t why_len);

/* The largest profile file read: far above any real profile (a few MiB), far below what
 * would hurt the host that reads it. */
#define LYNX_PROFILE_MAX_FILE_BYTES (256u << 20)

/*
 * Reads the file at path; as lynx_profile_from_json, or as lynx_regular_file_read when it
 * cannot be read (a named pipe or any other non-regular file is refused, never waited on).
 */
int lynx_profile_read(const char *path, struct lynx_profile *out, char *why, size_t why_len);

void lynx_profile_free(struct lynx_profile *p);

/*
 * Whether link holds a measurement: both rates finite and > 0, the latency finite and in
 * [0, 1) s, what the reader accepts. The writer writes "host_link" exactly then; anything
 * else (all 0 included) counts as not measured.
 */
bool lynx_profile_host_link_measured(const struct lynx_profile_host_link *link);

/* Names of the enums above; NULL when out of range. */
const char *lynx_profile_source_name(enum lynx_profile_source s);
const char *lynx_profile_window_kind_name(enum lynx_profile_window_kind k);
const char *lynx_profile_memory_class_name(enum lynx_profile_memory_class c);
const char *lynx_profile_run_source_name(enum lynx_profile_run_source s);

#endif /* LYNX_PROF_PROFILE_H */
