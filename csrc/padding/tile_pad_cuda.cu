// Brick padding: CUDA kernels and the CUDA registration.
//
// Forward: one kernel. A row of threads writes one output row: the unaligned head and
// tail element by element, the rest as 16-byte packs, coalesced; the source row and its
// rotation are worked out once per row. The kernel only moves bytes, so it is compiled
// once per element size (1, 2, 4, 8, 16 bytes) rather than once per dtype.
//
// Backward: a gather with no atomics. Each thread owns input pixels and sums their
// copies in a fixed order. When the input has too few pixels to fill the GPU (a small
// tile padded many times over), the copies of each pixel are split into S parts (runs
// of bands x runs of column repeats): stage 1 writes S partial sums per pixel to a float
// workspace (under 32 MiB), stage 2 adds them in a fixed order. Bitwise deterministic.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/alloc.h"
#include "common/checks.h"
#include "common/cuda_utils.cuh"
#include "common/dispatch.h"
#include "common/kernel_image.cuh"
#include "common/module.h"
#include "padding/tile_pad.h"
#include "padding/tile_pad_driver.h"

FUSED_OPS_PYTHON_MODULE(_C_cuda)

namespace padding_ops {
namespace {

// An element of 16 bytes (complex128).
struct alignas(16) Bytes16 {
  uint64_t lo, hi;
};

// The Geometry in the kernels' index type I (int32_t when Geometry::fits32, else int64_t).
template <typename I>
struct Dims {
  I H, W, Ho, Wo, off, c0, shift;
};

template <typename I>
Dims<I> dims_of(const Geometry& g) {
  return {static_cast<I>(g.H),   static_cast<I>(g.W),  static_cast<I>(g.Ho),
          static_cast<I>(g.Wo),  static_cast<I>(g.off), static_cast<I>(g.c0),
          static_cast<I>(g.shift)};
}

// How the backward splits the copies of each pixel: the bands in runs of bands_per_run,
// the column repeats k in runs of k_per_run. S = band_runs * k_runs.
template <typename I>
struct Split {
  I band_runs, bands_per_run, k_runs, k_per_run;
};

// ---- Kernels ------------------------------------------------------------------------------

template <typename I>
__device__ __forceinline__ I imin(I a, I b) {
  return a < b ? a : b;
}
template <typename I>
__device__ __forceinline__ I imax(I a, I b) {
  return a > b ? a : b;
}

// One 16-byte store. Written in PTX because the compiler splits a plain store of a pack
// whose elements come from separate loads into one store per element when the index
// type is 32-bit.
__device__ __forceinline__ void store16(void* dst, uint4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

// Block (tx, ty): ty output rows at a time, tx threads along each row. T is an unsigned
// type (or Bytes16) of the element's size; V elements make one 16-byte pack.
// pack_step = (tx * V) % W: how far a thread's source column moves between its packs.
template <typename T, typename I>
__global__ void forward_kernel(const T* __restrict__ x, T* __restrict__ y, Dims<I> d,
                               int64_t rows, I pack_step) {
  constexpr int V = fused_ops::pack16<T>;
  static_assert(V * sizeof(T) == sizeof(uint4), "a pack is 16 bytes");
  const I tx = threadIdx.x, bx = blockDim.x;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const I r = static_cast<I>(row);
    const I l = r / d.Ho, ro = r - l * d.Ho;
    const I a = ro + d.off, q = a / d.H, i = a - q * d.H;
    const I base = band_base<I>(q, d.c0, d.shift, d.W);
    const T* xr = x + static_cast<int64_t>(l * d.H + i) * d.W;
    T* yr = y + row * d.Wo;
    // Elements before the first 16-byte boundary of the row, then whole packs, then
    // the rest (fewer than V elements each side).
    const auto misaligned = reinterpret_cast<std::uintptr_t>(yr) % 16;
    const I head = imin(d.Wo, static_cast<I>((16 - misaligned) % 16 / sizeof(T)));
    const I packs = (d.Wo - head) / V;
    const I tail = head + packs * V;
    for (I c = tx; c < head; c += bx) yr[c] = xr[(c + base) % d.W];
    for (I c = tail + tx; c < d.Wo; c += bx) yr[c] = xr[(c + base) % d.W];
    if (tx < packs) {
      I j0 = (head + tx * V + base) % d.W;  // source column of the thread's next pack
      for (I p = tx; p < packs; p += bx) {
        T elems[V];
        I j = j0;
#pragma unroll
        for (int k = 0; k < V; ++k) {
          elems[k] = xr[j];
          j = j + 1 == d.W ? 0 : j + 1;
        }
        uint4 pack;
        memcpy(&pack, elems, sizeof(pack));  // registers only, no aliasing
        store16(yr + head + p * V, pack);
        j0 += pack_step;
        j0 = j0 >= d.W ? j0 - d.W : j0;
      }
    }
  }
}

// Block (tx, ty): ty rows of the output array `out` at a time, tx threads along each.
// out is (S, lead, H, W): split s of pixel (l, i, j). With S == 1 it is grad_x itself
// (out_t = scalar_t), else the float workspace (out_t = acc_t). rows = S * lead * H.
template <typename scalar_t, typename out_t, typename I>
__global__ void backward_gather_kernel(const scalar_t* __restrict__ gy, out_t* __restrict__ out,
                                       Dims<I> d, I lead, Split<I> split, int64_t rows) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const I R = static_cast<I>(row);
    const I t = R / d.H, i = R - t * d.H;
    const I s = t / lead, l = t - s * lead;
    const I band_run = s / split.k_runs, k_run = s - band_run * split.k_runs;
    const I q_begin = imax(band_run * split.bands_per_run, first_band<I>(i, d.off));
    const I q_end = imin((band_run + 1) * split.bands_per_run, end_band<I>(i, d.off, d.H, d.Ho));
    const I k_begin = k_run * split.k_per_run, k_end = k_begin + split.k_per_run;
    const I base_begin = band_base<I>(q_begin, d.c0, d.shift, d.W);
    const scalar_t* gy_l = gy + static_cast<int64_t>(l) * d.Ho * d.Wo;
    for (I j = threadIdx.x; j < d.W; j += blockDim.x) {
      acc_t acc = 0;
      I base = base_begin;
      for (I q = q_begin; q < q_end; ++q) {
        const scalar_t* src = gy_l + static_cast<int64_t>(q * d.H + i - d.off) * d.Wo;
        // Columns co = k*W + j - base copy pixel j; k = 0 only when j >= base.
        const I k_first = imax(k_begin, static_cast<I>(j >= base ? 0 : 1));
        const I co_end = imin(k_end * d.W + j - base, d.Wo);
#pragma unroll 8
        for (I co = k_first * d.W + j - base; co < co_end; co += d.W) {
          acc += static_cast<acc_t>(src[co]);
        }
        base = base >= d.shift ? base - d.shift : base + d.W - d.shift;  // base(q + 1)
      }
      out[row * d.W + j] = static_cast<out_t>(acc);
    }
  }
}

// grad_x[p] = sum over s of partial[s][p], in a fixed order: lane y of the block's 8
// sums s = y, y + 8, ..., then lane 0 adds the 8 lane sums in order. Block (32, 8).
constexpr int kReduceLanes = 8;
template <typename scalar_t, typename acc_t>
__global__ void backward_reduce_kernel(const acc_t* __restrict__ partial,
                                       scalar_t* __restrict__ grad_x, int64_t pixels,
                                       int64_t splits) {
  __shared__ acc_t lane_sum[kReduceLanes][32];
  const int64_t p = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  acc_t acc = 0;
  if (p < pixels) {
#pragma unroll 4
    for (int64_t s = threadIdx.y; s < splits; s += kReduceLanes) acc += partial[s * pixels + p];
  }
  lane_sum[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && p < pixels) {
    acc_t total = lane_sum[0][threadIdx.x];
#pragma unroll
    for (int y = 1; y < kReduceLanes; ++y) total += lane_sum[y][threadIdx.x];
    grad_x[p] = static_cast<scalar_t>(total);
  }
}

// ---- Host side: launch shapes and dispatch ---------------------------------------------------

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up32(int64_t a) { return ceil_div(a, 32) * 32; }

// Threads the device holds at once.
int64_t resident_threads(const Tensor& t) {
  const cudaDeviceProp& prop = fused_ops::device_properties(t);
  return static_cast<int64_t>(prop.multiProcessorCount) * prop.maxThreadsPerMultiProcessor;
}

// Blocks of `tx` threads along a row and 256 / tx rows; enough blocks for every row (the
// kernels loop when the grid limit cuts them).
struct RowsLaunch {
  dim3 grid, block;
  RowsLaunch(int64_t rows, int64_t tx) {
    const int64_t ty = std::max<int64_t>(1, 256 / tx);
    block = dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty));
    grid = dim3(static_cast<unsigned>(std::min<int64_t>(ceil_div(rows, ty), INT32_MAX)));
  }
};

template <typename T, typename I>
void launch_forward(const Tensor& x, Tensor& y, const Geometry& g) {
  constexpr int V = fused_ops::pack16<T>;
  // About two packs per thread, 32 to 256 threads a row.
  const int64_t tx = std::clamp<int64_t>(round_up32(ceil_div(ceil_div(g.Wo, V), 2)), 32, 256);
  const RowsLaunch launch(g.lead * g.Ho, tx);
  forward_kernel<T, I><<<launch.grid, launch.block, 0, fused_ops::current_stream(x)>>>(
      static_cast<const T*>(x.const_data_ptr()), static_cast<T*>(y.mutable_data_ptr()),
      dims_of<I>(g), g.lead * g.Ho, static_cast<I>(tx * V % g.W));
  FUSED_OPS_LAUNCH_CHECK();
}

template <typename T>
void forward_sized(const Tensor& x, Tensor& y, const Geometry& g) {
  if (g.fits32) {
    launch_forward<T, int32_t>(x, y, g);
  } else {
    launch_forward<T, int64_t>(x, y, g);
  }
}

void forward_cuda_kernel(const Tensor& x, Tensor& y, const Geometry& g) {
  const fused_ops::DeviceGuard guard(x.get_device_index());
  fused_ops::check_kernel_image(x);
  switch (x.element_size()) {
    case 1: return forward_sized<uint8_t>(x, y, g);
    case 2: return forward_sized<uint16_t>(x, y, g);
    case 4: return forward_sized<uint32_t>(x, y, g);
    case 8: return forward_sized<uint64_t>(x, y, g);
    case 16: return forward_sized<Bytes16>(x, y, g);
    default:
      fused_ops::raise<std::invalid_argument>(
          "tile_pad on CUDA supports elements of 1, 2, 4, 8 or 16 bytes, got ",
          fused_ops::dtype_str(x.scalar_type()));
  }
}

// Splits of each pixel's copies: enough stage-1 threads to fill the GPU, each summing at
// least ~32 copies, with the workspace under 16 MiB before rounding (32 MiB after).
// S == 1 (no split) when the input alone has enough pixels or too few copies each.
template <typename I>
Split<I> choose_split(const Geometry& g, int64_t acc_size, int64_t resident) {
  const int64_t pixels = g.lead * g.H * g.W;
  const int64_t k_total = g.Wo / g.W + 2;  // column repeats k of any pixel lie in [0, k_total)
  const int64_t copies = g.lead * g.Ho * g.Wo / pixels;
  int64_t splits = std::min({ceil_div(resident, pixels), copies / 32,
                             (int64_t{16} << 20) / (pixels * acc_size)});
  if (splits <= 1) {
    return {1, static_cast<I>(g.bands), 1, static_cast<I>(k_total)};
  }
  int64_t band_runs = std::min(splits, g.bands);
  const int64_t bands_per_run = ceil_div(g.bands, band_runs);
  band_runs = ceil_div(g.bands, bands_per_run);
  int64_t k_runs = std::min(ceil_div(splits, band_runs), k_total);
  const int64_t k_per_run = ceil_div(k_total, k_runs);
  k_runs = ceil_div(k_total, k_per_run);
  return {static_cast<I>(band_runs), static_cast<I>(bands_per_run), static_cast<I>(k_runs),
          static_cast<I>(k_per_run)};
}

template <typename scalar_t, typename I>
void launch_backward(const Tensor& grad_y, Tensor& grad_x, const Geometry& g) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  const int64_t resident = resident_threads(grad_y);
  const Split<I> split = choose_split<I>(g, sizeof(acc_t), resident);
  const int64_t splits = static_cast<int64_t>(split.band_runs) * split.k_runs;
  const int64_t rows = splits * g.lead * g.H;
  // Enough threads along a row to fill the GPU when rows are few, at most one per pixel.
  const int64_t tx = std::min<int64_t>(
      std::clamp<int64_t>(round_up32(ceil_div(resident, rows)), 32, 256),
      round_up32(g.W));
  const RowsLaunch launch(rows, tx);
  const cudaStream_t stream = fused_ops::current_stream(grad_y);
  const scalar_t* gy = grad_y.const_data_ptr<scalar_t>();
  if (splits == 1) {
    backward_gather_kernel<scalar_t, scalar_t, I><<<launch.grid, launch.block, 0, stream>>>(
        gy, grad_x.mutable_data_ptr<scalar_t>(), dims_of<I>(g), static_cast<I>(g.lead), split,
        rows);
    FUSED_OPS_LAUNCH_CHECK();
    return;
  }
  const int64_t pixels = grad_x.numel();
  const auto acc_dtype = fused_ops::opmath_type(grad_y.scalar_type());
  Tensor partial = fused_ops::empty({splits, pixels}, acc_dtype, grad_y);
  backward_gather_kernel<scalar_t, acc_t, I><<<launch.grid, launch.block, 0, stream>>>(
      gy, partial.mutable_data_ptr<acc_t>(), dims_of<I>(g), static_cast<I>(g.lead), split, rows);
  FUSED_OPS_LAUNCH_CHECK();
  const dim3 reduce_block(32, kReduceLanes);
  const dim3 reduce_grid(static_cast<unsigned>(ceil_div(pixels, 32)));
  backward_reduce_kernel<scalar_t, acc_t><<<reduce_grid, reduce_block, 0, stream>>>(
      partial.const_data_ptr<acc_t>(), grad_x.mutable_data_ptr<scalar_t>(), pixels, splits);
  FUSED_OPS_LAUNCH_CHECK();
}

void backward_cuda_kernel(const Tensor& grad_y, Tensor& grad_x, const Geometry& g) {
  const fused_ops::DeviceGuard guard(grad_y.get_device_index());
  fused_ops::check_kernel_image(grad_y);
  FUSED_OPS_DISPATCH_FLOATING(grad_y.scalar_type(), "tile_pad_backward_cuda", [&] {
    if (g.fits32) {
      launch_backward<scalar_t, int32_t>(grad_y, grad_x, g);
    } else {
      launch_backward<scalar_t, int64_t>(grad_y, grad_x, g);
    }
  });
}

Tensor forward_cuda(const Tensor& x, const std::vector<int64_t>& pad, int64_t shift) {
  return forward(x, pad, shift, forward_cuda_kernel);
}

Tensor backward_cuda(const Tensor& grad_output, const std::vector<int64_t>& pad, int64_t shift) {
  return backward(grad_output, pad, shift, backward_cuda_kernel);
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(padding_ops, CUDA, m) {
  m.impl("tile_pad", TORCH_BOX(&forward_cuda));
  m.impl("tile_pad_backward", TORCH_BOX(&backward_cuda));
}

}  // namespace padding_ops
