/* SPDX-License-Identifier: Apache-2.0 */
/* Communicators: creation over a shared-memory segment, split, failure state, destruction. */
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "core.h"
#include "ops.h"

int simnccl_current_device(void)
{
	/* Real NCCL asks its static cudart, which reaches libcuda.so.1 through
	 * cuGetProcAddress; do the same, so an interposer sees the same driver calls. */
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	PFN_cuGetProcAddress_v12000 get_proc;
	PFN_cuCtxGetDevice_v2000 get_device = NULL;
	CUdevice dev = 0;

	if (!lib)
		return 0;
	get_proc = (PFN_cuGetProcAddress_v12000)dlsym(lib, "cuGetProcAddress_v2");
	if (!get_proc ||
	    get_proc("cuCtxGetDevice", (void **)&get_device, 12000, CU_GET_PROC_ADDRESS_DEFAULT,
	             NULL) != CUDA_SUCCESS ||
	    !get_device || get_device(&dev) != CUDA_SUCCESS)
		dev = 0; /* no context yet: cudart would make device 0's current */
	dlclose(lib);
	return dev;
}

ncclResult_t simnccl_comm_create(struct ncclComm **out, const char *name, const char *label,
                                 int nranks, int rank, int cudev, char *why, size_t why_len)
{
	const struct simgpu_config *cfg = simgpu_core_config();
	struct ncclComm *comm = calloc(1, sizeof(*comm));
	ncclResult_t res;

	if (!comm) {
		snprintf(why, why_len, "no host memory for a communicator");
		return ncclSystemError;
	}
	comm->rank = rank;
	comm->nranks = nranks;
	comm->cudev = cudev;
	comm->timeout_ms = cfg->nccl_timeout_ms;
	atomic_init(&comm->async_error, ncclSuccess);
	snprintf(comm->label, sizeof(comm->label), "%s", label && *label ? label : name);
	res = simnccl_segment_join(&comm->seg, name, nranks, rank, cfg->nccl_buffer_bytes,
	                           comm->timeout_ms, why, why_len);
	if (res != ncclSuccess) {
		free(comm);
		return res;
	}
	*out = comm;
	return ncclSuccess;
}

void simnccl_comm_destroy(struct ncclComm *comm)
{
	if (!comm)
		return;
	simnccl_segment_leave(&comm->seg);
	free(comm);
}

void simnccl_comm_fail(struct ncclComm *comm, ncclResult_t res, const char *why)
{
	int healthy = ncclSuccess;

	if (atomic_compare_exchange_strong(&comm->async_error, &healthy, (int)res))
		snprintf(comm->error, sizeof(comm->error), "%s", why);
	simnccl_segment_abort(&comm->seg, why);
}

struct member {
	int key, rank;
};

static int member_cmp(const void *a, const void *b)
{
	const struct member *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->rank < y->rank ? -1 : x->rank > y->rank;
}

ncclResult_t simnccl_comm_split(struct ncclComm *parent, int color, int key, const char *label,
                                struct ncclComm **out, char *why, size_t why_len)
{
	int32_t pairs[2 * SIMNCCL_MAX_RANKS];
	struct member members[SIMNCCL_MAX_RANKS];
	struct simnccl_op op = {
	        .kind = SIMNCCL_SPLIT,
	        .comm = parent,
	        .color = color,
	        .key = key,
	        .split_out = pairs,
	};
	char name[SIMNCCL_NAME_LEN];
	int count = 0, rank = 0;
	unsigned int split_no;
	ncclResult_t res;

	*out = NULL;
	res = simnccl_ops_exchange(&op, why, why_len);
	if (res != ncclSuccess)
		return res;
	split_no = ++parent->splits; /* every rank counts, colored or not */
	if (color == NCCL_SPLIT_NOCOLOR)
		return ncclSuccess;
	for (int r = 0; r < parent->nranks; r++)
		if (pairs[2 * r] == color)
			members[count++] = (struct member){pairs[2 * r + 1], r};
	qsort(members, (size_t)count, sizeof(members[0]), member_cmp);
	while (members[rank].rank != parent->rank)
		rank++;
	if (snprintf(name, sizeof(name), "%s-s%u-c%d", parent->seg.name, split_no, color) >=
	    (int)sizeof(name)) {
		snprintf(why, why_len, "comm %s: split #%u: the child segment's name is too long",
		         parent->label, split_no);
		return ncclInternalError;
	}
	return simnccl_comm_create(out, name, label, count, rank, parent->cudev, why, why_len);
}
