"""CPU emulation of the LLTM sequence's persistent CUDA kernels (csrc/lltm/lltm_sequence_persistent.cuh):
the kernels compile as host C++ under tests/cuda_emulation.h, every CTA of a cluster runs at
once (a thread per CUDA thread, the cluster barrier and distributed shared memory emulated), and
the forward and backward recurrences are checked against float64, GPU or not."""
from conftest import emulation_test, run_emulator

EMULATOR = r"""
// Runs the forward and backward kernels of csrc/lltm/lltm_sequence_persistent.cuh on the CPU
// with the plan the launcher computes (make_plan), and checks every buffer they write against
// the recurrence of lltm_sequence.h in float64, and the guard elements after each output.
#include <cstdio>

#include "cuda_emulation.h"
#include "lltm/lltm_sequence_persistent.cuh"
#include "lltm/lltm_sequence_persistent_mma.cuh"
#include "lltm_sequence_reference.h"

using namespace lltm;
using namespace lltm::persistent;

int failures = 0;

// MMA: the half-type tensor-core kernels (lltm_sequence_persistent_mma.cuh) instead of the
// FMA kernels.
template <typename S, bool MMA = false>
void check(const char* name, int T, int B, int S_, int nc, int bc, int threads, double tol) {
  const size_t n3 = size_t(T) * B * 3 * S_, nh = size_t(T + 1) * B * S_, nb = size_t(B) * S_;
  auto [w, gates, hs, cells, grad_hs, grad_c, d_h0, d_c0] = seq_inputs<S>(T, B, S_);

  // float64 reference from the same (rounded) inputs (lltm_sequence_reference.h).
  const SeqReference ref = sequence_reference(w, gates, hs, cells, grad_hs, grad_c, T, B, S_);
  const std::vector<double>&z = ref.z, &h = ref.h, &c = ref.c, &dz = ref.dz;
  const std::vector<double>&want_dh0 = ref.d_h0, &dc = ref.d_c0;

  const int clusters = (B + bc - 1) / bc;
  SeqForward<S> f{w.data(), gates.data(), hs.data(), cells.data(), T, B, S_};
  SeqBackward<S> bw{w.data(), gates.data(), cells.data(), grad_hs.data(), grad_c.data(),
                    d_h0.data(), d_c0.data(), T, B, S_};
  // Forward's z is checked after the backward overwrote it: keep a copy from between.
  std::vector<double> got_z;
  bool guards = true;
  char layout[160];
  if constexpr (MMA) {
    const MmaPlan fp = make_mma_plan(S_, nc, bc, false, threads);
    const MmaPlan bp = make_mma_plan(S_, nc, bc, true, threads);
    launch_cluster(clusters * fp.nc, fp.nc, fp.threads, fp.total,
                   [&] { forward_mma_kernel<S>(fp, f); });
    guards &= take(gates, n3, got_z);
    launch_cluster(clusters * bp.nc, bp.nc, bp.threads, bp.total,
                   [&] { backward_mma_kernel<S>(bp, bw); });
    std::snprintf(layout, sizeof layout,
                  "mma tiles m %d/%d n %d k %d/%d ksplit %d/%d ldk %d/%d", fp.split.mt,
                  bp.split.mt, fp.split.nt, fp.split.ksteps, bp.split.ksteps, fp.split.ksplit,
                  bp.split.ksplit, fp.ldk, bp.ldk);
  } else {
    const Plan fp = make_plan(S_, nc, bc, false, threads), bp = make_plan(S_, nc, bc, true, threads);
    auto forward_then_copy = [&](auto rb) {
      constexpr int RB = decltype(rb)::value;
      launch_cluster(clusters * fp.nc, fp.nc, fp.threads, fp.total * 4,
                     [&] { forward_kernel<S, RB>(fp, f); });
      guards &= take(gates, n3, got_z);
      launch_cluster(clusters * bp.nc, bp.nc, bp.threads, bp.total * 4,
                     [&] { backward_kernel<S, RB>(bp, bw); });
    };
    if (fp.rb != bp.rb) {
      std::printf("FAIL plans disagree on rb\n");
      ++failures;
      return;
    }
    if (fp.rb == 4) forward_then_copy(std::integral_constant<int, 4>{});
    else if (fp.rb == 2) forward_then_copy(std::integral_constant<int, 2>{});
    else forward_then_copy(std::integral_constant<int, 1>{});
    std::snprintf(layout, sizeof layout, "rb=%d ks=%d/%d ldk=%d/%d", fp.rb, fp.ks, bp.ks,
                  fp.ldk, bp.ldk);
  }

  std::vector<double> got_h, got_c, got_dz, got_dh0, got_dc0;
  guards &= take(hs, nh, got_h) && take(cells, nh, got_c) && take(gates, n3, got_dz) &&
            take(d_h0, nb, got_dh0) && take(d_c0, nb, got_dc0);
  const double errs[6] = {rel_err(got_z, z), rel_err(got_h, h), rel_err(got_c, c),
                          rel_err(got_dz, dz), rel_err(got_dh0, want_dh0), rel_err(got_dc0, dc)};
  const double maxs[6] = {max_abs(got_z, z), max_abs(got_h, h), max_abs(got_c, c),
                          max_abs(got_dz, dz), max_abs(got_dh0, want_dh0), max_abs(got_dc0, dc)};
  double worst = 0;
  for (double e : errs) worst = std::max(worst, std::isfinite(e) ? e : INFINITY);
  const bool ok = worst < tol && guards;
  failures += !ok;
  std::printf(
      "%s %-8s T=%d B=%d S=%d nc=%d bc=%d clusters=%d threads=%d %s | rel "
      "z %.1e h %.1e c %.1e dz %.1e dh0 %.1e dc0 %.1e | max abs z %.1e h %.1e c %.1e dz %.1e "
      "dh0 %.1e dc0 %.1e | guards %s\n",
      ok ? "ok  " : "FAIL", name, T, B, S_, nc, bc, clusters, threads, layout, errs[0], errs[1], errs[2], errs[3], errs[4], errs[5], maxs[0], maxs[1],
      maxs[2], maxs[3], maxs[4], maxs[5], guards ? "intact" : "OVERWRITTEN");
}

int main() {
  // (T, B, S, cluster size, batch rows per cluster, threads per CTA): S = 1, 7, 129 (not a
  // multiple of the cluster: CTAs with fewer or no columns), B = 1, T = 1 and 5, the batch
  // over 2+ clusters with a partial last one, every tile height rb (1, 2, 4; bc = 3 pads to
  // 4), lane splits ks from 1 to 32, and the launcher's 256 threads and 16-CTA clusters.
  const double f32 = 2e-6;  // measured errors are about 1e-7
  check<float>("float32", 1, 1, 1, 1, 1, 32, f32);
  check<float>("float32", 5, 1, 1, 1, 1, 64, f32);
  check<float>("float32", 5, 3, 7, 7, 2, 64, f32);
  check<float>("float32", 5, 5, 7, 8, 4, 64, f32);
  check<float>("float32", 1, 2, 7, 4, 1, 32, f32);
  check<float>("float32", 5, 4, 33, 4, 3, 32, f32);
  check<float>("float32", 5, 2, 129, 16, 1, 64, f32);
  check<float>("float32", 3, 9, 129, 8, 4, 256, f32);
  check<float>("float32", 4, 6, 64, 8, 6, 256, f32);
  check<float>("float32", 3, 4, 128, 16, 2, 256, f32);
  check<float>("float32", 2, 8, 40, 2, 8, 64, f32);
  // Half types: the stored z, h, c, dz are rounded to the type, sums in float.
  check<c10::Half>("float16", 5, 3, 20, 4, 2, 64, 5e-3);
  check<c10::BFloat16>("bfloat16", 5, 3, 20, 4, 2, 64, 2e-2);
  // The half types' tensor-core kernels: one tile (S = 1, 20), several M tiles and N tiles
  // (bc = 9: two 8-row tiles, the second nearly empty), S not a multiple of the cluster, k
  // slices from 1 to 8 warps, rounds of N tiles (bc = 40 at S = 64: 5 N tiles on 2 warps),
  // and the launcher's 256 threads and 16-CTA clusters at S = 256.
  check<c10::BFloat16, true>("bf16 mma", 5, 3, 20, 4, 2, 64, 2e-2);
  check<c10::Half, true>("f16 mma", 5, 3, 20, 4, 2, 64, 5e-3);
  check<c10::Half, true>("f16 mma", 3, 1, 1, 1, 1, 32, 5e-3);
  check<c10::BFloat16, true>("bf16 mma", 4, 5, 33, 4, 3, 128, 2e-2);
  check<c10::Half, true>("f16 mma", 3, 11, 129, 16, 9, 256, 5e-3);
  check<c10::BFloat16, true>("bf16 mma", 2, 40, 64, 2, 40, 64, 2e-2);
  check<c10::Half, true>("f16 mma", 2, 16, 256, 16, 8, 256, 5e-3);
  // One warp with 6 M tiles x 2 N tiles: two rounds of M tiles.
  check<c10::BFloat16, true>("bf16 mma", 2, 9, 64, 2, 9, 32, 2e-2);
  std::printf("%d failures\n", failures);
  return failures != 0;
}
"""


@emulation_test
def test_persistent_sequence_kernels_emulated_on_cpu(tmp_path):
    """Compiles csrc/lltm/lltm_sequence_persistent.cuh as host C++ and runs its cluster kernels on
    the CPU, so that the column and batch-row split, the distributed-shared-memory exchange,
    the parity double buffer and the tiles' indexing fail here, GPU or not."""
    run_emulator(EMULATOR, tmp_path)  # its per-configuration errors show when it fails
