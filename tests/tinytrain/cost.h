/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tinytrain's virtual cost model: what each operation would cost on the virtual model
 * (GPT-1.3B/7B/22B-sized) on an H100-class GPU, so that virtual times and the
 * compute/communication ratio look like a real job while the real arithmetic stays tiny.
 */
#ifndef TINYTRAIN_COST_H
#define TINYTRAIN_COST_H

#include <stdint.h>

/* Virtual work of one kernel launch: floating-point operations and bytes moved. */
struct tt_vcost {
	uint64_t flops;
	uint64_t bytes;
};

/* Virtual duration of a launch: the slower of its compute and its memory traffic at the
 * model's sustained rates, plus a launch floor. */
uint64_t tt_cost_ns(struct tt_vcost cost);

#endif /* TINYTRAIN_COST_H */
