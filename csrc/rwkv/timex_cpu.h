// RWKV TimeX on the CPU: the three products as one register-blocked tile, built twice from
// this header: by timex.cpp for any x86-64 (or other) CPU, and by timex_cpu_avx2.cpp for
// AVX2 + FMA (the *_avx2 entry points below; call them only where fused_ops::cpu_has_avx2()).
//
// Every product is, per row, a sum of shifted copies of a coefficient row p scaled by an
// input row x: a tile of TILE consecutive outputs i keeps TILE / V vector accumulators and
// adds p[i - n] * x[n] for each n in turn: one broadcast of x[n], TILE / V contiguous loads
// of p and as many fused multiply-adds per n. The coefficient rows are zero-padded by TILE
// on both sides, so the triangle's edge and a partial last tile need no special case:
//   out[t]    = eps + sum_{u <= t} W[t-u] k[u]    p = Wrev + t0      (Wrev[d] = W[d] = w[T-1-d])
//   grad_k[u] = sum_{t >= u} W[t-u] g[t]          p = Wfwd + T-1+u0  (Wfwd[j] = w[j])
//   G[s]      = sum_{t >= s} g[t] k[t-s]          p = Krev + T-1+s0  (Krev[m] = k[T-1-m])
// with grad_w[T-1-s] = sum over the batch of G[s]. Each output is summed over n in increasing
// order (and grad_w over the batch in order): the results do not depend on the threads.
//
// The vectors are 32 bytes (8 floats, 4 doubles) in both builds: AVX2 registers and fused
// multiply-adds (raw intrinsics: ATen's at::vec::Vectorized is not part of the stable ABI)
// where common/avx2_target.h was included first (FUSED_OPS_AVX2), else plain arrays with a
// separate multiply and add per lane (what ATen's generic Vectorized did, so both builds give
// the results they gave on it, bit for bit).
//
// The kernels live in an anonymous namespace on purpose: the two builds use different Vec
// types under the same names, and internal linkage keeps them apart.
#pragma once

#include <algorithm>
#include <cstdint>

namespace rwkv {

// Layout of the zero-padded coefficient rows: kPad zeros, the row's T elements, kPad zeros.
// kPad is the largest tile (TILE) of any build and element type.
constexpr int64_t kPad = 32;
inline int64_t padded_length(int64_t T) { return T + 2 * kPad; }
// The scratch buffer of grad_w_channels, in elements (enough for any build's tile): a
// zero-padded reversed k row, then one row of lag sums in whole tiles. The caller allocates
// it, zeroed, because code built for AVX2 keeps no standard containers (common/avx2_target.h).
inline int64_t grad_w_scratch_length(int64_t T) { return padded_length(T) + T + kPad; }

// AVX2 + FMA builds of the kernels below, for float and double (timex_cpu_avx2.cpp).
template <typename T>
void forward_rows_avx2(const T* w_rev, const T* k, T* out, T eps, int64_t C, int64_t len,
                       int64_t r0, int64_t r1);
template <typename T>
void grad_k_rows_avx2(const T* w_fwd, const T* g, T* grad_k, int64_t C, int64_t len, int64_t r0,
                      int64_t r1);
template <typename T>
void grad_w_channels_avx2(const T* g, const T* k, T* grad_w, int64_t B, int64_t C, int64_t len,
                          int64_t c0, int64_t c1, T* scratch);

namespace {  // NOLINT(build/namespaces_headers): see the note at the top

#if defined(FUSED_OPS_AVX2)

// One AVX2 register of T, with the few operations the tiles use.
template <typename T>
struct Vec;

template <>
struct Vec<float> {
  __m256 v;
  Vec() = default;
  Vec(__m256 r) : v(r) {}  // NOLINT(runtime/explicit): a register is a Vec
  explicit Vec(float x) : v(_mm256_set1_ps(x)) {}
  static constexpr int64_t size() { return 8; }
  static Vec loadu(const float* p) { return _mm256_loadu_ps(p); }
  // start, start + 1, ..., start + 7 (exact: the tiles' lane numbers are small integers).
  static Vec arange(float start) {
    return _mm256_setr_ps(start, start + 1, start + 2, start + 3, start + 4, start + 5,
                          start + 6, start + 7);
  }
  // b where mask's lane is all ones, else a (mask from a comparison below).
  static Vec blendv(Vec a, Vec b, Vec mask) { return _mm256_blendv_ps(a.v, b.v, mask.v); }
  Vec operator>=(Vec o) const { return _mm256_cmp_ps(v, o.v, _CMP_GE_OQ); }
  Vec operator<=(Vec o) const { return _mm256_cmp_ps(v, o.v, _CMP_LE_OQ); }
  Vec operator+(Vec o) const { return _mm256_add_ps(v, o.v); }
  void store(float* p) const { _mm256_storeu_ps(p, v); }
};

template <>
struct Vec<double> {
  __m256d v;
  Vec() = default;
  Vec(__m256d r) : v(r) {}  // NOLINT(runtime/explicit): a register is a Vec
  explicit Vec(double x) : v(_mm256_set1_pd(x)) {}
  static constexpr int64_t size() { return 4; }
  static Vec loadu(const double* p) { return _mm256_loadu_pd(p); }
  static Vec arange(double start) { return _mm256_setr_pd(start, start + 1, start + 2, start + 3); }
  static Vec blendv(Vec a, Vec b, Vec mask) { return _mm256_blendv_pd(a.v, b.v, mask.v); }
  Vec operator>=(Vec o) const { return _mm256_cmp_pd(v, o.v, _CMP_GE_OQ); }
  Vec operator<=(Vec o) const { return _mm256_cmp_pd(v, o.v, _CMP_LE_OQ); }
  Vec operator+(Vec o) const { return _mm256_add_pd(v, o.v); }
  void store(double* p) const { _mm256_storeu_pd(p, v); }
};

// a * b + c, rounded once.
inline Vec<float> fmadd(Vec<float> a, Vec<float> b, Vec<float> c) {
  return _mm256_fmadd_ps(a.v, b.v, c.v);
}
inline Vec<double> fmadd(Vec<double> a, Vec<double> b, Vec<double> c) {
  return _mm256_fmadd_pd(a.v, b.v, c.v);
}

constexpr int kTileVecs = 4;  // accumulators per tile: TILE = 4 vectors of outputs

// A tile of TILE output sums in kTileVecs registers.
template <typename T>
struct Tile {
  static constexpr int64_t V = Vec<T>::size();
  static constexpr int64_t kSize = kTileVecs * V;
  Vec<T> acc[kTileVecs];

  void zero() {
    for (int v = 0; v < kTileVecs; ++v) acc[v] = Vec<T>(T(0));
  }
  void load(const T* src) {
    for (int v = 0; v < kTileVecs; ++v) acc[v] = Vec<T>::loadu(src + v * V);
  }
  void store(T* dst) const {
    for (int v = 0; v < kTileVecs; ++v) acc[v].store(dst + v * V);
  }
  // dst[i] = sum i + add for i < count (count <= TILE).
  void store_first(T add, T* dst, int64_t count) const {
    for (int v = 0; v < kTileVecs && v * V < count; ++v) {
      const Vec<T> out = acc[v] + Vec<T>(add);
      if (count - v * V >= V) {
        out.store(dst + v * V);
      } else {
        alignas(32) T lanes[V];
        out.store(lanes);
        for (int64_t l = 0; l < count - v * V; ++l) dst[v * V + l] = lanes[l];
      }
    }
  }
  // sum i += q[i] * xn for every i.
  void fma(const T* q, T x) {
    const Vec<T> xn(x);
    for (int v = 0; v < kTileVecs; ++v) acc[v] = fmadd(Vec<T>::loadu(q + v * V), xn, acc[v]);
  }
  // sum i += q[i] * xn for i >= j (from_diagonal) or i <= j; the other sums stay as they are.
  void fma_where(const T* q, T x, int64_t j_index, bool from_diagonal) {
    const Vec<T> xn(x), j(static_cast<T>(j_index));
    for (int v = 0; v < kTileVecs; ++v) {
      const Vec<T> i = Vec<T>::arange(static_cast<T>(v * V));
      const Vec<T> sum = fmadd(Vec<T>::loadu(q + v * V), xn, acc[v]);
      acc[v] = Vec<T>::blendv(acc[v], sum, from_diagonal ? (i >= j) : (i <= j));
    }
  }
};

#else

// The same tile as plain arrays of 32-byte vectors' worth of lanes (8 floats, 4 doubles, as
// ATen's generic Vectorized had), with a multiply and an add per term, each rounded (the
// baseline x86-64 has no FMA). Loops over the whole tile: the compiler vectorises them with
// the baseline's SSE2 and keeps the sums in memory (a struct per vector got split into
// scalars and ran at half the speed).
template <typename T>
struct Tile {
  static constexpr int64_t kSize = 4 * 32 / static_cast<int64_t>(sizeof(T));
  T acc[kSize];

  void zero() {
    for (int64_t i = 0; i < kSize; ++i) acc[i] = T(0);
  }
  void load(const T* src) {
    for (int64_t i = 0; i < kSize; ++i) acc[i] = src[i];
  }
  void store(T* dst) const {
    for (int64_t i = 0; i < kSize; ++i) dst[i] = acc[i];
  }
  void store_first(T add, T* dst, int64_t count) const {
    for (int64_t i = 0; i < std::min(kSize, count); ++i) dst[i] = acc[i] + add;
  }
  void fma(const T* q, T x) {
    for (int64_t i = 0; i < kSize; ++i) acc[i] = q[i] * x + acc[i];
  }
  void fma_where(const T* q, T x, int64_t j, bool from_diagonal) {
    for (int64_t i = 0; i < kSize; ++i) {
      if (from_diagonal ? i >= j : i <= j) acc[i] = q[i] * x + acc[i];
    }
  }
};

#endif

template <typename T>
constexpr int64_t kTile = Tile<T>::kSize;
static_assert(kTile<float> <= kPad && kTile<double> <= kPad, "padding narrower than a tile");

// acc[i] += p[i - n] * x[n] for n in [n0, n1), i in [0, TILE), n in increasing order.
template <typename T>
inline void tile_sum(const T* p, const T* x, int64_t n0, int64_t n1, Tile<T>& acc) {
  for (int64_t n = n0; n < n1; ++n) acc.fma(p - n, x[n]);
}

// tile_sum for the n at the triangle's edge, where only some outputs of the tile take
// x[n]: i >= n - base (from_diagonal, the causal product) or i <= n - base (the others).
// The rest keep their sums as they are: multiplying them by the padding's zeros instead
// would turn an inf in x into NaN where the product has no such term.
template <typename T>
inline void tile_sum_edge(const T* p, const T* x, int64_t n0, int64_t n1, int64_t base,
                          bool from_diagonal, Tile<T>& acc) {
  for (int64_t n = n0; n < n1; ++n) acc.fma_where(p - n, x[n], n - base, from_diagonal);
}

// out rows [r0, r1) of the (B*C, len) rows; w_rev: per channel, padded, Wrev (see the top).
template <typename T>
void forward_rows(const T* w_rev, const T* k, T* out, T eps, int64_t C, int64_t len, int64_t r0,
                  int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* p = w_rev + (r % C) * padded_length(len) + kPad;
    for (int64_t t0 = 0; t0 < len; t0 += kTile<T>) {
      Tile<T> acc;
      acc.zero();
      // Input n reaches outputs t0 + i >= n: all of the tile up to n = t0, then fewer.
      const int64_t end = std::min(t0 + kTile<T>, len);
      tile_sum(p + t0, k + r * len, 0, t0 + 1, acc);
      tile_sum_edge(p + t0, k + r * len, t0 + 1, end, t0, true, acc);
      acc.store_first(eps, out + r * len + t0, len - t0);
    }
  }
}

// grad_k rows [r0, r1); w_fwd: per channel, padded, w itself.
template <typename T>
void grad_k_rows(const T* w_fwd, const T* g, T* grad_k, int64_t C, int64_t len, int64_t r0,
                 int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* p = w_fwd + (r % C) * padded_length(len) + kPad + len - 1;
    for (int64_t u0 = 0; u0 < len; u0 += kTile<T>) {
      Tile<T> acc;
      acc.zero();
      // Input n reaches outputs u0 + i <= n: some of the tile up to n = u0 + TILE - 1.
      const int64_t edge = std::min(u0 + kTile<T> - 1, len);
      tile_sum_edge(p + u0, g + r * len, u0, edge, u0, false, acc);
      tile_sum(p + u0, g + r * len, edge, len, acc);
      acc.store_first(T(0), grad_k + r * len + u0, len - u0);
    }
  }
}

// grad_w rows [c0, c1) of (C, len), each summed over the batch in order. scratch:
// grad_w_scratch_length(len) elements, zero on entry.
template <typename T>
void grad_w_channels(const T* g, const T* k, T* grad_w, int64_t B, int64_t C, int64_t len,
                     int64_t c0, int64_t c1, T* scratch) {
  // Lag sums in whole tiles (the lags past len are computed and dropped).
  const int64_t lags = (len + kTile<T> - 1) / kTile<T> * kTile<T>;
  T* const kr = scratch + kPad;  // the reversed k row, kPad zeros on either side
  T* const lag_sum = scratch + padded_length(len);
  for (int64_t c = c0; c < c1; ++c) {
    for (int64_t s = 0; s < lags; ++s) lag_sum[s] = T(0);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t row = (b * C + c) * len;
      for (int64_t m = 0; m < len; ++m) kr[m] = k[row + len - 1 - m];
      for (int64_t s0 = 0; s0 < len; s0 += kTile<T>) {
        Tile<T> acc;
        acc.load(lag_sum + s0);
        // Time t reaches lags s0 + i <= t: some of the tile up to t = s0 + TILE - 1.
        const int64_t edge = std::min(s0 + kTile<T> - 1, len);
        tile_sum_edge(kr + len - 1 + s0, g + row, s0, edge, s0, false, acc);
        tile_sum(kr + len - 1 + s0, g + row, edge, len, acc);
        acc.store(lag_sum + s0);
      }
    }
    for (int64_t s = 0; s < len; ++s) grad_w[c * len + len - 1 - s] = lag_sum[s];
  }
}

}  // namespace
}  // namespace rwkv
