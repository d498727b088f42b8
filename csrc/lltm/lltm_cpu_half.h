// The LLTM cell in float16 and bfloat16 on the CPU (lltm_cpu_half.cpp), called by lltm.cpp's
// ops: the GEMMs in float (lltm_cpu_gemm_avx2.cpp's, which read W in its half type, or ATen's
// on float copies), the pointwise passes in float, only the op's outputs rounded.
#pragma once

#include <torch/headeronly/core/ScalarType.h>

#include <tuple>

#include "lltm/lltm_driver.h"

namespace lltm {

bool is_half(torch::headeronly::ScalarType t);

// lltm::lltm_forward in a half type -> (new_h, new_cell, X, gate_weights); the arguments have
// passed the checks. acts: null, or the gate activations to write as well (the tutorial's op).
std::tuple<Tensor, Tensor, Tensor, Tensor> forward_half(const Tensor& input, const Tensor& weights,
                                                        const Tensor& bias, const Tensor& old_h,
                                                        const Tensor& old_cell,
                                                        const CellSizes& sizes,
                                                        GateActivations* acts = nullptr);

// lltm::lltm_backward in a half type (the gradients the mask asks for; the others empty).
// d_gates_out: null, or where to hand the gradient of gate_weights back, rounded to the dtype
// (lltm::tutorial_backward returns it).
CellGrads backward_half(const Tensor& grad_h, const Tensor& grad_cell, const Tensor& new_cell,
                        const Tensor& gate_weights, const Tensor& X, const Tensor& weights,
                        const GradMask& mask, const CellSizes& sizes,
                        Tensor* d_gates_out = nullptr);

}  // namespace lltm
