/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Kernel replay: relaunching a recorded segment of kernels (the launches that produced a
 * group of activations) on a given stream, with pointers in their parameters redirected,
 * and checking in warm-up that a replay reproduces the original outputs bit for bit.
 *
 * A recorded kernel is what the shim's launch hook keeps (hooks_launch.c): the function
 * handle, geometry, shared memory and the packed parameter bytes, parameter i at the
 * offset cuFuncGetParamInfo gives. Replay relaunches it with cuLaunchKernel and a
 * kernelParams array pointing into a private copy of those bytes. Launch attributes
 * (cuLaunchKernelEx: clusters, cooperative launch, priorities) are not recorded and not
 * replayed: the caller must not build segments from launches that had any.
 *
 * Redirection rewrites, before each launch, every 8-byte-aligned word of the parameter
 * bytes that lies wholly inside one parameter (so also the words of by-value structs) and
 * whose value falls in a redirect's from-range, to the same offset in its to-range. It
 * cannot tell a pointer from an integer: a non-pointer word (a seed, a stride) whose value
 * happens to be an address inside a from-range is rewritten too. Device addresses are large
 * and sparse, so this is rare, and verification catches the segments where it matters.
 * A one-past-the-end pointer (value == from + size) is not redirected.
 *
 * The module never links libcuda: it calls the driver through the table it is given
 * (struct lynx_replay_driver), which the shim fills from its real functions (so replays
 * are not recorded as the trainer's launches) and tests fill from simgpu.
 *
 * Thread safety: a segment holds one working copy of the parameters, so one thread at a
 * time may replay or verify a given segment; different segments may be used from
 * different threads at once. Nothing here takes a lock.
 */
#ifndef LYNX_REPLAY_H
#define LYNX_REPLAY_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The driver functions replay calls: LYNX_REPLAY_DRIVER_CALL(field, symbol, version).
 * version is the cuGetProcAddress key of the ABI, and the field's type is cudaTypedefs.h's
 * PFN_<symbol>_v<version>.
 */
#define LYNX_REPLAY_DRIVER_CALLS                                                    \
	LYNX_REPLAY_DRIVER_CALL(launch_kernel, cuLaunchKernel, 4000)                \
	LYNX_REPLAY_DRIVER_CALL(func_get_param_info, cuFuncGetParamInfo, 12040)     \
	LYNX_REPLAY_DRIVER_CALL(kernel_get_param_info, cuKernelGetParamInfo, 12040) \
	LYNX_REPLAY_DRIVER_CALL(memcpy_dtoh_async, cuMemcpyDtoHAsync, 3020)         \
	LYNX_REPLAY_DRIVER_CALL(memcpy_htod_async, cuMemcpyHtoDAsync, 3020)         \
	LYNX_REPLAY_DRIVER_CALL(stream_synchronize, cuStreamSynchronize, 2000)      \
	LYNX_REPLAY_DRIVER_CALL(mem_alloc, cuMemAlloc, 3020)                        \
	LYNX_REPLAY_DRIVER_CALL(mem_free, cuMemFree, 3020)

struct lynx_replay_driver {
#define LYNX_REPLAY_DRIVER_CALL(field, symbol, version) PFN_##symbol##_v##version field;
	LYNX_REPLAY_DRIVER_CALLS
#undef LYNX_REPLAY_DRIVER_CALL
};

/* Finds one driver function: symbol at ABI version (as cuGetProcAddress takes them), or
 * NULL if there is none. */
typedef void *(*lynx_replay_lookup)(const char *symbol, int cuda_version, void *arg);

/* Fills every entry of driver through lookup. Returns 0, or -ENOENT if any is missing
 * (that entry is then NULL, and lynx_replay_segment_create refuses the table). */
int lynx_replay_driver_resolve(struct lynx_replay_driver *driver, lynx_replay_lookup lookup,
                               void *arg);

/* One recorded launch. The bytes are copied by lynx_replay_segment_create. */
struct lynx_replay_kernel {
	CUfunction function; /* a CUfunction or a CUkernel handle, as it was launched */
	unsigned int grid[3], block[3];
	unsigned int shared_mem;
	uint32_t param_count; /* parameters the function has, as the recorder saw them */
	uint32_t param_bytes; /* bytes at params (the recorder may have truncated them) */
	const void *params;   /* packed: parameter i at its cuFuncGetParamInfo offset; or NULL */
};

struct lynx_event;
/* Fills *out from a LAUNCH event of the recorder (recorder.h), whose payload is the
 * parameter bytes; out->params points into the event. Returns false for another kind. */
bool lynx_replay_kernel_from_event(const struct lynx_event *event, struct lynx_replay_kernel *out);

/* Pointers into [from, from + size) are rewritten to the same offset from `to`. */
struct lynx_replay_redirect {
	CUdeviceptr from;
	size_t size;
	CUdeviceptr to;
};

/* A device range: an output the segment produced. */
struct lynx_replay_range {
	CUdeviceptr ptr;
	size_t size;
};

struct lynx_replay_segment;

/*
 * Copies `count` kernels (in launch order) into a new segment and asks the driver for each
 * function's parameter layout (cuFuncGetParamInfo, or cuKernelGetParamInfo for a CUkernel),
 * so that a replay makes no query. driver is copied. A kernel that cannot be replayed from
 * its record (no parameter bytes, parameters beyond the recorded bytes, a parameter count
 * other than the driver's, a layout the driver does not give) does not fail the creation:
 * the segment is then unsupported, which lynx_replay_segment_unsupported says and which
 * replay and verification answer. Returns 0 and *out, -EINVAL (a NULL driver entry, no
 * kernels) or -ENOMEM.
 */
int lynx_replay_segment_create(const struct lynx_replay_driver *driver,
                               const struct lynx_replay_kernel *kernels, size_t count,
                               struct lynx_replay_segment **out);
void lynx_replay_segment_destroy(struct lynx_replay_segment *segment); /* NULL: nothing */

/* The number of kernels in the segment. */
size_t lynx_replay_segment_kernels(const struct lynx_replay_segment *segment);

/* NULL if every kernel can be replayed; otherwise why not (a static string), and the first
 * such kernel's index in *kernel (if kernel is not NULL). */
const char *lynx_replay_segment_unsupported(const struct lynx_replay_segment *segment,
                                            size_t *kernel);

/* What lynx_replay_launch did. */
struct lynx_replay_stats {
	uint64_t rewritten; /* parameter words redirected, over every kernel launched */
	size_t launched;    /* kernels whose launch succeeded */
	CUresult error;     /* the failed launch's result (kernel index `launched`), or success */
};

/*
 * Launches the segment's kernels in order on `stream`, each with its parameter words
 * redirected through redirects[0..redirect_count) (the first range that contains a word
 * wins). It does not wait for them. No allocation and no lock: the cost is a copy of each
 * kernel's parameter bytes and O(words x redirects) compares, then the launch.
 * Returns 0 (all launched); -ENOTSUP (the segment is unsupported: nothing launched);
 * -EINVAL (a redirect with from 0, size 0, or a range that wraps: nothing launched); -EIO
 * (a launch failed: out->launched kernels before it are queued, the rest are not).
 * out may be NULL.
 */
int lynx_replay_launch(struct lynx_replay_segment *segment, CUstream stream,
                       const struct lynx_replay_redirect *redirects, size_t redirect_count,
                       struct lynx_replay_stats *out);

/*
 * LYNX_REPLAY_VERDICT(name, text): what verification concludes. Only REPRODUCES lets the
 * executor evict the segment's outputs and recompute them.
 */
#define LYNX_REPLAY_VERDICTS                                                                 \
	LYNX_REPLAY_VERDICT(REPRODUCES, "reproduces its outputs bit for bit")                \
	LYNX_REPLAY_VERDICT(DIFFERS, "the replay's output differs from the original")        \
	LYNX_REPLAY_VERDICT(WRITES_THROUGH_DEVICE_POINTER,                                   \
	                    "the replay wrote an original output: a kernel reads a pointer " \
	                    "from device memory")                                            \
	LYNX_REPLAY_VERDICT(LAUNCH_FAILED, "a replayed launch failed")                       \
	LYNX_REPLAY_VERDICT(UNSUPPORTED, "a launch cannot be replayed from its record")      \
	LYNX_REPLAY_VERDICT(DRIVER_FAILED, "a copy, synchronisation or allocation failed")   \
	LYNX_REPLAY_VERDICT(NO_MEMORY, "not enough host or device memory to verify")         \
	LYNX_REPLAY_VERDICT(INVALID, "invalid arguments")

enum lynx_replay_verdict {
#define LYNX_REPLAY_VERDICT(name, text) LYNX_REPLAY_##name,
	LYNX_REPLAY_VERDICTS
#undef LYNX_REPLAY_VERDICT
	        LYNX_REPLAY_VERDICT_COUNT
};

/* "REPRODUCES", "DIFFERS", ...; "UNKNOWN" for a value out of range. */
const char *lynx_replay_verdict_name(enum lynx_replay_verdict verdict);
/* The verdict's meaning (the texts above); "unknown verdict" out of range. */
const char *lynx_replay_verdict_text(enum lynx_replay_verdict verdict);

/* A verification's result. Fields not named for the verdict are 0. */
struct lynx_replay_check {
	enum lynx_replay_verdict verdict;
	CUresult error;      /* LAUNCH_FAILED, DRIVER_FAILED, NO_MEMORY: the driver's result */
	const char *call;    /* DRIVER_FAILED: the driver function that failed */
	size_t kernel;       /* LAUNCH_FAILED, UNSUPPORTED: the kernel's index */
	size_t output;       /* DIFFERS, WRITES_THROUGH_DEVICE_POINTER: the output's index */
	size_t offset;       /* the same two: the first differing byte in that output */
	uint64_t rewritten;  /* parameter words the replay redirected */
	bool restore_failed; /* the original outputs could not be put back: they are lost */
	char reason[256];    /* one line for the log: the verdict and its details */
};

/*
 * Replays the segment into scratch and compares with the originals, bit for bit.
 *
 * outputs[0..output_count) are device ranges the segment produced, whose current contents
 * are the original results (disjoint). scratch[i] is device memory of outputs[i].size
 * bytes, disjoint from everything the segment touches; if scratch is NULL, verification
 * allocates it (cuMemAlloc) and frees it before returning. temporaries[0..temporary_count)
 * are further redirects the caller chooses, typically buffers the segment wrote and freed
 * whose addresses were reused since, each to scratch of its own. Everything else the
 * segment's parameters point to is read in place: those inputs must still hold what they
 * held when the segment first ran.
 *
 * On `stream`: snapshot the originals to host; write the bitwise complement of each
 * original into it and into its scratch (so that a byte the replay does not write, or
 * writes in the wrong place, cannot look right); replay with each output redirected to its
 * scratch; read scratch and originals back; put the originals' snapshot back; synchronise.
 * An original that changed during the replay means a kernel found its output pointer
 * somewhere other than its parameters, i.e. in device memory: WRITES_THROUGH_DEVICE_POINTER.
 * Otherwise the scratch must equal the snapshot byte for byte: REPRODUCES, else DIFFERS.
 * Kernels that accumulate into an output (+=, in place) therefore DIFFER, as they should:
 * replaying them would not give the same bytes.
 *
 * The originals are always put back before returning, whatever the verdict, unless the
 * copy back itself fails (restore_failed, verdict DRIVER_FAILED). The caller must make sure
 * that nothing else reads or writes the outputs while this runs (in practice: the trainer's
 * streams have finished the segment and are held, or verification runs on the stream that
 * ran the segment before the next consumer is enqueued), and that the originals are
 * complete with respect to `stream` (e.g. `stream` waits on an event recorded after the
 * segment). It blocks the calling thread on `stream` (cuStreamSynchronize), and allocates
 * host memory for the snapshot (the outputs' total size) and one output's copy: it is for
 * warm-up, not for the training steps. out must not be NULL; the verdict is also returned.
 */
enum lynx_replay_verdict lynx_replay_verify(struct lynx_replay_segment *segment, CUstream stream,
                                            const struct lynx_replay_range *outputs,
                                            const CUdeviceptr *scratch, size_t output_count,
                                            const struct lynx_replay_redirect *temporaries,
                                            size_t temporary_count, struct lynx_replay_check *out);

#endif /* LYNX_REPLAY_H */
