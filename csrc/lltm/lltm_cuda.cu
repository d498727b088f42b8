// LLTM cell: the cuBLAS path's CUDA pointwise kernels (forward and backward), the choice
// between that path and the single-launch kernels (lltm_cuda_small.cu), and the CUDA
// registration of the cell's ops and of the tutorial's (lltm_tutorial.h), and the Python
// module of the CUDA library, <pkg>._C_cuda. On the cuBLAS path the GEMMs run through ATen
// (lltm_driver.h); each pointwise kernel here makes one pass over its tensors, 16 bytes per
// access where the row length and pointers allow it.
#include <torch/csrc/stable/library.h>

#include <initializer_list>

#include "common/cuda_utils.cuh"
#include "common/dispatch.h"
#include "common/kernel_image.cuh"
#include "common/module.h"
#include "lltm/lltm.h"
#include "lltm/lltm_cuda_small.h"
#include "lltm/lltm_driver.h"
#include "lltm/lltm_tutorial.h"

FUSED_OPS_PYTHON_MODULE(_C_cuda)

namespace lltm {
namespace {

using fused_ops::Pack;

// acts: the gate activations' outputs (sigmoid(z_i), sigmoid(z_o), elu(z_c)), or all null.
template <typename scalar_t, int V>
__global__ void forward_kernel(const scalar_t* __restrict__ gates,
                               const scalar_t* __restrict__ old_cell,
                               scalar_t* __restrict__ new_h, scalar_t* __restrict__ new_cell,
                               const ActivationPtrs<scalar_t> acts, int64_t rows, int64_t S) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  using P = Pack<scalar_t, V>;
  const int64_t j = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (j >= S) return;
  for (int64_t b = blockIdx.y; b < rows; b += gridDim.y) {
    const scalar_t* z = gates + b * 3 * S + j;
    const P zi = *reinterpret_cast<const P*>(z);
    const P zo = *reinterpret_cast<const P*>(z + S);
    const P zc = *reinterpret_cast<const P*>(z + 2 * S);
    const P c = *reinterpret_cast<const P*>(old_cell + b * S + j);
    P h_out, c_out;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      acc_t h, cell;
      cell_forward<acc_t>(zi.v[k], zo.v[k], zc.v[k], c.v[k], h, cell);
      h_out.v[k] = h;
      c_out.v[k] = cell;
    }
    *reinterpret_cast<P*>(new_h + b * S + j) = h_out;
    *reinterpret_cast<P*>(new_cell + b * S + j) = c_out;
    if (acts.input_gate != nullptr) {
      P a_i, a_o, a_c;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        a_i.v[k] = sigmoid<acc_t>(zi.v[k]);
        a_o.v[k] = sigmoid<acc_t>(zo.v[k]);
        a_c.v[k] = elu<acc_t>(zc.v[k]);
      }
      *reinterpret_cast<P*>(acts.input_gate + b * S + j) = a_i;
      *reinterpret_cast<P*>(acts.output_gate + b * S + j) = a_o;
      *reinterpret_cast<P*>(acts.candidate_cell + b * S + j) = a_c;
    }
  }
}

template <typename scalar_t, int V>
__global__ void backward_kernel(const scalar_t* __restrict__ grad_h,
                                const scalar_t* __restrict__ grad_cell,
                                const scalar_t* __restrict__ new_cell,
                                const scalar_t* __restrict__ gates, scalar_t* __restrict__ d_gates,
                                scalar_t* __restrict__ d_old_cell, int64_t rows, int64_t S) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  using P = Pack<scalar_t, V>;
  const int64_t j = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (j >= S) return;
  for (int64_t b = blockIdx.y; b < rows; b += gridDim.y) {
    const int64_t k0 = b * S + j;
    const scalar_t* z = gates + b * 3 * S + j;
    const P gh = *reinterpret_cast<const P*>(grad_h + k0);
    const P gc = *reinterpret_cast<const P*>(grad_cell + k0);
    const P nc = *reinterpret_cast<const P*>(new_cell + k0);
    const P zi = *reinterpret_cast<const P*>(z);
    const P zo = *reinterpret_cast<const P*>(z + S);
    const P zc = *reinterpret_cast<const P*>(z + 2 * S);
    P di, d_o, dc, dcell;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      acc_t a, o, c, cell;
      cell_backward<acc_t>(gh.v[k], gc.v[k], nc.v[k], zi.v[k], zo.v[k], zc.v[k], a, o, c, cell);
      di.v[k] = a;
      d_o.v[k] = o;
      dc.v[k] = c;
      dcell.v[k] = cell;
    }
    scalar_t* dz = d_gates + b * 3 * S + j;
    *reinterpret_cast<P*>(dz) = di;
    *reinterpret_cast<P*>(dz + S) = d_o;
    *reinterpret_cast<P*>(dz + 2 * S) = dc;
    *reinterpret_cast<P*>(d_old_cell + k0) = dcell;
  }
}

// 16-byte packs when every row start is 16-byte aligned, else one element per access.
template <typename scalar_t>
bool can_pack(int64_t S, std::initializer_list<const Tensor*> tensors) {
  if (S % fused_ops::pack16<scalar_t> != 0) return false;
  for (const Tensor* t : tensors) {
    if (!fused_ops::aligned16(t->const_data_ptr())) return false;
  }
  return true;
}

void forward_pointwise_cuda(const Tensor& gates, const Tensor& old_cell, Tensor& new_h,
                            Tensor& new_cell, GateActivations* acts) {
  const fused_ops::DeviceGuard guard(gates.get_device_index());
  const int64_t B = old_cell.size(0), S = old_cell.size(1);
  const cudaStream_t stream = fused_ops::current_stream(gates);
  FUSED_OPS_DISPATCH_FLOATING(gates.scalar_type(), "lltm_forward_cuda", [&] {
    constexpr int V = fused_ops::pack16<scalar_t>;
    const ActivationPtrs<scalar_t> a = activation_ptrs<scalar_t>(acts);
    // The activations are fresh allocations (aligned): only the others decide the packing.
    const bool packed = can_pack<scalar_t>(S, {&gates, &old_cell, &new_h, &new_cell});
    const fused_ops::RowLaunch launch(B, packed ? S / V : S);
    auto kernel = packed ? forward_kernel<scalar_t, V> : forward_kernel<scalar_t, 1>;
    kernel<<<launch.grid, launch.block, 0, stream>>>(
        gates.const_data_ptr<scalar_t>(), old_cell.const_data_ptr<scalar_t>(),
        new_h.mutable_data_ptr<scalar_t>(), new_cell.mutable_data_ptr<scalar_t>(), a, B, S);
    FUSED_OPS_LAUNCH_CHECK();
  });
}

void backward_pointwise_cuda(const Tensor& grad_h, const Tensor& grad_cell,
                             const Tensor& new_cell, const Tensor& gates, Tensor& d_gates,
                             Tensor& d_old_cell) {
  const fused_ops::DeviceGuard guard(gates.get_device_index());
  const int64_t B = new_cell.size(0), S = new_cell.size(1);
  const cudaStream_t stream = fused_ops::current_stream(gates);
  FUSED_OPS_DISPATCH_FLOATING(gates.scalar_type(), "lltm_backward_cuda", [&] {
    constexpr int V = fused_ops::pack16<scalar_t>;
    const bool packed = can_pack<scalar_t>(
        S, {&grad_h, &grad_cell, &new_cell, &gates, &d_gates, &d_old_cell});
    const fused_ops::RowLaunch launch(B, packed ? S / V : S);
    auto kernel = packed ? backward_kernel<scalar_t, V> : backward_kernel<scalar_t, 1>;
    kernel<<<launch.grid, launch.block, 0, stream>>>(
        grad_h.const_data_ptr<scalar_t>(), grad_cell.const_data_ptr<scalar_t>(),
        new_cell.const_data_ptr<scalar_t>(), gates.const_data_ptr<scalar_t>(),
        d_gates.mutable_data_ptr<scalar_t>(), d_old_cell.mutable_data_ptr<scalar_t>(), B, S);
    FUSED_OPS_LAUNCH_CHECK();
  });
}

// Small and medium problems take the kernels of lltm_cuda_small.cu (one launch for the
// forward, two for the backward; the rule is use_small_path); larger ones cuBLAS plus the
// pointwise kernels above. The forward after the checks; acts: null, or the gate
// activations to write too.
std::tuple<Tensor, Tensor, Tensor, Tensor> checked_forward_cuda(
    const Tensor& input, const Tensor& weights, const Tensor& bias, const Tensor& old_h,
    const Tensor& old_cell, const CellSizes& sizes, GateActivations* acts) {
  fused_ops::check_kernel_image(input);
  if (use_small_path(sizes, input.scalar_type(), input.get_device_index())) {
    return small_forward_cuda(input, weights, bias, old_h, old_cell, sizes, acts);
  }
  return forward_gemm(input, weights, bias, old_h, old_cell, sizes, forward_pointwise_cuda,
                      acts);
}

std::tuple<Tensor, Tensor, Tensor, Tensor> forward_cuda(Tensor input, Tensor weights,
                                                        Tensor bias, Tensor old_h,
                                                        Tensor old_cell) {
  const CellSizes sizes = check_forward_args(input, weights, bias, old_h, old_cell);
  return checked_forward_cuda(input, weights, bias, old_h, old_cell, sizes, nullptr);
}

// The backward after the checks; d_gates_out: null, or where the gradient of gate_weights goes.
CellGrads checked_backward_cuda(const Tensor& grad_h, const Tensor& grad_cell,
                                const Tensor& new_cell, const Tensor& gate_weights,
                                const Tensor& X, const Tensor& weights,
                                const GradMask& output_mask, const CellSizes& sizes,
                                Tensor* d_gates_out) {
  fused_ops::check_kernel_image(new_cell);
  if (use_small_path(sizes, new_cell.scalar_type(), new_cell.get_device_index())) {
    // Two launches: the pointwise kernel below, then every GEMM and d_bias in one.
    const int64_t B = sizes.batch, S = sizes.state;
    Tensor d_gates = new_empty({B, 3 * S}, new_cell);
    Tensor d_old_cell = new_empty({B, S}, new_cell);
    backward_pointwise_cuda(as_contiguous(grad_h), as_contiguous(grad_cell),
                            as_contiguous(new_cell), as_contiguous(gate_weights), d_gates,
                            d_old_cell);
    auto [d_input, d_weights, d_bias, d_old_h] =
        small_backward_gemms_cuda(d_gates, X, weights, output_mask, sizes);
    if (d_gates_out != nullptr) *d_gates_out = d_gates;
    return {d_input, d_weights, d_bias, d_old_h, d_old_cell};
  }
  return backward_gemm(grad_h, grad_cell, new_cell, gate_weights, X, weights, output_mask, sizes,
                       backward_pointwise_cuda, d_gates_out);
}

CellGrads backward_cuda(Tensor grad_h, Tensor grad_cell, Tensor new_cell, Tensor gate_weights,
                        Tensor X, Tensor weights, GradMask output_mask) {
  const CellSizes sizes =
      check_backward_args(grad_h, grad_cell, new_cell, gate_weights, X, weights, output_mask);
  return checked_backward_cuda(grad_h, grad_cell, new_cell, gate_weights, X, weights,
                               output_mask, sizes, nullptr);
}

TutorialOutputs tutorial_forward_cuda(Tensor input, Tensor weights, Tensor bias, Tensor old_h,
                                      Tensor old_cell, bool split_gates) {
  const CellSizes sizes =
      check_forward_args(input, weights, bias, old_h, old_cell, /*bias_row=*/true);
  return tutorial_forward(input, sizes, split_gates, [&](GateActivations* acts) {
    return checked_forward_cuda(input, weights, bias, old_h, old_cell, sizes, acts);
  });
}

TutorialGrads tutorial_backward_cuda(Tensor grad_h, Tensor grad_cell, Tensor new_cell,
                                     Tensor input_gate, Tensor output_gate,
                                     Tensor candidate_cell, Tensor X, Tensor gates,
                                     Tensor weights, bool split_gates) {
  return tutorial_backward(grad_h, grad_cell, new_cell, input_gate, output_gate, candidate_cell,
                           X, gates, weights, split_gates,
                           [&](const Tensor& gate_weights, const GradMask& all,
                               const CellSizes& sizes, Tensor* d_gates) {
                             return checked_backward_cuda(grad_h, grad_cell, new_cell,
                                                          gate_weights, X, weights, all, sizes,
                                                          d_gates);
                           });
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(lltm, CUDA, m) {
  m.impl("lltm_forward", TORCH_BOX(&forward_cuda));
  m.impl("lltm_backward", TORCH_BOX(&backward_cuda));
  m.impl("tutorial_forward", TORCH_BOX(&tutorial_forward_cuda));
  m.impl("tutorial_backward", TORCH_BOX(&tutorial_backward_cuda));
}

}  // namespace lltm
