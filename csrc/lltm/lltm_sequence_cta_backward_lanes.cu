// LLTM over a whole sequence, cta path: the one-barrier backward kernel's instantiations (float,
// half, bfloat16 x KC in {16, 32, 48, 64} x RB in {1, 2, 4}; lltm_sequence_cta_backward_lanes.cuh)
// behind backward_lanes_kernel_for (lltm_sequence_cta_kernels.h).
#include "lltm/lltm_sequence_cta_backward_lanes.cuh"
#include "lltm/lltm_sequence_cta_kernels.h"
#include "lltm/lltm_sequence_cta_table.cuh"

namespace lltm::cta {
namespace {

template <typename T, int KC, int RB>
struct BackwardLanesKernel {
  static const void* ptr() {
    return reinterpret_cast<const void*>(backward_lanes_kernel<T, KC, RB>);
  }
};

template <typename T>
const void* lanes_by_kc(int kc, int rb) {
  switch (kc) {
    case 16:
      return kernel_by_rb<BackwardLanesKernel, T, 16>(rb);
    case 32:
      return kernel_by_rb<BackwardLanesKernel, T, 32>(rb);
    case 48:
      return kernel_by_rb<BackwardLanesKernel, T, 48>(rb);
    case 64:
      return kernel_by_rb<BackwardLanesKernel, T, 64>(rb);
    default:
      return nullptr;
  }
}

}  // namespace

const void* backward_lanes_kernel_for(torch::headeronly::ScalarType dtype, int kc, int rb) {
  using torch::headeronly::ScalarType;
  switch (dtype) {
    case ScalarType::Float:
      return lanes_by_kc<float>(kc, rb);
    case ScalarType::Half:
      return lanes_by_kc<c10::Half>(kc, rb);
    case ScalarType::BFloat16:
      return lanes_by_kc<c10::BFloat16>(kc, rb);
    default:
      return nullptr;
  }
}

}  // namespace lltm::cta
