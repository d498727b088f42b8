// LLTM over a whole sequence, bfloat16 and float16: the persistent cluster kernels with each
// step's product on tensor cores (lltm_sequence_mma.cuh). Same cluster layout, exchange and
// synchronisation as the float32 kernels of lltm_sequence_persistent.cuh (read its header
// comment first); what differs:
//   - W_h's share stays in shared memory in T (half the bytes of float), [rows_p][ldk], the
//     MMA's A operand: forward rows 3*jj + g (the 3 gates of own column jj), backward rows jj
//     (column W_h[:, j0 + jj], k over all 3S gate rows); rows past the share are zero.
//   - The all-gathered operand (h_{t-1} forward, dz_t backward) is kept in T, [2][bcp][ldk] by
//     step parity: those values are rounded to T where the recurrence stores them, so the MMA
//     reads them exactly. Batch rows past the cluster's and k past S (3S) stay zero.
//   - The product's float sums land in ksplit partial buffers (one per k slice of the warps,
//     part[slice][n][row]); the cell stage adds them in slice order.
//   - The global inputs of a thread's cells in the next step (P_{t+1} forward; grad_h, c_t and
//     z_t backward) are loaded into registers at the end of a step, before the cluster
//     barrier, so that their latency hides behind the barrier and the next product instead of
//     adding to every step (up to kPrefetch cells per thread; more load when they are used).
// Cell math, the forward's c and the backward's carries dc, dh_rec stay float, rounded to T
// where stored, exactly as in the float32 kernels. Shared-memory offsets are in bytes.
#pragma once

#include "lltm/lltm_sequence_mma.cuh"
#include "lltm/lltm_sequence_persistent.cuh"

namespace lltm::persistent {

// The launch and shared-memory layout of one direction of the MMA kernels for (S, nc, bc).
struct MmaPlan {
  int state;    // S
  int nc;       // CTAs per cluster
  int cs;       // state columns per CTA, ceil(S / nc)
  int bc;       // batch rows per cluster
  int bcp;      // bc rounded up to 8 (the MMA's N tiles): rows of the operand buffers
  int threads;  // per CTA
  int k;        // reduction length: S (forward) or 3S (backward)
  int ldk;      // row stride of W and the operand in elements of T: k rounded up to 16, then
                // to an odd multiple of 8 (16 bytes): the 8 rows that one ldmatrix matrix
                // reads then start in the 8 distinct 16-byte bank groups
  int rows;     // W rows of the share: 3 * cs (forward), cs (backward)
  int rows_p;   // rows rounded up to 16 (the MMA's M tiles)
  int ldr;      // row stride of the partials, rows_p + 4 (tile_product says why)
  mma::Split split;
  int a_off, part_off, carry_off, total;  // byte offsets of the buffers; total bytes
};

LLTM_SEQ_FN MmaPlan make_mma_plan(int state, int nc, int bc, bool backward, int threads) {
  MmaPlan p{};
  p.state = state;
  p.nc = nc;
  p.cs = (state + nc - 1) / nc;
  p.bc = bc;
  p.bcp = round_up(bc, 8);
  p.threads = threads;
  p.k = backward ? 3 * state : state;
  p.ldk = round_up(p.k, 16);
  if ((p.ldk / 8) % 2 == 0) p.ldk += 8;
  p.rows = backward ? p.cs : 3 * p.cs;
  p.rows_p = round_up(p.rows, 16);
  p.ldr = p.rows_p + 4;
  p.split = mma::make_split(p.rows_p / 16, p.bcp / 8, round_up(p.k, 16) / 16, threads / 32);
  constexpr int kHalf = 2, kFloat = 4;
  p.a_off = p.rows_p * p.ldk * kHalf;  // a multiple of 16 * 16 bytes
  p.part_off = p.a_off + 2 * p.bcp * p.ldk * kHalf;
  p.carry_off = p.part_off + p.split.ksplit * p.bcp * p.ldr * kFloat;
  p.total = p.carry_off + p.bcp * p.cs * kFloat;
  return p;
}

// The sum of the ksplit partials of (row, n), in slice order.
LLTM_SEQ_FN float partial_sum(const MmaPlan& p, const float* part, int row, int n) {
  float sum = 0.f;
  for (int s = 0; s < p.split.ksplit; ++s) sum += part[(s * p.bcp + n) * p.ldr + row];
  return sum;
}

// Cells per thread whose next-step inputs are prefetched into registers.
constexpr int kPrefetch = 4;

// The forward recurrence, T = c10::BFloat16 or c10::Half; grid = clusters * p.nc CTAs of
// p.threads threads, cluster (p.nc).
template <typename T>
__global__ void __launch_bounds__(kThreads, 1)
    forward_mma_kernel(const MmaPlan p, const SeqForward<T> f) {
#if LLTM_SEQ_HAS_CLUSTERS
  unsigned char* smem = reinterpret_cast<unsigned char*>(dynamic_smem());
  T* w = reinterpret_cast<T*>(smem);                          // [rows_p][ldk]: row 3*jj + g
  T* hbuf = reinterpret_cast<T*>(smem + p.a_off);             // [2][bcp][ldk]: by step parity
  float* part = reinterpret_cast<float*>(smem + p.part_off);  // [ksplit][bcp][ldr]
  float* cst = reinterpret_cast<float*>(smem + p.carry_off);  // [bcp][cs]: c of own columns
  const int tid = threadIdx.x, S = p.state, cs = p.cs, ldk = p.ldk;
  const unsigned rank = cluster_rank();
  const int64_t B = f.batch, b0 = static_cast<int64_t>(blockIdx.x / p.nc) * p.bc;
  const int nb = static_cast<int>(B - b0 < p.bc ? B - b0 : p.bc);
  const int j0 = static_cast<int>(rank) * cs;
  const int ncols = S - j0 < 0 ? 0 : (S - j0 < cs ? S - j0 : cs);
  const int cells = nb * cs;  // this CTA's (batch row, own column) pairs, column fastest
  const T zero = static_cast<T>(0.f);

  for (int i = tid; i < p.rows_p * ldk; i += p.threads) {
    const int lr = i / ldk, k = i % ldk, jj = lr / 3, g = lr % 3;
    w[i] = lr < p.rows && jj < ncols && k < S ? f.w_h[(int64_t(g) * S + j0 + jj) * S + k] : zero;
  }
  for (int i = tid; i < 2 * p.bcp * ldk; i += p.threads) {
    const int buf = i / (p.bcp * ldk), b = i / ldk % p.bcp, k = i % ldk;
    hbuf[i] = buf == 0 && b < nb && k < S ? f.hs[(b0 + b) * S + k] : zero;
  }
  for (int i = tid; i < p.bcp * cs; i += p.threads) {
    const int b = i / cs, jj = i % cs;
    cst[i] = b < nb && jj < ncols ? static_cast<float>(f.cells[(b0 + b) * S + j0 + jj]) : 0.f;
  }

  // P_t of cell i (3 gates) into pz.
  auto load_p = [&](int64_t t, int i, float (&pz)[3]) {
    const T* gz = f.gates + (t * B + b0 + i / cs) * 3 * S + j0 + i % cs;
    pz[0] = static_cast<float>(gz[0]);
    pz[1] = static_cast<float>(gz[S]);
    pz[2] = static_cast<float>(gz[2 * S]);
  };
  float pre[kPrefetch][3];
  auto prefetch = [&](int64_t t) {
#pragma unroll
    for (int e = 0; e < kPrefetch; ++e) {
      const int i = tid + e * p.threads;
      if (i < cells && i % cs < ncols) load_p(t, i, pre[e]);
    }
  };
  prefetch(0);
  // Every CTA's buffers are set before any CTA stores into them (and a CTA's shared memory
  // may be written remotely only once it runs).
  cluster_sync();

  for (int64_t t = 0; t < f.steps; ++t) {
    const int par = static_cast<int>(t & 1);
    mma::tile_product<T>(p.split, w, hbuf + par * p.bcp * ldk, ldk, part, p.ldr, tid / 32,
                         tid % 32);
    __syncthreads();
    const bool push = t + 1 < f.steps;
    // Cell i: z = P_t + the product, rounded to T and stored; c, h; h_t to every CTA.
    auto cell = [&](int i, const float (&pz)[3]) {
      const int b = i / cs, jj = i % cs, j = j0 + jj;
      T* gz = f.gates + (t * B + b0 + b) * 3 * S + j;
      const T zi = static_cast<T>(partial_sum(p, part, 3 * jj, b) + pz[0]);
      const T zo = static_cast<T>(partial_sum(p, part, 3 * jj + 1, b) + pz[1]);
      const T zc = static_cast<T>(partial_sum(p, part, 3 * jj + 2, b) + pz[2]);
      gz[0] = zi;
      gz[S] = zo;
      gz[2 * S] = zc;
      float h, c;
      cell_forward<float>(static_cast<float>(zi), static_cast<float>(zo),
                          static_cast<float>(zc), cst[i], h, c);
      const T hT = static_cast<T>(h), cT = static_cast<T>(c);
      cst[i] = static_cast<float>(cT);
      const int64_t out = ((t + 1) * B + b0 + b) * S + j;
      f.hs[out] = hT;
      f.cells[out] = cT;
      if (push) {
        T* dst = hbuf + (par ^ 1) * p.bcp * ldk + b * ldk + j;
        for (int r = 0; r < p.nc; ++r) *map_rank(dst, r) = hT;
      }
    };
#pragma unroll
    for (int e = 0; e < kPrefetch; ++e) {
      const int i = tid + e * p.threads;
      if (i < cells && i % cs < ncols) cell(i, pre[e]);
    }
    for (int i = tid + kPrefetch * p.threads; i < cells; i += p.threads) {
      if (i % cs >= ncols) continue;
      float pz[3];
      load_p(t, i, pz);
      cell(i, pz);
    }
    if (t + 1 < f.steps) prefetch(t + 1);
    // No barrier after the last step: no CTA touches another's memory after it.
    if (push) cluster_sync();
  }
#else
  __trap();
#endif
}

// The backward recurrence; same grid as the forward.
template <typename T>
__global__ void __launch_bounds__(kThreads, 1)
    backward_mma_kernel(const MmaPlan p, const SeqBackward<T> f) {
#if LLTM_SEQ_HAS_CLUSTERS
  unsigned char* smem = reinterpret_cast<unsigned char*>(dynamic_smem());
  T* w = reinterpret_cast<T*>(smem);                          // [rows_p][ldk]: W_h[:, j0 + jj]
  T* dzbuf = reinterpret_cast<T*>(smem + p.a_off);            // [2][bcp][ldk] (3S): by parity
  float* part = reinterpret_cast<float*>(smem + p.part_off);  // dh_rec, [ksplit][bcp][ldr]
  float* dc = reinterpret_cast<float*>(smem + p.carry_off);   // [bcp][cs]: dc carry
  const int tid = threadIdx.x, S = p.state, cs = p.cs, ldk = p.ldk;
  const unsigned rank = cluster_rank();
  const int64_t B = f.batch, b0 = static_cast<int64_t>(blockIdx.x / p.nc) * p.bc;
  const int nb = static_cast<int>(B - b0 < p.bc ? B - b0 : p.bc);
  const int j0 = static_cast<int>(rank) * cs;
  const int ncols = S - j0 < 0 ? 0 : (S - j0 < cs ? S - j0 : cs);
  const int cells = nb * cs;
  const T zero = static_cast<T>(0.f);

  // jj fastest: consecutive threads read consecutive columns of a row of W_h.
  for (int i = tid; i < p.rows_p * ldk; i += p.threads) {
    const int jj = i % p.rows_p, k = i / p.rows_p;
    w[jj * ldk + k] = jj < ncols && k < 3 * S ? f.w_h[int64_t(k) * S + j0 + jj] : zero;
  }
  for (int i = tid; i < 2 * p.bcp * ldk; i += p.threads) dzbuf[i] = zero;
  // dh_rec = 0 before the last step: every partial.
  for (int i = tid; i < p.split.ksplit * p.bcp * p.ldr; i += p.threads) part[i] = 0.f;
  for (int i = tid; i < p.bcp * cs; i += p.threads) {
    const int b = i / cs, jj = i % cs;
    dc[i] = b < nb && jj < ncols ? static_cast<float>(f.grad_c_n[(b0 + b) * S + j0 + jj]) : 0.f;
  }

  // Step t's inputs of cell i: grad_hs[t + 1], c_t = cells[t + 1], z_t (3 gates).
  auto load_in = [&](int64_t t, int i, float (&in)[5]) {
    const int64_t o = ((t + 1) * B + b0 + i / cs) * S + j0 + i % cs;
    const T* gz = f.gates + (t * B + b0 + i / cs) * 3 * S + j0 + i % cs;
    in[0] = static_cast<float>(f.grad_hs[o]);
    in[1] = static_cast<float>(f.cells[o]);
    in[2] = static_cast<float>(gz[0]);
    in[3] = static_cast<float>(gz[S]);
    in[4] = static_cast<float>(gz[2 * S]);
  };
  float pre[kPrefetch][5];
  auto prefetch = [&](int64_t t) {
#pragma unroll
    for (int e = 0; e < kPrefetch; ++e) {
      const int i = tid + e * p.threads;
      if (i < cells && i % cs < ncols) load_in(t, i, pre[e]);
    }
  };
  if (f.steps > 0) prefetch(f.steps - 1);
  cluster_sync();

  for (int64_t s = 0; s < f.steps; ++s) {
    const int64_t t = f.steps - 1 - s;
    const int par = static_cast<int>(s & 1);
    // Cell i: dz_t and the dc carry from the cell's backward; dz_t to every CTA.
    auto cell = [&](int i, const float (&in)[5]) {
      const int b = i / cs, jj = i % cs, j = j0 + jj;
      float dzi, dzo, dzc, dco;
      cell_backward<float>(in[0] + partial_sum(p, part, jj, b), dc[i], in[1], in[2], in[3],
                           in[4], dzi, dzo, dzc, dco);
      dc[i] = dco;
      const T zi = static_cast<T>(dzi), zo = static_cast<T>(dzo), zc = static_cast<T>(dzc);
      T* gz = f.gates + (t * B + b0 + b) * 3 * S + j;
      gz[0] = zi;
      gz[S] = zo;
      gz[2 * S] = zc;
      T* dst = dzbuf + par * p.bcp * ldk + b * ldk + j;
      for (int r = 0; r < p.nc; ++r) {
        T* d = map_rank(dst, r);
        d[0] = zi;
        d[S] = zo;
        d[2 * S] = zc;
      }
    };
#pragma unroll
    for (int e = 0; e < kPrefetch; ++e) {
      const int i = tid + e * p.threads;
      if (i < cells && i % cs < ncols) cell(i, pre[e]);
    }
    for (int i = tid + kPrefetch * p.threads; i < cells; i += p.threads) {
      if (i % cs >= ncols) continue;
      float in[5];
      load_in(t, i, in);
      cell(i, in);
    }
    if (t > 0) prefetch(t - 1);
    // dz_t of every column is in every CTA; also orders this step's reads of the partials
    // (dh_rec) before the product below overwrites them.
    cluster_sync();
    mma::tile_product<T>(p.split, w, dzbuf + par * p.bcp * ldk, ldk, part, p.ldr, tid / 32,
                         tid % 32);
    __syncthreads();
  }
  for (int i = tid; i < cells; i += p.threads) {
    const int b = i / cs, jj = i % cs;
    if (jj >= ncols) continue;
    const int64_t o = (b0 + b) * S + j0 + jj;
    f.d_h0[o] = static_cast<T>(partial_sum(p, part, jj, b) + static_cast<float>(f.grad_hs[o]));
    f.d_c0[o] = static_cast<T>(dc[i]);
  }
#else
  __trap();
#endif
}

}  // namespace lltm::persistent
