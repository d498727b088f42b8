// LLTM over a whole sequence: the recurrence's buffers and the two recurrence entry points
// that every path implements (CPU loop, CUDA per-step fallback, CUDA persistent kernels).
//
// With weights W = [W_h | W_x] (3S, S + F) (X = [h, x], as the cell) the input projection of
// every step is one GEMM before the recurrence:
//   P_t = x_t W_x^T + bias                                    (T, B, 3S)
// and the recurrence is, for t = 0 .. T-1 (h_{-1} = h0, c_{-1} = c0),
//   z_t = P_t + h_{t-1} W_h^T          (gate pre-activations [z_i, z_o, z_c])
//   c_t = c_{t-1} + elu(z_c) sigmoid(z_i),   h_t = tanh(c_t) sigmoid(z_o)   (lltm.h)
// Buffers (contiguous, one dtype):
//   gates (T, B, 3S): P_t on entry to the forward recurrence, z_t on exit (kept for the
//                     backward: no recomputation of the recurrent GEMM); the backward
//                     recurrence overwrites it in place with dz_t = dL/dz_t.
//   hs    (T+1, B, S): hs[0] = h0 on entry, hs[t+1] = h_t written by the forward; the layer's
//                     output is hs[1:], h_n = hs[T], and hs[:T] is the weight gradient's h_{t-1}.
//   cells (T+1, B, S): cells[0] = c0 on entry, cells[t+1] = c_t; c_n = cells[T].
// The backward recurrence, for t = T-1 .. 0, with dh_T = dc_T = 0 carried from step to step:
//   dh = grad_hs[t+1] + dh_rec,   dc = dc_carry (+ grad_c_n at t = T-1)
//   (dz_t, dc_carry) = cell_backward(dh, dc, c_t, z_t)          (lltm.h; needs c_t only)
//   dh_rec = dz_t W_h                                           (B, 3S) x (3S, S)
// and after t = 0: d_h0 = dh_rec + grad_hs[0], d_c0 = dc_carry. The weight gradients are GEMMs
// over all steps afterwards (d_W_h = dz^T hs[:T], d_W_x = dz^T x, d_bias = sum dz, d_x = dz W_x).
#pragma once

#include <cstdint>

namespace lltm {

// Sizes and pointers of one forward recurrence. w_h is W_h, (3S, S) contiguous (the first S
// columns of weights, copied contiguous by the host).
template <typename T>
struct SeqForward {
  const T* w_h;
  T* gates;  // (T, B, 3S): P in, z out
  T* hs;     // (T+1, B, S): hs[0] = h0 in
  T* cells;  // (T+1, B, S): cells[0] = c0 in
  int64_t steps, batch, state;
};

// Sizes and pointers of one backward recurrence.
template <typename T>
struct SeqBackward {
  const T* w_h;       // (3S, S)
  T* gates;           // (T, B, 3S): z in, dz out
  const T* cells;     // (T+1, B, S) from the forward
  const T* grad_hs;   // (T+1, B, S): dL/dhs (the output's gradient at hs[1:], h_n's added at hs[T])
  const T* grad_c_n;  // (B, S)
  T* d_h0;            // (B, S)
  T* d_c0;            // (B, S)
  int64_t steps, batch, state;
};

}  // namespace lltm
