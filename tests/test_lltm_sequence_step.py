"""lltm.lltm_sequence on the "step" path (LLTM_SEQUENCE_PATH=step): float32 (3xTF32),
bfloat16 and float16, one tensor-core kernel per step with the cell in its epilogue
(csrc/lltm/lltm_sequence_step*.cu*). Each of its tiles (LLTM_STEP_TILE) against float64 within
twice plain PyTorch's error in the same dtype (check_half of test_lltm_sequence.py; float32:
check_within_twice_plain of test_lltm_sequence_float32.py),
with and without programmatic dependent launch (LLTM_STEP_PDL=0: bitwise the same results),
bitwise deterministic backward, CUDA graph capture, and the error of a forced path that does
not run the problem. The op's own choice reaches this path at large states
(test_lltm_sequence.py's large-state half tests), for the forward only from S = 512 on, with
the backward on the cluster kernels: the two directions share their buffers, which
test_step_forward_cluster_backward checks; float32 reaches it from S = 384 (forward, B >= 64;
S = 512 at B >= 32) and 416 (backward, B >= 32, up to S = 704), and its forward past S = 512
at any batch (test_lltm_sequence_sizes.py's large batches)."""

import pytest
import torch
from conftest import needs_sm90, rel_err
from test_lltm_sequence import (HALF_FLOOR, NAMES, check_graph_capture, check_half, cotangents,
                                make_inputs, reference_results, reference_sequence, run)
from test_lltm_sequence_float32 import check_within_twice_plain

import lltm

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
HALF = [torch.float16, torch.bfloat16]
DTYPES = [torch.float32, *HALF]


@pytest.fixture(autouse=True)
def step_path(monkeypatch):
    monkeypatch.setenv("LLTM_SEQUENCE_PATH", "step")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tile", ["big", "small", "split", "tiny", "tinyk"])
# One tile (S = 8, B = 1), row tails (B = 7, 70, 130), column and k tails (S = 40, 200),
# the benchmark's large states (S = 512 at B = 64, S = 1024), and states that are not a
# multiple of 8, run as the zero-padded problem (S = 1, 33, 129, 1001).
@pytest.mark.parametrize("T,B,F,S", [(5, 1, 3, 8), (12, 7, 6, 40), (4, 70, 5, 200),
                                     (12, 64, 6, 512), (3, 130, 4, 1024), (6, 3, 2, 1),
                                     (9, 7, 5, 33), (5, 33, 4, 129), (3, 5, 3, 1001)])
def test_step_matches_reference(monkeypatch, dtype, tile, T, B, F, S):
    monkeypatch.setenv("LLTM_STEP_TILE", tile)
    if dtype == torch.float32:
        check_within_twice_plain(T, B, F, S)
    else:
        check_half("cuda", dtype, T, B, F, S)


# float32 through long sequences at large states (where auto takes this path in float32):
# the rounding errors that 300 steps accumulate within twice plain PyTorch's.
@pytest.mark.parametrize("T,B,S", [(300, 4, 1024), (300, 33, 520), (300, 4, 1000)])
def test_step_float32_long(T, B, S):
    check_within_twice_plain(T, B, 16, S)


@pytest.mark.parametrize("dtype", DTYPES)
def test_step_without_pdl_same_bits(monkeypatch, dtype):
    T, B, F, S = 9, 33, 5, 128
    inputs = make_inputs(T, B, F, S, "cuda", dtype)
    cots = cotangents(T, B, S)
    with_pdl = run(lltm.lltm_sequence, inputs, cots)
    monkeypatch.setenv("LLTM_STEP_PDL", "0")
    without = run(lltm.lltm_sequence, inputs, cots)
    for name, a, b in zip(NAMES, with_pdl, without):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tile", ["big", "small", "split", "tiny", "tinyk"])
@pytest.mark.parametrize("S", [72, 75])  # 75: the padded problem
def test_step_backward_deterministic(monkeypatch, dtype, tile, S):
    monkeypatch.setenv("LLTM_STEP_TILE", tile)
    T, B, F = 30, 5, 6
    inputs = make_inputs(T, B, F, S, "cuda", dtype)
    cots = cotangents(T, B, S)
    first, second = run(lltm.lltm_sequence, inputs, cots), run(lltm.lltm_sequence, inputs, cots)
    for name, a, b in zip(NAMES, first, second):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("S", [64, 61])  # 61: the padded problem's copies in the graph too
def test_step_graph_capture_forward_and_backward(dtype, S):
    check_graph_capture(dtype, S)


def test_step_forced_unsupported():
    inputs = make_inputs(3, 2, 3, 64, "cuda", torch.float64)
    with pytest.raises(ValueError, match=r"LLTM_SEQUENCE_PATH=step, but .*float16, sm_80\+\)"):
        lltm.lltm_sequence(*inputs)


@needs_sm90
def test_step_forward_cluster_backward(monkeypatch):
    # What the op chooses at S = 512 in the half types (where the cluster kernels run): the
    # forward on the step kernels, the backward on the cluster kernels, each reading what the
    # other wrote (z, h, c in lltm_sequence.h's buffers); and the other way round.
    T, B, F, S, dtype = 9, 7, 5, 256, torch.float16
    want, inputs = reference_results(T, B, F, S)
    cots = cotangents(T, B, S)
    half = [t.to("cuda", dtype) for t in inputs]
    plain = run(reference_sequence, half, cots)
    for first, second in [("step", "persistent"), ("persistent", "step")]:
        monkeypatch.setenv("LLTM_SEQUENCE_PATH", first)
        leaves = [t.detach().clone().requires_grad_() for t in half]
        output, (h_n, c_n) = lltm.lltm_sequence(*leaves)
        g_out, g_h, g_c = (c.to(output) for c in cots)
        loss = (output * g_out).sum() + (h_n * g_h).sum() + (c_n * g_c).sum()
        monkeypatch.setenv("LLTM_SEQUENCE_PATH", second)
        grads = torch.autograd.grad(loss, leaves)
        got = [output.detach(), h_n.detach(), c_n.detach(), *grads]
        for name, g, p, w in zip(NAMES, got, plain, want):
            ours, theirs = rel_err(g, w), rel_err(p, w)
            assert ours <= max(2 * theirs, HALF_FLOOR[dtype]), (first, second, name, ours, theirs)
