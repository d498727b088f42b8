// LLTM cell: schema, input checks, the device-independent driver and the CPU kernels, on the
// LibTorch stable ABI. The autograd formula lives in Python (lltm/_ops.py,
// torch.library.register_autograd): the stable ABI has no C++ autograd.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <type_traits>

#include "common/cpu_features.h"
#include "common/dispatch.h"
#include "common/module.h"
#include "lltm/lltm_cpu_avx2.h"
#include "lltm/lltm_driver.h"
#include "lltm/lltm_tutorial.h"

FUSED_OPS_PYTHON_MODULE(_C)

namespace lltm {
namespace {

// Rows per parallel_for task: about 16k elements of work each.
int64_t grain_rows(int64_t state_size) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, state_size));
}

// Rows [b0, b1) through the AVX2 kernels when they apply (float32 and float64 on an AVX2 CPU);
// false means the caller runs its scalar loop.
template <typename T>
constexpr bool kHasAvx2Rows = std::is_same_v<T, float> || std::is_same_v<T, double>;

template <typename T>
bool vectorized_forward_rows(const T* gates, const T* old_cell, T* new_h, T* new_cell,
                             T* const* acts, int64_t b0, int64_t b1, int64_t S) {
  if constexpr (kHasAvx2Rows<T>) {
    if (!fused_ops::cpu_has_avx2()) return false;
    forward_rows_avx2(gates, old_cell, new_h, new_cell, acts, b0, b1, S);
    return true;
  }
  return false;
}
template <typename T>
bool vectorized_backward_rows(const T* grad_h, const T* grad_cell, const T* new_cell,
                              const T* gates, T* d_gates, T* d_old_cell, int64_t b0, int64_t b1,
                              int64_t S) {
  if constexpr (kHasAvx2Rows<T>) {
    if (!fused_ops::cpu_has_avx2()) return false;
    backward_rows_avx2(grad_h, grad_cell, new_cell, gates, d_gates, d_old_cell, b0, b1, S);
    return true;
  }
  return false;
}

// The dtype-specific bodies are templates so that the dispatch macro's body is a single
// call (THO_DISPATCH splits its body at top-level commas).
template <typename scalar_t>
void forward_pointwise_rows(const Tensor& gates, const Tensor& old_cell, Tensor& new_h,
                            Tensor& new_cell, GateActivations* acts) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  const int64_t B = old_cell.size(0), S = old_cell.size(1);
  const scalar_t* g = gates.const_data_ptr<scalar_t>();
  const scalar_t* c = old_cell.const_data_ptr<scalar_t>();
  scalar_t* h_out = new_h.mutable_data_ptr<scalar_t>();
  scalar_t* c_out = new_cell.mutable_data_ptr<scalar_t>();
  scalar_t* act_storage[3];
  scalar_t* const* a = nullptr;  // the activations' outputs, or null
  if (acts != nullptr) {
    act_storage[0] = acts->input_gate.mutable_data_ptr<scalar_t>();
    act_storage[1] = acts->output_gate.mutable_data_ptr<scalar_t>();
    act_storage[2] = acts->candidate_cell.mutable_data_ptr<scalar_t>();
    a = act_storage;
  }
  torch::stable::parallel_for(0, B, grain_rows(S), [&](int64_t b0, int64_t b1) {
    if (vectorized_forward_rows(g, c, h_out, c_out, a, b0, b1, S)) return;
    for (int64_t b = b0; b < b1; ++b) {
      const scalar_t* z = g + b * 3 * S;
      for (int64_t j = 0; j < S; ++j) {
        const int64_t k = b * S + j;
        acc_t h, cell, input_gate, output_gate, candidate;
        cell_forward<acc_t>(z[j], z[S + j], z[2 * S + j], c[k], h, cell, input_gate, output_gate,
                            candidate);
        h_out[k] = h;
        c_out[k] = cell;
        if (a != nullptr) {
          a[0][k] = input_gate;
          a[1][k] = output_gate;
          a[2][k] = candidate;
        }
      }
    }
  });
}

template <typename scalar_t>
void backward_pointwise_rows(const Tensor& grad_h, const Tensor& grad_cell,
                             const Tensor& new_cell, const Tensor& gates, Tensor& d_gates,
                             Tensor& d_old_cell) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  const int64_t B = new_cell.size(0), S = new_cell.size(1);
  const scalar_t* gh = grad_h.const_data_ptr<scalar_t>();
  const scalar_t* gc = grad_cell.const_data_ptr<scalar_t>();
  const scalar_t* nc = new_cell.const_data_ptr<scalar_t>();
  const scalar_t* g = gates.const_data_ptr<scalar_t>();
  scalar_t* dg = d_gates.mutable_data_ptr<scalar_t>();
  scalar_t* dc = d_old_cell.mutable_data_ptr<scalar_t>();
  torch::stable::parallel_for(0, B, grain_rows(S), [&](int64_t b0, int64_t b1) {
    if (vectorized_backward_rows(gh, gc, nc, g, dg, dc, b0, b1, S)) return;
    for (int64_t b = b0; b < b1; ++b) {
      const scalar_t* z = g + b * 3 * S;
      scalar_t* dz = dg + b * 3 * S;
      for (int64_t j = 0; j < S; ++j) {
        const int64_t k = b * S + j;
        acc_t d_i, d_o, d_c, d_cell;
        cell_backward<acc_t>(gh[k], gc[k], nc[k], z[j], z[S + j], z[2 * S + j], d_i, d_o, d_c,
                             d_cell);
        dz[j] = d_i;
        dz[S + j] = d_o;
        dz[2 * S + j] = d_c;
        dc[k] = d_cell;
      }
    }
  });
}

void forward_pointwise_cpu(const Tensor& gates, const Tensor& old_cell, Tensor& new_h,
                           Tensor& new_cell, GateActivations* acts) {
  FUSED_OPS_DISPATCH_FLOATING(gates.scalar_type(), "lltm_forward_cpu", [&] {
    forward_pointwise_rows<scalar_t>(gates, old_cell, new_h, new_cell, acts);
  });
}

void backward_pointwise_cpu(const Tensor& grad_h, const Tensor& grad_cell, const Tensor& new_cell,
                            const Tensor& gates, Tensor& d_gates, Tensor& d_old_cell) {
  FUSED_OPS_DISPATCH_FLOATING(gates.scalar_type(), "lltm_backward_cpu", [&] {
    backward_pointwise_rows<scalar_t>(grad_h, grad_cell, new_cell, gates, d_gates, d_old_cell);
  });
}

std::tuple<Tensor, Tensor, Tensor, Tensor> forward_cpu(Tensor input, Tensor weights, Tensor bias,
                                                       Tensor old_h, Tensor old_cell) {
  const CellSizes sizes = check_forward_args(input, weights, bias, old_h, old_cell);
  return forward_gemm(input, weights, bias, old_h, old_cell, sizes, forward_pointwise_cpu);
}

CellGrads backward_cpu(Tensor grad_h, Tensor grad_cell, Tensor new_cell, Tensor gate_weights,
                       Tensor X, Tensor weights, GradMask output_mask) {
  const CellSizes sizes =
      check_backward_args(grad_h, grad_cell, new_cell, gate_weights, X, weights, output_mask);
  return backward_gemm(grad_h, grad_cell, new_cell, gate_weights, X, weights, output_mask, sizes,
                       backward_pointwise_cpu);
}

TutorialOutputs tutorial_forward_cpu(Tensor input, Tensor weights, Tensor bias, Tensor old_h,
                                     Tensor old_cell, bool split_gates) {
  const CellSizes sizes =
      check_forward_args(input, weights, bias, old_h, old_cell, /*bias_row=*/true);
  return tutorial_forward(input, sizes, split_gates, [&](GateActivations* acts) {
    return forward_gemm(input, weights, bias, old_h, old_cell, sizes, forward_pointwise_cpu,
                        acts);
  });
}

TutorialGrads tutorial_backward_cpu(Tensor grad_h, Tensor grad_cell, Tensor new_cell,
                                    Tensor input_gate, Tensor output_gate, Tensor candidate_cell,
                                    Tensor X, Tensor gates, Tensor weights, bool split_gates) {
  const Tensor gate_weights =
      check_tutorial_backward_args(new_cell, input_gate, output_gate, candidate_cell, gates);
  const GradMask all(4, true);
  const CellSizes sizes =
      check_backward_args(grad_h, grad_cell, new_cell, gate_weights, X, weights, all);
  return tutorial_backward(sizes, split_gates, [&](Tensor* d_gates) {
    return backward_gemm(grad_h, grad_cell, new_cell, gate_weights, X, weights, all, sizes,
                         backward_pointwise_cpu, d_gates);
  });
}

}  // namespace

STABLE_TORCH_LIBRARY(lltm, m) {
  m.def(
      "lltm_forward(Tensor input, Tensor weights, Tensor bias, Tensor old_h, Tensor old_cell) "
      "-> (Tensor new_h, Tensor new_cell, Tensor X, Tensor gate_weights)");
  m.def(
      "lltm_backward(Tensor grad_h, Tensor grad_cell, Tensor new_cell, Tensor gate_weights, "
      "Tensor X, Tensor weights, bool[4] output_mask) "
      "-> (Tensor d_input, Tensor d_weights, Tensor d_bias, Tensor d_old_h, Tensor d_old_cell)");
  // The tutorial's lltm_forward / lltm_backward (lltm_tutorial.h; bias (3S) or (1, 3S)).
  m.def(
      "tutorial_forward(Tensor input, Tensor weights, Tensor bias, Tensor old_h, "
      "Tensor old_cell, bool split_gates) -> (Tensor new_h, Tensor new_cell, Tensor input_gate, "
      "Tensor output_gate, Tensor candidate_cell, Tensor X, Tensor gates)");
  m.def(
      "tutorial_backward(Tensor grad_h, Tensor grad_cell, Tensor new_cell, Tensor input_gate, "
      "Tensor output_gate, Tensor candidate_cell, Tensor X, Tensor gates, Tensor weights, "
      "bool split_gates) -> (Tensor d_old_h, Tensor d_input, Tensor d_weights, Tensor d_bias, "
      "Tensor d_old_cell, Tensor d_gates)");
}

STABLE_TORCH_LIBRARY_IMPL(lltm, CPU, m) {
  m.impl("lltm_forward", TORCH_BOX(&forward_cpu));
  m.impl("lltm_backward", TORCH_BOX(&backward_cpu));
  m.impl("tutorial_forward", TORCH_BOX(&tutorial_forward_cpu));
  m.impl("tutorial_backward", TORCH_BOX(&tutorial_backward_cpu));
}

}  // namespace lltm
