"""LLTM cell (PyTorch's C++/CUDA extension tutorial) with fused CPU and CUDA kernels."""

from torch_fused_ops import __version__
from lltm._ops import LLTM, lltm_cell
from lltm._sequence import LLTMLayer, lltm_sequence

__all__ = ["LLTM", "LLTMLayer", "lltm_cell", "lltm_sequence"]
