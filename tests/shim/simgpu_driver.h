/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simgpu's driver for the tests of the shim's plain modules (arena, replay, timing, host
 * link): dlopened from build/simgpu (harness.h's build_dir) and initialised, its functions
 * reached through cuGetProcAddress as the shim reaches a real driver's. simgpu reads its
 * settings (SIMGPU_*) when it loads: set them first. Include after harness.h.
 */
#ifndef TESTS_SHIM_SIMGPU_DRIVER_H
#define TESTS_SHIM_SIMGPU_DRIVER_H

#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>

typedef CUresult (*simgpu_get_proc_address_fn)(const char *symbol, void **pfn, int version,
                                               cuuint64_t flags,
                                               CUdriverProcAddressQueryResult *status);

static simgpu_get_proc_address_fn simgpu_get_proc_address;

/* A driver function at an ABI version, or NULL. The shape of the modules' lookup callbacks
 * (arena.h, replay.h); arg is not used. */
static inline void *simgpu_proc(const char *symbol, int version, void *arg)
{
	CUdriverProcAddressQueryResult status;
	void *fn = NULL;

	(void)arg;
	if (!simgpu_get_proc_address ||
	    simgpu_get_proc_address(symbol, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) !=
	            CUDA_SUCCESS ||
	    status != CU_GET_PROC_ADDRESS_SUCCESS)
		return NULL;
	return fn;
}

/* Loads simgpu's libcuda.so.1 and calls cuInit: its handle (for simgpu's own functions,
 * through dlsym), or NULL with the reason on stderr. */
static inline void *simgpu_driver_load(void)
{
	char path[1200];
	void *libcuda;
	CUresult (*init)(unsigned int);

	snprintf(path, sizeof(path), "%s/simgpu/libcuda.so.1", build_dir);
	if (!(libcuda = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
		fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
		return NULL;
	}
	init = (CUresult(*)(unsigned int))dlsym(libcuda, "cuInit");
	simgpu_get_proc_address = (simgpu_get_proc_address_fn)dlsym(libcuda, "cuGetProcAddress_v2");
	if (!init || !simgpu_get_proc_address || init(0) != CUDA_SUCCESS) {
		fprintf(stderr, "%s: no cuInit or cuGetProcAddress_v2, or cuInit failed\n", path);
		return NULL;
	}
	return libcuda;
}

#endif /* TESTS_SHIM_SIMGPU_DRIVER_H */
