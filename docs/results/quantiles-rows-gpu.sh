#!/usr/bin/env bash
# The GPU run behind rows of quantiles sorted together (issue "Quantiles and multiselect",
# docs/quantiles.md § Rows): steps (default: tests bench torch ab)
#   tests  the quantile tests on the GPU (.gpu-run/test-quantiles.xz; TESTS names the
#          test binaries, default "quantiles")
#   bench  section `quantiles-rows` of .gpu-run/bench-new.xz: the rows sorted together
#          against a bucket multiselect per row, beside the read floor
#   torch  torch.quantile(x, q, dim=1) on the same shapes (quantiles_rows_torch.py)
#   ab     the one-array quantiles at 2^28 of bench-base and bench-new, alternating
#          (multiselect-ab.sh): the gather kernel both use changed
#   rows-ab  section `quantiles-rows` of bench-base and bench-new, alternating, ROUNDS
#          rounds (default 2): a change to the rows' host path
#   sort-ab  the sorted top-k of 2^28 keys at k = 262 144 (SampleSelect, radix select; their
#          outputs sorted by the block sort and merges) of bench-base and bench-new,
#          alternating, ROUNDS rounds: a change to the sort kernels
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
    tests) for name in ${TESTS:-quantiles}; do
             unpack test-$name
             /tmp/test-$name --test-threads=2 > "$out/test-$name.log" 2>&1 || status=1
             grep -E "^test |test result" "$out/test-$name.log"
           done ;;
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
    sort-ab) unpack bench-base; unpack bench-new
           for round in $(seq "${ROUNDS:-2}"); do
             for side in base new; do
               dir="$out/sort-ab-$side-$round"
               GPU_SELECT_BENCH_SECTIONS=sizes GPU_SELECT_RESULTS_DIR="$dir" timeout 250 /tmp/bench-$side --bench \
                 '(sample|radix)( unsorted)? f32 n=2\^28 k=262144 uniform' > "$dir.log" 2>&1 || status=1
               grep -E "^\| (top_k|read_floor)" "$dir"/*.md | cut -d"|" -f2-4,7,8 | sed "s/^/round $round $side: /"
             done
           done ;;
    ab)    SECTIONS=quantiles ROUNDS=${ROUNDS:-2} "$(dirname "$0")/multiselect-ab.sh" > "$out/ab.log" 2>&1 || status=1
           cat "$out/ab.log" ;;
  esac
  echo "=== $step: $(( $(date +%s) - started )) s"
done
exit $status
