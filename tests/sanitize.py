"""Runs every CUDA kernel of the package, forward and backward, on small shapes that hit
the boundary cases (partial tiles, T and W not multiples of a tile, odd pads, unaligned
rows, every element size and dtype, every LLTM path, tile variant and output mask), and
checks each result against the CPU op. Meant to run under compute-sanitizer (sanitize.sh);
runs alone too:  python3 tests/sanitize.py [--family padding|rwkv|lltm|all]

Inputs are made on the CPU and copied over, and results are compared on the CPU, so that
few of torch's own kernels run. Exit status 0 and a last line "sanitize: ... ok" when every
check passed.
"""

import argparse
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import lltm  # noqa: E402,F401
import padding_ops  # noqa: E402,F401
from conftest import rel_err  # noqa: E402  (tests/, this script's folder, is on sys.path)
import rwkv_ops  # noqa: E402,F401

CHECKS = []


def check(name, got, want, tol):
    for i, (a, b) in enumerate(zip(got, want)):
        a = a.cpu()
        assert a.shape == b.shape and a.dtype == b.dtype, f"{name}: output {i} shape/dtype"
        if tol == 0:
            assert torch.equal(a, b), f"{name}: output {i} differs"
        elif b.numel():
            err = rel_err(a, b)
            assert err <= tol, f"{name}: output {i} relative error {err:.2e} > {tol:.0e}"
    CHECKS.append(name)


def rand(*shape, dtype=torch.float32, gen):
    if dtype == torch.uint8:
        return torch.randint(0, 256, shape, dtype=dtype, generator=gen)
    return torch.randn(shape, dtype=torch.float64, generator=gen).to(dtype)


def tol_for(dtype, base):
    return {torch.float16: 5e-3, torch.bfloat16: 3e-2}.get(dtype, base)


# ---- Brick padding -------------------------------------------------------------------------

def run_padding(gen):
    fwd_cases = [((3, 5, 7), (2, 3, 4, 1), -3),   # unaligned head and tail, short rows
                 ((2, 9, 35), (1, 30, 0, 18), 40),  # whole 16-byte packs, shift > W
                 ((1, 1), (0, 5, 3, 0), 1)]         # 1x1 image
    for dtype in [torch.uint8, torch.float16, torch.float32, torch.float64, torch.complex128]:
        for shape, pad, shift in fwd_cases:
            if dtype.is_complex:
                x = torch.randn(shape, dtype=dtype, generator=gen)
            else:
                x = rand(*shape, dtype=dtype, gen=gen)
            y = torch.ops.padding_ops.tile_pad(x.cuda(), pad, shift)
            check(f"tile_pad {shape} {pad} {shift} {dtype}", [y],
                  [torch.ops.padding_ops.tile_pad(x, pad, shift)], 0)
        # A row start that breaks 16-byte alignment of the input (a storage offset).
        flat = rand(1 + 3 * 5 * 7, dtype=dtype, gen=gen) if not dtype.is_complex else \
            torch.randn(1 + 105, dtype=dtype, generator=gen)
        xg = flat.cuda()[1:].view(3, 5, 7)
        check(f"tile_pad offset {dtype}", [torch.ops.padding_ops.tile_pad(xg, (2, 3, 4, 1), 2)],
              [torch.ops.padding_ops.tile_pad(flat[1:].view(3, 5, 7), (2, 3, 4, 1), 2)], 0)
    bwd_cases = [((3, 5, 7), (2, 3, 4, 1), -3),           # one gather pass
                 ((4, 3), (200, 150, 100, 120), 7),        # split: workspace + reduce kernel
                 ((2, 1, 6), (0, 40, 0, 33), -1)]
    for dtype in [torch.float32, torch.float64, torch.float16, torch.bfloat16]:
        for shape, pad, shift in bwd_cases:
            left, right, top, bottom = pad
            gy = rand(*shape[:-2], shape[-2] + top + bottom, shape[-1] + left + right,
                      dtype=dtype, gen=gen)
            got = torch.ops.padding_ops.tile_pad_backward(gy.cuda(), pad, shift)
            want = torch.ops.padding_ops.tile_pad_backward(gy.double(), pad, shift).to(dtype)
            check(f"tile_pad_backward {shape} {pad} {shift} {dtype}", [got], [want],
                  tol_for(dtype, 1e-6))


# ---- RWKV TimeX ----------------------------------------------------------------------------

def timex_check(name, w, k, g, dtype, misalign=False):
    def dev(t):
        if not misalign:
            return t.cuda()
        flat = torch.empty(t.numel() + 1, dtype=t.dtype, device="cuda")
        flat[1:].copy_(t.reshape(-1).cuda())
        return flat[1:].view(t.shape)  # contiguous, 4 bytes off 16-byte alignment

    wg, kg, gg = dev(w), dev(k), dev(g)
    out = torch.ops.rwkv_ops.timex_forward(wg, kg, 0.5)
    grad_w, grad_k = torch.ops.rwkv_ops.timex_backward(gg, wg, kg)
    want = [torch.ops.rwkv_ops.timex_forward(w.double(), k.double(), 0.5),
            *torch.ops.rwkv_ops.timex_backward(g.double(), w.double(), k.double())]
    check(name, [out, grad_w, grad_k], [t.to(dtype) for t in want], tol_for(dtype, 1e-5))


def run_rwkv(gen):
    C = 3  # partial channel groups for every configuration (NC = 8, 4, 2; NCH = 16 / NR)
    # B picks the Toeplitz configuration (<= 4, <= 8, <= 16, more) and the grad_w one (1, 2,
    # <= 4, <= 8, more); T: one step, not a multiple of 4, one tile, past one 128-step tile;
    # T = 300: the tensor-core kernel with 8 time folds (B <= 4, T > 256).
    shapes = [(B, T) for B in [1, 2, 5, 9, 17] for T in [1, 37, 64, 130]] + [(1, 300)]
    for B, T in shapes:
        w, k, g = rand(C, T, gen=gen), rand(B, C, T, gen=gen), rand(B, C, T, gen=gen)
        timex_check(f"timex float32 B={B} C={C} T={T}", w, k, g, torch.float32)
    for dtype in [torch.float64, torch.float16, torch.bfloat16]:
        for B, T in [(3, 37), (9, 64), (2, 130), (4, 300)]:
            w, k, g = (rand(C, T, dtype=dtype, gen=gen), rand(B, C, T, dtype=dtype, gen=gen),
                       rand(B, C, T, dtype=dtype, gen=gen))
            timex_check(f"timex {dtype} B={B} T={T}", w, k, g, dtype)
    w, k, g = rand(C, 64, gen=gen), rand(5, C, 64, gen=gen), rand(5, C, 64, gen=gen)
    timex_check("timex float32 misaligned (scalar copies)", w, k, g, torch.float32, True)


# ---- LLTM ----------------------------------------------------------------------------------

# lltm_backward's output_mask: gradients of (input, weights, bias, old_h).
MASKS = [[True] * 4, [True, False, False, False], [False, False, False, True],
         [False, True, False, False], [False, False, True, False], [False, True, True, False],
         [True, False, False, True]]


def lltm_check(B, F, S, dtype, path, gen):
    os.environ["LLTM_CUDA_PATH"] = path
    args = [rand(B, F, dtype=dtype, gen=gen), rand(3 * S, S + F, dtype=dtype, gen=gen),
            rand(3 * S, dtype=dtype, gen=gen), rand(B, S, dtype=dtype, gen=gen),
            rand(B, S, dtype=dtype, gen=gen)]
    grads = [rand(B, S, dtype=dtype, gen=gen), rand(B, S, dtype=dtype, gen=gen)]
    tol = tol_for(dtype, 1e-5)
    name = f"lltm {path} ({B}, {F}, {S}) {dtype}"
    outs = torch.ops.lltm.lltm_forward(*[a.cuda() for a in args])
    want = torch.ops.lltm.lltm_forward(*[a.double() for a in args])
    check(name + " forward", outs, [t.to(dtype) for t in want], tol)
    new_cell, gates, X = outs[1], outs[3], outs[2]
    for mask in MASKS:
        got = torch.ops.lltm.lltm_backward(grads[0].cuda(), grads[1].cuda(), new_cell, gates, X,
                                           args[1].cuda(), mask)
        ref = torch.ops.lltm.lltm_backward(grads[0].double(), grads[1].double(),
                                           want[1], want[3], want[2], args[1].double(), mask)
        check(f"{name} backward {mask}", got, [t.to(dtype) for t in ref], tol)


def run_lltm(gen):
    # Small path: one tile, every tile edge crossed (B > 64 rows, K > 64 columns, 3S > 96 gate
    # columns, S > 32 state columns), and B = 40 with few column tiles (TM = 2: the d_X role's,
    # and on sm_80 and newer the tensor-core forward's, there with 32-deep chunks).
    for B, F, S in [(1, 1, 1), (5, 7, 9), (40, 3, 21), (70, 20, 50)]:
        lltm_check(B, F, S, torch.float32, "small", gen)
    for dtype in [torch.float64, torch.float16, torch.bfloat16]:
        lltm_check(5, 7, 9, dtype, "small", gen)
        lltm_check(40, 3, 21, dtype, "small", gen)
    # cuBLAS path: pointwise kernels with one element per access (S odd) and 16-byte packs.
    for dtype in [torch.float32, torch.float64, torch.float16, torch.bfloat16]:
        lltm_check(5, 7, 9, dtype, "cublas", gen)
        lltm_check(3, 4, 16, dtype, "cublas", gen)
    os.environ.pop("LLTM_CUDA_PATH")


FAMILIES = {"padding": run_padding, "rwkv": run_rwkv, "lltm": run_lltm}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=[*FAMILIES, "all"], default="all")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("sanitize: needs a CUDA device")
    gen = torch.Generator().manual_seed(0)
    for name, run in FAMILIES.items():
        if args.family in (name, "all"):
            run(gen)
    torch.cuda.synchronize()
    print(f"sanitize: {args.family}: {len(CHECKS)} checks ok")


if __name__ == "__main__":
    main()
