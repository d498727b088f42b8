// RWKV TimeX, FFT algorithm on CUDA: the pointwise kernels around cuFFT (aten::_fft_c2c
// through its AOTI C shim; ATen caches the plans), one thread per element or per frequency
// pair. Memory-bound passes, each reading and writing its data once: rows stride over
// blockIdx.y and elements over blockIdx.x, so that no thread divides a 64-bit flat index
// (with one, the pack pass ran at a third of the memory bandwidth on the H100). The arithmetic is in timex_spectral.h, the driver in
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

// Grid-stride loops over rows (y) and over the elements of a row (x).
#define TIMEX_FOR_ROWS(r, rows) for (int64_t r = blockIdx.y; r < (rows); r += gridDim.y)
#define TIMEX_FOR_COLS(j, n) \
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < (n); \
       j += int64_t{gridDim.x} * blockDim.x)

template <typename in_t, typename acc_t>
__global__ void __launch_bounds__(kThreads) pack_kernel(const in_t* __restrict__ src, int64_t rows,
                                                       int64_t T, bool reversed,
                                                       acc_t* __restrict__ dst, int64_t M) {
  TIMEX_FOR_ROWS(r, rows) {
    const in_t* s = src + r * T;
    acc_t* d = dst + r * 2 * M;
    TIMEX_FOR_COLS(j, 2 * M) {
      d[j] = j < T ? static_cast<acc_t>(s[reversed ? T - 1 - j : j]) : acc_t(0);
    }
  }
}

template <typename acc_t>
__global__ void __launch_bounds__(kThreads) forward_product_kernel(acc_t* __restrict__ z,
                                                                  const acc_t* __restrict__ zw,
                                                                  int64_t rows, int64_t C,
                                                                  int64_t M) {
  using Cpx = spectral::Cpx<acc_t>;
  const acc_t s = acc_t(1) / static_cast<acc_t>(M);
  TIMEX_FOR_ROWS(r, rows) TIMEX_FOR_COLS(k, spectral::pairs_per_row(M)) {
    const spectral::Pair p = spectral::pair_of(k, M);
    Cpx* zr = reinterpret_cast<Cpx*>(z) + r * M;
    const Cpx* wr = reinterpret_cast<const Cpx*>(zw) + (r % C) * M;
    const Cpx tw = spectral::twiddle(k, M, acc_t(0));
    Cpx xk, xj, wk, wj, uk, uj;
    spectral::split(zr[p.k], zr[p.j], tw, xk, xj);
    spectral::split(wr[p.k], wr[p.j], tw, wk, wj);
    spectral::merge(xk * wk, xj * wj, tw, s, uk, uj);
    zr[p.k] = uk;
    if (!p.single()) zr[p.j] = uj;
  }
}

// One thread per (channel, frequency pair); the batch in order: a deterministic sum.
template <typename acc_t>
__global__ void __launch_bounds__(kThreads) backward_product_kernel(
    acc_t* __restrict__ zg, const acc_t* __restrict__ zk, const acc_t* __restrict__ zw,
    acc_t* __restrict__ zp, int64_t B, int64_t C, int64_t M) {
  using Cpx = spectral::Cpx<acc_t>;
  const acc_t s = acc_t(1) / static_cast<acc_t>(M);
  TIMEX_FOR_ROWS(c, C) TIMEX_FOR_COLS(k, spectral::pairs_per_row(M)) {
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
  }
}

template <typename acc_t, typename out_t>
__global__ void __launch_bounds__(kThreads) crop_kernel(const acc_t* __restrict__ y, int64_t rows,
                                                       int64_t T, int64_t M, acc_t eps,
                                                       bool reversed, out_t* __restrict__ dst) {
  TIMEX_FOR_ROWS(r, rows) {
    const acc_t* s = y + r * 2 * M;
    out_t* d = dst + r * T;
    TIMEX_FOR_COLS(t, T) { d[t] = static_cast<out_t>(eps + s[reversed ? T - 1 - t : t]); }
  }
}

#undef TIMEX_FOR_ROWS
#undef TIMEX_FOR_COLS

// Blocks for rows of n elements: x covers a row (up to 2^16 blocks, the loop strides over
// the rest), y the rows (up to 2^16 - 1, the same).
inline dim3 blocks_for(int64_t rows, int64_t n) {
  return dim3(static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 16)),
              static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
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
  void forward_product(acc_t* z, const acc_t* zw, int64_t rows, int64_t C, int64_t M) const {
    gpu::forward_product_kernel<acc_t>
        <<<gpu::blocks_for(rows, spectral::pairs_per_row(M)), gpu::kThreads, 0, stream>>>(
            z, zw, rows, C, M);
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
