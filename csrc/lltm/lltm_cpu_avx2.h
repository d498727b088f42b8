// The LLTM cell's CPU kernels vectorised for AVX2 + FMA + F16C: the pointwise passes for
// float32, float16 and bfloat16 in lltm_cpu_avx2.cpp, float64 in lltm_cpu_avx2_f64.cpp; the
// half types' GEMMs in lltm_cpu_gemm_avx2.cpp. Call them only when
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

// ---- The GEMMs of a float16 / bfloat16 cell (storage Half or BFloat16), accumulated in float,
// reading the weights w (3S x K, K = S + F, contiguous) in their half type. N = 3S.

// The pitch of the float copies of x that the GEMMs read: K rounded up to 8 lanes, the padding
// zero, so that every row reads as whole vectors.
constexpr int64_t half_gemm_pitch(int64_t K) { return (K + 7) / 8 * 8; }
// Rows of w that gates_dot_avx2 converts and uses as one block: split [0, N) among threads
// at multiples of it.
constexpr int64_t kHalfGemmRows = 4;

// gates (B, N) = X W^T + bias, two kernels (lltm_cpu_half.cpp picks by B).
// Dot products along k (lltm_cpu_gemm_avx2.cpp): gates[b, n] = bias[n] + sum_k x[b, k] w[n, k]
// for rows n in [n0, n1), every b < B: x float (B rows, pitch half_gemm_pitch(K)), bias float
// (N), gates float (B, N). scratch: kHalfGemmRows * half_gemm_pitch(K) floats of the
// caller's, one per thread.
void gates_dot_avx2(Storage storage, const void* w, const float* x, const float* bias,
                    float* gates, int64_t B, int64_t K, int64_t N, int64_t n0, int64_t n1,
                    float* scratch);

// Outer products (lltm_cpu_gemm_fwd_avx2.cpp). X (B x K, contiguous, the half type) is first
// packed by pack_x_avx2 into batch panels of kGatePanel rows: panel p, at xt + p K kGatePanel,
// holds X[16 p + c, k] at (k, c), K x 16 floats (rows past B zero); pack_x_avx2 writes panels
// [p0, p1). gates_packed_avx2 then computes gates[b, n] for rows n in [n0, n1) (split among
// threads at multiples of gate_block_rows(K)) and the batch rows of panels [p0, p1); bias and
// gates as above. scratch: gates_packed_scratch(K, p1 - p0) floats of the caller's, one per
// thread. W's rows are converted to float by blocks of gate_block_rows(K) whole rows, at pitch
// gate_row_pitch(K): as many as fit kGateBlockBytes (an L2-resident block), a multiple of 6
// (the tile's rows), at most 96.
constexpr int64_t kGatePanel = 16;
constexpr int64_t gate_panels(int64_t B) { return (B + kGatePanel - 1) / kGatePanel; }
constexpr int64_t kGateBlockBytes = 160 * 1024;
// K rounded up to 8 lanes plus 16 floats (64 bytes), so that the 6 rows a tile reads fall into
// different L1 sets when K is a multiple of a large power of two.
constexpr int64_t gate_row_pitch(int64_t K) { return (K + 7) / 8 * 8 + 16; }
constexpr int64_t gate_block_rows(int64_t K) {
  const int64_t fit = kGateBlockBytes / (gate_row_pitch(K) * 4) / 6 * 6;
  return fit < 6 ? 6 : fit > 96 ? 96 : fit;
}
// The converted block of W, then the tiles' partial sums between blocks of k (block rows x
// panels x 16 floats).
constexpr int64_t gates_packed_scratch(int64_t K, int64_t panels) {
  return gate_block_rows(K) * (gate_row_pitch(K) + panels * kGatePanel);
}
void pack_x_avx2(Storage storage, const void* X, int64_t B, int64_t K, int64_t p0, int64_t p1,
                 float* xt);
void gates_packed_avx2(Storage storage, const void* w, const float* xt, const float* bias,
                       float* gates, int64_t B, int64_t K, int64_t N, int64_t n0, int64_t n1,
                       int64_t p0, int64_t p1, float* scratch);

// out (B, width) = d_gates (B, N, float) @ w[:, col0 : col0 + width], rounded to `storage`,
// for the column tiles [t0, t1) of kHalfGemmTileCols columns each (the last one partial).
// scratch: d_x_half_scratch(B) floats of the caller's, one per thread.
constexpr int64_t kHalfGemmTileCols = 16;
constexpr int64_t d_x_half_scratch(int64_t B) { return (B + 64) * kHalfGemmTileCols; }
void d_x_half_avx2(Storage storage, const void* w, int64_t K, int64_t col0, int64_t width,
                   const float* d_gates, int64_t B, int64_t N, void* out, int64_t t0, int64_t t1,
                   float* scratch);

// Rows [n0, n1) of d_w (N, K) = d_gates^T @ x and of d_bias (N) = the column sums of d_gates,
// rounded to `storage`; x as for gates_dot_avx2. d_w or d_bias null: not computed. Split
// [0, N) among threads at multiples of kHalfGemmRows. scratch: d_w_half_scratch(B, n1 - n0)
// floats of the caller's.
constexpr int64_t d_w_half_scratch(int64_t B, int64_t rows) {
  return (rows + kHalfGemmTileCols) * B;
}
void d_w_half_avx2(Storage storage, const float* x, const float* d_gates, int64_t B, int64_t K,
                   int64_t N, int64_t n0, int64_t n1, void* d_w, void* d_bias, float* scratch);

}  // namespace lltm
