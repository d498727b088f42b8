// RWKV TimeX for H < T <= 2H (H = CS::M, the cluster's complex length): the convolution of a
// row as two halves of H, each half-length product an FFT convolution of real length N = 2H
// on a cluster of CS::P CTAs, instead of one transform of M >= T complex values on a larger
// cluster. At T = 65536 (H = 32768), forward: six transforms of 32768 (2 per channel, 4 per
// row) on a 2-CTA cluster in place of three of 65536 on a 4-CTA one: each CTA holds 16384
// values either way and does twice the transforms, but the H100 keeps 66 clusters of 2
// resident against 30 of 4, so 64 rows run in one wave instead of three, and the 2-CTA
// transform is the shorter (fewer values cross the cluster): 0.34 against 0.59 ms of kernels
// for forward + backward at (1, 64, 65536) (benchmarks/results/timex_halves_h100.md).
//
// With w' = w reversed in time (the lags: out[t] = eps + sum_{u <= t} w'[t-u] k[u]), the
// halves k0 = k[0, H), k1 = k[H, T), likewise g0, g1, and the length-N real DFTs
//   W0 = DFT(w'[0, H)),  Wf = DFT(w'[0, T)),  K0, K1, G0, G1 (each zero-padded to N),
// S = (-1)^f at frequency f (a circular shift by H = N/2), every product below is free of
// wrap-around in the outputs kept (each IDFT keeps its first H or T - H values):
//   out[0, H)        = IDFT(W0 K0)                          (lags 0 .. H-1)
//   out[H, T)        = IDFT(S Wf K0 + W0 K1)                (k0 at lags H+t-u in [1, T), k1)
//   grad_k[0, H)     = IDFT(G0 W0* + S G1 Wf*)
//   grad_k[H, T)     = IDFT(G1 W0*)
//   grad_w'[0, H)    = IDFT(sum_b G0 K0* + G1 K1* + S G1 K0*)
//   grad_w'[H, T)    = IDFT(sum_b G1 K0*)                   (grad_w[T-1-d] = grad_w'[d])
// (X* the conjugate). S is exact: a sign per frequency, the same for f and N - f (N/2 even),
// none at the packed entry of f = 0 and f = H.
//
// Cluster layout, pairs, merge, combine and barriers as in timex_fft_cluster_kernels.cuh.
// spec holds per channel [W0, Wf] (2M complex floats, kept for the backward); the scratch
// arrays are written and read only by the thread that owns a frequency pair, so they need no
// barrier.
#pragma once

#include "rwkv/timex_fft_cluster_kernels.cuh"

namespace rwkv::fft {

// v S at frequency k: -v at odd k. The packed entry of k = 0 holds f = 0 and f = M, both even.
TIMEX_FFT_DEVICE cf32 shift_half(int k, cf32 v) { return (k & 1) ? cf32{-v.x, -v.y} : v; }

// The transform of a real row of n elements (read reversed where asked) into this CTA's
// shared memory, as every cluster kernel loads one.
template <typename scalar_t, class CS>
TIMEX_FFT_DEVICE void cluster_load_transform(cf32* sm, const cf32* tw, const cf32* twc,
                                             const scalar_t* row, int n, bool reversed) {
  fft<typename CS::Local, false, false, 1, true>(
      sm, tw,
      ClusterLoad<scalar_t, CS>{RowLoad<scalar_t>{row, n, reversed, pairs_aligned(row, n)},
                                cluster_rank(), twc},
      SmemStore{sm});
}

// The inverse of the merged spectrum in shared memory and its first n values (+ eps) to row
// (reversed where asked). Enters after the merge pass, leaves after the combine's reads.
template <typename scalar_t, class CS>
TIMEX_FFT_DEVICE void cluster_inverse_store(cf32* sm, const cf32* tw, const cf32* twc,
                                            scalar_t* row, int n, bool reversed, float eps) {
  cluster_sync();  // the merge's writes (some remote) are complete
  fft<typename CS::Local, true, false, 1, true>(sm, tw, SmemLoad{sm}, SmemStore{sm});
  cluster_sync();
  cluster_combine<CS>(sm, twc, RowStore<scalar_t>{row, n, reversed, pairs_aligned(row, n), eps});
  cluster_sync_reads();  // partners' combine reads of this CTA's shared memory are done
}

// out (B, C, T) = eps + the causal convolution of k (B, C, T) with w (C, T), H < T <= 2H;
// scratch: M complex floats per cluster. With `spectra`, cluster i (of gridDim.x / P) does
// channels i, i + clusters, ...: [W0, Wf] of the channel into spec (C, 2M), then its rows, b in
// order; else rows i, i + clusters, ... of the B C, with spec from halves_spectrum_kernel.
// kspec: where not null, [K0, K1] of row r to kspec[2 r M, 2 (r + 1) M) (for the backward).
template <typename scalar_t, class CS>
TIMEX_CLUSTER_KERNEL(CS)
halves_forward_kernel(const scalar_t* __restrict__ w, const scalar_t* __restrict__ x,
                      cf32* __restrict__ spec, cf32* __restrict__ scratch,
                      scalar_t* __restrict__ out, int B, int C, int T, float eps, bool spectra,
                      const cf32* __restrict__ tw, const cf32* __restrict__ twc,
                      cf32* __restrict__ kspec) {
#if TIMEX_CLUSTER_CODE
  constexpr int H = CS::M;
  TIMEX_FFT_SHARED(raw);
  cf32* sm = reinterpret_cast<cf32*>(raw);
  const int cluster = static_cast<int>(blockIdx.x / CS::P);
  const int clusters = static_cast<int>(gridDim.x / CS::P);
  cf32* hs = scratch + int64_t{cluster} * CS::M;  // S Wf K0 of the current row
  const int64_t units = spectra ? C : int64_t{B} * C;
  for (int64_t u = cluster; u < units; u += clusters) {
    const int c = static_cast<int>(spectra ? u : u % C);
    cf32* w0 = spec + int64_t{c} * 2 * CS::M;
    cf32* wf = w0 + CS::M;
    if (spectra) {
      const scalar_t* wrow = w + int64_t{c} * T;
      cluster_sync_reads();  // the previous pass's reads of every CTA's shared memory are done
      cluster_load_transform<scalar_t, CS>(sm, tw, twc, wrow + (T - H), H, true);  // w'[0, H)
      cluster_sync();
      cluster_pairs<CS>(sm, twc, StorePairs{w0});
      cluster_sync_reads();
      cluster_load_transform<scalar_t, CS>(sm, tw, twc, wrow, T, true);  // w'[0, T)
      cluster_sync();
      cluster_pairs<CS>(sm, twc, StorePairs{wf});
    }
    const int b_end = spectra ? B : static_cast<int>(u / C) + 1;
    for (int b = spectra ? 0 : b_end - 1; b < b_end; ++b) {
      const int64_t r = int64_t{b} * C + c;
      const scalar_t* row = x + r * T;
      scalar_t* o = out + r * T;
      cf32* k0s = kspec != nullptr ? kspec + r * 2 * CS::M : nullptr;
      cluster_sync_reads();
      cluster_load_transform<scalar_t, CS>(sm, tw, twc, row, H, false);  // K0
      cluster_sync();
      // w0, wf (with spectra), hs at pk, pj: this thread's own stores (same pair, same owner).
      cluster_pairs<CS>(sm, twc, [&](int k, int pk, int pj, cf32 xk, cf32 xj, cf32* sk,
                                     cf32* sj) {
        if (k0s != nullptr) StorePairs{k0s}(k, pk, pj, xk, xj, sk, sj);
        hs[pk] = shift_half(k, product<false>(k, xk, wf[pk]));
        hs[pj] = shift_half(k, product<false>(k, xj, wf[pj]));
        cluster_merge<CS>(twc, k, product<false>(k, xk, w0[pk]), product<false>(k, xj, w0[pj]),
                          sk, sj);
      });
      cluster_inverse_store<scalar_t, CS>(sm, tw, twc, o, H, false, eps);
      cluster_load_transform<scalar_t, CS>(sm, tw, twc, row + H, T - H, false);  // K1
      cluster_sync();
      cluster_pairs<CS>(sm, twc, [&](int k, int pk, int pj, cf32 xk, cf32 xj, cf32* sk,
                                     cf32* sj) {
        if (k0s != nullptr) StorePairs{k0s + CS::M}(k, pk, pj, xk, xj, sk, sj);  // K1
        cluster_merge<CS>(twc, k, hs[pk] + product<false>(k, xk, w0[pk]),
                          hs[pj] + product<false>(k, xj, w0[pj]), sk, sj);
      });
      cluster_inverse_store<scalar_t, CS>(sm, tw, twc, o + H, T - H, false, eps);
    }
  }
  cluster_sync_reads();  // no CTA leaves while a partner may still read its shared memory
#endif
}

// Both gradients for g, k (B, C, T), H < T <= 2H, with spec = [W0, Wf] per channel
// (halves_forward_kernel's, kept or made by halves_spectrum_kernel); scratch: 4M complex
// floats per cluster (G0, G1 of the current row; the running sums of grad_w's two spectra
// over b, in order: deterministic). Channels over the clusters as in the forward. kspec: where
// not null, [K0, K1] of row r at kspec[2 r M] (the forward's), read instead of transforming
// k's halves: 4 transforms a row instead of 6, the same bits.
template <typename scalar_t, class CS>
TIMEX_CLUSTER_KERNEL(CS)
halves_backward_kernel(const scalar_t* __restrict__ g, const scalar_t* __restrict__ k,
                       const cf32* __restrict__ spec, scalar_t* __restrict__ grad_k,
                       scalar_t* __restrict__ grad_w, int B, int C, int T,
                       cf32* __restrict__ scratch, const cf32* __restrict__ tw,
                       const cf32* __restrict__ twc, const cf32* __restrict__ kspec) {
#if TIMEX_CLUSTER_CODE
  constexpr int H = CS::M;
  TIMEX_FFT_SHARED(raw);
  cf32* sm = reinterpret_cast<cf32*>(raw);
  const int cluster = static_cast<int>(blockIdx.x / CS::P);
  const int clusters = static_cast<int>(gridDim.x / CS::P);
  cf32* g0s = scratch + int64_t{cluster} * 4 * CS::M;
  cf32* g1s = g0s + CS::M;
  cf32* lo = g1s + CS::M;  // sum_b G0 K0* + G1 K1* + S G1 K0*
  cf32* hi = lo + CS::M;   // sum_b G1 K0*
  for (int c = cluster; c < C; c += clusters) {
    const cf32* w0 = spec + int64_t{c} * 2 * CS::M;
    const cf32* wf = w0 + CS::M;
    for (int b = 0; b < B; ++b) {
      const int64_t r = int64_t{b} * C + c;
      const scalar_t* grow = g + r * T;
      const scalar_t* krow = k + r * T;
      scalar_t* gk = grad_k + r * T;
      cluster_sync_reads();
      cluster_load_transform<scalar_t, CS>(sm, tw, twc, grow, H, false);  // G0
      cluster_sync();
      cluster_pairs<CS>(sm, twc, StorePairs{g0s});
      cluster_sync_reads();
      cluster_load_transform<scalar_t, CS>(sm, tw, twc, grow + H, T - H, false);  // G1
      cluster_sync();
      cluster_pairs<CS>(sm, twc, [&](int f, int pk, int pj, cf32 xk, cf32 xj, cf32* sk,
                                     cf32* sj) {
        g1s[pk] = xk;
        g1s[pj] = xj;
        cluster_merge<CS>(twc, f,
                          product<true>(f, g0s[pk], w0[pk]) +
                              shift_half(f, product<true>(f, xk, wf[pk])),
                          product<true>(f, g0s[pj], w0[pj]) +
                              shift_half(f, product<true>(f, xj, wf[pj])),
                          sk, sj);
      });
      cluster_inverse_store<scalar_t, CS>(sm, tw, twc, gk, H, false, 0.f);  // grad_k[0, H)
      cluster_owned<CS>(sm, [&](int f, int pk, int pj, cf32* sk, cf32* sj) {
        cluster_merge<CS>(twc, f, product<true>(f, g1s[pk], w0[pk]),
                          product<true>(f, g1s[pj], w0[pj]), sk, sj);
      });
      cluster_inverse_store<scalar_t, CS>(sm, tw, twc, gk + H, T - H, false, 0.f);
      // grad_w's sums with K0 (lo: G0 K0* + S G1 K0*, hi: G1 K0*) and then K1 (lo: + G1 K1*,
      // merged for the inverse after the last row): as pair passes over k's transforms, or
      // over the forward's K0, K1 (shared memory free: the combine's reads are done).
      const auto k0_terms = [&](int f, int pk, int pj, cf32 xk, cf32 xj) {
        cf32 lk = product<true>(f, g0s[pk], xk) + shift_half(f, product<true>(f, g1s[pk], xk));
        cf32 lj = product<true>(f, g0s[pj], xj) + shift_half(f, product<true>(f, g1s[pj], xj));
        cf32 hk = product<true>(f, g1s[pk], xk), hj = product<true>(f, g1s[pj], xj);
        if (b > 0) {
          lk = lo[pk] + lk;
          lj = lo[pj] + lj;
          hk = hi[pk] + hk;
          hj = hi[pj] + hj;
        }
        lo[pk] = lk;
        lo[pj] = lj;
        hi[pk] = hk;
        hi[pj] = hj;
      };
      const auto k1_terms = [&](int f, int pk, int pj, cf32 xk, cf32 xj, cf32* sk, cf32* sj) {
        const cf32 lk = lo[pk] + product<true>(f, g1s[pk], xk);
        const cf32 lj = lo[pj] + product<true>(f, g1s[pj], xj);
        if (b + 1 < B) {
          lo[pk] = lk;
          lo[pj] = lj;
        } else {
          cluster_merge<CS>(twc, f, lk, lj, sk, sj);
        }
      };
      if (kspec != nullptr) {
        const cf32* k0s = kspec + r * 2 * CS::M;
        const cf32* k1s = k0s + CS::M;
        cluster_owned<CS>(sm, [&](int f, int pk, int pj, cf32* sk, cf32* sj) {
          k0_terms(f, pk, pj, k0s[pk], k0s[pj]);
          k1_terms(f, pk, pj, k1s[pk], k1s[pj], sk, sj);
        });
        continue;
      }
      cluster_load_transform<scalar_t, CS>(sm, tw, twc, krow, H, false);  // K0
      cluster_sync();
      cluster_pairs<CS>(sm, twc, [&](int f, int pk, int pj, cf32 xk, cf32 xj, cf32*, cf32*) {
        k0_terms(f, pk, pj, xk, xj);
      });
      cluster_sync_reads();
      cluster_load_transform<scalar_t, CS>(sm, tw, twc, krow + H, T - H, false);  // K1
      cluster_sync();
      cluster_pairs<CS>(sm, twc, k1_terms);
    }
    scalar_t* gw = grad_w + int64_t{c} * T;
    cluster_inverse_store<scalar_t, CS>(sm, tw, twc, gw + (T - H), H, true, 0.f);  // w'[0, H)
    cluster_owned<CS>(sm, [&](int f, int pk, int pj, cf32* sk, cf32* sj) {
      cluster_merge<CS>(twc, f, hi[pk], hi[pj], sk, sj);
    });
    cluster_inverse_store<scalar_t, CS>(sm, tw, twc, gw, T - H, true, 0.f);  // w'[H, T)
  }
#endif
}

// spec (C, 2M) = [W0, Wf] per channel of w (C, T), H < T <= 2H: for a backward without the
// forward's kept spectra. One cluster per channel.
template <typename scalar_t, class CS>
TIMEX_CLUSTER_KERNEL(CS)
halves_spectrum_kernel(const scalar_t* __restrict__ w, int T, cf32* __restrict__ spec,
                       const cf32* __restrict__ tw, const cf32* __restrict__ twc) {
#if TIMEX_CLUSTER_CODE
  constexpr int H = CS::M;
  TIMEX_FFT_SHARED(raw);
  cf32* sm = reinterpret_cast<cf32*>(raw);
  const int64_t c = blockIdx.x / CS::P;
  const scalar_t* wrow = w + c * T;
  for (int part = 0; part < 2; ++part) {
    if (part == 1) cluster_sync_reads();
    cluster_load_transform<scalar_t, CS>(sm, tw, twc, part == 0 ? wrow + (T - H) : wrow,
                                         part == 0 ? H : T, true);
    cluster_sync();
    cluster_pairs<CS>(sm, twc, StorePairs{spec + (2 * c + part) * CS::M});
  }
  cluster_sync_reads();
#endif
}

}  // namespace rwkv::fft
