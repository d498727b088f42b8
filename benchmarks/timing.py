"""The one way this package times code.

GPU: warm-up calls, then each call between two CUDA events, median of the repeats.
CPU: warm-up calls, then each call on a monotonic clock, median of the repeats.
Callers pass a function of the repeat index so that they can rotate between several
input sets (small inputs would otherwise sit in cache and flatter every variant).
"""

import importlib.metadata
import statistics
import time
from collections import Counter

import torch


def median_ms(fn, device, warmup=10, reps=50):
    """Median wall time of fn(i) in milliseconds; fn(i) gets the repeat index."""
    for i in range(warmup):
        fn(i)
    times = []
    if device == "cuda":
        torch.cuda.synchronize()
        for i in range(reps):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn(i)
            end.record()
            times.append((start, end))
        torch.cuda.synchronize()
        ms = [s.elapsed_time(e) for s, e in times]
    else:
        for i in range(reps):
            t0 = time.perf_counter()
            fn(i)
            times.append((time.perf_counter() - t0) * 1e3)
        ms = times
    return statistics.median(ms)


def cuda_kernels(fn, calls=3):
    """CUDA kernels run by fn(i): {name: (launches per call, total ms per call)}."""
    fn(0)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            fn(i)
        torch.cuda.synchronize()
    count, total = Counter(), Counter()
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            count[ev.name] += 1
            total[ev.name] += ev.device_time_total / 1e3  # us -> ms
    return {k: (count[k] / calls, total[k] / calls) for k in count}


def copy_bandwidth_gbs(nbytes=1 << 30):
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 4, device="cuda", dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    ms = median_ms(lambda i: dst.copy_(src), "cuda", warmup=3, reps=20)
    return 2 * nbytes / (ms * 1e-3) / 1e9


def environment():
    env = {"torch": torch.__version__, "cuda": torch.version.cuda}
    try:
        env["package"] = importlib.metadata.version("torch-fused-ops")
    except importlib.metadata.PackageNotFoundError:
        env["package"] = "source tree (not installed)"
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name()
    return env
