"""LLTM cell: this package against the tutorial's Python LLTM (eager) and torch.compile of it.

"fwd" is one forward with every input requiring grad (as in training); "step" is that
forward plus the gradients of input, state and parameters (torch.autograd.grad, so
nothing accumulates). On CUDA a "GEMM only" row times just the four matrix products a
step needs (the floor at large sizes), and the fused pointwise kernels are timed alone
with the profiler and set against the measured copy bandwidth.
"""

import torch

import lltm
from benchmarks.timing import copy_bandwidth_gbs, cuda_kernels, median_ms
from lltm.reference import lltm_cell_reference

SIZES = {
    "cuda": [(16, 32, 128), (256, 256, 1024), (4096, 1024, 4096)],
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


def run(device, quick=False):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sizes = (QUICK_SIZES if quick else SIZES)[device]
    reps = 10 if quick else 50
    variants = {
        "torch-fused-ops": lltm.lltm_cell,
        "eager PyTorch": lltm_cell_reference,
        "torch.compile": torch.compile(lltm_cell_reference),
    }
    rows, notes = [], []
    bandwidth = copy_bandwidth_gbs() if device == "cuda" else None
    if bandwidth:
        notes.append(f"measured device-to-device copy bandwidth: {bandwidth:.0f} GB/s (read + write)")
    for batch, features, state in sizes:
        size_bytes = 4 * (batch * features + 3 * state * (features + state) + 6 * batch * state)
        sets = make_sets(batch, features, state, device, 1 if size_bytes > (256 << 20) else 8)
        leaves64 = [t.detach().double().requires_grad_() for t in sets[0][0]]
        want = results_of(lltm_cell_reference, leaves64, [g.double() for g in sets[0][1]])
        timed = {}
        for name, fn in variants.items():
            err = max_rel_err(results_of(fn, *sets[0]), want)
            fwd = lambda i, fn=fn: fn(*sets[i % len(sets)][0])  # noqa: E731
            step = lambda i, fn=fn: results_of(fn, *sets[i % len(sets)])  # noqa: E731
            fwd_ms = median_ms(fwd, device, reps=reps)
            step_ms = median_ms(step, device, reps=reps)
            launches = sum(n for n, _ in cuda_kernels(step).values()) if device == "cuda" else None
            timed[name] = (fwd_ms, step_ms, launches, err)
        size = f"({batch}, {features}, {state})"
        eager, compiled = timed["eager PyTorch"][1], timed["torch.compile"][1]
        for name, (fwd_ms, step_ms, launches, err) in timed.items():
            check = "ok" if err < TOLERANCE else f"MISMATCH ({err:.1e})"
            rows.append([size, name, f"{fwd_ms:.3f}", f"{step_ms:.3f}", launches,
                         f"{eager / step_ms:.2f}x", f"{compiled / step_ms:.2f}x", check])
        if device == "cuda":
            rows.append(gemm_only_row(size, sets, state, timed["torch-fused-ops"][1], reps))
            notes.append(pointwise_note(size, sets, batch, state, bandwidth))
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


def pointwise_note(size, sets, batch, state, bandwidth):
    """Kernel time of the fused pointwise kernels within a step, against copy bandwidth."""
    kernels = cuda_kernels(lambda i: results_of(lltm.lltm_cell, *sets[i % len(sets)]))
    parts = []
    # Elements moved: forward reads 3 gates + old_cell, writes new_h + new_cell; backward
    # reads grad_h, grad_cell, new_cell + 3 gates, writes 3 gate grads + d_old_cell.
    for kind, elems in (("forward_kernel", 6), ("backward_kernel", 10)):
        ms = sum(t for name, (_, t) in kernels.items() if "lltm" in name and kind in name)
        nbytes = elems * batch * state * 4
        gbs = nbytes / (ms * 1e-3) / 1e9 if ms else float("nan")
        parts.append(f"{kind} {ms:.4f} ms for {nbytes / 1e6:.1f} MB = {gbs:.0f} GB/s "
                     f"({100 * gbs / bandwidth:.0f}% of copy)")
    return f"{size} fused pointwise kernels: " + "; ".join(parts)
