"""Runs every CUDA kernel of the package, forward and backward, on small shapes that hit the
boundary cases, and checks each result against a float64 reference computed on the CPU.
Meant to run under compute-sanitizer (tests/sanitize.sh); runs alone too:

    python3 tests/sanitize.py [--family F[,F...]] [--case REGEX] [--dtypes D[,D...]]
                              [--library-free | --library-only] [--list]

Families (one per group of kernels):
  padding           tile_pad forward (every element size, unaligned rows) and backward (the
                    gather pass, the split into a workspace and its reduce kernel)
  rwkv_direct       TimeX's direct Toeplitz kernels (FMA and tensor-core tiles, grad_w),
                    RWKV_TIMEX_ALGO=direct
  rwkv_fft          TimeX's fused on-chip FFT kernels (twiddles, spectrum, conv, wgrad),
                    RWKV_TIMEX_ALGO=fft_fused: T = 1 ... 16384 (the largest fused length),
                    odd, power-of-two and 3 x 2^k lengths, misaligned rows, more channels
                    than wgrad's grid, and the auto choice on both sides of the crossover
                    (768 | 769)
  rwkv_fft_library  TimeX's library-FFT path (cuFFT through ATen, this package's pack,
                    product and crop passes), RWKV_TIMEX_ALGO=fft_library, every dtype;
                    past the fused maximum (16385) with "fft"; the kept-spectra pair
                    timex_forward_keep / timex_backward_kept; float64's crossover (256 | 257)
  lltm_cell         the LLTM cell: the small path's fused kernels (every tile edge, every
                    output mask) and the cuBLAS path's pointwise kernels; the tutorial ops
                    (tutorial_forward / _backward: the variants that write the activations)
  lltm_seq          the LLTM sequence: the persistent cluster kernels (forward and backward;
                    cluster sizes 1, 8 and 16, 1, 2 and 4 batch rows per thread tile, S = 512)
                    and the per-step fallback kernels (step, add, column sum), every dtype
                    each takes, output masks, T = 0 and 1; the single-CTA kernels; the step
                    kernels (states a multiple of 8 and zero-padded ones)
  Aliases: "rwkv" (the three rwkv_*), "lltm" (both lltm_*), "all".

Each case draws inputs on the CPU (seeded from its name: the same values whatever the
filter), runs the CUDA ops, and compares every output with the float64 CPU op (itself
checked against the plain-PyTorch references by the test suite): same shape and dtype, finite
wherever the reference is, a norm-wise relative error within the dtype's tolerance and no
element off by more than 20 times that (relative to the largest reference value), so that a
run whose kernels a tool perturbed into computing garbage fails. Padding's forward only moves
bytes and must be bitwise equal.

"library" cases run cuBLAS or cuFFT kernels besides ours (the LLTM cell's cuBLAS path, every
sequence case with F > 0 or a GEMM-computed gradient, the library FFT). --library-free keeps
the others: then nothing but this package's kernels and a few of torch's elementwise and copy
kernels run (tests/sanitize.sh runs racecheck that way in every dtype, since racecheck cannot
run cuBLAS's bfloat16 GEMMs on Hopper). Every kernel of this package with shared memory has a
library-free case in every dtype it takes: the sequence's persistent kernels and column sum
through F = 0 (the input projection is then a copy of the bias, no GEMM) with only the bias
gradient asked for.

Output: a line per case ("ok", "FAIL" with the reason, or "skip"), then the last line
"sanitize: FAMILIES: N checks ok" (", M FAILED" when some failed; exit status 1).
`--summarize LOG` (no GPU, no torch) reads a compute-sanitizer log of this script and prints
its counts: checks run, the tool's error count, and the kernels that the reports name.
"""

import argparse
import re
import sys
import time
import zlib
from collections import Counter

import sanitize_cases
from sanitize_cases import (  # noqa: F401  (BUILDERS, CASES: sanitize_probe.py reads them here)
    ALIASES,
    BUILDERS,
    CASES,
    DTYPES,
    FAMILIES,
    ROOT,
    Unsupported,
    environment,
    select,
)

# ---- Log summary ---------------------------------------------------------------------------

REPORT = re.compile(r"^========= (Invalid |Uninitialized |Error: |Warning: |Barrier |"
                    r"Program hit |Race |Malformed |Cuda API error|Potential )", re.IGNORECASE)


def kernel_name(line):
    """The function a report line names ('at <function>+0x...' or '... in <function>'),
    without its parameter list."""
    m = re.search(r"\bat (.*?)\+0x[0-9a-f]+", line) or re.search(r" in (.*)$", line)
    if not m:
        return None
    name = m.group(1).strip()
    if name.startswith("void "):
        name = name[5:]
    if name.endswith(")"):  # drop the parameter list: the last balanced (...)
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    return name


def summarize(path):
    """One line: checks run (ok/failed/skipped), the tool's error count, what ended the run,
    and the kernels that the reports name (most reported first)."""
    text = open(path, errors="replace").read().splitlines()
    ok = sum(1 for l in text if l.startswith("ok   "))
    failed = sum(1 for l in text if l.startswith("FAIL "))
    skipped = sum(1 for l in text if l.startswith("skip "))
    errors = "?"
    for l in text:
        m = re.search(r"ERROR SUMMARY: (\d+) error", l)
        if m:
            errors = m.group(1)
        m = re.search(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warn", l)
        if m:
            errors = f"{m.group(2)} (+{m.group(3)} warnings)"
    kernels = Counter()
    pending = False
    for l in text:
        if REPORT.match(l):
            pending = True
            name = kernel_name(l) if " at " in l else None
            if name:
                kernels[name] += 1
                pending = False
        elif pending and re.match(r"^=========\s+at ", l):
            name = kernel_name(l)
            if name:
                kernels[name] += 1
            pending = False
    finished = any(l.startswith("sanitize: ") and "checks ok" in l
                   or l.startswith("probe: ") and l.endswith(" done") for l in text)
    aborted = [l for l in text if "failed to handle" in l or "Sanitizer failed" in l
               or "Target application terminated" in l]
    state = "finished" if finished else ("ABORTED" if aborted else "DID NOT FINISH")
    names = ", ".join(f"{k} x{v}" for k, v in kernels.most_common(6))
    return (f"checks={ok + failed} ok={ok} failed={failed} skipped={skipped} errors={errors} "
            f"{state}" + (f"  reports in: {names}" if names else ""))


# ---- Main ----------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="all",
                        help=f"comma-separated: {', '.join(FAMILIES)}; or {', '.join(ALIASES)}")
    parser.add_argument("--case", help="regular expression searched in 'family name dtype'")
    parser.add_argument("--dtypes", help=f"comma-separated subset of {','.join(DTYPES)} "
                        "(padding's forward also has uint8, complex128)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--library-free", action="store_true",
                       help="only cases that run no cuBLAS or cuFFT kernel")
    group.add_argument("--library-only", action="store_true",
                       help="only cases that run cuBLAS or cuFFT kernels")
    parser.add_argument("--library-dtypes", metavar="D[,D...]",
                        help="library cases only in these dtypes (the library-free ones in "
                        "every selected dtype), run after the library-free ones")
    parser.add_argument("--list", action="store_true", help="print the selected cases, run none")
    parser.add_argument("--count", action="store_true", help="print the number of cases only")
    parser.add_argument("--summarize", metavar="LOG", help="summarise a log (no GPU needed)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="cpu: run the cases on the CPU kernels (checks this script only)")
    args = parser.parse_args()
    if args.summarize:
        print(summarize(args.summarize))
        return

    families, cases = select(args)  # (no torch needed to list them)
    label = ",".join(families)
    if args.count:
        print(len(cases))
        return
    if args.list:
        for c in cases:
            print(("L " if c.library else "  ") + c.full_name)
        print(f"{len(cases)} cases")
        return
    sys.path.insert(0, ROOT)
    import importlib

    import torch
    # The packages that register the selected families' ops (torch.ops.lltm, ...), and only
    # those: a tree built with fewer families (FUSED_OPS_FAMILIES) runs its own cases.
    packages = {"lltm": "lltm", "padding": "padding_ops", "rwkv": "rwkv_ops"}
    for name in sorted({packages[family.split("_")[0]] for family in families}):
        importlib.import_module(name)
    sanitize_cases.DEVICE = args.device  # where the cases' ops run
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("sanitize: needs a CUDA device")
    where = torch.cuda.get_device_name() if cuda else "CPU (self-check)"
    print(f"sanitize: {label}: {len(cases)} cases; torch {torch.__version__}, {where}",
          flush=True)
    ok = failed = skipped = 0
    start = time.time()
    for c in cases:
        gen = torch.Generator().manual_seed(zlib.crc32(c.full_name.encode()))
        print(f"case {c.full_name}", flush=True)
        t0 = time.time()
        try:
            with environment(c.env):
                c.run(gen)
            if cuda:
                torch.cuda.synchronize()
        except Unsupported as e:
            skipped += 1
            print(f"skip {c.full_name}: {e}", flush=True)
            continue
        except Exception as e:  # noqa: BLE001  (report and go on with the next case)
            failed += 1
            msg = f"{type(e).__name__}: {e}".replace("\n", " | ")[:400]
            print(f"FAIL {c.full_name}: {msg}", flush=True)
            continue
        ok += 1
        print(f"ok   {c.full_name} ({time.time() - t0:.1f}s)", flush=True)
    if cuda:
        torch.cuda.synchronize()
    tail = f", {failed} FAILED" if failed else ""
    tail += f", {skipped} skipped" if skipped else ""
    print(f"sanitize: {label}: {ok} checks ok{tail} ({time.time() - start:.0f}s)", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
