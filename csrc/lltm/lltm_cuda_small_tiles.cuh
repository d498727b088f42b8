// LLTM cell, the small-problem CUDA kernels (lltm_cuda_small.cuh has the plan): their constants,
// staging layouts, shared-memory plans and the two register tiles (SimtTile, MmaTile).
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

}  // namespace lltm::small
