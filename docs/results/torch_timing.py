"""The timing the torch peer scripts beside it share (half_torch.py, large_k_torch.py,
knn_torch.py): `warmups` calls, then the median of `runs` CUDA-event timings, in ms, as the
bench times the library.
"""
import torch


def median_ms(fn, warmups=2, runs=10):
    for _ in range(warmups):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    return sorted(times)[runs // 2]
