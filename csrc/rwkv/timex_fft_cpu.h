// RWKV TimeX, FFT algorithm on the CPU: the pointwise passes around ATen's FFT (pocketfft or
// MKL through aten::_fft_c2c), parallel over rows or frequencies. The arithmetic is in
// timex_spectral.h, the driver in timex_fft.h.
#pragma once

#include <torch/csrc/inductor/aoti_torch/generated/c_shim_cpu.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "rwkv/timex_spectral.h"

namespace rwkv::fft {

template <typename acc_t>
struct CpuBackend {
  using Cpx = spectral::Cpx<acc_t>;
  static constexpr auto c2c_shim = &aoti_torch_cpu__fft_c2c;

  // e^{-2 pi i k / 2M} for k = 0 .. M/2, computed in double: the table is a tenth of one
  // row's work, and per-element sin/cos would be most of it.
  static std::vector<Cpx> twiddles(int64_t M) {
    std::vector<Cpx> tw(spectral::pairs_per_row(M));
    const double step = M_PI / static_cast<double>(M);
    for (int64_t k = 0; k < static_cast<int64_t>(tw.size()); ++k) {
      tw[k] = {static_cast<acc_t>(std::cos(step * k)), static_cast<acc_t>(-std::sin(step * k))};
    }
    return tw;
  }

  // dst row r (2M reals) = src row r (T values, reversed or not, as acc_t), zeros after T.
  template <typename in_t>
  void pack(const in_t* src, int64_t rows, int64_t T, bool reversed, acc_t* dst,
            int64_t M) const {
    torch::stable::parallel_for(0, rows, std::max<int64_t>(1, 65536 / (2 * M)),
                                [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const in_t* s = src + r * T;
        acc_t* d = dst + r * 2 * M;
        for (int64_t j = 0; j < T; ++j) d[j] = static_cast<acc_t>(s[reversed ? T - 1 - j : j]);
        std::fill(d + T, d + 2 * M, acc_t(0));
      }
    });
  }

  // dst row r = merge(split(z row r) * split(zw row r % C)); z row r is the packed DFT of a
  // k row. dst may be z (in place).
  void forward_product(const acc_t* z, const acc_t* zw, acc_t* dst, int64_t rows, int64_t C,
                       int64_t M) const {
    const std::vector<Cpx> tw = twiddles(M);
    const int64_t P = spectral::pairs_per_row(M);
    const acc_t s = acc_t(1) / static_cast<acc_t>(M);
    torch::stable::parallel_for(0, rows, std::max<int64_t>(1, 16384 / M), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const Cpx* zr = reinterpret_cast<const Cpx*>(z + r * 2 * M);
        Cpx* dr = reinterpret_cast<Cpx*>(dst + r * 2 * M);
        const Cpx* wr = reinterpret_cast<const Cpx*>(zw + (r % C) * 2 * M);
        for (int64_t k = 0; k < P; ++k) {
          const spectral::Pair p = spectral::pair_of(k, M);
          Cpx xk, xj, wk, wj, uk, uj;
          spectral::split(zr[p.k], zr[p.j], tw[k], xk, xj);
          spectral::split(wr[p.k], wr[p.j], tw[k], wk, wj);
          spectral::merge(xk * wk, xj * wj, tw[k], s, uk, uj);
          dr[p.k] = uk;
          if (!p.single()) dr[p.j] = uj;
        }
      }
    });
  }

  // For each channel c and frequency pair, in the order b = 0 .. B-1:
  //   zp[c] = merge(sum_b G conj(K)),  zg[b, c] := merge(G conj(W))  (in place)
  void backward_product(acc_t* zg, const acc_t* zk, const acc_t* zw, acc_t* zp, int64_t B,
                        int64_t C, int64_t M) const {
    const std::vector<Cpx> tw = twiddles(M);
    const int64_t P = spectral::pairs_per_row(M);
    const acc_t s = acc_t(1) / static_cast<acc_t>(M);
    torch::stable::parallel_for(0, C, std::max<int64_t>(1, 16384 / (M * B)), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const Cpx* wr = reinterpret_cast<const Cpx*>(zw + c * 2 * M);
        Cpx* pr = reinterpret_cast<Cpx*>(zp + c * 2 * M);
        for (int64_t k = 0; k < P; ++k) {
          const spectral::Pair p = spectral::pair_of(k, M);
          Cpx wk, wj;
          spectral::split(wr[p.k], wr[p.j], tw[k], wk, wj);
          Cpx ak{0, 0}, aj{0, 0};
          for (int64_t b = 0; b < B; ++b) {
            Cpx* gr = reinterpret_cast<Cpx*>(zg + (b * C + c) * 2 * M);
            const Cpx* kr = reinterpret_cast<const Cpx*>(zk + (b * C + c) * 2 * M);
            Cpx gk, gj, kk, kj, uk, uj;
            spectral::split(gr[p.k], gr[p.j], tw[k], gk, gj);
            spectral::split(kr[p.k], kr[p.j], tw[k], kk, kj);
            ak = ak + spectral::mul_conj(gk, kk);
            aj = aj + spectral::mul_conj(gj, kj);
            spectral::merge(spectral::mul_conj(gk, wk), spectral::mul_conj(gj, wj), tw[k], s, uk,
                            uj);
            gr[p.k] = uk;
            if (!p.single()) gr[p.j] = uj;
          }
          Cpx uk, uj;
          spectral::merge(ak, aj, tw[k], s, uk, uj);
          pr[p.k] = uk;
          if (!p.single()) pr[p.j] = uj;
        }
      }
    });
  }

  // dst row r (T values of out_t) = eps + the first T reals of y row r (reversed or not).
  template <typename out_t>
  void crop(const acc_t* y, int64_t rows, int64_t T, int64_t M, double eps, bool reversed,
            out_t* dst) const {
    const acc_t e = static_cast<acc_t>(eps);
    torch::stable::parallel_for(0, rows, std::max<int64_t>(1, 65536 / T), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const acc_t* s = y + r * 2 * M;
        out_t* d = dst + r * T;
        for (int64_t t = 0; t < T; ++t) d[t] = static_cast<out_t>(e + s[reversed ? T - 1 - t : t]);
      }
    });
  }
};

}  // namespace rwkv::fft
