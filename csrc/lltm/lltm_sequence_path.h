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
                        "per-step tensor-core LLTM sequence kernels (bfloat16 / float16, "
                        "state_size a multiple of 8, sm_80+)",
                        "");
    }
    return path;
  }
  if (path == SeqPath::kAuto && cta_supported(t, sz)) return SeqPath::kCta;
  const bool step = path == SeqPath::kAuto && step_supported(t, sz);
  if (step && !backward && sz.state >= kStepMinForwardState) return SeqPath::kStep;
  const bool supported = persistent_supported(t, sz);
  if (path == SeqPath::kPersistent && !supported) {
    raise_unsupported(t, sz, "persistent", "persistent LLTM sequence kernels",
                      LLTM_SEQUENCE_HAVE_PERSISTENT ? "" : "; this build has none");
  }
  if (supported) return SeqPath::kPersistent;
  return step ? SeqPath::kStep : SeqPath::kFallback;
}

}  // namespace
}  // namespace lltm
