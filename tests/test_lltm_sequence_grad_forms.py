"""lltm_sequence_backward's gradient arguments and the forward's operands as the op reads them.

The backward takes grad_hs as the gradient of hs (T+1, B, S) or of hs[1:] (T, B, S: the layer's
output), h_n's gradient apart (grad_h_n) and None for any zero gradient, so that
lltm_sequence's backward passes autograd's gradients on as they arrive. Every form must give
bitwise the results of the (T+1, B, S) gradient assembled in plain PyTorch (what the backward
built before), leave the saved buffers intact, and pass opcheck. The forward reads W_h, h0 and
c0 where they are (the cta kernels) or copies them (the other paths): weights as a column block
of a wider matrix, in column-major order, and non-contiguous states give the results of
contiguous ones. On CUDA each test runs on each path (the seq_path fixture of
test_lltm_sequence.py)."""

import pytest
import torch
from test_lltm_sequence import (  # noqa: F401 (seq_path: the module's autouse fixture)
    ARGS,
    auto_path_only,
    cotangents,
    make_inputs,
    seq_path,
)

import lltm

forward_op = torch.ops.lltm.lltm_sequence_forward
backward_op = torch.ops.lltm.lltm_sequence_backward


def assembled(hs, grad_output, grad_h_n, grad_h0=None):
    """The gradient of hs that the parts make, built in plain PyTorch."""
    grad_hs = torch.zeros_like(hs)
    if grad_h0 is not None:
        grad_hs[0].copy_(grad_h0)
    if grad_output is not None:
        grad_hs[1:].copy_(grad_output)
    if grad_h_n is not None:
        grad_hs[-1].add_(grad_h_n)
    return grad_hs


def assert_equal(got, want, what):
    for name, g, w in zip(("d_input", "d_weights", "d_bias", "d_h0", "d_c0"), got, want):
        assert torch.equal(g, w), f"{what}: {name} differs"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("T,B,F,S", [(0, 2, 3, 5), (1, 2, 3, 33), (6, 3, 4, 7), (5, 5, 2, 129)])
def test_gradient_forms_bitwise(device, dtype, T, B, F, S):
    inputs = make_inputs(T, B, F, S, device, dtype)
    x, w, _, h0, c0 = inputs
    hs, cells, gates = forward_op(*inputs)
    # The forward wrote the initial states into row 0 itself (cta) or copied them (others).
    assert torch.equal(hs[0], h0) and torch.equal(cells[0], c0)
    saved = [t.clone() for t in (hs, cells, gates)]
    g_out, g_h, g_c = (c.to(device, dtype) for c in cotangents(T, B, S))
    g_h0 = torch.randn(B, S, device=device).to(dtype)
    zero_c = torch.zeros_like(g_c)

    def bwd(grad_hs, grad_c_n, grad_h_n=None):
        return backward_op(grad_hs, grad_c_n, x, w, hs, cells, gates, [True] * 3, grad_h_n)

    cases = {
        "all parts": ((g_out, g_c, g_h), (assembled(hs, g_out, g_h), g_c)),
        "output only": ((g_out, None), (assembled(hs, g_out, None), zero_c)),
        "h_n and c_n only": ((None, g_c, g_h), (assembled(hs, None, g_h), g_c)),
        "none": ((None, None), (torch.zeros_like(hs), zero_c)),
        "full and h_n": ((assembled(hs, g_out, None, g_h0), g_c, g_h),
                         (assembled(hs, g_out, g_h, g_h0), g_c)),
        # Expanded (stride 0, as sum().backward() makes) and transposed gradients.
        "expanded": ((torch.ones((), device=device, dtype=dtype).expand(T, B, S), g_c),
                     (assembled(hs, torch.ones(T, B, S, device=device, dtype=dtype), None),
                      g_c)),
        "transposed": ((g_out.transpose(0, 1).contiguous().transpose(0, 1), g_c.t().contiguous().t(),
                        g_h), (assembled(hs, g_out, g_h), g_c)),
    }
    for what, (args, want_args) in cases.items():
        assert_equal(bwd(*args), bwd(*want_args), what)
    for name, t, before in zip(("hs", "cells", "gates"), (hs, cells, gates), saved):
        assert torch.equal(t, before), f"the backward changed {name}"


@auto_path_only
def test_opcheck_gradient_forms(device):
    T, B, F, S = 4, 3, 2, 5
    inputs = make_inputs(T, B, F, S, device)
    hs, cells, gates = forward_op(*inputs)
    g_out, g_h, g_c = (c.to(device, torch.float32) for c in cotangents(T, B, S))
    rest = (inputs[0], inputs[1], hs, cells, gates, [True, False, True])
    for grads, grad_h_n in [((g_out, g_c), g_h), ((None, None), g_h), ((g_out, None), None)]:
        torch.library.opcheck(backward_op.default, (*grads, *rest), {"grad_h_n": grad_h_n})


def test_backward_op_bad_gradients(device):
    T, B, F, S = 3, 2, 4, 5
    inputs = make_inputs(T, B, F, S, device)
    hs, cells, gates = forward_op(*inputs)
    rest = (inputs[0], inputs[1], hs, cells, gates, [True] * 3)
    g_c = torch.randn_like(cells[-1])
    with pytest.raises(ValueError, match=r"grad_hs.shape\[0\] must be 4 \(steps \+ 1.* or 3"):
        backward_op(hs[2:], g_c, *rest)
    with pytest.raises(ValueError, match=r"grad_h_n.shape\[1\] must be 5"):
        backward_op(hs[1:], g_c, *rest, grad_h_n=g_c[:, 1:])
    with pytest.raises(ValueError, match="grad_h_n must be a 2-D tensor"):
        backward_op(hs[1:], g_c, *rest, grad_h_n=hs)
    with pytest.raises(ValueError, match=r"grad_c_n.shape\[0\] must be 2"):
        backward_op(None, g_c[:1], *rest)
    with pytest.raises(ValueError, match="grad_h_n has dtype Double but input has dtype Float"):
        backward_op(None, None, *rest, grad_h_n=g_c.double())


def test_forward_operands_in_place(device):
    """Weights as a column block of a wider matrix (W_h read with the row stride), in
    column-major order (copied), and column-major h0 and c0: the results of contiguous ones
    through the layer's forward and backward. Not bitwise: the GEMMs of W_x (read in place)
    may sum in another order for another layout (MKL does for column-major weights); a W_h
    read with a wrong stride would be off by far more than float32 rounding."""
    T, B, F, S = 6, 3, 4, 7
    inputs = make_inputs(T, B, F, S, device)
    cots = [c.to(device, torch.float32) for c in cotangents(T, B, S)]

    def run(x, w_leaf, w_view, b, h_leaf, h_view, c_leaf, c_view):
        output, (h_n, c_n) = lltm.lltm_sequence(x, w_view(w_leaf), b, h_view(h_leaf),
                                                c_view(c_leaf))
        loss = sum((o * c).sum() for o, c in zip((output, h_n, c_n), cots))
        leaves = (x, w_leaf, b, h_leaf, c_leaf)
        grads = torch.autograd.grad(loss, leaves)
        grads = [grads[0], w_view(grads[1]), grads[2], h_view(grads[3]), c_view(grads[4])]
        return [output, h_n, c_n, *grads]

    def leaf(t):
        return t.detach().clone().requires_grad_()

    x, w, b, h0, c0 = inputs
    same = lambda t: t  # noqa: E731
    want = run(leaf(x), leaf(w), same, leaf(b), leaf(h0), same, leaf(c0), same)
    wide = torch.zeros(3 * S, S + F + 5, device=device)
    wide[:, 2:2 + S + F] = w
    block = lambda t: t[:, 2:2 + S + F]  # noqa: E731
    col_major = lambda t: t.t().contiguous().t()  # noqa: E731
    layouts = {
        "column block": (leaf(wide), block, leaf(h0), same, leaf(c0), same),
        "column-major": (leaf(col_major(w)), same, leaf(col_major(h0)), same,
                         leaf(col_major(c0)), same),
    }
    for what, (w_leaf, w_view, h_leaf, h_view, c_leaf, c_view) in layouts.items():
        got = run(leaf(x), w_leaf, w_view, leaf(b), h_leaf, h_view, c_leaf, c_view)
        for name, g, e in zip(("output", "h_n", "c_n", *ARGS), got, want):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6, msg=f"{what}: {name}")
