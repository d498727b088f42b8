"""torch.ops.lltm: fake-tensor registration, the functional cell and the module."""

import math

import torch

from torch_fused_ops import load_library
from torch_fused_ops._eager import (
    any_requires_grad,
    below_autograd,
    grad_enabled,
    plain_eager,
    require_tensors,
)

load_library("lltm")  # registers torch.ops.lltm.* (after checking the torch)

_forward = torch.ops.lltm.lltm_forward.default
_backward = torch.ops.lltm.lltm_backward.default

@torch.library.register_fake("lltm::lltm_forward")
def _forward_fake(input, weights, bias, old_h, old_cell):
    batch, state = old_h.shape
    return (
        input.new_empty(batch, state),
        input.new_empty(batch, state),
        input.new_empty(batch, state + input.shape[1]),
        input.new_empty(batch, 3 * state),
    )


@torch.library.register_fake("lltm::lltm_backward")
def _backward_fake(grad_h, grad_cell, new_cell, gate_weights, X, weights, output_mask):
    # (d_input, d_weights, d_bias, d_old_h, d_old_cell); output_mask: the first four.
    batch, state = new_cell.shape
    shapes = [(batch, X.shape[1] - state), tuple(weights.shape), (weights.shape[0],), (batch, state)]
    grads = [new_cell.new_empty(s if need else (0,)) for s, need in zip(shapes, output_mask)]
    return (*grads, new_cell.new_empty(batch, state))


# Autograd. The stable ABI has no C++ autograd, so the formulas are registered here; the
# backward runs lltm_backward, whose output_mask asks only for the gradients autograd needs.


def _setup_context(ctx, inputs, output):
    weights = inputs[1]
    _, new_cell, X, gate_weights = output
    ctx.save_for_backward(new_cell, gate_weights, X, weights)
    # X and gate_weights are outputs only so that they can be saved; their gradients are
    # never needed, and with materialisation off an unused one arrives as None.
    ctx.mark_non_differentiable(X, gate_weights)
    ctx.set_materialize_grads(False)


def _cell_backward(ctx, grad_h, grad_cell, _grad_X, _grad_gate_weights):
    new_cell, gate_weights, X, weights = ctx.saved_tensors
    if grad_h is None:
        grad_h = torch.zeros_like(new_cell)
    if grad_cell is None:
        grad_cell = torch.zeros_like(new_cell)
    # Inputs, and the op's outputs: 0 input, 1 weights, 2 bias, 3 old_h, 4 old_cell.
    need = ctx.needs_input_grad
    args = (grad_h, grad_cell, new_cell, gate_weights, X, weights, need[:4])
    if torch.is_grad_enabled():
        # create_graph=True: through lltm_backward's autograd formula (below), which raises
        # when a second backward reaches it instead of passing these gradients off as
        # constants (silently wrong second derivatives).
        grads = _backward(*args)
    else:
        # lltm_backward needs no graph: straight to its kernel instead of through its
        # Autograd key's Python kernel (host time, which small problems are bound by).
        with below_autograd():
            grads = _backward(*args)
    d_input, d_weights, d_bias, d_old_h, d_old_cell = grads
    return (
        d_input if need[0] else None,
        d_weights if need[1] else None,
        d_bias if need[2] else None,
        d_old_h if need[3] else None,
        d_old_cell if need[4] else None,
    )


torch.library.register_autograd(
    "lltm::lltm_forward", _cell_backward, setup_context=_setup_context
)


def _no_setup(ctx, inputs, output):
    pass


def _second_backward(ctx, *grads):
    raise RuntimeError(
        "lltm_cell is differentiable once: the gradients of its backward (a second backward "
        "after create_graph=True) are not implemented"
    )


torch.library.register_autograd("lltm::lltm_backward", _second_backward, setup_context=_no_setup)


class _Cell(torch.autograd.Function):
    """lltm_forward's autograd formula (_setup_context, _cell_backward: the ones registered
    above) as a plain autograd.Function: lltm_cell's eager entry point. The op's generated
    wrapper costs several times the host time of a Function (a Python autograd kernel, its
    own Function, the op redispatched), which small problems are bound by; compile, export,
    fake tensors and functorch transforms go through the op and its registered formula."""

    # forward(ctx, ...) rather than a separate setup_context: half the host time of apply.
    @staticmethod
    def forward(ctx, *inputs):
        with below_autograd():  # straight to the kernel (grad mode is off in here anyway)
            output = _forward(*inputs)
        _setup_context(ctx, inputs, output)
        return output

    backward = staticmethod(_cell_backward)


_ARGS = ("input", "weights", "bias", "old_h", "old_cell")


def check_features(module, input, rank, input_features):
    """ValueError naming the module's input_features when input (a tensor of `rank` dims, the
    features last) does not match them: the weights are right, the input is not."""
    require_tensors(module, ("input",), (input,))
    if input.dim() != rank or input.shape[-1] != input_features:
        layout = "(batch, input_features)" if rank == 2 else "(T, B, input_features)"
        raise ValueError(
            f"{module}: input must be a {rank}-D tensor {layout} with input_features="
            f"{input_features}, got shape {tuple(input.shape)}"
        )


def lltm_cell(input, weights, bias, old_h, old_cell):
    """One LLTM step; differentiable in every argument. Returns (new_h, new_cell).

    input (B, F), weights (3S, S+F), bias (3S,), old_h and old_cell (B, S); all on one
    device with one floating dtype.
    """
    # torch.compile, export, functorch transforms, modes and subclasses: the op itself.
    if not plain_eager(input, weights, bias, old_h, old_cell):
        require_tensors("lltm_cell", _ARGS, (input, weights, bias, old_h, old_cell))
        new_h, new_cell, _, _ = _forward(input, weights, bias, old_h, old_cell)
    elif grad_enabled() and any_requires_grad(input, weights, bias, old_h, old_cell):
        new_h, new_cell, _, _ = _Cell.apply(input, weights, bias, old_h, old_cell)
    else:  # no graph needed: the kernel, past the op's Autograd key
        with below_autograd():
            new_h, new_cell, _, _ = _forward(input, weights, bias, old_h, old_cell)
    return new_h, new_cell


class LLTM(torch.nn.Module):
    """The tutorial's LLTM module: parameters `weights` (3S, F+S) and `bias` (3S,), both
    initialised uniformly in +-1/sqrt(state_size)."""

    def __init__(self, input_features: int, state_size: int):
        super().__init__()
        self.input_features = input_features
        self.state_size = state_size
        self.weights = torch.nn.Parameter(torch.empty(3 * state_size, input_features + state_size))
        self.bias = torch.nn.Parameter(torch.empty(3 * state_size))
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.state_size)
        for weight in self.parameters():
            weight.data.uniform_(-stdv, +stdv)

    def forward(self, input, state):
        check_features("LLTM", input, 2, self.input_features)
        old_h, old_cell = state
        return lltm_cell(input, self.weights, self.bias, old_h, old_cell)

    def extra_repr(self):
        return f"input_features={self.input_features}, state_size={self.state_size}"
