/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Packs: activations smaller than a VMM granule, evicted and restored in shared granules.
 *
 * The arena evicts whole granules (2 MiB on a GPU). An activation smaller than one would
 * take a whole granule of its own, so on its own it stays with the trainer's allocator. A
 * pack gathers the small activations that one (layer, micro-batch) evicts alike (the same
 * action and the same window) into one arena allocation: each member lives at its own
 * offset, and the granules go back when every member is evicted and come back when the
 * first is restored. Each member keeps its own cycle (its copy or replay, its guard, its
 * free); only the mapping is shared.
 *
 * Which activations pack: those the plan evicts, below the granule, grouped by (layer,
 * micro-batch, action, window token) in script order, each at an offset aligned to
 * LYNX_PROBLEM_PACK_ALIGN. A group becomes a pack when lynx_problem_pack_worth() holds for
 * its aligned size (the planner applies the same rule to a layer's small buffers); the
 * others stay kept, as before packs.
 *
 * Pure: no CUDA. Ownership: lynx_pack_build fills out, lynx_packing_free releases it.
 */
#ifndef LYNX_PACK_H
#define LYNX_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "executor.h"
#include "script.h"

#define LYNX_PACK_NONE UINT32_MAX

struct lynx_pack {
	uint64_t bytes;        /* a whole number of granules */
	uint32_t first, count; /* its members: member[first .. first + count) */
};

struct lynx_packing {
	struct lynx_pack *packs;
	uint32_t n_packs;
	uint32_t *member;  /* buffer indices, pack by pack, in script order within each */
	uint32_t *pack_of; /* per buffer: its pack, or LYNX_PACK_NONE */
	uint64_t *offset;  /* per buffer: its offset in its pack (0 outside one) */
};

/*
 * The packs of n script buffers under decisions, for an arena of granule bytes (a power of
 * two). Returns 0, -EINVAL (granule 0 or not a power of two), or -ENOMEM; on failure out
 * holds nothing to free. O(n log n).
 */
int lynx_pack_build(const struct lynx_prof_script_buffer *buffers,
                    const struct lynx_exec_decision *decisions, size_t n, uint64_t granule,
                    struct lynx_packing *out);

void lynx_packing_free(struct lynx_packing *packing);

#endif /* LYNX_PACK_H */
