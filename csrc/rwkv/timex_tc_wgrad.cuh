// RWKV TimeX, bfloat16 and float16: grad_w on tensor cores (mma.sync m16n8k16, inputs staged
// in their own type, float accumulation; sm_80 and newer, older targets compile an empty body).
//
//   G[s] = sum_b sum_t g[b, t] k[b, t - s],  grad_w[c, T-1-s] = G[s]
//
// Cut time into blocks of 16: t = 16 i + p, t - s = 16 (i - d) + q. For each lag block d the
// 16 x 16 matrix X_d[p][q] = sum_b sum_i g[b, 16i + p] k[b, 16(i - d) + q] is a GEMM whose
// reduction runs over (batch row, block index), and G[s] = the sum of X_d[p][q] over
// 16 d + p - q = s: the diagonal p - q = s - 16 d of X_d (d = s / 16) and the diagonal
// s - 16 (d + 1) of X_{d+1}. With 16 blocks i of one row as the MMA's k, the A operand
// (A[p][i] = g[16i + p]) is 256 consecutive elements of g and the B operand of lag block d
// (B[i][q] = k[16(i - d) + q]) 256 consecutive elements of k, 16 d before: both stored with
// the MMA's k along rows of 16, loaded with ldmatrix .trans. A warp holds ND consecutive lag
// blocks (2 x ND MMAs per A fragment); a block NWARP of them, NDB = NWARP * ND, and writes the
// lags of its first NDB - 1 blocks (the last one only completes those).
//
// The reduction is walked in slots of 256 times of one row (b, tc0): each slot stages g's 256
// times and the 256 + 16 (NDB - 1) times of k that its lag blocks reach; SLOTS slots per
// stage, double-buffered with cp.async (or element by element for misaligned or odd-length
// rows). Rows of 16 elements are 32 bytes apart, so an 8-row ldmatrix would meet each bank
// group twice: the two 16-byte halves of row i are exchanged where bit 2 of i is set.
// Each stage's products are summed in their own fragments and added to the totals with float
// adds (the tensor cores round their sums toward zero). At the end each warp stores its X_d
// in shared memory and a thread per lag sums the two diagonals in a fixed order:
// deterministic.
#pragma once

#include "rwkv/timex_tc_common.cuh"

namespace rwkv {
namespace kernels {

template <int ND_, int NWARP_, int SLOTS_, int MINB_>
struct WgradHalfConfig {
  static constexpr int ND = ND_, NWARP = NWARP_, SLOTS = SLOTS_, MINB = MINB_;
  static constexpr int THREADS = 32 * NWARP;
  static constexpr int NDB = NWARP * ND;  // lag blocks per block
  static constexpr int G_LEN = 256;
  static constexpr int K_LEN = 256 + 16 * (NDB - 1);
  // Segments start at multiples of 128 bytes: the swizzle above counts rows from there.
  static constexpr int K_SEG = (K_LEN + 63) / 64 * 64;
  static constexpr int SLOT = G_LEN + K_SEG;
  static constexpr int STAGE = SLOTS * SLOT;
  static constexpr int STAGE_BYTES = 2 * STAGE * 2;
  static constexpr int RED_BYTES = NDB * 256 * 4;  // the X_d, reusing the stage buffers
  static constexpr int SMEM_BYTES = STAGE_BYTES > RED_BYTES ? STAGE_BYTES : RED_BYTES;
};

// Offset of element x of a staged segment: the 16-byte halves of row x / 16 exchanged where
// bit 2 of the row is set (see above).
TIMEX_DEVICE int wgrad_swizzle(int x) { return x ^ (((x >> 6) & 1) << 3); }

// g, k: (B, C, T); grad_w: (C, T), contiguous. vec_in: g's and k's rows may be staged with
// 16-byte copies (aligned, T % 8 == 0). Grid: one block per (channel, lag tile), channel
// fastest, the heaviest (small lags) first.
template <typename scalar_t, typename Cfg>
TIMEX_KERNEL(Cfg::THREADS, Cfg::MINB)
wgrad_half_kernel(const scalar_t* __restrict__ g_, const scalar_t* __restrict__ k_,
                  scalar_t* __restrict__ grad_w, int B, int C, int T, bool vec_in) {
#if defined(TIMEX_EMULATE) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800)
  constexpr int ND = Cfg::ND, NDB = Cfg::NDB, SLOTS = Cfg::SLOTS, THREADS = Cfg::THREADS;
  constexpr int G_LEN = Cfg::G_LEN, K_LEN = Cfg::K_LEN, SLOT = Cfg::SLOT;
  const uint16_t* const gbits = reinterpret_cast<const uint16_t*>(g_);
  const uint16_t* const kbits = reinterpret_cast<const uint16_t*>(k_);

  TIMEX_SHARED_BYTES(smem_raw);
  uint16_t* const stage_smem = reinterpret_cast<uint16_t*>(smem_raw);  // [2][SLOTS][SLOT]

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;

  const int c = static_cast<int>(blockIdx.x) % C;
  const int D0 = static_cast<int>(blockIdx.x) / C * (NDB - 1);
  const int dw = D0 + warp * ND;  // this warp's first lag block
  // X_dw reaches lags from 16 dw - 15: a warp whose blocks reach no lag below T skips.
  const bool active = 16 * dw - 15 < T;

  const int n_tch = cdiv(T - 16 * D0, G_LEN);  // slots per row: times from 16 D0
  const int n_slots = B * n_tch;
  const int n_stages = cdiv(n_slots, SLOTS);

  auto stage = [&](int st, int buf) {
    uint16_t* const base = stage_smem + buf * SLOTS * SLOT;
#pragma unroll 1
    for (int u = 0; u < SLOTS; ++u) {
      const int slot = st * SLOTS + u;
      if (slot >= n_slots) break;
      const int b = slot / n_tch, tc0 = 16 * D0 + G_LEN * (slot % n_tch);
      const int64_t row = (static_cast<int64_t>(b) * C + c) * T;
      uint16_t* const gs = base + u * SLOT;
      uint16_t* const ks = gs + G_LEN;
      auto rows = [&](const uint16_t* p) {
        return [p](int, const uint16_t*& src) {
          src = p;
          return true;
        };
      };
      half_tc::stage_rows<1, G_LEN, THREADS>(tid, tc0, T, vec_in, rows(gbits + row),
                                             [&](int, int x) { return gs + wgrad_swizzle(x); });
      half_tc::stage_rows<1, (K_LEN + 7) / 8 * 8, THREADS>(
          tid, tc0 - 16 * (D0 + NDB - 1), T, vec_in, rows(kbits + row),
          [&](int, int x) { return ks + wgrad_swizzle(x); });
    }
  };

  float acc[ND][2][4] = {};
  // ldmatrix rows of this lane: A (g) matrix l / 8 = (i half, p half), B (k) (q half, i half).
  const int mat = lane >> 3, r8 = lane & 7;
  const int a_off = wgrad_swizzle(16 * (r8 + 8 * (mat >> 1)) + 8 * (mat & 1));
  const int b_row = r8 + 8 * (mat & 1), b_half = 8 * (mat >> 1);

  stage(0, 0);
  copy_commit();
  for (int st = 0; st < n_stages; ++st) {
    const int buf = st & 1;
    if (st + 1 < n_stages) stage(st + 1, buf ^ 1);
    copy_commit();
    copy_wait<1>();
    TIMEX_SYNC();
    float part[ND][2][4] = {};
    const int used = imin(SLOTS, n_slots - st * SLOTS);
#pragma unroll 1
    for (int u = 0; u < (active ? used : 0); ++u) {
      const uint16_t* const gs = stage_smem + (buf * SLOTS + u) * SLOT;
      const uint16_t* const ks = gs + G_LEN;
      uint32_t a[4];
      fused_ops::ldmatrix_x4_trans(a, gs + a_off);
#pragma unroll
      for (int j = 0; j < ND; ++j) {
        // Block i - d of k is staged row i + (D0 + NDB - 1 - d) of the segment.
        const int kr = b_row + D0 + NDB - 1 - (dw + j);
        uint32_t bf[4];
        fused_ops::ldmatrix_x4_trans(bf, ks + wgrad_swizzle(16 * kr + b_half));
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
        fused_ops::mma_16816<scalar_t>(part[j][0], a, b0);
        fused_ops::mma_16816<scalar_t>(part[j][1], a, b1);
      }
    }
#pragma unroll
    for (int j = 0; j < ND; ++j) {
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][n][e] += part[j][n][e];
      }
    }
    TIMEX_SYNC();
  }

  // X of local lag block l at red[l * 256 + p * 16 + q] (the stage buffers are free now).
  float* const red = reinterpret_cast<float*>(smem_raw);
#pragma unroll
  for (int j = 0; j < ND; ++j) {
    float* const x = red + (warp * ND + j) * 256;
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        x[(g + 8 * (e >> 1)) * 16 + 8 * n + 2 * q + (e & 1)] = acc[j][n][e];
      }
    }
  }
  TIMEX_SYNC();
  for (int l = tid; l < 16 * (NDB - 1); l += THREADS) {
    const int s = 16 * D0 + l;
    if (s >= T) break;
    const int dl = l / 16, delta = l % 16;
    const float* x0 = red + dl * 256;
    const float* x1 = x0 + 256;
    float sum = 0.f;
    for (int p = delta; p < 16; ++p) sum += x0[p * 16 + p - delta];
    for (int p = 0; p < delta; ++p) sum += x1[p * 16 + p + 16 - delta];
    grad_w[static_cast<int64_t>(c) * T + (T - 1 - s)] = static_cast<scalar_t>(sum);
  }
#endif
}

}  // namespace kernels
}  // namespace rwkv
