// RWKV TimeX on tensor cores (timex_fft_tc.cuh): a row pair from global memory into the
// planes and its scaling, the block's largest magnitude, and the inverse transform's output
// to global memory (a row pair: out and grad_k; one real row reversed: grad_w).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "rwkv/timex_fft_tc_common.cuh"
#include "rwkv/timex_fft_tc_outer.cuh"
#include "rwkv/timex_fft_tc_outer_mma.cuh"

namespace rwkv {
namespace fft_tc {

// The largest of every thread's v[j], for each j < K, in every thread; slots: K TH / 32 floats
// of shared memory that no other call uses until every thread has returned (the caller's next
// barrier).
template <int N, int TH = threads(N), int K>
TIMEX_FFT_DEVICE void block_max_n(float (&v)[K], float* slots) {
  const int tid = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int j = 0; j < K; ++j) {
    for (int m = 16; m > 0; m /= 2) v[j] = std::fmax(v[j], __shfl_xor_sync(0xffffffffu, v[j], m));
  }
  if (tid % 32 == 0) {
    for (int j = 0; j < K; ++j) slots[K * (tid / 32) + j] = v[j];
  }
  TIMEX_FFT_SYNC();
  for (int w = 0; w < TH / 32; ++w) {
    for (int j = 0; j < K; ++j) v[j] = std::fmax(v[j], slots[K * w + j]);
  }
}
template <int N, int TH = threads(N)>
TIMEX_FFT_DEVICE float block_max(float v, float* slots) {
  float a[1] = {v};
  block_max_n<N, TH>(a, slots);
  return a[0];
}

// The sum over the block of every thread's v[j], for each j < 2, in every thread (the same
// fixed order in every thread, so deterministic); slots: 2 TH / 32 floats, free (the caller
// syncs after its last readers of them), free again at the caller's next barrier.
template <int N, int TH>
TIMEX_FFT_DEVICE void block_sum2(float (&v)[2], float* slots) {
  const int tid = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    for (int m = 16; m > 0; m /= 2) v[j] += __shfl_xor_sync(0xffffffffu, v[j], m);
  }
  if (tid % 32 == 0) slots[2 * (tid / 32)] = v[0], slots[2 * (tid / 32) + 1] = v[1];
  TIMEX_FFT_SYNC();
  v[0] = v[1] = 0.f;
  for (int w = 0; w < TH / 32; ++w) v[0] += slots[2 * w], v[1] += slots[2 * w + 1];
}

// The exponent ex of a largest magnitude m = f 2^ex (f in [0.5, 1)): 2^(1 - ex) takes m into
// [1, 2); 1 for zeros, inf or NaN (which then reach the output as they are).
TIMEX_FFT_DEVICE int scale_exponent(float m) {
  int ex = 1;
  if (m > 0.f && std::isfinite(m)) std::frexp(m, &ex);
  return ex;
}

// The magnitude whose bits (S's, sign cleared) are m, NaN as inf (a largest magnitude then
// says whether the row is finite). Magnitudes order as their bits, and NaN's bits exceed
// inf's: the largest of a row's is an integer max (load_rows), two operations an element.
template <typename S>
TIMEX_FFT_DEVICE float magnitude_of_bits(uint32_t m) {
  constexpr uint32_t kInf = std::is_same_v<S, c10::BFloat16> ? 0x7f80u : 0x7c00u;
  return m >= kInf ? INFINITY : bits_to_float<S>(static_cast<uint16_t>(m));
}

// The shift s of a row whose largest magnitude is m: 2^s takes it into [1, 2) (s = 1 - ex for
// m = f 2^ex, f in [0.5, 1)), at most 126 (a float 2^127 and more would overflow: rows of
// bfloat16 subnormals stay below 1, still normal in float16); 0 for zeros, inf or NaN.
TIMEX_FFT_DEVICE int scale_shift(float m) { return std::min(1 - scale_exponent(m), 126); }

// Rows r0 + i r1 (r1 null: zeros), zero from T on, into the planes re, im as S's bits in
// natural order, read reversed (r[T-1-t]) where asked; 8 elements at a time in accesses of
// `vec` elements (vector_width: 8, 4 or 2; a reversed chunk is the chunk at T - 8 - e, as
// aligned since vec divides T, its elements in reverse order), element by element where vec
// is 1 and for a last chunk past T. Element by element, odd T (2561) took 7-10% more op time
// than T % 8 = 0 (2568) at N = 6144; reading T % 8 = 4 (2100, 2500) 4 at a time instead took
// 2-3% off the kernels' time (run 31 (d), (g)). The thread's chunks below N / 2 (where rows of
// T <= N / 2 lie) are all asked of L1 first (prefetch_l1): loaded one after another, each
// chunk's wait on memory had 4-10% of the kernels' stall samples at N = 32768 (ncu, H200).
// (Loaded ahead into registers instead, they made the backward kernels spill.) amax: the
// largest magnitude of each row (r0's, r1's) in every thread (block_max_n over 2 TH / 32
// slots), inf where the row holds inf or NaN (so a caller can keep such a row out of its
// partner's transform; its scale is then 1).
template <typename S, int N, int TH = threads(N)>
TIMEX_FFT_DEVICE void load_rows(uint16_t* re, uint16_t* im, const uint16_t* r0,
                                const uint16_t* r1, int T, int vec, bool reversed, float* slots,
                                float (&amax)[2]) {
  const int tid = static_cast<int>(threadIdx.x);
  uint32_t m0 = 0, m1 = 0;  // the largest magnitudes' bits (magnitude_of_bits)
  constexpr int kFront = (N / 2 + 8 * TH - 1) / (8 * TH);  // the chunks below N / 2
#pragma unroll
  for (int c = 0; c < kFront; ++c) {
    const int e = 8 * (tid + TH * c);
    if (vec > 1 && e + 8 <= T) {
      const int at = reversed ? T - 8 - e : e;
      prefetch_l1(r0 + at);
      if (r1 != nullptr) prefetch_l1(r1 + at);
    }
  }
  for (int e = 8 * tid; e < N; e += 8 * TH) {
    uint16_t xr[8], xi[8];
    if (vec > 1 && e + 8 <= T) {
      const int at = reversed ? T - 8 - e : e;
      ldg8_elems(xr, r0 + at, vec);
      if (r1 != nullptr) {
        ldg8_elems(xi, r1 + at, vec);
      } else {
        for (int j = 0; j < 8; ++j) xi[j] = 0;
      }
      if (reversed) {
        for (int j = 0; j < 4; ++j) {
          const uint16_t r = xr[j], i = xi[j];
          xr[j] = xr[7 - j], xi[j] = xi[7 - j];
          xr[7 - j] = r, xi[7 - j] = i;
        }
      }
    } else {
      for (int j = 0; j < 8; ++j) {
        const int t = reversed ? T - 1 - (e + j) : e + j;
        xr[j] = e + j < T ? r0[t] : uint16_t(0);
        xi[j] = e + j < T && r1 != nullptr ? r1[t] : uint16_t(0);
      }
    }
    for (int j = 0; j < 8; ++j) {
      m0 = std::max(m0, uint32_t{xr[j]} & 0x7fffu);
      m1 = std::max(m1, uint32_t{xi[j]} & 0x7fffu);
    }
    st16(re + swz(e), xr);
    st16(im + swz(e), xi);
  }
  amax[0] = magnitude_of_bits<S>(m0), amax[1] = magnitude_of_bits<S>(m1);
  block_max_n<N, TH>(amax, slots);
}

// The loaded sets (S's bits, set s at re + 2 N s) as float16, each plane times its own scale
// (scale[s][0] the real plane's, scale[s][1] the imaginary one's: each row of a pair scaled
// by its own power of two, so that a row far smaller than its partner keeps its own relative
// accuracy): the first forward pass where the outer radix is not 16 (first_pass_mma at 12 and
// 24, else first_pass_fma), else in place. The caller syncs before the passes.
template <typename S, int N, int SETS, int TH = threads(N)>
TIMEX_FFT_DEVICE void scale_sets(uint16_t* re, uint16_t* im, const float (&scale)[SETS][2]) {
  if constexpr (outer_on_mma(N)) {
    first_pass_mma<S, N, SETS, TH>(re, im, scale);
  } else if constexpr (radix1(N) != 16) {
    first_pass_fma<S, N, SETS, TH>(re, im, scale);
  } else {  // each thread rescales the chunks it stored
    const int tid = static_cast<int>(threadIdx.x);
    for (int e = 8 * tid; e < SETS * N; e += 8 * TH) {
      const int set = e / N;
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        uint16_t* const at = (p == 0 ? re : im) + 2 * N * set + swz(e % N);
        uint16_t v[8];
        ld16(v, at);
        uint32_t h[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          h[j] = pack2<Plane>(bits_to_float<S>(v[2 * j]) * scale[set][p],
                              bits_to_float<S>(v[2 * j + 1]) * scale[set][p]);
        }
        std::memcpy(v, h, 16);
        st16(at, v);
      }
    }
  }
}

// Row o (T elements of S) all NaN: the output of a row whose inputs hold inf or NaN, kept out of
// its partner's transform (the FFT's whole-row contract). The block's threads in turn.
template <typename S, int TH>
TIMEX_FFT_DEVICE void fill_nan(uint16_t* o, int T) {
  const uint16_t nan = to_bits<S>(NAN);
  for (int t = static_cast<int>(threadIdx.x); t < T; t += TH) o[t] = nan;
}

// Where the inverse transform's y goes: y's real part times scale0 + eps to row o0 and its
// imaginary part times scale1 + eps to o1 (where `two`), rounded to S; t < T. emit: times t
// and t + 1 (t even) as floats; copy: 8 times from e on, already scaled and rounded (the
// planes' staging).
template <typename S>
struct PairSink {
  uint16_t* o0;
  uint16_t* o1;
  bool two;
  int T;
  float scale0, scale1, eps;
  bool pairs;  // 4-byte stores: T even and the rows aligned
  int vec;     // copy's accesses, in elements: vector_width
  TIMEX_FFT_DEVICE PairSink(uint16_t* a, uint16_t* b, bool two_rows, int t, float s0, float s1,
                            float e, const uint16_t* base)
      : o0(a), o1(b), two(two_rows), T(t), scale0(s0), scale1(s1), eps(e),
        pairs(t % 2 == 0 && (reinterpret_cast<uintptr_t>(base) & 3) == 0),
        vec(vector_width(t, base)) {}
  TIMEX_FFT_DEVICE float re(float v) const { return std::fma(v, scale0, eps); }
  TIMEX_FFT_DEVICE float im(float v) const { return std::fma(v, scale1, eps); }
  TIMEX_FFT_DEVICE void emit(int t, float r0, float i0, float r1, float i1) const {
    if (t >= T) return;
    r0 = re(r0), r1 = re(r1), i0 = im(i0), i1 = im(i1);
    if (pairs) {
      st32(o0 + t, pack2<S>(r0, r1));
      if (two) st32(o1 + t, pack2<S>(i0, i1));
    } else {
      o0[t] = to_bits<S>(r0);
      if (two) o1[t] = to_bits<S>(i0);
      if (t + 1 < T) {
        o0[t + 1] = to_bits<S>(r1);
        if (two) o1[t + 1] = to_bits<S>(i1);
      }
    }
  }
  TIMEX_FFT_DEVICE void copy(int e, const uint16_t (&yr)[8], const uint16_t (&yi)[8]) const {
    if (vec > 1 && e + 8 <= T) {
      st8_elems(o0 + e, yr, vec);
      if (two) st8_elems(o1 + e, yi, vec);
    } else {
      for (int j = 0; j < 8 && e + j < T; ++j) {
        o0[e + j] = yr[j];
        if (two) o1[e + j] = yi[j];
      }
    }
  }
};

// grad_w's row: o[T-1-t] = Re y[t] times scale, rounded to S, for t < T (the imaginary part
// is not wanted).
template <typename S>
struct ReversedRealSink {
  uint16_t* o;
  int T;
  float scale;
  TIMEX_FFT_DEVICE float re(float v) const { return v * scale; }
  TIMEX_FFT_DEVICE float im(float) const { return 0.f; }
  TIMEX_FFT_DEVICE void emit(int t, float r0, float, float r1, float) const {
    if (t < T) o[T - 1 - t] = to_bits<S>(re(r0));
    if (t + 1 < T) o[T - 2 - t] = to_bits<S>(re(r1));
  }
  TIMEX_FFT_DEVICE void copy(int e, const uint16_t (&yr)[8], const uint16_t (&)[8]) const {
    for (int j = 0; j < 8 && e + j < T; ++j) o[T - 1 - e - j] = yr[j];
  }
};

// The backward's last row of an odd B and its channel's grad_w from one inverse: grad_w's row
// from y's real part (reversed, w[T-1-t] = Re y[t] scale_w, as ReversedRealSink) and a row of
// grad_k from its imaginary part (k[t] = Im y[t] scale_k), rounded to S, t < T; grad_w's
// not written where w_row is null.
template <typename S>
struct GradWAndRowSink {
  uint16_t* w;
  uint16_t* k;
  int T;
  float scale_w, scale_k;
  int vec;  // copy's accesses to k, in elements: vector_width
  TIMEX_FFT_DEVICE GradWAndRowSink(uint16_t* w_row, uint16_t* k_row, int t, float sw, float sk,
                                   const uint16_t* k_base)
      : w(w_row), k(k_row), T(t), scale_w(sw), scale_k(sk), vec(vector_width(t, k_base)) {}
  TIMEX_FFT_DEVICE float re(float v) const { return v * scale_w; }
  TIMEX_FFT_DEVICE float im(float v) const { return v * scale_k; }
  TIMEX_FFT_DEVICE void emit(int t, float r0, float i0, float r1, float i1) const {
    if (t < T) k[t] = to_bits<S>(im(i0));
    if (t + 1 < T) k[t + 1] = to_bits<S>(im(i1));
    if (w == nullptr) return;
    if (t < T) w[T - 1 - t] = to_bits<S>(re(r0));
    if (t + 1 < T) w[T - 2 - t] = to_bits<S>(re(r1));
  }
  TIMEX_FFT_DEVICE void copy(int e, const uint16_t (&yr)[8], const uint16_t (&yi)[8]) const {
    if (w != nullptr) {
      for (int j = 0; j < 8 && e + j < T; ++j) w[T - 1 - e - j] = yr[j];
    }
    if (vec > 1 && e + 8 <= T) {
      st8_elems(k + e, yi, vec);
    } else {
      for (int j = 0; j < 8 && e + j < T; ++j) k[e + j] = yi[j];
    }
  }
};

}  // namespace fft_tc
}  // namespace rwkv
