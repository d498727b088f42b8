// RWKV TimeX, on-chip FFT convolution: the real row's half spectrum from its complex transform
// and back (split_pairs, merge; the algebra at the top of timex_fft_math.cuh) and the packed
// spectra's products, which the one-CTA kernels (timex_fft_kernels.cuh, timex_fft_backward.cuh)
// and the cluster kernels share.
#pragma once

#include "rwkv/timex_fft_stages.cuh"

namespace rwkv::fft {

// A pair's two values (at k and at j = M - k), for split_pairs' fetch.
struct AtPair {
  cf32 k, j;
};
// A fetch that loads nothing.
struct NoLoads {};

// Turns Z = DFT_M(z) in sm into the packed half spectrum, pair by pair: visit(k, j, Pk, Pj, d,
// w) for each k in [0, M/2] that this thread owns, j = M - k (j = 0 for k = 0, where Pk = Pj =
// P[0] = (X[0], X[M]); j = k for k = M/2), w = W_{2M}^k (pair_twiddle, for merge; 1 at k = 0,
// where merge does not read it) and d = fetch(k, j): what the visit reads from global memory.
// Thread t owns k = t + q THREADS in (0, M/2) and thread 0 also k = 0 and M/2, both in its
// first round: M/2 is a multiple of THREADS (Shape), so every thread visits M/2 / THREADS pairs
// and none a round more (thread 0 used to take M/2 in a round of its own, which the other warps
// waited for at the next barrier). The twiddle and d are loaded one pair ahead, before the
// visit of the pair before, so that their latency overlaps that visit's work rather than
// stalling every pair in turn (at M = 16384 the conv and backward kernels waited on them in 9%
// and 12% of ncu's warp stall samples, one CTA an SM and nothing else to run; 3-7% less GPU
// time this way, run 48 (b)); fetch must not read what the visit of an earlier pair writes.
// The owner of k is the only thread that touches sm at k and j in this pass, so visit may
// write there (merge does). STAGED: tw is the fused table (fused_table_size), else the plain
// one.
template <class Sh, bool STAGED, typename Fetch, typename Visit>
TIMEX_FFT_DEVICE void split_pairs(const cf32* sm, const cf32* __restrict__ tw, const Fetch& fetch,
                                  const Visit& visit) {
  constexpr int M = Sh::M, H = M / 2;
  static_assert(M == 1 || H % Sh::THREADS == 0, "every thread owns as many pairs");
  int k = static_cast<int>(threadIdx.x);
  if constexpr (M == 1) {
    if (k == 0) {
      const cf32 z = sm[pad(0)];
      const cf32 p{z.x + z.y, z.x - z.y};
      visit(0, 0, p, p, fetch(0, 0), cf32{1.f, 0.f});
    }
    return;
  }
  if (k >= H) return;
  // The pair that round k visits after k = 0's: k, or M/2 for k = 0 (thread 0's first round).
  const auto pair = [](int q) { return q == 0 ? H : q; };
  auto d = fetch(pair(k), M - pair(k));
  cf32 w = pair_twiddle<Sh, STAGED>(tw, pair(k));
  decltype(d) dn{};
  if (k == 0) dn = fetch(0, 0);  // k = 0's, visited first
  for (;;) {
    if (k == 0) {
      const cf32 z = sm[pad(0)];
      const cf32 p{z.x + z.y, z.x - z.y};
      visit(0, 0, p, p, dn, cf32{1.f, 0.f});
    }
    const int a = pair(k), j = M - a, kn = k + Sh::THREADS;
    cf32 wn{};
    if (kn < H) {
      dn = fetch(kn, M - kn);
      wn = pair_twiddle<Sh, STAGED>(tw, kn);
    }
    const cf32 zk = sm[pad(a)], zj = sm[pad(j)];
    const cf32 sum = scale(zk + conj(zj), 0.5f), diff = zk - conj(zj);
    const cf32 t = w * cf32{diff.y * 0.5f, -diff.x * 0.5f};
    visit(a, j, sum + t, conj(sum - t), d, w);
    if (kn >= H) break;
    k = kn;
    d = dn;
    w = wn;
  }
}

// Packed spectra products, a * b or a * conj(b) (P[0]'s two reals multiply separately, each
// rounded: mul_rn).
template <bool CONJ>
TIMEX_FFT_DEVICE cf32 product(int k, cf32 a, cf32 b) {
  if (k == 0) return {mul_rn(a.x, b.x), mul_rn(a.y, b.y)};
  return CONJ ? mul_conj(a, b) : a * b;
}

// The inverse of split_pairs for one pair, with 1/N folded in: writes conj(U[k]), conj(U[j])
// to sm, whose forward DFT_M conjugated is the real row y as y[2n] + i y[2n+1]. w: W_{2M}^k
// (pair_twiddle; not read at k = 0).
template <class Sh>
TIMEX_FFT_DEVICE void merge(cf32* sm, int k, int j, cf32 yk, cf32 yj, cf32 w) {
  constexpr float h = 1.0f / (2 * Sh::M);
  if (k == 0) {  // yk = (Y[0], Y[M])
    sm[pad(0)] = {(yk.x + yk.y) * h, -(yk.x - yk.y) * h};
    return;
  }
  const cf32 e = scale(yk + conj(yj), h);
  const cf32 o = scale(mul_conj(yk - conj(yj), w), h);
  sm[pad(k)] = {e.x - o.y, -(e.y + o.x)};  // conj(e + i o)
  sm[pad(j)] = {e.x + o.y, e.y - o.x};     // conj(conj(e) + i conj(o))
}
// The same with w read from tw (STAGED as in split_pairs).
template <class Sh, bool STAGED>
TIMEX_FFT_DEVICE void merge(cf32* sm, const cf32* __restrict__ tw, int k, int j, cf32 yk,
                            cf32 yj) {
  merge<Sh>(sm, k, j, yk, yj, k == 0 ? cf32{1.f, 0.f} : pair_twiddle<Sh, STAGED>(tw, k));
}

}  // namespace rwkv::fft
