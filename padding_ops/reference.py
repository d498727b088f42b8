"""Plain-PyTorch references for brick padding, written from the definition.

tile_pad_reference: the direct gather in int64 index arithmetic that tests compare
against (differentiable through advanced indexing).
"""

import torch


def tile_pad_indices(H, W, pad, shift, device=None):
    """Row indices (Ho, 1) and column indices (Ho, Wo) into x of every output pixel."""
    left, right, top, bottom = pad
    r = torch.arange(-top, H + bottom, device=device, dtype=torch.int64)
    c = torch.arange(-left, W + right, device=device, dtype=torch.int64)
    v = torch.div(r, H, rounding_mode="floor")  # band of each output row
    rows = r - v * H
    cols = torch.remainder(c[None, :] - v[:, None] * shift, W)
    return rows[:, None], cols


def tile_pad_reference(x, pad, shift=0):
    """y[..., r, c] = x[..., r - v*H, (c - v*shift) mod W] with v = floor(r / H)."""
    rows, cols = tile_pad_indices(x.shape[-2], x.shape[-1], pad, shift, x.device)
    return x[..., rows, cols]
