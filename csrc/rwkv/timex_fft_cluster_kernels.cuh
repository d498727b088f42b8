// RWKV TimeX past T = 16384: the fused FFT convolution kernels of one row per thread-block
// cluster (timex_fft_cluster_math.cuh has the split of the transform over the cluster). The
// same three kernels as the one-CTA path (timex_fft_kernels.cuh), the same formulas:
//   spectrum  W^ of w's rows reversed (once per call)
//   conv      out = eps + IDFT(K W^) (forward), grad_k = IDFT(G conj(W^)) (correlate)
//   wgrad     grad_w[T-1-s] = IDFT(sum_b G_b conj(K_b))[s], b in order (deterministic)
// The forward may also write K = DFT(k row) (kspec: the eager training path keeps it), so that
// the backward reads it instead of transforming k again: 8 M bytes a row written and read
// against a transform of M (19% of the backward's time at (1, 128, 49152) on the H200).
// The values are the same bits either way (the same code makes them), so are the gradients.
// Each takes smem_bytes(L) of dynamic shared memory per CTA (136 KiB at L = 16384) and runs
// in clusters of P consecutive CTAs (cluster index blockIdx.x / P). tw is the staged table of
// the local DFT_L's stage twiddles (staged_value, timex_fft_stages.cuh), twc the cluster table
// (timex_fft_cluster_math.cuh). Spectra and the wgrad scratch are in the cluster layout
// (position r L + k2 holds frequency r + P k2).
//
// Barriers: every pass that reads another CTA's shared memory (the pair pass, the combine)
// is fenced by cluster_sync before (the data is complete) and after (no CTA overwrites or
// leaves its shared memory while a partner may still read it; at a kernel's end the relaxed
// cluster_sync_reads, timex_fft_cluster_math.cuh says why).
#pragma once

#include "rwkv/timex_fft_cluster_math.cuh"

namespace rwkv::fft {

// spec[row] = the packed half spectrum of x's row (read reversed where asked), in the
// cluster layout: M complex values per row; P CTAs per row.
template <typename scalar_t, class CS>
TIMEX_CLUSTER_KERNEL(CS)
cluster_spectrum_kernel(const scalar_t* __restrict__ x, int T, bool reversed,
                        cf32* __restrict__ spec, const cf32* __restrict__ tw,
                        const cf32* __restrict__ twc) {
#if TIMEX_CLUSTER_CODE
  TIMEX_FFT_SHARED(raw);
  cf32* sm = reinterpret_cast<cf32*>(raw);
  const int64_t r = blockIdx.x / CS::P;
  const scalar_t* row = x + r * T;
  const ClusterLoad<scalar_t, CS> load{
      RowLoad<scalar_t>{row, T, reversed, pairs_aligned(row, T)}, cluster_rank(), twc};
  fft<typename CS::Local, false, false, 1, true>(sm, tw, load, SmemStore{sm});
  cluster_sync();
  cluster_pairs<CS>(sm, twc, StorePairs{spec + r * CS::M});
  cluster_sync_reads();  // partners' reads of this CTA's shared memory are done: it may exit
#endif
}

// out[b, c] = eps + IDFT(X^ S[c]) (CORRELATE: X^ conj(S[c])), the first T values, for the
// rows x[b, c] of x (B, C, T); spec (C, M) from cluster_spectrum_kernel. P CTAs per row.
// kspec: where not null, X^ of row r to kspec[r M, (r + 1) M) (cluster layout).
template <typename scalar_t, class CS, bool CORRELATE>
TIMEX_CLUSTER_KERNEL(CS)
cluster_conv_kernel(const scalar_t* __restrict__ x, const cf32* __restrict__ spec,
                    scalar_t* __restrict__ out, int C, int T, float eps,
                    const cf32* __restrict__ tw, const cf32* __restrict__ twc,
                    cf32* __restrict__ kspec) {
#if TIMEX_CLUSTER_CODE
  using Sh = typename CS::Local;
  TIMEX_FFT_SHARED(raw);
  cf32* sm = reinterpret_cast<cf32*>(raw);
  const int64_t r = blockIdx.x / CS::P;
  const scalar_t* row = x + r * T;
  const ClusterLoad<scalar_t, CS> load{
      RowLoad<scalar_t>{row, T, false, pairs_aligned(row, T)}, cluster_rank(), twc};
  fft<Sh, false, false, 1, true>(sm, tw, load, SmemStore{sm});
  cluster_sync();
  const cf32* s = spec + (r % C) * CS::M;
  cf32* ks = kspec != nullptr ? kspec + r * CS::M : nullptr;
  cluster_pairs<CS>(sm, twc, [&](int k, int pk, int pj, cf32 xk, cf32 xj, cf32* sk, cf32* sj) {
    if (ks != nullptr) StorePairs{ks}(k, pk, pj, xk, xj, sk, sj);
    cluster_merge<CS>(twc, k, product<CORRELATE>(k, xk, s[pk]), product<CORRELATE>(k, xj, s[pj]),
                      sk, sj);
  });
  cluster_sync();
  fft<Sh, true, false, 1, true>(sm, tw, SmemLoad{sm}, SmemStore{sm});
  cluster_sync();
  scalar_t* o = out + r * T;
  cluster_combine<CS>(sm, twc, RowStore<scalar_t>{o, T, false, pairs_aligned(o, T), eps});
  cluster_sync_reads();  // partners' reads of this CTA's shared memory are done: it may exit
#endif
}

// G_b conj(K_b) at a frequency pair (ak, aj) added to the running sum over b (acc, scratch), b
// in order: kept in acc while rows remain (or where `defer`: the caller merges acc later), else
// merged for the inverse into shared memory (sk, sj).
template <class CS>
TIMEX_FFT_DEVICE void wgrad_term(const cf32* __restrict__ twc, cf32* __restrict__ acc, int b,
                                 int B, bool defer, int f, int pk, int pj, cf32 ak, cf32 aj,
                                 cf32* sk, cf32* sj) {
  if (b > 0) {
    ak = acc[pk] + ak;
    aj = acc[pj] + aj;
  }
  if (b + 1 < B || defer) {
    acc[pk] = ak;
    acc[pj] = aj;
  } else {
    cluster_merge<CS>(twc, f, ak, aj, sk, sj);
  }
}

// grad_w[c, T-1-s] = IDFT(sum_b G_b conj(K_b))[s] for g, k (B, C, T): cluster i (of gridDim.x
// / P) does channels i, i + clusters, ..., each b in order, as wgrad_kernel does with one CTA.
// scratch: 2M complex floats per cluster (G of the current b, then the running sum), each
// entry written and read only by the thread that owns its frequency pair. kspec: where not
// null, K_b of row r at kspec[r M] (the forward's), read instead of transforming k.
template <typename scalar_t, class CS>
TIMEX_CLUSTER_KERNEL(CS)
cluster_wgrad_kernel(const scalar_t* __restrict__ g, const scalar_t* __restrict__ k,
                     scalar_t* __restrict__ grad_w, int B, int C, int T,
                     cf32* __restrict__ scratch, const cf32* __restrict__ tw,
                     const cf32* __restrict__ twc, const cf32* __restrict__ kspec) {
#if TIMEX_CLUSTER_CODE
  using Sh = typename CS::Local;
  TIMEX_FFT_SHARED(raw);
  cf32* sm = reinterpret_cast<cf32*>(raw);
  const unsigned rank = cluster_rank();
  const int cluster = static_cast<int>(blockIdx.x / CS::P);
  const int clusters = static_cast<int>(gridDim.x / CS::P);
  cf32* gs = scratch + int64_t{cluster} * 2 * CS::M;
  cf32* acc = gs + CS::M;
  for (int c = cluster; c < C; c += clusters) {
    for (int b = 0; b < B; ++b) {
      const int64_t r = int64_t{b} * C + c;
      const scalar_t* grow = g + r * T;
      const scalar_t* krow = k + r * T;
      cluster_sync();  // the previous pass's reads of every CTA's shared memory are done
      fft<Sh, false, false, 1, true>(
          sm, tw,
          ClusterLoad<scalar_t, CS>{RowLoad<scalar_t>{grow, T, false, pairs_aligned(grow, T)},
                                    rank, twc},
          SmemStore{sm});
      cluster_sync();
      if (kspec != nullptr) {
        const cf32* ks = kspec + r * CS::M;
        cluster_pairs<CS>(sm, twc, [&](int f, int pk, int pj, cf32 xk, cf32 xj, cf32* sk,
                                       cf32* sj) {
          wgrad_term<CS>(twc, acc, b, B, false, f, pk, pj, product<true>(f, xk, ks[pk]),
                         product<true>(f, xj, ks[pj]), sk, sj);
        });
        continue;
      }
      cluster_pairs<CS>(sm, twc, StorePairs{gs});
      cluster_sync();
      fft<Sh, false, false, 1, true>(
          sm, tw,
          ClusterLoad<scalar_t, CS>{RowLoad<scalar_t>{krow, T, false, pairs_aligned(krow, T)},
                                    rank, twc},
          SmemStore{sm});
      cluster_sync();
      cluster_pairs<CS>(sm, twc, [&](int f, int pk, int pj, cf32 xk, cf32 xj, cf32* sk, cf32* sj) {
        wgrad_term<CS>(twc, acc, b, B, false, f, pk, pj, product<true>(f, gs[pk], xk),
                       product<true>(f, gs[pj], xj), sk, sj);
      });
    }
    cluster_sync();
    fft<Sh, true, false, 1, true>(sm, tw, SmemLoad{sm}, SmemStore{sm});
    cluster_sync();
    scalar_t* o = grad_w + int64_t{c} * T;
    cluster_combine<CS>(sm, twc, RowStore<scalar_t>{o, T, true, pairs_aligned(o, T), 0.f});
  }
  cluster_sync();
#endif
}

// Both gradients in one pass, for C channels over the clusters as in cluster_wgrad_kernel:
// per b, G = DFT(g row) once serves grad_k[b, c] = IDFT(G conj(S[c])) (inverse and combine
// right away) and the running sum of G conj(K) for grad_w; 3 transforms per (b, c) row
// instead of the 4 of cluster_conv_kernel + cluster_wgrad_kernel. spec (C, M) from
// cluster_spectrum_kernel; scratch as cluster_wgrad_kernel's. kspec: where not null, K of row
// r at kspec[r M] (the forward's): G conj(K) joins the sum in G's own pass, 2 transforms a row,
// and the channel's sum is merged for grad_w's inverse after the last row's grad_k.
template <typename scalar_t, class CS>
TIMEX_CLUSTER_KERNEL(CS)
cluster_backward_kernel(const scalar_t* __restrict__ g, const scalar_t* __restrict__ k,
                        const cf32* __restrict__ spec, scalar_t* __restrict__ grad_k,
                        scalar_t* __restrict__ grad_w, int B, int C, int T,
                        cf32* __restrict__ scratch, const cf32* __restrict__ tw,
                        const cf32* __restrict__ twc, const cf32* __restrict__ kspec) {
#if TIMEX_CLUSTER_CODE
  using Sh = typename CS::Local;
  TIMEX_FFT_SHARED(raw);
  cf32* sm = reinterpret_cast<cf32*>(raw);
  const unsigned rank = cluster_rank();
  const int cluster = static_cast<int>(blockIdx.x / CS::P);
  const int clusters = static_cast<int>(gridDim.x / CS::P);
  cf32* gs = scratch + int64_t{cluster} * 2 * CS::M;
  cf32* acc = gs + CS::M;
  for (int c = cluster; c < C; c += clusters) {
    const cf32* s = spec + int64_t{c} * CS::M;
    for (int b = 0; b < B; ++b) {
      const int64_t r = int64_t{b} * C + c;
      const scalar_t* grow = g + r * T;
      const scalar_t* krow = k + r * T;
      cluster_sync();  // the previous pass's reads of every CTA's shared memory are done
      fft<Sh, false, false, 1, true>(
          sm, tw,
          ClusterLoad<scalar_t, CS>{RowLoad<scalar_t>{grow, T, false, pairs_aligned(grow, T)},
                                    rank, twc},
          SmemStore{sm});
      cluster_sync();
      const cf32* ks = kspec != nullptr ? kspec + r * CS::M : nullptr;
      cluster_pairs<CS>(sm, twc, [&](int f, int pk, int pj, cf32 xk, cf32 xj, cf32* sk, cf32* sj) {
        if (ks != nullptr) {
          wgrad_term<CS>(twc, acc, b, B, true, f, pk, pj, product<true>(f, xk, ks[pk]),
                         product<true>(f, xj, ks[pj]), sk, sj);
        } else {
          gs[pk] = xk;
          gs[pj] = xj;
        }
        cluster_merge<CS>(twc, f, product<true>(f, xk, s[pk]), product<true>(f, xj, s[pj]), sk,
                          sj);
      });
      cluster_sync();
      fft<Sh, true, false, 1, true>(sm, tw, SmemLoad{sm}, SmemStore{sm});
      cluster_sync();
      scalar_t* o = grad_k + r * T;
      cluster_combine<CS>(sm, twc, RowStore<scalar_t>{o, T, false, pairs_aligned(o, T), 0.f});
      // A barrier between the combine's reads of every CTA's shared memory and the next write
      // there: k's transform below, or after the channel's last row the merge of grad_w's sum;
      // before the next row's G (kept form) the loop's own barrier serves.
      if (ks == nullptr || b + 1 == B) cluster_sync();
      if (ks != nullptr) continue;
      fft<Sh, false, false, 1, true>(
          sm, tw,
          ClusterLoad<scalar_t, CS>{RowLoad<scalar_t>{krow, T, false, pairs_aligned(krow, T)},
                                    rank, twc},
          SmemStore{sm});
      cluster_sync();
      cluster_pairs<CS>(sm, twc, [&](int f, int pk, int pj, cf32 xk, cf32 xj, cf32* sk, cf32* sj) {
        wgrad_term<CS>(twc, acc, b, B, false, f, pk, pj, product<true>(f, gs[pk], xk),
                       product<true>(f, gs[pj], xj), sk, sj);
      });
    }
    if (kspec != nullptr) {  // after the last row's barrier: shared memory is free
      cluster_owned<CS>(sm, [&](int f, int pk, int pj, cf32* sk, cf32* sj) {
        cluster_merge<CS>(twc, f, acc[pk], acc[pj], sk, sj);
      });
    }
    cluster_sync();
    fft<Sh, true, false, 1, true>(sm, tw, SmemLoad{sm}, SmemStore{sm});
    cluster_sync();
    scalar_t* o = grad_w + int64_t{c} * T;
    cluster_combine<CS>(sm, twc, RowStore<scalar_t>{o, T, true, pairs_aligned(o, T), 0.f});
  }
  cluster_sync();
#endif
}

}  // namespace rwkv::fft
