/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The event dump (LYNX_EVENTS): every event the recorder drains, as one JSON line of
 * <prefix>.<pid>.jsonl, so that people and tests can see exactly what Lynx recorded.
 *
 * Format (version 1). The first line is a header:
 *   {"format":"lynx-events","version":1,"pid":P,"hooks":N}
 * (N: the number of hooks this liblynx.so has). Then one line per event, in each thread's
 * order (threads interleave), with always the same leading keys:
 *   {"t":host_ns,"tid":T,"hook":"cuLaunchKernel","kind":"launch","result":R,
 *    "stream":"0x..","nested":false,"captured":false, ...payload}
 * "nested" and "captured" are always present (LYNX_EVENT_NESTED, LYNX_EVENT_CAPTURED).
 * The payload keys depend on the kind's payload (events.def):
 *   mem     "ptr","bytes"
 *   copy    "dst","src","bytes","dir"
 *   launch  "function","grid":[x,y,z],"block":[x,y,z],"shared","params","param_count",
 *           "attrs":[id,...],"attr_count"
 *           (params: the recorded parameter bytes in hex, two digits per byte, in memory
 *           order; empty when the hook records no parameters, e.g. runtime launches;
 *           attr_count: the attributes of a launch config (cuLaunchKernelEx), attrs the
 *           ids of those recorded (launch_attrs.h); 0 and [] for other launches, and for
 *           runtime launches, whose driver launch beneath records them)
 *   sync    "handle"
 *   nccl    "comm","send","recv","count","type","op","peer","group_depth"
 *   none    nothing more
 * Pointers and handles are "0x.." strings (lower-case hex, no padding); every other value
 * is a JSON number. A hook or kind this build does not know is written as "unknown".
 *
 * Buffering: lines go through one 64 KiB buffer, written with one write(2) when it is
 * nearly full; lines shorter than 1 KiB (all but launches with long parameter lists) are
 * never split between two writes. The buffer is written at lynx_dump_flush and
 * lynx_dump_close, and by lynx_dump_flush_from_signal when the buffer is not in use at
 * that moment. A process that ends in _exit (or is killed) loses what the buffer held.
 * A write error stops the dump for the rest of the process, with one warning.
 *
 * Thread safety: lynx_dump_event is the recorder's consumer, called by one draining thread
 * at a time. open, reopen, close and flush are called by lifecycle.c at points where no
 * drain runs concurrently (init, the first call after a fork, exit, before fork); a
 * short spin on the buffer's busy flag covers the rest. lynx_dump_flush_from_signal is
 * async-signal-safe. lynx_dump_after_fork runs in a forked child, which has one thread.
 * Nothing here allocates.
 */
#ifndef LYNX_DUMP_H
#define LYNX_DUMP_H

#include "recorder.h"

/* The name of hook id (hooks.def's symbol), or NULL for an id out of range. */
typedef const char *(*lynx_dump_hook_name)(unsigned int id);
/* The name of a launched kernel, or NULL if unknown. */
typedef const char *(*lynx_dump_kernel_name)(uint64_t function);

/*
 * Creates (truncates) <prefix>.<pid>.jsonl and writes its header. hook_name gives the hook
 * names of events; hooks is their number (the header's "hooks"). Returns 0, or -errno
 * after one warning naming LYNX_EVENTS (the dump is then off; recording goes on). A second
 * open closes the first dump.
 */
int lynx_dump_open(const char *prefix, lynx_dump_hook_name hook_name, unsigned int hooks,
                   lynx_dump_kernel_name kernel_name);

/* The recorder's consumer (lynx_recorder_set_consumer(lynx_dump_event, NULL)): appends
 * the event's line. Does nothing while no dump is open. */
void lynx_dump_event(const struct lynx_event *event, void *arg);

/* Writes what the buffer holds. */
void lynx_dump_flush(void);

/* Flushes and closes the file: later events are not written. */
void lynx_dump_close(void);

/* From a signal handler: writes what the buffer holds, unless a thread is appending to
 * it at that moment (then those lines are lost). Only atomics and write(2). */
void lynx_dump_flush_from_signal(void);

/*
 * In a forked child: the parent's file and buffered lines belong to the parent (which
 * flushed before the fork); the child forgets them. If the parent had a dump open, the
 * child opens its own file at lynx_dump_reopen.
 */
void lynx_dump_after_fork(void);

/* In a forked child, at its first intercepted call: opens <prefix>.<child pid>.jsonl if
 * the parent had a dump open. Returns 0 (also when there is nothing to reopen) or -errno. */
int lynx_dump_reopen(void);

#endif /* LYNX_DUMP_H */
