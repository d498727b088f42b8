"""torch.ops.padding_ops: fake-tensor and autograd registration, the function and the module."""

import operator

import torch

from torch_fused_ops import load_library
from torch_fused_ops._eager import below_autograd, grad_enabled, plain_eager, require_tensors

load_library("padding_ops")  # registers torch.ops.padding_ops.* (after checking the torch)

_tile_pad = torch.ops.padding_ops.tile_pad.default
_tile_pad_backward = torch.ops.padding_ops.tile_pad_backward.default


def _padded_shape(shape, pad, name):
    """Shape of tile_pad's output for an input of `shape`, with the op's checks."""
    if len(shape) < 2:
        raise ValueError(f"{name} must have at least 2 dims (..., H, W), got shape {list(shape)}")
    left, right, top, bottom = pad
    if min(pad) < 0:
        raise ValueError(f"pad entries must be >= 0, got {tuple(pad)}")
    if any(pad) and (shape[-2] == 0 or shape[-1] == 0):
        raise ValueError(f"{name} has an empty image (shape {list(shape)}): there is nothing to "
                         f"tile, so pad must be all zeros, got {tuple(pad)}")
    return (*shape[:-2], shape[-2] + top + bottom, shape[-1] + left + right)


@torch.library.register_fake("padding_ops::tile_pad")
def _tile_pad_fake(x, pad, shift=0):
    return x.new_empty(_padded_shape(x.shape, pad, "x"))


@torch.library.register_fake("padding_ops::tile_pad_backward")
def _tile_pad_backward_fake(grad_output, pad, shift=0):
    if len(grad_output.shape) < 2:
        raise ValueError("grad_output must have at least 2 dims (..., Ho, Wo), got shape "
                         f"{list(grad_output.shape)}")
    left, right, top, bottom = pad
    *lead, Ho, Wo = grad_output.shape
    return grad_output.new_empty((*lead, Ho - top - bottom, Wo - left - right))


def _setup_context(ctx, inputs, output):
    _, ctx.pad, ctx.shift = inputs


def _tile_pad_grad(ctx, grad):
    if grad_enabled():  # create_graph=True: through tile_pad_backward's formula (below)
        return _tile_pad_backward(grad, ctx.pad, ctx.shift), None, None
    with below_autograd():  # no graph needed: the kernel, past the Autograd key
        return _tile_pad_backward(grad, ctx.pad, ctx.shift), None, None


def _tile_pad_backward_grad(ctx, grad):  # the backward is linear: its own adjoint is tile_pad
    return _tile_pad(grad, ctx.pad, ctx.shift), None, None


torch.library.register_autograd(
    "padding_ops::tile_pad", _tile_pad_grad, setup_context=_setup_context
)
torch.library.register_autograd(
    "padding_ops::tile_pad_backward", _tile_pad_backward_grad, setup_context=_setup_context
)


def _as_pad(pad):
    try:
        pad = tuple(pad)
    except TypeError:
        raise TypeError(
            f"pad must be a sequence of 4 ints (left, right, top, bottom), got {pad!r}"
        ) from None
    if len(pad) != 4:
        raise ValueError(
            f"pad must have 4 entries (left, right, top, bottom), got {len(pad)}: {pad}"
        )
    try:
        return [operator.index(p) for p in pad]
    except TypeError:
        raise TypeError(f"pad entries must be ints, got {pad}") from None


def tile_pad(x, pad, shift=0):
    """Pad the last two dims of x (..., H, W) as a staggered brick wall.

    pad = (left, right, top, bottom), each >= 0 and of any size (also many times the image).
    The output is (..., H + top + bottom, W + left + right): the input sits at (top, left),
    and each band of H rows below is the band above shifted right by `shift` (any int):

        y[..., r, c] = x[..., r - v*H, (c - v*shift) mod W],  v = floor(r / H),

    in input-relative coordinates r in [-top, H + bottom), c in [-left, W + right).
    shift=0 is circular padding. Every dtype; differentiable for floating dtypes.
    """
    try:
        shift = operator.index(shift)
    except TypeError:
        raise TypeError(f"shift must be an int, got {shift!r}") from None
    pad = _as_pad(pad)
    if not plain_eager(x):  # torch.compile, export, transforms, modes, subclasses: the op
        require_tensors("tile_pad", ("x",), (x,))
        return _tile_pad(x, pad, shift)
    if grad_enabled() and x.requires_grad:
        return _TilePad.apply(x, pad, shift)
    with below_autograd():  # no graph needed: the kernel, past the op's Autograd key
        return _tile_pad(x, pad, shift)


class _TilePad(torch.autograd.Function):
    """tile_pad's autograd formula (_setup_context, _tile_pad_grad: the ones registered
    above) as a plain autograd.Function: tile_pad's eager entry point, for the host time of
    the op's generated wrapper. compile, export, fake tensors and functorch transforms go
    through the op and its registered formula."""

    # forward(ctx, ...) rather than a separate setup_context: half the host time of apply.
    @staticmethod
    def forward(ctx, *inputs):
        with below_autograd():  # straight to the kernel (grad mode is off in here anyway)
            output = _tile_pad(*inputs)
        _setup_context(ctx, inputs, output)
        return output

    backward = staticmethod(_tile_pad_grad)


class TilePad(torch.nn.Module):
    """tile_pad as a module: TilePad(pad=(left, right, top, bottom), shift=0)."""

    def __init__(self, pad, shift=0):
        super().__init__()
        self.pad = _as_pad(pad)
        self.shift = operator.index(shift)

    def forward(self, x):
        return tile_pad(x, self.pad, self.shift)

    def extra_repr(self):
        return f"pad={tuple(self.pad)}, shift={self.shift}"
