// LLTM cell, the small-problem CUDA kernels (lltm_cuda_small.cuh has the plan): the backward's
// GEMM kernel (d_X, d_weights and d_bias from d_gates, in two block roles).
#pragma once

#include "lltm/lltm_cuda_small_tiles.cuh"

namespace lltm::small {

// ---------------------------------------------------------------------------------------
// Backward GEMMs: d_X = d_gates @ weights, d_weights = d_gates^T @ X, d_bias = sum of d_gates.

template <typename scalar_t>
struct BackwardArgs {
  const scalar_t* d_gates;  // (B, 3S)
  const scalar_t* X;        // (B, K)
  const scalar_t* weights;  // (3S, K)
  scalar_t* d_old_h;        // (B, S): d_X's columns [0, S); nullptr when not wanted
  scalar_t* d_input;        // (B, K - S): d_X's columns [S, K); nullptr when not wanted
  scalar_t* d_weights;      // (3S, K); nullptr when not wanted
  scalar_t* d_bias;         // (3S,); nullptr when not wanted
  int B, N, K, S;           // N = 3S, K = S + F
  int dx_k0, dx_k1;         // the d_X role's columns [dx_k0, dx_k1) of X: the wanted halves
  int dx_blocks;            // blocks of the d_X role (0 without d_X); they come first
  int dx_col_tiles;         // tiles of kDxCols columns of [dx_k0, dx_k1) in the d_X role
  int p_col_tiles;          // tiles of kPK columns of X in the parameter role (1 without d_weights)
};

// d_X[b0 : b0 + kDxRows, k0 : k0 + kDxCols] = d_gates[b-tile, :] @ weights[:, k-tile], for
// the columns in [dx_k0, dx_k1); column k < S is written to d_old_h, column k >= S to d_input.
template <int TM, int CH, bool TC, typename scalar_t, typename acc_t>
__device__ __forceinline__ void d_x_role(const BackwardArgs<scalar_t>& a,
                                         DxSmem<acc_t, TM, CH, TC>& sm, int block) {
  constexpr int kDxRows = dx_rows<TM>;
  using Smem = DxSmem<acc_t, TM, CH, TC>;
  using Tile = TileOf<TC, scalar_t, kDxRows, kDxCols, SimtTile<TM, 1, 4, kDxCols>>;
  constexpr int kZStep = kThreads / CH;       // 16 for CH = 16
  constexpr int kZLoads = kDxRows / kZStep;   // TM for CH = 16
  constexpr int kWStep = kThreads / kDxCols;  // 4
  constexpr int kWLoads = CH / kWStep;        // 4 for CH = 16
  const int t = threadIdx.x;
  const int b0 = block / a.dx_col_tiles * kDxRows;
  const int k0 = a.dx_k0 + block % a.dx_col_tiles * kDxCols;

  // d_gates: thread t loads column zn of each chunk for the tile rows zb + l * kZStep.
  // weights: thread t loads column k0 + wk of the chunk's rows wr + l * kWStep.
  const int zn = t % CH, zb = t / CH;
  const int wk = t % kDxCols, wr = t / kDxCols;
  const bool k_in = k0 + wk < a.dx_k1;
  int z_row[kZLoads];  // offset of the d_gates row, -1 outside the problem
#pragma unroll
  for (int l = 0; l < kZLoads; ++l) {
    const int b = b0 + zb + l * kZStep;
    z_row[l] = b < a.B ? b * a.N : -1;
  }
  acc_t rz[kZLoads], rw[kWLoads];
  auto load = [&](int c0) {  // gate columns [c0, c0 + CH)
    const int n = c0 + zn;
#pragma unroll
    for (int l = 0; l < kZLoads; ++l) {
      rz[l] = (z_row[l] >= 0 && n < a.N) ? static_cast<acc_t>(a.d_gates[z_row[l] + n]) : acc_t(0);
    }
#pragma unroll
    for (int l = 0; l < kWLoads; ++l) {
      const int r = c0 + wr + l * kWStep;
      rw[l] = (r < a.N && k_in) ? static_cast<acc_t>(a.weights[r * a.K + k0 + wk]) : acc_t(0);
    }
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int l = 0; l < kZLoads; ++l) sm.dz[buf][Smem::Z::at(zn, zb + l * kZStep)] = rz[l];
#pragma unroll
    for (int l = 0; l < kWLoads; ++l) sm.w[buf][Smem::W::at(wr + l * kWStep, wk)] = rw[l];
  };

  const Tile tile;
  acc_t acc[Tile::kRows][Tile::kSegs][Tile::kCols] = {};
  const int steps = ceil_div(a.N, CH);
  load(0);
  store(0);
  __syncthreads();
  for (int s = 0; s < steps; ++s) {
    const int cur = s & 1;
    if (s + 1 < steps) load((s + 1) * CH);
    tile.template multiply<CH, typename Smem::Z, typename Smem::W>(acc, sm.dz[cur], sm.w[cur]);
    if (s + 1 < steps) store(cur ^ 1);
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < Tile::kRows; ++i) {
    const int b = b0 + tile.row(i);
    if (b >= a.B) continue;
#pragma unroll
    for (int s = 0; s < Tile::kSegs; ++s) {
#pragma unroll
      for (int c = 0; c < Tile::kCols; ++c) {
        const int k = k0 + tile.col(s, c);
        if (k >= a.dx_k1) continue;
        if (k < a.S) {
          a.d_old_h[b * a.S + k] = acc[i][s][c];
        } else {
          a.d_input[b * (a.K - a.S) + (k - a.S)] = acc[i][s][c];
        }
      }
    }
  }
}

// d_weights[nb : nb + kPN, k0 : k0 + kPK] = d_gates[:, n-tile]^T @ X[:, k-tile], reducing over
// batch rows in chunks of CH; the blocks of the first k tile also write d_bias.
template <int CH, bool TC, typename scalar_t, typename acc_t>
__device__ __forceinline__ void param_role(const BackwardArgs<scalar_t>& a,
                                           ParamSmem<acc_t, CH, TC>& sm, int block) {
  using Smem = ParamSmem<acc_t, CH, TC>;
  using Tile = TileOf<TC, scalar_t, kPK, kPN, SimtTile<4, 3, 2, kPSeg>>;
  constexpr int kZStep = kThreads / kPSeg;  // 8
  constexpr int kZLoads = CH / kZStep;      // 2 (x 3 segments) for CH = 16
  constexpr int kXStep = kThreads / kPK;    // 4
  constexpr int kXLoads = CH / kXStep;      // 4 for CH = 16
  const int t = threadIdx.x;
  const int nb = block / a.p_col_tiles * kPN, k0 = block % a.p_col_tiles * kPK;
  const bool want_dw = a.d_weights != nullptr;
  const bool want_bias = k0 == 0 && a.d_bias != nullptr;

  // d_gates: thread t loads columns nb + g * kPSeg + zn (g < 3) of the chunk's rows
  // zb + l * kZStep. X: thread t loads column k0 + xk of the chunk's rows xb + l * kXStep.
  const int zn = t % kPSeg, zb = t / kPSeg;
  const int xk = t % kPK, xb = t / kPK;
  bool n_in[3];
#pragma unroll
  for (int g = 0; g < 3; ++g) n_in[g] = nb + g * kPSeg + zn < a.N;
  const bool k_in = k0 + xk < a.K;
  acc_t rz[kZLoads][3], rx[kXLoads];
  auto load = [&](int b_start) {
#pragma unroll
    for (int l = 0; l < kZLoads; ++l) {
      const int b = b_start + zb + l * kZStep;
#pragma unroll
      for (int g = 0; g < 3; ++g) {
        rz[l][g] = (b < a.B && n_in[g])
                       ? static_cast<acc_t>(a.d_gates[b * a.N + nb + g * kPSeg + zn])
                       : acc_t(0);
      }
    }
    if (want_dw) {
#pragma unroll
      for (int l = 0; l < kXLoads; ++l) {
        const int b = b_start + xb + l * kXStep;
        rx[l] = (b < a.B && k_in) ? static_cast<acc_t>(a.X[b * a.K + k0 + xk]) : acc_t(0);
      }
    }
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int l = 0; l < kZLoads; ++l) {
#pragma unroll
      for (int g = 0; g < 3; ++g) sm.dz[buf][Smem::Z::at(zb + l * kZStep, g * kPSeg + zn)] = rz[l][g];
    }
    if (want_dw) {
#pragma unroll
      for (int l = 0; l < kXLoads; ++l) sm.x[buf][Smem::X::at(xb + l * kXStep, xk)] = rx[l];
    }
  };

  // acc[i][g][c]: d_weights[nb + tile.col(g, c)][k0 + tile.row(i)].
  const Tile tile;
  acc_t acc[Tile::kRows][3][Tile::kCols] = {};
  acc_t bias_sum = 0;  // thread t < kPN: gate column nb + t
  const int steps = ceil_div(a.B, CH);
  load(0);
  store(0);
  __syncthreads();
  for (int s = 0; s < steps; ++s) {
    const int cur = s & 1;
    if (s + 1 < steps) load((s + 1) * CH);
    if (want_dw) {
      tile.template multiply<CH, typename Smem::X, typename Smem::Z>(acc, sm.x[cur], sm.dz[cur]);
    }
    if (want_bias && t < kPN) {
#pragma unroll
      for (int r = 0; r < CH; ++r) bias_sum += sm.dz[cur][Smem::Z::at(r, t)];
    }
    if (s + 1 < steps) store(cur ^ 1);
    __syncthreads();
  }

  if (want_dw) {
#pragma unroll
    for (int i = 0; i < Tile::kRows; ++i) {
      const int k = k0 + tile.row(i);
      if (k >= a.K) continue;
#pragma unroll
      for (int g = 0; g < 3; ++g) {
#pragma unroll
        for (int c = 0; c < Tile::kCols; ++c) {
          const int n = nb + tile.col(g, c);
          if (n < a.N) a.d_weights[n * a.K + k] = acc[i][g][c];
        }
      }
    }
  }
  if (want_bias && t < kPN && nb + t < a.N) a.d_bias[nb + t] = bias_sum;
}

// DX_TM: the d_X role's TM (the parameter role's tiles are fixed); CH: both roles' chunks;
// TC: tensor-core tiles (MmaTile) in both roles.
template <typename scalar_t, int DX_TM, int CH = kChunk, bool TC = false>
__global__ void __launch_bounds__(kThreads) small_backward_kernel(const BackwardArgs<scalar_t> a) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  static_assert(dx_staging_ok<DX_TM, CH> && param_staging_ok<CH>,
                "backward staging: whole loads per thread");
  static_assert(!TC || std::is_same_v<acc_t, float>, "tensor-core tiles are float");
  static_assert(sizeof(BackwardSmem<acc_t, DX_TM, CH, TC>) <= 48 * 1024, "static shared memory");
  __shared__ BackwardSmem<acc_t, DX_TM, CH, TC> sm;
  // The role is uniform over a block, so every __syncthreads() inside is reached by all.
  const int block = static_cast<int>(blockIdx.x);
  if (block < a.dx_blocks) {
    d_x_role<DX_TM, CH, TC>(a, sm.dx, block);
  } else {
    param_role<CH, TC>(a, sm.param, block - a.dx_blocks);
  }
}

}  // namespace lltm::small
