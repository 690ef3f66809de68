#!/usr/bin/env bash
# make bench-recompute: issue 18's budget sweep. For each layout, tinytrain's own
# --recompute none, selective and full, then Lynx's recompute mode (HEU, or LYNX_PLANNER)
# at a sweep of LYNX_BUDGET values from none's peak down past full's; per rank, the last
# step's peak (simgpu's physical bytes) and virtual step time against none's, the plan's
# predicted slowdown against the achieved one (summary.<rank>.json), and whether loss and
# gradients equal none's at every step. Then the targets, each a line, and exit 1 when
# one is missed (exit 2 when a run fails):
#   identical   every Lynx run trains bit-identically to none, every step and rank;
#   holds       at every budget each rank stays within it from the first planned step on
#               (the "worst" column), or says that no plan fits and trains unchanged
#               (its peak as none's; its step waits for peers that armed a plan);
#   not slower  no rank is slower than selective or full at a budget of at least the
#               memory that baseline took on it;
#   at full     at full recompute's peak as the budget: every rank within it, at most
#               AT_FULL_MAX (1.02) of none's step;
#   at NAME     a layout's own point, e.g. the demo at 6M: at most 1.01 of none's step.
# Predicted against achieved is printed, not a target (issue 17's bench_predicted.sh).
# Layouts: LAYOUTS (default "demo pp4 mib"); budgets per layout are derived from its
# baselines' peaks (the largest over ranks, since one LYNX_BUDGET serves every rank).
# BENCH_OUT=DIR keeps every run's output there (default: a temporary directory, removed).
# About 4 minutes per 4 KiB layout and 15 for mib on two cores (tinytrain computes on the host).
set -uo pipefail
BUILD=${BUILD:-build}
TT="$BUILD/bin/tinytrain"
LYNX="$BUILD/bin/lynx"
LAYOUTS=${LAYOUTS:-demo pp4 mib}
AT_FULL_MAX=${AT_FULL_MAX:-1.02}

# A layout: tinytrain's arguments | simgpu's VMM granule | steps | its own point
# ("BUDGET:MAX_RATIO", or empty). The step measured is the last one.
#   demo  the demo job (tests/demo.sh): pp2 tp2, 4 micro-batches, 4 KiB granules;
#   pp4   four stages, one GPU each, launched as cuBLASLt and ATen do (driver-ex GEMMs)
#         on the stream handle 0, as PyTorch passes its default stream;
#   mib   activations of 0.25 to 2 MiB at simgpu's default 2 MiB granule, as on a GPU.
layout_spec() {
	case $1 in
	demo) echo "--nproc 4 --pp 2 --tp 2 --dp 1 --layers 8 --microbatches 4 --virtual-model gpt-1.3b --seq 64 --batch 4|4K|14|6M:1.01" ;;
	pp4) echo "--nproc 4 --pp 4 --tp 1 --dp 1 --layers 8 --microbatches 4 --virtual-model gpt-1.3b --seq 64 --batch 4 --launch mixed --compute-stream null|4K|14|" ;;
	mib) echo "--nproc 2 --pp 2 --tp 1 --dp 1 --layers 4 --microbatches 4 --virtual-model gpt-1.3b --seq 64 --batch 16|2M|14|" ;;
	*) return 1 ;;
	esac
}

for tool in "$TT" "$LYNX"; do
	[ -x "$tool" ] || { echo "bench_recompute: $tool not built (make BUILD=$BUILD)" >&2; exit 2; }
done
if [ -n "${BENCH_OUT:-}" ]; then
	work=$BENCH_OUT
	rm -rf "$work" && mkdir -p "$work"
else
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
fi

# A run's step lines as "run step rank loss grad_hash peak_bytes step_time_ns".
steps_tsv() { # run < jsonl
	awk -v run="$1" -F'[:,}"]+' '/"step":/ && !/"step":-1/ {
		for (i = 1; i < NF; i++) v[$i] = $(i + 1)
		print run, v["step"], v["rank"], v["loss"], v["grad_hash"], v["peak_bytes"], v["step_time_ns"]
	}'
}

# One value of a summary (cJSON prints one key per line): the number after "key":.
value() { # file key
	awk -v key="\"$2\":" '$1 == key {v = $2; sub(/,$/, "", v); print v; exit}' "$1"
}

fail() {
	echo "bench_recompute: $1; its output:" >&2
	tail -20 "$2" >&2
	exit 2
}

status=0
for layout in $LAYOUTS; do
	spec=$(layout_spec "$layout") || { echo "bench_recompute: no layout $layout" >&2; exit 2; }
	IFS='|' read -r args granule steps point <<<"$spec"
	point_name=${point%%:*}
	point_bytes=$([ -z "$point" ] || numfmt --from=iec "$point_name")
	point_max=${point#*:}
	read -ra ARGS <<<"$args"
	dir="$work/$layout"
	mkdir -p "$dir"
	export SIMGPU_VMM_GRANULARITY=$granule
	echo "== $layout: tinytrain ${ARGS[*]} --steps $steps (simgpu granule $granule)"
	for mode in none selective full; do
		LD_LIBRARY_PATH="$BUILD/simgpu" "$TT" "${ARGS[@]}" --steps "$steps" --recompute "$mode" \
			>"$dir/$mode.jsonl" 2>"$dir/$mode.log" || fail "tinytrain --recompute $mode" "$dir/$mode.log"
		steps_tsv "$mode" <"$dir/$mode.jsonl" >>"$dir/steps"
	done
	last=$((steps - 1))
	# The sweep: none's and selective's peaks, four points between selective and full
	# (closer together near full, where plans stop fitting), the layout's own point,
	# full's peak, and two below it.
	budgets=$(awk -v last="$last" -v point="$point_bytes" '
		$2 == last && $6 > peak[$1] { peak[$1] = $6 }
		END {
			n = peak["none"]; s = peak["selective"]; f = peak["full"]
			print n; print s
			print int(f + (s - f) * 2 / 3); print int(f + (s - f) / 3)
			print int(f + (s - f) / 6); print int(f + (s - f) / 12)
			if (point != "") print point
			print f; print int(f * 0.9); print int(f * 0.75)
		}' "$dir/steps" | sort -rn | uniq)
	for budget in $budgets; do
		out="$dir/lynx-$budget"
		LD_LIBRARY_PATH="$BUILD/simgpu" LYNX_BUDGET="$budget" "$LYNX" run --mode recompute \
			--out "$out" -- "$TT" "${ARGS[@]}" --steps "$steps" >"$out.jsonl" 2>"$out.log" ||
			fail "Lynx at LYNX_BUDGET=$budget" "$out.log"
		steps_tsv "lynx-$budget" <"$out.jsonl" >>"$dir/steps"
		for summary in "$out"/summary.*.json; do
			[ -e "$summary" ] || continue
			rank=${summary##*/summary.}
			rank=${rank%.json}
			echo "$budget $rank $(value "$summary" predicted_slowdown)" \
				"$(value "$summary" measured_ns) $(value "$summary" achieved_ns)" >>"$dir/predicted"
		done
		# Ranks that said no plan fits their budget, and so train unchanged.
		# (the plan line says DOES NOT FIT; the WARN line after it says why nothing is armed).
		awk -v b="$budget" '/^lynx\[rank [0-9]+\]: recompute plan .*DOES NOT FIT/ {
			r = $2; sub(/\]:$/, "", r); print b, r
		}' "$out.log" >>"$dir/unfit"
	done
	touch "$dir/predicted" "$dir/unfit"
	awk -v layout="$layout" -v last="$last" -v point_name="$point_name" \
		-v point_bytes="$point_bytes" -v point_max="$point_max" -v at_full="$AT_FULL_MAX" '
		FILENAME ~ /predicted$/ { pred[$1, $2] = $3; ach[$1, $2] = ($4 > 0 && $5 != "null") ? $5 / $4 : ""; next }
		FILENAME ~ /unfit$/ { unfit[$1, $2] = 1; next }
		{
			run = $1; step = $2; rank = $3
			if (run == "none") { loss[step, rank] = $4; hash[step, rank] = $5; npeak[step, rank] = $6 }
			else if (run ~ /^lynx-/ && ($4 != loss[step, rank] || $5 != hash[step, rank]))
				differs[run] = 1
			# The worst peak from the first planned step on (the first below none'"'"'s peak):
			# the budget holds from there, not only at the step measured.
			if (run ~ /^lynx-/ && ((run, rank) in worst || $6 < npeak[step, rank]))
				worst[run, rank] = $6 > worst[run, rank] ? $6 : worst[run, rank]
			if (step != last) next
			if (!(run in seen)) { seen[run] = 1; order[++runs] = run }
			if (!(rank in rseen)) { rseen[rank] = 1; ranks[++nranks] = rank }
			peak[run, rank] = $6; ns[run, rank] = $7
			if ($6 > bpeak[run]) bpeak[run] = $6
		}
		function ratio(run, rank) { return ns[run, rank] / ns["none", rank] }
		function miss(what) { misses[++missed] = sprintf("MISSED  %s: %s", layout, what) }
		END {
			full = bpeak["full"]
			printf "%-14s %4s %12s %12s %6s %10s %7s %9s %9s %9s\n", "run", "rank", "peak bytes", \
				"worst", "held", "step ms", "x none", "predicted", "achieved", "identical"
			for (i = 1; i <= runs; i++) {
				run = order[i]; budget = run ~ /^lynx-/ ? substr(run, 6) + 0 : 0
				for (j = 1; j <= nranks; j++) {
					r = ranks[j]
					w = (run, r) in worst ? worst[run, r] : peak[run, r]
					held = budget == 0 ? "" : unfit[budget, r] ? "unfit" : w <= budget ? "yes" : "NO"
					p = (budget, r) in pred && pred[budget, r] != "null" ? sprintf("%.3f", pred[budget, r]) : "-"
					a = (budget, r) in ach && ach[budget, r] != "" ? sprintf("%.3f", ach[budget, r]) : "-"
					printf "%-14s %4s %12d %12s %6s %10.3f %7.3f %9s %9s %9s\n", run, r, peak[run, r], \
						budget ? w : "", held, \
						ns[run, r] / 1e6, ratio(run, r), p, a, \
						run ~ /^lynx-/ ? (differs[run] ? "NO" : "yes") : ""
					if (budget == 0) continue
					if (held == "NO") miss(sprintf("%s rank %s peaks %d bytes in a planned step, over its budget", run, r, w))
					# Its memory only: its step waits for pipeline peers that did arm a plan.
					if (held == "unfit" && peak[run, r] > peak["none", r] * 1.01)
						miss(sprintf("%s rank %s said no plan fits but did not train unchanged", run, r))
					# Given the memory a baseline took on this rank, Lynx must not be slower.
					for (k = 1; k <= 2; k++) {
						base = k == 1 ? "selective" : "full"
						if (budget >= peak[base, r] && ns[run, r] > ns[base, r])
							miss(sprintf("%s rank %s is slower than %s (%.3f against %.3f of none) with its memory", \
								run, r, base, ratio(run, r), ratio(base, r)))
					}
					if (budget == full && (held != "yes" || ratio(run, r) > at_full))
						miss(sprintf("at full recompute'"'"'s peak (%d) rank %s is %s at %.3f of none (target: within, at most %s)", \
							full, r, held == "yes" ? "within" : held == "unfit" ? "without a plan" : "over", ratio(run, r), at_full))
					if (point_bytes != "" && budget == point_bytes + 0 && (held != "yes" || ratio(run, r) > point_max + 0))
						miss(sprintf("at %s rank %s is %s at %.3f of none (target: at most %s)", point_name, r, \
							held == "yes" ? "within" : "not within", ratio(run, r), point_max))
				}
				if (differs[run]) miss(sprintf("%s trains differently from none", run))
			}
			for (i = 1; i <= missed; i++) print misses[i]
			printf "%s: %d target%s missed\n", layout, missed, missed == 1 ? "" : "s"
			exit missed > 0
		}' "$dir/predicted" "$dir/unfit" "$dir/steps" || status=1
	echo
done
exit $status
