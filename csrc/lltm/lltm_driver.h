// LLTM cell: the host-side driver shared by the CPU and CUDA registrations (input checks,
// allocation, the GEMMs through ATen), on the LibTorch stable ABI. Everything here is inline:
// the CPU library (lltm.cpp, <pkg>._C) and the CUDA library (the .cu files, <pkg>._C_cuda)
// are separate shared objects, and each carries its own copy.
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <tuple>
#include <utility>
#include <vector>

#include "common/alloc.h"
#include "common/aten_ops.h"
#include "common/checks.h"
#include "lltm/lltm.h"

namespace lltm {

using Tensor = torch::stable::Tensor;

// The three gate activations that the tutorial's forward also returns (lltm::tutorial_forward):
// sigmoid(z_i), sigmoid(z_o), elu(z_c), each (B, S), contiguous, written by the forward's
// pointwise pass (or its fused GEMM kernel) next to new_h and new_cell. Hidden like the
// torch::stable::Tensor it holds (whose namespace is hidden): only this library uses it.
struct __attribute__((visibility("hidden"))) GateActivations {
  Tensor input_gate, output_gate, candidate_cell;
};

// The raw pointers of acts (all null when acts is null).
template <typename T>
ActivationPtrs<T> activation_ptrs(GateActivations* acts) {
  ActivationPtrs<T> p;
  if (acts != nullptr) {
    p.input_gate = acts->input_gate.mutable_data_ptr<T>();
    p.output_gate = acts->output_gate.mutable_data_ptr<T>();
    p.candidate_cell = acts->candidate_cell.mutable_data_ptr<T>();
  }
  return p;
}

// Device-specific pointwise kernels. All tensors contiguous, same device and dtype;
// gates and d_gates are (B, 3S), the others (B, S). acts: null, or the activations to write.
using ForwardPointwise = void (*)(const Tensor& gates, const Tensor& old_cell, Tensor& new_h,
                                  Tensor& new_cell, GateActivations* acts);
using BackwardPointwise = void (*)(const Tensor& grad_h, const Tensor& grad_cell,
                                   const Tensor& new_cell, const Tensor& gates, Tensor& d_gates,
                                   Tensor& d_old_cell);

// (batch B, input_features F, state_size S) of one call.
struct CellSizes {
  int64_t batch, features, state;
};

// Which gradients lltm::lltm_backward computes, in the forward's argument order: input,
// weights, bias, old_h (d_old_cell, a by-product of the pointwise pass, always comes back).
// The schema's bool[4], as the stable boxing hands a bool list over (std::vector<bool>).
using GradMask = std::vector<bool>;
// (d_input, d_weights, d_bias, d_old_h, d_old_cell).
using CellGrads = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>;

// The input checks of lltm::lltm_forward and lltm::lltm_backward (the one place they are
// made); each returns the problem's sizes. bias_row: bias may also be (1, 3S), the shape the
// tutorial's module gives it (lltm::tutorial_forward); the kernels read it as 3S values.
inline CellSizes check_forward_args(const Tensor& input, const Tensor& weights,
                                    const Tensor& bias, const Tensor& old_h,
                                    const Tensor& old_cell, bool bias_row = false) {
  using namespace fused_ops;  // NOLINT(build/namespaces): the check_* helpers
  check_rank(input, "input", 2);
  check_rank(weights, "weights", 2);
  if (bias_row && bias.dim() == 2) {
    FUSED_OPS_CHECK_VALUE(bias.size(0) == 1,
                          "bias must have shape [3 * state_size] or [1, 3 * state_size], got "
                          "shape ",
                          shape_str(bias));
  } else if (bias_row) {
    FUSED_OPS_CHECK_VALUE(bias.dim() == 1,
                          "bias must be a 1-D tensor [3 * state_size] or a 2-D tensor "
                          "[1, 3 * state_size], got a ",
                          num(bias.dim()), "-D tensor of shape ", shape_str(bias));
  } else {
    check_rank(bias, "bias", 1);
  }
  check_rank(old_h, "old_h", 2);
  check_rank(old_cell, "old_cell", 2);
  check_floating(input, "input");
  check_same_device_and_dtype(
      input, "input",
      {{&weights, "weights"}, {&bias, "bias"}, {&old_h, "old_h"}, {&old_cell, "old_cell"}});
  const int64_t B = input.size(0), F = input.size(1), S = old_h.size(1);
  check_size(old_h, "old_h", 0, B, "batch size, from input");
  check_size(old_cell, "old_cell", 0, B, "batch size, from input");
  check_size(old_cell, "old_cell", 1, S, "state_size, from old_h");
  check_size(weights, "weights", 0, 3 * S, "3 * state_size");
  check_size(weights, "weights", 1, S + F, "state_size + input_features");
  check_size(bias, "bias", bias.dim() - 1, 3 * S, "3 * state_size");
  return {B, F, S};
}

inline CellSizes check_backward_args(const Tensor& grad_h, const Tensor& grad_cell,
                                     const Tensor& new_cell, const Tensor& gate_weights,
                                     const Tensor& X, const Tensor& weights,
                                     const GradMask& output_mask) {
  using namespace fused_ops;  // NOLINT(build/namespaces): the check_* helpers
  check_rank(new_cell, "new_cell", 2);
  check_rank(grad_h, "grad_h", 2);
  check_rank(grad_cell, "grad_cell", 2);
  check_rank(gate_weights, "gate_weights", 2);
  check_rank(X, "X", 2);
  check_rank(weights, "weights", 2);
  check_floating(new_cell, "new_cell");
  check_same_device_and_dtype(new_cell, "new_cell",
                              {{&grad_h, "grad_h"},
                               {&grad_cell, "grad_cell"},
                               {&gate_weights, "gate_weights"},
                               {&X, "X"},
                               {&weights, "weights"}});
  const int64_t B = new_cell.size(0), S = new_cell.size(1);
  for (const auto& [t, name] :
       std::initializer_list<NamedTensor>{{&grad_h, "grad_h"}, {&grad_cell, "grad_cell"}}) {
    check_size(*t, name, 0, B, "batch size, from new_cell");
    check_size(*t, name, 1, S, "state_size, from new_cell");
  }
  check_size(gate_weights, "gate_weights", 0, B, "batch size, from new_cell");
  check_size(gate_weights, "gate_weights", 1, 3 * S, "3 * state_size");
  check_size(X, "X", 0, B, "batch size, from new_cell");
  FUSED_OPS_CHECK_VALUE(X.size(1) >= S, "X.shape[1] must be state_size + input_features >= ",
                        num(S), ", got shape ", shape_str(X));
  const int64_t F = X.size(1) - S;
  check_size(weights, "weights", 0, 3 * S, "3 * state_size");
  check_size(weights, "weights", 1, S + F, "X.shape[1]");
  // The schema says bool[4] but the dispatcher does not enforce a list's length (the classic
  // API's std::array<bool, 4> did).
  FUSED_OPS_CHECK_VALUE(output_mask.size() == 4,
                        "output_mask must have 4 entries (input, weights, bias, old_h), got ",
                        num(static_cast<int64_t>(output_mask.size())));
  return {B, F, S};
}

// Allocation and contiguity without a dispatcher call (common/alloc.h).
using fused_ops::as_contiguous;
using fused_ops::new_empty;

// X[:, col0 : col0 + src.size(1)] = src, X contiguous. On the CPU with src's rows contiguous
// (the usual case) one memcpy per row: two dispatcher calls (narrow, copy_) cost more than the
// copy at the sizes where a step is bound by host time. Elsewhere ATen's copy_.
inline void copy_into_columns(Tensor& X, int64_t col0, const Tensor& src) {
  const int64_t rows = src.size(0), cols = src.size(1), ld = X.size(1);
  if (rows == 0 || cols == 0) return;
  if (X.is_cpu() && (rows == 1 || src.stride(0) == cols) && (cols == 1 || src.stride(1) == 1)) {
    const int64_t elem = static_cast<int64_t>(X.element_size());
    const char* from = static_cast<const char*>(src.const_data_ptr());
    char* to = static_cast<char*>(X.mutable_data_ptr()) + col0 * elem;
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(to + r * ld * elem, from + r * cols * elem, static_cast<size_t>(cols * elem));
    }
    return;
  }
  Tensor block = torch::stable::narrow(X, 1, col0, cols);
  torch::stable::copy_(block, src);
}

// lltm::lltm_forward -> (new_h, new_cell, X, gate_weights), through ATen's GEMM (cuBLAS on
// a GPU) and a device-specific pointwise kernel; the arguments have passed the checks.
// acts: null, or the gate activations to write as well (lltm::tutorial_forward).
inline std::tuple<Tensor, Tensor, Tensor, Tensor> forward_gemm(
    const Tensor& input, const Tensor& weights, const Tensor& bias, const Tensor& old_h,
    const Tensor& old_cell, const CellSizes& sizes, ForwardPointwise pointwise,
    GateActivations* acts = nullptr) {
  const int64_t B = sizes.batch, F = sizes.features, S = sizes.state;
  // X = [old_h, input], written as the two column blocks of one buffer (no aten::cat): one
  // copy (B*(S+F) elements) is cheaper than a second GEMM pass over the (B, 3S) gates, and
  // the backward needs X for the weight gradient anyway.
  Tensor X = new_empty({B, S + F}, input);
  copy_into_columns(X, 0, old_h);
  copy_into_columns(X, S, input);
  // gate_weights = X @ weights^T + bias, one addmm inside ATen (common/aten_ops.h says why
  // not aten::addmm itself); a (1, 3S) bias broadcasts the same way.
  Tensor gate_weights = fused_ops::aten::linear(X, weights, bias);
  Tensor new_h = new_empty({B, S}, input);
  Tensor new_cell = new_empty({B, S}, input);
  if (B > 0 && S > 0) {
    pointwise(as_contiguous(gate_weights), as_contiguous(old_cell), new_h, new_cell, acts);
  }
  return {new_h, new_cell, X, gate_weights};
}

// lltm::lltm_backward -> (d_input, d_weights, d_bias, d_old_h, d_old_cell), the gradients of
// the forward's five arguments in their order, each contiguous; an entry whose mask flag is
// false comes back empty. Through ATen's GEMM and a device-specific pointwise kernel; the
// arguments have passed the checks. d_gates_out: null, or where to hand the gradient of
// gate_weights (B, 3S) back (lltm::tutorial_backward returns it).
inline CellGrads backward_gemm(const Tensor& grad_h, const Tensor& grad_cell,
                               const Tensor& new_cell, const Tensor& gate_weights,
                               const Tensor& X, const Tensor& weights,
                               const GradMask& output_mask, const CellSizes& sizes,
                               BackwardPointwise pointwise, Tensor* d_gates_out = nullptr) {
  const int64_t B = sizes.batch, F = sizes.features, S = sizes.state;
  Tensor d_gates = new_empty({B, 3 * S}, new_cell);
  Tensor d_old_cell = new_empty({B, S}, new_cell);
  if (B > 0 && S > 0) {
    pointwise(as_contiguous(grad_h), as_contiguous(grad_cell), as_contiguous(new_cell),
              as_contiguous(gate_weights), d_gates, d_old_cell);
  }
  auto skipped = [&] { return new_empty({0}, new_cell); };
  // d_X = d_gates @ weights = [d_old_h, d_input]: one GEMM per half (over weights' column
  // slices, no copy), so that each gradient is contiguous (outputs of an op must not share
  // memory) and an unwanted half costs nothing.
  Tensor w = weights;  // torch::stable::narrow takes a non-const reference
  Tensor d_input = output_mask[0]
                       ? fused_ops::aten::mm(d_gates, torch::stable::narrow(w, 1, S, F))
                       : skipped();
  Tensor d_weights = output_mask[1]
                         ? fused_ops::aten::mm(torch::stable::transpose(d_gates, 0, 1), X)
                         : skipped();
  const int64_t batch_dim[] = {0};
  Tensor d_bias =
      output_mask[2]
          ? torch::stable::sum(d_gates, torch::headeronly::IntHeaderOnlyArrayRef(batch_dim, 1))
          : skipped();
  Tensor d_old_h = output_mask[3]
                       ? fused_ops::aten::mm(d_gates, torch::stable::narrow(w, 1, 0, S))
                       : skipped();
  if (d_gates_out != nullptr) *d_gates_out = d_gates;
  return {d_input, d_weights, d_bias, d_old_h, d_old_cell};
}

}  // namespace lltm
