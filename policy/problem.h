/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The planning problem: everything a planner decides over and the checker replays, per
 * pipeline stage. It is built from a model description (presets and cost.c: problem.c) or
 * from recorded profiles (from_profile.c); both fill the same structs, so planners and the
 * checker never see where the numbers came from. All times are seconds on one rank, all bytes on
 * one rank.
 *
 * What one stage runs. A stage holds `layers` identical transformer layers (the layer
 * description is shared by all stages), the embedding on the first stage and the head and
 * loss on the last. Under 1F1B it runs `warmup` forwards, then alternates one forward and one
 * backward, then runs the remaining backwards; it holds at most `inflight` micro-batches'
 * activations, min(p - s, m). With `virtual_stages` v > 1 (from a model only), Megatron's
 * interleaved 1F1B: the stage's layers are v model chunks of layers/v, chunk k of stage s
 * being global chunk k·p + s (the embedding in chunk 0, the head in chunk v - 1); a pass is one
 * micro-batch through one chunk, and the stage runs `chunk_warmup` forward passes, then
 * alternates, then runs the remaining backward passes, in Megatron's order
 * (lynx_problem_action()). A pass waits for the same micro-batch's pass of that chunk on the
 * stage before (forward) or after (backward); a stage's first chunk after the first waits
 * for the last stage's previous chunk, and so on round the ring, so the first stage also
 * receives activations and the last stage gradients.
 *
 * A layer is a sequence of ops. The forward of op i first waits `wait_fwd_s` for a
 * collective (Megatron's tensor-parallel all-reduce, or SP's all-gather/reduce-scatter), then
 * computes for `fwd_s`. The backward runs the ops in reverse order: op i computes for
 * `bwd_s`, then the stream waits `wait_bwd_s` for the part of its collective that the
 * weight-gradient GEMM does not hide.
 *
 * Activation groups. Each group of a layer is produced by the forward of op `producer`
 * (-1: it is the layer's input, present when the layer starts), read by the backward of op
 * `consumer` and freed after it. A dropped group is freed at the end of its layer's forward.
 * Rebuilding a set of groups reruns the union of their `ops` (each op's `rerun_s`: built from
 * a model, its forward with the collective before it, as Megatron's recompute reruns it;
 * from profiles, its kernels only, as Lynx's executor replays a producer run and never a
 * collective) from their `deps`, which must be resident; a group
 * without ops (the layer input) cannot be rebuilt inside the layer.
 *
 * Windows: the places where the compute stream idles, one entry per place in a stage's
 * micro-batch (not per occurrence): TP_FWD and TP_BWD at an op of a layer, PP_RECV_FWD before
 * each forward (waiting for the previous stage's activations), PP_RECV_BWD before each
 * backward (waiting for the next stage's gradient), DP_GRAD after the last backward.
 * `capacity_s` is the idle time of one occurrence: exact for TP windows, the steady-state
 * transfer time for PP windows (warm-up and cool-down bubbles are longer; the checker measures
 * each occurrence), the gradient reduction for DP_GRAD. A group of layer l and micro-batch j
 * that a plan rebuilds in window w is rebuilt in the latest occurrence of w that comes after
 * the group was dropped (the end of layer l's forward of j) and after the stage's previous
 * backward, and before the group's consumer in the backward of j. When there is none (a
 * TP_FWD window during the cool-down, when no forward runs between two backwards; DP_GRAD
 * always), it is rebuilt on demand. A rebuild in a window overlaps the transfer the stream
 * waits for (a TP collective wholly; a PP window's transfer, the last `capacity_s` of the wait),
 * and the two slow each other by the problem's `interference` (lynx_overlap()): with none, a
 * rebuild costs nothing while the window's idle time lasts and what does not fit delays the
 * compute stream; with a compute slowdown c, only idle / c of rebuild fits.
 *
 * Host link: OFFLOAD decisions copy a group to pinned host memory after its producer and
 * back before its consumer, on the copy engines (one per direction), over `d2h` and `h2d`:
 * a copy of B bytes takes latency_s + B / busbw. busbw 0: no host link (a problem built
 * from profiles of which one or more measured none); the checker then refuses OFFLOAD.
 *
 * Ownership: lynx_problem_from_model() and lynx_problem_from_profile() allocate the stages
 * and their windows; lynx_problem_free() releases them. A built problem is read-only: any
 * number of threads may read it.
 */
#ifndef LYNX_POLICY_PROBLEM_H
#define LYNX_POLICY_PROBLEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "presets.h"

struct lynx_profile; /* profiler/profile.h */

/* The masks over ops and groups are 32-bit. */
#define LYNX_PROBLEM_MAX_OPS 32
#define LYNX_PROBLEM_MAX_GROUPS 32
#define LYNX_PROBLEM_NAME_MAX 32

/* Where the compute stream idles: X(id, name). */
#define LYNX_WINDOW_KIND_LIST(X)      \
	X(TP_FWD, "tp_fwd")           \
	X(TP_BWD, "tp_bwd")           \
	X(PP_RECV_FWD, "pp_recv_fwd") \
	X(PP_RECV_BWD, "pp_recv_bwd") \
	X(DP_GRAD, "dp_grad")

enum lynx_window_kind {
#define LYNX_WINDOW_KIND_ENUM(id, name) LYNX_WINDOW_##id,
	LYNX_WINDOW_KIND_LIST(LYNX_WINDOW_KIND_ENUM)
#undef LYNX_WINDOW_KIND_ENUM
	        LYNX_WINDOW_KIND_COUNT
};

struct lynx_window {
	enum lynx_window_kind kind;
	int32_t layer; /* stage-local layer of a TP window; -1 for the others */
	int32_t op;    /* the op it precedes (TP_FWD) or follows (TP_BWD); -1 for the others */
	double capacity_s;
};

struct lynx_problem_op {
	char name[LYNX_PROBLEM_NAME_MAX];
	double fwd_s, bwd_s;
	/* Idle before the op's forward: a TP_FWD window when > 0 (from a profile, a window
	 * wherever a collective was seen, at 0 when its idle time was not measured). */
	double wait_fwd_s;
	double wait_bwd_s; /* idle after the op's backward: a TP_BWD window as wait_fwd_s */
	double rerun_s;    /* the op again: fwd_s + wait_fwd_s from a model, fwd_s from profiles */
};

struct lynx_problem_group {
	char name[LYNX_PROBLEM_NAME_MAX];
	uint64_t bytes;     /* per layer and micro-batch */
	uint32_t ops;       /* ops (bit i: op i) a rebuild reruns; 0: the layer's input */
	uint32_t deps;      /* groups (bit g) that must be resident to rebuild it */
	int32_t producer;   /* op after whose forward it exists; -1: the layer's input */
	int32_t consumer;   /* op after whose backward it is freed */
	double recompute_s; /* rebuilding it alone: the sum of its ops' rerun_s */
	/*
	 * From profiles: its producer run reads memory that is freed before its consumer (a
	 * temporary), so Lynx's executor cannot replay it (its examination would refuse such
	 * a run) and copies the group to host memory instead. With a host link the group keeps
	 * its ops, and a plan that rebuilds it is lowered to OFFLOAD (lynx_plan_lower()), which
	 * the checker then prices; without one its ops are 0: a plan can only keep it. False
	 * from models.
	 */
	bool reads_freed;
	/* From profiles: its rebuild replays the writer of a temporary its producer run reads
	 * first (a chain, profile.h's chained): the writers' ops are among its ops (those the
	 * profile places in the layer). Planners may weigh the plan that offloads such groups
	 * instead (mixed.c). False from models. */
	bool chained;
	/* From profiles: the scratch a rebuild of it takes while it runs, beside what it
	 * rebuilds: the workspaces its producer run names (Lynx's executor replays a kernel
	 * that writes a workspace into scratch of its size; one replay at a time), or the
	 * profile's largest workspace where the profile does not say. 0 from models (Megatron
	 * reruns in place). */
	uint64_t scratch_bytes;
};

/* Saved buffers of one layer that a problem built from profiles maps onto groups. */
#define LYNX_PROBLEM_MAX_BUFFERS 256
/* Tensor-parallel collectives of one layer's forward or backward that such a problem maps
 * onto ops. */
#define LYNX_PROBLEM_MAX_COLLECTIVES 64

/* One transformer layer; every stage's layers are this one. */
struct lynx_problem_layer {
	uint32_t n_ops, n_groups;
	struct lynx_problem_op ops[LYNX_PROBLEM_MAX_OPS];          /* in forward order */
	struct lynx_problem_group groups[LYNX_PROBLEM_MAX_GROUPS]; /* deps before dependents */
	double fwd_s, bwd_s; /* sums of fwd_s + wait_fwd_s and of bwd_s + wait_bwd_s */
	/*
	 * From profiles: which group each saved buffer became, so that a runtime can apply a
	 * plan's decision for group g to the buffers it stands for. Buffer k is the k-th saved
	 * buffer of a layer in allocation order (the k-th of the layer's profile groups, those
	 * of 0 bytes included). The groups were cut from one layer; since every layer runs the
	 * same kernels, the k-th buffer of any stage's layer (not the embedding's or the head's)
	 * is taken to be the same tensor. n_buffers is that layer's buffer count, at most
	 * LYNX_PROBLEM_MAX_BUFFERS (later buffers are not mapped: treat them as kept);
	 * buffer_group[k] is the group (an index into groups) of buffer k, or -1 for a buffer of 0
	 * bytes, which no group holds, and for every k from n_buffers on. From a model: n_buffers
	 * 0, buffer_group unused (a model has groups, not buffers).
	 */
	uint32_t n_buffers;
	int16_t buffer_group[LYNX_PROBLEM_MAX_BUFFERS];
	/*
	 * From profiles: which op's TP window each tensor-parallel collective of a layer is, so
	 * that a runtime finds the calls where a plan's TP window (kind, layer, op) happens.
	 * Collective k of a layer's forward segment (the profile window's ordinal, counted
	 * among the segment's collectives) is the TP_FWD window of op tp_fwd_op[k]; collective
	 * k of its backward segment, the TP_BWD window of op tp_bwd_op[k]. Like the buffers,
	 * they come from one layer and micro-batch and hold for every stage layer. n_tp_fwd and
	 * n_tp_bwd are one more than the largest ordinal seen, at most
	 * LYNX_PROBLEM_MAX_COLLECTIVES (later collectives are not mapped); entries from there
	 * on, and any ordinal no window had, are -1. Several collectives may share an op. From
	 * a model: n_tp_fwd and n_tp_bwd 0, every entry -1.
	 */
	uint32_t n_tp_fwd, n_tp_bwd;
	int8_t tp_fwd_op[LYNX_PROBLEM_MAX_COLLECTIVES];
	int8_t tp_bwd_op[LYNX_PROBLEM_MAX_COLLECTIVES];
};

/*
 * The embedding or the head: never recomputed; present on the first or the last stage. From
 * profiles, the embedding's part also holds the layers that the trainer recomputes itself at
 * the start of a stage (Megatron's block recompute), on any stage: like the embedding, they
 * run before the planned layers in the forward, after them in the backward, and Lynx leaves
 * them as they are.
 */
struct lynx_problem_part {
	bool present;
	double fwd_s, bwd_s;
	uint64_t act_bytes; /* held from its forward to its backward, per micro-batch */
	uint64_t non_saved_fwd, non_saved_bwd; /* as its stage's, when non_saved_known */
};

struct lynx_problem_stage {
	uint32_t index;
	uint32_t first_layer, layers; /* global index of the first; how many */
	uint32_t inflight;            /* micro-batches held at the peak: min(p - s, m) */
	uint32_t warmup;              /* forwards before the first backward: min(p - s - 1, m) */
	/* Interleaved (virtual_stages > 1): forward passes before the first backward
	 * (lynx_model_chunk_warmup()), and the passes in flight at the peak,
	 * min(chunk_warmup + 1, m·v); unused otherwise. */
	uint32_t chunk_warmup, passes_inflight;
	/* From profiles: the index in the stage's profile's layers of its first layer (1 after
	 * an embedding layer, else 0), so stage layer j is profile layer profile_first_layer +
	 * j; 0 from a model. */
	uint32_t profile_first_layer;
	struct lynx_problem_part embedding, head;
	uint64_t params;       /* parameters on one rank */
	uint64_t static_bytes; /* weights, gradients and optimizer states (problem.c) */
	/* From profiles that say where their non-saved bytes were live (profile.h's
	 * non_saved_known): the bytes besides saved activations while each op's forward runs
	 * in the stage's layers (the most over its layers and kernels), in the backward (the
	 * backward's most at every op: when a trainer frees a saved buffer after its last use
	 * is not known), and outside the layers, each with the activations below the
	 * granule, as static_bytes, which is their most. The checker holds a plan's saved
	 * bytes against the moment's, against static_bytes everywhere when not known. False
	 * from models. */
	bool non_saved_known;
	uint64_t non_saved_fwd[LYNX_PROBLEM_MAX_OPS], non_saved_bwd[LYNX_PROBLEM_MAX_OPS];
	uint64_t non_saved_outside;
	double recv_fwd_s;    /* activations from stage s - 1; 0 on the first stage */
	double recv_bwd_s;    /* gradients from stage s + 1; 0 on the last stage */
	double grad_reduce_s; /* after the last backward: data-parallel and embedding reductions */
	double optimizer_s;
	uint32_t n_windows;
	struct lynx_window *windows; /* TP windows by layer and op, then PP, then DP */
	uint64_t budget_bytes;       /* this stage's own; 0: the problem's (per rank) */
};

struct lynx_problem {
	struct lynx_model_desc model;
	const struct lynx_cluster *cluster; /* NULL when built from a profile */
	uint32_t micro_batches;             /* m, per pipeline and iteration */
	uint64_t budget_bytes;              /* per rank */
	struct lynx_link d2h, h2d;          /* per rank, to and from pinned host memory */
	/* When OFFLOAD decisions come back (the host link paragraph above): false, Kuaishou's
	 * prefetch, one backward ahead (problems from models); true, as Lynx's executor
	 * restores them (problems from profiles): a layer's at the start of the backward of
	 * the layer above it (checker.h). */
	bool restore_by_layer;
	/* How a rebuild and the transfer it overlaps slow each other: the cluster's (from a
	 * model), the options' or LYNX_INTERFERENCE_DEFAULT (from profiles). */
	struct lynx_interference interference;
	uint32_t gpus;      /* t · p · d */
	double peak_flops;  /* per GPU, for MFU */
	double model_flops; /* per iteration over all GPUs, for MFU */
	struct lynx_problem_layer layer;
	uint32_t n_stages;
	struct lynx_problem_stage *stages;
	/* v: model chunks per stage under interleaved 1F1B (the header comment); 0 or 1: plain
	 * 1F1B, as every problem from profiles (an interleaved job's profile plans each chunk's
	 * pass as a micro-batch). */
	uint32_t virtual_stages;
	double search_seconds; /* from the options: a planner's search limit; 0: its own */
	/* From the options (lynx_problem_options): the offload planner's fixed α. */
	bool offload_share_set;
	uint32_t offload_share_bp;
	/* From the options: a searching planner (opt, checkmate) searches this stage only and
	 * keeps its start (HEU's plan) on the others. */
	bool search_one_stage;
	uint32_t searched_stage;
	/* From the options (profiles only): saved buffers below it are no groups; 0: none. A
	 * plan names the groups of a problem with its granule (plan.h's "granule_bytes"). */
	uint64_t granule_bytes;
};

struct lynx_problem_options {
	uint64_t budget_bytes;      /* 0: the GPU's memory (from a profile: its peak) */
	bool distributed_optimizer; /* Megatron's --use-distributed-optimizer */
	/* Layers of each of the p stages (an uneven split, as policy/partition.h finds); NULL:
	 * L / p each. Read during lynx_problem_from_model() only. */
	const uint32_t *stage_layers;
	/* Seconds a searching planner (opt, checkmate) may spend on its whole search, its
	 * set-up included; 0: its own default. */
	double search_seconds;
	/* A searching planner searches stage searched_stage only (a rank plans its own stage:
	 * no rank spends time on the others'). */
	bool search_one_stage;
	uint32_t searched_stage;
	/* lynx_problem_from_profile(): what to call each profile in messages (file paths),
	 * n_ranks entries; NULL: "profile <index>". */
	const char *const *profile_names;
	/* lynx_problem_from_profile(), 1 to 100: each stage's budget is this share of its own
	 * profile's peak (budget_bytes is then the largest of them); 0: budget_bytes. */
	uint32_t budget_percent;
	/* lynx_problem_from_profile() with one profile: plan its stage alone, as a pipeline of
	 * one (a rank that cannot see the others' profiles). Its memory is modelled as
	 * measured (the micro-batches it holds at once); its pipeline transfers are not used
	 * as windows, since the other stages' timing is unknown. */
	bool solo;
	/* lynx_problem_from_profile(): saved buffers smaller than this are no group. Lynx's
	 * executor evicts whole VMM granules and keeps a smaller buffer, which would take a
	 * whole one, so such buffers count as memory no plan changes (in static_bytes, for the
	 * micro-batches a stage holds at once), unless together they are worth a pack
	 * (lynx_problem_pack_worth(), as the executor packs them): then a layer's buffers below
	 * the granule are one group. 0: every buffer of bytes > 0 is a group. */
	uint64_t granule_bytes;
	/* The executor keeps every buffer below the granule (LYNX_PACK=off): no packs. */
	bool unpacked;
	/* lynx_whatif_plan() without a budget (budget_bytes and budget_percent 0): plan at the
	 * smallest budget whose plan is predicted at most this many hundredths of a percent
	 * slower than keeping everything (LYNX_MAX_SLOWDOWN); 0: at the measured peak. */
	uint32_t max_slowdown_bp;
	/* Contention between rebuilds and communication; compute 0: the cluster's (from a
	 * model) or LYNX_INTERFERENCE_DEFAULT (from profiles, which do not measure it). */
	struct lynx_interference interference;
	/* The offload planner offloads offload_share_bp hundredths of a percent of each stage's
	 * activation bytes that Kuaishou's rules let offload (their α, at most 10000) instead of
	 * searching the least share that fits, when offload_share_set. */
	bool offload_share_set;
	uint32_t offload_share_bp;
};

/* The presets' figure (presets.def: Lee et al.'s average compute slowdown; communication not
 * charged), for problems built from profiles when the options give none. */
#define LYNX_INTERFERENCE_DEFAULT ((struct lynx_interference){.compute = 1.19, .comm = 1.0})

/* The largest slowdown either figure may give; at most 2 each keeps the window's delay convex in
 * its work (what OPT's linear rows need: lynx_window_delay()). */
#define LYNX_INTERFERENCE_MAX 2.0

/*
 * Builds the problem of job m on cluster c into p. opt may be NULL (defaults). Returns 0;
 * -EINVAL when m fails lynx_model_validate() (lynx_model_validate_split() with
 * opt->stage_layers) or the budget is below some stage's static
 * memory, with one sentence in why (truncated to len); -ENOMEM. On failure p holds nothing to
 * free.
 */
int lynx_problem_from_model(const struct lynx_model_desc *m, const struct lynx_cluster *c,
                            const struct lynx_problem_options *opt, struct lynx_problem *p,
                            char *why, size_t len);

/*
 * Builds the problem from recorded profiles (profiler/profile.h), one per pipeline stage, into
 * p: the same structs as lynx_problem_from_model(), so planners and the checker do not care
 * where the numbers came from. The mapping:
 *
 * - Stages. A rank's position is its warm-up: stage s of p runs min(p - s - 1, m) forwards
 *   before its first backward, so the profiles with the most warm-up forwards are stage 0,
 *   p is that number plus one, and inflight = min(w + 1, m) for w warm-up forwards. Every
 *   stage needs a profile; profiles with the same warm-up are ranks of one stage (tensor or
 *   data parallel), of which the slowest (largest sum of layer forward and backward times)
 *   stands for the stage. Refused: m < p with more than one stage running all m forwards
 *   first (their order cannot be told), a first stage that receives activations (pp_recv_fwd)
 *   or a last stage that receives gradients (pp_recv_bwd), which is what a pipeline's
 *   profiles without "warmup_forwards" look like; profiles recorded under full recompute
 *   (rerun) or with different micro-batch counts.
 * - Layers. A stage's layers are its profile's layers, all with the same kernel counts (those
 *   of the middle layer of the profile with the most layers). The first layer of stage 0 and
 *   the last of stage p - 1 may differ: they are the embedding and the head (forward and
 *   backward time, saved_bytes held per micro-batch); without such a layer they are absent.
 *   The one layer description is the slowest stage's layer with the most saved group bytes.
 * - Ops. One per forward kernel, in launch order. A layer of more than LYNX_PROBLEM_MAX_OPS
 *   kernels is cut into runs of consecutive kernels: first at the tensor-parallel collectives
 *   (a tp_fwd window's `kernel`), then after the kernels that produce a group, then the longest
 *   runs are halved until there are LYNX_PROBLEM_MAX_OPS. An op's forward time is the sum of
 *   its kernels' device times when the profile has them (launch gaps not counted; each
 *   kernel's the median over the profile's layers that run the same kernels), else the
 *   layer's forward time less its measured tp_fwd idle, spread evenly over the kernels. The
 *   backward's kernels map onto the forward's in reverse order, proportionally (the first
 *   backward kernel to the last forward kernel, the last to the first); an op's backward time
 *   is the sum of the backward kernels mapped to it, timed or spread as the forward.
 * - Groups. The saved buffers of that layer, with bytes > 0. A group exists after the op of
 *   its producer kernel (-1: the layer's input) and is freed after the backward of the op
 *   that its last_consumer backward kernel maps to (-1, none seen: op 0, the end of the
 *   layer's backward). Rebuilding a group produced by op o reruns the ops after the previous
 *   producing op up to o, and needs the groups its producer run reads (profile.h's reads),
 *   or, for a profile that does not say, every group produced before o. A run that reads a
 *   temporary (reads_freed) is marked so (the group above); without a host link it cannot be
 *   rebuilt (ops 0). A group with no group before it cannot be rebuilt either; such groups
 *   are held at least until the last rebuild that needs them. Over LYNX_PROBLEM_MAX_GROUPS,
 *   groups with the same producer and consumer ops merge, then all with the same producer (freed
 *   after the later consumer), then the two adjacent producers with the fewest bytes. The
 *   layer's buffer_group says which group each buffer ended up in. With a granule, the
 *   buffers below it are one group when they are worth a pack (the options' granule_bytes):
 *   it exists after the last of their producers, is freed after the last of their consumers,
 *   and is rebuilt by rerunning each one's producer run; otherwise they are no group.
 * - Windows. A collective's idle time is the least of its measured `idle` (any source but
 *   "unknown") over the layers and micro-batches of that profile, the transfer itself, which
 *   every peer measures alike; unmeasured, 0. TP_FWD
 *   windows are before the op of the tp_fwd window's kernel (a collective after the last
 *   kernel: before the last op); TP_BWD windows follow the op of the backward kernel before
 *   the collective (before the first one: the op it maps to). The layer's tp_fwd_op and
 *   tp_bwd_op say which op each collective's window is. Every stage layer gets the
 *   layer's TP windows, listed even at capacity 0, so a plan can name them. PP_RECV_FWD
 *   (s > 0) and PP_RECV_BWD (s < p - 1), when the stage's profile has such calls, take the
 *   least measured idle of their occurrences as the steady-state transfer; DP_GRAD the sum of
 *   the dp_grad calls' idle. The optimizer step is not separated in a profile: optimizer_s 0.
 * - Memory. A stage's static memory is what its profile had live at the peak besides saved
 *   activations (weights, workspace, temporaries and other): the plan cannot change it. The
 *   budget is opt->budget_bytes, or 0: the largest profile peak, where keeping everything fits;
 *   pass what the job may use, e.g. the GPU's memory less a few GiB for the CUDA context,
 *   NCCL and allocator fragmentation, or the peak minus what should be freed.
 * - Host link. When every profile carries a measured host_link, d2h and h2d are the least
 *   d2h and h2d rates over all the profiles given (not only each stage's representative:
 *   every rank offloads over its own link, and the slowest paces the plan), each with the
 *   largest latency. When any profile has none, both are 0 (busbw 0), so the checker
 *   refuses OFFLOAD and the offload planner offloads nothing. The rates were measured on an
 *   idle link: an upper bound of what copies get while NCCL traffic shares it.
 * - Solo (opt->solo, one profile): the stage alone, without pipeline windows; every time
 *   and rate rounded to 4 points per doubling, so that peers planning alone from their own
 *   noisy figures mostly reach one plan.
 * - The rest. cluster is NULL; model has pp and layers only; gpus is the profiles' world (0
 *   when unknown); peak_flops and model_flops are 0.
 *
 * opt may be NULL; its stage_layers must be NULL (a profile's split is the one it ran) and
 * distributed_optimizer is ignored (static memory is measured). Returns 0; -EINVAL with one
 * sentence in why (no profiles or layers, layers with different kernel counts, a group or
 * window beyond its layer's kernels, a missing stage, a budget below a stage's static
 * memory, ...); -ENOMEM. On failure p holds nothing to free. O(profiles x (layers + groups +
 * windows)) plus O(windows^2) per layer for the collectives' idle and O(kernels^2) to cut a
 * layer of more than LYNX_PROBLEM_MAX_OPS kernels: fine below 10^4 of each.
 */
int lynx_problem_from_profile(const struct lynx_profile *const *ranks, size_t n_ranks,
                              const struct lynx_problem_options *opt, struct lynx_problem *p,
                              char *why, size_t len);

/* Releases what the builders allocated; p may be zeroed or already freed. */
void lynx_problem_free(struct lynx_problem *p);

/* Stage s's memory budget: its own when it has one, else the problem's. */
static inline uint64_t lynx_problem_stage_budget(const struct lynx_problem *p, uint32_t s)
{
	return p->stages[s].budget_bytes ? p->stages[s].budget_bytes : p->budget_bytes;
}

/* v: model chunks per stage (virtual_stages, or 1). */
static inline uint32_t lynx_problem_chunks(const struct lynx_problem *p)
{
	return p->virtual_stages > 1 ? p->virtual_stages : 1;
}

/* How many micro-batches' kept activations stage s holds at its peak, counting a chunk pass
 * as 1/v of one: inflight, or passes_inflight / v interleaved. For estimates (HEU's). */
static inline double lynx_problem_held_micro_batches(const struct lynx_problem *p, uint32_t s)
{
	const uint32_t v = lynx_problem_chunks(p);

	return v > 1 ? (double)p->stages[s].passes_inflight / v : p->stages[s].inflight;
}

/* One pass of a stage's schedule: a micro-batch through one model chunk, forward or back. */
struct lynx_pass {
	uint32_t microbatch, chunk;
	bool forward;
};

/*
 * Pass a (0 <= a < 2·m·v) of stage s's schedule, the one every simulator follows: the warm-up
 * forwards, then one forward and one backward, then the remaining backwards. Interleaved,
 * forward pass k runs chunk (k mod p·v) / p and backward pass k chunk v - 1 - (k mod p·v) / p,
 * both of micro-batch (k / (p·v))·p + k mod p, as Megatron orders them.
 */
struct lynx_pass lynx_problem_pass(const struct lynx_problem *p, uint32_t s, uint32_t a);

/*
 * The pass that `pass` of stage s waits for (before its transfer): the same micro-batch's
 * forward of its chunk on s - 1, or of the chunk before on the last stage when s is the first;
 * its backward on s + 1, or of the chunk after on the first stage when s is the last. False
 * when it waits for none (the first chunk's forward on the first stage, the last chunk's
 * backward on the last).
 */
bool lynx_problem_pass_waits_for(const struct lynx_problem *p, uint32_t s,
                                 const struct lynx_pass *pass, uint32_t *from_stage,
                                 uint32_t *from_chunk);

/* Stage s's layers [*first, *end) that its model chunk k holds: layers/v each, the last chunk
 * the rest (without virtual stages, chunk 0 holds them all). */
static inline void lynx_problem_chunk_layers(const struct lynx_problem *p, uint32_t s, uint32_t k,
                                             uint32_t *first, uint32_t *end)
{
	const uint32_t v = lynx_problem_chunks(p), per = p->stages[s].layers / v;

	*first = k * per;
	*end = k == v - 1 ? p->stages[s].layers : *first + per;
}

/*
 * Packs (shim/pack.h). Lynx's executor evicts whole VMM granules; activations below one
 * that a (layer, micro-batch) evicts alike share granules, each at an offset aligned to
 * LYNX_PROBLEM_PACK_ALIGN. A set of them is worth a pack when the granules it takes are
 * at most twice its bytes: evicted it frees them all, resident it holds at most as much
 * again. The executor and the problem built from profiles apply this one rule.
 */
#define LYNX_PROBLEM_PACK_ALIGN 512u

static inline uint64_t lynx_problem_pack_aligned(uint64_t bytes)
{
	return (bytes + LYNX_PROBLEM_PACK_ALIGN - 1) & ~(uint64_t)(LYNX_PROBLEM_PACK_ALIGN - 1);
}

static inline bool lynx_problem_pack_worth(uint64_t aligned_bytes, uint64_t granule)
{
	return granule && aligned_bytes &&
	       (aligned_bytes + granule - 1) / granule * granule <= 2 * aligned_bytes;
}

const char *lynx_problem_window_kind_name(enum lynx_window_kind kind);

/* The kind called name, or LYNX_WINDOW_KIND_COUNT. */
enum lynx_window_kind lynx_problem_find_window_kind(const char *name);

/* The index of the stage's window (kind, layer, op), or -1. */
int lynx_problem_find_window(const struct lynx_problem_stage *st, enum lynx_window_kind kind,
                             int32_t layer, int32_t op);

/* The index of the layer's op or group called name, or -1. */
int lynx_problem_find_op(const struct lynx_problem_layer *l, const char *name);
int lynx_problem_find_group(const struct lynx_problem_layer *l, const char *name);

/*
 * Compute overlapping a transfer under interference f (NULL, or figures below 1: none). The
 * compute stream starts `work_s` seconds of kernels (their time alone) at time 0; a transfer of
 * `comm_s` seconds (alone) is in flight from comm_start_s >= 0 on. While both run, the kernels
 * progress f->compute times slower and the transfer f->comm times slower. Returns when the
 * kernels end; *comm_end_s: when the transfer ends. The checker's model of a window.
 */
double lynx_overlap(const struct lynx_interference *f, double work_s, double comm_start_s,
                    double comm_s, double *comm_end_s);

/*
 * Rebuilding `work_s` in a window whose `idle_s` is a transfer that the rebuild wholly
 * overlaps: how much later than idle_s the compute stream and the transfer are both done (0:
 * hidden). Without interference max(0, work_s - idle_s); with compute slowdown c and transfer
 * slowdown k, max(c (1 - 1/k) work_s, work_s - idle_s (1 - k + k / c)): convex in work_s for
 * c, k <= LYNX_INTERFERENCE_MAX, which the planners rely on (HEU sums it, OPT bounds it by its
 * two lines).
 */
double lynx_window_delay(const struct lynx_interference *f, double work_s, double idle_s);

/* The two lines of lynx_window_delay(): delay = max(0, work - cap_share · idle,
 * shared_slope · work). Without interference 1 and 0. */
void lynx_window_delay_lines(const struct lynx_interference *f, double *cap_share,
                             double *shared_slope);

/* The largest static memory over the stages. */
uint64_t lynx_problem_max_static_bytes(const struct lynx_problem *p);

#endif /* LYNX_POLICY_PROBLEM_H */
