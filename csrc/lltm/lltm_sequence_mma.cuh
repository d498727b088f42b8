// LLTM over a whole sequence, half types: the tensor-core tile product of one recurrence step
// (mma.sync m16n8k16, bfloat16 or float16 operands, float accumulation; ldmatrix from shared
// memory), used by the persistent kernels of lltm_sequence_persistent_mma.cuh.
//
// The product of a step is out[n][o] = sum_k A[n][k] * W[o][k] over the CTA's W rows o (the
// MMA's M) and the cluster's batch rows n (N), K = S (forward) or 3S (backward). In the MMA's
// terms W is the row-major A operand (16 x 16 tiles) and the batch rows' operand, stored
// [n][k], is the column-major B operand (16 x 8 tiles): both are row-major [row][k] arrays in
// shared memory with the same row stride ldk (elements of T), which is an odd multiple of
// 16 bytes modulo 128, so that the 8 rows of 16 bytes that one ldmatrix 8x8 matrix reads lie
// in 8 distinct bank groups (no conflicts). Rows and k past the data are zero.
//
// Work split (Split below): the M tiles and the k steps of 16 are split over the warps:
// ksplit warps share each M-tile set, each summing one contiguous slice of the k steps, and
// the msets = warps / ksplit sets take the M tiles round-robin; a warp multiplies its M tiles
// by every N tile (each fragment loaded once per warp and k step). Each warp stores
// its float sums into its slice's partial buffer part[slice][n][row]; the consumer adds the
// ksplit partials in slice order (a fixed order: the result is bitwise deterministic).
// The tensor cores sum a fragment's 16 products and the accumulator in float (with their own
// rounding); every product of two half-type values is exact in float.
//
// With FUSED_OPS_EMULATE (tests/cuda_emulation.h) ldmatrix and mma are emulated on the CPU with
// PTX's fragment layouts, so the indexing is checked by tests/test_lltm_sequence_emulation.py.
#pragma once

#include <cstdint>
#include <type_traits>

#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include "common/mma_half.h"

#if defined(FUSED_OPS_EMULATE)
#define LLTM_MMA_FN inline
#define LLTM_MMA_HOST_FN inline
#else
#define LLTM_MMA_FN __device__ __forceinline__
#define LLTM_MMA_HOST_FN __host__ __device__ inline  // the launcher plans with it too
#endif

namespace lltm::mma {

// (M tile, N tile) pairs a warp keeps accumulators for at once (4 floats each); a warp with
// more runs them in rounds.
constexpr int kPairsMax = 8;

// Shared-memory address of p (ldmatrix takes a .shared address).
#if !defined(FUSED_OPS_EMULATE)
__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
#endif

// ldmatrix .x4 / .x2 (8x8 matrices of 16-bit elements, not transposed): lane l gives the
// address of row l % 8 of matrix l / 8 (16 contiguous bytes); lane (g = lane / 4, q = lane % 4)
// receives in r[i] the elements 2q, 2q+1 of row g of matrix i (the lower k in the low half).
// .x2 reads the addresses of lanes 0-15 only. The .x4 is common/mma_half.h's.
using fused_ops::ldmatrix_x4;

LLTM_MMA_FN void ldmatrix_x2(uint32_t (&r)[2], const void* row) {
#if defined(FUSED_OPS_EMULATE)
  emu_ldmatrix(r, 2, row);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_address(row)));
#else
  __trap();
#endif
}

// c += A (16 x 16, row-major) * B (16 x 8, column-major), one warp (common/mma_half.h: the
// fragment layouts, emulated on the CPU under FUSED_OPS_EMULATE like the loads above).
using fused_ops::mma_16816;

// The split of one step's product over the warps of a CTA (see the top of this file).
struct Split {
  int mt, nt;     // 16-row tiles of W (M), 8-row tiles of the batch operand (N)
  int ksteps;     // k steps of 16
  int ksplit;     // k slices: warps per M-tile set (1, 2, 4 or 8, at most ksteps)
  int msets;      // M-tile sets: warps / ksplit; set i takes the tiles i, i + msets, ...
};

// N tiles a warp accumulates at once: 1 where the batch operand has one tile, else 2; with
// kPairsMax / that many M tiles.
LLTM_MMA_HOST_FN int n_chunk(int nt) { return nt == 1 ? 1 : 2; }

// The largest k split (shortest accumulation chains) that leaves every warp's M tiles to one
// round of accumulators; 1 where even that needs rounds.
LLTM_MMA_HOST_FN Split make_split(int mt, int nt, int ksteps, int warps) {
  Split s{mt, nt, ksteps, 1, warps};
  const int mb = kPairsMax / n_chunk(nt);
  for (int ks = warps; ks > 1; ks /= 2) {
    const int sets = warps / ks;
    if (ks <= ksteps && warps % ks == 0 && (mt + sets - 1) / sets <= mb) {
      s.ksplit = ks;
      s.msets = sets;
      return s;
    }
  }
  return s;
}

// part[slice][n][row] (row fastest, n stride ldr floats, slice stride nt * 8 * ldr) = this
// warp's share of sum_k a[n][k] * w[row][k]: its M tiles (set warp / ksplit) x every N tile,
// over its k slice (warp % ksplit); w is [mt * 16][ldk], a is [nt * 8][ldk], both of T with
// zero padding. In rounds of MB M tiles x NB N tiles: per k step, the fragments of the next
// step are loaded before this step's MMAs (two register buffers), each A fragment serves NB
// MMAs and each B fragment MB. Row-fastest partials so that the consumer (a thread per state
// column, consecutive columns in consecutive lanes) reads without bank conflicts; ldr = 4
// (mod 32) keeps the stores below conflict-free too. Warp-uniform control flow.
template <typename T, int NB>
LLTM_MMA_FN void tile_rounds(const Split& s, const T* __restrict__ w, const T* __restrict__ a,
                             int ldk, float* __restrict__ part, int ldr, int warp, int lane) {
  constexpr int MB = kPairsMax / NB;
  const int slice = warp % s.ksplit, set = warp / s.ksplit;
  const int k_begin = slice * s.ksteps / s.ksplit, k_end = (slice + 1) * s.ksteps / s.ksplit;
  const int mw = set < s.mt ? (s.mt - set + s.msets - 1) / s.msets : 0;
  // This lane's ldmatrix row: A tiles .x4 (matrix i = lane / 8: rows + 8 (i & 1), k + 8 (i >> 1)),
  // B tiles .x2 (matrix lane / 8 & 1: k + 8 (lane / 8 & 1); lanes 16-31 repeat 0-15).
  const int r = lane & 7, i8 = lane >> 3;
  const int a_lane = (r + 8 * (i8 & 1)) * ldk + 8 * (i8 >> 1);
  const int b_lane = r * ldk + 8 * (i8 & 1);
  const int g = lane >> 2, q = lane & 3;
  float* out = part + slice * s.nt * 8 * ldr;
  for (int u0 = 0; u0 < mw; u0 += MB) {
    for (int n0 = 0; n0 < s.nt; n0 += NB) {
      bool mv[MB], nv[NB];
      const T* wp[MB];
      const T* ap[NB];
#pragma unroll
      for (int u = 0; u < MB; ++u) {
        mv[u] = u0 + u < mw;
        wp[u] = w + (mv[u] ? (set + s.msets * (u0 + u)) * 16 * ldk : 0) + a_lane;
      }
#pragma unroll
      for (int v = 0; v < NB; ++v) {
        nv[v] = n0 + v < s.nt;
        ap[v] = a + (nv[v] ? (n0 + v) * 8 * ldk : 0) + b_lane;
      }
      float acc[MB][NB][4];
#pragma unroll
      for (int u = 0; u < MB; ++u)
#pragma unroll
        for (int v = 0; v < NB; ++v)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[u][v][e] = 0.f;
      uint32_t af[2][MB][4], bf[2][NB][2];
      auto load = [&](int k, int buf) {
#pragma unroll
        for (int u = 0; u < MB; ++u) {
          if (mv[u]) ldmatrix_x4(af[buf][u], wp[u] + 16 * k);
        }
#pragma unroll
        for (int v = 0; v < NB; ++v) {
          if (nv[v]) ldmatrix_x2(bf[buf][v], ap[v] + 16 * k);
        }
      };
      auto multiply = [&](int buf) {
#pragma unroll
        for (int u = 0; u < MB; ++u)
#pragma unroll
          for (int v = 0; v < NB; ++v) {
            if (mv[u] && nv[v]) mma_16816<T>(acc[u][v], af[buf][u], bf[buf][v]);
          }
      };
      if (k_begin < k_end) load(k_begin, 0);
      // Two k steps per trip so that the buffer indices are constants (registers).
      for (int k = k_begin; k < k_end; k += 2) {
        if (k + 1 < k_end) load(k + 1, 1);
        multiply(0);
        if (k + 1 < k_end) {
          if (k + 2 < k_end) load(k + 2, 0);
          multiply(1);
        }
      }
#pragma unroll
      for (int u = 0; u < MB; ++u)
#pragma unroll
        for (int v = 0; v < NB; ++v) {
          if (mv[u] && nv[v]) {
            const int m = set + s.msets * (u0 + u), n = n0 + v;
            float* o = out + (n * 8 + 2 * q) * ldr + m * 16 + g;
            o[0] = acc[u][v][0];
            o[ldr] = acc[u][v][1];
            o[8] = acc[u][v][2];
            o[ldr + 8] = acc[u][v][3];
          }
        }
    }
  }
}

template <typename T>
LLTM_MMA_FN void tile_product(const Split& s, const T* __restrict__ w, const T* __restrict__ a,
                              int ldk, float* __restrict__ part, int ldr, int warp, int lane) {
  if (s.nt == 1) {
    tile_rounds<T, 1>(s, w, a, ldk, part, ldr, warp, lane);
  } else {
    tile_rounds<T, 2>(s, w, a, ldk, part, ldr, warp, lane);
  }
}

}  // namespace lltm::mma
