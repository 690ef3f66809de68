/* SPDX-License-Identifier: Apache-2.0 */
/* The VMM arena (arena.h): address chunks, a free list of ranges, and a table of allocations
 * that lynx_arena_find searches without a lock. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "log.h"

/*
 * The allocation table: records sorted by base address, searched by bisection, under a
 * sequence lock.
 *
 * Why a sorted array: an allocation is one record whatever its size, and a lookup is
 * O(log n) loads over contiguous memory. Insert and remove shift O(n) records, fine at the
 * thousands of live allocations a trainer has: alloc and free happen per tensor, find per
 * launch parameter, many times more often. A hash over granule-aligned keys would need one
 * key per granule: 512 for a 1 GiB tensor at 2 MiB granules, 16384 at 64 KiB.
 *
 * Why a sequence lock: find runs on the launch path of every trainer thread. A reader
 * stores nothing (a rwlock would bounce its reader count between cores) and never waits
 * for a driver call. A writer, holding the mutex, makes the sequence odd while it changes
 * the table; a reader that saw it odd, or changed by the end of its search, searches again.
 * The fields readers load are atomics (relaxed), so a read torn by a writer is a retry,
 * never undefined behaviour. A table that grows is replaced, and the old one is kept
 * until destroy, since a reader may still be searching it; tables double, so the kept
 * ones take at most as much memory as the current one.
 */
struct record {
	_Atomic uint64_t base;
	_Atomic uint64_t size;
	_Atomic int state; /* enum lynx_arena_state */
	/* Read and written under the mutex only. */
	CUmemGenericAllocationHandle handle;
	/* handle is live and this allocation owns it: mapped (RESIDENT), or an eviction
	 * failed to release it (EVICTED). A RESIDENT allocation whose memory was given away
	 * (lynx_arena_alloc_from, lynx_arena_restore_from) is still mapped but owns nothing. */
	bool holds_handle;
};

struct record_table {
	struct record_table *retired; /* the table this one replaced: freed at destroy */
	size_t capacity;
	struct record records[];
};

/* One reservation (cuMemAddressReserve): given back whole at destroy. */
struct chunk {
	uint64_t base, size;
};

/* Free address space. Ranges of different chunks are never merged: a mapping may not
 * span two reservations. Taking (first fit) and giving back are O(free ranges) and
 * O(chunks): fine for the few chunks and the thousands of ranges a trainer makes. */
struct free_range {
	uint64_t start, size;
	size_t chunk;
};

struct lynx_arena {
	struct lynx_arena_driver driver;
	CUmemAllocationProp prop;
	CUmemAccessDesc read_write;
	size_t granularity;
	size_t chunk_bytes;

	/* Guards everything below, except what find reads (marked). Never held across a
	 * driver call. */
	pthread_mutex_t lock;
	struct chunk *chunks;
	size_t chunk_count, chunk_capacity;
	struct free_range *free; /* sorted by start */
	size_t free_count, free_capacity;
	size_t taken; /* ranges taken from the free list and not yet given back */
	struct lynx_arena_stats stats;

	/* Read by find without the lock. */
	_Atomic unsigned int seq; /* odd while a writer changes the table */
	_Atomic(struct record_table *) table;
	_Atomic size_t count;             /* records in use */
	_Atomic uint64_t lowest, highest; /* the span of every chunk: a quick "no" */
};

enum driver_call {
#define LYNX_ARENA_DRIVER_CALL(field, symbol, version) CALL_##field,
	LYNX_ARENA_DRIVER_CALLS
#undef LYNX_ARENA_DRIVER_CALL
	        CALL_COUNT
};

static const char *const call_names[CALL_COUNT] = {
#define LYNX_ARENA_DRIVER_CALL(field, symbol, version) #symbol,
        LYNX_ARENA_DRIVER_CALLS
#undef LYNX_ARENA_DRIVER_CALL
};

static const char *const state_names[LYNX_ARENA_STATE_COUNT] = {
#define LYNX_ARENA_STATE(name, text) text,
        LYNX_ARENA_STATES
#undef LYNX_ARENA_STATE
};

/* Unexpected driver failures are logged once per driver function, whatever the arena. */
static atomic_bool warned[CALL_COUNT];

#define INITIAL_RECORDS 64

const char *lynx_arena_state_name(enum lynx_arena_state state)
{
	return (unsigned int)state < LYNX_ARENA_STATE_COUNT ? state_names[state] : "unknown";
}

int lynx_arena_driver_resolve(struct lynx_arena_driver *driver, lynx_arena_lookup lookup, void *arg)
{
	bool missing = false;

#define LYNX_ARENA_DRIVER_CALL(field, symbol, version)                            \
	driver->field = (PFN_##symbol##_v##version)lookup(#symbol, version, arg); \
	missing |= !driver->field;
	LYNX_ARENA_DRIVER_CALLS
#undef LYNX_ARENA_DRIVER_CALL
	return missing ? -ENOENT : 0;
}

/* The errno for a failed driver call (arena.h's list). */
static int errno_of(CUresult res)
{
	switch (res) {
	case CUDA_SUCCESS:
		return 0;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
	case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
	case CUDA_ERROR_STREAM_CAPTURE_MERGE:
	case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED:
	case CUDA_ERROR_STREAM_CAPTURE_UNJOINED:
	case CUDA_ERROR_STREAM_CAPTURE_ISOLATION:
	case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
	case CUDA_ERROR_CAPTURED_EVENT:
	case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD:
		return -EAGAIN;
	default:
		return -EIO;
	}
}

/* Counts and logs a failed driver call (called without the mutex); returns its errno. */
static int driver_failed(struct lynx_arena *a, enum driver_call call, CUresult res, CUdeviceptr ptr,
                         size_t size)
{
	int err = errno_of(res);
	char error[96];

	pthread_mutex_lock(&a->lock);
	if (err == -ENOMEM)
		a->stats.out_of_memory++;
	else
		a->stats.failures++;
	pthread_mutex_unlock(&a->lock);
	if (err == -EIO && !atomic_exchange_explicit(&warned[call], true, memory_order_relaxed))
		lynx_warn("VMM arena: %s at %#llx (%zu bytes) failed with %s; further failures of "
		          "%s are not logged",
		          call_names[call], (unsigned long long)ptr, size,
		          lynx_cuda_error_text((int)res, error, sizeof(error)), call_names[call]);
	else
		lynx_debug("VMM arena: %s at %#llx (%zu bytes) failed with %s", call_names[call],
		           (unsigned long long)ptr, size,
		           lynx_cuda_error_text((int)res, error, sizeof(error)));
	return err;
}

/* ---- The allocation table (writers hold the mutex) ------------------------------------ */

/*
 * The sequence lock's two fences. ThreadSanitizer does not model fences (GCC refuses them
 * under -fsanitize=thread), so there the same orderings come from read-modify-writes of the
 * sequence, which it does model: a writer's acquire increment keeps the table's changes
 * after it, a reader's release "add 0" keeps its loads before it (Boehm, "Can seqlocks get
 * along with programming language memory models?"). The fences are the cheaper form: a
 * reader then stores nothing.
 */
#if defined(__SANITIZE_THREAD__)
static void odd_sequence_first(struct lynx_arena *a, unsigned int seq)
{
	atomic_fetch_add_explicit(&a->seq, 1, memory_order_acq_rel);
}

static unsigned int sequence_after_loads(const struct lynx_arena *a)
{
	return atomic_fetch_add_explicit((_Atomic unsigned int *)&a->seq, 0, memory_order_acq_rel);
}
#else
static void odd_sequence_first(struct lynx_arena *a, unsigned int seq)
{
	atomic_store_explicit(&a->seq, seq + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

static unsigned int sequence_after_loads(const struct lynx_arena *a)
{
	atomic_thread_fence(memory_order_acquire);
	return atomic_load_explicit(&a->seq, memory_order_relaxed);
}
#endif

static void write_begin(struct lynx_arena *a)
{
	/* The odd sequence is visible before any change to the table. */
	odd_sequence_first(a, atomic_load_explicit(&a->seq, memory_order_relaxed));
}

static void write_end(struct lynx_arena *a)
{
	unsigned int seq = atomic_load_explicit(&a->seq, memory_order_relaxed);

	atomic_store_explicit(&a->seq, seq + 1, memory_order_release);
}

static struct record_table *table_of(const struct lynx_arena *a)
{
	return atomic_load_explicit(&a->table, memory_order_acquire);
}

static void record_copy(struct record *to, const struct record *from)
{
	atomic_store_explicit(&to->base, atomic_load_explicit(&from->base, memory_order_relaxed),
	                      memory_order_relaxed);
	atomic_store_explicit(&to->size, atomic_load_explicit(&from->size, memory_order_relaxed),
	                      memory_order_relaxed);
	atomic_store_explicit(&to->state, atomic_load_explicit(&from->state, memory_order_relaxed),
	                      memory_order_relaxed);
	to->handle = from->handle;
	to->holds_handle = from->holds_handle;
}

/* The number of the first n records whose base is at most addr. Terminates even on a table
 * a writer is changing (the reader then discards the answer). */
static size_t records_up_to(const struct record_table *t, size_t n, uint64_t addr)
{
	size_t low = 0, high = n;

	while (low < high) {
		size_t mid = low + (high - low) / 2;

		if (atomic_load_explicit(&t->records[mid].base, memory_order_relaxed) <= addr)
			low = mid + 1;
		else
			high = mid;
	}
	return low;
}

/* The record based exactly at ptr, or NULL. */
static struct record *record_at_locked(struct lynx_arena *a, CUdeviceptr ptr)
{
	struct record_table *t = table_of(a);
	size_t n = records_up_to(t, atomic_load_explicit(&a->count, memory_order_relaxed), ptr);

	if (n == 0 || atomic_load_explicit(&t->records[n - 1].base, memory_order_relaxed) != ptr)
		return NULL;
	return &t->records[n - 1];
}

/* Makes room for `needed` records, replacing the table by one twice as large if needed.
 * The new table holds the same records, so readers may search either. */
static int table_reserve_locked(struct lynx_arena *a, size_t needed)
{
	struct record_table *old = table_of(a), *grown;
	size_t count = atomic_load_explicit(&a->count, memory_order_relaxed);
	size_t capacity = old->capacity;

	if (needed <= capacity)
		return 0;
	while (capacity < needed)
		capacity *= 2;
	grown = calloc(1, sizeof(*grown) + capacity * sizeof(grown->records[0]));
	if (!grown)
		return -ENOMEM;
	grown->retired = old;
	grown->capacity = capacity;
	for (size_t i = 0; i < count; i++)
		record_copy(&grown->records[i], &old->records[i]);
	atomic_store_explicit(&a->table, grown, memory_order_release);
	return 0;
}

/* Inserts a record in base order; the table has room (room_locked, when its range was
 * taken). */
static void record_insert_locked(struct lynx_arena *a, CUdeviceptr base, size_t size,
                                 enum lynx_arena_state state, CUmemGenericAllocationHandle handle,
                                 bool holds_handle)
{
	struct record_table *t = table_of(a);
	size_t count = atomic_load_explicit(&a->count, memory_order_relaxed);
	size_t at = records_up_to(t, count, base);
	struct record *r = &t->records[at];

	write_begin(a);
	for (size_t i = count; i > at; i--)
		record_copy(&t->records[i], &t->records[i - 1]);
	atomic_store_explicit(&r->base, base, memory_order_relaxed);
	atomic_store_explicit(&r->size, size, memory_order_relaxed);
	atomic_store_explicit(&r->state, (int)state, memory_order_relaxed);
	r->handle = handle;
	r->holds_handle = holds_handle;
	atomic_store_explicit(&a->count, count + 1, memory_order_relaxed);
	write_end(a);
}

static void record_remove_locked(struct lynx_arena *a, struct record *r)
{
	struct record_table *t = table_of(a);
	size_t count = atomic_load_explicit(&a->count, memory_order_relaxed);

	write_begin(a);
	for (size_t i = (size_t)(r - t->records); i + 1 < count; i++)
		record_copy(&t->records[i], &t->records[i + 1]);
	atomic_store_explicit(&a->count, count - 1, memory_order_relaxed);
	write_end(a);
}

static void record_set_state_locked(struct lynx_arena *a, struct record *r,
                                    enum lynx_arena_state state)
{
	write_begin(a);
	atomic_store_explicit(&r->state, (int)state, memory_order_relaxed);
	write_end(a);
}

static enum lynx_arena_state record_state(const struct record *r)
{
	return (enum lynx_arena_state)atomic_load_explicit(&r->state, memory_order_relaxed);
}

static uint64_t record_size(const struct record *r)
{
	return atomic_load_explicit(&r->size, memory_order_relaxed);
}

bool lynx_arena_find(const struct lynx_arena *a, CUdeviceptr addr, struct lynx_arena_range *out)
{
	if (addr < atomic_load_explicit(&a->lowest, memory_order_relaxed) ||
	    addr >= atomic_load_explicit(&a->highest, memory_order_relaxed))
		return false;
	for (;;) {
		unsigned int seq = atomic_load_explicit(&a->seq, memory_order_acquire);
		struct lynx_arena_range found = {0};
		bool hit = false;

		if (seq & 1)
			continue; /* a writer is inside: its change takes microseconds */
		const struct record_table *t = table_of(a);
		size_t count = atomic_load_explicit(&a->count, memory_order_relaxed);
		/* A count read after the table grew may exceed an older table's capacity. */
		size_t n = records_up_to(t, count < t->capacity ? count : t->capacity, addr);
		if (n > 0) {
			const struct record *r = &t->records[n - 1];
			found.base = atomic_load_explicit(&r->base, memory_order_relaxed);
			found.size = atomic_load_explicit(&r->size, memory_order_relaxed);
			found.state = record_state(r);
			hit = addr - found.base < found.size;
		}
		/* The loads above happen before the sequence is checked again. */
		if (sequence_after_loads(a) != seq)
			continue;
		if (hit && out)
			*out = found;
		return hit;
	}
}

/* ---- Address space (under the mutex) --------------------------------------------------- */

/*
 * Makes sure that giving back any taken range, and inserting any taken range's record,
 * never needs memory: free ranges number at most taken ranges plus chunks (two free
 * ranges of one chunk have a taken range between them, or they would be one), and
 * records at most taken ranges.
 */
static int room_locked(struct lynx_arena *a, size_t taken, size_t chunks)
{
	size_t needed = taken + chunks;

	if (needed > a->free_capacity) {
		size_t capacity = a->free_capacity ? a->free_capacity : 16;
		struct free_range *grown;

		while (capacity < needed)
			capacity *= 2;
		grown = realloc(a->free, capacity * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		a->free = grown;
		a->free_capacity = capacity;
	}
	return table_reserve_locked(a, taken);
}

/* First fit: takes size bytes from the lowest free range that holds them. Returns 0,
 * -ENOSPC if no free range is large enough, or -ENOMEM. */
static int range_take_locked(struct lynx_arena *a, size_t size, CUdeviceptr *out)
{
	for (size_t i = 0; i < a->free_count; i++) {
		if (a->free[i].size < size)
			continue;
		/* Before pointing into the free list: room_locked may move it. */
		if (room_locked(a, a->taken + 1, a->chunk_count))
			return -ENOMEM;
		struct free_range *f = &a->free[i];
		*out = f->start;
		f->start += size;
		f->size -= size;
		if (f->size == 0) {
			memmove(f, f + 1, (a->free_count - i - 1) * sizeof(*f));
			a->free_count--;
		}
		a->taken++;
		return 0;
	}
	return -ENOSPC;
}

/* Puts [start, start + size) of chunk back, merged with its free neighbours in the same
 * chunk. Room is there (room_locked). */
static void range_insert_locked(struct lynx_arena *a, uint64_t start, uint64_t size, size_t chunk)
{
	size_t at = 0, high = a->free_count;

	while (at < high) {
		size_t mid = at + (high - at) / 2;

		if (a->free[mid].start < start)
			at = mid + 1;
		else
			high = mid;
	}
	struct free_range *prev = at > 0 ? &a->free[at - 1] : NULL;
	struct free_range *next = at < a->free_count ? &a->free[at] : NULL;
	bool joins_prev = prev && prev->chunk == chunk && prev->start + prev->size == start;
	bool joins_next = next && next->chunk == chunk && start + size == next->start;

	if (joins_prev && joins_next) {
		prev->size += size + next->size;
		memmove(next, next + 1, (a->free_count - at - 1) * sizeof(*next));
		a->free_count--;
	} else if (joins_prev) {
		prev->size += size;
	} else if (joins_next) {
		next->start = start;
		next->size += size;
	} else {
		memmove(&a->free[at + 1], &a->free[at], (a->free_count - at) * sizeof(a->free[0]));
		a->free[at] = (struct free_range){start, size, chunk};
		a->free_count++;
	}
}

static size_t chunk_of_locked(const struct lynx_arena *a, uint64_t addr)
{
	for (size_t i = 0; i < a->chunk_count; i++)
		if (addr - a->chunks[i].base < a->chunks[i].size)
			return i;
	return a->chunk_count; /* not reached: every taken range lies in a chunk */
}

static void range_give_back_locked(struct lynx_arena *a, uint64_t start, uint64_t size)
{
	range_insert_locked(a, start, size, chunk_of_locked(a, start));
	a->taken--;
}

/* Reserves a chunk of at least size bytes and adds it to the free list. */
static int chunk_add(struct lynx_arena *a, size_t size)
{
	size_t bytes = size > a->chunk_bytes ? size : a->chunk_bytes;
	CUdeviceptr base;
	CUresult res = a->driver.mem_address_reserve(&base, bytes, a->granularity, 0, 0);
	int err = 0;

	if (res != CUDA_SUCCESS)
		return driver_failed(a, CALL_mem_address_reserve, res, 0, bytes);
	pthread_mutex_lock(&a->lock);
	if (a->chunk_count == a->chunk_capacity) {
		size_t capacity = a->chunk_capacity ? 2 * a->chunk_capacity : 4;
		struct chunk *grown = realloc(a->chunks, capacity * sizeof(*grown));

		if (!grown) {
			err = -ENOMEM;
			goto out_unlock;
		}
		a->chunks = grown;
		a->chunk_capacity = capacity;
	}
	err = room_locked(a, a->taken, a->chunk_count + 1);
	if (err)
		goto out_unlock;
	a->chunks[a->chunk_count] = (struct chunk){base, bytes};
	range_insert_locked(a, base, bytes, a->chunk_count);
	a->chunk_count++;
	a->stats.reserved_bytes += bytes;
	if (base < atomic_load_explicit(&a->lowest, memory_order_relaxed))
		atomic_store_explicit(&a->lowest, base, memory_order_relaxed);
	if (base + bytes > atomic_load_explicit(&a->highest, memory_order_relaxed))
		atomic_store_explicit(&a->highest, base + bytes, memory_order_relaxed);
out_unlock:
	pthread_mutex_unlock(&a->lock);
	if (err) {
		res = a->driver.mem_address_free(base, bytes);
		if (res != CUDA_SUCCESS)
			driver_failed(a, CALL_mem_address_free, res, base, bytes);
	}
	return err;
}

/* Takes size bytes of address space, reserving a new chunk when none is free. */
static int range_take(struct lynx_arena *a, size_t size, CUdeviceptr *out)
{
	for (;;) {
		pthread_mutex_lock(&a->lock);
		int err = range_take_locked(a, size, out);
		pthread_mutex_unlock(&a->lock);
		if (err != -ENOSPC)
			return err;
		/* Another thread may take the new chunk first; then this one reserves again. */
		err = chunk_add(a, size);
		if (err)
			return err;
	}
}

/* ---- Physical memory (driver calls, without the mutex) --------------------------------- */

/* Maps handle read-write at [base, base + size); on failure nothing is mapped. */
static int map_handle(struct lynx_arena *a, CUdeviceptr base, size_t size,
                      CUmemGenericAllocationHandle handle)
{
	CUresult res = a->driver.mem_map(base, size, 0, handle, 0);
	int err;

	if (res != CUDA_SUCCESS)
		return driver_failed(a, CALL_mem_map, res, base, size);
	res = a->driver.mem_set_access(base, size, &a->read_write, 1);
	if (res == CUDA_SUCCESS)
		return 0;
	err = driver_failed(a, CALL_mem_set_access, res, base, size);
	res = a->driver.mem_unmap(base, size);
	if (res != CUDA_SUCCESS)
		driver_failed(a, CALL_mem_unmap, res, base, size);
	return err;
}

/* New memory, mapped read-write at [base, base + size); on failure nothing is held. */
static int back_range(struct lynx_arena *a, CUdeviceptr base, size_t size,
                      CUmemGenericAllocationHandle *out)
{
	CUmemGenericAllocationHandle handle;
	CUresult res = a->driver.mem_create(&handle, size, &a->prop, 0);
	int err;

	if (res != CUDA_SUCCESS)
		return driver_failed(a, CALL_mem_create, res, base, size);
	err = map_handle(a, base, size, handle);
	if (err) {
		res = a->driver.mem_release(handle);
		if (res != CUDA_SUCCESS)
			driver_failed(a, CALL_mem_release, res, base, size);
		return err;
	}
	*out = handle;
	return 0;
}

static int release_handle(struct lynx_arena *a, CUmemGenericAllocationHandle handle,
                          CUdeviceptr base, size_t size)
{
	CUresult res = a->driver.mem_release(handle);

	return res == CUDA_SUCCESS ? 0 : driver_failed(a, CALL_mem_release, res, base, size);
}

static void resident_add_locked(struct lynx_arena *a, uint64_t size)
{
	a->stats.resident_bytes += size;
	if (a->stats.resident_bytes > a->stats.peak_resident_bytes)
		a->stats.peak_resident_bytes = a->stats.resident_bytes;
}

/* ---- The API --------------------------------------------------------------------------- */

/* Device memory on device, as the arena maps it. */
static CUmemAllocationProp device_prop(int device)
{
	CUmemAllocationProp prop = {0};

	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = device;
	return prop;
}

int lynx_arena_device_granularity(const struct lynx_arena_driver *driver, int device, size_t *out)
{
	CUmemAllocationProp prop = device_prop(device);
	size_t g = 0;
	CUresult res;

	if (!driver || !driver->mem_get_allocation_granularity)
		return -EINVAL;
	res = driver->mem_get_allocation_granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (res != CUDA_SUCCESS)
		return errno_of(res);
	if (!g || (g & (g - 1)))
		return -EINVAL;
	*out = g;
	return 0;
}

int lynx_arena_create(const struct lynx_arena_driver *driver, int device, size_t reserve_bytes,
                      struct lynx_arena **out)
{
	struct lynx_arena *a;
	struct record_table *t;
	CUresult res;
	int err;

	if (!driver || !out || reserve_bytes == 0)
		return -EINVAL;
#define LYNX_ARENA_DRIVER_CALL(field, symbol, version) \
	if (!driver->field)                            \
		return -EINVAL;
	LYNX_ARENA_DRIVER_CALLS
#undef LYNX_ARENA_DRIVER_CALL
	a = calloc(1, sizeof(*a));
	t = calloc(1, sizeof(*t) + INITIAL_RECORDS * sizeof(t->records[0]));
	if (!a || !t) {
		err = -ENOMEM;
		goto out_free;
	}
	t->capacity = INITIAL_RECORDS;
	atomic_init(&a->table, t);
	atomic_init(&a->lowest, UINT64_MAX);
	pthread_mutex_init(&a->lock, NULL);
	a->driver = *driver;
	a->prop = device_prop(device);
	a->read_write.location = a->prop.location;
	a->read_write.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	res = driver->mem_get_allocation_granularity(&a->granularity, &a->prop,
	                                             CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (res != CUDA_SUCCESS) {
		err = driver_failed(a, CALL_mem_get_allocation_granularity, res, 0, 0);
		goto out_destroy_lock;
	}
	/* CUDA's granularities are powers of two; the rounding below relies on it. */
	if (a->granularity == 0 || (a->granularity & (a->granularity - 1)) ||
	    reserve_bytes > SIZE_MAX - a->granularity) {
		err = -EINVAL;
		goto out_destroy_lock;
	}
	a->chunk_bytes = (reserve_bytes + a->granularity - 1) & ~(a->granularity - 1);
	err = chunk_add(a, a->chunk_bytes);
	if (err)
		goto out_destroy_lock;
	*out = a;
	return 0;
out_destroy_lock:
	pthread_mutex_destroy(&a->lock);
	free(a->chunks);
	free(a->free);
out_free:
	free(t);
	free(a);
	return err;
}

int lynx_arena_destroy(struct lynx_arena *a)
{
	struct record_table *t;
	size_t count;
	int err = 0;

	if (!a)
		return 0;
	t = table_of(a);
	count = atomic_load_explicit(&a->count, memory_order_relaxed);
	for (size_t i = 0; i < count; i++) {
		struct record *r = &t->records[i];
		CUdeviceptr base = atomic_load_explicit(&r->base, memory_order_relaxed);
		CUresult res;

		if (record_state(r) == LYNX_ARENA_RESIDENT) {
			res = a->driver.mem_unmap(base, record_size(r));
			if (res != CUDA_SUCCESS)
				err = driver_failed(a, CALL_mem_unmap, res, base, record_size(r));
		}
		if (r->holds_handle && release_handle(a, r->handle, base, record_size(r)))
			err = -EIO;
	}
	for (size_t i = 0; i < a->chunk_count; i++) {
		CUresult res = a->driver.mem_address_free(a->chunks[i].base, a->chunks[i].size);

		if (res != CUDA_SUCCESS)
			err = driver_failed(a, CALL_mem_address_free, res, a->chunks[i].base,
			                    a->chunks[i].size);
	}
	while (t) {
		struct record_table *retired = t->retired;

		free(t);
		t = retired;
	}
	pthread_mutex_destroy(&a->lock);
	free(a->chunks);
	free(a->free);
	free(a);
	return err ? -EIO : 0;
}

size_t lynx_arena_granularity(const struct lynx_arena *a)
{
	return a->granularity;
}

int lynx_arena_alloc(struct lynx_arena *a, size_t bytes, CUdeviceptr *out)
{
	CUmemGenericAllocationHandle handle;
	CUdeviceptr base;
	size_t size;
	int err;

	if (bytes == 0 || !out)
		return -EINVAL;
	if (bytes > SIZE_MAX - a->granularity)
		return -ENOMEM;
	size = (bytes + a->granularity - 1) & ~(a->granularity - 1);
	err = range_take(a, size, &base);
	if (err)
		return err;
	/* The range is this thread's: no one else maps it, and find does not see it yet. */
	err = back_range(a, base, size, &handle);
	pthread_mutex_lock(&a->lock);
	if (err) {
		range_give_back_locked(a, base, size);
	} else {
		record_insert_locked(a, base, size, LYNX_ARENA_RESIDENT, handle, true);
		resident_add_locked(a, size);
		a->stats.allocations++;
		*out = base;
	}
	pthread_mutex_unlock(&a->lock);
	return err;
}

int lynx_arena_free(struct lynx_arena *a, CUdeviceptr ptr)
{
	struct record *r;
	enum lynx_arena_state state;
	CUmemGenericAllocationHandle handle;
	bool holds_handle;
	uint64_t size;
	int err = 0;

	pthread_mutex_lock(&a->lock);
	r = record_at_locked(a, ptr);
	if (!r || record_state(r) == LYNX_ARENA_EVICTING ||
	    record_state(r) == LYNX_ARENA_RESTORING) {
		pthread_mutex_unlock(&a->lock);
		return r ? -EBUSY : -EINVAL;
	}
	/* Removed first, so that a second free of ptr fails while this one runs. */
	state = record_state(r);
	size = record_size(r);
	handle = r->handle;
	holds_handle = r->holds_handle;
	record_remove_locked(a, r);
	pthread_mutex_unlock(&a->lock);

	if (state == LYNX_ARENA_RESIDENT) {
		CUresult res = a->driver.mem_unmap(ptr, size);

		if (res != CUDA_SUCCESS) {
			err = driver_failed(a, CALL_mem_unmap, res, ptr, size);
			pthread_mutex_lock(&a->lock);
			record_insert_locked(a, ptr, size, state, handle, holds_handle);
			pthread_mutex_unlock(&a->lock);
			return err;
		}
	}
	if (holds_handle)
		err = release_handle(a, handle, ptr, size);
	pthread_mutex_lock(&a->lock);
	range_give_back_locked(a, ptr, size);
	if (state == LYNX_ARENA_RESIDENT && holds_handle)
		a->stats.resident_bytes -= size;
	else if (state == LYNX_ARENA_EVICTED)
		a->stats.evicted_bytes -= size;
	a->stats.frees++;
	pthread_mutex_unlock(&a->lock);
	return err;
}

/* What a transition needs of a record while it runs without the mutex. */
struct held {
	uint64_t size;
	CUmemGenericAllocationHandle handle;
	bool holds_handle;
};

/* Locks, finds ptr's record and checks it is in state `from`; then marks it `during` and
 * copies what the driver calls need. Returns 0 or arena.h's errno; the mutex is released. */
static int transition_begin(struct lynx_arena *a, CUdeviceptr ptr, enum lynx_arena_state from,
                            enum lynx_arena_state during, struct held *held)
{
	struct record *r;
	int err = 0;

	pthread_mutex_lock(&a->lock);
	r = record_at_locked(a, ptr);
	if (!r)
		err = -EINVAL;
	else if (record_state(r) == LYNX_ARENA_EVICTING || record_state(r) == LYNX_ARENA_RESTORING)
		err = -EBUSY;
	else if (record_state(r) != from)
		err = -EALREADY;
	if (!err) {
		record_set_state_locked(a, r, during);
		*held = (struct held){record_size(r), r->handle, r->holds_handle};
	}
	pthread_mutex_unlock(&a->lock);
	return err;
}

/* Under the mutex: sets ptr's record to `to` and returns it. The record is there: free,
 * evict and restore refuse a record in transition. */
static struct record *transition_end_locked(struct lynx_arena *a, CUdeviceptr ptr,
                                            enum lynx_arena_state to)
{
	struct record *r = record_at_locked(a, ptr);

	record_set_state_locked(a, r, to);
	return r;
}

int lynx_arena_evict(struct lynx_arena *a, CUdeviceptr ptr)
{
	struct held held;
	struct record *r;
	CUresult res;
	int err = transition_begin(a, ptr, LYNX_ARENA_RESIDENT, LYNX_ARENA_EVICTING, &held);

	if (err)
		return err;
	res = a->driver.mem_unmap(ptr, held.size);
	if (res != CUDA_SUCCESS) {
		err = driver_failed(a, CALL_mem_unmap, res, ptr, held.size);
		pthread_mutex_lock(&a->lock);
		transition_end_locked(a, ptr, LYNX_ARENA_RESIDENT);
		pthread_mutex_unlock(&a->lock);
		return err;
	}
	/* A donor's memory lives on with its new owner: only the mapping goes. */
	if (held.holds_handle)
		err = release_handle(a, held.handle, ptr, held.size);
	pthread_mutex_lock(&a->lock);
	r = transition_end_locked(a, ptr, LYNX_ARENA_EVICTED);
	r->holds_handle = err != 0;
	if (held.holds_handle)
		a->stats.resident_bytes -= held.size;
	a->stats.evicted_bytes += held.size;
	a->stats.evictions++;
	pthread_mutex_unlock(&a->lock);
	return err;
}

int lynx_arena_restore(struct lynx_arena *a, CUdeviceptr ptr)
{
	struct held held;
	struct record *r;
	CUmemGenericAllocationHandle handle = 0;
	int err = transition_begin(a, ptr, LYNX_ARENA_EVICTED, LYNX_ARENA_RESTORING, &held);

	if (err)
		return err;
	/* A handle that an eviction could not release still holds memory: map it again. */
	if (held.holds_handle) {
		handle = held.handle;
		err = map_handle(a, ptr, held.size, handle);
	} else {
		err = back_range(a, ptr, held.size, &handle);
	}
	pthread_mutex_lock(&a->lock);
	if (err) {
		transition_end_locked(a, ptr, LYNX_ARENA_EVICTED);
	} else {
		r = transition_end_locked(a, ptr, LYNX_ARENA_RESIDENT);
		r->handle = handle;
		r->holds_handle = true;
		a->stats.evicted_bytes -= held.size;
		resident_add_locked(a, held.size);
		a->stats.restorations++;
	}
	pthread_mutex_unlock(&a->lock);
	return err;
}

/*
 * Takes donor's handle for a new owner: the donor must be a RESIDENT allocation of size
 * bytes that owns it. It stays mapped, owning nothing. Returns 0 or -EINVAL, -EALREADY
 * (the donor owns no memory), -EBUSY.
 */
static int donation_begin(struct lynx_arena *a, CUdeviceptr donor, size_t size,
                          CUmemGenericAllocationHandle *handle)
{
	struct record *r;
	int err = 0;

	pthread_mutex_lock(&a->lock);
	r = record_at_locked(a, donor);
	if (!r)
		err = -EINVAL;
	else if (record_state(r) == LYNX_ARENA_EVICTING || record_state(r) == LYNX_ARENA_RESTORING)
		err = -EBUSY;
	else if (record_state(r) != LYNX_ARENA_RESIDENT || !r->holds_handle)
		err = -EALREADY;
	else if (record_size(r) != size)
		err = -EINVAL;
	if (!err) {
		*handle = r->handle;
		r->holds_handle = false;
	}
	pthread_mutex_unlock(&a->lock);
	return err;
}

/* The donation failed: the donor owns its memory again. */
static void donation_undo_locked(struct lynx_arena *a, CUdeviceptr donor)
{
	struct record *r = record_at_locked(a, donor);

	if (r)
		r->holds_handle = true;
}

static size_t rounded(const struct lynx_arena *a, size_t bytes)
{
	return (bytes + a->granularity - 1) & ~(a->granularity - 1);
}

int lynx_arena_alloc_from(struct lynx_arena *a, CUdeviceptr donor, size_t bytes, CUdeviceptr *out)
{
	CUmemGenericAllocationHandle handle;
	CUdeviceptr base = 0;
	size_t size;
	int err;

	if (bytes == 0 || !out || bytes > SIZE_MAX - a->granularity)
		return -EINVAL;
	size = rounded(a, bytes);
	if ((err = donation_begin(a, donor, size, &handle)))
		return err;
	if (!(err = range_take(a, size, &base)))
		err = map_handle(a, base, size, handle);
	pthread_mutex_lock(&a->lock);
	if (err) {
		if (base)
			range_give_back_locked(a, base, size);
		donation_undo_locked(a, donor);
	} else {
		record_insert_locked(a, base, size, LYNX_ARENA_RESIDENT, handle, true);
		a->stats.allocations++;
		a->stats.donations++;
		*out = base;
	}
	pthread_mutex_unlock(&a->lock);
	return err;
}

int lynx_arena_restore_from(struct lynx_arena *a, CUdeviceptr ptr, CUdeviceptr donor)
{
	CUmemGenericAllocationHandle handle;
	struct held held;
	struct record *r;
	int err = transition_begin(a, ptr, LYNX_ARENA_EVICTED, LYNX_ARENA_RESTORING, &held);

	if (err)
		return err;
	/* Memory the eviction could not release comes first: it is this allocation's. */
	if (held.holds_handle || (err = donation_begin(a, donor, held.size, &handle))) {
		pthread_mutex_lock(&a->lock);
		transition_end_locked(a, ptr, LYNX_ARENA_EVICTED);
		pthread_mutex_unlock(&a->lock);
		return held.holds_handle ? -EALREADY : err;
	}
	err = map_handle(a, ptr, held.size, handle);
	pthread_mutex_lock(&a->lock);
	if (err) {
		transition_end_locked(a, ptr, LYNX_ARENA_EVICTED);
		donation_undo_locked(a, donor);
	} else {
		r = transition_end_locked(a, ptr, LYNX_ARENA_RESIDENT);
		r->handle = handle;
		r->holds_handle = true;
		a->stats.evicted_bytes -= held.size;
		a->stats.restorations++;
		a->stats.donations++;
	}
	pthread_mutex_unlock(&a->lock);
	return err;
}

void lynx_arena_stats(struct lynx_arena *a, struct lynx_arena_stats *out)
{
	pthread_mutex_lock(&a->lock);
	*out = a->stats;
	out->chunks = a->chunk_count;
	out->free_ranges = a->free_count;
	out->free_bytes = 0;
	for (size_t i = 0; i < a->free_count; i++)
		out->free_bytes += a->free[i].size;
	pthread_mutex_unlock(&a->lock);
}
