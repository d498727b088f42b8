// RWKV TimeX: CUDA launchers and the CUDA registration (the _C_cuda library), on the
// LibTorch stable ABI. The kernels, their tiling and the configurations chosen per batch size
// and dtype (Tiles) are in timex_kernels.cuh; which algorithm a call runs in timex_choice.h.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <climits>
#include <optional>
#include <tuple>
#include <type_traits>

#include "common/alloc.h"
#include "common/checks.h"
#include "common/cuda_utils.cuh"
#include "common/dispatch.h"
#include "common/kernel_image.cuh"
#include "common/module.h"
#include "rwkv/timex.h"
#include "rwkv/timex_choice.h"
#include "rwkv/timex_fft.h"
#include "rwkv/timex_fft_cuda.cuh"
#include "rwkv/timex_fft_fused.h"
#include "rwkv/timex_fft_tc.h"
#include "rwkv/timex_kernels.cuh"
#include "rwkv/timex_tc_launch.cuh"

FUSED_OPS_PYTHON_MODULE(_C_cuda)

namespace rwkv {
namespace {

using fused_ops::Tensor;
using kernels::cdiv;

template <typename Kernel>
void allow_shared_memory(Kernel kernel, int bytes) {
  FUSED_OPS_CUDA_CHECK(
      fused_ops::raise_shared_memory_limit(reinterpret_cast<const void*>(kernel), bytes));
}

unsigned grid_size(int64_t blocks) {
  FUSED_OPS_CHECK(blocks <= INT_MAX, "timex: the input is too large for one launch (",
                  fused_ops::num(blocks), " blocks)");
  return static_cast<unsigned>(blocks);
}

template <typename scalar_t>
bool vector_ok(const Tensor& t) {
  return std::is_same_v<scalar_t, fused_ops::opmath_t<scalar_t>> && t.size(-1) % 4 == 0 &&
         fused_ops::aligned16(t.const_data_ptr());
}

// out = eps + causal product of `in` (CAUSAL), or the anti-causal product (grad_k).
template <typename scalar_t, typename Cfg, bool CAUSAL>
void toeplitz(const Tensor& w, const Tensor& in, Tensor& out, double eps,
              cudaStream_t stream) {
  using acc_t = typename Cfg::acc_t;
  const int B = static_cast<int>(in.size(0)), C = static_cast<int>(in.size(1));
  const int T = static_cast<int>(in.size(2));
  const int64_t blocks =
      int64_t{cdiv(C, Cfg::NC)} * cdiv(B, Cfg::BB) * cdiv(T, Cfg::TT);
  auto kernel = kernels::toeplitz_kernel<scalar_t, Cfg, CAUSAL>;
  allow_shared_memory(kernel, Cfg::SMEM_BYTES);
  kernel<<<grid_size(blocks), Cfg::THREADS, Cfg::SMEM_BYTES, stream>>>(
      w.const_data_ptr<scalar_t>(), in.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(),
      B, C, T, static_cast<acc_t>(eps), vector_ok<scalar_t>(w), vector_ok<scalar_t>(in),
      vector_ok<scalar_t>(out));
  FUSED_OPS_LAUNCH_CHECK();
}

// The tensor-core kernel for float32 (3xTF32).
template <typename scalar_t, typename Cfg, bool CAUSAL>
void toeplitz_tc(const Tensor& w, const Tensor& in, Tensor& out, double eps,
                 cudaStream_t stream) {
  const int B = static_cast<int>(in.size(0)), C = static_cast<int>(in.size(1));
  const int T = static_cast<int>(in.size(2));
  const int64_t blocks = int64_t{C} * cdiv(B, Cfg::BB) * cdiv(T, Cfg::TT);
  auto kernel = kernels::toeplitz_tc_kernel<scalar_t, Cfg, CAUSAL>;
  allow_shared_memory(kernel, Cfg::SMEM_BYTES);
  kernel<<<grid_size(blocks), Cfg::THREADS, Cfg::SMEM_BYTES, stream>>>(
      w.const_data_ptr<scalar_t>(), in.const_data_ptr<scalar_t>(),
      out.mutable_data_ptr<scalar_t>(), B, C, T, static_cast<float>(eps), vector_ok<scalar_t>(w),
      vector_ok<scalar_t>(in));
  FUSED_OPS_LAUNCH_CHECK();
}

// bfloat16 and float16 on sm_80 and newer: the kernels of timex_tc_*.cuh (bf16/fp16 MMAs)
// for all three products. Elsewhere (and float64) the FMA kernels, float32 on sm_80 and newer
// the 3xTF32 kernel where Tiles has one for the batch size and length.
template <typename scalar_t>
constexpr bool kHalfType = sizeof(scalar_t) == 2;

inline bool half_tensor_cores(const Tensor& t) {
  return fused_ops::device_properties(t).major >= 8;
}

template <typename scalar_t, bool CAUSAL>
void toeplitz_for_batch(const Tensor& w, const Tensor& in, Tensor& out, double eps,
                        cudaStream_t stream) {
  using Tiles = kernels::Tiles<fused_ops::opmath_t<scalar_t>>;
  const int B = static_cast<int>(in.size(0)), T = static_cast<int>(in.size(2));
  if constexpr (kHalfType<scalar_t>) {
    if (half_tensor_cores(in)) {
      half_tc_launch::toeplitz<scalar_t, CAUSAL>(
          w.const_data_ptr<scalar_t>(), in.const_data_ptr<scalar_t>(),
          out.mutable_data_ptr<scalar_t>(), B, static_cast<int>(in.size(1)), T, eps,
          fused_ops::device_properties(in).multiProcessorCount, stream);
      return;
    }
  }
  if constexpr (std::is_same_v<scalar_t, float>) {
    if (fused_ops::device_properties(in).major >= 8 &&
        Tiles::toeplitz_tc(B, T, [&](auto cfg) {
          toeplitz_tc<scalar_t, decltype(cfg), CAUSAL>(w, in, out, eps, stream);
        })) {
      return;
    }
  }
  Tiles::toeplitz(B, [&](auto cfg) {
    toeplitz<scalar_t, decltype(cfg), CAUSAL>(w, in, out, eps, stream);
  });
}

template <typename scalar_t, typename Cfg>
void wgrad(const Tensor& g, const Tensor& k, Tensor& grad_w, cudaStream_t stream) {
  const int B = static_cast<int>(k.size(0)), C = static_cast<int>(k.size(1));
  const int T = static_cast<int>(k.size(2));
  const int64_t blocks = int64_t{cdiv(C, Cfg::NCH)} * cdiv(T, Cfg::ST);
  auto kernel = kernels::wgrad_kernel<scalar_t, Cfg>;
  allow_shared_memory(kernel, Cfg::SMEM_BYTES);
  kernel<<<grid_size(blocks), Cfg::THREADS, Cfg::SMEM_BYTES, stream>>>(
      g.const_data_ptr<scalar_t>(), k.const_data_ptr<scalar_t>(),
      grad_w.mutable_data_ptr<scalar_t>(), B, C, T, vector_ok<scalar_t>(g) && vector_ok<scalar_t>(k));
  FUSED_OPS_LAUNCH_CHECK();
}

template <typename scalar_t>
void wgrad_for_batch(const Tensor& g, const Tensor& k, Tensor& grad_w,
                     cudaStream_t stream) {
  using Tiles = kernels::Tiles<fused_ops::opmath_t<scalar_t>>;
  if constexpr (kHalfType<scalar_t>) {
    if (half_tensor_cores(k)) {
      half_tc_launch::wgrad<scalar_t>(g.const_data_ptr<scalar_t>(), k.const_data_ptr<scalar_t>(),
                                      grad_w.mutable_data_ptr<scalar_t>(),
                                      static_cast<int>(k.size(0)), static_cast<int>(k.size(1)),
                                      static_cast<int>(k.size(2)), stream);
      return;
    }
  }
  Tiles::wgrad(static_cast<int>(k.size(0)),
               [&](auto cfg) { wgrad<scalar_t, decltype(cfg)>(g, k, grad_w, stream); });
}

// The dtype-specific bodies are templates so that each dispatch body is a single call
// (THO_DISPATCH splits its body at top-level commas).
template <typename scalar_t>
void backward_for_batch(const Tensor& gc, const Tensor& wc, const Tensor& kc, Tensor& grad_w,
                        Tensor& grad_k, cudaStream_t stream) {
  toeplitz_for_batch<scalar_t, false>(wc, gc, grad_k, 0.0, stream);
  wgrad_for_batch<scalar_t>(gc, kc, grad_w, stream);
}

using choice::choose_cuda;

int64_t algorithm_cuda(Tensor k) {
  fused_ops::check_rank(k, "k", 3);
  return static_cast<int64_t>(choose_cuda(k));
}

template <typename scalar_t>
Tensor fft_forward(const Tensor& w, const Tensor& k, double eps, cudaStream_t stream) {
  return fft::forward<scalar_t>(fft::CudaBackend<fused_ops::opmath_t<scalar_t>>{stream}, w, k, eps);
}

template <typename scalar_t>
std::tuple<Tensor, Tensor> fft_backward(const Tensor& g, const Tensor& w, const Tensor& k,
                                        cudaStream_t stream) {
  return fft::backward<scalar_t>(fft::CudaBackend<fused_ops::opmath_t<scalar_t>>{stream}, g, w, k);
}

// timex_forward with its inputs checked and the algorithm chosen.
Tensor forward_checked(const Tensor& w, const Tensor& k, double eps, fft::Kernel algo) {
  fused_ops::check_kernel_image(k);
  const fused_ops::DeviceGuard guard(k.get_device_index());
  const cudaStream_t stream = fused_ops::current_stream(k);
  const Tensor wc = fused_ops::as_contiguous(w);
  const Tensor kc = fused_ops::as_contiguous(k);
  if (algo == fft::Kernel::kFftTc) return fft::tc_forward(wc, kc, eps, stream);
  if (algo == fft::Kernel::kFftFused) return fft::fused_forward(wc, kc, eps, stream);
  if (algo == fft::Kernel::kFftCluster) return fft::cluster_forward(wc, kc, eps, stream);
  if (algo == fft::Kernel::kFftLibrary) {  // allocates its output last: lower peak memory
    Tensor out;
    FUSED_OPS_DISPATCH_FLOATING(k.scalar_type(), "timex_forward_cuda_fft", [&] {
      out = fft_forward<scalar_t>(wc, kc, eps, stream);
    });
    return out;
  }
  Tensor out = fused_ops::empty({k.size(0), k.size(1), k.size(2)}, k.scalar_type(), k);
  if (out.numel() == 0) return out;
  FUSED_OPS_DISPATCH_FLOATING(k.scalar_type(), "timex_forward_cuda", [&] {
    toeplitz_for_batch<scalar_t, true>(wc, kc, out, eps, stream);
  });
  return out;
}

Tensor forward_cuda(Tensor w, Tensor k, double eps) {
  check_timex_inputs(w, k);
  return forward_checked(w, k, eps, k.numel() != 0 ? choose_cuda(k) : fft::Kernel::kDirect);
}

// timex_backward with its inputs checked and the algorithm chosen.
std::tuple<Tensor, Tensor> backward_checked(const Tensor& grad_out, const Tensor& w,
                                            const Tensor& k, fft::Kernel algo) {
  fused_ops::check_kernel_image(k);
  const fused_ops::DeviceGuard guard(k.get_device_index());
  const cudaStream_t stream = fused_ops::current_stream(k);
  const Tensor gc = fused_ops::as_contiguous(grad_out);
  const Tensor wc = fused_ops::as_contiguous(w);
  const Tensor kc = fused_ops::as_contiguous(k);
  if (algo == fft::Kernel::kFftTc) return fft::tc_backward(gc, wc, kc, stream);
  if (algo == fft::Kernel::kFftFused) return fft::fused_backward(gc, wc, kc, stream);
  if (algo == fft::Kernel::kFftCluster) return fft::cluster_backward(gc, wc, kc, stream);
  if (algo == fft::Kernel::kFftLibrary) {  // allocates its outputs last: lower peak memory
    std::tuple<Tensor, Tensor> grads;
    FUSED_OPS_DISPATCH_FLOATING(k.scalar_type(), "timex_backward_cuda_fft", [&] {
      grads = fft_backward<scalar_t>(gc, wc, kc, stream);
    });
    return grads;
  }
  Tensor grad_k = fused_ops::empty({k.size(0), k.size(1), k.size(2)}, k.scalar_type(), k);
  Tensor grad_w = fused_ops::empty({w.size(0), w.size(1)}, w.scalar_type(), w);
  if (grad_w.numel() == 0) return {grad_w, grad_k};  // C == 0 or T == 0: nothing to compute
  if (grad_k.numel() == 0) return {torch::stable::zero_(grad_w), grad_k};  // B == 0: empty sum
  FUSED_OPS_DISPATCH_FLOATING(k.scalar_type(), "timex_backward_cuda", [&] {
    backward_for_batch<scalar_t>(gc, wc, kc, grad_w, grad_k, stream);
  });
  return {grad_w, grad_k};
}

std::tuple<Tensor, Tensor> backward_cuda(Tensor grad_out, Tensor w, Tensor k) {
  check_timex_grad(grad_out, w, k);
  return backward_checked(grad_out, w, k,
                          k.numel() != 0 ? choose_cuda(k) : fft::Kernel::kDirect);
}

// timex_forward plus, where the library FFT runs, the spectra of k and W for
// timex_backward_kept; where the cluster kernels run, their twiddle tables as kz (bytes, at
// most 1.4 MiB; the fused kernels': an empty byte tensor, the device's table serves) and W's
// spectra (their frequency order) and k's after them as wz:
// (C + B C) M complex floats (M = fused_spectrum_length(T) >= T for the fused kernels, e.g.
// 1.06 GiB at B = 16, C = 512, T = 16384; C M with RWKV_TIMEX_FUSED_KEEP_K=0; M = 20480 to 65536
// for the cluster kernels; as PyTorch's FFT convolution keeps k's; (C + B C, 2, kHalvesH)
// where the cluster rows run as two halves), held from the forward to the backward, which
// then skips their transforms and the tables' allocation and launch; where the
// tensor-core kernels run, W's spectra (C, N) int32 (two float16 an entry) as wz and their
// exponents (C,) int32 as kz; else an empty tensor as both (one allocation fewer: short calls
// are bound by host time).
std::tuple<Tensor, Tensor, Tensor> forward_keep_cuda(Tensor w, Tensor k, double eps) {
  check_timex_inputs(w, k);
  const fft::Kernel algo = k.numel() != 0 ? choose_cuda(k) : fft::Kernel::kDirect;
  if (algo == fft::Kernel::kDirect) {
    const Tensor none = fft::no_spectra(k);
    return {forward_checked(w, k, eps, algo), none, none};
  }
  fused_ops::check_kernel_image(k);
  const fused_ops::DeviceGuard guard(k.get_device_index());
  const cudaStream_t stream = fused_ops::current_stream(k);
  const Tensor wc = fused_ops::as_contiguous(w), kc = fused_ops::as_contiguous(k);
  if (algo == fft::Kernel::kFftTc) {  // wz: W's spectra (C, N); kz: their exponents (C,) int32
    Tensor wz, wexp;
    Tensor out = fft::tc_forward(wc, kc, eps, stream, &wz, &wexp);
    return {out, wexp, wz};
  }
  if (algo == fft::Kernel::kFftFused) {  // kz empty: the backward reads the device's table
    Tensor wz;
    Tensor out = fft::fused_forward(wc, kc, eps, stream, &wz);
    return {out, fused_ops::empty({0}, torch::headeronly::ScalarType::Byte, k), wz};
  }
  if (algo == fft::Kernel::kFftCluster) {
    Tensor wz, tw;
    Tensor out = fft::cluster_forward(wc, kc, eps, stream, &wz, &tw);
    return {out, tw, wz};
  }
  std::tuple<Tensor, Tensor> keep;
  Tensor out;
  FUSED_OPS_DISPATCH_FLOATING(k.scalar_type(), "timex_forward_keep_cuda", [&] {
    out = fft::forward<scalar_t>(fft::CudaBackend<fused_ops::opmath_t<scalar_t>>{stream}, wc, kc,
                                 eps, &keep);
  });
  return {out, std::get<0>(keep), std::get<1>(keep)};
}

// timex_backward_kept's set-up where it uses the kept tensors kz, wz: they must be on k's
// device; then fn(g, w, k made contiguous, k's stream) on k's device.
template <typename Fn>
std::tuple<Tensor, Tensor> run_kept(const Tensor& grad_out, const Tensor& w, const Tensor& k,
                                    const Tensor& kz, const Tensor& wz, Fn&& fn) {
  FUSED_OPS_CHECK(fused_ops::same_device(kz, k) && fused_ops::same_device(wz, k),
                  "timex_backward_kept: kz and wz must be on k's device");
  fused_ops::check_kernel_image(k);
  const fused_ops::DeviceGuard guard(k.get_device_index());
  const Tensor gc = fused_ops::as_contiguous(grad_out), wc = fused_ops::as_contiguous(w);
  const Tensor kc = fused_ops::as_contiguous(k);
  return fn(gc, wc, kc, fused_ops::current_stream(k));
}

std::tuple<Tensor, Tensor> backward_kept_cuda(Tensor grad_out, Tensor w, Tensor k, Tensor kz,
                                              Tensor wz) {
  check_timex_grad(grad_out, w, k);
  const auto ctype = k.scalar_type() == torch::headeronly::ScalarType::Double
                         ? torch::headeronly::ScalarType::ComplexDouble
                         : torch::headeronly::ScalarType::ComplexFloat;
  // The fused or cluster kernels' kept W spectra (kz their twiddle tables, bytes, or empty:
  // made again): used where those kernels run now in the same layout: (C + B C, M) (W's, then
  // k's) or (C, M) of the fused kernels, (C + B C, M) of the cluster kernels, or (C + B C, 2,
  // kHalvesH) of their two halves. Kept in
  // another of these (RWKV_TIMEX_ALGO or RWKV_TIMEX_CLUSTER_HALVES changed between forward and
  // backward), or where neither runs now: recomputed.
  const fft::Kernel algo = k.numel() != 0 ? choose_cuda(k) : fft::Kernel::kDirect;
  // The tensor-core kernels' (kz int32 exponents): used where they run now (tc_backward checks
  // their shapes), else recomputed.
  const bool tc_kept = kz.scalar_type() == torch::headeronly::ScalarType::Int;
  if (tc_kept && algo == fft::Kernel::kFftTc) {
    return run_kept(grad_out, w, k, kz, wz, [&](const Tensor& gc, const Tensor& wc,
                                                const Tensor& kc, cudaStream_t stream) {
      return fft::tc_backward(gc, wc, kc, stream, &wz, &kz);
    });
  }
  if (tc_kept || algo == fft::Kernel::kFftTc) return backward_checked(grad_out, w, k, algo);
  const bool on_chip_kept =
      wz.numel() != 0 &&
      (kz.numel() == 0 || kz.scalar_type() == torch::headeronly::ScalarType::Byte);
  if (on_chip_kept && algo != fft::Kernel::kFftCluster && algo != fft::Kernel::kFftFused) {
    return backward_checked(grad_out, w, k, algo);
  }
  if (on_chip_kept) {
    const bool fused = algo == fft::Kernel::kFftFused;
    const int64_t B = k.size(0), C = k.size(1), T = k.size(2);
    const bool as_fused = wz.dim() == 2 && (wz.size(0) == C || wz.size(0) == C * (1 + B)) &&
                          wz.size(1) == fft::fused_spectrum_length(T);
    const bool as_cluster = wz.dim() == 2 && wz.size(0) == C * (1 + B) &&
                            wz.size(1) == fft::cluster_spectrum_length(T);
    const bool as_halves = wz.dim() == 3 && wz.size(0) == C * (1 + B) && wz.size(1) == 2 &&
                           wz.size(2) == fft::kHalvesH;
    const fused_ops::DeviceGuard guard(k.get_device_index());
    const cudaStream_t stream = fused_ops::current_stream(k);
    const bool halves = !fused && fft::cluster_halves(k, stream);
    const bool usable = fused ? as_fused : halves ? as_halves : as_cluster;
    if (!usable && (as_fused || as_cluster || as_halves)) {
      return backward_checked(grad_out, w, k, algo);  // inputs checked, algorithm chosen
    }
    FUSED_OPS_CHECK_VALUE(usable && wz.scalar_type() == ctype && wz.is_contiguous(),
                          "timex_backward_kept: wz must be the spectra that timex_forward_keep "
                          "returned for these w and k, got shape ", fused_ops::shape_str(wz));
    FUSED_OPS_CHECK(fused_ops::same_device(wz, k) && fused_ops::same_device(kz, k),
                    "timex_backward_kept: kz and wz must be on k's device");
    fused_ops::check_kernel_image(k);
    const Tensor gc = fused_ops::as_contiguous(grad_out), wc = fused_ops::as_contiguous(w);
    const Tensor kc = fused_ops::as_contiguous(k);
    const Tensor* tw = kz.numel() != 0 ? &kz : nullptr;
    return fused ? fft::fused_backward(gc, wc, kc, stream, &wz, tw)
                 : fft::cluster_backward(gc, wc, kc, stream, &wz, tw);
  }
  if (k.numel() == 0 || !fft::check_kept(kz, wz, k, ctype)) {
    return backward_checked(grad_out, w, k, algo);
  }
  return run_kept(grad_out, w, k, kz, wz, [&](const Tensor& gc, const Tensor& wc,
                                              const Tensor& kc, cudaStream_t stream) {
    const std::tuple<Tensor, Tensor> kept{kz, wz};
    std::tuple<Tensor, Tensor> grads;
    FUSED_OPS_DISPATCH_FLOATING(k.scalar_type(), "timex_backward_kept_cuda", [&] {
      grads = fft::backward<scalar_t>(fft::CudaBackend<fused_ops::opmath_t<scalar_t>>{stream},
                                      gc, wc, kc, &kept);
    });
    return grads;
  });
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(rwkv_ops, CUDA, m) {
  m.impl("timex_forward", TORCH_BOX(&forward_cuda));
  m.impl("timex_backward", TORCH_BOX(&backward_cuda));
  m.impl("timex_algorithm", TORCH_BOX(&algorithm_cuda));
  m.impl("timex_forward_keep", TORCH_BOX(&forward_keep_cuda));
  m.impl("timex_backward_kept", TORCH_BOX(&backward_kept_cuda));
}

}  // namespace rwkv
