"""The classic brick-wall picture: a 48x32 RGB gradient tile padded by (4096, 4096, 2048, 2048)
with shift 10, so each band of 48 rows is the band above moved 10 pixels right.

    python -m benchmarks.brick_wall [OUT.png] [--device cpu|cuda] [--step N]

Writes the full 8224 x 4144 image (the repetitive picture compresses to a few MB), or every
N-th pixel of each row and column with --step N. Uses matplotlib or PIL when installed, else
writes the PNG itself with zlib.
"""

import argparse
import struct
import zlib
from pathlib import Path

import torch

import padding_ops

PAD, SHIFT = (4096, 4096, 2048, 2048), 10


def gradient_tile(height=48, width=32):
    """(3, H, W) uint8: red grows left to right, green top to bottom, blue against red; the
    last row and column are dark mortar."""
    ramp_x = torch.linspace(0, 1, width).expand(height, width)
    ramp_y = torch.linspace(0, 1, height)[:, None].expand(height, width)
    tile = torch.stack([0.35 + 0.6 * ramp_x, 0.2 + 0.5 * ramp_y, 0.6 - 0.4 * ramp_x])
    tile[:, -1, :] = 0.15
    tile[:, :, -1] = 0.15
    return (tile * 255).round().to(torch.uint8)


def write_png(path, rgb):
    """rgb: (H, W, 3) uint8 CPU tensor."""
    try:
        import matplotlib.pyplot as plt

        plt.imsave(path, rgb.numpy())
        return "matplotlib"
    except ImportError:
        pass
    try:
        from PIL import Image

        Image.fromarray(rgb.numpy()).save(path)
        return "PIL"
    except ImportError:
        pass
    height, width, _ = rgb.shape
    # Each scanline: filter byte 0 (none), then the row's RGB bytes.
    raw = torch.cat([torch.zeros(height, 1, dtype=torch.uint8), rgb.reshape(height, -1)], 1)

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
           + chunk(b"IDAT", zlib.compress(raw.numpy().tobytes(), 9)) + chunk(b"IEND", b""))
    Path(path).write_bytes(png)
    return "zlib"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", default="benchmarks/results/brick_wall.png")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--step", type=int, default=1, help="keep every N-th row and column")
    args = parser.parse_args()
    wall = padding_ops.tile_pad(gradient_tile().to(args.device), PAD, SHIFT)  # (3, 4144, 8224)
    rgb = wall[:, :: args.step, :: args.step].permute(1, 2, 0).contiguous().cpu()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    how = write_png(args.out, rgb)
    size_mb = Path(args.out).stat().st_size / 1e6
    print(f"wrote {args.out}: {rgb.shape[1]} x {rgb.shape[0]} RGB (tile 48x32, pad {PAD}, "
          f"shift {SHIFT}, step {args.step}), {size_mb:.2f} MB, via {how}")


if __name__ == "__main__":
    main()
