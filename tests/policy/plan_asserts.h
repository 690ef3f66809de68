/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the planner tests assert of plans alike. Header-only; include after <cmocka.h> and
 * the policy headers.
 */
#ifndef LYNX_TESTS_PLAN_ASSERTS_H
#define LYNX_TESTS_PLAN_ASSERTS_H

#include <stdint.h>

#include "plan.h"
#include "problem.h"

/* A search of one stage (p->search_one_stage) leaves every other stage as the plan it
 * started from: the same action for every group of every layer. */
static inline void assert_other_stages_as_started(const struct lynx_problem *p,
                                                  const struct lynx_plan *plan,
                                                  const struct lynx_plan *start)
{
	for (uint32_t s = 0; s < p->n_stages; s++) {
		if (s == p->searched_stage)
			continue;
		for (uint32_t l = 0; l < p->stages[s].layers; l++)
			for (uint32_t g = 0; g < p->layer.n_groups; g++)
				assert_int_equal(lynx_plan_get(plan, s, l, g)->action,
				                 lynx_plan_get(start, s, l, g)->action);
	}
}

#endif /* LYNX_TESTS_PLAN_ASSERTS_H */
