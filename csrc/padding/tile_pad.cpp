// Brick padding: schema, input checks, the device-independent drivers and the CPU kernels.
#include "padding/tile_pad.h"

#include <ATen/OpMathType.h>
#include <c10/util/safe_numerics.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/checks.h"
#include "common/module.h"
#include "common/parallel.h"

FUSED_OPS_PYTHON_MODULE(_C)

namespace padding_ops {
namespace {

using fused_ops::shape_str;

// a mod m in [0, m) for any a (floor modulo); m > 0.
int64_t floor_mod(int64_t a, int64_t m) {
  const int64_t r = a % m;
  return r < 0 ? r + m : r;
}

// a * b mod m for a, b in [0, m), without overflow.
int64_t mul_mod(int64_t a, int64_t b, int64_t m) {
  if (m <= (int64_t{1} << 31)) return a * b % m;
  int64_t r = 0;
  for (; b > 0; b >>= 1) {
    if (b & 1) r = r >= m - a ? r - (m - a) : r + a;
    a = a >= m - a ? a - (m - a) : a + a;
  }
  return r;
}

std::string pad_str(at::IntArrayRef pad) {
  std::string s = "(";
  for (size_t k = 0; k < pad.size(); ++k) s += (k ? ", " : "") + std::to_string(pad[k]);
  return s + ")";
}

void check_pad(at::IntArrayRef pad) {
  TORCH_CHECK_VALUE(pad.size() == 4, "pad must have 4 entries (left, right, top, bottom), got ",
                    fused_ops::num(static_cast<int64_t>(pad.size())), ": ", pad_str(pad));
  for (int64_t p : pad) {
    TORCH_CHECK_VALUE(p >= 0, "pad entries must be >= 0, got ", pad_str(pad));
  }
}

// Geometry of padding an image (H, W) by pad = (left, right, top, bottom), with `lead`
// images; checks that the output size is representable.
Geometry make_geometry(int64_t lead, int64_t H, int64_t W, at::IntArrayRef pad, int64_t shift,
                       const char* name, const at::Tensor& t) {
  const int64_t left = pad[0], right = pad[1], top = pad[2], bottom = pad[3];
  const bool padded = left || right || top || bottom;
  TORCH_CHECK_VALUE(!padded || (H > 0 && W > 0), name, " has an empty image (shape ",
                    shape_str(t), "): there is nothing to tile, so pad must be all zeros, got ",
                    pad_str(pad));
  Geometry g{};
  g.lead = lead;
  g.H = H;
  g.W = W;
  uint64_t Ho = 0, Wo = 0, numel = 0;
  const bool overflow =
      c10::add_overflows(static_cast<uint64_t>(H), static_cast<uint64_t>(top), &Ho) ||
      c10::add_overflows(Ho, static_cast<uint64_t>(bottom), &Ho) ||
      c10::add_overflows(static_cast<uint64_t>(W), static_cast<uint64_t>(left), &Wo) ||
      c10::add_overflows(Wo, static_cast<uint64_t>(right), &Wo) ||
      c10::mul_overflows(Ho, Wo, &numel) ||
      c10::mul_overflows(numel, static_cast<uint64_t>(std::max<int64_t>(lead, 1)), &numel) ||
      numel > static_cast<uint64_t>(INT64_MAX / 4);
  TORCH_CHECK_VALUE(!overflow, "padding ", name, " of shape ", shape_str(t), " by ",
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
int64_t leading_size(const at::Tensor& t) {
  uint64_t lead = 1;
  for (int64_t d = 0; d < t.dim() - 2; ++d) {
    if (c10::mul_overflows(lead, static_cast<uint64_t>(t.size(d)), &lead) || lead > INT64_MAX) {
      return INT64_MAX;
    }
  }
  return static_cast<int64_t>(lead);
}

// ---- CPU kernels ------------------------------------------------------------------------

// Each output row is its source row rotated by base(q) and repeated: copied as runs of
// whole bytes, so one kernel serves every dtype.
void forward_cpu_kernel(const at::Tensor& x, at::Tensor& y, const Geometry& g) {
  const int64_t es = x.element_size();
  const char* xp = static_cast<const char*>(x.const_data_ptr());
  char* yp = static_cast<char*>(y.mutable_data_ptr());
  const int64_t grain = std::max<int64_t>(1, 32768 / g.Wo);
  at::parallel_for(0, g.lead * g.Ho, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t l = row / g.Ho, ro = row - l * g.Ho;
      const int64_t a = ro + g.off, q = a / g.H, i = a - q * g.H;
      const char* src = xp + (l * g.H + i) * g.W * es;
      char* dst = yp + row * g.Wo * es;
      int64_t j = band_base<int64_t>(q, g.c0, g.shift, g.W);
      for (int64_t co = 0; co < g.Wo;) {
        const int64_t n = std::min(g.W - j, g.Wo - co);
        std::memcpy(dst + co * es, src + j * es, n * es);
        co += n;
        j = 0;
      }
    }
  });
}

// One task owns whole input rows: it folds every output row that copies input row i
// onto a W-vector in a fixed order (bands ascending, columns ascending), so the result
// does not depend on the number of threads.
void backward_cpu_kernel(const at::Tensor& grad_y, at::Tensor& grad_x, const Geometry& g) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_y.scalar_type(),
                                  "tile_pad_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* gy = grad_y.const_data_ptr<scalar_t>();
    scalar_t* gx = grad_x.mutable_data_ptr<scalar_t>();
    const int64_t work_per_row = std::max<int64_t>(1, g.bands * g.Wo);
    const int64_t grain = std::max<int64_t>(1, 65536 / work_per_row);
    at::parallel_for(0, g.lead * g.H, grain, [&](int64_t p0, int64_t p1) {
      std::vector<acc_t> acc(g.W);
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t l = p / g.H, i = p - l * g.H;
        std::fill(acc.begin(), acc.end(), acc_t(0));
        const int64_t q_end = end_band<int64_t>(i, g.off, g.H, g.Ho);
        for (int64_t q = first_band<int64_t>(i, g.off); q < q_end; ++q) {
          const scalar_t* row = gy + (l * g.Ho + q * g.H + i - g.off) * g.Wo;
          int64_t j = band_base<int64_t>(q, g.c0, g.shift, g.W);
          for (int64_t co = 0; co < g.Wo; ++co) {
            acc[j] += static_cast<acc_t>(row[co]);
            j = j + 1 == g.W ? 0 : j + 1;
          }
        }
        for (int64_t j = 0; j < g.W; ++j) gx[p * g.W + j] = static_cast<scalar_t>(acc[j]);
      }
    });
  });
}

at::Tensor forward_cpu(const at::Tensor& x, at::IntArrayRef pad, int64_t shift) {
  return forward(x, pad, shift, forward_cpu_kernel);
}

at::Tensor backward_cpu(const at::Tensor& grad_output, at::IntArrayRef pad, int64_t shift) {
  return backward(grad_output, pad, shift, backward_cpu_kernel);
}

}  // namespace

at::Tensor forward(const at::Tensor& x, at::IntArrayRef pad, int64_t shift, ForwardKernel kernel) {
  TORCH_CHECK_VALUE(x.dim() >= 2, "x must have at least 2 dims (..., H, W), got a ",
                    fused_ops::num(x.dim()), "-D tensor of shape ", shape_str(x));
  TORCH_CHECK(x.layout() == at::kStrided, "x must be a dense (strided) tensor, got layout ",
              x.layout());
  check_pad(pad);
  const int64_t H = x.size(-2), W = x.size(-1);
  const Geometry g = make_geometry(leading_size(x), H, W, pad, shift, "x", x);
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  sizes[x.dim() - 2] = g.Ho;
  sizes[x.dim() - 1] = g.Wo;
  at::Tensor y = at::empty(sizes, x.options().memory_format(at::MemoryFormat::Contiguous));
  if (y.numel() == 0) return y;
  at::Tensor xc = x.contiguous();
  // Kernels read whole elements: a storage offset that breaks element alignment (a
  // reinterpreted view) is copied into a fresh, aligned buffer first.
  if (reinterpret_cast<std::uintptr_t>(xc.const_data_ptr()) % xc.element_size() != 0) {
    xc = at::empty_like(xc, at::MemoryFormat::Contiguous).copy_(xc);
  }
  kernel(xc, y, g);
  return y;
}

at::Tensor backward(const at::Tensor& grad_output, at::IntArrayRef pad, int64_t shift,
                    BackwardKernel kernel) {
  const at::Tensor& gy = grad_output;
  TORCH_CHECK_VALUE(gy.dim() >= 2, "grad_output must have at least 2 dims (..., Ho, Wo), got a ",
                    fused_ops::num(gy.dim()), "-D tensor of shape ", shape_str(gy));
  TORCH_CHECK(gy.layout() == at::kStrided,
              "grad_output must be a dense (strided) tensor, got layout ", gy.layout());
  fused_ops::check_floating(gy, "grad_output");
  check_pad(pad);
  const int64_t H = gy.size(-2) - pad[2] - pad[3], W = gy.size(-1) - pad[0] - pad[1];
  TORCH_CHECK_VALUE(H >= 0 && W >= 0, "grad_output of shape ", shape_str(gy),
                    " is smaller than the padding ", pad_str(pad),
                    " (left, right, top, bottom) it should include");
  const Geometry g = make_geometry(leading_size(gy), H, W, pad, shift, "grad_output", gy);
  std::vector<int64_t> sizes(gy.sizes().begin(), gy.sizes().end());
  sizes[gy.dim() - 2] = H;
  sizes[gy.dim() - 1] = W;
  at::Tensor grad_x = at::empty(sizes, gy.options().memory_format(at::MemoryFormat::Contiguous));
  if (grad_x.numel() == 0) return grad_x;
  kernel(gy.contiguous(), grad_x, g);
  return grad_x;
}

TORCH_LIBRARY(padding_ops, m) {
  m.def("tile_pad(Tensor x, int[4] pad, int shift=0) -> Tensor");
  m.def("tile_pad_backward(Tensor grad_output, int[4] pad, int shift=0) -> Tensor");
}

TORCH_LIBRARY_IMPL(padding_ops, CPU, m) {
  m.impl("tile_pad", &forward_cpu);
  m.impl("tile_pad_backward", &backward_cpu);
}

}  // namespace padding_ops
