/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simgpu's control API: what a program or test running on the simulated GPU may ask of
 * it beyond CUDA and NCCL. Kernel registration, counters, memory statistics, the virtual
 * clock and communication-size hints. Link with -lsimgpu.
 *
 * Thread safety: every function may be called from any thread.
 */
#ifndef SIMGPU_H
#define SIMGPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SIMGPU_MAX_PARAMS 32

/* Geometry of one launch, as the kernel body and its cost function see it. */
struct simgpu_launch_dims {
	unsigned int grid[3];
	unsigned int block[3];
	unsigned int shared_mem_bytes;
};

/*
 * A simulated kernel. The body runs on the host over the whole grid at once, when the
 * launch's effects are applied (in virtual-time order, see README). It receives its
 * parameters as CUDA passes them: params[i] points to the bytes of parameter i.
 * cost_ns gives the launch's virtual duration; it may not touch device memory.
 */
struct simgpu_kernel_desc {
	const char *name;
	unsigned int num_params;
	size_t param_sizes[SIMGPU_MAX_PARAMS];
	/* Alignment of each parameter in the packed buffer; 0 means min(size, 8). */
	size_t param_aligns[SIMGPU_MAX_PARAMS];
	void (*body)(const struct simgpu_launch_dims *dims, void **params);
	uint64_t (*cost_ns)(const struct simgpu_launch_dims *dims, void **params);
};

/*
 * Registers a kernel. Returns the host stub to launch it with (cudaLaunchKernel,
 * __cudaGetKernel, cudaGetFuncBySymbol); the same pointer is its CUfunction and CUkernel.
 * Returns NULL for an invalid description. The description is copied; the name must
 * outlive the process (a string literal). Register before forking ranks or in each.
 */
const void *simgpu_kernel_register(const struct simgpu_kernel_desc *desc);

/* Calls received by the API function `symbol` (e.g. "cuMemAlloc_v2"), in this process;
 * UINT64_MAX for a name simgpu does not implement. */
uint64_t simgpu_counter(const char *symbol);
void simgpu_counters_reset(void);
/* Writes "symbol count" lines, one per function called at least once. */
void simgpu_counters_dump(int fd);

struct simgpu_memory_stats {
	size_t current_bytes; /* physical bytes held by live allocations and VMM handles */
	size_t peak_bytes;    /* highest current_bytes since start or the last reset */
	size_t capacity_bytes;
};
void simgpu_memory_stats(struct simgpu_memory_stats *out);
void simgpu_memory_reset_peak(void);

/* The virtual host clock of this process, in nanoseconds. */
uint64_t simgpu_now_ns(void);

/*
 * The next NCCL operation posted by this thread is costed as if it moved `bytes` bytes
 * (per rank, in NCCL's own count units times the type size) instead of its real size.
 * Lets a small real model have the communication time of a large virtual one.
 */
void simgpu_nccl_next_virtual_bytes(size_t bytes);

/*
 * Copies between the device and page-locked host memory (either way, by anyone: the program,
 * Lynx's offloading) are costed as if each real byte were `virtual_per_real` bytes, from now
 * on in this process and the processes it forks. Lets a small real model that has the compute
 * and communication times of a large virtual one (kernels' cost functions,
 * simgpu_nccl_next_virtual_bytes) have its offloading times too: without it, copying its
 * activations to host memory would look all but free. Copies to or from pageable memory (a
 * program reading back its loss) keep their real size. Values outside (0, 1e9) are ignored;
 * the default is 1.
 */
void simgpu_host_copy_scale(double virtual_per_real);

/* Races and errors simgpu detected and reported on stderr (e.g. unmapped access by a
 * copy); tests assert on it. */
uint64_t simgpu_error_count(void);

#ifdef __cplusplus
}
#endif
#endif /* SIMGPU_H */
