/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The VMM arena: device memory that the executor can evict and restore at the same
 * address. One arena serves one device. It reserves virtual address space in chunks
 * (cuMemAddressReserve) and backs each allocation with one physical handle of its own
 * (cuMemCreate + cuMemMap + cuMemSetAccess), so that evicting an allocation (cuMemUnmap +
 * cuMemRelease) gives its memory back while its address stays reserved for the restore.
 * Sizes are rounded up to the device's minimum VMM granularity, queried at creation.
 *
 * The arena never links libcuda: it calls the driver through the table it is given
 * (struct lynx_arena_driver), which the shim fills from its real functions and tests fill
 * from simgpu, or with fakes that fail on demand.
 *
 * The arena does not keep an evicted allocation's bytes: after a restore its contents are
 * undefined. Offloading or recomputing them is the executor's job. Nor does it order
 * anything against device work: the caller evicts only once the range's last use has
 * completed, and does not use a range before its restore returned.
 *
 * Return values: the actions return 0 or a negative errno, always one of these:
 *   -ENOMEM  out of device memory (cuMemCreate, cuMemMap), of address space
 *            (cuMemAddressReserve), or of host memory for the arena's own lists. Frees
 *            may make room: wait for some, then retry.
 *   -EAGAIN  the driver refused because a stream is capturing a CUDA graph
 *            (CUDA_ERROR_STREAM_CAPTURE_*): back off and retry after the capture.
 *   -EINVAL  ptr is not the base of a live allocation of this arena, or a bad argument.
 *   -EALREADY the allocation is already in the state asked for (evict of an evicted one,
 *            restore of a resident one).
 *   -EBUSY   another thread is evicting or restoring this allocation right now.
 *   -EIO     any other driver failure; the first of each driver function is logged.
 * Each function says in which state a failure leaves the allocation.
 *
 * Thread safety: alloc, free, evict, restore and stats may be called from any thread at
 * once. They serialise on one mutex per arena, which is never held across a driver call
 * (a driver call may take milliseconds, and a lock held across CUDA can deadlock with
 * its callbacks), so an allocation's transition is visible as EVICTING or RESTORING
 * while its driver calls run. lynx_arena_find takes no lock (see arena.c). Create and
 * destroy must not run concurrently with anything else on the same arena. After fork, the
 * child must not use an arena its parent created (neither CUDA nor the mutex survive).
 */
#ifndef LYNX_ARENA_H
#define LYNX_ARENA_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The driver functions the arena calls: LYNX_ARENA_DRIVER_CALL(field, symbol, version).
 * version is the cuGetProcAddress key of the ABI, and the field's type is cudaTypedefs.h's
 * PFN_<symbol>_v<version>.
 */
#define LYNX_ARENA_DRIVER_CALLS                                                 \
	LYNX_ARENA_DRIVER_CALL(mem_address_reserve, cuMemAddressReserve, 10020) \
	LYNX_ARENA_DRIVER_CALL(mem_address_free, cuMemAddressFree, 10020)       \
	LYNX_ARENA_DRIVER_CALL(mem_create, cuMemCreate, 10020)                  \
	LYNX_ARENA_DRIVER_CALL(mem_release, cuMemRelease, 10020)                \
	LYNX_ARENA_DRIVER_CALL(mem_map, cuMemMap, 10020)                        \
	LYNX_ARENA_DRIVER_CALL(mem_unmap, cuMemUnmap, 10020)                    \
	LYNX_ARENA_DRIVER_CALL(mem_set_access, cuMemSetAccess, 10020)           \
	LYNX_ARENA_DRIVER_CALL(mem_get_allocation_granularity, cuMemGetAllocationGranularity, 10020)

struct lynx_arena_driver {
#define LYNX_ARENA_DRIVER_CALL(field, symbol, version) PFN_##symbol##_v##version field;
	LYNX_ARENA_DRIVER_CALLS
#undef LYNX_ARENA_DRIVER_CALL
};

/* Finds one driver function: symbol at ABI version (as cuGetProcAddress takes them), or
 * NULL if there is none. */
typedef void *(*lynx_arena_lookup)(const char *symbol, int cuda_version, void *arg);

/* Fills every entry of driver through lookup. Returns 0, or -ENOENT if any is missing
 * (that entry is then NULL, and lynx_arena_create refuses the table). */
int lynx_arena_driver_resolve(struct lynx_arena_driver *driver, lynx_arena_lookup lookup,
                              void *arg);

/* LYNX_ARENA_STATE(name, text): the states of an allocation. */
#define LYNX_ARENA_STATES                                                                    \
	LYNX_ARENA_STATE(RESIDENT, "resident")   /* mapped read-write: kernels may use it */ \
	LYNX_ARENA_STATE(EVICTING, "evicting")   /* being unmapped: do not use */            \
	LYNX_ARENA_STATE(EVICTED, "evicted")     /* address reserved, no memory: faults */   \
	LYNX_ARENA_STATE(RESTORING, "restoring") /* being mapped again: not usable yet */

enum lynx_arena_state {
#define LYNX_ARENA_STATE(name, text) LYNX_ARENA_##name,
	LYNX_ARENA_STATES
#undef LYNX_ARENA_STATE
	        LYNX_ARENA_STATE_COUNT
};

/* "resident", "evicted", ...; "unknown" for a value out of range. */
const char *lynx_arena_state_name(enum lynx_arena_state state);

/* LYNX_ARENA_STAT(field, meaning): the arena's counters. Bytes are granule-rounded. */
#define LYNX_ARENA_STATS                                                                        \
	LYNX_ARENA_STAT(reserved_bytes, "virtual address space reserved from the driver")       \
	LYNX_ARENA_STAT(resident_bytes, "bytes of allocations that hold physical memory")       \
	LYNX_ARENA_STAT(evicted_bytes, "bytes of allocations evicted (address kept)")           \
	LYNX_ARENA_STAT(peak_resident_bytes, "highest resident_bytes since creation")           \
	LYNX_ARENA_STAT(allocations, "successful lynx_arena_alloc calls")                       \
	LYNX_ARENA_STAT(frees, "successful lynx_arena_free calls")                              \
	LYNX_ARENA_STAT(evictions, "successful lynx_arena_evict calls")                         \
	LYNX_ARENA_STAT(restorations, "successful restores (lynx_arena_restore and _from)")     \
	LYNX_ARENA_STAT(donations, "memory handed from one allocation to another (_from)")      \
	LYNX_ARENA_STAT(out_of_memory, "driver calls that failed for lack of memory (-ENOMEM)") \
	LYNX_ARENA_STAT(failures, "driver calls that failed otherwise (-EAGAIN, -EIO)")         \
	LYNX_ARENA_STAT(chunks, "address ranges reserved (the first, and each growth)")         \
	LYNX_ARENA_STAT(free_ranges, "unallocated address ranges, after coalescing")            \
	LYNX_ARENA_STAT(free_bytes, "unallocated address space in all chunks")

struct lynx_arena_stats {
#define LYNX_ARENA_STAT(field, meaning) uint64_t field;
	LYNX_ARENA_STATS
#undef LYNX_ARENA_STAT
};

/* What lynx_arena_find answers: the allocation containing an address. */
struct lynx_arena_range {
	CUdeviceptr base;
	size_t size; /* granule-rounded */
	enum lynx_arena_state state;
};

struct lynx_arena;

/*
 * Creates an arena for device (a CUdevice ordinal): queries its minimum VMM granularity
 * and reserves reserve_bytes (rounded up to the granularity) of address space, the size of
 * each later chunk too. driver is copied. The driver must be initialised (cuInit).
 * Returns 0 and *out, or -EINVAL (a NULL driver entry, reserve_bytes 0) or the driver's
 * error as above; nothing is left reserved on failure.
 */
int lynx_arena_create(const struct lynx_arena_driver *driver, int device, size_t reserve_bytes,
                      struct lynx_arena **out);

/*
 * Frees every allocation left (unmapping and releasing the resident ones), gives back the
 * address space and frees the arena. Returns 0, or -EIO if a driver call failed (what it
 * held is then lost). NULL does nothing.
 */
int lynx_arena_destroy(struct lynx_arena *arena);

/* The minimum VMM granularity of the arena's device: every size is a multiple of it. */
size_t lynx_arena_granularity(const struct lynx_arena *arena);

/*
 * The minimum VMM granularity an arena for device would have, before there is one (a
 * planner sizes what it can evict by it). Returns 0 and *out, or -EINVAL (no such driver
 * entry, a granularity that is not a power of two) or the driver's error (-ENOMEM, -EAGAIN,
 * -EIO); nothing is logged.
 */
int lynx_arena_device_granularity(const struct lynx_arena_driver *driver, int device, size_t *out);

/*
 * A new resident allocation of bytes rounded up to the granularity, at a granule-aligned
 * address: the first free range that fits, or a new chunk of max(reserve_bytes, size).
 * Returns 0 and *out, or -EINVAL (bytes 0), -ENOMEM, -EAGAIN, -EIO; on failure nothing is
 * held: the address goes back to the free list and the handle is released.
 */
int lynx_arena_alloc(struct lynx_arena *arena, size_t bytes, CUdeviceptr *out);

/*
 * Frees the allocation based at ptr, resident or evicted: unmaps and releases its memory
 * and returns its address range to the free list (coalesced with its free neighbours).
 * Returns 0; -EINVAL (not a live allocation), -EBUSY (evicting or restoring); -EIO if the
 * unmap failed (the allocation then stays as it was) or the release failed (the allocation
 * is gone and its range free, but its memory is lost).
 */
int lynx_arena_free(struct lynx_arena *arena, CUdeviceptr ptr);

/*
 * Evicts the resident allocation based at ptr: unmaps and releases its memory, keeping
 * its address reserved and the allocation EVICTED, so that touching it faults. Returns 0;
 * -EINVAL, -EALREADY (evicted already), -EBUSY; or the driver's error (-EAGAIN, -EIO):
 * if the unmap failed, the allocation stays RESIDENT; if the release failed, it is EVICTED
 * but keeps its memory, which the restore maps again and the free releases.
 */
int lynx_arena_evict(struct lynx_arena *arena, CUdeviceptr ptr);

/*
 * Restores the evicted allocation based at ptr: new memory mapped read-write at the same
 * address, contents undefined. Returns 0 (RESIDENT); -EINVAL, -EALREADY (resident already),
 * -EBUSY; or -ENOMEM, -EAGAIN, -EIO with the allocation still EVICTED and no new memory
 * held, so the caller may retry, typically after frees for -ENOMEM.
 */
int lynx_arena_restore(struct lynx_arena *arena, CUdeviceptr ptr);

/*
 * Stream-ordered reuse. A stream-ordered allocator hands memory freed on a stream to the
 * next allocation at once, before the device has reached the free: the new owner's work is
 * queued behind the old one's. These two do the same with an allocation's physical memory:
 * donor (a RESIDENT allocation that owns its memory, of the same granule-rounded size)
 * gives its handle to a new allocation of bytes (alloc_from) or to the EVICTED allocation
 * based at ptr (restore_from), which maps it and owns it. The donor stays mapped, since
 * queued work may still read it through its address, but owns nothing: its later evict
 * or free only unmaps it. Ordering the donor's last use before the new owner's first one
 * (an event the new owner's stream waits for) is the caller's, and so is not touching the
 * donor's address again; the donor must not be freed, evicted or restored concurrently.
 * Return 0, or as lynx_arena_alloc and lynx_arena_restore, and -EALREADY when the donor
 * owns no memory (or ptr's eviction kept its own, which lynx_arena_restore maps); on
 * failure nothing changed.
 */
int lynx_arena_alloc_from(struct lynx_arena *arena, CUdeviceptr donor, size_t bytes,
                          CUdeviceptr *out);
int lynx_arena_restore_from(struct lynx_arena *arena, CUdeviceptr ptr, CUdeviceptr donor);

/*
 * The allocation containing addr (any byte of its granule-rounded range), copied into
 * *out: true if there is one. Lock-free: a few loads and a binary search, safe to call
 * per launch parameter from any thread concurrently with the actions above (it may retry
 * while one of them changes the table). Addresses outside every chunk return at once.
 */
bool lynx_arena_find(const struct lynx_arena *arena, CUdeviceptr addr,
                     struct lynx_arena_range *out);

/* A consistent snapshot of the counters (taken under the arena's mutex). */
void lynx_arena_stats(struct lynx_arena *arena, struct lynx_arena_stats *out);

#endif /* LYNX_ARENA_H */
