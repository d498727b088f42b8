"""LLTM sequence at small states on CUDA: each of the op's persistent paths forced
(LLTM_SEQUENCE_PATH=cta: single-CTA kernels; =persistent: cluster kernels) against cuDNN's
nn.LSTM, every variant in the same run (CUDA events after warm-up, medians over alternating
rounds), float32 with TF32 off; the per-step GPU time of one forward + backward from the
profiler (every kernel of the call, and the recurrence kernels alone); and the errors of each
path and of the plain PyTorch float32 loop against float64.

    python -m benchmarks.bench_lltm_sequence_cta [--sizes "(T, B, F, S)" ...]
        [--paths cta persistent] [--out FILE.md]

benchmarks/bench_lltm_sequence.py is the package's sequence benchmark; this script adds the
sizes and the path axis that the cta path's crossover needs (the op's choice, "auto", is
whichever it picks).
"""

import argparse
import ast
import os

import torch

import lltm
from benchmarks.bench_lltm_sequence import Lstm, cell_loop, make_set, max_rel_err, results_of
from benchmarks.timing import cuda_kernels, environment, input_sets, median_ms, medians_ms
from lltm.reference import lltm_cell_reference

SIZES = [(64, 16, 32, 128), (256, 16, 32, 128), (1024, 16, 32, 128), (2048, 16, 32, 128),
         (256, 1, 32, 128), (256, 64, 32, 128), (256, 256, 32, 128), (256, 8, 32, 64),
         (256, 8, 32, 96), (256, 32, 32, 32), (512, 7, 16, 33), (64, 128, 64, 128)]
# The paths (LLTM_SEQUENCE_PATH): "cta" the single-CTA kernels, "persistent" the cluster kernels.
PATHS = ("cta", "persistent")
ROUNDS = 5


def set_path(path):
    os.environ["LLTM_SEQUENCE_PATH"] = path


def with_path(path, fn):
    def run(i):
        set_path(path)
        return fn(i)
    return run


def fused(x, weights, bias, h0, c0):
    output, (h_n, c_n) = lltm.lltm_sequence(x, weights, bias, h0, c0)
    return output, h_n, c_n


def per_step_us(fn, T, names=None):
    """GPU microseconds per step of fn(i): all kernels, or those whose name contains one of
    names."""
    kernels = cuda_kernels(fn)
    total = sum(ms for k, (_, ms) in kernels.items()
                if names is None or any(n in k for n in names))
    return total * 1e3 / T


def measure(T, B, F, S, paths=PATHS):
    sets = input_sets(lambda: make_set(T, B, F, S, "cuda"),
                      4 * (T * B * F + 3 * S * (S + F) + T * B * S + 4 * B * S), "cuda")
    leaves64 = [t.detach().double().requires_grad_() for t in sets[0][0]]
    want = results_of(cell_loop(lltm_cell_reference), leaves64, [g.double() for g in sets[0][1]])
    row = {"size": (T, B, F, S)}
    fwds, steps = {}, {}
    for path in paths:
        set_path(path)
        try:
            row[f"{path} err"] = max_rel_err(results_of(fused, *sets[0]), want)
        except ValueError as exc:  # the path does not run this size
            row[f"{path} err"] = f"n/a ({str(exc)[:40]})"
            continue
        fwds[path] = with_path(path, lambda i: fused(*sets[i % len(sets)][0]))
        steps[path] = with_path(path, lambda i: results_of(fused, *sets[i % len(sets)]))
    lstm = Lstm(F, S, "cuda")
    row["cudnn err"] = lstm.check(sets)
    fwds["cudnn"] = lambda i: lstm.fwd(lstm.module, *[sets[i % len(sets)][0][k] for k in (0, 3, 4)])
    steps["cudnn"] = lambda i: lstm.results(lstm.module, *sets[i % len(sets)])
    plain = cell_loop(lltm_cell_reference)
    row["plain err"] = max_rel_err(results_of(plain, *sets[0]), want)
    names = list(fwds)
    for name, ms in zip(names, medians_ms([fwds[n] for n in names], "cuda", reps=30, min_s=0.3,
                                          rounds=ROUNDS)):
        row[f"{name} fwd"] = ms
    for name, ms in zip(names, medians_ms([steps[n] for n in names], "cuda", reps=30,
                                          min_s=0.3, rounds=ROUNDS)):
        row[f"{name} step"] = ms
    for name in names:
        row[f"{name} us/step"] = per_step_us(steps[name], T)
    for path in paths:
        if path in steps:
            kind = "lltm::cta::" if path == "cta" else "lltm::persistent::"
            row[f"{path} rec us/step"] = per_step_us(steps[path], T, [kind])
            # the forward alone: GPU us per step of all kernels / of the recurrence kernel
            row[f"{path} fwd us/step"] = per_step_us(fwds[path], T)
            row[f"{path} fwd rec us/step"] = per_step_us(fwds[path], T, [kind])
    row["cudnn fwd us/step"] = per_step_us(fwds["cudnn"], T)
    os.environ.pop("LLTM_SEQUENCE_PATH", None)
    return row


def fmt(v, spec=".3f"):
    return format(v, spec) if isinstance(v, float) else str(v)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="*", default=None)
    parser.add_argument("--paths", nargs="*", default=list(PATHS), choices=list(PATHS))
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sizes = [ast.literal_eval(s) for s in args.sizes] if args.sizes else SIZES
    paths = args.paths
    env = environment()
    names = " / ".join(paths)
    lines = [f"device {env.get('device')}, torch {env['torch']}, CUDA {env['cuda']}, "
             f"commit {os.environ.get('FUSED_OPS_COMMIT') or env['commit']}", "",
             "| (T, B, F, S) | " + " | ".join(f"{p} fwd / fwd+bwd ms" for p in paths) +
             " | cuDNN fwd / fwd+bwd ms | " + " | ".join(f"{p} vs cuDNN fwd / fwd+bwd"
                                                       for p in paths if p == "cta") +
             f" | GPU us/step fwd: {names} (their recurrence kernels) / cuDNN"
             f" | GPU us/step fwd+bwd: {names} (their recurrence kernels) / cuDNN"
             f" | max rel err {names} / plain fp32 loop / cuDNN |",
             "| --- |" + " ---: |" * (2 * len(paths) + 3 +
                                      sum(p == "cta" for p in paths))]
    print("\n".join(lines), flush=True)
    for size in sizes:
        r = measure(*size, paths=paths)
        get = r.get

        def pair(name):
            f, s = get(f"{name} fwd"), get(f"{name} step")
            return f"{fmt(f)} / {fmt(s)}" if f is not None else "n/a"

        def ratio(name):
            if not get(f"{name} fwd"):
                return "n/a"
            return (f"{get('cudnn fwd') / get(f'{name} fwd'):.2f}x / "
                    f"{get('cudnn step') / get(f'{name} step'):.2f}x")

        def us(key, rec):
            parts = [f"{fmt(get(f'{p} {key}'), '.2f')} ({fmt(get(f'{p} {rec}'), '.2f')})"
                     for p in paths]
            return " / ".join(parts)

        errs = " / ".join(fmt(get(k), ".1e") for k in
                          [f"{p} err" for p in paths] + ["plain err", "cudnn err"])
        line = (f"| {size} | " + " | ".join(pair(p) for p in paths) + f" | {pair('cudnn')} | " +
                " | ".join(ratio(p) for p in paths if p == "cta") +
                f" | {us('fwd us/step', 'fwd rec us/step')} / "
                f"{fmt(get('cudnn fwd us/step'), '.2f')}"
                f" | {us('us/step', 'rec us/step')} / {fmt(get('cudnn us/step'), '.2f')}"
                f" | {errs} |")
        lines.append(line)
        print(line, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
