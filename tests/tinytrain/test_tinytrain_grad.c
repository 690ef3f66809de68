/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tinytrain's gradients against finite differences, on a one-layer model in one process.
 * For each weight tensor, the derivative of the loss along a random direction (central
 * differences) must match the analytic gradient's dot product with that direction. A
 * wrong gradient in any element of a tensor shows, unless errors cancel by chance.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "schedule.h"

struct fixture {
	struct tt_config cfg;
	struct tt_rank rank;
	float *grads;  /* host copy of the analytic gradients */
	float *params; /* host copy of the weights */
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char *argv[] = {"tinytrain", "--layers", "1", "--microbatches", "2", NULL};
	ncclUniqueId id;

	if (!f || tt_parse_args(5, argv, &f->cfg) || tt_kernels_register() ||
	    ncclGetUniqueId(&id) != ncclSuccess)
		return -1;
	tt_rank_setup(&f->rank, &f->cfg, 0, &id);
	size_t bytes = (size_t)f->rank.param_count * sizeof(float);
	f->grads = malloc(bytes);
	f->params = malloc(bytes);
	tt_forward_backward(&f->rank, NULL);
	cudaMemcpy(f->grads, f->rank.grads, bytes, cudaMemcpyDeviceToHost);
	cudaMemcpy(f->params, f->rank.params, bytes, cudaMemcpyDeviceToHost);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	tt_rank_teardown(&f->rank);
	free(f->grads);
	free(f->params);
	free(f);
	return 0;
}

/* Loss with the tensor [start, start + n) moved by eps * direction. */
static double loss_moved(struct fixture *f, int64_t start, int64_t n, const float *direction,
                         float eps)
{
	float *moved = malloc((size_t)n * sizeof(float));
	float loss;

	for (int64_t i = 0; i < n; i++)
		moved[i] = f->params[start + i] + eps * direction[i];
	cudaMemcpy(f->rank.params + start, moved, (size_t)n * sizeof(float),
	           cudaMemcpyHostToDevice);
	loss = tt_forward_backward(&f->rank, NULL);
	cudaMemcpy(f->rank.params + start, f->params + start, (size_t)n * sizeof(float),
	           cudaMemcpyHostToDevice);
	free(moved);
	return loss;
}

static void check_tensor(struct fixture *f, const char *name, const float *device_tensor, int64_t n)
{
	int64_t start = device_tensor - f->rank.params;
	float *direction = malloc((size_t)n * sizeof(float));
	/* The same perturbation norm for every tensor: large enough to rise above float
	 * rounding in the loss, small enough to stay in the linear regime. */
	double analytic = 0, eps = 0.1 / sqrt((double)n);
	uint64_t state = 0x2545F4914F6CDD1Dull ^ (uint64_t)start;

	for (int64_t i = 0; i < n; i++) {
		state = state * 6364136223846793005ull + 1442695040888963407ull;
		direction[i] = (state >> 63) ? 1.0f : -1.0f;
		analytic += (double)f->grads[start + i] * direction[i];
	}
	double plus = loss_moved(f, start, n, direction, (float)eps);
	double minus = loss_moved(f, start, n, direction, (float)-eps);
	double numeric = (plus - minus) / (2 * eps);
	free(direction);
	print_message("%-10s analytic %+.6e numeric %+.6e\n", name, analytic, numeric);
	if (fabs(numeric - analytic) > 0.03 * fabs(analytic) + 2e-4)
		fail_msg("%s: analytic %g, finite differences %g", name, analytic, numeric);
}

static void test_layer_gradients_match_finite_differences(void **state)
{
	struct fixture *f = *state;
	const struct tt_layer_weights *w = &f->rank.w[0];
	const struct tt_shape *s = &f->rank.real;

	check_tensor(f, "ln1_gamma", w->ln1_gamma, s->hidden);
	check_tensor(f, "ln1_beta", w->ln1_beta, s->hidden);
	check_tensor(f, "qkv", w->qkv, s->hidden * 3 * s->local_hidden);
	check_tensor(f, "proj", w->proj, s->local_hidden * s->hidden);
	check_tensor(f, "ln2_gamma", w->ln2_gamma, s->hidden);
	check_tensor(f, "ln2_beta", w->ln2_beta, s->hidden);
	check_tensor(f, "fc1", w->fc1, s->hidden * s->local_ffn);
	check_tensor(f, "fc2", w->fc2, s->local_ffn * s->hidden);
}

static void test_embedding_and_head_gradients_match_finite_differences(void **state)
{
	struct fixture *f = *state;
	const struct tt_edge_weights *e = &f->rank.ew;
	const struct tt_shape *s = &f->rank.real;

	check_tensor(f, "embedding", e->embedding, s->vocab * s->hidden);
	check_tensor(f, "lnf_gamma", e->lnf_gamma, s->hidden);
	check_tensor(f, "lnf_beta", e->lnf_beta, s->hidden);
	check_tensor(f, "head", e->head, s->hidden * s->vocab);
}

static void test_the_same_weights_give_the_same_bits(void **state)
{
	struct fixture *f = *state;
	size_t bytes = (size_t)f->rank.param_count * sizeof(float);
	float *again = malloc(bytes);

	tt_forward_backward(&f->rank, NULL);
	cudaMemcpy(again, f->rank.grads, bytes, cudaMemcpyDeviceToHost);
	assert_memory_equal(again, f->grads, bytes);
	free(again);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_layer_gradients_match_finite_differences),
	        cmocka_unit_test(test_embedding_and_head_gradients_match_finite_differences),
	        cmocka_unit_test(test_the_same_weights_give_the_same_bits),
	};
	return cmocka_run_group_tests_name("tinytrain_grad", tests, setup, teardown);
}
