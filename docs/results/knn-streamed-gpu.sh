#!/usr/bin/env bash
# A base in host memory, streamed (StreamedIndex; docs/results/README.md): the k-NN tests
# (the streamed ones among them) on the GPU; the `knn-streamed` bench section (SIFT1M's
# shape streamed against the same search of a device-resident base, the bus's rate), two
# rounds alternating with the binary before the change when .gpu-run/bench-base.xz is
# there; and examples/knn_streamed.rs with a base of KNN_STREAMED_GB (default 88: more
# than an 80 GB GPU holds; less where the host lacks the memory).
# Usage, from the repository root on the GPU machine: docs/results/knn-streamed-gpu.sh
# (KNN_TESTS=streamed runs only the tests whose names hold that)
set -uo pipefail
source "$(dirname "$0")/gpu-lib.sh"
unpack test-knn; unpack bench-new; unpack example-knn-streamed
sides=new; [ -f .gpu-run/bench-base.xz ] && { unpack bench-base; sides="base new"; }
echo "--- host: $(nproc) cores; $(grep -E 'MemTotal|MemAvailable' /proc/meminfo | tr -s ' ' | tr '\n' ' '); ulimit -l $(ulimit -l)"
echo "--- tests/knn.rs"
timeout 300 /tmp/test-knn ${KNN_TESTS:-} 2>&1 | grep -E "^test |test result|panicked|left|right"
for round in 1 2; do
  for side in $sides; do
    echo "--- bench section knn-streamed, round $round, $side"
    GPU_SELECT_BENCH_SECTIONS=knn-streamed GPU_SELECT_RESULTS_DIR=/tmp/knn-streamed-$side-$round timeout 200 \
      /tmp/bench-$side --bench 2>&1 | grep -E "^knn-streamed|panicked"
  done
  [ "$sides" = new ] && break
done
gb=${KNN_STREAMED_GB:-88}
available_gb=$(awk '/MemAvailable/ {print int($2 / 1e6)}' /proc/meminfo)
if [ "$available_gb" -lt $((gb + 16)) ]; then
  gb=$((available_gb - 24)); echo "--- only ${available_gb} GB available: a base of ${gb} GB"
fi
echo "--- examples/knn_streamed.rs, KNN_STREAMED_GB=$gb"
KNN_STREAMED_GB=$gb timeout 280 /tmp/example-knn-streamed 2>&1
echo "exit $?"
