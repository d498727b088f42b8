// float32 and float64 CPU kernels vectorised for AVX2 + FMA (lltm_cpu_avx2.cpp). Call them only
// when fused_ops::cpu_has_avx2(); rows [b0, b1) of contiguous (B, 3S) gates and (B, S) tensors.
#pragma once

#include <cstdint>

namespace lltm {

// acts: null, or three (B, S) outputs for sigmoid(z_i), sigmoid(z_o) and elu(z_c).
void forward_rows_avx2(const float* gates, const float* old_cell, float* new_h, float* new_cell,
                       float* const* acts, int64_t b0, int64_t b1, int64_t S);
void forward_rows_avx2(const double* gates, const double* old_cell, double* new_h,
                       double* new_cell, double* const* acts, int64_t b0, int64_t b1, int64_t S);

void backward_rows_avx2(const float* grad_h, const float* grad_cell, const float* new_cell,
                        const float* gates, float* d_gates, float* d_old_cell, int64_t b0,
                        int64_t b1, int64_t S);
void backward_rows_avx2(const double* grad_h, const double* grad_cell, const double* new_cell,
                        const double* gates, double* d_gates, double* d_old_cell, int64_t b0,
                        int64_t b1, int64_t S);

}  // namespace lltm
