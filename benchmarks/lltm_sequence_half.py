"""LLTM sequence in bfloat16 / float16 on the GPU: this package's lltm_sequence against cuDNN's
nn.LSTM in the same dtype, forward and forward + backward, every variant in the same run (CUDA
events after warm-up, medians over alternating rounds), plus the GPU time per step of the
recurrence kernels (profiler) and the errors of ours and of the plain-PyTorch loop in the same
dtype against float64 (DESIGN.md's 2x rule), and whether the backward is bitwise
deterministic.

    python -m benchmarks.lltm_sequence_half [--sizes T,B,F,S ...] [--dtypes bfloat16 float16]
        [--md FILE]

Gradients: of the input, h0, c0 and all parameters (nn.LSTM: its four parameters).
"""

import argparse
import os
import statistics

import torch

from benchmarks.report import emit
from benchmarks.timing import medians_ms

SIZES = [(256, 16, 32, 128), (128, 64, 128, 256), (128, 64, 512, 512), (32, 256, 256, 1024)]


def make(T, B, F, S, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    stdv = 1.0 / S**0.5
    t = [torch.randn(T, B, F, generator=g, dtype=torch.float64),
         (torch.rand(3 * S, S + F, generator=g, dtype=torch.float64) * 2 - 1) * stdv,
         (torch.rand(3 * S, generator=g, dtype=torch.float64) * 2 - 1) * stdv,
         torch.randn(B, S, generator=g, dtype=torch.float64) * 0.5,
         torch.randn(B, S, generator=g, dtype=torch.float64) * 0.5]
    return [x.to("cuda", dtype) for x in t]


def plain_loop(x, w, b, h, c):
    """The tutorial's cell looped in plain PyTorch (lltm.reference)."""
    from lltm.reference import lltm_cell_reference

    outs = []
    for t in range(x.shape[0]):
        h, c = lltm_cell_reference(x[t], w, b, h, c)
        outs.append(h)
    return torch.stack(outs), (h, c)


def results(fn, inputs, cots):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out, (h, c) = fn(*leaves)
    loss = (out * cots[0].to(out)).sum() + (h * cots[1].to(h)).sum() + (c * cots[2].to(c)).sum()
    return [out.detach(), h.detach(), c.detach(), *torch.autograd.grad(loss, leaves)]


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-300)).item()


def accuracy(T, B, F, S, dtype):
    """max over the 8 results of ours / plain-loop error against float64, and each max."""
    import lltm

    base = make(T, B, F, S, torch.float64)
    g = torch.Generator().manual_seed(1)
    cots = [torch.randn(T, B, S, generator=g, dtype=torch.float64).cuda(),
            torch.randn(B, S, generator=g, dtype=torch.float64).cuda(),
            torch.randn(B, S, generator=g, dtype=torch.float64).cuda()]
    want = results(plain_loop, base, cots)
    half = [t.to(dtype) for t in base]
    ours = results(lltm.lltm_sequence, half, cots)
    again = results(lltm.lltm_sequence, half, cots)
    plain = results(plain_loop, half, cots)
    e_ours = [rel(o, w) for o, w in zip(ours, want)]
    e_plain = [rel(p, w) for p, w in zip(plain, want)]
    ratio = max(o / max(p, 1e-30) for o, p in zip(e_ours, e_plain))
    det = all(torch.equal(a, b) for a, b in zip(ours, again))
    return max(e_ours), max(e_plain), ratio, det


def per_step_kernels(fn, T):
    """GPU time of one call of fn per step (us): all kernels, and the recurrence kernels."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
    total = rec = 0.0
    names = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            total += ev.device_time_total
            # the recurrence kernels: lltm::persistent:: (cluster), lltm::cta:: (single CTA),
            # lltm::step:: (one kernel per step)
            if any(k in ev.name for k in ("persistent", "lltm::cta::", "lltm::step::", "RNN",
                                          "LSTM")):
                rec += ev.device_time_total
                short = ev.name.split("(")[0][-40:]
                names[short] = names.get(short, 0.0) + ev.device_time_total
    return total / 3 / T, rec / 3 / T, {k: v / 3 / T for k, v in names.items()}


def bench(T, B, F, S, dtype, rounds):
    import lltm

    x, w, b, h0, c0 = make(T, B, F, S, dtype)
    params = [w, b, h0, c0]
    for p in params:
        p.requires_grad_()
    xg = x.clone().requires_grad_()
    go = torch.randn(T, B, S, device="cuda", dtype=dtype)
    lstm = torch.nn.LSTM(F, S).to("cuda", dtype)
    lh0 = torch.randn(1, B, S, device="cuda", dtype=dtype, requires_grad=True)
    lc0 = torch.randn(1, B, S, device="cuda", dtype=dtype, requires_grad=True)

    def ours_f(i=0):
        with torch.no_grad():
            lltm.lltm_sequence(x, w, b, h0, c0)

    def ours_fb(i=0):
        out, (h, c) = lltm.lltm_sequence(xg, w, b, h0, c0)
        torch.autograd.backward([out, h, c], [go, go[0], go[1 % T]])

    def cudnn_f(i=0):
        with torch.no_grad():
            lstm(x, (lh0, lc0))

    def cudnn_fb(i=0):
        out, (h, c) = lstm(xg, (lh0, lc0))
        torch.autograd.backward([out, h, c], [go, go[0][None], go[1 % T][None]])

    fns = [ours_f, cudnn_f, ours_fb, cudnn_fb]
    ms = medians_ms(fns, "cuda", warmup=5, reps=60, min_s=0.6, rounds=rounds)
    k_ours = per_step_kernels(ours_fb, T)
    k_ours_f = per_step_kernels(ours_f, T)
    k_cudnn = per_step_kernels(cudnn_fb, T)
    return ms, k_ours, k_ours_f, k_cudnn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="*", default=None)
    ap.add_argument("--dtypes", nargs="*", default=["bfloat16", "float16"])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--md", default=None)
    ap.add_argument("--no-accuracy", action="store_true")
    args = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    sizes = [tuple(int(v) for v in s.split(",")) for s in args.sizes] if args.sizes else SIZES
    dev = torch.cuda.get_device_name()
    head = (f"device {dev}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
            f"commit {os.environ.get('FUSED_OPS_COMMIT', '?')}")
    lines = [head, "",
             "| dtype | (T, B, F, S) | ours fwd / fwd+bwd ms | cuDNN fwd / fwd+bwd ms | "
             "cuDNN/ours fwd / fwd+bwd | ours GPU us/step fwd / fwd+bwd (recurrence) | "
             "cuDNN GPU us/step fwd+bwd | err ours / plain (max rel) | worst ratio | det |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    details = []
    for dname in args.dtypes:
        dtype = getattr(torch, dname)
        for (T, B, F, S) in sizes:
            ms, ko, kof, kc = bench(T, B, F, S, dtype, args.rounds)
            if args.no_accuracy:
                acc = "-", "-", "-"
            else:
                eo, ep, ratio, det = accuracy(min(T, 64), B, F, S, dtype)
                acc = f"{eo:.2e} / {ep:.2e}", f"{ratio:.2f}", "yes" if det else "NO"
            lines.append(
                f"| {dname} | {(T, B, F, S)} | {ms[0]:.3f} / {ms[2]:.3f} | {ms[1]:.3f} / "
                f"{ms[3]:.3f} | {ms[1] / ms[0]:.2f}x / {ms[3] / ms[2]:.2f}x | "
                f"{kof[0]:.1f} ({kof[1]:.1f}) / {ko[0]:.1f} ({ko[1]:.1f}) | {kc[0]:.1f} | "
                f"{acc[0]} | {acc[1]} | {acc[2]} |")
            details.append(f"{dname} {(T, B, F, S)} ours kernels/step: {ko[2]}")
            print(lines[-1], flush=True)
    text = "\n".join(lines + ["", *details]) + "\n"
    emit(text, args.md)


if __name__ == "__main__":
    main()
