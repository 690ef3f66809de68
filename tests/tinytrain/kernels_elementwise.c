/* SPDX-License-Identifier: Apache-2.0 */
/* tinytrain's element-wise and data-movement kernel bodies: dropout, GeLU, axpy, scale, Adam,
 * embedding, head split and merge. */
#include <math.h>
#include <string.h>

#include "kernels_table.h"

/* ---- Element-wise ----------------------------------------------------------------------- */

void tt_axpy_body(const struct simgpu_launch_dims *dims, void **params)
{
	float alpha = TT_ARG(params, 0, float);
	const float *x = TT_ARG(params, 1, const float *);
	float *y = TT_ARG(params, 2, float *);
	int64_t n = TT_ARG(params, 3, int64_t);

	for (int64_t i = 0; i < n; i++)
		y[i] += alpha * x[i];
}

void tt_scale_body(const struct simgpu_launch_dims *dims, void **params)
{
	const float *x = TT_ARG(params, 0, const float *);
	float *y = TT_ARG(params, 1, float *);
	float alpha = TT_ARG(params, 2, float);
	int64_t n = TT_ARG(params, 3, int64_t);

	for (int64_t i = 0; i < n; i++)
		y[i] = alpha * x[i];
}

void tt_fill_body(const struct simgpu_launch_dims *dims, void **params)
{
	(void)dims;
	memset(TT_ARG(params, 0, void *), TT_ARG(params, 2, int),
	       (size_t)TT_ARG(params, 1, int64_t));
}

static uint64_t splitmix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Counter-based: element `counter` of stream `seed` is kept with probability 1 - p, the
 * same answer wherever and however often it is asked. Uniform from the top 24 bits. */
static uint8_t dropout_keep(uint64_t seed, uint64_t counter, float p)
{
	uint64_t h = splitmix64(seed ^ (0x9E3779B97F4A7C15ull * (counter + 1)));
	float u = (float)(h >> 40) * (1.0f / 16777216.0f);

	return u >= p;
}

void tt_dropout_fwd_body(const struct simgpu_launch_dims *dims, void **params)
{
	const float *x = TT_ARG(params, 0, const float *);
	float *y = TT_ARG(params, 1, float *);
	uint8_t *mask = TT_ARG(params, 2, uint8_t *);
	int64_t n = TT_ARG(params, 3, int64_t);
	float p = TT_ARG(params, 4, float);
	uint64_t seed = TT_ARG(params, 5, uint64_t), offset = TT_ARG(params, 6, uint64_t);
	float scale = 1.0f / (1.0f - p);

	for (int64_t i = 0; i < n; i++) {
		mask[i] = p == 0.0f ? 1 : dropout_keep(seed, offset + (uint64_t)i, p);
		/* p == 0 must give y = x exactly, hence no multiply by 1/(1-p) there. */
		y[i] = !mask[i] ? 0.0f : p == 0.0f ? x[i] : x[i] * scale;
	}
}

void tt_dropout_bwd_body(const struct simgpu_launch_dims *dims, void **params)
{
	const float *dy = TT_ARG(params, 0, const float *);
	const uint8_t *mask = TT_ARG(params, 1, const uint8_t *);
	float *dx = TT_ARG(params, 2, float *);
	int64_t n = TT_ARG(params, 3, int64_t);
	float p = TT_ARG(params, 4, float);
	float scale = 1.0f / (1.0f - p);

	for (int64_t i = 0; i < n; i++)
		dx[i] = !mask[i] ? 0.0f : p == 0.0f ? dy[i] : dy[i] * scale;
}

/* gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). */
#define GELU_SQRT_2_OVER_PI 0.7978845608f
#define GELU_CUBIC 0.044715f

void tt_gelu_fwd_body(const struct simgpu_launch_dims *dims, void **params)
{
	const float *x = TT_ARG(params, 0, const float *);
	float *y = TT_ARG(params, 1, float *);
	int64_t n = TT_ARG(params, 2, int64_t);

	for (int64_t i = 0; i < n; i++) {
		float v = x[i];
		float u = GELU_SQRT_2_OVER_PI * (v + GELU_CUBIC * v * v * v);

		y[i] = 0.5f * v * (1.0f + tanhf(u));
	}
}

/* gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), t = tanh(u). */
void tt_gelu_bwd_body(const struct simgpu_launch_dims *dims, void **params)
{
	const float *x = TT_ARG(params, 0, const float *), *dy = TT_ARG(params, 1, const float *);
	float *dx = TT_ARG(params, 2, float *);
	int64_t n = TT_ARG(params, 3, int64_t);

	for (int64_t i = 0; i < n; i++) {
		float v = x[i];
		float t = tanhf(GELU_SQRT_2_OVER_PI * (v + GELU_CUBIC * v * v * v));
		float du = GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_CUBIC * v * v);

		dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
	}
}

/* Adam with bias correction: m, v updated in place, then param -= lr * mhat / (sqrt(vhat) +
 * eps). The corrections are computed once per launch, in float, from t (or from *step,
 * counted on first: kernels.h). */
void tt_adam_body(const struct simgpu_launch_dims *dims, void **params)
{
	float *param = TT_ARG(params, 0, float *);
	const float *grad = TT_ARG(params, 1, const float *);
	float *m = TT_ARG(params, 2, float *), *v = TT_ARG(params, 3, float *);
	int64_t n = TT_ARG(params, 4, int64_t);
	struct tt_adam h = TT_ARG(params, 5, struct tt_adam);

	if (h.step)
		h.t = ++*h.step;
	float correct1 = 1.0f - powf(h.beta1, (float)h.t);
	float correct2 = 1.0f - powf(h.beta2, (float)h.t);

	for (int64_t i = 0; i < n; i++) {
		float g = grad[i];

		m[i] = h.beta1 * m[i] + (1.0f - h.beta1) * g;
		v[i] = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;
		param[i] -= h.lr * (m[i] / correct1) / (sqrtf(v[i] / correct2) + h.eps);
	}
}

/* ---- Data movement ---------------------------------------------------------------------- */

/* out[t] = table[tokens[t]], for both embedding forwards. */
static void embedding_forward(const int *tokens, const float *table, float *out, int tokens_n,
                              int hidden)
{
	for (int64_t t = 0; t < tokens_n; t++)
		memcpy(out + t * hidden, table + (int64_t)tokens[t] * hidden,
		       (size_t)hidden * sizeof(float));
}

/* The table pointer is fetched from device memory when the kernel runs, not when it is
 * launched: whatever the pointer cell holds at that point in the stream wins. */
void tt_embedding_fwd_body(const struct simgpu_launch_dims *dims, void **params)
{
	float *const *table_ref = TT_ARG(params, 1, float *const *);

	embedding_forward(TT_ARG(params, 0, const int *), *table_ref, TT_ARG(params, 2, float *),
	                  TT_ARG(params, 3, int), TT_ARG(params, 4, int));
}

void tt_embedding_fwd_direct_body(const struct simgpu_launch_dims *dims, void **params)
{
	embedding_forward(TT_ARG(params, 0, const int *), TT_ARG(params, 1, const float *),
	                  TT_ARG(params, 2, float *), TT_ARG(params, 3, int),
	                  TT_ARG(params, 4, int));
}

void tt_embedding_bwd_body(const struct simgpu_launch_dims *dims, void **params)
{
	const int *tokens = TT_ARG(params, 0, const int *);
	const float *dout = TT_ARG(params, 1, const float *);
	float *dtable = TT_ARG(params, 2, float *);
	int tokens_n = TT_ARG(params, 3, int), hidden = TT_ARG(params, 4, int);

	for (int64_t t = 0; t < tokens_n; t++) {
		float *row = dtable + (int64_t)tokens[t] * hidden;

		for (int h = 0; h < hidden; h++)
			row[h] += dout[t * hidden + h];
	}
}

/*
 * One d-sized vector moves between the token-major layout (batch*seq, parts*heads*d) and
 * the head-major one (batch, heads, seq, d). `part` selects q/k/v (parts 3) or is 0 for the
 * merged context (parts 1); to_heads says which way the copy goes.
 */
static void heads_copy(struct tt_heads s, int parts, int part, float *tokens, float *heads,
                       int to_heads)
{
	int64_t row = (int64_t)parts * s.heads * s.d;

	for (int64_t b = 0; b < s.batch; b++) {
		for (int64_t h = 0; h < s.heads; h++) {
			for (int64_t t = 0; t < s.seq; t++) {
				float *tok = tokens + (b * s.seq + t) * row +
				             ((int64_t)part * s.heads + h) * s.d;
				float *head = heads + ((b * s.heads + h) * s.seq + t) * s.d;

				if (to_heads)
					memcpy(head, tok, (size_t)s.d * sizeof(float));
				else
					memcpy(tok, head, (size_t)s.d * sizeof(float));
			}
		}
	}
}

void tt_split_qkv_body(const struct simgpu_launch_dims *dims, void **params)
{
	struct tt_heads s = TT_ARG(params, 0, struct tt_heads);
	float *qkv = TT_ARG(params, 1, float *);

	for (int part = 0; part < 3; part++)
		heads_copy(s, 3, part, qkv, TT_ARG(params, 2 + part, float *), 1);
}

void tt_join_qkv_grad_body(const struct simgpu_launch_dims *dims, void **params)
{
	struct tt_heads s = TT_ARG(params, 0, struct tt_heads);
	float *dqkv = TT_ARG(params, 4, float *);

	for (int part = 0; part < 3; part++)
		heads_copy(s, 3, part, dqkv, TT_ARG(params, 1 + part, float *), 0);
}

void tt_merge_heads_body(const struct simgpu_launch_dims *dims, void **params)
{
	struct tt_heads s = TT_ARG(params, 0, struct tt_heads);

	heads_copy(s, 1, 0, TT_ARG(params, 2, float *), TT_ARG(params, 1, float *), 0);
}

void tt_split_merged_grad_body(const struct simgpu_launch_dims *dims, void **params)
{
	struct tt_heads s = TT_ARG(params, 0, struct tt_heads);

	heads_copy(s, 1, 0, TT_ARG(params, 1, float *), TT_ARG(params, 2, float *), 1);
}
