"""Where the host time of one op call goes: TimeX's and the LLTM's ops below autograd.

For each case: the host time of one call issued to an idle GPU (synchronised before each
call, only the call timed; median of many), the wall time per call of back-to-back calls
(max of host and GPU; step_host.per_call_us), the whole training step through eager
autograd, and the profiler's host-side events of the op calls (the CUDA runtime calls among
them: launches, attribute and occupancy queries, memsets) per call, so a fixed cost per call
shows with its name.
Usage: python -m benchmarks.op_host [--cases timex lltm] [--dtype bfloat16 float32]
[--timex-shapes "B,C,T" ...]
"""

import argparse
import statistics
import time

import torch

import lltm
import rwkv_ops
from benchmarks.step_host import per_call_us
from torch_fused_ops._eager import below_autograd


def host_us(fn, n=200):
    """Median host time of one call that finds the GPU idle (synchronised before each)."""
    for _ in range(20):
        fn()
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def runtime_calls(fn, calls=50):
    """The profiler's host events per call of fn: (name, count per call, us per call), the
    CUDA runtime's and the ops' own, largest total first; and the GPU time per call."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    rows, gpu = [], 0.0
    for e in prof.key_averages():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            gpu += e.self_device_time_total
        elif e.key.startswith(("cuda", "cu", "rwkv_ops::", "lltm::", "aten::")):
            rows.append((e.key, e.count / calls, e.self_cpu_time_total / calls))
    rows.sort(key=lambda r: -r[2])
    return rows, gpu / calls


def report(name, fns):
    print(f"\n### {name}")
    for label, fn in fns:
        loop = per_call_us(fn, "cuda", n=200, rounds=5)
        print(f"{label:34s} host {host_us(fn):8.1f} us   loop {loop:8.1f} us")
    label, fn = fns[0]
    rows, gpu = runtime_calls(fn)
    print(f"profile of '{label}': GPU {gpu:.1f} us per call; host events per call:")
    for key, count, us in rows[:14]:
        print(f"    {key[:60]:60s} x{count:5.2f} {us:8.2f} us")


TIMEX_SHAPES = [(16, 512, 1024), (4, 1024, 2048), (1, 1024, 16384), (1, 128, 49152),
                (1, 64, 65536)]


def timex_cases(dtype, shapes=TIMEX_SHAPES):
    fwd, bwd = torch.ops.rwkv_ops.timex_forward.default, torch.ops.rwkv_ops.timex_backward.default
    keep = torch.ops.rwkv_ops.timex_forward_keep.default
    kept = torch.ops.rwkv_ops.timex_backward_kept.default
    for B, C, T in shapes:
        w = torch.randn(C, T, device="cuda", dtype=dtype) * T ** -0.5
        k = torch.randn(B, C, T, device="cuda", dtype=dtype)
        g = torch.randn(B, C, T, device="cuda", dtype=dtype)
        wl, kl = w.clone().requires_grad_(), k.clone().requires_grad_()

        def ops():
            with below_autograd():
                fwd(w, k, 0.0)
                bwd(g, w, k)

        def kept_ops():  # what timex's autograd.Function runs: the forward's spectra kept
            with below_autograd():
                _, kz, wz = keep(w, k, 0.0)
                kept(g, w, k, kz, wz)

        def step():
            return torch.autograd.grad(rwkv_ops.timex(wl, kl), (wl, kl), g)

        algo = rwkv_ops.timex_algorithm(k)
        report(f"timex {dtype} {(B, C, T)} {algo}", [("fwd + bwd ops, below autograd", ops),
                                                    ("keep + kept ops, below autograd", kept_ops),
                                                    ("step (timex + autograd.grad)", step)])


def lltm_cases(dtype):
    g = torch.Generator().manual_seed(0)

    def rand(*shape, s=1.0):
        return (torch.randn(*shape, generator=g) * s).to("cuda", dtype)

    B, F, S = 16, 32, 128
    leaves = [rand(B, F), rand(3 * S, S + F, s=S ** -0.5), rand(3 * S, s=S ** -0.5),
              rand(B, S), rand(B, S)]
    fwd, bwd = torch.ops.lltm.lltm_forward.default, torch.ops.lltm.lltm_backward.default
    out = fwd(*leaves)
    gh, gc = rand(B, S), rand(B, S)

    def cell_ops():
        with below_autograd():
            fwd(*leaves)
            bwd(gh, gc, out[1], out[3], out[2], leaves[1], [True] * 4)

    req = [t.clone().requires_grad_() for t in leaves]

    def cell_step():
        return torch.autograd.grad(lltm.lltm_cell(*req), req, (gh, gc))

    report(f"lltm cell {dtype} {(B, F, S)}", [("fwd + bwd ops, below autograd", cell_ops),
                                              ("step (lltm_cell + autograd.grad)", cell_step)])
    for T in (64, 256):
        x = rand(T, B, F).requires_grad_()
        seq = [x] + req[1:]
        grads = (rand(T, B, S), rand(B, S), rand(B, S))

        def seq_step():
            output, (h_n, c_n) = lltm.lltm_sequence(*seq)
            return torch.autograd.grad((output, h_n, c_n), seq, grads)

        def seq_fwd():
            with torch.no_grad():
                lltm.lltm_sequence(*seq)

        report(f"lltm_sequence {dtype} {(T, B, F, S)}",
               [("step (lltm_sequence + autograd.grad)", seq_step), ("forward, no grad", seq_fwd)])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", nargs="+", default=["timex", "lltm"])
    parser.add_argument("--dtype", nargs="+", default=["bfloat16", "float32"])
    parser.add_argument("--timex-shapes", nargs="+", default=None,
                        help='TimeX shapes "B,C,T" (default: TIMEX_SHAPES)')
    args = parser.parse_args()
    shapes = (TIMEX_SHAPES if args.timex_shapes is None else
              [tuple(int(v) for v in s.strip("() ").split(",")) for s in args.timex_shapes])
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for dt in args.dtype:
        dtype = getattr(torch, dt)
        if "timex" in args.cases:
            timex_cases(dtype, shapes)
        if "lltm" in args.cases:
            lltm_cases(dtype)


if __name__ == "__main__":
    main()
