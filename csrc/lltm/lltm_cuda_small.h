// LLTM cell on CUDA for small and medium problems: one kernel launch for the forward and
// two for the backward (lltm_cuda_small.cu, lltm_cuda_small.cuh), and the rule that picks
// them over the cuBLAS path (lltm_cuda.cu) by problem size.
#pragma once

#include <ATen/ATen.h>

#include <tuple>

#include "lltm/lltm.h"

namespace lltm {

// True when a call of these sizes and dtype goes through the single-launch kernels. The
// rule (documented with its numbers in lltm_cuda_small.cu) can be overridden for tests and
// benchmarks with the environment variable LLTM_CUDA_PATH=small|cublas|auto, read at
// every call.
bool use_small_path(const CellSizes& sizes, at::ScalarType dtype);

// lltm::lltm_forward on CUDA in one launch; the arguments have passed check_forward_args.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> small_forward_cuda(
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
    const at::Tensor& old_h, const at::Tensor& old_cell, const CellSizes& sizes);

// The GEMM part of lltm::lltm_backward on CUDA in one launch: from d_gates (B, 3S, as the
// pointwise kernel writes it) and the checked X and weights, (d_input, d_weights, d_bias,
// d_old_h), each empty where output_mask leaves it out.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> small_backward_gemms_cuda(
    const at::Tensor& d_gates, const at::Tensor& X, const at::Tensor& weights,
    GradMask output_mask, const CellSizes& sizes);

// A contiguous tensor of like's dtype and device straight from the CUDA caching allocator
// (no dispatcher round trip: at these sizes each op's host time counts).
at::Tensor new_empty_cuda(at::IntArrayRef size, const at::Tensor& like);

}  // namespace lltm
