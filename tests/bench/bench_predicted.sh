#!/usr/bin/env bash
# Predicted against achieved, on the demo's job (tests/demo.sh: tinytrain pp2 tp2, virtual
# GPT-1.3B costs, simgpu with 4 KiB VMM granules): recompute mode at each of BUDGETS
# ("default" is no LYNX_BUDGET: the smallest plan predicted within LYNX_MAX_SLOWDOWN, 2%),
# and, from every rank's summary.<rank>.json, the step's slowdown the plan predicted against
# the one the executor achieved (the median of its followed iterations against warm-up's
# iteration, device time), and the planned peak against the achieved one. The issue's target
# (17): predicted and achieved slowdowns within AGREE_POINTS percentage points at every
# budget; the table says where they are, and this script does not fail on it (it is not
# held yet). "followed" is the plan predicted again as the executor followed it (the summary's
# followed_slowdown: an examination's refusals offloaded instead, kept activations offloaded
# to hold the budget), "-" where it followed the plan as made. Exits 2 when a run fails.
# About 30 s per budget on two cores (20 steps: the first planned ones examine producers and
# are not timed).
set -euo pipefail
BUILD=${BUILD:-build}
TT="$BUILD/bin/tinytrain"
LYNX="$BUILD/bin/lynx"
BUDGETS=${BUDGETS:-default 8M 7M 6M}
AGREE_POINTS=${AGREE_POINTS:-2}
ARGS=(--nproc 4 --pp 2 --tp 2 --dp 1 --layers 8 --microbatches 4 --virtual-model gpt-1.3b
	--seq 64 --batch 4 --steps 20)
# EXTRA_ARGS: more tinytrain options (say --virtual-copies, offloading at the virtual model's
# copy times).
read -r -a extra <<<"${EXTRA_ARGS:-}"
ARGS+=("${extra[@]}")
export SIMGPU_VMM_GRANULARITY=4K

for tool in "$TT" "$LYNX"; do
	[ -x "$tool" ] || { echo "bench_predicted: $tool not built (make BUILD=$BUILD)" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One value of a summary (cJSON prints one key per line): the number after "key":.
value() { # file key
	awk -v key="\"$2\":" '$1 == key {v = $2; sub(/,$/, "", v); print v; exit}' "$1"
}

printf 'bench-predicted: %s, recompute mode at LYNX_BUDGET in (%s)\n' "${ARGS[*]}" "$BUDGETS"
printf '%-8s %4s %10s %10s %10s %8s %12s %12s %s\n' budget rank predicted followed achieved \
	diff "planned MiB" "achieved MiB" verdict
held=0
rows=0
for budget in $BUDGETS; do
	out="$work/$budget"
	env=(LD_LIBRARY_PATH="$BUILD/simgpu")
	[ "$budget" = default ] || env+=(LYNX_BUDGET="$budget")
	if ! env "${env[@]}" "$LYNX" run --mode recompute --out "$out" -- "$TT" "${ARGS[@]}" \
		>"$work/$budget.log" 2>&1; then
		echo "bench_predicted: the run at $budget failed; its output:" >&2
		tail -20 "$work/$budget.log" >&2
		exit 2
	fi
	# A rank that armed no plan writes no summary; its WARN line says why.
	planned=$(find "$out" -name 'summary.*.json' | wc -l)
	if [ "$planned" -lt 4 ]; then
		printf '%-8s %4s %s\n' "$budget" "-" \
			"$((4 - planned)) of 4 ranks armed no plan: $(grep -m1 -o 'no plan fits[^;]*' \
			"$work/$budget.log" || echo 'see the run')" | tee -a "$work/rows"
	fi
	for summary in "$out"/summary.*.json; do
		[ -e "$summary" ] || continue
		rank=${summary##*/summary.}
		rank=${rank%.json}
		predicted=$(value "$summary" predicted_slowdown)
		followed=$(value "$summary" followed_slowdown)
		measured=$(value "$summary" measured_ns)
		achieved=$(value "$summary" achieved_ns)
		planned=$(value "$summary" predicted_peak_bytes)
		peak=$(value "$summary" achieved_peak_bytes)
		awk -v b="$budget" -v r="$rank" -v p="$predicted" -v f="$followed" -v m="$measured" \
			-v a="$achieved" -v pl="$planned" -v pk="$peak" -v agree="$AGREE_POINTS" 'BEGIN {
			pp = 100 * (p - 1)
			fp = (f == "null" || f == "") ? "" : sprintf("%+9.2f%%", 100 * (f - 1))
			if (a == "null" || a == "" || m <= 0) {
				printf "%-8s %4s %+9.2f%% %10s %10s %8s %12.2f %12.2f %s\n", b, r, pp, fp,
					"-", "-", pl / 2^20, pk / 2^20, "no followed iteration timed"
				exit
			}
			ap = 100 * (a / m - 1)
			verdict = (pp - ap <= agree && ap - pp <= agree) ? "agree" : "apart"
			if (verdict == "apart" && fp != "" && 100 * (f - 1) - ap <= agree &&
				ap - 100 * (f - 1) <= agree)
				verdict = "agree as followed"
			printf "%-8s %4s %+9.2f%% %10s %+9.2f%% %+7.2f %12.2f %12.2f %s\n", b, r, pp,
				fp == "" ? "-" : fp, ap, pp - ap, pl / 2^20, pk / 2^20, verdict
		}' | tee -a "$work/rows"
	done
done
rows=$(grep -cv "no followed\|armed no plan" "$work/rows" || true)
held=$(grep -c " agree$" "$work/rows" || true)
followed=$(grep -c " agree as followed$" "$work/rows" || true)
printf 'predicted and achieved within %s points: %s of %s timed ranks (issue 17'"'"'s target: all)' \
	"$AGREE_POINTS" "$held" "$rows"
printf '; %s more as the executor followed the plan\n' "$followed"
