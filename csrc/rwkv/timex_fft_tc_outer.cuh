// RWKV TimeX, the FFT on tensor cores (timex_fft_tc.cuh): the outer pass (radix R1 other than 10,
// 12, 16 and 24, at stride L = N / R1: 2, 4 or 8, 3 at 12288, 5 at 20480, 6 at 24576, 7 at 28672)
// on the CUDA cores, fused with the load (forward) and with the store (inverse). Both sides of it
// are half empty: x is zero from T <= N / 2 on, so only the first ceil(R1 / 2) inputs of each
// column can be nonzero; and only the times t < T <= N / 2 of y are wanted, the first ceil(R1 / 2)
// outputs of each column (times past T dropped by the sink). A pass on tensor cores would spend a
// whole MMA pass (conversions, twiddles, stores) on it; here each output is a sum of ceil(R1 / 2)
// or R1 terms with constant factors (adds alone at R1 <= 4), in float, rounded once. Two columns
// per thread and step; a thread reads and writes only the positions of its columns. Radix 10, 12
// and 24 (N = 2560, 3072, 6144) run on the tensor cores: timex_fft_tc_outer_mma.cuh.
#pragma once

#include <cstdint>

#include "rwkv/timex_fft_tc_common.cuh"

namespace rwkv {
namespace fft_tc {

// x W_8^j, W_8 = exp(-2 pi i / 8): exact for even j (swaps and signs), two adds and two
// multiplies by sqrt(1/2) for odd j. j is a constant once the callers' loops are unrolled.
TIMEX_FFT_DEVICE cf32 times_root8(cf32 x, int j) {
  constexpr float h = 0.707106781186548f;
  switch (j & 7) {
    case 0: return x;
    case 1: return {h * (x.x + x.y), h * (x.y - x.x)};
    case 2: return {x.y, -x.x};
    case 3: return {h * (x.y - x.x), -h * (x.x + x.y)};
    case 4: return {-x.x, -x.y};
    case 5: return {-h * (x.x + x.y), h * (x.x - x.y)};
    case 6: return {-x.y, x.x};
    default: return {h * (x.x - x.y), h * (x.x + x.y)};
  }
}

// x W_6^j, W_6 = exp(-2 pi i / 6) = 1/2 - i sqrt(3)/2: signs and swaps for j = 0, 3, four
// multiplies for the others.
TIMEX_FFT_DEVICE cf32 times_root6(cf32 x, int j) {
  constexpr float r = 0.866025403784439f;  // sqrt(3) / 2
  switch (j % 6) {
    case 0: return x;
    case 1: return {0.5f * x.x + r * x.y, 0.5f * x.y - r * x.x};
    case 2: return {-0.5f * x.x + r * x.y, -0.5f * x.y - r * x.x};
    case 3: return {-x.x, -x.y};
    case 4: return {-0.5f * x.x - r * x.y, -0.5f * x.y + r * x.x};
    default: return {0.5f * x.x - r * x.y, 0.5f * x.y + r * x.x};
  }
}

// x W_R^j for the radices R = 5 and 7, W_R = exp(-2 pi i / R): four multiplies for j != 0
// (cos and sin of 2 pi m / R, m <= R / 2, as float constants; W_R^(R-m) is W_R^m conjugated).
template <int R>
TIMEX_FFT_DEVICE cf32 times_root_table(cf32 x, int j) {
  static_assert(R == 5 || R == 7, "the outer radices with a table of roots");
  constexpr float c5[3] = {1.f, 0.309016994374947f, -0.809016994374947f};
  constexpr float s5[3] = {0.f, 0.951056516295154f, 0.587785252292473f};
  constexpr float c7[4] = {1.f, 0.623489801858734f, -0.222520933956314f, -0.900968867902419f};
  constexpr float s7[4] = {0.f, 0.781831482468030f, 0.974927912181824f, 0.433883739117558f};
  j %= R;
  if (j == 0) return x;
  const int m = j <= R / 2 ? j : R - j;
  const float c = R == 5 ? c5[m] : c7[m];
  const float s = (R == 5 ? s5[m] : s7[m]) * (j <= R / 2 ? 1.f : -1.f);
  return {c * x.x + s * x.y, c * x.y - s * x.x};
}

// 1 / sqrt(R) for the outer radices R = 2 to 8.
TIMEX_FFT_HD constexpr float inv_sqrt_radix(int R) {
  return R == 2   ? 0.707106781186548f
         : R == 3 ? 0.577350269189626f
         : R == 4 ? 0.5f
         : R == 5 ? 0.447213595499958f
         : R == 6 ? 0.408248290463863f
         : R == 7 ? 0.377964473009227f
                  : 0.353553390593274f;
}

// Columns n2 and n2 + 1 (n2 even) of the first M rows (stride L) of the planes, as floats
// (T: the 16-bit type stored there).
template <typename T, int L, int M>
TIMEX_FFT_DEVICE void load_columns(const uint16_t* re, const uint16_t* im, int n2,
                                   cf32 (&x)[M][2]) {
#pragma unroll
  for (int n1 = 0; n1 < M; ++n1) {
    uint32_t vr, vi;
    std::memcpy(&vr, re + swz(L * n1 + n2), 4);
    std::memcpy(&vi, im + swz(L * n1 + n2), 4);
    x[n1][0] = {bits_to_float<T>(static_cast<uint16_t>(vr & 0xffffu)),
                bits_to_float<T>(static_cast<uint16_t>(vi & 0xffffu))};
    x[n1][1] = {bits_to_float<T>(static_cast<uint16_t>(vr >> 16)),
                bits_to_float<T>(static_cast<uint16_t>(vi >> 16))};
  }
}

// x W_R^(+-m) (the conjugate root where CONJ), m >= 0.
template <int R, bool CONJ>
TIMEX_FFT_DEVICE cf32 times_root(cf32 x, int m) {
  if constexpr (R == 3 || R == 6) {  // W_3 = W_6^2
    const int j = m * (6 / R) % 6;
    return times_root6(x, CONJ ? 6 - j : j);
  } else if constexpr (R == 5 || R == 7) {
    const int j = m % R;
    return times_root_table<R>(x, CONJ ? R - j : j);
  } else {
    const int j = m * (8 / R) % 8;
    return times_root8(x, CONJ ? 8 - j : j);
  }
}

// sum_{n1 < M} W_R^(+-n1 k1) x[n1][e] (the conjugate roots where CONJ).
template <int R, int M, bool CONJ>
TIMEX_FFT_DEVICE cf32 column_dft(const cf32 (&x)[M][2], int k1, int e) {
  cf32 a = x[0][e];
#pragma unroll
  for (int n1 = 1; n1 < M; ++n1) {
    const cf32 v = times_root<R, CONJ>(x[n1][e], k1 * n1);
    a = {a.x + v.x, a.y + v.y};
  }
  return a;
}

// The first forward pass from the stored row pair (S's bits, in natural order) to float16,
// in place: Y[k1] = sum_{n1 < ceil(R1/2)} W_R1^(n1 k1) x[L n1 + n2] / sqrt(R1), times the pass's
// twiddle W_N^(k1 n2), at L k1 + n2 (the MMA passes' definition, tc_pass), where x is the
// row pair with its real part times scale[s][0] and its imaginary part times scale[s][1]
// (set s of SETS row pairs' planes, as tc_pass's). The twiddles are powers of W_N^n2, one
// __sincosf per column.
template <typename S, int N, int SETS = 1, int TH = threads(N)>
TIMEX_FFT_DEVICE void first_pass_fma(uint16_t* re_all, uint16_t* im_all,
                                     const float (&scale)[SETS][2]) {
  constexpr int R = radix1(N), L = N / R, H = (R + 1) / 2;  // the rows below N / 2
  static_assert(R >= 2 && R <= 8, "an outer radix of this file");
  for (int i = 2 * static_cast<int>(threadIdx.x); i < SETS * L; i += 2 * TH) {
    const int set = i / L, n2 = i % L;  // L is even: a column pair lies in one set
    uint16_t* const re = re_all + 2 * N * set;
    uint16_t* const im = im_all + 2 * N * set;
    constexpr float f = inv_sqrt_radix(R);
    cf32 x[H][2];
    load_columns<S, L>(re, im, n2, x);
#pragma unroll
    for (int n1 = 0; n1 < H; ++n1) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        x[n1][e] = {x[n1][e].x * scale[set][0], x[n1][e].y * scale[set][1]};
      }
    }
    const cf32 base[2] = {twiddle<N>(n2), twiddle<N>(n2 + 1)};
    cf32 tw[2] = {{f, 0.f}, {f, 0.f}};  // f W_N^(k1 n2), k1 = 0 first
#pragma unroll
    for (int k1 = 0; k1 < R; ++k1) {
      cf32 y[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        y[e] = cmul(column_dft<R, H, false>(x, k1, e), tw[e]);
        tw[e] = cmul(tw[e], base[e]);
      }
      st32(re + swz(L * k1 + n2), pack2<Plane>(y[0].x, y[1].x));
      st32(im + swz(L * k1 + n2), pack2<Plane>(y[0].y, y[1].y));
    }
  }
}

// The last inverse pass from the planes (float16, its inputs already times the conjugated
// twiddles), for k1 < ceil(R1 / 2): y[L k1 + n2] = sum_{n1 < R1} conj(W_R1^(n1 k1)) z[L n1 + n2] /
// sqrt(R1), handed to out(t, re_t, im_t, re_t+1, im_t+1) for t = L k1 + n2 (even).
template <int N, int TH = threads(N), typename Out>
TIMEX_FFT_DEVICE void last_pass_fma(const uint16_t* re, const uint16_t* im, const Out& out) {
  constexpr int R = radix1(N), L = N / R;
  static_assert(R >= 2 && R <= 8, "an outer radix of this file");
  constexpr float f = inv_sqrt_radix(R);
  for (int n2 = 2 * static_cast<int>(threadIdx.x); n2 < L; n2 += 2 * TH) {
    cf32 z[R][2];
    load_columns<Plane, L>(re, im, n2, z);
#pragma unroll
    for (int k1 = 0; k1 < (R + 1) / 2; ++k1) {
      cf32 y[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const cf32 a = column_dft<R, R, true>(z, k1, e);
        y[e] = {a.x * f, a.y * f};
      }
      out(L * k1 + n2, y[0].x, y[0].y, y[1].x, y[1].y);
    }
  }
}

}  // namespace fft_tc
}  // namespace rwkv
