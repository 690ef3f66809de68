/* SPDX-License-Identifier: Apache-2.0 */
/* Queued work: the kernel registry, launches, copies, memsets and host functions. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define KERNEL_MAGIC 0x6B65726Eu

struct simgpu_kernel {
	uint32_t magic;
	struct simgpu_kernel_desc desc;
	size_t offsets[SIMGPU_MAX_PARAMS];
	size_t param_bytes;
	/* NULL for a registered kernel; for a loaded image's instance, the registered kernel
	 * it runs (simgpu_kernel_instance). */
	const struct simgpu_kernel *origin;
	struct simgpu_kernel *next;
};

/* Registered kernels and images' instances of them; few (tens, times the images loaded), so
 * a list searched linearly. Never freed. */
static struct simgpu_kernel *kernels;

SIMGPU_EXPORT const void *simgpu_kernel_register(const struct simgpu_kernel_desc *desc)
{
	struct simgpu_kernel *k;
	size_t offset = 0;

	if (!desc || !desc->name || !desc->body || desc->num_params > SIMGPU_MAX_PARAMS)
		return NULL;
	k = calloc(1, sizeof(*k));
	if (!k)
		return NULL;
	k->magic = KERNEL_MAGIC;
	k->desc = *desc;
	for (unsigned int i = 0; i < desc->num_params; i++) {
		size_t size = desc->param_sizes[i];
		size_t align = desc->param_aligns[i] ? desc->param_aligns[i] : size < 8 ? size : 8;
		if (!size || !align || (align & (align - 1))) {
			free(k);
			return NULL;
		}
		offset = (offset + align - 1) / align * align;
		k->offsets[i] = offset;
		offset += size;
	}
	k->param_bytes = offset;
	simgpu_core_lock();
	k->next = kernels;
	kernels = k;
	simgpu_core_unlock();
	return k;
}

SIMGPU_EXPORT struct simgpu_kernel *simgpu_kernel_instance(const struct simgpu_kernel *kernel)
{
	struct simgpu_kernel *k = malloc(sizeof(*k));

	if (!k)
		return NULL;
	*k = *kernel;
	k->origin = kernel->origin ? kernel->origin : kernel;
	simgpu_core_lock();
	k->next = kernels;
	kernels = k;
	simgpu_core_unlock();
	return k;
}

SIMGPU_EXPORT struct simgpu_kernel *simgpu_kernel_find(const void *handle)
{
	struct simgpu_kernel *found = NULL;

	simgpu_core_lock();
	for (struct simgpu_kernel *k = kernels; k && !found; k = k->next)
		if (k == handle)
			found = k;
	simgpu_core_unlock();
	return found;
}

SIMGPU_EXPORT struct simgpu_kernel *simgpu_kernel_find_by_name(const char *name)
{
	struct simgpu_kernel *found = NULL;

	if (!name)
		return NULL;
	simgpu_core_lock();
	/* The list starts with the newest registration. */
	for (struct simgpu_kernel *k = kernels; k && !found; k = k->next)
		if (!k->origin && !strcmp(k->desc.name, name))
			found = k;
	simgpu_core_unlock();
	return found;
}

SIMGPU_EXPORT const char *simgpu_kernel_name(const struct simgpu_kernel *kernel)
{
	return kernel->desc.name;
}

SIMGPU_EXPORT CUresult simgpu_kernel_param_info(const struct simgpu_kernel *kernel, size_t index,
                                                size_t *offset, size_t *size)
{
	if (index >= kernel->desc.num_params)
		return CUDA_ERROR_INVALID_VALUE;
	if (offset)
		*offset = kernel->offsets[index];
	if (size)
		*size = kernel->desc.param_sizes[index];
	return CUDA_SUCCESS;
}

/* ---- Launch ----------------------------------------------------------------------------- */

/* A launch as queued: its own copy of the parameter bytes, and pointers into it. */
struct launch_effect {
	const struct simgpu_kernel *kernel;
	struct simgpu_launch_dims dims;
	void *args[SIMGPU_MAX_PARAMS];
	unsigned char bytes[];
};

static void run_kernel(void *arg)
{
	struct launch_effect *l = arg;

	l->kernel->desc.body(&l->dims, l->args);
}

/* A byte copy of a launch (a graph replay's): its args point into the copy's bytes. */
static void relocate_launch(void *copy)
{
	struct launch_effect *l = copy;

	for (unsigned int i = 0; i < l->kernel->desc.num_params; i++)
		l->args[i] = l->bytes + l->kernel->offsets[i];
}

/* Finds the packed buffer of an `extra` array; returns NULL if it is malformed. */
static const void *extra_buffer(void **extra, size_t *size)
{
	const void *buffer = NULL;
	bool sized = false;

	for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
		if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
			buffer = extra[i + 1];
		} else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
			*size = *(const size_t *)extra[i + 1];
			sized = true;
		} else {
			return NULL;
		}
	}
	return sized ? buffer : NULL;
}

/* splitmix64's finaliser: a well-mixed 64-bit hash of x. */
static uint64_t mix64(uint64_t x)
{
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/*
 * cost_ns with SIMGPU_JITTER_PCT's noise: a factor within 1 +- pct/100, drawn from the
 * device and the process's launch count, so a run repeats exactly while the ranks, each
 * on its own device, time the same kernels differently, as real GPUs do.
 */
static uint64_t jittered_locked(uint64_t cost_ns, int device)
{
	uint64_t pct = simgpu.config.jitter_pct;
	uint64_t draw; /* 0 .. 2000: -1.000 .. +1.000 */

	if (!pct)
		return cost_ns;
	draw = mix64(((uint64_t)(unsigned)device << 40) ^ ++simgpu.launches) % 2001;
	return (uint64_t)((unsigned __int128)cost_ns * (100000 + pct * draw - pct * 1000) / 100000);
}

SIMGPU_EXPORT CUresult simgpu_launch(struct simgpu_kernel *kernel,
                                     const struct simgpu_launch_dims *dims,
                                     struct CUstream_st *stream, void **params, void **extra,
                                     int device)
{
	const struct simgpu_kernel_desc *d = &kernel->desc;
	struct launch_effect *l;
	struct simgpu_op op;
	CUresult status;

	for (int i = 0; i < 3; i++)
		if (!dims->grid[i] || !dims->block[i])
			return CUDA_ERROR_INVALID_VALUE;
	if (dims->block[0] * dims->block[1] * dims->block[2] > 1024)
		return CUDA_ERROR_INVALID_VALUE;
	if ((params && extra) || (d->num_params && !params && !extra))
		return CUDA_ERROR_INVALID_VALUE;
	l = malloc(sizeof(*l) + kernel->param_bytes);
	if (!l)
		return CUDA_ERROR_OUT_OF_MEMORY;
	l->kernel = kernel;
	l->dims = *dims;
	if (extra) {
		size_t size = 0;
		const void *buffer = extra_buffer(extra, &size);
		if (!buffer || size != kernel->param_bytes) {
			free(l);
			return CUDA_ERROR_INVALID_VALUE;
		}
		memcpy(l->bytes, buffer, size);
	}
	for (unsigned int i = 0; i < d->num_params; i++) {
		l->args[i] = l->bytes + kernel->offsets[i];
		if (params)
			memcpy(l->args[i], params[i], d->param_sizes[i]);
	}
	op = (struct simgpu_op){
	        .res = SIMGPU_RES_COMPUTE,
	        .work_ns =
	                d->cost_ns ? d->cost_ns(&l->dims, l->args) : simgpu.config.kernel_cost_ns,
	        .name = d->name,
	        .effect = run_kernel,
	        .arg = l,
	        .arg_bytes = sizeof(*l) + kernel->param_bytes,
	        .relocate = relocate_launch,
	};
	simgpu_core_lock();
	op.work_ns = jittered_locked(op.work_ns, device);
	status = work_issue_locked(stream, &op, NULL);
	simgpu_core_unlock();
	return status;
}

struct host_func_effect {
	CUhostFn fn;
	void *user_data;
};

static void run_host_func(void *arg)
{
	struct host_func_effect *h = arg;

	h->fn(h->user_data);
}

SIMGPU_EXPORT CUresult simgpu_launch_host_func(struct CUstream_st *stream, CUhostFn fn,
                                               void *user_data)
{
	struct host_func_effect *h;

	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	h = malloc(sizeof(*h));
	if (!h)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*h = (struct host_func_effect){fn, user_data};
	struct simgpu_op op = {
	        .res = SIMGPU_RES_NONE,
	        .name = "host function",
	        .effect = run_host_func,
	        .arg = h,
	        .arg_bytes = sizeof(*h),
	};
	simgpu_core_lock();
	CUresult status = work_issue_locked(stream, &op, NULL);
	simgpu_core_unlock();
	return status;
}

/* ---- Copies and memsets ------------------------------------------------------------------ */

/* A queued copy. Sources that may change before the copy runs (pageable host memory)
 * are captured into `staged` at issue time, as CUDA stages them. Only copies without
 * staging can be captured into a graph, so a byte copy of the struct is a replay's. */
struct copy_effect {
	void *dst;
	const void *src;
	size_t bytes;
	unsigned char staged[];
};

static void run_copy(void *arg)
{
	struct copy_effect *c = arg;

	memmove(c->dst, c->src, c->bytes);
}

/* Virtual bytes per real byte of a copy between the device and page-locked host memory
 * (simgpu_host_copy_scale). Set once, before the program's threads and processes start; read
 * by every such copy. */
static _Atomic double host_copy_scale = 1.0;

SIMGPU_EXPORT void simgpu_host_copy_scale(double virtual_per_real)
{
	if (virtual_per_real > 0 && virtual_per_real < 1e9)
		host_copy_scale = virtual_per_real;
}

/* What a copy of `bytes` between host and device is costed as. */
static uint64_t host_copy_bytes(size_t bytes)
{
	double scaled = (double)bytes * host_copy_scale;

	return scaled < 1 ? 1 : (uint64_t)scaled;
}

SIMGPU_EXPORT CUresult simgpu_memcpy(void *dst, const void *src, size_t bytes,
                                     struct CUstream_st *stream, bool async)
{
	bool dst_dev = simgpu_mem_is_device(dst), src_dev = simgpu_mem_is_device(src);
	bool stage = async && !src_dev && !simgpu_mem_is_pinned_host(src, bytes);
	bool blocking = !async || (!dst_dev && !simgpu_mem_is_pinned_host(dst, bytes));
	const struct simgpu_config *c = &simgpu.config;
	enum simgpu_resource res;
	uint64_t cost;
	const char *name;

	if (!dst || !src)
		return CUDA_ERROR_INVALID_VALUE;
	if (!bytes)
		return CUDA_SUCCESS;
	if (dst_dev && src_dev) {
		res = SIMGPU_RES_COMPUTE; /* same-device copies run as kernels */
		cost = transfer_ns(2 * (uint64_t)bytes, c->hbm_bytes_per_s);
		name = "memcpy DtoD";
	} else if (dst_dev) {
		res = SIMGPU_RES_H2D;
		cost = transfer_ns(simgpu_mem_is_pinned_host(src, bytes) ? host_copy_bytes(bytes)
		                                                         : bytes,
		                   c->h2d_bytes_per_s);
		name = "memcpy HtoD";
	} else if (src_dev) {
		res = SIMGPU_RES_D2H;
		cost = transfer_ns(simgpu_mem_is_pinned_host(dst, bytes) ? host_copy_bytes(bytes)
		                                                         : bytes,
		                   c->d2h_bytes_per_s);
		name = "memcpy DtoH";
	} else {
		res = SIMGPU_RES_NONE;
		cost = 0;
		name = "memcpy HtoH";
	}
	struct copy_effect *e = malloc(sizeof(*e) + (stage ? bytes : 0));
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*e = (struct copy_effect){dst, src, bytes};
	if (stage) {
		memcpy(e->staged, src, bytes);
		e->src = e->staged;
	}
	struct simgpu_op op = {res, cost, name, run_copy, e, sizeof(*e), NULL};
	uint64_t end;
	CUresult status = CUDA_SUCCESS;
	simgpu_core_lock();
	/* A blocking copy is one of CUDA's unsafe calls; a copy from or to pageable memory
	 * cannot be captured (the host takes part in it). */
	if (!async)
		status = capture_check_unsafe_locked();
	if (status == CUDA_SUCCESS && (blocking || stage))
		status = capture_admit_locked(stream, CAPTURE_REFUSE);
	if (status == CUDA_SUCCESS)
		status = work_issue_locked(stream, &op, &end);
	else
		free(e);
	if (status == CUDA_SUCCESS && blocking)
		sched_host_wait_locked(end);
	simgpu_core_unlock();
	return status;
}

struct memset_effect {
	unsigned char *dst;
	unsigned int value, elem_size;
	size_t count;
};

static void run_memset(void *arg)
{
	struct memset_effect *m = arg;

	for (size_t i = 0; i < m->count; i++)
		memcpy(m->dst + i * m->elem_size, &m->value, m->elem_size);
}

SIMGPU_EXPORT CUresult simgpu_memset(CUdeviceptr dst, unsigned int value, unsigned int elem_size,
                                     size_t count, struct CUstream_st *stream, bool async)
{
	struct memset_effect *m;

	if (elem_size != 1 && elem_size != 2 && elem_size != 4)
		return CUDA_ERROR_INVALID_VALUE;
	if (!simgpu_mem_is_device((void *)(uintptr_t)dst) || dst % elem_size)
		return CUDA_ERROR_INVALID_VALUE;
	if (!count)
		return CUDA_SUCCESS;
	m = malloc(sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* Little-endian: the low elem_size bytes of value are the pattern. */
	*m = (struct memset_effect){(unsigned char *)(uintptr_t)dst, value, elem_size, count};
	struct simgpu_op op = {
	        .res = SIMGPU_RES_COMPUTE,
	        .work_ns = transfer_ns((uint64_t)count * elem_size, simgpu.config.hbm_bytes_per_s),
	        .name = "memset",
	        .effect = run_memset,
	        .arg = m,
	        .arg_bytes = sizeof(*m),
	};
	uint64_t end;
	CUresult status = CUDA_SUCCESS;
	simgpu_core_lock();
	/* A blocking memset is unsafe during capture and cannot be captured itself. */
	if (!async)
		status = capture_check_unsafe_locked();
	if (status == CUDA_SUCCESS && !async)
		status = capture_admit_locked(stream, CAPTURE_REFUSE);
	if (status == CUDA_SUCCESS)
		status = work_issue_locked(stream, &op, &end);
	else
		free(m);
	if (status == CUDA_SUCCESS && !async)
		sched_host_wait_locked(end);
	simgpu_core_unlock();
	return status;
}
