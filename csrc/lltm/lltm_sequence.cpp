// LLTM over a sequence: the schemas of lltm_sequence_forward and lltm_sequence_backward and
// their CPU implementation. The checks and the tensor helpers are lltm_sequence_driver.h's
// (shared with the CUDA library); the CPU plan (lltm_sequence_cpu.h): the input projection of
// all steps is one GEMM before the recurrence, the recurrence runs with each thread on its own
// block of batch rows through every step (one parallel region per call), on W_h packed once
// per call, and the weight and input gradients are GEMMs over all steps after the backward
// recurrence. float16 and bfloat16 are computed in float: their weights and inputs converted
// once per call, the outputs rounded once. The autograd formula lives in Python
// (lltm/_sequence.py).
#include <torch/csrc/inductor/aoti_torch/generated/c_shim_cpu.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <cstring>

#include "common/cpu_features.h"
#include "common/dispatch.h"
#include "lltm/lltm_sequence_cpu.h"
#include "lltm/lltm_sequence_driver.h"
#include "lltm/lltm_sequence_scalar.h"

namespace lltm {
namespace {

using torch::headeronly::ScalarType;

// The driver's copy primitives on the CPU (SeqDevice: seq_copy_matrix, seq_copy_all).
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
// out = a + b (a nullptr: zeros) in the opmath type, rounded once: grad_hs[T] = grad_output[T-1]
// + grad_h_n where the driver assembles grad_hs (seq_grad_hs), as ATen's add of two tensors.
void add_cpu(const Tensor& like, void* out, const void* a, const void* b, int64_t n) {
  FUSED_OPS_DISPATCH_FLOATING(like.scalar_type(), "lltm_sequence_backward_cpu", [&] {
    using acc_t = fused_ops::opmath_t<scalar_t>;
    auto* o = static_cast<scalar_t*>(out);
    const auto* x = static_cast<const scalar_t*>(a);
    const auto* y = static_cast<const scalar_t*>(b);
    for (int64_t i = 0; i < n; ++i) {
      const acc_t xi = x != nullptr ? static_cast<acc_t>(x[i]) : acc_t(0);
      o[i] = static_cast<scalar_t>(xi + static_cast<acc_t>(y[i]));
    }
  });
}
// column_sum and the weight-gradient kernel's pair stay unset: the CPU backward (below) sums
// the bias and runs the weight GEMMs itself.
constexpr SeqDevice kCpu{aoti_torch_cpu_mm_out, aoti_torch_cpu_addmm_out, copy2d_cpu, zero_cpu,
                         add_cpu, nullptr, nullptr, nullptr};

Storage storage_of(ScalarType type) {
  return type == ScalarType::Half       ? Storage::Half
         : type == ScalarType::BFloat16 ? Storage::BFloat16
                                        : Storage::Float;
}

// t as a contiguous tensor of dtype `type`: t itself where it already is one, else a
// converted copy (aten::copy_, once per call).
Tensor as_type(const Tensor& t, ScalarType type) {
  if (t.scalar_type() == type) return as_contiguous(t);
  Tensor out = fused_ops::empty_shaped(t, type);
  torch::stable::copy_(out, t);
  return out;
}

// The AVX2 kernels take float (and float16 / bfloat16 storage) on an AVX2 CPU; float64 and
// CPUs without AVX2 take the scalar ones.
template <typename acc_t>
constexpr bool kHasAvx2Kernels = std::is_same_v<acc_t, float>;

template <typename scalar_t>
void forward_recurrence(const Tensor& w_acc, const Tensor& proj, Tensor& gates, Tensor& hs,
                        Tensor& cells, const SeqSizes& sz) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  const int64_t B = sz.batch, S = sz.state;
  Tensor w_pack = new_empty({fwd_pack_size(S)}, proj);
  pack_forward<acc_t>(w_acc.const_data_ptr<acc_t>(), w_acc.stride(0), w_acc.stride(1), S,
                      w_pack.mutable_data_ptr<acc_t>());
  Tensor state = new_empty({3, B, state_pitch(S)}, proj);  // h_{t-1}, h_t, c_t
  acc_t* st = state.mutable_data_ptr<acc_t>();
  const CpuForward<acc_t> a{w_pack.const_data_ptr<acc_t>(),
                            proj.const_data_ptr<acc_t>(),
                            gates.mutable_data_ptr(),
                            hs.mutable_data_ptr(),
                            cells.mutable_data_ptr(),
                            st,
                            st + 2 * B * state_pitch(S),
                            sz.steps,
                            B,
                            S};
  const Storage storage = storage_of(gates.scalar_type());
  // Grain 1: one block of rows per thread (at::parallel_for splits [0, B) into as many equal
  // chunks as it has threads, or runs inline for B = 1).
  torch::stable::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
    if constexpr (kHasAvx2Kernels<acc_t>) {
      if (fused_ops::cpu_has_avx2()) return forward_recurrence_avx2(storage, a, b0, b1);
    }
    forward_recurrence_scalar<scalar_t>(a, b0, b1);
  });
}

std::tuple<Tensor, Tensor, Tensor> sequence_forward_cpu(Tensor input, Tensor weights,
                                                        Tensor bias, Tensor h0, Tensor c0) {
  const SeqSizes sz = check_sequence_forward_args(input, weights, bias, h0, c0);
  const int64_t T = sz.steps, B = sz.batch, S = sz.state;
  Tensor hs = new_empty({T + 1, B, S}, input);
  Tensor cells = new_empty({T + 1, B, S}, input);
  Tensor gates = new_empty({T, B, 3 * S}, input);
  if (B > 0 && S > 0) {
    Tensor hs0 = seq_view(hs, 0, {B, S});
    seq_copy_matrix(kCpu, hs0, h0);
    Tensor cells0 = seq_view(cells, 0, {B, S});
    seq_copy_matrix(kCpu, cells0, c0);
  }
  if (T == 0 || B == 0 || S == 0) return {hs, cells, gates};
  const ScalarType dtype = input.scalar_type(), acc = fused_ops::opmath_type(dtype);
  // P = x W_x^T + bias for every step at once: one addmm (what aten::linear runs), in the
  // accumulation type (for a half type on converted copies, into a float buffer; else
  // straight into gates, which the recurrence then overwrites with z in place).
  const Tensor w_acc = acc == dtype ? weights : as_type(weights, acc);
  const Tensor proj = acc == dtype ? gates : fused_ops::empty({T, B, 3 * S}, acc, input);
  const Tensor x_acc = acc == dtype ? input : as_type(input, acc);
  const Tensor b_acc = acc == dtype ? bias : as_type(bias, acc);
  const Tensor w_x = seq_input_weights(w_acc, sz);
  const Tensor w_x_t = seq_strided(w_x, 0, {sz.features, 3 * S}, {w_x.stride(1), w_x.stride(0)});
  seq_check(aoti_torch_cpu_addmm_out(seq_view(proj, 0, {T * B, 3 * S}).get(), b_acc.get(),
                                     seq_flat_input(x_acc, sz).get(), w_x_t.get(), 1.0, 1.0));
  FUSED_OPS_DISPATCH_FLOATING(dtype, "lltm_sequence_forward_cpu", [&] {
    forward_recurrence<scalar_t>(w_acc, proj, gates, hs, cells, sz);
  });
  return {hs, cells, gates};
}

template <typename scalar_t>
void backward_recurrence(const Tensor& w_acc, const Tensor& gates, const Tensor& cells,
                         const Tensor& grad_hs, const Tensor& grad_c_n, Tensor& dz, Tensor& d_h0,
                         Tensor& d_c0, const SeqSizes& sz) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  const int64_t B = sz.batch, S = sz.state;
  Tensor w_pack = new_empty({bwd_pack_size(S)}, dz);
  pack_backward<acc_t>(w_acc.const_data_ptr<acc_t>(), w_acc.stride(0), w_acc.stride(1), S,
                       w_pack.mutable_data_ptr<acc_t>());
  Tensor dc_state = new_empty({B, state_pitch(S)}, dz);
  const CpuBackward<acc_t> a{w_pack.const_data_ptr<acc_t>(), gates.const_data_ptr(),
                             cells.const_data_ptr(),          grad_hs.const_data_ptr(),
                             grad_c_n.const_data_ptr(),       dz.mutable_data_ptr<acc_t>(),
                             d_h0.mutable_data_ptr(),         d_c0.mutable_data_ptr(),
                             dc_state.mutable_data_ptr<acc_t>(), sz.steps, B, S};
  const Storage storage = storage_of(gates.scalar_type());
  torch::stable::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
    if constexpr (kHasAvx2Kernels<acc_t>) {
      if (fused_ops::cpu_has_avx2()) return backward_recurrence_avx2(storage, a, b0, b1);
    }
    backward_recurrence_scalar<scalar_t>(a, b0, b1);
  });
}

// out[j] = sum over rows r of x[r n + j] (x in acc_t), summed in double in row order
// (deterministic, whatever the thread count: each column is one thread's), rounded once.
template <typename scalar_t>
void column_sum(const Tensor& x, Tensor& out, int64_t rows, int64_t n) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  constexpr int64_t kCols = 256;  // columns per task (a row of partial sums on the stack)
  const acc_t* in = x.const_data_ptr<acc_t>();
  scalar_t* o = out.mutable_data_ptr<scalar_t>();
  const int64_t tasks = (n + kCols - 1) / kCols;
  torch::stable::parallel_for(0, tasks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t j0 = c * kCols, width = std::min(kCols, n - j0);
      double acc[kCols] = {};
      for (int64_t r = 0; r < rows; ++r) {
        const acc_t* row = in + r * n + j0;
        for (int64_t j = 0; j < width; ++j) acc[j] += static_cast<double>(row[j]);
      }
      for (int64_t j = 0; j < width; ++j) o[j0 + j] = static_cast<scalar_t>(acc[j]);
    }
  });
}

SeqGrads sequence_backward_cpu(OptTensor grad_hs_arg, OptTensor grad_c_n_arg, Tensor input,
                               Tensor weights, Tensor hs, Tensor cells, Tensor gates,
                               SeqGradMask mask, OptTensor grad_h_n) {
  const SeqSizes sz = check_sequence_backward_args(grad_hs_arg, grad_c_n_arg, input, weights, hs,
                                                   cells, gates, mask, grad_h_n);
  const int64_t T = sz.steps, B = sz.batch, F = sz.features, S = sz.state;
  const SeqGradParts parts = seq_grad_parts(grad_hs_arg, grad_h_n, grad_c_n_arg, sz);
  const ScalarType dtype = input.scalar_type(), acc = fused_ops::opmath_type(dtype);
  Tensor d_h0 = new_empty({B, S}, input);
  Tensor d_c0 = new_empty({B, S}, input);
  // dz = dL/dz_t of every step, in the accumulation type (float for the half types: the
  // GEMMs below then run in float on it).
  Tensor dz = fused_ops::empty({T, B, 3 * S}, acc, input);
  // The weights in the accumulation type: W_h for the recurrence, W_x for d_input.
  const bool need_weights = (T > 0 && B > 0 && S > 0) || mask[0];
  const Tensor w_acc = !need_weights || acc == dtype ? weights : as_type(weights, acc);
  // The recurrence reads the (T+1, B, S) gradient of hs and a dL/dc_n tensor: the op's
  // arguments where given so, else assembled (zeros for what is absent).
  if (T == 0 || B == 0 || S == 0) {
    if (B > 0 && S > 0) {
      seq_copy_matrix(kCpu, d_h0, seq_view(seq_grad_hs(kCpu, parts, input, sz), 0, {B, S}));
      seq_copy_matrix(kCpu, d_c0, seq_grad_c_n(kCpu, parts, input, sz));
    }
  } else {
    const Tensor g = as_contiguous(gates), c = as_contiguous(cells);
    const Tensor gh = seq_grad_hs(kCpu, parts, input, sz);
    const Tensor gc = seq_grad_c_n(kCpu, parts, input, sz);
    FUSED_OPS_DISPATCH_FLOATING(dtype, "lltm_sequence_backward_cpu", [&] {
      backward_recurrence<scalar_t>(w_acc, g, c, gh, gc, dz, d_h0, d_c0, sz);
    });
  }
  auto skipped = [&] { return new_empty({0}, input); };
  // A result computed in the accumulation type, as the op's dtype (converted once).
  auto in_dtype = [&](const Tensor& t) { return acc == dtype ? t : as_type(t, dtype); };
  const Tensor dz2 = seq_view(dz, 0, {T * B, 3 * S});
  const Tensor dz2_t = seq_strided(dz, 0, {3 * S, T * B}, {1, 3 * S});  // dz^T, a view
  Tensor d_input = skipped();
  if (mask[0]) {
    // d_x = dz W_x: one GEMM over all steps (W_x a strided view, read in place).
    Tensor d_x = fused_ops::empty({T, B, F}, acc, input);
    seq_mm_out(kCpu, seq_view(d_x, 0, {T * B, F}), dz2, seq_input_weights(w_acc, sz));
    d_input = in_dtype(d_x);
  }
  Tensor d_weights = skipped();
  if (mask[1]) {
    // [d_W_h | d_W_x] = dz^T [hs[:T] | x]: two GEMMs over all steps, each written straight
    // into its column block of one (3S, S + F) buffer.
    Tensor d_w = fused_ops::empty({3 * S, S + F}, acc, input);
    const Tensor d_w_h = seq_strided(d_w, 0, {3 * S, S}, {S + F, 1});
    const Tensor d_w_x = seq_strided(d_w, S, {3 * S, F}, {S + F, 1});
    const Tensor h_prev = seq_view(as_type(hs, acc), 0, {T * B, S});
    seq_mm_out(kCpu, d_w_h, dz2_t, h_prev);
    seq_mm_out(kCpu, d_w_x, dz2_t, seq_flat_input(as_type(input, acc), sz));
    d_weights = in_dtype(d_w);
  }
  Tensor d_bias = skipped();
  if (mask[2]) {
    d_bias = new_empty({3 * S}, input);
    if (S > 0) {
      FUSED_OPS_DISPATCH_FLOATING(dtype, "lltm_sequence_backward_cpu", [&] {
        column_sum<scalar_t>(dz, d_bias, T * B, 3 * S);
      });
    }
  }
  return {d_input, d_weights, d_bias, d_h0, d_c0};
}

}  // namespace

// A fragment: the lltm library itself (the cell's ops) is defined in lltm.cpp.
STABLE_TORCH_LIBRARY_FRAGMENT(lltm, m) {
  m.def(
      "lltm_sequence_forward(Tensor input, Tensor weights, Tensor bias, Tensor h0, Tensor c0) "
      "-> (Tensor hs, Tensor cells, Tensor gates)");
  m.def(
      "lltm_sequence_backward(Tensor? grad_hs, Tensor? grad_c_n, Tensor input, Tensor weights, "
      "Tensor hs, Tensor cells, Tensor gates, bool[3] output_mask, Tensor? grad_h_n=None) "
      "-> (Tensor d_input, Tensor d_weights, Tensor d_bias, Tensor d_h0, Tensor d_c0)");
}

STABLE_TORCH_LIBRARY_IMPL(lltm, CPU, m) {
  m.impl("lltm_sequence_forward", TORCH_BOX(&sequence_forward_cpu));
  m.impl("lltm_sequence_backward", TORCH_BOX(&sequence_backward_cpu));
}

}  // namespace lltm
