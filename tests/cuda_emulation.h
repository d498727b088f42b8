// Runs CUDA kernels on the CPU, for the emulation tests (test_rwkv.py, test_lltm.py): one
// std::thread per CUDA thread, std::barrier for __syncthreads, the blocks of a grid one after
// another. Kernels written with the CUDA keywords compile as host C++ with the macros below
// (static shared memory becomes a static local, which the threads of a block share); kernels
// that take dynamic shared memory read it from emu_smem. Also: the float64 helpers that the
// tests' reference computations use.
#pragma once

#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static
#define __syncthreads() emu_barrier->arrive_and_wait()

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local Dim3 threadIdx, blockIdx;
inline Dim3 blockDim, gridDim;
inline thread_local unsigned char* emu_smem;
inline std::barrier<>* emu_barrier;

// Runs body() as `grid` blocks of `threads` threads with smem_bytes of dynamic shared memory,
// filled with huge values before each block so that a read of unstaged memory shows.
inline void launch(int grid, int threads, int smem_bytes, const std::function<void()>& body) {
  std::vector<double> store(smem_bytes / 8 + 2);
  auto* base = reinterpret_cast<unsigned char*>(store.data());
  blockDim.x = threads;
  gridDim.x = grid;
  for (int b = 0; b < grid; ++b) {
    std::memset(base, 0x7f, smem_bytes);
    std::barrier<> bar(threads);
    emu_barrier = &bar;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t, b] {
        threadIdx.x = t;
        blockIdx.x = b;
        emu_smem = base;
        body();
      });
    }
    for (auto& t : pool) t.join();
  }
}

template <typename S>
double as_double(S v) {
  if constexpr (std::is_same_v<S, double>) {
    return v;
  } else {
    return static_cast<double>(static_cast<float>(v));
  }
}

// Relative error of got against want in the 2-norm; infinite if got has a non-finite value.
inline double rel_err(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}
