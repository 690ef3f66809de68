/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How a tinytrain kernel reaches the device through each of CUDA's launch APIs (private to
 * the kernels). The runtime APIs take the kernel's host stub; the driver APIs its
 * CUfunction and a function pointer from cudaGetDriverEntryPointByVersion.
 *
 * Thread safety: tt_launch_prepare and tt_launch_resolve run once per process, before any
 * thread launches; tt_launch then runs on any thread.
 */
#ifndef TINYTRAIN_LAUNCH_H
#define TINYTRAIN_LAUNCH_H

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "kernels.h"

/* A kernel as each API names it: its host stub, and its CUfunction once resolved. */
struct tt_launch_target {
	const void *stub;
	CUfunction function;
	/* With --kernel-modules: its CUfunction in each module tinytrain loaded, or NULL. */
	CUfunction *in_module;
};

/* Finds what api needs (the driver's entry point). Returns 0, or -1 after printing why. */
int tt_launch_prepare(enum tt_launch_api api);

/* Finds the target's CUfunction with cudaGetFuncBySymbol. Returns 0, or -1 after printing
 * why. */
int tt_launch_resolve(struct tt_launch_target *target, const char *name);

/*
 * Loads a module image (on simgpu, a text listing kernel names) with cuModuleLoadData and
 * finds each of names[0..n) in it, into functions. Returns 0, or -1 after printing why.
 */
int tt_launch_load_module(const char *image, const char *const *names, size_t n,
                          CUfunction *functions);

/*
 * Launches the target through api (prepared, and resolved for the driver APIs) with
 * 0 bytes of dynamic shared memory. The extensible APIs carry launch attributes that
 * change nothing for these kernels, as CUTLASS and cuBLASLt pass them: a 1x1x1 cluster,
 * and for the driver a priority too. A driver failure is returned as cudaErrorInvalidValue
 * when the driver says CUDA_ERROR_INVALID_VALUE, cudaErrorLaunchFailure otherwise.
 */
cudaError_t tt_launch(enum tt_launch_api api, const struct tt_launch_target *target, dim3 grid,
                      dim3 block, void **args, cudaStream_t stream);

#endif /* TINYTRAIN_LAUNCH_H */
