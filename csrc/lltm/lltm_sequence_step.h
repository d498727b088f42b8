// LLTM over a whole sequence, float32 / bfloat16 / float16: the "step" path's entry points.
// One kernel launch per step each way (lltm_sequence_step_forward.cuh,
// lltm_sequence_step_backward.cuh): the step's recurrent product on tensor cores (float32 as
// 3xTF32, float32-accurate) with the LLTM cell in its epilogue, launched with programmatic
// dependent launch on sm_90 so that a step's launch overlaps the previous step's tail. It
// serves the states the persistent kernels do not hold (W_h of S = 1024 is 12 MiB in float32)
// and, where measured faster, the ones they do. Plain C++ for the callers.
#pragma once

#include <cuda_runtime_api.h>
#include <torch/headeronly/core/ScalarType.h>

#include <cstdint>

#include "lltm/lltm_sequence.h"

namespace lltm {

// Whether the step kernels run this problem on this CUDA device: float32, bfloat16 or float16,
// batch >= 1, sm_80 or newer, and the kernels compiled for it. The kernels themselves take
// the state a multiple of 8 (16-byte rows for the asynchronous copies, even column pairs):
// the caller runs any other state as the zero-padded problem (lltm_sequence_cuda.cu).
bool seq_step_supported(int device, torch::headeronly::ScalarType dtype, int64_t batch,
                        int64_t state);

// The forward's global scratch on `device` for (batch, state) (its tile's split of K over
// CTAs): `floats` floats and `counters` ints, the counters zero before the call; 0 and 0 where
// its tile needs none.
struct StepForwardScratchSize {
  int64_t floats = 0, counters = 0;
};
StepForwardScratchSize seq_step_forward_scratch(int device, torch::headeronly::ScalarType dtype,
                                                int64_t batch, int64_t state);

// The recurrences of lltm_sequence.h on `stream` (seq_step_supported true, state a multiple
// of 8: raises otherwise). The forward takes the scratch that seq_step_forward_scratch sized
// (null where it is 0); the backward takes scratch on the same device: w_h_t (S, 3S) elements
// of T (it writes W_h^T there) and carry (B, S) floats. T = float, c10::Half, c10::BFloat16.
template <typename T>
void seq_step_forward(const SeqForward<T>& args, float* scratch, int* counters,
                      cudaStream_t stream);
template <typename T>
void seq_step_backward(const SeqBackward<T>& args, T* w_h_t, float* carry,
                       cudaStream_t stream);

}  // namespace lltm
