import math
import re

import pytest
import torch
from conftest import DEVICES, needs_gxx, rel_err, run_emulator

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
    slack = max(1e-3, torch.finfo(dtype).eps / 2)
    inputs = make_inputs(*shape, device)
    grad_h, grad_cell = torch.randn_like(inputs[3]), torch.randn_like(inputs[4])
    exact = outputs_and_grads(lltm_cell_reference, inputs, grad_h, grad_cell)
    low = [t.detach().to(dtype).requires_grad_() for t in inputs]
    gh, gc = grad_h.to(dtype), grad_cell.to(dtype)
    got = outputs_and_grads(lltm.lltm_cell, low, gh, gc)
    eager = outputs_and_grads(lltm_cell_reference, low, gh, gc)
    for g, e, x in zip(got, eager, exact):
        assert g.dtype == dtype
        assert rel_err(g, x) <= 2 * rel_err(e, x) + slack


# (B, F, S) with a tail of every kind for the CPU's half-type GEMMs (lltm_cpu_gemm_avx2.cpp:
# blocks of 4 weight rows and 2 batch rows, 16-column tiles of d_X, 8-lane vectors): B odd and
# 1, K = S + F not a multiple of 8, F = 0, S + F past one tile. Not B = F = S = 1: there each
# result is one number and the norm-wise rule compares single roundings (both orders of the
# same roundings land 1 ulp apart).
HALF_SHAPES = [(32, 24, 40), (1, 3, 9), (7, 5, 33), (3, 0, 17), (5, 19, 9), (2, 3, 130)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", HALF_SHAPES)
def test_half_types_against_float64(device, dtype, shape):
    check_half_type_against_float64(device, dtype, shape)


@pytest.mark.parametrize("path", ["fused", "library"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cpu_half_type_gemm_paths(monkeypatch, path, dtype):
    # Both of the CPU's GEMM paths for the half types, forced (auto takes the library's for
    # the forward only past a size none of the shapes above reach).
    monkeypatch.setenv("LLTM_CPU_PATH", path)
    check_half_type_against_float64("cpu", dtype, (7, 5, 33))


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


# ---------------------------------------------------------------------------------------
# CUDA: the two paths (csrc/lltm/lltm_cuda.cu picks one by problem size). Small and medium
# problems run one kernel for the forward and two for the backward (lltm_cuda_small.cu);
# larger ones cuBLAS plus pointwise kernels. LLTM_CUDA_PATH=small|cublas forces one.

needs_cuda = pytest.mark.skipif("cuda" not in DEVICES, reason="needs a CUDA GPU")
CUDA_PATHS = ["small", "cublas"]
# Odd sizes on every side of the small path's tiles (64 or 32 batch rows, 32 or 64 columns).
PATH_SHAPES = [(1, 1, 1), (3, 7, 13), (300, 1, 33), (1, 7, 129), (3, 1, 129), (300, 7, 1),
               (300, 7, 129), (65, 0, 31), (129, 63, 64), (17, 40, 35), (33, 3, 40)]


def cuda_kernel_names(fn):
    """Names of the CUDA kernels that one call of fn launches (after one warm-up call)."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def training_step(batch, features, state, dtype=torch.float32):
    inputs = make_inputs(batch, features, state, "cuda", dtype)
    grads = torch.randn(2, batch, state, device="cuda", dtype=dtype)
    return lambda: outputs_and_grads(lltm.lltm_cell, inputs, grads[0], grads[1])


@needs_cuda
@pytest.mark.parametrize("path", CUDA_PATHS)
@pytest.mark.parametrize("shape", PATH_SHAPES)
def test_cuda_paths_match_reference(monkeypatch, path, shape):
    monkeypatch.setenv("LLTM_CUDA_PATH", path)
    inputs = make_inputs(*shape, "cuda")
    grad_h, grad_cell = torch.randn_like(inputs[3]), torch.randn_like(inputs[4])
    want = outputs_and_grads(lltm_cell_reference, inputs, grad_h, grad_cell)
    names = ["new_h", "new_cell", "d_input", "d_weights", "d_bias", "d_old_h", "d_old_cell"]
    # float64 against the float64 reference, tightly.
    got = outputs_and_grads(lltm.lltm_cell, inputs, grad_h, grad_cell)
    for name, g, w in zip(names, got, want):
        assert g.shape == w.shape, name
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12, msg=name)
    # float32 against the float64 reference.
    inputs32 = [t.detach().float().requires_grad_() for t in inputs]
    got32 = outputs_and_grads(lltm.lltm_cell, inputs32, grad_h.float(), grad_cell.float())
    for name, g, w in zip(names, got32, want):
        assert g.dtype == torch.float32, name
        assert rel_err(g, w) < 1e-5, name
    # X and gate_weights, the op's other two outputs.
    _, _, X, gates = torch.ops.lltm.lltm_forward(*[t.detach() for t in inputs])
    x, W, b, h, _ = [t.detach() for t in inputs]
    torch.testing.assert_close(X, torch.cat([h, x], 1), rtol=0, atol=0)
    torch.testing.assert_close(gates, torch.nn.functional.linear(X, W, b), rtol=1e-10, atol=1e-12)


@needs_cuda
@pytest.mark.parametrize("path", CUDA_PATHS)
def test_cuda_paths_medium_size_float32(monkeypatch, path):
    # The benchmark's medium size, (batch, in, state) = (256, 256, 1024), on both paths.
    monkeypatch.setenv("LLTM_CUDA_PATH", path)
    inputs = make_inputs(256, 256, 1024, "cuda")
    grad_h, grad_cell = torch.randn_like(inputs[3]), torch.randn_like(inputs[4])
    want = outputs_and_grads(lltm_cell_reference, inputs, grad_h, grad_cell)
    inputs32 = [t.detach().float().requires_grad_() for t in inputs]
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    got = outputs_and_grads(lltm.lltm_cell, inputs32, grad_h.float(), grad_cell.float())
    for g, w in zip(got, want):
        assert rel_err(g, w) < 1e-5


@needs_cuda
@pytest.mark.parametrize("path", CUDA_PATHS)
@pytest.mark.parametrize("batch", [70, 20])  # the small path's d_X tiles of 32 and 64 rows
def test_cuda_backward_output_masks(monkeypatch, path, batch):
    monkeypatch.setenv("LLTM_CUDA_PATH", path)
    check_backward_output_masks("cuda", batch)


@needs_cuda
@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 7, 33)])
def test_gradcheck_small_path(monkeypatch, shape):
    monkeypatch.setenv("LLTM_CUDA_PATH", "small")
    inputs = make_inputs(*shape, "cuda")
    assert torch.autograd.gradcheck(lltm.lltm_cell, inputs)


@needs_cuda
@pytest.mark.parametrize("path", CUDA_PATHS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_paths_half_types(monkeypatch, path, dtype):
    monkeypatch.setenv("LLTM_CUDA_PATH", path)
    check_half_type_against_float64("cuda", dtype)


@needs_cuda
def test_small_path_is_deterministic(monkeypatch):
    monkeypatch.setenv("LLTM_CUDA_PATH", "small")
    step = training_step(300, 7, 129)
    first, second = step(), step()
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def small_path_dx_rows_per_thread(batch, col_tiles):
    """The rows per thread (TM: 4 or 2, 64 or 32 batch rows per block) that rows_per_thread
    in csrc/lltm/lltm_cuda_small.cu picks for the backward's d_X role."""
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    large, small = -(-batch // 64), -(-batch // 32)
    return 2 if large * col_tiles < sms and small > large else 4


@needs_cuda
@pytest.mark.parametrize("wide", [False, True])
def test_small_path_tile_variants(monkeypatch, wide):
    # The backward's d_X role comes with 64- and 32-row tiles; the host takes the 32-row ones
    # when the 64-row ones give fewer blocks than SMs (the forward always runs 64-row tiles).
    # Batch 200 leaves partial tiles of either size; a wide state gives enough column tiles
    # for the 64-row ones.
    monkeypatch.setenv("LLTM_CUDA_PATH", "small")
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    batch, features = 200, 5
    state = 16 * sms + 1 if wide else 35
    want_tm = 4 if wide else 2
    assert small_path_dx_rows_per_thread(batch, -(-(state + features) // 64)) == want_tm
    inputs = make_inputs(batch, features, state, "cuda")
    grad_h, grad_cell = torch.randn_like(inputs[3]), torch.randn_like(inputs[4])
    step = lambda: outputs_and_grads(lltm.lltm_cell, inputs, grad_h, grad_cell)  # noqa: E731
    names = [n for n in cuda_kernel_names(step) if "small_" in n]
    assert len(names) == 2, names
    assert any("small_forward_kernel<double, 4, " in n for n in names), names
    assert any(f"small_backward_kernel<double, {want_tm}, " in n for n in names), names
    want = outputs_and_grads(lltm_cell_reference, inputs, grad_h, grad_cell)
    names = ["new_h", "new_cell", "d_input", "d_weights", "d_bias", "d_old_h", "d_old_cell"]
    for name, g, w in zip(names, step(), want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12, msg=name)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_small_path_tensor_cores(monkeypatch, dtype):
    # On sm_80 and newer the small path's GEMMs run on tensor cores (3xTF32 for float32) for
    # every type but float64 (the last template argument of both kernels); their values
    # against float64 are the other tests' job (test_cuda_paths_*).
    monkeypatch.setenv("LLTM_CUDA_PATH", "small")
    names = cuda_kernel_names(training_step(70, 20, 50, dtype))
    found = [m.group(2).split(", ") for n in names
             for m in [re.search(r"small_(forward|backward)_kernel<([^<>]*)>", n)] if m]
    want_tc = dtype != torch.float64 and torch.cuda.get_device_capability() >= (8, 0)
    assert len(found) == 2 and all(args[-1] == str(want_tc).lower() for args in found), names


@needs_cuda
def test_cuda_path_choice(monkeypatch):
    def lltm_kernels(shape, dtype=torch.float32):
        return [n for n in cuda_kernel_names(training_step(*shape, dtype)) if "lltm" in n]

    monkeypatch.delenv("LLTM_CUDA_PATH", raising=False)
    # The tutorial's size: one launch for the forward, the pointwise kernel and one GEMM
    # kernel for the backward, nothing else.
    names = cuda_kernel_names(training_step(16, 32, 128))
    assert len(names) == 3, names
    for kernel in ["small_forward_kernel", "::backward_kernel<", "small_backward_kernel"]:
        assert any(kernel in n for n in names), (kernel, names)
    # Past the size bounds: the cuBLAS path.
    for shape in [(4097, 1, 2), (1024, 1024, 1024)]:
        assert not any("small_" in n for n in lltm_kernels(shape)), shape
    # (512, 512, 1024), 2.4e9 multiply-adds a GEMM: inside the tensor-core tiles' bound
    # (3.4e9), past the SIMT tiles' (2^31).
    tc = torch.cuda.get_device_capability() >= (8, 0)
    for dtype, small in [(torch.float32, tc), (torch.float64, False)]:
        names = lltm_kernels((512, 512, 1024), dtype)
        assert any("small_" in n for n in names) == small, (dtype, names)
    # Forced either way.
    monkeypatch.setenv("LLTM_CUDA_PATH", "cublas")
    assert not any("small_" in n for n in lltm_kernels((16, 32, 128)))
    monkeypatch.setenv("LLTM_CUDA_PATH", "small")
    assert len(lltm_kernels((4097, 1, 2))) == 3


@needs_cuda
def test_cuda_path_env_must_be_known(monkeypatch):
    monkeypatch.setenv("LLTM_CUDA_PATH", "fast")
    with pytest.raises(ValueError, match="LLTM_CUDA_PATH must be 'small', 'cublas' or 'auto'"):
        lltm.lltm_cell(*make_inputs(2, 3, 4, "cuda", requires_grad=False))


# ---- The small path's CUDA kernels, checked without a GPU ---------------------------------

EMULATOR = r"""
// Runs the kernels of csrc/lltm/lltm_cuda_small.cuh on the CPU (tests/cuda_emulation.h) with
// the grids that lltm_cuda_small.cu launches, and checks every output against float64 and
// the guard elements after each output (nothing written past the end).
#include <cstdio>

#include "cuda_emulation.h"
#include "lltm/lltm_cuda_small.cuh"

using namespace lltm::small;

std::mt19937 rng(1234);
int failures = 0;

template <typename S>
std::vector<S> random_vector(size_t n, double scale) {
  std::normal_distribution<double> normal;
  std::vector<S> v(n);
  for (auto& x : v) x = static_cast<S>(normal(rng) * scale);
  return v;
}

const double kGuard = 777.0;  // in S: 777 rounded (to 776 in bfloat16)

// The first n elements as double; false if an element after them lost its guard value.
template <typename S>
bool take(const std::vector<S>& v, size_t n, std::vector<double>& out) {
  out.resize(n);
  for (size_t i = 0; i < n; ++i) out[i] = as_double(v[i]);
  for (size_t i = n; i < v.size(); ++i) {
    if (as_double(v[i]) != as_double(static_cast<S>(kGuard))) return false;
  }
  return true;
}

// extra: TM (forward) or the output mask (backward); ch: the chunk depth; tc: tensor-core tiles.
template <typename S>
void report(const char* what, int B, int F, int S_, int extra, int ch, bool tc, double err,
            bool guards, double tol) {
  const bool ok = err < tol && guards;
  failures += !ok;
  std::printf("%s %s %zu-byte B=%d F=%d S=%d (%d, CH=%d%s): %.1e%s\n", ok ? "ok  " : "FAIL",
              what, sizeof(S), B, F, S_, extra, ch, tc ? ", tensor cores" : "", err,
              guards ? "" : " (wrote past the end)");
}

template <typename S, int TM, int CH = kChunk, bool TC = false>
void check_forward(int B, int F, int S_, double tol) {
  using acc_t = fused_ops::opmath_t<S>;
  const int K = S_ + F, N = 3 * S_;
  const auto input = random_vector<S>(size_t(B) * F, 1.0), old_h = random_vector<S>(size_t(B) * S_, 1.0),
             old_cell = random_vector<S>(size_t(B) * S_, 1.0), bias = random_vector<S>(N, 0.3),
             weights = random_vector<S>(size_t(N) * K, 1.0 / std::sqrt(double(K)));
  const S g = static_cast<S>(kGuard);
  std::vector<S> new_h(size_t(B) * S_ + 4, g), new_cell(size_t(B) * S_ + 4, g),
      X(size_t(B) * K + 4, g), gates(size_t(B) * N + 4, g);
  // The gate activations (the tutorial's forward asks for them): every other call.
  const bool with_acts = (B + S_) % 2 == 0;
  std::vector<S> acts[3];
  lltm::ActivationPtrs<S> act_ptrs;
  if (with_acts) {
    for (auto& a : acts) a.assign(size_t(B) * S_ + 4, g);
    act_ptrs = {acts[0].data(), acts[1].data(), acts[2].data()};
  }
  const int blocks = ceil_div(B, fwd_rows<TM>) * ceil_div(S_, kFwdCols);
  launch(blocks, kThreads, 0, [&] {
    small_forward_kernel<S, TM, CH, TC>(input.data(), weights.data(), bias.data(), old_h.data(),
                                old_cell.data(), new_h.data(), new_cell.data(), X.data(),
                                gates.data(), act_ptrs, B, F, S_);
  });
  std::vector<double> x_ref(size_t(B) * K), z_ref(size_t(B) * N), h_ref(size_t(B) * S_),
      c_ref(size_t(B) * S_);
  for (int b = 0; b < B; ++b) {
    for (int k = 0; k < K; ++k) {
      x_ref[size_t(b) * K + k] = as_double(k < S_ ? old_h[size_t(b) * S_ + k] : input[size_t(b) * F + k - S_]);
    }
    for (int n = 0; n < N; ++n) {
      double z = as_double(bias[n]);
      for (int k = 0; k < K; ++k) z += x_ref[size_t(b) * K + k] * as_double(weights[size_t(n) * K + k]);
      z_ref[size_t(b) * N + n] = z;
    }
    for (int j = 0; j < S_; ++j) {
      const double* z = &z_ref[size_t(b) * N];
      lltm::cell_forward<double>(z[j], z[S_ + j], z[2 * S_ + j], as_double(old_cell[size_t(b) * S_ + j]),
                                 h_ref[size_t(b) * S_ + j], c_ref[size_t(b) * S_ + j]);
    }
  }
  std::vector<double> got;
  bool guards = take(new_h, h_ref.size(), got);
  report<S>("forward new_h", B, F, S_, TM, CH, TC, rel_err(got, h_ref), guards, tol);
  guards = take(new_cell, c_ref.size(), got);
  report<S>("forward new_cell", B, F, S_, TM, CH, TC, rel_err(got, c_ref), guards, tol);
  guards = take(gates, z_ref.size(), got);
  report<S>("forward gates", B, F, S_, TM, CH, TC, rel_err(got, z_ref), guards, tol);
  guards = take(X, x_ref.size(), got);
  report<S>("forward X", B, F, S_, TM, CH, TC, got == x_ref ? 0.0 : 1.0, guards, tol);
  if (with_acts) {
    std::vector<double> act_ref[3];
    for (auto& a : act_ref) a.resize(size_t(B) * S_);
    for (int b = 0; b < B; ++b) {
      for (int j = 0; j < S_; ++j) {
        const double* z = &z_ref[size_t(b) * N];
        act_ref[0][size_t(b) * S_ + j] = lltm::sigmoid(z[j]);
        act_ref[1][size_t(b) * S_ + j] = lltm::sigmoid(z[S_ + j]);
        act_ref[2][size_t(b) * S_ + j] = lltm::elu(z[2 * S_ + j]);
      }
    }
    const char* names[3] = {"forward input_gate", "forward output_gate", "forward candidate_cell"};
    for (int a = 0; a < 3; ++a) {
      guards = take(acts[a], act_ref[a].size(), got);
      report<S>(names[a], B, F, S_, TM, CH, TC, rel_err(got, act_ref[a]), guards, tol);
    }
  }
}

// mask: bits 0 input, 1 weights, 2 bias, 3 old_h (lltm_backward's output_mask).
template <typename S, int TM, int CH = kChunk, bool TC = false>
void check_backward(int B, int F, int S_, int mask, double tol) {
  const int K = S_ + F, N = 3 * S_;
  const bool want_input = mask & 1, want_dw = mask & 2, want_bias = mask & 4, want_old_h = mask & 8;
  const auto d_gates = random_vector<S>(size_t(B) * N, 1.0), X = random_vector<S>(size_t(B) * K, 1.0),
             weights = random_vector<S>(size_t(N) * K, 1.0 / std::sqrt(double(K)));
  const S g = static_cast<S>(kGuard);
  std::vector<S> d_input(size_t(B) * F + 4, g), d_old_h(size_t(B) * S_ + 4, g),
      d_weights(size_t(N) * K + 4, g), d_bias(N + 4, g);
  // The grid of small_backward_gemms_cuda.
  const int dx_k0 = want_old_h ? 0 : S_, dx_k1 = want_input ? K : S_;
  const int dx_col_tiles = ceil_div(dx_k1 - dx_k0, kDxCols);
  const int dx_blocks = ceil_div(B, kGroups * TM) * dx_col_tiles;
  const int p_col_tiles = want_dw ? ceil_div(K, kPK) : 1;
  const int p_blocks = want_dw || want_bias ? ceil_div(N, kPN) * p_col_tiles : 0;
  BackwardArgs<S> args;
  args.d_gates = d_gates.data();
  args.X = X.data();
  args.weights = weights.data();
  args.d_old_h = want_old_h ? d_old_h.data() : nullptr;
  args.d_input = want_input ? d_input.data() : nullptr;
  args.d_weights = want_dw ? d_weights.data() : nullptr;
  args.d_bias = want_bias ? d_bias.data() : nullptr;
  args.B = B;
  args.N = N;
  args.K = K;
  args.S = S_;
  args.dx_k0 = dx_k0;
  args.dx_k1 = dx_k1;
  args.dx_blocks = dx_blocks;
  args.dx_col_tiles = dx_col_tiles;
  args.p_col_tiles = p_col_tiles;
  if (dx_blocks + p_blocks > 0) {
    launch(dx_blocks + p_blocks, kThreads, 0, [&] { small_backward_kernel<S, TM, CH, TC>(args); });
  }
  std::vector<double> dx_ref(size_t(B) * K, 0.0), dw_ref(size_t(N) * K, 0.0), db_ref(N, 0.0);
  for (int b = 0; b < B; ++b) {
    for (int n = 0; n < N; ++n) {
      const double z = as_double(d_gates[size_t(b) * N + n]);
      db_ref[n] += z;
      for (int k = 0; k < K; ++k) {
        dx_ref[size_t(b) * K + k] += z * as_double(weights[size_t(n) * K + k]);
        dw_ref[size_t(n) * K + k] += z * as_double(X[size_t(b) * K + k]);
      }
    }
  }
  std::vector<double> want_h, want_in, got;
  for (int b = 0; b < B; ++b) {
    for (int k = 0; k < K; ++k) (k < S_ ? want_h : want_in).push_back(dx_ref[size_t(b) * K + k]);
  }
  // An output that is not wanted must stay untouched (all guard values).
  auto untouched = [&](const std::vector<S>& v) {
    std::vector<double> none;
    return take(v, 0, none);
  };
  bool guards;
  guards = want_input ? take(d_input, want_in.size(), got) : untouched(d_input);
  report<S>("backward d_input", B, F, S_, mask, CH, TC, want_input ? rel_err(got, want_in) : 0.0, guards, tol);
  guards = want_old_h ? take(d_old_h, want_h.size(), got) : untouched(d_old_h);
  report<S>("backward d_old_h", B, F, S_, mask, CH, TC, want_old_h ? rel_err(got, want_h) : 0.0, guards, tol);
  guards = want_dw ? take(d_weights, dw_ref.size(), got) : untouched(d_weights);
  report<S>("backward d_weights", B, F, S_, mask, CH, TC, want_dw ? rel_err(got, dw_ref) : 0.0, guards, tol);
  guards = want_bias ? take(d_bias, db_ref.size(), got) : untouched(d_bias);
  report<S>("backward d_bias", B, F, S_, mask, CH, TC, want_bias ? rel_err(got, db_ref) : 0.0, guards, tol);
}

int main() {
  // One tile; every tile edge crossed (B > 64 rows, K > 64 columns, 3S > 96 gate columns,
  // S > 32 state columns); F = 0; the d_X role's column range starting inside a tile (S odd).
  const int shapes[][3] = {{1, 1, 1}, {5, 7, 9}, {70, 20, 50}, {3, 0, 33}, {66, 65, 3}};
  for (const auto& s : shapes) {
    check_forward<float, kRowsPerThreadLarge>(s[0], s[1], s[2], 2e-6);
    for (int mask = 0; mask < 16; ++mask) {
      check_backward<float, kRowsPerThreadLarge>(s[0], s[1], s[2], mask, 2e-6);
      check_backward<float, kRowsPerThreadSmall>(s[0], s[1], s[2], mask, 2e-6);
    }
  }
  check_forward<float, kRowsPerThreadSmall>(40, 3, 21, 2e-6);
  // 32-deep chunks (a tile variant; the launcher uses kChunk).
  for (const auto& s : shapes) {
    check_forward<float, kRowsPerThreadLarge, 32>(s[0], s[1], s[2], 2e-6);
    check_backward<float, kRowsPerThreadLarge, 32>(s[0], s[1], s[2], 15, 2e-6);
    check_backward<float, kRowsPerThreadSmall, 32>(s[0], s[1], s[2], 9, 2e-6);
  }
  check_forward<double, kRowsPerThreadLarge>(70, 20, 50, 1e-12);
  check_backward<double, kRowsPerThreadLarge>(70, 20, 50, 15, 1e-12);
  check_forward<c10::Half, kRowsPerThreadLarge>(9, 7, 40, 2e-3);
  check_backward<c10::Half, kRowsPerThreadSmall>(9, 7, 40, 15, 2e-3);
  check_forward<c10::BFloat16, kRowsPerThreadLarge>(9, 7, 40, 1e-2);
  check_backward<c10::BFloat16, kRowsPerThreadLarge>(9, 7, 40, 15, 1e-2);
  // Tensor-core tiles (sm_80 and newer) as lltm_cuda_small.cu launches them: forward TM = 4
  // with CH = 16 and TM = 2 with CH = 32, backward CH = 32 (plus CH = 16 once each); float32
  // as 3xTF32 (about 2^-20 per product, so a bound 2x the SIMT tiles'), float16 and bfloat16
  // with one MMA per product.
  for (const auto& s : shapes) {
    check_forward<float, kRowsPerThreadLarge, 16, true>(s[0], s[1], s[2], 4e-6);
    check_forward<float, kRowsPerThreadSmall, 32, true>(s[0], s[1], s[2], 4e-6);
    for (int mask : {15, 1, 2, 4, 8, 9, 6}) {
      check_backward<float, kRowsPerThreadLarge, 32, true>(s[0], s[1], s[2], mask, 4e-6);
    }
    check_backward<float, kRowsPerThreadSmall, 32, true>(s[0], s[1], s[2], 15, 4e-6);
  }
  check_forward<float, kRowsPerThreadSmall, 16, true>(40, 3, 21, 4e-6);
  check_backward<float, kRowsPerThreadLarge, 16, true>(70, 20, 50, 15, 4e-6);
  check_backward<float, kRowsPerThreadSmall, 16, true>(70, 20, 50, 9, 4e-6);
  check_forward<c10::Half, kRowsPerThreadLarge, 16, true>(9, 7, 40, 2e-3);
  check_forward<c10::Half, kRowsPerThreadSmall, 32, true>(9, 7, 40, 2e-3);
  check_backward<c10::Half, kRowsPerThreadSmall, 32, true>(9, 7, 40, 15, 2e-3);
  check_forward<c10::BFloat16, kRowsPerThreadLarge, 16, true>(9, 7, 40, 1e-2);
  check_backward<c10::BFloat16, kRowsPerThreadLarge, 32, true>(9, 7, 40, 15, 1e-2);
  std::printf("%d failures\n", failures);
  return failures != 0;
}
"""


@needs_gxx
def test_small_path_kernels_emulated_on_cpu(tmp_path):
    """Compiles csrc/lltm/lltm_cuda_small.cuh as host C++ and runs its kernels on the CPU (a
    thread per CUDA thread) with every backward output mask, so that tiling, staging and
    index errors (the d_X role's column range, writes past an output) fail here, GPU or not."""
    run_emulator(EMULATOR, tmp_path)
