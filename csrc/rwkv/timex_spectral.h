// RWKV TimeX, FFT algorithm: the per-frequency arithmetic that the CPU loops and the CUDA
// kernels share (host and device code).
//
// A real row x of length N = 2M (zero-padded past T) is transformed as the length-M complex
// row z[n] = x[2n] + i x[2n+1] (the same memory: the padded real row read as complex pairs),
// so that a library complex FFT of half the length does the work of a real FFT, and the
// split into the real row's half spectrum X[0..M] happens here, fused into the spectral
// product instead of a separate pass. With Z = DFT_M(z), Z[M] = Z[0], tw = e^{-2 pi i k / N}:
//   E = (Z[k] + conj(Z[M-k])) / 2,  O = -i (Z[k] - conj(Z[M-k])) / 2
//   X[k] = E + tw O,  X[M-k] = conj(E - tw O)                                  (split)
// The inverse runs the other way: from a half spectrum Y (Y[M-k] = conj of the mirrored
// half), with s = 1/M folded in,
//   E = (Y[k] + conj(Y[M-k])) s / 2,  O = (Y[k] - conj(Y[M-k])) conj(tw) s / 2
//   U[k] = E + i O,  U[M-k] = conj(E) + i conj(O)                               (merge)
// and the unnormalised inverse DFT_M of U is x[2n] + i x[2n+1] of the real row whose
// spectrum is Y: the library's complex output read as reals is the result row.
// Each (k, M-k) pair is handled by one thread, so split and merge work in place.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TIMEX_HD __host__ __device__ __forceinline__
#else
#define TIMEX_HD inline
#endif

namespace rwkv::spectral {

template <typename T>
struct Cpx {
  T re, im;
};

template <typename T>
TIMEX_HD Cpx<T> operator+(Cpx<T> a, Cpx<T> b) { return {a.re + b.re, a.im + b.im}; }
template <typename T>
TIMEX_HD Cpx<T> operator-(Cpx<T> a, Cpx<T> b) { return {a.re - b.re, a.im - b.im}; }
template <typename T>
TIMEX_HD Cpx<T> operator*(Cpx<T> a, Cpx<T> b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
template <typename T>
TIMEX_HD Cpx<T> conj(Cpx<T> a) { return {a.re, -a.im}; }
// a * conj(b): the spectrum of a correlation.
template <typename T>
TIMEX_HD Cpx<T> mul_conj(Cpx<T> a, Cpx<T> b) {
  return {a.re * b.re + a.im * b.im, a.im * b.re - a.re * b.im};
}
template <typename T>
TIMEX_HD Cpx<T> scaled(Cpx<T> a, T s) { return {a.re * s, a.im * s}; }

// The two frequencies one thread owns, k and its mirror M-k (mod M: k = 0 pairs with Z[0],
// and M-k == k where M is even and k = M/2).
struct Pair {
  int64_t k, j;
  TIMEX_HD bool single() const { return j == k; }
};
TIMEX_HD Pair pair_of(int64_t k, int64_t M) { return {k, k == 0 ? 0 : M - k}; }
// Threads per row: k = 0 .. M/2.
TIMEX_HD int64_t pairs_per_row(int64_t M) { return M / 2 + 1; }

// (split) X[k], X[M-k] of the real row from its packed DFT values Z[k], Z[j = M-k mod M].
template <typename T>
TIMEX_HD void split(Cpx<T> zk, Cpx<T> zj, Cpx<T> tw, Cpx<T>& xk, Cpx<T>& xj) {
  const Cpx<T> sum = scaled(zk + conj(zj), T(0.5));
  const Cpx<T> diff = zk - conj(zj);
  const Cpx<T> odd{diff.im * T(0.5), -diff.re * T(0.5)};  // -i diff / 2
  const Cpx<T> t = tw * odd;
  xk = sum + t;
  xj = conj(sum - t);
}

// (merge) U[k], U[M-k] for the inverse from the half spectrum's Y[k], Y[M-k], scaled by s.
template <typename T>
TIMEX_HD void merge(Cpx<T> yk, Cpx<T> yj, Cpx<T> tw, T s, Cpx<T>& uk, Cpx<T>& uj) {
  const T h = s * T(0.5);
  const Cpx<T> e = scaled(yk + conj(yj), h);
  const Cpx<T> o = scaled((yk - conj(yj)) * conj(tw), h);
  uk = {e.re - o.im, e.im + o.re};  // e + i o
  uj = {e.re + o.im, o.re - e.im};  // conj(e) + i conj(o)
}

// tw = e^{-2 pi i k / N} with N = 2M, from sincospi of k / M (exact argument for the
// lengths used here: k and M below 2^24 in float).
#if defined(__CUDACC__)
TIMEX_HD Cpx<float> twiddle(int64_t k, int64_t M, float) {
  float s, c;
  sincospif(static_cast<float>(k) / static_cast<float>(M), &s, &c);
  return {c, -s};
}
TIMEX_HD Cpx<double> twiddle(int64_t k, int64_t M, double) {
  double s, c;
  sincospi(static_cast<double>(k) / static_cast<double>(M), &s, &c);
  return {c, -s};
}
#endif

}  // namespace rwkv::spectral
