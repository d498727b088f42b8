"""CPU emulation of the LLTM sequence's per-step tensor-core kernels (the "step" path, float32
as 3xTF32 and the half types,
csrc/lltm/lltm_sequence_step_*.cuh): the kernels compile as host C++ under
tests/cuda_emulation.h (a thread per CUDA thread, ldmatrix and mma.sync emulated with PTX's
fragment layouts, the asynchronous copies done at once) and run step by step with the
launcher's own per-step pointers, and the forward and backward recurrences are checked against
float64, GPU or not."""
from conftest import emulation_test, run_emulator

EMULATOR = r"""
// Runs the step kernels of csrc/lltm/lltm_sequence_step_forward.cuh / _backward.cuh with the
// launcher's tiles and per-step parameters, and checks every buffer they write against the
// recurrence of lltm_sequence.h in float64, and the guard elements after each output.
#include <cstdio>

#include "cuda_emulation.h"
#include "lltm/lltm_sequence_step_backward.cuh"
#include "lltm/lltm_sequence_step_forward.cuh"
#include "lltm_sequence_reference.h"

using namespace lltm;
using namespace lltm::step;

int failures = 0;

// The 3-D grid (ceil(B / BM), ceil(S / J), KC) as the emulator's 1-D one, x fastest (so
// the KC CTAs of an output tile run in z order, the last one last).
template <typename Tl>
void launch2d(int64_t B, int64_t S, const std::function<void()>& kernel) {
  const unsigned gx = static_cast<unsigned>((B + Tl::BM - 1) / Tl::BM);
  const unsigned gy = static_cast<unsigned>((S + Tl::J - 1) / Tl::J);
  launch(static_cast<int>(gx * gy * Tl::KC), Tl::kThreads, Tl::kSmemBytes, [&] {
    blockIdx.z = blockIdx.x / (gx * gy);
    blockIdx.y = blockIdx.x % (gx * gy) / gx;
    blockIdx.x %= gx;
    kernel();
  });
}

template <typename S, typename Fwd, typename Bwd>
void check(const char* name, int T, int B, int S_, double tol) {
  const size_t n3 = size_t(T) * B * 3 * S_, nh = size_t(T + 1) * B * S_, nb = size_t(B) * S_;
  auto [w, gates, hs, cells, grad_hs, grad_c, d_h0, d_c0] = seq_inputs<S>(T, B, S_);
  const SeqReference ref = sequence_reference(w, gates, hs, cells, grad_hs, grad_c, T, B, S_);

  // W_h^T as the launcher's transpose kernel writes it, and the float carry.
  std::vector<S> w_t(w.size());
  for (int r = 0; r < 3 * S_; ++r)
    for (int j = 0; j < S_; ++j) w_t[size_t(j) * 3 * S_ + r] = w[size_t(r) * S_ + j];
  std::vector<float> carry(nb + kGuard, 777.f);
  bool guards_ok = true;

  SeqForward<S> f{w.data(), gates.data(), hs.data(), cells.data(), T, B, S_};
  SeqBackward<S> bw{w.data(), gates.data(), cells.data(), grad_hs.data(), grad_c.data(),
                    d_h0.data(), d_c0.data(), T, B, S_};
  // The split-K tile's slots and counters (zero once: the last CTA of a tile resets its own).
  const int64_t tiles = (B + Fwd::BM - 1) / Fwd::BM * ((S_ + Fwd::J - 1) / Fwd::J);
  std::vector<float> slots(size_t(tiles) * Fwd::KC * Fwd::kSlotFloats);
  std::vector<int> counters(size_t(tiles), 0);
  for (int t = 0; t < T; ++t) {
    StepForward<S> p = forward_step_params(f, t);
    if (Fwd::KC > 1) p.split = KSplit{slots.data(), counters.data(), (B + Fwd::BM - 1) / Fwd::BM};
    launch2d<Fwd>(B, S_, [&] { step_forward_kernel<Fwd, S>(p); });
  }
  for (int c : counters) guards_ok &= c == 0;
  std::vector<double> got_z;
  bool guards = take(gates, n3, got_z) && guards_ok;
  for (int t = T - 1; t >= -1; --t) {
    const StepBackward<S> p = backward_step_params(bw, w_t.data(), carry.data(), t);
    launch2d<Bwd>(B, S_, [&] { step_backward_kernel<Bwd, S>(p); });
  }
  for (size_t i = nb; i < carry.size(); ++i) guards &= carry[i] == 777.f;
  std::vector<double> got_h, got_c, got_dz, got_dh0, got_dc0;
  guards &= take(hs, nh, got_h) && take(cells, nh, got_c) && take(gates, n3, got_dz) &&
            take(d_h0, nb, got_dh0) && take(d_c0, nb, got_dc0);
  const double errs[6] = {rel_err(got_z, ref.z), rel_err(got_h, ref.h), rel_err(got_c, ref.c),
                          rel_err(got_dz, ref.dz), rel_err(got_dh0, ref.d_h0),
                          rel_err(got_dc0, ref.d_c0)};
  double worst = 0;
  for (double e : errs) worst = std::max(worst, std::isfinite(e) ? e : INFINITY);
  const bool ok = worst < tol && guards;
  failures += !ok;
  std::printf("%s %-9s T=%d B=%d S=%d tile %dx%d | rel z %.1e h %.1e c %.1e dz %.1e dh0 %.1e "
              "dc0 %.1e | guards %s\n",
              ok ? "ok  " : "FAIL", name, T, B, S_, Fwd::BM, Fwd::J, errs[0], errs[1], errs[2],
              errs[3], errs[4], errs[5], guards ? "intact" : "OVERWRITTEN");
}

int main() {
  // Both of the launcher's tiles: one tile (S = 8, B = 1), row tails (B = 5, 33, 70: the
  // last row tile partly empty), column tails (S = 40 on the 32-column tile), k tails and
  // several k chunks (S = 72, 136: K = S and 3S past the 64-element chunk, the backward's
  // 408 through more chunks than pipeline stages), T = 1 (the backward's first step is also
  // its last before the final launch).
  check<c10::Half, FwdSmall, BwdSmall>("f16 small", 3, 1, 8, 5e-3);
  check<c10::BFloat16, FwdSmall, BwdSmall>("bf16 small", 2, 33, 24, 2e-2);
  check<c10::Half, FwdSmall, BwdSmall>("f16 small", 2, 5, 72, 5e-3);
  check<c10::Half, FwdSmall, BwdSmall>("f16 small", 1, 3, 16, 5e-3);
  check<c10::Half, FwdBig, BwdBig>("f16 big", 2, 70, 40, 5e-3);
  check<c10::BFloat16, FwdBig, BwdBig>("bf16 big", 2, 3, 136, 2e-2);
  check<c10::Half, FwdBig, BwdBig>("f16 big", 1, 65, 8, 5e-3);
  check<c10::Half, FwdBig, BwdWide>("f16 wide", 2, 70, 72, 5e-3);
  // float32 (3xTF32 products, 32 values of k a stage): the same tails, K = S = 40 and 72 past
  // one stage, the backward's 3S = 408 through more stages than the pipeline holds, and the
  // float32 bound of the other emulation tests (measured errors about 3e-7).
  check<float, FwdSmall, BwdSmall>("f32 small", 3, 1, 8, 2e-6);
  check<float, FwdSmall, BwdSmall>("f32 small", 2, 33, 72, 2e-6);
  check<float, FwdBig, BwdBig>("f32 big", 2, 70, 40, 2e-6);
  check<float, FwdBig, BwdBig>("f32 big", 2, 3, 136, 2e-6);
  check<float, FwdBig, BwdWide>("f32 wide", 1, 65, 72, 2e-6);
  // The split tile (each stage's k steps over 4 warp sets, summed through shared memory),
  // float32 as auto runs it and a half type.
  check<float, FwdSplit, BwdSplit>("f32 split", 3, 1, 8, 2e-6);
  check<float, FwdSplit, BwdSplit>("f32 split", 2, 33, 136, 2e-6);
  check<c10::Half, FwdSplit, BwdSplit>("f16 split", 2, 5, 72, 5e-3);
  // The tiny tile (the split tile with one row tile of 16), B within and past one tile.
  check<float, FwdTiny, BwdTiny>("f32 tiny", 3, 1, 8, 2e-6);
  check<float, FwdTiny, BwdTiny>("f32 tiny", 2, 21, 136, 2e-6);
  check<c10::BFloat16, FwdTiny, BwdTiny>("bf16 tiny", 2, 5, 72, 2e-2);
  // The split-K forward tile (4 CTAs a tile, the last one sums): K = 136 floats = 5 stages
  // (ranks with 1 and 2 stages), K = 8 (ranks without a stage), B past one tile.
  check<float, FwdTinyK, BwdTiny>("f32 tinyk", 3, 1, 8, 2e-6);
  check<float, FwdTinyK, BwdTiny>("f32 tinyk", 2, 21, 136, 2e-6);
  check<float, FwdTinyK, BwdTiny>("f32 tinyk", 2, 3, 520, 2e-6);
  std::printf("%d failures\n", failures);
  return failures != 0;
}
"""


@emulation_test
def test_step_sequence_kernels_emulated_on_cpu(tmp_path):
    """Compiles the step kernels as host C++ and runs them on the CPU, so that the tile
    indexing (rows, the 3 gate groups, column and k tails, the pipeline's stages) and the
    launcher's per-step pointers fail here, GPU or not."""
    run_emulator(EMULATOR, tmp_path)  # its per-configuration errors show when it fails
