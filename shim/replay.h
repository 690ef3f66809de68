/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Kernel replay: relaunching a recorded segment of kernels (the launches that produced a
 * group of activations) on a given stream, with pointers in their parameters redirected,
 * and checking in warm-up that a replay reproduces the original outputs bit for bit.
 *
 * A recorded kernel is what the shim's launch hook keeps (hooks_launch.c): the function
 * handle, geometry, shared memory and the packed parameter bytes, parameter i at the
 * offset cuFuncGetParamInfo gives, and for a launch made with a launch config
 * (cuLaunchKernelEx, which the runtime's cudaLaunchKernelExC reaches) its attributes.
 * Replay relaunches it through the same driver entry point, cuLaunchKernel or
 * cuLaunchKernelEx, with a kernelParams array pointing into a private copy of those bytes
 * (a launch that passed them packed in `extra` gets the same bytes), on the stream it is
 * given; a config's attributes are kept, dropped or refused as launch_attrs.h's
 * LYNX_LAUNCH_ATTRS says (a refused one makes the kernel one that cannot be replayed).
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
 * Examination (lynx_replay_examine) goes further than verification: besides the outputs it
 * accounts for every other piece of memory the parameters name (an operand: read in place,
 * or scratch the replay may be given instead), and it catches kernels that read memory the
 * parameters do not name, so that a segment can be replayed later with a later launch's
 * parameters (lynx_replay_segment_refresh) and those operands redirected.
 *
 * Thread safety: a segment holds one working copy of the parameters, so one thread at a
 * time may replay, verify, examine or refresh a given segment; different segments may be
 * used from different threads at once. Nothing here takes a lock.
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
	LYNX_REPLAY_DRIVER_CALL(launch_kernel_ex, cuLaunchKernelEx, 11060)          \
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
	/* Launched with a launch config (cuLaunchKernelEx): replayed through it. attr_count:
	 * the attributes it was given; attrs: the first lynx_launch_attrs_recorded(attr_count)
	 * of them (launch_attrs.h), or NULL when there are none. */
	bool config;
	uint32_t attr_count;
	const CUlaunchAttribute *attrs;
};

struct lynx_event;
/* Fills *out from a LAUNCH event of the recorder (recorder.h), whose payload is the
 * parameter bytes and a config's attributes (launch_attrs.h); out->params and out->attrs
 * point into the event. Returns false for another kind. */
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
 * so that a replay makes no query, and the attributes each replay passes (launch_attrs.h).
 * driver and the attributes are copied. A kernel that cannot be replayed from its record
 * (no parameter bytes, parameters beyond the recorded bytes, a parameter count other than
 * the driver's, a layout the driver does not give, a launch attribute refused or not known,
 * more attributes than a record holds) does not fail the creation: the segment is then
 * unsupported, which lynx_replay_segment_unsupported says and which replay, verification
 * and examination answer. Returns 0 and *out, -EINVAL (a NULL driver entry, no kernels) or
 * -ENOMEM.
 */
int lynx_replay_segment_create(const struct lynx_replay_driver *driver,
                               const struct lynx_replay_kernel *kernels, size_t count,
                               struct lynx_replay_segment **out);
void lynx_replay_segment_destroy(struct lynx_replay_segment *segment); /* NULL: nothing */

/* The number of kernels in the segment. */
size_t lynx_replay_segment_kernels(const struct lynx_replay_segment *segment);

/*
 * Replaces kernel `index`'s parameter bytes with kernel->params: a later launch of the same
 * producer (another iteration's pointers). It must have the same function, geometry, shared
 * memory, param_count and param_bytes as the kernel recorded at creation, and be launched
 * the same way (with a launch config or not, and then with the same attributes once those a
 * replay drops are left out); otherwise, or for an index out of range, it returns -EINVAL
 * and nothing changes. Returns 0. It copies into the segment's existing buffer: no
 * allocation, no lock, no driver call.
 */
int lynx_replay_segment_refresh(struct lynx_replay_segment *segment, size_t index,
                                const struct lynx_replay_kernel *kernel);

/* The 8-byte word (native byte order) at byte `offset` of kernel `kernel`'s current
 * parameter bytes; 0 if the kernel or the word is out of range. */
uint64_t lynx_replay_segment_word(const struct lynx_replay_segment *segment, size_t kernel,
                                  uint32_t offset);

/* NULL if every kernel can be replayed; otherwise why not (valid while the segment is), and
 * the first such kernel's index in *kernel (if kernel is not NULL). */
const char *lynx_replay_segment_unsupported(const struct lynx_replay_segment *segment,
                                            size_t *kernel);

/* What lynx_replay_launch did. */
struct lynx_replay_stats {
	uint64_t rewritten; /* parameter words redirected, over every kernel launched */
	size_t launched;    /* kernels whose launch succeeded */
	CUresult error;     /* the failed launch's result (kernel index `launched`), or success */
};

/*
 * Launches the segment's kernels in order on `stream`, each through the entry point it was
 * launched with (cuLaunchKernelEx with its kept attributes, or cuLaunchKernel) and with its
 * parameter words redirected through redirects[0..redirect_count) (the first range that
 * contains a word wins). It does not wait for them. No allocation and no lock: the cost is
 * a copy of each kernel's parameter bytes and O(words x redirects) compares, then the
 * launch.
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
#define LYNX_REPLAY_VERDICTS                                                                      \
	LYNX_REPLAY_VERDICT(REPRODUCES, "reproduces its outputs bit for bit")                     \
	LYNX_REPLAY_VERDICT(DIFFERS, "the replay's output differs from the original")             \
	LYNX_REPLAY_VERDICT(WRITES_THROUGH_DEVICE_POINTER,                                        \
	                    "the replay wrote an original output or the original of memory "      \
	                    "it names: a kernel reads a pointer from device memory")              \
	LYNX_REPLAY_VERDICT(READS_HIDDEN_MEMORY,                                                  \
	                    "with the memory its parameters name moved and the originals "        \
	                    "poisoned, the output changed: a kernel reads a pointer from "        \
	                    "device memory")                                                      \
	LYNX_REPLAY_VERDICT(UPDATES_OPERAND,                                                      \
	                    "the replay changes memory its parameters name besides its "          \
	                    "outputs, and the outputs depend on what it held")                    \
	LYNX_REPLAY_VERDICT(TOO_LARGE,                                                            \
	                    "the memory its parameters name is too large or too scattered "       \
	                    "to check")                                                           \
	LYNX_REPLAY_VERDICT(FREED_OPERAND,                                                        \
	                    "a parameter names memory freed since the segment ran (the "          \
	                    "caller's check, made before any replay)")                            \
	LYNX_REPLAY_VERDICT(LAUNCH_FAILED, "a replayed launch failed")                            \
	LYNX_REPLAY_VERDICT(UNSUPPORTED, "a launch cannot be replayed from its record")           \
	LYNX_REPLAY_VERDICT(DRIVER_FAILED, "a copy, synchronisation or allocation failed")        \
	LYNX_REPLAY_VERDICT(NO_ROOM, "checking it would take more device memory than the caller " \
	                             "allows now (it may try again)")                             \
	LYNX_REPLAY_VERDICT(NO_MEMORY, "not enough host or device memory to verify")              \
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

/* A verification's or examination's result. Fields not named for the verdict are 0. */
struct lynx_replay_check {
	enum lynx_replay_verdict verdict;
	CUresult error;   /* LAUNCH_FAILED, DRIVER_FAILED, NO_MEMORY: the driver's result */
	const char *call; /* DRIVER_FAILED: the driver function that failed */
	/* LAUNCH_FAILED, UNSUPPORTED: the kernel's index. Examination's UPDATES_OPERAND,
	 * TOO_LARGE, WRITES_THROUGH_DEVICE_POINTER with operand_memory, and READS_HIDDEN_MEMORY
	 * where some memory was found to hold a pointer: the kernel whose parameter word (at
	 * byte `word` of its parameters) names (or leads to) the memory concerned. */
	size_t kernel;
	uint32_t word;
	/* DIFFERS, WRITES_THROUGH_DEVICE_POINTER, READS_HIDDEN_MEMORY, UPDATES_OPERAND: the
	 * output's index, and the first differing byte in it. */
	size_t output;
	size_t offset;
	/* WRITES_THROUGH_DEVICE_POINTER in an examination: the replay wrote the original of
	 * memory other than an output (`offset` is then the first byte written in it). */
	bool operand_memory;
	uint64_t rewritten;  /* parameter words the replay (the first pass) redirected */
	bool restore_failed; /* the originals could not be put back: they are lost */
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

/* ---- Examination ----------------------------------------------------------------------- */

/*
 * Which device allocation holds addr: true and its [*base, *base + *size), which must
 * contain addr; false if addr is in none (it is then not a pointer). Called from the
 * examining thread only, many times (see lynx_replay_examine): it should be quick.
 */
typedef bool (*lynx_replay_range_of)(CUdeviceptr addr, CUdeviceptr *base, size_t *size, void *arg);

/*
 * LYNX_REPLAY_ROLES(X): X(name, text) for each thing an operand can be to a replay.
 * INPUT: read in place; the replay leaves it unchanged.
 * SCRATCH: the replay writes it, and the outputs do not depend on what it held: a later
 * replay redirects it to scratch memory of its size (a shared GEMM workspace; the in-place
 * tensor of a dropout whose saved output is the mask).
 */
#define LYNX_REPLAY_ROLES(X) \
	X(INPUT, "input")    \
	X(SCRATCH, "scratch")

enum lynx_replay_role {
#define LYNX_REPLAY_ROLE_ENUM(name, text) LYNX_REPLAY_##name,
	LYNX_REPLAY_ROLES(LYNX_REPLAY_ROLE_ENUM)
#undef LYNX_REPLAY_ROLE_ENUM
	        LYNX_REPLAY_ROLE_COUNT
};

/* "input", "scratch"; "unknown" for a value out of range. */
const char *lynx_replay_role_name(enum lynx_replay_role role);

/*
 * One parameter word that names memory other than the outputs: an aligned 8-byte word
 * inside one parameter (the words redirection considers) whose value lies in an allocation
 * (range_of says so) and not inside an output or a temporary's from-range. Several words
 * naming one allocation each get an entry, with the same role.
 */
struct lynx_replay_operand {
	uint32_t kernel;       /* the kernel's index in the segment */
	uint32_t offset;       /* the word's byte offset in that kernel's parameter bytes */
	uint64_t displacement; /* the word's value minus the allocation's base */
	size_t size;           /* the allocation's size */
	enum lynx_replay_role role;
};

/* What lynx_replay_examine is given, and what it found. */
struct lynx_replay_examination {
	lynx_replay_range_of range_of; /* required */
	void *range_arg;
	/* The most bytes of memory other than the outputs it may snapshot: the operands'
	 * distinct allocations, and what pointers stored in them lead to. More: TOO_LARGE. */
	size_t max_operand_bytes;
	/* The most device memory it may take: the outputs' scratch and a copy of each operand
	 * allocation (pass 2 below). More: NO_ROOM, before any replay. 0: no limit. */
	size_t max_device_bytes;
	struct lynx_replay_operand *operands; /* out: operand_capacity entries (NULL if 0) */
	size_t operand_capacity;              /* more operand words: TOO_LARGE */
	/* out: the operand words found, in kernel then offset order; all are in operands[]
	 * unless the verdict is TOO_LARGE (then it may exceed the capacity). Their roles mean
	 * something only when the verdict is REPRODUCES. */
	size_t operand_count;
};

/*
 * Verifies the segment as lynx_replay_verify does (with scratch it allocates), then finds
 * and classifies everything else its parameters name, so that the segment may be replayed
 * later, with a later launch's parameters, with INPUT operands read in place and SCRATCH
 * ones redirected to scratch. Only REPRODUCES allows that; how->operands then holds every
 * operand with its role.
 *
 * The operands, and the memory that pointer-like words stored in them lead to (range_of
 * asked about each aligned word), are snapshotted to host before any replay and put back
 * at the end, whatever the verdict. Too many operand words or bytes: TOO_LARGE, before any
 * replay. Then, all on `stream`, blocking:
 * 1. lynx_replay_verify's check (outputs poisoned, replayed into scratch, everything else
 *    read in place); anything but REPRODUCES is the verdict. The operands are put back.
 * 2. Relocation: each operand allocation copied to fresh device memory and redirected there
 *    (outputs to re-poisoned scratch), while the originals of operands and outputs, and
 *    the memory found through pointers, hold their complement. A write to an original is
 *    WRITES_THROUGH_DEVICE_POINTER; outputs that differ from the originals mean a kernel
 *    read memory its parameters do not name: READS_HIDDEN_MEMORY. An operand copy that
 *    changed is written.
 * 3. Only if some operand is written: its copy filled with its complement, the others with
 *    their snapshot. Outputs still equal to the originals: the written ones are SCRATCH,
 *    the rest INPUT, REPRODUCES; else UPDATES_OPERAND.
 * Poison is the bitwise complement, except that aligned words of the snapshot that range_of
 * places in an allocation keep their value, so that a kernel following a pointer it reads
 * from device memory reads poison rather than faulting on a poisoned address (on a GPU, an
 * illegal address ends the context).
 *
 * Limits: a write is seen only as a change, so memory the replay writes with exactly what
 * it held (a workspace examined while it still holds this segment's own staging) is taken
 * for INPUT; examine once such memory has been reused, or accept that the replay rewrites it
 * in place. Memory reached through pointers that range_of does not know (host memory), or
 * that nothing names (a module's __device__ variables), is read in place unseen. Poisoned
 * memory that a kernel reads as indices (through a pointer stored in device memory, or
 * scratch it reads before writing) may send it out of bounds: on a GPU, a fault.
 *
 * The caller must guarantee, besides what lynx_replay_verify requires of the outputs, that
 * nothing else reads or writes the operands, or the memory pointers stored in them lead to,
 * while this runs: their originals are poisoned for a while. In practice the device must be
 * idle except for `stream`: synchronise the context (cuCtxSynchronize) first and hold the
 * trainer's threads. The operands must hold what the segment's kernels read when they first
 * ran. The cost is warm-up only: host memory for every snapshot (the outputs' and up to
 * max_operand_bytes) and twice the largest allocation snapshotted, device memory for the
 * outputs' scratch and the operands' copies, one
 * range_of call per aligned word of the snapshotted memory whose value could be an address
 * (from 64 KiB to 2^48, the user addresses of x86-64 and AArch64 Linux), three replays and
 * a synchronisation per copy. Host and device memory failures: NO_MEMORY; another driver
 * failure: DRIVER_FAILED (restore_failed if the originals could not be put back). A NULL
 * how, or one without range_of: INVALID. out must not be NULL; the verdict is also
 * returned.
 */
enum lynx_replay_verdict
lynx_replay_examine(struct lynx_replay_segment *segment, CUstream stream,
                    const struct lynx_replay_range *outputs, size_t output_count,
                    const struct lynx_replay_redirect *temporaries, size_t temporary_count,
                    struct lynx_replay_examination *how, struct lynx_replay_check *out);

#endif /* LYNX_REPLAY_H */
