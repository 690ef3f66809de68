/* SPDX-License-Identifier: Apache-2.0 */
/* What a replay does with each launch attribute of a launch made with a launch config
 * (launch_attrs.h): the table LYNX_LAUNCH_ATTRS, expanded. */
#include <stdio.h>

#include "launch_attrs.h"

static const struct attr_rule {
	const char *name;
	enum lynx_launch_attr_treatment treatment;
	uint8_t value_bytes; /* the bytes of CUlaunchAttributeValue that hold its value */
	const char *why;
} attrs_table[] = {
#define LYNX_LAUNCH_ATTR_ENTRY(name, treatment, member, why)                 \
	[CU_LAUNCH_ATTRIBUTE_##name] = {#name, LYNX_LAUNCH_ATTR_##treatment, \
	                                sizeof(((CUlaunchAttributeValue *)0)->member), why},
        LYNX_LAUNCH_ATTRS(LYNX_LAUNCH_ATTR_ENTRY)
#undef LYNX_LAUNCH_ATTR_ENTRY
};

#define TABLE_SIZE (sizeof(attrs_table) / sizeof(attrs_table[0]))

/* The id's entry, or NULL: an id beyond the table, or a gap in cuda.h's numbering. */
static const struct attr_rule *entry_of(unsigned int id)
{
	return id < TABLE_SIZE && attrs_table[id].name ? &attrs_table[id] : NULL;
}

const char *lynx_launch_attr_name(unsigned int id)
{
	return entry_of(id) ? entry_of(id)->name : NULL;
}

enum lynx_launch_attr_treatment lynx_launch_attr_treatment(unsigned int id)
{
	return entry_of(id) ? entry_of(id)->treatment : LYNX_LAUNCH_ATTR_REFUSE;
}

const char *lynx_launch_attrs_select(const CUlaunchAttribute *attrs, uint32_t given,
                                     CUlaunchAttribute out[LYNX_LAUNCH_MAX_ATTRS], uint32_t *kept,
                                     char *why, size_t why_size)
{
	*kept = 0;
	if (given > LYNX_LAUNCH_MAX_ATTRS) {
		snprintf(why, why_size, "%u launch attributes (a record holds at most %d)", given,
		         LYNX_LAUNCH_MAX_ATTRS);
		return why;
	}
	if (given && !attrs) {
		snprintf(why, why_size, "%u launch attributes, not recorded", given);
		return why;
	}
	for (uint32_t i = 0; i < given; i++) {
		unsigned int id = (unsigned int)attrs[i].id;
		const struct attr_rule *e = entry_of(id);

		if (!e) {
			snprintf(why, why_size,
			         "launch attribute %u, which Lynx does not know (it may tie the "
			         "launch to a stream or an event)",
			         id);
			return why;
		}
		if (e->treatment == LYNX_LAUNCH_ATTR_REFUSE) {
			snprintf(why, why_size, "launch attribute %s (%u): %s", e->name, id,
			         e->why);
			return why;
		}
		if (e->treatment == LYNX_LAUNCH_ATTR_DROP)
			continue;
		/* Only the value's own bytes: the trainer's stack fills the rest of the union. */
		memset(&out[*kept], 0, sizeof(out[*kept]));
		out[*kept].id = attrs[i].id;
		memcpy(&out[*kept].value, &attrs[i].value, e->value_bytes);
		(*kept)++;
	}
	return NULL;
}
