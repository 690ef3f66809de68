/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the executor's files share: its limits, its driver table, the state of each scripted
 * activation, the one state object and the functions one file calls in the other.
 * executor.c has the driver, the bookkeeping, eviction and restoration, the measurements,
 * the tracker, the hooks' side, arming and reporting; executor_replay.c has kernel replay
 * and windows (executor.h says what both do). Only shim/executor*.c include this header,
 * last: it defines `ex`. Nothing here is exported from liblynx.so (-fvisibility=hidden and
 * liblynx.map). The state is under ex.lock (executor.h, "Thread safety"), and the functions
 * below are called with it held.
 */
#ifndef LYNX_EXECUTOR_INTERNAL_H
#define LYNX_EXECUTOR_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <uthash.h>

#include "arena.h"
#include "executor.h"
#include "launch_attrs.h"
#include "pack.h"
#include "replay.h"

/* Actions kept for the executor's trace: the first ones of a run (about 3 MB). */
#define MAX_TRACED (1u << 16)

/* Tries of a restore that failed (out of memory, or a driver error) before it gives up and
 * the bytes are lost (executor.h); tries of an unmap before the activation stays. */
#define RESTORE_ATTEMPTS 8
#define EVICT_ATTEMPTS 3

/* Replay's limits: activations whose producer is awaited at once, kernels of a producer,
 * pointer words of a kernel, parameter words that name other memory in one producer, the
 * memory an examination may copy, and how deep restoring a replay's evicted inputs may
 * nest. Beyond them an activation is offloaded instead. */
#define MAX_AWAITING 64
#define MAX_PRODUCER_KERNELS 8
/* Launches that may come between a fill and the kernel that computes its buffer (the fills
 * of that kernel's other new outputs, say). */
#define MAX_FILL_WAIT 8
#define MAX_POINTER_WORDS 32
/* Chains (executor_chain.c): the temporaries one producer's capture keeps the writer of,
 * the writers one replay may run before the producer, and the launches and allocations
 * remembered to find them. */
#define MAX_CHAIN_CANDIDATES 8
#define MAX_CHAIN_KERNELS 4
#define HISTORY_LENGTH 64
#define MAX_OPERANDS 64
#define MAX_READS 8
#define MAX_EXAMINED_BYTES (256ull << 20)
#define MAX_REPLAY_DEPTH 32
/* Calls of the iteration, host synchronisations aside, that may be missing live in one
 * place before the tracker takes the iteration for lost (lynx_exec_after): the optimizer's
 * step that fp16's loss scaler skips is one launch, or one graph. */
#define MAX_MISSING_CALLS 8
/* Timed iterations whose median is the achieved step (the last ones). */
#define EXEC_ITERATION_SAMPLES 64
/* Trainer streams a replay is ordered against. */
#define MAX_STREAMS 8
/* Memory samples kept per iteration for its curve in the summary. */
#define MAX_CURVE 4096
/* Calls of an iteration where the device went over the budget that keep_budget() acts on:
 * the worst ones (a pipeline's micro-batches each peak once). */
#define OVER_POINTS 32

/*
 * The driver calls the executor makes besides the arena's: LYNX_EXEC_DRIVER_CALL(field,
 * symbol, version), as arena.h's table.
 */
#define LYNX_EXEC_DRIVER_CALLS                                                               \
	LYNX_EXEC_DRIVER_CALL(ctx_get_device, cuCtxGetDevice, 2000)                          \
	LYNX_EXEC_DRIVER_CALL(ctx_synchronize, cuCtxSynchronize, 2000)                       \
	LYNX_EXEC_DRIVER_CALL(stream_create, cuStreamCreate, 2000)                           \
	LYNX_EXEC_DRIVER_CALL(stream_create_with_priority, cuStreamCreateWithPriority, 5050) \
	LYNX_EXEC_DRIVER_CALL(ctx_stream_priorities, cuCtxGetStreamPriorityRange, 5050)      \
	LYNX_EXEC_DRIVER_CALL(stream_wait_event, cuStreamWaitEvent, 3020)                    \
	LYNX_EXEC_DRIVER_CALL(event_create, cuEventCreate, 2000)                             \
	LYNX_EXEC_DRIVER_CALL(event_record, cuEventRecord, 2000)                             \
	LYNX_EXEC_DRIVER_CALL(event_query, cuEventQuery, 2000)                               \
	LYNX_EXEC_DRIVER_CALL(event_synchronize, cuEventSynchronize, 2000)                   \
	LYNX_EXEC_DRIVER_CALL(memcpy_dtoh_async, cuMemcpyDtoHAsync, 3020)                    \
	LYNX_EXEC_DRIVER_CALL(memcpy_htod_async, cuMemcpyHtoDAsync, 3020)                    \
	LYNX_EXEC_DRIVER_CALL(mem_alloc_host, cuMemAllocHost, 3020)                          \
	LYNX_EXEC_DRIVER_CALL(mem_free_host, cuMemFreeHost, 2000)                            \
	LYNX_EXEC_DRIVER_CALL(mem_alloc_async, cuMemAllocAsync, 11020)                       \
	LYNX_EXEC_DRIVER_CALL(mem_free_async, cuMemFreeAsync, 11020)                         \
	LYNX_EXEC_DRIVER_CALL(mem_get_info, cuMemGetInfo, 3020)                              \
	LYNX_EXEC_DRIVER_CALL(device_default_pool, cuDeviceGetDefaultMemPool, 11020)         \
	LYNX_EXEC_DRIVER_CALL(mem_pool_get_attribute, cuMemPoolGetAttribute, 11020)          \
	LYNX_EXEC_DRIVER_CALL(mem_pool_trim_to, cuMemPoolTrimTo, 11020)                      \
	LYNX_EXEC_DRIVER_CALL(event_elapsed, cuEventElapsedTime, 2000)

/* Replay's examination asks this for memory outside the arena; optional (without it,
 * RECOMPUTE decisions are offloaded). */
typedef PFN_cuMemGetAddressRange_v3020 address_range_fn;
/* The names of producers, for the examination's lines; optional (CUDA 12.3 and later). */
typedef PFN_cuFuncGetName_v12030 func_name_fn;
typedef PFN_cuKernelGetName_v12030 kernel_name_fn;

struct exec_driver {
#define LYNX_EXEC_DRIVER_CALL(field, symbol, version) PFN_##symbol##_v##version field;
	LYNX_EXEC_DRIVER_CALLS
#undef LYNX_EXEC_DRIVER_CALL
};

/* Where one scripted activation is in its cycle. */
enum buf_state {
	BUF_NONE,       /* no live instance (not routed this iteration, or freed) */
	BUF_RESIDENT,   /* mapped; ready_pending: a restore's copy may still be running */
	BUF_OFFLOADING, /* its copy to host is queued; still mapped */
	BUF_EVICTED,    /* unmapped, address kept; the bytes are in host memory */
};

/* A launch of a producer, as captured before its examination: the parameters and a launch
 * config's attributes, and the allocation each pointer word named as it ran (so that the
 * examination can refuse a producer whose inputs were freed since: replaying it would read
 * unmapped memory). */
struct captured_launch {
	struct lynx_replay_kernel kernel;
	CUlaunchAttribute attrs[LYNX_LAUNCH_MAX_ATTRS]; /* kernel.attrs points here */
	uint32_t n_pointers;
	bool too_many_pointers;
	struct pointer_word {
		uint32_t offset;
		CUdeviceptr base;
		size_t size;
	} pointers[MAX_POINTER_WORDS];
	unsigned char params[]; /* kernel.param_bytes */
};

/* A temporary that a producer's launch named as it ran (memory the trainer frees before the
 * backward, not an activation of the arena), and the launch that wrote it, captured with
 * the producer: the examination takes the writer into the replay if the temporary is gone
 * by then (executor_chain.c). */
struct chain_candidate {
	CUdeviceptr base;
	size_t size;
	uint64_t serial; /* the writer's launch */
	uint64_t frees;  /* of its base, seen by then (an address freed and taken again may
	                  * look as it was: the count tells) */
	struct captured_launch *writer;
};

/* Once examined, segment kernel j < n_chain writes a temporary into scratch for the kernels
 * after it: a word of a later kernel names it (kernel, offset, displacement from its base),
 * so that each iteration finds its writer again by that word and this function. */
struct chain_link {
	CUfunction function;
	uint32_t kernel, offset;
	uint64_t displacement;
	size_t size;
};

/* What is known of a RECOMPUTE activation's producer (executor.h). */
enum producer_state {
	PRODUCER_UNEXAMINED, /* offloaded until its producer is captured and examined */
	PRODUCER_REPLAYED,   /* reproduces: evicted without a copy, restored by replay */
	PRODUCER_REFUSED,    /* offloaded for good; the reason was logged */
};

/* A RECOMPUTE activation's window (executor.h, "Windows"). */
enum window_state {
	WINDOW_NONE,      /* replayed on demand: no window planned, or its check failed */
	WINDOW_UNCHECKED, /* offloaded once more, and checked at the window */
	WINDOW_CHECKED,   /* replayed in its window */
};

/* A pack's shared arena allocation (pack.h): taken at the first member's allocation, given
 * back when no member lives; unmapped while every living member is evicted (the arena says
 * which: exec_pack_mapped()). */
struct exec_pack {
	CUdeviceptr base; /* 0: none */
	uint64_t bytes;
	uint32_t first, count; /* its members: ex.packing.member[first .. first + count) */
	UT_hash_handle hh;     /* by base, while it has one */
};

/* One script buffer: its instance in the current iteration, and what it owns across
 * iterations (pinned host memory and events, made once). */
struct exec_buf {
	const struct lynx_prof_script_buffer *sb;
	enum lynx_exec_action action;
	CUdeviceptr addr;       /* in the arena; 0: none */
	struct exec_pack *pack; /* NULL: an arena allocation of its own */
	uint64_t pack_offset;   /* its place in its pack */
	enum buf_state state;
	bool ready_pending; /* consumers must wait for `ready` */
	bool free_pending;  /* the trainer freed it; `freed` says when its stream got there */
	bool donated;       /* its memory went to another allocation; its mapping is hollow */
	bool counted;       /* in `attention` */
	bool listed;        /* in the poll list */
	void *host;         /* pinned, sb->bytes; NULL until the first offload */
	/* RECOMPUTE only. awaiting: allocated in this iteration, its producer not all seen
	 * yet; captured: this instance's producer was seen (and, once replayed, the segment
	 * holds its parameters; misfit: a launch did not fit the segment); by_replay: this
	 * instance was evicted without a copy; examine: it was restored by copy, and its
	 * producer is examined at its next use; unseen: a launch whose parameters Lynx did not
	 * see came while its producer was awaited, and may have been it (exec_unseen_launch). */
	enum producer_state producer;
	bool awaiting, captured, misfit, by_replay, examine, unseen;
	bool copied_out; /* this instance was offloaded: `host` holds its bytes */
	bool riding;     /* mapped again for a sibling's replay to write it in place */
	enum window_state window;
	uint32_t window_token; /* LYNX_EXEC_NO_WINDOW: none */
	/* The iteration (stats.iterations then) whose examination found it replayed: its
	 * window rebuilds it from the next one on. */
	uint64_t examined_iteration;
	/* Scripted activations its replay reads, that the plan does not keep (the first
	 * MAX_READS, by index in bufs): a replay brings those back first, so a rebuild ahead
	 * of its use holds them early too (foresee_budget()). */
	uint32_t reads[MAX_READS];
	uint32_t n_reads;
	/* Its window rebuild moved to its use by keep_budget(): as foreseen after the
	 * examinations (it may go back, to window_was), or because the device went over. */
	bool deferred_foreseen;
	enum window_state window_was;
	/* The window's check in flight: its replay's bytes are copied to check_host (pinned),
	 * done at `checked`; compared with `host` once that and the offload are done. */
	bool check_pending;
	void *check_host;
	uint32_t n_launches; /* of its producer, seen in this iteration */
	/* A fill (a first launch that names it alone: PyTorch's NaN fill of a new tensor under
	 * deterministic algorithms) comes before the kernel that computes it. fill_pending: the
	 * one captured may be such a fill (fill_wait launches since); fill_function: its
	 * producer was found past one, whose later instances are passed over. */
	bool fill_pending;
	uint32_t fill_wait;
	CUfunction fill_function;
	uint32_t chain;           /* replays that a replay of it makes, itself included (examine) */
	uint64_t producer_serial; /* the launch that started it: siblings share it */
	CUfunction producer_function;                           /* the first one's */
	struct captured_launch *launch[MAX_PRODUCER_KERNELS];   /* kept until examined */
	struct chain_candidate candidate[MAX_CHAIN_CANDIDATES]; /* kept until examined */
	uint32_t n_candidates;
	struct chain_link link[MAX_CHAIN_KERNELS]; /* the segment's first n_chain kernels */
	uint32_t n_chain;
	struct lynx_replay_segment *segment; /* once examined and replayed */
	struct lynx_replay_operand *operands;
	uint32_t n_operands;
	CUevent used, copied, ready, freed, checked;
	UT_hash_handle hh; /* by addr */
	struct exec_buf *prev, *next;
};

/* The kinds of the executor's trace (executor.h, LYNX_EXEC_EVENTS). */
enum trace_kind {
#define LYNX_EXEC_EVENT_ENUM(id, name) TRACE_##id,
	LYNX_EXEC_EVENTS(LYNX_EXEC_EVENT_ENUM)
#undef LYNX_EXEC_EVENT_ENUM
};

/* The executor's state: one object, lynx_exec_state, defined in executor.c. */
/* Device memory in use (cuMemGetInfo) at the executor's samples over one followed iteration,
 * host time. */
struct exec_curve {
	uint64_t start_ns, end_ns;
	uint64_t t_ns[MAX_CURVE], bytes[MAX_CURVE];
	uint32_t n;
};

struct exec_state {
	pthread_mutex_t lock;
	bool ever_armed;
	struct lynx_prof_script script;
	struct exec_buf *bufs;
	uint32_t *evict_order, *restore_order; /* buffer indices by their token */
	uint32_t *window_order;                /* those with a window, by its token */
	size_t alloc_cursor, evict_cursor, restore_cursor, window_cursor, n_windowed;
	bool tracking;
	uint32_t pos;     /* tokens matched in this iteration */
	uint32_t ordinal; /* counted allocations since the last token */
	uint64_t prev_sig;
	struct exec_buf *by_addr; /* uthash */
	struct exec_buf *polled;  /* utlist: copies, restores and frees in flight */
	struct lynx_arena *arena;
	struct exec_driver drv;
	CUstream offload_stream, restore_stream;
	/* The device's default memory pool: the trainer's stream-ordered allocations (and the
	 * replays' scratch) come from it, and what it keeps after frees (PyTorch sets it to
	 * keep everything) is device memory in use until trimmed (exec_trim_pool()). */
	CUmemoryPool pool;
	CUstream replay_stream; /* low priority: replays in windows, window checks */
	enum lynx_exec_fault fault;
	struct lynx_exec_expectation expect;
	CUevent iteration_start[3]; /* recorded at each iteration's first token, in turn */
	bool examined_in[3];        /* an examination ran in that iteration: not timed */
	/* The device times of the last timed iterations, in turn: their median is the achieved
	 * step, robust to the few iterations that still settle (first offloads, first trims). */
	uint64_t iteration_samples[EXEC_ITERATION_SAMPLES];
	uint64_t started; /* iterations whose start was recorded */
	struct lynx_exec_stats stats;
	struct traced {
		uint8_t kind; /* LYNX_EXEC_EVENTS */
		uint32_t buf;
		uint64_t start_ns, end_ns; /* CLOCK_MONOTONIC */
	} * traced;
	uint32_t n_traced;
	uint64_t untraced;
	uint64_t evicted_now;
	/* The calls of this iteration where the device went over the budget, with the most
	 * it went over at each (note_over_budget(), keep_budget()). */
	struct {
		uint32_t token;
		uint64_t bytes;
	} over[OVER_POINTS];
	size_t n_over;
	/* Per call of the iteration being followed: the most device memory in use after an
	 * allocation made there (reclaim_for()), 0 where none was looked at. Read at the end of
	 * an iteration with an examination (foresee_budget()). */
	uint64_t *use_at;
	/* The iteration being followed's curve (curves[curve_now]) and the last whole one
	 * without an examination (the other, once curve_done). */
	struct exec_curve curves[2];
	int curve_now;
	bool curve_done;
	uint32_t planned[LYNX_EXEC_ACTION_COUNT];
	uint64_t plan_hash; /* the decisions armed (executor.c's plan_hash()) */
	uint32_t too_small; /* evictions planned for activations below a granule: kept */
	/* Packs of activations below a granule (pack.h); packs_by_base: those with memory. */
	struct lynx_packing packing;
	struct exec_pack *packs, *packs_by_base;
	uint32_t packed; /* activations in packs */
	/* The plan as followed (expect.repredict): how many activations got another action
	 * than planned when it was last predicted, and its prediction then. */
	uint32_t deviations;
	bool followed_known;
	double followed_slowdown;
	uint64_t followed_peak_bytes;
	bool serves[LYNX_HOOK_COUNT]; /* device allocations the arena may serve */
	bool frees[LYNX_HOOK_COUNT];  /* frees of such allocations; async_free: stream-ordered */
	bool async_free[LYNX_HOOK_COUNT];
	bool async_alloc[LYNX_HOOK_COUNT];
	/* Launches a producer may be captured from: the driver's (cuLaunchKernel,
	 * cuLaunchKernelEx and their per-thread forms), whose events carry the parameters and
	 * a launch config's attributes. The runtime's launches reach them (nested). */
	bool replayable[LYNX_HOOK_COUNT];
	/* Replay: its driver table, the activations whose producer is awaited, and what
	 * examinations concluded (the first reason of each verdict, for the summary). */
	bool can_replay;
	struct lynx_replay_driver replay_drv;
	address_range_fn address_range;
	func_name_fn func_name;
	kernel_name_fn kernel_name;
	struct exec_buf *awaiting[MAX_AWAITING];
	uint32_t n_awaiting;
	uint64_t launch_serial; /* launches captured from */
	/* The last launches and allocations, oldest first from history_next (executor_chain.c);
	 * NULL when no activation is planned for recompute. */
	struct history_entry *history;
	uint32_t history_next, history_count;
	struct watched_base *watched; /* uthash: the frees of the candidates' temporaries */
	/* The trainer's streams seen, each with an event marking how far it got; a stream the
	 * trainer destroys is forgotten, and its events kept for the next one
	 * (n_stream_events: the slots that have them). */
	CUstream streams[MAX_STREAMS];
	CUevent stream_marks[MAX_STREAMS];
	uint32_t n_streams, n_stream_events;
	int replay_depth;
	uint64_t verdicts[LYNX_REPLAY_VERDICT_COUNT];
	char verdict_reason[LYNX_REPLAY_VERDICT_COUNT][400];
	/* The window about to be called: each trainer stream's mark before the call, its
	 * buffers, whether the replay stream waits for the marks yet; marked_at is the token
	 * plus one (0: none). What window checks concluded. */
	CUevent window_marks[MAX_STREAMS];
	uint32_t window_marked_at, window_marked_streams;
	uint64_t window_send, window_recv;
	bool window_fenced;
	uint64_t windows_checked, windows_refused;
	uint64_t windows_checked_before; /* windows_checked at the last iteration's end */
	char window_refusal[320];
};

extern struct exec_state lynx_exec_state;
/* Its short name in the executor's files. */
#define ex lynx_exec_state

/* executor.c: the driver, bookkeeping, eviction and restoration, the hooks' side. */
void driver_failed(const char *what, CUresult r);
uint64_t exec_now_ns(void);
void exec_trace(enum trace_kind kind, const struct exec_buf *b, uint64_t start_ns);
void exec_update(struct exec_buf *b);
CUresult exec_wait_for(CUstream stream, CUevent event);
bool exec_done(CUevent e);
void evicted_add(int64_t bytes);
/* Waits on the host for e; a failed wait falls back to waiting for the whole device.
 * False when neither worked: the caller must not take e's work as done. */
bool exec_sync_event(CUevent e);
void exec_settle(struct exec_buf *b);
void complete_frees(bool wait);
void reclaim_for(uint64_t bytes, bool scratch);
bool exec_trim_pool(uint64_t over);
/* Device memory in use now (cuMemGetInfo: on a GPU the whole device's, this rank's in
 * practice, the CUDA context included); false when it cannot be told. */
bool exec_device_in_use(uint64_t *bytes);
struct exec_buf *take_spare(size_t bytes, CUstream stream, struct exec_buf * not );
bool make_resident(struct exec_buf *b, CUstream stream);

/* Maps b's memory again (a pack's, when its mapping is gone) and takes b's memory back
 * (a pack's only when no other member needs it): lynx_arena_restore and lynx_arena_evict
 * for b, with their returns. */
int exec_map(struct exec_buf *b);
int exec_unmap(struct exec_buf *b);
/* Whether p has memory mapped now. */
bool exec_pack_mapped(const struct exec_pack *p);

/* executor_replay.c: replay and windows. */
struct exec_buf *find_buf(CUdeviceptr addr);
/* The pack whose allocation is based at base, or NULL. */
struct exec_pack *pack_based_at(CUdeviceptr base);
/* The activation whose bytes hold addr, which lies in the arena allocation based at base
 * (a pack's member, or the allocation's own activation), or NULL. */
struct exec_buf *buf_at(CUdeviceptr addr, CUdeviceptr base);
void end_capture(struct exec_buf *b);
void await_producer(struct exec_buf *b);
void exec_capture(const struct lynx_event *ev);
void exec_unseen_launch(const struct lynx_event *ev);
void note_stream(CUstream stream);
void forget_stream(CUstream stream);
void exec_examine(struct exec_buf *b, CUstream stream);
int exec_restore(struct exec_buf *b, CUstream stream);
void exec_prefetch(struct exec_buf *b);
void finish_check(struct exec_buf *b, bool wait);
void at_window(struct exec_buf *b, uint32_t t);
/* Which allocation holds addr, as the examination asks (replay.h's lynx_replay_range_of). */
bool exec_range_of(CUdeviceptr addr, CUdeviceptr *base, size_t *size, void *arg);
/* k into c (room for k->param_bytes after it): its parameters and attributes, no pointers
 * found yet. */
void exec_copy_launch(struct captured_launch *c, const struct lynx_replay_kernel *k);
/* The allocations c's parameter words name, into c->pointers. */
void exec_find_pointers(struct captured_launch *c);
/* Whether every allocation launch k names lies in [base, base + size) (a fill of it). */
bool exec_names_only(const struct lynx_replay_kernel *k, CUdeviceptr base, size_t size);

/* executor_chain.c: the writers of temporaries a producer reads, replayed before it. */
int chain_history_open(void); /* 0 or -ENOMEM */
void chain_history_close(void);
/* At an iteration's end: the history closed once no producer can take a chain any more
 * (every one examined, none replayed through a chain), so that launches stop being
 * copied into it. */
void chain_history_settle(void);
void chain_remember_launch(const struct lynx_replay_kernel *k);
void chain_remember_alloc(CUdeviceptr base);
void chain_note_free(CUdeviceptr base);
/* After b's capture kept launch c: the writers of what c names that the history shows
 * allocated and written just before (recursively, up to MAX_CHAIN_CANDIDATES). */
void chain_capture(struct exec_buf *b, const struct captured_launch *c);
void chain_forget(struct exec_buf *b); /* its candidates */
/*
 * At b's examination: the candidates whose temporaries b's producer (or a writer taken)
 * needs because they were freed since, in launch order, into chain[0..*n); false with
 * check's verdict and reason (FREED_OPERAND: one has no writer; TOO_LARGE: more than
 * MAX_CHAIN_KERNELS; too many pointers) when the replay cannot be made.
 */
bool chain_resolve(struct exec_buf *b, const struct chain_candidate **chain, uint32_t *n,
                   struct lynx_replay_check *check);
/* Once b's producer is captured again in a later iteration (its segment refreshed from
 * kernel n_chain on): the chain's writers found again and refreshed. False: not found. */
bool chain_refresh(struct exec_buf *b);

#endif
