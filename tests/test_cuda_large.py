"""Tensors of more than 2^31 elements, for every op forward and backward (the other CUDA
reliability checks: test_cuda_reliability.py).

The large-tensor tests run only with FUSED_OPS_LARGE=1 and when torch.cuda.mem_get_info()
shows the memory each needs (up to ~62 GiB: an 80 GB H100 runs them all, one after another;
each states its own). The older ones use small integer values, so every sum is exact in
float32 and results are compared exactly; those of the FFT paths and of the LLTM sequence
compare against float64 references computed in chunks, within stated tolerances (pytest -s
prints the errors and the peak memory). The size-limit tests (a clear error, never a
wrap-around) run on the CPU too.
"""

import os

import pytest
import torch

import lltm  # noqa: F401  (registers torch.ops.lltm)
import padding_ops
import rwkv_ops
from lltm.reference import lltm_cell_reference
from padding_ops.reference import tile_pad_reference

HAS_CUDA = torch.cuda.is_available()


# ---- (e) sizes past 2^31 ---------------------------------------------------------------------

def test_timex_sizes_past_its_limit_raise(device):
    """TimeX indexes within a row in 32 bits: a size of 2^30 or more is refused with a
    clear error (checked before any memory is touched: the tensors are expanded)."""
    big = 2**30
    w = torch.zeros(1, 1, device=device)
    k = torch.zeros(1, 1, 1, device=device)
    cases = [(w.expand(big, 1), k.expand(1, big, 1)),
             (w, k.expand(big, 1, 1)),
             (w.expand(1, big), k.expand(1, 1, big))]
    for ww, kk in cases:
        with pytest.raises(ValueError, match=r"k's sizes must each be at most 1073741823"):
            rwkv_ops.timex(ww, kk)
        with pytest.raises(ValueError, match=r"k's sizes must each be at most 1073741823"):
            torch.ops.rwkv_ops.timex_backward(kk, ww, kk)


def test_padding_output_too_large_raises(device):
    x = torch.zeros(1, 1, device=device)
    with pytest.raises(ValueError, match="gives an output too large to index"):
        padding_ops.tile_pad(x, (2**62, 0, 0, 0))
    with pytest.raises(ValueError, match="gives an output too large to index"):
        padding_ops.tile_pad(x, (2**31, 0, 2**31, 0))


LARGE = os.environ.get("FUSED_OPS_LARGE") == "1"


def needs_gib(gib):
    """Skip unless FUSED_OPS_LARGE=1 and the GPU has `gib` GiB free (checked at run time)."""
    if not HAS_CUDA:
        pytest.skip("needs a CUDA device")
    if not LARGE:
        pytest.skip("large-tensor test: set FUSED_OPS_LARGE=1")
    torch.cuda.empty_cache()
    free = torch.cuda.mem_get_info()[0] / 2**30
    if free < gib:
        pytest.skip(f"needs {gib} GiB of free GPU memory, {free:.1f} GiB free")


def small_ints(shape, gen, device="cuda", dtype=torch.float32, low=-1, high=2):
    """Integers in [low, high) as dtype, made on the GPU in place (no host copy)."""
    return torch.randint(low, high, shape, device=device, dtype=torch.int8,
                         generator=gen).to(dtype)


def boundary_indices(n, per_item, limit=2**31):
    """Items of a tensor of n items of per_item elements each: the first, the last, and
    those around element `limit` (and 2^32)."""
    idx = {0, 1, n - 2, n - 1}
    for lim in (limit, 2 * limit):
        b = lim // per_item
        idx |= {b - 1, b, b + 1}
    return sorted(i for i in idx if 0 <= i < n)


def cuda_gen(seed=0):
    return torch.Generator(device="cuda").manual_seed(seed)


def test_large_padding_forward_past_2pow31_elements():
    """y has 2.6e9 elements (uint8; the kernel's 32-bit row math, 64-bit offsets)."""
    needs_gib(6)
    pad, shift = (1, 2, 3, 4), 5
    x = torch.randint(0, 256, (2**21, 30, 31), device="cuda", dtype=torch.uint8,
                      generator=cuda_gen())
    y = padding_ops.tile_pad(x, pad, shift)
    assert y.numel() > 2**31
    for l in boundary_indices(y.shape[0], y[0].numel()):
        assert torch.equal(y[l], tile_pad_reference(x[l], pad, shift)), f"image {l}"


def test_large_padding_forward_64bit_index_path():
    """lead * Ho >= 2^30: the kernel takes its 64-bit index type; y has 1.7e10 elements."""
    needs_gib(22)
    pad, shift = (0, 0, 3, 4), 1
    x = torch.randint(0, 256, (2**27 + 3, 1, 16), device="cuda", dtype=torch.uint8,
                      generator=cuda_gen())
    y = padding_ops.tile_pad(x, pad, shift)
    for l in boundary_indices(y.shape[0], y[0].numel()):
        assert torch.equal(y[l], tile_pad_reference(x[l], pad, shift)), f"image {l}"
    del y


def test_large_padding_backward_past_2pow31_elements():
    needs_gib(24)
    pad, shift = (1, 2, 3, 4), -6
    gy = small_ints((2**21, 37, 34), cuda_gen(1))
    gx = torch.ops.padding_ops.tile_pad_backward(gy, pad, shift)
    assert gy.numel() > 2**31
    x = torch.zeros(30, 31, device="cuda", dtype=torch.float64, requires_grad=True)
    for l in boundary_indices(gy.shape[0], gy[0].numel()):
        (want,) = torch.autograd.grad(tile_pad_reference(x, pad, shift), x, gy[l].double())
        assert torch.equal(gx[l].double(), want), f"image {l}"


def test_large_timex_past_2pow31_elements():
    """k (2^25 + 3, 1, 64): 2^31 + 192 elements; out and grad_k per row, grad_w over all."""
    needs_gib(32)
    B, C, T = 2**25 + 3, 1, 64
    gen = cuda_gen(2)
    w = small_ints((C, T), gen)
    k = small_ints((B, C, T), gen)
    out = rwkv_ops.timex(w, k)
    assert k.numel() > 2**31
    rows = boundary_indices(B, C * T)
    ref_w = w.double()
    for b in rows:
        want = rwkv_ops.timex(ref_w, k[b : b + 1].double())
        assert torch.equal(out[b : b + 1].double(), want), f"out row {b}"
    del out
    g = small_ints((B, C, T), gen)
    grad_w, grad_k = torch.ops.rwkv_ops.timex_backward(g, w, k)
    for b in rows:
        _, want_k = torch.ops.rwkv_ops.timex_backward(g[b : b + 1].double(), ref_w,
                                                      k[b : b + 1].double())
        assert torch.equal(grad_k[b : b + 1].double(), want_k), f"grad_k row {b}"
    # grad_w[0, T-1-s] = sum_{t >= s} G[t, t-s] with G = sum_b g[b]^T k[b] (exact in float64).
    G = torch.zeros(T, T, device="cuda", dtype=torch.float64)
    for b0 in range(0, B, 2**22):
        G += g[b0 : b0 + 2**22, 0].double().T @ k[b0 : b0 + 2**22, 0].double()
    want_w = torch.stack([G.diagonal(-s).sum() for s in range(T)]).flip(0)
    assert torch.equal(grad_w[0].double(), want_w)


def test_large_lltm_past_2pow31_elements(monkeypatch):
    """gate_weights (2^21 + 1, 3 * 342): 2^31 + 1026 elements, through the cuBLAS path and
    the pointwise kernels (the single-launch kernels refuse this size). Checked: every
    per-row output and gradient on the rows around element 2^31 of gate_weights and at the
    ends, and the parameter gradients over all rows against a chunked float64 reference."""
    needs_gib(48)
    monkeypatch.delenv("LLTM_CUDA_PATH", raising=False)
    B, F, S = 2**21 + 1, 1, 342
    gen = cuda_gen(3)
    # Values chosen so that the GEMMs are exact: X and weights in {-1, 0, 1} / 4.
    input = small_ints((B, F), gen) / 4
    weights = small_ints((3 * S, S + F), gen) / 4
    bias = small_ints((3 * S,), gen) / 4
    old_h = small_ints((B, S), gen) / 4
    old_cell = small_ints((B, S), gen) / 4
    new_h, new_cell, X, gates = torch.ops.lltm.lltm_forward(input, weights, bias, old_h,
                                                             old_cell)
    assert gates.numel() > 2**31
    grad_h = small_ints((B, S), gen) / 4
    grad_cell = small_ints((B, S), gen) / 4
    d_input, d_weights, d_bias, d_old_h, d_old_cell = torch.ops.lltm.lltm_backward(
        grad_h, grad_cell, new_cell, gates, X, weights, [True] * 4)
    del X

    params = [weights.double().requires_grad_(), bias.double().requires_grad_()]

    def reference(rows):
        args = [input[rows].double().requires_grad_(), *params,
                old_h[rows].double().requires_grad_(), old_cell[rows].double().requires_grad_()]
        outs = lltm_cell_reference(*args)
        grads = torch.autograd.grad(outs, args, (grad_h[rows].double(), grad_cell[rows].double()))
        return [o.detach() for o in outs], grads

    for b in boundary_indices(B, 3 * S):
        (h, c), (di, dw, db, dh, dc) = reference(slice(b, b + 1))
        for name, got, want in [("new_h", new_h[b], h[0]), ("new_cell", new_cell[b], c[0]),
                                ("d_input", d_input[b], di[0]), ("d_old_h", d_old_h[b], dh[0]),
                                ("d_old_cell", d_old_cell[b], dc[0])]:
            torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5,
                                       msg=f"{name} row {b}")
    want_dw = torch.zeros_like(params[0])
    want_db = torch.zeros_like(params[1])
    for b0 in range(0, B, 2**18):
        _, (_, dw, db, _, _) = reference(slice(b0, b0 + 2**18))
        want_dw += dw
        want_db += db
    torch.testing.assert_close(d_weights.double(), want_dw, rtol=1e-4, atol=1e-2)
    torch.testing.assert_close(d_bias.double(), want_db, rtol=1e-4, atol=1e-2)


# ---- (e, continued) the sequence's buffers and TimeX's FFT paths past 2^31 ------------------
#
# Each test states the memory it needs (checked by needs_gib before it allocates anything) and
# prints the errors it measured and its peak memory (pytest -s shows them).


def max_rel(got, want):
    """max |got - want| / max |want| (every element counts)."""
    got, want = got.double(), want.double()
    scale = want.abs().max().item()
    return (got - want).abs().max().item() / (scale if scale > 0 else 1.0)


def conv_rows64(x, w_rows, correlate=False):
    """float64 rows of the causal convolution with W = w_rows reversed in time (TimeX's out,
    eps = 0), or its correlation (grad_k), through torch.fft at length 2T; x, w_rows (R, T)."""
    T = x.shape[-1]
    n = 2 * T
    wf = torch.fft.rfft(w_rows.double().flip(-1), n=n)
    xf = torch.fft.rfft(x.double(), n=n)
    return torch.fft.irfft(xf * (wf.conj() if correlate else wf), n=n)[..., :T]


def grad_w_by_chunks(g, k, rows=2048):
    """float64 grad_w (C, T) of g, k (B, C, T): grad_w[c, T-1-s] = IDFT(sum_b G conj(K))[s],
    the spectra summed over chunks of `rows` batch rows."""
    B, C, T = k.shape
    n = 2 * T
    acc = torch.zeros(C, n // 2 + 1, dtype=torch.complex128, device=k.device)
    for b0 in range(0, B, rows):
        gf = torch.fft.rfft(g[b0:b0 + rows].double(), n=n)
        kf = torch.fft.rfft(k[b0:b0 + rows].double(), n=n)
        acc += (gf * kf.conj()).sum(0)
        del gf, kf
    return torch.fft.irfft(acc, n=n)[..., :T].flip(-1)


def peak_gib():
    return torch.cuda.max_memory_allocated() / 2**30


def check_timex_rows(name, got, want_rows, rows, C, tol):
    worst = 0.0
    for r in rows:
        b, c = divmod(r, C)
        err = max_rel(got[b, c], want_rows(b, c))
        worst = max(worst, err)
        assert err <= tol, f"{name} row (b={b}, c={c}): max relative error {err:.2e} > {tol:.0e}"
    return worst


def run_timex_past_limit(B, C, T, dtype, algo, device, tol, tol_w, label, monkeypatch,
                         grad_scale=1.0):
    """TimeX forward and backward with RWKV_TIMEX_ALGO=algo on k (B, C, T) of small integers,
    checked as the large tests below describe; returns nothing, prints the errors."""
    monkeypatch.setenv("RWKV_TIMEX_ALGO", algo)
    gen = torch.Generator(device=device).manual_seed(B + C + T)
    w = small_ints((C, T), gen, device=device, dtype=dtype)
    k = small_ints((B, C, T), gen, device=device, dtype=dtype)
    out = torch.ops.rwkv_ops.timex_forward(w, k, 0.5)
    rows = boundary_indices(B * C, T)
    e_out = check_timex_rows("out", out, lambda b, c: conv_rows64(k[b, c][None], w[c][None])[0]
                             + 0.5, rows, C, tol)
    del out
    g = small_ints((B, C, T), gen, device=device, dtype=dtype) * grad_scale
    grad_w, grad_k = torch.ops.rwkv_ops.timex_backward(g, w, k)
    e_k = check_timex_rows("grad_k", grad_k, lambda b, c: conv_rows64(
        g[b, c][None], w[c][None], correlate=True)[0], rows, C, tol)
    del grad_k
    e_w = rel_err_64(grad_w, grad_w_by_chunks(g, k))
    peak = f"; peak {peak_gib():.1f} GiB" if device == "cuda" else ""
    print(f"\n{label}: max relative errors out {e_out:.1e}, grad_k {e_k:.1e} (rows {rows}); "
          f"grad_w ({B} rows summed) norm-wise {e_w:.1e}{peak}")
    assert e_w <= tol_w, f"grad_w: norm-wise relative error {e_w:.2e} > {tol_w:.0e}"


def rel_err_64(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm()).item()


def test_large_timex_fused_fft_past_2pow31_elements(monkeypatch):
    """The fused on-chip FFT kernels (RWKV_TIMEX_ALGO=fft), float32, k (2^16 + 1, 2, 16384):
    2^31 + 2^15 elements, the largest fused length. out and grad_k are checked on the rows
    around element 2^31 and at the ends against float64 FFT convolutions of those rows;
    grad_w (a sum over all 65537 batch rows) against a float64 sum over chunks.
    Memory: k, out, g, grad_k 8 GiB each (out freed before the backward: 24 GiB at once) plus
    about 4 GiB of float64 reference chunks: needs 34 GiB."""
    needs_gib(34)
    torch.cuda.reset_peak_memory_stats()
    B, C, T = 2**16 + 1, 2, 16384
    assert B * C * T > 2**31
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "fft")
    shape_only = torch.empty(1, 1, 1, device="cuda").expand(B, C, T)  # no memory
    assert rwkv_ops.timex_algorithm(shape_only) == "fft_fused"
    run_timex_past_limit(B, C, T, torch.float32, "fft", "cuda", 5e-6, 1e-4,
                         "fused FFT past 2^31", monkeypatch)


def test_large_timex_library_fft_past_2pow31_elements(monkeypatch):
    """The library FFT path (RWKV_TIMEX_ALGO=fft_library: cuFFT through ATen and this
    package's pack, product and crop passes), float16, k (2^18 + 1, 2, 4096): 2^31 + 8192
    elements, and the packed spectra (B C, M = 4096) complex64: 2^31 + 8192 complex values.
    Checked as the fused test above (g scaled by 1/16 so that grad_w stays within float16).
    Memory: k and g 4 GiB each; the backward holds k's spectra (16 GiB) while g's are packed
    (16 GiB) and transformed (16 GiB out of place), plus cuFFT's workspace: about 56 GiB at
    the peak, needs 62 GiB."""
    needs_gib(62)
    torch.cuda.reset_peak_memory_stats()
    B, C, T = 2**18 + 1, 2, 4096
    assert B * C * T > 2**31
    run_timex_past_limit(B, C, T, torch.float16, "fft_library", "cuda", 2e-3, 2e-3,
                         "library FFT past 2^31", monkeypatch, grad_scale=1 / 16)


def test_timex_past_limit_checks_on_small_sizes(device, monkeypatch):
    """The large tests' checks and chunked references, at a size that runs anywhere (the CPU
    runs its one FFT path for both)."""
    algos = ["fft", "fft_library"] if device == "cuda" else ["fft"]
    for algo in algos:
        run_timex_past_limit(37, 2, 300, torch.float32, algo, device, 5e-6, 1e-5,
                             f"{device} {algo} small", monkeypatch)
        run_timex_past_limit(9, 2, 64, torch.float16, algo, device, 2e-3, 2e-3,
                             f"{device} {algo} small float16", monkeypatch, grad_scale=1 / 16)


def run_sequence_past_limit(T, B, F, S, path, device, chunk, monkeypatch):
    """lltm_sequence forward and backward (float32) against the float64 op on `chunk` batch
    rows at a time, as test_large_lltm_sequence_past_2pow31_elements describes."""
    gen = torch.Generator(device=device).manual_seed(T + B + S)
    x = torch.randn(T, B, F, device=device, generator=gen)
    weights = (torch.rand(3 * S, S + F, device=device, generator=gen) * 2 - 1) * (0.3 / S**0.5)
    bias = (torch.rand(3 * S, device=device, generator=gen) * 2 - 1) * 0.1
    h0 = torch.randn(B, S, device=device, generator=gen) * 0.5
    c0 = torch.randn(B, S, device=device, generator=gen) * 0.5
    grad_hs = torch.randn(T + 1, B, S, device=device, generator=gen)
    grad_c_n = torch.randn(B, S, device=device, generator=gen)
    monkeypatch.setenv("LLTM_SEQUENCE_PATH", path)
    hs, cells, gates = torch.ops.lltm.lltm_sequence_forward(x, weights, bias, h0, c0)
    d_input, d_weights, d_bias, d_h0, d_c0 = torch.ops.lltm.lltm_sequence_backward(
        grad_hs, grad_c_n, x, weights, hs, cells, gates, [True] * 3)
    monkeypatch.delenv("LLTM_SEQUENCE_PATH")  # float64 runs the fallback

    num, den, worst, scale = {}, {}, {}, {}
    want_dw = torch.zeros(3 * S, S + F, device=device, dtype=torch.float64)
    want_db = torch.zeros(3 * S, device=device, dtype=torch.float64)
    w64, b64 = weights.double(), bias.double()
    for b0 in range(0, B, chunk):
        sl = slice(b0, b0 + chunk)
        xs = x[:, sl].double()
        ref = torch.ops.lltm.lltm_sequence_forward(xs, w64, b64, h0[sl].double(), c0[sl].double())
        rg = torch.ops.lltm.lltm_sequence_backward(grad_hs[:, sl].double(),
                                                   grad_c_n[sl].double(), xs, w64, *ref,
                                                   [True] * 3)
        want_dw += rg[1]
        want_db += rg[2]
        pairs = [("hs", hs[:, sl], ref[0]), ("cells", cells[:, sl], ref[1]),
                 ("gates", gates[:, sl], ref[2]), ("d_input", d_input[:, sl], rg[0]),
                 ("d_h0", d_h0[sl], rg[3]), ("d_c0", d_c0[sl], rg[4])]
        for name, got, want in pairs:
            diff = got.double() - want
            num[name] = num.get(name, 0.0) + diff.square().sum().item()
            den[name] = den.get(name, 0.0) + want.square().sum().item()
            worst[name] = max(worst.get(name, 0.0), diff.abs().max().item())
            scale[name] = max(scale.get(name, 0.0), want.abs().max().item())
        del ref, rg
    errors = {name: (num[name] / den[name]) ** 0.5 for name in num}
    elementwise = {name: worst[name] / scale[name] for name in worst}
    errors["d_weights"] = rel_err_64(d_weights, want_dw)
    errors["d_bias"] = rel_err_64(d_bias, want_db)
    peak = f"; peak {peak_gib():.1f} GiB" if device == "cuda" else ""
    print(f"\nlltm_sequence {path} (T, B, F, S) = {(T, B, F, S)} on {device}: norm-wise "
          "relative errors " + ", ".join(f"{k} {v:.1e}" for k, v in errors.items())
          + "; elementwise (of the largest value) "
          + ", ".join(f"{k} {v:.1e}" for k, v in elementwise.items()) + peak)
    # The gradients that run back through every step (d_input, d_h0, d_c0 and the parameter
    # sums) collect float32 rounding over T steps: on the H100 at T = 683 both paths read
    # d_h0 1.8e-4, d_c0 1.7e-4, d_bias 1.8e-4 norm-wise, identically (no indexing error moves
    # them: a misplaced row is an O(1) error). The forward's buffers stay at 1e-6.
    for name, err in errors.items():
        bound = 1e-5 if name in ("hs", "cells", "gates") else 5e-4
        assert err <= bound, f"{name}: norm-wise relative error {err:.2e}"
    for name, err in elementwise.items():
        assert err <= 1e-3, f"{name}: an element off by {err:.2e} of the largest value"


@pytest.mark.parametrize("path", ["persistent", "fallback"])
def test_large_lltm_sequence_past_2pow31_elements(path, monkeypatch):
    """lltm_sequence's buffers past 2^31 elements: gates (T, B, 3S) = (683, 16384, 192),
    float32, 2^31 + 1,048,576 elements (element 2^31 sits in the last step, batch row 10922),
    and the backward's copy dz, through the persistent kernels and the per-step fallback.
    Every batch row's recurrence is independent, so the float64 reference is the op itself
    on 2048 rows at a time (its float64 fallback path, far below 2^31 elements); every
    element of hs, cells, gates and of the row gradients is compared, and the weight and
    bias gradients (sums over all T B rows) against the chunks' sum. The weights are small
    (a contracting recurrence) so that float32 stays close to float64 over 683 steps.
    Memory: hs and cells 2.9 GiB each, gates 8.0, grad_hs 2.9, the backward's dz 8.0: 25 GiB,
    plus the reference chunks: needs 30 GiB."""
    needs_gib(30)
    torch.cuda.reset_peak_memory_stats()
    T, B, F, S = 683, 16384, 1, 64
    assert T * B * 3 * S > 2**31
    run_sequence_past_limit(T, B, F, S, path, "cuda", 2048, monkeypatch)


def test_sequence_past_limit_checks_on_small_sizes(device, monkeypatch):
    paths = ["persistent", "fallback"] if device == "cuda" else ["fallback"]
    for path in paths:
        run_sequence_past_limit(50, 300, 1, 16, path, device, 128, monkeypatch)
