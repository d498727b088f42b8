"""The thread-block-cluster FFT kernels of csrc/rwkv/timex_fft_cluster_kernels.cuh (T past
16384 on the GPU), run on the CPU (tests/cuda_emulation.h: a thread per CUDA thread, the CTAs
of a cluster at once, the cluster barrier and distributed shared memory emulated) against a
float64 direct reference, so that the four-step split, the cross-CTA frequency pairs and the
combine fail here, GPU or not."""

from conftest import emulation_test, run_emulator

EMULATOR = r"""
#include <cstdio>

#include "cuda_emulation.h"
#include "timex_reference.h"

#define TIMEX_EMULATE
#define TIMEX_FFT_DEVICE inline
#define TIMEX_FFT_KERNEL(threads) void
#define TIMEX_FFT_SHARED(name) unsigned char* name = emu_smem
#define TIMEX_FFT_SYNC() emu_syncthreads()
#include "rwkv/timex_fft_cluster_forward.cuh"

using namespace rwkv::fft;

std::mt19937 rng(4321);
int failures = 0;
std::vector<cf32> tw(kTwiddles);

// B, C, T with T <= M = P L; eps; offset: elements by which k, g, out and grad_k are shifted
// (misaligned rows); MAXT: threads per CTA at most (fewer than the GPU's kThreads give each
// thread more butterflies and pairs); clusters: wgrad's clusters (fewer than C: a cluster
// does several channels).
template <typename S, int L, int P, int MAXT>
void check(int B, int C, int T, double eps, int offset, int clusters, double tol) {
  using CS = ClusterShape<Shape<L, MAXT>, P>;
  constexpr int M = CS::M;
  if (T > M) {
    std::printf("FAIL: T=%d > M=%d\n", T, M);
    ++failures;
    return;
  }
  auto in = timex_inputs<S>(rng, B, C, T, eps, offset, 2);
  auto &w = in.w, &k = in.k, &g = in.g;
  const S *kp = in.kp, *gp = in.gp;
  const S guard = static_cast<S>(777.0);
  std::vector<S> out(k.size(), guard), gk(k.size(), guard), gw(size_t(C) * T, guard),
      gw2(gw.size(), guard);
  std::vector<cf32> spec(size_t(C) * M), scratch(size_t(clusters) * 2 * M), twc(2 * M),
      tw_own(kTwiddles), staged(std::max(1, staged_size<typename CS::Local>()));
  const int threads = CS::THREADS, smem = CS::Local::SMEM;
  launch(1, 8, 0,
         [&] { cluster_twiddle_kernel<CS>(twc.data(), tw_own.data(), staged.data()); });
  if (std::memcmp(tw_own.data(), tw.data(), tw.size() * sizeof(cf32)) != 0) {
    std::printf("FAIL: cluster_twiddle_kernel's tw differs from twiddle_kernel's\n");
    ++failures;
  }
  launch_cluster(C * P, P, threads, smem, [&] {
    cluster_spectrum_kernel<S, CS>(w.data(), T, true, spec.data(), staged.data(), twc.data());
  });
  // The forward also writing k's spectra (kspec, as the eager training path keeps them).
  std::vector<cf32> kspec(size_t(B) * C * M, cf32{777.f, 777.f});
  launch_cluster(B * C * P, P, threads, smem, [&] {
    cluster_conv_kernel<S, CS, false>(kp, spec.data(), out.data() + offset, C, T, float(eps),
                                      staged.data(), twc.data(), kspec.data());
  });
  launch_cluster(B * C * P, P, threads, smem, [&] {
    cluster_conv_kernel<S, CS, true>(gp, spec.data(), gk.data() + offset, C, T, 0.f,
                                     staged.data(), twc.data(), nullptr);
  });
  for (auto* dst : {&gw, &gw2}) {
    launch_cluster(clusters * P, P, threads, smem, [&] {
      cluster_wgrad_kernel<S, CS>(gp, kp, dst->data(), B, C, T, scratch.data(), staged.data(),
                                  twc.data(), nullptr);
    });
  }
  // Both gradients in one kernel: the same arithmetic as conv (correlate) + wgrad, so the
  // same bits; and both kernels reading k's spectra instead of transforming k (kspec): the
  // same values, so the same bits again.
  std::vector<S> gk3(k.size(), guard), gw3(gw.size(), guard);
  launch_cluster(clusters * P, P, threads, smem, [&] {
    cluster_backward_kernel<S, CS>(gp, kp, spec.data(), gk3.data() + offset, gw3.data(), B, C,
                                   T, scratch.data(), staged.data(), twc.data(), nullptr);
  });
  bool fused_same = std::memcmp(gk3.data(), gk.data(), gk.size() * sizeof(S)) == 0 &&
                    std::memcmp(gw3.data(), gw.data(), gw.size() * sizeof(S)) == 0;
  std::fill(gk3.begin(), gk3.end(), guard);
  std::fill(gw3.begin(), gw3.end(), guard);
  launch_cluster(clusters * P, P, threads, smem, [&] {
    cluster_backward_kernel<S, CS>(gp, kp, spec.data(), gk3.data() + offset, gw3.data(), B, C,
                                   T, scratch.data(), staged.data(), twc.data(), kspec.data());
  });
  const bool kept_same = std::memcmp(gk3.data(), gk.data(), gk.size() * sizeof(S)) == 0 &&
                         std::memcmp(gw3.data(), gw.data(), gw.size() * sizeof(S)) == 0;
  std::fill(gw3.begin(), gw3.end(), guard);
  launch_cluster(clusters * P, P, threads, smem, [&] {
    cluster_wgrad_kernel<S, CS>(gp, kp, gw3.data(), B, C, T, scratch.data(), staged.data(),
                                twc.data(), kspec.data());
  });
  const bool kept_wgrad_same = std::memcmp(gw3.data(), gw.data(), gw.size() * sizeof(S)) == 0;
  // The forward as one kernel (W^ and the convolution by one cluster; `clusters` clusters, so
  // that a cluster does several channels where clusters < C): the same bits as spectrum +
  // conv, out and the spectra it keeps.
  std::vector<S> out4(k.size(), guard);
  std::vector<cf32> spec4(spec.size(), cf32{777.f, 777.f}), kspec4(kspec.size(), spec4[0]);
  launch_cluster(clusters * P, P, threads, smem, [&] {
    cluster_forward_kernel<S, CS>(w.data(), kp, spec4.data(), out4.data() + offset, B, C, T,
                                  float(eps), true, 1, true, staged.data(), twc.data(),
                                  kspec4.data());
  });
  bool forward_same = std::memcmp(out4.data(), out.data(), out.size() * sizeof(S)) == 0 &&
                      std::memcmp(spec4.data(), spec.data(), spec.size() * 8) == 0 &&
                      std::memcmp(kspec4.data(), kspec.data(), kspec.size() * 8) == 0;
  // The same with the stage twiddles from the one-CTA table instead of the staged one: the
  // same values, so the same bits (local lengths 2^k: the table has no others).
  if constexpr (is_pow2(L)) {
    std::fill(out4.begin(), out4.end(), guard);
    launch_cluster(clusters * P, P, threads, smem, [&] {
      cluster_forward_kernel<S, CS, false>(w.data(), kp, spec4.data(), out4.data() + offset, B,
                                           C, T, float(eps), false, 0, false, tw.data(),
                                           twc.data(), nullptr);
    });
    forward_same &= std::memcmp(out4.data(), out.data(), out.size() * sizeof(S)) == 0;
  }
  const bool same = std::memcmp(gw.data(), gw2.data(), gw.size() * sizeof(S)) == 0;
  const TimexCheck e = timex_check(in, out, gk, gw, offset, T, guard);
  const bool ok = e.out < tol && e.gk < tol && e.gw < tol && e.guards && same && fused_same &&
                  kept_same && kept_wgrad_same && forward_same;
  failures += !ok;
  std::printf("%s %zu-byte B=%d C=%d T=%d L=%d P=%d M=%d threads=%d offset=%d clusters=%d: out "
              "%.2e grad_k %.2e grad_w %.2e%s%s%s%s%s\n",
              ok ? "ok  " : "FAIL", sizeof(S), B, C, T, L, P, M, threads, offset, clusters, e.out,
              e.gk, e.gw, e.guards ? "" : " (wrote outside the output)",
              same ? "" : " (grad_w differs)",
              fused_same ? "" : " (the one-pass backward differs)",
              kept_same && kept_wgrad_same ? "" : " (the backward from k's spectra differs)",
              forward_same ? "" : " (the one-kernel forward differs)");
  std::fflush(stdout);
}

int main() {
  launch(1, 8, 0, [&] { twiddle_kernel(tw.data()); });
  // P = 1, 2, 4, 8 with small L (every frequency pair case: k = 0, M/2, partners in the own
  // CTA and in others), T = 1, odd, prime, T = M; the GPU's shapes (L = 16384 with P = 2 and
  // 4, here with fewer threads); half types; eps != 0; misaligned rows; several channels per
  // wgrad cluster.
  check<float, 16, 1, kThreads>(2, 3, 13, 0.5, 0, 2, 1e-6);
  check<float, 16, 2, kThreads>(1, 1, 1, 0.5, 0, 1, 1e-6);
  check<float, 16, 2, kThreads>(3, 2, 32, 0.5, 1, 1, 1e-6);
  check<float, 16, 2, 4>(2, 3, 23, -0.25, 0, 2, 1e-6);
  check<float, 16, 4, kThreads>(3, 3, 61, 0.5, 1, 2, 1e-6);
  check<float, 32, 4, 8>(1, 3, 128, 0.5, 0, 3, 1e-6);
  check<float, 64, 8, kThreads>(2, 3, 509, 0.1, 1, 1, 1e-6);
  check<float, 1024, 2, 64>(2, 3, 1999, 0.1, 0, 2, 1e-6);
  check<float, 1024, 4, 64>(1, 2, 4096, 0.1, 1, 1, 1e-6);
  check<float, 16384, 2, 64>(1, 1, 20011, 0.1, 1, 1, 1e-6);
  check<float, 16384, 4, 64>(1, 1, 65536, 0.1, 0, 1, 1e-6);
  // P = 3 (M = 3 L, no power of two): the W_3 turns of the load and combine, pairs across
  // CTAs 1 and 2, k = M/2 in CTA 0; the GPU's shapes (L = 8192 and 16384) at odd lengths.
  check<float, 16, 3, kThreads>(2, 3, 48, 0.5, 1, 2, 1e-6);
  check<float, 32, 3, 4>(3, 2, 61, -0.25, 0, 1, 1e-6);
  check<float, 8192, 3, 64>(1, 2, 20011, 0.1, 1, 1, 1e-6);
  check<float, 16384, 3, 64>(1, 1, 44101, 0.1, 0, 1, 1e-6);
  // P = 5 (M = 5 L): the W_5 turns, pairs across CTAs 1 and 4, 2 and 3; the GPU's shape
  // (L = 8192) just past 32768 and at an odd length.
  check<float, 16, 5, kThreads>(2, 3, 80, 0.5, 1, 2, 1e-6);
  check<float, 32, 5, 4>(3, 2, 149, -0.25, 0, 1, 1e-6);
  check<float, 8192, 5, 64>(1, 2, 40001, 0.1, 1, 1, 1e-6);
  check<float, 8192, 5, 64>(2, 1, 32769, 0.1, 0, 1, 1e-6);
  // Local lengths 3 2^k and 5 2^k (the one-CTA kernels' odd last stage; the combine's n mod L):
  // P = 1 to 4, the GPU's 4 x 12288 at M = 49152, and its 4 x 10240 at M = 40960 just past
  // 32768 and at T = 40000 with B = 2 (the wgrad sum).
  check<float, 48, 1, 8>(1, 2, 48, 0.5, 0, 1, 1e-6);
  check<float, 80, 2, kThreads>(2, 3, 151, 0.5, 1, 2, 1e-6);
  check<float, 48, 4, 8>(1, 2, 190, -0.25, 0, 1, 1e-6);
  check<float, 80, 3, 8>(2, 2, 233, 0.5, 1, 1, 1e-6);
  check<float, 12288, 4, 64>(1, 1, 44101, 0.1, 1, 1, 1e-6);
  check<float, 10240, 4, 64>(1, 1, 32769, 0.1, 1, 1, 1e-6);
  check<float, 10240, 4, 64>(2, 1, 40000, 0.1, 0, 1, 1e-6);
  check<c10::BFloat16, 160, 4, 8>(2, 3, 600, 0.3, 1, 2, 8e-3);
  check<c10::BFloat16, 64, 5, 8>(2, 3, 311, 0.3, 1, 2, 8e-3);
  check<c10::BFloat16, 64, 3, 8>(2, 3, 191, 0.3, 1, 2, 8e-3);
  check<c10::Half, 64, 4, kThreads>(3, 3, 200, 0.3, 1, 2, 1e-3);
  check<c10::BFloat16, 256, 2, 16>(1, 3, 511, 0.3, 0, 2, 8e-3);
  std::printf("%d failures\n", failures);
  return failures != 0;
}
"""


@emulation_test
def test_cluster_fft_kernels_emulated_on_cpu(tmp_path):
    """Compiles csrc/rwkv/timex_fft_cluster_kernels.cuh as host C++ and checks spectrum, conv
    (both directions) and wgrad for clusters of 1 to 8 CTAs (3 and 5 too: M = 3 L, 5 L), up to
    M = 65536, against float64 direct sums; grad_w twice, to the bit; the one-pass backward to the
    bit of the two, and both (one-pass and wgrad) reading the forward's spectra of k to the bit
    too; the one-kernel forward (timex_fft_cluster_forward.cuh) to the bit of spectrum + conv,
    out and the spectra of W and k it writes, with the staged stage-twiddle table and with the
    one-CTA table; the one-CTA twiddle table of the cluster kernels' launch to the bit of
    twiddle_kernel's."""
    run_emulator(EMULATOR, tmp_path)
