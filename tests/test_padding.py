import random

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICES, rel_err

import padding_ops
from padding_ops.reference import tile_pad_reference

cuda_only = pytest.mark.skipif("cuda" not in DEVICES, reason="needs a CUDA device")

ALL_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
              torch.complex128]

# (shape, pad=(left, right, top, bottom), shift): no leading dims up to 3 of them; 1-sized
# and odd images; pads of 0, small, and many times the image; shifts 0, negative, > W,
# and widths that leave unaligned heads and tails in the output rows.
CASES = [
    ((1, 1), (0, 0, 0, 0), 0),
    ((1, 1), (3, 2, 4, 1), 5),
    ((5, 7), (0, 0, 0, 0), 3),
    ((5, 7), (2, 3, 1, 4), 0),
    ((5, 7), (2, 3, 1, 4), -2),
    ((4, 9), (30, 41, 25, 17), 11),
    ((2, 6, 5), (13, 0, 0, 12), -7),
    ((3, 1, 8), (5, 6, 7, 8), 100),
    ((2, 3, 4, 5), (9, 8, 7, 6), -1000),
    ((1, 2, 2, 3, 4), (1, 2, 3, 4), 2),
    ((3, 17, 33), (16, 15, 0, 33), 32),
    ((48, 32), (100, 90, 50, 70), 10),
    ((2, 1, 64), (64, 63, 2, 1), 33),
    ((7, 1), (0, 0, 20, 19), 4),
    ((1, 40), (200, 150, 0, 0), -9),
]


def make(shape, dtype, device):
    if dtype == torch.bool:
        return torch.rand(shape, device=device) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, device=device, dtype=dtype)
    if dtype.is_floating_point:
        return torch.randn(shape, device=device).to(dtype)
    low = 0 if dtype == torch.uint8 else -100
    return torch.randint(low, 100, shape, device=device, dtype=dtype)


def grad_of(fn, x, pad, shift, grad):
    x = x.detach().requires_grad_()
    (g,) = torch.autograd.grad(fn(x, pad, shift), x, grad)
    return g


def test_reference_matches_definition():
    # The reference itself, against the definition spelled out with Python ints.
    x = torch.randn(2, 3, 4)
    pad, shift = (5, 6, 7, 2), -3
    left, right, top, bottom = pad
    H, W = 3, 4
    want = torch.empty(2, H + top + bottom, W + left + right)
    for r in range(-top, H + bottom):
        for c in range(-left, W + right):
            v = r // H
            want[:, r + top, c + left] = x[:, r - v * H, (c - v * shift) % W]
    assert torch.equal(tile_pad_reference(x, pad, shift), want)


@pytest.mark.parametrize("shape,pad,shift", CASES)
def test_forward_matches_reference(device, shape, pad, shift):
    x = make(shape, torch.float32, device)
    y = padding_ops.tile_pad(x, pad, shift)
    want = tile_pad_reference(x, pad, shift)
    assert y.shape == want.shape and y.is_contiguous() and y.dtype == x.dtype
    assert torch.equal(y, want)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_every_dtype(device, dtype):
    rng = random.Random(0)
    for shape, pad, shift in [((3, 5, 7), (9, 4, 3, 6), 5), ((2, 13), (1, 2, 3, 4), -6),
                              ((4, 31), (17, 0, 5, 5), 40), ((2, 2, 1, 3), (33, 14, 2, 9), 1)]:
        x = make(shape, dtype, device)
        assert torch.equal(padding_ops.tile_pad(x, pad, shift), tile_pad_reference(x, pad, shift))
    for _ in range(6):  # random widths: every alignment of the output rows
        shape = (rng.randint(1, 9), rng.randint(1, 40))
        pad = tuple(rng.randint(0, 50) for _ in range(4))
        shift = rng.randint(-100, 100)
        x = make(shape, dtype, device)
        assert torch.equal(padding_ops.tile_pad(x, pad, shift), tile_pad_reference(x, pad, shift))


@pytest.mark.parametrize("shape,pad", [((3, 6, 7), (2, 3, 4, 5)), ((2, 3, 8, 5), (5, 5, 8, 0)),
                                       ((1, 1, 4), (1, 0, 0, 1))])
def test_shift_zero_is_circular_padding(device, shape, pad):
    x = make(shape, torch.float32, device)
    assert torch.equal(padding_ops.tile_pad(x, pad), F.pad(x, pad, mode="circular"))


def test_any_shift_and_huge_pads(device):
    x = make((2, 5, 6), torch.float32, device)
    pad = (61, 37, 52, 49)  # about ten times the image
    base = padding_ops.tile_pad(x, pad, 4)
    assert torch.equal(base, tile_pad_reference(x, pad, 4))
    top = 2**63 - 1 - (2**63 - 1 - 4) % 6  # the largest and smallest int64 equal to 4 mod 6
    bottom = -(2**63) + (4 + 2**63) % 6
    for shift in [4 + 6 * 10**12, 4 - 6 * 10**15, top, bottom]:
        assert torch.equal(padding_ops.tile_pad(x, pad, shift), base), shift
    for shift in [2**63 - 1, -(2**63)]:
        assert torch.equal(padding_ops.tile_pad(x, pad, shift),
                           tile_pad_reference(x, pad, shift % 6))


@pytest.mark.parametrize("shape,pad,shift", CASES)
def test_backward_matches_reference(device, shape, pad, shift):
    x = make(shape, torch.float64, device)
    grad = torch.randn(tile_pad_reference(x, pad, shift).shape, device=device, dtype=torch.float64)
    got = grad_of(padding_ops.tile_pad, x, pad, shift, grad)
    want = grad_of(tile_pad_reference, x, pad, shift, grad)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape,pad,shift",
                         [((3, 4), (2, 5, 7, 1), 3), ((2, 1, 3, 2), (4, 0, 1, 6), -1)])
def test_gradcheck(device, shape, pad, shift):
    x = make(shape, torch.float64, device).requires_grad_()
    fn = lambda t: padding_ops.tile_pad(t, pad, shift)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x,))
    assert torch.autograd.gradgradcheck(fn, (x,))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_backward_low_precision_against_float64(device, dtype):
    # Tolerance rule: the error against float64 is at most 2x that of plain PyTorch (the
    # reference gather's autograd) at the same precision, plus 1e-6 of slack. ~170 copies
    # of each pixel are summed (accumulated in float here).
    x = make((6, 8), torch.float64, device)
    pad, shift = (60, 50, 40, 30), 5
    grad = torch.randn(tile_pad_reference(x, pad, shift).shape, device=device, dtype=torch.float64)
    exact = grad_of(tile_pad_reference, x, pad, shift, grad)
    got = grad_of(padding_ops.tile_pad, x.to(dtype), pad, shift, grad.to(dtype))
    eager = grad_of(tile_pad_reference, x.to(dtype), pad, shift, grad.to(dtype))
    assert got.dtype == dtype
    assert rel_err(got, exact) <= 2 * rel_err(eager, exact) + 1e-6


@pytest.mark.parametrize("shape,pad,shift", [((48, 32), (300, 300, 200, 200), 10),
                                             ((2, 3, 20, 24), (5, 6, 7, 8), 3)])
def test_backward_deterministic(device, shape, pad, shift):
    x = make(shape, torch.float32, device)
    grad = torch.randn(tile_pad_reference(x, pad, shift).shape, device=device)
    first = torch.ops.padding_ops.tile_pad_backward(grad, pad, shift)
    for _ in range(2):
        assert torch.equal(torch.ops.padding_ops.tile_pad_backward(grad, pad, shift), first)


@cuda_only
@pytest.mark.parametrize("shape,pad,shift", [
    ((48, 32), (4096, 4096, 2048, 2048), 10),   # the brick wall: ~22,000 copies a pixel
    ((3, 48, 32), (4095, 4097, 2047, 2049), -10),
    ((64, 3, 224, 224), (16, 16, 16, 16), 7),   # the benchmark's batch
    ((1, 40), (50000, 30000, 0, 0), 9),          # one row, many column repeats
    ((30, 1), (0, 0, 30000, 20000), 4),          # one column, many bands
])
def test_cuda_large_against_reference(shape, pad, shift):
    x = make(shape, torch.float32, "cuda")
    y = padding_ops.tile_pad(x, pad, shift)
    assert torch.equal(y, tile_pad_reference(x, pad, shift))
    x8 = make(shape, torch.uint8, "cuda")
    assert torch.equal(padding_ops.tile_pad(x8, pad, shift), tile_pad_reference(x8, pad, shift))
    grad = torch.randn_like(y)
    got = torch.ops.padding_ops.tile_pad_backward(grad, pad, shift)
    assert torch.equal(torch.ops.padding_ops.tile_pad_backward(grad, pad, shift), got)
    want = grad_of(tile_pad_reference, x.double(), pad, shift, grad.double())
    assert rel_err(got, want) < 1e-5


@cuda_only
def test_cuda_side_stream():
    x = make((2, 48, 32), torch.float32, "cuda")
    pad, shift = (500, 400, 300, 200), 10
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        y = padding_ops.tile_pad(x, pad, shift)
        g = torch.ops.padding_ops.tile_pad_backward(y, pad, shift)
    stream.synchronize()
    assert torch.equal(y, tile_pad_reference(x, pad, shift))
    assert torch.equal(g, torch.ops.padding_ops.tile_pad_backward(y, pad, shift))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.uint8, torch.bool], ids=str)
def test_opcheck_forward(device, dtype):
    x = make((2, 5, 6), dtype, device)
    if dtype.is_floating_point:
        x.requires_grad_()
    torch.library.opcheck(torch.ops.padding_ops.tile_pad.default, (x, [3, 2, 4, 1], -3))


def test_opcheck_backward(device):
    grad = make((2, 12, 13), torch.float64, device).requires_grad_()
    torch.library.opcheck(torch.ops.padding_ops.tile_pad_backward.default, (grad, [3, 2, 4, 1], 7))


def test_compile_fullgraph(device):
    pad, shift = (9, 4, 6, 3), 5

    def fn(x):
        return padding_ops.tile_pad(x * 2, pad, shift).sin()

    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True)
    x = make((2, 7, 8), torch.float32, device).requires_grad_()
    want = fn(x)
    got = compiled(x)
    torch.testing.assert_close(got, want)
    grad = torch.randn_like(want)
    torch.testing.assert_close(torch.autograd.grad(got, x, grad)[0],
                               torch.autograd.grad(want, x, grad)[0])


def test_non_contiguous_input_and_grad(device):
    base = make((6, 10, 8), torch.float64, device)
    pad, shift = (7, 5, 3, 9), 3
    views = [base.transpose(-1, -2), base[:, ::2, 1::2], base[0].expand(4, 10, 8),
             base.unsqueeze(0).permute(0, 1, 3, 2)]
    for x in views:
        assert not x.is_contiguous()
        y = padding_ops.tile_pad(x, pad, shift)
        assert y.is_contiguous()
        assert torch.equal(y, tile_pad_reference(x, pad, shift))
        grad = torch.randn(y.shape[:-2] + (y.shape[-1], y.shape[-2]), device=device,
                           dtype=torch.float64).transpose(-1, -2)
        torch.testing.assert_close(grad_of(padding_ops.tile_pad, x, pad, shift, grad),
                                   grad_of(tile_pad_reference, x, pad, shift, grad))
    # a grad from .sum() arrives expanded (stride 0)
    x = base.clone().requires_grad_()
    padding_ops.tile_pad(x, pad, shift).sum().backward()
    copies = (8 + 7 + 5) * (10 + 3 + 9) / (8 * 10)
    assert abs(x.grad.mean().item() - copies) < 1e-9


def test_storage_offset_input(device):
    flat = make((1000,), torch.uint8, device)
    x = flat[1:1 + 5 * 13].view(5, 13)  # data pointer not 16-byte aligned
    assert torch.equal(padding_ops.tile_pad(x, (6, 5, 4, 3), 2),
                       tile_pad_reference(x, (6, 5, 4, 3), 2))
    xf = make((200,), torch.float32, device)[3:3 + 7 * 9].view(7, 9)
    assert torch.equal(padding_ops.tile_pad(xf, (6, 5, 4, 3), -2),
                       tile_pad_reference(xf, (6, 5, 4, 3), -2))


def test_empty_tensors(device):
    x = make((0, 3, 4, 5), torch.float32, device).requires_grad_()
    y = padding_ops.tile_pad(x, (1, 2, 3, 4), 1)
    assert y.shape == (0, 3, 11, 8)
    (g,) = torch.autograd.grad(y.sum(), x)
    assert g.shape == x.shape
    # an empty image with no padding is returned as it is
    for shape in [(3, 0, 5), (2, 4, 0)]:
        e = make(shape, torch.float32, device)
        assert padding_ops.tile_pad(e, (0, 0, 0, 0), 3).shape == shape


def test_module(device):
    layer = padding_ops.TilePad((4, 3, 2, 1), shift=-5)
    x = make((2, 3, 5, 6), torch.float32, device)
    assert torch.equal(layer(x), tile_pad_reference(x, (4, 3, 2, 1), -5))
    assert "shift=-5" in repr(layer)


def test_bad_inputs(device):
    x = make((3, 4), torch.float32, device)
    with pytest.raises(ValueError, match="at least 2 dims"):
        padding_ops.tile_pad(make((5,), torch.float32, device), (1, 1, 1, 1))
    with pytest.raises(ValueError, match="at least 2 dims"):
        padding_ops.tile_pad(torch.tensor(1.0, device=device), (0, 0, 0, 0))
    with pytest.raises(ValueError, match=">= 0"):
        padding_ops.tile_pad(x, (1, -1, 0, 0))
    for pad in [(1, 2, 3), (1, 2, 3, 4, 5), ()]:
        with pytest.raises(ValueError, match="4 entries"):
            padding_ops.tile_pad(x, pad)
    with pytest.raises(TypeError, match="ints"):
        padding_ops.tile_pad(x, (1.5, 0, 0, 0))
    with pytest.raises(TypeError, match="sequence"):
        padding_ops.tile_pad(x, 3)
    with pytest.raises(TypeError, match="shift"):
        padding_ops.tile_pad(x, (1, 1, 1, 1), 0.5)
    for shape in [(0, 4), (3, 0), (2, 0, 4)]:
        with pytest.raises(ValueError, match="empty image"):
            padding_ops.tile_pad(make(shape, torch.float32, device), (0, 1, 0, 0))
    with pytest.raises((ValueError, RuntimeError)):
        torch.ops.padding_ops.tile_pad(x, [1, 2, 3], 0)
    with pytest.raises(ValueError, match="smaller than the padding"):
        torch.ops.padding_ops.tile_pad_backward(x, [3, 2, 0, 0], 0)
    with pytest.raises(ValueError, match="floating"):
        torch.ops.padding_ops.tile_pad_backward(x.int(), [1, 0, 0, 0], 0)
    with pytest.raises(ValueError, match="at least 2 dims"):
        torch.ops.padding_ops.tile_pad_backward(x[0], [0, 0, 0, 0], 0)


def test_non_tensor_input_raises_type_error():
    with pytest.raises(TypeError, match=r"tile_pad: x must be a torch.Tensor, got list"):
        padding_ops.tile_pad([[1.0, 2.0]], (1, 1, 1, 1))
