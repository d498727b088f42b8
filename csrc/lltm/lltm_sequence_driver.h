// LLTM over a sequence: the host-side driver shared by the CPU library (lltm_sequence.cpp) and
// the CUDA library (lltm_sequence_cuda.cu): input checks, the buffers of lltm_sequence.h, the
// GEMMs over all steps (input projection before the recurrence, weight and input gradients
// after it) and the per-step recurrence loop that the CPU and the CUDA fallback share (one
// ATen GEMM and one device-specific pointwise pass per step). Everything is inline: the two
// libraries are separate shared objects and each carries its own copy.
#pragma once

#include <torch/csrc/stable/c/shim.h>
#include <torch/csrc/stable/macros.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/stableivalue_conversions.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/csrc/stable/version.h>

#include <array>
#include <cstdint>
#include <tuple>
#include <vector>

#include "common/aten_ops.h"
#include "common/checks.h"
#include "common/dispatch.h"
#include "lltm/lltm_sequence.h"

namespace lltm {

using Tensor = torch::stable::Tensor;

// (steps T, batch B, input_features F, state_size S) of one call.
struct SeqSizes {
  int64_t steps, batch, features, state;
};

// Which of the GEMM-computed gradients lltm_sequence_backward returns, in the forward's
// argument order: input, weights, bias (d_h0 and d_c0 come out of the recurrence and always
// come back). The schema's bool[3], as the stable boxing hands a bool list over.
using SeqGradMask = std::vector<bool>;
// (d_input, d_weights, d_bias, d_h0, d_c0).
using SeqGrads = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>;

inline SeqSizes check_sequence_forward_args(const Tensor& input, const Tensor& weights,
                                            const Tensor& bias, const Tensor& h0,
                                            const Tensor& c0) {
  using namespace fused_ops;  // NOLINT(build/namespaces): the check_* helpers
  check_rank(input, "input", 3);
  check_rank(weights, "weights", 2);
  check_rank(bias, "bias", 1);
  check_rank(h0, "h0", 2);
  check_rank(c0, "c0", 2);
  check_floating(input, "input");
  check_same_device_and_dtype(input, "input",
                              {{&weights, "weights"}, {&bias, "bias"}, {&h0, "h0"}, {&c0, "c0"}});
  const int64_t T = input.size(0), B = input.size(1), F = input.size(2), S = h0.size(1);
  check_size(h0, "h0", 0, B, "batch size, input.shape[1]");
  check_size(c0, "c0", 0, B, "batch size, input.shape[1]");
  check_size(c0, "c0", 1, S, "state_size, from h0");
  check_size(weights, "weights", 0, 3 * S, "3 * state_size");
  check_size(weights, "weights", 1, S + F, "state_size + input_features");
  check_size(bias, "bias", 0, 3 * S, "3 * state_size");
  return {T, B, F, S};
}

inline SeqSizes check_sequence_backward_args(const Tensor& grad_hs, const Tensor& grad_c_n,
                                             const Tensor& input, const Tensor& weights,
                                             const Tensor& hs, const Tensor& cells,
                                             const Tensor& gates, const SeqGradMask& mask) {
  using namespace fused_ops;  // NOLINT(build/namespaces): the check_* helpers
  check_rank(input, "input", 3);
  check_rank(weights, "weights", 2);
  check_rank(grad_hs, "grad_hs", 3);
  check_rank(grad_c_n, "grad_c_n", 2);
  check_rank(hs, "hs", 3);
  check_rank(cells, "cells", 3);
  check_rank(gates, "gates", 3);
  check_floating(input, "input");
  check_same_device_and_dtype(input, "input",
                              {{&weights, "weights"},
                               {&grad_hs, "grad_hs"},
                               {&grad_c_n, "grad_c_n"},
                               {&hs, "hs"},
                               {&cells, "cells"},
                               {&gates, "gates"}});
  const int64_t T = input.size(0), B = input.size(1), F = input.size(2);
  FUSED_OPS_CHECK_VALUE(weights.size(1) >= F, "weights.shape[1] must be state_size + ",
                        "input_features >= ", num(F), ", got shape ", shape_str(weights));
  const int64_t S = weights.size(1) - F;
  check_size(weights, "weights", 0, 3 * S, "3 * state_size");
  for (const auto& [t, name] :
       {std::pair{&grad_hs, "grad_hs"}, {&hs, "hs"}, {&cells, "cells"}}) {
    check_size(*t, name, 0, T + 1, "steps + 1");
    check_size(*t, name, 1, B, "batch size, input.shape[1]");
    check_size(*t, name, 2, S, "state_size");
  }
  check_size(grad_c_n, "grad_c_n", 0, B, "batch size, input.shape[1]");
  check_size(grad_c_n, "grad_c_n", 1, S, "state_size");
  check_size(gates, "gates", 0, T, "steps");
  check_size(gates, "gates", 1, B, "batch size, input.shape[1]");
  check_size(gates, "gates", 2, 3 * S, "3 * state_size");
  // The schema says bool[3] but the dispatcher does not enforce a list's length.
  FUSED_OPS_CHECK_VALUE(mask.size() == 3,
                        "output_mask must have 3 entries (input, weights, bias), got ",
                        num(static_cast<int64_t>(mask.size())));
  return {T, B, F, S};
}

// aten::mm.out: out = self @ mat2, written into out (which may be a strided view whose rows
// or columns a BLAS can address, such as a column block of a row-major matrix: ATen's GEMM
// then writes it in place; otherwise it goes through a temporary). No allocation for a
// contiguous out, which is what the per-step GEMMs need under CUDA graph capture.
inline void mm_out(Tensor& out, const Tensor& self, const Tensor& mat2) {
  std::array<StableIValue, 3> stack{torch::stable::detail::from(self),
                                    torch::stable::detail::from(mat2),
                                    torch::stable::detail::from(out)};
  STABLE_TORCH_ERROR_CODE_CHECK(
      torch_call_dispatcher("aten::mm", "out", stack.data(), TORCH_ABI_VERSION));
  (void)torch::stable::detail::to<Tensor>(stack[0]);  // releases the returned handle
}

// A contiguous uninitialised tensor of like's device and the given dtype.
inline Tensor seq_empty(std::initializer_list<int64_t> size, const Tensor& like,
                        torch::headeronly::ScalarType dtype) {
  const std::vector<int64_t> sizes(size);
  return torch::stable::new_empty(
      like, torch::headeronly::IntHeaderOnlyArrayRef(sizes.data(), sizes.size()), dtype);
}
inline Tensor seq_empty(std::initializer_list<int64_t> size, const Tensor& like) {
  return seq_empty(size, like, like.scalar_type());
}

// t viewed with a new shape (t contiguous, or a view ATen can reshape without a copy).
inline Tensor seq_view(const Tensor& t, std::initializer_list<int64_t> size) {
  const std::vector<int64_t> sizes(size);
  return torch::stable::view(t,
                             torch::headeronly::IntHeaderOnlyArrayRef(sizes.data(), sizes.size()));
}

// Rows [start, start + length) of a 2-D or 3-D tensor along dim 0 (a view, through the AOTI
// shim rather than the dispatcher: the per-step loop makes a few per step).
inline Tensor seq_rows(const Tensor& t, int64_t start, int64_t length) {
  Tensor self = t;  // torch::stable::narrow takes a non-const reference
  return torch::stable::narrow(self, 0, start, length);
}

inline Tensor seq_contiguous(const Tensor& t) {
  return t.is_contiguous() ? t : torch::stable::contiguous(t);
}

// The device-specific pointwise pass of one forward step t (tensors of lltm_sequence.h, all
// contiguous): z = gates[t] + rec, written back to gates[t]; (hs[t+1], cells[t+1]) =
// cell(z, cells[t]). rec = hs[t] W_h^T, (B, 3S).
using SeqForwardStep = void (*)(const Tensor& rec, Tensor& gates, Tensor& hs, Tensor& cells,
                                int64_t t);
// The device-specific pointwise pass of one backward step t: with dh = grad_hs[t+1] + rec_dh
// and dc = carry, (dz_t, carry) = cell_backward(dh, dc, cells[t+1], z_t), dz_t written over
// z_t in dz. rec_dh = dz_{t+1} W_h (B, S) (zeros at t = T-1); carry (B, S) in the opmath
// dtype holds dL/dc_t on entry and dL/dc_{t-1} on exit.
using SeqBackwardStep = void (*)(const Tensor& grad_hs, const Tensor& rec_dh,
                                 const Tensor& cells, Tensor& dz, Tensor& carry, int64_t t);

// The forward recurrence of lltm_sequence.h one step at a time: the recurrent GEMM through
// ATen (MKL/oneDNN on a CPU, cuBLAS on a GPU) into one (B, 3S) buffer reused by every step,
// then the device's pointwise step. w_h is W_h (3S, S) contiguous.
inline void per_step_forward(const Tensor& w_h, Tensor& gates, Tensor& hs, Tensor& cells,
                             const SeqSizes& sz, SeqForwardStep step) {
  const int64_t T = sz.steps, B = sz.batch, S = sz.state;
  const Tensor w_h_t = torch::stable::transpose(w_h, 0, 1);  // (S, 3S), a view
  const Tensor hs2 = seq_view(hs, {(T + 1) * B, S});
  Tensor rec = seq_empty({B, 3 * S}, gates);
  for (int64_t t = 0; t < T; ++t) {
    mm_out(rec, seq_rows(hs2, t * B, B), w_h_t);
    step(rec, gates, hs, cells, t);
  }
}

// The backward recurrence of lltm_sequence.h one step at a time (dz holds z on entry, dz on
// exit); writes d_h0 = dz_0 W_h + grad_hs[0] and d_c0.
inline void per_step_backward(const Tensor& w_h, Tensor& dz, const Tensor& cells,
                              const Tensor& grad_hs, const Tensor& grad_c_n, Tensor& d_h0,
                              Tensor& d_c0, const SeqSizes& sz, SeqBackwardStep step) {
  const int64_t T = sz.steps, B = sz.batch, S = sz.state;
  const Tensor dz2 = seq_view(dz, {T * B, 3 * S});
  // rec_dh is the second half of a (2, B, S) pair whose first half gets grad_hs[0] at the
  // end: d_h0 is then the pair's sum over dim 0 (aten::add has a Scalar argument, which the
  // stable dispatcher call cannot pass).
  Tensor pair = seq_empty({2, B, S}, dz);
  Tensor rec_dh = torch::stable::select(pair, 0, 1);
  torch::stable::zero_(rec_dh);
  Tensor carry = seq_empty({B, S}, dz, fused_ops::opmath_type(dz.scalar_type()));
  torch::stable::copy_(carry, grad_c_n);
  for (int64_t t = T - 1; t >= 0; --t) {
    step(grad_hs, rec_dh, cells, dz, carry, t);
    mm_out(rec_dh, seq_rows(dz2, t * B, B), w_h);
  }
  Tensor first = torch::stable::select(pair, 0, 0);
  torch::stable::copy_(first, torch::stable::select(grad_hs, 0, 0));
  const int64_t dim0[] = {0};
  torch::stable::sum_out(d_h0, pair, torch::headeronly::IntHeaderOnlyArrayRef(dim0, 1));
  torch::stable::copy_(d_c0, carry);
}

// A device's whole forward recurrence: (w_h, gates, hs, cells, sizes) as lltm_sequence.h.
using SeqForwardRecurrence = void (*)(const Tensor& w_h, Tensor& gates, Tensor& hs,
                                      Tensor& cells, const SeqSizes& sz);
// A device's whole backward recurrence (w_h, dz, cells, grad_hs, grad_c_n, d_h0, d_c0).
using SeqBackwardRecurrence = void (*)(const Tensor& w_h, Tensor& dz, const Tensor& cells,
                                       const Tensor& grad_hs, const Tensor& grad_c_n,
                                       Tensor& d_h0, Tensor& d_c0, const SeqSizes& sz);

// W_h = weights[:, :S], contiguous (lltm_sequence.h's w_h).
inline Tensor recurrent_weights(const Tensor& weights, int64_t S) {
  Tensor w = weights;
  return torch::stable::contiguous(torch::stable::narrow(w, 1, 0, S));
}

// lltm::lltm_sequence_forward -> (hs, cells, gates), fresh contiguous buffers (none aliases an
// argument); the arguments have passed the checks.
inline std::tuple<Tensor, Tensor, Tensor> sequence_forward(
    const Tensor& input, const Tensor& weights, const Tensor& bias, const Tensor& h0,
    const Tensor& c0, const SeqSizes& sz, SeqForwardRecurrence recurrence) {
  const int64_t T = sz.steps, B = sz.batch, F = sz.features, S = sz.state;
  Tensor hs = seq_empty({T + 1, B, S}, input);
  Tensor cells = seq_empty({T + 1, B, S}, input);
  Tensor hs0 = torch::stable::select(hs, 0, 0);
  torch::stable::copy_(hs0, h0);
  Tensor cells0 = torch::stable::select(cells, 0, 0);
  torch::stable::copy_(cells0, c0);
  if (T == 0 || B == 0 || S == 0) {
    return {hs, cells, seq_empty({T, B, 3 * S}, input)};
  }
  // P = x W_x^T + bias for every step at once: one GEMM whose output becomes gates. W_x is a
  // column block of weights (a strided view, which the GEMM reads in place); the reshape
  // copies only a non-contiguous input.
  Tensor w = weights;
  const Tensor w_x = torch::stable::narrow(w, 1, S, F);
  const int64_t flat[] = {T * B, F};
  const Tensor x2 = torch::stable::reshape(input, torch::headeronly::IntHeaderOnlyArrayRef(flat, 2));
  Tensor gates = seq_view(fused_ops::aten::linear(x2, w_x, bias), {T, B, 3 * S});
  recurrence(recurrent_weights(weights, S), gates, hs, cells, sz);
  return {hs, cells, gates};
}

// lltm::lltm_sequence_backward -> (d_input, d_weights, d_bias, d_h0, d_c0), each contiguous;
// an entry whose mask flag is false comes back empty. The recurrence fills dz (a copy of
// gates: the saved z stay intact for a second backward with retain_graph); then every
// weight and input gradient is one GEMM (or one sum) over all T*B rows.
inline SeqGrads sequence_backward(const Tensor& grad_hs, const Tensor& grad_c_n,
                                  const Tensor& input, const Tensor& weights, const Tensor& hs,
                                  const Tensor& cells, const Tensor& gates,
                                  const SeqGradMask& mask, const SeqSizes& sz,
                                  SeqBackwardRecurrence recurrence) {
  const int64_t T = sz.steps, B = sz.batch, F = sz.features, S = sz.state;
  Tensor d_h0 = seq_empty({B, S}, input);
  Tensor d_c0 = seq_empty({B, S}, input);
  Tensor dz = torch::stable::clone(gates);
  if (T == 0 || B == 0 || S == 0) {
    torch::stable::copy_(d_h0, torch::stable::select(grad_hs, 0, 0));
    torch::stable::copy_(d_c0, grad_c_n);
  } else {
    recurrence(recurrent_weights(weights, S), dz, seq_contiguous(cells),
               seq_contiguous(grad_hs), seq_contiguous(grad_c_n), d_h0, d_c0, sz);
  }
  auto skipped = [&] { return seq_empty({0}, input); };
  const Tensor dz2 = seq_view(dz, {T * B, 3 * S});
  const Tensor dz2_t = torch::stable::transpose(dz2, 0, 1);  // (3S, TB), a view
  Tensor w = weights;
  Tensor d_input = skipped();
  if (mask[0]) {
    // d_x = dz W_x: one GEMM over all steps (W_x a strided view, read in place).
    d_input = seq_view(fused_ops::aten::mm(dz2, torch::stable::narrow(w, 1, S, F)), {T, B, F});
  }
  Tensor d_weights = skipped();
  if (mask[1]) {
    // [d_W_h | d_W_x] = dz^T [hs[:T] | x]: two GEMMs over all steps, each written straight
    // into its column block of one (3S, S + F) buffer.
    d_weights = seq_empty({3 * S, S + F}, input);
    Tensor d_w_h = torch::stable::narrow(d_weights, 1, 0, S);
    Tensor d_w_x = torch::stable::narrow(d_weights, 1, S, F);
    const Tensor h_prev = seq_view(seq_rows(seq_contiguous(hs), 0, T), {T * B, S});
    const int64_t flat[] = {T * B, F};
    const Tensor x2 =
        torch::stable::reshape(input, torch::headeronly::IntHeaderOnlyArrayRef(flat, 2));
    mm_out(d_w_h, dz2_t, h_prev);
    mm_out(d_w_x, dz2_t, x2);
  }
  Tensor d_bias = skipped();
  if (mask[2]) {
    const int64_t rows[] = {0};
    d_bias = torch::stable::sum(dz2, torch::headeronly::IntHeaderOnlyArrayRef(rows, 1));
  }
  return {d_input, d_weights, d_bias, d_h0, d_c0};
}

}  // namespace lltm
