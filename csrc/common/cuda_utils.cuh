// CUDA helpers shared by every family: vector packs (pack.h) and a 2-D launch shape for kernels
// that walk a (rows, row_length) array.
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdint>

#include "common/pack.h"

namespace fused_ops {

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
