// LLTM cell: the pointwise math that the CPU and CUDA kernels both use.
//
//   X            = [old_h, input]                     (B, S + F)
//   gate_weights = X @ weights^T + bias               (B, 3S), split as [z_i, z_o, z_c]
//   new_cell     = old_cell + elu(z_c) * sigmoid(z_i)
//   new_h        = tanh(new_cell) * sigmoid(z_o)
//
// The backward recomputes the three activations from gate_weights instead of saving
// them, so the forward writes only new_h and new_cell beyond the GEMM's output.
//
// Header-only (no tensors), so that lltm_cuda_small.cuh, which includes it, also compiles as
// host C++ for the CPU emulation tests; the host-side driver is lltm_driver.h.
#pragma once

#include <torch/headeronly/macros/Macros.h>

#include <cmath>

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

// Where a forward kernel also writes the three gate activations, sigmoid(z_i), sigmoid(z_o) and
// elu(z_c), each (B, S) (the tutorial's forward returns them); all null: not wanted.
template <typename T>
struct ActivationPtrs {
  T* input_gate = nullptr;
  T* output_gate = nullptr;
  T* candidate_cell = nullptr;
};

// One element of the forward, with the three gate activations it computes on the way (the
// tutorial's forward returns them). T is the accumulation type (float for half types).
template <typename T>
C10_HOST_DEVICE inline void cell_forward(T z_i, T z_o, T z_c, T old_cell, T& new_h, T& new_cell,
                                         T& input_gate, T& output_gate, T& candidate_cell) {
  input_gate = sigmoid(z_i);
  output_gate = sigmoid(z_o);
  candidate_cell = elu(z_c);
  new_cell = old_cell + candidate_cell * input_gate;
  new_h = std::tanh(new_cell) * output_gate;
}

template <typename T>
C10_HOST_DEVICE inline void cell_forward(T z_i, T z_o, T z_c, T old_cell, T& new_h, T& new_cell) {
  T input_gate, output_gate, candidate_cell;
  cell_forward(z_i, z_o, z_c, old_cell, new_h, new_cell, input_gate, output_gate, candidate_cell);
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

}  // namespace lltm
