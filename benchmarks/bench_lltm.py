"""LLTM cell: this package against the tutorial's Python LLTM (eager) and torch.compile of it.

"fwd" is one forward with every input requiring grad (as in training); "step" is that
forward plus the gradients of input, state and parameters (torch.autograd.grad, so
nothing accumulates). On CUDA the package picks one of two paths by problem size (see
csrc/lltm/lltm_cuda_small.cu): the "small" path (one kernel for the forward, two for the
backward) or the "cublas" path (cuBLAS GEMMs plus fused pointwise kernels). The row of
the package names the path it took (read from the kernels it ran), and a second row
times the other path, forced through LLTM_CUDA_PATH, so that the size rule can be
judged. A "GEMM only" row times just the four cuBLAS matrix products a step needs (the
floor at large sizes); on CUDA a note gives each variant's step with the autograd engine
on the calling thread (its hand-off to the CUDA thread is a fixed cost of every
backward), and notes give each size's kernel times against the step time
(the step is host-bound where it is far above them), the small path's GEMM rate, and the
cuBLAS path's pointwise kernels against the measured copy bandwidth. Every variant is
checked against float64 before it is timed (a wrong answer or an exception is a row
marked MISMATCH, and the run goes on); timed calls rotate over several input sets
(timing.input_sets); on CUDA each row has its launches and peak memory per call.
"""

import contextlib
import os

import torch

import lltm
from benchmarks.report import failure, fmt, pair, progress, rate, speedup, wanted
from benchmarks.timing import (PEAK_FP32_TFLOPS, call_stats, copy_bandwidth_gbs, cuda_kernels,
                               input_sets, median_ms, medians_ms)
from lltm.reference import lltm_cell_reference

SIZES = {
    # (512, 512, 1024) sits just past the small path's size bound (B*(S+F)*3S > 2^31).
    "cuda": [(16, 32, 128), (256, 256, 1024), (512, 512, 1024), (4096, 1024, 4096)],
    "cpu": [(16, 32, 128), (256, 256, 1024)],
}
QUICK_SIZES = {"cuda": [(16, 32, 128)], "cpu": [(16, 32, 128)]}
TOLERANCE = 1e-4  # relative error of float32 results against float64 (TF32 off)
ROUNDS = 10  # alternating rounds of the step timings (benchmarks/timing.py: medians_ms)


def make_set(batch, features, state, device):
    """One input set: the five leaves (requiring grad) and the two output gradients."""
    scale = state**-0.5
    leaves = [
        torch.randn(batch, features, device=device),
        torch.empty(3 * state, features + state, device=device).uniform_(-scale, scale),
        torch.empty(3 * state, device=device).uniform_(-scale, scale),
        torch.randn(batch, state, device=device),
        torch.randn(batch, state, device=device),
    ]
    grads = (torch.randn(batch, state, device=device), torch.randn(batch, state, device=device))
    return [t.requires_grad_() for t in leaves], grads


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


def run(device, quick=False, cases=None):
    """cases: substrings of the "(B, F, S)" labels to run (None: all)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sizes = [s for s in (QUICK_SIZES if quick else SIZES)[device] if wanted(str(s), cases)]
    reps = 10 if quick else 50
    min_s = None if quick else 0.5  # small sizes: thousands of repeats, a stable median
    compiled_reference = torch.compile(lltm_cell_reference)
    rows, notes, figures = [], [], []
    bandwidth = copy_bandwidth_gbs() if device == "cuda" else None
    if bandwidth:
        notes.append(f"measured device-to-device copy bandwidth: {bandwidth:.0f} GB/s (read + write)")
    if device == "cuda":
        notes.append(f"step FLOPs = 3 GEMMs x 2*B*(F+S)*3S; % peak: of {PEAK_FP32_TFLOPS:g} "
                     "TFLOP/s (float32 FMA, H100); kernels and peak MiB: launches and memory "
                     "allocated (above what was allocated before) during one fwd / one step")
    else:
        notes.append("step FLOPs = 3 GEMMs x 2*B*(F+S)*3S (TFLOP/s: that work over the step's "
                     "time; no CPU floor is claimed: the 'GEMM only' floor is timed on GPUs)")
    for number, (batch, features, state) in enumerate(sizes, 1):
        size = f"({batch}, {features}, {state})"
        progress(f"lltm on {device}: case {number}/{len(sizes)} {size}")
        size_bytes = 4 * (batch * features + 3 * state * (features + state) + 6 * batch * state)
        sets = input_sets(lambda: make_set(batch, features, state, device),  # noqa: B023
                          size_bytes, device)
        leaves64 = [t.detach().double().requires_grad_() for t in sets[0][0]]
        want = results_of(lltm_cell_reference, leaves64, [g.double() for g in sets[0][1]])
        fused_step = step_of(lltm.lltm_cell, sets)
        # (row name, role, function, LLTM_CUDA_PATH to force or None)
        variants = [("torch-fused-ops", "ours", lltm.lltm_cell, None),
                    ("eager PyTorch", "eager", lltm_cell_reference, None),
                    ("torch.compile", "compile", compiled_reference, None)]
        if device == "cuda":
            auto_kernels = cuda_kernels(fused_step)
            path = path_of(auto_kernels)
            other = "cublas" if path == "small" else "small"
            variants[0] = (f"torch-fused-ops ({path} path)", "ours", lltm.lltm_cell, None)
            variants.append((f"torch-fused-ops, {other} path forced", "other", lltm.lltm_cell,
                             other))
        flops = 3 * 2 * batch * (features + state) * 3 * state
        timed = {}
        for name, role, fn, force in variants:
            try:
                with cuda_path(force):
                    timed[name] = measure(fn, sets, want, device, reps, min_s)
            except Exception as exc:  # the row says what happened; the run goes on
                timed[name] = {"check": failure(exc), "err": None, "fwd": None, "step": None}
            timed[name]["role"] = role
        # The steps (the speedup claims): the variants on their own paths in alternating
        # rounds; a forced path, or any variant if that fails, on its own.
        alike = [(name, fn) for name, _, fn, force in variants
                 if force is None and timed[name]["err"] is not None]
        try:
            steps = medians_ms([step_of(fn, sets) for _, fn in alike], device, reps=reps,
                               min_s=min_s, rounds=1 if quick else ROUNDS)
            for (name, _), ms in zip(alike, steps):
                timed[name]["step"] = ms
        except Exception as exc:
            progress(f"alternating step timing failed ({failure(exc)}); one variant at a time")
        for name, _, fn, force in variants:
            r = timed[name]
            if r["err"] is None or r["step"] is not None:
                continue
            try:
                with cuda_path(force):
                    r["step"] = median_ms(step_of(fn, sets), device, reps=reps, min_s=min_s)
            except Exception as exc:  # the row says what happened; the run goes on
                r["check"] = failure(exc)
        eager, compiled = timed["eager PyTorch"]["step"], timed["torch.compile"]["step"]
        for name, r in timed.items():
            tflops = flops / r["step"] / 1e9 if r["step"] else None
            rows.append([size, name, fmt(r["fwd"]), fmt(r["step"]),
                         pair(r.get("fwd_kernels"), r.get("step_kernels"), "g"),
                         pair(r.get("fwd_peak"), r.get("step_peak"), ".1f"),
                         rate(tflops, device), speedup(eager, r["step"]),
                         speedup(compiled, r["step"]), r["check"]])
            figures.append({"case": size, "variant": name, "role": r["role"],
                            "ok": r["check"] == "ok", "check": r["check"], "B": batch,
                            "F": features, "S": state, "rel_err": r["err"], "fwd_ms": r["fwd"],
                            "step_ms": r["step"], "step_tflops": tflops,
                            "step_one_thread_ms": r.get("step_one_thread"),
                            **{key: r.get(key) for key in ("fwd_kernels", "step_kernels",
                                                           "fwd_peak", "step_peak")}})
        if device == "cuda":
            notes.append(engine_note(size, timed))
            note = anchors_method_note(size, alike, sets)
            if note:
                notes.append(note)
        ours = timed[variants[0][0]]["step"]
        if device == "cuda" and ours is not None:
            row, gemm_ms = gemm_only_row(size, sets, state, ours, reps)
            rows.append(row)
            figures.append({"case": size, "variant": "GEMM only (floor)", "role": "floor",
                            "ok": True, "check": "", "B": batch, "F": features, "S": state,
                            "step_ms": gemm_ms, "step_tflops": flops / gemm_ms / 1e9,
                            "step_kernels": 4})
            notes.append(kernel_note(size, auto_kernels, path, ours, batch, features, state,
                                     bandwidth))
    header = ["(B, F, S)", "variant", "fwd ms", "step ms", "kernels fwd / step",
              "peak MiB fwd / step", "step TFLOP/s" + (" (% peak)" if device == "cuda" else ""),
              "step vs eager", "step vs compile", f"check (rel err < {TOLERANCE:g})"]
    return header, rows, notes, figures


def step_of(fn, sets):
    """A training step of fn (forward, then every gradient) on input set i % len(sets)."""
    return lambda i: results_of(fn, *sets[i % len(sets)])


def measure(fn, sets, want, device, reps, min_s):
    """Check one step against float64, then time the forward, rotating over the input sets
    (reps repeats, more where they would take under min_s seconds); the caller times the
    step."""
    err = max_rel_err(results_of(fn, *sets[0]), want)
    fwd = lambda i: fn(*sets[i % len(sets)][0])  # noqa: E731
    step = step_of(fn, sets)
    r = {"err": err, "check": "ok" if err < TOLERANCE else f"MISMATCH ({err:.1e})",
         "fwd": median_ms(fwd, device, reps=reps, min_s=min_s), "step": None}
    r["fwd_kernels"], r["fwd_peak"] = call_stats(fwd, device)
    r["step_kernels"], r["step_peak"] = call_stats(step, device)
    if device == "cuda":
        # The same step with the autograd engine on the calling thread instead of handing the
        # backward to its CUDA device thread and back (a fixed cost of every CUDA backward).
        try:
            with torch.autograd.set_multithreading_enabled(False):
                r["step_one_thread"] = median_ms(step, device, reps=reps, min_s=min_s)
        except Exception as exc:  # an extra figure: its failure must not fail the row
            progress(f"step on the calling thread failed: {failure(exc)}")
    return r


def engine_note(size, timed):
    """Each variant's step against the same step with the autograd engine on the calling
    thread: the difference is the engine's hand-off to its CUDA thread and back."""
    parts = []
    for name, r in timed.items():
        if r.get("step") and r.get("step_one_thread"):
            parts.append(f"{name} {r['step']:.3f} -> {r['step_one_thread']:.3f}")
    return (f"{size} step ms with the autograd engine on the calling thread "
            f"(torch.autograd.set_multithreading_enabled(False)): " + "; ".join(parts))


def anchors_method_note(size, named_fns, sets):
    """The steps timed the way ANCHORS.md timed the alternatives: triton.testing.do_bench
    (medians), which writes a 256 MB buffer to clear the L2 before each call. The GPU runs
    that write while the host already issues the call, so up to its duration of host time
    per call does not show: for host-bound steps these read lower than the table's."""
    try:
        import triton.testing
    except ImportError:
        return None
    parts = {}
    for name, fn in named_fns:
        step, calls = step_of(fn, sets), iter(range(1 << 30))
        try:
            parts[name] = triton.testing.do_bench(lambda: step(next(calls)),  # noqa: B023
                                                  return_mode="median")
        except Exception as exc:  # an extra figure: its failure must not fail the row
            progress(f"do_bench of {name} failed: {failure(exc)}")
    eager = parts.get("eager PyTorch")
    text = "; ".join(f"{name} {ms:.3f}" + (f" ({eager / ms:.2f}x eager)" if eager else "")
                     for name, ms in parts.items())
    return (f"{size} step ms timed as ANCHORS.md did (triton.testing.do_bench, median; the L2 "
            f"flush before each call hides up to its own GPU time of host time): {text}")


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
    return [size, "GEMM only (floor)", "", f"{ms:.3f}", "4", "", "", "", "",
            f"fused step is {over:+.1f}% over it"], ms


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
