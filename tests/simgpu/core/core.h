/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simgpu core: the simulated device that the driver (libcuda.so.1), runtime
 * (libcudart.so.13) and NCCL (libnccl.so.2) layers share. Private to simgpu; programs
 * use CUDA, NCCL and simgpu.h.
 *
 * The model in one paragraph. Every API call advances a virtual host clock. Every
 * queued operation gets a virtual [start, end): start is the latest of the host clock,
 * its stream's tail, the events it waits on and (for copies and communication) the time
 * its resource is free; end follows from its cost. Kernels on different streams may
 * overlap; a kernel runs at SIMGPU_CONCURRENT_SHARE_PCT of full speed for each earlier
 * kernel it overlaps, and slower by SIMGPU_OVERLAP_SLOWDOWN_PCT while communication is
 * in flight. Effects (kernel bodies, copies, memsets, host functions, communication
 * results) are queued, and applied in order of virtual end time (ties in issue order)
 * when the host observes completion: a synchronize, a successful query, a blocking
 * copy. A consumer that ends before its producer therefore reads stale data, every run.
 *
 * Conventions: functions return CUresult; the API layers translate to their own enums.
 * Every function takes the core lock itself unless its name ends in _locked, in which
 * case the caller holds it (simgpu_core_lock). The lock is not recursive: resolve handles
 * and check buffers (simgpu_stream_get, simgpu_mem_is_accessible) before taking it. Stream and
 * event arguments are already resolved core objects (see simgpu_stream_get).
 */
#ifndef SIMGPU_CORE_H
#define SIMGPU_CORE_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "simgpu.h"

#define SIMGPU_EXPORT __attribute__((visibility("default")))

/* ---- API ids, counters, fault injection ------------------------------------------ */

enum simgpu_api_id {
#define SIMGPU_API(layer, symbol, procname, version, variant, cost) SIMGPU_API_##symbol,
#include "api.def"
#undef SIMGPU_API
	SIMGPU_API_COUNT
};

enum simgpu_layer { SIMGPU_LAYER_DRIVER, SIMGPU_LAYER_RUNTIME, SIMGPU_LAYER_NCCL };
enum simgpu_variant { SIMGPU_VARIANT_PLAIN, SIMGPU_VARIANT_PTSZ, SIMGPU_VARIANT_PTDS };

struct simgpu_api_info {
	const char *symbol;
	const char *procname;
	int version;
	enum simgpu_layer layer;
	enum simgpu_variant variant;
	bool free_in_time; /* a QUERY: counted, no virtual host time */
};
/* Indexed by enum simgpu_api_id. */
extern const struct simgpu_api_info simgpu_api_table[SIMGPU_API_COUNT];

/*
 * The first statement of every API function of every layer. Counts the call, advances
 * the virtual host clock by SIMGPU_API_COST_NS (not for QUERY functions), and returns 0, or the
 * error code that SIMGPU_FAULTS injects into this call (in the layer's own error enum), which the
 * function must return at once. Lock-free.
 */
int simgpu_api_enter(enum simgpu_api_id id);

/* ---- Initialisation and configuration --------------------------------------------- */

struct simgpu_config {
#define SIMGPU_OPTION(name, kind, field, def, help) SIMGPU_OPTION_TYPE_##kind field;
#define SIMGPU_OPTION_TYPE_SIZE uint64_t
#define SIMGPU_OPTION_TYPE_UINT uint64_t
#define SIMGPU_OPTION_TYPE_RATE uint64_t
#define SIMGPU_OPTION_TYPE_PERCENT uint64_t
#define SIMGPU_OPTION_TYPE_TEXT const char *
#include "options.def"
#undef SIMGPU_OPTION
};

/*
 * Reads the configuration and sets up the device, once per process; later calls return
 * the first outcome. CUDA_ERROR_INVALID_VALUE after a bad setting (stderr says which).
 * cuInit calls it; so does NCCL's communicator set-up.
 */
CUresult simgpu_core_init(void);
/* True once simgpu_core_init has succeeded. Driver calls other than cuInit, the error
 * and version queries and cuGetProcAddress answer CUDA_ERROR_NOT_INITIALIZED before. */
bool simgpu_core_ready(void);
/* The configuration in force; valid after simgpu_core_init succeeded. */
const struct simgpu_config *simgpu_core_config(void);

/* Parses one setting as simgpu_core_init does. For tests: returns 0, or -EINVAL and
 * writes a one-line reason into why. */
int simgpu_config_parse(struct simgpu_config *out, char *why, size_t why_len,
                        const char *(*lookup)(const char *name));

void simgpu_core_lock(void);
void simgpu_core_unlock(void);

/* Reports a problem simgpu detected (bad use, mismatch) on stderr, one write(2) per line,
 * and counts it for simgpu_error_count. printf-style. */
void simgpu_report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- Device -------------------------------------------------------------------------- */

/* SIMGPU_DEVICE_COUNT is at most this: layers may size per-device tables by it. */
#define SIMGPU_MAX_DEVICES 64

struct simgpu_device_info {
	const char *name;
	int cc_major, cc_minor;
	int sm_count;
	int max_threads_per_block;
	int warp_size;
	size_t total_bytes;
};
const struct simgpu_device_info *simgpu_device_info(void);
int simgpu_device_count(void);

/* ---- Memory --------------------------------------------------------------------------- */

/* cudaMalloc/cuMemAlloc: 4 KiB-aligned, rounded to 4 KiB pages (the bytes accounted).
 * CUDA_ERROR_OUT_OF_MEMORY beyond capacity, CUDA_ERROR_INVALID_VALUE for size 0. */
CUresult simgpu_mem_alloc(CUdeviceptr *out, size_t bytes);
/* Synchronises the device (as cudaFree does), then releases; later access faults. */
CUresult simgpu_mem_free(CUdeviceptr ptr);
/*
 * Stream-ordered allocation through `pool` (a pool handle, see below): usable by work on
 * `stream` after this call. A block freed on another stream is reused only after that
 * free has completed in virtual time (the stream waits for it).
 * CUDA_ERROR_INVALID_VALUE for size 0 or a pool that is not live; CUDA_ERROR_OUT_OF_MEMORY
 * beyond capacity or beyond the pool's maximum size.
 */
CUresult simgpu_mem_alloc_async(CUdeviceptr *out, size_t bytes, CUmemoryPool pool,
                                struct CUstream_st *stream);
/* Stream-ordered free: the range faults on access from the free's point in `stream`. Its
 * bytes leave the capacity accounting, and its pool's, at this call. */
CUresult simgpu_mem_free_async(CUdeviceptr ptr, struct CUstream_st *stream);
/* Page-locked host memory: copies from and to it read and write it at effect time. */
CUresult simgpu_mem_host_alloc(void **out, size_t bytes);
CUresult simgpu_mem_host_free(void *ptr);
void simgpu_mem_info(size_t *free_bytes, size_t *total_bytes);
/* True if p lies inside the device address window (any state). */
bool simgpu_mem_is_device(const void *p);
/* True if [p, p + bytes) is device memory that is currently allocated or mapped with
 * access, i.e. a kernel or copy may touch it. */
bool simgpu_mem_is_accessible(const void *p, size_t bytes);
/* True if [p, p + bytes) lies inside one live page-locked host allocation. */
bool simgpu_mem_is_pinned_host(const void *p, size_t bytes);
/*
 * cuMemGetAddressRange: the allocation that contains ptr, as its first address and its
 * size in bytes (either out-parameter may be NULL). An allocation is a live block of
 * simgpu_mem_alloc or simgpu_mem_alloc_async, with its accounted size (whole 4 KiB
 * pages), or one VMM mapping (a reserved range holds as many allocations as it has
 * mappings, mapped with access or not). CUDA_ERROR_NOT_FOUND for any other address:
 * freed ranges, reserved but unmapped ones, page-locked host memory, outside the window.
 */
CUresult simgpu_mem_range(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);

/*
 * Memory pools (pool.c). One stream-ordered allocator (simgpu_mem_alloc_async) serves every pool:
 * a pool is a handle, its attributes and the accounting of the allocations made through
 * it. A pool keeps no memory of its own (a free returns its bytes at once), so its
 * reserved bytes are its used bytes, and trimming has nothing to release. Pool handles
 * are validated under the core lock by every function that takes one: a handle that is
 * not live gives CUDA_ERROR_INVALID_VALUE.
 */
/* The default pool of device ordinal `device`, or NULL for an ordinal beyond
 * SIMGPU_DEVICE_COUNT. It lives as long as the process and cannot be destroyed. */
CUmemoryPool simgpu_pool_default(int device);
/* A new pool. max_size: allocations that would take its used bytes beyond it fail with
 * CUDA_ERROR_OUT_OF_MEMORY; 0 for no limit but the capacity. */
CUresult simgpu_pool_create(CUmemoryPool *out, size_t max_size);
/*
 * CUDA_ERROR_INVALID_VALUE for a default pool. Otherwise the handle stops being valid at
 * once (allocating from it, or any other use, fails); allocations still outstanding stay
 * valid and may be freed, and the pool's memory goes with the last of them, as CUDA does.
 */
CUresult simgpu_pool_destroy(CUmemoryPool pool);
/*
 * CUmemPool_attribute values, with CUDA's value types (int for the REUSE_* ones,
 * cuuint64_t for the rest). Set: the REUSE_* flags and RELEASE_THRESHOLD are stored and
 * reported back (simgpu's reuse rules do not depend on them); USED_MEM_HIGH and
 * RESERVED_MEM_HIGH accept only 0, which resets the mark to the current value; the
 * *_CURRENT ones are read-only. CUDA_ERROR_INVALID_VALUE for anything else.
 */
CUresult simgpu_pool_set_attribute(CUmemoryPool pool, CUmemPool_attribute attr, const void *value);
CUresult simgpu_pool_get_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
/* Validates the handle; nothing to release (see above). */
CUresult simgpu_pool_trim(CUmemoryPool pool, size_t min_bytes_to_keep);

/* VMM, following CUDA's rules: sizes and addresses are multiples of the granularity;
 * a handle is mapped and unmapped whole; a range is accessible only after
 * cuMemSetAccess; overlapping maps and partial unmaps fail with
 * CUDA_ERROR_INVALID_VALUE. Unmap is immediate (no synchronisation): unmapping a range
 * that queued work still uses makes that work fault when its effect is applied. */
size_t simgpu_vmm_granularity(void);
CUresult simgpu_vmm_reserve(CUdeviceptr *out, size_t size, size_t alignment, CUdeviceptr hint);
CUresult simgpu_vmm_address_free(CUdeviceptr ptr, size_t size);
CUresult simgpu_vmm_create(CUmemGenericAllocationHandle *out, size_t size);
CUresult simgpu_vmm_release(CUmemGenericAllocationHandle handle);
CUresult simgpu_vmm_map(CUdeviceptr ptr, size_t size, size_t offset,
                        CUmemGenericAllocationHandle handle);
CUresult simgpu_vmm_unmap(CUdeviceptr ptr, size_t size);
CUresult simgpu_vmm_set_access(CUdeviceptr ptr, size_t size, bool read_write);

/* ---- Streams and events --------------------------------------------------------------- */

/*
 * Resolves an API stream handle. NULL and CU_STREAM_LEGACY name the legacy default
 * stream; NULL names the calling thread's default stream instead when per_thread is
 * true (the _ptsz/_ptds entry points); CU_STREAM_PER_THREAD always names it. Returns
 * NULL for a handle that is not a live stream.
 */
struct CUstream_st *simgpu_stream_get(CUstream handle, bool per_thread);
/* flags: CU_STREAM_DEFAULT or CU_STREAM_NON_BLOCKING. priority is clamped to the range;
 * it is reported back but does not change the schedule. */
CUresult simgpu_stream_create(struct CUstream_st **out, unsigned int flags, int priority);
CUresult simgpu_stream_destroy(struct CUstream_st *stream);
CUresult simgpu_stream_synchronize(struct CUstream_st *stream);
/* CUDA_SUCCESS when all queued work has ended by the host clock, else
 * CUDA_ERROR_NOT_READY. */
CUresult simgpu_stream_query(struct CUstream_st *stream);
CUresult simgpu_stream_wait_event(struct CUstream_st *stream, struct CUevent_st *event);
int simgpu_stream_priority(const struct CUstream_st *stream);
unsigned int simgpu_stream_flags(const struct CUstream_st *stream);
void simgpu_stream_priority_range(int *least, int *greatest);
CUresult simgpu_ctx_synchronize(void);

/* Returns NULL for a handle that is not a live event. */
struct CUevent_st *simgpu_event_get(CUevent handle);
/* flags: CU_EVENT_DEFAULT, CU_EVENT_BLOCKING_SYNC, CU_EVENT_DISABLE_TIMING. */
CUresult simgpu_event_create(struct CUevent_st **out, unsigned int flags);
CUresult simgpu_event_destroy(struct CUevent_st *event);
CUresult simgpu_event_record(struct CUevent_st *event, struct CUstream_st *stream);
CUresult simgpu_event_query(struct CUevent_st *event);
CUresult simgpu_event_synchronize(struct CUevent_st *event);
/* CUDA_ERROR_NOT_READY if either has not completed by the host clock,
 * CUDA_ERROR_INVALID_HANDLE if either was created with CU_EVENT_DISABLE_TIMING. */
CUresult simgpu_event_elapsed(float *ms, struct CUevent_st *start, struct CUevent_st *end);

/* ---- Work ----------------------------------------------------------------------------- */

/* Returns the registered kernel, or the image's instance of one, behind a host stub,
 * CUfunction or CUkernel, or NULL. */
struct simgpu_kernel *simgpu_kernel_find(const void *handle);
/* A new handle for kernel, as a loaded image gives each of its functions: it runs the same
 * body under the same name and layout, and is a handle of its own (each cuModuleLoadData of
 * the same code gives functions of their own on a GPU). Never freed. NULL when out of
 * memory. */
struct simgpu_kernel *simgpu_kernel_instance(const struct simgpu_kernel *kernel);
/* Returns the registered kernel named `name` (the most recently registered one if several
 * share it; never an image's instance), or NULL. O(registered kernels). */
struct simgpu_kernel *simgpu_kernel_find_by_name(const char *name);
const char *simgpu_kernel_name(const struct simgpu_kernel *kernel);
/* CUDA_ERROR_INVALID_VALUE past the last parameter (how callers find the count). */
CUresult simgpu_kernel_param_info(const struct simgpu_kernel *kernel, size_t index, size_t *offset,
                                  size_t *size);

/*
 * Queues a launch. Parameters come either as kernelParams (one pointer per parameter)
 * or as an `extra` array {CU_LAUNCH_PARAM_BUFFER_POINTER, buf,
 * CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END} laid out by
 * simgpu_kernel_param_info; the bytes are copied now. `device` is the ordinal current on
 * the calling thread: it seeds SIMGPU_JITTER_PCT, so that ranks on different devices see
 * different noise.
 */
CUresult simgpu_launch(struct simgpu_kernel *kernel, const struct simgpu_launch_dims *dims,
                       struct CUstream_st *stream, void **params, void **extra, int device);
CUresult simgpu_launch_host_func(struct CUstream_st *stream, CUhostFn fn, void *user_data);

/*
 * Queues a copy; the direction follows from the pointers (device window or not).
 * Asynchronous copies from pageable host memory take the source bytes now; to pageable
 * host memory they complete before returning, as in CUDA. Blocking copies
 * (async = false) return after the copy has completed.
 */
CUresult simgpu_memcpy(void *dst, const void *src, size_t bytes, struct CUstream_st *stream,
                       bool async);
/* Fills count elements of elem_size (1, 2 or 4) bytes with value. */
CUresult simgpu_memset(CUdeviceptr dst, unsigned int value, unsigned int elem_size, size_t count,
                       struct CUstream_st *stream, bool async);

/* ---- Modules and libraries (module.c) ---------------------------------------------- */

/*
 * simgpu has no device code, so a module or library image (cuModuleLoadData,
 * cuLibraryLoadData) is a NUL-terminated text that lists registered kernel names, one per
 * line ("saxpy\nfill\n"); blanks around a name and empty lines are ignored, blanks inside
 * one are not allowed. Looking a
 * name up finds the registered kernel of that name if the image lists it, and answers the
 * image's own instance of it (simgpu_kernel_instance: one per image and name, made at the
 * first lookup), which is its CUfunction and CUkernel: two loads of the same image give
 * different handles, as on a GPU. Names are resolved at lookup, so a kernel may be
 * registered after its image is loaded. Unloading invalidates the image handle, never the
 * functions found in it (a GPU's become invalid).
 *
 * An image is a module or a library (the kind): a handle of one kind is not valid as the
 * other. Handles are validated under the core lock.
 */
enum simgpu_image_kind { SIMGPU_IMAGE_MODULE, SIMGPU_IMAGE_LIBRARY };
/* Copies the image (the caller may free it after). CUDA_ERROR_INVALID_VALUE for NULL;
 * CUDA_ERROR_INVALID_IMAGE for text with control characters other than tab, CR and LF,
 * with a line that is not one name (blanks inside), or naming no kernel: a real cubin,
 * fatbin or PTX image is refused so. */
CUresult simgpu_image_load(void **out, const void *image, enum simgpu_image_kind kind);
/* CUDA_ERROR_INVALID_HANDLE if handle is not a loaded image of that kind;
 * CUDA_ERROR_NOT_FOUND if the image does not list name or no kernel of that name is
 * registered. */
CUresult simgpu_image_kernel(const void *handle, enum simgpu_image_kind kind, const char *name,
                             struct simgpu_kernel **out);
/* CUDA_ERROR_INVALID_HANDLE if handle is not a loaded image of that kind. */
CUresult simgpu_image_unload(const void *handle, enum simgpu_image_kind kind);

/* ---- Graphs: stream capture, instantiation, launch (graph.c) ------------------------ */

/*
 * While a stream captures, the launches, copies, memsets, host functions, event records
 * and event waits issued to it are recorded into a graph instead of being queued: nothing
 * runs, no effect is queued, no time passes on the device. A stream that waits on an event
 * recorded in a capture joins that capture, as in CUDA; it must be joined back (the origin
 * stream waits on an event recorded in it) before the capture ends. Launching an
 * instantiated graph books every recorded op again, in capture order, each after the ops
 * it depends on, with the cost it had at capture, and queues copies of their effects
 * (kernel parameter bytes were copied at capture).
 *
 * What a capture cannot hold fails, as in CUDA, and invalidates the capture (work recorded
 * afterwards fails with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED until it is ended):
 * - CUDA's potentially unsafe calls (simgpu_mem_alloc, simgpu_mem_free,
 *   simgpu_mem_host_alloc/free, blocking simgpu_memcpy and simgpu_memset,
 *   simgpu_ctx_synchronize): CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED while a capture this
 *   thread began in Global or ThreadLocal mode, or one any thread began in Global mode,
 *   is open; those captures are invalidated. A thread's own mode is always Global.
 * - On a capturing stream: synchronize, query, destroy, stream-ordered allocation and free
 *   (no graph memory nodes), copies from or to pageable memory, graph launch (no child
 *   graphs): CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
 * - Work on, or a wait by, the legacy stream while a blocking stream captures:
 *   CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (those captures are invalidated).
 * - A capturing stream waiting on an event recorded outside any capture:
 *   CUDA_ERROR_STREAM_CAPTURE_ISOLATION; in another capture: _MERGE (both invalidated).
 * - Querying, synchronising or timing an event last recorded in an open capture:
 *   CUDA_ERROR_CAPTURED_EVENT; the capture goes on.
 * NCCL operations are not captured: on a capturing stream they still run when issued.
 */

/* mode: CU_STREAM_CAPTURE_MODE_GLOBAL, _THREAD_LOCAL or _RELAXED. CUDA_ERROR_ILLEGAL_STATE
 * if the stream already captures; CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED for the legacy
 * stream. */
CUresult simgpu_capture_begin(struct CUstream_st *stream, CUstreamCaptureMode mode);
/*
 * Ends the capture begun on `stream`, on every stream that joined it, and writes the
 * graph (NULL on failure). CUDA_ERROR_ILLEGAL_STATE if the stream does not capture,
 * _STREAM_CAPTURE_UNMATCHED if it joined a capture begun elsewhere,
 * _STREAM_CAPTURE_WRONG_THREAD from another thread unless the mode was Relaxed (the
 * capture stays open after these three); _STREAM_CAPTURE_INVALIDATED or
 * _STREAM_CAPTURE_UNJOINED (a joined stream's work does not lead back to the origin):
 * the capture ends and its graph is destroyed.
 */
CUresult simgpu_capture_end(struct CUstream_st *stream, struct CUgraph_st **graph);

struct simgpu_capture_info {
	CUstreamCaptureStatus status;
	uint64_t id;                  /* unique per capture sequence in the process */
	struct CUgraph_st *graph;     /* the graph being captured into */
	const CUgraphNode *deps;      /* the next captured op's dependencies */
	const CUgraphEdgeData *edges; /* parallel to deps, all default (zero); NULL if out
	                                 of memory */
	size_t count;
};
/* The stream's capture state; fields beyond status are set only when it captures. The
 * deps and edges arrays stay valid until the next call on the stream.
 * CUDA_ERROR_STREAM_CAPTURE_IMPLICIT for the legacy stream while a blocking stream
 * captures (nothing is invalidated). */
CUresult simgpu_capture_info(struct CUstream_st *stream, struct simgpu_capture_info *out);

/* Live handles, or NULL. */
struct CUgraph_st *simgpu_graph_get(CUgraph handle);
struct CUgraphExec_st *simgpu_graph_exec_get(CUgraphExec handle);
/* An executable copy of the graph, independent of it afterwards. flags: CUDA's
 * CUDA_GRAPH_INSTANTIATE_FLAG_* (accepted, no effect). CUDA_ERROR_ILLEGAL_STATE while
 * the graph is still being captured into. */
CUresult simgpu_graph_instantiate(struct CUgraphExec_st **out, struct CUgraph_st *graph,
                                  unsigned long long flags);
/* Books the graph's ops on `stream` after its earlier work and after the previous launch
 * of the same executable graph; later work on the stream waits for all of them.
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED into a capturing stream (simgpu does not capture
 * graph launches as child graphs). */
CUresult simgpu_graph_launch(struct CUgraphExec_st *exec, struct CUstream_st *stream);
/* Work already launched is not affected. */
CUresult simgpu_graph_exec_destroy(struct CUgraphExec_st *exec);
/* CUDA_ERROR_ILLEGAL_STATE while the graph is being captured into. */
CUresult simgpu_graph_destroy(struct CUgraph_st *graph);

/* ---- Communication (used by the NCCL layer, under the core lock) ---------------------- */

/*
 * The virtual time at which a communication operation queued now on `stream` would
 * arrive: the latest of the host clock, the stream's tail (and the legacy-stream rules)
 * and the end of this process's previous communication.
 */
uint64_t simgpu_comm_arrival_locked(struct CUstream_st *stream);
/* Applies every queued effect that ends at or before time t. */
void simgpu_effects_apply_until_locked(uint64_t t);
/*
 * Books a communication operation on `stream` over [start, end) on the network
 * resource: the stream's tail becomes at least end, and effect(arg) is queued to run at
 * end (NULL for none); arg is released with free() after it ran. `name` labels the
 * trace and must be a string literal.
 */
void simgpu_comm_book_locked(struct CUstream_st *stream, uint64_t start, uint64_t end,
                             const char *name, void (*effect)(void *arg), void *arg);
/* Consumes the simgpu_nccl_next_virtual_bytes hint of this thread: returns it and
 * clears it, or returns real_bytes when none was set. */
size_t simgpu_comm_take_virtual_bytes(size_t real_bytes);

/* Host clock, for the layers that must reason about it. */
uint64_t simgpu_host_now_locked(void);

#endif /* SIMGPU_CORE_H */
