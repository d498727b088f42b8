// LLTM over a whole sequence, cta path: the launcher and the choice of batch rows per CTA.
//
// One kernel per direction (lltm_sequence_cta_{forward,backward}.cuh); KC (choose_kc) and the
// threads (two lanes a column) follow from S alone.
// Rows per CTA RB in {1, 2, 4}: the CTAs are independent, so the fewest rows per CTA that let
// every CTA be resident at once (ceil(B / RB) <= CTAs per SM x SMs, from the occupancy query)
// give the shortest step: one row per CTA costs 3 S^2 FMAs a step on an SM. Beyond that, RB = 4
// and the CTAs run in waves.
#include <cuda_runtime.h>

#include <tuple>
#include <type_traits>

#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include "common/cuda_utils.cuh"
#include "lltm/lltm_sequence_cta.cuh"
#include "lltm/lltm_sequence_cta.h"
#include "lltm/lltm_sequence_cta_kernels.h"

namespace lltm {
namespace {

using cta::Plan;
using torch::headeronly::ScalarType;

struct Config {
  Plan plan;
  const void* kernel = nullptr;  // nullptr: not supported
  int64_t ctas = 0;
};

const void* kernel_for(ScalarType dtype, int kc, int rb, bool backward) {
  return backward ? cta::backward_kernel_for(dtype, kc, rb)
                  : cta::forward_kernel_for(dtype, kc, rb);
}

Plan plan_for(int state, int kc, int rb, bool backward) {
  return backward ? cta::make_backward_plan(state, kc, rb)
                  : cta::make_forward_plan(state, kc, rb);
}

Config choose_uncached(int device, ScalarType dtype, int64_t batch, int state, bool backward) {
  const int kc = cta::choose_kc(state);
  if (kc == 0) return Config{};
  const cudaDeviceProp& prop = fused_ops::device_properties(device);
  Config best;
  for (int rb = 1; rb <= 4; rb *= 2) {
    const void* kernel = kernel_for(dtype, kc, rb, backward);
    if (kernel == nullptr) continue;
    const Plan p = plan_for(state, kc, rb, backward);
    const size_t smem = static_cast<size_t>(p.total) * 4;
    if (smem > prop.sharedMemPerBlockOptin) continue;
    cudaFuncAttributes attrs{};
    if (cudaFuncGetAttributes(&attrs, kernel) != cudaSuccess) {
      (void)cudaGetLastError();  // no image for this device: not supported
      return Config{};
    }
    fused_ops::allow_large_launch(kernel, device, /*non_portable_clusters=*/false);
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, p.threads, smem) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      per_sm = 0;
    }
    if (per_sm < 1) continue;
    best.plan = p;
    best.kernel = kernel;
    best.ctas = (batch + rb - 1) / rb;
    if (best.ctas <= int64_t(per_sm) * prop.multiProcessorCount) break;
  }
  return best;
}

// choose_uncached, cached per (device, dtype, direction, batch, state).
Config choose(int device, ScalarType dtype, int64_t batch, int64_t state, bool backward) {
  if (batch < 1 || state < 1 || state > cta::kMaxState || batch > (int64_t(1) << 33)) {
    return Config{};
  }
  static fused_ops::Memo<std::tuple<int, ScalarType, bool, int64_t, int64_t>, Config> memo;
  return memo.get(std::make_tuple(device, dtype, backward, batch, state), [&] {
    return choose_uncached(device, dtype, batch, static_cast<int>(state), backward);
  });
}

template <typename T>
constexpr ScalarType dtype_of() {
  if constexpr (std::is_same_v<T, float>) {
    return ScalarType::Float;
  } else if constexpr (std::is_same_v<T, c10::Half>) {
    return ScalarType::Half;
  } else {
    return ScalarType::BFloat16;
  }
}

// The CTAs launched.
template <typename T, typename Args>
int64_t launch(const Args& args, bool backward, cudaStream_t stream) {
  if (args.batch < 1 || args.state < 1 || args.steps < 1) return 0;
  const int device = fused_ops::current_device();
  const Config c = choose(device, dtype_of<T>(), args.batch, args.state, backward);
  FUSED_OPS_CHECK(c.kernel != nullptr, "lltm_sequence: the cta kernels do not support batch ",
                  fused_ops::num(args.batch), ", state_size ", fused_ops::num(args.state),
                  " on this device (seq_cta_supported is false)");
  FUSED_OPS_CHECK(c.ctas <= int64_t(0x7fffffff), "lltm_sequence: batch too large for the grid");
  void* params[2] = {const_cast<Plan*>(&c.plan), const_cast<Args*>(&args)};
  FUSED_OPS_CUDA_CHECK(cudaLaunchKernel(c.kernel, dim3(static_cast<unsigned>(c.ctas)),
                                        dim3(static_cast<unsigned>(c.plan.threads)), params,
                                        static_cast<size_t>(c.plan.total) * 4, stream));
  FUSED_OPS_LAUNCH_CHECK();
  return c.ctas;
}

}  // namespace

bool seq_cta_supported(int device, ScalarType dtype, int64_t batch, int64_t state) {
  if (dtype != ScalarType::Float && dtype != ScalarType::Half && dtype != ScalarType::BFloat16) {
    return false;
  }
  return choose(device, dtype, batch, state, false).kernel != nullptr &&
         choose(device, dtype, batch, state, true).kernel != nullptr;
}

template <typename T>
void seq_cta_forward(const SeqForward<T>& args, cudaStream_t stream) {
  launch<T>(args, false, stream);
}

template <typename T>
int64_t seq_cta_backward(const SeqBackward<T>& args, cudaStream_t stream) {
  return launch<T>(args, true, stream);
}

template void seq_cta_forward<float>(const SeqForward<float>&, cudaStream_t);
template void seq_cta_forward<c10::Half>(const SeqForward<c10::Half>&, cudaStream_t);
template void seq_cta_forward<c10::BFloat16>(const SeqForward<c10::BFloat16>&, cudaStream_t);
template int64_t seq_cta_backward<float>(const SeqBackward<float>&, cudaStream_t);
template int64_t seq_cta_backward<c10::Half>(const SeqBackward<c10::Half>&, cudaStream_t);
template int64_t seq_cta_backward<c10::BFloat16>(const SeqBackward<c10::BFloat16>&,
                                                 cudaStream_t);

}  // namespace lltm
