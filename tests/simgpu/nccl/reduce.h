/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL data types and reduction operators as simgpu's NCCL layer computes them.
 *
 * Reductions fold the ranks' inputs in rank order, ((in0 op in1) op in2) ..., rounding
 * to the element type after every step, so that every rank and every run produce the
 * same bits. 16-bit floats are computed in float and rounded back to nearest even; that
 * equals native half/bfloat16 arithmetic, float having more than 2p+2 bits. ncclAvg
 * follows NCCL: floating types pre-multiply each input by 1/n (rounded to the type),
 * then sum; integer types sum (wrapping), then divide by n (truncating).
 * Integer sums and products wrap modulo 2^bits. Max and min of floats follow fmax/fmin
 * (a NaN loses to a number). Pure functions; any thread.
 */
#ifndef SIMGPU_NCCL_REDUCE_H
#define SIMGPU_NCCL_REDUCE_H

#include <stdbool.h>
#include <stddef.h>

#include "simnccl.h"

/* X(type, name, bytes): every supported ncclDataType_t. The FP8 types are not. */
#define SIMNCCL_TYPES(X)             \
	X(ncclInt8, "int8", 1)       \
	X(ncclUint8, "uint8", 1)     \
	X(ncclInt32, "int32", 4)     \
	X(ncclUint32, "uint32", 4)   \
	X(ncclInt64, "int64", 8)     \
	X(ncclUint64, "uint64", 8)   \
	X(ncclFloat16, "float16", 2) \
	X(ncclFloat32, "float32", 4) \
	X(ncclFloat64, "float64", 8) \
	X(ncclBfloat16, "bfloat16", 2)

/* X(op, name): every supported ncclRedOp_t (no user-created operators). */
#define SIMNCCL_REDOPS(X)   \
	X(ncclSum, "sum")   \
	X(ncclProd, "prod") \
	X(ncclMax, "max")   \
	X(ncclMin, "min")   \
	X(ncclAvg, "avg")

/* Bytes of one element; 0 for a type simgpu does not support. */
size_t simnccl_type_size(ncclDataType_t type);
/* "float32" etc.; "invalid" for an unsupported type. */
const char *simnccl_type_name(ncclDataType_t type);
bool simnccl_redop_valid(ncclRedOp_t op);
/* "sum" etc.; "invalid" for an unsupported operator. */
const char *simnccl_redop_name(ncclRedOp_t op);

/*
 * out[i] = fold over r = 0..n-1 of in[r][i], for i < count, as described above.
 * type and op must be valid; out may not alias any input.
 */
void simnccl_reduce(void *out, const void *const *in, int n, size_t count, ncclDataType_t type,
                    ncclRedOp_t op);

/* IEEE binary16 and bfloat16 conversions; to-16-bit rounds to nearest even, keeps NaN. */
float simnccl_half_to_float(uint16_t h);
uint16_t simnccl_float_to_half(float f);
float simnccl_bf16_to_float(uint16_t h);
uint16_t simnccl_float_to_bf16(float f);

#endif /* SIMGPU_NCCL_REDUCE_H */
