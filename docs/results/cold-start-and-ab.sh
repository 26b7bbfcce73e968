#!/usr/bin/env bash
# The GPU run behind issue "A crate anyone can depend on" (run 113, docs/results/README.md):
#  1. cold starts: each example in a fresh process with the driver's compilation cache off
#     (CUDA_CACHE_DISABLE=1) and again with a new, empty cache folder: opening the device, the
#     first call (kernels loaded) and a second call;
#  2. the no-regression A/B: the headline benchmarks, base (.bundle-base/bench-selection.xz,
#     built from the previous main) and new (.bundle/bin/bench-selection), two rounds each,
#     alternating, in this one call.
# Usage, from the repository root on the GPU machine: docs/results/cold-start-and-ab.sh
set -uo pipefail
out="${OUT:-/tmp/out}"
mkdir -p "$out"
export GPU_SELECT_BACKEND=cuda
# The base binary travels xz-compressed (it embeds 56 MB of PTX).
if [ -f .bundle-base/bench-selection.xz ] && [ ! -x /tmp/bench-base ]; then
  python3 -c 'import lzma,sys; open("/tmp/bench-base","wb").write(lzma.open(sys.argv[1]).read())' \
    .bundle-base/bench-selection.xz && chmod +x /tmp/bench-base
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "=== cold starts, CUDA_CACHE_DISABLE=1"
for e in top_k rows select; do
  CUDA_CACHE_DISABLE=1 /usr/bin/time -f "process wall %e s" .bundle/bin/example-$e
done
echo "=== cold starts, a new empty CUDA_CACHE_PATH"
for e in top_k rows select; do
  cache=$(mktemp -d)
  CUDA_CACHE_PATH=$cache /usr/bin/time -f "process wall %e s" .bundle/bin/example-$e
done
echo "=== A/B"
filter='bitonic f32 n=2\^28 k=(1|32|1024) uniform|sample f32 n=2\^28 k=(134217728|262144) uniform|approx f32 n=2\^28 buckets=1024 \(|f32 10000x1000 k=100 Smallest|f32 10000x32000 k=100 Smallest|f32 10000x128000 k=(100|1000) Smallest|f32 64x131072 k=(50|1024) Largest|read_floor'
for round in 1 2; do
  for side in base new; do
    bin=.bundle/bin/bench-selection
    [ "$side" = base ] && bin=/tmp/bench-base
    echo "--- round $round, $side"
    started=$(date +%s)
    GPU_SELECT_BENCH_SECTIONS=sizes,rows GPU_SELECT_RESULTS_DIR=/tmp/ab-$side-$round \
      "$bin" --bench "$filter" > /tmp/ab-$side-$round.log 2>&1 || echo "bench failed: see log"
    echo "($(( $(date +%s) - started )) s)"
    cat /tmp/ab-$side-$round/*.md | grep -E '^\|' | grep -v -- '---' > "$out/ab-$side-$round.md"
    grep -E "^\| (top_k|select|top_k_rows|read_floor)" "$out/ab-$side-$round.md" | cut -d'|' -f2-4,7 
  done
done
tail -5 /tmp/ab-new-1.log
