#!/usr/bin/env bash
# Same-call A/B of bench binaries on the batched rows (.gpu-run/bench-SIDE.xz for each SIDE
# in SIDES, default "base new"), alternating, ROUNDS rounds (default 2): bench section
# `half` (bf16, f16 and f32 keys of logit-like rows 64 × 131 072, 256 × 262 144,
# 1 × 262 144 at k = 50 and 1024; 1-D 2^28 top-k and median), each case beside the read
# floor of its own bytes. Then, with PARTS (e.g. "1 2 4 8 16"), the last side's section
# again with GPU_SELECT_ROWS_RADIX_PARTS set to each: how the split of a row over blocks
# sets the time. SECTION=bounded-sweep (or sbp-sweep, with GPU_SELECT_SBP_SWEEP_LOG_N) runs
# that section instead of `half`.
# Usage, from the repository root on the GPU machine: docs/results/rows-ab.sh
set -uo pipefail
source "$(dirname "$0")/gpu-lib.sh"
sides=${SIDES:-base new}
for side in $sides; do rm -f /tmp/bench-$side; unpack bench-$side; done
status=0
half() { # side, label, extra environment
  local side=$1 label=$2; shift 2
  echo "--- $label"
  env GPU_SELECT_BENCH_SECTIONS=${SECTION:-half} GPU_SELECT_RESULTS_DIR=/tmp/rows-ab-results "$@" timeout 200 \
    /tmp/bench-$side > /tmp/rows-ab.log 2>&1 || { status=1; tail -5 /tmp/rows-ab.log; }
  grep -E "^(half: |bounded-sweep|sbp-sweep )" /tmp/rows-ab.log
}
for round in $(seq "${ROUNDS:-2}"); do
  for side in $sides; do half $side "round $round, $side"; done
done
last=${sides##* }
for parts in ${PARTS:-}; do half $last "$last, GPU_SELECT_ROWS_RADIX_PARTS=$parts" GPU_SELECT_ROWS_RADIX_PARTS=$parts; done
exit $status
