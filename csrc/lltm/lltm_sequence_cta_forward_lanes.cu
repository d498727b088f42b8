// LLTM over a whole sequence, cta path: the one-barrier forward kernel's instantiations (float,
// half, bfloat16 x KC in {16, 32, 48, 64} x RB in {1, 2, 4}; lltm_sequence_cta_forward_lanes.cuh)
// behind forward_lanes_kernel_for (lltm_sequence_cta_kernels.h).
#include "lltm/lltm_sequence_cta_forward_lanes.cuh"
#include "lltm/lltm_sequence_cta_kernels.h"
#include "lltm/lltm_sequence_cta_table.cuh"

namespace lltm::cta {
namespace {

template <typename T, int KC, int RB>
struct LanesKernel {
  static const void* ptr() {
    return reinterpret_cast<const void*>(forward_lanes_kernel<T, KC, RB>);
  }
};

template <typename T>
const void* lanes_by_kc(int kc, int rb) {
  switch (kc) {
    case 16:
      return kernel_by_rb<LanesKernel, T, 16>(rb);
    case 32:
      return kernel_by_rb<LanesKernel, T, 32>(rb);
    case 48:
      return kernel_by_rb<LanesKernel, T, 48>(rb);
    case 64:
      return kernel_by_rb<LanesKernel, T, 64>(rb);
    default:
      return nullptr;
  }
}

}  // namespace

const void* forward_lanes_kernel_for(torch::headeronly::ScalarType dtype, int kc, int rb) {
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
