// The CPU emulation tests of the LLTM sequence's CUDA kernels (tests/test_lltm_sequence_emulation.py,
// tests/test_lltm_sequence_cta_emulation.py, tests/test_lltm_sequence_step_emulation.py): their random inputs with guard elements, the
// guard check, and the recurrence of csrc/lltm/lltm_sequence.h in float64 that both compare the
// kernels with. One emulator program includes it once (after cuda_emulation.h and the kernels'
// headers, which bring lltm.h's cell_forward / cell_backward and as_double).
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

std::mt19937 rng(1234);  // one program, one stream of inputs

template <typename S>
std::vector<S> random_vector(size_t n, double scale, size_t guard = 0) {
  std::normal_distribution<double> normal;
  std::vector<S> v(n + guard);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<S>(normal(rng) * scale);
  for (size_t i = n; i < n + guard; ++i) v[i] = static_cast<S>(777.0);
  return v;
}

const size_t kGuard = 16;

// Random inputs of one recurrence, every buffer but W_h followed by kGuard guard elements (the
// outputs' catch overruns; the inputs' stand where a 2-byte element's staged word reaches):
// w (3S x S), gates (T, B, 3S: the projection P), hs and cells ((T+1, B, S), h0 and c0 first),
// grad_hs (T+1, B, S), grad_c (B, S), and d_h0 / d_c0 (B, S) set to -1.
template <typename S>
struct SeqInputs {
  std::vector<S> w, gates, hs, cells, grad_hs, grad_c, d_h0, d_c0;
};

template <typename S>
SeqInputs<S> seq_inputs(int T, int B, int S_) {
  const size_t n3 = size_t(T) * B * 3 * S_, nh = size_t(T + 1) * B * S_, nb = size_t(B) * S_;
  SeqInputs<S> in;
  in.w = random_vector<S>(3 * size_t(S_) * S_, 1.0 / std::sqrt(double(S_)));
  in.gates = random_vector<S>(n3, 0.5, kGuard);
  in.hs = random_vector<S>(nh, 1.0, kGuard);
  in.cells = random_vector<S>(nh, 1.0, kGuard);
  in.grad_hs = random_vector<S>(nh, 1.0, kGuard);
  in.grad_c = random_vector<S>(nb, 1.0, kGuard);
  in.d_h0 = random_vector<S>(0, 1.0, nb + kGuard);
  in.d_c0 = random_vector<S>(0, 1.0, nb + kGuard);
  for (size_t i = 0; i < nb; ++i) in.d_h0[i] = in.d_c0[i] = static_cast<S>(-1.0);
  return in;
}

// The first n elements as double; false if an element after them lost its guard value.
template <typename S>
bool take(const std::vector<S>& v, size_t n, std::vector<double>& out) {
  out.resize(n);
  for (size_t i = 0; i < n; ++i) out[i] = as_double(v[i]);
  for (size_t i = n; i < v.size(); ++i) {
    if (as_double(v[i]) != as_double(static_cast<S>(777.0))) return false;
  }
  return true;
}

double max_abs(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::isfinite(a[i]) ? std::fabs(a[i] - b[i]) : INFINITY);
  }
  return m;
}

// The float64 recurrence from the kernels' (rounded) inputs: w (3S x S), gates (T, B, 3S: the
// projection P_t), hs[0] and cells[0] (h0, c0), grad_hs (T+1, B, S), grad_c (B, S). Returns
// the forward's z, h, c (h and c (T+1, B, S)) and the backward's dz, d_h0 and d_c0.
struct SeqReference {
  std::vector<double> z, h, c, dz, d_h0, d_c0;
};

template <typename S>
SeqReference sequence_reference(const std::vector<S>& w, const std::vector<S>& gates,
                                const std::vector<S>& hs, const std::vector<S>& cells,
                                const std::vector<S>& grad_hs, const std::vector<S>& grad_c,
                                int T, int B, int S_) {
  using namespace lltm;  // NOLINT(build/namespaces): cell_forward, cell_backward
  const size_t n3 = size_t(T) * B * 3 * S_, nh = size_t(T + 1) * B * S_, nb = size_t(B) * S_;
  std::vector<double> W(w.size()), z(n3), h(nh), c(nh);
  for (size_t i = 0; i < w.size(); ++i) W[i] = as_double(w[i]);
  for (size_t i = 0; i < nb; ++i) h[i] = as_double(hs[i]), c[i] = as_double(cells[i]);
  for (int t = 0; t < T; ++t) {
    for (int b = 0; b < B; ++b) {
      for (int r = 0; r < 3 * S_; ++r) {
        double sum = as_double(gates[(size_t(t) * B + b) * 3 * S_ + r]);
        for (int k = 0; k < S_; ++k) sum += h[(size_t(t) * B + b) * S_ + k] * W[size_t(r) * S_ + k];
        z[(size_t(t) * B + b) * 3 * S_ + r] = sum;
      }
      for (int j = 0; j < S_; ++j) {
        const double* zr = &z[(size_t(t) * B + b) * 3 * S_];
        const size_t o = (size_t(t) * B + b) * S_ + j, n = o + size_t(B) * S_;
        cell_forward<double>(zr[j], zr[S_ + j], zr[2 * S_ + j], c[o], h[n], c[n]);
      }
    }
  }
  std::vector<double> dz(n3), dh_rec(nb, 0.0), dc(nb), want_dh0(nb);
  for (size_t i = 0; i < nb; ++i) dc[i] = as_double(grad_c[i]);
  for (int t = T - 1; t >= 0; --t) {
    for (int b = 0; b < B; ++b) {
      for (int j = 0; j < S_; ++j) {
        const size_t o = ((size_t(t) + 1) * B + b) * S_ + j, zb = (size_t(t) * B + b) * 3 * S_;
        const size_t q = size_t(b) * S_ + j;
        double dco;
        cell_backward<double>(as_double(grad_hs[o]) + dh_rec[q], dc[q], c[o], z[zb + j],
                              z[zb + S_ + j], z[zb + 2 * S_ + j], dz[zb + j], dz[zb + S_ + j],
                              dz[zb + 2 * S_ + j], dco);
        dc[q] = dco;
      }
    }
    for (int b = 0; b < B; ++b) {
      for (int j = 0; j < S_; ++j) {
        double sum = 0;
        for (int r = 0; r < 3 * S_; ++r) {
          sum += dz[(size_t(t) * B + b) * 3 * S_ + r] * W[size_t(r) * S_ + j];
        }
        dh_rec[size_t(b) * S_ + j] = sum;
      }
    }
  }
  for (size_t i = 0; i < nb; ++i) want_dh0[i] = dh_rec[i] + as_double(grad_hs[i]);
  return {z, h, c, dz, want_dh0, dc};
}
