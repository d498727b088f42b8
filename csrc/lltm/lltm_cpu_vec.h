// The LLTM's float32 vector math for AVX2 + FMA (+ F16C for float16 storage), raw intrinsics
// (ATen's Vectorized<float> and SLEEF are not part of the stable ABI): exp, expm1, tanh and the
// cell's activations on 8 lanes, and loads/stores of 8 (or fewer) lanes of float, float16 or
// bfloat16 storage converted to and from float. Shared by the cell's kernels
// (lltm_cpu_avx2.cpp) and the sequence's (lltm_sequence_{fwd,bwd}_avx2.cpp). Include it only
// from a file that includes common/avx2_target.h first, and only inside #ifdef FUSED_OPS_AVX2.
//
// Accuracy (the tests compare float32 against float64 references): exp is Cephes' expf
// (x = n ln2 + r with ln2 split in two, |r| <= ln2/2, degree-7 polynomial), within 2 ulp;
// expm1 takes a degree-8 Taylor polynomial for |x| < 0.35 (where exp(x) - 1 would cancel),
// exp(x) - 1 elsewhere; tanh(x) = -expm1(-2|x|) / (expm1(-2|x|) + 2) with x's sign, which
// never overflows (the argument is <= 0) and is 1 to float precision beyond |x| = 9.
//
// Conversions round exactly as c10 does, so that a half-type value stored here equals
// static_cast<c10::Half / c10::BFloat16>(float): float16 through F16C (IEEE round to nearest
// even, subnormals included); bfloat16 by c10's round_to_nearest_even (add 0x7FFF plus the
// lowest kept bit, truncate; NaN becomes 0x7FC0).
#pragma once

#include <cstdint>
#include <cstring>

namespace lltm {
namespace vec {

using V = __m256;
constexpr int64_t kLanes = 8;

inline V splat(float x) { return _mm256_set1_ps(x); }
inline V add(V a, V b) { return _mm256_add_ps(a, b); }
inline V sub(V a, V b) { return _mm256_sub_ps(a, b); }
inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V div(V a, V b) { return _mm256_div_ps(a, b); }
inline V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }  // a * b + c
// a where mask, else b.
inline V select(V mask, V a, V b) { return _mm256_blendv_ps(b, a, mask); }
inline V neg(V x) { return _mm256_xor_ps(x, splat(-0.f)); }
inline V gt_zero(V x) { return _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ); }

// e^x. Below -87.3 (e^x under FLT_MIN) 0, above 88.7 +inf; NaN stays NaN.
inline V exp(V x) {
  const V hi = splat(88.72283935546875f), lo = splat(-87.33654022216797f);
  const V xc = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
  // n = round(x / ln2); r = x - n ln2 in two steps (C1 has few mantissa bits: n * C1 exact).
  const V n = _mm256_round_ps(mul(xc, splat(1.44269504088896341f)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  V r = fma(n, splat(-0.693359375f), xc);
  r = fma(n, splat(2.12194440e-4f), r);
  // Cephes expf: e^r = 1 + r + r^2 (p0 r^5 + ... + p5).
  V p = splat(1.9875691500e-4f);
  p = fma(p, r, splat(1.3981999507e-3f));
  p = fma(p, r, splat(8.3334519073e-3f));
  p = fma(p, r, splat(4.1665795894e-2f));
  p = fma(p, r, splat(1.6666665459e-1f));
  p = fma(p, r, splat(5.0000001201e-1f));
  p = fma(p, mul(r, r), add(r, splat(1.f)));
  // * 2^n, n in [-126, 128]: 2^n built in two halves so that n = 128 and n = -126 both fit.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256i bias = _mm256_set1_epi32(127);
  const V s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
  const V s2 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), bias), 23));
  V y = mul(mul(p, s1), s2);
  y = select(_mm256_cmp_ps(x, hi, _CMP_GT_OQ), splat(__builtin_inff()), y);
  y = select(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), _mm256_setzero_ps(), y);
  return select(_mm256_cmp_ps(x, x, _CMP_UNORD_Q), x, y);
}

// e^x - 1, accurate near 0.
inline V expm1(V x) {
  // Taylor series to x^8 / 8!: for |x| < 0.35 the first omitted term, x^9 / 9!, is below
  // 2.2e-10 |x|, far under half an ulp of the result (which is about |x|).
  V p = splat(1.f / 40320.f);
  p = fma(p, x, splat(1.f / 5040.f));
  p = fma(p, x, splat(1.f / 720.f));
  p = fma(p, x, splat(1.f / 120.f));
  p = fma(p, x, splat(1.f / 24.f));
  p = fma(p, x, splat(1.f / 6.f));
  p = fma(p, x, splat(0.5f));
  const V small = fma(mul(p, x), x, x);  // x + x^2 (1/2 + x/6 + ...)
  const V large = sub(exp(x), splat(1.f));
  const V abs_x = _mm256_andnot_ps(splat(-0.f), x);
  return select(_mm256_cmp_ps(abs_x, splat(0.35f), _CMP_LT_OQ), small, large);
}

// tanh(x) = sign(x) * (1 - e^(-2|x|)) / (1 + e^(-2|x|)) = -sign(x) m / (m + 2), with
// m = expm1(-2|x|) in (-1, 0]: accurate near 0 (expm1) and without overflow.
inline V tanh(V x) {
  const V sign = _mm256_and_ps(x, splat(-0.f));
  const V abs_x = _mm256_andnot_ps(splat(-0.f), x);
  const V m = expm1(mul(abs_x, splat(-2.f)));
  const V t = div(m, add(m, splat(2.f)));  // -tanh(|x|)
  return _mm256_xor_ps(neg(t), sign);
}

inline V sigmoid(V z) { return div(splat(1.f), add(splat(1.f), exp(neg(z)))); }
inline V elu(V z) { return select(gt_zero(z), z, expm1(z)); }
inline V d_elu(V z) { return select(gt_zero(z), splat(1.f), exp(z)); }

// ---- storage types ----
// A tensor's elements as the kernels see them: float, or the bits of a float16 / bfloat16
// (uint16_t: the c10 types stay out of files built for AVX2, avx2_target.h says why).
struct F32 {
  using T = float;
};
struct F16 {
  using T = uint16_t;
};
struct BF16 {
  using T = uint16_t;
};

// 8 stored half-type values (their bits) as floats, exactly.
inline V from_bits(__m128i bits, F16) { return _mm256_cvtph_ps(bits); }
inline V from_bits(__m128i bits, BF16) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}

// 8 elements at p (all readable) as floats.
inline V load8(const float* p, F32) { return _mm256_loadu_ps(p); }
template <typename E>
inline V load8(const uint16_t* p, E e) {
  return from_bits(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), e);
}

// v rounded to bfloat16, as the bits of 8 bfloat16s.
inline __m128i bf16_bits(V v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), nan);
  // 32-bit lanes (each < 2^16) to 16 bits: packus works per 128-bit half, then the two
  // halves' low quadwords are gathered.
  const __m256i packed = _mm256_packus_epi32(r, r);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

// v rounded to the half type, as the bits of 8 values.
inline __m128i to_bits(V v, F16) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT); }
inline __m128i to_bits(V v, BF16) { return bf16_bits(v); }

inline void store8(float* p, V v, F32) { _mm256_storeu_ps(p, v); }
template <typename E>
inline void store8(uint16_t* p, V v, E e) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), to_bits(v, e));
}

// v rounded to the storage type and back (the value a store then a load would give).
inline V round_to(V v, F32) { return v; }
template <typename E>
inline V round_to(V v, E e) {
  return from_bits(to_bits(v, e), e);
}

// Loads and stores of the first n (1 <= n <= 8) lanes: the rest read as 0 and never written.
struct Lanes {
  int64_t n;
  __m256i mask;
  explicit Lanes(int64_t count)
      : n(count),
        mask(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)),
                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))) {}
  V load(const float* p, F32 = {}) const { return _mm256_maskload_ps(p, mask); }
  template <typename E>
  V load(const uint16_t* p, E e) const {
    alignas(16) uint16_t buf[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(buf, p, static_cast<size_t>(n) * sizeof(uint16_t));
    return load8(buf, e);
  }
  void store(float* p, V v, F32 = {}) const { _mm256_maskstore_ps(p, mask, v); }
  template <typename E>
  void store(uint16_t* p, V v, E e) const {
    alignas(16) uint16_t buf[kLanes];
    store8(buf, v, e);
    std::memcpy(p, buf, static_cast<size_t>(n) * sizeof(uint16_t));
  }
  void store_bits(uint16_t* p, __m128i bits) const {
    alignas(16) uint16_t buf[kLanes];
    _mm_store_si128(reinterpret_cast<__m128i*>(buf), bits);
    std::memcpy(p, buf, static_cast<size_t>(n) * sizeof(uint16_t));
  }
};
// All 8 lanes: the same interface as Lanes.
struct AllLanes {
  V load(const float* p, F32 = {}) const { return _mm256_loadu_ps(p); }
  template <typename E>
  V load(const uint16_t* p, E e) const {
    return load8(p, e);
  }
  void store(float* p, V v, F32 = {}) const { _mm256_storeu_ps(p, v); }
  template <typename E>
  void store(uint16_t* p, V v, E e) const {
    store8(p, v, e);
  }
  void store_bits(uint16_t* p, __m128i bits) const {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), bits);
  }
};

// v rounded to the storage type, stored at p (the lanes io writes) and returned as floats:
// round_to then a store, with one rounding instead of two (bfloat16's costs 9 instructions).
template <typename IO>
inline V store_rounded(float* p, V v, const IO& io, F32) {
  io.store(p, v);
  return v;
}
template <typename IO, typename E>
inline V store_rounded(uint16_t* p, V v, const IO& io, E e) {
  const __m128i bits = to_bits(v, e);
  io.store_bits(p, bits);
  return from_bits(bits, e);
}

// Calls body(j, lanes) for j = 0, 8, 16, ... with all 8 lanes, and once more with the
// masked lanes of the tail of a row.
template <typename Body>
inline void for_each_vector(int64_t S, const Body& body) {
  int64_t j = 0;
  for (; j + kLanes <= S; j += kLanes) body(j, AllLanes());
  if (j < S) body(j, Lanes(S - j));
}

}  // namespace vec
}  // namespace lltm
