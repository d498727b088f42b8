"""lltm_sequence's backward on CUDA: the weight and input gradients as one kernel
(LLTM_SEQUENCE_WGRAD=fused, csrc/lltm/lltm_sequence_wgrad.cu) against cuBLAS's GEMMs and the
column sum (=gemm), per (T, B, F, S): the training step (forward with every input requiring
grad, then autograd.grad of output, h_n, c_n) timed back to back (wall time per call, 7
alternating rounds of 200 calls: step_host.per_call_us_alternating) and per call (CUDA-event
medians, alternating rounds: timing.medians_ms); from the profiler, the step's kernels' summed
time, the weight gradients' kernels alone (fused: the kernels that the gemm mode does not run,
the one kernel and its workspace's memset, which behind the cta path starts while the
recurrence runs and waits on it; gemm: its total less the fused step's other kernels, since a
GEMM may share its kernel's name with the forward's) and the backward recurrence's kernel
(which publishes its progress in the fused mode). float32 and bfloat16, CUDA only:

    python -m benchmarks.lltm_sequence_wgrad [--out FILE.md]
"""

import argparse
import os

import torch

import lltm
from benchmarks.report import emit
from benchmarks.step_host import per_call_us_alternating
from benchmarks.timing import cuda_kernels, environment, medians_ms

SIZES = [(64, 16, 32, 128), (256, 16, 32, 128), (512, 16, 32, 128), (1024, 8, 32, 64),
         (32, 256, 256, 128), (128, 64, 128, 256), (1024, 16, 32, 128), (2048, 16, 32, 128)]


def with_mode(fn, mode):
    def run(*args):
        os.environ["LLTM_SEQUENCE_WGRAD"] = mode
        try:
            return fn(*args)
        finally:
            os.environ.pop("LLTM_SEQUENCE_WGRAD", None)

    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    args = parser.parse_args()
    env = environment()
    commit = os.environ.get("FUSED_OPS_COMMIT") or env.get("commit")
    lines = [f"{env.get('device')}, torch {env['torch']}, commit {commit}", "",
             "| dtype | (T, B, F, S) | rows T B | step back to back us: fused / gemm | per call ms: "
             "fused / gemm | GPU kernels us: fused / gemm | weight gradients' kernels us: fused / "
             "gemm | backward recurrence us: fused / gemm |", "|" + " --- |" * 8]
    g = torch.Generator().manual_seed(0)
    for dtype, (T, B, F, S) in [(d, size) for d in (torch.float32, torch.bfloat16)
                                for size in SIZES]:
        def rand(*shape, s=1.0):
            return (torch.randn(*shape, generator=g) * s).to("cuda", dtype)

        leaves = [rand(T, B, F), rand(3 * S, S + F, s=S**-0.5), rand(3 * S, s=S**-0.5),
                  rand(B, S), rand(B, S)]
        leaves = [t.requires_grad_() for t in leaves]
        grads = (rand(T, B, S), rand(B, S), rand(B, S))

        def step(i=0):
            output, (h_n, c_n) = lltm.lltm_sequence(*leaves)
            return torch.autograd.grad((output, h_n, c_n), leaves, grads)

        fused, gemm = with_mode(step, "fused"), with_mode(step, "gemm")
        back = per_call_us_alternating([fused, gemm], "cuda", n=200)
        per_call = medians_ms([fused, gemm], "cuda", warmup=10, reps=400, rounds=5)
        kernels = [cuda_kernels(fn) for fn in (fused, gemm)]
        gpu = [sum(ms for _, ms in k.values()) * 1e3 for k in kernels]
        own_fused = sum(ms for name, (_, ms) in kernels[0].items()
                        if name not in kernels[1]) * 1e3
        own = [own_fused, gpu[1] - (gpu[0] - own_fused)]
        recurrence = [sum(ms for name, (_, ms) in k.items() if "backward_kernel" in name) * 1e3
                      for k in kernels]
        lines.append(f"| {str(dtype)[6:]} | {(T, B, F, S)} | {T * B} | "
                     f"{back[0]:.1f} / {back[1]:.1f} | {per_call[0]:.3f} / {per_call[1]:.3f} | "
                     f"{gpu[0]:.1f} / {gpu[1]:.1f} | "
                     f"{own[0]:.1f} / {own[1]:.1f} | {recurrence[0]:.1f} / {recurrence[1]:.1f} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    emit(text, args.out)


if __name__ == "__main__":
    main()
