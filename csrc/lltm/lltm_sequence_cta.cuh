// LLTM over a whole sequence: the single-CTA persistent kernels ("cta" path) for small states
// (S <= 128), their launch plan and the device helpers both directions share. The math and the
// buffers are lltm_sequence.h's; lltm_sequence_cta_forward.cuh and _backward.cuh hold the two
// "chunks" kernels described below, lltm_sequence_cta_{forward,backward}_lanes.cuh the two
// one-barrier "lanes" kernels that the launcher (lltm_sequence_cta.cu) runs unless
// LLTM_SEQUENCE_CTA_FORWARD / _BACKWARD = chunks: the same CTA per batch slice and staged
// inputs, each column's k range split over a lane pair of one warp instead of over warps.
//
// Why one CTA per batch slice: batch rows never interact in the recurrence, so a CTA that holds
// ALL of W_h runs its rows for the whole sequence with two block barriers per step and no
// inter-CTA traffic (the cluster kernels of lltm_sequence_persistent.cuh split W_h's columns
// and pay a cluster barrier and a distributed-shared-memory all-gather per step).
//
// Layout. W_h (3S x S) lives in registers, as float: thread tid = q * Sp + col (Sp = S rounded up
// to a warp, so the Q k-chunks q of a column sit in different warps and every warp has one q)
// holds the 3 x KC values
//   forward:  w[g][kk] = W_h[g S + col][q KC + kk]     (gate rows of column col, k chunk q)
//   backward: w[g][kk] = W_h[g S + q KC + kk][col]     (column col of W_h, row chunk q per gate)
// (zero outside W_h), KC in {8, 16, 32} the smallest with Sp * Q <= 512 threads, Q = the power
// of 2 >= ceil(S / KC). S = 128: KC = 32, Q = 4, 512 threads x 96 weights, 128 registers each.
// The step's left operand A (forward h_{t-1}, backward dz_t) is in shared memory, double
// buffered by step parity, RB batch rows (the CTA's slice of the batch), each row split into
// chunks of KC values at a stride of KC + 4 floats. A step:
//   1. product: each thread sums its chunk (FP32 FMAs: float32-exact, fixed order; a warp reads
//      one chunk, a broadcast) and stores its partial sums (forward 3 per row, one per gate;
//      backward 1 per row, the gates added in-thread) into the partial buffer;
//   2. __syncthreads;
//   3. cell: thread (q, col) runs the pointwise cell of the rows r with r % Q == q (with RB <= Q
//      the warps of q < RB: dense warps, the others wait): the column's Q partial sums added in
//      q order (deterministic), then forward z = P + sum, cell_forward, h_t into the other A
//      buffer; backward cell_backward, dz_t into it; the global outputs written; the carries
//      (forward c, backward dc) stay in the thread's registers;
//   4. __syncthreads: the other A buffer is complete, and the partial buffer is free again.
// (The backward runs 3 then 1: its cell needs the previous step's product.) A is double
// buffered by parity, so a step's writes never meet the reads of the step before.
// The step's global inputs (forward P_t, backward z_t, c_t, grad_hs[t+1]) do not depend on the
// recurrence: each thread stages its own rows' values kAhead steps ahead with cp.async into a
// private ring of kStages slots (no barrier needed: the thread that copies is the one that
// reads), so no step waits for a global load.
//
// Precision: as the cluster kernels (lltm_sequence_persistent.cuh): sums and cell math in
// float; z_t, h_t, c_t, dz_t rounded to T where stored and the recurrence continues from the
// rounded h, c, dz; the backward's carries dh_rec, dc stay in float. Global offsets 64-bit.
//
// tests/test_lltm_sequence_cta_emulation.py compiles these headers as host C++ under
// tests/cuda_emulation.h (FUSED_OPS_EMULATE).
#pragma once

#include <cstdint>
#include <cstring>

#include "lltm/lltm.h"
#include "lltm/lltm_sequence.h"

#if defined(FUSED_OPS_EMULATE)
#define LLTM_CTA_FN inline
#define LLTM_CTA_DEV inline
#else
#define LLTM_CTA_FN __host__ __device__ inline
#define LLTM_CTA_DEV __device__ __forceinline__
#endif

namespace lltm::cta {

constexpr int kMaxThreads = 512;  // S = 128 at 4 chunks per column; 128 registers each
constexpr int kStages = 4;        // slots of the staged-input ring (a power of 2 > kAhead)
constexpr int kAhead = 2;         // steps staged ahead of the one computed

// The launch and shared-memory layout of one direction. Offsets and total in 4-byte words.
struct Plan {
  int state;    // S
  int kc;       // KC: values of each gate per thread
  int q;        // Q: k chunks (threads) per column (power of 2, <= 16)
  int cst;      // chunk stride of the A buffer: KC + 4
  int rb;       // RB: batch rows per CTA
  int sp;       // Sp: S rounded up to a warp
  int threads;  // Sp * Q
  int ald;      // floats per batch row of one A buffer: Q cst (forward), 3 Q cst (backward)
  int nv;       // staged values per (row, column, step): 3 (P) forward, 5 (z, c, grad_h) backward
  int a_off, part_off, stage_off, total;
};

LLTM_CTA_FN int round_up(int a, int m) { return (a + m - 1) / m * m; }

LLTM_CTA_FN int pow2_at_least(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

// Q for (S, KC); at most 16 wherever choose_kc picks KC (Sp * Q <= 512 with Sp >= 32), which
// the kernels' unrolled sums over the Q partial sums rely on.
LLTM_CTA_FN int lanes_for(int state, int kc) { return pow2_at_least((state + kc - 1) / kc); }

// KC for S: the smallest of 8, 16, 32 whose Sp * Q fits kMaxThreads (more threads, shorter
// per-thread sums); 0: S does not fit one CTA (S > 128).
LLTM_CTA_FN int choose_kc(int state) {
  if (state < 1) return 0;
  for (int kc = 8; kc <= 32; kc *= 2) {
    if (round_up(state, 32) * lanes_for(state, kc) <= kMaxThreads) return kc;
  }
  return 0;
}

LLTM_CTA_FN Plan make_plan(int state, int kc, int rb, bool backward) {
  Plan p{};
  p.state = state;
  p.kc = kc;
  p.q = lanes_for(state, kc);
  p.cst = kc + 4;
  p.rb = rb;
  p.sp = round_up(state, 32);
  p.threads = p.sp * p.q;
  p.ald = (backward ? 3 : 1) * p.q * p.cst;
  p.nv = backward ? 5 : 3;
  p.a_off = 0;
  p.part_off = 2 * rb * p.ald;
  p.stage_off = p.part_off + p.q * rb * (backward ? 1 : 3) * p.sp;
  p.total = p.stage_off + kStages * rb * p.nv * state;
  return p;
}

// Where value k (k < S) of a row sits in its A row: chunk k / KC at stride cst.
LLTM_CTA_FN int a_pos(const Plan& p, int k) { return k / p.kc * p.cst + k % p.kc; }

// The partial sum of (chunk q, row r, value v) of column col: v = gate (forward), 0 (backward).
LLTM_CTA_FN int part_pos(const Plan& p, int q, int r, int v, int col) {
  return ((q * p.rb + r) * (p.nv == 3 ? 3 : 1) + v) * p.sp + col;
}

// The staged word of (slot, row r, value v, column col).
LLTM_CTA_FN int stage_pos(const Plan& p, int slot, int r, int v, int col) {
  return ((slot * p.rb + r) * p.nv + v) * p.state + col;
}

#if defined(FUSED_OPS_EMULATE)
inline float* dynamic_smem() { return reinterpret_cast<float*>(emu_smem); }
#else
__device__ __forceinline__ float* dynamic_smem() {
  extern __shared__ float4 lltm_cta_smem[];
  return reinterpret_cast<float*>(lltm_cta_smem);
}
#endif

// Copies the aligned 4-byte word that holds *src into *dst: asynchronously on sm_80 and newer
// (cp.async, completed by stage_wait), an ordinary load and store before. A 2-byte element's
// word also holds a neighbour (the element before or after it in the same 4-byte-aligned
// word); staged() picks the element's half back out. end: one past the last element of src's
// buffer. Where the word would reach past it (a 2-byte buffer's last element at the start of
// a word: an odd element count), that element alone is loaded and stored into its half of the
// slot, synchronously (once per buffer): reading the neighbour there read 2 bytes past the
// allocation (compute-sanitizer memcheck, PYTORCH_NO_CUDA_MEMORY_CACHING=1, at (T, B, F, S) =
// (1, 1, 1, 1) in float16).
template <typename T>
LLTM_CTA_DEV void stage_copy(uint32_t* dst, const T* src, const T* end) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 2, "float or a 2-byte type");
  const auto word = reinterpret_cast<uintptr_t>(src) & ~uintptr_t(3);
  if (sizeof(T) == 2 && word + 4 > reinterpret_cast<uintptr_t>(end)) {
    *reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(dst) +
                          (reinterpret_cast<uintptr_t>(src) & 3)) = *src;
    return;
  }
#if defined(FUSED_OPS_EMULATE)
  std::memcpy(dst, reinterpret_cast<const void*>(word), 4);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(word) : "memory");
#else
  *dst = *reinterpret_cast<const uint32_t*>(word);
#endif
}

LLTM_CTA_DEV void stage_commit() {
#if !defined(FUSED_OPS_EMULATE) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most kAhead of this thread's committed groups are in flight: with one group
// committed per step (possibly empty) and kAhead in the prologue, the current step's is done.
LLTM_CTA_DEV void stage_wait() {
#if !defined(FUSED_OPS_EMULATE) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kAhead) : "memory");
#endif
}

// The value that stage_copy(slot, src) staged, as float (little-endian: a 2-byte element at
// byte 2 of its word is the word's high half).
template <typename T>
LLTM_CTA_DEV float staged(const uint32_t* slot, const T* src) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(slot);
  return static_cast<float>(
      *reinterpret_cast<const T*>(bytes + (reinterpret_cast<uintptr_t>(src) & 3)));
}

struct float4v {
  float x, y, z, w;
};

LLTM_CTA_DEV float4v load4(const float* p) {
#if defined(FUSED_OPS_EMULATE)
  return float4v{p[0], p[1], p[2], p[3]};
#else
  const float4 v = *reinterpret_cast<const float4*>(p);
  return float4v{v.x, v.y, v.z, v.w};
#endif
}

// acc[r][g] += sum over kk < KC of w[g][kk] * a[r ald + g gst + kk] for r < RB: a is this
// thread's chunk of row 0 of the A buffer, rows ald apart; PER_GATE: each gate reads its own
// chunk, gst apart (backward: dz of the 3 gates), else all three read the same (forward: h).
// In kk order: float32-exact products, a fixed order of additions (deterministic).
template <int KC, int RB, bool PER_GATE>
LLTM_CTA_DEV void chunk_dot(const float (&w)[3][KC], const float* a, int ald, int gst,
                            float (&acc)[RB][3]) {
#pragma unroll
  for (int kk = 0; kk < KC; kk += 4) {
#pragma unroll
    for (int r = 0; r < RB; ++r) {
      float4v v = load4(a + r * ald + kk);
#pragma unroll
      for (int g = 0; g < 3; ++g) {
        if (PER_GATE && g > 0) v = load4(a + r * ald + g * gst + kk);
        acc[r][g] = fmaf(w[g][kk], v.x, acc[r][g]);
        acc[r][g] = fmaf(w[g][kk + 1], v.y, acc[r][g]);
        acc[r][g] = fmaf(w[g][kk + 2], v.z, acc[r][g]);
        acc[r][g] = fmaf(w[g][kk + 3], v.w, acc[r][g]);
      }
    }
  }
}

}  // namespace lltm::cta
