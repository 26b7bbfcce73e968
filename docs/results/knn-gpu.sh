#!/usr/bin/env bash
# The GPU run behind exact k-NN (issue "Exact k-nearest-neighbour search") and the stress
# and out-of-memory runs of issue "Robust on every input and every caller"
# (docs/results/README.md): the k-NN and robustness tests on the GPU, the bench section
# `knn` (SIFT1M's shape) and PyTorch's k-NN on the same shapes (knn_torch.py), then
# compute-sanitizer's four tools over a small k-NN test. Binaries of the commit under test,
# xz-compressed in .gpu-run/.
# Usage, from the repository root on the GPU machine: docs/results/knn-gpu.sh [step…]
set -uo pipefail
source "$(dirname "$0")/gpu-lib.sh"
status=0
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests bench torch stress sanitize)
for step in "${steps[@]}"; do
  started=$(date +%s)
  echo "=== $step"
  case "$step" in
    tests) unpack test-knn; timeout ${TEST_SECONDS:-60} /tmp/test-knn --test-threads=${TEST_THREADS:-2} 2>&1 | grep -E "^test |result|panicked|left|right|run on" || status=1 ;;
    bench) unpack bench-selection
      GPU_SELECT_BENCH_SECTIONS=knn GPU_SELECT_RESULTS_DIR=${OUT:-/tmp}/bench timeout 150 \
        /tmp/bench-selection --bench 2>&1 | grep -E "^knn|benchmarking|panicked" || status=1 ;;
    torch) PYTHONUNBUFFERED=1 timeout 60 python3 docs/results/knn_torch.py 2>&1 | tail -14 || status=1 ;;
    stress) unpack test-robustness
      timeout 90 /tmp/test-robustness --include-ignored --test-threads=1 --nocapture 2>&1 \
        | grep -E "^test |result|mixed calls|filled|calls answered|nothing was|not an out-of-memory|full device|run on" || status=1 ;;
    sanitize) unpack test-knn; unpack test-robustness
      # Every kernel family the mix calls (16 kinds: top-k by every algorithm and fused,
      # rows, exact and approximate selection, both multiselects, quantiles, segment sorts,
      # k-NN; 2 calls per thread make every kind), and k-NN's three kernels. (Runs 150-151
      # sanitized the mix of 001c73f, 9 kinds.)
      for tool in ${SANITIZERS:-memcheck racecheck synccheck initcheck}; do
        for run in "/tmp/test-knn ${KNN_SANITIZED:-non_finite}" "/tmp/test-robustness eight_threads"; do
          echo "--- $tool: $run"
          GPU_SELECT_STRESS_CALLS=${SANITIZED_CALLS:-2} timeout ${SANITIZER_SECONDS:-60} \
            /usr/local/cuda/bin/compute-sanitizer --tool $tool $run --test-threads=1 2>&1 \
            | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result|panicked" | head -4
        done
      done ;;
  esac
  echo "($(( $(date +%s) - started )) s)"
done
exit $status
