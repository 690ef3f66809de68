/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One rank's timeline as Chrome trace-event JSON (the "JSON object format" that Perfetto and
 * chrome://tracing open): {"traceEvents": [...], "displayTimeUnit": "ns", "format":
 * "lynx-trace", "version": 1, "otherData": {...}}.
 *
 * What it holds, for one process (pid = the rank when known, else the trace's pid):
 *  - One track per stream ("stream 0x..."), with the program's stream-ordered work: kernel
 *    launches, copies, memsets, host functions, graph launches and NCCL calls. Work the shim
 *    timed on the device (dev_start_ns/dev_end_ns) is an "X" slice on the device timeline;
 *    untimed work is an "i" instant at the host time its call returned. Every item says
 *    which in args.clock ("device" or "host"). The device timeline has its own origin: it is
 *    shifted onto the host clock by the smallest shift under which no timed work starts
 *    before its call returned (otherData.device_shift_ns), so a device slice may sit late by
 *    up to the launch latency, never early.
 *  - Cross-stream waits: a cudaEventRecord on stream A followed by a cudaStreamWaitEvent on
 *    that event from stream B (matched by handle, the last record before the wait) becomes
 *    two zero-length "X" markers, "record" on A and "wait" on B, joined by a flow arrow
 *    (flow v2: bind_id with flow_out on the record, flow_in on the wait). Waits on a record
 *    of the same stream and waits on an event never recorded draw nothing.
 *  - One track per host thread with every API call the program made (not those the CUDA
 *    library made inside another call: nested events), as "i" instants at the call's return
 *    (the dump has no call start).
 *  - A "layers" track: "iteration N" slices for the iterations period.h finds and, inside
 *    them, "layer K fwd mb M" / "layer K bwd mb M" slices from segment.h, in host time (from
 *    the return of the call before a segment to the return of its last call, as the profile
 *    times them). No iteration found: no such track, and otherData.layers says why.
 *  - Counters: "device memory" (args.bytes: live device allocation bytes, lifetime.h's
 *    buffers, each allocation counted once; its maximum is the profile's peak) and "device
 *    memory by class" (the same bytes split by lifetime.h's classes), changing at each
 *    allocation and free; "vmm physical memory" (cuMemCreate minus cuMemRelease) when the
 *    trace holds VMM calls.
 * With a profile, the NCCL calls of the iteration the profile's windows describe carry their
 * window kind (args.window), and layer slices their saved activation bytes.
 *
 * Timestamps are microseconds from the trace's first event, with three decimals (exact
 * nanoseconds). Size: about 150 bytes per API call plus as much per stream item (a 2,000-call
 * tinytrain rank writes about 0.5 MB); a job of 10^6 calls writes a few hundred MB.
 *
 * Thread safety: reentrant; no global state. The trace and profile are only read.
 */
#ifndef LYNX_PROF_CHROME_TRACE_H
#define LYNX_PROF_CHROME_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "event.h"
#include "profile.h"

#define LYNX_TRACE_FORMAT "lynx-trace"
#define LYNX_TRACE_VERSION 1

/* Track ids (Chrome "tid"s) of the tracks that are not host threads. Thread ids stay below
 * 2^22 on Linux (pid_max), so these never collide with one. */
#define LYNX_CHROME_TID_LAYERS 0x10000000u
#define LYNX_CHROME_TID_STREAM0 0x10000001u /* stream tracks: this plus the stream's number */

struct lynx_prof_chrome_options {
	int32_t rank, world; /* -1: unknown; an unknown rank falls back to the profile's */
};

/*
 * Writes trace's timeline to path atomically (a temporary file in the same directory,
 * flushed, then renamed over path). profile and opt may be NULL. Returns 0; -ENOMEM; -errno
 * when the file cannot be written (the reason in why, with the path). A trace without
 * iterations or with an allocation history that lifetime.h refuses is still written, without
 * the parts it cannot know (otherData says which). O(events log events).
 */
int lynx_prof_write_chrome_trace(const struct lynx_prof_trace *trace,
                                 const struct lynx_profile *profile,
                                 const struct lynx_prof_chrome_options *opt, const char *path,
                                 char *why, size_t len);

#endif /* LYNX_PROF_CHROME_TRACE_H */
