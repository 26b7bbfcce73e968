#!/usr/bin/env bash
# The GPU run behind DIBMS (issue "Quantiles and multiselect … DIBMS over MPI",
# docs/results/README.md): the quantile and distributed tests on the GPU (the distributed
# ones: three handles on the one GPU, as threads), the bench section `distributed`, an A/B
# of whole quantiles calls against the binary before the distributed change
# (.gpu-run/bench-pre.xz, main 5388a78), and whether this machine has MPI.
# Binaries of the commit under test, xz-compressed in .gpu-run/.
# Usage, from the repository root on the GPU machine: docs/results/distributed-gpu.sh [step…]
set -uo pipefail
source "$(dirname "$0")/gpu-lib.sh"
status=0
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(mpi tests distributed mpirun ab)
for step in "${steps[@]}"; do
  started=$(date +%s)
  echo "=== $step"
  case "$step" in
    mpi) command -v mpirun mpiexec || echo "no mpirun here"
         python3 -c 'import mpi4py; print("mpi4py", mpi4py.__version__, mpi4py.get_config())' 2>&1 | tail -1 ;;
    mpirun)
      # examples/dibms.rs over real MPI processes sharing the GPU (built here against
      # Debian's Open MPI 4.1.4; this machine's must load it).
      unpack example-dibms
      mpirun --version | head -1; ldd /tmp/example-dibms | grep -E "mpi|not found"
      for args in check "bytes 24" "bytes 28" fault-input; do
        echo "--- mpirun -np 4 dibms $args"
        timeout 300 mpirun --allow-run-as-root --oversubscribe -np 4 /tmp/example-dibms $args 2>&1 | grep -v "^gpu-select:" | tail -12 || status=1
      done ;;
    tests) for t in test-distributed test-quantiles; do unpack $t; /tmp/$t --test-threads=1 2>&1 | tail -4 || status=1; done ;;
    distributed) unpack bench-selection
      GPU_SELECT_BENCH_SECTIONS=distributed /tmp/bench-selection --bench > "${OUT:-/tmp}/bench-distributed.log" 2>&1 || status=1
      grep -E "^distributed" "${OUT:-/tmp}/bench-distributed.log" ;;
    ab) unpack bench-selection; unpack bench-pre
      filter='n=2\^28 m=(101|1001) uniform|read_floor'
      for round in $(seq "${ROUNDS:-2}"); do
        for side in pre selection; do
          echo "--- round $round, $side"
          GPU_SELECT_BENCH_SECTIONS=quantiles GPU_SELECT_RESULTS_DIR=/tmp/ab-$side-$round \
            /tmp/bench-$side --bench "$filter" > /tmp/ab-$side-$round.log 2>&1 || echo "bench failed: see log"
          grep -E "^\| (quantiles|read_floor)" /tmp/ab-$side-$round/*.md | grep -v SortAndChoose | cut -d"|" -f2-4,7,8
        done
      done ;;
  esac
  echo "($(( $(date +%s) - started )) s)"
done
exit $status
