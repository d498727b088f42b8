"""GPU time of each of this package's kernels, and the host time of a call, at the benchmark
shapes: the before/after check of a change that must not slow a kernel (the stable-ABI port).

    python -m benchmarks.kernel_times --out FILE.json      # measure the installed build
    python -m benchmarks.kernel_times --compare A.json B.json   # markdown table, B against A

Kernel times come from torch.profiler (CUDA activity), over `--reps` calls of each op after
warm-up: per kernel name, the median duration of its launches. Host times are the wall time of
a call on tiny CPU tensors, one thread, median of many calls: what the Python op wrapper,
autograd and the dispatcher add to a call. Every function uses only the public API, so the
same file measures any build (run it as a script with that build on PYTHONPATH; it imports
the families only to measure).
"""

import argparse
import json
import statistics
import time

import torch


def lltm_case(B, F, S, dtype=torch.float32):
    import lltm

    def make():
        x = torch.randn(B, F, device="cuda", dtype=dtype, requires_grad=True)
        w = (torch.randn(3 * S, S + F, device="cuda", dtype=dtype) / (S + F) ** 0.5)
        b = torch.randn(3 * S, device="cuda", dtype=dtype)
        h = torch.randn(B, S, device="cuda", dtype=dtype)
        c = torch.randn(B, S, device="cuda", dtype=dtype)
        return x, w.requires_grad_(), b.requires_grad_(), h.requires_grad_(), c.requires_grad_()

    args = make()

    def step():
        new_h, new_c = lltm.lltm_cell(*args)
        (new_h.sum() + new_c.sum()).backward()

    return f"lltm step {(B, F, S)} {str(dtype)[6:]}", step


def timex_case(B, C, T, dtype=torch.float32):
    import rwkv_ops

    w = torch.randn(C, T, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(B, C, T, device="cuda", dtype=dtype, requires_grad=True)
    g = torch.randn(B, C, T, device="cuda", dtype=dtype)

    def step():
        rwkv_ops.timex(w, k).backward(g)

    return f"timex fwd+bwd {(B, C, T)} {str(dtype)[6:]}", step


def pad_case(shape, pad, shift, dtype=torch.float32):
    import padding_ops

    x = torch.randn(*shape, device="cuda", dtype=dtype, requires_grad=True)

    def step():
        y = padding_ops.tile_pad(x, pad, shift)
        y.backward(torch.ones_like(y))

    return f"tile_pad fwd+bwd {tuple(shape)} pad {pad} shift {shift}", step


def cases():
    return [
        lltm_case(16, 32, 128), lltm_case(256, 256, 1024), lltm_case(512, 512, 1024),
        lltm_case(256, 256, 1024, torch.bfloat16), lltm_case(16, 32, 128, torch.float64),
        timex_case(32, 768, 768), timex_case(8, 1024, 1024), timex_case(64, 768, 256),
        timex_case(4, 1024, 4096), timex_case(8, 1024, 1024, torch.bfloat16),
        pad_case((4096, 8192), (16, 16, 24, 24), 3000), pad_case((8, 3, 512, 512), (64, 64, 64, 64), 100),
    ]


def kernel_medians(step, reps):
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            step()
        torch.cuda.synchronize()
    durations = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            durations.setdefault(event.name, []).append(event.device_time)
    # Kernels launched once per step (some cases launch a kernel from cuBLAS several times).
    return {name: statistics.median(us) for name, us in durations.items() if len(us) >= reps}


def host_us(fn, reps=2000):
    for _ in range(50):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def host_cases():
    """Per-call host time on tiny CPU tensors (the op wrappers, autograd and dispatcher)."""
    import lltm
    import padding_ops
    import rwkv_ops

    x, w, b = torch.randn(2, 3), torch.randn(12, 7), torch.randn(12)
    h, c = torch.randn(2, 4), torch.randn(2, 4)
    wg, xg, bg, hg, cg = (t.clone().requires_grad_() for t in (w, x, b, h, c))
    tw, tk = torch.randn(3, 8), torch.randn(2, 3, 8)
    twg, tkg = tw.clone().requires_grad_(), tk.clone().requires_grad_()
    img = torch.randn(5, 6)
    imgg = img.clone().requires_grad_()

    def lltm_grad():
        new_h, new_c = lltm.lltm_cell(xg, wg, bg, hg, cg)
        torch.autograd.grad((new_h, new_c), (xg, wg, bg, hg, cg), (h, c))

    def timex_grad():
        torch.autograd.grad(rwkv_ops.timex(twg, tkg), (twg, tkg), tk)

    def pad_grad():
        y = padding_ops.tile_pad(imgg, (1, 2, 3, 4), 1)
        torch.autograd.grad(y, imgg, y)

    with torch.no_grad():
        rows = {
            "lltm_cell, no grad": host_us(lambda: lltm.lltm_cell(x, w, b, h, c)),
            "timex, no grad": host_us(lambda: rwkv_ops.timex(tw, tk)),
            "tile_pad, no grad": host_us(lambda: padding_ops.tile_pad(img, (1, 2, 3, 4), 1)),
        }
    rows["lltm_cell, forward with grad"] = host_us(lambda: lltm.lltm_cell(xg, wg, bg, hg, cg))
    rows["lltm_cell, forward + backward"] = host_us(lltm_grad)
    rows["timex, forward + backward"] = host_us(timex_grad)
    rows["tile_pad, forward + backward"] = host_us(pad_grad)
    return rows


def measure(reps):
    torch.backends.cuda.matmul.allow_tf32 = False
    import lltm

    record = {"torch": torch.__version__, "device": torch.cuda.get_device_name(),
              "package": getattr(lltm, "__version__", "?"), "kernels": {}, "host_us": {}}
    for label, step in cases():
        record["kernels"][label] = kernel_medians(step, reps)
        print(label, {k[:60]: round(v, 2) for k, v in record["kernels"][label].items()},
              flush=True)
    torch.set_num_threads(1)
    record["host_us"] = host_cases()
    print(record["host_us"], flush=True)
    return record


def compare(a, b):
    lines = [f"Before: torch {a['torch']}, {a['package']}; after: torch {b['torch']}, "
             f"{b['package']}; {a['device']}. Kernel medians in µs (torch.profiler).", "",
             "| case | kernel | before µs | after µs | after / before |",
             "| --- | --- | ---: | ---: | ---: |"]
    worst = 0.0
    for label, kernels in a["kernels"].items():
        after = b["kernels"].get(label, {})
        for name, us in sorted(kernels.items(), key=lambda kv: -kv[1]):
            if name not in after:
                lines.append(f"| {label} | `{name[:70]}` | {us:.2f} | (absent) | |")
                continue
            ratio = after[name] / us
            worst = max(worst, ratio)
            lines.append(f"| {label} | `{name[:70]}` | {us:.2f} | {after[name]:.2f} | {ratio:.3f} |")
        for name in sorted(set(after) - set(kernels)):
            lines.append(f"| {label} | `{name[:70]}` | (absent) | {after[name]:.2f} | |")
    lines += ["", f"Slowest kernel ratio after/before: {worst:.3f}", "",
              "Host time of a call on tiny CPU tensors, µs (median of 2000, one thread):", "",
              "| call | before | after |", "| --- | ---: | ---: |"]
    for name, us in a["host_us"].items():
        lines.append(f"| {name} | {us:.1f} | {b['host_us'].get(name, float('nan')):.1f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        with open(args.compare[0]) as fa, open(args.compare[1]) as fb:
            print(compare(json.load(fa), json.load(fb)))
        return
    record = measure(args.reps)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
