"""Brick padding: pad images by repeating them as a staggered brick wall (CPU and CUDA)."""

from padding_ops._ops import TilePad, tile_pad

__all__ = ["TilePad", "tile_pad"]
