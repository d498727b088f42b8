// Brick padding: the host-side drivers (input checks, geometry, allocation) that the CPU and
// CUDA registrations share. Everything here is inline: the CPU library (tile_pad.cpp,
// padding_ops._C) and the CUDA library (tile_pad_cuda.cu, padding_ops._C_cuda) are separate
// shared objects loaded without RTLD_GLOBAL, so each must carry its own copy (a driver
// defined only in _C would leave _C_cuda with an unresolvable symbol).
#pragma once

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/Layout.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/alloc.h"
#include "common/checks.h"
#include "padding/tile_pad.h"

namespace padding_ops {
namespace detail {

using fused_ops::num;
using fused_ops::shape_str;
using torch::headeronly::Layout;

// a + b and a * b of unsigned 64-bit numbers into *out; true when they wrap.
inline bool add_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_add_overflow(a, b, out);
}
inline bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

// a mod m in [0, m) for any a (floor modulo); m > 0.
inline int64_t floor_mod(int64_t a, int64_t m) {
  const int64_t r = a % m;
  return r < 0 ? r + m : r;
}

// a * b mod m for a, b in [0, m), without overflow.
inline int64_t mul_mod(int64_t a, int64_t b, int64_t m) {
  if (m <= (int64_t{1} << 31)) return a * b % m;
  int64_t r = 0;
  for (; b > 0; b >>= 1) {
    if (b & 1) r = r >= m - a ? r - (m - a) : r + a;
    a = a >= m - a ? a - (m - a) : a + a;
  }
  return r;
}

inline std::string pad_str(const std::vector<int64_t>& pad) {
  std::string s = "(";
  for (size_t k = 0; k < pad.size(); ++k) s += (k ? ", " : "") + std::to_string(pad[k]);
  return s + ")";
}

inline void check_pad(const std::vector<int64_t>& pad) {
  FUSED_OPS_CHECK_VALUE(pad.size() == 4,
                        "pad must have 4 entries (left, right, top, bottom), got ",
                        num(static_cast<int64_t>(pad.size())), ": ", pad_str(pad));
  for (int64_t p : pad) {
    FUSED_OPS_CHECK_VALUE(p >= 0, "pad entries must be >= 0, got ", pad_str(pad));
  }
}

// t's layout, through the C shim: torch::stable::Tensor::layout() is not in torch 2.10's
// headers (the CUDA 12 wheel is built against them). The shim's code is the enum's value.
inline Layout layout_of(const Tensor& t) {
  int32_t layout = 0;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_layout(t.get(), &layout));
  return static_cast<Layout>(layout);
}

// The name ATen prints for a layout ("Strided", "Sparse", ...).
inline std::string layout_str(Layout layout) {
  switch (layout) {
    case Layout::Strided: return "Strided";
    case Layout::Sparse: return "Sparse";
    case Layout::SparseCsr: return "SparseCsr";
    case Layout::SparseCsc: return "SparseCsc";
    case Layout::SparseBsr: return "SparseBsr";
    case Layout::SparseBsc: return "SparseBsc";
    case Layout::Mkldnn: return "Mkldnn";
    case Layout::Jagged: return "Jagged";
    default: return "layout " + num(static_cast<int64_t>(layout));
  }
}

// Geometry of padding an image (H, W) by pad = (left, right, top, bottom), with `lead`
// images; checks that the output size is representable.
inline Geometry make_geometry(int64_t lead, int64_t H, int64_t W,
                              const std::vector<int64_t>& pad, int64_t shift, const char* name,
                              const Tensor& t) {
  const int64_t left = pad[0], right = pad[1], top = pad[2], bottom = pad[3];
  const bool padded = left || right || top || bottom;
  FUSED_OPS_CHECK_VALUE(!padded || (H > 0 && W > 0), name, " has an empty image (shape ",
                        shape_str(t),
                        "): there is nothing to tile, so pad must be all zeros, got ",
                        pad_str(pad));
  Geometry g{};
  g.lead = lead;
  g.H = H;
  g.W = W;
  uint64_t Ho = 0, Wo = 0, numel = 0;
  const bool overflow =
      add_overflows(static_cast<uint64_t>(H), static_cast<uint64_t>(top), &Ho) ||
      add_overflows(Ho, static_cast<uint64_t>(bottom), &Ho) ||
      add_overflows(static_cast<uint64_t>(W), static_cast<uint64_t>(left), &Wo) ||
      add_overflows(Wo, static_cast<uint64_t>(right), &Wo) ||
      mul_overflows(Ho, Wo, &numel) ||
      mul_overflows(numel, static_cast<uint64_t>(std::max<int64_t>(lead, 1)), &numel) ||
      numel > static_cast<uint64_t>(INT64_MAX / 4);
  FUSED_OPS_CHECK_VALUE(!overflow, "padding ", name, " of shape ", shape_str(t), " by ",
                        pad_str(pad), " gives an output too large to index");
  g.Ho = static_cast<int64_t>(Ho);
  g.Wo = static_cast<int64_t>(Wo);
  if (H == 0 || W == 0) {  // nothing is copied (pad is all zeros)
    g.fits32 = true;
    return g;
  }
  const int64_t bands_above = (top + H - 1) / H;  // ceil(top / H)
  g.off = bands_above * H - top;
  g.shift = floor_mod(shift, W);
  g.c0 = floor_mod(mul_mod(bands_above % W, g.shift, W) - left % W, W);
  g.bands = (g.Ho + g.off + H - 1) / H;
  // The largest index quantities the kernels form: rows of the output and of the input
  // (the CUDA backward's split rows stay below 2^23 by its workspace bound), band times
  // shift, and column positions up to 2 * Wo + 4 * W.
  const int64_t limit = int64_t{1} << 30;
  g.fits32 = lead * g.Ho < limit && lead * H < limit && g.Ho + 2 * H < limit &&
             g.bands * W < limit && 2 * g.Wo + 4 * W < limit;
  return g;
}

// Product of the leading dims, saturated (it can only overflow when the image is empty,
// and then nothing is copied).
inline int64_t leading_size(const Tensor& t) {
  uint64_t lead = 1;
  for (int64_t d = 0; d < t.dim() - 2; ++d) {
    if (mul_overflows(lead, static_cast<uint64_t>(t.size(d)), &lead) || lead > INT64_MAX) {
      return INT64_MAX;
    }
  }
  return static_cast<int64_t>(lead);
}

}  // namespace detail

using detail::check_pad;
using detail::layout_of;
using detail::layout_str;
using detail::leading_size;
using detail::make_geometry;
using detail::pad_str;
using fused_ops::num;
using fused_ops::shape_str;
using torch::headeronly::Layout;

// tile_pad(x, pad, shift) on x's device: checks, allocates y and runs `kernel` on the
// contiguous input.
inline Tensor forward(const Tensor& x, const std::vector<int64_t>& pad, int64_t shift,
                      ForwardKernel kernel) {
  FUSED_OPS_CHECK_VALUE(x.dim() >= 2, "x must have at least 2 dims (..., H, W), got a ",
                        num(x.dim()), "-D tensor of shape ", shape_str(x));
  FUSED_OPS_CHECK(layout_of(x) == Layout::Strided,
                  "x must be a dense (strided) tensor, got layout ", layout_str(layout_of(x)));
  check_pad(pad);
  const int64_t H = x.size(-2), W = x.size(-1);
  const Geometry g = make_geometry(leading_size(x), H, W, pad, shift, "x", x);
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  sizes[x.dim() - 2] = g.Ho;
  sizes[x.dim() - 1] = g.Wo;
  Tensor y = torch::stable::empty(sizes, x.scalar_type(), std::nullopt, x.device());
  if (y.numel() == 0) return y;
  Tensor xc = fused_ops::as_contiguous(x);
  // Kernels read whole elements: a storage offset that breaks element alignment (a
  // reinterpreted view) is copied into a fresh, aligned buffer first.
  if (reinterpret_cast<std::uintptr_t>(xc.const_data_ptr()) % xc.element_size() != 0) {
    Tensor aligned = torch::stable::empty_like(xc);  // xc is contiguous, and so is this
    torch::stable::copy_(aligned, xc);
    xc = aligned;
  }
  kernel(xc, y, g);
  return y;
}

// tile_pad_backward(grad_output, pad, shift): checks, allocates grad_x and runs `kernel`.
inline Tensor backward(const Tensor& grad_output, const std::vector<int64_t>& pad,
                       int64_t shift, BackwardKernel kernel) {
  const Tensor& gy = grad_output;
  FUSED_OPS_CHECK_VALUE(gy.dim() >= 2,
                        "grad_output must have at least 2 dims (..., Ho, Wo), got a ",
                        num(gy.dim()), "-D tensor of shape ", shape_str(gy));
  FUSED_OPS_CHECK(layout_of(gy) == Layout::Strided,
                  "grad_output must be a dense (strided) tensor, got layout ",
                  layout_str(layout_of(gy)));
  fused_ops::check_floating(gy, "grad_output");
  check_pad(pad);
  const int64_t H = gy.size(-2) - pad[2] - pad[3], W = gy.size(-1) - pad[0] - pad[1];
  FUSED_OPS_CHECK_VALUE(H >= 0 && W >= 0, "grad_output of shape ", shape_str(gy),
                        " is smaller than the padding ", pad_str(pad),
                        " (left, right, top, bottom) it should include");
  const Geometry g = make_geometry(leading_size(gy), H, W, pad, shift, "grad_output", gy);
  std::vector<int64_t> sizes(gy.sizes().begin(), gy.sizes().end());
  sizes[gy.dim() - 2] = H;
  sizes[gy.dim() - 1] = W;
  Tensor grad_x = torch::stable::empty(sizes, gy.scalar_type(), std::nullopt, gy.device());
  if (grad_x.numel() == 0) return grad_x;
  kernel(fused_ops::as_contiguous(gy), grad_x, g);
  return grad_x;
}

}  // namespace padding_ops
