"""LLTM cell (PyTorch's C++/CUDA extension tutorial) with fused CPU and CUDA kernels."""

from torch_fused_ops import __version__
from lltm._ops import LLTM, lltm_cell
from lltm._sequence import LLTMLayer, lltm_sequence
from lltm import _tutorial  # noqa: F401  (registers tutorial_forward/backward's fake and autograd)

__all__ = ["LLTM", "LLTMLayer", "lltm_cell", "lltm_sequence"]
