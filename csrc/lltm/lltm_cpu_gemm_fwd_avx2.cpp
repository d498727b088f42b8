// The LLTM cell's forward GEMM for float16 and bfloat16 on an AVX2 CPU from 13 batch rows:
// gates (B, N) = X W^T + bias, accumulated in float, W (N x K, N = 3S, K = S + F) read in its
// half type. Outer products on a register tile (lltm_cpu_gemm_tile.h), the decomposition a
// float BLAS uses, with W's conversion to float in the place of BLAS's packing:
// - X is converted and transposed once per call into batch panels (pack_x_avx2: per panel of
//   16 batch rows, K x 16 floats, k-major), the tile's vector operand;
// - W's rows are the broadcast operand: each block of gate_block_rows(K) whole rows is
//   converted to float (W's own layout, no transposition) into a buffer that stays in L2, each
//   element of W once per call;
// - per k, the tile loads two vectors of a batch panel, broadcasts 6 of W's rows and runs 12
//   FMAs, with no horizontal sums; the bias is the accumulators' start;
// - the tile holds gates transposed (6 gate columns x 16 batch rows): stored through 8 x 8
//   register transposes, once per tile and call, against 12 K FMAs.
// The dot-product kernel (lltm_cpu_gemm_avx2.cpp: 4 rows of W x 3 batch rows, a horizontal
// sum per output) ran the forward at 1.04-1.09x float32's (MKL's) time at (64, 128, 256) on
// the 2-core AMD EPYC (issue 27); it stays for fewer batch rows, where a 16-row panel is
// mostly padding (lltm_cpu_half.cpp, kPackedMinBatch).
// See common/avx2_target.h for how this file alone gets AVX2; lltm_cpu_half.cpp calls it only
// where fused_ops::cpu_has_avx2().
#include "common/avx2_target.h"

#include <stdexcept>

#include "lltm/lltm_cpu_avx2.h"

#ifdef FUSED_OPS_AVX2

#include <algorithm>

#include "lltm/lltm_cpu_gemm_tile.h"
#include "lltm/lltm_cpu_vec.h"

namespace lltm {
namespace {

using namespace vec;  // NOLINT(build/namespaces): this file's vocabulary
using tile::kTileCols;
using tile::kTileRows;

static_assert(kGatePanel == kTileCols);
// k is split into blocks of at most kKBlock (as even as multiples of 8 allow): a panel's block
// (kKBlock x 16 floats, 16 KiB) and the 6 rows of W that a tile broadcasts (6 KiB) stay in the
// 32 KiB L1 while the tile runs.
constexpr int64_t kKBlock = 256;

// r[j] <- (r[0][j], ..., r[7][j]): the 8 x 8 transpose of the rows r.
inline void transpose8(V (&r)[8]) {
  const V t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const V t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const V t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const V t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const V s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const V s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const V s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const V s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// Panel p of X (B x K, the half type) as K x 16 floats at xt + p K 16: by 8 x 8 blocks, each
// 8 rows' 8 values of k converted then transposed. Rows past B are zeros (the tiles compute
// them and never store them); a last block of k past K is not written.
template <typename E>
void pack_x_panel(const typename E::T* X, int64_t B, int64_t K, int64_t p, float* xt) {
  const E e;
  float* const out = xt + p * K * kGatePanel;
  for_each_vector(K, [&](int64_t k, const auto& io) {
    const int64_t count = std::min<int64_t>(kLanes, K - k);
    #pragma GCC unroll 2
    for (int64_t h = 0; h < 2; ++h) {
      V r[8];
      #pragma GCC unroll 8
      for (int64_t l = 0; l < 8; ++l) {
        const int64_t b = p * kGatePanel + h * kLanes + l;
        r[l] = b < B ? io.load(X + b * K + k, e) : _mm256_setzero_ps();
      }
      transpose8(r);
      #pragma GCC unroll 8
      for (int64_t j = 0; j < 8; ++j) {
        if (j < count) _mm256_storeu_ps(out + (k + j) * kGatePanel + h * kLanes, r[j]);
      }
    }
  });
}

// A finished tile: acc[i][v] lane l is gates[b0 + 8 v + l, n + i] (bias included). Rows
// i < live and batch rows below B are stored. A full tile goes through two 8 x 8 transposes
// (rows 6 and 7 zeros), each batch row's 6 values stored as 4 + 2.
inline void store_tile(const V (&acc)[kTileRows][2], float* gates, int64_t B, int64_t N,
                       int64_t n, int64_t live, int64_t b0) {
  static_assert(kTileRows == 6);
  if (live == kTileRows && b0 + kTileCols <= B) {
    #pragma GCC unroll 2
    for (int v = 0; v < 2; ++v) {
      V r[8] = {acc[0][v], acc[1][v], acc[2][v], acc[3][v], acc[4][v], acc[5][v],
                _mm256_setzero_ps(), _mm256_setzero_ps()};
      transpose8(r);
      #pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        float* dst = gates + (b0 + v * kLanes + j) * N + n;
        _mm_storeu_ps(dst, _mm256_castps256_ps128(r[j]));
        _mm_storel_pi(reinterpret_cast<__m64*>(dst + 4), _mm256_extractf128_ps(r[j], 1));
      }
    }
    return;
  }
  alignas(32) float t[kTileRows][kTileCols];
  #pragma GCC unroll 8
  for (int i = 0; i < kTileRows; ++i) {
    _mm256_store_ps(t[i], acc[i][0]);
    _mm256_store_ps(t[i] + kLanes, acc[i][1]);
  }
  for (int64_t b = 0; b < std::min<int64_t>(kTileCols, B - b0); ++b) {
    for (int64_t i = 0; i < live; ++i) gates[(b0 + b) * N + n + i] = t[i][b];
  }
}

// gates[b, n] for rows n in [n0, n0 + rows) (rows <= gate_block_rows(K)) and the batch rows
// of panels [p0, p1). The rows of W converted into wf first; then per block of k, per panel
// (its k-block in L1), every 6-row tile of the block. A tile starts from the bias (first
// k-block) or from its partial sums in `part` (rows x (p1 - p0) 16 floats), which it stores
// back, except after the last k-block, where it stores into gates. A last tile with fewer
// than 6 rows broadcasts its last row again and does not store the copies.
template <typename E>
void gates_block(const typename E::T* w, const float* xt, const float* bias, float* gates,
                 int64_t B, int64_t K, int64_t N, int64_t n0, int64_t rows, int64_t p0,
                 int64_t p1, float* wf, float* part) {
  const E e;
  const int64_t pitch = gate_row_pitch(K);
  // Whole rows, each read front to back (pieces of many rows at once, one k-block each,
  // defeat the prefetchers: W comes from L3 or memory).
  for (int64_t r = 0; r < rows; ++r) {
    const typename E::T* src = w + (n0 + r) * K;
    float* dst = wf + r * pitch;
    // A tail's masked load reads the missing lanes as 0: written within the pitch, never read.
    for_each_vector(K, [&](int64_t k, const auto& io) {
      _mm256_storeu_ps(dst + k, io.load(src + k, e));
    });
  }
  const int64_t k_blocks = (K + kKBlock - 1) / kKBlock;
  const int64_t kc_max = ((K + k_blocks - 1) / k_blocks + kLanes - 1) / kLanes * kLanes;
  const int64_t part_pitch = (p1 - p0) * kTileCols;
  for (int64_t k0 = 0; k0 < K; k0 += kc_max) {
    const int64_t kc = std::min(kc_max, K - k0);
    const bool first = k0 == 0, last = k0 + kc == K;
    for (int64_t p = p0; p < p1; ++p) {
      const float* panel = xt + (p * K + k0) * kTileCols;
      float* part_p = part + (p - p0) * kTileCols;
      for (int64_t g = 0; g < rows; g += kTileRows) {
        const int64_t live = std::min<int64_t>(kTileRows, rows - g);
        const float* a[kTileRows];
        V acc[kTileRows][2];
        #pragma GCC unroll 8
        for (int i = 0; i < kTileRows; ++i) {
          const int64_t r = g + std::min<int64_t>(i, live - 1);
          a[i] = wf + r * pitch + k0;
          if (first) {
            acc[i][0] = acc[i][1] = splat(bias[n0 + r]);
          } else {
            acc[i][0] = _mm256_loadu_ps(part_p + r * part_pitch);
            acc[i][1] = _mm256_loadu_ps(part_p + r * part_pitch + kLanes);
          }
        }
        tile::rank1_updates(acc, a, panel, kc);
        if (last) {
          store_tile(acc, gates, B, N, n0 + g, live, p * kTileCols);
          continue;
        }
        #pragma GCC unroll 8
        for (int i = 0; i < kTileRows; ++i) {
          if (i < live) {
            _mm256_storeu_ps(part_p + (g + i) * part_pitch, acc[i][0]);
            _mm256_storeu_ps(part_p + (g + i) * part_pitch + kLanes, acc[i][1]);
          }
        }
      }
    }
  }
}

using tile::by_storage;

}  // namespace

void pack_x_avx2(Storage storage, const void* X, int64_t B, int64_t K, int64_t p0, int64_t p1,
                 float* xt) {
  by_storage(storage, [&](auto e) {
    using E = decltype(e);
    for (int64_t p = p0; p < p1; ++p) {
      pack_x_panel<E>(static_cast<const typename E::T*>(X), B, K, p, xt);
    }
  });
}

void gates_packed_avx2(Storage storage, const void* w, const float* xt, const float* bias,
                       float* gates, int64_t B, int64_t K, int64_t N, int64_t n0, int64_t n1,
                       int64_t p0, int64_t p1, float* scratch) {
  by_storage(storage, [&](auto e) {
    using E = decltype(e);
    const int64_t block = gate_block_rows(K);
    float* const wf = scratch;
    float* const part = scratch + block * gate_row_pitch(K);
    for (int64_t n = n0; n < n1; n += block) {
      gates_block<E>(static_cast<const typename E::T*>(w), xt, bias, gates, B, K, N, n,
                     std::min(block, n1 - n), p0, p1, wf, part);
    }
  });
}

}  // namespace lltm

#else  // not x86-64 with GCC/Clang: lltm_cpu_half.cpp takes ATen's float GEMMs instead.

namespace lltm {
void pack_x_avx2(Storage, const void*, int64_t, int64_t, int64_t, int64_t, float*) {
  throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");
}
void gates_packed_avx2(Storage, const void*, const float*, const float*, float*, int64_t,
                       int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float*) {
  throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");
}
}  // namespace lltm

#endif
