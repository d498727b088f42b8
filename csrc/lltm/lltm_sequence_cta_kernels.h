// LLTM over a whole sequence, cta path: the kernel table shared by its launcher
// (lltm_sequence_cta.cu) and the two files that instantiate the kernels (through
// lltm_sequence_cta_table.cuh), one per direction
// (lltm_sequence_cta_forward.cu, lltm_sequence_cta_backward.cu: separate compilations).
#pragma once

#include <torch/headeronly/core/ScalarType.h>

namespace lltm::cta {

// The kernel of (dtype, KC, RB) (lltm_sequence_cta_{forward,backward}.cuh), as the pointer
// cudaLaunchKernel takes; nullptr for a combination that has none (another dtype, KC not in
// kKcs of lltm_sequence_cta.cuh, RB not in {1, 2, 4}).
const void* forward_kernel_for(torch::headeronly::ScalarType dtype, int kc, int rb);
const void* backward_kernel_for(torch::headeronly::ScalarType dtype, int kc, int rb);

}  // namespace lltm::cta
