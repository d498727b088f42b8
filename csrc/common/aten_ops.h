// ATen ops that torch/csrc/stable/ops.h (as of the target release, 2.10) does not wrap,
// called by name through the dispatcher (torch_call_dispatcher, 2.10), one helper per op,
// the way ops.h itself calls them. Only ops whose arguments the stable boxing converts:
// ATen ops with a Scalar argument (aten::addmm, aten::add) fail through the dispatcher on
// every release ("Not yet supported conversion from StableIValue to IValue ... Scalar"),
// which is why the GEMM with a bias is aten::linear here, not aten::addmm.
#pragma once

#include <torch/csrc/stable/c/shim.h>
#include <torch/csrc/stable/macros.h>
#include <torch/csrc/stable/stableivalue_conversions.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/csrc/stable/version.h>

#include "common/checks.h"  // STABLE_TORCH_ERROR_CODE_CHECK under torch < 2.13 headers too

#include <array>
#include <optional>

namespace fused_ops::aten {

using torch::stable::Tensor;

// aten::mm: self (n, k) @ mat2 (k, m) -> (n, m), contiguous (cuBLAS on CUDA; either operand
// may be a transposed view, which the GEMM reads without a copy).
inline Tensor mm(const Tensor& self, const Tensor& mat2) {
  std::array<StableIValue, 2> stack{torch::stable::detail::from(self),
                                    torch::stable::detail::from(mat2)};
  STABLE_TORCH_ERROR_CODE_CHECK(
      torch_call_dispatcher("aten::mm", "", stack.data(), TORCH_ABI_VERSION));
  return torch::stable::detail::to<Tensor>(stack[0]);
}

// aten::linear: input (n, k) @ weight (m, k)^T + bias (m) -> (n, m). For 2-D input with a
// bias ATen runs it as one addmm (bias broadcast into the GEMM's output, cuBLAS on CUDA),
// without the Scalar arguments that keep aten::addmm from going through the dispatcher.
inline Tensor linear(const Tensor& input, const Tensor& weight,
                     const std::optional<Tensor>& bias) {
  std::array<StableIValue, 3> stack{torch::stable::detail::from(input),
                                    torch::stable::detail::from(weight),
                                    torch::stable::detail::from(bias)};
  STABLE_TORCH_ERROR_CODE_CHECK(
      torch_call_dispatcher("aten::linear", "", stack.data(), TORCH_ABI_VERSION));
  return torch::stable::detail::to<Tensor>(stack[0]);
}

}  // namespace fused_ops::aten
