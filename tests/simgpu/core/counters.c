/* SPDX-License-Identifier: Apache-2.0 */
/* Per-API call counters, the virtual cost of each call, and fault injection. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define SIMGPU_COST_IS_FREE_CALL false
#define SIMGPU_COST_IS_FREE_QUERY true

const struct simgpu_api_info simgpu_api_table[SIMGPU_API_COUNT] = {
#define SIMGPU_API(layer, symbol, procname, version, variant, cost) \
	[SIMGPU_API_##symbol] = {#symbol,                           \
	                         #procname,                         \
	                         version,                           \
	                         SIMGPU_LAYER_##layer,              \
	                         SIMGPU_VARIANT_##variant,          \
	                         SIMGPU_COST_IS_FREE_##cost},
#include "api.def"
#undef SIMGPU_API
};

#define MAX_FAULTS 16

/* "Fail the n-th call of symbol with error": parsed once, read-only afterwards. */
struct fault {
	enum simgpu_api_id id;
	uint64_t nth;
	int error;
};

static _Atomic uint64_t counts[SIMGPU_API_COUNT];
static struct fault faults[MAX_FAULTS];
static size_t fault_count;
static bool has_fault[SIMGPU_API_COUNT];

static int api_lookup(const char *symbol, size_t len)
{
	for (int i = 0; i < SIMGPU_API_COUNT; i++)
		if (strlen(simgpu_api_table[i].symbol) == len &&
		    !strncmp(simgpu_api_table[i].symbol, symbol, len))
			return i;
	return -1;
}

/* Parses "symbol@n=error[,symbol@n=error...]". */
static int parse_faults(const char *spec, char *why, size_t why_len)
{
	const char *item = spec;

	if (!*item)
		return 0;
	for (;;) {
		const char *at = strchr(item, '@');
		const char *comma = strchr(item, ',');
		const char *stop = comma ? comma : item + strlen(item);
		char *end;
		int id;

		if (fault_count == MAX_FAULTS) {
			snprintf(why, why_len, "SIMGPU_FAULTS: more than %d faults", MAX_FAULTS);
			return -EINVAL;
		}
		if (!at || at > stop || (id = api_lookup(item, (size_t)(at - item))) < 0) {
			snprintf(why, why_len,
			         "SIMGPU_FAULTS='%s': '%.*s' is not symbol@n=error with a symbol "
			         "simgpu implements",
			         spec, (int)(stop - item), item);
			return -EINVAL;
		}
		errno = 0;
		unsigned long long nth = strtoull(at + 1, &end, 10);
		long error = 0;
		bool ok = !errno && end != at + 1 && *end == '=' && nth > 0;
		if (ok) {
			const char *num = end + 1;
			error = strtol(num, &end, 10);
			ok = !errno && end != num && end == stop && error > 0 && error < 100000;
		}
		if (!ok) {
			snprintf(why, why_len,
			         "SIMGPU_FAULTS='%s': '%.*s' needs a call number >= 1 and a "
			         "non-zero error code",
			         spec, (int)(stop - item), item);
			return -EINVAL;
		}
		faults[fault_count++] = (struct fault){id, nth, (int)error};
		has_fault[id] = true;
		if (!comma)
			return 0;
		item = comma + 1;
	}
}

CUresult counters_setup(char *why, size_t why_len)
{
	return parse_faults(simgpu.config.faults, why, why_len) ? CUDA_ERROR_INVALID_VALUE
	                                                        : CUDA_SUCCESS;
}

SIMGPU_EXPORT int simgpu_api_enter(enum simgpu_api_id id)
{
	uint64_t nth;

	if (simgpu_core_setup() != CUDA_SUCCESS) {
		atomic_fetch_add_explicit(&counts[id], 1, memory_order_relaxed);
		return 0; /* the layer reports the failed set-up in its own terms */
	}
	nth = atomic_fetch_add_explicit(&counts[id], 1, memory_order_relaxed) + 1;
	if (!simgpu_api_table[id].free_in_time)
		atomic_fetch_add_explicit(&simgpu.host_now, simgpu.config.api_cost_ns,
		                          memory_order_relaxed);
	if (!has_fault[id])
		return 0;
	for (size_t i = 0; i < fault_count; i++)
		if (faults[i].id == id && faults[i].nth == nth)
			return faults[i].error;
	return 0;
}

SIMGPU_EXPORT uint64_t simgpu_counter(const char *symbol)
{
	int id = api_lookup(symbol, strlen(symbol));

	return id < 0 ? UINT64_MAX : atomic_load(&counts[id]);
}

SIMGPU_EXPORT void simgpu_counters_reset(void)
{
	for (int i = 0; i < SIMGPU_API_COUNT; i++)
		atomic_store(&counts[i], 0);
}

SIMGPU_EXPORT void simgpu_counters_dump(int fd)
{
	for (int i = 0; i < SIMGPU_API_COUNT; i++) {
		uint64_t n = atomic_load(&counts[i]);
		if (n)
			dprintf(fd, "%s %" PRIu64 "\n", simgpu_api_table[i].symbol, n);
	}
}

void counters_write_at_exit(void)
{
	const char *path = simgpu.config.counters_path;
	char name[4096];
	int fd;

	if (!path || !*path)
		return;
	if (!strcmp(path, "stderr")) {
		simgpu_counters_dump(STDERR_FILENO);
		return;
	}
	/* One file per process: ranks share the setting. */
	snprintf(name, sizeof(name), "%s.%d", path, (int)getpid());
	fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		simgpu_report("cannot write counters to %s", name);
		return;
	}
	simgpu_counters_dump(fd);
	close(fd);
}
