// LLTM over a sequence on CUDA: the backward's weight and input gradients in one launch
// (lltm_sequence_wgrad.cu), for the driver's SeqDevice::weight_grads.
#pragma once

#include <torch/csrc/stable/tensor.h>

#include <cstdint>

namespace lltm {

// The most multiply-adds, R 3S (S + 2F + 1) (R = T * B rows), for which auto takes the
// one-launch kernel. Its GPU time exceeds cuBLAS's (the GEMMs run at several times its
// FLOP rate), but below this the host time it saves is more than the GPU time it adds; at
// float32 on the H100 (benchmarks/results/lltm_sequence_wgrad_h100.md): (64, 16, 32, 128),
// 76 M, step 470 against 585 us, kernels +4 us; (256, 16, 32, 128), 303 M, 716 against 783,
// +36; (512, 16, 32, 128), 607 M, 1006 against 930, +84.
constexpr int64_t kFusedWeightGradMacs = 320'000'000;

// d_weights (3S, S+F) = dz^T [h_prev | x], d_bias (3S) = dz's column sums, d_input (R, F) =
// dz W_x, each contiguous of like's dtype, any of them null where not asked; dz (R, 3S),
// h_prev (R, S), x (R, F) contiguous; weights (3S, S+F) with strides ws0, ws1 (W_x = its
// columns S on). One launch on like's current stream. False (nothing launched) where
// LLTM_SEQUENCE_WGRAD=gemm, or =auto (or unset) past kFusedWeightGradMacs: then the caller
// runs the GEMMs; LLTM_SEQUENCE_WGRAD=fused takes the kernel at any size.
bool seq_weight_grads_cuda(const torch::stable::Tensor& like, const void* dz, const void* h_prev,
                           const void* x, const void* weights, int64_t ws0, int64_t ws1,
                           void* d_weights, void* d_bias, void* d_input, int64_t R, int64_t S,
                           int64_t F);

}  // namespace lltm
