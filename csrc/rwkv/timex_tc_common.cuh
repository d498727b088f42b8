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

// Copies UNIT elements (2 UNIT bytes: 16, 8 or 4) with cp.async, or zeros when !valid; both
// aligned to 2 UNIT bytes.
template <int UNIT>
TIMEX_DEVICE void copy_unit(uint16_t* dst, const uint16_t* src, bool valid) {
  static_assert(UNIT == 8 || UNIT == 4 || UNIT == 2, "cp.async copies 16, 8 or 4 bytes");
  copy_async<2 * UNIT>(dst, src, valid);
}

// Stages the elements [x0, x0 + LEN) of ROWS rows of n elements (bits of a 16-bit type):
// row_of(r, src) sets src to row r's first element (any valid pointer when it returns false:
// the row is then zeros) and dst_of(r, x) is where element x of row r goes in shared memory.
// Zeros outside [0, n). unit: elements per copy (the launcher's staging_unit): 8, 4 or 2 where
// every row starts 2 unit bytes aligned, n % unit == 0 and x0 % 8 == 0, so that each group of
// unit is all inside or all outside [0, n) and goes as one cp.async of 2 unit bytes (dst_of(r,
// 8i) is 16-byte aligned and holds the group's elements in order); 1: the elements go one by
// one through registers (an ordinary load and store: rows of odd length, misaligned tensors).
// The threads of the block take the (row, group) or (row, element) pairs round-robin.
template <int ROWS, int LEN, int THREADS, typename RowFn, typename DstFn>
TIMEX_DEVICE void stage_rows(int tid, int x0, int n, int unit, const RowFn& row_of,
                             const DstFn& dst_of) {
  static_assert(LEN % 8 == 0, "rows are staged in groups of 8");
  if (unit == 1) {
    for (int i = tid; i < ROWS * LEN; i += THREADS) {
      const int r = i / LEN, x = i % LEN;
      const uint16_t* src;
      const bool ok = row_of(r, src) && x0 + x >= 0 && x0 + x < n;
      *dst_of(r, x) = ok ? src[x0 + x] : uint16_t(0);
    }
    return;
  }
  // Groups of 8 elements in one loop whatever the unit (a loop per unit spilled registers in
  // the Toeplitz kernel, which stages inside its main loop): 8 / unit copies per group.
  for (int i = tid; i < ROWS * (LEN / 8); i += THREADS) {
    const int r = i / (LEN / 8), x = 8 * (i % (LEN / 8));
    const uint16_t* src;
    const bool row_ok = row_of(r, src);
    uint16_t* const dst = dst_of(r, x);
    if (unit == 8) {
      const bool ok = row_ok && x0 + x >= 0 && x0 + x < n;
      copy_unit<8>(dst, ok ? src + x0 + x : src, ok);
    } else {
      for (int e = 0; e < 8; e += unit) {
        const bool ok = row_ok && x0 + x + e >= 0 && x0 + x + e < n;
        const uint16_t* const s = ok ? src + x0 + x + e : src;
        if (unit == 4) {
          copy_unit<4>(dst + e, s, ok);
        } else {
          copy_unit<2>(dst + e, s, ok);
        }
      }
    }
  }
}

// Stages the elements [x0, x0 + len) of one row of n elements (src; all zeros where !row_ok)
// at dst: each thread copies unit elements at x = first, first + stride, ... (first =
// tid unit, stride = THREADS unit), with cp.async where unit > 1 (unit, len and x0 as
// stage_rows wants them: every group of unit all inside or all outside [0, n)), else through
// registers. The split Toeplitz kernel stages its rows once with it, without a division per
// copy.
TIMEX_DEVICE void stage_row(int first, int stride, int x0, int n, int len, int unit, bool row_ok,
                            const uint16_t* src, uint16_t* dst) {
  if (unit == 1) {
    // Eight loads in flight before their stores: one at a time, each waits out its load's
    // latency (the split kernel at (6, 256, 1251) float16 took 70% longer than at 1252).
    for (int x = first; x < len; x += 8 * stride) {
      uint16_t v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int xu = x + u * stride;
        v[u] = row_ok && xu < len && x0 + xu >= 0 && x0 + xu < n ? src[x0 + xu] : uint16_t(0);
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        if (x + u * stride < len) dst[x + u * stride] = v[u];
      }
    }
    return;
  }
  for (int x = first; x < len; x += stride) {
    const bool ok = row_ok && x0 + x >= 0 && x0 + x < n;
    const uint16_t* const s = ok ? src + x0 + x : src;
    if (unit == 8) {
      copy_unit<8>(dst + x, s, ok);
    } else if (unit == 4) {
      copy_unit<4>(dst + x, s, ok);
    } else {
      copy_unit<2>(dst + x, s, ok);
    }
  }
}

// One 16-index reduction step of the Toeplitz products (timex_tc_toeplitz.cuh's top comment;
// the chunked and the split kernel): the A fragments of a warp's MT tiles (tile i's outputs
// from t0 + 16 J i) at the step's first reduction index ms, from pair(y) (the 32-bit pair whose
// first element is W[y]; a1 is the previous step's a2, carried, but at the warp's first step),
// the B fragments of its NT column tiles at kstep + col_off[n] (the step's staged inputs), and
// acc += A B.
template <typename scalar_t, int MT, int NT, int J, bool CAUSAL, typename PairFn>
TIMEX_DEVICE void toeplitz_step(float (&acc)[MT][NT][4], uint32_t (&carry)[MT], bool first,
                                int t0, int ms, int xw, const PairFn& pair,
                                const uint16_t* kstep, const int (&col_off)[NT]) {
  uint32_t a[MT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i) {
    const int tA = t0 + 16 * J * i;
    const int y = (CAUSAL ? tA - ms : ms - tA) + xw;
    const int d8 = CAUSAL ? 8 : -8;  // row + 8
    a[i][0] = pair(y);
    a[i][1] = first ? pair(y + d8) : carry[i];
    a[i][2] = pair(y - d8);
    a[i][3] = a[i][0];
    carry[i] = a[i][2];
  }
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const uint16_t* const kp = kstep + col_off[n];
    const uint32_t b[2] = {lds32(kp), lds32(kp + 8)};
#pragma unroll
    for (int i = 0; i < MT; ++i) fused_ops::mma_16816<scalar_t>(acc[i][n], a[i], b);
  }
}

}  // namespace half_tc
}  // namespace kernels
}  // namespace rwkv
