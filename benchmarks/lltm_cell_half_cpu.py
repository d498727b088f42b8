"""The LLTM cell on the CPU in float16 and bfloat16 against float32 (issue 27: half types as
fast as float32 or faster).

Per size, in one process and alternating rounds (benchmarks/timing.py: medians_ms): the op's
forward (lltm_forward) and backward (lltm_backward, every gradient) below autograd, and the
training step through autograd (lltm_cell forward, then torch.autograd.grad of both outputs
with respect to every input), for float32 and for each half type three times: the op's own
choice (LLTM_CPU_PATH=auto, which is the fused GEMMs on an AVX2 CPU), the fused GEMMs forced
(LLTM_CPU_PATH=fused: W read in its half type; the forward by lltm_cpu_gemm_fwd_avx2.cpp's
outer products from 13 batch rows, lltm_cpu_gemm_avx2.cpp's dot products below) and the
library's (LLTM_CPU_PATH=library: W converted to float per call, ATen's float GEMMs); and
eager PyTorch's cell (lltm.reference) in the same dtype as the usual alternative. auto and
fused run the same code: the gap between their rows is the run's noise. Ratios: time over
float32's (ours) in the same run.
Usage: python -m benchmarks.lltm_cell_half_cpu [--sizes 16,32,128 256,256,1024] [--rounds 9]
"""

import argparse
import os

import torch

import lltm
from benchmarks.timing import environment, medians_ms
from lltm.reference import lltm_cell_reference

OPS = torch.ops.lltm


def make(B, F, S, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    scale = S ** -0.5
    return [
        torch.randn(B, F, generator=g).to(dtype),
        ((torch.rand(3 * S, S + F, generator=g) * 2 - 1) * scale).to(dtype),
        ((torch.rand(3 * S, generator=g) * 2 - 1) * scale).to(dtype),
        torch.randn(B, S, generator=g).to(dtype),
        torch.randn(B, S, generator=g).to(dtype),
    ]


def variant(name, dtype, path, B, F, S, cell=lltm.lltm_cell):
    """(name, {role: fn}) for one variant; path: LLTM_CPU_PATH around each call (None: ours'
    default; eager PyTorch has no ops, only the step)."""
    args = make(B, F, S, dtype)
    leaves = [t.clone().requires_grad_() for t in args]
    gh, gc = torch.randn_like(args[3]), torch.randn_like(args[4])

    def with_path(fn):
        def run(_i):
            if path is not None:
                os.environ["LLTM_CPU_PATH"] = path
            return fn()
        return run

    def step():
        new_h, new_cell = cell(*leaves)
        return torch.autograd.grad((new_h, new_cell), leaves, (gh, gc))

    roles = {"step": with_path(step)}
    if cell is lltm.lltm_cell:
        saved = OPS.lltm_forward(*args)
        roles["fwd"] = with_path(lambda: OPS.lltm_forward(*args))
        roles["bwd"] = with_path(lambda: OPS.lltm_backward(
            gh, gc, saved[1], saved[3], saved[2], args[1], [True] * 4))
    return name, roles


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", nargs="+", default=["16,32,128", "64,128,256", "256,256,1024"])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: as set)")
    a = parser.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    env = environment()
    print(f"# LLTM cell, CPU, half types vs float32: {env}, {torch.get_num_threads()} threads")
    print("| (B, F, S) | variant | fwd ms | bwd ms | step ms | fwd / bwd / step vs float32 ours |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    for size in a.sizes:
        B, F, S = (int(v) for v in size.split(","))
        variants = [variant("ours float32", torch.float32, None, B, F, S)]
        for dt in (torch.bfloat16, torch.float16):
            n = str(dt).split(".")[-1]
            variants.append(variant(f"ours {n}", dt, "auto", B, F, S))
            variants.append(variant(f"ours {n}, fused GEMMs", dt, "fused", B, F, S))
            variants.append(variant(f"ours {n}, library GEMMs", dt, "library", B, F, S))
        for dt in (torch.float32, torch.bfloat16, torch.float16):
            variants.append(variant(f"eager PyTorch {str(dt).split('.')[-1]}", dt, None, B, F, S,
                                    cell=lltm_cell_reference))
        fns, keys = [], []
        for name, roles in variants:
            for role, fn in roles.items():
                fns.append(fn)
                keys.append((name, role))
        budget = 0.05 if B * S * (S + F) < 1e7 else 0.4
        times = dict(zip(keys, medians_ms(fns, "cpu", warmup=3, budget_s=budget,
                                          rounds=a.rounds)))
        os.environ.pop("LLTM_CPU_PATH", None)
        base = {r: times[("ours float32", r)] for r in ("fwd", "bwd", "step")}
        for name, roles in variants:
            cells = [f"{times[(name, r)]:.3f}" if r in roles else "-" for r in ("fwd", "bwd", "step")]
            ratio = " / ".join(f"{times[(name, r)] / base[r]:.2f}x" if r in roles else "-"
                               for r in ("fwd", "bwd", "step"))
            print(f"| ({B}, {F}, {S}) | {name} | {' | '.join(cells)} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
