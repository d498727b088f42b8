// LLTM cell: schema, input checks, the device-independent driver and the CPU kernels.
#include "lltm/lltm.h"

#include <ATen/OpMathType.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/library.h>

#include <memory>
#include <type_traits>
#include <utility>

#include "common/checks.h"
#include "common/cpu_features.h"
#include "lltm/lltm_cpu_avx2.h"
#include "common/module.h"
#include "common/parallel.h"

FUSED_OPS_PYTHON_MODULE(_C)

namespace lltm {
namespace {

using fused_ops::check_floating;
using fused_ops::check_rank;
using fused_ops::check_same_device_and_dtype;
using fused_ops::check_size;

// Rows per parallel_for task: about 16k elements of work each.
int64_t grain_rows(int64_t state_size) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, state_size));
}

// Rows [b0, b1) through the AVX2 kernels when they apply (float32 on an AVX2 CPU); false
// means the caller runs its scalar loop.
template <typename T>
bool vectorized_forward_rows(const T*, const T*, T*, T*, int64_t, int64_t, int64_t) {
  return false;
}
bool vectorized_forward_rows(const float* gates, const float* old_cell, float* new_h,
                             float* new_cell, int64_t b0, int64_t b1, int64_t S) {
  if (!fused_ops::cpu_has_avx2()) return false;
  forward_rows_avx2(gates, old_cell, new_h, new_cell, b0, b1, S);
  return true;
}
template <typename T>
bool vectorized_backward_rows(const T*, const T*, const T*, const T*, T*, T*, int64_t, int64_t,
                              int64_t) {
  return false;
}
bool vectorized_backward_rows(const float* grad_h, const float* grad_cell, const float* new_cell,
                              const float* gates, float* d_gates, float* d_old_cell, int64_t b0,
                              int64_t b1, int64_t S) {
  if (!fused_ops::cpu_has_avx2()) return false;
  backward_rows_avx2(grad_h, grad_cell, new_cell, gates, d_gates, d_old_cell, b0, b1, S);
  return true;
}

void forward_pointwise_cpu(const at::Tensor& gates, const at::Tensor& old_cell, at::Tensor& new_h,
                           at::Tensor& new_cell) {
  const int64_t B = old_cell.size(0), S = old_cell.size(1);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, gates.scalar_type(), "lltm_forward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* g = gates.const_data_ptr<scalar_t>();
    const scalar_t* c = old_cell.const_data_ptr<scalar_t>();
    scalar_t* h_out = new_h.mutable_data_ptr<scalar_t>();
    scalar_t* c_out = new_cell.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, B, grain_rows(S), [&](int64_t b0, int64_t b1) {
      if (vectorized_forward_rows(g, c, h_out, c_out, b0, b1, S)) return;
      for (int64_t b = b0; b < b1; ++b) {
        const scalar_t* z = g + b * 3 * S;
        for (int64_t j = 0; j < S; ++j) {
          acc_t h, cell;
          cell_forward<acc_t>(z[j], z[S + j], z[2 * S + j], c[b * S + j], h, cell);
          h_out[b * S + j] = h;
          c_out[b * S + j] = cell;
        }
      }
    });
  });
}

void backward_pointwise_cpu(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                            const at::Tensor& new_cell, const at::Tensor& gates,
                            at::Tensor& d_gates, at::Tensor& d_old_cell) {
  const int64_t B = new_cell.size(0), S = new_cell.size(1);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, gates.scalar_type(), "lltm_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* gh = grad_h.const_data_ptr<scalar_t>();
    const scalar_t* gc = grad_cell.const_data_ptr<scalar_t>();
    const scalar_t* nc = new_cell.const_data_ptr<scalar_t>();
    const scalar_t* g = gates.const_data_ptr<scalar_t>();
    scalar_t* dg = d_gates.mutable_data_ptr<scalar_t>();
    scalar_t* dc = d_old_cell.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, B, grain_rows(S), [&](int64_t b0, int64_t b1) {
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
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> forward_cpu(
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
    const at::Tensor& old_h, const at::Tensor& old_cell) {
  const CellSizes sizes = check_forward_args(input, weights, bias, old_h, old_cell);
  return forward_gemm(input, weights, bias, old_h, old_cell, sizes, forward_pointwise_cpu);
}

CellGrads backward_cpu(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                       const at::Tensor& new_cell, const at::Tensor& gate_weights,
                       const at::Tensor& X, const at::Tensor& weights, GradMask output_mask) {
  const CellSizes sizes =
      check_backward_args(grad_h, grad_cell, new_cell, gate_weights, X, weights);
  return backward_gemm(grad_h, grad_cell, new_cell, gate_weights, X, weights, output_mask, sizes,
                       backward_pointwise_cpu);
}

}  // namespace

CellSizes check_forward_args(const at::Tensor& input, const at::Tensor& weights,
                             const at::Tensor& bias, const at::Tensor& old_h,
                             const at::Tensor& old_cell) {
  check_rank(input, "input", 2);
  check_rank(weights, "weights", 2);
  check_rank(bias, "bias", 1);
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
  check_size(bias, "bias", 0, 3 * S, "3 * state_size");
  return {B, F, S};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> forward_gemm(
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
    const at::Tensor& old_h, const at::Tensor& old_cell, const CellSizes& sizes,
    ForwardPointwise pointwise) {
  const int64_t B = sizes.batch, S = sizes.state;
  // One concatenation (B*(S+F) elements) is cheaper than a second GEMM pass over the
  // (B, 3S) gates, and the backward needs X for the weight gradient anyway.
  at::Tensor X = at::cat({old_h, input}, 1);
  at::Tensor gate_weights = at::addmm(bias, X, weights.t());
  at::Tensor new_h = at::empty({B, S}, input.options());
  at::Tensor new_cell = at::empty({B, S}, input.options());
  if (new_h.numel() > 0) {
    pointwise(gate_weights, old_cell.contiguous(), new_h, new_cell);
  }
  return {new_h, new_cell, X, gate_weights};
}

CellSizes check_backward_args(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                              const at::Tensor& new_cell, const at::Tensor& gate_weights,
                              const at::Tensor& X, const at::Tensor& weights) {
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
  for (const auto& [t, name] : {std::pair{&grad_h, "grad_h"}, {&grad_cell, "grad_cell"}}) {
    check_size(*t, name, 0, B, "batch size, from new_cell");
    check_size(*t, name, 1, S, "state_size, from new_cell");
  }
  check_size(gate_weights, "gate_weights", 0, B, "batch size, from new_cell");
  check_size(gate_weights, "gate_weights", 1, 3 * S, "3 * state_size");
  check_size(X, "X", 0, B, "batch size, from new_cell");
  TORCH_CHECK_VALUE(X.size(1) >= S, "X.shape[1] must be state_size + input_features >= ",
                    fused_ops::num(S),
                    ", got shape ", fused_ops::shape_str(X));
  const int64_t F = X.size(1) - S;
  check_size(weights, "weights", 0, 3 * S, "3 * state_size");
  check_size(weights, "weights", 1, S + F, "X.shape[1]");
  return {B, F, S};
}

CellGrads backward_gemm(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                        const at::Tensor& new_cell, const at::Tensor& gate_weights,
                        const at::Tensor& X, const at::Tensor& weights, GradMask output_mask,
                        const CellSizes& sizes, BackwardPointwise pointwise) {
  const int64_t B = sizes.batch, F = sizes.features, S = sizes.state;
  at::Tensor d_gates = at::empty({B, 3 * S}, new_cell.options());
  at::Tensor d_old_cell = at::empty({B, S}, new_cell.options());
  if (d_old_cell.numel() > 0) {
    pointwise(grad_h.contiguous(), grad_cell.contiguous(), new_cell.contiguous(),
              gate_weights.contiguous(), d_gates, d_old_cell);
  }
  auto skipped = [&] { return at::empty({0}, new_cell.options()); };
  // d_X = d_gates @ weights = [d_old_h, d_input]: one GEMM per half (over weights' column
  // slices, no copy), so that each gradient is contiguous and an unwanted half costs nothing.
  at::Tensor d_input = output_mask[0] ? at::mm(d_gates, weights.narrow(1, S, F)) : skipped();
  at::Tensor d_weights = output_mask[1] ? at::mm(d_gates.t(), X) : skipped();
  at::Tensor d_bias = output_mask[2] ? d_gates.sum(0) : skipped();
  at::Tensor d_old_h = output_mask[3] ? at::mm(d_gates, weights.narrow(1, 0, S)) : skipped();
  return {d_input, d_weights, d_bias, d_old_h, d_old_cell};
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A new autograd node, held the way this torch holds them (std::shared_ptr in older
// releases, c10::intrusive_ptr in newer ones).
using NodePtr =
    std::invoke_result_t<torch::autograd::function_constructor, torch::autograd::edge_list&&>;
template <typename NodeT, typename... Args>
NodePtr make_node(Args&&... args) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>) {
    return std::make_shared<NodeT>(std::forward<Args>(args)...);
  } else {
    return c10::make_intrusive<NodeT>(std::forward<Args>(args)...);
  }
}

// Autograd for lltm_forward, in C++ so that a training step runs no Python in the
// backward (on a GPU at small sizes the step is bound by host overhead). Both halves go
// through the dispatcher, so torch.compile traces them as the two ops.
class CellFunction : public torch::autograd::Function<CellFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input,
                               const at::Tensor& weights, const at::Tensor& bias,
                               const at::Tensor& old_h, const at::Tensor& old_cell) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("lltm::lltm_forward", "")
                               .typed<decltype(forward_cpu)>();
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [new_h, new_cell, X, gates] = op.call(input, weights, bias, old_h, old_cell);
    ctx->save_for_backward({new_cell, gates, X, weights});
    // X and gate_weights are outputs only so that they can be saved; their gradients
    // are never needed, and with materialisation off an unused one arrives undefined.
    ctx->mark_non_differentiable({X, gates});
    ctx->set_materialize_grads(false);
    return {new_h, new_cell, X, gates};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("lltm::lltm_backward", "")
                               .typed<decltype(backward_cpu)>();
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &new_cell = saved[0], &gates = saved[1], &X = saved[2], &weights = saved[3];
    const at::Tensor grad_h = grads[0].defined() ? grads[0] : at::zeros_like(new_cell);
    const at::Tensor grad_cell = grads[1].defined() ? grads[1] : at::zeros_like(new_cell);
    // Inputs, and the op's outputs: 0 input, 1 weights, 2 bias, 3 old_h, 4 old_cell.
    const GradMask mask = {ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                           ctx->needs_input_grad(2), ctx->needs_input_grad(3)};
    variable_list out(5);
    {
      // lltm_backward has no autograd formula: go straight to its kernel instead of through
      // the Autograd key's boxed fallback (host time, which small problems are bound by).
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      std::tie(out[0], out[1], out[2], out[3], out[4]) =
          op.call(grad_h, grad_cell, new_cell, gates, X, weights, mask);
    }
    for (size_t i = 0; i < out.size(); ++i) {
      if (!ctx->needs_input_grad(i)) out[i] = at::Tensor();
    }
    if (at::GradMode::is_enabled()) {
      // create_graph=True: these gradients have no derivative of their own. A node that raises
      // when a second backward reaches it keeps them from passing as constants (which would
      // give silently wrong second derivatives).
      return torch::autograd::wrap_outputs(
          {grad_h, grad_cell, new_cell, weights}, std::move(out),
          [](torch::autograd::edge_list&& next_edges) {
            return make_node<torch::autograd::Error>(
                "lltm_cell is differentiable once: the gradients of its backward (a second "
                "backward after create_graph=True) are not implemented",
                std::move(next_edges));
          });
    }
    return out;
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> forward_autograd(
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
    const at::Tensor& old_h, const at::Tensor& old_cell) {
  auto outs = CellFunction::apply(input, weights, bias, old_h, old_cell);
  return {outs[0], outs[1], outs[2], outs[3]};
}

}  // namespace

TORCH_LIBRARY(lltm, m) {
  m.def(
      "lltm_forward(Tensor input, Tensor weights, Tensor bias, Tensor old_h, Tensor old_cell) "
      "-> (Tensor new_h, Tensor new_cell, Tensor X, Tensor gate_weights)");
  m.def(
      "lltm_backward(Tensor grad_h, Tensor grad_cell, Tensor new_cell, Tensor gate_weights, "
      "Tensor X, Tensor weights, bool[4] output_mask) "
      "-> (Tensor d_input, Tensor d_weights, Tensor d_bias, Tensor d_old_h, Tensor d_old_cell)");
}

TORCH_LIBRARY_IMPL(lltm, Autograd, m) { m.impl("lltm_forward", &forward_autograd); }

TORCH_LIBRARY_IMPL(lltm, CPU, m) {
  m.impl("lltm_forward", &forward_cpu);
  m.impl("lltm_backward", &backward_cpu);
}

}  // namespace lltm
