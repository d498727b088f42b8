// RWKV TimeX, bfloat16 and float16: the Toeplitz products (forward, CAUSAL, and grad_k) on
// tensor cores for rows short enough to stage whole: the same MMA tiles, fragments and time
// folds as toeplitz_half_kernel (timex_tc_toeplitz.cuh, whose top comment this one builds on),
// with the work decomposed differently.
//
// toeplitz_half_kernel gives each of its warps its own outputs and stages the inputs and the
// window of W chunk by chunk behind a barrier. Causal, the warp with the earliest outputs has
// the fewest reduction steps, so at every barrier the others wait for the one with the most
// (anti-causal the mirror), and the window is restaged per chunk (TT - LEAD + UC values, an
// element a thread at a time). ncu at (8, 512, 1188) float16 on the H200 (forward kernel, 93
// us): 34% of the warp samples at the chunk's closing barrier, 25% in the staging of W, 24% in
// the MMA loop, 19 instructions per MMA.
//
// Here a block stages its BB input rows and W's window whole, once, and then runs time tiles
// of TT = 16 J MT outputs (tiles gi, gi + groups, ... of the row: `groups` blocks share a
// row group where the row groups alone would not fill the GPU). The NWARP warps share a tile's
// outputs and split its NS reduction steps into NWARP consecutive ranges (equal to a step), so
// every warp does the same work, without a barrier inside the MMA loop. At a tile's end the
// warps leave their sums in shared memory and each thread adds the NWARP partial sums of
// FRAG / NWARP of its fragment's entries in warp order: deterministic.
//
// Tile ot0, steps s = 0 .. NS - 1 of 16 reduction indices from ms0:
//   causal:      ms0 = -LEAD, NS = cdiv(min(ot0 + TT - LEAD, T) + LEAD, 16)
//   anti-causal: ms0 = ot0,   NS = cdiv(T - ot0, 16)
// The B operands read input indices below 16 cdiv(T, 16) + LEAD (fold f reads 16 f on): the
// rows are staged from -LEAD (k_len values), zeros outside [0, T). The A pairs read W[y] at
// copy offset yhi - y, one yhi for every tile of the block (causal: the last tile's ot0 +
// 16 J (MT - 1) + LEAD + 15, odd; anti-causal 16 cdiv(T, 16), even: the parities that align the
// pairs as in the chunked kernel), copy 0 holding W[yhi - i] and copy 1 W[yhi - 1 - i] for
// the w_len values the tiles reach, zeros outside [0, T).
#pragma once

#include "rwkv/timex_tc_common.cuh"
#include "rwkv/timex_direct_common.cuh"

namespace rwkv {
namespace kernels {

template <int NT_, int J_, int MT_, int NWARP_, int MINB_>
struct ToeplitzSplitConfig {
  static constexpr int NT = NT_, J = J_, MT = MT_, NWARP = NWARP_, MINB = MINB_;
  static constexpr int THREADS = 32 * NWARP;
  static constexpr int BB = 8 * NT / J;
  static constexpr int LEAD = 16 * (J - 1);
  static constexpr int TT = 16 * J * MT;    // a tile's outputs, shared by the warps
  static constexpr int FRAG = MT * NT * 4;  // a lane's accumulators
  static_assert(8 * NT % J == 0 && BB >= 1 && FRAG % NWARP == 0, "tile sizes");

  // A staged input row: k_len values from -LEAD, then 8 of padding (k_row / 8 odd, the chunked
  // kernel's row padding).
  static constexpr int k_len(int T) { return 16 * cdiv(T, 16) + 3 * LEAD + 16; }
  static constexpr int k_row(int T) { return k_len(T) + 8; }
  // W's window: the values the pairs of every tile start at and one more, copy 0 rounded up to
  // 32 mod 64 elements so that copy 1 lies 16 banks on (as the chunked kernel's).
  static constexpr int w_len(int T) { return cdiv(T, TT) * TT + 16 * J * (MT - 1) + 18; }
  static constexpr int w0_len(int T) { return w_len(T) + ((32 - w_len(T) % 64) + 64) % 64; }
  // Rows and window, then the warps' sums (16-byte aligned).
  static constexpr int red_offset(int T) {
    return 16 * cdiv(2 * (BB * k_row(T) + 2 * w0_len(T)), 16);
  }
  static constexpr int RED_BYTES = 4 * NWARP * FRAG * 32;
  static constexpr int smem_bytes(int T) { return red_offset(T) + RED_BYTES; }
};

// w: (C, T); in, out: (B, C, T), contiguous. CAUSAL: out = eps + causal product (forward);
// else out = anti-causal product (grad_k from grad_out, eps 0). unit: as toeplitz_half_kernel.
// Grid: C * cdiv(B, BB) * groups blocks (channel fastest, then row group, then gi: the tiles
// gi, gi + groups, ...; 1 <= groups <= cdiv(T, TT)); dynamic shared memory Cfg::smem_bytes(T).
template <typename scalar_t, typename Cfg, bool CAUSAL>
TIMEX_KERNEL(Cfg::THREADS, Cfg::MINB)
toeplitz_half_split_kernel(const scalar_t* __restrict__ w_, const scalar_t* __restrict__ in_,
                           scalar_t* __restrict__ out, int B, int C, int T, float eps, int unit,
                           int groups) {
#if defined(TIMEX_EMULATE) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800)
  constexpr int NT = Cfg::NT, J = Cfg::J, MT = Cfg::MT, BB = Cfg::BB, NWARP = Cfg::NWARP;
  constexpr int LEAD = Cfg::LEAD, TT = Cfg::TT, THREADS = Cfg::THREADS, FRAG = Cfg::FRAG;
  using half_tc::lds32;
  const uint16_t* const w = reinterpret_cast<const uint16_t*>(w_);
  const uint16_t* const in = reinterpret_cast<const uint16_t*>(in_);
  const int K_ROW = Cfg::k_row(T), K_LEN = Cfg::k_len(T), W0_LEN = Cfg::w0_len(T);

  TIMEX_SHARED_BYTES(smem_raw);
  uint16_t* const k_smem = reinterpret_cast<uint16_t*>(smem_raw);  // [BB][K_ROW]
  uint16_t* const w_smem = k_smem + BB * K_ROW;                     // copy 0, copy 1
  float* const red = reinterpret_cast<float*>(smem_raw + Cfg::red_offset(T));

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;

  int bid = static_cast<int>(blockIdx.x);
  const int c = bid % C;
  bid /= C;
  const int n_bg = cdiv(B, BB);
  const int b0 = bid % n_bg * BB, gi = bid / n_bg;
  const int n_tiles = cdiv(T, TT);
  const int yhi = CAUSAL ? (n_tiles - 1) * TT + 16 * J * (MT - 1) + LEAD + 15 : 16 * cdiv(T, 16);

  // The input rows from -LEAD (cp.async where unit allows; a row at a time, so that no
  // division runs per copy), then the window: copy 0 holds W[yhi - i] = w[T - 1 - yhi + i],
  // copy 1 W[yhi - 1 - i]; one load a value.
  for (int r = 0; r < BB; ++r) {
    const bool row_ok = b0 + r < B;
    const uint16_t* const src = row_ok ? in + (static_cast<int64_t>(b0 + r) * C + c) * T : in;
    half_tc::stage_row(tid * unit, THREADS * unit, -LEAD, T, K_LEN, unit, row_ok, src,
                       k_smem + r * K_ROW);
  }
  copy_commit();
  {
    // Eight loads in flight before their stores (as stage_row's element-wise path).
    const uint16_t* const wrow = w + static_cast<int64_t>(c) * T;
    const int len = Cfg::w_len(T), base = T - 1 - yhi;
    for (int i0 = tid; i0 <= len; i0 += 8 * THREADS) {
      uint16_t v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int i = i0 + u * THREADS, x = base + i;
        v[u] = i <= len && x >= 0 && x < T ? wrow[x] : uint16_t(0);
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int i = i0 + u * THREADS;
        if (i < len) w_smem[i] = v[u];
        if (i > 0 && i <= len) w_smem[W0_LEN + i - 1] = v[u];
      }
    }
  }
  copy_wait<0>();
  TIMEX_SYNC();

  int col_off[NT];
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const int col = 8 * n + g;
    col_off[n] = (col % BB) * K_ROW + 16 * (col / BB) + 2 * q + LEAD;
  }
  const int xw = CAUSAL ? g - 2 * q : 2 * q - g;
  const uint16_t* const wpair = (g & 1) ? w_smem : w_smem + W0_LEN - 1;
  auto pair = [&](int y) {
    return CAUSAL ? lds32(wpair + (yhi - y))
                  : half_tc::swap_halves(lds32(wpair + (yhi - y - 1)));
  };
  const int64_t chan = static_cast<int64_t>(c) * T;

  for (int tile = gi; tile < n_tiles; tile += groups) {
    const int ot0 = tile * TT;
    const int ms0 = CAUSAL ? -LEAD : ot0;
    const int NS = CAUSAL ? cdiv(imin(ot0 + TT - LEAD, T) + LEAD, 16) : cdiv(T - ot0, 16);
    const int s_begin = NS * warp / NWARP, s_end = NS * (warp + 1) / NWARP;
    float acc[MT][NT][4] = {};
    uint32_t carry[MT];  // a2 of the previous step: this step's a1
    // The warp's steps chain their MMAs into one set of accumulators (at most 78 steps: T <=
    // 4848 where the kernel fits, 2368 at BB = 4: 39). Summing every 16 steps' products in
    // their own fragments first, as the chunked kernel does, took 10% more time at (8, 512,
    // 1188) float16 (run 54: 128 registers and spills against 114) for a bias from the tensor
    // cores' rounding toward zero of about 2^-24 a step: under 1e-5 after 78, beside float16's
    // 2^-11.
#pragma unroll 1
    for (int s = s_begin; s < s_end; ++s) {
      const int ms = ms0 + 16 * s;  // first reduction index of the step
      half_tc::toeplitz_step<scalar_t, MT, NT, J, CAUSAL>(acc, carry, s == s_begin, ot0, ms, xw,
                                                          pair, k_smem + ms, col_off);
    }

    // The warps' sums through shared memory: entry j of lane l of warp v at (v FRAG + j) 32 + l.
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
      for (int n = 0; n < NT; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          red[(warp * FRAG + (i * NT + n) * 4 + e) * 32 + lane] = acc[i][n][e];
        }
      }
    }
    TIMEX_SYNC();
#pragma unroll
    for (int jj = 0; jj < FRAG / NWARP; ++jj) {
      const int j = warp * (FRAG / NWARP) + jj;
      const int i = j / (NT * 4), n = j / 4 % NT, e = j % 4;
      const int col = 8 * n + 2 * q + (e & 1);
      const int t = ot0 + 16 * (J * i + col / BB) + g + 8 * (e >> 1);
      const int b = b0 + col % BB;
      if (t < T && b < B) {
        float sum = red[j * 32 + lane];
#pragma unroll
        for (int v = 1; v < NWARP; ++v) sum += red[(v * FRAG + j) * 32 + lane];
        out[static_cast<int64_t>(b) * C * T + chan + t] = static_cast<scalar_t>(sum + eps);
      }
    }
    TIMEX_SYNC();  // the sums are read before the next tile's are written
  }
#endif
}

}  // namespace kernels
}  // namespace rwkv
