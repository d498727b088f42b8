"""CUDA reliability: streams, graph capture, a second GPU, non-contiguous and channels-last
inputs, and tensors of more than 2^31 elements, for every op forward and backward.

Every CUDA test skips without a GPU; the second-GPU tests need two. The large-tensor tests
run only with FUSED_OPS_LARGE=1 and when torch.cuda.mem_get_info() shows the memory each
needs (up to ~45 GiB: an 80 GB H100 runs them all, one after another). Their values are
small integers, so every sum is exact in float32 and results are compared exactly.
The size-limit tests (a clear error, never a wrap-around) run on the CPU too.
"""

import os

import pytest
import torch
from conftest import DEVICES

import lltm  # noqa: F401  (registers torch.ops.lltm)
import padding_ops
import rwkv_ops
from lltm.reference import lltm_cell_reference
from padding_ops.reference import tile_pad_reference

HAS_CUDA = torch.cuda.is_available()
cuda_only = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
two_gpus = pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < 2,
                              reason="needs two CUDA devices")


# ---- The ops under test: every CUDA kernel, forward and backward ----------------------------
#
# A case makes its inputs (make(gen, device) -> list of tensors) and runs the forward and
# backward ops on them (run(*inputs) -> tuple of outputs). `path` forces the LLTM CUDA path.
# exact: results do not depend on strides or streams (no cuBLAS); else compared closely.

class Case:
    def __init__(self, name, make, run, exact=True, path=None):
        self.name, self.make, self.run, self.exact, self.path = name, make, run, exact, path

    def __repr__(self):
        return self.name


def randn(gen, device, *shape, dtype=torch.float32):
    return torch.randn(shape, generator=gen, device="cpu", dtype=torch.float64).to(device, dtype)


def padding_case(shape, pad, shift, dtype=torch.float32):
    left, right, top, bottom = pad
    out_shape = (*shape[:-2], shape[-2] + top + bottom, shape[-1] + left + right)

    def make(gen, device):
        return [randn(gen, device, *shape, dtype=dtype), randn(gen, device, *out_shape, dtype=dtype)]

    def run(x, gy):
        return (padding_ops.tile_pad(x, pad, shift),
                torch.ops.padding_ops.tile_pad_backward(gy, pad, shift))

    return Case(f"tile_pad{tuple(shape)}{pad}s{shift}-{str(dtype)[6:]}", make, run)


def timex_case(B, C, T, dtype=torch.float32):
    def make(gen, device):
        return [randn(gen, device, C, T, dtype=dtype), randn(gen, device, B, C, T, dtype=dtype),
                randn(gen, device, B, C, T, dtype=dtype)]

    def run(w, k, g):
        return (torch.ops.rwkv_ops.timex_forward(w, k, 0.25),
                *torch.ops.rwkv_ops.timex_backward(g, w, k))

    return Case(f"timex({B},{C},{T})-{str(dtype)[6:]}", make, run)


def lltm_case(B, F, S, path, dtype=torch.float32):
    def make(gen, device):
        return [randn(gen, device, B, F, dtype=dtype), randn(gen, device, 3 * S, S + F, dtype=dtype),
                randn(gen, device, 3 * S, dtype=dtype), randn(gen, device, B, S, dtype=dtype),
                randn(gen, device, B, S, dtype=dtype), randn(gen, device, B, S, dtype=dtype),
                randn(gen, device, B, S, dtype=dtype)]

    def run(input, weights, bias, old_h, old_cell, grad_h, grad_cell):
        new_h, new_cell, X, gates = torch.ops.lltm.lltm_forward(input, weights, bias, old_h,
                                                                 old_cell)
        grads = torch.ops.lltm.lltm_backward(grad_h, grad_cell, new_cell, gates, X, weights,
                                             [True] * 4)
        return (new_h, new_cell, X, gates, *grads)

    return Case(f"lltm({B},{F},{S})-{path}-{str(dtype)[6:]}", make, run, exact=path == "small",
                path=path)


CASES = [
    padding_case((3, 17, 33), (5, 6, 7, 8), -3),                 # odd sizes, unaligned rows
    padding_case((8, 5), (300, 200, 150, 100), 7),                # backward splits + reduce
    padding_case((2, 3, 4, 6), (1, 0, 2, 9), 2, torch.float16),   # 2-byte elements
    timex_case(5, 3, 37),                                         # T % 4 != 0, partial tiles
    timex_case(9, 2, 64),                                         # vector path, B in (8, 16]
    timex_case(3, 4, 21, torch.float64),
    timex_case(3, 2, 300, torch.bfloat16),                       # tensor cores, 8 time folds
    lltm_case(5, 7, 9, "small"),
    lltm_case(5, 7, 9, "cublas"),
    lltm_case(3, 4, 16, "cublas", torch.float64),                 # 16-byte packs
]


@pytest.fixture(params=CASES, ids=repr)
def case(request, monkeypatch):
    c = request.param
    if c.path is not None:
        monkeypatch.setenv("LLTM_CUDA_PATH", c.path)
    return c


def inputs_for(case, device="cuda", seed=0):
    return case.make(torch.Generator().manual_seed(seed), device)


def assert_same(case, got, want):
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.device == b.device and a.shape == b.shape and a.dtype == b.dtype, f"output {i}"
        if case.exact:
            assert torch.equal(a, b), f"{case}: output {i} differs"
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=f"{case}: output {i}")


# ---- (a) streams ---------------------------------------------------------------------------

@cuda_only
def test_side_stream_matches_default_stream(case):
    inputs = inputs_for(case)
    want = case.run(*inputs)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        got = case.run(*inputs_for(case))  # inputs copied to the GPU on the side stream
    stream.synchronize()
    assert_same(case, got, want)


@cuda_only
def test_kernels_run_on_the_current_stream(case):
    """The inputs get their values on a side stream only after a ~0.3 s sleep kernel there,
    and the ops are called right after, from the host, long before that sleep ends. torch's
    side streams do not synchronise with the legacy default stream, nor with any other: a
    kernel launched anywhere but on the current stream would read the stale zeros (or
    write its output before the stream's later work), and the results would differ."""
    want = case.run(*inputs_for(case))
    fresh = inputs_for(case)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        inputs = [torch.zeros_like(t) for t in fresh]
        torch.cuda._sleep(500_000_000)  # ~0.3 s of GPU cycles
        for t, v in zip(inputs, fresh):
            t.copy_(v)
        got = case.run(*inputs)
        done = torch.cuda.Event()
        done.record(stream)
    assert not done.query(), "the sleep kernel finished before the ops were launched"
    stream.synchronize()
    assert_same(case, got, want)


# ---- (b) CUDA graphs -----------------------------------------------------------------------

@cuda_only
def test_cuda_graph_capture_and_replay(case):
    static = inputs_for(case, seed=1)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside capture, as torch's docs ask
        for _ in range(2):
            case.run(*static)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = case.run(*static)
    for seed in (2, 3):
        fresh = inputs_for(case, seed=seed)
        for t, v in zip(static, fresh):
            t.copy_(v)
        graph.replay()
        torch.cuda.synchronize()
        assert_same(case, [o.clone() for o in outs], case.run(*fresh))


# ---- (c) a GPU other than the current one ----------------------------------------------------

@two_gpus
@pytest.mark.parametrize("current,data", [(0, 1), (1, 0)])
def test_tensors_on_another_gpu(case, current, data):
    want = case.run(*inputs_for(case, f"cuda:{current}"))
    with torch.cuda.device(current):
        got = case.run(*inputs_for(case, f"cuda:{data}"))
        assert torch.cuda.current_device() == current
    torch.cuda.synchronize(data)
    assert all(o.device == torch.device(f"cuda:{data}") for o in got)
    assert_same(case, [o.to(f"cuda:{current}") for o in got], want)


# ---- (d) non-contiguous and channels-last inputs ------------------------------------------------

def transposed(t):
    """Same values, last two dims' strides swapped (1-D: a stride-2 view)."""
    if t.dim() < 2:
        return strided(t)
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


def strided(t):
    """Same values, every other element of a buffer twice as long in the last dim."""
    buf = torch.empty((*t.shape[:-1], 2 * t.shape[-1]), dtype=t.dtype, device=t.device)
    buf[..., ::2] = t
    return buf[..., ::2]


def expanded(t):
    """Same values, first dim expanded (stride 0) when it is 1-sized after taking row 0."""
    if t.dim() < 2:
        return strided(t)
    return t[:1].expand(t.shape)


@cuda_only
@pytest.mark.parametrize("layout", [transposed, strided, expanded], ids=lambda f: f.__name__)
def test_non_contiguous_inputs(case, layout):
    inputs = inputs_for(case)
    if layout is expanded:  # every row equal to row 0, so that the values can be compared
        inputs = [t[:1].expand(t.shape).contiguous() if t.dim() >= 2 else t for t in inputs]
    views = [layout(t) for t in inputs]
    assert all(torch.equal(v, t) for v, t in zip(views, inputs))
    assert any(not v.is_contiguous() for v in views)
    assert_same(case, case.run(*views), case.run(*inputs))


@cuda_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.uint8], ids=str)
def test_padding_channels_last(dtype):
    pad, shift = (3, 4, 5, 2), -5
    x = torch.randn(2, 3, 7, 9, device="cuda").mul(50).to(dtype)
    for fmt, xx in [(torch.channels_last, x),
                    (torch.channels_last_3d, x.unsqueeze(0).expand(2, 2, 3, 7, 9).contiguous())]:
        xc = xx.contiguous(memory_format=fmt)
        assert not xc.is_contiguous()
        y = padding_ops.tile_pad(xc, pad, shift)
        assert y.is_contiguous() and torch.equal(y, tile_pad_reference(xx, pad, shift))
        if dtype.is_floating_point:
            gy = torch.randn_like(y)
            gc = torch.ops.padding_ops.tile_pad_backward(gy.contiguous(memory_format=fmt), pad,
                                                         shift)
            assert torch.equal(gc, torch.ops.padding_ops.tile_pad_backward(gy, pad, shift))


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
