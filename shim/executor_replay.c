/* SPDX-License-Identifier: Apache-2.0 */
/* The executor's kernel replay and windows: see executor.h, "What the plan says and what is
 * done" and "Windows"; the rest of the executor is in executor.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <uthash.h>

#include "arena.h"
#include "executor.h"
#include "log.h"
#include "replay.h"
#include "executor_internal.h"

/* ---- Replay ---------------------------------------------------------------------------- */

/* The executor's buffer based at addr (locked), or NULL. */
struct exec_buf *find_buf(CUdeviceptr addr)
{
	struct exec_buf *b = NULL;

	HASH_FIND(hh, ex.by_addr, &addr, sizeof(addr), b);
	return b;
}

struct exec_pack *pack_based_at(CUdeviceptr base)
{
	struct exec_pack *p = NULL;

	HASH_FIND(hh, ex.packs_by_base, &base, sizeof(base), p);
	return p;
}

/* The member of p whose live instance holds addr, or NULL. */
static struct exec_buf *member_at(const struct exec_pack *p, CUdeviceptr addr)
{
	for (uint32_t i = 0; i < p->count; i++) {
		struct exec_buf *m = &ex.bufs[ex.packing.member[p->first + i]];
		if (m->addr && addr - m->addr < m->sb->bytes)
			return m;
	}
	return NULL;
}

struct exec_buf *buf_at(CUdeviceptr addr, CUdeviceptr base)
{
	const struct exec_pack *p = pack_based_at(base);

	return p ? member_at(p, addr) : find_buf(base);
}

/* Whether a launch names b: an aligned word of its parameter bytes lies inside it. */
static bool launch_names(const struct lynx_replay_kernel *k, const struct exec_buf *b)
{
	const unsigned char *p = k->params;
	uint64_t word;

	for (uint32_t at = 0; p && at + 8 <= k->param_bytes; at += 8) {
		__builtin_memcpy(&word, p + at, 8);
		if (word >= b->addr && word - b->addr < b->sb->bytes)
			return true;
	}
	return false;
}

/* The end of b's producer: the launches that named it, one after another, are all seen
 * (or it is evicted, or the iteration ends). */
void end_capture(struct exec_buf *b)
{
	for (uint32_t i = 0; b->awaiting && i < ex.n_awaiting; i++) {
		if (ex.awaiting[i] == b) {
			ex.awaiting[i] = ex.awaiting[--ex.n_awaiting];
			break;
		}
	}
	if (b->awaiting && b->unseen)
		b->captured = false; /* its producer may be the launch that was not seen */
	else if (b->awaiting && b->producer == PRODUCER_REPLAYED)
		b->captured =
		        !b->misfit &&
		        b->n_launches + b->n_chain == lynx_replay_segment_kernels(b->segment) &&
		        chain_refresh(b);
	else if (b->awaiting)
		b->captured = b->n_launches > 0;
	ex.stats.producers += b->awaiting && b->captured;
	b->awaiting = false;
}

/* A freshly allocated RECOMPUTE activation: the next launch that names it starts its
 * producer. */
void await_producer(struct exec_buf *b)
{
	b->captured = b->misfit = b->examine = b->copied_out = b->unseen = false;
	b->fill_pending = false;
	b->n_launches = b->fill_wait = 0;
	chain_forget(b);
	if (b->action != LYNX_EXEC_RECOMPUTE || !ex.can_replay || b->producer == PRODUCER_REFUSED ||
	    ex.n_awaiting >= MAX_AWAITING)
		return;
	b->awaiting = true;
	ex.awaiting[ex.n_awaiting++] = b;
}

/* Launch k of b's producer, seen in this iteration: kept for the examination, or put into
 * the examined segment (the same functions and geometry, this iteration's pointers). */
static void keep_launch(struct exec_buf *b, const struct lynx_replay_kernel *k)
{
	uint32_t i = b->n_launches++;

	if (!i) {
		b->producer_function = k->function;
		b->producer_serial = ex.launch_serial;
	}
	if (b->producer == PRODUCER_REPLAYED) {
		if (i + b->n_chain >= lynx_replay_segment_kernels(b->segment) ||
		    lynx_replay_segment_refresh(b->segment, i + b->n_chain, k)) {
			b->misfit = true;
			lynx_warn_once("recompute mode: an activation's producer was launched "
			               "differently than when it was examined; that instance is "
			               "offloaded");
		}
		return;
	}
	struct captured_launch *c = realloc(b->launch[i], sizeof(*c) + k->param_bytes);
	if (!c) {
		b->n_launches = i; /* the producer as seen so far; examination will tell */
		return;
	}
	b->launch[i] = c;
	exec_copy_launch(c, k);
	exec_find_pointers(c);
	/* A first launch that names b alone reads nothing: it may be a fill. */
	b->fill_pending = !i && !c->too_many_pointers && c->n_pointers > 0;
	for (uint32_t j = 0; b->fill_pending && j < c->n_pointers; j++)
		b->fill_pending = c->pointers[j].base == b->addr;
	chain_capture(b, c);
}

void exec_copy_launch(struct captured_launch *c, const struct lynx_replay_kernel *k)
{
	memcpy(c->params, k->params, k->param_bytes);
	c->kernel = *k;
	c->kernel.params = c->params;
	if (k->attrs)
		memcpy(c->attrs, k->attrs,
		       lynx_launch_attrs_recorded(k->attr_count) * sizeof(*k->attrs));
	c->kernel.attrs = k->attrs ? c->attrs : NULL;
	c->n_pointers = 0;
	c->too_many_pointers = false;
}

void exec_find_pointers(struct captured_launch *c)
{
	c->n_pointers = 0;
	c->too_many_pointers = false;
	for (uint32_t at = 0; at + 8 <= c->kernel.param_bytes; at += 8) {
		struct pointer_word p = {.offset = at};
		uint64_t word;
		__builtin_memcpy(&word, c->params + at, 8);
		if (!exec_range_of((CUdeviceptr)word, &p.base, &p.size, NULL))
			continue;
		if (c->n_pointers == MAX_POINTER_WORDS)
			c->too_many_pointers = true;
		else
			c->pointers[c->n_pointers++] = p;
	}
}

/* Whether every allocation k names lies in [base, base + size): a fill of it. */
bool exec_names_only(const struct lynx_replay_kernel *k, CUdeviceptr base, size_t size)
{
	const unsigned char *p = k->params;
	CUdeviceptr other;
	size_t other_size;
	uint64_t word;

	for (uint32_t at = 0; p && at + 8 <= k->param_bytes; at += 8) {
		__builtin_memcpy(&word, p + at, 8);
		if (!(word >= base && word - base < size) &&
		    exec_range_of((CUdeviceptr)word, &other, &other_size, NULL))
			return false;
	}
	return true;
}

/*
 * Whether launch k, which names b or not (names), is passed over in b's capture because of
 * a fill (executor_internal.h): the fill of a replayed producer; a launch between a fill
 * and what follows it. Or k computes b after its fill: the capture starts again at k. As
 * the profiler takes producers (lifetime.c, past_initialisers); a fill followed by a kernel
 * that names b alone (an accumulation) stays the producer, and its examination refuses it.
 */
static bool past_fill(struct exec_buf *b, const struct lynx_replay_kernel *k, bool names)
{
	if (b->producer == PRODUCER_REPLAYED)
		return names && !b->n_launches && b->fill_function &&
		       k->function == b->fill_function;
	if (!b->fill_pending || b->n_launches != 1)
		return false;
	if (!names)
		return ++b->fill_wait <= MAX_FILL_WAIT;
	if (k->function == b->producer_function || exec_names_only(k, b->addr, b->sb->bytes))
		return false;
	b->fill_function = b->producer_function;
	b->n_launches = 0;
	keep_launch(b, k);
	return true;
}

/*
 * A successful launch of the program's (locked). For each awaited activation: the first
 * launch that names it starts its producer, and the launches right after it that name it
 * with the same function continue it (one per sequence of a batch, say); any other launch
 * ends it. A consumer that happens to follow with the same function joins it harmlessly:
 * what it writes goes to scratch, which the examination shows.
 */
/* b's producer goes on past the kernels a capture holds (a kernel launched once per
 * sequence of a large batch): no replay of what was kept could rebuild it whole, so it is
 * refused (offloaded for good), not examined into a DIFFERS. */
static void refuse_overlong(struct exec_buf *b)
{
	if (!ex.verdicts[LYNX_REPLAY_TOO_LARGE]++)
		snprintf(ex.verdict_reason[LYNX_REPLAY_TOO_LARGE], sizeof(ex.verdict_reason[0]),
		         "layer %u activation %u: its producer runs more than %d kernels",
		         b->sb->layer, b->sb->index, MAX_PRODUCER_KERNELS);
	if (!b->sb->microbatch)
		lynx_info("recompute mode: layer %u activation %u: offloaded instead: its producer "
		          "runs more than %d kernels",
		          b->sb->layer, b->sb->index, MAX_PRODUCER_KERNELS);
	b->producer = PRODUCER_REFUSED;
	for (uint32_t i = 0; i < MAX_PRODUCER_KERNELS; i++) {
		free(b->launch[i]);
		b->launch[i] = NULL;
	}
	b->n_launches = 0;
}

void exec_capture(const struct lynx_event *ev)
{
	struct lynx_replay_kernel k;

	if ((!ex.n_awaiting && !ex.history) || ev->result != CUDA_SUCCESS ||
	    !lynx_replay_kernel_from_event(ev, &k) || !k.params)
		return;
	ex.launch_serial++;
	for (uint32_t i = 0; i < ex.n_awaiting;) {
		struct exec_buf *b = ex.awaiting[i];
		bool names = b->addr && launch_names(&k, b);
		size_t most = b->producer == PRODUCER_REPLAYED
		                      ? lynx_replay_segment_kernels(b->segment) - b->n_chain
		                      : MAX_PRODUCER_KERNELS;
		if (past_fill(b, &k, names)) {
			i++;
		} else if (names && b->n_launches < most &&
		           (!b->n_launches || k.function == b->producer_function)) {
			keep_launch(b, &k);
			i++;
		} else if (names && b->n_launches == MAX_PRODUCER_KERNELS &&
		           b->producer == PRODUCER_UNEXAMINED &&
		           k.function == b->producer_function) {
			refuse_overlong(b);
			end_capture(b); /* moves the last one to i */
		} else if (!b->n_launches && b->addr) {
			i++; /* its producer has not started yet */
		} else {
			end_capture(b); /* moves the last one to i */
		}
	}
	chain_remember_launch(&k);
}

/*
 * A successful launch of the program's whose parameters Lynx did not see (locked): a runtime
 * launch that reached no driver launch Lynx hooks, as a runtime that called its driver by
 * another way would make. It may be the producer of any activation whose producer has not
 * started: capturing the next launch that names one would take a consumer for its producer
 * (whose replay then differs from the activation from its first byte). So such an instance
 * is offloaded, not examined or replayed; a producer under way ends, as at any other launch.
 */
void exec_unseen_launch(const struct lynx_event *ev)
{
	if (!ex.n_awaiting || ev->result != CUDA_SUCCESS || (ev->flags & LYNX_EVENT_CAPTURED))
		return;
	ex.launch_serial++;
	for (uint32_t i = 0; i < ex.n_awaiting;) {
		struct exec_buf *b = ex.awaiting[i];
		if (!b->n_launches && b->addr) {
			if (!b->unseen)
				lynx_warn_once(
				        "recompute mode: %s launched a kernel whose parameters "
				        "Lynx cannot see (no driver launch beneath it); "
				        "activations allocated before it are offloaded in that "
				        "iteration, not recomputed",
				        lynx_hooks[ev->hook].symbol);
			b->unseen = true;
			i++;
		} else {
			end_capture(b); /* moves the last one to i */
		}
	}
}

/* A stream the trainer issued work to (locked). */
void note_stream(CUstream stream)
{
	for (uint32_t i = 0; i < ex.n_streams; i++)
		if (ex.streams[i] == stream)
			return;
	if (ex.n_streams == MAX_STREAMS)
		return;
	if (ex.n_streams == ex.n_stream_events) {
		if (ex.drv.event_create(&ex.stream_marks[ex.n_streams], CU_EVENT_DISABLE_TIMING))
			return;
		if (ex.drv.event_create(&ex.window_marks[ex.n_streams], CU_EVENT_DISABLE_TIMING))
			return; /* the first event is made again next time (a rare leak) */
		ex.n_stream_events++;
	}
	ex.streams[ex.n_streams++] = stream;
}

/* A stream the trainer destroyed (locked): no replay is fenced against it from now on (a
 * destroyed handle fails, and the replay with it). A window marked with it is not
 * fenced by its marks: its replays are made by the guard. */
void forget_stream(CUstream stream)
{
	for (uint32_t i = 0; i < ex.n_streams; i++) {
		if (ex.streams[i] != stream)
			continue;
		uint32_t last = --ex.n_streams;
		CUevent mark = ex.stream_marks[i], window_mark = ex.window_marks[i];
		ex.streams[i] = ex.streams[last];
		ex.stream_marks[i] = ex.stream_marks[last];
		ex.window_marks[i] = ex.window_marks[last];
		ex.stream_marks[last] = mark;
		ex.window_marks[last] = window_mark;
		ex.window_marked_at = 0;
		ex.window_marked_streams = 0;
		return;
	}
}

/*
 * A replay on stream is fenced against the trainer's other streams, as the examination was
 * by the idle device: it waits for the work they have queued (after == NULL, before the
 * replay), and they wait for it (after: its event, recorded on stream after the replay).
 * With one stream, nothing.
 */
static CUresult fence_replay(CUstream stream, CUevent after)
{
	CUresult r = CUDA_SUCCESS;

	for (uint32_t i = 0; i < ex.n_streams && r == CUDA_SUCCESS; i++) {
		if (ex.streams[i] == stream)
			continue;
		if (after)
			r = exec_wait_for(ex.streams[i], after);
		else if ((r = ex.drv.event_record(ex.stream_marks[i], ex.streams[i])) ==
		         CUDA_SUCCESS)
			r = exec_wait_for(stream, ex.stream_marks[i]);
		/* A stream that cannot be fenced (the trainer is destroying it, or it captures
		 * a graph): the host waits for the device instead, outside a capture. */
		if (r != CUDA_SUCCESS && !lynx_capture_active()) {
			driver_failed("fencing a replay against a trainer stream", r);
			r = after ? (exec_sync_event(after) ? CUDA_SUCCESS : r)
			          : ex.drv.ctx_synchronize();
		}
	}
	return r;
}

/*
 * Scratch for memory a replay writes besides its activation (a workspace), stream-ordered
 * on the replay's stream so that it is held only while the replay runs, not at the peak
 * the plan counted. Out of memory: as a restore (RESTORE_ATTEMPTS). 0 when there is none.
 */
static CUdeviceptr scratch_alloc(size_t size, CUstream stream)
{
	CUdeviceptr p = 0;

	reclaim_for(size, true);
	for (int attempt = 0; attempt < RESTORE_ATTEMPTS; attempt++) {
		if (ex.drv.mem_alloc_async(&p, size, stream) == CUDA_SUCCESS)
			return p;
		complete_frees(attempt > 0);
		if (attempt > 1)
			ex.drv.ctx_synchronize();
	}
	return 0;
}

/* The replay's parameter word that names other memory: an evicted activation it reads
 * comes back first, on the same stream. False when it could not be brought back. */
static bool bring_back(uint64_t word, CUstream stream, const struct exec_buf *owner)
{
	struct lynx_arena_range range;
	struct exec_buf *c;

	if (lynx_arena_find(ex.arena, (CUdeviceptr)word, &range) &&
	    (c = buf_at((CUdeviceptr)word, range.base)) && c != owner)
		return make_resident(c, stream);
	return true;
}

/* The sibling mapped again at addr for the replay under way (riding), or NULL. */
static const struct exec_buf *riding_at(CUdeviceptr addr)
{
	const struct exec_buf *c = find_buf(addr);

	return c && c->riding ? c : NULL;
}

/*
 * Relaunches b's producer, captured in this iteration, on stream: into b's memory (mapped
 * again by the caller), or with into != 0 into that scratch instead. Inputs are read in
 * place (evicted ones restored first), memory it writes besides b goes to scratch. Fenced
 * against the trainer's other streams, unless the replay stream already waits for a
 * window's marks. A failed launch is tried once more with the device idle. Returns 0,
 * -EAGAIN when nothing was launched (no fence, no scratch: b's memory is as it was), or
 * -EIO (a launch failed twice).
 */
static int relaunch(struct exec_buf *b, CUstream stream, CUdeviceptr into)
{
	struct lynx_replay_redirect redirects[2 * MAX_OPERANDS + 1]; /* siblings', examined */
	struct lynx_replay_stats stats;
	uint64_t scratch_bytes = 0;
	size_t n = 0;
	int err = -EAGAIN;

	if (ex.replay_depth >= MAX_REPLAY_DEPTH)
		return -EIO;
	ex.replay_depth++;
	if (!(ex.window_fenced && stream == ex.replay_stream) &&
	    fence_replay(stream, NULL) != CUDA_SUCCESS)
		goto out;
	if (into)
		redirects[n++] = (struct lynx_replay_redirect){b->addr, b->sb->bytes, into};
	/* Inputs first: a nested replay that brings one back takes its scratch and gives it
	 * back before this one takes any, so one replay's scratch is held at a time. */
	for (uint32_t i = 0; i < b->n_operands; i++) {
		const struct lynx_replay_operand *op = &b->operands[i];

		if (op->role == LYNX_REPLAY_INPUT &&
		    !bring_back(lynx_replay_segment_word(b->segment, op->kernel, op->offset),
		                stream, b))
			goto out; /* an input is not there: launching would fault */
	}
	for (uint32_t i = 0; i < b->n_operands; i++) {
		const struct lynx_replay_operand *op = &b->operands[i];
		uint64_t word = lynx_replay_segment_word(b->segment, op->kernel, op->offset);
		CUdeviceptr from = (CUdeviceptr)(word - op->displacement);
		size_t j = 0;

		if (op->role == LYNX_REPLAY_INPUT || riding_at(from))
			continue; /* read in place; a sibling mapped again is written in place */
		while (j < n && redirects[j].from != from)
			j++;
		if (j < n)
			continue; /* another word into the same memory: the same scratch */
		CUdeviceptr to = scratch_alloc(op->size, stream);
		if (!to)
			goto out;
		redirects[n++] = (struct lynx_replay_redirect){from, op->size, to};
		scratch_bytes += op->size;
	}
	for (int attempt = 0; attempt < 2 && err; attempt++) {
		if (attempt) {
			ex.stats.replay_failures++;
			ex.drv.ctx_synchronize();
		}
		bool injected = (ex.fault == LYNX_EXEC_FAULT_FAIL_REPLAY && !attempt) ||
		                ex.fault == LYNX_EXEC_FAULT_LOSE_REPLAYS;
		err = injected ? -EIO
		               : lynx_replay_launch(b->segment, stream, redirects, n, &stats);
	}
	if (!err && scratch_bytes > ex.stats.replay_scratch_bytes)
		ex.stats.replay_scratch_bytes = scratch_bytes;
out:
	ex.replay_depth--;
	for (size_t i = into ? 1 : 0; i < n; i++)
		ex.drv.mem_free_async(redirects[i].to, stream);
	return err == -EAGAIN ? -EAGAIN : err ? -EIO : 0;
}

/* Relaunches b's producer into b's memory (relaunch). Returns 0; -EAGAIN when nothing was
 * launched and may_defer (a window: the guard replays it later); -EIO when b could not be
 * refilled: its bytes are lost. */
static int replay_into(struct exec_buf *b, CUstream stream, bool may_defer)
{
	uint64_t start = exec_now_ns();
	int err = relaunch(b, stream, 0);

	if (!err) {
		ex.stats.replays++;
		exec_trace(TRACE_REPLAY, b, start);
		return 0;
	}
	if (err == -EAGAIN && may_defer)
		return err;
	ex.stats.failures++;
	b->producer = PRODUCER_REFUSED; /* later instances are offloaded */
	lynx_data_lost("recompute mode: the producer of layer %u's activation %u (micro-batch %u) "
	               "could not be replayed",
	               b->sb->layer, b->sb->index, b->sb->microbatch);
	return -EIO;
}

/* Which allocation holds addr, for the examination: an activation of the arena, else what
 * the driver says. */
bool exec_range_of(CUdeviceptr addr, CUdeviceptr *base, size_t *size, void *arg)
{
	struct lynx_arena_range range;
	struct exec_buf *b;

	(void)arg;
	if (lynx_arena_find(ex.arena, addr, &range)) {
		const struct exec_pack *p = pack_based_at(range.base);

		b = p ? member_at(p, addr) : find_buf(range.base);
		if (p && !b)
			return false; /* a pack's place that no activation holds now */
		*base = b ? b->addr : range.base;
		*size = b ? b->sb->bytes : range.size;
		/* Freed by the trainer (its free queued), or its memory given away: gone. A pack's
		 * member evicted while its pack stays mapped: its bytes may be another's. */
		return range.state == LYNX_ARENA_RESIDENT && addr - *base < *size &&
		       !(b && (b->free_pending || b->donated)) &&
		       !(b && b->pack && b->state == BUF_EVICTED);
	}
	return ex.address_range(base, size, addr) == CUDA_SUCCESS;
}

/*
 * b's siblings: other activations whose producer started at the same launch (a dropout's
 * output and its mask). A replay for b writes them too, and the examination cannot tell
 * that write from a read, since it writes the same bytes; restoring them first would hold
 * their memory early. So each is redirected to scratch, in the examination (redirects,
 * scratch it allocates: b must not depend on what they held) and in every replay (one
 * SCRATCH operand per word that names one, in operands). Returns how many redirects, or
 * -1 when there is no memory (what was allocated is in redirects[0..]). b's launch i is
 * segment kernel first + i.
 */
static int sibling_redirects(const struct exec_buf *b, uint32_t first,
                             struct lynx_replay_redirect *redirects, size_t *n_redirects,
                             struct lynx_replay_operand *operands, size_t *n_operands)
{
	struct lynx_arena_range range;
	struct exec_buf *c;
	uint64_t word;

	*n_redirects = *n_operands = 0;
	for (uint32_t i = 0; i < b->n_launches; i++) {
		for (uint32_t at = 0; at + 8 <= b->launch[i]->kernel.param_bytes; at += 8) {
			__builtin_memcpy(&word, b->launch[i]->params + at, 8);
			if (!lynx_arena_find(ex.arena, (CUdeviceptr)word, &range) ||
			    !(c = buf_at((CUdeviceptr)word, range.base)) || c == b ||
			    !c->n_launches || c->producer_serial != b->producer_serial ||
			    word - c->addr >= c->sb->bytes || *n_operands == MAX_OPERANDS)
				continue;
			operands[(*n_operands)++] = (struct lynx_replay_operand){
			        first + i, at, word - c->addr, c->sb->bytes, LYNX_REPLAY_SCRATCH};
			size_t j = 0;
			while (j < *n_redirects && redirects[j].from != c->addr)
				j++;
			if (j < *n_redirects || j == MAX_OPERANDS)
				continue;
			CUdeviceptr to = 0;
			if (ex.replay_drv.mem_alloc(&to, c->sb->bytes) != CUDA_SUCCESS)
				return -1;
			redirects[(*n_redirects)++] =
			        (struct lynx_replay_redirect){c->addr, c->sb->bytes, to};
		}
	}
	return 0;
}

/*
 * How much device memory an examination may take now: what LYNX_BUDGET leaves beside what
 * is in use and the room kept for a replay's scratch (reclaim_for); at least 1 byte. An
 * examination that needs more is refused (NO_ROOM) and its activation offloaded for good:
 * the budget holds from the first planned step, where the executor examines while it
 * offloads, and prefetches, what it will replay later. 0 (no limit) without LYNX_BUDGET:
 * a budget the planner chose is no promise to keep at a replay's expense.
 */
static size_t examination_room(void)
{
	uint64_t limit = ex.expect.budget_bytes, room = ex.stats.replay_scratch_bytes, in_use;

	if (!limit || !ex.expect.budget_asked || !exec_device_in_use(&in_use))
		return 0;
	if (room < ex.expect.replay_scratch_bytes)
		room = ex.expect.replay_scratch_bytes;
	/* What the default pool keeps is no use to an examination: give it back, look again. */
	if (in_use + room + 1 >= limit &&
	    exec_trim_pool(in_use + room + 1 - limit + MAX_EXAMINED_BYTES) &&
	    !exec_device_in_use(&in_use))
		return 1;
	uint64_t used = in_use + room;
	return used + 1 < limit ? (size_t)(limit - used) : 1;
}

/* The name of b's producer (its first kernel) as the driver gives it, or "?". */
static const char *producer_name(const struct exec_buf *b)
{
	const char *name = NULL;

	if (ex.func_name && ex.func_name(&name, b->producer_function) == CUDA_SUCCESS && name)
		return name;
	name = NULL;
	if (ex.kernel_name &&
	    ex.kernel_name(&name, (CUkernel)(uintptr_t)b->producer_function) == CUDA_SUCCESS &&
	    name)
		return name;
	return "?";
}

/*
 * After chain[0..n_chain) were examined as the segment's first kernels, each with its
 * temporary redirected to scratch: every word of the segment that names a temporary becomes
 * a SCRATCH operand (operands[*n_operands..], at most MAX_OPERANDS in all), and b's links
 * say how each iteration finds the writers again. False when the words do not fit.
 */
static bool chain_operands(struct exec_buf *b, const struct chain_candidate *const *chain,
                           uint32_t n_chain, const struct lynx_replay_kernel *kernels,
                           size_t n_kernels, struct lynx_replay_operand *operands,
                           size_t *n_operands)
{
	b->n_chain = n_chain;
	for (uint32_t j = 0; j < n_chain; j++) {
		const struct chain_candidate *t = chain[j];
		bool linked = false;
		b->link[j] = (struct chain_link){.function = kernels[j].function, .size = t->size};
		for (uint32_t k = 0; k < n_kernels; k++) {
			const unsigned char *p = kernels[k].params;
			for (uint32_t at = 0; p && at + 8 <= kernels[k].param_bytes; at += 8) {
				uint64_t word;
				__builtin_memcpy(&word, p + at, 8);
				if (word < t->base || word - t->base >= t->size)
					continue;
				if (*n_operands == MAX_OPERANDS)
					return false;
				operands[(*n_operands)++] = (struct lynx_replay_operand){
				        k, at, word - t->base, t->size, LYNX_REPLAY_SCRATCH};
				if (k > j && !linked) {
					b->link[j].kernel = k;
					b->link[j].offset = at;
					b->link[j].displacement = word - t->base;
					linked = true;
				}
			}
		}
		if (!linked)
			return false;
	}
	return true;
}

/*
 * The first instance of b restored by copy, at its first use in the backward on stream:
 * replay its producer beside it and examine the result (replay.h), with every activation
 * the producer names resident and the device idle. A temporary the producer read and that
 * is freed since is written again first by its writer, into scratch (executor_chain.c).
 * The verdict holds for b from then on.
 */
void exec_examine(struct exec_buf *b, CUstream stream)
{
	/* siblings' words, then the chain's, then what the examination found */
	struct lynx_replay_operand operands[3 * MAX_OPERANDS], *found = operands + 2 * MAX_OPERANDS;
	struct lynx_replay_redirect redirects[MAX_OPERANDS + MAX_CHAIN_KERNELS];
	size_t n_redirects = 0, n_sibling_words = 0, n_words = 0;
	struct lynx_replay_examination how = {.range_of = exec_range_of,
	                                      .max_operand_bytes = MAX_EXAMINED_BYTES,
	                                      .operands = found,
	                                      .operand_capacity = MAX_OPERANDS};
	struct lynx_replay_range output = {b->addr, b->sb->bytes};
	struct lynx_replay_kernel kernels[MAX_CHAIN_KERNELS + MAX_PRODUCER_KERNELS];
	const struct chain_candidate *chain[MAX_CHAIN_KERNELS];
	struct lynx_replay_check check = {.verdict = LYNX_REPLAY_NO_MEMORY};
	uint64_t start = exec_now_ns();
	uint32_t n_chain = 0;
	uint64_t word;

	b->examine = false;
	exec_update(b);
	if (ex.started)
		ex.examined_in[(ex.started - 1) % 3] = true;
	for (uint32_t i = 0; i < b->n_launches; i++) {
		for (uint32_t at = 0; at + 8 <= b->launch[i]->kernel.param_bytes; at += 8) {
			__builtin_memcpy(&word, b->launch[i]->params + at, 8);
			bring_back(word, stream, b);
		}
	}
	bool resolved = chain_resolve(b, chain, &n_chain, &check);
	/* What the writers taken read comes back too (not what the others would). */
	for (uint32_t j = 0; resolved && j < n_chain; j++) {
		const struct captured_launch *w = chain[j]->writer;
		for (uint32_t at = 0; at + 8 <= w->kernel.param_bytes; at += 8) {
			__builtin_memcpy(&word, w->params + at, 8);
			bring_back(word, stream, b);
		}
	}
	ex.drv.ctx_synchronize();
	if (!resolved)
		; /* check says why */
	else if (sibling_redirects(b, n_chain, redirects, &n_redirects, operands, &n_sibling_words))
		snprintf(check.reason, sizeof(check.reason), "no memory for its siblings' scratch");
	else {
		for (uint32_t j = 0; j < n_chain; j++)
			kernels[j] = chain[j]->writer->kernel;
		for (uint32_t i = 0; i < b->n_launches; i++)
			kernels[n_chain + i] = b->launch[i]->kernel;
		/* Each temporary of the chain is written into scratch of its own, within the
		 * room the budget leaves (taken before the examination measures its own). */
		size_t temporaries = 0, room = n_chain ? examination_room() : 0;
		for (uint32_t j = 0; j < n_chain; j++)
			temporaries += chain[j]->size;
		if (room && temporaries >= room) {
			check.verdict = LYNX_REPLAY_NO_ROOM;
			snprintf(check.reason, sizeof(check.reason),
			         "its temporaries take %zu bytes of device memory, %zu allowed now",
			         temporaries, room);
			n_chain = 0; /* nothing allocated, nothing examined */
		}
		size_t first_temporary = n_redirects; /* after the siblings' */
		for (uint32_t j = 0; j < n_chain; j++) {
			CUdeviceptr to = 0;
			if (ex.replay_drv.mem_alloc(&to, chain[j]->size) != CUDA_SUCCESS)
				break;
			redirects[n_redirects++] =
			        (struct lynx_replay_redirect){chain[j]->base, chain[j]->size, to};
		}
		if (check.verdict == LYNX_REPLAY_NO_ROOM)
			; /* check says why */
		else if (n_redirects - first_temporary < n_chain)
			snprintf(check.reason, sizeof(check.reason),
			         "no memory for its temporaries' scratch");
		else if (lynx_replay_segment_create(&ex.replay_drv, kernels,
		                                    n_chain + b->n_launches, &b->segment))
			snprintf(check.reason, sizeof(check.reason), "no memory for the segment");
		else {
			/* Measured with its operands brought back and the scratch taken. */
			how.max_device_bytes = examination_room();
			lynx_replay_examine(b->segment, stream, &output, 1, redirects, n_redirects,
			                    &how, &check);
		}
	}
	for (size_t i = 0; i < n_redirects; i++)
		ex.replay_drv.mem_free(redirects[i].to);
	n_words = n_sibling_words;
	if (check.verdict == LYNX_REPLAY_REPRODUCES &&
	    !chain_operands(b, chain, n_chain, kernels, n_chain + b->n_launches, operands,
	                    &n_words)) {
		check.verdict = LYNX_REPLAY_TOO_LARGE;
		snprintf(check.reason, sizeof(check.reason),
		         "its temporaries are named by more than %d parameter words", MAX_OPERANDS);
	}
	size_t n_operands = n_words + how.operand_count;
	/* Replays nest through evicted inputs that are replayed too: bound the chain. */
	b->chain = 1;
	b->n_reads = 0;
	for (size_t i = 0; check.verdict == LYNX_REPLAY_REPRODUCES && i < how.operand_count; i++) {
		struct lynx_arena_range range;
		struct exec_buf *c;
		word = lynx_replay_segment_word(b->segment, found[i].kernel, found[i].offset);
		if (found[i].role != LYNX_REPLAY_INPUT ||
		    !lynx_arena_find(ex.arena, (CUdeviceptr)word, &range) ||
		    !(c = buf_at((CUdeviceptr)word, range.base)) || c == b)
			continue;
		if (c->producer == PRODUCER_REPLAYED && c->chain + 1 > b->chain)
			b->chain = c->chain + 1;
		bool listed = c->action == LYNX_EXEC_KEEP || b->n_reads == MAX_READS;
		for (uint32_t k = 0; !listed && k < b->n_reads; k++)
			listed = b->reads[k] == (uint32_t)(c - ex.bufs);
		if (!listed)
			b->reads[b->n_reads++] = (uint32_t)(c - ex.bufs);
	}
	if (check.verdict == LYNX_REPLAY_REPRODUCES && b->chain > MAX_REPLAY_DEPTH / 2) {
		check.verdict = LYNX_REPLAY_TOO_LARGE;
		snprintf(check.reason, sizeof(check.reason),
		         "its replay would replay %u evicted inputs in a chain (at most %d)",
		         b->chain - 1, MAX_REPLAY_DEPTH / 2 - 1);
	}
	if (check.verdict == LYNX_REPLAY_REPRODUCES &&
	    !(b->operands = malloc((n_operands ? n_operands : 1) * sizeof(*operands)))) {
		check.verdict = LYNX_REPLAY_NO_MEMORY;
		snprintf(check.reason, sizeof(check.reason), "no host memory");
	}
	if (check.restore_failed)
		lynx_data_lost("recompute mode: examining layer %u's activation %u left memory it "
		               "names poisoned (%s)",
		               b->sb->layer, b->sb->index, check.reason);
	const char *kernel = producer_name(b);
	if (!ex.verdicts[check.verdict]++)
		snprintf(ex.verdict_reason[check.verdict], sizeof(ex.verdict_reason[0]),
		         "layer %u activation %u, kernel %.80s: %s", b->sb->layer, b->sb->index,
		         kernel, check.reason);
	if (check.verdict == LYNX_REPLAY_REPRODUCES) {
		memcpy(b->operands, operands, n_words * sizeof(*operands));
		memcpy(b->operands + n_words, found, how.operand_count * sizeof(*operands));
		b->n_operands = (uint32_t)n_operands;
		b->producer = PRODUCER_REPLAYED;
		b->examined_iteration = ex.stats.iterations;
		ex.stats.chained += n_chain > 0;
	} else {
		b->producer = PRODUCER_REFUSED;
		b->n_chain = 0;
		lynx_replay_segment_destroy(b->segment);
		b->segment = NULL;
	}
	if (!b->sb->microbatch)
		lynx_info("recompute mode: layer %u activation %u, kernel %s%s: %s: %s",
		          b->sb->layer, b->sb->index, kernel,
		          n_chain ? " (after its temporaries' writers)" : "",
		          b->producer == PRODUCER_REPLAYED ? "recomputed by replay from now on"
		                                           : "offloaded instead",
		          check.reason);
	for (uint32_t i = 0; i < MAX_PRODUCER_KERNELS; i++) {
		free(b->launch[i]);
		b->launch[i] = NULL;
	}
	chain_forget(b);
	exec_trace(TRACE_EXAMINE, b, start);
}

/*
 * Maps memory at b's address again: a spare's if there is one, else new. Out of memory,
 * with retry: first the frees already done, then waiting for the pending ones. Returns 0
 * (b resident, to be filled) or the arena's error (b stays evicted).
 */
static int map_again(struct exec_buf *b, CUstream stream, bool retry)
{
	/* A pack's memory is shared: it takes none given away. */
	struct exec_buf *donor = b->pack ? NULL : take_spare(b->sb->bytes, stream, b);
	int err = -ENOMEM;

	if (donor && !(err = lynx_arena_restore_from(ex.arena, b->addr, donor->addr))) {
		donor->donated = true;
	} else {
		if (!b->pack || !exec_pack_mapped(b->pack)) /* new memory: room within the budget */
			reclaim_for(b->pack ? b->pack->bytes : b->sb->bytes, false);
		err = exec_map(b);
	}
	/* Out of memory: the frees the host has seen done, then every one pending, then the
	 * whole device idle (a transient failure, another process's memory), a few times.
	 * Another failure (a driver error on a fresh mapping) is retried as often: the bytes
	 * are lost if the restore gives up. */
	for (int attempt = 0; retry && err && attempt < RESTORE_ATTEMPTS; attempt++) {
		if (!attempt && err == -ENOMEM)
			ex.stats.oom_waits++;
		complete_frees(attempt > 0);
		if (attempt > 1)
			ex.drv.ctx_synchronize();
		err = exec_map(b);
	}
	if (err)
		return err;
	b->state = BUF_RESIDENT;
	evicted_add(-(int64_t)b->sb->bytes);
	return 0;
}

/*
 * b's siblings (sibling_redirects) that wait, evicted, for a replay of the same launch:
 * mapped again now, so that b's replay writes them in place (riding) instead of into
 * scratch, and each is not replayed on its own later. The plan counts them so: siblings are
 * rebuilt together (the checker's rebuild()), and where the producer is replayed after a
 * temporary's writer, once per sibling would rerun that writer as often. One that cannot be
 * mapped now is left for its own restore. Returns how many, in riders.
 */
static size_t board_siblings(struct exec_buf *b, CUstream stream, struct exec_buf **riders)
{
	size_t n = 0;

	for (uint32_t i = 0; i < b->n_operands; i++) {
		const struct lynx_replay_operand *op = &b->operands[i];
		struct exec_buf *c;

		if (op->role != LYNX_REPLAY_SCRATCH)
			continue;
		c = find_buf(
		        (CUdeviceptr)(lynx_replay_segment_word(b->segment, op->kernel, op->offset) -
		                      op->displacement));
		if (!c || c == b || c->riding || c->pack || c->sb->bytes != op->size ||
		    c->producer_serial != b->producer_serial || c->state != BUF_EVICTED ||
		    !c->by_replay || c->producer != PRODUCER_REPLAYED || c->donated ||
		    c->free_pending || map_again(c, stream, false))
			continue;
		c->riding = true;
		riders[n++] = c;
	}
	return n;
}

/*
 * After b's replay (err: replay_into's), its riders: written, so ready once the replay is;
 * or, where it did not run, evicted once more for their own restores. One that cannot be
 * unmapped is filled by its own replay now, as its restore would.
 */
static void land_siblings(struct exec_buf **riders, size_t n, CUstream stream, int err)
{
	for (size_t i = 0; i < n; i++) {
		struct exec_buf *c = riders[i];
		CUresult r;

		c->riding = false;
		if (!err) {
			if ((r = ex.drv.event_record(c->ready, stream)) == CUDA_SUCCESS) {
				c->ready_pending = true;
			} else {
				driver_failed("ordering a replay", r);
				ex.drv.ctx_synchronize();
			}
			ex.stats.sibling_restores++;
			exec_trace(TRACE_SIBLING_REPLAY, c, 0);
		} else if (!exec_unmap(c)) {
			c->state = BUF_EVICTED;
			evicted_add((int64_t)c->sb->bytes);
		} else {
			replay_into(c, stream, false);
		}
		exec_update(c);
	}
}

/*
 * Maps memory at b's address again (map_again), refills it on stream (a copy back, or a
 * replay of its producer, which fills its evicted siblings too) and records `ready` there.
 * Returns 0 or the arena's error (b then stays evicted).
 */
int exec_restore(struct exec_buf *b, CUstream stream)
{
	int err = map_again(b, stream, true);
	CUresult r;

	if (err)
		return err;
	if (b->by_replay) {
		struct exec_buf *riders[MAX_OPERANDS];
		size_t n_riders = b->segment ? board_siblings(b, stream, riders) : 0;

		/* In a window, a replay that could not start leaves b evicted for the guard. */
		err = replay_into(b, stream, stream == ex.replay_stream);
		land_siblings(riders, n_riders, stream, err);
		if (err == -EAGAIN && !exec_unmap(b)) {
			b->state = BUF_EVICTED;
			evicted_add((int64_t)b->sb->bytes);
			exec_update(b);
			return err;
		}
		if (!err) {
			/* Consumers on every stream must wait for it (and for its riders, recorded
			 * before it): if that cannot be ordered, wait here until it is done. */
			if ((r = ex.drv.event_record(b->ready, stream)) == CUDA_SUCCESS)
				r = fence_replay(stream, b->ready);
			if (r == CUDA_SUCCESS) {
				b->ready_pending = true;
			} else {
				driver_failed("ordering a replay", r);
				ex.drv.ctx_synchronize();
			}
		}
		exec_update(b);
		return 0;
	}
	if ((r = ex.drv.memcpy_htod_async(b->addr, b->host, b->sb->bytes, stream)) ||
	    (r = ex.drv.event_record(b->ready, stream))) {
		/* Mapped but not filled: the trainer would read garbage. Synchronise and copy
		 * once more, blocking; this is the path of last resort. */
		driver_failed("the restore copy", r);
		ex.drv.ctx_synchronize();
		if ((r = ex.drv.memcpy_htod_async(b->addr, b->host, b->sb->bytes, NULL)) ||
		    (r = ex.drv.ctx_synchronize())) {
			char error[96];
			lynx_data_lost("recompute mode: layer %u's activation %u (micro-batch %u) "
			               "could not be copied back from the host (%s, twice)",
			               b->sb->layer, b->sb->index, b->sb->microbatch,
			               lynx_cuda_error_text((int)r, error, sizeof(error)));
		}
	} else {
		b->ready_pending = true;
	}
	/* The first instance restored by copy: its producer is examined at its next use. */
	b->examine = b->captured && b->producer == PRODUCER_UNEXAMINED && b->n_launches;
	exec_update(b);
	return 0;
}

/* The restore token came: bring b back on the restore stream, or cancel its eviction. */
void exec_prefetch(struct exec_buf *b)
{
	if (b->state == BUF_OFFLOADING && !b->donated) {
		b->state = BUF_RESIDENT; /* the copy runs on, unused */
		ex.stats.cancelled++;
		exec_update(b);
		return;
	}
	/* Replayed by the guard, on the consumer's stream: a replay ahead of it, on another
	 * stream, could read inputs the consumer's stream is still changing. An instance
	 * offloaded until its producer is examined comes back there too, by copy, where the
	 * plan rebuilds it: ahead, with every such activation of its layer at the layer's
	 * backward, the first planned steps went over budgets the plan fits. */
	if (b->by_replay ||
	    (b->action == LYNX_EXEC_RECOMPUTE && b->producer == PRODUCER_UNEXAMINED))
		return;
	if (b->state == BUF_OFFLOADING)
		exec_settle(b);
	if (b->state != BUF_EVICTED)
		return;
	if (ex.fault == LYNX_EXEC_FAULT_FAIL_PREFETCH || exec_restore(b, ex.restore_stream)) {
		ex.stats.prefetch_failures++; /* the guard restores it on demand */
		return;
	}
	ex.stats.prefetches++;
	exec_trace(TRACE_RESTORE_AHEAD, b, 0);
}

/* ---- Windows ------------------------------------------------------------------------------ */

/* Whether b's replay reads an allocation that the window's collective uses: the two would
 * run at once. */
static bool reads_window_buffers(const struct exec_buf *b)
{
	for (uint32_t i = 0; i < b->n_operands; i++) {
		const struct lynx_replay_operand *op = &b->operands[i];
		struct lynx_arena_range range;
		CUdeviceptr base;
		size_t size;

		if (op->role != LYNX_REPLAY_INPUT)
			continue;
		uint64_t word = lynx_replay_segment_word(b->segment, op->kernel, op->offset);
		if (lynx_arena_find(ex.arena, (CUdeviceptr)word, &range)) {
			/* A pack's member: its own bytes, not its neighbours'. */
			const struct exec_buf *c = buf_at((CUdeviceptr)word, range.base);
			base = c && c->pack ? c->addr : range.base;
			size = c && c->pack ? c->sb->bytes : range.size;
		} else if (ex.address_range(&base, &size, (CUdeviceptr)word) != CUDA_SUCCESS) {
			base = (CUdeviceptr)word; /* unknown: the word itself */
			size = 1;
		}
		if ((ex.window_send && ex.window_send - base < size) ||
		    (ex.window_recv && ex.window_recv - base < size))
			return true;
	}
	return false;
}

/* The replay stream waits for the trainer's streams as they were before the window's
 * call: once per window. */
static bool fence_window(void)
{
	for (uint32_t i = 0; !ex.window_fenced && i < ex.window_marked_streams; i++)
		if (exec_wait_for(ex.replay_stream, ex.window_marks[i]) != CUDA_SUCCESS)
			return false;
	ex.window_fenced = true;
	return true;
}

/* The verdict on b's window (why NULL: it reproduces there), logged and counted. */
static void conclude_window(struct exec_buf *b, const char *why)
{
	if (b->check_host)
		ex.drv.mem_free_host(b->check_host);
	b->check_host = NULL;
	b->check_pending = false;
	ex.windows_checked++;
	b->window = why ? WINDOW_NONE : WINDOW_CHECKED;
	if (why && !ex.windows_refused++)
		snprintf(ex.window_refusal, sizeof(ex.window_refusal), "layer %u activation %u: %s",
		         b->sb->layer, b->sb->index, why);
	if (!b->sb->microbatch)
		lynx_info("recompute mode: layer %u activation %u: %s%s", b->sb->layer,
		          b->sb->index,
		          why ? "replayed on demand, not in its window: "
		              : "replayed in its window from now on",
		          why ? why : "");
	exec_update(b);
}

/* The window check's comparison (start_check); wait: for its copies first (the host
 * stalls). */
void finish_check(struct exec_buf *b, bool wait)
{
	if (wait && (!exec_sync_event(b->checked) || !exec_sync_event(b->copied))) {
		conclude_window(b, "its check's copies could not be waited for");
		return;
	}
	conclude_window(b, memcmp(b->check_host, b->host, b->sb->bytes)
	                           ? "a replay there differs: what it reads changes between the "
	                             "window and the activation's use"
	                           : NULL);
}

/*
 * b's window, in the iteration after its examination, where b was offloaded once more:
 * its producer is replayed exactly as it will be in later windows (behind the marks, the
 * trainer's streams waiting for it), but into scratch, whose bytes are copied to the host
 * and compared with the offloaded ones once both copies are done (poll). No host wait, so
 * the iteration runs as the steady state will, and the scratch is held only for its copy.
 */
static void start_check(struct exec_buf *b)
{
	uint64_t start = exec_now_ns();
	size_t bytes = b->sb->bytes;
	CUdeviceptr out = 0;
	CUresult r = CUDA_SUCCESS;

	if (reads_window_buffers(b)) {
		conclude_window(b, "it reads a buffer of the window's own collective");
		return;
	}
	/* What cannot start is not tried again: b is replayed on demand (an activation left
	 * unchecked would be offloaded in every iteration). */
	if (!b->check_host && ex.drv.mem_alloc_host(&b->check_host, bytes) != CUDA_SUCCESS) {
		b->check_host = NULL;
		conclude_window(b, "no pinned host memory to check it");
		return;
	}
	if (!fence_window() || !(out = scratch_alloc(bytes, ex.replay_stream))) {
		conclude_window(b, "no device memory to check it");
		return;
	}
	if (relaunch(b, ex.replay_stream, out) ||
	    (r = ex.drv.memcpy_dtoh_async(b->check_host, out, bytes, ex.replay_stream)) ||
	    (r = ex.drv.event_record(b->checked, ex.replay_stream)) ||
	    (r = fence_replay(ex.replay_stream, b->checked))) {
		ex.drv.mem_free_async(out, ex.replay_stream);
		if (r)
			driver_failed("a window's check", r);
		ex.drv.ctx_synchronize(); /* nothing of it left running */
		conclude_window(b, "its replay there failed");
		return;
	}
	ex.drv.mem_free_async(out, ex.replay_stream);
	b->check_pending = true;
	exec_update(b);
	exec_trace(TRACE_WINDOW_CHECK, b, start);
}

/* b's window: its replay on the replay stream, behind the marks; the trainer's streams
 * then wait for it (exec_restore). What cannot start here is left to the guard. */
static void replay_in_window(struct exec_buf *b)
{
	uint64_t start = exec_now_ns();

	if (b->state == BUF_OFFLOADING && !b->donated) {
		b->state = BUF_RESIDENT; /* still mapped and intact: nothing to replay */
		ex.stats.cancelled++;
		exec_update(b);
		return;
	}
	if (b->state == BUF_OFFLOADING)
		exec_settle(b);
	if (b->state != BUF_EVICTED || !b->by_replay)
		return;
	if (reads_window_buffers(b) || !fence_window() || exec_restore(b, ex.replay_stream)) {
		ex.stats.window_misses++;
		return;
	}
	ex.stats.window_replays++;
	exec_trace(TRACE_WINDOW_REPLAY, b, start);
}

/* Token t, b's window, has been called. */
void at_window(struct exec_buf *b, uint32_t t)
{
	if (b->producer != PRODUCER_REPLAYED || !b->captured || b->window == WINDOW_NONE)
		return;
	if (ex.window_marked_at != t + 1) {
		/* The call was not seen before it was made: nothing to order a replay behind. */
		ex.stats.window_misses++;
		if (b->window == WINDOW_UNCHECKED)
			conclude_window(b, "its window's call was not seen before it was issued");
		return;
	}
	if (b->window == WINDOW_UNCHECKED) {
		if (b->copied_out && !b->check_pending)
			start_check(b);
		return;
	}
	replay_in_window(b);
}
