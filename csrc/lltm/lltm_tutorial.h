// The tutorial's entry points as ops (lltm::tutorial_forward, lltm::tutorial_backward): the
// arguments and outputs of the PyTorch C++/CUDA extension tutorial's lltm_forward and
// lltm_backward, so that its client code (lltm_cpp / lltm_cuda, Python side in
// lltm/_tutorial.py) gets every output from one op call. The CPU and CUDA registrations
// (lltm.cpp, lltm_cuda.cu) pass their device's forward and backward in; the checks and the
// output shapes are made here, once.
//
//   tutorial_forward  -> (new_h, new_cell, input_gate, output_gate, candidate_cell, X, gates)
//   tutorial_backward -> (d_old_h, d_input, d_weights, d_bias (1, 3S), d_old_cell, d_gates)
//
// gates and d_gates are (B, 3S) (the C++ tutorial's gate_weights) or, with split_gates,
// (B, 3, S) (the CUDA tutorial's gates): the same memory either way.
#pragma once

#include <tuple>

#include "lltm/lltm_driver.h"

namespace lltm {

using TutorialOutputs = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>;
using TutorialGrads = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>;

// A contiguous view of contiguous t's elements with another shape (no dispatcher call: a new
// TensorImpl over the same storage).
inline Tensor reshaped(const Tensor& t, std::initializer_list<int64_t> size) {
  int64_t strides[3];
  int64_t stride = 1;
  const int64_t ndim = static_cast<int64_t>(size.size());
  for (int64_t d = ndim - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= size.begin()[d];
  }
  AtenTensorHandle out = nullptr;  // offset 0: relative to t's own storage offset
  STABLE_TORCH_ERROR_CODE_CHECK(
      aoti_torch__reinterpret_tensor(t.get(), ndim, size.begin(), strides, 0, &out));
  return Tensor(out);
}

// Forward: the device's forward (check_forward_args already passed, bias (3S) or (1, 3S)),
// writing the three gate activations too. Forward(acts) -> (new_h, new_cell, X, gates).
template <typename Forward>
TutorialOutputs tutorial_forward(const Tensor& input, const CellSizes& sizes, bool split_gates,
                                 const Forward& forward) {
  const int64_t B = sizes.batch, S = sizes.state;
  GateActivations acts{new_empty({B, S}, input), new_empty({B, S}, input),
                       new_empty({B, S}, input)};
  auto [new_h, new_cell, X, gates] = forward(&acts);
  if (split_gates) gates = reshaped(as_contiguous(gates), {B, 3, S});
  return {new_h,        new_cell, acts.input_gate, acts.output_gate, acts.candidate_cell,
          X,            gates};
}

// The backward's checks beyond check_backward_args: gates may come as (B, 3, S) (the CUDA
// tutorial's), and the three activations must have new_cell's shape, device and dtype. The
// kernels recompute the activations from gates (they are the same values the forward wrote)
// rather than read them: one read of gates instead of three more tensors.
inline Tensor check_tutorial_backward_args(const Tensor& new_cell, const Tensor& input_gate,
                                           const Tensor& output_gate,
                                           const Tensor& candidate_cell, const Tensor& gates) {
  using namespace fused_ops;  // NOLINT(build/namespaces): the check_* helpers
  check_rank(new_cell, "new_cell", 2);
  const int64_t B = new_cell.size(0), S = new_cell.size(1);
  for (const auto& [t, name] :
       std::initializer_list<NamedTensor>{{&input_gate, "input_gate"},
                                          {&output_gate, "output_gate"},
                                          {&candidate_cell, "candidate_cell"}}) {
    check_rank(*t, name, 2);
    check_size(*t, name, 0, B, "batch size, from new_cell");
    check_size(*t, name, 1, S, "state_size, from new_cell");
  }
  check_same_device_and_dtype(new_cell, "new_cell",
                              {{&input_gate, "input_gate"},
                               {&output_gate, "output_gate"},
                               {&candidate_cell, "candidate_cell"}});
  if (gates.dim() != 3) return gates;  // check_backward_args checks the (B, 3S) form
  check_size(gates, "gates", 0, B, "batch size, from new_cell");
  check_size(gates, "gates", 1, 3, "the three gates");
  check_size(gates, "gates", 2, S, "state_size, from new_cell");
  return reshaped(as_contiguous(gates), {B, 3 * S});
}

// lltm::tutorial_backward's arguments checked (check_tutorial_backward_args, then
// check_backward_args with every gradient wanted), then
// Backward(gate_weights (B, 3S), all, sizes, d_gates_out) -> the five CellGrads, with the
// gradient of gates handed back through d_gates_out; returned in the tutorial's order and shapes.
template <typename Backward>
TutorialGrads tutorial_backward(const Tensor& grad_h, const Tensor& grad_cell,
                                const Tensor& new_cell, const Tensor& input_gate,
                                const Tensor& output_gate, const Tensor& candidate_cell,
                                const Tensor& X, const Tensor& gates, const Tensor& weights,
                                bool split_gates, const Backward& backward) {
  const Tensor gate_weights =
      check_tutorial_backward_args(new_cell, input_gate, output_gate, candidate_cell, gates);
  const GradMask all(4, true);
  const CellSizes sizes =
      check_backward_args(grad_h, grad_cell, new_cell, gate_weights, X, weights, all);
  const int64_t B = sizes.batch, S = sizes.state;
  Tensor d_gates;
  auto [d_input, d_weights, d_bias, d_old_h, d_old_cell] =
      backward(gate_weights, all, sizes, &d_gates);
  // The tutorial sums d_bias with keepdim=True: (1, 3S); autograd sums it onto a (3S,) bias.
  d_bias = reshaped(d_bias, {1, 3 * S});
  if (split_gates) d_gates = reshaped(d_gates, {B, 3, S});
  return {d_old_h, d_input, d_weights, d_bias, d_old_cell, d_gates};
}

}  // namespace lltm
