// LLTM cell on CUDA for small and medium problems: one kernel launch for the forward and
// two for the backward (lltm_cuda_small.cu, lltm_cuda_small.cuh), and the rule that picks
// them over the cuBLAS path (lltm_cuda.cu) by problem size.
#pragma once

#include <torch/headeronly/core/ScalarType.h>

#include <tuple>

#include "lltm/lltm_driver.h"

namespace lltm {

// True when a call of these sizes and dtype goes through the single-launch kernels. The
// rule (documented with its numbers in lltm_cuda_small.cu) can be overridden for tests and
// benchmarks with the environment variable LLTM_CUDA_PATH=small|cublas|auto, read at
// every call. device: the CUDA device the call runs on.
bool use_small_path(const CellSizes& sizes, torch::headeronly::ScalarType dtype, int device);

// lltm::lltm_forward on CUDA in one launch; the arguments have passed check_forward_args.
// acts: null, or the gate activations to write too (lltm::tutorial_forward).
std::tuple<Tensor, Tensor, Tensor, Tensor> small_forward_cuda(
    const Tensor& input, const Tensor& weights, const Tensor& bias, const Tensor& old_h,
    const Tensor& old_cell, const CellSizes& sizes, GateActivations* acts);

// The GEMM part of lltm::lltm_backward on CUDA in one launch: from d_gates (B, 3S, as the
// pointwise kernel writes it) and the checked X and weights, (d_input, d_weights, d_bias,
// d_old_h), each empty where output_mask leaves it out.
std::tuple<Tensor, Tensor, Tensor, Tensor> small_backward_gemms_cuda(
    const Tensor& d_gates, const Tensor& X, const Tensor& weights, const GradMask& output_mask,
    const CellSizes& sizes);

}  // namespace lltm
