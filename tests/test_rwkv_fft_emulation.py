"""The on-chip FFT kernels of csrc/rwkv/timex_fft_kernels.cuh and timex_fft_backward.cuh, run on
the CPU
(tests/cuda_emulation.h: a thread per CUDA thread, a barrier per __syncthreads) against a
float64 direct reference, so that stage, split/merge and load/store index errors fail here,
GPU or not. The kernels read the fused twiddle table (stage and split twiddles in warp
order), as the GPU's launchers run them; where a check asks, they also run on the plain
table and must give the same bits."""

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
#include "rwkv/timex_fft_backward.cuh"

using namespace rwkv::fft;

std::mt19937 rng(1234);
int failures = 0;
std::vector<cf32> tw(kTwiddles);

// B, C, T (M >= T: fft_length(T), or the 3 2^k or power of two that it takes with
// RWKV_TIMEX_FUSED_RADIX5=0 or both switches 0, given as a template argument so that the program
// instantiates only the lengths it runs); eps; offset: elements by which k, g, out and grad_k are
// shifted (misaligned rows); MAXT: the largest CTA (the GPU's is kThreads; fewer give each thread
// more butterflies); ctas: the backward kernel's CTAs at splits = 1 (fewer than C: a CTA does
// several channels). Where B > 1 the backward also runs split over b (splits = B, or B - 1 from B =
// 3 on; one CTA per item) and in row ranges (B C, 3 C / 2 and 2 C / 3 CTAs), a channel's partial
// sums added by the CTA that leaves the last: grad_k the same bits, grad_w within tol. The
// backward runs again from k's spectra as the conv kernel kept them (kspec), whole and split:
// the same bits as from k. PLAIN: also run every kernel on the plain table tw (and the conv
// kernel in row order, not channel-major); out, grad_k and grad_w must be the same bits. E: the
// values per thread that Shape asks for (8: the GPU's wide CTAs, stages of radix 8).
template <typename S, int M, int MAXT, bool PLAIN = false, int E = 16>
void check(int B, int C, int T, double eps, int offset, int ctas, double tol) {
  if (fft_length(T) != M && fft_length(T, true, false) != M && fft_length(T, false, false) != M) {
    std::printf("FAIL: T=%d does not take M=%d\n", T, M);
    ++failures;
    return;
  }
  auto in = timex_inputs<S>(rng, B, C, T, eps, offset, 2);
  auto &w = in.w, &k = in.k, &g = in.g;
  const S *kp = in.kp, *gp = in.gp;
  const S guard = static_cast<S>(777.0);
  std::vector<S> out(k.size(), guard), gk(k.size(), guard), gw(size_t(C) * T, guard),
      gw2(gw.size(), guard);
  std::vector<cf32> spec(size_t(C) * M), gs(size_t(std::max(ctas, B * C)) * M),
      acc(size_t(std::max(ctas, 2 * B * C)) * M);
  std::vector<S> gk_split(k.size(), guard), gw_split(gw.size(), guard);
  std::vector<S> gk_kept(k.size(), guard), gw_kept(gw.size(), guard),
      gk_split_kept(k.size(), guard), gw_split_kept(gw.size(), guard);
  std::vector<cf32> kspec(size_t(B) * C * M);
  using Sh = Shape<M, MAXT, E>;
  std::vector<cf32> fused(fused_table_size<Sh>());
  launch(1, 8, 0, [&] { fused_twiddle_kernel<Sh>(fused.data()); });
  // Its split part: the plain table's entries k kMaxM / M, to the bit (M a power of two).
  bool plain_same = std::memcmp(fused.data() + staged_size<Sh>(), tw.data(), sizeof(cf32)) == 0;
  for (int i = 1; is_pow2(M) && i <= M / 2; ++i) {
    plain_same &= std::memcmp(&fused[staged_size<Sh>() + i], &tw[i * (kMaxM / M)],
                              sizeof(cf32)) == 0;
  }
  // The kernels on table t (STAGED: the fused table).
  const auto run = [&](auto staged, const cf32* t, std::vector<S>& out_, std::vector<S>& gk_,
                       std::vector<S>& gw_, std::vector<S>& gw2_) {
    constexpr bool kStaged = decltype(staged)::value;
    launch(C, Sh::THREADS, Sh::SMEM,
           [&] { spectrum_kernel<S, Sh, kStaged>(w.data(), T, true, spec.data(), t); });
    launch(B * C, Sh::THREADS, Sh::SMEM, [&] {
      conv_kernel<S, Sh, kStaged>(kp, spec.data(), out_.data() + offset, C, T, float(eps), t,
                                  kspec.data(), kStaged, true, 0);
    });
    for (auto* dst : {&gw_, &gw2_}) {
      launch(ctas, Sh::THREADS, Sh::SMEM, [&] {
        backward_kernel<S, Sh, kStaged>(gp, kp, spec.data(), gk_.data() + offset, dst->data(),
                                        B, C, T, 1, 0, nullptr, gs.data(), acc.data(), t,
                                        nullptr, true);
      });
    }
  };
  // splits ranges of b (B - 1 from B = 3 on: items of one and of two rows), one CTA per (c, s)
  // item; the last CTA of a channel (an arrival count per channel) adds its partial sums.
  const int splits = B > 2 ? B - 1 : B;
  std::vector<int> counts(C);
  const auto run_split = [&](const cf32* ks, std::vector<S>& gk_, std::vector<S>& gw_) {
    std::fill(counts.begin(), counts.end(), 0);
    launch(splits * C, Sh::THREADS, Sh::SMEM, [&] {
      backward_kernel<S, Sh, true>(gp, kp, spec.data(), gk_.data() + offset, gw_.data(), B, C, T,
                                   splits, 0, counts.data(), gs.data(), acc.data(), fused.data(),
                                   ks, true);
    });
  };
  // The row-range plan: the B C rows in channel-major order over `ranges` CTAs (fewer rows
  // than a channel's B each, and more: ranges that start, end and lie inside channels); the
  // channels split between ranges summed by their last CTA.
  const auto run_rows = [&](int ranges, const cf32* ks, std::vector<S>& gk_,
                            std::vector<S>& gw_) {
    std::fill(counts.begin(), counts.end(), 0);
    launch(ranges, Sh::THREADS, Sh::SMEM, [&] {
      backward_kernel<S, Sh, true>(gp, kp, spec.data(), gk_.data() + offset, gw_.data(), B, C, T,
                                   1, ranges, counts.data(), gs.data(), acc.data(), fused.data(),
                                   ks, true);
    });
  };
  run(std::true_type{}, fused.data(), out, gk, gw, gw2);
  launch(ctas, Sh::THREADS, Sh::SMEM, [&] {
    backward_kernel<S, Sh, true>(gp, kp, spec.data(), gk_kept.data() + offset, gw_kept.data(), B,
                                 C, T, 1, 0, nullptr, gs.data(), acc.data(), fused.data(),
                                 kspec.data(), true);
  });
  const auto bits = [](const std::vector<S>& a, const std::vector<S>& b) {
    return std::memcmp(a.data(), b.data(), a.size() * sizeof(S)) == 0;
  };
  bool kept_same = bits(gk, gk_kept) && bits(gw, gw_kept);
  // The running sums in shared memory (ACC_SMEM, M <= kAccSmemMaxM): the same bits as in
  // scratch, whole channels (K kept and made), items and ranges (K kept).
  bool smem_same = true;
  if constexpr (M <= kAccSmemMaxM) {
    const auto run_sm = [&](int grid, int sp, int ranges, const cf32* ks, std::vector<S>& gk_,
                            std::vector<S>& gw_) {
      std::fill(counts.begin(), counts.end(), 0);
      launch(grid, Sh::THREADS, acc_smem_bytes(M), [&] {
        backward_kernel<S, Sh, true, true>(gp, kp, spec.data(), gk_.data() + offset, gw_.data(),
                                           B, C, T, sp, ranges, counts.data(), gs.data(),
                                           acc.data(), fused.data(), ks, true);
      });
    };
    std::vector<S> gk_s(k.size(), guard), gw_s(gw.size(), guard);
    run_sm(ctas, 1, 0, kspec.data(), gk_s, gw_s);
    smem_same &= bits(gk_s, gk_kept) && bits(gw_s, gw_kept);
    run_sm(ctas, 1, 0, nullptr, gk_s, gw_s);
    smem_same &= bits(gk_s, gk) && bits(gw_s, gw);
    if (B > 1) {
      std::vector<S> gk_i(k.size(), guard), gw_i(gw.size(), guard);
      run_split(kspec.data(), gk_i, gw_i);
      run_sm(splits * C, splits, 0, kspec.data(), gk_s, gw_s);
      smem_same &= bits(gk_s, gk_i) && bits(gw_s, gw_i);
      const int ranges = std::max(1, 2 * C / 3);
      run_rows(ranges, kspec.data(), gk_i, gw_i);
      run_sm(ranges, 1, ranges, kspec.data(), gk_s, gw_s);
      smem_same &= bits(gk_s, gk_i) && bits(gw_s, gw_i);
    }
  }
  double e_split = 0;
  bool split_same = true;
  if (B > 1) {
    run_split(nullptr, gk_split, gw_split);
    run_split(kspec.data(), gk_split_kept, gw_split_kept);
    kept_same &= bits(gk_split, gk_split_kept) && bits(gw_split, gw_split_kept);
    split_same = std::memcmp(gk.data(), gk_split.data(), gk.size() * sizeof(S)) == 0;
    std::vector<double> d(gw.size());
    for (size_t i = 0; i < gw.size(); ++i) d[i] = as_double(gw_split[i]);
    e_split = row_err(d, in.gw_ref, T);
    // Ranges of 1 row, about 2/3 of a channel, and 3/2 of one (B C rows over that many CTAs).
    for (int ranges : {B * C, std::max(1, 3 * C / 2), std::max(1, 2 * C / 3)}) {
      std::vector<S> gk_r(k.size(), guard), gw_r(gw.size(), guard), gk_rk(k.size(), guard),
          gw_rk(gw.size(), guard);
      run_rows(ranges, nullptr, gk_r, gw_r);
      run_rows(ranges, kspec.data(), gk_rk, gw_rk);
      kept_same &= bits(gk_r, gk_rk) && bits(gw_r, gw_rk);
      split_same &= bits(gk, gk_r);
      for (size_t i = 0; i < gw.size(); ++i) d[i] = as_double(gw_r[i]);
      e_split = std::max(e_split, row_err(d, in.gw_ref, T));
    }
  }
  if constexpr (PLAIN) {
    std::vector<S> out_p(out.size(), guard), gk_p(gk.size(), guard), gw_p(gw.size(), guard),
        gw2_p(gw.size(), guard);
    run(std::false_type{}, tw.data(), out_p, gk_p, gw_p, gw2_p);
    const auto same_bits = [](const std::vector<S>& a, const std::vector<S>& b) {
      return std::memcmp(a.data(), b.data(), a.size() * sizeof(S)) == 0;
    };
    plain_same &= same_bits(out, out_p) && same_bits(gk, gk_p) && same_bits(gw, gw_p);
  }
  const bool same = std::memcmp(gw.data(), gw2.data(), gw.size() * sizeof(S)) == 0;
  const TimexCheck e = timex_check(in, out, gk, gw, offset, T, guard);
  const bool ok = e.out < tol && e.gk < tol && e.gw < tol && e_split < tol && e.guards &&
                  same && plain_same && split_same && kept_same && smem_same;
  failures += !ok;
  std::printf("%s %zu-byte B=%d C=%d T=%d M=%d threads=%d offset=%d ctas=%d: out %.2e grad_k "
              "%.2e grad_w %.2e (split over b: %.2e)%s%s%s%s%s%s%s\n",
              ok ? "ok  " : "FAIL", sizeof(S), B, C, T, M, Sh::THREADS, offset, ctas, e.out, e.gk,
              e.gw, e_split, PLAIN ? " (plain table too)" : "",
              e.guards ? "" : " (wrote outside the output)", same ? "" : " (grad_w differs)",
              plain_same ? "" : " (the plain table's results differ)",
              split_same ? "" : " (grad_k differs with splits)",
              kept_same ? "" : " (the backward from kept k spectra differs)",
              smem_same ? "" : " (the sums in shared memory differ)");
  std::fflush(stdout);
}

int main() {
  launch(1, 8, 0, [&] { twiddle_kernel(tw.data()); });
  // Every power-of-two M from 1 (T = 1) to 16384, the GPU's shapes (MAXT = kThreads: 16 values per
  // thread, radix 16 and a last stage of radix 2, 4 or 8 where log2 M % 4 != 0) and smaller CTAs
  // (several butterflies per thread and stage), odd B and C, eps != 0, misaligned rows; the plain
  // table too (PLAIN) at every last-stage radix, with 1 and several butterflies per thread and
  // stage, in each type.
  check<float, 1, kThreads>(1, 1, 1, 0.5, 0, 1, 1e-6);
  check<float, 2, kThreads>(3, 1, 2, 0.5, 0, 1, 1e-6);
  check<float, 4, kThreads>(1, 3, 3, -0.25, 1, 2, 1e-6);
  check<float, 8, kThreads>(2, 3, 5, 0.5, 0, 3, 1e-6);
  check<float, 16, kThreads>(3, 1, 9, 0.5, 1, 1, 1e-6);
  check<float, 32, kThreads, true>(1, 3, 17, 0.5, 0, 2, 1e-6);
  check<float, 64, kThreads>(3, 3, 63, 0.5, 0, 2, 1e-6);
  check<float, 128, kThreads, true>(3, 5, 65, 1.0, 1, 3, 1e-6);
  check<float, 256, kThreads>(2, 1, 200, 0.5, 0, 1, 1e-6);
  check<float, 512, 4, true>(1, 3, 300, 0.5, 1, 1, 1e-6);
  check<float, 1024, kThreads>(3, 3, 1000, 0.1, 0, 2, 1e-6);
  check<float, 1024, 8, true>(1, 3, 1000, 0.1, 1, 3, 1e-6);
  check<float, 2048, kThreads, true>(1, 3, 2000, 0.1, 0, 2, 1e-6);
  check<float, 4096, 16, true>(2, 1, 4096, 0.1, 0, 1, 1e-6);
  check<float, 8192, kThreads, true>(1, 3, 4097, 0.1, 1, 1, 1e-6);
  check<float, 16384, kThreads, true>(1, 1, 16384, 0.1, 0, 1, 1e-6);
  check<float, 16384, 32>(1, 1, 9001, 0.1, 1, 1, 1e-6);
  check<c10::Half, 128, kThreads>(3, 3, 65, 0.3, 1, 2, 1e-3);
  check<c10::Half, 1024, kThreads, true>(1, 3, 1000, 0.3, 0, 3, 1e-3);
  check<c10::Half, 8192, 64>(1, 1, 4097, 0.3, 0, 1, 1e-3);
  check<c10::BFloat16, 64, kThreads>(3, 1, 63, 0.3, 0, 1, 8e-3);
  check<c10::BFloat16, 2048, 32, true>(1, 3, 2048, 0.3, 1, 2, 8e-3);
  // M = 3 2^k and 5 2^k (fft_length's, from kMinOddM = 1536 to 12288 and 10240): every last-stage
  // form (radix 3 or 5 after 16 or 8; radix 6, 10, 12 or 20 where the power-of-two part ends in a 2
  // or 4), those stages with threads idle in their last round (THREADS does not divide M / R) and,
  // at 64 threads, the radix-16 stages too; the lengths that the switches off take for the same T
  // (RWKV_TIMEX_FUSED_RADIX5=0: 3 2^k; both: 2^k) are among these and above.
  check<float, 1536, kThreads>(1, 3, 1100, 0.1, 0, 2, 1e-6);
  check<float, 1536, 64>(2, 1, 1536, 0.1, 1, 1, 1e-6);
  check<float, 2560, kThreads>(1, 3, 2049, 0.1, 0, 2, 1e-6);
  check<float, 2560, 64>(2, 1, 2560, 0.1, 1, 1, 1e-6);
  check<float, 3072, kThreads>(3, 1, 2600, 0.1, 0, 1, 1e-6);
  check<float, 5120, kThreads>(1, 3, 4097, 0.1, 1, 1, 1e-6);
  check<float, 6144, kThreads>(1, 3, 4097, 0.1, 1, 1, 1e-6);
  check<float, 10240, kThreads>(1, 1, 10240, 0.1, 0, 1, 1e-6);
  check<float, 12288, kThreads>(1, 1, 12288, 0.1, 0, 1, 1e-6);
  check<float, 12288, 32>(1, 1, 9001, 0.1, 1, 1, 1e-6);
  check<c10::Half, 1536, kThreads>(1, 3, 1100, 0.3, 0, 3, 1e-3);
  check<c10::BFloat16, 2560, 32>(1, 3, 2049, 0.3, 1, 2, 8e-3);
  check<c10::BFloat16, 3072, 32>(1, 3, 2600, 0.3, 1, 2, 8e-3);
  // The wide CTAs (8 values a thread, M / 8 threads) at every length they are built for
  // (kWideMinM to kWideMaxM): radix-8 stages, a last one of radix 2 (1024), 4 (2048), 3 (1536)
  // or 5 (2560) after them, the radix-3 and 5 stages with threads idle in their last round.
  check<float, 512, kThreads, true, 8>(1, 3, 300, 0.5, 1, 2, 1e-6);
  check<float, 1024, kThreads, true, 8>(3, 3, 1000, 0.1, 0, 2, 1e-6);
  check<float, 1536, kThreads, false, 8>(2, 3, 1100, 0.1, 1, 2, 1e-6);
  check<float, 2048, kThreads, true, 8>(2, 1, 2048, 0.1, 0, 1, 1e-6);
  check<float, 2560, kThreads, false, 8>(3, 1, 2049, 0.1, 1, 1, 1e-6);
  check<c10::Half, 1536, kThreads, false, 8>(1, 3, 1100, 0.3, 0, 3, 1e-3);
  check<c10::BFloat16, 2560, kThreads, false, 8>(1, 3, 2560, 0.3, 1, 2, 8e-3);
  std::printf("%d failures\n", failures);
  return failures != 0;
}
"""


@emulation_test
def test_fft_kernels_emulated_on_cpu(tmp_path):
    """Compiles csrc/rwkv/timex_fft_kernels.cuh and timex_fft_backward.cuh as host C++ and
    checks spectrum, conv and the backward kernel (one pass per channel, split over b and in
    row ranges, the shared channels summed by their last CTA) for M = 1 .. 16384 (2^k, 3 2^k
    and 5 2^k; the wide CTAs' shape from 512 to 2560) against float64 direct sums; grad_w
    twice, to the bit; the backward from k's spectra as the conv kernel kept them to the bit of
    the one that transforms k; its running sums in shared memory to the bit of those in
    scratch; the fused twiddle table's results to the bit of the plain table's."""
    run_emulator(EMULATOR, tmp_path)
