"""PyTorch's `torch.topk` and `torch.kthvalue` on the shapes of `cargo xtask bench` section
`half`, and FlashInfer's top-k where it is installed.

The bench's distributions (not its exact values), stored as bf16, f16 and f32: rows of
64 × 131 072, 256 × 262 144 and 1 × 262 144 of logit-like values (normal, standard
deviation 4) at k = 50 and 1024, largest (`torch.topk(x, k, dim=1)`: LLM sampling's shape);
1-D 2^28 uniform values in [0, 1) at k = 1024 and 262 144 (torch has no selection that
beats its sort for the median: not timed here).
Median of 10 CUDA-event timings after 2 warm-up calls, as the bench.

Run on the GPU machine: `python3 docs/results/half_torch.py` (writes `$OUT/half_torch.json`
when OUT is set). With `--sweep`, instead: `torch.topk` on the shapes of the bench's
`half-sweep` section (bf16 rows, batch 1, 64, 256 × vocabulary 32 000, 65 536, 131 072,
262 144, k = 1, 50, 256, 1024), written as `half-sweep-torch.csv` (`key,rows,cols,k,ms`)
to `$OUT` (or the current folder), for `half_plot.py`.
"""
import json
import os
import sys

import torch

from torch_timing import median_ms

device = "cuda"
generator = torch.Generator(device=device).manual_seed(0)
results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": []}
try:
    import flashinfer  # noqa: F401

    results["flashinfer"] = flashinfer.__version__
except Exception as error:  # not installed on the GPU machine: say so
    flashinfer = None
    results["flashinfer"] = f"unavailable: {error}"
print("flashinfer:", results["flashinfer"], flush=True)




if "--sweep" in sys.argv:
    lines = ["key,rows,cols,k,ms"]
    for rows in [1, 64, 256]:
        for cols in [32_000, 65_536, 131_072, 262_144]:
            x = (4 * torch.randn(rows, cols, device=device, generator=generator)).to(torch.bfloat16)
            for k in [1, 50, 256, 1024]:
                ms = median_ms(lambda: torch.topk(x, k, dim=1))
                print(f"torch.topk bf16 {rows}x{cols} k={k}: {ms:.4f} ms", flush=True)
                lines.append(f"bf16,{rows},{cols},{k},{ms:.5f}")
            del x
    with open(os.path.join(os.environ.get("OUT", "."), "half-sweep-torch.csv"), "w") as f:
        f.write("\n".join(lines) + "\n")
    sys.exit(0)


def record(name, ms):
    results["cases"].append({"case": name, "ms": ms})
    print(f"{name}: {ms:.4f} ms", flush=True)


dtypes = [("bf16", torch.bfloat16), ("f16", torch.float16), ("f32", torch.float32)]
for rows, cols in [(64, 131_072), (256, 262_144), (1, 262_144)]:
    values = 4 * torch.randn(rows, cols, device=device, generator=generator)
    for name, dtype in dtypes:
        x = values.to(dtype)
        for k in [50, 1024]:
            record(f"torch.topk {name} {rows}x{cols} k={k}", median_ms(lambda: torch.topk(x, k, dim=1)))
            if flashinfer is not None and name != "f32":
                try:
                    ms = median_ms(lambda: flashinfer.top_k(x, k))
                    record(f"flashinfer.top_k {name} {rows}x{cols} k={k}", ms)
                except Exception as error:
                    print(f"flashinfer.top_k {name}: {error}", flush=True)
    del values
n = 1 << 28
values = torch.rand(n, device=device, generator=generator)
for name, dtype in dtypes:
    x = values.to(dtype)
    for k in [1024, 262_144]:
        record(f"torch.topk {name} n=2^28 k={k}", median_ms(lambda: torch.topk(x, k)))
    del x
out = os.environ.get("OUT")
if out:
    with open(os.path.join(out, "half_torch.json"), "w") as f:
        json.dump(results, f, indent=1)
