// RWKV TimeX direct kernels: grad_w, the batch-reduced correlation of g and k, on float FMAs
// (wgrad_kernel). timex_kernels.cuh has the whole picture.
#pragma once

#include "rwkv/timex_direct_common.cuh"

namespace rwkv {
namespace kernels {

// ---------------------------------------------------------------------------------------
// grad_w: G[s] = sum_b sum_t g[b, t] * k[b, t - s], grad_w[c, T-1-s] = G[s].
//
// A block owns NCH channels x ST lags (s) and reduces over all rows b and times t. A thread
// holds RS consecutive lags; lanes: p = lane % 16 picks (row r in [0, NR), channel ch), NR *
// NCH = 16, and ls = lane / 16 picks the upper or lower RS lags of the warp's 2 * RS. Warps:
// lw (NLW) picks the warp's lags, tw (NTWP) its TQ times within each chunk of TC = NTWP * TQ.
// The block walks (row group of NR rows) x (chunks of t from its first lag S0 to T), staging
// g[rows][TC] and the k window [rows][TC + ST] that those t and its lags need. Per step of 4
// times a thread loads 4 g and 4 new k values (a sliding window of RS + 4 k in registers)
// for 4 * RS multiply-adds. At the end the NR * NTWP partial sums of each lag are added in a
// fixed order.
template <typename acc_t_, int RS_, int NR_, int NLW_, int NTWP_, int TQ_, int UG_, int MINB_>
struct WgradConfig {
  using acc_t = acc_t_;
  static constexpr int RS = RS_, NR = NR_, NLW = NLW_, NTWP = NTWP_, TQ = TQ_, MINB = MINB_;
  static constexpr int UG = UG_;  // steps of 4 times per unrolled loop body
  static constexpr int NCH = 16 / NR;
  static constexpr int THREADS = 32 * NLW * NTWP;
  static constexpr int LW = 2 * RS;  // lags per warp
  static constexpr int ST = NLW * LW;
  static constexpr int TC = NTWP * TQ;
  static constexpr int RING = RS + 4;
  static constexpr int G_ROW = TC + 4;  // 4 mod 32 words
  static constexpr int G_CH = NR * G_ROW + pad_to(NR * G_ROW, 4 * NR);
  static constexpr int K_LEN = TC + ST;
  static constexpr int K_ROW = K_LEN + 4;
  static constexpr int K_CH = NR * K_ROW + pad_to(NR * K_ROW, 4 * NR);
  static constexpr int G_BUF = NCH * G_CH;
  static constexpr int K_BUF = NCH * K_CH;
  static constexpr int RED = NCH * ST * NR * NTWP;  // partial sums, reusing the stage buffers
  static constexpr int SMEM_BYTES =
      (2 * (G_BUF + K_BUF) > RED ? 2 * (G_BUF + K_BUF) : RED) * int(sizeof(acc_t));
  static_assert(16 % NR == 0, "NR must divide 16");
  static_assert(RS % 4 == 0 && TQ % (4 * UG) == 0, "tile sizes");
};

// g, k: (B, C, T) contiguous; grad_w: (C, T) contiguous. vec_in: 16-byte vector copies of g
// and k are allowed. Grid: one block per (channel group, lag tile), the heaviest (small
// lags) first.
template <typename scalar_t, typename Cfg>
TIMEX_KERNEL(Cfg::THREADS, Cfg::MINB)
wgrad_kernel(const scalar_t* __restrict__ g, const scalar_t* __restrict__ k,
             scalar_t* __restrict__ grad_w, int B, int C, int T, bool vec_in) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  // sm_80 and newer run the half types on their own tensor-core kernels
  // (timex_tc_*.cuh, timex_cuda.cu): no body for them here.
  if constexpr (sizeof(scalar_t) == 2) {
    return;
  } else  // NOLINT(readability/braces)
#endif
  {
    using acc_t = typename Cfg::acc_t;
    constexpr int RS = Cfg::RS, NR = Cfg::NR, NCH = Cfg::NCH, NLW = Cfg::NLW, NTWP = Cfg::NTWP;
    constexpr int TQ = Cfg::TQ, LW = Cfg::LW, ST = Cfg::ST, TC = Cfg::TC, RING = Cfg::RING;
    constexpr int G_ROW = Cfg::G_ROW, G_CH = Cfg::G_CH, K_LEN = Cfg::K_LEN, K_ROW = Cfg::K_ROW;
    constexpr int K_CH = Cfg::K_CH, THREADS = Cfg::THREADS;

    TIMEX_SHARED_BYTES(smem_raw);
    acc_t* const g_smem = reinterpret_cast<acc_t*>(smem_raw);  // [2][NCH][NR][G_ROW]
    acc_t* const k_smem = g_smem + 2 * Cfg::G_BUF;              // [2][NCH][NR][K_ROW]

    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid & 31, warp = tid >> 5;
    const int p = lane & 15, ls = lane >> 4;
    const int r = p % NR, ch = p / NR;
    const int lw = warp % NLW, tw = warp / NLW;

    const int n_cg = cdiv(C, NCH);
    const int cg = static_cast<int>(blockIdx.x) % n_cg;
    const int tile = static_cast<int>(blockIdx.x) / n_cg;
    const int c0 = cg * NCH, S0 = tile * ST;
    const int s_warp = S0 + lw * LW;  // this warp's first lag

    const int n_chunks = cdiv(T - S0, TC);
    const int n_stages = cdiv(B, NR) * n_chunks;

    auto stage = [&](int st, int buf) {
      const int b0 = (st / n_chunks) * NR;
      const int tc0 = S0 + (st % n_chunks) * TC;
      const int kb = tc0 - S0 - ST;  // k index of window element 0
      acc_t* gs = g_smem + buf * Cfg::G_BUF;
      acc_t* ks = k_smem + buf * Cfg::K_BUF;
      // Tile row p = (channel chn, row): g and k rows (b0 + row, c0 + chn).
      auto rows = [&](const scalar_t* base, acc_t* smem, int ch_stride, int row_stride) {
        return [=](int p, const scalar_t*& src, acc_t*& dst) {
          const int chn = p / NR, row = p % NR;
          const int c = c0 + chn, b = b0 + row;
          dst = smem + chn * ch_stride + row * row_stride;
          const bool ok = c < C && b < B;
          src = ok ? base + (static_cast<int64_t>(b) * C + c) * T : base;
          return ok;
        };
      };
      stage_tile<THREADS, NCH * NR, TC / 4, scalar_t, acc_t>(tid, tc0, T, vec_in,
                                                            rows(g, gs, G_CH, G_ROW));
      stage_tile<THREADS, NCH * NR, K_LEN / 4, scalar_t, acc_t>(tid, kb, T, vec_in,
                                                               rows(k, ks, K_CH, K_ROW));
    };

    acc_t acc[RS];
#pragma unroll
    for (int i = 0; i < RS; ++i) acc[i] = acc_t(0);

    stage(0, 0);
    copy_commit();
    for (int st = 0; st < n_stages; ++st) {
      const int buf = st & 1;
      if (st + 1 < n_stages) stage(st + 1, buf ^ 1);
      copy_commit();
      copy_wait<1>();
      TIMEX_SYNC();
      // Steps of 4 * UG times of this warp (from t0) that reach its lags and lie before T.
      constexpr int SUB = 4 * Cfg::UG;
      const int t0 = S0 + (st % n_chunks) * TC + tw * TQ;
      const int sub_begin = s_warp > t0 ? (s_warp - t0) / SUB : 0;
      const int sub_end = t0 < T ? imin(TQ / SUB, cdiv(T - t0, SUB)) : 0;
#pragma unroll 1
      for (int sub = sub_begin; sub < sub_end; ++sub) {
        const int x0 = tw * TQ + sub * SUB;  // first time of the step, relative to tc0
        const acc_t* gs = g_smem + buf * Cfg::G_BUF + ch * G_CH + r * G_ROW + x0;
        // Window at step j (times tc0 + x0 + 4j ..): k[t - s] for this thread's lags s0 + i,
        // s0 = s_warp + ls * RS; element q of the window is the coefficient of time m and lag
        // i with q = m - i + RS; its ring slot is wrap(q + 4j).
        const acc_t* ks = k_smem + buf * Cfg::K_BUF + ch * K_CH + r * K_ROW +
                          (x0 - lw * LW - (ls + 1) * RS + ST);
        acc_t ring[RING];
#pragma unroll
        for (int j = 0; j < Cfg::UG; ++j) {
          if (j == 0) {
#pragma unroll
            for (int q4 = 0; q4 < RING / 4; ++q4) {
              const Vec4<acc_t> v = load4(ks + 4 * q4);
#pragma unroll
              for (int e = 0; e < 4; ++e) ring[4 * q4 + e] = v.v[e];
            }
          } else {
            const Vec4<acc_t> v = load4(ks + 4 * j + RS);
#pragma unroll
            for (int e = 0; e < 4; ++e) ring[wrap(RS + e + 4 * j, RING)] = v.v[e];
          }
          const Vec4<acc_t> gv = load4(gs + 4 * j);
#pragma unroll
          for (int m = 0; m < 4; ++m) {
#pragma unroll
            for (int i = 0; i < RS; ++i) acc[i] += gv.v[m] * ring[wrap(m - i + RS + 4 * j, RING)];
          }
        }
      }
      TIMEX_SYNC();
    }

    // Partial sums of lag (ch, l) from (tw, r) at red[((ch * ST + l) * NTWP + tw) * NR + r].
    acc_t* const red = g_smem;
    const int l0 = lw * LW + ls * RS;
#pragma unroll
    for (int i = 0; i < RS; ++i) red[((ch * ST + l0 + i) * NTWP + tw) * NR + r] = acc[i];
    TIMEX_SYNC();
    for (int o = tid; o < NCH * ST; o += THREADS) {
      const int chn = o / ST, l = o % ST;
      const int c = c0 + chn, s = S0 + l;
      if (c >= C || s >= T) continue;
      const acc_t* part = red + o * NTWP * NR;
      acc_t sum = part[0];
      for (int q = 1; q < NTWP * NR; ++q) sum += part[q];
      grad_w[static_cast<int64_t>(c) * T + (T - 1 - s)] = static_cast<scalar_t>(sum);
    }
  }
}

}  // namespace kernels
}  // namespace rwkv
