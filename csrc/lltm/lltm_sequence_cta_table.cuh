// LLTM over a whole sequence, cta path: the (dtype, KC, RB) -> kernel table that each
// instantiation file (lltm_sequence_cta_forward.cu, lltm_sequence_cta_backward.cu) builds for
// its direction. Kernel<T, KC, RB>::ptr() names one kernel; the table instantiates all of
// float, half, bfloat16 x KC in kKcs (lltm_sequence_cta.cuh) x RB in {1, 2, 4}.
#pragma once

#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include "lltm/lltm_sequence_cta.cuh"

namespace lltm::cta {

template <template <typename, int, int> class Kernel, typename T, int KC>
const void* kernel_by_rb(int rb) {
  switch (rb) {
    case 1:
      return Kernel<T, KC, 1>::ptr();
    case 2:
      return Kernel<T, KC, 2>::ptr();
    case 4:
      return Kernel<T, KC, 4>::ptr();
    default:
      return nullptr;
  }
}

// The kernel of (kc, rb) among KCs I..: the first of kKcs[I..] equal to kc.
template <template <typename, int, int> class Kernel, typename T, size_t I = 0>
const void* kernel_by_kc(int kc, int rb) {
  if constexpr (I == sizeof(kKcs) / sizeof(kKcs[0])) {
    return nullptr;
  } else {
    if (kc == kKcs[I]) return kernel_by_rb<Kernel, T, kKcs[I]>(rb);
    return kernel_by_kc<Kernel, T, I + 1>(kc, rb);
  }
}

// The kernel of (dtype, kc, rb), or nullptr for a combination that has none.
template <template <typename, int, int> class Kernel>
const void* kernel_table(torch::headeronly::ScalarType dtype, int kc, int rb) {
  using torch::headeronly::ScalarType;
  switch (dtype) {
    case ScalarType::Float:
      return kernel_by_kc<Kernel, float>(kc, rb);
    case ScalarType::Half:
      return kernel_by_kc<Kernel, c10::Half>(kc, rb);
    case ScalarType::BFloat16:
      return kernel_by_kc<Kernel, c10::BFloat16>(kc, rb);
    default:
      return nullptr;
  }
}

}  // namespace lltm::cta
