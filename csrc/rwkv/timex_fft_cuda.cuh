// RWKV TimeX, FFT algorithm on CUDA: the pointwise kernels around cuFFT (aten::_fft_c2c
// through its AOTI C shim; ATen caches the plans), one thread per element or per frequency
// pair. Memory-bound passes, each reading and writing its data once. A block takes chunks
// of kChunk consecutive elements of one row, each thread kChunk / kThreads of them, kThreads
// apart (coalesced, independent loads in flight), from a grid of at most kMaxBlocks: with
// one element per thread and a block per 256 elements the pack pass ran at a third of the
// H100's memory bandwidth. The arithmetic is in timex_spectral.h, the driver in
// timex_fft.h.
#pragma once

#include <cuda_runtime.h>
#include <torch/csrc/inductor/aoti_torch/generated/c_shim_cuda.h>

#include <algorithm>
#include <cstdint>

#include "common/cuda_utils.cuh"
#include "common/dispatch.h"
#include "rwkv/timex_spectral.h"

namespace rwkv::fft {
namespace gpu {

constexpr int kThreads = 256;

constexpr int kChunk = 4 * kThreads;
constexpr int64_t kMaxBlocks = 4096;

// Calls f(row, column) for every column < n of every row < rows (a 64-bit division per
// chunk, not per element).
template <typename F>
__device__ __forceinline__ void for_each_in_rows(int64_t rows, int64_t n, F&& f) {
  const int64_t per_row = (n + kChunk - 1) / kChunk;
  for (int64_t q = blockIdx.x; q < rows * per_row; q += gridDim.x) {
    const int64_t r = q / per_row;
    const int64_t c0 = (q - r * per_row) * kChunk + threadIdx.x;
#pragma unroll
    for (int i = 0; i < kChunk / kThreads; ++i) {
      const int64_t c = c0 + int64_t{i} * kThreads;
      if (c < n) f(r, c);
    }
  }
}

template <typename in_t, typename acc_t>
__global__ void __launch_bounds__(kThreads) pack_kernel(const in_t* __restrict__ src, int64_t rows,
                                                       int64_t T, bool reversed,
                                                       acc_t* __restrict__ dst, int64_t M) {
  for_each_in_rows(rows, 2 * M, [&](int64_t r, int64_t j) {
    dst[r * 2 * M + j] = j < T ? static_cast<acc_t>(src[r * T + (reversed ? T - 1 - j : j)])
                               : acc_t(0);
  });
}

// dst may be z (in place: each thread reads its two frequencies before writing them).
template <typename acc_t>
__global__ void __launch_bounds__(kThreads) forward_product_kernel(const acc_t* z,
                                                                  const acc_t* __restrict__ zw,
                                                                  acc_t* dst, int64_t rows,
                                                                  int64_t C, int64_t M) {
  using Cpx = spectral::Cpx<acc_t>;
  const acc_t s = acc_t(1) / static_cast<acc_t>(M);
  for_each_in_rows(rows, spectral::pairs_per_row(M), [&](int64_t r, int64_t k) {
    const spectral::Pair p = spectral::pair_of(k, M);
    const Cpx* zr = reinterpret_cast<const Cpx*>(z) + r * M;
    Cpx* dr = reinterpret_cast<Cpx*>(dst) + r * M;
    const Cpx* wr = reinterpret_cast<const Cpx*>(zw) + (r % C) * M;
    const Cpx tw = spectral::twiddle(k, M, acc_t(0));
    Cpx xk, xj, wk, wj, uk, uj;
    spectral::split(zr[p.k], zr[p.j], tw, xk, xj);
    spectral::split(wr[p.k], wr[p.j], tw, wk, wj);
    spectral::merge(xk * wk, xj * wj, tw, s, uk, uj);
    dr[p.k] = uk;
    if (!p.single()) dr[p.j] = uj;
  });
}

// One thread per (channel, frequency pair); the batch in order: a deterministic sum.
template <typename acc_t>
__global__ void __launch_bounds__(kThreads) backward_product_kernel(
    acc_t* __restrict__ zg, const acc_t* __restrict__ zk, const acc_t* __restrict__ zw,
    acc_t* __restrict__ zp, int64_t B, int64_t C, int64_t M) {
  using Cpx = spectral::Cpx<acc_t>;
  const acc_t s = acc_t(1) / static_cast<acc_t>(M);
  for_each_in_rows(C, spectral::pairs_per_row(M), [&](int64_t c, int64_t k) {
    const spectral::Pair p = spectral::pair_of(k, M);
    const Cpx tw = spectral::twiddle(k, M, acc_t(0));
    const Cpx* wr = reinterpret_cast<const Cpx*>(zw) + c * M;
    Cpx wk, wj;
    spectral::split(wr[p.k], wr[p.j], tw, wk, wj);
    Cpx ak{0, 0}, aj{0, 0};
    for (int64_t b = 0; b < B; ++b) {
      Cpx* gr = reinterpret_cast<Cpx*>(zg) + (b * C + c) * M;
      const Cpx* kr = reinterpret_cast<const Cpx*>(zk) + (b * C + c) * M;
      Cpx gk, gj, kk, kj, uk, uj;
      spectral::split(gr[p.k], gr[p.j], tw, gk, gj);
      spectral::split(kr[p.k], kr[p.j], tw, kk, kj);
      ak = ak + spectral::mul_conj(gk, kk);
      aj = aj + spectral::mul_conj(gj, kj);
      spectral::merge(spectral::mul_conj(gk, wk), spectral::mul_conj(gj, wj), tw, s, uk, uj);
      gr[p.k] = uk;
      if (!p.single()) gr[p.j] = uj;
    }
    Cpx* pr = reinterpret_cast<Cpx*>(zp) + c * M;
    Cpx uk, uj;
    spectral::merge(ak, aj, tw, s, uk, uj);
    pr[p.k] = uk;
    if (!p.single()) pr[p.j] = uj;
  });
}

template <typename acc_t, typename out_t>
__global__ void __launch_bounds__(kThreads) crop_kernel(const acc_t* __restrict__ y, int64_t rows,
                                                       int64_t T, int64_t M, acc_t eps,
                                                       bool reversed, out_t* __restrict__ dst) {
  for_each_in_rows(rows, T, [&](int64_t r, int64_t t) {
    dst[r * T + t] = static_cast<out_t>(eps + y[r * 2 * M + (reversed ? T - 1 - t : t)]);
  });
}

// Blocks for rows of n elements each (for_each_in_rows loops over the chunks beyond).
inline unsigned blocks_for(int64_t rows, int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>(rows * ((n + kChunk - 1) / kChunk), kMaxBlocks));
}

}  // namespace gpu

template <typename acc_t>
struct CudaBackend {
  cudaStream_t stream;
  static constexpr auto c2c_shim = &aoti_torch_cuda__fft_c2c;

  template <typename in_t>
  void pack(const in_t* src, int64_t rows, int64_t T, bool reversed, acc_t* dst,
            int64_t M) const {
    gpu::pack_kernel<in_t, acc_t><<<gpu::blocks_for(rows, 2 * M), gpu::kThreads, 0, stream>>>(
        src, rows, T, reversed, dst, M);
    FUSED_OPS_LAUNCH_CHECK();
  }
  void forward_product(const acc_t* z, const acc_t* zw, acc_t* dst, int64_t rows, int64_t C,
                       int64_t M) const {
    gpu::forward_product_kernel<acc_t>
        <<<gpu::blocks_for(rows, spectral::pairs_per_row(M)), gpu::kThreads, 0, stream>>>(
            z, zw, dst, rows, C, M);
    FUSED_OPS_LAUNCH_CHECK();
  }
  void backward_product(acc_t* zg, const acc_t* zk, const acc_t* zw, acc_t* zp, int64_t B,
                        int64_t C, int64_t M) const {
    gpu::backward_product_kernel<acc_t>
        <<<gpu::blocks_for(C, spectral::pairs_per_row(M)), gpu::kThreads, 0, stream>>>(
            zg, zk, zw, zp, B, C, M);
    FUSED_OPS_LAUNCH_CHECK();
  }
  template <typename out_t>
  void crop(const acc_t* y, int64_t rows, int64_t T, int64_t M, double eps, bool reversed,
            out_t* dst) const {
    gpu::crop_kernel<acc_t, out_t><<<gpu::blocks_for(rows, T), gpu::kThreads, 0, stream>>>(
        y, rows, T, M, static_cast<acc_t>(eps), reversed, dst);
    FUSED_OPS_LAUNCH_CHECK();
  }
};

}  // namespace rwkv::fft
