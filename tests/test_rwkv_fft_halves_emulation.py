"""The two-halves cluster kernels of csrc/rwkv/timex_fft_cluster_halves.cuh (rows of
H < T <= 2H as two half-length FFT convolutions on small clusters), run on the CPU
(tests/cuda_emulation.h) against a float64 direct reference: the shift by H in the frequency
domain, the wrap-free windows of each product and the reversed grad_w halves fail here, GPU
or not."""

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
#include "rwkv/timex_fft_cluster_halves.cuh"

using namespace rwkv::fft;

std::mt19937 rng(2468);
int failures = 0;

// B, C, T with H < T <= 2H (H = P L); eps; offset: elements by which k, g, out and grad_k
// are shifted (misaligned rows); MAXT: threads per CTA at most; clusters: clusters of the
// forward and backward launches (fewer than C or B C: a cluster does several).
template <typename S, int L, int P, int MAXT>
void check(int B, int C, int T, double eps, int offset, int clusters, double tol) {
  using CS = ClusterShape<Shape<L, MAXT>, P>;
  constexpr int H = CS::M;
  if (T <= H || T > 2 * H) {
    std::printf("FAIL: T=%d outside (%d, %d]\n", T, H, 2 * H);
    ++failures;
    return;
  }
  auto in = timex_inputs<S>(rng, B, C, T, eps, offset, 2);
  auto &w = in.w, &k = in.k;
  const S *kp = in.kp, *gp = in.gp;
  const S guard = static_cast<S>(777.0);
  std::vector<S> out(k.size(), guard), out2(k.size(), guard), gk(k.size(), guard),
      gk2(k.size(), guard), gw(size_t(C) * T, guard), gw2(gw.size(), guard);
  std::vector<cf32> spec(size_t(C) * 2 * H, cf32{777.f, 777.f}), spec2(spec.size()),
      scratch(size_t(clusters) * 4 * H), twc(2 * H), tw(kTwiddles),
      staged(std::max(1, staged_size<typename CS::Local>()));
  const int threads = CS::THREADS, smem = CS::Local::SMEM;
  launch(1, 8, 0, [&] { cluster_twiddle_kernel<CS>(twc.data(), tw.data(), staged.data()); });
  // The forward with the spectra made per channel, and split: the spectrum kernel, then rows;
  // the second also writing k's halves' spectra [K0, K1] per row (kspec, as the eager
  // training path keeps them).
  std::vector<cf32> kspec(size_t(B) * C * 2 * H, cf32{777.f, 777.f});
  launch_cluster(clusters * P, P, threads, smem, [&] {
    halves_forward_kernel<S, CS>(w.data(), kp, spec.data(), scratch.data(), out.data() + offset,
                                 B, C, T, float(eps), true, staged.data(), twc.data(), nullptr);
  });
  launch_cluster(C * P, P, threads, smem, [&] {
    halves_spectrum_kernel<S, CS>(w.data(), T, spec2.data(), staged.data(), twc.data());
  });
  launch_cluster(clusters * P, P, threads, smem, [&] {
    halves_forward_kernel<S, CS>(w.data(), kp, spec2.data(), scratch.data(),
                                 out2.data() + offset, B, C, T, float(eps), false,
                                 staged.data(), twc.data(), kspec.data());
  });
  bool forward_same = std::memcmp(out.data(), out2.data(), out.size() * sizeof(S)) == 0 &&
                      std::memcmp(spec.data(), spec2.data(), spec.size() * 8) == 0;
  // The per-channel forward writing kspec too: the same bits.
  std::vector<cf32> kspec2(kspec.size(), cf32{777.f, 777.f});
  std::fill(out2.begin(), out2.end(), guard);
  launch_cluster(clusters * P, P, threads, smem, [&] {
    halves_forward_kernel<S, CS>(w.data(), kp, spec2.data(), scratch.data(),
                                 out2.data() + offset, B, C, T, float(eps), true,
                                 staged.data(), twc.data(), kspec2.data());
  });
  forward_same &= std::memcmp(out.data(), out2.data(), out.size() * sizeof(S)) == 0 &&
                  std::memcmp(kspec.data(), kspec2.data(), kspec.size() * 8) == 0;
  for (auto [dk, dw] : {std::pair{&gk, &gw}, std::pair{&gk2, &gw2}}) {
    launch_cluster(clusters * P, P, threads, smem, [&] {
      halves_backward_kernel<S, CS>(gp, kp, spec.data(), dk->data() + offset, dw->data(), B, C,
                                    T, scratch.data(), staged.data(), twc.data(), nullptr);
    });
  }
  bool backward_same = std::memcmp(gk.data(), gk2.data(), gk.size() * sizeof(S)) == 0 &&
                       std::memcmp(gw.data(), gw2.data(), gw.size() * sizeof(S)) == 0;
  // The backward reading [K0, K1] instead of transforming k's halves: the same bits.
  std::fill(gk2.begin(), gk2.end(), guard);
  std::fill(gw2.begin(), gw2.end(), guard);
  launch_cluster(clusters * P, P, threads, smem, [&] {
    halves_backward_kernel<S, CS>(gp, kp, spec.data(), gk2.data() + offset, gw2.data(), B, C, T,
                                  scratch.data(), staged.data(), twc.data(), kspec.data());
  });
  const bool kept_same = std::memcmp(gk.data(), gk2.data(), gk.size() * sizeof(S)) == 0 &&
                         std::memcmp(gw.data(), gw2.data(), gw.size() * sizeof(S)) == 0;
  const TimexCheck e = timex_check(in, out, gk, gw, offset, T, guard);
  const bool ok = e.out < tol && e.gk < tol && e.gw < tol && e.guards && forward_same &&
                  backward_same && kept_same;
  failures += !ok;
  std::printf("%s %zu-byte B=%d C=%d T=%d L=%d P=%d H=%d threads=%d offset=%d clusters=%d: out "
              "%.2e grad_k %.2e grad_w %.2e%s%s%s%s\n",
              ok ? "ok  " : "FAIL", sizeof(S), B, C, T, L, P, H, threads, offset, clusters, e.out,
              e.gk, e.gw, e.guards ? "" : " (wrote outside the output)",
              forward_same ? "" : " (the split forward differs)",
              backward_same ? "" : " (the backward is not deterministic)",
              kept_same ? "" : " (the backward from k's spectra differs)");
  std::fflush(stdout);
}

int main() {
  // T just past H, odd, prime, T = 2H; P = 1, 2 and 4 with small L (every frequency pair
  // case); B > 1 (grad_w's sum over b); clusters fewer than C; the GPU's shape (L = 16384,
  // P = 2) with fewer threads; half types; eps != 0; misaligned rows.
  check<float, 16, 1, kThreads>(2, 3, 17, 0.5, 0, 2, 1e-6);
  check<float, 16, 2, kThreads>(1, 1, 64, 0.5, 0, 1, 1e-6);
  check<float, 16, 2, 4>(3, 2, 37, -0.25, 1, 1, 1e-6);
  check<float, 32, 2, 8>(2, 3, 127, 0.5, 1, 2, 1e-6);
  check<float, 16, 4, kThreads>(2, 3, 65, 0.5, 0, 3, 1e-6);
  check<float, 1024, 2, 64>(1, 2, 3001, 0.1, 1, 1, 1e-6);
  check<float, 16384, 2, 64>(1, 1, 65536, 0.1, 0, 1, 1e-6);
  check<float, 16384, 2, 64>(1, 1, 49999, 0.1, 1, 1, 1e-6);
  check<c10::BFloat16, 64, 2, 16>(2, 3, 255, 0.3, 1, 2, 8e-3);
  check<c10::Half, 64, 2, kThreads>(3, 2, 200, 0.3, 0, 1, 1e-3);
  std::printf("%d failures\n", failures);
  return failures != 0;
}
"""


@emulation_test
def test_cluster_halves_kernels_emulated_on_cpu(tmp_path):
    """Compiles csrc/rwkv/timex_fft_cluster_halves.cuh as host C++ and checks the forward
    (spectra per channel, and split: the spectrum kernel then rows), both gradients of the
    one-pass backward, for clusters of 1, 2 and 4 CTAs up to H = 32768, T from H + 1 to 2H,
    against float64 direct sums; the split forward to the bit of the per-channel one (out, W's
    spectra and the spectra of k's halves that both write for the backward), the backward
    twice to the bit, and from k's kept spectra to the bit of its own transforms."""
    run_emulator(EMULATOR, tmp_path)
