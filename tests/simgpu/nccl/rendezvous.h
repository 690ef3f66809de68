/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The shared-memory segment through which the rank processes of one communicator meet,
 * and the bounded waits they use on it.
 *
 * Layout (offsets fixed by nranks and the data-area size, both checked at join):
 *   header | nranks rank slots | nranks^2 mailboxes | nranks data areas | nranks^2 mail areas
 * A rank slot carries one collective at a time: its call (struct simnccl_desc), its
 * input in the rank's data area, and two sequence numbers. `posted` = c says the
 * description and data of collective c are complete; `consumed` = c says the rank has
 * finished reading everyone's collective c, so that a rank may overwrite its data area
 * for c + 1 once every rank has consumed c. A mailbox carries the sends of one ordered
 * pair (src -> dst): `sent` counts sends published, `received` counts those dst has
 * copied out and answered; src publishes send k only once received == k - 1.
 * A zero-filled segment is the valid initial state, so whoever creates it needs no
 * set-up step. Writers publish with release stores and readers acquire; nothing else
 * in the segment is read before the sequence number that covers it.
 *
 * Thread safety: a segment belongs to one communicator, which one thread uses at a time.
 */
#ifndef SIMGPU_NCCL_RENDEZVOUS_H
#define SIMGPU_NCCL_RENDEZVOUS_H

#include <limits.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "simnccl.h"

/* Each communicator maps nranks^2 mail areas; 64 ranks keep that within address space. */
#define SIMNCCL_MAX_RANKS 64
#define SIMNCCL_NAME_LEN 200

/* One rank's call as its peers see it. Fields a call does not use are zero. */
struct simnccl_desc {
	uint32_t kind; /* enum simnccl_kind */
	int32_t type;
	int32_t redop;
	int32_t root;
	uint64_t count;
	uint64_t arrival;   /* virtual ns at which the rank's operation was ready */
	uint64_t vbytes;    /* bytes the rank's cost model charges */
	int32_t color, key; /* ncclCommSplit */
};

struct simnccl_slot {
	alignas(64) _Atomic uint32_t joined;
	_Atomic uint64_t posted;
	_Atomic uint64_t consumed;
	struct simnccl_desc desc;
};

struct simnccl_mailbox {
	alignas(64) _Atomic uint64_t sent;
	_Atomic uint64_t received;
	uint64_t send_arrival, send_bytes, send_vbytes; /* written by src before `sent` */
	uint64_t recv_arrival, recv_bytes, recv_vbytes; /* written by dst before `received` */
};

struct simnccl_header {
	_Atomic uint32_t nranks;
	_Atomic uint64_t area_bytes;
	_Atomic uint32_t abort_claim;
	_Atomic uint32_t abort_rank; /* 1 + the rank that failed first; 0 while healthy */
	char abort_reason[SIMNCCL_MSG_LEN / 2]; /* leaves room to quote it in a message */
};

/* This process's mapping of one segment. */
struct simnccl_segment {
	char name[SIMNCCL_NAME_LEN];
	int rank, nranks;
	size_t area_bytes;
	void *base;
	size_t map_bytes;
	struct simnccl_header *hdr;
	struct simnccl_slot *slots;
	struct simnccl_mailbox *mailboxes;
	unsigned char *areas;
	unsigned char *mail_areas;
};

/*
 * Opens (creating if needed) the segment `name`, checks that every rank agrees on
 * nranks and area_bytes, claims `rank` and waits up to timeout_ms for all ranks to
 * claim theirs. Then rank 0 unlinks the name. On failure nothing is left mapped, the
 * name is unlinked too (so /dev/shm keeps nothing), and `why` says what happened:
 * ncclInvalidUsage for a disagreement or a rank claimed twice, ncclRemoteError for
 * ranks that did not come (named), ncclSystemError for a failed system call.
 */
ncclResult_t simnccl_segment_join(struct simnccl_segment *seg, const char *name, int nranks,
                                  int rank, size_t area_bytes, uint64_t timeout_ms, char *why,
                                  size_t why_len);
void simnccl_segment_leave(struct simnccl_segment *seg);

struct simnccl_slot *simnccl_slot(const struct simnccl_segment *seg, int rank);
unsigned char *simnccl_area(const struct simnccl_segment *seg, int rank);
struct simnccl_mailbox *simnccl_mailbox(const struct simnccl_segment *seg, int src, int dst);
unsigned char *simnccl_mail_area(const struct simnccl_segment *seg, int src, int dst);

/* Marks the segment failed so that peers stop waiting; the first caller's reason wins. */
void simnccl_segment_abort(struct simnccl_segment *seg, const char *reason);
/* True once some rank aborted; writes "rank R failed: <reason>" into why. */
bool simnccl_segment_aborted(const struct simnccl_segment *seg, char *why, size_t why_len);

/* A wall-clock deadline with a polling back-off (2 us doubling to 1 ms). */
struct simnccl_wait {
	struct timespec deadline;
	long sleep_ns;
	uint64_t timeout_ms;
};
void simnccl_wait_begin(struct simnccl_wait *w, uint64_t timeout_ms);
/* Sleeps one back-off step; false, without sleeping, once the deadline has passed. */
bool simnccl_wait_step(struct simnccl_wait *w);

/* Writes the ranks r < n with !done[r] into buf as a list: "2, 3". */
void simnccl_format_ranks(char *buf, size_t len, const bool *done, int n);

#endif /* SIMGPU_NCCL_RENDEZVOUS_H */
