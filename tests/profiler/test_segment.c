/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Splitting iterations into layers (profiler/segment.c) on tinytrain's real traces: every
 * rank of every configuration finds exactly layers / pp layers and every micro-batch, in
 * every step, with segments in launch order (forward layers ascending, backward
 * descending, each backward after its forward); the backward on its own thread when the
 * backward-thread hazard is on; full recompute's rerun flagged and still L/pp layers, and
 * block recompute's on the first layers of each stage only, uniform recompute's groups; a
 * stage with no repeat refused with a reason.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "period.h"
#include "record.h"
#include "segment.h"

struct config {
	const char *args;
	int ranks, steps, layers_per_stage, microbatches;
	int reruns; /* the first layers of a stage that rerun their forward in the backward */
	bool backward_thread;
};

/* The thread that launched most of a segment's kernels. */
static uint32_t launcher(const struct lynx_prof_trace *t, const struct lynx_prof_segment *s)
{
	for (size_t i = s->first; i < s->end; i++)
		if (t->events[i].kind == LYNX_PROF_LAUNCH)
			return t->events[i].tid;
	fail_msg("segment [%zu, %zu) has no launch", s->first, s->end);
	return 0;
}

static void check_rank(const struct config *c, const struct lynx_prof_trace *t)
{
	struct lynx_prof_iterations it;
	char why[256];

	if (lynx_prof_find_iterations(t, &it, why, sizeof(why)))
		fail_msg("%s: %s", c->args, why);
	assert_int_equal(it.count, c->steps);
	for (size_t s = 0; s < it.count; s++) {
		struct lynx_prof_layers l;
		if (lynx_prof_segment_layers(t, &it.iter[s], &l, why, sizeof(why)))
			fail_msg("%s, pid %d, step %zu: %s", c->args, t->pid, s, why);
		assert_int_equal(l.layers, c->layers_per_stage);
		assert_int_equal(l.microbatches, c->microbatches);
		for (int k = 0; k < c->layers_per_stage; k++)
			assert_int_equal(l.reruns[k], k < c->reruns);
		assert_true(l.bwd_period > l.fwd_period);
		for (size_t m = 0; m < l.microbatches; m++) {
			for (size_t k = 0; k < l.layers; k++) {
				const struct lynx_prof_segment *f = &l.fwd[m * l.layers + k];
				const struct lynx_prof_segment *b = &l.bwd[m * l.layers + k];
				assert_true(f->first >= it.iter[s].first &&
				            f->end <= it.iter[s].end);
				assert_true(b->first >= it.iter[s].first &&
				            b->end <= it.iter[s].end);
				assert_true(f->first < f->end && b->first < b->end);
				assert_true(f->end <=
				            b->first); /* the backward after its forward */
				if (k) { /* forward ascending, backward descending, back to back */
					assert_int_equal(f->first, l.fwd[m * l.layers + k - 1].end);
					assert_int_equal(b->end, l.bwd[m * l.layers + k - 1].first);
				}
				if (m) /* micro-batches in order */
					assert_true(f->first >= l.fwd[(m - 1) * l.layers + k].end);
				uint32_t ft = launcher(t, f), bt = launcher(t, b);
				if (c->backward_thread)
					assert_int_not_equal(ft, bt);
				else
					assert_int_equal(ft, bt);
			}
		}
		lynx_prof_layers_free(&l);
	}
	lynx_prof_iterations_free(&it);
}

static void check(const struct config *c)
{
	struct recording rec;

	assert_int_equal(record_tinytrain(c->args, &rec), 0);
	assert_int_equal(rec.ranks, c->ranks);
	for (int r = 0; r < rec.ranks; r++)
		check_rank(c, &rec.rank[r]);
	record_release(&rec);
}

/* ---- What PyTorch's DDP does (seen on an H100, torch 2.11, eager) ------------------------ */

struct builder {
	struct lynx_prof_event ev[4096];
	size_t n;
};

static void add(struct builder *b, enum lynx_prof_kind kind, uint64_t what, uint32_t tid)
{
	struct lynx_prof_event *e = &b->ev[b->n];

	assert_true(b->n < 4096);
	memset(e, 0, sizeof(*e));
	e->t_ns = 1000 * (b->n + 1);
	e->tid = tid;
	e->index = (uint32_t)b->n++;
	e->kind = kind;
	e->hook = kind == LYNX_PROF_SYNC   ? "cudaStreamSynchronize"
	          : kind == LYNX_PROF_COLL ? "ncclAllReduce"
	                                   : "__cudaLaunchKernel";
	if (kind == LYNX_PROF_LAUNCH) {
		e->u.launch.function = what;
		e->u.launch.grid[0] = e->u.launch.block[0] = 1;
	} else if (kind == LYNX_PROF_COLL) {
		e->u.nccl.count = what;
	}
}

/*
 * One step: 8 forward layers (6 kernels), the loss, 8 backward layers (9 kernels) from the
 * autograd thread with DDP's bucket all-reduce after every third layer's gradients (a
 * bucket spans layers: its call falls at a different place in each layer it ends in), then
 * a loop over each layer's parameters (the trainer hashes them: 5 kernels per layer) and
 * the host synchronisation.
 */
static void ddp_step(struct builder *b)
{
	for (int l = 0; l < 8; l++)
		for (uint64_t k = 0; k < 6; k++)
			add(b, LYNX_PROF_LAUNCH, 0xf0 + k, 1);
	add(b, LYNX_PROF_LAUNCH, 0x1055, 1);
	for (int l = 0, kernels = 0; l < 8; l++)
		for (uint64_t k = 0; k < 9; k++) {
			add(b, LYNX_PROF_LAUNCH, 0xb0 + k, 2);
			if (++kernels % 25 == 0)
				add(b, LYNX_PROF_COLL, 1 << 22, 2);
		}
	add(b, LYNX_PROF_COLL, 1 << 20, 2); /* the last, smaller bucket */
	for (int l = 0; l < 8; l++)
		for (uint64_t k = 0; k < 5; k++)
			add(b, LYNX_PROF_LAUNCH, 0x4a0 + k, 1);
	add(b, LYNX_PROF_SYNC, 0, 1);
}

static void test_segment_finds_layers_under_ddp_with_a_loop_over_parameters(void **state)
{
	struct builder *b = calloc(1, sizeof(*b));
	struct lynx_prof_iterations it;
	struct lynx_prof_layers l;
	char why[512];

	(void)state;
	for (int s = 0; s < 4; s++)
		ddp_step(b);
	struct lynx_prof_trace t = {1, b->ev, b->n, NULL};
	assert_int_equal(lynx_prof_find_iterations(&t, &it, why, sizeof(why)), 0);
	int err = lynx_prof_segment_layers(&t, &it.iter[1], &l, why, sizeof(why));
	if (err)
		fail_msg("%s", why);
	assert_int_equal(l.layers, 8);
	assert_int_equal(l.microbatches, 1);
	assert_int_equal(l.fwd_period, 6);
	assert_int_equal(l.bwd_period, 9);
	/* Each backward segment is launched by the autograd thread; the collectives stay
	 * inside the segments that hold their places. */
	for (size_t k = 0; k < 8; k++) {
		assert_int_equal(t.events[l.fwd[k].first].tid, 1);
		assert_int_equal(t.events[l.bwd[k].end - 1].tid, 2);
		assert_true(l.fwd[k].end <= l.bwd[0].first);
	}
	lynx_prof_layers_free(&l);
	lynx_prof_iterations_free(&it);
	free(b);
}

/*
 * One step of a mixture-of-experts model whose experts run one after another (Megatron's
 * SequentialMLP, a Hugging Face MoE block's loop over experts): each of 8 layers launches
 * its attention (5 kernels), the router, then 3 kernels per expert for 16 experts (48 of the
 * forward's 55 launches), then the combine; the backward the same in reverse, the
 * optimizer over the parameters, and the host synchronisation. The expert loop is most of
 * each layer, with a period of three launches.
 */
static void moe_step(struct builder *b)
{
	for (int l = 0; l < 8; l++) {
		for (uint64_t k = 0; k < 6; k++)
			add(b, LYNX_PROF_LAUNCH, 0x100 + k, 1);
		for (int e = 0; e < 16; e++)
			for (uint64_t k = 0; k < 3; k++)
				add(b, LYNX_PROF_LAUNCH, 0x200 + k, 1);
		add(b, LYNX_PROF_LAUNCH, 0x1ff, 1);
	}
	add(b, LYNX_PROF_LAUNCH, 0x1055, 1);
	for (int l = 0; l < 8; l++) {
		add(b, LYNX_PROF_LAUNCH, 0x3ff, 1);
		for (int e = 0; e < 16; e++)
			for (uint64_t k = 0; k < 3; k++)
				add(b, LYNX_PROF_LAUNCH, 0x400 + k, 1);
		for (uint64_t k = 0; k < 7; k++)
			add(b, LYNX_PROF_LAUNCH, 0x300 + k, 1);
	}
	for (uint64_t k = 0; k < 4; k++)
		add(b, LYNX_PROF_LAUNCH, 0x4a0 + k, 1);
	add(b, LYNX_PROF_SYNC, 0, 1);
}

/* Four steps that `step` adds to b, segmented at the last iteration found, into l (free it
 * with lynx_prof_layers_free()). Returns the trace, whose events are b's. */
static struct lynx_prof_trace segment_steps(struct builder *b, void (*step)(struct builder *),
                                            struct lynx_prof_layers *l)
{
	struct lynx_prof_iterations it;
	char why[1024];

	for (int s = 0; s < 4; s++)
		step(b);
	struct lynx_prof_trace t = {1, b->ev, b->n, NULL};
	assert_int_equal(lynx_prof_find_iterations(&t, &it, why, sizeof(why)), 0);
	int err = lynx_prof_segment_layers(&t, &it.iter[it.count - 1], l, why, sizeof(why));
	lynx_prof_iterations_free(&it);
	if (err)
		fail_msg("%s", why);
	return t;
}

static void test_segment_finds_layers_around_a_loop_of_several_kernels(void **state)
{
	struct builder *b = calloc(1, sizeof(*b));
	struct lynx_prof_layers l;

	(void)state;
	segment_steps(b, moe_step, &l);
	assert_int_equal(l.layers, 8);
	assert_int_equal(l.microbatches, 1);
	/* Each forward segment holds its layer's 55 launches, each backward its 56. */
	for (size_t k = 0; k < 8; k++) {
		assert_int_equal(l.fwd[k].end - l.fwd[k].first, 55);
		assert_int_equal(l.bwd[k].end - l.bwd[k].first, 56);
	}
	lynx_prof_layers_free(&l);
	free(b);
}

/*
 * One step of Megatron's block recompute as PyTorch launches it: 4 layers whose forward ends
 * with the residual add (6 kernels), the loss, then on the autograd thread the loss's
 * backward, whose last kernel is that add too, the backward of layers 3, 2 and 1 (8 kernels
 * and the add that sums the residual's gradient) and of layer 0, which reruns its forward
 * first; then the optimizer, per layer, and the host synchronisation.
 */
static void block_recompute_step(struct builder *b)
{
	enum { ADD = 0xad };

	for (int l = 0; l < 4; l++) {
		for (uint64_t k = 0; k < 5; k++)
			add(b, LYNX_PROF_LAUNCH, 0xf0 + k, 1);
		add(b, LYNX_PROF_LAUNCH, ADD, 1);
	}
	add(b, LYNX_PROF_LAUNCH, 0x1055, 1);
	add(b, LYNX_PROF_LAUNCH, 0x1056, 2);
	add(b, LYNX_PROF_LAUNCH, ADD, 2);
	for (int l = 3; l >= 0; l--) {
		for (uint64_t k = 0; l < 1 && k < 6; k++)
			add(b, LYNX_PROF_LAUNCH, k < 5 ? 0xf0 + k : ADD, 2);
		for (uint64_t k = 0; k < 8; k++)
			add(b, LYNX_PROF_LAUNCH, 0xb0 + k, 2);
		add(b, LYNX_PROF_LAUNCH, ADD, 2);
	}
	for (int l = 0; l < 4; l++)
		for (uint64_t k = 0; k < 3; k++)
			add(b, LYNX_PROF_LAUNCH, 0x4a0 + k, 1);
	add(b, LYNX_PROF_SYNC, 0, 1);
}

/* The backward motif's run starts one launch early (at the loss backward's add, on the same
 * thread): the plain backward is found at another phase of it, and layer 0 holds its rerun
 * forward. */
static void test_segment_reads_block_recompute_whatever_the_phase(void **state)
{
	struct builder *b = calloc(1, sizeof(*b));
	struct lynx_prof_layers l;

	(void)state;
	struct lynx_prof_trace t = segment_steps(b, block_recompute_step, &l);
	assert_int_equal(l.layers, 4);
	assert_int_equal(l.microbatches, 1);
	for (size_t k = 0; k < 4; k++) {
		assert_int_equal(l.reruns[k], k == 0);
		assert_int_equal(l.fwd[k].end - l.fwd[k].first, 6);
		assert_int_equal(l.bwd[k].end - l.bwd[k].first, k == 0 ? 15 : 9);
		assert_int_equal(t.events[l.bwd[k].first].tid, 2);
	}
	lynx_prof_layers_free(&l);
	free(b);
}

static void test_segment_finds_each_stage_layers_pp2_tp2(void **state)
{
	static const struct config c = {
	        "--nproc 4 --pp 2 --tp 2 --layers 8 --microbatches 4 --steps 2",
	        4,
	        2,
	        4,
	        4,
	        false,
	        true};
	(void)state;
	check(&c);
}

static void test_segment_finds_layers_without_pipeline(void **state)
{
	static const struct config c = {
	        "--nproc 1 --layers 4 --microbatches 2 --steps 2", 1, 2, 4, 2, false, true};
	static const struct config dp = {
	        "--nproc 2 --dp 2 --layers 6 --microbatches 2 --steps 2", 2, 2, 6, 2, false, true};
	(void)state;
	check(&c);
	check(&dp);
}

static void test_segment_finds_layers_on_four_stages(void **state)
{
	static const struct config c = {
	        "--nproc 4 --pp 4 --layers 8 --microbatches 6 --steps 2", 4, 2, 2, 6, false, true};
	(void)state;
	check(&c);
}

static void test_segment_flags_full_recompute_and_keeps_the_layers(void **state)
{
	static const struct config c = {
	        "--nproc 4 --pp 2 --tp 2 --layers 8 --microbatches 4 --steps 2 --recompute full",
	        4,
	        2,
	        4,
	        4,
	        4,
	        true};
	(void)state;
	check(&c);
}

/*
 * Megatron's block recompute reruns the forward of each stage's first N layers only: a
 * backward stack is then L-N plain backwards and N that hold a forward first, which no one
 * motif covers ("backward stack has 2 layers, the first forward 4"). On pipeline stages with
 * tensor parallelism, and on one stage with data parallelism's buckets; every layer's
 * backward segment holds its own rerun, as checked above (back to back, in order).
 */
static void test_segment_finds_layers_under_block_recompute(void **state)
{
	static const struct config pp = {"--nproc 4 --pp 2 --tp 2 --layers 8 --microbatches 4 "
	                                 "--steps 2 --recompute full --recompute-layers 1",
	                                 4,
	                                 2,
	                                 4,
	                                 4,
	                                 1,
	                                 true};
	static const struct config ddp = {"--nproc 2 --dp 2 --layers 4 --microbatches 2 "
	                                  "--ddp-buckets 16 --steps 2 --recompute full "
	                                  "--recompute-layers 3",
	                                  2,
	                                  2,
	                                  4,
	                                  2,
	                                  3,
	                                  true};
	(void)state;
	check(&pp);
	check(&ddp);
}

/*
 * Megatron's uniform method checkpoints groups of N layers: the backward of a group's top
 * layer reruns the group's N forwards first, back to back, which look like a forward stack
 * that is too short (or, with N = L, one too many) and not apart from the next ("a loop
 * inside the layer"). Every layer reruns; a group of 3 in a stage of 4 leaves a group of 1.
 */
static void test_segment_finds_layers_under_uniform_recompute(void **state)
{
	static const struct config pp = {"--nproc 4 --pp 2 --tp 2 --layers 8 --microbatches 4 "
	                                 "--steps 2 --recompute full --recompute-groups 3",
	                                 4,
	                                 2,
	                                 4,
	                                 4,
	                                 4,
	                                 true};
	static const struct config whole = {"--nproc 2 --pp 2 --layers 8 --microbatches 2 "
	                                    "--steps 2 --recompute full --recompute-groups 4",
	                                    2,
	                                    2,
	                                    4,
	                                    2,
	                                    4,
	                                    true};
	static const struct config ddp = {"--nproc 2 --dp 2 --layers 4 --microbatches 2 "
	                                  "--ddp-buckets 16 --steps 2 --recompute full "
	                                  "--recompute-groups 2",
	                                  2,
	                                  2,
	                                  4,
	                                  2,
	                                  4,
	                                  true};
	(void)state;
	check(&pp);
	check(&whole);
	check(&ddp);
}

/*
 * Both methods under the interleaved schedule (each model chunk's pass a micro-batch of its
 * own): a stage's steady state runs a forward stack and, at once, a backward, whose group
 * reruns can follow the forward stack in one run of forward units.
 */
static void test_segment_finds_recomputed_layers_under_the_interleaved_schedule(void **state)
{
	static const struct config block = {"--nproc 3 --pp 3 --layers 24 --microbatches 3 "
	                                    "--schedule interleaved --virtual-stages 2 --steps 2 "
	                                    "--recompute full --recompute-layers 1",
	                                    3,
	                                    2,
	                                    4,
	                                    6,
	                                    1,
	                                    true};
	static const struct config uniform = {"--nproc 3 --pp 3 --layers 24 --microbatches 3 "
	                                      "--schedule interleaved --virtual-stages 2 "
	                                      "--steps 2 --recompute full --recompute-groups 2",
	                                      3,
	                                      2,
	                                      4,
	                                      6,
	                                      4,
	                                      true};
	(void)state;
	check(&block);
	check(&uniform);
}

static void test_segment_finds_layers_with_selective_recompute(void **state)
{
	static const struct config c = {"--nproc 4 --pp 2 --tp 2 --layers 8 --microbatches 4 "
	                                "--steps 2 --recompute selective",
	                                4,
	                                2,
	                                4,
	                                4,
	                                false,
	                                true};
	(void)state;
	check(&c);
}

static void test_segment_finds_layers_with_the_backward_on_the_same_thread(void **state)
{
	static const struct config c = {"--nproc 4 --pp 2 --tp 2 --layers 8 --microbatches 4 "
	                                "--steps 2 --no-hazard backward-thread",
	                                4,
	                                2,
	                                4,
	                                4,
	                                false,
	                                false};
	(void)state;
	check(&c);
}

/*
 * A kernel launched once per sequence of the micro-batch (tinytrain's attention dropout):
 * at 32 sequences that inner loop is most of a layer's launches, and was taken for the
 * layer ("backward stack has 2 layers, the first forward 32"). With tensor parallelism's
 * collectives in the motif, and with DDP's buckets, which need both left out.
 */
static void test_segment_finds_layers_around_a_kernel_launched_per_sequence(void **state)
{
	static const struct config tp = {"--nproc 4 --pp 2 --tp 2 --layers 8 --microbatches 4 "
	                                 "--seq 8 --batch 32 --steps 2",
	                                 4,
	                                 2,
	                                 4,
	                                 4,
	                                 false,
	                                 true};
	static const struct config ddp = {"--nproc 2 --dp 2 --layers 4 --microbatches 2 "
	                                  "--seq 8 --batch 32 --ddp-buckets 16 --steps 2",
	                                  2,
	                                  2,
	                                  4,
	                                  2,
	                                  false,
	                                  true};
	(void)state;
	check(&tp);
	check(&ddp);
}

static void test_segment_refuses_a_stage_of_one_layer(void **state)
{
	struct recording rec;
	struct lynx_prof_iterations it;
	struct lynx_prof_layers l;
	char why[256];

	(void)state;
	assert_int_equal(
	        record_tinytrain("--nproc 2 --pp 2 --layers 2 --microbatches 2 --steps 3", &rec),
	        0);
	assert_int_equal(rec.ranks, 2);
	for (int r = 0; r < rec.ranks; r++) {
		assert_int_equal(lynx_prof_find_iterations(&rec.rank[r], &it, why, sizeof(why)), 0);
		assert_int_equal(
		        lynx_prof_segment_layers(&rec.rank[r], &it.iter[0], &l, why, sizeof(why)),
		        -EINVAL);
		assert_true(why[0] != 0);
		assert_null(l.fwd);
		lynx_prof_iterations_free(&it);
	}
	record_release(&rec);
}

int main(int argc, char **argv)
{
	(void)argc;
	if (record_init(argv[0]))
		return 1;
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_segment_finds_each_stage_layers_pp2_tp2),
	        cmocka_unit_test(test_segment_finds_layers_without_pipeline),
	        cmocka_unit_test(test_segment_finds_layers_on_four_stages),
	        cmocka_unit_test(test_segment_flags_full_recompute_and_keeps_the_layers),
	        cmocka_unit_test(test_segment_finds_layers_under_block_recompute),
	        cmocka_unit_test(test_segment_finds_layers_under_uniform_recompute),
	        cmocka_unit_test(test_segment_reads_block_recompute_whatever_the_phase),
	        cmocka_unit_test(
	                test_segment_finds_recomputed_layers_under_the_interleaved_schedule),
	        cmocka_unit_test(test_segment_finds_layers_with_selective_recompute),
	        cmocka_unit_test(test_segment_finds_layers_with_the_backward_on_the_same_thread),
	        cmocka_unit_test(test_segment_refuses_a_stage_of_one_layer),
	        cmocka_unit_test(test_segment_finds_layers_around_a_kernel_launched_per_sequence),
	        cmocka_unit_test(test_segment_finds_layers_under_ddp_with_a_loop_over_parameters),
	        cmocka_unit_test(test_segment_finds_layers_around_a_loop_of_several_kernels),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
