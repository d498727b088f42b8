// The dtype dispatch every kernel uses (header-only, stable ABI): FUSED_OPS_DISPATCH_FLOATING
// runs its body (a lambda) with scalar_t = float, double, c10::Half or c10::BFloat16, as
// ATen's AT_DISPATCH_FLOATING_TYPES_AND2(kHalf, kBFloat16, ...) did; any other dtype raises.
// opmath_t<T> is the type kernels accumulate in: float for the half types, T otherwise.
#pragma once

#include <torch/headeronly/core/Dispatch.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

namespace fused_ops {

template <typename T>
struct OpMath {
  using type = T;
};
template <>
struct OpMath<c10::Half> {
  using type = float;
};
template <>
struct OpMath<c10::BFloat16> {
  using type = float;
};
template <typename T>
using opmath_t = typename OpMath<T>::type;

// The dtype a kernel for `type` accumulates in (as ATen's toOpMathType).
inline torch::headeronly::ScalarType opmath_type(torch::headeronly::ScalarType type) {
  using torch::headeronly::ScalarType;
  return type == ScalarType::Half || type == ScalarType::BFloat16 ? ScalarType::Float : type;
}

}  // namespace fused_ops

#define FUSED_OPS_DISPATCH_FLOATING(TYPE, NAME, ...)                                   \
  THO_DISPATCH_SWITCH(TYPE, NAME,                                                      \
                      THO_DISPATCH_CASE(torch::headeronly::ScalarType::Double, __VA_ARGS__) \
                      THO_DISPATCH_CASE(torch::headeronly::ScalarType::Float, __VA_ARGS__)  \
                      THO_DISPATCH_CASE(torch::headeronly::ScalarType::Half, __VA_ARGS__)   \
                      THO_DISPATCH_CASE(torch::headeronly::ScalarType::BFloat16, __VA_ARGS__))

// float and double only (the accumulation types of the CPU kernels).
#define FUSED_OPS_DISPATCH_FLOAT_DOUBLE(TYPE, NAME, ...)                               \
  THO_DISPATCH_SWITCH(TYPE, NAME,                                                      \
                      THO_DISPATCH_CASE(torch::headeronly::ScalarType::Double, __VA_ARGS__) \
                      THO_DISPATCH_CASE(torch::headeronly::ScalarType::Float, __VA_ARGS__))

// float16 and bfloat16 only (the CPU paths that compute them in float).
#define FUSED_OPS_DISPATCH_HALF(TYPE, NAME, ...)                                       \
  THO_DISPATCH_SWITCH(TYPE, NAME,                                                      \
                      THO_DISPATCH_CASE(torch::headeronly::ScalarType::Half, __VA_ARGS__)   \
                      THO_DISPATCH_CASE(torch::headeronly::ScalarType::BFloat16, __VA_ARGS__))
