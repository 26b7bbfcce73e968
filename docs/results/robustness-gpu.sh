#!/usr/bin/env bash
# The GPU run behind issue 36's pieces done on 2026-11-25 (docs/results/README.md): the
# selection tests (the fallback when samples keep missing; 10^4 approximate selections
# whose window pass's last block weighs the others' totals, after the fence fix), the
# property test of the API, and an A/B of the selection cases against the bench binary
# before the fence fix (.gpu-run/bench-pre.xz, main 5388a78). Binaries of the commit under
# test, xz-compressed in .gpu-run/.
# Usage, from the repository root on the GPU machine: docs/results/robustness-gpu.sh [step…]
set -uo pipefail
source "$(dirname "$0")/gpu-lib.sh"
status=0
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests ab)
for step in "${steps[@]}"; do
  started=$(date +%s)
  echo "=== $step"
  case "$step" in
    tests) for t in test-select test-properties; do unpack $t; echo "--- $t"
             PROPTEST_CASES=${PROPTEST_CASES:-256} /tmp/$t --test-threads=1 2>&1 | tail -4 || status=1; done ;;
    sanitize) unpack test-select
      /usr/local/cuda/bin/compute-sanitizer --tool memcheck /tmp/test-select window_answers --test-threads=1 2>&1 | tail -3
      /usr/local/cuda/bin/compute-sanitizer --tool racecheck /tmp/test-select window_answers --test-threads=1 2>&1 | tail -3 ;;
    ab) unpack bench-selection; unpack bench-pre
      filter='approx f32 n=2\^28 buckets=(256|1024) \(|sample f32 n=2\^28 k=134217728 uniform|read_floor'
      for round in $(seq "${ROUNDS:-2}"); do
        for side in pre selection; do
          echo "--- round $round, $side"
          GPU_SELECT_BENCH_SECTIONS=sizes GPU_SELECT_RESULTS_DIR=/tmp/ab-$side-$round \
            /tmp/bench-$side --bench "$filter" > /tmp/ab-$side-$round.log 2>&1 || echo "bench failed: see log"
          grep -E "^\| (select|select_approx|read_floor)" /tmp/ab-$side-$round/*.md | grep "2\^28" | cut -d"|" -f2-4,7,8
        done
      done ;;
  esac
  echo "($(( $(date +%s) - started )) s)"
done
exit $status
