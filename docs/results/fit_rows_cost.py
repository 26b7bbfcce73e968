#!/usr/bin/env python3
"""Fits the rows cost model (host/src/topk/rows_cost.rs) to a rows sweep.

Usage: python3 docs/results/fit_rows_cost.py QUEUES.csv RADIX.csv [PEAK_BYTES_PER_S]
(the committed fit: raw/2026-11-26-h200-run196-237-rows-sweep-{warp,radix}-select.csv 4.8e12;
rows_cost.rs keeps run 196's queue constants and takes WARP_PER_ROW_UNIT fitted alone with
them held, 0.00012: the full refit printed here moved four of run 196's choices to slower
kernels)
(the peak bandwidth the driver reports, 3.35e12 for an H100 SXM by default; the CSVs `cargo xtask bench` writes with GPU_SELECT_BENCH_SECTIONS=rows-sweep and
GPU_SELECT_ROWS_ALGORITHM=warp-select / radix-select; run 41: raw/2026-11-23-h100-run41a-
rows-sweep-warp-select.csv and raw/2026-11-23-h100-run41b-rows-sweep-radix-select.csv).

Prints each constant under its name in rows_cost.rs: a non-negative least-squares fit of
each kernel's terms, weighted for relative error. The plan of each shape (warp or block per
row, parts, one or two reads) follows host/src/topk/rows.rs for a GPU of 132
multiprocessors; keep the two in step. Plain Python, no packages.
"""
import csv
import math
import sys

SMS = 132
SAMPLE, POOL = 1024, 6144


def queue_registers(k):
    padded = 1 << (k - 1).bit_length()
    return 1 if padded < 32 else padded // 32


def thread_registers(q, key_bytes):
    return 4 if q <= 8 or (q >= 32 and key_bytes == 8) else 8


def clamp(x, low, high):
    return max(low, min(high, x))


def queue_plan(rows, cols, k):
    """(warp_per_row, parts) as rows.rs's blocks_per_row and warp_per_row choose them."""
    target = SMS * 8
    if rows >= target:
        parts = 1
    else:
        min_part = max(4096, 4 * 32 * queue_registers(k))
        parts = clamp(min(-(-target // rows), cols // min_part), 1, 256)
    return (parts == 1 and rows >= SMS * 8 * 4), parts


def sample_gathering(wanted, length):
    expected = -(-(wanted * SAMPLE) // length)
    rank = expected + 3 * math.isqrt(expected) + 4
    gathered = (rank + 3 * math.isqrt(rank)) * length // SAMPLE
    return gathered if rank < SAMPLE and gathered <= POOL else None


def read_once(part_len, k, key_bytes):
    """rows.rs's read_once: the kernel's sample bounds the k-th best before its one read."""
    if key_bytes != 4 or part_len <= POOL:
        return False
    gathered = sample_gathering(min(k, part_len), part_len)
    return gathered is not None and gathered * 10 <= POOL * 9


def radix_plan(rows, cols, k, key_bytes):
    """None (a warp per row), or (parts, one_read) as rows.rs's plan chooses them
    (radix_blocks_per_row: one wave, parts of 8192 keys and k at least; from k = 512 the
    co-ranking merge's 8192 candidates where its parts are read once; for k <= 1024 split
    further until parts are read once)."""
    if cols <= 1024 and k <= 256:
        return None
    target = SMS * 2
    longest = clamp(cols // max(8192, k), 1, 256)
    bound = 8192 // k if k * 16 >= 8192 else 256
    once = lambda parts: read_once(cols // parts, k, key_bytes)
    most = min(longest, bound) if once(min(longest, bound)) or not once(longest) else longest
    parts = clamp(target // rows, 1, most)
    if k <= 1024:
        while parts < most and not once(parts) and once(most):
            parts *= 2
    parts = min(parts, most)
    return parts, once(parts)


def insertions(length, k):
    k = min(k, length)
    return k * (1 + math.log(max(length / k, 1)))


def sort_work(k):
    slots = max(64, 1 << (k - 1).bit_length())
    stages = math.log2(slots)
    return slots * stages * (stages + 1) / 2 / 2560


def waves(units, per_sm):
    return max(1.0, units / (SMS * per_sm))


QUEUE_TERMS = ["FIXED_MS", "PER_KILO_KEY", "PER_KILO_INSERT", "PER_KILO_MERGE", "BLOCK_MERGE",
               "SPLIT_FIXED_MS", "SPLIT_PER_KILO_KEY", "SPLIT_PER_KILO_INSERT", "PER_KILO_KEY_K1", "PER_KILO_KEY_64",
               "WARP_PER_ROW_UNIT"]


def queue_terms(key_bytes, rows, cols, k):
    width = key_bytes / 4
    q = queue_registers(k)
    merge_size = q * math.log2(32 * q)
    t = thread_registers(q, key_bytes)
    f = [0.0] * len(QUEUE_TERMS)
    f[0] = 1

    def warp_work(wv, warp_len, into):
        if key_bytes == 8 and into != "split":
            # 64-bit keys: a warp's read takes about as long per key as 32-bit ones (a load
            # instruction each, in flight alike), not twice: a term of their own, unscaled.
            f[9] += wv * warp_len / 1000
            if k == 1:
                return
        elif k == 1:
            f[8] += wv * warp_len * width / 1000
            return
        inserted = insertions(warp_len, k)
        if into == "split":
            f[6] += wv * warp_len * width / 1000
            f[7] += wv * (inserted + inserted * merge_size / t * width) / 1000
        else:
            if key_bytes != 8:
                f[1] += wv * warp_len * width / 1000
            f[2] += wv * inserted / 1000
            f[3] += wv * inserted * merge_size / t * width / 1000

    warp_per_row, parts = queue_plan(rows, cols, k)
    if warp_per_row:
        # A warp per row: its set-up and final write, whatever the row's length (what short
        # rows mostly cost).
        f[10] += waves(rows, 4)
        warp_work(waves(rows, 4), cols, "first")
    else:
        wv = waves(rows * parts, 1)
        warp_work(wv, cols / (4 * parts), "first")
        f[4] += wv * merge_size * width / 100
        if parts > 1:
            f[5] = 1
            if k > 1:
                warp_work(waves(rows, 1), parts * k / 4, "split")
    return f, 1


RADIX_TERMS = ["WARP_FIXED_MS", "WARP_PER_UNIT", "WARP_PER_KILO_KEY", "WARP_PER_KILO_K", "WARP_PER_SORT",
               "WARP_PER_UNIT_K1", "WARP_PER_KILO_KEY_K1",
               "BLOCK_FIXED_MS", "BLOCK_PER_UNIT", "BLOCK_PER_KILO_KEY_ONE_READ",
               "BLOCK_PER_KILO_KEY_TWO_READS", "BLOCK_PER_KILO_K", "MERGE_FIXED_MS", "MERGE_PER_KILO_CANDIDATE",
               "BLOCK_PER_KILO_KEY_64"]


def radix_terms(key_bytes, rows, cols, k):
    width = key_bytes / 4
    f = [0.0] * len(RADIX_TERMS)
    plan = radix_plan(rows, cols, k, key_bytes)
    if plan is None:
        # The warp kernel for the row length (rows.rs's warp_radix_row_length): its lanes
        # loop over length / 32 registers whatever the row holds.
        length = next(length for length in (128, 256, 512, 1024) if cols <= length)
        wv = waves(rows, 4)
        if k == 1:
            f[0], f[5], f[6] = 1, wv, wv * length * width / 1000
        else:
            f[0:5] = [1, wv, wv * length * width / 1000, wv * k / 1000, wv * sort_work(k)]
        return f, 1
    parts, one_read = plan
    wv = waves(rows * parts, 2)
    f[7], f[8] = 1, wv
    # 64-bit keys narrow from the row pass after pass (no pool): a term of their own.
    f[14 if key_bytes == 8 else 9 if one_read else 10] = wv * (cols // parts) * width / 1000
    f[11] = wv * k / 1000
    if parts > 1:
        f[12] = 1
        f[13] = waves(rows * -(-(parts * k) // 1024), 4) * parts * k / 1000
    return f, 1 if one_read else 2


def solve(rows_of_terms, times):
    """Least squares weighted by 1/time², dropping terms that come out negative."""
    active = list(range(len(rows_of_terms[0])))
    while True:
        n = len(active)
        a = [[0.0] * n for _ in range(n)]
        b = [0.0] * n
        for terms, ms in zip(rows_of_terms, times):
            x = [terms[i] for i in active]
            for i in range(n):
                b[i] += x[i] * ms / ms**2
                for j in range(n):
                    a[i][j] += x[i] * x[j] / ms**2
        for c in range(n):
            pivot = max(range(c, n), key=lambda r: abs(a[r][c]))
            a[c], a[pivot], b[c], b[pivot] = a[pivot], a[c], b[pivot], b[c]
            for r in range(n):
                if r != c and a[c][c]:
                    factor = a[r][c] / a[c][c]
                    a[r] = [x - factor * y for x, y in zip(a[r], a[c])]
                    b[r] -= factor * b[c]
        solution = [b[i] / a[i][i] if a[i][i] else 0.0 for i in range(n)]
        if all(v >= 0 for v in solution):
            full = [0.0] * len(rows_of_terms[0])
            for i, v in zip(active, solution):
                full[i] = v
            return full
        active.pop(min(range(n), key=lambda i: solution[i]))


def fit(path, terms_of, names, read_bytes_per_ms):
    shapes, times = [], []
    for row in csv.DictReader(open(path)):
        key_bytes = 8 if row["key"] == "f64" else 4
        shapes.append((key_bytes, int(row["rows"]), int(row["cols"]), int(row["k"])))
        times.append(float(row["ms"]))
    coefficients = solve([terms_of(*shape)[0] for shape in shapes], times)
    error = 0.0
    for shape, ms in zip(shapes, times):
        terms, reads = terms_of(*shape)
        compute = sum(c * t for c, t in zip(coefficients, terms))
        bound = reads * shape[1] * shape[2] * shape[0] / read_bytes_per_ms
        error += (max(compute, bound) / ms - 1) ** 2
    for name, value in zip(names, coefficients):
        print(f"    {name} = {value:.4g}")
    print(f"    (rms relative error {math.sqrt(error / len(times)):.3f} over {len(times)} shapes)")


if __name__ == "__main__":
    # The read floor: 90 % of the peak bandwidth the driver reports (H100 SXM by default).
    read_bytes_per_ms = (float(sys.argv[3]) if len(sys.argv) > 3 else 3.35e12) * 0.9 / 1e3
    print("queues:")
    fit(sys.argv[1], queue_terms, QUEUE_TERMS, read_bytes_per_ms)
    print("radix:")
    fit(sys.argv[2], radix_terms, RADIX_TERMS, read_bytes_per_ms)
