// LLTM over a whole sequence, the "step" path (float32, bfloat16, float16): the launchers of
// the step kernels (lltm_sequence_step_forward.cuh, lltm_sequence_step_backward.cuh) and the
// choice of tile.
//
// Tiles (rows BM x state columns J per CTA): "big" 64 x 32 with 8 warps where that gives most
// SMs a CTA (ceil(B / 64) ceil(S / 32) >= 3/4 of the SMs, e.g. B = 256, S = 1024: 128 CTAs),
// else "split": 32 x 8 (B = 64, S = 512: 128 CTAs) with each stage's k steps split over 4 sets
// of 2 warps, which measured faster than the same tile on 2 warps ("small") in every dtype
// (H100, benchmarks/results/lltm_sequence_float32_step_h100.md: float16 (128, 64, 512, 512)
// forward 0.70 against 0.81 ms, (1024, 4, 64, 1024) 5.75 / 16.35 against 7.78 / 22.64 ms fwd /
// fwd+bwd; float32 (128, 64, 512, 512) 1.27 / 3.92 against 1.62 / 4.97): there each warp's
// chain of dependent MMAs per stage is 4 times shorter (float32: 3 MMAs a k step) and 4 times
// as many threads issue the copies. At batches up to 16, "tiny": the split tile with one row
// tile of 16 on 4 warps (half the copies and A fragments a stage of the 32-row tile, whose
// rows are mostly zero fill there), for float32 both ways and the half types' backward (H100,
// same run, fwd / fwd+bwd ms against split: float32 (256, 2, 32, 1001) 2.56 / 7.30 against
// 3.09 / 8.89, (1024, 4, 64, 1024) 10.00 / 29.06 against 12.11 / 35.33, (256, 16, 32, 1000)
// 2.76 / 8.31 against 3.32 / 9.76; bfloat16 (1024, 4, 64, 1024) 6.17 / 14.61 against 5.92 /
// 15.92: its forward slower). At batches up to 4 the float32 forward splits each step's K
// over 4 CTAs of the tiny tile ("tinyk", lltm_sequence_step_gemm.cuh's KC: the last CTA of
// an output tile adds the 4 partial sums in a fixed order and runs the epilogue), ~10% faster
// there. LLTM_STEP_TILE=big|small|split|tiny|tinyk forces one,
// LLTM_STEP_BWD_TILE=wide the backward's 64 x 64 tile (measurements). Each step is one
// cudaLaunchKernelEx with the programmatic stream serialization attribute on sm_90
// (LLTM_STEP_PDL=0 turns it off): the next step's grid is launched while this one runs and
// its CTAs wait in griddepcontrol.wait, so the launch latency between dependent steps is
// hidden; the data dependency is unchanged (the wait returns only after the previous grid has
// finished and its writes are visible).
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <tuple>
#include <type_traits>

#include "common/cuda_utils.cuh"
#include "lltm/lltm_sequence_step.h"
#include "lltm/lltm_sequence_step_backward.cuh"
#include "lltm/lltm_sequence_step_forward.cuh"

namespace lltm {
namespace {

using torch::headeronly::ScalarType;
using step::BwdBig;
using step::BwdSmall;
using step::BwdSplit;
using step::BwdTiny;
using step::BwdWide;
using step::FwdBig;
using step::FwdSmall;
using step::FwdSplit;
using step::FwdTiny;
using step::FwdTinyK;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

enum class TileKind { kBig, kSmall, kSplit, kTiny, kTinyK };

// Batches up to this take the tiny tile where it measured faster (see the top of this file).
constexpr int64_t kTinyMaxBatch = 16;

// The tile that runs (batch, state) on this device (see the top of this file); tiny_ok: the
// tiny tile measured faster than the split tile for this dtype and direction.
TileKind pick_tile(int device, int64_t batch, int64_t state, bool tiny_ok) {
  const char* forced = std::getenv("LLTM_STEP_TILE");
  if (forced != nullptr && std::strcmp(forced, "big") == 0) return TileKind::kBig;
  if (forced != nullptr && std::strcmp(forced, "small") == 0) return TileKind::kSmall;
  if (forced != nullptr && std::strcmp(forced, "split") == 0) return TileKind::kSplit;
  if (forced != nullptr && std::strcmp(forced, "tiny") == 0) return TileKind::kTiny;
  if (forced != nullptr && std::strcmp(forced, "tinyk") == 0) return TileKind::kTinyK;
  const int sms = fused_ops::device_properties(device).multiProcessorCount;
  if (ceil_div(batch, 64) * ceil_div(state, 32) * 4 >= 3 * static_cast<int64_t>(sms)) {
    return TileKind::kBig;
  }
  return tiny_ok && batch <= kTinyMaxBatch ? TileKind::kTiny : TileKind::kSplit;
}

// Batches up to this take the split-K tiny tile in the float32 forward (H100, same run,
// fwd ms against the tiny tile: (2048, 1, 32, 1024) 17.7 against 19.9, (256, 2, 32, 1001) 2.39
// against 2.59, (1024, 4, 64, 1024) 9.25 against 10.20; but (512, 8, 64, 600) 3.72 against
// 3.47 and (256, 16, 32, 1000) 3.19 against 2.80).
constexpr int64_t kTinyKMaxBatch = 4;

// The forward's tile: pick_tile's, with the float32 tiny tile split over 4 CTAs along K at
// batches up to kTinyKMaxBatch (FwdTinyK).
TileKind forward_tile(int device, bool f32, int64_t batch, int64_t state) {
  const TileKind k = pick_tile(device, batch, state, f32);
  return k == TileKind::kTiny && f32 && batch <= kTinyKMaxBatch &&
                 std::getenv("LLTM_STEP_TILE") == nullptr
             ? TileKind::kTinyK
             : k;
}

bool use_pdl(int device) {
  const char* v = std::getenv("LLTM_STEP_PDL");
  if (v != nullptr && std::strcmp(v, "0") == 0) return false;
  return fused_ops::device_properties(device).major >= 9;
}

template <typename Tl>
cudaLaunchConfig_t launch_config(int64_t batch, int64_t state, cudaStream_t stream, bool pdl,
                                 cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(ceil_div(batch, Tl::BM)),
                     static_cast<unsigned>(ceil_div(state, Tl::J)), static_cast<unsigned>(Tl::KC));
  cfg.blockDim = dim3(Tl::kThreads);
  cfg.dynamicSmemBytes = Tl::kSmemBytes;
  cfg.stream = stream;
  attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr->val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cfg;
}

template <typename Tl, typename T>
void forward_steps(const SeqForward<T>& a, step::KSplit split, int device, cudaStream_t stream) {
  const int64_t B = a.batch, S = a.state;
  auto* kernel = step::step_forward_kernel<Tl, T>;
  fused_ops::allow_large_launch(reinterpret_cast<const void*>(kernel), device, false);
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = launch_config<Tl>(B, S, stream, use_pdl(device), &attr);
  for (int64_t t = 0; t < a.steps; ++t) {
    step::StepForward<T> p = step::forward_step_params(a, t);
    p.split = split;
    FUSED_OPS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
  }
  FUSED_OPS_LAUNCH_CHECK();
}

template <typename Tl, typename T>
void backward_steps(const SeqBackward<T>& a, const T* w_h_t, float* carry, int device,
                    cudaStream_t stream) {
  const int64_t B = a.batch, S = a.state;
  auto* kernel = step::step_backward_kernel<Tl, T>;
  fused_ops::allow_large_launch(reinterpret_cast<const void*>(kernel), device, false);
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = launch_config<Tl>(B, S, stream, use_pdl(device), &attr);
  // t = -1: the final launch (d_h0 = grad_hs[0] + dz_0 W_h, d_c0 = carry).
  for (int64_t t = a.steps - 1; t >= -1; --t) {
    const step::StepBackward<T> p = step::backward_step_params(a, w_h_t, carry, t);
    FUSED_OPS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
  }
  FUSED_OPS_LAUNCH_CHECK();
}

// Whether this device runs the kernels: sm_80+ (mma.sync bf16 and tf32, cp.async) and this
// build holds code of at least that architecture for it, asked once per device.
bool device_runs_kernels(int device) {
  static fused_ops::Memo<int, bool> memo;
  return memo.get(device, [&] {
    if (fused_ops::device_properties(device).major < 8) return false;
    cudaFuncAttributes attrs{};
    if (cudaFuncGetAttributes(&attrs, step::step_forward_kernel<FwdSmall, c10::Half>) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return attrs.ptxVersion >= 80;
  });
}

// The kernels' own requirement (the caller pads other states: lltm_sequence_cuda.cu).
void check_state(int64_t state) {
  if (state % 8 != 0) {
    fused_ops::raise<std::runtime_error>(
        "lltm_sequence (internal): the step kernels need the state a multiple of 8, got ",
        fused_ops::num(state));
  }
}

}  // namespace

bool seq_step_supported(int device, ScalarType dtype, int64_t batch, int64_t state) {
  if (dtype != ScalarType::Float && dtype != ScalarType::Half && dtype != ScalarType::BFloat16) {
    return false;
  }
  if (batch < 1 || state < 1) return false;  // S not a multiple of 8: padded by the caller
  if (ceil_div(state, 8) > 65535) return false;  // grid y
  return device_runs_kernels(device);
}

StepForwardScratchSize seq_step_forward_scratch(int device, ScalarType dtype, int64_t batch,
                                                int64_t state) {
  if (forward_tile(device, dtype == ScalarType::Float, batch, state) != TileKind::kTinyK) {
    return {};
  }
  const int64_t tiles = ceil_div(batch, FwdTinyK::BM) * ceil_div(state, FwdTinyK::J);
  return {tiles * FwdTinyK::KC * FwdTinyK::kSlotFloats, tiles};
}

template <typename T>
void seq_step_forward(const SeqForward<T>& args, float* scratch, int* counters,
                      cudaStream_t stream) {
  if (args.steps < 1 || args.batch < 1 || args.state < 1) return;
  check_state(args.state);
  const int device = fused_ops::current_device();
  step::KSplit none;
  switch (forward_tile(device, std::is_same_v<T, float>, args.batch, args.state)) {
    case TileKind::kBig:
      forward_steps<FwdBig>(args, none, device, stream);
      break;
    case TileKind::kSmall:
      forward_steps<FwdSmall>(args, none, device, stream);
      break;
    case TileKind::kSplit:
      forward_steps<FwdSplit>(args, none, device, stream);
      break;
    case TileKind::kTiny:
      forward_steps<FwdTiny>(args, none, device, stream);
      break;
    case TileKind::kTinyK:
      if (scratch == nullptr || counters == nullptr) {
        fused_ops::raise<std::runtime_error>(
            "lltm_sequence (internal): the split-K step tile needs its scratch");
      }
      forward_steps<FwdTinyK>(
          args, step::KSplit{scratch, counters, ceil_div(args.batch, FwdTinyK::BM)}, device,
          stream);
      break;
  }
}

template <typename T>
void seq_step_backward(const SeqBackward<T>& args, T* w_h_t, float* carry,
                       cudaStream_t stream) {
  if (args.steps < 1 || args.batch < 1 || args.state < 1) return;
  check_state(args.state);
  const int device = fused_ops::current_device();
  const int64_t S = args.state;
  const dim3 block(32, 8), grid(static_cast<unsigned>(ceil_div(S, 32)),
                                static_cast<unsigned>(ceil_div(3 * S, 32)));
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>;
  step::transpose_kernel<<<grid, block, 0, stream>>>(
      reinterpret_cast<Bits*>(w_h_t), reinterpret_cast<const Bits*>(args.w_h), 3 * S, S);
  FUSED_OPS_LAUNCH_CHECK();
  const char* wide = std::getenv("LLTM_STEP_BWD_TILE");
  if (wide != nullptr && std::strcmp(wide, "wide") == 0) {
    backward_steps<BwdWide>(args, w_h_t, carry, device, stream);
    return;
  }
  switch (pick_tile(device, args.batch, S, true)) {
    case TileKind::kBig:
      backward_steps<BwdBig>(args, w_h_t, carry, device, stream);
      break;
    case TileKind::kSmall:
      backward_steps<BwdSmall>(args, w_h_t, carry, device, stream);
      break;
    case TileKind::kSplit:
      backward_steps<BwdSplit>(args, w_h_t, carry, device, stream);
      break;
    case TileKind::kTiny:
    case TileKind::kTinyK:  // the backward has no split-K tile: LLTM_STEP_TILE=tinyk runs tiny
      backward_steps<BwdTiny>(args, w_h_t, carry, device, stream);
      break;
  }
}

template void seq_step_forward<float>(const SeqForward<float>&, float*, int*, cudaStream_t);
template void seq_step_backward<float>(const SeqBackward<float>&, float*, float*, cudaStream_t);
template void seq_step_forward<c10::Half>(const SeqForward<c10::Half>&, float*, int*,
                                            cudaStream_t);
template void seq_step_forward<c10::BFloat16>(const SeqForward<c10::BFloat16>&, float*, int*,
                                                cudaStream_t);
template void seq_step_backward<c10::Half>(const SeqBackward<c10::Half>&, c10::Half*, float*,
                                           cudaStream_t);
template void seq_step_backward<c10::BFloat16>(const SeqBackward<c10::BFloat16>&,
                                               c10::BFloat16*, float*, cudaStream_t);

}  // namespace lltm
