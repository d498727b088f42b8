"""lltm_sequence's backward on CUDA: the weight and input gradients as one kernel
(csrc/lltm/lltm_sequence_wgrad.cu) against cuBLAS's GEMMs, each forced through
LLTM_SEQUENCE_WGRAD (fused | gemm; auto takes the kernel up to kFusedWeightGradMacs
multiply-adds, kOverlappedFloatWeightGradMacs in float32 behind the cta path), both checked
against the float64 loop of the tutorial's cell on the CPU: float32 within
test_lltm_sequence.py's tolerance, the half types within twice plain PyTorch's error; odd sizes
(the weight tiles of 64 x 64 and d_input's of 64 x 32 cut everywhere; rows split over CTAs, the
last slice short and not a whole chunk), each gradient asked alone, bitwise determinism and the
variable's bad values. Behind the cta path's recurrence the kernel starts while the recurrence
runs and waits on its published progress (Hopper); behind the other paths it starts after
them: both are checked, in eager calls and in a captured CUDA graph, and with many CTAs
drifting apart. The other sequence tests run the kernel too, wherever auto takes it."""

import pytest
import torch
from conftest import rel_err
from test_lltm_sequence import (F32_TOL, assert_close_to, check_graph_capture, check_half,
                                cotangents, make_inputs, reference_results, run)

import lltm

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

SIZES = [(1, 1, 1, 1), (5, 3, 7, 9), (40, 2, 3, 33), (9, 7, 35, 129), (3, 11, 40, 64),
         (67, 125, 4, 16)]  # the last: 8375 rows; on 132 SMs 43 slices of 192 and one of 119


@pytest.mark.parametrize("mode", ["fused", "gemm"])
@pytest.mark.parametrize("T,B,F,S", SIZES)
def test_float32_matches_reference(monkeypatch, mode, T, B, F, S):
    monkeypatch.setenv("LLTM_SEQUENCE_WGRAD", mode)
    want, inputs = reference_results(T, B, F, S)
    got = run(lltm.lltm_sequence, [t.to("cuda", torch.float32) for t in inputs],
              cotangents(T, B, S))
    assert_close_to(got, want, F32_TOL, f"{mode} T={T} B={B} F={F} S={S}")


@pytest.mark.parametrize("mode", ["fused", "gemm"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("T,B,F,S", [(20, 3, 5, 16), (9, 7, 35, 33), (6, 40, 3, 129)])
def test_half_types(monkeypatch, mode, dtype, T, B, F, S):
    monkeypatch.setenv("LLTM_SEQUENCE_WGRAD", mode)
    check_half("cuda", dtype, T, B, F, S)


@pytest.mark.parametrize("wanted", ["input", "weights", "bias", "weights+bias"])
def test_each_gradient_alone(monkeypatch, wanted):
    """Only some arguments require grad: the kernel writes only the gradients asked for."""
    monkeypatch.setenv("LLTM_SEQUENCE_WGRAD", "fused")
    T, B, F, S = 7, 5, 6, 20
    want, inputs = reference_results(T, B, F, S)
    names = ("input", "weights", "bias", "h0", "c0")
    leaves = [t.to("cuda", torch.float32) for t in inputs]
    leaves = [t.requires_grad_(n in wanted.split("+")) for n, t in zip(names, leaves)]
    output, (h_n, c_n) = lltm.lltm_sequence(*leaves)
    g_out, g_h, g_c = (c.to(output) for c in cotangents(T, B, S))
    loss = (output * g_out).sum() + (h_n * g_h).sum() + (c_n * g_c).sum()
    asked = [t for t in leaves if t.requires_grad]
    got = torch.autograd.grad(loss, asked)
    for g, n in zip(got, [n for n in names if n in wanted.split("+")]):
        err = rel_err(g, want[3 + names.index(n)])
        assert err <= F32_TOL, f"d_{n} alone: relative error {err:.2e}"


def test_fused_deterministic_and_close_to_gemm(monkeypatch):
    T, B, F, S = 64, 16, 32, 128
    _, inputs = reference_results(T, B, F, S)
    args = [t.to("cuda", torch.float32) for t in inputs]
    cots = cotangents(T, B, S)
    monkeypatch.setenv("LLTM_SEQUENCE_WGRAD", "fused")
    first, second = run(lltm.lltm_sequence, args, cots), run(lltm.lltm_sequence, args, cots)
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    monkeypatch.setenv("LLTM_SEQUENCE_WGRAD", "gemm")
    gemm = run(lltm.lltm_sequence, args, cots)
    for a, b in zip(first[3:], gemm[3:]):  # the five gradients: two summation orders
        assert rel_err(a, b) <= 1e-5


def test_variable_bad_value(monkeypatch):
    monkeypatch.setenv("LLTM_SEQUENCE_WGRAD", "sideways")
    _, inputs = reference_results(3, 2, 4, 8)
    with pytest.raises(ValueError, match="LLTM_SEQUENCE_WGRAD must be"):
        run(lltm.lltm_sequence, [t.to("cuda", torch.float32) for t in inputs], cotangents(3, 2, 8))


@pytest.mark.parametrize("path", ["cta", "step", "fallback"])
@pytest.mark.parametrize("T,B,F,S", [(33, 5, 6, 20), (300, 3, 4, 96)])
def test_behind_each_recurrence_path(monkeypatch, path, T, B, F, S):
    """cta publishes its progress (the kernel overlaps it); step and fallback publish none."""
    monkeypatch.setenv("LLTM_SEQUENCE_WGRAD", "fused")
    monkeypatch.setenv("LLTM_SEQUENCE_PATH", path)
    want, inputs = reference_results(T, B, F, S)
    got = run(lltm.lltm_sequence, [t.to("cuda", torch.float32) for t in inputs],
              cotangents(T, B, S))
    assert_close_to(got, want, F32_TOL, f"{path} T={T} B={B} F={F} S={S}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_graph_capture_with_the_kernel(monkeypatch, dtype):
    """The overlapped launch (programmatic stream serialization) captured and replayed."""
    monkeypatch.setenv("LLTM_SEQUENCE_WGRAD", "fused")
    monkeypatch.setenv("LLTM_SEQUENCE_PATH", "cta")
    check_graph_capture(dtype, 64, T=40, B=6, F=12)


def test_overlap_many_ctas_matches_gemm(monkeypatch):
    """Many recurrence CTAs drifting apart over a long sequence: the kernel must wait for each
    of them (a count summed over the CTAs let it read rows a slow CTA had not written).
    Repeated runs bitwise equal, and within float32 rounding of the GEMMs."""
    T, B, F, S = 400, 200, 8, 32
    args = make_inputs(T, B, F, S, "cuda", torch.float32, seed=5)
    cots = cotangents(T, B, S)
    monkeypatch.setenv("LLTM_SEQUENCE_PATH", "cta")
    monkeypatch.setenv("LLTM_SEQUENCE_WGRAD", "gemm")
    gemm = run(lltm.lltm_sequence, args, cots)
    monkeypatch.setenv("LLTM_SEQUENCE_WGRAD", "fused")
    first = run(lltm.lltm_sequence, args, cots)
    for _ in range(4):
        again = run(lltm.lltm_sequence, args, cots)
        for a, b in zip(first, again):
            assert torch.equal(a, b)
    for a, b in zip(first[3:], gemm[3:]):
        assert rel_err(a, b) <= 1e-5
