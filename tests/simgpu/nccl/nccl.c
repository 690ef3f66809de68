/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libnccl.so.2's entry points: argument checks, group queueing and error reporting over
 * the communicators (comm.c) and operations (ops.c). As real NCCL, every function is a
 * strong pncclX with ncclX a weak alias of it, so a tool may define ncclX and forward.
 *
 * Limits: operations with count 0 return at once and do not synchronise the ranks; a
 * call inside a group that fails its checks makes ncclGroupEnd return that error
 * without issuing the group (peers then time out); ungrouped sends and receives block
 * the host until the peer posts its side (pair them in a group, as NCCL asks).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "core.h"
#include "ops.h"
#include "reduce.h"

/* nccl.h declares these without prototypes. */
ncclResult_t pncclGroupStart(void);
ncclResult_t pncclGroupEnd(void);

#define ID_PREFIX "/simgpu-nccl-"
#define CONFIG_MAGIC 0xcafebeefu
/* Room a unique id leaves in a segment name for the suffixes of nested splits. */
#define ID_MAX_LEN 96

static __thread char last_error[SIMNCCL_MSG_LEN];

/* This thread's open group: its calls wait here for the outermost ncclGroupEnd. */
struct group_state {
	int depth;
	struct simnccl_op *ops;
	size_t count, cap;
	ncclResult_t error; /* the first call in the group that failed its checks */
};
static __thread struct group_state group;

/* Makes msg this thread's last error, reports it on stderr, and returns res. */
static ncclResult_t fail(ncclResult_t res, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
static ncclResult_t fail(ncclResult_t res, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	simgpu_report("simgpu-nccl: %s", last_error);
	if (group.depth > 0 && group.error == ncclSuccess)
		group.error = res;
	return res;
}

/* ---- Operations ------------------------------------------------------------------------ */

static ncclResult_t check_buffer(const struct simnccl_op *op, const char *what, const void *p,
                                 size_t bytes)
{
	if (!bytes || simgpu_mem_is_accessible(p, bytes))
		return ncclSuccess;
	return fail(ncclInvalidArgument, "%s: %s %p (%zu bytes) is not accessible device memory",
	            simnccl_kind_name(op->kind), what, p, bytes);
}

/* Everything an operation is checked for before it is issued or queued. Runs without
 * the core lock: the stream and memory look-ups take it. */
static ncclResult_t check_op(struct simnccl_op *op, cudaStream_t stream)
{
	const char *name = simnccl_kind_name(op->kind), *peer = simnccl_kind_peer(op->kind);
	struct ncclComm *comm = op->comm;
	size_t area;
	int err;

	if (!comm)
		return fail(ncclInvalidArgument, "%s: comm is NULL", name);
	err = atomic_load(&comm->async_error);
	if (err != ncclSuccess)
		return fail((ncclResult_t)err, "%s: comm %s failed earlier: %s", name, comm->label,
		            comm->error);
	if (!simnccl_type_size(op->type))
		return fail(ncclInvalidArgument, "%s: datatype %d is not supported", name,
		            (int)op->type);
	if (simnccl_kind_has_redop(op->kind) && !simnccl_redop_valid(op->redop))
		return fail(ncclInvalidArgument, "%s: reduction operator %d is not supported", name,
		            (int)op->redop);
	if (peer && (op->peer < 0 || op->peer >= comm->nranks))
		return fail(ncclInvalidArgument, "%s: %s %d is out of range for %d ranks", name,
		            peer, op->peer, comm->nranks);
	op->stream = simgpu_stream_get((CUstream)stream, false);
	if (!op->stream)
		return fail(ncclInvalidArgument, "%s: stream %p is not a live stream", name,
		            (void *)stream);
	area = simnccl_op_area_bytes(op);
	if (area > comm->seg.area_bytes)
		return fail(ncclInvalidArgument,
		            "%s: %zu bytes do not fit the %zu-byte shared-memory area of a rank; "
		            "raise SIMGPU_NCCL_BUFFER",
		            name, area, comm->seg.area_bytes);
	if (check_buffer(op, "sendbuff", op->sendbuf, simnccl_op_input_bytes(op)) ||
	    check_buffer(op, "recvbuff", op->recvbuf, simnccl_op_output_bytes(op)))
		return ncclInvalidArgument;
	return ncclSuccess;
}

static ncclResult_t queue(const struct simnccl_op *op)
{
	if (group.count == group.cap) {
		size_t cap = group.cap ? 2 * group.cap : 16;
		struct simnccl_op *ops = realloc(group.ops, cap * sizeof(*ops));
		if (!ops)
			return fail(ncclSystemError, "%s: no host memory to queue the call",
			            simnccl_kind_name(op->kind));
		group.ops = ops;
		group.cap = cap;
	}
	group.ops[group.count++] = *op;
	return ncclSuccess;
}

static ncclResult_t issue(struct simnccl_op *ops, size_t n)
{
	char why[SIMNCCL_MSG_LEN];
	ncclResult_t res = simnccl_ops_issue(ops, n, why, sizeof(why));

	if (res != ncclSuccess)
		return fail(res, "%s", why);
	return ncclSuccess;
}

/* The common path of every operation: cost hint, checks, then now or at ncclGroupEnd. */
static ncclResult_t post(struct simnccl_op *op, cudaStream_t stream)
{
	ncclResult_t res;

	/* The hint belongs to this call whatever becomes of it. */
	op->vbytes = simgpu_comm_take_virtual_bytes(op->count * simnccl_type_size(op->type));
	res = check_op(op, stream);
	if (res != ncclSuccess || !op->count)
		return res;
	if (group.depth > 0)
		return queue(op);
	return issue(op, 1);
}

/* Drops the queued calls of a communicator that is going away. */
static void drop_queued(const struct ncclComm *comm)
{
	size_t kept = 0;

	for (size_t i = 0; i < group.count; i++)
		if (group.ops[i].comm != comm)
			group.ops[kept++] = group.ops[i];
	group.count = kept;
}

SIMGPU_EXPORT ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                          ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                          cudaStream_t stream)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclAllReduce);
	if (fault)
		return (ncclResult_t)fault;
	struct simnccl_op o = {.kind = SIMNCCL_ALL_REDUCE,
	                       .comm = comm,
	                       .sendbuf = sendbuff,
	                       .recvbuf = recvbuff,
	                       .count = count,
	                       .type = datatype,
	                       .redop = op};
	return post(&o, stream);
}

SIMGPU_EXPORT ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                          ncclDataType_t datatype, ncclComm_t comm,
                                          cudaStream_t stream)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclAllGather);
	if (fault)
		return (ncclResult_t)fault;
	struct simnccl_op o = {.kind = SIMNCCL_ALL_GATHER,
	                       .comm = comm,
	                       .sendbuf = sendbuff,
	                       .recvbuf = recvbuff,
	                       .count = sendcount,
	                       .type = datatype};
	return post(&o, stream);
}

SIMGPU_EXPORT ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff,
                                              size_t recvcount, ncclDataType_t datatype,
                                              ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclReduceScatter);
	if (fault)
		return (ncclResult_t)fault;
	struct simnccl_op o = {.kind = SIMNCCL_REDUCE_SCATTER,
	                       .comm = comm,
	                       .sendbuf = sendbuff,
	                       .recvbuf = recvbuff,
	                       .count = recvcount,
	                       .type = datatype,
	                       .redop = op};
	return post(&o, stream);
}

SIMGPU_EXPORT ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                          ncclDataType_t datatype, int root, ncclComm_t comm,
                                          cudaStream_t stream)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclBroadcast);
	if (fault)
		return (ncclResult_t)fault;
	struct simnccl_op o = {.kind = SIMNCCL_BROADCAST,
	                       .comm = comm,
	                       .sendbuf = sendbuff,
	                       .recvbuf = recvbuff,
	                       .count = count,
	                       .type = datatype,
	                       .peer = root};
	return post(&o, stream);
}

SIMGPU_EXPORT ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, int root,
                                       ncclComm_t comm, cudaStream_t stream)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclReduce);
	if (fault)
		return (ncclResult_t)fault;
	struct simnccl_op o = {.kind = SIMNCCL_REDUCE,
	                       .comm = comm,
	                       .sendbuf = sendbuff,
	                       .recvbuf = recvbuff,
	                       .count = count,
	                       .type = datatype,
	                       .redop = op,
	                       .peer = root};
	return post(&o, stream);
}

SIMGPU_EXPORT ncclResult_t pncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                                     int peer, ncclComm_t comm, cudaStream_t stream)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclSend);
	if (fault)
		return (ncclResult_t)fault;
	struct simnccl_op o = {.kind = SIMNCCL_SEND,
	                       .comm = comm,
	                       .sendbuf = sendbuff,
	                       .count = count,
	                       .type = datatype,
	                       .peer = peer};
	return post(&o, stream);
}

SIMGPU_EXPORT ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype,
                                     int peer, ncclComm_t comm, cudaStream_t stream)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclRecv);
	if (fault)
		return (ncclResult_t)fault;
	struct simnccl_op o = {.kind = SIMNCCL_RECV,
	                       .comm = comm,
	                       .recvbuf = recvbuff,
	                       .count = count,
	                       .type = datatype,
	                       .peer = peer};
	return post(&o, stream);
}

SIMGPU_EXPORT ncclResult_t pncclGroupStart(void)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclGroupStart);
	if (fault)
		return (ncclResult_t)fault;
	if (group.depth++ == 0) {
		group.count = 0;
		group.error = ncclSuccess;
	}
	return ncclSuccess;
}

SIMGPU_EXPORT ncclResult_t pncclGroupEnd(void)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclGroupEnd);
	if (fault)
		return (ncclResult_t)fault;
	ncclResult_t res = ncclSuccess;

	if (group.depth == 0)
		return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
	if (--group.depth > 0)
		return ncclSuccess;
	if (group.error != ncclSuccess)
		res = fail(group.error,
		           "ncclGroupEnd: a call in the group failed (see above); "
		           "none of its %zu calls was issued",
		           group.count);
	else if (group.count)
		res = issue(group.ops, group.count);
	free(group.ops);
	group = (struct group_state){0};
	return res;
}

/* ---- Communicators ---------------------------------------------------------------------- */

SIMGPU_EXPORT ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclGetUniqueId);
	if (fault)
		return (ncclResult_t)fault;
	static _Atomic unsigned int counter;
	unsigned long long rnd;

	if (!uniqueId)
		return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
	if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd)) {
		struct timespec now;
		clock_gettime(CLOCK_REALTIME, &now);
		rnd = (unsigned long long)now.tv_sec << 30 ^ (unsigned long long)now.tv_nsec;
	}
	memset(uniqueId, 0, sizeof(*uniqueId));
	snprintf(uniqueId->internal, sizeof(uniqueId->internal), ID_PREFIX "%d-%u-%016llx",
	         (int)getpid(), atomic_fetch_add(&counter, 1), rnd);
	return ncclSuccess;
}

/* The label a config gives, if the config is valid; ncclInvalidArgument if it is not. */
static ncclResult_t config_label(const char *api, const ncclConfig_t *config, const char **label)
{
	*label = NULL;
	if (!config)
		return ncclSuccess;
	if (config->magic != CONFIG_MAGIC || config->size < offsetof(ncclConfig_t, commName))
		return fail(ncclInvalidArgument,
		            "%s: config was not initialised with NCCL_CONFIG_INITIALIZER", api);
	if (config->size >= offsetof(ncclConfig_t, commName) + sizeof(config->commName))
		*label = config->commName;
	return ncclSuccess;
}

static ncclResult_t init_rank(const char *api, ncclComm_t *comm, int nranks, const ncclUniqueId *id,
                              int rank, const ncclConfig_t *config)
{
	char why[SIMNCCL_MSG_LEN];
	const char *label;
	ncclResult_t res;

	if (!comm)
		return fail(ncclInvalidArgument, "%s: comm is NULL", api);
	*comm = NULL;
	if (nranks < 1 || nranks > SIMNCCL_MAX_RANKS)
		return fail(ncclInvalidArgument, "%s: nranks=%d; simgpu supports 1 to %d ranks",
		            api, nranks, SIMNCCL_MAX_RANKS);
	if (rank < 0 || rank >= nranks)
		return fail(ncclInvalidArgument, "%s: rank=%d is out of range for nranks=%d", api,
		            rank, nranks);
	if (strnlen(id->internal, sizeof(id->internal)) > ID_MAX_LEN ||
	    strncmp(id->internal, ID_PREFIX, strlen(ID_PREFIX)))
		return fail(ncclInvalidArgument,
		            "%s: the unique id does not come from simgpu's ncclGetUniqueId", api);
	res = config_label(api, config, &label);
	if (res != ncclSuccess)
		return res;
	if (simgpu_core_init() != CUDA_SUCCESS)
		return fail(ncclUnhandledCudaError,
		            "%s: the simulated device failed to initialise (see above)", api);
	res = simnccl_comm_create(comm, id->internal, label, nranks, rank, simnccl_current_device(),
	                          why, sizeof(why));
	if (res != ncclSuccess)
		return fail(res, "%s (rank %d of %d): %s", api, rank, nranks, why);
	return ncclSuccess;
}

SIMGPU_EXPORT ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                             int rank)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclCommInitRank);
	if (fault)
		return (ncclResult_t)fault;
	return init_rank("ncclCommInitRank", comm, nranks, &commId, rank, NULL);
}

SIMGPU_EXPORT ncclResult_t pncclCommInitRankConfig(ncclComm_t *comm, int nranks,
                                                   ncclUniqueId commId, int rank,
                                                   ncclConfig_t *config)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclCommInitRankConfig);
	if (fault)
		return (ncclResult_t)fault;
	return init_rank("ncclCommInitRankConfig", comm, nranks, &commId, rank, config);
}

SIMGPU_EXPORT ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                          ncclConfig_t *config)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclCommSplit);
	if (fault)
		return (ncclResult_t)fault;
	char why[SIMNCCL_MSG_LEN];
	const char *label;
	ncclResult_t res;
	int err;

	if (!comm || !newcomm)
		return fail(ncclInvalidArgument, "ncclCommSplit: comm or newcomm is NULL");
	*newcomm = NULL;
	err = atomic_load(&comm->async_error);
	if (err != ncclSuccess)
		return fail((ncclResult_t)err, "ncclCommSplit: comm %s failed earlier: %s",
		            comm->label, comm->error);
	if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
		return fail(ncclInvalidArgument, "ncclCommSplit: color=%d is negative", color);
	res = config_label("ncclCommSplit", config, &label);
	if (res != ncclSuccess)
		return res;
	res = simnccl_comm_split(comm, color, key, label, newcomm, why, sizeof(why));
	if (res != ncclSuccess)
		return fail(res, "ncclCommSplit(color=%d, key=%d) on rank %d: %s", color, key,
		            comm->rank, why);
	return ncclSuccess;
}

SIMGPU_EXPORT ncclResult_t pncclCommFinalize(ncclComm_t comm)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclCommFinalize);
	if (fault)
		return (ncclResult_t)fault;
	/* Every operation completed its exchange before it returned: nothing to flush. */
	if (!comm)
		return fail(ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
	return ncclSuccess;
}

SIMGPU_EXPORT ncclResult_t pncclCommDestroy(ncclComm_t comm)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclCommDestroy);
	if (fault)
		return (ncclResult_t)fault;
	if (!comm)
		return ncclSuccess;
	drop_queued(comm);
	simnccl_comm_destroy(comm);
	return ncclSuccess;
}

SIMGPU_EXPORT ncclResult_t pncclCommAbort(ncclComm_t comm)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclCommAbort);
	if (fault)
		return (ncclResult_t)fault;
	char reason[SIMNCCL_MSG_LEN];

	if (!comm)
		return ncclSuccess;
	/* Peers waiting on this rank fail now rather than at their timeout. */
	snprintf(reason, sizeof(reason), "comm %s: rank %d called ncclCommAbort", comm->label,
	         comm->rank);
	simnccl_segment_abort(&comm->seg, reason);
	drop_queued(comm);
	simnccl_comm_destroy(comm);
	return ncclSuccess;
}

SIMGPU_EXPORT ncclResult_t pncclCommCount(const ncclComm_t comm, int *count)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclCommCount);
	if (fault)
		return (ncclResult_t)fault;
	if (!comm || !count)
		return fail(ncclInvalidArgument, "ncclCommCount: comm or count is NULL");
	*count = comm->nranks;
	return ncclSuccess;
}

SIMGPU_EXPORT ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclCommUserRank);
	if (fault)
		return (ncclResult_t)fault;
	if (!comm || !rank)
		return fail(ncclInvalidArgument, "ncclCommUserRank: comm or rank is NULL");
	*rank = comm->rank;
	return ncclSuccess;
}

SIMGPU_EXPORT ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int *device)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclCommCuDevice);
	if (fault)
		return (ncclResult_t)fault;
	if (!comm || !device)
		return fail(ncclInvalidArgument, "ncclCommCuDevice: comm or device is NULL");
	*device = comm->cudev;
	return ncclSuccess;
}

SIMGPU_EXPORT ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclCommGetAsyncError);
	if (fault)
		return (ncclResult_t)fault;
	if (!comm || !asyncError)
		return fail(ncclInvalidArgument,
		            "ncclCommGetAsyncError: comm or asyncError is NULL");
	*asyncError = (ncclResult_t)atomic_load(&comm->async_error);
	return ncclSuccess;
}

/* ---- Library ----------------------------------------------------------------------------- */

SIMGPU_EXPORT ncclResult_t pncclGetVersion(int *version)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclGetVersion);
	if (fault)
		return (ncclResult_t)fault;
	if (!version)
		return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
	*version = NCCL_VERSION_CODE;
	return ncclSuccess;
}

/* NCCL 2.28's own wording. */
SIMGPU_EXPORT const char *pncclGetErrorString(ncclResult_t result)
{
	/* A string cannot carry an injected fault; the call is still counted. */
	(void)simgpu_api_enter(SIMGPU_API_ncclGetErrorString);
	switch (result) {
	case ncclSuccess:
		return "no error";
	case ncclUnhandledCudaError:
		return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case ncclSystemError:
		return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case ncclInternalError:
		return "internal error - please report this issue to the NCCL developers";
	case ncclInvalidArgument:
		return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidUsage:
		return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case ncclRemoteError:
		return "remote process exited or there was a network error";
	case ncclInProgress:
		return "NCCL operation in progress";
	default:
		return "unknown result code";
	}
}

/* This thread's last message; else, for a failed communicator, what made it fail. */
SIMGPU_EXPORT const char *pncclGetLastError(ncclComm_t comm)
{
	(void)simgpu_api_enter(SIMGPU_API_ncclGetLastError);
	if (!last_error[0] && comm)
		return comm->error;
	return last_error;
}

/* ---- Memory and registration ------------------------------------------------------------- */

/*
 * simgpu has no RDMA, NVLS or user-buffer fast paths: ncclMemAlloc is device memory as
 * cudaMalloc gives it, and registering a buffer only checks it and hands back a token.
 */
struct simnccl_registration {
	ncclComm_t comm;
	void *buff;
	size_t size;
};

SIMGPU_EXPORT ncclResult_t pncclMemAlloc(void **ptr, size_t size)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclMemAlloc);
	CUdeviceptr p;

	if (fault)
		return (ncclResult_t)fault;
	if (!ptr || !size)
		return fail(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL or size is 0");
	if (simgpu_core_init() != CUDA_SUCCESS)
		return fail(ncclUnhandledCudaError, "ncclMemAlloc: simgpu cannot start");
	if (simgpu_mem_alloc(&p, size) != CUDA_SUCCESS)
		return fail(ncclUnhandledCudaError,
		            "ncclMemAlloc: out of device memory (%zu bytes)", size);
	*ptr = (void *)(uintptr_t)p;
	return ncclSuccess;
}

SIMGPU_EXPORT ncclResult_t pncclMemFree(void *ptr)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclMemFree);

	if (fault)
		return (ncclResult_t)fault;
	if (!ptr)
		return ncclSuccess;
	if (simgpu_mem_free((CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS)
		return fail(ncclInvalidArgument, "ncclMemFree: %p is not from ncclMemAlloc", ptr);
	return ncclSuccess;
}

SIMGPU_EXPORT ncclResult_t pncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                                             void **handle)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclCommRegister);
	struct simnccl_registration *reg;

	if (fault)
		return (ncclResult_t)fault;
	if (!comm || !buff || !size || !handle)
		return fail(ncclInvalidArgument,
		            "ncclCommRegister: comm, buff, size or handle missing");
	if (!simgpu_mem_is_accessible(buff, size))
		return fail(ncclInvalidArgument,
		            "ncclCommRegister: [%p, +%zu) is not accessible device memory", buff,
		            size);
	reg = malloc(sizeof(*reg));
	if (!reg)
		return fail(ncclSystemError, "ncclCommRegister: out of host memory");
	*reg = (struct simnccl_registration){comm, buff, size};
	*handle = reg;
	return ncclSuccess;
}

SIMGPU_EXPORT ncclResult_t pncclCommDeregister(const ncclComm_t comm, void *handle)
{
	int fault = simgpu_api_enter(SIMGPU_API_ncclCommDeregister);
	struct simnccl_registration *reg = handle;

	if (fault)
		return (ncclResult_t)fault;
	if (!comm || !reg || reg->comm != comm)
		return fail(ncclInvalidArgument,
		            "ncclCommDeregister: not a registration of this comm");
	free(reg);
	return ncclSuccess;
}

/* ---- Exported names: ncclX is a weak alias of pncclX, for every NCCL row of api.def ----- */

#define SIMNCCL_ALIAS_DRIVER(symbol)
#define SIMNCCL_ALIAS_RUNTIME(symbol)
#define SIMNCCL_ALIAS_NCCL(symbol)        \
	extern __typeof(p##symbol) symbol \
	        __attribute__((weak, alias("p" #symbol), visibility("default")));
#define SIMGPU_API(layer, symbol, procname, version, variant, cost) SIMNCCL_ALIAS_##layer(symbol)
#include "api.def"
#undef SIMGPU_API
