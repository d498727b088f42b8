// LLTM over a sequence, the "step" path (float32, bfloat16, float16): the forward kernel of one
// step, launched once per step (lltm_sequence_step.cu). It computes h_{t-1} W_h^T for its tile on
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
  KSplit split{};   // the global scratch of a tile with KC > 1
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
// A thread's cells are the pairs of columns (2q, 2q + 1) (q = lane % 4) of rows lane / 4 and
// lane / 4 + 8 of each of its MMA tiles, as the accumulators hold them.
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
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Warp set 0 holds the CTA's sums after tile_gemm and runs the epilogue; sets 1.. (Tl::KS
  // > 1) only multiply.
  const int tw = warp % Tl::kTileWarps, wm = tw / Tl::WN, wn = tw % Tl::WN;
  const bool epilogue = warp < Tl::kTileWarps;
  auto row = [&](int mt, int h) { return m0 + wm * Tl::MT * 16 + mt * 16 + lane / 4 + 8 * h; };
  auto col = [&](int nj) { return j0 + wn * Tl::NJ * 8 + nj * 8 + 2 * (lane % 4); };
  // The epilogue's inputs (P_t and c_{t-1} of this thread's cells) are loaded before the
  // product, so that their latency hides behind it instead of following it.
  Two<T> pz[Tl::MT][Tl::NJ][2][3], pc[Tl::MT][Tl::NJ][2];
#pragma unroll
  for (int mt = 0; mt < Tl::MT; ++mt)
#pragma unroll
    for (int nj = 0; nj < Tl::NJ; ++nj)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t b = row(mt, h), j = col(nj);
        if (epilogue && b < B && j < S) {  // S is even: j + 1 < S too
          const T* zr = p.z + b * 3 * S + j;
#pragma unroll
          for (int g = 0; g < 3; ++g) pz[mt][nj][h][g] = load_two(zr + g * S);
          pc[mt][nj][h] = load_two(p.c_prev + b * S + j);
        }
      }
  const Operands<T> op{p.h_prev, S, B, m0, p.w_h, S, S, S, j0, S};
  float acc[Tl::MT][Tl::NG][Tl::NJ][4];
  const bool sums = tile_gemm<Tl>(acc, op, smem, p.split);  // KC > 1: the tile's last CTA
  if (!epilogue || !sums) return;
#pragma unroll
  for (int mt = 0; mt < Tl::MT; ++mt)
#pragma unroll
    for (int nj = 0; nj < Tl::NJ; ++nj)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t b = row(mt, h), j = col(nj);
        if (b >= B || j >= S) continue;
        Two<T> z[3], hv, cv;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          T zt[3];
#pragma unroll
          for (int g = 0; g < 3; ++g) {
            zt[g] = static_cast<float>(element(pz[mt][nj][h][g], e)) + acc[mt][g][nj][2 * h + e];
          }
          float hf, cf;
          cell_forward<float>(zt[0], zt[1], zt[2], element(pc[mt][nj][h], e), hf, cf);
#pragma unroll
          for (int g = 0; g < 3; ++g) (e == 0 ? z[g].lo : z[g].hi) = zt[g];
          (e == 0 ? hv.lo : hv.hi) = hf;
          (e == 0 ? cv.lo : cv.hi) = cf;
        }
        T* zr = p.z + b * 3 * S + j;
#pragma unroll
        for (int g = 0; g < 3; ++g) store_two(zr + g * S, z[g]);
        store_two(p.h + b * S + j, hv);
        store_two(p.c + b * S + j, cv);
      }
}

}  // namespace lltm::step
