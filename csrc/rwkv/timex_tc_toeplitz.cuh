// RWKV TimeX, bfloat16 and float16: the Toeplitz products (forward, CAUSAL, and grad_k) on
// tensor cores, mma.sync m16n8k16 with the inputs staged in their own type and float
// accumulation (sm_80 and newer; older targets compile an empty body and never launch it).
//
// Per channel the product is out (T x B) = A (T x T) * in (T x B), A[t][n] = W[t - n] causal
// (zero for n > t), W[n - t] anti-causal. A block computes one channel x TT outputs x BB batch
// rows; each of its NWARP warps holds MT 16-row MMA tiles (m) x NT 8-column tiles (n). With
// fewer than 8 * NT batch rows the columns are filled with time instead ("time folds", as in
// toeplitz_tc_kernel): column (row b, fold f) of a tile is batch row b shifted by 16 * f, so
// J = 8 * NT / BB folds; tile m and fold f of a warp hold the outputs
// ow0 + 16 * (J * m + f) + [0, 16), and the warp owns TW = 16 * J * MT consecutive outputs.
// The reduction index m runs over the inputs of fold 0 (fold f reads its row 16 * f further
// on): causal it starts LEAD = 16 * (J - 1) before 0 (the later folds' first inputs), anti-
// causal it ends at T (the later folds read zeros past the end).
//
// A 16 x 16 block of A is Toeplitz: causal A[r][j] = W[D + r - j] (D = tile time - first
// input), so the lane's fragment (g = lane / 4, q = lane % 4, x = g - 2q) is
// a0 = a3 = (W[D+x], W[D+x-1]), a1 = (W[D+x+8], ..), a2 = (W[D+x-8], ..): three 32-bit pairs
// of consecutive W, read from a staged window of W; the next k step (D - 16) reuses a2 as its
// a1, so a step loads two pairs per tile. Anti-causal likewise with A[r][j] = W[E + j - r],
// x = 2q - g, pairs (W[y], W[y+1]). The window holds W descending (w ascending, as in memory)
// twice, the second copy one element on, so that every pair is one aligned 32-bit load: lanes
// of even and odd g read different copies. A causal pair is then in the MMA's order (lower k
// = larger d in the low half), an anti-causal one swapped.
//
// Per chunk of UC reduction indices the block stages (double-buffered) the input rows
// [BB][UC + LEAD] (cp.async, or element by element for misaligned or odd-length rows) and
// the window of W (through registers: loaded before the chunk's products, stored after).
// Each chunk's products are summed in their own fragments and added to the totals with
// float adds (the tensor cores round their sums toward zero: the bias stays that of UC / 16
// sums whatever T). Each output is written by one thread after a fixed-order sum:
// deterministic.
#pragma once

#include "rwkv/timex_tc_common.cuh"

namespace rwkv {
namespace kernels {

template <int NT_, int J_, int MT_, int NWARP_, int UC_, int MINB_>
struct ToeplitzHalfConfig {
  static constexpr int NT = NT_, J = J_, MT = MT_, NWARP = NWARP_, UC = UC_, MINB = MINB_;
  static constexpr int THREADS = 32 * NWARP;
  static constexpr int BB = 8 * NT / J;
  static constexpr int LEAD = 16 * (J - 1);
  static constexpr int TW = 16 * J * MT;
  static constexpr int TT = NWARP * TW;
  static constexpr int K_LEN = UC + LEAD;
  // K_ROW / 8 odd: the 8 rows (g) x 4 words (q) of a B load hit 32 banks (BB >= 8).
  static constexpr int K_ROW = K_LEN + 8;
  static constexpr int K_BUF = BB * K_ROW;
  static constexpr int WL = TT - LEAD + UC;  // W values that a chunk's pairs start at
  // Copy 0 reads one value past them; its length is 32 mod 64 elements, so that copy 1 lies 16
  // banks on and the lanes reading either copy (about 8 words each) do not share a bank.
  static constexpr int W0_LEN = WL + 2 + ((32 - (WL + 2) % 64) + 64) % 64;
  static constexpr int W_BUF = W0_LEN + WL;  // copy 1 follows copy 0
  static constexpr int W_PER_THREAD = cdiv(W_BUF, THREADS);
  static constexpr int SMEM_BYTES = 2 * (K_BUF + W_BUF) * 2;
  static_assert(8 * NT % J == 0 && BB >= 1 && UC % 16 == 0 && TT % UC == 0, "tile sizes");
};

// w: (C, T); in, out: (B, C, T), contiguous. CAUSAL: out = eps + causal product (forward);
// else out = anti-causal product (grad_k from grad_out, eps 0). unit: the elements per copy
// that in's rows allow (8, 4, 2 or 1: stage_rows, timex_tc_common.cuh). Grid: one block per
// (channel, batch group, time tile), channel fastest, the heaviest tiles first.
template <typename scalar_t, typename Cfg, bool CAUSAL>
TIMEX_KERNEL(Cfg::THREADS, Cfg::MINB)
toeplitz_half_kernel(const scalar_t* __restrict__ w_, const scalar_t* __restrict__ in_,
                     scalar_t* __restrict__ out, int B, int C, int T, float eps, int unit) {
#if defined(TIMEX_EMULATE) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800)
  constexpr int NT = Cfg::NT, J = Cfg::J, MT = Cfg::MT, UC = Cfg::UC, BB = Cfg::BB;
  constexpr int LEAD = Cfg::LEAD, TW = Cfg::TW, TT = Cfg::TT, K_ROW = Cfg::K_ROW;
  constexpr int W0_LEN = Cfg::W0_LEN, W_BUF = Cfg::W_BUF;
  constexpr int WPT = Cfg::W_PER_THREAD, THREADS = Cfg::THREADS;
  using half_tc::lds32;
  const uint16_t* const w = reinterpret_cast<const uint16_t*>(w_);
  const uint16_t* const in = reinterpret_cast<const uint16_t*>(in_);

  TIMEX_SHARED_BYTES(smem_raw);
  uint16_t* const k_smem = reinterpret_cast<uint16_t*>(smem_raw);  // [2][BB][K_ROW]
  uint16_t* const w_smem = k_smem + 2 * Cfg::K_BUF;                 // [2][W_BUF]

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;

  const ToeplitzBlock blk = toeplitz_block<BB, TT, CAUSAL>(B, C, T);
  const int c = blk.c, b0 = blk.b0, ot0 = blk.ot0;
  const int ow0 = ot0 + warp * TW;  // this warp's first output

  // Chunks of reduction indices m0 = chunk * UC (- LEAD causal) that reach the block's rows:
  // causal m <= last row ot0 + TT - LEAD - 1 and m < T; anti-causal m >= ot0, m < T.
  const int first = CAUSAL ? 0 : ot0 / UC;
  const int last = CAUSAL ? cdiv(imin(ot0 + TT - LEAD, T) + LEAD, UC) : cdiv(T, UC);
  auto chunk_m0 = [&](int chunk) { return chunk * UC - (CAUSAL ? LEAD : 0); };
  // Highest W index of a chunk's window: copy 0 holds W[yhi - i], copy 1 W[yhi - 1 - i].
  auto chunk_yhi = [&](int m0) { return CAUSAL ? ot0 + TT - LEAD - 1 - m0 : m0 + UC - ot0; };

  const uint16_t* const wrow = w + static_cast<int64_t>(c) * T;
  uint16_t wreg[WPT];
  auto load_w = [&](int chunk) {  // this thread's share of the window, into registers
    const int base = T - 1 - chunk_yhi(chunk_m0(chunk));  // w index of copy 0's element 0
#pragma unroll
    for (int j = 0; j < WPT; ++j) {
      const int i = tid + j * THREADS;
      const int x = i < W0_LEN ? base + i : base + 1 + (i - W0_LEN);
      wreg[j] = i < W_BUF && x >= 0 && x < T ? wrow[x] : uint16_t(0);
    }
  };
  auto store_w = [&](int buf) {
#pragma unroll
    for (int j = 0; j < WPT; ++j) {
      const int i = tid + j * THREADS;
      if (i < W_BUF) w_smem[buf * W_BUF + i] = wreg[j];
    }
  };
  auto stage_in = [&](int chunk, int buf) {
    uint16_t* ks = k_smem + buf * Cfg::K_BUF;
    half_tc::stage_rows<BB, Cfg::K_LEN, THREADS>(
        tid, chunk_m0(chunk), T, unit,
        [&](int r, const uint16_t*& src) {
          const bool ok = b0 + r < B;
          src = ok ? in + (static_cast<int64_t>(b0 + r) * C + c) * T : in;
          return ok;
        },
        [&](int r, int x) { return ks + r * K_ROW + x; });
  };

  float acc[MT][NT][4] = {};
  // B operand of n tile n: column 8n + g = (row, fold); its staged row from the fold's start.
  int col_off[NT];
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const int col = 8 * n + g;
    col_off[n] = (col % BB) * K_ROW + 16 * (col / BB) + 2 * q;
  }
  // Lanes of odd g read pairs at even offsets of copy 0, the others at odd offsets: copy 1
  // (one element on) at the offset - 1. See the top of the file.
  const int xw = CAUSAL ? g - 2 * q : 2 * q - g;

  load_w(first);
  store_w(0);
  stage_in(first, 0);
  copy_commit();
  for (int chunk = first; chunk < last; ++chunk) {
    const int buf = (chunk - first) & 1;
    const bool next = chunk + 1 < last;
    if (next) {
      load_w(chunk + 1);
      stage_in(chunk + 1, buf ^ 1);
    }
    copy_commit();
    copy_wait<1>();
    TIMEX_SYNC();
    const int m0 = chunk_m0(chunk), yhi = chunk_yhi(m0);
    // k steps of 16 that reach this warp's rows [ow0, ow0 + TW - LEAD).
    int s_begin = 0, s_end = UC / 16;
    if (ow0 >= T) {
      s_end = 0;
    } else if (CAUSAL) {
      s_end = imin(s_end, cdiv(ow0 + TW - LEAD - m0, 16));
    } else if (ow0 > m0) {
      s_begin = (ow0 - m0) / 16;
    }
    const uint16_t* const ws = w_smem + buf * W_BUF;
    const uint16_t* const wpair = (g & 1) ? ws : ws + W0_LEN - 1;
    const uint16_t* const ks = k_smem + buf * Cfg::K_BUF;
    // The pair whose first element is W[y]: causal (W[y], W[y-1]) at copy offset yhi - y;
    // anti-causal (W[y], W[y+1]), loaded as (W[y+1], W[y]) from offset yhi - y - 1, swapped.
    auto pair = [&](int y) {
      return CAUSAL ? lds32(wpair + (yhi - y)) : half_tc::swap_halves(lds32(wpair + (yhi - y - 1)));
    };
    float part[MT][NT][4] = {};
    uint32_t carry[MT];  // a2 of the previous step: this step's a1
#pragma unroll 1
    for (int s = s_begin; s < s_end; ++s) {
      const int ms = m0 + 16 * s;  // first reduction index of the step
      half_tc::toeplitz_step<scalar_t, MT, NT, J, CAUSAL>(part, carry, s == s_begin, ow0, ms, xw,
                                                          pair, ks + (ms - m0), col_off);
    }
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
      for (int n = 0; n < NT; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][n][e] += part[i][n][e];
      }
    }
    if (next) store_w(buf ^ 1);
    TIMEX_SYNC();
  }

  if (ow0 >= T) return;
  const int64_t chan = static_cast<int64_t>(c) * T;
#pragma unroll
  for (int i = 0; i < MT; ++i) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 8 * n + 2 * q + (e & 1);
        const int t = ow0 + 16 * (J * i + col / BB) + g + 8 * (e >> 1);
        const int b = b0 + col % BB;
        if (t < T && b < B) {
          out[static_cast<int64_t>(b) * C * T + chan + t] =
              static_cast<scalar_t>(acc[i][n][e] + eps);
        }
      }
    }
  }
#endif
}

}  // namespace kernels
}  // namespace rwkv
