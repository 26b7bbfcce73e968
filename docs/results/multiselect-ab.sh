#!/usr/bin/env bash
# Same-call A/B of bench binaries (.gpu-run/bench-SIDE.xz for each SIDE in SIDES, default
# "base new"), alternating, ROUNDS rounds (default 2): bucket multiselect at 2^28 (section `quantiles`,
# m = 101 and 1001, four shapes) and the headline top-k and median cases of section
# `sizes`, whose kernels share the tile loads (bitonic k = 32 and 1024, SampleSelect's
# median), each beside the read floor of its run.
# SECTIONS (default "quantiles sizes") picks the sections; QUANTILES (default
# 'BucketMultiselect f32 n=2\^28') the quantile cases. A side `bin@VAR=value` runs
# bench-bin with VAR=value set (a tuning value the bench reads, e.g.
# `new@GPU_SELECT_MULTISELECT_SAMPLE=1024`).
# Usage, from the repository root on the GPU machine: docs/results/multiselect-ab.sh
set -uo pipefail
source "$(dirname "$0")/gpu-lib.sh"
sides=${SIDES:-base new}
for bin in $(for side in $sides; do echo "${side%%@*}"; done | sort -u); do rm -f /tmp/bench-$bin; unpack bench-$bin; done
status=0
quantiles=${QUANTILES:-'BucketMultiselect f32 n=2\^28'}
sizes='bitonic f32 n=2\^28 k=(32|1024) uniform|sample f32 n=2\^28 k=134217728 uniform'
for round in $(seq "${ROUNDS:-2}"); do
  for side in $sides; do
    echo "--- round $round, $side"
    for section in ${SECTIONS:-quantiles sizes}; do
      if [ $section = quantiles ]; then filter=$quantiles; else filter=$sizes; fi
      dir=/tmp/ab-${side//[@=]/-}-$round-$section
      bin=${side%%@*}
      setting=(); [ "$bin" = "$side" ] || setting=("${side#*@}")
      env "${setting[@]}" GPU_SELECT_BENCH_SECTIONS=$section GPU_SELECT_RESULTS_DIR=$dir timeout 250 \
        /tmp/bench-$bin --bench "$filter" > $dir.log 2>&1 || { status=1; tail -5 $dir.log; }
      grep -E "^\| (quantiles|top_k|select|read_floor)" $dir/*.md | grep -v NaN | cut -d"|" -f2-4,7,8
    done
  done
done
exit $status
