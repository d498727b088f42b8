import math

import pytest
import torch
from conftest import DEVICES, rel_err

import lltm
from lltm.reference import lltm_cell_reference

# (batch, input_features, state_size): batch 1, odd sizes, state_size not a multiple of
# 32 (and not of the 16-byte pack width), the tutorial's size, a large batch.
SHAPES = [(1, 1, 1), (1, 5, 3), (3, 7, 13), (2, 9, 33), (16, 32, 128), (300, 20, 36), (1024, 8, 4)]


def make_inputs(batch, features, state, device, dtype=torch.float64, requires_grad=True):
    scale = 1.0 / math.sqrt(state)
    ts = [
        torch.randn(batch, features, device=device, dtype=dtype),
        torch.empty(3 * state, features + state, device=device, dtype=dtype).uniform_(-scale, scale),
        torch.empty(3 * state, device=device, dtype=dtype).uniform_(-scale, scale),
        torch.randn(batch, state, device=device, dtype=dtype),
        torch.randn(batch, state, device=device, dtype=dtype),
    ]
    return [t.requires_grad_(requires_grad) for t in ts]


def outputs_and_grads(fn, inputs, grad_h, grad_cell):
    new_h, new_cell = fn(*inputs)
    grads = torch.autograd.grad((new_h, new_cell), inputs, (grad_h, grad_cell))
    return [new_h, new_cell, *grads]


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_backward_match_reference(device, shape):
    inputs = make_inputs(*shape, device)
    grad_h, grad_cell = torch.randn_like(inputs[3]), torch.randn_like(inputs[4])
    got = outputs_and_grads(lltm.lltm_cell, inputs, grad_h, grad_cell)
    want = outputs_and_grads(lltm_cell_reference, inputs, grad_h, grad_cell)
    names = ["new_h", "new_cell", "d_input", "d_weights", "d_bias", "d_old_h", "d_old_cell"]
    for name, g, w in zip(names, got, want):
        assert g.shape == w.shape, name
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12, msg=name)


def test_float32_matches_float64_reference(device):
    inputs = make_inputs(64, 48, 80, device)
    grad_h, grad_cell = torch.randn_like(inputs[3]), torch.randn_like(inputs[4])
    want = outputs_and_grads(lltm_cell_reference, inputs, grad_h, grad_cell)
    inputs32 = [t.detach().float().requires_grad_() for t in inputs]
    got = outputs_and_grads(lltm.lltm_cell, inputs32, grad_h.float(), grad_cell.float())
    for g, w in zip(got, want):
        assert g.dtype == torch.float32
        assert rel_err(g, w) < 1e-5


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 4, 5), (2, 3, 8)])
def test_gradcheck(device, shape):
    inputs = make_inputs(*shape, device)
    assert torch.autograd.gradcheck(lltm.lltm_cell, inputs)


def test_only_some_gradients(device):
    inputs = make_inputs(4, 6, 5, device, requires_grad=False)
    inputs[0].requires_grad_()  # input only, and only new_h used
    (d_input,) = torch.autograd.grad(lltm.lltm_cell(*inputs)[0].sum(), [inputs[0]])
    ref_in = inputs[0].detach().requires_grad_()
    (want,) = torch.autograd.grad(lltm_cell_reference(ref_in, *inputs[1:])[0].sum(), [ref_in])
    torch.testing.assert_close(d_input, want)


def test_no_grad_inputs(device):
    inputs = make_inputs(4, 6, 5, device, requires_grad=False)
    for g, w in zip(lltm.lltm_cell(*inputs), lltm_cell_reference(*inputs)):
        assert not g.requires_grad
        torch.testing.assert_close(g, w)


def test_non_contiguous_inputs(device):
    batch, features, state = 6, 5, 7
    inputs = make_inputs(batch, features, state, device, requires_grad=False)
    # Same values, other layouts: transposed storage and strided slices.
    strided = [
        inputs[0].t().contiguous().t(),
        inputs[1].t().contiguous().t(),
        torch.stack([inputs[2], inputs[2]], 1)[:, 0],
        inputs[3].t().contiguous().t(),
        torch.cat([inputs[4], inputs[4]], 1)[:, :state],
    ]
    assert not any(t.is_contiguous() for t in strided)
    strided = [t.requires_grad_() for t in strided]
    grad_h = torch.randn(batch, state, device=device, dtype=torch.float64).t().contiguous().t()
    grad_cell = torch.randn(batch, state, device=device, dtype=torch.float64)[:, :]
    got = outputs_and_grads(lltm.lltm_cell, strided, grad_h, grad_cell)
    want = outputs_and_grads(lltm_cell_reference, strided, grad_h, grad_cell)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_empty_batch(device):
    inputs = make_inputs(0, 4, 3, device)
    new_h, new_cell = lltm.lltm_cell(*inputs)
    assert new_h.shape == new_cell.shape == (0, 3)
    grads = torch.autograd.grad((new_h.sum() + new_cell.sum()), inputs)
    assert grads[1].shape == (9, 7) and grads[1].abs().sum() == 0


def check_half_type_against_float64(device, dtype, shape=(32, 24, 40)):
    # Tolerance rule: the kernel's error against a float64 reference is at most 2x the
    # error of the tutorial's plain-PyTorch LLTM run at the same precision, plus slack for
    # outputs whose own rounding dominates: 1e-3, or half a unit in the last place of the dtype
    # where that is larger (bfloat16: 3.9e-3; at B = F = S = 1 each result is one rounding).
    # The reference is float64 on the same rounded inputs, so each error is the arithmetic's:
    # against the unrounded inputs the input rounding counts too, and plain PyTorch's own
    # roundings can cancel it by chance (bfloat16 (1, 3, 9), 7 seeds in 5000: its grad_x error
    # 3e-4 to 1.2e-3 there while the kernel's was 5.6-7.8e-3; against the rounded inputs the
    # kernel's 1.7-3.4e-3, plain PyTorch's 4.5-6.1e-3). Seeded: the draws of a fixed RNG state,
    # not of whatever the tests before left (one bfloat16 draw in 5000 at (1, 3, 9) still
    # exceeds the bound by 0.4%: the kernel's grad_x 0.9 units in the last place off, plain
    # PyTorch's 0.1 by chance; seeds 0-1499 pass at every HALF_SHAPES shape on the CPU).
    torch.manual_seed(0)
    slack = max(1e-3, torch.finfo(dtype).eps / 2)
    inputs = make_inputs(*shape, device)
    grad_h, grad_cell = torch.randn_like(inputs[3]), torch.randn_like(inputs[4])
    low = [t.detach().to(dtype).requires_grad_() for t in inputs]
    gh, gc = grad_h.to(dtype), grad_cell.to(dtype)
    exact = outputs_and_grads(lltm_cell_reference,
                              [t.detach().double().requires_grad_() for t in low],
                              gh.double(), gc.double())
    got = outputs_and_grads(lltm.lltm_cell, low, gh, gc)
    eager = outputs_and_grads(lltm_cell_reference, low, gh, gc)
    for g, e, x in zip(got, eager, exact):
        assert g.dtype == dtype
        assert rel_err(g, x) <= 2 * rel_err(e, x) + slack


# (B, F, S) with a tail of every kind for the CPU's half-type GEMMs (lltm_cpu_gemm_avx2.cpp:
# blocks of 4 weight rows and 3 batch rows, 16-column tiles of d_X, 8-lane vectors; below 13
# batch rows its dot-product forward, from 13 lltm_cpu_gemm_fwd_avx2.cpp's: 16-row batch
# panels, 6-row tiles of W, blocks of whole rows of W, blocks of at most 256 k): B odd and 1,
# K = S + F not a multiple of 8, F = 0, S + F past one tile; B = 13 and 129 (a panel's tail of
# 13 rows and of 1), 3S not a multiple of 6 (S = 7, 33, 129), K past one block of k (307, 633),
# 3S past one block of W's rows (387 > 96; 99 > 60, the block at K = 633), 3S = 21 below one
# block (the batch split among tasks instead). Not B = F = S = 1: there each result is one
# number and the norm-wise rule compares single roundings (both orders of the same roundings
# land 1 ulp apart).
HALF_SHAPES = [(32, 24, 40), (1, 3, 9), (7, 5, 33), (3, 0, 17), (5, 19, 9), (2, 3, 130),
               (13, 7, 129), (33, 1, 33), (129, 33, 7), (17, 300, 7), (14, 600, 33)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", HALF_SHAPES)
def test_half_types_against_float64(device, dtype, shape):
    check_half_type_against_float64(device, dtype, shape)


@pytest.mark.parametrize("path", ["fused", "library"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cpu_half_type_gemm_paths(monkeypatch, path, dtype):
    # Both of the CPU's GEMM paths for the half types, forced (auto takes the fused ones), at a
    # size of each forward kernel (the dot products below 13 batch rows, outer products above).
    monkeypatch.setenv("LLTM_CPU_PATH", path)
    check_half_type_against_float64("cpu", dtype, (7, 5, 33))
    check_half_type_against_float64("cpu", dtype, (33, 7, 129))


def test_cpu_path_env_must_be_known(monkeypatch):
    monkeypatch.setenv("LLTM_CPU_PATH", "fast")
    args = [t.detach().to(torch.bfloat16) for t in make_inputs(2, 3, 4, "cpu")]
    with pytest.raises(ValueError, match="LLTM_CPU_PATH must be"):
        lltm.lltm_cell(*args)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_type_backward_masks(device, dtype):
    # Each gradient of lltm_backward in a half type is the same under every output mask (the
    # masks only skip work): bitwise equal to the all-gradients call's.
    inputs = [t.detach().to(dtype) for t in make_inputs(7, 5, 33, device)]
    grad_h, grad_cell = torch.randn_like(inputs[3]), torch.randn_like(inputs[4])
    new_h, new_cell, X, gates = torch.ops.lltm.lltm_forward(*inputs)
    full = torch.ops.lltm.lltm_backward(grad_h, grad_cell, new_cell, gates, X, inputs[1], [True] * 4)
    for bits in range(16):
        mask = [bool(bits & (1 << i)) for i in range(4)]
        got = torch.ops.lltm.lltm_backward(grad_h, grad_cell, new_cell, gates, X, inputs[1], mask)
        assert torch.equal(got[4], full[4]), f"d_old_cell, mask {mask}"
        for i, need in enumerate(mask):
            if need:
                assert got[i].is_contiguous() and torch.equal(got[i], full[i]), f"{i}, mask {mask}"
            else:
                assert got[i].shape == (0,), f"{i}, mask {mask}"


def test_parameter_gradients_only(device):
    # The usual training step: only the parameters require grad (the op's backward is then
    # asked for neither d_input nor d_old_h).
    x, W, b, h, c = make_inputs(5, 4, 7, device, requires_grad=False)
    W.requires_grad_()
    b.requires_grad_()
    grad_h, grad_cell = torch.randn_like(h), torch.randn_like(c)
    got = torch.autograd.grad(lltm.lltm_cell(x, W, b, h, c), [W, b], (grad_h, grad_cell))
    want = torch.autograd.grad(lltm_cell_reference(x, W, b, h, c), [W, b], (grad_h, grad_cell))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def check_backward_output_masks(device, batch, features=5, state=35):
    """lltm_backward under each of the 16 output masks: the wanted gradients match the
    reference, contiguous; the others come back empty; d_old_cell always."""
    inputs = make_inputs(batch, features, state, device)
    grad_h, grad_cell = torch.randn_like(inputs[3]), torch.randn_like(inputs[4])
    *want, want_cell = outputs_and_grads(lltm_cell_reference, inputs, grad_h, grad_cell)[2:]
    new_h, new_cell, X, gates = torch.ops.lltm.lltm_forward(*[t.detach() for t in inputs])
    names = ["d_input", "d_weights", "d_bias", "d_old_h"]
    for bits in range(16):
        mask = [bool(bits & (1 << i)) for i in range(4)]
        *got, got_cell = torch.ops.lltm.lltm_backward(
            grad_h, grad_cell, new_cell, gates, X, inputs[1].detach(), mask)
        torch.testing.assert_close(got_cell, want_cell, msg=f"d_old_cell, mask {mask}")
        for name, need, g, w in zip(names, mask, got, want):
            if need:
                assert g.is_contiguous(), f"{name}, mask {mask}"
                torch.testing.assert_close(g, w, msg=f"{name}, mask {mask}")
            else:
                assert g.shape == (0,), f"{name}, mask {mask}"


@pytest.mark.parametrize("features", [5, 0])  # F = 0: d_input is (B, 0)
def test_backward_output_masks(device, features):
    check_backward_output_masks(device, 20, features)


def test_state_gradients_are_contiguous(device):
    # d_old_h and d_input come from their own GEMMs, not as views of one [d_old_h, d_input]
    # buffer: in a recurrence d_old_h is the next step back's grad_h, which would otherwise
    # be copied to make it contiguous.
    inputs = make_inputs(6, 5, 7, device)
    grad_h, grad_cell = torch.randn_like(inputs[3]), torch.randn_like(inputs[4])
    grads = outputs_and_grads(lltm.lltm_cell, inputs, grad_h, grad_cell)[2:]
    assert all(g.is_contiguous() for g in grads)


def test_create_graph_then_double_backward_raises(device):
    # One backward with create_graph=True gives the usual gradients; differentiating those
    # again is not implemented and must say so (not return zeros).
    inputs = make_inputs(3, 4, 5, device)
    grad_h, grad_cell = torch.randn_like(inputs[3]), torch.randn_like(inputs[4])
    want = torch.autograd.grad(lltm_cell_reference(*inputs), inputs, (grad_h, grad_cell))
    got = torch.autograd.grad(lltm.lltm_cell(*inputs), inputs, (grad_h, grad_cell),
                              create_graph=True)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    with pytest.raises(RuntimeError, match="lltm_cell is differentiable once"):
        torch.autograd.grad(sum(g.sum() for g in got), inputs)


def test_module_matches_reference(device):
    torch.manual_seed(0)
    cell = lltm.LLTM(10, 20).to(device, torch.float64)
    assert cell.weights.shape == (60, 30) and cell.bias.shape == (60,)
    bound = 1 / math.sqrt(20)
    assert all(p.abs().max() <= bound for p in cell.parameters())
    x = torch.randn(4, 10, device=device, dtype=torch.float64)
    h, c = torch.randn(2, 4, 20, device=device, dtype=torch.float64)
    got = cell(x, (h, c))
    want = lltm_cell_reference(x, cell.weights, cell.bias, h, c)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_compile_fullgraph(device):
    torch.manual_seed(0)
    cell = lltm.LLTM(12, 16).to(device)
    x = torch.randn(8, 12, device=device)
    h, c = torch.randn(2, 8, 16, device=device)

    def step(x, h, c):
        new_h, new_cell = cell(x, (h, c))
        return new_h * 2 + new_cell

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)
    x.requires_grad_()
    want = step(x, h, c)
    got = compiled(x, h, c)
    torch.testing.assert_close(got, want)
    grad = torch.randn_like(want)
    want_grads = torch.autograd.grad(want, [x, cell.weights, cell.bias], grad)
    got_grads = torch.autograd.grad(got, [x, cell.weights, cell.bias], grad)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w)


def test_eager_fast_path_matches_op(device):
    # Eager lltm_cell runs the op's autograd formula through a plain autograd.Function (host
    # time); the op itself (what compile, export and fake tensors take) through
    # register_autograd. One formula, so the results are bitwise equal.
    torch.manual_seed(0)
    inputs = make_inputs(4, 6, 5, device, dtype=torch.float32)
    grad_h, grad_cell = torch.randn_like(inputs[3]), torch.randn_like(inputs[4])
    fast = lltm.lltm_cell(*inputs)
    op = torch.ops.lltm.lltm_forward(*inputs)[:2]
    assert "Generated" not in type(fast[0].grad_fn).__name__
    assert "Generated" in type(op[0].grad_fn).__name__
    for f, o in zip(fast, op):
        assert torch.equal(f, o)
    for wrt in ([0, 1, 2, 3, 4], [0, 3], [1, 2, 4]):
        args = [inputs[i] for i in wrt]
        for outs, grads in (((0, 1), (grad_h, grad_cell)), ((0,), (grad_h,)), ((1,), (grad_cell,))):
            got = torch.autograd.grad([fast[i] for i in outs], args, grads, retain_graph=True)
            want = torch.autograd.grad([op[i] for i in outs], args, grads, retain_graph=True)
            for g, w in zip(got, want):
                assert torch.equal(g, w)
    with torch.no_grad():
        fast = lltm.lltm_cell(*inputs)
    assert not fast[0].requires_grad and all(torch.equal(f, o) for f, o in zip(fast, op))
    compiled = torch.compile(lltm.lltm_cell, fullgraph=True)
    got = torch.autograd.grad(compiled(*inputs), inputs, (grad_h, grad_cell))
    want = torch.autograd.grad(op, inputs, (grad_h, grad_cell))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_opcheck(device):
    inputs = make_inputs(5, 4, 6, device)
    torch.library.opcheck(torch.ops.lltm.lltm_forward.default, inputs)
    new_h, new_cell, X, gates = torch.ops.lltm.lltm_forward(*[t.detach() for t in inputs])
    grads = [torch.randn_like(new_h), torch.randn_like(new_cell)]
    for mask in ([True] * 4, [False, True, False, False], [True, False, True, True]):
        torch.library.opcheck(
            torch.ops.lltm.lltm_backward.default, (*grads, new_cell, gates, X, inputs[1].detach(), mask)
        )


def bad(device, **overrides):
    x, W, b, h, c = make_inputs(4, 3, 5, device, requires_grad=False)
    args = dict(input=x, weights=W, bias=b, old_h=h, old_cell=c)
    args.update(overrides)
    return args


@pytest.mark.parametrize(
    "make, exc, pattern",
    [
        (lambda d: bad(d, input=torch.randn(4, 3, 1, device=d, dtype=torch.float64)), ValueError, "input must be a 2-D tensor"),
        (lambda d: bad(d, bias=torch.randn(1, 15, device=d, dtype=torch.float64)), ValueError, "bias must be a 1-D tensor"),
        (lambda d: bad(d, old_h=torch.randn(3, 5, device=d, dtype=torch.float64)), ValueError, r"old_h.shape\[0\] must be 4"),
        (lambda d: bad(d, old_cell=torch.randn(4, 6, device=d, dtype=torch.float64)), ValueError, r"old_cell.shape\[1\] must be 5"),
        (lambda d: bad(d, weights=torch.randn(15, 9, device=d, dtype=torch.float64)), ValueError, r"weights.shape\[1\] must be 8"),
        (lambda d: bad(d, weights=torch.randn(12, 8, device=d, dtype=torch.float64)), ValueError, r"weights.shape\[0\] must be 15"),
        (lambda d: bad(d, bias=torch.randn(14, device=d, dtype=torch.float64)), ValueError, r"bias.shape\[0\] must be 15"),
        (lambda d: bad(d, bias=torch.randn(15, device=d, dtype=torch.float32)), ValueError, "bias has dtype Float but input has dtype Double"),
        (lambda d: {k: v.long() for k, v in bad(d).items()}, ValueError, "input must be a floating-point tensor"),
    ],
)
def test_bad_inputs(device, make, exc, pattern):
    with pytest.raises(exc, match=pattern):
        lltm.lltm_cell(**make(device))


@pytest.mark.skipif("cuda" not in DEVICES, reason="needs a CUDA GPU")
def test_mixed_devices_raise():
    args = bad("cuda", old_cell=torch.randn(4, 5, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="old_cell is on cpu but input is on cuda"):
        lltm.lltm_cell(**args)
    args = bad("cpu", weights=torch.randn(15, 8, device="cuda", dtype=torch.float64))
    with pytest.raises(RuntimeError, match="weights is on cuda:0 but input is on cpu"):
        lltm.lltm_cell(**args)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_second_gpu():
    inputs = make_inputs(5, 4, 6, "cuda:1")
    grads = torch.randn(2, 5, 6, device="cuda:1", dtype=torch.float64)
    got = outputs_and_grads(lltm.lltm_cell, inputs, grads[0], grads[1])
    want = outputs_and_grads(lltm_cell_reference, inputs, grads[0], grads[1])
    for g, w in zip(got, want):
        assert g.device == torch.device("cuda:1")
        torch.testing.assert_close(g, w)
