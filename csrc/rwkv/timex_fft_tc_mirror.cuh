// RWKV TimeX on tensor cores (the transform: timex_fft_tc.cuh): the middle's sweep that meets
// each frequency f with -f, so that one complex transform carries two real rows. A real row's
// spectrum is Hermitian, so the spectrum Z of x0 + i x1 holds both:
//   DFT(x0)[f] = (Z[f] + conj(Z[-f])) / 2,  DFT(x1)[f] = (Z[f] - conj(Z[-f])) / (2 i).
// Three users: W's spectra of two channels (timex_fft_tc_spectrum.cuh); the conv kernel's row
// pair of two channels, the last batch row where B is odd (middle_two_channels: a pair of one
// row ran a half-empty transform); the backward's last row where B is odd, its g and k rows
// in one transform (middle_backward_row: they took two, each half empty).
//
// Pairing f with -f in the storage order (the top of timex_fft_tc.cuh: position s holds
// f = d_1 + r_1 (d_2 + 16 (...)), s's most significant digit f's least): -f takes f's lowest
// nonzero digit d to r - d and every higher one to 15 - d; in s, the highest nonzero digit,
// and every lower one complemented. A middle step covers the 256 positions of one block
// (digits k1 = (s / 16) % 16, k2 = s % 16, f's two highest), so for a block b > 0 every
// position p of it pairs with 255 - p of block partner(b): lane (4 g + q)'s entry (t, e) with
// lane 31 - lane's entry (1 - t, 3 - e) (middle_position), one __shfl_xor_sync. Block 0 pairs
// within itself: 16 k1 + k2 with 16 (16 - k1) + 15 - k2 for k1 > 0, k2 with 16 - k2 for k1 = 0.
#pragma once

#include <cstdint>
#include <type_traits>

#include "rwkv/timex_fft_tc.cuh"

namespace rwkv {
namespace fft_tc {

// Whether the blocks pair as BlockPairs has them: N = r_1 16^3 (8192, 12288, ..., 32768); not
// 2048, 2560, 3072, 4096 and 6144, whose digits above the middle's are one (8, 10, 12, 16, 24).
TIMEX_FFT_HD constexpr bool mirror_blocks(int N) { return N / 256 == 16 * radix1(N); }

// The blocks of 256 positions pair by the two digits above the middle's: a block index b =
// 16 d_1 + d_2 (N / 256 = 16 r_1: mirror_blocks). b in [1, 16) pairs with 16 - b, b in
// [16, 16 r_1) with 16 r_1 + 15 - b. Units of work: unit 0 is block 0; units 1 .. 8 the pairs
// (u, 16 - u) (8 with itself); the rest (16 + v, 16 r_1 - 1 - v) for v < 8 (r_1 - 1).
template <int N>
struct BlockPairs {
  static constexpr int kR1 = radix1(N);
  static_assert(mirror_blocks(N), "two digits above the middle's");
  static constexpr int kUnits = 1 + 8 + 8 * (kR1 - 1);
  static TIMEX_FFT_HD constexpr void blocks(int u, int& a, int& b) {
    if (u <= 8) {
      a = u, b = u == 0 ? 0 : 16 - u;
    } else {
      a = 16 + (u - 9), b = 16 * kR1 + 15 - a;
    }
  }
};

// The position within block 0 that holds -f of the position p's f (the top of this file).
TIMEX_FFT_HD constexpr int block0_partner(int p) {
  const int k1 = p / 16, k2 = p % 16;
  return k1 != 0 ? 16 * (16 - k1) + 15 - k2 : (16 - k2) % 16;
}

// Both rows' spectra from Z's entries y (at some position) and p (at the position of -f):
// w0 = (y + conj p) u0, w1 = (y - conj p) / i u1.
TIMEX_FFT_DEVICE void separate(cf32 y, cf32 p, float u0, float u1, cf32& w0, cf32& w1) {
  w0 = {(y.x + p.x) * u0, (y.y - p.y) * u0};
  w1 = {(y.y + p.y) * u1, (p.x - y.x) * u1};
}

// The middle's first half over the planes (the transform before the pass at stride 16), a
// BlockPairs unit per warp in turn: for each n-tile t of the unit's blocks, tile(block, t, y,
// p), y the lane's 4 entries of the spectrum there (MiddleLane::dft) and p those at the
// positions of -f (the spectrum kernel's separation; its partners by shuffles, block 0's
// through buf: 256 cf32 of shared memory).
template <int N, int TH, typename S, typename Tile>
TIMEX_FFT_DEVICE void mirror_sweep(const uint16_t* re, const uint16_t* im,
                                   const MiddleLane<S, N>& ml, cf32* buf, Tile&& tile) {
  using P = BlockPairs<N>;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, q = lane % 4;
  // Entry e of this lane's tile t in a block: position 16 (g + 8 (e / 2)) + 8 t + 2 q + e % 2.
  const auto pos = [&](int t, int e) { return 16 * (g + 8 * (e / 2)) + 8 * t + 2 * q + e % 2; };
  for (int u = warp; u < P::kUnits; u += TH / 32) {
    int a, b;
    P::blocks(u, a, b);
    uint32_t ar[4], ai[4], br[4], bi[4];
    ml.load(re, im, a, ar, ai);
    if (a == 0) {  // block 0 pairs within itself, not lane with lane ^ 31
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        cf32 y[4];
        ml.dft(ar, ai, t, y);
#pragma unroll
        for (int e = 0; e < 4; ++e) buf[pos(t, e)] = y[e];
      }
      __syncwarp();
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        cf32 y[4], p[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) y[e] = buf[pos(t, e)], p[e] = buf[block0_partner(pos(t, e))];
        tile(0, t, y, p);
      }
      __syncwarp();  // buf's readers are done before the next pass writes it
      continue;
    }
    if (b != a) {
      ml.load(re, im, b, br, bi);
    } else {
#pragma unroll
      for (int r = 0; r < 4; ++r) br[r] = ar[r], bi[r] = ai[r];
    }
    // Entry (t, e) of block a pairs with lane ^ 31's entry (1 - t, 3 - e) of block b, and
    // block b's the other way round.
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      cf32 ya[4], yb[4], pa[4], pb[4];
      ml.dft(ar, ai, t, ya);
      ml.dft(br, bi, 1 - t, yb);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        pa[e] = {__shfl_xor_sync(0xffffffffu, yb[3 - e].x, 31),
                 __shfl_xor_sync(0xffffffffu, yb[3 - e].y, 31)};
        pb[e] = {__shfl_xor_sync(0xffffffffu, ya[3 - e].x, 31),
                 __shfl_xor_sync(0xffffffffu, ya[3 - e].y, 31)};
      }
      tile(a, t, ya, pa);
      if (b != a) tile(b, 1 - t, yb, pb);
    }
  }
}

// K = 2: entries i, i + 1 of a spectrum row in the middle's layout (i even) and their
// partners j + 1, j (one 16-byte access each); K = 1: entries i and j. Entry i from ri, j from
// rj (where both blocks are staged apart: the two staged blocks).
template <int K, typename E>
TIMEX_FFT_DEVICE void at_pairs(const E* ri, const E* rj, int i, int j, cf32 (&vi)[K],
                               cf32 (&vj)[K]) {
  if constexpr (K == 2) {
    load2(ri + i, vi[0], vi[1]);
    load2(rj + j, vj[1], vj[0]);
  } else {
    vi[0] = load1(ri + i), vj[0] = load1(rj + j);
  }
}
template <int K, typename E>
TIMEX_FFT_DEVICE void at_pairs(const E* row, int i, int j, cf32 (&vi)[K], cf32 (&vj)[K]) {
  at_pairs<K>(row, row, i, j, vi, vj);
}
template <int K>
TIMEX_FFT_DEVICE void put_pairs(cf32* row, int i, int j, const cf32 (&vi)[K],
                                const cf32 (&vj)[K]) {
  if constexpr (K == 2) {
    store2(row + i, vi[0], vi[1]);
    store2(row + j, vj[1], vj[0]);
  } else {
    row[i] = vi[0], row[j] = vj[0];
  }
}

// The sweep for kernels that run the inverse after it (conv, backward), with the spectrum
// staged in the planes. Per unit, one warp: the middle's first half of blocks a and b (b != a)
// into the blocks' own planes, rounded to S, at their middle_index positions within the block
// (only this warp touches the block's 256 positions: swz keeps them within it), after
// hook(kSweepPrefetch, a', b') for the warp's next unit (prefetch_l1 of the rows that pair
// reads there: its loads had waited on L2 right where they were used, a quarter of the conv
// kernel's stall samples at (1, 512, 16384) (ncu, H200)); then hook(kSweepReady, a, b) (a
// caller that stages those rows in shared memory waits for its copies), each
// frequency pair (f, -f) once, pair(k, i, j, y, p, oy, op): k = 2 for entries i, i + 1 (f in
// block a, its lane's) with partners j + 1, j (the middle's layout holds -f there), k = 1 in
// block 0 for entry i with partner j (taken by the lane of the lower position; f = -f, at 0
// and N / 2: j = i); y, p the staged spectrum there, K entries each; its products oy, op go
// back to those positions (no other lane touches them); hook(kSweepFetch, a', b') for the
// warp's next unit (and before the loop for its first: the caller's asynchronous copies of
// the rows pair reads there, into a buffer that the unit's pairs no longer read); then the
// inverse
// (MiddleLane::inverse_store) of each block from its products (not where !INVERSE: the
// products stay staged, S at middle_index positions). Not mirror_sweep's shuffles:
// two blocks' fragments, entries and products held in registers for the inverse spilled
// 440-600 bytes a thread at the conv kernel's 80 registers (ptxas -v, sm_90). The cost: the
// spectrum and the products each rounded to float16 once more than in middle.
// Staged entries i, i + 1 (i even) of the planes, as floats.
template <typename S>
TIMEX_FFT_DEVICE void staged_two(const uint16_t* re, const uint16_t* im, int i, cf32& v0,
                                 cf32& v1) {
  const uint32_t r = ld32(re + i), m = ld32(im + i);
  v0 = {bits_to_float<S>(static_cast<uint16_t>(r & 0xffffu)),
        bits_to_float<S>(static_cast<uint16_t>(m & 0xffffu))};
  v1 = {bits_to_float<S>(static_cast<uint16_t>(r >> 16)),
        bits_to_float<S>(static_cast<uint16_t>(m >> 16))};
}

constexpr std::integral_constant<int, 0> kSweepPrefetch{};
constexpr std::integral_constant<int, 1> kSweepReady{};
constexpr std::integral_constant<int, 2> kSweepFetch{};

template <int N, int TH, bool INVERSE = true, typename S, typename Hook, typename Pair>
TIMEX_FFT_DEVICE void mirror_sweep_staged(uint16_t* re, uint16_t* im, const MiddleLane<S, N>& ml,
                                          Hook&& hook, Pair&& pair) {
  using P = BlockPairs<N>;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const auto at_unit = [&](auto phase, int u) {
    if (u >= P::kUnits) return;
    int a, b;
    P::blocks(u, a, b);
    hook(phase, a, b);
  };
  at_unit(kSweepFetch, warp);
  at_unit(kSweepPrefetch, warp);
  const auto stage = [&](int blk) {
    uint32_t xr[4], xi[4];
    ml.load(re, im, blk, xr, xi);
    __syncwarp();  // the warp's ldmatrix reads of the block are done before its stores
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      cf32 y[4];
      ml.dft(xr, xi, t, y);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = middle_index(blk, lane, t, h);
        st32(re + i, pack2<S>(y[2 * h].x, y[2 * h + 1].x));
        st32(im + i, pack2<S>(y[2 * h].y, y[2 * h + 1].y));
      }
    }
  };
  const auto two_at = [&](int i, cf32 (&v)[2]) { staged_two<S>(re, im, i, v[0], v[1]); };
  const auto put_two = [&](int i, cf32 v0, cf32 v1) {
    st32(re + i, pack2<S>(v0.x, v1.x));
    st32(im + i, pack2<S>(v0.y, v1.y));
  };
  const auto inverse = [&](int blk) {
    uint32_t pr[2][2], pi[2][2];  // the inverse's B fragments: entries 2u, 2u + 1 of tile t
#pragma unroll
    for (int u = 0; u < 2; ++u) {
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        pr[u][t] = ld32(re + middle_index(blk, lane, t, u));
        pi[u][t] = ld32(im + middle_index(blk, lane, t, u));
      }
    }
    __syncwarp();  // every lane's reads of the block are done before the stores
    ml.inverse_store(re, im, blk, pr, pi);
  };
  for (int u = warp; u < P::kUnits; u += TH / 32) {
    at_unit(kSweepPrefetch, u + TH / 32);
    int a, b;
    P::blocks(u, a, b);
    stage(a);
    if (b != a) stage(b);
    hook(kSweepReady, a, b);
    __syncwarp();
    if (a == 0) {  // position s = 16 (g + 8 h) + 8 t + 2 q + r's partner block0_partner(s)
      const int g = lane / 4, q = lane % 4;
      // Not unrolled: the 8 entries' index arithmetic unrolled spilled 120 bytes a thread.
#pragma unroll 1
      for (int e = 0; e < 8; ++e) {
        const int t = e / 4, h = (e / 2) % 2, r = e % 2;
        const int s = 16 * (g + 8 * h) + 8 * t + 2 * q + r, m = block0_partner(s);
        if (m < s) continue;  // the partner's lane takes the pair
        const int k1 = m / 16, rest = m % 16;
        const int i = middle_index(0, lane, t, h) + r;
        const int j = middle_index(0, 4 * (k1 % 8) + (rest % 8) / 2, rest / 8, k1 / 8) + rest % 2;
        const cf32 y[1] = {{bits_to_float<S>(re[i]), bits_to_float<S>(im[i])}};
        const cf32 p[1] = {{bits_to_float<S>(re[j]), bits_to_float<S>(im[j])}};
        cf32 oy[1], op[1];
        pair(std::integral_constant<int, 1>{}, i, j, y, p, oy, op);
        re[i] = to_bits<S>(oy[0].x), im[i] = to_bits<S>(oy[0].y);
        re[j] = to_bits<S>(op[0].x), im[j] = to_bits<S>(op[0].y);  // j = i: the same values
      }
    } else {  // entries (t, 2h + r) of a with lane ^ 31's (1 - t, 2 (1 - h) + 1 - r) of b
#pragma unroll 1
      for (int t = 0; t < 2; ++t) {
        if (t == 1 && b == a) break;  // a block paired with itself: tile 0 meets tile 1
#pragma unroll 1
        for (int h = 0; h < 2; ++h) {
          const int i = middle_index(a, lane, t, h), j = middle_index(b, lane ^ 31, 1 - t, 1 - h);
          cf32 y[2], w[2], oy[2], op[2];
          two_at(i, y);
          two_at(j, w);
          const cf32 p[2] = {w[1], w[0]};
          pair(std::integral_constant<int, 2>{}, i, j, y, p, oy, op);
          put_two(i, oy[0], oy[1]);
          put_two(j, op[1], op[0]);
        }
      }
    }
    at_unit(kSweepFetch, u + TH / 32);
    if constexpr (INVERSE) {
      __syncwarp();  // the products of both blocks are in place
      inverse(a);
      if (b != a) inverse(b);
    }
  }
}

// The convolution's middle (middle, timex_fft_tc_middle.cuh) for one row of each of two
// channels: the planes hold the transform Z of x0 2^s0 + i x1 2^s1 (x0 of channel c0, x1 of
// c1); X0 = (Z + conj Z[-f]) u0 and X1 = (Z - conj Z[-f]) / i u1 (separate; u_j 1/2, or 0
// where row j adds nothing: zeros, or its W not finite, which is then not read), and
// X0 W0 + i X1 W1 goes on through the inverse as middle's Z W does: its inverse transform is
// x0 * h0 2^s0 + i x1 * h1 2^s1, each row in its own part, W's scales as there (each channel's
// own wexp). Its magnitudes keep middle's bound: |X0 W0| + |X1 W1| <= (|X0| + |X1|) max |W|.
// At -f: X_j[-f] = conj X_j[f] (real rows).
template <typename S, int N, int TH>
TIMEX_FFT_DEVICE void middle_two_channels(uint16_t* re, uint16_t* im, const ch16* w0row,
                                          const ch16* w1row, float u0, float u1,
                                          const DftFrags<S>& f16) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const MiddleLane<S, N> ml(f16, lane);
  // W's 8 lines of each block, each channel: a lane a line.
  const auto prefetch = [&](auto phase, int a, int b) {
    if constexpr (decltype(phase)::value == kSweepPrefetch) {
      const bool second = lane >= 16, at_b = lane % 16 >= 8;
      if ((second ? u1 : u0) != 0.f) {
        prefetch_step(second ? w1row : w0row, at_b ? b : a, lane % 8);
      }
    }
  };
  mirror_sweep_staged<N, TH>(re, im, ml, prefetch, [&](auto k, int i, int j, const auto& y,
                                                       const auto& p, auto& oy, auto& op) {
    constexpr int K = decltype(k)::value;
    const cf32 zero{0.f, 0.f};
    cf32 w0i[K], w0j[K], w1i[K], w1j[K];
#pragma unroll
    for (int r = 0; r < K; ++r) w0i[r] = w0j[r] = w1i[r] = w1j[r] = zero;
    if (u0 != 0.f) at_pairs<K>(w0row, i, j, w0i, w0j);  // (a W not finite is not read)
    if (u1 != 0.f) at_pairs<K>(w1row, i, j, w1i, w1j);
#pragma unroll
    for (int r = 0; r < K; ++r) {
      cf32 x0, x1;
      separate(y[r], p[r], u0, u1, x0, x1);
      const cf32 a = cmul(x0, w0i[r]), b = cmul(x1, w1i[r]);
      const cf32 c = cmul(fft::conj(x0), w0j[r]), d = cmul(fft::conj(x1), w1j[r]);
      oy[r] = {a.x - b.y, a.y + b.x};
      op[r] = {c.x - d.y, c.y + d.x};
    }
  });
}

// The backward's middle (middle_backward, timex_fft_tc_middle.cuh) for one batch row whose g
// and k rows share the transform: the planes hold that of g 2^sg + i k 2^sx. G = (Z + conj
// Z[-f]) ug and X = (Z - conj Z[-f]) / i ux (separate; 1/2, or 0 for a zero row); acc gets
// G conj(X) pscale (set where `first`, else added; at -f its conjugate), and G conj(W) goes on
// through the inverse: grad_k's row (the correlation of g with h) in the real part. Every
// entry of acc is written, not by middle_backward's lane (the caller's barriers order the
// two). Returns the largest |component| of the acc entries that this lane wrote. FINAL (the
// channel's last term, its sum complete: row_and_grad_w): acc gets the sum's Hermitian part
// (A[f] + conj A[-f]) / 2, whose inverse is real, Re IDFT(A), what grad_w takes, and G conj(W)
// stays staged in the planes (mirror_sweep_staged's !INVERSE), and the sums of squares
// row_and_grad_w scales them by go to sums: |H|^2 (in double: H is in the units of g k, whose
// squares can leave float's range) and |G conj(W)|^2 (as computed, before their rounding in the
// planes) over the entries this lane wrote, each frequency once: a pass over acc and the planes
// fewer than taking them from there (the backward kernel 220 -> 209 us at (1, 512, 16384)
// bfloat16, 538 -> 518 at (3, 512, 16384); H200, run 39 (b)). sums: 2 doubles where FINAL.
// STAGED: stage holds kRowStageBytes a warp of shared memory, where each unit's W and acc blocks
// arrive by cp.async while the previous unit's inverses and this one's staging run, instead of
// loads in the pair loop that wait where they are used (ncu at (3, 512, 16384), run 39: this
// loop held 13.9% of the backward's stall samples, 10.2% on long scoreboard). Backward kernel
// (H200, bfloat16, run 40 (a)): 493.2 -> 463.8 us at (3, 512, 14000), 209.7 -> 204.3 at
// (1, 512, 16384), 404.2 -> 396.6 at (1, 1024, 16384), 497.0 -> 493.3 at (3, 512, 16384).
constexpr int kRowStageBytes = 6144;  // W's two blocks (2 x 1 KiB), acc's (2 x 2 KiB)

template <typename S, int N, int TH, bool FINAL = false, bool STAGED = false>
TIMEX_FFT_DEVICE float middle_backward_row(uint16_t* re, uint16_t* im, const ch16* wrow,
                                           cf32* acc, bool first, float pscale, float ug,
                                           float ux, const DftFrags<S>& f16,
                                           double* sums = nullptr, char* stage = nullptr) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const MiddleLane<S, N> ml(f16, lane);
  float amax = 0.f;
  double hh = 0.0;
  float pp = 0.f;
  // Where STAGED: this warp's unit's W blocks a and b at wa and wa + 256 (b's not copied where
  // b = a), acc's at sa and sa + 256.
  char* const mine = STAGED ? stage + kRowStageBytes * warp : nullptr;
  const ch16* const wa = reinterpret_cast<const ch16*>(mine);
  const cf32* const sa = reinterpret_cast<const cf32*>(mine + 2048);
  const auto hook = [&](auto phase, int a, int b) {
    constexpr int kPhase = decltype(phase)::value;
    if constexpr (!STAGED) {
      // W's 8 lines of each block (lanes 0-15) and acc's 16 (lanes 16-31, two each).
      if constexpr (kPhase == kSweepPrefetch) {
        if (lane < 16) {
          prefetch_step(wrow, lane < 8 ? a : b, lane % 8);
        } else if (!first) {
          prefetch_step(acc, a, lane - 16);
          prefetch_step(acc, b, lane - 16);
        }
      }
    } else if constexpr (kPhase == kSweepFetch) {
      __syncwarp();  // the warp's reads of the buffer (the last unit's pairs) are done
      // 16 bytes a copy: 4 entries of W (a block: 2 a lane), 2 of acc (4 a lane)
      const int n = b != a ? 2 : 1;
#pragma unroll 1
      for (int blk = 0; blk < n; ++blk) {
        const int from = 256 * (blk == 0 ? a : b);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          cp_async16(mine + 1024 * blk + 16 * (lane + 32 * r), wrow + from + 4 * (lane + 32 * r));
        }
        if (!first) {
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            cp_async16(mine + 2048 + 2048 * blk + 16 * (lane + 32 * r),
                       acc + from + 2 * (lane + 32 * r));
          }
        }
      }
    } else if constexpr (kPhase == kSweepReady) {
      cp_async_wait_all();  // (the sweep's __syncwarp then shows every lane's copies)
    }
  };
  mirror_sweep_staged<N, TH, !FINAL>(re, im, ml, hook, [&](auto k, int i, int j,
                                                           const auto& y, const auto& p,
                                                           auto& oy, auto& op) {
    constexpr int K = decltype(k)::value;
    cf32 wi[K], wj[K], ai[K], aj[K];
    if constexpr (STAGED) {  // i in block a, j in b (in a where b = a): their staged copies
      const int jb = i / 256 == j / 256 ? 0 : 256;
      at_pairs<K>(wa, wa + jb, i % 256, j % 256, wi, wj);
      if (!first) at_pairs<K>(sa, sa + jb, i % 256, j % 256, ai, aj);
    } else {
      at_pairs<K>(wrow, i, j, wi, wj);
      if (!first) at_pairs<K>(acc, i, j, ai, aj);
    }
#pragma unroll
    for (int r = 0; r < K; ++r) {
      cf32 gs, xs;
      separate(y[r], p[r], ug, ux, gs, xs);
      const cf32 v = cmul(gs, fft::conj(xs));
      const cf32 s{v.x * pscale, v.y * pscale};
      ai[r] = first ? s : cf32{ai[r].x + s.x, ai[r].y + s.y};
      aj[r] = first ? fft::conj(s) : cf32{aj[r].x + s.x, aj[r].y - s.y};
      if constexpr (FINAL) {
        ai[r] = {0.5f * (ai[r].x + aj[r].x), 0.5f * (ai[r].y - aj[r].y)};
        aj[r] = fft::conj(ai[r]);
      }
      amax = std::fmax(amax, std::fmax(norm_inf(ai[r]), norm_inf(aj[r])));
      oy[r] = cmul(gs, fft::conj(wi[r]));
      op[r] = cmul(fft::conj(gs), fft::conj(wj[r]));
      if constexpr (FINAL) {  // f and -f, or f = -f (K = 1, j = i) once
        const double h = double(ai[r].x) * ai[r].x + double(ai[r].y) * ai[r].y;
        const float o = oy[r].x * oy[r].x + oy[r].y * oy[r].y;
        const bool both = K == 2 || j != i;
        hh += both ? 2.0 * h : h;
        pp += both ? o + op[r].x * op[r].x + op[r].y * op[r].y : o;
      }
    }
    put_pairs<K>(acc, i, j, ai, aj);
  });
  if constexpr (FINAL) sums[0] = hh, sums[1] = pp;
  return amax;
}

}  // namespace fft_tc
}  // namespace rwkv
