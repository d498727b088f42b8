// RWKV TimeX: host side of the fused on-chip FFT convolution (timex_fft_fused.h). Per call:
// the CTAs' shape (fused_wide), the twiddle table of the row length and shape
// (twiddle_bytes(M, wide), made by one small kernel at the device's first call of that length
// and shape and kept: fused_ops::device_table), the spectra of W = w
// reversed (C rows; the backward takes the forward's where the caller kept them), then the
// forward's conv kernel (which also writes k's spectra where the caller keeps them) or the
// backward kernel (both gradients, each g row transformed once, each k row once unless its
// spectrum was kept: timex_fft_backward.cuh).
#include "rwkv/timex_fft_fused.h"

#include <torch/csrc/stable/ops.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

#include "common/alloc.h"
#include "common/cuda_utils.cuh"
#include "common/device_table.h"
#include "common/dispatch.h"
#include "rwkv/timex_fft_backward.cuh"

namespace rwkv::fft {
namespace {

using fused_ops::Tensor;
using torch::headeronly::ScalarType;

Tensor bytes(int64_t n, const Tensor& like) {
  return fused_ops::empty({static_cast<int64_t>(n)}, ScalarType::Byte, like);
}

template <typename T>
T* as(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// The transform length of rows of T (fused_spectrum_length): read once per call, so that a
// call's kernels agree.
int length(int64_t T) {
  return fft_length(T, switch_on("RWKV_TIMEX_FUSED_RADIX3"), switch_on("RWKV_TIMEX_FUSED_RADIX5"));
}

// Whether a call on rows of M with B and C runs the wide CTAs (with_shape,
// timex_fft_kernels.cuh): read once per call, so that a call's kernels agree, and a function of
// (B, C, M) alone, so that a backward reads k's spectra as its forward's conv kernel made them
// with the same shape. RWKV_TIMEX_FUSED_WIDE = 1 (wherever kWideMinM <= M <= kWideMaxM), 0
// (never) or auto (or unset): there with at most 512 channels and 1536 rows B C. Measured
// forward + backward, GPU busy time (H200, run 53 (a), 40 shapes, float16 and float32): with
// those channels and rows 3-27% less ((3, 384, 2250) float16 98.6 -> 88.5 us, (2, 512, 2048)
// 69.6 -> 65.2, (2, 512, 1300) 57.3 -> 51.8, (2, 512, 500) float32 37.4 -> 27.4; at (4, 384, 2250)
// 0-2% more, at (3, 512, 1200) within 1%); with 1024 channels 5-12% more ((1, 1024, 1536),
// (1, 1024, 2500), (2, 1024, 2048)), at (3, 640, 2250) and (4, 512, 2500) 21% more, from 4096
// rows 0-13% more: an SM holds fewer rows at once, so rows that one round of the 16-value CTAs
// holds take two rounds of the wide ones.
bool fused_wide(int64_t B, int64_t C, int M) {
  if (M < kWideMinM || M > kWideMaxM) return false;
  const char* v = std::getenv("RWKV_TIMEX_FUSED_WIDE");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return C <= 512 && B * C <= 1536;
  if (std::strcmp(v, "1") == 0) return true;
  if (std::strcmp(v, "0") == 0) return false;
  fused_ops::raise<std::invalid_argument>(
      "environment variable RWKV_TIMEX_FUSED_WIDE must be '1', '0' or 'auto' (or unset), got '",
      std::string(v), "'");
}

// The fused table of length M and shape (the stage and split twiddles in the order the kernels'
// warps read them: timex_fft_stages.cuh): a table the caller passes (timex_backward_kept's kz,
// checked), or the device's table, made at the first call of that length and shape and kept for
// the process (fused_ops::device_table).
Tensor twiddles(int M, bool wide, const Tensor& like, cudaStream_t stream, const Tensor* kept) {
  if (kept != nullptr) {
    check_kept_twiddles(*kept, static_cast<int64_t>(twiddle_bytes(M, wide)));
    return *kept;
  }
  const std::string name =
      "timex fused twiddles " + std::to_string(M) + (wide ? " wide" : "");
  return fused_ops::device_table(name, like, stream, [&] {
    Tensor tw = bytes(static_cast<int64_t>(twiddle_bytes(M, wide)), like);
    FUSED_OPS_CUDA_CHECK(launch_twiddles(M, wide, as<cf32>(tw), stream));
    return tw;
  });
}

// The spectra of W (w reversed in time): C rows of M complex floats (a complex tensor, so
// that the forward can keep it for the backward as the cluster kernels' is kept), the first of
// `rows` (the rest left for k's).
template <typename scalar_t>
Tensor w_spectra(const Tensor& w, int M, bool wide, const Tensor& tw, cudaStream_t stream,
                 int64_t rows) {
  const int64_t C = w.size(0), T = w.size(1);
  Tensor spec = fused_ops::empty({rows, int64_t{M}}, ScalarType::ComplexFloat, w);
  FUSED_OPS_CUDA_CHECK(launch_spectrum<scalar_t>(w.const_data_ptr<scalar_t>(), C, T, M, wide,
                                                 /*reversed=*/true, as<cf32>(spec),
                                                 as<const cf32>(tw), stream));
  return spec;
}

// The CTAs of conv_kernel (CONV) or backward_kernel (ACC_SMEM as its) that k's device keeps
// resident for rows of length M in the shape that wide picks: the occupancy query once per
// dtype, length, shape and device (a driver call that every call made before).
template <typename scalar_t, bool CONV, bool ACC_SMEM = false>
int64_t resident_ctas(int M, bool wide, const Tensor& k) {
  static fused_ops::Memo<std::tuple<int64_t, bool, int>, int64_t> memo;
  const int device = k.get_device_index();
  return memo.get({M, wide, device}, [&] {
    const int per_sm = blocks_per_sm(M, wide, ACC_SMEM ? acc_smem_bytes(M) : smem_bytes(M),
                                     [](auto sh) {
      using Sh = decltype(sh);
      if constexpr (ACC_SMEM && Sh::M <= kAccSmemMaxM) {
        return reinterpret_cast<const void*>(backward_kernel<scalar_t, Sh, true, true>);
      }
      return CONV ? reinterpret_cast<const void*>(conv_kernel<scalar_t, Sh, true>)
                  : reinterpret_cast<const void*>(backward_kernel<scalar_t, Sh, true>);
    });
    return int64_t{fused_ops::device_properties(k).multiProcessorCount} * per_sm;
  });
}

// Whether a kernel that reads what the kernel launched just before it writes starts while that
// kernel's last CTAs run (a programmatic dependent launch: sm_90 and newer,
// RWKV_TIMEX_FUSED_PDL=0: never): the conv kernel after the spectrum kernel.
bool programmatic(const Tensor& k) {
  return switch_on("RWKV_TIMEX_FUSED_PDL") && fused_ops::device_properties(k).major >= 9;
}

template <typename scalar_t>
Tensor forward_typed(const Tensor& w, const Tensor& k, double eps, cudaStream_t stream,
                     Tensor* keep) {
  const int64_t B = k.size(0), C = k.size(1), T = k.size(2);
  const int M = length(T);
  const bool wide = fused_wide(B, C, M);
  const Tensor tw = twiddles(M, wide, k, stream, nullptr);
  // Kept for a backward: W's rows, then k's (written by the conv kernel).
  const bool keep_k = keep != nullptr && switch_on("RWKV_TIMEX_FUSED_KEEP_K");
  const Tensor spec = w_spectra<scalar_t>(w, M, wide, tw, stream, keep_k ? C * (1 + B) : C);
  Tensor out = fused_ops::empty({B, C, T}, k.scalar_type(), k);
  FUSED_OPS_CUDA_CHECK(launch_conv<scalar_t>(
      k.const_data_ptr<scalar_t>(), as<const cf32>(spec), out.mutable_data_ptr<scalar_t>(), B, C,
      T, M, wide, static_cast<float>(eps), as<const cf32>(tw), stream,
      keep_k ? as<cf32>(spec) + C * M : nullptr, switch_on("RWKV_TIMEX_FUSED_CHANNEL_MAJOR"),
      switch_on("RWKV_TIMEX_FUSED_STREAM"),
      switch_on("RWKV_TIMEX_FUSED_PREFETCH")
          ? static_cast<int>(
                std::min<int64_t>(resident_ctas<scalar_t, true>(M, wide, k), INT_MAX))
          : 0,
      programmatic(k)));
  if (keep != nullptr) *keep = spec;
  return out;
}

template <typename scalar_t>
std::tuple<Tensor, Tensor> backward_typed(const Tensor& g, const Tensor& w, const Tensor& k,
                                          cudaStream_t stream, const Tensor* kept,
                                          const Tensor* kept_twiddles) {
  const int64_t B = k.size(0), C = k.size(1), T = k.size(2);
  // The kept spectra's length where the caller kept them (checked against length(T) by the
  // caller: fused_spectrum_length).
  const int M = kept != nullptr ? static_cast<int>(kept->size(1)) : length(T);
  const bool wide = fused_wide(B, C, M);
  const Tensor tw = twiddles(M, wide, k, stream, kept_twiddles);
  const Tensor spec = kept != nullptr ? *kept : w_spectra<scalar_t>(w, M, wide, tw, stream, C);
  // k's spectra where the forward kept them (C + B C rows: fused_forward's keep).
  const cf32* kspec = spec.size(0) == C * (1 + B) && B > 0 ? as<const cf32>(spec) + C * M
                                                           : nullptr;
  Tensor grad_k = fused_ops::empty({B, C, T}, k.scalar_type(), k);
  Tensor grad_w = fused_ops::empty({C, T}, w.scalar_type(), w);
  const bool rows = switch_on("RWKV_TIMEX_FUSED_ROWS");
  BackwardPlan plan = backward_plan(B, C, M, resident_ctas<scalar_t, false>(M, wide, k),
                                    kspec != nullptr, rows);
  // The running sums in shared memory (fewer CTAs resident) where that leaves no CTA more rows.
  if (M <= kAccSmemMaxM && (B > 1 || kspec != nullptr) &&
      switch_on("RWKV_TIMEX_FUSED_ACC_SMEM")) {
    BackwardPlan in_smem = backward_plan(
        B, C, M, resident_ctas<scalar_t, false, true>(M, wide, k), kspec != nullptr, rows);
    if (in_smem.busiest <= plan.busiest) {
      plan = in_smem;
      plan.acc_smem = true;
    }
  }
  plan.wide = wide;
  const Tensor scratch = bytes(static_cast<int64_t>(plan.scratch_bytes()), k);
  FUSED_OPS_CUDA_CHECK(launch_backward<scalar_t>(
      g.const_data_ptr<scalar_t>(), k.const_data_ptr<scalar_t>(), as<const cf32>(spec),
      grad_k.mutable_data_ptr<scalar_t>(), grad_w.mutable_data_ptr<scalar_t>(), B, C, T, M, plan,
      as<cf32>(scratch), as<const cf32>(tw), stream, kspec, switch_on("RWKV_TIMEX_FUSED_STREAM")));
  return {grad_w, grad_k};
}

}  // namespace

int64_t fused_spectrum_length(int64_t T) { return supported(T) ? length(T) : 0; }

bool fused_supported(const Tensor& k) {
  const int64_t B = k.size(0), C = k.size(1), T = k.size(2);
  return k.scalar_type() != ScalarType::Double && supported(T) && B * C <= INT_MAX &&
         static_cast<size_t>(smem_bytes(fft_length(T, false, false))) <=
             fused_ops::device_properties(k).sharedMemPerBlockOptin;
}

Tensor fused_forward(const Tensor& w, const Tensor& k, double eps, cudaStream_t stream,
                     Tensor* keep) {
  Tensor out;
  FUSED_OPS_DISPATCH_FLOATING(k.scalar_type(), "timex_fused_fft_forward", [&] {
    if constexpr (!std::is_same_v<scalar_t, double>) {
      out = forward_typed<scalar_t>(w, k, eps, stream, keep);
    }
  });
  return out;
}

std::tuple<Tensor, Tensor> fused_backward(const Tensor& g, const Tensor& w, const Tensor& k,
                                          cudaStream_t stream, const Tensor* kept,
                                          const Tensor* kept_twiddles) {
  std::tuple<Tensor, Tensor> grads;
  FUSED_OPS_DISPATCH_FLOATING(k.scalar_type(), "timex_fused_fft_backward", [&] {
    if constexpr (!std::is_same_v<scalar_t, double>) {
      grads = backward_typed<scalar_t>(g, w, k, stream, kept, kept_twiddles);
    }
  });
  return grads;
}

}  // namespace rwkv::fft
