// LLTM over a sequence on CUDA: the choice between the persistent kernels
// (lltm_sequence_persistent.h: one launch per recurrence, W_h on chip) and the per-step
// fallback, the fallback's pointwise kernels, and the CUDA registration of the sequence ops.
//
// The fallback is still one op call per sequence: the driver (lltm_sequence_driver.h) runs
// the input projection as one GEMM, then per step the recurrent GEMM through cuBLAS (aten::mm
// into a buffer reused by every step) and one kernel below, so 2 launches per step each way;
// it serves what the persistent kernels do not (large S, float64, GPUs they do not support).
// Two persistent paths: "cta" (lltm_sequence_cta.h: one CTA holds all of W_h in registers and
// runs its batch rows for the whole sequence; S <= 128) and "persistent" (the cluster kernels
// of lltm_sequence_persistent.h: W_h's columns split over a cluster; S up to 512 in float32).
// A third, "step" (lltm_sequence_step.h): one tensor-core kernel per step with the cell in its
// epilogue (float32 as 3xTF32), launched back to back (no cluster, W_h read from L2 each
// step), so any S fits (S not a multiple of 8 as the zero-padded problem, step_state).
// LLTM_SEQUENCE_PATH=cta|persistent|step|fallback forces one path (tests; the choice is
// lltm_sequence_path.h's); unset or "auto":
// cta where it runs, else step for the half types' forward from kStepMinForwardState on and
// for float32 from the states and batches of float_takes_step on, else the
// cluster kernels where they run and the batch is below their measured crossover
// (past_cluster_crossover: step, or the fallback for float32 where step does not run), else
// step where it runs, else the fallback
// (on the H100, in float32, the cta path measured faster than the cluster kernels at every
// size it supports, benchmarks/results/lltm_sequence_cta_h100.md; the half types take it too:
// both paths hold W_h and sum as float, so their per-step costs hardly depend on the dtype,
// and float16 and bfloat16 at (256, 16, 32, 128) measured faster than cuDNN's in the same
// dtype, benchmarks/results/lltm_sequence_cta_lanes_h100.md).
#include <torch/csrc/inductor/aoti_torch/generated/c_shim_cuda.h>
#include <torch/csrc/stable/library.h>

#include <algorithm>
#include <string>

#include "common/cuda_utils.cuh"
#include "common/dispatch.h"
#include "common/kernel_image.cuh"
#include "lltm/lltm.h"
#include "lltm/lltm_sequence.h"
#include "lltm/lltm_sequence_driver.h"
#include "lltm/lltm_sequence_path.h"  // the path choice and the kernels' entry points
#include "lltm/lltm_sequence_step_pad.cuh"
#include "lltm/lltm_sequence_wgrad.h"

namespace lltm {
namespace {

// Forward step t on (b, j) of the (B, S) state: z = P_t + rec, rounded to scalar_t (the z that
// gates keeps for the backward), then the cell. Rows b are looped with a stride of gridDim.y.
template <typename scalar_t>
__global__ void seq_forward_step_kernel(const scalar_t* __restrict__ rec,
                                        scalar_t* __restrict__ z,
                                        const scalar_t* __restrict__ c_prev,
                                        scalar_t* __restrict__ h_out,
                                        scalar_t* __restrict__ c_out, int64_t B, int64_t S) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= S) return;
  for (int64_t b = blockIdx.y; b < B; b += gridDim.y) {
    const int64_t g = b * 3 * S + j;
    const scalar_t zi = static_cast<acc_t>(z[g]) + static_cast<acc_t>(rec[g]);
    const scalar_t zo = static_cast<acc_t>(z[g + S]) + static_cast<acc_t>(rec[g + S]);
    const scalar_t zc = static_cast<acc_t>(z[g + 2 * S]) + static_cast<acc_t>(rec[g + 2 * S]);
    z[g] = zi;
    z[g + S] = zo;
    z[g + 2 * S] = zc;
    acc_t h, c;
    cell_forward<acc_t>(zi, zo, zc, c_prev[b * S + j], h, c);
    h_out[b * S + j] = h;
    c_out[b * S + j] = c;
  }
}

// Backward step t on (b, j): dh = grad_h + rec_dh (rounded to scalar_t, as the cell's grad_h
// is), dc = carry; dz_t over z_t, carry = dL/dc_{t-1} (kept in acc_t across steps).
template <typename scalar_t>
__global__ void seq_backward_step_kernel(const scalar_t* __restrict__ grad_h,
                                         const scalar_t* __restrict__ rec_dh,
                                         const scalar_t* __restrict__ c_t,
                                         scalar_t* __restrict__ dz,
                                         fused_ops::opmath_t<scalar_t>* __restrict__ carry,
                                         int64_t B, int64_t S) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= S) return;
  for (int64_t b = blockIdx.y; b < B; b += gridDim.y) {
    const int64_t k = b * S + j, g = b * 3 * S + j;
    const scalar_t dh = static_cast<acc_t>(grad_h[k]) + static_cast<acc_t>(rec_dh[k]);
    acc_t d_i, d_o, d_c, d_cell;
    cell_backward<acc_t>(dh, carry[k], c_t[k], dz[g], dz[g + S], dz[g + 2 * S], d_i, d_o, d_c,
                         d_cell);
    dz[g] = d_i;
    dz[g + S] = d_o;
    dz[g + 2 * S] = d_c;
    carry[k] = d_cell;
  }
}

// out[i] = a[i] + b[i] in acc_t, rounded once; a nullptr: 0 + b[i] (d_h0 = grad_hs[0] +
// dz_0 W_h of the fallback; grad_hs[T] = grad_output[T-1] + grad_h_n where the driver assembles
// grad_hs).
template <typename scalar_t>
__global__ void seq_add_kernel(scalar_t* __restrict__ out, const scalar_t* __restrict__ a,
                               const scalar_t* __restrict__ b, int64_t n) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const acc_t x = a != nullptr ? static_cast<acc_t>(a[i]) : acc_t(0);
    out[i] = x + static_cast<acc_t>(b[i]);
  }
}

// Column sums of x (rows, n): block (32, kSumRows) over 32 columns; thread (tx, ty) adds rows
// ty, ty + kSumRows, ... in order, then the kSumRows partial sums are added in order of ty:
// a fixed order of additions, so the result is bitwise deterministic.
constexpr int kSumRows = 32;
template <typename scalar_t>
__global__ void seq_column_sum_kernel(scalar_t* __restrict__ out, const scalar_t* __restrict__ x,
                                      int64_t rows, int64_t n) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  __shared__ acc_t partial[kSumRows][33];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  acc_t acc = 0;
  if (j < n) {
    for (int64_t r = threadIdx.y; r < rows; r += kSumRows) acc += static_cast<acc_t>(x[r * n + j]);
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < n) {
    acc_t sum = partial[0][threadIdx.x];
    for (int k = 1; k < kSumRows; ++k) sum += partial[k][threadIdx.x];
    out[j] = sum;
  }
}

// The driver's primitives on CUDA (lltm_sequence_driver.h's SeqDevice), on the current stream.
void copy2d_cuda(const Tensor& like, void* dst, int64_t dpitch, const void* src, int64_t spitch,
                 int64_t width, int64_t rows) {
  if (rows == 0 || width == 0) return;
  FUSED_OPS_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(dpitch), src,
                                         static_cast<size_t>(spitch), static_cast<size_t>(width),
                                         static_cast<size_t>(rows), cudaMemcpyDeviceToDevice,
                                         fused_ops::current_stream(like)));
}

void zero_cuda(const Tensor& like, void* dst, int64_t bytes) {
  if (bytes == 0) return;
  FUSED_OPS_CUDA_CHECK(
      cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), fused_ops::current_stream(like)));
}

void add_cuda(const Tensor& like, void* out, const void* a, const void* b, int64_t n) {
  if (n == 0) return;
  const cudaStream_t stream = fused_ops::current_stream(like);
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 4096);
  FUSED_OPS_DISPATCH_FLOATING(like.scalar_type(), "lltm_sequence_backward_cuda", [&] {
    seq_add_kernel<scalar_t><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
        static_cast<scalar_t*>(out), static_cast<const scalar_t*>(a),
        static_cast<const scalar_t*>(b), n);
    FUSED_OPS_LAUNCH_CHECK();
  });
}

void column_sum_cuda(const Tensor& like, void* out, const void* x, int64_t rows, int64_t n) {
  if (n == 0) return;
  const cudaStream_t stream = fused_ops::current_stream(like);
  const dim3 block(32, kSumRows);
  const dim3 grid(static_cast<unsigned>((n + 31) / 32));
  FUSED_OPS_DISPATCH_FLOATING(like.scalar_type(), "lltm_sequence_backward_cuda", [&] {
    seq_column_sum_kernel<scalar_t><<<grid, block, 0, stream>>>(
        static_cast<scalar_t*>(out), static_cast<const scalar_t*>(x), rows, n);
    FUSED_OPS_LAUNCH_CHECK();
  });
}

// Whether the weight-gradient kernel will overlap the backward recurrence: the cta path
// publishes its progress, and Hopper starts the kernel while the recurrence runs.
bool weight_grads_overlap_cuda(const Tensor& like, int64_t T, int64_t B, int64_t S, int64_t F) {
  return pick_path(like, SeqSizes{T, B, F, S}, /*backward=*/true) == SeqPath::kCta &&
         fused_ops::device_properties(like).major >= 9;
}

SeqWgradOverlap weight_grads_begin_cuda(const Tensor& like, int64_t T, int64_t B, int64_t S,
                                        int64_t F, const SeqWgradWanted& wanted) {
  return seq_weight_grads_begin_cuda(like, T, B, S, F, wanted, weight_grads_overlap_cuda);
}

constexpr SeqDevice kCuda{aoti_torch_cuda_mm_out, aoti_torch_cuda_addmm_out, copy2d_cuda,
                          zero_cuda, add_cuda, column_sum_cuda, weight_grads_begin_cuda,
                          seq_weight_grads_cuda};

void forward_step_cuda(const Tensor& rec, Tensor& gates, Tensor& hs, Tensor& cells, int64_t t) {
  const int64_t B = hs.size(1), S = hs.size(2);
  const cudaStream_t stream = fused_ops::current_stream(gates);
  const fused_ops::RowLaunch launch(B, S);
  FUSED_OPS_DISPATCH_FLOATING(gates.scalar_type(), "lltm_sequence_forward_cuda", [&] {
    seq_forward_step_kernel<scalar_t><<<launch.grid, launch.block, 0, stream>>>(
        rec.const_data_ptr<scalar_t>(), gates.mutable_data_ptr<scalar_t>() + t * B * 3 * S,
        cells.const_data_ptr<scalar_t>() + t * B * S,
        hs.mutable_data_ptr<scalar_t>() + (t + 1) * B * S,
        cells.mutable_data_ptr<scalar_t>() + (t + 1) * B * S, B, S);
    FUSED_OPS_LAUNCH_CHECK();
  });
}

void backward_step_cuda(const Tensor& grad_hs, const Tensor& rec_dh, const Tensor& cells,
                        Tensor& dz, Tensor& carry, int64_t t) {
  const int64_t B = cells.size(1), S = cells.size(2);
  const cudaStream_t stream = fused_ops::current_stream(dz);
  const fused_ops::RowLaunch launch(B, S);
  FUSED_OPS_DISPATCH_FLOATING(dz.scalar_type(), "lltm_sequence_backward_cuda", [&] {
    using acc_t = fused_ops::opmath_t<scalar_t>;
    seq_backward_step_kernel<scalar_t><<<launch.grid, launch.block, 0, stream>>>(
        grad_hs.const_data_ptr<scalar_t>() + (t + 1) * B * S, rec_dh.const_data_ptr<scalar_t>(),
        cells.const_data_ptr<scalar_t>() + (t + 1) * B * S,
        dz.mutable_data_ptr<scalar_t>() + t * B * 3 * S, carry.mutable_data_ptr<acc_t>(), B, S);
    FUSED_OPS_LAUNCH_CHECK();
  });
}

// The kernels' argument blocks (lltm_sequence.h) of one forward / backward recurrence.
template <typename scalar_t>
SeqForward<scalar_t> forward_args(const Tensor& w_h, Tensor& gates, Tensor& hs, Tensor& cells,
                                  const SeqSizes& sz) {
  return {w_h.const_data_ptr<scalar_t>(), gates.mutable_data_ptr<scalar_t>(),
          hs.mutable_data_ptr<scalar_t>(), cells.mutable_data_ptr<scalar_t>(), sz.steps, sz.batch,
          sz.state};
}

template <typename scalar_t>
SeqBackward<scalar_t> backward_args(const Tensor& w_h, Tensor& dz, const Tensor& cells,
                                    const Tensor& grad_hs, const Tensor& grad_c_n, Tensor& d_h0,
                                    Tensor& d_c0, const SeqSizes& sz) {
  return {w_h.const_data_ptr<scalar_t>(),      dz.mutable_data_ptr<scalar_t>(),
          cells.const_data_ptr<scalar_t>(),    grad_hs.const_data_ptr<scalar_t>(),
          grad_c_n.const_data_ptr<scalar_t>(), d_h0.mutable_data_ptr<scalar_t>(),
          d_c0.mutable_data_ptr<scalar_t>(),   sz.steps,
          sz.batch,                            sz.state};
}

// W_h as the cta kernels read it: weights itself with ldw = weights.stride(0) where its
// columns are contiguous (W_h = weights[:, :S] read in place: no copy, no allocation), else
// the contiguous copy (ldw = S).
struct InPlaceWeights {
  Tensor w_h;
  int64_t ldw;
};
InPlaceWeights in_place_weights(const Tensor& weights, int64_t S) {
  if (weights.stride(1) == 1 && weights.stride(0) > 0) return {weights, weights.stride(0)};
  return {recurrent_weights(kCuda, weights, S), S};
}

template <typename T>
const T* opt_ptr(const OptTensor& t) {
  return t ? t->const_data_ptr<T>() : nullptr;
}

// The cta forward on the op's arguments in place: the kernel reads h0, c0 and W_h where they
// are and writes hs[0], cells[0] itself (no copy before the launch).
template <typename scalar_t>
void cta_forward(const Tensor& weights, const Tensor& h0, const Tensor& c0, Tensor& gates,
                 Tensor& hs, Tensor& cells, const SeqSizes& sz) {
  const InPlaceWeights w = in_place_weights(weights, sz.state);
  const Tensor h0c = as_contiguous(h0), c0c = as_contiguous(c0);
  SeqForward<scalar_t> a = forward_args<scalar_t>(w.w_h, gates, hs, cells, sz);
  a.ldw = w.ldw;
  a.h0 = h0c.const_data_ptr<scalar_t>();
  a.c0 = c0c.const_data_ptr<scalar_t>();
  seq_cta_forward<scalar_t>(a, fused_ops::current_stream(gates));
}

// The cta backward: z read from gates and dz written to dz (out of place), W_h in place, the
// output gradients in their parts (none assembled, none zero-filled).
template <typename scalar_t>
void cta_backward(const Tensor& weights, const Tensor& gates, Tensor& dz, const Tensor& cells,
                  const SeqGradParts& g, Tensor& d_h0, Tensor& d_c0, const SeqSizes& sz,
                  SeqWgradOverlap& overlap) {
  const InPlaceWeights w = in_place_weights(weights, sz.state);
  SeqBackward<scalar_t> a{w.w_h.const_data_ptr<scalar_t>(),
                          dz.mutable_data_ptr<scalar_t>(),
                          cells.const_data_ptr<scalar_t>(),
                          nullptr,  // grad_hs: the parts below instead
                          opt_ptr<scalar_t>(g.c_n),
                          d_h0.mutable_data_ptr<scalar_t>(),
                          d_c0.mutable_data_ptr<scalar_t>(),
                          sz.steps,
                          sz.batch,
                          sz.state};
  a.ldw = w.ldw;
  a.z = gates.const_data_ptr<scalar_t>();
  a.grad_out = opt_ptr<scalar_t>(g.out);
  a.grad_h0 = opt_ptr<scalar_t>(g.h0);
  a.grad_h_n = opt_ptr<scalar_t>(g.h_n);
  // Progress published only where the weight-gradient kernel can start while the recurrence
  // runs (programmatic dependent launch: compute capability 9.0 on); elsewhere it starts
  // after the recurrence, and the publishes would only cost the recurrence time.
  const bool publish =
      overlap.progress != nullptr && fused_ops::device_properties(dz).major >= 9;
  if (publish) {
    a.progress = overlap.progress;
    a.progress_interval = seq_wgrad_publish_interval(sz.steps);
  }
  const int64_t ctas = seq_cta_backward<scalar_t>(a, fused_ops::current_stream(dz));
  if (publish) {
    overlap.publishers = ctas;
    overlap.interval = a.progress_interval;
  }
}

// The step forward with the global scratch its tile asks for (seq_step_forward_scratch: the
// split-K tile's slots, and its counters zeroed), for the call only.
template <typename scalar_t>
void run_step_forward(const SeqForward<scalar_t>& a, const Tensor& like) {
  const StepForwardScratchSize n =
      seq_step_forward_scratch(like.get_device_index(), like.scalar_type(), a.batch, a.state);
  const cudaStream_t stream = fused_ops::current_stream(like);
  if (n.floats == 0) {
    seq_step_forward<scalar_t>(a, nullptr, nullptr, stream);
    return;
  }
  Tensor slots = fused_ops::empty({n.floats}, torch::headeronly::ScalarType::Float, like);
  const int64_t counter_bytes = n.counters * static_cast<int64_t>(sizeof(int));
  Tensor counters = fused_ops::empty({counter_bytes}, torch::headeronly::ScalarType::Byte, like);
  zero_cuda(like, counters.data_ptr(), counter_bytes);
  seq_step_forward<scalar_t>(a, slots.mutable_data_ptr<float>(),
                             static_cast<int*>(counters.data_ptr()), stream);
}

template <typename scalar_t>
void step_forward(const Tensor& w_h, Tensor& gates, Tensor& hs, Tensor& cells,
                  const SeqSizes& sz) {
  const int64_t T = sz.steps, B = sz.batch, S = sz.state, Sp = step_state(S);
  if (Sp == S) {
    run_step_forward<scalar_t>(forward_args<scalar_t>(w_h, gates, hs, cells, sz), gates);
    return;
  }
  // In: P (all of gates), h0 = hs[0], c0 = cells[0]; out: z, hs[1:], cells[1:].
  const Tensor wp = padded_weights(w_h, S, Sp);
  Tensor gp = padded({T, B, 3 * Sp}, gates, gates.const_data_ptr(), T * B * 3, S, Sp);
  Tensor hp = padded({T + 1, B, Sp}, hs, hs.const_data_ptr(), B, S, Sp);
  Tensor cp = padded({T + 1, B, Sp}, cells, cells.const_data_ptr(), B, S, Sp);
  SeqSizes psz = sz;
  psz.state = Sp;
  run_step_forward<scalar_t>(forward_args<scalar_t>(wp, gp, hp, cp, psz), gates);
  unpadded(gates, gates.data_ptr(), gp.const_data_ptr(), T * B * 3, S, Sp);
  unpadded(hs, hs.mutable_data_ptr<scalar_t>() + B * S, hp.const_data_ptr<scalar_t>() + B * Sp,
           T * B, S, Sp);
  unpadded(cells, cells.mutable_data_ptr<scalar_t>() + B * S,
           cp.const_data_ptr<scalar_t>() + B * Sp, T * B, S, Sp);
}

// The step backward's scratch: W_h^T (Sp, 3Sp) in the dtype and the float carry (B, Sp); for
// S not a multiple of 8 the padded problem (step_state).
template <typename scalar_t>
void step_backward(const Tensor& w_h, Tensor& dz, const Tensor& cells, const Tensor& grad_hs,
                   const Tensor& grad_c_n, Tensor& d_h0, Tensor& d_c0, const SeqSizes& sz) {
  const int64_t T = sz.steps, B = sz.batch, S = sz.state, Sp = step_state(S);
  Tensor w_h_t = new_empty({Sp, 3 * Sp}, dz);
  Tensor carry = fused_ops::empty({B, Sp}, torch::headeronly::ScalarType::Float, dz);
  const cudaStream_t stream = fused_ops::current_stream(dz);
  if (Sp == S) {
    seq_step_backward<scalar_t>(
        backward_args<scalar_t>(w_h, dz, cells, grad_hs, grad_c_n, d_h0, d_c0, sz),
        w_h_t.mutable_data_ptr<scalar_t>(), carry.mutable_data_ptr<float>(), stream);
    return;
  }
  // In: z (in dz), cells, grad_hs, grad_c_n; out: dz, d_h0, d_c0.
  const Tensor wp = padded_weights(w_h, S, Sp);
  Tensor dzp = padded({T, B, 3 * Sp}, dz, dz.const_data_ptr(), T * B * 3, S, Sp);
  const Tensor cp = padded({T + 1, B, Sp}, cells, cells.const_data_ptr(), (T + 1) * B, S, Sp);
  const Tensor gp =
      padded({T + 1, B, Sp}, grad_hs, grad_hs.const_data_ptr(), (T + 1) * B, S, Sp);
  const Tensor gcp = padded({B, Sp}, grad_c_n, grad_c_n.const_data_ptr(), B, S, Sp);
  Tensor dh0p = new_empty({B, Sp}, dz), dc0p = new_empty({B, Sp}, dz);
  SeqSizes psz = sz;
  psz.state = Sp;
  seq_step_backward<scalar_t>(
      backward_args<scalar_t>(wp, dzp, cp, gp, gcp, dh0p, dc0p, psz),
      w_h_t.mutable_data_ptr<scalar_t>(), carry.mutable_data_ptr<float>(), stream);
  unpadded(dz, dz.data_ptr(), dzp.const_data_ptr(), T * B * 3, S, Sp);
  unpadded(dz, d_h0.data_ptr(), dh0p.const_data_ptr(), B, S, Sp);
  unpadded(dz, d_c0.data_ptr(), dc0p.const_data_ptr(), B, S, Sp);
}

#if LLTM_SEQUENCE_HAVE_PERSISTENT
template <typename scalar_t>
void persistent_forward(const Tensor& w_h, Tensor& gates, Tensor& hs, Tensor& cells,
                        const SeqSizes& sz) {
  seq_persistent_forward<scalar_t>(forward_args<scalar_t>(w_h, gates, hs, cells, sz),
                                   fused_ops::current_stream(gates));
}

template <typename scalar_t>
void persistent_backward(const Tensor& w_h, Tensor& dz, const Tensor& cells,
                         const Tensor& grad_hs, const Tensor& grad_c_n, Tensor& d_h0,
                         Tensor& d_c0, const SeqSizes& sz) {
  seq_persistent_backward<scalar_t>(
      backward_args<scalar_t>(w_h, dz, cells, grad_hs, grad_c_n, d_h0, d_c0, sz),
      fused_ops::current_stream(dz));
}
#endif

// FN<scalar_t>(args...) for the dtypes the cta and persistent kernels are instantiated for
// (float, half, bfloat16); their supported() answers are false for others.
#define SEQ_KERNEL_DTYPES(TYPE, FN, ...)                                                  \
  switch (TYPE) {                                                                         \
    case torch::headeronly::ScalarType::Float:                                            \
      FN<float>(__VA_ARGS__);                                                             \
      break;                                                                              \
    case torch::headeronly::ScalarType::Half:                                             \
      FN<c10::Half>(__VA_ARGS__);                                                         \
      break;                                                                              \
    case torch::headeronly::ScalarType::BFloat16:                                         \
      FN<c10::BFloat16>(__VA_ARGS__);                                                     \
      break;                                                                              \
    default:                                                                              \
      fused_ops::raise<std::runtime_error>("lltm_sequence: no sequence kernel for ",    \
                                           fused_ops::dtype_str(TYPE));                   \
  }
void forward_recurrence_cuda(const Tensor& weights, const Tensor& h0, const Tensor& c0,
                             Tensor& gates, Tensor& hs, Tensor& cells, const SeqSizes& sz) {
  const SeqPath path = pick_path(gates, sz, /*backward=*/false);
  if (path == SeqPath::kCta) {
    SEQ_KERNEL_DTYPES(gates.scalar_type(), cta_forward, weights, h0, c0, gates, hs, cells, sz);
    return;
  }
  const Tensor w_h = prepare_forward(kCuda, weights, h0, c0, hs, cells, sz);
  switch (path) {
    case SeqPath::kStep:
      SEQ_KERNEL_DTYPES(gates.scalar_type(), step_forward, w_h, gates, hs, cells, sz);
      return;
#if LLTM_SEQUENCE_HAVE_PERSISTENT
    case SeqPath::kPersistent:
      SEQ_KERNEL_DTYPES(gates.scalar_type(), persistent_forward, w_h, gates, hs, cells, sz);
      return;
#endif
    default:
      per_step_forward(kCuda, w_h, gates, hs, cells, sz, forward_step_cuda);
  }
}

void backward_recurrence_cuda(const Tensor& weights, const Tensor& gates, Tensor& dz,
                              const Tensor& cells, const SeqGradParts& g, Tensor& d_h0,
                              Tensor& d_c0, const SeqSizes& sz, SeqWgradOverlap& overlap) {
  const SeqPath path = pick_path(dz, sz, /*backward=*/true);
  if (path == SeqPath::kCta) {  // the one path that publishes its progress
    SEQ_KERNEL_DTYPES(dz.scalar_type(), cta_backward, weights, gates, dz, cells, g, d_h0, d_c0,
                      sz, overlap);
    return;
  }
  const SeqPreparedBackward p = prepare_backward(kCuda, weights, gates, dz, g, sz);
  switch (path) {
    case SeqPath::kStep:
      SEQ_KERNEL_DTYPES(dz.scalar_type(), step_backward, p.w_h, dz, cells, p.grad_hs,
                        p.grad_c_n, d_h0, d_c0, sz);
      return;
#if LLTM_SEQUENCE_HAVE_PERSISTENT
    case SeqPath::kPersistent:
      SEQ_KERNEL_DTYPES(dz.scalar_type(), persistent_backward, p.w_h, dz, cells, p.grad_hs,
                        p.grad_c_n, d_h0, d_c0, sz);
      return;
#endif
    default:
      per_step_backward(kCuda, p.w_h, dz, cells, p.grad_hs, p.grad_c_n, d_h0, d_c0, sz,
                        backward_step_cuda);
  }
}

std::tuple<Tensor, Tensor, Tensor> sequence_forward_cuda(Tensor input, Tensor weights,
                                                         Tensor bias, Tensor h0, Tensor c0) {
  const SeqSizes sz = check_sequence_forward_args(input, weights, bias, h0, c0);
  const fused_ops::DeviceGuard guard(input.get_device_index());
  fused_ops::check_kernel_image(input);
  return sequence_forward(kCuda, input, weights, bias, h0, c0, sz, forward_recurrence_cuda);
}

SeqGrads sequence_backward_cuda(OptTensor grad_hs, OptTensor grad_c_n, Tensor input,
                                Tensor weights, Tensor hs, Tensor cells, Tensor gates,
                                SeqGradMask output_mask, OptTensor grad_h_n) {
  const SeqSizes sz = check_sequence_backward_args(grad_hs, grad_c_n, input, weights, hs, cells,
                                                   gates, output_mask, grad_h_n);
  const fused_ops::DeviceGuard guard(input.get_device_index());
  fused_ops::check_kernel_image(input);
  return sequence_backward(kCuda, seq_grad_parts(grad_hs, grad_h_n, grad_c_n, sz), input,
                           weights, hs, cells, gates, output_mask, sz, backward_recurrence_cuda);
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(lltm, CUDA, m) {
  m.impl("lltm_sequence_forward", TORCH_BOX(&sequence_forward_cuda));
  m.impl("lltm_sequence_backward", TORCH_BOX(&sequence_backward_cuda));
}

}  // namespace lltm
