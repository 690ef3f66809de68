/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL operations: a call, checked and captured by the API layer, issued alone or with
 * the rest of its group through shared memory, costed in virtual time and booked on the
 * core's link.
 *
 * Issuing a group, under the core lock: every operation's arrival is computed before
 * any is booked (so a group's operations on one stream arrive together); effects up to
 * the latest arrival are applied (so inputs hold their final values); point-to-point
 * operations make progress together (each send published as soon as its mailbox is
 * free, each receive completed as soon as its send is there, every send's answer
 * collected), so paired exchanges in one group never deadlock; then the collectives run
 * in call order, those on one communicator one after another. Results are computed at
 * once into staging buffers and land in the receive buffers, as a core effect, at the
 * operation's virtual end. Costs: end = start + SIMGPU_NET_LATENCY_NS +
 * ceil(factor * bytes / SIMGPU_NET_BW), start = the latest arrival of the ranks taking
 * part, bytes = the largest of their simgpu_nccl_next_virtual_bytes hints (or real
 * sizes), factor 2(n-1)/n for all-reduce, n-1 for all-gather and reduce-scatter (bytes
 * per rank), 1 otherwise.
 *
 * The lock is held while waiting for peers, up to SIMGPU_NCCL_TIMEOUT_MS: other threads
 * of the process stop at their next CUDA call meanwhile, and operations on several
 * communicators must be issued in an order that every rank shares.
 */
#ifndef SIMGPU_NCCL_OPS_H
#define SIMGPU_NCCL_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm.h"

enum simnccl_cost { SIMNCCL_COST_ALL_REDUCE, SIMNCCL_COST_RING, SIMNCCL_COST_ONE };

/*
 * X(kind, api name, cost shape, takes a reduction operator, what op->peer is: "root",
 * "peer", or NULL where it is unused)
 */
#define SIMNCCL_KINDS(X)                                                              \
	X(SIMNCCL_ALL_REDUCE, "ncclAllReduce", SIMNCCL_COST_ALL_REDUCE, true, NULL)   \
	X(SIMNCCL_ALL_GATHER, "ncclAllGather", SIMNCCL_COST_RING, false, NULL)        \
	X(SIMNCCL_REDUCE_SCATTER, "ncclReduceScatter", SIMNCCL_COST_RING, true, NULL) \
	X(SIMNCCL_BROADCAST, "ncclBroadcast", SIMNCCL_COST_ONE, false, "root")        \
	X(SIMNCCL_REDUCE, "ncclReduce", SIMNCCL_COST_ONE, true, "root")               \
	X(SIMNCCL_SEND, "ncclSend", SIMNCCL_COST_ONE, false, "peer")                  \
	X(SIMNCCL_RECV, "ncclRecv", SIMNCCL_COST_ONE, false, "peer")                  \
	X(SIMNCCL_SPLIT, "ncclCommSplit", SIMNCCL_COST_ONE, false, NULL)

enum simnccl_kind {
#define X(kind, name, cost, has_redop, peer) kind,
	SIMNCCL_KINDS(X)
#undef X
	        SIMNCCL_KIND_COUNT
};

struct simnccl_delivery;

struct simnccl_op {
	enum simnccl_kind kind;
	struct ncclComm *comm;
	const void *sendbuf;
	void *recvbuf;
	size_t count; /* all-gather: per rank sent; reduce-scatter: per rank received */
	ncclDataType_t type;
	ncclRedOp_t redop; /* 0 where the kind takes none */
	int peer;          /* root of broadcast and reduce, peer of send and recv; else 0 */
	struct CUstream_st *stream;
	uint64_t vbytes;    /* bytes the cost model charges (simgpu_comm_take_virtual_bytes) */
	int color, key;     /* ncclCommSplit */
	int32_t *split_out; /* ncclCommSplit: receives (color, key) of every rank */

	/* Filled in while issuing. */
	uint64_t arrival, start, end, seq;
	int state;
	struct simnccl_delivery *delivery;
};

const char *simnccl_kind_name(enum simnccl_kind kind);
bool simnccl_kind_has_redop(enum simnccl_kind kind);
/* "root" or "peer": what op->peer means for the kind; NULL where it takes neither. */
const char *simnccl_kind_peer(enum simnccl_kind kind);
/* Bytes of op's data that pass through one shared-memory area (checked against
 * SIMGPU_NCCL_BUFFER). */
size_t simnccl_op_area_bytes(const struct simnccl_op *op);
/* Bytes this rank reads from sendbuf and writes to recvbuf (0 where it has none). */
size_t simnccl_op_input_bytes(const struct simnccl_op *op);
size_t simnccl_op_output_bytes(const struct simnccl_op *op);

/*
 * Issues ops[0..n) as one group, as described above. Each op must have passed the API
 * layer's checks. Returns ncclSuccess, or the first failure with why filled in; the
 * communicator that failed has been marked (simnccl_comm_fail), and operations that had
 * already completed with their peers are booked all the same.
 */
ncclResult_t simnccl_ops_issue(struct simnccl_op *ops, size_t n, char *why, size_t why_len);

/* Runs ncclCommSplit's exchange (op->kind SIMNCCL_SPLIT) as a collective on op->comm,
 * outside virtual time; fills op->split_out. */
ncclResult_t simnccl_ops_exchange(struct simnccl_op *op, char *why, size_t why_len);

#endif /* SIMGPU_NCCL_OPS_H */
