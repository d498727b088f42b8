"""torch.ops.lltm.lltm_sequence_*: fake-tensor and autograd registration, the functional
`lltm_sequence` and the module `LLTMLayer` (the LLTM cell over a whole sequence, one op call
forward and one backward).

The forward op returns the recurrence's buffers (csrc/lltm/lltm_sequence.h): hs (T+1, B, S)
with hs[0] = h0 and hs[t+1] = h_t, cells (T+1, B, S) likewise, and gates (T, B, 3S), the gate
pre-activations z_t that the backward reads. The outputs a user sees are views made here:
output = hs[1:], h_n = hs[T], c_n = cells[T]. Kept for the backward: hs, cells and gates
(5 B S elements per step) besides the input and the weights.
"""

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
from lltm._ops import check_features

load_library("lltm")  # registers torch.ops.lltm.* (after checking the torch)

_forward = torch.ops.lltm.lltm_sequence_forward.default
_backward = torch.ops.lltm.lltm_sequence_backward.default


@torch.library.register_fake("lltm::lltm_sequence_forward")
def _forward_fake(input, weights, bias, h0, c0):
    steps, batch, _ = input.shape
    state = h0.shape[1]
    return (
        input.new_empty(steps + 1, batch, state),
        input.new_empty(steps + 1, batch, state),
        input.new_empty(steps, batch, 3 * state),
    )


@torch.library.register_fake("lltm::lltm_sequence_backward")
def _backward_fake(grad_hs, grad_c_n, input, weights, hs, cells, gates, output_mask,
                   grad_h_n=None):
    # (d_input, d_weights, d_bias, d_h0, d_c0); output_mask: the first three.
    shapes = [tuple(input.shape), tuple(weights.shape), (weights.shape[0],)]
    grads = [input.new_empty(s if need else (0,)) for s, need in zip(shapes, output_mask)]
    state = (hs.shape[1], hs.shape[2])
    return (*grads, input.new_empty(state), input.new_empty(state))


# Autograd. The stable ABI has no C++ autograd, so the formula is registered here; the
# backward runs lltm_sequence_backward once for the whole sequence. Its gradient arguments:
# grad_hs, the gradient of hs (T+1, B, S) or of hs[1:] (T, B, S: the layer's output, hs[0]'s
# gradient zero), grad_c_n (B, S) and grad_h_n (B, S, added to hs[T]'s gradient); each may be
# None for zero, so that no caller builds a zero tensor or sums gradients before the call.


def _setup_context(ctx, inputs, output):
    input, weights, _, _, _ = inputs
    hs, cells, gates = output
    ctx.save_for_backward(input, weights, hs, cells, gates)
    # gates is an output only so that it can be saved; with materialisation off an unused
    # output's gradient arrives as None and costs nothing.
    ctx.mark_non_differentiable(gates)
    ctx.set_materialize_grads(False)


def _sequence_backward(ctx, grad_hs, grad_cells, _grad_gates):
    # The recurrence takes the gradient of c_n = cells[T] only: the other entries of cells are
    # not returned to users (lltm_sequence exposes cells[T] alone), so theirs is always zero.
    grad_c_n = None if grad_cells is None else grad_cells[-1]
    return _run_backward(ctx, grad_hs, grad_c_n, None)


def _run_backward(ctx, grad_hs, grad_c_n, grad_h_n):
    """lltm_sequence_backward on the saved buffers: the gradients of the five inputs."""
    input, weights, hs, cells, gates = ctx.saved_tensors
    need = ctx.needs_input_grad  # input, weights, bias, h0, c0
    args = (grad_hs, grad_c_n, input, weights, hs, cells, gates, need[:3], grad_h_n)
    if torch.is_grad_enabled():
        # create_graph=True: through lltm_sequence_backward's autograd formula (below), which
        # raises when a second backward reaches it instead of passing these gradients off as
        # constants (silently wrong second derivatives).
        grads = _backward(*args)
    else:
        with below_autograd():
            grads = _backward(*args)
    return tuple(g if n else None for g, n in zip(grads, need))


torch.library.register_autograd(
    "lltm::lltm_sequence_forward", _sequence_backward, setup_context=_setup_context
)


def _no_setup(ctx, inputs, output):
    pass


def _second_backward(ctx, *grads):
    raise RuntimeError(
        "lltm_sequence is differentiable once: the gradients of its backward (a second "
        "backward after create_graph=True) are not implemented"
    )


torch.library.register_autograd(
    "lltm::lltm_sequence_backward", _second_backward, setup_context=_no_setup
)


class _SequenceFunction(torch.autograd.Function):
    """The eager fast path of lltm_sequence: the formula registered above (lltm_sequence_backward
    on the saved buffers) without torch.library's generated autograd wrapper, whose per-call
    Python work costs more than the rest of a small call. It returns the user's three tensors
    (output, h_n, c_n) itself, so that their gradients arrive here as they are: the views that
    lltm_sequence makes of the op's buffers would each add a view-backward node, which
    allocates a zero (T+1, B, S) buffer and adds into it (about 0.2 ms of host time per call on
    the H100 machine at (64, 16, 32, 128), against the recurrence's 0.22 ms of GPU time).
    Direct op calls, opcheck, torch.compile and export keep using the registered formula."""

    # forward takes ctx (no setup_context): Function.apply binds the arguments with
    # inspect.signature when a setup_context is defined, which costs tens of microseconds.
    @staticmethod
    def forward(ctx, input, weights, bias, h0, c0):
        with below_autograd():
            hs, cells, gates = _forward(input, weights, bias, h0, c0)
        ctx.save_for_backward(input, weights, hs, cells, gates)
        ctx.set_materialize_grads(False)
        return hs[1:], hs[-1], cells[-1]

    @staticmethod
    def backward(ctx, grad_output, grad_h_n, grad_c_n):
        # The op takes the three gradients as they arrive (output = hs[1:], so grad_output is
        # grad_hs's (T, B, S) form; None for zero): no tensor is built here.
        return _run_backward(ctx, grad_output, grad_c_n, grad_h_n)


def _sequence_op(input, weights, bias, h0, c0):
    """(output, h_n, c_n) of lltm_sequence: eager calls skip the registered autograd wrapper
    (straight to the kernel when no graph is needed, else _SequenceFunction); traced calls
    (torch.compile, export) and functorch transforms call the op itself."""
    if not plain_eager(input, weights, bias, h0, c0):
        require_tensors("lltm_sequence", ("input", "weights", "bias", "h0", "c0"),
                        (input, weights, bias, h0, c0))
        hs, cells, _ = _forward(input, weights, bias, h0, c0)
    elif grad_enabled() and any_requires_grad(input, weights, bias, h0, c0):
        return _SequenceFunction.apply(input, weights, bias, h0, c0)
    else:
        with below_autograd():
            hs, cells, _ = _forward(input, weights, bias, h0, c0)
    return hs[1:], hs[-1], cells[-1]


def lltm_sequence(input, weights, bias, h0, c0):
    """The LLTM cell applied over a sequence, as one op; differentiable in every argument.

    input (T, B, F), weights (3S, S+F), bias (3S,), h0 and c0 (B, S), all on one device with
    one floating dtype. Returns (output, (h_n, c_n)): output (T, B, S) holds h_t of every step
    (exactly lltm_cell applied step by step), h_n and c_n (B, S) the final states (h0 and c0
    themselves, copied, for T = 0).
    """
    output, h_n, c_n = _sequence_op(input, weights, bias, h0, c0)
    return output, (h_n, c_n)


class LLTMLayer(torch.nn.Module):
    """The LLTM over a sequence, as torch.nn.LSTM is used: `layer(x, state=None)` returns
    `(output, (h_n, c_n))`. x is (T, B, F), or (B, T, F) with batch_first (output likewise);
    state None means zero initial states. Same parameters as lltm.LLTM (`weights` (3S, S+F)
    and `bias` (3S,), uniform in +-1/sqrt(state_size)), so a state dict moves between them."""

    def __init__(self, input_features: int, state_size: int, batch_first: bool = False):
        super().__init__()
        self.input_features = input_features
        self.state_size = state_size
        self.batch_first = batch_first
        self.weights = torch.nn.Parameter(torch.empty(3 * state_size, input_features + state_size))
        self.bias = torch.nn.Parameter(torch.empty(3 * state_size))
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.state_size)
        for weight in self.parameters():
            weight.data.uniform_(-stdv, +stdv)

    def forward(self, x, state=None):
        check_features("LLTMLayer", x, 3, self.input_features)
        if self.batch_first:
            x = x.transpose(0, 1)
        if state is None:
            zeros = x.new_zeros(x.shape[1], self.state_size)
            state = (zeros, zeros)
        h0, c0 = state
        output, (h_n, c_n) = lltm_sequence(x, self.weights, self.bias, h0, c0)
        if self.batch_first:
            output = output.transpose(0, 1)
        return output, (h_n, c_n)

    def extra_repr(self):
        return (f"input_features={self.input_features}, state_size={self.state_size}, "
                f"batch_first={self.batch_first}")
