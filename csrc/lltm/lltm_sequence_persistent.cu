// LLTM over a whole sequence: the launchers of the persistent kernels
// (lltm_sequence_persistent.cuh: float32, and the half types below kMmaMinState;
// lltm_sequence_persistent_mma.cuh: bfloat16 / float16 on tensor cores), and the choice of
// kernel, cluster size and batch rows per cluster.
//
// Cluster size nc (both kernel kinds): 16 CTAs (non-portable: the H100 allows it) for
// S >= 128, where 8 CTAs would leave each with 16 columns or more and the step's GEMM on few
// SMs; else min(8, S). When the 16-CTA cluster cannot be placed (occupancy query 0) or does
// not fit, 8. (MMA kernels, fp16, H100, one build, GPU us/step fwd / bwd at B = 64: S = 256
// nc 16 4.7 / 5.8, nc 8 4.8 / 5.7; S = 384 nc 16 6.5 / 7.6, nc 8 6.7 / 7.1: no clear gain.)
// Batch rows per cluster bc: spread the batch over as many clusters as run at once
// (cudaOccupancyMaxActiveClusters, at most SMs / nc: one CTA per SM), bc = ceil(B / clusters),
// capped by the shared memory of a CTA (its W_h share plus per batch row the two A buffers,
// the GEMM output and the carry; make_plan); more clusters than fit then run in waves (they
// are independent). Neither direction is supported when one batch row does not fit.
#include <cuda_runtime.h>

#include <tuple>
#include <type_traits>

#include "common/cuda_utils.cuh"
#include "lltm/lltm_sequence_persistent.cuh"
#include "lltm/lltm_sequence_persistent_mma.cuh"
#include "lltm/lltm_sequence_persistent.h"

namespace lltm {
namespace {

using persistent::kThreads;
using persistent::make_plan;
using persistent::Plan;

using torch::headeronly::ScalarType;

// bfloat16 and float16 run the tensor-core kernels (lltm_sequence_persistent_mma.cuh) from
// state kMmaMinState on, float32 and the smaller half-type states the FMA kernels
// (lltm_sequence_persistent.cuh); each has its plan type, a Config holds the one in use.
template <typename T>
constexpr bool kHalfType = !std::is_same_v<T, float>;
// Measured on the H100 (fp16, profiler, GPU time per step fwd / bwd; commit 8669b68, before
// the tile product loaded each fragment once per warp and k step): S = 128 FMA 2.3 / 2.5 us,
// MMA 3.9 / 4.7; S = 192 FMA 3.4 / 3.6, MMA 4.4 / 4.4; S = 256 FMA 4.3 / 5.9, MMA 4.7 / 5.3;
// S = 512 MMA 9.7 / 9.2 against FMA 20 / 20 (bfloat16, same kernels).
constexpr int kMmaMinState = 256;

template <typename T>
bool use_mma(int state) {
  return kHalfType<T> && state >= kMmaMinState;
}

struct Config {
  bool mma = false;
  Plan plan{};                  // !mma
  persistent::MmaPlan mplan{};  // mma
  int clusters = 0;             // 0: does not fit
  int nc() const { return mma ? mplan.nc : plan.nc; }
  int threads() const { return mma ? mplan.threads : plan.threads; }
  int64_t smem_bytes() const { return mma ? int64_t(mplan.total) : int64_t(plan.total) * 4; }
};

Config plan_for(bool mma, int state, int nc, int bc, bool backward) {
  Config c;
  c.mma = mma;
  if (mma) {
    c.mplan = persistent::make_mma_plan(state, nc, bc, backward, kThreads);
  } else {
    c.plan = make_plan(state, nc, bc, backward, kThreads);
  }
  return c;
}

template <typename T, int RB>
void* kernel_ptr(bool backward) {
  return backward ? reinterpret_cast<void*>(persistent::backward_kernel<T, RB>)
                  : reinterpret_cast<void*>(persistent::forward_kernel<T, RB>);
}

template <typename T>
void* kernel_for(const Config& c, bool backward) {
  if constexpr (kHalfType<T>) {
    if (c.mma) {
      return backward ? reinterpret_cast<void*>(persistent::backward_mma_kernel<T>)
                      : reinterpret_cast<void*>(persistent::forward_mma_kernel<T>);
    }
  }
  return c.plan.rb == 4 ? kernel_ptr<T, 4>(backward)
                        : c.plan.rb == 2 ? kernel_ptr<T, 2>(backward) : kernel_ptr<T, 1>(backward);
}

cudaLaunchConfig_t launch_config(const Config& c, int clusters, cudaStream_t stream,
                                 cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(clusters * c.nc()));
  cfg.blockDim = dim3(static_cast<unsigned>(c.threads()));
  cfg.dynamicSmemBytes = static_cast<size_t>(c.smem_bytes());
  cfg.stream = stream;
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = static_cast<unsigned>(c.nc());
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

template <typename T>
Config choose_uncached(int device, int64_t batch, int state, bool backward) {
  const cudaDeviceProp& prop = fused_ops::device_properties(device);
  const int64_t limit = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  const int sms = prop.multiProcessorCount;
  const bool mma = use_mma<T>(state);
  for (int c = state >= 128 ? 0 : 1; c < 2; ++c) {
    const int nc = c == 0 ? 16 : (state < 8 ? state : 8);
    // The largest bc that fits (the layout grows with bc, up to the ks padding, so scan).
    int bc_max = 0;
    for (int64_t bc = 1; bc <= batch; ++bc) {
      if (plan_for(mma, state, nc, static_cast<int>(bc), backward).smem_bytes() > limit) break;
      bc_max = static_cast<int>(bc);
    }
    if (bc_max == 0) continue;
    const Config probe = plan_for(mma, state, nc, bc_max, backward);
    void* kernel = kernel_for<T>(probe, backward);
    fused_ops::allow_large_launch(kernel, device, /*non_portable_clusters=*/true);
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = launch_config(probe, 1, nullptr, &attr);
    int fit = 0;
    if (cudaOccupancyMaxActiveClusters(&fit, kernel, &cfg) != cudaSuccess) {
      (void)cudaGetLastError();  // clear it: this size is refused, try the next
      fit = 0;
    }
    if (fit < 1) continue;
    fit = std::min(fit, std::max(1, sms / nc));
    int64_t clusters = std::min<int64_t>(batch, fit);
    int64_t bc = (batch + clusters - 1) / clusters;
    if (bc > bc_max) {
      bc = bc_max;
      clusters = (batch + bc - 1) / bc;
    }
    bc = (batch + clusters - 1) / clusters;
    Config out = plan_for(mma, state, nc, static_cast<int>(bc), backward);
    out.clusters = static_cast<int>(clusters);
    return out;
  }
  return Config{};
}

// choose_uncached, cached per (device, dtype, direction, batch, state).
template <typename T>
Config choose(int device, int64_t batch, int64_t state, bool backward) {
  if (batch < 1 || state < 1 || state > (1 << 20) || batch > (int64_t(1) << 31) / 2) {
    return Config{};
  }
  static fused_ops::Memo<std::tuple<int, bool, int64_t, int64_t>, Config> memo;
  return memo.get(std::make_tuple(device, backward, batch, state), [&] {
    return choose_uncached<T>(device, batch, static_cast<int>(state), backward);
  });
}

// Whether this device launches clusters and this build's kernels hold sm_90 code for it (a
// build without it, e.g. compute_80 PTX JIT-compiled for this device, has kernels that trap),
// asked once per device.
template <typename T>
bool device_runs_kernels(int device) {
  static fused_ops::Memo<int, bool> memo;
  return memo.get(device, [&] {
    if (fused_ops::device_properties(device).major < 9) return false;
    int cluster_launch = 0;
    FUSED_OPS_CUDA_CHECK(
        cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, device));
    if (!cluster_launch) return false;
    cudaFuncAttributes attrs{};
    if (cudaFuncGetAttributes(&attrs, kernel_ptr<T, 1>(false)) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return attrs.ptxVersion >= 90;
  });
}

template <typename T>
bool supported_as(int device, int64_t batch, int64_t state) {
  if (!device_runs_kernels<T>(device)) return false;
  return choose<T>(device, batch, state, false).clusters > 0 &&
         choose<T>(device, batch, state, true).clusters > 0;
}

template <typename T, typename Args>
void launch(const Args& args, bool backward, cudaStream_t stream) {
  if (args.batch < 1 || args.state < 1) return;
  if (!backward && args.steps < 1) return;
  const int device = fused_ops::current_device();
  const Config c = choose<T>(device, args.batch, args.state, backward);
  FUSED_OPS_CHECK(c.clusters > 0, "lltm_sequence: the persistent kernels do not support batch ",
                  fused_ops::num(args.batch), ", state_size ", fused_ops::num(args.state),
                  " on this device (seq_persistent_supported is false)");
  void* kernel = kernel_for<T>(c, backward);
  fused_ops::allow_large_launch(kernel, device, /*non_portable_clusters=*/true);
  cudaLaunchAttribute attr;
  cudaLaunchConfig_t cfg = launch_config(c, c.clusters, stream, &attr);
  void* plan = c.mma ? const_cast<void*>(static_cast<const void*>(&c.mplan))
                     : const_cast<void*>(static_cast<const void*>(&c.plan));
  void* params[2] = {plan, const_cast<Args*>(&args)};
  FUSED_OPS_CUDA_CHECK(cudaLaunchKernelExC(&cfg, kernel, params));
  FUSED_OPS_LAUNCH_CHECK();
}

}  // namespace

bool seq_persistent_supported(int device, ScalarType dtype, int64_t batch, int64_t state) {
  switch (dtype) {
    case ScalarType::Float:
      return supported_as<float>(device, batch, state);
    case ScalarType::Half:
      return supported_as<c10::Half>(device, batch, state);
    case ScalarType::BFloat16:
      return supported_as<c10::BFloat16>(device, batch, state);
    default:
      return false;
  }
}

template <typename T>
void seq_persistent_forward(const SeqForward<T>& args, cudaStream_t stream) {
  launch<T>(args, false, stream);
}

template <typename T>
void seq_persistent_backward(const SeqBackward<T>& args, cudaStream_t stream) {
  launch<T>(args, true, stream);
}

template void seq_persistent_forward<float>(const SeqForward<float>&, cudaStream_t);
template void seq_persistent_forward<c10::Half>(const SeqForward<c10::Half>&, cudaStream_t);
template void seq_persistent_forward<c10::BFloat16>(const SeqForward<c10::BFloat16>&,
                                                    cudaStream_t);
template void seq_persistent_backward<float>(const SeqBackward<float>&, cudaStream_t);
template void seq_persistent_backward<c10::Half>(const SeqBackward<c10::Half>&, cudaStream_t);
template void seq_persistent_backward<c10::BFloat16>(const SeqBackward<c10::BFloat16>&,
                                                     cudaStream_t);

}  // namespace lltm
