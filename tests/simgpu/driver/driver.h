/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simgpu's driver layer (libcuda.so.1): what its files share.
 *
 * Every entry point of api.def's DRIVER rows is defined in one of the driver files with its
 * exact cuda.h signature and SIMGPU_EXPORT, and has the same shape: simgpu_driver_enter
 * first (an injected fault, or CUDA_ERROR_NOT_INITIALIZED before cuInit succeeded,
 * returned at once; the calls CUDA allows before cuInit use simgpu_api_enter alone),
 * then argument checks, then one call into the core. Entry points never call each other: an
 * exported name is interposable, so such a call would go through a preloaded hook and be counted
 * twice.
 *
 * Thread safety: the entry points may be called from any thread; the core locks.
 */
#ifndef SIMGPU_DRIVER_H
#define SIMGPU_DRIVER_H

#include <cuda.h>
#include <stdbool.h>

#include "core.h"

/* The CUDA version this driver implements (cuDriverGetVersion). */
#define SIMGPU_DRIVER_VERSION 13000

/*
 * Each entry point also gets a hidden second name, simgpu_local_<symbol>, which the
 * cuGetProcAddress table points to. Taking the address of a default-visibility symbol
 * inside a shared library yields whatever definition wins symbol lookup, and a preloaded
 * library (Lynx) that hooks cuMemAlloc_v2 would win: cuGetProcAddress would hand Lynx
 * its own hook as the "real" function. A hidden alias binds to simgpu's definition.
 *
 * The declarations come from api.def, so a DRIVER row without a definition and its
 * SIMGPU_DRIVER_LOCAL_NAME fails the link of libcuda.so.1.
 */
#define SIMGPU_DRIVER_DECLARE_DRIVER(symbol) \
	extern __typeof__(symbol) simgpu_local_##symbol __attribute__((visibility("hidden")));
#define SIMGPU_DRIVER_DECLARE_RUNTIME(symbol)
#define SIMGPU_DRIVER_DECLARE_NCCL(symbol)
#define SIMGPU_API(layer, symbol, procname, version, variant, cost) \
	SIMGPU_DRIVER_DECLARE_##layer(symbol)
#include "api.def"
#undef SIMGPU_API
#undef SIMGPU_DRIVER_DECLARE_DRIVER
#undef SIMGPU_DRIVER_DECLARE_RUNTIME
#undef SIMGPU_DRIVER_DECLARE_NCCL

/* Goes right after the definition of `symbol` (an alias must be in the defining file). */
#define SIMGPU_DRIVER_LOCAL_NAME(symbol)                \
	extern __typeof__(symbol) simgpu_local_##symbol \
	        __attribute__((alias(#symbol), visibility("hidden")))

/*
 * The prologue of every entry point that needs an initialised driver: counts the call
 * (simgpu_api_enter), then returns the fault injected into it, or
 * CUDA_ERROR_NOT_INITIALIZED before cuInit succeeded, or CUDA_SUCCESS to go on.
 */
static inline CUresult simgpu_driver_enter(enum simgpu_api_id id)
{
	int fault = simgpu_api_enter(id);

	if (fault)
		return (CUresult)fault;
	return simgpu_core_ready() ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

/* True if dev is a device ordinal of this process (core initialised). */
bool simgpu_driver_device_valid(CUdevice dev);

/* The device of the calling thread's current context; 0 when it has none (as
 * cuCtxGetDevice answers). Whose default pool cuMemAllocAsync allocates from. */
CUdevice simgpu_driver_current_device(void);

#endif /* SIMGPU_DRIVER_H */
