// LLTM cell: schema, input checks and the CPU registration (float32 and float64 here, the half
// types in lltm_cpu_half.cpp), on the LibTorch stable ABI. The autograd formula lives in Python
// (lltm/_ops.py, torch.library.register_autograd): the stable ABI has no C++ autograd.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <tuple>

#include "common/dispatch.h"
#include "common/module.h"
#include "lltm/lltm_cpu_half.h"
#include "lltm/lltm_cpu_rows.h"
#include "lltm/lltm_driver.h"
#include "lltm/lltm_tutorial.h"

FUSED_OPS_PYTHON_MODULE(_C)

namespace lltm {
namespace {

using torch::headeronly::ScalarType;

// float32 and float64: lltm_driver.h's GEMMs in the op's dtype around these pointwise passes.
template <typename scalar_t>
void forward_pointwise_same(const Tensor& gates, const Tensor& old_cell, Tensor& new_h,
                            Tensor& new_cell, GateActivations* acts) {
  forward_rows<scalar_t>(gates.const_data_ptr<scalar_t>(), gates.mutable_data_ptr<scalar_t>(),
                         old_cell.const_data_ptr<scalar_t>(), new_h.mutable_data_ptr<scalar_t>(),
                         new_cell.mutable_data_ptr<scalar_t>(), activation_ptrs<scalar_t>(acts),
                         old_cell.size(0), old_cell.size(1));
}
void forward_pointwise_cpu(const Tensor& gates, const Tensor& old_cell, Tensor& new_h,
                           Tensor& new_cell, GateActivations* acts) {
  FUSED_OPS_DISPATCH_FLOAT_DOUBLE(gates.scalar_type(), "lltm_forward_cpu", [&] {
    forward_pointwise_same<scalar_t>(gates, old_cell, new_h, new_cell, acts);
  });
}

template <typename scalar_t>
void backward_pointwise_same(const Tensor& grad_h, const Tensor& grad_cell,
                             const Tensor& new_cell, const Tensor& gates, Tensor& d_gates,
                             Tensor& d_old_cell) {
  backward_rows<scalar_t>(grad_h.const_data_ptr<scalar_t>(), grad_cell.const_data_ptr<scalar_t>(),
                          new_cell.const_data_ptr<scalar_t>(), gates.const_data_ptr<scalar_t>(),
                          d_gates.mutable_data_ptr<scalar_t>(),
                          d_old_cell.mutable_data_ptr<scalar_t>(), new_cell.size(0),
                          new_cell.size(1));
}
void backward_pointwise_cpu(const Tensor& grad_h, const Tensor& grad_cell, const Tensor& new_cell,
                            const Tensor& gates, Tensor& d_gates, Tensor& d_old_cell) {
  FUSED_OPS_DISPATCH_FLOAT_DOUBLE(gates.scalar_type(), "lltm_backward_cpu", [&] {
    backward_pointwise_same<scalar_t>(grad_h, grad_cell, new_cell, gates, d_gates, d_old_cell);
  });
}

std::tuple<Tensor, Tensor, Tensor, Tensor> forward_cpu(Tensor input, Tensor weights, Tensor bias,
                                                       Tensor old_h, Tensor old_cell) {
  const CellSizes sizes = check_forward_args(input, weights, bias, old_h, old_cell);
  if (is_half(input.scalar_type())) {
    return forward_half(input, weights, bias, old_h, old_cell, sizes);
  }
  return forward_gemm(input, weights, bias, old_h, old_cell, sizes, forward_pointwise_cpu);
}

CellGrads backward_cpu(Tensor grad_h, Tensor grad_cell, Tensor new_cell, Tensor gate_weights,
                       Tensor X, Tensor weights, GradMask output_mask) {
  const CellSizes sizes =
      check_backward_args(grad_h, grad_cell, new_cell, gate_weights, X, weights, output_mask);
  if (is_half(new_cell.scalar_type())) {
    return backward_half(grad_h, grad_cell, new_cell, gate_weights, X, weights, output_mask,
                         sizes);
  }
  return backward_gemm(grad_h, grad_cell, new_cell, gate_weights, X, weights, output_mask, sizes,
                       backward_pointwise_cpu);
}

TutorialOutputs tutorial_forward_cpu(Tensor input, Tensor weights, Tensor bias, Tensor old_h,
                                     Tensor old_cell, bool split_gates) {
  const CellSizes sizes =
      check_forward_args(input, weights, bias, old_h, old_cell, /*bias_row=*/true);
  return tutorial_forward(input, sizes, split_gates, [&](GateActivations* acts) {
    if (is_half(input.scalar_type())) {
      return forward_half(input, weights, bias, old_h, old_cell, sizes, acts);
    }
    return forward_gemm(input, weights, bias, old_h, old_cell, sizes, forward_pointwise_cpu,
                        acts);
  });
}

TutorialGrads tutorial_backward_cpu(Tensor grad_h, Tensor grad_cell, Tensor new_cell,
                                    Tensor input_gate, Tensor output_gate, Tensor candidate_cell,
                                    Tensor X, Tensor gates, Tensor weights, bool split_gates) {
  return tutorial_backward(
      grad_h, grad_cell, new_cell, input_gate, output_gate, candidate_cell, X, gates, weights,
      split_gates,
      [&](const Tensor& gate_weights, const GradMask& all, const CellSizes& sizes,
          Tensor* d_gates) {
        if (is_half(new_cell.scalar_type())) {
          return backward_half(grad_h, grad_cell, new_cell, gate_weights, X, weights, all, sizes,
                               d_gates);
        }
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
