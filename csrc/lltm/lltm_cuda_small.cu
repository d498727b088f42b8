// LLTM cell on CUDA for small and medium problems: the rule that picks the single-launch
// kernels of lltm_cuda_small.cuh over the cuBLAS path, and their host-side launchers.
#include "lltm/lltm_cuda_small.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/EmptyTensor.h>

#include <array>
#include <cstdlib>
#include <cstring>

#include "common/checks.h"
#include "common/cuda_utils.cuh"
#include "lltm/lltm_cuda_small.cuh"

namespace lltm {
namespace {

using namespace small;  // NOLINT(build/namespaces): the kernels and their tile sizes

// ---------------------------------------------------------------------------------------
// Path choice.
//
// A step on the single-launch kernels costs about 2 launches of host time plus the SIMT
// GEMMs' GPU time; on the cuBLAS path it costs about 8 launches plus ~8 more ATen ops of
// host time (~0.3-0.5 ms on the lent H100) or cuBLAS's GPU time, whichever is larger.
// These SIMT tiles reach perhaps half of cuBLAS's float32 rate, so the kernels win until
// their GPU time passes the cuBLAS path's host time: with three GEMMs of B*(S+F)*3S
// multiply-adds each, 6*MACs / (~20-30 TFLOP/s) = 0.5 ms at MACs ~ 1.7-2.5e9. The bound
// below sits there; (256, 256, 1024) has 1.0e9, (4096, 1024, 4096) has 2.6e11.
// Two more bounds keep any one block's serial loop short when the output is small but a
// reduction is long: the parameter role walks all B batch rows, and a forward block walks
// all S + F columns of X.
constexpr double kSmallMaxMacs = 2147483648.0;  // B * (S + F) * 3S, one GEMM's multiply-adds
constexpr int64_t kSmallMaxBatch = 4096;
constexpr int64_t kSmallMaxWidth = 8192;  // S + F

enum class PathOverride { kAuto, kSmall, kCublas };

PathOverride path_override() {
  const char* v = std::getenv("LLTM_CUDA_PATH");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return PathOverride::kAuto;
  if (std::strcmp(v, "small") == 0) return PathOverride::kSmall;
  if (std::strcmp(v, "cublas") == 0) return PathOverride::kCublas;
  TORCH_CHECK_VALUE(false, "environment variable LLTM_CUDA_PATH must be 'small', 'cublas' or "
                    "'auto' (or unset), got '", v, "'");
  return PathOverride::kAuto;
}

// ---------------------------------------------------------------------------------------
// Host side.

// A tensor of like's dtype and device, straight from the CUDA caching allocator (no
// dispatcher round trip: each one saves host time at these sizes).
at::Tensor new_empty(at::IntArrayRef size, const at::Tensor& like) {
  return at::Tensor(at::detail::empty_cuda(size, like.scalar_type(), like.device(), std::nullopt));
}

unsigned grid_size(int64_t blocks) {
  TORCH_CHECK(blocks < (int64_t{1} << 31), "lltm: problem too large for the small-size kernels (",
              fused_ops::num(blocks), " blocks)");
  return static_cast<unsigned>(blocks);
}

}  // namespace

bool use_small_path(const CellSizes& n) {
  // The kernels need a batch row and a state column (with S = 0, X = input still has to be
  // written, which the cuBLAS path's concatenation does).
  if (n.batch < 1 || n.state < 1) return false;
  switch (path_override()) {
    case PathOverride::kSmall:
      return true;
    case PathOverride::kCublas:
      return false;
    case PathOverride::kAuto:
      break;
  }
  const int64_t K = n.state + n.features;
  const double macs = static_cast<double>(n.batch) * static_cast<double>(K) *
                      static_cast<double>(3 * n.state);
  return macs <= kSmallMaxMacs && n.batch <= kSmallMaxBatch && K <= kSmallMaxWidth;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> small_forward_cuda(
    const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
    const at::Tensor& old_h, const at::Tensor& old_cell, const CellSizes& sizes) {
  const c10::cuda::CUDAGuard guard(input.device());
  const int64_t B = sizes.batch, F = sizes.features, S = sizes.state;
  at::Tensor new_h = new_empty({B, S}, input);
  at::Tensor new_cell = new_empty({B, S}, input);
  at::Tensor X = new_empty({B, S + F}, input);
  at::Tensor gates = new_empty({B, 3 * S}, input);
  const auto in = input.expect_contiguous(), w = weights.expect_contiguous(),
             b = bias.expect_contiguous(), h = old_h.expect_contiguous(),
             c = old_cell.expect_contiguous();
  const unsigned blocks = grid_size(ceil_div(B, kFwdRows) * ceil_div(S, kFwdCols));
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "lltm_small_forward_cuda", [&] {
    small_forward_kernel<scalar_t><<<blocks, kThreads, 0, stream>>>(
        in->const_data_ptr<scalar_t>(), w->const_data_ptr<scalar_t>(),
        b->const_data_ptr<scalar_t>(), h->const_data_ptr<scalar_t>(),
        c->const_data_ptr<scalar_t>(), new_h.mutable_data_ptr<scalar_t>(),
        new_cell.mutable_data_ptr<scalar_t>(), X.mutable_data_ptr<scalar_t>(),
        gates.mutable_data_ptr<scalar_t>(), B, F, S);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {new_h, new_cell, X, gates};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> small_backward_cuda(
    const at::Tensor& grad_h, const at::Tensor& grad_cell, const at::Tensor& new_cell,
    const at::Tensor& gate_weights, const at::Tensor& X, const at::Tensor& weights,
    std::array<bool, 3> output_mask, const CellSizes& sizes) {
  const c10::cuda::CUDAGuard guard(new_cell.device());
  const int64_t B = sizes.batch, S = sizes.state, K = sizes.state + sizes.features;
  // A gradient that output_mask leaves out comes back empty, as on the cuBLAS path.
  const std::array<int64_t, 1> skipped{0};
  at::Tensor d_X = output_mask[0] ? new_empty({B, K}, new_cell) : new_empty(skipped, new_cell);
  at::Tensor d_weights =
      output_mask[1] ? new_empty({3 * S, K}, new_cell) : new_empty(skipped, new_cell);
  at::Tensor d_bias = output_mask[2] ? new_empty({3 * S}, new_cell) : new_empty(skipped, new_cell);
  at::Tensor d_old_cell = new_empty({B, S}, new_cell);
  const auto gh = grad_h.expect_contiguous(), gc = grad_cell.expect_contiguous(),
             nc = new_cell.expect_contiguous(), z = gate_weights.expect_contiguous(),
             x = X.expect_contiguous(), w = weights.expect_contiguous();
  const int64_t dx_col_tiles = ceil_div(K, kDxCols);
  const int64_t dx_blocks = output_mask[0] ? ceil_div(B, kDxRows) * dx_col_tiles : 0;
  const int64_t p_col_tiles = output_mask[1] ? ceil_div(K, kPK) : 1;
  const unsigned blocks = grid_size(dx_blocks + ceil_div(S, kPCols) * p_col_tiles);
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, new_cell.scalar_type(), "lltm_small_backward_cuda", [&] {
    BackwardArgs<scalar_t> args;
    args.grad_h = gh->const_data_ptr<scalar_t>();
    args.grad_cell = gc->const_data_ptr<scalar_t>();
    args.new_cell = nc->const_data_ptr<scalar_t>();
    args.gates = z->const_data_ptr<scalar_t>();
    args.X = x->const_data_ptr<scalar_t>();
    args.weights = w->const_data_ptr<scalar_t>();
    args.d_X = output_mask[0] ? d_X.mutable_data_ptr<scalar_t>() : nullptr;
    args.d_weights = output_mask[1] ? d_weights.mutable_data_ptr<scalar_t>() : nullptr;
    args.d_bias = output_mask[2] ? d_bias.mutable_data_ptr<scalar_t>() : nullptr;
    args.d_old_cell = d_old_cell.mutable_data_ptr<scalar_t>();
    args.B = B;
    args.S = S;
    args.K = K;
    args.dx_blocks = dx_blocks;
    args.dx_col_tiles = dx_col_tiles;
    args.p_col_tiles = p_col_tiles;
    small_backward_kernel<scalar_t><<<blocks, kThreads, 0, stream>>>(args);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {d_X, d_weights, d_bias, d_old_cell};
}

}  // namespace lltm
