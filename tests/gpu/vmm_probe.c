/* SPDX-License-Identifier: Apache-2.0 */
/*
 * vmm_probe: measures what CUDA's virtual memory management calls cost on device 0, and
 * whether a map or unmap on the host stalls a kernel running on another stream. It loads
 * libcuda.so.1 at run time (it links no CUDA library, so it starts anywhere) and prints one
 * JSON object on stdout; progress goes to stderr. See docs/gpu/README.md.
 * One file (about 1200 lines) because it is built and carried alone, with no Lynx code.
 *
 * Exit status: 0 when the JSON was written (failed measurements are recorded in it), 1 when
 * libcuda could not be loaded or no context could be made (the JSON then has "error"),
 * 2 for a bad command line.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#define LYNX_MIB ((size_t)1 << 20)
#define LYNX_MAX_SIZES 16
/* Bounds the samples kept per call and size (8 bytes each) and the run time. */
#define LYNX_MAX_ROUNDS 10000
/* Used when cuMemGetAllocationGranularity fails: what every current NVIDIA GPU answers. */
#define LYNX_FALLBACK_GRANULARITY (2 * LYNX_MIB)
/* The stall test's host sleep after the launch, so that the kernel is surely running. */
#define LYNX_STALL_SLEEP_MS 5.0
#define LYNX_STALL_BASELINE_RUNS 3
#define LYNX_STALL_CASES 4

enum lynx_probe_group {
	LYNX_PROBE_CONTEXT, /* needed for any result: without one, exit 1 */
	LYNX_PROBE_VMM,     /* the size sweep and the stall test's ops */
	LYNX_PROBE_STALL,   /* the spin kernel, its stream and events */
};

/*
 * Every driver function the probe calls, once: X(name, PFN type, group). `name` is what
 * cuGetProcAddress is asked for; the types are the ABIs a CUDA 13 driver answers for them.
 * cuda.h defines some of these names as macros (cuMemGetInfo is cuMemGetInfo_v2, also
 * cuStreamDestroy, cuEventDestroy, cuEventElapsedTime, cuDevicePrimaryCtxRelease): that
 * renames the struct member, consistently at every use, while #name keeps the base name.
 */
#define LYNX_PROBE_DRIVER(X)                                                                       \
	X(cuDriverGetVersion, PFN_cuDriverGetVersion_v2020, LYNX_PROBE_CONTEXT)                    \
	X(cuGetErrorName, PFN_cuGetErrorName_v6000, LYNX_PROBE_CONTEXT)                            \
	X(cuInit, PFN_cuInit_v2000, LYNX_PROBE_CONTEXT)                                            \
	X(cuDeviceGet, PFN_cuDeviceGet_v2000, LYNX_PROBE_CONTEXT)                                  \
	X(cuDeviceGetName, PFN_cuDeviceGetName_v2000, LYNX_PROBE_CONTEXT)                          \
	X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000, LYNX_PROBE_CONTEXT)        \
	X(cuDevicePrimaryCtxRelease, PFN_cuDevicePrimaryCtxRelease_v11000, LYNX_PROBE_CONTEXT)     \
	X(cuCtxSetCurrent, PFN_cuCtxSetCurrent_v4000, LYNX_PROBE_CONTEXT)                          \
	X(cuMemGetInfo, PFN_cuMemGetInfo_v3020, LYNX_PROBE_VMM)                                    \
	X(cuMemGetAllocationGranularity, PFN_cuMemGetAllocationGranularity_v10020, LYNX_PROBE_VMM) \
	X(cuMemAddressReserve, PFN_cuMemAddressReserve_v10020, LYNX_PROBE_VMM)                     \
	X(cuMemAddressFree, PFN_cuMemAddressFree_v10020, LYNX_PROBE_VMM)                           \
	X(cuMemCreate, PFN_cuMemCreate_v10020, LYNX_PROBE_VMM)                                     \
	X(cuMemRelease, PFN_cuMemRelease_v10020, LYNX_PROBE_VMM)                                   \
	X(cuMemMap, PFN_cuMemMap_v10020, LYNX_PROBE_VMM)                                           \
	X(cuMemUnmap, PFN_cuMemUnmap_v10020, LYNX_PROBE_VMM)                                       \
	X(cuMemSetAccess, PFN_cuMemSetAccess_v10020, LYNX_PROBE_VMM)                               \
	X(cuModuleLoadDataEx, PFN_cuModuleLoadDataEx_v2010, LYNX_PROBE_STALL)                      \
	X(cuModuleGetFunction, PFN_cuModuleGetFunction_v2000, LYNX_PROBE_STALL)                    \
	X(cuModuleUnload, PFN_cuModuleUnload_v2000, LYNX_PROBE_STALL)                              \
	X(cuLaunchKernel, PFN_cuLaunchKernel_v4000, LYNX_PROBE_STALL)                              \
	X(cuStreamCreate, PFN_cuStreamCreate_v2000, LYNX_PROBE_STALL)                              \
	X(cuStreamDestroy, PFN_cuStreamDestroy_v4000, LYNX_PROBE_STALL)                            \
	X(cuStreamQuery, PFN_cuStreamQuery_v2000, LYNX_PROBE_STALL)                                \
	X(cuStreamSynchronize, PFN_cuStreamSynchronize_v2000, LYNX_PROBE_STALL)                    \
	X(cuEventCreate, PFN_cuEventCreate_v2000, LYNX_PROBE_STALL)                                \
	X(cuEventDestroy, PFN_cuEventDestroy_v4000, LYNX_PROBE_STALL)                              \
	X(cuEventRecord, PFN_cuEventRecord_v2000, LYNX_PROBE_STALL)                                \
	X(cuEventSynchronize, PFN_cuEventSynchronize_v2000, LYNX_PROBE_STALL)                      \
	X(cuEventElapsedTime, PFN_cuEventElapsedTime_v12080, LYNX_PROBE_STALL)

struct lynx_driver {
#define LYNX_PROBE_FIELD(name, pfn, group) pfn name;
	LYNX_PROBE_DRIVER(LYNX_PROBE_FIELD)
#undef LYNX_PROBE_FIELD
};

/* Filled once by driver_open; NULL members are functions the driver did not answer. */
static struct lynx_driver drv;
static CUdevice device;
static CUmemAllocationProp alloc_prop;
static CUmemAccessDesc access_desc;

/*
 * The spin kernel: one thread that reads %globaltimer until `ns` nanoseconds have passed
 * since its first read. PTX 6.0 and .target sm_30 (the first with %globaltimer) so that
 * any driver since CUDA 9 JIT-compiles it for whatever device it finds.
 * Checked with CUDA 13.0's ptxas for sm_75, sm_80, sm_90, sm_100 and sm_120 (it no longer
 * generates code for older targets).
 */
static const char lynx_spin_ptx[] = ".version 6.0\n"
                                    ".target sm_30\n"
                                    ".address_size 64\n"
                                    "\n"
                                    ".visible .entry lynx_spin(\n"
                                    "\t.param .u64 lynx_spin_param_0\n"
                                    ")\n"
                                    "{\n"
                                    "\t.reg .pred %p<2>;\n"
                                    "\t.reg .b64 %rd<5>;\n"
                                    "\n"
                                    "\tld.param.u64 %rd1, [lynx_spin_param_0];\n"
                                    "\tmov.u64 %rd2, %globaltimer;\n"
                                    "$L_spin:\n"
                                    "\tmov.u64 %rd3, %globaltimer;\n"
                                    "\tsub.s64 %rd4, %rd3, %rd2;\n"
                                    "\tsetp.lt.u64 %p1, %rd4, %rd1;\n"
                                    "\t@%p1 bra $L_spin;\n"
                                    "\tret;\n"
                                    "}\n";

/* A failed driver call: which one, and what it answered. call == NULL means none failed. */
struct lynx_cu_error {
	const char *call;
	CUresult rc;
};

/* One physical allocation mapped into its own reserved range, and how far it got. */
struct lynx_vmm_range {
	size_t bytes;
	CUdeviceptr va;
	CUmemGenericAllocationHandle handle;
	bool reserved, created, mapped;
	const char *call; /* the last driver call made, for error reports */
};

typedef CUresult (*lynx_range_step)(struct lynx_vmm_range *r);

/* Samples of one timed step at one size, in microseconds, and its failures. */
struct lynx_vmm_op {
	double *us;
	int n, cap;
	int errors;
	struct lynx_cu_error first_error;
};

/*
 * Every timed step, in the order of one round: each runs on the state the one before left
 * (reserve, create, map, set access, unmap, release, restore, evict, free), so one round
 * gives one sample of each. X(id, JSON name, step, is a sequence of calls). Single calls are
 * named as CUDA spells them; "restore" and "evict" are the sequences Lynx's executor runs.
 */
#define LYNX_VMM_OPS(X)                                                  \
	X(LYNX_OP_RESERVE, "cuMemAddressReserve", range_reserve, false)  \
	X(LYNX_OP_CREATE, "cuMemCreate", range_create, false)            \
	X(LYNX_OP_MAP, "cuMemMap", range_map, false)                     \
	X(LYNX_OP_SET_ACCESS, "cuMemSetAccess", range_set_access, false) \
	X(LYNX_OP_UNMAP, "cuMemUnmap", range_unmap, false)               \
	X(LYNX_OP_RELEASE, "cuMemRelease", range_release, false)         \
	X(LYNX_OP_RESTORE, "restore", range_restore, true)               \
	X(LYNX_OP_EVICT, "evict", range_evict, true)                     \
	X(LYNX_OP_FREE, "cuMemAddressFree", range_free, false)

enum lynx_vmm_op_id {
#define LYNX_VMM_OP_ID(id, name, step, sequence) id,
	LYNX_VMM_OPS(LYNX_VMM_OP_ID)
#undef LYNX_VMM_OP_ID
	        LYNX_OP_COUNT
};

struct lynx_vmm_size {
	size_t requested, bytes;
	int rounds;
	char skipped[256]; /* empty when the size was measured */
	struct lynx_cu_error meminfo_error, warmup_error;
	struct lynx_vmm_op ops[LYNX_OP_COUNT];
};

struct lynx_stall_case {
	bool map; /* map: create+map+set-access; else unmap+release */
	size_t bytes;
	bool done;           /* it got as far as a kernel time */
	bool running_before; /* the spin kernel had not ended when the op began */
	bool returned_while_ran;
	double op_us, kernel_ms, since_launch_ms;
	const char *verdict;
	struct lynx_cu_error error;
};

struct lynx_stall {
	char skipped[1024]; /* empty when the test ran */
	double sleep_ms;
	double baseline_ms;
	int baseline_runs;
	struct lynx_cu_error baseline_error;
	struct lynx_stall_case cases[LYNX_STALL_CASES];
};

struct lynx_probe_options {
	size_t sizes[LYNX_MAX_SIZES];
	int n_sizes;
	double repeat_scale;
	int spin_ms;
};

struct lynx_probe_report {
	char error[1024]; /* set when no measurement could be made */
	char device[256];
	int driver_version, proc_version;
	size_t free_bytes, total_bytes;
	struct lynx_cu_error meminfo_error;
	size_t granularity_min, granularity_rec;
	struct lynx_cu_error granularity_error;
	struct lynx_vmm_size sizes[LYNX_MAX_SIZES];
	int n_sizes;
	int spin_ms;
	struct lynx_stall stall;
};

/* ---- Small helpers ------------------------------------------------------------------- */

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void sleep_ms(double ms)
{
	struct timespec ts;

	ts.tv_sec = (time_t)(ms / 1000.0);
	ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1000.0) * 1e6);
	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
		;
}

static size_t round_up(size_t n, size_t to)
{
	return (n + to - 1) / to * to;
}

static int compare_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Sorts v in place and answers its median. n > 0. */
static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), compare_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* "call: CUDA_ERROR_NAME"; the number where the driver cannot name it. */
static void format_error(char *buf, size_t size, const struct lynx_cu_error *e)
{
	const char *name = NULL;

	if (!drv.cuGetErrorName || drv.cuGetErrorName(e->rc, &name) != CUDA_SUCCESS || !name)
		snprintf(buf, size, "%s: CUresult %d", e->call, (int)e->rc);
	else
		snprintf(buf, size, "%s: %s", e->call, name);
}

static void note_error(struct lynx_cu_error *e, const char *call, CUresult rc)
{
	if (!e->call) {
		e->call = call;
		e->rc = rc;
	}
}

static void log_error(const char *what, const struct lynx_cu_error *e)
{
	char buf[256];

	format_error(buf, sizeof(buf), e);
	fprintf(stderr, "vmm_probe: %s: %s\n", what, buf);
}

/* ---- Driver and context -------------------------------------------------------------- */

/* The first function of `group` the driver did not answer, or NULL. */
static const char *driver_missing(enum lynx_probe_group group)
{
#define LYNX_PROBE_MISSING(name, pfn, grp) \
	if ((grp) == group && !drv.name)   \
		return #name;
	LYNX_PROBE_DRIVER(LYNX_PROBE_MISSING)
#undef LYNX_PROBE_MISSING
	return NULL;
}

/*
 * dlopen libcuda.so.1 and resolve the table through cuGetProcAddress_v2, as the runtime
 * does, at the CUDA version of these headers or the driver's if that is older (asking a
 * driver for a newer version than its own is an error). The handle is never closed: the
 * driver keeps threads and atexit handlers. false with rep->error set on failure.
 */
static bool driver_open(struct lynx_probe_report *rep)
{
	const cuuint64_t flags = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
	PFN_cuGetProcAddress_v12000 get_proc;
	CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
	void *lib, *fn = NULL;
	CUresult rc;

	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		snprintf(rep->error, sizeof(rep->error), "dlopen libcuda.so.1: %s", dlerror());
		return false;
	}
	get_proc = (PFN_cuGetProcAddress_v12000)dlsym(lib, "cuGetProcAddress_v2");
	if (!get_proc) {
		snprintf(rep->error, sizeof(rep->error),
		         "libcuda.so.1 has no cuGetProcAddress_v2 (a driver older than CUDA 12)");
		return false;
	}
	rc = get_proc("cuDriverGetVersion", &fn, 2020, flags, &status);
	if (rc != CUDA_SUCCESS || !fn) {
		snprintf(rep->error, sizeof(rep->error),
		         "cuGetProcAddress_v2(cuDriverGetVersion): CUresult %d, status %d", (int)rc,
		         (int)status);
		return false;
	}
	rc = ((PFN_cuDriverGetVersion_v2020)fn)(&rep->driver_version);
	if (rc != CUDA_SUCCESS) {
		snprintf(rep->error, sizeof(rep->error), "cuDriverGetVersion: CUresult %d",
		         (int)rc);
		return false;
	}
	rep->proc_version = rep->driver_version < CUDA_VERSION ? rep->driver_version : CUDA_VERSION;

#define LYNX_PROBE_LOAD(name, pfn, group)                                                       \
	fn = NULL;                                                                              \
	status = CU_GET_PROC_ADDRESS_SUCCESS;                                                   \
	rc = get_proc(#name, &fn, rep->proc_version, flags, &status);                           \
	if (rc != CUDA_SUCCESS || !fn)                                                          \
		fprintf(stderr, "vmm_probe: cuGetProcAddress_v2(%s): CUresult %d, status %d\n", \
		        #name, (int)rc, (int)status);                                           \
	drv.name = rc == CUDA_SUCCESS ? (pfn)fn : NULL;
	LYNX_PROBE_DRIVER(LYNX_PROBE_LOAD)
#undef LYNX_PROBE_LOAD

	if (driver_missing(LYNX_PROBE_CONTEXT)) {
		snprintf(rep->error, sizeof(rep->error), "libcuda.so.1 does not provide %s",
		         driver_missing(LYNX_PROBE_CONTEXT));
		return false;
	}
	return true;
}

/* cuInit, device 0, its primary context made current. false with rep->error set. */
static bool context_open(struct lynx_probe_report *rep)
{
	struct lynx_cu_error e = {0};
	CUcontext ctx;
	CUresult rc;

	rc = drv.cuInit(0);
	if (rc != CUDA_SUCCESS)
		note_error(&e, "cuInit", rc);
	if (!e.call && (rc = drv.cuDeviceGet(&device, 0)) != CUDA_SUCCESS)
		note_error(&e, "cuDeviceGet", rc);
	if (!e.call &&
	    drv.cuDeviceGetName(rep->device, sizeof(rep->device), device) != CUDA_SUCCESS)
		snprintf(rep->device, sizeof(rep->device), "unknown");
	if (!e.call && (rc = drv.cuDevicePrimaryCtxRetain(&ctx, device)) != CUDA_SUCCESS)
		note_error(&e, "cuDevicePrimaryCtxRetain", rc);
	if (!e.call && (rc = drv.cuCtxSetCurrent(ctx)) != CUDA_SUCCESS) {
		note_error(&e, "cuCtxSetCurrent", rc);
		drv.cuDevicePrimaryCtxRelease(device);
	}
	if (e.call) {
		format_error(rep->error, sizeof(rep->error), &e);
		return false;
	}

	alloc_prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	alloc_prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
	alloc_prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	alloc_prop.location.id = device;
	access_desc.location = alloc_prop.location;
	access_desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	return true;
}

/* ---- VMM steps ----------------------------------------------------------------------- */

/* Each step makes one driver call (restore and evict: a sequence, stopping at the first
 * failure), records it in r->call and what it achieved in r's flags. */

static CUresult range_reserve(struct lynx_vmm_range *r)
{
	CUresult rc;

	r->call = "cuMemAddressReserve";
	rc = drv.cuMemAddressReserve(&r->va, r->bytes, 0, 0, 0);
	r->reserved = rc == CUDA_SUCCESS;
	return rc;
}

static CUresult range_create(struct lynx_vmm_range *r)
{
	CUresult rc;

	r->call = "cuMemCreate";
	rc = drv.cuMemCreate(&r->handle, r->bytes, &alloc_prop, 0);
	r->created = rc == CUDA_SUCCESS;
	return rc;
}

static CUresult range_map(struct lynx_vmm_range *r)
{
	CUresult rc;

	r->call = "cuMemMap";
	rc = drv.cuMemMap(r->va, r->bytes, 0, r->handle, 0);
	r->mapped = rc == CUDA_SUCCESS;
	return rc;
}

static CUresult range_set_access(struct lynx_vmm_range *r)
{
	r->call = "cuMemSetAccess";
	return drv.cuMemSetAccess(r->va, r->bytes, &access_desc, 1);
}

static CUresult range_unmap(struct lynx_vmm_range *r)
{
	CUresult rc;

	r->call = "cuMemUnmap";
	rc = drv.cuMemUnmap(r->va, r->bytes);
	if (rc == CUDA_SUCCESS)
		r->mapped = false;
	return rc;
}

static CUresult range_release(struct lynx_vmm_range *r)
{
	CUresult rc;

	r->call = "cuMemRelease";
	rc = drv.cuMemRelease(r->handle);
	if (rc == CUDA_SUCCESS)
		r->created = false;
	return rc;
}

static CUresult range_free(struct lynx_vmm_range *r)
{
	CUresult rc;

	r->call = "cuMemAddressFree";
	rc = drv.cuMemAddressFree(r->va, r->bytes);
	if (rc == CUDA_SUCCESS)
		r->reserved = false;
	return rc;
}

/* Backs a reserved range with new memory, accessible: what bringing a buffer back costs. */
static CUresult range_restore(struct lynx_vmm_range *r)
{
	CUresult rc = range_create(r);

	if (rc == CUDA_SUCCESS)
		rc = range_map(r);
	if (rc == CUDA_SUCCESS)
		rc = range_set_access(r);
	return rc;
}

/* Gives a range's memory back and keeps the range: what evicting a buffer costs. */
static CUresult range_evict(struct lynx_vmm_range *r)
{
	CUresult rc = range_unmap(r);

	if (rc == CUDA_SUCCESS)
		rc = range_release(r);
	return rc;
}

/* Undoes whatever r still holds, untimed. Best effort: a failure here leaks the range or
 * the memory, and the next round's failures will show it. */
static void range_teardown(struct lynx_vmm_range *r)
{
	if (r->mapped)
		range_unmap(r);
	if (r->created)
		range_release(r);
	if (r->reserved)
		range_free(r);
}

static const struct {
	const char *name;
	lynx_range_step step;
	bool sequence;
} vmm_ops[LYNX_OP_COUNT] = {
#define LYNX_VMM_OP_ROW(id, name, step, sequence) [id] = {name, step, sequence},
        LYNX_VMM_OPS(LYNX_VMM_OP_ROW)
#undef LYNX_VMM_OP_ROW
};

/* ---- The size sweep ------------------------------------------------------------------ */

/* Runs one step; its host time becomes a sample of op (kept while there is room). */
static bool timed_step(struct lynx_vmm_op *op, lynx_range_step step, struct lynx_vmm_range *r)
{
	double t0, t1;
	CUresult rc;

	t0 = now_us();
	rc = step(r);
	t1 = now_us();
	if (rc != CUDA_SUCCESS) {
		op->errors++;
		note_error(&op->first_error, r->call, rc);
		return false;
	}
	if (op->n < op->cap)
		op->us[op->n++] = t1 - t0;
	return true;
}

/* One round of every step of vmm_ops over a fresh range; stops at the first failure. */
static void vmm_round(struct lynx_vmm_op *ops, size_t bytes)
{
	struct lynx_vmm_range r = {.bytes = bytes};

	for (int i = 0; i < LYNX_OP_COUNT; i++)
		if (!timed_step(&ops[i], vmm_ops[i].step, &r))
			break;
	range_teardown(&r);
}

/* The repeat counts of the brief: 30 rounds up to 2 MiB, 10 up to 64 MiB, 3 beyond. */
static int rounds_for(size_t bytes, double scale)
{
	int base = bytes <= 2 * LYNX_MIB ? 30 : bytes <= 64 * LYNX_MIB ? 10 : 3;
	double n = round(base * scale);

	return n < 1 ? 1 : n > LYNX_MAX_ROUNDS ? LYNX_MAX_ROUNDS : (int)n;
}

static void measure_size(struct lynx_vmm_size *s, size_t granularity, double scale)
{
	struct lynx_vmm_op warmup[LYNX_OP_COUNT] = {{0}};
	size_t free_bytes = 0, total_bytes = 0;
	CUresult rc;

	s->bytes = round_up(s->requested, granularity);
	s->rounds = rounds_for(s->requested, scale);
	rc = drv.cuMemGetInfo(&free_bytes, &total_bytes);
	if (rc != CUDA_SUCCESS) {
		/* Not a reason to skip: the creates will say whether the memory is there. */
		note_error(&s->meminfo_error, "cuMemGetInfo", rc);
		log_error("free memory unknown", &s->meminfo_error);
	} else if (free_bytes / 2 < s->bytes) {
		snprintf(s->skipped, sizeof(s->skipped),
		         "free device memory (%zu bytes) is below twice the size (%zu bytes)",
		         free_bytes, s->bytes);
		return;
	}
	for (int i = 0; i < LYNX_OP_COUNT; i++) {
		s->ops[i].us = calloc((size_t)s->rounds, sizeof(double));
		if (!s->ops[i].us) {
			snprintf(s->skipped, sizeof(s->skipped), "no host memory for %d samples",
			         s->rounds);
			return;
		}
		s->ops[i].cap = s->rounds;
	}

	/* The first calls at a size may set up driver state (page tables, pools): untimed. */
	vmm_round(warmup, s->bytes);
	for (int i = 0; i < LYNX_OP_COUNT && !s->warmup_error.call; i++)
		s->warmup_error = warmup[i].first_error;
	for (int i = 0; i < s->rounds; i++)
		vmm_round(s->ops, s->bytes);
}

/* ---- The stall test ------------------------------------------------------------------ */

struct lynx_spin {
	CUmodule module;
	CUfunction function;
	CUstream stream;
	CUevent start, end;
};

static void spin_close(struct lynx_spin *sp)
{
	if (sp->start)
		drv.cuEventDestroy(sp->start);
	if (sp->end)
		drv.cuEventDestroy(sp->end);
	if (sp->stream)
		drv.cuStreamDestroy(sp->stream);
	if (sp->module)
		drv.cuModuleUnload(sp->module);
}

/*
 * Loads the spin kernel and makes its non-blocking stream and events. On failure, the
 * reason (with the JIT's log, if it wrote one) goes to `skipped`. simgpu refuses the PTX
 * (its module images list registered kernel names), so there the test is skipped.
 */
static bool spin_open(struct lynx_spin *sp, char *skipped, size_t size)
{
	CUjit_option keys[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	char log[512] = "", what[256];
	void *values[] = {log, (void *)(uintptr_t)sizeof(log)};
	struct lynx_cu_error e = {0};
	CUresult rc;

	rc = drv.cuModuleLoadDataEx(&sp->module, lynx_spin_ptx, 2, keys, values);
	if (rc != CUDA_SUCCESS) {
		sp->module = NULL;
		note_error(&e, "cuModuleLoadDataEx", rc);
	}
	if (!e.call &&
	    (rc = drv.cuModuleGetFunction(&sp->function, sp->module, "lynx_spin")) != CUDA_SUCCESS)
		note_error(&e, "cuModuleGetFunction", rc);
	if (!e.call &&
	    (rc = drv.cuStreamCreate(&sp->stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
		sp->stream = NULL;
		note_error(&e, "cuStreamCreate", rc);
	}
	if (!e.call && (rc = drv.cuEventCreate(&sp->start, CU_EVENT_DEFAULT)) != CUDA_SUCCESS) {
		sp->start = NULL;
		note_error(&e, "cuEventCreate", rc);
	}
	if (!e.call && (rc = drv.cuEventCreate(&sp->end, CU_EVENT_DEFAULT)) != CUDA_SUCCESS) {
		sp->end = NULL;
		note_error(&e, "cuEventCreate", rc);
	}
	if (!e.call)
		return true;
	log[sizeof(log) - 1] = '\0';
	format_error(what, sizeof(what), &e);
	snprintf(skipped, size, "%s%s%s", what, log[0] ? "; JIT log: " : "", log);
	return false;
}

/* Queues start event, spin kernel, end event on the spin stream. */
static CUresult spin_launch(struct lynx_spin *sp, double ms, const char **call)
{
	unsigned long long ns = (unsigned long long)(ms * 1e6);
	void *params[] = {&ns};
	CUresult rc;

	*call = "cuEventRecord";
	rc = drv.cuEventRecord(sp->start, sp->stream);
	if (rc != CUDA_SUCCESS)
		return rc;
	*call = "cuLaunchKernel";
	rc = drv.cuLaunchKernel(sp->function, 1, 1, 1, 1, 1, 1, 0, sp->stream, params, NULL);
	if (rc != CUDA_SUCCESS)
		return rc;
	*call = "cuEventRecord";
	return drv.cuEventRecord(sp->end, sp->stream);
}

/* Waits for the launch and answers its device time. */
static CUresult spin_wait(struct lynx_spin *sp, float *ms, const char **call)
{
	CUresult rc;

	*call = "cuEventSynchronize";
	rc = drv.cuEventSynchronize(sp->end);
	if (rc != CUDA_SUCCESS) {
		drv.cuStreamSynchronize(sp->stream);
		return rc;
	}
	*call = "cuEventElapsedTime";
	return drv.cuEventElapsedTime(ms, sp->start, sp->end);
}

/* The spin kernel alone, median of LYNX_STALL_BASELINE_RUNS, after one short untimed
 * launch (the first may finish loading the module). false with the reason in skipped. */
static bool stall_baseline(struct lynx_stall *st, struct lynx_spin *sp, double spin_ms)
{
	double runs[LYNX_STALL_BASELINE_RUNS];
	const char *call;
	char what[256];
	float ms;
	CUresult rc;

	rc = spin_launch(sp, 1.0, &call);
	if (rc == CUDA_SUCCESS)
		rc = spin_wait(sp, &ms, &call);
	if (rc != CUDA_SUCCESS) {
		note_error(&st->baseline_error, call, rc);
		format_error(what, sizeof(what), &st->baseline_error);
		snprintf(st->skipped, sizeof(st->skipped), "the spin kernel's first launch: %s",
		         what);
		return false;
	}
	for (int i = 0; i < LYNX_STALL_BASELINE_RUNS; i++) {
		rc = spin_launch(sp, spin_ms, &call);
		if (rc == CUDA_SUCCESS)
			rc = spin_wait(sp, &ms, &call);
		if (rc != CUDA_SUCCESS)
			note_error(&st->baseline_error, call, rc);
		else
			runs[st->baseline_runs++] = ms;
	}
	if (!st->baseline_runs) {
		format_error(what, sizeof(what), &st->baseline_error);
		snprintf(st->skipped, sizeof(st->skipped), "no baseline run: %s", what);
		return false;
	}
	st->baseline_ms = median(runs, st->baseline_runs);
	return true;
}

/*
 * "kernel slowed" beyond 10% + 1 ms of the baseline; else "no stall" if the op returned
 * while the kernel still ran; else "host waits for the kernel" if the op took about the
 * kernel's remaining time (it cannot have taken less: the kernel ended during it). Cases
 * where the kernel had ended before the op began, or the op outlasted the kernel by far,
 * say nothing about stalls.
 */
static const char *stall_verdict(const struct lynx_stall_case *c, double baseline_ms)
{
	double remaining_ms = c->kernel_ms - c->since_launch_ms;

	if (!c->running_before)
		return "inconclusive: the kernel had ended before the op began";
	if (c->kernel_ms > baseline_ms * 1.10 + 1.0)
		return "kernel slowed";
	if (c->returned_while_ran)
		return "no stall";
	if (c->op_us / 1000.0 > remaining_ms * 1.5 + 2.0)
		return "inconclusive: the op outlasted the kernel by far";
	return "host waits for the kernel";
}

/*
 * One case: launch the spin kernel, let it run, then do the op on the host and time it.
 * The range is prepared (reserved; for unmap also mapped) before the launch and undone
 * after the kernel ended, so that only the op overlaps it.
 */
static void stall_case(struct lynx_stall *st, struct lynx_spin *sp, struct lynx_stall_case *c,
                       double spin_ms)
{
	struct lynx_vmm_range r = {.bytes = c->bytes};
	double t_launch, t0, t1;
	const char *call;
	CUresult rc, q;
	float ms;

	rc = range_reserve(&r);
	if (rc == CUDA_SUCCESS && !c->map)
		rc = range_restore(&r);
	if (rc != CUDA_SUCCESS) {
		note_error(&c->error, r.call, rc);
		range_teardown(&r);
		return;
	}
	rc = spin_launch(sp, spin_ms, &call);
	if (rc != CUDA_SUCCESS) {
		note_error(&c->error, call, rc);
		drv.cuStreamSynchronize(sp->stream);
		range_teardown(&r);
		return;
	}
	t_launch = now_us();
	sleep_ms(st->sleep_ms);
	q = drv.cuStreamQuery(sp->stream);
	c->running_before = q == CUDA_ERROR_NOT_READY;
	if (q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY)
		note_error(&c->error, "cuStreamQuery", q);

	t0 = now_us();
	rc = c->map ? range_restore(&r) : range_evict(&r);
	t1 = now_us();
	q = drv.cuStreamQuery(sp->stream);

	c->returned_while_ran = q == CUDA_ERROR_NOT_READY;
	if (q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY)
		note_error(&c->error, "cuStreamQuery", q);
	if (rc != CUDA_SUCCESS)
		note_error(&c->error, r.call, rc);
	c->op_us = t1 - t0;
	c->since_launch_ms = (t0 - t_launch) / 1000.0;
	rc = spin_wait(sp, &ms, &call);
	if (rc != CUDA_SUCCESS)
		note_error(&c->error, call, rc);
	range_teardown(&r);
	if (c->error.call)
		return;
	c->kernel_ms = ms;
	c->done = true;
	c->verdict = stall_verdict(c, st->baseline_ms);
}

static void measure_stall(struct lynx_stall *st, size_t granularity, int spin_ms)
{
	struct lynx_spin sp = {0};
	const char *missing;

	/* At most a quarter of the kernel, so that most of it is left when the op runs. */
	st->sleep_ms = spin_ms / 4.0 < LYNX_STALL_SLEEP_MS ? spin_ms / 4.0 : LYNX_STALL_SLEEP_MS;
	for (int i = 0; i < LYNX_STALL_CASES; i++) {
		st->cases[i].map = i % 2 == 0;
		st->cases[i].bytes = round_up(i < 2 ? 64 * LYNX_MIB : 2 * LYNX_MIB, granularity);
	}
	missing = driver_missing(LYNX_PROBE_STALL);
	if (!missing)
		missing = driver_missing(LYNX_PROBE_VMM);
	if (missing) {
		snprintf(st->skipped, sizeof(st->skipped), "libcuda.so.1 does not provide %s",
		         missing);
		return;
	}
	if (spin_open(&sp, st->skipped, sizeof(st->skipped)) && stall_baseline(st, &sp, spin_ms)) {
		for (int i = 0; i < LYNX_STALL_CASES; i++)
			stall_case(st, &sp, &st->cases[i], spin_ms);
	}
	spin_close(&sp);
}

/* ---- Output -------------------------------------------------------------------------- */

static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch == '\n')
			fputs("\\n", f);
		else if (ch < 0x20 || ch == 0x7f)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

/* ,"key":"call: NAME" when e holds an error. */
static void json_error(FILE *f, const char *key, const struct lynx_cu_error *e)
{
	char buf[256];

	if (!e->call)
		return;
	format_error(buf, sizeof(buf), e);
	fprintf(f, ",\"%s\":", key);
	json_string(f, buf);
}

static void json_op(FILE *f, struct lynx_vmm_op *op)
{
	if (op->n) {
		double med = median(op->us, op->n); /* sorts: min and max are the ends */

		fprintf(f, "{\"median_us\":%.3f,\"min_us\":%.3f,\"max_us\":%.3f,\"samples\":%d",
		        med, op->us[0], op->us[op->n - 1], op->n);
	} else {
		fputs("{\"median_us\":null,\"min_us\":null,\"max_us\":null,\"samples\":0", f);
	}
	if (op->errors) {
		json_error(f, "error", &op->first_error);
		fprintf(f, ",\"errors\":%d", op->errors);
	}
	fputc('}', f);
}

static void json_size(FILE *f, struct lynx_vmm_size *s)
{
	bool first = true;

	fprintf(f, "{\"bytes\":%zu,\"requested_bytes\":%zu", s->bytes, s->requested);
	json_error(f, "meminfo_error", &s->meminfo_error);
	if (s->skipped[0]) {
		fputs(",\"skipped\":", f);
		json_string(f, s->skipped);
		fputc('}', f);
		return;
	}
	fprintf(f, ",\"rounds\":%d", s->rounds);
	json_error(f, "warmup_error", &s->warmup_error);
	fputs(",\"calls\":{", f);
	for (int i = 0; i < LYNX_OP_COUNT; i++) {
		if (vmm_ops[i].sequence)
			continue;
		fprintf(f, "%s\"%s\":", first ? "" : ",", vmm_ops[i].name);
		json_op(f, &s->ops[i]);
		first = false;
	}
	fputc('}', f);
	for (int i = 0; i < LYNX_OP_COUNT; i++) {
		if (!vmm_ops[i].sequence)
			continue;
		fprintf(f, ",\"%s\":", vmm_ops[i].name);
		json_op(f, &s->ops[i]);
	}
	fputc('}', f);
}

static void json_stall_case(FILE *f, const struct lynx_stall_case *c)
{
	fprintf(f, "{\"op\":\"%s\",\"bytes\":%zu", c->map ? "map" : "unmap", c->bytes);
	if (c->done) {
		fprintf(f,
		        ",\"op_us\":%.3f,\"returned_while_kernel_ran\":%s,"
		        "\"running_before_op\":%s,\"op_started_ms_after_launch\":%.3f,"
		        "\"kernel_ms\":%.3f,\"verdict\":",
		        c->op_us, c->returned_while_ran ? "true" : "false",
		        c->running_before ? "true" : "false", c->since_launch_ms, c->kernel_ms);
		json_string(f, c->verdict);
	}
	json_error(f, "error", &c->error);
	fputc('}', f);
}

static void json_stall(FILE *f, const struct lynx_stall *st, int spin_ms)
{
	fprintf(f, "{\"spin_ms_requested\":%d", spin_ms);
	if (st->skipped[0]) {
		fputs(",\"skipped\":", f);
		json_string(f, st->skipped);
		json_error(f, "baseline_error", &st->baseline_error);
		fputc('}', f);
		return;
	}
	fprintf(f, ",\"host_sleep_ms\":%.3f,\"baseline_kernel_ms\":%.3f,\"baseline_runs\":%d",
	        st->sleep_ms, st->baseline_ms, st->baseline_runs);
	json_error(f, "baseline_error", &st->baseline_error);
	fputs(",\"cases\":[", f);
	for (int i = 0; i < LYNX_STALL_CASES; i++) {
		if (i)
			fputc(',', f);
		json_stall_case(f, &st->cases[i]);
	}
	fputs("]}", f);
}

static void json_report(FILE *f, struct lynx_probe_report *rep)
{
	fputs("{\"tool\":\"vmm_probe\"", f);
	if (rep->device[0]) {
		fputs(",\"device\":", f);
		json_string(f, rep->device);
	}
	if (rep->driver_version)
		fprintf(f, ",\"driver_version\":%d", rep->driver_version);
	if (rep->error[0]) {
		fputs(",\"error\":", f);
		json_string(f, rep->error);
		fputs("}\n", f);
		return;
	}
	fprintf(f, ",\"proc_address_version\":%d", rep->proc_version);
	if (rep->meminfo_error.call)
		json_error(f, "meminfo_error", &rep->meminfo_error);
	else
		fprintf(f, ",\"free_bytes\":%zu,\"total_bytes\":%zu", rep->free_bytes,
		        rep->total_bytes);
	fputs(",\"granularity\":{", f);
	if (rep->granularity_error.call) {
		fprintf(f, "\"assumed\":%zu", (size_t)LYNX_FALLBACK_GRANULARITY);
		json_error(f, "error", &rep->granularity_error);
	} else {
		fprintf(f, "\"minimum\":%zu,\"recommended\":%zu", rep->granularity_min,
		        rep->granularity_rec);
	}
	fputs("},\"sizes\":[", f);
	for (int i = 0; i < rep->n_sizes; i++) {
		if (i)
			fputc(',', f);
		json_size(f, &rep->sizes[i]);
	}
	fputs("],\"stall\":", f);
	json_stall(f, &rep->stall, rep->spin_ms);
	fputs("}\n", f);
}

/* ---- Command line -------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fputs("usage: vmm_probe [--sizes LIST] [--repeat-scale F] [--spin-ms N] [--help]\n"
	      "Measures CUDA VMM call costs on device 0 and whether a map or unmap stalls a\n"
	      "kernel on another stream; prints one JSON object on stdout.\n"
	      "  --sizes LIST       comma-separated sizes, suffixes K/M/G (default 2M,64M,1G),\n"
	      "                     each rounded up to the allocation granularity\n"
	      "  --repeat-scale F   multiplies the rounds per size (30 up to 2 MiB, 10 up to\n"
	      "                     64 MiB, 3 beyond; at least 1)\n"
	      "  --spin-ms N        the stall test's kernel duration in ms (default 50)\n",
	      f);
}

/* A positive size: digits and an optional K, M or G (binary units). */
static bool parse_size(const char *s, size_t len, size_t *out)
{
	unsigned long long n = 0;
	unsigned shift = 0;
	size_t i = 0;

	for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
		if (n > (ULLONG_MAX - 9) / 10)
			return false;
		n = n * 10 + (unsigned)(s[i] - '0');
	}
	if (i == 0)
		return false;
	if (i + 1 == len) {
		switch (s[i]) {
		case 'K':
		case 'k':
			shift = 10;
			break;
		case 'M':
		case 'm':
			shift = 20;
			break;
		case 'G':
		case 'g':
			shift = 30;
			break;
		default:
			return false;
		}
	} else if (i != len) {
		return false;
	}
	if (n == 0 || n > (SIZE_MAX >> 1 >> shift))
		return false;
	*out = (size_t)n << shift;
	return true;
}

static bool parse_sizes(const char *list, struct lynx_probe_options *opt)
{
	opt->n_sizes = 0;
	for (const char *p = list;; p++) {
		size_t len = strcspn(p, ",");

		if (opt->n_sizes == LYNX_MAX_SIZES ||
		    !parse_size(p, len, &opt->sizes[opt->n_sizes]))
			return false;
		opt->n_sizes++;
		p += len;
		if (!*p)
			return true;
	}
}

/* 0: run; 1: --help was answered; -1: error, described in err. */
static int parse_args(int argc, char **argv, struct lynx_probe_options *opt, char *err, size_t size)
{
	opt->sizes[0] = 2 * LYNX_MIB;
	opt->sizes[1] = 64 * LYNX_MIB;
	opt->sizes[2] = 1024 * LYNX_MIB;
	opt->n_sizes = 3;
	opt->repeat_scale = 1.0;
	opt->spin_ms = 50;

	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		char *end;

		if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
			usage(stdout);
			return 1;
		}
		if (strcmp(arg, "--sizes") && strcmp(arg, "--repeat-scale") &&
		    strcmp(arg, "--spin-ms")) {
			snprintf(err, size, "unknown option %s", arg);
			return -1;
		}
		if (!val) {
			snprintf(err, size, "%s needs a value", arg);
			return -1;
		}
		i++;
		if (!strcmp(arg, "--sizes")) {
			if (!parse_sizes(val, opt)) {
				snprintf(err, size,
				         "--sizes %s: want up to %d sizes like 2M,64M,1G", val,
				         LYNX_MAX_SIZES);
				return -1;
			}
		} else if (!strcmp(arg, "--repeat-scale")) {
			errno = 0;
			opt->repeat_scale = strtod(val, &end);
			if (errno || end == val || *end || !(opt->repeat_scale > 0) ||
			    opt->repeat_scale > 1000) {
				snprintf(err, size, "--repeat-scale %s: want a number in (0, 1000]",
				         val);
				return -1;
			}
		} else {
			long ms;

			errno = 0;
			ms = strtol(val, &end, 10);
			if (errno || end == val || *end || ms < 1 || ms > 10000) {
				snprintf(err, size, "--spin-ms %s: want an integer in [1, 10000]",
				         val);
				return -1;
			}
			opt->spin_ms = (int)ms;
		}
	}
	return 0;
}

/* ---- Main ---------------------------------------------------------------------------- */

static void measure_granularity(struct lynx_probe_report *rep)
{
	CUresult rc;

	rc = drv.cuMemGetAllocationGranularity(&rep->granularity_min, &alloc_prop,
	                                       CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (rc == CUDA_SUCCESS)
		rc = drv.cuMemGetAllocationGranularity(&rep->granularity_rec, &alloc_prop,
		                                       CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
	if (rc == CUDA_SUCCESS && rep->granularity_min)
		return;
	note_error(&rep->granularity_error, "cuMemGetAllocationGranularity",
	           rc == CUDA_SUCCESS ? CUDA_ERROR_INVALID_VALUE : rc);
	log_error("granularity", &rep->granularity_error);
	rep->granularity_min = LYNX_FALLBACK_GRANULARITY;
}

static void measure_sizes(struct lynx_probe_report *rep, const struct lynx_probe_options *opt)
{
	const char *missing = driver_missing(LYNX_PROBE_VMM);

	rep->n_sizes = opt->n_sizes;
	for (int i = 0; i < rep->n_sizes; i++) {
		struct lynx_vmm_size *s = &rep->sizes[i];

		s->requested = opt->sizes[i];
		if (missing) {
			s->bytes = s->requested;
			snprintf(s->skipped, sizeof(s->skipped), "libcuda.so.1 does not provide %s",
			         missing);
			continue;
		}
		measure_size(s, rep->granularity_min, opt->repeat_scale);
		if (s->skipped[0]) {
			fprintf(stderr, "vmm_probe: %zu bytes: skipped: %s\n", s->bytes,
			        s->skipped);
		} else {
			int errors = 0;

			for (int j = 0; j < LYNX_OP_COUNT; j++)
				errors += s->ops[j].errors;
			fprintf(stderr, "vmm_probe: %zu bytes: %d rounds, %d failed calls\n",
			        s->bytes, s->rounds, errors);
		}
	}
}

int main(int argc, char **argv)
{
	static struct lynx_probe_report rep; /* large; zeroed */
	struct lynx_probe_options opt;
	char err[256];
	int status = 0;

	switch (parse_args(argc, argv, &opt, err, sizeof(err))) {
	case 1:
		return 0;
	case -1:
		fprintf(stderr, "vmm_probe: %s\n", err);
		usage(stderr);
		snprintf(rep.error, sizeof(rep.error), "%s", err);
		json_report(stdout, &rep);
		return 2;
	}
	rep.spin_ms = opt.spin_ms;

	if (!driver_open(&rep) || !context_open(&rep)) {
		fprintf(stderr, "vmm_probe: %s\n", rep.error);
		json_report(stdout, &rep);
		return 1;
	}
	fprintf(stderr, "vmm_probe: %s, driver %d\n", rep.device, rep.driver_version);

	if (drv.cuMemGetInfo) {
		CUresult rc = drv.cuMemGetInfo(&rep.free_bytes, &rep.total_bytes);

		if (rc != CUDA_SUCCESS)
			note_error(&rep.meminfo_error, "cuMemGetInfo", rc);
	} else {
		rep.meminfo_error.call = "cuMemGetInfo (not provided)";
		rep.meminfo_error.rc = CUDA_ERROR_NOT_FOUND;
	}
	if (drv.cuMemGetAllocationGranularity) {
		measure_granularity(&rep);
	} else {
		rep.granularity_error.call = "cuMemGetAllocationGranularity (not provided)";
		rep.granularity_error.rc = CUDA_ERROR_NOT_FOUND;
		rep.granularity_min = LYNX_FALLBACK_GRANULARITY;
	}
	measure_sizes(&rep, &opt);

	fprintf(stderr, "vmm_probe: stall test, %d ms spin\n", opt.spin_ms);
	measure_stall(&rep.stall, rep.granularity_min, opt.spin_ms);
	if (rep.stall.skipped[0])
		fprintf(stderr, "vmm_probe: stall test skipped: %s\n", rep.stall.skipped);
	for (int i = 0; i < LYNX_STALL_CASES && !rep.stall.skipped[0]; i++) {
		const struct lynx_stall_case *c = &rep.stall.cases[i];

		fprintf(stderr, "vmm_probe: stall %s %zu bytes: %s\n", c->map ? "map" : "unmap",
		        c->bytes, c->verdict ? c->verdict : "failed");
	}

	json_report(stdout, &rep);
	if (fflush(stdout) != 0 || ferror(stdout))
		status = 1;
	for (int i = 0; i < rep.n_sizes; i++)
		for (int j = 0; j < LYNX_OP_COUNT; j++)
			free(rep.sizes[i].ops[j].us);
	drv.cuDevicePrimaryCtxRelease(device);
	return status;
}
