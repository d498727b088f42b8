// LLTM over a sequence on CUDA: the backward's weight and input gradients in one launch
// (lltm_sequence_wgrad.cu), for the driver's SeqDevice::weight_grads_begin and weight_grads.
#pragma once

#include <torch/csrc/stable/tensor.h>

#include <cstdint>

#include "lltm/lltm_sequence_driver.h"

namespace lltm {

// The most multiply-adds, R 3S (S + 2F + 1) (R = T * B rows), for which auto takes the
// one-launch kernel. Its GPU time exceeds cuBLAS's (the GEMMs run at several times its FLOP
// rate, on tensor cores in the half types), but below this the host time it saves is more
// than the GPU time it adds. Where it overlaps the recurrence (behind the cta path, Hopper)
// float32 takes it up to kOverlappedFloatWeightGradMacs: there it hides under the recurrence
// but for the last rows' share. The H100's figures, per call, kernel against GEMMs
// (benchmarks/results/lltm_sequence_wgrad_h100.md): float32 overlapped (512, 16, 32, 128),
// 607 M, 0.891 against 0.913 ms, (2048, 16, 32, 128), 2.4 G, 3.491 against 3.506; bfloat16
// overlapped (256, 16, 32, 128), 303 M, 0.614 against 0.750, and (512, 16, 32, 128) 1.153
// against 1.101; float32 not overlapped (128, 64, 128, 256), 3.2 G, 1.866 against 1.635.
constexpr int64_t kFusedWeightGradMacs = 320'000'000;
constexpr int64_t kOverlappedFloatWeightGradMacs = 2'500'000'000;

// The steps between two progress publishes of a cta backward recurrence of T steps that the
// kernel overlaps: about 8 publishes a sequence (each costs the recurrence's thread 0 a
// device-wide fence; the rows of the last interval are summed after the recurrence ends).
inline int64_t seq_wgrad_publish_interval(int64_t T) { return T < 8 ? 1 : (T + 7) / 8; }

// Whether the kernel will overlap the backward recurrence of this problem (the recurrence
// will publish its progress, and the GPU can start the kernel while it runs).
using SeqWgradOverlaps = bool (*)(const torch::stable::Tensor& like, int64_t T, int64_t B,
                                  int64_t S, int64_t F);

// Before the recurrence: where LLTM_SEQUENCE_WGRAD=fused, or =auto (or unset) up to the
// thresholds above, the kernel's workspace (SeqWgradOverlap::work) with its counters zeroed on
// like's current stream; else none (the caller runs the GEMMs). overlaps is asked only where
// the answer changes the threshold (float32 between the two), so that the small problems'
// calls, bound by host time, do not pick the recurrence's path twice.
SeqWgradOverlap seq_weight_grads_begin_cuda(const torch::stable::Tensor& like, int64_t T,
                                            int64_t B, int64_t S, int64_t F,
                                            const SeqWgradWanted& wanted,
                                            SeqWgradOverlaps overlaps);

// d_weights (3S, S+F) = dz^T [h_prev | x], d_bias (3S) = dz's column sums, d_input (R, F) =
// dz W_x, each contiguous of like's dtype, any of them null where not asked (as told to
// seq_weight_grads_begin_cuda); dz (R, 3S), h_prev (R, S), x (R, F) contiguous; weights
// (3S, S+F) with strides ws0, ws1 (W_x = its columns S on). One launch on like's current
// stream, with overlap's workspace; where overlap.publishers > 0 it must come right behind
// the recurrence that publishes to overlap.progress, and starts while it runs (Hopper).
void seq_weight_grads_cuda(const torch::stable::Tensor& like, const void* dz, const void* h_prev,
                           const void* x, const void* weights, int64_t ws0, int64_t ws1,
                           void* d_weights, void* d_bias, void* d_input, int64_t T, int64_t B,
                           int64_t S, int64_t F, const SeqWgradOverlap& overlap);

}  // namespace lltm
