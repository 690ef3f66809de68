/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shim/pack.c: which small activations share granules, at which offsets.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pack.h"

#define KIB 1024ull
#define MIB (1024ull * 1024)
#define GRANULE (2 * MIB)

static struct lynx_prof_script_buffer buf(uint32_t layer, uint32_t microbatch, uint64_t bytes)
{
	return (struct lynx_prof_script_buffer){
	        .layer = layer, .microbatch = microbatch, .bytes = bytes};
}

static struct lynx_exec_decision evict(enum lynx_exec_action action, uint32_t window)
{
	return (struct lynx_exec_decision){action, window};
}

static void test_small_activations_of_a_layer_share_one_pack(void **state)
{
	(void)state;
	/* Two layers' worth in one micro-batch; 3 MiB is a granule's size and more: alone. */
	struct lynx_prof_script_buffer b[] = {buf(0, 0, 700 * KIB), buf(0, 0, 3 * MIB),
	                                      buf(0, 0, 600 * KIB + 100), buf(0, 0, 500 * KIB)};
	struct lynx_exec_decision d[] = {evict(LYNX_EXEC_OFFLOAD, LYNX_EXEC_NO_WINDOW),
	                                 evict(LYNX_EXEC_OFFLOAD, LYNX_EXEC_NO_WINDOW),
	                                 evict(LYNX_EXEC_OFFLOAD, LYNX_EXEC_NO_WINDOW),
	                                 evict(LYNX_EXEC_OFFLOAD, LYNX_EXEC_NO_WINDOW)};
	struct lynx_packing p;

	assert_int_equal(lynx_pack_build(b, d, 4, GRANULE, &p), 0);
	assert_int_equal(p.n_packs, 1);
	assert_int_equal(p.packs[0].bytes, GRANULE);
	assert_int_equal(p.packs[0].count, 3);
	assert_int_equal(p.pack_of[1], LYNX_PACK_NONE);
	/* Script order, each aligned: 600 KiB + 100 bytes takes 600.5 KiB. */
	assert_int_equal(p.offset[0], 0);
	assert_int_equal(p.offset[2], 700 * KIB);
	assert_int_equal(p.offset[3], 700 * KIB + 600 * KIB + 512);
	assert_int_equal(p.member[p.packs[0].first], 0);
	assert_int_equal(p.member[p.packs[0].first + 2], 3);
	lynx_packing_free(&p);
}

static void test_packs_part_by_layer_microbatch_action_and_window(void **state)
{
	(void)state;
	struct lynx_prof_script_buffer b[] = {buf(0, 0, 1200 * KIB), buf(0, 1, 1200 * KIB),
	                                      buf(1, 0, 1200 * KIB), buf(1, 0, 1200 * KIB),
	                                      buf(1, 0, 1200 * KIB), buf(1, 0, 1200 * KIB)};
	struct lynx_exec_decision d[] = {
	        evict(LYNX_EXEC_RECOMPUTE, 7), evict(LYNX_EXEC_RECOMPUTE, 7),
	        evict(LYNX_EXEC_RECOMPUTE, 7), evict(LYNX_EXEC_RECOMPUTE, 9),
	        evict(LYNX_EXEC_OFFLOAD, 7),   evict(LYNX_EXEC_OFFLOAD, LYNX_EXEC_NO_WINDOW)};
	struct lynx_packing p;

	assert_int_equal(lynx_pack_build(b, d, 6, GRANULE, &p), 0);
	/* Each of the first four is a class of its own (1.17 MiB: worth a granule); an
	 * offload's window is no window, so the last two are one class of two. */
	assert_int_equal(p.n_packs, 5);
	for (uint32_t i = 0; i < 4; i++)
		assert_int_equal(p.packs[p.pack_of[i]].count, 1);
	assert_int_equal(p.pack_of[4], p.pack_of[5]);
	assert_int_equal(p.packs[p.pack_of[4]].bytes, 2 * GRANULE);
	assert_int_equal(p.offset[5], 1200 * KIB);
	lynx_packing_free(&p);
}

static void test_what_would_waste_most_of_a_granule_or_is_kept_stays_out(void **state)
{
	(void)state;
	/* 0.9 MiB in all would take 2 MiB: kept. Kept activations never pack. */
	struct lynx_prof_script_buffer b[] = {buf(0, 0, 500 * KIB), buf(0, 0, 400 * KIB),
	                                      buf(1, 0, 1500 * KIB), buf(1, 0, 1500 * KIB)};
	struct lynx_exec_decision d[] = {evict(LYNX_EXEC_OFFLOAD, LYNX_EXEC_NO_WINDOW),
	                                 evict(LYNX_EXEC_OFFLOAD, LYNX_EXEC_NO_WINDOW),
	                                 evict(LYNX_EXEC_KEEP, LYNX_EXEC_NO_WINDOW),
	                                 evict(LYNX_EXEC_OFFLOAD, LYNX_EXEC_NO_WINDOW)};
	struct lynx_packing p;

	assert_int_equal(lynx_pack_build(b, d, 4, GRANULE, &p), 0);
	assert_int_equal(p.n_packs, 1);
	assert_int_equal(p.pack_of[0], LYNX_PACK_NONE);
	assert_int_equal(p.pack_of[1], LYNX_PACK_NONE);
	assert_int_equal(p.pack_of[2], LYNX_PACK_NONE);
	assert_int_equal(p.pack_of[3], 0);
	lynx_packing_free(&p);
}

static void test_a_granule_that_is_no_power_of_two_is_refused(void **state)
{
	(void)state;
	struct lynx_prof_script_buffer b[] = {buf(0, 0, KIB)};
	struct lynx_exec_decision d[] = {evict(LYNX_EXEC_OFFLOAD, LYNX_EXEC_NO_WINDOW)};
	struct lynx_packing p;

	assert_int_equal(lynx_pack_build(b, d, 1, 3 * MIB, &p), -EINVAL);
	assert_null(p.packs);
	assert_int_equal(lynx_pack_build(b, d, 1, 0, &p), -EINVAL);
	/* No buffers: no packs, and nothing to trip over. */
	assert_int_equal(lynx_pack_build(b, d, 0, GRANULE, &p), 0);
	assert_int_equal(p.n_packs, 0);
	lynx_packing_free(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_small_activations_of_a_layer_share_one_pack),
	        cmocka_unit_test(test_packs_part_by_layer_microbatch_action_and_window),
	        cmocka_unit_test(test_what_would_waste_most_of_a_granule_or_is_kept_stays_out),
	        cmocka_unit_test(test_a_granule_that_is_no_power_of_two_is_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
