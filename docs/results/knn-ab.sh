#!/usr/bin/env bash
# Same-call A/B of the k-NN bench section (docs/results/README.md): base
# (.gpu-run/bench-base.xz, the commit before) and new (.gpu-run/bench-selection.xz), two rounds
# each, alternating; each round the whole `knn` section (f32, TF32 and split-TF32 searches,
# the distance tiles alone).
# Usage, from the repository root on the GPU machine: docs/results/knn-ab.sh
set -uo pipefail
source "$(dirname "$0")/gpu-lib.sh"
unpack bench-base; unpack bench-selection
for round in 1 2; do
  for side in base selection; do
    echo "--- round $round, $side"
    GPU_SELECT_BENCH_SECTIONS=knn GPU_SELECT_RESULTS_DIR=/tmp/knn-ab-$side-$round timeout 150 \
      /tmp/bench-$side --bench 2>&1 | grep -E "^knn|panicked"
  done
done
