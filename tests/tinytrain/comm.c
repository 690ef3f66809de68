/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tinytrain's communication, as PyTorch's NCCL process group issues it: on a stream of
 * its own, which first waits for the compute stream's current point, and whose
 * completion the compute stream waits for before it uses the result.
 */
#include "model.h"
#include "simgpu.h"

static void comm_waits_for_compute(struct tt_rank *r)
{
	tt_check_cuda(cudaEventRecord(r->compute_ready, r->compute), "cudaEventRecord");
	tt_check_cuda(cudaStreamWaitEvent(r->comm, r->compute_ready, 0), "cudaStreamWaitEvent");
}

void tt_compute_waits_for_comm(struct tt_rank *r)
{
	tt_check_cuda(cudaEventRecord(r->comm_done, r->comm), "cudaEventRecord");
	tt_check_cuda(cudaStreamWaitEvent(r->compute, r->comm_done, 0), "cudaStreamWaitEvent");
}

static void allreduce_op(struct tt_rank *r, ncclComm_t comm, float *buf, int64_t count,
                         uint64_t virtual_bytes, ncclRedOp_t op)
{
	comm_waits_for_compute(r);
	simgpu_nccl_next_virtual_bytes(virtual_bytes);
	tt_check_nccl(ncclAllReduce(buf, buf, (size_t)count, ncclFloat, op, comm, r->comm),
	              "ncclAllReduce");
	tt_compute_waits_for_comm(r);
}

static void allreduce(struct tt_rank *r, ncclComm_t comm, float *buf, int64_t count,
                      uint64_t virtual_bytes)
{
	allreduce_op(r, comm, buf, count, virtual_bytes, ncclSum);
}

void tt_found_inf_allreduce(struct tt_rank *r, float *found_inf)
{
	if (r->cfg->nproc > 1)
		allreduce_op(r, r->world, found_inf, 1, sizeof(float), ncclMax);
}

void tt_tp_allreduce(struct tt_rank *r, float *buf, int64_t count, uint64_t virtual_bytes)
{
	if (r->cfg->tp > 1)
		allreduce(r, r->tp_comm, buf, count, virtual_bytes);
}

/*
 * The buffer may still be read by queued communication: the compute stream waits for
 * the communication stream's current point before the free, so the allocator cannot
 * hand the memory out while a transfer still reads it. With the hazard off, the host
 * waits for the communication instead.
 */
void tt_free_after_comm(struct tt_rank *r, void *ptr)
{
	if (r->cfg->hazard[TT_HAZARD_CROSS_STREAM_FREE]) {
		tt_compute_waits_for_comm(r);
	} else {
		tt_check_cuda(cudaStreamSynchronize(r->comm), "cudaStreamSynchronize");
	}
	tt_free(r, ptr);
}

void tt_p2p(struct tt_rank *r, float *send_next, float *send_prev, float **recv_prev,
            float **recv_next)
{
	const struct tt_shape *s = &r->real;
	size_t count = (size_t)(s->tokens * s->hidden);
	uint64_t virtual_bytes = (uint64_t)(r->virt.tokens * r->virt.hidden) * 2;
	int stride = r->cfg->tp * r->cfg->dp; /* world ranks between neighbouring stages */
	/* The pipeline is a ring: with model chunks, the last stage feeds the first. */
	int next = (r->rank + stride) % r->cfg->nproc;
	int prev = (r->rank - stride + r->cfg->nproc) % r->cfg->nproc;

	if (!send_next && !send_prev && !recv_prev && !recv_next)
		return;
	if (recv_prev)
		*recv_prev = tt_alloc(r, count * sizeof(float));
	if (recv_next)
		*recv_next = tt_alloc(r, count * sizeof(float));
	comm_waits_for_compute(r);
	tt_check_nccl(ncclGroupStart(), "ncclGroupStart");
	if (send_next) {
		simgpu_nccl_next_virtual_bytes(virtual_bytes);
		tt_check_nccl(ncclSend(send_next, count, ncclFloat, next, r->world, r->comm),
		              "ncclSend");
	}
	if (send_prev) {
		simgpu_nccl_next_virtual_bytes(virtual_bytes);
		tt_check_nccl(ncclSend(send_prev, count, ncclFloat, prev, r->world, r->comm),
		              "ncclSend");
	}
	if (recv_prev) {
		simgpu_nccl_next_virtual_bytes(virtual_bytes);
		tt_check_nccl(ncclRecv(*recv_prev, count, ncclFloat, prev, r->world, r->comm),
		              "ncclRecv");
	}
	if (recv_next) {
		simgpu_nccl_next_virtual_bytes(virtual_bytes);
		tt_check_nccl(ncclRecv(*recv_next, count, ncclFloat, next, r->world, r->comm),
		              "ncclRecv");
	}
	tt_check_nccl(ncclGroupEnd(), "ncclGroupEnd");
	tt_compute_waits_for_comm(r);
	if (send_next)
		tt_free_after_comm(r, send_next);
	if (send_prev)
		tt_free_after_comm(r, send_prev);
}

uint64_t tt_virtual_layer_bytes(const struct tt_rank *r)
{
	const struct tt_shape *v = &r->virt;

	return (uint64_t)(12 * v->hidden * v->local_hidden + 4 * v->hidden) * TT_VIRTUAL_BYTES;
}

uint64_t tt_virtual_edge_bytes(const struct tt_rank *r)
{
	const struct tt_shape *v = &r->virt;
	uint64_t elements = 0;

	if (r->first_stage)
		elements += (uint64_t)(v->vocab * v->hidden);
	if (r->last_stage)
		elements += (uint64_t)(v->hidden * v->vocab + 2 * v->hidden);
	return elements * TT_VIRTUAL_BYTES;
}

/* The virtual model's parameters on this rank, in bf16 bytes: what the data-parallel
 * reduction would move. */
static uint64_t virtual_param_bytes(const struct tt_rank *r)
{
	return tt_virtual_layer_bytes(r) * (uint64_t)r->local_layers + tt_virtual_edge_bytes(r);
}

void tt_dp_allreduce_grads(struct tt_rank *r)
{
	if (r->cfg->dp > 1)
		allreduce(r, r->dp_comm, r->grads, r->param_count, virtual_param_bytes(r));
}

void tt_dp_allreduce_async(struct tt_rank *r, float *buf, int64_t count, uint64_t virtual_bytes)
{
	comm_waits_for_compute(r);
	simgpu_nccl_next_virtual_bytes(virtual_bytes);
	tt_check_nccl(
	        ncclAllReduce(buf, buf, (size_t)count, ncclFloat, ncclSum, r->dp_comm, r->comm),
	        "ncclAllReduce");
}

void tt_dp_allreduce_scalar(struct tt_rank *r, float *value)
{
	if (r->cfg->dp > 1)
		allreduce(r, r->dp_comm, value, 1, sizeof(float));
}
