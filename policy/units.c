/* SPDX-License-Identifier: Apache-2.0 */
/* A layer's recomputation units (units.h). */
#include <string.h>

#include "units.h"

void lynx_layer_units_find(const struct lynx_problem_layer *L, struct lynx_layer_units *out)
{
	int unit_of[LYNX_PROBLEM_MAX_GROUPS];

	memset(out, 0, sizeof(*out));
	for (uint32_t g = 0; g < L->n_groups; g++) {
		const struct lynx_problem_group *gr = &L->groups[g];
		uint32_t u;

		unit_of[g] = -1;
		out->all_bytes += gr->bytes;
		if (!gr->ops) {
			out->input_bytes += gr->bytes;
			continue;
		}
		for (u = 0; u < out->n_units; u++)
			if (L->groups[__builtin_ctz(out->units[u].groups)].ops == gr->ops)
				break;
		if (u == out->n_units)
			out->units[out->n_units++] = (struct lynx_unit){.max_consumer = -1};
		out->units[u].groups |= 1u << g;
		out->units[u].bytes += gr->bytes;
		out->units[u].rerun_s = gr->recompute_s;
		if (gr->consumer > out->units[u].max_consumer)
			out->units[u].max_consumer = gr->consumer;
		unit_of[g] = (int)u;
	}
	for (uint32_t u = 0; u < out->n_units; u++)
		for (uint32_t g = 0; g < L->n_groups; g++)
			if (out->units[u].groups & (1u << g))
				for (uint32_t d = 0; d < L->n_groups; d++)
					if ((L->groups[g].deps & (1u << d)) && unit_of[d] >= 0 &&
					    unit_of[d] != (int)u)
						out->units[u].deps |= 1u << unit_of[d];
}
