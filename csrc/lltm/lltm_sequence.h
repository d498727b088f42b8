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
//                     recurrence writes dz_t = dL/dz_t into a buffer of the same shape (the
//                     cta kernels read z from gates; the other paths overwrite a copy of it).
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

// Sizes and pointers of one forward recurrence. w_h is W_h, (3S, S).
// The fields after `state` are the cta kernels' (lltm_sequence_cta.cuh), which read the op's
// arguments in place, so that the host issues no copy before the launch, and require them
// (ldw > 0, h0 and c0 set). The other paths take the prepared form, which the fields' zero
// values stand for: W_h contiguous (the host's copy; ldw = S) and hs[0], cells[0] holding the
// initial states (the host's copies); they leave the fields unread.
template <typename T>
struct SeqForward {
  const T* w_h;
  T* gates;  // (T, B, 3S): P in, z out
  T* hs;     // (T+1, B, S): hs[0] = h0 in (cta: written from h0)
  T* cells;  // (T+1, B, S): cells[0] = c0 in (cta: written from c0)
  int64_t steps, batch, state;
  int64_t ldw = 0;        // W_h's row stride (weights.stride(0): W_h = weights[:, :S])
  const T* h0 = nullptr;  // (B, S) contiguous: copied into hs[0] by the kernel
  const T* c0 = nullptr;  // (B, S) contiguous: copied into cells[0] by the kernel
};

// Sizes and pointers of one backward recurrence. The fields after `state` are the cta
// kernels' as SeqForward's are (required: ldw > 0, z set): W_h in place, z read out of place
// (the saved gates stay intact without the host's copy of them into the dz buffer) and the
// gradient of the outputs in the parts autograd hands over, each nullptr for zero (no
// host-side assembly of grad_hs; grad_hs unread). The other paths read w_h contiguous, z from
// gates (the host copied it there), grad_hs and grad_c_n assembled by the host, and leave
// these fields unread.
template <typename T>
struct SeqBackward {
  const T* w_h;       // (3S, S)
  T* gates;           // (T, B, 3S): z in (not cta), dz out
  const T* cells;     // (T+1, B, S) from the forward
  const T* grad_hs;   // (T+1, B, S): dL/dhs (the output's gradient at hs[1:], h_n's added at hs[T])
  const T* grad_c_n;  // (B, S); the cta kernels: nullptr for zero
  T* d_h0;            // (B, S)
  T* d_c0;            // (B, S)
  int64_t steps, batch, state;
  int64_t ldw = 0;               // W_h's row stride
  const T* z = nullptr;          // (T, B, 3S): z_t, read (dz_t written to gates)
  const T* grad_out = nullptr;   // (T, B, S): dL/dh_t = dL/dhs[t+1] (the output's gradient)
  const T* grad_h0 = nullptr;    // (B, S): dL/dhs[0], added to d_h0
  const T* grad_h_n = nullptr;   // (B, S): h_n's gradient, added to grad_out[T-1] (rounded to T)
  // The cta kernels, where set: after every progress_interval-th step and after the last,
  // CTA c adds 1 to progress[c] once its dz rows of the steps done are visible device-wide
  // (the weight-gradient kernel launched behind it reads them as they come:
  // lltm_sequence_wgrad.h). One counter per CTA: the CTAs do not wait for each other, so a
  // count summed over them would not say that each has got that far.
  unsigned* progress = nullptr;
  int64_t progress_interval = 0;
};

}  // namespace lltm
