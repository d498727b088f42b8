// LLTM pointwise kernels vectorised with AVX2 + FMA, float32 (8 lanes) and float64 (4 lanes),
// raw intrinsics (ATen's Vectorized<T> and SLEEF are not part of the stable ABI), with this
// file's own exp, expm1 and tanh; see common/avx2_target.h for how this file alone gets those
// instructions. lltm.cpp calls it only where fused_ops::cpu_has_avx2() and keeps scalar loops
// for the rest. The math is cell_forward / cell_backward of lltm.h, written once on vectors
// (the row kernels are templates over the vector type; the primitives are overloaded).
//
// Accuracy (the tests compare against float64 references): float32 exp is Cephes' expf
// (x = n ln2 + r with ln2 split in two, |r| <= ln2/2, degree-7 polynomial), within 2 ulp;
// float64 exp the Taylor polynomial of e^r to r^13 on the same reduction (the first omitted
// term, r^14 / 14! <= 4e-18, is under 0.04 ulp). expm1 takes its Taylor polynomial near 0
// (float32: to x^8 for |x| < 0.35; float64: to x^14, first omitted term x^15 / 15! below
// 1.1e-18 |x|), exp(x) - 1 elsewhere; tanh(x) = -expm1(-2|x|) / (expm1(-2|x|) + 2) with x's
// sign, which never overflows (the argument is <= 0) and is 1 to working precision beyond.
#include "common/avx2_target.h"

#include <stdexcept>

#include "lltm/lltm_cpu_avx2.h"

#ifdef FUSED_OPS_AVX2

namespace lltm {
namespace {

// ---- float32: 8 lanes ----
using V = __m256;

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
inline V abs_of(V x) { return _mm256_andnot_ps(splat(-0.f), x); }
inline V sign_of(V x) { return _mm256_and_ps(x, splat(-0.f)); }
inline V with_sign(V x, V sign) { return _mm256_xor_ps(x, sign); }
inline V lt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }

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
  return select(lt(abs_of(x), splat(0.35f)), small, large);
}

// Loads and stores of the first n <= 8 lanes (the rest of a row's last vector read as 0 and
// never written).
struct LanesF {
  __m256i mask;
  explicit LanesF(int64_t n)
      : mask(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))) {}
  V load(const float* p) const { return _mm256_maskload_ps(p, mask); }
  void store(float* p, V v) const { _mm256_maskstore_ps(p, mask, v); }
};
struct AllLanesF {
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
};

// ---- float64: 4 lanes ----
using D = __m256d;

inline D splat(double x) { return _mm256_set1_pd(x); }
inline D add(D a, D b) { return _mm256_add_pd(a, b); }
inline D sub(D a, D b) { return _mm256_sub_pd(a, b); }
inline D mul(D a, D b) { return _mm256_mul_pd(a, b); }
inline D div(D a, D b) { return _mm256_div_pd(a, b); }
inline D fma(D a, D b, D c) { return _mm256_fmadd_pd(a, b, c); }
inline D select(D mask, D a, D b) { return _mm256_blendv_pd(b, a, mask); }
inline D neg(D x) { return _mm256_xor_pd(x, splat(-0.0)); }
inline D gt_zero(D x) { return _mm256_cmp_pd(x, _mm256_setzero_pd(), _CMP_GT_OQ); }
inline D abs_of(D x) { return _mm256_andnot_pd(splat(-0.0), x); }
inline D sign_of(D x) { return _mm256_and_pd(x, splat(-0.0)); }
inline D with_sign(D x, D sign) { return _mm256_xor_pd(x, sign); }
inline D lt(D a, D b) { return _mm256_cmp_pd(a, b, _CMP_LT_OQ); }

// 2^n for integral n (as doubles) in [-1022, 1023], from the exponent bits.
inline D pow2(D n) {
  const __m256i e = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n));
  return _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(e, _mm256_set1_epi64x(1023)), 52));
}

// e^x. Below -745.2 (e^x under the smallest subnormal) 0, above 709.8 +inf; NaN stays NaN.
inline D exp(D x) {
  const D hi = splat(709.782712893383973), lo = splat(-745.2);
  const D xc = _mm256_max_pd(_mm256_min_pd(x, hi), lo);
  // n = round(x / ln2); r = x - n ln2 with ln2 = C1 + C2, C1 exact in 32 bits (n * C1 exact).
  const D n = _mm256_round_pd(mul(xc, splat(1.4426950408889634)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  D r = fma(n, splat(-0.693145751953125), xc);
  r = fma(n, splat(-1.42860682030941723212e-6), r);
  // e^r, |r| <= 0.347: Taylor to r^13, Horner.
  D p = splat(1.0 / 6227020800.0);  // 1/13!
  const double inv_fact[] = {1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
                             1.0 / 362880.0,    1.0 / 40320.0,    1.0 / 5040.0,
                             1.0 / 720.0,       1.0 / 120.0,      1.0 / 24.0,
                             1.0 / 6.0,         0.5,              1.0,
                             1.0};  // 1/12! .. 1/0!
  for (double c : inv_fact) p = fma(p, r, splat(c));
  // * 2^n, n in [-1075, 1024]: 2^n in two halves so that both ends fit the exponent range.
  const D half = _mm256_round_pd(mul(n, splat(0.5)), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  D y = mul(mul(p, pow2(half)), pow2(sub(n, half)));
  y = select(_mm256_cmp_pd(x, hi, _CMP_GT_OQ), splat(__builtin_inf()), y);
  y = select(_mm256_cmp_pd(x, lo, _CMP_LT_OQ), _mm256_setzero_pd(), y);
  return select(_mm256_cmp_pd(x, x, _CMP_UNORD_Q), x, y);
}

// e^x - 1, accurate near 0.
inline D expm1(D x) {
  // Taylor to x^14 / 14! for |x| < 0.35 (x + x^2 (1/2! + x/3! + ... + x^12/14!)).
  D p = splat(1.0 / 87178291200.0);  // 1/14!
  const double inv_fact[] = {1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0,
                             1.0 / 3628800.0,    1.0 / 362880.0,    1.0 / 40320.0,
                             1.0 / 5040.0,       1.0 / 720.0,       1.0 / 120.0,
                             1.0 / 24.0,         1.0 / 6.0,         0.5};  // 1/13! .. 1/2!
  for (double c : inv_fact) p = fma(p, x, splat(c));
  const D small = fma(mul(p, x), x, x);
  const D large = sub(exp(x), splat(1.0));
  return select(lt(abs_of(x), splat(0.35)), small, large);
}

// The first n <= 4 lanes, as LanesF.
struct LanesD {
  __m256i mask;
  explicit LanesD(int64_t n)
      : mask(_mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3))) {}
  D load(const double* p) const { return _mm256_maskload_pd(p, mask); }
  void store(double* p, D v) const { _mm256_maskstore_pd(p, mask, v); }
};
struct AllLanesD {
  static D load(const double* p) { return _mm256_loadu_pd(p); }
  static void store(double* p, D v) { _mm256_storeu_pd(p, v); }
};

// Per scalar type: the vector type, its lane count and its partial/full loads and stores.
template <typename T>
struct Vec;
template <>
struct Vec<float> {
  using V = __m256;
  using Lanes = LanesF;
  using AllLanes = AllLanesF;
  static constexpr int64_t kLanes = 8;
};
template <>
struct Vec<double> {
  using V = __m256d;
  using Lanes = LanesD;
  using AllLanes = AllLanesD;
  static constexpr int64_t kLanes = 4;
};

// ---- both types: the cell's math, written once (W is __m256 or __m256d, T its lane type) ----

// tanh(x) = sign(x) * (1 - e^(-2|x|)) / (1 + e^(-2|x|)) = -sign(x) m / (m + 2), with
// m = expm1(-2|x|) in (-1, 0]: accurate near 0 (expm1) and without overflow.
template <typename T, typename W>
inline W tanh(W x) {
  const W m = expm1(mul(abs_of(x), splat(T(-2))));
  const W t = div(m, add(m, splat(T(2))));  // -tanh(|x|)
  return with_sign(neg(t), sign_of(x));
}
template <typename T, typename W>
inline W sigmoid(W z) {
  return div(splat(T(1)), add(splat(T(1)), exp(neg(z))));
}
template <typename W>
inline W elu(W z) {
  return select(gt_zero(z), z, expm1(z));
}
template <typename T, typename W>
inline W d_elu(W z) {
  return select(gt_zero(z), splat(T(1)), exp(z));
}

// Calls body(j, lanes) for j = 0, kLanes, 2 kLanes, ... with all lanes, and once more with
// the masked lanes of the tail of a row.
template <typename T, typename Body>
inline void for_each_vector(int64_t S, const Body& body) {
  constexpr int64_t kLanes = Vec<T>::kLanes;
  int64_t j = 0;
  for (; j + kLanes <= S; j += kLanes) body(j, typename Vec<T>::AllLanes());
  if (j < S) body(j, typename Vec<T>::Lanes(S - j));
}

template <typename T>
void forward_rows(const T* gates, const T* old_cell, T* new_h, T* new_cell, T* const* acts,
                  int64_t b0, int64_t b1, int64_t S) {
  using W = typename Vec<T>::V;
  for (int64_t b = b0; b < b1; ++b) {
    const T* z = gates + b * 3 * S;
    const int64_t r = b * S;
    for_each_vector<T>(S, [&](int64_t j, const auto& io) {
      const W input_gate = sigmoid<T>(io.load(z + j));
      const W output_gate = sigmoid<T>(io.load(z + S + j));
      const W candidate = elu(io.load(z + 2 * S + j));
      const W cell = fma(candidate, input_gate, io.load(old_cell + r + j));
      io.store(new_cell + r + j, cell);
      io.store(new_h + r + j, mul(tanh<T>(cell), output_gate));
      if (acts != nullptr) {
        io.store(acts[0] + r + j, input_gate);
        io.store(acts[1] + r + j, output_gate);
        io.store(acts[2] + r + j, candidate);
      }
    });
  }
}

template <typename T>
void backward_rows(const T* grad_h, const T* grad_cell, const T* new_cell, const T* gates,
                   T* d_gates, T* d_old_cell, int64_t b0, int64_t b1, int64_t S) {
  using W = typename Vec<T>::V;
  const W one = splat(T(1));
  for (int64_t b = b0; b < b1; ++b) {
    const T* z = gates + b * 3 * S;
    T* dz = d_gates + b * 3 * S;
    const int64_t r = b * S;
    for_each_vector<T>(S, [&](int64_t j, const auto& io) {
      const W gh = io.load(grad_h + r + j);
      const W z_c = io.load(z + 2 * S + j);
      const W input_gate = sigmoid<T>(io.load(z + j));
      const W output_gate = sigmoid<T>(io.load(z + S + j));
      const W tanh_cell = tanh<T>(io.load(new_cell + r + j));
      const W d_new_cell = add(mul(mul(gh, output_gate), sub(one, mul(tanh_cell, tanh_cell))),
                               io.load(grad_cell + r + j));
      io.store(d_old_cell + r + j, d_new_cell);
      io.store(dz + j, mul(mul(mul(elu(z_c), d_new_cell), input_gate), sub(one, input_gate)));
      io.store(dz + S + j, mul(mul(mul(tanh_cell, gh), output_gate), sub(one, output_gate)));
      io.store(dz + 2 * S + j, mul(mul(input_gate, d_new_cell), d_elu<T>(z_c)));
    });
  }
}

}  // namespace

#define LLTM_AVX2_ROWS(T)                                                                      \
  void forward_rows_avx2(const T* gates, const T* old_cell, T* new_h, T* new_cell,             \
                         T* const* acts, int64_t b0, int64_t b1, int64_t S) {                  \
    forward_rows<T>(gates, old_cell, new_h, new_cell, acts, b0, b1, S);                        \
  }                                                                                            \
  void backward_rows_avx2(const T* grad_h, const T* grad_cell, const T* new_cell,              \
                          const T* gates, T* d_gates, T* d_old_cell, int64_t b0, int64_t b1,  \
                          int64_t S) {                                                         \
    backward_rows<T>(grad_h, grad_cell, new_cell, gates, d_gates, d_old_cell, b0, b1, S);      \
  }
LLTM_AVX2_ROWS(float)
LLTM_AVX2_ROWS(double)

}  // namespace lltm

#else  // not x86-64 with GCC/Clang: only the scalar loops exist.

namespace lltm {
#define LLTM_AVX2_ROWS(T)                                                                      \
  void forward_rows_avx2(const T*, const T*, T*, T*, T* const*, int64_t, int64_t, int64_t) {   \
    throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");                 \
  }                                                                                            \
  void backward_rows_avx2(const T*, const T*, const T*, const T*, T*, T*, int64_t, int64_t,    \
                          int64_t) {                                                           \
    throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");                 \
  }
LLTM_AVX2_ROWS(float)
LLTM_AVX2_ROWS(double)
}  // namespace lltm

#endif
