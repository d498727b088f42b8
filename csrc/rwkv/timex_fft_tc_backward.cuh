// RWKV TimeX on tensor cores, the backward (the transform: timex_fft_tc.cuh): both gradients
// in one kernel, per (channel c, pair of batch rows b0 = 2p, b1 = b0 + 1):
//   z = g[b0, c] + i g[b1, c],  x = k[b0, c] + i k[b1, c]  (zeros for a missing b1)
//   grad_k[b0, c] + i grad_k[b1, c] = IDFT(Z conj(W^))      (the correlation of z with h)
//   grad_w[c, T-1-s] = Re sum_p IDFT(Z_p conj(X_p))[s]
// The last because Re(z[t+s] conj(x[t])) = g[b0, t+s] k[b0, t] + g[b1, t+s] k[b1, t]: the pair's
// two rows of the batch sum at once. Up to N = kMaxTwoSetN (24576), Z and X are transformed
// together (two plane sets, 8 N bytes of shared memory), so neither spectrum leaves the chip. Past
// it (N = 28672 and 32768) Z is transformed first and its planes copied (4 N bytes: as much as
// fits in shared memory beside the planes, the rest to the CTA's scratch in global memory,
// z_shared_steps), then X in the same planes, and the middle reads Z's fragments from the
// copy. Either way the middle adds Z conj(X) to the channel's running sum `acc` (N complex
// floats, each entry read and written by one thread: in global memory, L2-resident, or where
// ACC_SMEM in shared memory after the planes and slots) and sends Z conj(W^) on to grad_k's
// inverse. Each row of z is scaled by its own power of two, x's rows so that the pair's two terms
// keep one weight (x_shifts). Per channel one more inverse, of acc, gives grad_w: 3 transforms per
// pair and one per channel, as the FMA backward (timex_fft_backward.cuh) has per row. The last row
// of an odd B, alone in its pair, takes 2 instead of 3 where the blocks pair (mirror_blocks; the
// ODD_B build, as the conv kernel's): z = g[b0, c] + i k[b0, c] in one transform, G and X parted in
// the middle (middle_backward_row), G conj(W^) through the inverse; a row holding inf or NaN goes
// the pair's way (k's must not reach grad_k).
//
// Work items as the FMA backward's: channel c's pairs split into `splits` consecutive ranges,
// item i = c splits + s. splits = 1: a CTA loops over its items and ends each channel with
// grad_w's inverse; splits > 1: one item per CTA, its partial sum left in acc, and a second
// launch (reduce) sums a channel's partials in s order and runs the inverse. Every sum runs in
// a fixed order, so the result is deterministic.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "rwkv/timex_fft_tc_forward.cuh"

namespace rwkv {
namespace fft_tc {

// The longest transform whose two plane sets, 8 N bytes, fit sm_90's 227 KiB per block;
// longer ones (kMaxN) keep Z's planes in global scratch (z_off_chip).
constexpr int kMaxTwoSetN = 24576;
TIMEX_FFT_HD constexpr bool z_off_chip(int N) { return N > kMaxTwoSetN; }
// Threads per CTA: threads(N), but 512 from N = 16384 on, where 128 KiB of planes keep one CTA
// per SM: with 256 (8 warps an SM) the kernel took 385 µs at (8, 256, 8192) bfloat16 and 435 at
// (2, 1024, 8192), with 512 330 and 383 (benchmarks/results/timex_fft_tc_h100.md).
// At N = 6144, 256 rather than threads(N) = 192: two CTAs of 192 at 168 registers kept 12 warps
// an SM, and the kernel stalled with half its issue slots idle (ncu on the H200: run 30).
// With acc on chip (acc_smem) past N = 6144, 512: one CTA an SM (192 KiB at N = 12288).
// At N = 3072, 128 rather than 96 (4 CTAs an SM instead of 5, the middle's 12 steps 3 a warp):
// 315 us against 379 at (16, 1024, 1100), 100 against 106 at (2, 2048, 1100) (bfloat16, H200,
// run 45 (a); 96 left C = 1024 channels 1.55 waves of resident CTAs, 128 1.94). At N = 2560, 64
// (its 10 steps 5 a warp, 8 CTAs an SM): 293 us and 88 against 376 and 104 with 160.
TIMEX_FFT_HD constexpr int backward_threads(int N, bool acc_smem = false) {
  return N >= 16384 || (acc_smem && N > 6144) ? 512
         : N == 6144                             ? 256
         : N == 3072                             ? 128
         : N == 2560                             ? 64
                                                 : threads(N);
}
// Where acc starts in shared memory (acc_smem): after the planes and 4 floats a warp.
TIMEX_FFT_HD constexpr int backward_acc_offset(int N, bool acc_smem = false) {
  return (z_off_chip(N) ? 4 : 8) * N + 16 * (backward_threads(N, acc_smem) / 32);
}
// The planes, the 4 floats a warp, then (acc_smem) acc's 8 N bytes.
TIMEX_FFT_HD constexpr int backward_smem_bytes(int N, bool acc_smem = false) {
  return backward_acc_offset(N, acc_smem) + (acc_smem ? 8 * N : 0);
}
// Whether the kernel is built with acc in shared memory too (ACC_SMEM; timex_fft_tc.cu picks it
// where an SM holds 512 of its threads, as it does without). Measured on the H200 (run 32),
// bitwise the same results either way:
//   N = 3072: 48 KiB a CTA, 4 an SM as without: 0-3% faster (run 45 (a));
//   N = 2560: 40 KiB, 5 CTAs of 64 threads an SM against 8 (auto leaves it off there): 11%
//     faster at (3, 512) and (4, 512), -3% to +5% at other C <= 512, 15-21% slower from C = 1024
//     (run 45 (a));
//   N = 6144: 96 KiB a CTA, two an SM as with acc in global memory (48 KiB, the registers'
//     limit): acc's read and write per pair, 96 KiB a CTA through L2, gone, the kernel 10-15%
//     faster;
//   N = 12288: one CTA of 512 threads and 192 KiB instead of two of 256 and 96: 4-8% faster at
//     B >= 4, within 2% at B = 1 and 2 (3-5% slower there in run 34: auto leaves it off);
//   N = 8192 (one CTA of 512 and 128 KiB instead of two of 256 and 64): -2% to +6%, not built;
//   N = 4096 (64 KiB: 3 CTAs of 128 threads an SM instead of 4): 6-28% slower, not built.
TIMEX_FFT_HD constexpr bool has_acc_smem(int N) {
  return N == 2560 || N == 3072 || N == 6144 || N == 12288;
}
// Where z_off_chip(N), Z's copy (MiddleLane::save_m: 1 KiB a step of the middle, N / 256
// steps): zsteps of them in shared memory after the slots, the rest in the CTA's global
// scratch. zsteps: as many as fit beside the planes under smem_limit (the device's bytes per
// block), a multiple of the warps (each warp's alike). At N = 32768 on sm_90 96 of 128, at
// 28672 all 112. Measured on the H200 (run 39, the kernel's time, bfloat16), with the copy's
// layout that keeps a warp's 16-byte accesses consecutive: at (2, 1024, 16384) 602 us with no
// step on chip, 594 with 32, 587 with 64, 580 with 96; (8, 512, 16384) 1040, 1023, 1006, 982;
// (3, 512, 16384) 499, 500, 499, 497; (3, 512, 14000) 501 with none, 494 with all 112. (The
// layout alone, from lanes 32 bytes apart: 632 -> 602 us at (2, 1024, 16384).)
TIMEX_FFT_HD constexpr int z_shared_steps(int N, int64_t smem_limit) {
  if (!z_off_chip(N)) return 0;
  const int warps = backward_threads(N) / 32;
  const int64_t fit = (smem_limit - backward_smem_bytes(N)) / 1024 / warps * warps;
  return fit < 0 ? 0 : fit < N / 256 ? static_cast<int>(fit) : N / 256;
}
// Global scratch per CTA for the rest of Z's copy.
TIMEX_FFT_HD constexpr int64_t backward_scratch_bytes(int N, int zsteps) {
  return z_off_chip(N) ? 1024 * int64_t(N / 256 - zsteps) : 0;
}
// The register cap: 128 registers a thread (2 CTAs of 256 threads per SM; 1 of 512).
// At the conv kernel's 80 the two sets' fragments and the running sum spill about 300 bytes a
// thread.
TIMEX_FFT_HD constexpr int backward_min_blocks(int N, bool acc_smem = false) {
  return 2 * 256 / backward_threads(N, acc_smem);
}

// The scales of x's rows (k's pair, xscale) given z's row shifts sz (g's pair): x's row j
// times 2^(A - sz[j]), so that the two rows' products of scales are both 2^A and grad_w's
// Re(z conj x) = 2^A (g[b0] * k[b0] + g[b1] * k[b1]) weighs the pair's terms alike. A takes the
// row whose term is the larger (the larger k max against its g scale) into [1, 2); the other
// is then at most 2, and as much smaller as its term is. At most 2^126 a row (A clamped: only
// for rows near the ends of bfloat16's range). Rows whose g or k is zero add nothing: their x
// row is scaled by 0 (a NaN stays NaN, 0 times it; load_rows gives a row holding inf or NaN the
// largest magnitude inf, so its scale is 2^(1 - sz)). Returns A.
TIMEX_FFT_DEVICE int x_shifts(const float (&gmax)[2], const float (&kmax)[2], const int (&sz)[2],
                              float (&xscale)[2]) {
  bool any = false;
  int best = 0, least_sz = 0;
  for (int j = 0; j < 2; ++j) {
    if (!(gmax[j] > 0.f && kmax[j] > 0.f)) continue;
    const int v = scale_exponent(kmax[j]) - sz[j];
    best = any ? std::max(best, v) : v;
    least_sz = any ? std::min(least_sz, sz[j]) : sz[j];
    any = true;
  }
  const int A = any ? std::min(1 - best, 126 + least_sz) : 0;
  for (int j = 0; j < 2; ++j) {
    xscale[j] = gmax[j] > 0.f && kmax[j] > 0.f ? std::ldexp(1.f, A - sz[j]) : 0.f;
  }
  return A;
}

// grad_w of channel c from its spectrum sum acc (middle layout), whose largest |component| in
// every thread is amax: acc scaled into float16's range, the inverse DFT_16 and passes, the
// real part reversed to grad_w's row. The caller syncs before the call: acc's entries may have
// been written by other threads, and the planes must be free.
template <typename S, int N, int TH>
TIMEX_FFT_DEVICE void grad_w_inverse(uint16_t* re, uint16_t* im, const cf32* acc, float amax,
                                     uint16_t* grad_w_row, int T, const DftFrags<Plane>& f16) {
  const int e = scale_exponent(amax);
  middle_from_spectrum<Plane, N, TH>(re, im, acc, std::ldexp(1.f, 1 - e), f16);
  TIMEX_FFT_SYNC();
  // The planes hold IDFT_u(acc) 2^(1-e) (unitary); acc = Z_u conj(X_u) of the unitary
  // transforms, and IDFT(Z conj X) = sqrt(N) IDFT_u(Z_u conj(X_u)).
  const float scale = std::sqrt(float(N)) * std::ldexp(1.f, e - 1);
  inverse_out<S, N, TH>(re, im, f16, ReversedRealSink<S>{grad_w_row, T, scale});
}

// The channel's last batch row of an odd B and its grad_w through one inverse (splits = 1: the
// row is the channel's last term): the planes hold P = G conj(W^) staged and acc the Hermitian
// part H of the channel's sum (middle_backward_row's FINAL), amax H's largest |component| over
// the block, sums this thread's sums of |H|^2 and |P|^2 (middle_backward_row's). F = a H + i b
// P, the powers of two a and b taking both parts' 2-norms into [64, 128) (norm_shifts' reason:
// the planes' rounding, relative to |F|, then costs either part at most sqrt 2 of its own
// accuracy), through the inverse middle and passes: grad_w's row (reversed) from the real part,
// as grad_w_inverse, and grad_k's row from the imaginary part, times k_scale (the row's own
// scale as the pair's sink has it). One inverse instead of two. slots: 2 TH / 32 floats, free.
template <typename S, int N, int TH>
TIMEX_FFT_DEVICE void row_and_grad_w(uint16_t* re, uint16_t* im, const cf32* acc, float amax,
                                     const double (&sums)[2], float* slots,
                                     uint16_t* grad_w_row, uint16_t* grad_k_row,
                                     const uint16_t* grad_k, int T, float k_scale,
                                     const DftFrags<Plane>& f16) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int e = scale_exponent(amax);
  const float pre = std::ldexp(1.f, 1 - e);  // H's components below 2, as grad_w_inverse
  // |H pre|^2, |P|^2 (inf where the first leaves float's range: then not together, below)
  float ss[2] = {static_cast<float>(sums[0] * pre * pre), static_cast<float>(sums[1])};
  block_sum2<N, TH>(ss, slots);
  // Where either part holds inf or NaN, the shared inverse would spread it to the other's
  // outputs: then P goes through alone (grad_k's row; H not read) and H through its own
  // inverse after it (grad_w_inverse), as without this routine. Only on such inputs.
  const bool together = std::isfinite(ss[0]) && std::isfinite(ss[1]);
  int sh[2];
  for (int j = 0; j < 2; ++j) {  // 2^sh[j] takes the part's 2-norm into [64, 128)
    int ex = 0;
    if (ss[j] > 0.f) std::frexp(std::sqrt(ss[j]), &ex);
    sh[j] = ss[j] > 0.f ? 7 - ex : 0;
  }
  const float a = pre * std::ldexp(1.f, sh[0]), b = std::ldexp(1.f, sh[1]);
  const MiddleLane<Plane, N> ml(f16, lane);
  for (int it = warp; it < N / 256; it += TH / 32) {
    uint32_t pr[2][2], pi[2][2];  // F's B fragments for the inverse: entries 2u, 2u + 1 of tile t
#pragma unroll
    for (int t = 0; t < 2; ++t) {
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int i = middle_index(it, lane, t, u);
        cf32 a0{0.f, 0.f}, a1{0.f, 0.f}, p0, p1;
        if (together) load2(acc + i, a0, a1);
        staged_two<Plane>(re, im, i, p0, p1);  // P's
        pr[u][t] = pack2<Plane>(a * a0.x - b * p0.y, a * a1.x - b * p1.y);
        pi[u][t] = pack2<Plane>(a * a0.y + b * p0.x, a * a1.y + b * p1.x);
      }
    }
    __syncwarp();  // every lane's reads of the block are done before the stores
    ml.inverse_store(re, im, it, pr, pi);
  }
  TIMEX_FFT_SYNC();
  // The planes hold IDFT_u(F) (unitary); IDFT(A) = sqrt(N) IDFT_u(A_u), as grad_w_inverse.
  inverse_out<S, N, TH>(re, im, f16,
                        GradWAndRowSink<S>(together ? grad_w_row : nullptr, grad_k_row, T,
                                           std::sqrt(float(N)) / a, k_scale / b, grad_k));
  if (!together) {
    TIMEX_FFT_SYNC();  // the inverse's readers of the planes are done
    grad_w_inverse<S, N, TH>(re, im, acc, amax, grad_w_row, T, f16);
  }
}

// g, k: (B, C, T) contiguous of S; wz, wexp: spectrum_tc_kernel's; grad_k (B, C, T), grad_w
// (C, T). acc_all: N complex floats per CTA (splits = 1; null where ACC_SMEM) or per item
// (splits > 1: read by the reduce launch, one CTA per channel; where ACC_SMEM each item's sum is
// copied there from shared memory at its end). scratch_all: backward_scratch_bytes(N, zsteps) per
// CTA of the grid (null where that is 0); zsteps: z_shared_steps (0 for the reduce launch), the
// dynamic shared memory backward_smem_bytes(N, ACC_SMEM) + 1024 zsteps.
template <typename S, int N, bool ACC_SMEM = false, bool ODD_B = false>
TIMEX_FFT_TC_KERNEL(backward_threads(N, ACC_SMEM), backward_min_blocks(N, ACC_SMEM))
backward_tc_kernel(const uint16_t* __restrict__ g, const uint16_t* __restrict__ k,
                   const ch16* wz, const int* wexp,
                   uint16_t* __restrict__ grad_k, uint16_t* __restrict__ grad_w, int B, int C,
                   int T, int splits, bool reduce, cf32* __restrict__ acc_all,
                   uint16_t* __restrict__ scratch_all, int zsteps) {
#if TIMEX_FFT_TC_CODE
  static_assert(valid_length(N), "N: a transform length (valid_length)");
  static_assert(!ACC_SMEM || (has_acc_smem(N) && !z_off_chip(N)), "acc on chip: has_acc_smem");
  static_assert(!ODD_B || mirror_blocks(N), "a row's g and k in one transform: mirror_blocks");
  constexpr int TH = backward_threads(N, ACC_SMEM);
  constexpr bool kOffChip = z_off_chip(N);
  TIMEX_FFT_SHARED(smem);
  uint16_t* re = reinterpret_cast<uint16_t*>(smem);  // Z's set; X's at re + 2 N on chip
  uint16_t* im = re + N;
  float* slots = reinterpret_cast<float*>(re + (kOffChip ? 2 : 4) * N);  // 2 x 2 TH / 32
  // Where ACC_SMEM: acc after the slots (16-byte aligned: 8 N + 16 TH / 32 bytes in).
  cf32* const acc_smem = reinterpret_cast<cf32*>(smem + backward_acc_offset(N, ACC_SMEM));
  // Where z_off_chip: Z's copy, its first zsteps steps after the slots, the rest in the CTA's
  // scratch.
  uint16_t* const zshared = reinterpret_cast<uint16_t*>(smem + backward_acc_offset(N));
  uint16_t* const scratch =
      kOffChip ? scratch_all + int64_t(blockIdx.x) * (backward_scratch_bytes(N, zsteps) / 2)
               : nullptr;
  // The last row of an odd B stages W and acc there too (TIMEX_FFT_TC_ROW_STAGE; the copy is
  // not in use then): every warp's kRowStageBytes, which zsteps covers (tc_supported).
  constexpr bool kRowStage = kOffChip && TIMEX_FFT_TC_ROW_STAGE;
  char* const row_stage = kRowStage ? reinterpret_cast<char*>(zshared) : nullptr;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32;
  DftFrags<Plane> f16;
  f16.init(lane);
  if (reduce) {  // channel blockIdx.x's partial sums, in s order, into its first
    const int c = static_cast<int>(blockIdx.x);
    cf32* part = acc_all + int64_t(c) * splits * N;
    float amax = 0.f;
    for (int i = tid; i < N; i += TH) {
      cf32 a = part[i];
      for (int s = 1; s < splits; ++s) a = a + part[int64_t(s) * N + i];
      part[i] = a;
      amax = std::fmax(amax, norm_inf(a));
    }
    // block_max's barrier also orders the sums before their readers.
    amax = block_max<N, TH>(amax, slots);
    grad_w_inverse<S, N, TH>(re, im, part, amax, grad_w + int64_t(c) * T, T, f16);
    return;
  }
  const int pairs = (B + 1) / 2, items = C * splits;
  const int vec = std::min(vector_width(T, g), vector_width(T, k));
  for (int item = static_cast<int>(blockIdx.x); item < items;
       item += static_cast<int>(gridDim.x)) {
    const int c = item / splits, s = item % splits;
    const int p0 = static_cast<int>(int64_t(s) * pairs / splits);
    const int p1 = static_cast<int>(int64_t(s + 1) * pairs / splits);
    // (acc_all is null where ACC_SMEM and splits = 1: no sum leaves the chip.)
    cf32* const acc_global =
        ACC_SMEM && splits == 1
            ? nullptr
            : acc_all + int64_t(splits == 1 ? static_cast<int>(blockIdx.x) : item) * N;
    cf32* const acc = ACC_SMEM ? acc_smem : acc_global;
    float amax = 0.f;
    bool grad_w_done = false;  // by row_and_grad_w
    for (int p = p0; p < p1; ++p) {
      const int b0 = 2 * p, b1 = b0 + 1;
      bool two = b1 < B;
      int64_t r0 = (int64_t(b0) * C + c) * T, r1 = (int64_t(b1) * C + c) * T;
      TIMEX_FFT_SYNC();  // the previous pair's (or channel's) reads of the planes are done
      float gmax[2], kmax[2], zscale[2], xscale[2];
      if constexpr (ODD_B) {
        if (!two) {  // a row alone: its g and k rows in one transform, where both are finite
          float m[2];
          load_rows<S, N, TH>(re, im, g + r0, k + r0, T, vec, false, slots, m);
          const int sg = scale_shift(m[0]), sx = scale_shift(m[1]);
          // g's and k's products 2^(sg + sx) must be undone within float's normal range.
          if (std::isfinite(m[0]) && std::isfinite(m[1]) && std::abs(sg + sx) <= 125) {
            const float scale[1][2] = {{std::ldexp(1.f, sg), std::ldexp(1.f, sx)}};
            scale_sets<S, N, 1, TH>(re, im, scale);
            TIMEX_FFT_SYNC();
            forward_transform<N, 1, TH>(re, im, f16);
            wait_for_spectra(wz, wexp);  // W's from here on
            const float pscale = std::ldexp(1.f, -(sg + sx));
            const float ug = m[0] > 0.f ? 0.5f : 0.f, ux = m[1] > 0.f ? 0.5f : 0.f;
            if (splits == 1) {  // the channel's last term: grad_w and this row in one inverse
              double sums[2];
              amax = middle_backward_row<Plane, N, TH, true, kRowStage>(
                  re, im, wz + int64_t(c) * N, acc, p == p0, pscale, ug, ux, f16, sums,
                  row_stage);
              TIMEX_FFT_SYNC();  // acc's and the planes' writers are done
              amax = block_max<N, TH>(amax, slots);
              // (block_sum2's slots after block_max's, which other warps may still read)
              row_and_grad_w<S, N, TH>(re, im, acc, amax, sums, slots + 2 * (TH / 32),
                                       grad_w + int64_t(c) * T,
                                       grad_k + r0, grad_k, T, std::ldexp(1.f, wexp[c] - sg),
                                       f16);
              grad_w_done = true;
              continue;
            }
            amax = middle_backward_row<Plane, N, TH, false, kRowStage>(
                re, im, wz + int64_t(c) * N, acc, p == p0, pscale, ug, ux, f16, nullptr,
                row_stage);
            TIMEX_FFT_SYNC();
            inverse_out<S, N, TH>(re, im, f16,
                                  PairSink<S>(grad_k + r0, grad_k + r0, false, T,
                                              std::ldexp(1.f, wexp[c] - sg), 0.f, 0.f, grad_k));
            continue;
          }
          TIMEX_FFT_SYNC();  // the planes' and slots' readers are done: g's row alone, below
        }
      }
      // z: g's rows, each scaled by its own power of two (grad_k's rows keep their own
      // accuracy); x: k's rows scaled to match (x_shifts).
      load_rows<S, N, TH>(re, im, g + r0, two ? g + r1 : nullptr, T, vec, false, slots, gmax);
      // Exactly one g row holding inf or NaN (the same in every thread): a shared transform
      // would spread it to the other row's grad_k. The finite row goes alone (r0, reloaded), the
      // other's grad_k is all NaN (nan_row: the FFT's whole-row contract), and grad_w's sum,
      // which the definition makes non-finite, is made NaN (pscale NaN). A non-finite k only
      // reaches grad_w's sum, non-finite anyway.
      uint16_t* nan_row = nullptr;
      float poison = 1.f;
      if (two && std::isfinite(gmax[0]) != std::isfinite(gmax[1])) {
        const bool first_ok = std::isfinite(gmax[0]);
        nan_row = grad_k + (first_ok ? r1 : r0);
        r0 = first_ok ? r0 : r1;
        two = false;
        poison = NAN;
        TIMEX_FFT_SYNC();  // load_rows' readers of the slots are done
        load_rows<S, N, TH>(re, im, g + r0, nullptr, T, vec, false, slots, gmax);
      }
      const int sz[2] = {scale_shift(gmax[0]), scale_shift(gmax[1])};
      zscale[0] = std::ldexp(1.f, sz[0]), zscale[1] = std::ldexp(1.f, sz[1]);
      int shift;
      if constexpr (kOffChip) {  // Z first, its planes to the scratch, then X on chip
        const float zs[1][2] = {{zscale[0], zscale[1]}};
        scale_sets<S, N, 1, TH>(re, im, zs);
        TIMEX_FFT_SYNC();
        forward_transform<N, 1, TH>(re, im, f16);  // ends with a barrier
        {  // each warp copies the fragments of the middle's steps that it will run
          const MiddleLane<Plane, N> m(f16, lane);
          for (int it = tid / 32; it < N / 256; it += TH / 32) {
            uint32_t b[2][4];
            m.load_m(re, im, it, b);
            if (it < zsteps) {
              m.save_m(zshared, it, b);
            } else {
              m.save_m(scratch, it - zsteps, b);
            }
          }
        }
        TIMEX_FFT_SYNC();  // the planes are free for X
        load_rows<S, N, TH>(re, im, k + r0, two ? k + r1 : nullptr, T, vec, false,
                            slots + 2 * (TH / 32), kmax);
        shift = x_shifts(gmax, kmax, sz, xscale);
        const float xs[1][2] = {{xscale[0], xscale[1]}};
        scale_sets<S, N, 1, TH>(re, im, xs);
        TIMEX_FFT_SYNC();
        forward_transform<N, 1, TH>(re, im, f16);
        wait_for_spectra(wz, wexp);  // W's from here on (at once after the first pair)
        // Z_u conj(X_u) = Z's planes times conj(X's) 2^-shift (the unitary transforms).
        amax = middle_backward<Plane, N, TH, true>(re, im, scratch, zshared, re, im,
                                                   wz + int64_t(c) * N, acc,
                                                   p == p0, poison * std::ldexp(1.f, -shift),
                                                   f16, zsteps);
      } else {  // both sets on chip: Z's at re, im, X's at re + 2 N, im + 2 N
        load_rows<S, N, TH>(re + 2 * N, im + 2 * N, k + r0, two ? k + r1 : nullptr, T, vec,
                            false, slots + 2 * (TH / 32), kmax);
        shift = x_shifts(gmax, kmax, sz, xscale);
        const float scale[2][2] = {{zscale[0], zscale[1]}, {xscale[0], xscale[1]}};
        scale_sets<S, N, 2, TH>(re, im, scale);
        TIMEX_FFT_SYNC();
        forward_transform<N, 2, TH>(re, im, f16);
        wait_for_spectra(wz, wexp);  // W's from here on (at once after the first pair)
        amax = middle_backward<Plane, N, TH, false>(re, im, re, im, re + 2 * N, im + 2 * N,
                                                    wz + int64_t(c) * N, acc, p == p0,
                                                    poison * std::ldexp(1.f, -shift), f16);
      }
      TIMEX_FFT_SYNC();
      inverse_out<S, N, TH>(re, im, f16,
                            PairSink<S>(grad_k + r0, two ? grad_k + r1 : grad_k + r0, two, T,
                                        std::ldexp(1.f, wexp[c] - sz[0]),
                                        std::ldexp(1.f, wexp[c] - sz[1]), 0.f, grad_k));
      if (nan_row != nullptr) fill_nan<S, TH>(nan_row, T);
    }
    if (splits == 1) {
      if (!ODD_B || !grad_w_done) {  // (a constant for even B: its kernel as before)
        TIMEX_FFT_SYNC();  // grad_k's copy from the planes is done
        amax = block_max<N, TH>(amax, slots);
        grad_w_inverse<S, N, TH>(re, im, acc, amax, grad_w + int64_t(c) * T, T, f16);
      }
    } else if constexpr (ACC_SMEM) {  // the item's sum to the reduce launch
      TIMEX_FFT_SYNC();  // middle_backward_row wrote other threads' entries
      for (int it = tid / 32; it < N / 256; it += TH / 32) {
        for (int t = 0; t < 2; ++t) {
          cf32 v[4];
          load4(acc, it, lane, t, v);
          store4(acc_global, it, lane, t, v);
        }
      }
    }
  }
#endif
}

// fn(kernel, threads, smem bytes) with the backward kernel for acc on chip or not (ACC_SMEM,
// has_acc_smem) and B (ODD_B where B is odd and the blocks pair).
template <typename S, int N, typename Fn>
void with_backward_kernel(bool acc_smem, int64_t B, Fn&& fn) {
  const auto pick = [&](auto acc) {
    constexpr bool kAcc = decltype(acc)::value;
    if constexpr (mirror_blocks(N)) {
      if (B % 2 == 1) {
        return fn(backward_tc_kernel<S, N, kAcc, true>, backward_threads(N, kAcc),
                  backward_smem_bytes(N, kAcc));
      }
    }
    fn(backward_tc_kernel<S, N, kAcc, false>, backward_threads(N, kAcc),
       backward_smem_bytes(N, kAcc));
  };
  if constexpr (has_acc_smem(N)) {
    if (acc_smem) return pick(std::true_type{});
  }
  pick(std::false_type{});
}

}  // namespace fft_tc
}  // namespace rwkv
