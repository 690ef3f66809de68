#!/usr/bin/env bash
# The demo: the main job on the simulated GPU. tinytrain with its own recompute baselines,
# then under liblynx.so in profiling-only mode (the profile, the summary, the what-if and
# lynx report), then in recompute mode as far as it goes (planning online; the executor
# comes with issue 7).
set -euo pipefail
BUILD=${BUILD:-build}
TT="$BUILD/bin/tinytrain"
LYNX="$BUILD/bin/lynx"
ARGS=(--nproc 4 --pp 2 --tp 2 --dp 1 --layers 8 --microbatches 4 --virtual-model gpt-1.3b)

echo "== tinytrain ${ARGS[*]} --steps 2 (4 ranks on simgpu, virtual GPT-1.3B costs)"
"$TT" "${ARGS[@]}" --steps 2
echo
echo "== its recompute baselines, step 1 of rank 0 (first pipeline stage):"
printf '%-10s %12s %16s %18s\n' recompute peak_bytes step_time_ns grad_hash
for mode in none selective full; do
	"$TT" "${ARGS[@]}" --steps 2 --recompute "$mode" |
		awk -v mode="$mode" -F'[:,}"]+' '/"step":1,"rank":0,/ {
			for (i = 1; i < NF; i++) v[$i] = $(i + 1)
			printf "%-10s %12s %16s %18s\n", mode, v["peak_bytes"], v["step_time_ns"], v["grad_hash"]
		}'
done
echo "(same grad_hash: recompute changes memory and time, never results)"
echo
out="$BUILD/demo-out"
rm -rf "$out"
echo "== the same job under liblynx.so, profiling only: lynx run --mode profile --out $out"
echo "   (warm-up learns iterations, layers, saved activations and windows, timed on the"
echo "   device; rank 0 ends with the what-if of Lynx's HEU planner)"
LD_LIBRARY_PATH="$BUILD/simgpu" "$LYNX" run --mode profile --out "$out" -- \
	"$TT" "${ARGS[@]}" --steps 8 >"$out.steps.jsonl"
echo "(training output, identical in loss and gradients to the run without Lynx: $out.steps.jsonl)"
echo
echo "== lynx report $out"
"$LYNX" report "$out"
echo
echo "== lynx plan $out/profile.*.json --budget 2150K (HEU, the plan file and its prediction)"
"$LYNX" plan "$out"/profile.*.json --budget 2150K --out "$out/plan.json" | head -4
echo
rec="$BUILD/demo-recompute"
rm -rf "$rec"
echo
echo "== recompute mode: lynx run --mode recompute (LYNX_BUDGET=2150K): the same profile, then"
echo "   each rank plans online from every rank's profile and says what it would do; the"
echo "   executor that applies the plan is not there yet, so training is unchanged"
LD_LIBRARY_PATH="$BUILD/simgpu" LYNX_BUDGET=2150K "$LYNX" run --mode recompute --out "$rec" -- \
	"$TT" "${ARGS[@]}" --steps 8 2>&1 >"$rec.steps.jsonl" | grep -E 'recompute plan|not available'
echo
echo "Open $out/trace.0.json in ui.perfetto.dev for rank 0's warm-up timeline;"
echo "$out/report.svg plots memory and stream use per rank."
