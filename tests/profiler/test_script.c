/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The executor's script (profiler/script.c), from tinytrain's real traces: its tokens are
 * the iteration's, its buffers are the profile's groups (same bytes, same numbering) for
 * every micro-batch, and, the point of it all, counting tokens and allocations along every
 * other iteration of the trace finds each scripted buffer at its place with its size, as
 * the executor will do live. Its NCCL tokens are where the profile's windows are called,
 * found the same way along every iteration.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "build.h"
#include "period.h"
#include "profile.h"
#include "record.h"
#include "script.h"

/*
 * Walks events [first, end) as the executor would: the number of places where the trace
 * and the script disagree (a token, a scripted allocation's size, the counts at the end).
 */
static size_t follow(const struct lynx_prof_trace *t, size_t first, size_t end,
                     const struct lynx_prof_script *s)
{
	uint32_t token = 0, ordinal = 0;
	size_t next = 0, wrong = 0;

	for (size_t i = first; i < end; i++) {
		const struct lynx_prof_event *e = &t->events[i];
		uint64_t sig = lynx_prof_signature(e);
		if (sig) {
			wrong += token >= s->n_tokens || sig != s->sig[token];
			token++;
			ordinal = 0;
		} else if (lynx_prof_script_counts_alloc(e)) {
			if (next < s->n_buffers && s->buffers[next].alloc_token == token &&
			    s->buffers[next].alloc_ordinal == ordinal) {
				wrong += e->u.mem.bytes != s->buffers[next].bytes;
				next++;
			}
			ordinal++;
		}
	}
	return wrong + (token != s->n_tokens) + (next != s->n_buffers);
}

/*
 * Walks events [first, end) for the program's NCCL calls: the number of places where the
 * trace disagrees with the script's NCCL tokens (the token the call is at, its signature,
 * the call of the profile's window of the same index, the count at the end).
 */
static size_t follow_nccl(const struct lynx_prof_trace *t, size_t first, size_t end,
                          const struct lynx_prof_script *s, const struct lynx_profile *p)
{
	uint32_t token = 0, k = 0;
	size_t wrong = 0;

	for (size_t i = first; i < end; i++) {
		const struct lynx_prof_event *e = &t->events[i];
		uint64_t sig = lynx_prof_signature(e);
		if ((e->kind == LYNX_PROF_COLL || e->kind == LYNX_PROF_P2P) && !e->nested) {
			/* A captured call is no token: the one before stands for it. */
			uint32_t at = sig ? token : token ? token - 1 : 0;
			if (k >= s->n_nccl || k >= p->window_count) {
				wrong++;
			} else {
				wrong += s->nccl_tokens[k] != at;
				wrong += sig && s->sig[s->nccl_tokens[k]] != sig;
				wrong += strcmp(p->windows[k].call, e->hook) != 0;
			}
			k++;
		}
		token += sig != 0;
	}
	return wrong + (k != s->n_nccl);
}

static void check_rank(const struct lynx_prof_trace *t, int rank)
{
	struct lynx_prof_script s;
	struct lynx_prof_build_options opt = {.rank = rank, .world = 4, .script = &s};
	struct lynx_prof_iterations its;
	struct lynx_profile p;
	char why[256];

	if (lynx_prof_build_profile(t, &opt, &p, why, sizeof(why)))
		fail_msg("rank %d: %s", rank, why);
	assert_int_equal(s.n_tokens, p.iteration.period_tokens);
	assert_true(s.n_buffers > 0);
	/* Every (layer, micro-batch) holds the profile's groups of its layer, in order. */
	size_t per_layer[64] = {0};
	for (size_t g = 0; g < p.group_count; g++)
		per_layer[p.groups[g].layer]++;
	assert_int_equal(s.n_buffers, p.group_count * p.microbatches);
	for (size_t i = 0; i < s.n_buffers; i++) {
		const struct lynx_prof_script_buffer *b = &s.buffers[i];
		size_t g = b->index;
		for (uint32_t l = 0; l < b->layer; l++)
			g += per_layer[l];
		assert_true(b->index < per_layer[b->layer]);
		assert_int_equal(p.groups[g].layer, b->layer);
		assert_int_equal(p.groups[g].bytes, b->bytes);
		assert_true(b->last_forward_token < b->restore_token);
		assert_true(b->restore_token <= b->first_backward_token);
		assert_true(b->first_backward_token < s.n_tokens);
		if (i)
			assert_true(b->alloc_token > s.buffers[i - 1].alloc_token ||
			            (b->alloc_token == s.buffers[i - 1].alloc_token &&
			             b->alloc_ordinal > s.buffers[i - 1].alloc_ordinal));
	}
	/* One NCCL token per window, in call order, each a token of the iteration. */
	assert_true(s.n_nccl > 0);
	assert_int_equal(s.n_nccl, p.window_count);
	for (uint32_t k = 0; k < s.n_nccl; k++) {
		assert_true(s.nccl_tokens[k] < s.n_tokens);
		if (k)
			assert_true(s.nccl_tokens[k] >= s.nccl_tokens[k - 1]);
	}
	/* Every identical iteration, not only the one the script came from. */
	assert_int_equal(lynx_prof_find_iterations(t, &its, why, sizeof(why)), 0);
	assert_true(its.count >= 2);
	for (size_t i = 0; i < its.count; i++) {
		assert_int_equal(follow(t, its.iter[i].first, its.iter[i].end, &s), 0);
		assert_int_equal(follow_nccl(t, its.iter[i].first, its.iter[i].end, &s, &p), 0);
	}
	/* An NCCL token one off must be seen: the check can fail. */
	s.nccl_tokens[0]++;
	assert_true(follow_nccl(t, its.iter[0].first, its.iter[0].end, &s, &p) > 0);
	s.nccl_tokens[0]--;
	/* A follower that counted one allocation too many for the first buffer must see it:
	 * the check can fail. */
	s.buffers[0].alloc_ordinal++;
	assert_true(follow(t, its.iter[0].first, its.iter[0].end, &s) > 0);
	lynx_prof_iterations_free(&its);
	lynx_prof_script_free(&s);
	lynx_profile_free(&p);
}

static void test_script_places_every_saved_buffer_in_every_iteration(void **state)
{
	struct recording rec;

	(void)state;
	assert_int_equal(record_tinytrain("--nproc 4 --pp 2 --tp 2 --layers 8 --microbatches 4 "
	                                  "--steps 3",
	                                  &rec),
	                 0);
	assert_int_equal(rec.ranks, 4);
	for (int r = 0; r < rec.ranks; r++)
		check_rank(&rec.rank[r], r);
	record_release(&rec);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_script_places_every_saved_buffer_in_every_iteration),
	};

	if (argc < 1 || record_init(argv[0])) {
		fprintf(stderr, "cannot find the build directory from %s\n", argc ? argv[0] : "?");
		return 1;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
