"""Property-based tests (hypothesis) of the paths that tests/test_properties.py does not reach:
the LLTM over a sequence (lltm_sequence, LLTMLayer; on CUDA the persistent kernels and the
per-step fallback) and TimeX at lengths across its algorithm crossovers (direct, fused FFT,
library FFT), forced or chosen. On the CPU, and on CUDA where present (each test runs per
device). Hypothesis draws shapes, dtypes, paths and a seed for the values; references are
computed in float64 on the CPU.

What "propagates as the reference does" means, precisely (values: finite ones drawn
uniformly and bounded so that nothing overflows or saturates, plus a few inf, -inf, NaN):

- LLTM sequence: NaN, +inf and -inf at exactly the positions of the float64 reference (the
  tutorial's cell looped over the steps with torch ops, autograd for the gradients), in
  every output and gradient, on every path; finite values close. The finite values are
  bounded (inputs and states in [-1, 1], weights in [-1/K, 1/K], bias in [-0.5, 0.5],
  T <= 4: |z| <= 1.5 and |c_t| <= 7) so that no finite value lands on a saturation point
  where two correct implementations could round to different special values (tanh(c) = 1
  exactly, sigmoid(z) = 0 exactly, times an inf: NaN in one, inf in the other); with that,
  whether a value is NaN, +inf or -inf depends on neither the order of a sum's terms nor the
  precision, only on the special values themselves.
- TimeX, every algorithm and device (the row contract): a row whose inputs are all finite
  (out[b, c] and grad_k[b, c]: w[c], k[b, c], g[b, c]; grad_w[c]: g[:, c], k[:, c]) is finite
  and close to the reference; wherever the definition's output is non-finite, the op's is
  non-finite (nothing is silently made finite); so non-finite values never leave their row.
- TimeX, direct kernels on the CPU: exactly the definition's non-finite positions
  (out[b, c, t] is non-finite iff some k[b, c, u <= t] or w[c, j >= T-1-t] is; grad_k and
  grad_w likewise; test_properties.py also checks NaN against +-inf at T <= 37).
- TimeX, FFT algorithms (CPU, CUDA fused and library): every element of a row with a
  non-finite input is non-finite, as the reference FFT convolution
  (rwkv_ops.reference.timex_fftconv) is (checked here on the same inputs): the transform
  mixes every input of a row into every output (mostly NaN; at T = 1 an inf can stay inf).
- TimeX, direct kernels on CUDA: the row contract only. Their tiles multiply the zero
  padding beyond the causal triangle, and 3xTF32 splits an inf into inf + NaN, so a NaN can
  replace an inf and spread over outputs of its row that the definition keeps finite
  (tests/sanitize_probe.py nonfinite counts how often).

FUSED_OPS_HYPOTHESIS_EXAMPLES sets the examples per test (defaults below: the file runs in
about a minute on the 2-core CPU machine).
"""

import contextlib
import math
import os

import pytest
import torch
from conftest import DEVICES

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, assume, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import lltm  # noqa: E402
import rwkv_ops  # noqa: E402
from lltm.reference import lltm_cell_reference  # noqa: E402
from rwkv_ops.reference import timex_fftconv  # noqa: E402
from test_properties import assert_matches, timex_backward_definition, timex_definition  # noqa: E402


def examples(default):
    return settings(max_examples=int(os.environ.get("FUSED_OPS_HYPOTHESIS_EXAMPLES", default)),
                    deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


seeds = st.integers(0, 2**31 - 1)
ALL_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@contextlib.contextmanager
def environment(**values):
    """Sets (None: unsets) environment variables around a block (the ops read their path
    variables at every call)."""
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def uniform(shape, seed, scale, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1).mul(scale).to(dtype)


def sprinkle(x, seed, count):
    """x (float64) with `count` entries at random positions set to inf, -inf or NaN."""
    if count == 0 or x.numel() == 0:
        return x
    gen = torch.Generator().manual_seed(seed)
    x = x.clone()
    flat = x.view(-1)
    idx = torch.randint(0, flat.numel(), (count,), generator=gen)
    kinds = torch.tensor([math.inf, -math.inf, math.nan], dtype=torch.float64)
    flat[idx] = kinds[torch.randint(0, 3, (count,), generator=gen)]
    return x


# ---- LLTM sequence -------------------------------------------------------------------------

_PERSISTENT = {}


def persistent_runs(device, dtype):
    """Whether LLTM_SEQUENCE_PATH=persistent runs this dtype on this device (sm_90+)."""
    key = (device, dtype)
    if key not in _PERSISTENT:
        args = [torch.zeros(1, 1, 1), torch.zeros(3, 2), torch.zeros(3), torch.zeros(1, 1),
                torch.zeros(1, 1)]
        try:
            with environment(LLTM_SEQUENCE_PATH="persistent"):
                lltm.lltm_sequence(*[a.to(device, dtype) for a in args])
            _PERSISTENT[key] = True
        except ValueError:
            _PERSISTENT[key] = False
    return _PERSISTENT[key]


def paths_for(device):
    return ["auto", "fallback", "persistent"] if device == "cuda" else ["auto"]


def reference_sequence(x, weights, bias, h0, c0):
    h, c = h0, c0
    outs = []
    for t in range(x.shape[0]):
        h, c = lltm_cell_reference(x[t], weights, bias, h, c)
        outs.append(h)
    return (torch.stack(outs) if outs else x.new_empty(0, *h0.shape)), (h, c)


def sequence_results(fn, inputs, cots):
    """fn(*leaves) -> (output, (h_n, c_n)); returns output, h_n, c_n and the gradients of
    every input from L = <output, g_out> + <h_n, g_h> + <c_n, g_c>."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    output, (h_n, c_n) = fn(*leaves)
    g_out, g_h, g_c = (c.to(output) for c in cots)
    loss = (output * g_out).sum() + (h_n * g_h).sum() + (c_n * g_c).sum()
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    grads = [torch.zeros_like(l) if g is None else g for l, g in zip(leaves, grads)]
    return [output.detach(), h_n.detach(), c_n.detach(), *grads]


def run_layer(inputs, cots, device, dtype, batch_first, states):
    """LLTMLayer with the given parameters: x as (B, T, F) when batch_first; states None (zero
    states, no state gradients) or given. Returns what sequence_results returns, in the
    functional layout (output (T, B, S); gradients of x, weights, bias[, h0, c0])."""
    x, weights, bias, h0, c0 = inputs
    T, B, F = x.shape
    S = h0.shape[1]
    layer = lltm.LLTMLayer(F, S, batch_first=batch_first).to(device, dtype)
    with torch.no_grad():
        layer.weights.copy_(weights)
        layer.bias.copy_(bias)
    xin = (x.transpose(0, 1).contiguous() if batch_first else x).detach().requires_grad_()
    state = (h0.detach().requires_grad_(), c0.detach().requires_grad_()) if states else None
    output, (h_n, c_n) = layer(xin, state)
    if batch_first:
        assert output.shape == (B, T, S)
        output = output.transpose(0, 1)
    g_out, g_h, g_c = (c.to(device, dtype) for c in cots)
    loss = (output * g_out).sum() + (h_n * g_h).sum() + (c_n * g_c).sum()
    leaves = [xin, layer.weights, layer.bias] + (list(state) if states else [])
    grads = torch.autograd.grad(loss, leaves)
    d_x = grads[0].transpose(0, 1) if batch_first else grads[0]
    return [output.detach(), h_n.detach(), c_n.detach(), d_x, *grads[1:]]


NAMES = ["output", "h_n", "c_n", "d_input", "d_weights", "d_bias", "d_h0", "d_c0"]

# Errors are the largest absolute error, relative to max(1, the largest reference value):
# the values are O(1) by construction, and relative errors of the one-element outputs that
# random shapes draw (h_n at B = S = 1) are noise where the value happens to be near zero.
# float32 and float64: a fixed bound; half types: the flash-attention rule (DESIGN.md), the
# error at most twice that of plain PyTorch at the same precision on the same device, or
# under a floor of a few units of the type's precision.
SEQ_TOL = {torch.float64: 1e-12, torch.float32: 2e-5}
HALF_FLOOR = {torch.float16: 4e-3, torch.bfloat16: 3e-2}


def max_abs(a, b):
    return (a.cpu().double() - b).abs().max().item() if b.numel() else 0.0


@pytest.mark.parametrize("device", DEVICES)
@examples(50)
@given(T=st.integers(0, 8), B=st.integers(1, 5), F=st.integers(0, 7),
       S=st.one_of(st.integers(1, 20), st.sampled_from([33, 129])),
       dtype=st.sampled_from(ALL_DTYPES), path=st.sampled_from(["auto", "fallback", "persistent"]),
       how=st.sampled_from(["functional", "layer", "layer batch_first"]),
       states=st.booleans(), seed=seeds)
def test_lltm_sequence_matches_reference(device, T, B, F, S, dtype, path, how, states, seed):
    if path not in paths_for(device):
        path = "auto"
    if path == "persistent":
        assume(persistent_runs(device, dtype))
    K = S + F
    inputs64 = [uniform((T, B, F), seed, 1.0), uniform((3 * S, K), seed + 1, 1 / math.sqrt(K)),
                uniform((3 * S,), seed + 2, 1 / math.sqrt(S)), uniform((B, S), seed + 3, 0.5),
                uniform((B, S), seed + 4, 0.5)]
    if how != "functional" and not states:
        inputs64[3] = inputs64[4] = torch.zeros(B, S, dtype=torch.float64)
    cots = [uniform((T, B, S), seed + 5, 1.0), uniform((B, S), seed + 6, 1.0),
            uniform((B, S), seed + 7, 1.0)]
    inputs = [t.to(device, dtype) for t in inputs64]
    # The reference on the values the op sees (rounded to dtype), in float64.
    want = sequence_results(reference_sequence, [t.cpu().double() for t in inputs], cots)

    event(f"path {path}, {how}, {str(dtype)[6:]}")
    with environment(LLTM_SEQUENCE_PATH=None if path == "auto" else path):
        if how == "functional":
            got = sequence_results(lltm.lltm_sequence, inputs, cots)
        else:
            got = run_layer(inputs, cots, device, dtype, how.endswith("batch_first"), states)
    if how != "functional" and not states:
        want = want[:6]  # no state gradients
    what = f"{how} {path} {dtype} T={T} B={B} F={F} S={S}"
    plain = None
    if dtype in HALF_FLOOR:
        plain = sequence_results(reference_sequence, inputs, cots)
    for i, (name, g, w) in enumerate(zip(NAMES, got, want)):
        assert g.dtype == dtype and g.device.type == device, f"{what} {name}"
        assert g.shape == w.shape, f"{what} {name}: shape {tuple(g.shape)} != {tuple(w.shape)}"
        assert bool(torch.isfinite(g).all()), f"{what} {name}: non-finite values"
        scale = max(1.0, w.abs().max().item()) if w.numel() else 1.0
        err = max_abs(g, w)
        if dtype in HALF_FLOOR:
            tol = max(2 * max_abs(plain[i], w), HALF_FLOOR[dtype] * scale)
        else:
            tol = SEQ_TOL[dtype] * scale
        assert err <= tol, f"{what} {name}: max abs error {err:.2e} > {tol:.1e}"


@pytest.mark.parametrize("device", DEVICES)
@examples(60)
@given(T=st.integers(1, 4), B=st.integers(1, 4), F=st.integers(1, 6), S=st.integers(1, 12),
       dtype=st.sampled_from([torch.float32, torch.float64]),
       path=st.sampled_from(["auto", "fallback", "persistent"]),
       where=st.sampled_from(["input", "weights", "bias", "state", "grads", "all"]),
       count=st.integers(1, 3), seed=seeds)
def test_lltm_sequence_nonfinite_like_reference(device, T, B, F, S, dtype, path, where, count,
                                                seed):
    if path not in paths_for(device):
        path = "auto"
    if path == "persistent":
        assume(persistent_runs(device, dtype))
    K = S + F

    def sp(name, x, s):
        return sprinkle(x, s + 100, count) if where in (name, "all") else x

    # The bounds of the module docstring: |z| <= 1.5, |c_t| <= 1 + 1.5 T <= 7.
    inputs64 = [sp("input", uniform((T, B, F), seed, 1.0), seed),
                sp("weights", uniform((3 * S, K), seed + 1, 1 / K), seed + 1),
                sp("bias", uniform((3 * S,), seed + 2, 0.5), seed + 2),
                sp("state", uniform((B, S), seed + 3, 1.0), seed + 3),
                sp("state", uniform((B, S), seed + 4, 1.0), seed + 4)]
    cots = [sp("grads", uniform((T, B, S), seed + 5, 1.0), seed + 5),
            sp("grads", uniform((B, S), seed + 6, 1.0), seed + 6),
            sp("grads", uniform((B, S), seed + 7, 1.0), seed + 7)]
    inputs = [t.to(device, dtype) for t in inputs64]
    want = sequence_results(reference_sequence, inputs64, cots)
    event(f"path {path}; non-finite outputs: {sum(int((~torch.isfinite(w)).sum()) > 0 for w in want)} of 8")
    with environment(LLTM_SEQUENCE_PATH=None if path == "auto" else path):
        got = sequence_results(lltm.lltm_sequence, inputs, cots)
    rtol, atol = (1e-9, 1e-9) if dtype == torch.float64 else (2e-4, 2e-5 * K * T)
    what = f"{path} {dtype} T={T} B={B} F={F} S={S} specials in {where}"
    for name, g, w in zip(NAMES, got, want):
        assert g.dtype == dtype, f"{what} {name}"
        assert_matches(g.cpu(), w, f"{what} {name}", rtol, atol)


# ---- TimeX across the algorithm crossovers -------------------------------------------------

# The crossover lengths (csrc/rwkv/timex.cpp: CPU 512 float and half types, 256 float64;
# csrc/rwkv/timex_choice.h: CUDA 256 float32, up to 1024 half types, 256 float64), the fused
# kernels' power-of-two steps and their maximum 16384 (past it the cluster kernels on sm_90,
# else the library FFT), the library FFT's 7-smooth lengths (4097 -> 4116).
CROSS_T = [255, 256, 257, 511, 512, 513, 767, 768, 769, 1023, 1024, 1025]
LONG_T = [4097, 16383, 16384, 16385]
lengths = st.one_of(st.integers(1, 40), st.sampled_from(CROSS_T), st.sampled_from(LONG_T))
ALGOS = ["auto", "direct", "fft", "fft_library"]


def tc_faster(B, C, T):
    """Whether auto takes the tensor-core FFT in bfloat16 for B rows of C channels of T
    (timex_choice.h)."""
    if B == 1:
        return T > 8192 and C >= 512
    if T <= 512:
        return False
    if B == 3 and T <= 4096:
        return 2560 < T <= 3072
    if T <= 1024:
        return True
    if T <= 1536:
        return C >= 512 or B >= 8 or (B == 2 and T > 1280)
    if 3072 < T <= 4096:
        return B >= 4 or (B == 2 and C >= 256)
    return True


def expected_algorithm(device, dtype, T, algo, B, C):
    """What timex_algorithm must report for k (B, C, T) (csrc/rwkv/timex.cpp, timex_choice.h)."""
    if device == "cpu":
        if algo == "auto":
            return "direct" if T <= (256 if dtype == torch.float64 else 512) else "fft_library"
        return "direct" if algo == "direct" else "fft_library"
    M = 1 << max(0, (T - 1).bit_length())
    smem = 8 * (M + (M >> 4))  # timex_fft_math.cuh smem_bytes
    # (the property exists in recent torch releases; sm_80 and newer have >= 163 KiB)
    optin = getattr(torch.cuda.get_device_properties(0), "shared_memory_per_block_optin",
                    163 * 1024)
    fused = dtype != torch.float64 and T <= 16384 and smem <= optin
    # past one CTA, the thread-block-cluster kernels up to T = 65536 (sm_90 and newer)
    cluster = (dtype != torch.float64 and 16384 < T <= 65536
               and torch.cuda.get_device_capability(0)[0] >= 9)
    fastest = "fft_fused" if fused else "fft_cluster" if cluster else "fft_library"
    if algo == "auto":
        # the half types' 1024 below B = 16 at up to 128 channels (timex_choice.h takes_direct,
        # half_direct_max_t; timex_shape draws B, C <= 3); float32's 256, 192 at B = 1 with up
        # to 512 channels (f32_direct_max_t); float64's 256
        direct_max = {torch.float16: 1024, torch.bfloat16: 1024,
                      torch.float32: 192 if B == 1 and C <= 512 else 256}.get(dtype, 256)
        if T <= direct_max:
            return "direct"
        # bfloat16 where tc_faster(B, C, T) on the tensor-core FFT (sm_80 and newer, T <= 16384)
        if (dtype == torch.bfloat16 and T <= 16384 and tc_faster(B, C, T)
                and torch.cuda.get_device_capability(0)[0] >= 8):
            return "fft_tc"
        return fastest
    return {"direct": "direct", "fft": fastest, "fft_library": "fft_library"}[algo]


def fft_reference(w, k, g, eps):
    """out, grad_w, grad_k in float64 through torch.fft at length 2T (circular = linear on the
    first T outputs): out = IDFT(K W^), grad_k = IDFT(G conj(W^)), grad_w[c, T-1-s] =
    IDFT(sum_b G conj(K))[s], W = w reversed in time."""
    T = k.shape[-1]
    n = 2 * T
    wf = torch.fft.rfft(w.flip(-1), n=n)
    gf, kf = torch.fft.rfft(g, n=n), torch.fft.rfft(k, n=n)
    grad_k = torch.fft.irfft(gf * wf.conj(), n=n)[..., :T]
    grad_w = torch.fft.irfft((gf * kf.conj()).sum(0), n=n)[..., :T].flip(-1)
    return timex_fftconv(w, k, eps), grad_w, grad_k


def timex_reference(w, k, g, eps):
    """float64: the definition (O(C T^2) memory) up to T = 1025, the FFT form above."""
    w, k, g = w.double(), k.double(), g.double()
    if k.shape[-1] <= 1025:
        return [timex_definition(w, k, eps), *timex_backward_definition(g, w, k)]
    return list(fft_reference(w, k, g, eps))


def test_fft_reference_matches_definition():
    gen = torch.Generator().manual_seed(0)
    for B, C, T in [(1, 1, 1), (2, 3, 7), (3, 2, 64)]:
        w, k, g = (torch.randn(s, generator=gen, dtype=torch.float64)
                   for s in [(C, T), (B, C, T), (B, C, T)])
        for a, b in zip(fft_reference(w, k, g, 0.3),
                        [timex_definition(w, k, 0.3), *timex_backward_definition(g, w, k)]):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


# Largest error over the largest reference value (every element counts; test_rwkv_fft.py's
# measure): float32 FFT ~2e-6, direct ~1e-5 at T = 16384; half types: their rounding.
TIMEX_TOL = {torch.float64: 1e-10, torch.float32: 3e-5, torch.float16: 3e-3,
             torch.bfloat16: 1.5e-2}


def max_rel(got, want):
    got, want = got.cpu().double(), want.double()
    if want.numel() == 0:
        return 0.0
    scale = want.abs().max().item()
    return (got - want).abs().max().item() / (scale if scale > 0 else 1.0)


def timex_shape(data, T):
    """(B, C): small, and B * C <= 2 at the long lengths (the direct CPU kernels cost T^2)."""
    if T > 1025:
        return data.draw(st.sampled_from([(1, 1), (2, 1), (1, 2)]))
    return data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))


@pytest.mark.parametrize("device", DEVICES)
@examples(50)
@given(T=lengths, dtype=st.sampled_from(ALL_DTYPES), algo=st.sampled_from(ALGOS), seed=seeds,
       eps=st.sampled_from([0.0, 0.5]), data=st.data())
def test_timex_across_crossovers(device, T, dtype, algo, seed, eps, data):
    B, C = timex_shape(data, T)
    w = uniform((C, T), seed, 1 / math.sqrt(T), dtype)
    k, g = uniform((B, C, T), seed + 1, 1.0, dtype), uniform((B, C, T), seed + 2, 1.0, dtype)
    with environment(RWKV_TIMEX_ALGO=None if algo == "auto" else algo):
        kd = k.to(device)
        kind = rwkv_ops.timex_algorithm(kd)
        assert kind == expected_algorithm(device, dtype, T, algo, B, C), (T, dtype, algo, kind)
        out = rwkv_ops.timex(w.to(device), kd, eps)
        grad_w, grad_k = torch.ops.rwkv_ops.timex_backward(g.to(device), w.to(device), kd)
    event(f"{kind}, T {'> 1025' if T > 1025 else '<= 40' if T <= 40 else 'at a crossover'}")
    what = f"{device} {algo} {dtype} B={B} C={C} T={T}"
    for name, a, b in zip(["out", "grad_w", "grad_k"], [out, grad_w, grad_k],
                          timex_reference(w, k, g, eps)):
        assert a.dtype == dtype and a.shape == b.shape, f"{what} {name}"
        assert bool(torch.isfinite(a).all()), f"{what} {name}: non-finite values"
        err = max_rel(a, b)
        assert err <= TIMEX_TOL[dtype], f"{what} {name}: max relative error {err:.2e}"


def nonfinite_positions(w, k, g):
    """Where the definition's out, grad_w, grad_k are non-finite (finite inputs nonzero):
    out[b, c, t]: some k[b, c, u <= t] or w[c, j >= T-1-t]; grad_k[b, c, u]: some g[b, c, t >= u]
    or w[c, j >= u]; grad_w[c, T-1-s]: for some b, g[b, c, t >= s] or k[b, c, u <= T-1-s]."""
    bad_w, bad_k, bad_g = (~torch.isfinite(t) for t in (w, k, g))
    prefix_k = bad_k.cummax(-1).values                       # some k[.., u <= t]
    suffix_w = bad_w.flip(-1).cummax(-1).values.flip(-1)     # some w[.., j >= t]
    suffix_g = bad_g.flip(-1).cummax(-1).values.flip(-1)
    out = prefix_k | suffix_w.flip(-1)[None]                 # w[c, j >= T-1-t]
    grad_k = suffix_g | suffix_w[None]
    # grad_w[c, T-1-s] with s = T-1-j: g suffix from s, k prefix up to T-1-s = j.
    s_of_j = torch.arange(w.shape[1] - 1, -1, -1)
    grad_w = (suffix_g[..., s_of_j] | prefix_k).any(0)
    return out, grad_w, grad_k


@pytest.mark.parametrize("device", DEVICES)
@examples(60)
@given(T=lengths, dtype=st.sampled_from([torch.float32, torch.float64]),
       algo=st.sampled_from(ALGOS), where=st.sampled_from(["w", "k", "grad", "all"]),
       count=st.integers(1, 3), seed=seeds, data=st.data())
def test_timex_nonfinite_contracts(device, T, dtype, algo, where, count, seed, data):
    B, C = timex_shape(data, T)

    def sp(name, x, s):
        return sprinkle(x, s + 100, count) if where in (name, "all") else x

    w64 = sp("w", uniform((C, T), seed, 2.0), seed)
    k64 = sp("k", uniform((B, C, T), seed + 1, 2.0), seed + 1)
    g64 = sp("grad", uniform((B, C, T), seed + 2, 2.0), seed + 2)
    w, k, g = (t.to(dtype) for t in (w64, k64, g64))
    with environment(RWKV_TIMEX_ALGO=None if algo == "auto" else algo):
        kd = k.to(device)
        kind = rwkv_ops.timex_algorithm(kd)
        got = [rwkv_ops.timex(w.to(device), kd, 0.5),
               *torch.ops.rwkv_ops.timex_backward(g.to(device), w.to(device), kd)]
    got = [t.cpu().double() for t in got]
    event(f"{kind}, T {'> 1025' if T > 1025 else '<= 40' if T <= 40 else 'at a crossover'}")
    # Rows whose inputs are all finite, and where the definition is non-finite.
    fin_w, fin_k, fin_g = (torch.isfinite(t).all(-1) for t in (w64, k64, g64))
    rows = [fin_w[None] & fin_k, (fin_g & fin_k).all(0), fin_w[None] & fin_g]
    positions = nonfinite_positions(w64, k64, g64)
    # Finite rows against the reference (non-finite rows of the FFT reference are NaN: left out).
    want = timex_reference(w64.nan_to_num(0, 0, 0), k64.nan_to_num(0, 0, 0),
                           g64.nan_to_num(0, 0, 0), 0.5)
    what = f"{device} {kind} {dtype} B={B} C={C} T={T} specials in {where}"
    tol = 1e-10 if dtype == torch.float64 else 3e-5
    for name, a, ok_rows, pos, ref in zip(["out", "grad_w", "grad_k"], got, rows, positions,
                                          want):
        nonfin = ~torch.isfinite(a)
        assert not bool(nonfin[ok_rows].any()), f"{what} {name}: non-finite in an all-finite row"
        if bool(ok_rows.any()):
            err = max_rel(a[ok_rows], ref[ok_rows])
            assert err <= tol, f"{what} {name}: finite rows off by {err:.2e}"
        missed = pos & ~nonfin
        assert not bool(missed.any()), (
            f"{what} {name}: finite at {missed.nonzero()[:5].tolist()}, where the definition "
            "is not")
        if kind == "direct" and device == "cpu":
            extra = nonfin & ~pos
            assert not bool(extra.any()), (
                f"{what} {name}: non-finite at {extra.nonzero()[:5].tolist()}, where the "
                "definition is finite")
        if kind != "direct":  # the FFT contract: a row with a non-finite input is all non-finite
            assert bool(nonfin[~ok_rows].all()), f"{what} {name}: a bad row is partly finite"
    # The reference FFT convolution has the same whole-row property.
    ref_out = timex_fftconv(w.double(), k.double(), 0.5)
    bad_rows = ~rows[0]
    assert bool((~torch.isfinite(ref_out[bad_rows])).all())
    assert bool(torch.isfinite(ref_out[rows[0]]).all())
