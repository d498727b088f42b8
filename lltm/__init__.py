"""LLTM cell (PyTorch's C++/CUDA extension tutorial) with fused CPU and CUDA kernels."""

from lltm._build import BASE_VERSION, build_facts
from lltm._ops import LLTM, lltm_cell

# The built version, e.g. 0.1.0+torch2.14cu130 (`python -m lltm info` tells the rest).
__version__ = getattr(build_facts(), "VERSION", BASE_VERSION)
__all__ = ["LLTM", "lltm_cell"]
