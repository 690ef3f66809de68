/* SPDX-License-Identifier: Apache-2.0 */
/* The event recorder: per-thread lock-free rings of events, drained into one consumer. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "recorder.h"

/*
 * Layout of a ring. Positions (head, tail) count bytes since the ring was created and
 * never wrap in practice (2^64 bytes); a record lives at pos & mask. A record never wraps
 * around the end of the buffer: when it does not fit before the end, reserve writes a
 * padding record (kind RING_PAD, size = bytes to the end) and the event starts at offset
 * 0; both are published by the same commit. Every record is at least
 * sizeof(struct lynx_event) bytes except padding, which may be as short as 8 bytes: only
 * its size and kind are written, and they lie in the first 8 bytes of the header.
 */
#define RING_MIN ((size_t)1 << 10)
#define RING_MAX ((size_t)1 << 30) /* sizes must fit struct lynx_event.size */
#define RING_DEFAULT ((size_t)4 << 20)
#define BUDGET_DEFAULT ((size_t)256 << 20)
#define RING_PAD UINT8_MAX /* a kind no event has: LYNX_EV_COUNT is far below */
#define CACHE_LINE 64

_Static_assert(sizeof(struct lynx_event) % 8 == 0, "records are multiples of 8 bytes");
_Static_assert(LYNX_EV_COUNT < RING_PAD, "RING_PAD must not be an event kind");
_Static_assert(offsetof(struct lynx_event, kind) < 8, "padding writes only 8 bytes");

struct ring {
	/* Written by the producer only (head is read by the drainer). */
	_Atomic uint64_t head;     /* end of the committed records */
	uint64_t reserved;         /* head once the reservation in progress is committed */
	uint32_t reserved_size;    /* that reservation's record size */
	uint64_t tail_seen;        /* the drainer's tail when last read: free space is >= this */
	_Atomic uint64_t recorded; /* producer-only counters: load + store, no read-modify-write */
	_Atomic uint64_t dropped;

	/* Written by the drainer only (read by the producer when its cached tail is short). */
	_Atomic uint64_t tail __attribute__((aligned(CACHE_LINE)));

	/* Set before the ring is published, then read-only. */
	char *data __attribute__((aligned(CACHE_LINE)));
	uint64_t mask;
	size_t map_bytes;
	uint32_t tid;

	/* The registry: next is changed under registry_lock; orphaned once, at thread exit. */
	_Atomic(struct ring *) next;
	atomic_bool orphaned;
};

/* The ring's header sits at the start of its mapping; the data follows, cache-aligned. */
#define RING_HEADER (((sizeof(struct ring) + CACHE_LINE - 1) / CACHE_LINE) * CACHE_LINE)

/*
 * Per-thread state. ring is NULL until the first reserve creates one; done says the
 * thread must not try again (refused by the budget, or exiting). initial-exec TLS is one
 * %fs-relative load on the hot path; liblynx.so is preloaded, so its TLS is static.
 */
struct thread_state {
	struct ring *ring;
	bool done;
};
static __thread struct thread_state self __attribute__((tls_model("initial-exec")));

/*
 * Global state. registry_lock guards the list's structure, the budget, configuration
 * and the retired counters; it is taken once per thread (first reserve), by stats, and
 * by the drain that frees an exited thread's ring. drain_lock serialises drains and
 * guards the consumer. Lock order: drain_lock, then registry_lock.
 */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t drain_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(struct ring *) rings;

static struct {
	size_t ring_bytes, budget, budget_used;     /* under registry_lock */
	bool frozen;                                /* a ring exists: configure is ignored */
	uint64_t retired_recorded, retired_dropped; /* of freed rings, under registry_lock */
	lynx_event_consumer consumer;               /* under drain_lock */
	void *consumer_arg;
	_Atomic uint64_t unrecorded_dropped, drained;
	_Atomic uint32_t threads, threads_unrecorded;
} rec = {.ring_bytes = RING_DEFAULT, .budget = BUDGET_DEFAULT};

/* The background drainer. gen changes at every stop, so a stopped thread exits even if
 * a new one was started before it woke. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t wake; /* on CLOCK_MONOTONIC */
	pthread_t thread;
	bool running;
	uint64_t gen;
	unsigned int interval_ms;
} drainer = {.lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_key_t exit_key;
static bool exit_key_ok;

static void thread_exit(void *value);

static void init_drainer_cond(void)
{
	pthread_condattr_t attr;

	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&drainer.wake, &attr);
	pthread_condattr_destroy(&attr);
}

static void init(void)
{
	exit_key_ok = pthread_key_create(&exit_key, thread_exit) == 0;
	init_drainer_cond();
}

/* A counter only its owner thread writes: a plain load and store, kept atomic for readers. */
static inline void bump(_Atomic uint64_t *counter)
{
	atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + 1,
	                      memory_order_relaxed);
}

/* clock_gettime(CLOCK_MONOTONIC) is a vDSO call: no system call, some 20 ns. */
static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static size_t round_ring_bytes(size_t bytes)
{
	size_t p = RING_MIN;

	while (p < bytes && p < RING_MAX)
		p <<= 1;
	return p;
}

/* ring_bytes is rounded up to a power of two in [RING_MIN, RING_MAX]; a budget below one
 * ring leaves every thread unrecorded. */
int lynx_recorder_configure(size_t ring_bytes, size_t budget_bytes)
{
	pthread_mutex_lock(&registry_lock);
	if (!rec.frozen) {
		rec.ring_bytes = round_ring_bytes(ring_bytes);
		rec.budget = budget_bytes;
	}
	pthread_mutex_unlock(&registry_lock);
	return 0;
}

/*
 * The calling thread's first reserve: charge the budget, map a ring, register it, and
 * arrange for thread_exit to mark it orphaned. Returns NULL, and marks the thread
 * unrecorded for good, when the budget is spent or a call fails.
 */
static struct ring *ring_create(void)
{
	struct ring *r;
	size_t cap;
	void *mem;

	/* A reserve from inside this function (a hooked call below us) finds no ring. */
	self.done = true;
	pthread_once(&init_once, init);
	if (!exit_key_ok)
		goto out_unrecorded;

	pthread_mutex_lock(&registry_lock);
	rec.frozen = true;
	cap = rec.ring_bytes;
	if (rec.budget - rec.budget_used < cap) {
		pthread_mutex_unlock(&registry_lock);
		goto out_unrecorded;
	}
	rec.budget_used += cap;
	pthread_mutex_unlock(&registry_lock);

	/* Anonymous pages are touched, and so committed, only as the ring fills. */
	mem = mmap(NULL, RING_HEADER + cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
	           0);
	if (mem == MAP_FAILED)
		goto out_refund;
	r = mem;
	r->data = (char *)mem + RING_HEADER;
	r->mask = cap - 1;
	r->map_bytes = RING_HEADER + cap;
	r->tid = (uint32_t)syscall(SYS_gettid);
	if (pthread_setspecific(exit_key, r))
		goto out_unmap;

	pthread_mutex_lock(&registry_lock);
	atomic_store_explicit(&r->next, atomic_load_explicit(&rings, memory_order_relaxed),
	                      memory_order_relaxed);
	/* Release: a drainer that finds r (acquire) sees it initialised. */
	atomic_store_explicit(&rings, r, memory_order_release);
	atomic_fetch_add_explicit(&rec.threads, 1, memory_order_relaxed);
	pthread_mutex_unlock(&registry_lock);

	self.ring = r;
	self.done = false;
	return r;

out_unmap:
	munmap(mem, RING_HEADER + cap);
out_refund:
	pthread_mutex_lock(&registry_lock);
	rec.budget_used -= cap;
	pthread_mutex_unlock(&registry_lock);
out_unrecorded:
	atomic_fetch_add_explicit(&rec.threads_unrecorded, 1, memory_order_relaxed);
	return NULL;
}

/* pthread key destructor, at thread exit: the ring stays registered until drained empty. */
static void thread_exit(void *value)
{
	struct ring *r = value;

	self.ring = NULL;
	self.done = true;
	/* Release: the drainer that sees orphaned (acquire) then reads the final head. */
	atomic_store_explicit(&r->orphaned, true, memory_order_release);
}

static __attribute__((noinline, cold)) struct lynx_event *drop(struct ring *r)
{
	bump(&r->dropped);
	return NULL;
}

/*
 * The hot path: no locks, no allocation, no system call, no division. Not re-entrant on
 * one thread: a signal handler that records between reserve and commit takes the same
 * bytes (the hooks' per-thread re-entrancy guard must cover reserve to commit).
 */
static inline struct lynx_event *ring_reserve(struct ring *r, size_t payload_bytes)
{
	uint64_t cap = r->mask + 1;
	uint64_t head, off, skip, size, end;
	struct lynx_event *ev;

	/* At most half a ring, so an event always fits an empty ring wherever its head is:
	 * before the end, or after padding to 0 (the padding is shorter than the event). */
	if (__builtin_expect(payload_bytes > cap / 2 - sizeof(struct lynx_event), 0))
		return drop(r);
	size = (sizeof(struct lynx_event) + payload_bytes + 7) & ~(uint64_t)7;
	head = atomic_load_explicit(&r->head, memory_order_relaxed);
	off = head & r->mask;
	skip = cap - off < size ? cap - off : 0;
	end = head + skip + size;
	if (__builtin_expect(end - r->tail_seen > cap, 0)) {
		/* Acquire: the drainer has finished reading the bytes it gave back. */
		r->tail_seen = atomic_load_explicit(&r->tail, memory_order_acquire);
		if (end - r->tail_seen > cap)
			return drop(r);
	}
	if (skip) {
		ev = (struct lynx_event *)(r->data + off);
		ev->size = (uint32_t)skip;
		ev->kind = RING_PAD;
		off = 0;
	}
	ev = (struct lynx_event *)(r->data + off);
	ev->size = (uint32_t)size;
	ev->tid = r->tid;
	ev->host_ns = now_ns();
	r->reserved = end;
	r->reserved_size = (uint32_t)size;
	return ev;
}

/* First reserve of a thread, or a thread without a ring. */
static __attribute__((noinline, cold)) struct lynx_event *reserve_slow(size_t payload_bytes)
{
	struct ring *r = self.done ? NULL : ring_create();

	if (!r) {
		atomic_fetch_add_explicit(&rec.unrecorded_dropped, 1, memory_order_relaxed);
		return NULL;
	}
	return ring_reserve(r, payload_bytes);
}

struct lynx_event *lynx_recorder_reserve(size_t payload_bytes)
{
	struct ring *r = self.ring;

	if (__builtin_expect(!r, 0))
		return reserve_slow(payload_bytes);
	return ring_reserve(r, payload_bytes);
}

void lynx_recorder_commit(struct lynx_event *event)
{
	struct ring *r = self.ring;

	/* A NULL event (a failed reserve) or a second commit of the same one is ignored. */
	if (__builtin_expect(!r || !event, 0) ||
	    r->reserved == atomic_load_explicit(&r->head, memory_order_relaxed))
		return;
	/* The caller may have overwritten the header (a compound-literal assignment); the
	 * ring's framing must not depend on it. */
	event->size = r->reserved_size;
	/* Release: the drainer that reads this head (acquire) sees the whole record. */
	atomic_store_explicit(&r->head, r->reserved, memory_order_release);
	bump(&r->recorded);
}

void lynx_recorder_set_consumer(lynx_event_consumer consumer, void *arg)
{
	pthread_mutex_lock(&drain_lock);
	rec.consumer = consumer;
	rec.consumer_arg = arg;
	pthread_mutex_unlock(&drain_lock);
}

/* Delivers r's committed records up to the head seen on entry; returns the events. */
static size_t ring_drain(struct ring *r)
{
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
	size_t n = 0;

	while (tail != head) {
		const struct lynx_event *ev = (const void *)(r->data + (tail & r->mask));
		uint32_t size = ev->size;

		/* Commit and reserve set every size; a bad one means a caller wrote past its
		 * payload. Give up on this batch rather than walk off into the buffer. */
		if (size < 8 || size % 8 || size > head - tail) {
			tail = head;
		} else {
			if (ev->kind != RING_PAD) {
				if (rec.consumer)
					rec.consumer(ev, rec.consumer_arg);
				n++;
			}
			tail += size;
		}
		/* Release per record: the producer may reuse the space while we go on. */
		atomic_store_explicit(&r->tail, tail, memory_order_release);
	}
	return n;
}

/* Unlinks and unmaps a drained, orphaned ring; its counters move to the retired totals. */
static void ring_free(struct ring *r)
{
	_Atomic(struct ring *) *link = &rings;
	struct ring *at;

	pthread_mutex_lock(&registry_lock);
	while ((at = atomic_load_explicit(link, memory_order_relaxed)) != r)
		link = &at->next;
	atomic_store_explicit(link, atomic_load_explicit(&r->next, memory_order_relaxed),
	                      memory_order_relaxed);
	rec.retired_recorded += atomic_load_explicit(&r->recorded, memory_order_relaxed);
	rec.retired_dropped += atomic_load_explicit(&r->dropped, memory_order_relaxed);
	rec.budget_used -= r->mask + 1;
	pthread_mutex_unlock(&registry_lock);
	munmap(r, r->map_bytes);
}

/*
 * The consumer runs under drain_lock: it must not call drain, stop or set_consumer (they
 * would wait for themselves), and the event it gets is valid only during the call.
 */
size_t lynx_recorder_drain(void)
{
	struct ring *r, *next;
	size_t n = 0;

	pthread_mutex_lock(&drain_lock);
	/* Only a drain unlinks, and we hold drain_lock: r->next stays valid while we walk.
	 * Rings prepended meanwhile are drained next time. */
	for (r = atomic_load_explicit(&rings, memory_order_acquire); r; r = next) {
		/* Orphaned before head: once the thread has exited, the head we then read
		 * is final, and a ring drained to it is empty for good. */
		bool orphaned = atomic_load_explicit(&r->orphaned, memory_order_acquire);

		next = atomic_load_explicit(&r->next, memory_order_acquire);
		n += ring_drain(r);
		if (orphaned)
			ring_free(r);
	}
	atomic_fetch_add_explicit(&rec.drained, n, memory_order_relaxed);
	pthread_mutex_unlock(&drain_lock);
	return n;
}

static void *drainer_main(void *arg)
{
	uint64_t gen = (uint64_t)(uintptr_t)arg;
	struct timespec until;

	pthread_mutex_lock(&drainer.lock);
	while (drainer.gen == gen) {
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_sec += drainer.interval_ms / 1000;
		until.tv_nsec += (long)(drainer.interval_ms % 1000) * 1000000;
		if (until.tv_nsec >= 1000000000) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&drainer.wake, &drainer.lock, &until);
		if (drainer.gen != gen)
			break;
		pthread_mutex_unlock(&drainer.lock);
		lynx_recorder_drain();
		pthread_mutex_lock(&drainer.lock);
	}
	pthread_mutex_unlock(&drainer.lock);
	return NULL;
}

int lynx_recorder_start_drainer(unsigned int interval_ms)
{
	sigset_t all, old;
	int err = 0;

	pthread_once(&init_once, init);
	pthread_mutex_lock(&drainer.lock);
	if (drainer.running)
		goto out_unlock;
	drainer.interval_ms = interval_ms ? interval_ms : 1;
	/* The trainer's signals must go to its own threads, never to ours. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = -pthread_create(&drainer.thread, NULL, drainer_main, (void *)(uintptr_t)drainer.gen);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	drainer.running = err == 0;
out_unlock:
	pthread_mutex_unlock(&drainer.lock);
	return err;
}

void lynx_recorder_stop(void)
{
	bool join = false;
	pthread_t thread;

	pthread_mutex_lock(&drainer.lock);
	if (drainer.running) {
		drainer.running = false;
		drainer.gen++;
		thread = drainer.thread;
		join = true;
		pthread_cond_broadcast(&drainer.wake);
	}
	pthread_mutex_unlock(&drainer.lock);
	if (join && !pthread_equal(thread, pthread_self()))
		pthread_join(thread, NULL);
	lynx_recorder_drain();
}

void lynx_recorder_stats(struct lynx_recorder_stats *out)
{
	struct ring *r;

	pthread_mutex_lock(&registry_lock);
	out->recorded = rec.retired_recorded;
	out->dropped = rec.retired_dropped +
	               atomic_load_explicit(&rec.unrecorded_dropped, memory_order_relaxed);
	for (r = atomic_load_explicit(&rings, memory_order_acquire); r;
	     r = atomic_load_explicit(&r->next, memory_order_relaxed)) {
		out->recorded += atomic_load_explicit(&r->recorded, memory_order_relaxed);
		out->dropped += atomic_load_explicit(&r->dropped, memory_order_relaxed);
	}
	pthread_mutex_unlock(&registry_lock);
	out->drained = atomic_load_explicit(&rec.drained, memory_order_relaxed);
	out->threads = atomic_load_explicit(&rec.threads, memory_order_relaxed);
	out->threads_unrecorded =
	        atomic_load_explicit(&rec.threads_unrecorded, memory_order_relaxed);
}

/*
 * In a forked child only the calling thread exists. Locks another thread held at the fork
 * are re-initialised (the owner is gone), the parent's rings are unmapped (their events
 * belong to the parent, which drains them itself), and the drainer is forgotten, not
 * joined. Configuration is kept, and may be changed again until the child's first ring.
 */
void lynx_recorder_after_fork(void)
{
	struct ring *r, *next;

	pthread_once(&init_once, init);
	pthread_mutex_init(&registry_lock, NULL);
	pthread_mutex_init(&drain_lock, NULL);
	pthread_mutex_init(&drainer.lock, NULL);
	init_drainer_cond();
	drainer.running = false;
	drainer.gen++;

	for (r = atomic_load_explicit(&rings, memory_order_relaxed); r; r = next) {
		next = atomic_load_explicit(&r->next, memory_order_relaxed);
		munmap(r, r->map_bytes);
	}
	atomic_store_explicit(&rings, NULL, memory_order_relaxed);
	rec.budget_used = 0;
	rec.frozen = false;
	rec.retired_recorded = 0;
	rec.retired_dropped = 0;
	atomic_store_explicit(&rec.unrecorded_dropped, 0, memory_order_relaxed);
	atomic_store_explicit(&rec.drained, 0, memory_order_relaxed);
	atomic_store_explicit(&rec.threads, 0, memory_order_relaxed);
	atomic_store_explicit(&rec.threads_unrecorded, 0, memory_order_relaxed);

	self.ring = NULL;
	self.done = false;
	if (exit_key_ok)
		pthread_setspecific(exit_key, NULL);
}
