/* SPDX-License-Identifier: Apache-2.0 */
/* policy/presets: the GPU, cluster and GPT tables are complete, sane and found by name. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "presets.h"

static void test_every_gpu_constant_is_positive_and_efficiencies_are_shares(void **state)
{
	for (int i = 0; i < LYNX_GPU_COUNT; i++) {
		const struct lynx_gpu *g = &lynx_preset_gpus[i];

		assert_non_null(g->name);
		assert_true(g->peak_flops > 100e12);
		/* "80 GB" parts report 79.6-80 GiB; the H200 140 GiB. */
		assert_true(g->mem_bytes >= 79ull << 30);
		assert_true(g->mem_bw > 1e12);
		assert_true(g->gemm_eff > 0 && g->gemm_eff <= 1);
		assert_true(g->mem_eff > 0 && g->mem_eff <= 1);
		assert_ptr_equal(lynx_preset_find_gpu(g->name), g);
	}
}

/* The H100's VMM costs are the measured ones at the measured sizes, in between linear,
 * beyond the nearest; a GPU never measured has none. */
static void test_vmm_costs_are_the_h100_measurements(void **state)
{
	const struct lynx_gpu *h100 = lynx_preset_find_gpu("h100-sxm");
	struct lynx_vmm_cost at2, at64, mid, tiny, huge, none = {-1, -1, -1};

	assert_true(lynx_preset_vmm_cost(h100, 2ull << 20, &at2));
	assert_true(fabs(at2.restore_s - 28.846e-6) < 1e-9);
	assert_true(fabs(at2.evict_s - 24.649e-6) < 1e-9);
	assert_true(lynx_preset_vmm_cost(h100, 64ull << 20, &at64));
	assert_true(at64.restore_s > at2.restore_s && at64.busy_restore_s > 20 * at64.restore_s);
	assert_true(lynx_preset_vmm_cost(h100, 33ull << 20, &mid));
	assert_true(fabs(mid.restore_s - (at2.restore_s + at64.restore_s) / 2) < 1e-9);
	assert_true(lynx_preset_vmm_cost(h100, 4096, &tiny));
	assert_true(tiny.restore_s == at2.restore_s);
	assert_true(lynx_preset_vmm_cost(h100, 8ull << 30, &huge));
	assert_true(huge.evict_s > 300e-6 && huge.busy_restore_s == 0); /* not measured */
	assert_false(lynx_preset_vmm_cost(lynx_preset_find_gpu("a100-80gb"), 2ull << 20, &none));
	assert_true(none.restore_s == -1);
	(void)state;
}

static void test_every_cluster_constant_is_positive_and_links_are_ordered(void **state)
{
	for (int i = 0; i < LYNX_CLUSTER_COUNT; i++) {
		const struct lynx_cluster *c = &lynx_preset_clusters[i];

		assert_non_null(c->gpu);
		assert_true(c->gpus_per_node >= 1);
		assert_true(c->intra.busbw > 0 && c->inter.busbw > 0);
		assert_true(c->intra.latency_s > 0 && c->inter.latency_s > 0);
		assert_true(c->host.busbw > 0 && c->host.latency_s > 0);
		/* The host link is one PCIe x16: no faster than the node's fabric. */
		assert_true(c->host.busbw <= c->intra.busbw);
		/* No cluster's network is faster than its node's fabric. */
		assert_true(c->inter.busbw <= c->intra.busbw);
		assert_ptr_equal(lynx_preset_find_cluster(c->name), c);
	}
}

/* The names the issue and `lynx sim --cluster` use. */
static void test_the_documented_names_exist(void **state)
{
	static const char *const clusters[] = {"a100-nvlink", "h100-nvlink", "h800-nvlink",
	                                       "h200-nvlink", "a100-pcie"};
	static const char *const gpts[] = {"gpt-1.3b", "gpt-2.7b", "gpt-6.7b",
	                                   "gpt-13b",  "gpt-20b",  "gpt-22b"};

	for (size_t i = 0; i < sizeof(clusters) / sizeof(clusters[0]); i++)
		assert_non_null(lynx_preset_find_cluster(clusters[i]));
	for (size_t i = 0; i < sizeof(gpts) / sizeof(gpts[0]); i++)
		assert_non_null(lynx_preset_find_model(gpts[i]));
	assert_null(lynx_preset_find_cluster("A100-NVLINK"));
	assert_null(lynx_preset_find_gpu("v100"));
	assert_null(lynx_preset_find_model("gpt-7b"));
}

static void test_hardware_generations_are_ordered(void **state)
{
	const struct lynx_gpu *a100 = lynx_preset_find_gpu("a100-80gb"),
	                      *pcie = lynx_preset_find_gpu("a100-80gb-pcie"),
	                      *h100 = lynx_preset_find_gpu("h100-sxm"),
	                      *h800 = lynx_preset_find_gpu("h800"),
	                      *h200 = lynx_preset_find_gpu("h200");
	const struct lynx_cluster *nv = lynx_preset_find_cluster("a100-nvlink"),
	                          *pc = lynx_preset_find_cluster("a100-pcie"),
	                          *c100 = lynx_preset_find_cluster("h100-nvlink"),
	                          *c800 = lynx_preset_find_cluster("h800-nvlink");

	assert_true(h100->peak_flops * h100->gemm_eff > a100->peak_flops * a100->gemm_eff);
	assert_true(h100->mem_bw > a100->mem_bw && h200->mem_bw > h100->mem_bw);
	assert_true(h200->mem_bytes > h100->mem_bytes);
	assert_true(pcie->mem_bw < a100->mem_bw);
	/* The H800 is an H100 with NVLink cut from 18 links to 8. */
	assert_true(h800->peak_flops == h100->peak_flops);
	assert_true(c800->intra.busbw < c100->intra.busbw);
	assert_true(pc->intra.busbw < nv->intra.busbw / 10);
	/* PCIe Gen5 on Hopper, Gen4 on A100; the PCIe cluster's cards share switch uplinks. */
	assert_true(c100->host.busbw > nv->host.busbw && c800->host.busbw == c100->host.busbw);
	assert_true(pc->host.busbw < nv->host.busbw);
	assert_ptr_equal(nv->gpu, a100);
	assert_ptr_equal(pc->gpu, pcie);
}

/* "gpt-1.3b" -> 1.3e9, "gpt-1t" -> 1e12, "llama3-70b" -> 70e9. */
static double nominal_params(const char *name)
{
	char *end;
	double n = strtod(strchr(name, '-') + 1, &end);

	return *end == 't' ? n * 1e12 : n * 1e9;
}

/* Every preset is valid at t = 8 and about as large as its name says; GPT's are Korthikanti
 * et al.'s s and v, Llama's their family's layer. */
static void test_model_shapes_are_valid_and_match_their_names(void **state)
{
	int sweep = 0;

	for (int i = 0; i < LYNX_MODEL_PRESET_COUNT; i++) {
		const struct lynx_model_preset *g = &lynx_preset_models[i];
		struct lynx_model_desc m;
		char why[256] = "";
		double params;

		lynx_preset_fill_model(g, &m);
		if (lynx_model_validate(&m, why, sizeof(why)))
			fail_msg("%s: %s", g->name, why);
		if (g->family == &lynx_preset_families[LYNX_FAMILY_GPT]) {
			assert_int_equal(m.seq, 2048);
			assert_int_equal(m.vocab, 51200);
			assert_int_equal(lynx_model_ffn(&m), 4 * m.hidden);
		} else {
			assert_int_equal(m.arch.mlp, LYNX_MLP_SWIGLU);
			assert_int_equal(m.arch.attention, LYNX_ATTENTION_FLASH);
			assert_true(m.arch.untied && m.arch.no_bias && m.arch.no_dropout);
		}
		assert_int_equal(m.hidden % m.heads, 0);
		/* Every model runs with Megatron's usual t = 8. */
		m.tp = 8;
		if (lynx_model_validate(&m, why, sizeof(why)))
			fail_msg("%s at t = 8: %s", g->name, why);
		params = (double)lynx_model_params(&m);
		if (fabs(params / nominal_params(g->name) - 1) > 0.05)
			fail_msg("%s has %.3g parameters", g->name, params);
		assert_ptr_equal(lynx_preset_find_model(g->name), g);
		sweep += g->in_sweep;
		if (g->in_sweep)
			assert_true(params >= 1.2e9 && params <= 23.5e9);
	}
	assert_int_equal(sweep, 6);
}

static void test_fill_model_sets_the_smallest_job(void **state)
{
	struct lynx_model_desc m;

	memset(&m, 0xff, sizeof(m));
	lynx_preset_fill_model(lynx_preset_find_model("gpt-22b"), &m);
	assert_int_equal(m.layers, 48);
	assert_int_equal(m.hidden, 6144);
	assert_int_equal(m.heads, 64);
	assert_int_equal(m.micro_batch, 1);
	assert_int_equal(m.global_batch, 1);
	assert_int_equal(m.tp * m.pp * m.dp, 1);
	assert_false(m.sp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_every_gpu_constant_is_positive_and_efficiencies_are_shares),
	        cmocka_unit_test(test_every_cluster_constant_is_positive_and_links_are_ordered),
	        cmocka_unit_test(test_vmm_costs_are_the_h100_measurements),
	        cmocka_unit_test(test_the_documented_names_exist),
	        cmocka_unit_test(test_hardware_generations_are_ordered),
	        cmocka_unit_test(test_model_shapes_are_valid_and_match_their_names),
	        cmocka_unit_test(test_fill_model_sets_the_smallest_job),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
