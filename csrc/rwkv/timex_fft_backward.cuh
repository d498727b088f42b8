// RWKV TimeX at long T, one CTA per row: both gradients in one kernel that transforms each
// g row once (the formulas and the building blocks are timex_fft_kernels.cuh's):
//   grad_k[b, n]  = IDFT(G conj(W^))[n]
//   grad_w[T-1-s] = IDFT(sum_b G_b conj(K_b))[s]
// Per (b, c) row: G = DFT(g row) (kept in scratch), grad_k's inverse right away, K = DFT(k
// row), acc += G conj(K): 3 transforms instead of the 4 of a conv kernel for grad_k plus a
// wgrad kernel that transforms g again; per channel one more inverse for grad_w. Where the
// forward kept k's spectra (conv_kernel's xspec, 8 M bytes a row written and read again), K is
// read, not made: 2 transforms a row, and no G in scratch.
//
// Work items: channel c's batch rows split into `splits` consecutive ranges, item i = c *
// splits + s (b in [s B / splits, (s + 1) B / splits)). splits = 1 where the channels fill the
// resident CTAs: a CTA loops over its items (i, i + gridDim.x, ...) and ends each channel with
// grad_w's inverse. splits > 1 where they do not (few channels, several b): one item per CTA,
// whose partial sum of G conj(K) stays in scratch. Row ranges (where items would leave the
// busiest CTA many more rows than equal ranges: backward_plan): CTA i takes rows [i R / n,
// (i + 1) R / n) of the R = B C rows in channel-major order (r = c B + b), finishes the
// channels that lie whole in its range and leaves the sums of the one or two it shares in
// scratch. A shared channel's grad_w is made by the CTA that leaves its last partial sum (an
// arrival count per channel): it adds the partials in s or CTA order and runs the inverse, in
// the same launch (instead of a second launch of C CTAs: GPU time 8% less at (3, 400, 4097)
// and 5% at (2, 512, 5000) float16 on the H200, within 1% at (3, 384, 2250) and (8, 512, 1188),
// where the CTAs that run two rows and then the inverse set the end as that launch did; run 52
// (b)). Every sum runs in a fixed order (b within an item or range, then s or CTA), so the
// result is deterministic; a running sum's entry is written and read only by the thread that
// owns its frequency pair (split_pairs). The scratch stays in L2: M complex floats per
// resident CTA for G (16.5 MiB at M = 16384 on 132 SMs), as much again for the running sums
// where B > 1 (in shared memory instead where backward_plan's caller takes ACC_SMEM).
#pragma once

#include "rwkv/timex_fft_kernels.cuh"

namespace rwkv::fft {

// The CTA of a row-range plan (rows_ctas CTAs over the R = B C rows in channel-major order r =
// c B + b) that row r falls in: CTA i takes rows [i R / n, (i + 1) R / n).
TIMEX_FFT_HD inline int64_t range_first_row(int64_t i, int64_t R, int64_t n) { return i * R / n; }
TIMEX_FFT_HD inline int64_t range_of_row(int64_t r, int64_t R, int64_t n) {
  return ((r + 1) * n + R - 1) / R - 1;
}

// The longest rows whose running sum may stay in shared memory (backward_kernel's ACC_SMEM),
// and the dynamic shared memory it then takes: the transform's, then M complex floats.
constexpr int kAccSmemMaxM = 4096;
TIMEX_FFT_HD constexpr int acc_smem_bytes(int M) { return smem_bytes(M) + 8 * M; }

// Whether the calling CTA is the last of `parts` to leave its partial sum of a channel in acc
// (count: the channel's arrivals, zeroed before the launch); then it adds them up. Every
// thread's stores to acc are made visible to the whole GPU before thread 0 counts this CTA in,
// and the last one's reads (load_l2) come after its count.
TIMEX_FFT_DEVICE bool last_to_arrive(int* count, int parts) {
  __shared__ int last;
#ifndef TIMEX_EMULATE
  __threadfence();
#endif
  TIMEX_FFT_SYNC();
  if (threadIdx.x == 0) {
#ifndef TIMEX_EMULATE
    last = atomicAdd(count, 1) == parts - 1;
    __threadfence();
#else
    last = (*count)++ == parts - 1;  // the emulation runs one CTA at a time
#endif
  }
  TIMEX_FFT_SYNC();
  return last != 0;
}

// *p from L2, past the SM's L1 (whose copy of a line that another CTA wrote may be older).
TIMEX_FFT_DEVICE cf32 load_l2(const cf32* p) {
#ifndef TIMEX_EMULATE
  const float2 v = __ldcg(reinterpret_cast<const float2*>(p));
  return {v.x, v.y};
#else
  return *p;
#endif
}

// The partial sums of channel c that the CTAs sharing it left in acc_all: how many, and where
// the s-th is (items: slot c splits + s; row ranges: CTA i0 + s's slot 1 where its range
// starts before the channel, else slot 0). rows_ctas, splits as backward_kernel's.
struct SharedChannel {
  const cf32* sums;
  int64_t c, B, R, rows_ctas, splits, m, i0 = 0, parts;
  TIMEX_FFT_HD SharedChannel(const cf32* sums_, int c_, int B_, int C, int rows_ctas_,
                             int splits_, int M)
      : sums(sums_), c(c_), B(B_), R(int64_t{B_} * C), rows_ctas(rows_ctas_), splits(splits_),
        m(M), parts(splits_) {
    if (rows_ctas > 0) {
      i0 = range_of_row(c * B, R, rows_ctas);
      parts = range_of_row(c * B + B - 1, R, rows_ctas) - i0 + 1;
    }
  }
  TIMEX_FFT_HD const cf32* part(int64_t s) const {
    if (rows_ctas == 0) return sums + (c * splits + s) * m;
    const int64_t i = i0 + s;
    const bool tail = s == 0 && range_first_row(i, R, rows_ctas) != c * B;
    return sums + (2 * i + (tail ? 1 : 0)) * m;
  }
};

// grad_w of channel c from its partial sums (SharedChannel), added in s order: the same bits
// whichever CTA arrives last.
template <typename scalar_t, class Sh, bool STAGED>
TIMEX_FFT_DEVICE void finish_shared_channel(cf32* sm, const cf32* tw, const SharedChannel& ch,
                                            scalar_t* grad_w, int T) {
  const cf32* first = ch.part(0);
  for (int f = static_cast<int>(threadIdx.x); f <= Sh::M / 2; f += Sh::THREADS) {
    const int j = f == 0 ? 0 : Sh::M - f;
    cf32 af = load_l2(first + f), aj = load_l2(first + j);
    for (int64_t s = 1; s < ch.parts; ++s) {
      const cf32* p = ch.part(s);
      af = af + load_l2(p + f);
      aj = aj + load_l2(p + j);
    }
    merge<Sh, STAGED>(sm, tw, f, j, af, aj);
  }
  TIMEX_FFT_SYNC();
  scalar_t* o = grad_w + ch.c * T;
  fft<Sh, true, false, 1, STAGED>(sm, tw, SmemLoad{sm},
                                  RowStore<scalar_t>{o, T, true, pairs_aligned(o, T), 0.f});
}

// spec (C, M): W^ from spectrum_kernel. gs: M complex floats per CTA (G of the current row;
// not read where kspec is given). acc: the running sums, M complex floats each: per CTA (splits
// = 1; not read at B = 1 unless kspec is given), per item (splits > 1) or two per CTA (rows_ctas
// > 0: the row-range plan; slot 0 the sum of the channel that the CTA's range starts in the
// middle of or ends before it ends, slot 1 that of the channel it ends in the middle of and of
// the whole channels between, which it finishes itself). counts: C ints, zero at the launch,
// where a channel's rows are shared (splits > 1 or rows_ctas > 0; else unread): the CTA that
// leaves a shared channel's last partial sum adds them up and runs grad_w's inverse
// (finish_shared_channel). kspec: null, or the rows' K (B C rows of M, conv_kernel's xspec):
// then acc += G conj(K) runs in G's split, with K read instead of made, and a row takes 2
// transforms (grad_w's merge, at the channel's end, reads acc); the same bits. streaming: the
// rows of g and k, grad_k's writes and kspec's reads with the cache-streaming hints
// (load_once, timex_fft_kernels.cuh). STAGED as there.
template <typename scalar_t, class Sh, bool STAGED, bool ACC_SMEM = false>
TIMEX_FFT_KERNEL_CAPPED(Sh::THREADS)
backward_kernel(const scalar_t* __restrict__ g, const scalar_t* __restrict__ k,
                const cf32* __restrict__ spec, scalar_t* __restrict__ grad_k,
                scalar_t* __restrict__ grad_w, int B, int C, int T, int splits, int rows_ctas,
                int* __restrict__ counts, cf32* __restrict__ gs_all, cf32* __restrict__ acc_all,
                const cf32* __restrict__ tw, const cf32* __restrict__ kspec, bool streaming) {
  TIMEX_FFT_SHARED(raw);
  cf32* sm = reinterpret_cast<cf32*>(raw);
  const int64_t R = int64_t{B} * C;
  cf32* gs = gs_all + int64_t{blockIdx.x} * Sh::M;
  // The CTA's work as segments: rows b in [b0, b1) of channel c, their running sum in acc;
  // finish: [b0, b1) is the whole channel, whose grad_w this CTA then makes (else the sum goes
  // to acc_all, for the CTA that arrives last at the channel). Row-range plan: rows [r0, r1)
  // in channel-major order; else items i = c splits + s (b in [s B / splits, (s + 1) B /
  // splits)), i = blockIdx.x, + gridDim.x, ... ACC_SMEM: the running sum in shared memory,
  // after the transform's M padded values, and copied to acc_all where it is a part.
  const int64_t r0 = range_first_row(blockIdx.x, R, gridDim.x);
  const int64_t r1 = range_first_row(int64_t{blockIdx.x} + 1, R, gridDim.x);
  const int64_t items = int64_t{C} * splits;
  for (int64_t pos = rows_ctas > 0 ? r0 : blockIdx.x;;) {
    int c, b0, b1;
    cf32 *acc, *part;
    bool finish;
    if (rows_ctas > 0) {
      if (pos >= r1) break;
      c = static_cast<int>(pos / B);
      b0 = static_cast<int>(pos % B);
      b1 = r1 - pos < B - b0 ? static_cast<int>(b0 + (r1 - pos)) : B;
      finish = b0 == 0 && b1 == B;
      part = acc_all + (2 * int64_t{blockIdx.x} + (pos == r0 && !finish ? 0 : 1)) * Sh::M;
      pos += b1 - b0;
    } else {
      if (pos >= items) break;
      c = static_cast<int>(pos / splits);
      const int s = static_cast<int>(pos % splits);
      b0 = static_cast<int>(int64_t{s} * B / splits);
      b1 = static_cast<int>(int64_t{s + 1} * B / splits);
      finish = splits == 1;
      part = acc_all + (splits == 1 ? int64_t{blockIdx.x} : pos) * Sh::M;
      pos += gridDim.x;
    }
    acc = ACC_SMEM ? sm + Sh::SMEM / sizeof(cf32) : part;
    const cf32* w_hat = spec + int64_t{c} * Sh::M;
    for (int b = b0; b < b1; ++b) {
      const int64_t r = int64_t{b} * C + c;
      const scalar_t* grow = g + r * T;
      const scalar_t* krow = k + r * T;
      TIMEX_FFT_SYNC();  // the previous pass's reads of sm are done
      fft<Sh, false, true, 1, STAGED>(
          sm, tw, RowLoad<scalar_t>{grow, T, false, pairs_aligned(grow, T), streaming},
          SmemStore{sm});
      TIMEX_FFT_SYNC();
      const cf32* k_hat = kspec != nullptr ? kspec + r * Sh::M : nullptr;
      // The running sum's update, acc = acc + G conj(K) (add_rn) from the second row of the
      // range on, the same bits on either path (K kept or made).
      const auto add_to_sum = [&](cf32 a, cf32 sum) { return b > b0 ? add_rn(sum, a) : a; };
      struct Loads {
        AtPair k, w, acc;
      };
      split_pairs<Sh, STAGED>(
          sm, tw,
          [&](int f, int j) {
            Loads d{};
            d.w = {w_hat[f], w_hat[j]};
            if (k_hat != nullptr) {
              d.k = {load_once(k_hat + f, streaming), load_once(k_hat + j, streaming)};
              if (b > b0) d.acc = {acc[f], acc[j]};
            }
            return d;
          },
          [&](int f, int j, cf32 pf, cf32 pj, const Loads& d, cf32 w) {
            if (k_hat != nullptr) {  // at f = j (0 and M / 2) j's sum is the one kept, as below
              const cf32 af = add_to_sum(product<true>(f, pf, d.k.k), d.acc.k);
              const cf32 aj = add_to_sum(product<true>(j, pj, d.k.j), d.acc.j);
              acc[f] = af;
              acc[j] = aj;
            } else {
              gs[f] = pf;
              gs[j] = pj;
            }
            merge<Sh>(sm, f, j, product<true>(f, pf, d.w.k), product<true>(j, pj, d.w.j), w);
          });
      TIMEX_FFT_SYNC();
      scalar_t* o = grad_k + r * T;
      fft<Sh, true, false, 1, STAGED>(
          sm, tw, SmemLoad{sm},
          RowStore<scalar_t>{o, T, false, pairs_aligned(o, T), 0.f, streaming});
      if (k_hat != nullptr) continue;
      TIMEX_FFT_SYNC();
      fft<Sh, false, true, 1, STAGED>(
          sm, tw, RowLoad<scalar_t>{krow, T, false, pairs_aligned(krow, T), streaming},
          SmemStore{sm});
      TIMEX_FFT_SYNC();
      // The channel's last row merges the sum for grad_w's inverse where this CTA finishes
      // the channel; every other row keeps it in acc.
      const bool keep = !finish || b + 1 < b1;
      struct SumLoads {
        AtPair g, acc;
      };
      split_pairs<Sh, STAGED>(
          sm, tw,
          [&](int f, int j) {
            SumLoads d{};
            d.g = {gs[f], gs[j]};
            if (b > b0) d.acc = {acc[f], acc[j]};
            return d;
          },
          [&](int f, int j, cf32 pf, cf32 pj, const SumLoads& d, cf32 w) {
            const cf32 af = add_to_sum(product<true>(f, d.g.k, pf), d.acc.k);
            const cf32 aj = add_to_sum(product<true>(j, d.g.j, pj), d.acc.j);
            if (keep) {
              acc[f] = af;
              acc[j] = aj;
            } else {
              merge<Sh>(sm, f, j, af, aj, w);
            }
          });
    }
    if (!finish) {  // a part of a shared channel: its sum goes to acc_all
      if (ACC_SMEM) {
        TIMEX_FFT_SYNC();
        for (int f = static_cast<int>(threadIdx.x); f < Sh::M; f += Sh::THREADS) part[f] = acc[f];
      }
      const SharedChannel ch(acc_all, c, B, C, rows_ctas, splits, Sh::M);
      if (last_to_arrive(counts + c, static_cast<int>(ch.parts))) {
        finish_shared_channel<scalar_t, Sh, STAGED>(sm, tw, ch, grad_w, T);
      }
    } else {
      TIMEX_FFT_SYNC();
      if (kspec != nullptr) {  // the channel's sum, from acc (as finish_shared_channel merges it)
        for (int f = static_cast<int>(threadIdx.x); f <= Sh::M / 2; f += Sh::THREADS) {
          const int j = f == 0 ? 0 : Sh::M - f;
          merge<Sh, STAGED>(sm, tw, f, j, acc[f], acc[j]);
        }
        TIMEX_FFT_SYNC();
      }
      scalar_t* o = grad_w + int64_t{c} * T;
      fft<Sh, true, false, 1, STAGED>(sm, tw, SmemLoad{sm},
                                      RowStore<scalar_t>{o, T, true, pairs_aligned(o, T), 0.f});
    }
  }
}

#ifndef TIMEX_EMULATE

// How launch_backward runs: ctas of the launch, splits or rows (see the top of the file), and
// the scratch it needs (scratch_bytes: gs per CTA unless K is kept, then acc per CTA, per item
// or two per CTA, then the arrival counts where channels are shared).
struct BackwardPlan {
  int ctas = 1, splits = 1;
  bool rows = false;  // the row-range plan: ctas ranges of the B C rows, splits 1
  bool acc_smem = false;  // the running sums in shared memory (backward_kernel's ACC_SMEM)
  bool wide = false;      // the wide CTAs (with_shape)
  int64_t busiest = 0;    // the most rows a CTA runs in turn
  size_t gs_elems = 0, acc_elems = 0, count_elems = 0;
  size_t acc_offset() const { return gs_elems; }
  size_t counts_offset_bytes() const { return sizeof(cf32) * (gs_elems + acc_elems); }
  size_t scratch_bytes() const { return counts_offset_bytes() + sizeof(int) * count_elems; }
};

// Rows of length M. resident: the CTAs of backward_kernel that the device keeps at once
// (blocks_per_sm times the SM count). splits = 1 where C >= resident; else as many ranges
// of b as keep the C * splits items within the resident CTAs (at most B, at least 1). Where
// min(resident, B C) equal ranges of the rows (rows) leave the busiest CTA fewer than 3/4 of the
// rows that those items do and row_ranges (RWKV_TIMEX_FUSED_ROWS=0: not), those ranges: GPU
// time 1-6% less at (16, 1024, 1101) float16 (11 rows a CTA instead of 16: 1024 channels on
// 1584 resident CTAs), (16, 512, 2500), (3, 400, 4097) and (16, 1024, 1100) float32; at 3/4
// and above 1-9% more ((2, 2048, 1100): 3 rows instead of 4; (4, 1024, 1100), (8, 1024, 1300),
// (2, 4096, 2048), (16, 512, 16384)) (run 49 (c)). With the shared channels summed in the
// same launch (run 52 (b)) the ranges still took 1-15% more at those shapes, and one row per
// CTA (B C CTAs, each row's G conj(K) through memory) 5-15% more at 12 of 16 shapes (3% less at
// (3, 384, 2250) and (3, 400, 4097)): the running sums that stay in L2 cost less than more CTAs
// at once save. kept_k: the kernel reads K (kspec).
inline BackwardPlan backward_plan(int64_t B, int64_t C, int M, int64_t resident,
                                  bool kept_k = false, bool row_ranges = true) {
  BackwardPlan p;
  const size_t m = static_cast<size_t>(M);
  p.splits =
      C >= resident ? 1 : static_cast<int>(std::max<int64_t>(1, std::min(B, resident / C)));
  const int64_t items = C * p.splits;
  p.ctas = static_cast<int>(std::max<int64_t>(1, std::min(items, resident)));
  // The most rows a CTA runs in turn, by items and by ranges.
  const int64_t by_items =
      p.splits == 1 ? (C + p.ctas - 1) / p.ctas * B : (B + p.splits - 1) / p.splits;
  const int64_t ranges = std::max<int64_t>(1, std::min(B * C, resident));
  const int64_t by_ranges = (B * C + ranges - 1) / ranges;
  if (row_ranges && B > 1 && 4 * by_ranges < 3 * by_items) {
    p.rows = true;
    p.splits = 1;
    p.ctas = static_cast<int>(ranges);
    p.busiest = by_ranges;
    p.gs_elems = kept_k ? 0 : m * p.ctas;
    p.acc_elems = 2 * m * p.ctas;
    p.count_elems = static_cast<size_t>(C);
    return p;
  }
  p.busiest = by_items;
  p.gs_elems = kept_k ? 0 : m * p.ctas;
  p.acc_elems = p.splits > 1 ? m * items : B > 1 || kept_k ? m * p.ctas : 0;
  p.count_elems = p.splits > 1 ? static_cast<size_t>(C) : 0;
  return p;
}

// grad_k (B, C, T) and grad_w (C, T) from g, k (B, C, T) and W's spectra spec (C, M); scratch
// of plan.scratch_bytes() with plan from backward_plan (its kept_k: kspec != null; its arrival
// counts zeroed here, on the stream, before the launch; plan.wide: the CTAs' shape, as tw's).
// kspec: null, or k's spectra (B C, M) from launch_conv's kspec; streaming as the kernel's.
// B >= 1.
template <typename scalar_t>
cudaError_t launch_backward(const scalar_t* g, const scalar_t* k, const cf32* spec,
                            scalar_t* grad_k, scalar_t* grad_w, int64_t B, int64_t C, int64_t T,
                            int M, const BackwardPlan& plan, cf32* scratch, const cf32* tw,
                            cudaStream_t stream, const cf32* kspec = nullptr,
                            bool streaming = true) {
  if (!runs(T, M) || B < 1 || B * C > INT_MAX || C * plan.splits > INT_MAX) {
    return cudaErrorInvalidValue;
  }
  if (C == 0) return cudaSuccess;
  int* counts = nullptr;
  if (plan.count_elems > 0) {
    counts = reinterpret_cast<int*>(reinterpret_cast<unsigned char*>(scratch) +
                                    plan.counts_offset_bytes());
    const cudaError_t err =
        cudaMemsetAsync(counts, 0, sizeof(int) * plan.count_elems, stream);
    if (err != cudaSuccess) return err;
  }
  cudaError_t err = cudaErrorInvalidValue;
  with_shape(M, plan.wide, [&](auto sh) {
    using Sh = decltype(sh);
    const int rows_ctas = plan.rows ? plan.ctas : 0;
    const auto launch = [&](auto kernel, int smem) {
      return fused_ops::launch_with_smem(kernel, plan.ctas, Sh::THREADS, smem, stream, g, k,
                                         spec, grad_k, grad_w, static_cast<int>(B),
                                         static_cast<int>(C), static_cast<int>(T), plan.splits,
                                         rows_ctas, counts, scratch, scratch + plan.acc_offset(),
                                         tw, kspec, streaming);
    };
    if constexpr (Sh::M <= kAccSmemMaxM) {
      if (plan.acc_smem) {
        err = launch(backward_kernel<scalar_t, Sh, true, true>, acc_smem_bytes(Sh::M));
        return;
      }
    }
    err = launch(backward_kernel<scalar_t, Sh, true>, Sh::SMEM);
  });
  return err;
}

#endif  // TIMEX_EMULATE

}  // namespace rwkv::fft
