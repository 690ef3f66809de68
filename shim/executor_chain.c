/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Chains: an activation whose producer reads a temporary that the trainer frees before the
 * backward (a GEMM's output that a split, a softmax or a head merge reads)
 * is rebuilt by replaying the temporary's writer first, into scratch, then the producer
 * reading that scratch, as full recomputation reruns the ops between two saved tensors.
 *
 * The executor remembers its last launches (their parameters) and allocations. When an
 * awaited producer's launch is kept, each memory it names that the history shows allocated
 * shortly before gets a candidate: the first launch
 * after that allocation that names it (past a fill that names it alone, as the profiler
 * takes producers), captured, and the same for what that launch names. The examination
 * keeps the candidates whose memory has been freed since (chain_resolve), puts their
 * writers in front of the producer's kernels in the segment and redirects the temporaries
 * to scratch, so that the verdict covers the whole chain. In later iterations each writer
 * is found again by the word that names its temporary and its function (chain_refresh).
 * What cannot be found makes the instance one that is offloaded, as any producer that does
 * not fit its segment.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <uthash.h>

#include "arena.h"
#include "executor.h"
#include "launch_attrs.h"
#include "log.h"
#include "replay.h"
#include "executor_internal.h"

/* A launch (its parameters in a slot of the largest size) or an allocation at base. */
struct history_entry {
	bool launch;
	uint64_t serial; /* a launch's ex.launch_serial; an allocation's: the launches before it */
	CUdeviceptr base;
	struct captured_launch *slot;
};

/* A candidate's temporary: how often the trainer freed memory at base. */
struct watched_base {
	CUdeviceptr base;
	uint64_t frees;
	UT_hash_handle hh;
};

static struct watched_base *watch(CUdeviceptr base)
{
	struct watched_base *w = NULL;

	HASH_FIND(hh, ex.watched, &base, sizeof(base), w);
	if (w || !(w = calloc(1, sizeof(*w))))
		return w;
	w->base = base;
	HASH_ADD(hh, ex.watched, base, sizeof(w->base), w);
	return w;
}

void chain_note_free(CUdeviceptr base)
{
	struct watched_base *w = NULL;

	if (ex.watched)
		HASH_FIND(hh, ex.watched, &base, sizeof(base), w);
	if (w)
		w->frees++;
}

int chain_history_open(void)
{
	chain_history_close();
	ex.history = calloc(HISTORY_LENGTH, sizeof(*ex.history));
	for (uint32_t i = 0; ex.history && i < HISTORY_LENGTH; i++)
		if (!(ex.history[i].slot = malloc(sizeof(struct captured_launch) +
		                                  LYNX_LAUNCH_MAX_PARAM_BYTES))) {
			chain_history_close();
			return -ENOMEM;
		}
	return ex.history ? 0 : -ENOMEM;
}

void chain_history_close(void)
{
	for (uint32_t i = 0; ex.history && i < HISTORY_LENGTH; i++)
		free(ex.history[i].slot);
	free(ex.history);
	ex.history = NULL;
	struct watched_base *w, *tmp;
	HASH_ITER (hh, ex.watched, w, tmp) {
		HASH_DEL(ex.watched, w);
		free(w);
	}
	ex.history_next = ex.history_count = 0;
}

void chain_history_settle(void)
{
	for (size_t i = 0; ex.history && i < ex.script.n_buffers; i++) {
		const struct exec_buf *b = &ex.bufs[i];
		if ((b->action == LYNX_EXEC_RECOMPUTE && b->producer == PRODUCER_UNEXAMINED) ||
		    b->n_chain)
			return;
	}
	chain_history_close();
}

static struct history_entry *next_entry(void)
{
	struct history_entry *h = &ex.history[ex.history_next];

	ex.history_next = (ex.history_next + 1) % HISTORY_LENGTH;
	if (ex.history_count < HISTORY_LENGTH)
		ex.history_count++;
	return h;
}

void chain_remember_launch(const struct lynx_replay_kernel *k)
{
	if (!ex.history)
		return;
	struct history_entry *h = next_entry();
	struct captured_launch *c = h->slot;

	/* Larger parameters than a launch can have: remembered as nothing. */
	h->launch = k->param_bytes <= LYNX_LAUNCH_MAX_PARAM_BYTES;
	h->serial = ex.launch_serial;
	h->base = 0;
	if (!h->launch)
		return;
	exec_copy_launch(c, k);
}

void chain_remember_alloc(CUdeviceptr base)
{
	if (!ex.history || !base)
		return;
	struct history_entry *h = next_entry();

	h->launch = false;
	h->serial = ex.launch_serial;
	h->base = base;
}

/* Whether k names memory in [base, base + size). */
static bool names_range(const struct lynx_replay_kernel *k, CUdeviceptr base, size_t size)
{
	const unsigned char *p = k->params;
	uint64_t word;

	for (uint32_t at = 0; p && at + 8 <= k->param_bytes; at += 8) {
		__builtin_memcpy(&word, p + at, 8);
		if (word >= base && word - base < size)
			return true;
	}
	return false;
}

/*
 * The launch that wrote the memory at [base, base + size): among the remembered launches
 * before the one numbered `before`, the first that names it after its latest allocation;
 * with function, the first of that function; without, past a first launch that names it
 * alone (a fill). NULL when the history does not reach back to that allocation.
 */
static const struct history_entry *find_writer(CUdeviceptr base, size_t size, uint64_t before,
                                               CUfunction function)
{
	const struct history_entry *first = NULL, *second = NULL;

	for (uint32_t n = 0; n < ex.history_count; n++) {
		const struct history_entry *h =
		        &ex.history[(ex.history_next + HISTORY_LENGTH - 1 - n) % HISTORY_LENGTH];
		if (h->serial >= before)
			continue;
		if (!h->launch && h->base == base) {
			if (!function && first && second &&
			    exec_names_only(&first->slot->kernel, base, size))
				return second;
			return first;
		}
		if (!h->launch || !names_range(&h->slot->kernel, base, size) ||
		    (function && h->slot->kernel.function != function))
			continue;
		second = first;
		first = h;
	}
	return NULL;
}

static bool is_candidate(const struct exec_buf *b, CUdeviceptr base)
{
	for (uint32_t i = 0; i < b->n_candidates; i++)
		if (b->candidate[i].base == base)
			return true;
	return false;
}

/* c was launched as number `serial`. */
static void capture_from(struct exec_buf *b, const struct captured_launch *c, uint64_t serial)
{
	/* An activation of the arena too: one the trainer frees before this examination (the
	 * next layer's input, read here before an in-place update) is gone like any other. */
	for (uint32_t j = 0; j < c->n_pointers && b->n_candidates < MAX_CHAIN_CANDIDATES; j++) {
		const struct pointer_word *p = &c->pointers[j];
		if (p->base == b->addr || is_candidate(b, p->base))
			continue;
		const struct history_entry *h = find_writer(p->base, p->size, serial, NULL);
		if (!h)
			continue;
		const struct lynx_replay_kernel *k = &h->slot->kernel;
		struct watched_base *freed = watch(p->base);
		struct captured_launch *w = freed ? malloc(sizeof(*w) + k->param_bytes) : NULL;
		if (!w)
			return;
		exec_copy_launch(w, k);
		exec_find_pointers(w);
		b->candidate[b->n_candidates++] =
		        (struct chain_candidate){p->base, p->size, h->serial, freed->frees, w};
		capture_from(b, w, h->serial);
	}
}

void chain_capture(struct exec_buf *b, const struct captured_launch *c)
{
	if (ex.history)
		capture_from(b, c, b->producer_serial);
}

void chain_forget(struct exec_buf *b)
{
	for (uint32_t i = 0; i < b->n_candidates; i++)
		free(b->candidate[i].writer);
	b->n_candidates = 0;
}

/* Whether base is an activation of the arena that is evicted and not freed. */
static bool evicted_alive(CUdeviceptr base)
{
	struct lynx_arena_range range;
	const struct exec_buf *a;

	return lynx_arena_find(ex.arena, base, &range) && (a = buf_at(base, range.base)) &&
	       a->addr == base && a->state == BUF_EVICTED && !a->free_pending;
}

static bool freed_since(const struct chain_candidate *t)
{
	struct watched_base *w = NULL;

	HASH_FIND(hh, ex.watched, &t->base, sizeof(t->base), w);
	return w && w->frees > t->frees;
}

/* Whether the memory c named as it ran is still allocated as it was (not freed since, for a
 * candidate's temporary); what is not must be a
 * candidate's temporary, marked in needed. False with check filled otherwise. */
static bool check_launch(const struct exec_buf *b, const struct captured_launch *c, bool *needed,
                         struct lynx_replay_check *check)
{
	if (c->too_many_pointers) {
		check->verdict = LYNX_REPLAY_TOO_LARGE;
		snprintf(check->reason, sizeof(check->reason),
		         "a kernel names more than %d allocations", MAX_POINTER_WORDS);
		return false;
	}
	for (uint32_t j = 0; j < c->n_pointers; j++) {
		const struct pointer_word *p = &c->pointers[j];
		CUdeviceptr base;
		size_t size;
		uint64_t word;
		__builtin_memcpy(&word, c->params + p->offset, 8);
		uint32_t i = 0;
		while (i < b->n_candidates &&
		       !(b->candidate[i].base == p->base && b->candidate[i].size == p->size))
			i++;
		if (i < b->n_candidates && freed_since(&b->candidate[i])) {
			needed[i] = true;
			continue;
		}
		/* As it was, or an activation evicted but alive: a replay brings it back. */
		if ((exec_range_of((CUdeviceptr)word, &base, &size, NULL) && base == p->base &&
		     size == p->size) ||
		    evicted_alive(p->base))
			continue;
		if (i < b->n_candidates) {
			needed[i] = true;
			continue;
		}
		check->verdict = LYNX_REPLAY_FREED_OPERAND;
		snprintf(check->reason, sizeof(check->reason),
		         "its parameter word at byte %u names memory freed since it ran (a "
		         "temporary whose writer Lynx did not see)",
		         p->offset);
		return false;
	}
	return true;
}

static int by_serial(const void *a, const void *b)
{
	const struct chain_candidate *x = *(const struct chain_candidate *const *)a;
	const struct chain_candidate *y = *(const struct chain_candidate *const *)b;

	return x->serial < y->serial ? -1 : x->serial > y->serial;
}

bool chain_resolve(struct exec_buf *b, const struct chain_candidate **chain, uint32_t *n,
                   struct lynx_replay_check *check)
{
	bool needed[MAX_CHAIN_CANDIDATES] = {0}, checked[MAX_CHAIN_CANDIDATES] = {0};
	bool progress = true;

	*n = 0;
	for (uint32_t i = 0; i < b->n_launches; i++)
		if (!check_launch(b, b->launch[i], needed, check))
			return false;
	while (progress) {
		progress = false;
		for (uint32_t i = 0; i < b->n_candidates; i++) {
			if (!needed[i] || checked[i])
				continue;
			checked[i] = progress = true;
			if (!check_launch(b, b->candidate[i].writer, needed, check))
				return false;
		}
	}
	for (uint32_t i = 0; i < b->n_candidates; i++) {
		if (!needed[i])
			continue;
		if (*n == MAX_CHAIN_KERNELS) {
			check->verdict = LYNX_REPLAY_TOO_LARGE;
			snprintf(check->reason, sizeof(check->reason),
			         "it reads more than %d temporaries freed since it ran",
			         MAX_CHAIN_KERNELS);
			return false;
		}
		chain[(*n)++] = &b->candidate[i];
	}
	qsort(chain, *n, sizeof(*chain), by_serial);
	return true;
}

bool chain_refresh(struct exec_buf *b)
{
	for (uint32_t j = b->n_chain; j-- > 0;) {
		const struct chain_link *l = &b->link[j];
		CUdeviceptr base =
		        (CUdeviceptr)(lynx_replay_segment_word(b->segment, l->kernel, l->offset) -
		                      l->displacement);
		const struct history_entry *h =
		        ex.history ? find_writer(base, l->size, b->producer_serial, l->function)
		                   : NULL;
		if (!h || lynx_replay_segment_refresh(b->segment, j, &h->slot->kernel)) {
			lynx_warn_once("recompute mode: the writer of a temporary that an "
			               "activation's producer reads was not found again; that "
			               "instance is offloaded");
			return false;
		}
	}
	return true;
}
