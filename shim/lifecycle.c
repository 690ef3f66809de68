/* SPDX-License-Identifier: Apache-2.0 */
/*
 * liblynx.so's life: lazy initialisation at the first intercepted call (never in a
 * process that makes none, never inside dlsym), the call bracket every active hook runs
 * in, fork, and the flush at exit.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hooks.h"
#include "lifecycle.h"
#include "log.h"

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
static bool recording; /* profile or recompute, with a working recorder */
static bool output_ok; /* LYNX_OUT is a writable directory */
/* Intercepted calls in progress on this thread: > 1 means the library we forward to
 * called back into a hook (the runtime calling the driver). */
static __thread int hook_depth __attribute__((tls_model("initial-exec")));
/* > 0 while the shim itself calls CUDA: those calls are counted, never recorded. */
static __thread int internal_depth __attribute__((tls_model("initial-exec")));

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

/* Writes LYNX_OUT/calls.<pid>.json: the calls each hook received. Plain JSON by hand:
 * the names are C identifiers and need no escaping. */
static void write_call_counts(void)
{
	char path[PATH_MAX];
	struct lynx_recorder_stats stats;
	FILE *f;

	snprintf(path, sizeof(path), "%s/calls.%d.json", config.out_dir, (int)getpid());
	f = fopen(path, "w");
	if (!f) {
		lynx_warn("cannot write %s: %s", path, strerror(errno));
		return;
	}
	lynx_recorder_stats(&stats);
	fprintf(f,
	        "{\"format\":\"lynx-calls\",\"version\":1,\"pid\":%d,\"recorder\":{\"recorded\":%"
	        "llu,"
	        "\"dropped\":%llu},\"calls\":{",
	        (int)getpid(), (unsigned long long)stats.recorded,
	        (unsigned long long)stats.dropped);
	const char *sep = "";
	for (int id = 0; id < LYNX_HOOK_COUNT; id++) {
		uint64_t n = atomic_load(&lynx_calls[id]);
		if (!n)
			continue;
		fprintf(f, "%s\"%s\":%llu", sep, lynx_hooks[id].symbol, (unsigned long long)n);
		sep = ",";
	}
	fprintf(f, "}}\n");
	if (fclose(f))
		lynx_warn("cannot write %s: %s", path, strerror(errno));
}

static void at_exit(void)
{
	if (!recording)
		return;
	atomic_store(&lynx_intercepting, false);
	lynx_recorder_stop();
	if (output_ok)
		write_call_counts();
}

/*
 * Around fork: the drainer stops (and drains) before it, so that no Lynx thread exists at
 * the fork; the parent restarts it at once, the child at its first intercepted call.
 * Forking with the drainer running would leave the child a thread that does not exist.
 */
static void before_fork(void)
{
	if (recording && atomic_load(&state) == STATE_READY)
		lynx_recorder_stop();
}

static void after_fork_in_parent(void)
{
	if (recording && atomic_load(&state) == STATE_READY && lynx_recorder_start_drainer(100))
		lynx_warn_once("cannot restart the recorder's drainer after fork");
}

static void after_fork_in_child(void)
{
	if (atomic_load(&state) == STATE_READY) {
		lynx_recorder_after_fork();
		atomic_store(&state, STATE_FORKED);
	}
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
	if (config.mode == LYNX_MODE_RECOMPUTE)
		lynx_warn_once("LYNX_MODE=recompute is not available yet: profiling only");
	int err = prepare_output_dir(config.out_dir);
	output_ok = !err;
	if (err)
		lynx_warn("LYNX_OUT='%s' is not a writable directory (%s): observing without "
		          "writing output",
		          config.out_dir, strerror(-err));
	lynx_recorder_configure(config.ring_bytes, config.recorder_budget);
	recording = !lynx_recorder_start_drainer(100);
	if (!recording)
		lynx_warn("cannot start the recorder: counting calls only");
	atexit(at_exit);
	pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
}

/* The slow path of lynx_call_begin: first call, or first call after a fork. */
static void initialise(void)
{
	pthread_mutex_lock(&init_lock);
	if (atomic_load(&state) == STATE_NEW)
		init_locked();
	else if (atomic_load(&state) == STATE_FORKED && recording)
		recording = !lynx_recorder_start_drainer(100);
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
	hook_depth++;
}

/*
 * After the real call: a thread may hold one reservation at a time, and the library may
 * have called other hooks meanwhile (the runtime calling the driver), which recorded and
 * committed their own events first.
 */
struct lynx_event *lynx_call_reserve(struct lynx_call *call, size_t payload_bytes)
{
	if (internal_depth > 0 || !recording)
		return NULL;
	call->event = lynx_recorder_reserve(payload_bytes);
	if (call->event) {
		call->event->hook = (uint16_t)call->id;
		call->event->kind = lynx_hooks[call->id].kind;
		call->event->flags = hook_depth > 1 ? LYNX_EVENT_NESTED : 0;
	}
	return call->event;
}

void lynx_call_end(struct lynx_call *call, int result)
{
	if (call->event) {
		call->event->result = result;
		lynx_recorder_commit(call->event);
	}
	hook_depth--;
}

void lynx_nested_begin(void)
{
	internal_depth++;
}

void lynx_nested_end(void)
{
	internal_depth--;
}
