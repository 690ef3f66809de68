/* SPDX-License-Identifier: Apache-2.0 */
/* simgpu driver: cuGetProcAddress, answered from a table expanded from api.def. */
#include <string.h>

#include "driver.h"

struct procaddr_entry {
	const char *procname;
	int version;
	enum simgpu_variant variant;
	void *fn;
};

/* Every DRIVER row of api.def: the ABI that (procname, version, variant) names. */
#define PROCADDR_ROW_DRIVER(procname, fn, version, variant) \
	{procname, version, variant, (void *)fn},
#define PROCADDR_ROW_RUNTIME(procname, fn, version, variant)
#define PROCADDR_ROW_NCCL(procname, fn, version, variant)
static const struct procaddr_entry procaddr_table[] = {
#define SIMGPU_API(layer, symbol, procname, version, variant, cost) \
	PROCADDR_ROW_##layer(#procname, simgpu_local_##symbol, version, SIMGPU_VARIANT_##variant)
#include "api.def"
#undef SIMGPU_API
};

/*
 * The newest entry for `name` not newer than `version` whose variant is per-thread
 * (PTSZ/PTDS) or plain, as asked. Sets *known when any entry has that name. Exact
 * names only: "cu" must not match "cuInit". O(entries), about a hundred strcmp; callers
 * look entry points up once, not per call.
 */
static const struct procaddr_entry *procaddr_find(const char *name, int version, bool per_thread,
                                                  bool *known)
{
	const struct procaddr_entry *best = NULL;

	for (size_t i = 0; i < sizeof(procaddr_table) / sizeof(procaddr_table[0]); i++) {
		const struct procaddr_entry *e = &procaddr_table[i];

		if (strcmp(e->procname, name) != 0)
			continue;
		*known = true;
		if (e->version > version || (e->variant != SIMGPU_VARIANT_PLAIN) != per_thread)
			continue;
		if (!best || e->version > best->version)
			best = e;
	}
	return best;
}

/*
 * The shared answer of both cuGetProcAddress ABIs. The per-thread flag prefers a
 * PTSZ/PTDS entry and falls back to the plain one for functions without a stream (or
 * without a per-thread variant at that version); the default and legacy flags give
 * plain entries only. The default flag means legacy here: the per-thread default of
 * code built with --default-stream per-thread is applied by cuda.h's inline wrapper,
 * before the call reaches the driver.
 */
static CUresult procaddr_lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                CUdriverProcAddressQueryResult *status)
{
	const cuuint64_t known_flags =
	        CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	const struct procaddr_entry *e = NULL;
	bool known = false;

	if (!symbol || !pfn)
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	/* Asking for a newer ABI than this driver has is an error; an unknown or too-new
	 * symbol is not: CUDA_SUCCESS with a NULL pointer, the status says why (cuda.h). */
	if ((flags & ~known_flags) || cudaVersion > SIMGPU_DRIVER_VERSION)
		return CUDA_ERROR_INVALID_VALUE;
	if (per_thread)
		e = procaddr_find(symbol, cudaVersion, true, &known);
	if (!e)
		e = procaddr_find(symbol, cudaVersion, false, &known);
	if (e)
		*pfn = e->fn;
	if (status && e)
		*status = CU_GET_PROC_ADDRESS_SUCCESS;
	else if (status)
		*status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
		                : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return CUDA_SUCCESS;
}

/* Both ABIs work before cuInit: the runtime resolves cuInit itself through them. */
SIMGPU_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                           cuuint64_t flags,
                                           CUdriverProcAddressQueryResult *symbolStatus)
{
	int fault = simgpu_api_enter(SIMGPU_API_cuGetProcAddress_v2);

	if (fault)
		return (CUresult)fault;
	return procaddr_lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}
SIMGPU_DRIVER_LOCAL_NAME(cuGetProcAddress_v2);

SIMGPU_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                        cuuint64_t flags)
{
	int fault = simgpu_api_enter(SIMGPU_API_cuGetProcAddress);

	if (fault)
		return (CUresult)fault;
	return procaddr_lookup(symbol, pfn, cudaVersion, flags, NULL);
}
SIMGPU_DRIVER_LOCAL_NAME(cuGetProcAddress);
