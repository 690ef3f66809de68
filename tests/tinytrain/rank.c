/* SPDX-License-Identifier: Apache-2.0 */
/* One rank of tinytrain: its place in the pipeline/tensor/data grid, set-up and step loop. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddp.h"
#include "fsdp.h"
#include "schedule.h"
#include "simgpu.h"

/* Megatron's order: tensor-parallel ranks are neighbours, then data-parallel, then stages. */
static void place(struct tt_rank *r, const struct tt_config *cfg, int rank)
{
	r->cfg = cfg;
	r->rank = rank;
	r->tp_rank = rank % cfg->tp;
	r->dp_rank = rank / cfg->tp % cfg->dp;
	r->stage = rank / (cfg->tp * cfg->dp);
	r->first_stage = r->stage == 0;
	r->last_stage = r->stage == cfg->pp - 1;
	r->local_layers = cfg->layers / cfg->pp;
	r->chunks = cfg->schedule == TT_SCHEDULE_INTERLEAVED ? cfg->virtual_stages : 1;
	r->chunk_layers = r->local_layers / r->chunks;
}

int tt_global_layer(const struct tt_rank *r, int layer)
{
	int chunk = layer / r->chunk_layers;

	return (chunk * r->cfg->pp + r->stage) * r->chunk_layers + layer % r->chunk_layers;
}

static struct tt_shape shape_of(const struct tt_dims *d, int tp)
{
	return (struct tt_shape){
	        .tokens = (int64_t)d->batch * d->seq,
	        .batch = d->batch,
	        .seq = d->seq,
	        .hidden = d->hidden,
	        .local_hidden = d->hidden / tp,
	        .local_heads = d->heads / tp,
	        .head_dim = d->hidden / d->heads,
	        .local_ffn = 4 * (int64_t)d->hidden / tp,
	        .vocab = d->vocab,
	};
}

static void connect(struct tt_rank *r, const void *nccl_id)
{
	const struct tt_config *cfg = r->cfg;
	ncclUniqueId id;

	memcpy(&id, nccl_id, sizeof(id));
	tt_check_nccl(ncclCommInitRank(&r->world, cfg->nproc, id, r->rank), "ncclCommInitRank");
	tt_check_nccl(ncclCommSplit(r->world, r->rank / cfg->tp, r->rank, &r->tp_comm, NULL),
	              "ncclCommSplit");
	tt_check_nccl(ncclCommSplit(r->world, r->stage * cfg->tp + r->tp_rank, r->rank, &r->dp_comm,
	                            NULL),
	              "ncclCommSplit");
}

static void use_launch_apis(enum tt_launch_mode mode)
{
	static const enum tt_launch_api gemm_api[] = {
#define TT_LAUNCH_GEMM_API(id, name, gemm, other) TT_LAUNCH_API_##gemm,
	        TT_LAUNCH_MODES(TT_LAUNCH_GEMM_API)
#undef TT_LAUNCH_GEMM_API
	};
	static const enum tt_launch_api other_api[] = {
#define TT_LAUNCH_OTHER_API(id, name, gemm, other) TT_LAUNCH_API_##other,
	        TT_LAUNCH_MODES(TT_LAUNCH_OTHER_API)
#undef TT_LAUNCH_OTHER_API
	};

	if (tt_kernels_use_launch(gemm_api[mode], other_api[mode])) {
		fprintf(stderr, "tinytrain: cannot set up the kernel launch APIs\n");
		exit(1);
	}
}

void tt_copy_to_host(struct tt_rank *r, void *dst, const void *src, size_t bytes)
{
	/* cudaMemcpy runs on the legacy stream, which waits for the compute stream unless
	 * that one is non-blocking; then copy as PyTorch's .cpu() does. */
	if (r->cfg->compute_stream != TT_COMPUTE_STREAM_CREATED) {
		tt_check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
		return;
	}
	tt_check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, r->compute),
	              "cudaMemcpyAsync");
	tt_check_cuda(cudaStreamSynchronize(r->compute), "cudaStreamSynchronize");
}

void tt_rank_setup(struct tt_rank *r, const struct tt_config *cfg, int rank, const void *nccl_id)
{
	int devices = 0;

	memset(r, 0, sizeof(*r));
	place(r, cfg, rank);
	r->real = shape_of(&cfg->real, cfg->tp);
	r->virt = shape_of(&cfg->virt, cfg->tp);
	tt_check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
	r->device = rank % devices;
	tt_check_cuda(cudaSetDevice(r->device), "cudaSetDevice");
	if (r->cfg->retain_pool) {
		cudaMemPool_t pool;
		uint64_t keep_all = UINT64_MAX;
		tt_check_cuda(cudaDeviceGetDefaultMemPool(&pool, r->device),
		              "cudaDeviceGetDefaultMemPool");
		tt_check_cuda(
		        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all),
		        "cudaMemPoolSetAttribute");
	}
	use_launch_apis(cfg->launch);
	/* Enough modules for every local layer index (interleaved chunks included). */
	if (cfg->kernel_modules &&
	    tt_kernels_use_modules((cfg->layers + cfg->kernel_modules - 1) / cfg->kernel_modules)) {
		fprintf(stderr, "tinytrain: cannot load the kernel modules\n");
		exit(1);
	}
	connect(r, nccl_id);
	/* PyTorch computes on the legacy default stream, or on a stream of its pool (created
	 * non-blocking); its NCCL streams are non-blocking. */
	switch (cfg->compute_stream) {
	case TT_COMPUTE_STREAM_LEGACY:
		r->compute = cudaStreamLegacy;
		break;
	case TT_COMPUTE_STREAM_NULL_HANDLE:
		r->compute = NULL;
		break;
	case TT_COMPUTE_STREAM_CREATED:
		tt_check_cuda(cudaStreamCreateWithFlags(&r->compute, cudaStreamNonBlocking),
		              "cudaStreamCreateWithFlags");
		break;
	}
	tt_check_cuda(cudaStreamCreateWithFlags(&r->comm, cudaStreamNonBlocking),
	              "cudaStreamCreateWithFlags");
	tt_check_cuda(cudaEventCreateWithFlags(&r->compute_ready, cudaEventDisableTiming),
	              "cudaEventCreateWithFlags");
	tt_check_cuda(cudaEventCreateWithFlags(&r->comm_done, cudaEventDisableTiming),
	              "cudaEventCreateWithFlags");
	tt_model_init(r);
	r->ddp = tt_ddp_create(r);
	r->fsdp = tt_fsdp_create(r);
	/* The buckets took the layout from the set-up's gradients; the steps make their own. */
	if (cfg->grad_set_to_none) {
		tt_free(r, r->grads);
		r->grads = NULL;
		tt_check_cuda(cudaStreamSynchronize(r->compute), "cudaStreamSynchronize");
	}
}

void tt_rank_teardown(struct tt_rank *r)
{
	tt_free(r, r->loss_scale); /* on the compute stream, before it goes */
	tt_check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	ncclCommDestroy(r->tp_comm);
	ncclCommDestroy(r->dp_comm);
	ncclCommDestroy(r->world);
	cudaEventDestroy(r->compute_ready);
	cudaEventDestroy(r->comm_done);
	cudaStreamDestroy(r->comm);
	if (r->cfg->compute_stream == TT_COMPUTE_STREAM_CREATED)
		cudaStreamDestroy(r->compute);
	tt_ddp_destroy(r->ddp);
	tt_fsdp_destroy(r->fsdp);
	if (r->optimizer_graph)
		cudaGraphExecDestroy(r->optimizer_graph);
	cudaFree(r->adam_step);
	if (r->cfg->lazy_optimizer) {
		cudaFree(r->adam_m);
		cudaFree(r->adam_v);
	}
	free(r->w);
	free(r->g);
	free(r->acts);
	free(r->saved_layer_bytes);
}

/*
 * A worker forked mid-training, as a DataLoader or compile worker is: it uses no CUDA and
 * exits at once with exit(), so its exit handlers run (a preloaded tool's included) on a
 * copy of the rank's state. Returns 0 when it exited 0.
 */
static int fork_worker(int rank)
{
	int status;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "tinytrain: rank %d: fork: %s\n", rank, strerror(errno));
		return 1;
	}
	if (pid == 0)
		exit(0);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "tinytrain: rank %d: its forked worker did not exit 0 (%s %d)\n",
		        rank, WIFSIGNALED(status) ? "signal" : "status",
		        WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
		return 1;
	}
	return 0;
}

int tt_rank_run(const struct tt_config *cfg, int rank, const void *nccl_id, int out_fd)
{
	struct tt_rank r;
	struct tt_worker *worker = NULL;

	tt_rank_setup(&r, cfg, rank, nccl_id);
	if (cfg->hazard[TT_HAZARD_BACKWARD_THREAD]) {
		worker = tt_worker_start(r.device);
		if (!worker) {
			fprintf(stderr, "tinytrain: rank %d: cannot start the backward thread\n",
			        rank);
			return 1;
		}
	}

	/* Set-up's launches (moving the weights to the device), for step 0's line. */
	uint64_t setup_launches = tt_kernels_launch_count();
	for (int step = 0; step < cfg->steps; step++) {
		struct tt_step_result result;
		struct simgpu_memory_stats mem;
		char loss[32] = "null", eval[48] = "";

		if (cfg->eval_every && step % cfg->eval_every == 0)
			snprintf(eval, sizeof(eval), ",\"eval_loss\":%.9g", tt_eval(&r));
		tt_check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
		simgpu_memory_reset_peak();
		uint64_t start = simgpu_now_ns(), launches = tt_kernels_launch_count();
		tt_step(&r, worker, &result);
		uint64_t end = simgpu_now_ns();
		launches = tt_kernels_launch_count() - launches;
		simgpu_memory_stats(&mem);
		if (result.has_loss)
			snprintf(loss, sizeof(loss), "%.9g", result.loss);
		if (step == 0 && cfg->report_saved) {
			dprintf(out_fd, "{\"step\":-1,\"rank\":%d,\"saved_layer_bytes\":[", rank);
			for (int l = 0; l < r.local_layers; l++)
				dprintf(out_fd, "%s%" PRId64, l ? "," : "", r.saved_layer_bytes[l]);
			dprintf(out_fd, "],\"layers\":%d}\n", r.local_layers);
		}
		char setup[48] = "";
		if (step == 0)
			snprintf(setup, sizeof(setup), ",\"setup_launches\":%" PRIu64,
			         setup_launches);
		dprintf(out_fd,
		        "{\"step\":%d,\"rank\":%d,\"loss\":%s,\"grad_hash\":\"%016" PRIx64
		        "\",\"peak_bytes\":%zu,\"step_time_ns\":%" PRIu64 ",\"launches\":%" PRIu64
		        "%s%s}\n",
		        step, rank, loss, result.grad_hash, mem.peak_bytes, end - start, launches,
		        setup, eval);
		if (step + 1 == cfg->fork_worker_after && fork_worker(rank))
			return 1;
	}
	tt_worker_stop(worker);
	tt_rank_teardown(&r);
	return 0;
}
