"""The bfloat16/float16 direct kernels on tensor cores (csrc/rwkv/timex_tc_toeplitz.cuh,
timex_tc_toeplitz_split.cuh, timex_tc_wgrad.cuh: mma.sync m16n8k16, ldmatrix .trans) run on
the CPU (tests/cuda_emulation.h emulates the warp operations with PTX's fragment layouts), so
that their tiling, staging, fold and diagonal-sum index arithmetic is checked without a GPU."""

from conftest import emulation_test, run_emulator

EMULATOR = r"""
#include <algorithm>
#include <cstdio>

#include "cuda_emulation.h"
#include "timex_reference.h"

#define TIMEX_EMULATE
#define TIMEX_DEVICE inline
#define TIMEX_KERNEL(threads, min_blocks) void
#define TIMEX_SHARED_BYTES(name) unsigned char* name = emu_smem
#define TIMEX_SYNC() emu_barrier->arrive_and_wait()
#include "rwkv/timex_tc_toeplitz.cuh"
#include "rwkv/timex_tc_toeplitz_split.cuh"
#include "rwkv/timex_tc_wgrad.cuh"

using namespace rwkv::kernels;

std::mt19937 rng(1234);
int failures = 0;

// bfloat16 and float16 on sm_80 and newer: the kernels of timex_tc_toeplitz.cuh (every
// configuration that timex_tc_launch.cuh's HalfTiles picks, whatever B) and timex_tc_wgrad.cuh,
// against float64 on the same rounded inputs, with guards around every output.
template <typename S>
void check_half_tc(int B, int C, int T, double eps, int offset, double tol) {
  const size_t n = size_t(B) * C * T;
  auto in = timex_inputs<S>(rng, B, C, T, eps, offset, 8);
  const S guard = static_cast<S>(777.0);
  // Elements per copy as staging_unit (timex_tc_launch.cuh) gives them: the buffers are 16-byte
  // aligned, so the rows start aligned to 2 u bytes where T and offset are multiples of u.
  int unit = 1;
  for (int u = 8; u > 1 && unit == 1; u /= 2) unit = T % u == 0 && offset % u == 0 ? u : 1;
  std::vector<double> o(n), dk(n), dw(size_t(C) * T);
  auto unpack = [&](const std::vector<S>& buf, int off, size_t len, std::vector<double>& dst) {
    bool ok = true;
    for (size_t i = 0; i < buf.size(); ++i) {
      if (i >= size_t(off) && i < off + len) {
        dst[i - off] = as_double(buf[i]);
      } else {
        ok &= std::memcmp(&buf[i], &guard, sizeof(S)) == 0;
      }
    }
    return ok;
  };
  auto report = [&](const char* what, double e, bool guards) {
    const bool ok = e < tol && guards;
    failures += !ok;
    std::printf("%s %s %zu-byte B=%d C=%d T=%d offset=%d unit=%d: %.1e%s\n",
                ok ? "ok  " : "FAIL", what, sizeof(S), B, C, T, offset, unit, e,
                guards ? "" : " (wrote outside the output)");
  };
  // Both Toeplitz products through run(causal, out): out and grad_k against float64, each
  // with its guards; name labels the lines.
  auto check_toeplitz = [&](const char* name, const auto& run) {
    std::vector<S> out(in.k.size(), guard), gk(in.k.size(), guard);
    run(true, out);
    run(false, gk);
    char what[80];
    std::snprintf(what, sizeof what, "%s out", name);
    const bool g1 = unpack(out, offset, n, o);
    report(what, rel_err(o, in.out_ref), g1);
    std::snprintf(what, sizeof what, "%s grad_k", name);
    const bool g2 = unpack(gk, offset, n, dk);
    report(what, rel_err(dk, in.gk_ref), g2);
  };
  auto toeplitz = [&](auto cfg) {
    using Cfg = decltype(cfg);
    const int blocks = C * cdiv(B, Cfg::BB) * cdiv(T, Cfg::TT);
    char name[64];
    std::snprintf(name, sizeof name, "half tc BB=%d J=%d", Cfg::BB, Cfg::J);
    check_toeplitz(name, [&](bool causal, std::vector<S>& dst) {
      launch(blocks, Cfg::THREADS, Cfg::SMEM_BYTES, [&] {
        if (causal) {
          toeplitz_half_kernel<S, Cfg, true>(in.w.data(), in.kp, dst.data() + offset, B, C, T,
                                             float(eps), unit);
        } else {
          toeplitz_half_kernel<S, Cfg, false>(in.w.data(), in.gp, dst.data() + offset, B, C, T,
                                              0.f, unit);
        }
      });
    });
  };
  // The split kernel (timex_tc_toeplitz_split.cuh): every configuration HalfTiles picks for it.
  auto split = [&](auto cfg, int groups) {
    using Cfg = decltype(cfg);
    groups = std::min(groups, cdiv(T, Cfg::TT));
    const int blocks = C * cdiv(B, Cfg::BB) * groups;
    char name[64];
    std::snprintf(name, sizeof name, "half tc split BB=%d J=%d groups=%d", Cfg::BB, Cfg::J,
                  groups);
    check_toeplitz(name, [&](bool causal, std::vector<S>& dst) {
      launch(blocks, Cfg::THREADS, Cfg::smem_bytes(T), [&] {
        if (causal) {
          toeplitz_half_split_kernel<S, Cfg, true>(in.w.data(), in.kp, dst.data() + offset, B,
                                                   C, T, float(eps), unit, groups);
        } else {
          toeplitz_half_split_kernel<S, Cfg, false>(in.w.data(), in.gp, dst.data() + offset, B,
                                                    C, T, 0.f, unit, groups);
        }
      });
    });
  };
  // One block for every tile of a row group, and the tiles dealt out over 2 and 3 blocks.
  for (int groups : {1, 2, 3}) {
    split(ToeplitzSplitConfig<4, 8, 2, 4, 4>{}, groups);
    split(ToeplitzSplitConfig<2, 8, 2, 4, 4>{}, groups);
  }
  toeplitz(ToeplitzHalfConfig<4, 1, 2, 4, 128, 4>{});
  toeplitz(ToeplitzHalfConfig<4, 2, 2, 4, 128, 4>{});
  toeplitz(ToeplitzHalfConfig<4, 8, 2, 4, 256, 4>{});
  toeplitz(ToeplitzHalfConfig<2, 8, 2, 4, 256, 4>{});
  using WCfg = WgradHalfConfig<4, 4, 12, 4>;
  std::vector<S> gw(size_t(C) * T + 16, guard);
  launch(C * cdiv(T, WCfg::LAGS), WCfg::THREADS, WCfg::SMEM_BYTES, [&] {
    wgrad_half_kernel<S, WCfg>(in.gp, in.kp, gw.data() + 8, B, C, T, unit);
  });
  const bool guards = unpack(gw, 8, dw.size(), dw);
  report("half tc grad_w", rel_err(dw, in.gw_ref), guards);
}

int main() {
  // Odd and even B, C, T; T % 8 != 0 and misaligned rows (element-wise staging); more than
  // one chunk, time tile, stage and lag tile; B = C = 1.
  check_half_tc<c10::BFloat16>(3, 2, 600, 0.3, 0, 1e-2);
  check_half_tc<c10::Half>(17, 2, 136, -0.5, 8, 2e-3);
  check_half_tc<c10::Half>(1, 1, 261, 0.0, 0, 2e-3);
  check_half_tc<c10::BFloat16>(5, 3, 77, 0.1, 3, 1e-2);
  // grad_w: whole lag tiles of 256 and stages whose slots are no multiple of 4 (zero slots),
  // lag tiles with idle warps (T - 256 j < 193).
  check_half_tc<c10::BFloat16>(7, 1, 512, 0.0, 0, 1e-2);
  check_half_tc<c10::Half>(2, 1, 1064, 0.0, 8, 2e-3);
  // Rows of even length at odd elements (element by element), T a multiple of 256.
  check_half_tc<c10::Half>(3, 2, 512, 0.0, 1, 2e-3);
  // 8- and 4-byte copies: T % 4 == 0 and T % 2 == 0 (or rows offset by 4 and 2 elements).
  check_half_tc<c10::Half>(17, 3, 1100, 0.2, 0, 2e-3);
  check_half_tc<c10::BFloat16>(9, 2, 600, 0.0, 4, 1e-2);
  check_half_tc<c10::Half>(5, 2, 302, -0.1, 2, 2e-3);
  check_half_tc<c10::BFloat16>(3, 1, 1102, 0.0, 0, 1e-2);
  std::printf("%d failures\n", failures);
  return failures != 0;
}
"""


@emulation_test
def test_half_tensor_core_kernels_emulated_on_cpu(tmp_path):
    """Every Toeplitz configuration that timex_tc_launch.cuh's HalfTiles picks (forward and
    grad_k), chunked and split (1 to 3 blocks a row group), and the grad_w kernel, against
    float64 on the same rounded inputs, with guard elements around every output."""
    run_emulator(EMULATOR, tmp_path)
