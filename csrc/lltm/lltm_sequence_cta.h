// LLTM over a whole sequence: the cta path's entry points (single-CTA persistent kernels for
// small states, lltm_sequence_cta.cuh). Plain C++: the callers need only the runtime API types.
#pragma once

#include <cuda_runtime_api.h>
#include <torch/headeronly/core/ScalarType.h>

#include <cstdint>

#include "lltm/lltm_sequence.h"

namespace lltm {

// Whether the cta kernels run a problem of this dtype (Float, Half or BFloat16), batch and
// state size on this CUDA device: 1 <= state <= 128 (all of W_h in one CTA's registers),
// batch >= 1, and the kernels compiled for the device (a CTA of the plan fits an SM).
bool seq_cta_supported(int device, torch::headeronly::ScalarType dtype, int64_t batch,
                       int64_t state);

// The recurrences of lltm_sequence.h on `stream` (seq_cta_supported true for the problem).
// T = float, c10::Half, c10::BFloat16. The backward returns the CTAs it launched (at most
// args.batch; CTA c publishes to args.progress[c] where set).
template <typename T>
void seq_cta_forward(const SeqForward<T>& args, cudaStream_t stream);
template <typename T>
int64_t seq_cta_backward(const SeqBackward<T>& args, cudaStream_t stream);

}  // namespace lltm
