/* SPDX-License-Identifier: Apache-2.0 */
/*
 * liblynx.so's life: lazy initialisation at the first intercepted call (never in a
 * process that makes none, never inside dlsym), the call bracket every active hook runs
 * in, fork, and the flush at exit (of the counts and of the event dump, LYNX_EVENTS).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "atomic_file.h"
#include "dump.h"
#include "executor.h"
#include "hooks.h"
#include "launch_attrs.h"
#include "lifecycle.h"
#include "log.h"
#include "out_path.h"
#include "profiling.h"
#include "record.h"
#include "run.h"
#include "timing.h"

atomic_bool lynx_intercepting = true;
_Atomic uint64_t lynx_calls[LYNX_HOOK_COUNT];
/* initial-exec: liblynx.so is preloaded, so its thread-locals can live in the static TLS
 * block, read without a call to __tls_get_addr on every hook. */
__thread int lynx_group_depth __attribute__((tls_model("initial-exec")));

/* READY once initialised in this process; a forked child goes back to FORKED until its
 * first call restarts what did not survive the fork (the drainer thread). */
enum { STATE_NEW, STATE_READY, STATE_FORKED };
static atomic_int state = STATE_NEW;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static struct lynx_config config;
/* LYNX_OUT as given (a pattern, out_path.h) and as expanded for this process. */
static const char *out_pattern;
static char out_expanded[PATH_MAX];
static bool recording; /* profile or recompute, with a working recorder */
static bool dumping;   /* LYNX_EVENTS is open: drained events go to the dump too */
static bool output_ok; /* LYNX_OUT is a writable directory */
/* Intercepted calls in progress on this thread: > 1 means the library we forward to
 * called back into a hook (the runtime calling the driver). */
static __thread int hook_depth __attribute__((tls_model("initial-exec")));
/* > 0 while the shim itself calls CUDA: those calls are counted, never recorded. */
static __thread int internal_depth __attribute__((tls_model("initial-exec")));
/* Events recorded with LYNX_EVENT_CAPTURED: touched only while a capture is open. */
static _Atomic uint64_t captured_events;

const struct lynx_config *lynx_config(void)
{
	return &config;
}

static const char *lookup_env(const char *name)
{
	return getenv(name);
}

static void warn_setting(const char *line)
{
	lynx_warn("%s", line);
}

/* mkdir -p; returns 0 if dir exists and is writable afterwards. */
static int prepare_output_dir(const char *dir)
{
	char path[PATH_MAX];
	size_t len = strlen(dir);

	if (!len || len >= sizeof(path))
		return -ENAMETOOLONG;
	memcpy(path, dir, len + 1);
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		mkdir(path, 0755);
		*p = '/';
	}
	if (mkdir(path, 0755) && errno != EEXIST)
		return -errno;
	return access(path, W_OK) ? -errno : 0;
}

/* ---- Writing what was counted, async-signal-safely ------------------------------------ */

/* A growing line in a fixed buffer: only memcpy and arithmetic, so a signal handler may
 * use it. Text beyond the buffer is cut (the buffer holds every hook name many times). */
struct text {
	char buf[16384];
	size_t len;
};

static void put(struct text *t, const char *s)
{
	size_t n = strlen(s);

	if (n > sizeof(t->buf) - t->len)
		n = sizeof(t->buf) - t->len;
	memcpy(t->buf + t->len, s, n);
	t->len += n;
}

static void put_u64(struct text *t, uint64_t v)
{
	char digits[21];
	int i = sizeof(digits) - 1;

	digits[i] = 0;
	do {
		digits[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	put(t, digits + i);
}

/* s as a JSON string's characters: the quote and the backslash escaped (a run id has no
 * control characters). */
static void put_escaped(struct text *t, const char *s)
{
	for (; *s; s++) {
		char c[3] = {'\\', *s, 0};
		put(t, *s == '"' || *s == '\\' ? c : c + 1);
	}
}

/*
 * Writes LYNX_OUT/calls.<pid>.json: the calls each hook received, and the recorder's
 * totals (events recorded, dropped, and recorded while a graph capture was open), with the
 * job's run and world size when named (at exit; the signal handler leaves them out). With
 * open/write and no stdio, so that the SIGTERM/SIGINT handler can call it.
 */
static void write_call_counts(bool name_the_run)
{
	struct text path = {.len = 0}, tmp, json = {.len = 0};
	struct lynx_recorder_stats stats;
	const char *sep = "";
	int fd;

	put(&path, config.out_dir);
	put(&path, "/calls.");
	put_u64(&path, (uint64_t)getpid());
	put(&path, ".json");
	path.buf[path.len < sizeof(path.buf) ? path.len : sizeof(path.buf) - 1] = 0;

	lynx_recorder_stats(&stats);
	put(&json, "{\"format\":\"lynx-calls\",\"version\":1,\"pid\":");
	put_u64(&json, (uint64_t)getpid());
	if (name_the_run) {
		struct lynx_profile_run run;
		lynx_job_run(&run);
		put(&json, ",\"run\":");
		if (run.known && run.id[0]) {
			put(&json, "\"");
			put_escaped(&json, run.id);
			put(&json, "\"");
		} else {
			put(&json, "null");
		}
		put(&json, ",\"world\":");
		if (lynx_job_world() > 0)
			put_u64(&json, (uint64_t)lynx_job_world());
		else
			put(&json, "null");
	}
	put(&json, ",\"recorder\":{\"recorded\":");
	put_u64(&json, stats.recorded);
	put(&json, ",\"dropped\":");
	put_u64(&json, stats.dropped);
	put(&json, ",\"captured\":");
	put_u64(&json, atomic_load(&captured_events));
	put(&json, "},\"calls\":{");
	for (int id = 0; id < LYNX_HOOK_COUNT; id++) {
		uint64_t n = atomic_load(&lynx_calls[id]);
		if (!n)
			continue;
		put(&json, sep);
		put(&json, "\"");
		put(&json, lynx_hooks[id].symbol);
		put(&json, "\":");
		put_u64(&json, n);
		sep = ",";
	}
	put(&json, "}}\n");

	/* Beside it first, then renamed: a full disk leaves the old file or none, never a
	 * part. The name is fixed (mkstemp is not async-signal-safe); the pid makes it ours. */
	tmp = path;
	put(&tmp, ".tmp");
	tmp.buf[tmp.len < sizeof(tmp.buf) ? tmp.len : sizeof(tmp.buf) - 1] = 0;
	fd = open(tmp.buf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		lynx_warn("cannot write %s: %s", path.buf, strerror(errno));
		return;
	}
	bool written = write(fd, json.buf, json.len) == (ssize_t)json.len;
	int write_errno = errno;
	if (close(fd) && written) {
		written = false;
		write_errno = errno;
	}
	if (written && rename(tmp.buf, path.buf)) {
		written = false;
		write_errno = errno;
	}
	if (!written) {
		unlink(tmp.buf);
		lynx_warn("cannot write %s: %s", path.buf,
		          strerror(write_errno ? write_errno : ENOSPC));
	}
}

/* Once per process, whichever comes first: exit or a terminating signal. */
static atomic_bool flushed;

/* The recorder's consumer when both the event dump and the online profiler are on. */
static void consume(const struct lynx_event *event, void *arg)
{
	lynx_dump_event(event, arg);
	lynx_profiling_consume(event);
}

static void consume_for_profiler(const struct lynx_event *event, void *arg)
{
	lynx_profiling_consume(event);
}

static void at_exit(void)
{
	if (!recording || atomic_exchange(&flushed, true))
		return;
	lynx_recorder_stop();
	/* Still intercepting: the profiler resolves its timing marks through the real
	 * driver, and a trainer thread may still be calling. */
	lynx_profiling_at_exit();
	atomic_store(&lynx_intercepting, false);
	lynx_dump_close();
	if (output_ok)
		write_call_counts(true);
}

/*
 * SIGTERM/SIGINT where the trainer left the default (termination): write what was counted,
 * then restore the default and re-raise, so the process ends as it would have. Only
 * async-signal-safe work: the recorder is not drained here (its lock may be held by the
 * interrupted thread); its totals are read from atomics. The event dump writes the lines
 * it holds unless the drainer is appending one at that moment; either way the events
 * still in the rings are not dumped, so the dump may have fewer lines than "recorded".
 */
static void on_terminating_signal(int sig)
{
	int saved_errno = errno;

	if (!atomic_exchange(&flushed, true)) {
		atomic_store(&lynx_intercepting, false);
		lynx_dump_flush_from_signal();
		if (output_ok)
			write_call_counts(false);
	}
	/* A file some thread was writing (a profile, a plan) would outlive us half-written. */
	lynx_atomic_file_unlink_pending();
	signal(sig, SIG_DFL);
	raise(sig);
	errno = saved_errno;
}

/* A trainer's own handler (or an ignored signal) is never replaced. */
static void catch_terminating_signals(void)
{
	const int signals[] = {SIGTERM, SIGINT};

	for (size_t i = 0; i < sizeof(signals) / sizeof(signals[0]); i++) {
		struct sigaction current, ours = {.sa_handler = on_terminating_signal};
		if (sigaction(signals[i], NULL, &current) || current.sa_handler != SIG_DFL)
			continue;
		sigemptyset(&ours.sa_mask);
		sigaction(signals[i], &ours, NULL);
	}
}

/*
 * Around fork: the drainer stops (and drains) before it, so that no Lynx thread exists at
 * the fork; the parent restarts it at once, the child at its first intercepted call.
 * Forking with the drainer running would leave the child a thread that does not exist.
 * The event dump is flushed too: the child drops the parent's buffer and file, and opens
 * its own at its first call.
 */
static void before_fork(void)
{
	if (recording && atomic_load(&state) == STATE_READY) {
		lynx_recorder_stop();
		lynx_dump_flush();
	}
	lynx_profiling_before_fork();
}

static void after_fork_in_parent(void)
{
	lynx_profiling_after_fork_in_parent();
	if (recording && atomic_load(&state) == STATE_READY && lynx_recorder_start_drainer(100))
		lynx_warn_once("cannot restart the recorder's drainer after fork");
}

static void forget_grouped_marks(void);
static void choose_output_dir(void);

static void after_fork_in_child(void)
{
	lynx_atomic_file_after_fork_in_child();
	lynx_dump_after_fork();
	forget_grouped_marks();
	if (out_pattern && lynx_out_path_per_process(out_pattern)) {
		choose_output_dir(); /* this process's own directory */
		lynx_profiling_set_output(config.out_dir, output_ok);
	}
	lynx_profiling_after_fork();
	lynx_exec_after_fork();
	if (atomic_load(&state) == STATE_READY) {
		lynx_recorder_after_fork();
		atomic_store(&state, STATE_FORKED);
	}
}

static const char *hook_symbol(unsigned int id)
{
	return id < LYNX_HOOK_COUNT ? lynx_hooks[id].symbol : NULL;
}

/* Expands LYNX_OUT for this process into config.out_dir and makes the directory; output_ok
 * says whether Lynx may write there. Once at start-up, and again in a forked child when the
 * pattern names the process (%p). */
static void choose_output_dir(void)
{
	struct lynx_out_path_facts facts = {.pid = (int)getpid(), .getenv = lookup_env};
	char host[256] = "", problem[160];
	int err;

	if (!gethostname(host, sizeof(host) - 1))
		facts.host = host;
	err = lynx_out_path_expand(out_pattern, &facts, out_expanded, sizeof(out_expanded), problem,
	                           sizeof(problem));
	if (err == -ENAMETOOLONG) {
		output_ok = false;
		lynx_warn("LYNX_OUT='%s': %s: observing without writing output", out_pattern,
		          problem);
		return;
	}
	if (problem[0])
		lynx_warn("LYNX_OUT='%s': %s; writing to '%s'", out_pattern, problem, out_expanded);
	config.out_dir = out_expanded;
	err = prepare_output_dir(config.out_dir);
	output_ok = !err;
	if (err)
		lynx_warn("LYNX_OUT='%s' is not a writable directory (%s): observing without "
		          "writing output",
		          config.out_dir, strerror(-err));
}

/* ---- The job's run ----------------------------------------------------------------------- */

/* What names the run, read once at initialisation: the environment may change later (and
 * getenv is not safe beside a setenv), and the process's start does not. */
static struct {
	char torchelastic_run_id[LYNX_PROFILE_RUN_ID_MAX + 1], torchelastic_restart_count[16];
	char slurm_job_id[LYNX_PROFILE_RUN_ID_MAX + 1], slurm_step_id[32];
	uint64_t started;
} run_facts;

static void copy_env(char *to, size_t len, const char *name)
{
	const char *v = lookup_env(name);

	snprintf(to, len, "%s", v ? v : "");
}

static void note_run_facts(void)
{
	copy_env(run_facts.torchelastic_run_id, sizeof(run_facts.torchelastic_run_id),
	         "TORCHELASTIC_RUN_ID");
	copy_env(run_facts.torchelastic_restart_count, sizeof(run_facts.torchelastic_restart_count),
	         "TORCHELASTIC_RESTART_COUNT");
	copy_env(run_facts.slurm_job_id, sizeof(run_facts.slurm_job_id), "SLURM_JOB_ID");
	copy_env(run_facts.slurm_step_id, sizeof(run_facts.slurm_step_id), "SLURM_STEP_ID");
	/* Without /proc, the first intercepted call is the nearest moment known. */
	if (lynx_run_process_started(&run_facts.started))
		run_facts.started = (uint64_t)time(NULL);
}

static void init_locked(void)
{
	int refused = lynx_config_parse(&config, lookup_env, warn_setting);

	if (lynx_log_open((enum lynx_log_level)config.log_level, config.log_file))
		lynx_warn("LYNX_LOG_FILE='%s' cannot be opened: logging to stderr",
		          config.log_file);
	if (refused)
		lynx_info("%d setting(s) refused, see above; defaults kept", refused);
	if (config.mode == LYNX_MODE_OFF) {
		atomic_store(&lynx_intercepting, false);
		return;
	}
	out_pattern = config.out_dir;
	choose_output_dir();
	note_run_facts();
	lynx_recorder_configure(config.ring_bytes, config.recorder_budget);
	/* Before the drainer starts: the dump and the profiler see every event. */
	dumping = config.events && *config.events &&
	          !lynx_dump_open(config.events, hook_symbol, LYNX_HOOK_COUNT,
	                          lynx_launch_function_name);
	/* One consumer, the cheapest that serves what is on. */
	if (lynx_profiling_start(&config, output_ok))
		lynx_recorder_set_consumer(dumping ? consume : consume_for_profiler, NULL);
	else if (dumping)
		lynx_recorder_set_consumer(lynx_dump_event, NULL);
	recording = !lynx_recorder_start_drainer(100);
	if (!recording)
		lynx_warn("cannot start the recorder: counting calls only");
	atexit(at_exit);
	catch_terminating_signals();
	pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
}

/* The slow path of lynx_call_begin: first call, or first call after a fork. */
static void initialise(void)
{
	pthread_mutex_lock(&init_lock);
	if (atomic_load(&state) == STATE_NEW)
		init_locked();
	else if (atomic_load(&state) == STATE_FORKED && recording) {
		lynx_dump_reopen(); /* the child's own file, before its drainer starts */
		recording = !lynx_recorder_start_drainer(100);
	}
	atomic_store(&state, STATE_READY);
	pthread_mutex_unlock(&init_lock);
}

void lynx_call_begin(struct lynx_call *call, enum lynx_hook_id id)
{
	if (__builtin_expect(atomic_load_explicit(&state, memory_order_acquire) != STATE_READY, 0))
		initialise();
	atomic_fetch_add_explicit(&lynx_calls[id], 1, memory_order_relaxed);
	call->id = id;
	call->event = NULL;
	call->mark_start = 0;
	hook_depth++;
}

/* ---- Device timing while the profiler learns -------------------------------------------- */

_Atomic uint32_t lynx_slow_paths;

void lynx_slow_path_switch(uint32_t bit, bool on)
{
	if (on)
		atomic_fetch_or(&lynx_slow_paths, bit);
	else
		atomic_fetch_and(&lynx_slow_paths, ~bit);
}
void lynx_data_lost(const char *fmt, ...)
{
	char what[400];
	va_list ap;

	if (atomic_fetch_or(&lynx_slow_paths, LYNX_SLOW_LOST) & LYNX_SLOW_LOST)
		return;
	lynx_launches_refuse();
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	/* Not through lynx_error: LYNX_LOG=off must not hide why the job stops. */
	char error[96];
	lynx_log_line(LYNX_LOG_ERROR, __FILE__, __LINE__,
	              "%s: training data is lost; every CUDA and NCCL call of this process "
	              "fails from now on (%s, ncclUnhandledCudaError (%d), as after a sticky "
	              "device fault), so that the job stops instead of training on wrong bytes",
	              what,
	              lynx_cuda_error_text((int)CUDA_ERROR_LAUNCH_FAILED, error, sizeof(error)),
	              (int)ncclUnhandledCudaError);
}

atomic_bool lynx_timing_kernels;
/* Set at each host synchronisation: the next stream-ordered call is timed, whatever its
 * kind. These anchors, a few per iteration, give the iteration's device time in the
 * iterations that are not sampled, which the sample's own marks would distort. */
static atomic_bool anchor_next_call;

/* NCCL calls made inside a group on this thread whose end marks wait for the outermost
 * ncclGroupEnd. Beyond the array, calls keep their start mark only (not timed). */
#define MAX_GROUPED 64
static __thread struct {
	uint32_t mark;
	uint64_t stream;
} grouped[MAX_GROUPED] __attribute__((tls_model("initial-exec")));
static __thread int grouped_count __attribute__((tls_model("initial-exec")));

void lynx_time_begin_slow(struct lynx_call *call, uint64_t stream)
{
	/* Top-level calls only: a runtime launch is timed once, not again as the driver
	 * launch it makes. */
	if (hook_depth != 1 || internal_depth > 0 || lynx_capture_active())
		return;
	if (!atomic_load_explicit(&lynx_timing_kernels, memory_order_relaxed) &&
	    lynx_hooks[call->id].kind != LYNX_EV_COLL && lynx_hooks[call->id].kind != LYNX_EV_P2P &&
	    !atomic_exchange_explicit(&anchor_next_call, false, memory_order_relaxed))
		return;
	lynx_profiling_sample_memory();
	/* Stream 0 in a per-thread-stream variant (_ptsz, _ptds) is this thread's default
	 * stream, not the legacy one: a mark there would time the wrong stream and synchronise
	 * with every blocking stream. */
	if (!stream && lynx_hooks[call->id].variant != LYNX_VARIANT_PLAIN)
		stream = (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD;
	call->mark_start = lynx_timing_mark((CUstream)(uintptr_t)stream);
	call->timed_stream = stream;
}

/* After the real call: the end mark, now or at the group's end. Out of line: it only runs
 * during warm-up, and the common path of lynx_call_reserve stays short. */
static __attribute__((noinline)) uint32_t time_end(const struct lynx_call *call)
{
	uint8_t kind = lynx_hooks[call->id].kind;

	if ((kind == LYNX_EV_COLL || kind == LYNX_EV_P2P) && lynx_group_depth > 0) {
		uint32_t mark = grouped_count < MAX_GROUPED ? lynx_timing_reserve() : 0;
		if (mark) {
			grouped[grouped_count].mark = mark;
			grouped[grouped_count++].stream = call->timed_stream;
		}
		return mark;
	}
	return lynx_timing_mark((CUstream)(uintptr_t)call->timed_stream);
}

void lynx_time_group_ended(void)
{
	for (int i = 0; i < grouped_count; i++)
		lynx_timing_record(grouped[i].mark, (CUstream)(uintptr_t)grouped[i].stream);
	grouped_count = 0;
}

/* In a forked child: the parent's pending group marks are not this process's. */
static void forget_grouped_marks(void)
{
	grouped_count = 0;
}

/* ---- The job's rank ---------------------------------------------------------------------- */

static _Atomic int job_rank = -1, job_world = -1;
/* The world communicator's unique id, hashed; job_comm_hashed says it is there. */
static _Atomic uint64_t job_comm_hash;
static atomic_bool job_comm_hashed;

void lynx_note_nccl_rank(int nranks, int rank, const void *id, size_t len)
{
	/* The largest communicator is the job's world (data, tensor and pipeline groups are
	 * split from it or made beside it); the first of that size wins. */
	int world = atomic_load(&job_world);

	while (nranks > world && rank >= 0 && rank < nranks) {
		if (atomic_compare_exchange_weak(&job_world, &world, nranks)) {
			atomic_store(&job_rank, rank);
			atomic_store(&job_comm_hash, lynx_run_hash(id, len));
			atomic_store(&job_comm_hashed, true);
			return;
		}
	}
}

/* The job's run, from what note_run_facts read and the world communicator's hash. */
void lynx_job_run(struct lynx_profile_run *out)
{
	struct lynx_run_facts facts = {
	        .torchelastic_run_id = run_facts.torchelastic_run_id,
	        .torchelastic_restart_count = run_facts.torchelastic_restart_count,
	        .slurm_job_id = run_facts.slurm_job_id,
	        .slurm_step_id = run_facts.slurm_step_id,
	        .comm_hashed = atomic_load(&job_comm_hashed),
	        .comm_hash = atomic_load(&job_comm_hash),
	        .started = run_facts.started,
	};

	lynx_run_identify(&facts, out);
}

bool lynx_output_private(void)
{
	return out_pattern && lynx_out_path_private(out_pattern);
}

int lynx_job_rank(void)
{
	return atomic_load(&job_rank);
}

int lynx_job_world(void)
{
	return atomic_load(&job_world);
}

/*
 * After the real call: a thread may hold one reservation at a time, and the library may
 * have called other hooks meanwhile (the runtime calling the driver), which recorded and
 * committed their own events first.
 */
/*
 * The event of a top-level call that the recorder could not take (a full ring, no
 * recorder) while the executor follows the calls: the tracker needs it all the same. Room
 * for hooks_launch.c's parameter bytes and launch attributes.
 */
#define SCRATCH_PAYLOAD LYNX_LAUNCH_MAX_PAYLOAD
static __thread struct {
	struct lynx_event event;
	unsigned char payload[SCRATCH_PAYLOAD];
} scratch __attribute__((tls_model("initial-exec")));

/* The stand-in event, for the program's own call while the executor follows the calls. */
static __attribute__((noinline, cold)) struct lynx_event *scratch_event(size_t payload_bytes)
{
	if (hook_depth != 1 || payload_bytes > SCRATCH_PAYLOAD ||
	    !atomic_load_explicit(&lynx_exec_armed, memory_order_acquire))
		return NULL;
	scratch.event.size = (uint32_t)(sizeof(scratch.event) + payload_bytes);
	scratch.event.tid = 0;
	scratch.event.host_ns = 0;
	return &scratch.event;
}

struct lynx_event *lynx_call_reserve(struct lynx_call *call, size_t payload_bytes)
{
	uint32_t mark_end = call->mark_start ? time_end(call) : 0;

	if (internal_depth > 0)
		return NULL;
	call->event = recording ? lynx_recorder_reserve(payload_bytes) : NULL;
	if (__builtin_expect(!call->event, 0) && !(call->event = scratch_event(payload_bytes)))
		return NULL;
	/* Ring space is reused: fields a hook does not record (the stream of a
	 * device-wide call, a runtime launch's parameter count) must read as 0. */
	call->event->stream = 0;
	memset(&call->event->u, 0, sizeof(call->event->u));
	call->event->hook = (uint16_t)call->id;
	call->event->mark_start = call->mark_start;
	call->event->mark_end = mark_end;
	call->event->kind = lynx_hooks[call->id].kind;
	call->event->flags = hook_depth > 1 ? LYNX_EVENT_NESTED : 0;
	if (lynx_capture_active()) {
		call->event->flags |= LYNX_EVENT_CAPTURED;
		atomic_fetch_add_explicit(&captured_events, 1, memory_order_relaxed);
	}
	return call->event;
}

/*
 * Recompute mode: the executor follows the program's own calls (an event exists only for
 * calls that are not the shim's), and the driver launches directly beneath them, which
 * carry the parameters; the stand-in event is not the recorder's to commit.
 */
static __attribute__((noinline)) void follow(struct lynx_call *call)
{
	if (hook_depth == 1)
		lynx_exec_after(call->event);
	else if (hook_depth == 2 && call->event->kind == LYNX_EV_LAUNCH)
		lynx_exec_launched(call->event); /* the runtime's launch, with its parameters */
	if (call->event != &scratch.event)
		lynx_recorder_commit(call->event);
}

void lynx_call_end(struct lynx_call *call, int result)
{
	if (call->event) {
		call->event->result = result;
		if (__builtin_expect(atomic_load_explicit(&lynx_exec_armed, memory_order_acquire),
		                     0))
			follow(call);
		else
			lynx_recorder_commit(call->event);
	}
	hook_depth--;
}

int lynx_call_depth(void)
{
	return hook_depth;
}

bool lynx_call_own(void)
{
	return internal_depth > 0;
}

void lynx_call_end_sync(struct lynx_call *call, int result)
{
	bool top_level = hook_depth == 1 && internal_depth == 0 && call->event;

	lynx_call_end(call, result);
	/* The trainer waited for the device: a natural point (off the launch path, often an
	 * iteration boundary) for the profiler to look at what it has learnt, and for an
	 * anchor of the iteration's time (while timing). */
	if (top_level && !lynx_capture_active()) {
		if (atomic_load_explicit(&lynx_slow_paths, memory_order_relaxed) & LYNX_SLOW_TIMING)
			atomic_store_explicit(&anchor_next_call, true, memory_order_relaxed);
		lynx_profiling_at_sync();
	}
}

void lynx_nested_begin(void)
{
	internal_depth++;
}

void lynx_nested_end(void)
{
	internal_depth--;
}
