// LLTM over a whole sequence, cta path: the forward recurrence kernel (lltm_sequence_cta.cuh
// says how the path works). Grid: one CTA per RB batch rows; block: p.threads.
#pragma once

#include "lltm/lltm_sequence_cta.cuh"

namespace lltm::cta {

template <typename T, int KC, int RB>
__global__ void __launch_bounds__(kMaxThreads, 1)
    forward_kernel(const Plan p, const SeqForward<T> f) {
  float* smem = dynamic_smem();
  float* abuf = smem + p.a_off;  // [2][RB][ald]: h_{t-1} by step parity
  float* part = smem + p.part_off;  // [Q][RB][3][Sp]: partial sums of the step's product
  auto* stage = reinterpret_cast<uint32_t*>(smem + p.stage_off);  // [kStages][RB][3][S]
  const int tid = static_cast<int>(threadIdx.x), Q = p.q, S = p.state;
  const int col = tid % p.sp, q = tid / p.sp;
  const bool has_col = col < S;
  const int64_t B = f.batch, T_ = f.steps, b0 = static_cast<int64_t>(blockIdx.x) * RB;
  // One past each staged buffer's last element (stage_copy's bound).
  const T* const gates_end = f.gates + T_ * B * 3 * S;
  const int nb = static_cast<int>(B - b0 < RB ? B - b0 : RB);

  // This thread's weights: the 3 gate rows of column col over k chunk q.
  float w[3][KC];
#pragma unroll
  for (int g = 0; g < 3; ++g) {
#pragma unroll
    for (int kk = 0; kk < KC; ++kk) {
      const int k = q * KC + kk;
      w[g][kk] = has_col && k < S ? static_cast<float>(f.w_h[(int64_t(g) * S + col) * S + k])
                                  : 0.f;
    }
  }
  // Both A buffers: h0 in buffer 0, zeros elsewhere (the padding past S and past the chunks'
  // KC values, and rows past the batch, stay zero: only k < S of valid rows are written later).
  for (int i = tid; i < 2 * RB * p.ald; i += p.threads) {
    const int buf = i / (RB * p.ald), r = i / p.ald % RB, pos = i % p.ald;
    const int chunk = pos / p.cst, kk = pos % p.cst, k = chunk * p.kc + kk;
    abuf[i] = buf == 0 && r < nb && kk < p.kc && k < S
                  ? static_cast<float>(f.hs[(b0 + r) * S + k])
                  : 0.f;
  }
  // The rows whose cell this thread runs, and their c carries.
  auto own = [&](int r) { return r < nb && r % Q == q && has_col; };
  float c[RB];
#pragma unroll
  for (int r = 0; r < RB; ++r) {
    c[r] = own(r) ? static_cast<float>(f.cells[(b0 + r) * S + col]) : 0.f;
  }
  auto stage_step = [&](int64_t t) {
    if (t < T_) {
      const int slot = static_cast<int>(t % kStages);
#pragma unroll
      for (int r = 0; r < RB; ++r) {
        if (!own(r)) continue;
        const T* gz = f.gates + (t * B + b0 + r) * 3 * S + col;
#pragma unroll
        for (int g = 0; g < 3; ++g) {
          stage_copy(stage + stage_pos(p, slot, r, g, col), gz + g * S, gates_end);
        }
      }
    }
    stage_commit();  // every step commits a group, empty or not: stage_wait counts them
  };
  for (int t = 0; t < kAhead; ++t) stage_step(t);
  __syncthreads();

  for (int64_t t = 0; t < T_; ++t) {
    stage_step(t + kAhead);
    const int par = static_cast<int>(t & 1);
    float acc[RB][3];
#pragma unroll
    for (int r = 0; r < RB; ++r) acc[r][0] = acc[r][1] = acc[r][2] = 0.f;
    chunk_dot<KC, RB, false>(w, abuf + par * RB * p.ald + q * p.cst, p.ald, 0, acc);
#pragma unroll
    for (int r = 0; r < RB; ++r) {
#pragma unroll
      for (int g = 0; g < 3; ++g) part[part_pos(p, q, r, g, col)] = acc[r][g];
    }
    // The step's inputs P_t, staged by this thread, read before the barrier (off the
    // critical path that starts there).
    stage_wait();
    const int slot = static_cast<int>(t % kStages);
    float pin[RB][3];
#pragma unroll
    for (int r = 0; r < RB; ++r) {
      const T* gz = f.gates + (t * B + b0 + r) * 3 * S + col;
#pragma unroll
      for (int g = 0; g < 3; ++g) {
        pin[r][g] = own(r) ? staged(stage + stage_pos(p, slot, r, g, col), gz + g * S) : 0.f;
      }
    }
    __syncthreads();
    float* next = abuf + (par ^ 1) * RB * p.ald;
#pragma unroll
    for (int r = 0; r < RB; ++r) {
      if (!own(r)) continue;
      T* gz = f.gates + (t * B + b0 + r) * 3 * S + col;
      T z[3];
#pragma unroll
      for (int g = 0; g < 3; ++g) {
        // The column's partial sums in q order (a loop: unrolled over the largest Q, the
        // loads of all of them in flight at once spill registers at KC = 32).
        float sum = part[part_pos(p, 0, r, g, col)];
        for (int qq = 1; qq < Q; ++qq) sum += part[part_pos(p, qq, r, g, col)];
        z[g] = static_cast<T>(sum + pin[r][g]);
        gz[g * S] = z[g];
      }
      float h, cn;
      cell_forward<float>(static_cast<float>(z[0]), static_cast<float>(z[1]),
                          static_cast<float>(z[2]), c[r], h, cn);
      const T hT = static_cast<T>(h), cT = static_cast<T>(cn);
      c[r] = static_cast<float>(cT);
      const int64_t out = ((t + 1) * B + b0 + r) * S + col;
      f.hs[out] = hT;
      f.cells[out] = cT;
      next[r * p.ald + a_pos(p, col)] = static_cast<float>(hT);
    }
    // h_t complete in the other A buffer; the partial buffer read.
    __syncthreads();
  }
}

}  // namespace lltm::cta
