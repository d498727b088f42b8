// RWKV TimeX: the CUDA kernels (included by timex_cuda.cu, which launches them).
//
// Per channel c the op is a lower-triangular Toeplitz matrix times the (T, B) matrix k[:, c, :]:
//   out[b, t] = eps + sum_{n <= t} W[t - n] * k[b, n],   W[d] = w[c, T-1-d]  (W = w flipped)
// grad_k is the transposed (anti-causal) product with the same W:
//   grad_k[b, n] = sum_{t >= n} W[t - n] * g[b, t]
// so one kernel, toeplitz_kernel<CAUSAL>, computes both. grad_w is a correlation reduced over
// the batch and is the job of wgrad_kernel:
//   grad_w[c, T-1-s] = sum_b sum_{t >= s} g[b, t] * k[b, t - s]
//
// The FMA kernels (float64; float32's grad_w, and its Toeplitz products where Tiles picks no
// tensor-core configuration; every dtype before sm_80) are float-FMA bound. Each thread keeps
// a register tile of accumulators and walks the reduction index in steps of 4, reading
// operands as 16-byte vectors from shared memory; along the Toeplitz diagonal it keeps a
// sliding window of coefficients in registers, so that each step of 4 loads only 4 new
// coefficients. Tiles are staged in shared memory with cp.async, double-buffered,
// zero-filled outside the tensors: no shape needs a special case, and the all-zero triangle
// is skipped a warp's tile at a time. Every output element is written by exactly one thread
// after a fixed-order sum: results are deterministic.
//
// The kernels: timex_direct_common.cuh (shared staging), timex_toeplitz.cuh (out, grad_k),
// timex_wgrad.cuh (grad_w); below, the configurations timex_cuda.cu launches. The half
// types' tensor-core kernels on sm_80 and newer: timex_tc_*.cuh.
#pragma once

#include "rwkv/timex_toeplitz.cuh"
#include "rwkv/timex_wgrad.cuh"

namespace rwkv {
namespace kernels {

// ---------------------------------------------------------------------------------------
// The configurations that timex_cuda.cu launches, by accumulation type and batch size B:
// toeplitz(B, f) / wgrad(B, f) call f with a value of the chosen configuration type.
//
// Toeplitz (forward and grad_k): 8 outputs x 8 rows per thread, 4 warps, chunks of 32
// inputs unrolled 8 at a time (16 above 16 rows); NB * NC = 8, so that a warp spans 32
// outputs, and the batch size picks how the 8 (row group, channel) lanes of a quarter warp
// are split: the fewer the rows, the more channels per block. Up to 4 rows: 8 outputs x 4
// rows per thread.
// grad_w: 32 lags per thread, 2 x 2 warps (128 lags x 64 times per stage), unrolled 16
// times at a time; NR rows x 16 / NR channels on the 16 partition lanes, NR >= B if B < 16.
// These choices are the fastest of benchmarks/rwkv_variants.py on the H100 (2026-11-22 and
// 2026-11-23, benchmarks/results/rwkv_variants_h100.md).
template <typename acc_t>
struct Tiles {
  // float32 on sm_80 and newer (the half types: timex_tc_launch.cuh): the 3xTF32 configuration
  // for batch size B and length T, or false where the FMA kernel is faster (up to 4 rows and
  // T <= 256). The fewer the rows, the more time folds fill the 32 columns of a block (32,
  // 16 x 2, 8 x 4, 4 x 8); with 4 and 8 folds, 2-warp blocks (half the outputs per block, 8
  // blocks per SM).
  template <typename F>
  static bool toeplitz_tc(int B, int T, F&& f) {
    if constexpr (std::is_same_v<acc_t, float>) {
      if (B > 16) {
        f(ToeplitzTCConfig<4, 4, 64, 4>{});
      } else if (B > 8) {
        f(ToeplitzTCConfig<4, 4, 64, 4, 2>{});
      } else if (B > 4) {
        f(ToeplitzTCConfig<4, 2, 64, 8, 4>{});
      } else if (T > 256) {
        f(ToeplitzTCConfig<4, 2, 64, 8, 8>{});
      } else {
        return false;
      }
      return true;
    }
    return false;
  }
  template <typename F>
  static void toeplitz(int B, F&& f) {
    if (B <= 4) {
      f(ToeplitzConfig<acc_t, 8, 4, 1, 8, 4, 32, 2, 4>{});
    } else if (B <= 8) {
      f(ToeplitzConfig<acc_t, 8, 8, 1, 8, 4, 32, 2, 4>{});
    } else if (B <= 16) {
      f(ToeplitzConfig<acc_t, 8, 8, 2, 4, 4, 32, 2, 4>{});
    } else {
      f(ToeplitzConfig<acc_t, 8, 8, 4, 2, 4, 32, 4, 4>{});
    }
  }
  template <typename F>
  static void wgrad(int B, F&& f) {
    if (B <= 1) {
      f(WgradConfig<acc_t, 32, 1, 2, 2, 32, 4, 4>{});
    } else if (B <= 2) {
      f(WgradConfig<acc_t, 32, 2, 2, 2, 32, 4, 4>{});
    } else if (B <= 4) {
      f(WgradConfig<acc_t, 32, 4, 2, 2, 32, 4, 4>{});
    } else if (B <= 8) {
      f(WgradConfig<acc_t, 32, 8, 2, 2, 32, 4, 4>{});
    } else {
      f(WgradConfig<acc_t, 32, 16, 2, 2, 32, 4, 4>{});
    }
  }
};

// float64: one configuration each, with half the register tile (a double takes two registers).
template <>
struct Tiles<double> {
  template <typename F>
  static bool toeplitz_tc(int, int, F&&) {
    return false;
  }
  template <typename F>
  static void toeplitz(int, F&& f) {
    f(ToeplitzConfig<double, 4, 4, 1, 8, 4, 32, 2, 2>{});
  }
  template <typename F>
  static void wgrad(int, F&& f) {
    f(WgradConfig<double, 16, 4, 2, 2, 32, 4, 2>{});
  }
};

}  // namespace kernels
}  // namespace rwkv
