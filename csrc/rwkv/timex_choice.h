// RWKV TimeX on CUDA: the algorithm a call runs (choose_cuda): RWKV_TIMEX_ALGO's forced one,
// or auto's choice between the direct kernels and the FFTs by dtype, B, C and T, with the
// measurements behind each bound. Host code, included by timex_cuda.cu (the ops and
// timex_algorithm); tests/test_properties_paths.py mirrors the rules.
#pragma once

#include <cstdint>

#include "common/checks.h"
#include "rwkv/timex_fft.h"
#include "rwkv/timex_fft_fused.h"
#include "rwkv/timex_fft_tc.h"

namespace rwkv::choice {

using fused_ops::Tensor;

// Longest T that the direct kernels take when RWKV_TIMEX_ALGO is auto, by dtype; longer rows
// go to the FFT (the fused on-chip kernels up to T = 16384, the cluster kernels beyond). The
// direct kernels' cost grows as T^2, the FFT's as T log T plus a fixed cost per call.
// Measured on the H100, forward + backward op time (benchmarks/results/
// timex_crossover_h100.md and timex_crossover_half_h100.md, 2026-11-27, after the fused FFT
// backward's register bound). float32 (3xTF32 direct kernels against the fused FFT with its
// one-pass backward): with 128 and 256 rows B C the direct kernels win up to T = 640 (there by
// 22% and 7%; at 768 the FFT by 22%), with 512 rows up to 512 (even), with 1024 to 32768 rows
// up to 256 or 384 (at 512 the FFT by 14% to 21%). Against the FFT kernels of run 49 (H200,
// GPU busy time, run 50 (b); 256 to 16384 rows, T = 128 to 768): the direct kernels up to 256
// (by 14-39% from 1024 rows, tied at 512 rows, the FFT by 13% at 256 rows), the FFT from 384
// (by 6-66% at 384, 24-140% at 512; at (1, 256, 640), where 640 was the bound, 2.4x):
// kF32DirectMaxT at any rows (but one row of up to 512 channels: f32_direct_max_t).
// float16 and bfloat16 (bf16/fp16 tensor-core kernels, whose tiles take more of the batch at
// once as B grows): with B = 16 and 32 the direct kernels win up to T = 1536 (there by 30% and
// 32%), with B = 4 and 8 up to 1024 (at 1536 the FFT by 3-5%), with B = 1 and 2 and 1024
// channels the FFT from 1024 or 1536 on (at 1536 by 1.3x to 2.2x): kHalfDirectMaxT (at most;
// below it half_direct_max_t now, against the later FFT kernels), and
// kHalfBatchedMaxT from B = kHalfBatch on where T % 8 == 0: past 1024 the direct kernels' rows
// loaded 16 bytes at a time only at such T (timex_tc_launch.cuh), and the FFT (the fused
// kernels' M = 1536, the tensor-core N = 4096) won at every other T measured (H200, GPU busy
// time, run 44 (d); B = 16 and 32: 14-25% less at T = 1025, C = 512, 24-42% at (16, 512, 1300),
// (16, 256, 1500), (32, 256, 1100), (16, 1024, 1100)) while the direct kernels took 18-29% less
// at 1152 and 1280 and tied at 1408 (C = 512). Against the later FFT kernels (H200, GPU busy
// time, run 47 (e): fft_tc at N = 2560 and 3072, fft_fused with k's spectra kept; B = 16 and
// 32, C = 256 to 1024, T % 8 == 0): the direct kernels' time steps every 128 of T (1296 and
// 1400 alike, a fifth more than 1200); in bfloat16 they took 1-26% less than fft_tc up to 1200,
// fft_tc 2-20% less from 1296 on; in float16 17-30% less than fft_fused up to 1200, tied
// (within 4%) at 1296 and 1400, fft_fused 6-9% less at 1536 from C = 512 (2% more at 256):
// kHalfBatchedMaxT at those steps, 1280 where fft_tc runs, else 1408. After fft_fused's split
// pass took its loads one pair ahead (run 48 (d), float16): direct 16-39% less at 1152 and 1280,
// between 1280 and 1408 within 6% either way (fft_fused ahead from C = 512, behind at 256); the
// bound is as it was. Rows whose length is a multiple of 4 but not 8 now go 8 bytes at a time
// (staging_unit; element by element before): float16 direct at (16, 1024, 1100) 0.765 -> 0.467 ms
// GPU time, 0.7-19% less than fft_fused from B = 16 up to T = 1280 (C = 256 to 2048), 15-16%
// more at 1300 and 1404 (run 49 (a)): kHalfBatchedMaxT4. At T % 4 == 2 (4-byte copies) the
// two tied at (16, 1024, 1102), so those stay on the FFT. In bfloat16 against fft_tc at T % 4
// == 0: direct 4-6% less at C = 512 and 9-17% at 256 (T = 1100, 1276), 3-4% more from C = 1024
// (1100, 1148) and 3% more at (16, 512, 1276): kHalfBatchedMaxT4Tc up to kHalfBatchedMaxC4Tc
// channels. Up to T = 1024 (half_direct_max_t) against the FFT kernels of run 49 (H200, GPU busy
// time, B = 1 to 32, C = 256 to 2048, T = 256 to 1024 in steps of 128; the FFT the faster of
// fft_fused and fft_tc): the FFT's time is mostly fixed (about 25 us a call plus 20 ns a row at
// T = 1024) while the direct kernels' grows as C T^2, and up to 8 rows (time folds) little
// with B (B = 1 takes as long as 2); so from 1024 channels the fused FFT took 15-60% less than
// the direct kernels from T = 384 with B <= 8 (2.4-2.8x less at B = 1, T = 1024; at B = 1 from
// T = 192, and from T = 64 at 2048 channels, 35-44%), and with B = 9 to 32 from 512 channels
// fft_tc 2-31% less past 768 or 896 in bfloat16; with up to 128 channels the direct kernels up
// to 1024 (within 11% either way at T = 1024, 15-90% less below; run 50 (b)). float64 (FMA
// direct kernels, cuFFT): the FFT from 512 on with 256 rows, from 257 on with 4096 rows and
// more.
constexpr int64_t kF32DirectMaxT = 256;
// float32 with one batch row and at most kF32OneRowMaxC channels: the fused FFT from T = 193
// (run 53 (i), H200, GPU busy time, forward + backward, the wide CTAs in: at T = 256 with 64 to
// 512 channels the FFT 20-22% less, at 192 5-6% less, at 128 the direct kernels 20% less; with
// B = 2 at T = 256 the direct kernels still 3-6% less, from B = 4 23-38%).
constexpr int64_t kF32OneRowDirectMaxT = 192;
constexpr int64_t kF32OneRowMaxC = 512;
constexpr int64_t kHalfDirectMaxT = 1024;
constexpr int64_t kHalfBatchedMaxT = 1408;
constexpr int64_t kHalfBatchedMaxTc = 1280;  // bfloat16 where fft_tc runs
constexpr int64_t kHalfBatchedMaxT4 = 1280;    // float16 at T % 8 == 4
constexpr int64_t kHalfBatchedMaxT4Tc = 1152;  // bfloat16 where fft_tc runs, at T % 8 == 4
constexpr int64_t kHalfBatchedMaxC4Tc = 512;   // with at most so many channels
constexpr int64_t kHalfBatch = 16;
constexpr int64_t kHalfSplitMaxT = 1280;  // past kHalfDirectMaxT, up to 8 rows: half_split_direct
constexpr int64_t kF64DirectMaxT = 256;

// The fused on-chip FFT kernels where they apply (one CTA per row up to T = 16384, a
// thread-block cluster per row up to 65536), else the library FFT path. The cluster kernels
// pad the row to M = 24576, 32768, 40960, 49152 or 65536, the library to the next 2^a 3^b 5^c
// 7^d: for every T in (16384, 65536] the cluster M is within 1.5x of the library's (at most
// 1.493x, T = 16385). Measured on the H100, forward + both gradients through eager autograd, the
// cluster kernels were faster at every ratio tried up to 1.64x: at (1, 384, 20000) with
// M = 32768 bfloat16 0.714 against 0.732 ms, float32 0.734 against 0.945 (benchmarks/results/
// issue29_runs/run9_*); with M = 24576 (1.23x) 0.645 against 0.731 and 0.658 against 0.765;
// at T = 22050, 32768, 44100, 49152 and 65536 1.3x to 2.5x faster (benchmarks/results/
// timex_cluster_p3_h100.md). So the cluster kernels wherever they run.
//
// bfloat16 where tc_faster(B, C, T): the tensor-core kernels (timex_fft_tc.h, T <= 16384).
// Measured forward + backward op time against the fused kernels at C = 512 on the H200
// (benchmarks/results/timex_crossover_tc_h100.md, its last sections): W's spectrum, a
// full-length transform and 4 N bytes per channel, is shared by B / 2 pairs, so small B
// favours the fused kernels. Even B after the coalesced middle layout (274c093; run 33) unless
// marked; odd B with the kernels built for it (from N = 8192 the last rows share transforms)
// and the last row's grad_k and grad_w through one inverse (run 37, f661ed9; C = 512 and
// 1024):
//   T <= 1024 (N <= 2048; run 49's kernels, GPU busy time, run 50 (a), C = 256 to 2048): from
//     T = 640 with B = 2 and 4 to 32 3-22% less from C = 512 (at 256 within 10% either way, B =
//     2 22-24% less); with 3 8-14% less at C = 1024, 2-15% more else; up to T = 512 13-160%
//     more (but at B = 2 up to 512 channels, where the direct kernels run);
//   with B = 3 against run 49's fused kernels (GPU busy time, run 50 (d), C = 256 to 2048):
//     1536 < T <= 2048 7-9% less at C = 512, 2-13% more else; 2048 < T <= 2560 (the fused
//     kernels' M = 2560) 1-28% more; 2560 < T <= 3072 3-12% less up to C = 1024, even at 2048;
//     3072 < T <= 4096 3-45% more;
//   1536 < T <= 2048 (N = 4096): 10-22% less time with B = 2, 8-16% with 3, 14-21% with 4;
//     with B = 1 4-5% less at C = 512, 44-59% more at C = 1024;
//   1024 < T <= 1536 (N = 2560 to 1280, 3072 past it) against the fused kernels' M = 1536 (GPU
//     busy time, run 45 (b), (c)): at N = 2560 with B = 2 5-17% less from C = 512, 9% more at
//     256; with 3 3% less at C = 2048, 1-25% more below; with 4 5-24% less from C = 512, 13%
//     more at 256; with 16 15-30% less (with B = 8 0-23% less and with 1 24-80% more, measured
//     with a backward of 160 threads, 2-12% slower than the 64 kept); at N = 3072 with B = 2
//     6-13% less; with 3 7-10% less at C = 512, 3-19% more else; with 4 14-21% less from C =
//     512, 2-5% more at 256; with 8 12-24% less, with 16 18-26%; with 1 14-64% more;
//   2048 < T <= 3072 (N = 6144; runs 31, 32): 4-11% less with B = 2, 12-20% with 4, 21-29% with
//     8; 37-43% more with 1;
//   3072 < T <= 4096 (N = 8192): 2-6% less with B = 4, 3-6% with 5, 7-10% with 6, 1-3% with
//     7; 9-11% more with 2, 2-7% with 3, up to 43% with 1 (C = 1024; at C = 512 from 36% more
//     to 2% less between calls: 0.1 ms, bound by the host); after the forward's 128 threads
//     (b9ac990; GPU busy time, run 42) with B = 2 0.5-16% less from C = 256 to 2048, 4-7% more
//     at C = 128; with 3 from 13% less to 39% more (C = 128 to 2048: left on the fused kernels);
//   4096 < T <= 6144 (N = 12288; runs 30, 32): 16-20% less with B = 2, 31% with 4; 20-31% more
//     with 1;
//   6144 < T <= 8192 (N = 16384): 13-15% less with B = 2, 14-17% with 3, 22-23% with 5, 26-27%
//     with 4; 11-17% more with 1;
//   8192 < T <= 12288 (N = 20480, 24576): 24-32% less with B = 2, 34-43% with 3, 36-49% with 4
//     and 8, 40-48% with 5; with 1 1-26% less from C = 256 to 2048 (at C = 128 4% more at
//     T = 8193, 11% less at 10000, 1% more at 12288); then with 1 against the fused kernels'
//     M = 10240 and 12288 (run 44 (d)): 8-15% less from C = 512, 3-7% more at C = 256 up to
//     10240 and 0-2% less past it, 44-52% more at C = 128;
//   T > 12288 (N = 28672, 32768): with W's spectra two channels a CTA (a0abc1d), 13-16% less
//     with B = 2, 13-17% with 3, 20-22% with 5 (18-20% with 4 before a0abc1d); 4-9% more with 1
//     (after W's spectra went to float16: 2% less at T = 12300 and tied at 16384, C = 512);
//     with 1 after the L1 prefetches (5ce62b2, run 38) 5-10% less at C = 512 and 1024, 23-26%
//     more at C = 128 (its 64 spectrum CTAs leave half the SMs idle).
// Not float16, though as fast: their float16 planes round every pass, which bfloat16's output
// rounding hides (2-norm errors 1.0-1.1x the FFT conv's) but float16's does not: up to 4.4x
// the error of conv1d in float16 (2-norm 6-9.3e-4 against 2.1-3.1e-4 from T = 1024), past the
// package's 2x; the fused kernels' is the FFT conv's (benchmarks/results/timex_fft_tc_h100.md).
inline bool tc_faster(int64_t B, int64_t C, int64_t T) {
  if (B == 1) return T > 8192 && C >= 512;
  if (T <= 512) return false;
  if (B == 3 && T <= 4096) return T > 2560 && T <= 3072;
  if (T <= 1024) return true;
  if (T <= 1536) return C >= 512 || B >= 8 || (B == 2 && T > 1280);
  if (T > 3072 && T <= 4096) return B >= 4 || (B == 2 && C >= 256);
  return true;
}

inline fft::Kernel fastest_fft(const Tensor& k) {
  if (k.scalar_type() == torch::headeronly::ScalarType::BFloat16 &&
      tc_faster(k.size(0), k.size(1), k.size(2)) && fft::tc_supported(k)) {
    return fft::Kernel::kFftTc;
  }
  if (fft::fused_supported(k)) return fft::Kernel::kFftFused;
  if (k.size(2) > fft::kFusedMaxT && fft::cluster_supported(k)) return fft::Kernel::kFftCluster;
  return fft::Kernel::kFftLibrary;
}

// The longest T <= 1024 at which auto takes the half types' direct kernels for B rows of C
// channels (the crossover comment above, run 50 (a), (b)): from 9 rows (tiles of 16 or 32 rows),
// up to 8 (time folds), by channels.
// tc_fft: bfloat16 where fft_tc runs (the FFT past T = 512 then).
// With up to 512 channels and up to 3 rows against the fused FFT on the wide CTAs (run 53 (i),
// H200, GPU busy time, float16; bfloat16 runs the same fused kernels at B = 1 and 3 up to T =
// 1024): with B = 1 and C = 256 to 512 the FFT 16-40% less at T = 384 and 512, so the direct
// kernels up to 256 (512 before); with B = 2 and 3 tied at T = 640 (B = 2; the FFT 10% less at
// B = 3, C = 256) and the FFT 5-18% less at 768, so up to 640 (768 before). With 8 rows of 256
// channels the direct kernels 9-13% less at T = 896 and 1024 (tied at 192 channels), so up to
// 1024 there (768 before; not where bfloat16's FFT runs on tensor cores, not measured against
// it); 4 to 7 rows keep 768 (at (4, 512, 768) the direct kernels 18% less).
// With 4 to 8 rows against the split Toeplitz kernel (timex_tc_toeplitz_split.cuh; run 54 (d),
// H200, GPU busy time, float16 against fft_fused): at (8, 512, 1024) the direct kernels 6% less
// (the FFT 2% less before), at (4, 256, 1024) 4% (tied), at (4, 1024, 768) 17% (19% less at
// (4, 512, 768)), at (8, 1024, 896) 2%; the FFT 9% less at (4, 1024, 1024) and 7% at (3, 512,
// 1024). So float16 at even T up to 1024 from 4 rows of up to 256 channels and at 8 rows of up
// to 512, and up to 768 with 4 to 8 rows of up to 1024 channels (256 before). Not at odd T,
// whose rows the direct kernels stage element by element: the FFT 11% less at (4, 256, 1021),
// 6% at (8, 512, 1023) (run 54 (e)). bfloat16, whose FFT there runs on tensor cores (4% less
// than the direct kernels at (8, 512, 1024)), as it was.
inline int64_t half_direct_max_t(int64_t B, int64_t C, bool tc_fft, bool even_t) {
  if (C <= 128) return 1024;  // few channels: the FFT's fixed cost per call
  if (B > 8) {
    if (C <= 256) return 1024;
    if (B < 16) return tc_fft ? 768 : 896;
    return tc_fft ? 896 : 1024;
  }
  if (even_t && !tc_fft && B >= 4 && (C <= 256 || (B == 8 && C <= 512))) return 1024;
  if (B == 8 && C <= 256 && !tc_fft) return 1024;
  if (even_t && !tc_fft && B >= 4 && C <= 1024) return 768;
  if (C > 512) return B > 1 ? 256 : C > 1024 ? 0 : 128;  // B = 1: the direct tiles half empty
  if (B == 1) return 256;
  if (B == 2 && tc_fft) return 512;
  if (B <= 3) return 640;
  return 768;
}

// Whether auto takes the half types' direct kernels at kHalfDirectMaxT < T <= kHalfSplitMaxT
// for B <= 8 rows of C channels: the split Toeplitz kernel against the FFT at its
// length M = 1536 (fft_fused; fft_tc for bfloat16 from 512 channels or 8 rows: tc_faster),
// whose time steps up at T = 1025 while the direct kernels' grows as T^2 (run 54 (d), H200,
// GPU busy time): float16 at 8 rows of 512 channels 11-15% less than the FFT at T = 1100 to
// 1280 ((8, 512, 1188): 139 against 156 us), at 4 rows of 256 channels 14% at 1280; at (4,
// 512, 1100-1280) within 2%, with 1024 channels 5% less at (8, 1024, 1100) (bfloat16 at (4,
// 1024, 1100) 4% more), with 2 rows the FFT 17% less; at 1536 the FFT 9% less. bfloat16
// against its FFT: 8-14% less at (4, 512, 1100), (8, 512, 1100) and (8, 512, 1280).
// Odd T (rows staged element by element: at (8, 512, 1187) float16 the split kernel 94.2 us
// against 84.5 at 1188, grad_w 60.0 against 50.5; run 55 (a)): float16 against fft_fused the
// FFT 13% less at (6, 256, 1251) (run 54 (e)), tied at (8, 512, 1187) (156.7 against 156.5 us,
// run 55 (c)); bfloat16 where fft_tc runs (tc_faster: 512 channels or 8 rows) the
// direct kernels 3-8% less at (8, 512, 1101), (4, 512, 1101), (4, 512, 1257), (6, 512, 1187),
// (8, 384, 1187), (8, 512, 1187) and (8, 512, 1279), 14-25% at (5, 512, 1025), (8, 256, 1101)
// and (8, 300, 1279) (run 55 (c)). So at odd T bfloat16 up to 512 channels against fft_tc.
inline bool half_split_direct(int64_t B, int64_t C, int64_t T, bool tc_fft) {
  if (B < 4 || B > 8) return false;
  if (T % 2 != 0) return tc_fft && tc_faster(B, C, T) && C <= 512;
  return C <= 256 || (C <= 512 && (B == 8 || tc_fft));
}

// The longest T at which auto takes float32's direct kernels for B rows of C channels.
inline int64_t f32_direct_max_t(int64_t B, int64_t C) {
  return B == 1 && C <= kF32OneRowMaxC ? kF32OneRowDirectMaxT : kF32DirectMaxT;
}

// auto's choice between the direct kernels and the FFT (the crossover lengths above).
inline bool takes_direct(const Tensor& k) {
  using torch::headeronly::ScalarType;
  const int64_t T = k.size(2);
  switch (k.scalar_type()) {
    case ScalarType::Float:
      return T <= f32_direct_max_t(k.size(0), k.size(1));
    case ScalarType::Double: return T <= kF64DirectMaxT;
    default: {
      const bool tc_fft = k.scalar_type() == ScalarType::BFloat16 && fft::tc_supported(k);
      const bool even_t = T % 2 == 0;
      if (T <= kHalfDirectMaxT) {
        return T <= half_direct_max_t(k.size(0), k.size(1), tc_fft, even_t);
      }
      if (T <= kHalfSplitMaxT && half_split_direct(k.size(0), k.size(1), T, tc_fft)) {
        return true;
      }
      if (k.size(0) < kHalfBatch) return false;
      if (T % 8 == 0) return T <= (tc_fft ? kHalfBatchedMaxTc : kHalfBatchedMaxT);
      if (T % 4 != 0) return false;
      return tc_fft ? T <= kHalfBatchedMaxT4Tc && k.size(1) <= kHalfBatchedMaxC4Tc
                    : T <= kHalfBatchedMaxT4;
    }
  }
}

inline fft::Kernel choose_cuda(const Tensor& k) {
  switch (fft::algo_override()) {
    case fft::Algo::kDirect: return fft::Kernel::kDirect;
    case fft::Algo::kFftLibrary: return fft::Kernel::kFftLibrary;
    case fft::Algo::kFft: return fastest_fft(k);
    // Forced fused kernels where they cannot run (length, dtype, device): the fastest FFT.
    case fft::Algo::kFftFused:
      return fft::fused_supported(k) ? fft::Kernel::kFftFused : fastest_fft(k);
    case fft::Algo::kFftCluster:
      return fft::cluster_supported(k) ? fft::Kernel::kFftCluster : fastest_fft(k);
    case fft::Algo::kFftTc: return fft::tc_supported(k) ? fft::Kernel::kFftTc : fastest_fft(k);
    case fft::Algo::kAuto: break;
  }
  return takes_direct(k) ? fft::Kernel::kDirect : fastest_fft(k);
}

}  // namespace rwkv::choice
