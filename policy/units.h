/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A layer's recomputation units: the activation groups that the same ops rebuild, which a
 * planner decides on together (dropping part of a unit costs the same rerun and saves
 * less). Shared by HEU and OPT.
 */
#ifndef LYNX_POLICY_UNITS_H
#define LYNX_POLICY_UNITS_H

#include <stdint.h>

#include "problem.h"

struct lynx_unit {
	uint32_t groups; /* bit g: group g of the layer */
	uint32_t deps;   /* units (bit u) its groups need, other than itself */
	uint64_t bytes;
	double rerun_s;
	int32_t max_consumer; /* the latest op in forward order that consumes one of its groups */
};

struct lynx_layer_units {
	uint32_t n_units;
	struct lynx_unit units[LYNX_PROBLEM_MAX_GROUPS];
	uint64_t input_bytes; /* groups no op rebuilds (the layer's input): always kept */
	uint64_t all_bytes;   /* every group */
};

/* Groups layer's recomputable groups into units, with the units' dependencies. */
void lynx_layer_units_find(const struct lynx_problem_layer *layer, struct lynx_layer_units *out);

#endif /* LYNX_POLICY_UNITS_H */
