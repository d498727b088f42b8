// RWKV TimeX, the tensor-core FFT probe (timex_fft_tc.cuh): the middle, the innermost
// DFT_16 of every block of 16 contiguous elements, the product with W's spectrum and the
// inverse DFT_16, as MMAs whose accumulators feed the next product in registers.
#pragma once

#include <cstdint>

#include "rwkv/timex_fft_tc_common.cuh"

namespace rwkv {
namespace fft_tc {

// The B fragments (mma_16816's col layout: b = B[2q..][g], B[2q+8..][g]) of DFT_16 / 4,
// B[k][n] = W_16^(k n), as two 16 x 8 tiles (n < 8, n >= 8): cos, sin and -sin parts, each as
// hi and lo (split2, kDftSplit).
template <typename S>
struct MiddleFrags {
  uint32_t c[2][2], s[2][2], ns[2][2], cl[2][2], sl[2][2], nsl[2][2];
  TIMEX_FFT_DEVICE void init(int lane) {
    const int g = lane / 4, q = lane % 4;
    for (int t = 0; t < 2; ++t) {
      for (int r = 0; r < 2; ++r) {
        float cv[2], sv[2];
        for (int h = 0; h < 2; ++h) {
          const int j = (2 * q + h + 8 * r) * (g + 8 * t);
          cv[h] = 0.25f * cos16(j);
          sv[h] = 0.25f * cos16(j + 12);
        }
        split2<S>(cv[0], cv[1], c[t][r], cl[t][r]);
        split2<S>(sv[0], sv[1], s[t][r], sl[t][r]);
        split2<S>(-sv[0], -sv[1], ns[t][r], nsl[t][r]);
      }
    }
  }
};

// The complex product of the data (ar + i ai, the A operand) with n-tile t of DFT_16 / 4
// (FORWARD) or of its conjugate, as four MMAs (eight with kDftSplit): re += ar C + ai X,
// im += ar Y + ai C; DFT_16 = C - i S: X = S, Y = -S; its conjugate: X = -S, Y = S.
template <typename S, bool FORWARD>
TIMEX_FFT_DEVICE void complex_product(float (&re)[4], float (&im)[4], const uint32_t (&ar)[4],
                                      const uint32_t (&ai)[4], const MiddleFrags<S>& f, int t) {
  fused_ops::mma_16816<S>(re, ar, f.c[t]);
  fused_ops::mma_16816<S>(re, ai, FORWARD ? f.s[t] : f.ns[t]);
  fused_ops::mma_16816<S>(im, ar, FORWARD ? f.ns[t] : f.s[t]);
  fused_ops::mma_16816<S>(im, ai, f.c[t]);
  if constexpr (kDftSplit) {
    fused_ops::mma_16816<S>(re, ar, f.cl[t]);
    fused_ops::mma_16816<S>(re, ai, FORWARD ? f.sl[t] : f.nsl[t]);
    fused_ops::mma_16816<S>(im, ar, FORWARD ? f.nsl[t] : f.sl[t]);
    fused_ops::mma_16816<S>(im, ai, f.cl[t]);
  }
}

// The middle's layout of W's spectrum: entry i = ((it 32 + lane) 2 + t) 4 + e (warp step it,
// lane = 4 g + q, n-tile t, accumulator e) holds storage position 16 (16 it + g + 8 (e / 2)) +
// 8 t + 2 q + e % 2: each lane reads its 8 values as 64 contiguous bytes.
TIMEX_FFT_HD constexpr int middle_position(int i) {
  const int e = i % 4, t = (i / 4) % 2, lane = (i / 8) % 32, it = i / 256;
  return 16 * (16 * it + lane / 4 + 8 * (e / 2)) + 8 * t + 2 * (lane % 4) + e % 2;
}

// The middle on tensor cores, 16 blocks of 16 contiguous elements per warp step: X (16 blocks x
// 16 elements, bfloat16/float16 from the planes through ldmatrix as the A operand) times
// DFT_16 / 4 (the B operand) gives Y in the accumulators; Y times W's spectrum (float), rounded
// to S, is the A operand of the product with conj(DFT_16) / 4 as it stands (the accumulator
// layout of two n-tiles is the A fragment's); those times the innermost pass's twiddles
// conjugated, rounded, go back to the planes.
template <typename S, int N>
TIMEX_FFT_DEVICE void middle(uint16_t* re, uint16_t* im, const cf32* __restrict__ wrow) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, q = lane % 4;
  MiddleFrags<S> f;
  f.init(lane);
  // This lane's ldmatrix row: block lane % 8 + 8 ((lane / 8) % 2), elements 8 (lane / 16) on.
  const int ld_sw = swz(16 * (lane % 8 + 8 * ((lane / 8) & 1)) + 8 * (lane / 16));
  // The lane's stores: position 256 it + a(t, h), a = 16 (g + 8h) + 8t + 2q, and their
  // inverse twiddles, the conjugates of pass (16, 16)'s: k1 = g + 8h, n2 = 8t + 2q + e, the
  // same at every step it.
  int st_sw[2][2];
  cf32 tw[2][2][2];
#pragma unroll
  for (int t = 0; t < 2; ++t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int a = 16 * (g + 8 * h) + 8 * t + 2 * q;
      st_sw[t][h] = swz(a);
      tw[t][h][0] = fft::conj(twiddle<N>(twiddle_exp<N, 16, 16>(a)));
      tw[t][h][1] = fft::conj(twiddle<N>(twiddle_exp<N, 16, 16>(a + 1)));
    }
  }
  for (int it = warp; it < N / 256; it += warps(N)) {
    const int sw = swz(256 * it);
    uint32_t xr[4], xi[4];
    fused_ops::ldmatrix_x4(xr, re + (sw ^ ld_sw));
    fused_ops::ldmatrix_x4(xi, im + (sw ^ ld_sw));
    cf32x2 wv[4];  // this lane's 8 entries of W's spectrum (middle_position)
#pragma unroll
    for (int j = 0; j < 4; ++j) wv[j] = ldg_pair(wrow + 256 * it + 8 * lane + 2 * j);
    uint32_t pr[4], pi[4];
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      float yr[4] = {0.f, 0.f, 0.f, 0.f}, yi[4] = {0.f, 0.f, 0.f, 0.f};
      complex_product<S, true>(yr, yi, xr, xi, f, t);  // times DFT_16
      cf32 p[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const cf32 w = e % 2 == 0 ? wv[2 * t + e / 2].a : wv[2 * t + e / 2].b;
        p[e] = cmul(cf32{yr[e], yi[e]}, w);
      }
      // Accumulators (rows g, g + 8; cols 2q, 2q + 1) of n-tile t are A's k = 8 t + 2q.. .
      pr[2 * t] = pack2<S>(p[0].x, p[1].x);
      pr[2 * t + 1] = pack2<S>(p[2].x, p[3].x);
      pi[2 * t] = pack2<S>(p[0].y, p[1].y);
      pi[2 * t + 1] = pack2<S>(p[2].y, p[3].y);
    }
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      float zr[4] = {0.f, 0.f, 0.f, 0.f}, zi[4] = {0.f, 0.f, 0.f, 0.f};
      complex_product<S, false>(zr, zi, pr, pi, f, t);  // times conj(DFT_16)
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // rows g and g + 8: blocks 16 it + g (+ 8)
        const cf32 v0 = cmul(tw[t][h][0], cf32{zr[2 * h], zi[2 * h]});
        const cf32 v1 = cmul(tw[t][h][1], cf32{zr[2 * h + 1], zi[2 * h + 1]});
        const int a = sw ^ st_sw[t][h];
        st32(re + a, pack2<S>(v0.x, v1.x));
        st32(im + a, pack2<S>(v0.y, v1.y));
      }
    }
  }
}

}  // namespace fft_tc
}  // namespace rwkv
