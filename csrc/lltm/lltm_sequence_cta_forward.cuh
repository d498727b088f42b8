// LLTM over a whole sequence, cta path: the forward recurrence kernel (lltm_sequence_cta.cuh
// says how the path works and holds the layout of W_h). Grid: one CTA per RB batch rows;
// block: p.threads (make_forward_plan).
//
// A step:
//   1. product: each lane sums its half of the k range for the RB rows of the CTA (FP32 FMAs in
//      i order: float32-exact products, a fixed order of additions);
//   2. one shuffle per (row pair, gate) completes the sums: lane j keeps rows r = 2 kq + j and
//      hands the other row of the pair to its partner, so each lane ends with the full sums of
//      ITS rows (own half + partner's half; a sum of two floats is the same either way round,
//      so the result does not depend on which lane adds). RB = 1: both lanes sum row 0, and
//      only lane 0 runs its cell;
//   3. cell of the lane's rows, z_t and h_t, c_t written, h_t into the other h buffer;
//   4. __syncthreads: h_t complete for the next step. The h buffers alternate by step parity,
//      so a step's writes (buffer par ^ 1) never meet the step's reads (buffer par) and the
//      next step's writes come after this barrier: one barrier per step.
// Staged inputs P_t: each lane stages its own rows' values kAhead steps ahead and reads them
// from the ring before the product.
#pragma once

#include "lltm/lltm_sequence_cta.cuh"

namespace lltm::cta {

// lltm.h's cell_forward<float> with the branch-free sigmoid and elu of lltm_sequence_cta.cuh.
LLTM_CTA_DEV void cell_forward_nb(float z_i, float z_o, float z_c, float c, float& h,
                                  float& cn) {
  const float sig_i = sigmoid_nb(z_i), sig_o = sigmoid_nb(z_o), cand = elu_nb(z_c);
  cn = c + cand * sig_i;
  h = tanhf(cn) * sig_o;
}

template <typename T, int KC, int RB>
__global__ void __launch_bounds__(kMaxThreads, 1)
    forward_kernel(const Plan p, const SeqForward<T> f) {
  static_assert(kLanes == 2, "the pair exchange below is written for two lanes");
  static_assert(KC % 4 == 0, "float4 groups");
  constexpr int NR = (RB + kLanes - 1) / kLanes;  // rows whose cell each lane runs
  float* smem = dynamic_smem();
  float* hbuf = smem + p.a_off;  // [2][RB][ald]: h_{t-1} by step parity, k in order
  auto* stage = reinterpret_cast<uint32_t*>(smem + p.stage_off);  // [kStages][RB][3][S]
  const int tid = static_cast<int>(threadIdx.x), S = p.state, HS = p.ald;
  const int col = tid / kLanes, j = tid % kLanes;
  const bool has_col = col < S;
  const int64_t B = f.batch, T_ = f.steps, b0 = static_cast<int64_t>(blockIdx.x) * RB;
  // One past each staged buffer's last element (stage_copy's bound).
  const T* const gates_end = f.gates + T_ * B * 3 * S;
  const int nb = static_cast<int>(B - b0 < RB ? B - b0 : RB);

  // This lane's weights: the 3 gate rows of column col over its float4 groups of k (W_h read
  // in place, rows ldw apart).
  const int64_t ldw = f.ldw;
  float w[3][KC];
#pragma unroll
  for (int g = 0; g < 3; ++g) {
#pragma unroll
    for (int i = 0; i < KC; ++i) {
      const int k = (i / 4 * kLanes + j) * 4 + i % 4;
      w[g][i] = has_col && k < S ? static_cast<float>(f.w_h[(int64_t(g) * S + col) * ldw + k])
                                 : 0.f;
    }
  }
  // The initial states from h0 and c0, which this CTA's rows of hs[0] and cells[0] then get
  // (the op returns them there). Both h buffers: h0 in buffer 0, zeros elsewhere (k >= S and
  // rows past the batch stay zero: only k < S of valid rows are written later).
  for (int i = tid; i < 2 * RB * HS; i += p.threads) {
    const int buf = i / (RB * HS), r = i / HS % RB, k = i % HS;
    const bool in = buf == 0 && r < nb && k < S;
    const T h = in ? f.h0[(b0 + r) * S + k] : T(0.f);
    if (in) f.hs[(b0 + r) * S + k] = h;
    hbuf[i] = in ? static_cast<float>(h) : 0.f;
  }
  // Lane j runs the cells of rows kq kLanes + j, kq < NR.
  auto row_of = [&](int kq) { return kq * kLanes + j; };
  auto own = [&](int kq) { return has_col && row_of(kq) < nb; };
  float c[NR];
#pragma unroll
  for (int kq = 0; kq < NR; ++kq) {
    if (!own(kq)) {
      c[kq] = 0.f;
      continue;
    }
    const int64_t o = (b0 + row_of(kq)) * S + col;
    const T c0 = f.c0[o];
    f.cells[o] = c0;
    c[kq] = static_cast<float>(c0);
  }
  // Global offsets of row kq = 0 of this lane, advanced by one step per iteration (row kq adds
  // kq kLanes rows): zo the gates (P_t in, z_t out) of step t, ho hs and cells of step t + 1,
  // so of the step staged next. Offsets rather than products of t keep the per-step address
  // arithmetic to a few adds.
  const int64_t zstep = B * 3 * S, hstep = B * S;
  const int zrow = kLanes * 3 * S, hrow_stride = kLanes * S;
  int64_t zo = (b0 + j) * 3 * S + col, ho = (B + b0 + j) * S + col, so = zo;
  // Row kq's staged values of ring slot `slot`: 3 words, S apart.
  auto stage_at = [&](int slot, int kq) {
    return stage + stage_pos(p, slot, row_of(kq), 0, col);
  };
  auto stage_next = [&](int64_t t) {  // the inputs of step t, at offset so
    if (t < T_) {
      const int slot = static_cast<int>(t % kStages);
#pragma unroll
      for (int kq = 0; kq < NR; ++kq) {
        if (!own(kq)) continue;
        const T* gz = f.gates + so + kq * zrow;
        uint32_t* st = stage_at(slot, kq);
#pragma unroll
        for (int g = 0; g < 3; ++g) stage_copy(st + g * S, gz + g * S, gates_end);
      }
    }
    stage_commit();  // every step commits a group, empty or not: stage_wait counts them
    so += zstep;
  };
  for (int t = 0; t < kAhead; ++t) stage_next(t);
  __syncthreads();

  for (int64_t t = 0; t < T_; ++t) {
    stage_next(t + kAhead);
    // The step's inputs P_t (staged kAhead steps ago: the wait does not block), read before
    // the product so that their shared-memory latency hides under it.
    stage_wait();
    const int slot = static_cast<int>(t % kStages);
    float pin[NR][3];
#pragma unroll
    for (int kq = 0; kq < NR; ++kq) {
      const T* gz = f.gates + zo + kq * zrow;
      const uint32_t* st = stage_at(slot, kq);
#pragma unroll
      for (int g = 0; g < 3; ++g) pin[kq][g] = own(kq) ? staged(st + g * S, gz + g * S) : 0.f;
    }
    const int par = static_cast<int>(t & 1);
    const float* hrow = hbuf + par * RB * HS + j * 4;
    float acc[RB][3];
#pragma unroll
    for (int r = 0; r < RB; ++r) acc[r][0] = acc[r][1] = acc[r][2] = 0.f;
#pragma unroll
    for (int m = 0; m < KC / 4; ++m) {
#pragma unroll
      for (int r = 0; r < RB; ++r) {
        const float4v v = load4(hrow + r * HS + m * kLanes * 4);
#pragma unroll
        for (int g = 0; g < 3; ++g) {
          acc[r][g] = fmaf(w[g][4 * m], v.x, acc[r][g]);
          acc[r][g] = fmaf(w[g][4 * m + 1], v.y, acc[r][g]);
          acc[r][g] = fmaf(w[g][4 * m + 2], v.z, acc[r][g]);
          acc[r][g] = fmaf(w[g][4 * m + 3], v.w, acc[r][g]);
        }
      }
    }
    // The pair exchange: lane j keeps row 2 kq + j, sends its partner the other row's half.
    float zs[NR][3];
#pragma unroll
    for (int kq = 0; kq < NR; ++kq) {
      const int r0 = kq * kLanes, r1 = r0 + 1 < RB ? r0 + 1 : r0;
#pragma unroll
      for (int g = 0; g < 3; ++g) {
        const float keep = j == 0 ? acc[r0][g] : acc[r1][g];
        const float send = j == 0 ? acc[r1][g] : acc[r0][g];
        zs[kq][g] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
      }
    }
    float* next = hbuf + (par ^ 1) * RB * HS;
#pragma unroll
    for (int kq = 0; kq < NR; ++kq) {
      if (!own(kq)) continue;
      T* gz = f.gates + zo + kq * zrow;
      T z[3];
#pragma unroll
      for (int g = 0; g < 3; ++g) {
        z[g] = static_cast<T>(zs[kq][g] + pin[kq][g]);
        gz[g * S] = z[g];
      }
      float h, cn;
      cell_forward_nb(static_cast<float>(z[0]), static_cast<float>(z[1]), static_cast<float>(z[2]),
                 c[kq], h, cn);
      const T hT = static_cast<T>(h), cT = static_cast<T>(cn);
      c[kq] = static_cast<float>(cT);
      next[row_of(kq) * HS + col] = static_cast<float>(hT);
      f.hs[ho + kq * hrow_stride] = hT;
      f.cells[ho + kq * hrow_stride] = cT;
    }
    zo += zstep;
    ho += hstep;
    // h_t complete in the other buffer.
    __syncthreads();
  }
}

}  // namespace lltm::cta
