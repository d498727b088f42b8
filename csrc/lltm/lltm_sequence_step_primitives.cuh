// LLTM over a sequence, the "step" path: the device primitives of its kernels
// (lltm_sequence_step_gemm.cuh and the kernels that include it): asynchronous copies,
// programmatic dependent launch, the split-K counters' atomic and fence, the dynamic shared
// memory; and their CPU emulation (tests/cuda_emulation.h, FUSED_OPS_EMULATE).
#pragma once

#include <cstdint>
#include <cstring>

#include "lltm/lltm_sequence_mma.cuh"

namespace lltm::step {

#if defined(FUSED_OPS_EMULATE)
// The CPU emulation (tests/cuda_emulation.h): copies happen at once (the pipeline's barriers
// still order them as on the GPU), one grid runs after the other.
inline void cp_async16(void* smem, const void* gmem, bool valid) {
  if (valid) {
    std::memcpy(smem, gmem, 16);
  } else {
    std::memset(smem, 0, 16);
  }
}
inline void cp_async_commit() {}
template <int N>
inline void cp_async_wait() {}
inline void grid_dependency_wait() {}
inline void grid_launch_dependents() {}
inline int atomic_add(int* p, int v) {  // the emulator runs a grid's blocks one at a time
  const int old = *p;
  *p = old + v;
  return old;
}
inline void thread_fence() {}
template <typename T>
inline T* dynamic_smem() {
  return reinterpret_cast<T*>(emu_smem);
}
#else
// 16 bytes global -> shared, asynchronous; valid == false fills the 16 bytes with zeros and
// reads nothing.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t s = mma::smem_address(smem);
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
#else
  __trap();
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most N of this thread's committed copy groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// Programmatic dependent launch (sm_90): wait blocks until the grids this one depends on
// (the previous step's kernel in the stream) have finished and their writes are visible;
// every step kernel calls it before its first global read. launch_dependents lets the next
// step's grid be scheduled early; its CTAs then wait in their own wait. Both are no-ops when
// the launch did not ask for programmatic serialization.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void grid_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::);
#endif
}

__device__ __forceinline__ int atomic_add(int* p, int v) { return atomicAdd(p, v); }
__device__ __forceinline__ void thread_fence() { __threadfence(); }

// The kernel's dynamic shared memory (16-byte aligned: the copies write 16 bytes at a time).
template <typename T>
__device__ __forceinline__ T* dynamic_smem() {
  extern __shared__ uint4 lltm_step_smem[];
  return reinterpret_cast<T*>(lltm_step_smem);
}
#endif

}  // namespace lltm::step
