"""PyTorch's exact k-NN on SIFT1M's shape, beside `cargo xtask bench` section `knn`.

The same shapes as the bench (10^6 base vectors of 128 components, clustered like SIFT;
10^4 queries, 10^3 at k = 10 000), timed with CUDA events, the median of three after one
warm-up, queries in batches of 1024 (the whole distance matrix, 40 GB, is what a user
would avoid):

- `matmul+topk`: ‖y‖² − 2⟨x, y⟩ by `torch.addmm` (f32, TF32 off), then `torch.topk`;
- `cdist+topk`: `torch.cdist` (Euclidean) then `torch.topk`;
- the matrix product alone, 1024 × 128 by 128 × 10^6, in f32 and in TF32: its TFLOP/s.

Run on the GPU machine: `python3 docs/results/knn_torch.py` (writes `$OUT/knn_torch.json`
when OUT is set); with `PRODUCT_ONLY=1` only the matrix product.
"""
import json
import os

import torch

from torch_timing import median_ms as timed_ms


def median_ms(fn):
    return timed_ms(fn, warmups=1, runs=3)

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
device = "cuda"
base_count, query_count, dim, batch = 1_000_000, 10_000, 128, 1024
generator = torch.Generator(device=device).manual_seed(0)


def sift_like(count):
    centres = torch.rand(1000, dim, device=device, generator=generator) * 128
    picks = torch.randint(0, 1000, (count,), device=device, generator=generator)
    return centres[picks] + (torch.rand(count, dim, device=device, generator=generator) - 0.5) * 12.8




base = sift_like(base_count)
queries = sift_like(query_count)
base_norms = (base * base).sum(1)
results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": []}


def record(name, ms, extra=None):
    row = {"case": name, "ms": ms}
    row.update(extra or {})
    results["cases"].append(row)
    print(f"{name}: {ms:.3f} ms" + (f" {extra}" if extra else ""), flush=True)


def matmul_topk(count, k):
    for start in range(0, count, batch):
        x = queries[start : min(start + batch, count)]
        distances = torch.addmm(base_norms.unsqueeze(0), x, base.t(), beta=1.0, alpha=-2.0)
        torch.topk(distances, k, dim=1, largest=False)


def cdist_topk(count, k):
    for start in range(0, count, batch):
        x = queries[start : min(start + batch, count)]
        torch.topk(torch.cdist(x, base), k, dim=1, largest=False)


searches = [(1, query_count), (10, query_count), (100, query_count), (1000, query_count), (10_000, 1000)]
for k, count in [] if os.environ.get("PRODUCT_ONLY") else searches:
    record(f"matmul+topk L2 {count} queries x 1e6 x 128 k={k}", median_ms(lambda: matmul_topk(count, k)))
    record(f"cdist+topk L2 {count} queries x 1e6 x 128 k={k}", median_ms(lambda: cdist_topk(count, k)))

x = queries[:batch]
flops = 2.0 * batch * base_count * dim
for label, tf32 in [("f32", False), ("tf32", True)]:
    torch.backends.cuda.matmul.allow_tf32 = tf32
    ms = median_ms(lambda: torch.mm(x, base.t()))
    record(f"matmul 1024 x 128 x 1e6 {label}", ms, {"tflops": round(flops / ms / 1e9, 2)})
torch.backends.cuda.matmul.allow_tf32 = False

if os.environ.get("OUT"):
    with open(os.path.join(os.environ["OUT"], "knn_torch.json"), "w") as f:
        json.dump(results, f, indent=1)
