// The LLTM sequence's backward recurrence on the CPU, AVX2 + FMA (+ F16C): one thread's rows
// through all T steps, t = T-1 .. 0 (lltm_sequence_cpu.h has the layouts and the plan). Per
// step, per backward panel p (16 states) and per block of up to kRows rows:
//   acc = dz_t W_h on the panel's 16 columns: kRows x 2 vector accumulators, K = 3S;
//   dh = acc + dL/dhs[t]  (the gradient of h_{t-1})
//   (dz_{t-1}, dc) = cell_backward(dh, dc, c_{t-1}, z_{t-1})     (lltm.h)
// so that the product never leaves registers before the pointwise step uses it. The first
// step (t = T-1) runs the pointwise part alone (K = 0: no recurrent gradient yet), the last
// product (dz_0 W_h) gives d_h0. dz and the carried dc are float; the saved z and states are
// read in the storage type.
#include "common/avx2_target.h"

#include <stdexcept>

#include "lltm/lltm_sequence_cpu.h"

#ifdef FUSED_OPS_AVX2

#include <algorithm>

#include "lltm/lltm_cpu_vec.h"

namespace lltm {
namespace {

using namespace vec;  // NOLINT(build/namespaces): this file's vocabulary

// Rows per register block: 4 rows x 2 vectors = 8 accumulators; per k 2 weight loads and
// 4 broadcasts feed 8 FMAs.
constexpr int kRows = 4;

template <typename E>
struct BwdStep {
  const float* dz_src;         // dz_t at row 0 (K = 3S per row), or nullptr (K = 0)
  int64_t s;                   // the step whose pointwise backward runs (t - 1), or -1: d_h0
  const typename E::T* gates;  // z, (T, B, 3S)
  const typename E::T* cells;  // (T+1, B, S)
  const typename E::T* grad_hs;
  float* dz;                   // (T, B, 3S) out
  float* dc_state;             // (B, pitch)
  typename E::T* d_h0;         // (B, S)
};

// The cell backward of step s on 8 states of row b at column j, with dh its gradient of h_s.
template <typename E, typename IO>
inline void pointwise(const BwdStep<E>& q, int64_t B, int64_t S, int64_t pitch, int64_t b,
                      int64_t j, V dh, const IO& io) {
  const E e;
  const int64_t zrow = (q.s * B + b) * 3 * S + j;
  dh = add(dh, io.load(q.grad_hs + ((q.s + 1) * B + b) * S + j, e));
  const typename E::T* z = q.gates + zrow;
  const V z_c = io.load(z + 2 * S, e);
  const V input_gate = sigmoid(io.load(z, e));
  const V output_gate = sigmoid(io.load(z + S, e));
  const V tanh_cell = tanh(io.load(q.cells + ((q.s + 1) * B + b) * S + j, e));
  const V one = splat(1.f);
  float* dc = q.dc_state + b * pitch + j;
  // The padded lanes of dc stay 0 (their dh, z and c load as 0): full-width load and store.
  const V d_new_cell = fma(mul(dh, output_gate), sub(one, mul(tanh_cell, tanh_cell)),
                           _mm256_loadu_ps(dc));
  _mm256_storeu_ps(dc, d_new_cell);
  float* dz = q.dz + zrow;
  io.store(dz, mul(mul(mul(elu(z_c), d_new_cell), input_gate), sub(one, input_gate)));
  io.store(dz + S, mul(mul(mul(tanh_cell, dh), output_gate), sub(one, output_gate)));
  io.store(dz + 2 * S, mul(mul(input_gate, d_new_cell), d_elu(z_c)));
}

// d_h0 = dz_0 W_h + dL/dhs[0] on 8 states of row b.
template <typename E, typename IO>
inline void final_state(const BwdStep<E>& q, int64_t S, int64_t b, int64_t j, V dh,
                        const IO& io) {
  const E e;
  io.store(q.d_h0 + b * S + j, add(dh, io.load(q.grad_hs + b * S + j, e)), e);
}

template <typename E>
inline void finish(const BwdStep<E>& q, int64_t B, int64_t S, int64_t pitch, int64_t b,
                   int64_t j, V dh) {
  const int64_t n = S - j;
  if (n <= 0) return;  // the second half of the last panel, past S
  auto run = [&](const auto& io) {
    if (q.s >= 0) {
      pointwise(q, B, S, pitch, b, j, dh, io);
    } else {
      final_state(q, S, b, j, dh, io);
    }
  };
  if (n >= kLanes) {
    run(AllLanes());
  } else {
    run(Lanes(n));
  }
}

template <int R, typename E>
inline void backward_block(const BwdStep<E>& q, const float* w, int64_t B, int64_t S,
                           int64_t pitch, int64_t rb, int64_t j0) {
  const int64_t S3 = 3 * S, K = q.dz_src ? S3 : 0;
  V acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const float* d = q.dz_src ? q.dz_src + rb * S3 : nullptr;
  // Two-level sums (lltm_sequence_cpu.h, kSumBlock).
  for (int64_t k0 = 0; k0 < K; k0 += kSumBlock) {
    V part[R][2];
    for (int r = 0; r < R; ++r) part[r][0] = part[r][1] = _mm256_setzero_ps();
    const int64_t k1 = std::min(K, k0 + kSumBlock);
    for (int64_t k = k0; k < k1; ++k, w += kBwdPanel) {
      const V w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);
      for (int r = 0; r < R; ++r) {
        const V g = _mm256_broadcast_ss(d + r * S3 + k);
        part[r][0] = fma(g, w0, part[r][0]);
        part[r][1] = fma(g, w1, part[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      acc[r][0] = add(acc[r][0], part[r][0]);
      acc[r][1] = add(acc[r][1], part[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    finish(q, B, S, pitch, rb + r, j0, acc[r][0]);
    finish(q, B, S, pitch, rb + r, j0 + kLanes, acc[r][1]);
  }
}

// One step of the thread's rows: every panel, every row block.
template <typename E>
void backward_step(const BwdStep<E>& q, const float* w_pack, int64_t B, int64_t S,
                   int64_t b0, int64_t b1) {
  const int64_t pitch = state_pitch(S);
  for (int64_t p = 0; p < bwd_panels(S); ++p) {
    const float* w = w_pack + p * 3 * S * kBwdPanel;
    for (int64_t rb = b0; rb < b1; rb += kRows) {
      switch (std::min<int64_t>(kRows, b1 - rb)) {
        case 1: backward_block<1>(q, w, B, S, pitch, rb, p * kBwdPanel); break;
        case 2: backward_block<2>(q, w, B, S, pitch, rb, p * kBwdPanel); break;
        case 3: backward_block<3>(q, w, B, S, pitch, rb, p * kBwdPanel); break;
        default: backward_block<kRows>(q, w, B, S, pitch, rb, p * kBwdPanel); break;
      }
    }
  }
}

template <typename E>
void backward_rows(const CpuBackward<float>& a, int64_t b0, int64_t b1) {
  using T = typename E::T;
  const E e;
  const int64_t S = a.state, B = a.batch, T_ = a.steps, pitch = state_pitch(S);
  // dc = dL/dc_{T-1} = grad_c_n, the padding 0.
  for (int64_t b = b0; b < b1; ++b) {
    float* row = a.dc_state + b * pitch;
    for (int64_t j = 0; j < pitch; ++j) row[j] = 0.f;
    for_each_vector(S, [&](int64_t j, const auto& io) {
      _mm256_storeu_ps(row + j, io.load(static_cast<const T*>(a.grad_c_n) + b * S + j, e));
    });
  }
  BwdStep<E> q{nullptr, T_ - 1, static_cast<const T*>(a.gates), static_cast<const T*>(a.cells),
               static_cast<const T*>(a.grad_hs), a.dz, a.dc_state, static_cast<T*>(a.d_h0)};
  backward_step(q, a.w_pack, B, S, b0, b1);  // t = T-1: dh = dL/dh_{T-1} alone
  for (int64_t t = T_ - 1; t >= 0; --t) {
    q.dz_src = a.dz + t * B * 3 * S;
    q.s = t - 1;  // -1 at t = 0: d_h0
    backward_step(q, a.w_pack, B, S, b0, b1);
  }
  T* d_c0 = static_cast<T*>(a.d_c0);
  for (int64_t b = b0; b < b1; ++b) {
    for_each_vector(S, [&](int64_t j, const auto& io) {
      io.store(d_c0 + b * S + j, _mm256_loadu_ps(a.dc_state + b * pitch + j), e);
    });
  }
}

}  // namespace

void backward_recurrence_avx2(Storage storage, const CpuBackward<float>& a, int64_t b0,
                              int64_t b1) {
  switch (storage) {
    case Storage::Float: return backward_rows<F32>(a, b0, b1);
    case Storage::Half: return backward_rows<F16>(a, b0, b1);
    case Storage::BFloat16: return backward_rows<BF16>(a, b0, b1);
  }
}

}  // namespace lltm

#else  // not x86-64 with GCC/Clang: only the scalar kernels exist.

namespace lltm {
void backward_recurrence_avx2(Storage, const CpuBackward<float>&, int64_t, int64_t) {
  throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");
}
}  // namespace lltm

#endif
