"""PyTorch's `torch.topk(x, k, dim=1, largest=False)` on the short rows of the bench's
`rows-sweep` (f32 uniform values in [0, 1); rows of at most 1024 keys, the shapes the warp
kernels take), at the sweep's `k` up to 256 and the row length.
Median of 10 CUDA-event timings after 2 warm-up calls, as the bench.

Run on the GPU machine: `python3 docs/results/short_rows_torch.py`; writes
`short-rows-torch.csv` (`key,rows,cols,k,ms`) to `$OUT` (or the current folder).
"""
import os

import torch

from torch_timing import median_ms

SHAPES = [(100_000, 128), (10_000, 128), (100_000, 256), (10_000, 256), (100_000, 512),
          (10_000, 1000), (100_000, 1000)]
KS = [1, 8, 32, 100, 256]

generator = torch.Generator(device="cuda").manual_seed(0)
lines = ["key,rows,cols,k,ms"]
for rows, cols in SHAPES:
    x = torch.rand(rows, cols, device="cuda", generator=generator)
    for k in [k for k in KS if k <= cols]:
        ms = median_ms(lambda: torch.topk(x, k, dim=1, largest=False))
        print(f"torch.topk f32 {rows}x{cols} k={k}: {ms:.4f} ms", flush=True)
        lines.append(f"f32,{rows},{cols},{k},{ms:.5f}")
    del x
with open(os.path.join(os.environ.get("OUT", "."), "short-rows-torch.csv"), "w") as f:
    f.write("\n".join(lines) + "\n")
