"""Where the host time of one LLTM training step goes (issue 26: the single step is host-bound).

Times, per call at one size (default (16, 32, 128), float32, the device given): the whole
step as bench_lltm times it (forward with every input requiring grad, then
torch.autograd.grad of both outputs), the forward op alone and the backward op alone below
autograd, an empty torch.autograd.Function step (the engine's own fixed cost), and the GPU
kernel time of the step (profiler); then the profiler's host-side table of the step, sorted
by self CPU time. With --seq T, the same for lltm_sequence over T steps (the step: its
forward and every gradient), and beside it the same step of torch.nn.LSTM (cuDNN on a GPU;
input, both initial states and the parameters differentiated). Every step is also timed with
autograd's engine single-threaded (torch.autograd.set_multithreading_enabled(False): the
backward on the calling thread, not handed to the engine's CUDA device thread and back). The
rows are timed in alternating rounds. Usage:
python -m benchmarks.step_host [--device cuda] [--size B F S] [--seq T]
"""

import argparse
import statistics
import time

import torch

import lltm
from benchmarks.timing import single_threaded
from torch_fused_ops._eager import below_autograd


def per_call_us(fn, device, n=300, rounds=7):
    """Median over rounds of the wall time per call of n back-to-back calls (synchronised
    before and after each round): the host-bound rate when the host is the limit."""
    return per_call_us_alternating([fn], device, n, rounds)[0]


def per_call_us_alternating(fns, device, n=300, rounds=7):
    """per_call_us of each of fns, each round timing every function in turn (a busy spell of
    the machine then reaches them alike)."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for fn in fns:
        for _ in range(50):
            fn()
    times = [[] for _ in fns]
    for _ in range(rounds):
        for fn, out in zip(fns, times):
            sync()
            start = time.perf_counter()
            for _ in range(n):
                fn()
            sync()
            out.append((time.perf_counter() - start) / n * 1e6)
    return [statistics.median(t) for t in times]


class _Empty(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", type=int, nargs=3, default=(16, 32, 128))
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--seq", type=int, default=0, help="T: time lltm_sequence instead")
    args = parser.parse_args()
    device, dtype = args.device, getattr(torch, args.dtype)
    B, F, S = args.size
    g = torch.Generator().manual_seed(0)
    scale = S ** -0.5

    def rand(*shape, s=1.0):
        return (torch.randn(*shape, generator=g) * s).to(device, dtype)

    T = args.seq
    x_shape = (T, B, F) if T else (B, F)
    leaves = [rand(*x_shape), rand(3 * S, S + F, s=scale), rand(3 * S, s=scale), rand(B, S),
              rand(B, S)]
    leaves = [t.requires_grad_() for t in leaves]
    grads = (rand(T, B, S), rand(B, S), rand(B, S)) if T else (rand(B, S), rand(B, S))

    if T:
        def step():
            output, (h_n, c_n) = lltm.lltm_sequence(*leaves)
            return torch.autograd.grad((output, h_n, c_n), leaves, grads)

        def fwd_only():
            with torch.no_grad():
                lltm.lltm_sequence(*leaves)

        bwd_only = None
        lstm = torch.nn.LSTM(F, S).to(device, dtype)
        lstm_leaves = [leaves[0], leaves[3].unsqueeze(0), leaves[4].unsqueeze(0),
                       *lstm.parameters()]

        def lstm_step():
            output, (h_n, c_n) = lstm(lstm_leaves[0], (lstm_leaves[1], lstm_leaves[2]))
            return torch.autograd.grad((output, h_n, c_n), lstm_leaves,
                                       (grads[0], grads[1][None], grads[2][None]))
    else:
        def step():
            outs = lltm.lltm_cell(*leaves)
            return torch.autograd.grad(outs, leaves, grads)

        fwd = torch.ops.lltm.lltm_forward.default
        bwd = torch.ops.lltm.lltm_backward.default
        plain = [t.detach() for t in leaves]
        out = fwd(*plain)
        mask = [True] * 4

        def fwd_only():
            with below_autograd():
                fwd(*plain)

        def bwd_only():
            with below_autograd():
                bwd(grads[0], grads[1], out[1], out[3], out[2], plain[1], mask)

    x = rand(B, S).requires_grad_()
    g0 = rand(B, S)

    def empty_step():
        return torch.autograd.grad(_Empty.apply(x), x, g0)

    rows = [("step (fwd + autograd.grad)", step),
            ("step, single-threaded autograd", single_threaded(step)),
            ("forward, no grad" if T else "forward op, below autograd", fwd_only),
            ("backward op, below autograd", bwd_only), ("empty Function step", empty_step),
            ("empty Function step, single-threaded", single_threaded(empty_step))]
    if T:
        rows += [("nn.LSTM step", lstm_step),
                 ("nn.LSTM step, single-threaded", single_threaded(lstm_step))]
    rows = [(name, fn) for name, fn in rows if fn is not None]
    print(f"device {device} ({torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}), "
          f"torch {torch.__version__}, size (B, F, S) = {(B, F, S)}"
          + (f", lltm_sequence T = {T}" if T else "") + f", {args.dtype}")
    for (name, _), us in zip(rows, per_call_us_alternating([fn for _, fn in rows], device)):
        print(f"{name:38s} {us:8.1f} us per call")
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    for _ in range(20):
        step()
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(50):
            step()
        if device == "cuda":
            torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
    print(table)
    if device == "cuda":
        kernel_us = sum(e.self_device_time_total for e in prof.key_averages()
                        if e.device_type == torch.autograd.DeviceType.CUDA) / 50
        print(f"GPU kernel time per step: {kernel_us:.1f} us")


if __name__ == "__main__":
    main()
