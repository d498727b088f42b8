// TimeX in float64, the definition looped: the reference of the emulation tests that run
// the CUDA kernels on the CPU (test_rwkv.py and the test_rwkv_fft_*emulation.py files), their
// random inputs (timex_inputs) and the FFT tests' comparison with it (timex_check).
//   out[b, c, t]      = eps + sum_{u <= t} w[c, T-1-(t-u)] k[b, c, u]
//   grad_k[b, c, u]   = sum_{t >= u} w[c, T-1-(t-u)] g[b, c, t]
//   grad_w[c, T-1-s]  = sum_b sum_{t >= s} g[b, c, t] k[b, c, t-s]
// w (C, T), k and g (B, C, T) contiguous; the outputs are resized and overwritten.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

#include "cuda_emulation.h"

template <typename S>
void timex_reference(const S* w, const S* k, const S* g, int B, int C, int T, double eps,
                     std::vector<double>& out, std::vector<double>& grad_k,
                     std::vector<double>& grad_w) {
  const size_t n = size_t(B) * C * T;
  out.assign(n, 0.0);
  grad_k.assign(n, 0.0);
  grad_w.assign(size_t(C) * T, 0.0);
  for (int b = 0; b < B; ++b) {
    for (int c = 0; c < C; ++c) {
      const size_t r = (size_t(b) * C + c) * T;
      auto W = [&](int d) { return as_double(w[size_t(c) * T + T - 1 - d]); };
      for (int t = 0; t < T; ++t) {
        double s = eps, s2 = 0;
        for (int u = 0; u <= t; ++u) s += W(t - u) * as_double(k[r + u]);
        for (int v = t; v < T; ++v) s2 += W(v - t) * as_double(g[r + v]);
        out[r + t] = s;
        grad_k[r + t] = s2;
      }
      for (int s = 0; s < T; ++s) {
        double acc = 0;
        for (int t = s; t < T; ++t) acc += as_double(g[r + t]) * as_double(k[r + t - s]);
        grad_w[size_t(c) * T + T - 1 - s] += acc;
      }
    }
  }
}

// Fresh inputs of one check and their float64 results: w (C, T) scaled by 1/sqrt(T); k and g
// (B, C, T) starting `offset` elements into buffers with `pad` spare elements after them (the
// kernels' misaligned rows); kp and gp their first elements.
template <typename S>
struct TimexInputs {
  std::vector<S> w, k, g;
  const S* kp;
  const S* gp;
  std::vector<double> out_ref, gk_ref, gw_ref;
};

template <typename S, typename Rng>
TimexInputs<S> timex_inputs(Rng& rng, int B, int C, int T, double eps, int offset, int pad) {
  std::normal_distribution<double> normal;
  const size_t n = size_t(B) * C * T;
  TimexInputs<S> in;
  in.w.resize(size_t(C) * T);
  in.k.resize(n + offset + pad);
  in.g.resize(n + offset + pad);
  for (auto& x : in.w) x = static_cast<S>(normal(rng) / std::sqrt(double(T)));
  for (auto& x : in.k) x = static_cast<S>(normal(rng));
  for (auto& x : in.g) x = static_cast<S>(normal(rng));
  in.kp = in.k.data() + offset;
  in.gp = in.g.data() + offset;
  timex_reference(in.w.data(), in.kp, in.gp, B, C, T, eps, in.out_ref, in.gk_ref, in.gw_ref);
  return in;
}

// Over the rows of n elements: the largest max|got - want| / max|want| of a row (infinite
// where got has a non-finite value).
inline double row_err(const std::vector<double>& got, const std::vector<double>& want, int n) {
  double worst = 0;
  for (size_t r = 0; r < got.size() / n; ++r) {
    double e = 0, m = 0;
    for (int i = 0; i < n; ++i) {
      if (!std::isfinite(got[r * n + i])) return INFINITY;
      e = std::max(e, std::abs(got[r * n + i] - want[r * n + i]));
      m = std::max(m, std::abs(want[r * n + i]));
    }
    worst = std::max(worst, m > 0 ? e / m : e);
  }
  return worst;
}

// out and grad_k (B, C, T of n values) as the kernels wrote them `offset` elements into
// buffers filled with `guard`: their values in float64 into o and dk (resized); whether every
// entry outside them still holds guard.
template <typename S>
bool unpad_outputs(const std::vector<S>& out, const std::vector<S>& gk, int offset, size_t n,
                   S guard, std::vector<double>& o, std::vector<double>& dk) {
  o.assign(n, 0.0);
  dk.assign(n, 0.0);
  bool guards = true;
  for (size_t i = 0; i < out.size(); ++i) {
    if (i >= size_t(offset) && i < offset + n) {
      o[i - offset] = as_double(out[i]);
      dk[i - offset] = as_double(gk[i]);
    } else {
      guards &= std::memcmp(&out[i], &guard, sizeof(S)) == 0 &&
                std::memcmp(&gk[i], &guard, sizeof(S)) == 0;
    }
  }
  return guards;
}

// What the kernels wrote against in's float64 results: row_err of out and grad_k (as
// unpad_outputs takes them) and of grad_w (C, T), and whether the guards held.
struct TimexCheck {
  double out, gk, gw;
  bool guards;
};

template <typename S>
TimexCheck timex_check(const TimexInputs<S>& in, const std::vector<S>& out,
                       const std::vector<S>& gk, const std::vector<S>& gw, int offset, int T,
                       S guard) {
  std::vector<double> o, dk, dw(gw.size());
  const bool guards = unpad_outputs(out, gk, offset, in.out_ref.size(), guard, o, dk);
  for (size_t i = 0; i < gw.size(); ++i) dw[i] = as_double(gw[i]);
  return {row_err(o, in.out_ref, T), row_err(dk, in.gk_ref, T), row_err(dw, in.gw_ref, T),
          guards};
}
