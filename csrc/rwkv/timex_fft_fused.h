// RWKV TimeX: the fused on-chip FFT convolution (timex_fft_kernels.cuh) behind the op's CUDA
// entry points (timex_cuda.cu), compiled in its own translation unit (timex_fft_fused.cu:
// every length up to 16384 (2^k, 3 2^k, 5 2^k) for three dtypes is most of the family's nvcc
// time, and builds in parallel with the rest).
#pragma once

#include <cuda_runtime.h>

#include <tuple>

#include "common/checks.h"
#include "common/env_switch.h"

namespace rwkv::fft {

using fused_ops::switch_on;  // the FFT paths' RWKV_TIMEX_FUSED_* and CLUSTER switches

// The longest row of the one-CTA kernels (kMaxM of timex_fft_math.cuh); longer rows go to the
// cluster kernels.
constexpr int64_t kFusedMaxT = 16384;

// Whether the fused kernels run k's shape, dtype and device: T <= 16384, float32 or a half
// type (float64 takes the library FFT), B * C < 2^31, and the length's shared memory
// (136 KiB at T = 16384) within the device's per-block limit.
bool fused_supported(const fused_ops::Tensor& k);

// The twiddle tables that a forward kept for its backward (keep_twiddles, kept_twiddles
// below): a contiguous byte tensor of the size that the backward's path reads, else
// ValueError (timex_backward_kept's kz).
inline void check_kept_twiddles(const fused_ops::Tensor& t, int64_t bytes) {
  FUSED_OPS_CHECK_VALUE(t.scalar_type() == torch::headeronly::ScalarType::Byte &&
                            t.dim() == 1 && t.numel() == bytes && t.is_contiguous(),
                        "timex_backward_kept: kz must be the twiddle tables that "
                        "timex_forward_keep returned for these w and k (", fused_ops::num(bytes),
                        " bytes), got shape ", fused_ops::shape_str(t));
}

// out = eps + the causal convolution; w, k contiguous, fused_supported(k). keep: where not
// null, receives W's spectra and then k's, (C + B C, M) complex float (M =
// fused_spectrum_length(T): the packed half spectra of timex_fft_math.cuh; W's alone, (C, M),
// with RWKV_TIMEX_FUSED_KEEP_K=0), for fused_backward's kept. The twiddle table is the
// device's (kept for the process, never handed out: a caller could write to it).
fused_ops::Tensor fused_forward(const fused_ops::Tensor& w, const fused_ops::Tensor& k, double eps,
                                cudaStream_t stream, fused_ops::Tensor* keep = nullptr);

// (grad_w, grad_k); g, w, k contiguous, B >= 1, fused_supported(k). kept: the spectra from
// fused_forward's keep for these w, k (checked by the caller; with k's rows the backward
// transforms 2 rows instead of 3 per (b, c)), or null to compute W's;
// kept_twiddles: a twiddle table of this length (bytes, its size checked here), or null for the
// device's.
std::tuple<fused_ops::Tensor, fused_ops::Tensor> fused_backward(
    const fused_ops::Tensor& g, const fused_ops::Tensor& w, const fused_ops::Tensor& k,
    cudaStream_t stream, const fused_ops::Tensor* kept = nullptr,
    const fused_ops::Tensor* kept_twiddles = nullptr);

// M of the one-CTA kernels for rows of T: the complex values per row of the kept spectra (0
// past their longest row): the shortest of 2^k, 3 2^k and 5 2^k that is >= T (the last two
// from 1536 on: 1536 for 1024 < T <= 1536, 2560 for 2048 < T <= 2560, ..., 12288 for 10240 <
// T <= 12288). RWKV_TIMEX_FUSED_RADIX5=0 skips 5 2^k, RWKV_TIMEX_FUSED_RADIX3=0 3 2^k, to
// measure one against the other.
int64_t fused_spectrum_length(int64_t T);

// The thread-block-cluster kernels (timex_fft_cluster.cu): rows of T <= 65536 spread over P
// CTAs (M = the shortest of 20480 = 2 x 10240, 24576 = 3 x 8192, 32768 = 2 x 16384, 40960 =
// 4 x 10240, 49152 = 4 x 12288 and 65536 = 4 x 16384 that is >= T); float32 or a half type,
// sm_90 or newer with this build's sm_90 code, B * C * P < 2^31. The op takes them past
// T = 16384 (below, where forced: correct, at the cost of M = 20480).
bool cluster_supported(const fused_ops::Tensor& k);

// keep: where not null, receives W's spectra, complex float in the cluster kernels' own
// frequency order, for cluster_backward's kept: (C + B C, M), W's and then k's rows', or
// (C + B C, 2, kHalvesH) where the rows run as two halves (cluster_halves);
// keep_twiddles: where not null, the twiddle tables of that shape (bytes, 1.4 MiB at
// M = 65536), for cluster_backward's kept_twiddles.
fused_ops::Tensor cluster_forward(const fused_ops::Tensor& w, const fused_ops::Tensor& k,
                                  double eps, cudaStream_t stream,
                                  fused_ops::Tensor* keep = nullptr,
                                  fused_ops::Tensor* keep_twiddles = nullptr);

// kept: the spectra from cluster_forward's keep for these w, k (checked by the caller with
// cluster_spectrum_length), or null to compute them; kept_twiddles: the tables from its
// keep_twiddles (their size checked here), or null to make them.
std::tuple<fused_ops::Tensor, fused_ops::Tensor> cluster_backward(
    const fused_ops::Tensor& g, const fused_ops::Tensor& w, const fused_ops::Tensor& k,
    cudaStream_t stream, const fused_ops::Tensor* kept = nullptr,
    const fused_ops::Tensor* kept_twiddles = nullptr);

// M of the cluster kernels for rows of T: the length of the kept spectra's rows (0 past
// their longest row).
int64_t cluster_spectrum_length(int64_t T);

// The halves' length: rows of kHalvesH < T <= 2 kHalvesH may run as two halves of kHalvesH,
// each half-length product a transform of kHalvesH complex values on 2-CTA clusters
// (timex_fft_cluster_halves.cuh). Whether they do for k (its shape, dtype, the device and
// RWKV_TIMEX_CLUSTER_HALVES = on | off | auto), where the cluster kernels run k.
constexpr int64_t kHalvesH = 32768;
bool cluster_halves(const fused_ops::Tensor& k, cudaStream_t stream);

}  // namespace rwkv::fft
