// RWKV TimeX, the FFT convolution's transforms on tensor cores (bfloat16 and float16 inputs):
// the passes, and the inverse transform's output. The op's algorithm "fft_tc" (timex_fft_tc.h)
// launches the kernels built from them: W's spectra and the convolution
// (timex_fft_tc_forward.cuh), both gradients (timex_fft_tc_backward.cuh).
// tests/test_rwkv_fft_tc_emulation.py checks them on the CPU.
//
// The convolution, one CTA per channel c and pair of batch rows (b, b + 1): the complex row x =
// k[b, c] + i k[b + 1, c], zero-padded to N >= 2T (a power of two from 2048 to 32768, 2560, 3072,
// 6144, 12288, 20480, 24576 or 28672: transform_length), is convolved circularly with the real
// kernel h[s] = w[c, T-1-s]: since h is real, y = x * h = k[b, c] * h + i k[b + 1, c] * h, and
// out[b, c, t] = Re y[t] + eps, out[b + 1, c, t] = Im y[t] + eps for t < T (no wrap: N >= 2T - 1).
// No split of a real row's spectrum, as the FMA kernels do (timex_fft_math.cuh), except where two
// rows with different kernels share a transform: W's spectra of two channels, and where B is odd
// the last rows of two channels (timex_fft_tc_mirror.cuh).
//
// The transform of length N = r_1 16^(P-1) 16 (r_1 in {2, ..., 8, 10, 12, 16, 24}: valid_length):
// pass j has radix r_j (r_1, then 16) and stride L_j = N / (r_1 16^(j-1)); the innermost radix-16
// DFT over 16 contiguous elements (the "middle", see middle()) follows. Pass j, for
// every block of r_j L_j elements and every column n2 < L_j in it, does
//   Y[k1] = sum_{n1 < r_j} W_{r_j}^(n1 k1) x[L_j n1 + n2] / sqrt(r_j),
// multiplies Y[k1] by the twiddle W_{r_j L_j}^(k1 n2), and stores it at L_j k1 + n2: in
// place. The spectrum ends up in digit-reversed order (storage position s holds frequency
// f(s) = d_1 + r_1 (d_2 + 16 (d_3 + ...)), d_j = (s / L_j) % r_j, the middle's digit
// s % 16), which is all a convolution needs: the middle multiplies by W's spectrum in the same
// order (wz: the unnormalised DFT of h, storage order) and runs the inverse DFT_16; the
// inverse passes P..1 are the forward passes transposed and conjugated (each first
// multiplies by its twiddle conjugated, applied at the previous step's output, then runs
// the conjugated DFT at the same strides), giving y in natural order. Each pass is unitary
// (1/sqrt(r) in the DFT matrix; on the tensor cores kDftScale, near it, whose gain the
// middle's twiddles take back once a transform: timex_fft_tc_common.cuh), so with the
// unnormalised wz the result needs no 1/N.
//
// A radix-16 pass is one warp's mma.sync m16n8k16 per 16 x 8 tile: A = the 16 x 16 DFT matrix,
// B = 16 rows (k = n1) of 8 contiguous columns n2 loaded with ldmatrix .trans from the real and
// imaginary planes, 4 MMAs (C, S, -S: the cosine and sine parts). The last forward pass (stride
// 16), the middle and the first inverse pass run in one sweep of registers per 256 elements
// (MiddleLane, timex_fft_tc_middle.cuh): tc_pass runs only the pass at stride 256, which N >=
// 4096 have. That fusion took 10-13% off the op's forward + backward (bfloat16, H200: run 30 in
// benchmarks/results/issue29_runs). An outer radix r_1 other than 16 is fused with the load and
// the store, where half its inputs are zeros and half its outputs unwanted: on the CUDA cores
// for r_1 <= 8 (timex_fft_tc_outer.cuh), on the tensor cores for 10, 12 and 24
// (timex_fft_tc_outer_mma.cuh).
// Data between passes are stored as float16 for either input type (Plane: the row pair and W's
// spectrum scaled by powers of two, timex_fft_tc_common.cuh) in two planes; accumulation and
// twiddles in float. Shared memory: 4 N bytes (128 KiB at N = 32768), 16-byte chunks swizzled
// (swz) so that the 8 rows of an ldmatrix, L_j elements apart, fall in 8 distinct bank groups
// for any L_j.
//
// Measured on the H100 (benchmarks/results/issue29_runs/run20_tc_probe.md, the conv kernel
// given W's spectrum): 2-31% faster than the FMA conv kernel at the same shapes (N = 2048 to
// 32768), bfloat16 within 1.2x of the FFT convolution's error, float16 1.6-2.3x (within 1.7x
// with TIMEX_TC_DFT_SPLIT, 8-23% slower). The op path: benchmarks/results/
// timex_fft_tc_h100.md.
#pragma once

#include <cstdint>

#include "common/mma_half.h"
#include "rwkv/timex_fft_tc_common.cuh"
#include "rwkv/timex_fft_tc_middle.cuh"
#include "rwkv/timex_fft_tc_outer.cuh"
#include "rwkv/timex_fft_tc_outer_mma.cuh"
#include "rwkv/timex_fft_tc_rows.cuh"

namespace rwkv {
namespace fft_tc {

// Element e's swizzled position is linear over GF(2) in e's bits (swz), so where a position is
// a tile's part plus a lane's part with no bit in common, its swizzle is the XOR of theirs:
// the passes swizzle each part once (the lanes' parts before the tile loop).

// One radix-16 pass at stride L over the planes re, im (in place). FORWARD: the DFT, then
// each output times W^(twiddle_exp<N, 16, L>); else the conjugated DFT, then each output
// times the conjugated twiddle of the pass outside it (ROUT, LOUT = 16 L). The middle runs the
// pass at stride 16, so L = 256 here: 32 tiles of 16 x 8 per block, a multiple of the warps.
//
// Tile (blk, n0) holds positions a = 16 L blk + L row + n0 + 2q + e (rows g + 8h, e < 2). Its
// forward twiddle exponent k1 n2 s (k1 = row, n2 = n0 + 2q + e, s = N / (16 L)) splits into
// the tile's k1 n0 s and the lane's k1 (2q + e) s: the lane keeps W^(k1 (2q + e) s), and a
// warp takes its columns n0 in turn and, for each, every block (and set): one __sincosf per
// row and column n0, the same for all blocks. The inverse twiddle, of pass (ROUT, LOUT) at
// the same positions (k1' = blk % ROUT, n2' = L row + n0 + 2q + e, s' = N / (ROUT LOUT)),
// splits into k1' (n0 + L g + 2q) s' (one __sincosf a tile) and the warp's k1' 8 L s' and
// k1' s' (two more, per block: a warp takes the blocks in turn and, in each, its columns).
// (Stepping the twiddles from tile to tile instead measured 5% slower at N = 16384 for the
// same instruction count.)
//
// SETS: how many row pairs' planes the pass runs over at once, set s's at re + 2 N s and
// im + 2 N s (the backward transforms g's and k's pairs together: one barrier per pass, and
// twice the tiles per warp over which to spread its set-up); forward only. TH: the CTA's
// threads (forward_threads or backward_threads), as in every function of these files that
// takes it.
template <typename S, int N, int L, bool FORWARD, int ROUT, int LOUT, int SETS = 1,
          int TH = threads(N)>
TIMEX_FFT_DEVICE void tc_pass(uint16_t* re, uint16_t* im, const DftFrags<S>& f) {
  constexpr int kTilesPerBlock = L / 8, kWarps = TH / 32, kBlocks = N / (16 * L);
  static_assert(L >= 16 && (FORWARD || LOUT == 16 * L), "a pass at stride L >= 16");
  static_assert(kTilesPerBlock % kWarps == 0, "a warp's tiles: whole columns n0 of every block");
  static_assert(FORWARD || SETS == 1, "the inverse runs one set");
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, q = lane % 4;
  // This lane's ldmatrix row: matrix i = lane / 8 (re rows 0-7, re 8-15, im 0-7, im 8-15).
  const int mi = lane / 8, krow = 8 * (mi & 1) + lane % 8;
  const int ld_sw = swz(L * krow);
  const uint16_t* const plane = (mi & 2) ? im : re;
  int st_sw[2];  // the lane's part of its two stores (rows g, g + 8; cols 2q, 2q + 1)
#pragma unroll
  for (int h = 0; h < 2; ++h) st_sw[h] = swz(L * (g + 8 * h) + 2 * q);
  // The tile at swizzled offset sw (its set's offset added after the swizzle), its outputs
  // times t[h][e].
  const auto tile = [&](int sw, const cf32 (&t)[2][2]) {
    uint32_t b[4];
    fused_ops::ldmatrix_x4_trans(b, plane + (sw ^ ld_sw));
    const uint32_t bre[2] = {b[0], b[1]}, bim[2] = {b[2], b[3]};
    float yre[4] = {0.f, 0.f, 0.f, 0.f}, yim[4] = {0.f, 0.f, 0.f, 0.f};
    dft_product<S, FORWARD>(yre, yim, f, bre, bim);
    __syncwarp();  // the tile's ldmatrix reads (other lanes') before its stores in place
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // rows g and g + 8
      const cf32 v0 = cmul(cf32{yre[2 * h], yim[2 * h]}, t[h][0]);
      const cf32 v1 = cmul(cf32{yre[2 * h + 1], yim[2 * h + 1]}, t[h][1]);
      const int a = sw ^ st_sw[h];
      st32(re + a, pack2<S>(v0.x, v1.x));
      st32(im + a, pack2<S>(v0.y, v1.y));
    }
  };
  if constexpr (FORWARD) {
    constexpr int s = N / (16 * L);
    cf32 tw[2][2];  // W^(k1 (2q + e) s)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int e = 0; e < 2; ++e) tw[h][e] = twiddle<N>((g + 8 * h) * (2 * q + e) * s);
    }
    for (int nj = warp; nj < kTilesPerBlock; nj += kWarps) {
      const int n0 = 8 * nj;
      cf32 t[2][2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const cf32 rowf = twiddle<N>((g + 8 * h) * n0 * s);
        t[h][0] = cmul(rowf, tw[h][0]);
        t[h][1] = cmul(rowf, tw[h][1]);
      }
      const int sw_n0 = swz(n0);
#pragma unroll
      for (int sb = 0; sb < SETS * kBlocks; ++sb) {
        const int set = sb / kBlocks, blk = sb % kBlocks;
        tile((swz(16 * L * blk) ^ sw_n0) + 2 * N * set, t);
      }
    }
  } else {
    constexpr int sp = N / (ROUT * LOUT);
#pragma unroll 1
    for (int blk = 0; blk < kBlocks; ++blk) {
      const int k1 = blk % ROUT;
      const cf32 u = fft::conj(twiddle<N>(k1 * 8 * L * sp)), v = fft::conj(twiddle<N>(k1 * sp));
      const int sw_blk = swz(16 * L * blk);
      for (int nj = warp; nj < kTilesPerBlock; nj += kWarps) {
        const int n0 = 8 * nj;
        cf32 t[2][2];
        t[0][0] = fft::conj(twiddle<N>(k1 * (n0 + L * g + 2 * q) * sp));
        t[0][1] = cmul(t[0][0], v);
        t[1][0] = cmul(t[0][0], u);
        t[1][1] = cmul(t[1][0], v);
        tile(sw_blk ^ swz(n0), t);
      }
    }
  }
}

// The forward radix-16 passes from stride L down to stride 256 (the first at L = N / 16 where
// R1 = 16; after first_pass_fma at L = N / (16 R1) otherwise); the pass at stride 16 is the
// middle's (MiddleLane::load).
template <typename S, int N, int L, int SETS = 1, int TH = threads(N)>
TIMEX_FFT_DEVICE void forward_passes(uint16_t* re, uint16_t* im, const DftFrags<S>& f16) {
  tc_pass<S, N, L, true, 0, 0, SETS, TH>(re, im, f16);
  TIMEX_FFT_SYNC();
  if constexpr (L > 256) forward_passes<S, N, L / 16, SETS, TH>(re, im, f16);
}

// The last inverse pass where R1 = 16 (radix 16 at stride N / 16): no twiddle after it; its
// outputs go to `out` (out(swz(t), re_t, im_t, re_t+1, im_t+1): two consecutive times, t
// even), which may write them back to the planes (each tile's reads precede its writes).
template <typename S, int N, int TH = threads(N), typename Out>
TIMEX_FFT_DEVICE void last_pass(const uint16_t* re, const uint16_t* im, const DftFrags<S>& f,
                                const Out& out) {
  constexpr int L = N / 16, kTilesPerBlock = L / 8, kWarps = TH / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, q = lane % 4;
  const int mi = lane / 8, krow = 8 * (mi & 1) + lane % 8;
  const int ld_sw = swz(L * krow);
  const uint16_t* const plane = (mi & 2) ? im : re;
  const int st_sw[2] = {swz(L * g + 2 * q), swz(L * (g + 8) + 2 * q)};
  for (int tile = warp; tile < N / 128; tile += kWarps) {
    const int sw = swz((tile % kTilesPerBlock) * 8);  // one block
    uint32_t b[4];
    fused_ops::ldmatrix_x4_trans(b, plane + (sw ^ ld_sw));
    const uint32_t bre[2] = {b[0], b[1]}, bim[2] = {b[2], b[3]};
    float yre[4] = {0.f, 0.f, 0.f, 0.f}, yim[4] = {0.f, 0.f, 0.f, 0.f};
    dft_product<S, false>(yre, yim, f, bre, bim);
    __syncwarp();  // the tile's ldmatrix reads before `out`'s stores, which may be in place
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      out(sw ^ st_sw[h], yre[2 * h], yim[2 * h], yre[2 * h + 1], yim[2 * h + 1]);
    }
  }
}

// The inverse radix-16 passes from stride L = 256 outwards (the middle ran the pass at 16), each
// ending with the conjugated twiddles of the pass outside it; where R1 = 16 the last, at N / 16,
// hands its results to `out` (last_pass); otherwise they stop before the outer pass
// (last_pass_fma).
template <typename S, int N, int L, int TH = threads(N), typename Out>
TIMEX_FFT_DEVICE void inverse_passes(uint16_t* re, uint16_t* im, const DftFrags<S>& f16,
                                     const Out& out) {
  constexpr int R1 = radix1(N);
  if constexpr (R1 == 16 && L == N / 16) {
    last_pass<S, N, TH>(re, im, f16, out);
  } else {
    // The pass outside: radix R1 at N / R1, or 16 at 16 L.
    constexpr int ROUT = 16 * L == N / R1 ? R1 : 16;
    tc_pass<S, N, L, false, ROUT, 16 * L, 1, TH>(re, im, f16);
    TIMEX_FFT_SYNC();
    if constexpr (16 * L < N / R1 || R1 == 16) {
      inverse_passes<S, N, 16 * L, TH>(re, im, f16, out);
    }
  }
}

// Whether a radix-16 pass at stride 256 exists (N >= 4096): the forward's first or the
// inverse's outermost with R1 = 16.
TIMEX_FFT_HD constexpr bool has_pass256(int N) {
  return N / radix1(N) > 256 || radix1(N) == 16;
}

// The inverse transform of the planes (after the middle) to `sink` (timex_fft_tc_rows.cuh):
// where the outer radix is not 16 the last pass hands it times t, t + 1 < N / 2 as floats;
// else the last pass stages y, scaled and rounded to S, in the planes in natural order, and
// the sink copies 8 times at a time (16-byte stores where the rows allow).
template <typename S, int N, int TH = threads(N), typename Sink>
TIMEX_FFT_DEVICE void inverse_out(uint16_t* re, uint16_t* im, const DftFrags<Plane>& f16,
                                  const Sink& sink) {
  if constexpr (radix1(N) != 16) {
    const auto emit = [&](int t, float r0, float i0, float r1, float i1) {
      sink.emit(t, r0, i0, r1, i1);
    };
    if constexpr (has_pass256(N)) {  // (emit unused there: the outer pass has it)
      inverse_passes<Plane, N, 256, TH>(re, im, f16, emit);
    }
    if constexpr (outer_on_mma(N)) {
      last_pass_mma<N, TH>(re, im, emit);
    } else {
      last_pass_fma<N, TH>(re, im, emit);
    }
  } else {
    const auto stage = [&](int a, float r0, float i0, float r1, float i1) {
      st32(re + a, pack2<S>(sink.re(r0), sink.re(r1)));
      st32(im + a, pack2<S>(sink.im(i0), sink.im(i1)));
    };
    inverse_passes<Plane, N, 256, TH>(re, im, f16, stage);
    TIMEX_FFT_SYNC();
    for (int e = 8 * static_cast<int>(threadIdx.x); e < sink.T; e += 8 * TH) {
      uint16_t yr[8], yi[8];
      ld16(yr, re + swz(e));
      ld16(yi, im + swz(e));
      sink.copy(e, yr, yi);
    }
  }
}

}  // namespace fft_tc
}  // namespace rwkv
