#!/usr/bin/env bash
# Runs every test binary given, then the end-to-end checks; prints each CMocka summary
# and a final count. Exits non-zero if anything failed.
set -u
BUILD=${BUILD:-build}
# Under ASan, its dlopen interceptor becomes the caller, so libcudart's RUNPATH is not
# searched for libcuda.so.1: name the directory explicitly.
# A preloaded liblynx.so comes before the sanitizer runtime the programs link: ASan's
# check of that order must be off (the runtime is still loaded before any allocation).
if [ -n "${SAN:-}" ]; then
	export LD_LIBRARY_PATH="$BUILD/simgpu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export ASAN_OPTIONS="verify_asan_link_order=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
fi
passed=0
failed=0
failures=()
# Scratch directories the test binaries keep when something failed (tests/harness.h) are
# the ones newer than this mark.
started_mark=$(mktemp)
trap 'rm -f "$started_mark"' EXIT

run() {
	local name=$1
	shift
	local started=$SECONDS
	echo "=== $name"
	if "$@"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		failures+=("$name")
	fi
	# Where CI's time goes (it must stay under 25 minutes for all three passes).
	echo "--- $name: $((SECONDS - started)) s"
}

# The end-to-end binaries take minutes under a sanitizer (each runs tinytrain's ranks a dozen
# times): there, only the tests named here run (LYNX_TESTS, tests/harness.h), those whose paths
# the binary's other tests share: under ASan, a fork after the plan is armed and every reason
# to do nothing, and test_executor's run but for its packs at a 256 KiB granule (three runs of
# a larger model, half its time; packs at 4 KiB run in its other tests) and its pp4 run at a
# larger size (keep_budget()'s other half runs in its plan-low test); under TSan, where one
# tinytrain run takes a minute, the search thread beside the recorder's and the executor's.
# CI's three passes must take under 25 minutes in all.
subset_under() { # subset_under SANITIZER BINARY: the tests to run, or nothing for all
	case "$1:$2" in
	address:test_executor)
		tr -d ' \t\n' <"$(dirname "$0")/shim/test_executor.c" | grep -o 'cmocka_unit_test(test_[a-zA-Z0-9_]*' |
			sed 's/cmocka_unit_test(//' |
			grep -vx -e test_activations_below_a_granule_are_evicted_in_packs \
				-e test_window_rebuilds_ahead_of_use_move_to_it_to_hold_the_budget |
			paste -sd, -
		;;
	address:test_recompute_targets)
		echo test_every_reason_to_do_nothing_is_one_warn_line_per_rank,test_each_rank_plans_alone_without_a_shared_directory
		;;
	thread:test_executor)
		echo test_a_search_runs_off_the_trainers_thread
		;;
	esac
}
for t in "$@"; do
	name=$(basename "$t")
	subset=$([ -n "${SAN:-}" ] && subset_under "${SAN%%,*}" "$name")
	run "$name" env ${subset:+LYNX_TESTS=$subset} timeout 300 "$t"
done

# simgpu's example: two ranks, identical bytes on every run (results and virtual times).
example_is_deterministic() {
	local first second
	first=$("$BUILD/bin/simgpu_example" 2) || return 1
	second=$("$BUILD/bin/simgpu_example" 2) || return 1
	echo "$first"
	[ "$first" = "$second" ] || { echo "example output differs between runs"; return 1; }
}
run simgpu_example_deterministic example_is_deterministic
run check_docs tests/check_docs.sh
# The GPU suite's orchestration on simgpu (tests/gpu/run.sh --simgpu): its steps, checks and
# results.json, with tinytrain in place of the torch trainer. Not under the sanitizers: it
# runs the same liblynx.so paths as the end-to-end tests above, at twice their cost.
gpu_suite_on_simgpu() {
	local out="$BUILD/gpu-dry"
	rm -rf "$out"
	tests/gpu/run.sh --simgpu --bundle "$BUILD/gpu" --out "$out" || return 1
	python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); sys.exit(r["failed"] != 0 or r["passed"] < 10)' "$out/results.json"
}
# The shape matrix's quick cells (make shapes runs them all): Lynx on tinytrain with GPipe,
# interleaved 1F1B, one micro-batch, DDP buckets, lazy optimizer state, the Ex launch paths
# and a module of kernels per layer (torch.compile under DDP), profile and recompute checked against the truth; the schedules at their smallest
# (2 micro-batches of GPipe, 3 stages interleaved), 150 s in all. Not under the sanitizers
# either.
shapes_quick() {
	tests/shapes/matrix.py --build "$BUILD" --quick --repeat 2 --repeat-cells 1
}
# The fault sweep's quick points (make fault-sweep runs them all): Lynx's own VMM calls, its
# restore and replay copies, a launch and a collective failed mid-job; each run trains
# identically or fails as the trainer alone would. Not under the sanitizers either.
fault_sweep_quick() {
	tests/faults/sweep.py --build "$BUILD" --quick
}
if [ -z "${SAN:-}" ]; then
	run gpu_suite_on_simgpu gpu_suite_on_simgpu
	run shapes_quick shapes_quick
	run fault_sweep_quick fault_sweep_quick
fi

# The warnings of the runs in the scratch directories failed binaries kept, briefly:
# CI shows the end of this output, and a failure seen once needs its evidence there.
kept_evidence() {
	local dir
	find "$BUILD" -maxdepth 1 -type d -name '*.[0-9]*' -newer "$started_mark" |
		sort | while read -r dir; do
		echo "kept: $dir"
		grep -H -m 3 -E 'WARN|error|rror:' "$dir"/run-*.stderr 2>/dev/null |
			sed "s|^$dir/||" | cut -c 1-240 | tail -n 12
	done | head -n 40
}

echo "=== summary"
if [ "$failed" -ne 0 ]; then
	kept_evidence
fi
echo "test binaries and checks: $passed passed, $failed failed"
if [ "$failed" -ne 0 ]; then
	printf 'failed: %s\n' "${failures[@]}"
	exit 1
fi
