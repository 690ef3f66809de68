/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simgpu's NCCL communicator: one rank's view of a shared-memory segment, its sequence
 * counters and its error state; creation, split and destruction.
 *
 * Ownership: the application owns a communicator from ncclCommInitRank/Split until
 * ncclCommDestroy/Abort. Thread safety: like NCCL, one thread at a time per
 * communicator; operations run under the core lock (see ops.h), and async_error may be
 * read from any thread.
 */
#ifndef SIMGPU_NCCL_COMM_H
#define SIMGPU_NCCL_COMM_H

#include <stdatomic.h>

#include "rendezvous.h"

struct ncclComm {
	struct simnccl_segment seg;
	char label[SIMNCCL_NAME_LEN]; /* ncclConfig_t.commName, else the segment name */
	int rank, nranks, cudev;
	uint64_t timeout_ms; /* SIMGPU_NCCL_TIMEOUT_MS */
	uint64_t coll_seq;   /* collectives (splits included) issued; the next is coll_seq + 1 */
	uint64_t send_seq[SIMNCCL_MAX_RANKS]; /* sends issued to each peer */
	uint64_t recv_seq[SIMNCCL_MAX_RANKS]; /* receives issued from each peer */
	uint32_t splits;                      /* ncclCommSplit calls, for child names */
	_Atomic int async_error;              /* ncclResult_t; ncclSuccess while healthy */
	char error[SIMNCCL_MSG_LEN];          /* what made async_error */
};

/*
 * Joins segment `name` as `rank` of `nranks` and returns a new communicator. The core
 * must be initialised. label NULL names the communicator after its segment. On failure
 * returns the error and writes why.
 */
ncclResult_t simnccl_comm_create(struct ncclComm **out, const char *name, const char *label,
                                 int nranks, int rank, int cudev, char *why, size_t why_len);
/* Unmaps and frees; peers keep their own mappings. NULL is ignored. */
void simnccl_comm_destroy(struct ncclComm *comm);

/*
 * ncclCommSplit's work: exchanges (color, key) over the parent (a collective on it),
 * then joins the child segment "<parent segment>-s<split number>-c<color>" ranked by
 * (key, parent rank). *out is NULL for NCCL_SPLIT_NOCOLOR.
 */
ncclResult_t simnccl_comm_split(struct ncclComm *parent, int color, int key, const char *label,
                                struct ncclComm **out, char *why, size_t why_len);

/*
 * Records that an operation on comm failed: the first failure becomes the async error
 * and its message, and the segment is marked aborted so that peers waiting on this
 * rank fail at once instead of at their timeout.
 */
void simnccl_comm_fail(struct ncclComm *comm, ncclResult_t res, const char *why);

/* The CUDA device current on this thread, as real NCCL's cudaGetDevice finds it. */
int simnccl_current_device(void);

#endif /* SIMGPU_NCCL_COMM_H */
