"""CPU emulation of the LLTM sequence's single-CTA persistent CUDA kernels, the cta path
(csrc/lltm/lltm_sequence_cta*.cuh): the kernels compile as host C++ under tests/cuda_emulation.h
(a thread per CUDA thread, the block barrier, the staged copies done at once)
and the forward and backward recurrences are checked against float64, GPU or not."""
from conftest import emulation_test, run_emulator

EMULATOR = r"""
// Runs the forward and backward kernels of the cta path (csrc/lltm/lltm_sequence_cta_*.cuh) on
// the CPU with the plan the launcher computes (choose_kc, make_forward_plan,
// make_backward_plan), and checks every buffer they write against the recurrence of
// lltm_sequence.h in float64, and the guard elements after each output. The operands as the
// launcher passes them (lltm_sequence.h, the fields after `state`): W_h a column block of a
// wider matrix (ldw > S); h0 and c0 in their own buffers, hs[0] and cells[0] written by the
// kernel; z read out of place and left intact; the output's gradient and h_n's apart, added
// by the kernel at t = T-1 (kFull), or every optional gradient absent but h_n's (kSparse:
// nullptr for zero, as h_n.sum().backward() leaves them).
#include <cstdio>

#include "cuda_emulation.h"
#include "lltm/lltm_sequence_cta_backward.cuh"
#include "lltm/lltm_sequence_cta_forward.cuh"
#include "lltm_sequence_reference.h"

using namespace lltm;
using namespace lltm::cta;

int failures = 0;

// fn(KC, RB) with the kernels' compile-time KC = kc (one of kKcs) and RB = rb (1, 2 or 4).
template <size_t I = 0, typename Fn>
void with_kc_rb(int kc, int rb, Fn fn) {
  if constexpr (I == sizeof(kKcs) / sizeof(kKcs[0])) {
    std::printf("FAIL no kernel of KC %d\n", kc);
    ++failures;
  } else if (kc != kKcs[I]) {
    with_kc_rb<I + 1>(kc, rb, fn);
  } else {
    constexpr std::integral_constant<int, kKcs[I]> kcc{};
    if (rb == 4) fn(kcc, std::integral_constant<int, 4>{});
    else if (rb == 2) fn(kcc, std::integral_constant<int, 2>{});
    else fn(kcc, std::integral_constant<int, 1>{});
  }
}

enum Mode { kFull, kSparse };
const char* const kModeNames[] = {"full", "sparse"};

template <typename S>
void check(const char* name, int T, int B, int S_, int rb, double tol, Mode mode = kFull) {
  const size_t n3 = size_t(T) * B * 3 * S_, nh = size_t(T + 1) * B * S_, nb = size_t(B) * S_;
  auto [w, gates, hs, cells, grad_hs, grad_c, d_h0, d_c0] = seq_inputs<S>(T, B, S_);
  if (mode == kSparse) {
    // Only h_n's gradient: grad_hs zero but at hs[T], grad_c zero (what the reference reads).
    for (size_t i = 0; i < nh - nb; ++i) grad_hs[i] = static_cast<S>(0.0);
    for (size_t i = 0; i < nb; ++i) grad_c[i] = static_cast<S>(0.0);
  }

  // float64 reference from the same (rounded) inputs (lltm_sequence_reference.h).
  const SeqReference ref = sequence_reference(w, gates, hs, cells, grad_hs, grad_c, T, B, S_);
  const std::vector<double>&z = ref.z, &h = ref.h, &c = ref.c, &dz = ref.dz;
  const std::vector<double>&want_dh0 = ref.d_h0, &dc = ref.d_c0;

  const int kc = choose_kc(S_);
  const Plan fp = make_forward_plan(S_, kc, rb), bp = make_backward_plan(S_, kc, rb);
  const int ctas = (B + rb - 1) / rb;
  // W_h as the first S columns of (3S, S + 3) weights; h0, c0 in their own buffers and hs[0],
  // cells[0] set to a value the kernel must overwrite; h_n's gradient half of grad_hs[T] and
  // the output's the other half (halving is exact: the sum is grad_hs[T]).
  const int ldw = S_ + 3;
  std::vector<S> wide(3 * size_t(S_) * ldw, static_cast<S>(555.0));
  for (size_t r = 0; r < 3 * size_t(S_); ++r) {
    for (int k = 0; k < S_; ++k) wide[r * ldw + k] = w[r * S_ + k];
  }
  std::vector<S> h0(hs.begin(), hs.begin() + nb), c0(cells.begin(), cells.begin() + nb);
  std::vector<S> grad_out(grad_hs.begin() + nb, grad_hs.end()), grad_h_n(nb);
  for (size_t i = 0; i < nb; ++i) {
    // kSparse: grad_out absent, so h_n's gradient is all of grad_hs[T].
    const S half = static_cast<S>(as_double(grad_hs[nh - nb + i]) * 0.5);
    grad_out[nh - 2 * nb + i] = half;
    grad_h_n[i] = mode == kSparse ? grad_hs[nh - nb + i] : half;
  }
  for (size_t i = 0; i < nb; ++i) hs[i] = cells[i] = static_cast<S>(555.0);
  SeqForward<S> f{wide.data(), gates.data(), hs.data(), cells.data(), T, B, S_};
  f.ldw = ldw;
  f.h0 = h0.data();
  f.c0 = c0.data();
  // z read from gates (checked intact), dz written to its own buffer (with guards).
  std::vector<S> dz_buf = random_vector<S>(0, 1.0, n3 + kGuard);
  SeqBackward<S> bw{wide.data(),
                    dz_buf.data(),
                    cells.data(),
                    nullptr,
                    mode == kSparse ? nullptr : grad_c.data(),
                    d_h0.data(),
                    d_c0.data(),
                    T,
                    B,
                    S_};
  bw.grad_out = mode == kSparse ? nullptr : grad_out.data();
  bw.grad_h0 = mode == kSparse ? nullptr : grad_hs.data();
  bw.ldw = ldw;
  bw.z = gates.data();
  bw.grad_h_n = grad_h_n.data();
  // Progress published every 3 steps and after the last (what the weight-gradient kernel
  // waits on): ceil(T / 3) publishes by each CTA, to its own counter.
  std::vector<unsigned> progress(ctas + 1, 0);
  bw.progress = progress.data();
  bw.progress_interval = 3;
  // Forward's z, checked after the backward ran (which must leave it intact).
  std::vector<double> got_z;
  bool guards = true;
  with_kc_rb(kc, rb, [&](auto kcc, auto rbc) {
    constexpr int KC = decltype(kcc)::value, RB = decltype(rbc)::value;
    launch(ctas, fp.threads, fp.total * 4, [&] { forward_kernel<S, KC, RB>(fp, f); });
  });
  guards &= take(gates, n3, got_z);
  with_kc_rb(kc, rb, [&](auto kcc, auto rbc) {
    constexpr int KC = decltype(kcc)::value, RB = decltype(rbc)::value;
    launch(ctas, bp.threads, bp.total * 4, [&] { backward_kernel<S, KC, RB>(bp, bw); });
  });

  std::vector<double> got_h, got_c, got_dz, got_dh0, got_dc0, z_after;
  guards &= take(hs, nh, got_h) && take(cells, nh, got_c) && take(dz_buf, n3, got_dz) &&
            take(d_h0, nb, got_dh0) && take(d_c0, nb, got_dc0);
  for (int c = 0; c <= ctas; ++c) {
    const unsigned want = c < ctas ? static_cast<unsigned>((T + 2) / 3) : 0u;
    if (progress[c] != want) {
      std::printf("FAIL %s: CTA %d's progress %u, want %u\n", kModeNames[mode], c,
                  progress[c], want);
      ++failures;
    }
  }
  // The backward read z without writing it.
  if (!take(gates, n3, z_after) || z_after != got_z) {
    std::printf("FAIL %s: the backward changed z\n", kModeNames[mode]);
    ++failures;
  }
  const double errs[6] = {rel_err(got_z, z), rel_err(got_h, h), rel_err(got_c, c),
                          rel_err(got_dz, dz), rel_err(got_dh0, want_dh0), rel_err(got_dc0, dc)};
  const double maxs[6] = {max_abs(got_z, z), max_abs(got_h, h), max_abs(got_c, c),
                          max_abs(got_dz, dz), max_abs(got_dh0, want_dh0), max_abs(got_dc0, dc)};
  double worst = 0;
  for (double e : errs) worst = std::max(worst, std::isfinite(e) ? e : INFINITY);
  const bool ok = worst < tol && guards;
  failures += !ok;
  std::printf(
      "%s %-8s %-8s T=%d B=%d S=%d rb=%d ctas=%d threads=%d kc=%d | rel "
      "z %.1e h %.1e c %.1e dz %.1e dh0 %.1e dc0 %.1e | max abs z %.1e h %.1e c %.1e dz %.1e "
      "dh0 %.1e dc0 %.1e | guards %s\n",
      ok ? "ok  " : "FAIL", name, kModeNames[mode], T, B, S_, rb, ctas, fp.threads, fp.kc, errs[0], errs[1],
      errs[2], errs[3], errs[4], errs[5], maxs[0], maxs[1], maxs[2], maxs[3], maxs[4], maxs[5],
      guards ? "intact" : "OVERWRITTEN");
}

int main() {
  // KC for S: the smallest of kKcs covering S on a lane pair (S = 33: 9 float4 groups, 5 on
  // lane 0, so KC = 20).
  const int kc_of[][2] = {{1, 16}, {32, 16}, {33, 20}, {40, 20}, {41, 32}, {64, 32},
                          {65, 48}, {96, 48}, {97, 64}, {128, 64}, {129, 0}};
  for (const auto& sk : kc_of) {
    if (choose_kc(sk[0]) != sk[1]) {
      std::printf("FAIL choose_kc(%d) = %d, want %d\n", sk[0], choose_kc(sk[0]), sk[1]);
      ++failures;
    }
  }
  // (T, B, S, rows per CTA): S = 1 (one column, 15 idle pairs), 7, 20 (KC 16), 33 and 37
  // (KC 20: lane 0 holds 5 float4 groups, lane 1 4 and a zero group), 40 (KC 20 full), 41, 45,
  // 48 and 64 (32), 96 (48), 100 and 128 (64, 256 threads), every KC and rows per CTA (1, 2,
  // 4) with partial last CTAs (B = 3, 5, 7), lane 1 of a pair idle (RB = 1) or running a row
  // of its own (RB = 2, 4), T = 1 and T past the staged ring (kStages).
  const double f32 = 2e-6;  // measured errors are about 1e-7
  check<float>("float32", 1, 1, 1, 1, f32);
  check<float>("float32", 6, 3, 1, 4, f32);
  check<float>("float32", 5, 3, 7, 2, f32);
  check<float>("float32", 7, 7, 7, 4, f32);
  check<float>("float32", 6, 2, 20, 1, f32);
  check<float>("float32", 5, 3, 33, 2, f32);
  check<float>("float32", 7, 2, 33, 1, f32);
  check<float>("float32", 6, 5, 37, 4, f32);
  check<float>("float32", 5, 2, 40, 1, f32);
  check<float>("float32", 6, 3, 41, 2, f32);
  check<float>("float32", 5, 5, 45, 4, f32);
  check<float>("float32", 4, 1, 48, 1, f32);
  check<float>("float32", 3, 3, 64, 4, f32);
  check<float>("float32", 4, 2, 96, 1, f32);
  check<float>("float32", 3, 3, 128, 2, f32);
  check<float>("float32", 2, 1, 128, 1, f32);
  check<float>("float32", 2, 5, 128, 4, f32);
  check<float>("float32", 5, 3, 100, 4, f32);
  // Half types: the stored z, h, c, dz are rounded to the type, sums in float; odd S puts
  // elements in both halves of their staged words.
  check<c10::Half>("float16", 5, 3, 21, 2, 5e-3);
  check<c10::BFloat16>("bfloat16", 5, 3, 33, 4, 2e-2);
  check<c10::Half>("float16", 5, 3, 43, 1, 5e-3);
  check<c10::Half>("float16", 3, 2, 128, 1, 5e-3);
  // Only h_n's gradient, a few shapes.
  check<float>("float32", 5, 3, 7, 2, f32, kSparse);
  check<float>("float32", 6, 5, 37, 4, f32, kSparse);
  check<c10::BFloat16>("bfloat16", 5, 3, 33, 4, 2e-2, kSparse);
  std::printf("%d failures\n", failures);
  return failures != 0;
}
"""


@emulation_test
def test_cta_sequence_kernels_emulated_on_cpu(tmp_path):
    """Compiles the cta path's kernels as host C++ and runs them on the CPU, so that the
    register split of W_h over lane pairs (every KC), the pair exchange, the rows each lane
    owns, the parity double buffer and the staged-input ring fail here, GPU or not."""
    run_emulator(EMULATOR, tmp_path)  # its per-configuration errors show when it fails
