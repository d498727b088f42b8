// RWKV TimeX: CUDA launchers and the CUDA registration. The kernels, their tiling and the
// configurations chosen per batch size and dtype (Tiles) are in timex_kernels.cuh.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include <climits>

#include "common/cuda_utils.cuh"
#include "common/kernel_image.cuh"
#include "rwkv/timex.h"
#include "rwkv/timex_kernels.cuh"

namespace rwkv {
namespace {

using kernels::cdiv;

template <typename Kernel>
void allow_shared_memory(Kernel kernel, int bytes) {
  if (bytes > 48 * 1024) {
    C10_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  }
}

unsigned grid_size(int64_t blocks) {
  TORCH_CHECK(blocks <= INT_MAX, "timex: the input is too large for one launch (",
              fused_ops::num(blocks),
              " blocks)");
  return static_cast<unsigned>(blocks);
}

template <typename scalar_t>
bool vector_ok(const at::Tensor& t) {
  return std::is_same_v<scalar_t, at::opmath_type<scalar_t>> && t.size(-1) % 4 == 0 &&
         fused_ops::aligned16(t.const_data_ptr());
}

// out = eps + causal product of `in` (CAUSAL), or the anti-causal product (grad_k).
template <typename scalar_t, typename Cfg, bool CAUSAL>
void toeplitz(const at::Tensor& w, const at::Tensor& in, at::Tensor& out, double eps,
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
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The tensor-core kernel (float32, float16, bfloat16).
template <typename scalar_t, typename Cfg, bool CAUSAL>
void toeplitz_tc(const at::Tensor& w, const at::Tensor& in, at::Tensor& out, double eps,
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
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// sm_80 and newer take the tensor-core kernel (float32, float16, bfloat16) where Tiles has one
// for the batch size and length; everything else the FMA kernel.
template <typename scalar_t, bool CAUSAL>
void toeplitz_for_batch(const at::Tensor& w, const at::Tensor& in, at::Tensor& out, double eps,
                        cudaStream_t stream) {
  using Tiles = kernels::Tiles<at::opmath_type<scalar_t>>;
  const int B = static_cast<int>(in.size(0)), T = static_cast<int>(in.size(2));
  if constexpr (!std::is_same_v<scalar_t, double>) {
    if (at::cuda::getCurrentDeviceProperties()->major >= 8 &&
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
void wgrad(const at::Tensor& g, const at::Tensor& k, at::Tensor& grad_w, cudaStream_t stream) {
  const int B = static_cast<int>(k.size(0)), C = static_cast<int>(k.size(1));
  const int T = static_cast<int>(k.size(2));
  const int64_t blocks = int64_t{cdiv(C, Cfg::NCH)} * cdiv(T, Cfg::ST);
  auto kernel = kernels::wgrad_kernel<scalar_t, Cfg>;
  allow_shared_memory(kernel, Cfg::SMEM_BYTES);
  kernel<<<grid_size(blocks), Cfg::THREADS, Cfg::SMEM_BYTES, stream>>>(
      g.const_data_ptr<scalar_t>(), k.const_data_ptr<scalar_t>(),
      grad_w.mutable_data_ptr<scalar_t>(), B, C, T, vector_ok<scalar_t>(g) && vector_ok<scalar_t>(k));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename scalar_t>
void wgrad_for_batch(const at::Tensor& g, const at::Tensor& k, at::Tensor& grad_w,
                     cudaStream_t stream) {
  using Tiles = kernels::Tiles<at::opmath_type<scalar_t>>;
  Tiles::wgrad(static_cast<int>(k.size(0)),
               [&](auto cfg) { wgrad<scalar_t, decltype(cfg)>(g, k, grad_w, stream); });
}

at::Tensor forward_cuda(const at::Tensor& w, const at::Tensor& k, double eps) {
  check_timex_inputs(w, k);
  fused_ops::check_kernel_image(k);
  const c10::cuda::CUDAGuard guard(k.device());
  const auto stream = at::cuda::getCurrentCUDAStream();
  const at::Tensor wc = w.contiguous();
  const at::Tensor kc = k.contiguous();
  at::Tensor out = at::empty(kc.sizes(), kc.options());
  if (out.numel() == 0) return out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, k.scalar_type(), "timex_forward_cuda", [&] {
    toeplitz_for_batch<scalar_t, true>(wc, kc, out, eps, stream);
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> backward_cuda(const at::Tensor& grad_out, const at::Tensor& w,
                                                 const at::Tensor& k) {
  check_timex_grad(grad_out, w, k);
  fused_ops::check_kernel_image(k);
  const c10::cuda::CUDAGuard guard(k.device());
  const auto stream = at::cuda::getCurrentCUDAStream();
  const at::Tensor gc = grad_out.contiguous();
  const at::Tensor wc = w.contiguous();
  const at::Tensor kc = k.contiguous();
  at::Tensor grad_k = at::empty(kc.sizes(), kc.options());
  at::Tensor grad_w = at::empty({w.size(0), w.size(1)}, w.options());
  if (grad_w.numel() == 0) return {grad_w, grad_k};  // C == 0 or T == 0: nothing to compute
  if (grad_k.numel() == 0) return {grad_w.zero_(), grad_k};  // B == 0: an empty sum
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, k.scalar_type(), "timex_backward_cuda", [&] {
    toeplitz_for_batch<scalar_t, false>(wc, gc, grad_k, 0.0, stream);
    wgrad_for_batch<scalar_t>(gc, kc, grad_w, stream);
  });
  return {grad_w, grad_k};
}

}  // namespace

TORCH_LIBRARY_IMPL(rwkv_ops, CUDA, m) {
  m.impl("timex_forward", &forward_cuda);
  m.impl("timex_backward", &backward_cuda);
}

}  // namespace rwkv
