// LLTM cell on CUDA for small and medium problems: the rule that picks the kernels of
// lltm_cuda_small.cuh over the cuBLAS path, and their host-side launchers.
#include "lltm/lltm_cuda_small.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "common/cuda_utils.cuh"
#include "common/dispatch.h"
#include "lltm/lltm_cuda_small.cuh"

namespace lltm {
namespace {

using namespace small;  // NOLINT(build/namespaces): the kernels and their tile sizes

// ---------------------------------------------------------------------------------------
// Path choice.
//
// A training step on the small path costs 3 launches of host time or its GEMMs' GPU time,
// whichever is larger; on the cuBLAS path about 8 launches plus ~8 more ATen ops of host
// time (0.3-0.6 ms measured on the lent H100, where each launch or op costs 20-30 us) or
// cuBLAS's GPU time. So the small path wins while its GPU time stays below the cuBLAS path's
// host time, or, past that, while its GEMMs keep up with cuBLAS's. With the tensor-core
// tiles (float32 at 35-44 TFLOP/s in the backward, 25-32 in the forward, against cuBLAS's
// ~50) the step times measured on the H100 (float32, both paths forced, B*(S+F)*3S
// multiply-adds (MACs) per GEMM): (512, 512, 1024), 2.4e9 MACs: small 0.38-0.40 ms against
// cuBLAS 0.41-0.66; (1024, 512, 1024), 4.8e9: 0.78 against 0.75; (1024, 1024, 1024), 6.4e9:
// 1.02 against 0.95. The bound sits between the first two; (256, 256, 1024) has 1.0e9 MACs
// and (4096, 1024, 4096) 2.6e11. The benchmark times both paths at each of its sizes
// (LLTM_CUDA_PATH forces one), which is how to move this bound. Where the SIMT tiles run
// (float64, GPUs before sm_80), at perhaps half cuBLAS's rate, the bound is 2^31 MACs (6 *
// MACs / (20-30 TFLOP/s) = 0.5 ms, the cuBLAS path's host time, at 1.7-2.5e9).
// Two more bounds keep any one block's serial loop short when the output is small but a
// reduction is long: a parameter-gradient block walks all B batch rows, and a forward
// block walks all S + F columns of X.
constexpr double kSmallMaxMacsTc = 3.4e9;  // > B * (S + F) * 3S, a GEMM's MACs
constexpr double kSmallMaxMacsSimt = 2147483648.0;
constexpr int64_t kSmallMaxBatch = 4096;
constexpr int64_t kSmallMaxWidth = 8192;  // S + F

enum class PathOverride { kAuto, kSmall, kCublas };

PathOverride path_override() {
  const char* v = std::getenv("LLTM_CUDA_PATH");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return PathOverride::kAuto;
  if (std::strcmp(v, "small") == 0) return PathOverride::kSmall;
  if (std::strcmp(v, "cublas") == 0) return PathOverride::kCublas;
  fused_ops::raise<std::invalid_argument>(
      "environment variable LLTM_CUDA_PATH must be 'small', 'cublas' or 'auto' (or unset), "
      "got '", std::string(v), "'");
}

// Tile choice, SIMT tiles (float64; every type before sm_80). The d_X role runs TM = 4 rows
// per thread unless that leaves SMs without a block (kMinBlocksPerSm = 1), then TM = 2
// tiles, half the batch rows per block, provided that this gives more blocks (not so when
// B <= 32: the tutorial's size keeps TM = 4).
// Measured on the H100 (132 SMs), small_backward_kernel in all: at (256, 256, 1024) 0.244 ms
// with 80 long d_X blocks of TM = 4, 0.221 ms with 160 of TM = 2; at (512, 512, 1024),
// forced small, 192 d_X blocks of TM = 4 beat 384 of TM = 2 (0.375 against 0.393 ms), hence
// the bound of 1, not 2, blocks per SM. The SIMT forward always runs TM = 4: its TM = 2
// tiles were slower at both sizes (0.121 against 0.116 ms with 256 against 128 blocks, 0.256
// against 0.189 ms); with TM = 2 a thread does 12 multiply-adds per 8 values read from
// shared memory instead of 24 per 10, so shared memory rather than latency limits it.
//
// Tensor-core tiles (float32, float16, bfloat16 on sm_80 and newer): the forward takes TM by
// the same rule as the d_X role, and 32-deep chunks except the forward's 64-row tiles.
// Measured on the H100 (float32, kernel alone, benchmarks/results/lltm_variants_h100.md):
// at (256, 256, 1024) forward TM = 2 with CH = 32 0.079 ms against 0.091 with TM = 4 and
// CH = 16 (the SIMT tiles: 0.117), backward CH = 32 0.114 against 0.136 with 16 (SIMT 0.220);
// at (512, 512, 1024) forward TM = 4 with CH = 16 0.151 against 0.211 with CH = 32, backward
// CH = 32 0.218 against 0.255.
constexpr int64_t kMinBlocksPerSm = 1;
constexpr int kSimtFwdRowsPerThread = kRowsPerThreadLarge;
constexpr int kTcChunk = 32, kTcFwdChunkLarge = 16;

int64_t sm_count(int device) {
  // Cached per device (common/cuda_utils.cuh): no driver call per step.
  return fused_ops::device_properties(device).multiProcessorCount;
}

// The tensor-core tiles (MmaTile: 3xTF32 for float32, one MMA per product for float16 and
// bfloat16) on sm_80 and newer; float64, and older GPUs, keep the SIMT tiles.
bool use_tensor_cores(torch::headeronly::ScalarType dtype, int device) {
  return dtype != torch::headeronly::ScalarType::Double &&
         fused_ops::device_properties(device).major >= 8;
}

// TM for B rows in tiles of kGroups * TM rows, by col_tiles column tiles (the rule above).
int rows_per_thread(int64_t B, int64_t col_tiles, int device) {
  const int64_t large = ceil_div<int64_t>(B, kGroups * kRowsPerThreadLarge);
  const int64_t small = ceil_div<int64_t>(B, kGroups * kRowsPerThreadSmall);
  return large * col_tiles < kMinBlocksPerSm * sm_count(device) && small > large
             ? kRowsPerThreadSmall
             : kRowsPerThreadLarge;
}

// The forward kernel for TM rows per thread: tm is the SIMT tiles' TM unless tc.
template <typename scalar_t>
auto forward_kernel(bool tc, int tm) {
  if constexpr (!std::is_same_v<scalar_t, double>) {
    if (tc) {
      return tm == kRowsPerThreadSmall
                 ? small_forward_kernel<scalar_t, kRowsPerThreadSmall, kTcChunk, true>
                 : small_forward_kernel<scalar_t, kRowsPerThreadLarge, kTcFwdChunkLarge, true>;
    }
  }
  return small_forward_kernel<scalar_t, kSimtFwdRowsPerThread>;
}

template <typename scalar_t, int DX_TM>
auto backward_kernel(bool tc) {
  if constexpr (!std::is_same_v<scalar_t, double>) {
    if (tc) return small_backward_kernel<scalar_t, DX_TM, kTcChunk, true>;
  }
  return small_backward_kernel<scalar_t, DX_TM>;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Host side.

bool use_small_path(const CellSizes& n, torch::headeronly::ScalarType dtype, int device) {
  const int64_t B = n.batch, S = n.state, K = n.state + n.features;
  // The kernels need a batch row and a state column (with S = 0, X = input still has to be
  // written, which the cuBLAS path's concatenation does), and they index with 32-bit
  // integers: every tensor must have fewer than 2^31 elements. Forcing cannot lift that.
  if (B < 1 || S < 1) return false;
  constexpr int64_t kInt32Elements = int64_t{1} << 31;
  if (B * K >= kInt32Elements || 3 * S * K >= kInt32Elements || 3 * B * S >= kInt32Elements) {
    return false;
  }
  switch (path_override()) {
    case PathOverride::kSmall:
      return true;
    case PathOverride::kCublas:
      return false;
    case PathOverride::kAuto:
      break;
  }
  const double macs =
      static_cast<double>(B) * static_cast<double>(K) * static_cast<double>(3 * S);
  const double max_macs = use_tensor_cores(dtype, device) ? kSmallMaxMacsTc : kSmallMaxMacsSimt;
  return macs < max_macs && B <= kSmallMaxBatch && K <= kSmallMaxWidth;
}

std::tuple<Tensor, Tensor, Tensor, Tensor> small_forward_cuda(
    const Tensor& input, const Tensor& weights, const Tensor& bias, const Tensor& old_h,
    const Tensor& old_cell, const CellSizes& sizes, GateActivations* acts) {
  const int device = input.get_device_index();
  const fused_ops::DeviceGuard guard(device);
  const int64_t B = sizes.batch, F = sizes.features, S = sizes.state;
  Tensor new_h = new_empty({B, S}, input);
  Tensor new_cell = new_empty({B, S}, input);
  Tensor X = new_empty({B, S + F}, input);
  Tensor gates = new_empty({B, 3 * S}, input);
  const Tensor in = as_contiguous(input), w = as_contiguous(weights), b = as_contiguous(bias),
               h = as_contiguous(old_h), c = as_contiguous(old_cell);
  // use_small_path admitted these sizes: every count below fits in an int.
  const bool tc = use_tensor_cores(input.scalar_type(), device);
  const int64_t col_tiles = ceil_div<int64_t>(S, kFwdCols);
  const int tm = tc ? rows_per_thread(B, col_tiles, device) : kSimtFwdRowsPerThread;
  const int blocks = static_cast<int>(ceil_div<int64_t>(B, kGroups * tm) * col_tiles);
  const cudaStream_t stream = fused_ops::current_stream(input);
  FUSED_OPS_DISPATCH_FLOATING(input.scalar_type(), "lltm_small_forward_cuda", [&] {
    forward_kernel<scalar_t>(tc, tm)<<<blocks, kThreads, 0, stream>>>(
        in.const_data_ptr<scalar_t>(), w.const_data_ptr<scalar_t>(),
        b.const_data_ptr<scalar_t>(), h.const_data_ptr<scalar_t>(),
        c.const_data_ptr<scalar_t>(), new_h.mutable_data_ptr<scalar_t>(),
        new_cell.mutable_data_ptr<scalar_t>(), X.mutable_data_ptr<scalar_t>(),
        gates.mutable_data_ptr<scalar_t>(), activation_ptrs<scalar_t>(acts),
        static_cast<int>(B), static_cast<int>(F),
        static_cast<int>(S));
    FUSED_OPS_LAUNCH_CHECK();
  });
  return {new_h, new_cell, X, gates};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> small_backward_gemms_cuda(
    const Tensor& d_gates, const Tensor& X, const Tensor& weights, const GradMask& output_mask,
    const CellSizes& sizes) {
  const int device = d_gates.get_device_index();
  const fused_ops::DeviceGuard guard(device);
  const int64_t B = sizes.batch, F = sizes.features, S = sizes.state;
  const int64_t N = 3 * S, K = S + F;
  // A gradient that output_mask leaves out comes back empty, as on the cuBLAS path.
  auto gradient = [&](bool wanted, std::initializer_list<int64_t> size) {
    return wanted ? new_empty(size, d_gates) : new_empty({0}, d_gates);
  };
  const bool want_input = output_mask[0], want_dw = output_mask[1], want_bias = output_mask[2],
             want_old_h = output_mask[3];
  Tensor d_input = gradient(want_input, {B, F});
  Tensor d_weights = gradient(want_dw, {N, K});
  Tensor d_bias = gradient(want_bias, {N});
  Tensor d_old_h = gradient(want_old_h, {B, S});
  // The d_X role's columns of X: [0, S) for d_old_h, [S, K) for d_input.
  const int64_t dx_k0 = want_old_h ? 0 : S, dx_k1 = want_input ? K : S;
  // use_small_path admitted these sizes: every count below fits in an int.
  const int dx_col_tiles = static_cast<int>(ceil_div<int64_t>(dx_k1 - dx_k0, kDxCols));
  const int dx_tm =
      dx_col_tiles > 0 ? rows_per_thread(B, dx_col_tiles, device) : kRowsPerThreadLarge;
  const int dx_blocks = static_cast<int>(ceil_div<int64_t>(B, kGroups * dx_tm)) * dx_col_tiles;
  const int p_col_tiles = want_dw ? static_cast<int>(ceil_div<int64_t>(K, kPK)) : 1;
  const int p_blocks =
      want_dw || want_bias ? static_cast<int>(ceil_div<int64_t>(N, kPN)) * p_col_tiles : 0;
  if (dx_blocks + p_blocks == 0) return {d_input, d_weights, d_bias, d_old_h};
  const Tensor z = as_contiguous(d_gates), x = as_contiguous(X), w = as_contiguous(weights);
  const cudaStream_t stream = fused_ops::current_stream(d_gates);
  const bool tc = use_tensor_cores(d_gates.scalar_type(), device);
  FUSED_OPS_DISPATCH_FLOATING(d_gates.scalar_type(), "lltm_small_backward_cuda", [&] {
    BackwardArgs<scalar_t> args;
    args.d_gates = z.const_data_ptr<scalar_t>();
    args.X = x.const_data_ptr<scalar_t>();
    args.weights = w.const_data_ptr<scalar_t>();
    args.d_old_h = want_old_h ? d_old_h.mutable_data_ptr<scalar_t>() : nullptr;
    args.d_input = want_input ? d_input.mutable_data_ptr<scalar_t>() : nullptr;
    args.d_weights = want_dw ? d_weights.mutable_data_ptr<scalar_t>() : nullptr;
    args.d_bias = want_bias ? d_bias.mutable_data_ptr<scalar_t>() : nullptr;
    args.B = static_cast<int>(B);
    args.N = static_cast<int>(N);
    args.K = static_cast<int>(K);
    args.S = static_cast<int>(S);
    args.dx_k0 = static_cast<int>(dx_k0);
    args.dx_k1 = static_cast<int>(dx_k1);
    args.dx_blocks = dx_blocks;
    args.dx_col_tiles = dx_col_tiles;
    args.p_col_tiles = p_col_tiles;
    auto kernel = dx_tm == kRowsPerThreadSmall ? backward_kernel<scalar_t, kRowsPerThreadSmall>(tc)
                                               : backward_kernel<scalar_t, kRowsPerThreadLarge>(tc);
    kernel<<<dx_blocks + p_blocks, kThreads, 0, stream>>>(args);
    FUSED_OPS_LAUNCH_CHECK();
  });
  return {d_input, d_weights, d_bias, d_old_h};
}

}  // namespace lltm
