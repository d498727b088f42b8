// LLTM cell: the CUDA kernels for small and medium problems, the forward in one launch and
// every gradient of the backward in one more.
//
// Why: on the lent H100 (a VM) a launch or an ATen op costs 20-30 us of host time, so at
// (batch, in, state) = (16, 32, 128) the cuBLAS path's step (8 launches, plus the ops
// that allocate, concatenate and reduce) is all host overhead: 0.27 ms for 0.07 ms of GPU
// work. Here each launch does a whole op:
//
// forward (small_forward_kernel): a block owns kFwdRows batch rows and kFwdCols state
//   columns j, i.e. gate_weights columns j, S + j and 2S + j. It computes those gate
//   pre-activations with a shared-memory tiled SIMT GEMM that reads X[b, k] straight from
//   old_h (k < S) and input (k >= S), adds the bias, applies the cell's pointwise math in
//   registers and writes new_h, new_cell and gate_weights. The blocks of the first column
//   tile also write X (they read every element of it exactly once).
//
// backward (small_backward_kernel): no d_gates tensor; each block recomputes the d_gates
//   it needs from (grad_h, grad_cell, new_cell, gate_weights) while it stages them into
//   shared memory. Two block roles:
//   - d_X role (first dx_blocks blocks, only when d_X is wanted): a block owns kDxRows
//     batch rows x kDxCols columns of X and computes d_X = d_gates @ weights over all
//     3S gate columns, in chunks of state columns (with their three gates each).
//   - parameter role: a block owns kPCols state columns (3 * kPCols rows of weights) x kPK
//     columns of X and computes d_weights = d_gates^T @ X over all batch rows. The blocks
//     of the first column tile also write d_old_cell and, summing the d_gates they staged,
//     d_bias. Without d_weights there is one such block per state column tile (no GEMM).
//   Every sum runs in a fixed order inside one block: no atomics, results deterministic.
//
// Precision: inputs are widened to at::opmath_type (float for half types, double for
// float64) when staged into shared memory; all products and sums run in that type.
//
// This header holds only device code and its constants; lltm_cuda_small.cu launches it.
// It uses nothing from the CUDA runtime API beyond the kernel language itself.
#pragma once

#include <ATen/OpMathType.h>

#include <cstdint>

#include "common/cuda_utils.cuh"
#include "lltm/lltm.h"

namespace lltm::small {

using fused_ops::Pack;

// ---------------------------------------------------------------------------------------
// Tiles. Every kernel runs kThreads = 16 x 16 threads; thread t computes a micro-tile of
// TM consecutive rows ("m", from t / 16) by NSEG segments of TN consecutive columns ("n",
// from t % 16) of its block's output tile.
constexpr int kThreads = 256;
constexpr int kGroups = 16;

// Forward: kFwdRows batch rows x kFwdCols state columns (x 3 gates) per block; reduction
// over the S + F columns of X in chunks of kFwdChunk. Micro-tile 4 rows x 3 gates x 2.
constexpr int kFwdRows = 64, kFwdCols = 32, kFwdChunk = 16;
// Backward d_X role: kDxRows batch rows x kDxCols columns of X per block; reduction over
// state columns in chunks of dx_chunk (x 3 gates = 3 * dx_chunk rows of weights; halved
// for float64 to stay within 48 KB of static shared memory). Micro-tile 4 x 4.
constexpr int kDxRows = 64, kDxCols = 64;
template <typename acc_t>
constexpr int dx_chunk = sizeof(acc_t) == 8 ? 4 : 8;
// Backward parameter role: kPCols state columns (x 3 gates) x kPK columns of X per block;
// reduction over batch rows in chunks of kPChunk. Micro-tile 4 columns of X x 3 gates x 2.
constexpr int kPCols = 32, kPK = 64, kPChunk = 16;

static_assert(kFwdRows == kGroups * 4 && kFwdCols == kGroups * 2, "forward micro-tile");
static_assert(kDxRows == kGroups * 4 && kDxCols == kGroups * 4, "d_X micro-tile");
static_assert(kPK == kGroups * 4 && kPCols == kGroups * 2, "parameter micro-tile");
static_assert(kFwdRows * kFwdChunk % kThreads == 0 && 3 * kFwdCols * kFwdChunk % kThreads == 0,
              "forward staging: whole loads per thread");
static_assert(kPChunk * kPCols % kThreads == 0 && kPChunk * kPK % kThreads == 0,
              "parameter staging: whole loads per thread");
static_assert(3 * kPCols <= kThreads, "one thread per d_bias entry of a tile");

// Shared-memory row strides: a multiple of 4 elements keeps the vector reads of TM = 4
// (and TN = 2) elements aligned; the +4 on the rows that are stored transposed spreads
// those stores over the banks (2-way conflicts at most).
constexpr int kFwdLdX = kFwdRows + 4;          // [k][b]
constexpr int kFwdLdW = 3 * kFwdCols + 4;      // [k][gate * kFwdCols + j]
constexpr int kDxLdZ = kDxRows + 4;            // [gate * chunk + j][b]
constexpr int kDxLdW = kDxCols;                // [gate * chunk + j][k]
constexpr int kPLdX = kPK;                     // [b][k]
constexpr int kPLdZ = 3 * kPCols;              // [b][gate * kPCols + j]
static_assert(kFwdLdX % 4 == 0 && kFwdLdW % 4 == 0 && kDxLdZ % 4 == 0 && kDxLdW % 4 == 0 &&
                  kPLdX % 4 == 0 && kPLdZ % 4 == 0,
              "aligned vector reads");

template <typename acc_t>
struct alignas(32) ForwardSmem {
  acc_t x[2][kFwdChunk][kFwdLdX];  // X^T, double-buffered
  acc_t w[2][kFwdChunk][kFwdLdW];  // weights^T, double-buffered
};

template <typename acc_t>
struct alignas(32) DxSmem {
  acc_t dz[2][3 * dx_chunk<acc_t>][kDxLdZ];  // d_gates^T
  acc_t w[2][3 * dx_chunk<acc_t>][kDxLdW];   // weights rows
};

template <typename acc_t>
struct alignas(32) ParamSmem {
  acc_t x[2][kPChunk][kPLdX];   // X rows
  acc_t dz[2][kPChunk][kPLdZ];  // d_gates rows
};

template <typename acc_t>
union BackwardSmem {
  DxSmem<acc_t> dx;
  ParamSmem<acc_t> param;
};

static_assert(sizeof(ForwardSmem<double>) <= 48 * 1024, "static shared memory");
static_assert(sizeof(BackwardSmem<double>) <= 48 * 1024, "static shared memory");

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// acc[i][s][c] += sum_r A[r][m0 + i] * B[r][s * SEGW + n0 + c] for r in [0, R): one
// R-deep slab of the block's GEMM from shared memory (row strides LDA and LDB).
template <int R, int LDA, int LDB, int SEGW, typename acc_t, int TM, int NSEG, int TN>
__device__ __forceinline__ void multiply_tile(acc_t (&acc)[TM][NSEG][TN], const acc_t* A,
                                              const acc_t* B, int m0, int n0) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const Pack<acc_t, TM> a = *reinterpret_cast<const Pack<acc_t, TM>*>(A + r * LDA + m0);
    Pack<acc_t, TN> b[NSEG];
#pragma unroll
    for (int s = 0; s < NSEG; ++s) {
      b[s] = *reinterpret_cast<const Pack<acc_t, TN>*>(B + r * LDB + s * SEGW + n0);
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
      for (int s = 0; s < NSEG; ++s) {
#pragma unroll
        for (int c = 0; c < TN; ++c) acc[i][s][c] += a.v[i] * b[s].v[c];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Forward.

template <typename scalar_t>
__global__ void __launch_bounds__(kThreads)
    small_forward_kernel(const scalar_t* __restrict__ input, const scalar_t* __restrict__ weights,
                         const scalar_t* __restrict__ bias, const scalar_t* __restrict__ old_h,
                         const scalar_t* __restrict__ old_cell, scalar_t* __restrict__ new_h,
                         scalar_t* __restrict__ new_cell, scalar_t* __restrict__ X,
                         scalar_t* __restrict__ gates, int64_t B, int64_t F, int64_t S) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int kXLoads = kFwdRows * kFwdChunk / kThreads;      // 4
  constexpr int kWLoads = 3 * kFwdCols * kFwdChunk / kThreads;  // 6
  __shared__ ForwardSmem<acc_t> sm;

  const int t = threadIdx.x;
  const int64_t K = S + F;
  const int64_t col_tiles = ceil_div(S, kFwdCols);
  const int64_t col_tile = blockIdx.x % col_tiles;
  const int64_t b0 = blockIdx.x / col_tiles * kFwdRows, j0 = col_tile * kFwdCols;
  const bool write_X = col_tile == 0;

  // Global -> registers for the chunk at column k0 of X (zeros outside the problem);
  // element e = t + l * kThreads of a chunk is (row e / kFwdChunk, column e % kFwdChunk),
  // so consecutive threads read consecutive columns.
  acc_t rx[kXLoads], rw[kWLoads];
  auto load = [&](int64_t k0) {
#pragma unroll
    for (int l = 0; l < kXLoads; ++l) {
      const int e = t + l * kThreads;
      const int64_t b = b0 + e / kFwdChunk, k = k0 + e % kFwdChunk;
      acc_t v = 0;
      if (b < B && k < K) {
        const scalar_t x = k < S ? old_h[b * S + k] : input[b * F + (k - S)];
        if (write_X) X[b * K + k] = x;
        v = static_cast<acc_t>(x);
      }
      rx[l] = v;
    }
#pragma unroll
    for (int l = 0; l < kWLoads; ++l) {
      const int e = t + l * kThreads;
      const int row = e / kFwdChunk;  // gate * kFwdCols + column within the tile
      const int64_t j = j0 + row % kFwdCols, k = k0 + e % kFwdChunk;
      rw[l] = (j < S && k < K) ? static_cast<acc_t>(weights[(row / kFwdCols * S + j) * K + k])
                               : acc_t(0);
    }
  };
  // Registers -> shared memory, transposed (reduction index first).
  auto store = [&](int buf) {
#pragma unroll
    for (int l = 0; l < kXLoads; ++l) {
      const int e = t + l * kThreads;
      sm.x[buf][e % kFwdChunk][e / kFwdChunk] = rx[l];
    }
#pragma unroll
    for (int l = 0; l < kWLoads; ++l) {
      const int e = t + l * kThreads;
      sm.w[buf][e % kFwdChunk][e / kFwdChunk] = rw[l];
    }
  };

  // acc[i][g][c]: gate g's pre-activation for batch row b0 + m0 + i, column j0 + n0 + c.
  const int m0 = t / kGroups * 4, n0 = t % kGroups * 2;
  acc_t acc[4][3][2] = {};
  const int64_t steps = ceil_div(K, kFwdChunk);
  load(0);
  store(0);
  __syncthreads();
  for (int64_t s = 0; s < steps; ++s) {
    const int cur = static_cast<int>(s & 1);
    if (s + 1 < steps) load((s + 1) * kFwdChunk);
    multiply_tile<kFwdChunk, kFwdLdX, kFwdLdW, kFwdCols>(acc, &sm.x[cur][0][0], &sm.w[cur][0][0],
                                                         m0, n0);
    if (s + 1 < steps) store(cur ^ 1);
    __syncthreads();
  }

  acc_t bias_v[3][2];
#pragma unroll
  for (int g = 0; g < 3; ++g) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int64_t j = j0 + n0 + c;
      bias_v[g][c] = j < S ? static_cast<acc_t>(bias[g * S + j]) : acc_t(0);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t b = b0 + m0 + i;
    if (b >= B) continue;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int64_t j = j0 + n0 + c;
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
    }
  }
}

// ---------------------------------------------------------------------------------------
// Backward.

template <typename scalar_t>
struct BackwardArgs {
  const scalar_t* grad_h;
  const scalar_t* grad_cell;
  const scalar_t* new_cell;
  const scalar_t* gates;
  const scalar_t* X;
  const scalar_t* weights;
  scalar_t* d_X;        // nullptr when not wanted
  scalar_t* d_weights;  // nullptr when not wanted
  scalar_t* d_bias;     // nullptr when not wanted
  scalar_t* d_old_cell;
  int64_t B, S, K;
  int64_t dx_blocks;     // blocks of the d_X role (0 without d_X); they come first
  int64_t dx_col_tiles;  // tiles of kDxCols columns of X in the d_X role
  int64_t p_col_tiles;   // tiles of kPK columns of X in the parameter role (1 without d_weights)
};

// The six inputs of one (b, j) element of the backward, read ahead of their use.
template <typename acc_t>
struct CellInputs {
  acc_t grad_h, grad_cell, new_cell, z_i, z_o, z_c;
  bool valid;  // (b, j) inside the problem
};

template <typename scalar_t, typename acc_t>
__device__ __forceinline__ void load_cell(CellInputs<acc_t>& in, const BackwardArgs<scalar_t>& a,
                                          int64_t b, int64_t j) {
  in.valid = b < a.B && j < a.S;
  in.grad_h = in.grad_cell = in.new_cell = in.z_i = in.z_o = in.z_c = acc_t(0);
  if (in.valid) {
    const int64_t e = b * a.S + j;
    const scalar_t* z = a.gates + b * 3 * a.S + j;
    in.grad_h = static_cast<acc_t>(a.grad_h[e]);
    in.grad_cell = static_cast<acc_t>(a.grad_cell[e]);
    in.new_cell = static_cast<acc_t>(a.new_cell[e]);
    in.z_i = static_cast<acc_t>(z[0]);
    in.z_o = static_cast<acc_t>(z[a.S]);
    in.z_c = static_cast<acc_t>(z[2 * a.S]);
  }
}

// d_gates (three gates) and d_old_cell of one element; zeros outside the problem.
template <typename acc_t>
__device__ __forceinline__ void cell_grads(const CellInputs<acc_t>& in, acc_t (&dz)[3],
                                           acc_t& d_cell) {
  dz[0] = dz[1] = dz[2] = d_cell = acc_t(0);
  if (in.valid) {
    cell_backward<acc_t>(in.grad_h, in.grad_cell, in.new_cell, in.z_i, in.z_o, in.z_c, dz[0],
                         dz[1], dz[2], d_cell);
  }
}

// d_X[b0 : b0 + kDxRows, k0 : k0 + kDxCols] = d_gates[b-tile, :] @ weights[:, k-tile],
// the reduction over gate columns taken state column chunk by chunk: reduction row
// r = g * RJ + jj stands for gate column g * S + j0 + jj.
template <typename scalar_t, typename acc_t>
__device__ __forceinline__ void d_input_role(const BackwardArgs<scalar_t>& a, DxSmem<acc_t>& sm,
                                             int64_t block) {
  constexpr int RJ = dx_chunk<acc_t>, R = 3 * RJ;
  constexpr int kCells = kDxRows * RJ / kThreads;  // (b, j) elements a thread stages per chunk
  constexpr int kWLoads = R * kDxCols / kThreads;
  static_assert(kDxRows * RJ % kThreads == 0 && R * kDxCols % kThreads == 0, "staging");
  const int t = threadIdx.x;
  const int64_t b0 = block / a.dx_col_tiles * kDxRows, k0 = block % a.dx_col_tiles * kDxCols;

  // Element e = t + l * kThreads of a chunk: cell (b0 + e / RJ, j0 + e % RJ); weights
  // (row e / kDxCols of the chunk, column k0 + e % kDxCols).
  CellInputs<acc_t> cells[kCells];
  acc_t rw[kWLoads];
  auto load = [&](int64_t j0) {
#pragma unroll
    for (int l = 0; l < kCells; ++l) {
      const int e = t + l * kThreads;
      load_cell(cells[l], a, b0 + e / RJ, j0 + e % RJ);
    }
#pragma unroll
    for (int l = 0; l < kWLoads; ++l) {
      const int e = t + l * kThreads;
      const int r = e / kDxCols;
      const int64_t j = j0 + r % RJ, k = k0 + e % kDxCols;
      rw[l] = (j < a.S && k < a.K) ? static_cast<acc_t>(a.weights[(r / RJ * a.S + j) * a.K + k])
                                   : acc_t(0);
    }
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int l = 0; l < kCells; ++l) {
      const int e = t + l * kThreads;
      acc_t dz[3], d_cell;
      cell_grads(cells[l], dz, d_cell);
#pragma unroll
      for (int g = 0; g < 3; ++g) sm.dz[buf][g * RJ + e % RJ][e / RJ] = dz[g];
    }
#pragma unroll
    for (int l = 0; l < kWLoads; ++l) {
      const int e = t + l * kThreads;
      sm.w[buf][e / kDxCols][e % kDxCols] = rw[l];
    }
  };

  const int m0 = t / kGroups * 4, n0 = t % kGroups * 4;
  acc_t acc[4][1][4] = {};
  const int64_t steps = ceil_div(a.S, RJ);
  load(0);
  store(0);
  __syncthreads();
  for (int64_t s = 0; s < steps; ++s) {
    const int cur = static_cast<int>(s & 1);
    if (s + 1 < steps) load((s + 1) * RJ);
    multiply_tile<R, kDxLdZ, kDxLdW, kDxCols>(acc, &sm.dz[cur][0][0], &sm.w[cur][0][0], m0, n0);
    if (s + 1 < steps) store(cur ^ 1);
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t b = b0 + m0 + i;
    if (b >= a.B) continue;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int64_t k = k0 + n0 + c;
      if (k < a.K) a.d_X[b * a.K + k] = acc[i][0][c];
    }
  }
}

// d_weights[rows g * S + j of the j-tile, k0 : k0 + kPK] = d_gates[:, those]^T @ X[:, k-tile],
// the reduction over batch rows in chunks of kPChunk. The blocks of the first k tile also
// write d_old_cell for their state columns and d_bias (sum of the staged d_gates).
template <typename scalar_t, typename acc_t>
__device__ __forceinline__ void param_role(const BackwardArgs<scalar_t>& a, ParamSmem<acc_t>& sm,
                                           int64_t block) {
  constexpr int kCells = kPChunk * kPCols / kThreads;  // 2
  constexpr int kXLoads = kPChunk * kPK / kThreads;    // 4
  const int t = threadIdx.x;
  const int64_t j0 = block / a.p_col_tiles * kPCols, k0 = block % a.p_col_tiles * kPK;
  const bool first = k0 == 0;
  const bool want_dw = a.d_weights != nullptr;
  const bool want_bias = first && a.d_bias != nullptr;

  // Element e = t + l * kThreads of a chunk: cell (b_start + e / kPCols, j0 + e % kPCols);
  // X (b_start + e / kPK, k0 + e % kPK).
  CellInputs<acc_t> cells[kCells];
  acc_t rx[kXLoads];
  auto load = [&](int64_t b_start) {
#pragma unroll
    for (int l = 0; l < kCells; ++l) {
      const int e = t + l * kThreads;
      load_cell(cells[l], a, b_start + e / kPCols, j0 + e % kPCols);
    }
    if (want_dw) {
#pragma unroll
      for (int l = 0; l < kXLoads; ++l) {
        const int e = t + l * kThreads;
        const int64_t b = b_start + e / kPK, k = k0 + e % kPK;
        rx[l] = (b < a.B && k < a.K) ? static_cast<acc_t>(a.X[b * a.K + k]) : acc_t(0);
      }
    }
  };
  auto store = [&](int buf, int64_t b_start) {
#pragma unroll
    for (int l = 0; l < kCells; ++l) {
      const int e = t + l * kThreads;
      acc_t dz[3], d_cell;
      cell_grads(cells[l], dz, d_cell);
#pragma unroll
      for (int g = 0; g < 3; ++g) sm.dz[buf][e / kPCols][g * kPCols + e % kPCols] = dz[g];
      if (first && cells[l].valid) {
        a.d_old_cell[(b_start + e / kPCols) * a.S + j0 + e % kPCols] = d_cell;
      }
    }
    if (want_dw) {
#pragma unroll
      for (int l = 0; l < kXLoads; ++l) {
        const int e = t + l * kThreads;
        sm.x[buf][e / kPK][e % kPK] = rx[l];
      }
    }
  };

  // acc[i][g][c]: d_weights[g * S + j0 + n0 + c][k0 + m0 + i].
  const int m0 = t / kGroups * 4, n0 = t % kGroups * 2;
  acc_t acc[4][3][2] = {};
  acc_t bias_sum = 0;  // thread t < 3 * kPCols: gate t / kPCols, column j0 + t % kPCols
  const int64_t steps = ceil_div(a.B, kPChunk);
  load(0);
  store(0, 0);
  __syncthreads();
  for (int64_t s = 0; s < steps; ++s) {
    const int cur = static_cast<int>(s & 1);
    if (s + 1 < steps) load((s + 1) * kPChunk);
    if (want_dw) {
      multiply_tile<kPChunk, kPLdX, kPLdZ, kPCols>(acc, &sm.x[cur][0][0], &sm.dz[cur][0][0], m0,
                                                   n0);
    }
    if (want_bias && t < kPLdZ) {
#pragma unroll
      for (int r = 0; r < kPChunk; ++r) bias_sum += sm.dz[cur][r][t];
    }
    if (s + 1 < steps) store(cur ^ 1, (s + 1) * kPChunk);
    __syncthreads();
  }

  if (want_dw) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t k = k0 + m0 + i;
      if (k >= a.K) continue;
#pragma unroll
      for (int g = 0; g < 3; ++g) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int64_t j = j0 + n0 + c;
          if (j < a.S) a.d_weights[(g * a.S + j) * a.K + k] = acc[i][g][c];
        }
      }
    }
  }
  if (want_bias && t < kPLdZ) {
    const int64_t j = j0 + t % kPCols;
    if (j < a.S) a.d_bias[t / kPCols * a.S + j] = bias_sum;
  }
}

template <typename scalar_t>
__global__ void __launch_bounds__(kThreads) small_backward_kernel(const BackwardArgs<scalar_t> a) {
  using acc_t = at::opmath_type<scalar_t>;
  __shared__ BackwardSmem<acc_t> sm;
  // The role is uniform over a block, so every __syncthreads() inside is reached by all.
  if (blockIdx.x < a.dx_blocks) {
    d_input_role(a, sm.dx, blockIdx.x);
  } else {
    param_role(a, sm.param, blockIdx.x - a.dx_blocks);
  }
}

}  // namespace lltm::small
