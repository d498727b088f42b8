// LLTM cell: the CUDA kernels for small and medium problems (see use_small_path), where a
// training step is bound by host-side launch overhead rather than by the GPU.
//
// forward, one launch (small_forward_kernel): a block owns kFwdRows batch rows and
//   kFwdCols state columns j, i.e. gate_weights columns j, S + j and 2S + j. It computes
//   those gate pre-activations with a shared-memory tiled GEMM that reads X[b, k]
//   straight from old_h (k < S) and input (k >= S), adds the bias, applies the cell's
//   pointwise math in registers and writes new_h, new_cell and gate_weights. The blocks of
//   the first column tile also write X (they read every element of it exactly once).
//
// backward, two launches: the cuBLAS path's pointwise kernel (lltm_cuda.cu) writes d_gates
//   and d_old_cell, then small_backward_kernel computes every parameter and input gradient
//   from d_gates with two block roles:
//   - d_X role (the first dx_blocks blocks; none without d_old_h and d_input): a block owns
//     kDxRows batch rows x kDxCols columns of X: d_X = d_gates @ weights = [d_old_h, d_input],
//     reducing over the 3S gate columns in chunks. Its tiles cover only the
//     wanted halves' columns, and each column goes straight to its own output.
//   - parameter role (none without d_weights and d_bias): a block owns kPN gate columns
//     (rows of weights) x kPK columns of X: d_weights = d_gates^T @ X, reducing over the
//     batch rows in chunks; the blocks of the first column tile also sum the
//     d_gates they staged into d_bias. Without d_weights there is one block per gate
//     column tile and no GEMM.
//   Every sum runs in a fixed order inside one block: no atomics, results deterministic.
//   (Recomputing d_gates inside the GEMM blocks instead would save the pointwise launch
//   but cost about a third more instructions in the GEMM loops, since every column tile
//   would redo the transcendental math: more than a launch's host time at medium sizes.)
//
// The GEMMs run on one of two register tiles (below): SimtTile, FMAs in every thread, or
// MmaTile, tensor cores (sm_80 and newer; float32, float16, bfloat16), chosen by the host.
//
// Precision: inputs are widened to fused_ops::opmath_t (float for half types, double for
// float64) when staged into shared memory; all sums run in that type. SimtTile's products
// too; MmaTile's products are exact (half types) or float32-accurate (3xTF32).
// Index math is 32-bit: use_small_path sends only problems whose every tensor has fewer
// than 2^31 elements here, and no offset below is formed for a row or column outside the
// problem (those are tested first), so none passes a tensor's size.
//
// This header holds only device code and its constants; lltm_cuda_small.cu launches it, and
// tests/test_lltm.py compiles it as host C++ to run the kernels on a CPU (no GPU needed).
#pragma once

#include <type_traits>

#include "common/dispatch.h"
#include "common/mma_tf32.h"
#include "common/pack.h"
#include "lltm/lltm.h"

namespace lltm::small {

using fused_ops::Pack;

// ---------------------------------------------------------------------------------------
// Tiles. Every kernel runs kThreads = 16 x 16 threads; thread t computes a micro-tile of
// TM consecutive rows ("m", from t / 16) by NSEG segments of TN consecutive columns
// ("n", from t % 16) of its block's output tile. TM is 4, except that the d_X role also
// comes with TM = 2 (half the batch rows per block, twice the blocks), which the host picks
// when the TM = 4 tiles would leave SMs idle. The forward kernel takes TM as a parameter
// too, but the host launches only TM = 4 (lltm_cuda_small.cu says why).
constexpr int kThreads = 256;
constexpr int kGroups = 16;
constexpr int kRowsPerThreadLarge = 4, kRowsPerThreadSmall = 2;  // the two values of TM

// Every reduction runs in chunks of CH (a kernel template parameter, kChunk by default):
// CH columns of X (forward), CH gate columns (d_X role) or CH batch rows (parameter role)
// are staged in shared memory, double-buffered, per step.
constexpr int kChunk = 16;
// Forward: fwd_rows<TM> batch rows x kFwdCols state columns (x 3 gates) per block, reducing
// over the S + F columns of X. Micro-tile TM rows x 3 gates x 2.
template <int TM>
constexpr int fwd_rows = kGroups * TM;
constexpr int kFwdCols = 32;
// Backward d_X role: dx_rows<TM> batch rows x kDxCols columns of X per block, reducing over
// the gate columns. Micro-tile TM x 4.
template <int TM>
constexpr int dx_rows = kGroups * TM;
constexpr int kDxCols = 64;
// Backward parameter role: kPN gate columns (3 segments of 32) x kPK columns of X per
// block, reducing over the batch rows. Micro-tile 4 columns of X x 3 x 2.
constexpr int kPSeg = 32, kPN = 3 * kPSeg, kPK = 64;

static_assert(kFwdCols == kGroups * 2, "forward micro-tile");
static_assert(kDxCols == kGroups * 4, "d_X micro-tile");
static_assert(kPK == kGroups * 4 && kPSeg == kGroups * 2, "parameter micro-tile");
static_assert(kPN <= kThreads, "one thread per d_bias entry of a tile");
// Staging of the tiles: whole loads per thread (checked in each kernel for its TM and CH).
template <int TM, int CH>
constexpr bool fwd_staging_ok = kThreads % CH == 0 && fwd_rows<TM> % (kThreads / CH) == 0 &&
                                3 * kFwdCols % (kThreads / CH) == 0;
template <int TM, int CH>
constexpr bool dx_staging_ok = kThreads % CH == 0 && dx_rows<TM> % (kThreads / CH) == 0 &&
                               CH % (kThreads / kDxCols) == 0;
template <int CH>
constexpr bool param_staging_ok = CH % (kThreads / kPK) == 0 && CH % (kThreads / kPSeg) == 0;

// A staged operand: a chunk's CH reduction steps k of M rows or columns m of a GEMM operand,
// in shared memory either k-first (element (k, m) at k * LD + m) or m-first (m * LD + k).
// SIMT tiles read vectors along m: k-first, LD a multiple of 4 (aligned vector reads); the
// operands that staging transposes get LD = M + 4, which spreads those stores over the banks
// (2-way conflicts at most). Tensor-core tiles read mma fragments, lanes (g, q) reading
// (m + g, k + q): conflict-free k-first with LD = 8 mod 32, m-first with LD = 4 mod 8. So for
// them the transposed operands (forward X and weights, d_X's d_gates) are staged m-first, as
// they lie in memory, with LD = CH + 4, and the others k-first with LD = M + 8.
template <int M, int CH, bool K_FIRST, int PAD>
struct Staged {
  static constexpr int LD = K_FIRST ? M + PAD : CH + PAD;
  static constexpr int SIZE = K_FIRST ? CH * LD : M * LD;
  static constexpr int SK = K_FIRST ? LD : 1, SM = K_FIRST ? 1 : LD;  // strides of k and m
  static constexpr bool kFirst = K_FIRST;
  __host__ __device__ static constexpr int at(int k, int m) { return k * SK + m * SM; }
  static_assert(LD % 4 == 0, "aligned vector reads");
};
// Staged by transposing (SIMT: k-first; tensor cores: m-first).
template <int M, int CH, bool TC>
using StagedT = std::conditional_t<TC, Staged<M, CH, false, 4>, Staged<M, CH, true, 4>>;
// Staged as in memory (k-first).
template <int M, int CH, bool TC>
using StagedK = Staged<M, CH, true, TC ? 8 : 0>;

template <bool TC, typename Op>
constexpr bool conflict_free() {
  return !TC || (Op::kFirst ? Op::LD % 32 == 8 : Op::LD % 8 == 4);
}

template <typename acc_t, int TM, int CH, bool TC>
struct alignas(32) ForwardSmem {
  using X = StagedT<fwd_rows<TM>, CH, TC>;   // X rows, m = batch row
  using W = StagedT<3 * kFwdCols, CH, TC>;   // weights rows, m = gate * kFwdCols + j
  static_assert(conflict_free<TC, X>() && conflict_free<TC, W>(), "fragment loads");
  acc_t x[2][X::SIZE];  // double-buffered
  acc_t w[2][W::SIZE];
};

template <typename acc_t, int TM, int CH, bool TC>
struct alignas(32) DxSmem {
  using Z = StagedT<dx_rows<TM>, CH, TC>;  // d_gates rows, m = batch row, k = gate column
  using W = StagedK<kDxCols, CH, TC>;       // weights rows, k = gate column, m = column of X
  static_assert(conflict_free<TC, Z>() && conflict_free<TC, W>(), "fragment loads");
  acc_t dz[2][Z::SIZE];
  acc_t w[2][W::SIZE];
};

template <typename acc_t, int CH, bool TC>
struct alignas(32) ParamSmem {
  using X = StagedK<kPK, CH, TC>;  // X rows, k = batch row, m = column of X
  using Z = StagedK<kPN, CH, TC>;  // d_gates rows, k = batch row, m = gate column
  static_assert(conflict_free<TC, X>() && conflict_free<TC, Z>(), "fragment loads");
  acc_t x[2][X::SIZE];
  acc_t dz[2][Z::SIZE];
};

template <typename acc_t, int TM, int CH, bool TC>
union BackwardSmem {
  DxSmem<acc_t, TM, CH, TC> dx;
  ParamSmem<acc_t, CH, TC> param;
};

// Static shared memory is at most 48 KiB a block (checked in each kernel); with the default
// chunks, the largest tiles (TM = 4, float64; tensor-core tiles are float) fit.
static_assert(sizeof(ForwardSmem<double, kRowsPerThreadLarge, kChunk, false>) <= 48 * 1024 &&
                  sizeof(BackwardSmem<double, kRowsPerThreadLarge, kChunk, false>) <= 48 * 1024,
              "static shared memory");

template <typename T>
__host__ __device__ constexpr T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

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

// A thread's share of its block's output tile (rows m: A's columns, columns n: B's), in
// registers: acc[i][s][c] is the element at row row(i), column col(s, c), where column
// segment s spans SEGW columns. multiply<R, OpA, OpB>(acc, A, B) adds one R-deep slab of the
// product, A and B in shared memory as Staged operands OpA and OpB.
//
// SimtTile: FMAs in acc_t, the 16 x 16 threads each a TM x (NSEG segments of TN) micro-tile.
template <int TM, int NSEG, int TN, int SEGW>
struct SimtTile {
  static constexpr int kRows = TM, kSegs = NSEG, kCols = TN;
  int m0, n0;
  __device__ __forceinline__ SimtTile()
      : m0(static_cast<int>(threadIdx.x) / kGroups * TM),
        n0(static_cast<int>(threadIdx.x) % kGroups * TN) {}
  __device__ __forceinline__ int row(int i) const { return m0 + i; }
  __device__ __forceinline__ int col(int s, int c) const { return s * SEGW + n0 + c; }
  template <int R, typename OpA, typename OpB, typename acc_t>
  __device__ __forceinline__ void multiply(acc_t (&acc)[TM][NSEG][TN], const acc_t* A,
                                           const acc_t* B) const {
    static_assert(OpA::kFirst && OpB::kFirst, "SIMT tiles read k-first operands");
    multiply_tile<R, OpA::LD, OpB::LD, SEGW>(acc, A, B, m0, n0);
  }
};

// MmaTile: tensor cores (fused_ops::mma_tf32, sm_80 and newer), float operands and sums, for
// a ROWS x COLS block tile (ROWS 32 or 64, COLS a multiple of 32). The 8 warps stand 2 x 4:
// warp (wm, wn) holds MT = ROWS / 32 MMA tiles of 16 rows, 16 * (MT * wm + mt) on, by
// NT = COLS / 32 tiles of 8 columns, 32 * nt + 8 * wn on: so its column segments are 32 wide
// (SEGW 32), like the SIMT forward and parameter tiles. SPLIT (float32): each product as 3
// MMAs (3xTF32, fused_ops::split_tf32); float16 and bfloat16 values are tf32 values as they
// are: one MMA. Each slab is summed in its own fragments (R / 8 MMA steps), then added to acc.
template <int ROWS, int COLS, bool SPLIT>
struct MmaTile {
  static constexpr int MT = ROWS / 32, NT = COLS / 32;
  static constexpr int kRows = 2 * MT, kSegs = NT, kCols = 2;
  static_assert((ROWS == 32 || ROWS == 64) && COLS % 32 == 0 && kThreads == 8 * 32,
                "tensor-core tile");
  int wm, wn, g, q;
  __device__ __forceinline__ MmaTile() {
    const int t = static_cast<int>(threadIdx.x), warp = t / 32, lane = t % 32;
    wm = warp / 4;
    wn = warp % 4;
    g = lane / 4;
    q = lane % 4;
  }
  // Fragment element e of MMA tile (mt, nt) is acc[2 * mt + e / 2][nt][e % 2].
  __device__ __forceinline__ int row(int i) const { return 16 * (MT * wm + i / 2) + 8 * (i % 2) + g; }
  __device__ __forceinline__ int col(int s, int c) const { return 32 * s + 8 * wn + 2 * q + c; }
  template <int R, typename OpA, typename OpB>
  __device__ __forceinline__ void multiply(float (&acc)[kRows][NT][2], const float* A,
                                           const float* B) const {
    static_assert(R % 8 == 0, "whole MMA steps");
    constexpr auto operand = fused_ops::tf32_operand<SPLIT>;
    float part[MT][NT][4] = {};
#pragma unroll
    for (int r = 0; r < R; r += 8) {
      const float* a = A + OpA::at(r + q, 16 * MT * wm + g);
      const float* b = B + OpB::at(r + q, 8 * wn + g);
      uint32_t ab[MT][4], as[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        operand(a[OpA::at(0, 16 * mt)], ab[mt][0], as[mt][0]);
        operand(a[OpA::at(0, 16 * mt + 8)], ab[mt][1], as[mt][1]);
        operand(a[OpA::at(4, 16 * mt)], ab[mt][2], as[mt][2]);
        operand(a[OpA::at(4, 16 * mt + 8)], ab[mt][3], as[mt][3]);
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        uint32_t bb[2], bs[2];
        operand(b[OpB::at(0, 32 * nt)], bb[0], bs[0]);
        operand(b[OpB::at(4, 32 * nt)], bb[1], bs[1]);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (SPLIT) {
            fused_ops::mma_tf32(part[mt][nt], ab[mt], bs);
            fused_ops::mma_tf32(part[mt][nt], as[mt], bb);
          }
          fused_ops::mma_tf32(part[mt][nt], ab[mt], bb);
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[2 * mt + e / 2][nt][e % 2] += part[mt][nt][e];
      }
    }
  }
};

// The tile of a kernel: MmaTile<ROWS, COLS> with TC (float staging, the host checks sm_80),
// else the SIMT tile given.
template <bool TC, typename scalar_t, int ROWS, int COLS, typename Simt>
using TileOf = std::conditional_t<TC, MmaTile<ROWS, COLS, std::is_same_v<scalar_t, float>>, Simt>;

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
