#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The fault sweep: under any CUDA or NCCL failure, Lynx trains bit-identically or fails as
the trainer would without it; never a crash, a hang or a silent wrong result of its own.

The job is tinytrain with 4 ranks (pp 2, tp 2) on simgpu, in recompute mode under a budget
that makes Lynx evict, replay and restore. simgpu's SIMGPU_FAULTS makes the n-th call (per
process) of one symbol return an error without doing anything.

  1. Two fault-free runs: without Lynx (the baseline: its results, and which calls the
     trainer makes) and with Lynx (the calls each process makes, and how often). They must
     agree, or the sweep cannot judge (exit 1).
  2. Fault points: each symbol the Lynx run called, failed at its calls 1, 2, 3, at the
     quartiles of its largest per-process count and at the last of them, with a generic
     error (999: CUDA_ERROR_UNKNOWN, cudaErrorUnknown; nccl*: ncclSystemError, 2) and, for
     allocations, out of memory as well (2: CUDA_ERROR_OUT_OF_MEMORY,
     cudaErrorMemoryAllocation).
     --quick fails only the middle call of Lynx's VMM calls, of the copies its restores and
     replays use, of a launch and of a collective (11 points); --symbols, --counts and
     --max-points (an even spread over the points sorted by symbol, call and error) narrow
     the sweep.
  3. Per point, the job without Lynx (the reference) and with it, each under a timeout
     (--timeout, by default max(60 s, 6 times the fault-free Lynx run)). Where no process of
     the baseline made n calls of the symbol, the fault cannot fire without Lynx: the
     reference is the baseline.
  4. The Lynx run against the reference. Results are the (step, rank, loss, grad_hash) of
     the JSON lines on stdout; peaks and times are not results.
       identical         the same exit status and the same results (both killed by the
                         same signal, or both past the timeout, count as the same status)
       degraded-correct  exit 0 with the baseline's results where the reference differs
                         (the fault hit a call only Lynx makes, and Lynx recovered)
       same-failure      both exit non-zero (no signal, no timeout)
       trainer-failed    the trainer reports one of its own calls failed and exits, where
                         without Lynx no process reaches that call number: Lynx's calls
                         shifted the count onto a trainer call, which fails the trainer as
                         it would without Lynx (acceptable)
       failed-loudly     Lynx exits non-zero where the reference exits 0, and a Lynx ERROR
                         line says why (acceptable where data was lost: reported only)
       crash             a process killed by a signal where the reference's was not
       hang              the timeout hit where the reference's did not
       wrong             exit 0 with results that are neither the baseline's nor the
                         reference's, or printed results that are not a prefix of either
       other             anything else, with the reason
     tinytrain's launcher turns a rank killed by a signal into "rank N failed" and exit 1,
     as it does for a rank that exits 1; simgpu writes each process's call counters from
     an exit handler (SIMGPU_COUNTERS), so a rank without a counters file ended without
     exiting: it was killed by a signal. (A signal inside a later exit handler, such as
     Lynx's own, is not seen this way: that run lands in failed-loudly or other.)

Prints a Markdown table (one row per class) and one line per point that is not identical,
with the first Lynx error (else warning) and the trainer's first complaint on its stderr,
and the reference's; writes every point to --json FILE. Exit status: 1 when
Lynx causes a crash, a hang or a wrong result (or the fault-free runs disagree), 0
otherwise, 2 for bad usage.

  tests/faults/sweep.py [--build DIR] [--quick] [--symbols REGEX] [--counts N,...]
                        [--max-points N] [--timeout S] [--jobs N] [--json FILE]
                        [--granule SIZE] [--budget BUDGET] [--job-args "ARGS"]
"""
import argparse
import concurrent.futures
import dataclasses
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

NPROC = 4
JOB = ["--nproc", str(NPROC), "--pp", "2", "--tp", "2", "--dp", "1", "--layers", "8",
       "--microbatches", "4", "--virtual-model", "gpt-1.3b", "--steps", "13"]
BUDGET = "2150K"
# simgpu's VMM granule: 4K evicts tinytrain's activations one by one; --granule 256K with
# --job-args "--seq 64 --batch 4" and --budget 70% evicts them in packs (shim/pack.h).
GRANULE = "4K"
# A rank that dies stalls its peers this long (simgpu's default is a minute).
NCCL_TIMEOUT_MS = "5000"
# The hang threshold: this many times the fault-free Lynx run, and at least MIN_TIMEOUT_S.
TIMEOUT_FACTOR = 6
MIN_TIMEOUT_S = 60
FAULT_FREE_TIMEOUT_S = 600

CUDA_UNKNOWN = 999          # CUDA_ERROR_UNKNOWN, cudaErrorUnknown
CUDA_OUT_OF_MEMORY = 2      # CUDA_ERROR_OUT_OF_MEMORY, cudaErrorMemoryAllocation
NCCL_SYSTEM_ERROR = 2       # ncclSystemError
# Allocations (cuMemGetAllocationGranularity is a query, not one).
ALLOCATION = re.compile(r"Alloc(?!ation)|Malloc|MemCreate|MemMap")

# --quick: Lynx's VMM calls, the copies of its restores and replays, a launch and a
# collective of the trainer's, each failed once at the middle of its calls.
QUICK_SYMBOLS = ["cuMemCreate", "cuMemMap", "cuMemUnmap", "cuMemRelease", "cuMemSetAccess",
                 "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuLaunchKernel",
                 "ncclAllReduce"]

CLASSES = ["identical", "degraded-correct", "same-failure", "trainer-failed", "failed-loudly",
           "crash", "hang", "wrong", "other"]
LYNX_FAULTS = {"crash", "hang", "wrong"}

LYNX_ERROR = re.compile(r"^\[lynx \d+:\d+ ERROR ")
# The trainer's own report of a failed CUDA or NCCL call (tinytrain's tt_check_*).
TRAINER_CALL_FAILED = re.compile(r"^tinytrain: .* failed: ")
LYNX_WARNING = re.compile(r"^\[lynx \d+:\d+ WARN ")
RANK_FAILED = re.compile(r"^tinytrain: rank \d+ failed", re.M)
# The trainer's or simgpu's own complaint, not the launcher's "rank N failed".
TRAINER_ERROR = re.compile(r"^(tinytrain|simgpu)(?!: rank \d+ failed)")


@dataclasses.dataclass(frozen=True)
class Point:
    symbol: str
    nth: int
    error: int

    def __str__(self):
        return f"{self.symbol}@{self.nth}={self.error}"


@dataclasses.dataclass
class Run:
    """One tinytrain job: how it ended, what it printed, which calls its processes made."""
    returncode: int | None      # None: killed at the timeout
    killed_ranks: int           # ranks that ended without exiting (signals)
    results: dict               # (step, rank) -> (loss, grad_hash)
    stderr: str
    wall_s: float
    calls: dict                 # symbol -> the largest count over the processes

    @property
    def timed_out(self):
        return self.returncode is None

    @property
    def crash(self):
        """How a process was killed by a signal, or None."""
        if self.timed_out:
            return None
        if self.returncode < 0:
            return f"tinytrain killed by {signal.Signals(-self.returncode).name}"
        if self.killed_ranks:
            return "a rank killed by a signal"
        return None

    @property
    def status(self):
        if self.timed_out:
            return "timeout"
        if self.returncode < 0:
            return self.crash
        if self.killed_ranks:
            return f"exit {self.returncode}, {self.killed_ranks} rank(s) killed by a signal"
        return f"exit {self.returncode}"

    def summary(self):
        return {"status": self.status, "returncode": self.returncode,
                "steps_printed": len(self.results), "wall_s": round(self.wall_s, 2),
                "lynx_line": first_line(self.stderr, LYNX_ERROR, LYNX_WARNING),
                "trainer_line": first_line(self.stderr, TRAINER_ERROR, RANK_FAILED)}


class Stopped(Exception):
    """The sweep is ending: no new run starts."""


class Jobs:
    """Runs the job, each run in a fresh directory and process group, and kills every group
    still alive at the end (a timeout, or an interrupted sweep)."""

    def __init__(self, build, scratch):
        self.build = os.path.abspath(build)
        self.scratch = scratch
        self.groups = set()
        self.stopping = False
        self.lock = threading.Lock()

    def run(self, lynx, fault=None, timeout=None):
        """The job, with Lynx or without, with one fault or none."""
        work = os.path.abspath(tempfile.mkdtemp(dir=self.scratch))
        env = dict(os.environ)
        env.update({"LD_LIBRARY_PATH": os.path.join(self.build, "simgpu"),
                    "SIMGPU_VMM_GRANULARITY": GRANULE,
                    "SIMGPU_NCCL_TIMEOUT_MS": NCCL_TIMEOUT_MS,
                    "SIMGPU_COUNTERS": os.path.join(work, "counters")})
        env.pop("SIMGPU_FAULTS", None)
        if fault:
            env["SIMGPU_FAULTS"] = str(fault)
        if lynx:
            env.update({"LD_PRELOAD": os.path.join(self.build, "liblynx.so"),
                        "LYNX_MODE": "recompute", "LYNX_BUDGET": BUDGET,
                        "LYNX_OUT": os.path.join(work, "lynx-out")})
        start = time.monotonic()
        with self.lock:
            if self.stopping:
                raise Stopped()
            # In the run's directory: whatever a crash leaves (a core file) goes with it.
            p = subprocess.Popen([os.path.join(self.build, "bin", "tinytrain")] + JOB,
                                 cwd=work, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, start_new_session=True)
            self.groups.add(p.pid)
        try:
            out, err = p.communicate(timeout=timeout)
            returncode = p.returncode
        except subprocess.TimeoutExpired:
            kill_group(p.pid)
            out, err = p.communicate()
            returncode = None
        finally:
            with self.lock:
                self.groups.discard(p.pid)
            kill_group(p.pid)
        wall = time.monotonic() - start
        per_process = read_counters(os.path.join(work, "counters"))
        shutil.rmtree(work, ignore_errors=True)
        remove_nccl_segments(p.pid)
        rank_files = sum(1 for pid in per_process if pid != p.pid)
        forked = returncode == 0 or rank_files > 0 or bool(RANK_FAILED.search(err))
        killed = NPROC - rank_files if forked and returncode is not None else 0
        calls = {}
        for counts in per_process.values():
            for symbol, n in counts.items():
                calls[symbol] = max(calls.get(symbol, 0), n)
        return Run(returncode, killed, results_of(out), err, wall, calls)

    def stop(self):
        """Kills the runs in flight; later ones do not start."""
        with self.lock:
            self.stopping = True
            for pgid in self.groups:
                kill_group(pgid)


def kill_group(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def remove_nccl_segments(launcher_pid):
    """simgpu's NCCL segments are named after the launcher; a rank killed while its peers
    were joining leaves them in /dev/shm."""
    for path in glob.glob(f"/dev/shm/simgpu-nccl-{launcher_pid}-*"):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def read_counters(prefix):
    """SIMGPU_COUNTERS's files (PREFIX.<pid>, lines "symbol count"), by process id."""
    per_process = {}
    for path in glob.glob(prefix + ".*"):
        counts = {}
        with open(path) as f:
            for line in f:
                fields = line.split()
                if len(fields) == 2 and fields[1].isdigit():  # not a file cut short
                    counts[fields[0]] = int(fields[1])
        per_process[int(path.rsplit(".", 1)[1])] = counts
    return per_process


def results_of(stdout):
    """The results of tinytrain's step lines: (step, rank) -> (loss, grad_hash)."""
    results = {}
    for line in stdout.splitlines():
        if line.startswith('{"step"'):
            d = json.loads(line)
            results[(d["step"], d["rank"])] = (d["loss"], d["grad_hash"])
    return results


def is_prefix_of(printed, truth):
    """Each rank printed the first steps of truth, with truth's results (nothing is a prefix
    of anything)."""
    steps = {}
    for key, value in printed.items():
        if truth.get(key) != value:
            return False
        steps.setdefault(key[1], []).append(key[0])
    return all(sorted(s) == list(range(len(s))) for s in steps.values())


def first_line(stderr, *patterns):
    """The first line of stderr that the first pattern finds, else the second, ..."""
    lines = stderr.splitlines()
    for pattern in patterns:
        for line in lines:
            if pattern.match(line):
                return line
    return ""


def classify(lynx, reference, baseline):
    """The class of a Lynx run against its reference (see the docstring), and why."""
    if lynx.timed_out:
        if reference.timed_out:
            return "identical", "both hit the timeout"
        return "hang", f"Lynx hit the timeout; the reference: {reference.status}"
    if lynx.crash:
        if lynx.crash == reference.crash:
            return "identical", f"both: {lynx.crash}"
        return "crash", f"{lynx.status}; the reference: {reference.status}"
    if lynx.returncode == 0 and lynx.results not in (baseline.results, reference.results):
        return "wrong", "exit 0 with results that are neither the baseline's nor the reference's"
    if not (is_prefix_of(lynx.results, baseline.results)
            or is_prefix_of(lynx.results, reference.results)):
        return "wrong", ("printed results that are a prefix of neither the baseline's nor "
                         "the reference's")
    if lynx.status == reference.status and lynx.results == reference.results:
        return "identical", ""
    if lynx.returncode == 0 and lynx.results == baseline.results:
        return "degraded-correct", f"the reference: {reference.status}"
    reference_failed = (not reference.timed_out and not reference.crash
                        and reference.returncode != 0)
    if lynx.returncode != 0 and reference_failed:
        return "same-failure", ""
    if lynx.returncode != 0 and reference.returncode == 0:
        if any(LYNX_ERROR.match(line) for line in lynx.stderr.splitlines()):
            return "failed-loudly", ""
        if reference is baseline and any(TRAINER_CALL_FAILED.match(line)
                                         for line in lynx.stderr.splitlines()):
            return "trainer-failed", "the n-th call was the trainer's under Lynx"
        return "other", f"{lynx.status} where the reference exits 0, and no Lynx error says why"
    return "other", f"Lynx: {lynx.status}; the reference: {reference.status}"


def call_numbers(top, counts, quick):
    """Which calls of a symbol called top times to fail: those of --counts, the middle one
    (--quick), or calls 1, 2, 3, the quartiles and the last."""
    if counts:
        return [n for n in counts if 1 <= n <= top]
    if quick:
        return [(top + 1) // 2]
    return sorted({n for n in (1, 2, 3, top // 4, top // 2, 3 * top // 4, top) if 1 <= n <= top})


def error_codes(symbol):
    generic = NCCL_SYSTEM_ERROR if symbol.startswith("nccl") else CUDA_UNKNOWN
    if ALLOCATION.search(symbol):
        return [generic, CUDA_OUT_OF_MEMORY]
    return [generic]


def fault_points(calls, a):
    """The points for the calls of the fault-free Lynx run, as the options choose them,
    sorted by symbol, call and error."""
    symbols = [s for s in sorted(calls)
               if a.symbols.search(s) and (not a.quick or s in QUICK_SYMBOLS)]
    points = [Point(symbol, n, error)
              for symbol in symbols
              for n in call_numbers(calls[symbol], a.counts, a.quick)
              for error in error_codes(symbol)]
    return evenly_spaced(points, a.max_points) if a.max_points else points


def evenly_spaced(points, count):
    """count points spread evenly over the sorted list (symbols, then calls, then errors)."""
    if count >= len(points):
        return points
    if count <= 1:
        return points[:count]
    step = (len(points) - 1) / (count - 1)
    return [points[round(i * step)] for i in range(count)]


def sweep_point(jobs, point, baseline, timeout):
    if baseline.calls.get(point.symbol, 0) >= point.nth:
        reference, reference_source = jobs.run(False, point, timeout), "run"
    else:
        reference, reference_source = baseline, "baseline"
    lynx = jobs.run(True, point, timeout)
    cls, reason = classify(lynx, reference, baseline)
    return {"point": str(point), "symbol": point.symbol, "nth": point.nth,
            "error": point.error, "class": cls, "reason": reason,
            "lynx": lynx.summary(),
            "reference": dict(reference.summary(), source=reference_source)}


def fault_free_runs(jobs):
    """The baseline and the fault-free Lynx run; exits 1 if either fails or they disagree."""
    baseline = jobs.run(False, timeout=FAULT_FREE_TIMEOUT_S)
    lynx = jobs.run(True, timeout=FAULT_FREE_TIMEOUT_S)
    for name, run in (("without Lynx", baseline), ("with Lynx", lynx)):
        if run.returncode != 0 or not run.results:
            sys.exit(f"sweep.py: the fault-free run {name} failed ({run.status}): "
                     f"{first_line(run.stderr, LYNX_ERROR, TRAINER_ERROR, RANK_FAILED)}")
    if lynx.results != baseline.results:
        sys.exit("sweep.py: the fault-free runs with and without Lynx differ in results: "
                 "the sweep cannot judge")
    return baseline, lynx


def print_report(rows, header):
    print(header)
    print()
    print("| class | points |")
    print("|---|---|")
    for cls in CLASSES:
        print(f"| {cls} | {sum(1 for r in rows if r['class'] == cls)} |")
    print()
    for r in rows:
        if r["class"] == "identical":
            continue
        said = [f"{who}: `{line}`" for who, line in (("lynx", r["lynx"]["lynx_line"]),
                                                      ("trainer", r["lynx"]["trainer_line"]))
                if line]
        if r["reference"]["source"] == "baseline":
            said.append("reference: the baseline (without Lynx no process reaches that call)")
        elif r["reference"]["trainer_line"]:
            said.append(f"reference: `{r['reference']['trainer_line']}`")
        reason = f" ({r['reason']})" if r["reason"] else ""
        print(f"- `{r['point']}`: {r['class']}{reason}; " + "; ".join(said or ["nothing said"]))


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--quick", action="store_true",
                    help="Lynx's VMM calls and copies, a launch and a collective, once each")
    ap.add_argument("--symbols", default="", help="only symbols this regular expression finds")
    ap.add_argument("--counts", default="", help="the calls to fail, e.g. 1,10,100")
    ap.add_argument("--max-points", type=int, default=0,
                    help="at most this many points, spread evenly")
    ap.add_argument("--timeout", type=float, default=0,
                    help="the hang threshold in seconds (default: max(60, 6x the fault-free "
                         "Lynx run))")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--granule", default=GRANULE, help="simgpu's VMM granule (default 4K)")
    ap.add_argument("--budget", default=BUDGET, help="LYNX_BUDGET (default 2150K)")
    ap.add_argument("--job-args", default="",
                    help="more tinytrain arguments, e.g. \"--seq 64 --batch 4\"")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    try:
        a.symbols = re.compile(a.symbols)
        a.counts = [int(n) for n in a.counts.split(",")] if a.counts else []
    except (re.error, ValueError) as e:
        ap.error(str(e))
    return a


def main():
    global BUDGET, GRANULE
    a = parse_args()
    BUDGET, GRANULE = a.budget, a.granule
    JOB.extend(a.job_args.split())
    # A sweep killed by SIGTERM (make's, a CI timeout's) still kills its runs.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    started = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="lynx-faults.", dir=a.build)
    jobs = Jobs(a.build, scratch)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs))
    try:
        baseline, lynx = fault_free_runs(jobs)
        timeout = a.timeout or max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * lynx.wall_s)
        points = fault_points(lynx.calls, a)
        futures = [pool.submit(sweep_point, jobs, p, baseline, timeout) for p in points]
        for done, f in enumerate(concurrent.futures.as_completed(futures), 1):
            r = f.result()
            print(f"[{done}/{len(points)}] {r['point']}: {r['class']} "
                  f"({r['lynx']['wall_s']:.1f} s)", file=sys.stderr)
        rows = [f.result() for f in futures]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        jobs.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    elapsed = time.monotonic() - started
    symbols = len({r["symbol"] for r in rows})
    print_report(rows, f"Fault sweep: {len(rows)} points over {symbols} symbols, tinytrain "
                       f"{' '.join(JOB)}, recompute at LYNX_BUDGET={BUDGET}, granule "
                       f"{GRANULE}; timeout "
                       f"{timeout:.1f} s; {elapsed:.0f} s in all")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"job": JOB, "budget": BUDGET, "timeout_s": timeout,
                       "elapsed_s": round(elapsed, 1), "points": rows}, f, indent=1)
    return 1 if any(r["class"] in LYNX_FAULTS for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
