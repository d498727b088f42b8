// LLTM cell: the shared host-side driver (checks, GEMMs, allocation) and the pointwise
// math that the CPU and CUDA kernels both use.
//
//   X            = [old_h, input]                     (B, S + F)
//   gate_weights = X @ weights^T + bias               (B, 3S), split as [z_i, z_o, z_c]
//   new_cell     = old_cell + elu(z_c) * sigmoid(z_i)
//   new_h        = tanh(new_cell) * sigmoid(z_o)
//
// The backward recomputes the three activations from gate_weights instead of saving
// them, so the forward writes only new_h and new_cell beyond the GEMM's output.
#pragma once

#include <ATen/ATen.h>
#include <c10/macros/Macros.h>

#include <array>
#include <cmath>
#include <tuple>

namespace lltm {

template <typename T>
C10_HOST_DEVICE inline T sigmoid(T z) {
  return T(1) / (T(1) + std::exp(-z));
}

template <typename T>
C10_HOST_DEVICE inline T elu(T z) {
  return z > T(0) ? z : std::expm1(z);
}

template <typename T>
C10_HOST_DEVICE inline T d_elu(T z) {
  return z > T(0) ? T(1) : std::exp(z);
}

// One element of the forward. T is the accumulation type (float for half types).
template <typename T>
C10_HOST_DEVICE inline void cell_forward(T z_i, T z_o, T z_c, T old_cell, T& new_h, T& new_cell) {
  new_cell = old_cell + elu(z_c) * sigmoid(z_i);
  new_h = std::tanh(new_cell) * sigmoid(z_o);
}

// One element of the backward: gradients of the three gate pre-activations and of old_cell.
template <typename T>
C10_HOST_DEVICE inline void cell_backward(T grad_h, T grad_cell, T new_cell, T z_i, T z_o, T z_c,
                                          T& d_z_i, T& d_z_o, T& d_z_c, T& d_old_cell) {
  const T input_gate = sigmoid(z_i);
  const T output_gate = sigmoid(z_o);
  const T tanh_cell = std::tanh(new_cell);
  const T d_new_cell = grad_h * output_gate * (T(1) - tanh_cell * tanh_cell) + grad_cell;
  d_old_cell = d_new_cell;
  d_z_i = elu(z_c) * d_new_cell * input_gate * (T(1) - input_gate);
  d_z_o = tanh_cell * grad_h * output_gate * (T(1) - output_gate);
  d_z_c = input_gate * d_new_cell * d_elu(z_c);
}

// Device-specific pointwise kernels. All tensors contiguous, same device and dtype;
// gates and d_gates are (B, 3S), the others (B, S).
using ForwardPointwise = void (*)(const at::Tensor& gates, const at::Tensor& old_cell,
                                  at::Tensor& new_h, at::Tensor& new_cell);
using BackwardPointwise = void (*)(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                   const at::Tensor& new_cell, const at::Tensor& gates,
                                   at::Tensor& d_gates, at::Tensor& d_old_cell);

// (batch B, input_features F, state_size S) of one call.
struct CellSizes {
  int64_t batch, features, state;
};

// The input checks of lltm::lltm_forward and lltm::lltm_backward (the one place they are
// made); each returns the problem's sizes.
CellSizes check_forward_args(const at::Tensor& input, const at::Tensor& weights,
                             const at::Tensor& bias, const at::Tensor& old_h,
                             const at::Tensor& old_cell);
CellSizes check_backward_args(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                              const at::Tensor& new_cell, const at::Tensor& gate_weights,
                              const at::Tensor& X, const at::Tensor& weights);

// lltm::lltm_forward -> (new_h, new_cell, X, gate_weights), through ATen's GEMM (cuBLAS on
// a GPU) and a device-specific pointwise kernel; the arguments have passed the checks.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> forward_gemm(
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
    const at::Tensor& old_h, const at::Tensor& old_cell, const CellSizes& sizes,
    ForwardPointwise pointwise);

// Which gradients lltm::lltm_backward computes, in the forward's argument order: input,
// weights, bias, old_h (d_old_cell, a by-product of the pointwise pass, always comes back).
using GradMask = std::array<bool, 4>;
// (d_input, d_weights, d_bias, d_old_h, d_old_cell).
using CellGrads = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// lltm::lltm_backward -> (d_input, d_weights, d_bias, d_old_h, d_old_cell), the gradients of
// the forward's five arguments in their order, each contiguous; an entry whose mask flag is
// false comes back empty. Through ATen's GEMM and a device-specific pointwise kernel; the
// arguments have passed the checks.
CellGrads backward_gemm(
    const at::Tensor& grad_h, const at::Tensor& grad_cell, const at::Tensor& new_cell,
    const at::Tensor& gate_weights, const at::Tensor& X, const at::Tensor& weights,
    GradMask output_mask, const CellSizes& sizes, BackwardPointwise pointwise);

}  // namespace lltm
