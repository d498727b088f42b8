"""Compile FlashRNN's fused LSTM kernels for the sequence benchmark's FlashRNN sizes ahead of it,
one process per (size, dtype), all at once.

FlashRNN JIT-compiles its fused kernel per shape and dtype at the first call (about a minute
each, one compiler process at a time); the benchmark's first call of each then finds it in
torch's extension cache. Six shapes compiled one after the other cost more device time than
the benchmark itself. Usage: python -m benchmarks.flashrnn_warmup [--dtypes bfloat16 float16]
"""

import argparse
import multiprocessing
import time


def _compile(args):
    T, B, F, S, dname = args
    import torch

    from benchmarks.bench_lltm_sequence import FlashRnn
    dtype = getattr(torch, dname)
    t0 = time.time()
    try:
        frnn = FlashRnn(F, S, "cuda", dtype)
        x = torch.randn(T, B, F, device="cuda", dtype=dtype, requires_grad=True)
        out = frnn.fwd(x)
        out.sum().backward()
        torch.cuda.synchronize()
        return f"{(T, B, F, S)} {dname}: compiled in {time.time() - t0:.0f} s"
    except Exception as e:  # reported, not raised: the benchmark reports the row as failed
        return f"{(T, B, F, S)} {dname}: FAILED {type(e).__name__}: {str(e)[:300]}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"])
    a = parser.parse_args()
    from benchmarks.bench_lltm_sequence import FLASHRNN_SIZES, _flashrnn_module
    if _flashrnn_module() is None:
        print("flashrnn is not importable: nothing to compile")
        return
    jobs = [(*size, d) for size in FLASHRNN_SIZES for d in a.dtypes]
    with multiprocessing.get_context("spawn").Pool(len(jobs)) as pool:
        for line in pool.imap_unordered(_compile, jobs):
            print(line, flush=True)


if __name__ == "__main__":
    main()
