// LLTM over a sequence, bfloat16 / float16, the "step" path: the backward kernel of one step,
// launched once per step from t = T-1 down to 0 and once more after step 0
// (lltm_sequence_step.cu), and the transpose of W_h that its product reads.
//
// Step t computes dh_rec = dz_{t+1} W_h for its tile on tensor cores
// (lltm_sequence_step_gemm.cuh with A = dz_{t+1} (B, 3S), Bw = W_h^T (S, 3S), one group), and
// in the epilogue, per (b, j):
//   dh = grad_hs[t+1] + dh_rec          (rounded once to T, as the fallback's dh)
//   (dz_t, carry) = cell_backward(dh, carry, c_t, z_t)   (float; dz_t rounded to T over z_t)
// with carry = grad_c_n at t = T-1 (no product there: dz_T = 0). The launch after step 0
// ("final") writes d_h0 = grad_hs[0] + dz_0 W_h and d_c0 = carry. The carry (dL/dc, float)
// stays in a (B, S) float buffer between steps, each element read and written by the one
// thread that owns it.
#pragma once

#include "lltm/lltm.h"
#include "lltm/lltm_sequence.h"
#include "lltm/lltm_sequence_step_gemm.cuh"

namespace lltm::step {

// One backward step's pointers (all contiguous; B rows, S columns).
template <typename T>
struct StepBackward {
  const T* w_h_t;    // W_h^T (S, 3S)
  const T* dz_next;  // dz_{t+1} (B, 3S); null at t = T-1 (no product)
  const T* grad_h;   // grad_hs[t+1] (B, S); final: grad_hs[0]
  const T* grad_c;   // grad_c_n (B, S) at t = T-1 (the carry's first value), else null
  const T* c_t;      // cells[t+1] (B, S); unused by final
  T* dz;             // gates[t] (B, 3S): z_t in, dz_t out; unused by final
  float* carry;      // (B, S)
  T* d_h0;           // final only (non-null: this launch is the final one)
  T* d_c0;           // final only
  int64_t batch, state;
};

// Step t's pointers in the recurrence's buffers (lltm_sequence.h), t = T-1 .. 0; t = -1: the
// final launch (d_h0, d_c0).
template <typename T>
inline StepBackward<T> backward_step_params(const SeqBackward<T>& a, const T* w_h_t,
                                            float* carry, int64_t t) {
  const int64_t B = a.batch, S = a.state;
  if (t < 0) {
    return {w_h_t, a.gates, a.grad_hs, nullptr, nullptr, nullptr, carry, a.d_h0, a.d_c0, B, S};
  }
  const bool last = t == a.steps - 1;
  return {w_h_t,
          last ? nullptr : a.gates + (t + 1) * B * 3 * S,
          a.grad_hs + (t + 1) * B * S,
          last ? a.grad_c_n : nullptr,
          a.cells + (t + 1) * B * S,
          a.gates + t * B * 3 * S,
          carry,
          nullptr,
          nullptr,
          B,
          S};
}

// Grid (ceil(B / BM), ceil(S / J)), Tl::kThreads threads, Tl::kSmemBytes dynamic shared memory.
template <typename Tl, typename T>
__global__ void __launch_bounds__(Tl::kThreads)
    step_backward_kernel(const StepBackward<T> p) {
  static_assert(Tl::NG == 1, "the backward tile has one group of columns");
  T* smem = dynamic_smem<T>();
  grid_dependency_wait();  // dz_{t+1} and the carry come from the previous step's kernel
  grid_launch_dependents();
  const int64_t B = p.batch, S = p.state;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * Tl::BM;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * Tl::J;
  float acc[Tl::MT][1][Tl::NJ][4];
  if (p.dz_next != nullptr) {
    const Operands<T> op{p.dz_next, 3 * S, B, m0, p.w_h_t, 3 * S, 0, S, j0, 3 * S};
    tile_gemm<Tl>(acc, op, smem);
  } else {
#pragma unroll
    for (int mt = 0; mt < Tl::MT; ++mt)
#pragma unroll
      for (int nj = 0; nj < Tl::NJ; ++nj)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][0][nj][e] = 0.f;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / Tl::WN, wn = warp % Tl::WN;
#pragma unroll
  for (int mt = 0; mt < Tl::MT; ++mt)
#pragma unroll
    for (int nj = 0; nj < Tl::NJ; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t b = m0 + wm * Tl::MT * 16 + mt * 16 + lane / 4 + 8 * (e / 2);
        const int64_t j = j0 + wn * Tl::NJ * 8 + nj * 8 + 2 * (lane % 4) + e % 2;
        if (b >= B || j >= S) continue;
        const int64_t k = b * S + j;
        const T dh = static_cast<float>(p.grad_h[k]) + acc[mt][0][nj][e];
        if (p.d_h0 != nullptr) {
          p.d_h0[k] = dh;
          p.d_c0[k] = p.carry[k];
          continue;
        }
        const float dc = p.grad_c != nullptr ? static_cast<float>(p.grad_c[k]) : p.carry[k];
        T* zr = p.dz + b * 3 * S + j;
        float d_i, d_o, d_c, d_cell;
        cell_backward<float>(dh, dc, p.c_t[k], zr[0], zr[S], zr[2 * S], d_i, d_o, d_c, d_cell);
        zr[0] = d_i;
        zr[S] = d_o;
        zr[2 * S] = d_c;
        p.carry[k] = d_cell;
      }
}

// out (cols, rows) = in (rows, cols)^T, both contiguous, 2-byte elements moved as bits:
// 32 x 32 tiles through shared memory (padded a column so that the transposed reads fall in
// distinct banks); block (32, 8).
__global__ void transpose_kernel(uint16_t* __restrict__ out, const uint16_t* __restrict__ in,
                                 int64_t rows, int64_t cols) {
  __shared__ uint16_t tile[32][33];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * 32;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * 32;
  for (int i = threadIdx.y; i < 32; i += 8) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = in[r * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += 8) {
    const int64_t c = c0 + i, r = r0 + threadIdx.x;
    if (r < rows && c < cols) out[c * rows + r] = tile[threadIdx.x][i];
  }
}

}  // namespace lltm::step
