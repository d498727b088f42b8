"""Where fft_tc's backward keeps its running sum (RWKV_TIMEX_TC_ACC=smem or global): the
backward kernel's GPU time (profiler, 5 calls a sample, medians of 7 samples in alternating
rounds) and all the backward op's kernels, bfloat16, forced fft_tc; whether both give bitwise the
same gradients. smem is built only where has_acc_smem(N) (csrc/rwkv/timex_fft_tc_backward.cuh):
elsewhere both rows read the same kernel.

    python -m benchmarks.timex_tc_acc [--shapes "(16, 512, 2500)" ...] [--out FILE.md]
"""

import argparse
import os
import statistics

import torch

import rwkv_ops  # noqa: F401  (registers torch.ops.rwkv_ops)
from benchmarks.report import emit, progress
from benchmarks.timing import cuda_kernels, environment

SHAPES = [(16, 512, 2100), (16, 512, 2500), (16, 512, 3072), (8, 512, 2500), (4, 512, 2500),
          (2, 768, 3000), (1, 1024, 3000)]
PLACES = ("smem", "global")


def measure(B, C, T, rounds=7):
    w = (torch.randn(C, T, device="cuda") / T**0.5).bfloat16()
    k = torch.randn(B, C, T, device="cuda").bfloat16()
    g = torch.randn(B, C, T, device="cuda").bfloat16()
    kernel = {p: [] for p in PLACES}
    total = {p: [] for p in PLACES}
    grads = {}
    for r in range(rounds):
        for place in PLACES if r % 2 == 0 else PLACES[::-1]:
            os.environ["RWKV_TIMEX_TC_ACC"] = place
            times = cuda_kernels(lambda i: torch.ops.rwkv_ops.timex_backward(g, w, k), calls=5)
            kernel[place].append(sum(v[1] for n, v in times.items() if "backward_tc_kernel" in n))
            total[place].append(sum(v[1] for v in times.values()))
            grads[place] = torch.ops.rwkv_ops.timex_backward(g, w, k)
    same = all(torch.equal(a, b) for a, b in zip(grads["smem"], grads["global"]))
    us = {p: (statistics.median(kernel[p]) * 1e3, statistics.median(total[p]) * 1e3)
          for p in PLACES}
    return us, same


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", help='e.g. "(16, 512, 2500)" (default: SHAPES)')
    parser.add_argument("--out", help="also write the table to this markdown file")
    args = parser.parse_args(argv)
    shapes = [tuple(int(x) for x in s.strip("() ").split(",")) for s in args.shapes] \
        if args.shapes else SHAPES
    os.environ["RWKV_TIMEX_ALGO"] = "fft_tc"
    env = environment()
    commit = os.environ.get("FUSED_OPS_COMMIT") or env.get("commit")
    lines = [f"fft_tc backward, acc in shared vs global memory: {env.get('device')}, torch "
             f"{env['torch']}, CUDA {env['cuda']}, commit {commit}", "",
             "| (B, C, T) | backward_tc_kernel smem / global, µs | change | all the op's kernels "
             "smem / global, µs | bitwise same |", "|" + " --- |" * 5]
    for B, C, T in shapes:
        us, same = measure(B, C, T)
        (ks, ts), (kg, tg) = us["smem"], us["global"]
        lines.append(f"| ({B}, {C}, {T}) | {ks:.1f} / {kg:.1f} | {100 * (ks / kg - 1):+.1f}% | "
                     f"{ts:.1f} / {tg:.1f} | {same} |")
        progress(lines[-1])
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
