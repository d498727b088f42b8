// RWKV TimeX, the FFT on tensor cores (timex_fft_tc.cuh): the outer pass of radix R = 10, 12 or 24
// (N = 2560, 3072, 6144), at stride L = 256, as mma.sync products, fused with the load's scaling
// (forward) and with the store (inverse). The other outer radices (2 to 8) stay on the CUDA cores
// (timex_fft_tc_outer.cuh): their DFTs are a few adds. DFT_24 there (3 DFT_8, then DFT_3, a
// column per lane) took about 40 instructions per output and was the largest part of both
// kernels at N = 6144; here, at (16, 512, 2500) bfloat16 on the H200, the conv kernel takes 171
// us instead of 227 and the backward 350 instead of 416 (ncu, run 31 in
// benchmarks/results/issue29_runs).
//
// A warp takes 8 columns n2 = n0 .. n0 + 7 at a time (a tile; 32 tiles per set): their rows
// n1 < 16 arrive through ldmatrix .trans as the B operand (rows n1 = k, as tc_pass loads them;
// below R = 16 rows R-15 lie past the plane: their lanes address the rows 8 lower instead,
// which the matrices' zero columns from R on, or the forward's zeroed fragments, leave out of
// every sum).
//   forward: x is zero from T <= N / 2 on, so only rows n1 < R / 2 can be nonzero and K = 16
//     covers them (at R = 10 and 12 the fragments of rows 8-15 are zeros outright). The planes
//     hold S's bits, scaled here per plane (scale[set]) to float16 before the MMAs. Outputs k1 <
//     R as one m-tile (k1 = 0-15), two at R = 24 (16-31 the second; rows from R on zero), each
//     Y[k1] times W_N^(k1 n2), rounded to float16, stored at L k1 + n2 (in place: a warp reads its
//     columns' rows before it writes them, and no other warp touches those columns).
//   inverse: every row n1 < R is input: K = 16 from ldmatrix as above, then at R = 24 8 more
//     (rows 16-23, its other 8 k zero); only outputs k1 < R / 2 are wanted (t < T <= N / 2):
//     one m-tile. No twiddle: the middle applied it.
// The DFT matrix, conj(DFT_R) or DFT_R times sigma_R (outer_dft_scale), is rounded to float16
// as the radix-16 passes' sigma DFT_16 is. With 1 / sqrt(24) for sigma_24, float16 inputs'
// error at N = 6144 rose with this pass (CPU emulation, T = 2049: 7.0e-4 -> 9.3e-4);
// kDft24Scale's entries round 6x closer: the op path's emulation at (4, 2, 3000) reads 9.4e-4
// against 1.22e-3 (out, both with kDftScale). auto keeps float16 on fft_fused: the planes'
// roundings dominate its error (2-norm 1.8-3.1 times conv1d's in float16 at N = 2048 to 6144,
// 2560 and 3072 included: benchmarks/results/issue29_runs/run45_tc_short_lengths_h200.md (f)).
#pragma once

#include <cstdint>

#include "common/mma_half.h"
#include "rwkv/timex_fft_tc_common.cuh"

namespace rwkv {
namespace fft_tc {

// The A fragments (mma_16816's layout, DftFrags's register order) of the 16 x 16 matrix
// A[m][k] = W_R^((m0 + m) (k0 + k)) sigma_R for m0 + m < R and k0 + k < R, else 0 (W_R =
// exp(-2 pi i / R); outer_dft_scale): cos and sin parts in float16. No -sin part, as DftFrags
// has: the callers negate the B operand it would multiply instead (neg2), which keeps 4
// registers a set free.
template <int R>
struct OuterFrags {
  uint32_t c[4], s[4];
  TIMEX_FFT_DEVICE void init(int lane, int m0, int k0) {
    constexpr float f = outer_dft_scale(R);
    const int g = lane / 4, q = lane % 4;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int m = m0 + g + 8 * (r & 1);
      float cv[2], sv[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int k = k0 + 2 * q + h + 8 * (r >> 1);
        const cf32 w = twiddle<R>(m * k % R);  // cos - i sin
        const bool in = m < R && k < R;
        cv[h] = in ? f * w.x : 0.f;
        sv[h] = in ? -f * w.y : 0.f;
      }
      c[r] = pack2<Plane>(cv[0], cv[1]);
      s[r] = pack2<Plane>(sv[0], sv[1]);
    }
  }
};

// The lane index, opaque to the compiler: fragments built from it are built where the pass
// runs, not hoisted out of the kernels' loops (the backward's pair loop), where they would
// hold 16 more registers across the whole loop and spill (ptxas -v: 116 bytes a thread).
// Their values come from __sincosf (twiddle<24>), not a table in constant memory: the lanes'
// indices differ, and the constant cache serves one address at a time (with such a table the
// op took 10% longer than with the CUDA-core pass this replaced: run 31).
TIMEX_FFT_DEVICE int opaque_lane() {
  int lane = static_cast<int>(threadIdx.x) % 32;
#ifndef TIMEX_EMULATE
  asm volatile("" : "+r"(lane));
#endif
  return lane;
}

// Both float16 elements of v negated (their sign bits flipped; a NaN stays NaN).
TIMEX_FFT_DEVICE uint32_t neg2(uint32_t v) { return v ^ 0x80008000u; }

// S's two elements in v, times scale, as float16 (the forward's inputs into the MMA's type).
template <typename S>
TIMEX_FFT_DEVICE uint32_t rescale2(uint32_t v, float scale) {
  return pack2<Plane>(bits_to_float<S>(static_cast<uint16_t>(v & 0xffffu)) * scale,
                      bits_to_float<S>(static_cast<uint16_t>(v >> 16)) * scale);
}

// This lane's ldmatrix row within a tile (matrix i = lane / 8: re rows 0-7, re 8-15, im 0-7, im
// 8-15): n1 = 8 (i & 1) + lane % 8, or n1 - 8 where n1 >= R (rows R-15 below R = 16, past the
// plane; the callers keep them out of every sum).
template <int R>
TIMEX_FFT_DEVICE int tile_row(int lane) {
  const int n1 = 8 * ((lane / 8) & 1) + lane % 8;
  return n1 < R ? n1 : n1 - 8;
}

// The first forward pass (first_pass_fma's definition, at R1 = 10, 12 or 24) over SETS row pairs'
// planes.
template <typename S, int N, int SETS, int TH>
TIMEX_FFT_DEVICE void first_pass_mma(uint16_t* re_all, uint16_t* im_all,
                                     const float (&scale)[SETS][2]) {
  constexpr int R = radix1(N), L = N / R, kTiles = L / 8;
  static_assert(outer_on_mma(N) && L == 256, "N = 2560, 3072 or 6144");
  constexpr int kRowSteps = (R + 7) / 8;  // output rows k1 = g + 8 j, j < kRowSteps, k1 < R
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, q = lane % 4;
  // k1 = 0-15, and 16-31 at R = 24 (rows from R on zero).
  OuterFrags<R> a0, a1;
  a0.init(opaque_lane(), 0, 0);
  if constexpr (R > 16) a1.init(opaque_lane(), 16, 0);
  const int ld_sw = swz(L * tile_row<R>(lane));
  uint16_t* const plane = (lane / 8 & 2) ? im_all : re_all;
  // The lane's outputs: rows k1 = g + 8j, columns n2 = n0 + 2q + e; their stores, and the
  // twiddles' parts that do not depend on n0: W^(g (2q + e)) and W^(8 (2q + e)).
  int st_sw[kRowSteps];
#pragma unroll
  for (int j = 0; j < kRowSteps; ++j) st_sw[j] = swz(L * (g + 8 * j) + 2 * q);
  cf32 lg[2], l8[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    lg[e] = twiddle<N>(g * (2 * q + e));
    l8[e] = twiddle<N>(8 * (2 * q + e));
  }
  for (int i = warp; i < SETS * kTiles; i += TH / 32) {
    const int set = i / kTiles, n0 = 8 * (i % kTiles);
    const int off = 2 * N * set, sw_n0 = swz(n0);
    uint32_t b[4];
    fused_ops::ldmatrix_x4_trans(b, plane + off + (sw_n0 ^ ld_sw));
    // b[i] holds matrix i's elements (re, re, im, im), whichever plane the lane addressed; at
    // R <= 16 rows 8-15 are zeros (n1 >= R / 2) or not the plane's (tile_row): zero fragments.
    constexpr bool kRows8 = R / 2 > 8;
    const uint32_t bre[2] = {rescale2<S>(b[0], scale[set][0]),
                             kRows8 ? rescale2<S>(b[1], scale[set][0]) : 0u};
    const uint32_t bim[2] = {rescale2<S>(b[2], scale[set][1]),
                             kRows8 ? rescale2<S>(b[3], scale[set][1]) : 0u};
    const uint32_t nbre[2] = {neg2(bre[0]), neg2(bre[1])};
    float y0r[4] = {0.f, 0.f, 0.f, 0.f}, y0i[4] = {0.f, 0.f, 0.f, 0.f};
    float y1r[4] = {0.f, 0.f, 0.f, 0.f}, y1i[4] = {0.f, 0.f, 0.f, 0.f};
    // (xr + i xi)(c - i s) = xr c + xi s + i (xi c - xr s).
    fused_ops::mma_16816<Plane>(y0r, a0.c, bre);
    fused_ops::mma_16816<Plane>(y0r, a0.s, bim);
    fused_ops::mma_16816<Plane>(y0i, a0.s, nbre);
    fused_ops::mma_16816<Plane>(y0i, a0.c, bim);
    if constexpr (R > 16) {  // rows 24-31 as constant zeros: a1's registers for them never live
      const uint32_t c[4] = {a1.c[0], 0u, a1.c[2], 0u}, s[4] = {a1.s[0], 0u, a1.s[2], 0u};
      fused_ops::mma_16816<Plane>(y1r, c, bre);
      fused_ops::mma_16816<Plane>(y1r, s, bim);
      fused_ops::mma_16816<Plane>(y1i, s, nbre);
      fused_ops::mma_16816<Plane>(y1i, c, bim);
    }
    // Twiddles W^((g + 8j) n2): W^(g n2) times W^(8 n2) j times.
    const cf32 rg = twiddle<N>(g * n0), r8 = twiddle<N>(8 * n0);
    __syncwarp();  // the tile's ldmatrix reads (other lanes') before its stores in place
    cf32 t[2], step[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      t[e] = cmul(rg, lg[e]);
      step[e] = cmul(r8, l8[e]);
    }
#pragma unroll
    for (int j = 0; j < kRowSteps; ++j) {
      // Row g + 8j: m-tile j / 2, accumulators 2 (j % 2), + 1.
      const float* yr = j < 2 ? y0r : y1r;
      const float* yi = j < 2 ? y0i : y1i;
      const int c = 2 * (j % 2);
      if (R % 8 == 0 || g + 8 * j < R) {
        const cf32 v0 = cmul(cf32{yr[c], yi[c]}, t[0]);
        const cf32 v1 = cmul(cf32{yr[c + 1], yi[c + 1]}, t[1]);
        const int at = off + (sw_n0 ^ st_sw[j]);
        st32(re_all + at, pack2<Plane>(v0.x, v1.x));
        st32(im_all + at, pack2<Plane>(v0.y, v1.y));
      }
      if (j + 1 < kRowSteps) {
        t[0] = cmul(t[0], step[0]);
        t[1] = cmul(t[1], step[1]);
      }
    }
  }
}

// The last inverse pass (last_pass_fma's definition, at R1 = 10, 12 or 24): y[L k1 + n2] for
// k1 < R / 2 to out(t, re_t, im_t, re_t+1, im_t+1), t = L k1 + n2 (even).
template <int N, int TH, typename Out>
TIMEX_FFT_DEVICE void last_pass_mma(const uint16_t* re, const uint16_t* im, const Out& out) {
  constexpr int R = radix1(N), L = N / R, kTiles = L / 8;
  static_assert(outer_on_mma(N) && L == 256, "N = 2560, 3072 or 6144");
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, q = lane % 4;
  // conj(DFT_R) sigma_R rows k1 < 16: columns n1 = 0-15 (below R = 16 columns R-15 zero, which
  // keep tile_row's stand-in rows out), then at R = 24 16-23 (24-31 zero).
  OuterFrags<R> a0, a1;
  a0.init(opaque_lane(), 0, 0);
  if constexpr (R > 16) a1.init(opaque_lane(), 0, 16);
  const uint16_t* const plane = (lane / 8 & 2) ? im : re;
  // ldmatrix rows: tile_row (re 0-7, re 8-15, im 0-7, im 8-15), then at R = 24 n1 = 16 + lane
  // % 8 (re 16-23 twice, im 16-23 twice).
  const int ld_sw0 = swz(L * tile_row<R>(lane)), ld_sw1 = swz(L * (16 + lane % 8));
  for (int i = warp; i < kTiles; i += TH / 32) {
    const int n0 = 8 * i, sw_n0 = swz(n0);
    uint32_t b0[4];
    fused_ops::ldmatrix_x4_trans(b0, plane + (sw_n0 ^ ld_sw0));
    const uint32_t bre0[2] = {b0[0], b0[1]}, bim0[2] = {b0[2], b0[3]};
    const uint32_t nbim0[2] = {neg2(b0[2]), neg2(b0[3])};
    // (zr + i zi)(c + i s) = zr c - zi s + i (zi c + zr s); at R = 24 the two K steps into
    // their own accumulators (chains of two MMAs, not four), added after.
    float yr[4] = {0.f, 0.f, 0.f, 0.f}, yi[4] = {0.f, 0.f, 0.f, 0.f};
    fused_ops::mma_16816<Plane>(yr, a0.c, bre0);
    fused_ops::mma_16816<Plane>(yi, a0.s, bre0);
    if constexpr (R > 16) {
      uint32_t b1[4];
      fused_ops::ldmatrix_x4_trans(b1, plane + (sw_n0 ^ ld_sw1));
      const uint32_t bre1[2] = {b1[0], 0u}, bim1[2] = {b1[2], 0u}, nbim1[2] = {neg2(b1[2]), 0u};
      float ur[4] = {0.f, 0.f, 0.f, 0.f}, ui[4] = {0.f, 0.f, 0.f, 0.f};
      {  // columns 24-31 as constant zeros (a1's registers for them never live)
        const uint32_t c[4] = {a1.c[0], a1.c[1], 0u, 0u}, s[4] = {a1.s[0], a1.s[1], 0u, 0u};
        fused_ops::mma_16816<Plane>(ur, c, bre1);
        fused_ops::mma_16816<Plane>(ui, s, bre1);
        fused_ops::mma_16816<Plane>(ur, s, nbim1);
        fused_ops::mma_16816<Plane>(ui, c, bim1);
      }
      fused_ops::mma_16816<Plane>(yr, a0.s, nbim0);
      fused_ops::mma_16816<Plane>(yi, a0.c, bim0);
#pragma unroll
      for (int e = 0; e < 4; ++e) yr[e] += ur[e], yi[e] += ui[e];
    } else {
      fused_ops::mma_16816<Plane>(yr, a0.s, nbim0);
      fused_ops::mma_16816<Plane>(yi, a0.c, bim0);
    }
    __syncwarp();  // the tile's ldmatrix reads before `out`'s stores, which may be in place
    if (g < R / 2) out(L * g + n0 + 2 * q, yr[0], yi[0], yr[1], yi[1]);
    if (g + 8 < R / 2) out(L * (g + 8) + n0 + 2 * q, yr[2], yi[2], yr[3], yi[3]);
  }
}

}  // namespace fft_tc
}  // namespace rwkv
