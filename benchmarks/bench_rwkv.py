"""RWKV TimeX: this package against the conv1d form (cuDNN on GPU, TF32 off), the FFT
convolution in plain PyTorch (rwkv_ops.reference.timex_fftconv: what users run for long
kernels), and torch.compile of each. The conv1d rows stop at CONV1D_MAX_T (their T^2 cost).
The "algorithm" column says which of this package's algorithms the call ran
(rwkv_ops.timex_algorithm), and a log-log plot shows each variant's
time per (b, c) row against T: how its cost grows with T.

"fwd" is one forward; "bwd" is the backward alone (gradients of w and k from a retained
graph). FLOPs = B*C*T*(T+1) per direction (the triangle's multiply-adds, 2 FLOPs each), so
fwd+bwd does three times that; TFLOP/s and % of the float32 FMA peak (PEAK_FP32_TFLOPS in
timing.py, the H100 figure) are given for each. Every variant's output and both gradients are checked against a
float64 reference before timing (on large shapes on a subset of channels: channels are
independent); a variant that gives a wrong answer or raises is a row marked MISMATCH and
the run goes on. Where taichi is importable, a Taichi forward (benchmarks/taichi_kernels.py)
is one more row. Timed calls rotate over several input sets (timing.input_sets). On CUDA
each row has its kernel launches and peak memory per call, and a note splits this
package's time into its kernels.
"""

import torch

import rwkv_ops
from benchmarks import taichi_kernels
from benchmarks.report import failure, fmt, pair, plot_loglog, progress, rate, speedup, wanted
from benchmarks.timing import PEAK_FP32_TFLOPS, call_stats, cuda_kernels, input_sets, median_ms
from rwkv_ops.reference import timex_conv1d, timex_fftconv

SIZES = {
    "cuda": [(32, 768, 768), (8, 1024, 1024), (64, 768, 256), (4, 1024, 4096), (2, 1024, 8192),
             (1, 1024, 16384), (1, 512, 32768), (1, 256, 65536)],
    "cpu": [(2, 64, 256), (1, 16, 8192)],
}
CONV1D_MAX_T = {"cuda": 8192, "cpu": 2048}  # longer: the conv1d rows would take minutes
QUICK_SIZES = {"cuda": [(8, 64, 256)], "cpu": [(1, 8, 64)]}
TOLERANCE = 1e-4  # relative error of float32 results against float64 (TF32 off)
CHECK_CHANNELS = 16  # channels compared with the float64 reference on large shapes
EPS = 0.01


def rel(got, want):
    return ((got.double() - want).norm() / want.norm().clamp_min(1e-30)).item()


def results(fn, w, k, grad):
    out = fn(w, k, EPS)
    return [out, *torch.autograd.grad(out, [w, k], grad)]


def reference64(w, k, grad):
    """out, grad_w, grad_k in float64: conv1d up to T = 4096, the float64 FFT convolution
    above (accurate to 1e-15, and seconds instead of minutes)."""
    fn = timex_conv1d if k.shape[-1] <= 4096 else timex_fftconv
    return results(fn, w.double().requires_grad_(), k.double().requires_grad_(), grad.double())


def check(fn, has_bwd, w, k, grad, channels):
    """Largest relative error of out (and grad_w, grad_k where the variant has a backward)
    over `channels` against float64."""
    want = reference64(w.detach()[channels], k.detach()[:, channels], grad[:, channels])
    if not has_bwd:
        return rel(fn(w.detach(), k.detach(), EPS)[:, channels], want[0])
    got = results(fn, w, k, grad)
    picked = [got[0][:, channels], got[1][channels], got[2][:, channels]]
    return max(rel(g, x) for g, x in zip(picked, want))


COMPILED = {}  # one torch.compile wrapper per reference, over all cases


def variants(device, taichi, T):
    """name -> (role, function of (w, k, eps), whether it has a backward)."""
    for fn in (timex_conv1d, timex_fftconv):
        COMPILED.setdefault(fn, torch.compile(fn))
    out = {"torch-fused-ops": ("ours", rwkv_ops.timex, True)}
    if T <= CONV1D_MAX_T[device]:
        out["conv1d eager" + (" (cuDNN)" if device == "cuda" else "")] = ("eager", timex_conv1d, True)
        out["torch.compile(conv1d)"] = ("compile", COMPILED[timex_conv1d], True)
    out["FFT conv eager" + (" (cuFFT)" if device == "cuda" else "")] = ("fft", timex_fftconv, True)
    out["torch.compile(FFT conv)"] = ("fft_compile", COMPILED[timex_fftconv], True)
    if taichi is not None:
        out["Taichi (forward only)"] = ("taichi", taichi_kernels.timex, False)
    return out


def run(device, quick=False, cases=None, use_taichi=True):
    """cases: substrings of the "(B, C, T)" labels to run (None: all)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    sizes = [s for s in (QUICK_SIZES if quick else SIZES)[device] if wanted(str(s), cases)]
    budget = 0.2 if quick else 1.0  # seconds of timed repeats per measurement
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    # The backward is timed alone, from a retained graph, which donated buffers forbid.
    torch._functorch.config.donated_buffer = False
    taichi = taichi_kernels.setup(device) if use_taichi else None
    rows, figures = [], []
    peak = (f"; % peak: of {PEAK_FP32_TFLOPS:g} TFLOP/s (float32 FMA, H100)"
            if device == "cuda" else "")
    notes = [f"FLOPs = B*C*T*(T+1) per direction, the direct algorithm's work (an FFT row's "
             f"TFLOP/s is that work over its time: an equivalent rate, not what it executes)"
             f"{peak}; backward timed alone from a retained "
             "graph; vs FFT conv / vs compiled FFT conv: that row's time over the row's time (>1: the "
             "row is faster); peak MiB: allocated during one call above what was allocated "
             "before it"]
    if use_taichi and taichi is None:
        notes.append(taichi_kernels.reason)
    elif taichi is not None:
        notes.append("Taichi: a parallel loop over (b, c, t), each an inner sum in a register "
                     "(no shared memory); " + taichi_kernels.NOTE)
    for number, (B, C, T) in enumerate(sizes, 1):
        size = f"({B}, {C}, {T})"
        progress(f"rwkv on {device}: case {number}/{len(sizes)} {size}")

        def make():
            return ((torch.randn(C, T, device=device) / T**0.5).requires_grad_(),  # noqa: B023
                    torch.randn(B, C, T, device=device, requires_grad=True),  # noqa: B023
                    torch.randn(B, C, T, device=device))  # noqa: B023

        sets = input_sets(make, 4 * (C * T + 3 * B * C * T), device)
        w, k, grad = sets[0]
        flops = B * C * T * (T + 1)
        if C > CHECK_CHANNELS:
            channels = torch.cat([torch.arange(CHECK_CHANNELS // 2),
                                  torch.arange(C - CHECK_CHANNELS // 2, C)]).to(device)
        else:
            channels = torch.arange(C, device=device)
        timed = {}
        for name, (role, fn, has_bwd) in variants(device, taichi, T).items():
            try:
                timed[name] = measure(fn, has_bwd, sets, channels, device, budget)
            except Exception as exc:  # the row says what happened; the run goes on
                timed[name] = {"check": failure(exc), "err": None, "fwd": None, "bwd": None}
            timed[name]["role"] = role
            timed[name]["algo"] = rwkv_ops.timex_algorithm(k) if role == "ours" else None
            if device == "cuda":
                torch.cuda.empty_cache()
        fft, fft_compiled = (next(r for r in timed.values() if r["role"] == role)
                             for role in ("fft", "fft_compile"))
        for name, r in timed.items():
            total = r["fwd"] + r["bwd"] if r["fwd"] is not None and r["bwd"] is not None else None
            fwd_tf = flops / r["fwd"] / 1e9 if r["fwd"] else None
            bwd_tf = 2 * flops / r["bwd"] / 1e9 if r["bwd"] else None
            rows.append([size, name, r["algo"] or "", fmt(r["fwd"]), fmt(r["bwd"]), fmt(total),
                         rate(fwd_tf, device), rate(bwd_tf, device),
                         pair(r.get("fwd_kernels"), r.get("bwd_kernels"), "g"),
                         pair(r.get("fwd_peak"), r.get("bwd_peak"), ".1f"),
                         *(f"{speedup(base['fwd'], r['fwd'])} / {speedup(base.get('total'), total)}"
                           for base in (fft, fft_compiled)),
                         r["check"]])
            figures.append({"case": size, "variant": name, "role": r["role"],
                            "ok": r["check"].startswith("ok"), "check": r["check"],
                            "B": B, "C": C, "T": T, "rel_err": r["err"], "fwd_ms": r["fwd"],
                            "bwd_ms": r["bwd"], "total_ms": total, "fwd_tflops": fwd_tf,
                            "bwd_tflops": bwd_tf, "algorithm": r["algo"],
                            **{key: r.get(key) for key in ("fwd_kernels", "bwd_kernels",
                                                           "fwd_peak", "bwd_peak")}})
        if device == "cuda":
            notes.append(kernel_note(size, w, k, grad, flops))
            notes.append(half_types_note(size, sets, channels, flops, budget))
    pct = " (% peak)" if device == "cuda" else ""
    header = ["(B, C, T)", "variant", "algorithm", "fwd ms", "bwd ms", "fwd+bwd ms", f"fwd TFLOP/s{pct}",
              f"bwd TFLOP/s{pct}", "kernels fwd / bwd", "peak MiB fwd / bwd",
              "vs FFT conv (fwd / fwd+bwd)", "vs compiled FFT conv (fwd / fwd+bwd)",
              f"check (rel err < {TOLERANCE:g})"]
    return header, rows, notes, figures


def measure(fn, has_bwd, sets, channels, device, budget):
    """Check against float64, then time the forward (rotating over the input sets) and,
    where there is one, the backward alone from retained graphs."""
    w, k, grad = sets[0]
    err = check(fn, has_bwd, w, k, grad, channels)
    r = {"err": err, "check": f"ok ({err:.1e})" if err < TOLERANCE else f"MISMATCH ({err:.1e})"}
    wd = [(s[0].detach(), s[1].detach()) if not has_bwd else s[:2] for s in sets]
    fwd = lambda i: fn(*wd[i % len(wd)], EPS)  # noqa: E731
    r["fwd"] = median_ms(fwd, device, warmup=2, reps=10 if budget < 1 else 50, budget_s=budget)
    r["bwd"] = None
    calls = [("fwd", fwd)]
    if has_bwd:
        outs = [fn(s[0], s[1], EPS) for s in sets]

        def bwd(i):
            j = i % len(sets)
            return torch.autograd.grad(outs[j], sets[j][:2], sets[j][2], retain_graph=True)

        r["bwd"] = median_ms(bwd, device, warmup=2, reps=10 if budget < 1 else 50, budget_s=budget)
        r["total"] = r["fwd"] + r["bwd"]
        calls.append(("bwd", bwd))
    for kind, call in calls:
        r[f"{kind}_kernels"], r[f"{kind}_peak"] = call_stats(call, device)
    return r


def plot_extra(path, title, figures):
    """Forward + backward time per (b, c) row against T, per variant, log-log: the direct
    kernels' time grows as T^2, an FFT's as T log T."""
    lines = {}
    for f in figures:
        if f.get("total_ms") and f.get("ok"):
            lines.setdefault(f["variant"], []).append(
                (f["T"], f["total_ms"] * 1e3 / (f["B"] * f["C"])))
    return plot_loglog(path, title, lines, "T (time steps)",
                       "microseconds per (b, c) row, forward + backward")


# The family's second plot (benchmarks/__main__.py): file suffix and what it shows.
EXTRA_PLOT = ("vs_T", "time against T")


def kernel_note(size, w, k, grad, flops):
    """This package's forward and backward split into kernels (profiler, device time)."""
    wd, kd = w.detach(), k.detach()
    parts = []
    for label, fn in (("fwd", lambda i: torch.ops.rwkv_ops.timex_forward(wd, kd, EPS)),
                      ("bwd", lambda i: torch.ops.rwkv_ops.timex_backward(grad, wd, kd))):
        for name, (count, ms) in sorted(cuda_kernels(fn).items(), key=lambda kv: -kv[1][1]):
            causal = "true>" in name or "Lb1E" in name
            short = ("fused FFT conv" if "fft::conv_kernel" in name
                     else "fused FFT spectra of W" if "fft::spectrum_kernel" in name
                     else "fused FFT backward" if "fft::backward_kernel" in name
                     else "FFT twiddle table" if "fft::twiddle_kernel" in name
                     else "FFT pack" if "pack_kernel" in name
                     else "FFT product" if "product_kernel" in name
                     else "FFT crop" if "crop_kernel" in name
                     else "cuFFT" if "fft" in name.lower()
                     else "toeplitz causal" if "toeplitz_kernel" in name and causal
                     else "toeplitz anti-causal (grad_k)" if "toeplitz_kernel" in name
                     else "wgrad (grad_w)" if "wgrad_kernel" in name
                     else "flip w" if "flip_pad" in name else name[:40])
            direct = "toeplitz" in short or short == "wgrad (grad_w)"
            tflops = flops / ms / 1e9 if direct else None
            rate = f", {tflops:.1f} TFLOP/s" if tflops else ""
            parts.append(f"{label} {short}: {ms:.3f} ms{rate}")
    return f"{size} kernels: " + "; ".join(parts)


def half_types_note(size, sets, channels, flops, budget):
    """This package in bfloat16 and float16: forward and backward op times (the backward op
    alone, no autograd), and the largest relative error of out, grad_w, grad_k against
    float64 on the same (rounded) inputs."""
    parts = []
    for dtype in (torch.bfloat16, torch.float16):
        lo = [tuple(t.detach().to(dtype) for t in s) for s in sets]
        w, k, grad = lo[0]
        want = reference64(w[channels], k[:, channels], grad[:, channels])
        out = torch.ops.rwkv_ops.timex_forward(w, k, EPS)
        grad_w, grad_k = torch.ops.rwkv_ops.timex_backward(grad, w, k)
        got = [out[:, channels], grad_w[channels], grad_k[:, channels]]
        err = max(rel(g, x) for g, x in zip(got, want))

        def fwd_call(i):
            w_i, k_i, _ = lo[i % len(lo)]  # noqa: B023
            return torch.ops.rwkv_ops.timex_forward(w_i, k_i, EPS)

        def bwd_call(i):
            w_i, k_i, grad_i = lo[i % len(lo)]  # noqa: B023
            return torch.ops.rwkv_ops.timex_backward(grad_i, w_i, k_i)

        fwd = median_ms(fwd_call, "cuda", warmup=2, reps=50, budget_s=budget)
        bwd = median_ms(bwd_call, "cuda", warmup=2, reps=50, budget_s=budget)
        name = str(dtype).replace("torch.", "")
        parts.append(f"{name} fwd {fwd:.3f} ms ({flops / fwd / 1e9:.1f} TFLOP/s), bwd {bwd:.3f} ms "
                     f"({2 * flops / bwd / 1e9:.1f}), rel err {err:.1e}")
    return f"{size} half types: " + "; ".join(parts)
