#!/usr/bin/env bash
# The planners side by side, from one run of `lynx sim` per job (every plan replayed by the
# independent checker, whose numbers it prints): the GPT 1.3B-20B presets and Llama shapes
# (llama-7b and llama3-8b with flash attention, llama3-8b with GQA, llama-7b+unfused with
# Megatron's unfused attention), and gpt-13b and llama-7b under interleaved 1F1B with two
# virtual stages, on a100-nvlink and a100-pcie, t=8 p=4, at budgets that force
# recomputation (SHARES of the way from full recomputation's largest stage peak to no
# recomputation's). It reports every planner's step
# time and speedup over full, HEU's average speedup over full, every case where HEU is slower
# than a baseline that fits, HEU against OPT where OPT's MILP finished, and HEU's search time
# for one 48-layer stage (gpt-22b, p=1: the best of HEU_RUNS, as the machine is shared).
# Targets (issue 6): HEU is never slower than a baseline that fits (beyond TOL, relative;
# the baselines are Megatron's, Checkmate and DTR: OPT and mixed build on HEU), and mixed,
# HEU with offloads, never slower than Kuaishou's offloading;
# HEU searches a 48-layer stage in <= 10 ms; every plan is confirmed by the checker. Exits 1
# when one is missed, 2 when lynx sim fails. About 20 s on two cores with OPT_LIMIT=1.
set -euo pipefail
BUILD=${BUILD:-build}
LYNX="$BUILD/bin/lynx"
CLUSTERS=${CLUSTERS:-a100-nvlink a100-pcie}
# A model is a preset, with +unfused for --attention unfused and +vpN for N virtual pipeline
# stages (interleaved 1F1B).
MODELS=${MODELS:-gpt-1.3b gpt-2.7b gpt-6.7b gpt-13b gpt-20b llama-7b llama-7b+unfused llama3-8b gpt-13b+vp2 llama-7b+vp2}
TP=${TP:-8}
PP=${PP:-4}
SHARES=${SHARES:-0.25 0.5}
OPT_LIMIT=${OPT_LIMIT:-1} # seconds for OPT's whole search (lynx sim --time-limit)
HEU_RUNS=${HEU_RUNS:-5}
HEU_TARGET_MS=${HEU_TARGET_MS:-10}
TOL=${TOL:-1e-9} # relative: what counts as "slower" beyond floating-point noise

[ -x "$LYNX" ] || { echo "bench_policy: $LYNX not built (make BUILD=$BUILD lynx)" >&2; exit 2; }
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT

# lynx sim's arguments for model $1 (a preset, then +unfused or +vpN).
model_args() {
	local args="--model ${1%%+*}" rest="$1" mod
	while [[ "$rest" == *+* ]]; do
		rest=${rest#*+}
		mod=${rest%%+*}
		case "$mod" in
		unfused) args+=" --attention unfused" ;;
		vp*) args+=" --vp ${mod#vp}" ;;
		*) echo "bench_policy: unknown model modifier '+$mod'" >&2; return 1 ;;
		esac
	done
	echo "$args"
}

# The budget `share` of the way from full's largest peak to none's, for every model of
# MODELS on cluster $1 with the job's t and p: "model budget" lines.
budgets() { # cluster share [tp pp]
	for model in $MODELS; do
		# shellcheck disable=SC2046 # model_args is meant to split
		"$LYNX" sim $(model_args "$model") --cluster "$1" --tp "${3:-$TP}" \
			--pp "${4:-$PP}" --planners none --csv |
			awk -F, -v share="$2" -v model="$model" '$10 == "none" {none = $17}
				$10 == "full" {full = $17}
				END {printf "%s %.0f\n", model, full + (none - full) * share}'
	done
}

# lynx sim's JSON of one job (cJSON prints one key per line) as tab-separated rows:
# planner step speedup fits search gap note checked, with "-" for a missing gap or note.
json_rows() {
	awk 'function val(line) {sub(/^[^:]*:[ \t]*/, "", line); sub(/,$/, "", line)
			gsub(/^"|"$/, "", line); return line}
		function emit() {if (p != "") printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			p, step, speed, fits, search, gap, note, checked}
		/"planner":/ {emit(); p = val($0); gap = "-"; note = "-"}
		/"step_time_s":/ {step = val($0)}
		/"speedup_vs_full":/ {speed = val($0)}
		/"fits":/ {fits = val($0)}
		/"search_time_s":/ {search = val($0)}
		/"gap":/ {gap = val($0)}
		/"note":/ {note = val($0)}
		/"checked":/ {checked = val($0)}
		END {emit()}'
}

failed_sim=0
for cluster in $CLUSTERS; do
	for share in $SHARES; do
		while read -r model budget; do
			# shellcheck disable=SC2046 # model_args is meant to split
			if ! out=$("$LYNX" sim $(model_args "$model") --cluster "$cluster" --tp "$TP" \
				--pp "$PP" --budget "$budget" --time-limit "$OPT_LIMIT" --json); then
				echo "bench_policy: lynx sim failed on $model $cluster" >&2
				failed_sim=1
				continue
			fi
			json_rows <<<"$out" | sed "s/^/$cluster\t$model\t$share\t$budget\t/" >>"$rows"
		done < <(budgets "$cluster" "$share")
	done
done

# HEU's search time on one 48-layer stage, at the halfway budget: "cluster best median" (ms).
heu_times=""
for cluster in $CLUSTERS; do
	budget=$(MODELS=gpt-22b budgets "$cluster" 0.5 8 1 | awk '{print $2}')
	times=$(for _ in $(seq "$HEU_RUNS"); do
		"$LYNX" sim --model gpt-22b --cluster "$cluster" --tp 8 --pp 1 --budget "$budget" \
			--planners heu --csv | awk -F, '$10 == "heu" {print $15 * 1e3}'
	done | sort -g)
	heu_times+="$cluster $(head -1 <<<"$times") $(awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}' <<<"$times")"$'\n'
done

awk -F'\t' -v tol="$TOL" -v target="$HEU_TARGET_MS" -v tp="$TP" -v pp="$PP" \
	-v limit="$OPT_LIMIT" -v shares="$SHARES" -v heu_times="$heu_times" -v failed_sim="$failed_sim" '
	{
		job = $1 SUBSEP $2 SUBSEP $3
		if (!(job in seen)) {seen[job] = 1; jobs[++n_jobs] = job; budget[job] = $4}
		pl = $5
		if (!(pl in pl_seen)) {pl_seen[pl] = 1; planners[++n_pl] = pl}
		step[job, pl] = $6; speed[job, pl] = $7; fits[job, pl] = $8 == "true"
		gap[job, pl] = $10; note[job, pl] = $11
		if ($12 != "true") unchecked[++n_unchecked] = pl " on " $2 " " $1 " share " $3
	}
	END {
		status = failed_sim ? 2 : 0
		printf "bench-policy: lynx sim, t=%s p=%s, 4p micro-batches, budgets at %s of the way from full to none; OPT --time-limit %s\n", tp, pp, shares, limit
		printf "step time in s and speedup over full per planner; OOM: does not fit the budget\n\n"
		printf "%-11s %-16s %5s %7s", "cluster", "model", "share", "GiB"
		for (i = 1; i <= n_pl; i++) printf " | %-15s", planners[i]
		printf "\n"
		for (k = 1; k <= n_jobs; k++) {
			job = jobs[k]; split(job, f, SUBSEP)
			printf "%-11s %-16s %5s %7.2f", f[1], f[2], f[3], budget[job] / 2^30
			for (i = 1; i <= n_pl; i++) {
				pl = planners[i]
				if (!((job, pl) in step)) {printf " | %-15s", "-"; continue}
				printf " | %7.4f %5.2fx%s", step[job, pl], speed[job, pl],
					fits[job, pl] ? " " : "!"
			}
			printf "\n"
		}
		printf "(! = OOM)\n\n"

		# HEU against full, against every baseline that fits, and against OPT.
		for (k = 1; k <= n_jobs; k++) {
			job = jobs[k]; split(job, f, SUBSEP); c = f[1]
			h = step[job, "heu"]
			sum[c] += step[job, "full"] / h; cnt[c]++
			sum_all += step[job, "full"] / h; cnt_all++
			if (!fits[job, "heu"]) lost[++n_lost] = sprintf("heu does not fit: %s %s share %s", f[2], c, f[3])
			for (i = 1; i <= n_pl; i++) {
				pl = planners[i]
				# OPT and mixed start from the HEU plan: not baselines. HEU keeps or
				# rebuilds, so offloading is measured against mixed, which offloads.
				if (pl == "heu" || pl == "opt" || pl == "mixed" || !fits[job, pl]) continue
				who = pl == "offload" ? "mixed" : "heu"
				mine = step[job, who]
				if (!fits[job, who] || mine > step[job, pl] * (1 + tol))
					lost[++n_lost] = sprintf("%s %.6f s%s > %s %.6f s (+%.4f%%): %s %s share %s", who, mine, fits[job, who] ? "" : " (OOM)", pl, step[job, pl], 100 * (mine / step[job, pl] - 1), f[2], c, f[3])
			}
			o = step[job, "opt"]
			if ((job, "opt") in step && (gap[job, "opt"] != "-" || note[job, "opt"] ~ /finds HEU.s plan better/)) {
				n_opt++; d = h / o - 1; opt_sum += d; if (d > opt_max) opt_max = d
				if (gap[job, "opt"] != "-" && gap[job, "opt"] > gap_max) gap_max = gap[job, "opt"]
			} else if ((job, "opt") in step) {
				opt_missing[++n_missing] = sprintf("%s %s share %s (%s)", f[2], c, f[3], note[job, "opt"])
			}
		}
		printf "HEU speedup over full, average:"
		for (c in cnt) printf " %s %.3fx (%d jobs);", c, sum[c] / cnt[c], cnt[c]
		printf " all %.3fx\n", cnt_all ? sum_all / cnt_all : 0
		if (n_lost) {
			printf "HEU (mixed against offload) slower than a baseline that fits (tolerance %s): %d case(s)  TARGET MISSED\n", tol, n_lost
			for (i = 1; i <= n_lost; i++) printf "  %s\n", lost[i]
			status = status ? status : 1
		} else {
			printf "HEU (mixed against offload) slower than a baseline that fits (tolerance %s): never  ok\n", tol
		}
		if (n_opt)
			printf "HEU vs OPT where OPT finished (%d of %d jobs): HEU slower by %.4f%% on average, %.4f%% at most; OPT gap <= %.2f%%\n", n_opt, n_jobs, 100 * opt_sum / n_opt, 100 * opt_max, 100 * gap_max
		else
			printf "HEU vs OPT: OPT finished on no job\n"
		for (i = 1; i <= n_missing; i++) printf "  OPT did not finish: %s\n", opt_missing[i]
		n_h = split(heu_times, lines, "\n")
		for (i = 1; i <= n_h; i++) {
			if (split(lines[i], t, " ") < 3) continue
			verdict = t[2] <= target ? "ok" : "TARGET MISSED"
			if (t[2] > target) status = status ? status : 1
			printf "HEU search, one 48-layer stage (gpt-22b t=8 p=1, %s): best %.2f ms, median %.2f ms (target <= %s ms)  %s\n", t[1], t[2], t[3], target, verdict
		}
		if (n_unchecked) {
			printf "plans the checker does not confirm: %d  TARGET MISSED\n", n_unchecked
			for (i = 1; i <= n_unchecked; i++) printf "  %s\n", unchecked[i]
			status = status ? status : 1
		} else {
			printf "every plan confirmed by the checker  ok\n"
		}
		exit status
	}' "$rows"
