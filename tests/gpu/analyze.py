#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reads what tests/gpu/run.sh left in its work directory and writes results.json and
summary.md: every check of the GPU suite with pass, fail or skip and why, and the figures
behind them. Standard library only (it runs on the GPU machine and here alike).

Exit status: 0 when no check failed, 1 when one did.
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys
import time

# Launch classes the suite must see on a real GPU (issue 15): name, what it means.
LAUNCH_CLASSES = [
    ("aten_runtime", "ATen kernels through the CUDA runtime"),
    ("cublas_driver", "cuBLAS/cuBLASLt kernels through the driver"),
    ("sdpa", "SDPA attention kernels (flash, memory-efficient or cuDNN)"),
    ("triton", "Triton kernels (torch.compile)"),
    ("nccl", "NCCL calls from DDP's all-reduce (at world size 1 NCCL launches no kernel "
             "for an in-place sum: the calls are what is seen)"),
]
SDPA_NAME = re.compile(r"flash|fmha|attention|sdpa|_attn", re.I)
GEMM_NAME = re.compile(r"gemm|gemv|nvjet|cutlass|xmma|cublas|splitk|sm\d+_", re.I)
# A step counts towards medians from here on (warm-up, compilation and Lynx's learning first).
STEADY_FROM = 10
LAYER_TIME_TOLERANCE = 0.05
LAUNCH_COUNT_TOLERANCE = 0.01


def load_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def json_lines(path):
    rows = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return rows


def read_text(path, limit=None):
    try:
        with open(path, errors="replace") as f:
            return f.read() if limit is None else f.read(limit)
    except OSError:
        return ""


class Checks:
    def __init__(self):
        self.items = []

    def add(self, name, status, detail):
        assert status in ("pass", "fail", "skip")
        self.items.append({"name": name, "status": status, "detail": detail})

    def ok(self, name, cond, detail):
        self.add(name, "pass" if cond else "fail", detail)

    @property
    def failed(self):
        return [c for c in self.items if c["status"] == "fail"]


# ---- The trainers' step lines -------------------------------------------------------------

def steps_of(path):
    """One record per step, whichever trainer wrote the lines: gpt_train.py (one line per
    step) or tinytrain (one line per step and rank, combined here)."""
    rows = json_lines(path)
    meta = next((r["meta"] for r in rows if "meta" in r), None)
    by_step = {}
    for r in rows:
        if "step" not in r or r.get("step", -1) < 0:
            continue
        s = by_step.setdefault(r["step"], {"step": r["step"], "ranks": []})
        s["ranks"].append(r)
    out = []
    for step in sorted(by_step):
        ranks = sorted(by_step[step]["ranks"], key=lambda r: r.get("rank", 0))
        if "param_hash" in ranks[0]:  # gpt_train.py
            r = ranks[0]
            out.append({"step": step, "fingerprint": f"{r.get('loss_hex')}/{r['param_hash']}",
                        "loss": r.get("loss"), "step_ms": r.get("step_ms"),
                        "in_use_peak": r.get("in_use_peak") or r.get("in_use"),
                        "max_allocated": r.get("max_allocated"),
                        "profiled": bool(r.get("torch_profiled"))})
        else:  # tinytrain: every rank's loss and gradient hash; the slowest rank's time
            out.append({"step": step,
                        "fingerprint": "|".join(f"{r.get('rank')}:{r.get('loss')}:"
                                                f"{r.get('grad_hash')}" for r in ranks),
                        "loss": next((r["loss"] for r in ranks if r.get("loss") is not None),
                                     None),
                        "step_ms": max(r.get("step_time_ns", 0) for r in ranks) / 1e6,
                        "in_use_peak": max(r.get("peak_bytes", 0) for r in ranks),
                        "max_allocated": None, "profiled": False})
    return meta, out


def steady(steps):
    first = STEADY_FROM if len(steps) > STEADY_FROM + 2 else len(steps) // 2
    return [s for s in steps if s["step"] >= first and not s["profiled"]]


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def lynx_lines(text):
    """What Lynx said: its summary lines (lynx[rank R]: ...) and its log lines at WARN and
    ERROR ([lynx PID:TID LEVEL file:line] ...), in order, without repeats."""
    said, seen = [], set()
    for line in text.splitlines():
        m = re.match(r"\[lynx \d+:\d+ (ERROR|WARN) [^\]]*\] (.*)", line)
        keep = None
        if m:
            keep = f"{m.group(1)}: {m.group(2)}"
        elif line.startswith("lynx[") or line.startswith("lynx:"):
            keep = line
        if keep and keep not in seen:
            seen.add(keep)
            said.append(keep)
    return said


# ---- Kernel names -------------------------------------------------------------------------

def base_name(name):
    """A kernel's own name, comparable between cuFuncGetName's mangled form and
    torch.profiler's demangled one: the last component of its qualified name, without
    template arguments or parameters."""
    if not name:
        return ""
    if name.startswith("_Z"):
        # The components of the nested name up to the function's: its template arguments
        # ("I...") or the nested name's end ("E") follow it. Lynx's names are cut at 128
        # characters, often inside the template arguments, so nothing after them is read.
        i, parts = 2, []
        nested = name[i:i + 1] == "N"
        if nested:
            i += 1
            while i < len(name) and name[i] in "KVrL":
                i += 1
        while i < len(name):
            if name.startswith("St", i):
                i += 2
                continue
            m = re.match(r"(\d+)", name[i:])
            if not m:
                break
            n = int(m.group(1))
            i += len(m.group(1))
            parts.append(name[i:i + n])
            i += n
            if not nested or name[i:i + 1] in ("I", "E"):
                break
        return parts[-1] if parts else name
    n = name.replace("(anonymous namespace)::", "")
    if n.startswith("void "):
        n = n[5:]
    depth, cut = 0, len(n)
    for j, ch in enumerate(n):
        if ch == "<":
            if depth == 0:
                cut = min(cut, j)
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = min(cut, j)
            break
    return n[:cut].split("::")[-1].strip()


# ---- Coverage: the event dump against torch.profiler ---------------------------------------

NCCL_KINDS = ("collective", "p2p", "group")


def classify_dump(path):
    """Reads a LYNX_EVENTS dump. Each kernel launch reaches the driver once: a runtime
    launch (cudaLaunchKernel, __cudaLaunchKernel, cudaLaunchKernelExC) as a driver launch
    nested in it, a library's launch (cuBLAS, Triton) as a top-level driver launch, NCCL's
    as a driver launch nested in an NCCL call. A nested event is recorded when it ends, so
    before the call it is nested in: nested launches wait for the next top-level event of
    their thread. Returns the launches, each with its class, path and name, in host-time
    order, and the NCCL calls by name."""
    events = []
    with open(path, errors="replace") as f:
        f.readline()  # header
        for line in f:
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    events.sort(key=lambda e: e.get("t", 0))
    launches, nccl_calls = [], {}
    pending = {}  # thread -> driver launches nested in a call not yet seen
    for e in events:
        hook, tid, kind = e.get("hook", ""), e.get("tid"), e.get("kind")
        if e.get("nested"):
            if kind == "launch" and hook.startswith("cuLaunch"):
                pending.setdefault(tid, []).append(e)
            continue
        inner = pending.pop(tid, [])
        if kind in NCCL_KINDS:
            nccl_calls[hook] = nccl_calls.get(hook, 0) + 1
        if kind == "launch" and hook.startswith("cuLaunch"):
            launches.append({"t": e["t"], "hook": hook, "name": e.get("name"),
                             "path": "driver"})
        elif kind == "launch":
            name = next((i.get("name") for i in inner if i.get("name")), e.get("name"))
            launches.append({"t": e["t"], "hook": hook, "name": name,
                             "path": "runtime" if inner else "runtime only"})
            inner = inner[1:]
        for i in inner:  # launches made inside another call: NCCL's, or a library's
            launches.append({"t": i["t"], "hook": i["hook"], "name": i.get("name"),
                             "path": "nccl" if kind in NCCL_KINDS else f"nested in {hook}"})
    for r in launches:
        name = r.get("name") or ""
        if r["path"] == "nccl" or name.startswith("nccl"):
            r["class"] = "nccl"
        elif SDPA_NAME.search(name):
            r["class"] = "sdpa"
        elif r["path"] == "driver" and name.startswith("triton"):
            r["class"] = "triton"
        elif r["path"] == "driver" and GEMM_NAME.search(name):
            r["class"] = "cublas_driver"
        elif r["path"].startswith("runtime"):
            r["class"] = "aten_runtime"
        else:
            r["class"] = "other_" + r["path"].replace(" ", "_")
    launches.sort(key=lambda r: r["t"])
    return launches, nccl_calls


def coverage(work, simgpu, checks):
    result = {}
    dumps = glob.glob(os.path.join(work, "coverage.events.*.jsonl"))
    best, best_n = None, -1
    for d in dumps:  # the trainer's process is the one that launched kernels
        n = sum(1 for line in open(d, errors="replace") if '"kind":"launch"' in line)
        if n > best_n:
            best, best_n = d, n
    if not best or best_n <= 0:
        checks.add("coverage: launch classes", "fail" if not simgpu else "skip",
                   f"no event dump with launches ({len(dumps)} dumps)")
        return result
    launches, nccl_calls = classify_dump(best)
    counts = {}
    for r in launches:
        counts[r["class"]] = counts.get(r["class"], 0) + 1
    counts["nccl"] = counts.get("nccl", 0) + nccl_calls.get("ncclAllReduce", 0)
    result.update(dump=os.path.basename(best), launches=len(launches), classes=counts,
                  nccl_calls=nccl_calls)
    examples = {}
    for r in launches:
        examples.setdefault(r["class"], r.get("name"))
    result["class_examples"] = examples
    if simgpu:
        checks.add("coverage: launch classes", "skip",
                   "simgpu: tinytrain has no cuBLAS, SDPA, Triton or DDP; classes seen: "
                   + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        return result
    missing = [f"{c} ({what})" for c, what in LAUNCH_CLASSES if not counts.get(c)]
    checks.ok("coverage: launch classes", not missing,
              "every class seen: " + ", ".join(f"{c} {counts.get(c, 0)}"
                                               for c, _ in LAUNCH_CLASSES)
              if not missing else "missing: " + "; ".join(missing))
    tk = load_json(os.path.join(work, "coverage.torch_kernels.json"), {}).get("kernels")
    if tk is None:
        checks.add("coverage: launch count vs torch.profiler", "fail",
                   "torch.profiler wrote no kernel list")
        return result
    # The same steps as torch.profiler's: the trainer's host times of steps 6 and 7.
    rows = {r["step"]: r for r in json_lines(os.path.join(work, "coverage.jsonl"))
            if "t_start_ns" in r}
    if 6 not in rows or 7 not in rows:
        checks.add("coverage: launch count vs torch.profiler", "fail",
                   "the trainer printed no host times for steps 6 and 7")
        return result
    lo, hi = rows[6]["t_start_ns"], rows[7]["t_end_ns"]
    ours = [r for r in launches if lo <= r["t"] <= hi]
    theirs = len(tk)
    diff = len(ours) - theirs
    result.update(steps="6..7", lynx_launches=len(ours), torch_kernels=theirs)
    # Names one side has more of than the other: what a difference consists of.
    mine, other = {}, {}
    for r in ours:
        k = base_name(r.get("name") or "?")
        mine[k] = mine.get(k, 0) + 1
    for k in tk:
        b = base_name(k["name"])
        other[b] = other.get(b, 0) + 1
    delta = {k: mine.get(k, 0) - other.get(k, 0) for k in set(mine) | set(other)}
    result["count_differences"] = dict(sorted(((k, v) for k, v in delta.items() if v),
                                              key=lambda kv: -abs(kv[1]))[:20])
    checks.ok("coverage: launch count vs torch.profiler",
              theirs and abs(diff) <= LAUNCH_COUNT_TOLERANCE * theirs,
              f"steps 6-7: Lynx saw {len(ours)} launches, torch.profiler {theirs} kernels "
              f"({diff:+d})")
    return result


# ---- The profile against torch.profiler ------------------------------------------------------

def occurrences(names, pattern):
    """Start indices of pattern in names, left to right, not overlapping."""
    found, i, n = [], 0, len(pattern)
    while n and i + n <= len(names):
        if names[i:i + n] == pattern:
            found.append(i)
            i += n
        else:
            i += 1
    return found


def profile_check(work, variant, layers_expected, simgpu, checks):
    res = {}
    profiles = sorted(glob.glob(os.path.join(work, f"{variant}-profile.lynx", "profile.*.json")))
    name = f"profile ({variant})"
    if not profiles:
        checks.add(f"{name}: layers and iteration", "fail",
                   "no profile written; Lynx said: " + "; ".join(
                       lynx_lines(read_text(os.path.join(work, f"{variant}-profile.err")))[:4]))
        return res
    prof = load_json(profiles[0], {})
    layers = prof.get("layers", [])
    it = prof.get("iteration", {})
    res.update(file=os.path.basename(profiles[0]), layers=len(layers),
               iteration_ns=(it.get("time") or {}).get("ns"),
               period_tokens=it.get("period_tokens"),
               microbatches=prof.get("microbatches"), memory=prof.get("memory"),
               windows=len(prof.get("windows", [])))
    ok = len(layers) == layers_expected and it.get("period_tokens")
    checks.ok(f"{name}: layers and iteration", ok,
              f"{len(layers)} layers (the model has {layers_expected}), iteration "
              f"{'found' if it.get('period_tokens') else 'not found'}")
    if simgpu:
        checks.add(f"{name}: layer times vs torch.profiler", "skip", "simgpu: no torch")
        return res
    tk = load_json(os.path.join(work, f"{variant}-none.torch_kernels.json"), {}).get("kernels")
    if not tk or not layers:
        checks.add(f"{name}: layer times vs torch.profiler", "fail",
                   "no torch.profiler kernels" if not tk else "no layers in the profile")
        return res
    names = [base_name(k["name"]) for k in tk]
    rows, worst = [], 0.0
    for phase in ("forward", "backward"):
        found_layers = [l for l in layers if l.get("kernels", {}).get(phase)]
        # The backward runs the last layer first: torch.profiler's order is launch order.
        order = list(reversed(found_layers)) if phase == "backward" else found_layers
        at = 0  # each layer is looked for after the one before it
        for layer in order:
            pattern = [base_name(n) for n in layer["kernels"][phase]]
            lynx_ns = (layer.get(phase) or {}).get("ns")
            lynx_kernel_ns = sum(layer["kernels"].get(f"{phase}_ns", []) or []) or None
            starts = occurrences(names[at:], pattern)
            if not starts or not lynx_ns:
                rows.append({"layer": layer.get("index"), "phase": phase, "lynx_ns": lynx_ns,
                             "torch_ns": None, "kernels": len(pattern),
                             "note": "its kernel names not found in torch.profiler's, in order"})
                worst = float("inf")
                continue
            first = at + starts[0]
            at = first + len(pattern)
            ks = tk[first:at]
            span = (ks[-1]["ts_us"] + ks[-1]["dur_us"] - ks[0]["ts_us"]) * 1e3
            busy = sum(k["dur_us"] for k in ks) * 1e3
            err = abs(lynx_ns - span) / span if span else float("inf")
            worst = max(worst, err)
            rows.append({"layer": layer.get("index"), "phase": phase, "lynx_ns": lynx_ns,
                         "torch_span_ns": round(span), "torch_kernels_ns": round(busy),
                         "lynx_kernels_ns": lynx_kernel_ns, "error": round(err, 4)})
    res["layer_times"] = rows
    checks.ok(f"{name}: layer times vs torch.profiler", rows and worst <= LAYER_TIME_TOLERANCE,
              f"largest difference {worst:.1%} over {len(rows)} layer phases "
              f"(tolerance {LAYER_TIME_TOLERANCE:.0%})" if rows else "nothing to compare")
    return res


# ---- The matrix ------------------------------------------------------------------------------

def matrix(work, steps_log, simgpu, checks):
    cells = [s for s in steps_log if s.get("cell")]
    variants = []
    for c in cells:
        if c["variant"] not in variants:
            variants.append(c["variant"])
    table = {}
    layers_expected = None
    for variant in variants:
        row = table.setdefault(variant, {})
        for c in (c for c in cells if c["variant"] == variant):
            meta, st = steps_of(c.get("stdout", ""))
            if meta and layers_expected is None:
                layers_expected = meta.get("layers")
            err = read_text(c.get("stderr", ""))
            row[c["cell"]] = {"status": c["status"], "rc": c.get("rc"),
                              "stdout_rows": json_lines(c.get("stdout", "")),
                              "seconds": c.get("seconds"), "why": c.get("why"),
                              "budget": c.get("budget"), "profiled_peak": c.get("profiled_peak"),
                              "steps": st, "meta": meta, "lynx_said": lynx_lines(err)[:60]}
        none = row.get("none")
        base = {s["step"]: s for s in none["steps"]} if none else {}
        if none and not simgpu:
            activation_share(variant, none.get("stdout_rows", []), checks)
        base_ms = median(s["step_ms"] for s in steady(none["steps"])) if none else None
        for cell, r in row.items():
            st = r["steps"]
            r["steps_done"] = len(st)
            r["step_ms_median"] = median(s["step_ms"] for s in steady(st))
            r["ratio_vs_none"] = (r["step_ms_median"] / base_ms
                                  if base_ms and r["step_ms_median"] else None)
            r["peak_in_use"] = max((s["in_use_peak"] or 0 for s in steady(st)), default=None)
            r["max_allocated"] = max((s["max_allocated"] or 0 for s in steady(st)),
                                     default=None)
            label = f"{variant} {cell}"
            if r["status"] == "skipped":
                checks.add(f"{label}: ran", "skip", r.get("why") or "skipped")
                continue
            checks.ok(f"{label}: ran", r["status"] == "ok" and st,
                      f"exit {r['rc']}, {len(st)} steps in {r['seconds']} s" +
                      ("" if r["status"] == "ok" else
                       "; last words: " + " | ".join(lynx_lines(read_text(
                           os.path.join(work, f"{variant}-{cell}.err")))[-3:]) +
                       " | " + read_text(os.path.join(work, f"{variant}-{cell}.err"))[-300:]))
            if cell != "none":
                if not base:
                    checks.add(f"{label}: identical to no Lynx", "skip", "no baseline run")
                else:
                    diffs = [s["step"] for s in st
                             if s["step"] in base and s["fingerprint"] != base[s["step"]]["fingerprint"]]
                    missing = [k for k in base if k not in {s["step"] for s in st}]
                    r["first_difference"] = diffs[0] if diffs else None
                    checks.ok(f"{label}: identical to no Lynx", not diffs and not missing and st,
                              f"loss and parameter hash equal at all {len(st)} steps"
                              if not diffs and not missing and st else
                              f"differs from step {diffs[0]}" if diffs else
                              f"{len(missing)} steps missing")
            if cell.startswith("recompute") and r.get("budget"):
                # Warm-up runs at the full peak by design, and the executor takes over a
                # few steps later: the budget must hold over the run's last third.
                budget = r["budget"]
                tail = [s for s in st if s["step"] >= len(st) - len(st) // 3]
                peak = max((s["in_use_peak"] or 0 for s in tail), default=0)
                held_from = next((s["step"] for s in st if all(
                    (t["in_use_peak"] or 0) <= budget for t in st if t["step"] >= s["step"])),
                    None)
                r.update(peak_in_use_last_third=peak, within_budget_from_step=held_from,
                         within_budget=bool(tail) and peak <= budget)
                # Or the run said that no plan fits and trained unchanged: Lynx arms no plan
                # predicted over the budget (the identity check above covers "unchanged").
                said = [line for line in lynx_lines(read_text(os.path.join(
                    work, f"{variant}-{cell}.err"))) if "no plan fits this rank's budget" in line]
                r["no_plan_fits"] = bool(said)
                if said and not r["within_budget"]:
                    checks.ok(f"{label}: peak within budget, or no plan armed",
                              True, "said no plan fits, nothing armed: " + said[0][-200:])
                else:
                    checks.ok(f"{label}: peak within budget", r["within_budget"],
                              f"peak in use over steps {tail[0]['step']}-{tail[-1]['step']}: "
                              f"{mib(peak)} against a budget of {mib(budget)} "
                              f"({budget / r['profiled_peak']:.0%} of the profiled "
                              f"{mib(r['profiled_peak'])}); " + (
                                  f"within it from step {held_from} on"
                                  if held_from is not None else "over it at the last step")
                              if tail and peak else "no peak measured")
            r["steps"] = [{k: v for k, v in s.items() if k != "profiled"} for s in st]
            r.pop("stdout_rows", None)
    return table, layers_expected


def activation_share(variant, rows, checks):
    """What the forward keeps for the backward, as a share of the peak: the step's peak
    allocation less what was allocated when it began (weights, optimizer state, DDP's
    buckets), over the peak; the median of steady steps."""
    shares = [(r["max_allocated"] - r["allocated_before"]) / r["max_allocated"]
              for r in rows if r.get("step", -1) >= STEADY_FROM and r.get("max_allocated")
              and r.get("allocated_before") is not None and not r.get("torch_profiled")]
    share = median(shares)
    checks.ok(f"{variant} trainer: activations at least 60% of the peak",
              share is not None and share >= 0.6,
              f"{share:.1%} of max_memory_allocated is what the step allocates beyond its "
              "start (activations, logits, gradients)" if share is not None else
              "no steps to measure")


def mib(b):
    return f"{b / 2**20:.1f} MiB" if b else "n/a"


# ---- Doctor, VMM, replay ---------------------------------------------------------------------

def doctor(work, steps_log, checks):
    rec = next((s for s in steps_log if s["name"] == "doctor"), {})
    text = read_text(os.path.join(work, "doctor.out"))
    rows = [l for l in text.splitlines() if re.search(r"\s(FAIL|warn)\s", l)]
    last = text.strip().splitlines()[-1] if text.strip() else "no output"
    checks.ok("doctor: every hook resolves", rec.get("rc") == 0,
              last + ("; " + "; ".join(rows[:5]) if rows else ""))
    return {"rc": rec.get("rc"), "output": text.splitlines()}


def vmm(work, checks):
    v = load_json(os.path.join(work, "vmm.json"))
    if not v or v.get("error"):
        checks.add("vmm: costs measured", "fail",
                   (v or {}).get("error") or read_text(os.path.join(work, "vmm.err"))[-300:])
        return v
    sizes = v.get("sizes", [])
    measured = [s for s in sizes if s.get("calls")]
    checks.ok("vmm: costs measured", measured,
              ", ".join(f"{mib(s['bytes'])}: restore {s.get('restore', {}).get('median_us')} us, "
                        f"evict {s.get('evict', {}).get('median_us')} us" for s in measured)
              or "no size measured")
    stall = v.get("stall", {})
    if stall.get("skipped"):
        checks.add("vmm: stall test", "skip", stall["skipped"])
    else:
        verdicts = [f"{c.get('op')} {mib(c.get('bytes'))}: {c.get('verdict')}"
                    for c in stall.get("cases", [])]
        checks.ok("vmm: stall test", verdicts, "; ".join(verdicts) or "no case ran")
    return v


def executor_followed(label, said, checks):
    """Whether an armed plan's executor followed the iteration: the summary's "N iterations
    followed (M times lost, ...)" (rank 0's line; a cell whose plan was not armed has none)."""
    line = next((l for l in said if "executor:" in l and "iterations followed" in l), None)
    if line is None:
        checks.add(f"{label}: executor followed the iteration", "skip",
                   "no executor summary among what Lynx said (no plan armed)")
        return
    m = re.search(r"(\d+) iterations followed \((\d+) times lost", line)
    followed, lost = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    checks.ok(f"{label}: executor followed the iteration", followed > 0,
              f"{followed} iterations followed, {lost} times lost")


def replay(table, checks):
    """The examination's verdicts, from each recompute cell's executor summary and info
    lines."""
    out = {}
    for variant, row in table.items():
        for cell, r in row.items():
            if not cell.startswith("recompute"):
                continue
            said = r.get("lynx_said", [])
            lines = [l for l in said if "replay" in l and ("executor" in l)]
            out[f"{variant} {cell}"] = lines
            executor_followed(f"{variant} {cell}", said, checks)
    seen = [l for lines in out.values() for l in lines]
    if seen:
        checks.add("replay: examination verdicts", "pass",
                   f"{len(seen)} executor replay lines (see results.json replay)")
    else:
        checks.add("replay: examination verdicts", "fail",
                   "no recompute cell reported an examination")
    return out


# ---- summary.md ------------------------------------------------------------------------------

def summary_md(res):
    env = res.get("env", {})
    lines = [f"# Lynx GPU suite, {res['date']}", "",
             f"Device: {env.get('device', '?')} ({env.get('nvidia_smi', 'simgpu')}); "
             f"torch {env.get('torch', '-')}, CUDA {env.get('torch_cuda', '-')}, "
             f"NCCL {env.get('nccl', '-')}, triton {env.get('triton', '-')}.", "",
             f"Checks: {res['passed']} passed, {res['failed']} failed, {res['skipped']} skipped.",
             "", "| check | status | detail |", "|---|---|---|"]
    for c in res["checks"]:
        lines.append(f"| {c['name']} | {c['status']} | {c['detail'].replace('|', '/')[:400]} |")
    lines += ["", "## Matrix (medians of steady steps)", "",
              "| variant | cell | status | steps | step ms | vs none | peak in use | "
              "max allocated | budget |", "|---|---|---|---|---|---|---|---|---|"]
    for variant, row in res.get("matrix", {}).items():
        for cell, r in row.items():
            ms, ratio = r.get("step_ms_median"), r.get("ratio_vs_none")
            lines.append(f"| {variant} | {cell} | {r['status']} | {r.get('steps_done')} | "
                         f"{f'{ms:.2f}' if ms else '-'} | "
                         f"{f'{ratio:.3f}' if ratio else '-'} | "
                         f"{mib(r.get('peak_in_use'))} | {mib(r.get('max_allocated'))} | "
                         f"{mib(r.get('budget'))} |")
    if res.get("eager_events"):
        ev = res["eager_events"]
        lines += ["", f"## The eager event dump's run ({ev['status']}, exit {ev['rc']})", "",
                  "```"] + ev["lynx_said"][:25] + ["```"]
    lines += ["", "## What Lynx said (recompute and profile cells)", ""]
    for variant, row in res.get("matrix", {}).items():
        for cell, r in row.items():
            if cell == "none" or not r.get("lynx_said"):
                continue
            lines.append(f"### {variant} {cell}")
            lines += ["```"] + r["lynx_said"][:25] + ["```"]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--simgpu", action="store_true")
    a = p.parse_args()
    checks = Checks()
    steps_log = json_lines(os.path.join(a.work, "steps.jsonl"))
    res = {"suite": "lynx-gpu", "version": 1,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "simgpu": a.simgpu, "env": load_json(os.path.join(a.work, "env.json"), {}),
           "steps": steps_log}
    res["doctor"] = doctor(a.work, steps_log, checks)
    res["vmm"] = vmm(a.work, checks)
    res["matrix"], layers = matrix(a.work, steps_log, a.simgpu, checks)
    if a.simgpu:
        layers = 2  # run.sh's tinytrain: --layers 4 over 2 pipeline stages
    res["profile"] = {v: profile_check(a.work, v, layers or 0, a.simgpu, checks)
                      for v in res["matrix"]}
    res["coverage"] = coverage(a.work, a.simgpu, checks)
    # The eager event dump's run (a host synchronisation ending each step): what Lynx said.
    for st in steps_log:
        if st.get("name") == "eager-events":
            res["eager_events"] = {"status": st.get("status"), "rc": st.get("rc"),
                                   "lynx_said": lynx_lines(read_text(st.get("stderr", "")))[:40]}
    res["replay"] = replay(res["matrix"], checks)
    res["checks"] = checks.items
    res["passed"] = sum(c["status"] == "pass" for c in checks.items)
    res["failed"] = len(checks.failed)
    res["skipped"] = sum(c["status"] == "skip" for c in checks.items)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(summary_md(res))
    for c in checks.items:
        print(f"{c['status'].upper():5} {c['name']}: {c['detail'][:300]}")
    print(f"gpu suite: {res['passed']} passed, {res['failed']} failed, {res['skipped']} skipped")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
