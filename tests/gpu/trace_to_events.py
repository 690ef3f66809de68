#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Turns a warm-up timeline Lynx wrote (LYNX_OUT/trace.<rank>.json) back into a LYNX_EVENTS
dump (shim/dump.h's format), so that `lynx profile` can rebuild the profile offline from a
run on a machine that is gone (the GPU suite brings traces back; event dumps are too big).

What the trace lacks is filled in as it would not mislead the profiler's structure
finding: a kernel's function handle is a hash of its name, launch parameters are empty
(so no buffer is seen used by a kernel: lifetimes and saved activations are not
reconstructed), copy and NCCL buffer addresses are 0. Streams come from the device tracks
the trace draws each call's work on. Good for iterations, layers and windows; not for
memory classes.

  trace_to_events.py TRACE.json OUT.jsonl
"""
import hashlib
import json
import sys

DEVICE_TRACKS = 1 << 28  # chrome_trace.c's tids for its own tracks start here


def handle(text):
    return "0x" + hashlib.sha256(text.encode()).hexdigest()[:12]


def main(src, dst):
    with open(src) as f:
        t = json.load(f)
    events = t["traceEvents"] if isinstance(t, dict) else t
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    stream_of_track = {}
    for tid, name in names.items():
        if tid > DEVICE_TRACKS and name.startswith("stream "):
            word = name.split()[1]
            stream_of_track[tid] = "0x0" if word == "0" else word
    stream_of = {}  # event index -> stream, from the device tracks
    for e in events:
        if e.get("tid") in stream_of_track and "event" in e.get("args", {}):
            stream_of[e["args"]["event"]] = stream_of_track[e["tid"]]
    host = [e for e in events if e.get("ph") in ("i", "X") and e.get("tid", 0) < DEVICE_TRACKS
            and "event" in e.get("args", {}) and e.get("cat")]
    host.sort(key=lambda e: e["args"]["event"])
    with open(dst, "w") as out:
        out.write(json.dumps({"format": "lynx-events", "version": 1, "pid": 1, "hooks": 196})
                  + "\n")
        for e in host:
            a, kind = e["args"], e["cat"]
            row = {"t": int(round(e["ts"] * 1000)), "tid": e["tid"], "hook": e["name"],
                   "kind": kind, "result": 0,
                   "stream": a.get("stream") or stream_of.get(a["event"], "0x0"),
                   "nested": False, "captured": False}
            if kind in ("alloc", "free", "memset", "vmm"):
                row.update(ptr=a.get("ptr", "0x0"), bytes=a.get("bytes", 0))
            elif kind == "copy":
                row.update(dst="0x0", src="0x0", bytes=a.get("bytes", 0),
                           dir=a.get("direction", 0))
            elif kind == "launch":
                name = a.get("kernel") or e["name"]
                row.update(function=handle(name), name=name, grid=a.get("grid", [1, 1, 1]),
                           block=a.get("block", [1, 1, 1]), shared=a.get("shared", 0),
                           params="", param_count=0)
            elif kind in ("collective", "p2p", "group", "communicator"):
                row.update(comm=a.get("comm", "0x0"), send="0x0", recv="0x0",
                           count=a.get("count", 0), type=a.get("type", 0), op=a.get("op", 0),
                           peer=a.get("peer", -1), group_depth=a.get("group_depth", 0))
            elif kind in ("stream", "event_record", "stream_wait", "sync", "query", "graph"):
                row.update(handle=a.get("handle", "0x0"))
            elif kind not in ("host_func", "other"):
                continue
            out.write(json.dumps(row, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
