#!/usr/bin/env bash
# The GPU run behind small arrays taken as one row (issue "Half-precision keys … small
# inputs") and quantiles of rows sorted together (issue "Quantiles and multiselect"), run
# 246: the rows and quantile tests, the bench sections `small` and `quantiles-rows` of
# .gpu-run/bench-new.xz, then the top-k tests whose `Auto` path changed (the one-row test
# and the design.md §4 matrix of four key types). Outputs go to $OUT.
# Usage, from the repository root on the GPU machine: docs/results/small-and-rows-gpu.sh
set -uo pipefail
source "$(dirname "$0")/gpu-lib.sh"
out=${OUT:-/tmp}
for binary in test-quantiles test-top_k test-rows bench-new; do unpack $binary; done
status=0
/tmp/test-rows --test-threads=2 > "$out/test-rows.log" 2>&1 || status=1
grep "test result" "$out/test-rows.log"
/tmp/test-quantiles --test-threads=2 > "$out/test-quantiles.log" 2>&1 || status=1
grep "test result" "$out/test-quantiles.log"
GPU_SELECT_BENCH_SECTIONS=small,quantiles-rows GPU_SELECT_RESULTS_DIR="$out/bench" timeout 300 \
  /tmp/bench-new --bench > "$out/bench.log" 2>&1 || status=1
grep -E "^small|^quantiles-rows" "$out/bench.log"
timeout 330 /tmp/test-top_k --test-threads=4 small_arrays top_k_f32 top_k_bf16 top_k_f64 top_k_i32 \
  caller_workspace algorithms_agree > "$out/test-top_k.log" 2>&1 || status=1
grep -E "^test |test result" "$out/test-top_k.log"
exit $status
