"""Experiments behind the sanitizer reports that are not about this package's kernels.

initcheck reports "Uninitialized __global__ memory read of size 2 bytes" in
lltm::persistent::forward_kernel<c10::BFloat16, 2> where it reads the gate pre-activations
that the input projection (one bfloat16 cuBLAS GEMM, aten::addmm into the gates buffer) wrote.
Either initcheck does not see that GEMM's stores (Hopper cuBLAS kernels store through TMA), or
the kernel reads elements the GEMM did not write. These experiments tell them apart:

  python tests/sanitize_probe.py initcheck STEP DTYPE T,B,F,S
      one experiment per process, under compute-sanitizer --tool initcheck with
      PYTORCH_NO_CUDA_MEMORY_CACHING=1 (its ERROR SUMMARY is the count; tests/gpu_reliability.sh
      runs the list and tabulates them, tests/sanitize.py --summarize LOG names the kernels):
        read         the op's addmm (the same strided operands) into a fresh buffer, then
                     torch's own conversion kernel reads every element (".to(float64)"): if
                     initcheck reports that read too, the tool misses the GEMM's stores
        zeroed       the same into a zero-filled buffer (control: no report may remain)
        mm           a plain mm (no bias epilogue) into a fresh buffer, then the read
        op           the op, persistent path: the report of the issue
        op-f0        the op, persistent, F = 0 (the gates are the bias, copied by a torch
                     kernel: no GEMM): the persistent kernel on initialised input
        op-fallback  the op, fallback path (cuBLAS per step, our step kernel reads its output)
  python tests/sanitize_probe.py nan           (plain run, caching allocator on)
      (a) the addmm into a NaN-filled buffer leaves no NaN (it writes every element; its result
      equals the fresh-buffer one bit for bit); (b) the op on memory poisoned with NaN (the
      caching allocator's free blocks of the sizes its buffers take are NaN-filled first, and
      the poisoning is checked): its outputs equal an unpoisoned run bit for bit, so the
      kernels read nothing that the GEMM did not write; (c) the names of the GEMM kernels
      cuBLAS runs (torch.profiler).
  python tests/sanitize_probe.py kernels       (plain run)
      the CUDA kernels each family's library-free sanitize cases launch (torch.profiler): none
      may come from cuBLAS or cuFFT, which is what lets racecheck run them in every dtype.
  python tests/sanitize_probe.py nonfinite     (plain run)
      how the CUDA TimeX algorithms place NaN and inf (informational; the property tests hold
      them to their contracts): per algorithm, the outputs that are non-finite where the
      definition's are finite, finite where the definition's are not, NaN where it is +-inf.
"""

import math
import os
import re
import sys
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

# (T, B, F, S) of the sequence cases behind the reports (the script: up to
# (6, 64, 128, 256) and S = 512) and of tests/sanitize.py.
SHAPES = [(3, 5, 7, 9), (6, 64, 128, 256), (4, 8, 16, 512), (2, 70, 2, 8)]
DTYPES = ["bfloat16", "float16", "float32"]


def say(*args):
    print("probe:", *args, flush=True)


def gemm_operands(T, B, F, S, dtype, gen):
    """The input projection's operands as the op builds them (lltm_sequence_driver.h): x as
    (T B, F), W_x^T a strided view of weights (3S, S+F) (column block, transposed), bias."""
    import torch
    dt = getattr(torch, dtype)
    x = torch.randn(T * B, F, generator=gen).to("cuda", dt)
    weights = (torch.randn(3 * S, S + F, generator=gen) / math.sqrt(S + F)).to("cuda", dt)
    bias = torch.randn(3 * S, generator=gen).to("cuda", dt)
    return x, weights, weights[:, S:].t(), bias


INITCHECK_STEPS = {
    "read": "aten::addmm into a fresh buffer (the op's call), then torch reads every element",
    "zeroed": "the same into a zero-filled buffer, then the same read (control)",
    "mm": "aten::mm (no bias epilogue) into a fresh buffer, then the same read",
    "op": "lltm_sequence_forward, persistent path (its kernel reads the GEMM's output)",
    "op-f0": "lltm_sequence_forward, persistent, F = 0 (the gates are the bias, copied: no GEMM)",
    "op-fallback": "lltm_sequence_forward, fallback path (cuBLAS per step, then our kernel)",
}


def initcheck(step, dtype, shape):
    """One experiment per process (run under initcheck: its ERROR SUMMARY is the count)."""
    import torch

    import lltm  # noqa: F401
    T, B, F, S = shape
    alloc = ("off" if os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1"
             else "ON (set PYTORCH_NO_CUDA_MEMORY_CACHING=1)")
    say(f"initcheck step {step} ({INITCHECK_STEPS[step]}), {dtype}, (T, B, F, S) = {shape}; "
        f"torch {torch.__version__}, {torch.cuda.get_device_name()}, caching allocator {alloc}")
    gen = torch.Generator().manual_seed(0)
    x, weights, w_x_t, bias = gemm_operands(T, B, F, S, dtype, gen)
    h0 = torch.zeros(B, S, device="cuda", dtype=x.dtype)
    torch.cuda.synchronize()
    if step in ("read", "zeroed", "mm"):
        make = torch.zeros if step == "zeroed" else torch.empty
        gates = make(T * B, 3 * S, device="cuda", dtype=x.dtype)
        if step == "mm":
            torch.mm(x, w_x_t, out=gates)
        else:
            torch.addmm(bias, x, w_x_t, out=gates)
        torch.cuda.synchronize()
        say("GEMM done; torch reads its output now")
        say(f"sum of the output: {gates.to(torch.float64).sum().item()}")
    else:
        os.environ["LLTM_SEQUENCE_PATH"] = "fallback" if step == "op-fallback" else "persistent"
        if step == "op-f0":
            x, weights, F = x[:, :0], weights[:, :S].contiguous(), 0
        hs, cells, gates = torch.ops.lltm.lltm_sequence_forward(
            x.reshape(T, B, F), weights, bias, h0, h0)
        torch.cuda.synchronize()
        say(f"forward done: h_n sum {hs[-1].double().sum().item()}")
    torch.cuda.synchronize()
    say("initcheck probe done")


def kernel_names(fn):
    """Runs fn() under torch.profiler; returns (fn's result, the CUDA kernels it launched)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            result = fn()
            torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001  (no CUPTI: run it plainly)
        return fn(), [f"(profiler unavailable: {str(e)[:80]})"]
    return result, [e.name for e in prof.events() if e.device_type.name == "CUDA"]


def poison_free_memory(sizes, device="cuda"):
    """NaN-fills the caching allocator's free memory that allocations of these byte sizes (in
    this order: the op's buffers) come from: after empty_cache, 16 blocks of each size are
    allocated, filled with 0xFF bytes (a NaN in every floating dtype) and freed. Returns
    whether it took: the sizes allocated again in order, all held at once, come back filled."""
    import torch
    torch.cuda.empty_cache()
    keep = []
    for _ in range(16):
        for n in sizes:
            keep.append(torch.empty(n, dtype=torch.uint8, device=device).fill_(0xFF))
    torch.cuda.synchronize()
    del keep
    check = [torch.empty(n, dtype=torch.uint8, device=device) for n in sizes]
    ok = all(bool((t == 0xFF).all()) for t in check)
    del check
    return ok


def op_buffer_bytes(T, B, F, S, elem, acc):
    """The byte sizes of lltm_sequence_forward's and _backward's allocations, in order
    (lltm_sequence_driver.h; elem: the dtype's size, acc: its opmath type's)."""
    fwd = [(T + 1) * B * S * elem, (T + 1) * B * S * elem, T * B * 3 * S * elem,
           3 * S * S * elem, B * 3 * S * elem]
    bwd = [B * S * elem, B * S * elem, T * B * 3 * S * elem, 3 * S * S * elem, B * S * elem,
           B * S * acc, T * B * F * elem, 3 * S * (S + F) * elem, 3 * S * elem]
    return [n for n in fwd + bwd if n > 0]


def nan():
    import torch

    import lltm  # noqa: F401
    assert os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") != "1", "needs the caching allocator"
    gen = torch.Generator().manual_seed(1)
    say(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for dtype in DTYPES:
        for T, B, F, S in SHAPES:
            x, weights, w_x_t, bias = gemm_operands(T, B, F, S, dtype, gen)
            fresh = torch.addmm(bias, x, w_x_t)
            filled = torch.full_like(fresh, math.nan)
            _, names = kernel_names(lambda: torch.addmm(bias, x, w_x_t, out=filled))
            names = sorted(set(names))
            left = int(filled.isnan().sum())
            want = torch.addmm(bias.double(), x.double(), w_x_t.double())
            err = ((filled.double() - want).abs().max() / want.abs().max()).item()
            say(f"addmm {dtype} M={T * B} K={F} N={3 * S}: NaN left in a NaN-filled output: "
                f"{left} of {filled.numel()}; equal to the fresh-output result: "
                f"{torch.equal(filled, fresh)}; max error vs float64 {err:.1e}; kernels: "
                + "; ".join(n[:90] for n in names))
    # The op on poisoned memory: same bits as on clean memory.
    for dtype in DTYPES:
        dt = getattr(torch, dtype)
        for T, B, F, S in SHAPES:
            for path in ("persistent", "fallback"):
                os.environ["LLTM_SEQUENCE_PATH"] = path
                g = torch.Generator().manual_seed(T * 1000 + S)
                args = [torch.randn(T, B, F, generator=g).to("cuda", dt),
                        (torch.randn(3 * S, S + F, generator=g) / math.sqrt(S + F)).to("cuda", dt),
                        torch.randn(3 * S, generator=g).to("cuda", dt),
                        torch.randn(B, S, generator=g).to("cuda", dt) * 0.5,
                        torch.randn(B, S, generator=g).to("cuda", dt) * 0.5]
                grads = [torch.randn(T + 1, B, S, generator=g).to("cuda", dt),
                         torch.randn(B, S, generator=g).to("cuda", dt)]

                def run():
                    outs = torch.ops.lltm.lltm_sequence_forward(*args)
                    back = torch.ops.lltm.lltm_sequence_backward(
                        grads[0], grads[1], args[0], args[1], *outs, [True] * 3)
                    torch.cuda.synchronize()
                    return [t.clone() for t in (*outs, *back)]

                try:
                    clean = run()
                except ValueError as e:
                    say(f"op {path} {dtype} {(T, B, F, S)}: unsupported ({str(e)[:80]})")
                    continue
                es = torch.tensor([], dtype=dt).element_size()
                poisoned_ok = poison_free_memory(op_buffer_bytes(T, B, F, S, es, max(es, 4)))
                dirty = run()
                same = all(torch.equal(a, b) for a, b in zip(clean, dirty))
                nans = sum(int(t.isnan().sum()) for t in dirty)
                say(f"op {path} {dtype} (T, B, F, S) = {(T, B, F, S)}: poisoning took: "
                    f"{poisoned_ok}; outputs on poisoned memory equal the clean run's: {same}; "
                    f"NaN in them: {nans}")
    os.environ.pop("LLTM_SEQUENCE_PATH", None)
    say("nan probe done")


def kernel_owner(name):
    """'ours' (this package's namespaces), 'torch' (ATen kernels, copies, fills) or 'other'
    (what is left: cuBLAS, cuFFT, ...)."""
    if re.search(r"\b(lltm|rwkv|padding_ops)::", name):
        return "ours"
    if re.search(r"\b(at|c10)::|^Mem(cpy|set)|^cudaMem", name):
        return "torch"
    return "other"


def kernels():
    import zlib

    import torch

    import sanitize
    import lltm  # noqa: F401
    import padding_ops  # noqa: F401
    import rwkv_ops  # noqa: F401
    for family in sanitize.FAMILIES:
        sanitize.CASES.clear()
        sanitize.BUILDERS[family]()
        cases = [c for c in sanitize.CASES if not c.library]
        names = Counter()
        failures = 0
        for c in cases:
            gen = torch.Generator().manual_seed(zlib.crc32(c.full_name.encode()))

            def run(c=c, gen=gen):
                try:
                    with sanitize.environment(c.env):
                        c.run(gen)
                except sanitize.Unsupported:
                    pass
                except Exception as e:  # noqa: BLE001
                    say(f"case failed: {c.full_name}: {str(e)[:200]}")
                    return 1
                return 0

            failed, launched = kernel_names(run)
            failures += failed
            for name in launched:
                names[re.sub(r"\(.*", "", name)[:100]] += 1
        owners = Counter(kernel_owner(n) for n in names)
        other = [n for n in names if kernel_owner(n) == "other"]
        say(f"{family}: {len(cases)} library-free cases, {len(names)} distinct kernels "
            f"({owners['ours']} of this package, {owners['torch']} of torch), others (cuBLAS, "
            f"cuFFT, ...): {other or 'none'}"
            + (f", {failures} cases FAILED" if failures else ""))
        for n, k in names.most_common():
            say(f"    {k:5d}  {n}")


def timex_definition(w, k, eps):
    """out[b, c, t] = eps + sum_{u <= t} w[c, T-1-(t-u)] k[b, c, u], never multiplying a padding
    zero (as tests/test_properties.py's; repeated here so that this script needs no
    hypothesis)."""
    import torch
    T = w.shape[1]
    t = torch.arange(T)
    lag = t[:, None] - t[None, :]
    coef = w[:, (T - 1 - lag).clamp(0, T - 1)]
    return torch.where(lag >= 0, coef[None] * k[:, :, None, :], 0).sum(-1) + eps


def timex_backward_definition(g, w, k):
    import torch
    C, T = w.shape
    t = torch.arange(T)
    lag = t[:, None] - t[None, :]
    causal = lag >= 0
    coef = w[:, (T - 1 - lag).clamp(0, T - 1)]
    grad_k = torch.where(causal, coef[None] * g[:, :, :, None], 0).sum(-2)
    col = (T - 1 - lag)[causal]
    prod = (g[:, :, :, None] * k[:, :, None, :])[:, :, causal].sum(0)
    grad_w = torch.zeros(C, T, dtype=w.dtype).index_add_(1, col, prod)
    return grad_w, grad_k


def nonfinite():
    import torch

    import rwkv_ops
    gen = torch.Generator().manual_seed(2)
    say(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    # (B, C, T, dtype): the direct kernels' configurations (FMA: float64, and B <= 4 at T <=
    # 256; tensor cores: float32 B > 4 or T > 256, the half types), the fused FFT, the library.
    cases = [(3, 2, 100, "float64", "direct"), (3, 2, 100, "float32", "direct"),
             (9, 2, 100, "float32", "direct"), (2, 2, 300, "float32", "direct"),
             (9, 2, 100, "bfloat16", "direct"), (3, 2, 100, "float32", "fft"),
             (3, 2, 100, "float64", "fft_library")]
    for B, C, T, dtype, algo in cases:
        dt = getattr(torch, dtype)
        os.environ["RWKV_TIMEX_ALGO"] = algo
        tallies = Counter()
        for trial in range(20):
            w = torch.rand(C, T, generator=gen, dtype=torch.float64) * 2 - 1
            k = torch.rand(B, C, T, generator=gen, dtype=torch.float64) * 2 - 1
            g = torch.rand(B, C, T, generator=gen, dtype=torch.float64) * 2 - 1
            target = [w, k, g][trial % 3]
            flat = target.view(-1)
            idx = torch.randint(0, flat.numel(), (2,), generator=gen)
            flat[idx] = torch.tensor([math.inf, math.nan], dtype=torch.float64)[trial % 2]
            w, k, g = (t.to(dt) for t in (w, k, g))
            out = rwkv_ops.timex(w.cuda(), k.cuda(), 0.25).cpu().double()
            gw, gk = (t.cpu().double() for t in
                      torch.ops.rwkv_ops.timex_backward(g.cuda(), w.cuda(), k.cuda()))
            want = [timex_definition(w.double(), k.double(), 0.25),
                    *timex_backward_definition(g.double(), w.double(), k.double())]
            for name, a, b in zip(["out", "grad_w", "grad_k"], [out, gw, gk], want):
                fa, fb = torch.isfinite(a), torch.isfinite(b)
                tallies[f"{name} non-finite where the definition is finite"] += int((~fa & fb).sum())
                tallies[f"{name} finite where the definition is not"] += int((fa & ~fb).sum())
                tallies[f"{name} NaN where the definition is +-inf"] += int(
                    (a.isnan() & b.isinf()).sum())
        say(f"timex {algo} {dtype} (B, C, T) = {(B, C, T)}, 20 inputs with 2 inf or NaN: "
            + "; ".join(f"{k}: {v}" for k, v in tallies.items()))
    os.environ.pop("RWKV_TIMEX_ALGO", None)


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("initcheck", "nan", "kernels", "nonfinite"):
        sys.exit(__doc__)
    what = sys.argv[1]
    if what == "initcheck" and (len(sys.argv) != 5 or sys.argv[2] not in INITCHECK_STEPS):
        sys.exit("usage: sanitize_probe.py initcheck STEP DTYPE T,B,F,S  (steps: "
                 + ", ".join(INITCHECK_STEPS) + ")")
    import torch
    if not torch.cuda.is_available():
        sys.exit("sanitize_probe: needs a CUDA device")
    if what == "initcheck":
        initcheck(sys.argv[2], sys.argv[3], tuple(int(v) for v in sys.argv[4].split(",")))
        return
    {"nan": nan, "kernels": kernels, "nonfinite": nonfinite}[what]()


if __name__ == "__main__":
    main()
