// The LLTM sequence's recurrences in portable C++: the same plan, layouts and rounding as the
// AVX2 kernels (lltm_sequence_cpu.h, lltm_sequence_{fwd,bwd}_avx2.cpp), one row at a time,
// for CPUs without AVX2 (and FUSED_OPS_NO_AVX2=1) and for float64. scalar_t is the op's dtype
// (float, double, c10::Half, c10::BFloat16), acc_t the one everything is computed in
// (opmath: float, or double). Included by lltm_sequence.cpp only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/dispatch.h"
#include "lltm/lltm.h"
#include "lltm/lltm_sequence_cpu.h"

namespace lltm {

// v rounded to scalar_t and back: the value that a tensor of the op's dtype holds.
template <typename scalar_t, typename acc_t>
inline acc_t round_to_storage(acc_t v) {
  return static_cast<acc_t>(static_cast<scalar_t>(v));
}

// src rows [b0, b1) of a (B, S) tensor into dst (pitch per row, the padding 0).
template <typename scalar_t, typename acc_t>
void load_state_scalar(const scalar_t* src, acc_t* dst, int64_t b0, int64_t b1, int64_t S,
                       int64_t pitch) {
  for (int64_t b = b0; b < b1; ++b) {
    for (int64_t j = 0; j < pitch; ++j) dst[b * pitch + j] = j < S ? acc_t(src[b * S + j]) : 0;
  }
}

template <typename scalar_t>
void forward_recurrence_scalar(const CpuForward<fused_ops::opmath_t<scalar_t>>& a, int64_t b0,
                               int64_t b1) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  constexpr int64_t W = 3 * kFwdPanel;  // columns of a panel
  const int64_t S = a.state, B = a.batch, S3 = 3 * S, pitch = state_pitch(S);
  scalar_t* gates = static_cast<scalar_t*>(a.gates);
  scalar_t* hs = static_cast<scalar_t*>(a.hs);
  scalar_t* cells = static_cast<scalar_t*>(a.cells);
  load_state_scalar(hs, a.h_state, b0, b1, S, pitch);
  load_state_scalar(cells, a.c_state, b0, b1, S, pitch);
  for (int64_t t = 0; t < a.steps; ++t) {
    const acc_t* h_prev = a.h_state + (t & 1) * B * pitch;
    acc_t* h_next = a.h_state + ((t + 1) & 1) * B * pitch;
    for (int64_t p = 0; p < fwd_panels(S); ++p) {
      const acc_t* w = a.w_pack + p * S * W;
      for (int64_t b = b0; b < b1; ++b) {
        acc_t acc[W] = {};
        for (int64_t k0 = 0; k0 < S; k0 += kSumBlock) {
          acc_t part[W] = {};
          for (int64_t k = k0; k < std::min(S, k0 + kSumBlock); ++k) {
            const acc_t h = h_prev[b * pitch + k];
            for (int64_t c = 0; c < W; ++c) part[c] += h * w[k * W + c];
          }
          for (int64_t c = 0; c < W; ++c) acc[c] += part[c];
        }
        for (int64_t n = 0; n < kFwdPanel && p * kFwdPanel + n < S; ++n) {
          const int64_t j = p * kFwdPanel + n, zi = (t * B + b) * S3 + j;
          const int64_t out = ((t + 1) * B + b) * S + j;
          // All three reads of P before any write of z (the same buffer for float32).
          const acc_t z_i = round_to_storage<scalar_t>(acc[n] + a.proj[zi]);
          const acc_t z_o = round_to_storage<scalar_t>(acc[kFwdPanel + n] + a.proj[zi + S]);
          const acc_t z_c = round_to_storage<scalar_t>(acc[2 * kFwdPanel + n] + a.proj[zi + 2 * S]);
          gates[zi] = z_i;
          gates[zi + S] = z_o;
          gates[zi + 2 * S] = z_c;
          acc_t& c = a.c_state[b * pitch + j];  // c and h carried unrounded
          c = c + elu(z_c) * sigmoid(z_i);
          const acc_t h = std::tanh(round_to_storage<scalar_t>(c)) * sigmoid(z_o);
          h_next[b * pitch + j] = h;
          cells[out] = c;
          hs[out] = h;
        }
      }
    }
  }
}

template <typename scalar_t>
void backward_recurrence_scalar(const CpuBackward<fused_ops::opmath_t<scalar_t>>& a, int64_t b0,
                                int64_t b1) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  const int64_t S = a.state, B = a.batch, S3 = 3 * S, pitch = state_pitch(S);
  const scalar_t* gates = static_cast<const scalar_t*>(a.gates);
  const scalar_t* cells = static_cast<const scalar_t*>(a.cells);
  const scalar_t* grad_hs = static_cast<const scalar_t*>(a.grad_hs);
  load_state_scalar(static_cast<const scalar_t*>(a.grad_c_n), a.dc_state, b0, b1, S, pitch);
  // t = T-1 .. -1: dh = dz_t W_h (none at t = T-1) + dL/dhs[t], then the cell backward of
  // step t-1 (or d_h0 at t = 0), panel by panel.
  for (int64_t t = a.steps; t >= 0; --t) {
    const acc_t* dz_t = t < a.steps ? a.dz + t * B * S3 : nullptr;
    const int64_t s = t - 1;
    for (int64_t p = 0; p < bwd_panels(S); ++p) {
      const acc_t* w = a.w_pack + p * S3 * kBwdPanel;
      for (int64_t b = b0; b < b1; ++b) {
        acc_t acc[kBwdPanel] = {};
        for (int64_t k0 = 0; dz_t && k0 < S3; k0 += kSumBlock) {
          acc_t part[kBwdPanel] = {};
          for (int64_t k = k0; k < std::min(S3, k0 + kSumBlock); ++k) {
            const acc_t d = dz_t[b * S3 + k];
            for (int64_t n = 0; n < kBwdPanel; ++n) part[n] += d * w[k * kBwdPanel + n];
          }
          for (int64_t n = 0; n < kBwdPanel; ++n) acc[n] += part[n];
        }
        for (int64_t n = 0; n < kBwdPanel && p * kBwdPanel + n < S; ++n) {
          const int64_t j = p * kBwdPanel + n;
          const acc_t dh = acc[n] + acc_t(grad_hs[((s + 1) * B + b) * S + j]);
          if (s < 0) {
            static_cast<scalar_t*>(a.d_h0)[b * S + j] = dh;
            continue;
          }
          const int64_t zi = (s * B + b) * S3 + j;
          acc_t& dc = a.dc_state[b * pitch + j];
          acc_t d_i, d_o, d_c, d_cell;
          cell_backward<acc_t>(dh, dc, acc_t(cells[((s + 1) * B + b) * S + j]), acc_t(gates[zi]),
                               acc_t(gates[zi + S]), acc_t(gates[zi + 2 * S]), d_i, d_o, d_c,
                               d_cell);
          a.dz[zi] = d_i;
          a.dz[zi + S] = d_o;
          a.dz[zi + 2 * S] = d_c;
          dc = d_cell;
        }
      }
    }
  }
  scalar_t* d_c0 = static_cast<scalar_t*>(a.d_c0);
  for (int64_t b = b0; b < b1; ++b) {
    for (int64_t j = 0; j < S; ++j) d_c0[b * S + j] = a.dc_state[b * pitch + j];
  }
}

}  // namespace lltm
