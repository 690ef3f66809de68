#!/usr/bin/env bash
# The demo: what runs on the simulated GPU today. Later issues put tinytrain under
# liblynx here (profile, then recompute).
set -euo pipefail
BUILD=${BUILD:-build}
echo "== simgpu: a two-rank data-parallel step on the simulated GPU (virtual time)"
SIMGPU_TRACE="$BUILD/demo-trace" "$BUILD/bin/simgpu_example" 2
echo
echo "Chrome traces of the virtual timeline (open in ui.perfetto.dev):"
ls "$BUILD"/demo-trace.*.json
