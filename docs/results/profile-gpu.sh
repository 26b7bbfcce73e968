#!/usr/bin/env bash
# Where the time goes, kernel by kernel, on the GPU machine: the machine code of named
# kernels (cuobjdump over the prebuilt sm_90 cubin carried as .gpu-run/cubin-sm90-NAME.xz),
# ncu's duration of every kernel of one 101-percentile call at 2^28 (examples/quantiles.rs,
# .gpu-run/example-quantiles.xz), and of the bench's first 16-bit LLM-shape rows calls
# (section `half`, .gpu-run/bench-NAME.xz). ncu runs with `--clock-control none` (the
# clocks left alone, as METHOD.md asks).
# Usage, from the repository root on the GPU machine:
#   docs/results/profile-gpu.sh sass:base:KERNEL[,KERNEL…] ncu-quantiles:example-quantiles ncu-half:bench-base \
#     ncu-detail:bench-base:KERNELS ncu-times:bench-base:KERNELS
set -uo pipefail
source "$(dirname "$0")/gpu-lib.sh"
NCU="/usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv"
status=0
for step in "$@"; do
  started=$(date +%s)
  echo "=== $step"
  IFS=: read -r what name arg <<< "$step"
  case "$what" in
    sass) unpack cubin-sm90-$name
      for kernel in ${arg//,/ }; do
        /usr/local/cuda/bin/cuobjdump -sass -fun "$kernel" /tmp/cubin-sm90-$name > "${OUT:-/tmp}/sass-$name-$kernel.txt" 2>&1 || status=1
        echo "$kernel: $(grep -cE '^\s+/\*[0-9a-f]{4}\*/' "${OUT:-/tmp}/sass-$name-$kernel.txt") instructions"
      done ;;
    ncu-quantiles) unpack $name
      QUANTILES_LOG_N=${LOG_N:-28} timeout 200 $NCU /tmp/$name 2>&1 \
        | grep -E '^"[0-9]|call|backend' | awk -F'","' '/^"[0-9]/ {print $5, $9, $NF; next} {print}' \
        | sed 's/"//g' || status=1 ;;
    ncu-half) unpack $name
      GPU_SELECT_BENCH_SECTIONS=half timeout 300 $NCU -k 'regex:^(?!read_floor)' --launch-count ${LAUNCHES:-60} \
        /tmp/$name --bench 2>&1 | grep -E '^"[0-9]|^half' | awk -F'","' '/^"[0-9]/ {print $5, $9, $NF; next} {print}' \
        | sed 's/"//g' || status=1 ;;
    ncu-detail) unpack $name
      # ncu's sections for the 3rd launch of each kernel matching KERNELS (regex) in the
      # bench section SECTION (default half).
      GPU_SELECT_BENCH_SECTIONS=${SECTION:-half} timeout 400 /usr/local/cuda/bin/ncu --clock-control none \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
        --section MemoryWorkloadAnalysis --section SchedulerStats --kernel-id "::regex:$arg:3" \
        /tmp/$name --bench 2>&1 | grep -vE '^half|^==PROF==|^\s*$|^\s*-{5}' | grep -vE 'OPT|INF|WRN' | cut -c1-120 || status=1 ;;
    ncu-times) unpack $name
      # Durations of the first LAUNCHES kernels matching KERNELS (regex) in SECTION.
      GPU_SELECT_BENCH_SECTIONS=${SECTION:-half} timeout 300 $NCU -k "regex:$arg" --launch-count ${LAUNCHES:-20} \
        /tmp/$name --bench 2>&1 | grep -E '^"[0-9]' | awk -F'","' '{print $5, $9, $NF}' | sed 's/"//g' || status=1 ;;
    ncu-source) unpack $name
      # Stall samples per SASS instruction of the 3rd launch of each kernel matching
      # KERNELS (regex) in SECTION (bench binaries) or of an example (names example-*),
      # as CSV files under $OUT, one per kernel (docs/results/ncu_stalls.py summarises one).
      report=/tmp/source-$name
      if [[ $name == example-* ]]; then command=(/tmp/$name); else command=(/tmp/$name --bench); fi
      GPU_SELECT_BENCH_SECTIONS=${SECTION:-half} QUANTILES_LOG_N=${LOG_N:-26} timeout 300 /usr/local/cuda/bin/ncu \
        --clock-control none --section SourceCounters --section WarpStateStats --import-source no \
        --kernel-id "::regex:$arg:3" -f -o $report "${command[@]}" > /dev/null 2>&1 || status=1
      for kernel in $(/usr/local/cuda/bin/ncu -i $report.ncu-rep --csv --page raw --metrics launch__grid_size 2>/dev/null \
          | awk -F'","' 'NR > 2 {print $5}' | sort -u); do
        /usr/local/cuda/bin/ncu -i $report.ncu-rep --kernel-name "$kernel" --page source --print-source sass --csv \
          > "${OUT:-/tmp}/source-$kernel.csv" 2>&1 || status=1
        echo "$kernel: $(wc -l < "${OUT:-/tmp}/source-$kernel.csv") lines"
      done ;;
  esac
  echo "($(( $(date +%s) - started )) s)"
done
exit $status
