#!/usr/bin/env bash
# Samples drawn by many blocks (SampleSelectPolicy::spread_sample_from), old build against
# new, on the GPU machine, in two calls (each within the device's ten minutes):
#   part 1: the selection tests of the sample kernel's paths (.gpu-run/test-select.xz),
#           then docs/results/sample-topk-ab.sh (the top-k sweep narrowed to `sample,auto`,
#           bench-base against bench-new, and ncu's kernel durations at 2^28);
#   part 2: the selection and SampleSelect top-k tests (.gpu-run/test-select.xz,
#           test-top_k.xz), the new bench's `bracket-sweep` (selection: median, n/10, n/100,
#           the approximate median; SampleSelect's top-k of 1024 and 262 144) at LOG_N
#           (default 24,26,27,28), two rounds, with the first level's sample spread at every
#           size (`spread0`) and never (`spread4294967295`) beside the default: the
#           same-binary A/B; then ncu's kernel durations of its median of 2^28.
# (Two test binaries and two benches are more than one call carries.) Results under $OUT
# (part 2's: tests-*.log, median.log, median-ncu.log); part 1's packed as
# $OUT/sample-topk-ab.tgz.
# Usage, from the repository root on the GPU machine:
#   docs/results/spread-sample-gpu.sh 1;  docs/results/spread-sample-gpu.sh 2
set -uo pipefail
here=$(dirname "$0")
source "$here/gpu-lib.sh"
out=${OUT:-/tmp}
start=$(date +%s)
# The selection tests of the sample kernel's paths (both parts run them).
select_tests() {
  unpack test-select
  timeout 200 /tmp/test-select --test-threads 2 a_sample_drawn bracket_gives approximate_selection_reports \
    window_count every_policy select_f32 > "$out/tests-select.log" 2>&1
  echo "test-select rc $? ($(( $(date +%s) - start )) s)"; grep -E "^test |test result" "$out/tests-select.log"
}
case "${1:-1}" in
  1)
    select_tests
    SIDES="base new" KEYS=f32,bf16,f64 "$here/sample-topk-ab.sh"
    ;;
  2)
    select_tests
    unpack test-top_k
    GPU_SELECT_BRACKET_TEST_KEYS=500000 timeout 200 /tmp/test-top_k --test-threads 2 sample_select_brackets_a_small_k \
      sample_select_bracket_offsets radix_and_sample_select_take_any_k algorithms_agree top_k_f32 > "$out/tests-top_k.log" 2>&1
    echo "test-top_k rc $? ($(( $(date +%s) - start )) s)"; grep -E "^test |test result" "$out/tests-top_k.log"
    unpack bench-new
    GPU_SELECT_SPREAD_SAMPLE_FROM=0,4294967295 GPU_SELECT_BRACKET_LOG_N=${LOG_N:-24,26,27,28} GPU_SELECT_BRACKET_ROUNDS=2 \
      GPU_SELECT_BENCH_SECTIONS=bracket-sweep timeout 240 /tmp/bench-new --bench 2>&1 | grep "^bracket-sweep" > "$out/median.log"
    echo "bracket-sweep ($(( $(date +%s) - start )) s)"
    LAUNCHES=40 "$here/small-sweep-gpu.sh" ncu-median:new > "$out/median-ncu.log" 2>&1
    cat "$out/median-ncu.log"
    ;;
esac
echo "total $(( $(date +%s) - start )) s"
