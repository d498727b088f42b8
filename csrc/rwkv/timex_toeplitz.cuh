// RWKV TimeX direct kernels: the Toeplitz products out (causal) and grad_k (anti-causal) on
// float FMAs (toeplitz_kernel) and, for float32 on sm_80 and newer, on tf32 tensor cores
// as 3xTF32 (toeplitz_tc_kernel). timex_kernels.cuh has the whole picture.
#pragma once

#include "common/mma_tf32.h"
#include "rwkv/timex_direct_common.cuh"

namespace rwkv {
namespace kernels {

// ---------------------------------------------------------------------------------------
// Toeplitz products: forward (CAUSAL) and grad_k (anti-causal).
//
// A block computes NC channels x TT outputs (times) x BB batch rows; it walks the input
// index n in chunks of UC, staging per chunk the input rows [NC][BB][UC] and the window of
// W that the chunk needs, [NC][TT + UC]. A thread holds RT consecutive outputs x RB rows
// (rows bl, bl + NB, ...). Lanes of a warp: bl (NB values) fastest, then the channel cl (NC),
// then the time lane tl (NTW = 32 / (NB * NC)); so the 8 lanes of a quarter warp differ in
// (bl, cl) and read distinct banks, and the time lanes read the same rows (broadcast).
// A warp spans TW = NTW * RT outputs; it skips the inputs that its outputs do not reach, in
// steps of 4 * UG inputs (one unrolled loop body, kept small for the instruction cache).
template <typename acc_t_, int RT_, int RB_, int NB_, int NC_, int NWARP_, int UC_, int UG_,
          int MINB_>
struct ToeplitzConfig {
  using acc_t = acc_t_;
  static constexpr int RT = RT_, RB = RB_, NB = NB_, NC = NC_, NWARP = NWARP_, UC = UC_;
  static constexpr int UG = UG_;      // steps of 4 inputs per unrolled loop body
  static constexpr int MINB = MINB_;  // blocks per SM that __launch_bounds__ asks for
  static constexpr int THREADS = 32 * NWARP;
  static constexpr int NTW = 32 / (NB * NC);
  static constexpr int TW = NTW * RT;
  static constexpr int TT = NWARP * TW;
  static constexpr int BB = NB * RB;
  static constexpr int RING = RT + 4;
  static constexpr int K_LEAD = 0, K_LEN = UC;  // staged inputs per row: those of the chunk
  static constexpr int K_ROW = UC + 4;  // 4 mod 32 words: rows bl, bl+1.. on distinct banks
  static constexpr int K_CH = BB * K_ROW + pad_to(BB * K_ROW, 4 * NB);
  static constexpr int W_LEN = TT + UC;
  static constexpr int W_CH = W_LEN + pad_to(W_LEN, 4 * NB);
  static constexpr int K_BUF = NC * K_CH;
  static constexpr int W_BUF = NC * W_CH;
  static constexpr int SMEM_BYTES = 2 * (K_BUF + W_BUF) * int(sizeof(acc_t));
  static_assert(32 % (NB * NC) == 0, "NB * NC must divide 32");
  static_assert(RT % 4 == 0 && UC % (4 * UG) == 0 && TT % UC == 0, "tile sizes");
};

// Stages chunk `chunk` of a Toeplitz block into buffer `buf`: the input rows [NC][BB][K_LEN]
// from input nc0 = chunk * UC (from nc0 - K_LEAD in the causal direction, K_LEN = UC + K_LEAD:
// the tensor-core kernel's time folds, below) and the window of W that the chunk needs,
// [NC][W_LEN], for the block's outputs from ot0 (see below).
template <typename scalar_t, typename Cfg, bool CAUSAL>
TIMEX_DEVICE void stage_toeplitz_chunk(typename Cfg::acc_t* k_smem, typename Cfg::acc_t* w_smem,
                                       int tid, const scalar_t* __restrict__ w,
                                       const scalar_t* __restrict__ in, int B, int C, int T,
                                       int c0, int b0, int ot0, int chunk, int buf, bool vec_w,
                                       bool vec_in) {
  using acc_t = typename Cfg::acc_t;
  constexpr int NC = Cfg::NC, BB = Cfg::BB, UC = Cfg::UC, THREADS = Cfg::THREADS;
  constexpr int K_ROW = Cfg::K_ROW, K_CH = Cfg::K_CH, W_LEN = Cfg::W_LEN, W_CH = Cfg::W_CH;
  constexpr int K_LEAD = CAUSAL ? Cfg::K_LEAD : 0;
  const int nc0 = chunk * UC;
  acc_t* ks = k_smem + buf * Cfg::K_BUF;
  acc_t* ws = w_smem + buf * Cfg::W_BUF;
  // Tile row rc = (channel ch, batch row): input row (b0 + row, c0 + ch), from nc0 - K_LEAD.
  stage_tile<THREADS, NC * BB, Cfg::K_LEN / 4, scalar_t, acc_t>(
      tid, nc0 - K_LEAD, T, vec_in, [&](int rc, const scalar_t*& src, acc_t*& dst) {
        const int ch = rc / BB, row = rc % BB;
        const int c = c0 + ch, b = b0 + row;
        dst = ks + ch * K_CH + row * K_ROW;
        const bool ok = c < C && b < B;
        src = ok ? in + (static_cast<int64_t>(b) * C + c) * T : in;
        return ok;
      });
  // W[e] = w[c, T-1-e] (zero outside [0, T)) for e = wbase + x, x in [0, W_LEN): the
  // coefficients of outputs t in [ot0, ot0 + W_LEN - UC) and inputs n in [nc0, nc0 + UC)
  // (d = t - n causal, n - t anti-causal; the time folds shift t by K_LEAD, causal).
  // Stored reversed, x at W_LEN-1-x, so that w is read forwards: the group x in
  // [4*x4, 4*x4 + 4) is w[f0 .. f0 + 3], f0 = T-4-wbase-4*x4, in order. With vec_w
  // (T % 4 == 0, aligned rows) f0 % 4 == 0 and a group is all inside or all outside w.
  const int wbase = CAUSAL ? ot0 + K_LEAD - nc0 - UC : nc0 - ot0 - (W_LEN - UC);
  constexpr int WG = NC * W_LEN / 4;
#pragma unroll 1
  for (int gi = tid; gi < WG; gi += THREADS) {
    const int x4 = gi % (W_LEN / 4), ch = gi / (W_LEN / 4);
    const int c = c0 + ch, f0 = T - 4 - wbase - 4 * x4;
    acc_t* dst = ws + ch * W_CH + W_LEN - 4 - 4 * x4;
    const scalar_t* row = c < C ? w + static_cast<int64_t>(c) * T : w;
    if constexpr (std::is_same_v<scalar_t, acc_t>) {
      if (vec_w) {
        const bool ok = c < C && f0 >= 0 && f0 < T;
#pragma unroll
        for (int h = 0; h < int(sizeof(acc_t)) / 4; ++h) {
          const int e = h * 16 / int(sizeof(acc_t));
          copy_async<16>(dst + e, ok ? row + f0 + e : w, ok);
        }
        continue;
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const bool ok = c < C && f0 + i >= 0 && f0 + i < T;
      if constexpr (std::is_same_v<scalar_t, acc_t>) {
        copy_async<sizeof(acc_t)>(dst + i, ok ? row + f0 + i : w, ok);
      } else {
        dst[i] = ok ? static_cast<acc_t>(row[f0 + i]) : acc_t(0);
      }
    }
  }
}

// w: (C, T) contiguous; in, out: (B, C, T) contiguous. CAUSAL: out = eps + causal product of
// in (the forward); otherwise out = anti-causal product of in (grad_k from grad_out; eps is
// then 0). vec_w / vec_in / vec_out: 16-byte vector access to w / in / out is allowed
// (aligned, T % 4 == 0, no type conversion).
// Grid: one block per (channel group, batch group, time tile), the heaviest tiles first.
template <typename scalar_t, typename Cfg, bool CAUSAL>
TIMEX_KERNEL(Cfg::THREADS, Cfg::MINB)
toeplitz_kernel(const scalar_t* __restrict__ w, const scalar_t* __restrict__ in,
                scalar_t* __restrict__ out, int B, int C, int T, typename Cfg::acc_t eps,
                bool vec_w, bool vec_in, bool vec_out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  // sm_80 and newer run the half types on their own tensor-core kernels
  // (timex_tc_*.cuh, timex_cuda.cu): no body for them here.
  if constexpr (sizeof(scalar_t) == 2) {
    return;
  } else  // NOLINT(readability/braces)
#endif
  {
    using acc_t = typename Cfg::acc_t;
    constexpr int RT = Cfg::RT, RB = Cfg::RB, NB = Cfg::NB, NC = Cfg::NC, UC = Cfg::UC;
    constexpr int TW = Cfg::TW, TT = Cfg::TT, BB = Cfg::BB, RING = Cfg::RING;
    constexpr int K_ROW = Cfg::K_ROW, K_CH = Cfg::K_CH, W_LEN = Cfg::W_LEN, W_CH = Cfg::W_CH;

    TIMEX_SHARED_BYTES(smem_raw);
    acc_t* const k_smem = reinterpret_cast<acc_t*>(smem_raw);  // [2][NC][BB][K_ROW]
    acc_t* const w_smem = k_smem + 2 * Cfg::K_BUF;              // [2][NC][W_CH]

    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid & 31, warp = tid >> 5;
    const int bl = lane % NB, cl = (lane / NB) % NC, tl = lane / (NB * NC);

    const int n_cg = cdiv(C, NC), n_bg = cdiv(B, BB), n_tiles = cdiv(T, TT);
    int bid = static_cast<int>(blockIdx.x);
    const int cg = bid % n_cg;
    bid /= n_cg;
    const int bg = bid % n_bg;
    bid /= n_bg;
    // Causal: late tiles do the most work; anti-causal: early ones. Heaviest first.
    const int tile = CAUSAL ? n_tiles - 1 - bid : bid;
    const int c0 = cg * NC, b0 = bg * BB, ot0 = tile * TT;
    const int a = warp * TW + tl * RT;  // this thread's first output, relative to ot0
    const int ow0 = ot0 + warp * TW;    // this warp's first output

    // Chunks of n that reach this tile: n <= t (causal) or n >= t (anti-causal).
    const int first = CAUSAL ? 0 : ot0 / UC;
    const int last = CAUSAL ? cdiv(imin(T, ot0 + TT), UC) : cdiv(T, UC);

    auto stage = [&](int chunk, int buf) {
      stage_toeplitz_chunk<scalar_t, Cfg, CAUSAL>(k_smem, w_smem, tid, w, in, B, C, T, c0, b0, ot0,
                                                  chunk, buf, vec_w, vec_in);
    };

    acc_t acc[RT][RB];
#pragma unroll
    for (int i = 0; i < RT; ++i) {
#pragma unroll
      for (int j = 0; j < RB; ++j) acc[i][j] = acc_t(0);
    }

    stage(first, 0);
    copy_commit();
    for (int chunk = first; chunk < last; ++chunk) {
      const int buf = (chunk - first) & 1;
      if (chunk + 1 < last) stage(chunk + 1, buf ^ 1);
      copy_commit();
      copy_wait<1>();
      TIMEX_SYNC();
      // Steps of 4 * UG inputs of this chunk that reach this warp's outputs.
      constexpr int SUB = 4 * Cfg::UG;
      const int nc0 = chunk * UC;
      int sub_begin = 0, sub_end = UC / SUB;
      if (ow0 >= T) {
        sub_end = 0;
      } else if (CAUSAL) {
        sub_end = imin(sub_end, cdiv(ow0 + TW - nc0, SUB));
      } else if (ow0 > nc0) {
        sub_begin = (ow0 - nc0) / SUB;
      }
#pragma unroll 1
      for (int sub = sub_begin; sub < sub_end; ++sub) {
        const int n0 = sub * SUB;  // first input of the step, relative to nc0
        const acc_t* ks = k_smem + buf * Cfg::K_BUF + cl * K_CH + bl * K_ROW + n0;
        // Window of RING coefficients at step g: ring slot of logical index q is
        // wrap(q - 4g) (causal) or wrap(q + 4g) (anti-causal); coefficient of output i and
        // input m of the step is q = i - m + 4 (causal) or q = m - i + RT (anti-causal).
        // Window position of ring element 0, and its place in the reversed shared copy: the
        // positions x .. x+3 are wr - (x - pos0) .. + 3, read with load4_rev.
        const int pos0 = CAUSAL ? a + UC - 4 - n0 : TT - RT - a + n0;
        const acc_t* wr = w_smem + buf * Cfg::W_BUF + cl * W_CH + W_LEN - 4 - pos0;
        acc_t ring[RING];
#pragma unroll
        for (int g = 0; g < Cfg::UG; ++g) {
          if (g == 0) {
#pragma unroll
            for (int q4 = 0; q4 < RING / 4; ++q4) {
              const Vec4<acc_t> v = load4_rev(wr - 4 * q4);
#pragma unroll
              for (int e = 0; e < 4; ++e) ring[4 * q4 + e] = v.v[e];
            }
          } else if (CAUSAL) {
            const Vec4<acc_t> v = load4_rev(wr + 4 * g);
#pragma unroll
            for (int e = 0; e < 4; ++e) ring[wrap(e - 4 * g, RING)] = v.v[e];
          } else {
            const Vec4<acc_t> v = load4_rev(wr - 4 * g - RT);
#pragma unroll
            for (int e = 0; e < 4; ++e) ring[wrap(RT + e + 4 * g, RING)] = v.v[e];
          }
#pragma unroll
          for (int j = 0; j < RB; ++j) {
            const Vec4<acc_t> kv = load4(ks + j * NB * K_ROW + 4 * g);
#pragma unroll
            for (int m = 0; m < 4; ++m) {
#pragma unroll
              for (int i = 0; i < RT; ++i) {
                const int q = CAUSAL ? i - m + 4 : m - i + RT;
                acc[i][j] += ring[CAUSAL ? wrap(q - 4 * g, RING) : wrap(q + 4 * g, RING)] * kv.v[m];
              }
            }
          }
        }
      }
      TIMEX_SYNC();
    }

    const int c = c0 + cl;
    if (ow0 >= T || c >= C) return;
    const int o0 = ot0 + a;
#pragma unroll
    for (int j = 0; j < RB; ++j) {
      const int b = b0 + bl + NB * j;
      if (b >= B) continue;
      scalar_t* orow = out + (static_cast<int64_t>(b) * C + c) * T;
      if constexpr (std::is_same_v<scalar_t, acc_t>) {
        if (vec_out) {
#pragma unroll
          for (int i4 = 0; i4 < RT / 4; ++i4) {
            if (o0 + 4 * i4 < T) {
              Vec4<acc_t> v;
#pragma unroll
              for (int e = 0; e < 4; ++e) v.v[e] = acc[4 * i4 + e][j] + eps;
              *reinterpret_cast<Vec4<acc_t>*>(orow + o0 + 4 * i4) = v;
            }
          }
          continue;
        }
      }
#pragma unroll
      for (int i = 0; i < RT; ++i) {
        if (o0 + i < T) orow[o0 + i] = static_cast<scalar_t>(acc[i][j] + eps);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// The same Toeplitz products on tensor cores (mma.sync m16n8k8 .tf32, float32 accumulation),
// sm_80 and newer, for float32 (float16 and bfloat16 have their own bf16/fp16 tensor-core
// kernels there: timex_tc_toeplitz.cuh).
//
// "3xTF32": each operand x is split into a tf32 part big (10 explicit mantissa bits) and the
// rest, small, and a product is accumulated as big*small + small*big + big*big: the dropped
// small*small term and small's truncation to tf32 are below 2^-20 relative; measured against
// float64 the error is about twice the FMA kernel's (7.8e-7 against 4.1e-7 at
// (32, 768, 768)), and tests/test_rwkv.py bounds both.
//
// A block computes one channel x TT outputs x BB batch rows; each of its NWARP warps holds two
// 16-row MMA tiles (m) x 8 * NT columns (NT 8-column tiles). With fewer than 8 * NT batch
// rows the columns are filled with time instead ("time folds"): a Toeplitz matrix is the same
// for every shift in time, so column (row b, fold f) of a tile is the batch row b shifted by
// 16 * f. The block has BB = 8 * NT / J rows and J folds; its warp owns TW = 32 * J outputs,
// tile m (0, 1) and fold f holding the outputs ow0 + 16 * (J * m + f) + [0, 16). The A
// fragment (W) is common to the folds; the B fragment of fold f reads its row 16 * f inputs
// further on. Causal, fold f reads the inputs 16 * (J - 1 - f) earlier than fold J - 1, so
// the staged rows start K_LEAD = 16 * (J - 1) inputs before the chunk (zeros before the
// start); anti-causal, they run K_LEAD inputs past it (zeros past the end). Folds cost
// K_LEAD / 2 inputs per output on average (the rows of the earlier folds read zeros).
// The Toeplitz matrix is never formed: each A fragment element W[t - n] is read from the
// staged window of W, and each B fragment element from the staged input rows. Staging, the
// chunk loop and the skip of the zero triangle (per 8 inputs) are those of toeplitz_kernel.
template <int NT_, int NWARP_, int UC_, int MINB_, int J_ = 1>
struct ToeplitzTCConfig {
  using acc_t = float;
  static constexpr int NT = NT_, NWARP = NWARP_, UC = UC_, MINB = MINB_, J = J_;
  static constexpr int NC = 1;
  static constexpr int THREADS = 32 * NWARP;
  static constexpr int TW = 32 * J;
  static constexpr int TT = NWARP * TW;
  static constexpr int BB = 8 * NT / J;
  static constexpr int K_LEAD = 16 * (J - 1), K_LEN = UC + K_LEAD;
  // K_LEN + 4 = 4 * odd mod 32 words: the 8 column lanes x 4 of a B load hit 32 banks
  // (for BB >= 4: rows b apart by 4 * odd banks, folds by 16).
  static constexpr int K_ROW = K_LEN + 4;
  static constexpr int K_CH = BB * K_ROW;
  static constexpr int W_LEN = TT - K_LEAD + UC;  // A rows span TT - K_LEAD times
  static constexpr int W_CH = W_LEN;
  static constexpr int K_BUF = K_CH;
  static constexpr int W_BUF = W_CH;
  static constexpr int SMEM_BYTES = 2 * (K_BUF + W_BUF) * int(sizeof(float));
  static_assert(UC % 8 == 0 && TT % UC == 0, "tile sizes");
  static_assert(8 * NT % J == 0 && BB >= 4 && (BB % 8 == 0 || 8 % BB == 0), "time folds");
};

using fused_ops::mma_tf32;

template <typename scalar_t, typename Cfg, bool CAUSAL>
TIMEX_KERNEL(Cfg::THREADS, Cfg::MINB)
toeplitz_tc_kernel(const scalar_t* __restrict__ w, const scalar_t* __restrict__ in,
                   scalar_t* __restrict__ out, int B, int C, int T, float eps, bool vec_w,
                   bool vec_in) {
  constexpr bool SPLIT = std::is_same_v<scalar_t, float>;  // 3xTF32 (only float32 runs here)
  constexpr int NT = Cfg::NT, UC = Cfg::UC, J = Cfg::J, TW = Cfg::TW, TT = Cfg::TT, BB = Cfg::BB;
  constexpr int K_ROW = Cfg::K_ROW, K_LEAD = CAUSAL ? Cfg::K_LEAD : 0;
  constexpr int TA = Cfg::W_LEN - UC;  // times spanned by the block's A rows

  TIMEX_SHARED_BYTES(smem_raw);
  float* const k_smem = reinterpret_cast<float*>(smem_raw);  // [2][BB][K_ROW]
  float* const w_smem = k_smem + 2 * Cfg::K_BUF;              // [2][W_LEN]

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;

  const ToeplitzBlock blk = toeplitz_block<BB, TT, CAUSAL>(B, C, T);
  const int c0 = blk.c, b0 = blk.b0, ot0 = blk.ot0;
  const int ow0 = ot0 + warp * TW;  // this warp's first output

  // The A rows of tile m are the times ow0 + K_LEAD + 16 * J * m + [0, 16) (the outputs of
  // fold J - 1 causal, of fold 0 anti-causal); fold f's outputs are 16 * f - K_LEAD later.
  // Chunks of inputs n that reach the block's A rows t: n <= t (causal) or n >= t.
  const int first = CAUSAL ? 0 : ot0 / UC;
  const int last = CAUSAL ? cdiv(imin(T + K_LEAD, ot0 + TT), UC) : cdiv(T, UC);

  float acc[2][NT][4] = {};  // [m tile][n tile][fragment element]
  // Column 8 * n + g of the block: batch row (8 * n + g) % BB, fold (8 * n + g) / BB; its
  // staged inputs start 16 * fold after the row's start (BB divides 8 or 8 divides BB).
  const int col_off = (g % BB) * K_ROW + 16 * (g / BB);

  stage_toeplitz_chunk<scalar_t, Cfg, CAUSAL>(k_smem, w_smem, tid, w, in, B, C, T, c0, b0, ot0,
                                              first, 0, vec_w, vec_in);
  copy_commit();
  for (int chunk = first; chunk < last; ++chunk) {
    const int buf = (chunk - first) & 1;
    if (chunk + 1 < last) {
      stage_toeplitz_chunk<scalar_t, Cfg, CAUSAL>(k_smem, w_smem, tid, w, in, B, C, T, c0, b0,
                                                  ot0, chunk + 1, buf ^ 1, vec_w, vec_in);
    }
    copy_commit();
    copy_wait<1>();
    TIMEX_SYNC();
    // Steps of 8 inputs of this chunk that reach this warp's A rows (causal: up to ow0 + TW - 1;
    // anti-causal: from ow0).
    const int nc0 = chunk * UC;
    int s_begin = 0, s_end = UC / 8;
    if (ow0 >= T) {
      s_end = 0;
    } else if (CAUSAL) {
      s_end = imin(s_end, cdiv(ow0 + TW - nc0, 8));
    } else if (ow0 > nc0) {
      s_begin = (ow0 - nc0) / 8;
    }
    const float* ks = k_smem + buf * Cfg::K_BUF + col_off + q;
    const float* ws = w_smem + buf * Cfg::W_BUF;
    // The tensor cores round their float32 sums toward zero: a chunk's products are summed in
    // its own fragments, then added to acc with round-to-nearest, so that the bias of those
    // roundings stays that of 3 * UC / 8 sums, whatever T.
    float part[2][NT][4] = {};
#pragma unroll 1
    for (int s = s_begin; s < s_end; ++s) {
      const int j = 8 * s + q;  // this lane's input (column of A, row of B), relative to nc0
      // A[r][j] = W[t - n] (causal) or W[n - t]: the staged window holds it at
      // TA - 1 - r + j (causal) or UC - 1 - j + r, r = A row time relative to ot0 + K_LEAD.
      constexpr auto operand = fused_ops::tf32_operand<SPLIT>;
      uint32_t ab[2][4], as[2][4];
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const int r = warp * TW + 16 * J * m + g;
        const int i0 = CAUSAL ? TA - 1 - r + j : UC - 1 - j + r;
        const int d8 = CAUSAL ? -8 : 8;  // row r + 8
        const int d4 = CAUSAL ? 4 : -4;  // column j + 4
        operand(ws[i0], ab[m][0], as[m][0]);
        operand(ws[i0 + d8], ab[m][1], as[m][1]);
        operand(ws[i0 + d4], ab[m][2], as[m][2]);
        operand(ws[i0 + d8 + d4], ab[m][3], as[m][3]);
      }
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        const float* kn = ks + (8 * n % BB) * K_ROW + 16 * (8 * n / BB) + 8 * s;
        uint32_t bb[2], bs[2];
        operand(kn[0], bb[0], bs[0]);
        operand(kn[4], bb[1], bs[1]);
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          if constexpr (SPLIT) {
            mma_tf32(part[m][n], ab[m], bs);
            mma_tf32(part[m][n], as[m], bb);
          }
          mma_tf32(part[m][n], ab[m], bb);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < 2; ++m) {
#pragma unroll
      for (int n = 0; n < NT; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[m][n][e] += part[m][n][e];
      }
    }
    TIMEX_SYNC();
  }

  if (ow0 >= T) return;
  const int64_t chan = static_cast<int64_t>(c0) * T;
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 8 * n + 2 * q + (e & 1);
        const int t = ow0 + 16 * (J * m + col / BB) + g + 8 * (e >> 1);
        const int b = b0 + col % BB;
        if (t < T && b < B) {
          out[static_cast<int64_t>(b) * C * T + chan + t] = static_cast<scalar_t>(acc[m][n][e] + eps);
        }
      }
    }
  }
}

}  // namespace kernels
}  // namespace rwkv
