// RWKV TimeX: operator schema, the CPU entry points and the autograd function. The CPU
// kernels are in timex_cpu.h (an AVX2 + FMA build of them in timex_cpu_avx2.cpp), the CUDA
// kernels in timex_cuda.cu; the formulas are in timex.h. Half types are computed in float,
// float64 in double.
#include <ATen/OpMathType.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <vector>

#include "common/cpu_features.h"
#include "common/module.h"
#include "common/parallel.h"
#include "rwkv/timex.h"
#include "rwkv/timex_cpu.h"

FUSED_OPS_PYTHON_MODULE(_C)

namespace rwkv {
namespace {

// Rows of T elements per parallel_for task: about 64k multiply-adds each.
int64_t grain(int64_t T) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, T * T / 2)); }

// w's rows in the kernels' zero-padded layout (timex_cpu.h), as `type`, reversed in time or
// as they are (copy_ converts the dtype on the way).
at::Tensor padded_rows(const at::Tensor& w, at::ScalarType type, bool reversed) {
  const int64_t T = w.size(1);
  at::Tensor rows = at::zeros({w.size(0), padded_length(T)}, w.options().dtype(type));
  rows.narrow(1, kPad, T).copy_(reversed ? w.flip({1}) : w);
  return rows;
}

at::Tensor forward_cpu(const at::Tensor& w, const at::Tensor& k, double eps) {
  check_timex_inputs(w, k);
  const int64_t B = k.size(0), C = k.size(1), T = k.size(2);
  const auto acc_type = at::toOpMathType(k.scalar_type());
  at::Tensor out = at::empty({B, C, T}, k.options().dtype(acc_type));
  if (out.numel() == 0) return out.to(k.scalar_type());
  const at::Tensor w_rev = padded_rows(w, acc_type, /*reversed=*/true);
  const at::Tensor ka = k.to(acc_type).contiguous();
  AT_DISPATCH_FLOATING_TYPES(acc_type, "timex_forward_cpu", [&] {
    const auto kernel =
        fused_ops::cpu_has_avx2() ? forward_rows_avx2<scalar_t> : forward_rows<scalar_t>;
    const scalar_t* wp = w_rev.const_data_ptr<scalar_t>();
    const scalar_t* kp = ka.const_data_ptr<scalar_t>();
    scalar_t* op = out.mutable_data_ptr<scalar_t>();
    const auto bias = static_cast<scalar_t>(eps);
    at::parallel_for(0, B * C, grain(T), [&](int64_t r0, int64_t r1) {
      kernel(wp, kp, op, bias, C, T, r0, r1);
    });
  });
  return out.to(k.scalar_type());
}

std::tuple<at::Tensor, at::Tensor> backward_cpu(const at::Tensor& grad_out, const at::Tensor& w,
                                                const at::Tensor& k) {
  check_timex_grad(grad_out, w, k);
  const int64_t B = k.size(0), C = k.size(1), T = k.size(2);
  const auto acc_type = at::toOpMathType(k.scalar_type());
  at::Tensor grad_k = at::empty({B, C, T}, k.options().dtype(acc_type));
  // The kernels write every element of grad_w; with B == 0 it is an empty sum, zeros.
  at::Tensor grad_w = at::empty({C, T}, k.options().dtype(acc_type));
  if (grad_k.numel() == 0) {
    grad_w.zero_();
  } else {
    const at::Tensor w_fwd = padded_rows(w, acc_type, /*reversed=*/false);
    const at::Tensor ka = k.to(acc_type).contiguous();
    const at::Tensor ga = grad_out.to(acc_type).contiguous();
    AT_DISPATCH_FLOATING_TYPES(acc_type, "timex_backward_cpu", [&] {
      const bool avx2 = fused_ops::cpu_has_avx2();
      const auto k_kernel = avx2 ? grad_k_rows_avx2<scalar_t> : grad_k_rows<scalar_t>;
      const auto w_kernel = avx2 ? grad_w_channels_avx2<scalar_t> : grad_w_channels<scalar_t>;
      const scalar_t* wp = w_fwd.const_data_ptr<scalar_t>();
      const scalar_t* kp = ka.const_data_ptr<scalar_t>();
      const scalar_t* gp = ga.const_data_ptr<scalar_t>();
      scalar_t* gk = grad_k.mutable_data_ptr<scalar_t>();
      scalar_t* gw = grad_w.mutable_data_ptr<scalar_t>();
      at::parallel_for(0, B * C, grain(T), [&](int64_t r0, int64_t r1) {
        k_kernel(wp, gp, gk, C, T, r0, r1);
      });
      // One task per channel owns its row of grad_w and sums over the batch in order.
      at::parallel_for(0, C, std::max<int64_t>(1, grain(T) / std::max<int64_t>(1, B)),
                       [&](int64_t c0, int64_t c1) {
                         std::vector<scalar_t> scratch(grad_w_scratch_length(T));  // zeros
                         w_kernel(gp, kp, gw, B, C, T, c0, c1, scratch.data());
                       });
    });
  }
  return {grad_w.to(w.scalar_type()), grad_k.to(k.scalar_type())};
}

}  // namespace

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using ForwardOp = at::Tensor(const at::Tensor&, const at::Tensor&, double);
using BackwardOp = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                      const at::Tensor&);

c10::TypedOperatorHandle<ForwardOp> forward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("rwkv_ops::timex_forward", "")
                             .typed<ForwardOp>();
  return op;
}

c10::TypedOperatorHandle<BackwardOp> backward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("rwkv_ops::timex_backward", "")
                             .typed<BackwardOp>();
  return op;
}

// Autograd for timex_forward and timex_backward, in C++ as for the LLTM cell: a Python
// autograd wrapper costs tens of microseconds of host time a call, as much as the kernels at
// small sizes. Every call goes through the dispatcher, so torch.compile traces the ops.
class TimexFunction : public torch::autograd::Function<TimexFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& w, const at::Tensor& k,
                            double eps) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({w, k});
    return forward_op().call(w, k, eps);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    // With autograd (timex_backward has its own formula below), so create_graph=True works.
    auto [grad_w, grad_k] = backward_op().call(grads[0], saved[0], saved[1]);
    return {ctx->needs_input_grad(0) ? grad_w : at::Tensor(),
            ctx->needs_input_grad(1) ? grad_k : at::Tensor(), at::Tensor()};
  }
};

// The derivatives of timex_backward (double backward). TimeX is bilinear in (w, k), and each
// of its gradients is bilinear in grad_out and the other argument, so their derivatives are
// TimeX products again. With gg_w and gg_k the gradients arriving for grad_w and grad_k:
//   d grad_out = timex(w, gg_k) + timex(gg_w, k)
//   d w        = grad_w of timex_backward(grad_out, w, gg_k)   (k replaced by gg_k)
//   d k        = grad_k of timex_backward(grad_out, gg_w, k)   (w replaced by gg_w)
// Computed with autograd, so they can be differentiated again.
class TimexBackwardFunction : public torch::autograd::Function<TimexBackwardFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& grad_out,
                               const at::Tensor& w, const at::Tensor& k) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({grad_out, w, k});
    ctx->set_materialize_grads(false);  // an unused gradient arrives undefined: no zeros
    auto [grad_w, grad_k] = backward_op().call(grad_out, w, k);
    return {grad_w, grad_k};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &grad_out = saved[0], &w = saved[1], &k = saved[2];
    const at::Tensor &gg_w = grads[0], &gg_k = grads[1];
    at::Tensor d_grad_out, d_w, d_k;
    if (ctx->needs_input_grad(0)) {
      if (gg_k.defined()) d_grad_out = forward_op().call(w, gg_k, 0.0);
      if (gg_w.defined()) {
        const at::Tensor term = forward_op().call(gg_w, k, 0.0);
        d_grad_out = d_grad_out.defined() ? d_grad_out + term : term;
      }
    }
    if (ctx->needs_input_grad(1) && gg_k.defined()) {
      d_w = std::get<0>(backward_op().call(grad_out, w, gg_k));
    }
    if (ctx->needs_input_grad(2) && gg_w.defined()) {
      d_k = std::get<1>(backward_op().call(grad_out, gg_w, k));
    }
    return {d_grad_out, d_w, d_k};
  }
};

at::Tensor forward_autograd(const at::Tensor& w, const at::Tensor& k, double eps) {
  return TimexFunction::apply(w, k, eps);
}

std::tuple<at::Tensor, at::Tensor> backward_autograd(const at::Tensor& grad_out,
                                                     const at::Tensor& w, const at::Tensor& k) {
  auto outs = TimexBackwardFunction::apply(grad_out, w, k);
  return {outs[0], outs[1]};
}

}  // namespace

TORCH_LIBRARY(rwkv_ops, m) {
  m.def("timex_forward(Tensor w, Tensor k, float eps=0.0) -> Tensor");
  m.def("timex_backward(Tensor grad_out, Tensor w, Tensor k) -> (Tensor grad_w, Tensor grad_k)");
}

TORCH_LIBRARY_IMPL(rwkv_ops, Autograd, m) {
  m.impl("timex_forward", &forward_autograd);
  m.impl("timex_backward", &backward_autograd);
}

TORCH_LIBRARY_IMPL(rwkv_ops, CPU, m) {
  m.impl("timex_forward", &forward_cpu);
  m.impl("timex_backward", &backward_cpu);
}

}  // namespace rwkv
