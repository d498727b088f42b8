// RWKV TimeX, on-chip FFT convolution: a row's DFT_M as Stockham stages through shared memory
// (stage, fft), with the stage twiddles in the order a warp reads them (the staged and fused
// tables). The lengths, shapes, complex arithmetic and in-register DFTs are timex_fft_math.cuh's.
//
// DFT_M is a Stockham autosort FFT (natural order in and out) of radix-RADIX stages and one
// smaller last stage where log2 M is not a multiple of log2 RADIX; M = 3 2^k and 5 2^k end in
// a stage of radix 3, 5, 6, 10, 12 or 20 (stage_radix). Stage s has NS = the product of the earlier
// radices and does, for each butterfly j in [0, M/R):
//   v[r] = in[j + r M/R] * w^(r (j % NS)),  w = e^{-2 pi i / (NS R)}
//   v = DFT_R(v)  (in registers)
//   out[(j / NS) NS R + j % NS + r NS] = v[r]
// in place in shared memory: a stage's reads all finish (a barrier) before its writes, except in
// the last stage, whose writes go exactly to its own reads' addresses (NS R = M). Each thread owns
// M / R / THREADS butterflies of every stage (rounded up, the last round's beyond M / R idle), j =
// tid + q THREADS, so that a warp's reads are consecutive. The inverse DFT is conj(DFT(conj U)):
// merge stores conj(U), the same forward stages run, and the final store negates the imaginary
// part.
//
#pragma once

#include "rwkv/timex_fft_math.cuh"

namespace rwkv::fft {

struct SmemLoad {
  const cf32* sm;
  TIMEX_FFT_DEVICE cf32 operator()(int n) const { return sm[pad(n)]; }
};
struct SmemStore {
  cf32* sm;
  TIMEX_FFT_DEVICE void operator()(int n, cf32 v) const { sm[pad(n)] = v; }
};

// The stage twiddles in stage order ("staged" table; the thread-block-cluster kernels use it): a
// stage of radix R (a power of two) after NS reads lo[r] = w^r (r = 1 .. min(3, R - 1)) and hi[h] =
// w^(4 h) (h = 1 .. R/4 - 1), w = e^{-2 pi i (j % NS) / (NS R)}; a stage of radix 3, 5, 6, 10, 12
// or 20 reads w^r for r = 1 .. R - 1. Unstaged, they are entries of the table of all e^{-2 pi i m /
// kTwiddles}: consecutive j, a warp's butterflies, hit entries kTwiddles / (NS R) apart, up to 32
// sectors per load. The staged table holds the same values (the same bits: twiddle_value of the
// same m, root_value where NS R is not a power of two) per stage as rows lo[1], lo[2], .., hi[1],
// .. of NS entries each, indexed by j % NS: a warp's load reads consecutive entries. The stages
// after the first follow each other (stage_radix).
TIMEX_FFT_HD constexpr int staged_count(int R) {
  return !is_pow2(R) ? R - 1 : (R - 1 < 3 ? R - 1 : 3) + (R / 4 > 1 ? R / 4 - 1 : 0);
}
// Offset of the rows of Sh's stage after NS in the staged table.
template <class Sh>
TIMEX_FFT_HD constexpr int staged_offset(int NS) {
  int off = 0;
  for (int ns = stage_radix<Sh>(1); ns < NS; ns *= stage_radix<Sh>(ns)) {
    off += ns * staged_count(stage_radix<Sh>(ns));
  }
  return off;
}
// Entries of the staged table of Sh.
template <class Sh>
TIMEX_FFT_HD constexpr int staged_size() {
  return Sh::M == 1 ? 0 : staged_offset<Sh>(Sh::M);
}
// Entry i < staged_size<Sh>() of the staged table.
template <class Sh>
TIMEX_FFT_DEVICE cf32 staged_value(int i) {
  int ns = stage_radix<Sh>(1), R = 1;
  for (;; ns *= R) {
    R = stage_radix<Sh>(ns);
    if (i < ns * staged_count(R)) break;
    i -= ns * staged_count(R);
  }
  const int nlo = R - 1 < 3 ? R - 1 : 3, slot = i / ns;
  const int r = !is_pow2(R) || slot < nlo ? slot + 1 : 4 * (slot - nlo + 1);
  return root_value(r * (i % ns), ns * R);
}

// The one-CTA kernels' table (timex_fft_kernels.cuh, fused_twiddle_kernel): the staged table
// of Sh, then the split/merge twiddles W_{2M}^k for k in [0, M/2] (root_value; tw[k kMaxM /
// M] for M a power of two), so that a warp's split pass, consecutive k, reads consecutive
// entries (from the plain table: k kMaxM/M apart, up to 32 sectors per load for M < 4096).
template <class Sh>
TIMEX_FFT_HD constexpr int fused_table_size() {
  return staged_size<Sh>() + Sh::M / 2 + 1;
}
// Entry i < fused_table_size<Sh>(): the same bits as the plain table's entry it stands for.
template <class Sh>
TIMEX_FFT_DEVICE cf32 fused_table_value(int i) {
  constexpr int kStaged = staged_size<Sh>();
  return i < kStaged ? staged_value<Sh>(i) : root_value(i - kStaged, 2 * Sh::M);
}
// W_{2M}^k (0 <= k <= M/2) from the fused table (STAGED) or the plain one (M a power of two).
template <class Sh, bool STAGED>
TIMEX_FFT_DEVICE cf32 pair_twiddle(const cf32* __restrict__ tw, int k) {
  if constexpr (STAGED) {
    constexpr int kStaged = staged_size<Sh>();
    return tw[kStaged + k];
  } else {
    static_assert(is_pow2(Sh::M), "M = 3 2^k and 5 2^k read the fused table");
    return tw[k * (kMaxM / Sh::M)];
  }
}

// One Stockham stage of radix R after NS (see the top of the file). load(n) -> cf32 reads
// input n, store(n, v) writes output n. ZERO_HIGH: the input is a real row's packed z, whose
// entries n >= M/2 are zero (2n >= M >= T): not read. SYNC_MID: a barrier between the reads
// and the writes (both in shared memory, at different addresses). STAGED: tw is the staged table
// (above), else the table of all e^{-2 pi i m / kTwiddles}; the same values either way. Where
// THREADS does not divide the M / R butterflies (the stages of radix 3, 5, 6, 10, 12, 20), the last
// round of them leaves threads idle. Those stages are last stages, in place (a thread writes only
// the addresses it read): each butterfly stores as soon as it is done, so that the up to six a
// thread owns are not all held in registers at once (they spilled).
template <class Sh, int R, int NS, bool ZERO_HIGH, bool SYNC_MID, bool STAGED, typename Load,
          typename Store>
TIMEX_FFT_STAGE void stage(const cf32* __restrict__ tw, const Load load, const Store store) {
  constexpr int M = Sh::M, THREADS = Sh::THREADS, NB = M / R;  // butterflies
  constexpr int BF = (NB + THREADS - 1) / THREADS;                // per thread, at most
  constexpr bool EVEN = NB % THREADS == 0;
  constexpr bool POW2 = is_pow2(R);
  constexpr bool STORE_NOW = !POW2;
  static_assert(NB * R == M && (NB >= THREADS || !POW2), "R <= E");
  static_assert(POW2 || (NS * R == M && !SYNC_MID), "radix 3, 5, 6, 10, 12, 20: the last stage");
  static_assert(STAGED || POW2, "radix 3, 5, 6, 10, 12, 20 read the staged table");
  const int tid = static_cast<int>(threadIdx.x);
  cf32 v[BF][R];
#pragma unroll
  for (int q = 0; q < BF; ++q) {
    const int j = tid + q * THREADS;
    if (!EVEN && j >= NB) break;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      v[q][r] = ZERO_HIGH && POW2 && R > 1 && r >= R / 2 ? cf32{0.f, 0.f}
                                                          : load(j + r * (M / R));
    }
    if constexpr (NS > 1 && !POW2) {
      const cf32* row = tw + staged_offset<Sh>(NS) + (j & (NS - 1));
#pragma unroll
      for (int r = 1; r < R; ++r) v[q][r] = v[q][r] * row[(r - 1) * NS];
    } else if constexpr (NS > 1) {
      // w^r = w^(r % 4) w^(r - r % 4): 3 + R/4 - 1 table loads instead of R - 1 (each a
      // register pair held across the loads' latency), at most one rounding more.
      cf32 lo[4], hi[R / 4 > 1 ? R / 4 : 1];
      if constexpr (STAGED) {
        constexpr int NLO = R - 1 < 3 ? R - 1 : 3;
        const cf32* row = tw + staged_offset<Sh>(NS) + (j & (NS - 1));
#pragma unroll
        for (int r = 1; r < 4 && r < R; ++r) lo[r] = row[(r - 1) * NS];
#pragma unroll
        for (int h = 1; h < R / 4; ++h) hi[h] = row[(NLO + h - 1) * NS];
      } else {
        const int k0 = (j & (NS - 1)) * (kTwiddles / (NS * R));
#pragma unroll
        for (int r = 1; r < 4 && r < R; ++r) lo[r] = tw[r * k0];
#pragma unroll
        for (int h = 1; h < R / 4; ++h) hi[h] = tw[4 * h * k0];
      }
#pragma unroll
      for (int r = 1; r < R; ++r) {
        const cf32 wr = r < 4 ? lo[r] : r % 4 == 0 ? hi[r / 4] : lo[r % 4] * hi[r / 4];
        v[q][r] = v[q][r] * wr;
      }
    }
    dft<R>(v[q]);
    if constexpr (STORE_NOW) {
#pragma unroll
      for (int r = 0; r < R; ++r) store(j + r * NS, v[q][r]);  // j < NS
    }
  }
  if constexpr (SYNC_MID) TIMEX_FFT_SYNC();
#pragma unroll
  for (int q = 0; q < BF && !STORE_NOW; ++q) {
    const int j = tid + q * THREADS, k = j & (NS - 1);
    if (!EVEN && j >= NB) break;
#pragma unroll
    for (int r = 0; r < R; ++r) store((j - k) * R + k + r * NS, v[q][r]);
  }
}

// DFT_M of the row that load gives, stages NS onwards: the first stage reads through load
// (shared memory where IN_SMEM: then its writes wait for a barrier), the last writes through
// store, the ones between read and write shared memory sm; a barrier follows every write to
// sm but the last stage's (the caller's to place). ZERO_HIGH and STAGED as in stage.
template <class Sh, bool IN_SMEM, bool ZERO_HIGH, int NS = 1, bool STAGED = false,
          typename Load, typename Store>
TIMEX_FFT_DEVICE void fft(cf32* sm, const cf32* __restrict__ tw, const Load& load,
                          const Store& store) {
  constexpr int M = Sh::M;
  constexpr int R = stage_radix<Sh>(NS);
  constexpr bool FIRST = NS == 1, LAST = NS * R == M;
  const SmemLoad rd{sm};
  const SmemStore wr{sm};
  if constexpr (M == 1) {
    store(0, load(0));
  } else if constexpr (FIRST && LAST) {
    stage<Sh, R, NS, ZERO_HIGH, false, STAGED>(tw, load, store);
  } else if constexpr (FIRST) {
    stage<Sh, R, NS, ZERO_HIGH, IN_SMEM, STAGED>(tw, load, wr);
    TIMEX_FFT_SYNC();
    fft<Sh, true, false, NS * R, STAGED>(sm, tw, load, store);
  } else if constexpr (LAST) {
    stage<Sh, R, NS, false, false, STAGED>(tw, rd, store);
  } else {
    stage<Sh, R, NS, false, true, STAGED>(tw, rd, wr);
    TIMEX_FFT_SYNC();
    fft<Sh, true, false, NS * R, STAGED>(sm, tw, load, store);
  }
}

}  // namespace rwkv::fft
