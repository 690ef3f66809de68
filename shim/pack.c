/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Groups the small activations a plan evicts into packs of shared granules (pack.h).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "pack.h"
#include "problem.h"

/* Candidates sorted by their class, then by script order. */
struct candidate {
	uint32_t layer, microbatch, action, window;
	uint32_t buffer;
};

static int by_class(const void *a, const void *b)
{
	const struct candidate *x = a, *y = b;

	if (x->layer != y->layer)
		return x->layer < y->layer ? -1 : 1;
	if (x->microbatch != y->microbatch)
		return x->microbatch < y->microbatch ? -1 : 1;
	if (x->action != y->action)
		return x->action < y->action ? -1 : 1;
	if (x->window != y->window)
		return x->window < y->window ? -1 : 1;
	return x->buffer < y->buffer ? -1 : x->buffer > y->buffer;
}

static bool same_class(const struct candidate *x, const struct candidate *y)
{
	return x->layer == y->layer && x->microbatch == y->microbatch && x->action == y->action &&
	       x->window == y->window;
}

void lynx_packing_free(struct lynx_packing *packing)
{
	free(packing->packs);
	free(packing->member);
	free(packing->pack_of);
	free(packing->offset);
	memset(packing, 0, sizeof(*packing));
}

int lynx_pack_build(const struct lynx_prof_script_buffer *buffers,
                    const struct lynx_exec_decision *decisions, size_t n, uint64_t granule,
                    struct lynx_packing *out)
{
	struct candidate *c;
	size_t k = 0;

	memset(out, 0, sizeof(*out));
	if (!granule || (granule & (granule - 1)))
		return -EINVAL;
	c = malloc((n ? n : 1) * sizeof(*c));
	out->packs = malloc((n ? n : 1) * sizeof(*out->packs));
	out->member = malloc((n ? n : 1) * sizeof(*out->member));
	out->pack_of = malloc((n ? n : 1) * sizeof(*out->pack_of));
	out->offset = calloc(n ? n : 1, sizeof(*out->offset));
	if (!c || !out->packs || !out->member || !out->pack_of || !out->offset) {
		free(c);
		lynx_packing_free(out);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		out->pack_of[i] = LYNX_PACK_NONE;
		if (decisions[i].action == LYNX_EXEC_KEEP || !buffers[i].bytes ||
		    buffers[i].bytes >= granule)
			continue;
		c[k++] = (struct candidate){
		        buffers[i].layer, buffers[i].microbatch, (uint32_t)decisions[i].action,
		        decisions[i].action == LYNX_EXEC_RECOMPUTE ? decisions[i].window_token
		                                                   : LYNX_EXEC_NO_WINDOW,
		        (uint32_t)i};
	}
	qsort(c, k, sizeof(*c), by_class);
	uint32_t members = 0;
	for (size_t a = 0, b; a < k; a = b) {
		uint64_t bytes = 0;

		for (b = a; b < k && same_class(&c[a], &c[b]); b++)
			bytes += lynx_problem_pack_aligned(buffers[c[b].buffer].bytes);
		if (!lynx_problem_pack_worth(bytes, granule))
			continue;
		struct lynx_pack *p = &out->packs[out->n_packs];
		*p = (struct lynx_pack){.bytes = (bytes + granule - 1) / granule * granule,
		                        .first = members};
		bytes = 0;
		for (size_t i = a; i < b; i++) {
			uint32_t buf = c[i].buffer;

			out->pack_of[buf] = out->n_packs;
			out->offset[buf] = bytes;
			out->member[members++] = buf;
			bytes += lynx_problem_pack_aligned(buffers[buf].bytes);
		}
		p->count = members - p->first;
		out->n_packs++;
	}
	free(c);
	return 0;
}
