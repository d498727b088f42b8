// RWKV TimeX: the FFT convolution on tensor cores for bfloat16 and float16 (the kernels:
// timex_fft_tc_forward.cuh and timex_fft_tc_backward.cuh; the transform: timex_fft_tc.cuh),
// behind the op's CUDA entry points (timex_cuda.cu) as the algorithm "fft_tc".
#pragma once

#include <cuda_runtime.h>

#include <tuple>

#include "common/checks.h"

namespace rwkv::fft {

// The longest row of the tensor-core kernels: T <= N / 2 with N = 32768, the longest transform
// whose planes (4 N bytes) fit one CTA's shared memory.
constexpr int64_t kTcMaxT = 16384;

// Whether the tensor-core kernels run k's shape, dtype and device: bfloat16 or float16,
// 1 <= T <= 16384, B * C < 2^31, compute capability 8.0 or newer, and the backward's shared
// memory within the device's per-block limit.
bool tc_supported(const fused_ops::Tensor& k);

// out = eps + the causal convolution; w, k contiguous, tc_supported(k). keep_wz, keep_wexp: where
// not null, receive W's spectra ((C, N) int32, two float16 an entry; N the transform length: the
// shortest of 2560, 3072, 6144, 12288, 20480, 24576, 28672 and the powers of two from 2048 on that
// is at least 2 T; the kernels' layout, scaled) and their exponents ((C,) int32), for tc_backward's
// kept.
fused_ops::Tensor tc_forward(const fused_ops::Tensor& w, const fused_ops::Tensor& k, double eps,
                             cudaStream_t stream, fused_ops::Tensor* keep_wz = nullptr,
                             fused_ops::Tensor* keep_wexp = nullptr);

// (grad_w, grad_k); g, w, k contiguous, tc_supported(k). kept_wz, kept_wexp: tc_forward's
// keep for these w and T (checked here: ValueError where they are not that), or null to
// compute them.
std::tuple<fused_ops::Tensor, fused_ops::Tensor> tc_backward(
    const fused_ops::Tensor& g, const fused_ops::Tensor& w, const fused_ops::Tensor& k,
    cudaStream_t stream, const fused_ops::Tensor* kept_wz = nullptr,
    const fused_ops::Tensor* kept_wexp = nullptr);

}  // namespace rwkv::fft
