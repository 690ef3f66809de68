/* SPDX-License-Identifier: Apache-2.0 */
/* The online profiler: see profiling.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "atomic_file.h"
#include "build.h"
#include "checker.h"
#include "chrome_trace.h"
#include "event.h"
#include "executor.h"
#include "hooks.h"
#include "host_link.h"
#include "lifecycle.h"
#include "log.h"
#include "period.h"
#include "planner.h"
#include "profile.h"
#include "profiling.h"
#include "regular_file.h"
#include "run.h"
#include "summary.h"
#include "timing.h"
#include "whatif.h"

/* Two marks per timed call: room for half a million timed calls of warm-up. */
#define MAX_MARKS (1u << 20)
/* Look for the iteration again once the trace has grown by a quarter (and some). */
#define LOOK_GROWTH_NUM 5
#define LOOK_GROWTH_DEN 4
#define LOOK_MIN_EVENTS 256
/* Synchronisations to wait for the device to reach every mark before going on. */
#define RESOLVE_ATTEMPTS 8
/* Warm-up events kept at most (about 300 MB): a warm-up that has not ended by then (no
 * repeating iteration, a sample that cannot be taken) ends with what it has. */
#define MAX_WARMUP_EVENTS (1u << 21)
/* Repeating sequences a warm-up may rule out as not the iteration (they have no layers)
 * before it gives up: set-up loops come a few at a time (moving the model, building the
 * optimizer, compiling), not by the dozen. */
#define MAX_NOT_ITERATIONS 16

enum phase {
	PHASE_OFF,       /* off mode, or collection could not start */
	PHASE_LEARNING,  /* collecting and timing */
	PHASE_RESOLVING, /* warm-up seen; waiting for the device to reach the marks */
	PHASE_PLANNING,  /* recompute mode: waiting for every rank's profile to plan */
	PHASE_DONE,      /* the profile is written (or given up) */
};

static struct {
	_Atomic int phase;
	pthread_mutex_t lock;         /* the trace; held by consume and by a look's copy */
	pthread_mutex_t look;         /* one look at a time */
	struct lynx_prof_trace trace; /* arrival order; dev_* hold mark numbers until resolved */
	size_t candidate_period;      /* the period (tokens) the last look found; 0: none */
	size_t candidate_since;       /* trace.count when that period was first found */
	size_t candidate_from;        /* where its first iteration began then (trace index) */
	/* Units found to repeat, with a host synchronisation, but without layers: set-up
	 * loops (period.h), left out of every later look and of the build. */
	struct lynx_prof_unit not_iterations[MAX_NOT_ITERATIONS];
	size_t not_iterations_count;
	/* Why the one that covered the most tokens was ruled out: the likeliest to be the
	 * iteration, whose layers Lynx could not find (set-up loops cover less). */
	char not_iteration_why[512];
	size_t not_iteration_tokens; /* what that one covered: period x repetitions */
	uint64_t layered_unit;       /* the unit whose iteration segmented at a look; 0: none */
	bool sample_armed;           /* kernel-level timing was switched on for the sample */
	bool full;                   /* MAX_WARMUP_EVENTS reached: collect nothing more */
	uint64_t recorded_at_look;   /* the recorder's count at the last look */
	uint64_t plan_since_ns;      /* PLANNING: when it began (CLOCK_MONOTONIC) */
	uint64_t plan_tried_ns;      /* PLANNING: the last try */
	struct lynx_prof_trace view; /* RESOLVING: the sorted copy being finished */
	int attempts;
	bool out_of_memory;
	uint32_t warmup;
	uint64_t budget;         /* LYNX_BUDGET, for the what-if; 0: a ladder of budgets */
	uint32_t budget_percent; /* LYNX_BUDGET as a share of each rank's own peak; 0: bytes */
	/* Without LYNX_BUDGET, LYNX_MAX_SLOWDOWN (hundredths of a percent), and its text and
	 * whether it is the default, for the plan's summary. */
	uint32_t max_slowdown_bp;
	char max_slowdown[16];
	bool max_slowdown_default;
	/* LYNX_CONTENTION and LYNX_CONTENTION_COMM as slowdown factors. */
	struct lynx_interference interference;
	bool recompute;           /* LYNX_MODE=recompute: plan online once every profile is there */
	char planner[32];         /* LYNX_PLANNER */
	char plan_path[PATH_MAX]; /* LYNX_PLAN, or "" */
	bool timing;              /* LYNX_TIMING=device and the timing marks are ready */
	bool output_ok;
	char out_dir[PATH_MAX];
	struct lynx_profile profile;
	bool have_profile;
	/* The profile was made at exit: the job ended before warm-up did. Its times are the
	 * host's (no CUDA call at exit), so no plan and no what-if come from it (WARMUP_HINT
	 * says what to do). */
	bool profile_at_exit;
	struct lynx_prof_script script; /* the chosen iteration's, for the executor */
	int fault;                      /* LYNX_FAULT, for the executor */
	bool pack;                      /* LYNX_PACK */
	/* Recompute mode, during warm-up: the most device memory in use (cuMemGetInfo) seen
	 * before the program's timed stream work (lynx_profiling_sample_memory). */
	_Atomic uint64_t device_peak_used;
} prof = {.lock = PTHREAD_MUTEX_INITIALIZER, .look = PTHREAD_MUTEX_INITIALIZER};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- The driver, for the timing marks ----------------------------------------------------- */

/*
 * Through Lynx's own wrappers, inside lynx_nested_begin/end: the calls are counted like the
 * trainer's (so simgpu's counters and Lynx's agree) but neither recorded nor timed.
 */
static CUresult drv_event_create(CUevent *event, unsigned int flags)
{
	lynx_nested_begin();
	CUresult r = cuEventCreate(event, flags);
	lynx_nested_end();
	return r;
}

static CUresult drv_event_record(CUevent event, CUstream stream)
{
	lynx_nested_begin();
	CUresult r = cuEventRecord(event, stream);
	lynx_nested_end();
	return r;
}

/* CUDA 12.8 added cuEventElapsedTime_v2 (and deprecated the first); older drivers lack it. */
static CUresult drv_event_elapsed(float *ms, CUevent start, CUevent end)
{
	static _Atomic int has_v2 = -1;
	int v2 = atomic_load(&has_v2);
	CUresult r;

	if (v2 < 0) {
		v2 = lynx_resolve_real(LYNX_HOOK_cuEventElapsedTime_v2) != NULL;
		atomic_store(&has_v2, v2);
	}
	lynx_nested_begin();
	r = v2 ? cuEventElapsedTime_v2(ms, start, end) : cuEventElapsedTime(ms, start, end);
	lynx_nested_end();
	return r;
}

static CUresult drv_event_destroy(CUevent event)
{
	lynx_nested_begin();
	CUresult r = cuEventDestroy_v2(event);
	lynx_nested_end();
	return r;
}

static const struct lynx_timing_driver timing_driver = {
        drv_event_create,
        drv_event_record,
        drv_event_elapsed,
        drv_event_destroy,
};

/* The shim's own driver functions, for the host link's measurement (made inside
 * lynx_nested_begin/end: counted like the trainer's calls, not recorded). */
static const struct lynx_host_link_driver host_link_driver = {
        .mem_alloc = cuMemAlloc_v2,
        .mem_free = cuMemFree_v2,
        .mem_alloc_host = cuMemAllocHost_v2,
        .mem_free_host = cuMemFreeHost,
        .stream_create = cuStreamCreate,
        .stream_destroy = cuStreamDestroy_v2,
        .stream_synchronize = cuStreamSynchronize,
        .event_create = cuEventCreate,
        .event_destroy = cuEventDestroy_v2,
        .event_record = cuEventRecord,
        .event_elapsed = drv_event_elapsed,
        .memcpy_dtoh_async = cuMemcpyDtoHAsync_v2,
        .memcpy_htod_async = cuMemcpyHtoDAsync_v2,
};

/*
 * The link to pinned host memory, for the planners' OFFLOAD decisions: measured once, as
 * the profile is built from a host synchronisation (never at exit, where Lynx makes no CUDA
 * call), with device timing on, in recompute mode only: it holds 4 MiB of device memory
 * for a moment, and profiling-only mode changes nothing, not even the peak.
 */
static void measure_host_link(struct lynx_profile *p)
{
	struct lynx_host_link link;
	int err;

	lynx_nested_begin();
	err = lynx_host_link_measure(&host_link_driver, LYNX_HOST_LINK_BYTES, &link);
	lynx_nested_end();
	if (err) {
		lynx_info("host link not measured (%s): the planners will not offload",
		          strerror(-err));
		return;
	}
	p->host_link = (struct lynx_profile_host_link){link.d2h_bytes_per_s, link.h2d_bytes_per_s,
	                                               link.latency_s};
	lynx_info("host link: %.1f GB/s to host, %.1f GB/s to the device, %.1f us latency",
	          link.d2h_bytes_per_s / 1e9, link.h2d_bytes_per_s / 1e9, link.latency_s * 1e6);
}

/* ---- Collecting ------------------------------------------------------------------------------ */

bool lynx_profiling_start(const struct lynx_config *cfg, bool output_ok)
{
	if (cfg->mode == LYNX_MODE_OFF || cfg->warmup == 0)
		return false;
	prof.warmup = cfg->warmup;
	prof.budget = cfg->budget.bytes;
	prof.budget_percent = cfg->budget.percent;
	prof.recompute = cfg->mode == LYNX_MODE_RECOMPUTE;
	prof.interference = (struct lynx_interference){1.0 + cfg->contention / 10000.0,
	                                               1.0 + cfg->contention_comm / 10000.0};
	prof.fault = cfg->fault;
	prof.pack = cfg->pack == LYNX_PACK_ON;
	lynx_config_format(cfg, LYNX_OPT_LYNX_PLANNER, prof.planner, sizeof(prof.planner));
	snprintf(prof.plan_path, sizeof(prof.plan_path), "%s", cfg->plan ? cfg->plan : "");
	/* LYNX_MAX_SLOWDOWN chooses the budget of a planner that takes one, when none is
	 * given and no plan either. */
	const struct lynx_planner *pl = lynx_planner_find(prof.planner);
	prof.max_slowdown_bp =
	        prof.budget || prof.budget_percent || prof.plan_path[0] || !pl || !pl->budgeted
	                ? 0
	                : cfg->max_slowdown;
	lynx_config_format(cfg, LYNX_OPT_LYNX_MAX_SLOWDOWN, prof.max_slowdown,
	                   sizeof(prof.max_slowdown));
	prof.max_slowdown_default = !getenv(lynx_options[LYNX_OPT_LYNX_MAX_SLOWDOWN].name);
	prof.output_ok = output_ok;
	snprintf(prof.out_dir, sizeof(prof.out_dir), "%s", cfg->out_dir);
	if (lynx_prof_trace_init(&prof.trace, (int)getpid())) {
		lynx_warn("out of memory: the online profiler is off");
		return false;
	}
	prof.timing = cfg->timing == LYNX_TIMING_DEVICE;
	if (prof.timing && lynx_timing_init(&timing_driver, MAX_MARKS)) {
		lynx_warn("cannot prepare device timing: the profile will have host times only");
		prof.timing = false;
	}
	lynx_slow_path_switch(LYNX_SLOW_TIMING, prof.timing);
	atomic_store(&prof.phase, PHASE_LEARNING);
	return true;
}

/* The payload of each kind (events.def) into the profiler's event. */
static void copy_none(const struct lynx_event *ev, struct lynx_prof_event *out)
{
}

static void copy_mem(const struct lynx_event *ev, struct lynx_prof_event *out)
{
	out->u.mem.ptr = ev->u.mem.ptr;
	out->u.mem.bytes = ev->u.mem.bytes;
}

static void copy_copy(const struct lynx_event *ev, struct lynx_prof_event *out)
{
	out->u.copy.dst = ev->u.copy.dst;
	out->u.copy.src = ev->u.copy.src;
	out->u.copy.bytes = ev->u.copy.bytes;
	out->u.copy.direction = ev->u.copy.direction;
}

static void copy_launch(const struct lynx_event *ev, struct lynx_prof_event *out)
{
	size_t room = ev->size > sizeof(*ev) ? ev->size - sizeof(*ev) : 0;

	out->u.launch.function = ev->u.launch.function;
	out->u.launch.name =
	        lynx_launch_function_identity(ev->u.launch.function, &out->u.launch.name_hash);
	memcpy(out->u.launch.grid, ev->u.launch.grid, sizeof(out->u.launch.grid));
	memcpy(out->u.launch.block, ev->u.launch.block, sizeof(out->u.launch.block));
	out->u.launch.shared = ev->u.launch.shared_mem;
	out->u.launch.param_count = ev->u.launch.param_count;
	out->u.launch.param_bytes =
	        ev->u.launch.param_bytes < room ? ev->u.launch.param_bytes : (uint32_t)room;
	/* The bytes follow the record; lynx_prof_trace_append copies them. */
	out->u.launch.params = out->u.launch.param_bytes ? (const uint8_t *)(ev + 1) : NULL;
}

static void copy_sync(const struct lynx_event *ev, struct lynx_prof_event *out)
{
	out->u.sync.handle = ev->u.sync.handle;
}

static void copy_nccl(const struct lynx_event *ev, struct lynx_prof_event *out)
{
	out->u.nccl.comm = ev->u.nccl.comm;
	out->u.nccl.send = ev->u.nccl.sendbuf;
	out->u.nccl.recv = ev->u.nccl.recvbuf;
	out->u.nccl.count = ev->u.nccl.count;
	out->u.nccl.type = ev->u.nccl.datatype;
	out->u.nccl.op = ev->u.nccl.op;
	out->u.nccl.peer = ev->u.nccl.peer;
	out->u.nccl.group_depth = ev->u.nccl.group_depth;
}

void lynx_profiling_event_view(const struct lynx_event *ev, struct lynx_prof_event *out)
{
	memset(out, 0, sizeof(*out));
	out->t_ns = ev->host_ns;
	out->tid = ev->tid;
	out->hook = ev->hook < LYNX_HOOK_COUNT ? lynx_hooks[ev->hook].symbol : "unknown";
	out->kind = ev->kind < LYNX_EV_COUNT ? (enum lynx_prof_kind)ev->kind : LYNX_PROF_OTHER;
	out->nested = ev->flags & LYNX_EVENT_NESTED;
	out->captured = ev->flags & LYNX_EVENT_CAPTURED;
	out->result = ev->result;
	out->stream = ev->stream;
	/* Mark numbers until resolve_marks turns them into device times. */
	if (ev->mark_start && ev->mark_end) {
		out->dev_start_ns = ev->mark_start;
		out->dev_end_ns = ev->mark_end;
	}
	switch (ev->kind) {
#define LYNX_EVENT(id, name, payload)    \
	case LYNX_EV_##id:               \
		copy_##payload(ev, out); \
		break;
#include "events.def"
#undef LYNX_EVENT
	default:
		break;
	}
}

void lynx_profiling_consume(const struct lynx_event *ev)
{
	struct lynx_prof_event out;

	if (atomic_load_explicit(&prof.phase, memory_order_acquire) != PHASE_LEARNING)
		return;
	lynx_profiling_event_view(ev, &out);
	pthread_mutex_lock(&prof.lock);
	/* Checked again under the lock: a look on a trainer thread may have ended warm-up and
	 * freed the trace since the check above. */
	if (prof.trace.count >= MAX_WARMUP_EVENTS)
		prof.full = true;
	if (atomic_load(&prof.phase) == PHASE_LEARNING && !prof.out_of_memory && !prof.full &&
	    lynx_prof_trace_append(&prof.trace, &out,
	                           out.kind == LYNX_PROF_LAUNCH ? out.u.launch.params : NULL)) {
		prof.out_of_memory = true;
		lynx_warn("out of memory keeping warm-up events: the profile will cover %zu events",
		          prof.trace.count);
	}
	pthread_mutex_unlock(&prof.lock);
}

/* ---- Finishing --------------------------------------------------------------------------- */

/*
 * Turns the view's mark numbers into device times on one timeline starting at 0, once the
 * device has reached every mark (or final: then unreached ones are left untimed). Returns
 * the marks not reached yet, having changed nothing; unresolvable ones (never recorded, a
 * driver error) leave their event untimed.
 */
static size_t resolve_marks(struct lynx_prof_trace *view, bool final)
{
	int64_t earliest = INT64_MAX, start, end;
	size_t pending = 0;

	for (size_t i = 0; i < view->count && !final; i++) {
		const struct lynx_prof_event *e = &view->events[i];
		if (e->dev_start_ns && e->dev_end_ns &&
		    (lynx_timing_resolve((uint32_t)e->dev_start_ns, &start) == -EAGAIN ||
		     lynx_timing_resolve((uint32_t)e->dev_end_ns, &end) == -EAGAIN))
			pending++;
	}
	if (pending)
		return pending;
	size_t timed = 0, failed = 0;
	/* Two passes: the timeline starts at the earliest resolved mark. */
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < view->count; i++) {
			struct lynx_prof_event *e = &view->events[i];
			if (!e->dev_start_ns || !e->dev_end_ns)
				continue;
			if (lynx_timing_resolve((uint32_t)e->dev_start_ns, &start) ||
			    lynx_timing_resolve((uint32_t)e->dev_end_ns, &end) || end < start) {
				if (pass == 1) {
					e->dev_start_ns = e->dev_end_ns = 0;
					failed++;
				}
				continue;
			}
			timed += pass == 1;
			if (pass == 0 && start < earliest)
				earliest = start;
			if (pass == 1) {
				e->dev_start_ns = (uint64_t)(start - earliest);
				e->dev_end_ns = (uint64_t)(end - earliest);
			}
		}
	}
	lynx_info("device timing: %zu calls timed, %zu could not be (%u marks used)", timed, failed,
	          lynx_timing_used());
	return 0;
}

static void profile_path(char *path, size_t len, const char *stem, const char *ext)
{
	int rank = lynx_job_rank();

	if (rank >= 0)
		snprintf(path, len, "%s/%s.%d.%s", prof.out_dir, stem, rank, ext);
	else
		snprintf(path, len, "%s/%s.pid%d.%s", prof.out_dir, stem, (int)getpid(), ext);
}

/*
 * What the recorder lost, as a clause to end a "no profile" line, or "": a profile built
 * from an incomplete record is no profile, and a reason that left this out would send the
 * user looking at their trainer instead of at LYNX_RING_BYTES or LYNX_RECORDER_BUDGET.
 */
static const char *recorder_losses(char *buf, size_t len)
{
	struct lynx_recorder_stats stats;

	lynx_recorder_stats(&stats);
	buf[0] = 0;
	if (stats.dropped || stats.threads_unrecorded)
		snprintf(buf, len,
		         "; the recorder dropped %llu of %llu events and left %u of %u threads "
		         "unrecorded (rings full or over budget: raise LYNX_RING_BYTES, per "
		         "thread, or LYNX_RECORDER_BUDGET, in all)",
		         (unsigned long long)stats.dropped,
		         (unsigned long long)(stats.recorded + stats.dropped),
		         stats.threads_unrecorded, stats.threads + stats.threads_unrecorded);
	return buf;
}

/* "; 2 repeating sequences ... (the last, ...)", for the lines that say no profile was
 * made, or "": a set-up loop, or an iteration whose layers Lynx cannot find, is what the
 * user needs to tell apart. */
static const char *set_up_clause(char *buf, size_t len)
{
	buf[0] = '\0';
	if (prof.not_iterations_count)
		snprintf(buf, len,
		         "; %zu repeating sequence(s) with host synchronisations were passed over, "
		         "having no layers that keep activations for a backward (set-up loops, or "
		         "iterations whose layers Lynx cannot find; the longest, %s)",
		         prof.not_iterations_count, prof.not_iteration_why);
	return buf;
}

/* Builds and writes the profile from the resolved view; frees what was collected. */
static void write_profile(struct lynx_prof_trace *view, bool at_exit)
{
	struct lynx_profile_run run;
	struct lynx_prof_build_options opt = {.rank = lynx_job_rank(),
	                                      .world = lynx_job_world(),
	                                      .run = &run,
	                                      .script = prof.recompute ? &prof.script : NULL,
	                                      .not_iterations = prof.not_iterations,
	                                      .not_iterations_count = prof.not_iterations_count};
	char why[256], path[PATH_MAX + 64];
	int err;

	lynx_job_run(&run);
	err = lynx_prof_build_profile(view, &opt, &prof.profile, why, sizeof(why));
	if (err) {
		/* A program that repeats but has no layers (a test loop, an inference server),
		 * or a run too short to learn from: Lynx goes on observing, and says why at the
		 * default level (nothing about this job will be planned). */
		char losses[256], set_up[768];
		lynx_warn("no profile%s: %s%s%s", at_exit ? " at exit" : "",
		          err == -ENOMEM ? "out of memory" : why,
		          set_up_clause(set_up, sizeof(set_up)),
		          recorder_losses(losses, sizeof(losses)));
	} else {
		prof.have_profile = true;
		if (!at_exit && prof.timing && prof.recompute)
			measure_host_link(&prof.profile);
		profile_path(path, sizeof(path), "profile", "json");
		if (!prof.output_ok)
			lynx_info("profile built; LYNX_OUT is not writable, not written");
		else if ((err = lynx_profile_write(&prof.profile, path)))
			lynx_warn("cannot write %s: %s", path, strerror(-err));
		else
			lynx_info("profile written to %s", path);
	}
	/* The warm-up's timeline, for Perfetto and lynx report; written without a profile
	 * too, since it shows what was seen. */
	if (prof.output_ok) {
		struct lynx_prof_chrome_options copt = {lynx_job_rank(), lynx_job_world()};
		profile_path(path, sizeof(path), "trace", "json");
		err = lynx_prof_write_chrome_trace(view, prof.have_profile ? &prof.profile : NULL,
		                                   &copt, path, why, sizeof(why));
		if (err)
			lynx_warn("cannot write the trace: %s",
			          err == -ENOMEM ? "out of memory" : why);
	}
}

/* Frees the collected events: nothing reads them once the profile is built. */
static void drop_collected(void)
{
	pthread_mutex_lock(&prof.lock);
	free(prof.view.events);
	prof.view.events = NULL;
	lynx_prof_trace_free(&prof.trace);
	pthread_mutex_unlock(&prof.lock);
	/* Closed, not freed: a trainer thread may be between reserving a mark and recording
	 * it. The events go with the CUDA context. */
	lynx_timing_close();
}

/* Host times only: the view's marks are dropped unresolved. */
static void strip_marks(struct lynx_prof_trace *view)
{
	for (size_t i = 0; i < view->count; i++)
		view->events[i].dev_start_ns = view->events[i].dev_end_ns = 0;
}

/*
 * RESOLVING: resolve the view's marks and write the profile, or wait for the device. At
 * exit Lynx makes no CUDA call (the trainer's runtime may already be torn down): a warm-up
 * that ends with the process gets host times, and the events are left to the context.
 */
static void try_finish(bool at_exit)
{
	size_t pending = at_exit ? 0 : resolve_marks(&prof.view, false);

	if (pending && ++prof.attempts < RESOLVE_ATTEMPTS)
		return;
	if (at_exit)
		strip_marks(&prof.view);
	else if (pending)
		resolve_marks(&prof.view, true);
	write_profile(&prof.view, at_exit);
	prof.profile_at_exit = at_exit && prof.have_profile;
	drop_collected();
	prof.plan_since_ns = now_ns();
	prof.plan_tried_ns = 0;
	atomic_store(&prof.phase,
	             prof.recompute && prof.have_profile ? PHASE_PLANNING : PHASE_DONE);
}

/*
 * A copy of the trace so far, sorted by host time; it shares the trace's storage (names,
 * parameter bytes), so it lives only as long as the trace. Returns 0 or -ENOMEM.
 */
static int sorted_view(struct lynx_prof_trace *view)
{
	int err = 0;

	pthread_mutex_lock(&prof.lock);
	memset(view, 0, sizeof(*view));
	view->pid = prof.trace.pid;
	view->count = prof.trace.count;
	view->events = malloc((view->count ? view->count : 1) * sizeof(*view->events));
	if (view->events)
		memcpy(view->events, prof.trace.events, view->count * sizeof(*view->events));
	else
		err = -ENOMEM;
	pthread_mutex_unlock(&prof.lock);
	if (!err)
		lynx_prof_trace_sort(view);
	return err;
}

/* Whether the process launched any kernel while Lynx learned. */
static bool launched(const struct lynx_prof_trace *view)
{
	for (size_t i = 0; i < view->count; i++)
		if (view->events[i].kind == LYNX_PROF_LAUNCH)
			return true;
	return false;
}

/*
 * Whether a confirmed period is the training iteration: it segments into layers, and those
 * layers keep activations from their forward to their backward. A set-up loop that
 * synchronises once per tensor repeats too (a model moved to the device one tensor at a
 * time, a per-parameter check, autotuning), often once per layer, and tensors of equal
 * sizes can even pass for layers; but it keeps nothing for a backward. Its unit is ruled
 * out for good and the look tries the next candidate. The test is the profile's own build
 * (host times), once per unit. Returns 1 when ruled out, 0 when it is the iteration,
 * -ENOMEM.
 */
static int rule_out_setup(const struct lynx_prof_trace *view,
                          const struct lynx_prof_iterations *iters)
{
	struct lynx_prof_build_options opt = {.rank = -1,
	                                      .world = -1,
	                                      .not_iterations = prof.not_iterations,
	                                      .not_iterations_count = prof.not_iterations_count};
	char why[sizeof(prof.not_iteration_why) - 64];
	struct lynx_profile p;
	int err = lynx_prof_build_profile(view, &opt, &p, why, sizeof(why));

	if (err == -ENOMEM)
		return err;
	if (!err) {
		uint64_t saved = 0;
		for (size_t l = 0; l < p.layer_count; l++)
			saved += p.layers[l].saved_bytes;
		snprintf(why, sizeof(why),
		         "its %zu \"layers\" keep nothing from a forward for a backward",
		         p.layer_count);
		lynx_profile_free(&p);
		if (saved)
			return 0;
	}
	if (prof.not_iterations_count < MAX_NOT_ITERATIONS)
		prof.not_iterations[prof.not_iterations_count++] =
		        (struct lynx_prof_unit){iters->unit_key, iters->period};
	if (iters->period * iters->count >= prof.not_iteration_tokens) {
		prof.not_iteration_tokens = iters->period * iters->count;
		snprintf(prof.not_iteration_why, sizeof(prof.not_iteration_why),
		         "%zu tokens x %zu: %s", iters->period, iters->count, why);
	}
	lynx_info("warm-up: a sequence of %zu tokens repeated %zu times has no layers that keep "
	          "activations for a backward (%s): taken for set-up; looking on",
	          iters->period, iters->count, why);
	return 1;
}

/*
 * Looks for the iteration. Timing starts at NCCL calls only; once a period is confirmed and
 * its iterations hold layers, it arms kernel-level timing (timing.h) from this
 * synchronisation on, and once an iteration is timed whole (the sample), it goes back to
 * NCCL calls. With at least `needed` iterations and the sample (or final, at exit, where
 * nothing is resolved anyway), it moves to RESOLVING.
 */
static void look(uint32_t needed, bool final, bool forced)
{
	struct lynx_prof_iterations iters;
	struct lynx_prof_trace view;
	char why[256];
	int found;

	if (sorted_view(&view))
		return;
	while ((found = lynx_prof_find_iterations_phase(&view, prof.not_iterations,
	                                                prof.not_iterations_count, 0, &iters, why,
	                                                sizeof(why))) == 0) {
		size_t count = iters.count, period = iters.period;
		bool sampled = false;
		for (size_t i = 0; i < iters.count && !sampled; i++)
			sampled = lynx_prof_fully_timed(&view, iters.iter[i].first,
			                                iters.iter[i].end);
		/*
		 * A period must still hold once its stretch of the trace, from its first
		 * iteration on, has grown by half since it was first found. Early on, before an
		 * iteration has repeated, the repeating unit is a micro-batch (or a layer); the
		 * optimizer, the loss and the gradient reduction of the next iteration end such
		 * a run and a longer period takes over. What came before the period's first
		 * iteration (set-up, first steps that differ: compilation, fp16 steps that skip
		 * the optimizer) says nothing of it and does not delay it.
		 */
		if (period != prof.candidate_period) {
			prof.candidate_period = period;
			prof.candidate_since = view.count;
			prof.candidate_from = iters.iter[0].first;
		}
		bool confirmed = final || forced ||
		                 (view.count - prof.candidate_from) * 2 >=
		                         (prof.candidate_since - prof.candidate_from) * 3;
		if (confirmed && count >= 2 && iters.unit_key != prof.layered_unit) {
			int ruled = rule_out_setup(&view, &iters);
			if (ruled == 0)
				prof.layered_unit = iters.unit_key;
			if (ruled > 0) {
				lynx_prof_iterations_free(&iters);
				prof.candidate_period = 0;
				if (prof.not_iterations_count < MAX_NOT_ITERATIONS)
					continue;
				free(view.events);
				lynx_warn(
				        "no profile: %d repeating sequences with host "
				        "synchronisations had no layers that keep activations for "
				        "a backward (the longest, %s); observing only",
				        MAX_NOT_ITERATIONS, prof.not_iteration_why);
				lynx_slow_path_switch(LYNX_SLOW_TIMING, false);
				drop_collected();
				atomic_store(&prof.phase, PHASE_DONE);
				return;
			}
		}
		lynx_prof_iterations_free(&iters);
		/* Marks run out (or were never there): the sample cannot be taken. */
		if (prof.timing && lynx_timing_used() >= MAX_MARKS) {
			prof.timing = false;
			lynx_info("warm-up: %u timing marks used up; host times where the sample "
			          "is missing",
			          MAX_MARKS);
		}
		if (confirmed && count >= 2 && prof.timing && !prof.sample_armed) {
			prof.sample_armed = true;
			atomic_store(&lynx_timing_kernels, true);
			lynx_info("warm-up: period confirmed after %zu iterations; timing the next "
			          "one at kernel level",
			          count);
		} else if (sampled && atomic_load(&lynx_timing_kernels)) {
			atomic_store(&lynx_timing_kernels, false);
			lynx_info("warm-up: kernel-level sample taken; NCCL calls only from now");
		}
		if (count >= needed && confirmed && (sampled || final || forced || !prof.timing)) {
			lynx_slow_path_switch(LYNX_SLOW_TIMING, false);
			atomic_store(&prof.phase, PHASE_RESOLVING);
			prof.view = view;
			lynx_info("warm-up: %zu identical iterations in %zu events", count,
			          view.count);
			try_finish(final);
			return;
		}
		break;
	}
	if (found && final && launched(&view)) {
		char losses[256], set_up[768];
		lynx_warn("no profile: %s%s%s", why, set_up_clause(set_up, sizeof(set_up)),
		          recorder_losses(losses, sizeof(losses)));
	} else if (found && final) {
		/* a process that launched nothing: a launcher, a compile worker */
		lynx_info("no profile: %s", why);
	}
	free(view.events);
}

/* Every rank's profile, read from LYNX_OUT (this one's from memory when alone). */
struct job_profiles {
	struct lynx_profile *owned; /* read from files, freed by job_profiles_free */
	const struct lynx_profile **ranks;
	int read, world;
	int other_runs; /* files left by another launch in a reused LYNX_OUT, not read */
};

static int job_profiles_read(struct job_profiles *j)
{
	char path[PATH_MAX + 64], why[256];

	j->world = lynx_job_world() > 0 ? lynx_job_world() : 1;
	j->read = 0;
	j->other_runs = 0;
	j->owned = calloc((size_t)j->world, sizeof(*j->owned));
	j->ranks = calloc((size_t)j->world, sizeof(*j->ranks));
	if (!j->owned || !j->ranks)
		return -ENOMEM;
	if (j->world == 1) {
		j->ranks[j->read++] = &prof.profile;
		return 0;
	}
	for (int r = 0; r < j->world; r++) {
		snprintf(path, sizeof(path), "%s/profile.%d.json", prof.out_dir, r);
		if (lynx_profile_read(path, &j->owned[j->read], why, sizeof(why)))
			continue;
		/* A file another launch left in a reused LYNX_OUT is not this rank's yet (its
		 * rank writes over it at the end of its warm-up). */
		if (!lynx_run_same(&prof.profile, &j->owned[j->read])) {
			lynx_debug("%s is another run's (%s \"%s\"): not read", path,
			           lynx_profile_run_source_name(j->owned[j->read].run.source),
			           j->owned[j->read].run.id);
			lynx_profile_free(&j->owned[j->read]);
			j->other_runs++;
			continue;
		}
		j->ranks[j->read] = &j->owned[j->read];
		j->read++;
	}
	return 0;
}

/* ", and 2 of another run", for the lines that count the profiles read, or "". */
static const char *other_runs_clause(const struct job_profiles *j, char *buf, size_t len)
{
	buf[0] = '\0';
	if (j->other_runs)
		snprintf(buf, len, ", and %d of another run (an earlier launch's)", j->other_runs);
	return buf;
}

static void job_profiles_free(struct job_profiles *j)
{
	for (int r = 0; j->owned && j->world > 1 && r < j->read; r++)
		lynx_profile_free(&j->owned[r]);
	free(j->owned);
	free(j->ranks);
}

static void rank_tag(char *tag, size_t len)
{
	snprintf(tag, len, "lynx[rank %d]", lynx_job_rank() < 0 ? 0 : lynx_job_rank());
}

/* What a job that ended before warm-up did needs, for its warning and summary (%u: the
 * LYNX_WARMUP in force). */
#define WARMUP_HINT                                                                            \
	"run more iterations (warm-up needs LYNX_WARMUP=%u identical ones, and a few more to " \
	"confirm and time them)"

/*
 * The job's what-if, printed once, by rank 0: it needs every stage's profile, which the
 * other ranks wrote into LYNX_OUT at the end of their warm-up. Plain CPU work at exit.
 */
static void print_whatif(void)
{
	struct job_profiles j;
	struct lynx_whatif w;
	char why[256], tag[32], others[80];

	rank_tag(tag, sizeof(tag));
	if (prof.profile_at_exit) {
		/* A line of the summary, as the what-if would be (recompute mode has warned
		 * already, with its plan). */
		if (!prof.recompute)
			fprintf(stderr,
			        "%s: what-if: none: the job ended before warm-up did, and the "
			        "profile made at exit has host times only; " WARMUP_HINT "\n",
			        tag, prof.warmup);
		return;
	}
	if (job_profiles_read(&j))
		fprintf(stderr, "%s: what-if: out of memory\n", tag);
	else if (j.read < j.world)
		fprintf(stderr,
		        "%s: what-if: %d of %d ranks' profiles in %s%s; run `lynx plan "
		        "%s/profile.*.json` once all are there\n",
		        tag, j.read, j.world, prof.out_dir,
		        other_runs_clause(&j, others, sizeof(others)), prof.out_dir);
	else if (lynx_whatif_from_profiles(j.ranks, (size_t)j.read, prof.budget, &prof.interference,
	                                   &w, why, sizeof(why)))
		fprintf(stderr, "%s: what-if: no plan: %s\n", tag, why);
	else
		lynx_whatif_print(stderr, tag, &w);
	job_profiles_free(&j);
}

void lynx_profiling_sample_memory(void)
{
	size_t free_bytes, total;
	uint64_t used, seen;

	if (!prof.recompute ||
	    atomic_load_explicit(&prof.phase, memory_order_relaxed) != PHASE_LEARNING)
		return;
	lynx_nested_begin();
	CUresult r = cuMemGetInfo_v2(&free_bytes, &total);
	lynx_nested_end();
	if (r != CUDA_SUCCESS || total < free_bytes)
		return;
	used = total - free_bytes;
	seen = atomic_load_explicit(&prof.device_peak_used, memory_order_relaxed);
	while (used > seen && !atomic_compare_exchange_weak(&prof.device_peak_used, &seen, used))
		;
}

/*
 * The budget the plan is made for: LYNX_BUDGET counts the device memory in use, as
 * cuMemGetInfo and the executor's budget do, while a plan counts the profile's tensors.
 * Taken off it: what warm-up saw in use beyond the profile's peak (the CUDA context, NCCL's
 * buffers, the allocator's rounding and caching). A replay's scratch is the plan's own to
 * count: the checker holds the workspaces a rebuilt group's producer run names beside its
 * rebuild while it runs (policy/problem.h, a group's scratch_bytes), since a replay writes a
 * workspace to scratch of its size. *beyond says how much; 0 (no budget) stays 0.
 */
static uint64_t planning_budget(uint64_t *beyond)
{
	uint64_t used = atomic_load(&prof.device_peak_used),
	         tensors = prof.profile.memory.peak_bytes;

	*beyond = used > tensors ? used - tensors : 0;
	if (!prof.budget || *beyond >= prof.budget || prof.fault == LYNX_EXEC_FAULT_PLAN_LOW)
		return prof.budget;
	return prof.budget - *beyond;
}

/* A plan's peak of tensors as the device will show it (cuMemGetInfo), and the peak warm-up
 * measured in those terms: what planning_budget took off comes back on. */
static uint64_t in_device_terms(uint64_t tensor_bytes)
{
	uint64_t beyond;

	planning_budget(&beyond);
	return tensor_bytes + beyond;
}

static uint64_t measured_peak(void)
{
	uint64_t used = atomic_load(&prof.device_peak_used);

	return used > prof.profile.memory.peak_bytes ? used : prof.profile.memory.peak_bytes;
}

/* How long recompute mode waits for the other ranks' profiles, and how often it looks. */
#define PLAN_WAIT_NS (120ull * 1000000000ull)
#define PLAN_RETRY_NS (100ull * 1000000ull)

/* This rank's pipeline stage in the plan: as its profile names it, else by warm-up forwards
 * (stage s of p runs p - s - 1 under 1F1B). */
static uint32_t this_stage(const struct lynx_whatif_plan *wp)
{
	uint32_t n = wp->problem->n_stages, w = prof.profile.warmup_forwards;

	if (lynx_profile_pipeline_known(&prof.profile) && prof.profile.pipeline_stages == n)
		return (uint32_t)prof.profile.pipeline_stage;
	return w + 1 <= n ? n - 1 - w : 0;
}

/* The budget this rank holds, in cuMemGetInfo's terms: LYNX_BUDGET itself; its share of
 * this stage's peak of tensors; or, with no budget, the one the planner was given (the
 * smallest within LYNX_MAX_SLOWDOWN, or the measured peak) - the last two with what
 * planning_budget takes off back on. */
static uint64_t held_budget(const struct lynx_whatif_plan *wp, uint32_t s,
                            const struct lynx_whatif_row *row)
{
	if (prof.budget_percent)
		return in_device_terms(lynx_problem_stage_budget(wp->problem, s));
	return prof.budget ? prof.budget : in_device_terms(row->budget_bytes);
}

/*
 * Whether this rank's stage may be armed: its plan is predicted within the budget asked
 * for. Other stages' plans may not fit theirs; each rank arms its own. Without LYNX_BUDGET
 * there is no budget to miss (see arm_executor).
 */
static bool stage_fits(const struct lynx_whatif_plan *wp, uint32_t s)
{
	return !(prof.budget || prof.budget_percent) ||
	       wp->plan->stages[s].peak_bytes <= lynx_problem_stage_budget(wp->problem, s);
}

/* The plan's summary for this rank's stage, once. */
static void print_plan(const struct lynx_whatif_plan *wp, const struct lynx_whatif_row *row,
                       const struct lynx_whatif_row *keep)
{
	uint32_t counts[LYNX_ACTION_COUNT], groups = 0;
	uint32_t n = wp->problem->n_stages, s = this_stage(wp);
	char tag[32];

	uint64_t beyond, budget = planning_budget(&beyond);
	char planned_for[200] = "";

	rank_tag(tag, sizeof(tag));
	if (prof.budget_percent)
		snprintf(planned_for, sizeof(planned_for),
		         "; LYNX_BUDGET=%u%% of this stage's peak of tensors, with %.2f MiB for "
		         "what warm-up had in use beyond them",
		         prof.budget_percent, lynx_prof_mib(beyond));
	else if (prof.max_slowdown_bp)
		snprintf(planned_for, sizeof(planned_for),
		         "; no LYNX_BUDGET: the smallest predicted within LYNX_MAX_SLOWDOWN=%s%s",
		         prof.max_slowdown, prof.max_slowdown_default ? " (the default)" : "");
	else if (budget != prof.budget)
		snprintf(planned_for, sizeof(planned_for),
		         "; planned for %.2f MiB: %.2f MiB for what warm-up had in use beyond its "
		         "tensors",
		         lynx_prof_mib(budget), lynx_prof_mib(beyond));
	/* Said of this rank's stage: a rank arms its own stage's plan (arm_executor). */
	bool budgeted = prof.budget || prof.budget_percent;
	const char *fit_note =
	        !stage_fits(wp, s) || (!budgeted && !row->fits) ? "; DOES NOT FIT the budget"
	        : !row->fits ? "; fits (another stage's plan does not fit its budget)"
	                     : "";
	lynx_whatif_count_actions(wp, s, counts);
	for (int a = 0; a < LYNX_ACTION_COUNT; a++)
		groups += counts[a];
	uint64_t peak = in_device_terms(wp->plan->stages[s].peak_bytes), measured = measured_peak();
	double less = measured ? 100.0 * (1.0 - (double)peak / (double)measured) : 0.0;
	fprintf(stderr,
	        "%s: recompute plan (%s%s, budget %.2f MiB%s), stage %u of %u: of %u groups keep "
	        "%u, "
	        "offload %u, recompute in windows %u, on demand %u; this stage's predicted peak "
	        "%.2f MiB in use (measured without a plan: %.2f MiB, %.1f%% %s), iteration "
	        "%+.1f%%%s%s%s\n",
	        tag, prof.plan_path[0] ? "LYNX_PLAN " : "",
	        prof.plan_path[0] ? prof.plan_path : wp->plan->planner,
	        lynx_prof_mib(held_budget(wp, s, row)), planned_for, s, n, groups,
	        counts[LYNX_ACTION_KEEP], counts[LYNX_ACTION_OFFLOAD],
	        counts[LYNX_ACTION_RECOMPUTE_IN_WINDOW], counts[LYNX_ACTION_RECOMPUTE_ON_DEMAND],
	        lynx_prof_mib(peak), lynx_prof_mib(measured), fabs(less),
	        less < 0 ? "more" : "less",
	        keep->step_s > 0 ? 100.0 * (row->step_s / keep->step_s - 1.0) : 0.0, fit_note,
	        /* The planner's own remark: a search stopped by its time limit, say. */
	        wp->plan->note[0] ? "; " : "", wp->plan->note);
}

/* Whether the profile's NCCL call pw is an occurrence of the stage's window w. */
static bool is_window(const struct lynx_problem *p, const struct lynx_problem_stage *st,
                      const struct lynx_window *w, const struct lynx_profile_window *pw)
{
	const struct lynx_problem_layer *L = &p->layer;
	int32_t layer = w->layer + (int32_t)st->profile_first_layer;

	switch (w->kind) {
	case LYNX_WINDOW_TP_FWD:
		return pw->kind == LYNX_PROFILE_WINDOW_TP_FWD && pw->layer == layer &&
		       pw->ordinal >= 0 && (uint32_t)pw->ordinal < L->n_tp_fwd &&
		       L->tp_fwd_op[pw->ordinal] == w->op;
	case LYNX_WINDOW_TP_BWD:
		return pw->kind == LYNX_PROFILE_WINDOW_TP_BWD && pw->layer == layer &&
		       pw->ordinal >= 0 && (uint32_t)pw->ordinal < L->n_tp_bwd &&
		       L->tp_bwd_op[pw->ordinal] == w->op;
	case LYNX_WINDOW_PP_RECV_FWD:
		return pw->kind == LYNX_PROFILE_WINDOW_PP_RECV_FWD;
	case LYNX_WINDOW_PP_RECV_BWD:
		return pw->kind == LYNX_PROFILE_WINDOW_PP_RECV_BWD;
	default:
		return false; /* DP_GRAD comes after every backward: on demand */
	}
}

/*
 * The token where buffer i's replay in window w is made, as problem.h places it: the latest
 * call of w after the forward is done with the buffer and after the stage's previous
 * backward (here: after the previous micro-batch's last first use), before the buffer's
 * first use in its backward. LYNX_EXEC_NO_WINDOW when there is none: on demand, as the
 * plan's model has it too.
 */
static uint32_t window_token(const struct lynx_problem *p, const struct lynx_problem_stage *st,
                             const struct lynx_window *w, size_t i)
{
	const struct lynx_prof_script *sc = &prof.script;
	const struct lynx_prof_script_buffer *b = &sc->buffers[i];
	uint32_t after = b->last_forward_token, best = LYNX_EXEC_NO_WINDOW;

	/* The calls are the profile's windows, in the same order (script.h). */
	if (sc->n_nccl != prof.profile.window_count)
		return LYNX_EXEC_NO_WINDOW;
	for (size_t k = 0; b->microbatch && k < sc->n_buffers; k++)
		if (sc->buffers[k].microbatch + 1 == b->microbatch &&
		    sc->buffers[k].first_backward_token > after)
			after = sc->buffers[k].first_backward_token;
	for (uint32_t k = 0; k < sc->n_nccl; k++) {
		uint32_t t = sc->nccl_tokens[k];
		if (t > after && t < b->first_backward_token &&
		    (best == LYNX_EXEC_NO_WINDOW || t > best) &&
		    is_window(p, st, w, &prof.profile.windows[k]))
			best = t;
	}
	return best;
}

/* Without a budget, why a plan keeps every activation of this rank's: in why. */
static const char *keeps_everything_because(char *why, size_t len)
{
	const struct lynx_planner *pl = lynx_planner_find(prof.planner);

	if (prof.plan_path[0])
		snprintf(why, len, "LYNX_PLAN keeps every activation of this stage");
	else if (!pl || !pl->budgeted)
		snprintf(why, len, "LYNX_PLANNER=%s keeps every activation of this stage",
		         prof.planner);
	else
		snprintf(why, len,
		         "no eviction is predicted to cost at most LYNX_MAX_SLOWDOWN=%s of the "
		         "iteration; give LYNX_BUDGET or a larger LYNX_MAX_SLOWDOWN",
		         prof.max_slowdown);
	return why;
}

/* The plan armed on this rank, kept to predict it again as the executor follows it
 * (predict_followed()); read-only once armed. */
static struct {
	struct lynx_whatif_plan wp;
	uint32_t stage;
	double keep_step_s; /* the checker's step of keeping everything */
	/* Each scripted activation's stage-local layer and group (buffer_decision_of()), or
	 * -1: the script itself is freed once planning is done. */
	size_t n;
	int32_t *layer, *group;
} armed;

/* The problem group and stage-local layer of scripted activation i: false for the
 * embedding's and the head's, and for buffers beyond the mapping. */
static bool buffer_decision_of(const struct lynx_problem *p, const struct lynx_problem_stage *st,
                               size_t i, uint32_t *layer, uint32_t *group)
{
	const struct lynx_prof_script_buffer *b = &prof.script.buffers[i];
	int64_t l = (int64_t)b->layer - st->profile_first_layer;
	int g = b->index < p->layer.n_buffers ? p->layer.buffer_group[b->index] : -1;

	if (l < 0 || l >= st->layers || g < 0)
		return false;
	*layer = (uint32_t)l;
	*group = (uint32_t)g;
	return true;
}

/*
 * The executor's lynx_exec_expectation.repredict: the armed plan with each layer's group
 * given what the executor does with its activations (an OFFLOAD where any of them is
 * offloaded, a KEEP where one planned for eviction is kept), replayed by the checker.
 */
static bool predict_followed(const enum lynx_exec_action *actions, size_t n, double *slowdown,
                             uint64_t *peak_bytes)
{
	const struct lynx_problem *p = armed.wp.problem;
	struct lynx_checker_result r;
	struct lynx_plan plan;
	char why[192];
	int err;

	if (!p || n != armed.n || !(armed.keep_step_s > 0) ||
	    lynx_plan_init(&plan, p, armed.wp.plan->planner, false))
		return false;
	for (uint32_t s = 0; s < p->n_stages; s++)
		for (uint32_t l = 0; l < p->stages[s].layers; l++)
			for (uint32_t k = 0; k < p->layer.n_groups; k++)
				*lynx_plan_decision(&plan, s, l, k) =
				        *lynx_plan_get(armed.wp.plan, s, l, k);
	for (size_t i = 0; i < n; i++) {
		struct lynx_decision *d;

		if (armed.layer[i] < 0)
			continue;
		d = lynx_plan_decision(&plan, armed.stage, (uint32_t)armed.layer[i],
		                       (uint32_t)armed.group[i]);
		if (actions[i] == LYNX_EXEC_OFFLOAD && d->action != LYNX_ACTION_OFFLOAD)
			*d = (struct lynx_decision){.action = LYNX_ACTION_OFFLOAD};
		else if (actions[i] == LYNX_EXEC_KEEP && d->action != LYNX_ACTION_OFFLOAD)
			*d = (struct lynx_decision){.action = LYNX_ACTION_KEEP};
	}
	err = lynx_checker_replay(p, &plan, &r, why, sizeof(why));
	lynx_plan_free(&plan);
	if (err) {
		lynx_info("recompute mode: the plan as followed cannot be predicted: %s",
		          err == -ENOMEM ? "out of memory" : why);
		return false;
	}
	*slowdown = r.step_time_s / armed.keep_step_s;
	*peak_bytes = in_device_terms(r.peak_bytes[armed.stage]);
	lynx_checker_free(&r);
	return true;
}

/* Keeps wp (taken from the caller, whose copy is emptied) and each activation's layer and
 * group for predict_followed(). Returns false, keeping nothing, when out of memory. */
static bool keep_armed(struct lynx_whatif_plan *wp, uint32_t s, const struct lynx_whatif_row *keep)
{
	const struct lynx_problem_stage *st = &wp->problem->stages[s];
	size_t n = prof.script.n_buffers;
	uint32_t layer, g;

	armed.layer = malloc((n ? n : 1) * sizeof(*armed.layer));
	armed.group = malloc((n ? n : 1) * sizeof(*armed.group));
	if (!armed.layer || !armed.group) {
		free(armed.layer);
		free(armed.group);
		armed.layer = armed.group = NULL;
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		bool mapped = buffer_decision_of(wp->problem, st, i, &layer, &g);

		armed.layer[i] = mapped ? (int32_t)layer : -1;
		armed.group[i] = mapped ? (int32_t)g : -1;
	}
	armed.n = n;
	armed.stage = s;
	armed.keep_step_s = keep->step_s;
	armed.wp = *wp;
	*wp = (struct lynx_whatif_plan){0};
	return true;
}

/*
 * The ranks of a stage whose plan misses the budget arm nothing and train unchanged (above),
 * so the step this rank's stage s will see is the plan's with those stages keeping every
 * activation: their decisions in wp's plan become KEEP (what the executor's prediction as
 * followed starts from too), and the checker's step of that (step_s when every stage fits,
 * or when it cannot be replayed). plan.json and the plan line have the plan as made.
 */
static double others_unchanged(struct lynx_whatif_plan *wp, uint32_t s, double step_s)
{
	const struct lynx_problem *p = wp->problem;
	struct lynx_checker_result r;
	bool changed = false;
	char why[192];

	for (uint32_t t = 0; t < p->n_stages; t++) {
		if (t == s || stage_fits(wp, t))
			continue;
		for (uint32_t l = 0; l < (wp->plan->stages[t].uniform ? 1 : p->stages[t].layers);
		     l++)
			for (uint32_t g = 0; g < p->layer.n_groups; g++)
				*lynx_plan_decision(wp->plan, t, l, g) =
				        (struct lynx_decision){.action = LYNX_ACTION_KEEP};
		changed = true;
	}
	if (!changed || lynx_checker_replay(p, wp->plan, &r, why, sizeof(why)))
		return step_s;
	lynx_info("recompute mode: stages whose plan misses the budget train unchanged: the "
	          "iteration is predicted at %.3f ms with them so, %.3f ms as planned",
	          r.step_time_s * 1e3, step_s * 1e3);
	step_s = r.step_time_s;
	lynx_checker_free(&r);
	return step_s;
}

/*
 * The plan's decision for each of this rank's scripted activations: the k-th saved buffer
 * of profile layer l is buffer k of the stage's problem layer l - profile_first_layer,
 * which from_profile maps to a problem group (problem.h). The embedding's and the head's,
 * and buffers beyond the mapping, are kept. A window becomes the token of its call. Once
 * armed, the plan stays with the executor's prediction as followed (keep_armed(): *wp is
 * emptied); otherwise the caller frees it.
 */
static void arm_executor(struct lynx_whatif_plan *wp, const struct lynx_whatif_row *row,
                         const struct lynx_whatif_row *keep)
{
	const struct lynx_problem *p = wp->problem;
	uint32_t s = this_stage(wp);
	const struct lynx_problem_stage *st = &p->stages[s];
	size_t n = prof.script.n_buffers;
	struct lynx_exec_decision *decisions;
	uint32_t windows = 0, in_windows = 0;
	char why[192];
	int err;

	/*
	 * A plan predicted over the budget asked for is not armed: the budget holds, or the
	 * rank says that no plan fits and trains unchanged (never a plan that may or may not
	 * hold it). Without LYNX_BUDGET there is no budget to miss: the problem's is the
	 * measured peak, or the one LYNX_MAX_SLOWDOWN chose for this plan.
	 */
	if (!stage_fits(wp, s)) {
		char asked[64] = "";
		if (prof.budget_percent)
			snprintf(asked, sizeof(asked), "LYNX_BUDGET=%u%%, ", prof.budget_percent);
		lynx_warn("recompute mode: no plan fits this rank's budget (%s%.2f MiB): the "
		          "best (%s) is predicted to reach %.2f MiB on stage %u; none is armed, "
		          "and this rank trains unchanged",
		          asked, lynx_prof_mib(held_budget(wp, s, row)), wp->plan->planner,
		          lynx_prof_mib(in_device_terms(wp->plan->stages[s].peak_bytes)), s);
		return;
	}
	double step_s = others_unchanged(wp, s, row->step_s);
	decisions = calloc(n ? n : 1, sizeof(*decisions));
	if (!decisions) {
		lynx_warn("recompute mode: out of memory arming the executor; training goes on "
		          "unchanged");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		uint32_t layer, g;
		const struct lynx_decision *d;

		decisions[i] = (struct lynx_exec_decision){LYNX_EXEC_KEEP, LYNX_EXEC_NO_WINDOW};
		if (!buffer_decision_of(p, st, i, &layer, &g))
			continue;
		d = lynx_plan_get(wp->plan, s, layer, g);
		switch (d->action) {
		case LYNX_ACTION_OFFLOAD:
			decisions[i].action = LYNX_EXEC_OFFLOAD;
			break;
		case LYNX_ACTION_RECOMPUTE_IN_WINDOW:
			decisions[i].window_token =
			        d->window < st->n_windows
			                ? window_token(p, st, &st->windows[d->window], i)
			                : LYNX_EXEC_NO_WINDOW;
			windows++;
			in_windows += decisions[i].window_token != LYNX_EXEC_NO_WINDOW;
			/* fall through */
		case LYNX_ACTION_RECOMPUTE_ON_DEMAND:
			decisions[i].action = LYNX_EXEC_RECOMPUTE;
			break;
		default:
			break;
		}
	}
	if (windows)
		lynx_info("recompute mode: %u of %u activations planned for a window have its call "
		          "in the script; the others are replayed on demand",
		          in_windows, windows);
	struct lynx_exec_expectation expect = {
	        .measured_peak_bytes = measured_peak(),
	        .predicted_peak_bytes = in_device_terms(wp->plan->stages[s].peak_bytes),
	        .measured_iteration_ns = prof.profile.iteration.time.ns,
	        .predicted_slowdown = keep->step_s > 0 ? step_s / keep->step_s : 1.0,
	        /* Kept in cuMemGetInfo's terms: LYNX_BUDGET itself. */
	        .budget_bytes = held_budget(wp, s, row),
	        .replay_scratch_bytes = prof.profile.memory.largest_workspace_bytes,
	        .budget_asked = prof.budget || prof.budget_percent,
	        .pack_small = prof.pack,
	        .max_slowdown = prof.max_slowdown_bp ? 1.0 + prof.max_slowdown_bp / 10000.0 : 0.0,
	        .run = prof.profile.run,
	        .world = prof.profile.world,
	};
	snprintf(expect.max_slowdown_text, sizeof(expect.max_slowdown_text), "%s",
	         prof.max_slowdown);
	snprintf(expect.planner, sizeof(expect.planner), "%s",
	         prof.plan_path[0] ? "LYNX_PLAN" : wp->plan->planner);
	/* What the summary predicts again as the executor follows the plan; without the room
	 * to keep the plan, the plan's prediction alone. */
	struct lynx_whatif_plan kept_plan = *wp;
	if (keep_armed(wp, s, keep))
		expect.repredict = predict_followed;
	err = lynx_exec_arm(&prof.script, decisions, &expect, (enum lynx_exec_fault)prof.fault);
	free(decisions);
	if (err && expect.repredict) { /* not armed: the caller frees the plan */
		*wp = kept_plan;
		free(armed.layer);
		free(armed.group);
		memset(&armed, 0, sizeof(armed));
	}
	if (err == -EINVAL && expect.measured_peak_bytes > expect.budget_bytes)
		lynx_warn("recompute mode: the plan evicts nothing on this rank, whose measured "
		          "peak %.2f MiB is over the budget %.2f MiB: the budget is not held",
		          lynx_prof_mib(expect.measured_peak_bytes),
		          lynx_prof_mib(expect.budget_bytes));
	else if (err == -EINVAL && !prof.budget && !prof.budget_percent)
		lynx_warn("recompute mode: the plan evicts nothing on this rank: no LYNX_BUDGET, "
		          "and %s",
		          keeps_everything_because(why, sizeof(why)));
	else if (err == -EINVAL)
		lynx_info("recompute mode: the plan evicts nothing on this rank (its peak fits the "
		          "budget)");
	else if (!err)
		lynx_info("recompute mode: the executor is armed");
}

/* Planning is over, with or without a plan: the script has served. */
static void plan_done(void)
{
	lynx_prof_script_free(&prof.script);
	atomic_store(&prof.phase, PHASE_DONE);
}

/*
 * A searching planner (planners.def: opt, checkmate) runs on a thread of its own: CBC may
 * take minutes, and a trainer's thread held that long makes its peers time out in NCCL. So
 * the job runs unchanged meanwhile, and the trainer's thread picks the plan up at a later
 * synchronisation and arms it there (arming makes CUDA calls in its context). Each rank
 * searches only its own stage (the others keep HEU's plan, which it does not follow),
 * within SEARCH_SECONDS in all, its budget-tightening rounds included.
 *
 * HEU, and mixed after it (plan_job), run on the trainer's thread, where the plan is armed
 * at the synchronisation that made it, whatever the machine's load: HEU takes milliseconds,
 * and mixed, which replays every stage in the checker for each offload it weighs (about a
 * second on an 80-layer, 16-stage job), stops at INLINE_SEARCH_SECONDS with the best plan
 * the checker confirmed so far. Every rank plans at the same synchronisation, so no peer
 * waits on another in NCCL meanwhile.
 */
#define SEARCH_SECONDS 60.0
#define INLINE_SEARCH_SECONDS 2.0
enum search_state { SEARCH_NONE, SEARCH_RUNNING, SEARCH_DONE };
static struct {
	pthread_t thread;
	atomic_int state;
	/* Inputs: the profiles read (owned until the thread is joined), the options. */
	struct job_profiles profiles;
	struct lynx_problem_options opt;
	/* Outputs, read once state is SEARCH_DONE. */
	struct lynx_whatif_plan wp;
	struct lynx_whatif_row row, keep;
	int err;
	char why[256];
} search;

/* LYNX_PLANNER (or plan_json) over the job's profiles j, or this rank's own alone when
 * opt->solo: lynx_whatif_plan's result. */
static uint32_t stages_fitting(const struct lynx_whatif_plan *wp)
{
	uint32_t n = 0;

	for (uint32_t s = 0; s < wp->problem->n_stages; s++)
		n += stage_fits(wp, s);
	return n;
}

/* Whether HEU's plan is followed by mixed's (plan_job): HEU asked for, with a budget, and
 * no LYNX_PLAN. Whether the host link was measured is known only once the problem is built;
 * without it plan_job keeps HEU's plan. */
static bool may_try_mixed(const char *plan_json)
{
	return !plan_json && !strcmp(prof.planner, "heu") && (prof.budget || prof.budget_percent);
}

/*
 * Whether plan alt is better for this rank than plan wp (rows their checker's numbers). A
 * rank follows its own stage's part: first the plan that fits this stage's budget; of two
 * that fit, the one that fits more stages (a pipeline that holds the budget everywhere), then
 * the shorter step; of two that do not, the one nearer the budget here, so that the warning
 * names the least any plan reaches.
 */
static bool better_here(const struct lynx_whatif_plan *wp, const struct lynx_whatif_row *row,
                        const struct lynx_whatif_plan *alt, const struct lynx_whatif_row *alt_row)
{
	uint32_t s = this_stage(wp);
	bool fits = stage_fits(wp, s), alt_fits = stage_fits(alt, s);
	uint32_t n = stages_fitting(wp), alt_n = stages_fitting(alt);

	if (fits != alt_fits)
		return alt_fits;
	if (!fits)
		return alt->plan->stages[s].peak_bytes < wp->plan->stages[s].peak_bytes;
	return alt_n > n || (alt_n == n && alt_row->step_s < row->step_s);
}

/*
 * LYNX_PLANNER's plan (or LYNX_PLAN's). HEU keeps or rebuilds, and offloads only what cannot
 * be replayed; with a budget asked for and a host link the profiles measured, HEU with
 * offloads (mixed, which starts from HEU's plan and keeps a change only where the checker
 * finds it no worse) is tried too, and taken where it is better for this rank (better_here).
 * Every rank plans from the same profiles, but for its own budget (less what its own warm-up
 * had in use beyond its tensors), so ranks of different stages may take different planners;
 * a stage's ranks, measuring alike, take the same one.
 */
static int plan_job(const struct job_profiles *j, const struct lynx_problem_options *opt,
                    const char *plan_json, struct lynx_whatif_plan *wp, struct lynx_whatif_row *row,
                    struct lynx_whatif_row *keep, char *why, size_t len)
{
	const struct lynx_profile *own = &prof.profile;
	const struct lynx_profile *const *ranks = opt->solo ? &own : j->ranks;
	size_t n = opt->solo ? 1 : (size_t)j->read;
	struct lynx_whatif_row alt_row, alt_keep;
	struct lynx_whatif_plan alt;
	uint32_t s, heu_fit, alt_fit;
	char alt_why[192];
	int err = lynx_whatif_plan(ranks, n, opt, prof.planner, plan_json, wp, row, keep, why, len);

	if (err || !may_try_mixed(plan_json) ||
	    !(wp->problem->d2h.busbw > 0 && wp->problem->h2d.busbw > 0))
		return err;
	if (lynx_whatif_plan(ranks, n, opt, "mixed", NULL, &alt, &alt_row, &alt_keep, alt_why,
	                     sizeof(alt_why)))
		return 0; /* HEU's, which says why it does not fit */
	if (!better_here(wp, row, &alt, &alt_row)) {
		lynx_whatif_plan_free(&alt);
		return 0;
	}
	s = this_stage(wp);
	heu_fit = stages_fitting(wp);
	alt_fit = stages_fitting(&alt);
	if (!stage_fits(&alt, s))
		lynx_info("recompute mode: on stage %u HEU's plan reaches %.2f MiB, HEU with "
		          "offloads (mixed) %.2f: neither fits, and mixed's is taken as the "
		          "nearer",
		          s, lynx_prof_mib(wp->plan->stages[s].peak_bytes),
		          lynx_prof_mib(alt.plan->stages[s].peak_bytes));
	else if (!stage_fits(wp, s) || alt_fit > heu_fit)
		lynx_info("recompute mode: HEU's plan fits the budget on %u of %u stages (this "
		          "one %s), HEU with offloads (mixed) on %u: that plan is taken",
		          heu_fit, wp->problem->n_stages, stage_fits(wp, s) ? "too" : "not",
		          alt_fit);
	else
		lynx_info("recompute mode: HEU with offloads (mixed) is predicted at %.3f ms per "
		          "iteration, HEU at %.3f: that plan is taken",
		          1e3 * alt_row.step_s, 1e3 * row->step_s);
	lynx_whatif_plan_free(wp);
	*wp = alt;
	*row = alt_row;
	*keep = alt_keep;
	return 0;
}

static void *search_thread(void *arg)
{
	(void)arg;
	search.err = plan_job(&search.profiles, &search.opt, NULL, &search.wp, &search.row,
	                      &search.keep, search.why, sizeof(search.why));
	atomic_store(&search.state, SEARCH_DONE);
	return NULL;
}

static void finish_plan(int err, const char *why, struct lynx_whatif_plan *wp,
                        struct lynx_whatif_row *row, struct lynx_whatif_row *keep, bool at_exit);

/* Starts the search of this rank's stage with the profiles in j (taken over). */
static void start_search(struct job_profiles *j, const struct lynx_problem_options *opt)
{
	sigset_t all, old;
	int err;

	search.profiles = *j;
	search.opt = *opt;
	/* Solo, the problem is this stage alone; else the profile names its stage. Without
	 * a known stage every stage is searched. */
	search.opt.search_one_stage = opt->solo || lynx_profile_pipeline_known(&prof.profile);
	search.opt.searched_stage = opt->solo ? 0 : (uint32_t)prof.profile.pipeline_stage;
	atomic_store(&search.state, SEARCH_RUNNING);
	/* The trainer's signals are the trainer's threads' to take. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&search.thread, NULL, search_thread, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		atomic_store(&search.state, SEARCH_NONE);
		job_profiles_free(&search.profiles);
		lynx_warn("recompute mode: cannot start the %s search's thread (%s): no plan",
		          prof.planner, strerror(err));
		plan_done();
		return;
	}
	lynx_info("recompute mode: the %s search runs on its own thread, over %s, at most "
	          "%.0f s; the job runs unchanged until it ends",
	          prof.planner, search.opt.search_one_stage ? "this rank's stage" : "every stage",
	          search.opt.search_seconds);
}

/*
 * Recompute mode, after the profile: plans the job once every rank's profile is in LYNX_OUT
 * (with LYNX_PLANNER at LYNX_BUDGET, or reads LYNX_PLAN), writes plan.json (rank 0) and logs
 * this rank's part. Until all profiles are there, it tries again at synchronisations, at
 * most every PLAN_RETRY_NS and for PLAN_WAIT_NS (ranks that learn slower write theirs
 * later); at exit it tries once more. Plain CPU work; a searching planner's search runs on
 * its own thread (above), and a later call picks its plan up.
 */
static void try_plan(bool at_exit)
{
	struct job_profiles j;
	char why[256], others[80];
	char *plan_json = NULL;

	switch (atomic_load(&search.state)) {
	case SEARCH_RUNNING:
		if (at_exit) {
			/* Not joined: the process ends, and the thread with it. */
			lynx_warn("recompute mode: the %s search had not ended at exit (%.0f s "
			          "at most): no plan",
			          prof.planner, search.opt.search_seconds);
			atomic_store(&prof.phase, PHASE_DONE);
		}
		return;
	case SEARCH_DONE:
		pthread_join(search.thread, NULL);
		atomic_store(&search.state, SEARCH_NONE);
		job_profiles_free(&search.profiles);
		finish_plan(search.err, search.why, &search.wp, &search.row, &search.keep, at_exit);
		return;
	default:
		break;
	}
	if (job_profiles_read(&j)) {
		job_profiles_free(&j);
		lynx_warn("recompute mode: out of memory while planning");
		plan_done();
		return;
	}
	/*
	 * Without every rank's profile, this rank plans its own stage alone: at once when
	 * LYNX_OUT is a directory of its own, else once the others have had PLAN_WAIT_NS to
	 * appear. At exit it is too late to plan.
	 */
	bool solo = false;
	if (j.read < j.world) {
		bool waited = now_ns() - prof.plan_since_ns >= PLAN_WAIT_NS;
		if (at_exit) {
			lynx_warn("recompute mode: %d of %d ranks' profiles in %s%s at exit: no "
			          "plan (the ranks must share LYNX_OUT, or give LYNX_PLAN)",
			          j.read, j.world, prof.out_dir,
			          other_runs_clause(&j, others, sizeof(others)));
			plan_done();
		}
		if (at_exit || (!waited && !lynx_output_private())) {
			job_profiles_free(&j);
			return;
		}
		if (lynx_output_private())
			lynx_info("recompute mode: LYNX_OUT is this process's own directory: "
			          "planning this rank's stage from its own profile, without the "
			          "pipeline's windows");
		else
			lynx_warn(
			        "recompute mode: %d of %d ranks' profiles in %s%s after %llu s "
			        "(the ranks must share LYNX_OUT to plan together): planning this "
			        "rank's stage from its own profile, without the pipeline's windows",
			        j.read, j.world, prof.out_dir,
			        other_runs_clause(&j, others, sizeof(others)),
			        PLAN_WAIT_NS / 1000000000ull);
		solo = true;
	}
	if (prof.plan_path[0]) {
		size_t plan_len;
		if (lynx_regular_file_read(prof.plan_path, LYNX_PLAN_MAX_FILE_BYTES, &plan_json,
		                           &plan_len, why, sizeof(why))) {
			lynx_warn("LYNX_PLAN='%s' cannot be read (%s): no plan", prof.plan_path,
			          why);
			job_profiles_free(&j);
			plan_done();
			return;
		}
	}
	uint64_t beyond;
	/* What the executor cannot evict the plan must count as kept: on a GPU (2 MiB
	 * granules) most tensor-parallel activations. A given plan (LYNX_PLAN) names the
	 * groups of the granule it was made with (none from lynx plan); the executor keeps
	 * the small buffers all the same. */
	uint64_t granule = plan_json ? lynx_plan_json_granule(plan_json)
	                   : prof.fault == LYNX_EXEC_FAULT_PLAN_LOW ? 0
	                                                            : lynx_exec_eviction_granule();
	const struct lynx_planner *pl = lynx_planner_find(prof.planner);
	struct lynx_problem_options opt = {
	        .budget_bytes = planning_budget(&beyond),
	        .budget_percent = prof.budget_percent,
	        .max_slowdown_bp = prof.max_slowdown_bp,
	        .solo = solo,
	        .granule_bytes = granule,
	        .unpacked = !prof.pack,
	        .search_seconds = pl && pl->searches ? SEARCH_SECONDS : INLINE_SEARCH_SECONDS,
	        .interference = prof.interference};
	if (!plan_json && pl && pl->searches) {
		/* At exit the process ends before a thread could: the search is not started. */
		if (!at_exit) {
			start_search(&j, &opt);
			return;
		}
		lynx_warn("recompute mode: the job ended before the %s search could start: no "
		          "plan",
		          prof.planner);
		job_profiles_free(&j);
		plan_done();
		return;
	}
	struct lynx_whatif_row row, keep;
	struct lynx_whatif_plan wp;
	int err = plan_job(&j, &opt, plan_json, &wp, &row, &keep, why, sizeof(why));
	free(plan_json);
	job_profiles_free(&j);
	finish_plan(err, why, &wp, &row, &keep, at_exit);
}

/* After the planner: plan.json (rank 0), the plan's summary, and the executor armed (not
 * at exit); or, with err, why there is no plan. Planning is then done. */
static void finish_plan(int err, const char *why, struct lynx_whatif_plan *wp,
                        struct lynx_whatif_row *row, struct lynx_whatif_row *keep, bool at_exit)
{
	char path[PATH_MAX + 64];

	if (err) {
		lynx_warn("recompute mode: no plan: %s", err == -ENOMEM ? "out of memory" : why);
		plan_done();
		return;
	}
	if (lynx_job_rank() <= 0 && prof.output_ok && !prof.plan_path[0]) {
		if (prof.profile.run.known)
			snprintf(wp->plan->run, sizeof(wp->plan->run), "%s", prof.profile.run.id);
		char *text = lynx_plan_to_json(wp->plan, wp->problem);
		snprintf(path, sizeof(path), "%s/plan.json", prof.out_dir);
		if (!text || (err = lynx_atomic_file_write(path, text)))
			lynx_warn("cannot write %s: %s", path,
			          text ? strerror(-err) : "out of memory");
		free(text);
	}
	print_plan(wp, row, keep);
	/* At exit Lynx makes no CUDA call: a plan made then is only reported. */
	if (!at_exit)
		arm_executor(wp, row, keep);
	lynx_whatif_plan_free(wp);
	plan_done();
}

void lynx_profiling_at_sync(void)
{
	int phase = atomic_load_explicit(&prof.phase, memory_order_acquire);

	if (phase != PHASE_LEARNING && phase != PHASE_RESOLVING && phase != PHASE_PLANNING)
		return;
	if (pthread_mutex_trylock(&prof.look))
		return;
	phase = atomic_load(&prof.phase);
	if (phase == PHASE_RESOLVING) {
		try_finish(false);
	} else if (phase == PHASE_PLANNING && now_ns() - prof.plan_tried_ns >= PLAN_RETRY_NS) {
		prof.plan_tried_ns = now_ns();
		try_plan(false);
	} else if (phase == PHASE_LEARNING) {
		struct lynx_recorder_stats stats;
		/* Drain on this thread only when there is enough new to look at. */
		lynx_recorder_stats(&stats);
		if (stats.recorded >= LOOK_MIN_EVENTS &&
		    stats.recorded * LOOK_GROWTH_DEN >= prof.recorded_at_look * LOOK_GROWTH_NUM) {
			lynx_recorder_drain();
			prof.recorded_at_look = stats.recorded;
			look(prof.warmup, false, prof.full);
			if (atomic_load(&prof.phase) == PHASE_LEARNING && prof.full) {
				char set_up[768];
				lynx_warn("warm-up: no profile after %u events (no repeating "
				          "iteration with layers%s); observing only",
				          MAX_WARMUP_EVENTS, set_up_clause(set_up, sizeof(set_up)));
				drop_collected();
				atomic_store(&prof.phase, PHASE_DONE);
			}
		}
	}
	pthread_mutex_unlock(&prof.look);
}

/* The executor's file stem.<rank>.json, by write (-ENOENT: never armed, nothing to write). */
static void write_exec_file(const char *stem, int (*write)(const char *path, int rank))
{
	char path[PATH_MAX + 64];
	int err;

	if (!prof.output_ok)
		return;
	profile_path(path, sizeof(path), stem, "json");
	if ((err = write(path, lynx_job_rank())) && err != -ENOENT)
		lynx_warn("cannot write %s: %s", path, strerror(-err));
}

void lynx_profiling_at_exit(void)
{
	pthread_mutex_lock(&prof.look);
	switch (atomic_load(&prof.phase)) {
	case PHASE_LEARNING:
		lynx_slow_path_switch(LYNX_SLOW_TIMING, false);
		if (prof.trace.count >= LOOK_MIN_EVENTS) {
			look(2, true, false);
		} else {
			/* Too little to look at: say so where it matters, not in a launcher's
			 * process (it launches nothing, and has fewer calls to lose than a look
			 * needs). */
			struct lynx_recorder_stats stats;
			char losses[256];
			lynx_recorder_stats(&stats);
			recorder_losses(losses, sizeof(losses));
			if (launched(&prof.trace) || stats.dropped >= LOOK_MIN_EVENTS)
				lynx_warn("no profile at exit: %zu events recorded, fewer than "
				          "the %d a look needs%s",
				          prof.trace.count, LOOK_MIN_EVENTS, losses);
		}
		if (atomic_load(&prof.phase) == PHASE_LEARNING) {
			drop_collected();
			atomic_store(&prof.phase, PHASE_DONE);
		}
		break;
	case PHASE_RESOLVING:
		try_finish(true);
		break;
	default:
		break;
	}
	/* A plan still waiting: one more try; none from a profile made at exit. */
	if (atomic_load(&prof.phase) == PHASE_PLANNING && prof.profile_at_exit) {
		lynx_warn("recompute mode: the job ended before warm-up did (its profile was made "
		          "at exit, with host times): no plan; " WARMUP_HINT,
		          prof.warmup);
		plan_done();
	} else if (atomic_load(&prof.phase) == PHASE_PLANNING) {
		try_plan(true);
	}
	if (prof.have_profile) {
		lynx_profile_print_summary(stderr, &prof.profile, lynx_job_rank());
		if (lynx_job_rank() <= 0)
			print_whatif();
		char tag[32];
		rank_tag(tag, sizeof(tag));
		lynx_exec_print_summary(stderr, tag);
		write_exec_file("executor", lynx_exec_write_trace);
		write_exec_file("summary", lynx_exec_write_summary);
	}
	pthread_mutex_unlock(&prof.look);
}

/*
 * Only the trace's lock is held across fork: it is never held while calling CUDA. The look
 * lock is (a look resolves marks through the driver), and the driver's own fork handlers
 * take the driver's locks, so holding it across fork could deadlock.
 */
void lynx_profiling_before_fork(void)
{
	pthread_mutex_lock(&prof.lock);
}

void lynx_profiling_after_fork_in_parent(void)
{
	pthread_mutex_unlock(&prof.lock);
}

void lynx_profiling_set_output(const char *out_dir, bool output_ok)
{
	snprintf(prof.out_dir, sizeof(prof.out_dir), "%s", out_dir);
	prof.output_ok = output_ok;
}

void lynx_profiling_after_fork(void)
{
	/* The parent's CUDA events mean nothing here; its memory is ours to free. */
	int phase = atomic_load(&prof.phase);

	/* Held since lynx_profiling_before_fork by this, the child's only thread. A look
	 * another thread of the parent was in does not exist here: its lock starts over. */
	pthread_mutex_unlock(&prof.lock);
	pthread_mutex_init(&prof.look, NULL);
	if (phase == PHASE_OFF)
		return;
	if (phase != PHASE_LEARNING) {
		/* A worker forked after warm-up: it keeps nothing and learns nothing. */
		lynx_slow_path_switch(LYNX_SLOW_TIMING, false);
		free(prof.view.events);
		prof.view.events = NULL;
		lynx_prof_trace_free(&prof.trace);
		lynx_timing_forget();
		atomic_store(&prof.phase, PHASE_DONE);
		return;
	}
	lynx_slow_path_switch(LYNX_SLOW_TIMING, false);
	free(prof.view.events);
	prof.view.events = NULL;
	lynx_prof_trace_free(&prof.trace);
	lynx_timing_forget();
	prof.recorded_at_look = 0;
	prof.full = false;
	prof.attempts = 0;
	prof.out_of_memory = false;
	if (prof.have_profile) {
		lynx_profile_free(&prof.profile);
		prof.have_profile = false;
	}
	if (lynx_prof_trace_init(&prof.trace, (int)getpid())) {
		atomic_store(&prof.phase, PHASE_OFF);
		return;
	}
	prof.timing = prof.timing && !lynx_timing_init(&timing_driver, MAX_MARKS);
	prof.sample_armed = false;
	prof.candidate_period = prof.candidate_since = prof.candidate_from = 0;
	prof.not_iterations_count = 0;
	prof.not_iteration_why[0] = '\0';
	prof.not_iteration_tokens = 0;
	prof.layered_unit = 0;
	lynx_slow_path_switch(LYNX_SLOW_TIMING, prof.timing);
	atomic_store(&lynx_timing_kernels, false);
	atomic_store(&prof.phase, PHASE_LEARNING);
}
