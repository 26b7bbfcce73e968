"""PyTorch's `torch.topk` on the shapes of `cargo xtask bench` section `large-k`.

The bench's distribution (not its exact values), stored as bf16 and f32: rows of logit-like
values (normal, standard deviation 4), largest (`torch.topk(x, k, dim=1)`): 64 × 131 072 at
k = 4096, 16 384 and 65 536; 256 × 262 144 at k = 16 384 and 131 072; 128 × 10^6 at
k = 10 000 (a k-NN query tile's distances). Median of 10 CUDA-event timings after 2 warm-up
calls, as the bench.

Run on the GPU machine: `python3 docs/results/large_k_torch.py` (writes
`$OUT/large_k_torch.json` when OUT is set).
"""
import json
import os

import torch

from torch_timing import median_ms

device = "cuda"
generator = torch.Generator(device=device).manual_seed(0)
results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": []}




def record(name, ms):
    results["cases"].append({"case": name, "ms": ms})
    print(f"{name}: {ms:.4f} ms", flush=True)


shapes = [(64, 131_072, [4096, 16_384, 65_536]), (256, 262_144, [16_384, 131_072]), (128, 1_000_000, [10_000])]
for rows, cols, ks in shapes:
    values = 4 * torch.randn(rows, cols, device=device, generator=generator)
    for name, dtype in [("bf16", torch.bfloat16), ("f32", torch.float32)]:
        x = values.to(dtype)
        for k in ks:
            record(f"torch.topk {name} {rows}x{cols} k={k}", median_ms(lambda: torch.topk(x, k, dim=1)))
        del x
    del values
out = os.environ.get("OUT")
if out:
    with open(os.path.join(out, "large_k_torch.json"), "w") as f:
        json.dump(results, f, indent=1)
