// The LLTM sequence's forward recurrence on the CPU, AVX2 + FMA (+ F16C): one thread's rows
// through all T steps (lltm_sequence_cpu.h has the layouts and the plan). Per step, per
// forward panel p (8 states, 24 gate columns) and per block of up to kRows rows:
//   acc = h_{t-1} W_h^T on the panel's 24 columns: kRows x 3 vector accumulators, K = S;
//   z = acc + P_t; c_t = c_{t-1} + elu(z_c) sigmoid(z_i); h_t = tanh(c_t) sigmoid(z_o)
// with z rounded to the storage type where it is a half type (the saved z is the one the
// recurrence used); c_t and h_t are carried in float and rounded only where stored. The panels run outermost so that one panel (24 S
// floats: 12 KiB at S = 128) stays in L1 while every row block of the thread uses it.
#include "common/avx2_target.h"

#include <stdexcept>

#include "lltm/lltm_sequence_cpu.h"

#ifdef FUSED_OPS_AVX2

#include <algorithm>

#include "lltm/lltm_cpu_vec.h"

namespace lltm {
namespace {

using namespace vec;  // NOLINT(build/namespaces): this file's vocabulary

// Rows per register block: 4 rows x 3 gates = 12 accumulators, plus the panel's 3 weight
// vectors and one broadcast of h: 16 of the 16 ymm registers. Per k: 3 loads and 4 broadcasts
// feed 12 FMAs.
constexpr int kRows = 4;

// Pointers of one block: rows [rb, rb + R) of step t, states [j0, j0 + 8).
template <typename E>
struct FwdBlock {
  const float* w;          // the panel: S x 24, K-major
  const float* h_prev;     // h_state of row rb (column 0), pitch apart
  float* h_next;           // h_state of row rb, column j0
  float* c_state;          // c_state of row rb, column j0
  const float* proj;       // P_t at row rb, column j0 (gate g at + g S), 3S apart
  typename E::T* z;        // gates likewise
  typename E::T* h_out;    // hs[t+1] at row rb, column j0, S apart
  typename E::T* c_out;    // cells[t+1] likewise
};

template <int R, typename E, typename IO>
inline void forward_block(const FwdBlock<E>& q, int64_t S, int64_t pitch, const IO& io) {
  const E e;
  // Two-level sums (lltm_sequence_cpu.h, kSumBlock): each block of k in the registers, the
  // block sums added to totals that live on the stack (12 more vectors would not fit).
  V acc[R][3];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = acc[r][2] = _mm256_setzero_ps();
  const float* w = q.w;
  for (int64_t k0 = 0; k0 < S; k0 += kSumBlock) {
    V part[R][3];
    for (int r = 0; r < R; ++r) part[r][0] = part[r][1] = part[r][2] = _mm256_setzero_ps();
    const int64_t k1 = std::min(S, k0 + kSumBlock);
    for (int64_t k = k0; k < k1; ++k, w += 3 * kFwdPanel) {
      const V w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8), w2 = _mm256_loadu_ps(w + 16);
      for (int r = 0; r < R; ++r) {
        const V h = _mm256_broadcast_ss(q.h_prev + r * pitch + k);
        part[r][0] = fma(h, w0, part[r][0]);
        part[r][1] = fma(h, w1, part[r][1]);
        part[r][2] = fma(h, w2, part[r][2]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int g = 0; g < 3; ++g) acc[r][g] = add(acc[r][g], part[r][g]);
    }
  }
  const int64_t S3 = 3 * S;
  for (int r = 0; r < R; ++r) {
    const float* p = q.proj + r * S3;
    typename E::T* z = q.z + r * S3;
    // All three loads of P before any store of z: z may be P's own buffer (float32).
    const V z_i = round_to(add(acc[r][0], io.load(p)), e);
    const V z_o = round_to(add(acc[r][1], io.load(p + S)), e);
    const V z_c = round_to(add(acc[r][2], io.load(p + 2 * S)), e);
    io.store(z, z_i, e);
    io.store(z + S, z_o, e);
    io.store(z + 2 * S, z_c, e);
    // c and h stay float in the state (lltm_sequence_cpu.h: precision); h is the tanh of the
    // c that cells keeps, which the backward reads.
    float* cs = q.c_state + r * pitch;
    const V c = fma(elu(z_c), sigmoid(z_i), _mm256_loadu_ps(cs));
    const V h = mul(tanh(round_to(c, e)), sigmoid(z_o));
    // The scratch rows are padded to whole panels: full stores (the lanes past S stay 0:
    // their weights, P and initial states are 0, and elu(0) = tanh(0) = 0).
    _mm256_storeu_ps(cs, c);
    _mm256_storeu_ps(q.h_next + r * pitch, h);
    io.store(q.c_out + r * S, c, e);
    io.store(q.h_out + r * S, h, e);
  }
}

template <typename E, typename IO>
inline void forward_rows_block(int R, const FwdBlock<E>& q, int64_t S, int64_t pitch,
                               const IO& io) {
  switch (R) {
    case 1: return forward_block<1>(q, S, pitch, io);
    case 2: return forward_block<2>(q, S, pitch, io);
    case 3: return forward_block<3>(q, S, pitch, io);
    default: return forward_block<kRows>(q, S, pitch, io);
  }
}

// src (rows [b0, b1) of a (B, S) tensor in storage E) as floats into dst (pitch per row), the
// padding zero.
template <typename E>
void load_state(const typename E::T* src, float* dst, int64_t b0, int64_t b1, int64_t S,
                int64_t pitch) {
  const E e;
  for (int64_t b = b0; b < b1; ++b) {
    float* row = dst + b * pitch;
    for (int64_t j = 0; j < pitch; ++j) row[j] = 0.f;
    for_each_vector(S, [&](int64_t j, const auto& io) {
      _mm256_storeu_ps(row + j, io.load(src + b * S + j, e));
    });
  }
}

template <typename E>
void forward_rows(const CpuForward<float>& a, int64_t b0, int64_t b1) {
  using T = typename E::T;
  const int64_t S = a.state, B = a.batch, S3 = 3 * S, pitch = state_pitch(S);
  T* gates = static_cast<T*>(a.gates);
  T* hs = static_cast<T*>(a.hs);
  T* cells = static_cast<T*>(a.cells);
  load_state<E>(hs, a.h_state, b0, b1, S, pitch);
  load_state<E>(cells, a.c_state, b0, b1, S, pitch);
  for (int64_t t = 0; t < a.steps; ++t) {
    const float* h_prev = a.h_state + (t & 1) * B * pitch;
    float* h_next = a.h_state + ((t + 1) & 1) * B * pitch;
    for (int64_t p = 0; p < fwd_panels(S); ++p) {
      const int64_t j0 = p * kFwdPanel, n = std::min<int64_t>(kFwdPanel, S - j0);
      for (int64_t rb = b0; rb < b1; rb += kRows) {
        const int R = static_cast<int>(std::min<int64_t>(kRows, b1 - rb));
        const int64_t zrow = (t * B + rb) * S3 + j0, srow = ((t + 1) * B + rb) * S + j0;
        const FwdBlock<E> q{a.w_pack + p * S * 3 * kFwdPanel, h_prev + rb * pitch,
                            h_next + rb * pitch + j0, a.c_state + rb * pitch + j0,
                            a.proj + zrow, gates + zrow, hs + srow, cells + srow};
        if (n == kFwdPanel) {
          forward_rows_block(R, q, S, pitch, AllLanes());
        } else {
          forward_rows_block(R, q, S, pitch, Lanes(n));
        }
      }
    }
  }
}

}  // namespace

void forward_recurrence_avx2(Storage storage, const CpuForward<float>& a, int64_t b0,
                             int64_t b1) {
  switch (storage) {
    case Storage::Float: return forward_rows<F32>(a, b0, b1);
    case Storage::Half: return forward_rows<F16>(a, b0, b1);
    case Storage::BFloat16: return forward_rows<BF16>(a, b0, b1);
  }
}

}  // namespace lltm

#else  // not x86-64 with GCC/Clang: only the scalar kernels exist.

namespace lltm {
void forward_recurrence_avx2(Storage, const CpuForward<float>&, int64_t, int64_t) {
  throw std::runtime_error("lltm: AVX2 kernels are not built for this CPU");
}
}  // namespace lltm

#endif
