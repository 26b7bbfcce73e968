#!/usr/bin/env bash
# The GPU runs behind `Auto`'s one-row bounds for small arrays and the rows' balanced split,
# and the profile of the median of 2^28 keys (issue "Half-precision keys … small inputs …
# large k"): the bench's `small-sweep` section of .gpu-run/bench-NAME.xz (small-sweep.csv
# under $OUT/NAME-ROUND), `ncu`'s duration of each kernel of the first calls of the f32
# median of 2^28 (section `bracket-sweep` narrowed to that size) and the same calls'
# event-timed medians, the tests whose paths the split moved (.gpu-run/test-top_k.xz, and
# test-rows.xz, test-select.xz where carried), and the `small` section of two bench
# binaries by turns.
# Usage, from the repository root on the GPU machine:
#   docs/results/small-sweep-gpu.sh sweep:NAME[:ROUND] ncu-median:NAME median:NAME tests ab:BASE,NEW
# (AB_SECTIONS: the bench sections `ab` times, default `small`, AB_LINES the lines it keeps
# (a regular expression, default `^(small|half)`); TOP_K_TESTS: the top-k tests'
# filters; GPU_SELECT_SAMPLE_BLOCKS_PER_SM and ROUNDS reach `median`.)
set -uo pipefail
source "$(dirname "$0")/gpu-lib.sh"
out=${OUT:-/tmp}
status=0
for step in "$@"; do
  started=$(date +%s)
  echo "=== $step"
  IFS=: read -r what name round <<< "$step"
  case "$what" in
    sweep) unpack bench-$name
      dir="$out/$name-${round:-1}"
      mkdir -p "$dir"
      GPU_SELECT_BENCH_SECTIONS=small-sweep GPU_SELECT_RESULTS_DIR="$dir" timeout 420 \
        /tmp/bench-$name --bench > "$dir/small-sweep.log" 2>&1 || status=1
      grep -c "^small-sweep" "$dir/small-sweep.log"
      grep "^small-sweep rows" "$dir/small-sweep.log" ;;
    tests) unpack test-top_k
      if [ -f .gpu-run/test-rows.xz ]; then
        unpack test-rows
        timeout 300 /tmp/test-rows --test-threads=2 > "$out/test-rows.log" 2>&1 || status=1
        grep -E "few_long|test result" "$out/test-rows.log"
      fi
      if [ -f .gpu-run/test-select.xz ]; then
        unpack test-select
        timeout 300 /tmp/test-select --test-threads=2 > "$out/test-select.log" 2>&1 || status=1
        grep -E "test result" "$out/test-select.log"
      fi
      # TOP_K_TESTS: the filters (default: the tests whose paths the one-row bounds move).
      timeout 420 /tmp/test-top_k --test-threads=4 ${TOP_K_TESTS:-small_arrays top_k_f32 top_k_bf16 top_k_f64 \
        top_k_i32 caller_workspace algorithms_agree} > "$out/test-top_k.log" 2>&1 || status=1
      grep -E "^test |test result" "$out/test-top_k.log" | grep -v " ok$" ;;
    ab) IFS=, read -r base new <<< "$name"
      unpack bench-$base; unpack bench-$new
      for round in 1 2; do
        for binary in $base $new; do
          GPU_SELECT_BENCH_SECTIONS=${AB_SECTIONS:-small} GPU_SELECT_RESULTS_DIR="/tmp/ab-$binary" timeout 200 \
            /tmp/bench-$binary --bench 2>&1 | grep -E "${AB_LINES:-^(small|half)}" | sed "s/^/$binary round $round: /" || status=1
        done
      done ;;
    ncu-median) unpack bench-$name
      GPU_SELECT_BRACKET_LOG_N=28 GPU_SELECT_BRACKET_ROUNDS=1 GPU_SELECT_BENCH_SECTIONS=bracket-sweep timeout 300 \
        /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv \
        -k 'regex:^(?!read)' --launch-count ${LAUNCHES:-80} /tmp/bench-$name --bench 2>&1 \
        | grep -E '^"[0-9]' | awk -F'","' '{print $5, $NF}' | sed 's/"//g' || status=1 ;;
    median) unpack bench-$name
      GPU_SELECT_BRACKET_LOG_N=${LOG_N:-28} GPU_SELECT_BRACKET_ROUNDS=${ROUNDS:-2} GPU_SELECT_BENCH_SECTIONS=bracket-sweep \
        timeout 300 /tmp/bench-$name --bench 2>&1 | grep "^bracket-sweep" || status=1 ;;
  esac
  echo "($(( $(date +%s) - started )) s)"
done
exit $status
