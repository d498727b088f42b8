// LLTM over a sequence on the CPU: the recurrence's kernels and their operands (no tensors).
//
// Batch rows never interact in the recurrence, so each thread takes a block of rows and runs
// all T steps on them alone (lltm_sequence.cpp: one parallel region per call, no
// synchronisation, allocation or dispatcher call per step). Per step and row block the
// recurrent product is a register-blocked GEMM on W_h packed once per call into column
// panels, each panel's result finished by the pointwise cell math while it is still in
// registers:
//
//   forward, panel p (state columns j in [8p, 8p + 8)): the 24 gate rows i, o, c of those j,
//     K-major:  fwd_pack[(p S + k) 24 + 8 g + n] = W_h[g S + 8p + n, k]   (g: 0 i, 1 o, 2 c)
//     so that one panel holds z_i, z_o and z_c of the same 8 states:
//       z = P_t + h_{t-1} W_h^T  ->  (c_t, h_t) of those states, written at once;
//   backward, panel p (state columns j in [16p, 16p + 16)), K = 3S gate rows:
//     bwd_pack[(p 3S + k) 16 + n] = W_h[k, 16p + n]
//       dh = dz_t W_h  ->  the cell backward of step t-1 of those states (dz_{t-1}, dc).
// Panel columns past S are zero. The same layouts serve the AVX2 kernels
// (lltm_sequence_{fwd,bwd}_avx2.cpp) and the scalar ones (lltm_sequence_scalar.h, for CPUs
// without AVX2 and for float64).
//
// Each output element is one thread's sum over k in a fixed order, whatever the row block or
// the number of threads: the recurrence is bitwise reproducible, across thread counts too.
//
// Precision: everything is computed in float (double for float64). For float16 and bfloat16
// the kernels read and write the op's tensors (h0, c0, the saved z, hs and cells, the
// gradients) in that type, and the rest stays float: the projection P, the products'
// accumulation, the backward's dz and dc, and the recurrence's h and c, rounded only where
// they are stored (h_t = sigmoid(z_o) tanh(c_t) with the stored, rounded c_t, the value the
// backward recomputes tanh from). Carrying the state rounded instead (as a loop of the cell
// in bfloat16 does) made the gradients 1.2x to 1.4x as far from float64 as plain PyTorch's at
// (T, B, F, S) = (64, 4, 32, 128) in bfloat16; carried in float, 0.6x to 0.9x (and 0.7x to
// 1.0x at T = 256, where the rounded state gave 2.5x in the benchmark's check).
#pragma once

#include <cstdint>

#include "lltm/lltm_cpu_avx2.h"  // Storage

namespace lltm {

constexpr int64_t kFwdPanel = 8;    // states per forward panel (its 3 gates: 24 columns)
constexpr int64_t kBwdPanel = 16;   // states per backward panel
// The products sum over k in blocks of kSumBlock terms, each block's sum then added to the
// total (two-level summation): a rounding error that grows with about kSumBlock + K / kSumBlock
// terms instead of K. It matters: the LLTM's cell state has no forget gate, so the error of
// each step's product carries through every later step; with plain sequential sums at
// S = 129, T = 300 the forward's error was 3x, and the gradients' 4x, those of the same
// computation in plain PyTorch (tests/test_lltm_sequence.py).
constexpr int64_t kSumBlock = 16;
// Row stride of the per-call float state scratch: S rounded up to whole backward panels, so
// that every panel's full vectors stay inside its row.
inline int64_t state_pitch(int64_t S) { return (S + kBwdPanel - 1) / kBwdPanel * kBwdPanel; }
inline int64_t fwd_panels(int64_t S) { return (S + kFwdPanel - 1) / kFwdPanel; }
inline int64_t bwd_panels(int64_t S) { return (S + kBwdPanel - 1) / kBwdPanel; }
inline int64_t fwd_pack_size(int64_t S) { return fwd_panels(S) * S * 3 * kFwdPanel; }
inline int64_t bwd_pack_size(int64_t S) { return bwd_panels(S) * 3 * S * kBwdPanel; }

// W_h = weights[:, :S] (3S rows, any strides) into the two packed layouts above.
template <typename acc_t>
void pack_forward(const acc_t* w, int64_t s0, int64_t s1, int64_t S, acc_t* out) {
  for (int64_t p = 0; p < fwd_panels(S); ++p) {
    for (int64_t k = 0; k < S; ++k) {
      acc_t* dst = out + (p * S + k) * 3 * kFwdPanel;
      for (int64_t g = 0; g < 3; ++g) {
        for (int64_t n = 0; n < kFwdPanel; ++n) {
          const int64_t j = p * kFwdPanel + n;
          dst[g * kFwdPanel + n] = j < S ? w[(g * S + j) * s0 + k * s1] : acc_t(0);
        }
      }
    }
  }
}
template <typename acc_t>
void pack_backward(const acc_t* w, int64_t s0, int64_t s1, int64_t S, acc_t* out) {
  for (int64_t p = 0; p < bwd_panels(S); ++p) {
    for (int64_t k = 0; k < 3 * S; ++k) {
      acc_t* dst = out + (p * 3 * S + k) * kBwdPanel;
      for (int64_t n = 0; n < kBwdPanel; ++n) {
        const int64_t j = p * kBwdPanel + n;
        dst[n] = j < S ? w[k * s0 + j * s1] : acc_t(0);
      }
    }
  }
}

// One forward recurrence (lltm_sequence.h's, with the projection apart). Storage-typed
// pointers (void) hold the op's dtype; acc_t is float, or double for float64.
template <typename acc_t>
struct CpuForward {
  const acc_t* w_pack;  // fwd_pack_size(S)
  const acc_t* proj;    // (T, B, 3S): P_t = x_t W_x^T + bias
  void* gates;          // (T, B, 3S): z_t out; may be proj itself when the dtype is acc_t
  void* hs;             // (T+1, B, S): hs[0] = h0 in, h_t out at hs[t+1]
  void* cells;          // (T+1, B, S): cells[0] = c0 in, c_t out at cells[t+1]
  acc_t* h_state;       // (2, B, state_pitch(S)) scratch: h_{t-1} and h_t, in turn
  acc_t* c_state;       // (B, state_pitch(S)) scratch: c_t, updated in place
  int64_t steps, batch, state;
};

// One backward recurrence: dz_t for every step (the GEMMs over all steps come after it),
// d_h0 and d_c0.
template <typename acc_t>
struct CpuBackward {
  const acc_t* w_pack;   // bwd_pack_size(S)
  const void* gates;     // (T, B, 3S): the saved z
  const void* cells;     // (T+1, B, S)
  const void* grad_hs;   // (T+1, B, S): dL/dhs
  const void* grad_c_n;  // (B, S)
  acc_t* dz;             // (T, B, 3S) out
  void* d_h0;            // (B, S) out
  void* d_c0;            // (B, S) out
  acc_t* dc_state;       // (B, state_pitch(S)) scratch: dL/dc carried from step to step
  int64_t steps, batch, state;
};

// Rows [b0, b1) through all steps, AVX2 + FMA (+ F16C); call only where
// fused_ops::cpu_has_avx2().
void forward_recurrence_avx2(Storage storage, const CpuForward<float>& a, int64_t b0, int64_t b1);
void backward_recurrence_avx2(Storage storage, const CpuBackward<float>& a, int64_t b0,
                              int64_t b1);

}  // namespace lltm
