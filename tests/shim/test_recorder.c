/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of the event recorder: order, content, wrap-around, drops, budget, threads, fork. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "recorder.h"

#define EVENT_BYTES ((sizeof(struct lynx_event) + 7) & ~(size_t)7)

static uint8_t pattern(uint64_t seq, size_t i)
{
	return (uint8_t)(seq * 31 + i * 7 + 1);
}

static uint32_t my_tid(void)
{
	return (uint32_t)syscall(SYS_gettid);
}

/* Records one event tagged (hook, seq) with payload_bytes of pattern; false if dropped. */
static bool record(uint16_t hook, uint64_t seq, size_t payload_bytes)
{
	struct lynx_event *ev = lynx_recorder_reserve(payload_bytes);
	uint8_t *payload;

	if (!ev)
		return false;
	ev->hook = hook;
	ev->kind = (uint8_t)(seq % LYNX_EV_COUNT);
	ev->flags = (uint8_t)seq;
	ev->result = -(int32_t)(seq & 0xffff);
	ev->stream = seq * 7 + 3;
	ev->u.mem.ptr = seq;
	ev->u.mem.bytes = payload_bytes;
	payload = (uint8_t *)(ev + 1);
	for (size_t i = 0; i < payload_bytes; i++)
		payload[i] = pattern(seq, i);
	lynx_recorder_commit(ev);
	return true;
}

static bool payload_matches(const struct lynx_event *ev)
{
	const uint8_t *payload = (const uint8_t *)(ev + 1);
	uint64_t len = ev->u.mem.bytes;

	if (sizeof(*ev) + len > ev->size)
		return false;
	for (size_t i = 0; i < len; i++)
		if (payload[i] != pattern(ev->u.mem.ptr, i))
			return false;
	return true;
}

/* A consumer that keeps a copy of each event's header and checks its payload. */
struct seen {
	struct lynx_event ev;
	bool payload_ok;
};

#define COLLECT_MAX 8192
struct collector {
	struct seen items[COLLECT_MAX];
	size_t n, overflow;
};

static struct collector col;

static void collect(const struct lynx_event *ev, void *arg)
{
	struct collector *c = arg;

	if (c->n == COLLECT_MAX) {
		c->overflow++;
		return;
	}
	c->items[c->n].ev = *ev;
	c->items[c->n].payload_ok = payload_matches(ev);
	c->n++;
}

/* A fresh recorder for each test: the after-fork reset forgets every ring. */
static void reset(size_t ring_bytes, size_t budget_bytes)
{
	lynx_recorder_stop();
	lynx_recorder_after_fork();
	lynx_recorder_configure(ring_bytes, budget_bytes);
	memset(&col, 0, sizeof(col));
	lynx_recorder_set_consumer(collect, &col);
}

static void test_single_thread_events_round_trip_in_order_with_payload(void **state)
{
	struct lynx_recorder_stats st;
	const size_t count = 200;
	uint64_t last_ns = 0;

	reset(1 << 20, 16 << 20);
	for (uint64_t seq = 0; seq < count; seq++)
		assert_true(record((uint16_t)(seq + 100), seq, (seq * 13) % 300));
	assert_int_equal(lynx_recorder_drain(), count);
	assert_int_equal(col.n, count);
	for (uint64_t seq = 0; seq < count; seq++) {
		const struct lynx_event *ev = &col.items[seq].ev;
		size_t payload = (seq * 13) % 300;

		assert_int_equal(ev->u.mem.ptr, seq);
		assert_int_equal(ev->hook, seq + 100);
		assert_int_equal(ev->kind, seq % LYNX_EV_COUNT);
		assert_int_equal(ev->flags, (uint8_t)seq);
		assert_int_equal(ev->result, -(int32_t)seq);
		assert_int_equal(ev->stream, seq * 7 + 3);
		assert_int_equal(ev->u.mem.bytes, payload);
		assert_int_equal(ev->size, (sizeof(*ev) + payload + 7) & ~(size_t)7);
		assert_int_equal(ev->tid, my_tid());
		assert_true(ev->host_ns > 0);
		assert_true(ev->host_ns >= last_ns);
		assert_true(col.items[seq].payload_ok);
		last_ns = ev->host_ns;
	}
	assert_int_equal(lynx_recorder_drain(), 0);

	lynx_recorder_stats(&st);
	assert_int_equal(st.recorded, count);
	assert_int_equal(st.dropped, 0);
	assert_int_equal(st.drained, count);
	assert_int_equal(st.threads, 1);
	assert_int_equal(st.threads_unrecorded, 0);
}

static void test_commit_keeps_framing_when_caller_overwrites_header(void **state)
{
	struct lynx_event *ev;

	reset(4096, 1 << 20);
	ev = lynx_recorder_reserve(40);
	assert_non_null(ev);
	*ev = (struct lynx_event){.kind = LYNX_EV_ALLOC, .u.mem.ptr = 1};
	lynx_recorder_commit(ev);
	lynx_recorder_commit(ev); /* a second commit is ignored */
	assert_true(record(2, 2, 16));
	assert_int_equal(lynx_recorder_drain(), 2);
	assert_int_equal(col.items[0].ev.u.mem.ptr, 1);
	assert_int_equal(col.items[0].ev.size, (sizeof(*ev) + 40 + 7) & ~(size_t)7);
	assert_int_equal(col.items[1].ev.u.mem.ptr, 2);
	assert_true(col.items[1].payload_ok);
}

static void test_ring_wraps_many_times_with_variable_sizes(void **state)
{
	const size_t ring = 1024;
	struct lynx_recorder_stats st;
	uint64_t committed[COLLECT_MAX];
	size_t n_committed = 0, bytes = 0, produced = 0;
	uint64_t seq = 0;

	reset(ring, 1 << 20);
	/* Drained after every event: an event of at most half a ring always fits. */
	while (bytes < 100 * ring) {
		size_t payload = (seq * 37) % (ring / 2 - sizeof(struct lynx_event) + 1);

		assert_true(record(1, seq, payload));
		committed[n_committed++] = seq++;
		bytes += (sizeof(struct lynx_event) + payload + 7) & ~(size_t)7;
		assert_int_equal(lynx_recorder_drain(), 1);
	}
	lynx_recorder_stats(&st);
	assert_int_equal(st.dropped, 0);
	produced = seq;

	/* Now several events between drains: some drop when the padding does not fit. */
	for (int round = 0; round < 300; round++) {
		for (int i = 0; i < 1 + round % 5; i++, seq++) {
			size_t payload = (seq * 53) % 200;

			produced++;
			if (record(1, seq, payload)) {
				assert_true(n_committed < COLLECT_MAX);
				committed[n_committed++] = seq;
			}
		}
		lynx_recorder_drain();
	}

	assert_int_equal(col.overflow, 0);
	assert_int_equal(col.n, n_committed);
	for (size_t i = 0; i < n_committed; i++) {
		assert_int_equal(col.items[i].ev.u.mem.ptr, committed[i]);
		assert_true(col.items[i].ev.kind < LYNX_EV_COUNT);
		assert_true(col.items[i].payload_ok);
	}
	lynx_recorder_stats(&st);
	assert_int_equal(st.recorded, n_committed);
	assert_true(st.dropped > 0);
	assert_int_equal(st.recorded + st.dropped, produced);
	assert_int_equal(st.drained, n_committed);
}

static void test_full_ring_drops_counts_and_recovers_after_drain(void **state)
{
	const size_t ring = 1024, fits = ring / EVENT_BYTES;
	struct lynx_recorder_stats st;
	size_t ok = 0;

	reset(ring, 1 << 20);
	/* Never blocks: the reserve that does not fit returns NULL at once. */
	while (ok < 1000 && record(1, ok, 0))
		ok++;
	assert_int_equal(ok, fits);
	for (int i = 0; i < 10; i++)
		assert_null(lynx_recorder_reserve(0));
	lynx_recorder_stats(&st);
	assert_int_equal(st.recorded, fits);
	assert_int_equal(st.dropped, 11);

	/* Over half a ring never fits, even when empty. */
	assert_null(lynx_recorder_reserve(ring / 2));
	assert_null(lynx_recorder_reserve(SIZE_MAX));

	assert_int_equal(lynx_recorder_drain(), fits);
	for (size_t i = 0; i < fits; i++)
		assert_int_equal(col.items[i].ev.u.mem.ptr, i);
	assert_true(record(2, 1000, ring / 2 - sizeof(struct lynx_event)));
	assert_true(record(2, 1001, 0));
	assert_int_equal(lynx_recorder_drain(), 2);
	assert_int_equal(col.items[fits].ev.u.mem.ptr, 1000);
	assert_true(col.items[fits].payload_ok);
	assert_int_equal(col.items[fits + 1].ev.u.mem.ptr, 1001);

	lynx_recorder_stats(&st);
	assert_int_equal(st.recorded, fits + 2);
	assert_int_equal(st.dropped, 13);
}

/* A thread that records `count` events tagged hook, optionally waiting before it exits. */
struct worker {
	uint16_t hook;
	size_t count, recorded;
	uint32_t tid;
	pthread_barrier_t *hold; /* waited on twice: after recording, then before exiting */
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	w->tid = my_tid();
	for (size_t i = 0; i < w->count; i++)
		w->recorded += record(w->hook, i, i % 64);
	if (w->hold) {
		pthread_barrier_wait(w->hold);
		pthread_barrier_wait(w->hold);
	}
	return NULL;
}

static void run_worker(struct worker *w)
{
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, worker_main, w), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
}

static void test_threads_beyond_budget_are_unrecorded(void **state)
{
	struct worker held = {.hook = 1, .count = 5}, late = {.hook = 2, .count = 3};
	struct worker after = {.hook = 3, .count = 4};
	struct lynx_recorder_stats st;
	pthread_barrier_t hold;
	pthread_t t;

	reset(4096, 2 * 4096);
	assert_true(record(0, 0, 0)); /* the main thread takes the first ring */
	pthread_barrier_init(&hold, NULL, 2);
	held.hold = &hold;
	assert_int_equal(pthread_create(&t, NULL, worker_main, &held), 0);
	pthread_barrier_wait(&hold); /* held has its ring and keeps it */
	run_worker(&late);
	pthread_barrier_wait(&hold);
	assert_int_equal(pthread_join(t, NULL), 0);
	pthread_barrier_destroy(&hold);

	assert_int_equal(held.recorded, 5);
	assert_int_equal(late.recorded, 0);
	lynx_recorder_stats(&st);
	assert_int_equal(st.threads, 2);
	assert_int_equal(st.threads_unrecorded, 1);
	assert_int_equal(st.recorded, 6);
	assert_int_equal(st.dropped, 3);

	/* Draining the exited thread's ring gives its share of the budget back. */
	assert_int_equal(lynx_recorder_drain(), 6);
	run_worker(&after);
	assert_int_equal(after.recorded, 4);
	assert_int_equal(lynx_recorder_drain(), 4);
	lynx_recorder_stats(&st);
	assert_int_equal(st.threads, 3);
	assert_int_equal(st.threads_unrecorded, 1);
	assert_int_equal(st.recorded, 10);
	assert_int_equal(st.drained, 10);
}

static void test_exited_thread_events_are_still_drained(void **state)
{
	struct worker w = {.hook = 9, .count = 100}, next = {.hook = 10, .count = 1};
	struct lynx_recorder_stats st;

	reset(1 << 16, 1 << 16); /* room for one ring only */
	run_worker(&w);
	assert_int_equal(w.recorded, 100);
	assert_int_equal(lynx_recorder_drain(), 100);
	assert_int_equal(col.n, 100);
	for (size_t i = 0; i < 100; i++) {
		assert_int_equal(col.items[i].ev.tid, w.tid);
		assert_int_equal(col.items[i].ev.hook, 9);
		assert_int_equal(col.items[i].ev.u.mem.ptr, i);
		assert_true(col.items[i].payload_ok);
	}
	assert_int_equal(lynx_recorder_drain(), 0);

	/* The drained ring was freed: the next thread fits in the same budget. */
	run_worker(&next);
	assert_int_equal(next.recorded, 1);
	lynx_recorder_stats(&st);
	assert_int_equal(st.threads, 2);
	assert_int_equal(st.threads_unrecorded, 0);
	assert_int_equal(st.recorded, 101);
}

/* Eight producers and a concurrent drainer (plus the main thread draining too). */
#define MT_THREADS 8
#define MT_EVENTS 50000

struct mt {
	uint8_t *committed[MT_THREADS]; /* by each producer */
	uint8_t *delivered[MT_THREADS]; /* by the consumer, serialised by the recorder */
	int64_t last[MT_THREADS];
	uint32_t tid[MT_THREADS];
	size_t errors, delivered_total;
	pthread_barrier_t start;
	atomic_int running;
};

struct mt_producer {
	struct mt *mt;
	uint16_t index;
};

static void mt_consume(const struct lynx_event *ev, void *arg)
{
	struct mt *mt = arg;
	unsigned int t = ev->hook;
	uint64_t seq = ev->u.mem.ptr;

	mt->delivered_total++;
	if (t >= MT_THREADS || seq >= MT_EVENTS) {
		mt->errors++;
		return;
	}
	if ((int64_t)seq <= mt->last[t])
		mt->errors++; /* out of order, or delivered twice */
	mt->last[t] = (int64_t)seq;
	mt->delivered[t][seq]++;
	if (!mt->tid[t])
		mt->tid[t] = ev->tid;
	if (mt->tid[t] != ev->tid || !payload_matches(ev))
		mt->errors++;
}

static void *mt_producer_main(void *arg)
{
	struct mt_producer *p = arg;
	struct mt *mt = p->mt;

	pthread_barrier_wait(&mt->start);
	for (uint64_t seq = 0; seq < MT_EVENTS; seq++) {
		if (record(p->index, seq, seq % 97))
			mt->committed[p->index][seq] = 1;
		else
			sched_yield(); /* let the drainer catch up */
	}
	atomic_fetch_sub(&mt->running, 1);
	return NULL;
}

static void test_concurrent_producers_deliver_each_event_once_in_thread_order(void **state)
{
	static struct mt mt;
	struct mt_producer prod[MT_THREADS];
	pthread_t threads[MT_THREADS];
	struct lynx_recorder_stats st;
	uint64_t committed = 0;

	reset(1 << 16, MT_THREADS << 16);
	memset(&mt, 0, sizeof(mt));
	for (int t = 0; t < MT_THREADS; t++) {
		mt.committed[t] = calloc(MT_EVENTS, 1);
		mt.delivered[t] = calloc(MT_EVENTS, 1);
		assert_non_null(mt.committed[t]);
		assert_non_null(mt.delivered[t]);
		mt.last[t] = -1;
	}
	lynx_recorder_set_consumer(mt_consume, &mt);
	pthread_barrier_init(&mt.start, NULL, MT_THREADS);
	atomic_store(&mt.running, MT_THREADS);
	assert_int_equal(lynx_recorder_start_drainer(1), 0);
	assert_int_equal(lynx_recorder_start_drainer(1), 0); /* idempotent */
	for (int t = 0; t < MT_THREADS; t++) {
		prod[t] = (struct mt_producer){.mt = &mt, .index = (uint16_t)t};
		assert_int_equal(pthread_create(&threads[t], NULL, mt_producer_main, &prod[t]), 0);
	}
	while (atomic_load(&mt.running) > 0) {
		lynx_recorder_drain();
		sched_yield();
	}
	for (int t = 0; t < MT_THREADS; t++)
		assert_int_equal(pthread_join(threads[t], NULL), 0);
	lynx_recorder_stop();
	lynx_recorder_stop(); /* a second stop only drains (nothing) */

	assert_int_equal(mt.errors, 0);
	for (int t = 0; t < MT_THREADS; t++) {
		size_t mismatches = 0, mine = 0;

		for (size_t seq = 0; seq < MT_EVENTS; seq++) {
			mismatches += mt.committed[t][seq] != mt.delivered[t][seq];
			mine += mt.committed[t][seq];
		}
		assert_int_equal(mismatches, 0);
		assert_true(mine > 0);
		committed += mine;
		free(mt.committed[t]);
		free(mt.delivered[t]);
	}
	pthread_barrier_destroy(&mt.start);

	lynx_recorder_stats(&st);
	assert_int_equal(st.recorded, committed);
	assert_int_equal(st.recorded + st.dropped, (uint64_t)MT_THREADS * MT_EVENTS);
	assert_int_equal(st.drained, committed);
	assert_int_equal(mt.delivered_total, committed);
	assert_int_equal(st.threads, MT_THREADS);
	assert_int_equal(st.threads_unrecorded, 0);
}

/* The forked child's checks; returns 0 or the number of the failed one. */
static int child_records_afresh(void)
{
	static struct collector mine;
	struct lynx_recorder_stats st;

	alarm(20); /* a stop that waited for the parent's drainer would hang */
	lynx_recorder_after_fork();
	lynx_recorder_set_consumer(collect, &mine);
	lynx_recorder_stats(&st);
	if (st.threads || st.recorded || st.dropped || st.drained)
		return 1;
	for (uint64_t seq = 0; seq < 4; seq++)
		if (!record(7, seq, 24))
			return 2;
#ifndef __SANITIZE_THREAD__
	/* The child starts its own drainer (the parent's is gone, not running). ThreadSanitizer
	 * does not support threads started after a multi-threaded fork. */
	if (lynx_recorder_start_drainer(1))
		return 6;
	for (int i = 0; i < 5000; i++) {
		lynx_recorder_stats(&st);
		if (st.drained == 4)
			break;
		usleep(1000);
	}
	if (st.drained != 4)
		return 7;
#endif
	lynx_recorder_stop(); /* joins the child's drainer, if any; never the parent's */
	if (mine.n != 4)
		return 3;
	for (size_t i = 0; i < 4; i++) {
		const struct lynx_event *ev = &mine.items[i].ev;

		if (ev->hook != 7 || ev->u.mem.ptr != i || ev->tid != my_tid() ||
		    !mine.items[i].payload_ok)
			return 4;
	}
	lynx_recorder_stats(&st);
	if (st.threads != 1 || st.recorded != 4 || st.drained != 4)
		return 5;
	return 0;
}

static void test_forked_child_records_afresh_after_after_fork(void **state)
{
	struct worker w = {.hook = 5, .count = 3};
	int status;
	pid_t pid;

	reset(1 << 16, 1 << 20);
	/* The parent has a drainer, an undrained ring of its own and an exited thread's. */
	assert_int_equal(lynx_recorder_start_drainer(60000), 0);
	for (uint64_t seq = 0; seq < 5; seq++)
		assert_true(record(4, seq, 8));
	run_worker(&w);

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_records_afresh());
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);

	/* The parent's events are the parent's: delivered here, once. */
	lynx_recorder_stop();
	assert_int_equal(col.n, 8);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_single_thread_events_round_trip_in_order_with_payload),
	        cmocka_unit_test(test_commit_keeps_framing_when_caller_overwrites_header),
	        cmocka_unit_test(test_ring_wraps_many_times_with_variable_sizes),
	        cmocka_unit_test(test_full_ring_drops_counts_and_recovers_after_drain),
	        cmocka_unit_test(test_threads_beyond_budget_are_unrecorded),
	        cmocka_unit_test(test_exited_thread_events_are_still_drained),
	        cmocka_unit_test(test_concurrent_producers_deliver_each_event_once_in_thread_order),
	        cmocka_unit_test(test_forked_child_records_afresh_after_after_fork),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
