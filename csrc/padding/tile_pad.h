// Brick padding ("tile_pad"): the index math shared by the CPU and CUDA kernels, and the
// kernel signatures that the host-side drivers (tile_pad_driver.h) call.
//
// x (..., H, W) -> y (..., Ho, Wo), Ho = H + top + bottom, Wo = W + left + right.
// DESIGN.md's definition, with input-relative r = ro - top, c = co - left and
// v = floor(r / H): y[..., ro, co] = x[..., r - v*H, (c - v*shift) mod W].
//
// The kernels use the same map with every quantity non-negative, so that they divide
// only non-negative numbers:
//   a = ro + off, q = a / H, i = a % H                 (q = v + ceil(top / H): the band)
//   y[..., ro, co] = x[..., i, (co + base(q)) % W],  base(q) = (c0 - q * shift) mod W
// where off = ceil(top / H) * H - top lies in [0, H), shift is taken mod W, and
// c0 = (ceil(top / H) * shift - left) mod W.
//
// The backward gathers: grad_x[..., i, j] sums grad_y[..., ro, co] over every band q that
// meets the output (ro = q*H + i - off in [0, Ho)) and every column co = k*W + j - base(q)
// in [0, Wo) (k = 0, 1, ...), in that fixed order.
#pragma once

#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/macros/Macros.h>

#include <cstdint>

namespace padding_ops {

struct Geometry {
  int64_t lead;   // product of the leading dims (0 when one of them is 0)
  int64_t H, W;   // input image
  int64_t Ho, Wo; // output image
  int64_t off;    // ceil(top / H) * H - top, in [0, H)
  int64_t c0;     // column base of band 0, in [0, W)
  int64_t shift;  // shift mod W, in [0, W)
  int64_t bands;  // bands q in [0, bands) meet the output
  // Every index quantity the kernels form (with room to spare) fits in int32, so the
  // CUDA kernels may divide in 32 bits.
  bool fits32;
};

// base(q) = (c0 - q * shift) mod W. I is the kernel's index type; q * shift < bands * W,
// which fits I (Geometry::fits32 says so for int32).
template <typename I>
C10_HOST_DEVICE inline I band_base(I q, I c0, I shift, I W) {
  const I qs = (q * shift) % W;
  return c0 >= qs ? c0 - qs : c0 + W - qs;
}

// Bands of the output rows that copy input row i: q in [q_lo, q_hi) with
// ro = q*H + i - off in [0, Ho).
template <typename I>
C10_HOST_DEVICE inline I first_band(I i, I off) {
  return i >= off ? 0 : 1;
}
template <typename I>
C10_HOST_DEVICE inline I end_band(I i, I off, I H, I Ho) {
  return (Ho + off - i + H - 1) / H;
}

using Tensor = torch::stable::Tensor;

// Writes y = tile_pad(x): both contiguous, y allocated, y.numel() > 0.
using ForwardKernel = void (*)(const Tensor& x, Tensor& y, const Geometry& g);
// Writes grad_x from grad_y: both contiguous, floating, grad_x.numel() > 0.
using BackwardKernel = void (*)(const Tensor& grad_y, Tensor& grad_x, const Geometry& g);

}  // namespace padding_ops
