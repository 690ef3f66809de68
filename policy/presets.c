/* SPDX-License-Identifier: Apache-2.0 */
/* The preset tables (presets.def) and their lookups by name. */
#include <string.h>

#include "presets.h"

const struct lynx_gpu lynx_preset_gpus[LYNX_GPU_COUNT] = {
#define LYNX_GPU(id, gpu_name, peak, mem, bw, g_eff, m_eff) \
	[LYNX_GPU_##id] = {                                 \
	        .name = gpu_name,                           \
	        .peak_flops = peak,                         \
	        .mem_bytes = mem,                           \
	        .mem_bw = bw,                               \
	        .gemm_eff = g_eff,                          \
	        .mem_eff = m_eff,                           \
	},
#include "presets.def"
};

const struct lynx_cluster lynx_preset_clusters[LYNX_CLUSTER_COUNT] = {
#define LYNX_CLUSTER(id, cluster_name, gpu_id, per_node, intra_bw, intra_l, inter_bw, inter_l, \
                     host_b, host_l, slow_compute, slow_comm)                                  \
	[LYNX_CLUSTER_##id] = {                                                                \
	        .name = cluster_name,                                                          \
	        .gpu = &lynx_preset_gpus[LYNX_GPU_##gpu_id],                                   \
	        .gpus_per_node = per_node,                                                     \
	        .intra = {.busbw = intra_bw, .latency_s = intra_l},                            \
	        .inter = {.busbw = inter_bw, .latency_s = inter_l},                            \
	        .host = {.busbw = host_b, .latency_s = host_l},                                \
	        .interference = {.compute = slow_compute, .comm = slow_comm},                  \
	},
#include "presets.def"
};

const struct lynx_family lynx_preset_families[LYNX_FAMILY_COUNT] = {
#define LYNX_FAMILY(id, family_name, family_mlp, family_norm, family_attention, family_position, \
                    family_no_bias, family_no_dropout, family_untied)                            \
	[LYNX_FAMILY_##id] = {                                                                   \
	        .name = family_name,                                                             \
	        .arch =                                                                          \
	                {                                                                        \
	                        .mlp = LYNX_MLP_##family_mlp,                                    \
	                        .norm = LYNX_NORM_##family_norm,                                 \
	                        .attention = LYNX_ATTENTION_##family_attention,                  \
	                        .position = LYNX_POSITION_##family_position,                     \
	                        .no_bias = family_no_bias,                                       \
	                        .no_dropout = family_no_dropout,                                 \
	                        .untied = family_untied,                                         \
	                },                                                                       \
	},
#include "presets.def"
};

const struct lynx_model_preset lynx_preset_models[LYNX_MODEL_PRESET_COUNT] = {
#define LYNX_MODEL_PRESET(id, model_name, family_id, l, h, a, k, f, s, v, sweep) \
	[LYNX_PRESET_##id] = {                                                   \
	        .name = model_name,                                              \
	        .family = &lynx_preset_families[LYNX_FAMILY_##family_id],        \
	        .layers = l,                                                     \
	        .hidden = h,                                                     \
	        .heads = a,                                                      \
	        .kv_heads = k,                                                   \
	        .ffn = f,                                                        \
	        .seq = s,                                                        \
	        .vocab = v,                                                      \
	        .in_sweep = sweep,                                               \
	},
#include "presets.def"
};

/* One measured size, as presets.def gives it. */
struct vmm_row {
	enum lynx_gpu_id gpu;
	uint64_t bytes;
	struct lynx_vmm_cost cost;
};

static const struct vmm_row vmm_rows[] = {
#define LYNX_VMM(gpu_id, size, create, map, set_access, unmap, release, busy) \
	{LYNX_GPU_##gpu_id, size, {unmap + release, create + map + set_access, busy}},
#include "presets.def"
};

static double between(double a, double b, double share)
{
	return a + (b - a) * share;
}

bool lynx_preset_vmm_cost(const struct lynx_gpu *gpu, uint64_t bytes, struct lynx_vmm_cost *out)
{
	const struct vmm_row *below = NULL, *above = NULL;

	for (size_t i = 0; i < sizeof(vmm_rows) / sizeof(vmm_rows[0]); i++) {
		const struct vmm_row *r = &vmm_rows[i];
		if (&lynx_preset_gpus[r->gpu] != gpu)
			continue;
		if (r->bytes <= bytes && (!below || r->bytes > below->bytes))
			below = r;
		if (r->bytes >= bytes && (!above || r->bytes < above->bytes))
			above = r;
	}
	if (!below && !above)
		return false;
	if (!below || !above || below == above) {
		*out = (below ? below : above)->cost;
		return true;
	}
	double share = (double)(bytes - below->bytes) / (double)(above->bytes - below->bytes);
	*out = (struct lynx_vmm_cost){
	        between(below->cost.evict_s, above->cost.evict_s, share),
	        between(below->cost.restore_s, above->cost.restore_s, share),
	        /* unknown at either end: unknown */
	        below->cost.busy_restore_s && above->cost.busy_restore_s
	                ? between(below->cost.busy_restore_s, above->cost.busy_restore_s, share)
	                : 0};
	return true;
}

const struct lynx_gpu *lynx_preset_find_gpu(const char *name)
{
	for (int i = 0; i < LYNX_GPU_COUNT; i++)
		if (!strcmp(lynx_preset_gpus[i].name, name))
			return &lynx_preset_gpus[i];
	return NULL;
}

const struct lynx_cluster *lynx_preset_find_cluster(const char *name)
{
	for (int i = 0; i < LYNX_CLUSTER_COUNT; i++)
		if (!strcmp(lynx_preset_clusters[i].name, name))
			return &lynx_preset_clusters[i];
	return NULL;
}

const struct lynx_model_preset *lynx_preset_find_model(const char *name)
{
	for (int i = 0; i < LYNX_MODEL_PRESET_COUNT; i++)
		if (!strcmp(lynx_preset_models[i].name, name))
			return &lynx_preset_models[i];
	return NULL;
}

void lynx_preset_fill_model(const struct lynx_model_preset *model, struct lynx_model_desc *m)
{
	*m = (struct lynx_model_desc){
	        .layers = model->layers,
	        .hidden = model->hidden,
	        .heads = model->heads,
	        .seq = model->seq,
	        .vocab = model->vocab,
	        .micro_batch = 1,
	        .global_batch = 1,
	        .tp = 1,
	        .pp = 1,
	        .dp = 1,
	        .sp = false,
	        .arch = model->family->arch,
	};
	m->arch.kv_heads = model->kv_heads;
	m->arch.ffn = model->ffn;
}
