/* SPDX-License-Identifier: Apache-2.0 */
/* tinytrain's command line: strict parsing and the checks that make a run meaningful. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tinytrain.h"

/* Virtual models: the shapes of Korthikanti et al. (s = 2048, v = 51200). */
#define TT_VIRTUAL_MODELS(X)                    \
	X("gpt-1.3b", 2048, 16, 2048, 8, 51200) \
	X("gpt-7b", 4096, 32, 2048, 4, 51200)   \
	X("gpt-22b", 6144, 64, 2048, 4, 51200)

struct virtual_model {
	const char *name;
	struct tt_dims dims;
};

static const struct virtual_model virtual_models[] = {
#define TT_VIRTUAL_ENTRY(name, h, a, s, b, v) {name, {h, a, s, b, v}},
        TT_VIRTUAL_MODELS(TT_VIRTUAL_ENTRY)
#undef TT_VIRTUAL_ENTRY
};

static const char *const hazard_names[] = {
#define TT_HAZARD(id, name, help) name,
#include "hazards.def"
#undef TT_HAZARD
};

static const char *const hazard_help[] = {
#define TT_HAZARD(id, name, help) help,
#include "hazards.def"
#undef TT_HAZARD
};

static const char *const recompute_names[] = {
#define TT_RECOMPUTE_NAME(id, name) name,
        TT_RECOMPUTE_MODES(TT_RECOMPUTE_NAME)
#undef TT_RECOMPUTE_NAME
};

static const char *const schedule_names[] = {
#define TT_SCHEDULE_NAME(id, name) name,
        TT_SCHEDULES(TT_SCHEDULE_NAME)
#undef TT_SCHEDULE_NAME
};

static const char *const cuda_graph_names[] = {
#define TT_CUDA_GRAPH_NAME(id, name) name,
        TT_CUDA_GRAPHS(TT_CUDA_GRAPH_NAME)
#undef TT_CUDA_GRAPH_NAME
};

static const char *const compute_stream_names[] = {
#define TT_COMPUTE_STREAM_NAME(id, name) name,
        TT_COMPUTE_STREAMS(TT_COMPUTE_STREAM_NAME)
#undef TT_COMPUTE_STREAM_NAME
};

static const char *const launch_mode_names[] = {
#define TT_LAUNCH_MODE_NAME(id, name, gemm, other) name,
        TT_LAUNCH_MODES(TT_LAUNCH_MODE_NAME)
#undef TT_LAUNCH_MODE_NAME
};

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

const char *tt_hazard_name(enum tt_hazard hazard)
{
	return hazard_names[hazard];
}

const char *tt_recompute_name(enum tt_recompute mode)
{
	return recompute_names[mode];
}

/* "a|b|c": the names of one X-macro list, for usage and its errors. */
static const char *choices(const char *const *names, size_t count, char *buf, size_t size)
{
	size_t used = 0;

	buf[0] = 0;
	for (size_t i = 0; i < count && used < size; i++)
		used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? "|" : "", names[i]);
	return buf;
}

static void usage(FILE *f)
{
	char recompute[64], schedule[64], stream[64], launch[64], graph[64];

	choices(recompute_names, ARRAY_SIZE(recompute_names), recompute, sizeof(recompute));
	choices(schedule_names, ARRAY_SIZE(schedule_names), schedule, sizeof(schedule));
	choices(compute_stream_names, ARRAY_SIZE(compute_stream_names), stream, sizeof(stream));
	choices(launch_mode_names, ARRAY_SIZE(launch_mode_names), launch, sizeof(launch));
	choices(cuda_graph_names, ARRAY_SIZE(cuda_graph_names), graph, sizeof(graph));
	fprintf(f,
	        "usage: tinytrain --nproc N --pp P --tp T --dp D --layers L --microbatches M\n"
	        "                 --steps S [--recompute %s [--recompute-layers N |\n"
	        "                 --recompute-groups N]]\n"
	        "                 [--seq S --batch B]\n"
	        "                 [--virtual-model gpt-1.3b|gpt-7b|gpt-22b]\n"
	        "                 [--virtual-hidden H --virtual-heads A --virtual-seq S "
	        "--virtual-batch B]\n"
	        "                 [--seed K] [--no-hazard NAME]... [--report-saved]\n"
	        "                 [--schedule %s [--virtual-stages V]]\n"
	        "                 [--lazy-optimizer] [--ddp-buckets KB | --fsdp]\n"
	        "                 [--fork-worker-after N]\n"
	        "                 [--sync-every N] [--eval-every N [--eval-iters K]]\n"
	        "                 [--grad-scaler STEPS]\n"
	        "                 [--deterministic-fill] [--fused-qkv] [--grad-set-to-none]\n"
	        "                 [--retain-pool] [--virtual-copies]\n"
	        "                 [--launch %s [--kernel-modules K]]\n"
	        "                 [--compute-stream %s] [--cuda-graph %s]\n"
	        "\n"
	        "Trains a GPT-style model on simgpu with N = P*T*D ranks (pipeline, tensor and\n"
	        "data parallel), printing one JSON line per step and rank, ordered by step then\n"
	        "rank: step, rank, loss (last pipeline stage, reduced over data parallel; null\n"
	        "elsewhere), grad_hash, peak_bytes, step_time_ns (virtual), launches (kernels the\n"
	        "rank launched in the step; step 0 adds setup_launches, those before it).\n"
	        "--report-saved first prints a line per rank with\n"
	        "step -1, saved_layer_bytes: the bytes each local layer's forward keeps for its\n"
	        "backward (its input included), the most over micro-batches, in local layer\n"
	        "order, and layers: the rank's layer count.\n"
	        "\n"
	        "Real dimensions (the arithmetic): hidden 64, 8 heads, sequence 16 (--seq),\n"
	        "micro-batch 2 (--batch), vocabulary 128: longer sequences and larger batches\n"
	        "make activations a larger share of memory. Virtual dimensions set the costs\n"
	        "and communication sizes; default gpt-1.3b.\n"
	        "\n"
	        "Shapes of real trainers (defaults first). None changes the loss's bits; all\n"
	        "but interleaved (other layers on each rank) keep each rank's grad_hash:\n"
	        "  --schedule         1f1b: Megatron's 1F1B. gpipe: all forwards, then all\n"
	        "                     backwards (micro-batches in the same order as 1F1B).\n"
	        "                     interleaved: Megatron's interleaved 1F1B over\n"
	        "                     --virtual-stages V >= 2 model chunks per rank; needs\n"
	        "                     P >= 3, L %% (P*V) == 0 and M %% P == 0.\n"
	        "  --lazy-optimizer   Adam's state is allocated (cudaMalloc) and zeroed at the\n"
	        "                     first step, as torch.optim.Adam does, not at start-up.\n"
	        "  --deterministic-fill  every new buffer is filled (all bytes 0xff: NaN) by a\n"
	        "                     kernel of its own before anything computes it, as PyTorch\n"
	        "                     does under torch.use_deterministic_algorithms.\n"
	        "  --ddp-buckets KB   DDP's gradient buckets of about KB KiB, all-reduced on the\n"
	        "                     communication stream during the last micro-batch's\n"
	        "                     backward, from flat buffers allocated in the first\n"
	        "                     backward. With --dp 1 there is nothing to reduce: no-op.\n"
	        "  --fsdp             FSDP's FULL_SHARD, a unit per layer: each layer's\n"
	        "                     parameters are all-gathered (on a stream of their own)\n"
	        "                     into a new buffer before its forward, freed after it,\n"
	        "                     gathered again one layer ahead in the backward, and its\n"
	        "                     gradients reduce-scattered on the communication stream\n"
	        "                     every micro-batch. Embedding and head stay replicated.\n"
	        "                     With --dp 1 there is nothing to shard: no-op.\n"
	        "  --retain-pool      the default memory pool keeps what is freed (release\n"
	        "                     threshold UINT64_MAX), as PyTorch's cudaMallocAsync\n"
	        "                     backend sets it: freed memory stays in use on the device.\n"
	        "  --virtual-copies   copies to and from page-locked host memory (offloading)\n"
	        "                     take the virtual model's time: each real byte costs as\n"
	        "                     many as an s*b*h activation's grow (default: real bytes,\n"
	        "                     which makes offloading about 1000x too cheap).\n"
	        "  --fork-worker-after N  after N steps each rank forks a worker that exits at\n"
	        "                     once, normally (a DataLoader worker, a compile worker);\n"
	        "                     the rank fails if the worker does not exit 0.\n"
	        "  --grad-scaler STEPS  torch.cuda.amp.GradScaler (fp16): after each backward\n"
	        "                     the gradients are unscaled and checked for inf/NaN on\n"
	        "                     the device, the host reads the check (.item()), and the\n"
	        "                     scale is updated; the optimizer step is skipped at the\n"
	        "                     steps listed (comma-separated, 0 to 63), where the scale\n"
	        "                     overflowed, as in the first steps of fp16 training.\n"
	        "  --sync-every N     every N-th step waits on the host after its first layer's\n"
	        "                     forward (a trainer that checks for NaNs every few steps):\n"
	        "                     steps whose host synchronisations differ.\n"
	        "  --fused-qkv        q, k and v are views of one allocation (offsets into\n"
	        "                     it), as PyTorch's split of the fused QKV output makes\n"
	        "                     them; the attention kernels and its backward take\n"
	        "                     pointers inside it.\n"
	        "  --recompute-layers N  with --recompute, only the first N layers of each\n"
	        "                     model chunk recompute (Megatron's --recompute-method\n"
	        "                     block --recompute-num-layers N); the others keep all.\n"
	        "  --recompute-groups N  with --recompute full, each model chunk's layers are\n"
	        "                     checkpointed N at a time (Megatron's --recompute-method\n"
	        "                     uniform --recompute-num-layers N): a group keeps only\n"
	        "                     its input, and its last layer's backward reruns the\n"
	        "                     group's forwards first. Not with --fsdp.\n"
	        "  --grad-set-to-none the gradients are freed after each optimizer step and\n"
	        "                     allocated (zeroed) again by the next step's first\n"
	        "                     backward: zero_grad(set_to_none=True), PyTorch's\n"
	        "                     default. Not with --fsdp (its gradients are its own).\n"
	        "  --eval-every N     before step 0 and every N-th step, nanoGPT's\n"
	        "                     estimate_loss: --eval-iters K (default 2) forward passes\n"
	        "                     without dropout that keep nothing for a backward, each\n"
	        "                     loss read by the host; the step's line adds eval_loss,\n"
	        "                     its mean (outside the step's time and peak). --pp 1.\n"
	        "  --launch           runtime: cudaLaunchKernel. ex: cudaLaunchKernelExC.\n"
	        "                     driver: cuLaunchKernel. driver-ex: cuLaunchKernelEx.\n"
	        "                     mixed: GEMMs driver-ex, the rest runtime (as cuBLASLt\n"
	        "                     and ATen). Driver entry points come from\n"
	        "                     cudaGetDriverEntryPointByVersion.\n"
	        "  --kernel-modules K each K local layers launch their kernels through\n"
	        "                     functions of a module of their own (cuModuleLoadData),\n"
	        "                     as torch.compile under DDP loads each graph piece's\n"
	        "                     Triton kernels: the same names, other CUfunctions.\n"
	        "                     Needs a --launch with a driver API.\n"
	        "  --compute-stream   legacy: the handle cudaStreamLegacy. null: the handle 0,\n"
	        "                     as PyTorch passes its default stream. created: a\n"
	        "                     non-blocking stream, as torch.cuda.Stream() makes.\n"
	        "  --cuda-graph       optimizer: Adam's step is a CUDA graph, as a capturable\n"
	        "                     optimizer under torch.cuda.graph: captured at the first\n"
	        "                     step (Global mode, on a side stream), launched on the\n"
	        "                     compute stream every step; its step count lives on the\n"
	        "                     device. Not with --grad-set-to-none.\n"
	        "\n"
	        "Hazards (all on; --no-hazard NAME switches one off):\n",
	        recompute, schedule, launch, stream, graph);
	for (int i = 0; i < TT_HAZARD_COUNT; i++)
		fprintf(f, "  %-18s %s\n", hazard_names[i], hazard_help[i]);
}

/* Prints "tinytrain: <problem>" and the way to help; returns the usage exit code, 2. */
__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tinytrain: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n(see tinytrain --help)\n");
	return 2;
}

/* A whole positive decimal int, or -1. */
static int parse_positive(const char *text)
{
	char *end;
	errno = 0;
	long v = strtol(text, &end, 10);

	if (errno || end == text || *end || v < 1 || v > 1 << 20)
		return -1;
	return (int)v;
}

/* A comma-separated list of steps from 0 to 63 into the bits of *steps; -1 when text is
 * not one (empty, a stray comma, a sign, a step out of range). */
static int parse_steps(const char *text, uint64_t *steps)
{
	*steps = 0;
	for (const char *p = text;; p++) {
		char *end;
		if (*p < '0' || *p > '9')
			return -1;
		errno = 0;
		long v = strtol(p, &end, 10);
		if (errno || v > 63)
			return -1;
		*steps |= 1ull << v;
		if (!*end)
			return 0;
		if (*end != ',')
			return -1;
		p = end;
	}
}

static int lookup(const char *const *names, int count, const char *name)
{
	for (int i = 0; i < count; i++)
		if (!strcmp(names[i], name))
			return i;
	return -1;
}

enum {
	OPT_NPROC = 256,
	OPT_PP,
	OPT_TP,
	OPT_DP,
	OPT_LAYERS,
	OPT_MICROBATCHES,
	OPT_STEPS,
	OPT_RECOMPUTE,
	OPT_SEQ,
	OPT_BATCH,
	OPT_VIRTUAL_MODEL,
	OPT_VIRTUAL_HIDDEN,
	OPT_VIRTUAL_HEADS,
	OPT_VIRTUAL_SEQ,
	OPT_VIRTUAL_BATCH,
	OPT_SEED,
	OPT_NO_HAZARD,
	OPT_REPORT_SAVED,
	OPT_SCHEDULE,
	OPT_VIRTUAL_STAGES,
	OPT_LAZY_OPTIMIZER,
	OPT_DETERMINISTIC_FILL,
	OPT_RETAIN_POOL,
	OPT_VIRTUAL_COPIES,
	OPT_DDP_BUCKETS,
	OPT_FSDP,
	OPT_FUSED_QKV,
	OPT_GRAD_SET_TO_NONE,
	OPT_RECOMPUTE_LAYERS,
	OPT_RECOMPUTE_GROUPS,
	OPT_EVAL_EVERY,
	OPT_EVAL_ITERS,
	OPT_FORK_WORKER_AFTER,
	OPT_SYNC_EVERY,
	OPT_GRAD_SCALER,
	OPT_LAUNCH,
	OPT_KERNEL_MODULES,
	OPT_COMPUTE_STREAM,
	OPT_CUDA_GRAPH,
	OPT_HELP,
};

static const struct option long_options[] = {
        {"nproc", required_argument, NULL, OPT_NPROC},
        {"pp", required_argument, NULL, OPT_PP},
        {"tp", required_argument, NULL, OPT_TP},
        {"dp", required_argument, NULL, OPT_DP},
        {"layers", required_argument, NULL, OPT_LAYERS},
        {"microbatches", required_argument, NULL, OPT_MICROBATCHES},
        {"steps", required_argument, NULL, OPT_STEPS},
        {"recompute", required_argument, NULL, OPT_RECOMPUTE},
        {"seq", required_argument, NULL, OPT_SEQ},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"virtual-model", required_argument, NULL, OPT_VIRTUAL_MODEL},
        {"virtual-hidden", required_argument, NULL, OPT_VIRTUAL_HIDDEN},
        {"virtual-heads", required_argument, NULL, OPT_VIRTUAL_HEADS},
        {"virtual-seq", required_argument, NULL, OPT_VIRTUAL_SEQ},
        {"virtual-batch", required_argument, NULL, OPT_VIRTUAL_BATCH},
        {"seed", required_argument, NULL, OPT_SEED},
        {"no-hazard", required_argument, NULL, OPT_NO_HAZARD},
        {"report-saved", no_argument, NULL, OPT_REPORT_SAVED},
        {"schedule", required_argument, NULL, OPT_SCHEDULE},
        {"virtual-stages", required_argument, NULL, OPT_VIRTUAL_STAGES},
        {"lazy-optimizer", no_argument, NULL, OPT_LAZY_OPTIMIZER},
        {"deterministic-fill", no_argument, NULL, OPT_DETERMINISTIC_FILL},
        {"retain-pool", no_argument, NULL, OPT_RETAIN_POOL},
        {"virtual-copies", no_argument, NULL, OPT_VIRTUAL_COPIES},
        {"ddp-buckets", required_argument, NULL, OPT_DDP_BUCKETS},
        {"fsdp", no_argument, NULL, OPT_FSDP},
        {"fused-qkv", no_argument, NULL, OPT_FUSED_QKV},
        {"grad-set-to-none", no_argument, NULL, OPT_GRAD_SET_TO_NONE},
        {"recompute-layers", required_argument, NULL, OPT_RECOMPUTE_LAYERS},
        {"recompute-groups", required_argument, NULL, OPT_RECOMPUTE_GROUPS},
        {"eval-every", required_argument, NULL, OPT_EVAL_EVERY},
        {"eval-iters", required_argument, NULL, OPT_EVAL_ITERS},
        {"fork-worker-after", required_argument, NULL, OPT_FORK_WORKER_AFTER},
        {"sync-every", required_argument, NULL, OPT_SYNC_EVERY},
        {"grad-scaler", required_argument, NULL, OPT_GRAD_SCALER},
        {"kernel-modules", required_argument, NULL, OPT_KERNEL_MODULES},
        {"launch", required_argument, NULL, OPT_LAUNCH},
        {"compute-stream", required_argument, NULL, OPT_COMPUTE_STREAM},
        {"cuda-graph", required_argument, NULL, OPT_CUDA_GRAPH},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
};

static void set_defaults(struct tt_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->pp = cfg->tp = cfg->dp = 1;
	cfg->layers = 2;
	cfg->microbatches = 1;
	cfg->steps = 1;
	cfg->seed = 1234;
	cfg->recompute = TT_RECOMPUTE_NONE;
	cfg->schedule = TT_SCHEDULE_ONE_F_ONE_B;
	cfg->virtual_stages = 1;
	cfg->compute_stream = TT_COMPUTE_STREAM_LEGACY;
	cfg->launch = TT_LAUNCH_MODE_RUNTIME;
	cfg->real = (struct tt_dims){64, 8, 16, 2, 128};
	cfg->virt = virtual_models[0].dims;
	cfg->virtual_name = virtual_models[0].name;
	cfg->dropout = 0.1f;
	cfg->lr = 1e-3f;
	for (int i = 0; i < TT_HAZARD_COUNT; i++)
		cfg->hazard[i] = true;
}

/* Megatron's conditions for the interleaved schedule; the others take one chunk. */
static int check_schedule(const struct tt_config *cfg)
{
	int v = cfg->virtual_stages;

	if (cfg->schedule != TT_SCHEDULE_INTERLEAVED) {
		if (v != 1)
			return usage_error("--virtual-stages %d needs --schedule interleaved", v);
		return 0;
	}
	if (v < 2)
		return usage_error("--schedule interleaved needs --virtual-stages V >= 2");
	if (cfg->pp < 3)
		return usage_error(
		        "--schedule interleaved needs --pp >= 3 (Megatron's rule: with 2 "
		        "stages both neighbours are one rank), not %d",
		        cfg->pp);
	if (cfg->layers % (cfg->pp * v))
		return usage_error("--layers %d is not divisible by --pp * --virtual-stages = %d",
		                   cfg->layers, cfg->pp * v);
	if (cfg->microbatches % cfg->pp)
		return usage_error("--microbatches %d is not divisible by --pp %d (interleaved)",
		                   cfg->microbatches, cfg->pp);
	return 0;
}

/* Looks name up in one X-macro list of choices; -1 (after a usage error) if absent. */
static int lookup_choice(const char *option, const char *const *names, size_t count,
                         const char *name)
{
	char list[128];

	for (size_t i = 0; i < count; i++)
		if (!strcmp(names[i], name))
			return (int)i;
	usage_error("unknown --%s '%s' (%s)", option, name,
	            choices(names, count, list, sizeof(list)));
	return -1;
}

/* Checks what no single option can: the parallel layout against the model. */
static int check_layout(const struct tt_config *cfg)
{
	if (cfg->nproc != cfg->pp * cfg->tp * cfg->dp)
		return usage_error("--nproc %d is not pp*tp*dp = %d*%d*%d = %d", cfg->nproc,
		                   cfg->pp, cfg->tp, cfg->dp, cfg->pp * cfg->tp * cfg->dp);
	if (cfg->layers % cfg->pp)
		return usage_error("--layers %d is not divisible by --pp %d", cfg->layers, cfg->pp);
	if (cfg->real.heads % cfg->tp || cfg->virt.heads % cfg->tp)
		return usage_error("--tp %d must divide the heads (%d real, %d virtual)", cfg->tp,
		                   cfg->real.heads, cfg->virt.heads);
	if (cfg->virt.hidden % cfg->virt.heads)
		return usage_error("virtual hidden %d is not divisible by its %d heads",
		                   cfg->virt.hidden, cfg->virt.heads);
	if (cfg->kernel_modules &&
	    (cfg->launch == TT_LAUNCH_MODE_RUNTIME || cfg->launch == TT_LAUNCH_MODE_RUNTIME_EX))
		return usage_error("--kernel-modules needs a --launch with a driver API "
		                   "(driver, driver-ex or mixed)");
	if (cfg->eval_every && cfg->pp > 1)
		return usage_error("--eval-every needs --pp 1 (a pipeline's forward-only schedule "
		                   "is not modelled)");
	if (cfg->recompute_layers && cfg->recompute == TT_RECOMPUTE_NONE)
		return usage_error("--recompute-layers needs --recompute full or selective");
	if (cfg->recompute_groups && cfg->recompute != TT_RECOMPUTE_FULL)
		return usage_error("--recompute-groups needs --recompute full");
	if (cfg->recompute_groups && cfg->recompute_layers)
		return usage_error("--recompute-groups and --recompute-layers are Megatron's two "
		                   "recompute methods: one at a time");
	if (cfg->recompute_groups && cfg->fsdp)
		return usage_error("--recompute-groups is not modelled with --fsdp");
	if (cfg->eval_iters && !cfg->eval_every)
		return usage_error("--eval-iters needs --eval-every");
	if (cfg->fsdp && cfg->grad_set_to_none)
		return usage_error("--grad-set-to-none does not go with --fsdp (FSDP keeps its "
		                   "own gradient shards)");
	if (cfg->cuda_graph == TT_CUDA_GRAPH_OPTIMIZER && cfg->grad_set_to_none)
		return usage_error("--cuda-graph optimizer needs the gradients where its capture "
		                   "found them: not with --grad-set-to-none");
	if (cfg->fsdp && cfg->ddp_bucket_kb)
		return usage_error("--fsdp and --ddp-buckets are two ways to reduce gradients: "
		                   "take one");
	return check_schedule(cfg);
}

int tt_parse_args(int argc, char **argv, struct tt_config *cfg)
{
	int opt, value, index = 0;

	set_defaults(cfg);
	opterr = 0;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", long_options, &index)) != -1) {
		int *positive = NULL;

		switch (opt) {
		case OPT_NPROC:
			positive = &cfg->nproc;
			break;
		case OPT_PP:
			positive = &cfg->pp;
			break;
		case OPT_TP:
			positive = &cfg->tp;
			break;
		case OPT_DP:
			positive = &cfg->dp;
			break;
		case OPT_LAYERS:
			positive = &cfg->layers;
			break;
		case OPT_MICROBATCHES:
			positive = &cfg->microbatches;
			break;
		case OPT_STEPS:
			positive = &cfg->steps;
			break;
		case OPT_SEQ:
			positive = &cfg->real.seq;
			break;
		case OPT_BATCH:
			positive = &cfg->real.batch;
			break;
		case OPT_VIRTUAL_HIDDEN:
			positive = &cfg->virt.hidden;
			break;
		case OPT_VIRTUAL_HEADS:
			positive = &cfg->virt.heads;
			break;
		case OPT_VIRTUAL_SEQ:
			positive = &cfg->virt.seq;
			break;
		case OPT_VIRTUAL_BATCH:
			positive = &cfg->virt.batch;
			break;
		case OPT_SEED:
			positive = &value;
			break;
		case OPT_VIRTUAL_STAGES:
			positive = &cfg->virtual_stages;
			break;
		case OPT_DDP_BUCKETS:
			positive = &cfg->ddp_bucket_kb;
			break;
		case OPT_FORK_WORKER_AFTER:
			positive = &cfg->fork_worker_after;
			break;
		case OPT_SYNC_EVERY:
			positive = &cfg->sync_every;
			break;
		case OPT_EVAL_EVERY:
			positive = &cfg->eval_every;
			break;
		case OPT_EVAL_ITERS:
			positive = &cfg->eval_iters;
			break;
		case OPT_RECOMPUTE_LAYERS:
			positive = &cfg->recompute_layers;
			break;
		case OPT_RECOMPUTE_GROUPS:
			positive = &cfg->recompute_groups;
			break;
		case OPT_KERNEL_MODULES:
			positive = &cfg->kernel_modules;
			break;
		case OPT_RECOMPUTE:
			value = lookup_choice("recompute", recompute_names,
			                      ARRAY_SIZE(recompute_names), optarg);
			if (value < 0)
				return 2;
			cfg->recompute = (enum tt_recompute)value;
			continue;
		case OPT_SCHEDULE:
			value = lookup_choice("schedule", schedule_names,
			                      ARRAY_SIZE(schedule_names), optarg);
			if (value < 0)
				return 2;
			cfg->schedule = (enum tt_schedule)value;
			continue;
		case OPT_CUDA_GRAPH:
			value = lookup_choice("cuda-graph", cuda_graph_names,
			                      ARRAY_SIZE(cuda_graph_names), optarg);
			if (value < 0)
				return 2;
			cfg->cuda_graph = (enum tt_cuda_graph)value;
			continue;
		case OPT_COMPUTE_STREAM:
			value = lookup_choice("compute-stream", compute_stream_names,
			                      ARRAY_SIZE(compute_stream_names), optarg);
			if (value < 0)
				return 2;
			cfg->compute_stream = (enum tt_compute_stream)value;
			continue;
		case OPT_LAUNCH:
			value = lookup_choice("launch", launch_mode_names,
			                      ARRAY_SIZE(launch_mode_names), optarg);
			if (value < 0)
				return 2;
			cfg->launch = (enum tt_launch_mode)value;
			continue;
		case OPT_RETAIN_POOL:
			cfg->retain_pool = true;
			continue;
		case OPT_VIRTUAL_COPIES:
			cfg->virtual_copies = true;
			continue;
		case OPT_LAZY_OPTIMIZER:
			cfg->lazy_optimizer = true;
			continue;
		case OPT_FSDP:
			cfg->fsdp = true;
			continue;
		case OPT_FUSED_QKV:
			cfg->fused_qkv = true;
			continue;
		case OPT_GRAD_SET_TO_NONE:
			cfg->grad_set_to_none = true;
			continue;
		case OPT_DETERMINISTIC_FILL:
			cfg->deterministic_fill = true;
			continue;
		case OPT_VIRTUAL_MODEL:
			value = -1;
			for (size_t i = 0; i < sizeof(virtual_models) / sizeof(virtual_models[0]);
			     i++)
				if (!strcmp(virtual_models[i].name, optarg))
					value = (int)i;
			if (value < 0)
				return usage_error(
				        "unknown --virtual-model '%s' (gpt-1.3b|gpt-7b|gpt-22b)",
				        optarg);
			cfg->virt = virtual_models[value].dims;
			cfg->virtual_name = virtual_models[value].name;
			continue;
		case OPT_NO_HAZARD:
			value = lookup(hazard_names, TT_HAZARD_COUNT, optarg);
			if (value < 0)
				return usage_error("unknown hazard '%s' (see --help)", optarg);
			cfg->hazard[value] = false;
			continue;
		case OPT_REPORT_SAVED:
			cfg->report_saved = true;
			continue;
		case OPT_GRAD_SCALER:
			if (parse_steps(optarg, &cfg->grad_scaler_overflows))
				return usage_error(
				        "--grad-scaler '%s' is not a comma-separated list of "
				        "steps from 0 to 63",
				        optarg);
			cfg->grad_scaler = true;
			continue;
		case OPT_HELP:
			usage(stdout);
			return 1;
		default:
			return usage_error("unknown or incomplete option '%s'", argv[optind - 1]);
		}
		if ((*positive = parse_positive(optarg)) < 0)
			return usage_error("--%s '%s' is not a positive integer",
			                   long_options[index].name, optarg);
		if (opt == OPT_SEED)
			cfg->seed = (uint64_t)value;
		else if (opt >= OPT_VIRTUAL_HIDDEN && opt <= OPT_VIRTUAL_BATCH)
			cfg->virtual_name = "custom";
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (!cfg->nproc)
		cfg->nproc = cfg->pp * cfg->tp * cfg->dp;
	int err = check_layout(cfg);
	if (!err && cfg->eval_every && !cfg->eval_iters)
		cfg->eval_iters = 2;
	return err;
}
