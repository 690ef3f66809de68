#!/usr/bin/env bash
# The demo: the main job on the simulated GPU. tinytrain with its own recompute baselines,
# then under liblynx.so in profiling-only mode (the profile, the summary, the what-if and
# lynx report), then in recompute mode: the plan, the executor's summary, and the table of
# peak memory and step time against tinytrain's own baselines.
set -euo pipefail
BUILD=${BUILD:-build}
TT="$BUILD/bin/tinytrain"
LYNX="$BUILD/bin/lynx"
# Sequence 64 and micro-batch 4 in the arithmetic: activations are 80% of the peak, as in
# real training (at tinytrain's defaults weights would be two thirds of it).
ARGS=(--nproc 4 --pp 2 --tp 2 --dp 1 --layers 8 --microbatches 4 --virtual-model gpt-1.3b
	--seq 64 --batch 4)
BUDGET=6M
# simgpu's VMM granule: 4 KiB instead of a GPU's 2 MiB, so that tinytrain's activations
# (16 KiB to 256 KiB) are large enough for the arena.
export SIMGPU_VMM_GRANULARITY=4K

# Prints "mode peak_bytes step_time_ns grad_hash" for rank 0's last step of a run's output.
last_step() {
	awk -v mode="$1" -v step="$2" -F'[:,}"]+' '$0 ~ "\"step\":" step ",\"rank\":0," {
		for (i = 1; i < NF; i++) v[$i] = $(i + 1)
		printf "%-28s %12s %16s %18s\n", mode, v["peak_bytes"], v["step_time_ns"], v["grad_hash"]
	}'
}

echo "== tinytrain ${ARGS[*]} --steps 2 (4 ranks on simgpu, virtual GPT-1.3B costs)"
"$TT" "${ARGS[@]}" --steps 2
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
rec="$BUILD/demo-recompute"
rm -rf "$rec"
echo "== recompute mode: lynx run --mode recompute, LYNX_BUDGET=$BUDGET: the same warm-up,"
echo "   then each rank plans from every rank's profile, and the executor evicts and brings"
echo "   back activations while training goes on (rank 0's lines)"
LD_LIBRARY_PATH="$BUILD/simgpu" LYNX_BUDGET="$BUDGET" "$LYNX" run --mode recompute --out "$rec" -- \
	"$TT" "${ARGS[@]}" --steps 14 2>&1 >"$rec.steps.jsonl" |
	grep -E '^lynx\[rank 0\]: (recompute plan|executor)'
echo
echo "== lynx plan $rec/profile.*.json --budget $BUDGET --granule 4K: the same plan offline, from"
echo "   recompute mode's profiles, which measured the link to host memory (profiling-only mode"
echo "   measures none, so its what-if keeps what cannot be replayed rather than offload it)"
"$LYNX" plan "$rec"/profile.*.json --budget "$BUDGET" --granule 4K --out "$rec/offline-plan.json" |
	head -4
echo
echo "== rank 0 (first pipeline stage), last step: peak device memory and virtual step time"
printf '%-28s %12s %16s %18s\n' run peak_bytes step_time_ns grad_hash
for mode in none selective full; do
	"$TT" "${ARGS[@]}" --steps 14 --recompute "$mode" | last_step "tinytrain --recompute $mode" 13
done | tee "$rec.baselines"
last_step "lynx recompute $BUDGET" 13 <"$rec.steps.jsonl" | tee -a "$rec.baselines"
# The headline (issue 18's targets: 1.01x none at this budget, 1.02x at full's peak; make
# bench-recompute sweeps every budget on every rank and says which targets are met). Its
# first sentence is the one the README quotes: $BUILD/demo-headline.txt keeps it for
# tests/check_docs.sh, which checks that the README says the same.
awk -v budget="$BUDGET" -v quote="$BUILD/demo-headline.txt" '{
		mode = $1 == "lynx" ? "lynx" : $3
		peak[mode] = $(NF - 2)
		ns[mode] = $(NF - 1)
	}
	END {
		mib = 1024 * 1024
		said = sprintf("%.2f MiB against %.2f MiB without recompute, -%.1f%%, in %.3fx " \
			"its step time", peak["lynx"] / mib, peak["none"] / mib,
			100 * (1 - peak["lynx"] / peak["none"]), ns["lynx"] / ns["none"])
		print said > quote
		printf "headline: Lynx at %s, rank 0: %s; %.2fx full recompute%ss peak (%.2f MiB); " \
			"selective takes %.3fx, full %.3fx\n", budget, said, peak["lynx"] / peak["full"],
			"\047", peak["full"] / mib, ns["selective"] / ns["none"], ns["full"] / ns["none"]
	}' "$rec.baselines"
echo "(the same grad_hash everywhere: recompute changes memory and time, never results;"
echo " Lynx replays the producers of what its plan recomputes, in the communication window"
echo " the plan chose or on demand, after the writers of temporaries they read; it offloads"
echo " what its plan offloads and what an examination refused; see its summary above: the"
echo " windows line says how many replays ran in windows)"
echo
echo "Open $out/trace.0.json in ui.perfetto.dev for rank 0's warm-up timeline;"
echo "$out/report.svg plots memory and stream use per rank."
