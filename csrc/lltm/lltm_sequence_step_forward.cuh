// LLTM over a sequence, bfloat16 / float16, the "step" path: the forward kernel of one step,
// launched once per step (lltm_sequence_step.cu). It computes h_{t-1} W_h^T for its tile on
// tensor cores (lltm_sequence_step_gemm.cuh, the 3 gates of each state column in one CTA) and
// runs the cell in the epilogue straight from the accumulators:
//   z = P_t + (h_{t-1} W_h^T)   (float sum, rounded once to T and stored over P_t in gates[t]:
//                                the backward reads z_t there)
//   (h_t, c_t) = cell(z, c_{t-1}) (float, rounded to T where stored)
// so a step is one launch, and the gate pre-activations make no round trip through a
// separate GEMM output.
#pragma once

#include "lltm/lltm.h"
#include "lltm/lltm_sequence.h"
#include "lltm/lltm_sequence_step_gemm.cuh"

namespace lltm::step {

// One forward step's pointers (all contiguous; B rows, S columns).
template <typename T>
struct StepForward {
  const T* w_h;     // (3S, S)
  const T* h_prev;  // hs[t]      (B, S)
  T* z;             // gates[t]   (B, 3S): P_t in, z_t out
  const T* c_prev;  // cells[t]   (B, S)
  T* h;             // hs[t+1]    (B, S)
  T* c;             // cells[t+1] (B, S)
  int64_t batch, state;
};

// Step t's pointers in the recurrence's buffers (lltm_sequence.h).
template <typename T>
inline StepForward<T> forward_step_params(const SeqForward<T>& a, int64_t t) {
  const int64_t B = a.batch, S = a.state;
  return {a.w_h,
          a.hs + t * B * S,
          a.gates + t * B * 3 * S,
          a.cells + t * B * S,
          a.hs + (t + 1) * B * S,
          a.cells + (t + 1) * B * S,
          B,
          S};
}

// Grid (ceil(B / BM), ceil(S / J)), Tl::kThreads threads, Tl::kSmemBytes dynamic shared memory.
template <typename Tl, typename T>
__global__ void __launch_bounds__(Tl::kThreads)
    step_forward_kernel(const StepForward<T> p) {
  static_assert(Tl::NG == 3, "the forward tile holds the 3 gates of its columns");
  T* smem = dynamic_smem<T>();
  grid_dependency_wait();  // h_{t-1}, c_{t-1} come from the previous step's kernel
  grid_launch_dependents();
  const int64_t B = p.batch, S = p.state;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * Tl::BM;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * Tl::J;
  const Operands<T> op{p.h_prev, S, B, m0, p.w_h, S, S, S, j0, S};
  float acc[Tl::MT][Tl::NG][Tl::NJ][4];
  tile_gemm<Tl>(acc, op, smem);
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
        T* zr = p.z + b * 3 * S + j;
        const T zi = static_cast<float>(zr[0]) + acc[mt][0][nj][e];
        const T zo = static_cast<float>(zr[S]) + acc[mt][1][nj][e];
        const T zc = static_cast<float>(zr[2 * S]) + acc[mt][2][nj][e];
        zr[0] = zi;
        zr[S] = zo;
        zr[2 * S] = zc;
        float h, c;
        cell_forward<float>(zi, zo, zc, p.c_prev[b * S + j], h, c);
        p.h[b * S + j] = h;
        p.c[b * S + j] = c;
      }
}

}  // namespace lltm::step
