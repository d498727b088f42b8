// LLTM over a sequence: the schemas of lltm_sequence_forward and lltm_sequence_backward and
// their CPU implementation. The driver (checks, buffers, the GEMMs over all steps, the
// per-step loop) is lltm_sequence_driver.h; the CPU part here is the pointwise pass of one
// step, parallel over the batch, run between the per-step recurrent GEMMs (MKL/oneDNN through
// aten::mm). The autograd formula lives in Python (lltm/_sequence.py).
#include <torch/csrc/inductor/aoti_torch/generated/c_shim_cpu.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <cstring>

#include "common/cpu_features.h"
#include "common/dispatch.h"
#include "lltm/lltm.h"
#include "lltm/lltm_cpu_avx2.h"
#include "lltm/lltm_sequence_driver.h"

namespace lltm {
namespace {

// Rows per parallel_for task: about 16k elements of work each (below that a task costs more
// to hand to another thread than it takes; a whole step of a small batch runs inline).
int64_t seq_grain_rows(int64_t state_size) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, state_size));
}

// The cell's AVX2 kernels (lltm_cpu_avx2.cpp) for float32 on an AVX2 CPU; false means the
// caller runs its scalar loop.
template <typename T>
bool seq_vector_forward(const T*, const T*, T*, T*, int64_t, int64_t, int64_t) {
  return false;
}
bool seq_vector_forward(const float* z, const float* c_prev, float* h, float* c, int64_t b0,
                        int64_t b1, int64_t S) {
  if (!fused_ops::cpu_has_avx2()) return false;
  forward_rows_avx2(z, c_prev, h, c, nullptr, b0, b1, S);
  return true;
}
template <typename T, typename Acc>
bool seq_vector_backward(const T*, Acc*, const T*, T*, int64_t, int64_t, int64_t) {
  return false;
}
// dh and the carry are both float here, so the cell's kernel runs in place: dh as grad_h,
// the carry as grad_cell and d_old_cell, dz over z (each element is read before it is
// written, lltm_cpu_avx2.cpp).
bool seq_vector_backward(const float* dh, float* carry, const float* c_t, float* dz, int64_t b0,
                         int64_t b1, int64_t S) {
  if (!fused_ops::cpu_has_avx2()) return false;
  backward_rows_avx2(dh, carry, c_t, dz, dz, carry, b0, b1, S);
  return true;
}

// One forward step on rows of the batch: z = P_t + rec (rounded to scalar_t: the z that
// gates keeps and the backward reads), then the cell.
template <typename scalar_t>
void forward_step_rows(const Tensor& rec, Tensor& gates, Tensor& hs, Tensor& cells, int64_t t) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  const int64_t B = hs.size(1), S = hs.size(2);
  const scalar_t* r = rec.const_data_ptr<scalar_t>();
  scalar_t* z = gates.mutable_data_ptr<scalar_t>() + t * B * 3 * S;
  const scalar_t* c_prev = cells.const_data_ptr<scalar_t>() + t * B * S;
  scalar_t* h_out = hs.mutable_data_ptr<scalar_t>() + (t + 1) * B * S;
  scalar_t* c_out = cells.mutable_data_ptr<scalar_t>() + (t + 1) * B * S;
  torch::stable::parallel_for(0, B, seq_grain_rows(S), [&](int64_t b0, int64_t b1) {
    for (int64_t i = b0 * 3 * S; i < b1 * 3 * S; ++i) {
      z[i] = static_cast<acc_t>(z[i]) + static_cast<acc_t>(r[i]);
    }
    if (seq_vector_forward(z, c_prev, h_out, c_out, b0, b1, S)) return;
    for (int64_t b = b0; b < b1; ++b) {
      const scalar_t* zb = z + b * 3 * S;
      for (int64_t j = 0; j < S; ++j) {
        acc_t h, c;
        cell_forward<acc_t>(zb[j], zb[S + j], zb[2 * S + j], c_prev[b * S + j], h, c);
        h_out[b * S + j] = h;
        c_out[b * S + j] = c;
      }
    }
  });
}

// One backward step on rows of the batch. rec_dh is scratch that the next GEMM overwrites:
// dh = grad_hs[t+1] + rec_dh goes there first, rounded to scalar_t as the cell's grad_h is.
template <typename scalar_t>
void backward_step_rows(const Tensor& grad_hs, const Tensor& rec_dh, const Tensor& cells,
                        Tensor& dz, Tensor& carry, int64_t t) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  const int64_t B = cells.size(1), S = cells.size(2);
  const scalar_t* gh = grad_hs.const_data_ptr<scalar_t>() + (t + 1) * B * S;
  scalar_t* dh = rec_dh.mutable_data_ptr<scalar_t>();
  const scalar_t* c_t = cells.const_data_ptr<scalar_t>() + (t + 1) * B * S;
  scalar_t* z = dz.mutable_data_ptr<scalar_t>() + t * B * 3 * S;
  acc_t* dc = carry.mutable_data_ptr<acc_t>();
  torch::stable::parallel_for(0, B, seq_grain_rows(S), [&](int64_t b0, int64_t b1) {
    for (int64_t k = b0 * S; k < b1 * S; ++k) {
      dh[k] = static_cast<acc_t>(gh[k]) + static_cast<acc_t>(dh[k]);
    }
    if (seq_vector_backward(dh, dc, c_t, z, b0, b1, S)) return;
    for (int64_t b = b0; b < b1; ++b) {
      scalar_t* zb = z + b * 3 * S;
      for (int64_t j = 0; j < S; ++j) {
        const int64_t k = b * S + j;
        acc_t d_i, d_o, d_c, d_cell;
        cell_backward<acc_t>(dh[k], dc[k], c_t[k], zb[j], zb[S + j], zb[2 * S + j], d_i, d_o,
                             d_c, d_cell);
        zb[j] = d_i;
        zb[S + j] = d_o;
        zb[2 * S + j] = d_c;
        dc[k] = d_cell;
      }
    }
  });
}

void forward_step_cpu(const Tensor& rec, Tensor& gates, Tensor& hs, Tensor& cells, int64_t t) {
  FUSED_OPS_DISPATCH_FLOATING(gates.scalar_type(), "lltm_sequence_forward_cpu", [&] {
    forward_step_rows<scalar_t>(rec, gates, hs, cells, t);
  });
}

void backward_step_cpu(const Tensor& grad_hs, const Tensor& rec_dh, const Tensor& cells,
                       Tensor& dz, Tensor& carry, int64_t t) {
  FUSED_OPS_DISPATCH_FLOATING(dz.scalar_type(), "lltm_sequence_backward_cpu", [&] {
    backward_step_rows<scalar_t>(grad_hs, rec_dh, cells, dz, carry, t);
  });
}

// The driver's primitives on the CPU (lltm_sequence_driver.h's SeqDevice).
void copy2d_cpu(const Tensor&, void* dst, int64_t dpitch, const void* src, int64_t spitch,
                int64_t width, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch,
                static_cast<size_t>(width));
  }
}

void zero_cpu(const Tensor&, void* dst, int64_t bytes) {
  if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
}

void add_cpu(const Tensor& like, void* out, const void* a, const void* b, int64_t n) {
  FUSED_OPS_DISPATCH_FLOATING(like.scalar_type(), "lltm_sequence_backward_cpu", [&] {
    using acc_t = fused_ops::opmath_t<scalar_t>;
    const scalar_t* x = static_cast<const scalar_t*>(a);
    const scalar_t* y = static_cast<const scalar_t*>(b);
    scalar_t* o = static_cast<scalar_t*>(out);
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<acc_t>(x[i]) + static_cast<acc_t>(y[i]);
  });
}

// Column sums in double, rows in order (deterministic), rounded once to scalar_t.
void column_sum_cpu(const Tensor& like, void* out, const void* x, int64_t rows, int64_t n) {
  FUSED_OPS_DISPATCH_FLOATING(like.scalar_type(), "lltm_sequence_backward_cpu", [&] {
    const scalar_t* in = static_cast<const scalar_t*>(x);
    std::vector<double> acc(static_cast<size_t>(n), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const scalar_t* row = in + r * n;
      for (int64_t j = 0; j < n; ++j) acc[j] += static_cast<double>(row[j]);
    }
    scalar_t* o = static_cast<scalar_t*>(out);
    for (int64_t j = 0; j < n; ++j) o[j] = static_cast<scalar_t>(acc[j]);
  });
}

constexpr SeqDevice kCpu{aoti_torch_cpu_mm_out, aoti_torch_cpu_addmm_out, copy2d_cpu, zero_cpu,
                         add_cpu, column_sum_cpu};

void forward_recurrence_cpu(const Tensor& w_h, Tensor& gates, Tensor& hs, Tensor& cells,
                            const SeqSizes& sz) {
  per_step_forward(kCpu, w_h, gates, hs, cells, sz, forward_step_cpu);
}

void backward_recurrence_cpu(const Tensor& w_h, Tensor& dz, const Tensor& cells,
                             const Tensor& grad_hs, const Tensor& grad_c_n, Tensor& d_h0,
                             Tensor& d_c0, const SeqSizes& sz) {
  per_step_backward(kCpu, w_h, dz, cells, grad_hs, grad_c_n, d_h0, d_c0, sz, backward_step_cpu);
}

std::tuple<Tensor, Tensor, Tensor> sequence_forward_cpu(Tensor input, Tensor weights,
                                                        Tensor bias, Tensor h0, Tensor c0) {
  const SeqSizes sz = check_sequence_forward_args(input, weights, bias, h0, c0);
  return sequence_forward(kCpu, input, weights, bias, h0, c0, sz, forward_recurrence_cpu);
}

SeqGrads sequence_backward_cpu(Tensor grad_hs, Tensor grad_c_n, Tensor input, Tensor weights,
                               Tensor hs, Tensor cells, Tensor gates, SeqGradMask output_mask) {
  const SeqSizes sz = check_sequence_backward_args(grad_hs, grad_c_n, input, weights, hs, cells,
                                                   gates, output_mask);
  return sequence_backward(kCpu, grad_hs, grad_c_n, input, weights, hs, cells, gates, output_mask, sz,
                           backward_recurrence_cpu);
}

}  // namespace

// A fragment: the lltm library itself (the cell's ops) is defined in lltm.cpp.
STABLE_TORCH_LIBRARY_FRAGMENT(lltm, m) {
  m.def(
      "lltm_sequence_forward(Tensor input, Tensor weights, Tensor bias, Tensor h0, Tensor c0) "
      "-> (Tensor hs, Tensor cells, Tensor gates)");
  m.def(
      "lltm_sequence_backward(Tensor grad_hs, Tensor grad_c_n, Tensor input, Tensor weights, "
      "Tensor hs, Tensor cells, Tensor gates, bool[3] output_mask) "
      "-> (Tensor d_input, Tensor d_weights, Tensor d_bias, Tensor d_h0, Tensor d_c0)");
}

STABLE_TORCH_LIBRARY_IMPL(lltm, CPU, m) {
  m.impl("lltm_sequence_forward", TORCH_BOX(&sequence_forward_cpu));
  m.impl("lltm_sequence_backward", TORCH_BOX(&sequence_backward_cpu));
}

}  // namespace lltm
