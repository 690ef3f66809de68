/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tinytrain's kernels on simgpu: forwards against naive CPU references, backwards against
 * central differences of their forwards, dropout's counter-based mask, determinism, and
 * the virtual cost of every kernel. Every API call is free (SIMGPU_API_COST_NS=0), so a
 * launch on an idle stream lasts exactly tt_cost_ns of its cost.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kernels.h"
#include "simgpu.h"

#define MAX_ALLOCS 64

static const struct tt_vcost free_cost = {0, 0};

/* Device buffers of the running test, freed by its teardown. */
static void *allocs[MAX_ALLOCS];
static int allocs_n;

static int free_allocs(void **state)
{
	for (int i = 0; i < allocs_n; i++)
		cudaFree(allocs[i]);
	allocs_n = 0;
	return 0;
}

static void *dev_bytes(size_t bytes)
{
	void *p = NULL;

	assert_true(allocs_n < MAX_ALLOCS);
	assert_int_equal(cudaMalloc(&p, bytes ? bytes : 1), cudaSuccess);
	assert_int_equal(cudaMemset(p, 0, bytes ? bytes : 1), cudaSuccess);
	allocs[allocs_n++] = p;
	return p;
}

/* A zeroed device array of n floats. */
static float *dev_floats(size_t n)
{
	return dev_bytes(n * sizeof(float));
}

static void upload(void *dst, const void *src, size_t bytes)
{
	assert_int_equal(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
}

/* A blocking copy on the legacy stream: it waits for, and applies, every queued kernel. */
static void download(void *dst, const void *src, size_t bytes)
{
	assert_int_equal(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
}

static float *dev_copy(const float *host, size_t n)
{
	float *d = dev_floats(n);

	upload(d, host, n * sizeof(float));
	return d;
}

/* Uniform in [lo, hi), from a fixed xorshift stream so every run sees the same inputs. */
static void fill_uniform(float *x, size_t n, float lo, float hi, uint64_t seed)
{
	uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;

	for (size_t i = 0; i < n; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		x[i] = lo + (hi - lo) * (float)((s >> 40) * (1.0 / 16777216.0));
	}
}

static void assert_near(double got, double want, double rel, double abs, const char *what, size_t i)
{
	if (fabs(got - want) <= abs + rel * fabs(want))
		return;
	fail_msg("%s[%zu]: got %.9g, want %.9g", what, i, got, want);
}

static void assert_all_near(const float *got, const double *want, size_t n, double rel, double abs,
                            const char *what)
{
	for (size_t i = 0; i < n; i++)
		assert_near(got[i], want[i], rel, abs, what, i);
}

/* ---- Central differences ---------------------------------------------------------------- */

/* A scalar function of n floats, evaluated by running the forward under test on simgpu. */
typedef double (*objective_fn)(const float *in, void *ctx);

/* Checks grad against (f(x + h e_i) - f(x - h e_i)) / (2h) for every i, with the step the
 * floats actually took, to 1% (forwards are float, so the differences are ~1e-4 exact). */
static void check_gradient(objective_fn f, void *ctx, const float *in, size_t n, const float *grad,
                           float h, const char *what)
{
	float *x = malloc(n * sizeof(float));

	assert_non_null(x);
	memcpy(x, in, n * sizeof(float));
	for (size_t i = 0; i < n; i++) {
		float up = in[i] + h, down = in[i] - h;
		double plus, minus;

		x[i] = up;
		plus = f(x, ctx);
		x[i] = down;
		minus = f(x, ctx);
		x[i] = in[i];
		assert_near(grad[i], (plus - minus) / ((double)up - (double)down), 1e-2, 2e-3, what,
		            i);
	}
	free(x);
}

/* sum(w * y) in double: the objective whose gradient with respect to y is w. */
static double weighted_sum(const float *y, const float *w, size_t n)
{
	double total = 0;

	for (size_t i = 0; i < n; i++)
		total += (double)w[i] * y[i];
	return total;
}

/* ---- GEMM ------------------------------------------------------------------------------- */

enum { GB = 2, GM = 3, GN = 5, GK = 4 };
/* Padded batch strides, so that an implementation ignoring them is caught. */
enum { STRIDE_A = GM * GK + 3, STRIDE_B = GK * GN + 2, STRIDE_C = GM * GN + 1 };

/* alpha * op(A) op(B) + beta * C0 in double, into want (GB x GM x GN, dense). */
static void gemm_reference(int ta, int tb, const float *a, const float *b, const float *c0,
                           float alpha, float beta, double *want)
{
	for (int bi = 0; bi < GB; bi++) {
		for (int i = 0; i < GM; i++) {
			for (int j = 0; j < GN; j++) {
				double dot = 0;

				for (int p = 0; p < GK; p++) {
					double av =
					        a[bi * STRIDE_A + (ta ? p * GM + i : i * GK + p)];
					double bv =
					        b[bi * STRIDE_B + (tb ? j * GK + p : p * GN + j)];

					dot += av * bv;
				}
				want[(bi * GM + i) * GN + j] =
				        alpha * dot +
				        (beta != 0 ? beta * c0[bi * STRIDE_C + i * GN + j] : 0);
			}
		}
	}
}

/* Runs one GEMM on a fresh C holding c0 and returns C's dense (GB x GM x GN) contents. */
static void gemm_run(int ta, int tb, const float *a_dev, const float *b_dev, const float *c0,
                     float alpha, float beta, float *workspace, float *out)
{
	float *c = dev_copy(c0, GB * STRIDE_C), host[GB * STRIDE_C];
	struct tt_gemm g = {
	        .trans_a = ta,
	        .trans_b = tb,
	        .batch = GB,
	        .m = GM,
	        .n = GN,
	        .k = GK,
	        .a = a_dev,
	        .stride_a = STRIDE_A,
	        .b = b_dev,
	        .stride_b = STRIDE_B,
	        .c = c,
	        .stride_c = STRIDE_C,
	        .alpha = alpha,
	        .beta = beta,
	        .workspace = workspace,
	};

	assert_int_equal(tt_gemm(0, &g, free_cost), cudaSuccess);
	download(host, c, sizeof(host));
	for (int bi = 0; bi < GB; bi++)
		memcpy(out + bi * GM * GN, host + bi * STRIDE_C, GM * GN * sizeof(float));
	/* The padding between C's batches is not C's: it must be untouched. */
	for (int bi = 0; bi < GB; bi++)
		assert_true(memcmp(host + bi * STRIDE_C + GM * GN, c0 + bi * STRIDE_C + GM * GN,
		                   (STRIDE_C - GM * GN) * sizeof(float)) == 0);
}

static void test_gemm_matches_reference_in_all_transposes_with_and_without_workspace(void **state)
{
	float a[GB * STRIDE_A], b[GB * STRIDE_B], c0[GB * STRIDE_C];
	float direct[GB * GM * GN], staged[GB * GM * GN], ws_host[GB * GM * GN];
	double want[GB * GM * GN];
	float *a_dev, *b_dev, *ws = dev_floats(GB * GM * GN);

	fill_uniform(a, GB * STRIDE_A, -1, 1, 1);
	fill_uniform(b, GB * STRIDE_B, -1, 1, 2);
	fill_uniform(c0, GB * STRIDE_C, -1, 1, 3);
	a_dev = dev_copy(a, GB * STRIDE_A);
	b_dev = dev_copy(b, GB * STRIDE_B);
	for (int t = 0; t < 4; t++) {
		int ta = t & 1, tb = t >> 1;

		for (int accumulate = 0; accumulate < 2; accumulate++) {
			float beta = (float)accumulate;

			gemm_reference(ta, tb, a, b, c0, 0.5f, beta, want);
			gemm_run(ta, tb, a_dev, b_dev, c0, 0.5f, beta, NULL, direct);
			gemm_run(ta, tb, a_dev, b_dev, c0, 0.5f, beta, ws, staged);
			assert_all_near(direct, want, GB * GM * GN, 1e-5, 1e-6, "gemm C");
			assert_memory_equal(direct, staged, sizeof(direct));
			/* The result was staged: the workspace holds it too. */
			download(ws_host, ws, sizeof(ws_host));
			assert_memory_equal(ws_host, staged, sizeof(ws_host));
		}
	}
}

static void test_gemm_beta_zero_overwrites_c_without_reading_it(void **state)
{
	float a[GB * STRIDE_A], b[GB * STRIDE_B], c0[GB * STRIDE_C], got[GB * GM * GN];
	double want[GB * GM * GN];
	float *a_dev, *b_dev;

	fill_uniform(a, GB * STRIDE_A, -1, 1, 4);
	fill_uniform(b, GB * STRIDE_B, -1, 1, 5);
	for (int i = 0; i < GB * STRIDE_C; i++)
		c0[i] = NAN;
	a_dev = dev_copy(a, GB * STRIDE_A);
	b_dev = dev_copy(b, GB * STRIDE_B);
	gemm_reference(1, 0, a, b, c0, 2.0f, 0.0f, want);
	gemm_run(1, 0, a_dev, b_dev, c0, 2.0f, 0.0f, NULL, got);
	assert_all_near(got, want, GB * GM * GN, 1e-5, 1e-6, "gemm C");
}

/* ---- Layer norm ------------------------------------------------------------------------- */

enum { LN_ROWS = 3, LN_COLS = 8 };

struct ln_case {
	float x[LN_ROWS * LN_COLS], gamma[LN_COLS], beta[LN_COLS], w[LN_ROWS * LN_COLS];
	float *x_dev, *y_dev, *gamma_dev, *beta_dev, *mean_dev, *rstd_dev;
	int perturbed; /* 0: x, 1: gamma, 2: beta */
};

static struct tt_layernorm_args ln_args(struct ln_case *c)
{
	return (struct tt_layernorm_args){
	        .x = c->x_dev,
	        .y = c->y_dev,
	        .gamma = c->gamma_dev,
	        .beta = c->beta_dev,
	        .mean = c->mean_dev,
	        .rstd = c->rstd_dev,
	        .rows = LN_ROWS,
	        .cols = LN_COLS,
	};
}

static double ln_objective(const float *in, void *ctx)
{
	struct ln_case *c = ctx;
	float *targets[] = {c->x_dev, c->gamma_dev, c->beta_dev};
	size_t sizes[] = {sizeof(c->x), sizeof(c->gamma), sizeof(c->beta)};
	const float *originals[] = {c->x, c->gamma, c->beta};
	float y[LN_ROWS * LN_COLS];
	double value;

	upload(targets[c->perturbed], in, sizes[c->perturbed]);
	assert_int_equal(tt_layernorm_fwd(0, ln_args(c), free_cost), cudaSuccess);
	download(y, c->y_dev, sizeof(y));
	value = weighted_sum(y, c->w, LN_ROWS * LN_COLS);
	upload(targets[c->perturbed], originals[c->perturbed], sizes[c->perturbed]);
	return value;
}

static void ln_setup(struct ln_case *c)
{
	fill_uniform(c->x, LN_ROWS * LN_COLS, -2, 2, 10);
	fill_uniform(c->gamma, LN_COLS, 0.5f, 1.5f, 11);
	fill_uniform(c->beta, LN_COLS, -0.5f, 0.5f, 12);
	fill_uniform(c->w, LN_ROWS * LN_COLS, -1, 1, 13);
	c->x_dev = dev_copy(c->x, LN_ROWS * LN_COLS);
	c->y_dev = dev_floats(LN_ROWS * LN_COLS);
	c->gamma_dev = dev_copy(c->gamma, LN_COLS);
	c->beta_dev = dev_copy(c->beta, LN_COLS);
	c->mean_dev = dev_floats(LN_ROWS);
	c->rstd_dev = dev_floats(LN_ROWS);
}

static void test_layernorm_fwd_matches_reference(void **state)
{
	struct ln_case c;
	float y[LN_ROWS * LN_COLS], mean[LN_ROWS], rstd[LN_ROWS];
	double want[LN_ROWS * LN_COLS];

	ln_setup(&c);
	assert_int_equal(tt_layernorm_fwd(0, ln_args(&c), free_cost), cudaSuccess);
	download(y, c.y_dev, sizeof(y));
	download(mean, c.mean_dev, sizeof(mean));
	download(rstd, c.rstd_dev, sizeof(rstd));
	for (int r = 0; r < LN_ROWS; r++) {
		double mu = 0, var = 0, rs;

		for (int j = 0; j < LN_COLS; j++)
			mu += c.x[r * LN_COLS + j] / (double)LN_COLS;
		for (int j = 0; j < LN_COLS; j++)
			var += pow(c.x[r * LN_COLS + j] - mu, 2) / LN_COLS;
		rs = 1 / sqrt(var + 1e-5);
		assert_near(mean[r], mu, 1e-5, 1e-6, "mean", r);
		assert_near(rstd[r], rs, 1e-5, 1e-6, "rstd", r);
		for (int j = 0; j < LN_COLS; j++)
			want[r * LN_COLS + j] =
			        (c.x[r * LN_COLS + j] - mu) * rs * c.gamma[j] + c.beta[j];
	}
	assert_all_near(y, want, LN_ROWS * LN_COLS, 1e-5, 1e-5, "y");
}

static void test_layernorm_fwd_flat_gives_the_same_bits_as_the_struct_form(void **state)
{
	struct ln_case c;
	float y[LN_ROWS * LN_COLS], stats[2 * LN_ROWS], flat_y[LN_ROWS * LN_COLS];
	float flat_stats[2 * LN_ROWS];
	float *y_dev = dev_floats(LN_ROWS * LN_COLS), *stats_dev = dev_floats(2 * LN_ROWS);

	ln_setup(&c);
	assert_int_equal(tt_layernorm_fwd(0, ln_args(&c), free_cost), cudaSuccess);
	assert_int_equal(tt_layernorm_fwd_flat(0, c.x_dev, y_dev, c.gamma_dev, c.beta_dev,
	                                       stats_dev, stats_dev + LN_ROWS, LN_ROWS, LN_COLS,
	                                       free_cost),
	                 cudaSuccess);
	download(y, c.y_dev, sizeof(y));
	download(stats, c.mean_dev, LN_ROWS * sizeof(float));
	download(stats + LN_ROWS, c.rstd_dev, LN_ROWS * sizeof(float));
	download(flat_y, y_dev, sizeof(flat_y));
	download(flat_stats, stats_dev, sizeof(flat_stats));
	assert_memory_equal(y, flat_y, sizeof(y));
	assert_memory_equal(stats, flat_stats, sizeof(stats));
}

static void test_layernorm_bwd_matches_central_differences_and_accumulates(void **state)
{
	struct ln_case c;
	float dx[LN_ROWS * LN_COLS], dgamma[LN_COLS], dbeta[LN_COLS], dx_acc[LN_ROWS * LN_COLS];
	float prior[LN_ROWS * LN_COLS], got_dgamma[LN_COLS], got_dbeta[LN_COLS];
	float *dy_dev, *dx_dev, *dgamma_dev, *dbeta_dev;

	ln_setup(&c);
	assert_int_equal(tt_layernorm_fwd(0, ln_args(&c), free_cost), cudaSuccess);
	dy_dev = dev_copy(c.w, LN_ROWS * LN_COLS);
	/* dgamma and dbeta start non-zero: the backward adds to them. */
	fill_uniform(prior, LN_ROWS * LN_COLS, -1, 1, 14);
	dx_dev = dev_floats(LN_ROWS * LN_COLS);
	dgamma_dev = dev_copy(prior, LN_COLS);
	dbeta_dev = dev_copy(prior + LN_COLS, LN_COLS);
	struct tt_layernorm_grad_args g = {
	        .x = c.x_dev,
	        .dy = dy_dev,
	        .gamma = c.gamma_dev,
	        .mean = c.mean_dev,
	        .rstd = c.rstd_dev,
	        .dx = dx_dev,
	        .dgamma = dgamma_dev,
	        .dbeta = dbeta_dev,
	        .rows = LN_ROWS,
	        .cols = LN_COLS,
	};
	assert_int_equal(tt_layernorm_bwd(0, g, free_cost), cudaSuccess);
	download(dx, dx_dev, sizeof(dx));
	download(got_dgamma, dgamma_dev, sizeof(got_dgamma));
	download(got_dbeta, dbeta_dev, sizeof(got_dbeta));
	for (int j = 0; j < LN_COLS; j++) {
		dgamma[j] = got_dgamma[j] - prior[j];
		dbeta[j] = got_dbeta[j] - prior[LN_COLS + j];
	}
	c.perturbed = 0;
	check_gradient(ln_objective, &c, c.x, LN_ROWS * LN_COLS, dx, 1e-2f, "dx");
	c.perturbed = 1;
	check_gradient(ln_objective, &c, c.gamma, LN_COLS, dgamma, 1e-2f, "dgamma");
	c.perturbed = 2;
	check_gradient(ln_objective, &c, c.beta, LN_COLS, dbeta, 1e-2f, "dbeta");

	/* accumulate = 1 adds the gradient to what dx held. */
	upload(dx_dev, prior, sizeof(prior));
	g.accumulate = 1;
	assert_int_equal(tt_layernorm_bwd(0, g, free_cost), cudaSuccess);
	download(dx_acc, dx_dev, sizeof(dx_acc));
	for (int i = 0; i < LN_ROWS * LN_COLS; i++)
		assert_near(dx_acc[i], (double)prior[i] + dx[i], 1e-6, 1e-6, "dx accumulated", i);
}

/* ---- Softmax ---------------------------------------------------------------------------- */

enum { SM_COLS = 5, SM_ROWS = 2 * SM_COLS }; /* two s x s blocks when causal */

struct sm_case {
	float w[SM_ROWS * SM_COLS];
	float *x_dev, *y_dev;
	int causal;
};

static double sm_objective(const float *in, void *ctx)
{
	struct sm_case *c = ctx;
	float y[SM_ROWS * SM_COLS];

	upload(c->x_dev, in, sizeof(y));
	assert_int_equal(
	        tt_softmax_fwd(0, c->x_dev, c->y_dev, SM_ROWS, SM_COLS, c->causal, free_cost),
	        cudaSuccess);
	download(y, c->y_dev, sizeof(y));
	return weighted_sum(y, c->w, SM_ROWS * SM_COLS);
}

static void test_softmax_fwd_matches_reference_causal_and_not(void **state)
{
	float x[SM_ROWS * SM_COLS], y[SM_ROWS * SM_COLS];
	double want[SM_ROWS * SM_COLS];
	float *x_dev, *y_dev = dev_floats(SM_ROWS * SM_COLS);

	fill_uniform(x, SM_ROWS * SM_COLS, -3, 3, 20);
	x_dev = dev_copy(x, SM_ROWS * SM_COLS);
	for (int causal = 0; causal < 2; causal++) {
		assert_int_equal(
		        tt_softmax_fwd(0, x_dev, y_dev, SM_ROWS, SM_COLS, causal, free_cost),
		        cudaSuccess);
		download(y, y_dev, sizeof(y));
		for (int r = 0; r < SM_ROWS; r++) {
			int seen = causal ? r % SM_COLS + 1 : SM_COLS;
			double sum = 0;

			for (int j = 0; j < seen; j++)
				sum += exp(x[r * SM_COLS + j]);
			for (int j = 0; j < SM_COLS; j++)
				want[r * SM_COLS + j] =
				        j < seen ? exp(x[r * SM_COLS + j]) / sum : 0;
			/* Masked entries are exactly zero, not merely tiny. */
			for (int j = seen; j < SM_COLS; j++)
				assert_true(y[r * SM_COLS + j] == 0.0f);
		}
		assert_all_near(y, want, SM_ROWS * SM_COLS, 1e-5, 1e-7, "softmax y");
	}
}

static void test_softmax_bwd_matches_central_differences(void **state)
{
	struct sm_case c;
	float x[SM_ROWS * SM_COLS], dx[SM_ROWS * SM_COLS];
	float *dy_dev, *dx_dev = dev_floats(SM_ROWS * SM_COLS);

	fill_uniform(x, SM_ROWS * SM_COLS, -2, 2, 21);
	fill_uniform(c.w, SM_ROWS * SM_COLS, -1, 1, 22);
	c.x_dev = dev_copy(x, SM_ROWS * SM_COLS);
	c.y_dev = dev_floats(SM_ROWS * SM_COLS);
	dy_dev = dev_copy(c.w, SM_ROWS * SM_COLS);
	for (c.causal = 0; c.causal < 2; c.causal++) {
		upload(c.x_dev, x, sizeof(x));
		assert_int_equal(
		        tt_softmax_fwd(0, c.x_dev, c.y_dev, SM_ROWS, SM_COLS, c.causal, free_cost),
		        cudaSuccess);
		assert_int_equal(
		        tt_softmax_bwd(0, c.y_dev, dy_dev, dx_dev, SM_ROWS, SM_COLS, free_cost),
		        cudaSuccess);
		download(dx, dx_dev, sizeof(dx));
		check_gradient(sm_objective, &c, x, SM_ROWS * SM_COLS, dx, 1e-2f, "softmax dx");
	}
}

/* ---- GeLU ------------------------------------------------------------------------------- */

enum { GELU_N = 24 };

struct gelu_case {
	float w[GELU_N];
	float *x_dev, *y_dev;
};

static double gelu_objective(const float *in, void *ctx)
{
	struct gelu_case *c = ctx;
	float y[GELU_N];

	upload(c->x_dev, in, sizeof(y));
	assert_int_equal(tt_gelu_fwd(0, c->x_dev, c->y_dev, GELU_N, free_cost), cudaSuccess);
	download(y, c->y_dev, sizeof(y));
	return weighted_sum(y, c->w, GELU_N);
}

static void test_gelu_fwd_matches_tanh_formula_and_bwd_its_derivative(void **state)
{
	struct gelu_case c;
	float x[GELU_N], y[GELU_N], dx[GELU_N];
	double want[GELU_N];
	float *dy_dev, *dx_dev = dev_floats(GELU_N);

	fill_uniform(x, GELU_N, -4, 4, 30);
	fill_uniform(c.w, GELU_N, -1, 1, 31);
	c.x_dev = dev_copy(x, GELU_N);
	c.y_dev = dev_floats(GELU_N);
	dy_dev = dev_copy(c.w, GELU_N);
	assert_int_equal(tt_gelu_fwd(0, c.x_dev, c.y_dev, GELU_N, free_cost), cudaSuccess);
	download(y, c.y_dev, sizeof(y));
	for (int i = 0; i < GELU_N; i++)
		want[i] =
		        0.5 * x[i] * (1 + tanh(sqrt(2 / M_PI) * (x[i] + 0.044715 * pow(x[i], 3))));
	assert_all_near(y, want, GELU_N, 1e-5, 1e-6, "gelu y");

	assert_int_equal(tt_gelu_bwd(0, c.x_dev, dy_dev, dx_dev, GELU_N, free_cost), cudaSuccess);
	download(dx, dx_dev, sizeof(dx));
	check_gradient(gelu_objective, &c, x, GELU_N, dx, 1e-2f, "gelu dx");
}

/* ---- Cross-entropy ---------------------------------------------------------------------- */

enum { CE_ROWS = 3, CE_VOCAB = 7 };
#define CE_SCALE 0.25f

struct ce_case {
	int targets[CE_ROWS];
	float *logits_dev, *losses_dev, *dlogits_dev;
	int *targets_dev;
};

static double ce_objective(const float *in, void *ctx)
{
	struct ce_case *c = ctx;
	float losses[CE_ROWS];
	double total = 0;

	upload(c->logits_dev, in, CE_ROWS * CE_VOCAB * sizeof(float));
	assert_int_equal(tt_cross_entropy(0, c->logits_dev, c->targets_dev, c->losses_dev,
	                                  c->dlogits_dev, CE_ROWS, CE_VOCAB, CE_SCALE, free_cost),
	                 cudaSuccess);
	download(losses, c->losses_dev, sizeof(losses));
	for (int r = 0; r < CE_ROWS; r++)
		total += CE_SCALE * (double)losses[r];
	return total;
}

static void test_cross_entropy_matches_reference_and_dlogits_central_differences(void **state)
{
	struct ce_case c = {.targets = {0, 6, 3}};
	float logits[CE_ROWS * CE_VOCAB], losses[CE_ROWS], dlogits[CE_ROWS * CE_VOCAB];
	double want[CE_ROWS];

	/* Large logits: a softmax without max subtraction would overflow expf. */
	fill_uniform(logits, CE_ROWS * CE_VOCAB, 90, 100, 40);
	c.logits_dev = dev_copy(logits, CE_ROWS * CE_VOCAB);
	c.losses_dev = dev_floats(CE_ROWS);
	c.dlogits_dev = dev_floats(CE_ROWS * CE_VOCAB);
	c.targets_dev = dev_bytes(sizeof(c.targets));
	upload(c.targets_dev, c.targets, sizeof(c.targets));
	assert_int_equal(tt_cross_entropy(0, c.logits_dev, c.targets_dev, c.losses_dev,
	                                  c.dlogits_dev, CE_ROWS, CE_VOCAB, CE_SCALE, free_cost),
	                 cudaSuccess);
	download(losses, c.losses_dev, sizeof(losses));
	download(dlogits, c.dlogits_dev, sizeof(dlogits));
	for (int r = 0; r < CE_ROWS; r++) {
		double sum = 0;

		for (int j = 0; j < CE_VOCAB; j++)
			sum += exp(logits[r * CE_VOCAB + j] - 100.0);
		want[r] = 100.0 + log(sum) - logits[r * CE_VOCAB + c.targets[r]];
	}
	assert_all_near(losses, want, CE_ROWS, 1e-5, 1e-5, "loss");
	check_gradient(ce_objective, &c, logits, CE_ROWS * CE_VOCAB, dlogits, 1e-2f, "dlogits");
}

/* ---- Embedding -------------------------------------------------------------------------- */

enum { EMB_VOCAB = 6, EMB_HIDDEN = 4, EMB_TOKENS = 5 };

/*
 * The cell holds a decoy when the kernel is launched; a copy queued before it on the same
 * stream stores the real table's address. The kernel must read the cell when it runs (a
 * wrapper that read it at launch would gather from the decoy). The direct form, given the
 * table itself, gathers the same rows.
 */
static void test_embedding_fwd_reads_table_pointer_when_it_runs(void **state)
{
	int tokens[EMB_TOKENS] = {3, 0, 5, 3, 1};
	float table[EMB_VOCAB * EMB_HIDDEN], out[EMB_TOKENS * EMB_HIDDEN];
	float direct[EMB_TOKENS * EMB_HIDDEN];
	float *table_dev, *decoy, *out_dev = dev_floats(EMB_TOKENS * EMB_HIDDEN);
	float *direct_dev = dev_floats(EMB_TOKENS * EMB_HIDDEN);
	float **table_ref = dev_bytes(sizeof(float *)), **real_ref = dev_bytes(sizeof(float *));
	int *tokens_dev = dev_bytes(sizeof(tokens));

	fill_uniform(table, EMB_VOCAB * EMB_HIDDEN, -1, 1, 50);
	table_dev = dev_copy(table, EMB_VOCAB * EMB_HIDDEN);
	decoy = dev_floats(EMB_VOCAB * EMB_HIDDEN);
	upload(tokens_dev, tokens, sizeof(tokens));
	upload(table_ref, &decoy, sizeof(decoy));
	upload(real_ref, &table_dev, sizeof(table_dev));
	assert_int_equal(
	        cudaMemcpyAsync(table_ref, real_ref, sizeof(float *), cudaMemcpyDeviceToDevice, 0),
	        cudaSuccess);
	assert_int_equal(tt_embedding_fwd(0, tokens_dev, table_ref, out_dev, EMB_TOKENS, EMB_HIDDEN,
	                                  free_cost),
	                 cudaSuccess);
	assert_int_equal(tt_embedding_fwd_direct(0, tokens_dev, table_dev, direct_dev, EMB_TOKENS,
	                                         EMB_HIDDEN, free_cost),
	                 cudaSuccess);
	download(out, out_dev, sizeof(out));
	download(direct, direct_dev, sizeof(direct));
	for (int t = 0; t < EMB_TOKENS; t++)
		assert_memory_equal(out + t * EMB_HIDDEN, table + tokens[t] * EMB_HIDDEN,
		                    EMB_HIDDEN * sizeof(float));
	assert_memory_equal(direct, out, sizeof(out));
}

static void test_embedding_bwd_accumulates_per_token_including_repeats(void **state)
{
	int tokens[EMB_TOKENS] = {3, 0, 5, 3, 1}; /* token 3 twice, 2 and 4 never */
	float dout[EMB_TOKENS * EMB_HIDDEN], prior[EMB_VOCAB * EMB_HIDDEN];
	float dtable[EMB_VOCAB * EMB_HIDDEN];
	double want[EMB_VOCAB * EMB_HIDDEN];
	float *dout_dev, *dtable_dev;
	int *tokens_dev = dev_bytes(sizeof(tokens));

	fill_uniform(dout, EMB_TOKENS * EMB_HIDDEN, -1, 1, 51);
	fill_uniform(prior, EMB_VOCAB * EMB_HIDDEN, -1, 1, 52);
	upload(tokens_dev, tokens, sizeof(tokens));
	dout_dev = dev_copy(dout, EMB_TOKENS * EMB_HIDDEN);
	dtable_dev = dev_copy(prior, EMB_VOCAB * EMB_HIDDEN);
	assert_int_equal(tt_embedding_bwd(0, tokens_dev, dout_dev, dtable_dev, EMB_TOKENS,
	                                  EMB_HIDDEN, free_cost),
	                 cudaSuccess);
	download(dtable, dtable_dev, sizeof(dtable));
	for (int i = 0; i < EMB_VOCAB * EMB_HIDDEN; i++)
		want[i] = prior[i];
	for (int t = 0; t < EMB_TOKENS; t++)
		for (int h = 0; h < EMB_HIDDEN; h++)
			want[tokens[t] * EMB_HIDDEN + h] += dout[t * EMB_HIDDEN + h];
	assert_all_near(dtable, want, EMB_VOCAB * EMB_HIDDEN, 1e-6, 1e-6, "dtable");
	assert_memory_equal(dtable + 2 * EMB_HIDDEN, prior + 2 * EMB_HIDDEN,
	                    EMB_HIDDEN * sizeof(float));
}

/* ---- Heads ------------------------------------------------------------------------------ */

static const struct tt_heads heads_shape = {.batch = 2, .seq = 3, .heads = 2, .d = 4};
enum { HEADS_N = 2 * 3 * 2 * 4 };

static void test_split_qkv_layout_and_join_qkv_grad_is_its_inverse(void **state)
{
	struct tt_heads s = heads_shape;
	float qkv[3 * HEADS_N], parts[3][HEADS_N], back[3 * HEADS_N];
	float *qkv_dev, *part_dev[3], *back_dev = dev_floats(3 * HEADS_N);

	fill_uniform(qkv, 3 * HEADS_N, -1, 1, 60);
	qkv_dev = dev_copy(qkv, 3 * HEADS_N);
	for (int p = 0; p < 3; p++)
		part_dev[p] = dev_floats(HEADS_N);
	assert_int_equal(
	        tt_split_qkv(0, s, qkv_dev, part_dev[0], part_dev[1], part_dev[2], free_cost),
	        cudaSuccess);
	for (int p = 0; p < 3; p++)
		download(parts[p], part_dev[p], sizeof(parts[p]));
	for (int b = 0; b < s.batch; b++)
		for (int h = 0; h < s.heads; h++)
			for (int t = 0; t < s.seq; t++)
				for (int d = 0; d < s.d; d++)
					for (int p = 0; p < 3; p++)
						assert_true(
						        parts[p][((b * s.heads + h) * s.seq + t) *
						                         s.d +
						                 d] ==
						        qkv[(b * s.seq + t) * 3 * s.heads * s.d +
						            (p * s.heads + h) * s.d + d]);

	assert_int_equal(
	        tt_join_qkv_grad(0, s, part_dev[0], part_dev[1], part_dev[2], back_dev, free_cost),
	        cudaSuccess);
	download(back, back_dev, sizeof(back));
	assert_memory_equal(back, qkv, sizeof(qkv));
}

static void test_merge_heads_layout_and_split_merged_grad_is_its_inverse(void **state)
{
	struct tt_heads s = heads_shape;
	float ctx[HEADS_N], out[HEADS_N], back[HEADS_N];
	float *ctx_dev, *out_dev = dev_floats(HEADS_N), *back_dev = dev_floats(HEADS_N);

	fill_uniform(ctx, HEADS_N, -1, 1, 61);
	ctx_dev = dev_copy(ctx, HEADS_N);
	assert_int_equal(tt_merge_heads(0, s, ctx_dev, out_dev, free_cost), cudaSuccess);
	download(out, out_dev, sizeof(out));
	for (int b = 0; b < s.batch; b++)
		for (int h = 0; h < s.heads; h++)
			for (int t = 0; t < s.seq; t++)
				for (int d = 0; d < s.d; d++)
					assert_true(out[(b * s.seq + t) * s.heads * s.d + h * s.d +
					                d] ==
					            ctx[((b * s.heads + h) * s.seq + t) * s.d + d]);

	assert_int_equal(tt_split_merged_grad(0, s, out_dev, back_dev, free_cost), cudaSuccess);
	download(back, back_dev, sizeof(back));
	assert_memory_equal(back, ctx, sizeof(ctx));
}

/* ---- Reductions and element-wise -------------------------------------------------------- */

enum { VEC_N = 37 };

static void test_sum_writes_or_accumulates_in_index_order(void **state)
{
	float x[VEC_N], got, want = 0;
	float *x_dev, *out_dev = dev_floats(1);

	fill_uniform(x, VEC_N, -1, 1, 70);
	x_dev = dev_copy(x, VEC_N);
	for (int i = 0; i < VEC_N; i++)
		want += x[i];
	for (int round = 1; round <= 2; round++) {
		/* Round 1 writes over the 0 in out; round 2 adds to round 1's total. */
		assert_int_equal(tt_sum(0, x_dev, out_dev, VEC_N, round == 2, free_cost),
		                 cudaSuccess);
		download(&got, out_dev, sizeof(got));
		assert_true(got == (round == 2 ? want + want : want));
	}
	assert_int_equal(tt_sum(0, x_dev, out_dev, VEC_N, 0, free_cost), cudaSuccess);
	download(&got, out_dev, sizeof(got));
	assert_true(got == want);
}

static void test_scale_and_axpy_match_reference(void **state)
{
	float x[VEC_N], y0[VEC_N], got[VEC_N];
	double want[VEC_N];
	float *x_dev, *y_dev;

	fill_uniform(x, VEC_N, -1, 1, 71);
	fill_uniform(y0, VEC_N, -1, 1, 72);
	x_dev = dev_copy(x, VEC_N);
	y_dev = dev_copy(y0, VEC_N);
	assert_int_equal(tt_axpy(0, -1.5f, x_dev, y_dev, VEC_N, free_cost), cudaSuccess);
	download(got, y_dev, sizeof(got));
	for (int i = 0; i < VEC_N; i++)
		want[i] = y0[i] - 1.5 * x[i];
	assert_all_near(got, want, VEC_N, 1e-6, 1e-6, "axpy y");

	assert_int_equal(tt_scale(0, x_dev, y_dev, 3.0f, VEC_N, free_cost), cudaSuccess);
	download(got, y_dev, sizeof(got));
	for (int i = 0; i < VEC_N; i++)
		want[i] = 3.0 * x[i];
	assert_all_near(got, want, VEC_N, 1e-6, 1e-6, "scale y");

	/* In place. */
	assert_int_equal(tt_scale(0, x_dev, x_dev, 0.5f, VEC_N, free_cost), cudaSuccess);
	download(got, x_dev, sizeof(got));
	for (int i = 0; i < VEC_N; i++)
		assert_true(got[i] == 0.5f * x[i]);
}

/* The deterministic fill sets every byte it is given, and only those: a 7-byte fill of a
 * float buffer leaves the eighth byte and what follows as they were. */
static void test_fill_sets_exactly_its_bytes(void **state)
{
	float x[VEC_N], got[VEC_N];
	float *x_dev;

	fill_uniform(x, VEC_N, -1, 1, 73);
	x_dev = dev_copy(x, VEC_N);
	assert_int_equal(tt_fill(0, x_dev, 7, 0xff, free_cost), cudaSuccess);
	download(got, x_dev, sizeof(got));
	assert_true(isnan(got[0]));
	static const unsigned char ones[3] = {0xff, 0xff, 0xff};
	assert_memory_equal((unsigned char *)got + 4, ones, 3);
	assert_memory_equal((unsigned char *)got + 7, (unsigned char *)x + 7, sizeof(x) - 7);
	assert_int_equal(tt_fill(0, x_dev, -1, 0, free_cost), cudaErrorInvalidValue);
}

static void test_adam_matches_cpu_adam_over_three_steps(void **state)
{
	struct tt_adam hyper = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
	float param[VEC_N], grad[VEC_N], got[VEC_N];
	double p[VEC_N], m[VEC_N] = {0}, v[VEC_N] = {0};
	float *param_dev, *grad_dev, *m_dev = dev_floats(VEC_N), *v_dev = dev_floats(VEC_N);

	fill_uniform(param, VEC_N, -1, 1, 80);
	param_dev = dev_copy(param, VEC_N);
	grad_dev = dev_floats(VEC_N);
	for (int i = 0; i < VEC_N; i++)
		p[i] = param[i];
	for (hyper.t = 1; hyper.t <= 3; hyper.t++) {
		fill_uniform(grad, VEC_N, -1, 1, 80 + hyper.t);
		upload(grad_dev, grad, sizeof(grad));
		assert_int_equal(
		        tt_adam(0, param_dev, grad_dev, m_dev, v_dev, VEC_N, hyper, free_cost),
		        cudaSuccess);
		for (int i = 0; i < VEC_N; i++) {
			m[i] = hyper.beta1 * m[i] + (1 - hyper.beta1) * grad[i];
			v[i] = hyper.beta2 * v[i] + (1 - hyper.beta2) * grad[i] * grad[i];
			p[i] -= hyper.lr * (m[i] / (1 - pow(hyper.beta1, hyper.t))) /
			        (sqrt(v[i] / (1 - pow(hyper.beta2, hyper.t))) + hyper.eps);
		}
	}
	download(got, param_dev, sizeof(got));
	assert_all_near(got, p, VEC_N, 1e-4, 1e-5, "adam param");
}

/* ---- Dropout ---------------------------------------------------------------------------- */

enum { DROP_N = 10000 };
#define DROP_P 0.3f

struct dropout_run {
	float y[DROP_N];
	uint8_t mask[DROP_N];
};

static float *drop_x_dev, *drop_y_dev;
static uint8_t *drop_mask_dev;

static void dropout_run(float p, uint64_t seed, uint64_t offset, struct dropout_run *out)
{
	assert_int_equal(tt_dropout_fwd(0, drop_x_dev, drop_y_dev, drop_mask_dev, DROP_N, p, seed,
	                                offset, free_cost),
	                 cudaSuccess);
	download(out->y, drop_y_dev, sizeof(out->y));
	download(out->mask, drop_mask_dev, sizeof(out->mask));
}

static int dropout_setup(void **state)
{
	static float x[DROP_N];

	fill_uniform(x, DROP_N, -1, 1, 90);
	*state = x;
	drop_x_dev = dev_copy(x, DROP_N);
	drop_y_dev = dev_floats(DROP_N);
	drop_mask_dev = dev_bytes(DROP_N);
	return 0;
}

static void test_dropout_mask_depends_only_on_seed_and_offset(void **state)
{
	static struct dropout_run a, b, shifted;
	int kept = 0, differ = 0;

	dropout_run(DROP_P, 1234, 100, &a);
	dropout_run(DROP_P, 1234, 100, &b);
	assert_memory_equal(&a, &b, sizeof(a));
	/* Counter-based: offset + 1 sees element i + 1 of the same stream. */
	dropout_run(DROP_P, 1234, 101, &shifted);
	assert_memory_equal(shifted.mask, a.mask + 1, DROP_N - 1);
	for (int i = 0; i < DROP_N; i++) {
		kept += a.mask[i];
		differ += a.mask[i] != shifted.mask[i];
	}
	assert_true(differ > DROP_N / 10);
	/* 1 - p kept; the binomial's standard deviation here is about 46. */
	assert_in_range(kept, 7000 - 300, 7000 + 300);
	dropout_run(DROP_P, 1235, 100, &b);
	assert_memory_not_equal(a.mask, b.mask, DROP_N);
}

static void test_dropout_fwd_scales_kept_and_bwd_follows_mask(void **state)
{
	const float *x = *state;
	static struct dropout_run a;
	static float dy[DROP_N], dx[DROP_N];
	float *dy_dev, *dx_dev = dev_floats(DROP_N);

	dropout_run(DROP_P, 7, 0, &a);
	for (int i = 0; i < DROP_N; i++) {
		assert_true(a.mask[i] == 0 || a.mask[i] == 1);
		assert_near(a.y[i], a.mask[i] ? x[i] / (1.0 - DROP_P) : 0.0, 1e-6, 0, "y", i);
	}
	/* In place (y == x) gives the same bits. */
	assert_int_equal(tt_dropout_fwd(0, drop_x_dev, drop_x_dev, drop_mask_dev, DROP_N, DROP_P, 7,
	                                0, free_cost),
	                 cudaSuccess);
	download(dx, drop_x_dev, sizeof(dx));
	assert_memory_equal(dx, a.y, sizeof(dx));
	fill_uniform(dy, DROP_N, -1, 1, 91);
	dy_dev = dev_copy(dy, DROP_N);
	assert_int_equal(
	        tt_dropout_bwd(0, dy_dev, drop_mask_dev, dx_dev, DROP_N, DROP_P, free_cost),
	        cudaSuccess);
	download(dx, dx_dev, sizeof(dx));
	for (int i = 0; i < DROP_N; i++)
		assert_near(dx[i], a.mask[i] ? dy[i] / (1.0 - DROP_P) : 0.0, 1e-6, 0, "dx", i);
	/* In place (dx == dy) gives the same. */
	assert_int_equal(
	        tt_dropout_bwd(0, dy_dev, drop_mask_dev, dy_dev, DROP_N, DROP_P, free_cost),
	        cudaSuccess);
	download(dy, dy_dev, sizeof(dy));
	assert_memory_equal(dy, dx, sizeof(dx));
}

static void test_dropout_with_p_zero_is_identity(void **state)
{
	const float *x = *state;
	static struct dropout_run a;

	dropout_run(0.0f, 99, 5, &a);
	assert_memory_equal(a.y, x, sizeof(a.y));
	for (int i = 0; i < DROP_N; i++)
		assert_int_equal(a.mask[i], 1);
}

/* ---- Determinism and virtual cost ------------------------------------------------------- */

static void test_same_launch_twice_gives_identical_bits(void **state)
{
	enum { M = 17, N = 13, K = 29 };
	float a[M * K], b[K * N], first[M * N], second[M * N];
	float ce_first[M * N], ce_second[M * N];
	float *a_dev, *b_dev, *c_dev = dev_floats(M * N), *losses = dev_floats(M);
	int targets[M] = {0};
	int *targets_dev = dev_bytes(sizeof(targets));
	struct tt_gemm g = {.batch = 1, .m = M, .n = N, .k = K, .stride_a = 0, .alpha = 1};

	fill_uniform(a, M * K, -1, 1, 100);
	fill_uniform(b, K * N, -1, 1, 101);
	g.a = a_dev = dev_copy(a, M * K);
	g.b = b_dev = dev_copy(b, K * N);
	g.c = c_dev;
	upload(targets_dev, targets, sizeof(targets));
	for (int run = 0; run < 2; run++) {
		float *c_host = run ? second : first, *ce_host = run ? ce_second : ce_first;
		float *dlogits = dev_floats(M * N);

		assert_int_equal(tt_gemm(0, &g, free_cost), cudaSuccess);
		assert_int_equal(tt_cross_entropy(0, c_dev, targets_dev, losses, dlogits, M, N,
		                                  1.0f, free_cost),
		                 cudaSuccess);
		download(c_host, c_dev, sizeof(first));
		download(ce_host, dlogits, sizeof(ce_first));
	}
	assert_memory_equal(first, second, sizeof(first));
	assert_memory_equal(ce_first, ce_second, sizeof(ce_first));
}

enum { COSTED = 22 }; /* every kernel in kernels.h */

static void launched_then_record(cudaError_t launched, cudaEvent_t after)
{
	assert_int_equal(launched, cudaSuccess);
	assert_int_equal(cudaEventRecord(after, 0), cudaSuccess);
}

/* Each kernel, launched back to back on an idle stream with free API calls, occupies
 * exactly tt_cost_ns of its own cost: the cost is read from its last parameter. */
static void test_every_kernel_lasts_exactly_its_virtual_cost(void **state)
{
	struct tt_vcost cost[COSTED];
	cudaEvent_t ev[COSTED + 1];
	float *f[8], **table_ref = dev_bytes(sizeof(float *));
	uint8_t *mask = dev_bytes(64);
	int *ints = dev_bytes(64 * sizeof(int));
	struct tt_heads hs = {1, 2, 1, 2};
	uint64_t t0, total = 0;
	int i = 0;

	for (int j = 0; j < 8; j++)
		f[j] = dev_floats(64);
	upload(table_ref, &f[0], sizeof(f[0]));
	for (int j = 0; j < COSTED; j++) {
		/* Distinct; memory-bound first, compute-bound later. Below 100 us each, so
		 * that the float milliseconds of cudaEventElapsedTime resolve 1 ns. */
		cost[j] = (struct tt_vcost){(uint64_t)(j + 1) * 1000000000ull,
		                            (uint64_t)(COSTED - j) * 2000000ull};
		assert_int_equal(cudaEventCreate(&ev[j]), cudaSuccess);
	}
	assert_int_equal(cudaEventCreate(&ev[COSTED]), cudaSuccess);
	struct tt_gemm g = {0, 0, 1, 2, 2, 2, f[0], 4, f[1], 4, f[2], 4, 1, 0, f[3]};
	struct tt_layernorm_args ln = {f[0], f[1], f[2], f[3], f[4], f[5], 2, 4};
	struct tt_layernorm_grad_args lg = {f[0], f[1], f[2], f[4], f[5], f[6],
	                                    f[7], f[3], 2,    4,    0};
	struct tt_adam adam = {1e-3f, 0.9f, 0.999f, 1e-8f, 1, NULL};

	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
	t0 = simgpu_now_ns();
	assert_int_equal(cudaEventRecord(ev[0], 0), cudaSuccess);
	launched_then_record(tt_gemm(0, &g, cost[i]), ev[i + 1]), i++;
	launched_then_record(tt_layernorm_fwd(0, ln, cost[i]), ev[i + 1]), i++;
	launched_then_record(
	        tt_layernorm_fwd_flat(0, f[0], f[1], f[2], f[3], f[4], f[5], 2, 4, cost[i]),
	        ev[i + 1]),
	        i++;
	launched_then_record(tt_layernorm_bwd(0, lg, cost[i]), ev[i + 1]), i++;
	launched_then_record(tt_embedding_fwd(0, ints, table_ref, f[1], 2, 4, cost[i]), ev[i + 1]),
	        i++;
	launched_then_record(tt_embedding_fwd_direct(0, ints, f[0], f[1], 2, 4, cost[i]),
	                     ev[i + 1]),
	        i++;
	launched_then_record(tt_embedding_bwd(0, ints, f[1], f[2], 2, 4, cost[i]), ev[i + 1]), i++;
	launched_then_record(tt_softmax_fwd(0, f[0], f[1], 4, 4, 1, cost[i]), ev[i + 1]), i++;
	launched_then_record(tt_softmax_bwd(0, f[1], f[2], f[3], 4, 4, cost[i]), ev[i + 1]), i++;
	launched_then_record(tt_dropout_fwd(0, f[0], f[1], mask, 16, 0.5f, 1, 2, cost[i]),
	                     ev[i + 1]),
	        i++;
	launched_then_record(tt_dropout_bwd(0, f[1], mask, f[2], 16, 0.5f, cost[i]), ev[i + 1]),
	        i++;
	launched_then_record(tt_gelu_fwd(0, f[0], f[1], 16, cost[i]), ev[i + 1]), i++;
	launched_then_record(tt_gelu_bwd(0, f[0], f[1], f[2], 16, cost[i]), ev[i + 1]), i++;
	launched_then_record(tt_axpy(0, 2.0f, f[0], f[1], 16, cost[i]), ev[i + 1]), i++;
	launched_then_record(tt_split_qkv(0, hs, f[0], f[1], f[2], f[3], cost[i]), ev[i + 1]), i++;
	launched_then_record(tt_join_qkv_grad(0, hs, f[1], f[2], f[3], f[4], cost[i]), ev[i + 1]),
	        i++;
	launched_then_record(tt_merge_heads(0, hs, f[0], f[1], cost[i]), ev[i + 1]), i++;
	launched_then_record(tt_split_merged_grad(0, hs, f[1], f[2], cost[i]), ev[i + 1]), i++;
	launched_then_record(tt_cross_entropy(0, f[0], ints, f[1], f[2], 2, 4, 1.0f, cost[i]),
	                     ev[i + 1]),
	        i++;
	launched_then_record(tt_sum(0, f[0], f[1], 16, 0, cost[i]), ev[i + 1]), i++;
	launched_then_record(tt_scale(0, f[0], f[1], 2.0f, 16, cost[i]), ev[i + 1]), i++;
	launched_then_record(tt_adam(0, f[0], f[1], f[2], f[3], 16, adam, cost[i]), ev[i + 1]), i++;
	assert_int_equal(i, COSTED);
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);

	for (int j = 0; j < COSTED; j++) {
		uint64_t want = tt_cost_ns(cost[j]);
		float ms = 0;

		assert_int_equal(cudaEventElapsedTime(&ms, ev[j], ev[j + 1]), cudaSuccess);
		assert_near(ms * 1e6, (double)want, 0, 1.0, "kernel ns", (size_t)j);
		total += want;
		cudaEventDestroy(ev[j]);
	}
	cudaEventDestroy(ev[COSTED]);
	assert_int_equal(simgpu_now_ns() - t0, total);
	assert_int_equal(simgpu_error_count(), 0);
}

static void test_invalid_sizes_are_refused_without_launching(void **state)
{
	struct tt_gemm g = {.batch = 1, .m = -1, .n = 1, .k = 1};
	struct tt_adam adam = {.t = 0};

	assert_int_equal(tt_gemm(0, NULL, free_cost), cudaErrorInvalidValue);
	assert_int_equal(tt_gemm(0, &g, free_cost), cudaErrorInvalidValue);
	assert_int_equal(tt_gelu_fwd(0, NULL, NULL, -1, free_cost), cudaErrorInvalidValue);
	assert_int_equal(tt_dropout_fwd(0, NULL, NULL, NULL, 1, 1.0f, 0, 0, free_cost),
	                 cudaErrorInvalidValue);
	assert_int_equal(tt_adam(0, NULL, NULL, NULL, NULL, 1, adam, free_cost),
	                 cudaErrorInvalidValue);
	assert_int_equal(tt_kernels_register(), 0); /* a second registration is harmless */
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
}

int main(void)
{
	/* Before the first CUDA call: free API calls make kernel durations exact. */
	setenv("SIMGPU_API_COST_NS", "0", 1);
	if (tt_kernels_register() != 0) {
		fprintf(stderr, "tt_kernels_register failed\n");
		return 1;
	}

	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(
	                test_gemm_matches_reference_in_all_transposes_with_and_without_workspace,
	                free_allocs),
	        cmocka_unit_test_teardown(test_gemm_beta_zero_overwrites_c_without_reading_it,
	                                  free_allocs),
	        cmocka_unit_test_teardown(test_layernorm_fwd_matches_reference, free_allocs),
	        cmocka_unit_test_teardown(
	                test_layernorm_fwd_flat_gives_the_same_bits_as_the_struct_form,
	                free_allocs),
	        cmocka_unit_test_teardown(
	                test_layernorm_bwd_matches_central_differences_and_accumulates,
	                free_allocs),
	        cmocka_unit_test_teardown(test_softmax_fwd_matches_reference_causal_and_not,
	                                  free_allocs),
	        cmocka_unit_test_teardown(test_softmax_bwd_matches_central_differences,
	                                  free_allocs),
	        cmocka_unit_test_teardown(test_gelu_fwd_matches_tanh_formula_and_bwd_its_derivative,
	                                  free_allocs),
	        cmocka_unit_test_teardown(
	                test_cross_entropy_matches_reference_and_dlogits_central_differences,
	                free_allocs),
	        cmocka_unit_test_teardown(test_embedding_fwd_reads_table_pointer_when_it_runs,
	                                  free_allocs),
	        cmocka_unit_test_teardown(
	                test_embedding_bwd_accumulates_per_token_including_repeats, free_allocs),
	        cmocka_unit_test_teardown(test_split_qkv_layout_and_join_qkv_grad_is_its_inverse,
	                                  free_allocs),
	        cmocka_unit_test_teardown(
	                test_merge_heads_layout_and_split_merged_grad_is_its_inverse, free_allocs),
	        cmocka_unit_test_teardown(test_sum_writes_or_accumulates_in_index_order,
	                                  free_allocs),
	        cmocka_unit_test_teardown(test_scale_and_axpy_match_reference, free_allocs),
	        cmocka_unit_test_teardown(test_fill_sets_exactly_its_bytes, free_allocs),
	        cmocka_unit_test_teardown(test_adam_matches_cpu_adam_over_three_steps, free_allocs),
	        cmocka_unit_test_setup_teardown(test_dropout_mask_depends_only_on_seed_and_offset,
	                                        dropout_setup, free_allocs),
	        cmocka_unit_test_setup_teardown(test_dropout_fwd_scales_kept_and_bwd_follows_mask,
	                                        dropout_setup, free_allocs),
	        cmocka_unit_test_setup_teardown(test_dropout_with_p_zero_is_identity, dropout_setup,
	                                        free_allocs),
	        cmocka_unit_test_teardown(test_same_launch_twice_gives_identical_bits, free_allocs),
	        cmocka_unit_test_teardown(test_every_kernel_lasts_exactly_its_virtual_cost,
	                                  free_allocs),
	        cmocka_unit_test_teardown(test_invalid_sizes_are_refused_without_launching,
	                                  free_allocs),
	};

	return cmocka_run_group_tests_name("tinytrain_kernels", tests, NULL, NULL);
}
