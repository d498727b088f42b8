// RWKV TimeX: operator schema and the CPU entry points, on the LibTorch stable ABI. The CPU
// kernels are in timex_cpu.h (an AVX2 + FMA build of them in timex_cpu_avx2.cpp), the CUDA
// kernels in timex_cuda.cu; the formulas are in timex.h. Half types are computed in float,
// float64 in double. The autograd formulas (first and second derivatives) live in Python
// (rwkv_ops/_ops.py, torch.library.register_autograd): the stable ABI has no C++ autograd.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <optional>
#include <tuple>
#include <vector>

#include "common/alloc.h"
#include "common/checks.h"
#include "common/cpu_features.h"
#include "common/dispatch.h"
#include "common/module.h"
#include "rwkv/timex.h"
#include "rwkv/timex_cpu.h"
#include "rwkv/timex_fft.h"
#include "rwkv/timex_fft_cpu.h"

FUSED_OPS_PYTHON_MODULE(_C)

namespace rwkv {
namespace {

using fused_ops::Tensor;
using torch::headeronly::ScalarType;

// Longest T that the direct kernels take on the CPU when RWKV_TIMEX_ALGO is auto, by
// accumulation type; longer rows go to the FFT. Measured with benchmarks/timex_crossover.py
// on the 2-core CPU machine (benchmarks/results/timex_crossover_cpu.md): the direct kernels
// win up to T = 512 (256 rows) to 1024 (16 rows) in float32, 256 to 768 in float64; the
// table takes the many-rows end, where the time is.
constexpr int64_t kCpuDirectMaxT[] = {/*float and half types*/ 512, /*double*/ 256};

fft::Kernel choose_cpu(const Tensor& k) {
  const fft::Algo algo = fft::algo_override();
  if (algo == fft::Algo::kAuto) {
    const bool dbl = k.scalar_type() == ScalarType::Double;
    return k.size(2) > kCpuDirectMaxT[dbl] ? fft::Kernel::kFftLibrary : fft::Kernel::kDirect;
  }
  // fft and fft_library: the one FFT path on the CPU
  return algo == fft::Algo::kDirect ? fft::Kernel::kDirect : fft::Kernel::kFftLibrary;
}

bool use_fft_cpu(const Tensor& k) { return choose_cpu(k) != fft::Kernel::kDirect; }

int64_t algorithm_cpu(Tensor k) {
  fused_ops::check_rank(k, "k", 3);
  return static_cast<int64_t>(choose_cpu(k));
}

// Rows of T elements per parallel_for task: about 64k multiply-adds each.
int64_t grain(int64_t T) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, T * T / 2)); }

// Fills rows with w's rows (w: any strides, element type in_t) in the kernels' zero-padded
// layout (timex_cpu.h), converted to acc_t, reversed in time or as they are. One pass over
// the buffer (ATen's zeros + narrow + copy_ of a flipped w took three).
template <typename in_t, typename acc_t>
void fill_padded_rows(const Tensor& w, Tensor& rows, bool reversed) {
  const int64_t C = w.size(0), T = w.size(1), ld = padded_length(T);
  const int64_t s0 = w.stride(0), s1 = w.stride(1);
  const in_t* src = w.const_data_ptr<in_t>();
  acc_t* dst = rows.mutable_data_ptr<acc_t>();
  for (int64_t c = 0; c < C; ++c) {
    acc_t* row = dst + c * ld;
    std::fill(row, row + kPad, acc_t(0));
    for (int64_t j = 0; j < T; ++j) {
      row[kPad + j] = static_cast<acc_t>(src[c * s0 + (reversed ? T - 1 - j : j) * s1]);
    }
    std::fill(row + kPad + T, row + ld, acc_t(0));
  }
}

// w's rows in the kernels' zero-padded layout, as acc_type (float or double).
Tensor padded_rows(const Tensor& w, ScalarType acc_type, bool reversed) {
  Tensor rows = fused_ops::empty({w.size(0), padded_length(w.size(1))}, acc_type, w);
  FUSED_OPS_DISPATCH_FLOATING(w.scalar_type(), "timex_padded_rows", [&] {
    fill_padded_rows<scalar_t, fused_ops::opmath_t<scalar_t>>(w, rows, reversed);
  });
  return rows;
}

// k converted to the accumulation type, contiguous (no dispatcher call where it already is
// both).
Tensor as_contiguous(const Tensor& t, ScalarType type) {
  return fused_ops::as_contiguous(t.scalar_type() == type ? t : torch::stable::to(t, type));
}

template <typename scalar_t>
void forward_rows_cpu(const Tensor& w_rev, const Tensor& ka, Tensor& out, double eps) {
  const int64_t C = ka.size(1), T = ka.size(2);
  const auto kernel =
      fused_ops::cpu_has_avx2() ? forward_rows_avx2<scalar_t> : forward_rows<scalar_t>;
  const scalar_t* wp = w_rev.const_data_ptr<scalar_t>();
  const scalar_t* kp = ka.const_data_ptr<scalar_t>();
  scalar_t* op = out.mutable_data_ptr<scalar_t>();
  const auto bias = static_cast<scalar_t>(eps);
  torch::stable::parallel_for(0, ka.size(0) * C, grain(T), [&](int64_t r0, int64_t r1) {
    kernel(wp, kp, op, bias, C, T, r0, r1);
  });
}

template <typename scalar_t>
void backward_rows_cpu(const Tensor& w_fwd, const Tensor& ka, const Tensor& ga, Tensor& grad_w,
                       Tensor& grad_k) {
  const int64_t B = ka.size(0), C = ka.size(1), T = ka.size(2);
  const bool avx2 = fused_ops::cpu_has_avx2();
  const auto k_kernel = avx2 ? grad_k_rows_avx2<scalar_t> : grad_k_rows<scalar_t>;
  const auto w_kernel = avx2 ? grad_w_channels_avx2<scalar_t> : grad_w_channels<scalar_t>;
  const scalar_t* wp = w_fwd.const_data_ptr<scalar_t>();
  const scalar_t* kp = ka.const_data_ptr<scalar_t>();
  const scalar_t* gp = ga.const_data_ptr<scalar_t>();
  scalar_t* gk = grad_k.mutable_data_ptr<scalar_t>();
  scalar_t* gw = grad_w.mutable_data_ptr<scalar_t>();
  torch::stable::parallel_for(0, B * C, grain(T), [&](int64_t r0, int64_t r1) {
    k_kernel(wp, gp, gk, C, T, r0, r1);
  });
  // One task per channel owns its row of grad_w and sums over the batch in order.
  torch::stable::parallel_for(0, C, std::max<int64_t>(1, grain(T) / std::max<int64_t>(1, B)),
                              [&](int64_t c0, int64_t c1) {
                                std::vector<scalar_t> scratch(grad_w_scratch_length(T));  // zeros
                                w_kernel(gp, kp, gw, B, C, T, c0, c1, scratch.data());
                              });
}

Tensor forward_cpu(Tensor w, Tensor k, double eps) {
  check_timex_inputs(w, k);
  const int64_t B = k.size(0), C = k.size(1), T = k.size(2);
  if (k.numel() != 0 && use_fft_cpu(k)) {  // the FFT path allocates its output last
    const Tensor wc = fused_ops::as_contiguous(w), kc = fused_ops::as_contiguous(k);
    Tensor result;
    FUSED_OPS_DISPATCH_FLOATING(k.scalar_type(), "timex_forward_cpu_fft", [&] {
      result = fft::forward<scalar_t>(fft::CpuBackend<fused_ops::opmath_t<scalar_t>>{}, wc, kc, eps);
    });
    return result;
  }
  const ScalarType acc_type = fused_ops::opmath_type(k.scalar_type());
  Tensor out = fused_ops::empty({B, C, T}, acc_type, k);
  if (out.numel() == 0) return torch::stable::to(out, k.scalar_type());
  const Tensor w_rev = padded_rows(w, acc_type, /*reversed=*/true);
  const Tensor ka = as_contiguous(k, acc_type);
  FUSED_OPS_DISPATCH_FLOAT_DOUBLE(acc_type, "timex_forward_cpu", [&] {
    forward_rows_cpu<scalar_t>(w_rev, ka, out, eps);
  });
  return torch::stable::to(out, k.scalar_type());
}

std::tuple<Tensor, Tensor> backward_cpu(Tensor grad_out, Tensor w, Tensor k) {
  check_timex_grad(grad_out, w, k);
  const int64_t B = k.size(0), C = k.size(1), T = k.size(2);
  if (k.numel() != 0 && use_fft_cpu(k)) {  // the FFT path allocates its outputs last
    const Tensor gc = fused_ops::as_contiguous(grad_out), wc = fused_ops::as_contiguous(w);
    const Tensor kc = fused_ops::as_contiguous(k);
    std::tuple<Tensor, Tensor> result;
    FUSED_OPS_DISPATCH_FLOATING(k.scalar_type(), "timex_backward_cpu_fft", [&] {
      result = fft::backward<scalar_t>(fft::CpuBackend<fused_ops::opmath_t<scalar_t>>{}, gc, wc, kc);
    });
    return result;
  }
  const ScalarType acc_type = fused_ops::opmath_type(k.scalar_type());
  Tensor grad_k = fused_ops::empty({B, C, T}, acc_type, k);
  // The kernels write every element of grad_w; with B == 0 it is an empty sum, zeros.
  Tensor grad_w = fused_ops::empty({C, T}, acc_type, k);
  if (grad_k.numel() == 0) {
    torch::stable::zero_(grad_w);
  } else {
    const Tensor w_fwd = padded_rows(w, acc_type, /*reversed=*/false);
    const Tensor ka = as_contiguous(k, acc_type);
    const Tensor ga = as_contiguous(grad_out, acc_type);
    FUSED_OPS_DISPATCH_FLOAT_DOUBLE(acc_type, "timex_backward_cpu", [&] {
      backward_rows_cpu<scalar_t>(w_fwd, ka, ga, grad_w, grad_k);
    });
  }
  return {torch::stable::to(grad_w, w.scalar_type()), torch::stable::to(grad_k, k.scalar_type())};
}

// timex_forward plus, where the library FFT runs, the spectra of k and W for
// timex_backward_kept (else two empty tensors).
std::tuple<Tensor, Tensor, Tensor> forward_keep_cpu(Tensor w, Tensor k, double eps) {
  check_timex_inputs(w, k);
  if (k.numel() == 0 || !use_fft_cpu(k)) {
    const Tensor none = fft::no_spectra(k);  // one empty tensor as both, as on CUDA
    return {forward_cpu(w, k, eps), none, none};
  }
  const Tensor wc = fused_ops::as_contiguous(w), kc = fused_ops::as_contiguous(k);
  std::tuple<Tensor, Tensor> keep;
  Tensor out;
  FUSED_OPS_DISPATCH_FLOATING(k.scalar_type(), "timex_forward_keep_cpu", [&] {
    out = fft::forward<scalar_t>(fft::CpuBackend<fused_ops::opmath_t<scalar_t>>{}, wc, kc, eps, &keep);
  });
  return {out, std::get<0>(keep), std::get<1>(keep)};
}

std::tuple<Tensor, Tensor> backward_kept_cpu(Tensor grad_out, Tensor w, Tensor k, Tensor kz,
                                             Tensor wz) {
  check_timex_grad(grad_out, w, k);
  const ScalarType ctype = fused_ops::opmath_type(k.scalar_type()) == ScalarType::Double
                               ? ScalarType::ComplexDouble
                               : ScalarType::ComplexFloat;
  if (k.numel() == 0 || !fft::check_kept(kz, wz, k, ctype)) return backward_cpu(grad_out, w, k);
  const Tensor gc = fused_ops::as_contiguous(grad_out), wc = fused_ops::as_contiguous(w);
  const Tensor kc = fused_ops::as_contiguous(k);
  const std::tuple<Tensor, Tensor> kept{kz, wz};
  std::tuple<Tensor, Tensor> result;
  FUSED_OPS_DISPATCH_FLOATING(k.scalar_type(), "timex_backward_kept_cpu", [&] {
    result = fft::backward<scalar_t>(fft::CpuBackend<fused_ops::opmath_t<scalar_t>>{}, gc, wc, kc, &kept);
  });
  return result;
}

}  // namespace

STABLE_TORCH_LIBRARY(rwkv_ops, m) {
  m.def("timex_forward(Tensor w, Tensor k, float eps=0.0) -> Tensor");
  m.def("timex_backward(Tensor grad_out, Tensor w, Tensor k) -> (Tensor grad_w, Tensor grad_k)");
  // Which algorithm timex_forward / timex_backward run for k (rwkv_ops.timex_algorithm).
  m.def("timex_algorithm(Tensor k) -> int");
  // The eager training path (rwkv_ops/_ops.py, _TimeX): the forward keeps the library FFT's
  // spectra of k and W, or the on-chip FFT kernels' twiddle tables and W's spectra (CUDA), else
  // empty tensors, and the backward takes them instead of making them again. Same results, bit
  // for bit, as timex_forward/_backward.
  m.def("timex_forward_keep(Tensor w, Tensor k, float eps=0.0) -> (Tensor, Tensor, Tensor)");
  m.def("timex_backward_kept(Tensor grad_out, Tensor w, Tensor k, Tensor kz, Tensor wz) -> "
        "(Tensor grad_w, Tensor grad_k)");
}

STABLE_TORCH_LIBRARY_IMPL(rwkv_ops, CPU, m) {
  m.impl("timex_forward", TORCH_BOX(&forward_cpu));
  m.impl("timex_backward", TORCH_BOX(&backward_cpu));
  m.impl("timex_algorithm", TORCH_BOX(&algorithm_cpu));
  m.impl("timex_forward_keep", TORCH_BOX(&forward_keep_cpu));
  m.impl("timex_backward_kept", TORCH_BOX(&backward_kept_cpu));
}

}  // namespace rwkv
