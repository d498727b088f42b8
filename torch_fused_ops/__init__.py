"""torch-fused-ops: the foundation every operator family imports (lltm, rwkv_ops, padding_ops).

It holds the build facts, the GPU target list, the oldest supported torch and the library
loader with its torch check (_build.py), and `python -m torch_fused_ops info`. It imports no
family; no family imports another.
"""

from torch_fused_ops._build import BASE_VERSION, MIN_TORCH, build_facts, load_library

# The built version, e.g. 0.1.0+cu130 (`python -m torch_fused_ops info` tells the rest).
__version__ = getattr(build_facts(), "VERSION", BASE_VERSION)
__all__ = ["MIN_TORCH", "__version__", "build_facts", "load_library"]
