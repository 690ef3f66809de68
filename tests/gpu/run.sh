#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# The GPU suite: Lynx under a real PyTorch trainer (tests/gpu/gpt_train.py), in one call of at
# most 9 minutes on a bare GPU machine. `make gpu-test` runs it there (see docs/gpu/README.md);
# `make test` runs it here with --simgpu, on simgpu with tinytrain in place of the torch
# trainer, skipping what needs torch.
#
#   tests/gpu/run.sh [--simgpu] [--out DIR] [--bundle DIR] [--steps N] [--deadline SECONDS]
#
# Steps (each recorded, none stops the others):
#   1. environment: device, driver, CUDA, torch and NCCL versions
#   2. `lynx doctor` on the real libraries (dlsym and cuGetProcAddress)
#   3. VMM costs (vmm_probe): create/map/set-access/unmap/release at 2 MiB, 64 MiB, 1 GiB,
#      and whether a map or unmap stalls a kernel on another stream
#   4. the matrix: none, off, profile, recompute at 0.6x and 0.5x of the profiled peak;
#      eager and --compile
#   5. coverage: one profile-mode run with the event dump and torch.profiler over the same
#      steps: every class of launch seen, launch counts compared
#   6. analyze.py: every check, $OUT/results.json and $OUT/summary.md
# Writes into $OUT (the device tool's folder, else --out, else build/gpu-out): results.json,
# summary.md and at most six logs. Exit status: 0 when every check passed or was skipped
# for a stated reason, 1 when one failed, 2 for a bad command line or a missing bundle.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
simgpu=0
out=${OUT:-}
bundle=${LYNX_GPU_BUNDLE:-$root/build/gpu}
steps=
deadline=330

usage() {
	sed -n '2,/^set -uo/p' "$0" | sed -e '/^set -uo/d' -e 's/^# \{0,1\}//'
	exit "${1:-0}"
}

while [ $# -gt 0 ]; do
	case $1 in
	--simgpu) simgpu=1 ;;
	--out) out=$2; shift ;;
	--out=*) out=${1#*=} ;;
	--bundle) bundle=$2; shift ;;
	--bundle=*) bundle=${1#*=} ;;
	--steps) steps=$2; shift ;;
	--steps=*) steps=${1#*=} ;;
	--deadline) deadline=$2; shift ;;
	--deadline=*) deadline=${1#*=} ;;
	-h | --help) usage 0 ;;
	*) echo "run.sh: unknown argument '$1'" >&2; usage 2 >&2 ;;
	esac
	shift
done
out=${out:-$root/build/gpu-out}
lynx=$bundle/bin/lynx
probe=$bundle/bin/vmm_probe
for f in "$lynx" "$bundle/lib/liblynx.so" "$probe"; do
	if [ ! -x "$f" ] && [ ! -f "$f" ]; then
		echo "run.sh: $f is missing: build the bundle first (make gpu-bundle)" >&2
		exit 2
	fi
done
mkdir -p "$out" || exit 2
work=$(mktemp -d "${TMPDIR:-/tmp}/lynx-gpu.XXXXXX") || exit 2
started=$SECONDS
log=$work/run.log
exec > >(tee -a "$log") 2>&1

say() { printf '[%4ds] %s\n' $((SECONDS - started)) "$*"; }
left() { echo $((deadline - (SECONDS - started))); }

# One JSON line per step of the work, for analyze.py: name, status and what it wrote.
record() { # record NAME KEY=VALUE...
	local name=$1 kv sep=
	shift
	{
		printf '{"name":"%s"' "$name"
		for kv in "$@"; do
			printf ',"%s":' "${kv%%=*}"
			case ${kv#*=} in
			-* | [0-9]* | null | true | false) printf '%s' "${kv#*=}" ;;
			*) printf '"%s"' "${kv#*=}" ;;
			esac
		done
		printf '}\n'
	} >>"$work/steps.jsonl"
}

# Runs a command with a time limit that leaves `reserve` seconds of the deadline for what
# follows; records how it went. run_step NAME LIMIT STDOUT STDERR -- COMMAND...
run_step() {
	local name=$1 limit=$2 stdout=$3 stderr=$4 reserve=45 t0=$SECONDS rc
	shift 5
	local room=$(($(left) - reserve))
	if [ "$room" -lt 20 ]; then
		say "$name: skipped, ${room}s left before the deadline"
		record "$name" status=skipped why="out of time" seconds=0
		return 0
	fi
	[ "$limit" -gt "$room" ] && limit=$room
	say "$name (limit ${limit}s): $*"
	timeout -k 10 "$limit" "$@" >"$stdout" 2>"$stderr"
	rc=$?
	local secs=$((SECONDS - t0)) status=ok
	[ $rc -ne 0 ] && status=failed
	[ $rc -eq 124 ] || [ $rc -eq 137 ] && status=timeout
	say "$name: $status (exit $rc, ${secs}s)"
	record "$name" status=$status rc=$rc seconds=$secs stdout="$stdout" stderr="$stderr" \
		"${extra_fields[@]}"
	return 0
}
extra_fields=()

# ---- 1. The environment ------------------------------------------------------------------
say "work directory $work, results in $out"
if [ $simgpu -eq 1 ]; then
	export LD_LIBRARY_PATH="$root/build/simgpu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	# tinytrain's activations are 16-256 KiB: simgpu's granule is made 4 KiB, as in the demo.
	export SIMGPU_VMM_GRANULARITY=4K
	steps=${steps:-20}
	printf '{"simgpu":true,"device":"simgpu","uname":"%s"}\n' "$(uname -srm)" >"$work/env.json"
else
	steps=${steps:-30}
	export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
	export TORCHINDUCTOR_CACHE_DIR=$work/cache/inductor TRITON_CACHE_DIR=$work/cache/triton
	python3 - >"$work/env.json" 2>"$work/env.err" <<'EOF'
import glob, json, os, platform, subprocess
env = {"simgpu": False, "uname": " ".join(platform.uname()[:3]), "python": platform.python_version()}
try:
    q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                        "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    env["nvidia_smi"] = q.stdout.strip()
except Exception as e:
    env["nvidia_smi"] = f"failed: {e}"
try:
    import torch
    env.update(torch=torch.__version__, torch_cuda=torch.version.cuda,
               device=torch.cuda.get_device_name(0),
               nccl=".".join(map(str, torch.cuda.nccl.version())),
               capability=".".join(map(str, torch.cuda.get_device_capability(0))))
    # Where torch's CUDA libraries are: lynx doctor must load the ones the trainer loads.
    libs = {}
    roots = [os.path.dirname(torch.__file__)] + [os.path.join(p, "nvidia") for p in
             __import__("site").getsitepackages()]
    for name in ("libcudart.so.13", "libnccl.so.2", "libcublas.so.13"):
        for r in roots:
            hits = glob.glob(os.path.join(r, "**", name), recursive=True)
            if hits:
                libs[name] = hits[0]
                break
    env["libraries"] = libs
    import triton
    env["triton"] = triton.__version__
except Exception as e:
    env["torch_error"] = repr(e)
print(json.dumps(env))
EOF
	# The directories of libcudart and libnccl that torch uses, for lynx doctor.
	libdirs=$(python3 -c 'import json,os,sys; e=json.load(open(sys.argv[1]))
print(":".join(sorted({os.path.dirname(p) for p in e.get("libraries",{}).values()})))' \
		"$work/env.json" 2>/dev/null)
fi
say "environment: $(cat "$work/env.json")"

# ---- 2. lynx doctor ----------------------------------------------------------------------
if [ $simgpu -eq 1 ]; then
	run_step doctor 60 "$work/doctor.out" "$work/doctor.err" -- "$lynx" doctor --require-nccl
else
	run_step doctor 60 "$work/doctor.out" "$work/doctor.err" -- \
		env LD_LIBRARY_PATH="${libdirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
		"$lynx" doctor --require-nccl
fi
cat "$work/doctor.out" "$work/doctor.err"

# ---- 3. VMM costs ------------------------------------------------------------------------
if [ $simgpu -eq 1 ]; then
	# simgpu's times are its own code's host time, not a GPU's: this checks the probe only.
	run_step vmm 60 "$work/vmm.json" "$work/vmm.err" -- "$probe" --sizes 2M,64M,1G \
		--repeat-scale 0.2 --spin-ms 20
else
	run_step vmm 90 "$work/vmm.json" "$work/vmm.err" -- "$probe" --sizes 2M,64M,1G
fi
cat "$work/vmm.err"

# ---- 4. The matrix -----------------------------------------------------------------------
# The trainer's command for one variant (eager or compile), in the array `trainer`.
trainer_for() { # trainer_for VARIANT STEPS EXTRA_ARGS...
	local variant=$1 n=$2
	shift 2
	if [ $simgpu -eq 1 ]; then
		trainer=("$root/build/bin/tinytrain" --nproc 4 --pp 2 --tp 2 --dp 1 --layers 4
			--microbatches 4 --seq 64 --batch 4 --steps "$n")
		return
	fi
	trainer=(python3 -m torch.distributed.run --standalone --nproc_per_node=1
		"$here/gpt_train.py" --ddp --steps "$n" "$@")
	[ "$variant" = compile ] && trainer+=(--compile)
}

variants=(eager compile)
[ $simgpu -eq 1 ] && variants=(eager)
# Every cell, torch's included, allocates one tensor at a time (what lynx run sets), so
# that the step times compare the same allocator.
export PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync

# The device memory in use at the profile cell's peak: the largest in_use_peak (torch) or
# peak_bytes (tinytrain) over its steps and ranks; empty when it has none.
profiled_peak() {
	python3 -c 'import json, sys
peak = 0
for line in open(sys.argv[1]):
    try:
        row = json.loads(line)
    except ValueError:
        continue
    peak = max(peak, row.get("in_use_peak") or 0, row.get("peak_bytes") or 0)
print(peak or "")' "$1" 2>/dev/null
}

run_variant() { # run_variant eager|compile
	local variant=$1 limit cell name peak share budget
	limit=90
	for cell in none off profile; do
		name=$variant-$cell
		extra_fields=(variant=$variant cell=$cell)
		if [ $cell = none ]; then
			trainer_for "$variant" "$steps" --torch-profile 20:20 \
				--torch-profile-out "$work/$name.torch_kernels.json"
			run_step "$name" $limit "$work/$name.jsonl" "$work/$name.err" -- "${trainer[@]}"
		else
			trainer_for "$variant" "$steps"
			run_step "$name" $limit "$work/$name.jsonl" "$work/$name.err" -- \
				env LYNX_LOG=info "$lynx" run --mode $cell --out "$work/$name.lynx" -- \
				"${trainer[@]}"
		fi
		limit=90
	done
	peak=$(profiled_peak "$work/$variant-profile.jsonl")
	for share in 60 50; do
		name=$variant-recompute$share
		extra_fields=(variant=$variant cell=recompute$share)
		if [ -z "$peak" ]; then
			say "$name: skipped: the profile cell measured no peak"
			record "$name" status=skipped why="the profile cell measured no peak" \
				"${extra_fields[@]}"
			continue
		fi
		budget=$((peak * share / 100))
		extra_fields+=(budget=$budget profiled_peak=$peak)
		trainer_for "$variant" "$steps"
		run_step "$name" $limit "$work/$name.jsonl" "$work/$name.err" -- \
			env LYNX_LOG=info LYNX_BUDGET="$budget" "$lynx" run --mode recompute \
			--out "$work/$name.lynx" -- "${trainer[@]}"
	done
	extra_fields=()
}

# ---- 5. Coverage -------------------------------------------------------------------------
# One profile-mode run that dumps every event, with a host synchronisation ending each step
# and torch.profiler over steps 6 and 7: the launches Lynx saw between the trainer's host
# times of those steps (CLOCK_MONOTONIC, as Lynx's) are compared with the kernels
# torch.profiler saw. Compiled, so that Triton kernels are among them; nine steps, since
# only steps 6 and 7 are compared.
run_coverage() {
	if [ $simgpu -eq 1 ]; then
		trainer_for eager 6
	else
		trainer_for compile 9 --sync-steps --torch-profile 6:7 \
			--torch-profile-out "$work/coverage.torch_kernels.json"
	fi
	run_step coverage 150 "$work/coverage.jsonl" "$work/coverage.err" -- \
		env LYNX_EVENTS="$work/coverage.events" "$lynx" run --mode profile \
		--out "$work/coverage.lynx" -- "${trainer[@]}"
}

# The eager trainer's whole event dump (eight steps, profile mode, a host synchronisation
# ending each step), returned compressed: `lynx profile` rebuilds its profile here, and the
# shim's warm-up can be worked on offline with the real trainer's calls.
run_eager_events() {
	trainer_for eager 8 $([ $simgpu -eq 1 ] || echo --sync-steps)
	run_step eager-events 60 "$work/eager-events.jsonl" "$work/eager-events.err" -- \
		env LYNX_LOG=info LYNX_EVENTS="$work/eager.events" "$lynx" run --mode profile \
		--out "$work/eager-events.lynx" -- "${trainer[@]}"
}

# Eager cells first, then the eager event dump and the coverage run (it compiles, filling the
# caches), then the compiled cells: what the deadline cuts is the least informative.
run_variant eager
run_eager_events
run_coverage
[ $simgpu -eq 1 ] || run_variant compile

# ---- 6. Analysis and the files that come back ---------------------------------------------
say "analysis"
python3 "$here/analyze.py" --work "$work" --out "$out" $([ $simgpu -eq 1 ] && echo --simgpu)
status=$?

# At most six files besides results.json and summary.md: run.log (this script's log, with
# doctor's and vmm_probe's output), one log per variant with every cell's stderr (the
# coverage run's in the compiled one's, or the eager one's on simgpu), the Lynx output
# directories (profiles, plans, summaries; no event dumps) as one archive, and two event
# dumps.
coverage_variant=${variants[${#variants[@]} - 1]}
for variant in "${variants[@]}"; do
	for f in "$work/$variant"-*.err $([ "$variant" = "$coverage_variant" ] &&
		echo "$work/coverage.err"); do
		[ -f "$f" ] && { echo "===== $(basename "$f")"; tail -c 400000 "$f"; }
	done >"$out/$variant.log"
done
# The trainer's event dumps (its process: the largest file of each run), compressed, each in
# a file of its own: with the launches' parameters, which the traces lack, `lynx profile`
# rebuilds lifetimes and saved activations from them here, and `lynx plan` plans the real
# trainer offline. A file that comes back may hold 16 MiB; a larger dump stays behind, and
# the log says so.
return_dump() { # return_dump STEM NAME
	local dump
	dump=$(ls -S "$work/$1".events.*.jsonl 2>/dev/null | head -1)
	[ -n "$dump" ] || return 0
	gzip -c "$dump" >"$out/$2"
	if [ "$(stat -c %s "$out/$2")" -gt 15000000 ]; then
		say "the $1 run's event dump is over 15 MB compressed: not returned"
		rm -f "$out/$2"
	fi
}
return_dump coverage coverage-trainer.events.jsonl.gz
return_dump eager eager-trainer.events.jsonl.gz
(cd "$work" && tar -czf "$out/lynx-out.tar.gz" --exclude='*.events*' --exclude=cache \
	./*.lynx vmm.json env.json steps.jsonl ./*.jsonl ./*.torch_kernels.json 2>/dev/null)
if [ "$(stat -c %s "$out/lynx-out.tar.gz" 2>/dev/null || echo 0)" -gt 15000000 ]; then
	(cd "$work" && tar -czf "$out/lynx-out.tar.gz" --exclude='*.events*' --exclude=cache \
		--exclude='trace.*' --exclude='*.torch_kernels.json' ./*.lynx vmm.json env.json \
		steps.jsonl ./*.jsonl 2>/dev/null)
fi
say "done: $out (exit $status)"
cp "$log" "$out/run.log"
[ -n "${KEEP_WORK:-}" ] || rm -rf "$work"
exit $status
