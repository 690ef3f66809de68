/* SPDX-License-Identifier: Apache-2.0 */
/* Issuing NCCL operations: the collective and point-to-point protocols, costs, bookings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "ops.h"
#include "reduce.h"

/* op->state. OP_FAILED: the peers disagreed; nothing to book. */
enum { OP_PENDING, OP_PUBLISHED, OP_DONE, OP_FAILED };

/* A result waiting for its virtual end; the core frees it after deliver() ran. */
struct simnccl_delivery {
	void *dst;
	size_t bytes;
	unsigned char data[];
};

static const struct kind_info {
	const char *name;
	enum simnccl_cost cost;
	bool has_redop;
	const char *peer;
} kinds[SIMNCCL_KIND_COUNT] = {
#define X(kind, name, cost, has_redop, peer) [kind] = {name, cost, has_redop, peer},
        SIMNCCL_KINDS(X)
#undef X
};

const char *simnccl_kind_name(enum simnccl_kind kind)
{
	return kind < SIMNCCL_KIND_COUNT ? kinds[kind].name : "invalid";
}

bool simnccl_kind_has_redop(enum simnccl_kind kind)
{
	return kinds[kind].has_redop;
}

const char *simnccl_kind_peer(enum simnccl_kind kind)
{
	return kinds[kind].peer;
}

static bool is_p2p(const struct simnccl_op *op)
{
	return op->kind == SIMNCCL_SEND || op->kind == SIMNCCL_RECV;
}

/* count elements of op's type; SIZE_MAX when that overflows, which no area holds. */
static size_t block_bytes(const struct simnccl_op *op)
{
	size_t bytes;

	if (__builtin_mul_overflow(op->count, simnccl_type_size(op->type), &bytes))
		return SIZE_MAX;
	return bytes;
}

static size_t times_ranks(size_t bytes, int nranks)
{
	size_t total;

	if (__builtin_mul_overflow(bytes, (size_t)nranks, &total))
		return SIZE_MAX;
	return total;
}

size_t simnccl_op_input_bytes(const struct simnccl_op *op)
{
	switch (op->kind) {
	case SIMNCCL_REDUCE_SCATTER:
		return times_ranks(block_bytes(op), op->comm->nranks);
	case SIMNCCL_BROADCAST:
		return op->comm->rank == op->peer ? block_bytes(op) : 0;
	case SIMNCCL_RECV:
	case SIMNCCL_SPLIT:
		return 0;
	default:
		return block_bytes(op);
	}
}

size_t simnccl_op_output_bytes(const struct simnccl_op *op)
{
	switch (op->kind) {
	case SIMNCCL_ALL_GATHER:
		return times_ranks(block_bytes(op), op->comm->nranks);
	case SIMNCCL_REDUCE:
		return op->comm->rank == op->peer ? block_bytes(op) : 0;
	case SIMNCCL_SEND:
	case SIMNCCL_SPLIT:
		return 0;
	default:
		return block_bytes(op);
	}
}

size_t simnccl_op_area_bytes(const struct simnccl_op *op)
{
	/* Every rank checks the root's and the sender's size, so that all of them refuse. */
	if (op->kind == SIMNCCL_BROADCAST || op->kind == SIMNCCL_RECV)
		return block_bytes(op);
	return simnccl_op_input_bytes(op);
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/* latency + ceil(factor * bytes / bandwidth), in integers; saturates. */
static uint64_t cost_ns(enum simnccl_kind kind, int nranks, uint64_t bytes)
{
	const struct simgpu_config *c = simgpu_core_config();
	unsigned __int128 num = 1, den = 1, ns;

	if (kinds[kind].cost == SIMNCCL_COST_ALL_REDUCE) {
		num = 2 * (unsigned)(nranks - 1);
		den = (unsigned)nranks;
	} else if (kinds[kind].cost == SIMNCCL_COST_RING) {
		num = (unsigned)(nranks - 1);
	}
	if (!c->net_bytes_per_s)
		return c->net_latency_ns;
	den *= c->net_bytes_per_s;
	ns = (num * bytes * 1000000000u + den - 1) / den + c->net_latency_ns;
	return ns > UINT64_MAX ? UINT64_MAX : (uint64_t)ns;
}

static void deliver(void *arg)
{
	struct simnccl_delivery *d = arg;

	memcpy(d->dst, d->data, d->bytes);
}

/* ---- Collectives --------------------------------------------------------------------------- */

/* Waits until every rank's posted (or consumed) count reaches target. */
static ncclResult_t wait_ranks(const struct simnccl_op *op, bool posted, uint64_t target, char *why,
                               size_t why_len)
{
	struct ncclComm *comm = op->comm;
	bool done[SIMNCCL_MAX_RANKS];
	char reason[SIMNCCL_MSG_LEN], missing[256];
	struct simnccl_wait w;
	int count;

	simnccl_wait_begin(&w, comm->timeout_ms);
	for (;;) {
		/* Read the abort flag first: a rank that found a mismatch aborts after everyone
		 * posted, and this rank must then find the mismatch too, not the abort. */
		bool aborted = simnccl_segment_aborted(&comm->seg, reason, sizeof(reason));
		count = 0;
		for (int r = 0; r < comm->nranks; r++) {
			struct simnccl_slot *s = simnccl_slot(&comm->seg, r);
			uint64_t v = atomic_load_explicit(posted ? &s->posted : &s->consumed,
			                                  memory_order_acquire);
			done[r] = v >= target;
			count += done[r];
		}
		if (count == comm->nranks)
			return ncclSuccess;
		if (aborted) {
			snprintf(why, why_len, "comm %s: %s (collective #%llu) stopped: %s",
			         comm->label, kinds[op->kind].name, (unsigned long long)op->seq,
			         reason);
			return ncclRemoteError;
		}
		if (!simnccl_wait_step(&w))
			break;
	}
	simnccl_format_ranks(missing, sizeof(missing), done, comm->nranks);
	snprintf(why, why_len,
	         "comm %s: %s (collective #%llu): rank%s %s did not %s within %llu ms "
	         "(SIMGPU_NCCL_TIMEOUT_MS)",
	         comm->label, kinds[op->kind].name, (unsigned long long)op->seq,
	         comm->nranks - count > 1 ? "s" : "", missing,
	         posted ? "call it" : "finish the collective before it",
	         (unsigned long long)comm->timeout_ms);
	return ncclRemoteError;
}

static bool same_call(const struct simnccl_desc *a, const struct simnccl_desc *b)
{
	if (a->kind != b->kind)
		return false;
	if (a->kind == SIMNCCL_SPLIT)
		return true; /* colors and keys differ by design */
	return a->count == b->count && a->type == b->type && a->redop == b->redop &&
	       a->root == b->root;
}

/* "ncclReduce(count=8, float32, sum, root=1)" */
static int format_call(char *buf, size_t len, const struct simnccl_desc *d)
{
	const struct kind_info *k;
	char redop[24] = "", root[24] = "";

	if (d->kind >= SIMNCCL_KIND_COUNT)
		return snprintf(buf, len, "an unknown call");
	k = &kinds[d->kind];
	if (d->kind == SIMNCCL_SPLIT)
		return snprintf(buf, len, "%s(color=%d, key=%d)", k->name, d->color, d->key);
	if (k->has_redop)
		snprintf(redop, sizeof(redop), ", %s", simnccl_redop_name(d->redop));
	if (k->peer)
		snprintf(root, sizeof(root), ", %s=%d", k->peer, d->root);
	return snprintf(buf, len, "%s(count=%llu, %s%s%s)", k->name, (unsigned long long)d->count,
	                simnccl_type_name(d->type), redop, root);
}

static ncclResult_t check_match(const struct simnccl_op *op, char *why, size_t why_len)
{
	const struct ncclComm *comm = op->comm;
	const struct simnccl_desc *first = &simnccl_slot(&comm->seg, 0)->desc;
	size_t used;
	int r;

	for (r = 1; r < comm->nranks; r++)
		if (!same_call(first, &simnccl_slot(&comm->seg, r)->desc))
			break;
	if (r == comm->nranks)
		return ncclSuccess;
	used = (size_t)snprintf(why, why_len, "comm %s: collective #%llu mismatch: ", comm->label,
	                        (unsigned long long)op->seq);
	for (r = 0; r < comm->nranks && used < why_len; r++) {
		used += (size_t)snprintf(why + used, why_len - used, "%srank %d ", r ? ", " : "",
		                         r);
		if (used < why_len)
			used += (size_t)format_call(why + used, why_len - used,
			                            &simnccl_slot(&comm->seg, r)->desc);
	}
	return ncclInvalidUsage;
}

/* Everyone's inputs are posted and match: this rank's result and times. */
static void compute_collective(struct simnccl_op *op)
{
	const struct ncclComm *comm = op->comm;
	const struct simnccl_segment *seg = &comm->seg;
	const void *in[SIMNCCL_MAX_RANKS];
	size_t blk = block_bytes(op);
	uint64_t start = 0, vbytes = 0;
	unsigned char *out = op->delivery ? op->delivery->data : NULL;

	for (int r = 0; r < comm->nranks; r++) {
		const struct simnccl_desc *d = &simnccl_slot(seg, r)->desc;
		start = max_u64(start, d->arrival);
		vbytes = max_u64(vbytes, d->vbytes);
		in[r] = simnccl_area(seg, r);
		if (op->kind == SIMNCCL_REDUCE_SCATTER)
			in[r] = (const unsigned char *)in[r] + (size_t)comm->rank * blk;
		if (op->kind == SIMNCCL_SPLIT) {
			op->split_out[2 * r] = d->color;
			op->split_out[2 * r + 1] = d->key;
		}
	}
	op->start = start;
	op->end = start + cost_ns(op->kind, comm->nranks, vbytes);
	if (!out)
		return;
	switch (op->kind) {
	case SIMNCCL_ALL_GATHER:
		for (int r = 0; r < comm->nranks; r++)
			memcpy(out + (size_t)r * blk, in[r], blk);
		break;
	case SIMNCCL_BROADCAST:
		memcpy(out, in[op->peer], blk);
		break;
	default: /* all-reduce, reduce, reduce-scatter */
		simnccl_reduce(out, in, comm->nranks, op->count, op->type, op->redop);
		break;
	}
}

/*
 * One collective, as collective number c on its communicator: wait until every rank has
 * read collective c - 1 (so this rank's area is free), publish, wait until everyone has
 * published, check that the calls match, compute, and say this rank has read.
 */
static ncclResult_t run_collective(struct simnccl_op *op, uint64_t arrival, char *why,
                                   size_t why_len)
{
	struct ncclComm *comm = op->comm;
	struct simnccl_slot *me = simnccl_slot(&comm->seg, comm->rank);
	size_t in = simnccl_op_input_bytes(op);
	ncclResult_t res;

	op->seq = ++comm->coll_seq;
	res = wait_ranks(op, false, op->seq - 1, why, why_len);
	if (res != ncclSuccess)
		return res;
	me->desc = (struct simnccl_desc){
	        .kind = op->kind,
	        .type = op->type,
	        .redop = op->redop,
	        .root = op->peer,
	        .count = op->count,
	        .arrival = arrival,
	        .vbytes = op->vbytes,
	        .color = op->color,
	        .key = op->key,
	};
	if (in)
		memcpy(simnccl_area(&comm->seg, comm->rank), op->sendbuf, in);
	atomic_store_explicit(&me->posted, op->seq, memory_order_release);
	res = wait_ranks(op, true, op->seq, why, why_len);
	if (res != ncclSuccess)
		return res;
	res = check_match(op, why, why_len);
	if (res == ncclSuccess)
		compute_collective(op);
	atomic_store_explicit(&me->consumed, op->seq, memory_order_release);
	return res;
}

/* ---- Point to point ------------------------------------------------------------------------ */

static void p2p_times(struct simnccl_op *op, uint64_t peer_arrival, uint64_t peer_vbytes)
{
	op->start = max_u64(op->arrival, peer_arrival);
	op->end = op->start + cost_ns(op->kind, 2, max_u64(op->vbytes, peer_vbytes));
}

static ncclResult_t size_mismatch(const struct simnccl_op *op, uint64_t sent, uint64_t expected,
                                  char *why, size_t why_len)
{
	const struct ncclComm *comm = op->comm;
	bool send = op->kind == SIMNCCL_SEND;

	snprintf(why, why_len,
	         "comm %s: ncclSend #%llu from rank %d to rank %d carries %llu bytes but the "
	         "matching ncclRecv expects %llu bytes",
	         comm->label, (unsigned long long)op->seq, send ? comm->rank : op->peer,
	         send ? op->peer : comm->rank, (unsigned long long)sent,
	         (unsigned long long)expected);
	return ncclInvalidUsage;
}

/* A send publishes once its mailbox is free and completes once the receiver answered. */
static ncclResult_t step_send(struct simnccl_op *op, bool *progress, char *why, size_t why_len)
{
	struct ncclComm *comm = op->comm;
	struct simnccl_mailbox *mb = simnccl_mailbox(&comm->seg, comm->rank, op->peer);
	uint64_t received = atomic_load_explicit(&mb->received, memory_order_acquire);

	if (op->state == OP_PENDING) {
		if (received != op->seq - 1)
			return ncclSuccess;
		mb->send_arrival = op->arrival;
		mb->send_bytes = block_bytes(op);
		mb->send_vbytes = op->vbytes;
		memcpy(simnccl_mail_area(&comm->seg, comm->rank, op->peer), op->sendbuf,
		       block_bytes(op));
		atomic_store_explicit(&mb->sent, op->seq, memory_order_release);
		op->state = OP_PUBLISHED;
		*progress = true;
		return ncclSuccess;
	}
	if (received < op->seq)
		return ncclSuccess;
	*progress = true;
	if (mb->recv_bytes != mb->send_bytes) {
		op->state = OP_FAILED;
		return size_mismatch(op, mb->send_bytes, mb->recv_bytes, why, why_len);
	}
	op->state = OP_DONE;
	p2p_times(op, mb->recv_arrival, mb->recv_vbytes);
	return ncclSuccess;
}

/* A receive completes once its send is in the mailbox; the answer frees the mailbox. */
static ncclResult_t step_recv(struct simnccl_op *op, bool *progress, char *why, size_t why_len)
{
	struct ncclComm *comm = op->comm;
	struct simnccl_mailbox *mb = simnccl_mailbox(&comm->seg, op->peer, comm->rank);
	ncclResult_t res = ncclSuccess;

	if (atomic_load_explicit(&mb->sent, memory_order_acquire) < op->seq)
		return ncclSuccess;
	*progress = true;
	op->state = OP_DONE;
	mb->recv_arrival = op->arrival;
	mb->recv_bytes = block_bytes(op);
	mb->recv_vbytes = op->vbytes;
	if (mb->send_bytes != mb->recv_bytes) {
		op->state = OP_FAILED;
		res = size_mismatch(op, mb->send_bytes, mb->recv_bytes, why, why_len);
	} else {
		memcpy(op->delivery->data, simnccl_mail_area(&comm->seg, op->peer, comm->rank),
		       mb->recv_bytes);
		p2p_times(op, mb->send_arrival, mb->send_vbytes);
	}
	atomic_store_explicit(&mb->received, op->seq, memory_order_release);
	return res;
}

/* True if an earlier operation of the batch on the same (comm, kind, peer) is not done:
 * sends to one peer go out in order, and so do receives. O(n^2) in the group's size. */
static bool blocked_by_earlier(const struct simnccl_op *ops, size_t i)
{
	for (size_t j = 0; j < i; j++)
		if (ops[j].comm == ops[i].comm && ops[j].kind == ops[i].kind &&
		    ops[j].peer == ops[i].peer && ops[j].state != OP_DONE)
			return true;
	return false;
}

/* Names the first operation that is still waiting, and how many others are. */
static ncclResult_t p2p_stuck(struct simnccl_op *ops, size_t n, struct ncclComm **failed, char *why,
                              size_t why_len)
{
	char reason[SIMNCCL_MSG_LEN], more[48] = "";
	struct simnccl_op *op = NULL;
	size_t stuck = 0;

	bool aborted = false;

	/* The first one waiting on an aborted communicator, else the first one waiting. */
	for (size_t i = 0; i < n; i++) {
		if (!is_p2p(&ops[i]) || ops[i].state == OP_DONE)
			continue;
		stuck++;
		if (!aborted &&
		    simnccl_segment_aborted(&ops[i].comm->seg, reason, sizeof(reason))) {
			aborted = true;
			op = &ops[i];
		}
		if (!op)
			op = &ops[i];
	}
	if (stuck > 1)
		snprintf(more, sizeof(more), " (and %zu more waiting)", stuck - 1);
	*failed = op->comm;
	if (aborted) {
		snprintf(why, why_len, "comm %s: %s #%llu with rank %d stopped%s: %s",
		         op->comm->label, kinds[op->kind].name, (unsigned long long)op->seq,
		         op->peer, more, reason);
		return ncclRemoteError;
	}
	snprintf(why, why_len,
	         "comm %s: %s #%llu %s rank %d: rank %d did not post the matching %s within "
	         "%llu ms (SIMGPU_NCCL_TIMEOUT_MS)%s",
	         op->comm->label, kinds[op->kind].name, (unsigned long long)op->seq,
	         op->kind == SIMNCCL_SEND ? "to" : "from", op->peer, op->peer,
	         op->kind == SIMNCCL_SEND ? "ncclRecv" : "ncclSend",
	         (unsigned long long)op->comm->timeout_ms, more);
	return ncclRemoteError;
}

static bool any_aborted(const struct simnccl_op *ops, size_t n)
{
	char reason[SIMNCCL_MSG_LEN];

	for (size_t i = 0; i < n; i++)
		if (is_p2p(&ops[i]) && ops[i].state != OP_DONE &&
		    simnccl_segment_aborted(&ops[i].comm->seg, reason, sizeof(reason)))
			return true;
	return false;
}

static ncclResult_t run_p2p(struct simnccl_op *ops, size_t n, struct ncclComm **failed, char *why,
                            size_t why_len)
{
	size_t pending = 0;
	uint64_t timeout_ms = 0;
	struct simnccl_wait w;

	for (size_t i = 0; i < n; i++) {
		struct simnccl_op *op = &ops[i];
		if (!is_p2p(op))
			continue;
		if (op->kind == SIMNCCL_SEND)
			op->seq = ++op->comm->send_seq[op->peer];
		else
			op->seq = ++op->comm->recv_seq[op->peer];
		timeout_ms = max_u64(timeout_ms, op->comm->timeout_ms);
		pending++;
	}
	simnccl_wait_begin(&w, timeout_ms);
	while (pending) {
		/* Before stepping: a peer that failed on a size mismatch answered first and
		 * aborted after, so this pass still finds the answer and reports the mismatch. */
		bool aborted = any_aborted(ops, n), progress = false;
		for (size_t i = 0; i < n; i++) {
			struct simnccl_op *op = &ops[i];
			ncclResult_t res;
			if (!is_p2p(op) || op->state == OP_DONE || blocked_by_earlier(ops, i))
				continue;
			if (op->kind == SIMNCCL_SEND)
				res = step_send(op, &progress, why, why_len);
			else
				res = step_recv(op, &progress, why, why_len);
			if (res != ncclSuccess) {
				*failed = op->comm;
				return res;
			}
			pending -= op->state == OP_DONE;
		}
		if (!pending)
			break;
		if (progress) {
			simnccl_wait_begin(&w, timeout_ms);
			continue;
		}
		if (aborted || !simnccl_wait_step(&w))
			return p2p_stuck(ops, n, failed, why, why_len);
	}
	return ncclSuccess;
}

/* ---- Issuing ----------------------------------------------------------------------------------
 */

static ncclResult_t alloc_deliveries(struct simnccl_op *ops, size_t n, char *why, size_t why_len)
{
	for (size_t i = 0; i < n; i++) {
		size_t bytes = simnccl_op_output_bytes(&ops[i]);
		ops[i].state = OP_PENDING;
		ops[i].start = ops[i].end = 0;
		ops[i].delivery = NULL;
		if (!bytes)
			continue;
		ops[i].delivery = malloc(sizeof(*ops[i].delivery) + bytes);
		if (!ops[i].delivery) {
			snprintf(why, why_len, "no host memory for a %zu-byte %s result", bytes,
			         kinds[ops[i].kind].name);
			return ncclSystemError;
		}
		ops[i].delivery->dst = ops[i].recvbuf;
		ops[i].delivery->bytes = bytes;
	}
	return ncclSuccess;
}

/* A collective after another on the same communicator in this group starts after it. */
static uint64_t chained_arrival(const struct simnccl_op *ops, size_t i)
{
	uint64_t arrival = ops[i].arrival;

	for (size_t j = 0; j < i; j++)
		if (!is_p2p(&ops[j]) && ops[j].comm == ops[i].comm && ops[j].state == OP_DONE)
			arrival = max_u64(arrival, ops[j].end);
	return arrival;
}

ncclResult_t simnccl_ops_issue(struct simnccl_op *ops, size_t n, char *why, size_t why_len)
{
	struct ncclComm *failed = NULL;
	uint64_t latest = 0;
	ncclResult_t res;

	res = alloc_deliveries(ops, n, why, why_len);
	if (res != ncclSuccess)
		goto out_free;

	simgpu_core_lock();
	for (size_t i = 0; i < n; i++) {
		ops[i].arrival = simgpu_comm_arrival_locked(ops[i].stream);
		latest = max_u64(latest, ops[i].arrival);
	}
	simgpu_effects_apply_until_locked(latest);
	res = run_p2p(ops, n, &failed, why, why_len);
	for (size_t i = 0; i < n && res == ncclSuccess; i++) {
		if (is_p2p(&ops[i]))
			continue;
		res = run_collective(&ops[i], chained_arrival(ops, i), why, why_len);
		if (res != ncclSuccess)
			failed = ops[i].comm;
		else
			ops[i].state = OP_DONE;
	}
	for (size_t i = 0; i < n; i++) {
		if (ops[i].state != OP_DONE)
			continue;
		simgpu_comm_book_locked(ops[i].stream, ops[i].start, ops[i].end,
		                        kinds[ops[i].kind].name, ops[i].delivery ? deliver : NULL,
		                        ops[i].delivery);
		ops[i].delivery = NULL; /* the core frees it */
	}
	simgpu_core_unlock();
	if (failed)
		simnccl_comm_fail(failed, res, why);
out_free:
	for (size_t i = 0; i < n; i++) {
		free(ops[i].delivery);
		ops[i].delivery = NULL;
	}
	return res;
}

ncclResult_t simnccl_ops_exchange(struct simnccl_op *op, char *why, size_t why_len)
{
	ncclResult_t res;

	op->delivery = NULL;
	res = run_collective(op, 0, why, why_len);
	if (res != ncclSuccess)
		simnccl_comm_fail(op->comm, res, why);
	return res;
}
