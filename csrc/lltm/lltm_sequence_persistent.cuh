// LLTM over a whole sequence: the persistent CUDA kernels of the recurrence (sm_90 and newer:
// thread-block clusters and distributed shared memory), one launch for all T steps of the
// forward and one for the backward. The math and the buffers are lltm_sequence.h's.
//
// Layout. One cluster of nc CTAs owns bc consecutive batch rows (the clusters split the batch
// and never talk to each other); CTA r owns the state columns j0 = r*cs .. j0+cs-1 (cs =
// ceil(S / nc); columns past S are masked, a CTA may own none). The CTAs keep their share of
// W_h in shared memory, as float (also for the half types below S = 256: the products then
// read it without conversions; from S = 256 on the half types run the tensor-core kernels of
// lltm_sequence_persistent_mma.cuh, same layout and exchange), for the whole sequence:
//   forward:  the 3 gate rows {j, S+j, 2S+j} of each own column, all S inputs each, stored as
//             local row 3*jj + g (jj = j - j0, g = gate), so that one thread's 3 rows are the
//             3 gates of one column;
//   backward: the column W_h[:, j] of each own column (all 3S rows), stored as local row jj.
// Each step is a small GEMM out[b][o] = sum_k A[b][k] * W[o][k] (dot_tile below) over the
// CTA's rows o and the cluster's batch rows b, where A, the full left operand, is in every
// CTA's shared memory:
//   forward:  A = h_{t-1} (bc x S); out = the own columns' gate pre-activations; then each CTA
//             applies the cell to its columns and stores its h_t slice into the A buffer of
//             every CTA of the cluster (distributed shared memory);
//   backward: A = dz_t (bc x 3S), all-gathered the same way (each CTA computes the dz of its
//             own columns from cell_backward); out = dh_rec = dz_t W_h for the own columns.
// A is double-buffered by step parity, so that one cluster barrier per step suffices: a CTA
// writes buffer p of another CTA in step s only after the barrier of step s-1, which that CTA
// reached only after its step s-2 reads of buffer p were done. The barrier (arrive.release,
// wait.acquire) also publishes the remote stores. The cell state c (forward) and the carries
// dc, dh_rec (backward) of the own columns never leave their CTA.
//
// Precision: all sums and the cell math in float; every value that the step-by-step cell
// would hold in T (z_t, h_t, c_t, dz_t) is rounded to T where it is stored, and the recurrence
// continues from the rounded value (the forward's h and c, the backward's dz), so the stored
// buffers are the recurrence's; the backward's carries dh_rec and dc stay in float.
// Global offsets are 64-bit (T * B * 3S may pass 2^31); shared-memory offsets are 32-bit.
//
// This header holds only device code and the launch plan (make_plan, shared with the host so
// that both agree on the shared-memory layout); lltm_sequence_persistent.cu launches it, and
// tests/test_lltm_sequence_emulation.py compiles it as host C++ under tests/cuda_emulation.h.
#pragma once

#include <cstdint>

#include "lltm/lltm.h"
#include "lltm/lltm_sequence.h"

#if !defined(FUSED_OPS_EMULATE)
#include <cooperative_groups.h>
#endif

#if defined(FUSED_OPS_EMULATE)
#define LLTM_SEQ_FN inline
#else
#define LLTM_SEQ_FN __host__ __device__ inline
#endif

// The cluster code exists for sm_90 and newer (and on the host and in the emulator);
// compiled for an older target the kernels trap (the host never launches them there:
// seq_persistent_supported checks the device and the kernels' compiled architecture).
#if defined(FUSED_OPS_EMULATE) || !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define LLTM_SEQ_HAS_CLUSTERS 1
#else
#define LLTM_SEQ_HAS_CLUSTERS 0
#endif

namespace lltm::persistent {

// The launch and shared-memory layout of one direction for (S, nc, bc). All counts in floats.
struct Plan {
  int state;    // S
  int nc;       // CTAs per cluster
  int cs;       // state columns per CTA, ceil(S / nc)
  int bc;       // batch rows per cluster
  int rb;       // batch rows per thread tile (1, 2 or 4; the kernel's RB)
  int bcp;      // bc rounded up to rb: the rows of the A and out buffers
  int threads;  // per CTA
  int k;        // reduction length: S (forward) or 3S (backward)
  int ks;       // lanes that split one tile's k range (a power of 2, at most 32)
  int ldk;      // row stride of W and A, >= k rounded up to 4 (float4 loads)
  int rows;     // rows of the W share, a multiple of 3: 3*cs (forward), cs rounded up (backward)
  int a_off, out_off, carry_off, total;  // offsets of the buffers; total floats
};

constexpr int kThreads = 256;

LLTM_SEQ_FN int round_up(int a, int m) { return (a + m - 1) / m * m; }

// Tiles: a thread computes 3 W rows x rb batch rows over its lanes' share of k, ks lanes per
// tile. ks is the largest power of 2 that keeps every thread busy (items * ks <= threads) but
// no more than the k range's float4 chunks need. Row stride: a float4 load is served per
// quarter warp (8 lanes, 128 bytes); with ks >= 8 those lanes read one row, consecutive 16
// bytes: no conflict; with ks < 8 they read 8 / ks tiles' rows 3 apart, so the stride is
// chosen = 4 ks (mod 32 floats): the 8 / ks windows of 4 ks floats then fall on distinct banks.
LLTM_SEQ_FN Plan make_plan(int state, int nc, int bc, bool backward, int threads) {
  Plan p{};
  p.state = state;
  p.nc = nc;
  p.cs = (state + nc - 1) / nc;
  p.bc = bc;
  p.rb = bc >= 4 ? 4 : bc >= 2 ? 2 : 1;
  p.bcp = round_up(bc, p.rb);
  p.threads = threads;
  p.k = backward ? 3 * state : state;
  p.rows = backward ? round_up(p.cs, 3) : 3 * p.cs;
  const int items = p.rows / 3 * (p.bcp / p.rb);
  const int chunks = (p.k + 3) / 4;
  p.ks = 1;
  while (p.ks < 32 && items * p.ks * 2 <= threads && p.ks < chunks) p.ks *= 2;
  p.ldk = p.ks >= 8 ? round_up(p.k, 4) : round_up(p.k, 32) + 4 * p.ks;
  p.a_off = p.rows * p.ldk;
  p.out_off = p.a_off + 2 * p.bcp * p.ldk;
  p.carry_off = p.out_off + p.bcp * p.rows;
  p.total = p.carry_off + p.bcp * p.cs;
  return p;
}

#if LLTM_SEQ_HAS_CLUSTERS

// The cluster primitives: this CTA's rank, the cluster barrier, another CTA's shared memory.
#if defined(FUSED_OPS_EMULATE)
inline unsigned cluster_rank() { return emu_cluster_rank(); }
inline void cluster_sync() { emu_cluster_sync(); }
template <typename P>
inline P* map_rank(P* p, unsigned rank) {
  return emu_map_shared_rank(p, rank);
}
inline float shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
#else
__device__ __forceinline__ unsigned cluster_rank() {
  return cooperative_groups::this_cluster().block_rank();
}
__device__ __forceinline__ void cluster_sync() { cooperative_groups::this_cluster().sync(); }
template <typename P>
__device__ __forceinline__ P* map_rank(P* p, unsigned rank) {
  return cooperative_groups::this_cluster().map_shared_rank(p, rank);
}
__device__ __forceinline__ float shfl_xor(float v, int m) {
  return __shfl_xor_sync(0xffffffffu, v, m);
}
#endif

struct float4v {
  float x, y, z, w;
};

__device__ __forceinline__ float4v load4(const float* p) {
#if defined(FUSED_OPS_EMULATE)
  return float4v{p[0], p[1], p[2], p[3]};
#else
  const float4 v = *reinterpret_cast<const float4*>(p);
  return float4v{v.x, v.y, v.z, v.w};
#endif
}

// out[b][o] = sum_k a[b][k] * w[o][k] for b < bcp, o < rows (plan's layout; the padding of
// w and a is zero). Item (og, bg): rows 3og..3og+2 x batch rows bg*RB..+RB-1, og fastest so
// that the tiles of one warp share their a rows (broadcast loads). Lane kl of the item's ks
// lanes sums the float4 chunks kl, kl+ks, ...; a butterfly of shuffles adds the lanes' sums
// (fixed order: deterministic) and the lanes store the item's 3*RB sums between them. Every
// thread runs the same number of rounds, so the shuffles see full warps.
template <int RB>
__device__ __forceinline__ void dot_tile(const Plan& p, const float* __restrict__ w,
                                         const float* __restrict__ a, float* __restrict__ out,
                                         int tid) {
  const int groups = p.rows / 3, items = groups * (p.bcp / RB), ks = p.ks;
  const int kl = tid % ks, per_round = p.threads / ks, chunks = (p.k + 3) / 4;
  for (int base = 0; base < items; base += per_round) {
    const int item = base + tid / ks;
    const bool valid = item < items;
    const int og = valid ? item % groups : 0, bg = valid ? item / groups : 0;
    float acc[3][RB];
#pragma unroll
    for (int g = 0; g < 3; ++g)
#pragma unroll
      for (int r = 0; r < RB; ++r) acc[g][r] = 0.f;
    if (valid) {
      const float* w0 = w + (3 * og) * p.ldk;
      const float* a0 = a + (bg * RB) * p.ldk;
      for (int c = kl; c < chunks; c += ks) {
        float4v wv[3], av[RB];
#pragma unroll
        for (int g = 0; g < 3; ++g) wv[g] = load4(w0 + g * p.ldk + 4 * c);
#pragma unroll
        for (int r = 0; r < RB; ++r) av[r] = load4(a0 + r * p.ldk + 4 * c);
#pragma unroll
        for (int g = 0; g < 3; ++g)
#pragma unroll
          for (int r = 0; r < RB; ++r) {
            acc[g][r] = fmaf(wv[g].x, av[r].x, acc[g][r]);
            acc[g][r] = fmaf(wv[g].y, av[r].y, acc[g][r]);
            acc[g][r] = fmaf(wv[g].z, av[r].z, acc[g][r]);
            acc[g][r] = fmaf(wv[g].w, av[r].w, acc[g][r]);
          }
      }
    }
    for (int m = 1; m < ks; m <<= 1) {
#pragma unroll
      for (int g = 0; g < 3; ++g)
#pragma unroll
        for (int r = 0; r < RB; ++r) acc[g][r] += shfl_xor(acc[g][r], m);
    }
    if (valid) {
#pragma unroll
      for (int e = 0; e < 3 * RB; ++e) {
        if (e % ks == kl) out[(bg * RB + e / 3) * p.rows + 3 * og + e % 3] = acc[e % 3][e / 3];
      }
    }
  }
}

__device__ __forceinline__ float* dynamic_smem() {
#if defined(FUSED_OPS_EMULATE)
  return reinterpret_cast<float*>(emu_smem);
#else
  extern __shared__ float4 lltm_seq_smem[];
  return reinterpret_cast<float*>(lltm_seq_smem);
#endif
}

#endif  // LLTM_SEQ_HAS_CLUSTERS

// The forward recurrence; grid = clusters * p.nc CTAs of p.threads threads, cluster (p.nc).
template <typename T, int RB>
__global__ void __launch_bounds__(kThreads, 1)
    forward_kernel(const Plan p, const SeqForward<T> f) {
#if LLTM_SEQ_HAS_CLUSTERS
  float* smem = dynamic_smem();
  float* w = smem;                                        // [rows][ldk]: row 3*jj + g
  float* hbuf = smem + p.a_off;                           // [2][bcp][ldk]: by step parity
  float* zs = smem + p.out_off;                           // [bcp][rows]
  float* cs_ = smem + p.carry_off;                        // [bcp][cs]: c of own columns
  const int tid = threadIdx.x, S = p.state, cs = p.cs;
  const unsigned rank = cluster_rank();
  const int64_t B = f.batch, b0 = static_cast<int64_t>(blockIdx.x / p.nc) * p.bc;
  const int nb = static_cast<int>(B - b0 < p.bc ? B - b0 : p.bc);
  const int j0 = static_cast<int>(rank) * cs;
  const int ncols = S - j0 < 0 ? 0 : (S - j0 < cs ? S - j0 : cs);

  for (int i = tid; i < p.rows * p.ldk; i += p.threads) {
    const int lr = i / p.ldk, k = i % p.ldk, jj = lr / 3, g = lr % 3;
    w[i] = jj < ncols && k < S ? static_cast<float>(f.w_h[(int64_t(g) * S + j0 + jj) * S + k])
                               : 0.f;
  }
  for (int i = tid; i < 2 * p.bcp * p.ldk; i += p.threads) {
    const int buf = i / (p.bcp * p.ldk), b = i / p.ldk % p.bcp, k = i % p.ldk;
    smem[p.a_off + i] =
        buf == 0 && b < nb && k < S ? static_cast<float>(f.hs[(b0 + b) * S + k]) : 0.f;
  }
  for (int i = tid; i < p.bcp * cs; i += p.threads) {
    const int b = i / cs, jj = i % cs;
    cs_[i] = b < nb && jj < ncols ? static_cast<float>(f.cells[(b0 + b) * S + j0 + jj]) : 0.f;
  }
  // Every CTA's buffers are set before any CTA stores into them (and a CTA's shared memory
  // may be written remotely only once it runs).
  cluster_sync();

  for (int64_t t = 0; t < f.steps; ++t) {
    const int par = static_cast<int>(t & 1);
    dot_tile<RB>(p, w, hbuf + par * p.bcp * p.ldk, zs, tid);
    __syncthreads();
    const bool push = t + 1 < f.steps;
    for (int i = tid; i < nb * cs; i += p.threads) {
      const int b = i / cs, jj = i % cs;
      if (jj >= ncols) continue;
      const int j = j0 + jj;
      T* gz = f.gates + (t * B + b0 + b) * 3 * S;
      const float* zr = zs + b * p.rows + 3 * jj;
      const T zi = static_cast<T>(zr[0] + static_cast<float>(gz[j]));
      const T zo = static_cast<T>(zr[1] + static_cast<float>(gz[S + j]));
      const T zc = static_cast<T>(zr[2] + static_cast<float>(gz[2 * S + j]));
      gz[j] = zi;
      gz[S + j] = zo;
      gz[2 * S + j] = zc;
      float h, c;
      cell_forward<float>(static_cast<float>(zi), static_cast<float>(zo),
                          static_cast<float>(zc), cs_[i], h, c);
      const T hT = static_cast<T>(h), cT = static_cast<T>(c);
      cs_[i] = static_cast<float>(cT);
      const int64_t out = ((t + 1) * B + b0 + b) * S + j;
      f.hs[out] = hT;
      f.cells[out] = cT;
      if (push) {
        float* dst = hbuf + (par ^ 1) * p.bcp * p.ldk + b * p.ldk + j;
        for (int r = 0; r < p.nc; ++r) *map_rank(dst, r) = static_cast<float>(hT);
      }
    }
    // No barrier after the last step: no CTA touches another's memory after it.
    if (push) cluster_sync();
  }
#else
  __trap();
#endif
}

// The backward recurrence; same grid as the forward.
template <typename T, int RB>
__global__ void __launch_bounds__(kThreads, 1)
    backward_kernel(const Plan p, const SeqBackward<T> f) {
#if LLTM_SEQ_HAS_CLUSTERS
  float* smem = dynamic_smem();
  float* w = smem;                                        // [rows][ldk]: W_h[:, j0 + jj]
  float* dzbuf = smem + p.a_off;                          // [2][bcp][ldk] (3S): by parity
  float* dh = smem + p.out_off;                           // [bcp][rows]: dh_rec
  float* dc = smem + p.carry_off;                         // [bcp][cs]: dc carry
  const int tid = threadIdx.x, S = p.state, cs = p.cs;
  const unsigned rank = cluster_rank();
  const int64_t B = f.batch, b0 = static_cast<int64_t>(blockIdx.x / p.nc) * p.bc;
  const int nb = static_cast<int>(B - b0 < p.bc ? B - b0 : p.bc);
  const int j0 = static_cast<int>(rank) * cs;
  const int ncols = S - j0 < 0 ? 0 : (S - j0 < cs ? S - j0 : cs);

  // jj fastest: consecutive threads read consecutive columns of a row of W_h.
  for (int i = tid; i < p.rows * p.ldk; i += p.threads) {
    const int jj = i % p.rows, k = i / p.rows;
    w[jj * p.ldk + k] =
        jj < ncols && k < 3 * S ? static_cast<float>(f.w_h[int64_t(k) * S + j0 + jj]) : 0.f;
  }
  for (int i = tid; i < 2 * p.bcp * p.ldk; i += p.threads) smem[p.a_off + i] = 0.f;
  for (int i = tid; i < p.bcp * p.rows; i += p.threads) dh[i] = 0.f;
  for (int i = tid; i < p.bcp * cs; i += p.threads) {
    const int b = i / cs, jj = i % cs;
    dc[i] = b < nb && jj < ncols ? static_cast<float>(f.grad_c_n[(b0 + b) * S + j0 + jj]) : 0.f;
  }
  cluster_sync();

  for (int64_t s = 0; s < f.steps; ++s) {
    const int64_t t = f.steps - 1 - s;
    const int par = static_cast<int>(s & 1);
    for (int i = tid; i < nb * cs; i += p.threads) {
      const int b = i / cs, jj = i % cs;
      if (jj >= ncols) continue;
      const int j = j0 + jj;
      const int64_t row = (t + 1) * B + b0 + b;
      const float grad_h = static_cast<float>(f.grad_hs[row * S + j]) + dh[b * p.rows + jj];
      const float cell = static_cast<float>(f.cells[row * S + j]);
      T* gz = f.gates + (t * B + b0 + b) * 3 * S;
      float dzi, dzo, dzc, dco;
      cell_backward<float>(grad_h, dc[i], cell, static_cast<float>(gz[j]),
                           static_cast<float>(gz[S + j]), static_cast<float>(gz[2 * S + j]), dzi,
                           dzo, dzc, dco);
      dc[i] = dco;
      const T zi = static_cast<T>(dzi), zo = static_cast<T>(dzo), zc = static_cast<T>(dzc);
      gz[j] = zi;
      gz[S + j] = zo;
      gz[2 * S + j] = zc;
      float* dst = dzbuf + par * p.bcp * p.ldk + b * p.ldk + j;
      for (int r = 0; r < p.nc; ++r) {
        float* d = map_rank(dst, r);
        d[0] = static_cast<float>(zi);
        d[S] = static_cast<float>(zo);
        d[2 * S] = static_cast<float>(zc);
      }
    }
    // dz_t of every column is in every CTA; also orders this step's reads of dh before the
    // product below overwrites it.
    cluster_sync();
    dot_tile<RB>(p, w, dzbuf + par * p.bcp * p.ldk, dh, tid);
    __syncthreads();
  }
  for (int i = tid; i < nb * cs; i += p.threads) {
    const int b = i / cs, jj = i % cs;
    if (jj >= ncols) continue;
    const int64_t o = (b0 + b) * S + j0 + jj;
    f.d_h0[o] = static_cast<T>(dh[b * p.rows + jj] + static_cast<float>(f.grad_hs[o]));
    f.d_c0[o] = static_cast<T>(dc[i]);
  }
#else
  __trap();
#endif
}

}  // namespace lltm::persistent
