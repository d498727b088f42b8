// RWKV TimeX, on-chip FFT convolution: the FFT building blocks that the kernels of
// timex_fft_kernels.cuh share (a row's whole transform lives in one CTA's shared memory).
//
// A real row x of length N = 2M (zero past T <= M) is transformed as the length-M complex row
// z[n] = x[2n] + i x[2n+1]; split_pairs turns Z = DFT_M(z) into the real row's half spectrum
// X[0..M] and merge goes back (timex_fft_pairs.cuh; the same split/merge algebra as
// timex_spectral.h, in float).
// Half spectra are stored packed in M complex values: P[0] = (X[0], X[M]) (both real),
// P[k] = X[k] for 0 < k < M.
//
// DFT_M runs as Stockham stages of small in-register DFTs (timex_fft_stages.cuh); this file
// holds the lengths, the launch shape, complex float arithmetic, the twiddle values and those
// in-register DFTs.
//
// Shared memory holds M complex floats at padded index n + n/16 (8-byte words): the first
// stage's writes (NS = 1: stride R between threads) then hit 16 distinct bank pairs per
// half-warp instead of one; runs of >= 16 consecutive indices stay conflict free.
// Twiddles are entries of the table of e^{-2 pi i m / 32768} computed in double (twiddle_value;
// for M = 3 2^k and 5 2^k the split's and the odd stage's from the exact fraction, root_value):
// every split twiddle is one entry (correctly rounded), every stage twiddle one entry or the
// product of two, so the error of the transform is that of its float arithmetic, not of
// sin/cos approximations (max |err| / max |ref| of a whole convolution at M = 16384: 3e-7).
// The kernels read them from a table of those entries in the order a warp reads them (the
// staged and fused tables of timex_fft_stages.cuh); the plain table (twiddle_kernel) gives the
// same bits.
#pragma once

#include <cmath>
#include <cstdint>

// tests/test_rwkv_fft_emulation.py defines TIMEX_EMULATE and these four macros itself to
// compile the kernels as host C++ and run them on a CPU (a thread per CUDA thread).
#ifndef TIMEX_EMULATE
#define TIMEX_FFT_DEVICE __device__ __forceinline__
#define TIMEX_FFT_KERNEL(threads) __global__ void __launch_bounds__(threads)
// A kernel held to at most 56 registers a thread below 1024 threads (64, the limit that 1024
// threads set anyway, at M = 16384 and 8192), so that at the shorter lengths more of its CTAs fit
// an SM. The one-CTA backward kernel: 72 registers left free at M = 2048 (128 threads: 7 CTAs
// per SM, 924 resident on the H100, so 1024 channels took two rounds); held to 64, 207 -> 163
// us at (4, 1024, 2048) bfloat16 (benchmarks/results/timex_halves_h100.md); to 56 (no spills
// at M >= 32, the same 4 bytes as at 64 at M = 5120), 12% less GPU time at (2, 768, 3000) and 4%
// at (2, 2048, 1100) float16, where the channels now fit one wave (6 CTAs an SM at M = 3072
// instead of 5, 12 at 1536 instead of 10), the same elsewhere (run 48 (f)). The conv kernel (48
// registers free) ran up to 8% slower under the 64 bound, so it is not held.
#define TIMEX_FFT_CAP_REGS 56
#define TIMEX_FFT_MIN_BLOCKS(threads)                                       \
  (65536 / ((threads) * TIMEX_FFT_CAP_REGS) > 32 ? 32                       \
   : 65536 / ((threads) * TIMEX_FFT_CAP_REGS) < 1 ? 1                       \
                                                  : 65536 / ((threads) * TIMEX_FFT_CAP_REGS))
#define TIMEX_FFT_KERNEL_CAPPED(threads) \
  __global__ void __launch_bounds__(threads, TIMEX_FFT_MIN_BLOCKS(threads))
#define TIMEX_FFT_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#define TIMEX_FFT_SYNC() __syncthreads()
#endif
#ifndef TIMEX_FFT_KERNEL_CAPPED  // the emulation tests define TIMEX_FFT_KERNEL alone
#define TIMEX_FFT_KERNEL_CAPPED(threads) TIMEX_FFT_KERNEL(threads)
#endif
// A stage is a function of its own on the GPU: ptxas then allocates each stage's registers
// alone; inlined into one kernel body, the loads of neighbouring stages were hoisted together
// and spilled (conv at M = 16384: 340 bytes of spills at 64 registers; none as calls).
#ifdef TIMEX_EMULATE
#define TIMEX_FFT_STAGE inline
#else
#define TIMEX_FFT_STAGE __device__ __noinline__
#endif
// Index helpers that kernels call with run-time arguments (constexpr alone is host-only).
#if defined(__CUDACC__)
#define TIMEX_FFT_HD __host__ __device__
#else
#define TIMEX_FFT_HD
#endif

namespace rwkv::fft {

// The longest row: M (fft_length) is at most kMaxM.
constexpr int kMaxM = 16384;
// Twiddle table entries: tw[m] = e^{-2 pi i m / kTwiddles}, enough for N = 2 kMaxM.
constexpr int kTwiddles = 2 * kMaxM;
// The shortest M = 3 2^k or 5 2^k that fft_length gives. Below it the power of two measured
// as fast or faster (GPU busy time, run 44 (c)): at T = 600 M = 1024 took 5-10% less than 768
// and 640 (48 and 40 threads), at T = 1100 to 1200 M = 1536 0-3% less than 1280 (80 threads,
// 2.5 warps; its radix-5 stage's 256 butterflies in 4 rounds of 80). 1280 on two whole warps
// (64 threads of 20 values, stages of radix 4, 4, 4, 20) was 12-25% slower than 1536 at T = 1030
// to 1280 in all three dtypes (run 51): one pass more, the backward's radix-20 stage spilled
// under its 56-register cap (191 against 82 us at (4, 1024, 1100)), and even the conv kernel,
// without spills, took 70 against 63 us.
constexpr int kMinOddM = 1536;

TIMEX_FFT_HD constexpr bool supported(int64_t T) { return T >= 1 && T <= kMaxM; }
TIMEX_FFT_HD constexpr bool is_pow2(int x) { return x >= 1 && (x & (x - 1)) == 0; }
// x >= 1 without its factors 2.
TIMEX_FFT_HD constexpr int odd_part(int x) { return x % 2 == 0 ? odd_part(x / 2) : x; }
// The lengths the kernels run: a power of two, or three or five times one (the factor 3 or 5
// in the transform's last stage, of radix 3, 5, 6, 10, 12 or 20).
TIMEX_FFT_HD constexpr bool length_ok(int M) {
  return M >= 1 && (odd_part(M) == 1 || odd_part(M) == 3 || odd_part(M) == 5);
}
// M for rows of T: the shortest of the power of two m >= T, 3m/4 (where three_ok) and 5m/8
// (where five_ok) that is >= T (an M = 3 2^k or 5 2^k from kMinOddM on): 1024 < T <= 1536
// takes M = 1536 instead of 2048 and 2048 < T <= 2560 M = 2560 instead of 4096, 25% and 37%
// less of every transform's work and shared memory.
TIMEX_FFT_HD constexpr int fft_length(int64_t T, bool three_ok = true, bool five_ok = true) {
  int m = 1;
  while (m < T) m *= 2;
  const int m5 = m / 8 * 5, m3 = m / 4 * 3;
  if (five_ok && m5 >= kMinOddM && m5 >= T) return m5;
  if (three_ok && m3 >= kMinOddM && m3 >= T) return m3;
  return m;
}
TIMEX_FFT_HD constexpr int ilog2(int x) { return x <= 1 ? 0 : 1 + ilog2(x / 2); }
// Padded shared-memory index of complex element n (see the top of the file).
TIMEX_FFT_HD constexpr int pad(int n) { return n + (n >> 4); }
// Dynamic shared memory of every kernel for length M: M padded complex floats, 139264 bytes
// (136 KiB) at M = 16384, within both sm_90's 227 KiB and sm_80's 163 KiB per block.
TIMEX_FFT_HD constexpr int smem_bytes(int M) { return 8 * (M + (M >> 4)); }

// The launch shape of length M with at most MAX_THREADS threads: E = M / THREADS complex
// values per thread, E_ where M / E_ threads fit in MAX_THREADS (16, or 8: the wide CTAs of
// timex_fft_kernels.cuh, twice the threads, each doing half the work of a stage), else 16
// where M allows; radix min(E, 16). The GPU runs MAX_THREADS = kThreads; the emulation test
// also runs fewer, the same code with more butterflies each.
// M = F 2^k (F = 3, 5): the power-of-two part P2 = 2^k in stages of radix min(P2, E, 16),
// then the factor F (stage_radix below).
template <int M_, int MAX_THREADS, int E_ = 16>
struct Shape {
  static_assert(M_ >= 1 && M_ <= kMaxM && length_ok(M_), "M: 2^k, 3 2^k or 5 2^k");
  static_assert(E_ == 8 || E_ == 16, "8 or 16 values a thread");
  static constexpr int M = M_;
  static constexpr int THREADS = M / E_ < 1 ? 1
                                 : M / E_ <= MAX_THREADS ? M / E_
                                 : M / 16 > MAX_THREADS  ? MAX_THREADS
                                                         : M / 16;
  static constexpr int E = M / THREADS;
  static constexpr int P2 = M / odd_part(M);
  static constexpr int RMAX = E < 16 ? E : 16;  // a stage's radix: at most E
  static constexpr int RADIX = is_pow2(M) ? RMAX : (P2 < RMAX ? P2 : RMAX);
  static constexpr int SMEM = smem_bytes(M);
  static_assert(E * THREADS == M && is_pow2(RADIX), "THREADS divides M");
};

// The radix of Sh's stage after NS (the product of the earlier radices): RADIX while the
// power-of-two part leaves that much, then what it leaves (a power of two: the last stage); where M
// = F P2 (F = 3, 5), the factor F joins a last radix 2 or 4 (a stage of radix 2F or 4F: one pass
// less than radix 4 then F, 4-10% less GPU time at M = 3072 and 5120, run 44 (j)) or follows the
// power-of-two stages as a stage of radix F. So every NS is a power of two, and only the last
// stage's radix may not be.
template <class Sh>
TIMEX_FFT_HD constexpr int stage_radix(int NS) {
  const int rem = Sh::M / NS, f = odd_part(rem), rem2 = rem / f;
  if (f == 1) return rem < Sh::RADIX ? rem : Sh::RADIX;
  return rem2 <= 4 ? rem : rem2 < Sh::RADIX ? rem2 : Sh::RADIX;
}

struct alignas(8) cf32 {
  float x, y;
};

TIMEX_FFT_DEVICE cf32 operator+(cf32 a, cf32 b) { return {a.x + b.x, a.y + b.y}; }
TIMEX_FFT_DEVICE cf32 operator-(cf32 a, cf32 b) { return {a.x - b.x, a.y - b.y}; }
TIMEX_FFT_DEVICE cf32 operator*(cf32 a, cf32 b) {
  return {a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x};
}
TIMEX_FFT_DEVICE cf32 conj(cf32 a) { return {a.x, -a.y}; }
TIMEX_FFT_DEVICE cf32 scale(cf32 a, float s) { return {a.x * s, a.y * s}; }
// a * conj(b).
TIMEX_FFT_DEVICE cf32 mul_conj(cf32 a, cf32 b) {
  return {a.x * b.x + a.y * b.y, a.y * b.x - a.x * b.y};
}
// a * b and a + b rounded each (mul.rn, add.rn): nvcc leaves a product that has two uses, or
// that an add takes only on one branch, as a plain mul.f32 for ptxas to fuse into an FMA with
// the add or not, which it decides per kernel. Where two kernels must give the same bits (the
// backward from k's spectra that the forward kept, against the backward that makes them), such
// products and sums use these.
TIMEX_FFT_DEVICE float mul_rn(float a, float b) {
#ifdef TIMEX_EMULATE
  return a * b;
#else
  return __fmul_rn(a, b);
#endif
}
TIMEX_FFT_DEVICE cf32 add_rn(cf32 a, cf32 b) {
#ifdef TIMEX_EMULATE
  return a + b;
#else
  return {__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y)};
#endif
}

// tw[m] for m in [0, kTwiddles), in double and rounded once; m / kMaxM is exact, so
// sincospi's argument is too.
TIMEX_FFT_DEVICE cf32 twiddle_value(int m) {
#ifdef TIMEX_EMULATE
  const double a = 3.14159265358979323846 * (static_cast<double>(m) / kMaxM);
  const double s = std::sin(a), c = std::cos(a);
#else
  double s, c;
  sincospi(static_cast<double>(m) / kMaxM, &s, &c);
#endif
  return {static_cast<float>(c), static_cast<float>(-s)};
}

// e^{-2 pi i a / n} for 0 <= a < n: the table entry where n divides kTwiddles (the same bits
// as twiddle_value), else from sincospi in double of the exact fraction a / n (rounded once
// to float: lengths 3 2^k and 5 2^k).
TIMEX_FFT_DEVICE cf32 root_value(int a, int n) {
  if (kTwiddles % n == 0) return twiddle_value(a * (kTwiddles / n));
#ifdef TIMEX_EMULATE
  const double x = 3.14159265358979323846 * (2.0 * a / n);
  const double s = std::sin(x), c = std::cos(x);
#else
  double s, c;
  sincospi(2.0 * a / n, &s, &c);
#endif
  return {static_cast<float>(c), static_cast<float>(-s)};
}

// v * e^{-2 pi i e / R} for 0 <= e < R / 2, R <= 16: e is a constant once the caller's loops
// are unrolled, so the multiplications by 1, -i and sqrt(1/2) (1 +- i) fold away.
template <int R>
TIMEX_FFT_DEVICE cf32 rotate(cf32 v, int e) {
  constexpr float kC1 = 0.923879532511286756f, kS1 = 0.382683432365089772f;  // pi / 8
  constexpr float kH = 0.707106781186547524f;                                // sqrt(1/2)
  const int e16 = e * (16 / R);                                              // in [0, 8)
  if (e16 == 0) return v;
  if (e16 == 4) return {v.y, -v.x};
  if (e16 == 2) return {(v.x + v.y) * kH, (v.y - v.x) * kH};
  if (e16 == 6) return {(v.y - v.x) * kH, -(v.x + v.y) * kH};
  // v * (c - i s) with c = cos(pi e16 / 8), s = sin(pi e16 / 8).
  const float c = e16 == 1 ? kC1 : e16 == 3 ? kS1 : e16 == 5 ? -kS1 : -kC1;
  const float s = e16 == 1 || e16 == 7 ? kS1 : kC1;
  return {v.x * c + v.y * s, v.y * c - v.x * s};
}

// i with its low `bits` (<= 4) bits reversed: straight-line, so that it folds once unrolled.
TIMEX_FFT_HD constexpr int bit_reverse(int i, int bits) {
  return (((i & 1) << 3) | ((i & 2) << 1) | ((i & 4) >> 1) | ((i & 8) >> 3)) >> (4 - bits);
}

// The butterflies of span LEN, 2 LEN, ..., R of an in-register radix-2 FFT on a (one template
// per span: loop bounds that are constants, which nvcc unrolls into registers).
template <int R, int LEN>
TIMEX_FFT_DEVICE void butterflies(cf32 (&a)[R]) {
  if constexpr (LEN <= R) {
#pragma unroll
    for (int i = 0; i < R; i += LEN) {
#pragma unroll
      for (int m = 0; m < LEN / 2; ++m) {
        const cf32 u = a[i + m], t = rotate<R>(a[i + m + LEN / 2], m * (R / LEN));
        a[i + m] = u + t;
        a[i + m + LEN / 2] = u - t;
      }
    }
    butterflies<R, 2 * LEN>(a);
  }
}

// DFT_3 of (a, b, c) in place: X1, X2 = a - (b + c) / 2 -+ i sqrt(3/4) (b - c).
TIMEX_FFT_DEVICE void dft3(cf32& a, cf32& b, cf32& c) {
  constexpr float kS3 = 0.866025403784438647f;  // sqrt(3) / 2
  const cf32 t = b + c, d = b - c;
  const cf32 m = {a.x - 0.5f * t.x, a.y - 0.5f * t.y}, s = {kS3 * d.y, -kS3 * d.x};
  a = a + t;
  b = m + s;
  c = m - s;
}

// DFT_5 of v in place: with t1 = v1 + v4, t2 = v2 + v3, d1 = v1 - v4, d2 = v2 - v3,
// X1, X4 = v0 + c1 t1 + c2 t2 -+ i (s1 d1 + s2 d2), X2, X3 = v0 + c2 t1 + c1 t2 -+ i (s2 d1 -
// s1 d2), c_e - i s_e = e^{-2 pi i e / 5} (each constant rounded once).
TIMEX_FFT_DEVICE void dft5(cf32 (&v)[5]) {
  constexpr float kC1 = 0.309016994374947424f, kS1 = 0.951056516295153572f;   // 72 degrees
  constexpr float kC2 = -0.809016994374947424f, kS2 = 0.587785252292473129f;  // 144
  const cf32 t1 = v[1] + v[4], t2 = v[2] + v[3], d1 = v[1] - v[4], d2 = v[2] - v[3];
  const cf32 m1 = {v[0].x + kC1 * t1.x + kC2 * t2.x, v[0].y + kC1 * t1.y + kC2 * t2.y};
  const cf32 m2 = {v[0].x + kC2 * t1.x + kC1 * t2.x, v[0].y + kC2 * t1.y + kC1 * t2.y};
  // -i (s1 d1 + s2 d2) and -i (s2 d1 - s1 d2).
  const cf32 u1 = {kS1 * d1.y + kS2 * d2.y, -(kS1 * d1.x + kS2 * d2.x)};
  const cf32 u2 = {kS2 * d1.y - kS1 * d2.y, -(kS2 * d1.x - kS1 * d2.x)};
  v[0] = v[0] + t1 + t2;
  v[1] = m1 + u1;
  v[4] = m1 - u1;
  v[2] = m2 + u2;
  v[3] = m2 - u2;
}

// v = DFT_R(v) in registers. R a power of two <= 16: radix-2 decimation in time; the
// bit-reversal permutation is register renaming once unrolled. R = 3, 5; R = 6, 10, 12, 20: the
// DFT_{R/2}s of the even and odd entries, combined as X[k], X[k + R/2] = E[k] +- W_R^k O[k].
template <int R>
TIMEX_FFT_DEVICE void dft(cf32 (&v)[R]) {
  if constexpr (R == 3) {
    dft3(v[0], v[1], v[2]);
  } else if constexpr (R == 5) {
    dft5(v);
  } else if constexpr (R == 6 || R == 10 || R == 12 || R == 20) {
    constexpr int H = R / 2;
    // cos(6 i degrees) for i = 0 .. 15, each rounded once: W_R^k = cos - i sin of 360 k / R
    // degrees, a multiple of 6 for these R.
    constexpr float cos6[16] = {
        1.0f,                  0.994521895368273290f, 0.978147600733805689f,
        0.951056516295153531f, 0.913545457642600867f, 0.866025403784438708f,
        0.809016994374947451f, 0.743144825477394244f, 0.669130606358858238f,
        0.587785252292473137f, 0.5f,                  0.406736643075800208f,
        0.309016994374947451f, 0.207911690817759454f, 0.104528463267653457f,
        0.0f};
    cf32 e[H], o[H];
#pragma unroll
    for (int i = 0; i < H; ++i) {
      e[i] = v[2 * i];
      o[i] = v[2 * i + 1];
    }
    dft<H>(e);
    dft<H>(o);
#pragma unroll
    for (int k = 0; k < H; ++k) {
      const int i = 60 / R * k;  // the angle in steps of 6 degrees, < 30
      const float c = i <= 15 ? cos6[i] : -cos6[30 - i], s = i <= 15 ? cos6[15 - i] : cos6[i - 15];
      const cf32 t = k == 0 ? o[k] : cf32{c * o[k].x + s * o[k].y, c * o[k].y - s * o[k].x};
      v[k] = e[k] + t;
      v[k + H] = e[k] - t;
    }
  } else if constexpr (R > 1) {
    static_assert(is_pow2(R) && R <= 16, "R: 3, 5, 6, 10, 12, 20 or a power of two <= 16");
    cf32 a[R];
#pragma unroll
    for (int i = 0; i < R; ++i) a[bit_reverse(i, ilog2(R))] = v[i];
    butterflies<R, 2>(a);
#pragma unroll
    for (int i = 0; i < R; ++i) v[i] = a[i];
  }
}

}  // namespace rwkv::fft
