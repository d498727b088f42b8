// LLTM over a whole sequence, cta path: the backward recurrence kernel (lltm_sequence_cta.cuh
// says how the path works). Grid: one CTA per RB batch rows; block: p.threads.
#pragma once

#include "lltm/lltm_sequence_cta.cuh"

namespace lltm::cta {

template <typename T, int KC, int RB>
__global__ void __launch_bounds__(kMaxThreads, 1)
    backward_kernel(const Plan p, const SeqBackward<T> f) {
  float* smem = dynamic_smem();
  float* abuf = smem + p.a_off;  // [2][RB][3][Q][cst]: dz_t by step parity
  float* part = smem + p.part_off;  // [Q][RB][Sp]: partial sums of dh_rec
  auto* stage = reinterpret_cast<uint32_t*>(smem + p.stage_off);  // [kStages][RB][5][S]
  const int tid = static_cast<int>(threadIdx.x), Q = p.q, S = p.state;
  const int col = tid % p.sp, q = tid / p.sp, gst = Q * p.cst;
  const bool has_col = col < S;
  const int64_t B = f.batch, T_ = f.steps, b0 = static_cast<int64_t>(blockIdx.x) * RB;
  // One past each staged buffer's last element (stage_copy's bound).
  const T* const gates_end = f.gates + T_ * B * 3 * S;
  const T* const cells_end = f.cells + (T_ + 1) * B * S;
  const T* const grad_hs_end = f.grad_hs + (T_ + 1) * B * S;
  const int nb = static_cast<int>(B - b0 < RB ? B - b0 : RB);

  // This thread's weights: column col of W_h over row chunk q of each gate.
  float w[3][KC];
#pragma unroll
  for (int g = 0; g < 3; ++g) {
#pragma unroll
    for (int kk = 0; kk < KC; ++kk) {
      const int o = q * KC + kk;
      w[g][kk] = has_col && o < S ? static_cast<float>(f.w_h[(int64_t(g) * S + o) * S + col])
                                  : 0.f;
    }
  }
  // Both A buffers zero: the padding stays so (only k < S of valid rows are written later);
  // the partial sums zero: the first step's dh_rec (dh_T = 0).
  for (int i = tid; i < p.stage_off; i += p.threads) smem[i] = 0.f;
  auto own = [&](int r) { return r < nb && r % Q == q && has_col; };
  float dc[RB];
#pragma unroll
  for (int r = 0; r < RB; ++r) {
    dc[r] = own(r) ? static_cast<float>(f.grad_c_n[(b0 + r) * S + col]) : 0.f;
  }
  // dh_rec of column col, row r: the Q partial sums in q order.
  auto dh_rec = [&](int r) {
    float sum = part[part_pos(p, 0, r, 0, col)];
#pragma unroll
    for (int qq = 1; qq < 16; ++qq) {  // Q <= 16: Sp * Q <= kMaxThreads
      if (qq < Q) sum += part[part_pos(p, qq, r, 0, col)];
    }
    return sum;
  };
  // Step s handles t = T-1-s; its staged values: z_t (3 gates), c_t = cells[t+1],
  // grad_hs[t+1].
  auto stage_step = [&](int64_t s) {
    if (s < T_) {
      const int64_t t = T_ - 1 - s;
      const int slot = static_cast<int>(s % kStages);
#pragma unroll
      for (int r = 0; r < RB; ++r) {
        if (!own(r)) continue;
        const T* gz = f.gates + (t * B + b0 + r) * 3 * S + col;
        const int64_t o = ((t + 1) * B + b0 + r) * S + col;
#pragma unroll
        for (int g = 0; g < 3; ++g) {
          stage_copy(stage + stage_pos(p, slot, r, g, col), gz + g * S, gates_end);
        }
        stage_copy(stage + stage_pos(p, slot, r, 3, col), f.cells + o, cells_end);
        stage_copy(stage + stage_pos(p, slot, r, 4, col), f.grad_hs + o, grad_hs_end);
      }
    }
    stage_commit();
  };
  for (int s = 0; s < kAhead; ++s) stage_step(s);
  __syncthreads();

  for (int64_t s = 0; s < T_; ++s) {
    const int64_t t = T_ - 1 - s;
    stage_step(s + kAhead);
    stage_wait();
    const int par = static_cast<int>(s & 1), slot = static_cast<int>(s % kStages);
    float* a = abuf + par * RB * p.ald;
#pragma unroll
    for (int r = 0; r < RB; ++r) {
      if (!own(r)) continue;
      T* gz = f.gates + (t * B + b0 + r) * 3 * S + col;
      const int64_t o = ((t + 1) * B + b0 + r) * S + col;
      const uint32_t* sl = stage + stage_pos(p, slot, r, 0, col);
      const float grad_h = staged(sl + 4 * S, f.grad_hs + o) + dh_rec(r);
      float dz[3], dco;
      cell_backward<float>(grad_h, dc[r], staged(sl + 3 * S, f.cells + o), staged(sl, gz),
                           staged(sl + S, gz + S), staged(sl + 2 * S, gz + 2 * S), dz[0],
                           dz[1], dz[2], dco);
      dc[r] = dco;
#pragma unroll
      for (int g = 0; g < 3; ++g) {
        const T d = static_cast<T>(dz[g]);
        gz[g * S] = d;
        a[r * p.ald + g * gst + a_pos(p, col)] = static_cast<float>(d);
      }
    }
    // dz_t of every column is in buffer par (buffer par ^ 1 was read before the last barrier),
    // and every cell has read the partial sums.
    __syncthreads();
    float acc[RB][3];
#pragma unroll
    for (int r = 0; r < RB; ++r) acc[r][0] = acc[r][1] = acc[r][2] = 0.f;
    chunk_dot<KC, RB, true>(w, a + q * p.cst, p.ald, gst, acc);
#pragma unroll
    for (int r = 0; r < RB; ++r) part[part_pos(p, q, r, 0, col)] = (acc[r][0] + acc[r][1]) + acc[r][2];
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < RB; ++r) {
    if (!own(r)) continue;
    const int64_t o = (b0 + r) * S + col;
    f.d_h0[o] = static_cast<T>(dh_rec(r) + static_cast<float>(f.grad_hs[o]));
    f.d_c0[o] = static_cast<T>(dc[r]);
  }
}

}  // namespace lltm::cta
