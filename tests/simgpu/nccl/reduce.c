/* SPDX-License-Identifier: Apache-2.0 */
/* Element types, reduction operators and the rank-ordered folds behind NCCL's reductions. */
#include <string.h>

#include "reduce.h"

size_t simnccl_type_size(ncclDataType_t type)
{
	switch (type) {
#define X(t, name, bytes) \
	case t:           \
		return bytes;
		SIMNCCL_TYPES(X)
#undef X
	default:
		return 0;
	}
}

const char *simnccl_type_name(ncclDataType_t type)
{
	switch (type) {
#define X(t, name, bytes) \
	case t:           \
		return name;
		SIMNCCL_TYPES(X)
#undef X
	default:
		return "invalid";
	}
}

bool simnccl_redop_valid(ncclRedOp_t op)
{
	switch (op) {
#define X(o, name) case o:
		SIMNCCL_REDOPS(X)
#undef X
		return true;
	default:
		return false;
	}
}

const char *simnccl_redop_name(ncclRedOp_t op)
{
	switch (op) {
#define X(o, name) \
	case o:    \
		return name;
		SIMNCCL_REDOPS(X)
#undef X
	default:
		return "invalid";
	}
}

/* ---- 16-bit floats ----------------------------------------------------------------------- */

static uint32_t float_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static float bits_float(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

float simnccl_half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t mant = h & 0x3ffu;
	float sub;

	if (exp == 0x1f)
		return bits_float(sign | 0x7f800000u | (mant << 13));
	if (exp)
		return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
	sub = (float)mant * 0x1p-24f; /* zero or subnormal: exact in float */
	return sign ? -sub : sub;
}

/*
 * Round to nearest even. Normal results: add half an ulp minus one, plus the kept
 * mantissa's lowest bit, then truncate; a carry into the exponent is the right result,
 * up to infinity. Subnormal results: adding 0.5 (as float) aligns the binary point so
 * that the FPU's own rounding does the work.
 */
uint16_t simnccl_float_to_half(float f)
{
	uint32_t x = float_bits(f);
	uint32_t sign = (x >> 16) & 0x8000u;
	uint32_t a = x & 0x7fffffffu;

	if (a > 0x7f800000u)
		return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x47800000u) /* 65536 and above: infinity */
		return (uint16_t)(sign | 0x7c00u);
	if (a < 0x38800000u) { /* below 2^-14, half's smallest normal */
		float shifted = bits_float(a) + 0.5f;
		return (uint16_t)(sign | (float_bits(shifted) - float_bits(0.5f)));
	}
	a += 0xc8000000u + 0xfffu + ((a >> 13) & 1u); /* rebias 127 -> 15, round */
	return (uint16_t)(sign | (a >> 13));
}

float simnccl_bf16_to_float(uint16_t h)
{
	return bits_float((uint32_t)h << 16);
}

uint16_t simnccl_float_to_bf16(float f)
{
	uint32_t x = float_bits(f);

	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40u);
	x += 0x7fffu + ((x >> 16) & 1u);
	return (uint16_t)(x >> 16);
}

/* ---- Folds --------------------------------------------------------------------------------- */

/* fmax/fmin without libm (the layer links only libsimgpu and librt): a NaN loses. */
static float max_float(float a, float b)
{
	return b != b || a > b ? a : b;
}

static float min_float(float a, float b)
{
	return b != b || a < b ? a : b;
}

static double max_double(double a, double b)
{
	return b != b || a > b ? a : b;
}

static double min_double(double a, double b)
{
	return b != b || a < b ? a : b;
}

static float combine_float(float a, float b, ncclRedOp_t op)
{
	switch (op) {
	case ncclProd:
		return a * b;
	case ncclMax:
		return max_float(a, b);
	case ncclMin:
		return min_float(a, b);
	default: /* sum, and avg's sum of pre-multiplied inputs */
		return a + b;
	}
}

static double combine_double(double a, double b, ncclRedOp_t op)
{
	switch (op) {
	case ncclProd:
		return a * b;
	case ncclMax:
		return max_double(a, b);
	case ncclMin:
		return min_double(a, b);
	default:
		return a + b;
	}
}

/*
 * float32: the type most gradients have, so the op is chosen outside the element loop.
 * avg's x * scale + out must not become a fused multiply-add: the x86-64 baseline the
 * project builds for has none, and -march flags that add FMA would change the bits.
 */
static void fold_f32(float *out, const void *const *in, int n, size_t count, ncclRedOp_t op)
{
	float scale = 1.0f / (float)n;
	const float *x = in[0];

	for (size_t i = 0; i < count; i++)
		out[i] = op == ncclAvg ? x[i] * scale : x[i];
	for (int r = 1; r < n; r++) {
		x = in[r];
		switch (op) {
		case ncclSum:
			for (size_t i = 0; i < count; i++)
				out[i] += x[i];
			break;
		case ncclAvg:
			for (size_t i = 0; i < count; i++)
				out[i] += x[i] * scale;
			break;
		default:
			for (size_t i = 0; i < count; i++)
				out[i] = combine_float(out[i], x[i], op);
			break;
		}
	}
}

static void fold_f64(double *out, const void *const *in, int n, size_t count, ncclRedOp_t op)
{
	double scale = 1.0 / (double)n;
	const double *x = in[0];

	for (size_t i = 0; i < count; i++)
		out[i] = op == ncclAvg ? x[i] * scale : x[i];
	for (int r = 1; r < n; r++) {
		x = in[r];
		for (size_t i = 0; i < count; i++)
			out[i] = combine_double(out[i], op == ncclAvg ? x[i] * scale : x[i], op);
	}
}

struct half_codec {
	float (*to_float)(uint16_t h);
	uint16_t (*from_float)(float f);
};

/* float16 and bfloat16: widen, combine in float, round back after every step. */
static void fold_16(uint16_t *out, const void *const *in, int n, size_t count, ncclRedOp_t op,
                    const struct half_codec *c)
{
	float scale = c->to_float(c->from_float(1.0f / (float)n));

	for (int r = 0; r < n; r++) {
		const uint16_t *x = in[r];
		for (size_t i = 0; i < count; i++) {
			float v = c->to_float(x[i]);
			if (op == ncclAvg)
				v = c->to_float(c->from_float(v * scale));
			if (r > 0)
				v = combine_float(c->to_float(out[i]), v, op);
			out[i] = c->from_float(v);
		}
	}
}

/* Integers travel as uint64_t: sign-extended for signed types, so that comparisons work
 * on int64_t and sums and products wrap to the right low bits. */
static uint64_t load_int(const void *p, size_t i, size_t size, bool is_signed)
{
	switch (size) {
	case 1:
		return is_signed ? (uint64_t)((const int8_t *)p)[i] : ((const uint8_t *)p)[i];
	case 4:
		return is_signed ? (uint64_t)((const int32_t *)p)[i] : ((const uint32_t *)p)[i];
	default:
		return ((const uint64_t *)p)[i];
	}
}

static void store_int(void *p, size_t i, size_t size, uint64_t v)
{
	switch (size) {
	case 1:
		((uint8_t *)p)[i] = (uint8_t)v;
		break;
	case 4:
		((uint32_t *)p)[i] = (uint32_t)v;
		break;
	default:
		((uint64_t *)p)[i] = v;
		break;
	}
}

static uint64_t combine_int(uint64_t a, uint64_t b, ncclRedOp_t op, bool is_signed)
{
	switch (op) {
	case ncclProd:
		return a * b;
	case ncclMax:
		if (is_signed)
			return (int64_t)a > (int64_t)b ? a : b;
		return a > b ? a : b;
	case ncclMin:
		if (is_signed)
			return (int64_t)a < (int64_t)b ? a : b;
		return a < b ? a : b;
	default:
		return a + b;
	}
}

static void fold_int(void *out, const void *const *in, int n, size_t count, size_t size,
                     bool is_signed, ncclRedOp_t op)
{
	for (size_t i = 0; i < count; i++) {
		uint64_t acc = load_int(in[0], i, size, is_signed);
		for (int r = 1; r < n; r++)
			acc = combine_int(acc, load_int(in[r], i, size, is_signed), op, is_signed);
		if (op == ncclAvg) {
			/* The wrapped sum, as the element type holds it, divided by n. */
			store_int(&acc, 0, size, acc);
			acc = load_int(&acc, 0, size, is_signed);
			acc = is_signed ? (uint64_t)((int64_t)acc / n) : acc / (uint64_t)n;
		}
		store_int(out, i, size, acc);
	}
}

void simnccl_reduce(void *out, const void *const *in, int n, size_t count, ncclDataType_t type,
                    ncclRedOp_t op)
{
	static const struct half_codec half = {simnccl_half_to_float, simnccl_float_to_half};
	static const struct half_codec bf16 = {simnccl_bf16_to_float, simnccl_float_to_bf16};

	switch (type) {
	case ncclFloat32:
		fold_f32(out, in, n, count, op);
		break;
	case ncclFloat64:
		fold_f64(out, in, n, count, op);
		break;
	case ncclFloat16:
		fold_16(out, in, n, count, op, &half);
		break;
	case ncclBfloat16:
		fold_16(out, in, n, count, op, &bf16);
		break;
	case ncclInt8:
	case ncclInt32:
	case ncclInt64:
		fold_int(out, in, n, count, simnccl_type_size(type), true, op);
		break;
	default: /* the unsigned types */
		fold_int(out, in, n, count, simnccl_type_size(type), false, op);
		break;
	}
}
