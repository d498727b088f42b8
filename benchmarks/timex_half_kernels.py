"""Achieved TFLOP/s of the bfloat16/float16 TimeX direct kernels (csrc/rwkv/timex_tc_*.cuh):
the GPU time of each kernel from torch.profiler (CUDA activity; per call, over `--calls` calls
of forward + backward forced to the direct kernels) and its useful flops: 2 multiply-adds'
worth per (row, channel, output, input) pair that the product needs, B * C * T * (T + 1) each
for the forward, grad_k and grad_w (zero triangles and padding not counted).

    python -m benchmarks.timex_half_kernels [--shapes "(16, 512, 1024)" ...] [--out FILE.md]
"""

import argparse
import os

import torch

import rwkv_ops  # noqa: F401  (registers torch.ops.rwkv_ops)
from benchmarks.timing import cuda_kernels, environment

SHAPES = [(16, 512, 1024), (4, 1024, 2048), (4, 1024, 4096), (2, 768, 6000)]


def kernel_tflops(B, C, T, dtype, calls):
    os.environ["RWKV_TIMEX_ALGO"] = "direct"
    w = (torch.randn(C, T, device="cuda") / T**0.5).to(dtype)
    k = torch.randn(B, C, T, device="cuda").to(dtype)
    g = torch.randn(B, C, T, device="cuda").to(dtype)

    def step(i):
        torch.ops.rwkv_ops.timex_forward(w, k, 0.0)
        torch.ops.rwkv_ops.timex_backward(g, w, k)

    step(0)
    kernels = cuda_kernels(step, calls)
    os.environ.pop("RWKV_TIMEX_ALGO", None)
    flops = B * C * T * (T + 1)  # each product: sum over the pairs of 2 flops
    rows = []
    for name, (launches, ms) in sorted(kernels.items(), key=lambda kv: -kv[1][1]):
        short = name.split("(")[0].split("<")[0].split("::")[-1]
        if "half" in name:
            direction = "causal" if ", true>" in name else "anti-causal"
            label = f"{short} ({direction})" if "toeplitz" in short else short
            rows.append((label, launches, ms, flops / (ms / launches * 1e-3) / 1e12 / launches))
        else:
            rows.append((short, launches, ms, None))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    shapes = [tuple(int(x) for x in s.strip("() ").split(",")) for s in args.shapes] \
        if args.shapes else SHAPES
    env = environment()
    lines = [f"TimeX half-type direct kernels: {env.get('device')}, torch {env['torch']}, "
             f"commit {os.environ.get('FUSED_OPS_COMMIT') or env.get('commit')}", "",
             "| dtype | (B, C, T) | kernel | ms per launch | TFLOP/s |", "|" + " --- |" * 5]
    print("\n".join(lines), flush=True)
    for dtype in (torch.bfloat16, torch.float16):
        for B, C, T in shapes:
            for name, launches, ms, tf in kernel_tflops(B, C, T, dtype, args.calls):
                lines.append(f"| {str(dtype)[6:]} | ({B}, {C}, {T}) | {name} | "
                             f"{ms / launches:.3f} | {'-' if tf is None else f'{tf:.0f}'} |")
                print(lines[-1], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
