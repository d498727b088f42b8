"""LLTM sequence on the GPU (float32, bfloat16, float16): the CUDA paths of lltm_sequence
against each other and against cuDNN's nn.LSTM in the same dtype, forward and forward +
backward, every variant in the same run (CUDA events, medians over alternating rounds;
benchmarks/timing.py; TF32 off). Variants are environment settings read at each call
(LLTM_SEQUENCE_PATH, LLTM_STEP_TILE, LLTM_STEP_PDL); a path that does not run a size is left
out there. Used to place the op's crossover between the cluster kernels and the step kernels.

    python -m benchmarks.lltm_sequence_paths [--sizes T,B,F,S ...] [--dtypes float16 ...]
        [--variants NAME ...] [--md FILE]
"""

import argparse
import os

import torch

from benchmarks.lltm_sequence_half import SIZES, make
from benchmarks.timing import medians_ms

VARIANTS = {
    "auto": {},
    "persistent": {"LLTM_SEQUENCE_PATH": "persistent"},
    "step": {"LLTM_SEQUENCE_PATH": "step"},
    "step-big": {"LLTM_SEQUENCE_PATH": "step", "LLTM_STEP_TILE": "big"},
    "step-small": {"LLTM_SEQUENCE_PATH": "step", "LLTM_STEP_TILE": "small"},
    "step-split": {"LLTM_SEQUENCE_PATH": "step", "LLTM_STEP_TILE": "split"},
    "step-tiny": {"LLTM_SEQUENCE_PATH": "step", "LLTM_STEP_TILE": "tiny"},
    "step-tinyk": {"LLTM_SEQUENCE_PATH": "step", "LLTM_STEP_TILE": "tinyk"},
    "step-nopdl": {"LLTM_SEQUENCE_PATH": "step", "LLTM_STEP_PDL": "0"},
    "step-wide": {"LLTM_SEQUENCE_PATH": "step", "LLTM_STEP_BWD_TILE": "wide"},
    "fallback": {"LLTM_SEQUENCE_PATH": "fallback"},
}
KEYS = ("LLTM_SEQUENCE_PATH", "LLTM_STEP_TILE", "LLTM_STEP_PDL", "LLTM_STEP_BWD_TILE")


def set_env(settings):
    for k in KEYS:
        os.environ.pop(k, None)
    os.environ.update(settings)


def bench(T, B, F, S, dtype, variants, rounds):
    import lltm

    x, w, b, h0, c0 = make(T, B, F, S, dtype)
    for p in (w, b, h0, c0):
        p.requires_grad_()
    xg = x.clone().requires_grad_()
    go = torch.randn(T, B, S, device="cuda", dtype=dtype)
    lstm = torch.nn.LSTM(F, S).to("cuda", dtype)
    lh0 = torch.randn(1, B, S, device="cuda", dtype=dtype, requires_grad=True)
    lc0 = torch.randn(1, B, S, device="cuda", dtype=dtype, requires_grad=True)

    def ours(settings, backward):
        def fn(i=0):
            set_env(settings)
            if backward:
                out, (h, c) = lltm.lltm_sequence(xg, w, b, h0, c0)
                torch.autograd.backward([out, h, c], [go, go[0], go[1 % T]])
            else:
                with torch.no_grad():
                    lltm.lltm_sequence(x, w, b, h0, c0)
        return fn

    def cudnn(backward):
        def fn(i=0):
            if backward:
                out, (h, c) = lstm(xg, (lh0, lc0))
                torch.autograd.backward([out, h, c], [go, go[0][None], go[1 % T][None]])
            else:
                with torch.no_grad():
                    lstm(x, (lh0, lc0))
        return fn

    names, fns = [], []
    for v in variants:
        try:
            ours(VARIANTS[v], True)()
            torch.cuda.synchronize()
        except (ValueError, RuntimeError):
            continue  # this path does not run this size
        names.append(v)
        fns += [ours(VARIANTS[v], False), ours(VARIANTS[v], True)]
    names.append("cuDNN")
    fns += [cudnn(False), cudnn(True)]
    ms = medians_ms(fns, "cuda", warmup=5, reps=40, min_s=0.4, rounds=rounds)
    set_env({})
    return {n: (ms[2 * i], ms[2 * i + 1]) for i, n in enumerate(names)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="*", default=None)
    ap.add_argument("--dtypes", nargs="*", default=["float16"])
    ap.add_argument("--variants", nargs="*", default=["auto", "persistent", "step", "fallback"])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--md", default=None)
    args = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    sizes = [tuple(int(v) for v in s.split(",")) for s in args.sizes] if args.sizes else SIZES
    lines = [f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN "
             f"{torch.backends.cudnn.version()}, commit {os.environ.get('FUSED_OPS_COMMIT', '?')}",
             "",
             "| dtype | (T, B, F, S) | variant | fwd ms | fwd+bwd ms | cuDNN/this fwd / fwd+bwd |",
             "| --- | --- | --- | ---: | ---: | ---: |"]
    print("\n".join(lines), flush=True)
    for dname in args.dtypes:
        dtype = getattr(torch, dname)
        for size in sizes:
            res = bench(*size, dtype, args.variants, args.rounds)
            ref = res["cuDNN"]
            for n, (f, fb) in res.items():
                lines.append(f"| {dname} | {size} | {n} | {f:.3f} | {fb:.3f} | "
                             f"{ref[0] / f:.2f}x / {ref[1] / fb:.2f}x |")
                print(lines[-1], flush=True)
    if args.md:
        with open(args.md, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
