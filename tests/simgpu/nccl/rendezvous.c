/* SPDX-License-Identifier: Apache-2.0 */
/* The POSIX shared-memory segment of a communicator: layout, join barrier, abort, waits. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rendezvous.h"

#define PAGE 4096u
#define SLEEP_FIRST_NS 2000L
#define SLEEP_MAX_NS 1000000L
#define NS_PER_S 1000000000L

static size_t round_up(size_t v, size_t to)
{
	return (v + to - 1) / to * to;
}

struct layout {
	size_t slots, mailboxes, areas, mail_areas, stride, total;
};

/* False when the segment would not fit in a size_t. */
static bool layout_compute(struct layout *l, int nranks, size_t area_bytes)
{
	size_t n = (size_t)nranks, pairs = n * n, bytes;

	l->stride = round_up(area_bytes ? area_bytes : 1, PAGE);
	l->slots = round_up(sizeof(struct simnccl_header), 64);
	l->mailboxes = l->slots + n * sizeof(struct simnccl_slot);
	l->areas = round_up(l->mailboxes + pairs * sizeof(struct simnccl_mailbox), PAGE);
	if (__builtin_mul_overflow(n + pairs, l->stride, &bytes))
		return false;
	l->mail_areas = l->areas + n * l->stride;
	return !__builtin_add_overflow(l->areas, bytes, &l->total);
}

struct simnccl_slot *simnccl_slot(const struct simnccl_segment *seg, int rank)
{
	return &seg->slots[rank];
}

unsigned char *simnccl_area(const struct simnccl_segment *seg, int rank)
{
	return seg->areas + (size_t)rank * round_up(seg->area_bytes ? seg->area_bytes : 1, PAGE);
}

struct simnccl_mailbox *simnccl_mailbox(const struct simnccl_segment *seg, int src, int dst)
{
	return &seg->mailboxes[(size_t)src * (size_t)seg->nranks + (size_t)dst];
}

unsigned char *simnccl_mail_area(const struct simnccl_segment *seg, int src, int dst)
{
	size_t stride = round_up(seg->area_bytes ? seg->area_bytes : 1, PAGE);

	return seg->mail_areas + ((size_t)src * (size_t)seg->nranks + (size_t)dst) * stride;
}

void simnccl_segment_abort(struct simnccl_segment *seg, const char *reason)
{
	uint32_t unclaimed = 0;

	if (!atomic_compare_exchange_strong(&seg->hdr->abort_claim, &unclaimed, 1))
		return;
	snprintf(seg->hdr->abort_reason, sizeof(seg->hdr->abort_reason), "%s", reason);
	atomic_store_explicit(&seg->hdr->abort_rank, (uint32_t)seg->rank + 1, memory_order_release);
}

bool simnccl_segment_aborted(const struct simnccl_segment *seg, char *why, size_t why_len)
{
	uint32_t who = atomic_load_explicit(&seg->hdr->abort_rank, memory_order_acquire);

	if (!who)
		return false;
	snprintf(why, why_len, "rank %u failed: %s", who - 1, seg->hdr->abort_reason);
	return true;
}

void simnccl_wait_begin(struct simnccl_wait *w, uint64_t timeout_ms)
{
	clock_gettime(CLOCK_MONOTONIC, &w->deadline);
	w->deadline.tv_sec += (time_t)(timeout_ms / 1000);
	w->deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (w->deadline.tv_nsec >= NS_PER_S) {
		w->deadline.tv_sec++;
		w->deadline.tv_nsec -= NS_PER_S;
	}
	w->sleep_ns = SLEEP_FIRST_NS;
	w->timeout_ms = timeout_ms;
}

bool simnccl_wait_step(struct simnccl_wait *w)
{
	struct timespec now, nap = {0, w->sleep_ns};
	long long left;

	clock_gettime(CLOCK_MONOTONIC, &now);
	left = (long long)(w->deadline.tv_sec - now.tv_sec) * NS_PER_S +
	       (w->deadline.tv_nsec - now.tv_nsec);
	if (left <= 0)
		return false;
	if (left < nap.tv_nsec)
		nap.tv_nsec = (long)left;
	nanosleep(&nap, NULL);
	if (w->sleep_ns < SLEEP_MAX_NS)
		w->sleep_ns = w->sleep_ns * 2 < SLEEP_MAX_NS ? w->sleep_ns * 2 : SLEEP_MAX_NS;
	return true;
}

void simnccl_format_ranks(char *buf, size_t len, const bool *done, int n)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int r = 0; r < n && used < len; r++) {
		if (done[r])
			continue;
		int k = snprintf(buf + used, len - used, "%s%d", used ? ", " : "", r);
		if (k < 0)
			break;
		used += (size_t)k;
	}
}

static int check_agreement(struct simnccl_segment *seg, char *why, size_t why_len)
{
	uint32_t nranks = 0;
	uint64_t area = 0;

	if (!atomic_compare_exchange_strong(&seg->hdr->nranks, &nranks, (uint32_t)seg->nranks) &&
	    nranks != (uint32_t)seg->nranks) {
		snprintf(why, why_len, "rank %d was given nranks=%d, another rank nranks=%u",
		         seg->rank, seg->nranks, nranks);
		return -EINVAL;
	}
	if (!atomic_compare_exchange_strong(&seg->hdr->area_bytes, &area, seg->area_bytes) &&
	    area != seg->area_bytes) {
		snprintf(why, why_len,
		         "SIMGPU_NCCL_BUFFER differs between ranks: %zu bytes on rank %d, %llu "
		         "on another",
		         seg->area_bytes, seg->rank, (unsigned long long)area);
		return -EINVAL;
	}
	nranks = 0;
	if (!atomic_compare_exchange_strong(&seg->slots[seg->rank].joined, &nranks, 1)) {
		snprintf(why, why_len, "rank %d joined twice", seg->rank);
		return -EINVAL;
	}
	return 0;
}

static ncclResult_t wait_all_joined(struct simnccl_segment *seg, uint64_t timeout_ms, char *why,
                                    size_t why_len)
{
	bool joined[SIMNCCL_MAX_RANKS];
	struct simnccl_wait w;
	char missing[256], reason[SIMNCCL_MSG_LEN];

	int count;

	simnccl_wait_begin(&w, timeout_ms);
	for (;;) {
		count = 0;
		for (int r = 0; r < seg->nranks; r++) {
			joined[r] = atomic_load_explicit(&seg->slots[r].joined,
			                                 memory_order_acquire) != 0;
			count += joined[r];
		}
		if (count == seg->nranks)
			return ncclSuccess;
		if (simnccl_segment_aborted(seg, reason, sizeof(reason))) {
			snprintf(why, why_len, "%s", reason);
			return ncclRemoteError;
		}
		if (!simnccl_wait_step(&w))
			break;
	}
	simnccl_format_ranks(missing, sizeof(missing), joined, seg->nranks);
	snprintf(why, why_len, "rank%s %s did not join within %llu ms (SIMGPU_NCCL_TIMEOUT_MS)",
	         seg->nranks - count > 1 ? "s" : "", missing, (unsigned long long)timeout_ms);
	return ncclRemoteError;
}

ncclResult_t simnccl_segment_join(struct simnccl_segment *seg, const char *name, int nranks,
                                  int rank, size_t area_bytes, uint64_t timeout_ms, char *why,
                                  size_t why_len)
{
	struct layout l;
	struct stat st;
	ncclResult_t res = ncclSystemError;
	int fd;

	memset(seg, 0, sizeof(*seg));
	if (strlen(name) >= sizeof(seg->name) || !layout_compute(&l, nranks, area_bytes)) {
		snprintf(why, why_len, "cannot lay out segment %s for %d ranks of %zu bytes", name,
		         nranks, area_bytes);
		return ncclInvalidArgument;
	}
	strcpy(seg->name, name);
	seg->rank = rank;
	seg->nranks = nranks;
	seg->area_bytes = area_bytes;

	/* Everyone creates without O_EXCL and grows the file to the same size; whoever
	 * comes first finds it empty, and zeroes are the initial state. Never shrink it: a
	 * rank with other sizes is refused below, before it touches more than the header. */
	fd = shm_open(name, O_CREAT | O_RDWR, 0600);
	if (fd < 0) {
		snprintf(why, why_len, "shm_open(%s): %s", name, strerror(errno));
		return ncclSystemError;
	}
	if (fstat(fd, &st) < 0 || ((size_t)st.st_size < l.total && ftruncate(fd, l.total) < 0)) {
		snprintf(why, why_len, "cannot size %s to %zu bytes: %s", name, l.total,
		         strerror(errno));
		goto out_close;
	}
	seg->base = mmap(NULL, l.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (seg->base == MAP_FAILED) {
		snprintf(why, why_len, "cannot map %s (%zu bytes): %s", name, l.total,
		         strerror(errno));
		seg->base = NULL;
		goto out_close;
	}
	close(fd);
	seg->map_bytes = l.total;
	seg->hdr = seg->base;
	seg->slots = (struct simnccl_slot *)((char *)seg->base + l.slots);
	seg->mailboxes = (struct simnccl_mailbox *)((char *)seg->base + l.mailboxes);
	seg->areas = (unsigned char *)seg->base + l.areas;
	seg->mail_areas = (unsigned char *)seg->base + l.mail_areas;

	if (check_agreement(seg, why, why_len)) {
		res = ncclInvalidUsage;
		simnccl_segment_abort(seg, why);
		goto out_unmap;
	}
	res = wait_all_joined(seg, timeout_ms, why, why_len);
	if (res != ncclSuccess) {
		simnccl_segment_abort(seg, why);
		goto out_unmap;
	}
	/* Everyone has it mapped: the name is no longer needed. */
	if (rank == 0)
		shm_unlink(name);
	return ncclSuccess;

out_unmap:
	munmap(seg->base, seg->map_bytes);
	seg->base = NULL;
	shm_unlink(name);
	return res;
out_close:
	close(fd);
	shm_unlink(name);
	return res;
}

void simnccl_segment_leave(struct simnccl_segment *seg)
{
	if (seg->base)
		munmap(seg->base, seg->map_bytes);
	seg->base = NULL;
}
