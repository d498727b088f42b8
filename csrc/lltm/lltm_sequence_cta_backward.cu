// LLTM over a whole sequence, cta path: the backward kernel's instantiations (float, half,
// bfloat16 x KC in kKcs x RB in {1, 2, 4}; lltm_sequence_cta_table.cuh) behind
// backward_kernel_for (lltm_sequence_cta_kernels.h). One file per direction: two compilations
// that run in parallel.
#include "lltm/lltm_sequence_cta_backward.cuh"
#include "lltm/lltm_sequence_cta_kernels.h"
#include "lltm/lltm_sequence_cta_table.cuh"

namespace lltm::cta {
namespace {

template <typename T, int KC, int RB>
struct BackwardKernel {
  static const void* ptr() { return reinterpret_cast<const void*>(backward_kernel<T, KC, RB>); }
};

}  // namespace

const void* backward_kernel_for(torch::headeronly::ScalarType dtype, int kc, int rb) {
  return kernel_table<BackwardKernel>(dtype, kc, rb);
}

}  // namespace lltm::cta
