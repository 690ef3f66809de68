#!/usr/bin/env bash
# The demo: the main job on the simulated GPU. Today that is tinytrain with its own
# recompute baselines; later issues put it under liblynx (profile, then recompute).
set -euo pipefail
BUILD=${BUILD:-build}
TT="$BUILD/bin/tinytrain"
ARGS=(--nproc 4 --pp 2 --tp 2 --dp 1 --layers 8 --microbatches 4 --steps 2
	--virtual-model gpt-1.3b)

echo "== tinytrain ${ARGS[*]} (4 ranks on simgpu, virtual GPT-1.3B costs)"
"$TT" "${ARGS[@]}"
echo
echo "== its recompute baselines, step 1 of rank 0 (first pipeline stage):"
printf '%-10s %12s %16s %18s\n' recompute peak_bytes step_time_ns grad_hash
for mode in none selective full; do
	"$TT" "${ARGS[@]}" --recompute "$mode" |
		awk -v mode="$mode" -F'[:,}"]+' '/"step":1,"rank":0,/ {
			for (i = 1; i < NF; i++) v[$i] = $(i + 1)
			printf "%-10s %12s %16s %18s\n", mode, v["peak_bytes"], v["step_time_ns"], v["grad_hash"]
		}'
done
echo "(same grad_hash: recompute changes memory and time, never results)"
echo
echo "== simgpu's two-rank example, with a Chrome trace of its virtual timeline"
rm -f "$BUILD"/demo-trace.*.json
SIMGPU_TRACE="$BUILD/demo-trace" "$BUILD/bin/simgpu_example" 2
ls "$BUILD"/demo-trace.*.json
