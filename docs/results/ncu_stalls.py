"""Summarises one kernel's `ncu --page source --print-source sass --csv` listing (written by
`docs/results/profile-gpu.sh ncu-source`): the stall samples and warp instructions executed
in all, the stall reasons' shares, then the instructions with the most samples (index,
samples, executions, SASS, the top two reasons). ncu lists each instruction twice in some
exports; rows are taken once per address.

Usage: python3 docs/results/ncu_stalls.py source-KERNEL.csv [how many instructions, 40] [window]

With a window (a number of instructions), the share of the stall samples and the warp
instructions executed in each window of that many consecutive SASS instructions follow
(windows of at least 1.5 % of the samples): which part of a kernel (a loop, a sort) the time
goes to.
"""

import csv
import sys


def number(text):
    return int(text) if text.isdigit() else 0


def main():
    rows = list(csv.reader(open(sys.argv[1])))
    start = next(i for i, row in enumerate(rows) if row and row[0] == "Address")
    header = rows[start]
    seen = set()
    data = []
    for row in rows[start + 1:]:
        if len(row) == len(header) and row[0] not in seen:
            seen.add(row[0])
            data.append(row)
    samples = header.index("Warp Stall Sampling (All Samples)")
    source = header.index("Source")
    executed = header.index("Instructions Executed")
    reasons = [i for i, name in enumerate(header) if name.startswith("stall_") and "Not Issued" not in name]
    total = sum(number(row[samples]) for row in data)
    print("samples", total, "warp instr executed", sum(number(row[executed]) for row in data))
    shares = {header[i]: sum(number(row[i]) for row in data) for i in reasons}
    top_reasons = sorted(shares.items(), key=lambda item: -item[1])[:8]
    print([(name[len("stall_"):], round(100 * count / max(total, 1), 1)) for name, count in top_reasons])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    hottest = sorted(range(len(data)), key=lambda j: -number(data[j][samples]))[:count]
    for j in sorted(hottest):
        row = data[j]
        why = sorted(((number(row[i]), header[i][len("stall_"):]) for i in reasons if number(row[i]) > 0), reverse=True)
        print(j, row[samples], row[executed], row[source].strip()[:70], why[:2])
    if len(sys.argv) > 3:
        window = int(sys.argv[3])
        for first in range(0, len(data), window):
            part = data[first:first + window]
            share = sum(number(row[samples]) for row in part)
            if share * 1000 >= total * 15:
                executions = sum(number(row[executed]) for row in part)
                print(f"{first:6d}-{first + window:6d} samples {100 * share / total:5.1f}% exec {executions}")


if __name__ == "__main__":
    main()
