#!/usr/bin/env python3
"""Plots of the SBP sweep (bench section `sbp-sweep`, csv: dataset,n,k,op,algorithm,ms,
floor_ms): for each dataset and operation, time over the read floor against n (log scale),
one line per algorithm, one panel per K. Plain SVG (no plotting package on the machines).

Usage: sbp_plot.py SWEEP.csv OUT_PREFIX  ->  OUT_PREFIX-<dataset>-<op>.svg
"""
import csv
import math
import sys
from collections import defaultdict

COLOURS = {
    "sbp-radix": "#d62728", "radix": "#ff9896", "sbp-tree": "#1f77b4", "sample": "#aec7e8",
    "bitonic": "#2ca02c", "auto": "#7f7f7f",
}
PANEL_W, PANEL_H, MARGIN = 260, 200, 48


def panel(x0, y0, series, k, ymax):
    """One panel: × floor (0 … ymax, linear) against log2 n."""
    out = [f'<g transform="translate({x0},{y0})">',
           f'<rect width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#999"/>',
           f'<text x="{PANEL_W / 2}" y="-6" text-anchor="middle" font-size="12">K = {k}</text>']
    logs = sorted({log for points in series.values() for log, _ in points})
    lo, hi = logs[0], logs[-1]
    px = lambda log: (log - lo) / max(hi - lo, 1) * PANEL_W
    py = lambda ratio: PANEL_H - min(ratio, ymax) / ymax * PANEL_H
    for tick in range(0, int(ymax) + 1):
        out.append(f'<line x1="0" x2="{PANEL_W}" y1="{py(tick):.1f}" y2="{py(tick):.1f}" stroke="#eee"/>')
        out.append(f'<text x="-4" y="{py(tick) + 4:.1f}" text-anchor="end" font-size="10">{tick}×</text>')
    for log in logs:
        out.append(f'<text x="{px(log)}" y="{PANEL_H + 14}" text-anchor="middle" font-size="10">2^{log}</text>')
    for name, points in series.items():
        path = " ".join(f"{px(log):.1f},{py(ratio):.1f}" for log, ratio in sorted(points))
        out.append(f'<polyline points="{path}" fill="none" stroke="{COLOURS.get(name, "#000")}" stroke-width="2"/>')
    out.append("</g>")
    return out


def main():
    rows = list(csv.DictReader(open(sys.argv[1])))
    prefix = sys.argv[2]
    groups = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for row in rows:
        ratio = float(row["ms"]) / float(row["floor_ms"])
        log = int(math.log2(int(row["n"])))
        groups[(row["dataset"], row["op"])][int(row["k"])][row["algorithm"]].append((log, ratio))
    for (dataset, op), by_k in groups.items():
        ks = sorted(by_k)
        ymax = max(2.0, min(12.0, math.ceil(max(r for s in by_k.values() for p in s.values() for _, r in p))))
        width = MARGIN + len(ks) * (PANEL_W + MARGIN)
        height = PANEL_H + 2 * MARGIN + 30
        svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif">',
               f'<text x="{MARGIN}" y="16" font-size="14">SBP sweep, {dataset}, {op}: time / read floor '
               f'against n (f32, largest; ratios above {ymax:.0f}× drawn at the top)</text>']
        for i, k in enumerate(ks):
            svg += panel(MARGIN + i * (PANEL_W + MARGIN), MARGIN, by_k[k], k, ymax)
        names = sorted({name for s in by_k.values() for name in s})
        for i, name in enumerate(names):
            x = MARGIN + i * 110
            y = PANEL_H + 2 * MARGIN + 10
            svg.append(f'<line x1="{x}" x2="{x + 20}" y1="{y}" y2="{y}" stroke="{COLOURS.get(name, "#000")}" stroke-width="3"/>')
            svg.append(f'<text x="{x + 24}" y="{y + 4}" font-size="11">{name}</text>')
        svg.append("</svg>")
        path = f"{prefix}-{dataset}-{op}.svg"
        open(path, "w").write("\n".join(svg))
        print("written:", path)


if __name__ == "__main__":
    main()
