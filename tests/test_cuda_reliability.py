"""CUDA reliability: streams, graph capture, a second GPU, non-contiguous and channels-last
inputs, for every op forward and backward (tensors past 2^31 elements: test_cuda_large.py).

Every CUDA test skips without a GPU; the second-GPU tests need two.
"""

import os

import pytest
import torch

import lltm  # noqa: F401  (registers torch.ops.lltm)
import padding_ops
import rwkv_ops
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
