// LLTM over a sequence, the "step" path: the tile product that each step kernel
// (lltm_sequence_step_forward.cuh, lltm_sequence_step_backward.cuh) runs before its cell
// epilogue. One CTA computes, for BM rows of the batch (from m0) and NG column groups of
// J columns each (from j0), the float sums
//   acc[n][g][jj] = sum_k A[m0 + n][k] * Bw[g * gstride + j0 + jj][k],   k < K,
// on tensor cores, with A (rows_a, K) and Bw both row-major [row][k] in global memory (row
// strides lda, ldb elements). Forward: A = h_{t-1}, Bw = W_h (3S, S), NG = 3 groups (the gates)
// with gstride = S, so that one thread ends up holding z_i, z_o and z_c of the same (row,
// column) in registers. Backward: A = dz_{t+1}, Bw = W_h^T (S, 3S), NG = 1.
//
// Element types: bfloat16 / float16 as one mma.sync m16n8k16 per k step of 16 (float
// accumulation: every product of two half-type values is exact in float); float32 as 3xTF32
// (common/mma_tf32.h: each operand split into a tf32 big part and the tf32 rest, three
// mma.sync m16n8k8 per k step of 8, big*small + small*big + big*big), so that the product is
// float32-accurate. Both parts are rounded to nearest (split_tf32_rn): with big truncated
// (split_tf32) small always has x's sign and is truncated again as it enters the tensor cores,
// and the H100 measured 3-4x plain PyTorch's float32 error through the recurrence (rounded:
// within 1.6x, benchmarks/results/lltm_sequence_float32_step_h100.md). The tensor cores also
// truncate their sums, so each k step's big * big (8 exact products) sums in a fragment of its
// own that is added to the total with an ordinary (round-to-nearest) float add, and only the
// cross terms (2^-11 of the total and less) are chained across K.
//
// K is consumed in chunks of Chunk<T>::kBK (128 bytes of a row: 64 half-type values, 32
// floats) through a cp.async pipeline of Tl::kStages stages in shared memory (deep: a step's
// product is short, so the chunks in flight are what hides the L2 latency); each stage holds
// A's BM rows and Bw's NG * J rows of the chunk, row stride 144 bytes (an odd multiple of 16
// modulo 128, so the 8 rows that one ldmatrix 8x8 matrix reads fall in 8 distinct bank
// groups). Rows past rows_a, columns past ncols and k past K are zero-filled by the copy
// (cp.async with source size 0), so they add nothing.
//
// Warps: WM x WN; warp (wm, wn) owns MT = BM / WM / 16 row tiles of 16 and, in each group,
// NJ = J / WN / 8 column tiles of 8 (columns wn * NJ * 8 ...). Both MMA shapes take their
// fragments from the same ldmatrix calls: an 8x8 matrix of 16-bit elements is 8 rows of 16
// bytes, i.e. 8 half-type values or 4 floats of k, and lane (g, q) receives the 4 bytes at
// offset 4q of row g, which is the pair (2q, 2q + 1) of an m16n8k16 fragment and the single
// value q of an m16n8k8 .tf32 one. Accumulator fragments as PTX lays them out
// (lltm_sequence_mma.cuh): acc[mt][g][nj][e] with e = 2 h + c holds row 16 mt + lane / 4 +
// 8 h, column 8 nj + 2 (lane % 4) + c of the warp's tile. The sums run in a fixed order (k
// ascending within each MMA chain, the warp sets of a split tile added in set order), so every
// result is bitwise reproducible.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/mma_tf32.h"
#include "lltm/lltm_sequence_mma.cuh"
#include "lltm/lltm_sequence_step_primitives.cuh"

namespace lltm::step {

constexpr int kSegs = 8;          // 16-byte copies per row and stage
constexpr int kRowBytes = 144;    // shared row stride (see above): 128 bytes of k and 16 spare
constexpr int kKSteps = 4;        // MMA k steps per stage (4 of 16 half values, 4 of 8 floats)

// A stage's k extent in elements of T.
template <typename T>
struct Chunk {
  static constexpr int kPiece = 16 / static_cast<int>(sizeof(T));  // elements per 16 bytes
  static constexpr int kBK = kSegs * kPiece;                        // k per stage
  static constexpr int kLdk = kRowBytes / static_cast<int>(sizeof(T));  // row stride
  static_assert(kBK == kKSteps * 2 * kPiece, "an MMA k step is 32 bytes of k");
};

// KS > 1 splits every stage's k steps over KS sets of WM x WN warps (warp w: set w / (WM WN),
// position w % (WM WN)); set ks multiplies k steps ks, ks + KS, ... and the sets' sums are
// added in set order through shared memory after the last stage (kernels: only set 0 runs
// the epilogue). That shortens each warp's chain of dependent MMAs KS times where a CTA's
// tile is narrow and K long (float32 at S = 1024: 3 MMAs a k step).
//
// KC > 1 splits the stages over KC CTAs along grid z: CTA r multiplies stages
// [r nk / KC, (r + 1) nk / KC) and stores its sums in a global slot; the CTA that finishes last
// (a counter per output tile) adds the KC slots in slot order, so that the result does not
// depend on which one that is, and runs the epilogue (KSplit).
template <int BM_, int J_, int NG_, int WM_, int WN_, int STAGES, int KS_ = 1, int KC_ = 1>
struct Tile {
  static constexpr int BM = BM_, J = J_, NG = NG_, WM = WM_, WN = WN_, kStages = STAGES;
  static constexpr int KS = KS_, KC = KC_;
  static constexpr int kTileWarps = WM * WN, kWarps = kTileWarps * KS, kThreads = 32 * kWarps;
  static constexpr int MT = BM / WM / 16;  // 16-row tiles per warp
  static constexpr int NJ = J / WN / 8;    // 8-column tiles per warp and group
  static constexpr int BN = NG * J;        // Bw rows per CTA
  static constexpr int kAcc = MT * NG * NJ * 4;  // accumulators per thread
  static constexpr int kStageBytes = (BM + BN) * kRowBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static_assert(BM % (16 * WM) == 0 && J % (8 * WN) == 0, "warp tiles of whole MMA tiles");
  static_assert(kStages >= 2, "a pipeline");
  static_assert(kKSteps % KS == 0, "whole k steps per warp set");
  static_assert((KS - 1) * kTileWarps * 32 * kAcc * 4 <= kSmemBytes, "the sets' sums fit");
  static_assert(KC >= 1, "KC");
  static constexpr int kSlotFloats = kTileWarps * 32 * kAcc;  // one CTA's sums (KC > 1)
};

// Two consecutive elements of T as one access of twice their size (the epilogues' pairs of
// columns 2q, 2q + 1: even columns of rows whose length is a multiple of 8, so aligned).
template <typename T>
struct alignas(2 * sizeof(T)) Two {
  T lo, hi;
};

template <typename T>
LLTM_MMA_FN Two<T> load_two(const T* p) {
  return *reinterpret_cast<const Two<T>*>(p);
}

template <typename T>
LLTM_MMA_FN void store_two(T* p, Two<T> v) {
  *reinterpret_cast<Two<T>*>(p) = v;
}

template <typename T>
LLTM_MMA_FN T element(const Two<T>& v, int e) {
  return e == 0 ? v.lo : v.hi;
}

// Two floats as one 8-byte access (the backward's carry pairs).
struct alignas(8) FloatTwo {
  float lo, hi;
};

// The launcher's tiles (lltm_sequence_step.cu says which runs when): 64 rows x 32 columns on
// 8 warps (each 32 rows x 8 columns per group), and 32 rows x 8 columns on 2 warps (small) or
// on 4 sets of 2 (split); stages as many as keep the shared memory near 110-140 KiB (big) or
// 46-64 KiB (small, split). The same bytes per stage in every dtype, so float32 stages hold
// half the k.
using FwdBig = Tile<64, 32, 3, 2, 4, 6>;
using BwdBig = Tile<64, 32, 1, 2, 4, 8>;
using FwdSmall = Tile<32, 8, 3, 2, 1, 8>;
using BwdSmall = Tile<32, 8, 1, 2, 1, 8>;
// 64 x 64 on 8 warps (32 x 16 each), the backward only: fewer fragment loads per MMA than
// BwdBig, half the CTAs (LLTM_STEP_BWD_TILE=wide).
using BwdWide = Tile<64, 64, 1, 2, 4, 6>;
// The small tiles with each stage's 4 k steps split over 4 sets of warps (8 warps).
using FwdSplit = Tile<32, 8, 3, 2, 1, 8, 4>;
using BwdSplit = Tile<32, 8, 1, 2, 1, 8, 4>;
// The split tile with one row tile of 16 (small batches: half the copies and fragments of A
// per stage, 4 warps).
using FwdTiny = Tile<16, 8, 3, 1, 1, 8, 4>;
using BwdTiny = Tile<16, 8, 1, 1, 1, 8, 4>;
// The tiny forward tile with the stages split over 4 CTAs (KSplit).
using FwdTinyK = Tile<16, 8, 3, 1, 1, 8, 4, 4>;

// The operands of one CTA's product (see the top of this file).
template <typename T>
struct Operands {
  const T* a;
  int64_t lda, rows_a, m0;
  const T* b;
  int64_t ldb, gstride, ncols, j0;
  int64_t k;
};

// The global scratch of a KC > 1 launch: KC slots of Tl::kSlotFloats floats per output tile
// (x, y), and a counter per output tile, zero before the first launch; the last CTA of a tile
// sets its counter back to zero, so that every step's launch finds them zero.
struct KSplit {
  float* slots = nullptr;
  int* counters = nullptr;
  int64_t tiles_x = 0;  // grid x: output tile (x, y) is number y tiles_x + x
};

// One thread's share of every stage's copies: copy n of a stage is element i = tid + n
// kThreads of the (BM + BN) x kSegs grid of 16-byte pieces (row i / kSegs, piece i % kSegs).
// kThreads is a multiple of kSegs, so a thread's pieces share one k offset (kPiece (tid %
// kSegs)) and sit kThreads / kSegs rows apart. The row pointers are worked out once per
// kernel; a stage then costs a thread an add, a compare and a copy per piece.
template <typename Tl, typename T>
struct StageCopies {
  static constexpr int kCopies = (Tl::BM + Tl::BN) * kSegs;
  static constexpr int kPerThread = (kCopies + Tl::kThreads - 1) / Tl::kThreads;
  static_assert(Tl::kThreads % kSegs == 0, "a thread's pieces share their k offset");
  const T* src[kPerThread];  // row start + this thread's k offset; null: a zero row
  int dst[kPerThread];       // element offset in a stage; -1: no piece (past kCopies)
  int koff;                  // this thread's k offset in a chunk

  LLTM_MMA_FN StageCopies(const Operands<T>& op, int tid) {
    koff = Chunk<T>::kPiece * (tid % kSegs);
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) {
      const int i = tid + n * Tl::kThreads, r = i / kSegs;
      src[n] = nullptr;
      dst[n] = i < kCopies ? r * Chunk<T>::kLdk + koff : -1;
      if (i >= kCopies) continue;
      if (r < Tl::BM) {
        const int64_t row = op.m0 + r;
        if (row < op.rows_a) src[n] = op.a + row * op.lda + koff;
      } else {
        const int rb = r - Tl::BM, g = rb / Tl::J, jj = rb % Tl::J;
        const int64_t col = op.j0 + jj;
        if (col < op.ncols) src[n] = op.b + (g * op.gstride + col) * op.ldb + koff;
      }
    }
  }

  // Stage kc (k in [kc kBK, (kc + 1) kBK)) into st.
  LLTM_MMA_FN void issue(T* st, const Operands<T>& op, int kc) const {
    const int64_t k0 = static_cast<int64_t>(kc) * Chunk<T>::kBK;
    const bool k_in = k0 + koff < op.k;
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) {
      if (dst[n] < 0) continue;
      const bool valid = k_in && src[n] != nullptr;
      cp_async16(st + dst[n], valid ? src[n] + k0 : op.a, valid);
    }
  }
};

// The float32 product of a warp's k steps of one stage (fragments as ldmatrix delivered
// them: raw float bits), 3xTF32: each k step's big * big sums in a fragment of its own that
// is added to acc (round to nearest), the cross terms big * small + small * big (2^-11 of the
// product and less) accumulate in cross across the whole K (see the top of this file).
template <typename Tl, int N>
LLTM_MMA_FN void steps_mma_tf32(float (&acc)[Tl::MT][Tl::NG][Tl::NJ][4],
                                float (&cross)[Tl::MT][Tl::NG][Tl::NJ][4],
                                const uint32_t (&af)[N][Tl::MT][4],
                                const uint32_t (&bf)[N][Tl::NG][Tl::NJ][2]) {
#pragma unroll
  for (int kk = 0; kk < N; ++kk) {
    uint32_t ab[Tl::MT][4], as[Tl::MT][4], bb[Tl::NG][Tl::NJ][2], bs[Tl::NG][Tl::NJ][2];
#pragma unroll
    for (int mt = 0; mt < Tl::MT; ++mt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        fused_ops::split_tf32_rn(fused_ops::bits_float(af[kk][mt][e]), ab[mt][e], as[mt][e]);
      }
#pragma unroll
    for (int g = 0; g < Tl::NG; ++g)
#pragma unroll
      for (int nj = 0; nj < Tl::NJ; ++nj)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          fused_ops::split_tf32_rn(fused_ops::bits_float(bf[kk][g][nj][e]), bb[g][nj][e],
                                   bs[g][nj][e]);
        }
#pragma unroll
    for (int g = 0; g < Tl::NG; ++g)
#pragma unroll
      for (int nj = 0; nj < Tl::NJ; ++nj)
#pragma unroll
        for (int mt = 0; mt < Tl::MT; ++mt) {
          float part[4] = {0.f, 0.f, 0.f, 0.f};
          fused_ops::mma_tf32(part, ab[mt], bb[g][nj]);
          fused_ops::mma_tf32(cross[mt][g][nj], as[mt], bb[g][nj]);
          fused_ops::mma_tf32(cross[mt][g][nj], ab[mt], bs[g][nj]);
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][g][nj][e] += part[e];
        }
  }
}

// Adds the KS warp sets' sums in set order into set 0's acc, through shared memory (after the
// pipeline's last stage: every copy has landed and been read). The whole CTA calls it.
template <typename Tl>
__device__ __forceinline__ void reduce_sets(float (&acc)[Tl::MT][Tl::NG][Tl::NJ][4], void* smem,
                                            int ks, int tw, int lane) {
  float* flat = &acc[0][0][0][0];
  float* red = static_cast<float*>(smem);
  __syncthreads();
  if (ks > 0) {
    float* mine = red + ((ks - 1) * Tl::kTileWarps + tw) * 32 * Tl::kAcc + lane;
#pragma unroll
    for (int i = 0; i < Tl::kAcc; ++i) mine[i * 32] = flat[i];
  }
  __syncthreads();
  if (ks == 0) {
    for (int set = 1; set < Tl::KS; ++set) {
      const float* theirs = red + ((set - 1) * Tl::kTileWarps + tw) * 32 * Tl::kAcc + lane;
#pragma unroll
      for (int i = 0; i < Tl::kAcc; ++i) flat[i] += theirs[i * 32];
    }
  }
}

// With KC > 1: CTA z's sums (set 0's acc) into its slot; true in the CTA that finishes its
// tile last, which then holds the KC slots' sum, added in slot order. The whole CTA calls it.
// The release / acquire pattern of a last-block reduction: every writer's slot stores, then a
// fence, then its counter increment; the last one fences after seeing the count and reads.
template <typename Tl>
__device__ __forceinline__ bool reduce_split(float (&acc)[Tl::MT][Tl::NG][Tl::NJ][4],
                                             const KSplit& split, void* smem, int ks, int tw,
                                             int lane) {
  const int64_t tile = static_cast<int64_t>(blockIdx.y) * split.tiles_x + blockIdx.x;
  float* slots = split.slots + tile * Tl::KC * Tl::kSlotFloats;
  float* flat = &acc[0][0][0][0];
  if (ks == 0) {
    float* mine = slots + static_cast<int64_t>(blockIdx.z) * Tl::kSlotFloats + tw * 32 *
                  Tl::kAcc + lane;
#pragma unroll
    for (int i = 0; i < Tl::kAcc; ++i) mine[i * 32] = flat[i];
  }
  thread_fence();
  __syncthreads();
  int* last = static_cast<int*>(smem);  // the pipeline's buffers are free by now
  if (threadIdx.x == 0) {
    const int seen = atomic_add(split.counters + tile, 1);
    *last = seen == Tl::KC - 1;
    if (seen == Tl::KC - 1) split.counters[tile] = 0;  // for the next step's launch
  }
  __syncthreads();
  const bool is_last = *last != 0;
  if (is_last && ks == 0) {
    thread_fence();
    const float* base = slots + tw * 32 * Tl::kAcc + lane;
#pragma unroll
    for (int i = 0; i < Tl::kAcc; ++i) {
      const volatile float* v = base + i * 32;
      float sum = v[0];
      for (int r = 1; r < Tl::KC; ++r) sum += v[static_cast<int64_t>(r) * Tl::kSlotFloats];
      flat[i] = sum;
    }
  }
  return is_last;
}

// acc (zeroed here) = this warp's share of the CTA's product; the whole CTA calls it. With
// KS > 1 only the warps of set 0 (warp < kTileWarps) hold the CTA's sums on return. Returns
// whether this CTA holds them (KC > 1: the last of its tile's CTAs, reduce_split), else true.
template <typename Tl, typename T>
__device__ __forceinline__ bool tile_gemm(float (&acc)[Tl::MT][Tl::NG][Tl::NJ][4],
                                          const Operands<T>& op, T* smem,
                                          const KSplit& split = KSplit{}) {
  using C = Chunk<T>;
  constexpr int kStageElems = Tl::kStageBytes / static_cast<int>(sizeof(T));
  constexpr int kLocal = kKSteps / Tl::KS;  // k steps a warp multiplies per stage
  constexpr bool kFloat = std::is_same_v<T, float>;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int tw = warp % Tl::kTileWarps, ks = warp / Tl::kTileWarps;
  const int wm = tw / Tl::WN, wn = tw % Tl::WN;
  float cross[Tl::MT][Tl::NG][Tl::NJ][4];  // float32 only (see steps_mma_tf32)
#pragma unroll
  for (int mt = 0; mt < Tl::MT; ++mt)
#pragma unroll
    for (int g = 0; g < Tl::NG; ++g)
#pragma unroll
      for (int nj = 0; nj < Tl::NJ; ++nj)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][g][nj][e] = cross[mt][g][nj][e] = 0.f;
  const int nk_all = static_cast<int>((op.k + C::kBK - 1) / C::kBK);
  // This CTA's stages [kc0, kc0 + nk): all of them unless KC > 1.
  const int rank = Tl::KC > 1 ? static_cast<int>(blockIdx.z) : 0;
  const int kc0 = rank * nk_all / Tl::KC;
  const int nk = (rank + 1) * nk_all / Tl::KC - kc0;
  // ldmatrix rows of this lane, in units of 16 bytes of k (a piece; a k step is 2 pieces):
  // A .x4 (matrix lane / 8: rows + 8 (bit 0), k + 1 piece (bit 1)); Bw .x4 over two k steps
  // (matrix lane / 8: k + lane / 8 pieces; matrices 0, 1 are the fragment of the first step,
  // 2, 3 of the second), or .x2 over one where the warp sets split the k steps (lanes 0-15's
  // addresses: k + (lane / 8) pieces).
  const int i8 = lane >> 3;
  const int a_off =
      (wm * Tl::MT * 16 + (lane & 7) + 8 * (i8 & 1)) * C::kLdk + C::kPiece * (i8 >> 1);
  const int b_row = (Tl::BM + wn * Tl::NJ * 8 + (lane & 7)) * C::kLdk;
  const int b_off = b_row + C::kPiece * (Tl::KS == 1 ? i8 : (i8 & 1));
  const StageCopies<Tl, T> copies(op, tid);
#pragma unroll
  for (int s = 0; s < Tl::kStages - 1; ++s) {
    if (s < nk) copies.issue(smem + s * kStageElems, op, kc0 + s);
    cp_async_commit();
  }
  for (int kc = 0; kc < nk; ++kc) {
    // Stage kc has landed (at most kStages - 2 younger groups in flight), and every warp is
    // done with stage kc - 1, whose buffer the load below refills.
    cp_async_wait<Tl::kStages - 2>();
    __syncthreads();
    const int next = kc + Tl::kStages - 1;
    if (next < nk) copies.issue(smem + (next % Tl::kStages) * kStageElems, op, kc0 + next);
    cp_async_commit();
    const T* st = smem + (kc % Tl::kStages) * kStageElems;
    // Every fragment of the stage first, then every MMA: ldmatrix and mma are volatile asm,
    // which the compiler keeps in program order, so loading each fragment just before its
    // MMA would leave every MMA waiting out an ldmatrix latency. Local step j is the stage's
    // k step j KS + ks.
    uint32_t af[kLocal][Tl::MT][4], bf[kLocal][Tl::NG][Tl::NJ][2];
#pragma unroll
    for (int j = 0; j < kLocal; ++j) {
      const int kk = j * Tl::KS + ks;
#pragma unroll
      for (int mt = 0; mt < Tl::MT; ++mt) {
        mma::ldmatrix_x4(af[j][mt], st + a_off + mt * 16 * C::kLdk + kk * 2 * C::kPiece);
      }
    }
    if constexpr (Tl::KS == 1) {
#pragma unroll
      for (int k2 = 0; k2 < kKSteps / 2; ++k2)
#pragma unroll
        for (int g = 0; g < Tl::NG; ++g)
#pragma unroll
          for (int nj = 0; nj < Tl::NJ; ++nj) {
            uint32_t r[4];
            mma::ldmatrix_x4(r, st + b_off + (g * Tl::J + nj * 8) * C::kLdk + k2 * 4 * C::kPiece);
            bf[2 * k2][g][nj][0] = r[0];
            bf[2 * k2][g][nj][1] = r[1];
            bf[2 * k2 + 1][g][nj][0] = r[2];
            bf[2 * k2 + 1][g][nj][1] = r[3];
          }
    } else {
#pragma unroll
      for (int j = 0; j < kLocal; ++j)
#pragma unroll
        for (int g = 0; g < Tl::NG; ++g)
#pragma unroll
          for (int nj = 0; nj < Tl::NJ; ++nj) {
            const int kk = j * Tl::KS + ks;
            mma::ldmatrix_x2(bf[j][g][nj],
                             st + b_off + (g * Tl::J + nj * 8) * C::kLdk + kk * 2 * C::kPiece);
          }
    }
    if constexpr (kFloat) {
      steps_mma_tf32<Tl>(acc, cross, af, bf);
    } else {
#pragma unroll
      for (int j = 0; j < kLocal; ++j)
#pragma unroll
        for (int g = 0; g < Tl::NG; ++g)
#pragma unroll
          for (int nj = 0; nj < Tl::NJ; ++nj)
#pragma unroll
            for (int mt = 0; mt < Tl::MT; ++mt) {
              mma::mma_16816<T>(acc[mt][g][nj], af[j][mt], bf[j][g][nj]);
            }
    }
  }
  cp_async_wait<0>();
  if constexpr (kFloat) {
#pragma unroll
    for (int mt = 0; mt < Tl::MT; ++mt)
#pragma unroll
      for (int g = 0; g < Tl::NG; ++g)
#pragma unroll
        for (int nj = 0; nj < Tl::NJ; ++nj)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][g][nj][e] += cross[mt][g][nj][e];
  }
  if constexpr (Tl::KS > 1) reduce_sets<Tl>(acc, smem, ks, tw, lane);
  if constexpr (Tl::KC > 1) {
    __syncthreads();  // every warp is done with the shared memory reduce_split reuses
    return reduce_split<Tl>(acc, split, smem, ks, tw, lane);
  } else {
    (void)split;
    return true;
  }
}

}  // namespace lltm::step
