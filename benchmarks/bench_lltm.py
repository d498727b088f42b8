"""LLTM cell: this package against the tutorial's Python LLTM (eager) and torch.compile of it.

"fwd" is one forward with every input requiring grad (as in training); "step" is that
forward plus the gradients of input, state and parameters (torch.autograd.grad, so
nothing accumulates). On CUDA the package picks one of two paths by problem size (see
csrc/lltm/lltm_cuda_small.cu): the "small" path (one kernel for the forward, two for the
backward) or the "cublas" path (cuBLAS GEMMs plus fused pointwise kernels). The row of
the package names the path it took (read from the kernels it ran), and a second row
times the other path, forced through LLTM_CUDA_PATH, so that the size rule can be
judged. A "GEMM only" row times just the four cuBLAS matrix products a step needs (the
floor at large sizes); the notes give each size's kernel times against the step time
(the step is host-bound where it is far above them), the small path's GEMM rate, and the
cuBLAS path's pointwise kernels against the measured copy bandwidth.
"""

import contextlib
import os

import torch

import lltm
from benchmarks.timing import copy_bandwidth_gbs, cuda_kernels, median_ms
from lltm.reference import lltm_cell_reference

SIZES = {
    # (512, 512, 1024) sits just past the small path's size bound (B*(S+F)*3S > 2^31).
    "cuda": [(16, 32, 128), (256, 256, 1024), (512, 512, 1024), (4096, 1024, 4096)],
    "cpu": [(16, 32, 128), (256, 256, 1024)],
}
QUICK_SIZES = {"cuda": [(16, 32, 128)], "cpu": [(16, 32, 128)]}
TOLERANCE = 1e-4  # relative error of float32 results against float64 (TF32 off)


def make_sets(batch, features, state, device, count):
    sets = []
    for _ in range(count):
        scale = state**-0.5
        leaves = [
            torch.randn(batch, features, device=device),
            torch.empty(3 * state, features + state, device=device).uniform_(-scale, scale),
            torch.empty(3 * state, device=device).uniform_(-scale, scale),
            torch.randn(batch, state, device=device),
            torch.randn(batch, state, device=device),
        ]
        grads = (torch.randn(batch, state, device=device), torch.randn(batch, state, device=device))
        sets.append(([t.requires_grad_() for t in leaves], grads))
    return sets


def results_of(fn, leaves, grads):
    outs = fn(*leaves)
    return [*outs, *torch.autograd.grad(outs, leaves, grads)]


def max_rel_err(got, want):
    return max(((g.double() - w).norm() / w.norm().clamp_min(1e-30)).item() for g, w in zip(got, want))


@contextlib.contextmanager
def cuda_path(path):
    """Forces the package's CUDA path ("small" or "cublas"; None: its own choice)."""
    old = os.environ.get("LLTM_CUDA_PATH")
    if path is not None:
        os.environ["LLTM_CUDA_PATH"] = path
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("LLTM_CUDA_PATH", None)
        else:
            os.environ["LLTM_CUDA_PATH"] = old


def path_of(kernels):
    """The CUDA path that ran, from the names of its kernels."""
    return "small" if any("small_forward_kernel" in name for name in kernels) else "cublas"


def run(device, quick=False):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sizes = (QUICK_SIZES if quick else SIZES)[device]
    reps = 10 if quick else 50
    compiled_reference = torch.compile(lltm_cell_reference)
    rows, notes = [], []
    bandwidth = copy_bandwidth_gbs() if device == "cuda" else None
    if bandwidth:
        notes.append(f"measured device-to-device copy bandwidth: {bandwidth:.0f} GB/s (read + write)")
    for batch, features, state in sizes:
        size_bytes = 4 * (batch * features + 3 * state * (features + state) + 6 * batch * state)
        sets = make_sets(batch, features, state, device, 1 if size_bytes > (256 << 20) else 8)
        leaves64 = [t.detach().double().requires_grad_() for t in sets[0][0]]
        want = results_of(lltm_cell_reference, leaves64, [g.double() for g in sets[0][1]])
        fused_step = lambda i: results_of(lltm.lltm_cell, *sets[i % len(sets)])  # noqa: E731
        # (row name, function, LLTM_CUDA_PATH to force or None)
        variants = [("torch-fused-ops", lltm.lltm_cell, None),
                    ("eager PyTorch", lltm_cell_reference, None),
                    ("torch.compile", compiled_reference, None)]
        if device == "cuda":
            auto_kernels = cuda_kernels(fused_step)
            path = path_of(auto_kernels)
            other = "cublas" if path == "small" else "small"
            variants[0] = (f"torch-fused-ops ({path} path)", lltm.lltm_cell, None)
            variants.append((f"torch-fused-ops, {other} path forced", lltm.lltm_cell, other))
        timed = {}
        for name, fn, force in variants:
            with cuda_path(force):
                err = max_rel_err(results_of(fn, *sets[0]), want)
                fwd = lambda i, fn=fn: fn(*sets[i % len(sets)][0])  # noqa: E731
                step = lambda i, fn=fn: results_of(fn, *sets[i % len(sets)])  # noqa: E731
                fwd_ms = median_ms(fwd, device, reps=reps)
                step_ms = median_ms(step, device, reps=reps)
                launches = None
                if device == "cuda":
                    launches = sum(n for n, _ in cuda_kernels(step).values())
            timed[name] = (fwd_ms, step_ms, launches, err)
        size = f"({batch}, {features}, {state})"
        eager, compiled = timed["eager PyTorch"][1], timed["torch.compile"][1]
        for name, (fwd_ms, step_ms, launches, err) in timed.items():
            check = "ok" if err < TOLERANCE else f"MISMATCH ({err:.1e})"
            rows.append([size, name, f"{fwd_ms:.3f}", f"{step_ms:.3f}", launches,
                         f"{eager / step_ms:.2f}x", f"{compiled / step_ms:.2f}x", check])
        if device == "cuda":
            fused_ms = timed[variants[0][0]][1]
            rows.append(gemm_only_row(size, sets, state, fused_ms, reps))
            notes.append(kernel_note(size, auto_kernels, path, fused_ms, batch, features, state,
                                     bandwidth))
    header = ["(B, F, S)", "variant", "fwd ms", "step ms", "kernels/step",
              "step vs eager", "step vs compile", f"check (rel err < {TOLERANCE:g})"]
    return header, rows, notes


def gemm_only_row(size, sets, state, fused_step_ms, reps):
    """The four GEMMs of one step (forward addmm; d_old_h, d_input, d_weights), nothing else."""
    x, W, b, h, _ = [t.detach() for t in sets[0][0]]
    X = torch.cat([h, x], 1)
    d_gates = torch.randn(x.shape[0], 3 * state, device=x.device)
    w_h, w_x = W[:, :state], W[:, state:]

    def gemms(i):
        torch.addmm(b, X, W.t())
        torch.mm(d_gates, w_h)
        torch.mm(d_gates, w_x)
        torch.mm(d_gates.t(), X)

    ms = median_ms(gemms, "cuda", reps=reps)
    over = 100 * (fused_step_ms / ms - 1)
    return [size, "GEMM only (floor)", "", f"{ms:.3f}", 4, "", "",
            f"fused step is {over:+.1f}% over it"]


def kernel_note(size, kernels, path, step_ms, batch, features, state, bandwidth):
    """GPU time of the kernels of one step on the path taken, against the step's time."""
    total = sum(ms for _, ms in kernels.values())
    note = (f"{size} {path} path: {total:.4f} ms of GPU kernels per step against a "
            f"{step_ms:.3f} ms step ({100 * total / step_ms:.0f}%"
            f"{': host-bound' if total < 0.8 * step_ms else ''})")

    def lltm_ms(kind):
        return sum(ms for name, (_, ms) in kernels.items() if "lltm" in name and kind in name)

    def pointwise(kind, elems):
        # Elements moved: forward reads 3 gates + old_cell, writes new_h + new_cell; backward
        # reads grad_h, grad_cell, new_cell + 3 gates, writes 3 gate grads + d_old_cell.
        ms = lltm_ms(kind)
        nbytes = elems * batch * state * 4
        gbs = nbytes / (ms * 1e-3) / 1e9 if ms else float("nan")
        return (f"pointwise {kind.strip(':<')} {ms:.4f} ms for {nbytes / 1e6:.1f} MB = "
                f"{gbs:.0f} GB/s ({100 * gbs / bandwidth:.0f}% of copy)")

    def gemms(kind, count):
        # Each GEMM of a step has B*(S+F)*3S multiply-adds: forward 1, backward 2.
        ms = lltm_ms(kind)
        flops = 2 * count * batch * (state + features) * 3 * state
        tflops = flops / (ms * 1e-3) / 1e12 if ms else float("nan")
        return f"{kind} {ms:.4f} ms = {tflops:.1f} TFLOP/s"

    if path == "small":
        parts = [gemms("small_forward_kernel", 1), pointwise("::backward_kernel<", 10),
                 gemms("small_backward_kernel", 2)]
    else:
        parts = [pointwise("::forward_kernel<", 6), pointwise("::backward_kernel<", 10)]
    return note + "; " + "; ".join(parts)
