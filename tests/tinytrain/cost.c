/* SPDX-License-Identifier: Apache-2.0 */
/* tinytrain's virtual cost model: sustained rates of an H100-class GPU in bf16. */
#include "cost.h"

/*
 * Sustained, not peak: Megatron-style GPT layers reach about 60% of the 989 TFLOP/s
 * dense bf16 peak in their GEMMs, and element-wise kernels about 80% of 3.35 TB/s.
 * A launch takes at least 2 us on the device.
 */
#define SUSTAINED_FLOPS_PER_S 593e12
#define SUSTAINED_BYTES_PER_S 2.68e12
#define LAUNCH_FLOOR_NS 2000.0

uint64_t tt_cost_ns(struct tt_vcost cost)
{
	double compute = (double)cost.flops / SUSTAINED_FLOPS_PER_S * 1e9;
	double memory = (double)cost.bytes / SUSTAINED_BYTES_PER_S * 1e9;

	return (uint64_t)(LAUNCH_FLOOR_NS + (compute > memory ? compute : memory));
}
