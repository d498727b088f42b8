// RWKV TimeX on tensor cores, W's spectra (the transform: timex_fft_tc.cuh). From N = 16384 on
// (spectrum_pairs), two channels per CTA in one complex transform: a real row's transform is
// Hermitian, so the transform of x = h0 a0 + i h1 a1 (h0, h1 the reversed rows of channels
// 2 j and 2 j + 1, a0, a1 powers of two) holds both: with Y = DFT(x),
//   DFT(h0)[f] = (Y[f] + conj(Y[-f])) / (2 a0),  DFT(h1)[f] = (Y[f] - conj(Y[-f])) / (2 i a1).
// Below, one channel per CTA (its imaginary plane zero). Measured on the H200 (run 33, the
// kernel's time, C = 512 to 1024): at N = 32768, where a CTA of 512 threads fills an SM and
// the grid is waves deep, pairs took 23% less (208 -> 160 us at (2, 1024, 16384)); at N = 16384
// 4% less, at 6144 5% less to 22% more, at 4096 12% more: there the grid is a wave or two of
// CTAs bound by their latency, and pairs halve the CTAs while each does more. (Since run 34
// one channel a CTA sweeps the middle once, 7-12% less time, so N = 16384's 4% was gone too.)
// Since run 39 the pairs sweep it once as well (transform_and_separate), and from N = 16384 to
// 24576 they took 26-33% less than one channel a CTA: 48.8 -> 32.9 us at (1, 512, 10000)
// (N = 20480), 78.9 -> 56.8 at (1, 768, 12000) (24576), 66.8 -> 49.6 at (3, 1024, 8192)
// (16384), bfloat16, H200 (run 39 (e): the two builds in calls 2 and 5).

#pragma once

#include <cmath>
#include <cstdint>

#include "rwkv/timex_fft_tc_forward.cuh"
#include "rwkv/timex_fft_tc_mirror.cuh"

namespace rwkv {
namespace fft_tc {

// Whether the spectrum kernel pairs channels (the top of this file): from N = 16384 (every such
// length's blocks pair: mirror_blocks), where the run 39 measurements were; not at 8192 and
// 12288, where more CTAs share an SM (not measured since run 34's one-sweep change).
TIMEX_FFT_HD constexpr bool spectrum_pairs(int N) { return N >= 16384; }
// Its CTAs an SM that the register cap is set for: where it pairs, two of 256 threads (one of
// 512), 128 registers a thread; at the forward kernels' 80 the pairs' sweep spilled 200-240
// bytes a thread at N = 16384 to 24576 (ptxas -v, sm_90). The same CTAs an SM as shared memory
// allows at 20480 and 24576 (80 and 96 KiB a CTA); at 16384 three before.
TIMEX_FFT_HD constexpr int spectrum_min_blocks(int N) {
  return spectrum_pairs(N) ? 512 / forward_threads(N) : forward_min_blocks(N);
}
// Its CTAs for C channels, and its shared memory: the forward kernels' (planes, two floats a
// warp), then where it pairs block 0's 256 entries (cf32) for its pairing within the block.
TIMEX_FFT_HD constexpr int64_t spectrum_ctas(int N, int64_t C) {
  return spectrum_pairs(N) ? (C + 1) / 2 : C;
}
TIMEX_FFT_HD constexpr int spectrum_smem_bytes(int N) {
  return forward_smem_bytes(N) + (spectrum_pairs(N) ? 2048 : 0);
}

// The shifts sh of the two rows that load_rows left in the planes (S's bits; amax: their
// largest magnitudes) for one complex transform: each row's 2-norm times 2^sh[j] in [64, 128).
// Scaled by their largest magnitudes instead, a sparse row's spectrum (a spike's is flat, its
// norm a hundredth of a dense row's) would sit far below its partner's, and the planes'
// rounding, relative to the larger, would take its accuracy. No element then exceeds 128, nor
// any of the transform 276 (every pass unitary, within kDftScale's 1.075). The norms come
// from the rows scaled to [1, 2) first (no overflow). A zero row keeps shift 0. Returns false
// where the rows must not share a transform: one holds inf or NaN (it would reach the other's
// spectrum), or a nonzero row's norm is too small to reach 64 under float's largest power of
// two (2^126, as scale_shift).
template <typename S, int N, int TH>
TIMEX_FFT_DEVICE bool norm_shifts(const uint16_t* re, const uint16_t* im, const float (&amax)[2],
                                  float* slots, int (&sh)[2]) {
  const int tid = static_cast<int>(threadIdx.x);
  const int base[2] = {scale_shift(amax[0]), scale_shift(amax[1])};
  const float pre[2] = {std::ldexp(1.f, base[0]), std::ldexp(1.f, base[1])};
  float ss[2] = {0.f, 0.f};
  for (int e = 8 * tid; e < N; e += 8 * TH) {  // the chunks that this thread stored
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      uint16_t v[8];
      ld16(v, (p == 0 ? re : im) + swz(e));
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float x = bits_to_float<S>(v[j]) * pre[p];
        ss[p] = std::fma(x, x, ss[p]);
      }
    }
  }
  TIMEX_FFT_SYNC();  // load_rows' readers of the slots are done
  block_sum2<N, TH>(ss, slots);
  bool together = true;
  for (int j = 0; j < 2; ++j) {
    sh[j] = 0;
    if (!std::isfinite(ss[j])) together = false;
    if (!(ss[j] > 0.f) || !std::isfinite(ss[j])) continue;
    int ex;  // norm = f 2^ex, f in [0.5, 1): 2^(7 - ex) takes it into [64, 128)
    std::frexp(std::sqrt(ss[j]), &ex);
    sh[j] = base[j] + 7 - ex;
    if (sh[j] > 126) together = false;
  }
  return together;
}

// The planes hold the transform up to the middle's pass, which takes them to Y / sqrt(N) (the
// unitary transform); through mirror_sweep (timex_fft_tc_mirror.cuh), both spectra times u0
// and u1 to rows w0 and w1 (w1 null: the pair's second channel is missing), middle layout. A
// tile at a time, not a block's two: their 32 entries at once spilled (550 bytes a thread at
// 80 registers).
template <typename S, int N, int TH>
TIMEX_FFT_DEVICE void separate_spectra(const uint16_t* re, const uint16_t* im, ch16* w0row,
                                       ch16* w1row, float u0, float u1, const DftFrags<S>& f16,
                                       cf32* buf) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const MiddleLane<S, N> ml(f16, lane);
  const auto emit = [&](int it, int t, const cf32 (&y)[4], const cf32 (&p)[4]) {
    cf32 a[4], b[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) separate(y[e], p[e], u0, u1, a[e], b[e]);
    store4(w0row, it, lane, t, a);
    if (w1row != nullptr) store4(w1row, it, lane, t, b);
  };
  mirror_sweep<N, TH>(re, im, ml, buf, emit);
}

// A bound on the middle's outputs, from the planes it starts from (the transform before the
// middle's pass): the middle maps each block of 256 positions onto itself by a unitary
// transform times middle_gain(N), so none of a block's outputs exceeds the 2-norm of its
// inputs times that. The largest of this thread's warp's blocks' 2-norms (each warp a block in
// turn, as the middle; the caller's barrier orders it after the planes' writers), times
// middle_gain(N). inf stays inf; NaN is skipped, as the largest components were.
template <int N, int TH>
TIMEX_FFT_DEVICE float middle_bound(const uint16_t* re, const uint16_t* im) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  float m = 0.f;
  for (int it = warp; it < N / 256; it += TH / 32) {
    float ss = 0.f;
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      uint16_t v[8];
      ld16(v, (p == 0 ? re : im) + swz(256 * it + 8 * lane));
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float x = bits_to_float<Plane>(v[j]);
        ss = std::fma(x, x, ss);
      }
    }
    for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    m = std::fmax(m, ss);
  }
  return std::sqrt(m) * middle_gain(N);
}

// The planes' rows (S's bits, load_rows'), scaled by 2^sh[j], through the transform and the
// separation to rows w0 and w1 (w1 null: not stored) and their exponents, in one sweep of the
// middle, the exponents from a bound as the one-channel path's (middle_bound): every output Y
// of the middle is at most 1.01 bound, each separated value (Y[f] +- conj Y[-f]) u_j at most
// 2.02 bound u_j. With u_j = sqrt(N) 2^-sh_j / 2 and 1.01 sqrt(N) bound < 2^eb, wexp_j =
// eb - sh_j - 4 keeps every stored component below 16, as one channel's, both rows stored
// times sqrt(N) 2^(4 - eb) / 2. The bound exceeds Y's largest at most 16 times (a block's
// 2-norm over its 256 entries) and a separated row's largest lies lower still where that row's
// spectrum is flatter than its partner's (a spike's with a dense row: 0.37 in the emulation
// test); float16 keeps each entry's relative precision down to 6e-5, so only entries far below
// the largest lose any. Finding the largest first took a second sweep of the middle: 65.9 ->
// 56.7 us at (3, 512, 16384) bfloat16 (H200, run 39 (b)). A zero row (zero[j]) gets zeros
// exactly, whatever its partner's rounding leaves, and exponent 1.
template <typename S, int N, int TH>
TIMEX_FFT_DEVICE void transform_and_separate(uint16_t* re, uint16_t* im, const int (&sh)[2],
                                             const bool (&zero)[2], ch16* w0, ch16* w1, int* e0,
                                             int* e1, float* slots, cf32* buf) {
  const float scale[1][2] = {{std::ldexp(1.f, sh[0]), std::ldexp(1.f, sh[1])}};
  scale_sets<S, N, 1, TH>(re, im, scale);
  DftFrags<Plane> f16;
  f16.init(static_cast<int>(threadIdx.x) % 32);
  TIMEX_FFT_SYNC();
  forward_transform<N, 1, TH>(re, im, f16);  // ends with a barrier
  const float bound = block_max<N, TH>(middle_bound<N, TH>(re, im), slots);
  const int eb = scale_exponent(1.01f * std::sqrt(float(N)) * bound);
  const float u = 0.5f * std::sqrt(float(N)) * std::ldexp(1.f, 4 - eb);
  separate_spectra<Plane, N, TH>(re, im, w0, w1, zero[0] ? 0.f : u, zero[1] ? 0.f : u, f16,
                                 buf);
  if (threadIdx.x == 0) {
    *e0 = zero[0] ? 1 : eb - sh[0] - 4;
    if (w1 != nullptr) *e1 = zero[1] ? 1 : eb - sh[1] - 4;
  }
}

// W's spectra: wz[c] (N entries of two float16, ch16, the middle's layout) = the unnormalised
// DFT of h[s] = w[c, T-1-s] times 2^-wexp[c], a power of two that takes its components below
// 16 (what the conv kernel's middle needs to keep its products within float16: Plane,
// timex_fft_tc_common.cuh); wexp[c] = kNonFiniteExp where w[c] holds inf or NaN. w: (C, T)
// contiguous of S; spectrum_ctas(N, C) CTAs. One channel a CTA, or where spectrum_pairs
// channels c0 = 2 blockIdx.x and c1 = c0 + 1 (missing where C is odd: zeros, not stored) in one
// transform; where those rows must not share one (norm_shifts), each goes through its own, its
// partner's plane zero.
template <typename S, int N>
TIMEX_FFT_TC_KERNEL(forward_threads(N), spectrum_min_blocks(N))
spectrum_tc_kernel(const uint16_t* __restrict__ w, int C, int T, ch16* __restrict__ wz,
                   int* __restrict__ wexp) {
#if TIMEX_FFT_TC_CODE
  static_assert(valid_length(N), "N: a transform length (valid_length)");
  static_assert(!spectrum_pairs(N) || mirror_blocks(N), "pairs part in the middle");
  constexpr int TH = forward_threads(N);
  launch_dependents();  // the consumer waits for this grid's completion before its reads
  TIMEX_FFT_SHARED(smem);
  uint16_t* re = reinterpret_cast<uint16_t*>(smem);
  uint16_t* im = re + N;
  float* slots = reinterpret_cast<float*>(im + N);
  const int vec = vector_width(T, w);
  if constexpr (!spectrum_pairs(N)) {
    const int c = static_cast<int>(blockIdx.x);
    DftFrags<Plane> f16;
    int sh[2];
    float amax[2];
    load_rows<S, N, TH>(re, im, w + int64_t(c) * T, nullptr, T, vec, /*reversed=*/true, slots,
                        amax);
    scale_and_transform<S, N, TH>(re, im, amax, f16, sh);
    // The planes hold the transform up to the middle, which takes them to DFT(h) 2^sh /
    // sqrt(N) (unitary). A bound on its outputs (middle_bound; 1.01 covers the float16
    // rounding of its DFT matrices and of the data between its two products) sets we, so that
    // one sweep of the middle stores the spectrum times 2^-we: components below 16, the
    // largest above 0.35 (the bound exceeds it at most 16 sqrt(2) 1.01 times), so the conv's
    // products lose no more precision than with the largest in [0.5, 1), which took a second
    // sweep to find (18.3 -> 16.2 us at (2, 512, 2500) bfloat16, H200, run 34). Its exponent
    // eb in the planes' units: no float overflows for any input's range.
    const float bound = block_max<N, TH>(middle_bound<N, TH>(re, im), slots);
    const int eb = scale_exponent(1.01f * std::sqrt(float(N)) * bound), we = eb - sh[0] - 4;
    middle_spectrum<Plane, N, TH>(re, im, wz + int64_t(c) * N,
                                  std::ldexp(std::sqrt(float(N)), 4 - eb), f16);
    if (threadIdx.x == 0) wexp[c] = std::isfinite(amax[0]) ? we : kNonFiniteExp;
  } else {
    cf32* buf = reinterpret_cast<cf32*>(smem + forward_smem_bytes(N));
    const int c0 = 2 * static_cast<int>(blockIdx.x);
    const bool two = c0 + 1 < C;
    const uint16_t* const w0 = w + int64_t(c0) * T;
    const uint16_t* const w1 = two ? w + int64_t(c0 + 1) * T : nullptr;
    float amax[2];
    load_rows<S, N, TH>(re, im, w0, w1, T, vec, /*reversed=*/true, slots, amax);
    int sh[2];
    const bool together = norm_shifts<S, N, TH>(re, im, amax, slots, sh);
    bool zero[2] = {!(amax[0] > 0.f), !(amax[1] > 0.f)};
    // Together: one transform; else one row a transform (a NaN stays in its own spectrum).
    for (int j = 0; j < (together || !two ? 1 : 2); ++j) {
      if (!together) {
        TIMEX_FFT_SYNC();  // the planes' and slots' readers are done
        load_rows<S, N, TH>(re, im, j == 0 ? w0 : w1, nullptr, T, vec, true, slots, amax);
        sh[0] = scale_shift(amax[0]), sh[1] = 0;
        zero[0] = false, zero[1] = true;
      }
      const int c = c0 + j;
      transform_and_separate<S, N, TH>(re, im, sh, zero, wz + int64_t(c) * N,
                                       together && two ? wz + int64_t(c + 1) * N : nullptr,
                                       wexp + c, wexp + c + 1, slots, buf);
      // (Together, both rows are finite: norm_shifts.)
      if (threadIdx.x == 0 && !std::isfinite(amax[0])) wexp[c] = kNonFiniteExp;
    }
  }
#endif
}

}  // namespace fft_tc
}  // namespace rwkv
