// RWKV TimeX, bfloat16 and float16 on sm_80 and newer: the configurations of the tensor-core
// direct kernels (timex_tc_toeplitz.cuh, timex_tc_wgrad.cuh) and their launches. Included by
// timex_cuda.cu, which calls them for those dtypes on those devices.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/checks.h"
#include "common/cuda_utils.cuh"
#include "common/env_switch.h"
#include "rwkv/timex_tc_toeplitz.cuh"
#include "rwkv/timex_tc_toeplitz_split.cuh"
#include "rwkv/timex_tc_wgrad.cuh"

namespace rwkv {
namespace kernels {

// Toeplitz (forward and grad_k): 4 warps, two 16-row tiles per warp, per tile 8 * NT = 32
// columns (16 for up to 2 rows) filled with batch rows and time folds: 32 rows; 16 rows x 2
// folds; 4 rows x 8 folds (3 to 8 rows); 2 rows x 8 folds (1 and 2 rows). Chunks of 128
// reduction indices, 256 with 8 folds (a block then spans 1024 outputs).
// The Toeplitz tilings: the fastest of those tried on the H100 at (16, 512, 1024),
// (4, 1024, 4096), (32, 1024, 1024) and (1, 256, 2048) (chunks of 64, 128, 256; 2 or 4 tiles
// per warp): benchmarks/results/timex_half_direct_h100.md.
// grad_w: 4 lag blocks of 16 x 4 time shifts per warp, 4 warps (256 lags per block), 12 slots
// of 256 times per stage (41.5 KB of shared memory, no opt-in; 4 blocks per SM):
// benchmarks/results/timex_wgrad_half_h100.md.
struct HalfTiles {
  template <typename F>
  static void toeplitz(int B, F&& f) {
    if (B > 16) {
      f(ToeplitzHalfConfig<4, 1, 2, 4, 128, 4>{});
    } else if (B > 8) {
      f(ToeplitzHalfConfig<4, 2, 2, 4, 128, 4>{});
    } else if (B > 2) {
      f(ToeplitzHalfConfig<4, 8, 2, 4, 256, 4>{});
    } else {
      f(ToeplitzHalfConfig<2, 8, 2, 4, 256, 4>{});
    }
  }
  // The split kernel (timex_tc_toeplitz_split.cuh) for up to 8 rows (the 8-fold tilings above),
  // where the rows and window of the longest block fit 48 KiB of shared memory (T up to 2368
  // with 3 to 8 rows, 4848 with 1 or 2) and RWKV_TIMEX_DIRECT_SPLIT is not 0. False: none.
  template <typename F>
  static bool toeplitz_split(int B, int T, F&& f) {
    if (B > 8 || !fused_ops::switch_on("RWKV_TIMEX_DIRECT_SPLIT")) return false;
    const auto fits = [&](auto cfg) { return decltype(cfg)::smem_bytes(T) <= 48 * 1024; };
    if (B > 2) {
      if (!fits(ToeplitzSplitConfig<4, 8, 2, 4, 4>{})) return false;
      f(ToeplitzSplitConfig<4, 8, 2, 4, 4>{});
    } else {
      if (!fits(ToeplitzSplitConfig<2, 8, 2, 4, 4>{})) return false;
      f(ToeplitzSplitConfig<2, 8, 2, 4, 4>{});
    }
    return true;
  }
  template <typename F>
  static void wgrad(F&& f) {
    f(WgradHalfConfig<4, 4, 12, 4>{});
  }
};

}  // namespace kernels

namespace half_tc_launch {

inline unsigned blocks_of(int64_t n) {
  FUSED_OPS_CHECK(n <= INT32_MAX, "timex: the input is too large for one launch (",
                  fused_ops::num(n), " blocks)");
  return static_cast<unsigned>(n);
}

// Elements per cp.async when staging rows of T elements from p (stage_rows,
// timex_tc_common.cuh): 8, 4 or 2 (16, 8 or 4 bytes) where T is a multiple and p aligned to as
// many bytes, so that every row starts aligned; else 1 (element by element).
inline int staging_unit(const void* p, int T) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (int u = 8; u > 1; u /= 2) {
    if (T % u == 0 && a % (2 * u) == 0) return u;
  }
  return 1;
}

// out = eps + causal product of in (CAUSAL: the forward) or the anti-causal one (grad_k).
// w (C, T), in and out (B, C, T), contiguous, scalar_t = c10::BFloat16 or c10::Half.
// sms: the device's SM count (the split kernel's grid).
template <typename scalar_t, bool CAUSAL>
void toeplitz(const scalar_t* w, const scalar_t* in, scalar_t* out, int B, int C, int T,
              double eps, int sms, cudaStream_t stream) {
  const bool split = kernels::HalfTiles::toeplitz_split(B, T, [&](auto cfg) {
    using Cfg = decltype(cfg);
    // Row groups (C cdiv(B, BB) blocks, a block running every tile of its rows) where they
    // fill the SMs' resident blocks once, else as many blocks per row group (tiles taken in
    // turn) as fill them, at most one per tile.
    const int64_t row_groups = int64_t{C} * kernels::cdiv(B, Cfg::BB);
    const int64_t resident = int64_t{Cfg::MINB} * sms;
    const int groups = static_cast<int>(std::min<int64_t>(
        kernels::cdiv(T, Cfg::TT), (resident + row_groups - 1) / row_groups));
    kernels::toeplitz_half_split_kernel<scalar_t, Cfg, CAUSAL>
        <<<blocks_of(row_groups * groups), Cfg::THREADS, Cfg::smem_bytes(T), stream>>>(
            w, in, out, B, C, T, static_cast<float>(eps), staging_unit(in, T), groups);
    FUSED_OPS_LAUNCH_CHECK();
  });
  if (split) return;
  kernels::HalfTiles::toeplitz(B, [&](auto cfg) {
    using Cfg = decltype(cfg);
    const int64_t blocks =
        int64_t{C} * kernels::cdiv(B, Cfg::BB) * kernels::cdiv(T, Cfg::TT);
    auto kernel = kernels::toeplitz_half_kernel<scalar_t, Cfg, CAUSAL>;
    static_assert(Cfg::SMEM_BYTES <= 48 * 1024, "no opt-in shared memory needed");
    kernel<<<blocks_of(blocks), Cfg::THREADS, Cfg::SMEM_BYTES, stream>>>(
        w, in, out, B, C, T, static_cast<float>(eps), staging_unit(in, T));
    FUSED_OPS_LAUNCH_CHECK();
  });
}

// grad_w from g and k (B, C, T), contiguous; grad_w (C, T).
template <typename scalar_t>
void wgrad(const scalar_t* g, const scalar_t* k, scalar_t* grad_w, int B, int C, int T,
           cudaStream_t stream) {
  kernels::HalfTiles::wgrad([&](auto cfg) {
    using Cfg = decltype(cfg);
    const int64_t blocks = int64_t{C} * kernels::cdiv(T, Cfg::LAGS);
    auto kernel = kernels::wgrad_half_kernel<scalar_t, Cfg>;
    static_assert(Cfg::SMEM_BYTES <= 48 * 1024, "no opt-in shared memory needed");
    kernel<<<blocks_of(blocks), Cfg::THREADS, Cfg::SMEM_BYTES, stream>>>(
        g, k, grad_w, B, C, T, std::min(staging_unit(g, T), staging_unit(k, T)));
    FUSED_OPS_LAUNCH_CHECK();
  });
}

}  // namespace half_tc_launch
}  // namespace rwkv
