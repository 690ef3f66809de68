/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device memory: host memory inside one reserved PROT_NONE window. The lower half
 * serves cudaMalloc and VMM reservations, the upper half the stream-ordered allocator
 * (cudaMallocAsync), so that a range whose stream-ordered free is still pending is
 * never handed to an immediate allocation. Freed and unmapped ranges are PROT_NONE:
 * touching them faults. Memory pools are handles over that one allocator: each
 * stream-ordered block names the pool it was allocated through, which accounts for it.
 *
 * Book-keeping is sorted arrays searched linearly or by bisection: O(live allocations)
 * per call, fine below 10^5 allocations.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

#define GIB (1024ull * 1024 * 1024)

enum block_kind { BLOCK_PLAIN, BLOCK_POOL, BLOCK_RESERVED };

struct range {
	uint64_t start, size;
};

struct block {
	uint64_t start, size;
	enum block_kind kind;
	struct CUmemPoolHandle_st *pool; /* BLOCK_POOL: the pool that accounts for it */
};

struct vmm_handle {
	CUmemGenericAllocationHandle id;
	int fd;
	uint64_t size;
	unsigned int mappings;
	bool released;
};

struct mapping {
	uint64_t start, size;
	struct vmm_handle *handle;
	bool read_write;
};

/* A stream-ordered free whose range another stream may only reuse after `time`. */
struct pending_free {
	struct range range;
	const struct CUstream_st *stream;
	uint64_t time;
};

/* A growable array of T: the one container this file needs. */
#define ARRAY(T)                   \
	struct {                   \
		T *items;          \
		size_t count, cap; \
	}

static struct {
	uint64_t base, size;
	ARRAY(struct range) free_ranges[2]; /* [0] immediate half, [1] pool half */
	ARRAY(struct block) blocks;         /* sorted by start */
	ARRAY(struct mapping) mappings;
	ARRAY(struct vmm_handle *) handles;
	ARRAY(struct range) pinned;
	ARRAY(struct pending_free) pending_frees;
	CUmemGenericAllocationHandle next_handle;
	uint64_t current, peak;
} mem;

static bool grow(void **items, size_t *cap, size_t count, size_t elem)
{
	if (count < *cap)
		return true;
	size_t want = *cap ? 2 * *cap : 64;
	void *grown = realloc(*items, want * elem);
	if (!grown)
		return false;
	*items = grown;
	*cap = want;
	return true;
}

#define ARRAY_RESERVE(a) grow((void **)&(a).items, &(a).cap, (a).count, sizeof(*(a).items))

static void array_remove(void *items, size_t *count, size_t elem, size_t at)
{
	char *p = items;

	memmove(p + at * elem, p + (at + 1) * elem, (*count - at - 1) * elem);
	(*count)--;
}

static void array_insert(void *items, size_t *count, size_t elem, size_t at, const void *value)
{
	char *p = items;

	memmove(p + (at + 1) * elem, p + at * elem, (*count - at) * elem);
	memcpy(p + at * elem, value, elem);
	(*count)++;
}

static uint64_t round_up(uint64_t v, uint64_t align)
{
	return (v + align - 1) / align * align;
}

CUresult memory_setup(void)
{
	uint64_t size = 4 * round_up(simgpu.config.capacity_bytes, GIB);
	void *base;

	/* Four times the capacity leaves room for VMM reservations, which cost no capacity;
	 * the floor keeps tiny test devices usable, and small windows let valgrind run it. */
	if (size < 4 * GIB)
		size = 4 * GIB;
	if (size > 4096 * GIB)
		size = 4096 * GIB;
	base = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED) {
		simgpu_report("cannot reserve %llu GiB of address space for device memory",
		              (unsigned long long)(size / GIB));
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	mem.base = (uint64_t)(uintptr_t)base;
	mem.size = size;
	mem.next_handle = 1;
	pool_setup();
	for (int half = 0; half < 2; half++) {
		if (!ARRAY_RESERVE(mem.free_ranges[half]))
			return CUDA_ERROR_OUT_OF_MEMORY;
		mem.free_ranges[half].items[0] =
		        (struct range){mem.base + half * (size / 2), size / 2};
		mem.free_ranges[half].count = 1;
	}
	return CUDA_SUCCESS;
}

/* ---- Address ranges ------------------------------------------------------------------ */

/* First fit; returns 0 when nothing fits. */
static uint64_t va_take(int half, uint64_t size, uint64_t align)
{
	typeof(mem.free_ranges[0]) *fr = &mem.free_ranges[half];

	for (size_t i = 0; i < fr->count; i++) {
		struct range *r = &fr->items[i];
		uint64_t at = round_up(r->start, align);
		if (at + size > r->start + r->size)
			continue;
		struct range after = {at + size, r->start + r->size - (at + size)};
		if (at > r->start) {
			r->size = at - r->start;
			if (after.size) {
				if (!ARRAY_RESERVE(*fr))
					return 0;
				array_insert(fr->items, &fr->count, sizeof(after), i + 1, &after);
			}
		} else if (after.size) {
			*r = after;
		} else {
			array_remove(fr->items, &fr->count, sizeof(*r), i);
		}
		return at;
	}
	return 0;
}

static void va_give_back(int half, uint64_t start, uint64_t size)
{
	typeof(mem.free_ranges[0]) *fr = &mem.free_ranges[half];
	struct range r = {start, size};
	size_t i = 0;

	while (i < fr->count && fr->items[i].start < start)
		i++;
	if (i > 0 && fr->items[i - 1].start + fr->items[i - 1].size == start) {
		fr->items[i - 1].size += size;
		if (i < fr->count && start + size == fr->items[i].start) {
			fr->items[i - 1].size += fr->items[i].size;
			array_remove(fr->items, &fr->count, sizeof(r), i);
		}
		return;
	}
	if (i < fr->count && start + size == fr->items[i].start) {
		fr->items[i].start = start;
		fr->items[i].size += size;
		return;
	}
	if (ARRAY_RESERVE(*fr))
		array_insert(fr->items, &fr->count, sizeof(r), i, &r);
	/* else the range leaks from the window: harmless, the window is 4x capacity */
}

static int half_of(uint64_t addr)
{
	return addr >= mem.base + mem.size / 2;
}

/* ---- Blocks ---------------------------------------------------------------------------- */

/* Index of the block containing addr, or -1. */
static ssize_t block_find(uint64_t addr)
{
	size_t lo = 0, hi = mem.blocks.count;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		const struct block *b = &mem.blocks.items[mid];
		if (addr < b->start)
			hi = mid;
		else if (addr >= b->start + b->size)
			lo = mid + 1;
		else
			return (ssize_t)mid;
	}
	return -1;
}

static bool block_add(uint64_t start, uint64_t size, enum block_kind kind,
                      struct CUmemPoolHandle_st *pool)
{
	struct block b = {start, size, kind, pool};
	size_t i = 0;

	if (!ARRAY_RESERVE(mem.blocks))
		return false;
	while (i < mem.blocks.count && mem.blocks.items[i].start < start)
		i++;
	array_insert(mem.blocks.items, &mem.blocks.count, sizeof(b), i, &b);
	return true;
}

static bool charge(uint64_t bytes)
{
	if (bytes > simgpu.config.capacity_bytes - mem.current)
		return false;
	mem.current += bytes;
	if (mem.current > mem.peak)
		mem.peak = mem.current;
	return true;
}

static void set_protection(uint64_t start, uint64_t size, int prot)
{
	if (mprotect((void *)(uintptr_t)start, size, prot))
		simgpu_report("mprotect of device range %#llx+%llu failed: %s",
		              (unsigned long long)start, (unsigned long long)size, strerror(errno));
}

/* ---- cudaMalloc / cudaFree ------------------------------------------------------------ */

static CUresult alloc_immediate_locked(CUdeviceptr *out, size_t bytes, uint64_t align,
                                       enum block_kind kind, bool physical)
{
	uint64_t size = round_up(bytes, align);
	uint64_t start;

	if (physical && !charge(size))
		return CUDA_ERROR_OUT_OF_MEMORY;
	start = va_take(0, size, align);
	if (!start || !block_add(start, size, kind, NULL)) {
		if (start)
			va_give_back(0, start, size);
		if (physical)
			mem.current -= size;
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (physical)
		set_protection(start, size, PROT_READ | PROT_WRITE);
	*out = (CUdeviceptr)start;
	return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult simgpu_mem_alloc(CUdeviceptr *out, size_t bytes)
{
	if (!out || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	simgpu_core_lock();
	CUresult status = capture_check_unsafe_locked();
	if (status == CUDA_SUCCESS)
		status = alloc_immediate_locked(out, bytes, SIMGPU_PAGE, BLOCK_PLAIN, true);
	simgpu_core_unlock();
	return status;
}

/* Unmaps a block's pages now; the range faults on access afterwards. cudaFree may release
 * a stream-ordered block too, as CUDA allows. */
static void block_release_locked(size_t index)
{
	struct block b = mem.blocks.items[index];

	set_protection(b.start, b.size, PROT_NONE);
	madvise((void *)(uintptr_t)b.start, b.size, MADV_DONTNEED);
	array_remove(mem.blocks.items, &mem.blocks.count, sizeof(b), index);
	va_give_back(half_of(b.start), b.start, b.size);
	mem.current -= b.size - pool_retain_locked(b.pool, b.size);
	pool_uncharge_locked(b.pool, b.size);
}

SIMGPU_EXPORT CUresult simgpu_mem_free(CUdeviceptr ptr)
{
	CUresult status = CUDA_ERROR_INVALID_VALUE;

	simgpu_core_lock();
	ssize_t i = block_find(ptr);
	if (i >= 0 && mem.blocks.items[i].start == ptr &&
	    mem.blocks.items[i].kind != BLOCK_RESERVED)
		status = capture_check_unsafe_locked();
	if (status == CUDA_SUCCESS) {
		/* cudaFree synchronises the device before it releases. */
		sched_host_wait_locked(sched_device_tail_locked());
		block_release_locked((size_t)block_find(ptr));
	}
	simgpu_core_unlock();
	return status;
}

/* ---- Stream-ordered allocation ----------------------------------------------------------- */

struct protect_effect {
	uint64_t start, size;
	int prot;
};

static void apply_protection(void *arg)
{
	struct protect_effect *p = arg;

	set_protection(p->start, p->size, p->prot);
}

/* Queues a protection change at the stream's current point. */
static void protect_in_stream_locked(struct CUstream_st *stream, const char *name, uint64_t start,
                                     uint64_t size, int prot)
{
	uint64_t at = sched_book_locked(stream, SIMGPU_RES_NONE, 0, name, NULL);
	struct protect_effect *p = malloc(sizeof(*p));

	if (!p) {
		set_protection(start, size, prot);
		return;
	}
	*p = (struct protect_effect){start, size, prot};
	effects_push_locked(at, apply_protection, p);
}

/* A range freed on another stream is reused only once that free has completed. */
static void wait_for_pending_frees_locked(struct CUstream_st *stream, uint64_t start, uint64_t size)
{
	uint64_t now = atomic_load(&simgpu.host_now);
	size_t kept = 0;

	for (size_t i = 0; i < mem.pending_frees.count; i++) {
		struct pending_free *f = &mem.pending_frees.items[i];
		if (f->time <= now)
			continue;
		if (f->stream != stream && f->range.start < start + size &&
		    start < f->range.start + f->range.size)
			sched_stream_wait_locked(stream, f->time);
		mem.pending_frees.items[kept++] = *f;
	}
	mem.pending_frees.count = kept;
}

SIMGPU_EXPORT CUresult simgpu_mem_alloc_async(CUdeviceptr *out, size_t bytes, CUmemoryPool handle,
                                              struct CUstream_st *stream)
{
	CUresult status = CUDA_ERROR_OUT_OF_MEMORY;
	uint64_t size = round_up(bytes, SIMGPU_PAGE);
	struct CUmemPoolHandle_st *pool;
	uint64_t start;

	if (!out || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	simgpu_core_lock();
	pool = pool_find_locked(handle);
	if (!pool) {
		status = CUDA_ERROR_INVALID_VALUE;
		goto out_unlock;
	}
	/* simgpu has no graph memory nodes: a capturing stream cannot allocate. */
	status = capture_admit_locked(stream, CAPTURE_REFUSE);
	if (status != CUDA_SUCCESS)
		goto out_unlock;
	status = CUDA_ERROR_OUT_OF_MEMORY;
	if (!pool_charge_locked(pool, size))
		goto out_unlock;
	/* What the pool keeps is device memory already: only the rest is new. */
	uint64_t reused = pool_reuse_locked(pool, size);
	if (!charge(size - reused)) {
		pool_keep_locked(pool, reused);
		pool_uncharge_locked(pool, size);
		goto out_unlock;
	}
	start = va_take(1, size, SIMGPU_PAGE);
	if (!start || !block_add(start, size, BLOCK_POOL, pool)) {
		if (start)
			va_give_back(1, start, size);
		mem.current -= size - reused;
		pool_keep_locked(pool, reused);
		pool_uncharge_locked(pool, size);
		goto out_unlock;
	}
	wait_for_pending_frees_locked(stream, start, size);
	protect_in_stream_locked(stream, "cudaMallocAsync", start, size, PROT_READ | PROT_WRITE);
	*out = (CUdeviceptr)start;
	status = CUDA_SUCCESS;
out_unlock:
	simgpu_core_unlock();
	return status;
}

SIMGPU_EXPORT CUresult simgpu_mem_free_async(CUdeviceptr ptr, struct CUstream_st *stream)
{
	CUresult status = CUDA_ERROR_INVALID_VALUE;

	simgpu_core_lock();
	ssize_t i = block_find(ptr);
	if (i < 0 || mem.blocks.items[i].start != ptr || mem.blocks.items[i].kind != BLOCK_POOL)
		goto out_unlock;
	status = capture_admit_locked(stream, CAPTURE_REFUSE);
	if (status != CUDA_SUCCESS)
		goto out_unlock;
	struct block b = mem.blocks.items[i];
	protect_in_stream_locked(stream, "cudaFreeAsync", b.start, b.size, PROT_NONE);
	if (ARRAY_RESERVE(mem.pending_frees))
		mem.pending_frees.items[mem.pending_frees.count++] =
		        (struct pending_free){{b.start, b.size}, stream, stream->tail};
	array_remove(mem.blocks.items, &mem.blocks.count, sizeof(b), (size_t)i);
	va_give_back(1, b.start, b.size);
	mem.current -= b.size - pool_retain_locked(b.pool, b.size);
	pool_uncharge_locked(b.pool, b.size);
	status = CUDA_SUCCESS;
out_unlock:
	simgpu_core_unlock();
	return status;
}

/* ---- Host memory and queries ------------------------------------------------------------ */

SIMGPU_EXPORT CUresult simgpu_mem_host_alloc(void **out, size_t bytes)
{
	void *p = NULL;

	if (!out || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (posix_memalign(&p, SIMGPU_PAGE, bytes))
		return CUDA_ERROR_OUT_OF_MEMORY;
	simgpu_core_lock();
	CUresult status = capture_check_unsafe_locked();
	if (status == CUDA_SUCCESS && !ARRAY_RESERVE(mem.pinned))
		status = CUDA_ERROR_OUT_OF_MEMORY;
	if (status != CUDA_SUCCESS) {
		simgpu_core_unlock();
		free(p);
		return status;
	}
	mem.pinned.items[mem.pinned.count++] = (struct range){(uint64_t)(uintptr_t)p, bytes};
	simgpu_core_unlock();
	*out = p;
	return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult simgpu_mem_host_free(void *ptr)
{
	CUresult status = CUDA_ERROR_INVALID_VALUE;

	simgpu_core_lock();
	for (size_t i = 0; i < mem.pinned.count; i++) {
		if (mem.pinned.items[i].start != (uint64_t)(uintptr_t)ptr)
			continue;
		status = capture_check_unsafe_locked();
		if (status != CUDA_SUCCESS)
			break;
		/* Queued copies may still read or write it: let them finish first. */
		sched_host_wait_locked(sched_device_tail_locked());
		array_remove(mem.pinned.items, &mem.pinned.count, sizeof(struct range), i);
		free(ptr);
		status = CUDA_SUCCESS;
		break;
	}
	simgpu_core_unlock();
	return status;
}

SIMGPU_EXPORT bool simgpu_mem_is_pinned_host(const void *p, size_t bytes)
{
	uint64_t a = (uint64_t)(uintptr_t)p;
	bool found = false;

	simgpu_core_lock();
	for (size_t i = 0; i < mem.pinned.count && !found; i++) {
		const struct range *r = &mem.pinned.items[i];
		found = a >= r->start && a + bytes <= r->start + r->size;
	}
	simgpu_core_unlock();
	return found;
}

void memory_give_back_locked(uint64_t bytes)
{
	mem.current -= bytes;
}

SIMGPU_EXPORT void simgpu_mem_info(size_t *free_bytes, size_t *total_bytes)
{
	simgpu_core_lock();
	*free_bytes = simgpu.config.capacity_bytes - mem.current;
	*total_bytes = simgpu.config.capacity_bytes;
	simgpu_core_unlock();
}

SIMGPU_EXPORT bool simgpu_mem_is_device(const void *p)
{
	uint64_t a = (uint64_t)(uintptr_t)p;

	return a >= mem.base && a < mem.base + mem.size;
}

/* True when [start, end) is covered by read-write mappings. */
static bool mapped_read_write_locked(uint64_t start, uint64_t end)
{
	while (start < end) {
		bool advanced = false;
		for (size_t i = 0; i < mem.mappings.count; i++) {
			const struct mapping *m = &mem.mappings.items[i];
			if (m->start <= start && start < m->start + m->size && m->read_write) {
				start = m->start + m->size;
				advanced = true;
				break;
			}
		}
		if (!advanced)
			return false;
	}
	return true;
}

SIMGPU_EXPORT bool simgpu_mem_is_accessible(const void *p, size_t bytes)
{
	uint64_t a = (uint64_t)(uintptr_t)p;
	bool ok = false;

	simgpu_core_lock();
	ssize_t i = block_find(a);
	if (i >= 0) {
		const struct block *b = &mem.blocks.items[i];
		if (a + bytes <= b->start + b->size)
			ok = b->kind != BLOCK_RESERVED || mapped_read_write_locked(a, a + bytes);
	}
	simgpu_core_unlock();
	return ok;
}

/* The mapping that contains addr, or NULL. O(mappings), as the other VMM look-ups. */
static const struct mapping *mapping_find_locked(uint64_t addr)
{
	for (size_t i = 0; i < mem.mappings.count; i++) {
		const struct mapping *m = &mem.mappings.items[i];
		if (m->start <= addr && addr < m->start + m->size)
			return m;
	}
	return NULL;
}

SIMGPU_EXPORT CUresult simgpu_mem_range(CUdeviceptr *base, size_t *size, CUdeviceptr ptr)
{
	CUresult status = CUDA_ERROR_NOT_FOUND;
	uint64_t start = 0, bytes = 0;

	simgpu_core_lock();
	ssize_t i = block_find(ptr);
	if (i >= 0 && mem.blocks.items[i].kind != BLOCK_RESERVED) {
		start = mem.blocks.items[i].start;
		bytes = mem.blocks.items[i].size;
		status = CUDA_SUCCESS;
	} else if (i >= 0) {
		/* A reservation is address space, not an allocation: only its mappings count. */
		const struct mapping *m = mapping_find_locked(ptr);
		if (m) {
			start = m->start;
			bytes = m->size;
			status = CUDA_SUCCESS;
		}
	}
	simgpu_core_unlock();
	if (status != CUDA_SUCCESS)
		return status;
	if (base)
		*base = (CUdeviceptr)start;
	if (size)
		*size = (size_t)bytes;
	return CUDA_SUCCESS;
}

SIMGPU_EXPORT void simgpu_memory_stats(struct simgpu_memory_stats *out)
{
	simgpu_core_lock();
	out->current_bytes = mem.current;
	out->peak_bytes = mem.peak;
	out->capacity_bytes = simgpu.config.capacity_bytes;
	simgpu_core_unlock();
}

SIMGPU_EXPORT void simgpu_memory_reset_peak(void)
{
	simgpu_core_lock();
	mem.peak = mem.current;
	simgpu_core_unlock();
}

/* ---- VMM --------------------------------------------------------------------------------- */

SIMGPU_EXPORT size_t simgpu_vmm_granularity(void)
{
	return simgpu.config.vmm_granularity;
}

static bool aligned(uint64_t v)
{
	return v % simgpu.config.vmm_granularity == 0;
}

SIMGPU_EXPORT CUresult simgpu_vmm_reserve(CUdeviceptr *out, size_t size, size_t alignment,
                                          CUdeviceptr hint)
{
	uint64_t align = alignment ? alignment : simgpu.config.vmm_granularity;

	if (!out || !size || !aligned(size) || (align & (align - 1)) || !aligned(align))
		return CUDA_ERROR_INVALID_VALUE;
	/* The address hint is only a hint in CUDA too; simgpu ignores it. */
	simgpu_core_lock();
	CUresult status = alloc_immediate_locked(out, size, align, BLOCK_RESERVED, false);
	simgpu_core_unlock();
	return status;
}

static bool range_has_mapping_locked(uint64_t start, uint64_t size)
{
	for (size_t i = 0; i < mem.mappings.count; i++) {
		const struct mapping *m = &mem.mappings.items[i];
		if (m->start < start + size && start < m->start + m->size)
			return true;
	}
	return false;
}

SIMGPU_EXPORT CUresult simgpu_vmm_address_free(CUdeviceptr ptr, size_t size)
{
	CUresult status = CUDA_ERROR_INVALID_VALUE;

	simgpu_core_lock();
	ssize_t i = block_find(ptr);
	if (i >= 0 && mem.blocks.items[i].kind == BLOCK_RESERVED &&
	    mem.blocks.items[i].start == ptr && mem.blocks.items[i].size == size &&
	    !range_has_mapping_locked(ptr, size)) {
		array_remove(mem.blocks.items, &mem.blocks.count, sizeof(struct block), (size_t)i);
		va_give_back(0, ptr, size);
		status = CUDA_SUCCESS;
	}
	simgpu_core_unlock();
	return status;
}

static struct vmm_handle *handle_find_locked(CUmemGenericAllocationHandle id, size_t *index)
{
	for (size_t i = 0; i < mem.handles.count; i++) {
		if (mem.handles.items[i]->id == id && !mem.handles.items[i]->released) {
			if (index)
				*index = i;
			return mem.handles.items[i];
		}
	}
	return NULL;
}

SIMGPU_EXPORT CUresult simgpu_vmm_create(CUmemGenericAllocationHandle *out, size_t size)
{
	CUresult status = CUDA_ERROR_OUT_OF_MEMORY;
	struct vmm_handle *h;

	if (!out || !size || !aligned(size))
		return CUDA_ERROR_INVALID_VALUE;
	h = calloc(1, sizeof(*h));
	if (!h)
		return CUDA_ERROR_OUT_OF_MEMORY;
	simgpu_core_lock();
	if (!ARRAY_RESERVE(mem.handles) || !charge(size))
		goto out_free;
	h->fd = memfd_create("simgpu-vmm", MFD_CLOEXEC);
	if (h->fd < 0 || ftruncate(h->fd, (off_t)size)) {
		if (h->fd >= 0)
			close(h->fd);
		mem.current -= size;
		goto out_free;
	}
	h->id = mem.next_handle++;
	h->size = size;
	mem.handles.items[mem.handles.count++] = h;
	*out = h->id;
	simgpu_core_unlock();
	return CUDA_SUCCESS;
out_free:
	simgpu_core_unlock();
	free(h);
	return status;
}

/* Physical memory goes back once the handle is released and no longer mapped. */
static void handle_put_locked(struct vmm_handle *h)
{
	if (!h->released || h->mappings)
		return;
	for (size_t i = 0; i < mem.handles.count; i++) {
		if (mem.handles.items[i] == h) {
			array_remove(mem.handles.items, &mem.handles.count, sizeof(h), i);
			break;
		}
	}
	close(h->fd);
	mem.current -= h->size;
	free(h);
}

SIMGPU_EXPORT CUresult simgpu_vmm_release(CUmemGenericAllocationHandle id)
{
	simgpu_core_lock();
	struct vmm_handle *h = handle_find_locked(id, NULL);
	if (h) {
		h->released = true;
		handle_put_locked(h);
	}
	simgpu_core_unlock();
	return h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIMGPU_EXPORT CUresult simgpu_vmm_map(CUdeviceptr ptr, size_t size, size_t offset,
                                      CUmemGenericAllocationHandle id)
{
	CUresult status = CUDA_ERROR_INVALID_VALUE;

	if (!size || !aligned(ptr) || !aligned(size) || !aligned(offset))
		return CUDA_ERROR_INVALID_VALUE;
	simgpu_core_lock();
	struct vmm_handle *h = handle_find_locked(id, NULL);
	ssize_t b = block_find(ptr);
	if (!h || offset + size > h->size || b < 0 || mem.blocks.items[b].kind != BLOCK_RESERVED ||
	    ptr + size > mem.blocks.items[b].start + mem.blocks.items[b].size ||
	    range_has_mapping_locked(ptr, size) || !ARRAY_RESERVE(mem.mappings))
		goto out_unlock;
	if (mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd,
	         (off_t)offset) == MAP_FAILED) {
		simgpu_report("cuMemMap: mmap failed: %s", strerror(errno));
		status = CUDA_ERROR_OUT_OF_MEMORY;
		goto out_unlock;
	}
	mem.mappings.items[mem.mappings.count++] = (struct mapping){ptr, size, h, false};
	h->mappings++;
	status = CUDA_SUCCESS;
out_unlock:
	simgpu_core_unlock();
	return status;
}

/* Every mapping the range touches must lie wholly inside it: no partial unmaps. */
SIMGPU_EXPORT CUresult simgpu_vmm_unmap(CUdeviceptr ptr, size_t size)
{
	CUresult status = CUDA_ERROR_INVALID_VALUE;
	uint64_t covered = 0;

	if (!size || !aligned(ptr) || !aligned(size))
		return CUDA_ERROR_INVALID_VALUE;
	simgpu_core_lock();
	for (size_t i = 0; i < mem.mappings.count; i++) {
		const struct mapping *m = &mem.mappings.items[i];
		bool touches = m->start < ptr + size && ptr < m->start + m->size;
		if (touches && (m->start < ptr || m->start + m->size > ptr + size))
			goto out_unlock;
		if (touches)
			covered += m->size;
	}
	if (covered != size)
		goto out_unlock;
	if (mmap((void *)(uintptr_t)ptr, size, PROT_NONE,
	         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED) {
		simgpu_report("cuMemUnmap: cannot restore the reservation: %s", strerror(errno));
		goto out_unlock;
	}
	for (size_t i = mem.mappings.count; i-- > 0;) {
		struct mapping m = mem.mappings.items[i];
		if (m.start < ptr || m.start >= ptr + size)
			continue;
		array_remove(mem.mappings.items, &mem.mappings.count, sizeof(m), i);
		m.handle->mappings--;
		handle_put_locked(m.handle);
	}
	status = CUDA_SUCCESS;
out_unlock:
	simgpu_core_unlock();
	return status;
}

SIMGPU_EXPORT CUresult simgpu_vmm_set_access(CUdeviceptr ptr, size_t size, bool read_write)
{
	CUresult status = CUDA_ERROR_INVALID_VALUE;
	uint64_t covered = 0;

	if (!size || !aligned(ptr) || !aligned(size))
		return CUDA_ERROR_INVALID_VALUE;
	simgpu_core_lock();
	for (size_t i = 0; i < mem.mappings.count; i++) {
		const struct mapping *m = &mem.mappings.items[i];
		if (m->start < ptr + size && ptr < m->start + m->size)
			covered += (m->start + m->size < ptr + size ? m->start + m->size
			                                            : ptr + size) -
			           (m->start > ptr ? m->start : ptr);
	}
	if (covered == size) {
		for (size_t i = 0; i < mem.mappings.count; i++) {
			struct mapping *m = &mem.mappings.items[i];
			if (m->start < ptr + size && ptr < m->start + m->size)
				m->read_write = read_write;
		}
		set_protection(ptr, size, read_write ? PROT_READ | PROT_WRITE : PROT_NONE);
		status = CUDA_SUCCESS;
	}
	simgpu_core_unlock();
	return status;
}
