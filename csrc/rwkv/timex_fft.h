// RWKV TimeX: which algorithm runs a call, and the FFT algorithm's host driver (CPU and
// CUDA alike; each device brings its pointwise kernels and its FFT call as a Backend).
//
// The direct kernels cost B*C*T^2 multiply-adds; an FFT convolution B*C*T*log T. Per call
// the op takes the faster exact one for the shape, dtype and device: direct below the
// crossover length, FFT above it (timex.cpp kCpuDirectMaxT, timex_choice.h takes_direct,
// measured by benchmarks/timex_crossover.py).
// The environment variable RWKV_TIMEX_ALGO=direct|fft|fft_library|fft_fused|fft_cluster|auto
// (read at every call) forces one, for tests and benchmarks. "fft" is the fastest FFT kernel
// for the call (on CUDA the fused on-chip one where it applies), "fft_library" the FFT through
// ATen's FFT (cuFFT / pocketfft or MKL) with this package's fused pointwise passes around it,
// "fft_fused" the one-CTA-per-row kernels (T <= 16384), "fft_cluster" the kernels of one
// thread-block cluster per row (T <= 65536, sm_90); each of the last two falls back to "fft"
// where it cannot run (on the CPU every FFT is the library one).
//
// The library FFT path, with M >= T a length the FFT libraries do fast (2^a 3^b 5^c 7^d)
// and N = 2M >= 2T - 1 (so the circular convolution of the zero-padded rows is the linear
// one on the T outputs kept):
//   forward   pack k rows, pack w rows reversed (W) -> two complex FFTs of length M ->
//             split, product K W, merge (one pass, in place unless the spectra are kept)
//             -> inverse FFT -> first T + eps
//   backward  pack g, k, W -> three FFTs -> one pass over each channel's frequencies: for
//             b = 0..B-1 in order, P += G conj(K), and G conj(W) merged in place -> inverse
//             FFTs of the B*C grad_k rows and of the C rows of P -> first T (grad_w reversed)
// The half spectra never exist as separate tensors (timex_spectral.h). Sums over b run in
// a fixed order and the FFTs are deterministic: same inputs, same bits. The eager training
// path (timex_forward_keep / timex_backward_kept) keeps the packed spectra of k and W from
// the forward (2x the bytes of k and w in float32, what PyTorch's own FFT convolution keeps),
// so that the backward transforms only g: three library FFTs instead of five.
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>

#include "common/alloc.h"
#include "common/checks.h"
#include "common/dispatch.h"

namespace rwkv::fft {

using fused_ops::Tensor;
using torch::headeronly::ScalarType;

enum class Algo { kAuto, kDirect, kFft, kFftLibrary, kFftFused, kFftCluster, kFftTc };

// What a call runs: the codes that the op rwkv_ops::timex_algorithm returns (rwkv_ops/_ops.py
// names them).
enum class Kernel : int64_t {
  kDirect = 0, kFftLibrary = 1, kFftFused = 2, kFftCluster = 3, kFftTc = 4
};

// RWKV_TIMEX_ALGO, read at every call (a test sets it between calls; getenv costs far less
// than a launch).
inline Algo algo_override() {
  const char* v = std::getenv("RWKV_TIMEX_ALGO");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return Algo::kAuto;
  if (std::strcmp(v, "direct") == 0) return Algo::kDirect;
  if (std::strcmp(v, "fft") == 0) return Algo::kFft;
  if (std::strcmp(v, "fft_library") == 0) return Algo::kFftLibrary;
  if (std::strcmp(v, "fft_fused") == 0) return Algo::kFftFused;
  if (std::strcmp(v, "fft_cluster") == 0) return Algo::kFftCluster;
  if (std::strcmp(v, "fft_tc") == 0) return Algo::kFftTc;
  fused_ops::raise<std::invalid_argument>(
      "environment variable RWKV_TIMEX_ALGO must be 'direct', 'fft', 'fft_library', "
      "'fft_fused', 'fft_cluster', 'fft_tc' or 'auto' (or unset), got '", std::string(v), "'");
}

// Smallest M >= n of the form 2^a 3^b 5^c 7^d: lengths that cuFFT and pocketfft run with
// their fast radices (a prime factor such as 4097 = 17 * 241 costs several times more).
inline int64_t fft_half_length(int64_t n) {
  for (int64_t m = n < 1 ? 1 : n;; ++m) {
    int64_t r = m;
    for (int64_t p : {2, 3, 5, 7}) {
      while (r % p == 0) r /= p;
    }
    if (r == 1) return m;
  }
}

// One batched complex FFT of length M over the rows of a contiguous (rows, M) complex
// tensor, unnormalised (forward: e^{-2 pi i k n / M}; inverse: e^{+...}), through the AOTI
// C shim of aten::_fft_c2c for the device (Backend::c2c_shim).
template <typename Shim>
Tensor c2c(Shim shim, const Tensor& x, bool forward) {
  const int64_t dim = 1;
  AtenTensorHandle out = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(shim(x.get(), &dim, 1, /*normalization=*/0, forward, &out));
  return Tensor(out);
}

// The complex dtype that holds the packed rows of acc_t (float or double).
template <typename acc_t>
constexpr ScalarType complex_type() {
  return sizeof(acc_t) == 8 ? ScalarType::ComplexDouble : ScalarType::ComplexFloat;
}

// acc_t pointer to a complex tensor's data: its values read as (re, im) pairs of acc_t.
template <typename acc_t>
acc_t* reals(const Tensor& t) {
  return static_cast<acc_t*>(t.data_ptr());
}

// The spectra that timex_backward_kept takes: (B*C, M) and (C, M) of the complex type, or
// none (0 elements: the call did not run the library FFT, or they were not kept).
inline bool check_kept(const Tensor& kz, const Tensor& wz, const Tensor& k, ScalarType ctype) {
  if (kz.numel() == 0) return false;
  const int64_t B = k.size(0), C = k.size(1), M = fft_half_length(k.size(2));
  FUSED_OPS_CHECK_VALUE(kz.dim() == 2 && kz.size(0) == B * C && kz.size(1) == M &&
                            wz.dim() == 2 && wz.size(0) == C && wz.size(1) == M &&
                            kz.scalar_type() == ctype && wz.scalar_type() == ctype &&
                            kz.is_contiguous() && wz.is_contiguous(),
                        "timex_backward_kept: kz and wz must be the spectra that "
                        "timex_forward_keep returned for these w and k, got shapes ",
                        fused_ops::shape_str(kz), " and ", fused_ops::shape_str(wz));
  return true;
}

inline Tensor no_spectra(const Tensor& k) {
  return fused_ops::empty({0}, k.scalar_type(), k);
}

// The packed spectra of the rows of x (rows, T), read reversed or not: (rows, M) complex.
template <typename scalar_t, typename Backend>
Tensor spectra(const Backend& be, const Tensor& x, int64_t rows, int64_t T, int64_t M,
               bool reversed) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  Tensor z = fused_ops::empty({rows, M}, complex_type<acc_t>(), x);
  be.pack(x.const_data_ptr<scalar_t>(), rows, T, reversed, reals<acc_t>(z), M);
  return c2c(be.c2c_shim, z, true);
}

// out (B, C, T) of k's dtype = eps + the causal convolution. w (C, T) and k contiguous.
// Backend (the device's): pack, forward_product, backward_product, crop and c2c_shim. With
// keep (the eager training path) the spectra of k and W come back for backward(): the
// product then goes to a new buffer instead of over k's spectra.
template <typename scalar_t, typename Backend>
Tensor forward(const Backend& be, const Tensor& w, const Tensor& k, double eps,
               std::tuple<Tensor, Tensor>* keep = nullptr) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  const int64_t B = k.size(0), C = k.size(1), T = k.size(2), M = fft_half_length(T);
  Tensor zw = spectra<scalar_t>(be, w, C, T, M, /*reversed=*/true);
  Tensor zk = spectra<scalar_t>(be, k, B * C, T, M, /*reversed=*/false);
  Tensor z = keep == nullptr ? zk
                             : fused_ops::empty({B * C, M}, complex_type<acc_t>(), k);
  be.forward_product(reals<acc_t>(zk), reals<acc_t>(zw), reals<acc_t>(z), B * C, C, M);
  if (keep != nullptr) *keep = {zk, zw};
  zk = Tensor();  // freed (unless kept) before the inverse's output is allocated
  zw = Tensor();
  z = c2c(be.c2c_shim, z, false);
  Tensor out = fused_ops::empty({B, C, T}, k.scalar_type(), k);
  be.crop(reals<acc_t>(z), B * C, T, M, eps, /*reversed=*/false, out.mutable_data_ptr<scalar_t>());
  return out;
}

// (grad_w, grad_k) of k's dtype; g, w, k contiguous, B >= 1. kept: the spectra of k and W
// that forward() kept for this call, or nullptr to compute them again.
template <typename scalar_t, typename Backend>
std::tuple<Tensor, Tensor> backward(const Backend& be, const Tensor& g, const Tensor& w,
                                    const Tensor& k,
                                    const std::tuple<Tensor, Tensor>* kept = nullptr) {
  using acc_t = fused_ops::opmath_t<scalar_t>;
  const int64_t B = k.size(0), C = k.size(1), T = k.size(2), M = fft_half_length(T);
  Tensor zw = kept ? std::get<1>(*kept) : spectra<scalar_t>(be, w, C, T, M, /*reversed=*/true);
  Tensor zk = kept ? std::get<0>(*kept) : spectra<scalar_t>(be, k, B * C, T, M, false);
  Tensor zg = spectra<scalar_t>(be, g, B * C, T, M, /*reversed=*/false);
  Tensor zp = fused_ops::empty({C, M}, complex_type<acc_t>(), k);
  be.backward_product(reals<acc_t>(zg), reals<acc_t>(zk), reals<acc_t>(zw), reals<acc_t>(zp),
                      B, C, M);
  zk = Tensor();
  zw = Tensor();
  zg = c2c(be.c2c_shim, zg, false);
  Tensor grad_k = fused_ops::empty({B, C, T}, k.scalar_type(), k);
  be.crop(reals<acc_t>(zg), B * C, T, M, 0.0, /*reversed=*/false,
          grad_k.mutable_data_ptr<scalar_t>());
  zg = Tensor();
  zp = c2c(be.c2c_shim, zp, false);
  Tensor grad_w = fused_ops::empty({C, T}, w.scalar_type(), w);
  be.crop(reals<acc_t>(zp), C, T, M, 0.0, /*reversed=*/true, grad_w.mutable_data_ptr<scalar_t>());
  return {grad_w, grad_k};
}

}  // namespace rwkv::fft
