// LLTM over a sequence: the host-side driver shared by the CPU library (lltm_sequence.cpp) and
// the CUDA library (lltm_sequence_cuda.cu): the buffers of lltm_sequence.h, the
// GEMMs over all steps (input projection before the recurrence, weight and input gradients
// after it) and the per-step recurrence loop that the CPU and the CUDA fallback share (one
// ATen GEMM and one device-specific pointwise pass per step). Everything is inline: the two
// libraries are separate shared objects and each carries its own copy. The ops' input checks:
// lltm_sequence_checks.h.
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/c/shim.h>
#include <torch/csrc/stable/macros.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/stableivalue_conversions.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/csrc/stable/version.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <tuple>
#include <vector>

#include "common/alloc.h"
#include "common/aten_ops.h"
#include "common/checks.h"
#include "common/dispatch.h"
#include "lltm/lltm_sequence.h"
#include "lltm/lltm_sequence_checks.h"

namespace lltm {

// (d_input, d_weights, d_bias, d_h0, d_c0).
using SeqGrads = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>;
// The gradients of the outputs that lltm_sequence_backward takes, contiguous, each absent for
// zero: out (T, B, S) = dL/dh_t for t < T (dL/dhs[1:], the layer's output), h0 (B, S) =
// dL/dhs[0] (added to d_h0), h_n (B, S) added to out[T-1] (h_n = hs[T]; hs[0] at T = 0), c_n
// (B, S) = dL/dc_n; full: grad_hs itself where it came as the (T+1, B, S) gradient of hs (out
// and h0 are then views of it). Hidden like the torch::stable::Tensor it holds.
struct __attribute__((visibility("hidden"))) SeqGradParts {
  OptTensor out, h0, h_n, c_n, full;
};

// The backward's weight-gradient kernel where the device runs one (CUDA: lltm_sequence_wgrad.h),
// set up before the recurrence: its workspace (work absent: the kernel does not take the
// problem, the GEMMs run), whose B zeroed counters at `progress` the recurrence may advance
// as it goes (publishers: the recurrence's CTAs, CTA c adding 1 to progress[c] every
// `interval` steps and after the last; 0 where the path publishes nothing, and the kernel
// then waits for nothing).
// Hidden like the torch::stable::Tensor it holds.
struct __attribute__((visibility("hidden"))) SeqWgradOverlap {
  OptTensor work;
  unsigned* progress = nullptr;
  int64_t publishers = 0, interval = 0;
};
// The gradients the weight-gradient kernel is asked for.
struct SeqWgradWanted {
  bool input, weights, bias;
};

// The device-specific primitives of the driver, so that the hot path makes no dispatcher call
// (each torch_call_dispatcher call boxes its arguments and looks the op up by name: several
// microseconds of host time): the device's AOTI GEMM shims (the same ATen kernels as aten::mm
// and aten::addmm, called directly) and raw copies, fills and reductions in stream order.
struct SeqDevice {
  // aoti_torch_{cpu,cuda}_mm_out: out = self @ mat2; out may be a strided view whose rows or
  // columns a BLAS can address (a column block of a row-major matrix: written in place).
  AOTITorchError (*mm_out)(AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle mat2);
  // aoti_torch_{cpu,cuda}_addmm_out: out = beta self + alpha mat1 @ mat2 (what aten::linear
  // runs for a 2-D input with a bias: addmm(bias, input, weight^T), beta = alpha = 1).
  AOTITorchError (*addmm_out)(AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle mat1,
                              AtenTensorHandle mat2, double beta, double alpha);
  // rows rows of width bytes from src (row pitch spitch bytes) to dst (row pitch dpitch), on
  // like's device (its current stream).
  void (*copy2d)(const Tensor& like, void* dst, int64_t dpitch, const void* src, int64_t spitch,
                 int64_t width, int64_t rows);
  // bytes zero bytes at dst.
  void (*zero)(const Tensor& like, void* dst, int64_t bytes);
  // out[i] = a[i] + b[i], i < n, like's dtype (added in its opmath type, rounded once); a
  // nullptr: zeros (out[i] = 0 + b[i], as a zero-filled tensor plus b).
  void (*add)(const Tensor& like, void* out, const void* a, const void* b, int64_t n);
  // out[j] = sum over r < rows of x[r * n + j], j < n, like's dtype; deterministic (a fixed
  // order of additions, independent of timing), accumulated in at least the opmath type.
  void (*column_sum)(const Tensor& like, void* out, const void* x, int64_t rows, int64_t n);
  // The backward's d_weights, d_bias and d_input in one launch where the device has such a
  // kernel (lltm_sequence_wgrad.h); null where there is none (the CPU). weight_grads_begin,
  // before the recurrence, says whether the kernel takes the problem (its overlap's work set)
  // and makes its workspace; weight_grads launches it, behind the recurrence.
  SeqWgradOverlap (*weight_grads_begin)(const Tensor& like, int64_t T, int64_t B, int64_t S,
                                        int64_t F, const SeqWgradWanted& wanted);
  void (*weight_grads)(const Tensor& like, const void* dz, const void* h_prev, const void* x,
                       const void* weights, int64_t ws0, int64_t ws1, void* d_weights,
                       void* d_bias, void* d_input, int64_t T, int64_t B, int64_t S, int64_t F,
                       const SeqWgradOverlap& overlap);
};

inline void seq_check(AOTITorchError err) { STABLE_TORCH_ERROR_CODE_CHECK(err); }

// Allocation and contiguity without a dispatcher call (common/alloc.h).
using fused_ops::as_contiguous;
using fused_ops::new_empty;

// A view of base's storage with the given sizes and strides, offset elements past base's own
// storage offset (aoti_torch__reinterpret_tensor: a new TensorImpl, no dispatcher call, no
// view tracking; used only for the driver's internal operands).
inline Tensor seq_strided(const Tensor& base, int64_t offset, std::initializer_list<int64_t> size,
                          std::initializer_list<int64_t> stride) {
  AtenTensorHandle out = nullptr;
  seq_check(aoti_torch__reinterpret_tensor(base.get(), static_cast<int64_t>(size.size()),
                                           size.begin(), stride.begin(), offset, &out));
  return Tensor(out);
}
// A contiguous view of a contiguous base's elements [offset, offset + prod(size)).
inline Tensor seq_view(const Tensor& base, int64_t offset, std::initializer_list<int64_t> size) {
  constexpr int64_t kMaxDims = 3;
  const int64_t ndim = static_cast<int64_t>(size.size());
  int64_t strides[kMaxDims];
  int64_t stride = 1;
  for (int64_t d = ndim - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= size.begin()[d];
  }
  AtenTensorHandle out = nullptr;
  seq_check(aoti_torch__reinterpret_tensor(base.get(), ndim, size.begin(), strides, offset, &out));
  return Tensor(out);
}

// dst (rows, cols), contiguous, = src (rows, cols), same dtype: one raw 2-D copy where src's
// rows are contiguous (the usual case), else ATen's copy_ (through the dispatcher).
inline void seq_copy_matrix(const SeqDevice& dev, Tensor& dst, const Tensor& src) {
  const int64_t rows = src.size(0), cols = src.size(1);
  if (rows == 0 || cols == 0) return;
  if (cols == 1 || src.stride(1) == 1) {
    const int64_t es = static_cast<int64_t>(dst.element_size());
    const int64_t width = cols * es;
    const int64_t spitch = rows == 1 ? width : src.stride(0) * es;
    if (spitch >= width) {
      dev.copy2d(dst, dst.mutable_data_ptr(), width, src.const_data_ptr(), spitch, width, rows);
      return;
    }
  }
  torch::stable::copy_(dst, src);
}

// dst (contiguous) = src, same shape and dtype: one raw copy for a contiguous src.
inline void seq_copy_all(const SeqDevice& dev, Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (src.is_contiguous()) {
    const int64_t bytes = dst.numel() * static_cast<int64_t>(dst.element_size());
    dev.copy2d(dst, dst.mutable_data_ptr(), bytes, src.const_data_ptr(), bytes, bytes, 1);
    return;
  }
  torch::stable::copy_(dst, src);
}

inline void seq_mm_out(const SeqDevice& dev, const Tensor& out, const Tensor& self,
                       const Tensor& mat2) {
  seq_check(dev.mm_out(out.get(), self.get(), mat2.get()));
}

// input (T, B, F) as (T B, F): a view of a contiguous input, else a contiguous copy.
inline Tensor seq_flat_input(const Tensor& input, const SeqSizes& sz) {
  if (input.is_contiguous()) return seq_view(input, 0, {sz.steps * sz.batch, sz.features});
  const int64_t flat[] = {sz.steps * sz.batch, sz.features};
  return torch::stable::reshape(input, torch::headeronly::IntHeaderOnlyArrayRef(flat, 2));
}

// W_x = weights[:, S:] (3S, F), a strided view (the GEMMs read it in place).
inline Tensor seq_input_weights(const Tensor& weights, const SeqSizes& sz) {
  const int64_t s0 = weights.stride(0), s1 = weights.stride(1);
  return seq_strided(weights, sz.state * s1, {3 * sz.state, sz.features}, {s0, s1});
}

// The device-specific pointwise pass of one forward step t (tensors of lltm_sequence.h, all
// contiguous): z = gates[t] + rec, written back to gates[t]; (hs[t+1], cells[t+1]) =
// cell(z, cells[t]). rec = hs[t] W_h^T, (B, 3S).
using SeqForwardStep = void (*)(const Tensor& rec, Tensor& gates, Tensor& hs, Tensor& cells,
                                int64_t t);
// The device-specific pointwise pass of one backward step t: with dh = grad_hs[t+1] + rec_dh
// and dc = carry, (dz_t, carry) = cell_backward(dh, dc, cells[t+1], z_t), dz_t written over
// z_t in dz. rec_dh = dz_{t+1} W_h (B, S) (zeros at t = T-1); carry (B, S) in the opmath
// dtype holds dL/dc_t on entry and dL/dc_{t-1} on exit.
using SeqBackwardStep = void (*)(const Tensor& grad_hs, const Tensor& rec_dh,
                                 const Tensor& cells, Tensor& dz, Tensor& carry, int64_t t);

// The forward recurrence of lltm_sequence.h one step at a time: the recurrent GEMM through
// the device's mm shim (MKL/oneDNN on a CPU, cuBLAS on a GPU) into one (B, 3S) buffer reused
// by every step, then the device's pointwise step. w_h is W_h (3S, S) contiguous.
inline void per_step_forward(const SeqDevice& dev, const Tensor& w_h, Tensor& gates, Tensor& hs,
                             Tensor& cells, const SeqSizes& sz, SeqForwardStep step) {
  const int64_t T = sz.steps, B = sz.batch, S = sz.state;
  const Tensor w_h_t = seq_strided(w_h, 0, {S, 3 * S}, {1, S});  // W_h^T, a view
  Tensor rec = new_empty({B, 3 * S}, gates);
  for (int64_t t = 0; t < T; ++t) {
    seq_mm_out(dev, rec, seq_view(hs, t * B * S, {B, S}), w_h_t);
    step(rec, gates, hs, cells, t);
  }
}

// The backward recurrence of lltm_sequence.h one step at a time (dz holds z on entry, dz on
// exit); writes d_h0 = dz_0 W_h + grad_hs[0] and d_c0.
inline void per_step_backward(const SeqDevice& dev, const Tensor& w_h, Tensor& dz,
                              const Tensor& cells, const Tensor& grad_hs,
                              const Tensor& grad_c_n, Tensor& d_h0, Tensor& d_c0,
                              const SeqSizes& sz, SeqBackwardStep step) {
  const int64_t T = sz.steps, B = sz.batch, S = sz.state;
  Tensor rec_dh = new_empty({B, S}, dz);
  dev.zero(rec_dh, rec_dh.mutable_data_ptr(),
           B * S * static_cast<int64_t>(rec_dh.element_size()));
  const torch::headeronly::ScalarType acc = fused_ops::opmath_type(dz.scalar_type());
  Tensor carry = fused_ops::empty({B, S}, acc, dz);
  if (acc == dz.scalar_type()) {
    seq_copy_matrix(dev, carry, grad_c_n);
  } else {
    torch::stable::copy_(carry, grad_c_n);  // converted to the opmath dtype
  }
  for (int64_t t = T - 1; t >= 0; --t) {
    step(grad_hs, rec_dh, cells, dz, carry, t);
    seq_mm_out(dev, rec_dh, seq_view(dz, t * B * 3 * S, {B, 3 * S}), w_h);
  }
  dev.add(d_h0, d_h0.mutable_data_ptr(), grad_hs.const_data_ptr(), rec_dh.const_data_ptr(),
          B * S);  // grad_hs[0] + dz_0 W_h
  if (acc == dz.scalar_type()) {
    seq_copy_all(dev, d_c0, carry);
  } else {
    torch::stable::copy_(d_c0, carry);
  }
}

// The op's output gradients as SeqGradParts (contiguous; views, no copy, where they already
// are); the arguments have passed check_sequence_backward_args.
inline SeqGradParts seq_grad_parts(const OptTensor& grad_hs, const OptTensor& grad_h_n,
                                   const OptTensor& grad_c_n, const SeqSizes& sz) {
  const int64_t T = sz.steps, B = sz.batch, S = sz.state;
  SeqGradParts g;
  if (grad_hs) {
    const Tensor gh = as_contiguous(*grad_hs);
    if (gh.size(0) == T + 1) {
      g.full = gh;
      g.h0 = seq_view(gh, 0, {B, S});
      if (T > 0) g.out = seq_view(gh, B * S, {T, B, S});
    } else if (T > 0) {
      g.out = gh;
    }
  }
  if (grad_h_n) g.h_n = as_contiguous(*grad_h_n);
  if (grad_c_n) g.c_n = as_contiguous(*grad_c_n);
  return g;
}

// The (T+1, B, S) gradient of hs that the parts make (lltm_sequence.h's grad_hs, what the
// paths other than cta read): g.full itself where no h_n's gradient is to be added, else
// assembled: row 0 = h0, rows 1..T = out (zeros where absent), plus h_n at row T.
inline Tensor seq_grad_hs(const SeqDevice& dev, const SeqGradParts& g, const Tensor& like,
                          const SeqSizes& sz) {
  if (g.full && !g.h_n) return *g.full;
  const int64_t T = sz.steps, n = sz.batch * sz.state;
  Tensor gh = new_empty({T + 1, sz.batch, sz.state}, like);
  const int64_t row = n * static_cast<int64_t>(gh.element_size());
  char* base = static_cast<char*>(gh.mutable_data_ptr());
  auto fill = [&](char* dst, const OptTensor& src, int64_t bytes) {
    if (src) {
      dev.copy2d(gh, dst, bytes, src->const_data_ptr(), bytes, bytes, 1);
    } else {
      dev.zero(gh, dst, bytes);
    }
  };
  fill(base, g.h0, row);
  if (T > 0) fill(base + row, g.out, T * row);
  if (g.h_n) {
    // Row T = (out[T-1], or h0 at T = 0) + h_n, added out of place from the sources.
    const OptTensor& prev = T > 0 ? g.out : g.h0;
    const void* a = nullptr;
    if (prev) a = static_cast<const char*>(prev->const_data_ptr()) + (T > 0 ? (T - 1) * row : 0);
    dev.add(gh, base + T * row, a, g.h_n->const_data_ptr(), n);
  }
  return gh;
}

// dL/dc_n as a tensor: g.c_n, or zeros.
inline Tensor seq_grad_c_n(const SeqDevice& dev, const SeqGradParts& g, const Tensor& like,
                           const SeqSizes& sz) {
  if (g.c_n) return *g.c_n;
  Tensor z = new_empty({sz.batch, sz.state}, like);
  dev.zero(z, z.mutable_data_ptr(), z.numel() * static_cast<int64_t>(z.element_size()));
  return z;
}

// W_h = weights[:, :S], contiguous (lltm_sequence.h's w_h): one raw 2-D copy.
inline Tensor recurrent_weights(const SeqDevice& dev, const Tensor& weights, int64_t S) {
  Tensor w_h = new_empty({3 * S, S}, weights);
  seq_copy_matrix(dev, w_h, seq_strided(weights, 0, {3 * S, S},
                                        {weights.stride(0), weights.stride(1)}));
  return w_h;
}

// The prepared form of the forward's operands (lltm_sequence.h, for the paths that do not read
// the arguments in place): h0 and c0 copied into hs[0] and cells[0]; returns W_h contiguous.
inline Tensor prepare_forward(const SeqDevice& dev, const Tensor& weights, const Tensor& h0,
                              const Tensor& c0, Tensor& hs, Tensor& cells, const SeqSizes& sz) {
  Tensor hs0 = seq_view(hs, 0, {sz.batch, sz.state});
  seq_copy_matrix(dev, hs0, h0);
  Tensor cells0 = seq_view(cells, 0, {sz.batch, sz.state});
  seq_copy_matrix(dev, cells0, c0);
  return recurrent_weights(dev, weights, sz.state);
}

// The prepared form of the backward's operands: z copied into dz (the recurrence overwrites it
// in place), W_h contiguous, grad_hs (T+1, B, S) and grad_c_n assembled. Hidden as
// SeqGradParts.
struct __attribute__((visibility("hidden"))) SeqPreparedBackward {
  Tensor w_h, grad_hs, grad_c_n;
};
inline SeqPreparedBackward prepare_backward(const SeqDevice& dev, const Tensor& weights,
                                            const Tensor& gates, Tensor& dz,
                                            const SeqGradParts& g, const SeqSizes& sz) {
  seq_copy_all(dev, dz, gates);
  return {recurrent_weights(dev, weights, sz.state), seq_grad_hs(dev, g, dz, sz),
          seq_grad_c_n(dev, g, dz, sz)};
}

// A device's whole forward recurrence (weights, h0, c0 as the op got them; gates holding P;
// hs, cells to fill, row 0 included); each path reads the operands in place or prepares them
// (prepare_forward).
using SeqForwardRecurrence = void (*)(const Tensor& weights, const Tensor& h0, const Tensor& c0,
                                      Tensor& gates, Tensor& hs, Tensor& cells,
                                      const SeqSizes& sz);
// A device's whole backward recurrence: z from gates (contiguous, left intact), dz written to
// dz, d_h0 and d_c0 from the output gradients g (prepare_backward for the in-place paths).
// Where overlap.progress is set and the path publishes its progress, it sets
// overlap.publishers and overlap.interval.
using SeqBackwardRecurrence = void (*)(const Tensor& weights, const Tensor& gates, Tensor& dz,
                                       const Tensor& cells, const SeqGradParts& g, Tensor& d_h0,
                                       Tensor& d_c0, const SeqSizes& sz,
                                       SeqWgradOverlap& overlap);

// lltm::lltm_sequence_forward -> (hs, cells, gates), fresh contiguous buffers (none aliases an
// argument); the arguments have passed the checks.
inline std::tuple<Tensor, Tensor, Tensor> sequence_forward(
    const SeqDevice& dev, const Tensor& input, const Tensor& weights, const Tensor& bias,
    const Tensor& h0, const Tensor& c0, const SeqSizes& sz, SeqForwardRecurrence recurrence) {
  const int64_t T = sz.steps, B = sz.batch, S = sz.state;
  Tensor hs = new_empty({T + 1, B, S}, input);
  Tensor cells = new_empty({T + 1, B, S}, input);
  Tensor gates = new_empty({T, B, 3 * S}, input);
  if (B == 0 || S == 0) return {hs, cells, gates};
  if (T == 0) {
    (void)prepare_forward(dev, weights, h0, c0, hs, cells, sz);
    return {hs, cells, gates};
  }
  // P = x W_x^T + bias for every step at once: one addmm (what aten::linear runs) written
  // straight into gates. W_x is a column block of weights, read in place.
  const Tensor w_x = seq_input_weights(weights, sz);
  const Tensor w_x_t = seq_strided(w_x, 0, {sz.features, 3 * S}, {w_x.stride(1), w_x.stride(0)});
  seq_check(dev.addmm_out(seq_view(gates, 0, {T * B, 3 * S}).get(), bias.get(),
                          seq_flat_input(input, sz).get(), w_x_t.get(), 1.0, 1.0));
  recurrence(weights, h0, c0, gates, hs, cells, sz);
  return {hs, cells, gates};
}

// lltm::lltm_sequence_backward -> (d_input, d_weights, d_bias, d_h0, d_c0), each contiguous;
// an entry whose mask flag is false comes back empty. The recurrence writes dz into a fresh
// buffer (the saved z stay intact for a second backward with retain_graph); then the weight
// and input gradients are the device's one kernel (overlapping the recurrence where the
// path publishes its progress) or one GEMM (or one column sum) each over all T*B rows.
inline SeqGrads sequence_backward(const SeqDevice& dev, const SeqGradParts& grads,
                                  const Tensor& input, const Tensor& weights, const Tensor& hs,
                                  const Tensor& cells, const Tensor& gates,
                                  const SeqGradMask& mask, const SeqSizes& sz,
                                  SeqBackwardRecurrence recurrence) {
  const int64_t T = sz.steps, B = sz.batch, F = sz.features, S = sz.state;
  Tensor d_h0 = new_empty({B, S}, input);
  Tensor d_c0 = new_empty({B, S}, input);
  Tensor dz = new_empty({T, B, 3 * S}, input);
  SeqWgradOverlap overlap;
  const bool any_wanted = mask[0] || mask[1] || mask[2];
  if (dev.weight_grads_begin != nullptr && T * B > 0 && S > 0 && any_wanted) {
    overlap = dev.weight_grads_begin(dz, T, B, S, F, {mask[0], mask[1], mask[2]});
  }
  // The kernel's operands made contiguous before the recurrence: a copy launched between the
  // two would stand between the kernel and the recurrence it overlaps.
  Tensor x = input, h = hs;
  if (overlap.work) {
    x = as_contiguous(input);
    h = as_contiguous(hs);
  }
  if (T == 0 || B == 0 || S == 0) {
    if (B > 0 && S > 0) {
      // d_h0 = dL/dhs[0] (h_n's gradient included at T = 0), d_c0 = dL/dc_n.
      const Tensor gh = seq_grad_hs(dev, grads, input, sz);
      seq_copy_matrix(dev, d_h0, seq_view(gh, 0, {B, S}));
      seq_copy_matrix(dev, d_c0, seq_grad_c_n(dev, grads, input, sz));
    }
  } else {
    recurrence(weights, as_contiguous(gates), dz, as_contiguous(cells), grads, d_h0, d_c0, sz,
               overlap);
  }
  auto skipped = [&] { return new_empty({0}, input); };
  Tensor d_input = mask[0] ? new_empty({T, B, F}, input) : skipped();
  Tensor d_weights = mask[1] ? new_empty({3 * S, S + F}, input) : skipped();
  Tensor d_bias = mask[2] ? new_empty({3 * S}, input) : skipped();
  if (overlap.work) {
    // All three in one launch (no GEMM set-up for the GPU to wait for); hs[:T] are the rows
    // h_prev.
    dev.weight_grads(dz, dz.const_data_ptr(), h.const_data_ptr(), x.const_data_ptr(),
                     weights.const_data_ptr(), weights.stride(0), weights.stride(1),
                     mask[1] ? d_weights.mutable_data_ptr() : nullptr,
                     mask[2] ? d_bias.mutable_data_ptr() : nullptr,
                     mask[0] ? d_input.mutable_data_ptr() : nullptr, T, B, S, F, overlap);
    return {d_input, d_weights, d_bias, d_h0, d_c0};
  }
  const Tensor dz2 = seq_view(dz, 0, {T * B, 3 * S});
  const Tensor dz2_t = seq_strided(dz, 0, {3 * S, T * B}, {1, 3 * S});  // dz^T, a view
  if (mask[0]) {
    // d_x = dz W_x: one GEMM over all steps (W_x a strided view, read in place).
    seq_mm_out(dev, seq_view(d_input, 0, {T * B, F}), dz2, seq_input_weights(weights, sz));
  }
  if (mask[1]) {
    // [d_W_h | d_W_x] = dz^T [hs[:T] | x]: two GEMMs over all steps, each written straight
    // into its column block of one (3S, S + F) buffer.
    const Tensor d_w_h = seq_strided(d_weights, 0, {3 * S, S}, {S + F, 1});
    const Tensor d_w_x = seq_strided(d_weights, S, {3 * S, F}, {S + F, 1});
    const Tensor h_prev = seq_view(as_contiguous(hs), 0, {T * B, S});
    seq_mm_out(dev, d_w_h, dz2_t, h_prev);
    seq_mm_out(dev, d_w_x, dz2_t, seq_flat_input(input, sz));
  }
  if (mask[2] && S > 0) {
    dev.column_sum(d_bias, d_bias.mutable_data_ptr(), dz.const_data_ptr(), T * B, 3 * S);
  }
  return {d_input, d_weights, d_bias, d_h0, d_c0};
}

}  // namespace lltm
