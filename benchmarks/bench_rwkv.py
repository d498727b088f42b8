"""RWKV TimeX: this package against the conv1d form (cuDNN on GPU, TF32 off) and
torch.compile of it.

"fwd" is one forward; "bwd" is the backward alone (gradients of w and k from a retained
graph). FLOPs = B*C*T*(T+1) per direction (the triangle's multiply-adds, 2 FLOPs each), so
fwd+bwd does three times that; TFLOP/s and % of the float32 FMA peak (PEAK_TFLOPS, the H100
figure) are given for each. Every variant's output and both gradients are checked against a
float64 reference before timing (on large shapes on a subset of channels: channels are
independent). On CUDA a note splits this package's time into its kernels.
"""

import torch

import rwkv_ops
from benchmarks.timing import cuda_kernels, median_ms
from rwkv_ops.reference import timex_conv1d

SIZES = {
    "cuda": [(32, 768, 768), (8, 1024, 1024), (64, 768, 256), (4, 1024, 4096)],
    "cpu": [(2, 64, 256)],
}
QUICK_SIZES = {"cuda": [(8, 64, 256)], "cpu": [(1, 8, 64)]}
PEAK_TFLOPS = 60.0  # float32 FMA peak of the H100 (non-tensor), ANCHORS.md
TOLERANCE = 1e-4  # relative error of float32 results against float64 (TF32 off)
CHECK_CHANNELS = 16  # channels compared with the float64 reference on large shapes
EPS = 0.01


def reps_for(ms, quick):
    """Repeats worth about a second, 3 to 50 (10 in quick mode)."""
    top = 10 if quick else 50
    return max(3, min(top, int(1000 / max(ms, 1e-3))))


def rel(got, want):
    return ((got.double() - want).norm() / want.norm().clamp_min(1e-30)).item()


def results(fn, w, k, grad):
    out = fn(w, k, EPS)
    return [out, *torch.autograd.grad(out, [w, k], grad)]


def check(fn, w, k, grad, channels):
    """Largest relative error of out, grad_w and grad_k over `channels` against float64."""
    got = results(fn, w, k, grad)
    w64 = w.detach()[channels].double().requires_grad_()
    k64 = k.detach()[:, channels].double().requires_grad_()
    want = results(timex_conv1d, w64, k64, grad[:, channels].double())
    picked = [got[0][:, channels], got[1][channels], got[2][:, channels]]
    return max(rel(g, x) for g, x in zip(picked, want))


def run(device, quick=False):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    sizes = (QUICK_SIZES if quick else SIZES)[device]
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    # The backward is timed alone, from a retained graph, which donated buffers forbid.
    torch._functorch.config.donated_buffer = False
    variants = {
        "torch-fused-ops": rwkv_ops.timex,
        "conv1d eager" + (" (cuDNN)" if device == "cuda" else ""): timex_conv1d,
        "torch.compile(conv1d)": torch.compile(timex_conv1d),
    }
    rows, notes = [], [f"FLOPs = B*C*T*(T+1) per direction; % peak: of {PEAK_TFLOPS:g} TFLOP/s "
                       "(float32 FMA, H100); backward timed alone from a retained graph"]
    for B, C, T in sizes:
        w = (torch.randn(C, T, device=device) / T**0.5).requires_grad_()
        k = torch.randn(B, C, T, device=device, requires_grad=True)
        grad = torch.randn(B, C, T, device=device)
        flops = B * C * T * (T + 1)
        if C > CHECK_CHANNELS:
            channels = torch.cat([torch.arange(CHECK_CHANNELS // 2),
                                  torch.arange(C - CHECK_CHANNELS // 2, C)]).to(device)
        else:
            channels = torch.arange(C, device=device)
        timed = {}
        for name, fn in variants.items():
            err = check(fn, w, k, grad, channels)
            out = fn(w, k, EPS)
            fwd = lambda i, fn=fn: fn(w, k, EPS)  # noqa: E731
            bwd = lambda i, out=out: torch.autograd.grad(out, [w, k], grad, retain_graph=True)  # noqa: E731
            fwd_ms = median_ms(fwd, device, warmup=2, reps=reps_for(median_ms(fwd, device, 1, 1), quick))
            bwd_ms = median_ms(bwd, device, warmup=2, reps=reps_for(median_ms(bwd, device, 1, 1), quick))
            timed[name] = (fwd_ms, bwd_ms, err)
            del out
        size = f"({B}, {C}, {T})"
        base = list(timed.values())
        for name, (fwd_ms, bwd_ms, err) in timed.items():
            total = fwd_ms + bwd_ms
            fwd_tf = flops / fwd_ms / 1e9
            bwd_tf = 2 * flops / bwd_ms / 1e9
            ok = "ok" if err < TOLERANCE else f"MISMATCH ({err:.1e})"
            rows.append([size, name, f"{fwd_ms:.3f}", f"{bwd_ms:.3f}", f"{total:.3f}",
                         rate(fwd_tf, device), rate(bwd_tf, device),
                         f"{(base[1][0] + base[1][1]) / total:.1f}x",
                         f"{(base[2][0] + base[2][1]) / total:.1f}x", f"{ok} ({err:.1e})"])
        if device == "cuda":
            notes.append(kernel_note(size, w, k, grad, flops))
    header = ["(B, C, T)", "variant", "fwd ms", "bwd ms", "fwd+bwd ms", "fwd TFLOP/s (% peak)",
              "bwd TFLOP/s (% peak)", "fwd+bwd vs eager", "fwd+bwd vs compile",
              f"check (rel err < {TOLERANCE:g})"]
    return header, rows, notes


def rate(tflops, device):
    if device != "cuda":
        return f"{tflops:.3g}"
    return f"{tflops:.1f} ({100 * tflops / PEAK_TFLOPS:.0f}%)"


def kernel_note(size, w, k, grad, flops):
    """This package's forward and backward split into kernels (profiler, device time)."""
    wd, kd = w.detach(), k.detach()
    parts = []
    for label, fn in (("fwd", lambda i: torch.ops.rwkv_ops.timex_forward(wd, kd, EPS)),
                      ("bwd", lambda i: torch.ops.rwkv_ops.timex_backward(grad, wd, kd))):
        for name, (count, ms) in sorted(cuda_kernels(fn).items(), key=lambda kv: -kv[1][1]):
            causal = "true>" in name or "Lb1E" in name
            short = ("toeplitz causal" if "toeplitz_kernel" in name and causal
                     else "toeplitz anti-causal (grad_k)" if "toeplitz_kernel" in name
                     else "wgrad (grad_w)" if "wgrad_kernel" in name
                     else "flip w" if "flip_pad" in name else name[:40])
            tflops = flops / ms / 1e9 if "flip" not in short else None
            rate = f", {tflops:.1f} TFLOP/s" if tflops else ""
            parts.append(f"{label} {short}: {ms:.3f} ms{rate}")
    return f"{size} kernels: " + "; ".join(parts)
