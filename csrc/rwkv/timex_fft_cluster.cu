// RWKV TimeX: host side of the thread-block-cluster FFT convolution (timex_fft_fused.h, kernels in
// timex_fft_cluster_kernels.cuh) for rows longer than one CTA's shared memory holds. M = the
// smallest of 20480, 24576, 32768, 40960, 49152 and 65536 that is >= T (cluster_length), as P CTAs
// per row of L values each (with_cluster_length): L = 10240 (640 threads, 85 KiB of shared memory,
// two CTAs per SM) with P = 2 at M = 20480 and P = 4 at 40960, L = 8192 (512 threads, 68 KiB, three
// CTAs per SM) with P = 3 at 24576, L = 12288 (768 threads, 102 KiB, two per SM) with P = 4 at
// 49152, and the one-CTA kernels' largest shape, L = 16384 (1024 threads, 136 KiB, one CTA per SM),
// with P = 2 at 32768 and P = 4 at 65536. Per call, as the one-CTA path: the twiddle tables (a
// buffer from torch's caching allocator each call keeps the op free of device-global state and
// capturable in a CUDA graph; the backward takes the forward's where the caller kept it), then the
// forward as one kernel (W's spectrum and the convolution by the same cluster,
// timex_fft_cluster_forward.cuh) where it takes no more waves of transforms (fused_forward_for),
// else the spectra of W = w reversed and one kernel per output; where the caller keeps them for the
// backward, the forward also writes k's spectra (kept_rows). Rows of 49152 < T <= 65536 may instead
// run as two halves on 2-CTA clusters (halves_for; timex_fft_cluster_halves.cuh).
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#include "common/alloc.h"
#include "common/cuda_utils.cuh"
#include "common/dispatch.h"
#include "rwkv/timex_fft_cluster_forward.cuh"
#include "rwkv/timex_fft_cluster_halves.cuh"
#include "rwkv/timex_fft_fused.h"

namespace rwkv::fft {
namespace {

using fused_ops::Tensor;
using torch::headeronly::ScalarType;

constexpr int kClusterL = kMaxM;  // values per CTA
static_assert(kFusedMaxT == kMaxM, "timex_fft_fused.h");

// The cluster kernels' row lengths M, shortest first, and M for rows of T (0 past the
// longest). Each M is P L (with_cluster_length).
constexpr int kClusterLengths[] = {5 * kClusterL / 4, 3 * kClusterL / 2, 2 * kClusterL,
                                   5 * kClusterL / 2, 3 * kClusterL,     4 * kClusterL};
static_assert(4 * kClusterL == kClusterMaxM, "timex_fft_cluster_math.cuh");

// RWKV_TIMEX_CLUSTER_ODD_L=0: only local lengths L that are powers of two (run 43's shapes):
// no M = 20480 (2 x 10240), M = 40960 as 5 x 8192 instead of 4 x 10240 and 49152 as 3 x 16384
// instead of 4 x 12288 (with_cluster_length).
bool odd_locals() { return switch_on("RWKV_TIMEX_CLUSTER_ODD_L"); }

// RWKV_TIMEX_CLUSTER_P5=0 skips M = 40960 (rows of 32768 < T <= 40960 take 49152).
int cluster_length(int64_t T) {
  const bool p5 = switch_on("RWKV_TIMEX_CLUSTER_P5"), odd = odd_locals();
  for (const int M : kClusterLengths) {
    if (!odd && M == 5 * kClusterL / 4) continue;
    if (T <= M && (p5 || M != 5 * kClusterL / 2)) return M;
  }
  return 0;
}

// f(ClusterShape<...>{}) for the run-time M of cluster_length. L = 16384 values per CTA where
// P allows: with L = 8192 (512 threads, 68 KiB, P = 4 and 8, two CTAs resident per SM) the
// forward took 1.2-1.4x longer on the H100 at the same M (benchmarks/results/
// timex_tensor_cores_h100.md). M = 24576 = 3 x 8192 is the exception: measured faster than
// M = 32768 at T = 20000 and 22050 (benchmarks/results/timex_cluster_p3_h100.md), and so is
// M = 40960 = 5 x 8192 against 49152 = 3 x 16384 (1.2 times the points; 4-29% more time on
// the H200 at 32768 < T <= 40960: benchmarks/results/issue29_runs/run43_p5_h200.md (b)).
// Local lengths 3 2^k and 5 2^k (the one-CTA kernels' odd last stage) measured against those
// shapes (GPU time forward + backward, bfloat16 and float32, H200: issue29_runs/
// run46_cluster_l10240_h200.md (a), (d)): 4 x 10240 against 5 x 8192 10-27% less at 32768 < T
// <= 40960 (one partner fewer in every cross-CTA sum); 2 x 10240 against 3 x 8192 = 24576 21-24%
// less at 16384 < T <= 20480; 4 x 12288 against 3 x 16384 14-20% less at 40960 < T <= 49152; 3
// x 10240 = 30720 against 2 x 16384 = 32768 6-9% more at T = 28000 and 30000 (2-3% less at
// 26000): not taken.
template <typename F>
void with_cluster_length(int M, const F& f) {
  using Local = Shape<kClusterL, kThreads>;
  using L10240 = Shape<5 * kClusterL / 8, kThreads>;
  const bool odd = odd_locals();
  if (M == 5 * kClusterL / 4) f(ClusterShape<L10240, 2>{});
  if (M == 3 * kClusterL / 2) f(ClusterShape<Shape<kClusterL / 2, kThreads>, 3>{});
  if (M == 2 * kClusterL) f(ClusterShape<Local, 2>{});
  if (M == 5 * kClusterL / 2) {
    if (odd) {
      f(ClusterShape<L10240, 4>{});
    } else {
      f(ClusterShape<Shape<kClusterL / 2, kThreads>, 5>{});
    }
  }
  if (M == 3 * kClusterL) {
    if (odd) {
      f(ClusterShape<Shape<3 * kClusterL / 4, kThreads>, 4>{});
    } else {
      f(ClusterShape<Local, 3>{});
    }
  }
  if (M == 4 * kClusterL) f(ClusterShape<Local, 4>{});
}

// The clusters' scheduling policy: LoadBalancing, unless RWKV_TIMEX_CLUSTER_BALANCED=0 asks
// for the default, Spread. On the H200 it fits more clusters of the L = 8192 CTAs at once (5
// CTAs: 73 against 69; 3 CTAs: 132 against 124; the same counts at L = 16384) and took 4-9%
// off forward + backward at 16384 < T <= 40960 (benchmarks/results/issue29_runs/
// run43_p5_h200.md (k)).
bool balanced() { return switch_on("RWKV_TIMEX_CLUSTER_BALANCED"); }

// A launch of `grid` CTAs in clusters of P; attr (two entries) receives the cluster size and
// the scheduling policy.
cudaLaunchConfig_t config(int grid, int P, int threads, int smem, cudaStream_t stream,
                          cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(P);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeClusterSchedulingPolicyPreference;
  attr[1].val.clusterSchedulingPolicyPreference =
      balanced() ? cudaClusterSchedulingPolicyLoadBalancing : cudaClusterSchedulingPolicySpread;
  cfg.attrs = attr;
  cfg.numAttrs = 2;
  return cfg;
}

// Launches kernel as `clusters` clusters of CS::P CTAs.
template <class CS, typename... Params, typename... Args>
void launch(void (*kernel)(Params...), int64_t clusters, cudaStream_t stream, Args... args) {
  FUSED_OPS_CUDA_CHECK(
      fused_ops::raise_shared_memory_limit(reinterpret_cast<const void*>(kernel), CS::Local::SMEM));
  cudaLaunchAttribute attr[2]{};
  const cudaLaunchConfig_t cfg = config(static_cast<int>(clusters * CS::P), CS::P, CS::THREADS,
                                        CS::Local::SMEM, stream, attr);
  FUSED_OPS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...));
}

Tensor bytes(int64_t n, const Tensor& like) {
  return fused_ops::empty({n}, ScalarType::Byte, like);
}

template <typename T>
T* as(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// The twiddle tables, one buffer made by one launch (timex_fft_cluster_math.cuh): twc (2M
// entries), tw (the one-CTA kernels' table of kTwiddles entries: the same stage twiddles, for
// the forward kernel's RWKV_TIMEX_CLUSTER_STAGED=0 at P = 2 and 4) and staged (the local
// DFT_L's stage twiddles in stage order, what the kernels read), in that order, as the kernel
// writes them. The forward hands the buffer to the backward (timex_backward_kept's kz), which
// then neither allocates nor launches for it: host time, which short calls are bound by.
struct Twiddles {
  Tensor buf;
  cf32 *twc, *tw, *staged;
};

template <class CS>
constexpr int64_t twiddle_buffer_bytes() {
  return static_cast<int64_t>(sizeof(cf32)) *
         (2 * CS::M + kTwiddles + std::max(staged_size<typename CS::Local>(), 1));
}

// The tables: the kept buffer of an earlier call for CS (checked), or a new one.
template <class CS>
Twiddles twiddles(const Tensor& like, cudaStream_t stream, const Tensor* kept) {
  if (kept != nullptr) check_kept_twiddles(*kept, twiddle_buffer_bytes<CS>());
  const Tensor buf = kept != nullptr ? *kept : bytes(twiddle_buffer_bytes<CS>(), like);
  cf32* base = as<cf32>(buf);
  const Twiddles t{buf, base, base + 2 * CS::M, base + 2 * CS::M + kTwiddles};
  if (kept == nullptr) {
    constexpr int64_t n = 2 * CS::M + kTwiddles + staged_size<typename CS::Local>();
    cluster_twiddle_kernel<CS><<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(
        t.twc, t.tw, t.staged);
    FUSED_OPS_LAUNCH_CHECK();
  }
  return t;
}

// RWKV_TIMEX_CLUSTER_FORWARD = fused | split | auto (or unset): the forward as one kernel
// (cluster_forward_kernel: C clusters, each 1 + 2B transforms in turn) or as spectrum + conv
// kernels (C clusters of 1 transform, then B C of 2). auto: fused unless it takes more waves
// of transforms with R clusters resident, counting whole waves; at equal counts (always at
// B = 1) fused, which does not read the spectra back from DRAM. Measured on the H100 at
// (1, 512, 32768), (1, 256, 65536) and (2, 256, 32768) (benchmarks/results/
// timex_cluster_forward_h100.md). Read at every call (a test sets it between calls).
bool fused_forward_for(int64_t B, int64_t C, int64_t R) {
  const char* v = std::getenv("RWKV_TIMEX_CLUSTER_FORWARD");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) {
    const int64_t waves = (C + R - 1) / R, conv_waves = (B * C + R - 1) / R;
    return waves * (1 + 2 * B) <= waves + 2 * conv_waves;
  }
  if (std::strcmp(v, "fused") == 0) return true;
  if (std::strcmp(v, "split") == 0) return false;
  fused_ops::raise<std::invalid_argument>(
      "environment variable RWKV_TIMEX_CLUSTER_FORWARD must be 'fused', 'split' or 'auto' (or "
      "unset), got '", std::string(v), "'");
}

// Switches of the fused forward, kept to measure them (the same results either way), read at
// every call: RWKV_TIMEX_CLUSTER_PREFETCH = 0: no L2 prefetch; 1: of the cluster's own k rows
// only; else also of the rows of the channel `resident clusters` ahead.
// RWKV_TIMEX_CLUSTER_RELAXED = 0: cluster_sync for the "reads done" barriers too.
int prefetch_level() {
  const char* v = std::getenv("RWKV_TIMEX_CLUSTER_PREFETCH");
  if (v == nullptr || *v == '\0') return 2;
  return std::strcmp(v, "0") == 0 ? 0 : std::strcmp(v, "1") == 0 ? 1 : 2;
}
bool relaxed_barriers() { return switch_on("RWKV_TIMEX_CLUSTER_RELAXED"); }
// RWKV_TIMEX_CLUSTER_STAGED = 0: the fused forward reads its stage twiddles from the one-CTA
// kernels' table instead of the staged one (the same values), at M = 32768 and 65536, where
// it was measured; the 3- and 5-CTA shapes are built with the staged table alone (no kernel
// instantiated for a switch that changes no result: less nvcc time).
template <class CS>
bool staged_twiddles() {
  if constexpr (CS::P == 3 || CS::P == 5 || !is_pow2(CS::L)) {
    return true;
  } else {
    return switch_on("RWKV_TIMEX_CLUSTER_STAGED");
  }
}

// The one-kernel forward for CS: the staged-table kernel, or where staged_twiddles says
// otherwise the one reading the one-CTA table.
template <typename scalar_t, class CS>
auto forward_kernel(bool staged) {
  if constexpr (CS::P == 3 || CS::P == 5 || !is_pow2(CS::L)) {
    return cluster_forward_kernel<scalar_t, CS, true>;
  } else {
    return staged ? cluster_forward_kernel<scalar_t, CS, true>
                  : cluster_forward_kernel<scalar_t, CS, false>;
  }
}

// The clusters of the wgrad kernel (and the one-pass backward and one-kernel forward) that
// the device keeps resident at once: the occupancy query once per kernel, device and
// scheduling policy (no call during a CUDA graph capture after the first). The three take the
// same shared memory and threads and the same register cap (ClusterShape::MIN_BLOCKS): one
// CTA per SM at L = 16384 (136 KiB), three at L = 8192 (68 KiB). The query also counts what a
// GPC's SMs fit of clusters of P (P = 3 too) under the policy (config).
template <typename scalar_t, class CS>
int resident_clusters(cudaStream_t stream) {
  const auto kernel = cluster_wgrad_kernel<scalar_t, CS>;
  static std::mutex mutex;
  static std::set<std::pair<int, int>> known;  // (2 device + balanced, resident clusters)
  int device = 0;
  FUSED_OPS_CUDA_CHECK(cudaGetDevice(&device));
  const int key = 2 * device + (balanced() ? 1 : 0);
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = known.lower_bound({key, INT_MIN});
    if (it != known.end() && it->first == key) return it->second;
  }
  FUSED_OPS_CUDA_CHECK(
      fused_ops::raise_shared_memory_limit(reinterpret_cast<const void*>(kernel), CS::Local::SMEM));
  cudaLaunchAttribute attr[2]{};
  const cudaLaunchConfig_t cfg = config(CS::P, CS::P, CS::THREADS, CS::Local::SMEM, stream, attr);
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();
    n = 1;
  }
  n = std::max(n, 1);
  std::lock_guard<std::mutex> lock(mutex);
  known.insert({key, n});
  return n;
}

// The spectra of W (w reversed in time): C rows of M complex floats, cluster layout, the first
// of `rows` rows (the rest for k's spectra where the forward keeps them: kept_rows).
template <typename scalar_t, class CS>
Tensor w_spectra(const Tensor& w, const Twiddles& tws, cudaStream_t stream, int64_t rows) {
  const int64_t C = w.size(0), T = w.size(1);
  Tensor spec = fused_ops::empty({rows, CS::M}, ScalarType::ComplexFloat, w);
  launch<CS>(cluster_spectrum_kernel<scalar_t, CS>, C, stream, w.const_data_ptr<scalar_t>(),
             static_cast<int>(T), true, as<cf32>(spec), tws.staged, tws.twc);
  return spec;
}

// The rows of the spectra that the forward keeps for the backward: W's (C) and k's (B C), in
// that order, M complex floats each (the backward then reads K instead of transforming k:
// 19% of its time at (1, 128, 49152) on the H200, for 8 M bytes a row written and read,
// benchmarks/results/issue29_runs/run42_kept_k_h200.md (c); PyTorch's FFT convolution keeps
// k's spectrum too).
int64_t kept_rows(int64_t B, int64_t C) { return C * (1 + B); }

// k's spectra in the spectra tensor of a forward that keeps them (the rows after W's, `row`
// complex floats each: M, or 2 H for the halves): where the forward writes them and where the
// backward reads them; null where spec holds W's alone.
cf32* kept_k_spectra(const Tensor& spec, int64_t B, int64_t C, int64_t row) {
  return spec.size(0) == kept_rows(B, C) ? as<cf32>(spec) + C * row : nullptr;
}

template <typename scalar_t, class CS>
Tensor forward_typed(const Tensor& w, const Tensor& k, double eps, cudaStream_t stream,
                     Tensor* keep, Tensor* keep_twiddles) {
  const int64_t B = k.size(0), C = k.size(1), T = k.size(2);
  const auto tws = twiddles<CS>(k, stream, nullptr);
  if (keep_twiddles != nullptr) *keep_twiddles = tws.buf;
  const int resident = resident_clusters<scalar_t, CS>(stream);
  const int64_t rows = keep != nullptr ? kept_rows(B, C) : C;
  if (fused_forward_for(B, C, resident)) {
    const int level = prefetch_level();
    const int ahead = level == 2 ? resident : 0;
    Tensor spec = fused_ops::empty({rows, CS::M}, ScalarType::ComplexFloat, w);
    Tensor out = fused_ops::empty({B, C, T}, k.scalar_type(), k);
    const bool staged = staged_twiddles<CS>();
    launch<CS>(forward_kernel<scalar_t, CS>(staged), C, stream, w.const_data_ptr<scalar_t>(),
               k.const_data_ptr<scalar_t>(), as<cf32>(spec), out.mutable_data_ptr<scalar_t>(),
               static_cast<int>(B), static_cast<int>(C), static_cast<int>(T),
               static_cast<float>(eps), level > 0, ahead, relaxed_barriers(),
               staged ? tws.staged : tws.tw, tws.twc, kept_k_spectra(spec, B, C, CS::M));
    if (keep != nullptr) *keep = spec;
    return out;
  }
  const Tensor spec = w_spectra<scalar_t, CS>(w, tws, stream, rows);
  Tensor out = fused_ops::empty({B, C, T}, k.scalar_type(), k);
  launch<CS>(cluster_conv_kernel<scalar_t, CS, false>, B * C, stream,
             k.const_data_ptr<scalar_t>(), as<const cf32>(spec), out.mutable_data_ptr<scalar_t>(),
             static_cast<int>(C), static_cast<int>(T), static_cast<float>(eps),
             tws.staged, tws.twc, kept_k_spectra(spec, B, C, CS::M));
  if (keep != nullptr) *keep = spec;
  return out;
}

// Clusters for the wgrad kernel: min(C, resident clusters), so that the scratch (2M complex
// floats per cluster) stays small and in L2.
template <typename scalar_t, class CS>
int wgrad_clusters(int64_t C, cudaStream_t stream) {
  return static_cast<int>(std::min<int64_t>(C, resident_clusters<scalar_t, CS>(stream)));
}

// Both gradients. The one-pass kernel (3 transforms per row instead of 4) where the channels
// fill the resident clusters (it runs a channel's b in order in one cluster); else grad_k by
// the conv kernel over all B * C rows and grad_w by the wgrad kernel.
template <typename scalar_t, class CS>
std::tuple<Tensor, Tensor> backward_typed(const Tensor& g, const Tensor& w, const Tensor& k,
                                          cudaStream_t stream, const Tensor* kept,
                                          const Tensor* kept_twiddles) {
  const int64_t B = k.size(0), C = k.size(1), T = k.size(2);
  const auto tws = twiddles<CS>(k, stream, kept_twiddles);
  const Tensor spec = kept != nullptr ? *kept : w_spectra<scalar_t, CS>(w, tws, stream, C);
  const cf32* kspec = kept_k_spectra(spec, B, C, CS::M);
  Tensor grad_k = fused_ops::empty({B, C, T}, k.scalar_type(), k);
  Tensor grad_w = fused_ops::empty({C, T}, w.scalar_type(), w);
  const int clusters = wgrad_clusters<scalar_t, CS>(C, stream);
  const Tensor scratch = bytes(static_cast<int64_t>(sizeof(cf32)) * clusters * 2 * CS::M, k);
  const auto* twp = tws.staged;
  const auto* twcp = tws.twc;
  if (C >= resident_clusters<scalar_t, CS>(stream)) {
    launch<CS>(cluster_backward_kernel<scalar_t, CS>, clusters, stream,
               g.const_data_ptr<scalar_t>(), k.const_data_ptr<scalar_t>(), as<const cf32>(spec),
               grad_k.mutable_data_ptr<scalar_t>(), grad_w.mutable_data_ptr<scalar_t>(),
               static_cast<int>(B), static_cast<int>(C), static_cast<int>(T), as<cf32>(scratch),
               twp, twcp, kspec);
    return {grad_w, grad_k};
  }
  launch<CS>(cluster_conv_kernel<scalar_t, CS, true>, B * C, stream,
             g.const_data_ptr<scalar_t>(), as<const cf32>(spec),
             grad_k.mutable_data_ptr<scalar_t>(), static_cast<int>(C), static_cast<int>(T), 0.f,
             twp, twcp, static_cast<cf32*>(nullptr));
  launch<CS>(cluster_wgrad_kernel<scalar_t, CS>, clusters, stream, g.const_data_ptr<scalar_t>(),
             k.const_data_ptr<scalar_t>(), grad_w.mutable_data_ptr<scalar_t>(),
             static_cast<int>(B), static_cast<int>(C), static_cast<int>(T), as<cf32>(scratch),
             twp, twcp, kspec);
  return {grad_w, grad_k};
}

// Rows of 2L < T <= 4L as two halves (timex_fft_cluster_halves.cuh): on 2-CTA clusters, H = 2L.
using HalvesShape = ClusterShape<Shape<kClusterL, kThreads>, 2>;
static_assert(HalvesShape::M == kHalvesH, "timex_fft_fused.h");

// RWKV_TIMEX_CLUSTER_HALVES = on | off | auto (or unset), read at every call (tests set it
// between calls): whether rows of H < T <= 2H run as two halves. auto: where the one-row
// kernels take M = 4L (T > 3L) and the halves take fewer channel waves, counted with a
// 4-CTA transform 4/3 the time of a 2-CTA one (about 17 against 22 us per transform of a row
// on the H100, from the forward at (1, 512, 32768) and (1, 256, 65536) in
// benchmarks/results/timex_cluster_forward_h100.md) and twice the transforms per row:
// 3 ceil(C / R2) < 2 ceil(C / R4). Measured both ways: benchmarks/results/timex_halves_h100.md.
template <typename scalar_t>
bool halves_for(int64_t C, int64_t T, cudaStream_t stream) {
  if (T <= kHalvesH || T > 2 * kHalvesH) return false;
  const char* v = std::getenv("RWKV_TIMEX_CLUSTER_HALVES");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) {
    if (cluster_length(T) != 4 * kClusterL) return false;
    using Four = ClusterShape<Shape<kClusterL, kThreads>, 4>;
    const int64_t r2 = resident_clusters<scalar_t, HalvesShape>(stream);
    const int64_t r4 = resident_clusters<scalar_t, Four>(stream);
    return 3 * ((C + r2 - 1) / r2) < 2 * ((C + r4 - 1) / r4);
  }
  if (std::strcmp(v, "on") == 0) return true;
  if (std::strcmp(v, "off") == 0) return false;
  fused_ops::raise<std::invalid_argument>(
      "environment variable RWKV_TIMEX_CLUSTER_HALVES must be 'on', 'off' or 'auto' (or "
      "unset), got '", std::string(v), "'");
}

// [W0, Wf] per channel (C, 2, H): timex_fft_cluster_halves.cuh; the first C of `rows` rows
// (kept_rows: then [K0, K1] per row of k, where the forward keeps them).
template <typename scalar_t>
Tensor halves_spectra(const Tensor& w, const Twiddles& tws, cudaStream_t stream, int64_t rows) {
  using CS = HalvesShape;
  const int64_t C = w.size(0), T = w.size(1);
  Tensor spec = fused_ops::empty({rows, 2, CS::M}, ScalarType::ComplexFloat, w);
  launch<CS>(halves_spectrum_kernel<scalar_t, CS>, C, stream, w.const_data_ptr<scalar_t>(),
             static_cast<int>(T), as<cf32>(spec), tws.staged, tws.twc);
  return spec;
}

// The forward as two halves: one kernel making the channel's spectra and then its rows where
// that takes no more waves (fused_forward_for, the same count: 2 + 4B transforms a channel
// against 2 + 4 per row), else the spectra and then the rows over every resident cluster.
template <typename scalar_t>
Tensor halves_forward(const Tensor& w, const Tensor& k, double eps, cudaStream_t stream,
                      Tensor* keep, Tensor* keep_twiddles) {
  using CS = HalvesShape;
  const int64_t B = k.size(0), C = k.size(1), T = k.size(2);
  const auto tws = twiddles<CS>(k, stream, nullptr);
  if (keep_twiddles != nullptr) *keep_twiddles = tws.buf;
  const int64_t resident = resident_clusters<scalar_t, CS>(stream);
  const bool spectra = fused_forward_for(B, C, resident);
  const int64_t rows = keep != nullptr ? kept_rows(B, C) : C;
  Tensor spec = spectra ? fused_ops::empty({rows, 2, CS::M}, ScalarType::ComplexFloat, w)
                        : halves_spectra<scalar_t>(w, tws, stream, rows);
  const int64_t clusters = std::min(spectra ? C : B * C, resident);
  const Tensor scratch = bytes(static_cast<int64_t>(sizeof(cf32)) * clusters * CS::M, k);
  Tensor out = fused_ops::empty({B, C, T}, k.scalar_type(), k);
  launch<CS>(halves_forward_kernel<scalar_t, CS>, clusters, stream, w.const_data_ptr<scalar_t>(),
             k.const_data_ptr<scalar_t>(), as<cf32>(spec), as<cf32>(scratch),
             out.mutable_data_ptr<scalar_t>(), static_cast<int>(B), static_cast<int>(C),
             static_cast<int>(T), static_cast<float>(eps), spectra, tws.staged, tws.twc,
             kept_k_spectra(spec, B, C, 2 * CS::M));
  if (keep != nullptr) *keep = spec;
  return out;
}

// Both gradients as two halves: the one-pass kernel over min(C, resident) clusters.
template <typename scalar_t>
std::tuple<Tensor, Tensor> halves_backward(const Tensor& g, const Tensor& w, const Tensor& k,
                                           cudaStream_t stream, const Tensor* kept,
                                           const Tensor* kept_twiddles) {
  using CS = HalvesShape;
  const int64_t B = k.size(0), C = k.size(1), T = k.size(2);
  const auto tws = twiddles<CS>(k, stream, kept_twiddles);
  const Tensor spec = kept != nullptr ? *kept : halves_spectra<scalar_t>(w, tws, stream, C);
  const cf32* kspec = kept_k_spectra(spec, B, C, 2 * CS::M);
  Tensor grad_k = fused_ops::empty({B, C, T}, k.scalar_type(), k);
  Tensor grad_w = fused_ops::empty({C, T}, w.scalar_type(), w);
  const int64_t clusters = std::min<int64_t>(C, resident_clusters<scalar_t, CS>(stream));
  const Tensor scratch = bytes(static_cast<int64_t>(sizeof(cf32)) * clusters * 4 * CS::M, k);
  launch<CS>(halves_backward_kernel<scalar_t, CS>, clusters, stream,
             g.const_data_ptr<scalar_t>(), k.const_data_ptr<scalar_t>(), as<const cf32>(spec),
             grad_k.mutable_data_ptr<scalar_t>(), grad_w.mutable_data_ptr<scalar_t>(),
             static_cast<int>(B), static_cast<int>(C), static_cast<int>(T), as<cf32>(scratch),
             tws.staged, tws.twc, kspec);
  return {grad_w, grad_k};
}

// Whether this build's cluster kernels hold sm_90 code (a build for older targets only,
// JIT-compiled from their PTX, has kernels that trap), per device.
bool kernels_have_clusters(int device) {
  static std::mutex mutex;
  static std::set<std::pair<int, bool>> known;
  std::lock_guard<std::mutex> lock(mutex);
  for (bool v : {false, true}) {
    if (known.count({device, v})) return v;
  }
  using CS = ClusterShape<Shape<kClusterL, kThreads>, 2>;
  cudaFuncAttributes attrs{};
  bool ok = cudaFuncGetAttributes(&attrs, cluster_conv_kernel<float, CS, false>) == cudaSuccess &&
            attrs.ptxVersion >= 90;
  (void)cudaGetLastError();
  int cluster_launch = 0;
  ok = ok && cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, device) ==
                 cudaSuccess &&
       cluster_launch != 0;
  (void)cudaGetLastError();
  known.insert({device, ok});
  return ok;
}

}  // namespace

bool cluster_supported(const Tensor& k) {
  const int64_t B = k.size(0), C = k.size(1), T = k.size(2);
  if (k.scalar_type() == ScalarType::Double || T < 1 || T > kClusterMaxM) return false;
  // The shape that would run (with_cluster_length: the one place that pairs M with P and L).
  int P = 1, smem = 0;
  with_cluster_length(cluster_length(T), [&](auto cs) {
    P = decltype(cs)::P;
    smem = decltype(cs)::Local::SMEM;
  });
  const cudaDeviceProp& prop = fused_ops::device_properties(k);
  return prop.major >= 9 && B * C <= INT_MAX / P &&
         static_cast<size_t>(smem) <= prop.sharedMemPerBlockOptin &&
         kernels_have_clusters(k.get_device_index());
}

bool cluster_halves(const Tensor& k, cudaStream_t stream) {
  bool halves = false;
  FUSED_OPS_DISPATCH_FLOATING(k.scalar_type(), "timex_cluster_halves", [&] {
    if constexpr (!std::is_same_v<scalar_t, double>) {
      halves = halves_for<scalar_t>(k.size(1), k.size(2), stream);
    }
  });
  return halves;
}

int64_t cluster_spectrum_length(int64_t T) {
  return T >= 1 && T <= kClusterMaxM ? cluster_length(T) : 0;
}

Tensor cluster_forward(const Tensor& w, const Tensor& k, double eps, cudaStream_t stream,
                       Tensor* keep, Tensor* keep_twiddles) {
  Tensor out;
  FUSED_OPS_DISPATCH_FLOATING(k.scalar_type(), "timex_cluster_fft_forward", [&] {
    if constexpr (!std::is_same_v<scalar_t, double>) {
      if (halves_for<scalar_t>(k.size(1), k.size(2), stream)) {
        out = halves_forward<scalar_t>(w, k, eps, stream, keep, keep_twiddles);
        return;
      }
      with_cluster_length(cluster_length(k.size(2)), [&](auto cs) {
        out = forward_typed<scalar_t, decltype(cs)>(w, k, eps, stream, keep, keep_twiddles);
      });
    }
  });
  return out;
}

std::tuple<Tensor, Tensor> cluster_backward(const Tensor& g, const Tensor& w, const Tensor& k,
                                            cudaStream_t stream, const Tensor* kept,
                                            const Tensor* kept_twiddles) {
  std::tuple<Tensor, Tensor> grads;
  FUSED_OPS_DISPATCH_FLOATING(k.scalar_type(), "timex_cluster_fft_backward", [&] {
    if constexpr (!std::is_same_v<scalar_t, double>) {
      if (halves_for<scalar_t>(k.size(1), k.size(2), stream)) {
        grads = halves_backward<scalar_t>(g, w, k, stream, kept, kept_twiddles);
        return;
      }
      with_cluster_length(cluster_length(k.size(2)), [&](auto cs) {
        grads = backward_typed<scalar_t, decltype(cs)>(g, w, k, stream, kept, kept_twiddles);
      });
    }
  });
  return grads;
}

}  // namespace rwkv::fft
