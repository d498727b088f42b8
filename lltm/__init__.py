"""LLTM cell (PyTorch's C++/CUDA extension tutorial) with fused CPU and CUDA kernels."""

from torch_fused_ops import __version__
from lltm._ops import LLTM, lltm_cell

__all__ = ["LLTM", "lltm_cell"]
