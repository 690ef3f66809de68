#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A GPT trainer of our own, in plain PyTorch, for measuring Lynx on a real GPU.

It does what real trainers do and tinytrain does not: bf16 autocast, SDPA attention (flash
kernels), dropout, AdamW whose state appears at the first step, gradient clipping, and
optionally DDP over NCCL (gradient buckets all-reduced during the backward, on NCCL's own
stream) and torch.compile (Triton kernels). Tokens are synthetic, from a fixed seed, so two
runs of the same command compute the same bits; run.sh checks that they do under Lynx.

stdout: one JSON line {"meta": ...} first, then one JSON line per step:
  step, loss (a float; loss_hex is its exact bits), param_hash (every parameter's bits),
  max_allocated (torch.cuda.max_memory_allocated over the step), in_use (device memory in
  use at the step's end, total - free as cuMemGetInfo says), in_use_peak (the largest
  in-use figure a watcher thread sampled during the step, from NVML; null without it),
  step_ms (CUDA events around forward, backward and optimizer step).
"""
import argparse
import hashlib
import json
import os
import sys
import threading
import time

# Deterministic cuBLAS needs its workspace configuration before CUDA is initialised.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=24)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--compile", action="store_true", help="torch.compile the model (Triton)")
    p.add_argument("--ddp", action="store_true",
                   help="DistributedDataParallel over NCCL (start with torchrun)")
    p.add_argument("--device", default="cuda", help="cuda, or cpu to check the script")
    p.add_argument("--sync-steps", action="store_true",
                   help="torch.cuda.synchronize() at each step's end, so that all of its "
                        "work is done by its t_end_ns")
    p.add_argument("--torch-profile", metavar="FIRST:LAST",
                   help="run torch.profiler over steps FIRST..LAST (inclusive) and write "
                        "their CUDA kernels, in launch order, to --torch-profile-out")
    p.add_argument("--torch-profile-out", default="torch_kernels.json")
    p.add_argument("--no-watch", action="store_true",
                   help="no NVML thread sampling device memory in use")
    return p.parse_args(argv)


class Block(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(b, t, d)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.tok = nn.Embedding(a.vocab, a.d_model)
        self.pos = nn.Embedding(a.seq, a.d_model)
        self.drop = nn.Dropout(a.dropout)
        self.blocks = nn.ModuleList(Block(a.d_model, a.heads, a.dropout)
                                    for _ in range(a.layers))
        self.ln = nn.LayerNorm(a.d_model)
        self.head = nn.Linear(a.d_model, a.vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as GPT-2 and nanoGPT do
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.tok(idx) + self.pos(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))


class ParamHash:
    """An exact hash of every parameter's bits, computed on the device: each fp32 word,
    widened to int64, times a fixed pseudo-random odd weight for its position, summed per
    parameter (integer sums are exact and order-free, so the hash is deterministic), then
    the per-parameter sums hashed on the host. A change in any bit of any parameter changes
    its sum unless it is a multiple of 2^64 apart: the weights are odd, so a single word's
    change never is."""

    def __init__(self, params, device):
        self.params = [p for p in params]
        largest = max(p.numel() for p in self.params)
        g = torch.Generator(device="cpu").manual_seed(0x1F1B)
        w = torch.randint(-(2**62), 2**62, (largest,), generator=g, dtype=torch.int64)
        self.weights = (w | 1).to(device)

    @torch.no_grad()
    def __call__(self):
        sums = []
        for p in self.params:
            bits = p.detach().reshape(-1).view(torch.int32).to(torch.int64)
            sums.append((bits * self.weights[: bits.numel()]).sum())
        host = torch.stack(sums).cpu()  # one copy: a host synchronisation per step
        return hashlib.sha256(host.numpy().tobytes()).hexdigest()[:16]


class MemoryWatcher:
    """Samples device memory in use (NVML's used = total - free, what cuMemGetInfo says)
    on its own thread, about every 0.5 ms, and keeps the largest value since the last
    take(). NVML is not CUDA: Lynx sees none of these calls. A sampled peak can only
    under-read the true one; the trainer's own max_allocated and Lynx's accounting are
    reported beside it."""

    def __init__(self, device_index):
        import pynvml  # nvidia-ml-py

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
        self.peak = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="memwatch", daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            used = self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used
            with self.lock:
                if used > self.peak:
                    self.peak = used
            time.sleep(0.0005)

    def take(self):
        with self.lock:
            peak, self.peak = self.peak, 0
        return peak

    def close(self):
        self.stop.set()
        self.thread.join()


def torch_profile_kernels(prof, path):
    """The profiled steps' GPU kernels in launch order (correlation id), with names and
    device durations, from the chrome trace (the form every torch release writes)."""
    trace = path + ".trace.json"
    prof.export_chrome_trace(trace)
    with open(trace) as f:
        events = json.load(f)
    events = events.get("traceEvents", events) if isinstance(events, dict) else events
    kernels = [e for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"]
    kernels.sort(key=lambda e: (e.get("args", {}).get("correlation", 0), e.get("ts", 0)))
    out = [{"name": e["name"], "ts_us": e["ts"], "dur_us": e["dur"],
            "stream": e.get("args", {}).get("stream")} for e in kernels]
    with open(path, "w") as f:
        json.dump({"kernels": out}, f)
    os.unlink(trace)
    return len(out)


def main(argv=None):
    a = parse_args(argv)
    cuda = a.device == "cuda"
    rank, world = 0, 1
    if a.ddp:
        import torch.distributed as dist

        dist.init_process_group("nccl" if cuda else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(a.seed)
    # Strict: with warn_only, flash attention's backward accumulates dQ with atomics and two
    # runs differ; strict mode makes it deterministic (and keeps SDPA off cuDNN's kernels).
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False

    model = GPT(a).to(device)
    hasher = ParamHash(model.parameters(), device)
    if a.ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[local] if cuda else None)
    if a.compile:
        model = torch.compile(model)
    # foreach=True: the multi-tensor kernels real jobs use; the state appears at step 1.
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.1, foreach=True)
    data = torch.Generator(device="cpu").manual_seed(a.seed + rank)
    watcher = None
    if cuda and not a.no_watch:
        try:
            watcher = MemoryWatcher(device.index or 0)
        except Exception as e:  # no NVML: say so, go on without it
            print(f"gpt_train: no memory watcher: {e}", file=sys.stderr)
    profile_steps = None
    if a.torch_profile:
        first, last = (int(s) for s in a.torch_profile.split(":"))
        profile_steps = (first, last)

    meta = {"torch": torch.__version__, "cuda": torch.version.cuda, "compile": a.compile,
            "ddp": a.ddp, "world": world, "layers": a.layers, "d_model": a.d_model,
            "heads": a.heads, "seq": a.seq, "batch": a.batch, "vocab": a.vocab,
            "dropout": a.dropout, "steps": a.steps, "seed": a.seed,
            "params": sum(p.numel() for p in hasher.params)}
    if cuda:
        meta["device"] = torch.cuda.get_device_name(device)
        meta["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        meta["static_bytes"] = torch.cuda.memory_allocated(device)
    print(json.dumps({"meta": meta}), flush=True)

    prof = None
    for step in range(a.steps):
        if profile_steps and step == profile_steps[0]:
            from torch.profiler import ProfilerActivity, profile

            prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            prof.__enter__()
        # CLOCK_MONOTONIC, the clock of Lynx's event times: run.sh finds the step's calls
        # in Lynx's event dump between these two.
        t_start_ns = time.monotonic_ns()
        tokens = torch.randint(a.vocab, (a.batch, a.seq + 1), generator=data).to(device)
        x, y = tokens[:, :-1], tokens[:, 1:]
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
        else:
            t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            end.record()
        param_hash = hasher()  # synchronises with the device
        lossf = loss.item()
        row = {"step": step, "loss": lossf, "loss_hex": float(lossf).hex(),
               "param_hash": param_hash}
        if cuda:
            if a.sync_steps:
                torch.cuda.synchronize(device)
            row["t_start_ns"], row["t_end_ns"] = t_start_ns, time.monotonic_ns()
            free, total = torch.cuda.mem_get_info(device)
            row.update(step_ms=start.elapsed_time(end),
                       max_allocated=torch.cuda.max_memory_allocated(device),
                       allocated_before=before, in_use=total - free,
                       in_use_peak=watcher.take() if watcher else None)
        else:
            row["step_ms"] = (time.perf_counter() - t0) * 1e3
        if prof is not None:
            row["torch_profiled"] = True
        print(json.dumps(row), flush=True)
        if prof is not None and step == profile_steps[1]:
            if cuda:
                torch.cuda.synchronize(device)
            prof.__exit__(None, None, None)
            n = torch_profile_kernels(prof, a.torch_profile_out)
            print(f"gpt_train: {n} kernels in steps {profile_steps[0]}..{profile_steps[1]} "
                  f"-> {a.torch_profile_out}", file=sys.stderr)
            prof = None
    if watcher:
        watcher.close()
    if a.ddp:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
