// LLTM over a whole sequence, cta path: the backward recurrence kernel (lltm_sequence_cta.cuh
// says how the path works and holds the layout of W_h). Grid: one CTA per RB batch rows;
// block: p.threads (make_backward_plan).
//
// The dz buffer holds, per parity, row r and gate g, dz_t[g S + k] at ((r 3 + g) ald + k).
// A step s (t = T-1-s):
//   1. cell of the lane's rows with dh_rec (in registers, from the step before; 0 at s = 0):
//      dz_t (cell_backward_nb: lltm.h's cell_backward with branch-free math), written to
//      global memory and to dz buffer s & 1; the dc carry in registers;
//   2. __syncthreads: dz_t complete;
//   3. product: dh_rec = dz_t W_h, each lane its half of the 3S rows (per gate in i order, the
//      three gates added (g0 + g1) + g2), the halves combined by the pair exchange of the
//      forward (lltm_sequence_cta_forward.cuh: the lane keeps its rows' sums).
// With f.progress set, thread 0 publishes the steps done after step 2 of every
// f.progress_interval-th step and of the last (publish_progress), and the kernel lets the
// weight-gradient kernel behind it start at once (allow_dependent_launch), so that it sums
// the published dz rows while the recurrence goes on.
// One barrier per step: a step writes buffer s & 1 in its cell, the reads of that buffer two
// steps before (step s-2's product) all precede the barrier of step s-1, which every writer of
// step s has passed.
#pragma once

#include "lltm/lltm_sequence_cta.cuh"

namespace lltm::cta {

// lltm.h's cell_backward<float> with the branch-free sigmoid and elu of lltm_sequence_cta.cuh
// and d_elu = exp(z_c) below 0, computed for every z_c and selected; the same expressions
// otherwise.
LLTM_CTA_DEV void cell_backward_nb(float grad_h, float grad_cell, float new_cell, float z_i,
                                   float z_o, float z_c, float& d_z_i, float& d_z_o,
                                   float& d_z_c, float& d_old_cell) {
  const float input_gate = sigmoid_nb(z_i), output_gate = sigmoid_nb(z_o);
  const float tanh_cell = tanhf(new_cell);
  const float ex = expf(z_c);
  const float elu = elu_nb(z_c), d_elu = z_c > 0.f ? 1.f : ex;
  const float d_new_cell = grad_h * output_gate * (1.f - tanh_cell * tanh_cell) + grad_cell;
  d_old_cell = d_new_cell;
  d_z_i = elu * d_new_cell * input_gate * (1.f - input_gate);
  d_z_o = tanh_cell * grad_h * output_gate * (1.f - output_gate);
  d_z_c = input_gate * d_new_cell * d_elu;
}

template <typename T, int KC, int RB>
__global__ void __launch_bounds__(kMaxThreads, 1)
    backward_kernel(const Plan p, const SeqBackward<T> f) {
  static_assert(kLanes == 2, "the pair exchange below is written for two lanes");
  static_assert(KC % 4 == 0, "float4 groups");
  constexpr int NR = (RB + kLanes - 1) / kLanes;
  allow_dependent_launch();
  float* smem = dynamic_smem();
  float* dbuf = smem + p.a_off;  // [2][RB][3][ald]: dz_t by step parity
  auto* stage = reinterpret_cast<uint32_t*>(smem + p.stage_off);  // [kStages][RB][5][S]
  const int tid = static_cast<int>(threadIdx.x), S = p.state, HS = p.ald;
  const int col = tid / kLanes, j = tid % kLanes;
  const bool has_col = col < S;
  const int64_t B = f.batch, T_ = f.steps, b0 = static_cast<int64_t>(blockIdx.x) * RB;
  // z_t is read from f.z, dz_t written to f.gates; the gradient of h_t from f.grad_out
  // (nullptr: zero; stage slot 4 then unused).
  const T* const zs = f.z;
  const T* const gout = f.grad_out;
  // One past each staged buffer's last element (stage_copy's bound).
  const T* const z_end = zs + T_ * B * 3 * S;
  const T* const cells_end = f.cells + (T_ + 1) * B * S;
  const T* const gout_end = gout != nullptr ? gout + T_ * B * S : nullptr;
  const int nb = static_cast<int>(B - b0 < RB ? B - b0 : RB);

  const int64_t ldw = f.ldw;  // W_h read in place, rows ldw apart
  float w[3][KC];
#pragma unroll
  for (int g = 0; g < 3; ++g) {
#pragma unroll
    for (int i = 0; i < KC; ++i) {
      const int k = (i / 4 * kLanes + j) * 4 + i % 4;
      w[g][i] = has_col && k < S ? static_cast<float>(f.w_h[(int64_t(g) * S + k) * ldw + col])
                                 : 0.f;
    }
  }
  // Both dz buffers zero: the padding past S and rows past the batch stay so.
  for (int i = tid; i < p.stage_off; i += p.threads) smem[i] = 0.f;
  auto row_of = [&](int kq) { return kq * kLanes + j; };
  auto own = [&](int kq) { return has_col && row_of(kq) < nb; };
  float dc[NR], dh[NR];
#pragma unroll
  for (int kq = 0; kq < NR; ++kq) {
    dc[kq] = own(kq) && f.grad_c_n != nullptr
                 ? static_cast<float>(f.grad_c_n[(b0 + row_of(kq)) * S + col])
                 : 0.f;
    dh[kq] = 0.f;  // dh_rec of step T-1: dh_T = 0
  }
  // Global offsets of row kq = 0 of this lane for step s (t = T-1-s), moved back one step per
  // iteration (row kq adds kq kLanes rows): zo z_t (in zs) and dz_t (in gates), co cells[t+1]
  // and, hstep less, grad_out[t]; so and sco the same for the step staged next.
  const int64_t zstep = B * 3 * S, hstep = B * S;
  const int zrow = kLanes * 3 * S, hrow_stride = kLanes * S;
  int64_t zo = ((T_ - 1) * B + b0 + j) * 3 * S + col, co = (T_ * B + b0 + j) * S + col;
  int64_t so = zo, sco = co;
  auto stage_at = [&](int slot, int kq) {
    return stage + stage_pos(p, slot, row_of(kq), 0, col);
  };
  auto stage_next = [&](int64_t s) {  // the inputs of step s, at offsets so, sco
    if (s < T_) {
      const int slot = static_cast<int>(s % kStages);
#pragma unroll
      for (int kq = 0; kq < NR; ++kq) {
        if (!own(kq)) continue;
        const T* gz = zs + so + kq * zrow;
        const int64_t o = sco + kq * hrow_stride;
        uint32_t* st = stage_at(slot, kq);
#pragma unroll
        for (int g = 0; g < 3; ++g) stage_copy(st + g * S, gz + g * S, z_end);
        stage_copy(st + 3 * S, f.cells + o, cells_end);
        if (gout != nullptr) stage_copy(st + 4 * S, gout + (o - hstep), gout_end);
      }
    }
    stage_commit();
    so -= zstep;
    sco -= hstep;
  };
  for (int s = 0; s < kAhead; ++s) stage_next(s);
  __syncthreads();
  int64_t next_publish = f.progress_interval;  // steps done at the next publish

  for (int64_t s = 0; s < T_; ++s) {
    stage_next(s + kAhead);
    stage_wait();
    const int par = static_cast<int>(s & 1), slot = static_cast<int>(s % kStages);
    float* a = dbuf + par * RB * 3 * HS;
#pragma unroll
    for (int kq = 0; kq < NR; ++kq) {
      if (!own(kq)) continue;
      const int r = row_of(kq);
      T* gz = f.gates + zo + kq * zrow;
      const T* zt = zs + zo + kq * zrow;
      const int64_t o = co + kq * hrow_stride;
      const uint32_t* sl = stage_at(slot, kq);
      // dL/dh_t from the outputs: grad_out[t], at t = T-1 plus h_n's gradient rounded to T
      // (as the sum of the two gradients that autograd would store).
      float g_out = gout != nullptr ? staged(sl + 4 * S, gout + (o - hstep)) : 0.f;
      if (s == 0 && f.grad_h_n != nullptr) {
        g_out = static_cast<float>(
            static_cast<T>(g_out + static_cast<float>(f.grad_h_n[o - T_ * B * S])));
      }
      const float grad_h = g_out + dh[kq];
      float dz[3], dco;
      cell_backward_nb(grad_h, dc[kq], staged(sl + 3 * S, f.cells + o), staged(sl, zt),
                       staged(sl + S, zt + S), staged(sl + 2 * S, zt + 2 * S), dz[0], dz[1],
                       dz[2], dco);
      dc[kq] = dco;
#pragma unroll
      for (int g = 0; g < 3; ++g) {
        const T d = static_cast<T>(dz[g]);
        gz[g * S] = d;
        a[(r * 3 + g) * HS + col] = static_cast<float>(d);
      }
    }
    zo -= zstep;
    co -= hstep;
    __syncthreads();  // dz_t of every column in buffer par (and in global memory)
    if (f.progress != nullptr && tid == 0 && (s + 1 == next_publish || s + 1 == T_)) {
      publish_progress(f.progress + blockIdx.x);
      next_publish += f.progress_interval;
    }
    float acc[RB][3];
#pragma unroll
    for (int r = 0; r < RB; ++r) acc[r][0] = acc[r][1] = acc[r][2] = 0.f;
    const float* arow = a + j * 4;
#pragma unroll
    for (int m = 0; m < KC / 4; ++m) {
#pragma unroll
      for (int r = 0; r < RB; ++r) {
#pragma unroll
        for (int g = 0; g < 3; ++g) {
          const float4v v = load4(arow + (r * 3 + g) * HS + m * kLanes * 4);
          acc[r][g] = fmaf(w[g][4 * m], v.x, acc[r][g]);
          acc[r][g] = fmaf(w[g][4 * m + 1], v.y, acc[r][g]);
          acc[r][g] = fmaf(w[g][4 * m + 2], v.z, acc[r][g]);
          acc[r][g] = fmaf(w[g][4 * m + 3], v.w, acc[r][g]);
        }
      }
    }
#pragma unroll
    for (int kq = 0; kq < NR; ++kq) {
      const int r0 = kq * kLanes, r1 = r0 + 1 < RB ? r0 + 1 : r0;
      const float s0 = (acc[r0][0] + acc[r0][1]) + acc[r0][2];
      const float s1 = (acc[r1][0] + acc[r1][1]) + acc[r1][2];
      const float keep = j == 0 ? s0 : s1, send = j == 0 ? s1 : s0;
      dh[kq] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
    }
  }
#pragma unroll
  for (int kq = 0; kq < NR; ++kq) {
    if (!own(kq)) continue;
    const int64_t o = (b0 + row_of(kq)) * S + col;
    const float g0 = f.grad_h0 != nullptr ? static_cast<float>(f.grad_h0[o]) : 0.f;
    f.d_h0[o] = static_cast<T>(dh[kq] + g0);
    f.d_c0[o] = static_cast<T>(dc[kq]);
  }
}

}  // namespace lltm::cta
