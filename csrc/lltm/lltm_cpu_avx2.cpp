// float32 LLTM pointwise kernels vectorised with AVX2 + FMA, raw intrinsics (ATen's
// Vectorized<float> and SLEEF are not part of the stable ABI), with this file's own exp,
// expm1 and tanh; see common/avx2_target.h for how this file alone gets those instructions.
// lltm.cpp calls it only where fused_ops::cpu_has_avx2() and keeps scalar loops for the
// rest. The math is cell_forward / cell_backward of lltm.h, written on vectors.
//
// Accuracy (the tests compare float32 against float64 references): exp is Cephes' expf
// (x = n ln2 + r with ln2 split in two, |r| <= ln2/2, degree-7 polynomial), within 2 ulp;
// expm1 takes a degree-8 Taylor polynomial for |x| < 0.35 (where exp(x) - 1 would cancel),
// exp(x) - 1 elsewhere; tanh(x) = -expm1(-2|x|) / (expm1(-2|x|) + 2) with x's sign, which
// never overflows (the argument is <= 0) and is 1 to float precision beyond |x| = 9.
#include "common/avx2_target.h"

#include <stdexcept>

#include "lltm/lltm_cpu_avx2.h"

#ifdef FUSED_OPS_AVX2

namespace lltm {
namespace {

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

// Loads and stores of the first n <= 8 lanes (the rest of a row's last vector read as 0 and
// never written).
struct Lanes {
  __m256i mask;
  explicit Lanes(int64_t n)
      : mask(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))) {}
  V load(const float* p) const { return _mm256_maskload_ps(p, mask); }
  void store(float* p, V v) const { _mm256_maskstore_ps(p, mask, v); }
};
struct AllLanes {
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
};

// Calls body(j, lanes) for j = 0, 8, 16, ... with all 8 lanes, and once more with the
// masked lanes of the tail of a row.
template <typename Body>
inline void for_each_vector(int64_t S, const Body& body) {
  int64_t j = 0;
  for (; j + kLanes <= S; j += kLanes) body(j, AllLanes());
  if (j < S) body(j, Lanes(S - j));
}

}  // namespace

void forward_rows_avx2(const float* gates, const float* old_cell, float* new_h, float* new_cell,
                       int64_t b0, int64_t b1, int64_t S) {
  for (int64_t b = b0; b < b1; ++b) {
    const float* z = gates + b * 3 * S;
    const int64_t r = b * S;
    for_each_vector(S, [&](int64_t j, const auto& io) {
      const V cell = fma(elu(io.load(z + 2 * S + j)), sigmoid(io.load(z + j)),
                         io.load(old_cell + r + j));
      const V h = mul(tanh(cell), sigmoid(io.load(z + S + j)));
      io.store(new_cell + r + j, cell);
      io.store(new_h + r + j, h);
    });
  }
}

void backward_rows_avx2(const float* grad_h, const float* grad_cell, const float* new_cell,
                        const float* gates, float* d_gates, float* d_old_cell, int64_t b0,
                        int64_t b1, int64_t S) {
  const V one = splat(1.f);
  for (int64_t b = b0; b < b1; ++b) {
    const float* z = gates + b * 3 * S;
    float* dz = d_gates + b * 3 * S;
    const int64_t r = b * S;
    for_each_vector(S, [&](int64_t j, const auto& io) {
      const V gh = io.load(grad_h + r + j);
      const V z_c = io.load(z + 2 * S + j);
      const V input_gate = sigmoid(io.load(z + j));
      const V output_gate = sigmoid(io.load(z + S + j));
      const V tanh_cell = tanh(io.load(new_cell + r + j));
      const V d_new_cell = add(mul(mul(gh, output_gate), sub(one, mul(tanh_cell, tanh_cell))),
                               io.load(grad_cell + r + j));
      io.store(d_old_cell + r + j, d_new_cell);
      io.store(dz + j, mul(mul(mul(elu(z_c), d_new_cell), input_gate), sub(one, input_gate)));
      io.store(dz + S + j, mul(mul(mul(tanh_cell, gh), output_gate), sub(one, output_gate)));
      io.store(dz + 2 * S + j, mul(mul(input_gate, d_new_cell), d_elu(z_c)));
    });
  }
}

}  // namespace lltm

#else  // not x86-64 with GCC/Clang: only the scalar loops exist.

namespace lltm {
void forward_rows_avx2(const float*, const float*, float*, float*, int64_t, int64_t, int64_t) {
  throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");
}
void backward_rows_avx2(const float*, const float*, const float*, const float*, float*, float*,
                        int64_t, int64_t, int64_t) {
  throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");
}
}  // namespace lltm

#endif
