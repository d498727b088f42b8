"""The LLTM cell's CUDA paths (csrc/lltm/lltm_cuda.cu picks one by problem size): each forced,
against the reference at odd sizes, in every dtype; the small path's tile variants, tensor
cores and determinism; the path choice; and the small path's kernels emulated on the CPU.
The cell's device-independent tests (every device, dtypes, gradients, bad input) are
tests/test_lltm.py, whose input and reference helpers these use."""

import re

import pytest
import torch
from conftest import DEVICES, emulation_test, rel_err, run_emulator
from test_lltm import (check_backward_output_masks, check_half_type_against_float64,
                       make_inputs, outputs_and_grads)

import lltm
from lltm.reference import lltm_cell_reference

# CUDA: the two paths (csrc/lltm/lltm_cuda.cu picks one by problem size). Small and medium
# problems run one kernel for the forward and two for the backward (lltm_cuda_small.cu);
# larger ones cuBLAS plus pointwise kernels. LLTM_CUDA_PATH=small|cublas forces one.

needs_cuda = pytest.mark.skipif("cuda" not in DEVICES, reason="needs a CUDA GPU")
CUDA_PATHS = ["small", "cublas"]
# Odd sizes on every side of the small path's tiles (64 or 32 batch rows, 32 or 64 columns).
PATH_SHAPES = [(1, 1, 1), (3, 7, 13), (300, 1, 33), (1, 7, 129), (3, 1, 129), (300, 7, 1),
               (300, 7, 129), (65, 0, 31), (129, 63, 64), (17, 40, 35), (33, 3, 40)]


def cuda_kernel_names(fn):
    """Names of the CUDA kernels that one call of fn launches (after one warm-up call)."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def training_step(batch, features, state, dtype=torch.float32):
    inputs = make_inputs(batch, features, state, "cuda", dtype)
    grads = torch.randn(2, batch, state, device="cuda", dtype=dtype)
    return lambda: outputs_and_grads(lltm.lltm_cell, inputs, grads[0], grads[1])


@needs_cuda
@pytest.mark.parametrize("path", CUDA_PATHS)
@pytest.mark.parametrize("shape", PATH_SHAPES)
def test_cuda_paths_match_reference(monkeypatch, path, shape):
    monkeypatch.setenv("LLTM_CUDA_PATH", path)
    inputs = make_inputs(*shape, "cuda")
    grad_h, grad_cell = torch.randn_like(inputs[3]), torch.randn_like(inputs[4])
    want = outputs_and_grads(lltm_cell_reference, inputs, grad_h, grad_cell)
    names = ["new_h", "new_cell", "d_input", "d_weights", "d_bias", "d_old_h", "d_old_cell"]
    # float64 against the float64 reference, tightly.
    got = outputs_and_grads(lltm.lltm_cell, inputs, grad_h, grad_cell)
    for name, g, w in zip(names, got, want):
        assert g.shape == w.shape, name
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12, msg=name)
    # float32 against the float64 reference.
    inputs32 = [t.detach().float().requires_grad_() for t in inputs]
    got32 = outputs_and_grads(lltm.lltm_cell, inputs32, grad_h.float(), grad_cell.float())
    for name, g, w in zip(names, got32, want):
        assert g.dtype == torch.float32, name
        assert rel_err(g, w) < 1e-5, name
    # X and gate_weights, the op's other two outputs.
    _, _, X, gates = torch.ops.lltm.lltm_forward(*[t.detach() for t in inputs])
    x, W, b, h, _ = [t.detach() for t in inputs]
    torch.testing.assert_close(X, torch.cat([h, x], 1), rtol=0, atol=0)
    torch.testing.assert_close(gates, torch.nn.functional.linear(X, W, b), rtol=1e-10, atol=1e-12)


@needs_cuda
@pytest.mark.parametrize("path", CUDA_PATHS)
def test_cuda_paths_medium_size_float32(monkeypatch, path):
    # The benchmark's medium size, (batch, in, state) = (256, 256, 1024), on both paths.
    monkeypatch.setenv("LLTM_CUDA_PATH", path)
    inputs = make_inputs(256, 256, 1024, "cuda")
    grad_h, grad_cell = torch.randn_like(inputs[3]), torch.randn_like(inputs[4])
    want = outputs_and_grads(lltm_cell_reference, inputs, grad_h, grad_cell)
    inputs32 = [t.detach().float().requires_grad_() for t in inputs]
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    got = outputs_and_grads(lltm.lltm_cell, inputs32, grad_h.float(), grad_cell.float())
    for g, w in zip(got, want):
        assert rel_err(g, w) < 1e-5


@needs_cuda
@pytest.mark.parametrize("path", CUDA_PATHS)
@pytest.mark.parametrize("batch", [70, 20])  # the small path's d_X tiles of 32 and 64 rows
def test_cuda_backward_output_masks(monkeypatch, path, batch):
    monkeypatch.setenv("LLTM_CUDA_PATH", path)
    check_backward_output_masks("cuda", batch)


@needs_cuda
@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 7, 33)])
def test_gradcheck_small_path(monkeypatch, shape):
    monkeypatch.setenv("LLTM_CUDA_PATH", "small")
    inputs = make_inputs(*shape, "cuda")
    assert torch.autograd.gradcheck(lltm.lltm_cell, inputs)


@needs_cuda
@pytest.mark.parametrize("path", CUDA_PATHS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_paths_half_types(monkeypatch, path, dtype):
    monkeypatch.setenv("LLTM_CUDA_PATH", path)
    check_half_type_against_float64("cuda", dtype)


@needs_cuda
def test_small_path_is_deterministic(monkeypatch):
    monkeypatch.setenv("LLTM_CUDA_PATH", "small")
    step = training_step(300, 7, 129)
    first, second = step(), step()
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def small_path_dx_rows_per_thread(batch, col_tiles):
    """The rows per thread (TM: 4 or 2, 64 or 32 batch rows per block) that rows_per_thread
    in csrc/lltm/lltm_cuda_small.cu picks for the backward's d_X role."""
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    large, small = -(-batch // 64), -(-batch // 32)
    return 2 if large * col_tiles < sms and small > large else 4


@needs_cuda
@pytest.mark.parametrize("wide", [False, True])
def test_small_path_tile_variants(monkeypatch, wide):
    # The backward's d_X role comes with 64- and 32-row tiles; the host takes the 32-row ones
    # when the 64-row ones give fewer blocks than SMs (the forward always runs 64-row tiles).
    # Batch 200 leaves partial tiles of either size; a wide state gives enough column tiles
    # for the 64-row ones.
    monkeypatch.setenv("LLTM_CUDA_PATH", "small")
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    batch, features = 200, 5
    state = 16 * sms + 1 if wide else 35
    want_tm = 4 if wide else 2
    assert small_path_dx_rows_per_thread(batch, -(-(state + features) // 64)) == want_tm
    inputs = make_inputs(batch, features, state, "cuda")
    grad_h, grad_cell = torch.randn_like(inputs[3]), torch.randn_like(inputs[4])
    step = lambda: outputs_and_grads(lltm.lltm_cell, inputs, grad_h, grad_cell)  # noqa: E731
    names = [n for n in cuda_kernel_names(step) if "small_" in n]
    assert len(names) == 2, names
    assert any("small_forward_kernel<double, 4, " in n for n in names), names
    assert any(f"small_backward_kernel<double, {want_tm}, " in n for n in names), names
    want = outputs_and_grads(lltm_cell_reference, inputs, grad_h, grad_cell)
    names = ["new_h", "new_cell", "d_input", "d_weights", "d_bias", "d_old_h", "d_old_cell"]
    for name, g, w in zip(names, step(), want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12, msg=name)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_small_path_tensor_cores(monkeypatch, dtype):
    # On sm_80 and newer the small path's GEMMs run on tensor cores (3xTF32 for float32) for
    # every type but float64 (the last template argument of both kernels); their values
    # against float64 are the other tests' job (test_cuda_paths_*).
    monkeypatch.setenv("LLTM_CUDA_PATH", "small")
    names = cuda_kernel_names(training_step(70, 20, 50, dtype))
    found = [m.group(2).split(", ") for n in names
             for m in [re.search(r"small_(forward|backward)_kernel<([^<>]*)>", n)] if m]
    want_tc = dtype != torch.float64 and torch.cuda.get_device_capability() >= (8, 0)
    assert len(found) == 2 and all(args[-1] == str(want_tc).lower() for args in found), names


@needs_cuda
def test_cuda_path_choice(monkeypatch):
    def lltm_kernels(shape, dtype=torch.float32):
        return [n for n in cuda_kernel_names(training_step(*shape, dtype)) if "lltm" in n]

    monkeypatch.delenv("LLTM_CUDA_PATH", raising=False)
    # The tutorial's size: one launch for the forward, the pointwise kernel and one GEMM
    # kernel for the backward, nothing else.
    names = cuda_kernel_names(training_step(16, 32, 128))
    assert len(names) == 3, names
    for kernel in ["small_forward_kernel", "::backward_kernel<", "small_backward_kernel"]:
        assert any(kernel in n for n in names), (kernel, names)
    # Past the size bounds: the cuBLAS path.
    for shape in [(4097, 1, 2), (1024, 1024, 1024)]:
        assert not any("small_" in n for n in lltm_kernels(shape)), shape
    # (512, 512, 1024), 2.4e9 multiply-adds a GEMM: inside the tensor-core tiles' bound
    # (3.4e9), past the SIMT tiles' (2^31).
    tc = torch.cuda.get_device_capability() >= (8, 0)
    for dtype, small in [(torch.float32, tc), (torch.float64, False)]:
        names = lltm_kernels((512, 512, 1024), dtype)
        assert any("small_" in n for n in names) == small, (dtype, names)
    # Forced either way.
    monkeypatch.setenv("LLTM_CUDA_PATH", "cublas")
    assert not any("small_" in n for n in lltm_kernels((16, 32, 128)))
    monkeypatch.setenv("LLTM_CUDA_PATH", "small")
    assert len(lltm_kernels((4097, 1, 2))) == 3


@needs_cuda
def test_cuda_path_env_must_be_known(monkeypatch):
    monkeypatch.setenv("LLTM_CUDA_PATH", "fast")
    with pytest.raises(ValueError, match="LLTM_CUDA_PATH must be 'small', 'cublas' or 'auto'"):
        lltm.lltm_cell(*make_inputs(2, 3, 4, "cuda", requires_grad=False))


# ---- The small path's CUDA kernels, checked without a GPU ---------------------------------

EMULATOR = r"""
// Runs the kernels of csrc/lltm/lltm_cuda_small.cuh on the CPU (tests/cuda_emulation.h) with
// the grids that lltm_cuda_small.cu launches, and checks every output against float64 and
// the guard elements after each output (nothing written past the end).
#include <cstdio>

#include "cuda_emulation.h"
#include "lltm/lltm_cuda_small.cuh"

using namespace lltm::small;

std::mt19937 rng(1234);
int failures = 0;

template <typename S>
std::vector<S> random_vector(size_t n, double scale) {
  std::normal_distribution<double> normal;
  std::vector<S> v(n);
  for (auto& x : v) x = static_cast<S>(normal(rng) * scale);
  return v;
}

const double kGuard = 777.0;  // in S: 777 rounded (to 776 in bfloat16)

// The first n elements as double; false if an element after them lost its guard value.
template <typename S>
bool take(const std::vector<S>& v, size_t n, std::vector<double>& out) {
  out.resize(n);
  for (size_t i = 0; i < n; ++i) out[i] = as_double(v[i]);
  for (size_t i = n; i < v.size(); ++i) {
    if (as_double(v[i]) != as_double(static_cast<S>(kGuard))) return false;
  }
  return true;
}

// extra: TM (forward) or the output mask (backward); ch: the chunk depth; tc: tensor-core tiles.
template <typename S>
void report(const char* what, int B, int F, int S_, int extra, int ch, bool tc, double err,
            bool guards, double tol) {
  const bool ok = err < tol && guards;
  failures += !ok;
  std::printf("%s %s %zu-byte B=%d F=%d S=%d (%d, CH=%d%s): %.1e%s\n", ok ? "ok  " : "FAIL",
              what, sizeof(S), B, F, S_, extra, ch, tc ? ", tensor cores" : "", err,
              guards ? "" : " (wrote past the end)");
}

template <typename S, int TM, int CH = kChunk, bool TC = false>
void check_forward(int B, int F, int S_, double tol) {
  using acc_t = fused_ops::opmath_t<S>;
  const int K = S_ + F, N = 3 * S_;
  const auto input = random_vector<S>(size_t(B) * F, 1.0), old_h = random_vector<S>(size_t(B) * S_, 1.0),
             old_cell = random_vector<S>(size_t(B) * S_, 1.0), bias = random_vector<S>(N, 0.3),
             weights = random_vector<S>(size_t(N) * K, 1.0 / std::sqrt(double(K)));
  const S g = static_cast<S>(kGuard);
  std::vector<S> new_h(size_t(B) * S_ + 4, g), new_cell(size_t(B) * S_ + 4, g),
      X(size_t(B) * K + 4, g), gates(size_t(B) * N + 4, g);
  // The gate activations (the tutorial's forward asks for them): every other call.
  const bool with_acts = (B + S_) % 2 == 0;
  std::vector<S> acts[3];
  lltm::ActivationPtrs<S> act_ptrs;
  if (with_acts) {
    for (auto& a : acts) a.assign(size_t(B) * S_ + 4, g);
    act_ptrs = {acts[0].data(), acts[1].data(), acts[2].data()};
  }
  const int blocks = ceil_div(B, fwd_rows<TM>) * ceil_div(S_, kFwdCols);
  launch(blocks, kThreads, 0, [&] {
    small_forward_kernel<S, TM, CH, TC>(input.data(), weights.data(), bias.data(), old_h.data(),
                                old_cell.data(), new_h.data(), new_cell.data(), X.data(),
                                gates.data(), act_ptrs, B, F, S_);
  });
  std::vector<double> x_ref(size_t(B) * K), z_ref(size_t(B) * N), h_ref(size_t(B) * S_),
      c_ref(size_t(B) * S_);
  for (int b = 0; b < B; ++b) {
    for (int k = 0; k < K; ++k) {
      x_ref[size_t(b) * K + k] = as_double(k < S_ ? old_h[size_t(b) * S_ + k] : input[size_t(b) * F + k - S_]);
    }
    for (int n = 0; n < N; ++n) {
      double z = as_double(bias[n]);
      for (int k = 0; k < K; ++k) z += x_ref[size_t(b) * K + k] * as_double(weights[size_t(n) * K + k]);
      z_ref[size_t(b) * N + n] = z;
    }
    for (int j = 0; j < S_; ++j) {
      const double* z = &z_ref[size_t(b) * N];
      lltm::cell_forward<double>(z[j], z[S_ + j], z[2 * S_ + j], as_double(old_cell[size_t(b) * S_ + j]),
                                 h_ref[size_t(b) * S_ + j], c_ref[size_t(b) * S_ + j]);
    }
  }
  std::vector<double> got;
  bool guards = take(new_h, h_ref.size(), got);
  report<S>("forward new_h", B, F, S_, TM, CH, TC, rel_err(got, h_ref), guards, tol);
  guards = take(new_cell, c_ref.size(), got);
  report<S>("forward new_cell", B, F, S_, TM, CH, TC, rel_err(got, c_ref), guards, tol);
  guards = take(gates, z_ref.size(), got);
  report<S>("forward gates", B, F, S_, TM, CH, TC, rel_err(got, z_ref), guards, tol);
  guards = take(X, x_ref.size(), got);
  report<S>("forward X", B, F, S_, TM, CH, TC, got == x_ref ? 0.0 : 1.0, guards, tol);
  if (with_acts) {
    std::vector<double> act_ref[3];
    for (auto& a : act_ref) a.resize(size_t(B) * S_);
    for (int b = 0; b < B; ++b) {
      for (int j = 0; j < S_; ++j) {
        const double* z = &z_ref[size_t(b) * N];
        act_ref[0][size_t(b) * S_ + j] = lltm::sigmoid(z[j]);
        act_ref[1][size_t(b) * S_ + j] = lltm::sigmoid(z[S_ + j]);
        act_ref[2][size_t(b) * S_ + j] = lltm::elu(z[2 * S_ + j]);
      }
    }
    const char* names[3] = {"forward input_gate", "forward output_gate", "forward candidate_cell"};
    for (int a = 0; a < 3; ++a) {
      guards = take(acts[a], act_ref[a].size(), got);
      report<S>(names[a], B, F, S_, TM, CH, TC, rel_err(got, act_ref[a]), guards, tol);
    }
  }
}

// mask: bits 0 input, 1 weights, 2 bias, 3 old_h (lltm_backward's output_mask).
template <typename S, int TM, int CH = kChunk, bool TC = false>
void check_backward(int B, int F, int S_, int mask, double tol) {
  const int K = S_ + F, N = 3 * S_;
  const bool want_input = mask & 1, want_dw = mask & 2, want_bias = mask & 4, want_old_h = mask & 8;
  const auto d_gates = random_vector<S>(size_t(B) * N, 1.0), X = random_vector<S>(size_t(B) * K, 1.0),
             weights = random_vector<S>(size_t(N) * K, 1.0 / std::sqrt(double(K)));
  const S g = static_cast<S>(kGuard);
  std::vector<S> d_input(size_t(B) * F + 4, g), d_old_h(size_t(B) * S_ + 4, g),
      d_weights(size_t(N) * K + 4, g), d_bias(N + 4, g);
  // The grid of small_backward_gemms_cuda.
  const int dx_k0 = want_old_h ? 0 : S_, dx_k1 = want_input ? K : S_;
  const int dx_col_tiles = ceil_div(dx_k1 - dx_k0, kDxCols);
  const int dx_blocks = ceil_div(B, kGroups * TM) * dx_col_tiles;
  const int p_col_tiles = want_dw ? ceil_div(K, kPK) : 1;
  const int p_blocks = want_dw || want_bias ? ceil_div(N, kPN) * p_col_tiles : 0;
  BackwardArgs<S> args;
  args.d_gates = d_gates.data();
  args.X = X.data();
  args.weights = weights.data();
  args.d_old_h = want_old_h ? d_old_h.data() : nullptr;
  args.d_input = want_input ? d_input.data() : nullptr;
  args.d_weights = want_dw ? d_weights.data() : nullptr;
  args.d_bias = want_bias ? d_bias.data() : nullptr;
  args.B = B;
  args.N = N;
  args.K = K;
  args.S = S_;
  args.dx_k0 = dx_k0;
  args.dx_k1 = dx_k1;
  args.dx_blocks = dx_blocks;
  args.dx_col_tiles = dx_col_tiles;
  args.p_col_tiles = p_col_tiles;
  if (dx_blocks + p_blocks > 0) {
    launch(dx_blocks + p_blocks, kThreads, 0, [&] { small_backward_kernel<S, TM, CH, TC>(args); });
  }
  std::vector<double> dx_ref(size_t(B) * K, 0.0), dw_ref(size_t(N) * K, 0.0), db_ref(N, 0.0);
  for (int b = 0; b < B; ++b) {
    for (int n = 0; n < N; ++n) {
      const double z = as_double(d_gates[size_t(b) * N + n]);
      db_ref[n] += z;
      for (int k = 0; k < K; ++k) {
        dx_ref[size_t(b) * K + k] += z * as_double(weights[size_t(n) * K + k]);
        dw_ref[size_t(n) * K + k] += z * as_double(X[size_t(b) * K + k]);
      }
    }
  }
  std::vector<double> want_h, want_in, got;
  for (int b = 0; b < B; ++b) {
    for (int k = 0; k < K; ++k) (k < S_ ? want_h : want_in).push_back(dx_ref[size_t(b) * K + k]);
  }
  // An output that is not wanted must stay untouched (all guard values).
  auto untouched = [&](const std::vector<S>& v) {
    std::vector<double> none;
    return take(v, 0, none);
  };
  bool guards;
  guards = want_input ? take(d_input, want_in.size(), got) : untouched(d_input);
  report<S>("backward d_input", B, F, S_, mask, CH, TC, want_input ? rel_err(got, want_in) : 0.0, guards, tol);
  guards = want_old_h ? take(d_old_h, want_h.size(), got) : untouched(d_old_h);
  report<S>("backward d_old_h", B, F, S_, mask, CH, TC, want_old_h ? rel_err(got, want_h) : 0.0, guards, tol);
  guards = want_dw ? take(d_weights, dw_ref.size(), got) : untouched(d_weights);
  report<S>("backward d_weights", B, F, S_, mask, CH, TC, want_dw ? rel_err(got, dw_ref) : 0.0, guards, tol);
  guards = want_bias ? take(d_bias, db_ref.size(), got) : untouched(d_bias);
  report<S>("backward d_bias", B, F, S_, mask, CH, TC, want_bias ? rel_err(got, db_ref) : 0.0, guards, tol);
}

int main() {
  // One tile; every tile edge crossed (B > 64 rows, K > 64 columns, 3S > 96 gate columns,
  // S > 32 state columns); F = 0; the d_X role's column range starting inside a tile (S odd).
  const int shapes[][3] = {{1, 1, 1}, {5, 7, 9}, {70, 20, 50}, {3, 0, 33}, {66, 65, 3}};
  for (const auto& s : shapes) {
    check_forward<float, kRowsPerThreadLarge>(s[0], s[1], s[2], 2e-6);
    for (int mask = 0; mask < 16; ++mask) {
      check_backward<float, kRowsPerThreadLarge>(s[0], s[1], s[2], mask, 2e-6);
      check_backward<float, kRowsPerThreadSmall>(s[0], s[1], s[2], mask, 2e-6);
    }
  }
  check_forward<float, kRowsPerThreadSmall>(40, 3, 21, 2e-6);
  // 32-deep chunks (a tile variant; the launcher uses kChunk).
  for (const auto& s : shapes) {
    check_forward<float, kRowsPerThreadLarge, 32>(s[0], s[1], s[2], 2e-6);
    check_backward<float, kRowsPerThreadLarge, 32>(s[0], s[1], s[2], 15, 2e-6);
    check_backward<float, kRowsPerThreadSmall, 32>(s[0], s[1], s[2], 9, 2e-6);
  }
  check_forward<double, kRowsPerThreadLarge>(70, 20, 50, 1e-12);
  check_backward<double, kRowsPerThreadLarge>(70, 20, 50, 15, 1e-12);
  check_forward<c10::Half, kRowsPerThreadLarge>(9, 7, 40, 2e-3);
  check_backward<c10::Half, kRowsPerThreadSmall>(9, 7, 40, 15, 2e-3);
  check_forward<c10::BFloat16, kRowsPerThreadLarge>(9, 7, 40, 1e-2);
  check_backward<c10::BFloat16, kRowsPerThreadLarge>(9, 7, 40, 15, 1e-2);
  // Tensor-core tiles (sm_80 and newer) as lltm_cuda_small.cu launches them: forward TM = 4
  // with CH = 16 and TM = 2 with CH = 32, backward CH = 32 (plus CH = 16 once each); float32
  // as 3xTF32 (about 2^-20 per product, so a bound 2x the SIMT tiles'), float16 and bfloat16
  // with one MMA per product.
  for (const auto& s : shapes) {
    check_forward<float, kRowsPerThreadLarge, 16, true>(s[0], s[1], s[2], 4e-6);
    check_forward<float, kRowsPerThreadSmall, 32, true>(s[0], s[1], s[2], 4e-6);
    for (int mask : {15, 1, 2, 4, 8, 9, 6}) {
      check_backward<float, kRowsPerThreadLarge, 32, true>(s[0], s[1], s[2], mask, 4e-6);
    }
    check_backward<float, kRowsPerThreadSmall, 32, true>(s[0], s[1], s[2], 15, 4e-6);
  }
  check_forward<float, kRowsPerThreadSmall, 16, true>(40, 3, 21, 4e-6);
  check_backward<float, kRowsPerThreadLarge, 16, true>(70, 20, 50, 15, 4e-6);
  check_backward<float, kRowsPerThreadSmall, 16, true>(70, 20, 50, 9, 4e-6);
  check_forward<c10::Half, kRowsPerThreadLarge, 16, true>(9, 7, 40, 2e-3);
  check_forward<c10::Half, kRowsPerThreadSmall, 32, true>(9, 7, 40, 2e-3);
  check_backward<c10::Half, kRowsPerThreadSmall, 32, true>(9, 7, 40, 15, 2e-3);
  check_forward<c10::BFloat16, kRowsPerThreadLarge, 16, true>(9, 7, 40, 1e-2);
  check_backward<c10::BFloat16, kRowsPerThreadLarge, 32, true>(9, 7, 40, 15, 1e-2);
  std::printf("%d failures\n", failures);
  return failures != 0;
}
"""


@emulation_test
def test_small_path_kernels_emulated_on_cpu(tmp_path):
    """Compiles csrc/lltm/lltm_cuda_small.cuh as host C++ and runs its kernels on the CPU (a
    thread per CUDA thread) with every backward output mask, so that tiling, staging and
    index errors (the d_X role's column range, writes past an output) fail here, GPU or not."""
    run_emulator(EMULATOR, tmp_path)
