// RWKV TimeX, bfloat16 and float16: grad_w on tensor cores (mma.sync m16n8k16, inputs staged
// in their own type, float accumulation; sm_80 and newer, older targets compile an empty body).
//
//   G[s] = sum_b sum_t g[b, t] k[b, t - s],  grad_w[c, T-1-s] = G[s]
//
// Cut time into blocks of 16: t = 16 i + p, t - s = 16 (i - d) + q. For each lag block d the
// 16 x 16 matrix X_d[p][q] = sum_b sum_i g[b, 16i + p] k[b, 16(i - d) + q] is a GEMM whose
// reduction runs over (batch row, time block i), and G[s] = the sum of X_d[p][q] over
// 16 d + p - q = s: the diagonal p - q = s - 16 d of X_d (d = s / 16) and the diagonal
// s - 16 (d + 1) of X_{d+1}.
//
// A block owns one channel and a lag tile of 16 lag blocks D0 .. D0 + 15 (256 lags); it also
// needs the diagonals p < q of X_{D0+16} (they complete the lags of block D0 + 15). The
// reduction starts at time 16 D0 (earlier times only reach smaller lags) and is staged in
// slots of 256 times of one row (b, tc0): g's 256 times and the 512 times of k that the lag
// blocks reach from them, SLOTS slots per stage, double-buffered with cp.async (or element
// by element for misaligned or odd-length rows). A lag tile of 256 lags makes the reduction
// of every tile a whole number of slots when T % 256 == 0: no zero padding past T.
//
// One MMA's reduction index (its k, kappa = 0..15) is 16 groups of E = 4 consecutive time
// blocks: group m of each of 4 consecutive slots (kappa = 4 * slot + m). Fragment A_e holds
// the e-th block of every group (A_e[p][kappa] = g[16 (4m + e) + p] in that slot), fragment B_r
// the k blocks at lag r from the groups' first blocks (B_r[kappa][q] = k[16 (4m - r) + q]);
// A_e B_{d-e} summed over e = 0..3 is X_d over the 16 groups' 64 blocks. A warp holds 4 lag
// blocks d = dw .. dw + 3: 4 A loads and 7 B loads (r = dw - 3 .. dw + 3) feed 32 MMAs, and
// 8 independent accumulators. X_{D0+16} is split over the 4 warps by e (warp w adds
// A_w B_{D0+16-w}): 1 more load and 2 more MMAs per warp, the same for every warp.
//
// Shared memory: rows of 16 elements are 32 bytes apart and a load's 8 lanes read the same
// row (block e, or k row 4m + const) of 4 groups m of 2 slots. Every 4 rows (a group, 128
// bytes) are followed by 16 bytes of padding, and a slot takes 1728 bytes (64 mod 128), so
// that those 8 rows start in 8 different 16-byte bank groups (m + 4 x slot parity, mod 8)
// while each row's offset stays a constant per lane plus a constant per load.
// Each stage's products are summed in their own fragments and added to the totals with float
// adds (the tensor cores round their sums toward zero: SLOTS MMAs per sum). At the end
// the warps store their X_d in shared memory and a thread per lag sums the two diagonals in a
// fixed order: deterministic.
#pragma once

#include "rwkv/timex_tc_common.cuh"

namespace rwkv {
namespace kernels {

template <int ND_, int NWARP_, int SLOTS_, int MINB_>
struct WgradHalfConfig {
  static constexpr int ND = ND_, NWARP = NWARP_, SLOTS = SLOTS_, MINB = MINB_;
  static constexpr int E = 4;  // time blocks per group
  static constexpr int THREADS = 32 * NWARP;
  static constexpr int NDB = NWARP * ND;  // lag blocks per tile
  static constexpr int LAGS = 16 * NDB;    // lags per tile: grid = C x cdiv(T, LAGS)
  static constexpr int G_LEN = 256;
  // k from 16 (D0 + NDB) times before the slot's g: blocks i - d for d = D0 .. D0 + NDB.
  static constexpr int K_LEN = 256 + 16 * NDB;
  // Staged with 8 elements of padding after every 64 (see wgrad_pos).
  static constexpr int G_SEG = G_LEN / 64 * 72, K_SEG = K_LEN / 64 * 72;
  static constexpr int SLOT = G_SEG + K_SEG;
  static constexpr int STAGE = SLOTS * SLOT;
  static constexpr int STAGE_BYTES = 2 * STAGE * 2;
  static constexpr int RED_BYTES = (NDB + NWARP) * 256 * 4;  // the X_d, reusing the stages
  static constexpr int SMEM_BYTES = STAGE_BYTES > RED_BYTES ? STAGE_BYTES : RED_BYTES;
  // X_{D0+16} split by e over the warps; 4 warps x 4 lag blocks of 16 = the 16 groups' rows.
  static_assert(ND == 4 && NWARP == E && SLOTS % 4 == 0 && SLOT % 64 == 32, "wgrad tiling");
};

// Offset of element x of a staged g or k segment: 8 elements of padding after every 64.
TIMEX_DEVICE int wgrad_pos(int x) { return x + 8 * (x >> 6); }

// g, k: (B, C, T); grad_w: (C, T), contiguous. unit: the elements per copy that g's and k's
// rows allow (8, 4, 2 or 1: stage_rows, timex_tc_common.cuh). Grid: one block per (channel,
// lag tile), channel fastest, the heaviest (small lags) first.
template <typename scalar_t, typename Cfg>
TIMEX_KERNEL(Cfg::THREADS, Cfg::MINB)
wgrad_half_kernel(const scalar_t* __restrict__ g_, const scalar_t* __restrict__ k_,
                  scalar_t* __restrict__ grad_w, int B, int C, int T, int unit) {
#if defined(TIMEX_EMULATE) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800)
  constexpr int ND = Cfg::ND, NDB = Cfg::NDB, SLOTS = Cfg::SLOTS, THREADS = Cfg::THREADS;
  constexpr int G_LEN = Cfg::G_LEN, K_LEN = Cfg::K_LEN, SLOT = Cfg::SLOT, STAGE = Cfg::STAGE;
  const uint16_t* const gbits = reinterpret_cast<const uint16_t*>(g_);
  const uint16_t* const kbits = reinterpret_cast<const uint16_t*>(k_);

  TIMEX_SHARED_BYTES(smem_raw);
  uint16_t* const stage_smem = reinterpret_cast<uint16_t*>(smem_raw);  // [2][SLOTS][SLOT]

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;

  const int c = static_cast<int>(blockIdx.x) % C;
  const int D0 = static_cast<int>(blockIdx.x) / C * NDB;
  const int dw = D0 + warp * ND;  // this warp's first lag block
  // X_dw reaches lags from 16 dw - 15: a warp whose blocks reach no lag below T skips (its
  // share of X_{D0+16} then only completes lags past T too).
  const bool active = 16 * dw - 15 < T;

  const int t0 = 16 * D0;  // the reduction's first time
  const int n_tch = cdiv(T - t0, G_LEN);  // slots per row
  const int n_slots = B * n_tch;
  const int n_stages = cdiv(n_slots, SLOTS);

  // Slot (b, tch): g at times t0 + 256 tch + [0, 256), k from 16 (D0 + 16) times before that,
  // at 256 (tch - 1) + [0, 512). The stage's last slots up to a multiple of 4 are zeros (an
  // MMA takes 4 slots). Warp w stages slots w, w + NWARP, ...; its lanes take UNIT elements
  // each, 32 UNIT apart: with UNIT = 8, one 512-byte run of g and two of k per slot.
  auto stage_units = [&](auto unit_c, int st, uint16_t* base) {
    constexpr int UNIT = decltype(unit_c)::value, STRIDE = 32 * UNIT;
    static_assert(G_LEN % STRIDE == 0 && K_LEN % STRIDE == 0, "whole runs per lane");
    auto put = [&](uint16_t* dst, const uint16_t* src, bool ok) {
      if constexpr (UNIT > 1) {
        half_tc::copy_unit<UNIT>(dst, ok ? src : gbits, ok);
      } else {
        *dst = ok ? *src : uint16_t(0);
      }
    };
    const int s0 = st * SLOTS;
    const int fill = imin(SLOTS, (n_slots - s0 + 3) / 4 * 4);
    int slot = s0 + warp;
    int b = slot / n_tch, tch = slot - b * n_tch;
    for (int u = warp; u < fill; u += Cfg::NWARP) {
      const bool live = slot < n_slots;
      const int64_t row = live ? (static_cast<int64_t>(b) * C + c) * T : 0;
      uint16_t* const gs = base + u * SLOT;
#pragma unroll
      for (int i = 0; i < G_LEN / STRIDE; ++i) {
        const int x = UNIT * lane + STRIDE * i, t = t0 + G_LEN * tch + x;
        put(gs + wgrad_pos(x), gbits + row + t, live && t < T);
      }
#pragma unroll
      for (int i = 0; i < K_LEN / STRIDE; ++i) {
        const int x = UNIT * lane + STRIDE * i, t = G_LEN * (tch - 1) + x;
        put(gs + Cfg::G_SEG + wgrad_pos(x), kbits + row + t, live && t >= 0 && t < T);
      }
      slot += Cfg::NWARP;
      for (tch += Cfg::NWARP; tch >= n_tch; tch -= n_tch) ++b;
    }
  };
  auto stage = [&](int st, int buf) {
    uint16_t* const base = stage_smem + buf * STAGE;
    switch (unit) {
      case 8: stage_units(std::integral_constant<int, 8>{}, st, base); break;
      case 4: stage_units(std::integral_constant<int, 4>{}, st, base); break;
      case 2: stage_units(std::integral_constant<int, 2>{}, st, base); break;
      default: stage_units(std::integral_constant<int, 1>{}, st, base); break;
    }
  };

  // ldmatrix rows of this lane (matrix mat = lane / 8, row r8 = lane % 8). A: kappa =
  // r8 + 8 (mat / 2), p half mat % 2 (registers a0..a3 as the MMA takes them); B: kappa =
  // r8 + 8 (mat % 2), q half mat / 2 (registers 0, 1: the n-tile q < 8; 2, 3: q >= 8). kappa
  // is group m = kappa % 4 of the step's slot kappa / 4.
  const int mat = lane >> 3, r8 = lane & 7;
  const int ka = r8 + 8 * (mat >> 1), kb = r8 + 8 * (mat & 1);
  // Row 4m + e of A_e: group m, row e of it.
  const int lane_a = (ka >> 2) * SLOT + 72 * (ka & 3) + 8 * (mat & 1);
  // k row 4m + 16 - (r - D0) holds block 4m + e at lag block r + e (K_LEN starts 16 (D0 + 16)
  // blocks before the slot's g). Warp w's B_r, rr = r - dw + 3 = 0..6: row 4m + 19 - 4w - rr =
  // group m - w + (19 - rr) / 4, row (19 - rr) % 4 of it; X_{D0+16} with e = w: row 4m + w.
  const int lane_b = (kb >> 2) * SLOT + Cfg::G_SEG + 72 * (kb & 3) + 8 * (mat >> 1);
  auto b_off = [](int rr) { return 72 * ((19 - rr) >> 2) + 16 * ((19 - rr) & 3); };
  const int lane_bm = lane_b - 72 * warp, lane_bx = lane_b + 16 * warp;

  float acc[ND][2][4] = {};
  float xacc[2][4] = {};

  stage(0, 0);
  copy_commit();
  for (int st = 0; st < n_stages; ++st) {
    const int buf = st & 1;
    if (st + 1 < n_stages) stage(st + 1, buf ^ 1);
    copy_commit();
    copy_wait<1>();
    TIMEX_SYNC();
    float part[ND][2][4] = {};
    float xpart[2][4] = {};
    const int steps = cdiv(imin(SLOTS, n_slots - st * SLOTS), 4);
#pragma unroll 1
    for (int sp = 0; sp < (active ? steps : 0); ++sp) {
      const uint16_t* const sb = stage_smem + buf * STAGE + sp * 4 * SLOT;
      uint32_t a[4][4];
#pragma unroll
      for (int e = 0; e < 4; ++e) fused_ops::ldmatrix_x4_trans(a[e], sb + lane_a + 16 * e);
#pragma unroll
      for (int rr = 0; rr < 7; ++rr) {
        uint32_t bf[4];
        fused_ops::ldmatrix_x4_trans(bf, sb + lane_bm + b_off(rr));
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = rr - 3 + e;  // lag block dw + j = (dw + rr - 3) + e
          if (j >= 0 && j < ND) {
            fused_ops::mma_16816<scalar_t>(part[j][0], a[e], b0);
            fused_ops::mma_16816<scalar_t>(part[j][1], a[e], b1);
          }
        }
      }
      uint32_t bx[4];
      fused_ops::ldmatrix_x4_trans(bx, sb + lane_bx);
      const uint32_t x0[2] = {bx[0], bx[1]}, x1[2] = {bx[2], bx[3]};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (e == warp) {
          fused_ops::mma_16816<scalar_t>(xpart[0], a[e], x0);
          fused_ops::mma_16816<scalar_t>(xpart[1], a[e], x1);
        }
      }
    }
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
#pragma unroll
        for (int j = 0; j < ND; ++j) acc[j][n][e] += part[j][n][e];
        xacc[n][e] += xpart[n][e];
      }
    }
    TIMEX_SYNC();
  }

  // X of local lag block l (0..15) at red[l * 256 + p * 16 + q], warp w's share of X_{D0+16}
  // at red[(16 + w) * 256 + ...] (the stage buffers are free now).
  float* const red = reinterpret_cast<float*>(smem_raw);
  auto put = [&](float* x, const float (&f)[2][4]) {
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) x[(g + 8 * (e >> 1)) * 16 + 8 * n + 2 * q + (e & 1)] = f[n][e];
    }
  };
#pragma unroll
  for (int j = 0; j < ND; ++j) put(red + (warp * ND + j) * 256, acc[j]);
  put(red + (NDB + warp) * 256, xacc);
  TIMEX_SYNC();
  for (int l = tid; l < 16 * NDB; l += THREADS) {
    const int s = 16 * D0 + l;
    if (s >= T) break;
    const int dl = l / 16, delta = l % 16;
    const float* x0 = red + dl * 256;
    float sum = 0.f;
    for (int p = delta; p < 16; ++p) sum += x0[p * 16 + p - delta];
    if (dl + 1 < NDB) {
      const float* x1 = x0 + 256;
      for (int p = 0; p < delta; ++p) sum += x1[p * 16 + p + 16 - delta];
    } else {
      const float* x1 = red + NDB * 256;  // X_{D0+16}: the warps' shares in warp order
      for (int p = 0; p < delta; ++p) {
        const int i = p * 16 + p + 16 - delta;
        sum += ((x1[i] + x1[256 + i]) + x1[512 + i]) + x1[768 + i];
      }
    }
    grad_w[static_cast<int64_t>(c) * T + (T - 1 - s)] = static_cast<scalar_t>(sum);
  }
#endif
}

}  // namespace kernels
}  // namespace rwkv
