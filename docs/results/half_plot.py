#!/usr/bin/env python3
"""Plots of the half-precision sweep beside torch's: the bench's `half-sweep` section
(`half-sweep.csv`: key,rows,cols,k,ms,floor_ms) and `half_torch.py --sweep`
(`half-sweep-torch.csv`: key,rows,cols,k,ms), bf16 rows, largest. Two figures, one panel
per batch (rows): time against the vocabulary n, one line per k; and time against k, one
line per n. This library solid, torch.topk dashed, the read floor dotted (grey). Log scales
both ways. Plain SVG (no plotting package on the machines).

Usage: half_plot.py half-sweep.csv half-sweep-torch.csv OUT_PREFIX
  ->  OUT_PREFIX-n.svg, OUT_PREFIX-k.svg
"""
import csv
import math
import sys
from collections import defaultdict

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
PANEL_W, PANEL_H, MARGIN = 260, 220, 56


def load(path):
    return {(int(r["rows"]), int(r["cols"]), int(r["k"])): r for r in csv.DictReader(open(path))}


def panel(x0, y0, title, xs, series, yrange):
    """One panel: ms (log) against x (log2). `series`: (colour, dash, [(x, ms)])."""
    lo, hi = yrange
    xlo, xhi = math.log2(min(xs)), math.log2(max(xs))
    px = lambda x: (math.log2(x) - xlo) / max(xhi - xlo, 1e-9) * PANEL_W
    py = lambda ms: PANEL_H - (math.log10(ms) - lo) / (hi - lo) * PANEL_H
    out = [f'<g transform="translate({x0},{y0})">',
           f'<rect width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#999"/>',
           f'<text x="{PANEL_W / 2}" y="-6" text-anchor="middle" font-size="12">{title}</text>']
    decade = math.floor(lo)
    while decade <= hi:
        for step in (1, 2, 5):
            value = step * 10 ** decade
            if lo <= math.log10(value) <= hi:
                y = py(value)
                out.append(f'<line x1="0" x2="{PANEL_W}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
                out.append(f'<text x="-4" y="{y + 4:.1f}" text-anchor="end" font-size="10">{value:g}</text>')
        decade += 1
    for x in xs:
        out.append(f'<text x="{px(x):.1f}" y="{PANEL_H + 14}" text-anchor="middle" font-size="10">{x:,}</text>')
    for colour, dash, points in series:
        path = " ".join(f"{px(x):.1f},{py(ms):.1f}" for x, ms in sorted(points))
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2" '
                   f'stroke-dasharray="{dash}"/>')
    out.append("</g>")
    return out


def figure(path, title, batches, xs, lines, xlabel, ours, torch, key):
    """`key(batch, line, x)` gives the (rows, cols, k) of a point."""
    values = [float(r["ms"]) for r in list(ours.values()) + list(torch.values())]
    values += [float(r["floor_ms"]) for r in ours.values()]
    yrange = (math.log10(min(values)) - 0.05, math.log10(max(values)) + 0.05)
    width = MARGIN + len(batches) * (PANEL_W + MARGIN)
    height = PANEL_H + 2 * MARGIN + 40
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif">',
           f'<text x="{MARGIN}" y="18" font-size="14">{title}</text>']
    for i, batch in enumerate(batches):
        series = []
        for j, line in enumerate(lines):
            colour = COLOURS[j % len(COLOURS)]
            for table, dash in ((ours, ""), (torch, "6,4")):
                points = [(x, float(table[key(batch, line, x)]["ms"])) for x in xs if key(batch, line, x) in table]
                series.append((colour, dash, points))
        floor = {}
        for x in xs:
            for line in lines:
                if key(batch, line, x) in ours:
                    floor[x] = float(ours[key(batch, line, x)]["floor_ms"])
        series.append(("#999", "2,3", sorted(floor.items())))
        svg += panel(MARGIN + i * (PANEL_W + MARGIN), MARGIN, f"batch {batch}: ms against {xlabel}", xs, series, yrange)
    y = PANEL_H + 2 * MARGIN + 14
    for j, line in enumerate(lines):
        x = MARGIN + j * 120
        svg.append(f'<line x1="{x}" x2="{x + 20}" y1="{y}" y2="{y}" stroke="{COLOURS[j % len(COLOURS)]}" stroke-width="3"/>')
        svg.append(f'<text x="{x + 24}" y="{y + 4}" font-size="11">{line}</text>')
    svg.append(f'<text x="{MARGIN}" y="{y + 22}" font-size="11">solid: gpu-select (Auto); dashed: torch.topk; '
               'dotted grey: read floor of the bf16 rows</text>')
    svg.append("</svg>")
    open(path, "w").write("\n".join(svg))
    print("written:", path)


def main():
    ours, torch, prefix = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
    batches = sorted({rows for rows, _, _ in ours})
    ns = sorted({cols for _, cols, _ in ours})
    ks = sorted({k for _, _, k in ours})
    figure(f"{prefix}-n.svg", "bf16 top-k of LLM logit rows: time against the vocabulary n, one line per k",
           batches, ns, [f"k = {k}" for k in ks], "n", ours, torch,
           lambda batch, line, x: (batch, x, int(line.split()[-1])))
    figure(f"{prefix}-k.svg", "bf16 top-k of LLM logit rows: time against k, one line per vocabulary n",
           batches, ks, [f"n = {n:,}" for n in ns], "k", ours, torch,
           lambda batch, line, x: (batch, int(line.split()[-1].replace(",", "")), x))


if __name__ == "__main__":
    main()
