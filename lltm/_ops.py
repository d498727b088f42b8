"""torch.ops.lltm: fake-tensor and autograd registration, the functional cell and the module."""

import math

import torch

try:
    from lltm import _C  # noqa: F401  (loading it registers torch.ops.lltm.*)
except ImportError as e:  # pragma: no cover - only without a build
    raise ImportError(
        "lltm's compiled library is missing or does not match the installed torch "
        f"({torch.__version__}); rebuild with `pip install --no-build-isolation -e .`: {e}"
    ) from e

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
    batch, state = new_cell.shape
    shapes = [(batch, state), (batch, X.shape[1] - state), tuple(weights.shape), (3 * state,)]
    grads = [new_cell.new_empty(s if need else (0,)) for s, need in zip(shapes, output_mask)]
    return (*grads, new_cell.new_empty(batch, state))


def _setup_context(ctx, inputs, output):
    weights = inputs[1]
    _, new_cell, X, gate_weights = output
    ctx.save_for_backward(new_cell, gate_weights, X, weights)
    # X and gate_weights are saved for the backward, not results to differentiate; with
    # materialisation off, an unused output's gradient arrives as None, not a zero tensor.
    ctx.mark_non_differentiable(X, gate_weights)
    ctx.set_materialize_grads(False)


def _backward_fn(ctx, grad_h, grad_cell, _grad_X, _grad_gates):
    new_cell, gate_weights, X, weights = ctx.saved_tensors
    if grad_h is None:
        grad_h = torch.zeros_like(new_cell)
    if grad_cell is None:
        grad_cell = torch.zeros_like(new_cell)
    need_input, need_weights, need_bias, need_old_h, need_old_cell = ctx.needs_input_grad
    d_old_h, d_input, d_weights, d_bias, d_old_cell = _backward(
        grad_h, grad_cell, new_cell, gate_weights, X, weights,
        [need_old_h, need_input, need_weights, need_bias],
    )
    return (
        d_input if need_input else None,
        d_weights if need_weights else None,
        d_bias if need_bias else None,
        d_old_h if need_old_h else None,
        d_old_cell if need_old_cell else None,
    )


torch.library.register_autograd("lltm::lltm_forward", _backward_fn, setup_context=_setup_context)


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
