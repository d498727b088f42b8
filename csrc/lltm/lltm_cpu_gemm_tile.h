// What the half-type cell's GEMMs on an AVX2 CPU share (lltm_cpu_gemm_fwd_avx2.cpp: gates;
// lltm_cpu_gemm_avx2.cpp: d_X and d_W): the register tile, kTileRows x 16 float accumulators
// updated by rank-1 products, and the dispatch on the storage type. Include it only from a file that includes
// common/avx2_target.h first, and only inside #ifdef FUSED_OPS_AVX2 (it is AVX2 code).
#pragma once

#include <cstdint>
#include <stdexcept>

#include "lltm/lltm_cpu_avx2.h"
#include "lltm/lltm_cpu_vec.h"

namespace lltm {
namespace tile {

// 6 rows x 2 vectors = 12 accumulators: 12 independent FMA chains cover the FMA latency (4
// cycles) at two FMAs per cycle, and with the 2 panel vectors and 1 broadcast they take 15 of
// the 16 registers. (d_X with 4 rows, 8 chains, measured 1.09-1.23x float32's backward time at
// (256, 256, 1024) on the 2-core AMD EPYC, with 6 rows 1.03-1.10x.)
constexpr int kTileRows = 6;
constexpr int64_t kTileCols = 2 * vec::kLanes;
static_assert(kTileCols == kHalfGemmTileCols);

// acc[i][v] += a[i][j] * p[j][8 v .. 8 v + 8] for j < count: p a contiguous count x 16 float
// panel, a[i] kTileRows rows of scalars, one broadcast per row and j: 2 loads and 6
// broadcasts feed 12 multiply-adds.
__attribute__((always_inline)) inline void rank1_updates(vec::V (&acc)[kTileRows][2],
                                                         const float* const (&a)[kTileRows],
                                                         const float* p, int64_t count) {
  for (int64_t j = 0; j < count; ++j) {
    const vec::V p0 = _mm256_loadu_ps(p + j * kTileCols);
    const vec::V p1 = _mm256_loadu_ps(p + j * kTileCols + vec::kLanes);
    #pragma GCC unroll 8
    for (int i = 0; i < kTileRows; ++i) {
      const vec::V av = _mm256_broadcast_ss(a[i] + j);
      acc[i][0] = vec::fma(av, p0, acc[i][0]);
      acc[i][1] = vec::fma(av, p1, acc[i][1]);
    }
  }
}

// run(vec::F16()) or run(vec::BF16()): the element type of a half-type GEMM's operands.
template <typename Run>
void by_storage(Storage storage, const Run& run) {
  switch (storage) {
    case Storage::Half: return run(vec::F16());
    case Storage::BFloat16: return run(vec::BF16());
    case Storage::Float: break;
  }
  throw std::invalid_argument("lltm: the half-type GEMMs take float16 or bfloat16");
}

}  // namespace tile
}  // namespace lltm
