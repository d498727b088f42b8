// RWKV TimeX, the FFT on tensor cores (timex_fft_tc.cuh): the middle, the innermost radix-16
// pass (stride 16) and the innermost DFT_16 of every block of 16 contiguous elements, the
// product with W's spectrum, and the inverse DFT_16 and inverse pass at stride 16, as MMAs
// whose accumulators feed the next product in registers: a warp takes 256 contiguous elements
// from the planes and writes them back once, where separate passes took three round trips
// through shared memory and two barriers.
#pragma once

#include <cstdint>
#include <cstring>

#include "rwkv/timex_fft_tc_common.cuh"

namespace rwkv {
namespace fft_tc {

// The complex product of a sigma DFT_16 tile (kDftScale) with the data (bre + i bim, the B
// operand): re += C bre + X bim, im += Y bre + C bim, with X = S, Y = -S for sigma DFT_16 =
// C - i S and X = -S, Y = S for its conjugate.
template <typename S, bool FORWARD>
TIMEX_FFT_DEVICE void dft_product(float (&re)[4], float (&im)[4], const DftFrags<S>& f,
                                  const uint32_t (&bre)[2], const uint32_t (&bim)[2]) {
  fused_ops::mma_16816<S>(re, f.c, bre);
  fused_ops::mma_16816<S>(re, FORWARD ? f.s : f.ns, bim);
  fused_ops::mma_16816<S>(im, FORWARD ? f.ns : f.s, bre);
  fused_ops::mma_16816<S>(im, f.c, bim);
}

// n-tile t (columns 8 t ..) of sigma DFT_16 as the B operand (b = B[2q..][g], B[2q+8..][g]),
// from its A fragments: the matrix is symmetric, so B[k][8 t + g] = A[8 t + g][k], fragments
// t and t + 2.
TIMEX_FFT_DEVICE void b_tile(const uint32_t (&a)[4], int t, uint32_t (&b)[2]) {
  b[0] = a[t];
  b[1] = a[t + 2];
}

// The complex product of the data (ar + i ai, the A operand) with n-tile t of sigma DFT_16
// (FORWARD) or of its conjugate, as four MMAs: re += ar C + ai X, im += ar Y + ai C, X and Y
// as in dft_product.
template <typename S, bool FORWARD>
TIMEX_FFT_DEVICE void complex_product(float (&re)[4], float (&im)[4], const uint32_t (&ar)[4],
                                      const uint32_t (&ai)[4], const DftFrags<S>& f, int t) {
  uint32_t c[2], x[2], y[2];
  b_tile(f.c, t, c);
  b_tile(FORWARD ? f.s : f.ns, t, x);
  b_tile(FORWARD ? f.ns : f.s, t, y);
  fused_ops::mma_16816<S>(re, ar, c);
  fused_ops::mma_16816<S>(re, ai, x);
  fused_ops::mma_16816<S>(im, ar, y);
  fused_ops::mma_16816<S>(im, ai, c);
}

// The middle's layout of W's spectrum: entry i = 256 it + 128 t + 64 h + 2 lane + r (warp step
// it, lane = 4 g + q, n-tile t, accumulator e = 2 h + r; middle_index) holds storage position
// 16 (16 it + g + 8 h) + 8 t + 2 q + r: a warp's 16-byte loads of one (t, h), a pair of entries
// a lane, read 512 contiguous bytes (in shared memory, the backward's acc: a quarter warp's
// 128 contiguous bytes, no bank conflicts). With a lane's 8 entries contiguous instead, each
// load used half of every 32-byte sector it touched: ncu counted 52% excess sectors in
// conv_tc_kernel (run 32 (g)).
TIMEX_FFT_HD constexpr int middle_index(int it, int lane, int t, int h) {
  return 256 * it + 128 * t + 64 * h + 2 * lane;
}
TIMEX_FFT_HD constexpr int middle_position(int i) {
  const int r = i % 2, lane = (i / 2) % 32, h = (i / 64) % 2, t = (i / 128) % 2, it = i / 256;
  return 16 * (16 * it + lane / 4 + 8 * h) + 8 * t + 2 * (lane % 4) + r;
}

// A lane's part of the middle. Step `it` covers the 256 elements from 256 it, a 16 x 16 matrix
// M[n1][n2] (position 256 it + 16 n1 + n2; the planes as the pass at stride 256, or the outer
// pass, left them). load: the pass at stride 16, Y = sigma DFT_16 M (A = DFT_16, B = M through
// ldmatrix .trans, as tc_pass; sigma = kDftScale), times its twiddles W_256^(k1 n2) and
// dft_gain_inverse(N), which takes the gain of the transform's passes (4 sigma each) back;
// Y's accumulators, rounded to S, are the A operand of sigma Y DFT_16 (dft: the DFT over n2 of
// each row k1). The lane's 8 values of that are entries 256 it + 8 lane + 4 t + e of a
// spectrum in the middle's layout (middle_position: n-tile t, accumulator e). inverse_store:
// from a product P in that layout, G = sigma P conj(DFT_16) as G^T = sigma conj(DFT_16) P^T
// (P's accumulators are the B fragments of P^T as they stand), times the twiddles conjugated
// (and the gain's inverse, for the inverse transform), then M' = sigma conj(DFT_16) G' (G'^T's
// accumulators are the B fragments of G'), times the conjugated twiddles of the pass outside
// (radix ROUT at stride 256), stored at M's positions: the inverse pass at stride 16.
template <typename S, int N>
struct MiddleLane {
  const DftFrags<S>& f;
  // This lane's ldmatrix rows: n1 = 8 ((lane / 8) % 2) + lane % 8 of n-tile j (n2 = 8 j on),
  // from the real plane for lanes < 16, else the imaginary.
  int ld_sw[2];
  bool ld_im;
  // The lane's stores: position 256 it + a(t, h), a = 16 (g + 8h) + 8t + 2q, and the twiddles
  // of the pass at stride 16, W_256^(k1 n2) for k1 = g + 8h, n2 = 8t + 2q + e: those of Y's
  // accumulators and, with k1 and n2 swapped (the same products), of G^T's.
  int st_sw[2][2];
  cf32 tw[2][2][2];

  TIMEX_FFT_DEVICE MiddleLane(const DftFrags<S>& frags, int lane) : f(frags) {
    const int g = lane / 4, q = lane % 4;
    const int krow = 8 * ((lane / 8) & 1) + lane % 8;
    constexpr float gain = dft_gain_inverse(N);  // kDftScale
    ld_im = lane >= 16;
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      ld_sw[t] = swz(16 * krow + 8 * t);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int a = 16 * (g + 8 * h) + 8 * t + 2 * q;
        st_sw[t][h] = swz(a);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const cf32 v = twiddle<N>(twiddle_exp<N, 16, 16>(a + e));
          tw[t][h][e] = {gain * v.x, gain * v.y};
        }
      }
    }
  }

  // Step it's M as the B fragments of its two n-tiles (ldmatrix .trans: re rows 0-7, re 8-15,
  // im 0-7, im 8-15).
  TIMEX_FFT_DEVICE void load_m(const uint16_t* re, const uint16_t* im, int it,
                               uint32_t (&b)[2][4]) const {
    const int sw = swz(256 * it);
    const uint16_t* const plane = ld_im ? im : re;
#pragma unroll
    for (int t = 0; t < 2; ++t) fused_ops::ldmatrix_x4_trans(b[t], plane + (sw ^ ld_sw[t]));
  }
  // The same fragments through a copy, in fragment order (the backward's Z where its planes
  // do not stay on chip): 1 KiB a step at copy + 512 slot, 16 bytes per lane and n-tile
  // (consecutive lanes' consecutive: no bank conflicts where the copy is in shared memory),
  // written and read by that lane only.
  TIMEX_FFT_DEVICE void save_m(uint16_t* copy, int slot, const uint32_t (&b)[2][4]) const {
    const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      uint16_t v[8];
      std::memcpy(v, b[t], 16);
      st16(copy + 8 * (64 * slot + 32 * t + lane), v);
    }
  }
  TIMEX_FFT_DEVICE void load_saved_m(const uint16_t* copy, int slot, uint32_t (&b)[2][4]) const {
    const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      uint16_t v[8];
      ld16(v, copy + 8 * (64 * slot + 32 * t + lane));
      std::memcpy(b[t], v, 16);
    }
  }

  // The pass at stride 16 on M's fragments: Y's A fragments (register r: row g + 8 (r % 2),
  // columns 8 (r / 2) + 2q, + 1).
  TIMEX_FFT_DEVICE void pass16(const uint32_t (&b)[2][4], uint32_t (&xr)[4],
                               uint32_t (&xi)[4]) const {
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      float yr[4] = {0.f, 0.f, 0.f, 0.f}, yi[4] = {0.f, 0.f, 0.f, 0.f};
      const uint32_t bre[2] = {b[t][0], b[t][1]}, bim[2] = {b[t][2], b[t][3]};
      dft_product<S, true>(yr, yi, f, bre, bim);
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // rows k1 = g + 8h; columns n2 = 8t + 2q + e
        const cf32 v0 = cmul(cf32{yr[2 * h], yi[2 * h]}, tw[t][h][0]);
        const cf32 v1 = cmul(cf32{yr[2 * h + 1], yi[2 * h + 1]}, tw[t][h][1]);
        xr[2 * t + h] = pack2<S>(v0.x, v1.x);
        xi[2 * t + h] = pack2<S>(v0.y, v1.y);
      }
    }
  }

  // Step it's Y, the A operand of dft, from the planes.
  TIMEX_FFT_DEVICE void load(const uint16_t* re, const uint16_t* im, int it, uint32_t (&xr)[4],
                             uint32_t (&xi)[4]) const {
    uint32_t b[2][4];
    load_m(re, im, it, b);
    pass16(b, xr, xi);
  }

  // n-tile t of Y DFT_16 / 4: y[e] is entry 4 t + e of the lane's 8.
  TIMEX_FFT_DEVICE void dft(const uint32_t (&xr)[4], const uint32_t (&xi)[4], int t,
                            cf32 (&y)[4]) const {
    float yr[4] = {0.f, 0.f, 0.f, 0.f}, yi[4] = {0.f, 0.f, 0.f, 0.f};
    complex_product<S, true>(yr, yi, xr, xi, f, t);
#pragma unroll
    for (int e = 0; e < 4; ++e) y[e] = {yr[e], yi[e]};
  }

  // P (the lane's 8 entries, rounded to S) through the inverse DFT_16 and the inverse pass at
  // stride 16 to the planes at step it (the top of this struct).
  TIMEX_FFT_DEVICE void inverse_store(uint16_t* re, uint16_t* im, int it,
                                      const cf32 (&p)[2][4]) const {
    // P's B fragments for G^T's n-tile u (k1 = 8u + g): k2 = 2q.. from P's n-tile 0, 2q + 8..
    // from its n-tile 1, rows e / 2 = u.
    uint32_t pr[2][2], pi[2][2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        pr[u][t] = pack2<S>(p[t][2 * u].x, p[t][2 * u + 1].x);
        pi[u][t] = pack2<S>(p[t][2 * u].y, p[t][2 * u + 1].y);
      }
    }
    inverse_store(re, im, it, pr, pi);
  }
  // The same from P's B fragments already packed (pr[u][t]: entries 2u, 2u + 1 of n-tile t,
  // as the staged sweep keeps them in the planes, timex_fft_tc_mirror.cuh).
  TIMEX_FFT_DEVICE void inverse_store(uint16_t* re, uint16_t* im, int it,
                                      const uint32_t (&pr)[2][2],
                                      const uint32_t (&pi)[2][2]) const {
    constexpr int R1 = radix1(N);
    constexpr int ROUT = N / R1 == 256 ? R1 : 16;  // the pass outside: (ROUT, 256)
    constexpr int sp = N / (ROUT * 256);
    // G'^T's accumulators as G''s B fragments for M''s n-tile j (n2 = 8j + g): k1 = 2q.. from
    // G^T's n-tile 0, 2q + 8.. from its n-tile 1, rows g + 8j.
    uint32_t gr[2][2], gi[2][2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      float zr[4] = {0.f, 0.f, 0.f, 0.f}, zi[4] = {0.f, 0.f, 0.f, 0.f};
      dft_product<S, false>(zr, zi, f, pr[u], pi[u]);
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // rows n2 = g + 8h; columns k1 = 8u + 2q + e
        const cf32 v0 = cmul(cf32{zr[2 * h], zi[2 * h]}, fft::conj(tw[u][h][0]));
        const cf32 v1 = cmul(cf32{zr[2 * h + 1], zi[2 * h + 1]}, fft::conj(tw[u][h][1]));
        gr[h][u] = pack2<S>(v0.x, v1.x);
        gi[h][u] = pack2<S>(v0.y, v1.y);
      }
    }
    // The outer pass's twiddles conjugated at position 256 it + 16 n1 + n2 (n1 = g + 8h, n2 =
    // 8j + 2q + e): k1' = it % ROUT, exponent k1' (16 g + 8 j + 2q + 128 h + e) sp.
    const int lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, q = lane % 4;
    const int k1 = it % ROUT;
    const cf32 uh = fft::conj(twiddle<N>(k1 * 128 * sp)), ve = fft::conj(twiddle<N>(k1 * sp));
    const int sw = swz(256 * it);
    // The stores below overwrite step it's positions, which other lanes of this warp read
    // (ldmatrix, load / load_m): the warp barrier orders those reads before them (racecheck:
    // without it a warp-level hazard).
    __syncwarp();
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float mr[4] = {0.f, 0.f, 0.f, 0.f}, mi[4] = {0.f, 0.f, 0.f, 0.f};
      dft_product<S, false>(mr, mi, f, gr[j], gi[j]);
      const cf32 base = fft::conj(twiddle<N>(k1 * (16 * g + 8 * j + 2 * q) * sp));
      cf32 t[2][2];
      t[0][0] = base;
      t[0][1] = cmul(base, ve);
      t[1][0] = cmul(base, uh);
      t[1][1] = cmul(t[1][0], ve);
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // rows n1 = g + 8h; columns n2 = 8j + 2q + e
        const cf32 v0 = cmul(cf32{mr[2 * h], mi[2 * h]}, t[h][0]);
        const cf32 v1 = cmul(cf32{mr[2 * h + 1], mi[2 * h + 1]}, t[h][1]);
        const int a = sw ^ st_sw[j][h];
        st32(re + a, pack2<S>(v0.x, v1.x));
        st32(im + a, pack2<S>(v0.y, v1.y));
      }
    }
  }
};

// An entry of W's spectra: two float16 (the real part in the low half), half the bytes of a
// cf32. Every batch pair's conv and backward CTA reads its channel's row (8 N bytes as cf32),
// and the spectrum kernel's stores of those rows are most of its memory traffic; the products
// with W are rounded to float16 for the inverse anyway, and W's scaling (spectrum_tc_kernel's
// wexp) keeps its components below 16, so float16 costs them one more rounding, not range.
struct alignas(4) ch16 {
  uint32_t bits;
};
TIMEX_FFT_DEVICE cf32 to_cf32(ch16 v) {
  return {bits_to_float<Plane>(static_cast<uint16_t>(v.bits & 0xffffu)),
          bits_to_float<Plane>(static_cast<uint16_t>(v.bits >> 16))};
}
TIMEX_FFT_DEVICE ch16 to_ch16(cf32 v) { return {pack2<Plane>(v.x, v.y)}; }

// One entry of a spectrum row (cf32 or ch16) as cf32.
TIMEX_FFT_DEVICE cf32 load1(const cf32* p) { return *p; }
TIMEX_FFT_DEVICE cf32 load1(const ch16* p) { return to_cf32(*p); }

// Entries p[0], p[1] of a spectrum row (p 16-byte aligned as cf32, 8 as ch16), one access;
// and stores.
TIMEX_FFT_DEVICE void load2(const cf32* p, cf32& v0, cf32& v1) {
#ifdef TIMEX_EMULATE
  v0 = p[0], v1 = p[1];
#else
  const float4 f = *reinterpret_cast<const float4*>(p);
  v0 = {f.x, f.y}, v1 = {f.z, f.w};
#endif
}
TIMEX_FFT_DEVICE void store2(cf32* p, cf32 v0, cf32 v1) {
#ifdef TIMEX_EMULATE
  p[0] = v0, p[1] = v1;
#else
  *reinterpret_cast<float4*>(p) = make_float4(v0.x, v0.y, v1.x, v1.y);
#endif
}
TIMEX_FFT_DEVICE void load2(const ch16* p, cf32& v0, cf32& v1) {
#ifdef TIMEX_EMULATE
  v0 = to_cf32(p[0]), v1 = to_cf32(p[1]);
#else
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  v0 = to_cf32(ch16{u.x}), v1 = to_cf32(ch16{u.y});
#endif
}
TIMEX_FFT_DEVICE void store2(ch16* p, cf32 v0, cf32 v1) {
#ifdef TIMEX_EMULATE
  p[0] = to_ch16(v0), p[1] = to_ch16(v1);
#else
  *reinterpret_cast<uint2*>(p) = make_uint2(to_ch16(v0).bits, to_ch16(v1).bits);
#endif
}

// The lane's 4 entries (accumulators e = 0..3) of n-tile t of spectrum row `row` at step it
// (middle layout), two loads (cf32 or ch16 rows); and stores of the same (row written by this
// lane only).
// Plain loads, not the read-only path: W's spectra may have been written while the kernel ran
// (wait_for_spectra), acc and the scratch by the kernel itself.
template <typename E>
TIMEX_FFT_DEVICE void load4(const E* row, int it, int lane, int t, cf32 (&v)[4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) load2(row + middle_index(it, lane, t, h), v[2 * h], v[2 * h + 1]);
}
template <typename E>
TIMEX_FFT_DEVICE void store4(E* row, int it, int lane, int t, const cf32 (&v)[4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) store2(row + middle_index(it, lane, t, h), v[2 * h], v[2 * h + 1]);
}

// Asks L1 for line `line` (128 bytes) of step it's 256 entries of a spectrum row (middle
// layout: contiguous, 8 lines of ch16, 16 of cf32; prefetch_l1): a lane a line, lines past the
// step's none.
template <typename E>
TIMEX_FFT_DEVICE void prefetch_step(const E* row, int it, int line) {
  constexpr int kLines = 256 * static_cast<int>(sizeof(E)) / 128;
  if (line >= 0 && line < kLines) {
    prefetch_l1(reinterpret_cast<const char*>(row + 256 * it) + 128 * line);
  }
}

// The larger of |re| and |im| (within sqrt 2 of |v|; a squared norm would overflow float first).
TIMEX_FFT_DEVICE float norm_inf(cf32 v) { return std::fmax(std::fabs(v.x), std::fabs(v.y)); }

// The middle of the convolution (f16: the DFT_16 fragments): the pass at stride 16, DFT_16,
// times W's spectrum wrow, conj(DFT_16) and the inverse pass at stride 16 (MiddleLane), on
// tensor cores; the products stay in registers.
template <typename S, int N, int TH = threads(N)>
TIMEX_FFT_DEVICE void middle(uint16_t* re, uint16_t* im, const ch16* wrow,
                            const DftFrags<S>& f16) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const MiddleLane<S, N> m(f16, lane);
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

// The spectrum alone (the W-spectrum kernel): the pass at stride 16 and DFT_16 (MiddleLane's
// load and dft), times `scale`, to `row` (N entries, middle layout).
template <typename S, int N, int TH = threads(N)>
TIMEX_FFT_DEVICE void middle_spectrum(const uint16_t* re, const uint16_t* im, ch16* row,
                                      float scale, const DftFrags<S>& f16) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const MiddleLane<S, N> m(f16, lane);
  for (int it = warp; it < N / 256; it += TH / 32) {
    uint32_t xr[4], xi[4];
    m.load(re, im, it, xr, xi);
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      cf32 y[4];
      m.dft(xr, xi, t, y);
#pragma unroll
      for (int e = 0; e < 4; ++e) y[e] = {y[e].x * scale, y[e].y * scale};
      store4(row, it, lane, t, y);
    }
  }
}

// The backward's middle: Z (g's pair) in planes zre, zim and X (k's pair) in planes xre, xim
// of the same layout in shared memory, each before the pass at stride 16; where Z_GLOBAL, Z's
// fragments from their copy (MiddleLane::save_m): steps it < zsteps in shared memory at zim
// (slot it), the rest in global memory at zre (slot it - zsteps). acc (N complex floats,
// middle layout, in global or shared memory, this lane's entries its own) gets Z conj(X)
// pscale (set where `first`, else added); Z conj(W) goes on through the inverse
// (MiddleLane::inverse_store) to the planes re, im (Z's or X's: each warp's stores follow its
// loads of the same positions), grad_k's correlation. Returns the largest |component| of the
// acc entries that this lane wrote.
template <typename S, int N, int TH = threads(N), bool Z_GLOBAL = false>
TIMEX_FFT_DEVICE float middle_backward(uint16_t* re, uint16_t* im, const uint16_t* zre,
                                       const uint16_t* zim, const uint16_t* xre,
                                       const uint16_t* xim, const ch16* wrow,
                                       cf32* acc, bool first, float pscale,
                                       const DftFrags<S>& f16, int zsteps = 0) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const MiddleLane<S, N> m(f16, lane);
  // Step i's lines in global memory into L1, a lane a line, a step ahead of their loads: used
  // right where they are issued, those loads had 13% of the backward kernel's stall samples at
  // (3, 512, 16384) (ncu, H200). Z's copy (8 lines), W's (8), acc's (16; not where `first`, nor
  // in shared memory).
  const auto prefetch = [&](int i) {
    if (i >= N / 256) return;
    if (lane < 8) {
      if constexpr (Z_GLOBAL) {
        if (i >= zsteps) prefetch_l1(zre + 512 * (i - zsteps) + 64 * lane);
      }
    } else if (lane < 16) {
      prefetch_step(wrow, i, lane - 8);
    } else if (!first) {
      prefetch_step(acc, i, lane - 16);
    }
  };
  prefetch(warp);
  float amax = 0.f;
  for (int it = warp; it < N / 256; it += TH / 32) {
    prefetch(it + TH / 32);
    uint32_t zr[4], zi[4], xr[4], xi[4];
    if constexpr (Z_GLOBAL) {
      uint32_t b[2][4];
      if (it < zsteps) {
        m.load_saved_m(zim, it, b);
      } else {
        m.load_saved_m(zre, it - zsteps, b);
      }
      m.pass16(b, zr, zi);
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
      if (!first) load4(acc, it, lane, t, a);
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

// The inverse DFT_16 and inverse pass at stride 16 of a spectrum in float (grad_w's sum, acc:
// middle layout, this lane's entries written by this lane or before a barrier), times `scale`,
// to the planes.
template <typename S, int N, int TH = threads(N)>
TIMEX_FFT_DEVICE void middle_from_spectrum(uint16_t* re, uint16_t* im, const cf32* acc,
                                           float scale, const DftFrags<S>& f16) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const MiddleLane<S, N> m(f16, lane);
  for (int it = warp; it < N / 256; it += TH / 32) {
    cf32 p[2][4];
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      load4(acc, it, lane, t, p[t]);
#pragma unroll
      for (int e = 0; e < 4; ++e) p[t][e] = {p[t][e].x * scale, p[t][e].y * scale};
    }
    m.inverse_store(re, im, it, p);
  }
}

}  // namespace fft_tc
}  // namespace rwkv
