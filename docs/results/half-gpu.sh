#!/usr/bin/env bash
# The GPU run behind 16-bit keys (issue "Half-precision keys and the last factor to the
# floor", docs/results/README.md): the f16/bf16 tests of top-k (every algorithm, fused),
# rows (queues, radix, warp radix), selection and multiselect on the GPU; compute-sanitizer's
# four tools over the 16-kind mix (the initcheck findings of runs 152 and 155 fixed), or one
# tool over each kind alone (step sanitize-kinds); the
# bench section `half` (bf16, f16 and f32 keys of the same values on LLM sampling shapes and
# 2^28) and torch.topk on the same shapes (half_torch.py).
# Binaries of the commit under test, xz-compressed in .gpu-run/ (test-top_k, test-rows,
# test-select, test-quantiles, test-robustness, bench-selection).
# Usage, from the repository root on the GPU machine: docs/results/half-gpu.sh [step…]
set -uo pipefail
source "$(dirname "$0")/gpu-lib.sh"
status=0
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests sanitize bench torch)
for step in "${steps[@]}"; do
  started=$(date +%s)
  echo "=== $step"
  case "$step" in
    tests)
      for run in "top_k f16 bf16 fused" "rows f16 bf16" "select f16 bf16" "quantiles halves"; do
        set -- $run; binary=test-$1; shift
        unpack $binary
        timeout 150 /tmp/$binary "$@" --test-threads=2 2>&1 | grep -E "^test |result|panicked|left|right|run on" || status=1
      done ;;
    sanitize) unpack test-robustness
      for tool in ${SANITIZERS:-initcheck memcheck racecheck synccheck}; do
        echo "--- $tool: the 16-kind mix, 2 calls per thread"
        GPU_SELECT_STRESS_CALLS=2 timeout ${SANITIZER_SECONDS:-90} /usr/local/cuda/bin/compute-sanitizer --tool $tool \
          /tmp/test-robustness eight_threads --test-threads=1 2>&1 \
          | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result|panicked" | head -4
      done ;;
    sanitize-kinds) unpack test-robustness
      # One tool over each kind of the mix alone (GPU_SELECT_STRESS_KIND), each within
      # SANITIZER_SECONDS: which kind a finding or a slow run comes from.
      for kind in $(seq 0 15); do
        line=$(GPU_SELECT_STRESS_KIND=$kind timeout ${SANITIZER_SECONDS:-15} /usr/local/cuda/bin/compute-sanitizer \
          --tool ${SANITIZERS:-racecheck} /tmp/test-robustness eight_threads --test-threads=1 2>&1 \
          | grep -E "ERROR SUMMARY|RACECHECK SUMMARY" | head -1)
        echo "kind $kind: ${line:-did not finish within ${SANITIZER_SECONDS:-15} s}"
      done ;;
    bench) unpack bench-selection
      GPU_SELECT_BENCH_SECTIONS=half GPU_SELECT_RESULTS_DIR=${OUT:-/tmp}/bench timeout 300 \
        /tmp/bench-selection --bench 2>&1 | grep -E "^half|benchmarking|panicked" || status=1 ;;
    torch) PYTHONUNBUFFERED=1 timeout 200 python3 docs/results/half_torch.py 2>&1 | tail -40 || status=1 ;;
  esac
  echo "($(( $(date +%s) - started )) s)"
done
exit $status
