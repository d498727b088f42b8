// LLTM over a sequence on CUDA, the "step" path's states that are not a multiple of 8: the
// zero-padded problem's copies in and out (step_forward / step_backward of
// lltm_sequence_cuda.cu, the only includer, run it).
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "common/cuda_utils.cuh"
#include "lltm/lltm_sequence_driver.h"

namespace lltm {
namespace {  // NOLINT(build/namespaces_headers): one translation unit includes it

// The step kernels take S a multiple of 8 (16-byte rows for their asynchronous copies, aligned
// column pairs in their epilogues). Another S runs as the padded problem of state
// Sp = S rounded up to 8: W_h (3, S, S) zero-padded to (3, Sp, Sp), every (.., S) buffer to
// (.., Sp) with zero columns. It is exactly the same recurrence: the padded columns of P, h0
// and c0 are zero, so their z is 0 and their c and h stay 0 (elu(0) = tanh(0) = 0), and the
// zero columns and rows of W_h keep them out of the real columns' sums (which gain only exact
// zero terms); backward, their gradients are 0 likewise.
// The copies in and out (seq_repad_kernel) read and write each buffer once, against T steps
// of kernels; the padded buffers live for the call only.
int64_t step_state(int64_t S) { return (S + 7) / 8 * 8; }

// dst (n rows_d, cols_d) from src (n rows_s, cols_s), both as n blocks of rows: dst's row
// i rows_d + j, column c, holds src's (i rows_s + j, c) where j < rows_s and c < cols_s, else
// zero (a pad, or with smaller dst sizes a cut). Elements moved as bits; a thread per column
// and row run, so that a warp reads and writes 32 consecutive elements.
template <typename Bits>
__global__ void seq_repad_kernel(Bits* __restrict__ dst, const Bits* __restrict__ src,
                                 int64_t n, int64_t rows_d, int64_t cols_d, int64_t rows_s,
                                 int64_t cols_s) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols_d) return;
  for (int64_t r = blockIdx.y; r < n * rows_d; r += gridDim.y) {
    const int64_t i = rows_d == 1 ? r : r / rows_d, j = r - i * rows_d;
    dst[r * cols_d + c] =
        j < rows_s && c < cols_s ? src[(i * rows_s + j) * cols_s + c] : static_cast<Bits>(0);
  }
}

void repad(const Tensor& like, void* dst, const void* src, int64_t n, int64_t rows_d,
           int64_t cols_d, int64_t rows_s, int64_t cols_s) {
  if (n * rows_d == 0 || cols_d == 0) return;
  const cudaStream_t stream = fused_ops::current_stream(like);
  const dim3 block(256), grid(static_cast<unsigned>((cols_d + 255) / 256),
                              static_cast<unsigned>(std::min<int64_t>(n * rows_d, 65535)));
  if (like.element_size() == 4) {
    seq_repad_kernel<<<grid, block, 0, stream>>>(static_cast<uint32_t*>(dst),
                                                 static_cast<const uint32_t*>(src), n, rows_d,
                                                 cols_d, rows_s, cols_s);
  } else {
    seq_repad_kernel<<<grid, block, 0, stream>>>(static_cast<uint16_t*>(dst),
                                                 static_cast<const uint16_t*>(src), n, rows_d,
                                                 cols_d, rows_s, cols_s);
  }
  FUSED_OPS_LAUNCH_CHECK();
}

// A buffer shaped `shape` whose first `rows` rows of Sp hold src's (rows, S) with zero
// columns after; the rows after them are left for the kernels to write.
Tensor padded(std::initializer_list<int64_t> shape, const Tensor& like, const void* src,
              int64_t rows, int64_t S, int64_t Sp) {
  Tensor out = new_empty(shape, like);
  repad(like, out.data_ptr(), src, rows, 1, Sp, 1, S);
  return out;
}

// dst's (rows, S) from the first S columns of src's (rows, Sp).
void unpadded(const Tensor& like, void* dst, const void* src, int64_t rows, int64_t S,
              int64_t Sp) {
  repad(like, dst, src, rows, 1, S, 1, Sp);
}

// W_h (3S, S) as (3, Sp, Sp): each gate's S x S block in the top left of an Sp x Sp one.
Tensor padded_weights(const Tensor& w_h, int64_t S, int64_t Sp) {
  Tensor out = new_empty({3 * Sp, Sp}, w_h);
  repad(w_h, out.data_ptr(), w_h.const_data_ptr(), 3, Sp, Sp, S, S);
  return out;
}

}  // namespace
}  // namespace lltm
