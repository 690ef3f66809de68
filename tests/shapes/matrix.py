#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The shape matrix: Lynx on trainers of every shape tinytrain can take (issue 16).

Each cell is one tinytrain job: a pipeline schedule, lazy optimizer state, DDP buckets
overlapped with the backward, FSDP's sharded layers, evaluation passes between steps, q/k/v as views of one allocation, gradients set to none after each step, fp16's loss scaler skipping steps, an optimizer step run as a CUDA graph, PyTorch's deterministic fill of new tensors, one or several micro-batches, a launch API, a compute stream
and a pp/tp/dp layout. Per cell, three runs on simgpu:

  none       tinytrain alone, with --report-saved: the truth (layers per rank, steps)
  profile    LYNX_MODE=profile: each rank's profile against the truth
  recompute  LYNX_MODE=recompute LYNX_BUDGET=60% (each rank 60% of its own peak)

and these checks, per rank:

  layers     the profile's layers are the rank's local layers (per model chunk)
  mbs        its micro-batches are the job's (times the model chunks)
  iteration  its iteration time is within 2% of the trainer's own step time
  stage      with a pipeline, it names its stage (as the p2p communicator orders it)
  identical  recompute mode's losses, gradient hashes and evaluation losses are the plain
             run's, every step
  memory     recompute mode's peak is at least 25% below the plain run's (last step)
  budget     a rank that armed a plan (its summary.<rank>.json) peaks within the plan's budget
             in every step from its first planned one (the first within it) on
  time       recompute mode's step is within 10% of the plain run's (last step)

--repeat N runs the profile of the first --repeat-cells cells N times and checks that every
rank's profile is the same each time (times and process ids aside).

Prints a Markdown table (one row per cell; a check's column reads "ok" or what failed) and
writes --json FILE. Exit status: 0 when every check passed, 1 otherwise, 2 for bad usage.

  tests/shapes/matrix.py [--build DIR] [--cells NAME,...] [--quick] [--repeat N]
                         [--json FILE] [--jobs N]
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile

MODEL = ["--layers", "8", "--seq", "64", "--batch", "4", "--virtual-model", "gpt-1.3b"]
STEPS = 16

# name: tinytrain arguments besides MODEL and --steps. The quick set (make test) is marked.
CELLS = [
    # one rank: micro-batches, lazy state, every launch API, the stream
    ("1r-m1", "--nproc 1 --microbatches 1", False),
    ("1r-m4", "--nproc 1 --microbatches 4", False),
    ("1r-m1-lazy", "--nproc 1 --microbatches 1 --lazy-optimizer", False),
    ("1r-m1-ex", "--nproc 1 --microbatches 1 --launch ex", False),
    ("1r-m1-driver-ex", "--nproc 1 --microbatches 1 --launch driver-ex", True),
    ("1r-m1-mixed", "--nproc 1 --microbatches 1 --launch mixed", False),
    ("1r-m1-created", "--nproc 1 --microbatches 1 --compute-stream created", False),
    ("1r-m1-null", "--nproc 1 --microbatches 1 --compute-stream null", False),
    # data parallel: one all-reduce after the backward, or DDP's buckets during it
    ("dp2-m1", "--nproc 2 --dp 2 --microbatches 1", False),
    ("dp2-m1-ddp", "--nproc 2 --dp 2 --microbatches 1 --ddp-buckets 64", False),
    ("dp2-m4-ddp", "--nproc 2 --dp 2 --microbatches 4 --ddp-buckets 64", False),
    ("dp2-m1-torchlike", "--nproc 2 --dp 2 --microbatches 1 --ddp-buckets 64 "
     "--lazy-optimizer --launch mixed --compute-stream null", True),
    ("dp2-m1-torchlike-fill", "--nproc 2 --dp 2 --microbatches 1 --ddp-buckets 64 "
     "--lazy-optimizer --launch mixed --compute-stream null --deterministic-fill", False),
    # nanoGPT's estimate_loss: forward-only passes (no dropout, nothing kept, a host read
    # each) before step 0 and every few steps, on one rank with gradient accumulation and
    # under DDP
    ("1r-m4-eval", "--nproc 1 --microbatches 4 --eval-every 3 --eval-iters 2", False),
    ("dp2-m1-eval", "--nproc 2 --dp 2 --microbatches 1 --ddp-buckets 64 --lazy-optimizer "
     "--launch mixed --compute-stream null --eval-every 4 --eval-iters 4", False),
    # torch.compile under DDP: each graph piece (here one layer) loads its kernels from a
    # module of its own, so the same kernel comes through other CUfunctions per layer
    ("dp2-m1-compiled", "--nproc 2 --dp 2 --microbatches 1 --ddp-buckets 64 "
     "--lazy-optimizer --launch mixed --compute-stream null --kernel-modules 1", True),
    # FSDP (FULL_SHARD, a unit per layer): every layer's parameters all-gathered into a new
    # buffer before its forward and again, prefetched, in the backward; gradients
    # reduce-scattered during the backward
    ("dp2-m1-fsdp", "--nproc 2 --dp 2 --microbatches 1 --fsdp --lazy-optimizer "
     "--launch mixed --compute-stream null", True),
    ("dp2-m4-fsdp", "--nproc 2 --dp 2 --microbatches 4 --fsdp", False),
    ("pp2dp2-m4-fsdp", "--nproc 4 --pp 2 --dp 2 --microbatches 4 --fsdp", False),
    ("tp2dp2-m1-fsdp", "--nproc 4 --tp 2 --dp 2 --microbatches 1 --fsdp --launch mixed", False),
    # zero_grad(set_to_none=True): gradients freed after each step, allocated by the next
    # backward (nanoGPT on one rank with gradient accumulation; torchlike DDP)
    ("1r-m4-set-to-none", "--nproc 1 --microbatches 4 --grad-set-to-none --lazy-optimizer "
     "--launch mixed --compute-stream null", False),
    ("dp2-m1-set-to-none", "--nproc 2 --dp 2 --microbatches 1 --ddp-buckets 64 "
     "--lazy-optimizer --launch mixed --compute-stream null --grad-set-to-none", False),
    # fp16 training under torch.cuda.amp.GradScaler: each step unscales and checks the
    # gradients on the device and reads the check on the host; the scale overflows in the
    # first steps (optimizer skipped: warm-up's first iterations differ, lazy state comes
    # later) and once more at step 12, which in DDP's cell comes before its plan is armed
    # (dp2-m1-cuda-graph below arms earlier and skips it after) (nanoGPT with gradient
    # accumulation; torchlike DDP; a pipeline)
    ("1r-m4-grad-scaler", "--nproc 1 --microbatches 4 --grad-scaler 0,1,2,12", False),
    # (DDP's cell: the optimizer's lazy state comes at the first step that runs it, step 3:
    # four steps differ before the iteration repeats, and warm-up ends at step 14; with 16
    # steps the last step measured would be the examination's, so it runs 20)
    ("dp2-m1-grad-scaler", "--nproc 2 --dp 2 --microbatches 1 --ddp-buckets 64 "
     "--lazy-optimizer --launch mixed --compute-stream null --grad-scaler 0,1,2,12 "
     "--steps 20", False),
    ("pp2-m4-grad-scaler", "--nproc 2 --pp 2 --microbatches 4 --grad-scaler 0,1,2,12", False),
    # a capturable optimizer under torch.cuda.graph: Adam's step captured once (at the first
    # step that runs it) on a side stream in Global mode, then launched as a graph every
    # step (one rank through the driver's Ex launch; torchlike DDP with the loss scaler's
    # skipped first steps, so the capture comes in warm-up's third step; a pipeline on a
    # created stream)
    ("1r-m4-cuda-graph", "--nproc 1 --microbatches 4 --cuda-graph optimizer "
     "--launch driver-ex", False),
    ("dp2-m1-cuda-graph", "--nproc 2 --dp 2 --microbatches 1 --ddp-buckets 64 "
     "--lazy-optimizer --launch mixed --compute-stream null --grad-scaler 0,1,2,12 "
     "--cuda-graph optimizer --steps 20", False),
    ("pp2-m4-cuda-graph", "--nproc 2 --pp 2 --microbatches 4 --cuda-graph optimizer "
     "--compute-stream created", False),
    # (the loss scaler skips the first ten steps: the plan is armed before the optimizer
    # first runs, and the capture, on a stream the trainer then destroys, comes after it)
    ("pp2-m4-cuda-graph-late", "--nproc 2 --pp 2 --microbatches 4 --cuda-graph optimizer "
     "--grad-scaler 0,1,2,3,4,5,6,7,8,9", False),
    # Megatron's block recompute (--recompute-method block --recompute-num-layers 2): the
    # trainer reruns the forward of the first two layers of each stage, not of the others,
    # and Lynx plans around them. With 8 layers (4 a stage) no plan can hold 60% on the last
    # stage, even with 1 layer rerun: a rerun layer's activations, live in its backward,
    # and the weights are more (Lynx says so and stays out); hence 16 layers
    ("pp2-m4-block-recompute", "--nproc 2 --pp 2 --microbatches 4 --recompute full "
     "--recompute-layers 2 --layers 16", False),
    ("pp3-m3-interleaved-block-recompute", "--nproc 3 --pp 3 --microbatches 3 --schedule "
     "interleaved --virtual-stages 2 --layers 24 --recompute full --recompute-layers 1", False),
    ("dp2-m1-block-recompute", "--nproc 2 --dp 2 --microbatches 1 --ddp-buckets 64 "
     "--lazy-optimizer --launch mixed --recompute full --recompute-layers 2 --layers 12", False),
    # q, k and v as views of the fused QKV output's allocation (PyTorch's split)
    ("dp2-m1-fused-qkv", "--nproc 2 --dp 2 --microbatches 1 --ddp-buckets 64 "
     "--lazy-optimizer --launch mixed --compute-stream null --fused-qkv", False),
    ("pp2tp2-m4-fused-qkv", "--nproc 4 --pp 2 --tp 2 --microbatches 4 --fused-qkv", False),
    # tensor parallel
    ("tp2-m1", "--nproc 2 --tp 2 --microbatches 1", False),
    ("tp2-m4-ex", "--nproc 2 --tp 2 --microbatches 4 --launch ex", False),
    # pipelines: schedules and one micro-batch
    ("pp2-m4-1f1b", "--nproc 2 --pp 2 --microbatches 4", False),
    ("pp2-m4-gpipe", "--nproc 2 --pp 2 --microbatches 4 --schedule gpipe", False),
    ("pp2-m2-gpipe", "--nproc 2 --pp 2 --microbatches 2 --schedule gpipe", True),
    ("pp2-m1-1f1b", "--nproc 2 --pp 2 --microbatches 1", True),
    ("pp2-m1-gpipe", "--nproc 2 --pp 2 --microbatches 1 --schedule gpipe", False),
    ("pp2-m4-gpipe-lazy", "--nproc 2 --pp 2 --microbatches 4 --schedule gpipe "
     "--lazy-optimizer", False),
    ("pp2-m4-mixed", "--nproc 2 --pp 2 --microbatches 4 --launch mixed", False),
    ("pp2-m4-gpipe-driver-ex", "--nproc 2 --pp 2 --microbatches 4 --schedule gpipe "
     "--launch driver-ex", False),
    ("pp2-m4-created", "--nproc 2 --pp 2 --microbatches 4 --compute-stream created", False),
    ("pp2-m4-modules2", "--nproc 2 --pp 2 --microbatches 4 --launch driver "
     "--kernel-modules 2", False),
    ("pp4-m4-1f1b", "--nproc 4 --pp 4 --microbatches 4", False),
    ("pp4-m4-interleaved", "--nproc 4 --pp 4 --microbatches 4 --schedule interleaved "
     "--virtual-stages 2 --layers 16", False),
    ("pp3-m3-interleaved", "--nproc 3 --pp 3 --microbatches 3 --schedule interleaved "
     "--virtual-stages 2 --layers 12", True),
    # the layouts together
    ("pp2tp2-m4", "--nproc 4 --pp 2 --tp 2 --microbatches 4", False),
    ("pp2tp2-m4-gpipe", "--nproc 4 --pp 2 --tp 2 --microbatches 4 --schedule gpipe", False),
    ("pp2tp2-m1", "--nproc 4 --pp 2 --tp 2 --microbatches 1", False),
    ("pp2dp2-m4-ddp", "--nproc 4 --pp 2 --dp 2 --microbatches 4 --ddp-buckets 64", False),
    ("pp2dp2-m4-gpipe-ddp-lazy", "--nproc 4 --pp 2 --dp 2 --microbatches 4 --schedule gpipe "
     "--ddp-buckets 64 --lazy-optimizer", False),
    ("tp2dp2-m1-ddp-mixed", "--nproc 4 --tp 2 --dp 2 --microbatches 1 --ddp-buckets 64 "
     "--launch mixed", False),
]

CHECKS = ["layers", "mbs", "iteration", "stage", "identical", "memory", "budget", "time"]
BUDGET = "60%"
MEMORY_CUT = 0.25   # at least this much below the plain run's peak
TIME_SLACK = 0.10   # at most this much slower than the plain run
ITERATION_SLACK = 0.02


def steps_of(text):
    """The JSON step lines of tinytrain's stdout, by (step, rank)."""
    lines = {}
    for line in text.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            lines[(d["step"], d["rank"])] = d
    return lines


def results_of(step):
    """What a step computed: its loss, gradient hash and evaluation loss (if any)."""
    return step["loss"], step["grad_hash"], step.get("eval_loss")


def run(build, args, env_extra, out_dir):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.join(build, "simgpu")
    env["SIMGPU_VMM_GRANULARITY"] = "4K"
    env.update(env_extra)
    cmd = [os.path.join(build, "bin", "tinytrain")] + args
    if env_extra:
        cmd = [os.path.join(build, "bin", "lynx"), "run", "--out", out_dir, "--"] + cmd
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def read_profiles(out_dir):
    profiles = {}
    for name in os.listdir(out_dir) if os.path.isdir(out_dir) else []:
        if name.startswith("profile.") and name.endswith(".json"):
            with open(os.path.join(out_dir, name)) as f:
                p = json.load(f)
            profiles[p["rank"] if p["rank"] is not None else 0] = p
    return profiles


def comparable(profile):
    """A profile without what differs between identical runs: process ids, host times and the
    run's identity (each launch is its own run)."""
    p = json.loads(json.dumps(profile))
    p["environment"].pop("pid", None)
    p.pop("host_link", None)
    p.pop("run", None)

    def strip(o):
        if isinstance(o, dict):
            if o.get("source") == "host":
                return {"source": "host"}
            return {k: strip(v) for k, v in o.items() if k != "offset_ns"}
        if isinstance(o, list):
            return [strip(v) for v in o]
        return o
    return strip(p)


def first_difference(a, b, path=""):
    """Where two comparable profiles first differ, as a path with both values."""
    if type(a) is not type(b):
        return f"{path or '/'}: {a!r:.60} against {b!r:.60}"
    if isinstance(a, dict):
        for key in list(a) + [k for k in b if k not in a]:
            if key not in a or key not in b:
                return f"{path}/{key}: only in {'the first' if key in a else 'the repeat'}"
            where = first_difference(a[key], b[key], f"{path}/{key}")
            if where:
                return where
        return ""
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items against {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            where = first_difference(x, y, f"{path}[{i}]")
            if where:
                return where
        return ""
    return "" if a == b else f"{path}: {a!r:.60} against {b!r:.60}"


def armed_budget(out_dir, rank):
    """The budget of the plan a rank armed (bytes, as the device counts them), or None when
    it armed none (no summary.<rank>.json)."""
    path = os.path.join(out_dir, f"summary.{rank}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f).get("plan", {}).get("budget_bytes")


def check_cell(build, name, args, scratch, repeat):
    # A cell's --layers wins; a cell may run more than STEPS steps (its own --steps).
    own_steps = "--steps " in args
    steps = int(args.split("--steps ")[1].split()[0]) if own_steps else STEPS
    base = MODEL + args.split() + ([] if own_steps else ["--steps", str(STEPS)])
    row = {"cell": name, "args": args, "ranks": {}, "failures": []}
    fail = row["failures"].append

    rc, out, err = run(build, base + ["--report-saved"], {}, None)
    if rc:
        fail(f"tinytrain failed ({rc}): {err.strip()[-300:]}")
        return row
    truth = steps_of(out)
    ranks = sorted(r for (s, r) in truth if s == -1)
    layers = {r: truth[(-1, r)]["layers"] for r in ranks}
    last = steps - 1
    pp = int(args.split("--pp ")[1].split()[0]) if "--pp " in args else 1
    mbs = int(args.split("--microbatches ")[1].split()[0])
    # Interleaved: the profile sees each model chunk's pass of a micro-batch as a stack of
    # its own, so V chunks of L/V layers make V times the micro-batches of L/V layers.
    chunks = int(args.split("--virtual-stages ")[1].split()[0]) if "--virtual-stages " in args else 1
    mbs *= chunks
    layers = {r: n // chunks for r, n in layers.items()}

    prof_dir = os.path.join(scratch, name, "profile")
    rc, pout, perr = run(build, base, {"LYNX_MODE": "profile"}, prof_dir)
    profiles = read_profiles(prof_dir)
    rec_dir = os.path.join(scratch, name, "recompute")
    rc2, rout, rerr = run(build, base, {"LYNX_MODE": "recompute", "LYNX_BUDGET": BUDGET},
                          rec_dir)
    psteps, rsteps = steps_of(pout), steps_of(rout)
    for r in ranks:
        got = {c: "ok" for c in CHECKS}
        p = profiles.get(r)
        if rc or not p:
            warn = [l for l in perr.splitlines() if f":{r}" in l or "WARN" in l]
            for c in ["layers", "mbs", "iteration", "stage"]:
                got[c] = "no profile"
            row["why_no_profile"] = (warn or ["(nothing said)"])[0][-200:]
        else:
            if len(p["layers"]) != layers[r]:
                got["layers"] = f"{len(p['layers'])} of {layers[r]}"
            if p["microbatches"] != mbs:
                got["mbs"] = f"{p['microbatches']} of {mbs}"
            true_ns = psteps[(last, r)]["step_time_ns"]
            ns = p["iteration"]["time"].get("ns", 0)
            if abs(ns - true_ns) > ITERATION_SLACK * true_ns:
                got["iteration"] = f"{ns / 1e6:.2f} vs {true_ns / 1e6:.2f} ms"
            if pp > 1 and "pipeline" not in p:
                got["stage"] = "unnamed"
            elif pp > 1 and p["pipeline"]["stages"] != pp:
                got["stage"] = f"{p['pipeline']['stages']} stages"
        if rc2 or any((s, r) not in rsteps for s in range(steps)):
            got["identical"] = got["memory"] = got["budget"] = got["time"] = f"exit {rc2}"
        else:
            if any(results_of(rsteps[(s, r)]) != results_of(truth[(s, r)])
                   for s in range(steps)):
                got["identical"] = "DIFFERS"
            peak, none_peak = rsteps[(last, r)]["peak_bytes"], truth[(last, r)]["peak_bytes"]
            if peak > (1 - MEMORY_CUT) * none_peak:
                got["memory"] = f"{100 * (peak / none_peak - 1):+.0f}%"
            budget = armed_budget(rec_dir, r)
            if budget is not None:
                # From the first planned step (the first within the budget) on.
                peaks = [rsteps[(s, r)]["peak_bytes"] for s in range(steps)]
                first = next((s for s, b in enumerate(peaks) if b <= budget), None)
                over = [(s, b) for s, b in enumerate(peaks) if first is not None and s > first
                        and b > budget]
                if first is None:
                    got["budget"] = f"+{(peak - budget) / 2**20:.2f} MiB"
                elif over:
                    s, b = max(over, key=lambda x: x[1])
                    got["budget"] = f"step {s} +{(b - budget) / 2**20:.2f} MiB"
            t, none_t = rsteps[(last, r)]["step_time_ns"], truth[(last, r)]["step_time_ns"]
            if t > (1 + TIME_SLACK) * none_t:
                got["time"] = f"{100 * (t / none_t - 1):+.0f}%"
        row["ranks"][r] = {
            "checks": got,
            "peak": rsteps.get((last, r), {}).get("peak_bytes"),
            "none_peak": truth[(last, r)]["peak_bytes"],
            "step_ns": rsteps.get((last, r), {}).get("step_time_ns"),
            "none_step_ns": truth[(last, r)]["step_time_ns"],
        }
        for c, v in got.items():
            if v != "ok":
                fail(f"rank {r} {c}: {v}")
    warns = [l for l in rerr.splitlines() if " WARN " in l]
    if warns:
        row["recompute_warnings"] = sorted(set(l.split("] ", 1)[-1] for l in warns))[:3]
    if repeat > 1 and profiles:
        first = {r: comparable(p) for r, p in profiles.items()}
        for k in range(1, repeat):
            d = os.path.join(scratch, name, f"profile-{k}")
            run(build, base, {"LYNX_MODE": "profile"}, d)
            again = {r: comparable(p) for r, p in read_profiles(d).items()}
            if again != first:
                diff = [r for r in first if again.get(r) != first[r]]
                where = first_difference(first[diff[0]], again.get(diff[0])) if diff else ""
                fail(f"profile differs on run {k + 1}, ranks {diff}: first at {where}")
        row["repeated"] = repeat
    return row


def cell_summary(row, check):
    bad = {r: v["checks"][check] for r, v in row["ranks"].items() if v["checks"][check] != "ok"}
    if not row["ranks"]:
        return "error"
    if not bad:
        return "ok"
    return "; ".join(f"r{r}: {v}" for r, v in sorted(bad.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--cells", default="")
    ap.add_argument("--quick", action="store_true", help="the cells make test runs")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--repeat-cells", type=int, default=3)
    ap.add_argument("--json", default="")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    cells = [c for c in CELLS if (not a.quick or c[2])]
    if a.cells:
        wanted = a.cells.split(",")
        unknown = set(wanted) - {c[0] for c in CELLS}
        if unknown:
            print(f"matrix.py: unknown cells {sorted(unknown)}", file=sys.stderr)
            return 2
        cells = [c for c in CELLS if c[0] in wanted]
    scratch = tempfile.mkdtemp(prefix="lynx-shapes.", dir=a.build)
    build = os.path.abspath(a.build)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futures = [pool.submit(check_cell, build, name, args, scratch,
                               a.repeat if i < a.repeat_cells else 1)
                   for i, (name, args, _) in enumerate(cells)]
        rows = [f.result() for f in futures]
    print(f"Shape matrix: {len(rows)} cells, {STEPS} steps (unless a cell says), recompute at "
          f"LYNX_BUDGET={BUDGET}, "
          f"{MODEL[1]} layers")
    print()
    print("| cell | " + " | ".join(CHECKS) + " |")
    print("|---" * (len(CHECKS) + 1) + "|")
    for row in rows:
        print(f"| {row['cell']} | " + " | ".join(cell_summary(row, c) for c in CHECKS) + " |")
    print()
    for row in rows:
        cuts = [1 - v["peak"] / v["none_peak"] for v in row["ranks"].values() if v["peak"]]
        slow = [v["step_ns"] / v["none_step_ns"] - 1 for v in row["ranks"].values()
                if v["step_ns"]]
        extra = ""
        if cuts:
            extra = (f"peak -{100 * min(cuts):.0f}% to -{100 * max(cuts):.0f}%, "
                     f"step {100 * min(slow):+.1f}% to {100 * max(slow):+.1f}%")
        if row.get("why_no_profile"):
            extra += f"; no profile: {row['why_no_profile']}"
        if row.get("recompute_warnings"):
            extra += "; warned: " + " / ".join(row["recompute_warnings"])
        # What no column shows (a tinytrain failure, a repeated profile that differs).
        other = [f for f in row["failures"] if not f.startswith("rank ")]
        if other:
            extra += "; failed: " + " / ".join(other)
        print(f"- {row['cell']} (`{row['args']}`): {extra}")
    failed = [r for r in rows if r["failures"]]
    print()
    print(f"{len(rows) - len(failed)} of {len(rows)} cells pass every check")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cells": rows, "passed": len(rows) - len(failed), "failed": len(failed)},
                      f, indent=1)
    if not failed:
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        print(f"(runs kept in {scratch})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
