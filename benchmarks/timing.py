"""The one way this package times code.

GPU: warm-up calls, then each call between two CUDA events, median of the repeats.
CPU: warm-up calls, then each call on a monotonic clock, median of the repeats.
Functions whose times are compared (a speedup claim) can be timed in alternating rounds
(`medians_ms`), so that a busy spell of the machine reaches all of them alike.
The timed function gets the repeat index so that it can rotate round-robin between
several input sets (`input_sets` says how many): small inputs would otherwise sit in
cache and flatter every variant. `call_stats` gives, on GPU, the kernel launches of
one call (profiler) and the memory it allocates at its peak.
"""

import importlib.metadata
import math
import os
import platform
import statistics
import subprocess
import time
from collections import Counter

import torch

# float32 FMA peak (non-tensor) of the H100 SXM, ANCHORS.md: the FLOP/s floor of the
# families that compute (LLTM, TimeX); "% peak" columns are fractions of it.
PEAK_FP32_TFLOPS = 60.0
CPU_CACHE_BYTES = 32 << 20  # a generous last-level cache for the CPU machines
MAX_SETS = 8
MAX_REPS = 5000


def single_threaded(fn):
    """fn run with autograd's engine single-threaded (torch.autograd.set_multithreading_enabled
    (False)): a CUDA backward then runs on the calling thread, not on the engine's device
    thread, so the timing leaves out the handoff to that thread and back."""

    def run(*args):
        with torch.autograd.set_multithreading_enabled(False):
            return fn(*args)

    return run


def median_ms(fn, device, warmup=10, reps=50, budget_s=None, min_s=None):
    """Median wall time of fn(i) in milliseconds; fn(i) gets the repeat index.

    At least one warm-up call; reps repeats, judged from the last warm-up call: with
    budget_s, fewer (at least 3) so that they take about budget_s seconds; with min_s, more
    (at most MAX_REPS) so that they take at least min_s seconds (calls of a fraction of a
    millisecond need thousands of repeats for a stable median on a busy machine).
    """
    return medians_ms([fn], device, warmup, reps, budget_s, min_s)[0]


def medians_ms(fns, device, warmup=10, reps=50, budget_s=None, min_s=None, rounds=1):
    """median_ms of each function of fns, their repeats split into `rounds` rounds that
    time each function in turn: a change of machine load during the measurement then
    reaches them alike, so their ratios hold (timing one after the other, a busy spell
    can land on one of them only)."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    warmup = max(1, warmup)
    counts = []
    for fn in fns:
        for i in range(warmup - 1):
            fn(i)
        sync()
        t0 = time.perf_counter()
        fn(warmup - 1)
        sync()
        one_s = max(time.perf_counter() - t0, 1e-6)
        n = reps
        if budget_s is not None:
            n = max(3, min(n, int(budget_s / one_s)))
        if min_s is not None:
            n = max(n, min(MAX_REPS, int(min_s / one_s)))
        counts.append(n)
    samples = [[] for _ in fns]
    done = [0] * len(fns)
    for r in range(rounds):
        for k, fn in enumerate(fns):
            n = counts[k] * (r + 1) // rounds - done[k]  # this round's share of the repeats
            samples[k] += _time_calls(fn, device, warmup + done[k], n)
            done[k] += n
    return [statistics.median(ms) for ms in samples]


def _time_calls(fn, device, first, n):
    """Milliseconds of each of the calls fn(first), ..., fn(first + n - 1)."""
    if device == "cuda":
        events = []
        for i in range(first, first + n):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn(i)
            end.record()
            events.append((start, end))
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in events]
    times = []
    for i in range(first, first + n):
        t0 = time.perf_counter()
        fn(i)
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def input_sets(make, set_bytes, device):
    """[make() for each set]: enough sets (1 to MAX_SETS) that a round-robin over them
    touches at least twice the last-level cache (the GPU's L2 on CUDA)."""
    if device == "cuda":
        cache = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()),
                        "L2_cache_size", 50 << 20)
    else:
        cache = CPU_CACHE_BYTES
    count = max(1, min(MAX_SETS, math.ceil(2 * cache / max(set_bytes, 1))))
    return [make() for _ in range(count)]


def _cuda_events(fn, calls):
    """The profiler's CUDA events of fn(1) .. fn(calls), after one warm-up call."""
    fn(0)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            fn(i)
        torch.cuda.synchronize()
    return [ev for ev in prof.events() if ev.device_type == torch.autograd.DeviceType.CUDA]


def cuda_kernels(fn, calls=3):
    """CUDA kernels run by fn(i): {name: (launches per call, total ms per call)}."""
    count, total = Counter(), Counter()
    for ev in _cuda_events(fn, calls):
        count[ev.name] += 1
        total[ev.name] += ev.device_time_total / 1e3  # us -> ms
    return {k: (count[k] / calls, total[k] / calls) for k in count}


def cuda_busy_ms(fn, calls=3):
    """The GPU's busy time per fn(i) call in ms: the union of its kernels' (and copies')
    intervals from the profiler, so that kernels running at the same time count once (a sum of
    their times, as cuda_kernels gives, counts an overlapped kernel's whole span again)."""
    spans = [(ev.time_range.start, ev.time_range.end) for ev in _cuda_events(fn, calls)]
    return union_length(spans) / 1e3 / calls  # us -> ms


def union_length(spans):
    """The length of the union of the intervals (start, end)."""
    busy, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        if stop <= end:
            continue
        busy += stop - max(start, end)
        end = stop
    return busy


def peak_mib(fn):
    """Peak CUDA memory allocated while fn(0) runs, above what was allocated before it
    (its outputs included), in MiB."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = fn(0)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del result
    return peak / 2**20


def call_stats(fn, device):
    """(kernel launches per call, peak MiB allocated per call) of fn(i); (None, None) on CPU,
    where neither is measured. Launches are None where the profiler saw no kernel (code
    that launches outside torch's view), peak MiB counts only torch's allocator."""
    if device != "cuda":
        return None, None
    launches = sum(n for n, _ in cuda_kernels(fn).values())
    return launches or None, peak_mib(fn)


def copy_bandwidth_gbs(nbytes=1 << 30):
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 4, device="cuda", dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    ms = median_ms(lambda i: dst.copy_(src), "cuda", warmup=3, reps=20)
    return 2 * nbytes / (ms * 1e-3) / 1e9


def _command(*args):
    try:
        return subprocess.run(args, capture_output=True, text=True, check=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment():
    """Everything a reader needs to place a result: versions, device, driver, commit."""
    env = {"torch": torch.__version__, "cuda": torch.version.cuda,
           "python": platform.python_version(), "platform": platform.platform(),
           "cpu": _cpu_model(), "cpu_count": os.cpu_count(),
           # CPU times mean little on a busy machine: say how busy it was.
           "load_average_1_5_15min": [round(x, 2) for x in os.getloadavg()]}
    try:
        env["package"] = importlib.metadata.version("torch-fused-ops")
    except importlib.metadata.PackageNotFoundError:
        env["package"] = "source tree (not installed)"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["commit"] = (_command("git", "-C", root, "rev-parse", "--short", "HEAD")
                     or os.environ.get("FUSED_OPS_COMMIT", "unknown"))  # a copy without .git
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name()
        smi = _command("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
        if smi:
            env["driver"] = smi.splitlines()[0]
        else:  # the CUDA driver API version, e.g. 13000
            env["driver"] = f"CUDA driver API {torch._C._cuda_getDriverVersion()}"
    for name in ("taichi", "matplotlib", "triton"):
        try:
            env[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return env
