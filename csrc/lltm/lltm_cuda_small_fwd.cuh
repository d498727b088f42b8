// LLTM cell, the small-problem CUDA kernels (lltm_cuda_small.cuh has the plan): the forward
// kernel, one launch for the whole step.
#pragma once

#include "lltm/lltm_cuda_small_tiles.cuh"

namespace lltm::small {

// ---------------------------------------------------------------------------------------
// Forward.
//
// Staging: of each CH-column chunk of X (and of the weights rows), thread t loads
// column kk = t % CH of the tile rows rr + l * kRowStep, rr = t / CH, so
// consecutive threads read consecutive columns; the per-row offsets are worked out once.

template <typename scalar_t, int TM, int CH = kChunk, bool TC = false>
__global__ void __launch_bounds__(kThreads)
    small_forward_kernel(const scalar_t* __restrict__ input, const scalar_t* __restrict__ weights,
                         const scalar_t* __restrict__ bias, const scalar_t* __restrict__ old_h,
                         const scalar_t* __restrict__ old_cell, scalar_t* __restrict__ new_h,
                         scalar_t* __restrict__ new_cell, scalar_t* __restrict__ X,
                         scalar_t* __restrict__ gates, const ActivationPtrs<scalar_t> acts,
                         int B, int F, int S) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  static_assert(fwd_staging_ok<TM, CH>, "forward staging: whole loads per thread");
  static_assert(!TC || std::is_same_v<acc_t, float>, "tensor-core tiles are float");
  static_assert(sizeof(ForwardSmem<acc_t, TM, CH, TC>) <= 48 * 1024, "static shared memory");
  constexpr int kFwdRows = fwd_rows<TM>;
  using Smem = ForwardSmem<acc_t, TM, CH, TC>;
  constexpr int kRowStep = kThreads / CH;           // 16 for CH = 16
  constexpr int kXLoads = kFwdRows / kRowStep;      // TM for CH = 16
  constexpr int kWLoads = 3 * kFwdCols / kRowStep;  // 6 for CH = 16
  using Tile = TileOf<TC, scalar_t, kFwdRows, 3 * kFwdCols, SimtTile<TM, 3, 2, kFwdCols>>;
  __shared__ Smem sm;

  const int t = threadIdx.x;
  const int K = S + F;
  const int col_tiles = ceil_div(S, kFwdCols);
  const int col_tile = static_cast<int>(blockIdx.x) % col_tiles;
  const int b0 = static_cast<int>(blockIdx.x) / col_tiles * kFwdRows, j0 = col_tile * kFwdCols;
  const bool write_X = col_tile == 0;

  const int kk = t % CH, rr = t / CH;
  int x_row[kXLoads];  // batch row of X, -1 outside the problem
#pragma unroll
  for (int l = 0; l < kXLoads; ++l) {
    const int b = b0 + rr + l * kRowStep;
    x_row[l] = b < B ? b : -1;
  }
  int w_row[kWLoads];  // offset of the weights row (gate g, column j), -1 outside
#pragma unroll
  for (int l = 0; l < kWLoads; ++l) {
    const int row = rr + l * kRowStep;  // g * kFwdCols + (j - j0)
    const int j = j0 + row % kFwdCols;
    w_row[l] = j < S ? (row / kFwdCols * S + j) * K : -1;
  }

  // Global -> registers for the chunk of X's columns [k0, k0 + CH), zeros outside.
  acc_t rx[kXLoads], rw[kWLoads];
  auto load = [&](int k0) {
    const int k = k0 + kk;
    const bool k_in = k < K, from_h = k < S;
#pragma unroll
    for (int l = 0; l < kXLoads; ++l) {
      const int b = x_row[l];
      acc_t v = 0;
      if (b >= 0 && k_in) {
        const scalar_t x = from_h ? old_h[b * S + k] : input[b * F + (k - S)];
        if (write_X) X[b * K + k] = x;
        v = static_cast<acc_t>(x);
      }
      rx[l] = v;
    }
#pragma unroll
    for (int l = 0; l < kWLoads; ++l) {
      rw[l] = (w_row[l] >= 0 && k_in) ? static_cast<acc_t>(weights[w_row[l] + k]) : acc_t(0);
    }
  };
  // Registers -> shared memory.
  auto store = [&](int buf) {
#pragma unroll
    for (int l = 0; l < kXLoads; ++l) sm.x[buf][Smem::X::at(kk, rr + l * kRowStep)] = rx[l];
#pragma unroll
    for (int l = 0; l < kWLoads; ++l) sm.w[buf][Smem::W::at(kk, rr + l * kRowStep)] = rw[l];
  };

  // acc[i][g][c]: gate g's pre-activation for batch row b0 + tile.row(i), column
  // j0 + tile.col(0, c) (segment g of the tile is gate g).
  const Tile tile;
  acc_t acc[Tile::kRows][3][Tile::kCols] = {};
  const int steps = ceil_div(K, CH);
  load(0);
  store(0);
  __syncthreads();
  for (int s = 0; s < steps; ++s) {
    const int cur = s & 1;
    if (s + 1 < steps) load((s + 1) * CH);
    tile.template multiply<CH, typename Smem::X, typename Smem::W>(acc, sm.x[cur], sm.w[cur]);
    if (s + 1 < steps) store(cur ^ 1);
    __syncthreads();
  }

  acc_t bias_v[3][Tile::kCols];
#pragma unroll
  for (int g = 0; g < 3; ++g) {
#pragma unroll
    for (int c = 0; c < Tile::kCols; ++c) {
      const int j = j0 + tile.col(0, c);
      bias_v[g][c] = j < S ? static_cast<acc_t>(bias[g * S + j]) : acc_t(0);
    }
  }
#pragma unroll
  for (int i = 0; i < Tile::kRows; ++i) {
    const int b = b0 + tile.row(i);
    if (b >= B) continue;
#pragma unroll
    for (int c = 0; c < Tile::kCols; ++c) {
      const int j = j0 + tile.col(0, c);
      if (j >= S) continue;
      const acc_t z_i = acc[i][0][c] + bias_v[0][c];
      const acc_t z_o = acc[i][1][c] + bias_v[1][c];
      const acc_t z_c = acc[i][2][c] + bias_v[2][c];
      acc_t h, cell;
      cell_forward<acc_t>(z_i, z_o, z_c, static_cast<acc_t>(old_cell[b * S + j]), h, cell);
      scalar_t* z = gates + b * 3 * S + j;
      z[0] = z_i;
      z[S] = z_o;
      z[2 * S] = z_c;
      new_h[b * S + j] = h;
      new_cell[b * S + j] = cell;
      if (acts.input_gate != nullptr) {
        acts.input_gate[b * S + j] = sigmoid(z_i);
        acts.output_gate[b * S + j] = sigmoid(z_o);
        acts.candidate_cell[b * S + j] = elu(z_c);
      }
    }
  }
}

}  // namespace lltm::small
