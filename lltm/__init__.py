"""LLTM cell (PyTorch's C++/CUDA extension tutorial) with fused CPU and CUDA kernels."""

from lltm._ops import LLTM, lltm_cell

__all__ = ["LLTM", "lltm_cell"]
