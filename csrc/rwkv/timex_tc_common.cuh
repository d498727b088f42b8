// RWKV TimeX, bfloat16 and float16 direct kernels on tensor cores (mma.sync m16n8k16, inputs
// staged in their own type, float accumulation): what the Toeplitz kernel
// (timex_tc_toeplitz.cuh) and the grad_w kernel (timex_tc_wgrad.cuh) share. Included after
// timex_kernels.cuh (its TIMEX_* macros, cdiv/imin and the cp.async helpers).
#pragma once

#include <cstdint>
#include <cstring>

#include "common/mma_half.h"
#include "rwkv/timex_kernels.cuh"

namespace rwkv {
namespace kernels {
namespace half_tc {

// The 32 bits at p (4-byte aligned shared memory): two 16-bit elements, p[0] in the low half.
TIMEX_DEVICE uint32_t lds32(const uint16_t* p) {
#ifdef TIMEX_EMULATE
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#else
  return *reinterpret_cast<const uint32_t*>(p);
#endif
}

// The two halves of a packed pair exchanged.
TIMEX_DEVICE uint32_t swap_halves(uint32_t v) { return (v >> 16) | (v << 16); }

// Copies 8 elements (16 bytes) with cp.async, or zeros when !valid; both 16-byte aligned.
TIMEX_DEVICE void copy8(uint16_t* dst, const uint16_t* src, bool valid) {
  copy_async<16>(dst, src, valid);
}

// Stages the elements [x0, x0 + LEN) of ROWS rows of n elements (bits of a 16-bit type):
// row_of(r, src) sets src to row r's first element (any valid pointer when it returns false:
// the row is then zeros) and dst_of(r, x) is where element x of row r goes in shared memory.
// Zeros outside [0, n). vec: 16-byte aligned rows, n % 8 == 0 and x0 % 8 == 0, so that each
// group of 8 is all inside or all outside [0, n) and goes as one cp.async (dst_of(r, 8i) is
// then 16-byte aligned and holds the group's 8 elements in order); else the elements go one by
// one through registers (an ordinary load and store: rows of odd length, misaligned tensors).
// The threads of the block take the (row, group) or (row, element) pairs round-robin.
template <int ROWS, int LEN, int THREADS, typename RowFn, typename DstFn>
TIMEX_DEVICE void stage_rows(int tid, int x0, int n, bool vec, const RowFn& row_of,
                             const DstFn& dst_of) {
  static_assert(LEN % 8 == 0, "rows are staged in groups of 8");
  if (vec) {
    for (int i = tid; i < ROWS * (LEN / 8); i += THREADS) {
      const int r = i / (LEN / 8), x = 8 * (i % (LEN / 8));
      const uint16_t* src;
      const bool ok = row_of(r, src) && x0 + x >= 0 && x0 + x < n;
      copy8(dst_of(r, x), ok ? src + x0 + x : src, ok);
    }
  } else {
    for (int i = tid; i < ROWS * LEN; i += THREADS) {
      const int r = i / LEN, x = i % LEN;
      const uint16_t* src;
      const bool ok = row_of(r, src) && x0 + x >= 0 && x0 + x < n;
      *dst_of(r, x) = ok ? src[x0 + x] : uint16_t(0);
    }
  }
}

}  // namespace half_tc
}  // namespace kernels
}  // namespace rwkv
