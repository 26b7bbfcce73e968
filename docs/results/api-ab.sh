#!/usr/bin/env bash
# The GPU measurements behind issue "An API for real programs" (docs/results/README.md,
# run 121): the convenient calls against the plan form (bench section `convenience`), and
# the no-regression A/B of the headline cases, base (.gpu-run/bench-base.xz, main 8f74402
# before the reshaping) and new (.gpu-run/bench-new.xz), two rounds each, alternating,
# in this one call. With .gpu-run/bench-nocache.xz (the reshaped API before streams kept freed
# blocks, b18076f) present, the convenience rounds include it: the block cache's same-call A/B.
# Usage, from the repository root on the GPU machine: docs/results/api-ab.sh
# (CONVENIENCE_ONLY=1: the convenience rounds alone.)
set -uo pipefail
export GPU_SELECT_BACKEND=cuda
sides="base new"
[ -f .gpu-run/bench-nocache.xz ] && sides="base nocache new"
for side in $sides; do
  [ -x /tmp/bench-$side ] || { python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' \
    .gpu-run/bench-$side.xz /tmp/bench-$side && chmod +x /tmp/bench-$side; }
done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "=== convenience"
for round in 1 2; do
  for side in $sides; do
    echo "--- round $round, $side"
    GPU_SELECT_BENCH_SECTIONS=convenience GPU_SELECT_RESULTS_DIR=/tmp/conv-$side-$round \
      /tmp/bench-$side --bench 'no-criterion-case' 2>&1 | grep -A40 "^convenient call" | grep -v "^$"
  done
done
[ -n "${CONVENIENCE_ONLY:-}" ] && exit 0
echo "=== A/B"
filter='bitonic f32 n=2\^28 k=(1|32|1024) uniform|sample f32 n=2\^28 k=(134217728|262144) uniform|approx f32 n=2\^28 buckets=1024 \(|f32 10000x1000 k=100 Smallest|f32 10000x32000 k=100 Smallest|f32 10000x128000 k=(100|1000) Smallest|f32 64x131072 k=(50|1024) Largest|read_floor'
for round in 1 2; do
  for side in base new; do
    echo "--- round $round, $side"
    started=$(date +%s)
    GPU_SELECT_BENCH_SECTIONS=sizes,rows GPU_SELECT_RESULTS_DIR=/tmp/ab-$side-$round \
      /tmp/bench-$side --bench "$filter" > /tmp/ab-$side-$round.log 2>&1 || echo "bench failed: see log"
    echo "($(( $(date +%s) - started )) s)"
    grep -E "^\| (top_k|select|top_k_rows|read_floor)" /tmp/ab-$side-$round/*.md | cut -d'|' -f2-4,7
  done
done
if [ -f .gpu-run/test-api.xz ]; then
  echo "=== the overlap test again (one stream against two, after a warm-up)"
  python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' .gpu-run/test-api.xz /tmp/test-api
  chmod +x /tmp/test-api
  /tmp/test-api --test-threads=1 --include-ignored --nocapture 2>&1 | grep -E "one-block sorts|test result|panicked"
fi
