#!/usr/bin/env bash
# SampleSelect's last level in its sample kernel (top-k's base case sends its outputs there;
# the host launches a batch's last level's count, choose and filter only when the run did not
# end) with the first level's sample spread over many blocks: old build against new on the
# GPU machine, in two calls (each within the device's ten minutes; four binaries are more
# than one call carries):
#   part 1 (.gpu-run/test-select.xz, test-top_k.xz, bench-new.xz): the selection tests, the
#           top-k tests of SampleSelect, bucket select and the base case, ncu's kernel
#           durations of SampleSelect's top-k of 2^28 (f32, k = 1) and of the median of 2^28;
#   part 2 (.gpu-run/bench-base.xz, bench-new.xz): docs/results/sample-topk-ab.sh (the
#           top-k sweep narrowed to `sample,auto`, f32/bf16/f64, two rounds by turns), then
#           the bench's `bracket-sweep` (f32 medians, n/10, n/100, the approximate median,
#           SampleSelect's top-k of 1024 and 262 144 at 2^27 and 2^28; f64 and bf16 at 2^28)
#           base and new by turns, two rounds.
# Results under $OUT: part 1's tests-*.log, topk-ncu.log, median-ncu.log; part 2's
# sample-topk-ab.tgz and median.log.
# Usage, from the repository root on the GPU machine:
#   docs/results/sample-finish-gpu.sh 1;  docs/results/sample-finish-gpu.sh 2
set -uo pipefail
here=$(dirname "$0")
source "$here/gpu-lib.sh"
out=${OUT:-/tmp}
start=$(date +%s)
case "${1:-1}" in
  1)
    unpack test-select
    timeout 250 /tmp/test-select --test-threads 2 > "$out/tests-select.log" 2>&1
    echo "test-select rc $? ($(( $(date +%s) - start )) s)"; grep -E "test result|FAILED|panicked" "$out/tests-select.log"
    unpack test-top_k
    GPU_SELECT_BRACKET_TEST_KEYS=500000 timeout 300 /tmp/test-top_k --test-threads 4 top_k_ sample_select \
      radix_and_sample algorithms_agree bucket_select small_arrays caller_workspace > "$out/tests-top_k.log" 2>&1
    echo "test-top_k rc $? ($(( $(date +%s) - start )) s)"; grep -E "^test |test result" "$out/tests-top_k.log" | grep -v " ok$"
    SECTION=topk-sweep GPU_SELECT_TOPK_SWEEP_LOG_N=28 GPU_SELECT_TOPK_SWEEP_ALGORITHMS=sample \
      GPU_SELECT_TOPK_SWEEP_KEYS=f32 LAUNCHES=20 "$here/profile-gpu.sh" ncu-times:bench-new:sample_select \
      > "$out/topk-ncu.log" 2>&1
    cat "$out/topk-ncu.log"
    LAUNCHES=30 "$here/small-sweep-gpu.sh" ncu-median:new > "$out/median-ncu.log" 2>&1
    cat "$out/median-ncu.log"
    ;;
  2)
    SIDES="base new" KEYS=f32,bf16,f64 "$here/sample-topk-ab.sh"
    for round in 1 2; do
      for side in base new; do
        GPU_SELECT_BRACKET_ROUNDS=1 GPU_SELECT_BENCH_SECTIONS=bracket-sweep timeout 200 "/tmp/bench-$side" --bench 2>&1 \
          | grep "^bracket-sweep" | sed "s/round 1/round $round/; s/^/$side: /"
      done
    done > "$out/median.log"
    cat "$out/median.log"
    ;;
esac
echo "total $(( $(date +%s) - start )) s"
