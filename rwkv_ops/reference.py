"""Plain-PyTorch TimeX references used by the tests and the benchmark."""

import torch
import torch.nn.functional as F


def timex_conv1d(w, k, eps=0.0):
    """The conv1d form: a causal depthwise convolution with the kernel w (C, T)."""
    T = k.shape[-1]
    return F.conv1d(F.pad(k, (T - 1, 0)), w.unsqueeze(1), groups=k.shape[1]) + eps


def timex_formula(w, k, eps=0.0):
    """The defining formula, with the lower-triangular Toeplitz matrix of each channel:
    L[c, t, u] = w[c, T-1-(t-u)] for u <= t, else 0; out = eps + L @ k. O(C T^2) memory."""
    C, T = w.shape
    t = torch.arange(T, device=w.device)
    lag = t[:, None] - t[None, :]  # t - u
    L = w[:, (T - 1 - lag).clamp(0, T - 1)] * (lag >= 0)  # (C, T, T)
    return torch.einsum("ctu,bcu->bct", L, k) + eps


def timex_fftconv(w, k, eps=0.0):
    """The FFT convolution in plain PyTorch (the Hyena/H3 `fftconv` idiom): rfft of k and of
    the reversed w at length 2T, their product, irfft, the first T outputs. O(T log T)."""
    T = k.shape[-1]
    n = 2 * T
    k_f = torch.fft.rfft(k, n=n)
    w_f = torch.fft.rfft(w.flip(-1), n=n)
    return torch.fft.irfft(k_f * w_f, n=n)[..., :T] + eps
