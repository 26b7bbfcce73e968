#!/usr/bin/env bash
# SampleSelect top-k, old build against new, on the GPU machine: the GPU tests of its
# bracket (test binary .gpu-run/test-top_k.xz, tests TESTS, the bracket test over
# BRACKET_KEYS keys), the top-k sweep narrowed to `sample,auto` (keys KEYS, default f32 and
# bf16; sizes SIZES) for each bench binary of SIDES (.gpu-run/bench-SIDE.xz) in ROUNDS
# alternating rounds, and ncu's duration of each SampleSelect kernel of the first call at
# 2^28 (f32 and bf16). Results under $OUT/r, also packed as $OUT/sample-topk-ab.tgz (the device returns few files).
# Usage, from the repository root on the GPU machine:
#   SIDES="base new" KEYS=f32,bf16,f64 docs/results/sample-topk-ab.sh
set -uo pipefail
source "$(dirname "$0")/gpu-lib.sh"
R=${OUT:-/tmp}/r; mkdir -p "$R"
start=$(date +%s)
sides=(${SIDES:-base new})
if [ -f .gpu-run/test-top_k.xz ]; then
  unpack test-top_k
  GPU_SELECT_BRACKET_TEST_KEYS=${BRACKET_KEYS:-1000000} timeout ${TEST_TIMEOUT:-300} /tmp/test-top_k --test-threads 1 \
    ${TESTS:-sample_select_brackets_a_small_k sample_select_bracket_offsets radix_and_sample_select_take_any_k algorithms_agree top_k_f32 top_k_bf16} \
    > "$R/tests.log" 2>&1
  echo "tests rc $? ($(( $(date +%s) - start )) s)"; tail -3 "$R/tests.log"
fi
for round in $(seq 1 "${ROUNDS:-2}"); do for side in "${sides[@]}"; do
  unpack "bench-$side"; t0=$(date +%s)
  GPU_SELECT_RESULTS_DIR=/tmp/res-$side-$round GPU_SELECT_BENCH_SECTIONS=topk-sweep GPU_SELECT_TOPK_SWEEP_KEYS=${KEYS:-f32,bf16} \
  GPU_SELECT_TOPK_SWEEP_LOG_N=${SIZES:-20,24,26,28,30} GPU_SELECT_TOPK_SWEEP_ALGORITHMS=sample,auto \
    timeout 150 "/tmp/bench-$side" --bench > "$R/ab-$side-$round.log" 2>&1
  echo "sweep $side round $round rc $? ($(( $(date +%s) - t0 )) s)"
  cp "/tmp/res-$side-$round/topk-sweep.csv" "$R/topk-$side-$round.csv"
done; done
export SECTION=topk-sweep GPU_SELECT_TOPK_SWEEP_LOG_N=28 GPU_SELECT_TOPK_SWEEP_ALGORITHMS=sample LAUNCHES=12
for key in f32 bf16; do
  steps=(); for side in "${sides[@]}"; do steps+=("ncu-times:bench-$side:sample_select"); done
  GPU_SELECT_TOPK_SWEEP_KEYS=$key "$(dirname "$0")/profile-gpu.sh" "${steps[@]}" > "$R/ncu-times-$key.txt" 2>&1
  cat "$R/ncu-times-$key.txt"
done
tar czf "${OUT:-/tmp}/sample-topk-ab.tgz" -C "${OUT:-/tmp}" r
echo "total $(( $(date +%s) - start )) s"
