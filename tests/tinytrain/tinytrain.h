/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tinytrain: a GPT-style trainer written against the CUDA runtime and NCCL (plus simgpu's
 * kernel registration and memory statistics), used to judge Lynx on memory, time and
 * results. This header holds the configuration every module shares.
 */
#ifndef TINYTRAIN_H
#define TINYTRAIN_H

#include <stdbool.h>
#include <stdint.h>

enum tt_hazard {
#define TT_HAZARD(id, name, help) TT_HAZARD_##id,
#include "hazards.def"
#undef TT_HAZARD
	TT_HAZARD_COUNT
};

#define TT_RECOMPUTE_MODES(X) \
	X(NONE, "none")       \
	X(FULL, "full")       \
	X(SELECTIVE, "selective")

enum tt_recompute {
#define TT_RECOMPUTE_ENUM(id, name) TT_RECOMPUTE_##id,
	TT_RECOMPUTE_MODES(TT_RECOMPUTE_ENUM)
#undef TT_RECOMPUTE_ENUM
};

/*
 * Pipeline schedules (--schedule): Megatron's 1F1B; GPipe (every forward, then every
 * backward in the same micro-batch order); Megatron's interleaved 1F1B over
 * --virtual-stages model chunks per rank.
 */
#define TT_SCHEDULES(X)        \
	X(ONE_F_ONE_B, "1f1b") \
	X(GPIPE, "gpipe")      \
	X(INTERLEAVED, "interleaved")

enum tt_schedule {
#define TT_SCHEDULE_ENUM(id, name) TT_SCHEDULE_##id,
	TT_SCHEDULES(TT_SCHEDULE_ENUM)
#undef TT_SCHEDULE_ENUM
};

/*
 * The stream the compute runs on (--compute-stream): the handle cudaStreamLegacy; the
 * handle 0, as PyTorch passes its default stream; or a created non-blocking stream, as
 * torch.cuda.Stream() makes.
 */
#define TT_COMPUTE_STREAMS(X)  \
	X(LEGACY, "legacy")    \
	X(NULL_HANDLE, "null") \
	X(CREATED, "created")

enum tt_compute_stream {
#define TT_COMPUTE_STREAM_ENUM(id, name) TT_COMPUTE_STREAM_##id,
	TT_COMPUTE_STREAMS(TT_COMPUTE_STREAM_ENUM)
#undef TT_COMPUTE_STREAM_ENUM
};

/*
 * What the trainer runs as a CUDA graph (--cuda-graph): nothing; or the optimizer step, as
 * a capturable optimizer under torch.cuda.graph (captured once, replayed every step).
 */
#define TT_CUDA_GRAPHS(X) \
	X(NONE, "none")   \
	X(OPTIMIZER, "optimizer")

enum tt_cuda_graph {
#define TT_CUDA_GRAPH_ENUM(id, name) TT_CUDA_GRAPH_##id,
	TT_CUDA_GRAPHS(TT_CUDA_GRAPH_ENUM)
#undef TT_CUDA_GRAPH_ENUM
};

/*
 * Which launch API each class of kernel goes through (--launch): X(id, name, GEMMs,
 * the rest), with the APIs of kernels.h's TT_LAUNCH_APIS. "mixed" is what a PyTorch
 * job looks like: cuBLASLt launches its GEMMs with cuLaunchKernelEx, ATen its
 * element-wise kernels with cudaLaunchKernel.
 */
#define TT_LAUNCH_MODES(X)                              \
	X(RUNTIME, "runtime", RUNTIME, RUNTIME)         \
	X(RUNTIME_EX, "ex", RUNTIME_EX, RUNTIME_EX)     \
	X(DRIVER, "driver", DRIVER, DRIVER)             \
	X(DRIVER_EX, "driver-ex", DRIVER_EX, DRIVER_EX) \
	X(MIXED, "mixed", DRIVER_EX, RUNTIME)

enum tt_launch_mode {
#define TT_LAUNCH_MODE_ENUM(id, name, gemm, other) TT_LAUNCH_MODE_##id,
	TT_LAUNCH_MODES(TT_LAUNCH_MODE_ENUM)
#undef TT_LAUNCH_MODE_ENUM
};

/* The shape of a GPT model: hidden size, heads, sequence length, micro-batch size, vocabulary. */
struct tt_dims {
	int hidden, heads, seq, batch, vocab;
};

struct tt_config {
	int nproc, pp, tp, dp;
	int layers, microbatches, steps;
	uint64_t seed;
	enum tt_recompute recompute;
	/* With --recompute: only the first this many layers of each model chunk recompute
	 * (Megatron's --recompute-method block --recompute-num-layers); 0: every layer. */
	int recompute_layers;
	/* With --recompute full: each model chunk's layers are checkpointed in groups of this
	 * many (Megatron's --recompute-method uniform --recompute-num-layers): a group keeps its
	 * input only, and its last layer's backward reruns the group's forwards; 0: none. */
	int recompute_groups;
	enum tt_schedule schedule;
	int virtual_stages; /* model chunks per rank: 1 unless interleaved */
	enum tt_compute_stream compute_stream;
	enum tt_launch_mode launch;
	/* Each this many local layers launch through a module of their own; 0: no modules. */
	int kernel_modules;
	/* Adam's state is allocated at the first optimizer step, not at start-up. */
	bool lazy_optimizer;
	/* Each new buffer is filled by a kernel of its own first (PyTorch's deterministic mode). */
	bool deterministic_fill;
	bool retain_pool; /* the default pool keeps freed memory (PyTorch's cudaMallocAsync) */
	/* Copies to and from page-locked host memory cost the virtual model's bytes. */
	bool virtual_copies;
	/* DDP-style gradient buckets of about this many KiB; 0: one all-reduce per step. */
	int ddp_bucket_kb;
	/* The gradients are freed after each optimizer step and allocated again by the next
	 * backward (zero_grad(set_to_none=True), PyTorch's default). */
	bool grad_set_to_none;
	/* Q, K and V are views of one allocation (PyTorch's split of the fused QKV output). */
	bool fused_qkv;
	/* FSDP's FULL_SHARD over data-parallel ranks, a unit per layer (fsdp.h). */
	bool fsdp;
	/* After this many steps, fork a worker that exits at once; 0: never. */
	int fork_worker_after;
	/* Before step 0 and every this many steps, eval_iters forward-only passes (schedule.h,
	 * tt_eval); 0: never. */
	int eval_every, eval_iters;
	/* Every this many steps, a host synchronisation after the first layer's forward; 0:
	 * never. */
	int sync_every;
	/* torch.cuda.amp.GradScaler (fp16): each step unscales and checks the gradients, reads
	 * the check on the host and updates the scale; the optimizer step is skipped at the
	 * steps whose bit is set in grad_scaler_overflows (steps 0 to 63). */
	bool grad_scaler;
	uint64_t grad_scaler_overflows;
	enum tt_cuda_graph cuda_graph;
	struct tt_dims real; /* what the arithmetic runs on */
	struct tt_dims virt; /* what the cost model and communication sizes describe */
	const char *virtual_name;
	float dropout, lr;
	bool hazard[TT_HAZARD_COUNT];
	/* Print, before the first step, the bytes each local layer's forward keeps for its
	 * backward: the ground truth for profilers (--report-saved). */
	bool report_saved;
};

/*
 * Parses the command line into cfg. Returns 0; 1 after printing --help to stdout; 2 after
 * printing a usage error (naming the problem) to stderr.
 */
int tt_parse_args(int argc, char **argv, struct tt_config *cfg);

const char *tt_hazard_name(enum tt_hazard hazard);
const char *tt_recompute_name(enum tt_recompute mode);

/* Runs one rank's training and writes one JSON line per step to out_fd. Returns 0 on
 * success; prints the failure to stderr and returns 1 otherwise. */
int tt_rank_run(const struct tt_config *cfg, int rank, const void *nccl_id, int out_fd);

#endif /* TINYTRAIN_H */
