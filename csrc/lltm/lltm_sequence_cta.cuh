// LLTM over a whole sequence: the single-CTA persistent kernels ("cta" path) for small states
// (S <= 128), their launch plan and the device helpers both directions share. The math and the
// buffers are lltm_sequence.h's; lltm_sequence_cta_forward.cuh and _backward.cuh hold the two
// kernels, lltm_sequence_cta.cu launches them.
//
// Why one CTA per batch slice: batch rows never interact in the recurrence, so a CTA that holds
// ALL of W_h runs its rows for the whole sequence with one block barrier per step and no
// inter-CTA traffic (the cluster kernels of lltm_sequence_persistent.cuh split W_h's columns
// and pay a cluster barrier and a distributed-shared-memory all-gather per step).
//
// Layout ("lanes"). W_h (3S x S) lives in registers, as float: the k range of each column is
// split over the kLanes = 2 adjacent lanes of one warp, thread tid = col kLanes + j holding the
// 3 x KC values
//   forward:  w[g][i] = W_h[g S + col][k(j, i)]     (the gate rows of column col)
//   backward: w[g][i] = W_h[g S + k(j, i)][col]     (column col over each gate's rows)
//   k(j, i) = (i / 4 kLanes + j) 4 + i % 4,  i < KC
// (zero past S): the lanes of a pair take alternate float4 groups, so that one warp's 16-byte
// shared loads of a row touch 2 x 4 consecutive words, bank-conflict free, with no padding.
// KC (choose_kc) is the smallest of kKcs whose kLanes KC covers S. The step's left operand
// (forward h_{t-1}, backward dz_t) is in shared memory, kLanes KC floats per row (zero past S),
// double buffered by step parity; each lane sums its half of the k range in registers, one
// shuffle per (row pair, gate) adds the halves, and one block barrier per step publishes the
// step's result (the kernels' files say how).
// The step's global inputs (forward P_t, backward z_t, c_t, grad_hs[t+1]) do not depend on the
// recurrence: each thread stages its own rows' values kAhead steps ahead with cp.async into a
// private ring of kStages slots (no barrier needed: the thread that copies is the one that
// reads), so no step waits for a global load.
//
// Precision: as the cluster kernels (lltm_sequence_persistent.cuh): sums and cell math in
// float (products float32-exact, a fixed order of additions: deterministic); z_t, h_t, c_t,
// dz_t rounded to T where stored and the recurrence continues from the rounded h, c, dz; the
// backward's carries dh_rec, dc stay in float. The cell's math is branch-free (sigmoid_nb,
// elu_nb below), within a few float ulps of lltm.h's. Global offsets 64-bit.
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

constexpr int kLanes = 2;         // lanes per column (a shuffle pair)
constexpr int kMaxState = 128;    // W_h in the registers of one CTA: 192 floats a thread
constexpr int kMaxThreads = kMaxState * kLanes;
constexpr int kStages = 4;        // slots of the staged-input ring (a power of 2 > kAhead)
constexpr int kAhead = 2;         // steps staged ahead of the one computed

// The KCs the kernels are compiled for (lltm_sequence_cta_table.cuh), ascending; multiples of
// 4 (float4 groups). KC = 20 so that S = 33 .. 40 does not pay for KC = 32 (S = 33: 9 float4
// groups, 5 on lane 0: 37% fewer multiply-adds on each step's dependent FMA chains). No finer
// steps: each KC is 9 kernels a direction, compiled for every GPU architecture of a wheel
// (KC = 20 adds about a fifth to the cta files' compile time).
constexpr int kKcs[] = {16, 20, 32, 48, 64};

// KC for S: the smallest of kKcs with kLanes KC >= S (every float4 group of k < S on one of the
// pair's lanes: lane 0 holds groups 0, 2, 4, ..., lane 1 groups 1, 3, 5, ...); 0 past
// kMaxState. Host only (the launcher's choice).
inline int choose_kc(int state) {
  if (state < 1 || state > kMaxState) return 0;
  for (int kc : kKcs) {
    if (kLanes * kc >= state) return kc;
  }
  return 0;
}

// The launch and shared-memory layout of one direction. Offsets and total in 4-byte words.
struct Plan {
  int state;    // S
  int kc;       // KC: values of each gate per thread
  int rb;       // RB: batch rows per CTA
  int sp;       // Sp: S rounded up to whole warps of column pairs
  int threads;  // Sp kLanes
  int ald;      // floats per row of the operand buffer: kLanes KC
  int nv;       // staged values per (row, column, step): 3 (P) forward, 5 (z, c, grad_h) backward
  int a_off, stage_off, total;
};

LLTM_CTA_FN int round_up(int a, int m) { return (a + m - 1) / m * m; }

// The plan of the forward: h buffer [2][RB][ald], then the staged ring.
LLTM_CTA_FN Plan make_forward_plan(int state, int kc, int rb) {
  Plan p{};
  p.state = state;
  p.kc = kc;
  p.rb = rb;
  p.sp = round_up(state, 32 / kLanes);
  p.threads = p.sp * kLanes;
  p.ald = kLanes * kc;
  p.nv = 3;
  p.a_off = 0;
  p.stage_off = 2 * rb * p.ald;
  p.total = p.stage_off + kStages * rb * p.nv * state;
  return p;
}

// The plan of the backward: the forward's, with 3 dz rows per batch row (the buffer is
// [2][RB][3][ald]) and 5 staged values (z_t, c_t, grad_hs[t+1]).
LLTM_CTA_FN Plan make_backward_plan(int state, int kc, int rb) {
  Plan p = make_forward_plan(state, kc, rb);
  p.nv = 5;
  p.stage_off = 2 * rb * 3 * p.ald;
  p.total = p.stage_off + kStages * rb * p.nv * state;
  return p;
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

// The kernel launched behind this one in the stream with programmatic stream serialization
// (the weight gradients', lltm_sequence_wgrad.cu) may start once every CTA of this grid has
// run this: on the SMs this grid leaves free, while it runs (Hopper on; a no-op elsewhere,
// where that kernel starts after this grid ends).
LLTM_CTA_DEV void allow_dependent_launch() {
#if !defined(FUSED_OPS_EMULATE) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// *counter += 1 once the CTA's global writes before the barrier the caller (one thread)
// passed are visible device-wide: the fence's cumulativity covers the writes of the threads
// that the barrier ordered before it, as in a cooperative grid barrier.
LLTM_CTA_DEV void publish_progress(unsigned* counter) {
#if defined(FUSED_OPS_EMULATE)
  ++*counter;
#else
  __threadfence();
  atomicAdd(counter, 1u);
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


// The cell's math without branches (the accurate library division and the elu's conditional
// expm1f compile to branches and a called slow path, which cost the step's critical path
// branch-resolution stalls). sigmoid(z) from e = exp(-|z|) in (0, 1]: 1 / (1 + e) for z >= 0,
// e / (1 + e) below, the reciprocal of a number in [1, 2] by the approximate reciprocal and one
// Newton step (within an ulp; no overflow, no special cases). Against lltm.h's cell math:
// within a few ulps of float (expf's 2 ulps dominate), the same formulas otherwise.
LLTM_CTA_DEV float rcp_1_2(float d) {
#if defined(FUSED_OPS_EMULATE)
  return 1.f / d;
#else
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
  return fmaf(r, fmaf(-d, r, 1.f), r);
#endif
}

LLTM_CTA_DEV float sigmoid_nb(float z) {
  const float e = expf(-fabsf(z));
  const float r = rcp_1_2(1.f + e);
  return z >= 0.f ? r : e * r;
}

// elu(z): expm1f computed for every z (not in a branch) and selected.
LLTM_CTA_DEV float elu_nb(float z) {
  const float em = expm1f(z);
  return z > 0.f ? z : em;
}

}  // namespace lltm::cta
