// LLTM over a whole sequence: the persistent CUDA kernels' entry points (one launch for the
// forward recurrence, one for the backward, whatever T; lltm_sequence_persistent.cuh says how
// they work). Plain C++: the callers need no CUDA headers beyond the runtime API's types.
#pragma once

#include <cuda_runtime_api.h>
#include <torch/headeronly/core/ScalarType.h>

#include <cstdint>

#include "lltm/lltm_sequence.h"

namespace lltm {

// Whether the persistent kernels run a problem of this dtype (Float, Half or BFloat16), batch
// and state size on this CUDA device: sm_90 or newer with thread-block cluster launch, kernels
// compiled for sm_90+, batch >= 1, state >= 1, and one cluster's share of W_h plus the buffers
// of at least one batch row fitting a CTA's shared memory (float32: up to S = 512 with 16-CTA
// clusters on an H100; bfloat16 / float16, W_h kept in the half type: up to about S = 700). Both directions must fit; a false answer means the per-step fallback.
bool seq_persistent_supported(int device, torch::headeronly::ScalarType dtype, int64_t batch,
                              int64_t state);

// The recurrences of lltm_sequence.h on `stream` (the buffers on the current device, whose
// seq_persistent_supported answer is true). T = float, c10::Half, c10::BFloat16.
template <typename T>
void seq_persistent_forward(const SeqForward<T>& args, cudaStream_t stream);
template <typename T>
void seq_persistent_backward(const SeqBackward<T>& args, cudaStream_t stream);

}  // namespace lltm
