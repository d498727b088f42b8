// CUDA helpers shared by every family, on the stable ABI: the device guard, the current
// stream, error checks, cached device properties and kernel attributes, vector packs (pack.h)
// and a 2-D launch shape for kernels that walk a (rows, row_length) array. Every CUDA entry
// point takes a DeviceGuard on its tensors' device and launches on current_stream(tensor).
#pragma once

#include <cuda_runtime.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/macros.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "common/checks.h"
#include "common/pack.h"

namespace fused_ops {

using DeviceGuard = torch::stable::accelerator::DeviceGuard;

// Error checks (a failed CUDA call or launch is a RuntimeError naming the error).
#define FUSED_OPS_CUDA_CHECK(EXPR) STD_CUDA_CHECK(EXPR)
#define FUSED_OPS_LAUNCH_CHECK() STD_CUDA_KERNEL_LAUNCH_CHECK()

// The current CUDA stream of t's device (what PyTorch's own kernels and a CUDA graph
// capture use).
inline cudaStream_t current_stream(const Tensor& t) {
  void* stream = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(t.get_device_index(), &stream));
  return static_cast<cudaStream_t>(stream);
}

// cudaGetDeviceProperties of a device, asked once per device and cached.
inline const cudaDeviceProp& device_properties(int device) {
  constexpr int kMaxDevices = 64;
  static cudaDeviceProp props[kMaxDevices];
  static std::once_flag once[kMaxDevices];
  FUSED_OPS_CHECK(device >= 0 && device < kMaxDevices, "torch-fused-ops: CUDA device index ",
                  num(device), " out of range");
  std::call_once(once[device], [device] {
    FUSED_OPS_CUDA_CHECK(cudaGetDeviceProperties(&props[device], device));
  });
  return props[device];
}

inline const cudaDeviceProp& device_properties(const Tensor& t) {
  return device_properties(t.get_device_index());
}

// The current CUDA device (the launchers' key for their per-device caches).
inline int current_device() {
  int device = 0;
  FUSED_OPS_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

// A thread-safe map from Key to what make() computed for it the first time: the launchers'
// per-(device, size) plans and device queries, asked of the driver once rather than per call.
// make() runs outside the lock (it may call into CUDA); two threads may both compute a missing
// entry, and the first one stored wins.
template <typename Key, typename Value>
class Memo {
 public:
  template <typename Make>
  Value get(const Key& key, const Make& make) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = map_.find(key);
      if (it != map_.end()) return it->second;
    }
    Value value = make();
    std::lock_guard<std::mutex> lock(mutex_);
    return map_.emplace(key, value).first->second;
  }

 private:
  std::mutex mutex_;
  std::map<Key, Value> map_;
};

// Once per kernel and device: the kernel's dynamic shared memory limit lifted to the device's
// opt-in maximum (the 48 KiB default is below every persistent plan), and, with
// non_portable_clusters, clusters of more than 8 CTAs allowed.
inline void allow_large_launch(const void* kernel, int device, bool non_portable_clusters) {
  static Memo<std::pair<const void*, int>, bool> done;
  done.get({kernel, device}, [&] {
    const int limit = static_cast<int>(device_properties(device).sharedMemPerBlockOptin);
    FUSED_OPS_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit));
    if (non_portable_clusters) {
      FUSED_OPS_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    }
    return true;
  });
}

// The kernel's dynamic shared memory limit raised to `bytes` where that is above the 48 KiB
// default. The limit is an attribute per kernel and device (the current one: the entry points'
// guard), set by a driver call once per kernel and device, and again only for a larger size:
// set on every launch, it was host time that short calls are bound by. (allow_large_launch
// above lifts it to the device's opt-in maximum at once.)
inline cudaError_t raise_shared_memory_limit(const void* kernel, int bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> raised;
  std::lock_guard<std::mutex> lock(mutex);
  int& limit = raised[{kernel, device}];
  if (bytes <= limit) return cudaSuccess;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess) limit = bytes;
  return e;
}

// Raises the kernel's dynamic shared memory limit where needed (once per device and size) and
// launches it; the launch's error, or the limit's.
template <typename Kernel, typename... Args>
cudaError_t launch_with_smem(Kernel kernel, int grid, int threads, int smem, cudaStream_t stream,
                             Args... args) {
  const cudaError_t e = raise_shared_memory_limit(reinterpret_cast<const void*>(kernel), smem);
  if (e != cudaSuccess) return e;
  kernel<<<grid, threads, smem, stream>>>(args...);
  return cudaGetLastError();
}

// launch_with_smem, as a programmatic dependent launch of the kernel launched before it on
// `stream` where `after` holds (the caller checks for sm_90 and newer): its CTAs may start
// while that kernel's last ones run, once every one of them has executed
// griddepcontrol.launch_dependents, and must execute griddepcontrol.wait before they read
// anything that kernel writes (or write anything it reads).
template <typename Kernel, typename... Args>
cudaError_t launch_with_smem_after(bool after, Kernel kernel, int grid, int threads, int smem,
                                   cudaStream_t stream, Args... args) {
  if (!after) return launch_with_smem(kernel, grid, threads, smem, stream, args...);
  const cudaError_t e = raise_shared_memory_limit(reinterpret_cast<const void*>(kernel), smem);
  if (e != cudaSuccess) return e;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Blocks of up to 256 threads along a row (x) and one block row per array row (y, looped
// with a stride of gridDim.y inside the kernel when rows exceed the grid limit).
struct RowLaunch {
  dim3 grid, block;
  RowLaunch(int64_t rows, int64_t items_per_row) {
    const int64_t threads = std::min<int64_t>(256, (items_per_row + 31) / 32 * 32);
    block = dim3(static_cast<unsigned>(threads));
    grid = dim3(static_cast<unsigned>((items_per_row + threads - 1) / threads),
                static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
  }
};

}  // namespace fused_ops
