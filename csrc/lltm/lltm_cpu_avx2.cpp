// The LLTM cell's pointwise kernels for float32, float16 and bfloat16 vectorised with AVX2 +
// FMA (+ F16C), raw intrinsics (float64's: lltm_cpu_avx2_f64.cpp); the
// vector math (exp, expm1, tanh, conversions) is lltm_cpu_vec.h, shared with the sequence's
// kernels; see common/avx2_target.h for how this file alone gets those instructions.
// lltm.cpp calls it only where fused_ops::cpu_has_avx2() and keeps scalar loops for the
// rest. The math is cell_forward / cell_backward of lltm.h, written on vectors, in float for
// every storage type (float16 and bfloat16 converted on load, rounded once on store).
#include "common/avx2_target.h"

#include <stdexcept>

#include "lltm/lltm_cpu_avx2.h"

#ifdef FUSED_OPS_AVX2

#include "lltm/lltm_cpu_vec.h"

namespace lltm {
namespace {

using namespace vec;  // NOLINT(build/namespaces): this file's vocabulary

template <typename E>
void forward_rows(const float* gates, typename E::T* gates_out, const typename E::T* old_cell,
                  typename E::T* new_h, typename E::T* new_cell, void* const* acts, int64_t b0,
                  int64_t b1, int64_t S) {
  const E e;
  constexpr bool kRound = !std::is_same_v<E, F32>;
  for (int64_t b = b0; b < b1; ++b) {
    const float* z = gates + b * 3 * S;
    typename E::T* zo = gates_out + b * 3 * S;
    const int64_t r = b * S;
    for_each_vector(S, [&](int64_t j, const auto& io) {
      V z_i = io.load(z + j), z_o = io.load(z + S + j), z_c = io.load(z + 2 * S + j);
      if constexpr (kRound) {
        z_i = store_rounded(zo + j, z_i, io, e);
        z_o = store_rounded(zo + S + j, z_o, io, e);
        z_c = store_rounded(zo + 2 * S + j, z_c, io, e);
      }
      // new_cell is rounded before tanh reads it: new_h is the cell of the stored new_cell,
      // as in a computation that keeps its tensors in the op's dtype.
      const V input_gate = sigmoid(z_i), output_gate = sigmoid(z_o), candidate = elu(z_c);
      const V cell = store_rounded(new_cell + r + j,
                                   fma(candidate, input_gate, io.load(old_cell + r + j, e)), io, e);
      io.store(new_h + r + j, mul(tanh(cell), output_gate), e);
      if (acts != nullptr) {
        io.store(static_cast<typename E::T*>(acts[0]) + r + j, input_gate, e);
        io.store(static_cast<typename E::T*>(acts[1]) + r + j, output_gate, e);
        io.store(static_cast<typename E::T*>(acts[2]) + r + j, candidate, e);
      }
    });
  }
}

template <typename E>
void backward_rows(const typename E::T* grad_h, const typename E::T* grad_cell,
                   const typename E::T* new_cell, const typename E::T* gates, float* d_gates,
                   typename E::T* d_old_cell, int64_t b0, int64_t b1, int64_t S) {
  const E e;
  const V one = splat(1.f);
  for (int64_t b = b0; b < b1; ++b) {
    const typename E::T* z = gates + b * 3 * S;
    float* dz = d_gates + b * 3 * S;
    const int64_t r = b * S;
    for_each_vector(S, [&](int64_t j, const auto& io) {
      const V gh = io.load(grad_h + r + j, e);
      const V z_c = io.load(z + 2 * S + j, e);
      const V input_gate = sigmoid(io.load(z + j, e));
      const V output_gate = sigmoid(io.load(z + S + j, e));
      const V tanh_cell = tanh(io.load(new_cell + r + j, e));
      const V d_new_cell = add(mul(mul(gh, output_gate), sub(one, mul(tanh_cell, tanh_cell))),
                               io.load(grad_cell + r + j, e));
      io.store(d_old_cell + r + j, d_new_cell, e);
      io.store(dz + j, mul(mul(mul(elu(z_c), d_new_cell), input_gate), sub(one, input_gate)));
      io.store(dz + S + j, mul(mul(mul(tanh_cell, gh), output_gate), sub(one, output_gate)));
      io.store(dz + 2 * S + j, mul(mul(input_gate, d_new_cell), d_elu(z_c)));
    });
  }
}

template <typename E>
using P = typename E::T*;
template <typename E>
using CP = const typename E::T*;

}  // namespace

void forward_rows_avx2(Storage storage, const float* gates, void* gates_out,
                       const void* old_cell, void* new_h, void* new_cell, void* const* acts,
                       int64_t b0, int64_t b1, int64_t S) {
  auto run = [&](auto e) {
    using E = decltype(e);
    forward_rows<E>(gates, static_cast<P<E>>(gates_out), static_cast<CP<E>>(old_cell),
                    static_cast<P<E>>(new_h), static_cast<P<E>>(new_cell), acts, b0, b1, S);
  };
  switch (storage) {
    case Storage::Float: return run(F32());
    case Storage::Half: return run(F16());
    case Storage::BFloat16: return run(BF16());
  }
}

void backward_rows_avx2(Storage storage, const void* grad_h, const void* grad_cell,
                        const void* new_cell, const void* gates, float* d_gates,
                        void* d_old_cell, int64_t b0, int64_t b1, int64_t S) {
  auto run = [&](auto e) {
    using E = decltype(e);
    backward_rows<E>(static_cast<CP<E>>(grad_h), static_cast<CP<E>>(grad_cell),
                     static_cast<CP<E>>(new_cell), static_cast<CP<E>>(gates), d_gates,
                     static_cast<P<E>>(d_old_cell), b0, b1, S);
  };
  switch (storage) {
    case Storage::Float: return run(F32());
    case Storage::Half: return run(F16());
    case Storage::BFloat16: return run(BF16());
  }
}

void to_float_avx2(Storage storage, const void* src, float* dst, int64_t n) {
  auto run = [&](auto e) {
    using E = decltype(e);
    const auto* in = static_cast<CP<E>>(src);
    for_each_vector(n, [&](int64_t j, const auto& io) { io.store(dst + j, io.load(in + j, e)); });
  };
  switch (storage) {
    case Storage::Float: return run(F32());
    case Storage::Half: return run(F16());
    case Storage::BFloat16: return run(BF16());
  }
}

void from_float_avx2(Storage storage, const float* src, void* dst, int64_t n) {
  auto run = [&](auto e) {
    using E = decltype(e);
    auto* out = static_cast<P<E>>(dst);
    for_each_vector(n, [&](int64_t j, const auto& io) { io.store(out + j, io.load(src + j), e); });
  };
  switch (storage) {
    case Storage::Float: return run(F32());
    case Storage::Half: return run(F16());
    case Storage::BFloat16: return run(BF16());
  }
}

}  // namespace lltm

#else  // not x86-64 with GCC/Clang: only the scalar loops exist.

namespace lltm {
void forward_rows_avx2(Storage, const float*, void*, const void*, void*, void*, void* const*,
                       int64_t, int64_t, int64_t) {
  throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");
}
void backward_rows_avx2(Storage, const void*, const void*, const void*, const void*, float*,
                        void*, int64_t, int64_t, int64_t) {
  throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");
}
void to_float_avx2(Storage, const void*, float*, int64_t) {
  throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");
}
void from_float_avx2(Storage, const float*, void*, int64_t) {
  throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");
}
}  // namespace lltm

#endif
