/* SPDX-License-Identifier: Apache-2.0 */
/* tinytrain's matrix and row-wise kernel bodies: GEMM, layer norm, softmax, cross-entropy, sum. */
#include <math.h>
#include <string.h>

#include "kernels_table.h"

#define LAYERNORM_EPS 1e-5f

/* ---- Linear algebra --------------------------------------------------------------------- */

/*
 * Each output element is one dot product accumulated in float in index order, then
 * alpha * dot (+ C when beta != 0). The whole batch is computed into the destination
 * (workspace if any) before C is written, so that staging is a separate pass as in a
 * split-K or stream-K GEMM sharing one workspace.
 */
void tt_gemm_body(const struct simgpu_launch_dims *dims, void **params)
{
	int trans_a = TT_ARG(params, 0, int), trans_b = TT_ARG(params, 1, int);
	int batch = TT_ARG(params, 2, int), m = TT_ARG(params, 3, int);
	int n = TT_ARG(params, 4, int), k = TT_ARG(params, 5, int);
	const float *a = TT_ARG(params, 6, const float *);
	int64_t stride_a = TT_ARG(params, 7, int64_t);
	const float *b = TT_ARG(params, 8, const float *);
	int64_t stride_b = TT_ARG(params, 9, int64_t);
	float *c = TT_ARG(params, 10, float *);
	int64_t stride_c = TT_ARG(params, 11, int64_t);
	float alpha = TT_ARG(params, 12, float), beta = TT_ARG(params, 13, float);
	float *workspace = TT_ARG(params, 14, float *);
	/* Element (i, p) of op(A) is a[i * a_row + p * a_col]; likewise op(B). */
	int64_t a_row = trans_a ? 1 : k, a_col = trans_a ? m : 1;
	int64_t b_row = trans_b ? 1 : n, b_col = trans_b ? k : 1;
	int64_t mn = (int64_t)m * n;

	for (int64_t bi = 0; bi < batch; bi++) {
		const float *ab = a + bi * stride_a, *bb = b + bi * stride_b;
		const float *cb = c + bi * stride_c;
		float *out = workspace ? workspace + bi * mn : c + bi * stride_c;

		for (int64_t i = 0; i < m; i++) {
			for (int64_t j = 0; j < n; j++) {
				float dot = 0.0f, value;

				for (int64_t p = 0; p < k; p++)
					dot += ab[i * a_row + p * a_col] *
					       bb[p * b_row + j * b_col];
				value = alpha * dot;
				/* beta 0 must not read C: it may hold garbage or NaN. */
				if (beta != 0.0f)
					value += beta * cb[i * n + j];
				out[i * n + j] = value;
			}
		}
	}
	if (!workspace)
		return;
	for (int64_t bi = 0; bi < batch; bi++)
		memcpy(c + bi * stride_c, workspace + bi * mn, (size_t)mn * sizeof(float));
}

void tt_sum_body(const struct simgpu_launch_dims *dims, void **params)
{
	const float *x = TT_ARG(params, 0, const float *);
	float *out = TT_ARG(params, 1, float *);
	int n = TT_ARG(params, 2, int), accumulate = TT_ARG(params, 3, int);
	float total = 0.0f;

	for (int i = 0; i < n; i++)
		total += x[i];
	*out = accumulate ? *out + total : total;
}

/* ---- Normalisation and softmax ---------------------------------------------------------- */

/* Both layer-norm forwards, the by-value struct one and the flat one, compute this. */
static void layernorm_forward(struct tt_layernorm_args a)
{
	for (int64_t r = 0; r < a.rows; r++) {
		const float *x = a.x + r * a.cols;
		float *y = a.y + r * a.cols;
		float mean = 0.0f, var = 0.0f, rstd;

		for (int j = 0; j < a.cols; j++)
			mean += x[j];
		mean /= (float)a.cols;
		/* Two passes: the one-pass E[x^2] - E[x]^2 cancels badly in float. */
		for (int j = 0; j < a.cols; j++)
			var += (x[j] - mean) * (x[j] - mean);
		var /= (float)a.cols;
		rstd = 1.0f / sqrtf(var + LAYERNORM_EPS);
		for (int j = 0; j < a.cols; j++)
			y[j] = (x[j] - mean) * rstd * a.gamma[j] + a.beta[j];
		a.mean[r] = mean;
		a.rstd[r] = rstd;
	}
}

void tt_layernorm_fwd_body(const struct simgpu_launch_dims *dims, void **params)
{
	layernorm_forward(TT_ARG(params, 0, struct tt_layernorm_args));
}

void tt_layernorm_fwd_flat_body(const struct simgpu_launch_dims *dims, void **params)
{
	struct tt_layernorm_args a = {
	        .x = TT_ARG(params, 0, const float *),
	        .y = TT_ARG(params, 1, float *),
	        .gamma = TT_ARG(params, 2, const float *),
	        .beta = TT_ARG(params, 3, const float *),
	        .mean = TT_ARG(params, 4, float *),
	        .rstd = TT_ARG(params, 5, float *),
	        .rows = TT_ARG(params, 6, int),
	        .cols = TT_ARG(params, 7, int),
	};

	layernorm_forward(a);
}

/*
 * With xhat = (x - mean) * rstd and g = dy * gamma:
 * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); dgamma += dy * xhat; dbeta += dy.
 * Rows are visited in order, so dgamma and dbeta accumulate deterministically.
 */
void tt_layernorm_bwd_body(const struct simgpu_launch_dims *dims, void **params)
{
	struct tt_layernorm_grad_args a = TT_ARG(params, 0, struct tt_layernorm_grad_args);

	for (int64_t r = 0; r < a.rows; r++) {
		const float *x = a.x + r * a.cols, *dy = a.dy + r * a.cols;
		float *dx = a.dx + r * a.cols;
		float mean = a.mean[r], rstd = a.rstd[r];
		float g_mean = 0.0f, gx_mean = 0.0f;

		for (int j = 0; j < a.cols; j++) {
			float xhat = (x[j] - mean) * rstd, g = dy[j] * a.gamma[j];

			g_mean += g;
			gx_mean += g * xhat;
			a.dgamma[j] += dy[j] * xhat;
			a.dbeta[j] += dy[j];
		}
		g_mean /= (float)a.cols;
		gx_mean /= (float)a.cols;
		for (int j = 0; j < a.cols; j++) {
			float xhat = (x[j] - mean) * rstd, g = dy[j] * a.gamma[j];
			float d = rstd * (g - g_mean - xhat * gx_mean);

			dx[j] = a.accumulate ? dx[j] + d : d;
		}
	}
}

/* Causal: row r is query r % cols and sees keys 0..r % cols; the rest of the row is 0. */
void tt_softmax_fwd_body(const struct simgpu_launch_dims *dims, void **params)
{
	const float *x = TT_ARG(params, 0, const float *);
	float *y = TT_ARG(params, 1, float *);
	int rows = TT_ARG(params, 2, int), cols = TT_ARG(params, 3, int);
	int causal = TT_ARG(params, 4, int);

	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * cols;
		float *yr = y + r * cols;
		int seen = causal ? (int)(r % cols) + 1 : cols;
		float max = -INFINITY, sum = 0.0f;

		for (int j = 0; j < seen; j++)
			max = xr[j] > max ? xr[j] : max;
		for (int j = 0; j < seen; j++) {
			yr[j] = expf(xr[j] - max);
			sum += yr[j];
		}
		for (int j = 0; j < seen; j++)
			yr[j] /= sum;
		for (int j = seen; j < cols; j++)
			yr[j] = 0.0f;
	}
}

void tt_softmax_bwd_body(const struct simgpu_launch_dims *dims, void **params)
{
	const float *y = TT_ARG(params, 0, const float *), *dy = TT_ARG(params, 1, const float *);
	float *dx = TT_ARG(params, 2, float *);
	int rows = TT_ARG(params, 3, int), cols = TT_ARG(params, 4, int);

	for (int64_t r = 0; r < rows; r++) {
		const float *yr = y + r * cols, *dyr = dy + r * cols;
		float *dxr = dx + r * cols;
		float dot = 0.0f;

		for (int j = 0; j < cols; j++)
			dot += dyr[j] * yr[j];
		for (int j = 0; j < cols; j++)
			dxr[j] = yr[j] * (dyr[j] - dot);
	}
}

/*
 * losses[r] = logsumexp(row) - row[target], max-subtracted; dlogits = (softmax - onehot)
 * * grad_scale. A target outside [0, vocab) is a caller's bug: it gets a NaN loss (visible
 * in the loss curve) rather than a read out of bounds.
 */
void tt_cross_entropy_body(const struct simgpu_launch_dims *dims, void **params)
{
	const float *logits = TT_ARG(params, 0, const float *);
	const int *targets = TT_ARG(params, 1, const int *);
	float *losses = TT_ARG(params, 2, float *), *dlogits = TT_ARG(params, 3, float *);
	int rows = TT_ARG(params, 4, int), vocab = TT_ARG(params, 5, int);
	float grad_scale = TT_ARG(params, 6, float);

	for (int64_t r = 0; r < rows; r++) {
		const float *x = logits + r * vocab;
		float *dx = dlogits + r * vocab;
		int target = targets[r];
		int valid = target >= 0 && target < vocab;
		float max = -INFINITY, sum = 0.0f, lse;

		for (int j = 0; j < vocab; j++)
			max = x[j] > max ? x[j] : max;
		for (int j = 0; j < vocab; j++)
			sum += expf(x[j] - max);
		lse = max + logf(sum);
		losses[r] = valid ? lse - x[target] : NAN;
		for (int j = 0; j < vocab; j++)
			dx[j] = (expf(x[j] - max) / sum - (j == target ? 1.0f : 0.0f)) * grad_scale;
	}
}
