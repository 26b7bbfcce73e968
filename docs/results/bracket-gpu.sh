#!/usr/bin/env bash
# The GPU run behind the bracket's larger sample (issue "Half-precision keys and the last
# factor to the floor": the median and large k of 2^28 keys; docs/results/README.md): the
# selection and top-k tests on the GPU; step `ab`: the bench's `half` section (top-k of
# 1024 and 262 144 and the median of 2^28 bf16, f16 and f32 keys, beside the LLM rows) by
# the base binary (bench-selection-base) and the one under test (bench-selection),
# alternately, ROUNDS times (default 2); step `sweep`: the section `bracket-sweep` of the
# binary under test (the bracket's sample as the policy takes it against one held at 2048,
# in one process, GPU_SELECT_BRACKET_ROUNDS rounds).
# Binaries of the commit under test, xz-compressed in .gpu-run/ (test-select, test-top_k,
# bench-selection, and bench-selection-base for `ab`).
# Usage, from the repository root on the GPU machine: docs/results/bracket-gpu.sh [step…]
set -uo pipefail
source "$(dirname "$0")/gpu-lib.sh"
status=0
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests ab sweep)
for step in "${steps[@]}"; do
  started=$(date +%s)
  echo "=== $step"
  case "$step" in
    tests) unpack test-select; unpack test-top_k
      timeout 200 /tmp/test-select --test-threads=4 2>&1 | grep -E "^test |result|panicked|left|right|run on" || status=1
      timeout 250 /tmp/test-top_k ${TOP_K_TESTS:-sample_select} --test-threads=4 2>&1 | grep -E "^test |result|panicked|left|right" || status=1 ;;
    ab) unpack bench-selection; unpack bench-selection-base
      for round in $(seq 1 ${ROUNDS:-2}); do
        for side in base new; do
          binary=/tmp/bench-selection; [ $side = base ] && binary=/tmp/bench-selection-base
          echo "--- round $round, $side"
          GPU_SELECT_BENCH_SECTIONS=half GPU_SELECT_RESULTS_DIR=/tmp/ab-$side-$round timeout 300 $binary --bench 2>&1 \
            | grep -E "^half: (top_k|select)|panicked" || status=1
        done
      done ;;
    sweep) unpack bench-selection
      GPU_SELECT_BENCH_SECTIONS=bracket-sweep GPU_SELECT_RESULTS_DIR=/tmp/bracket-sweep timeout 400 \
        /tmp/bench-selection --bench 2>&1 | grep -E "^bracket-sweep|panicked" || status=1 ;;
  esac
  echo "($(( $(date +%s) - started )) s)"
done
exit $status
