// RWKV TimeX, bfloat16 and float16 direct kernels on tensor cores (mma.sync m16n8k16, inputs
// staged in their own type, float accumulation): what the Toeplitz kernel
// (timex_tc_toeplitz.cuh) and the grad_w kernel (timex_tc_wgrad.cuh) share. Included after
// timex_kernels.cuh (its TIMEX_* macros, cdiv/imin and the cp.async helpers).
#pragma once

#include <cstdint>
#include <cstring>

#include "common/mma_half.h"
#include "rwkv/timex_kernels.cuh"

// A device function kept out of its caller (its own register allocation).
#ifdef TIMEX_EMULATE
#define TIMEX_DEVICE_NOINLINE inline
#else
#define TIMEX_DEVICE_NOINLINE __device__ __noinline__
#endif

namespace rwkv {
namespace kernels {
namespace half_tc {

// The 32 bits at p (4-byte aligned shared memory): two 16-bit elements, p[0] in the low half.
TIMEX_DEVICE uint32_t lds32(const uint16_t* p) {
#ifdef TIMEX_EMULATE
  emu_require_aligned(p, 4);
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
// at dst with cp.async: each thread copies unit (8, 4 or 2) elements at x = first, first +
// stride, ... (first = tid unit, stride = THREADS unit; unit, len and x0 as stage_rows wants
// them: every group of unit all inside or all outside [0, n)). The split Toeplitz kernel stages
// its rows once with it, without a division per copy.
TIMEX_DEVICE void stage_row(int first, int stride, int x0, int n, int len, int unit, bool row_ok,
                            const uint16_t* src, uint16_t* dst) {
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

// The 16- and 32-bit words at p (global memory aligned to as many bytes); 4 and 16 bytes
// stored at dst (shared memory aligned to as many bytes).
TIMEX_DEVICE uint32_t ldg16(const uint16_t* p) {
#ifdef TIMEX_EMULATE
  return *p;
#else
  return __ldg(reinterpret_cast<const unsigned short*>(p));
#endif
}
TIMEX_DEVICE uint32_t ldg32(const uint16_t* p) {
#ifdef TIMEX_EMULATE
  emu_require_aligned(p, 4);
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#else
  return __ldg(reinterpret_cast<const unsigned int*>(p));
#endif
}
TIMEX_DEVICE void sts128(uint16_t* dst, const uint32_t (&v)[4]) {
#ifdef TIMEX_EMULATE
  emu_require_aligned(dst, 16);
  std::memcpy(dst, v, 16);
#else
  *reinterpret_cast<uint4*>(dst) = make_uint4(v[0], v[1], v[2], v[3]);
#endif
}

// Elements [e, e + 8) of a row of n elements at src (zeros outside [0, n), all zeros where
// !row_ok) as 4 words, element e + 2j in word j's low half, read as aligned words whatever
// src's alignment: the 4 32-bit words that hold them, or where src + e is not 4-byte aligned
// the 5 around them, shifted by an element. Only elements in [0, n) are read (a word with one
// such element as 16 bits): nothing outside the row's tensor, nothing left uninitialised.
TIMEX_DEVICE void load8_words(const uint16_t* src, int e, int n, bool row_ok, uint32_t (&v)[4]) {
  // Parity of src + e in elements (src is 2-byte aligned).
  const int odd = (static_cast<int>(reinterpret_cast<uintptr_t>(src) >> 1) + e) & 1;
  const int f = e - odd;  // first element of the first word
  uint32_t w[5];
  if (row_ok && f >= 0 && f + 10 <= n) {
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = ldg32(src + f + 2 * j);
    w[4] = odd ? ldg32(src + f + 8) : 0u;
  } else {
#pragma unroll
    for (int j = 0; j < 5; ++j) {
      const int x = f + 2 * j;  // the word holds elements x and x + 1
      const bool lo = row_ok && x >= 0 && x < n, hi = row_ok && x + 1 >= 0 && x + 1 < n;
      w[j] = lo && hi ? ldg32(src + x) : lo ? ldg16(src + x) : hi ? ldg16(src + x + 1) << 16 : 0u;
    }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) v[j] = odd ? (w[j] >> 16) | (w[j + 1] << 16) : w[j];
}

// Stages `total` groups of 8 elements of rows of n elements from any alignment into shared
// memory: group_of(i, src, e, dst) sets group i's row (src), first element (e) and
// destination (dst, 16-byte aligned) and returns false where the row is zeros (src then any
// pointer). The threads take the groups round-robin, FLIGHT groups' loads (load8_words) in
// flight before their stores: through registers, so done on return.
template <int FLIGHT, int THREADS, typename GroupFn>
TIMEX_DEVICE void stage_words(int tid, int total, int n, const GroupFn& group_of) {
  for (int i0 = tid; i0 < total; i0 += FLIGHT * THREADS) {
    uint32_t v[FLIGHT][4];
    uint16_t* dst[FLIGHT];
#pragma unroll
    for (int u = 0; u < FLIGHT; ++u) {
      const int i = i0 + u * THREADS;
      const uint16_t* src = nullptr;
      int e = 0;
      dst[u] = nullptr;
      const bool ok = i < total && group_of(i, src, e, dst[u]);
      load8_words(src, e, n, ok, v[u]);
    }
#pragma unroll
    for (int u = 0; u < FLIGHT; ++u) {
      if (i0 + u * THREADS < total) sts128(dst[u], v[u]);
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
