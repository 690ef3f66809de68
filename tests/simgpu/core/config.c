/* SPDX-License-Identifier: Apache-2.0 */
/* simgpu's settings, its one-time set-up, the core lock and the device description. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define SIMGPU_STRINGIFY_(x) #x
#define SIMGPU_STRINGIFY(x) SIMGPU_STRINGIFY_(x)

struct simgpu_core simgpu = {
        .lock = PTHREAD_MUTEX_INITIALIZER,
        .setup_status = CUDA_ERROR_NOT_INITIALIZED,
};

enum option_kind { KIND_SIZE, KIND_UINT, KIND_RATE, KIND_PERCENT, KIND_TEXT };

struct option_desc {
	const char *name;
	enum option_kind kind;
	size_t offset;
	const char *default_value;
};

static const struct option_desc options[] = {
#define SIMGPU_OPTION(name, kind, field, def, help) \
	{#name, KIND_##kind, offsetof(struct simgpu_config, field), def},
#include "options.def"
#undef SIMGPU_OPTION
};

/* "<digits>[K|M|G|T]" scaled by powers of `unit`; anything else is refused. */
static int parse_scaled(const char *text, uint64_t unit, uint64_t *out)
{
	char *end;
	uint64_t scale = 1;

	if (text[0] < '0' || text[0] > '9')
		return -EINVAL;
	errno = 0;
	unsigned long long value = strtoull(text, &end, 10);
	if (errno)
		return -EINVAL;
	if (*end) {
		const char *suffixes = "KMGT";
		const char *at = strchr(suffixes, *end);
		if (!at || end[1])
			return -EINVAL;
		for (const char *s = suffixes; s <= at; s++)
			scale *= unit;
	}
	if (value > UINT64_MAX / scale)
		return -EINVAL;
	*out = value * scale;
	return 0;
}

/* Range checks that make a setting meaningful, beyond its syntax. */
static const char *option_range_problem(const struct simgpu_config *c, const char *name)
{
	if (!strcmp(name, "SIMGPU_MEM_CAPACITY") && c->capacity_bytes < SIMGPU_PAGE)
		return "must be at least 4K";
	if (!strcmp(name, "SIMGPU_VMM_GRANULARITY") &&
	    (c->vmm_granularity < SIMGPU_PAGE || (c->vmm_granularity & (c->vmm_granularity - 1))))
		return "must be a power of two, at least 4K";
	if (!strcmp(name, "SIMGPU_DEVICE_COUNT") && (c->device_count < 1 || c->device_count > 64))
		return "must be between 1 and 64";
	if (!strcmp(name, "SIMGPU_OVERLAP_SLOWDOWN_PCT") &&
	    (c->overlap_slowdown_pct < 100 || c->overlap_slowdown_pct > 1000))
		return "must be between 100 and 1000";
	if (!strcmp(name, "SIMGPU_JITTER_PCT") && c->jitter_pct > 50)
		return "must be at most 50";
	if (!strcmp(name, "SIMGPU_CONCURRENT_SHARE_PCT") && c->concurrent_share_pct > 100)
		return "must be at most 100";
	if ((!strcmp(name, "SIMGPU_H2D_BW") && !c->h2d_bytes_per_s) ||
	    (!strcmp(name, "SIMGPU_D2H_BW") && !c->d2h_bytes_per_s) ||
	    (!strcmp(name, "SIMGPU_HBM_BW") && !c->hbm_bytes_per_s) ||
	    (!strcmp(name, "SIMGPU_NET_BW") && !c->net_bytes_per_s) ||
	    (!strcmp(name, "SIMGPU_NCCL_TIMEOUT_MS") && !c->nccl_timeout_ms))
		return "must not be zero";
	if (!strcmp(name, "SIMGPU_NCCL_BUFFER") && c->nccl_buffer_bytes < SIMGPU_PAGE)
		return "must be at least 4K";
	return NULL;
}

SIMGPU_EXPORT int simgpu_config_parse(struct simgpu_config *out, char *why, size_t why_len,
                                      const char *(*lookup)(const char *name))
{
	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++) {
		const struct option_desc *o = &options[i];
		const char *given = lookup(o->name);
		const char *text = given ? given : o->default_value;
		void *field = (char *)out + o->offset;
		uint64_t value = 0;
		int err = 0;

		switch (o->kind) {
		case KIND_SIZE:
			err = parse_scaled(text, 1024, &value);
			break;
		case KIND_RATE:
			err = parse_scaled(text, 1000, &value);
			break;
		case KIND_UINT:
		case KIND_PERCENT:
			err = parse_scaled(text, 1, &value);
			if (!err && strpbrk(text, "KMGT"))
				err = -EINVAL;
			break;
		case KIND_TEXT:
			*(const char **)field = text;
			continue;
		}
		if (err) {
			snprintf(why, why_len, "%s='%s': not a %s", o->name, text,
			         o->kind == KIND_SIZE   ? "size (e.g. 80G, 2M, 4096)"
			         : o->kind == KIND_RATE ? "rate in bytes/s (e.g. 50G)"
			                                : "non-negative integer");
			return -EINVAL;
		}
		*(uint64_t *)field = value;
		const char *problem = option_range_problem(out, o->name);
		if (problem) {
			snprintf(why, why_len, "%s='%s': %s", o->name, text, problem);
			return -EINVAL;
		}
	}
	return 0;
}

static const char *lookup_env(const char *name)
{
	return getenv(name);
}

static void at_exit(void)
{
	counters_write_at_exit();
	trace_write_at_exit();
}

/* A fork while another thread holds the lock must not leave the child locked out. */
static void before_fork(void)
{
	pthread_mutex_lock(&simgpu.lock);
}

static void after_fork(void)
{
	pthread_mutex_unlock(&simgpu.lock);
}

static void setup_once(void)
{
	char why[256];

	simgpu.legacy_stream.magic = 0x57AE;
	simgpu.legacy_stream.legacy = true;
	simgpu.streams = &simgpu.legacy_stream;
	simgpu.next_stream_id = 1;
	pthread_atfork(before_fork, after_fork, after_fork);

	if (simgpu_config_parse(&simgpu.config, why, sizeof(why), lookup_env) ||
	    counters_setup(why, sizeof(why))) {
		fprintf(stderr, "simgpu: refusing bad setting %s\n", why);
		simgpu.setup_status = CUDA_ERROR_INVALID_VALUE;
		return;
	}
	simgpu.setup_status = memory_setup();
	if (simgpu.setup_status == CUDA_SUCCESS)
		atexit(at_exit);
}

CUresult simgpu_core_setup(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, setup_once);
	return (CUresult)simgpu.setup_status;
}

SIMGPU_EXPORT CUresult simgpu_core_init(void)
{
	CUresult status = simgpu_core_setup();

	if (status == CUDA_SUCCESS)
		atomic_store(&simgpu.initialized, true);
	return status;
}

SIMGPU_EXPORT bool simgpu_core_ready(void)
{
	return atomic_load(&simgpu.initialized);
}

SIMGPU_EXPORT const struct simgpu_config *simgpu_core_config(void)
{
	return &simgpu.config;
}

SIMGPU_EXPORT void simgpu_core_lock(void)
{
	pthread_mutex_lock(&simgpu.lock);
}

SIMGPU_EXPORT void simgpu_core_unlock(void)
{
	pthread_mutex_unlock(&simgpu.lock);
}

SIMGPU_EXPORT void simgpu_report(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n = snprintf(line, sizeof(line), "simgpu[%d]: ", (int)getpid());

	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	va_end(ap);
	strcat(line, "\n");
	atomic_fetch_add(&simgpu.error_count, 1);
	if (write(STDERR_FILENO, line, strlen(line)) < 0)
		return; /* nowhere left to report to */
}

SIMGPU_EXPORT uint64_t simgpu_error_count(void)
{
	return atomic_load(&simgpu.error_count);
}

SIMGPU_EXPORT const struct simgpu_device_info *simgpu_device_info(void)
{
	static struct simgpu_device_info info = {
	        .name = "simgpu H200 (simulated)",
	        .cc_major = 9,
	        .cc_minor = 0,
	        .sm_count = 132,
	        .max_threads_per_block = 1024,
	        .warp_size = 32,
	};
	info.total_bytes = simgpu.config.capacity_bytes;
	return &info;
}

SIMGPU_EXPORT int simgpu_device_count(void)
{
	return (int)simgpu.config.device_count;
}
