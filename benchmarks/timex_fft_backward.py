"""TimeX's FFT backward alone, per shape and dtype: the backward op (timex_backward: W's
spectra, then the backward kernel) against the same backward starting from the W spectra that
the forward kept (timex_backward_kept, what eager autograd runs), and the forward op, in
alternating rounds (CUDA-event medians, benchmarks/timing.py); with the memory the kept
spectra hold from forward to backward and each call's kernels (profiler, device time).

    python -m benchmarks.timex_fft_backward [--shapes "(1, 1024, 16384)" ...] [--out FILE.md]
"""

import argparse
import os

import torch

import rwkv_ops
from benchmarks.timing import cuda_kernels, environment, input_sets, medians_ms

SHAPES = [(1, 1024, 16384), (2, 768, 6000), (4, 1024, 4096), (16, 512, 1024)]
DTYPES = [torch.float32, torch.bfloat16]
ops = torch.ops.rwkv_ops


def measure(B, C, T, dtype, budget):
    def make():
        w = (torch.randn(C, T, device="cuda") / T**0.5).to(dtype)
        k = torch.randn(B, C, T, device="cuda").to(dtype)
        g = torch.randn(B, C, T, device="cuda").to(dtype)
        return w, k, g

    size = torch.finfo(dtype).bits // 8
    sets = input_sets(make, size * (C * T + 2 * B * C * T), "cuda")
    kept = [ops.timex_forward_keep(w, k, 0.0) for w, k, _ in sets]
    fns = {
        "fwd": lambda i: ops.timex_forward(sets[i % len(sets)][0], sets[i % len(sets)][1], 0.0),
        "bwd": lambda i: ops.timex_backward(sets[i % len(sets)][2], *sets[i % len(sets)][:2]),
        "bwd kept": lambda i: ops.timex_backward_kept(
            sets[i % len(sets)][2], *sets[i % len(sets)][:2], *kept[i % len(sets)][1:]),
    }
    w, k, g = sets[0]
    same = all(torch.equal(a, b) for a, b in zip(fns["bwd"](0), fns["bwd kept"](0)))
    times = medians_ms(list(fns.values()), "cuda", warmup=3, reps=50, budget_s=budget, rounds=3)
    kz, wz = kept[0][1:]
    kept_mib = (kz.numel() * kz.element_size() + wz.numel() * wz.element_size()) / 2**20
    kernels = {name: cuda_kernels(fn) for name, fn in fns.items()}
    return rwkv_ops.timex_algorithm(k), dict(zip(fns, times)), kept_mib, same, kernels


def short(name):
    for key in ("cluster_backward_kernel", "cluster_forward_kernel", "cluster_spectrum_kernel",
                "backward_kernel", "conv_kernel", "spectrum_kernel", "twiddle_kernel"):
        if key in name:
            return key
    return name[:40]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", help='e.g. "(1, 1024, 16384)"')
    parser.add_argument("--budget", type=float, default=0.15)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    shapes = [tuple(int(x) for x in s.strip("() ").split(",")) for s in args.shapes] \
        if args.shapes else SHAPES
    env = environment()
    commit = os.environ.get("FUSED_OPS_COMMIT") or env.get("commit")
    lines = [f"TimeX FFT backward: {env.get('device')}, torch {env['torch']}, commit {commit}",
             "", "| dtype | (B, C, T) | algorithm | fwd op ms | bwd op ms | bwd kept ms | "
             "kept MiB | same bits | kernels (ms per call) |", "|" + " --- |" * 9]
    for dtype in DTYPES:
        for B, C, T in shapes:
            algo, t, mib, same, kernels = measure(B, C, T, dtype, args.budget)
            ks = "; ".join(f"{name}: " + ", ".join(f"{short(n)} x{c} {ms:.3f}"
                                                    for n, (c, ms) in kern.items())
                           for name, kern in kernels.items())
            lines.append(f"| {str(dtype)[6:]} | ({B}, {C}, {T}) | {algo} | {t['fwd']:.3f} | "
                         f"{t['bwd']:.3f} | {t['bwd kept']:.3f} | {mib:.0f} | {same} | {ks} |")
            print(lines[-1], flush=True)
            torch.cuda.empty_cache()
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
