/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The profile (profiler/profile.c, profiler/build.c): built from tinytrain's real traces
 * (pp2 tp2 L8 M4: L/pp layers per stage, host-timed; TP all-reduces and PP sends/receives as
 * windows with the right kinds and counts per iteration; dp2: the gradient reductions); the
 * JSON round trip (write -> read -> write gives the same bytes, also through a file written
 * atomically); the run (round trip, absent in older files, bad fields refused); truncated,
 * corrupted and wrong-version files refused with the field's path or the byte offset, never a
 * crash; `lynx profile` end to end.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "build.h"
#include "profile.h"
#include "summary.h"
#include "record.h"

static void count_kinds(const struct lynx_profile *p, size_t n[LYNX_PROFILE_WINDOW_KIND_COUNT])
{
	memset(n, 0, sizeof(size_t) * LYNX_PROFILE_WINDOW_KIND_COUNT);
	for (size_t i = 0; i < p->window_count; i++)
		n[p->windows[i].kind]++;
}

/* write -> read -> write: the same bytes, and the same numbers. */
static void check_round_trip(const struct lynx_profile *p)
{
	struct lynx_profile back;
	char why[256];
	char *text = lynx_profile_to_json(p), *again;

	assert_non_null(text);
	if (lynx_profile_from_json(text, strlen(text), &back, why, sizeof(why)))
		fail_msg("own output refused: %s", why);
	again = lynx_profile_to_json(&back);
	assert_non_null(again);
	assert_string_equal(text, again);
	assert_int_equal(back.layer_count, p->layer_count);
	assert_int_equal(back.window_count, p->window_count);
	assert_int_equal(back.group_count, p->group_count);
	assert_int_equal(back.memory.peak_bytes, p->memory.peak_bytes);
	assert_int_equal(back.rank, p->rank);
	/* Exactly: the host link's doubles are printed with digits enough to come back. */
	assert_true(back.host_link.d2h_bytes_per_s == p->host_link.d2h_bytes_per_s);
	assert_true(back.host_link.h2d_bytes_per_s == p->host_link.h2d_bytes_per_s);
	assert_true(back.host_link.latency_s == p->host_link.latency_s);
	free(text);
	free(again);
	lynx_profile_free(&back);
}

static void check_stage(const struct lynx_profile *p, size_t layers, size_t microbatches)
{
	assert_int_equal(p->iteration.count, 2);
	assert_int_equal(p->iteration.time.source, LYNX_PROFILE_SOURCE_HOST);
	assert_true(p->iteration.time.ns > 0);
	assert_int_equal(p->layer_count, layers);
	assert_int_equal(p->microbatches, microbatches);
	assert_int_equal(lynx_profile_rerun_layers(p), 0);
	for (size_t k = 0; k < p->layer_count; k++) {
		const struct lynx_profile_layer *l = &p->layers[k], *l0 = &p->layers[0];
		assert_int_equal(l->forward.source, LYNX_PROFILE_SOURCE_HOST);
		assert_int_equal(l->backward.source, LYNX_PROFILE_SOURCE_HOST);
		assert_int_equal(l->forward.samples, 2 * microbatches);
		assert_true(l->forward.min_ns <= l->forward.ns &&
		            l->forward.ns <= l->forward.max_ns);
		assert_true(l->forward.ns > 0 && l->backward.ns > 0);
		/* Identical layers: the same kernels, named by the dump. */
		assert_true(l->fwd_kernels.count > 0 && l->bwd_kernels.count > 0);
		assert_int_equal(l->fwd_kernels.count, l0->fwd_kernels.count);
		assert_int_equal(l->bwd_kernels.count, l0->bwd_kernels.count);
		for (size_t i = 0; i < l->fwd_kernels.count; i++)
			assert_string_equal(l->fwd_kernels.name[i], l0->fwd_kernels.name[i]);
		assert_true(l->fwd_kernels.name[0][0] == 't'); /* tinytrain's "tt_..." */
		assert_true(l->saved_bytes > 0);
		assert_int_equal(l->saved_bytes, l0->saved_bytes);
	}
	uint64_t sum = 0;
	for (int c = 0; c < LYNX_PROFILE_MEMORY_CLASS_COUNT; c++)
		sum += p->memory.at_peak[c];
	assert_int_equal(sum, p->memory.peak_bytes);
	/* What no plan evicts: at least what the peak holds besides saved activations, and
	 * within the peak. */
	assert_true(p->memory.non_saved_peak_bytes >=
	            sum - p->memory.at_peak[LYNX_PROFILE_MEMORY_SAVED]);
	assert_true(p->memory.non_saved_peak_bytes < p->memory.peak_bytes);
	assert_true(p->memory.at_peak[LYNX_PROFILE_MEMORY_SAVED] > 0);
	/* Where they were live: each kernel's within the peak, not the same at every
	 * backward kernel (gradients come and go). */
	uint64_t most_bwd = 0, least_bwd = UINT64_MAX;
	assert_true(p->memory.non_saved_known);
	assert_true(p->memory.non_saved_outside_bytes <= p->memory.non_saved_peak_bytes);
	for (size_t l = 0; l < p->layer_count; l++)
		for (int d = 0; d < 2; d++) {
			const struct lynx_profile_kernels *k =
			        d ? &p->layers[l].bwd_kernels : &p->layers[l].fwd_kernels;
			assert_non_null(k->non_saved_bytes);
			for (size_t i = 0; i < k->count; i++) {
				assert_true(k->non_saved_bytes[i] > 0);
				assert_true(k->non_saved_bytes[i] <=
				            p->memory.non_saved_peak_bytes);
				if (d && k->non_saved_bytes[i] > most_bwd)
					most_bwd = k->non_saved_bytes[i];
				if (d && k->non_saved_bytes[i] < least_bwd)
					least_bwd = k->non_saved_bytes[i];
			}
		}
	assert_true(most_bwd > least_bwd);
	assert_true(p->group_count > 0);
	for (size_t g = 0; g < p->group_count; g++) {
		assert_true(p->groups[g].layer < layers);
		assert_true(p->groups[g].bytes > 0);
	}
	for (size_t i = 0; i < p->window_count; i++) {
		const struct lynx_profile_window *w = &p->windows[i];
		assert_int_equal(w->idle.source, LYNX_PROFILE_SOURCE_UNKNOWN);
		assert_int_equal(w->bytes, w->count * 4); /* tinytrain's floats */
		assert_true(w->bytes > 0);
		if (i)
			assert_true(w->offset_ns >= p->windows[i - 1].offset_ns);
	}
}

static void test_profile_pp2_tp2_layers_and_windows(void **state)
{
	struct recording rec;
	int first_stage = 0, last_stage = 0;

	(void)state;
	assert_int_equal(record_tinytrain("--nproc 4 --pp 2 --tp 2 --layers 8 --microbatches 4 "
	                                  "--batch 2 --steps 2",
	                                  &rec),
	                 0);
	assert_int_equal(rec.ranks, 4);
	for (int r = 0; r < rec.ranks; r++) {
		struct lynx_prof_build_options opt = {.rank = r, .world = 4};
		struct lynx_profile p;
		size_t n[LYNX_PROFILE_WINDOW_KIND_COUNT];
		char why[256];

		if (lynx_prof_build_profile(&rec.rank[r], &opt, &p, why, sizeof(why)))
			fail_msg("pid %d: %s", rec.rank[r].pid, why);
		check_stage(&p, 8 / 2, 4);
		count_kinds(&p, n);
		/* Megatron's two TP all-reduces per layer and direction, every micro-batch. */
		assert_int_equal(n[LYNX_PROFILE_WINDOW_TP_FWD], 2 * 4 * 4);
		assert_int_equal(n[LYNX_PROFILE_WINDOW_TP_BWD], 2 * 4 * 4);
		assert_int_equal(n[LYNX_PROFILE_WINDOW_DP_GRAD], 0);
		assert_int_equal(n[LYNX_PROFILE_WINDOW_OTHER], 0);
		/* The stage, from the pipeline communicator's ranks. */
		assert_true(lynx_profile_pipeline_known(&p));
		assert_int_equal(p.pipeline_stages, 2);
		assert_int_equal(p.pipeline_stage, n[LYNX_PROFILE_WINDOW_PP_SEND_FWD] ? 0 : 1);
		if (n[LYNX_PROFILE_WINDOW_PP_SEND_FWD]) { /* the first stage */
			first_stage++;
			assert_int_equal(n[LYNX_PROFILE_WINDOW_PP_SEND_FWD], 4);
			assert_int_equal(n[LYNX_PROFILE_WINDOW_PP_RECV_BWD], 4);
			assert_int_equal(n[LYNX_PROFILE_WINDOW_PP_RECV_FWD], 0);
			assert_int_equal(n[LYNX_PROFILE_WINDOW_PP_SEND_BWD], 0);
		} else {
			last_stage++;
			assert_int_equal(n[LYNX_PROFILE_WINDOW_PP_RECV_FWD], 4);
			assert_int_equal(n[LYNX_PROFILE_WINDOW_PP_SEND_BWD], 4);
			assert_int_equal(n[LYNX_PROFILE_WINDOW_PP_RECV_BWD], 0);
		}
		for (size_t i = 0; i < p.window_count; i++) {
			const struct lynx_profile_window *w = &p.windows[i];
			bool tp = w->kind == LYNX_PROFILE_WINDOW_TP_FWD ||
			          w->kind == LYNX_PROFILE_WINDOW_TP_BWD;
			assert_string_equal(
			        w->call, tp ? "ncclAllReduce"
			                 : w->kind == LYNX_PROFILE_WINDOW_PP_RECV_FWD ||
			                                 w->kind == LYNX_PROFILE_WINDOW_PP_RECV_BWD
			                         ? "ncclRecv"
			                         : "ncclSend");
			assert_true(w->microbatch >= 0 && w->microbatch < 4);
			if (tp) {
				assert_true(w->layer >= 0 && w->layer < 4);
				assert_true(w->ordinal == 0 || w->ordinal == 1);
				assert_true(w->kernel > 0);
				assert_int_equal(w->peer, -1);
			} else {
				assert_int_equal(w->layer, -1);
				assert_true(w->peer >= 0);
			}
		}
		/* The attention dropout runs once per sequence of the batch: its output and mask
		 * are produced by a run of two launches, which a rebuild relaunches. */
		size_t runs = 0;
		for (size_t g = 0; g < p.group_count; g++) {
			const struct lynx_profile_group *gr = &p.groups[g];
			assert_true(gr->producer < 0 ? gr->producer_end == gr->producer
			                             : gr->producer_end >= gr->producer);
			if (gr->producer >= 0 && gr->producer_end == gr->producer + 1 &&
			    !strcmp(p.layers[gr->layer].fwd_kernels.name[gr->producer],
			            "tt_dropout_fwd"))
				runs++;
		}
		assert_int_equal(runs, 2 * p.layer_count);
		/* What each producer run reads. The QKV split and the softmax read temporaries
		 * freed in the forward (the QKV GEMM's output, the scores), whose writers (GEMMs
		 * of what the layer keeps) a rebuild reruns first, into scratch: the temporary
		 * and the GEMM's workspace. The layer norm reads the layer's input, a group of
		 * its layer; the attention dropout reads the softmax output. */
		for (size_t g = 0; g < p.group_count; g++) {
			const struct lynx_profile_group *gr = &p.groups[g];
			const char *kernel =
			        gr->producer < 0
			                ? ""
			                : p.layers[gr->layer].fwd_kernels.name[gr->producer];
			assert_true(gr->reads_known);
			/* The scratch a replay takes: the GEMMs name cuBLAS-like workspace, the
			 * element-wise kernels none. */
			assert_true(gr->scratch_known);
			if (!strcmp(kernel, "tt_gemm"))
				assert_true(gr->scratch_bytes > 0);
			if (!strcmp(kernel, "tt_layernorm_fwd") || !strcmp(kernel, "tt_gelu_fwd") ||
			    gr->producer < 0)
				assert_int_equal(gr->scratch_bytes, 0);
			for (uint32_t k = 0; k < gr->read_count; k++)
				assert_int_equal(p.groups[gr->reads[k]].layer, gr->layer);
			if (!strcmp(kernel, "tt_split_qkv") || !strcmp(kernel, "tt_softmax_fwd")) {
				assert_false(gr->reads_freed);
				assert_true(gr->chained);
				assert_true(gr->scratch_bytes > gr->bytes);
				/* The one writer, the GEMM just before: what a rebuild reruns. */
				assert_int_equal(gr->writer_count, 1);
				assert_int_equal(gr->writers[0], gr->producer - 1);
				assert_string_equal(
				        p.layers[gr->layer].fwd_kernels.name[gr->writers[0]],
				        "tt_gemm");
			}
			if (!gr->chained)
				assert_int_equal(gr->writer_count, 0);
			/* tinytrain holds what a layer saved until the layer's backward ends. */
			assert_true(gr->freed_known);
			assert_int_equal(gr->freed_before, p.layers[gr->layer].bwd_kernels.count);
			if (!strcmp(kernel, "tt_layernorm_fwd")) {
				assert_false(gr->reads_freed);
				assert_true(gr->read_count >= 1);
			}
			if (!strcmp(kernel, "tt_dropout_fwd") &&
			    gr->producer_end == gr->producer + 1) {
				const struct lynx_profile_group *in = &p.groups[gr->reads[0]];
				assert_int_equal(gr->read_count, 1);
				assert_string_equal(
				        p.layers[in->layer].fwd_kernels.name[in->producer],
				        "tt_softmax_fwd");
			}
		}
		check_round_trip(&p);
		lynx_profile_free(&p);
	}
	assert_int_equal(first_stage, 2);
	assert_int_equal(last_stage, 2);
	record_release(&rec);
}

static void test_profile_dp2_gradient_reductions(void **state)
{
	struct recording rec;

	(void)state;
	assert_int_equal(
	        record_tinytrain("--nproc 2 --dp 2 --layers 6 --microbatches 2 --steps 2", &rec),
	        0);
	assert_int_equal(rec.ranks, 2);
	for (int r = 0; r < rec.ranks; r++) {
		struct lynx_profile p;
		size_t n[LYNX_PROFILE_WINDOW_KIND_COUNT];
		char why[256];

		if (lynx_prof_build_profile(&rec.rank[r], NULL, &p, why, sizeof(why)))
			fail_msg("pid %d: %s", rec.rank[r].pid, why);
		check_stage(&p, 6, 2);
		count_kinds(&p, n);
		assert_true(n[LYNX_PROFILE_WINDOW_DP_GRAD] > 0);
		assert_int_equal(n[LYNX_PROFILE_WINDOW_DP_GRAD], p.window_count);
		assert_int_equal(p.rank, -1);
		check_round_trip(&p);
		lynx_profile_free(&p);
	}
	record_release(&rec);
}

/* A small profile by hand, with every optional form: unknown rank, device and unknown
 * times, per-kernel device times on layer 0 only, a pipeline position, a group, two
 * windows. */
static char *kernel_list[] = {"k0", "k1"};
static uint64_t fwd_kernel_ns[] = {70, 25}, bwd_kernel_ns[] = {280};

static void small_profile(struct lynx_profile *p)
{
	static struct lynx_profile_layer layers[2];
	static struct lynx_profile_group groups[1] = {{.layer = 1,
	                                               .bytes = 4096,
	                                               .producer = -1,
	                                               .producer_end = -1,
	                                               .last_consumer = 1}};
	static struct lynx_profile_window windows[2];

	for (int i = 0; i < 2; i++)
		layers[i] = (struct lynx_profile_layer){
		        .forward = {LYNX_PROFILE_SOURCE_HOST, 100 + i, 90, 200, 4},
		        .backward = {LYNX_PROFILE_SOURCE_DEVICE, 300, 300, 300, 1},
		        .fwd_kernels = {.name = kernel_list,
		                        .ns = i ? NULL : fwd_kernel_ns,
		                        .count = 2},
		        .bwd_kernels = {.name = kernel_list,
		                        .ns = i ? NULL : bwd_kernel_ns,
		                        .count = 1},
		        .saved_bytes = 1 << 20,
		        .reruns_forward = true};
	windows[0] = (struct lynx_profile_window){.kind = LYNX_PROFILE_WINDOW_TP_FWD,
	                                          .call = "ncclAllReduce",
	                                          .peer = -1,
	                                          .count = 10,
	                                          .bytes = 40,
	                                          .microbatch = 1,
	                                          .layer = 0,
	                                          .ordinal = 0,
	                                          .kernel = 1,
	                                          .offset_ns = 5};
	windows[1] = (struct lynx_profile_window){.kind = LYNX_PROFILE_WINDOW_PP_RECV_BWD,
	                                          .call = "ncclRecv",
	                                          .comm = 1,
	                                          .peer = 3,
	                                          .count = 2,
	                                          .bytes = 4,
	                                          .microbatch = 0,
	                                          .layer = -1,
	                                          .ordinal = -1,
	                                          .kernel = -1,
	                                          .offset_ns = 9,
	                                          .idle = {LYNX_PROFILE_SOURCE_DEVICE, 7, 7, 7, 1}};
	*p = (struct lynx_profile){
	        .rank = -1,
	        .world = 8,
	        .env = {42, "H200", "unknown", "2.21.5"},
	        .iteration = {10, 3, 7, 100, {LYNX_PROFILE_SOURCE_HOST, 5, 4, 6, 3}},
	        .microbatches = 2,
	        .warmup_forwards = 1,
	        .layers = layers,
	        .layer_count = 2,
	        .groups = groups,
	        .group_count = 1,
	        .windows = windows,
	        .window_count = 2,
	        .memory = {LYNX_PROFILE_SOURCE_HOST, 1000, {600, 300, 50, 50, 0}, 700, 9, 40}};
}

/* small_profile with `groups` instead of its own, written: the text (the caller frees it),
 * and in back the profile read from it. */
static char *with_groups_read_back(struct lynx_profile_group *groups, size_t n,
                                   struct lynx_profile *back)
{
	struct lynx_profile p;
	char why[256];

	small_profile(&p);
	p.groups = groups;
	p.group_count = n;
	char *text = lynx_profile_to_json(&p);
	assert_non_null(text);
	if (lynx_profile_from_json(text, strlen(text), back, why, sizeof(why)))
		fail_msg("%s", why);
	return text;
}

static int count_occurrences(const char *text, const char *needle)
{
	int n = 0;

	for (const char *at = text; (at = strstr(at, needle)); at += strlen(needle))
		n++;
	return n;
}

static void test_profile_round_trip_keeps_every_field(void **state)
{
	struct lynx_profile p, back;
	char why[256];
	char *text;

	(void)state;
	small_profile(&p);
	p.pipeline_stage = 2;
	p.pipeline_stages = 3;
	text = lynx_profile_to_json(&p);
	p.pipeline_stages = 0; /* the statics again, for the tests after this one */
	assert_non_null(text);
	assert_non_null(strstr(text, "\"rank\":\tnull"));
	if (lynx_profile_from_json(text, strlen(text), &back, why, sizeof(why)))
		fail_msg("%s", why);
	assert_int_equal(back.rank, -1);
	assert_int_equal(back.world, 8);
	assert_string_equal(back.env.gpu, "H200");
	assert_true(lynx_profile_all_rerun(&back));
	assert_int_equal(back.layers[1].forward.ns, 101);
	assert_int_equal(back.layers[1].backward.source, LYNX_PROFILE_SOURCE_DEVICE);
	assert_int_equal(back.layers[0].bwd_kernels.count, 1);
	assert_string_equal(back.layers[0].fwd_kernels.name[1], "k1");
	assert_int_equal(back.warmup_forwards, 1);
	assert_int_equal(back.pipeline_stage, 2);
	assert_int_equal(back.pipeline_stages, 3);
	assert_non_null(back.layers[0].fwd_kernels.ns);
	assert_int_equal(back.layers[0].fwd_kernels.ns[0], 70);
	assert_int_equal(back.layers[0].fwd_kernels.ns[1], 25);
	assert_int_equal(back.layers[0].bwd_kernels.ns[0], 280);
	assert_null(back.layers[1].fwd_kernels.ns); /* not timed: no key, no array */
	assert_null(back.layers[1].bwd_kernels.ns);
	assert_int_equal(count_occurrences(text, "\"forward_ns\""), 1);
	assert_int_equal(back.groups[0].producer, -1);
	assert_int_equal(back.windows[0].duration.source, LYNX_PROFILE_SOURCE_UNKNOWN);
	assert_int_equal(back.windows[1].kind, LYNX_PROFILE_WINDOW_PP_RECV_BWD);
	assert_int_equal(back.windows[1].idle.ns, 7);
	assert_int_equal(back.windows[1].peer, 3);
	assert_int_equal(back.memory.at_peak[LYNX_PROFILE_MEMORY_SAVED], 300);
	check_round_trip(&back);
	lynx_profile_free(&back);
	free(text);
}

/* The host link as the shim measures it: the example of profile.c's header. */
static const struct lynx_profile_host_link example_link = {5.0e10, 4.8e10, 1.2e-05};

/* A measured host link comes back exactly, also doubles that cJSON's own 15 digits would
 * round (0.1 + 0.2 needs 17); a link not measured, or measured one way only, is not written
 * and reads as all 0. */
/* The rerun note says what the reruns cost where the times are known: each rerunning
 * layer's forward once per micro-batch, against the iteration; nothing where a time is
 * unknown. */
static void test_rerun_note_says_what_the_reruns_cost(void **state)
{
	struct lynx_profile p;
	char note[LYNX_PROFILE_RERUN_NOTE_MAX];

	(void)state;
	small_profile(&p); /* 2 layers that rerun, 2 micro-batches */
	p.layers[0].forward.ns = p.layers[1].forward.ns = 2000000;
	p.iteration.time.ns = 40000000;
	assert_string_equal(lynx_profile_rerun_note(&p, note, sizeof(note)),
	                    ", each backward reruns its forward (8.000 ms, 20.0% of the "
	                    "iteration)");
	p.layers[1].reruns_forward = false;
	assert_string_equal(lynx_profile_rerun_note(&p, note, sizeof(note)),
	                    ", the backward reruns the forward of layer 0 of 2 (4.000 ms, 10.0% "
	                    "of the iteration)");
	p.iteration.time.source = LYNX_PROFILE_SOURCE_UNKNOWN;
	assert_string_equal(lynx_profile_rerun_note(&p, note, sizeof(note)),
	                    ", the backward reruns the forward of layer 0 of 2");
	p.iteration.time.source = LYNX_PROFILE_SOURCE_HOST;
	p.layers[0].forward.source = LYNX_PROFILE_SOURCE_UNKNOWN;
	assert_string_equal(lynx_profile_rerun_note(&p, note, sizeof(note)),
	                    ", the backward reruns the forward of layer 0 of 2");
	/* A buffer too short for the clause cuts it, terminated. */
	p.layers[0].forward.source = LYNX_PROFILE_SOURCE_HOST;
	char tiny[48];
	assert_string_equal(lynx_profile_rerun_note(&p, tiny, sizeof(tiny)),
	                    ", the backward reruns the forward of layer 0 of");
	small_profile(&p); /* the statics again, for the tests after this one */
}

/* Megatron's block recompute: layer 0 reruns its forward, layer 1 does not. Only layer 0
 * says so, "rerun" is false, and both come back. */
static void test_profile_round_trip_keeps_which_layers_rerun(void **state)
{
	struct lynx_profile p, back;
	char why[256];

	(void)state;
	small_profile(&p);
	p.layers[1].reruns_forward = false;
	char *text = lynx_profile_to_json(&p);
	small_profile(&p); /* the statics again, for the tests after this one */
	assert_non_null(text);
	assert_non_null(strstr(text, "\"rerun\":\tfalse"));
	assert_int_equal(count_occurrences(text, "\"reruns_forward\":\ttrue"), 1);
	if (lynx_profile_from_json(text, strlen(text), &back, why, sizeof(why)))
		fail_msg("%s", why);
	assert_true(back.layers[0].reruns_forward);
	assert_false(back.layers[1].reruns_forward);
	assert_int_equal(lynx_profile_rerun_layers(&back), 1);
	assert_false(lynx_profile_all_rerun(&back));
	char note[LYNX_PROFILE_RERUN_NOTE_MAX];
	/* Which layers; what they cost is test_rerun_note_says_what_the_reruns_cost's. */
	const struct lynx_profile_time iteration = back.iteration.time;
	back.iteration.time.source = LYNX_PROFILE_SOURCE_UNKNOWN;
	assert_string_equal(lynx_profile_rerun_note(&back, note, sizeof(note)),
	                    ", the backward reruns the forward of layer 0 of 2");
	back.layers[1].reruns_forward = true;
	assert_string_equal(lynx_profile_rerun_note(&back, note, sizeof(note)),
	                    ", each backward reruns its forward");
	back.layers[0].reruns_forward = back.layers[1].reruns_forward = false;
	assert_string_equal(lynx_profile_rerun_note(&back, note, sizeof(note)), "");
	back.layers[0].reruns_forward = true;
	back.iteration.time = iteration;
	char *again = lynx_profile_to_json(&back);
	assert_string_equal(again, text);
	free(again);
	free(text);
	lynx_profile_free(&back);
}

static void test_profile_round_trip_keeps_the_host_link(void **state)
{
	static const struct lynx_profile_host_link odd[] = {
	        {1e11 / 3, 2.0 / 3 * 1e10, 0.1 + 0.2 - 0.29},
	        {0x1.fffffffffffffp+40, 1.0000000000000002, 0x1.0000000000001p-20},
	        {4.9e-324, 1.7976931348623157e308, 0}};
	struct lynx_profile p, back;
	char why[256];
	char *text;

	(void)state;
	small_profile(&p);
	p.host_link = example_link;
	text = lynx_profile_to_json(&p);
	assert_non_null(text);
	assert_non_null(strstr(text,
	                       "\n\t\"host_link\":\t{\n\t\t\"d2h_bytes_per_s\":\t50000000000,\n"
	                       "\t\t\"h2d_bytes_per_s\":\t48000000000,\n"
	                       "\t\t\"latency_s\":\t1.2e-05\n\t}\n}\n"));
	if (lynx_profile_from_json(text, strlen(text), &back, why, sizeof(why)))
		fail_msg("%s", why);
	assert_true(back.host_link.d2h_bytes_per_s == 5.0e10);
	assert_true(back.host_link.h2d_bytes_per_s == 4.8e10);
	assert_true(back.host_link.latency_s == 1.2e-05);
	check_round_trip(&back);
	lynx_profile_free(&back);
	free(text);

	for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
		p.host_link = odd[i];
		check_round_trip(&p);
	}
	p.host_link = (struct lynx_profile_host_link){0.1 + 0.2, 1, 0};
	text = lynx_profile_to_json(&p);
	assert_non_null(strstr(text, "\"d2h_bytes_per_s\":\t0.30000000000000004,"));
	free(text);

	/* Not measured (the default), or one way only: no key, zeros back. */
	for (int i = 0; i < 3; i++) {
		small_profile(&p);
		if (i == 1)
			p.host_link = (struct lynx_profile_host_link){5.0e10, 0, 1e-5};
		if (i == 2)
			p.host_link = (struct lynx_profile_host_link){0, 4.8e10, 0};
		text = lynx_profile_to_json(&p);
		assert_non_null(text);
		assert_null(strstr(text, "host_link"));
		if (lynx_profile_from_json(text, strlen(text), &back, why, sizeof(why)))
			fail_msg("%s", why);
		assert_true(back.host_link.d2h_bytes_per_s == 0 &&
		            back.host_link.h2d_bytes_per_s == 0 && back.host_link.latency_s == 0);
		assert_false(lynx_profile_host_link_measured(&back.host_link));
		lynx_profile_free(&back);
		free(text);
	}
	/* Without the key the text is what it was before host links existed: it ends with
	 * memory. */
	small_profile(&p);
	text = lynx_profile_to_json(&p);
	assert_non_null(strstr(text, "\"largest_workspace_bytes\":\t40\n\t}\n}\n"));
	free(text);
	assert_true(lynx_profile_host_link_measured(&example_link));
}

/* text with the first occurrence of from replaced by to (malloc'ed). */
static char *replace(const char *text, const char *from, const char *to)
{
	const char *at = strstr(text, from);
	char *out;

	assert_non_null(at);
	out = malloc(strlen(text) + strlen(to) + 1);
	assert_non_null(out);
	sprintf(out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
	return out;
}

/* A profile written before warmup_forwards, the kernels' device times, the non-saved peak
 * and the largest workspace existed still reads: no pipeline position (0), no per-kernel
 * times (NULL), the non-saved peak taken at the peak (the other classes' sum), the largest
 * workspace as the workspaces at the peak. */
static void test_profile_reads_a_profile_without_the_optional_keys(void **state)
{
	struct lynx_profile p, back;
	char why[256];
	char *text, *old, *again;

	(void)state;
	small_profile(&p);
	p.warmup_forwards = 0;
	for (size_t i = 0; i < p.layer_count; i++)
		p.layers[i].fwd_kernels.ns = p.layers[i].bwd_kernels.ns = NULL;
	text = lynx_profile_to_json(&p);
	assert_non_null(text);
	assert_null(strstr(text, "_ns\":\t["));
	p.memory.non_saved_peak_bytes = 700; /* = 1000 - 300 saved at the peak */
	char *older = replace(text, "\"warmup_forwards\":\t0,", "");
	char *oldest = replace(older,
	                       ",\n\t\t\"non_saved_peak_bytes\":\t700,\n\t\t"
	                       "\"largest_workspace_bytes\":\t40",
	                       "");
	char *before_reruns = replace(oldest, "\t\t\t\"producer_end\":\t-1,\n", "");
	/* Each layer's "reruns_forward" (both rerun here: "rerun" says so alone). */
	char *one_rerun = replace(before_reruns, "\t\t\t\"reruns_forward\":\ttrue,\n", "");
	old = replace(one_rerun, "\t\t\t\"reruns_forward\":\ttrue,\n", "");
	assert_null(strstr(old, "reruns_forward"));
	free(one_rerun);
	free(before_reruns);
	free(oldest);
	free(older);
	assert_null(strstr(old, "producer_end"));
	assert_null(strstr(old, "non_saved_peak_bytes"));
	if (lynx_profile_from_json(old, strlen(old), &back, why, sizeof(why)))
		fail_msg("%s", why);
	assert_int_equal(back.warmup_forwards, 0);
	assert_false(lynx_profile_pipeline_known(&back));
	assert_null(strstr(text, "\"pipeline\""));
	assert_int_equal(back.memory.non_saved_peak_bytes, 700);
	/* One replay's scratch, counted as every workspace at the peak. */
	assert_int_equal(back.memory.largest_workspace_bytes,
	                 back.memory.at_peak[LYNX_PROFILE_MEMORY_WORKSPACE]);
	back.memory.largest_workspace_bytes = 40;
	assert_int_equal(back.groups[0].producer_end, back.groups[0].producer);
	assert_true(back.layers[0].reruns_forward && back.layers[1].reruns_forward);
	assert_null(back.layers[0].fwd_kernels.ns);
	again = lynx_profile_to_json(&back);
	assert_string_equal(again, text); /* the key comes back, explicit */
	lynx_profile_free(&back);
	free(text);
	free(old);
	free(again);
	small_profile(&p); /* the statics again, for the tests after this one */
}

static void test_profile_write_is_atomic_and_reads_back(void **state)
{
	struct lynx_profile p, back;
	char dir[] = "/tmp/test-profile.XXXXXX", path[64], why[256], cmd[128];
	char *text, *again;

	(void)state;
	small_profile(&p);
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/profile.0.json", dir);
	assert_int_equal(lynx_profile_write(&p, path), 0);
	assert_int_equal(lynx_profile_write(&p, path), 0); /* replaces it */
	if (lynx_profile_read(path, &back, why, sizeof(why)))
		fail_msg("%s", why);
	text = lynx_profile_to_json(&p);
	again = lynx_profile_to_json(&back);
	assert_string_equal(text, again);
	lynx_profile_free(&back);
	DIR *d = opendir(dir);
	struct dirent *e;
	int files = 0;
	while ((e = readdir(d)))
		files += e->d_name[0] != '.';
	closedir(d);
	assert_int_equal(files, 1); /* no temporary file left */
	snprintf(path, sizeof(path), "%s/missing/profile.json", dir);
	assert_int_equal(lynx_profile_write(&p, path), -ENOENT);
	assert_int_equal(lynx_profile_read(path, &back, why, sizeof(why)), -ENOENT);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
	free(text);
	free(again);
}

/* Refused with exactly this reason. */
static void refused(const char *text, const char *want)
{
	struct lynx_profile p;
	char why[256] = "";

	assert_int_equal(lynx_profile_from_json(text, strlen(text), &p, why, sizeof(why)), -EINVAL);
	if (!strstr(why, want))
		fail_msg("wanted \"%s\", got \"%s\"", want, why);
	assert_null(p.layers);
}

/* One edit of a written profile and the reason its reader must give for refusing it. */
struct edit {
	const char *from, *to, *want;
};

/* Each edit of text (its first `from` made `to`) is refused with its reason. */
static void refused_edits(const char *text, const struct edit *edits, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char *bad = replace(text, edits[i].from, edits[i].to);
		assert_string_not_equal(bad, text);
		refused(bad, edits[i].want);
		free(bad);
	}
}

static void test_profile_refuses_bad_fields_with_their_path(void **state)
{
	static const struct edit cases[] = {
	        {"\"lynx-profile\"", "\"lynx-plan\"",
	         "format: expected \"lynx-profile\", got \"lynx-plan\""},
	        {"\"version\":\t1", "\"version\":\t2",
	         "version: 2 is not supported (this reader knows lynx-profile version 1)"},
	        {"\"ns\":\t100", "\"ns\":\t-5",
	         "layers[0].forward.ns: expected an integer in [0, 9007199254740991], got -5"},
	        {"\"ns\":\t101", "\"ns\":\t1e300", "layers[1].forward.ns: expected an integer"},
	        {"\"min_ns\":\t90", "\"min_ns\":\t150",
	         "layers[0].forward: expected min_ns <= ns <= max_ns"},
	        {"\"kind\":\t\"pp_recv_bwd\"", "\"kind\":\t\"pp_sideways\"",
	         "windows[1].kind: unknown value \"pp_sideways\""},
	        {"\"producer_end\":\t-1", "\"producer_end\":\t2",
	         "groups[0].producer_end: 2 cannot end a run that starts at the producer -1"},
	        {"\"source\":\t\"device\"", "\"source\":\t\"sundial\"",
	         "layers[0].backward.source: unknown value \"sundial\""},
	        {"\"k1\"", "17", "layers[0].kernels.forward[1]: expected a string"},
	        {"\"layer\":\t1", "\"layer\":\t2", "groups[0].layer: 2 is not one of the 2 layers"},
	        {"\"microbatch\":\t1", "\"microbatch\":\t2",
	         "windows[0].microbatch: expected an integer in [-1, 1], got 2"},
	        {"\"index\":\t1", "\"index\":\t0", "layers[1].index: expected 1, got 0"},
	        {"\"rank\":\tnull", "\"rank\":\t\"zero\"", "rank: expected a number or null"},
	        {"\"memory\":", "\"mem\":", "memory: missing"},
	        {"\"saved_activation\":", "\"saved\":", "memory.at_peak.saved_activation: missing"},
	        {"\"rerun\":\ttrue", "\"rerun\":\t1", "rerun: expected true or false"},
	        {"\"rerun\":\ttrue", "\"rerun\":\tfalse",
	         "rerun: false, but 2 of the 2 layers rerun their forward"},
	        {"\"reruns_forward\":\ttrue", "\"reruns_forward\":\tfalse",
	         "rerun: true, but 1 of the 2 layers rerun their forward"},
	        {"\"reruns_forward\":\ttrue", "\"reruns_forward\":\t0",
	         "layers[0].reruns_forward: expected true or false"},
	        {"\"windows\":", "\"windows\":\t7,\n\t\"x\":", "windows: expected an array"},
	        {"\"forward_ns\":\t[70, 25]", "\"forward_ns\":\t[70]",
	         "layers[0].kernels.forward_ns: expected 2 entries (one per kernel in "
	         "layers[0].kernels.forward), got 1"},
	        {"\"backward_ns\":\t[280]", "\"backward_ns\":\t[280, 1]",
	         "layers[0].kernels.backward_ns: expected 1 entries"},
	        {"[70, 25]", "[70, -25]",
	         "layers[0].kernels.forward_ns[1]: expected an integer in [0, 9007199254740991]"},
	        {"[70, 25]", "[70, \"fast\"]",
	         "layers[0].kernels.forward_ns[1]: expected an integer"},
	        {"\"forward_ns\":\t[70, 25]", "\"forward_ns\":\t{}",
	         "layers[0].kernels.forward_ns: expected an array"},
	        {"\"warmup_forwards\":\t1", "\"warmup_forwards\":\t3",
	         "warmup_forwards: expected an integer in [0, 2], got 3"},
	        {"\"warmup_forwards\":\t1", "\"warmup_forwards\":\ttrue",
	         "warmup_forwards: expected a number"},
	};
	struct lynx_profile p;
	char *text;

	(void)state;
	small_profile(&p);
	text = lynx_profile_to_json(&p);
	assert_non_null(text);
	refused_edits(text, cases, sizeof(cases) / sizeof(cases[0]));
	refused("[1, 2]", "the document is not a JSON object");
	free(text);
	/* The pipeline's stage must lie among its stages. */
	p.pipeline_stage = 1;
	p.pipeline_stages = 2;
	text = lynx_profile_to_json(&p);
	p.pipeline_stages = 0;
	assert_non_null(text);
	char *bad = replace(text, "\"stage\":\t1", "\"stage\":\t2");
	refused(bad, "pipeline.stage: expected an integer in [0, 1], got 2");
	free(bad);
	bad = replace(text, "\"stages\":\t2", "\"stages\":\t0");
	refused(bad, "pipeline.stages: expected an integer in [1, 1048576], got 0");
	free(bad);
	free(text);
}

/*
 * What producer runs read: "reads" (other groups of the layer), "reads_freed", "chained" and
 * a chain's "writers" come back as written; a group without "reads" is unknown, as in
 * profiles from before the key. Indices of itself, beyond the groups, out of order or of
 * another layer, "reads_freed" alone, and writers that are not ascending positions before
 * the producer, too many or without "chained", are refused with the field's path. "scratch_bytes"
 * comes back where it was known (0 included) and is unknown where it was not written; a value that
 * is not a byte count is refused.
 */
static void test_profile_round_trip_keeps_what_producers_read(void **state)
{
	static uint32_t reads_first[] = {0};
	struct lynx_profile_group groups[3] = {
	        {.layer = 1,
	         .bytes = 4096,
	         .producer = 1,
	         .producer_end = 1,
	         .reads_known = true,
	         .chained = true,
	         .writers = {0},
	         .writer_count = 1,
	         .scratch_known = true},
	        {.layer = 1,
	         .bytes = 8192,
	         .producer = 0,
	         .reads_known = true,
	         .reads_freed = true,
	         .reads = reads_first,
	         .read_count = 1,
	         .scratch_known = true,
	         .scratch_bytes = 262144},
	        {.layer = 0, .bytes = 4096, .producer = 1, .producer_end = 1}};
	struct lynx_profile back;

	(void)state;
	char *text = with_groups_read_back(groups, 3, &back);
	assert_true(back.groups[0].reads_known && !back.groups[0].reads_freed);
	assert_true(back.groups[0].chained);
	assert_int_equal(back.groups[0].writer_count, 1);
	assert_int_equal(back.groups[0].writers[0], 0);
	assert_int_equal(back.groups[0].read_count, 0);
	assert_true(back.groups[1].reads_known && back.groups[1].reads_freed);
	assert_false(back.groups[1].chained);
	assert_int_equal(back.groups[1].read_count, 1);
	assert_int_equal(back.groups[1].reads[0], 0);
	assert_false(back.groups[2].reads_known);
	assert_null(back.groups[2].reads);
	assert_true(back.groups[0].scratch_known && back.groups[0].scratch_bytes == 0);
	assert_true(back.groups[1].scratch_known);
	assert_int_equal(back.groups[1].scratch_bytes, 262144);
	assert_false(back.groups[2].scratch_known);
	check_round_trip(&back);
	lynx_profile_free(&back);
	static const struct edit cases[] = {
	        {"\"reads\":\t[0]", "\"reads\":\t[1]",
	         "groups[1].reads[0]: expected the index of another group"},
	        {"\"reads\":\t[0]", "\"reads\":\t[3]",
	         "groups[1].reads[0]: expected the index of another group"},
	        {"\"reads\":\t[0]", "\"reads\":\t[2]",
	         "groups[1].reads[0]: group 2 is of layer 0, not of the group's layer 1"},
	        {"\"reads\":\t[0]", "\"reads\":\t[0, 0]",
	         "groups[1].reads[1]: 0 is not above the index before it"},
	        {"\"reads\":\t[0]", "\"reads\":\t{}", "groups[1].reads: expected an array"},
	        {"\"reads_freed\":\ttrue", "\"reads_freed\":\t1",
	         "groups[1].reads_freed: expected true or false"},
	        {"\"reads\":\t[0],", "", "groups[1].reads_freed: given without \"reads\""},
	        {"\"chained\":\ttrue", "\"chained\":\t0",
	         "groups[0].chained: expected true or false"},
	        {"\"reads\":\t[],", "", "groups[0].chained: given without \"reads\""},
	        {"\"reads_freed\":\ttrue", "\"reads_freed\":\ttrue, \"chained\": true",
	         "groups[1].chained: a run that cannot be replayed (reads_freed) is no chain"},
	        {"\"writers\":\t[0]", "\"writers\":\t[1]",
	         "groups[0].writers[0]: expected a forward position below the producer 1"},
	        {"\"writers\":\t[0]", "\"writers\":\t[0, 0]",
	         "groups[0].writers[1]: 0 is not above the position before it"},
	        {"\"writers\":\t[0]", "\"writers\":\t[0, 0, 0, 0, 0]",
	         "groups[0].writers: more than 4"},
	        {"\"writers\":\t[0]", "\"writers\":\t{}", "groups[0].writers: expected an array"},
	        {"\"reads_freed\":\ttrue", "\"reads_freed\":\ttrue, \"writers\": [0]",
	         "groups[1].writers: given without \"chained\""},
	        {"\"scratch_bytes\":\t262144", "\"scratch_bytes\":\t-1",
	         "groups[1].scratch_bytes: expected an integer"},
	};
	refused_edits(text, cases, sizeof(cases) / sizeof(cases[0]));
	free(text);
}

/*
 * Where the non-saved bytes were live: each kernel's, both directions, and outside the
 * layers, come back as written; in an older profile they are unknown. Given for some
 * places and not others, of the wrong length, or above the non-saved peak, they are
 * refused with the field's path.
 */
static void test_profile_round_trip_keeps_where_non_saved_bytes_live(void **state)
{
	static uint64_t fwd[2][2] = {{500, 650}, {520, 700}}, bwd[2][1] = {{690}, {610}};
	struct lynx_profile p, back;
	char why[256];

	(void)state;
	small_profile(&p);
	for (int l = 0; l < 2; l++) {
		p.layers[l].fwd_kernels.non_saved_bytes = fwd[l];
		p.layers[l].bwd_kernels.non_saved_bytes = bwd[l];
	}
	p.memory.non_saved_known = true;
	p.memory.non_saved_outside_bytes = 450;
	char *text = lynx_profile_to_json(&p);
	for (int l = 0; l < 2; l++) /* small_profile's layers are static: as they were */
		p.layers[l].fwd_kernels.non_saved_bytes = p.layers[l].bwd_kernels.non_saved_bytes =
		        NULL;
	assert_non_null(text);
	if (lynx_profile_from_json(text, strlen(text), &back, why, sizeof(why)))
		fail_msg("%s", why);
	assert_true(back.memory.non_saved_known);
	assert_int_equal(back.memory.non_saved_outside_bytes, 450);
	for (int l = 0; l < 2; l++) {
		assert_memory_equal(back.layers[l].fwd_kernels.non_saved_bytes, fwd[l],
		                    sizeof(fwd[l]));
		assert_memory_equal(back.layers[l].bwd_kernels.non_saved_bytes, bwd[l],
		                    sizeof(bwd[l]));
	}
	check_round_trip(&back);
	lynx_profile_free(&back);
	static const struct edit cases[] = {
	        {",\n\t\t\"non_saved_outside_bytes\":\t450", "",
	         "layers[0].kernels.forward_non_saved_bytes: given without "
	         "memory.non_saved_outside_bytes"},
	        {"\"forward_non_saved_bytes\":\t[500, 650]", "\"forward_non_saved_bytes\":\t[500]",
	         "layers[0].kernels.forward_non_saved_bytes: expected 2 entries (one per kernel "
	         "in layers[0].kernels.forward), got 1"},
	        {"\"backward_non_saved_bytes\":\t[690]", "\"backward_non_saved_bytes\":\t[701]",
	         "layers[0].kernels.backward_non_saved_bytes[0]: above "
	         "memory.non_saved_peak_bytes"},
	        {"\"non_saved_outside_bytes\":\t450", "\"non_saved_outside_bytes\":\t800",
	         "memory.non_saved_outside_bytes: above non_saved_peak_bytes"},
	        {"\"non_saved_outside_bytes\":\t450", "\"non_saved_outside_bytes\":\t-1",
	         "memory.non_saved_outside_bytes: expected an integer"},
	};
	refused_edits(text, cases, sizeof(cases) / sizeof(cases[0]));
	/* One layer's array dropped, the other's kept: missing beside the memory's key. */
	char *bad = replace(text, ",\n\t\t\t\t\"backward_non_saved_bytes\":\t[610]", "");
	assert_string_not_equal(bad, text);
	refused(bad, "layers[1].kernels.backward_non_saved_bytes: missing beside "
	             "memory.non_saved_outside_bytes");
	free(bad);
	free(text);
}

/*
 * Where the trainer freed a saved buffer: written last in its group when known, read back;
 * absent in an older profile, unknown. At or before its last consumer it is refused.
 */
static void test_profile_round_trip_keeps_where_saved_buffers_are_freed(void **state)
{
	struct lynx_profile_group groups[2] = {{.layer = 0,
	                                        .bytes = 4096,
	                                        .producer = 0,
	                                        .first_consumer = 0,
	                                        .last_consumer = 0,
	                                        .freed_known = true,
	                                        .freed_before = 1},
	                                       {.layer = 1,
	                                        .bytes = 8192,
	                                        .producer = 0,
	                                        .first_consumer = 0,
	                                        .last_consumer = 0}};
	struct lynx_profile back;

	(void)state;
	char *text = with_groups_read_back(groups, 2, &back);
	assert_true(back.groups[0].freed_known);
	assert_int_equal(back.groups[0].freed_before, 1);
	assert_false(back.groups[1].freed_known);
	check_round_trip(&back);
	lynx_profile_free(&back);
	static const struct edit cases[] = {
	        {"\"freed_before\":\t1", "\"freed_before\":\t0",
	         "groups[0].freed_before: 0 is not past its last consumer 0"},
	        {"\"freed_before\":\t1", "\"freed_before\":\t-1",
	         "groups[0].freed_before: expected an integer"},
	        {"\"freed_before\":\t1", "\"freed_before\":\t\"end\"",
	         "groups[0].freed_before: expected a number"},
	};
	refused_edits(text, cases, sizeof(cases) / sizeof(cases[0]));
	free(text);
}

/* The run: written after "world" when known, read back field for field (every source), and
 * absent when unknown, as from `lynx profile` or before the key existed. */
static void test_profile_round_trip_keeps_the_run(void **state)
{
	struct lynx_profile p, back;
	char why[256];
	char *text;

	(void)state;
	small_profile(&p);
	p.run = (struct lynx_profile_run){.known = true,
	                                  .source = LYNX_PROFILE_RUN_SOURCE_SLURM,
	                                  .id = "4711.0",
	                                  .started = 1795796401};
	text = lynx_profile_to_json(&p);
	assert_non_null(text);
	assert_non_null(strstr(text, "\"world\":\t8,\n\t\"run\":\t{\n\t\t\"id\":\t\"4711.0\",\n"
	                             "\t\t\"source\":\t\"SLURM_JOB_ID\",\n"
	                             "\t\t\"started\":\t1795796401\n\t},\n"));
	if (lynx_profile_from_json(text, strlen(text), &back, why, sizeof(why)))
		fail_msg("%s", why);
	assert_true(back.run.known);
	assert_int_equal(back.run.source, LYNX_PROFILE_RUN_SOURCE_SLURM);
	assert_string_equal(back.run.id, "4711.0");
	assert_int_equal(back.run.started, 1795796401);
	check_round_trip(&back);
	lynx_profile_free(&back);
	free(text);

	for (int s = 0; s < LYNX_PROFILE_RUN_SOURCE_COUNT; s++) {
		p.run.source = (enum lynx_profile_run_source)s;
		snprintf(p.run.id, sizeof(p.run.id), "%s",
		         s == LYNX_PROFILE_RUN_SOURCE_NONE ? "" : "x");
		text = lynx_profile_to_json(&p);
		if (lynx_profile_from_json(text, strlen(text), &back, why, sizeof(why)))
			fail_msg("%s: %s", lynx_profile_run_source_name(p.run.source), why);
		assert_int_equal(back.run.source, s);
		check_round_trip(&back);
		lynx_profile_free(&back);
		free(text);
	}
	/* A longest id, not all ASCII: 63 "é" (2 bytes each) and an "x". */
	p.run.id[0] = '\0';
	for (int i = 0; i < LYNX_PROFILE_RUN_ID_MAX / 2; i++)
		strcat(p.run.id, "\xc3\xa9");
	strcat(p.run.id, "x");
	assert_int_equal(strlen(p.run.id), LYNX_PROFILE_RUN_ID_MAX);
	check_round_trip(&p);

	/* Unknown: no key, and an older file without it reads as unknown. */
	small_profile(&p);
	text = lynx_profile_to_json(&p);
	assert_null(strstr(text, "\"run\""));
	if (lynx_profile_from_json(text, strlen(text), &back, why, sizeof(why)))
		fail_msg("%s", why);
	assert_false(back.run.known);
	assert_string_equal(back.run.id, "");
	lynx_profile_free(&back);
	free(text);
}

/* Each run field wrong: refused, naming it. */
static void test_profile_refuses_bad_run_fields(void **state)
{
	static const char id[] = "\"id\":\t\"4711\"", source[] = "\"source\":\t\"SLURM_JOB_ID\"",
	                  started[] = "\"started\":\t1795796401";
	static const struct edit cases[] = {
	        {id, "\"id\":\t4711", "run.id: expected a string"},
	        {id, "\"id\":\t\"\"", "run.id: empty, expected the id that SLURM_JOB_ID gave"},
	        {id, "\"id\":\t\"47\\u000111\"", "run.id: a control character (0x01) at byte 2"},
	        {id, "\"ident\":\t\"4711\"", "run.id: missing"},
	        {source, "\"source\":\t\"PBS_JOBID\"", "run.source: unknown value \"PBS_JOBID\""},
	        {source, "\"source\":\t\"none\"",
	         "run.id: expected \"\" with source \"none\", got \"4711\""},
	        {started, "\"started\":\t-1", "run.started: expected an integer in [0, "},
	        {started, "\"started\":\t1795796401.5", "run.started: expected an integer"},
	        {started, "\"begun\":\t1795796401", "run.started: missing"},
	        {"\"run\":\t{", "\"run\":\t[],\n\t\"x\":\t{", "run: expected an object"},
	};
	struct lynx_profile p;
	char *text, long_id[LYNX_PROFILE_RUN_ID_MAX + 40];

	(void)state;
	small_profile(&p);
	p.run = (struct lynx_profile_run){.known = true,
	                                  .source = LYNX_PROFILE_RUN_SOURCE_SLURM,
	                                  .id = "4711",
	                                  .started = 1795796401};
	text = lynx_profile_to_json(&p);
	assert_non_null(text);
	refused_edits(text, cases, sizeof(cases) / sizeof(cases[0]));
	snprintf(long_id, sizeof(long_id), "\"id\":\t\"%0*d\"", LYNX_PROFILE_RUN_ID_MAX + 1, 7);
	char *bad = replace(text, id, long_id);
	refused(bad, "run.id: 128 bytes, expected at most 127");
	free(bad);
	free(text);
}

/* Each host link field out of its range, of the wrong type or missing: refused, naming it. */
static void test_profile_refuses_bad_host_link_values(void **state)
{
	static const char d2h[] = "\"d2h_bytes_per_s\":\t50000000000",
	                  h2d[] = "\"h2d_bytes_per_s\":\t48000000000",
	                  lat[] = "\"latency_s\":\t1.2e-05";
	static const char rate[] = "expected a finite rate in bytes/s above 0, got ";
	static const char span[] = "expected a finite time in seconds in [0, 1), got ";
	static const struct {
		const char *from, *to, *want, *want2;
	} cases[] = {
	        {d2h, "\"d2h_bytes_per_s\":\t0", "host_link.d2h_bytes_per_s: ", "0"},
	        {d2h, "\"d2h_bytes_per_s\":\t-5e10", "host_link.d2h_bytes_per_s: ", "-50000000000"},
	        {d2h, "\"d2h_bytes_per_s\":\t1e999", "host_link.d2h_bytes_per_s: ", "inf"},
	        {d2h, "\"d2h_bytes_per_s\":\t\"fast\"",
	         "host_link.d2h_bytes_per_s: expected a number", NULL},
	        {d2h, "\"d2h\":\t5e10", "host_link.d2h_bytes_per_s: missing", NULL},
	        {h2d, "\"h2d_bytes_per_s\":\t0", "host_link.h2d_bytes_per_s: ", "0"},
	        {h2d, "\"h2d_bytes_per_s\":\t-1e999", "host_link.h2d_bytes_per_s: ", "-inf"},
	        {h2d, "\"h2d_bytes_per_s\":\tnull", "host_link.h2d_bytes_per_s: expected a number",
	         NULL},
	        {h2d, "\"h2d\":\t4.8e10", "host_link.h2d_bytes_per_s: missing", NULL},
	        {lat, "\"latency_s\":\t-1e-06", "host_link.latency_s: ", "-9.9999999999999995e-07"},
	        {lat, "\"latency_s\":\t1", "host_link.latency_s: ", "1"},
	        {lat, "\"latency_s\":\t1e999", "host_link.latency_s: ", "inf"},
	        {lat, "\"latency_s\":\ttrue", "host_link.latency_s: expected a number", NULL},
	        {lat, "\"latency\":\t0", "host_link.latency_s: missing", NULL},
	        {"\"host_link\":\t{", "\"host_link\":\t[],\n\t\"x\":\t{",
	         "host_link: expected an object", NULL},
	};
	struct lynx_profile p, back;
	char why[256], want[160];
	char *text, *ok;

	(void)state;
	small_profile(&p);
	p.host_link = example_link;
	text = lynx_profile_to_json(&p);
	assert_non_null(text);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *bad = replace(text, cases[i].from, cases[i].to);

		if (cases[i].want2)
			snprintf(want, sizeof(want), "%s%s%s", cases[i].want,
			         strstr(cases[i].from, "latency") ? span : rate, cases[i].want2);
		else
			snprintf(want, sizeof(want), "%s", cases[i].want);
		refused(bad, want);
		free(bad);
	}
	/* The edges that are fine: no latency, the smallest rate above 0. */
	ok = replace(text, lat, "\"latency_s\":\t0");
	if (lynx_profile_from_json(ok, strlen(ok), &back, why, sizeof(why)))
		fail_msg("%s", why);
	assert_true(back.host_link.latency_s == 0);
	assert_true(lynx_profile_host_link_measured(&back.host_link));
	lynx_profile_free(&back);
	free(ok);
	ok = replace(text, d2h, "\"d2h_bytes_per_s\":\t4.9e-324");
	if (lynx_profile_from_json(ok, strlen(ok), &back, why, sizeof(why)))
		fail_msg("%s", why);
	assert_true(back.host_link.d2h_bytes_per_s > 0);
	lynx_profile_free(&back);
	free(ok);
	free(text);
}

static void test_profile_refuses_truncated_and_corrupted_text_with_offset(void **state)
{
	struct lynx_profile p, back;
	char why[256], want[128];
	char *text;
	size_t len;

	(void)state;
	small_profile(&p);
	text = lynx_profile_to_json(&p);
	assert_non_null(text);
	len = strlen(text);
	/* Every truncation: never accepted (the last newline is optional), always a reason. */
	for (size_t n = 0; n + 2 < len; n++) {
		int err = lynx_profile_from_json(text, n, &back, why, sizeof(why));
		if (err != -EINVAL)
			fail_msg("truncated at %zu: %d", n, err);
		assert_non_null(strstr(why, "byte"));
	}
	assert_int_equal(lynx_profile_from_json(text, len / 2, &back, why, sizeof(why)), -EINVAL);
	snprintf(want, sizeof(want), "not valid JSON: the text ends early (after %zu bytes",
	         len / 2);
	assert_non_null(strstr(why, want));
	/* A syntax error: its byte, line and column. */
	char *bad = replace(text, "\"world\":", "\"world\"=");
	size_t at = (size_t)(strchr(strstr(bad, "\"world\""), '=') - bad);
	assert_int_equal(lynx_profile_from_json(bad, strlen(bad), &back, why, sizeof(why)),
	                 -EINVAL);
	snprintf(want, sizeof(want), "parsing stopped at byte %zu (line 5, column 9)", at);
	if (!strstr(why, want))
		fail_msg("wanted \"%s\", got \"%s\"", want, why);
	free(bad);
	/* A NUL inside, and garbage after the document. */
	assert_int_equal(lynx_profile_from_json("{}\0{}", 5, &back, why, sizeof(why)), -EINVAL);
	assert_string_equal(why, "not valid JSON: a NUL byte at byte 2");
	assert_int_equal(lynx_profile_from_json("{} x", 4, &back, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "parsing stopped at byte 3"));
	/* Byte flips: accepted or refused with a reason, never a crash (ASan runs this too). */
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	char *copy = malloc(len);
	assert_non_null(copy);
	for (int round = 0; round < 3000; round++) {
		memcpy(copy, text, len);
		for (int f = 0; f < 1 + round % 4; f++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			copy[(seed >> 33) % len] = (char)(seed >> 17);
		}
		why[0] = '\0';
		int err = lynx_profile_from_json(copy, len, &back, why, sizeof(why));
		if (!err) {
			check_round_trip(&back);
			lynx_profile_free(&back);
		} else {
			assert_int_equal(err, -EINVAL);
			assert_true(why[0] != '\0');
		}
	}
	free(copy);
	free(text);
}

/* `lynx profile` on a recorded dump, then --read on its output and on a truncated copy. */
static void test_profile_command_writes_reads_and_refuses(void **state)
{
	struct recording rec;
	char cmd[4096], path[1200], events[1400];
	struct dirent *d;
	FILE *f;

	(void)state;
	assert_int_equal(record_tinytrain("--nproc 1 --layers 4 --microbatches 2 --steps 2", &rec),
	                 0);
	DIR *dir = opendir(rec.dir);
	assert_non_null(dir);
	events[0] = '\0';
	while ((d = readdir(dir)))
		if (!strncmp(d->d_name, "ev.", 3) && rec.rank[0].pid == atoi(d->d_name + 3))
			snprintf(events, sizeof(events), "%s/%s", rec.dir, d->d_name);
	closedir(dir);
	assert_true(events[0] != '\0');
	snprintf(path, sizeof(path), "%s/profile.0.json", rec.dir);
	snprintf(cmd, sizeof(cmd), "%s/bin/lynx profile %s -o %s --rank 0 --world 1 >%s/out 2>&1",
	         record_build_dir, events, path, rec.dir);
	assert_int_equal(system(cmd), 0);
	snprintf(cmd, sizeof(cmd), "grep -q 'layers: 4 on this stage' %s/out", rec.dir);
	assert_int_equal(system(cmd), 0);
	snprintf(cmd, sizeof(cmd), "%s/bin/lynx profile --read %s >%s/out 2>&1", record_build_dir,
	         path, rec.dir);
	assert_int_equal(system(cmd), 0);
	snprintf(cmd, sizeof(cmd), "head -c 3000 %s > %s.cut", path, path);
	assert_int_equal(system(cmd), 0);
	snprintf(cmd, sizeof(cmd), "%s/bin/lynx profile --read %s.cut >%s/out 2>&1",
	         record_build_dir, path, rec.dir);
	int status = system(cmd);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 2);
	snprintf(cmd, sizeof(cmd), "%s/out", rec.dir);
	f = fopen(cmd, "r");
	assert_non_null(f);
	assert_non_null(fgets(cmd, sizeof(cmd), f));
	fclose(f);
	if (!strstr(cmd, "not valid JSON: the text ends early (after 3000 bytes"))
		fail_msg("got: %s", cmd);
	record_release(&rec);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_profile_pp2_tp2_layers_and_windows),
	        cmocka_unit_test(test_profile_dp2_gradient_reductions),
	        cmocka_unit_test(test_profile_round_trip_keeps_every_field),
	        cmocka_unit_test(test_profile_round_trip_keeps_which_layers_rerun),
	        cmocka_unit_test(test_rerun_note_says_what_the_reruns_cost),
	        cmocka_unit_test(test_profile_round_trip_keeps_the_host_link),
	        cmocka_unit_test(test_profile_reads_a_profile_without_the_optional_keys),
	        cmocka_unit_test(test_profile_write_is_atomic_and_reads_back),
	        cmocka_unit_test(test_profile_refuses_bad_fields_with_their_path),
	        cmocka_unit_test(test_profile_refuses_bad_host_link_values),
	        cmocka_unit_test(test_profile_round_trip_keeps_what_producers_read),
	        cmocka_unit_test(test_profile_round_trip_keeps_where_non_saved_bytes_live),
	        cmocka_unit_test(test_profile_round_trip_keeps_where_saved_buffers_are_freed),
	        cmocka_unit_test(test_profile_round_trip_keeps_the_run),
	        cmocka_unit_test(test_profile_refuses_bad_run_fields),
	        cmocka_unit_test(test_profile_refuses_truncated_and_corrupted_text_with_offset),
	        cmocka_unit_test(test_profile_command_writes_reads_and_refuses),
	};

	if (argc < 1 || record_init(argv[0])) {
		fprintf(stderr, "cannot find the build directory from %s\n", argc ? argv[0] : "?");
		return 1;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
