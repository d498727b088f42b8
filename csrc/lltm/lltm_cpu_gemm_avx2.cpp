// The LLTM cell's GEMMs for float16 and bfloat16 on an AVX2 CPU, reading the weights in their
// half type: gates = X W^T + b (forward), d_X = d_gates W and d_W = d_gates^T X, d_b (backward),
// all accumulated in float. ATen's half-type GEMMs convert inside and ran the cell 2x to 5x
// slower than float32 on the 2-core AMD EPYC (issue 27); converting W to float in a separate
// pass before a float GEMM (the previous path) still cost 1.3-1.5x float32's time at
// (16, 32, 128): one write and one read of the whole float copy per call, forward and backward,
// and d_W rounded in a pass of its own. Here W is converted where it is used (a block of its
// rows into an L1 buffer, or a vector at a time), and d_W is rounded as it is stored.
// The loop nests and register blocks are documented at each kernel. See common/avx2_target.h
// for how this file alone gets AVX2; lltm.cpp calls it only where fused_ops::cpu_has_avx2().
#include "common/avx2_target.h"

#include <stdexcept>

#include "lltm/lltm_cpu_avx2.h"

#ifdef FUSED_OPS_AVX2

#include <algorithm>

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

// ---- forward: gates[b, n] = bias[n] + sum_k x[b, k] w[n, k] ----
// Dot products along k, the layout both operands have in memory. Per block of kGateRows rows of
// W: the rows converted to float into `scratch` (kGateRows x K8, zero-padded; 5 KiB at K = 160:
// it stays in L1 while every batch row passes over it), then kBatchRows x kGateRows vector
// accumulators per pair of batch rows (8 + 4 weight vectors + 1 of x: 13 of 16 registers), each
// reduced across its lanes once at the end.
constexpr int kGateRows = 4;
constexpr int kBatchRows = 2;

template <typename E>
void gates_rows(const typename E::T* w, const float* x, const float* bias, float* gates,
                int64_t B, int64_t K, int64_t K8, int64_t N, int64_t n0, int64_t n1,
                float* scratch) {
  const E e;
  for (int64_t n = n0; n < n1; n += kGateRows) {
    const int64_t rows = std::min<int64_t>(kGateRows, n1 - n);
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
    for (int64_t b = 0; b < B; b += kBatchRows) {
      // A last odd row reads row b twice; the copy's sums are not stored.
      const float* x0 = x + b * K8;
      const float* x1 = b + 1 < B ? x0 + K8 : x0;
      V acc[kBatchRows][kGateRows];
      for (auto& row : acc) {
        for (V& a : row) a = _mm256_setzero_ps();
      }
      for (int64_t k = 0; k < K8; k += kLanes) {
        const V xv0 = _mm256_loadu_ps(x0 + k), xv1 = _mm256_loadu_ps(x1 + k);
        for (int r = 0; r < kGateRows; ++r) {
          const V wv = _mm256_loadu_ps(scratch + r * K8 + k);
          acc[0][r] = fma(xv0, wv, acc[0][r]);
          acc[1][r] = fma(xv1, wv, acc[1][r]);
        }
      }
      for (int i = 0; i < kBatchRows && b + i < B; ++i) {
        for (int64_t r = 0; r < rows; ++r) {
          gates[(b + i) * N + n + r] = hsum(acc[i][r]) + bias[n + r];
        }
      }
    }
  }
}

// ---- backward ----
// d_X[b, c] = sum_n d_gates[b, n] w[n, col0 + c] for c in one tile of kTileCols columns: for
// every n, the tile's two weight vectors (converted as loaded) times d_gates[b, n] broadcast,
// into kTileRows x 2 accumulators (8 registers). The batch blocks run inside the tile so that
// the tile's column of W (N x 16 values) is read from L1 after its first pass.
constexpr int kTileRows = 4;
constexpr int64_t kTileCols = 2 * kLanes;
static_assert(kTileCols == kHalfGemmTileCols && kGateRows == kHalfGemmRows);

template <typename E, typename IO0, typename IO1>
void d_x_tile(const typename E::T* w, int64_t K, const float* d_gates, int64_t B, int64_t N,
              typename E::T* out, int64_t ld_out, const IO0& io0, const IO1& io1) {
  const E e;
  for (int64_t b = 0; b < B; b += kTileRows) {
    const int64_t rows = std::min<int64_t>(kTileRows, B - b);
    const float* g[kTileRows];
    for (int i = 0; i < kTileRows; ++i) g[i] = d_gates + (b + std::min<int64_t>(i, rows - 1)) * N;
    V acc[kTileRows][2];
    for (auto& row : acc) row[0] = row[1] = _mm256_setzero_ps();
    for (int64_t n = 0; n < N; ++n) {
      const V w0 = io0.load(w + n * K, e), w1 = io1.load(w + n * K + kLanes, e);
      for (int i = 0; i < kTileRows; ++i) {
        const V gv = _mm256_broadcast_ss(g[i] + n);
        acc[i][0] = fma(gv, w0, acc[i][0]);
        acc[i][1] = fma(gv, w1, acc[i][1]);
      }
    }
    for (int64_t i = 0; i < rows; ++i) {
      io0.store(out + (b + i) * ld_out, acc[i][0], e);
      io1.store(out + (b + i) * ld_out + kLanes, acc[i][1], e);
    }
  }
}

// Tile t of the `width` columns from col0: full tiles with unmasked vectors, the last one masked
// (a second vector with no lanes is neither read nor written: Lanes(0)).
template <typename E>
void d_x_columns(const typename E::T* w, int64_t K, int64_t col0, int64_t width,
                 const float* d_gates, int64_t B, int64_t N, typename E::T* out, int64_t t) {
  const int64_t c = t * kTileCols;
  const typename E::T* wt = w + col0 + c;
  if (c + kTileCols <= width) {
    return d_x_tile<E>(wt, K, d_gates, B, N, out + c, width, AllLanes(), AllLanes());
  }
  const int64_t left = width - c;
  d_x_tile<E>(wt, K, d_gates, B, N, out + c, width, Lanes(std::min<int64_t>(left, kLanes)),
              Lanes(std::max<int64_t>(left - kLanes, 0)));
}

// d_W[n, k] = sum_b d_gates[b, n] x[b, k] for kTileRows rows n and 16 columns k a tile (x in
// float, pitch K8, zero-padded: full vectors always readable), stored rounded to the half type;
// d_bias[n] = sum_b d_gates[b, n] over the same rows, 8 at a time.
template <typename E>
void d_w_rows(const float* x, const float* d_gates, int64_t B, int64_t K, int64_t K8, int64_t N,
              int64_t n0, int64_t n1, typename E::T* d_w, typename E::T* d_bias) {
  const E e;
  for (int64_t n = n0; d_w != nullptr && n < n1; n += kTileRows) {
    const int64_t rows = std::min<int64_t>(kTileRows, n1 - n);
    for (int64_t k = 0; k < K; k += kTileCols) {
      V acc[kTileRows][2];
      for (auto& row : acc) row[0] = row[1] = _mm256_setzero_ps();
      for (int64_t b = 0; b < B; ++b) {
        const V x0 = _mm256_loadu_ps(x + b * K8 + k);
        const V x1 = k + kLanes < K8 ? _mm256_loadu_ps(x + b * K8 + k + kLanes) : x0;
        const float* g = d_gates + b * N + n;
        for (int64_t r = 0; r < kTileRows; ++r) {
          const V gv = _mm256_broadcast_ss(g + std::min<int64_t>(r, rows - 1));
          acc[r][0] = fma(gv, x0, acc[r][0]);
          acc[r][1] = fma(gv, x1, acc[r][1]);
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        typename E::T* dst = d_w + (n + r) * K + k;
        for (int v = 0; v < 2; ++v) {
          const int64_t left = K - k - v * kLanes;
          if (left >= kLanes) {
            AllLanes().store(dst + v * kLanes, acc[r][v], e);
          } else if (left > 0) {
            Lanes(left).store(dst + v * kLanes, acc[r][v], e);
          }
        }
      }
    }
  }
  if (d_bias == nullptr) return;
  for_each_vector(n1 - n0, [&](int64_t j, const auto& io) {
    V sum = _mm256_setzero_ps();
    for (int64_t b = 0; b < B; ++b) sum = add(sum, io.load(d_gates + b * N + n0 + j));
    io.store(d_bias + n0 + j, sum, e);
  });
}

template <typename E>
using P = typename E::T*;
template <typename E>
using CP = const typename E::T*;

template <typename Run>
void by_storage(Storage storage, const Run& run) {
  switch (storage) {
    case Storage::Half: return run(F16());
    case Storage::BFloat16: return run(BF16());
    case Storage::Float: break;
  }
  throw std::invalid_argument("lltm: the half-type GEMMs take float16 or bfloat16");
}

}  // namespace

void gates_half_avx2(Storage storage, const void* w, const float* x, const float* bias,
                     float* gates, int64_t B, int64_t K, int64_t N, int64_t n0, int64_t n1,
                     float* scratch) {
  by_storage(storage, [&](auto e) {
    using E = decltype(e);
    gates_rows<E>(static_cast<CP<E>>(w), x, bias, gates, B, K, half_gemm_pitch(K), N, n0, n1,
                  scratch);
  });
}

void d_x_half_avx2(Storage storage, const void* w, int64_t K, int64_t col0, int64_t width,
                   const float* d_gates, int64_t B, int64_t N, void* out, int64_t t0,
                   int64_t t1) {
  by_storage(storage, [&](auto e) {
    using E = decltype(e);
    for (int64_t t = t0; t < t1; ++t) {
      d_x_columns<E>(static_cast<CP<E>>(w), K, col0, width, d_gates, B, N, static_cast<P<E>>(out),
                     t);
    }
  });
}

void d_w_half_avx2(Storage storage, const float* x, const float* d_gates, int64_t B, int64_t K,
                   int64_t N, int64_t n0, int64_t n1, void* d_w, void* d_bias) {
  by_storage(storage, [&](auto e) {
    using E = decltype(e);
    d_w_rows<E>(x, d_gates, B, K, half_gemm_pitch(K), N, n0, n1, static_cast<P<E>>(d_w),
                static_cast<P<E>>(d_bias));
  });
}

}  // namespace lltm

#else  // not x86-64 with GCC/Clang: lltm.cpp takes ATen's float GEMMs instead.

namespace lltm {
void gates_half_avx2(Storage, const void*, const float*, const float*, float*, int64_t, int64_t,
                     int64_t, int64_t, int64_t, float*) {
  throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");
}
void d_x_half_avx2(Storage, const void*, int64_t, int64_t, int64_t, const float*, int64_t,
                   int64_t, void*, int64_t, int64_t) {
  throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");
}
void d_w_half_avx2(Storage, const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                   int64_t, void*, void*) {
  throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");
}
}  // namespace lltm

#endif
