"""RWKV TimeX: RWKV's causal depthwise convolution over time, with fused CPU and CUDA kernels."""

from rwkv_ops._ops import TimeX, timex, timex_algorithm

__all__ = ["TimeX", "timex", "timex_algorithm"]
