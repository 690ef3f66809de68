/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The entry-point answers: cuGetProcAddress(_v2) and cudaGetDriverEntryPoint(ByVersion)
 * hand back Lynx's wrapper for the exact ABI the driver chose (same name, version and
 * per-thread-stream flag), found by comparing real function pointers, never by picking
 * "the newest". Unhooked names pass through unchanged.
 */
#include "hooks.h"

/* Replaces *fn by its wrapper when the lookup succeeded. */
static void answer_with_wrapper(int result, const char *symbol, void **fn)
{
	if (result == 0 && fn && *fn)
		*fn = lynx_wrapper_for(symbol, *fn);
}

CUresult lynx_active_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                         cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
	struct lynx_call call;
	CUresult result;

	lynx_call_begin(&call, LYNX_HOOK_cuGetProcAddress_v2);
	result = lynx_real_fn(cuGetProcAddress_v2)(symbol, pfn, cudaVersion, flags, status);
	answer_with_wrapper(result, symbol, pfn);
	lynx_call_reserve(&call, 0);
	lynx_call_end(&call, result);
	return result;
}

CUresult lynx_active_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                      cuuint64_t flags)
{
	struct lynx_call call;
	CUresult result;

	lynx_call_begin(&call, LYNX_HOOK_cuGetProcAddress);
	result = lynx_real_fn(cuGetProcAddress)(symbol, pfn, cudaVersion, flags);
	answer_with_wrapper(result, symbol, pfn);
	lynx_call_reserve(&call, 0);
	lynx_call_end(&call, result);
	return result;
}

/* The runtime's entry-point queries, plain and per-thread: one body each, id chosen. */
static cudaError_t entry_point(enum lynx_hook_id id, const char *symbol, void **fn,
                               unsigned long long flags,
                               enum cudaDriverEntryPointQueryResult *status)
{
	struct lynx_call call;
	cudaError_t result;

	lynx_call_begin(&call, id);
	result = id == LYNX_HOOK_cudaGetDriverEntryPoint
	                 ? lynx_real_fn(cudaGetDriverEntryPoint)(symbol, fn, flags, status)
	                 : lynx_real_fn(cudaGetDriverEntryPoint_ptsz)(symbol, fn, flags, status);
	answer_with_wrapper(result, symbol, fn);
	lynx_call_reserve(&call, 0);
	lynx_call_end(&call, result);
	return result;
}

static cudaError_t entry_point_by_version(enum lynx_hook_id id, const char *symbol, void **fn,
                                          unsigned int version, unsigned long long flags,
                                          enum cudaDriverEntryPointQueryResult *status)
{
	struct lynx_call call;
	cudaError_t result;

	lynx_call_begin(&call, id);
	result = id == LYNX_HOOK_cudaGetDriverEntryPointByVersion
	                 ? lynx_real_fn(cudaGetDriverEntryPointByVersion)(symbol, fn, version,
	                                                                  flags, status)
	                 : lynx_real_fn(cudaGetDriverEntryPointByVersion_ptsz)(symbol, fn, version,
	                                                                       flags, status);
	answer_with_wrapper(result, symbol, fn);
	lynx_call_reserve(&call, 0);
	lynx_call_end(&call, result);
	return result;
}

cudaError_t lynx_active_cudaGetDriverEntryPoint(const char *symbol, void **funcPtr,
                                                unsigned long long flags,
                                                enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return entry_point(LYNX_HOOK_cudaGetDriverEntryPoint, symbol, funcPtr, flags, driverStatus);
}

cudaError_t
lynx_active_cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr,
                                         unsigned long long flags,
                                         enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return entry_point(LYNX_HOOK_cudaGetDriverEntryPoint_ptsz, symbol, funcPtr, flags,
	                   driverStatus);
}

cudaError_t
lynx_active_cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return entry_point_by_version(LYNX_HOOK_cudaGetDriverEntryPointByVersion, symbol, funcPtr,
	                              cudaVersion, flags, driverStatus);
}

cudaError_t lynx_active_cudaGetDriverEntryPointByVersion_ptsz(
        const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
        enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return entry_point_by_version(LYNX_HOOK_cudaGetDriverEntryPointByVersion_ptsz, symbol,
	                              funcPtr, cudaVersion, flags, driverStatus);
}
