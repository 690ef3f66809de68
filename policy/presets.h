/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Named hardware and model presets (presets.def): GPUs, clusters, model families and
 * models, as constant tables and lookups by name. Pure data: no state, safe from any thread.
 */
#ifndef LYNX_POLICY_PRESETS_H
#define LYNX_POLICY_PRESETS_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

struct lynx_gpu {
	const char *name;
	double peak_flops; /* dense bf16 tensor-core FLOP/s */
	uint64_t mem_bytes;
	double mem_bw;   /* HBM bytes/s */
	double gemm_eff; /* sustained share of peak_flops in GEMMs */
	double mem_eff;  /* sustained share of mem_bw in element-wise kernels */
};

/* One kind of link, as NCCL sees it: bus bandwidth per GPU and per-collective latency. */
struct lynx_link {
	double busbw; /* bytes/s */
	double latency_s;
};

/*
 * How compute and communication slow each other down where they overlap (NCCL's kernels take
 * SMs and memory bandwidth): a kernel that runs while a collective or a pipeline transfer is
 * in flight progresses `compute` times slower, and the transfer `comm` times slower, for as
 * long as both run. 1 (or 0, unset): no contention. problem.h's lynx_overlap() applies it.
 */
struct lynx_interference {
	double compute;
	double comm;
};

struct lynx_cluster {
	const char *name;
	const struct lynx_gpu *gpu;
	uint32_t gpus_per_node;
	struct lynx_link intra; /* within a node (NVLink or PCIe) */
	struct lynx_link inter; /* across nodes, per GPU (its NIC) */
	struct lynx_link host;  /* to pinned host memory, per direction and GPU (copy engines) */
	struct lynx_interference interference;
};

/* A GPT shape: the model's part of a struct lynx_model_desc. */
/* A model family: the layer choices its models share. */
struct lynx_family {
	const char *name;
	struct lynx_layer_arch arch; /* ffn and kv_heads 0: each model sets its own */
};

/* A model's shape: the model's part of a struct lynx_model_desc. */
struct lynx_model_preset {
	const char *name;
	const struct lynx_family *family;
	uint32_t layers, hidden, heads, kv_heads, ffn, seq, vocab;
	bool in_sweep; /* in the Lynx paper's 1.3B-23B range */
};

enum lynx_gpu_id {
#define LYNX_GPU(id, ...) LYNX_GPU_##id,
#include "presets.def"
	LYNX_GPU_COUNT
};

enum lynx_cluster_id {
#define LYNX_CLUSTER(id, ...) LYNX_CLUSTER_##id,
#include "presets.def"
	LYNX_CLUSTER_COUNT
};

enum lynx_family_id {
#define LYNX_FAMILY(id, ...) LYNX_FAMILY_##id,
#include "presets.def"
	LYNX_FAMILY_COUNT
};

enum lynx_model_preset_id {
#define LYNX_MODEL_PRESET(id, ...) LYNX_PRESET_##id,
#include "presets.def"
	LYNX_MODEL_PRESET_COUNT
};

extern const struct lynx_gpu lynx_preset_gpus[LYNX_GPU_COUNT];
extern const struct lynx_cluster lynx_preset_clusters[LYNX_CLUSTER_COUNT];
extern const struct lynx_family lynx_preset_families[LYNX_FAMILY_COUNT];
extern const struct lynx_model_preset lynx_preset_models[LYNX_MODEL_PRESET_COUNT];

/* One allocation's eviction and restoration by the VMM calls, host seconds (presets.def's
 * LYNX_VMM). */
struct lynx_vmm_cost {
	double evict_s;        /* unmap + release */
	double restore_s;      /* create + map + set access, the device idle */
	double busy_restore_s; /* the same while a kernel runs on another stream; 0: unknown */
};

/*
 * The measured cost for an allocation of `bytes` on gpu: linear in bytes between the two
 * measured sizes around it, the nearest measurement beyond them. Returns false (and leaves
 * out alone) when gpu has no measurement.
 */
bool lynx_preset_vmm_cost(const struct lynx_gpu *gpu, uint64_t bytes, struct lynx_vmm_cost *out);

/* The preset called name (exact, case-sensitive), or NULL. */
const struct lynx_gpu *lynx_preset_find_gpu(const char *name);
const struct lynx_cluster *lynx_preset_find_cluster(const char *name);
const struct lynx_model_preset *lynx_preset_find_model(const char *name);

/*
 * Sets m's shape (L, h, a, s, v), its family's layer choices with the model's k and f, and its
 * run settings to the smallest job: b = B = 1, t = p = d = 1, no sequence parallelism.
 * Callers then set the parallelism they want.
 */
void lynx_preset_fill_model(const struct lynx_model_preset *model, struct lynx_model_desc *m);

#endif /* LYNX_POLICY_PRESETS_H */
