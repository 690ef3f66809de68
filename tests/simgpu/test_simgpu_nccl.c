/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simgpu's NCCL layer across forked rank processes: results, virtual times and failures.
 *
 * Each test forks a coordinator, which sets the test's SIMGPU_* variables, creates the
 * unique id and forks the ranks. (ncclGetUniqueId is an API call, and the first API call
 * of a process reads its configuration; the coordinator keeps that out of this
 * process, so every test gets its own settings.) A rank checks its own results against
 * a reference it computes itself, reports numbers through a pipe, and exits 0 on
 * success; the coordinator reports each rank's exit status through the same pipe.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <cuda_runtime.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "simgpu.h"

#define MAX_RANKS 8
#define WORDS 6
#define API_NS 1000 /* SIMGPU_API_COST_NS of the timing tests; an NCCL call costs one */

struct rank_ctx {
	int rank, nranks;
	ncclUniqueId id;
	uint64_t out[WORDS]; /* reported to the test */
};

struct record {
	int32_t is_status, rank, status;
	uint64_t out[WORDS];
};

struct outcome {
	uint64_t out[MAX_RANKS][WORDS];
	double wall_s;
};

/* Coordinators' pids, whose segment names the last test looks for in /dev/shm. */
static pid_t coordinators[64];
static int coordinator_count;

static double wall_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- Inside a rank ------------------------------------------------------------------------- */

static void check_at(bool ok, const char *what, int line, const struct rank_ctx *ctx)
{
	if (ok)
		return;
	fprintf(stderr, "rank %d: line %d: check failed: %s\n", ctx->rank, line, what);
	_exit(1);
}

static void nccl_ok_at(ncclResult_t res, const char *what, int line, const struct rank_ctx *ctx)
{
	if (res == ncclSuccess)
		return;
	fprintf(stderr, "rank %d: line %d: %s returned %s: %s\n", ctx->rank, line, what,
	        ncclGetErrorString(res), ncclGetLastError(NULL));
	_exit(1);
}

#define CHECK(ctx, cond) check_at((cond), #cond, __LINE__, (ctx))
#define NCCL_OK(ctx, call) nccl_ok_at((call), #call, __LINE__, (ctx))

static ncclComm_t rank_init(struct rank_ctx *ctx)
{
	ncclComm_t comm = NULL;

	CHECK(ctx, cudaSetDevice(ctx->rank) == cudaSuccess);
	NCCL_OK(ctx, ncclCommInitRank(&comm, ctx->nranks, ctx->id, ctx->rank));
	return comm;
}

static void *device_copy(struct rank_ctx *ctx, const void *host, size_t bytes)
{
	void *p = NULL;

	CHECK(ctx, cudaMalloc(&p, bytes) == cudaSuccess);
	CHECK(ctx, cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
	return p;
}

static void host_copy(struct rank_ctx *ctx, void *host, const void *dev, size_t bytes)
{
	CHECK(ctx, cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
}

/* Host clock after everything queued on the legacy stream so far has completed. */
static uint64_t end_time(struct rank_ctx *ctx)
{
	cudaEvent_t ev;
	uint64_t now;

	CHECK(ctx, cudaEventCreate(&ev) == cudaSuccess);
	CHECK(ctx, cudaEventRecord(ev, 0) == cudaSuccess);
	CHECK(ctx, cudaEventSynchronize(ev) == cudaSuccess);
	now = simgpu_now_ns(); /* before cudaEventDestroy, which costs host time too */
	CHECK(ctx, cudaEventDestroy(ev) == cudaSuccess);
	return now;
}

static uint32_t mix(uint32_t x)
{
	x ^= x >> 16;
	x *= 0x7feb352du;
	x ^= x >> 15;
	x *= 0x846ca68bu;
	x ^= x >> 16;
	return x;
}

/* Floats of mixed signs and magnitudes (2^-17 .. 2^13): sums depend on their order. */
static float input_f32(int rank, size_t i)
{
	uint32_t h = mix((uint32_t)rank * 1000003u + (uint32_t)i);
	uint32_t bits = (h & 0x807fffffu) | ((110u + (h >> 24) % 30u) << 23);
	float f;

	memcpy(&f, &bits, sizeof(f));
	return f;
}

/* ---- Running ranks ------------------------------------------------------------------------- */

static void write_record(int fd, const struct record *rec)
{
	if (write(fd, rec, sizeof(*rec)) != (ssize_t)sizeof(*rec))
		_exit(3);
}

static void coordinate(int nranks, const char *const *env, void (*body)(struct rank_ctx *ctx),
                       int fd)
{
	struct rank_ctx ctx = {.nranks = nranks};
	pid_t pids[MAX_RANKS];

	alarm(60);
	for (; env && *env; env++)
		putenv((char *)*env);
	if (ncclGetUniqueId(&ctx.id) != ncclSuccess)
		_exit(2);
	for (int r = 0; r < nranks; r++) {
		pids[r] = fork();
		if (pids[r] < 0)
			_exit(2);
		if (pids[r] == 0) {
			struct record rec = {.rank = r};
			alarm(30); /* a hang fails the test instead of stalling it */
			ctx.rank = r;
			body(&ctx);
			memcpy(rec.out, ctx.out, sizeof(rec.out));
			write_record(fd, &rec);
			_exit(0);
		}
	}
	for (int r = 0; r < nranks; r++) {
		struct record rec = {.is_status = 1, .rank = r, .status = -1};
		int status;
		if (waitpid(pids[r], &status, 0) == pids[r])
			rec.status = status;
		write_record(fd, &rec);
	}
	_exit(0);
}

/* Runs body in nranks processes under env and asserts that every one exited 0. */
static void run_ranks(int nranks, const char *const *env, void (*body)(struct rank_ctx *ctx),
                      struct outcome *res)
{
	bool exited[MAX_RANKS] = {false};
	struct record rec;
	double start = wall_now();
	int fds[2], status;
	pid_t pid;

	memset(res, 0, sizeof(*res));
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		coordinate(nranks, env, body, fds[1]);
	}
	close(fds[1]);
	if (coordinator_count < (int)(sizeof(coordinators) / sizeof(coordinators[0])))
		coordinators[coordinator_count++] = pid;
	while (read(fds[0], &rec, sizeof(rec)) == (ssize_t)sizeof(rec)) {
		assert_true(rec.rank >= 0 && rec.rank < nranks);
		if (!rec.is_status) {
			memcpy(res->out[rec.rank], rec.out, sizeof(rec.out));
			continue;
		}
		if (!WIFEXITED(rec.status) || WEXITSTATUS(rec.status) != 0)
			fail_msg("rank %d: status %#x (see its message above)", rec.rank,
			         rec.status);
		exited[rec.rank] = true;
	}
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	for (int r = 0; r < nranks; r++)
		assert_true(exited[r]);
	res->wall_s = wall_now() - start;
}

/* ---- Collectives ---------------------------------------------------------------------------- */

#define AR_COUNT 4099

static void all_reduce_body(struct rank_ctx *ctx)
{
	static float in[AR_COUNT], out[AR_COUNT], ref[AR_COUNT], reversed[AR_COUNT];
	ncclComm_t comm = rank_init(ctx);
	cudaStream_t s;
	size_t differ = 0;

	for (size_t i = 0; i < AR_COUNT; i++) {
		in[i] = input_f32(ctx->rank, i);
		ref[i] = input_f32(0, i);
		reversed[i] = input_f32(ctx->nranks - 1, i);
		for (int r = 1; r < ctx->nranks; r++) {
			ref[i] += input_f32(r, i);
			reversed[i] += input_f32(ctx->nranks - 1 - r, i);
		}
		differ += memcmp(&ref[i], &reversed[i], sizeof(float)) != 0;
	}
	float *buf = device_copy(ctx, in, sizeof(in));
	float *res = device_copy(ctx, in, sizeof(in));
	CHECK(ctx, cudaStreamCreate(&s) == cudaSuccess);
	NCCL_OK(ctx, ncclAllReduce(buf, res, AR_COUNT, ncclFloat32, ncclSum, comm, s));
	CHECK(ctx, cudaStreamSynchronize(s) == cudaSuccess);
	host_copy(ctx, out, res, sizeof(out));
	CHECK(ctx, memcmp(out, ref, sizeof(out)) == 0);
	/* The inputs make the order visible; otherwise the check above proves little. */
	CHECK(ctx, differ > 0);

	/* In place, on the legacy stream. */
	NCCL_OK(ctx, ncclAllReduce(buf, buf, AR_COUNT, ncclFloat32, ncclSum, comm, 0));
	host_copy(ctx, out, buf, sizeof(out));
	CHECK(ctx, memcmp(out, ref, sizeof(out)) == 0);
	NCCL_OK(ctx, ncclCommDestroy(comm));
}

static void test_all_reduce_sum_float_equals_cpu_fold_in_rank_order(void **state)
{
	struct outcome res;

	run_ranks(4, NULL, all_reduce_body, &res);
}

#define AG_COUNT 1000

static void all_gather_body(struct rank_ctx *ctx)
{
	static int32_t in[AG_COUNT], out[MAX_RANKS * AG_COUNT];
	ncclComm_t comm = rank_init(ctx);
	size_t total = (size_t)ctx->nranks * AG_COUNT;

	for (int i = 0; i < AG_COUNT; i++)
		in[i] = ctx->rank * 100000 + i;
	int32_t *src = device_copy(ctx, in, sizeof(in));
	int32_t *dst = device_copy(ctx, out, total * sizeof(int32_t));
	NCCL_OK(ctx, ncclAllGather(src, dst, AG_COUNT, ncclInt32, comm, 0));
	host_copy(ctx, out, dst, total * sizeof(int32_t));
	for (size_t j = 0; j < total; j++)
		CHECK(ctx, out[j] == (int32_t)(j / AG_COUNT * 100000 + j % AG_COUNT));

	/* In place: this rank's block of the receive buffer is the send buffer. */
	CHECK(ctx, cudaMemset(dst, 0, total * sizeof(int32_t)) == cudaSuccess);
	CHECK(ctx, cudaMemcpy(dst + (size_t)ctx->rank * AG_COUNT, in, sizeof(in),
	                      cudaMemcpyHostToDevice) == cudaSuccess);
	NCCL_OK(ctx, ncclAllGather(dst + (size_t)ctx->rank * AG_COUNT, dst, AG_COUNT, ncclInt32,
	                           comm, 0));
	host_copy(ctx, out, dst, total * sizeof(int32_t));
	for (size_t j = 0; j < total; j++)
		CHECK(ctx, out[j] == (int32_t)(j / AG_COUNT * 100000 + j % AG_COUNT));
	NCCL_OK(ctx, ncclCommDestroy(comm));
}

static void test_all_gather_concatenates_blocks_in_rank_order(void **state)
{
	struct outcome res;

	run_ranks(4, NULL, all_gather_body, &res);
}

#define RS_COUNT 777

static void reduce_scatter_body(struct rank_ctx *ctx)
{
	static int32_t in[MAX_RANKS * RS_COUNT], out[RS_COUNT];
	ncclComm_t comm = rank_init(ctx);
	size_t total = (size_t)ctx->nranks * RS_COUNT;

	for (size_t j = 0; j < total; j++)
		in[j] = ctx->rank + (int32_t)j * 3;
	int32_t *src = device_copy(ctx, in, total * sizeof(int32_t));
	int32_t *dst = device_copy(ctx, out, sizeof(out));
	NCCL_OK(ctx, ncclReduceScatter(src, dst, RS_COUNT, ncclInt32, ncclSum, comm, 0));
	host_copy(ctx, out, dst, sizeof(out));
	for (int i = 0; i < RS_COUNT; i++) {
		int32_t j = ctx->rank * RS_COUNT + i, want = 0;
		for (int r = 0; r < ctx->nranks; r++)
			want += r + j * 3;
		CHECK(ctx, out[i] == want);
	}
	NCCL_OK(ctx, ncclCommDestroy(comm));
}

static void test_reduce_scatter_gives_each_rank_its_block_of_the_sum(void **state)
{
	struct outcome res;

	run_ranks(4, NULL, reduce_scatter_body, &res);
}

#define BC_COUNT 513
#define BC_ROOT 2

static void broadcast_body(struct rank_ctx *ctx)
{
	static double in[BC_COUNT], out[BC_COUNT];
	ncclComm_t comm = rank_init(ctx);

	for (int i = 0; i < BC_COUNT; i++)
		in[i] = ctx->rank * 1000.0 + i * 0.5;
	double *src = device_copy(ctx, in, sizeof(in));
	double *dst = device_copy(ctx, in, sizeof(in));
	NCCL_OK(ctx, ncclBroadcast(src, dst, BC_COUNT, ncclFloat64, BC_ROOT, comm, 0));
	host_copy(ctx, out, dst, sizeof(out));
	for (int i = 0; i < BC_COUNT; i++)
		CHECK(ctx, out[i] == BC_ROOT * 1000.0 + i * 0.5);
	NCCL_OK(ctx, ncclCommDestroy(comm));
}

static void test_broadcast_copies_the_root_buffer_to_every_rank(void **state)
{
	struct outcome res;

	run_ranks(4, NULL, broadcast_body, &res);
}

#define RD_COUNT 300
#define RD_ROOT 1

static void reduce_body(struct rank_ctx *ctx)
{
	static int64_t in[RD_COUNT], out[RD_COUNT], sentinel[RD_COUNT];
	ncclComm_t comm = rank_init(ctx);

	for (int i = 0; i < RD_COUNT; i++) {
		in[i] = (int64_t)(ctx->rank + 2) * (i + 1);
		sentinel[i] = -7;
	}
	int64_t *src = device_copy(ctx, in, sizeof(in));
	int64_t *dst = device_copy(ctx, sentinel, sizeof(sentinel));
	NCCL_OK(ctx, ncclReduce(src, dst, RD_COUNT, ncclInt64, ncclMax, RD_ROOT, comm, 0));
	host_copy(ctx, out, dst, sizeof(out));
	for (int i = 0; i < RD_COUNT; i++) {
		int64_t want = ctx->rank == RD_ROOT ? (int64_t)(ctx->nranks + 1) * (i + 1) : -7;
		CHECK(ctx, out[i] == want);
	}
	NCCL_OK(ctx, ncclCommDestroy(comm));
}

static void test_reduce_leaves_the_result_on_the_root_only(void **state)
{
	struct outcome res;

	run_ranks(4, NULL, reduce_body, &res);
}

/* ---- Types and operators ----------------------------------------------------------------------
 */

static uint16_t half_from_int(int v)
{
	unsigned int m = (unsigned int)(v < 0 ? -v : v), e = 0;

	if (!m)
		return 0;
	while ((m >> e) > 1)
		e++;
	m = e <= 10 ? m << (10 - e) : m >> (e - 10); /* exact for the integers used here */
	return (uint16_t)((v < 0 ? 0x8000u : 0) | ((e + 15) << 10) | (m & 0x3ffu));
}

static double half_value(uint16_t h)
{
	int exp = (h >> 10) & 0x1f;
	double mant = (double)(h & 0x3ff) / 1024.0, v;

	v = exp ? (1.0 + mant) : mant;
	for (int e = exp ? exp : 1; e < 15; e++)
		v /= 2;
	for (int e = 15; e < exp; e++)
		v *= 2;
	return h & 0x8000 ? -v : v;
}

static uint16_t bf16_from_float(float f)
{
	uint32_t bits;

	memcpy(&bits, &f, sizeof(bits));
	return (uint16_t)(bits >> 16); /* exact for the small integers used here */
}

static double bf16_value(uint16_t h)
{
	uint32_t bits = (uint32_t)h << 16;
	float f;

	memcpy(&f, &bits, sizeof(f));
	return f;
}

static const ncclDataType_t all_types[] = {ncclInt8,    ncclUint8,   ncclInt32,   ncclUint32,
                                           ncclInt64,   ncclUint64,  ncclFloat16, ncclFloat32,
                                           ncclFloat64, ncclBfloat16};
static const ncclRedOp_t all_ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};

static bool is_unsigned(ncclDataType_t t)
{
	return t == ncclUint8 || t == ncclUint32 || t == ncclUint64;
}

static bool is_float(ncclDataType_t t)
{
	return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16;
}

static size_t type_size(ncclDataType_t t)
{
	static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};

	return sizes[t];
}

/* Small integers, exact in every type: -3..3 (0..6 for unsigned types). */
static int small_input(ncclDataType_t t, int rank, size_t i)
{
	int v = (int)((i * 3 + (size_t)rank * 5) % 7);

	return is_unsigned(t) ? v : v - 3;
}

static void store_value(void *p, size_t i, ncclDataType_t t, int v)
{
	switch (t) {
	case ncclInt8:
	case ncclUint8:
		((uint8_t *)p)[i] = (uint8_t)v;
		break;
	case ncclInt32:
	case ncclUint32:
		((uint32_t *)p)[i] = (uint32_t)v;
		break;
	case ncclInt64:
	case ncclUint64:
		((uint64_t *)p)[i] = (uint64_t)(int64_t)v;
		break;
	case ncclFloat16:
		((uint16_t *)p)[i] = half_from_int(v);
		break;
	case ncclFloat32:
		((float *)p)[i] = (float)v;
		break;
	case ncclFloat64:
		((double *)p)[i] = v;
		break;
	default:
		((uint16_t *)p)[i] = bf16_from_float((float)v);
		break;
	}
}

static double load_value(const void *p, size_t i, ncclDataType_t t)
{
	switch (t) {
	case ncclInt8:
		return ((const int8_t *)p)[i];
	case ncclUint8:
		return ((const uint8_t *)p)[i];
	case ncclInt32:
		return ((const int32_t *)p)[i];
	case ncclUint32:
		return ((const uint32_t *)p)[i];
	case ncclInt64:
		return (double)((const int64_t *)p)[i];
	case ncclUint64:
		return (double)((const uint64_t *)p)[i];
	case ncclFloat16:
		return half_value(((const uint16_t *)p)[i]);
	case ncclFloat32:
		return ((const float *)p)[i];
	case ncclFloat64:
		return ((const double *)p)[i];
	default:
		return bf16_value(((const uint16_t *)p)[i]);
	}
}

/* The reference: exact integer arithmetic, wrapped to the type; avg is sum / n. */
static double expected_value(ncclDataType_t t, ncclRedOp_t op, int nranks, size_t i)
{
	int64_t acc = small_input(t, 0, i);
	uint8_t buf[8];

	for (int r = 1; r < nranks; r++) {
		int64_t x = small_input(t, r, i);
		if (op == ncclProd)
			acc *= x;
		else if (op == ncclMax)
			acc = x > acc ? x : acc;
		else if (op == ncclMin)
			acc = x < acc ? x : acc;
		else
			acc += x;
	}
	if (op == ncclAvg && is_float(t))
		return (double)acc / nranks;
	if (op == ncclAvg)
		acc /= nranks;
	if (is_float(t))
		return (double)acc;
	store_value(buf, 0, t, (int)acc); /* wraps to the type's width */
	return load_value(buf, 0, t);
}

#define TY_COUNT 37

static void types_body(struct rank_ctx *ctx)
{
	static uint64_t in[TY_COUNT], out[TY_COUNT]; /* room for TY_COUNT of any type */
	ncclComm_t comm = rank_init(ctx);
	void *src = NULL, *dst = NULL;

	CHECK(ctx, cudaMalloc(&src, sizeof(in)) == cudaSuccess);
	CHECK(ctx, cudaMalloc(&dst, sizeof(out)) == cudaSuccess);
	for (size_t t = 0; t < sizeof(all_types) / sizeof(all_types[0]); t++) {
		ncclDataType_t type = all_types[t];
		for (size_t i = 0; i < TY_COUNT; i++)
			store_value(in, i, type, small_input(type, ctx->rank, i));
		CHECK(ctx, cudaMemcpy(src, in, TY_COUNT * type_size(type),
		                      cudaMemcpyHostToDevice) == cudaSuccess);
		for (size_t o = 0; o < sizeof(all_ops) / sizeof(all_ops[0]); o++) {
			NCCL_OK(ctx, ncclAllReduce(src, dst, TY_COUNT, type, all_ops[o], comm, 0));
			host_copy(ctx, out, dst, TY_COUNT * type_size(type));
			for (size_t i = 0; i < TY_COUNT; i++) {
				double want = expected_value(type, all_ops[o], ctx->nranks, i);
				if (load_value(out, i, type) != want)
					fprintf(stderr, "type %d op %d element %zu: %g, want %g\n",
					        (int)type, (int)all_ops[o], i,
					        load_value(out, i, type), want);
				CHECK(ctx, load_value(out, i, type) == want);
			}
		}
	}
	NCCL_OK(ctx, ncclCommDestroy(comm));
}

static void test_all_reduce_supports_every_type_and_operator(void **state)
{
	struct outcome res;

	run_ranks(4, NULL, types_body, &res);
}

/* 256 + 1 and 258 + 1 in bfloat16 (spacing 2), 2048 + 1 and 2050 + 1 in float16: ties. */
static void rounding_body(struct rank_ctx *ctx)
{
	uint16_t bf[2], h[2];
	ncclComm_t comm = rank_init(ctx);

	bf[0] = bf16_from_float(ctx->rank ? 1.0f : 256.0f);
	bf[1] = bf16_from_float(ctx->rank ? 1.0f : 258.0f);
	h[0] = half_from_int(ctx->rank ? 1 : 2048);
	h[1] = half_from_int(ctx->rank ? 1 : 2050);
	uint16_t *dbf = device_copy(ctx, bf, sizeof(bf));
	uint16_t *dh = device_copy(ctx, h, sizeof(h));
	NCCL_OK(ctx, ncclAllReduce(dbf, dbf, 2, ncclBfloat16, ncclSum, comm, 0));
	NCCL_OK(ctx, ncclAllReduce(dh, dh, 2, ncclFloat16, ncclSum, comm, 0));
	host_copy(ctx, bf, dbf, sizeof(bf));
	host_copy(ctx, h, dh, sizeof(h));
	CHECK(ctx, bf16_value(bf[0]) == 256.0 && bf16_value(bf[1]) == 260.0);
	CHECK(ctx, half_value(h[0]) == 2048.0 && half_value(h[1]) == 2052.0);
	NCCL_OK(ctx, ncclCommDestroy(comm));
}

static void test_16bit_float_sums_round_ties_to_even(void **state)
{
	struct outcome res;

	run_ranks(2, NULL, rounding_body, &res);
}

/* ---- Send and receive --------------------------------------------------------------------- */

#define P2P_COUNT 2000

static void ring_body(struct rank_ctx *ctx)
{
	static float a[P2P_COUNT], b[P2P_COUNT], got[P2P_COUNT];
	ncclComm_t comm = rank_init(ctx);
	int next = (ctx->rank + 1) % ctx->nranks,
	    prev = (ctx->rank + ctx->nranks - 1) % ctx->nranks;

	for (int i = 0; i < P2P_COUNT; i++) {
		a[i] = (float)(ctx->rank * 10000 + i);
		b[i] = -a[i];
	}
	float *sa = device_copy(ctx, a, sizeof(a)), *sb = device_copy(ctx, b, sizeof(b));
	float *ra = device_copy(ctx, got, sizeof(got)), *rb = device_copy(ctx, got, sizeof(got));
	/* Two messages each way per pair, all sends first: only a group makes this work. */
	NCCL_OK(ctx, ncclGroupStart());
	NCCL_OK(ctx, ncclSend(sa, P2P_COUNT, ncclFloat32, next, comm, 0));
	NCCL_OK(ctx, ncclSend(sb, P2P_COUNT, ncclFloat32, next, comm, 0));
	NCCL_OK(ctx, ncclRecv(ra, P2P_COUNT, ncclFloat32, prev, comm, 0));
	NCCL_OK(ctx, ncclRecv(rb, P2P_COUNT, ncclFloat32, prev, comm, 0));
	NCCL_OK(ctx, ncclGroupEnd());
	host_copy(ctx, got, ra, sizeof(got));
	for (int i = 0; i < P2P_COUNT; i++)
		CHECK(ctx, got[i] == (float)(prev * 10000 + i));
	host_copy(ctx, got, rb, sizeof(got));
	for (int i = 0; i < P2P_COUNT; i++)
		CHECK(ctx, got[i] == -(float)(prev * 10000 + i));
	NCCL_OK(ctx, ncclCommDestroy(comm));
}

static void test_send_recv_ring_in_one_group_delivers_in_order(void **state)
{
	struct outcome res;

	run_ranks(4, NULL, ring_body, &res);
}

static void p2p_mismatch_body(struct rank_ctx *ctx)
{
	float host[100] = {0};
	ncclComm_t comm = rank_init(ctx);
	float *buf = device_copy(ctx, host, sizeof(host));
	ncclResult_t res, async;

	if (ctx->rank == 0)
		res = ncclSend(buf, 100, ncclFloat32, 1, comm, 0);
	else
		res = ncclRecv(buf, 50, ncclFloat32, 0, comm, 0);
	CHECK(ctx, res == ncclInvalidUsage);
	CHECK(ctx, strstr(ncclGetLastError(comm), "carries 400 bytes but the matching ncclRecv "
	                                          "expects 200 bytes") != NULL);
	NCCL_OK(ctx, ncclCommGetAsyncError(comm, &async));
	CHECK(ctx, async == ncclInvalidUsage);
	NCCL_OK(ctx, ncclCommDestroy(comm));
}

static void test_send_recv_size_mismatch_fails_on_both_ends(void **state)
{
	static const char *const env[] = {"SIMGPU_NCCL_TIMEOUT_MS=5000", NULL};
	struct outcome res;

	run_ranks(2, env, p2p_mismatch_body, &res);
	assert_true(res.wall_s < 4.0);
}

/* ---- Virtual time ------------------------------------------------------------------------------
 */

static const char *const timing_env[] = {"SIMGPU_NET_BW=100G", "SIMGPU_NET_LATENCY_NS=7000",
                                         "SIMGPU_API_COST_NS=1000", NULL};
#define NET_LATENCY 7000ull
#define TIMING_COUNT 1000000 /* floats: 4 MB */

/* Arrival skew: rank r spends r * 5 extra runtime calls before the operation (queries of
 * an idle stream: they cost host time, unlike free lookups such as cudaGetDevice). */
static void skew(struct rank_ctx *ctx)
{
	CHECK(ctx, cudaDeviceSynchronize() == cudaSuccess);
	for (int k = 0; k < ctx->rank * 5; k++)
		CHECK(ctx, cudaStreamQuery(0) == cudaSuccess);
}

/* out[0], out[1]: host clock before the call and at its completion; out[2], out[3] the
 * same for a second all-reduce, after a simgpu_nccl_next_virtual_bytes hint. */
static void timing_body(struct rank_ctx *ctx)
{
	static float host[TIMING_COUNT];
	ncclComm_t comm = rank_init(ctx);
	float *buf = device_copy(ctx, host, sizeof(host));

	skew(ctx);
	ctx->out[0] = simgpu_now_ns();
	NCCL_OK(ctx, ncclAllReduce(buf, buf, TIMING_COUNT, ncclFloat32, ncclSum, comm, 0));
	ctx->out[1] = end_time(ctx);

	skew(ctx);
	simgpu_nccl_next_virtual_bytes(1000000000); /* 1 GB */
	ctx->out[2] = simgpu_now_ns();
	NCCL_OK(ctx, ncclAllReduce(buf, buf, 1000, ncclFloat32, ncclSum, comm, 0));
	ctx->out[3] = end_time(ctx);

	/* The hint was used up: back to the real 4000 bytes. */
	skew(ctx);
	ctx->out[4] = simgpu_now_ns();
	NCCL_OK(ctx, ncclAllReduce(buf, buf, 1000, ncclFloat32, ncclSum, comm, 0));
	ctx->out[5] = end_time(ctx);
	NCCL_OK(ctx, ncclCommDestroy(comm));
}

/* Every rank ends at the latest arrival (the host clock of the call, plus the call's own
 * cost) + cost_ns: alpha + factor * bytes / bw, to the nanosecond. */
static void check_end_times(const struct outcome *res, int nranks, int word, uint64_t cost_ns)
{
	uint64_t arrival = 0;

	for (int r = 0; r < nranks; r++)
		if (res->out[r][word] + API_NS > arrival)
			arrival = res->out[r][word] + API_NS;
	for (int r = 0; r < nranks; r++)
		assert_int_equal(res->out[r][word + 1], arrival + cost_ns);
}

static void test_all_reduce_ends_at_alpha_beta_time_on_every_rank(void **state)
{
	struct outcome res;

	run_ranks(4, timing_env, timing_body, &res);
	/* The skew made the ranks arrive at different times. */
	assert_true(res.out[3][0] > res.out[0][0]);
	/* 2 * 3/4 * 4e6 B / 100 GB/s = 60000 ns */
	check_end_times(&res, 4, 0, NET_LATENCY + 60000);
}

static void test_virtual_bytes_hint_sets_the_cost_of_the_next_call_only(void **state)
{
	struct outcome res;

	run_ranks(4, timing_env, timing_body, &res);
	/* 1.5 * 1e9 B / 100 GB/s = 15 ms; then 1.5 * 4000 B = 60 ns */
	check_end_times(&res, 4, 2, NET_LATENCY + 15000000);
	check_end_times(&res, 4, 4, NET_LATENCY + 60);
}

#define P2P_TIMING_COUNT 250000 /* 1 MB: 10000 ns at 100 GB/s */

static void p2p_timing_body(struct rank_ctx *ctx)
{
	static float host[P2P_TIMING_COUNT];
	ncclComm_t comm = rank_init(ctx);
	float *buf = device_copy(ctx, host, sizeof(host));

	skew(ctx);
	ctx->out[0] = simgpu_now_ns();
	if (ctx->rank == 0)
		NCCL_OK(ctx, ncclSend(buf, P2P_TIMING_COUNT, ncclFloat32, 1, comm, 0));
	else
		NCCL_OK(ctx, ncclRecv(buf, P2P_TIMING_COUNT, ncclFloat32, 0, comm, 0));
	ctx->out[1] = end_time(ctx);
	NCCL_OK(ctx, ncclCommDestroy(comm));
}

static void test_send_and_recv_end_at_the_same_virtual_time(void **state)
{
	struct outcome res;

	run_ranks(2, timing_env, p2p_timing_body, &res);
	assert_true(res.out[1][0] > res.out[0][0]);
	check_end_times(&res, 2, 0, NET_LATENCY + 10000);
}

/* ---- Failures
 * ------------------------------------------------------------------------------------- */

static void mismatch_body(struct rank_ctx *ctx)
{
	static float host[1024];
	ncclComm_t comm = rank_init(ctx);
	float *buf = device_copy(ctx, host, sizeof(host));
	size_t count = ctx->rank == 1 ? 512 : 1024;
	double start = wall_now();
	ncclResult_t async;

	CHECK(ctx,
	      ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, 0) == ncclInvalidUsage);
	CHECK(ctx, wall_now() - start < 1.0); /* detected, not timed out */
	CHECK(ctx, strstr(ncclGetLastError(comm),
	                  "collective #1 mismatch: rank 0 ncclAllReduce(count=1024, float32, sum), "
	                  "rank 1 ncclAllReduce(count=512, float32, sum), rank 2 "
	                  "ncclAllReduce(count=1024, float32, sum)") != NULL);
	NCCL_OK(ctx, ncclCommGetAsyncError(comm, &async));
	CHECK(ctx, async == ncclInvalidUsage);
	/* The communicator stays failed. */
	CHECK(ctx,
	      ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, comm, 0) == ncclInvalidUsage);
	NCCL_OK(ctx, ncclCommDestroy(comm));
}

static void test_mismatched_collective_fails_on_every_rank_quickly(void **state)
{
	static const char *const env[] = {"SIMGPU_NCCL_TIMEOUT_MS=2000", NULL};
	struct outcome res;

	run_ranks(3, env, mismatch_body, &res);
	assert_true(res.wall_s < 10.0);
}

/* Rank 2 joins, then leaves without calling the all-reduce. */
static void missing_rank_body(struct rank_ctx *ctx)
{
	static float host[64];
	ncclComm_t comm = rank_init(ctx);
	float *buf = device_copy(ctx, host, sizeof(host));
	double start = wall_now(), took;
	ncclResult_t async;

	if (ctx->rank == 2) {
		NCCL_OK(ctx, ncclCommDestroy(comm));
		return;
	}
	CHECK(ctx, ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, comm, 0) == ncclRemoteError);
	took = wall_now() - start;
	CHECK(ctx, took > 0.9 && took < 5.0);
	CHECK(ctx, strstr(ncclGetLastError(comm), "rank 2 did not call it") != NULL);
	NCCL_OK(ctx, ncclCommGetAsyncError(comm, &async));
	CHECK(ctx, async == ncclRemoteError);
	NCCL_OK(ctx, ncclCommDestroy(comm));
}

static void test_missing_rank_fails_the_others_with_remote_error(void **state)
{
	static const char *const env[] = {"SIMGPU_NCCL_TIMEOUT_MS=1000", NULL};
	struct outcome res;

	run_ranks(3, env, missing_rank_body, &res);
	assert_true(res.wall_s < 10.0);
}

/* Rank 2 never calls ncclCommInitRank. */
static void missing_init_body(struct rank_ctx *ctx)
{
	ncclComm_t comm = NULL;

	if (ctx->rank == 2)
		return;
	CHECK(ctx, cudaSetDevice(ctx->rank) == cudaSuccess);
	CHECK(ctx, ncclCommInitRank(&comm, ctx->nranks, ctx->id, ctx->rank) == ncclRemoteError);
	CHECK(ctx, comm == NULL);
	CHECK(ctx, strstr(ncclGetLastError(NULL), "rank 2 did not join") != NULL);
}

static void test_init_fails_with_remote_error_when_a_rank_never_joins(void **state)
{
	static const char *const env[] = {"SIMGPU_NCCL_TIMEOUT_MS=500", NULL};
	struct outcome res;

	run_ranks(3, env, missing_init_body, &res);
	assert_true(res.wall_s < 10.0);
}

static void abort_body(struct rank_ctx *ctx)
{
	static float host[64];
	ncclComm_t comm = rank_init(ctx);
	float *buf = device_copy(ctx, host, sizeof(host));
	double start = wall_now();

	if (ctx->rank == 1) {
		NCCL_OK(ctx, ncclCommAbort(comm));
		return;
	}
	CHECK(ctx, ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, comm, 0) == ncclRemoteError);
	CHECK(ctx, wall_now() - start < 2.0);
	CHECK(ctx, strstr(ncclGetLastError(comm), "rank 1 called ncclCommAbort") != NULL);
	NCCL_OK(ctx, ncclCommDestroy(comm));
}

static void test_abort_makes_waiting_peers_fail_before_their_timeout(void **state)
{
	static const char *const env[] = {"SIMGPU_NCCL_TIMEOUT_MS=8000", NULL};
	struct outcome res;

	run_ranks(2, env, abort_body, &res);
	assert_true(res.wall_s < 4.0);
}

/* ---- Communicators and the API ------------------------------------------------------------------
 */

static void all_reduce_one(struct rank_ctx *ctx, ncclComm_t comm, int32_t value, int32_t want)
{
	int32_t *buf = device_copy(ctx, &value, sizeof(value));

	NCCL_OK(ctx, ncclAllReduce(buf, buf, 1, ncclInt32, ncclSum, comm, 0));
	host_copy(ctx, &value, buf, sizeof(value));
	CHECK(ctx, value == want);
	CHECK(ctx, cudaFree(buf) == cudaSuccess);
}

static void split_body(struct rank_ctx *ctx)
{
	ncclComm_t comm = rank_init(ctx), half = NULL, three = NULL;
	int count = 0, rank = -1, half_no = ctx->rank / 2;

	/* Halves {0, 1} and {2, 3}; keys reverse the order inside each. */
	NCCL_OK(ctx, ncclCommSplit(comm, half_no, -ctx->rank, &half, NULL));
	CHECK(ctx, half != NULL);
	NCCL_OK(ctx, ncclCommCount(half, &count));
	NCCL_OK(ctx, ncclCommUserRank(half, &rank));
	CHECK(ctx, count == 2 && rank == 1 - ctx->rank % 2);
	all_reduce_one(ctx, half, ctx->rank + 1, half_no ? 3 + 4 : 1 + 2);

	/* Rank 3 opts out; the others form a communicator of three. */
	NCCL_OK(ctx, ncclCommSplit(comm, ctx->rank == 3 ? NCCL_SPLIT_NOCOLOR : 0, 0, &three, NULL));
	CHECK(ctx, (three == NULL) == (ctx->rank == 3));
	if (three) {
		NCCL_OK(ctx, ncclCommCount(three, &count));
		CHECK(ctx, count == 3);
		all_reduce_one(ctx, three, ctx->rank + 1, 1 + 2 + 3);
	}
	/* The parent still works after its splits. */
	all_reduce_one(ctx, comm, ctx->rank + 1, 1 + 2 + 3 + 4);
	NCCL_OK(ctx, ncclCommDestroy(three));
	NCCL_OK(ctx, ncclCommFinalize(half));
	NCCL_OK(ctx, ncclCommDestroy(half));
	NCCL_OK(ctx, ncclCommDestroy(comm));
}

static void test_split_into_halves_then_all_reduce_in_each(void **state)
{
	struct outcome res;

	run_ranks(4, NULL, split_body, &res);
}

static void api_body(struct rank_ctx *ctx)
{
	static float host[2048];
	ncclComm_t comm = NULL;
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	int version = 0, value = -1;
	ncclResult_t async = ncclInternalError;
	uint64_t calls;

	config.commName = "api-test";
	CHECK(ctx, cudaSetDevice(ctx->rank + 1) == cudaSuccess);
	NCCL_OK(ctx, ncclCommInitRankConfig(&comm, ctx->nranks, ctx->id, ctx->rank, &config));
	NCCL_OK(ctx, ncclGetVersion(&version));
	CHECK(ctx, version == NCCL_VERSION_CODE);
	NCCL_OK(ctx, ncclCommCuDevice(comm, &value));
	CHECK(ctx, value == ctx->rank + 1);
	CHECK(ctx, strcmp(ncclGetErrorString(ncclRemoteError),
	                  "remote process exited or there was a network error") == 0);
	CHECK(ctx, ncclGroupEnd() == ncclInvalidUsage);

	float *buf = device_copy(ctx, host, sizeof(host));
	/* 8 KiB do not fit SIMGPU_NCCL_BUFFER=4K: refused before anything is exchanged. */
	CHECK(ctx,
	      ncclAllReduce(buf, buf, 2048, ncclFloat32, ncclSum, comm, 0) == ncclInvalidArgument);
	CHECK(ctx, strstr(ncclGetLastError(comm), "SIMGPU_NCCL_BUFFER") != NULL);
	CHECK(ctx,
	      ncclAllReduce(buf, buf, 16, ncclFloat8e4m3, ncclSum, comm, 0) == ncclInvalidArgument);
	CHECK(ctx,
	      ncclAllReduce(host, host, 16, ncclFloat32, ncclSum, comm, 0) == ncclInvalidArgument);
	CHECK(ctx, strstr(ncclGetLastError(comm), "not accessible device memory") != NULL);

	/* pncclX does the work, ncclX is its alias: one call counted once, under ncclX. */
	calls = simgpu_counter("ncclAllReduce");
	NCCL_OK(ctx, pncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, 0));
	NCCL_OK(ctx, ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, 0));
	CHECK(ctx, simgpu_counter("ncclAllReduce") == calls + 2);
	NCCL_OK(ctx, ncclCommGetAsyncError(comm, &async));
	CHECK(ctx, async == ncclSuccess);
	NCCL_OK(ctx, ncclCommDestroy(comm));
}

static void test_api_reports_version_device_and_argument_errors(void **state)
{
	static const char *const env[] = {"SIMGPU_NCCL_BUFFER=4K", NULL};
	struct outcome res;

	run_ranks(2, env, api_body, &res);
}

/* Runs last: every segment of every test was unlinked, on success and on failure. */
static void test_no_segments_are_left_in_dev_shm(void **state)
{
	char prefix[64];
	struct dirent *e;
	DIR *dir = opendir("/dev/shm");
	int left = 0;

	assert_non_null(dir);
	assert_true(coordinator_count > 0);
	while ((e = readdir(dir))) {
		for (int i = 0; i < coordinator_count; i++) {
			snprintf(prefix, sizeof(prefix), "simgpu-nccl-%d-", (int)coordinators[i]);
			if (!strncmp(e->d_name, prefix, strlen(prefix))) {
				fprintf(stderr, "left behind: /dev/shm/%s\n", e->d_name);
				left++;
			}
		}
	}
	closedir(dir);
	assert_int_equal(left, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_all_reduce_sum_float_equals_cpu_fold_in_rank_order),
	        cmocka_unit_test(test_all_gather_concatenates_blocks_in_rank_order),
	        cmocka_unit_test(test_reduce_scatter_gives_each_rank_its_block_of_the_sum),
	        cmocka_unit_test(test_broadcast_copies_the_root_buffer_to_every_rank),
	        cmocka_unit_test(test_reduce_leaves_the_result_on_the_root_only),
	        cmocka_unit_test(test_all_reduce_supports_every_type_and_operator),
	        cmocka_unit_test(test_16bit_float_sums_round_ties_to_even),
	        cmocka_unit_test(test_send_recv_ring_in_one_group_delivers_in_order),
	        cmocka_unit_test(test_send_recv_size_mismatch_fails_on_both_ends),
	        cmocka_unit_test(test_all_reduce_ends_at_alpha_beta_time_on_every_rank),
	        cmocka_unit_test(test_virtual_bytes_hint_sets_the_cost_of_the_next_call_only),
	        cmocka_unit_test(test_send_and_recv_end_at_the_same_virtual_time),
	        cmocka_unit_test(test_mismatched_collective_fails_on_every_rank_quickly),
	        cmocka_unit_test(test_missing_rank_fails_the_others_with_remote_error),
	        cmocka_unit_test(test_init_fails_with_remote_error_when_a_rank_never_joins),
	        cmocka_unit_test(test_abort_makes_waiting_peers_fail_before_their_timeout),
	        cmocka_unit_test(test_split_into_halves_then_all_reduce_in_each),
	        cmocka_unit_test(test_api_reports_version_device_and_argument_errors),
	        cmocka_unit_test(test_no_segments_are_left_in_dev_shm),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
