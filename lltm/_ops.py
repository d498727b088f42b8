"""torch.ops.lltm: fake-tensor registration, the functional cell and the module."""

import math

import torch

from torch_fused_ops import load_library

load_library("lltm")  # registers torch.ops.lltm.* (after checking the torch)

_forward = torch.ops.lltm.lltm_forward.default


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


# The autograd formula is registered in C++ (csrc/lltm/lltm.cpp, CellFunction) so that the
# backward of a training step runs without Python.


def lltm_cell(input, weights, bias, old_h, old_cell):
    """One LLTM step; differentiable in every argument. Returns (new_h, new_cell).

    input (B, F), weights (3S, S+F), bias (3S,), old_h and old_cell (B, S); all on one
    device with one floating dtype.
    """
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
        old_h, old_cell = state
        return lltm_cell(input, self.weights, self.bias, old_h, old_cell)

    def extra_repr(self):
        return f"input_features={self.input_features}, state_size={self.state_size}"
