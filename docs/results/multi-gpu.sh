#!/usr/bin/env bash
# The run behind issue "Several GPUs of one host" (docs/results/README.md), on a machine of
# several GPUs: the k-NN and distributed tests over every device (tests/knn.rs
# several_gpus…, tests/distributed.rs shards_on_several_handles…), the bench section
# `multi-gpu` (k-NN SIFT1M-shaped at k = 100 on 1, 2, 4 … GPUs, sharded and replicated;
# DIBMS 101 and 1001 quantiles of 2^28 and 2^30 keys per GPU, time and bytes per GPU), and DIBMS with
# one MPI process per GPU (examples/dibms: each takes the GPU of its rank on the machine).
# Binaries of the commit under test, xz-compressed in .gpu-run/ (test-knn, test-distributed,
# bench-selection, example-dibms).
# Usage, from the repository root on the GPU machine: docs/results/multi-gpu.sh [step…]
set -uo pipefail
export NCCL_NVLS_ENABLE=0
source "$(dirname "$0")/gpu-lib.sh"
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
status=0
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests bench mpi)
for step in "${steps[@]}"; do
  started=$(date +%s)
  echo "=== $step"
  case "$step" in
    tests) unpack test-knn; unpack test-distributed
      timeout 120 /tmp/test-knn several --test-threads=1 2>&1 | grep -E "^test |result|panicked|run on" || status=1
      timeout 120 /tmp/test-distributed several_handles --test-threads=1 2>&1 | grep -E "^test |result|panicked|run on" || status=1 ;;
    bench) unpack bench-selection
      GPU_SELECT_BENCH_SECTIONS=multi-gpu timeout 400 /tmp/bench-selection --bench 2>&1 | grep -E "^multi-gpu|panicked" || status=1 ;;
    mpi) unpack example-dibms
      for n in ${MPI_LOG_N:-24 28 30}; do
        timeout 150 mpirun -np "$gpus" --allow-run-as-root --oversubscribe /tmp/example-dibms bytes "$n" 2>&1 | grep -E "^n=|rror" || status=1
      done ;;
  esac
  echo "($(( $(date +%s) - started )) s)"
done
exit $status
