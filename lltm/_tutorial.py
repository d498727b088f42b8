"""The tutorial's entry points: torch.ops.lltm.tutorial_forward / tutorial_backward (fake
tensors and autograd registered here) and the `forward` / `backward` functions of the
drop-in modules `lltm_cpp` (the C++ tutorial) and `lltm_cuda` (the CUDA tutorial).

The two tutorial modules differ only in how they hand the gate pre-activations around: the
C++ one as gate_weights (B, 3S) and five gradients, the CUDA one as gates (B, 3, S) and six
gradients (d_gates last). Both accept bias (3S,) or (1, 3S) and return d_bias (1, 3S), as
the tutorial does (autograd sums it onto a (3S,) bias). Every output comes from one op call.

Called with grad enabled on tensors that require it (outside an autograd.Function), all seven
forward outputs are differentiable, as the tutorial's ATen results are: gradients that reach
the gates, X or the activations flow back to the inputs (the formula below).
"""

import torch
import torch.nn.functional as F

from lltm._ops import _no_setup
from torch_fused_ops import load_library
from torch_fused_ops._eager import (
    any_requires_grad,
    below_autograd,
    grad_enabled,
    plain_eager,
    require_tensors,
)

load_library("lltm")  # registers torch.ops.lltm.* (after checking the torch)

_forward = torch.ops.lltm.tutorial_forward.default
_backward = torch.ops.lltm.tutorial_backward.default
_cell_backward = torch.ops.lltm.lltm_backward.default
_ALL_GRADIENTS = (True, True, True, True)

_FORWARD_ARGS = ("input", "weights", "bias", "old_h", "old_cell")
_BACKWARD_ARGS = ("grad_h", "grad_cell", "new_cell", "input_gate", "output_gate",
                  "candidate_cell", "X", "gates", "weights")


@torch.library.register_fake("lltm::tutorial_forward")
def _forward_fake(input, weights, bias, old_h, old_cell, split_gates):
    batch, state = old_h.shape
    acts = [input.new_empty(batch, state) for _ in range(5)]  # new_h .. candidate_cell
    gates = input.new_empty(batch, 3, state) if split_gates else input.new_empty(batch, 3 * state)
    return (*acts, input.new_empty(batch, state + input.shape[1]), gates)


@torch.library.register_fake("lltm::tutorial_backward")
def _backward_fake(grad_h, grad_cell, new_cell, input_gate, output_gate, candidate_cell, X,
                   gates, weights, split_gates):
    batch, state = new_cell.shape
    d_gates = (new_cell.new_empty(batch, 3, state) if split_gates
               else new_cell.new_empty(batch, 3 * state))
    return (
        new_cell.new_empty(batch, state),                  # d_old_h
        new_cell.new_empty(batch, X.shape[1] - state),     # d_input
        new_cell.new_empty(weights.shape),                 # d_weights
        new_cell.new_empty(1, 3 * state),                  # d_bias
        new_cell.new_empty(batch, state),                  # d_old_cell
        d_gates,
    )


def _setup_context(ctx, inputs, output):
    _, weights, bias, _, _, _ = inputs
    _, new_cell, _, _, _, X, gates = output
    ctx.save_for_backward(new_cell, X, gates, weights)
    ctx.bias_shape = bias.shape
    ctx.set_materialize_grads(False)


def _forward_grads(ctx, grad_h, grad_cell, grad_ig, grad_og, grad_cc, grad_X, grad_gates):
    """Gradients of (input, weights, bias, old_h, old_cell) from those of the seven outputs."""
    new_cell, X, gates, weights = ctx.saved_tensors
    need = ctx.needs_input_grad
    batch, state = new_cell.shape
    z = gates.reshape(batch, 3 * state)
    zeros = None
    if grad_h is None or grad_cell is None:
        zeros = torch.zeros_like(new_cell)
    grad_h = zeros if grad_h is None else grad_h
    grad_cell = zeros if grad_cell is None else grad_cell
    extras = (grad_ig, grad_og, grad_cc, grad_X, grad_gates)
    if all(g is None for g in extras) and not torch.is_grad_enabled():
        # Only new_h and new_cell carry gradients (the usual case): the fused backward.
        with below_autograd():
            d_input, d_weights, d_bias, d_old_h, d_old_cell = _cell_backward(
                grad_h, grad_cell, new_cell, z, X, weights, need[:4])
    else:
        # Gradients reach the activations, X or the gates too, or create_graph=True: the
        # chain rule through every output, in differentiable PyTorch ops.
        z_i, z_o, z_c = z.chunk(3, dim=1)
        input_gate, output_gate = torch.sigmoid(z_i), torch.sigmoid(z_o)
        candidate = F.elu(z_c)
        tanh_cell = torch.tanh(new_cell)
        d_cell = grad_cell + grad_h * output_gate * (1 - tanh_cell * tanh_cell)
        d_output_gate = grad_h * tanh_cell
        d_input_gate = d_cell * candidate
        d_candidate = d_cell * input_gate
        if grad_ig is not None:
            d_input_gate = d_input_gate + grad_ig
        if grad_og is not None:
            d_output_gate = d_output_gate + grad_og
        if grad_cc is not None:
            d_candidate = d_candidate + grad_cc
        d_z = torch.cat([
            d_input_gate * input_gate * (1 - input_gate),
            d_output_gate * output_gate * (1 - output_gate),
            d_candidate * torch.where(z_c > 0, torch.ones_like(z_c), torch.exp(z_c)),
        ], dim=1)
        if grad_gates is not None:
            d_z = d_z + grad_gates.reshape(batch, 3 * state)
        d_X = d_z.mm(weights)
        if grad_X is not None:
            d_X = d_X + grad_X
        d_old_h, d_input = d_X[:, :state], d_X[:, state:]
        d_weights = d_z.t().mm(X)
        d_bias = d_z.sum(0)
        d_old_cell = d_cell
    return (
        d_input if need[0] else None,
        d_weights if need[1] else None,
        d_bias.reshape(ctx.bias_shape) if need[2] else None,
        d_old_h if need[3] else None,
        d_old_cell if need[4] else None,
        None,  # split_gates
    )


torch.library.register_autograd(
    "lltm::tutorial_forward", _forward_grads, setup_context=_setup_context
)


def _second_backward(ctx, *grads):
    raise RuntimeError(
        "lltm_cpp.backward / lltm_cuda.backward are differentiable once: the gradients of "
        "their outputs (a backward of the backward) are not implemented; differentiate "
        "through the forward's outputs instead (create_graph=True works there)"
    )


torch.library.register_autograd("lltm::tutorial_backward", _second_backward,
                                setup_context=_no_setup)  # lltm._ops's: saves nothing


def forward(input, weights, bias, old_h, old_cell, *, split_gates):
    """tutorial_forward as a list of seven tensors, as the tutorial returns it."""
    args = (input, weights, bias, old_h, old_cell)
    if not plain_eager(*args):
        require_tensors("forward", _FORWARD_ARGS, args)
        return list(_forward(*args, split_gates))
    if grad_enabled() and any_requires_grad(*args):
        return list(_forward(*args, split_gates))  # through the registered autograd formula
    with below_autograd():  # no graph needed: the kernel, past the op's Autograd key
        return list(_forward(*args, split_gates))


def backward(grad_h, grad_cell, new_cell, input_gate, output_gate, candidate_cell, X, gates,
             weights, *, split_gates):
    """tutorial_backward as a list of six tensors (d_gates last)."""
    args = (grad_h, grad_cell, new_cell, input_gate, output_gate, candidate_cell, X, gates,
            weights)
    if not plain_eager(*args):
        require_tensors("backward", _BACKWARD_ARGS, args)
        return list(_backward(*args, split_gates))
    if grad_enabled() and any_requires_grad(*args):
        return list(_backward(*args, split_gates))  # its autograd formula raises if reached
    with below_autograd():
        return list(_backward(*args, split_gates))
