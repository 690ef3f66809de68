/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tests of the VMM arena on simgpu's driver (dlopened from build/simgpu, reached through
 * cuGetProcAddress like the shim does): granularity, reuse and coalescing, eviction that
 * faults, restore at the same address, out of memory, driver failures injected through the
 * table, find, counters, growth and threads.
 *
 * simgpu reads its settings once per process, so each granularity runs in its own process:
 * the 8 MiB suite in a child forked before simgpu is loaded, the 64 KiB suite in the parent.
 * Both give simgpu 64 MiB of memory, so that filling it is quick.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <dlfcn.h>

#include "../harness.h"
#include "simgpu_driver.h"
#include "../simgpu/simgpu.h"
#include "arena.h"
#include "log.h"

#define KIB (1024ull)
#define MIB (1024ull * 1024)
#define CAPACITY (64 * MIB)
#define RESERVE (256 * MIB)

static struct lynx_arena_driver simgpu_driver;
static void (*memory_stats)(struct simgpu_memory_stats *out);
static uint64_t (*call_count)(const char *symbol);
static size_t expected_granularity;

/* ---- simgpu ---------------------------------------------------------------------------- */

/* Loads simgpu's libcuda.so.1 with the given granularity and initialises it (simgpu's VMM
 * needs only cuInit; on a GPU the calling thread also has a current context). */
static int simgpu_load(const char *granularity, size_t granularity_bytes)
{
	void *libcuda;

	setenv("SIMGPU_VMM_GRANULARITY", granularity, 1);
	setenv("SIMGPU_MEM_CAPACITY", "64M", 1);
	if (!(libcuda = simgpu_driver_load()))
		return -1;
	memory_stats =
	        (void (*)(struct simgpu_memory_stats *))dlsym(libcuda, "simgpu_memory_stats");
	call_count = (uint64_t(*)(const char *))dlsym(libcuda, "simgpu_counter");
	if (!memory_stats || !call_count)
		return -1;
	expected_granularity = granularity_bytes;
	return lynx_arena_driver_resolve(&simgpu_driver, simgpu_proc, NULL);
}

static size_t physical_bytes(void)
{
	struct simgpu_memory_stats stats;

	memory_stats(&stats);
	return stats.current_bytes;
}

/* ---- Fault injection through the driver table ------------------------------------------ */

/* The next call of each function returns this error instead of calling simgpu. */
static CUresult fail_create, fail_map, fail_unmap, fail_release;

static CUresult injected(CUresult *slot)
{
	CUresult error = *slot;

	*slot = CUDA_SUCCESS;
	return error;
}

static CUresult faulty_create(CUmemGenericAllocationHandle *handle, size_t size,
                              const CUmemAllocationProp *prop, unsigned long long flags)
{
	CUresult error = injected(&fail_create);

	return error ? error : simgpu_driver.mem_create(handle, size, prop, flags);
}

static CUresult faulty_map(CUdeviceptr ptr, size_t size, size_t offset,
                           CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	CUresult error = injected(&fail_map);

	return error ? error : simgpu_driver.mem_map(ptr, size, offset, handle, flags);
}

static CUresult faulty_unmap(CUdeviceptr ptr, size_t size)
{
	CUresult error = injected(&fail_unmap);

	return error ? error : simgpu_driver.mem_unmap(ptr, size);
}

static CUresult faulty_release(CUmemGenericAllocationHandle handle)
{
	CUresult error = injected(&fail_release);

	return error ? error : simgpu_driver.mem_release(handle);
}

/* ---- Fixtures and helpers -------------------------------------------------------------- */

struct fixture {
	struct lynx_arena *arena;
	size_t granularity;
	size_t physical_before;
};

static int arena_setup_with(void **state, const struct lynx_arena_driver *driver, size_t reserve)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	f->physical_before = physical_bytes();
	if (lynx_arena_create(driver, 0, reserve, &f->arena)) {
		free(f);
		return -1;
	}
	f->granularity = lynx_arena_granularity(f->arena);
	*state = f;
	return 0;
}

static int arena_setup(void **state)
{
	return arena_setup_with(state, &simgpu_driver, RESERVE);
}

static int faulty_arena_setup(void **state)
{
	struct lynx_arena_driver faulty = simgpu_driver;

	faulty.mem_create = faulty_create;
	faulty.mem_map = faulty_map;
	faulty.mem_unmap = faulty_unmap;
	faulty.mem_release = faulty_release;
	return arena_setup_with(state, &faulty, RESERVE);
}

/* A small first chunk (four granules), so that allocations make the arena grow. */
static int small_arena_setup(void **state)
{
	return arena_setup_with(state, &simgpu_driver, 4 * expected_granularity);
}

/* Destroys the arena; fails if that failed or if physical memory was not all given back. */
static int arena_teardown(void **state)
{
	struct fixture *f = *state;
	int destroyed = lynx_arena_destroy(f->arena);
	size_t leaked = physical_bytes() - f->physical_before;

	free(f);
	if (destroyed || leaked) {
		fprintf(stderr, "destroy returned %d, %zu bytes not given back\n", destroyed,
		        leaked);
		return -1;
	}
	return 0;
}

static CUdeviceptr alloc_ok(struct fixture *f, size_t bytes)
{
	CUdeviceptr ptr = 0;

	assert_int_equal(lynx_arena_alloc(f->arena, bytes, &ptr), 0);
	assert_true(ptr != 0);
	return ptr;
}

static struct lynx_arena_range found(struct fixture *f, CUdeviceptr addr)
{
	struct lynx_arena_range range;

	assert_true(lynx_arena_find(f->arena, addr, &range));
	return range;
}

static struct lynx_arena_stats stats_of(struct fixture *f)
{
	struct lynx_arena_stats stats;

	lynx_arena_stats(f->arena, &stats);
	return stats;
}

/* Runs fn(arg) in a child; returns the signal that killed it, or 0 if it exited. */
static int signal_of_child(void (*fn)(void *), void *arg)
{
	int status = 0;
	pid_t pid = fork();

	if (pid == 0) {
		/* CMocka's handler would catch the fault and run the suite on in the child. */
		signal(SIGSEGV, SIG_DFL);
		fn(arg);
		_exit(0);
	}
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

static void touch(void *p)
{
	*(volatile char *)p = 1;
}

static void *host(CUdeviceptr ptr)
{
	return (void *)(uintptr_t)ptr;
}

/* ---- Granularity ----------------------------------------------------------------------- */

/* Whatever the device's granularity, sizes and addresses are multiples of it, and the
 * physical memory simgpu hands out is exactly the rounded size. */
static void test_sizes_and_addresses_follow_the_device_granularity(void **state)
{
	struct fixture *f = *state;
	size_t g = f->granularity;

	assert_int_equal(g, expected_granularity);
	CUdeviceptr one_byte = alloc_ok(f, 1);
	assert_int_equal(physical_bytes(), f->physical_before + g);
	CUdeviceptr just_over = alloc_ok(f, g + 1);
	assert_int_equal(physical_bytes(), f->physical_before + 3 * g);

	assert_int_equal(one_byte % g, 0);
	assert_int_equal(found(f, one_byte).size, g);
	assert_int_equal(just_over, one_byte + g);
	assert_int_equal(found(f, just_over).size, 2 * g);
	assert_int_equal(stats_of(f).reserved_bytes % g, 0);
	assert_int_equal(lynx_arena_free(f->arena, one_byte), 0);
	assert_int_equal(lynx_arena_free(f->arena, just_over), 0);
	/* The same granularity before any arena (what a planner sizes evictions by). */
	size_t before = 0;
	assert_int_equal(lynx_arena_device_granularity(&simgpu_driver, 0, &before), 0);
	assert_int_equal(before, g);
	struct lynx_arena_driver none = {0};
	assert_int_equal(lynx_arena_device_granularity(&none, 0, &before), -EINVAL);
}

/* ---- Reuse and coalescing -------------------------------------------------------------- */

static void test_a_freed_range_is_reused(void **state)
{
	struct fixture *f = *state;
	CUdeviceptr first = alloc_ok(f, 3 * f->granularity);

	assert_int_equal(lynx_arena_free(f->arena, first), 0);
	assert_int_equal(alloc_ok(f, 3 * f->granularity), first);
	assert_int_equal(lynx_arena_free(f->arena, first), 0);
}

static void test_freed_neighbours_coalesce(void **state)
{
	struct fixture *f = *state;
	size_t g = f->granularity;
	CUdeviceptr a = alloc_ok(f, g), b = alloc_ok(f, g), c = alloc_ok(f, g);

	assert_int_equal(b, a + g);
	assert_int_equal(c, b + g);
	assert_int_equal(stats_of(f).free_ranges, 1); /* the rest of the chunk */
	assert_int_equal(lynx_arena_free(f->arena, a), 0);
	assert_int_equal(stats_of(f).free_ranges, 2);
	assert_int_equal(lynx_arena_free(f->arena, c), 0); /* joins the rest */
	assert_int_equal(stats_of(f).free_ranges, 2);
	assert_int_equal(lynx_arena_free(f->arena, b), 0); /* joins both sides */
	assert_int_equal(stats_of(f).free_ranges, 1);
	/* Only a coalesced range can hold all three at a's address. */
	CUdeviceptr whole = alloc_ok(f, 3 * g);
	assert_int_equal(whole, a);
	assert_int_equal(lynx_arena_free(f->arena, whole), 0);
}

/* ---- Eviction and restoration ---------------------------------------------------------- */

static void test_an_evicted_range_faults_and_gives_its_memory_back(void **state)
{
	struct fixture *f = *state;
	size_t size = 4 * f->granularity;
	CUdeviceptr ptr = alloc_ok(f, size);

	assert_int_equal(signal_of_child(touch, host(ptr)), 0);
	assert_int_equal(signal_of_child(touch, host(ptr + size - 1)), 0);
	assert_int_equal(lynx_arena_evict(f->arena, ptr), 0);
	assert_int_equal(signal_of_child(touch, host(ptr)), SIGSEGV);
	assert_int_equal(signal_of_child(touch, host(ptr + size - 1)), SIGSEGV);
	assert_int_equal(physical_bytes(), f->physical_before);
	assert_int_equal(found(f, ptr + 1).state, LYNX_ARENA_EVICTED);
	assert_int_equal(found(f, ptr + 1).base, ptr);
	/* The address stays reserved: a new allocation goes elsewhere. */
	CUdeviceptr other = alloc_ok(f, f->granularity);
	assert_true(other >= ptr + size);
	assert_int_equal(lynx_arena_free(f->arena, other), 0);
	assert_int_equal(lynx_arena_free(f->arena, ptr), 0);
}

static void test_restore_maps_new_memory_at_the_same_address(void **state)
{
	struct fixture *f = *state;
	size_t size = 2 * f->granularity;
	CUdeviceptr ptr = alloc_ok(f, size);
	unsigned char *bytes = host(ptr);

	memset(bytes, 0xa5, size);
	assert_int_equal(lynx_arena_evict(f->arena, ptr), 0);
	assert_int_equal(lynx_arena_restore(f->arena, ptr), 0);
	assert_int_equal(found(f, ptr).state, LYNX_ARENA_RESIDENT);
	assert_int_equal(found(f, ptr).size, size);
	assert_int_equal(physical_bytes(), f->physical_before + size);
	assert_int_equal(signal_of_child(touch, host(ptr + size - 1)), 0);
	/* The arena keeps no bytes: what was written before the eviction is gone (simgpu's
	 * new memory is zero; a GPU's is undefined). Offload and recompute bring data back. */
	assert_int_not_equal(bytes[0], 0xa5);
	assert_int_not_equal(bytes[size - 1], 0xa5);
	memset(bytes, 0x3c, size);
	assert_int_equal(bytes[size - 1], 0x3c);
	assert_int_equal(lynx_arena_free(f->arena, ptr), 0);
}

/* Stream-ordered reuse: the new owner sees the donor's bytes (one memory, two addresses),
 * the donor's later evict and free only unmap, and the memory is counted once. */
static void test_a_donor_hands_its_memory_to_a_new_allocation(void **state)
{
	struct fixture *f = *state;
	size_t size = 2 * f->granularity;
	CUdeviceptr donor = alloc_ok(f, size), taker = 0;

	memset(host(donor), 0x5a, size);
	assert_int_equal(lynx_arena_alloc_from(f->arena, donor, size - 1, &taker), 0);
	assert_true(taker != donor);
	assert_int_equal(physical_bytes(), f->physical_before + size);
	assert_int_equal(((unsigned char *)host(taker))[size - 1], 0x5a);
	/* The donor owns nothing now: it cannot give twice, and its eviction frees nothing. */
	assert_int_equal(lynx_arena_alloc_from(f->arena, donor, size, &taker), -EALREADY);
	assert_int_equal(lynx_arena_evict(f->arena, donor), 0);
	assert_int_equal(signal_of_child(touch, host(donor)), SIGSEGV);
	assert_int_equal(signal_of_child(touch, host(taker)), 0);
	assert_int_equal(physical_bytes(), f->physical_before + size);
	struct lynx_arena_stats st;
	lynx_arena_stats(f->arena, &st);
	assert_int_equal(st.resident_bytes, size);
	assert_int_equal(st.donations, 1);
	/* A different size is refused and changes nothing. */
	CUdeviceptr small = alloc_ok(f, f->granularity), none = 0;
	assert_int_equal(lynx_arena_alloc_from(f->arena, small, size, &none), -EINVAL);
	assert_int_equal(found(f, small).state, LYNX_ARENA_RESIDENT);
	assert_int_equal(lynx_arena_free(f->arena, small), 0);
	assert_int_equal(lynx_arena_free(f->arena, donor), 0);
	assert_int_equal(physical_bytes(), f->physical_before + size);
	assert_int_equal(lynx_arena_free(f->arena, taker), 0);
	assert_int_equal(physical_bytes(), f->physical_before);
}

static void test_a_donor_hands_its_memory_to_a_restore(void **state)
{
	struct fixture *f = *state;
	size_t size = f->granularity;
	CUdeviceptr evicted = alloc_ok(f, size), donor = alloc_ok(f, size);

	assert_int_equal(lynx_arena_evict(f->arena, evicted), 0);
	memset(host(donor), 0x7e, size);
	assert_int_equal(lynx_arena_restore_from(f->arena, evicted, donor), 0);
	assert_int_equal(found(f, evicted).state, LYNX_ARENA_RESIDENT);
	assert_int_equal(((unsigned char *)host(evicted))[0], 0x7e);
	assert_int_equal(physical_bytes(), f->physical_before + size);
	/* The restored one owns the memory: freeing the hollow donor keeps it. */
	assert_int_equal(lynx_arena_free(f->arena, donor), 0);
	assert_int_equal(((unsigned char *)host(evicted))[size - 1], 0x7e);
	assert_int_equal(physical_bytes(), f->physical_before + size);
	/* A resident one is not restored; nothing is taken from the donor then. */
	CUdeviceptr other = alloc_ok(f, size);
	assert_int_equal(lynx_arena_restore_from(f->arena, evicted, other), -EALREADY);
	assert_int_equal(lynx_arena_evict(f->arena, other), 0);
	assert_int_equal(lynx_arena_free(f->arena, other), 0);
	assert_int_equal(lynx_arena_free(f->arena, evicted), 0);
	assert_int_equal(physical_bytes(), f->physical_before);
}

static void test_transitions_refuse_the_wrong_state(void **state)
{
	struct fixture *f = *state;
	CUdeviceptr ptr = alloc_ok(f, f->granularity);

	assert_int_equal(lynx_arena_restore(f->arena, ptr), -EALREADY);
	assert_int_equal(lynx_arena_evict(f->arena, ptr), 0);
	assert_int_equal(lynx_arena_evict(f->arena, ptr), -EALREADY);
	assert_int_equal(lynx_arena_evict(f->arena, ptr + 1), -EINVAL); /* not a base */
	assert_int_equal(lynx_arena_restore(f->arena, ptr + f->granularity), -EINVAL);
	assert_int_equal(lynx_arena_free(f->arena, ptr + 1), -EINVAL);
	assert_int_equal(lynx_arena_alloc(f->arena, 0, &(CUdeviceptr){0}), -EINVAL);
	/* An evicted allocation may be freed as it is. */
	assert_int_equal(lynx_arena_free(f->arena, ptr), 0);
	assert_int_equal(lynx_arena_free(f->arena, ptr), -EINVAL);
	assert_int_equal(stats_of(f).evicted_bytes, 0);
	assert_false(lynx_arena_find(f->arena, ptr, NULL));
}

/* ---- Out of memory and other failures -------------------------------------------------- */

/* Allocates whatever physical memory simgpu has left. */
static CUdeviceptr fill_memory(struct fixture *f)
{
	struct simgpu_memory_stats stats;

	memory_stats(&stats);
	size_t left =
	        (stats.capacity_bytes - stats.current_bytes) / f->granularity * f->granularity;
	CUdeviceptr filler = alloc_ok(f, left);
	assert_int_equal(physical_bytes(), stats.capacity_bytes);
	return filler;
}

static void test_out_of_memory_on_restore_keeps_the_allocation_evicted(void **state)
{
	struct fixture *f = *state;
	CUdeviceptr victim = alloc_ok(f, 4 * f->granularity);

	assert_int_equal(lynx_arena_evict(f->arena, victim), 0);
	CUdeviceptr filler = fill_memory(f);
	size_t full = physical_bytes();

	assert_int_equal(lynx_arena_restore(f->arena, victim), -ENOMEM);
	assert_int_equal(found(f, victim).state, LYNX_ARENA_EVICTED);
	assert_int_equal(signal_of_child(touch, host(victim)), SIGSEGV);
	assert_int_equal(physical_bytes(), full);
	assert_int_equal(stats_of(f).out_of_memory, 1);
	assert_int_equal(stats_of(f).restorations, 0);
	/* The caller's fallback: once memory is freed, the retry succeeds. */
	assert_int_equal(lynx_arena_free(f->arena, filler), 0);
	assert_int_equal(lynx_arena_restore(f->arena, victim), 0);
	assert_int_equal(signal_of_child(touch, host(victim)), 0);
	assert_int_equal(lynx_arena_free(f->arena, victim), 0);
}

static void test_out_of_memory_on_alloc_holds_nothing(void **state)
{
	struct fixture *f = *state;
	CUdeviceptr filler = fill_memory(f);
	struct lynx_arena_stats before = stats_of(f);
	CUdeviceptr ptr = 0;

	assert_int_equal(lynx_arena_alloc(f->arena, f->granularity, &ptr), -ENOMEM);
	assert_int_equal(physical_bytes(), (size_t)CAPACITY);
	assert_int_equal(stats_of(f).free_ranges, before.free_ranges);
	assert_int_equal(stats_of(f).free_bytes, before.free_bytes);
	assert_int_equal(stats_of(f).allocations, before.allocations);
	assert_int_equal(stats_of(f).out_of_memory, before.out_of_memory + 1);
	/* The address went back: the next allocation gets it. */
	assert_int_equal(lynx_arena_free(f->arena, filler), 0);
	CUdeviceptr next = alloc_ok(f, f->granularity);
	assert_int_equal(next, filler);
	assert_int_equal(lynx_arena_free(f->arena, next), 0);
}

/* Failures other than a lack of memory are told apart, and undone. */
static void test_driver_failures_are_told_apart_and_undone(void **state)
{
	struct fixture *f = *state;
	size_t g = f->granularity;
	CUdeviceptr ptr = 0;

	fail_map = CUDA_ERROR_INVALID_VALUE;
	assert_int_equal(lynx_arena_alloc(f->arena, g, &ptr), -EIO);
	assert_int_equal(physical_bytes(), f->physical_before); /* the handle was released */
	assert_int_equal(stats_of(f).free_ranges, 1);
	assert_int_equal(stats_of(f).free_bytes, RESERVE);
	assert_int_equal(stats_of(f).failures, 1);

	ptr = alloc_ok(f, g);
	assert_int_equal(lynx_arena_evict(f->arena, ptr), 0);
	fail_create = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	assert_int_equal(lynx_arena_restore(f->arena, ptr), -EAGAIN);
	fail_create = CUDA_ERROR_OUT_OF_MEMORY;
	assert_int_equal(lynx_arena_restore(f->arena, ptr), -ENOMEM);
	fail_map = CUDA_ERROR_UNKNOWN;
	assert_int_equal(lynx_arena_restore(f->arena, ptr), -EIO);
	assert_int_equal(found(f, ptr).state, LYNX_ARENA_EVICTED);
	assert_int_equal(physical_bytes(), f->physical_before);
	assert_int_equal(stats_of(f).failures, 3);
	assert_int_equal(stats_of(f).out_of_memory, 1);
	assert_int_equal(lynx_arena_restore(f->arena, ptr), 0);

	/* A failed unmap leaves the allocation resident and usable. */
	fail_unmap = CUDA_ERROR_UNKNOWN;
	assert_int_equal(lynx_arena_evict(f->arena, ptr), -EIO);
	assert_int_equal(found(f, ptr).state, LYNX_ARENA_RESIDENT);
	assert_int_equal(signal_of_child(touch, host(ptr)), 0);

	/* A failed release leaves it evicted; the restore maps the memory it still holds. */
	fail_release = CUDA_ERROR_UNKNOWN;
	assert_int_equal(lynx_arena_evict(f->arena, ptr), -EIO);
	assert_int_equal(found(f, ptr).state, LYNX_ARENA_EVICTED);
	assert_int_equal(signal_of_child(touch, host(ptr)), SIGSEGV);
	assert_int_equal(physical_bytes(), f->physical_before + g);
	uint64_t creates = call_count("cuMemCreate");
	assert_int_equal(lynx_arena_restore(f->arena, ptr), 0);
	assert_int_equal(call_count("cuMemCreate"), creates);
	assert_int_equal(physical_bytes(), f->physical_before + g);
	assert_int_equal(signal_of_child(touch, host(ptr)), 0);

	/* A failed unmap at free keeps the allocation. */
	fail_unmap = CUDA_ERROR_UNKNOWN;
	assert_int_equal(lynx_arena_free(f->arena, ptr), -EIO);
	assert_int_equal(found(f, ptr).state, LYNX_ARENA_RESIDENT);
	assert_int_equal(lynx_arena_free(f->arena, ptr), 0);
}

/* ---- find ------------------------------------------------------------------------------ */

static void test_find_answers_interior_edge_and_outside_addresses(void **state)
{
	struct fixture *f = *state;
	size_t g = f->granularity;
	CUdeviceptr a = alloc_ok(f, 2 * g), gap = alloc_ok(f, 3 * g), c = alloc_ok(f, g);
	struct lynx_arena_range range;
	int on_stack;

	assert_int_equal(lynx_arena_free(f->arena, gap), 0);
	range = found(f, a);
	assert_int_equal(range.base, a);
	assert_int_equal(range.size, 2 * g);
	assert_int_equal(range.state, LYNX_ARENA_RESIDENT);
	assert_int_equal(found(f, a + g + 17).base, a);
	assert_int_equal(found(f, a + 2 * g - 1).base, a);
	assert_false(lynx_arena_find(f->arena, a + 2 * g, &range)); /* the freed gap */
	assert_false(lynx_arena_find(f->arena, c - 1, &range));
	assert_int_equal(found(f, c).base, c);
	assert_int_equal(found(f, c + g - 1).base, c);
	assert_false(lynx_arena_find(f->arena, c + g, &range));
	assert_false(lynx_arena_find(f->arena, a - 1, &range)); /* before the chunk */
	assert_false(lynx_arena_find(f->arena, 0, &range));
	assert_false(lynx_arena_find(f->arena, (CUdeviceptr)(uintptr_t)&on_stack, &range));
	assert_false(lynx_arena_find(f->arena, UINT64_MAX, &range));
	assert_int_equal(lynx_arena_evict(f->arena, c), 0);
	assert_int_equal(found(f, c + g - 1).state, LYNX_ARENA_EVICTED);
	assert_int_equal(lynx_arena_free(f->arena, a), 0);
	assert_int_equal(lynx_arena_free(f->arena, c), 0);
}

/* ---- Counters and growth --------------------------------------------------------------- */

static void test_counters_follow_each_operation(void **state)
{
	struct fixture *f = *state;
	size_t g = f->granularity;
	struct lynx_arena_stats s = stats_of(f);

	assert_int_equal(s.reserved_bytes, RESERVE);
	assert_int_equal(s.chunks, 1);
	CUdeviceptr a = alloc_ok(f, 2 * g), b = alloc_ok(f, 3 * g);
	assert_int_equal(lynx_arena_evict(f->arena, a), 0);
	s = stats_of(f);
	assert_int_equal(s.resident_bytes, 3 * g);
	assert_int_equal(s.evicted_bytes, 2 * g);
	assert_int_equal(s.peak_resident_bytes, 5 * g);
	assert_int_equal(s.evictions, 1);
	assert_int_equal(lynx_arena_free(f->arena, b), 0);
	assert_int_equal(lynx_arena_restore(f->arena, a), 0);
	s = stats_of(f);
	assert_int_equal(s.resident_bytes, 2 * g);
	assert_int_equal(s.evicted_bytes, 0);
	assert_int_equal(s.peak_resident_bytes, 5 * g);
	assert_int_equal(lynx_arena_free(f->arena, a), 0);
	s = stats_of(f);
	assert_int_equal(s.allocations, 2);
	assert_int_equal(s.frees, 2);
	assert_int_equal(s.evictions, 1);
	assert_int_equal(s.restorations, 1);
	assert_int_equal(s.resident_bytes, 0);
	assert_int_equal(s.out_of_memory, 0);
	assert_int_equal(s.failures, 0);
	assert_int_equal(s.free_ranges, 1);
	assert_int_equal(s.reserved_bytes, RESERVE);
}

/* The first chunk holds four granules; more address space comes in further chunks, each
 * at least as large as the request, and free ranges never merge across chunks. */
static void test_the_arena_grows_by_chunks(void **state)
{
	struct fixture *f = *state;
	size_t g = f->granularity;
	CUdeviceptr a = alloc_ok(f, 3 * g), b = alloc_ok(f, 3 * g), c = alloc_ok(f, 10 * g);
	struct lynx_arena_stats s = stats_of(f);

	assert_int_equal(s.chunks, 3);
	assert_int_equal(s.reserved_bytes, (4 + 4 + 10) * g);
	assert_int_equal(found(f, a).base, a);
	assert_int_equal(found(f, b + 3 * g - 1).base, b);
	assert_int_equal(found(f, c + 10 * g - 1).base, c);
	CUdeviceptr d = alloc_ok(f, g); /* fits in the first chunk's last granule */
	assert_int_equal(d, a + 3 * g);
	assert_int_equal(stats_of(f).chunks, 3);
	assert_int_equal(lynx_arena_free(f->arena, a), 0);
	assert_int_equal(lynx_arena_free(f->arena, b), 0);
	assert_int_equal(lynx_arena_free(f->arena, c), 0);
	assert_int_equal(lynx_arena_free(f->arena, d), 0);
	assert_int_equal(stats_of(f).free_ranges, 3);
}

/* Destroy gives back what is left: resident and evicted allocations, and every chunk
 * (arena_teardown checks the physical memory). */
static void test_destroy_gives_back_what_is_left(void **state)
{
	struct fixture *f = *state;
	uint64_t address_frees = call_count("cuMemAddressFree");
	CUdeviceptr kept = alloc_ok(f, 2 * f->granularity);
	CUdeviceptr evicted = alloc_ok(f, 30 * f->granularity);

	assert_int_equal(lynx_arena_evict(f->arena, evicted), 0);
	assert_int_equal(stats_of(f).chunks, 2);
	assert_int_equal(lynx_arena_destroy(f->arena), 0);
	assert_int_equal(call_count("cuMemAddressFree"), address_frees + 2);
	assert_int_equal(physical_bytes(), f->physical_before);
	assert_int_equal(signal_of_child(touch, host(kept)), SIGSEGV);
	assert_int_equal(lynx_arena_create(&simgpu_driver, 0, RESERVE, &f->arena), 0);
}

/* ---- Threads --------------------------------------------------------------------------- */

#define THREADS 8
#define ROUNDS 400
#define SLOTS 4

struct worker {
	struct lynx_arena *arena;
	size_t granularity;
	unsigned int seed;
	unsigned char tag;
	atomic_int *errors;
};

/* An allocation the worker owns: every byte it checks carries the worker's tag, so that two
 * threads given overlapping ranges would see each other's writes. */
static bool owned_intact(const struct worker *w, CUdeviceptr ptr, size_t size)
{
	const unsigned char *bytes = host(ptr);
	struct lynx_arena_range range;

	return bytes[0] == w->tag && bytes[size - 1] == w->tag &&
	       lynx_arena_find(w->arena, ptr + size - 1, &range) && range.base == ptr &&
	       range.size == size && range.state == LYNX_ARENA_RESIDENT;
}

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	CUdeviceptr ptrs[SLOTS] = {0};
	size_t sizes[SLOTS] = {0};

	for (int round = 0; round < ROUNDS; round++) {
		int slot = rand_r(&w->seed) % SLOTS;
		int action = rand_r(&w->seed) % 4;
		int err = 0;

		if (!ptrs[slot]) {
			sizes[slot] = (1 + rand_r(&w->seed) % 4) * w->granularity;
			err = lynx_arena_alloc(w->arena, sizes[slot], &ptrs[slot]);
			if (!err)
				memset(host(ptrs[slot]), w->tag, sizes[slot]);
		} else if (!owned_intact(w, ptrs[slot], sizes[slot])) {
			err = -1;
		} else if (action == 0) {
			err = lynx_arena_evict(w->arena, ptrs[slot]);
			if (!err)
				err = lynx_arena_restore(w->arena, ptrs[slot]);
			if (!err)
				memset(host(ptrs[slot]), w->tag, sizes[slot]);
		} else {
			err = lynx_arena_free(w->arena, ptrs[slot]);
			ptrs[slot] = 0;
		}
		if (err)
			atomic_fetch_add(w->errors, 1);
	}
	for (int slot = 0; slot < SLOTS; slot++)
		if (ptrs[slot] && lynx_arena_free(w->arena, ptrs[slot]))
			atomic_fetch_add(w->errors, 1);
	return NULL;
}

struct reader {
	struct lynx_arena *arena;
	CUdeviceptr low;
	size_t span, granularity;
	atomic_bool *stop;
	atomic_int *errors;
	uint64_t hits;
};

/* Looks up addresses across the chunk while the workers change the table: every answer
 * must be a well-formed allocation containing the address. */
static void *reader_run(void *arg)
{
	struct reader *r = arg;
	unsigned int seed = 7;

	while (!atomic_load(r->stop)) {
		CUdeviceptr addr = r->low + ((uint64_t)rand_r(&seed) * 4099) % r->span;
		struct lynx_arena_range range;

		if (!lynx_arena_find(r->arena, addr, &range))
			continue;
		r->hits++;
		if (addr < range.base || addr - range.base >= range.size ||
		    range.base % r->granularity || range.size % r->granularity || range.size == 0 ||
		    range.size > 4 * r->granularity ||
		    (unsigned int)range.state >= LYNX_ARENA_STATE_COUNT)
			atomic_fetch_add(r->errors, 1);
	}
	return NULL;
}

static void test_threads_allocate_evict_and_free_concurrently(void **state)
{
	struct fixture *f = *state;
	atomic_int errors = 0;
	atomic_bool stop = false;
	struct worker workers[THREADS];
	pthread_t threads[THREADS], reader_thread;
	CUdeviceptr probe = alloc_ok(f, f->granularity);
	struct reader reader = {f->arena, probe, RESERVE, f->granularity, &stop, &errors, 0};

	assert_int_equal(lynx_arena_free(f->arena, probe), 0);
	assert_int_equal(pthread_create(&reader_thread, NULL, reader_run, &reader), 0);
	for (int i = 0; i < THREADS; i++) {
		workers[i] = (struct worker){f->arena, f->granularity, 1000u + (unsigned int)i,
		                             (unsigned char)(0x10 + i), &errors};
		assert_int_equal(pthread_create(&threads[i], NULL, worker_run, &workers[i]), 0);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(threads[i], NULL);
	atomic_store(&stop, true);
	pthread_join(reader_thread, NULL);

	struct lynx_arena_stats s = stats_of(f);
	assert_int_equal(errors, 0);
	assert_true(reader.hits > 0);
	assert_true(s.allocations > THREADS * ROUNDS / 4);
	assert_int_equal(s.frees, s.allocations);
	assert_int_equal(s.evictions, s.restorations);
	assert_int_equal(s.resident_bytes, 0);
	assert_int_equal(s.evicted_bytes, 0);
	assert_int_equal(s.free_ranges, s.chunks);
	assert_int_equal(s.free_bytes, s.reserved_bytes);
	assert_int_equal(physical_bytes(), f->physical_before);
}

/* ---- Suites ---------------------------------------------------------------------------- */

static int run_suite(const char *name, const char *granularity, size_t granularity_bytes,
                     const struct CMUnitTest *tests, size_t count)
{
	if (simgpu_load(granularity, granularity_bytes)) {
		fprintf(stderr, "%s: cannot load simgpu from %s/simgpu\n", name, build_dir);
		return 1;
	}
	return _cmocka_run_group_tests(name, tests, count, NULL, NULL);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest large[] = {
	        cmocka_unit_test_setup_teardown(
	                test_sizes_and_addresses_follow_the_device_granularity, arena_setup,
	                arena_teardown),
	        cmocka_unit_test_setup_teardown(
	                test_an_evicted_range_faults_and_gives_its_memory_back, arena_setup,
	                arena_teardown),
	};
	const struct CMUnitTest small[] = {
	        cmocka_unit_test_setup_teardown(
	                test_sizes_and_addresses_follow_the_device_granularity, arena_setup,
	                arena_teardown),
	        cmocka_unit_test_setup_teardown(test_a_freed_range_is_reused, arena_setup,
	                                        arena_teardown),
	        cmocka_unit_test_setup_teardown(test_freed_neighbours_coalesce, arena_setup,
	                                        arena_teardown),
	        cmocka_unit_test_setup_teardown(
	                test_an_evicted_range_faults_and_gives_its_memory_back, arena_setup,
	                arena_teardown),
	        cmocka_unit_test_setup_teardown(test_restore_maps_new_memory_at_the_same_address,
	                                        arena_setup, arena_teardown),
	        cmocka_unit_test_setup_teardown(test_a_donor_hands_its_memory_to_a_new_allocation,
	                                        arena_setup, arena_teardown),
	        cmocka_unit_test_setup_teardown(test_a_donor_hands_its_memory_to_a_restore,
	                                        arena_setup, arena_teardown),
	        cmocka_unit_test_setup_teardown(test_transitions_refuse_the_wrong_state,
	                                        arena_setup, arena_teardown),
	        cmocka_unit_test_setup_teardown(
	                test_out_of_memory_on_restore_keeps_the_allocation_evicted, arena_setup,
	                arena_teardown),
	        cmocka_unit_test_setup_teardown(test_out_of_memory_on_alloc_holds_nothing,
	                                        arena_setup, arena_teardown),
	        cmocka_unit_test_setup_teardown(test_driver_failures_are_told_apart_and_undone,
	                                        faulty_arena_setup, arena_teardown),
	        cmocka_unit_test_setup_teardown(
	                test_find_answers_interior_edge_and_outside_addresses, arena_setup,
	                arena_teardown),
	        cmocka_unit_test_setup_teardown(test_counters_follow_each_operation, arena_setup,
	                                        arena_teardown),
	        cmocka_unit_test_setup_teardown(test_the_arena_grows_by_chunks, small_arena_setup,
	                                        arena_teardown),
	        cmocka_unit_test_setup_teardown(test_destroy_gives_back_what_is_left,
	                                        small_arena_setup, arena_teardown),
	        cmocka_unit_test_setup_teardown(test_threads_allocate_evict_and_free_concurrently,
	                                        arena_setup, arena_teardown),
	};
	int status = 0, failed;
	pid_t child;

	if (harness_init(argv[0], "test-arena"))
		return 1;
	/* Injected failures are expected: keep their warnings out of the output. */
	lynx_log_open(LYNX_LOG_ERROR, NULL);
	fflush(NULL);
	child = fork();
	if (child == 0)
		exit(run_suite("arena_granularity_8M", "8M", 8 * MIB, large,
		               sizeof(large) / sizeof(large[0])));
	if (child < 0 || waitpid(child, &status, 0) != child)
		return harness_finish(1);
	failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	failed |= run_suite("arena_granularity_64K", "64K", 64 * KIB, small,
	                    sizeof(small) / sizeof(small[0])) != 0;
	return harness_finish(failed);
}
