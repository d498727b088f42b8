"""The tutorial's CPU module name: the same entry points as `lltm_cuda`."""

from lltm_cuda import backward, forward

__all__ = ["forward", "backward"]
