// LLTM over a sequence on CUDA: the weight and input gradients of the backward as one launch
// (lltm_sequence_wgrad.h). Each CTA computes one tile of one of the products
//   [d_W_h | d_W_x | d_bias] = dz^T [h_prev | x | 1]   (3S x (S + F + 1), summed over R rows)
//   d_input = dz W_x                                     (R x F, summed over 3S)
// staging kChunk-deep blocks of both operands in shared memory; each of the 16 x 16 threads
// sums a TM x TN block of outputs in registers in the opmath type, in a fixed order
// (deterministic). Replaces the 3 cuBLAS GEMMs and the column sum that the GPU otherwise waits
// for the host to set up (120 us of host for 25 us of kernels at (64, 16, 32, 128):
// benchmarks/results/lltm_sequence_step_timeline_h100.md). The weight tiles' sums over R rows
// are split over several CTAs, the tile's last CTA adding the partial sums in order.
#include "lltm/lltm_sequence_wgrad.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "common/alloc.h"
#include "common/cuda_utils.cuh"
#include "common/dispatch.h"

namespace lltm {
namespace {

constexpr int kThreads = 256;
// Rows of both operands staged per step of a tile's sum: 32 for float sums (30 KB of shared
// memory for both roles' buffers), 16 for double (the same bytes). Each step waits on its
// loads, so the steps' count more than the work bounds a CTA (d_input's sum over 3S = 384 in
// steps of 16 made the kernel slower than in steps of 32).
template <typename acc_t>
constexpr int kChunk = 128 / sizeof(acc_t);
// Outputs per thread: 4 x 4 for the weight tiles (64 x 64: every operand element read from
// shared memory feeds 4 multiply-adds, against 2 in the first version's 2 x 2); 4 x 2 for
// d_input's (64 x 32: F is often 32 or less; 8 x 2 spilled at two CTAs an SM).
constexpr int kWeightTm = 4, kWeightTn = 4, kInputTm = 4, kInputTn = 2;
constexpr int kWeightTile = kWeightTm * 16 * kWeightTn * 16;
// Rows of the weight tiles' sum per CTA: at least this many, and enough CTAs for about two per
// SM (the sum over all R rows in one CTA per tile left most SMs idle and every chunk waiting
// on its loads).
constexpr int64_t kMinSliceRows = 128, kCtasPerSm = 2;

// The (16 TM) x (16 TN) tile at (m0, n0) of C[m][n] = sum_{k in [k_begin, k_end)} A(k, m)
// B(k, n); thread (tm, tn) = (t % 16, t / 16) sums rows m0 + TM tm + i, columns n0 + TN tn + j
// in c[i][j]. A_KFAST says the element order in which A is read coalesced (k fastest: A(k, m)
// contiguous in k; else m fastest); B is read n fastest. load_a, load_b return the opmath
// value (0 outside the operand). The next chunk is loaded into registers while this one is
// summed.
template <typename acc_t, int TM, int TN, bool A_KFAST, typename LoadA, typename LoadB>
__device__ __forceinline__ void tile_product(int64_t k_begin, int64_t k_end, int64_t m0,
                                             int64_t n0, const LoadA& load_a, const LoadB& load_b,
                                             acc_t (&c)[TM][TN]) {
  constexpr int BM = 16 * TM, BN = 16 * TN;
  constexpr int K = kChunk<acc_t>, kA = K * BM / kThreads, kB = K * BN / kThreads;
  // Rows padded by 4 elements: the k-fastest stores of A spread over the banks, rows stay
  // 16-byte aligned.
  __shared__ __align__(16) acc_t as[K][BM + 4];
  __shared__ __align__(16) acc_t bs[K][BN + 4];
  const int t = static_cast<int>(threadIdx.x), tm = t % 16, tn = t / 16;
  acc_t ra[kA], rb[kB];
  const auto fetch = [&](int64_t k0) {
#pragma unroll
    for (int q = 0; q < kA; ++q) {
      const int idx = t + q * kThreads;
      const int k = A_KFAST ? idx % K : idx / BM, m = A_KFAST ? idx / K : idx % BM;
      ra[q] = k0 + k < k_end ? load_a(k0 + k, m0 + m) : acc_t(0);  // nothing read past k_end
    }
#pragma unroll
    for (int q = 0; q < kB; ++q) {
      const int idx = t + q * kThreads, k = idx / BN, n = idx % BN;
      rb[q] = k0 + k < k_end ? load_b(k0 + k, n0 + n) : acc_t(0);
    }
  };
  if (k_begin < k_end) fetch(k_begin);
  for (int64_t k0 = k_begin; k0 < k_end; k0 += K) {
#pragma unroll
    for (int q = 0; q < kA; ++q) {
      const int idx = t + q * kThreads;
      if (A_KFAST) {
        as[idx % K][idx / K] = ra[q];
      } else {
        as[idx / BM][idx % BM] = ra[q];
      }
    }
#pragma unroll
    for (int q = 0; q < kB; ++q) {
      const int idx = t + q * kThreads;
      bs[idx / BN][idx % BN] = rb[q];
    }
    __syncthreads();
    if (k0 + K < k_end) fetch(k0 + K);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      acc_t a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = as[k][TM * tm + i];
#pragma unroll
      for (int j = 0; j < TN; ++j) b[j] = bs[k][TN * tn + j];
#pragma unroll
      for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) c[i][j] += a[i] * b[j];
      }
    }
    __syncthreads();
  }
}

// A thread's TM x TN block of a row-major (16 TM) x BN partial-sum tile in global memory
// (rows TM tm + i, columns TN tn + j), read past L1 (__ldcg: other CTAs wrote it) and written,
// four floats at a time where the type is float.
template <int TM, int TN, int BN, typename acc_t>
__device__ __forceinline__ void load_block(const acc_t* tile, int tm, int tn, acc_t (&v)[TM][TN]) {
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const acc_t* row = tile + (TM * tm + i) * BN + TN * tn;
    if constexpr (std::is_same_v<acc_t, float> && TN % 4 == 0) {
#pragma unroll
      for (int j = 0; j < TN; j += 4) {
        const float4 q = __ldcg(reinterpret_cast<const float4*>(row + j));
        v[i][j] = q.x, v[i][j + 1] = q.y, v[i][j + 2] = q.z, v[i][j + 3] = q.w;
      }
    } else {
#pragma unroll
      for (int j = 0; j < TN; ++j) v[i][j] = __ldcg(row + j);
    }
  }
}
template <int TM, int TN, int BN, typename acc_t>
__device__ __forceinline__ void store_block(acc_t* tile, int tm, int tn, const acc_t (&v)[TM][TN]) {
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    acc_t* row = tile + (TM * tm + i) * BN + TN * tn;
    if constexpr (std::is_same_v<acc_t, float> && TN % 4 == 0) {
#pragma unroll
      for (int j = 0; j < TN; j += 4) {
        *reinterpret_cast<float4*>(row + j) = make_float4(v[i][j], v[i][j + 1], v[i][j + 2],
                                                          v[i][j + 3]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < TN; ++j) row[j] = v[i][j];
    }
  }
}

// The CTAs' work (the kernel's comment says how the blocks go over it), the same for the
// workspace made before the recurrence and the launch after it.
struct Plan {
  int64_t n_begin;    // the weight tiles' first column: 0 with d_weights, else S + F (bias)
  int64_t w_tiles_n;  // weight tiles across the S + F + 1 - n_begin columns
  int64_t w_tiles;    // weight tiles (0: neither d_weights nor d_bias asked for)
  int64_t slices;      // row ranges (each weight tile's sum is split over them)
  int64_t slice_rows;  // a multiple of d_input's tile height
  int64_t x_tiles_m, x_tiles_n;  // d_input's tiles down one slice's rows and across F columns
  // A slice's CTAs: its part of every weight tile, then its d_input tiles.
  __host__ __device__ int64_t per_slice() const { return w_tiles + x_tiles_m * x_tiles_n; }
  __host__ __device__ int64_t blocks() const { return slices * per_slice(); }
};

Plan make_plan(const torch::stable::Tensor& like, int64_t R, int64_t S, int64_t F,
               const SeqWgradWanted& wanted) {
  constexpr int64_t wm = 16 * kWeightTm, wn = 16 * kWeightTn, xm = 16 * kInputTm,
                    xn = 16 * kInputTn;
  Plan p{};
  p.n_begin = wanted.weights ? 0 : S + F;
  p.w_tiles_n = (S + F + 1 - p.n_begin + wn - 1) / wn;
  p.w_tiles = wanted.weights || wanted.bias ? (3 * S + wm - 1) / wm * p.w_tiles_n : 0;
  // Slices of the rows: for the weight tiles about kCtasPerSm CTAs per SM, at least
  // kMinSliceRows rows each; a multiple of xm rows (and so of both types' chunk depths).
  p.slices = 1;
  if (p.w_tiles > 0) {
    const int64_t target = kCtasPerSm * fused_ops::device_properties(like).multiProcessorCount;
    p.slices =
        std::max<int64_t>(1, std::min((target + p.w_tiles - 1) / p.w_tiles, R / kMinSliceRows));
  }
  p.slice_rows = ((R + p.slices - 1) / p.slices + xm - 1) / xm * xm;
  p.slices = (R + p.slice_rows - 1) / p.slice_rows;
  p.x_tiles_m = wanted.input ? p.slice_rows / xm : 0;
  p.x_tiles_n = wanted.input ? (F + xn - 1) / xn : 0;
  return p;
}

template <typename scalar_t>
struct Args {
  const scalar_t *dz, *h_prev, *x, *weights;
  int64_t ws0, ws1;
  scalar_t *d_weights, *d_bias, *d_input;  // nullptr: not asked for
  int64_t T, B, S, F;
  Plan plan;
  fused_ops::opmath_t<scalar_t>* partial;  // the weight tiles' partial sums (slices > 1)
  unsigned* arrivals;                      // one per weight tile, zero at the launch
  // The recurrence's progress (SeqBackward::progress), nullptr where it is complete at the
  // launch: CTA c of its `publishers` adds 1 to progress[c] after every interval steps and
  // after the last.
  const unsigned* progress;
  int64_t publishers, interval;
};

// dz's element, read past L1: the recurrence may still be writing other rows of its lines.
template <typename scalar_t>
__device__ __forceinline__ fused_ops::opmath_t<scalar_t> load_dz(const scalar_t* p) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  if constexpr (sizeof(scalar_t) == 2) {
    const unsigned short bits = __ldcg(reinterpret_cast<const unsigned short*>(p));
    return static_cast<acc_t>(scalar_t(bits, scalar_t::from_bits()));
  } else {
    return __ldcg(p);
  }
}

// Waits (the whole CTA) until the recurrence has written dz_t for every t >= t_min: steps
// T - t_min done, so ceil((T - t_min) / interval) publishes of every CTA of it (the first
// warp's lanes poll the counters, each acquire ordered before the CTA's loads by the
// barrier). A CTA that needs the last publish also waits for the recurrence's grid to end
// (griddepcontrol.wait, Hopper), so that this kernel does not end before it: the work behind
// this kernel in the stream reads d_h0 and d_c0, written after the last publish.
template <typename scalar_t>
__device__ __forceinline__ void wait_for_steps(const Args<scalar_t>& a, int64_t t_min) {
  if (a.progress == nullptr) return;
  const int64_t k = (a.T - t_min + a.interval - 1) / a.interval;
  if (threadIdx.x < 32) {
    for (int64_t c = threadIdx.x; c < a.publishers; c += 32) {
      while (true) {
        unsigned seen;
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];"
                     : "=r"(seen)
                     : "l"(a.progress + c)
                     : "memory");
        if (seen >= k) break;
        __nanosleep(256);
      }
    }
  }
  __syncthreads();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (k == (a.T + a.interval - 1) / a.interval) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The blocks go slice by slice, the latest rows' slice first (the recurrence writes dz from
// t = T - 1 down, and blocks start roughly in index order), each slice's per_slice() blocks
// being its part of every weight tile and then its d_input tiles. A weight tile (64 x 64, its
// columns from n_begin) sums the slice's rows into partial (kWeightTile per tile and slice);
// the tile's last CTA to finish (counted in arrivals) adds the slices' sums in slice order
// (deterministic) and writes the tile. A d_input tile (64 x 32) sums over 3S in one CTA.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreads, 2) seq_weight_grads_kernel(const Args<scalar_t> a) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  const Plan& p = a.plan;
  const int64_t S = a.S, F = a.F, G = 3 * S, R = a.T * a.B, block = blockIdx.x;
  const int t = static_cast<int>(threadIdx.x), tm = t % 16, tn = t / 16;
  const scalar_t* const dz = a.dz;
  const int64_t slice = p.slices - 1 - block / p.per_slice(), local = block % p.per_slice();
  const int64_t r0 = slice * p.slice_rows;
  if (local < p.w_tiles) {
    constexpr int TM = kWeightTm, TN = kWeightTn, BN = 16 * TN;
    acc_t c[TM][TN] = {};
    const int64_t tile = local;
    const int64_t m0 = tile / p.w_tiles_n * (16 * TM), n0 = p.n_begin + tile % p.w_tiles_n * BN;
    const int64_t N = S + F + 1;
    const auto load_a = [&](int64_t r, int64_t i) -> acc_t {
      return i < G ? load_dz(dz + r * G + i) : acc_t(0);
    };
    const auto load_b = [&](int64_t r, int64_t j) -> acc_t {
      if (j >= N) return acc_t(0);
      if (j < S) return static_cast<acc_t>(a.h_prev[r * S + j]);
      if (j < S + F) return static_cast<acc_t>(a.x[r * F + j - S]);
      return acc_t(1);
    };
    const int64_t r1 = r0 + p.slice_rows < R ? r0 + p.slice_rows : R;
    wait_for_steps(a, r0 / a.B);
    tile_product<acc_t, TM, TN, false>(r0, r1, m0, n0, load_a, load_b, c);
    if (p.slices > 1) {
      store_block<TM, TN, BN>(a.partial + (tile * p.slices + slice) * kWeightTile, tm, tn, c);
      __threadfence();  // this CTA's partial visible before its arrival is counted
      __shared__ bool last;
      __syncthreads();
      if (t == 0) {
        last = atomicAdd(a.arrivals + tile, 1u) == static_cast<unsigned>(p.slices - 1);
      }
      __syncthreads();
      if (!last) return;
      __threadfence();
      // Every slice's TM x TN values are loaded before they are added (independent loads;
      // summed one at a time, 16 dependent L2 round trips a slice made this loop most of the
      // kernel's time), in slice order.
      const acc_t* all = a.partial + tile * p.slices * kWeightTile;
#pragma unroll
      for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) c[i][j] = acc_t(0);
      }
      for (int64_t q = 0; q < p.slices; ++q) {
        acc_t v[TM][TN];
        load_block<TM, TN, BN>(all + q * kWeightTile, tm, tn, v);
#pragma unroll
        for (int i = 0; i < TM; ++i) {
#pragma unroll
          for (int j = 0; j < TN; ++j) c[i][j] += v[i][j];
        }
      }
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int64_t row = m0 + TM * tm + i, col = n0 + TN * tn + j;
        if (row >= G || col >= N) continue;
        if (col < S + F) {
          a.d_weights[row * (S + F) + col] = static_cast<scalar_t>(c[i][j]);
        } else if (a.d_bias != nullptr) {
          a.d_bias[row] = static_cast<scalar_t>(c[i][j]);
        }
      }
    }
  } else {
    constexpr int TM = kInputTm, TN = kInputTn;
    acc_t c[TM][TN] = {};
    const int64_t b = local - p.w_tiles;
    const int64_t m0 = r0 + b / p.x_tiles_n * (16 * TM), n0 = b % p.x_tiles_n * (16 * TN);
    if (m0 >= R) return;  // past the last slice's rows
    const auto load_a = [&](int64_t i, int64_t r) -> acc_t {
      return r < R ? load_dz(dz + r * G + i) : acc_t(0);
    };
    const auto load_b = [&](int64_t i, int64_t j) -> acc_t {
      return j < F ? static_cast<acc_t>(a.weights[i * a.ws0 + (S + j) * a.ws1]) : acc_t(0);
    };
    wait_for_steps(a, m0 / a.B);
    tile_product<acc_t, TM, TN, true>(0, G, m0, n0, load_a, load_b, c);
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int64_t r = m0 + TM * tm + i, col = n0 + TN * tn + j;
        if (r < R && col < F) a.d_input[r * F + col] = static_cast<scalar_t>(c[i][j]);
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

// The workspace's layout: the partial sums (acc_t, where slices > 1), then one arrival
// counter per weight tile, then B progress counters (one per recurrence CTA at most).
int64_t partial_bytes(const Plan& p, const torch::stable::Tensor& like) {
  const int64_t acc = like.scalar_type() == torch::headeronly::ScalarType::Double ? 8 : 4;
  return p.slices > 1 ? p.w_tiles * p.slices * kWeightTile * acc : 0;
}

}  // namespace

SeqWgradOverlap seq_weight_grads_begin_cuda(const torch::stable::Tensor& like, int64_t T,
                                            int64_t B, int64_t S, int64_t F,
                                            const SeqWgradWanted& wanted,
                                            SeqWgradOverlaps overlaps) {
  const WgradMode mode = requested_mode();
  const int64_t R = T * B, macs = R * 3 * S * (S + 2 * F + 1);
  SeqWgradOverlap overlap;
  if (mode == WgradMode::kGemm) return overlap;
  if (mode == WgradMode::kAuto && macs > kFusedWeightGradMacs) {
    const bool taken = like.scalar_type() == torch::headeronly::ScalarType::Float &&
                       macs <= kOverlappedFloatWeightGradMacs && overlaps(like, T, B, S, F);
    if (!taken) return overlap;
  }
  const Plan p = make_plan(like, R, S, F, wanted);
  const int64_t counters = p.w_tiles + B, at = partial_bytes(p, like);
  torch::stable::Tensor work = fused_ops::empty(
      {at + counters * int64_t{sizeof(unsigned)}}, torch::headeronly::ScalarType::Byte, like);
  char* counters_at = static_cast<char*>(work.mutable_data_ptr()) + at;
  FUSED_OPS_CUDA_CHECK(cudaMemsetAsync(counters_at, 0, counters * sizeof(unsigned),
                                       fused_ops::current_stream(like)));
  overlap.progress = reinterpret_cast<unsigned*>(counters_at) + p.w_tiles;
  overlap.work = work;
  return overlap;
}

void seq_weight_grads_cuda(const torch::stable::Tensor& like, const void* dz, const void* h_prev,
                           const void* x, const void* weights, int64_t ws0, int64_t ws1,
                           void* d_weights, void* d_bias, void* d_input, int64_t T, int64_t B,
                           int64_t S, int64_t F, const SeqWgradOverlap& overlap) {
  const Plan p = make_plan(like, T * B, S, F,
                           {d_input != nullptr, d_weights != nullptr, d_bias != nullptr});
  const int64_t blocks = p.blocks();
  if (blocks == 0) return;
  FUSED_OPS_CHECK(blocks <= INT32_MAX, "lltm_sequence_backward: too many rows for one launch");
  const cudaStream_t stream = fused_ops::current_stream(like);
  char* work = static_cast<char*>(overlap.work->mutable_data_ptr());
  // Right behind a recurrence that publishes its progress, on a GPU with programmatic
  // dependent launch (compute capability 9.0 on): this kernel starts while the recurrence
  // runs and waits on its progress.
  const bool overlapped = overlap.publishers > 0 &&
                          fused_ops::device_properties(like).major >= 9;
  FUSED_OPS_DISPATCH_FLOATING(like.scalar_type(), "lltm_sequence_backward_cuda", [&] {
    using acc_t = fused_ops::opmath_t<scalar_t>;
    const Args<scalar_t> args{
        static_cast<const scalar_t*>(dz), static_cast<const scalar_t*>(h_prev),
        static_cast<const scalar_t*>(x), static_cast<const scalar_t*>(weights), ws0, ws1,
        static_cast<scalar_t*>(d_weights), static_cast<scalar_t*>(d_bias),
        static_cast<scalar_t*>(d_input), T, B, S, F, p, reinterpret_cast<acc_t*>(work),
        reinterpret_cast<unsigned*>(work + partial_bytes(p, like)),
        overlap.publishers > 0 ? overlap.progress : nullptr, overlap.publishers,
        overlap.interval};
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(blocks));
    config.blockDim = dim3(kThreads);
    config.stream = stream;
    config.attrs = &attribute;
    config.numAttrs = overlapped ? 1 : 0;
    FUSED_OPS_CUDA_CHECK(cudaLaunchKernelEx(&config, seq_weight_grads_kernel<scalar_t>, args));
    FUSED_OPS_LAUNCH_CHECK();
  });
}

}  // namespace lltm
