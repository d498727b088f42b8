// RWKV TimeX: the fused on-chip FFT convolution (timex_fft_kernels.cuh) behind the op's CUDA
// entry points (timex_cuda.cu), compiled in its own translation unit (timex_fft_fused.cu:
// every power-of-two length up to 16384 for three dtypes is most of the family's nvcc time,
// and builds in parallel with the rest).
#pragma once

#include <cuda_runtime.h>

#include <tuple>

#include "common/checks.h"

namespace rwkv::fft {

// Whether the fused kernels run k's shape, dtype and device: T <= 16384, float32 or a half
// type (float64 takes the library FFT), B * C < 2^31, and the length's shared memory
// (136 KiB at T = 16384) within the device's per-block limit.
bool fused_supported(const fused_ops::Tensor& k);

// out = eps + the causal convolution; w, k contiguous, fused_supported(k).
fused_ops::Tensor fused_forward(const fused_ops::Tensor& w, const fused_ops::Tensor& k, double eps,
                                cudaStream_t stream);

// (grad_w, grad_k); g, w, k contiguous, B >= 1, fused_supported(k).
std::tuple<fused_ops::Tensor, fused_ops::Tensor> fused_backward(const fused_ops::Tensor& g,
                                                                const fused_ops::Tensor& w,
                                                                const fused_ops::Tensor& k,
                                                                cudaStream_t stream);

}  // namespace rwkv::fft
