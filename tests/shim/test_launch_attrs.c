/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Launch attributes (shim/launch_attrs.c): how a launch event holds a launch config's
 * attributes, and what a replay keeps, drops or refuses of them. No GPU: plain C over
 * cuda.h's types.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "launch_attr.h"
#include "launch_attrs.h"

/* A launch event with room for the largest payload, 8-aligned as a ring's. */
struct test_event {
	struct lynx_event ev;
	unsigned char payload[LYNX_LAUNCH_MAX_PAYLOAD];
};

/* The record adds nothing to a launch without a config, and puts the attributes 8-aligned
 * after the parameters; the event's view finds them there, by value. */
static void test_attributes_follow_the_parameters_8_aligned(void **state)
{
	struct test_event t;
	struct lynx_event *ev = (struct lynx_event *)(void *)&t; /* the whole record */
	CUlaunchAttribute many[LYNX_LAUNCH_MAX_ATTRS];
	unsigned int one[3] = {1, 1, 1};
	int on = 1;
	const CUlaunchAttribute given[2] = {
	        attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, one, sizeof(one), 0x3c),
	        attr(CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &on, sizeof(on), 0x3c),
	};

	assert_int_equal(lynx_launch_payload_bytes(13, false, 2), 13);
	assert_int_equal(lynx_launch_payload_bytes(13, true, 0), 13);
	assert_int_equal(lynx_launch_payload_bytes(13, true, 2),
	                 16 + 2 * sizeof(CUlaunchAttribute));
	assert_int_equal(lynx_launch_payload_bytes(16, true, 100),
	                 16 + LYNX_LAUNCH_MAX_ATTRS * sizeof(CUlaunchAttribute));
	assert_int_equal(lynx_launch_payload_bytes(LYNX_LAUNCH_MAX_PARAM_BYTES, true, 100),
	                 LYNX_LAUNCH_MAX_PAYLOAD);

	memset(&t, 0, sizeof(t));
	ev->u.launch.param_bytes = 13;
	assert_null(lynx_launch_attrs_of(ev)); /* no config */
	lynx_launch_attrs_record(ev, given, 2);
	assert_int_equal(ev->u.launch.config, 1);
	assert_int_equal(ev->u.launch.attr_count, 2);
	assert_ptr_equal(lynx_launch_attrs_of(ev), (const void *)(t.payload + 16));
	assert_memory_equal(lynx_launch_attrs_of(ev), given, sizeof(given));
	assert_int_equal((uintptr_t)lynx_launch_attrs_of(ev) % 8, 0);

	/* A config with no attributes, and one the driver refuses (attrs NULL). */
	memset(&t, 0, sizeof(t));
	lynx_launch_attrs_record(ev, NULL, 3);
	assert_int_equal(ev->u.launch.config, 1);
	assert_int_equal(ev->u.launch.attr_count, 0);
	assert_null(lynx_launch_attrs_of(ev));
	/* A count beyond the field: saturated, so that it still reads as too many; the first
	 * LYNX_LAUNCH_MAX_ATTRS are held. */
	for (int i = 0; i < LYNX_LAUNCH_MAX_ATTRS; i++)
		many[i] = given[i % 2];
	memset(&t, 0, sizeof(t));
	lynx_launch_attrs_record(ev, many, 70000);
	assert_int_equal(ev->u.launch.attr_count, UINT16_MAX);
	assert_memory_equal(lynx_launch_attrs_of(ev), many, sizeof(many));
	lynx_launch_attrs_record(NULL, given, 2); /* not recorded: nothing to do */
}

/* Every id of cuda.h has a treatment; the ones that name the trainer's events or stream are
 * dropped, the ones that shape the launch kept, the graph-only one refused. */
static void test_each_attribute_has_its_treatment(void **state)
{
	static const struct {
		CUlaunchAttributeID id;
		const char *name;
		enum lynx_launch_attr_treatment treatment;
	} want[] = {
	        {CU_LAUNCH_ATTRIBUTE_COOPERATIVE, "COOPERATIVE", LYNX_LAUNCH_ATTR_KEEP},
	        {CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, "CLUSTER_DIMENSION", LYNX_LAUNCH_ATTR_KEEP},
	        {CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION, "PREFERRED_CLUSTER_DIMENSION",
	         LYNX_LAUNCH_ATTR_KEEP},
	        {CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN, "MEM_SYNC_DOMAIN", LYNX_LAUNCH_ATTR_KEEP},
	        {CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
	         "PROGRAMMATIC_STREAM_SERIALIZATION", LYNX_LAUNCH_ATTR_DROP},
	        {CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT, "PROGRAMMATIC_EVENT",
	         LYNX_LAUNCH_ATTR_DROP},
	        {CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT, "LAUNCH_COMPLETION_EVENT",
	         LYNX_LAUNCH_ATTR_DROP},
	        {CU_LAUNCH_ATTRIBUTE_PRIORITY, "PRIORITY", LYNX_LAUNCH_ATTR_DROP},
	        {CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE, "DEVICE_UPDATABLE_KERNEL_NODE",
	         LYNX_LAUNCH_ATTR_REFUSE},
	};

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		assert_string_equal(lynx_launch_attr_name(want[i].id), want[i].name);
		assert_int_equal(lynx_launch_attr_treatment(want[i].id), want[i].treatment);
	}
	/* cuda.h numbers them 0 to 16 with no 15. */
	for (unsigned int id = 0; id <= CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING; id++)
		if (id != 15)
			assert_non_null(lynx_launch_attr_name(id));
	assert_null(lynx_launch_attr_name(15));
	assert_null(lynx_launch_attr_name(CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING + 1));
	assert_int_equal(lynx_launch_attr_treatment(15), LYNX_LAUNCH_ATTR_REFUSE);
	assert_int_equal(lynx_launch_attr_treatment(1000), LYNX_LAUNCH_ATTR_REFUSE);
}

/* What a replay passes: the kept ones, in order, their values alone (the rest zeroed), the
 * same whatever the trainer's stack held around them. */
static void test_select_keeps_in_order_and_normalises(void **state)
{
	unsigned int cluster[3] = {2, 1, 1};
	int on = 1, priority = -3;
	CUlaunchMemSyncDomain domain = CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE;
	CUlaunchAttribute out[LYNX_LAUNCH_MAX_ATTRS], again[LYNX_LAUNCH_MAX_ATTRS], want;
	uint32_t kept = 99, kept_again = 99;
	char why[160];

	for (int pass = 0; pass < 2; pass++) {
		unsigned char fill = pass ? 0xff : 0x01;
		const CUlaunchAttribute given[] = {
		        attr(CU_LAUNCH_ATTRIBUTE_PRIORITY, &priority, sizeof(priority), fill),
		        attr(CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN, &domain, sizeof(domain), fill),
		        attr(CU_LAUNCH_ATTRIBUTE_IGNORE, &on, sizeof(on), fill),
		        attr(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, &on, sizeof(on),
		             fill),
		        attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, cluster, sizeof(cluster), fill),
		};
		assert_null(lynx_launch_attrs_select(given, 5, pass ? again : out,
		                                     pass ? &kept_again : &kept, why, sizeof(why)));
	}
	assert_int_equal(kept, 2);
	assert_int_equal(kept_again, 2);
	assert_memory_equal(out, again, 2 * sizeof(*out));
	want = attr(CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN, &domain, sizeof(domain), 0);
	assert_memory_equal(&out[0], &want, sizeof(want));
	want = attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, cluster, sizeof(cluster), 0);
	assert_memory_equal(&out[1], &want, sizeof(want));

	/* None given, none kept. */
	assert_null(lynx_launch_attrs_select(NULL, 0, out, &kept, why, sizeof(why)));
	assert_int_equal(kept, 0);
}

/* What cannot be replayed is said, with the attribute's name and id, or the count. */
static void test_select_says_why_a_launch_cannot_be_replayed(void **state)
{
	int on = 1;
	CUlaunchAttribute given[LYNX_LAUNCH_MAX_ATTRS + 1], out[LYNX_LAUNCH_MAX_ATTRS];
	uint32_t kept;
	char why[160];

	for (int i = 0; i <= LYNX_LAUNCH_MAX_ATTRS; i++)
		given[i] = attr(CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &on, sizeof(on), 0);
	assert_null(lynx_launch_attrs_select(given, LYNX_LAUNCH_MAX_ATTRS, out, &kept, why,
	                                     sizeof(why)));
	assert_int_equal(kept, LYNX_LAUNCH_MAX_ATTRS);
	assert_string_equal(lynx_launch_attrs_select(given, LYNX_LAUNCH_MAX_ATTRS + 1, out, &kept,
	                                             why, sizeof(why)),
	                    "9 launch attributes (a record holds at most 8)");
	assert_int_equal(kept, 0);
	assert_string_equal(lynx_launch_attrs_select(NULL, 1, out, &kept, why, sizeof(why)),
	                    "1 launch attributes, not recorded");
	given[1].id = CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE;
	assert_ptr_equal(lynx_launch_attrs_select(given, 2, out, &kept, why, sizeof(why)), why);
	assert_non_null(strstr(why, "launch attribute DEVICE_UPDATABLE_KERNEL_NODE (13): "));
	given[1].id = (CUlaunchAttributeID)42;
	lynx_launch_attrs_select(given, 2, out, &kept, why, sizeof(why));
	assert_non_null(strstr(why, "launch attribute 42, which Lynx does not know"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_attributes_follow_the_parameters_8_aligned),
	        cmocka_unit_test(test_each_attribute_has_its_treatment),
	        cmocka_unit_test(test_select_keeps_in_order_and_normalises),
	        cmocka_unit_test(test_select_says_why_a_launch_cannot_be_replayed),
	};

	return cmocka_run_group_tests_name("launch_attrs", tests, NULL, NULL);
}
