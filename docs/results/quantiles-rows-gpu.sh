#!/usr/bin/env bash
# The GPU run behind rows of quantiles sorted together (issue "Quantiles and multiselect",
# docs/quantiles.md § Rows): steps (default: tests bench torch ab)
#   tests  the quantile tests on the GPU (.gpu-run/test-quantiles.xz)
#   bench  section `quantiles-rows` of .gpu-run/bench-new.xz: the rows sorted together
#          against a bucket multiselect per row, beside the read floor
#   torch  torch.quantile(x, q, dim=1) on the same shapes (quantiles_rows_torch.py)
#   ab     the one-array quantiles at 2^28 of bench-base and bench-new, alternating
#          (multiselect-ab.sh): the gather kernel both use changed
#   rows-ab  section `quantiles-rows` of bench-base and bench-new, alternating, ROUNDS
#          rounds (default 2): a change to the rows' host path
# Outputs go to $OUT. Usage, from the repository root on the GPU machine:
# docs/results/quantiles-rows-gpu.sh [step…]
set -uo pipefail
source "$(dirname "$0")/gpu-lib.sh"
out=${OUT:-/tmp}
status=0
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests bench torch ab)
for step in "${steps[@]}"; do
  started=$(date +%s)
  echo "=== $step"
  case "$step" in
    tests) unpack test-quantiles
           /tmp/test-quantiles --test-threads=2 > "$out/tests.log" 2>&1 || status=1
           grep -E "^test |test result" "$out/tests.log" ;;
    bench) unpack bench-new
           GPU_SELECT_BENCH_SECTIONS=quantiles-rows GPU_SELECT_RESULTS_DIR="$out/quantiles-rows" timeout 500 \
             /tmp/bench-new --bench > "$out/bench.log" 2>&1 || { status=1; tail -20 "$out/bench.log"; }
           grep "quantiles-rows:" "$out/bench.log" ;;
    torch) (cd docs/results && OUT=$out python3 quantiles_rows_torch.py) || status=1 ;;
    rows-ab) unpack bench-base; unpack bench-new
           for round in $(seq "${ROUNDS:-2}"); do
             for side in base new; do
               GPU_SELECT_BENCH_SECTIONS=quantiles-rows GPU_SELECT_RESULTS_DIR="$out/rows-ab-$side-$round" timeout 250 \
                 /tmp/bench-$side --bench > "$out/rows-ab-$side-$round.log" 2>&1 || status=1
               grep "quantiles-rows:" "$out/rows-ab-$side-$round.log" | sed "s/^/round $round $side: /"
             done
           done ;;
    ab)    SECTIONS=quantiles ROUNDS=${ROUNDS:-2} "$(dirname "$0")/multiselect-ab.sh" > "$out/ab.log" 2>&1 || status=1
           cat "$out/ab.log" ;;
  esac
  echo "=== $step: $(( $(date +%s) - started )) s"
done
exit $status
