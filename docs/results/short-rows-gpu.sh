#!/usr/bin/env bash
# Short rows (rows of at most 1024 keys, the warp kernels'), one call: the rows tests on the
# GPU (.gpu-run/test-rows.xz; SKIP_TESTS=1 skips them), then the rows sweep over the shapes
# of at most 1024 columns (GPU_SELECT_SWEEP_MAX_COLS=1024) for each SIDE of SIDES (default
# "base new": .gpu-run/bench-SIDE.xz; a side `bin@VAR=value` runs that binary with VAR set,
# e.g. `new@GPU_SELECT_ROWS_PER_WARP=1`) with each KERNEL of KERNELS forced (default
# "radix-select"; "auto" for Auto), ROUNDS rounds alternating the sides; then torch.topk on
# the same shapes (short_rows_torch.py; SKIP_TORCH=1 skips it). The sweeps' CSVs go to
# $OUT/short-rows-sweeps.tgz (few files come back from the GPU machine).
# Usage, from the repository root on the GPU machine: docs/results/short-rows-gpu.sh
set -uo pipefail
source "$(dirname "$0")/gpu-lib.sh"
status=0
if [ -f .gpu-run/test-rows.xz ] && [ -z "${SKIP_TESTS:-}" ]; then
  unpack test-rows
  echo "--- tests/rows.rs on the GPU"
  timeout 400 /tmp/test-rows --test-threads 1 2>&1 | tail -4 || status=1
fi
sides=${SIDES:-base new}
for bin in $(for side in $sides; do echo "${side%%@*}"; done | sort -u); do unpack bench-$bin; done
mkdir -p /tmp/short-rows
for round in $(seq "${ROUNDS:-1}"); do
  for side in $sides; do
    bin=${side%%@*}
    setting=(); [ "$bin" = "$side" ] || setting=("${side#*@}")
    for kernel in ${KERNELS:-radix-select}; do
      tag=${side//[@=]/-}-$kernel-$round
      dir=/tmp/sweep-$tag
      mkdir -p $dir
      env "${setting[@]}" GPU_SELECT_BENCH_SECTIONS=rows-sweep GPU_SELECT_SWEEP_MAX_COLS=1024 \
        GPU_SELECT_RESULTS_DIR=$dir $([ "$kernel" = auto ] || echo GPU_SELECT_ROWS_ALGORITHM=$kernel) \
        timeout 300 /tmp/bench-$bin > $dir/log 2>&1 || { status=1; tail -5 $dir/log; }
      echo "--- round $round, $side, $kernel"
      grep -E "^sweep " $dir/log
      cp $dir/rows-sweep-*.csv /tmp/short-rows/rows-sweep-$tag.csv 2>/dev/null
    done
  done
done
if [ -z "${SKIP_TORCH:-}" ]; then
  echo "--- torch"
  (cd docs/results && OUT=/tmp/short-rows timeout 200 python3 short_rows_torch.py) || status=1
fi
tar czf "${OUT:-/tmp}/short-rows-sweeps.tgz" -C /tmp short-rows
exit $status
