// LLTM over a sequence on CUDA: the weight and input gradients of the backward as one launch
// (lltm_sequence_wgrad.h). Each CTA computes one 32 x 32 tile of one of the products
//   [d_W_h | d_W_x | d_bias] = dz^T [h_prev | x | 1]   (3S x (S + F + 1), summed over R rows)
//   d_input = dz W_x                                     (R x F, summed over 3S)
// staging 32 x 32 blocks of both operands in shared memory, each thread 2 x 2 outputs summed
// in the opmath type in a fixed order (deterministic). Replaces the 3 cuBLAS GEMMs and the
// column sum that the GPU otherwise waits for the host to set up (120 us of host for 25 us of
// kernels at (64, 16, 32, 128): benchmarks/results/lltm_sequence_step_timeline_h100.md). The
// weight tiles' sums over R rows are split over several CTAs, the tile's last CTA adding the
// partial sums in order. Its FLOP rate is a fraction of cuBLAS's (2 x 2 outputs per thread
// from shared memory), so auto takes it only for small problems (kFusedWeightGradMacs).
#include "lltm/lltm_sequence_wgrad.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/alloc.h"
#include "common/cuda_utils.cuh"
#include "common/dispatch.h"

namespace lltm {
namespace {

constexpr int kTile = 32, kThreads = 256, kPerThread = kTile * kTile / kThreads;
// Rows of the weight tiles' sum per CTA: at least this many, and enough CTAs for about two per
// SM (the sum over all R rows in one CTA per tile left most SMs idle and every chunk waiting
// on its loads: 60 us at (64, 16, 32, 128), against cuBLAS's 25).
constexpr int64_t kMinSliceRows = 256, kCtasPerSm = 2;

// The 32 x 32 tile at (m0, n0) of C[m][n] = sum_{k in [k_begin, k_end)} A(k, m) B(k, n), this
// thread's 2 x 2 of it in c. A_KFAST says the element order in which A is read coalesced (k
// fastest: A(k, m) contiguous in k). load_a, load_b return the opmath value (0 outside the
// operand). The next chunk's elements are loaded into registers while this one is summed.
template <typename acc_t, bool A_KFAST, typename LoadA, typename LoadB>
__device__ __forceinline__ void tile_product(int64_t k_begin, int64_t k_end, int64_t m0,
                                             int64_t n0, const LoadA& load_a, const LoadB& load_b,
                                             acc_t (&c)[2][2]) {
  __shared__ acc_t as[kTile][kTile + 1], bs[kTile][kTile + 1];
  const int t = static_cast<int>(threadIdx.x), tm = t % 16, tn = t / 16;
  acc_t ra[kPerThread], rb[kPerThread];
  const auto fetch = [&](int64_t k0) {
#pragma unroll
    for (int q = 0; q < kPerThread; ++q) {
      const int idx = t + q * kThreads, hi = idx / kTile, lo = idx % kTile;
      const int64_t ka = A_KFAST ? k0 + lo : k0 + hi;  // nothing read past k_end
      ra[q] = ka < k_end ? (A_KFAST ? load_a(ka, m0 + hi) : load_a(ka, m0 + lo)) : acc_t(0);
      rb[q] = k0 + hi < k_end ? load_b(k0 + hi, n0 + lo) : acc_t(0);
    }
  };
  if (k_begin < k_end) fetch(k_begin);
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kTile) {
#pragma unroll
    for (int q = 0; q < kPerThread; ++q) {
      const int idx = t + q * kThreads, hi = idx / kTile, lo = idx % kTile;
      if (A_KFAST) {
        as[lo][hi] = ra[q];
      } else {
        as[hi][lo] = ra[q];
      }
      bs[hi][lo] = rb[q];
    }
    __syncthreads();
    if (k0 + kTile < k_end) fetch(k0 + kTile);
#pragma unroll 8
    for (int k = 0; k < kTile; ++k) {
      const acc_t a0 = as[k][tm], a1 = as[k][tm + 16], b0 = bs[k][tn], b1 = bs[k][tn + 16];
      c[0][0] += a0 * b0;
      c[0][1] += a0 * b1;
      c[1][0] += a1 * b0;
      c[1][1] += a1 * b1;
    }
    __syncthreads();
  }
}

// Blocks [0, w_tiles * slices): the weight tiles (columns from n_begin: 0 with d_weights, else
// only the bias column S + F), each tile's rows split into `slices` ranges whose partial sums
// go to partial (acc_t, 1024 per tile and slice); the tile's last CTA to finish (counted in
// arrivals, zero at the launch) adds them in slice order (deterministic) and writes the tile.
// The rest: d_input's tiles (their sum, over 3S, in one CTA).
template <typename scalar_t>
__global__ void __launch_bounds__(kThreads)
    seq_weight_grads_kernel(const scalar_t* __restrict__ dz, const scalar_t* __restrict__ h_prev,
                            const scalar_t* __restrict__ x, const scalar_t* __restrict__ weights,
                            int64_t ws0, int64_t ws1, scalar_t* __restrict__ d_weights,
                            scalar_t* __restrict__ d_bias, scalar_t* __restrict__ d_input,
                            int64_t R, int64_t S, int64_t F, int64_t n_begin, int64_t w_tiles_n,
                            int64_t w_tiles, int64_t slices, int64_t slice_rows,
                            fused_ops::opmath_t<scalar_t>* __restrict__ partial,
                            unsigned* __restrict__ arrivals) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  const int64_t G = 3 * S, block = blockIdx.x;
  const int t = static_cast<int>(threadIdx.x), tm = t % 16, tn = t / 16;
  acc_t c[2][2] = {{0, 0}, {0, 0}};
  if (block < w_tiles * slices) {
    const int64_t tile = block / slices, slice = block % slices;
    const int64_t m0 = tile / w_tiles_n * kTile, n0 = n_begin + tile % w_tiles_n * kTile;
    const int64_t N = S + F + 1;
    const auto load_a = [&](int64_t r, int64_t i) -> acc_t {
      return i < G ? static_cast<acc_t>(dz[r * G + i]) : acc_t(0);
    };
    const auto load_b = [&](int64_t r, int64_t j) -> acc_t {
      if (j >= N) return acc_t(0);
      if (j < S) return static_cast<acc_t>(h_prev[r * S + j]);
      if (j < S + F) return static_cast<acc_t>(x[r * F + j - S]);
      return acc_t(1);
    };
    const int64_t r0 = slice * slice_rows, r1 = r0 + slice_rows < R ? r0 + slice_rows : R;
    tile_product<acc_t, false>(r0, r1, m0, n0, load_a, load_b, c);
    if (slices > 1) {
      acc_t* mine = partial + (tile * slices + slice) * kTile * kTile;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) mine[(tm + 16 * i) * kTile + tn + 16 * j] = c[i][j];
      }
      __threadfence();  // this CTA's partial visible before its arrival is counted
      __shared__ bool last;
      __syncthreads();
      if (t == 0) last = atomicAdd(arrivals + tile, 1u) == static_cast<unsigned>(slices - 1);
      __syncthreads();
      if (!last) return;
      __threadfence();
      const acc_t* all = partial + tile * slices * kTile * kTile;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int at = (tm + 16 * i) * kTile + tn + 16 * j;
          acc_t sum = 0;
          for (int64_t p = 0; p < slices; ++p) sum += __ldcg(all + p * kTile * kTile + at);
          c[i][j] = sum;
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int64_t row = m0 + tm + 16 * i, col = n0 + tn + 16 * j;
        if (row >= G || col >= N) continue;
        if (col < S + F) {
          d_weights[row * (S + F) + col] = static_cast<scalar_t>(c[i][j]);
        } else if (d_bias != nullptr) {
          d_bias[row] = static_cast<scalar_t>(c[i][j]);
        }
      }
    }
  } else {
    const int64_t tiles_n = (F + kTile - 1) / kTile, b = block - w_tiles * slices;
    const int64_t m0 = b / tiles_n * kTile, n0 = b % tiles_n * kTile;
    const auto load_a = [&](int64_t i, int64_t r) -> acc_t {
      return r < R ? static_cast<acc_t>(dz[r * G + i]) : acc_t(0);
    };
    const auto load_b = [&](int64_t i, int64_t j) -> acc_t {
      return j < F ? static_cast<acc_t>(weights[i * ws0 + (S + j) * ws1]) : acc_t(0);
    };
    tile_product<acc_t, true>(0, G, m0, n0, load_a, load_b, c);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int64_t r = m0 + tm + 16 * i, col = n0 + tn + 16 * j;
        if (r < R && col < F) d_input[r * F + col] = static_cast<scalar_t>(c[i][j]);
      }
    }
  }
}

// LLTM_SEQUENCE_WGRAD, read at every call (tests set it between calls).
enum class WgradMode { kAuto, kFused, kGemm };
WgradMode requested_mode() {
  const char* value = std::getenv("LLTM_SEQUENCE_WGRAD");
  if (value == nullptr || *value == '\0' || std::strcmp(value, "auto") == 0) {
    return WgradMode::kAuto;
  }
  if (std::strcmp(value, "fused") == 0) return WgradMode::kFused;
  if (std::strcmp(value, "gemm") == 0) return WgradMode::kGemm;
  fused_ops::raise<std::invalid_argument>(
      "LLTM_SEQUENCE_WGRAD must be 'fused', 'gemm' or 'auto' (or unset), got '", value, "'");
}

}  // namespace

bool seq_weight_grads_cuda(const torch::stable::Tensor& like, const void* dz, const void* h_prev,
                           const void* x, const void* weights, int64_t ws0, int64_t ws1,
                           void* d_weights, void* d_bias, void* d_input, int64_t R, int64_t S,
                           int64_t F) {
  const WgradMode mode = requested_mode();
  const int64_t macs = R * 3 * S * (S + 2 * F + 1);
  if (mode == WgradMode::kGemm || (mode == WgradMode::kAuto && macs > kFusedWeightGradMacs)) {
    return false;
  }
  const bool weights_wanted = d_weights != nullptr || d_bias != nullptr;
  const int64_t n_begin = d_weights != nullptr ? 0 : S + F;
  const int64_t w_tiles_n = (S + F + 1 - n_begin + kTile - 1) / kTile;
  const int64_t w_tiles = weights_wanted ? (3 * S + kTile - 1) / kTile * w_tiles_n : 0;
  const int64_t x_tiles =
      d_input != nullptr ? (R + kTile - 1) / kTile * ((F + kTile - 1) / kTile) : 0;
  // Slices of the rows for the weight tiles: about kCtasPerSm CTAs per SM, at least
  // kMinSliceRows rows each (a multiple of kTile).
  int64_t slices = 1;
  if (w_tiles > 0) {
    const int64_t target = kCtasPerSm * fused_ops::device_properties(like).multiProcessorCount;
    slices = std::max<int64_t>(1, std::min((target + w_tiles - 1) / w_tiles, R / kMinSliceRows));
  }
  const int64_t slice_rows = ((R + slices - 1) / slices + kTile - 1) / kTile * kTile;
  slices = (R + slice_rows - 1) / slice_rows;
  const int64_t blocks = w_tiles * slices + x_tiles;
  if (blocks == 0) return true;
  FUSED_OPS_CHECK(blocks <= INT32_MAX, "lltm_sequence_backward: too many rows for one launch");
  const cudaStream_t stream = fused_ops::current_stream(like);
  FUSED_OPS_DISPATCH_FLOATING(like.scalar_type(), "lltm_sequence_backward_cuda", [&] {
    using acc_t = fused_ops::opmath_t<scalar_t>;
    acc_t* partial = nullptr;
    unsigned* arrivals = nullptr;
    torch::stable::Tensor work;
    if (slices > 1 && w_tiles > 0) {
      // The partial sums, then one arrival counter per tile (zeroed here).
      const int64_t partial_bytes = w_tiles * slices * kTile * kTile * int64_t{sizeof(acc_t)};
      work = fused_ops::empty({partial_bytes + w_tiles * int64_t{sizeof(unsigned)}},
                              torch::headeronly::ScalarType::Byte, like);
      partial = static_cast<acc_t*>(work.mutable_data_ptr());
      arrivals = reinterpret_cast<unsigned*>(static_cast<char*>(work.mutable_data_ptr()) +
                                             partial_bytes);
      FUSED_OPS_CUDA_CHECK(cudaMemsetAsync(arrivals, 0, w_tiles * sizeof(unsigned), stream));
    }
    seq_weight_grads_kernel<scalar_t><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        static_cast<const scalar_t*>(dz), static_cast<const scalar_t*>(h_prev),
        static_cast<const scalar_t*>(x), static_cast<const scalar_t*>(weights), ws0, ws1,
        static_cast<scalar_t*>(d_weights), static_cast<scalar_t*>(d_bias),
        static_cast<scalar_t*>(d_input), R, S, F, n_begin, w_tiles_n, w_tiles, slices,
        slice_rows, partial, arrivals);
    FUSED_OPS_LAUNCH_CHECK();
  });
  return true;
}

}  // namespace lltm
