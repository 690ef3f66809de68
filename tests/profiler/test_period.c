/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Finding the training iteration (profiler/period.c): on tinytrain's real traces (with
 * and without the backward thread, with pipeline and tensor parallelism) every step is
 * found on every rank; a first iteration that differs (lazy initialisation, warm-up
 * allocations) is left in the prefix; eval steps between training steps do not pass for
 * the iteration; and a trace without repeats is refused with a reason.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fnv.h"
#include "period.h"
#include "record.h"

/* ---- Synthetic traces ------------------------------------------------------------------- */

struct builder {
	struct lynx_prof_event ev[4096];
	size_t n;
};

static void add(struct builder *b, enum lynx_prof_kind kind, uint64_t what)
{
	struct lynx_prof_event *e = &b->ev[b->n];

	assert_true(b->n < 4096);
	memset(e, 0, sizeof(*e));
	e->t_ns = 1000 * (b->n + 1);
	e->tid = 1;
	e->index = (uint32_t)b->n++;
	e->kind = kind;
	e->hook = kind == LYNX_PROF_SYNC ? "cudaDeviceSynchronize" : "cudaLaunchKernel";
	if (kind == LYNX_PROF_LAUNCH) {
		e->u.launch.function = what;
		e->u.launch.grid[0] = e->u.launch.block[0] = 1;
	} else if (kind == LYNX_PROF_ALLOC || kind == LYNX_PROF_MEMSET) {
		e->u.mem.ptr = 0x10000 * (b->n + 7); /* a new address every time */
		e->u.mem.bytes = what;
	}
}

/* A training step: zero the gradients, 4 forward layers (3 kernels and an allocation
 * each), the loss, 4 backward layers, the optimizer, a host synchronisation. lazy adds
 * what a first step does once: more allocations and an initialisation kernel. */
static void train_step(struct builder *b, bool lazy)
{
	add(b, LYNX_PROF_MEMSET, 4096);
	for (int l = 0; l < 4; l++) {
		add(b, LYNX_PROF_ALLOC, 512);
		add(b, LYNX_PROF_LAUNCH, 0xa);
		add(b, LYNX_PROF_LAUNCH, 0xb);
		add(b, LYNX_PROF_LAUNCH, 0xc);
	}
	add(b, LYNX_PROF_LAUNCH, 0x1055);
	for (int l = 0; l < 4; l++) {
		add(b, LYNX_PROF_LAUNCH, 0xe);
		add(b, LYNX_PROF_LAUNCH, 0xf);
		add(b, LYNX_PROF_FREE, 0);
		if (lazy)
			add(b, LYNX_PROF_ALLOC, 1 << 20);
	}
	if (lazy)
		add(b, LYNX_PROF_LAUNCH, 0x1417);
	add(b, LYNX_PROF_LAUNCH, 0xadab);
	add(b, LYNX_PROF_SYNC, 0);
}

static void eval_step(struct builder *b)
{
	for (int l = 0; l < 4; l++) {
		add(b, LYNX_PROF_LAUNCH, 0xa);
		add(b, LYNX_PROF_LAUNCH, 0xb);
		add(b, LYNX_PROF_LAUNCH, 0xc);
	}
	add(b, LYNX_PROF_LAUNCH, 0x1055);
	add(b, LYNX_PROF_SYNC, 0);
}

static struct lynx_prof_trace trace_of(struct builder *b)
{
	return (struct lynx_prof_trace){1, b->ev, b->n, NULL};
}

static void test_period_leaves_a_different_first_iteration_in_the_prefix(void **state)
{
	struct builder *b = calloc(1, sizeof(*b));
	struct lynx_prof_iterations it;
	char why[256];

	(void)state;
	add(b, LYNX_PROF_LAUNCH, 0x1417); /* model initialisation */
	train_step(b, true);
	size_t second = b->n;
	for (int s = 0; s < 3; s++)
		train_step(b, false);
	struct lynx_prof_trace t = trace_of(b);
	assert_int_equal(lynx_prof_find_iterations(&t, &it, why, sizeof(why)), 0);
	assert_int_equal(it.period, 24); /* memset, 12 + 1 + 8 + 1 launches, sync */
	assert_int_equal(it.count, 3);
	assert_int_equal(it.prefix_end, second);
	for (size_t i = 0; i < it.count; i++) {
		assert_int_equal(it.iter[i].first, second + i * 32);
		assert_int_equal(it.iter[i].end, second + (i + 1) * 32);
		assert_int_equal(t.events[it.iter[i].first].kind, LYNX_PROF_MEMSET);
		assert_int_equal(it.iter[i].t_end_ns - it.iter[i].t_start_ns, 31 * 1000);
	}
	lynx_prof_iterations_free(&it);
	free(b);
}

static void test_period_is_a_training_step_between_eval_steps(void **state)
{
	struct builder *b = calloc(1, sizeof(*b));
	struct lynx_prof_iterations it;
	char why[256];

	(void)state;
	for (int block = 0; block < 3; block++) {
		train_step(b, false);
		train_step(b, false);
		train_step(b, false);
		eval_step(b);
	}
	struct lynx_prof_trace t = trace_of(b);
	assert_int_equal(lynx_prof_find_iterations(&t, &it, why, sizeof(why)), 0);
	assert_int_equal(it.period, 24);
	assert_int_equal(it.count, 9);
	for (size_t i = 0; i < it.count; i++) {
		assert_int_equal(t.events[it.iter[i].first].kind, LYNX_PROF_MEMSET);
		assert_int_equal(t.events[it.iter[i].end - 1].kind, LYNX_PROF_SYNC);
	}
	/* the eval step (14 events) lies between the third and the fourth */
	assert_int_equal(it.iter[3].first, it.iter[2].end + 14);
	lynx_prof_iterations_free(&it);
	free(b);
}

/* A training step under fp16's GradScaler: 8 layers of distinct kernels, then after the
 * backward the unscale and check (one kernel), the host's read of the check (a
 * synchronisation), the optimizer unless the loss scale overflowed, the scale's update, and
 * the step's synchronisation. The optimizer is then under 5% of a step's distinct tokens,
 * as one kernel among a real step's hundreds. */
static void scaled_step(struct builder *b, bool overflowed)
{
	add(b, LYNX_PROF_MEMSET, 4096);
	for (int l = 0; l < 8; l++) {
		add(b, LYNX_PROF_ALLOC, 512);
		for (int k = 0; k < 3; k++)
			add(b, LYNX_PROF_LAUNCH, 0xa00 + 3 * l + k);
	}
	add(b, LYNX_PROF_LAUNCH, 0x1055);
	for (int l = 0; l < 8; l++) {
		add(b, LYNX_PROF_LAUNCH, 0xe00 + 2 * l);
		add(b, LYNX_PROF_LAUNCH, 0xe01 + 2 * l);
		add(b, LYNX_PROF_FREE, 0);
	}
	add(b, LYNX_PROF_LAUNCH, 0x5ca1);
	add(b, LYNX_PROF_SYNC, 0);
	if (!overflowed)
		add(b, LYNX_PROF_LAUNCH, 0xadab);
	add(b, LYNX_PROF_LAUNCH, 0x5ca2);
	add(b, LYNX_PROF_SYNC, 0);
}

/*
 * fp16's first steps overflow and skip the optimizer; then every step runs it. Three
 * skipped steps repeat too, with a shorter period and, seen after four full steps, more
 * than half their coverage: yet the trainer no longer runs them, and the iteration is the
 * full step, from the first one.
 */
static void test_period_is_the_step_that_took_over_from_skipped_ones(void **state)
{
	struct builder *b = calloc(1, sizeof(*b));
	struct lynx_prof_iterations it;
	char why[256];

	(void)state;
	for (int s = 0; s < 3; s++)
		scaled_step(b, true);
	size_t first_full = b->n;
	for (int s = 0; s < 4; s++)
		scaled_step(b, false);
	struct lynx_prof_trace t = trace_of(b);
	if (lynx_prof_find_iterations(&t, &it, why, sizeof(why)))
		fail_msg("%s", why);
	assert_int_equal(it.period, 47); /* memset, 24 + 1 + 16 + 3 launches, 2 syncs */
	assert_true(it.count >= 3);
	/* An iteration starts after one of its two synchronisations (here both are followed by
	 * the same gap): at the latest, the first starts with the last skipped step's update. */
	assert_true(it.prefix_end + 2 >= first_full);
	for (size_t i = 0; i < it.count; i++) {
		bool optimizer = false;
		for (size_t e = it.iter[i].first; e < it.iter[i].end; e++)
			optimizer = optimizer || (t.events[e].kind == LYNX_PROF_LAUNCH &&
			                          t.events[e].u.launch.function == 0xadab);
		assert_true(optimizer);
	}
	lynx_prof_iterations_free(&it);
	free(b);
}

static void test_period_refuses_a_trace_without_repeats(void **state)
{
	struct builder *b = calloc(1, sizeof(*b));
	struct lynx_prof_iterations it;
	char why[256];

	(void)state;
	for (uint64_t f = 1; f < 50; f++)
		add(b, LYNX_PROF_LAUNCH, f);
	struct lynx_prof_trace t = trace_of(b);
	assert_int_equal(lynx_prof_find_iterations(&t, &it, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "no repeating launch sequence in 49 tokens"));
	assert_int_equal(it.count, 0);
	free(b);
}

/* What PyTorch does before and around its steps (seen on an H100 under torch 2.11): the
 * model's initialisation fills one buffer after another with the same kernel, and each
 * step ends with a loop over the parameters (here: hashing them) before the host
 * synchronisation. Neither short repeat is the iteration, however many tokens it covers. */
static void torch_like_step(struct builder *b, bool lazy)
{
	train_step(b, lazy);
	b->n--; /* the step's synchronisation comes after the loop over the parameters */
	for (int p = 0; p < 60; p++) {
		add(b, LYNX_PROF_LAUNCH, 0x4a5);
		add(b, LYNX_PROF_LAUNCH, 0x4a6);
	}
	add(b, LYNX_PROF_SYNC, 0);
}

static void test_period_is_no_short_repeat_without_a_synchronisation(void **state)
{
	struct builder *b = calloc(1, sizeof(*b));
	struct lynx_prof_iterations it;
	char why[256];

	(void)state;
	for (int i = 0; i < 600; i++)
		add(b, LYNX_PROF_LAUNCH, 0xf111); /* initialisation: 600 fills */
	add(b, LYNX_PROF_SYNC, 0);
	torch_like_step(b, true);
	torch_like_step(b, false);
	/* One step after the first, which differs: no iteration has repeated yet. */
	struct lynx_prof_trace t = trace_of(b);
	assert_int_equal(lynx_prof_find_iterations(&t, &it, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "no iteration has repeated yet"));
	torch_like_step(b, false);
	torch_like_step(b, false);
	t = trace_of(b);
	int found = lynx_prof_find_iterations(&t, &it, why, sizeof(why));
	if (found)
		print_message("%s\n", why);
	assert_int_equal(found, 0);
	assert_int_equal(it.period, 24 - 1 + 120 + 1);
	assert_int_equal(it.count, 3);
	lynx_prof_iterations_free(&it);
	free(b);
}

/* A model moved to the device one tensor at a time, as `module.to(device)` does with
 * pageable host tensors: per tensor a kernel and a host synchronisation, six tensors a
 * layer. */
static void set_up_loop(struct builder *b, int layers)
{
	for (int l = 0; l < layers; l++)
		for (uint64_t p = 0; p < 6; p++) {
			add(b, LYNX_PROF_LAUNCH, 0x500 + p);
			add(b, LYNX_PROF_SYNC, 0);
		}
}

/*
 * A set-up loop that synchronises once per tensor covers more tokens than the first steps
 * do, and is found first; once the warm-up has ruled its unit out (it has no layers), the
 * training step is found, and the unit key names a unit whatever rotation it is read at.
 */
static void test_period_looks_past_a_ruled_out_set_up_loop(void **state)
{
	struct builder *b = calloc(1, sizeof(*b));
	struct lynx_prof_iterations it;
	char why[256];

	(void)state;
	set_up_loop(b, 16);
	train_step(b, true);
	train_step(b, false);
	train_step(b, false);
	struct lynx_prof_trace t = trace_of(b);
	assert_int_equal(lynx_prof_find_iterations(&t, &it, why, sizeof(why)), 0);
	assert_int_equal(it.period, 12);
	uint64_t set_up = it.unit_key;
	struct lynx_prof_unit ruled_out = {set_up, 12};
	lynx_prof_iterations_free(&it);

	uint64_t unit[12], rotated[12];
	for (int i = 0; i < 12; i++)
		unit[i] = lynx_prof_signature(&b->ev[i]);
	for (int i = 0; i < 12; i++)
		rotated[i] = unit[(i + 5) % 12];
	assert_true(lynx_prof_unit_key(unit, 12) == set_up);
	assert_true(lynx_prof_unit_key(rotated, 12) == set_up);
	assert_true(lynx_prof_unit_key(unit, 11) != set_up);

	assert_int_equal(
	        lynx_prof_find_iterations_phase(&t, &ruled_out, 1, 0, &it, why, sizeof(why)), 0);
	assert_int_equal(it.period, 24);
	assert_int_equal(it.count, 2);
	assert_true(it.unit_key != set_up);
	assert_int_equal(t.events[it.iter[0].first].kind, LYNX_PROF_MEMSET);
	lynx_prof_iterations_free(&it);

	/* Ruled out, with no step repeated yet: the reason says so. */
	b->n = 0;
	set_up_loop(b, 16);
	train_step(b, true);
	t = trace_of(b);
	assert_int_equal(
	        lynx_prof_find_iterations_phase(&t, &ruled_out, 1, 0, &it, why, sizeof(why)),
	        -EINVAL);
	assert_non_null(strstr(why, "found to have no layers"));
	free(b);
}

/* ---- tinytrain ---------------------------------------------------------------------------- */

/* Every rank finds steps iterations, back to back, after the set-up. */
static void check_tinytrain(const char *args, int ranks, int steps)
{
	struct recording rec;
	char why[256];

	assert_int_equal(record_tinytrain(args, &rec), 0);
	assert_int_equal(rec.ranks, ranks);
	for (int r = 0; r < rec.ranks; r++) {
		struct lynx_prof_iterations it;
		const struct lynx_prof_trace *t = &rec.rank[r];
		if (lynx_prof_find_iterations(t, &it, why, sizeof(why)))
			fail_msg("%s, pid %d: %s", args, t->pid, why);
		assert_int_equal(it.count, steps);
		assert_true(it.prefix_end > 0); /* the model's initialisation */
		for (size_t i = 0; i < it.count; i++) {
			const struct lynx_prof_iteration *s = &it.iter[i];
			assert_true(s->t_end_ns > s->t_start_ns);
			/* a step starts by zeroing the gradients, ends with a synchronisation */
			assert_int_equal(t->events[s->first].kind, LYNX_PROF_MEMSET);
			assert_int_equal(t->events[s->end - 1].kind, LYNX_PROF_SYNC);
			if (i)
				assert_int_equal(s->first, it.iter[i - 1].end);
		}
		lynx_prof_iterations_free(&it);
	}
	record_release(&rec);
}

/* A launch of kernel `name` through function handle `function` (NULL name: none known). */
static struct lynx_prof_event launch_of(uint64_t function, const char *name)
{
	struct lynx_prof_event e = {.kind = LYNX_PROF_LAUNCH, .hook = "cuLaunchKernel"};

	e.u.launch.function = function;
	e.u.launch.name = name;
	e.u.launch.name_hash = name ? lynx_fnv1a_string(name) : 0;
	e.u.launch.grid[0] = e.u.launch.block[0] = 1;
	return e;
}

/* torch.compile under DDP loads each graph piece's Triton kernels from a module of its own:
 * one kernel, a function handle per module. By name it is one token, so layers repeat. */
static void test_a_kernel_through_several_handles_is_one_token(void **state)
{
	struct lynx_prof_event a = launch_of(0x1000, "triton_poi_fused_add_0"),
	                       b = launch_of(0x2000, "triton_poi_fused_add_0"),
	                       other = launch_of(0x1000, "triton_poi_fused_add_1"),
	                       bare = launch_of(0x1000, NULL), bare2 = launch_of(0x2000, NULL);

	assert_int_equal(lynx_prof_signature(&a), lynx_prof_signature(&b));
	assert_int_not_equal(lynx_prof_signature(&a), lynx_prof_signature(&other));
	/* Without a name, the handle is all there is. */
	assert_int_not_equal(lynx_prof_signature(&bare), lynx_prof_signature(&bare2));
	/* The geometry still tells launches of one kernel apart. */
	b.u.launch.grid[0] = 2;
	assert_int_not_equal(lynx_prof_signature(&a), lynx_prof_signature(&b));
}

static void test_period_finds_each_tinytrain_step(void **state)
{
	(void)state;
	check_tinytrain("--nproc 4 --pp 2 --tp 2 --layers 8 --microbatches 4 --steps 3", 4, 3);
	check_tinytrain("--nproc 1 --layers 4 --microbatches 2 --steps 2", 1, 2);
}

static void test_period_finds_steps_with_the_backward_on_the_same_thread(void **state)
{
	(void)state;
	check_tinytrain("--nproc 2 --pp 2 --layers 4 --microbatches 4 --steps 3 "
	                "--no-hazard backward-thread",
	                2, 3);
}

/* A real trace whose first step gets a lazy-initialisation kernel and a warm-up
 * allocation: the other steps are found exactly where they were. */
static void test_period_skips_a_real_first_step_that_differs(void **state)
{
	struct recording rec;
	struct lynx_prof_iterations before, after;
	char why[256];

	(void)state;
	assert_int_equal(record_tinytrain("--nproc 1 --layers 4 --microbatches 2 --steps 3", &rec),
	                 0);
	const struct lynx_prof_trace *t = &rec.rank[0];
	assert_int_equal(lynx_prof_find_iterations(t, &before, why, sizeof(why)), 0);
	assert_int_equal(before.count, 3);
	size_t at = (before.iter[0].first + before.iter[0].end) / 2;
	struct lynx_prof_event *ev = calloc(t->count + 2, sizeof(*ev));
	assert_non_null(ev);
	memcpy(ev, t->events, at * sizeof(*ev));
	memcpy(ev + at + 2, t->events + at, (t->count - at) * sizeof(*ev));
	ev[at] = t->events[at];
	ev[at].kind = LYNX_PROF_ALLOC;
	ev[at].nested = false;
	ev[at].u.mem.ptr = 0x5000;
	ev[at].u.mem.bytes = 1 << 24;
	ev[at + 1] = ev[at];
	ev[at + 1].kind = LYNX_PROF_LAUNCH;
	ev[at + 1].u.launch = (typeof(ev[at + 1].u.launch)){.function = 0x1a2f, .grid = {1, 1, 1}};
	struct lynx_prof_trace lazy = {t->pid, ev, t->count + 2, NULL};
	assert_int_equal(lynx_prof_find_iterations(&lazy, &after, why, sizeof(why)), 0);
	assert_int_equal(after.period, before.period);
	assert_int_equal(after.count, 2);
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(after.iter[i].first, before.iter[i + 1].first + 2);
		assert_int_equal(after.iter[i].end, before.iter[i + 1].end + 2);
	}
	assert_int_equal(after.prefix_end, before.iter[1].first + 2);
	lynx_prof_iterations_free(&before);
	lynx_prof_iterations_free(&after);
	free(ev);
	record_release(&rec);
}

int main(int argc, char **argv)
{
	(void)argc;
	if (record_init(argv[0]))
		return 1;
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_period_leaves_a_different_first_iteration_in_the_prefix),
	        cmocka_unit_test(test_period_is_a_training_step_between_eval_steps),
	        cmocka_unit_test(test_period_is_the_step_that_took_over_from_skipped_ones),
	        cmocka_unit_test(test_period_refuses_a_trace_without_repeats),
	        cmocka_unit_test(test_period_is_no_short_repeat_without_a_synchronisation),
	        cmocka_unit_test(test_period_looks_past_a_ruled_out_set_up_loop),
	        cmocka_unit_test(test_a_kernel_through_several_handles_is_one_token),
	        cmocka_unit_test(test_period_finds_each_tinytrain_step),
	        cmocka_unit_test(test_period_finds_steps_with_the_backward_on_the_same_thread),
	        cmocka_unit_test(test_period_skips_a_real_first_step_that_differs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
