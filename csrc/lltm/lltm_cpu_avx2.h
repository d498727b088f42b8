// The LLTM cell's pointwise CPU kernels vectorised for AVX2 + FMA + F16C: float32, float16 and
// bfloat16 in lltm_cpu_avx2.cpp, float64 in lltm_cpu_avx2_f64.cpp. Call them only when
// fused_ops::cpu_has_avx2(); rows [b0, b1) of contiguous (B, 3S) gates and (B, S) tensors.
// The float kernels compute in float; the tensors other than the float gate buffers are stored
// as `Storage` says (float16 and bfloat16 converted on load, rounded on store).
#pragma once

#include <cstdint>

namespace lltm {

// The element type of the tensors that a CPU kernel reads and writes in the op's dtype (the
// float buffers, computed in float for every dtype but double, are float always).
enum class Storage { Float, Half, BFloat16 };

// gates: (B, 3S) float pre-activations z. For a half storage each z is rounded to it, written
// to gates_out (the op's gate_weights, the z the backward reads) and the cell computed from
// the rounded z; for Float, gates_out is gates itself (nothing written). old_cell, new_h and
// new_cell in `storage`. acts: null, or three (B, S) outputs in `storage` for sigmoid(z_i),
// sigmoid(z_o) and elu(z_c) (the tutorial's forward returns them).
void forward_rows_avx2(Storage storage, const float* gates, void* gates_out,
                       const void* old_cell, void* new_h, void* new_cell, void* const* acts,
                       int64_t b0, int64_t b1, int64_t S);

// grad_h, grad_cell, new_cell, gates (the saved z) and d_old_cell in `storage`; d_gates
// (B, 3S) float, which may be gates itself for Float (each element is read before written).
void backward_rows_avx2(Storage storage, const void* grad_h, const void* grad_cell,
                        const void* new_cell, const void* gates, float* d_gates,
                        void* d_old_cell, int64_t b0, int64_t b1, int64_t S);

// float64, all tensors double; acts as above; d_gates may be gates itself.
void forward_rows_avx2(const double* gates, const double* old_cell, double* new_h,
                       double* new_cell, double* const* acts, int64_t b0, int64_t b1, int64_t S);
void backward_rows_avx2(const double* grad_h, const double* grad_cell, const double* new_cell,
                        const double* gates, double* d_gates, double* d_old_cell, int64_t b0,
                        int64_t b1, int64_t S);

// dst[i] = src[i] as float (src in `storage`), i < n; and back, rounded to nearest even as
// c10 rounds. The half-type paths' conversions (weights, X, gradients) without a dispatcher
// call each.
void to_float_avx2(Storage storage, const void* src, float* dst, int64_t n);
void from_float_avx2(Storage storage, const float* src, void* dst, int64_t n);

}  // namespace lltm
