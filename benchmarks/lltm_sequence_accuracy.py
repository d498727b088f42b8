"""LLTM sequence, float32 on CUDA: the error of every output and gradient against float64, for
each of the op's paths (LLTM_SEQUENCE_PATH) and for the plain PyTorch float32 loop on the same
GPU (TF32 off): the data of DESIGN.md's 2x-plain-PyTorch rule, per gradient.

    python -m benchmarks.lltm_sequence_accuracy [--sizes "(T, B, F, S)" ...]
"""

import argparse
import ast
import os

import torch

import lltm
from lltm.reference import lltm_cell_reference

NAMES = ("output", "h_n", "c_n", "d_input", "d_weights", "d_bias", "d_h0", "d_c0")
SIZES = [(300, 3, 5, 129), (300, 16, 32, 128), (300, 1, 5, 7), (300, 8, 32, 64)]


def make(T, B, F, S, seed=0):
    g = torch.Generator().manual_seed(seed)
    stdv = 1.0 / S**0.5
    leaves = [torch.randn(T, B, F, generator=g, dtype=torch.float64),
              (torch.rand(3 * S, S + F, generator=g, dtype=torch.float64) * 2 - 1) * stdv,
              (torch.rand(3 * S, generator=g, dtype=torch.float64) * 2 - 1) * stdv,
              torch.randn(B, S, generator=g, dtype=torch.float64) * 0.5,
              torch.randn(B, S, generator=g, dtype=torch.float64) * 0.5]
    cots = [torch.randn(T, B, S, generator=g, dtype=torch.float64),
            torch.randn(B, S, generator=g, dtype=torch.float64),
            torch.randn(B, S, generator=g, dtype=torch.float64)]
    return leaves, cots


def loop(x, w, b, h, c):
    outs = []
    for t in range(x.shape[0]):
        h, c = lltm_cell_reference(x[t], w, b, h, c)
        outs.append(h)
    return torch.stack(outs), (h, c)


def split_gemm(x, w, b, h, c):
    """z = (x W_x^T + b) + h W_h^T: another valid float32 ordering of the plain loop's sums."""
    S = h.shape[1]
    p = torch.nn.functional.linear(x, w[:, S:], b)
    outs = []
    for t in range(x.shape[0]):
        zi, zo, zc = (p[t] + h @ w[:, :S].t()).chunk(3, 1)
        c = c + torch.nn.functional.elu(zc) * torch.sigmoid(zi)
        h = torch.tanh(c) * torch.sigmoid(zo)
        outs.append(h)
    return torch.stack(outs), (h, c)


def permuted(x, w, b, h, c):
    """X = [x, h]: the plain loop's GEMM with its k blocks swapped."""
    S = h.shape[1]
    wp = torch.cat([w[:, S:], w[:, :S]], 1)
    outs = []
    for t in range(x.shape[0]):
        zi, zo, zc = torch.nn.functional.linear(torch.cat([x[t], h], 1), wp, b).chunk(3, 1)
        c = c + torch.nn.functional.elu(zc) * torch.sigmoid(zi)
        h = torch.tanh(c) * torch.sigmoid(zo)
        outs.append(h)
    return torch.stack(outs), (h, c)


def run(fn, leaves, cots):
    leaves = [t.detach().clone().requires_grad_() for t in leaves]
    out, (h, c) = fn(*leaves)
    cots = [t.to(out) for t in cots]
    loss = (out * cots[0]).sum() + (h * cots[1]).sum() + (c * cots[2]).sum()
    return [out.detach(), h.detach(), c.detach(), *torch.autograd.grad(loss, leaves)]


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-300)).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="*", default=None)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    sizes = [ast.literal_eval(s) for s in args.sizes] if args.sizes else SIZES
    print("| (T, B, F, S) | variant | " + " | ".join(NAMES) + " |")
    print("| --- | --- |" + " ---: |" * len(NAMES))
    for size in sizes:
        leaves, cots = make(*size)
        want = run(loop, [t.cuda() for t in leaves], cots)
        f32 = [t.cuda().float() for t in leaves]
        rows = {"plain fp32 loop": run(loop, f32, cots),
                "plain, z in two GEMMs": run(split_gemm, f32, cots),
                "plain, X = [x, h]": run(permuted, f32, cots)}
        for path in ("cta", "persistent", "fallback"):
            os.environ["LLTM_SEQUENCE_PATH"] = path
            try:
                rows[path] = run(lltm.lltm_sequence, f32, cots)
            except ValueError:
                pass
        os.environ.pop("LLTM_SEQUENCE_PATH", None)
        for name, got in rows.items():
            errs = " | ".join(f"{rel(g, w):.1e}" for g, w in zip(got, want))
            print(f"| {size} | {name} | {errs} |", flush=True)


if __name__ == "__main__":
    main()
