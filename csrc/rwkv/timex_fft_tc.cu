// RWKV TimeX: host side of the FFT convolution on tensor cores (timex_fft_tc.h). Per call:
// W's spectra (C rows, a CTA per one or two; the backward takes the forward's where the caller kept
// them), then the forward's conv kernel (a CTA per pair of rows: conv_ctas) or the
// backward kernel (both gradients; a reduce launch where the batch is split).
#include "rwkv/timex_fft_tc.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "common/alloc.h"
#include "common/cuda_utils.cuh"
#include "common/dispatch.h"
#include "rwkv/timex_fft_tc_backward.cuh"
#include "rwkv/timex_fft_tc_spectrum.cuh"

namespace rwkv::fft {
namespace {

using fused_ops::Tensor;
using torch::headeronly::ScalarType;
namespace tc = fft_tc;

// fn(std::integral_constant<int, N>) for the transform length of rows of T (T <= kTcMaxT).
template <typename Fn>
void with_length(int64_t T, Fn&& fn) {
  switch (tc::transform_length(T)) {
    case 2048: fn(std::integral_constant<int, 2048>{}); break;
    case 2560: fn(std::integral_constant<int, 2560>{}); break;
    case 3072: fn(std::integral_constant<int, 3072>{}); break;
    case 4096: fn(std::integral_constant<int, 4096>{}); break;
    case 6144: fn(std::integral_constant<int, 6144>{}); break;
    case 8192: fn(std::integral_constant<int, 8192>{}); break;
    case 12288: fn(std::integral_constant<int, 12288>{}); break;
    case 16384: fn(std::integral_constant<int, 16384>{}); break;
    case 20480: fn(std::integral_constant<int, 20480>{}); break;
    case 24576: fn(std::integral_constant<int, 24576>{}); break;
    case 28672: fn(std::integral_constant<int, 28672>{}); break;
    default: fn(std::integral_constant<int, 32768>{}); break;
  }
}

template <typename T>
T* as(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}
// A half-type tensor's elements as their 16-bit patterns (the kernels' view).
const uint16_t* bits(const Tensor& t) { return static_cast<const uint16_t*>(t.const_data_ptr()); }
uint16_t* bits_out(const Tensor& t) { return static_cast<uint16_t*>(t.data_ptr()); }

// RWKV_TIMEX_TC_PDL = 0 | 1 (or unset: 1), read at every call (to measure both ways): whether a
// kernel that consumes the spectra just made starts while the spectrum kernel's last CTAs run
// (launch_on_spectra).
bool overlap_spectra() {
  const char* v = std::getenv("RWKV_TIMEX_TC_PDL");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "1") == 0) return true;
  if (std::strcmp(v, "0") == 0) return false;
  fused_ops::raise<std::invalid_argument>(
      "environment variable RWKV_TIMEX_TC_PDL must be '0' or '1' (or unset), got '",
      std::string(v), "'");
}

// Launches kernel, which reads W's spectra. Where they were made by the spectrum kernel
// launched just before it on `stream` (just_made), as a programmatic dependent launch on sm_90
// and newer (launch_dependents and wait_for_spectra, timex_fft_pdl.cuh): its CTAs load
// and transform their rows while the spectrum grid's last wave runs, and wait for that grid
// before the middle. Else (kept spectra, older GPUs, RWKV_TIMEX_TC_PDL=0) an ordinary launch.
// Only right after spectrum_tc_kernel: the kernels read g and k before they wait, which is
// safe because the spectrum kernel, launched in stream order, started after their producers.
template <typename Kernel, typename... Args>
cudaError_t launch_on_spectra(bool just_made, const Tensor& on, Kernel kernel, int grid,
                              int threads, int smem, cudaStream_t stream, Args... args) {
  // The setting first: a bad value raises on every GPU, not only where it would be used.
  const bool after =
      overlap_spectra() && just_made && fused_ops::device_properties(on).major >= 9;
  return fused_ops::launch_with_smem_after(after, kernel, grid, threads, smem, stream, args...);
}

// W's spectra and their exponents.
template <typename S>
std::pair<Tensor, Tensor> w_spectra(const Tensor& w, cudaStream_t stream) {
  const int64_t C = w.size(0), T = w.size(1), N = tc::transform_length(T);
  // Each entry a tc::ch16 (two float16) in an int32: a complex32 tensor would make torch warn
  // that ComplexHalf is experimental at every first allocation.
  Tensor wz = fused_ops::empty({C, N}, ScalarType::Int, w);
  Tensor wexp = fused_ops::empty({C}, ScalarType::Int, w);
  with_length(T, [&](auto n) {
    constexpr int kN = decltype(n)::value;
    FUSED_OPS_CUDA_CHECK(fused_ops::launch_with_smem(
        tc::spectrum_tc_kernel<S, kN>, static_cast<int>(tc::spectrum_ctas(kN, C)),
        tc::forward_threads(kN), tc::spectrum_smem_bytes(kN), stream, bits(w),
        static_cast<int>(C), static_cast<int>(T), as<tc::ch16>(wz), as<int>(wexp)));
  });
  return {wz, wexp};
}

template <typename S>
Tensor forward_typed(const Tensor& w, const Tensor& k, double eps, cudaStream_t stream,
                     Tensor* keep_wz, Tensor* keep_wexp) {
  const int64_t B = k.size(0), C = k.size(1), T = k.size(2);
  const std::pair<Tensor, Tensor> spectra = w_spectra<S>(w, stream);
  const Tensor& wz = spectra.first;
  const Tensor& wexp = spectra.second;
  Tensor out = fused_ops::empty({B, C, T}, k.scalar_type(), k);
  with_length(T, [&](auto n) {
    constexpr int kN = decltype(n)::value;
    tc::with_conv_kernel<S, kN>(B, [&](auto kernel) {
      FUSED_OPS_CUDA_CHECK(launch_on_spectra(
          true, k, kernel, static_cast<int>(tc::conv_ctas(kN, B, C)), tc::forward_threads(kN),
          tc::forward_smem_bytes(kN), stream, bits(k), as<const tc::ch16>(wz),
          as<const int>(wexp), bits_out(out), static_cast<int>(B), static_cast<int>(C),
          static_cast<int>(T), static_cast<float>(eps)));
    });
  });
  if (keep_wz != nullptr) *keep_wz = wz;
  if (keep_wexp != nullptr) *keep_wexp = wexp;
  return out;
}

// RWKV_TIMEX_TC_ACC = smem | global | auto (or unset), read at every call (to measure both
// ways): whether the backward keeps its running sum acc in shared memory (backward_tc_kernel's
// ACC_SMEM), only ever at the lengths built so (has_acc_smem). auto: where an SM holds 512 of
// its threads, as it holds 512 of the kernel without (sm_90's 228 KiB: two CTAs of 96 KiB at
// N = 6144, one of 512 threads and 192 KiB at 12288; not sm_80's 164 KiB, where it would halve
// them), except at N = 12288 where a channel has one pair (B <= 2): there each CTA's sum has
// one term, and two CTAs of 256 threads an SM (96 KiB each) took 3-5% less backward time than
// one of 512 (bfloat16, H200: run 34 (b) in benchmarks/results/issue29_runs; on chip stays 5%
// faster at N = 6144 at B = 1 and 2, 1% at N = 12288 at B = 4); smem: wherever one CTA fits;
// global: never.
bool acc_on_chip(int64_t N, const Tensor& k) {
  const int n = static_cast<int>(N);
  if (!tc::has_acc_smem(n)) return false;
  const cudaDeviceProp& prop = fused_ops::device_properties(k);
  const size_t bytes = static_cast<size_t>(tc::backward_smem_bytes(n, true));
  const char* v = std::getenv("RWKV_TIMEX_TC_ACC");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) {
    const size_t per_sm =
        prop.sharedMemPerMultiprocessor / (bytes + prop.reservedSharedMemPerBlock);
    return bytes <= prop.sharedMemPerBlockOptin && per_sm * tc::backward_threads(n, true) >= 512 &&
           (n != 12288 || k.size(0) > 2);
  }
  if (std::strcmp(v, "smem") == 0) return bytes <= prop.sharedMemPerBlockOptin;
  if (std::strcmp(v, "global") == 0) return false;
  fused_ops::raise<std::invalid_argument>(
      "environment variable RWKV_TIMEX_TC_ACC must be 'smem', 'global' or 'auto' (or unset), "
      "got '", std::string(v), "'");
}

// The steps of the backward's Z copy that k's device holds in shared memory at length N
// (tc::z_shared_steps).
int z_steps(int64_t N, const Tensor& k) {
  return tc::z_shared_steps(static_cast<int>(N),
                            fused_ops::device_properties(k).sharedMemPerBlockOptin);
}

// backward_tc_kernel's CTAs that k's device keeps resident for rows of T (the occupancy query
// once per dtype, length, place of acc and device).
template <typename S>
int64_t resident_ctas(int64_t T, bool on_chip, const Tensor& k) {
  static fused_ops::Memo<std::tuple<int64_t, bool, int>, int64_t> memo;
  return memo.get({tc::transform_length(T), on_chip, k.get_device_index()}, [&] {
    int per_sm = 1;
    with_length(T, [&](auto n) {
      // (B = 2: the even-B build; the odd one has the same bounds and shared memory.)
      tc::with_backward_kernel<S, decltype(n)::value>(on_chip, 2, [&](auto kernel, int th,
                                                                      int smem) {
        smem += 1024 * z_steps(decltype(n)::value, k);
        if (fused_ops::raise_shared_memory_limit(reinterpret_cast<const void*>(kernel), smem) !=
                cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, th, smem) !=
                cudaSuccess) {
          (void)cudaGetLastError();
          per_sm = 1;
        }
      });
    });
    return int64_t{fused_ops::device_properties(k).multiProcessorCount} * std::max(per_sm, 1);
  });
}

template <typename S>
std::tuple<Tensor, Tensor> backward_typed(const Tensor& g, const Tensor& w, const Tensor& k,
                                          cudaStream_t stream, const Tensor* kept_wz,
                                          const Tensor* kept_wexp) {
  const int64_t B = k.size(0), C = k.size(1), T = k.size(2), N = tc::transform_length(T);
  std::pair<Tensor, Tensor> spectra;
  const bool kept = kept_wz != nullptr && kept_wexp != nullptr;
  if (kept) {
    FUSED_OPS_CHECK_VALUE(
        kept_wz->scalar_type() == ScalarType::Int && kept_wz->dim() == 2 &&
            kept_wz->size(0) == C && kept_wz->size(1) == N && kept_wz->is_contiguous() &&
            kept_wexp->scalar_type() == ScalarType::Int && kept_wexp->dim() == 1 &&
            kept_wexp->size(0) == C && kept_wexp->is_contiguous(),
        "timex_backward_kept: wz and kz must be the spectra and exponents that "
        "timex_forward_keep returned for these w and k, got shapes ",
        fused_ops::shape_str(*kept_wz), " and ", fused_ops::shape_str(*kept_wexp));
    spectra = {*kept_wz, *kept_wexp};
  } else {
    spectra = w_spectra<S>(w, stream);
  }
  Tensor grad_k = fused_ops::empty({B, C, T}, k.scalar_type(), k);
  Tensor grad_w = fused_ops::empty({C, T}, w.scalar_type(), w);
  // Work split as the FMA backward's (timex_fft_backward.cuh): splits = 1 where the channels
  // fill the resident CTAs, else as many ranges of pairs as keep the items within them.
  const bool on_chip = acc_on_chip(N, k);
  const int64_t pairs = (B + 1) / 2, resident = resident_ctas<S>(T, on_chip, k);
  const int64_t splits = C >= resident ? 1 : std::max<int64_t>(1, std::min(pairs, resident / C));
  const int64_t items = C * splits, ctas = std::max<int64_t>(1, std::min(items, resident));
  // ctas = items where split; none where acc is on chip and not split (the kernel then never
  // touches acc_all: no allocation, which short calls would pay in host time).
  const bool acc_global = !on_chip || splits > 1;
  Tensor acc;
  if (acc_global) acc = fused_ops::empty({ctas * N}, ScalarType::ComplexFloat, k);
  tc::cf32* const acc_ptr = acc_global ? as<tc::cf32>(acc) : nullptr;
  // The part of Z's copy per CTA that shared memory does not hold (N = 28672 and 32768).
  const int zsteps = z_steps(N, k);
  const int64_t scratch = tc::backward_scratch_bytes(static_cast<int>(N), zsteps);
  Tensor zs;
  if (scratch > 0) zs = fused_ops::empty({ctas * scratch}, ScalarType::Byte, k);
  with_length(T, [&](auto n) {
    constexpr int kN = decltype(n)::value;
    const int b = static_cast<int>(B), c = static_cast<int>(C), t = static_cast<int>(T);
    const int sp = static_cast<int>(splits);
    tc::with_backward_kernel<S, kN>(on_chip, B, [&](auto kernel, int threads, int smem) {
      // Right after the spectrum kernel where the spectra were made here (not kept).
      FUSED_OPS_CUDA_CHECK(launch_on_spectra(
          !kept, k, kernel, static_cast<int>(ctas), threads, smem + 1024 * zsteps, stream,
          bits(g), bits(k), as<const tc::ch16>(spectra.first), as<const int>(spectra.second),
          bits_out(grad_k), bits_out(grad_w), b, c, t, sp, false, acc_ptr,
          scratch > 0 ? as<uint16_t>(zs) : nullptr, zsteps));
    });
    if (splits > 1) {  // the reduce launch: a CTA per channel, acc in global memory
      FUSED_OPS_CUDA_CHECK(fused_ops::launch_with_smem(
          tc::backward_tc_kernel<S, kN>, c, tc::backward_threads(kN), tc::backward_smem_bytes(kN),
          stream, bits(g), bits(k), as<const tc::ch16>(spectra.first),
          as<const int>(spectra.second), bits_out(grad_k), bits_out(grad_w), b, c, t, sp, true,
          acc_ptr, nullptr, 0));
    }
  });
  return {grad_w, grad_k};
}

}  // namespace

bool tc_supported(const Tensor& k) {
  const int64_t B = k.size(0), C = k.size(1), T = k.size(2);
  if (k.scalar_type() != ScalarType::BFloat16 && k.scalar_type() != ScalarType::Half) return false;
  if (T < 1 || T > kTcMaxT || B < 1 || B * C > INT_MAX) return false;
  const cudaDeviceProp& prop = fused_ops::device_properties(k);
  const int N = static_cast<int>(tc::transform_length(T));
  // The largest of the kernels' shared memory: the backward's, or at N = 28672 and 32768
  // (Z's planes off chip) the spectrum kernel's.
  const int smem = std::max(tc::backward_smem_bytes(N), tc::spectrum_smem_bytes(N));
  // From sm_90 the backward's odd row stages W and acc in Z's copy (TIMEX_FFT_TC_ROW_STAGE):
  // the copy's steps in shared memory must hold every warp's stage.
  const bool stage_fits =
      prop.major < 9 || !tc::z_off_chip(N) ||
      1024 * tc::z_shared_steps(N, prop.sharedMemPerBlockOptin) >=
          tc::kRowStageBytes * (tc::backward_threads(N) / 32);
  return prop.major >= 8 && static_cast<size_t>(smem) <= prop.sharedMemPerBlockOptin &&
         stage_fits;
}

Tensor tc_forward(const Tensor& w, const Tensor& k, double eps, cudaStream_t stream,
                  Tensor* keep_wz, Tensor* keep_wexp) {
  Tensor out;
  FUSED_OPS_DISPATCH_HALF(k.scalar_type(), "timex_fft_tc_forward", [&] {
    out = forward_typed<scalar_t>(w, k, eps, stream, keep_wz, keep_wexp);
  });
  return out;
}

std::tuple<Tensor, Tensor> tc_backward(const Tensor& g, const Tensor& w, const Tensor& k,
                                       cudaStream_t stream, const Tensor* kept_wz,
                                       const Tensor* kept_wexp) {
  std::tuple<Tensor, Tensor> grads;
  FUSED_OPS_DISPATCH_HALF(k.scalar_type(), "timex_fft_tc_backward", [&] {
    grads = backward_typed<scalar_t>(g, w, k, stream, kept_wz, kept_wexp);
  });
  return grads;
}

}  // namespace rwkv::fft
