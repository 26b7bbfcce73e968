#!/usr/bin/env bash
# The GPU run behind the batched radix select for rows with k beyond 2048 (issues "Exact
# k-nearest-neighbour search" and "Half-precision keys and the last factor to the floor",
# docs/results/README.md): the rows, top-k and k-NN tests on the GPU; the same-call A/B of
# the one-array radix select whose kernels gained the row offsets (base: .gpu-run/bench-base.xz,
# the commit before; new: .gpu-run/bench-selection.xz), two rounds each, alternating; the bench
# section `large-k` (the batched path beside the per-row path it replaced) and torch.topk on
# the same shapes (large_k_torch.py); the bench section `knn` and knn_torch.py.
# Usage, from the repository root on the GPU machine: docs/results/large-k-gpu.sh [step…]
set -uo pipefail
source "$(dirname "$0")/gpu-lib.sh"
status=0
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests ab bench torch knn knn-torch)
for step in "${steps[@]}"; do
  started=$(date +%s)
  echo "=== $step"
  case "$step" in
    tests)
      for run in ${TESTS:-"rows" "knn"}; do
        set -- $run; binary=test-$1; shift
        unpack $binary
        timeout 200 /tmp/$binary "$@" --test-threads=4 2>&1 | grep -A1 -E "^test |result|panicked|left|right|run on" || status=1
      done ;;
    ab) unpack bench-base; unpack bench-selection
      filter='radix f32 n=2\^28 k=(32|1024|262144) uniform|sample f32 n=2\^28 k=262144 uniform|read_floor'
      for round in 1 2; do
        for side in base selection; do
          echo "--- round $round, $side"
          GPU_SELECT_BENCH_SECTIONS=sizes GPU_SELECT_RESULTS_DIR=/tmp/ab-$side-$round \
            timeout 120 /tmp/bench-$side --bench "$filter" > /tmp/ab-$side-$round.log 2>&1 || echo "bench failed"
          grep -E "^\| (top_k|read_floor)" /tmp/ab-$side-$round/*.md | grep -E "2\^28" | cut -d'|' -f2-4,7
        done
      done ;;
    bench) unpack bench-selection
      GPU_SELECT_BENCH_SECTIONS=large-k GPU_SELECT_RESULTS_DIR=${OUT:-/tmp}/bench timeout 200 \
        /tmp/bench-selection --bench 2>&1 | grep -E "^large-k|panicked" || status=1 ;;
    torch) PYTHONUNBUFFERED=1 timeout 100 python3 docs/results/large_k_torch.py 2>&1 | tail -14 || status=1 ;;
    knn) unpack bench-selection
      GPU_SELECT_BENCH_SECTIONS=knn GPU_SELECT_RESULTS_DIR=${OUT:-/tmp}/bench-knn timeout 120 \
        /tmp/bench-selection --bench 2>&1 | grep -E "^knn|panicked" || status=1 ;;
    knn-torch) PYTHONUNBUFFERED=1 timeout 90 python3 docs/results/knn_torch.py 2>&1 | tail -14 || status=1 ;;
  esac
  echo "($(( $(date +%s) - started )) s)"
done
exit $status
