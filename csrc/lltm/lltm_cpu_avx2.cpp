// float32 LLTM pointwise kernels vectorised with AVX2 + FMA through ATen's Vectorized<float>
// (SLEEF exp, expm1, tanh); see common/avx2_target.h for how this file alone gets those
// instructions. lltm.cpp calls it only where fused_ops::cpu_has_avx2() and keeps scalar loops
// for the rest. The math is cell_forward / cell_backward of lltm.h, written on vectors.
#include "common/avx2_target.h"

#include <c10/util/Exception.h>

#include "lltm/lltm_cpu_avx2.h"

#ifdef FUSED_OPS_AVX2

namespace lltm {
namespace {

using Vec = at::vec::Vectorized<float>;

inline Vec sigmoid(Vec z) { return Vec(1.f) / (Vec(1.f) + z.neg().exp()); }
inline Vec elu(Vec z) { return Vec::blendv(z.expm1(), z, z > Vec(0.f)); }
inline Vec d_elu(Vec z) { return Vec::blendv(z.exp(), Vec(1.f), z > Vec(0.f)); }

// Calls body(j, n) for j = 0, 8, 16, ... with n = 8 lanes, and once more with n < 8 for
// the tail of a row (loadu/store with a count touch only those n elements).
template <typename Body>
inline void for_each_vector(int64_t S, const Body& body) {
  int64_t j = 0;
  for (; j + Vec::size() <= S; j += Vec::size()) body(j, Vec::size());
  if (j < S) body(j, S - j);
}

}  // namespace

void forward_rows_avx2(const float* gates, const float* old_cell, float* new_h, float* new_cell,
                       int64_t b0, int64_t b1, int64_t S) {
  for (int64_t b = b0; b < b1; ++b) {
    const float* z = gates + b * 3 * S;
    const int64_t r = b * S;
    for_each_vector(S, [&](int64_t j, int64_t n) {
      const Vec cell = Vec::loadu(old_cell + r + j, n) +
                       elu(Vec::loadu(z + 2 * S + j, n)) * sigmoid(Vec::loadu(z + j, n));
      const Vec h = cell.tanh() * sigmoid(Vec::loadu(z + S + j, n));
      cell.store(new_cell + r + j, n);
      h.store(new_h + r + j, n);
    });
  }
}

void backward_rows_avx2(const float* grad_h, const float* grad_cell, const float* new_cell,
                        const float* gates, float* d_gates, float* d_old_cell, int64_t b0,
                        int64_t b1, int64_t S) {
  const Vec one(1.f);
  for (int64_t b = b0; b < b1; ++b) {
    const float* z = gates + b * 3 * S;
    float* dz = d_gates + b * 3 * S;
    const int64_t r = b * S;
    for_each_vector(S, [&](int64_t j, int64_t n) {
      const Vec gh = Vec::loadu(grad_h + r + j, n);
      const Vec z_c = Vec::loadu(z + 2 * S + j, n);
      const Vec input_gate = sigmoid(Vec::loadu(z + j, n));
      const Vec output_gate = sigmoid(Vec::loadu(z + S + j, n));
      const Vec tanh_cell = Vec::loadu(new_cell + r + j, n).tanh();
      const Vec d_new_cell =
          gh * output_gate * (one - tanh_cell * tanh_cell) + Vec::loadu(grad_cell + r + j, n);
      d_new_cell.store(d_old_cell + r + j, n);
      (elu(z_c) * d_new_cell * input_gate * (one - input_gate)).store(dz + j, n);
      (tanh_cell * gh * output_gate * (one - output_gate)).store(dz + S + j, n);
      (input_gate * d_new_cell * d_elu(z_c)).store(dz + 2 * S + j, n);
    });
  }
}

}  // namespace lltm

#else  // not x86-64 with GCC/Clang: only the scalar loops exist.

namespace lltm {
void forward_rows_avx2(const float*, const float*, float*, float*, int64_t, int64_t, int64_t) {
  TORCH_CHECK(false, "lltm: AVX2 kernels are not built for this CPU");
}
void backward_rows_avx2(const float*, const float*, const float*, const float*, float*, float*,
                        int64_t, int64_t, int64_t) {
  TORCH_CHECK(false, "lltm: AVX2 kernels are not built for this CPU");
}
}  // namespace lltm

#endif
