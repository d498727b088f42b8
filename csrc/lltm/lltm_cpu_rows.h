// The LLTM cell's pointwise passes on the CPU for every dtype, shared by the float32/float64
// path (lltm.cpp) and the half types' path (lltm_cpu_half.cpp): the AVX2 kernels
// (lltm_cpu_avx2.h) where the CPU has them, else the scalar loops of lltm.h's math, over
// torch's threads.
#pragma once

#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "common/cpu_features.h"
#include "common/dispatch.h"
#include "lltm/lltm.h"
#include "lltm/lltm_cpu_avx2.h"

namespace lltm {

// Rows per parallel_for task: about 16k elements of work each.
inline int64_t grain_rows(int64_t state_size) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, state_size));
}

template <typename T>
constexpr Storage storage_of() {
  return std::is_same_v<T, c10::Half>       ? Storage::Half
         : std::is_same_v<T, c10::BFloat16> ? Storage::BFloat16
                                            : Storage::Float;
}

// The pointwise passes, in the accumulation type acc_t = opmath(scalar_t) on tensors of
// scalar_t: the gates (B, 3S) in acc_t (the GEMM's output; for float and double the op's
// gate_weights itself), old_cell, new_h, new_cell and gates_out (the op's gate_weights, the
// rounded z for a half type) in scalar_t. A half type's z and new_cell are rounded before the
// cell reads them, so that the backward, which recomputes from the saved z and new_cell,
// differentiates what the forward computed. acts: the gate activations to write as well (all
// null: none). The AVX2 kernels where they apply (every dtype on an AVX2 CPU), else the scalar
// loops of lltm.h's math.
template <typename scalar_t>
void forward_rows(const fused_ops::opmath_t<scalar_t>* gates, scalar_t* gates_out,
                  const scalar_t* old_cell, scalar_t* new_h, scalar_t* new_cell,
                  const ActivationPtrs<scalar_t>& acts, int64_t B, int64_t S) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  scalar_t* const act_list[] = {acts.input_gate, acts.output_gate, acts.candidate_cell};
  const bool want_acts = acts.input_gate != nullptr;
  torch::stable::parallel_for(0, B, grain_rows(S), [&](int64_t b0, int64_t b1) {
    if (fused_ops::cpu_has_avx2()) {
      if constexpr (std::is_same_v<acc_t, float>) {
        void* const vacts[] = {act_list[0], act_list[1], act_list[2]};
        return forward_rows_avx2(storage_of<scalar_t>(), gates, gates_out, old_cell, new_h,
                                 new_cell, want_acts ? vacts : nullptr, b0, b1, S);
      } else {
        return forward_rows_avx2(gates, old_cell, new_h, new_cell,
                                 want_acts ? act_list : nullptr, b0, b1, S);
      }
    }
    auto round = [](acc_t v) { return static_cast<acc_t>(static_cast<scalar_t>(v)); };
    for (int64_t b = b0; b < b1; ++b) {
      const acc_t* z = gates + b * 3 * S;
      scalar_t* zo = gates_out + b * 3 * S;
      for (int64_t j = 0; j < S; ++j) {
        const acc_t z_i = round(z[j]), z_o = round(z[S + j]), z_c = round(z[2 * S + j]);
        zo[j] = z_i;
        zo[S + j] = z_o;
        zo[2 * S + j] = z_c;
        const int64_t k = b * S + j;
        const acc_t input_gate = sigmoid(z_i), output_gate = sigmoid(z_o), candidate = elu(z_c);
        const acc_t c = round(static_cast<acc_t>(old_cell[k]) + candidate * input_gate);
        new_cell[k] = c;
        new_h[k] = std::tanh(c) * output_gate;
        if (want_acts) {
          act_list[0][k] = input_gate;
          act_list[1][k] = output_gate;
          act_list[2][k] = candidate;
        }
      }
    }
  });
}

// d_gates (B, 3S) in acc_t; the rest in scalar_t. d_gates may be gates itself (float and
// double: each element is read before it is written).
template <typename scalar_t>
void backward_rows(const scalar_t* grad_h, const scalar_t* grad_cell, const scalar_t* new_cell,
                   const scalar_t* gates, fused_ops::opmath_t<scalar_t>* d_gates,
                   scalar_t* d_old_cell, int64_t B, int64_t S) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  torch::stable::parallel_for(0, B, grain_rows(S), [&](int64_t b0, int64_t b1) {
    if (fused_ops::cpu_has_avx2()) {
      if constexpr (std::is_same_v<acc_t, float>) {
        return backward_rows_avx2(storage_of<scalar_t>(), grad_h, grad_cell, new_cell, gates,
                                  d_gates, d_old_cell, b0, b1, S);
      } else {
        return backward_rows_avx2(grad_h, grad_cell, new_cell, gates, d_gates, d_old_cell, b0,
                                  b1, S);
      }
    }
    for (int64_t b = b0; b < b1; ++b) {
      const scalar_t* z = gates + b * 3 * S;
      acc_t* dz = d_gates + b * 3 * S;
      for (int64_t j = 0; j < S; ++j) {
        const int64_t k = b * S + j;
        acc_t d_i, d_o, d_c, d_cell;
        cell_backward<acc_t>(grad_h[k], grad_cell[k], new_cell[k], z[j], z[S + j], z[2 * S + j],
                             d_i, d_o, d_c, d_cell);
        dz[j] = d_i;
        dz[S + j] = d_o;
        dz[2 * S + j] = d_c;
        d_old_cell[k] = d_cell;
      }
    }
  });
}

}  // namespace lltm
