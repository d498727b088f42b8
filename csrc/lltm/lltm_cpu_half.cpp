// The LLTM cell in float16 and bfloat16 on the CPU (lltm_cpu_half.h): the GEMMs in float, the
// pointwise passes of lltm_cpu_rows.h, only the op's outputs rounded to the half type.
#include "lltm/lltm_cpu_half.h"

#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cpu_features.h"
#include "common/dispatch.h"
#include "lltm/lltm_cpu_avx2.h"
#include "lltm/lltm_cpu_rows.h"

namespace lltm {
namespace {

using torch::headeronly::ScalarType;

// ---- float16 and bfloat16: the GEMMs in float ----
// An AVX2 CPU has no half-type dot products: ATen's float16 and bfloat16 GEMMs convert inside
// and ran this cell 2x (bfloat16) to 5x (float16) slower than float32 on the 2-core AMD EPYC
// machine (issue 27). So the GEMMs run in float: lltm_cpu_gemm_fwd_avx2.cpp's and
// lltm_cpu_gemm_avx2.cpp's read W in its half type and convert it as they go; the library
// path converts W and X to float tensors once per call (AVX2: F16C, bfloat16 shifts) for
// ATen's float GEMMs. Only the op's outputs are rounded to the half type (the pointwise
// kernels compute in float either way).

// Which GEMMs a float16 / bfloat16 cell runs: kFused, the AVX2 kernels (W read in its half
// type), or kLibrary, W and X converted to float tensors and ATen's float GEMMs (CPUs without
// AVX2). auto: fused (measured on the 2-core AMD EPYC, benchmarks/results/lltm_cpu_half.md:
// the library's forward, backward and step are slower at every size measured).
// LLTM_CPU_PATH=fused|library|auto forces one (read at every call: tests and benchmarks set
// it between calls).
enum class HalfGemms { kFused, kLibrary };

HalfGemms half_gemms() {
  const char* v = std::getenv("LLTM_CPU_PATH");
  HalfGemms choice = HalfGemms::kFused;
  if (v != nullptr && *v != '\0' && std::strcmp(v, "auto") != 0) {
    if (std::strcmp(v, "fused") == 0) {
      choice = HalfGemms::kFused;
    } else if (std::strcmp(v, "library") == 0) {
      choice = HalfGemms::kLibrary;
    } else {
      fused_ops::raise<std::invalid_argument>(
          "environment variable LLTM_CPU_PATH must be 'fused', 'library' or 'auto' (or unset), "
          "got '", std::string(v), "'");
    }
  }
  // Without AVX2 the fused kernels do not exist: the library's GEMMs.
  return fused_ops::cpu_has_avx2() ? choice : HalfGemms::kLibrary;
}

// Elements per parallel_for task of the conversions below: the weights of a (16, 32, 128) cell
// (61440 elements) split over two threads.
constexpr int64_t kConvertGrain = 16384;

// n elements between a half type and float, AVX2 where it applies, on torch's threads.
template <typename scalar_t>
void to_float_n(const scalar_t* src, float* dst, int64_t n) {
  torch::stable::parallel_for(0, n, kConvertGrain, [&](int64_t i0, int64_t i1) {
    if (fused_ops::cpu_has_avx2()) {
      return to_float_avx2(storage_of<scalar_t>(), src + i0, dst + i0, i1 - i0);
    }
    for (int64_t i = i0; i < i1; ++i) dst[i] = static_cast<float>(src[i]);
  });
}
template <typename scalar_t>
void from_float_n(const float* src, scalar_t* dst, int64_t n) {
  torch::stable::parallel_for(0, n, kConvertGrain, [&](int64_t i0, int64_t i1) {
    if (fused_ops::cpu_has_avx2()) {
      return from_float_avx2(storage_of<scalar_t>(), src + i0, dst + i0, i1 - i0);
    }
    for (int64_t i = i0; i < i1; ++i) dst[i] = static_cast<scalar_t>(src[i]);
  });
}

// A half-type t (1-D or 2-D) as a contiguous float tensor: converted here where t is
// contiguous, by aten::copy_ otherwise.
Tensor as_float(const Tensor& t) {
  Tensor out = fused_ops::empty_shaped(t, ScalarType::Float);
  if (!t.is_contiguous()) {
    torch::stable::copy_(out, t);
    return out;
  }
  FUSED_OPS_DISPATCH_HALF(t.scalar_type(), "lltm_cpu", [&] {
    to_float_n<scalar_t>(t.const_data_ptr<scalar_t>(), out.mutable_data_ptr<float>(), t.numel());
  });
  return out;
}

// A contiguous float t (1-D or 2-D) rounded to the half type `type`.
Tensor rounded(const Tensor& t, ScalarType type) {
  Tensor out = fused_ops::empty_shaped(t, type);
  FUSED_OPS_DISPATCH_HALF(type, "lltm_cpu", [&] {
    from_float_n<scalar_t>(t.const_data_ptr<float>(), out.mutable_data_ptr<scalar_t>(), t.numel());
  });
  return out;
}

// ---- The GEMMs in float, W read in the half type (AVX2 CPUs; lltm_cpu_gemm_avx2.cpp) ----

// Rows [r0, r1) of the contiguous (rows, K) half-type src as float rows of pitch
// half_gemm_pitch(K), zero-padded; the rows before r0 are left as they are.
template <typename scalar_t>
void to_padded_floats(const scalar_t* src, int64_t K, int64_t r0, int64_t r1, float* dst) {
  const int64_t pitch = half_gemm_pitch(K);
  for (int64_t r = r0; r < r1; ++r) {
    to_float_avx2(storage_of<scalar_t>(), src + r * K, dst + r * pitch, K);
    std::fill(dst + r * pitch + K, dst + (r + 1) * pitch, 0.f);
  }
}

// X (B, K) in the half type as float rows for the GEMMs, converted on torch's threads.
template <typename scalar_t>
std::vector<float> padded_floats(const Tensor& X) {
  const int64_t B = X.size(0), K = X.size(1);
  std::vector<float> out(static_cast<size_t>(B * half_gemm_pitch(K)));
  const scalar_t* src = X.const_data_ptr<scalar_t>();
  torch::stable::parallel_for(0, B, std::max<int64_t>(1, kConvertGrain / std::max<int64_t>(1, K)),
                              [&](int64_t r0, int64_t r1) {
                                to_padded_floats(src, K, r0, r1, out.data());
                              });
  return out;
}

// Tasks of at least ~64K multiply-adds: blocks of `per_block` each.
int64_t grain_blocks(int64_t per_block) {
  return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, per_block));
}

// The forward's gates (B, 3S) in float = X W^T + bias; X, weights, bias contiguous, B > 0.
// Two kernels: gates_packed (outer products on 16-row batch panels) from kPackedMinBatch batch
// rows, gates_dot (dot products along k, blocks of 3 batch rows) below. A panel costs the
// same for 1 to 16 rows, the dot products grow with B: measured on the 2-core AMD EPYC (one
// thread, forward time over float32's, both half types): at (12, 32, 128) and (12, 128, 256)
// dot 0.69-0.81x against packed 0.76-0.91x; at (16, 32, 128) dot 0.91-0.92x against packed
// 0.76-0.77x, (16, 256, 1024) 0.65-0.69x against 0.49-0.52x, (64, 128, 256) 1.01-1.12x
// against 0.87-1.00x. Two threads, B = 12: dot 0.36-0.68x against packed 0.41-0.77x at
// (12, 32, 128), (12, 128, 256), (12, 256, 1024); B = 13: the two within 4% of each other at
// the first two sizes, at (13, 256, 1024) dot 0.57-0.58x against packed 0.46-0.54x. Hence 13.
constexpr int64_t kPackedMinBatch = 13;

// Dot products (lltm_cpu_gemm_avx2.cpp: 4 rows of W converted into L1, 3 batch rows).
Tensor gates_dot(const Tensor& X, const Tensor& weights, const Tensor& bias,
                  const CellSizes& sizes) {
  const int64_t B = sizes.batch, S = sizes.state, K = sizes.state + sizes.features, N = 3 * S;
  Tensor gates = fused_ops::empty({B, N}, ScalarType::Float, X);
  FUSED_OPS_DISPATCH_HALF(X.scalar_type(), "lltm_forward_cpu", [&] {
    const std::vector<float> x = padded_floats<scalar_t>(X);
    std::vector<float> b(static_cast<size_t>(N));
    const scalar_t* bias_src = bias.const_data_ptr<scalar_t>();
    for (int64_t n = 0; n < N; ++n) b[n] = static_cast<float>(bias_src[n]);
    const void* w = weights.const_data_ptr();
    float* out = gates.mutable_data_ptr<float>();
    const int64_t blocks = (N + kHalfGemmRows - 1) / kHalfGemmRows;
    torch::stable::parallel_for(
        0, blocks, grain_blocks(kHalfGemmRows * B * K), [&](int64_t i0, int64_t i1) {
          std::vector<float> scratch(static_cast<size_t>(kHalfGemmRows * half_gemm_pitch(K)));
          gates_dot_avx2(storage_of<scalar_t>(), w, x.data(), b.data(), out, B, K, N,
                          i0 * kHalfGemmRows, std::min(N, i1 * kHalfGemmRows), scratch.data());
        });
  });
  return gates;
}

// The forward's gates in outer-product form (lltm_cpu_gemm_fwd_avx2.cpp): X packed into batch
// panels once, then tasks of gate_block_rows(K) rows of W x a run of panels; the batch is split
// too where the row blocks alone would leave a thread without two tasks.
Tensor gates_packed(const Tensor& X, const Tensor& weights, const Tensor& bias,
                    const CellSizes& sizes) {
  const int64_t B = sizes.batch, S = sizes.state, K = sizes.state + sizes.features, N = 3 * S;
  Tensor gates = fused_ops::empty({B, N}, ScalarType::Float, X);
  const int64_t panels = gate_panels(B);
  const int64_t block = gate_block_rows(K);
  const int64_t row_blocks = (N + block - 1) / block;
  const int64_t want = 2 * static_cast<int64_t>(torch::stable::get_num_threads());
  int64_t per_task = panels;  // panels per task
  if (row_blocks < want) {
    const int64_t chunks = std::min(panels, (want + row_blocks - 1) / row_blocks);
    per_task = (panels + chunks - 1) / chunks;
  }
  const int64_t chunks = (panels + per_task - 1) / per_task;
  FUSED_OPS_DISPATCH_HALF(X.scalar_type(), "lltm_forward_cpu", [&] {
    constexpr Storage st = storage_of<scalar_t>();
    // Uninitialised (new[], not a std::vector's zero fill): every value is written before read.
    std::unique_ptr<float[]> xt(new float[static_cast<size_t>(panels * K * kGatePanel)]);
    const void* x = X.const_data_ptr();
    torch::stable::parallel_for(0, panels, std::max<int64_t>(1, kConvertGrain / (K * kGatePanel)),
                                [&](int64_t p0, int64_t p1) {
                                  pack_x_avx2(st, x, B, K, p0, p1, xt.get());
                                });
    std::vector<float> b(static_cast<size_t>(N));
    const scalar_t* bias_src = bias.const_data_ptr<scalar_t>();
    for (int64_t n = 0; n < N; ++n) b[n] = static_cast<float>(bias_src[n]);
    const void* w = weights.const_data_ptr();
    float* out = gates.mutable_data_ptr<float>();
    torch::stable::parallel_for(0, row_blocks * chunks, 1, [&](int64_t t0, int64_t t1) {
      const size_t scratch_size = static_cast<size_t>(gates_packed_scratch(K, per_task));
      std::unique_ptr<float[]> scratch(new float[scratch_size]);
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t n0 = t / chunks * block, p0 = t % chunks * per_task;
        gates_packed_avx2(st, w, xt.get(), b.data(), out, B, K, N, n0,
                          std::min(N, n0 + block), p0, std::min(panels, p0 + per_task),
                          scratch.get());
      }
    });
  });
  return gates;
}

// The backward's GEMMs from d_gates (B, 3S, float): d_input, d_weights, d_bias, d_old_h (as
// the mask asks; the others stay as given) in the half type. X, weights contiguous; B, S > 0.
void backward_gemms_half(const Tensor& d_gates, const Tensor& X, const Tensor& weights,
                         const GradMask& mask, const CellSizes& sizes, Tensor& d_input,
                         Tensor& d_weights, Tensor& d_bias, Tensor& d_old_h) {
  const int64_t B = sizes.batch, F = sizes.features, S = sizes.state, K = S + F, N = 3 * S;
  const float* dg = d_gates.const_data_ptr<float>();
  FUSED_OPS_DISPATCH_HALF(X.scalar_type(), "lltm_backward_cpu", [&] {
    constexpr Storage st = storage_of<scalar_t>();
    const void* w = weights.const_data_ptr();
    // [d_old_h | d_input] = d_gates W, by column tiles of W: those of d_old_h, then d_input's.
    auto tiles = [](int64_t width) { return (width + kHalfGemmTileCols - 1) / kHalfGemmTileCols; };
    const int64_t t_h = mask[3] ? tiles(S) : 0, t_in = mask[0] ? tiles(F) : 0;
    if (mask[3]) d_old_h = new_empty({B, S}, X);
    if (mask[0]) d_input = new_empty({B, F}, X);
    void* out_h = mask[3] ? d_old_h.mutable_data_ptr() : nullptr;
    void* out_in = mask[0] ? d_input.mutable_data_ptr() : nullptr;
    torch::stable::parallel_for(
        0, t_h + t_in, grain_blocks(kHalfGemmTileCols * B * N), [&](int64_t t0, int64_t t1) {
          std::vector<float> scratch(static_cast<size_t>(d_x_half_scratch(B)));
          if (t0 < t_h) {
            d_x_half_avx2(st, w, K, 0, S, dg, B, N, out_h, t0, std::min(t1, t_h),
                          scratch.data());
          }
          if (t1 > t_h) {
            d_x_half_avx2(st, w, K, S, F, dg, B, N, out_in, std::max<int64_t>(t0 - t_h, 0),
                          t1 - t_h, scratch.data());
          }
        });
    if (!mask[1] && !mask[2]) return;
    const std::vector<float> x = mask[1] ? padded_floats<scalar_t>(X) : std::vector<float>();
    if (mask[1]) d_weights = new_empty({N, K}, X);
    if (mask[2]) d_bias = new_empty({N}, X);
    void* out_w = mask[1] ? d_weights.mutable_data_ptr() : nullptr;
    void* out_b = mask[2] ? d_bias.mutable_data_ptr() : nullptr;
    const int64_t blocks = (N + kHalfGemmRows - 1) / kHalfGemmRows;
    torch::stable::parallel_for(
        0, blocks, grain_blocks(kHalfGemmRows * B * K), [&](int64_t i0, int64_t i1) {
          const int64_t n0 = i0 * kHalfGemmRows, n1 = std::min(N, i1 * kHalfGemmRows);
          std::vector<float> scratch(static_cast<size_t>(d_w_half_scratch(B, n1 - n0)));
          d_w_half_avx2(st, x.data(), dg, B, K, N, n0, n1, out_w, out_b, scratch.data());
        });
  });
}

template <typename scalar_t>
void forward_half_pointwise(const Tensor& gates32, Tensor& gate_weights, const Tensor& old_cell,
                            Tensor& new_h, Tensor& new_cell, GateActivations* acts) {
  forward_rows<scalar_t>(gates32.const_data_ptr<float>(), gate_weights.mutable_data_ptr<scalar_t>(),
                         old_cell.const_data_ptr<scalar_t>(), new_h.mutable_data_ptr<scalar_t>(),
                         new_cell.mutable_data_ptr<scalar_t>(), activation_ptrs<scalar_t>(acts),
                         old_cell.size(0), old_cell.size(1));
}

template <typename scalar_t>
void backward_half_pointwise(const Tensor& grad_h, const Tensor& grad_cell, const Tensor& new_cell,
                             const Tensor& gates, Tensor& d_gates32, Tensor& d_old_cell) {
  backward_rows<scalar_t>(grad_h.const_data_ptr<scalar_t>(), grad_cell.const_data_ptr<scalar_t>(),
                          new_cell.const_data_ptr<scalar_t>(), gates.const_data_ptr<scalar_t>(),
                          d_gates32.mutable_data_ptr<float>(),
                          d_old_cell.mutable_data_ptr<scalar_t>(), new_cell.size(0),
                          new_cell.size(1));
}

}  // namespace

bool is_half(ScalarType t) { return t == ScalarType::Half || t == ScalarType::BFloat16; }

std::tuple<Tensor, Tensor, Tensor, Tensor> forward_half(const Tensor& input, const Tensor& weights,
                                                        const Tensor& bias, const Tensor& old_h,
                                                        const Tensor& old_cell,
                                                        const CellSizes& sizes,
                                                        GateActivations* acts) {
  const int64_t B = sizes.batch, F = sizes.features, S = sizes.state;
  Tensor X = new_empty({B, S + F}, input);  // [old_h, input] in the op's dtype (saved)
  copy_into_columns(X, 0, old_h);
  copy_into_columns(X, S, input);
  Tensor gates32;
  if (half_gemms() == HalfGemms::kLibrary || B == 0) {
    gates32 = fused_ops::aten::linear(as_float(X), as_float(weights), as_float(bias));
  } else if (B < kPackedMinBatch) {
    gates32 = gates_dot(X, as_contiguous(weights), as_contiguous(bias), sizes);
  } else {
    gates32 = gates_packed(X, as_contiguous(weights), as_contiguous(bias), sizes);
  }
  Tensor gate_weights = new_empty({B, 3 * S}, input);
  Tensor new_h = new_empty({B, S}, input);
  Tensor new_cell = new_empty({B, S}, input);
  if (B > 0 && S > 0) {
    const Tensor oc = as_contiguous(old_cell);
    FUSED_OPS_DISPATCH_HALF(input.scalar_type(), "lltm_forward_cpu", [&] {
      forward_half_pointwise<scalar_t>(gates32, gate_weights, oc, new_h, new_cell, acts);
    });
  }
  return {new_h, new_cell, X, gate_weights};
}

// d_gates_out: null, or where to hand the gradient of gate_weights back, rounded to the dtype
// (lltm::tutorial_backward returns it).
CellGrads backward_half(const Tensor& grad_h, const Tensor& grad_cell, const Tensor& new_cell,
                        const Tensor& gate_weights, const Tensor& X, const Tensor& weights,
                        const GradMask& mask, const CellSizes& sizes,
                        Tensor* d_gates_out) {
  const int64_t B = sizes.batch, F = sizes.features, S = sizes.state;
  const ScalarType dtype = new_cell.scalar_type();
  Tensor d_gates = fused_ops::empty({B, 3 * S}, ScalarType::Float, new_cell);
  Tensor d_old_cell = new_empty({B, S}, new_cell);
  if (B > 0 && S > 0) {
    const Tensor gh = as_contiguous(grad_h), gc = as_contiguous(grad_cell);
    const Tensor nc = as_contiguous(new_cell), g = as_contiguous(gate_weights);
    FUSED_OPS_DISPATCH_HALF(dtype, "lltm_backward_cpu", [&] {
      backward_half_pointwise<scalar_t>(gh, gc, nc, g, d_gates, d_old_cell);
    });
  }
  auto skipped = [&] { return new_empty({0}, new_cell); };
  if (half_gemms() == HalfGemms::kFused && B > 0 && S > 0) {
    Tensor d_input = skipped(), d_weights = skipped(), d_bias = skipped(), d_old_h = skipped();
    backward_gemms_half(d_gates, as_contiguous(X), as_contiguous(weights), mask, sizes, d_input,
                        d_weights, d_bias, d_old_h);
    if (d_gates_out != nullptr) *d_gates_out = rounded(d_gates, dtype);
    return {d_input, d_weights, d_bias, d_old_h, d_old_cell};
  }
  Tensor w32 = mask[0] || mask[3] ? as_float(weights) : Tensor();
  Tensor d_input =
      mask[0] ? rounded(fused_ops::aten::mm(d_gates, torch::stable::narrow(w32, 1, S, F)), dtype)
              : skipped();
  Tensor d_weights =
      mask[1] ? rounded(fused_ops::aten::mm(torch::stable::transpose(d_gates, 0, 1), as_float(X)),
                        dtype)
              : skipped();
  const int64_t batch_dim[] = {0};
  Tensor d_bias =
      mask[2] ? rounded(torch::stable::sum(d_gates,
                                           torch::headeronly::IntHeaderOnlyArrayRef(batch_dim, 1)),
                        dtype)
              : skipped();
  Tensor d_old_h =
      mask[3] ? rounded(fused_ops::aten::mm(d_gates, torch::stable::narrow(w32, 1, 0, S)), dtype)
              : skipped();
  if (d_gates_out != nullptr) *d_gates_out = rounded(d_gates, dtype);
  return {d_input, d_weights, d_bias, d_old_h, d_old_cell};
}

}  // namespace lltm
