/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy/from_profile: profiles built in memory become the planning problem: kernels as ops
 * (or runs of them), saved buffers as groups, collectives as windows, stages ordered by their
 * warm-up forwards, measured memory as static memory and budget; bad input refused with a
 * reason; the planners and the checker run on the result.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "checker.h"
#include "plan.h"
#include "planner.h"
#include "presets.h"
#include "problem.h"
#include "profile.h"
#include "whatif.h"

#define US 1000 /* ns */

/* n kernels named <d>0, <d>1, ... (replacing any there were). */
static void set_kernels(struct lynx_profile_kernels *k, char d, size_t n)
{
	for (size_t i = 0; i < k->count; i++)
		free(k->name[i]);
	free(k->name);
	k->count = n;
	k->name = calloc(n, sizeof(*k->name));
	assert_non_null(k->name);
	for (size_t i = 0; i < n; i++) {
		char name[16];

		snprintf(name, sizeof(name), "%c%zu", d, i);
		k->name[i] = strdup(name);
		assert_non_null(k->name[i]);
	}
}

static struct lynx_profile_time host(uint64_t ns)
{
	return (struct lynx_profile_time){LYNX_PROFILE_SOURCE_HOST, ns, ns, ns, 4};
}

/*
 * A stage's profile of n layers of k forward and kb backward kernels, host-timed at 1 µs
 * per kernel, m micro-batches, w warm-up forwards. Memory: 1 MiB of weights, 64 KiB of
 * workspace, 32 KiB of temporaries and `saved` bytes of saved activations at the peak.
 */
static struct lynx_profile *stage(size_t n, size_t k, size_t kb, uint32_t m, uint32_t w,
                                  uint64_t saved)
{
	struct lynx_profile *p = calloc(1, sizeof(*p));

	assert_non_null(p);
	p->rank = p->world = -1;
	p->microbatches = m;
	p->warmup_forwards = w;
	p->layer_count = n;
	p->layers = calloc(n ? n : 1, sizeof(*p->layers));
	assert_non_null(p->layers);
	for (size_t l = 0; l < n; l++) {
		p->layers[l].forward = host(k * US);
		p->layers[l].backward = host(kb * US);
		set_kernels(&p->layers[l].fwd_kernels, 'f', k);
		set_kernels(&p->layers[l].bwd_kernels, 'b', kb);
	}
	p->memory.source = LYNX_PROFILE_SOURCE_HOST;
	p->memory.at_peak[LYNX_PROFILE_MEMORY_WEIGHT] = 1 << 20;
	p->memory.at_peak[LYNX_PROFILE_MEMORY_WORKSPACE] = 64 << 10;
	p->memory.at_peak[LYNX_PROFILE_MEMORY_TEMPORARY] = 32 << 10;
	p->memory.at_peak[LYNX_PROFILE_MEMORY_SAVED] = saved;
	p->memory.peak_bytes = (1 << 20) + (96 << 10) + saved;
	return p;
}

static void add_group(struct lynx_profile *p, uint32_t layer, uint64_t bytes, int32_t producer,
                      int32_t last_consumer)
{
	p->groups = realloc(p->groups, (p->group_count + 1) * sizeof(*p->groups));
	assert_non_null(p->groups);
	p->groups[p->group_count++] =
	        (struct lynx_profile_group){.layer = layer,
	                                    .bytes = bytes,
	                                    .producer = producer,
	                                    .producer_end = producer,
	                                    .first_consumer = last_consumer < 0 ? -1 : 0,
	                                    .last_consumer = last_consumer};
}

/* A window; idle_ns 0: not measured. */
static void add_window(struct lynx_profile *p, enum lynx_profile_window_kind kind, int32_t layer,
                       int32_t microbatch, int32_t ordinal, int32_t kernel, uint64_t idle_ns)
{
	struct lynx_profile_window *w;

	p->windows = realloc(p->windows, (p->window_count + 1) * sizeof(*p->windows));
	assert_non_null(p->windows);
	w = &p->windows[p->window_count++];
	*w = (struct lynx_profile_window){.kind = kind,
	                                  .call = strdup("ncclAllReduce"),
	                                  .peer = -1,
	                                  .microbatch = microbatch,
	                                  .layer = layer,
	                                  .ordinal = ordinal,
	                                  .kernel = kernel};
	if (idle_ns)
		w->idle = (struct lynx_profile_time){LYNX_PROFILE_SOURCE_DEVICE, idle_ns, idle_ns,
		                                     idle_ns, 1};
}

static void drop(struct lynx_profile *p)
{
	lynx_profile_free(p);
	free(p);
}

/* The group of layer `layer` in test_maps_kernels_groups_and_collectives: bytes, producer
 * kernel, last backward consumer. Layer 1 holds the most bytes, so it is the one mapped. */
static void five_groups(struct lynx_profile *p, uint32_t layer, uint64_t scale)
{
	add_group(p, layer, 4096 * scale, -1, 7); /* the layer's input, read by the last kernel */
	add_group(p, layer, 1024 * scale, 1, 5);
	add_group(p, layer, 2048 * scale, 1, 6);
	add_group(p, layer, 8192 * scale, 3, 3);
	add_group(p, layer, 512 * scale, 4, -1); /* no backward reader seen */
}

/* One stage of 3 layers, 6 forward and 8 backward kernels, TP collectives before forward
 * kernel 3 and backward kernel 5, unmeasured. */
static struct lynx_profile *tp_stage(void)
{
	struct lynx_profile *p = stage(3, 6, 8, 2, 0, 3 * 15872 * 2);

	five_groups(p, 0, 1);
	five_groups(p, 1, 2);
	five_groups(p, 2, 1);
	for (int32_t l = 0; l < 3; l++)
		for (int32_t mb = 0; mb < 2; mb++) {
			add_window(p, LYNX_PROFILE_WINDOW_TP_FWD, l, mb, 0, 3, 0);
			add_window(p, LYNX_PROFILE_WINDOW_TP_BWD, l, mb, 0, 5, 0);
		}
	return p;
}

static void build(const struct lynx_profile *const *ranks, size_t n,
                  const struct lynx_problem_options *opt, struct lynx_problem *p)
{
	char why[256] = "";

	if (lynx_problem_from_profile(ranks, n, opt, p, why, sizeof(why)))
		fail_msg("lynx_problem_from_profile refused: %s", why);
}

static void assert_near(const char *what, double got, double want)
{
	if (fabs(got - want) > 1e-12 + 1e-9 * fabs(want))
		fail_msg("%s: got %.9g, want %.9g", what, got, want);
}

static void test_maps_kernels_groups_and_collectives(void **state)
{
	struct lynx_profile *pr = tp_stage();
	const struct lynx_profile *ranks[] = {pr};
	/* Backward kernel i maps to forward kernel 5 - round(5i/7): per op 1, 2, 1, 1, 2, 1
	 * backward kernels (op 0 first). */
	static const int bwd_kernels[6] = {1, 2, 1, 1, 2, 1};
	struct lynx_problem p;
	const struct lynx_problem_layer *L = &p.layer;

	build(ranks, 1, NULL, &p);
	assert_int_equal(L->n_ops, 6);
	assert_string_equal(L->ops[0].name, "0.f0");
	assert_string_equal(L->ops[5].name, "5.f5");
	for (int op = 0; op < 6; op++) {
		assert_near("op forward", L->ops[op].fwd_s, 1e-6);
		assert_near("op backward", L->ops[op].bwd_s, bwd_kernels[op] * 1e-6);
		assert_near("op rerun", L->ops[op].rerun_s, L->ops[op].fwd_s);
	}
	assert_near("layer forward", L->fwd_s, 6e-6);
	assert_near("layer backward", L->bwd_s, 8e-6);

	/* Layer 1's groups (the most bytes), by producer op. */
	assert_int_equal(L->n_groups, 5);
	assert_string_equal(L->groups[0].name, "g0.input");
	assert_string_equal(L->groups[1].name, "g1.f1");
	assert_int_equal(L->groups[0].bytes, 8192);
	assert_int_equal(L->groups[0].producer, -1);
	assert_int_equal(L->groups[0].ops, 0);
	assert_int_equal(L->groups[0].consumer, 0);
	/* Produced by kernel 1: its producer, op 1, replayed with the input resident (kernel
	 * 0's output is not saved: were it read, the examination would refuse the replay); its
	 * sibling the same. */
	assert_int_equal(L->groups[1].bytes, 2048);
	assert_int_equal(L->groups[1].producer, 1);
	assert_int_equal(L->groups[1].ops, 0x2);
	assert_int_equal(L->groups[1].deps, 0x1);
	assert_int_equal(L->groups[1].consumer, 1); /* backward kernel 5 -> op 1 */
	assert_int_equal(L->groups[2].ops, 0x2);
	assert_int_equal(L->groups[2].consumer, 1); /* backward kernel 6 -> op 1 */
	assert_near("recompute", L->groups[1].recompute_s, 1e-6);
	/* Produced by kernel 3: op 3, with everything produced before resident. */
	assert_int_equal(L->groups[3].ops, 0x8);
	assert_int_equal(L->groups[3].deps, 0x7);
	assert_int_equal(L->groups[3].consumer, 3);
	assert_int_equal(L->groups[4].ops, 0x10);
	assert_int_equal(L->groups[4].deps, 0xf);
	assert_int_equal(L->groups[4].consumer, 0); /* no reader seen: the end of the backward */

	/* One stage, no pipeline; the collectives' windows on every layer, unmeasured. */
	assert_int_equal(p.n_stages, 1);
	assert_int_equal(p.micro_batches, 2);
	assert_int_equal(p.stages[0].layers, 3);
	assert_int_equal(p.stages[0].warmup, 0);
	assert_int_equal(p.stages[0].inflight, 1);
	assert_false(p.stages[0].embedding.present);
	assert_false(p.stages[0].head.present);
	assert_null(p.cluster);
	assert_int_equal(p.stages[0].n_windows, 6);
	for (int32_t l = 0; l < 3; l++) {
		int f = lynx_problem_find_window(&p.stages[0], LYNX_WINDOW_TP_FWD, l, 3);
		int b = lynx_problem_find_window(&p.stages[0], LYNX_WINDOW_TP_BWD, l, 2);

		assert_true(f >= 0 && b >= 0);
		assert_true(p.stages[0].windows[f].capacity_s == 0);
	}
	assert_int_equal(lynx_problem_find_window(&p.stages[0], LYNX_WINDOW_DP_GRAD, -1, -1), -1);
	/* Memory: everything live at the peak but the saved activations is static; the budget
	 * defaults to the peak; no host link. */
	assert_int_equal(p.stages[0].static_bytes, (1 << 20) + (96 << 10));
	assert_int_equal(p.budget_bytes, pr->memory.peak_bytes);
	assert_true(p.d2h.busbw == 0 && p.h2d.busbw == 0);
	lynx_problem_free(&p);
	drop(pr);
}

/*
 * A group produced by a run of launches (its producer, then the next kernel of its
 * function, as a kernel launched per sequence): rebuilding it relaunches the whole run, so
 * its ops reach the run's end and its rebuild costs both kernels. Here kernel 3's group (op
 * 3) ends its run at kernel 4: ops 3-4, and the group after it (kernel 4's) is then made
 * with it, as its sibling.
 */
static void test_a_producer_run_is_rebuilt_whole(void **state)
{
	struct lynx_profile *pr = tp_stage();
	const struct lynx_profile *ranks[] = {pr};
	struct lynx_problem p;
	const struct lynx_problem_layer *L = &p.layer;

	for (size_t g = 0; g < pr->group_count; g++)
		if (pr->groups[g].producer == 3)
			pr->groups[g].producer_end = 4;
	build(ranks, 1, NULL, &p);
	assert_int_equal(L->n_groups, 5);
	assert_int_equal(L->groups[3].producer, 4);
	assert_int_equal(L->groups[3].ops, 0x18);
	assert_near("recompute", L->groups[3].recompute_s, 2e-6);
	assert_int_equal(L->groups[4].producer, 4);
	lynx_problem_free(&p);
	drop(pr);
}

/*
 * A chain (profile.h's chained): kernel 3's run reads a temporary that kernel 2 writes, which
 * its rebuild replays first. Its ops are then kernels 2 and 3, and it costs both; a profile
 * that does not say where the writers are (from before "writers") leaves op 3 alone.
 */
static void test_a_chains_writers_are_rerun_with_its_producer(void **state)
{
	struct lynx_profile *pr = tp_stage();
	const struct lynx_profile *ranks[] = {pr};
	struct lynx_problem p;
	const struct lynx_problem_layer *L = &p.layer;

	(void)state;
	for (size_t g = 0; g < pr->group_count; g++) {
		struct lynx_profile_group *gr = &pr->groups[g];

		gr->reads_known = true;
		gr->chained = gr->producer == 3;
		gr->writers[0] = 2;
		gr->writer_count = gr->chained;
	}
	build(ranks, 1, NULL, &p);
	assert_true(L->groups[3].chained);
	assert_int_equal(L->groups[3].ops, 0xc);
	assert_near("recompute", L->groups[3].recompute_s, 2e-6);
	assert_int_equal(L->groups[4].ops, 0x10);
	lynx_problem_free(&p);

	for (size_t g = 0; g < pr->group_count; g++)
		pr->groups[g].writer_count = 0;
	build(ranks, 1, NULL, &p);
	assert_int_equal(L->groups[3].ops, 0x8);
	assert_near("recompute", L->groups[3].recompute_s, 1e-6);
	lynx_problem_free(&p);
	drop(pr);
}

/* Per-kernel non-saved bytes for every layer of pr: `base` everywhere, `high` at forward
 * kernel `at`; `base` beyond the layers too. */
static void place_non_saved(struct lynx_profile *pr, uint64_t base, uint64_t high, size_t at)
{
	for (size_t l = 0; l < pr->layer_count; l++) {
		struct lynx_profile_kernels *k[2] = {&pr->layers[l].fwd_kernels,
		                                     &pr->layers[l].bwd_kernels};
		for (int d = 0; d < 2; d++) {
			k[d]->non_saved_bytes = calloc(k[d]->count, sizeof(uint64_t));
			assert_non_null(k[d]->non_saved_bytes);
			for (size_t i = 0; i < k[d]->count; i++)
				k[d]->non_saved_bytes[i] = !d && i == at ? high : base;
		}
		/* One backward kernel at base + 1: the backward's most is every op's. */
		pr->layers[l].bwd_kernels.non_saved_bytes[3] = base + 1;
	}
	pr->memory.non_saved_known = true;
	pr->memory.non_saved_outside_bytes = base;
	pr->memory.non_saved_peak_bytes = high;
}

/*
 * Where the non-saved bytes were live (profile.h's non_saved_known): 32 KiB of temporaries
 * only at each layer's first forward kernel. The stage takes each forward op's, the
 * backward's most at every op (when a trainer frees a saved buffer after its last use is
 * not known), and the outside bytes; the checker holds what a plan keeps against the
 * moment's. Keeping everything then peaks lower than against their peak at every moment,
 * which is what an older profile gets.
 */
static void test_the_peak_counts_the_moments_non_saved_bytes(void **state)
{
	struct lynx_profile *pr = tp_stage();
	const struct lynx_profile *ranks[] = {pr};
	struct lynx_problem p;
	struct lynx_plan plan;
	struct lynx_checker_result before, after;
	uint64_t base = (1 << 20) + (64 << 10), high = base + (32 << 10);
	char why[256] = "";

	(void)state;
	build(ranks, 1, NULL, &p);
	assert_false(p.stages[0].non_saved_known);
	assert_int_equal(lynx_planner_none(&p, &plan, NULL, 0), 0);
	if (lynx_checker_replay(&p, &plan, &before, why, sizeof(why)))
		fail_msg("%s", why);
	lynx_problem_free(&p);

	place_non_saved(pr, base, high, 0);
	build(ranks, 1, NULL, &p);
	const struct lynx_problem_stage *st = &p.stages[0];
	assert_true(st->non_saved_known);
	assert_int_equal(st->static_bytes, high);
	assert_int_equal(st->non_saved_outside, base);
	for (uint32_t op = 0; op < p.layer.n_ops; op++) {
		assert_int_equal(st->non_saved_fwd[op], op ? base : high);
		assert_int_equal(st->non_saved_bwd[op], base + 1);
	}
	if (lynx_checker_replay(&p, &plan, &after, why, sizeof(why)))
		fail_msg("%s", why);
	/* Groups of 31 KiB a layer (the profile's layer 1, of twice the bytes, for every
	 * layer), 8 KiB of them its input: at the top layer's first forward op the high bytes
	 * beside two layers and an input, 71,680 bytes; at the backward's start base + 1
	 * beside all three, 95,232. The old prediction: high beside all three. */
	assert_int_equal(after.peak_bytes[0], high + 71680);
	assert_int_equal(before.peak_bytes[0], high + 95232);
	lynx_checker_free(&before);
	lynx_checker_free(&after);
	lynx_plan_free(&plan);
	lynx_problem_free(&p);
	drop(pr);
}

/*
 * A rebuild's scratch, per group: the workspaces its producer run names as the profile says
 * (scratch_bytes, 0 included), or the profile's largest workspace where it does not (a profile
 * from before the key).
 */
static void test_each_group_takes_the_scratch_its_producer_names(void **state)
{
	struct lynx_profile *pr = tp_stage();
	const struct lynx_profile *ranks[] = {pr};
	struct lynx_problem p;

	(void)state;
	pr->memory.largest_workspace_bytes = 64 << 10;
	for (size_t g = 0; g < pr->group_count; g++) {
		struct lynx_profile_group *gr = &pr->groups[g];

		gr->scratch_known = gr->producer != 4;
		gr->scratch_bytes = gr->producer == 3 ? 4096 : 0;
	}
	build(ranks, 1, NULL, &p);
	assert_int_equal(p.layer.n_groups, 5);
	assert_int_equal(p.layer.groups[0].scratch_bytes, 0);
	assert_int_equal(p.layer.groups[1].scratch_bytes, 0);
	assert_int_equal(p.layer.groups[3].scratch_bytes, 4096);
	assert_int_equal(p.layer.groups[4].scratch_bytes, 64 << 10);
	lynx_problem_free(&p);
	drop(pr);
}

/*
 * What each producer run reads (profile.h's reads, reads_freed). Kernel 3's group reads only
 * the layer's input: its deps are that group, not every group before it. Kernel 4's run reads
 * a temporary: without a host link it cannot be rebuilt (ops 0); with one it keeps its ops,
 * and a plan that rebuilds it is lowered to OFFLOAD, as the executor would offload it. A
 * planner's run never leaves it rebuilt.
 */
static void test_what_producer_runs_read_sets_deps_and_what_cannot_be_rebuilt(void **state)
{
	struct lynx_profile *pr = tp_stage();
	const struct lynx_profile *ranks[] = {pr};
	struct lynx_problem p;
	struct lynx_plan plan;
	char why[256] = "";
	const struct lynx_problem_layer *L = &p.layer;

	(void)state;
	for (size_t g = 0; g < pr->group_count; g++) {
		struct lynx_profile_group *gr = &pr->groups[g];
		size_t input = g - g % 5;

		gr->reads_known = true;
		if (gr->producer == 3) {
			gr->reads = malloc(sizeof(*gr->reads));
			assert_non_null(gr->reads);
			gr->reads[0] = (uint32_t)input;
			gr->read_count = 1;
		}
		gr->reads_freed = gr->producer == 4;
	}
	build(ranks, 1, NULL, &p);
	assert_int_equal(L->n_groups, 5);
	assert_int_equal(L->groups[3].deps, 0x1);
	assert_int_equal(L->groups[3].ops, 0x8);
	assert_true(L->groups[4].reads_freed);
	assert_int_equal(L->groups[4].ops, 0);
	assert_int_equal(L->groups[4].deps, 0);
	lynx_problem_free(&p);

	pr->host_link = (struct lynx_profile_host_link){1e10, 1e10, 1e-5};
	build(ranks, 1, NULL, &p);
	assert_int_equal(L->groups[4].ops, 0x10);
	assert_int_equal(lynx_plan_init(&plan, &p, "hand", true), 0);
	lynx_plan_decision(&plan, 0, 0, 4)->action = LYNX_ACTION_RECOMPUTE_ON_DEMAND;
	lynx_plan_decision(&plan, 0, 0, 3)->action = LYNX_ACTION_RECOMPUTE_ON_DEMAND;
	assert_int_equal(lynx_plan_lower(&p, &plan), 1);
	assert_int_equal(lynx_plan_get(&plan, 0, 0, 4)->action, LYNX_ACTION_OFFLOAD);
	assert_int_equal(lynx_plan_get(&plan, 0, 0, 3)->action, LYNX_ACTION_RECOMPUTE_ON_DEMAND);
	assert_int_equal(lynx_plan_lower(&p, &plan), 0);
	lynx_plan_free(&plan);
	/* Full recomputation rebuilds every group it can: the lowered one is offloaded. */
	if (lynx_planner_run(lynx_planner_find("full"), &p, &plan, why, sizeof(why)))
		fail_msg("%s", why);
	for (uint32_t l = 0; l < p.stages[0].layers; l++)
		assert_int_equal(lynx_plan_get(&plan, 0, l, 4)->action, LYNX_ACTION_OFFLOAD);
	lynx_plan_free(&plan);
	lynx_problem_free(&p);
	drop(pr);
}

/*
 * A group that cannot be rebuilt (its run reads a temporary, and no host link) stays until
 * every rebuild that needs it has run, also through another's: kernel 4's group reads
 * kernel 3's, which reads kernel 1's. Kernel 1's then stays until kernel 4's consumer, the
 * layer's last backward op, not only until kernel 3's.
 */
static void test_what_cannot_be_rebuilt_stays_for_every_rebuild_through_it(void **state)
{
	struct lynx_profile *pr = tp_stage();
	const struct lynx_profile *ranks[] = {pr};
	struct lynx_problem p;
	const struct lynx_problem_layer *L = &p.layer;

	(void)state;
	for (size_t g = 0; g < pr->group_count; g++) {
		struct lynx_profile_group *gr = &pr->groups[g];
		size_t base = g - g % 5;

		gr->reads_known = true;
		gr->reads_freed = g % 5 == 1;
		if (g % 5 == 3 || g % 5 == 4) {
			gr->reads = malloc(sizeof(*gr->reads));
			assert_non_null(gr->reads);
			gr->reads[0] = (uint32_t)(base + (g % 5 == 3 ? 1 : 3));
			gr->read_count = 1;
		}
	}
	build(ranks, 1, NULL, &p);
	assert_int_equal(L->n_groups, 5);
	assert_int_equal(L->groups[1].ops, 0);
	assert_int_equal(L->groups[3].deps, 1u << 1);
	assert_int_equal(L->groups[4].deps, 1u << 3);
	assert_true(L->groups[4].consumer < L->groups[3].consumer);
	assert_int_equal(L->groups[1].consumer, L->groups[4].consumer);
	lynx_problem_free(&p);
	drop(pr);
}

/*
 * A group the executor cannot replay is offloaded when dropped, so HEU prices dropping it as
 * copies. On a host link that moves its bytes far slower than a layer computes, HEU's plan
 * beats, at every budget of a ladder where both fit, the plan it makes when the link is
 * nearly free (which drops that group as the cheap rebuild it looks like), both replayed on
 * the slow link; and at some budget it is faster.
 */
static void test_heu_prices_what_it_must_offload_as_copies(void **state)
{
	struct lynx_profile *pr = tp_stage();
	const struct lynx_profile *ranks[] = {pr};
	struct lynx_problem slow, fast;
	struct lynx_plan aware, blind, none;
	struct lynx_checker_result r_aware, r_blind;
	char why[256] = "";
	uint32_t faster = 0, compared = 0;

	(void)state;
	for (size_t g = 0; g < pr->group_count; g++)
		pr->groups[g].reads_known = true,
		pr->groups[g].reads_freed = pr->groups[g].producer == 4;
	pr->host_link = (struct lynx_profile_host_link){1e15, 1e15, 0};
	build(ranks, 1, NULL, &fast);
	pr->host_link = (struct lynx_profile_host_link){1e8, 1e8, 1e-6};
	build(ranks, 1, NULL, &slow);
	assert_int_equal(lynx_planner_none(&slow, &none, NULL, 0), 0);
	for (int pct = 95; pct >= 40; pct -= 5) {
		uint64_t budget =
		        slow.stages[0].static_bytes +
		        (none.stages[0].peak_bytes - slow.stages[0].static_bytes) * pct / 100;

		slow.budget_bytes = fast.budget_bytes = budget;
		if (lynx_planner_run(lynx_planner_find("heu"), &slow, &aware, why, sizeof(why)))
			fail_msg("heu: %s", why);
		if (lynx_planner_run(lynx_planner_find("heu"), &fast, &blind, why, sizeof(why)))
			fail_msg("heu: %s", why);
		if (lynx_checker_replay(&slow, &aware, &r_aware, why, sizeof(why)) ||
		    lynx_checker_replay(&slow, &blind, &r_blind, why, sizeof(why)))
			fail_msg("checker: %s", why);
		printf("# %d%%: aware %.3f us%s, blind %.3f us%s\n", pct, 1e6 * r_aware.step_time_s,
		       r_aware.fits ? "" : " (over)", 1e6 * r_blind.step_time_s,
		       r_blind.fits ? "" : " (over)");
		if (r_aware.fits && r_blind.fits) {
			compared++;
			assert_true(r_aware.step_time_s <= r_blind.step_time_s);
			faster += r_aware.step_time_s < r_blind.step_time_s;
		}
		lynx_checker_free(&r_aware);
		lynx_checker_free(&r_blind);
		lynx_plan_free(&aware);
		lynx_plan_free(&blind);
	}
	assert_true(compared > 0);
	assert_true(faster > 0);
	lynx_plan_free(&none);
	lynx_problem_free(&slow);
	lynx_problem_free(&fast);
	drop(pr);
}

static void test_uses_device_times_and_measured_idle(void **state)
{
	struct lynx_profile *pr = tp_stage();
	const struct lynx_profile *ranks[] = {pr};
	static const uint64_t fwd_ns[6] = {100, 200, 300, 400, 500, 600};
	struct lynx_problem p;
	const struct lynx_problem_layer *L = &p.layer;
	int w;

	for (size_t l = 0; l < 3; l++) {
		pr->layers[l].fwd_kernels.ns = malloc(sizeof(fwd_ns));
		assert_non_null(pr->layers[l].fwd_kernels.ns);
		memcpy(pr->layers[l].fwd_kernels.ns, fwd_ns, sizeof(fwd_ns));
	}
	/* Measured idle: the least over layers and micro-batches. */
	for (size_t i = 0; i < pr->window_count; i++) {
		uint64_t idle = pr->windows[i].kind == LYNX_PROFILE_WINDOW_TP_FWD
		                        ? (pr->windows[i].microbatch ? 60 : 40)
		                        : 800;
		pr->windows[i].idle =
		        (struct lynx_profile_time){LYNX_PROFILE_SOURCE_DEVICE, idle, idle, idle, 1};
	}
	build(ranks, 1, NULL, &p);
	for (int op = 0; op < 6; op++)
		assert_near("timed forward", L->ops[op].fwd_s, fwd_ns[op] * 1e-9);
	assert_near("tp_fwd wait", L->ops[3].wait_fwd_s, 40e-9);
	assert_near("a replay reruns no collective", L->ops[3].rerun_s, 400e-9);
	assert_near("tp_bwd wait", L->ops[2].wait_bwd_s, 800e-9);
	/* Backward untimed: the layer's 8 µs less the 0.8 µs wait, spread over 8 kernels. */
	assert_near("spread backward", L->ops[0].bwd_s, 900e-9);
	assert_near("spread backward", L->ops[1].bwd_s, 1800e-9);
	assert_near("layer backward", L->bwd_s, 8e-6);
	w = lynx_problem_find_window(&p.stages[0], LYNX_WINDOW_TP_FWD, 2, 3);
	assert_true(w >= 0);
	assert_near("window capacity", p.stages[0].windows[w].capacity_s, 40e-9);
	lynx_problem_free(&p);
	drop(pr);
}

/* Each kernel's time is its median over the layers that run the same kernels: one sampled
 * iteration times each kernel once per layer, and the layers repeat the kernels. */
static void test_kernel_times_are_the_median_over_like_layers(void **state)
{
	struct lynx_profile *pr = tp_stage();
	const struct lynx_profile *ranks[] = {pr};
	static const uint64_t layer_ns[3] = {1000, 1300, 1100};
	struct lynx_problem p;

	for (size_t l = 0; l < 3; l++) {
		pr->layers[l].fwd_kernels.ns = malloc(6 * sizeof(uint64_t));
		assert_non_null(pr->layers[l].fwd_kernels.ns);
		for (size_t k = 0; k < 6; k++)
			pr->layers[l].fwd_kernels.ns[k] = layer_ns[l] * (k + 1);
	}
	build(ranks, 1, NULL, &p); /* layer 1 is the one mapped: it holds the most bytes */
	for (uint32_t op = 0; op < 6; op++)
		assert_near("median forward", p.layer.ops[op].fwd_s, 1100e-9 * (op + 1));
	lynx_problem_free(&p);
	/* A layer of other kernels is no sample of these. */
	set_kernels(&pr->layers[2].fwd_kernels, 'x', 6);
	build(ranks, 1, NULL, &p);
	assert_near("lower median of two", p.layer.ops[0].fwd_s, 1000e-9);
	lynx_problem_free(&p);
	drop(pr);
}

/* x times a factor within 1 +- pct/100, drawn from *seed (a 64-bit LCG). */
static uint64_t noisy(uint64_t x, uint64_t *seed, double pct)
{
	*seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
	return (uint64_t)((double)x * (1 + pct / 100 * ((double)(*seed >> 11) / 0x1p53 * 2 - 1)));
}

/* The point of the solo grid (4 per doubling of seconds) nearest x ns. */
static uint64_t on_grid(uint64_t x)
{
	return (uint64_t)llround(exp2(round(log2((double)x * 1e-9) * 4) / 4) * 1e9);
}

/*
 * Two TP peers of one stage, as a GPU times them: every forward kernel within 2% of its true
 * time, each rank with its own noise (the true times lie on the solo grid: noise near a grid
 * boundary can still split peers, as docs/measurements.md counts); the backward host-timed,
 * alike; each collective's idle the transfer (1 µs) plus, when the peer came later, the wait
 * for it.
 */
static struct lynx_profile *timed_peer(uint64_t seed)
{
	struct lynx_profile *pr = tp_stage();

	for (size_t l = 0; l < pr->layer_count; l++) {
		struct lynx_profile_kernels *k = &pr->layers[l].fwd_kernels;

		k->ns = malloc(k->count * sizeof(uint64_t));
		assert_non_null(k->ns);
		for (size_t i = 0; i < k->count; i++)
			k->ns[i] = noisy(on_grid((i + 2) * 1000), &seed, 2);
	}
	for (size_t w = 0; w < pr->window_count; w++) {
		uint64_t idle = 1000 + (w % 3 ? noisy(500, &seed, 100) : 0);

		pr->windows[w].idle =
		        (struct lynx_profile_time){LYNX_PROFILE_SOURCE_DEVICE, idle, idle, idle, 1};
	}
	return pr;
}

static void assert_same_times(const struct lynx_problem *a, const struct lynx_problem *b)
{
	assert_int_equal(a->layer.n_ops, b->layer.n_ops);
	for (uint32_t op = 0; op < a->layer.n_ops; op++) {
		const struct lynx_problem_op *x = &a->layer.ops[op], *y = &b->layer.ops[op];

		assert_true(x->fwd_s == y->fwd_s && x->bwd_s == y->bwd_s &&
		            x->wait_fwd_s == y->wait_fwd_s && x->wait_bwd_s == y->wait_bwd_s);
	}
	assert_int_equal(a->stages[0].n_windows, b->stages[0].n_windows);
	for (uint32_t w = 0; w < a->stages[0].n_windows; w++)
		assert_true(a->stages[0].windows[w].capacity_s ==
		            b->stages[0].windows[w].capacity_s);
}

/*
 * Peers that plan alone (LYNX_OUT per process) reach one problem, and so one plan, from
 * their own noisy figures: windows are the least idle, which both measure alike, and solo
 * times are rounded to a coarse grid. Shared planning keeps the figures as measured.
 */
static void test_peers_planning_alone_agree_despite_noise(void **state)
{
	struct lynx_profile *a = timed_peer(1), *b = timed_peer(2);
	const struct lynx_profile *ra[] = {a}, *rb[] = {b};
	struct lynx_problem_options opt = {.solo = true};
	struct lynx_problem pa, pb;
	struct lynx_plan plan_a, plan_b;
	char why[256];
	char *ja, *jb;
	bool differ = false;

	build(ra, 1, NULL, &pa);
	build(rb, 1, NULL, &pb);
	opt.budget_bytes = pa.stages[0].static_bytes + 60000;
	for (uint32_t op = 0; op < pa.layer.n_ops; op++)
		differ |= pa.layer.ops[op].fwd_s != pb.layer.ops[op].fwd_s;
	assert_true(differ); /* the noise shows as measured */
	lynx_problem_free(&pa);
	lynx_problem_free(&pb);

	build(ra, 1, &opt, &pa);
	build(rb, 1, &opt, &pb);
	assert_same_times(&pa, &pb);
	if (lynx_planner_run(lynx_planner_find("heu"), &pa, &plan_a, why, sizeof(why)) ||
	    lynx_planner_run(lynx_planner_find("heu"), &pb, &plan_b, why, sizeof(why)))
		fail_msg("heu: %s", why);
	plan_a.search_time_s = plan_b.search_time_s = 0; /* wall time, not a decision */
	ja = lynx_plan_to_json(&plan_a, &pa);
	jb = lynx_plan_to_json(&plan_b, &pb);
	assert_non_null(ja);
	assert_non_null(jb);
	assert_string_equal(ja, jb);
	free(ja);
	free(jb);
	lynx_plan_free(&plan_a);
	lynx_plan_free(&plan_b);
	lynx_problem_free(&pa);
	lynx_problem_free(&pb);
	drop(a);
	drop(b);
}

static void test_orders_pipeline_stages_by_warmup(void **state)
{
	/* p = 2, m = 4: stage 0 runs one warm-up forward. Two ranks of stage 0, the second
	 * slower; given last-stage first. */
	struct lynx_profile *last = stage(2, 6, 8, 4, 0, 1000);
	struct lynx_profile *fast = stage(3, 6, 8, 4, 1, 2000);
	struct lynx_profile *slow = stage(3, 6, 8, 4, 1, 3000);
	const struct lynx_profile *ranks[] = {last, fast, slow};
	const char *names[] = {"last.json", "fast.json", "slow.json"};
	struct lynx_problem_options opt = {.profile_names = names};
	struct lynx_problem p;

	for (size_t l = 0; l < 3; l++)
		slow->layers[l].forward = host(9 * US);
	for (uint64_t i = 0; i < 3; i++)
		add_window(slow, LYNX_PROFILE_WINDOW_PP_RECV_BWD, -1, (int32_t)i, -1, -1,
		           (uint64_t[]){500, 300, 700}[i]);
	add_window(fast, LYNX_PROFILE_WINDOW_PP_RECV_BWD, -1, 0, -1, -1, 100);
	add_window(last, LYNX_PROFILE_WINDOW_PP_RECV_FWD, -1, 0, -1, -1, 0);
	add_window(last, LYNX_PROFILE_WINDOW_DP_GRAD, -1, -1, -1, -1, 1000);
	add_window(last, LYNX_PROFILE_WINDOW_DP_GRAD, -1, -1, -1, -1, 2000);
	last->memory.peak_bytes += 1 << 20; /* the largest peak: the default budget */
	build(ranks, 3, &opt, &p);
	assert_int_equal(p.n_stages, 2);
	assert_int_equal(p.model.pp, 2);
	assert_int_equal(p.model.layers, 5);
	assert_int_equal(p.budget_bytes, last->memory.peak_bytes);
	assert_int_equal(p.stages[0].layers, 3);
	assert_int_equal(p.stages[0].first_layer, 0);
	assert_int_equal(p.stages[0].profile_first_layer, 0);
	assert_int_equal(p.stages[0].warmup, 1);
	assert_int_equal(p.stages[0].inflight, 2);
	assert_int_equal(p.stages[1].layers, 2);
	assert_int_equal(p.stages[1].first_layer, 3);
	assert_int_equal(p.stages[1].profile_first_layer, 0);
	assert_int_equal(p.stages[1].warmup, 0);
	assert_int_equal(p.stages[1].inflight, 1);
	/* Stage 0 is the slower rank: its steady-state gradient receive, the least idle. */
	assert_near("recv_bwd", p.stages[0].recv_bwd_s, 300e-9);
	assert_true(p.stages[0].recv_fwd_s == 0);
	assert_true(lynx_problem_find_window(&p.stages[0], LYNX_WINDOW_PP_RECV_BWD, -1, -1) >= 0);
	assert_int_equal(lynx_problem_find_window(&p.stages[0], LYNX_WINDOW_PP_RECV_FWD, -1, -1),
	                 -1);
	/* The slowest stage's layer is the layer: 9 µs forwards. */
	assert_near("slowest layer", p.layer.fwd_s, 9e-6);
	/* Stage 1: an unmeasured receive is still a window; the gradient reductions add up. */
	int w = lynx_problem_find_window(&p.stages[1], LYNX_WINDOW_PP_RECV_FWD, -1, -1);
	assert_true(w >= 0);
	assert_true(p.stages[1].windows[w].capacity_s == 0);
	assert_near("dp", p.stages[1].grad_reduce_s, 3e-6);
	w = lynx_problem_find_window(&p.stages[1], LYNX_WINDOW_DP_GRAD, -1, -1);
	assert_true(w >= 0);
	assert_near("dp window", p.stages[1].windows[w].capacity_s, 3e-6);
	lynx_problem_free(&p);

	/* A budget given is the budget. */
	opt.budget_bytes = 5 << 20;
	build(ranks, 3, &opt, &p);
	assert_int_equal(p.budget_bytes, 5 << 20);
	lynx_problem_free(&p);
	drop(last);
	drop(fast);
	drop(slow);
}

/*
 * One micro-batch (or GPipe): every stage runs as many warm-up forwards as the others, so
 * only the stages the profiles name order them. Given last stage first.
 */
static void test_orders_pipeline_stages_as_the_profiles_name_them(void **state)
{
	struct lynx_profile *last = stage(2, 6, 8, 1, 0, 1000);
	struct lynx_profile *middle = stage(3, 6, 8, 1, 0, 1500);
	struct lynx_profile *first = stage(3, 6, 8, 1, 0, 2000);
	const struct lynx_profile *ranks[] = {last, middle, first};
	const char *names[] = {"last.json", "middle.json", "first.json"};
	struct lynx_problem_options opt = {.profile_names = names};
	struct lynx_problem p;
	char why[256];

	first->pipeline_stage = 0;
	middle->pipeline_stage = 1;
	last->pipeline_stage = 2;
	first->pipeline_stages = middle->pipeline_stages = last->pipeline_stages = 3;
	add_window(first, LYNX_PROFILE_WINDOW_PP_RECV_BWD, -1, 0, -1, -1, 100);
	add_window(middle, LYNX_PROFILE_WINDOW_PP_RECV_FWD, -1, 0, -1, -1, 100);
	add_window(middle, LYNX_PROFILE_WINDOW_PP_RECV_BWD, -1, 0, -1, -1, 100);
	add_window(last, LYNX_PROFILE_WINDOW_PP_RECV_FWD, -1, 0, -1, -1, 100);
	build(ranks, 3, &opt, &p);
	assert_int_equal(p.n_stages, 3);
	assert_int_equal(p.stages[0].layers, 3);
	assert_int_equal(p.stages[0].first_layer, 0);
	assert_int_equal(p.stages[1].first_layer, 3);
	assert_int_equal(p.stages[2].layers, 2);
	assert_int_equal(p.stages[2].first_layer, 6);
	for (uint32_t s = 0; s < 3; s++)
		assert_int_equal(p.stages[s].inflight, 1);
	lynx_problem_free(&p);

	/* Without the names, the same profiles cannot be ordered: refused, with the reason. */
	first->pipeline_stages = middle->pipeline_stages = last->pipeline_stages = 0;
	assert_int_equal(lynx_problem_from_profile(ranks, 3, &opt, &p, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "stage"));
	/* Names that disagree on the stage count: refused. */
	first->pipeline_stages = middle->pipeline_stages = 3;
	last->pipeline_stages = 4;
	assert_int_equal(lynx_problem_from_profile(ranks, 3, &opt, &p, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "middle.json names 3 pipeline stages, last.json 4"));
	drop(last);
	drop(middle);
	drop(first);
}

/* A budget in percent: each stage gets that share of its own profile's peak, and HEU holds
 * each stage to its own. */
static void test_a_percent_budget_is_each_stages_share_of_its_own_peak(void **state)
{
	struct lynx_profile *first = stage(3, 6, 8, 4, 1, 3 << 20);
	struct lynx_profile *last = stage(3, 6, 8, 4, 0, 1 << 20);
	const struct lynx_profile *ranks[] = {first, last};
	struct lynx_problem_options opt = {.budget_percent = 80};
	struct lynx_problem p;
	struct lynx_checker_result r;
	struct lynx_plan plan;
	char why[256];

	first->pipeline_stage = 0;
	last->pipeline_stage = 1;
	first->pipeline_stages = last->pipeline_stages = 2;
	add_window(first, LYNX_PROFILE_WINDOW_PP_RECV_BWD, -1, 0, -1, -1, 100);
	add_window(last, LYNX_PROFILE_WINDOW_PP_RECV_FWD, -1, 0, -1, -1, 100);
	build(ranks, 2, &opt, &p);
	assert_int_equal(p.stages[0].budget_bytes,
	                 first->memory.peak_bytes / 100 * 80 +
	                         first->memory.peak_bytes % 100 * 80 / 100);
	assert_int_equal(p.stages[1].budget_bytes,
	                 last->memory.peak_bytes / 100 * 80 +
	                         last->memory.peak_bytes % 100 * 80 / 100);
	assert_int_equal(p.budget_bytes, p.stages[0].budget_bytes);
	assert_int_equal(lynx_problem_stage_budget(&p, 1), p.stages[1].budget_bytes);
	if (lynx_planner_run(lynx_planner_find("heu"), &p, &plan, why, sizeof(why)))
		fail_msg("heu: %s", why);
	if (lynx_checker_replay(&p, &plan, &r, why, sizeof(why)))
		fail_msg("checker: %s", why);
	assert_true(r.fits);
	for (uint32_t s = 0; s < 2; s++)
		assert_true(r.peak_bytes[s] <= lynx_problem_stage_budget(&p, s));
	/* The last stage was held to its own budget, below the first stage's. */
	assert_true(r.peak_bytes[1] > 0 && r.peak_bytes[1] < p.stages[0].budget_bytes);
	lynx_checker_free(&r);
	lynx_plan_free(&plan);
	lynx_problem_free(&p);
	drop(first);
	drop(last);
}

static void test_embedding_and_head_from_the_odd_layers(void **state)
{
	struct lynx_profile *pr = stage(5, 6, 8, 2, 0, 1000);
	const struct lynx_profile *ranks[] = {pr};
	struct lynx_problem p;

	/* Layer 0 the embedding (2 and 2 kernels), layer 4 the head (3 and 4). */
	set_kernels(&pr->layers[0].fwd_kernels, 'e', 2);
	set_kernels(&pr->layers[0].bwd_kernels, 'e', 2);
	set_kernels(&pr->layers[4].fwd_kernels, 'h', 3);
	set_kernels(&pr->layers[4].bwd_kernels, 'h', 4);
	pr->layers[0].forward = host(2 * US);
	pr->layers[0].saved_bytes = 777;
	pr->layers[4].backward = host(40 * US);
	pr->layers[4].saved_bytes = 999;
	five_groups(pr, 2, 1);
	build(ranks, 1, NULL, &p);
	assert_int_equal(p.stages[0].layers, 3);
	assert_int_equal(p.stages[0].profile_first_layer, 1); /* after the embedding */
	assert_true(p.stages[0].embedding.present);
	assert_near("embedding forward", p.stages[0].embedding.fwd_s, 2e-6);
	assert_int_equal(p.stages[0].embedding.act_bytes, 777);
	assert_true(p.stages[0].head.present);
	assert_near("head backward", p.stages[0].head.bwd_s, 40e-6);
	assert_int_equal(p.stages[0].head.act_bytes, 999);
	assert_int_equal(p.layer.n_ops, 6);
	assert_int_equal(p.layer.n_groups, 5);
	lynx_problem_free(&p);
	drop(pr);
}

/* Ops contiguous in kernels; groups rebuild contiguous runs of ops, after their deps. */
static void check_layer_rules(const struct lynx_problem_layer *L)
{
	for (uint32_t g = 0; g < L->n_groups; g++) {
		const struct lynx_problem_group *gr = &L->groups[g];
		uint32_t ops = gr->ops;

		assert_true(gr->deps < (1u << g)); /* deps before dependents */
		if (!ops)
			continue;
		assert_int_equal(31 - __builtin_clz(ops), gr->producer);
		ops >>= __builtin_ctz(ops);
		assert_int_equal(ops & (ops + 1), 0); /* one run */
		for (uint32_t h = 0; h < L->n_groups; h++)
			assert_true(L->groups[h].ops == gr->ops || !(L->groups[h].ops & gr->ops));
	}
}

/* Whether op name ("40.f40", "40-45.f40") starts at kernel k. */
static bool starts_at(const char *name, unsigned k)
{
	char *end;

	return strtoul(name, &end, 10) == k && (*end == '.' || *end == '-');
}

/*
 * Every buffer of the profile's layer `layer` maps to a group (those of 0 bytes to none), the
 * buffers of each group add up to its bytes and no group is without a buffer.
 */
static void check_buffers(const struct lynx_profile *pr, uint32_t layer,
                          const struct lynx_problem_layer *L)
{
	uint64_t sum[LYNX_PROBLEM_MAX_GROUPS] = {0};
	uint32_t k = 0;

	for (size_t g = 0; g < pr->group_count; g++) {
		int16_t to;

		if (pr->groups[g].layer != layer)
			continue;
		assert_true(k < L->n_buffers);
		to = L->buffer_group[k++];
		if (!pr->groups[g].bytes) {
			assert_int_equal(to, -1);
			continue;
		}
		assert_true(to >= 0 && (uint32_t)to < L->n_groups);
		sum[to] += pr->groups[g].bytes;
	}
	assert_int_equal(k, L->n_buffers);
	for (; k < LYNX_PROBLEM_MAX_BUFFERS; k++)
		assert_int_equal(L->buffer_group[k], -1);
	for (uint32_t g = 0; g < L->n_groups; g++)
		assert_int_equal(sum[g], L->groups[g].bytes);
}

static void test_merges_kernels_and_groups_past_the_limits(void **state)
{
	struct lynx_profile *pr = stage(2, 80, 90, 2, 0, 1000);
	const struct lynx_profile *ranks[] = {pr};
	struct lynx_problem p;
	uint64_t bytes = 0, in_problem = 0;
	double fwd = 0;
	bool at40 = false, at70 = false;

	add_group(pr, 0, 100, -1, 89);
	for (int32_t g = 0; g < 50; g++) {
		add_group(pr, 0, 1000 + (uint64_t)g, g, 88 - g);
		add_group(pr, 0, 10, g, 88 - g); /* a twin: same producer and consumer */
		if (g == 25)
			add_group(pr, 0, 0, g, 88 - g); /* empty: buffer 53, in no group */
	}
	for (size_t g = 0; g < pr->group_count; g++)
		bytes += pr->groups[g].bytes;
	add_window(pr, LYNX_PROFILE_WINDOW_TP_FWD, 0, 0, 0, 40, 0);
	add_window(pr, LYNX_PROFILE_WINDOW_TP_FWD, 0, 0, 1, 70, 0);
	build(ranks, 1, NULL, &p);
	assert_int_equal(p.layer.n_ops, LYNX_PROBLEM_MAX_OPS);
	assert_true(p.layer.n_groups <= LYNX_PROBLEM_MAX_GROUPS);
	for (uint32_t op = 0; op < p.layer.n_ops; op++) {
		fwd += p.layer.ops[op].fwd_s;
		at40 = at40 || starts_at(p.layer.ops[op].name, 40);
		at70 = at70 || starts_at(p.layer.ops[op].name, 70);
	}
	assert_true(at40 && at70); /* ops start at the collectives */
	assert_near("forward kept", fwd, 80e-6);
	for (uint32_t g = 0; g < p.layer.n_groups; g++)
		in_problem += p.layer.groups[g].bytes;
	assert_int_equal(in_problem, bytes);
	check_buffers(pr, 0, &p.layer);
	assert_int_equal(p.layer.n_buffers, 102);
	assert_int_equal(p.layer.buffer_group[53], -1);
	check_layer_rules(&p.layer);
	/* Every layer of the stage has the collectives' windows at their ops. */
	for (uint32_t op = 0; op < p.layer.n_ops; op++)
		if (!strncmp(p.layer.ops[op].name, "40-", 3) ||
		    !strncmp(p.layer.ops[op].name, "70-", 3))
			assert_true(lynx_problem_find_window(&p.stages[0], LYNX_WINDOW_TP_FWD, 1,
			                                     (int32_t)op) >= 0);
	assert_int_equal(p.stages[0].n_windows, 2 * 2);
	lynx_problem_free(&p);
	drop(pr);
}

/* Buffers in a layer's allocation order, not producer order, each its own group: buffer k's
 * group is the one with its bytes and producer, after the groups were sorted by producer. */
static void test_maps_each_buffer_to_its_group(void **state)
{
	struct lynx_profile *pr = stage(2, 6, 8, 2, 0, 1000);
	const struct lynx_profile *ranks[] = {pr};
	/* Layer 1's buffers (it holds the most bytes): bytes, producer kernel, its group. */
	static const struct {
		uint64_t bytes;
		int32_t producer;
		int16_t group;
	} buf[] = {{300, 4, 4}, {100, -1, 0}, {200, 2, 2}, {400, 1, 1}, {0, 3, -1}, {500, 2, 3}};
	struct lynx_problem p;
	const struct lynx_problem_layer *L = &p.layer;

	add_group(pr, 0, 50, 0, 7); /* layer 0's: not counted in layer 1's positions */
	add_group(pr, 0, 60, 3, 2);
	for (size_t k = 0; k < 6; k++)
		add_group(pr, 1, buf[k].bytes, buf[k].producer, 3);
	build(ranks, 1, NULL, &p);
	assert_int_equal(L->n_groups, 5);
	assert_int_equal(L->n_buffers, 6);
	for (uint32_t k = 0; k < 6; k++) {
		int16_t g = L->buffer_group[k];

		assert_int_equal(g, buf[k].group);
		if (g < 0)
			continue;
		assert_int_equal(L->groups[g].bytes, buf[k].bytes);
		assert_int_equal(L->groups[g].producer, buf[k].producer); /* one op per kernel */
	}
	check_buffers(pr, 1, L);
	lynx_problem_free(&p);
	drop(pr);
}

/*
 * With granule_bytes (the executor's VMM granularity) and no packs (LYNX_PACK=off), a buffer
 * below it is no group: the executor keeps it, so the plan must count it as kept. It maps to
 * no group, and its bytes, in every layer of the stage and every micro-batch held at once,
 * are static memory.
 */
static void test_buffers_below_a_granule_count_as_kept(void **state)
{
	struct lynx_profile *pr = stage(2, 6, 8, 2, 0, 1000);
	const struct lynx_profile *ranks[] = {pr};
	static const uint64_t bytes[] = {300, 100, 200, 400, 0, 500};
	struct lynx_problem_options opt = {.granule_bytes = 256, .unpacked = true};
	struct lynx_problem p, q;

	add_group(pr, 0, 50, 0, 7);
	for (size_t k = 0; k < 6; k++)
		add_group(pr, 1, bytes[k], (int32_t)k - 1, 3);
	build(ranks, 1, NULL, &p);
	build(ranks, 1, &opt, &q);
	assert_int_equal(p.layer.n_groups, 5);
	assert_int_equal(q.layer.n_groups, 3); /* 300, 400 and 500 bytes */
	for (uint32_t k = 0; k < 6; k++) {
		int16_t g = q.layer.buffer_group[k];

		if (bytes[k] < 256) {
			assert_int_equal(g, -1);
			continue;
		}
		assert_true(g >= 0);
		assert_int_equal(q.layer.groups[g].bytes, bytes[k]);
	}
	/* 100 + 200 bytes a layer, 2 layers, 1 micro-batch held (no pipeline). */
	assert_int_equal(q.stages[0].inflight, 1);
	assert_int_equal(q.stages[0].static_bytes, p.stages[0].static_bytes + 300 * 2);
	/* A plan names its problem's granule; read against another granule it is refused. */
	struct lynx_plan plan, back;
	char why_plan[256];
	assert_int_equal(
	        lynx_planner_run(lynx_planner_find("heu"), &q, &plan, why_plan, sizeof(why_plan)),
	        0);
	char *text = lynx_plan_to_json(&plan, &q);
	assert_non_null(text);
	assert_int_equal(lynx_plan_json_granule(text), 256);
	assert_int_equal(lynx_plan_from_json(text, &q, &back, why_plan, sizeof(why_plan)), 0);
	lynx_plan_free(&back);
	assert_int_equal(lynx_plan_from_json(text, &p, &back, why_plan, sizeof(why_plan)), -EINVAL);
	assert_non_null(strstr(why_plan, "granule_bytes: the plan was made with buffers below "
	                                 "256 bytes as no groups, this problem with 0"));
	free(text);
	lynx_plan_free(&plan);
	/* A budget below that says why: the activations the executor cannot evict. */
	char why[512] = "";
	opt.budget_bytes = q.stages[0].static_bytes - 1;
	lynx_problem_free(&q);
	assert_int_equal(lynx_problem_from_profile(ranks, 1, &opt, &q, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "of activations smaller than the device's 256 B VMM granule, "
	                            "which Lynx cannot evict"));
	lynx_problem_free(&p);
	drop(pr);
}

/*
 * With packs (the default), a layer's buffers below the granule that together are worth a
 * pack are groups, as the executor packs them: those whose runs can be replayed in one, the
 * ones that read a temporary in another (so that they do not make the others unreplayable).
 * The layer's input stays out: the layer below produces it. A pack is rebuilt by rerunning
 * each member's own run, not the big groups' runs between them.
 */
static void test_buffers_below_a_granule_are_packed_into_groups(void **state)
{
	struct lynx_profile *pr = stage(2, 6, 8, 2, 0, 1000);
	const struct lynx_profile *ranks[] = {pr};
	/* The input (800), then one buffer per kernel 0-4; 1500 reads a temporary. */
	static const uint64_t bytes[] = {800, 1000, 1500, 5000, 2000, 6000};
	struct lynx_problem_options plain = {.budget_bytes = 64 << 20},
	                            opt = {.budget_bytes = 64 << 20, .granule_bytes = 4096};
	struct lynx_problem p, q;

	add_group(pr, 0, 50, 0, 7);
	for (size_t k = 0; k < 6; k++) {
		add_group(pr, 1, bytes[k], (int32_t)k - 1, 3);
		pr->groups[pr->group_count - 1].reads_freed = k == 2;
	}
	build(ranks, 1, &plain, &p);
	build(ranks, 1, &opt, &q);
	const int16_t *bg = q.layer.buffer_group;
	assert_int_equal(q.layer.n_groups, 4); /* 5000, 6000, 1000 + 2000, 1500 */
	assert_int_equal(bg[0], -1);
	assert_true(bg[1] >= 0 && bg[2] >= 0 && bg[3] >= 0 && bg[5] >= 0);
	assert_int_equal(bg[1], bg[4]);
	assert_true(bg[2] != bg[1]);
	assert_int_equal(q.layer.groups[bg[1]].bytes, 3000);
	assert_false(q.layer.groups[bg[1]].reads_freed);
	assert_int_equal(q.layer.groups[bg[2]].bytes, 1500);
	assert_true(q.layer.groups[bg[2]].reads_freed);
	assert_int_equal(q.layer.groups[bg[1]].ops, (1u << 0) | (1u << 3));
	assert_int_equal(q.layer.groups[bg[1]].producer, 3);
	/* The input, in both layers: static. */
	assert_int_equal(q.stages[0].static_bytes, p.stages[0].static_bytes + 800 * 2);
	/* A plan for it fits and reads back. */
	struct lynx_plan plan;
	char why[256];
	assert_int_equal(lynx_planner_run(lynx_planner_find("heu"), &q, &plan, why, sizeof(why)),
	                 0);
	lynx_plan_free(&plan);
	lynx_problem_free(&p);
	lynx_problem_free(&q);
	drop(pr);
}

/* A layer of more buffers than LYNX_PROBLEM_MAX_BUFFERS: the first ones are mapped. */
static void test_maps_at_most_max_buffers(void **state)
{
	struct lynx_profile *pr = stage(1, 6, 8, 2, 0, 1000);
	const struct lynx_profile *ranks[] = {pr};
	struct lynx_problem p;
	const struct lynx_problem_layer *L = &p.layer;

	for (int32_t k = 0; k < LYNX_PROBLEM_MAX_BUFFERS + 44; k++)
		add_group(pr, 0, 8, k % 6, 8 - 1 - k % 8);
	build(ranks, 1, NULL, &p);
	assert_int_equal(L->n_buffers, LYNX_PROBLEM_MAX_BUFFERS);
	for (uint32_t k = 0; k < L->n_buffers; k++) {
		int16_t g = L->buffer_group[k];

		assert_true(g >= 0 && (uint32_t)g < L->n_groups);
		assert_int_equal(L->groups[g].producer, (int32_t)(k % 6));
	}
	lynx_problem_free(&p);
	drop(pr);
}

/*
 * Several collectives per layer segment: each is mapped to the op of its window, by its
 * ordinal, and the map agrees with the stage's windows. 8 forward kernels (8 ops) and 10
 * backward kernels; backward kernel i maps to op 7 - round(7i/9).
 */
static void test_maps_each_collective_to_its_op(void **state)
{
	struct lynx_profile *pr = stage(2, 8, 10, 2, 0, 1000);
	const struct lynx_profile *ranks[] = {pr};
	/* Forward: before kernels 2, 5 and after the last (op 7). Backward: before the first
	 * kernel (op 7), after kernels 3 (op 5), 3 again and 8 (op 1). */
	static const int32_t fwd_kernel[] = {2, 5, 8}, fwd_op[] = {2, 5, 7};
	static const int32_t bwd_kernel[] = {0, 4, 4, 9}, bwd_op[] = {7, 5, 5, 1};
	struct lynx_problem p, m;
	struct lynx_model_desc md;
	const struct lynx_problem_layer *L = &p.layer;
	char why[256] = "";
	uint32_t n_fwd = 0, n_bwd = 0;

	add_group(pr, 0, 100, -1, 9);
	add_group(pr, 1, 100, -1, 9);
	for (int32_t l = 0; l < 2; l++)
		for (int32_t mb = 0; mb < 2; mb++) {
			for (int32_t k = 0; k < 3; k++)
				add_window(pr, LYNX_PROFILE_WINDOW_TP_FWD, l, mb, k, fwd_kernel[k],
				           0);
			for (int32_t k = 0; k < 4; k++)
				add_window(pr, LYNX_PROFILE_WINDOW_TP_BWD, l, mb, k, bwd_kernel[k],
				           0);
		}
	add_window(pr, LYNX_PROFILE_WINDOW_DP_GRAD, -1, -1, -1, -1, 0); /* not a TP collective */
	/* The counts per layer segment, from the profile: layer 0, micro-batch 0. */
	for (size_t w = 0; w < pr->window_count; w++)
		if (pr->windows[w].layer == 0 && pr->windows[w].microbatch == 0) {
			n_fwd += pr->windows[w].kind == LYNX_PROFILE_WINDOW_TP_FWD;
			n_bwd += pr->windows[w].kind == LYNX_PROFILE_WINDOW_TP_BWD;
		}
	build(ranks, 1, NULL, &p);
	assert_int_equal(L->n_ops, 8);
	assert_int_equal(L->n_tp_fwd, n_fwd);
	assert_int_equal(L->n_tp_bwd, n_bwd);
	for (uint32_t k = 0; k < LYNX_PROBLEM_MAX_COLLECTIVES; k++) {
		if (k >= L->n_tp_fwd) {
			assert_int_equal(L->tp_fwd_op[k], -1);
		} else {
			assert_int_equal(L->tp_fwd_op[k], fwd_op[k]);
			assert_true(lynx_problem_find_window(&p.stages[0], LYNX_WINDOW_TP_FWD, 0,
			                                     L->tp_fwd_op[k]) >= 0);
		}
		if (k >= L->n_tp_bwd) {
			assert_int_equal(L->tp_bwd_op[k], -1);
		} else {
			assert_int_equal(L->tp_bwd_op[k], bwd_op[k]);
			assert_true(lynx_problem_find_window(&p.stages[0], LYNX_WINDOW_TP_BWD, 0,
			                                     L->tp_bwd_op[k]) >= 0);
		}
	}
	/* And every TP window is some collective's. */
	for (uint32_t w = 0; w < p.stages[0].n_windows; w++) {
		const struct lynx_window *win = &p.stages[0].windows[w];
		const int8_t *map = win->kind == LYNX_WINDOW_TP_FWD ? L->tp_fwd_op : L->tp_bwd_op;
		uint32_t n = win->kind == LYNX_WINDOW_TP_FWD ? L->n_tp_fwd : L->n_tp_bwd;
		bool found = false;

		if (win->kind != LYNX_WINDOW_TP_FWD && win->kind != LYNX_WINDOW_TP_BWD)
			continue;
		for (uint32_t k = 0; k < n; k++)
			found = found || map[k] == win->op;
		assert_true(found);
	}
	lynx_problem_free(&p);
	drop(pr);

	/* A model has no recorded collectives. */
	lynx_preset_fill_model(lynx_preset_find_model("gpt-1.3b"), &md);
	md.pp = 4;
	md.global_batch = 8;
	assert_int_equal(lynx_problem_from_model(&md, lynx_preset_find_cluster("a100-nvlink"), NULL,
	                                         &m, why, sizeof(why)),
	                 0);
	assert_int_equal(m.layer.n_tp_fwd, 0);
	assert_int_equal(m.layer.n_tp_bwd, 0);
	for (uint32_t k = 0; k < LYNX_PROBLEM_MAX_COLLECTIVES; k++)
		assert_true(m.layer.tp_fwd_op[k] == -1 && m.layer.tp_bwd_op[k] == -1);
	lynx_problem_free(&m);
}

/* p = 2: stage 0's profile starts with the embedding, so its problem layers start at its
 * profile's layer 1; stage 1's at layer 0. */
static void test_stage_layers_in_the_profile(void **state)
{
	struct lynx_profile *first = stage(3, 6, 8, 4, 1, 1000);
	struct lynx_profile *last = stage(2, 6, 8, 4, 0, 1000);
	const struct lynx_profile *ranks[] = {last, first};
	struct lynx_problem p;

	set_kernels(&first->layers[0].fwd_kernels, 'e', 2);
	set_kernels(&first->layers[0].bwd_kernels, 'e', 2);
	add_window(last, LYNX_PROFILE_WINDOW_PP_RECV_FWD, -1, 0, -1, -1, 0);
	add_window(first, LYNX_PROFILE_WINDOW_PP_RECV_BWD, -1, 0, -1, -1, 0);
	build(ranks, 2, NULL, &p);
	assert_int_equal(p.n_stages, 2);
	assert_true(p.stages[0].embedding.present);
	assert_int_equal(p.stages[0].layers, 2);
	assert_int_equal(p.stages[0].profile_first_layer, 1);
	assert_false(p.stages[1].embedding.present);
	assert_int_equal(p.stages[1].layers, 2);
	assert_int_equal(p.stages[1].first_layer, 2);
	assert_int_equal(p.stages[1].profile_first_layer, 0);
	lynx_problem_free(&p);
	drop(first);
	drop(last);
}

/*
 * Megatron's block recompute: the trainer reruns the forward of each stage's first layer in
 * its backward (6 + 8 kernels there, and only the layer's input kept). That layer joins the
 * part before the planned layers, on the first stage after its embedding and on the last
 * one alone; the others are planned. A rerunning layer after a planned one is refused.
 */
static void test_plans_around_the_layers_the_trainer_recomputes(void **state)
{
	struct lynx_profile *first = stage(4, 6, 8, 4, 1, 1000);
	struct lynx_profile *last = stage(3, 6, 8, 4, 0, 1000);
	const struct lynx_profile *ranks[] = {first, last};
	struct lynx_problem p;
	char why[256];

	(void)state;
	set_kernels(&first->layers[0].fwd_kernels, 'e', 2);
	set_kernels(&first->layers[0].bwd_kernels, 'e', 2);
	first->layers[0].saved_bytes = 512;
	for (int s = 0; s < 2; s++) {
		struct lynx_profile_layer *l = &(s ? last : first)->layers[s ? 0 : 1];
		l->reruns_forward = true;
		set_kernels(&l->bwd_kernels, 'b', 14);
		l->backward = host(14 * US);
		l->saved_bytes = 4096;
	}
	add_window(last, LYNX_PROFILE_WINDOW_PP_RECV_FWD, -1, 0, -1, -1, 0);
	add_window(first, LYNX_PROFILE_WINDOW_PP_RECV_BWD, -1, 0, -1, -1, 0);
	build(ranks, 2, NULL, &p);
	assert_int_equal(p.stages[0].profile_first_layer, 2);
	assert_int_equal(p.stages[0].layers, 2);
	assert_int_equal(p.stages[1].profile_first_layer, 1);
	assert_int_equal(p.stages[1].layers, 2);
	assert_int_equal(p.stages[1].first_layer, 2);
	for (int s = 0; s < 2; s++) {
		const struct lynx_problem_part *lead = &p.stages[s].embedding;
		assert_true(lead->present);
		assert_int_equal(lead->act_bytes, s ? 4096 : 4096 + 512);
		assert_near("the lead's backward", lead->bwd_s, (s ? 14 : 14 + 8) * 1e-6);
		assert_near("the lead's forward", lead->fwd_s, (s ? 6 : 12) * 1e-6);
	}
	lynx_problem_free(&p);
	/* The what-if says the trainer's own reruns stay. */
	struct lynx_whatif w;
	char *text = NULL;
	size_t text_len = 0;
	FILE *f = open_memstream(&text, &text_len);
	assert_non_null(f);
	if (lynx_whatif_from_profiles(ranks, 2, 0, NULL, &w, why, sizeof(why)))
		fail_msg("%s", why);
	assert_int_equal(w.trainer_recomputed, 1);
	lynx_whatif_print(f, "t", &w);
	fclose(f);
	assert_non_null(strstr(text, "t:   the trainer reruns the forward of up to 1 layer a "
	                             "stage itself: left as they are"));
	free(text);
	/* A layer that reruns after one that does not (not at the end: that is the head). */
	first->layers[1].reruns_forward = false;
	set_kernels(&first->layers[1].bwd_kernels, 'b', 8);
	first->layers[2].reruns_forward = true;
	set_kernels(&first->layers[2].bwd_kernels, 'b', 14);
	assert_int_equal(lynx_problem_from_profile(ranks, 2, NULL, &p, why, sizeof(why)), -EINVAL);
	if (!strstr(why, "layer 2 reruns its forward in its backward, yet layer 1 before it does "
	                 "not"))
		fail_msg("got \"%s\"", why);
	drop(first);
	drop(last);
}

/* Refused, with why containing want. */
static void refused(const struct lynx_profile *const *ranks, size_t n,
                    const struct lynx_problem_options *opt, const char *want)
{
	struct lynx_problem p;
	char why[512] = "";

	assert_int_equal(lynx_problem_from_profile(ranks, n, opt, &p, why, sizeof(why)), -EINVAL);
	if (!strstr(why, want))
		fail_msg("wanted \"%s\", got \"%s\"", want, why);
	assert_null(p.stages);
}

static void test_refuses_bad_input_with_a_reason(void **state)
{
	struct lynx_profile *good = tp_stage(), *empty = stage(0, 6, 8, 2, 0, 0);
	struct lynx_profile *odd = stage(5, 6, 8, 2, 0, 0), *beyond = tp_stage(), *far = tp_stage();
	struct lynx_profile *rerun = tp_stage(), *s0 = stage(2, 6, 8, 4, 2, 0);
	struct lynx_profile *s2 = stage(2, 6, 8, 4, 0, 0), *m8 = stage(2, 6, 8, 8, 0, 0);
	struct lynx_profile *old0 = stage(2, 6, 8, 4, 0, 0), *old1 = stage(2, 6, 8, 4, 0, 0);
	const uint32_t split[] = {3};
	struct lynx_problem_options opt = {.stage_layers = split};

	refused(NULL, 0, NULL, "no profiles");
	refused((const struct lynx_profile *[]){empty}, 1, NULL, "profile 0 has no layers");
	/* Not an end layer, so neither the embedding nor the head. */
	set_kernels(&odd->layers[1].fwd_kernels, 'f', 5);
	refused((const struct lynx_profile *[]){odd}, 1, NULL,
	        "profile 0: layer 1 has 5 forward and 8 backward kernels where the others have 6 "
	        "and 8: the layers are not identical");
	beyond->groups[3].producer = 7;
	refused((const struct lynx_profile *[]){beyond}, 1, NULL,
	        "group 3's producer 7 is beyond layer 0's 6 forward kernels");
	far->windows[1].kernel = 9;
	refused((const struct lynx_profile *[]){far}, 1, NULL,
	        "window 1 (tp_bwd) is at kernel 9, beyond layer 0's 8 backward kernels");
	for (size_t l = 0; l < rerun->layer_count; l++)
		rerun->layers[l].reruns_forward = true;
	/* With what the reruns cost: 3 layers' 6 µs forwards, 2 micro-batches. */
	rerun->iteration.time = host(360 * US);
	refused((const struct lynx_profile *[]){rerun}, 1, NULL,
	        "profile 0 was recorded under full recomputation, each backward reruns its forward "
	        "(0.036 ms, 10.0% of the iteration): Megatron's full or uniform method; "
	        "profile the job without recomputation to plan it");
	/* Stages 0 and 2 of 3: stage 1 is missing. */
	refused((const struct lynx_profile *[]){s0, s2}, 2, NULL,
	        "no profile of pipeline stage 1 of 3 (the one that runs 1 warm-up forwards)");
	refused((const struct lynx_profile *[]){s2, m8}, 2, NULL,
	        "profile 1 runs 8 micro-batches, profile 0 4");
	/* Two stages' profiles that do not say where they are (all 0 warm-up forwards). */
	add_window(old0, LYNX_PROFILE_WINDOW_PP_RECV_BWD, -1, 0, -1, -1, 0);
	add_window(old1, LYNX_PROFILE_WINDOW_PP_RECV_FWD, -1, 0, -1, -1, 0);
	refused((const struct lynx_profile *[]){old0, old1}, 2, NULL,
	        "profile 0 receives gradients from a next stage (pp_recv_bwd), yet its 0 warm-up "
	        "forwards make it the last stage");
	refused((const struct lynx_profile *[]){good}, 1, &opt, "a stage split cannot be imposed");
	opt = (struct lynx_problem_options){.budget_bytes = 1 << 20};
	refused((const struct lynx_profile *[]){good}, 1, &opt,
	        "is below stage 0's static memory 1.09 MiB");
	good->layers[1].forward.source = LYNX_PROFILE_SOURCE_UNKNOWN;
	refused((const struct lynx_profile *[]){good}, 1, NULL, "layer 1 has no forward time");
	drop(good);
	drop(empty);
	drop(odd);
	drop(beyond);
	drop(far);
	drop(rerun);
	drop(s0);
	drop(s2);
	drop(m8);
	drop(old0);
	drop(old1);
}

/* The planners and the checker on a problem from a profile, under a budget that needs
 * recomputation. */
static void test_planners_and_checker_run_on_it(void **state)
{
	struct lynx_profile *pr = tp_stage();
	const struct lynx_profile *ranks[] = {pr};
	static const char *const planners[] = {"none",    "full", "selective", "dtr",
	                                       "offload", "heu",  "opt"};
	struct lynx_problem_options opt = {.search_seconds = 5};
	struct lynx_problem p;
	char why[256];

	/* Keeping everything holds 3 layers x 31744 bytes over static memory; full
	 * recomputation at most 2 x 8192 kept + one whole layer, 48128. */
	build(ranks, 1, NULL, &p);
	opt.budget_bytes = p.stages[0].static_bytes + 60000;
	lynx_problem_free(&p);
	build(ranks, 1, &opt, &p);
	for (size_t i = 0; i < sizeof(planners) / sizeof(planners[0]); i++) {
		const struct lynx_planner *pl = lynx_planner_find(planners[i]);
		struct lynx_checker_result r;
		struct lynx_plan plan, back;
		char *text;
		int err;

		assert_non_null(pl);
		err = lynx_planner_run(pl, &p, &plan, why, sizeof(why));

		if (!strcmp(pl->name, "selective")) { /* it looks for Megatron's op names */
			assert_int_equal(err, -EINVAL);
			assert_non_null(strstr(why, "no 'scores' op"));
			continue;
		}
		if (!strcmp(pl->name, "opt") && err) /* CBC not built in, or no solution */
			continue;
		if (err)
			fail_msg("planner %s: %s", pl->name, why);
		if (lynx_checker_replay(&p, &plan, &r, why, sizeof(why)))
			fail_msg("checker on %s: %s", pl->name, why);
		if (!strcmp(pl->name, "none"))
			assert_false(r.fits);
		if (!strcmp(pl->name, "heu") || !strcmp(pl->name, "full"))
			assert_true(r.fits);
		if (!strcmp(pl->name, "offload")) { /* no host link: nothing offloaded */
			assert_int_equal(r.offload_bytes, 0);
			assert_false(r.fits);
		}
		text = lynx_plan_to_json(&plan, &p);
		assert_non_null(text);
		if (lynx_plan_from_json(text, &p, &back, why, sizeof(why)))
			fail_msg("plan of %s does not read back: %s", pl->name, why);
		lynx_plan_free(&back);
		free(text);
		lynx_checker_free(&r);
		lynx_plan_free(&plan);
	}
	lynx_problem_free(&p);
	drop(pr);
}

/* Stage s of a p = 3 pipeline of tp_stage()s, m = 4, with the host link given. */
static struct lynx_profile *linked_stage(uint32_t s, struct lynx_profile_host_link link)
{
	struct lynx_profile *p = tp_stage();

	p->microbatches = 4;
	p->warmup_forwards = 2 - s;
	p->host_link = link;
	return p;
}

/* Every profile's host link measured: the problem's links are the slowest rates with the
 * longest latency; one profile without (or measured one way only): no link. */
static void test_host_link_is_the_slowest_profiles(void **state)
{
	static const struct lynx_profile_host_link links[4] = {
	        {3e10, 2.5e10, 1e-6}, {2e10, 2.8e10, 3e-6}, {4e10, 2.2e10, 2e-6}, {1e10, 1e10, 0}};
	struct lynx_profile *pr[4];
	const struct lynx_profile *ranks[4];
	struct lynx_problem p;

	for (uint32_t i = 0; i < 4; i++) {
		/* Stages 0, 1 and 2, and a second, faster rank of stage 2. */
		pr[i] = linked_stage(i < 3 ? i : 2, links[i]);
		ranks[i] = pr[i];
	}
	for (size_t l = 0; l < 3; l++)
		pr[3]->layers[l].forward = host(3 * US);
	build(ranks, 3, NULL, &p);
	assert_int_equal(p.n_stages, 3);
	assert_true(p.d2h.busbw == 2e10 && p.d2h.latency_s == 3e-6);
	assert_true(p.h2d.busbw == 2.2e10 && p.h2d.latency_s == 3e-6);
	lynx_problem_free(&p);
	/* Every rank counts, not only the stage's representative (the slower rank 2). */
	build(ranks, 4, NULL, &p);
	assert_true(p.d2h.busbw == 1e10 && p.d2h.latency_s == 3e-6);
	assert_true(p.h2d.busbw == 1e10 && p.h2d.latency_s == 3e-6);
	lynx_problem_free(&p);
	/* One rank not measured, or one way only: no link at all. */
	pr[3]->host_link = (struct lynx_profile_host_link){0};
	build(ranks, 4, NULL, &p);
	assert_true(p.d2h.busbw == 0 && p.h2d.busbw == 0);
	assert_true(p.d2h.latency_s == 0 && p.h2d.latency_s == 0);
	lynx_problem_free(&p);
	pr[3]->host_link = (struct lynx_profile_host_link){1e10, 0, 0};
	build(ranks, 4, NULL, &p);
	assert_true(p.d2h.busbw == 0 && p.h2d.busbw == 0);
	lynx_problem_free(&p);
	for (int i = 0; i < 4; i++)
		drop(pr[i]);
}

/*
 * The offload planner on a three-stage pipeline of tp_stage()s (stage s holds 3 - s
 * micro-batches' activations), at a budget halfway between the first two stages' peaks
 * keeping everything: the last stage, which Kuaishou's rules never let offload, and the
 * middle one fit as they are, the first does not. Without a host link the planner offloads
 * nothing and does not fit; with the profiles' it offloads, fits, and the checker agrees.
 */
static void test_offload_planner_offloads_with_the_profiles_host_link(void **state)
{
	static const struct lynx_profile_host_link link = {2.5e10, 2.0e10, 1e-7};
	struct lynx_profile *pr[3];
	const struct lynx_profile *ranks[3];
	const struct lynx_planner *none = lynx_planner_find("none"),
	                          *offload = lynx_planner_find("offload");
	struct lynx_problem_options opt = {0};
	struct lynx_checker_result r;
	struct lynx_problem p;
	struct lynx_plan plan;
	char why[256];

	assert_non_null(none);
	assert_non_null(offload);
	for (uint32_t s = 0; s < 3; s++) {
		pr[s] = linked_stage(s, (struct lynx_profile_host_link){0});
		ranks[s] = pr[s];
	}
	/* The budget, from the peaks keeping everything. */
	build(ranks, 3, NULL, &p);
	if (lynx_planner_run(none, &p, &plan, why, sizeof(why)) ||
	    lynx_checker_replay(&p, &plan, &r, why, sizeof(why)))
		fail_msg("%s", why);
	assert_true(r.peak_bytes[0] > r.peak_bytes[1] && r.peak_bytes[1] > r.peak_bytes[2]);
	opt.budget_bytes = (r.peak_bytes[0] + r.peak_bytes[1]) / 2;
	lynx_checker_free(&r);
	lynx_plan_free(&plan);
	lynx_problem_free(&p);

	for (int linked = 0; linked < 2; linked++) {
		for (uint32_t s = 0; s < 3; s++)
			pr[s]->host_link = linked ? link : (struct lynx_profile_host_link){0};
		build(ranks, 3, &opt, &p);
		assert_true((p.d2h.busbw > 0) == linked);
		if (lynx_planner_run(offload, &p, &plan, why, sizeof(why)))
			fail_msg("offload planner: %s", why);
		if (lynx_checker_replay(&p, &plan, &r, why, sizeof(why)))
			fail_msg("checker: %s", why);
		if (linked) {
			assert_true(r.offload_bytes > 0);
			assert_true(plan.fits && r.fits);
			for (uint32_t s = 0; s < 3; s++)
				assert_true(r.peak_bytes[s] <= p.budget_bytes);
		} else {
			assert_int_equal(r.offload_bytes, 0);
			assert_false(plan.fits || r.fits);
		}
		lynx_checker_free(&r);
		lynx_plan_free(&plan);
		lynx_problem_free(&p);
	}
	for (int s = 0; s < 3; s++)
		drop(pr[s]);
}

/* The what-if of profiling-only mode (policy/whatif.h) on the same profile: each rung of the
 * ladder saves memory against keeping everything and costs no less time, and says whether it
 * fits; a budget below the static memory gives no row. */
static void test_whatif_ladder_saves_memory_at_a_cost(void **state)
{
	struct lynx_profile *pr = tp_stage();
	const struct lynx_profile *ranks[] = {pr};
	struct lynx_whatif w;
	char why[256];

	if (lynx_whatif_from_profiles(ranks, 1, 0, NULL, &w, why, sizeof(why)))
		fail_msg("what-if: %s", why);
	assert_int_equal(w.stages, 1);
	assert_true(w.base_peak > w.static_max);
	assert_int_equal(w.n_rows, LYNX_WHATIF_MAX_ROWS);
	/* Keeping a quarter of the activations is below what this layer can reach (its
	 * inputs stay): that rung says so. */
	assert_true(w.rows[0].fits);
	assert_false(w.rows[LYNX_WHATIF_MAX_ROWS - 1].fits);
	for (size_t i = 0; i < w.n_rows; i++) {
		assert_true(w.rows[i].fits == (w.rows[i].peak <= w.rows[i].budget_bytes));
		assert_true(w.rows[i].peak < w.base_peak);
		assert_true(w.rows[i].step_s >= w.base_step_s * (1 - 1e-12));
		if (i > 0) /* tighter budgets: no more memory, no less time */
			assert_true(w.rows[i].peak <= w.rows[i - 1].peak &&
			            w.rows[i].step_s >= w.rows[i - 1].step_s * (1 - 1e-12));
	}
	assert_int_equal(
	        lynx_whatif_from_profiles(ranks, 1, w.static_max / 2, NULL, &w, why, sizeof(why)),
	        0);
	assert_int_equal(w.n_rows, 0);
	drop(pr);
}

/*
 * LYNX_MAX_SLOWDOWN (lynx_whatif_plan without a budget): the budget chosen is the smallest
 * at which the plan is predicted within the slowdown. Its plan is within it and saves
 * memory; a budget 1% of the activations' share lower is not within it (or does not fit);
 * a larger slowdown saves at least as much; a planner that takes no budget, or none asked
 * for, plans at the measured peak as before.
 */
static void test_max_slowdown_picks_the_smallest_budget_within_it(void **state)
{
	struct lynx_profile *pr = tp_stage();
	const struct lynx_profile *ranks[] = {pr};
	struct lynx_whatif_row row, keep, tighter;
	struct lynx_whatif_plan wp;
	char why[256];
	uint64_t peak_at[2];
	const uint32_t asks[2] = {2000, 10000}; /* 20%, 100%: this layer has no windows */

	for (int k = 0; k < 2; k++) {
		struct lynx_problem_options opt = {.max_slowdown_bp = asks[k]};
		if (lynx_whatif_plan(ranks, 1, &opt, "heu", NULL, &wp, &row, &keep, why,
		                     sizeof(why)))
			fail_msg("plan: %s", why);
		uint64_t chosen = wp.problem->budget_bytes,
		         floor = lynx_problem_max_static_bytes(wp.problem);
		if (!row.fits || row.peak >= keep.peak)
			fail_msg("%u bp: budget %llu (floor %llu, keep %llu): peak %llu, %.6f s "
			         "against %.6f s",
			         asks[k], (unsigned long long)chosen, (unsigned long long)floor,
			         (unsigned long long)keep.peak, (unsigned long long)row.peak,
			         row.step_s, keep.step_s);
		assert_true(row.step_s <= keep.step_s * (1.0 + asks[k] / 10000.0));
		assert_true(chosen < keep.peak);
		peak_at[k] = row.peak;
		lynx_whatif_plan_free(&wp);

		/* Just below: over the slowdown, or no fitting plan. */
		struct lynx_problem_options below = {.budget_bytes =
		                                             chosen - (keep.peak - floor) / 100};
		if (lynx_whatif_plan(ranks, 1, &below, "heu", NULL, &wp, &tighter, NULL, why,
		                     sizeof(why)) == 0) {
			assert_true(!tighter.fits ||
			            tighter.step_s > keep.step_s * (1.0 + asks[k] / 10000.0));
			lynx_whatif_plan_free(&wp);
		}
	}
	assert_true(peak_at[1] <= peak_at[0]);

	/* Full recompute takes no budget: the measured peak, whatever the slowdown. */
	struct lynx_problem_options opt = {.max_slowdown_bp = 200};
	struct lynx_problem_options plain = {0};
	assert_int_equal(
	        lynx_whatif_plan(ranks, 1, &opt, "full", NULL, &wp, &row, NULL, why, sizeof(why)),
	        0);
	uint64_t full_budget = wp.problem->budget_bytes;
	lynx_whatif_plan_free(&wp);
	assert_int_equal(
	        lynx_whatif_plan(ranks, 1, &plain, "heu", NULL, &wp, &row, &keep, why, sizeof(why)),
	        0);
	assert_int_equal(wp.problem->budget_bytes, full_budget);
	assert_int_equal(row.peak, keep.peak); /* no budget, no slowdown: keep everything */
	lynx_whatif_plan_free(&wp);
	drop(pr);
}

/*
 * A plan file (LYNX_PLAN) carries the predictions of the job it was made for; planned again
 * on this job's profiles, its peaks and fit are the checker's on this job's problem, which
 * decide whether a stage is armed, not the numbers in the file.
 */
static void test_a_given_plan_is_predicted_on_this_jobs_problem(void **state)
{
	struct lynx_profile *pr = tp_stage();
	const struct lynx_profile *ranks[] = {pr};
	struct lynx_problem_options opt = {.budget_bytes = pr->memory.peak_bytes};
	struct lynx_whatif_row row, given_row;
	struct lynx_whatif_plan wp, given;
	char why[256];

	if (lynx_whatif_plan(ranks, 1, &opt, "full", NULL, &wp, &row, NULL, why, sizeof(why)))
		fail_msg("plan: %s", why);
	wp.plan->stages[0].peak_bytes = 1; /* what another job's file might say */
	wp.plan->fits = true;
	char *text = lynx_plan_to_json(wp.plan, wp.problem);
	assert_non_null(text);
	const char *peak = strstr(text, "\"peak_bytes\":");
	assert_non_null(peak);
	peak += strlen("\"peak_bytes\":");
	peak += strspn(peak, " \t");
	assert_true(!strncmp(peak, "1,", 2));
	if (lynx_whatif_plan(ranks, 1, &opt, "heu", text, &given, &given_row, NULL, why,
	                     sizeof(why)))
		fail_msg("given plan: %s", why);
	assert_int_equal(given.plan->stages[0].peak_bytes, given_row.peak);
	assert_int_equal(given_row.peak, row.peak);
	assert_true(given.plan->fits == given_row.fits);
	free(text);
	lynx_whatif_plan_free(&given);
	lynx_whatif_plan_free(&wp);
	drop(pr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_maps_kernels_groups_and_collectives),
	        cmocka_unit_test(test_a_given_plan_is_predicted_on_this_jobs_problem),
	        cmocka_unit_test(test_a_producer_run_is_rebuilt_whole),
	        cmocka_unit_test(test_a_chains_writers_are_rerun_with_its_producer),
	        cmocka_unit_test(test_the_peak_counts_the_moments_non_saved_bytes),
	        cmocka_unit_test(test_what_cannot_be_rebuilt_stays_for_every_rebuild_through_it),
	        cmocka_unit_test(test_each_group_takes_the_scratch_its_producer_names),
	        cmocka_unit_test(test_what_producer_runs_read_sets_deps_and_what_cannot_be_rebuilt),
	        cmocka_unit_test(test_heu_prices_what_it_must_offload_as_copies),
	        cmocka_unit_test(test_uses_device_times_and_measured_idle),
	        cmocka_unit_test(test_kernel_times_are_the_median_over_like_layers),
	        cmocka_unit_test(test_peers_planning_alone_agree_despite_noise),
	        cmocka_unit_test(test_orders_pipeline_stages_by_warmup),
	        cmocka_unit_test(test_orders_pipeline_stages_as_the_profiles_name_them),
	        cmocka_unit_test(test_a_percent_budget_is_each_stages_share_of_its_own_peak),
	        cmocka_unit_test(test_embedding_and_head_from_the_odd_layers),
	        cmocka_unit_test(test_merges_kernels_and_groups_past_the_limits),
	        cmocka_unit_test(test_maps_each_buffer_to_its_group),
	        cmocka_unit_test(test_buffers_below_a_granule_count_as_kept),
	        cmocka_unit_test(test_buffers_below_a_granule_are_packed_into_groups),
	        cmocka_unit_test(test_maps_at_most_max_buffers),
	        cmocka_unit_test(test_maps_each_collective_to_its_op),
	        cmocka_unit_test(test_stage_layers_in_the_profile),
	        cmocka_unit_test(test_plans_around_the_layers_the_trainer_recomputes),
	        cmocka_unit_test(test_refuses_bad_input_with_a_reason),
	        cmocka_unit_test(test_planners_and_checker_run_on_it),
	        cmocka_unit_test(test_host_link_is_the_slowest_profiles),
	        cmocka_unit_test(test_offload_planner_offloads_with_the_profiles_host_link),
	        cmocka_unit_test(test_whatif_ladder_saves_memory_at_a_cost),
	        cmocka_unit_test(test_max_slowdown_picks_the_smallest_budget_within_it),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
