/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A checker for Chrome trace-event JSON, the rules a viewer relies on without saying so:
 * what chrome_trace.c writes must pass it, and the tests and `lynx report` use it on any
 * trace file before reading one.
 *
 * Rules, per event of traceEvents (the document may also be a bare array of events):
 *  - an object with "ph" (one of B E X i I C M s t f b e n) and a numeric "pid";
 *  - "ts": a finite number >= 0, on every phase but M;
 *  - "tid": a number on every phase but C and the process-scoped ones (M process_*, i/I with
 *    "s": "g" or "p");
 *  - "name": a string on every phase but E;
 *  - X: "dur" a finite number >= 0;
 *  - B/E: per (pid, tid) track, in timestamp order (ties in file order), every E closes an
 *    open B (with the same name when the E has one) and every B is closed;
 *  - slices (X, and the B/E pairs) on one track nest: two either are disjoint (touching is
 *    fine) or one contains the other, never a partial overlap;
 *  - flows: every "s" id has an "f" with the same (cat, id) and no "f" or "t" comes without
 *    its "s"; flow v2: every X "bind_id" with "flow_out" has one with "flow_in" and back;
 *  - C: "args" an object of one or more numbers;
 *  - M: "args" an object.
 * Timestamps are compared as doubles with a tolerance of 0.5 ns (1e-3 microsecond would be
 * the writer's resolution), so the three-decimal microseconds chrome_trace.c writes compare
 * exactly.
 *
 * Thread safety: reentrant; no global state.
 */
#ifndef LYNX_PROF_CHROME_CHECK_H
#define LYNX_PROF_CHROME_CHECK_H

#include <stddef.h>

struct lynx_prof_chrome_stats {
	size_t events;   /* traceEvents entries */
	size_t slices;   /* X events plus B/E pairs */
	size_t instants; /* i and I */
	size_t counters; /* C */
	size_t flows;    /* paired s/f ids plus paired bind_ids */
	size_t metadata; /* M */
	size_t tracks;   /* distinct (pid, tid) holding slices or instants */
};

/*
 * Checks text[0..len) (no NUL needed). Returns 0 and fills stats (when not NULL); -EINVAL with
 * one sentence in why naming the event ("traceEvents[12] ...") and the rule, or for text that
 * is not JSON the byte offset where parsing stopped; -ENOMEM. O(n log n) in the events.
 */
int lynx_prof_chrome_check(const char *text, size_t len, struct lynx_prof_chrome_stats *stats,
                           char *why, size_t why_len);

#endif /* LYNX_PROF_CHROME_CHECK_H */
