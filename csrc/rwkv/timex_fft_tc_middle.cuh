// RWKV TimeX, the FFT on tensor cores (timex_fft_tc.cuh): the middle, the innermost
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

// A lane's part of the middle: the DFT_16 fragments, its ldmatrix row, its stores and their
// twiddles, and the two halves of a step: dft (X times DFT_16 / 4) and inverse_store (the
// product P times conj(DFT_16) / 4, times the innermost pass's twiddles conjugated, back to
// the planes). Step `it` covers 16 blocks of 16 contiguous elements; the lane's 8 values of it
// are entries 256 it + 8 lane + 4 t + e of a spectrum in the middle's layout (middle_position:
// n-tile t, accumulator e).
template <typename S, int N>
struct MiddleLane {
  MiddleFrags<S> f;
  // This lane's ldmatrix row: block lane % 8 + 8 ((lane / 8) % 2), elements 8 (lane / 16) on.
  int ld_sw;
  // The lane's stores: position 256 it + a(t, h), a = 16 (g + 8h) + 8t + 2q, and their inverse
  // twiddles, the conjugates of pass (16, 16)'s: k1 = g + 8h, n2 = 8t + 2q + e, the same at
  // every step it.
  int st_sw[2][2];
  cf32 tw[2][2][2];

  TIMEX_FFT_DEVICE void init(int lane) {
    const int g = lane / 4, q = lane % 4;
    f.init(lane);
    ld_sw = swz(16 * (lane % 8 + 8 * ((lane / 8) & 1)) + 8 * (lane / 16));
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
  }

  // Step it's X, the A operand, from the planes.
  TIMEX_FFT_DEVICE void load(const uint16_t* re, const uint16_t* im, int it, uint32_t (&xr)[4],
                             uint32_t (&xi)[4]) const {
    const int sw = swz(256 * it);
    fused_ops::ldmatrix_x4(xr, re + (sw ^ ld_sw));
    fused_ops::ldmatrix_x4(xi, im + (sw ^ ld_sw));
  }

  // The same fragments from a copy of the planes in global memory (swizzled as on chip): the
  // lane's register j holds block 16 it + g + 8 (j % 2), elements 8 (j / 2) + 2q and 2q + 1.
  TIMEX_FFT_DEVICE void load_global(const uint16_t* re, const uint16_t* im, int it,
                                    uint32_t (&xr)[4], uint32_t (&xi)[4]) const {
    const int lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, q = lane % 4;
    const int sw = swz(256 * it);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int a = (sw ^ swz(16 * (g + 8 * (j & 1)) + 8 * (j >> 1))) + 2 * q;
      xr[j] = ld32(re + a);
      xi[j] = ld32(im + a);
    }
  }

  // n-tile t of X DFT_16 / 4: y[e] is entry 4 t + e of the lane's 8.
  TIMEX_FFT_DEVICE void dft(const uint32_t (&xr)[4], const uint32_t (&xi)[4], int t,
                            cf32 (&y)[4]) const {
    float yr[4] = {0.f, 0.f, 0.f, 0.f}, yi[4] = {0.f, 0.f, 0.f, 0.f};
    complex_product<S, true>(yr, yi, xr, xi, f, t);
#pragma unroll
    for (int e = 0; e < 4; ++e) y[e] = {yr[e], yi[e]};
  }

  // P (the lane's 8 entries, rounded to S) times conj(DFT_16) / 4 and the twiddles, to the
  // planes at step it. The accumulators (rows g, g + 8; cols 2q, 2q + 1) of n-tile t are the
  // A operand's k = 8 t + 2q.. as they stand.
  TIMEX_FFT_DEVICE void inverse_store(uint16_t* re, uint16_t* im, int it,
                                      const cf32 (&p)[2][4]) const {
    uint32_t pr[4], pi[4];
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      pr[2 * t] = pack2<S>(p[t][0].x, p[t][1].x);
      pr[2 * t + 1] = pack2<S>(p[t][2].x, p[t][3].x);
      pi[2 * t] = pack2<S>(p[t][0].y, p[t][1].y);
      pi[2 * t + 1] = pack2<S>(p[t][2].y, p[t][3].y);
    }
    const int sw = swz(256 * it);
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
};

// The lane's 4 entries 4 t .. 4 t + 3 of spectrum row `row` at step it (middle layout), 32
// contiguous bytes; and stores of the same (row written by this lane only).
TIMEX_FFT_DEVICE void load4(const cf32* row, int it, int lane, int t, cf32 (&v)[4]) {
  const cf32x2 a = ldg_pair(row + 256 * it + 8 * lane + 4 * t);
  const cf32x2 b = ldg_pair(row + 256 * it + 8 * lane + 4 * t + 2);
  v[0] = a.a, v[1] = a.b, v[2] = b.a, v[3] = b.b;
}
// The same for scratch that this kernel writes (not the read-only path).
TIMEX_FFT_DEVICE void load4_rw(const cf32* row, int it, int lane, int t, cf32 (&v)[4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) v[e] = row[256 * it + 8 * lane + 4 * t + e];
}
TIMEX_FFT_DEVICE void store4(cf32* row, int it, int lane, int t, const cf32 (&v)[4]) {
#ifdef TIMEX_EMULATE
  for (int e = 0; e < 4; ++e) row[256 * it + 8 * lane + 4 * t + e] = v[e];
#else
  float4* p = reinterpret_cast<float4*>(row + 256 * it + 8 * lane + 4 * t);
  p[0] = make_float4(v[0].x, v[0].y, v[1].x, v[1].y);
  p[1] = make_float4(v[2].x, v[2].y, v[3].x, v[3].y);
#endif
}

// The larger of |re| and |im| (within sqrt 2 of |v|; a squared norm would overflow float first).
TIMEX_FFT_DEVICE float norm_inf(cf32 v) { return std::fmax(std::fabs(v.x), std::fabs(v.y)); }

// The middle of the convolution: X DFT_16, times W's spectrum wrow, times conj(DFT_16), on
// tensor cores; the products stay in registers.
template <typename S, int N, int TH = threads(N)>
TIMEX_FFT_DEVICE void middle(uint16_t* re, uint16_t* im, const cf32* __restrict__ wrow) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  MiddleLane<S, N> m;
  m.init(lane);
  for (int it = warp; it < N / 256; it += TH / 32) {
    uint32_t xr[4], xi[4];
    m.load(re, im, it, xr, xi);
    cf32 p[2][4];
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      cf32 y[4], w[4];
      m.dft(xr, xi, t, y);
      load4(wrow, it, lane, t, w);
#pragma unroll
      for (int e = 0; e < 4; ++e) p[t][e] = cmul(y[e], w[e]);
    }
    m.inverse_store(re, im, it, p);
  }
}

// The spectrum alone (the W-spectrum kernel): X DFT_16 times `scale`; to `row` (N complex
// floats, middle layout) where STORE. Returns the largest |component| of this lane's entries
// (the kernel runs it twice: for the largest, then to store with the scale that it implies,
// rather than rescaling its stores in place).
template <typename S, int N, bool STORE, int TH = threads(N)>
TIMEX_FFT_DEVICE float middle_spectrum(const uint16_t* re, const uint16_t* im, cf32* row,
                                       float scale) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  MiddleLane<S, N> m;
  m.init(lane);
  float amax = 0.f;
  for (int it = warp; it < N / 256; it += TH / 32) {
    uint32_t xr[4], xi[4];
    m.load(re, im, it, xr, xi);
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      cf32 y[4];
      m.dft(xr, xi, t, y);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        y[e] = {y[e].x * scale, y[e].y * scale};
        amax = std::fmax(amax, norm_inf(y[e]));
      }
      if constexpr (STORE) store4(row, it, lane, t, y);
    }
  }
  return amax;
}

// The backward's middle: Z (g's pair) in planes zre, zim and X (k's pair) in planes xre, xim
// of the same layout in shared memory; Z from a copy in global memory where Z_GLOBAL. acc (N
// complex floats, middle layout, this lane's entries its own) gets Z conj(X) pscale (set where
// `first`, else added); Z conj(W) goes on through conj(DFT_16) to the planes re, im (Z's or
// X's: each warp's stores follow its loads of the same positions), grad_k's correlation.
// Returns the largest |component| of the acc entries that this lane wrote.
template <typename S, int N, int TH = threads(N), bool Z_GLOBAL = false>
TIMEX_FFT_DEVICE float middle_backward(uint16_t* re, uint16_t* im, const uint16_t* zre,
                                       const uint16_t* zim, const uint16_t* xre,
                                       const uint16_t* xim, const cf32* __restrict__ wrow,
                                       cf32* acc, bool first, float pscale) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  MiddleLane<S, N> m;
  m.init(lane);
  float amax = 0.f;
  for (int it = warp; it < N / 256; it += TH / 32) {
    uint32_t zr[4], zi[4], xr[4], xi[4];
    if constexpr (Z_GLOBAL) {
      m.load_global(zre, zim, it, zr, zi);
    } else {
      m.load(zre, zim, it, zr, zi);
    }
    m.load(xre, xim, it, xr, xi);
    cf32 p[2][4];
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      cf32 z[4], x[4], w[4], a[4];
      m.dft(zr, zi, t, z);
      m.dft(xr, xi, t, x);
      load4(wrow, it, lane, t, w);
      if (!first) load4_rw(acc, it, lane, t, a);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const cf32 v = cmul(z[e], fft::conj(x[e]));
        const cf32 s{v.x * pscale, v.y * pscale};
        a[e] = first ? s : cf32{a[e].x + s.x, a[e].y + s.y};
        amax = std::fmax(amax, norm_inf(a[e]));
        p[t][e] = cmul(z[e], fft::conj(w[e]));
      }
      store4(acc, it, lane, t, a);
    }
    m.inverse_store(re, im, it, p);
  }
  return amax;
}

// The inverse DFT_16 of a spectrum in float (grad_w's sum, acc: middle layout, this lane's
// entries written by this lane or before a barrier), times `scale`, to the planes.
template <typename S, int N, int TH = threads(N)>
TIMEX_FFT_DEVICE void middle_from_spectrum(uint16_t* re, uint16_t* im, const cf32* acc,
                                           float scale) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  MiddleLane<S, N> m;
  m.init(lane);
  for (int it = warp; it < N / 256; it += TH / 32) {
    cf32 p[2][4];
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      load4_rw(acc, it, lane, t, p[t]);
#pragma unroll
      for (int e = 0; e < 4; ++e) p[t][e] = {p[t][e].x * scale, p[t][e].y * scale};
    }
    m.inverse_store(re, im, it, p);
  }
}

}  // namespace fft_tc
}  // namespace rwkv
