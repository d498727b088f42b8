// RWKV TimeX: operator schema and the CPU kernels (forward, and one backward giving both
// gradients). The CUDA kernels live in timex_cuda.cu; the formulas are in timex.h.
//
// On the CPU every output element is one dot product over contiguous memory:
//   out[b, c, t]     = eps + dot(w[c, T-1-t : T], k[b, c, 0 : t+1])
//   grad_k[b, c, u]  = dot(wr[c, 0 : T-u], g[b, c, u : T])        wr = w flipped in time
//   grad_w[c, T-1-s] = sum_b dot(g[b, c, s : T], k[b, c, 0 : T-s])
// Half types are computed in float, float64 in double.
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "common/module.h"
#include "rwkv/timex.h"

FUSED_OPS_PYTHON_MODULE()

namespace rwkv {
namespace {

// Sum of a[i] * b[i] over n elements with eight independent partial sums, so that the
// compiler can keep them in one vector register; the order is fixed, so is the result.
template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  T part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) part[j] += a[i + j] * b[i + j];
  }
  T tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7])) +
         tail;
}

// Rows of T elements per parallel_for task: about 64k multiply-adds each.
int64_t grain(int64_t T) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, T * T / 2)); }

at::Tensor forward_cpu(const at::Tensor& w, const at::Tensor& k, double eps) {
  check_timex_inputs(w, k);
  const int64_t B = k.size(0), C = k.size(1), T = k.size(2);
  const auto acc_type = at::toOpMathType(k.scalar_type());
  const at::Tensor wa = w.to(acc_type).contiguous();
  const at::Tensor ka = k.to(acc_type).contiguous();
  at::Tensor out = at::empty({B, C, T}, k.options().dtype(acc_type));
  if (out.numel() == 0) return out.to(k.scalar_type());
  AT_DISPATCH_FLOATING_TYPES(acc_type, "timex_forward_cpu", [&] {
    const scalar_t* wp = wa.const_data_ptr<scalar_t>();
    const scalar_t* kp = ka.const_data_ptr<scalar_t>();
    scalar_t* op = out.mutable_data_ptr<scalar_t>();
    const auto bias = static_cast<scalar_t>(eps);
    at::parallel_for(0, B * C, grain(T), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const scalar_t* wc = wp + (r % C) * T;
        const scalar_t* kr = kp + r * T;
        for (int64_t t = 0; t < T; ++t) {
          op[r * T + t] = bias + dot(wc + T - 1 - t, kr, t + 1);
        }
      }
    });
  });
  return out.to(k.scalar_type());
}

std::tuple<at::Tensor, at::Tensor> backward_cpu(const at::Tensor& grad_out, const at::Tensor& w,
                                                const at::Tensor& k) {
  check_timex_grad(grad_out, w, k);
  const int64_t B = k.size(0), C = k.size(1), T = k.size(2);
  const auto acc_type = at::toOpMathType(k.scalar_type());
  const at::Tensor wr = w.to(acc_type).flip({1}).contiguous();
  const at::Tensor ka = k.to(acc_type).contiguous();
  const at::Tensor ga = grad_out.to(acc_type).contiguous();
  at::Tensor grad_k = at::empty({B, C, T}, k.options().dtype(acc_type));
  at::Tensor grad_w = at::zeros({C, T}, k.options().dtype(acc_type));
  if (grad_k.numel() > 0) {
    AT_DISPATCH_FLOATING_TYPES(acc_type, "timex_backward_cpu", [&] {
      const scalar_t* wp = wr.const_data_ptr<scalar_t>();
      const scalar_t* kp = ka.const_data_ptr<scalar_t>();
      const scalar_t* gp = ga.const_data_ptr<scalar_t>();
      scalar_t* gk = grad_k.mutable_data_ptr<scalar_t>();
      scalar_t* gw = grad_w.mutable_data_ptr<scalar_t>();
      at::parallel_for(0, B * C, grain(T), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const scalar_t* wc = wp + (r % C) * T;
          const scalar_t* gr = gp + r * T;
          for (int64_t u = 0; u < T; ++u) gk[r * T + u] = dot(wc, gr + u, T - u);
        }
      });
      // One task per channel owns its row of grad_w and sums over the batch in order.
      at::parallel_for(0, C, std::max<int64_t>(1, grain(T) / std::max<int64_t>(1, B)),
                       [&](int64_t c0, int64_t c1) {
                         for (int64_t c = c0; c < c1; ++c) {
                           for (int64_t b = 0; b < B; ++b) {
                             const scalar_t* gr = gp + (b * C + c) * T;
                             const scalar_t* kr = kp + (b * C + c) * T;
                             for (int64_t s = 0; s < T; ++s) {
                               gw[c * T + T - 1 - s] += dot(gr + s, kr, T - s);
                             }
                           }
                         }
                       });
    });
  }
  return {grad_w.to(w.scalar_type()), grad_k.to(k.scalar_type())};
}

}  // namespace

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Autograd for timex_forward, in C++ as for the LLTM cell: a Python autograd wrapper costs
// tens of microseconds of host time a call, as much as the kernels at small sizes. Both
// halves go through the dispatcher, so torch.compile traces them as the two ops.
class TimexFunction : public torch::autograd::Function<TimexFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& w, const at::Tensor& k,
                            double eps) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("rwkv_ops::timex_forward", "")
                               .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double)>();
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({w, k});
    return op.call(w, k, eps);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto op =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("rwkv_ops::timex_backward", "")
            .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                      const at::Tensor&)>();
    const auto saved = ctx->get_saved_variables();
    auto [grad_w, grad_k] = op.call(grads[0], saved[0], saved[1]);
    return {ctx->needs_input_grad(0) ? grad_w : at::Tensor(),
            ctx->needs_input_grad(1) ? grad_k : at::Tensor(), at::Tensor()};
  }
};

at::Tensor forward_autograd(const at::Tensor& w, const at::Tensor& k, double eps) {
  return TimexFunction::apply(w, k, eps);
}

}  // namespace

TORCH_LIBRARY(rwkv_ops, m) {
  m.def("timex_forward(Tensor w, Tensor k, float eps=0.0) -> Tensor");
  m.def("timex_backward(Tensor grad_out, Tensor w, Tensor k) -> (Tensor grad_w, Tensor grad_k)");
}

TORCH_LIBRARY_IMPL(rwkv_ops, Autograd, m) { m.impl("timex_forward", &forward_autograd); }

TORCH_LIBRARY_IMPL(rwkv_ops, CPU, m) {
  m.impl("timex_forward", &forward_cpu);
  m.impl("timex_backward", &backward_cpu);
}

}  // namespace rwkv
