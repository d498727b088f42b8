"""The cases of tests/sanitize.py: one builder per family of CUDA kernels, each case a small
call on boundary shapes checked against a float64 reference (see sanitize.py's docstring for
the families), and the selection by family, name, dtype and library use. Imported by
sanitize.py (the runner and the log summary) and sanitize_probe.py; torch and the package
are imported inside the cases, so that listing them needs neither.
"""

import contextlib
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FAMILIES = ["lltm_seq", "rwkv_fft", "rwkv_fft_library", "lltm_cell", "rwkv_direct", "padding"]
ALIASES = {"all": FAMILIES, "rwkv": ["rwkv_direct", "rwkv_fft", "rwkv_fft_library"],
           "lltm": ["lltm_cell", "lltm_seq"]}
DTYPES = ["float32", "float64", "float16", "bfloat16"]
# Where the ops under test run: "cuda"; "cpu" only to check this script itself (--device cpu:
# the CPU kernels against the same references; the algorithm checks are skipped there).
DEVICE = "cuda"


# ---- Cases ---------------------------------------------------------------------------------

class Case:
    """One check: run(gen) runs the CUDA ops and compares (raises AssertionError on a
    mismatch); env: the environment variables that pick the path, set around the call."""

    def __init__(self, family, name, dtype, run, env=None, library=False):
        self.family, self.name, self.dtype, self.run = family, name, dtype, run
        self.env, self.library = env or {}, library

    @property
    def full_name(self):
        return f"{self.family} {self.name} {self.dtype}"


CASES = []


def add(family, name, dtype, run, env=None, library=False):
    CASES.append(Case(family, name, dtype, run, env, library))


@contextlib.contextmanager
def environment(values):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update({k: v for k, v in values.items() if v is not None})
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def torch_dtype(name):
    import torch
    return getattr(torch, name)


def rand(gen, *shape, dtype="float32", scale=1.0):
    import torch
    x = torch.randn(shape, dtype=torch.float64, generator=gen) * scale
    if dtype == "uint8":
        return torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen)
    if dtype == "complex128":
        return torch.randn(shape, dtype=torch.complex128, generator=gen)
    return x.to(torch_dtype(dtype))


# Tolerances (norm-wise, relative) against float64, by dtype: the half types' are a few units
# of their precision (outputs are rounded once, sums accumulate in float).
TOL = {"float32": 1e-5, "float64": 1e-12, "float16": 5e-3, "bfloat16": 3e-2}


def close(what, got, want, tol):
    """got (a CUDA tensor) against want (float64, CPU): see the module's docstring."""
    import torch
    a = got.detach().cpu()
    assert tuple(a.shape) == tuple(want.shape), (
        f"{what}: shape {tuple(a.shape)}, reference {tuple(want.shape)}")
    a = a.double()
    if want.numel() == 0:
        return
    finite = torch.isfinite(want)
    assert bool(torch.isfinite(a[finite]).all()), f"{what}: non-finite where the reference is finite"
    diff = (a - want).abs()
    denom = want.norm().item()
    err = diff.norm().item() / (denom if denom > 0 else 1.0)
    assert err <= tol, f"{what}: relative error {err:.2e} > {tol:.0e}"
    scale = want.abs().max().item()
    worst = diff.max().item() / (scale if scale > 0 else 1.0)
    assert worst <= 20 * tol, f"{what}: an element is off by {worst:.2e} of the largest value"


def same(what, got, want):
    import torch
    a = got.cpu()
    assert a.shape == want.shape and a.dtype == want.dtype, f"{what}: shape or dtype"
    assert torch.equal(a, want), f"{what}: differs"


def dtype_of(tensors, dtype):
    for i, t in enumerate(tensors):
        assert t.dtype == torch_dtype(dtype), f"output {i} has dtype {t.dtype}, not {dtype}"


# ---- Brick padding -------------------------------------------------------------------------

def padding_cases():
    fwd = [((3, 5, 7), (2, 3, 4, 1), -3),    # unaligned head and tail, short rows
           ((2, 9, 35), (1, 30, 0, 18), 40),  # whole 16-byte packs, shift > W
           ((1, 1), (0, 5, 3, 0), 1)]         # 1x1 image
    for dtype in ["uint8", "float16", "float32", "float64", "complex128", "bfloat16"]:
        for shape, pad, shift in fwd:
            def run(gen, shape=shape, pad=pad, shift=shift, dtype=dtype):
                import torch

                x = rand(gen, *shape, dtype=dtype)
                y = torch.ops.padding_ops.tile_pad(x.to(DEVICE), pad, shift)
                same("tile_pad", y, torch.ops.padding_ops.tile_pad(x, pad, shift))
            add("padding", f"forward {shape} pad={pad} shift={shift}", dtype, run)

        def run_offset(gen, dtype=dtype):
            import torch

            # A row start that breaks 16-byte alignment of the input (a storage offset).
            flat = rand(gen, 1 + 3 * 5 * 7, dtype=dtype)
            xg = flat.to(DEVICE)[1:].view(3, 5, 7)
            same("tile_pad", torch.ops.padding_ops.tile_pad(xg, (2, 3, 4, 1), 2),
                 torch.ops.padding_ops.tile_pad(flat[1:].view(3, 5, 7), (2, 3, 4, 1), 2))
        add("padding", "forward storage offset 1", dtype, run_offset)
    bwd = [((3, 5, 7), (2, 3, 4, 1), -3),           # one gather pass
           ((4, 3), (200, 150, 100, 120), 7),        # split: workspace + reduce kernel
           ((2, 1, 6), (0, 40, 0, 33), -1),
           ((1, 1), (1, 1, 1, 1), 0)]
    for dtype in DTYPES:
        for shape, pad, shift in bwd:
            def run(gen, shape=shape, pad=pad, shift=shift, dtype=dtype):
                import torch

                left, right, top, bottom = pad
                gy = rand(gen, *shape[:-2], shape[-2] + top + bottom, shape[-1] + left + right,
                          dtype=dtype)
                got = torch.ops.padding_ops.tile_pad_backward(gy.to(DEVICE), pad, shift)
                dtype_of([got], dtype)
                want = torch.ops.padding_ops.tile_pad_backward(gy.double(), pad, shift)
                close("tile_pad_backward", got, want, TOL[dtype])
            add("padding", f"backward {shape} pad={pad} shift={shift}", dtype, run)


# ---- RWKV TimeX ----------------------------------------------------------------------------

def timex_case(family, B, C, T, dtype, algo, note="", misalign=False, expect=None, keep=False,
               library=False, extra_env=None):
    """forward (eps 0.5) and backward of k (B, C, T) with RWKV_TIMEX_ALGO=algo (None: unset)
    and the variables of extra_env;
    expect: the algorithm timex_algorithm must report; keep: through timex_forward_keep and
    timex_backward_kept; misalign: w, k, g (and so out, grad_k) one element past an aligned
    start, "g": g only."""

    def run(gen):
        import torch

        w = rand(gen, C, T, dtype=dtype, scale=1 / math.sqrt(T))
        k, g = rand(gen, B, C, T, dtype=dtype), rand(gen, B, C, T, dtype=dtype)

        def dev(t, shift):
            if not shift:
                return t.to(DEVICE)
            flat = torch.empty(t.numel() + 1, dtype=t.dtype, device=DEVICE)
            flat[1:].copy_(t.reshape(-1).to(DEVICE))
            return flat[1:].view(t.shape)

        every = misalign is True  # else "g" or False
        wg, kg, gg = dev(w, every), dev(k, every), dev(g, bool(misalign))
        if expect is not None and DEVICE == "cuda":
            got = rwkv_ops_algorithm(kg)
            assert got == expect, f"timex_algorithm says {got}, expected {expect}"
        if keep:
            out, kz, wz = torch.ops.rwkv_ops.timex_forward_keep(wg, kg, 0.5)
            assert wz.numel() > 0, "nothing kept for the backward"  # kz: empty for fft_fused
            grad_w, grad_k = torch.ops.rwkv_ops.timex_backward_kept(gg, wg, kg, kz, wz)
        else:
            out = torch.ops.rwkv_ops.timex_forward(wg, kg, 0.5)
            grad_w, grad_k = torch.ops.rwkv_ops.timex_backward(gg, wg, kg)
        dtype_of([out, grad_w, grad_k], dtype)
        with environment({"RWKV_TIMEX_ALGO": None}):  # the CPU's float64 auto choice
            w64, k64, g64 = w.double(), k.double(), g.double()
            want = [torch.ops.rwkv_ops.timex_forward(w64, k64, 0.5),
                    *torch.ops.rwkv_ops.timex_backward(g64, w64, k64)]
        for name, a, b in zip(["out", "grad_w", "grad_k"], [out, grad_w, grad_k], want):
            close(name, a, b, TOL[dtype])

    env = {"RWKV_TIMEX_ALGO": algo, **(extra_env or {})}
    name = f"B={B} C={C} T={T}" + (f" {note}" if note else "")
    add(family, name, dtype, run, env, library)


def rwkv_ops_algorithm(k):
    import rwkv_ops
    return rwkv_ops.timex_algorithm(k)


def rwkv_direct_cases():
    C = 3  # partial channel groups for every configuration (NC = 8, 4, 2; NCH = 16 / NR)
    # B picks the Toeplitz configuration (<= 4, <= 8, <= 16, more) and the grad_w one (1, 2,
    # <= 4, <= 8, more); T: one step, not a multiple of 4, one tile, past one 128-step tile;
    # T = 300: the tensor-core kernel with 8 time folds (B <= 4, T > 256).
    for B in [1, 2, 5, 9, 17]:
        for T in [1, 37, 64, 130]:
            timex_case("rwkv_direct", B, C, T, "float32", "direct", expect="direct")
    timex_case("rwkv_direct", 1, C, 300, "float32", "direct", "tensor cores, 8 folds")
    for dtype in ["float64", "float16", "bfloat16"]:
        for B, T in [(3, 37), (9, 64), (2, 130), (4, 300)]:
            timex_case("rwkv_direct", B, C, T, dtype, "direct", expect="direct")
    timex_case("rwkv_direct", 5, C, 64, "float32", "direct", "misaligned (scalar copies)",
               misalign=True)
    # The auto choice at the float32 crossover's direct side.
    timex_case("rwkv_direct", 2, 2, 256, "float32", None, "auto", expect="direct")
    # The half types' tensor-core kernels (sm_80+) on their crossover's direct side (T = 1024:
    # several reduction chunks), with 1, 9 and 33 rows (8, 2 and no time folds).
    for dtype in ["float16", "bfloat16"]:
        for B in [1, 9, 33]:
            timex_case("rwkv_direct", B, 2, 1024, dtype, None, "auto, tensor cores",
                       expect="direct")
    # Rows staged 8 and 4 bytes at a time (T % 8 == 4, T % 4 == 2: staging_unit), the last
    # reduction chunk partial.
    timex_case("rwkv_direct", 17, 2, 1100, "float16", None, "auto, 8-byte copies",
               expect="direct")
    timex_case("rwkv_direct", 9, 2, 1102, "bfloat16", "direct", "4-byte copies")
    # The split Toeplitz kernel past T = 1024 (half_split_direct): 8 rows, and 5 rows of odd
    # length (element-wise staging); few row groups, so each row's 5 tiles go to 5 blocks.
    timex_case("rwkv_direct", 8, 2, 1280, "float16", None, "auto, split kernel",
               expect="direct")
    timex_case("rwkv_direct", 5, 3, 1187, "bfloat16", "direct", "split kernel, odd T",
               expect="direct")
    # Every tensor one element off 16 bytes at even T (the split kernel's rows and grad_w's
    # slots element by element), and g alone off (g and k of unlike alignment).
    timex_case("rwkv_direct", 5, 3, 1024, "float16", "direct", "misaligned, split kernel",
               misalign=True)
    timex_case("rwkv_direct", 3, 3, 1187, "float16", "direct", "g misaligned", misalign="g")


def rwkv_fft_cases():
    # Lengths: 1 and 2 (M = 1, 2: the one-thread shapes), odd (the pairs loads fall back to
    # scalars), 700 and 769 (M = 1024), 1024; M = 3 x 2^k and 5 x 2^k: 1025 and 1536 (M = 1536:
    # radix 6, threads idle in its last round), 2049 (M = 2560: radix 10), 3000 (M = 3072: radix
    # 12), 4097 (M = 5120: radix 20), 10000 and 12288 (M = 10240, 12288: radix 8 then 5, 16 then
    # 3; 640 and 768 threads); 16383 and 16384 (the largest fused length; 136 KiB of shared
    # memory per CTA). B > 1 so that wgrad sums over the batch in its scratch.
    shapes = {
        "float32": [(1, 1, 1), (2, 3, 2), (3, 2, 17), (3, 2, 700), (2, 3, 769), (1, 2, 1024),
                    (2, 1, 1025), (2, 1, 1536), (3, 1, 3000), (2, 1, 4097), (2, 1, 10000),
                    (1, 2, 12288), (1, 1, 16383), (2, 2, 16384)],
        "float16": [(1, 1, 1), (3, 2, 17), (2, 3, 769), (2, 3, 1100), (1, 2, 16384)],
        "bfloat16": [(1, 1, 1), (3, 2, 17), (2, 3, 769), (1, 2, 2049), (2, 1, 16384)],
    }
    # Forced: "fft" takes the tensor-core kernels for bfloat16 from B = 2 (their cases below).
    for dtype, cases in shapes.items():
        for B, C, T in cases:
            timex_case("rwkv_fft", B, C, T, dtype, "fft_fused", expect="fft_fused")
        timex_case("rwkv_fft", 2, 1, 64, dtype, "fft_fused", "misaligned", misalign=True,
                   expect="fft_fused")
    timex_case("rwkv_fft", 1, 2, 16384, "float32", "fft", "misaligned", misalign=True)
    # More channels than wgrad's grid (CTAs = min(C, SMs x resident CTAs)): the channel loop.
    timex_case("rwkv_fft", 1, 5000, 5, "float32", "fft", "wgrad channel loop")
    # The eager training path: the backward reads the spectra of W and k that the forward kept
    # (fft_fused forced: "fft" takes fft_tc for bfloat16 at B = 2).
    timex_case("rwkv_fft", 2, 3, 769, "bfloat16", "fft_fused", "kept tables", keep=True,
               expect="fft_fused")
    timex_case("rwkv_fft", 2, 3, 1100, "bfloat16", "fft_fused", "kept tables", keep=True,
               expect="fft_fused")
    # k's spectra kept too at B = 1: one item per channel, grad_w merged from acc.
    timex_case("rwkv_fft", 1, 2, 2000, "float16", "fft_fused", "kept, B = 1", keep=True,
               expect="fft_fused")
    # The backward in row ranges (channels of 3 rows on fewer resident CTAs than channels: the
    # ranges split channels, whose sums the CTA that arrives last adds), eager and through the ops.
    timex_case("rwkv_fft", 3, 400, 4097, "float16", "fft_fused", "row ranges", keep=True,
               expect="fft_fused")
    timex_case("rwkv_fft", 3, 400, 4097, "float32", "fft_fused", "row ranges",
               expect="fft_fused")
    # The auto choice just past the float32 crossover.
    timex_case("rwkv_fft", 2, 2, 257, "float32", None, "auto", expect="fft_fused")
    # The tensor-core kernels (bfloat16/float16, T <= 16384): each transform length N = 2048 to
    # 32768, 2560, 3072, 6144, 12288 and 5, 6, 7 times 4096 (Z's planes in global scratch from
    # 28672), odd B (a pair of one row), misaligned rows, the kept spectra, auto's choice
    # (bfloat16 at B = 16), and a backward split over items (few channels, several pairs: the
    # reduce launch).
    for dtype in ("bfloat16", "float16"):
        for B, C, T in [(1, 1, 1), (3, 2, 1000), (3, 2, 1100), (2, 1, 1280), (3, 1, 1300),
                        (2, 2, 1536), (2, 3, 2048), (3, 1, 2500), (4, 1, 4097),
                        (2, 1, 6145), (2, 2, 8192), (3, 1, 9001), (3, 1, 12288), (2, 1, 13001),
                        (3, 2, 16384)]:
            timex_case("rwkv_fft", B, C, T, dtype, "fft_tc", "tensor cores", expect="fft_tc")
    timex_case("rwkv_fft", 3, 2, 1001, "bfloat16", "fft_tc", "tensor cores, misaligned",
               misalign=True, expect="fft_tc")
    timex_case("rwkv_fft", 2, 3, 3000, "float16", "fft_tc", "tensor cores, kept", keep=True,
               expect="fft_tc")
    timex_case("rwkv_fft", 16, 2, 2049, "bfloat16", None, "tensor cores, auto",
               expect="fft_tc")
    timex_case("rwkv_fft", 9, 1, 3000, "bfloat16", "fft_tc", "tensor cores, split backward",
               expect="fft_tc")
    timex_case("rwkv_fft", 9, 1, 1200, "bfloat16", "fft_tc", "tensor cores, split backward",
               keep=True, expect="fft_tc")
    timex_case("rwkv_fft", 9, 1, 1500, "float16", "fft_tc", "tensor cores, split backward",
               misalign=True, expect="fft_tc")
    timex_case("rwkv_fft", 9, 1, 12289, "float16", "fft_tc", "tensor cores, split backward",
               misalign=True, expect="fft_tc")
    # The cluster kernels (sm_90: a row's transform over a 2- to 5-CTA cluster through
    # distributed shared memory), each M: just past one CTA (T = 16385: 2 CTAs of 10240, M =
    # 20480), 3 CTAs of 8192 (20481: 24576), 2 of 16384 (30001: 32768), 4 of 10240 (40001:
    # 40960; and 5 of 8192), 4 of 12288 (44101: 49152; and 3 of 16384), 4 of 16384 (65536), odd
    # lengths in the half types.
    for dtype, B, C, T in [("float32", 1, 2, 16385), ("float32", 2, 1, 32768),
                           ("float32", 1, 1, 65536), ("bfloat16", 1, 2, 20001),
                           ("bfloat16", 1, 2, 20481), ("float16", 2, 1, 30001),
                           ("float16", 2, 1, 40001), ("float32", 2, 1, 44101)]:
        timex_case("rwkv_fft", B, C, T, dtype, "fft_cluster", "fft_cluster", expect="fft_cluster")
    timex_case("rwkv_fft", 2, 2, 16385, "float32", "fft_cluster", "fft_cluster, kept tables",
               keep=True, expect="fft_cluster")
    timex_case("rwkv_fft", 2, 2, 36001, "bfloat16", "fft_cluster", "fft_cluster, kept tables",
               keep=True, expect="fft_cluster")
    for T, note in [(40001, "5 CTAs of 8192"), (44101, "3 CTAs of 16384")]:
        timex_case("rwkv_fft", 2, 1, T, "float32", "fft_cluster", f"fft_cluster, {note}",
                   expect="fft_cluster", extra_env={"RWKV_TIMEX_CLUSTER_ODD_L": "0"})
    # The rows as two halves on 2-CTA clusters (timex_fft_cluster_halves.cuh): T = 2H, odd T,
    # just past H, misaligned, B > 1 (grad_w's sum), the split forward (more rows than channels).
    for dtype, B, C, T, misalign, forward in [("float32", 1, 2, 65536, False, "fused"),
                                              ("bfloat16", 2, 1, 40001, True, "split"),
                                              ("float16", 1, 1, 32769, False, "fused")]:
        timex_case("rwkv_fft", B, C, T, dtype, "fft_cluster", f"halves {forward}",
                   misalign=misalign, expect="fft_cluster",
                   extra_env={"RWKV_TIMEX_CLUSTER_HALVES": "on",
                              "RWKV_TIMEX_CLUSTER_FORWARD": forward})
    timex_case("rwkv_fft", 1, 2, 50001, "float32", "fft_cluster", "halves, kept tables",
               keep=True, expect="fft_cluster", extra_env={"RWKV_TIMEX_CLUSTER_HALVES": "on"})


def rwkv_fft_library_cases():
    # M = fft_half_length(T): 1, 2, 17, 1000 (2^3 5^3), 4116 (2^2 3 7^3) for 4097, 16464
    # (2^4 3 7^3) for 16385, 20000 (2^5 5^4).
    lengths = {
        "float32": [(1, 1, 1), (2, 3, 2), (3, 2, 17), (2, 3, 1000), (1, 2, 4097), (1, 1, 20000)],
        "float64": [(1, 1, 1), (3, 2, 17), (2, 3, 257), (1, 2, 4097), (2, 1, 16385)],
        "float16": [(1, 1, 1), (3, 2, 17), (1, 2, 4097)],
        "bfloat16": [(1, 1, 1), (3, 2, 17), (1, 2, 4097)],
    }
    for dtype, cases in lengths.items():
        for B, C, T in cases:
            timex_case("rwkv_fft_library", B, C, T, dtype, "fft_library", expect="fft_library",
                       library=True)
        timex_case("rwkv_fft_library", 2, 3, 1000, dtype, "fft_library", "kept spectra",
                   keep=True, library=True)
    timex_case("rwkv_fft_library", 2, 1, 65537, "float32", "fft", "past the cluster maximum",
               expect="fft_library", library=True)
    # float64's auto crossover: direct at 256, the library FFT at 257.
    timex_case("rwkv_fft_library", 2, 2, 256, "float64", None, "auto", expect="direct")
    timex_case("rwkv_fft_library", 2, 2, 257, "float64", None, "auto", expect="fft_library",
               library=True)


# ---- LLTM cell -----------------------------------------------------------------------------

# lltm_backward's output_mask: gradients of (input, weights, bias, old_h).
MASKS = [[True] * 4, [True, False, False, False], [False, False, False, True],
         [False, True, False, False], [False, False, True, False], [False, True, True, False],
         [True, False, False, True]]


def lltm_cell_case(B, F, S, dtype, path):

    def run(gen):
        import torch

        args = [rand(gen, B, F, dtype=dtype), rand(gen, 3 * S, S + F, dtype=dtype),
                rand(gen, 3 * S, dtype=dtype), rand(gen, B, S, dtype=dtype),
                rand(gen, B, S, dtype=dtype)]
        grads = [rand(gen, B, S, dtype=dtype), rand(gen, B, S, dtype=dtype)]
        outs = torch.ops.lltm.lltm_forward(*[a.to(DEVICE) for a in args])
        dtype_of(outs, dtype)
        want = torch.ops.lltm.lltm_forward(*[a.double() for a in args])
        for i, (a, b) in enumerate(zip(outs, want)):
            close(f"forward output {i}", a, b, TOL[dtype])
        new_cell, X, gates = outs[1], outs[2], outs[3]
        for mask in MASKS:
            got = torch.ops.lltm.lltm_backward(grads[0].to(DEVICE), grads[1].to(DEVICE), new_cell, gates,
                                               X, args[1].to(DEVICE), mask)
            ref = torch.ops.lltm.lltm_backward(grads[0].double(), grads[1].double(), want[1],
                                               want[3], want[2], args[1].double(), mask)
            for i, (a, b) in enumerate(zip(got, ref)):
                close(f"backward {mask} output {i}", a, b, TOL[dtype])

    add("lltm_cell", f"{path} (B, F, S) = ({B}, {F}, {S})", dtype, run,
        {"LLTM_CUDA_PATH": path}, library=path == "cublas")


def lltm_tutorial_case(B, F, S, dtype, path, split_gates, bias_row):
    """The tutorial ops (tutorial_forward / tutorial_backward: the kernels' variants that also
    write the activations, and take or give the gates as (B, 3S) or (B, 3, S))."""

    def run(gen):
        import torch

        args = [rand(gen, B, F, dtype=dtype), rand(gen, 3 * S, S + F, dtype=dtype),
                rand(gen, 1, 3 * S, dtype=dtype) if bias_row else rand(gen, 3 * S, dtype=dtype),
                rand(gen, B, S, dtype=dtype), rand(gen, B, S, dtype=dtype)]
        grads = [rand(gen, B, S, dtype=dtype), rand(gen, B, S, dtype=dtype)]
        outs = torch.ops.lltm.tutorial_forward(*[a.to(DEVICE) for a in args], split_gates)
        dtype_of(outs, dtype)
        want = torch.ops.lltm.tutorial_forward(*[a.double() for a in args], split_gates)
        for i, (a, b) in enumerate(zip(outs, want)):
            close(f"tutorial_forward output {i}", a, b, TOL[dtype])
        new_cell, ig, og, cc, X, gates = outs[1:]
        got = torch.ops.lltm.tutorial_backward(grads[0].to(DEVICE), grads[1].to(DEVICE), new_cell,
                                               ig, og, cc, X, gates, args[1].to(DEVICE),
                                               split_gates)
        ref = torch.ops.lltm.tutorial_backward(grads[0].double(), grads[1].double(), *want[1:],
                                               args[1].double(), split_gates)
        for i, (a, b) in enumerate(zip(got, ref)):
            close(f"tutorial_backward output {i}", a, b, TOL[dtype])

    note = f"split_gates={split_gates} bias {'(1, 3S)' if bias_row else '(3S,)'}"
    add("lltm_cell", f"tutorial {path} (B, F, S) = ({B}, {F}, {S}) {note}", dtype, run,
        {"LLTM_CUDA_PATH": path}, library=path == "cublas")


def lltm_cell_cases():
    # Small path: one tile, every tile edge crossed (B > 64 rows, K > 64 columns, 3S > 96 gate
    # columns, S > 32 state columns), and B = 40 with few column tiles (TM = 2: the d_X role's,
    # and on sm_80 and newer the tensor-core forward's, there with 32-deep chunks).
    for B, F, S in [(1, 1, 1), (5, 7, 9), (40, 3, 21), (70, 20, 50)]:
        lltm_cell_case(B, F, S, "float32", "small")
    for dtype in ["float64", "float16", "bfloat16"]:
        lltm_cell_case(1, 1, 1, dtype, "small")
        lltm_cell_case(5, 7, 9, dtype, "small")
        lltm_cell_case(40, 3, 21, dtype, "small")
    # cuBLAS path: pointwise kernels with one element per access (S odd) and 16-byte packs.
    for dtype in DTYPES:
        lltm_cell_case(5, 7, 9, dtype, "cublas")
        lltm_cell_case(3, 4, 16, dtype, "cublas")
    # The tutorial ops: the same kernels writing the activations too, both gate layouts.
    for dtype in DTYPES:
        lltm_tutorial_case(5, 7, 9, dtype, "small", False, False)
        lltm_tutorial_case(40, 3, 21, dtype, "small", True, True)
        lltm_tutorial_case(5, 7, 9, dtype, "cublas", True, False)
        lltm_tutorial_case(3, 4, 16, dtype, "cublas", False, True)


# ---- LLTM sequence -------------------------------------------------------------------------

# The backward recurrence's tolerance is looser for the half types: it starts from the
# forward's rounded buffers (the reference from float64 ones).
SEQ_TOL = {"float32": 3e-5, "float64": 1e-12, "float16": 1e-2, "bfloat16": 6e-2}


class Unsupported(Exception):
    """The device does not run the persistent kernels for this problem (a skip, not a fail)."""


def lltm_seq_case(T, B, F, S, dtype, path, mask=(True, True, True), note=""):

    def run(gen):
        import torch

        K = S + F
        x = rand(gen, T, B, F, dtype=dtype)
        weights = rand(gen, 3 * S, K, dtype=dtype, scale=1 / math.sqrt(K))
        bias = rand(gen, 3 * S, dtype=dtype, scale=0.5)
        h0, c0 = rand(gen, B, S, dtype=dtype, scale=0.5), rand(gen, B, S, dtype=dtype, scale=0.5)
        grad_hs, grad_c_n = rand(gen, T + 1, B, S, dtype=dtype), rand(gen, B, S, dtype=dtype)
        args = [x, weights, bias, h0, c0]
        try:
            outs = torch.ops.lltm.lltm_sequence_forward(*[a.to(DEVICE) for a in args])
        except ValueError as e:
            if "LLTM_SEQUENCE_PATH=persistent" in str(e):
                raise Unsupported(str(e).split(";")[0]) from e
            raise
        dtype_of(outs, dtype)
        want = torch.ops.lltm.lltm_sequence_forward(*[a.double() for a in args])
        for name, a, b in zip(["hs", "cells", "gates"], outs, want):
            close(name, a, b, SEQ_TOL[dtype])
        hs, cells, gates = outs
        got = torch.ops.lltm.lltm_sequence_backward(grad_hs.to(DEVICE), grad_c_n.to(DEVICE), x.to(DEVICE),
                                                    weights.to(DEVICE), hs, cells, gates, list(mask))
        ref = torch.ops.lltm.lltm_sequence_backward(grad_hs.double(), grad_c_n.double(),
                                                    x.double(), weights.double(), *want,
                                                    list(mask))
        names = ["d_input", "d_weights", "d_bias", "d_h0", "d_c0"]
        for name, a, b in zip(names, got, ref):
            close(name, a, b, SEQ_TOL[dtype])
        # The saved gates are intact after a backward (it works on a copy).
        same("gates after the backward", gates, outs[2].cpu())

    gemm_free = path in ("persistent", "cta", "step") and F == 0 and not mask[0] and not mask[1]
    mask_note = "" if all(mask) else f" mask={''.join('1' if m else '0' for m in mask)}"
    name = f"{path} (T, B, F, S) = ({T}, {B}, {F}, {S}){mask_note}" + (f" {note}" if note else "")
    add("lltm_seq", name, dtype, run, {"LLTM_SEQUENCE_PATH": path}, library=not gemm_free)


def lltm_seq_cases():
    # Persistent kernels (float32, float16, bfloat16): cluster size min(8, S) below S = 128
    # and 16 from it (S = 129: 9 columns per CTA, the last CTA's partly masked); batch rows
    # per cluster bc = ceil(B / clusters): B = 1 (RB = 1), 37 (bc = 3, RB = 2), 70 (bc = 5,
    # RB = 4, padded rows); S = 512, the largest that fits (float32 shared memory); T = 1 (no
    # push to the other CTAs) and T = 0 (no launch).
    persistent = [(1, 1, 1, 1), (3, 5, 7, 9), (4, 37, 3, 16), (2, 70, 2, 8), (3, 20, 5, 129)]
    for dtype in ["float32", "float16", "bfloat16"]:
        for T, B, F, S in persistent:
            lltm_seq_case(T, B, F, S, dtype, "persistent")
        # GEMM-free (library-free): F = 0 (the input projection is the bias, copied) and the
        # bias gradient only (the column sum kernel); the recurrences are the same kernels.
        for T, B, S in [(1, 1, 1), (3, 5, 9), (2, 70, 8), (3, 20, 129)]:
            lltm_seq_case(T, B, 0, S, dtype, "persistent", (False, False, True))
    lltm_seq_case(2, 3, 4, 512, "float32", "persistent", note="largest S")
    lltm_seq_case(0, 2, 3, 4, "float32", "persistent", note="no steps")
    lltm_seq_case(3, 5, 7, 9, "float32", "persistent", (False, True, False))
    # The single-CTA kernels (S <= 128, every dtype but float64: one CTA per batch slice of 1,
    # 2 or 4 rows, W_h in registers): S = 1, odd, 33 (lane pairs with padded k), 96, 128 (the
    # largest); B not a multiple of the slice; F = 0 with the bias gradient only.
    for dtype in ["float32", "float16", "bfloat16"]:
        for T, B, F, S in [(1, 1, 1, 1), (3, 5, 7, 9), (4, 7, 3, 33), (2, 3, 2, 96),
                           (3, 9, 5, 128)]:
            lltm_seq_case(T, B, F, S, dtype, "cta")
        lltm_seq_case(3, 5, 0, 9, dtype, "cta", (False, False, True))
    # The half types' tensor-core cluster kernels (mma.sync, from S = 256).
    for dtype in ["float16", "bfloat16"]:
        lltm_seq_case(2, 5, 3, 256, dtype, "persistent", note="tensor cores")
    # Fallback kernels (every dtype, float64 included): S odd, S past what the persistent
    # kernels take, many rows.
    for dtype in DTYPES:
        for T, B, F, S in [(1, 1, 1, 1), (3, 5, 7, 9), (4, 37, 3, 16)]:
            lltm_seq_case(T, B, F, S, dtype, "fallback")
        lltm_seq_case(2, 3, 0, 5, dtype, "fallback", (False, False, True))
    lltm_seq_case(2, 3, 4, 600, "float32", "fallback", note="S past the persistent maximum")
    # The step kernels (one tensor-core kernel per step; float32 as 3xTF32): S a multiple of 8
    # (16, 40) and not (1, 9, 129, 601: the zero-padded problem, its copy kernel in and out),
    # row tails (B = 5, 37, 70), F = 0 with the bias gradient only.
    for dtype in ["float32", "float16", "bfloat16"]:
        for T, B, F, S in [(1, 1, 1, 1), (3, 5, 7, 9), (4, 37, 3, 16), (2, 70, 2, 40),
                           (3, 20, 5, 129)]:
            lltm_seq_case(T, B, F, S, dtype, "step")
        lltm_seq_case(3, 5, 0, 9, dtype, "step", (False, False, True))
    lltm_seq_case(2, 3, 4, 601, "float32", "step", note="padded, past the persistent maximum")


BUILDERS = {"padding": padding_cases, "rwkv_direct": rwkv_direct_cases,
            "rwkv_fft": rwkv_fft_cases, "rwkv_fft_library": rwkv_fft_library_cases,
            "lltm_cell": lltm_cell_cases, "lltm_seq": lltm_seq_cases}


def select(args):
    families = []
    for f in args.family.split(","):
        for g in ALIASES.get(f, [f]):
            if g not in BUILDERS:
                sys.exit(f"sanitize: unknown family {g!r} (families: {', '.join(FAMILIES)}, "
                         f"aliases: {', '.join(ALIASES)})")
            if g not in families:
                families.append(g)
    for f in families:
        BUILDERS[f]()
    dtypes = args.dtypes.split(",") if args.dtypes else None
    pattern = re.compile(args.case) if args.case else None
    chosen = []
    for c in CASES:
        if dtypes is not None and c.dtype not in dtypes:
            continue
        if pattern is not None and not pattern.search(c.full_name):
            continue
        if args.library_free and c.library or args.library_only and not c.library:
            continue
        if args.library_dtypes and c.library and c.dtype not in args.library_dtypes.split(","):
            continue
        chosen.append(c)
    if args.library_dtypes:  # a tool that aborts in a library kernel still ran the others
        chosen.sort(key=lambda c: c.library)
    return families, chosen
