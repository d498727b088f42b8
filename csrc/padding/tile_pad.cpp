// Brick padding: schema, the CPU kernels and the CPU registration (the drivers they share
// with CUDA are in tile_pad_driver.h).
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/dispatch.h"
#include "common/module.h"
#include "padding/tile_pad.h"
#include "padding/tile_pad_driver.h"

FUSED_OPS_PYTHON_MODULE(_C)

namespace padding_ops {
namespace {

// ---- CPU kernels ------------------------------------------------------------------------

// Each output row is its source row rotated by base(q) and repeated: copied as runs of
// whole bytes, so one kernel serves every dtype.
void forward_cpu_kernel(const Tensor& x, Tensor& y, const Geometry& g) {
  const int64_t es = x.element_size();
  const char* xp = static_cast<const char*>(x.const_data_ptr());
  char* yp = static_cast<char*>(y.mutable_data_ptr());
  const int64_t grain = std::max<int64_t>(1, 32768 / g.Wo);
  torch::stable::parallel_for(0, g.lead * g.Ho, grain, [&](int64_t r0, int64_t r1) {
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
void backward_cpu_kernel(const Tensor& grad_y, Tensor& grad_x, const Geometry& g) {
  FUSED_OPS_DISPATCH_FLOATING(grad_y.scalar_type(), "tile_pad_backward_cpu", [&] {
    using acc_t = fused_ops::opmath_t<scalar_t>;
    const scalar_t* gy = grad_y.const_data_ptr<scalar_t>();
    scalar_t* gx = grad_x.mutable_data_ptr<scalar_t>();
    const int64_t work_per_row = std::max<int64_t>(1, g.bands * g.Wo);
    const int64_t grain = std::max<int64_t>(1, 65536 / work_per_row);
    torch::stable::parallel_for(0, g.lead * g.H, grain, [&](int64_t p0, int64_t p1) {
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

Tensor forward_cpu(const Tensor& x, const std::vector<int64_t>& pad, int64_t shift) {
  return forward(x, pad, shift, forward_cpu_kernel);
}

Tensor backward_cpu(const Tensor& grad_output, const std::vector<int64_t>& pad, int64_t shift) {
  return backward(grad_output, pad, shift, backward_cpu_kernel);
}

}  // namespace

// Autograd is registered from Python (padding_ops/_ops.py): tile_pad's backward is
// tile_pad_backward, and tile_pad_backward's is tile_pad (the two are adjoint linear maps).
STABLE_TORCH_LIBRARY(padding_ops, m) {
  m.def("tile_pad(Tensor x, int[4] pad, int shift=0) -> Tensor");
  m.def("tile_pad_backward(Tensor grad_output, int[4] pad, int shift=0) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(padding_ops, CPU, m) {
  m.impl("tile_pad", TORCH_BOX(&forward_cpu));
  m.impl("tile_pad_backward", TORCH_BOX(&backward_cpu));
}

}  // namespace padding_ops
