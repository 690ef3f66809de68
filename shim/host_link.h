/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The link to pinned host memory, measured once at the end of warm-up, for the planners'
 * OFFLOAD decisions (the profile's host_link, policy/problem.h's d2h and h2d).
 *
 * On a stream of its own: one untimed copy each way (first-touch and lazy set-up costs),
 * then a large and a small copy each way, timed with CUDA events: the rate is the bytes
 * the large one moves beyond the small one over the time it takes beyond it, so that a
 * copy's fixed cost does not count; the latency is the small one's time beyond its bytes
 * at that rate. The stream is idle otherwise, so the link
 * is measured without the training's NCCL traffic beside it: an upper bound of what
 * offloading gets while collectives run.
 *
 * The module never links libcuda: the driver functions come in a table (the shim passes
 * its own exported wrappers, called inside lynx_nested_begin/end so that they are counted
 * but not recorded; tests pass simgpu's). It blocks the calling thread on the stream
 * (warm-up only) and holds `bytes` of device and pinned host memory while it runs.
 */
#ifndef LYNX_HOST_LINK_H
#define LYNX_HOST_LINK_H

#include <cuda.h>
#include <stddef.h>

struct lynx_host_link_driver {
	CUresult (*mem_alloc)(CUdeviceptr *ptr, size_t bytes);
	CUresult (*mem_free)(CUdeviceptr ptr);
	CUresult (*mem_alloc_host)(void **ptr, size_t bytes);
	CUresult (*mem_free_host)(void *ptr);
	CUresult (*stream_create)(CUstream *stream, unsigned int flags);
	CUresult (*stream_destroy)(CUstream stream);
	CUresult (*stream_synchronize)(CUstream stream);
	CUresult (*event_create)(CUevent *event, unsigned int flags);
	CUresult (*event_destroy)(CUevent event);
	CUresult (*event_record)(CUevent event, CUstream stream);
	CUresult (*event_elapsed)(float *ms, CUevent start, CUevent end);
	CUresult (*memcpy_dtoh_async)(void *dst, CUdeviceptr src, size_t bytes, CUstream stream);
	CUresult (*memcpy_htod_async)(CUdeviceptr dst, const void *src, size_t bytes,
	                              CUstream stream);
};

struct lynx_host_link {
	double d2h_bytes_per_s, h2d_bytes_per_s; /* > 0 when measured */
	double latency_s;                        /* a small copy's time beyond bytes / rate */
};

/* The large copy's size: 4 MiB takes about 80 us each way on a PCIe 5 link, far above the
 * events' resolution (0.5 us), and is little memory to hold for a moment. */
#define LYNX_HOST_LINK_BYTES ((size_t)4 << 20)
/* The small copy's size: large enough that its copy, not the host's calls around it,
 * decides when its end event completes (5 us on a PCIe 5 link), so that the two points
 * differ by the bytes alone. */
#define LYNX_HOST_LINK_SMALL_BYTES ((size_t)256 << 10)

/*
 * Measures the link with copies of `bytes` (more than LYNX_HOST_LINK_SMALL_BYTES) on the
 * calling thread's current context. Returns 0 and *out; -EINVAL (a NULL entry, too few
 * bytes), -ENOMEM (no device or pinned memory) or -EIO (another driver failure, or a large
 * copy timed no longer than the small one); on failure *out is all 0. Everything it made is
 * released either way.
 */
int lynx_host_link_measure(const struct lynx_host_link_driver *driver, size_t bytes,
                           struct lynx_host_link *out);

#endif /* LYNX_HOST_LINK_H */
