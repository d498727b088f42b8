"""The sweep behind TimeX's algorithm choice (csrc/rwkv/timex_choice.h takes_direct,
csrc/rwkv/timex.cpp kCpuDirectMaxT): forward + backward op time of each algorithm, forced
with RWKV_TIMEX_ALGO, by length T, batch rows B*C and dtype. Prints a markdown table and,
per (dtype, rows), the longest T at which the direct kernels are still the faster ones.

    python -m benchmarks.timex_crossover [--device cuda|cpu] [--out FILE.md] [--long | --half]
        [--dtypes D ...] [--rows B,C ...] [--lengths T ...] [--reps N] [--budget S]
"""

import argparse
import os

import torch

import rwkv_ops  # noqa: F401  (registers torch.ops.rwkv_ops)
from benchmarks.report import emit
from benchmarks.timing import median_ms

LENGTHS = {"cuda": [256, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192],
           "cpu": [256, 512, 768, 1024, 1536, 2048]}
ROWS = {"cuda": [(1, 256), (4, 1024), (32, 1024)], "cpu": [(1, 16), (4, 64)]}
DTYPES = {"cuda": [torch.float32, torch.bfloat16, torch.float64],
          "cpu": [torch.float32, torch.float64]}
ALGOS = {"cuda": ["direct", "fft", "fft_library"], "cpu": ["direct", "fft"]}
# --long: the choice among the FFT kernels around one CTA's limit (T = 16384): the one-CTA
# fused kernels, the thread-block-cluster kernels and the library FFT (CUDA).
LONG = {"lengths": [12288, 16384, 16385, 24576, 32768, 40000, 49152, 65536], "rows": [(1, 256)],
        "dtypes": [torch.float32, torch.bfloat16, torch.float16],
        "algos": ["fft_fused", "fft_cluster", "fft_library"]}
# --half: the bfloat16/float16 crossover (CUDA): the tensor-core direct kernels against the
# one-CTA FFTs, on the CUDA cores (fft_fused) and on tensor cores (fft_tc).
HALF = {"lengths": [512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384],
        "rows": [(1, 256), (4, 1024), (16, 512), (32, 1024)],
        "dtypes": [torch.bfloat16, torch.float16], "algos": ["direct", "fft_fused", "fft_tc"]}


def time_algo(algo, w, k, g, device, budget_s=0.3, reps=20):
    os.environ["RWKV_TIMEX_ALGO"] = algo

    def call(i):
        torch.ops.rwkv_ops.timex_forward(w, k, 0.0)
        return torch.ops.rwkv_ops.timex_backward(g, w, k)

    return median_ms(call, device, warmup=2, reps=reps, budget_s=budget_s)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", help="also write the table to this markdown file")
    parser.add_argument("--long", action="store_true",
                        help="the FFT kernels around T = 16384 (LONG) instead of direct vs FFT")
    parser.add_argument("--half", action="store_true",
                        help="bfloat16/float16: direct vs the fused FFT (HALF)")
    parser.add_argument("--budget", type=float, default=0.3, help="seconds per measurement")
    parser.add_argument("--dtypes", nargs="+", metavar="DTYPE",
                        help="only these dtypes (e.g. float32), of those the sweep has")
    parser.add_argument("--rows", nargs="+", metavar="B,C", help="these (B, C) instead")
    parser.add_argument("--lengths", nargs="+", type=int, metavar="T", help="these T instead")
    parser.add_argument("--algos", nargs="+", metavar="ALGO",
                        help="only these algorithms, of those the sweep has")
    parser.add_argument("--reps", type=int, default=20,
                        help="timed calls per point (fewer where --budget runs out first)")
    args = parser.parse_args(argv)
    device = args.device
    if args.long:
        LENGTHS[device], ROWS[device] = LONG["lengths"], LONG["rows"]
        DTYPES[device], ALGOS[device] = LONG["dtypes"], LONG["algos"]
    if args.half:
        LENGTHS[device], ROWS[device] = HALF["lengths"], HALF["rows"]
        DTYPES[device], ALGOS[device] = HALF["dtypes"], HALF["algos"]
    if args.dtypes:
        DTYPES[device] = [d for d in DTYPES[device] if str(d)[6:] in args.dtypes]
    if args.rows:
        ROWS[device] = [tuple(int(x) for x in r.split(",")) for r in args.rows]
    if args.lengths:
        LENGTHS[device] = args.lengths
    if args.algos:
        ALGOS[device] = [a for a in ALGOS[device] if a in args.algos]
    lines = [f"TimeX forward + backward op time, ms (median), {device}"
             + (f" {torch.cuda.get_device_name()}" if device == "cuda" else "")
             + f", torch {torch.__version__}", "",
             "| dtype | (B, C) | T | " + " | ".join(ALGOS[device]) + " | fastest |",
             "|" + " --- |" * (len(ALGOS[device]) + 4)]
    summary = []
    with torch.no_grad():
        for dtype in DTYPES[device]:
            for B, C in ROWS[device]:
                last_direct = None
                for T in LENGTHS[device]:
                    w = torch.randn(C, T, device=device, dtype=dtype) / T**0.5
                    k = torch.randn(B, C, T, device=device, dtype=dtype)
                    g = torch.randn(B, C, T, device=device, dtype=dtype)
                    times = {a: time_algo(a, w, k, g, device, args.budget, args.reps)
                             for a in ALGOS[device]}
                    best = min(times, key=times.get)
                    if best == "direct":
                        last_direct = T
                    lines.append(f"| {str(dtype)[6:]} | ({B}, {C}) | {T} | "
                                 + " | ".join(f"{times[a]:.3f}" for a in ALGOS[device])
                                 + f" | {best} |")
                    print(lines[-1], flush=True)
                if not args.long:
                    summary.append(f"{str(dtype)[6:]} (B, C) = ({B}, {C}): direct fastest up "
                                   f"to T = {last_direct}")
    os.environ.pop("RWKV_TIMEX_ALGO", None)
    text = "\n".join(lines + [""] + [f"- {s}" for s in summary]) + "\n"
    emit(text, args.out)


if __name__ == "__main__":
    main()
