"""PyTorch's `torch.quantile(x, q, dim=1)` (numpy's linear method, PyTorch's default) on the
shapes of the bench's `quantiles-rows` section (f32 uniform in [0, 1)), for 5 and 101
evenly spaced quantiles: on the device, and with the result copied to the host (as
`Gpu::quantiles_rows` returns it). Median of 10 CUDA-event timings after 2 warm-up calls, as
the bench.

Run on the GPU machine: `python3 docs/results/quantiles_rows_torch.py`; writes
`quantiles-rows-torch.csv` (`rows,cols,m,device_ms,to_host_ms`) to `$OUT` (or here).
"""
import os

import torch

from torch_timing import median_ms

SHAPES = [(10_000, 1000), (1000, 10_000), (100, 100_000), (64, 1 << 18), (16, 1 << 20)]

generator = torch.Generator(device="cuda").manual_seed(0)
lines = ["rows,cols,m,device_ms,to_host_ms"]
for rows, cols in SHAPES:
    x = torch.rand(rows, cols, device="cuda", generator=generator)
    for m in [5, 101]:
        q = torch.linspace(0, 1, m, device="cuda", dtype=torch.float32)
        try:
            device = median_ms(lambda: torch.quantile(x, q, dim=1))
            to_host = median_ms(lambda: torch.quantile(x, q, dim=1).cpu())
        except RuntimeError as error:  # torch refuses inputs beyond 2^24 elements
            print(f"torch.quantile f32 {rows}x{cols} m={m}: {error}", flush=True)
            continue
        print(f"torch.quantile f32 {rows}x{cols} m={m}: {device:.4f} ms, to the host {to_host:.4f} ms", flush=True)
        lines.append(f"{rows},{cols},{m},{device:.5f},{to_host:.5f}")
    del x
with open(os.path.join(os.environ.get("OUT", "."), "quantiles-rows-torch.csv"), "w") as f:
    f.write("\n".join(lines) + "\n")
