// RWKV TimeX, the FFT on tensor cores (timex_fft_tc.cuh): its constants, the swizzled
// plane layout, the half-type conversions, loads and stores, the twiddles and the DFT
// matrices' MMA fragments.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#ifndef TIMEX_EMULATE
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include "common/mma_half.h"
#include "rwkv/timex_fft_math.cuh"  // cf32 and its operators, TIMEX_FFT_* macros
#include "rwkv/timex_fft_pdl.cuh"

#ifdef TIMEX_EMULATE
#define TIMEX_FFT_TC_KERNEL(threads, blocks) void
#else
#define TIMEX_FFT_TC_KERNEL(threads, blocks) __global__ void __launch_bounds__(threads, blocks)
#endif

// TIMEX_FFT_TC_CODE: whether the kernels get their bodies in this compilation pass: the host
// pass, the emulation and device code for sm_80 and newer (mma.sync on bfloat16/float16). For
// the 7.x targets each kernel is an empty stub (tc_supported keeps the host from launching one
// there), which keeps their nvcc time down: the bodies would compile to the same passes around
// traps.
#if defined(TIMEX_EMULATE) || !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define TIMEX_FFT_TC_CODE 1
#else
#define TIMEX_FFT_TC_CODE 0
#endif

// TIMEX_FFT_TC_ROW_STAGE: whether the backward's last row of an odd B stages W and acc in the
// shared memory of Z's copy (middle_backward_row's STAGED) from N = 28672: device code for
// sm_90 and newer (227 KiB a block leave 96 KiB beside the planes at N = 32768; tc_supported
// requires it there), and the emulation; not sm_80 (163 KiB). One form a build: both in one
// kernel spilled 94 / 352 bytes a thread where either alone spilled 50 / 64 (ptxas, sm_90).
// Defined before this header, it picks the form (the emulation test of sm_80's form).
#ifndef TIMEX_FFT_TC_ROW_STAGE
#if defined(TIMEX_EMULATE) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
#define TIMEX_FFT_TC_ROW_STAGE 1
#else
#define TIMEX_FFT_TC_ROW_STAGE 0
#endif
#endif

namespace rwkv {
namespace fft_tc {

using fft::cf32;

// Programmatic dependent launch on the spectra (timex_fft_pdl.cuh).
using fft::launch_dependents;
using fft::wait_for_spectra;

// Threads per CTA: N / 32 up to 256, so that each warp has at least 8 tiles per pass and 4
// steps of the middle over which to spread its set-up (fragments, per-lane twiddles); 64 at N =
// 2560 (N / 32 is not whole warps; 2 warps take its 10 steps of the middle 5 each).
TIMEX_FFT_HD constexpr int threads(int N) { return N == 2560 ? 64 : N / 32 < 256 ? N / 32 : 256; }
// The register cap, in CTAs of 256 threads per SM: 3 (80 registers a thread, 16 bytes
// spilled), measured 1-12% faster than 2 (104-128 registers, no spills) at N = 2048-16384
// and within 2% at 32768 (benchmarks/results/issue29_runs/run20_tc_probe.md); min_blocks
// scales it to a CTA of `cta_threads` (the same registers a thread).
#ifndef TIMEX_TC_MIN_BLOCKS
#define TIMEX_TC_MIN_BLOCKS 3
#endif
TIMEX_FFT_HD constexpr int min_blocks(int cta_threads) {
  return TIMEX_TC_MIN_BLOCKS * 256 / cta_threads;
}
constexpr int kMinN = 2048, kMaxN = 32768;
// The transform lengths: powers of two from kMinN to kMaxN (outer radix 2, 4, 8 or 16), 2560 =
// 10 16^2, 3072 = 12 16^2 and 6144 = 24 16^2 (outer radix 10, 12 and 24), 12288 = 3 16^3 (3) and
// r 16^3 for r = 5, 6, 7 (20480, 24576, 28672): rows of 1024 < T <= 1280 padded to 5/8 of the
// next power of two, of 1280 < T <= 1536, 2048 < T <= 3072 and 4096 < T <= 6144 to 3/4 of it,
// of 8192 < T <= 14336 to the shortest of 5/8, 6/8 and 7/8 of it (transform_length).
TIMEX_FFT_HD constexpr bool valid_length(int N) {
  return N == 2560 || N == 3072 || N == 6144 || N == 12288 || N == 20480 || N == 24576 ||
         N == 28672 || (N >= kMinN && N <= kMaxN && (N & (N - 1)) == 0);
}

TIMEX_FFT_HD constexpr int radix1(int N) {
  // N / 16 = r_1 16^(P-1): the outer radix is what is left after the 16s (10, 12 and 24 at N =
  // 2560, 3072 and 6144).
  int m = N / 16;
  while (m > 16 && m % 16 == 0) m /= 16;
  return m;
}

// The planes' type, whatever the input's: float16, whose three more bits than bfloat16's halve
// the error that each pass's rounding adds. It cannot overflow: the kernels scale each row of
// a pair by a power of two so that its largest magnitude lies in [1, 2) (the backward's k rows
// to at most 2: x_shifts), every pass is unitary within kDftScale's 1.075 (no element exceeds
// 2.15 sqrt(N), 390 at N = 32768), and W's spectrum comes scaled by a power of two to
// components below 16 (spectrum_tc_kernel's wexp), so the middle's products, and by the same
// 2-norm every element of the inverse, stay below 1.075 32 sqrt(2 N) (8807 at N = 32768); the
// last pass multiplies by the powers back.
using Plane = c10::Half;

// A bfloat16 / float16 element's bits as a float.
template <typename S>
TIMEX_FFT_DEVICE float bits_to_float(uint16_t bits) {
  S v;
  v.x = bits;
  return static_cast<float>(v);
}

// Element e's position in a plane: its 16-byte chunk's low 3 bits XORed with all the chunk's
// higher 3-bit groups, so that 8 chunks whose indices differ in any 3 consecutive bits land
// in 8 distinct 16-byte slots of a 128-byte line (a bijection on chunks).
TIMEX_FFT_HD constexpr int swz(int e) {
  const int c = e >> 3;
  const int h = (c >> 3) ^ (c >> 6) ^ (c >> 9) ^ (c >> 12);
  return ((c ^ (h & 7)) << 3) | (e & 7);
}

template <typename S>
TIMEX_FFT_DEVICE uint16_t to_bits(float f) {
  return S(f).x;
}
// Two floats rounded to S and packed (lo in the low half): one cvt instruction on the GPU.
template <typename S>
TIMEX_FFT_DEVICE uint32_t pack2(float lo, float hi) {
#ifdef TIMEX_EMULATE
  return uint32_t(to_bits<S>(lo)) | (uint32_t(to_bits<S>(hi)) << 16);
#else
  uint32_t v;
  if constexpr (std::is_same_v<S, c10::BFloat16>) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
    std::memcpy(&v, &p, 4);
  } else {
    const __half2 p = __floats2half2_rn(lo, hi);
    std::memcpy(&v, &p, 4);
  }
  return v;
#endif
}

TIMEX_FFT_DEVICE void st32(uint16_t* p, uint32_t v) {
#ifdef TIMEX_EMULATE
  std::memcpy(p, &v, 4);
#else
  *reinterpret_cast<uint32_t*>(p) = v;
#endif
}

// Two elements (4 bytes, 4-byte aligned) from shared or global memory (not the read-only
// path: the backward reads back what it wrote).
TIMEX_FFT_DEVICE uint32_t ld32(const uint16_t* p) {
#ifdef TIMEX_EMULATE
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#else
  return *reinterpret_cast<const uint32_t*>(p);
#endif
}

// 8 elements (16 bytes, 16-byte aligned) from shared memory to registers, and from registers
// to shared or global memory.
TIMEX_FFT_DEVICE void ld16(uint16_t* dst, const uint16_t* src) {
#ifdef TIMEX_EMULATE
  std::memcpy(dst, src, 16);
#else
  const uint4 v = *reinterpret_cast<const uint4*>(src);
  std::memcpy(dst, &v, 16);
#endif
}
TIMEX_FFT_DEVICE void st16(uint16_t* dst, const uint16_t* src) {
#ifdef TIMEX_EMULATE
  std::memcpy(dst, src, 16);
#else
  uint4 v;
  std::memcpy(&v, src, 16);
  *reinterpret_cast<uint4*>(dst) = v;
#endif
}

// 16 bytes from global memory (read-only path).
TIMEX_FFT_DEVICE void ldg16(uint16_t* dst, const uint16_t* src) {
#ifdef TIMEX_EMULATE
  std::memcpy(dst, src, 16);
#else
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(src));
  std::memcpy(dst, &v, 16);
#endif
}

// Asks L1 for the 128-byte line holding p, where p points to global memory (elsewhere, as the
// backward's acc in shared memory, nothing): a hint that no register waits on, so that a
// later load of the line waits for L1 instead of L2 or memory.
TIMEX_FFT_DEVICE void prefetch_l1(const void* p) {
#if !defined(TIMEX_EMULATE) && defined(__CUDA_ARCH__)
  if (__isGlobal(p)) asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
#else
  (void)p;
#endif
}

// 16 bytes from global src to shared dst with no register between (cp.async.cg: through L2,
// not L1), and the wait for all of this thread's such copies; in emulation a copy at once.
TIMEX_FFT_DEVICE void cp_async16(void* dst, const void* src) {
#if !defined(TIMEX_EMULATE) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
#else
  std::memcpy(dst, src, 16);
#endif
}
TIMEX_FFT_DEVICE void cp_async_wait_all() {
#if !defined(TIMEX_EMULATE) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

// The widest access, in elements (8, 4 or 2; 1: element by element), with which rows of T
// elements from `base` on are read or written whole: every row starts 2 w-byte aligned.
TIMEX_FFT_HD inline int vector_width(int64_t T, const void* base) {
  const auto a = reinterpret_cast<uintptr_t>(base);
  for (int w = 8; w > 1; w /= 2) {
    if (T % w == 0 && a % (2 * w) == 0) return w;
  }
  return 1;
}

// 8 elements from global memory (read-only path) in accesses of w elements (8, 4 or 2; src
// 2 w-byte aligned).
TIMEX_FFT_DEVICE void ldg8_elems(uint16_t* dst, const uint16_t* src, int w) {
#ifdef TIMEX_EMULATE
  (void)w;
  std::memcpy(dst, src, 16);
#else
  if (w == 8) {
    ldg16(dst, src);
  } else if (w == 4) {
    for (int j = 0; j < 2; ++j) {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(src) + j);
      std::memcpy(dst + 4 * j, &v, 8);
    }
  } else {
    for (int j = 0; j < 4; ++j) {
      const unsigned v = __ldg(reinterpret_cast<const unsigned*>(src) + j);
      std::memcpy(dst + 2 * j, &v, 4);
    }
  }
#endif
}

// 8 elements to global memory in accesses of w elements (8, 4 or 2; dst 2 w-byte aligned).
TIMEX_FFT_DEVICE void st8_elems(uint16_t* dst, const uint16_t* src, int w) {
#ifdef TIMEX_EMULATE
  (void)w;
  std::memcpy(dst, src, 16);
#else
  if (w == 8) {
    st16(dst, src);
  } else if (w == 4) {
    for (int j = 0; j < 2; ++j) {
      uint2 v;
      std::memcpy(&v, src + 4 * j, 8);
      reinterpret_cast<uint2*>(dst)[j] = v;
    }
  } else {
    for (int j = 0; j < 4; ++j) {
      unsigned v;
      std::memcpy(&v, src + 2 * j, 4);
      reinterpret_cast<unsigned*>(dst)[j] = v;
    }
  }
#endif
}

// W_N^m for 0 <= m < N: on the GPU __sincosf of 2 pi m' / N with m' = m or m - N in
// [-N/2, N/2) (absolute error about 1e-6 there, far below the half types' rounding), no table
// lookup (a warp's twiddles hit scattered table entries: bank conflicts); in the emulation the
// double formula.
template <int N>
TIMEX_FFT_DEVICE cf32 twiddle(int m) {
#ifdef TIMEX_EMULATE
  const double a = -2.0 * 3.14159265358979323846 * m / N;
  return {static_cast<float>(std::cos(a)), static_cast<float>(std::sin(a))};
#else
  const float x = static_cast<float>(m >= N / 2 ? m - N : m) * (-2.0f * 3.14159265358979f / N);
  float s, c;
  __sincosf(x, &s, &c);
  return {c, s};
#endif
}

// a b as two multiplies and two FMAs (fft::cf32's operator* takes five instructions: it
// rounds both products of the real part before subtracting them).
TIMEX_FFT_DEVICE cf32 cmul(cf32 a, cf32 b) {
  return {std::fma(a.x, b.x, -(a.y * b.y)), std::fma(a.x, b.y, a.y * b.x)};
}

// cos(2 pi j / 16) for j >= 0 (float-rounded constants; the DFT matrices are rounded to S).
#ifdef TIMEX_EMULATE
inline constexpr float kCos16[16] = {
#else
__constant__ constexpr float kCos16[16] = {
#endif
    1.0f, 0.923879532511287f, 0.707106781186548f, 0.382683432365090f,
    0.0f, -0.382683432365090f, -0.707106781186548f, -0.923879532511287f,
    -1.0f, -0.923879532511287f, -0.707106781186548f, -0.382683432365090f,
    0.0f, 0.382683432365090f, 0.707106781186548f, 0.923879532511287f};
TIMEX_FFT_DEVICE float cos16(int j) { return kCos16[j & 15]; }

// DFT_16's scale in the passes' matrix: sigma DFT_16 rather than DFT_16 / 4. Rounded to
// float16, the unitary matrix's entries 0.25 {cos, sin}(2 pi j / 16) miss by up to 3.0e-4 of
// themselves (0.25 sin(pi / 8)), an error as large as a pass's rounding of the data; sigma =
// 0x3371 (float16 bits) makes sigma, sigma cos(pi / 8), sigma cos(pi / 4) and sigma sin(pi / 8)
// float16 to 2.9e-5 of themselves (the best of the float16 sigma within 10% of 1/4: searched).
// Each pass then scales by 4 sigma = 0.930; MiddleLane's twiddles take 1 / (4 sigma)^n, the n
// passes of a transform (dft_passes), once in the forward (pass16) and once in the inverse
// (inverse_store), so that each transform stays unitary. Between, the planes hold at most
// 1 / (4 sigma) = 1.075 times the unitary bound (Plane's comment): the float16 range still
// holds them.
inline constexpr float kDftScale = 0.2325439453125f;

// The same for the radix-24 pass (timex_fft_tc_outer24.cuh, N = 6144): 1 / sqrt(24) rounded
// to float16 misses by 1.1e-4 and its products with cos(pi j / 12) by up to 3.5e-4; sigma_24
// = 0x326A (float16 bits) and its products by at most 6.0e-5 (searched as kDftScale). The
// pass scales by sqrt(24) sigma_24 = 0.982, which dft_gain_inverse undoes with the others.
inline constexpr float kDft24Scale = 0.200439453125f;
// And for radix 12 (N = 3072): 1 / sqrt(12) rounded to float16 makes its product with cos(pi /
// 6) miss by 1.4e-4 of itself; sigma_12 = 0x3476 (float16 bits) by 1.0e-6 (the best within
// 10% of 1 / sqrt(12): searched). The pass scales by sqrt(12) sigma_12 = 0.966.
inline constexpr float kDft12Scale = 0.27880859375f;
// And for radix 10 (N = 2560): 1 / sqrt(10) in float16 misses by up to 3.1e-4 in its products
// with the cosines and sines of multiples of 36 degrees, sigma_10 = 0x34B7 by 6.5e-5 (searched
// likewise). The pass scales by sqrt(10) sigma_10 = 0.932.
inline constexpr float kDft10Scale = 0.294677734375f;

// sigma_R of the outer radices on tensor cores (timex_fft_tc_outer_mma.cuh).
TIMEX_FFT_HD constexpr float outer_dft_scale(int R) {
  return R == 24 ? kDft24Scale : R == 12 ? kDft12Scale : kDft10Scale;
}
// Whether the outer pass runs on tensor cores (radix 10, 12 and 24) rather than the CUDA cores.
TIMEX_FFT_HD constexpr bool outer_on_mma(int N) {
  return radix1(N) == 10 || radix1(N) == 12 || radix1(N) == 24;
}

// The radix-16 passes on tensor cores (DftFrags) in a transform of N, the middle's two
// included: N / radix1(N) = 16^p of them, one more where the outer radix is 16 too.
TIMEX_FFT_HD constexpr int dft_passes(int N) {
  int p = 0;
  for (int m = N / radix1(N); m > 1; m /= 16) ++p;
  return radix1(N) == 16 ? p + 1 : p;
}

// 1 / (4 sigma)^dft_passes(N), and 1 / (sqrt(R) sigma_R) more where the outer radix R is 10, 12
// or 24 (float-rounded): what MiddleLane's twiddles carry.
TIMEX_FFT_HD constexpr float dft_gain_inverse(int N) {
  constexpr double kSqrt10 = 3.162277660168380, kSqrt12 = 3.464101615137754,
                   kSqrt24 = 4.898979485566356;
  double g = radix1(N) == 24   ? 1.0 / (kSqrt24 * kDft24Scale)
             : radix1(N) == 12 ? 1.0 / (kSqrt12 * kDft12Scale)
             : radix1(N) == 10 ? 1.0 / (kSqrt10 * kDft10Scale)
                               : 1.0;
  for (int i = 0; i < dft_passes(N); ++i) g /= 4.0 * kDftScale;
  return static_cast<float>(g);
}

// What the middle's forward half (the pass at stride 16 and DFT_16, MiddleLane's load and dft)
// multiplies the unitary map by: (4 sigma)^2 from its two matrices and dft_gain_inverse(N)
// from its twiddles, which undo the passes before it too: 1 / (4 sigma)^(dft_passes(N) - 2).
TIMEX_FFT_HD constexpr float middle_gain(int N) {
  return static_cast<float>(16.0 * kDftScale * kDftScale) * dft_gain_inverse(N);
}

// The A fragments of sigma DFT_16 (the passes' matrix, kDftScale): cos, sin and -sin parts,
// mma_16816's row-major layout (a = A[g][2q..], A[g+8][2q..], A[g][2q+8..], A[g+8][2q+8..]).
// (Each matrix as a float16 part and the float16 rounding of what it misses, two MMAs per
// product, took float16's error from 6.3-9.5e-4 to 4.3-6.4e-4 for 8-23% more time, run 20 on
// the H100: kDftScale does about as much for nothing.)
template <typename S>
struct DftFrags {
  uint32_t c[4], s[4], ns[4];
  TIMEX_FFT_DEVICE void init(int lane) {
    const int g = lane / 4, q = lane % 4;
    for (int r = 0; r < 4; ++r) {
      const int row = g + 8 * (r & 1);
      float cv[2], sv[2];
      for (int h = 0; h < 2; ++h) {
        // cos and sin of 2 pi j / 16, j = row col: cos16(j) and cos16(j + 12).
        const int j = row * (2 * q + h + 8 * (r >> 1));
        cv[h] = kDftScale * cos16(j);
        sv[h] = kDftScale * cos16(j + 12);
      }
      c[r] = pack2<S>(cv[0], cv[1]);
      s[r] = pack2<S>(sv[0], sv[1]);
      ns[r] = pack2<S>(-sv[0], -sv[1]);
    }
  }
};

// The position of pass (R, L)'s element: (k1 = (a / L) % R, n2 = a % L) -> its twiddle
// exponent, in units of W_N: k1 n2 N / (R L).
template <int N, int R, int L>
TIMEX_FFT_HD constexpr int twiddle_exp(int a) {
  return ((a / L) % R) * (a % L) * (N / (R * L));
}

}  // namespace fft_tc
}  // namespace rwkv
