"""TimeX against the plain-PyTorch FFT convolution, per dtype, at long T (issue 29's shapes):
forward and forward + backward (both gradients, through autograd) of timex as "auto" runs it,
of timex forced to the library FFT path ("fft_library", the path past T = 16384 before the
cluster kernels), and of rwkv_ops.reference.timex_fftconv (the FFT convolution users run;
for bfloat16 and float16 on inputs cast to float32 and the output cast back, as cuFFT has no
bfloat16 and half-precision cuFFT takes powers of two only). CUDA-event medians after
warm-up, the variants of a shape timed in alternating rounds (benchmarks/timing.py); each
variant's error against float64 on the same (rounded) inputs, on a few channels.

    python -m benchmarks.timex_speedups [--out FILE.md] [--shapes "(1, 512, 32768)" ...]
        [--compare "split:RWKV_TIMEX_CLUSTER_FORWARD=split" ...] [--dtypes D ...] [--reps N]
        [--budget S] [--single-threaded] [--cpus 2]

--single-threaded adds the forward + backward of ours and of the FFT convolution with
autograd's engine single-threaded (torch.autograd.set_multithreading_enabled(False): the
backward runs on the calling thread, not handed to the engine's CUDA device thread and back),
timed in the same alternating rounds: where a call is bound by the host, the difference is
the handoff's cost.

--compare adds variants of timex with environment variables set (NAME:VAR=VALUE,VAR=VALUE),
timed in the same alternating rounds, in a second table.

--cpus runs the process on those CPUs only (os.sched_setaffinity, as `taskset -c`). On the
lent H200's host a one-CPU run took the forward + backward's wall time down to its GPU time
where that exceeds the host's own, and the default run spent up to 0.3 ms more
(results/issue29_runs/run41): presumably as the engine's CUDA thread then runs on the CPU
that hands it the backward instead of waking an idle one.
"""

import argparse
import contextlib
import os

import torch

import rwkv_ops
from benchmarks.report import emit
from benchmarks.timing import (cuda_busy_ms, environment, input_sets, medians_ms,
                               single_threaded)
from rwkv_ops.reference import timex_fftconv

SHAPES = [(4, 1024, 4096), (1, 1024, 16384), (1, 384, 20000), (1, 512, 32768),
          (1, 128, 49152), (1, 256, 65536)]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
EPS = 0.01
CHECK_CHANNELS = 4


def fftconv_upcast(w, k, eps):
    """The FFT convolution in float32 on upcast inputs, cast back to the inputs' dtype."""
    if w.dtype == torch.float32:
        return timex_fftconv(w, k, eps)
    return timex_fftconv(w.float(), k.float(), eps).to(w.dtype)


@contextlib.contextmanager
def env_vars(env):
    """These environment variables set (RWKV_TIMEX_ALGO=...) for the block, then restored."""
    old = {name: os.environ.pop(name, None) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in old.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value


def forced(**env):
    """timex with these environment variables set for the call; fn.env holds them, so that a
    caller also sets them around the backward (autograd runs it after the call returns, and
    the op picks its algorithm again there: with the forward's setting gone, the backward of
    a forced forward would run auto's algorithm)."""

    def fn(w, k, eps):
        with env_vars(env):
            return rwkv_ops.timex(w, k, eps)

    fn.env = env
    return fn


def max_rel(got, want):
    return ((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


def error(fn, w, k, g):
    """Largest max-relative error of out, grad_w, grad_k on CHECK_CHANNELS channels against
    the float64 FFT convolution of the same rounded inputs."""
    c = slice(0, CHECK_CHANNELS)
    w64, k64 = (t.detach()[..., c, :].double().requires_grad_() for t in (w, k))
    out64 = timex_fftconv(w64, k64, EPS)
    want = [out64.detach(), *torch.autograd.grad(out64, [w64, k64], g[:, c].double())]
    wc, kc = (t.detach()[..., c, :].clone().requires_grad_() for t in (w, k))
    with env_vars(getattr(fn, "env", {})):
        out = fn(wc, kc, EPS)
        got = [out.detach(), *torch.autograd.grad(out, [wc, kc], g[:, c])]
    return max(max_rel(a, b) for a, b in zip(got, want))


def parse_cpus(spec):
    """{2, 4, 5} from "2,4-5"."""
    cpus = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def parse_compare(specs):
    """{name: env} from "NAME:VAR=VALUE,VAR=VALUE" strings."""
    out = {}
    for spec in specs or []:
        name, _, pairs = spec.partition(":")
        out[name] = dict(pair.split("=", 1) for pair in pairs.split(",") if pair)
    return out


def measure_shape(B, C, T, dtype, budget, compare=None, reps=400, single=False):
    variants = {"ours": forced(), "ours fft_library": forced(RWKV_TIMEX_ALGO="fft_library"),
                "FFT conv": fftconv_upcast}
    if T <= 16384:
        del variants["ours fft_library"]
    for name, env in (compare or {}).items():
        variants[name] = forced(**env)

    def make():
        w = (torch.randn(C, T, device="cuda") / T**0.5).to(dtype).requires_grad_()
        k = torch.randn(B, C, T, device="cuda").to(dtype).requires_grad_()
        g = torch.randn(B, C, T, device="cuda").to(dtype)
        return w, k, g

    size = torch.finfo(dtype).bits // 8
    sets = input_sets(make, size * (C * T + 2 * B * C * T), "cuda")
    w, k, _ = sets[0]
    algo = rwkv_ops.timex_algorithm(k.detach())
    errs = {name: error(fn, *sets[0]) for name, fn in variants.items()}
    fwd_fns, total_fns = [], []
    for fn in variants.values():
        def fwd(i, fn=fn):
            s = sets[i % len(sets)]
            return fn(s[0], s[1], EPS)

        def total(i, fn=fn):
            s = sets[i % len(sets)]
            with env_vars(getattr(fn, "env", {})):  # the backward too runs the forced path
                out = fn(s[0], s[1], EPS)
                return torch.autograd.grad(out, [s[0], s[1]], s[2])

        fwd_fns.append(fwd)
        total_fns.append(total)
    single_names = ["ours", "FFT conv"] if single else []
    single_fns = [single_threaded(total_fns[list(variants).index(name)])
                  for name in single_names]
    times = medians_ms(fwd_fns + total_fns + single_fns, "cuda", warmup=3, reps=reps,
                       budget_s=budget, rounds=3)
    n = len(variants)
    single_ms = dict(zip(single_names, times[2 * n:]))
    # The GPU's busy time in the forward + backward of ours and of the FFT conv (the union of
    # the kernels' intervals, profiler: a kernel launched to overlap the one before it counts
    # once): the rest of a wall time is the host's (autograd, the op calls) where the GPU waits.
    names = list(variants)
    gpu = [cuda_busy_ms(total_fns[names.index(name)])
           for name in ("ours", "FFT conv")]
    return algo, gpu, {name: (times[i], times[n + i], errs[name])
                       for i, name in enumerate(variants)}, single_ms


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the table to this markdown file")
    parser.add_argument("--shapes", nargs="*", help='e.g. "(1, 512, 32768)" (default: SHAPES)')
    # Calls bound by the host move by 10-30% over 30 timed calls, less over 400.
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per measurement")
    parser.add_argument("--compare", nargs="*", help='extra variants, "NAME:VAR=VALUE,..."')
    parser.add_argument("--reps", type=int, default=400,
                        help="timed calls per variant (fewer where --budget runs out first)")
    parser.add_argument("--single-threaded", action="store_true",
                        help="also fwd+bwd with autograd single-threaded, ours and FFT conv")
    parser.add_argument("--dtypes", nargs="*", default=[str(d)[6:] for d in DTYPES],
                        help="of float32, bfloat16, float16 (default: all three)")
    parser.add_argument("--cpus", help='run on these CPUs only, e.g. "2" or "0-3" (as taskset '
                        "-c): on a host where waking a thread on an idle CPU is slow, one CPU "
                        "keeps autograd's hand-off to its CUDA thread out of the wall times")
    args = parser.parse_args(argv)
    if args.cpus:  # before CUDA and autograd start their threads, which inherit it
        os.sched_setaffinity(0, parse_cpus(args.cpus))
    compare = parse_compare(args.compare)
    single = ["| dtype | (B, C, T) | fwd+bwd ours / FFT conv, multi-threaded autograd | speedup "
              "| fwd+bwd ours / FFT conv, single-threaded autograd | speedup |",
              "|" + " --- |" * 6]
    extra = ["| dtype | (B, C, T) | variant | fwd / fwd+bwd | speedup fwd / fwd+bwd | err |",
             "|" + " --- |" * 6]
    shapes = [tuple(int(x) for x in s.strip("() ").split(",")) for s in args.shapes] \
        if args.shapes else SHAPES
    env = environment()
    commit = os.environ.get("FUSED_OPS_COMMIT") or env.get("commit")
    cpus = f", CPUs {args.cpus} of {os.cpu_count()}" if args.cpus else ""
    lines = [f"TimeX vs the FFT convolution: {env.get('device')}, torch {env['torch']}, "
             f"CUDA {env['cuda']}, driver {env.get('driver')}, commit {commit}{cpus}", "",
             "ms (CUDA-event medians, alternating rounds); fwd+bwd = forward and both gradients "
             "through autograd; GPU = the GPU's busy time per fwd+bwd (the union of the kernels' "
             "intervals, profiler), ours / FFT conv, and its ratio; speedup = "
             "FFT conv time / ours; err = max |got - want| / max |want| over out, grad_w, "
             "grad_k vs float64 on the same rounded inputs", "",
             "| dtype | (B, C, T) | algorithm | ours fwd / fwd+bwd | GPU fwd+bwd: ours / FFT conv "
             "| fft_library fwd / fwd+bwd | FFT conv fwd / fwd+bwd | speedup fwd / fwd+bwd "
             "| (fft_library speedup) | err ours / FFT conv |",
             "|" + " --- |" * 10]
    for dtype in (getattr(torch, d) for d in args.dtypes):
        for B, C, T in shapes:
            algo, gpu, r, st = measure_shape(B, C, T, dtype, args.budget, compare, args.reps,
                                             args.single_threaded)
            of, ot, oe = r["ours"]
            ff, ft, fe = r["FFT conv"]
            lib = r.get("ours fft_library")
            lib_txt = f"{lib[0]:.3f} / {lib[1]:.3f}" if lib else "-"
            lib_sp = f"{ff / lib[0]:.2f}x / {ft / lib[1]:.2f}x" if lib else "-"
            lines.append(f"| {str(dtype)[6:]} | ({B}, {C}, {T}) | {algo} | {of:.3f} / {ot:.3f} | "
                         f"{gpu[0]:.3f} / {gpu[1]:.3f} = {gpu[1] / gpu[0]:.2f}x | {lib_txt} | "
                         f"{ff:.3f} / {ft:.3f} | "
                         f"{ff / of:.2f}x / {ft / ot:.2f}x | {lib_sp} | {oe:.1e} / {fe:.1e} |")
            print(lines[-1], flush=True)
            for name in compare:
                vf, vt, ve = r[name]
                extra.append(f"| {str(dtype)[6:]} | ({B}, {C}, {T}) | {name} | {vf:.3f} / "
                             f"{vt:.3f} | {ff / vf:.2f}x / {ft / vt:.2f}x | {ve:.1e} |")
                print(extra[-1], flush=True)
            if st:
                single.append(f"| {str(dtype)[6:]} | ({B}, {C}, {T}) | {ot:.3f} / {ft:.3f} | "
                              f"{ft / ot:.2f}x | {st['ours']:.3f} / {st['FFT conv']:.3f} | "
                              f"{st['FFT conv'] / st['ours']:.2f}x |")
                print(single[-1], flush=True)
            torch.cuda.empty_cache()
    if compare:
        lines += ["", "Variants (same run, same rounds):", "", *extra]
    if args.single_threaded:
        lines += ["", "Autograd's engine multi-threaded (the default) and single-threaded "
                  "(torch.autograd.set_multithreading_enabled(False)), fwd+bwd ms, same run, "
                  "same rounds:", "", *single]
    text = "\n".join(lines) + "\n"
    emit(text, args.out)


if __name__ == "__main__":
    main()
