#!/usr/bin/env bash
# The GPU run behind split-bucket partition (issue "Split-bucket partition (SBP) top-k and
# selection", docs/results/README.md): the SBP tests (the paper's datasets, duplicates,
# selection forms, every key type) and the design.md §4 top-k matrix with SBP in it, on the
# GPU; compute-sanitizer over the SBP tests; the bench's `sbp-sweep` (the paper's
# comparisons: K = 8 … 128, n = 2^21 … 2^29, three datasets, with the read floor); step
# `tune`: the same sweep at 2^27 with the SBP policy values around the defaults; step `ab`:
# the sweep by the base binary (bench-selection-base) and the one under test, alternately.
# Binaries of the commit under test, xz-compressed in .gpu-run/ (test-sbp, test-top_k,
# bench-selection, and bench-selection-base for `ab`).
# Usage, from the repository root on the GPU machine: docs/results/sbp-gpu.sh [step…]
set -uo pipefail
source "$(dirname "$0")/gpu-lib.sh"
status=0
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests sanitize sweep)
# The bench's `sbp-sweep` by BINARY into the folder DIR (extra VAR=value settings after them).
sweep_into() {
  local binary=$1 dir=$2; shift 2
  mkdir -p "$dir"
  env "$@" GPU_SELECT_BENCH_SECTIONS=sbp-sweep GPU_SELECT_RESULTS_DIR="$dir" timeout 400 \
    "$binary" --bench 2>&1 | grep -E "^sbp-sweep|benchmarking|written|panicked|tuning"
}
for step in "${steps[@]}"; do
  started=$(date +%s)
  echo "=== $step"
  case "$step" in
    tests) unpack test-sbp; unpack test-top_k
      timeout 200 /tmp/test-sbp --test-threads=2 2>&1 | grep -E "^test |result|panicked|left|right|run on" || status=1
      timeout 250 /tmp/test-top_k top_k_ algorithms_agree --test-threads=4 2>&1 | grep -E "^test |result|panicked|left|right" || status=1 ;;
    sanitize) unpack test-sbp
      for tool in ${SANITIZERS:-memcheck racecheck synccheck initcheck}; do
        echo "--- $tool: SBP's datasets and duplicates"
        timeout ${SANITIZER_SECONDS:-60} /usr/local/cuda/bin/compute-sanitizer --tool $tool \
          /tmp/test-sbp limits both_forms --test-threads=1 2>&1 \
          | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result|panicked" | head -4
      done ;;
    sweep) unpack bench-selection
      sweep_into /tmp/bench-selection ${OUT:-/tmp}/bench || status=1 ;;
    ab) unpack bench-selection; unpack bench-selection-base
      # The sweep at GPU_SELECT_SBP_SWEEP_LOG_N (default 28) by the base binary and the one
      # under test, alternately, ROUNDS times (default 2): each its own sweep file.
      for round in $(seq 1 ${ROUNDS:-2}); do
        for side in base new; do
          binary=/tmp/bench-selection; [ $side = base ] && binary=/tmp/bench-selection-base
          sweep_into $binary ${OUT:-/tmp}/ab-$side-$round \
            GPU_SELECT_SBP_SWEEP_LOG_N=${GPU_SELECT_SBP_SWEEP_LOG_N:-28} | grep -E "written|panicked" || status=1
        done
      done ;;
    tune) unpack bench-selection
      # The policy values around the defaults (slack 50 %, least cutoff 32, tree spread 4),
      # at 2^27: each its own sweep file.
      for setting in "SLACK_PERCENT=0" "SLACK_PERCENT=100" "MIN_CUTOFF=64" "TREE_SPREAD=2" "TREE_SPREAD=8"; do
        dir=${OUT:-/tmp}/tune-${setting//=/-}; mkdir -p $dir
        env GPU_SELECT_SBP_$( [[ $setting == TREE* ]] && echo "$setting" || echo "CUTOFF_$setting" | sed 's/CUTOFF_MIN_CUTOFF/MIN_CUTOFF/') \
          GPU_SELECT_SBP_SWEEP_LOG_N=27 GPU_SELECT_BENCH_SECTIONS=sbp-sweep GPU_SELECT_RESULTS_DIR=$dir \
          timeout 120 /tmp/bench-selection --bench 2>&1 | grep -E "tuning|panicked" | head -2
      done ;;
  esac
  echo "($(( $(date +%s) - started )) s)"
done
exit $status
