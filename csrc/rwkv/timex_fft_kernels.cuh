// RWKV TimeX at long T: FFT convolution with each row's transform on chip (one CTA per row,
// the row in shared memory, butterflies in registers; timex_fft_stages.cuh has the FFT).
//
// Per channel c, with W[d] = w[c, T-1-d] and M = the smallest power of two >= T, N = 2M
// (>= 2T - 1, so that circular convolution of the zero-padded rows is linear):
//   out[b, t]    = eps + sum_{u <= t} W[t-u] k[b, u]       = IDFT(K W^)[t]          (conv)
//   grad_k[b, n] = sum_{t >= n} W[t-n] g[b, t]             = IDFT(G conj(W^))[n]    (backward)
//   grad_w[T-1-s] = sum_b sum_{t >= s} g[b, t] k[b, t-s]   = IDFT(sum_b G conj(K))[s] (backward)
// with X^ the length-N real DFT of a row; W^ is made once per call (spectrum) or kept from
// the forward. Inputs are float, half or bfloat16, converted to float on load; everything on
// chip is float; outputs are rounded to the input type once. float64 goes elsewhere
// (timex_fft.h, cuFFT). This file: the forward's kernels, the pieces the backward kernel
// (timex_fft_backward.cuh) shares, and the launchers.
//
// Memory: every kernel takes smem_bytes(M) of dynamic shared memory (136 KiB at M = 16384:
// fits sm_80's 163 KiB and sm_90's 227 KiB per block; 1 CTA per SM there, 3 at M = 8192 on
// sm_90). Global traffic: conv reads its row once and writes it once, plus the M complex
// floats of W^ (L2-resident across the B rows of a channel).
#pragma once

#include <cstdint>
#include <type_traits>

#include "rwkv/timex_fft_math.cuh"
#include "rwkv/timex_fft_pairs.cuh"
#include "rwkv/timex_fft_pdl.cuh"
#include "rwkv/timex_fft_stages.cuh"

#ifndef TIMEX_EMULATE
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

#include "common/cuda_utils.cuh"
#endif

namespace rwkv::fft {

// Threads per CTA on the GPU: M / 16 up to kThreads (Shape), so 16 complex values per thread
// from M = 16 to 16384 (radix 16 stages, the last of radix 2, 4 or 8 where log2 M % 4 != 0).
// nvcc 13, sm_90, every kernel at every M and dtype: at most 64 registers (the limit at 1024
// threads); no spills from M = 32 on but the backward's 4 bytes at M = 5120 (the stages are
// calls: timex_fft_math.cuh says why).
constexpr int kThreads = 1024;
// The wide CTAs: M / 8 threads of 8 values (Shape's E_ = 8, stages of radix 8) instead of M / 16
// of 16, built for kWideMinM <= M <= kWideMaxM. A row's transform then takes a pass more at most
// lengths (M = 2048: radix 8, 8, 8, 4 instead of 16, 16, 8), each with half the work a thread,
// so a row finishes sooner, but an SM holds fewer rows at once (registers and threads per SM
// bound its CTAs): worth it where the rows do not fill the SMs (fused_wide, timex_fft_fused.cu,
// says where). Past 2560 (384 to 768 threads) they took 10-31% more GPU time at six of seven
// shapes measured and tied at the seventh (H200, run 53 (a)).
constexpr int kWideMinM = 512;
constexpr int kWideMaxM = 2560;

template <typename S>
struct alignas(2 * sizeof(S)) Two {
  S a, b;
};

// True where row[i], row[i + 1] for even i (or T - 2 - i) can be one access: T even and the
// row aligned to two elements.
template <typename S>
TIMEX_FFT_DEVICE bool pairs_aligned(const S* row, int T) {
  return T % 2 == 0 && reinterpret_cast<uintptr_t>(row) % (2 * sizeof(S)) == 0;
}

// *p, or where streaming, with the cache-streaming hint (ld.global.cs / st.global.cs: evict first
// from L2) for data that a kernel reads or writes once (rows of k and g, out, grad_k, k's kept
// spectra), so that it does not push out what the kernels reuse there (W's spectra, the
// backward's running sums, the twiddle table). V: 4 or 8 bytes, aligned to its size.
template <typename V>
TIMEX_FFT_DEVICE V load_once(const V* p, bool streaming) {
  static_assert(sizeof(V) == 4 || sizeof(V) == 8, "one 4- or 8-byte access");
#ifndef TIMEX_EMULATE
  using U = std::conditional_t<sizeof(V) == 4, unsigned, uint2>;
  if (streaming) {
    const U u = __ldcs(reinterpret_cast<const U*>(p));
    V v;
    __builtin_memcpy(&v, &u, sizeof(v));
    return v;
  }
#endif
  (void)streaming;
  return *p;
}
template <typename V>
TIMEX_FFT_DEVICE void store_once(V* p, V v, bool streaming) {
  static_assert(sizeof(V) == 4 || sizeof(V) == 8, "one 4- or 8-byte access");
#ifndef TIMEX_EMULATE
  using U = std::conditional_t<sizeof(V) == 4, unsigned, uint2>;
  if (streaming) {
    U u;
    __builtin_memcpy(&u, &v, sizeof(u));
    __stcs(reinterpret_cast<U*>(p), u);
    return;
  }
#endif
  (void)streaming;
  *p = v;
}

// A hint for L2 to fetch row[0, n) ahead of its use: the lines i = part (mod parts) of its
// 128-byte lines (the CTAs of a cluster share a row; one CTA: part 0 of 1), spread over the
// threads. Every address lies in the row; no effect on results (none at all in the
// emulation). No registers held, nothing waits for it.
template <typename S>
TIMEX_FFT_DEVICE void prefetch_row_l2(const S* row, int n, unsigned part, unsigned parts) {
#if !defined(TIMEX_EMULATE)
  const char* p = reinterpret_cast<const char*>(row);
  const int64_t lines = (int64_t{n} * static_cast<int64_t>(sizeof(S)) + 127) / 128;
  for (int64_t i = part + int64_t{parts} * threadIdx.x; i < lines;
       i += int64_t{parts} * blockDim.x) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p + 128 * i));
  }
#else
  (void)row, (void)n, (void)part, (void)parts;
#endif
}

// z[n] = x[2n] + i x[2n+1] of a row of T elements (x[i] = row[i], or row[T-1-i] where
// reversed), zero from T on, in float. streaming: pairs read with load_once's hint.
template <typename S>
struct RowLoad {
  const S* row;
  int T;
  bool reversed, vec, streaming = false;
  TIMEX_FFT_DEVICE cf32 operator()(int n) const {
    const int i = 2 * n;
    if (i >= T) return {0.f, 0.f};
    if (vec) {
      const Two<S> p =
          load_once(reinterpret_cast<const Two<S>*>(row + (reversed ? T - 2 - i : i)), streaming);
      return reversed ? cf32{static_cast<float>(p.b), static_cast<float>(p.a)}
                      : cf32{static_cast<float>(p.a), static_cast<float>(p.b)};
    }
    const int i0 = reversed ? T - 1 - i : i, i1 = reversed ? T - 2 - i : i + 1;
    return {static_cast<float>(row[i0]), i + 1 < T ? static_cast<float>(row[i1]) : 0.f};
  }
};

// The inverse transform's output n is f = conj(y[2n] + i y[2n+1]): stores eps + y[i] at
// row[i] (or row[T-1-i] where reversed) for i < T, rounded to S. streaming: pairs written with
// store_once's hint.
template <typename S>
struct RowStore {
  S* row;
  int T;
  bool reversed, vec;
  float eps;
  bool streaming = false;
  TIMEX_FFT_DEVICE void operator()(int n, cf32 f) const {
    const int i = 2 * n;
    if (i >= T) return;
    const S a = static_cast<S>(eps + f.x), b = static_cast<S>(eps - f.y);
    if (vec) {
      store_once(reinterpret_cast<Two<S>*>(row + (reversed ? T - 2 - i : i)),
                 reversed ? Two<S>{b, a} : Two<S>{a, b}, streaming);
      return;
    }
    row[reversed ? T - 1 - i : i] = a;
    if (i + 1 < T) row[reversed ? T - 2 - i : i + 1] = b;
  }
};

// tw[m] = e^{-2 pi i m / kTwiddles}: any grid, any block size. The plain table: the kernels
// below read it where STAGED is false (the emulation tests compare both tables to the bit);
// the cluster launcher's table of the same entries (cluster_twiddle_kernel) is checked
// against it. A template only so that the header may be included by several translation units.
template <int = 0>
TIMEX_FFT_KERNEL(256) twiddle_kernel(cf32* __restrict__ tw) {
  for (int m = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); m < kTwiddles;
       m += static_cast<int>(gridDim.x * blockDim.x)) {
    tw[m] = twiddle_value(m);
  }
}

// The fused table of Sh (fused_table_size, timex_fft_stages.cuh), what the launchers below pass
// as tw (STAGED = true): any grid, any block size.
template <class Sh>
TIMEX_FFT_KERNEL(256) fused_twiddle_kernel(cf32* __restrict__ tw) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
       i < fused_table_size<Sh>(); i += static_cast<int>(gridDim.x * blockDim.x)) {
    tw[i] = fused_table_value<Sh>(i);
  }
}

// spec[r] = packed half spectrum (timex_fft_math.cuh) of row r of x (rows of T elements,
// read reversed where asked: the spectrum of W = w flipped), one CTA per row. tw: the fused
// table of Sh where STAGED (fused_twiddle_kernel), else the plain one (twiddle_kernel); the
// same for every kernel below, and the same bits either way.
template <typename scalar_t, class Sh, bool STAGED>
TIMEX_FFT_KERNEL(Sh::THREADS)
spectrum_kernel(const scalar_t* __restrict__ x, int T, bool reversed, cf32* __restrict__ spec,
                const cf32* __restrict__ tw) {
  launch_dependents();  // a consumer launched after this grid waits for it before its reads
  TIMEX_FFT_SHARED(raw);
  cf32* sm = reinterpret_cast<cf32*>(raw);
  const int64_t r = blockIdx.x;
  const scalar_t* row = x + r * T;
  fft<Sh, false, true, 1, STAGED>(
      sm, tw, RowLoad<scalar_t>{row, T, reversed, pairs_aligned(row, T)}, SmemStore{sm});
  TIMEX_FFT_SYNC();
  cf32* s = spec + r * Sh::M;
  split_pairs<Sh, STAGED>(
      sm, tw, [](int, int) { return NoLoads{}; },
      [s](int k, int j, cf32 pk, cf32 pj, NoLoads, cf32) {
        s[k] = pk;
        s[j] = pj;
      });
}

// out[b, c] = eps + IDFT(X^ S[c]), first T values, for the rows x[b, c] of x (B, C, T); spec
// (C, M) from spectrum_kernel. One CTA per row r = b C + c (B C CTAs). xspec: where not null,
// row r's X^ (M complex floats, as spectrum_kernel writes it) is stored at xspec + r M, for the
// backward's kspec (8 M bytes a row more than the 2 T reads and writes of a half-type row).
// channel_major: CTA i takes row (i % B) C + i / B, so that a channel's rows run together and
// its S (8 M bytes: 64 MiB over 512 channels at M = 16384, more than L2) is read from memory
// about once instead of once a row; else row i. streaming: the row's reads, out's and xspec's
// writes with the cache-streaming hints (load_once; RWKV_TIMEX_FUSED_STREAM=0: plain accesses).
// ahead: where > 0, the CTA asks L2 for the row of CTA i + ahead (the resident CTAs: the one that
// starts about when this one ends), whose first stage then waits on L2, not DRAM (at M = 16384,
// one CTA an SM, waiting on that load was 9% of the warp stall samples); 0.3-3.5% less GPU time
// where the rows take several waves (run 48 (c); RWKV_TIMEX_FUSED_PREFETCH=0: 0). Launched as a
// programmatic dependent of the spectrum kernel (launch_conv's after), its CTAs load and
// transform their rows while that grid's last CTAs run, and wait for it before the product
// (timex_fft_pdl.cuh); spec is read through plain loads for that.
template <typename scalar_t, class Sh, bool STAGED>
TIMEX_FFT_KERNEL(Sh::THREADS)
conv_kernel(const scalar_t* __restrict__ x, const cf32* spec,
            scalar_t* __restrict__ out, int C, int T, float eps, const cf32* __restrict__ tw,
            cf32* __restrict__ xspec, bool channel_major, bool streaming, int ahead) {
  TIMEX_FFT_SHARED(raw);
  cf32* sm = reinterpret_cast<cf32*>(raw);
  const int64_t i = blockIdx.x, B = gridDim.x / C;
  const auto row_of = [&](int64_t cta) { return channel_major ? (cta % B) * C + cta / B : cta; };
  const int64_t r = row_of(i);
  const scalar_t* row = x + r * T;
  if (ahead > 0 && i + ahead < gridDim.x) {
    prefetch_row_l2(x + row_of(i + ahead) * T, T, 0, 1);
  }
  fft<Sh, false, true, 1, STAGED>(
      sm, tw, RowLoad<scalar_t>{row, T, false, pairs_aligned(row, T), streaming}, SmemStore{sm});
  TIMEX_FFT_SYNC();
  wait_for_spectra(spec);  // where launched as a dependent of the spectrum kernel
  const cf32* s = spec + (r % C) * Sh::M;
  cf32* xs = xspec != nullptr ? xspec + r * Sh::M : nullptr;
  split_pairs<Sh, STAGED>(
      sm, tw, [s](int k, int j) { return AtPair{s[k], s[j]}; },
      [&](int k, int j, cf32 pk, cf32 pj, AtPair sp, cf32 w) {
        if (xs != nullptr) {
          store_once(xs + k, pk, streaming);
          store_once(xs + j, pj, streaming);
        }
        merge<Sh>(sm, k, j, product<false>(k, pk, sp.k), product<false>(j, pj, sp.j), w);
      });
  TIMEX_FFT_SYNC();
  scalar_t* o = out + r * T;
  fft<Sh, true, false, 1, STAGED>(
      sm, tw, SmemLoad{sm}, RowStore<scalar_t>{o, T, false, pairs_aligned(o, T), eps, streaming});
}

// f(std::integral_constant<int, M>{}) for the run-time M of fft_length (a power of two in [1,
// kMaxM], or 3 2^k or 5 2^k in [kMinOddM, kMaxM]); nothing for any other M.
template <typename F>
inline void with_length(int M, const F& f) {
  switch (M) {
#define TIMEX_FFT_CASE(m) \
  case m:                 \
    f(std::integral_constant<int, m>{}); break;
    TIMEX_FFT_CASE(1) TIMEX_FFT_CASE(2) TIMEX_FFT_CASE(4) TIMEX_FFT_CASE(8)
    TIMEX_FFT_CASE(16) TIMEX_FFT_CASE(32) TIMEX_FFT_CASE(64) TIMEX_FFT_CASE(128)
    TIMEX_FFT_CASE(256) TIMEX_FFT_CASE(512) TIMEX_FFT_CASE(1024) TIMEX_FFT_CASE(2048)
    TIMEX_FFT_CASE(4096) TIMEX_FFT_CASE(8192) TIMEX_FFT_CASE(16384)
    TIMEX_FFT_CASE(1536) TIMEX_FFT_CASE(3072) TIMEX_FFT_CASE(6144) TIMEX_FFT_CASE(12288)
    TIMEX_FFT_CASE(2560) TIMEX_FFT_CASE(5120) TIMEX_FFT_CASE(10240)
#undef TIMEX_FFT_CASE
    default: break;
  }
}
static_assert(kMinOddM == 1536 && kMaxM == 16384, "with_length's cases");

// f(Sh{}) with Sh the one-CTA kernels' shape of the run-time M (with_length): the wide CTAs
// (Shape<M, kThreads, 8>) where `wide` and kWideMinM <= M <= kWideMaxM, else Shape<M, kThreads>.
template <typename F>
inline void with_shape(int M, bool wide, const F& f) {
  with_length(M, [&](auto m) {
    constexpr int kM = decltype(m)::value;
    if constexpr (kM >= kWideMinM && kM <= kWideMaxM) {
      if (wide) {
        f(Shape<kM, kThreads, 8>{});
        return;
      }
    }
    f(Shape<kM, kThreads>{});
  });
}

#ifndef TIMEX_EMULATE

// ---- Host launchers: raw device pointers, the caller's stream and scratch. Each returns
// the launch's cudaError_t. Rows of T on the one-CTA transform of length M: fft_length(T) (or
// without its 3 2^k or 5 2^k, to measure one against the other; any M of with_length's that
// is >= T runs correctly), checked by runs(T, M). Requires B * C <= INT_MAX.
// tw: the fused table of M (launch_twiddles), which every launcher's kernel reads (STAGED).
// wide: the wide CTAs (with_shape); a call's launches and its table all take the same.

// CTAs of the kernel kernel_of(Sh{}) for length M (Sh of with_shape(M, wide), its threads)
// with smem bytes of dynamic shared memory that one SM of the current device keeps at once (the
// occupancy query; at least 1).
template <typename KernelOf>
int blocks_per_sm(int M, bool wide, int smem, const KernelOf& kernel_of) {
  int per_sm = 1;
  with_shape(M, wide, [&](auto sh) {
    using Sh = decltype(sh);
    const void* kernel = reinterpret_cast<const void*>(kernel_of(Sh{}));
    if (fused_ops::raise_shared_memory_limit(kernel, smem) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Sh::THREADS, smem) !=
            cudaSuccess) {
      (void)cudaGetLastError();
      per_sm = 1;
    }
  });
  return std::max(per_sm, 1);
}

inline bool runs(int64_t T, int M) {
  return supported(T) && T <= M && M <= kMaxM && length_ok(M) && (is_pow2(M) || M >= kMinOddM);
}

// The fused table of length M: twiddle_bytes(M, wide) (173 KiB at M = 16384, 11 KiB at 1024).
inline size_t twiddle_bytes(int M, bool wide) {
  size_t n = 0;
  with_shape(M, wide, [&](auto sh) { n = sizeof(cf32) * fused_table_size<decltype(sh)>(); });
  return n;
}
inline cudaError_t launch_twiddles(int M, bool wide, cf32* tw, cudaStream_t stream) {
  if (!runs(M, M)) return cudaErrorInvalidValue;
  with_shape(M, wide, [&](auto sh) {
    using Sh = decltype(sh);
    fused_twiddle_kernel<Sh><<<(fused_table_size<Sh>() + 255) / 256, 256, 0, stream>>>(tw);
  });
  return cudaGetLastError();
}

// spec (rows, M) = spectra of x (rows, T), read reversed where asked (W = w flipped: pass w
// with reversed = true).
template <typename scalar_t>
cudaError_t launch_spectrum(const scalar_t* x, int64_t rows, int64_t T, int M, bool wide,
                            bool reversed, cf32* spec, const cf32* tw, cudaStream_t stream) {
  if (!runs(T, M) || rows > INT_MAX) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  cudaError_t err = cudaErrorInvalidValue;
  with_shape(M, wide, [&](auto sh) {
    using Sh = decltype(sh);
    err = fused_ops::launch_with_smem(spectrum_kernel<scalar_t, Sh, true>,
                                      static_cast<int>(rows), Sh::THREADS, Sh::SMEM, stream, x,
                                      static_cast<int>(T), reversed, spec, tw);
  });
  return err;
}

// out (B, C, T) = eps + causal convolution of k (B, C, T) with the W whose spectra spec (C, M)
// holds; kspec: where not null, receives k's spectra (B C, M), for launch_backward's kspec;
// channel_major, streaming and ahead as conv_kernel's. after: a programmatic dependent launch
// (fused_ops::launch_with_smem_after) of the spectrum kernel that made spec, launched just before
// on `stream` (the caller checks for sm_90 and newer).
template <typename scalar_t>
cudaError_t launch_conv(const scalar_t* k, const cf32* spec, scalar_t* out, int64_t B, int64_t C,
                        int64_t T, int M, bool wide, float eps, const cf32* tw,
                        cudaStream_t stream, cf32* kspec = nullptr, bool channel_major = true,
                        bool streaming = true, int ahead = 0, bool after = false) {
  if (!runs(T, M) || B * C > INT_MAX) return cudaErrorInvalidValue;
  if (B * C == 0) return cudaSuccess;
  cudaError_t err = cudaErrorInvalidValue;
  with_shape(M, wide, [&](auto sh) {
    using Sh = decltype(sh);
    err = fused_ops::launch_with_smem_after(
        after, conv_kernel<scalar_t, Sh, true>, static_cast<int>(B * C), Sh::THREADS, Sh::SMEM,
        stream, k, spec, out, static_cast<int>(C), static_cast<int>(T), eps, tw, kspec,
        channel_major, streaming, ahead);
  });
  return err;
}

#endif  // TIMEX_EMULATE

}  // namespace rwkv::fft
