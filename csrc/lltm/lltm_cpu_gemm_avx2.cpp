// The LLTM cell's GEMMs for float16 and bfloat16 on an AVX2 CPU, reading the weights in their
// half type: gates = X W^T + b (forward), d_X = d_gates W and d_W = d_gates^T X, d_b (backward),
// all accumulated in float. ATen's half-type GEMMs convert inside and ran the cell 2x to 5x
// slower than float32 on the 2-core AMD EPYC (issue 27); converting W to float in a separate
// pass before a float GEMM (the previous path) still cost 1.3-1.5x float32's time at
// (16, 32, 128): one write and one read of the whole float copy per call, forward and backward,
// and d_W rounded in a pass of its own. Here W is converted where it is used (a block of its
// rows into an L1 buffer, or a vector at a time), and d_W is rounded as it is stored.
// The loop nests and register blocks are documented at each kernel. The forward here (dot
// products) runs below 13 batch rows; from there lltm_cpu_gemm_fwd_avx2.cpp's outer products.
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

inline float hsum(V v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The first min(left, 8) lanes of v at dst (none if left <= 0), rounded to the half type.
// Every loop over accumulators below is unrolled (pragma; constant trip counts, guards inside)
// so that each index is a compile-time constant: one the compiler cannot resolve keeps the
// whole accumulator array on the stack, stored at every step of the inner loop (seen in d_W:
// 2x slower).
template <typename E>
inline void store_first(typename E::T* dst, V v, int64_t left, E e) {
  if (left >= kLanes) {
    AllLanes().store(dst, v, e);
  } else if (left > 0) {
    Lanes(left).store(dst, v, e);
  }
}

// ---- forward: gates[b, n] = bias[n] + sum_k x[b, k] w[n, k] ----
// Dot products along k, the layout both operands have in memory. Per block of kGateRows rows of
// W: the rows converted to float into `scratch` (kGateRows x K8, zero-padded; 5 KiB at K = 160:
// it stays in L1 while every batch row passes over it), then kBatchRows x kGateRows vector
// accumulators per block of kBatchRows batch rows (12, plus 3 vectors of x and 1 of W: all 16
// registers), each reduced across its lanes once at the end. The batch rows go in chunks whose
// part of x (at most kChunkFloats: 256 KiB) stays in L2 while every block of W passes over it
// (without chunks x would be read from L3 once per block); each chunk converts W's blocks again
// (one conversion per element of W per chunk, against `chunk` multiply-adds).
constexpr int kGateRows = 4;
constexpr int kBatchRows = 3;
constexpr int64_t kChunkFloats = 65536;

// Batch rows [b0, b1) of gates_rows.
template <typename E>
void gates_rows_chunk(const typename E::T* w, const float* x, const float* bias, float* gates,
                      int64_t b0, int64_t b1, int64_t K, int64_t K8, int64_t N, int64_t n0,
                      int64_t n1, float* scratch) {
  const E e;
  for (int64_t n = n0; n < n1; n += kGateRows) {
    const int64_t rows = std::min<int64_t>(kGateRows, n1 - n);
    #pragma GCC unroll 8
    for (int64_t r = 0; r < kGateRows; ++r) {
      float* dst = scratch + r * K8;
      if (r >= rows) {
        std::fill(dst, dst + K8, 0.f);
        continue;
      }
      // A tail's masked load reads the missing lanes as 0: the padding is written as zeros.
      for_each_vector(K, [&](int64_t k, const auto& io) {
        _mm256_storeu_ps(dst + k, io.load(w + (n + r) * K + k, e));
      });
    }
    for (int64_t b = b0; b < b1; b += kBatchRows) {
      // Rows past b1 read row b1 - 1 again; the copies' sums are not stored.
      const float* xs[kBatchRows];
      #pragma GCC unroll 8
      for (int i = 0; i < kBatchRows; ++i) xs[i] = x + std::min(b + i, b1 - 1) * K8;
      V acc[kBatchRows][kGateRows];
      #pragma GCC unroll 8
      for (auto& row : acc) {
        #pragma GCC unroll 8
        for (V& a : row) a = _mm256_setzero_ps();
      }
      for (int64_t k = 0; k < K8; k += kLanes) {
        V xv[kBatchRows];
        #pragma GCC unroll 8
        for (int i = 0; i < kBatchRows; ++i) xv[i] = _mm256_loadu_ps(xs[i] + k);
        #pragma GCC unroll 8
        for (int r = 0; r < kGateRows; ++r) {
          const V wv = _mm256_loadu_ps(scratch + r * K8 + k);
          #pragma GCC unroll 8
          for (int i = 0; i < kBatchRows; ++i) acc[i][r] = fma(xv[i], wv, acc[i][r]);
        }
      }
      #pragma GCC unroll 8
      for (int i = 0; i < kBatchRows; ++i) {
        #pragma GCC unroll 8
        for (int r = 0; r < kGateRows; ++r) {
          if (b + i < b1 && r < rows) gates[(b + i) * N + n + r] = hsum(acc[i][r]) + bias[n + r];
        }
      }
    }
  }
}

template <typename E>
void gates_rows(const typename E::T* w, const float* x, const float* bias, float* gates,
                int64_t B, int64_t K, int64_t K8, int64_t N, int64_t n0, int64_t n1,
                float* scratch) {
  const int64_t chunk = std::max<int64_t>(kBatchRows, kChunkFloats / K8 / kBatchRows * kBatchRows);
  for (int64_t c0 = 0; c0 < B; c0 += chunk) {
    gates_rows_chunk<E>(w, x, bias, gates, c0, std::min(B, c0 + chunk), K, K8, N, n0, n1,
                        scratch);
  }
}

// ---- backward ----
// d_X[b, c] = sum_n d_gates[b, n] w[n, col0 + c] for the kTileCols columns c of one tile, in
// chunks of kChunkRows rows n: the chunk's piece of W (kChunkRows x 16) converted to float into
// `chunk` (4 KiB, L1), then for each block of kTileRows batch rows the partial sums of earlier
// chunks loaded from `sums` (B x 16 floats, the caller's), per n the chunk's two weight vectors
// times d_gates[b, n] broadcast (kTileRows x 2 accumulators), and stored back; the
// last chunk rounds them into out. Each element of W is converted once.
// (The tile and its rank-1 updates: lltm_cpu_gemm_tile.h; d_X's a[i] are d_gates' rows, its
// panel a chunk of W's tile; d_W's a[i] are d_gates' transposed columns, its panel a tile of x.)
using tile::kTileCols;
using tile::kTileRows;
using tile::rank1_updates;
constexpr int64_t kChunkRows = 64;
static_assert(kGateRows == kHalfGemmRows);
static_assert(d_x_half_scratch(0) == kChunkRows * kTileCols);

template <typename E, typename IO0, typename IO1>
void d_x_tile(const typename E::T* w, int64_t K, const float* d_gates, int64_t B, int64_t N,
              typename E::T* out, int64_t ld_out, const IO0& io0, const IO1& io1, float* sums,
              float* chunk) {
  const E e;
  for (int64_t n0 = 0; n0 < N; n0 += kChunkRows) {
    const int64_t rows_n = std::min<int64_t>(kChunkRows, N - n0);
    for (int64_t n = 0; n < rows_n; ++n) {
      const typename E::T* src = w + (n0 + n) * K;
      _mm256_storeu_ps(chunk + n * kTileCols, io0.load(src, e));
      _mm256_storeu_ps(chunk + n * kTileCols + kLanes, io1.load(src + kLanes, e));
    }
    const bool first = n0 == 0, last = n0 + rows_n == N;
    for (int64_t b = 0; b < B; b += kTileRows) {
      const int64_t rows = std::min<int64_t>(kTileRows, B - b);
      // A last partial block reads its last row again; the copies are not stored.
      const float* g[kTileRows];
      #pragma GCC unroll 8
      for (int i = 0; i < kTileRows; ++i) {
        g[i] = d_gates + (b + std::min<int64_t>(i, rows - 1)) * N + n0;
      }
      V acc[kTileRows][2];
      #pragma GCC unroll 8
      for (int i = 0; i < kTileRows; ++i) {
        const float* s = sums + (b + std::min<int64_t>(i, rows - 1)) * kTileCols;
        acc[i][0] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(s);
        acc[i][1] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(s + kLanes);
      }
      rank1_updates(acc, g, chunk, rows_n);
      #pragma GCC unroll 8
      for (int i = 0; i < kTileRows; ++i) {
        if (i >= rows) continue;
        if (last) {
          io0.store(out + (b + i) * ld_out, acc[i][0], e);
          io1.store(out + (b + i) * ld_out + kLanes, acc[i][1], e);
        } else {
          _mm256_storeu_ps(sums + (b + i) * kTileCols, acc[i][0]);
          _mm256_storeu_ps(sums + (b + i) * kTileCols + kLanes, acc[i][1]);
        }
      }
    }
  }
}

// Tile t of the `width` columns from col0: full tiles with unmasked vectors, the last one masked
// (a second vector with no lanes is neither read nor written: Lanes(0)).
template <typename E>
void d_x_columns(const typename E::T* w, int64_t K, int64_t col0, int64_t width,
                 const float* d_gates, int64_t B, int64_t N, typename E::T* out, int64_t t,
                 float* sums, float* chunk) {
  const int64_t c = t * kTileCols;
  const typename E::T* wt = w + col0 + c;
  if (c + kTileCols <= width) {
    return d_x_tile<E>(wt, K, d_gates, B, N, out + c, width, AllLanes(), AllLanes(), sums,
                       chunk);
  }
  const int64_t left = width - c;
  d_x_tile<E>(wt, K, d_gates, B, N, out + c, width, Lanes(std::min<int64_t>(left, kLanes)),
              Lanes(std::max<int64_t>(left - kLanes, 0)), sums, chunk);
}

// d_W[n, k] = sum_b d_gates[b, n] x[b, k] for rows n in [n0, n1): d_gates' columns n0..n1
// first transposed into g_t ((n1 - n0) x B), so that a block of kTileRows rows reads
// kTileRows contiguous streams; the column tiles of x (pitch K8, zero-padded) run outermost,
// each copied into x_t (B x 16 floats, contiguous) so that it stays in L1 while every row
// block passes over it (read in place, x's rows K8 floats apart fall into a few cache sets when
// K8 is a multiple of a large power of two: 1280 floats at (256, 256, 1024), 2.2x slower).
// Stored rounded to the half type. d_bias[n] = sum_b d_gates[b, n]. scratch: g_t, then x_t.
template <typename E>
void d_w_rows(const float* x, const float* d_gates, int64_t B, int64_t K, int64_t K8, int64_t N,
              int64_t n0, int64_t n1, typename E::T* d_w, typename E::T* d_bias,
              float* scratch) {
  const E e;
  const int64_t rows_n = n1 - n0;
  float* const g_t = scratch;
  float* const x_t = scratch + rows_n * B;
  // In 16 x 16 blocks: row by row, either side's stride (N or B floats, often a multiple of
  // 1024 bytes) would map every access of a pass to the same few cache sets.
  constexpr int64_t kBlock = 16;
  for (int64_t b1 = 0; b1 < B; b1 += kBlock) {
    for (int64_t m1 = 0; m1 < rows_n; m1 += kBlock) {
      for (int64_t b = b1; b < std::min(B, b1 + kBlock); ++b) {
        for (int64_t n = m1; n < std::min(rows_n, m1 + kBlock); ++n) {
          g_t[n * B + b] = d_gates[b * N + n0 + n];
        }
      }
    }
  }
  for (int64_t k = 0; d_w != nullptr && k < K; k += kTileCols) {
    const bool two = k + kLanes < K8;  // else the tile's second vector is past K8: zeros
    for (int64_t b = 0; b < B; ++b) {
      _mm256_storeu_ps(x_t + b * kTileCols, _mm256_loadu_ps(x + b * K8 + k));
      _mm256_storeu_ps(x_t + b * kTileCols + kLanes,
                       two ? _mm256_loadu_ps(x + b * K8 + k + kLanes) : _mm256_setzero_ps());
    }
    for (int64_t n = 0; n < rows_n; n += kTileRows) {
      const int64_t rows = std::min<int64_t>(kTileRows, rows_n - n);
      const float* g[kTileRows];
      #pragma GCC unroll 8
      for (int r = 0; r < kTileRows; ++r) g[r] = g_t + (n + std::min<int64_t>(r, rows - 1)) * B;
      V acc[kTileRows][2];
      #pragma GCC unroll 8
      for (auto& row : acc) row[0] = row[1] = _mm256_setzero_ps();
      rank1_updates(acc, g, x_t, B);
      #pragma GCC unroll 8
      for (int r = 0; r < kTileRows; ++r) {
        if (r < rows) {
          typename E::T* dst = d_w + (n0 + n + r) * K + k;
          store_first(dst, acc[r][0], K - k, e);
          store_first(dst + kLanes, acc[r][1], K - k - kLanes, e);
        }
      }
    }
  }
  if (d_bias == nullptr) return;
  for (int64_t n = 0; n < rows_n; ++n) {
    V sum = _mm256_setzero_ps();
    const float* row = g_t + n * B;
    for_each_vector(B, [&](int64_t b, const auto& io) { sum = add(sum, io.load(row + b)); });
    const float total = hsum(sum);
    Lanes(1).store(d_bias + n0 + n, splat(total), e);
  }
}

template <typename E>
using P = typename E::T*;
template <typename E>
using CP = const typename E::T*;

using tile::by_storage;

}  // namespace

void gates_dot_avx2(Storage storage, const void* w, const float* x, const float* bias,
                     float* gates, int64_t B, int64_t K, int64_t N, int64_t n0, int64_t n1,
                     float* scratch) {
  by_storage(storage, [&](auto e) {
    using E = decltype(e);
    gates_rows<E>(static_cast<CP<E>>(w), x, bias, gates, B, K, half_gemm_pitch(K), N, n0, n1,
                  scratch);
  });
}

void d_x_half_avx2(Storage storage, const void* w, int64_t K, int64_t col0, int64_t width,
                   const float* d_gates, int64_t B, int64_t N, void* out, int64_t t0, int64_t t1,
                   float* scratch) {
  by_storage(storage, [&](auto e) {
    using E = decltype(e);
    float* chunk = scratch + B * kTileCols;
    for (int64_t t = t0; t < t1; ++t) {
      d_x_columns<E>(static_cast<CP<E>>(w), K, col0, width, d_gates, B, N, static_cast<P<E>>(out),
                     t, scratch, chunk);
    }
  });
}

void d_w_half_avx2(Storage storage, const float* x, const float* d_gates, int64_t B, int64_t K,
                   int64_t N, int64_t n0, int64_t n1, void* d_w, void* d_bias, float* scratch) {
  by_storage(storage, [&](auto e) {
    using E = decltype(e);
    d_w_rows<E>(x, d_gates, B, K, half_gemm_pitch(K), N, n0, n1, static_cast<P<E>>(d_w),
                static_cast<P<E>>(d_bias), scratch);
  });
}

}  // namespace lltm

#else  // not x86-64 with GCC/Clang: lltm.cpp takes ATen's float GEMMs instead.

namespace lltm {
void gates_dot_avx2(Storage, const void*, const float*, const float*, float*, int64_t, int64_t,
                     int64_t, int64_t, int64_t, float*) {
  throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");
}
void d_x_half_avx2(Storage, const void*, int64_t, int64_t, int64_t, const float*, int64_t,
                   int64_t, void*, int64_t, int64_t, float*) {
  throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");
}
void d_w_half_avx2(Storage, const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                   int64_t, void*, void*, float*) {
  throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");
}
}  // namespace lltm

#endif
