"""lltm_cpp and lltm_cuda as drop-ins for the C++/CUDA extension tutorial's own modules.

The tests use the modules the way the tutorial's client code does (written here in this
package's words): an autograd.Function whose forward calls `forward`, keeps
`outputs[1:] + [weights]` for the backward and returns the first two outputs, and whose
backward calls `backward(grad_h.contiguous(), grad_cell.contiguous(), *saved)` and unpacks
five (C++) or six (CUDA) gradients; a module holding `weights` (3S, F+S) and a bias of shape
(1, 3S) (the tutorial's scripts) or (3S,) (its text); the gradient check in float64.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICES, rel_err

import lltm_cpp
import lltm_cuda

MODULES = {"lltm_cpp": (lltm_cpp, 5), "lltm_cuda": (lltm_cuda, 6)}
SHAPES = [(1, 1, 1), (3, 17, 5), (16, 32, 128), (7, 9, 33)]  # (batch, features, state)


def tutorial_function(module, n_grads):
    """The tutorial client's autograd.Function around a module's forward and backward."""

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, input, weights, bias, old_h, old_cell):
            outputs = module.forward(input, weights, bias, old_h, old_cell)
            new_h, new_cell = outputs[:2]
            ctx.save_for_backward(*(outputs[1:] + [weights]))  # a list, as the tutorial's
            return new_h, new_cell

        @staticmethod
        def backward(ctx, grad_h, grad_cell):
            grads = module.backward(grad_h.contiguous(), grad_cell.contiguous(),
                                    *ctx.saved_tensors)
            assert len(grads) == n_grads
            d_old_h, d_input, d_weights, d_bias, d_old_cell = grads[:5]
            return d_input, d_weights, d_bias, d_old_h, d_old_cell

    return Function


class TutorialLLTM(torch.nn.Module):
    """The tutorial's module: weights (3S, F+S), bias (1, 3S) or (3S,), uniform init."""

    def __init__(self, function, features, state, bias_shape):
        super().__init__()
        self.function = function
        self.weights = torch.nn.Parameter(torch.empty(3 * state, features + state))
        self.bias = torch.nn.Parameter(torch.empty(*bias_shape))
        for p in self.parameters():
            p.data.uniform_(-1 / math.sqrt(state), 1 / math.sqrt(state))

    def forward(self, input, state):
        return self.function.apply(input, self.weights, self.bias, *state)


def reference(input, weights, bias, old_h, old_cell):
    """The tutorial's forward in plain PyTorch: all seven outputs, gate_weights (B, 3S)."""
    X = torch.cat([old_h, input], dim=1)
    gate_weights = torch.addmm(bias, X, weights.t())
    z_i, z_o, z_c = gate_weights.chunk(3, dim=1)
    input_gate, output_gate, candidate = torch.sigmoid(z_i), torch.sigmoid(z_o), F.elu(z_c)
    new_cell = old_cell + candidate * input_gate
    new_h = torch.tanh(new_cell) * output_gate
    return [new_h, new_cell, input_gate, output_gate, candidate, X, gate_weights]


def random_args(batch, features, state, device, dtype=torch.float64, bias_shape=None):
    g = torch.Generator().manual_seed(batch * 1000 + features * 10 + state)
    bias_shape = bias_shape or (1, 3 * state)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(device, dtype)

    return [rand(batch, features), rand(3 * state, features + state, scale=state ** -0.5),
            rand(*bias_shape, scale=0.3), rand(batch, state), rand(batch, state)]


@pytest.mark.parametrize("name", MODULES)
@pytest.mark.parametrize("shape", SHAPES)
def test_outputs_are_the_tutorials(device, name, shape):
    module, _ = MODULES[name]
    args = random_args(*shape, device)
    got, want = module.forward(*args), reference(*args)
    assert isinstance(got, list) and len(got) == 7
    batch, _, state = shape
    if name == "lltm_cuda":  # the CUDA tutorial's gates: (B, 3, S), the same values
        assert got[6].shape == (batch, 3, state)
        got[6] = got[6].reshape(batch, 3 * state)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype and g.device == w.device, i
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12, msg=f"output {i}")


@pytest.mark.parametrize("name", MODULES)
def test_backward_outputs_are_the_tutorials(device, name):
    module, n_grads = MODULES[name]
    batch, features, state = 6, 11, 9
    args = random_args(batch, features, state, device)
    outputs = module.forward(*args)
    grad_h, grad_cell = torch.randn_like(args[3]), torch.randn_like(args[4])
    grads = module.backward(grad_h, grad_cell, *outputs[1:], args[1])
    assert isinstance(grads, list) and len(grads) == n_grads
    leaves = [a.clone().requires_grad_() for a in args]
    ref = reference(*leaves)
    z = ref[6]
    d_gates, *want = torch.autograd.grad(ref[:2], [z, *leaves], (grad_h, grad_cell))
    d_input, d_weights, d_bias, d_old_h, d_old_cell = want
    expected = [d_old_h, d_input, d_weights, d_bias.reshape(1, 3 * state), d_old_cell]
    if n_grads == 6:
        expected.append(d_gates.reshape(batch, 3, state))
    for i, (g, w) in enumerate(zip(grads, expected)):
        assert g.shape == w.shape, (i, g.shape, w.shape)
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12, msg=f"gradient {i}")


@pytest.mark.parametrize("name", MODULES)
@pytest.mark.parametrize("bias_shape", ["row", "flat"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_client_module_trains_like_the_reference(device, name, bias_shape, dtype):
    """The tutorial's module pattern, both bias shapes: outputs and every gradient (of the
    parameters and of the input and states) against plain PyTorch."""
    module, n_grads = MODULES[name]
    batch, features, state = 16, 32, 128
    shape = (1, 3 * state) if bias_shape == "row" else (3 * state,)
    torch.manual_seed(0)
    rnn = TutorialLLTM(tutorial_function(module, n_grads), features, state, shape)
    rnn = rnn.to(device, dtype)
    x, h, c = (torch.randn(batch, n, device=device, dtype=dtype, requires_grad=True)
               for n in (features, state, state))
    new_h, new_cell = rnn(x, (h, c))
    (new_h.sum() + new_cell.sum()).backward()
    got = [new_h, new_cell, x.grad, h.grad, c.grad, rnn.weights.grad, rnn.bias.grad]
    leaves = [t.detach().double().requires_grad_() for t in (x, rnn.weights, rnn.bias, h, c)]
    ref_h, ref_c = reference(*leaves)[:2]
    (ref_h.sum() + ref_c.sum()).backward()
    want = [ref_h, ref_c, leaves[0].grad, leaves[3].grad, leaves[4].grad, leaves[1].grad,
            leaves[2].grad]
    tol = 1e-12 if dtype == torch.float64 else 2e-6
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == dtype, i
        assert rel_err(g, w) < tol, (i, rel_err(g, w))


@pytest.mark.parametrize("name", MODULES)
@pytest.mark.parametrize("bias_shape", [(1, 15), (15,)])
def test_gradcheck_as_the_tutorial_runs_it(device, name, bias_shape):
    module, n_grads = MODULES[name]
    args = [a.requires_grad_() for a in random_args(3, 17, 5, device, bias_shape=bias_shape)]
    assert torch.autograd.gradcheck(tutorial_function(module, n_grads).apply, args)


@pytest.mark.parametrize("name", MODULES)
def test_direct_call_with_grad_differentiates_every_output(device, name):
    """Called outside an autograd.Function, every output carries gradients (as the
    tutorial's ATen results do), first and second order."""
    module, _ = MODULES[name]
    args = [a.requires_grad_() for a in random_args(4, 6, 5, device)]
    got, want = module.forward(*args), reference(*args)
    weights = [torch.randn_like(w) for w in want]
    loss = sum((g.reshape(w.shape) * v).sum() for g, w, v in zip(got, want, weights))
    loss_ref = sum((w * v).sum() for w, v in zip(want, weights))
    grads = torch.autograd.grad(loss, args, create_graph=True)
    grads_ref = torch.autograd.grad(loss_ref, args, create_graph=True)
    for g, w in zip(grads, grads_ref):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
    second = torch.autograd.grad(sum(g.sum() for g in grads), args)
    second_ref = torch.autograd.grad(sum(g.sum() for g in grads_ref), args)
    for g, w in zip(second, second_ref):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
    small = [a.detach()[:2, :].clone().requires_grad_() if i in (0, 3, 4) else a
             for i, a in enumerate(args)]
    assert torch.autograd.gradcheck(lambda *a: tuple(module.forward(*a)), small)


def test_backward_is_differentiable_once(device):
    args = random_args(3, 4, 5, device)
    outputs = lltm_cuda.forward(*args)
    grad_h = torch.randn_like(args[3], requires_grad=True)
    grads = lltm_cuda.backward(grad_h, torch.zeros_like(args[4]), *outputs[1:], args[1])
    with pytest.raises(RuntimeError, match="differentiable once"):
        grads[1].sum().backward()


@pytest.mark.parametrize("split", [False, True])
def test_opcheck(device, split):
    args = random_args(3, 4, 5, device)
    torch.library.opcheck(torch.ops.lltm.tutorial_forward.default, (*args, split))
    outputs = torch.ops.lltm.tutorial_forward(*args, split)
    grads = (torch.randn_like(args[3]), torch.randn_like(args[4]))
    torch.library.opcheck(torch.ops.lltm.tutorial_backward.default,
                          (*grads, *outputs[1:], args[1], split))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_types(device, dtype):
    """An addition of this package: half types, computed in float, within 2x plain
    PyTorch's error in the same dtype (both against float64) plus a little slack."""
    args64 = random_args(16, 32, 128, device)
    args = [a.to(dtype) for a in args64]
    want = reference(*[a.double() for a in args])
    plain = reference(*args) if device == "cuda" or dtype == torch.bfloat16 else None
    got = lltm_cpp.forward(*args)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == dtype
        bound = 2 * rel_err(plain[i], w) + 1e-3 if plain is not None else 5e-3
        assert rel_err(g, w) <= bound, (i, rel_err(g, w), bound)


@pytest.mark.parametrize(
    "change, error, pattern",
    [
        (dict(bias=lambda s: torch.zeros(2, 3 * s)), ValueError,
         r"bias must have shape \[3 \* state_size\] or \[1, 3 \* state_size\], got shape \[2, 15\]"),
        (dict(bias=lambda s: torch.zeros(1, 3 * s + 1)), ValueError,
         r"bias.shape\[1\] must be 15"),
        (dict(weights=lambda s: [[1.0]]), TypeError,
         "forward: weights must be a torch.Tensor, got list"),
        (dict(old_cell=lambda s: None), TypeError,
         "forward: old_cell must be a torch.Tensor, got NoneType"),
    ],
)
def test_bad_forward_arguments(device, change, error, pattern):
    args = dict(zip(("input", "weights", "bias", "old_h", "old_cell"),
                    random_args(3, 4, 5, device, dtype=torch.float32)))
    for key, make in change.items():
        value = make(5)
        args[key] = value.to(device) if isinstance(value, torch.Tensor) else value
    for module in (lltm_cpp, lltm_cuda):
        with pytest.raises(error, match=pattern):
            module.forward(*args.values())


def test_bad_backward_arguments(device):
    args = random_args(3, 4, 5, device)
    outputs = lltm_cuda.forward(*args)
    grads = (torch.randn_like(args[3]), torch.randn_like(args[4]))
    saved = outputs[1:] + [args[1]]
    with pytest.raises(ValueError, match=r"input_gate.shape\[1\] must be 5"):
        lltm_cuda.backward(*grads, saved[0], saved[1][:, :4], *saved[2:])
    with pytest.raises(ValueError, match=r"gates.shape\[1\] must be 3"):
        lltm_cuda.backward(*grads, *saved[:5], saved[5].reshape(3, 5, 3), saved[6])
    with pytest.raises(TypeError, match="backward: X must be a torch.Tensor, got float"):
        lltm_cpp.backward(*grads, *saved[:4], 1.0, *saved[5:])


@pytest.mark.skipif("cuda" not in DEVICES, reason="needs a CUDA GPU")
@pytest.mark.parametrize("path", ["small", "cublas"])
def test_cuda_paths(monkeypatch, path):
    """Both CUDA paths of the cell (fused GEMM kernels, cuBLAS) write the activations."""
    monkeypatch.setenv("LLTM_CUDA_PATH", path)
    for shape in [(5, 7, 9), (16, 32, 128)]:
        args = random_args(*shape, "cuda")
        for g, w in zip(lltm_cpp.forward(*args), reference(*args)):
            torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
