// LLTM over a whole sequence, cta path: the backward kernels' instantiations (float, half,
// bfloat16 x KC in {8, 16, 32} x RB in {1, 2, 4}) and their table (lltm_sequence_cta_kernels.h).
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include "lltm/lltm_sequence_cta_backward.cuh"
#include "lltm/lltm_sequence_cta_kernels.h"

namespace lltm::cta {
namespace {

template <typename T, int KC>
const void* by_rb(int rb) {
  switch (rb) {
    case 1:
      return reinterpret_cast<const void*>(backward_kernel<T, KC, 1>);
    case 2:
      return reinterpret_cast<const void*>(backward_kernel<T, KC, 2>);
    case 4:
      return reinterpret_cast<const void*>(backward_kernel<T, KC, 4>);
    default:
      return nullptr;
  }
}

template <typename T>
const void* by_kc(int kc, int rb) {
  switch (kc) {
    case 8:
      return by_rb<T, 8>(rb);
    case 16:
      return by_rb<T, 16>(rb);
    case 32:
      return by_rb<T, 32>(rb);
    default:
      return nullptr;
  }
}

}  // namespace

const void* backward_kernel_for(torch::headeronly::ScalarType dtype, int kc, int rb) {
  using torch::headeronly::ScalarType;
  switch (dtype) {
    case ScalarType::Float:
      return by_kc<float>(kc, rb);
    case ScalarType::Half:
      return by_kc<c10::Half>(kc, rb);
    case ScalarType::BFloat16:
      return by_kc<c10::BFloat16>(kc, rb);
    default:
      return nullptr;
  }
}

}  // namespace lltm::cta
