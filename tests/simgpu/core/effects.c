/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Deferred effects: what queued work does to memory, applied in order of virtual end
 * time (ties in issue order) when the host observes completion. Dependencies always end
 * no later than their dependants and are issued first, so correct programs see correct
 * data; a consumer missing its wait that ends before its producer sees stale data.
 */
#include <stdlib.h>

#include "internal.h"

static bool before(const struct simgpu_effect *a, const struct simgpu_effect *b)
{
	return a->end < b->end || (a->end == b->end && a->seq < b->seq);
}

static void swap(struct simgpu_effect *a, struct simgpu_effect *b)
{
	struct simgpu_effect t = *a;

	*a = *b;
	*b = t;
}

/*
 * Queues fn(arg) to run at `end`. If the queue cannot grow, the effect runs now: the
 * data stays right for correct programs, only the stale-read detection is lost.
 */
void effects_push_locked(uint64_t end, void (*fn)(void *arg), void *arg)
{
	struct simgpu_effect *heap = simgpu.heap;
	size_t i = simgpu.heap_count;

	if (i == simgpu.heap_cap) {
		size_t cap = simgpu.heap_cap ? 2 * simgpu.heap_cap : 256;
		heap = realloc(simgpu.heap, cap * sizeof(*heap));
		if (!heap) {
			fn(arg);
			free(arg);
			return;
		}
		simgpu.heap = heap;
		simgpu.heap_cap = cap;
	}
	heap[i] = (struct simgpu_effect){end, simgpu.next_seq++, fn, arg};
	simgpu.heap_count++;
	while (i && before(&heap[i], &heap[(i - 1) / 2])) {
		swap(&heap[i], &heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
}

static struct simgpu_effect pop_locked(void)
{
	struct simgpu_effect *heap = simgpu.heap;
	struct simgpu_effect top = heap[0];
	size_t n = --simgpu.heap_count;
	size_t i = 0;

	heap[0] = heap[n];
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < n && before(&heap[l], &heap[m]))
			m = l;
		if (r < n && before(&heap[r], &heap[m]))
			m = r;
		if (m == i)
			break;
		swap(&heap[i], &heap[m]);
		i = m;
	}
	return top;
}

void effects_apply_until_locked(uint64_t t)
{
	while (simgpu.heap_count && simgpu.heap[0].end <= t) {
		struct simgpu_effect e = pop_locked();
		e.fn(e.arg);
		free(e.arg);
	}
}
