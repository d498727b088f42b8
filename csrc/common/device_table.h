// Tables of constants on the GPU (the FFT kernels' twiddle factors), made once per name and
// device and kept for the process, as PyTorch keeps its cuFFT plans: a table that a kernel
// computes per call costs a launch each call (about 2 us of GPU time, 1-2% of a short
// TimeX call) for the same bits every time.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "common/cuda_utils.cuh"

namespace fused_ops {

namespace detail {

struct DeviceTables {
  std::mutex mutex;
  std::map<std::pair<std::string, int>, Tensor> tables;
};

// Never destroyed: a Tensor released by a static destructor at exit could reach the CUDA
// allocator after CUDA's own teardown.
inline DeviceTables& device_tables() {
  static auto* tables = new DeviceTables();
  return *tables;
}

}  // namespace detail

// The table `name` on the device of `like`: the one kept from an earlier call, else make()
// (which allocates it and launches the kernel that fills it on `stream`), kept once `stream`
// has run that kernel (a host synchronisation, once per name and device, so that a kernel on
// any stream may read the table from then on). While `stream` is captured into a CUDA graph a
// missing table is made for the call alone and not kept: the graph records its kernel, and the
// capture has no host synchronisation in it.
template <typename Make>
Tensor device_table(const std::string& name, const Tensor& like, cudaStream_t stream,
                    const Make& make) {
  detail::DeviceTables& kept = detail::device_tables();
  std::pair<std::string, int> key{name, like.get_device_index()};
  {
    std::lock_guard<std::mutex> lock(kept.mutex);
    const auto it = kept.tables.find(key);
    if (it != kept.tables.end()) return it->second;
  }
  Tensor table = make();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  FUSED_OPS_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return table;
  FUSED_OPS_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::lock_guard<std::mutex> lock(kept.mutex);
  // Two threads may both have made a missing table: the first one kept wins.
  return kept.tables.emplace(std::move(key), table).first->second;
}

}  // namespace fused_ops
