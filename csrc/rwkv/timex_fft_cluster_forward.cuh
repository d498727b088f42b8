// RWKV TimeX past T = 16384, the forward as one kernel: a cluster makes W^ = the spectrum of a
// channel's w row (reversed) and then convolves that channel's rows of k with it, instead of
// cluster_spectrum_kernel writing every W^ to global memory and cluster_conv_kernel reading
// it back from DRAM in a second launch (timex_fft_cluster_kernels.cuh; the same arithmetic
// in the same order, so the same bits). W^ still goes to spec, which the eager training path
// keeps for the backward; here each entry is read back by the thread that wrote it, a few
// microseconds later (so from L2), and needs no barrier. At B = 1 the two-kernel form reads
// as many spectrum bytes as it reads k; for B > 1 the cluster runs a channel's rows one after
// another, so C clusters must fill the device (the host's choice, fused_forward_for).
//
// Barriers as in timex_fft_cluster_kernels.cuh: a cluster_sync before every pass that reads
// another CTA's shared memory (the data is complete); before every transform that overwrites
// shared memory a partner may still be reading, and at the end, cluster_sync_reads where
// `relaxed` (the barrier without the wait for this CTA's global stores of W^ and out rows,
// timex_fft_cluster_math.cuh), else cluster_sync.
#pragma once

#include "rwkv/timex_fft_cluster_kernels.cuh"

namespace rwkv::fft {

// out[b, c] = eps + IDFT(K^ W^[c]) for x (B, C, T) = k, w (C, T); spec[c] = W^[c] (C, M,
// cluster layout, as cluster_spectrum_kernel writes it); kspec: where not null, K^ of row r to
// kspec[r M, (r + 1) M) (for the backward, timex_fft_cluster_kernels.cuh). Cluster i (of
// gridDim.x / P) does channels i, i + clusters, ..., each b in order. Hints for L2 (same
// results): prefetch asks for each k row while the transform before it runs; ahead > 0 also
// asks, during a channel's last inverse transform, for the w and first k row of channel
// c + ahead, which the cluster that takes this one's place will run when the device keeps
// `ahead` clusters resident (clusters start in index order as others finish). STAGED: tw is
// the staged table of the stage twiddles (as every cluster kernel reads them), else the
// one-CTA kernels' table of all e^{-2 pi i m / kTwiddles} (the same values: the same bits;
// kept to measure the layout).
template <typename scalar_t, class CS, bool STAGED = true>
TIMEX_CLUSTER_KERNEL(CS)
cluster_forward_kernel(const scalar_t* __restrict__ w, const scalar_t* __restrict__ x,
                       cf32* __restrict__ spec, scalar_t* __restrict__ out, int B, int C, int T,
                       float eps, bool prefetch, int ahead, bool relaxed,
                       const cf32* __restrict__ tw, const cf32* __restrict__ twc,
                       cf32* __restrict__ kspec) {
#if TIMEX_CLUSTER_CODE
  using Sh = typename CS::Local;
  TIMEX_FFT_SHARED(raw);
  cf32* sm = reinterpret_cast<cf32*>(raw);
  const unsigned rank = cluster_rank();
  const int cluster = static_cast<int>(blockIdx.x / CS::P);
  const int clusters = static_cast<int>(gridDim.x / CS::P);
  const auto reads_done = [relaxed] {
    if (relaxed) {
      cluster_sync_reads();
    } else {
      cluster_sync();
    }
  };
  for (int c = cluster; c < C; c += clusters) {
    const scalar_t* wrow = w + int64_t{c} * T;
    if (prefetch) prefetch_row_l2(x + int64_t{c} * T, T, rank, CS::P);  // row (0, c)
    reads_done();  // the previous channel's reads of every CTA's shared memory are done
    fft<Sh, false, false, 1, STAGED>(
        sm, tw,
        ClusterLoad<scalar_t, CS>{RowLoad<scalar_t>{wrow, T, true, pairs_aligned(wrow, T)}, rank,
                                  twc},
        SmemStore{sm});
    cluster_sync();
    cf32* s = spec + int64_t{c} * CS::M;
    cluster_pairs<CS>(sm, twc, StorePairs{s});
    for (int b = 0; b < B; ++b) {
      const int64_t r = int64_t{b} * C + c;
      const scalar_t* row = x + r * T;
      reads_done();  // the last pass's reads of every CTA's shared memory are done
      fft<Sh, false, false, 1, STAGED>(
          sm, tw,
          ClusterLoad<scalar_t, CS>{RowLoad<scalar_t>{row, T, false, pairs_aligned(row, T)},
                                    rank, twc},
          SmemStore{sm});
      cluster_sync();
      // s[pk], s[pj]: this thread's own stores of the W^ pass (same k, same owner).
      cf32* ks = kspec != nullptr ? kspec + r * CS::M : nullptr;
      cluster_pairs<CS>(sm, twc,
                        [&](int k, int pk, int pj, cf32 xk, cf32 xj, cf32* sk, cf32* sj) {
                          if (ks != nullptr) StorePairs{ks}(k, pk, pj, xk, xj, sk, sj);
                          cluster_merge<CS>(twc, k, product<false>(k, xk, s[pk]),
                                            product<false>(k, xj, s[pj]), sk, sj);
                        });
      cluster_sync();
      if (prefetch && b + 1 < B) prefetch_row_l2(row + int64_t{C} * T, T, rank, CS::P);
      if (prefetch && b + 1 == B && ahead > 0 && c + ahead < C) {
        prefetch_row_l2(w + int64_t{c + ahead} * T, T, rank, CS::P);
        prefetch_row_l2(x + int64_t{c + ahead} * T, T, rank, CS::P);
      }
      fft<Sh, true, false, 1, STAGED>(sm, tw, SmemLoad{sm}, SmemStore{sm});
      cluster_sync();
      scalar_t* o = out + r * T;
      cluster_combine<CS>(sm, twc, RowStore<scalar_t>{o, T, false, pairs_aligned(o, T), eps});
    }
  }
  reads_done();  // no CTA leaves while a partner may still read its shared memory
#endif
}

}  // namespace rwkv::fft
