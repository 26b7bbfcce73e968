#!/usr/bin/env python3
"""Reproduces the constants of host/src/topk/cost.rs from a top-k sweep (plain Python).

Usage: python3 docs/results/fit_topk_cost.py docs/results/raw/2026-11-23-h100-run52-topk-sweep.csv [KEY]
(KEY: the sweep's key column to fit, f32 by default; H200 run 323's sweep,
docs/results/raw/2026-11-29-h200-run323-topk-sweep.csv, holds f32, bf16 and f64: SampleSelect's
constants come from it.)

The sweep is `GPU_SELECT_BENCH_SECTIONS=topk-sweep cargo xtask bench` (uniform f32, largest
first, n = 2^20 .. 2^30, k = 1 .. 1024, each algorithm forced). Prints:
- the bitonic table: measured ms by kernel (k = 1, then k <= 32q for q = 1, 2, 4, 8, 16, 32:
  the sweep's k = 32, 100, 256, 512 and the larger of 1000 and 1024; q = 2 is the mean of
  q = 1 and q = 4) and size;
- radix select's and SampleSelect's lines `fixed_ms + per_input_ns * n`, least squares on
  relative error over every k;
- the per-thread heap's table (HEAP_MS: rows k = 1, 8, 32, 100, 256, 512) when the sweep
  has a `heap` column (run 58's: docs/results/raw/2026-11-24-h100-run58-topk-sweep.csv).
The unit test `auto_stays_near_the_best_of_the_sweep` (cost.rs) checks Auto's choices
against the same CSV.
"""
import collections
import csv
import sys

KEY = sys.argv[2] if len(sys.argv) > 2 else "f32"
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["key"] == KEY]
ms = collections.defaultdict(dict)
for r in rows:
    ms[(r["algorithm"], int(r["k"]))][int(r["n"])] = float(r["ms"])
sizes = sorted({int(r["n"]) for r in rows})

def row(k):
    return [ms[("bitonic", k)][n] for n in sizes]

q1, q4 = row(32), row(100)
table = [row(1), q1, [(a + b) / 2 for a, b in zip(q1, q4)], q4, row(256), row(512),
         [max(a, b) for a, b in zip(row(1000), row(1024))]]
print("BITONIC_MS (rows k=1, q=1, 2, 4, 8, 16, 32; columns", [n.bit_length() - 1 for n in sizes], ")")
for line in table:
    print("    [" + ", ".join(f"{v:.4f}" for v in line) + "],")

def fit_line(algorithm, least_n=0):
    # Minimise sum ((a + b n) / t - 1)^2: linear least squares in (a, b) with weights 1/t.
    points = [(n, t) for (alg, _), by_n in ms.items() if alg == algorithm for n, t in by_n.items()
              if n >= least_n]
    a11 = sum(1 / t**2 for n, t in points)
    a12 = sum(n / t**2 for n, t in points)
    a22 = sum(n * n / t**2 for n, t in points)
    b1 = sum(1 / t for n, t in points)
    b2 = sum(n / t for n, t in points)
    det = a11 * a22 - a12 * a12
    fixed = (b1 * a22 - b2 * a12) / det
    slope = (a11 * b2 - a12 * b1) / det
    return fixed, slope * 1e6  # ms, ns per input

for algorithm in ["radix", "sample"]:
    fixed, per_input_ns = fit_line(algorithm)
    print(f"{algorithm}: fixed_ms {fixed:.4f}, per_input_ns {per_input_ns:.4e}")
# SampleSelect's line from 2^22 (2^20 is launch-bound), and its work per input at the
# largest k (ties of 16-bit keys cost most there) beyond the fixed part cost.rs holds.
fixed, per_input_ns = fit_line("sample", 1 << 22)
print(f"sample from 2^22: fixed_ms {fixed:.4f}, per_input_ns {per_input_ns:.4e}")
largest = max(sizes)
print(f"sample at 2^{largest.bit_length() - 1}, k = 1024, beyond 0.15 ms: "
      f"{(ms[('sample', 1024)][largest] - 0.15) / largest * 1e6:.4e} ns per input")

heap_ks = sorted(k for (alg, k) in ms if alg == "heap")
if heap_ks:
    print("HEAP_MS (rows k =", heap_ks, ")")
    for k in heap_ks:
        print("    [" + ", ".join(f"{ms[('heap', k)][n]:.4f}" for n in sizes) + "],")
