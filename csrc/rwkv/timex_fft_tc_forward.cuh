// RWKV TimeX on tensor cores, the forward's kernel (the transform: timex_fft_tc.cuh): the
// convolution of a row pair, which with W's spectrum conjugated is the backward's grad_k (a
// correlation) too. W's spectra: timex_fft_tc_spectrum.cuh.
#pragma once

#include <cmath>
#include <cstdint>

#include "rwkv/timex_fft_tc.cuh"
#include "rwkv/timex_fft_tc_mirror.cuh"

namespace rwkv {
namespace fft_tc {

// The length of the transform for rows of T: the shortest valid_length N >= 2 T (the circular
// products of the zero-padded rows are then linear).
TIMEX_FFT_HD constexpr int64_t transform_length(int64_t T) {
  int64_t n = kMinN;
  while (n < 2 * T) n *= 2;
  if (n == 4096 && 2 * T <= n / 8 * 5) return n / 8 * 5;
  if ((n == 4096 || n == 8192 || n == 16384) && 2 * T <= n / 4 * 3) return n / 4 * 3;
  if (n == 32768) {
    for (int64_t m = 20480; m < n; m += 4096) {
      if (2 * T <= m) return m;
    }
  }
  return n;
}

// The forward kernels' threads per CTA: threads(N), but 512 at N = 28672 and 32768, where their 112
// and 128 KiB of planes keep one CTA per SM (8 warps an SM with 256; at 24576, 96 KiB, two of 256
// fit), and 128 at N = 6144 and 8192, where the register cap (85 a thread) allows 24 warps an SM
// whatever the CTA's size and the planes (24 and 32 KiB) let 6 CTAs of 128 take them (presumably
// faster as a warp takes more tiles for each twiddle set-up and a barrier waits for 4 warps).
// Against threads(N) (run 41 (f), H200, bfloat16): at (16, 512, 2500) the conv kernel 171.8 ->
// 149.8 us and the spectrum 16.1 -> 14.9, at (2, 768, 3000) 36.6 -> 33.0 and 23.3 -> 20.2, at (4,
// 512, 4096) 66.0 -> 63.2 and 22.4 -> 20.2. From N = 12288 on the planes allow fewer CTAs of 128
// and it gained nothing (the three kernels -1.4% and +1.7% at 12288; the conv +18% at 16384, +56%
// at 24576). Their register cap: forward_min_blocks (85 a thread; 128 at one CTA of 512). Their
// shared memory: the two planes, 2 N 16-bit elements, then two floats per warp (the block's largest
// magnitude of each row).
TIMEX_FFT_HD constexpr int forward_threads(int N) {
  return N > 24576 ? 512 : N == 6144 || N == 8192 ? 128 : threads(N);
}
TIMEX_FFT_HD constexpr int forward_min_blocks(int N) {
  return N > 24576 ? 1 : min_blocks(forward_threads(N));
}
TIMEX_FFT_HD constexpr int forward_smem_bytes(int N) {
  return 4 * N + 8 * (forward_threads(N) / 32);
}

// The forward passes of the planes' SETS sets down to stride 256 (the middle runs the one at
// 16): the first at stride N / 16 where the outer radix is 16, else after scale_sets' first
// pass at N / R1. None where that pass leaves blocks of 256 (N = 2048, 2560, 3072, 6144).
template <int N, int SETS = 1, int TH = threads(N)>
TIMEX_FFT_DEVICE void forward_transform(uint16_t* re, uint16_t* im, const DftFrags<Plane>& f16) {
  constexpr int R1 = radix1(N);
  if constexpr (has_pass256(N)) {
    forward_passes<Plane, N, (R1 != 16 ? N / R1 : N) / 16, SETS, TH>(re, im, f16);
  }
}

// Rows r0 + i r1 that load_rows left in the planes (largest magnitudes amax), each scaled by
// its own power of two 2^sh[j] into float16's range (scale_shift: a row far smaller than its
// partner keeps its own relative accuracy), then transformed: the planes hold the unitary
// transform of r0 2^sh[0] + i r1 2^sh[1]. f16: initialised here.
template <typename S, int N, int TH = threads(N)>
TIMEX_FFT_DEVICE void scale_and_transform(uint16_t* re, uint16_t* im, const float (&amax)[2],
                                          DftFrags<Plane>& f16, int (&sh)[2]) {
  sh[0] = scale_shift(amax[0]), sh[1] = scale_shift(amax[1]);
  const float scale[1][2] = {{std::ldexp(1.f, sh[0]), std::ldexp(1.f, sh[1])}};
  scale_sets<S, N, 1, TH>(re, im, scale);
  f16.init(static_cast<int>(threadIdx.x) % 32);
  TIMEX_FFT_SYNC();
  forward_transform<N, 1, TH>(re, im, f16);
}

// W's exponent (spectrum_tc_kernel's wexp) for a channel whose w row holds inf or NaN: 2^it is
// inf, so every output that its spectrum scales is inf or NaN (the FFT's whole-row contract),
// and the conv kernel keeps that spectrum out of a transform that a row of another channel
// shares (middle_two_channels' u = 0).
constexpr int kNonFiniteExp = 1 << 16;

// Whether the conv kernel pairs the last batch rows of channels 2 j and 2 j + 1 (B odd) in
// one transform (middle_two_channels): where the blocks pair so (mirror_blocks). Elsewhere,
// and for the last channel of an odd C, that row has a transform to itself, half of it empty.
// Only the kernel built for it (ODD_B) has that path: with it, the kernel for even B took 2%
// more time at N = 8192 and 32768 (ptxas: more spills; H200, bfloat16). Its CTAs: a
// (channel, pair of rows) each; where it pairs channels, B per channel pair j (the last of an
// odd C too: its second channel's B / 2 CTAs return at once).
TIMEX_FFT_HD constexpr bool conv_pairs_channels(int N, int64_t B) {
  return mirror_blocks(N) && B % 2 == 1;
}
TIMEX_FFT_HD constexpr int64_t conv_ctas(int N, int64_t B, int64_t C) {
  return conv_pairs_channels(N, B) ? (C + 1) / 2 * B : (B + 1) / 2 * C;
}

// The convolution of a pair of rows (conv_ctas), N >= 2T: rows b0, b0 + 1 of channel c, or
// where it pairs channels row B - 1 of channels c and c1 = c + 1. k, out: (B, C, T)
// contiguous of S; wz, wexp: spectrum_tc_kernel's (timex_fft_tc_spectrum.cuh; given W's
// spectrum conjugated and g, eps 0, it computes TimeX's grad_k, the correlation of g with h:
// the emulation test checks it so).
template <typename S, int N, bool ODD_B = false>
TIMEX_FFT_TC_KERNEL(forward_threads(N), forward_min_blocks(N))
conv_tc_kernel(const uint16_t* __restrict__ k, const ch16* wz, const int* wexp,
               uint16_t* __restrict__ out, int B, int C, int T, float eps) {
#if TIMEX_FFT_TC_CODE
  static_assert(valid_length(N), "N: a transform length (valid_length)");
  static_assert(!ODD_B || mirror_blocks(N), "two channels' rows: conv_pairs_channels");
  constexpr int TH = forward_threads(N);
  TIMEX_FFT_SHARED(smem);
  uint16_t* re = reinterpret_cast<uint16_t*>(smem);
  uint16_t* im = re + N;
  float* slots = reinterpret_cast<float*>(im + N);
  // Channel-major: a channel's pairs run together, so that its spectrum (4 N bytes, 32 MiB
  // over 1024 channels at N = 8192: most of L2) is read from memory once; where channels
  // pair, the pair's two channels' pairs, then the pair of their last rows.
  const int id = static_cast<int>(blockIdx.x);
  int c, c1, b0;  // the second row's channel c1 (c but in a pair of channels)
  bool two;
  if (ODD_B) {  // B odd (with_conv_kernel)
    const int half = B / 2, j = id / B, r = id % B;
    if (r == B - 1) {
      c = 2 * j, b0 = B - 1, two = c + 1 < C;
      c1 = two ? c + 1 : c;  // an odd C's last channel: its row alone
    } else {
      const int second = r >= half ? 1 : 0;
      c = 2 * j + second, c1 = c, b0 = 2 * (r - second * half), two = true;
      if (c >= C) return;  // the second channel of an odd C's last pair (the whole CTA)
    }
  } else {
    const int pairs = (B + 1) / 2;
    c = id / pairs, c1 = c, b0 = 2 * (id % pairs), two = b0 + 1 < B;
  }
  const int b1 = c1 != c ? b0 : b0 + 1;
  const uint16_t* k0 = k + (int64_t(b0) * C + c) * T;
  const uint16_t* k1 = two ? k + (int64_t(b1) * C + c1) * T : nullptr;
  const int vec = vector_width(T, k);
  uint16_t* o0 = out + (int64_t(b0) * C + c) * T;
  uint16_t* o1 = two ? out + (int64_t(b1) * C + c1) * T : o0;  // written only where two
  DftFrags<Plane> f16;
  int sh[2];
  float amax[2];
  load_rows<S, N, TH>(re, im, k0, k1, T, vec, false, slots, amax);
  // Exactly one row holding inf or NaN (the same in every thread): a shared transform would
  // spread it to the other row. The finite row goes alone (reloaded), the other's output is all
  // NaN (nan_row: the FFT's whole-row contract, tests/test_properties_paths.py).
  uint16_t* nan_row = nullptr;
  if (two && std::isfinite(amax[0]) != std::isfinite(amax[1])) {
    const bool first_ok = std::isfinite(amax[0]);
    nan_row = first_ok ? o1 : o0;
    o0 = first_ok ? o0 : o1;
    c = first_ok ? c : c1;
    c1 = c;
    two = false;
    TIMEX_FFT_SYNC();  // load_rows' readers of the slots are done
    load_rows<S, N, TH>(re, im, first_ok ? k0 : k1, nullptr, T, vec, false, slots, amax);
  }
  scale_and_transform<S, N, TH>(re, im, amax, f16, sh);
  wait_for_spectra(wz, wexp);  // W's from here on
  if constexpr (ODD_B) {
    if (c1 != c) {  // a row of zeros, or of a channel with a non-finite w, adds nothing
      const bool use0 = amax[0] > 0.f && wexp[c] != kNonFiniteExp;
      const bool use1 = amax[1] > 0.f && wexp[c1] != kNonFiniteExp;
      middle_two_channels<Plane, N, TH>(re, im, wz + int64_t(c) * N, wz + int64_t(c1) * N,
                                        use0 ? 0.5f : 0.f, use1 ? 0.5f : 0.f, f16);
    } else {
      middle<Plane, N, TH>(re, im, wz + int64_t(c) * N, f16);
    }
  } else {
    middle<Plane, N, TH>(re, im, wz + int64_t(c) * N, f16);
  }
  TIMEX_FFT_SYNC();
  inverse_out<S, N, TH>(re, im, f16,
                        PairSink<S>(o0, o1, two, T, std::ldexp(1.f, wexp[c] - sh[0]),
                                    std::ldexp(1.f, wexp[c1] - sh[1]), eps, out));
  if (nan_row != nullptr) fill_nan<S, TH>(nan_row, T);
#endif
}

// fn(kernel) with the conv kernel for B (conv_pairs_channels: the ODD_B build where B is odd).
template <typename S, int N, typename Fn>
void with_conv_kernel(int64_t B, Fn&& fn) {
  if constexpr (mirror_blocks(N)) {
    if (conv_pairs_channels(N, B)) return fn(conv_tc_kernel<S, N, true>);
  }
  fn(conv_tc_kernel<S, N, false>);
}

}  // namespace fft_tc
}  // namespace rwkv
