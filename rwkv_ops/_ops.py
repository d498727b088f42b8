"""torch.ops.rwkv_ops: fake-tensor and autograd registration, timex() and the TimeX module."""

import math

import torch

from torch_fused_ops import load_library
from torch_fused_ops._eager import (
    any_requires_grad,
    below_autograd,
    grad_enabled,
    plain_eager,
    real_scalar,
    require_tensors,
)

load_library("rwkv_ops")  # registers torch.ops.rwkv_ops.* (after checking the torch)

_forward = torch.ops.rwkv_ops.timex_forward.default
_backward = torch.ops.rwkv_ops.timex_backward.default
_forward_keep = torch.ops.rwkv_ops.timex_forward_keep.default
_backward_kept = torch.ops.rwkv_ops.timex_backward_kept.default

@torch.library.register_fake("rwkv_ops::timex_forward")
def _forward_fake(w, k, eps=0.0):
    return k.new_empty(k.shape)


@torch.library.register_fake("rwkv_ops::timex_backward")
def _backward_fake(grad_out, w, k):
    return w.new_empty(w.shape), k.new_empty(k.shape)


# Autograd. The stable ABI has no C++ autograd, so the formulas are registered here. Without
# create_graph (grad mode off in a backward) each backward calls the ops' kernels directly,
# past their Autograd keys' Python kernels: host time, which small problems are bound by.


def _save_inputs(ctx, inputs, output):
    w, k, _eps = inputs
    ctx.save_for_backward(w, k)


def _forward_backward(ctx, grad):
    w, k = ctx.saved_tensors
    # timex_backward gives both gradients in one pass. With create_graph=True it goes
    # through its own autograd formula (below), so the gradients can be differentiated.
    if torch.is_grad_enabled():
        grad_w, grad_k = _backward(grad, w, k)
    else:
        with below_autograd():
            grad_w, grad_k = _backward(grad, w, k)
    need = ctx.needs_input_grad
    return grad_w if need[0] else None, grad_k if need[1] else None, None


def _save_backward_inputs(ctx, inputs, output):
    ctx.save_for_backward(*inputs)
    ctx.set_materialize_grads(False)  # an unused gradient arrives as None: no zeros


def _backward_backward(ctx, gg_w, gg_k):
    """The derivatives of timex_backward (double backward).

    TimeX is bilinear in (w, k), and each of its gradients is bilinear in grad_out and the
    other argument, so their derivatives are TimeX products again. With gg_w and gg_k the
    gradients arriving for grad_w and grad_k:
      d grad_out = timex(w, gg_k) + timex(gg_w, k)
      d w        = grad_w of timex_backward(grad_out, w, gg_k)   (k replaced by gg_k)
      d k        = grad_k of timex_backward(grad_out, gg_w, k)   (w replaced by gg_w)
    Through the ops' autograd under create_graph=True, so they can be differentiated again.
    """
    grad_out, w, k = ctx.saved_tensors
    need = ctx.needs_input_grad
    if torch.is_grad_enabled():
        return _backward_backward_terms(need, grad_out, w, k, gg_w, gg_k)
    with below_autograd():
        return _backward_backward_terms(need, grad_out, w, k, gg_w, gg_k)


def _backward_backward_terms(need, grad_out, w, k, gg_w, gg_k):
    d_grad_out = d_w = d_k = None
    if need[0]:
        if gg_k is not None:
            d_grad_out = _forward(w, gg_k, 0.0)
        if gg_w is not None:
            term = _forward(gg_w, k, 0.0)
            d_grad_out = term if d_grad_out is None else d_grad_out + term
    if need[1] and gg_k is not None:
        d_w = _backward(grad_out, w, gg_k)[0]
    if need[2] and gg_w is not None:
        d_k = _backward(grad_out, gg_w, k)[1]
    return d_grad_out, d_w, d_k


torch.library.register_autograd(
    "rwkv_ops::timex_forward", _forward_backward, setup_context=_save_inputs
)
torch.library.register_autograd(
    "rwkv_ops::timex_backward", _backward_backward, setup_context=_save_backward_inputs
)


class _TimeX(torch.autograd.Function):
    """timex_forward's autograd formula (_save_inputs, _forward_backward: the ones registered
    above) as a plain autograd.Function: timex's eager entry point. The op's generated
    wrapper costs several times the host time of a Function, which small problems are bound
    by. Where the library FFT runs (long T), the forward keeps the spectra of k and w
    (timex_forward_keep) and the backward starts from them: two FFTs of the five fewer, the
    same bits; where the on-chip FFT kernels run, the spectra of W and k (and fft_cluster's
    twiddle tables; on tensor cores: W's spectra and their exponents). Its backward under
    create_graph=True goes through timex_backward's autograd formula, so double backward works
    as through the op. compile, export, fake tensors and functorch transforms go through the op
    and its registered formula."""

    # forward(ctx, ...) rather than a separate setup_context: half the host time of apply.
    @staticmethod
    def forward(ctx, w, k, eps):
        with below_autograd():  # straight to the kernel (grad mode is off in here anyway)
            output, kz, wz = _forward_keep(w, k, eps)
        ctx.save_for_backward(w, k, kz, wz)
        return output

    @staticmethod
    def backward(ctx, grad):
        w, k, kz, wz = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: the differentiable formula
            grad_w, grad_k = _backward(grad, w, k)
        else:
            with below_autograd():
                grad_w, grad_k = _backward_kept(grad, w, k, kz, wz)
        need = ctx.needs_input_grad
        return grad_w if need[0] else None, grad_k if need[1] else None, None


def timex(w, k, eps=0.0):
    """RWKV's TimeX: out[b, c, t] = eps + sum_{u <= t} w[c, T-1-(t-u)] * k[b, c, u].

    w (C, T) and k (B, C, T) on one device with one floating dtype; returns (B, C, T).
    Differentiable in w and k (eps is a constant). Equal to
    `F.conv1d(F.pad(k, (T-1, 0)), w.unsqueeze(1), groups=C) + eps`.
    """
    eps = real_scalar("timex", "eps", eps)
    if not plain_eager(w, k):  # torch.compile, export, transforms, modes, subclasses: the op
        require_tensors("timex", ("w", "k"), (w, k))
        return _forward(w, k, eps)
    if grad_enabled() and any_requires_grad(w, k):
        return _TimeX.apply(w, k, eps)
    with below_autograd():  # no graph needed: the kernel, past the op's Autograd key
        return _forward(w, k, eps)


_ALGORITHMS = ("direct", "fft_library", "fft_fused", "fft_cluster", "fft_tc")  # timex_fft.h


def timex_algorithm(k):
    """The algorithm that timex runs for k (B, C, T) on its device and dtype: "direct" (the
    Toeplitz kernels, cost B*C*T^2), "fft_library" (FFT convolution through ATen's FFT,
    cuFFT or pocketfft, with this package's fused pointwise passes), "fft_fused" (the
    on-chip FFT kernels, one CTA per row, CUDA, T <= 16384), "fft_cluster" (the on-chip
    FFT kernels with a row per thread-block cluster, sm_90, T <= 65536) or "fft_tc" (the
    on-chip FFT on tensor cores, a CTA per pair of batch rows, bfloat16 and float16, sm_80,
    T <= 16384). RWKV_TIMEX_ALGO=direct|fft|fft_library|fft_fused|fft_cluster|fft_tc|auto
    forces it."""
    return _ALGORITHMS[torch.ops.rwkv_ops.timex_algorithm(k)]


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
        require_tensors("TimeX", ("k",), (k,))
        if k.dim() != 3:
            raise ValueError(f"k must be a 3-D tensor (B, channels, T), got shape {tuple(k.shape)}")
        T = k.shape[-1]
        if T > self.max_len:
            raise ValueError(f"k has {T} time steps but this TimeX holds max_len={self.max_len}")
        return timex(self.w[:, self.max_len - T :], k, self.eps)

    def extra_repr(self):
        return f"channels={self.channels}, max_len={self.max_len}, eps={self.eps}"
