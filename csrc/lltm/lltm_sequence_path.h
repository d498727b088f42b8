// LLTM over a sequence on CUDA: which path runs a problem's forward or backward recurrence
// (lltm_sequence_cuda.cu's header comment says what each path is and why auto picks it):
// LLTM_SEQUENCE_PATH, each path's supported() answer and the choice. Host code only, included
// by lltm_sequence_cuda.cu alone.
#pragma once

#include <cstdlib>
#include <cstring>

#include "common/cuda_utils.cuh"
#include "common/dispatch.h"
#include "lltm/lltm_sequence_driver.h"

// The persistent kernels are written alongside this file; until their header exists every
// problem takes the fallback.
#if __has_include("lltm/lltm_sequence_persistent.h")
#include "lltm/lltm_sequence_persistent.h"
#define LLTM_SEQUENCE_HAVE_PERSISTENT 1
#else
#define LLTM_SEQUENCE_HAVE_PERSISTENT 0
#endif
#include "lltm/lltm_sequence_cta.h"
#include "lltm/lltm_sequence_step.h"

namespace lltm {
namespace {  // NOLINT(build/namespaces_headers): one translation unit includes it

enum class SeqPath { kAuto, kCta, kPersistent, kStep, kFallback };

// LLTM_SEQUENCE_PATH, read at every call (a test sets it between calls; getenv costs far
// less than a launch).
SeqPath requested_path() {
  const char* value = std::getenv("LLTM_SEQUENCE_PATH");
  if (value == nullptr || *value == '\0' || std::strcmp(value, "auto") == 0) {
    return SeqPath::kAuto;
  }
  if (std::strcmp(value, "cta") == 0) return SeqPath::kCta;
  if (std::strcmp(value, "persistent") == 0) return SeqPath::kPersistent;
  if (std::strcmp(value, "step") == 0) return SeqPath::kStep;
  if (std::strcmp(value, "fallback") == 0) return SeqPath::kFallback;
  fused_ops::raise<std::invalid_argument>(
      "LLTM_SEQUENCE_PATH must be 'cta', 'persistent', 'step', 'fallback' or 'auto' (or unset), "
      "got '", value, "'");
}

bool persistent_supported(const Tensor& t, const SeqSizes& sz) {
#if LLTM_SEQUENCE_HAVE_PERSISTENT
  return seq_persistent_supported(t.get_device_index(), t.scalar_type(), sz.batch, sz.state);
#else
  (void)t;
  (void)sz;
  return false;
#endif
}

bool cta_supported(const Tensor& t, const SeqSizes& sz) {
  return seq_cta_supported(t.get_device_index(), t.scalar_type(), sz.batch, sz.state);
}

bool step_supported(const Tensor& t, const SeqSizes& sz) {
  return seq_step_supported(t.get_device_index(), t.scalar_type(), sz.batch, sz.state);
}

// From this state on the half types' forward takes the step kernels where both they and the
// cluster kernels run; the backward keeps the cluster kernels wherever they run (H100, fp16,
// B = 64, benchmarks/results/lltm_sequence_step_h100.md: forward S = 256 cluster 0.52 ms
// against step 0.58-0.71, S = 512 cluster 0.98 against step 0.77; backward S = 512 cluster
// 1.15 against step 1.44). The two directions share the buffers of lltm_sequence.h, so the
// forward and the backward of one problem may run on different paths.
constexpr int64_t kStepMinForwardState = 512;

// float32 takes the step kernels (the split tile, 3xTF32) over the cluster kernels from
// these states and batches on (H100, each path forced, benchmarks/results/
// lltm_sequence_float32_step_h100.md, ms fwd / fwd+bwd): S = 512, B = 64: step 1.27 / 3.92
// against cluster 2.19 / 6.27; B = 32 (T = 64): 0.48 / 1.47 against 0.65 / 1.76; but B = 4
// (T = 256): 1.80 / 5.00 against 0.74 / 1.74. S = 384, B = 64: 0.90 / 2.58 against 1.07 / 2.59
// (the backward alone 1.68 against 1.52); B = 16 (T = 256): 1.65 / 4.41 against 0.95 / 2.32.
// S = 256, B = 64: 0.75 / 2.12 against 0.61 / 1.67. Between (T = 128, F = 512): S = 416,
// B = 64: 1.17 / 3.47 against 1.40 / 4.74; S = 448, B = 64: 1.22 / 3.62 against 1.44 / 4.82;
// S = 448, B = 32 (F = 256): 1.01 / 2.87 against 0.87 / 2.88 (the backward alone 1.86 against
// 2.01). So the forward from S = 384 at B >= 64 and from S = 512 at B >= 32, the backward
// from S = 416 at B >= 32. A step's fixed cost (launch, the wait on the previous step, the
// pipeline's fill) is a few microseconds, which the cluster kernels' on-chip steps undercut
// at small batches.
constexpr int64_t kStepMinStateFloatForward = 384;
constexpr int64_t kStepMinStateFloatBackward = 416;
constexpr int64_t kStepMinBatchFloat = 32;
constexpr int64_t kStepFullStateFloat = 512;      // from here on B >= kStepMinBatchFloat
constexpr int64_t kStepMinBatchFloatBelowFull = 64;  // the forward's batch below it

// Past S = 704 in float32 the fallback's backward (a cuBLAS GEMM and a fused kernel per step)
// measured faster than the step kernels' (H100, benchmarks/results/
// lltm_sequence_float32_step_h100.md, the backward alone = fwd+bwd less fwd, ms, the step
// kernels with their default tile unless named): S = 1024, B = 1 (T = 2048): fallback 25.2
// against step (tiny tile) 36.9; B = 4 (T = 1024): 17.5 against 19.1; S = 1000, B = 16
// (T = 256): 5.2 against 5.6; B = 256 (T = 32): 3.5 against 4.5; S = 768, B = 64: 7.1
// against 8.8, B = 16: 10.3 against 10.0 (split tile); but S = 600, B = 8: 9.5 against 6.3.
constexpr int64_t kStepMaxStateFloatBackward = 704;

bool float_takes_step(const SeqSizes& sz, bool backward) {
  const int64_t B = sz.batch, S = sz.state;
  if (B < kStepMinBatchFloat) return false;
  if (backward) return S >= kStepMinStateFloatBackward;
  return S >= kStepFullStateFloat || (S >= kStepMinStateFloatForward &&
                                      B >= kStepMinBatchFloatBelowFull);
}

// Where large batches leave the cluster kernels behind. A cluster's per-step time grows with
// its batch slice times S^2 (the slice's GEMV on the cluster's SMs), while the step kernels
// and the fallback's cuBLAS GEMM spread a step over the whole GPU. H100, T = 128, F = 128,
// each path forced, same run (benchmarks/results/lltm_sequence_crossover_h100.md), ms:
// - float32, cluster against fallback, forward: S = 512, B = 128: 3.37 / 3.30, B = 192:
//   4.71 / 2.97, B = 256: 6.68 / 3.43; S = 384, B = 128: 1.30 / 3.15, B = 256: 4.10 / 3.43;
//   S = 256, B = 256: 1.70 / 2.46. Backward (fwd+bwd less fwd): S = 512, B = 64: 3.69 / 3.56,
//   B = 96: 5.15 / 4.37, B = 128: 7.20 / 2.53; S = 384, B = 128: 3.41 / 3.34, B = 256: 6.30 /
//   4.48; S = 256, B = 256: 3.63 / 3.80. So the fallback from B S^2 = 2^25 forward and from
//   B S^2 = 18 * 2^20 backward (the fallback's time is the host's launch rate, about 20 us a
//   step, so these lie where the cluster's step passes that).
// - bfloat16, cluster against step, forward: S = 256, B = 64: 0.52 / 0.76, B = 128: 0.90 /
//   0.64, B = 256: 1.27 / 0.87; backward: S = 256, B = 128: 1.18 / 1.28, B = 256: 1.76 / 1.24;
//   S = 512, B = 64: 1.11 / 1.40, B = 128: 2.39 / 1.73, B = 256: 3.64 / 2.78. So the step
//   kernels from B S = 2^15 forward and B S = 3 * 2^14 backward.
constexpr int64_t kFallbackMinWorkForward = int64_t{1} << 25;    // B S^2, float32
constexpr int64_t kFallbackMinWorkBackward = int64_t{18} << 20;  // B S^2, float32
constexpr int64_t kStepMinBatchStateForward = int64_t{1} << 15;  // B S, half types
constexpr int64_t kStepMinBatchStateBackward = int64_t{3} << 14; // B S, half types

// Whether auto leaves the cluster kernels for a problem they run: for the step kernels, or
// in float32 for the fallback where the step kernels do not run (GPUs before sm_80), from
// the measured sizes above on (the float32 ones measured against the fallback, before float32
// had step kernels; where float_takes_step holds, float32 takes the step kernels regardless).
bool past_cluster_crossover(const Tensor& t, const SeqSizes& sz, bool backward) {
  const int64_t B = sz.batch, S = sz.state;
  if (t.scalar_type() == torch::headeronly::ScalarType::Float) {
    return B * S * S >= (backward ? kFallbackMinWorkBackward : kFallbackMinWorkForward);
  }
  return B * S >= (backward ? kStepMinBatchStateBackward : kStepMinBatchStateForward);
}

[[noreturn]] void raise_unsupported(const Tensor& t, const SeqSizes& sz, const char* path,
                                    const char* what, const char* missing) {
  const cudaDeviceProp& prop = fused_ops::device_properties(t);
  fused_ops::raise<std::invalid_argument>(
      "LLTM_SEQUENCE_PATH=", path, ", but the ", what, " do not run ",
      fused_ops::dtype_str(t.scalar_type()), " with batch ", fused_ops::num(sz.batch),
      " and state_size ", fused_ops::num(sz.state), " on ", prop.name, " (sm_",
      fused_ops::num(prop.major), fused_ops::num(prop.minor), missing, ")",
      "; unset LLTM_SEQUENCE_PATH or set it to 'fallback'");
}

// The path that runs this problem's forward or backward recurrence (kCta, kPersistent, kStep
// or kFallback); raises where a forced path does not support it.
SeqPath pick_path(const Tensor& t, const SeqSizes& sz, bool backward) {
  const SeqPath path = requested_path();
  if (path == SeqPath::kFallback) return path;
  if (path == SeqPath::kCta) {
    if (!cta_supported(t, sz)) {
      raise_unsupported(t, sz, "cta", "single-CTA LLTM sequence kernels (state_size <= 128)", "");
    }
    return path;
  }
  if (path == SeqPath::kStep) {
    if (!step_supported(t, sz)) {
      raise_unsupported(t, sz, "step",
                        "per-step tensor-core LLTM sequence kernels (float32 / bfloat16 / "
                        "float16, sm_80+)",
                        "");
    }
    return path;
  }
  if (path == SeqPath::kAuto && cta_supported(t, sz)) return SeqPath::kCta;
  const bool step = path == SeqPath::kAuto && step_supported(t, sz);
  const bool half = t.scalar_type() != torch::headeronly::ScalarType::Float;
  if (step && half && !backward && sz.state >= kStepMinForwardState) return SeqPath::kStep;
  if (step && !half && backward && sz.state > kStepMaxStateFloatBackward) {
    return SeqPath::kFallback;
  }
  if (step && !half && float_takes_step(sz, backward)) return SeqPath::kStep;
  const bool supported = persistent_supported(t, sz);
  if (path == SeqPath::kPersistent && !supported) {
    raise_unsupported(t, sz, "persistent", "persistent LLTM sequence kernels",
                      LLTM_SEQUENCE_HAVE_PERSISTENT ? "" : "; this build has none");
  }
  if (supported && path == SeqPath::kAuto && past_cluster_crossover(t, sz, backward)) {
    if (step) return SeqPath::kStep;
    if (!half) return SeqPath::kFallback;
  }
  if (supported) return SeqPath::kPersistent;
  return step ? SeqPath::kStep : SeqPath::kFallback;
}

}  // namespace
}  // namespace lltm
