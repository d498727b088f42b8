// LLTM over a sequence, the "step" path (float32, bfloat16, float16): the backward kernel of
// one step, launched once per step from t = T-1 down to 0 and once more after step 0
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
// A thread's cells: the pairs of columns (2q, 2q + 1) of rows lane / 4 and lane / 4 + 8 of
// each of its MMA tiles (as the forward kernel's).
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
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Warp set 0 holds the CTA's sums after tile_gemm and runs the epilogue; sets 1.. (Tl::KS
  // > 1) only multiply.
  const int tw = warp % Tl::kTileWarps, wm = tw / Tl::WN, wn = tw % Tl::WN;
  const bool epilogue = warp < Tl::kTileWarps;
  const bool final = p.d_h0 != nullptr;
  auto row = [&](int mt, int h) { return m0 + wm * Tl::MT * 16 + mt * 16 + lane / 4 + 8 * h; };
  auto col = [&](int nj) { return j0 + wn * Tl::NJ * 8 + nj * 8 + 2 * (lane % 4); };
  // The epilogue's inputs, loaded before the product (as in the forward kernel): grad_h, the
  // incoming dc (grad_c_n or the carry), and, except in the final launch, c_t and z_t.
  Two<T> gh[Tl::MT][Tl::NJ][2], ct[Tl::MT][Tl::NJ][2], zt[Tl::MT][Tl::NJ][2][3];
  FloatTwo dc[Tl::MT][Tl::NJ][2];
#pragma unroll
  for (int mt = 0; mt < Tl::MT; ++mt)
#pragma unroll
    for (int nj = 0; nj < Tl::NJ; ++nj)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t b = row(mt, h), j = col(nj);
        if (!epilogue || b >= B || j >= S) continue;  // S is even: j + 1 < S too
        const int64_t k = b * S + j;
        gh[mt][nj][h] = load_two(p.grad_h + k);
        if (p.grad_c != nullptr) {
          const Two<T> g = load_two(p.grad_c + k);
          dc[mt][nj][h] = FloatTwo{static_cast<float>(g.lo), static_cast<float>(g.hi)};
        } else {
          dc[mt][nj][h] = *reinterpret_cast<const FloatTwo*>(p.carry + k);
        }
        if (!final) {
          ct[mt][nj][h] = load_two(p.c_t + k);
          const T* zr = p.dz + b * 3 * S + j;
#pragma unroll
          for (int g = 0; g < 3; ++g) zt[mt][nj][h][g] = load_two(zr + g * S);
        }
      }
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
  if (!epilogue) return;
#pragma unroll
  for (int mt = 0; mt < Tl::MT; ++mt)
#pragma unroll
    for (int nj = 0; nj < Tl::NJ; ++nj)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t b = row(mt, h), j = col(nj);
        if (b >= B || j >= S) continue;
        const int64_t k = b * S + j;
        Two<T> dh;
        dh.lo = static_cast<float>(gh[mt][nj][h].lo) + acc[mt][0][nj][2 * h];
        dh.hi = static_cast<float>(gh[mt][nj][h].hi) + acc[mt][0][nj][2 * h + 1];
        if (final) {
          store_two(p.d_h0 + k, dh);
          store_two(p.d_c0 + k, Two<T>{T(dc[mt][nj][h].lo), T(dc[mt][nj][h].hi)});
          continue;
        }
        Two<T> dz[3];
        FloatTwo carry;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float d_i, d_o, d_c, d_cell;
          cell_backward<float>(element(dh, e), e == 0 ? dc[mt][nj][h].lo : dc[mt][nj][h].hi,
                               element(ct[mt][nj][h], e), element(zt[mt][nj][h][0], e),
                               element(zt[mt][nj][h][1], e), element(zt[mt][nj][h][2], e), d_i,
                               d_o, d_c, d_cell);
          (e == 0 ? dz[0].lo : dz[0].hi) = d_i;
          (e == 0 ? dz[1].lo : dz[1].hi) = d_o;
          (e == 0 ? dz[2].lo : dz[2].hi) = d_c;
          (e == 0 ? carry.lo : carry.hi) = d_cell;
        }
        T* zr = p.dz + b * 3 * S + j;
#pragma unroll
        for (int g = 0; g < 3; ++g) store_two(zr + g * S, dz[g]);
        *reinterpret_cast<FloatTwo*>(p.carry + k) = carry;
      }
}

// out (cols, rows) = in (rows, cols)^T, both contiguous, elements moved as bits (Bits:
// uint16_t for the half types, uint32_t for float32): 32 x 32 tiles through shared memory
// (padded a column so that the transposed reads fall in distinct banks); block (32, 8).
template <typename Bits>
__global__ void transpose_kernel(Bits* __restrict__ out, const Bits* __restrict__ in,
                                 int64_t rows, int64_t cols) {
  __shared__ Bits tile[32][33];
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
