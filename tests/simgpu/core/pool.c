/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Memory pools: handles over the one stream-ordered allocator of memory.c, each with its
 * attributes and the accounting of the blocks allocated through it (core.h says what is
 * modelled). A pool keeps memory freed back to it up to its release threshold
 * (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD; 0 by default, as in CUDA: nothing kept), as bytes,
 * without placement: what it keeps stays device memory in use, is reused by its next
 * allocations, and goes back to the device on cuMemPoolTrimTo. What CUDA calls reserved is
 * what is used plus what is kept. PyTorch's cudaMallocAsync backend sets the threshold to
 * UINT64_MAX. Default pools are static, one per possible device; created pools are few, so
 * a list searched linearly.
 */
#include <stdlib.h>

#include "internal.h"

#define POOL_REUSE_FLAGS 3 /* CU_MEMPOOL_ATTR_REUSE_* are 1, 2 and 3 */

struct CUmemPoolHandle_st {
	bool destroyed; /* destroyed with blocks outstanding: freed with the last one */
	int reuse[POOL_REUSE_FLAGS];
	uint64_t release_threshold;
	uint64_t max_size; /* 0: no limit but the capacity */
	uint64_t used, used_high, reserved_high;
	uint64_t kept; /* freed back to the pool and kept: device memory, reused first */
	size_t blocks; /* outstanding allocations */
	struct CUmemPoolHandle_st *next;
};

/* Guarded by the core lock. */
static struct {
	struct CUmemPoolHandle_st defaults[SIMGPU_MAX_DEVICES];
	struct CUmemPoolHandle_st *created; /* live (not destroyed) created pools */
} pools;

static void pool_init(struct CUmemPoolHandle_st *pool)
{
	/* CUDA's defaults: every reuse policy enabled, release threshold 0. */
	*pool = (struct CUmemPoolHandle_st){.reuse = {1, 1, 1}};
}

void pool_setup(void)
{
	for (int d = 0; d < SIMGPU_MAX_DEVICES; d++)
		pool_init(&pools.defaults[d]);
}

bool pool_charge_locked(struct CUmemPoolHandle_st *pool, uint64_t size)
{
	if (pool->max_size && size > pool->max_size - pool->used)
		return false;
	pool->used += size;
	pool->blocks++;
	if (pool->used > pool->used_high)
		pool->used_high = pool->used;
	if (pool->used + pool->kept > pool->reserved_high)
		pool->reserved_high = pool->used + pool->kept;
	return true;
}

uint64_t pool_reuse_locked(struct CUmemPoolHandle_st *pool, uint64_t size)
{
	uint64_t reused = pool->kept < size ? pool->kept : size;

	pool->kept -= reused;
	return reused;
}

/* Reserved bytes do not grow here: what is kept was used (a free) or kept (a failed
 * allocation's reuse handed back) a moment before. */
void pool_keep_locked(struct CUmemPoolHandle_st *pool, uint64_t bytes)
{
	pool->kept += bytes;
}

uint64_t pool_retain_locked(struct CUmemPoolHandle_st *pool, uint64_t size)
{
	if (!pool || pool->destroyed || pool->kept >= pool->release_threshold)
		return 0;
	uint64_t room = pool->release_threshold - pool->kept, keep = room < size ? room : size;
	pool_keep_locked(pool, keep);
	return keep;
}

void pool_uncharge_locked(struct CUmemPoolHandle_st *pool, uint64_t size)
{
	if (!pool)
		return;
	pool->used -= size;
	pool->blocks--;
	if (pool->destroyed && !pool->blocks)
		free(pool);
}

/* O(created pools). */
struct CUmemPoolHandle_st *pool_find_locked(CUmemoryPool handle)
{
	int devices = simgpu_device_count();

	if (!handle)
		return NULL;
	if (handle >= pools.defaults && handle < pools.defaults + devices)
		return handle;
	for (struct CUmemPoolHandle_st *p = pools.created; p; p = p->next)
		if (p == handle)
			return p;
	return NULL;
}

static bool pool_is_default(const struct CUmemPoolHandle_st *pool)
{
	return pool >= pools.defaults && pool < pools.defaults + SIMGPU_MAX_DEVICES;
}

SIMGPU_EXPORT CUmemoryPool simgpu_pool_default(int device)
{
	if (device < 0 || device >= simgpu_device_count())
		return NULL;
	return &pools.defaults[device];
}

SIMGPU_EXPORT CUresult simgpu_pool_create(CUmemoryPool *out, size_t max_size)
{
	struct CUmemPoolHandle_st *pool;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	pool = malloc(sizeof(*pool));
	if (!pool)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pool_init(pool);
	pool->max_size = max_size;
	simgpu_core_lock();
	pool->next = pools.created;
	pools.created = pool;
	simgpu_core_unlock();
	*out = pool;
	return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult simgpu_pool_destroy(CUmemoryPool handle)
{
	CUresult status = CUDA_ERROR_INVALID_VALUE;

	simgpu_core_lock();
	struct CUmemPoolHandle_st *pool = pool_find_locked(handle);
	if (pool && !pool_is_default(pool)) {
		for (struct CUmemPoolHandle_st **p = &pools.created; *p; p = &(*p)->next) {
			if (*p == pool) {
				*p = pool->next;
				break;
			}
		}
		pool->destroyed = true;
		memory_give_back_locked(pool->kept); /* what it kept goes back */
		pool->kept = 0;
		if (!pool->blocks)
			free(pool);
		status = CUDA_SUCCESS;
	}
	simgpu_core_unlock();
	return status;
}

SIMGPU_EXPORT CUresult simgpu_pool_set_attribute(CUmemoryPool handle, CUmemPool_attribute attr,
                                                 const void *value)
{
	CUresult status = CUDA_ERROR_INVALID_VALUE;

	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	simgpu_core_lock();
	struct CUmemPoolHandle_st *pool = pool_find_locked(handle);
	if (!pool)
		goto out_unlock;
	switch (attr) {
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
		pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] =
		        *(const int *)value != 0;
		status = CUDA_SUCCESS;
		break;
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
		pool->release_threshold = *(const cuuint64_t *)value;
		status = CUDA_SUCCESS;
		break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
		if (*(const cuuint64_t *)value == 0) {
			pool->reserved_high = pool->used;
			status = CUDA_SUCCESS;
		}
		break;
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
		if (*(const cuuint64_t *)value == 0) {
			pool->used_high = pool->used;
			status = CUDA_SUCCESS;
		}
		break;
	default: /* the *_CURRENT ones are read-only */
		break;
	}
out_unlock:
	simgpu_core_unlock();
	return status;
}

SIMGPU_EXPORT CUresult simgpu_pool_get_attribute(CUmemoryPool handle, CUmemPool_attribute attr,
                                                 void *value)
{
	CUresult status = CUDA_SUCCESS;

	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	simgpu_core_lock();
	struct CUmemPoolHandle_st *pool = pool_find_locked(handle);
	if (!pool) {
		status = CUDA_ERROR_INVALID_VALUE;
		goto out_unlock;
	}
	switch (attr) {
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
		*(int *)value = pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
		break;
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
		*(cuuint64_t *)value = pool->release_threshold;
		break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
		*(cuuint64_t *)value = pool->used + pool->kept;
		break;
	case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
		*(cuuint64_t *)value = pool->used;
		break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
		*(cuuint64_t *)value = pool->reserved_high;
		break;
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
		*(cuuint64_t *)value = pool->used_high;
		break;
	default:
		status = CUDA_ERROR_INVALID_VALUE;
		break;
	}
out_unlock:
	simgpu_core_unlock();
	return status;
}

/* Gives what the pool keeps back to the device until it reserves min_bytes_to_keep (what
 * is used stays). */
SIMGPU_EXPORT CUresult simgpu_pool_trim(CUmemoryPool handle, size_t min_bytes_to_keep)
{
	simgpu_core_lock();
	struct CUmemPoolHandle_st *pool = pool_find_locked(handle);
	if (pool && pool->used + pool->kept > min_bytes_to_keep) {
		uint64_t over = pool->used + pool->kept - min_bytes_to_keep;
		uint64_t given = over < pool->kept ? over : pool->kept;
		pool->kept -= given;
		memory_give_back_locked(given);
	}
	simgpu_core_unlock();
	return pool ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
