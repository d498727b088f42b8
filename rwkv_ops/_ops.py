"""torch.ops.rwkv_ops: fake-tensor and autograd registration, timex() and the TimeX module."""

import math

import torch

from torch_fused_ops import load_library

load_library("rwkv_ops")  # registers torch.ops.rwkv_ops.* (after checking the torch)

_forward = torch.ops.rwkv_ops.timex_forward.default


@torch.library.register_fake("rwkv_ops::timex_forward")
def _forward_fake(w, k, eps=0.0):
    return k.new_empty(k.shape)


@torch.library.register_fake("rwkv_ops::timex_backward")
def _backward_fake(grad_out, w, k):
    return w.new_empty(w.shape), k.new_empty(k.shape)


# The autograd formula is registered in C++ (csrc/rwkv/timex.cpp, TimexFunction): the
# backward calls timex_backward, which gives both gradients in one pass.


def timex(w, k, eps=0.0):
    """RWKV's TimeX: out[b, c, t] = eps + sum_{u <= t} w[c, T-1-(t-u)] * k[b, c, u].

    w (C, T) and k (B, C, T) on one device with one floating dtype; returns (B, C, T).
    Differentiable in w and k (eps is a constant). Equal to
    `F.conv1d(F.pad(k, (T-1, 0)), w.unsqueeze(1), groups=C) + eps`.
    """
    return _forward(w, k, float(eps))


class TimeX(torch.nn.Module):
    """TimeX with a learnable weight `w` of shape (channels, max_len).

    forward(k) takes k (B, channels, T) with T <= max_len and uses the last T columns of w,
    w[:, max_len-T:], as RWKV does (the last column weighs the current time step). `w` is
    initialised uniformly in +-1/sqrt(max_len); `eps` is added to every output.
    """

    def __init__(self, channels: int, max_len: int, eps: float = 0.0):
        super().__init__()
        self.channels = channels
        self.max_len = max_len
        self.eps = eps
        self.w = torch.nn.Parameter(torch.empty(channels, max_len))
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(self.max_len)
        torch.nn.init.uniform_(self.w, -bound, bound)

    def forward(self, k):
        if k.dim() != 3:
            raise ValueError(f"k must be a 3-D tensor (B, channels, T), got shape {tuple(k.shape)}")
        T = k.shape[-1]
        if T > self.max_len:
            raise ValueError(f"k has {T} time steps but this TimeX holds max_len={self.max_len}")
        return timex(self.w[:, self.max_len - T :], k, self.eps)

    def extra_repr(self):
        return f"channels={self.channels}, max_len={self.max_len}, eps={self.eps}"
