// The LLTM cell's float64 pointwise kernels vectorised with AVX2 + FMA (4 lanes), raw
// intrinsics, with this file's own exp and expm1 (the float32 and half-type kernels are
// lltm_cpu_avx2.cpp, on lltm_cpu_vec.h's float math); see common/avx2_target.h for how this
// file alone gets those instructions. lltm.cpp calls it only where fused_ops::cpu_has_avx2().
// The math is cell_forward / cell_backward of lltm.h, written on vectors.
//
// Accuracy (the tests compare against float64 references): exp is the Taylor polynomial of
// e^r to r^13 on x = n ln2 + r, |r| <= ln2/2, ln2 split in two (the first omitted term,
// r^14 / 14! <= 4e-18, is under 0.04 ulp); expm1 its Taylor polynomial to x^14 for |x| < 0.35
// (first omitted term x^15 / 15! below 1.1e-18 |x|), exp(x) - 1 elsewhere;
// tanh(x) = -expm1(-2|x|) / (expm1(-2|x|) + 2) with x's sign, which never overflows (the
// argument is <= 0) and is 1 to working precision beyond |x| = 19.
#include "common/avx2_target.h"

#include <stdexcept>

#include "lltm/lltm_cpu_avx2.h"

#ifdef FUSED_OPS_AVX2

namespace lltm {
namespace {

using D = __m256d;
constexpr int64_t kLanes = 4;
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

// Loads and stores of the first n <= 4 lanes (the rest of a row's last vector read as 0 and
// never written).
struct Lanes {
  __m256i mask;
  explicit Lanes(int64_t n)
      : mask(_mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3))) {}
  D load(const double* p) const { return _mm256_maskload_pd(p, mask); }
  void store(double* p, D v) const { _mm256_maskstore_pd(p, mask, v); }
};
struct AllLanes {
  static D load(const double* p) { return _mm256_loadu_pd(p); }
  static void store(double* p, D v) { _mm256_storeu_pd(p, v); }
};

// tanh(x) = sign(x) * (1 - e^(-2|x|)) / (1 + e^(-2|x|)) = -sign(x) m / (m + 2), with
// m = expm1(-2|x|) in (-1, 0]: accurate near 0 (expm1) and without overflow.
inline D tanh(D x) {
  const D m = expm1(mul(abs_of(x), splat(-2.0)));
  const D t = div(m, add(m, splat(2.0)));  // -tanh(|x|)
  return with_sign(neg(t), sign_of(x));
}
inline D sigmoid(D z) { return div(splat(1.0), add(splat(1.0), exp(neg(z)))); }
inline D elu(D z) { return select(gt_zero(z), z, expm1(z)); }
inline D d_elu(D z) { return select(gt_zero(z), splat(1.0), exp(z)); }

// Calls body(j, lanes) for j = 0, 4, 8, ... with all lanes, and once more with the masked
// lanes of the tail of a row.
template <typename Body>
inline void for_each_vector(int64_t S, const Body& body) {
  int64_t j = 0;
  for (; j + kLanes <= S; j += kLanes) body(j, AllLanes());
  if (j < S) body(j, Lanes(S - j));
}

}  // namespace

void forward_rows_avx2(const double* gates, const double* old_cell, double* new_h,
                       double* new_cell, double* const* acts, int64_t b0, int64_t b1,
                       int64_t S) {
  for (int64_t b = b0; b < b1; ++b) {
    const double* z = gates + b * 3 * S;
    const int64_t r = b * S;
    for_each_vector(S, [&](int64_t j, const auto& io) {
      const D input_gate = sigmoid(io.load(z + j));
      const D output_gate = sigmoid(io.load(z + S + j));
      const D candidate = elu(io.load(z + 2 * S + j));
      const D cell = fma(candidate, input_gate, io.load(old_cell + r + j));
      io.store(new_cell + r + j, cell);
      io.store(new_h + r + j, mul(tanh(cell), output_gate));
      if (acts != nullptr) {
        io.store(acts[0] + r + j, input_gate);
        io.store(acts[1] + r + j, output_gate);
        io.store(acts[2] + r + j, candidate);
      }
    });
  }
}

void backward_rows_avx2(const double* grad_h, const double* grad_cell, const double* new_cell,
                        const double* gates, double* d_gates, double* d_old_cell, int64_t b0,
                        int64_t b1, int64_t S) {
  const D one = splat(1.0);
  for (int64_t b = b0; b < b1; ++b) {
    const double* z = gates + b * 3 * S;
    double* dz = d_gates + b * 3 * S;
    const int64_t r = b * S;
    for_each_vector(S, [&](int64_t j, const auto& io) {
      const D gh = io.load(grad_h + r + j);
      const D z_c = io.load(z + 2 * S + j);
      const D input_gate = sigmoid(io.load(z + j));
      const D output_gate = sigmoid(io.load(z + S + j));
      const D tanh_cell = tanh(io.load(new_cell + r + j));
      const D d_new_cell = add(mul(mul(gh, output_gate), sub(one, mul(tanh_cell, tanh_cell))),
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
void forward_rows_avx2(const double*, const double*, double*, double*, double* const*, int64_t,
                       int64_t, int64_t) {
  throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");
}
void backward_rows_avx2(const double*, const double*, const double*, const double*, double*,
                        double*, int64_t, int64_t, int64_t) {
  throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");
}
}  // namespace lltm

#endif
