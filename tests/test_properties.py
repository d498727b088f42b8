"""Property-based tests (hypothesis) of all three families on the CPU.

Hypothesis draws the shapes (1-sized and odd ones included), dtypes, pads, shifts, a seed
for the values and the fraction of them that are inf, -inf or NaN. Every op is checked
against a plain-PyTorch reference written from the definition in DESIGN.md:
- padding moves bytes: the forward must be a bitwise copy (floats are drawn as random bit
  patterns, so NaN payloads, infinities, denormals and -0.0 all occur); the backward's
  NaN and inf positions must equal the reference's, finite values close;
- TimeX and LLTM: NaN and inf positions identical to the reference, finite values close.

The TimeX reference sums over u = 0..t only (the op's definition), never multiplying a
padding zero: the conv1d and Toeplitz-matrix references in rwkv_ops/reference.py multiply
w's entries by zero padding (inf * 0 = NaN), so they disagree with the definition wherever
w or k holds an inf. Finite values are drawn from [-2, 2] so that nothing overflows and
every inf or NaN comes from a drawn one: then the presence of NaN and inf in a sum or
product does not depend on the order of the terms, and the kernels must match exactly.

FUSED_OPS_HYPOTHESIS_EXAMPLES sets the examples per test (default 100: the file runs in
well under a minute on 2 cores).
"""

import math
import os
import subprocess
import sys

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import lltm  # noqa: E402
import padding_ops  # noqa: E402
import rwkv_ops  # noqa: E402
from lltm.reference import lltm_cell_reference  # noqa: E402
from padding_ops.reference import tile_pad_reference  # noqa: E402

SETTINGS = settings(
    max_examples=int(os.environ.get("FUSED_OPS_HYPOTHESIS_EXAMPLES", "100")),
    deadline=None,
    database=None,  # no .hypothesis/ folder in the checkout
    suppress_health_check=[HealthCheck.too_slow],
)

seeds = st.integers(0, 2**31 - 1)
# Fraction of the values replaced by inf, -inf or NaN: none, a few, many.
specials = st.sampled_from([0.0, 0.0, 0.02, 0.1, 0.4])
float_dtypes = st.sampled_from([torch.float32, torch.float64])


def values(shape, dtype, seed, special, scale=2.0):
    """Uniform in [-scale, scale], with a fraction `special` of entries set to inf, -inf
    or NaN, reproducible from `seed`."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.empty(shape, dtype=torch.float64).uniform_(-scale, scale, generator=gen)
    if special > 0:
        pick = torch.rand(shape, generator=gen, dtype=torch.float64) < special
        kinds = torch.tensor([math.inf, -math.inf, math.nan], dtype=torch.float64)
        x = torch.where(pick, kinds[torch.randint(0, 3, shape, generator=gen)], x)
    return x.to(dtype)


def assert_matches(got, want, what, rtol, atol):
    """NaN, +inf and -inf at the same positions; finite values close."""
    got, want = got.double(), want.double().to(got.device)
    assert got.shape == want.shape, what
    for name, pred in [("NaN", torch.isnan), ("+inf", torch.isposinf), ("-inf", torch.isneginf)]:
        diff = (pred(got) != pred(want)).nonzero()
        assert diff.numel() == 0, (
            f"{what}: {name} positions differ from the reference at {diff[:5].tolist()} "
            f"(got {got[tuple(diff[0])].item()}, want {want[tuple(diff[0])].item()})")
    finite = torch.isfinite(want)
    torch.testing.assert_close(got[finite], want[finite], rtol=rtol, atol=atol, msg=what)


def tolerance(dtype, terms):
    """(rtol, atol) for sums of `terms` products of values in [-2, 2]."""
    if dtype == torch.float64:
        return 1e-10, 1e-10 * terms
    return 1e-4, 2e-6 * terms


# ---- Brick padding -------------------------------------------------------------------------

INT_VIEW = {torch.float16: torch.int16, torch.bfloat16: torch.int16,
            torch.float32: torch.int32, torch.float64: torch.int64}
PAD_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.float16, torch.bfloat16, torch.float32, torch.float64]


def random_bits(shape, dtype, seed):
    """Every bit pattern of the dtype is possible (for floats: NaNs with payloads, infs,
    denormals, -0.0); bool is 0 or 1."""
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype == torch.uint8:
        return torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)
    int_dtype = INT_VIEW.get(dtype, dtype)
    info = torch.iinfo(int_dtype)
    bits = torch.randint(info.min, info.max, shape, generator=gen, dtype=int_dtype)
    return bits.view(dtype)


def same_bits(a, b):
    if a.dtype in INT_VIEW:
        a, b = a.view(INT_VIEW[a.dtype]), b.view(INT_VIEW[b.dtype])
    return a.shape == b.shape and torch.equal(a, b)


images = st.tuples(
    st.lists(st.integers(1, 3), min_size=0, max_size=2),  # leading dims
    st.integers(1, 7), st.integers(1, 9))                  # H, W
pads = st.tuples(*[st.integers(0, 25)] * 4)                 # up to several times the image
shifts = st.integers(-40, 40)                               # negative and > W


@SETTINGS
@given(image=images, pad=pads, shift=shifts, dtype=st.sampled_from(PAD_DTYPES), seed=seeds)
def test_tile_pad_forward_is_a_bitwise_copy(image, pad, shift, dtype, seed):
    lead, H, W = image
    x = random_bits((*lead, H, W), dtype, seed)
    y = padding_ops.tile_pad(x, pad, shift)
    assert y.dtype == dtype and y.is_contiguous()
    assert same_bits(y, tile_pad_reference(x, pad, shift))
    # A non-contiguous view of the same values gives the same bytes.
    xt = x.transpose(-1, -2).contiguous().transpose(-1, -2)
    assert same_bits(padding_ops.tile_pad(xt, pad, shift), y)


@SETTINGS
@given(image=images, pad=pads, shift=shifts, dtype=float_dtypes, seed=seeds, special=specials)
def test_tile_pad_backward_propagates_like_reference(image, pad, shift, dtype, seed, special):
    lead, H, W = image
    left, right, top, bottom = pad
    grad = values((*lead, H + top + bottom, W + left + right), dtype, seed, special)
    got = torch.ops.padding_ops.tile_pad_backward(grad, pad, shift)
    x = torch.zeros((*lead, H, W), dtype=torch.float64, requires_grad=True)
    (want,) = torch.autograd.grad(tile_pad_reference(x, pad, shift), x, grad.double())
    copies = math.ceil((H + top + bottom) / H + 1) * math.ceil((W + left + right) / W + 1)
    assert_matches(got, want, "tile_pad_backward", *tolerance(dtype, copies))
    assert got.dtype == dtype


# ---- RWKV TimeX ----------------------------------------------------------------------------

def timex_terms(w, k):
    """terms[b, c, t, u] = w[c, T-1-(t-u)] * k[b, c, u] where u <= t, else exactly 0 (no
    product is formed with a padding zero)."""
    T = w.shape[1]
    t = torch.arange(T)
    lag = t[:, None] - t[None, :]  # t - u
    causal = lag >= 0
    coef = w[:, (T - 1 - lag).clamp(0, T - 1)]  # (C, T, T)
    return causal, coef


def timex_definition(w, k, eps):
    causal, coef = timex_terms(w, k)
    return torch.where(causal, coef[None] * k[:, :, None, :], 0).sum(-1) + eps


def timex_backward_definition(g, w, k):
    """grad_k[b, c, u] = sum_{t >= u} w[c, T-1-(t-u)] g[b, c, t];
    grad_w[c, T-1-s] = sum_b sum_{t >= s} g[b, c, t] k[b, c, t-s]."""
    C, T = w.shape
    causal, coef = timex_terms(w, k)
    grad_k = torch.where(causal, coef[None] * g[:, :, :, None], 0).sum(-2)
    t = torch.arange(T)
    col = (T - 1 - (t[:, None] - t[None, :]))[causal]  # w column of each causal (t, u)
    prod = (g[:, :, :, None] * k[:, :, None, :])[:, :, causal].sum(0)  # (C, pairs)
    grad_w = torch.zeros(C, T, dtype=w.dtype).index_add_(1, col, prod)
    return grad_w, grad_k


@SETTINGS
@given(B=st.integers(1, 3), C=st.integers(1, 4), T=st.integers(1, 37), dtype=float_dtypes,
       eps=st.sampled_from([0.0, 0.5, -1e-3]), seed=seeds, special=specials,
       where=st.sampled_from(["w", "k", "grad", "all"]))
def test_timex_matches_definition(B, C, T, dtype, eps, seed, special, where):
    s = {name: (special if where in (name, "all") else 0.0) for name in ("w", "k", "grad")}
    w = values((C, T), dtype, seed, s["w"])
    k = values((B, C, T), dtype, seed + 1, s["k"])
    g = values((B, C, T), dtype, seed + 2, s["grad"])
    out = rwkv_ops.timex(w, k, eps)
    assert_matches(out, timex_definition(w.double(), k.double(), eps), "timex forward",
                   *tolerance(dtype, T))
    grad_w, grad_k = torch.ops.rwkv_ops.timex_backward(g, w, k)
    want_w, want_k = timex_backward_definition(g.double(), w.double(), k.double())
    assert_matches(grad_k, want_k, "timex grad_k", *tolerance(dtype, T))
    assert_matches(grad_w, want_w, "timex grad_w", *tolerance(dtype, B * T))


def test_timex_inf_weight_does_not_leak_into_earlier_outputs():
    """A concrete case of the above: w[c, 0] weighs only the last output's first input, so
    an inf there makes out[..., T-1] inf (k[..., 0] > 0) and leaves every other output
    finite. The conv1d form multiplies w[c, 0] by padding zeros: NaN everywhere else."""
    w = torch.ones(1, 5)
    w[0, 0] = math.inf
    k = torch.ones(1, 1, 5)
    out = rwkv_ops.timex(w, k)
    assert torch.equal(out, torch.tensor([[[1.0, 2.0, 3.0, 4.0, math.inf]]]))


# ---- LLTM cell -----------------------------------------------------------------------------

@SETTINGS
@given(B=st.integers(1, 5), F=st.integers(1, 9), S=st.integers(1, 19), dtype=float_dtypes,
       seed=seeds, special=specials,
       where=st.sampled_from(["input", "weights", "state", "grads", "all"]))
def test_lltm_matches_reference(B, F, S, dtype, seed, special, where):
    def sp(name):
        return special if where in (name, "all") else 0.0

    K = S + F
    input = values((B, F), dtype, seed, sp("input"))
    weights = values((3 * S, K), dtype, seed + 1, sp("weights"), scale=1 / math.sqrt(K))
    bias = values((3 * S,), dtype, seed + 2, sp("weights"), scale=0.5)
    old_h = values((B, S), dtype, seed + 3, sp("state"))
    old_cell = values((B, S), dtype, seed + 4, sp("state"))
    grad_h = values((B, S), dtype, seed + 5, sp("grads"))
    grad_cell = values((B, S), dtype, seed + 6, sp("grads"))
    args = [t.requires_grad_() for t in (input, weights, bias, old_h, old_cell)]

    got = lltm.lltm_cell(*args)
    got_grads = torch.autograd.grad(got, args, (grad_h, grad_cell))
    want = lltm_cell_reference(*args)
    want_grads = torch.autograd.grad(want, args, (grad_h, grad_cell))
    rtol, atol = tolerance(dtype, K)
    for name, a, b in zip(["new_h", "new_cell"], got, want):
        assert_matches(a.detach(), b.detach(), f"lltm {name}", rtol, atol)
    names = ["d_input", "d_weights", "d_bias", "d_old_h", "d_old_cell"]
    for name, a, b in zip(names, got_grads, want_grads):
        assert_matches(a, b, f"lltm {name}", rtol, atol * B)


@pytest.mark.skipif(os.environ.get("FUSED_OPS_NO_AVX2", "0") not in ("", "0"),
                    reason="this is the baseline run")
def test_baseline_cpu_kernels():
    """The LLTM and TimeX CPU kernels come in an AVX2 + FMA build and a baseline build, which
    CPUs without AVX2 run (csrc/common/cpu_features.h): rerun this file's LLTM and TimeX
    tests with FUSED_OPS_NO_AVX2=1, which makes every CPU kernel take the baseline build."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
         "timex or lltm"],
        env=dict(os.environ, FUSED_OPS_NO_AVX2="1"), capture_output=True, text=True,
        timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout, run.stdout[-2000:]
