"""TimeX's on-chip FFT kernels on CUDA, past what tests/test_rwkv_fft.py checks of every forced
algorithm: the one-CTA kernels' backward work splits and their lengths 3 x 2^k and 5 x 2^k
(csrc/rwkv/timex_fft_kernels.cuh, timex_fft_backward.cuh), and the thread-block-cluster kernels
past one CTA's shared memory (timex_fft_cluster*.cu*), each against float64 and PyTorch's FFT
convolution."""

import pytest
import torch
from conftest import needs_sm90, rel_err
from test_rwkv_fft import (HALF_TOL, check_graph_capture, cuda_only, make, max_rel, ours,
                           reference)

import rwkv_ops
from rwkv_ops.reference import timex_fftconv


@cuda_only
@pytest.mark.parametrize("shape, wide", [((2, 300, 16384), "auto"), ((5, 60, 16384), "auto"),
                                         ((3, 400, 4097), "auto"), ((16, 7, 1024), "0"),
                                         ((16, 7, 1024), "1"), ((1, 1, 999), "0"),
                                         ((1, 1, 999), "1"), ((3, 400, 2100), "1")])
def test_fused_backward_work_splits(shape, wide, monkeypatch):
    """The one-CTA backward kernel (csrc/rwkv/timex_fft_backward.cuh) in each of its work
    splits on the H100: more channels than resident CTAs (a CTA loops over channels), b in
    uneven ranges (5 rows in 2 items: partial sums, added by the item that ends last), one row
    per item, ranges of rows across channels ((3, 400, 4097): 1200 rows on 396 resident CTAs;
    (3, 400, 2100) on the wide CTAs), B = C = 1 at odd T; at M = 1024 and 2560 on the wide CTAs
    (RWKV_TIMEX_FUSED_WIDE=1) and the 16-value ones (0). float32-accurate against float64 (at
    most 2x the error of PyTorch's float32 FFT convolution, and within 2e-6), deterministic,
    and the eager path (the spectra of W and k kept from the forward; of W alone with
    RWKV_TIMEX_FUSED_KEEP_K=0; without the conv kernel's L2 prefetch,
    RWKV_TIMEX_FUSED_PREFETCH=0; the conv kernel after the spectrum kernel instead of
    overlapping its last CTAs, RWKV_TIMEX_FUSED_PDL=0) the same bits as the ops, call after
    call (a read of spectra or sums still being written would show as a difference)."""
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "fft_fused")
    monkeypatch.setenv("RWKV_TIMEX_FUSED_WIDE", wide)
    w, k, g = make(*shape, "cuda", torch.float32)
    assert rwkv_ops.timex_algorithm(k) == "fft_fused"
    got = ours(w, k, g, 0.2)
    want = reference(w, k, g, 0.2)
    w32, k32 = (t.detach().clone().requires_grad_() for t in (w, k))
    out = timex_fftconv(w32, k32, 0.2)
    peer = [out.detach(), *torch.autograd.grad(out, [w32, k32], g)]
    for name, e, p in zip(["out", "grad_w", "grad_k"], errors(got, want), errors(peer, want)):
        assert e <= max(2 * p, 1e-7) and e < 2e-6, (shape, name, e, p)
    for a, b in zip(ours(w, k, g, 0.2), got):
        assert torch.equal(a, b)
    for keep_k, prefetch, pdl in (("1", "1", "1"), ("1", "1", "1"), ("0", "1", "1"),
                                  ("1", "0", "1"), ("1", "1", "0")):
        monkeypatch.setenv("RWKV_TIMEX_FUSED_KEEP_K", keep_k)
        monkeypatch.setenv("RWKV_TIMEX_FUSED_PREFETCH", prefetch)
        monkeypatch.setenv("RWKV_TIMEX_FUSED_PDL", pdl)
        wg, kg = (t.clone().requires_grad_() for t in (w, k))
        out = rwkv_ops.timex(wg, kg, 0.2)
        for a, b in zip([out, *torch.autograd.grad(out, [wg, kg], g)], got):
            assert torch.equal(a, b), (keep_k, prefetch, pdl)


# Rows past one CTA's shared memory (T > 16384): the thread-block-cluster kernels (forced; auto
# takes them too, up to T = 65536), in every dtype they take, at odd, prime and power-of-two
# lengths: each cluster length M (cluster_m) at its shortest and longest T and between.
LONG_LENGTHS = [16385, 16411, 20000, 20480, 20481, 24576, 24577, 32768, 32771, 40960, 40961,
                44100, 49152,
                49153, 65536]


def errors(got, want):
    return [max_rel(a, b) for a, b in zip(got, want)]


def cluster_m(T):
    """The cluster kernels' row length for T (timex_fft_cluster.cu: cluster_length): 2 or 4 x
    10240, 3 x 8192, 4 x 12288, 2 or 4 x 16384, the shortest >= T."""
    return next(m for m in (20480, 24576, 32768, 40960, 49152, 65536) if T <= m)


@needs_sm90
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("T", LONG_LENGTHS)
def test_cluster_kernels_at_long_t(T, dtype, monkeypatch):
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "fft_cluster")
    w, k, g = make(2, 3, T, "cuda", dtype)
    assert rwkv_ops.timex_algorithm(k) == "fft_cluster"
    check_on_chip(w, k, g)


def check_on_chip(w, k, g):
    """The on-chip FFT kernels' bar: float32 at most 2x the error of PyTorch's float32 FFT
    convolution (cuFFT) on the same inputs and within the one-CTA kernels' 2e-6; the half types
    within HALF_TOL; deterministic; eager autograd (spectra kept from the forward) the same
    bits as the ops."""
    dtype = k.dtype
    want = reference(w, k, g, 0.3)
    got = ours(w, k, g, 0.3)
    for a in got:
        assert a.dtype == dtype
    if dtype == torch.float32:
        w32, k32 = (t.detach().clone().requires_grad_() for t in (w, k))
        out = timex_fftconv(w32, k32, 0.3)
        peer = [out.detach(), *torch.autograd.grad(out, [w32, k32], g)]
        mine, theirs = errors(got, want), errors(peer, want)
        for name, e, p in zip(["out", "grad_w", "grad_k"], mine, theirs):
            assert e <= 2 * p and e < 2e-6, (name, e, p)
    else:
        for name, a, b in zip(["out", "grad_w", "grad_k"], got, want):
            assert rel_err(a, b) < HALF_TOL[dtype], (name, rel_err(a, b))
    for a, b in zip(ours(w, k, g, 0.3), got):  # deterministic: the same bits
        assert torch.equal(a, b)
    wg, kg = (t.clone().requires_grad_() for t in (w, k))
    out = rwkv_ops.timex(wg, kg, 0.3)
    for a, b in zip([out, *torch.autograd.grad(out, [wg, kg], g)], got):
        assert torch.equal(a, b)


# The one-CTA kernels' lengths M = 3 x 2^k and 5 x 2^k (a last stage of radix 3, 5, 6, 10, 12
# or 20: 1536 for 1024 < T <= 1536, 2560 for 2048 < T <= 2560, ..., 10240 and 12288 past 8192),
# each at its shortest and longest T.
ODD_LENGTHS = [1025, 1100, 1536, 2049, 2560, 2561, 3072, 4097, 5120, 5121, 6144, 8193, 10240,
               10241, 12288]


def fused_m(T):
    """The one-CTA kernels' M for T (fft_length): the shortest of 2^k, 3 x 2^k and 5 x 2^k that
    is >= T (the last two from 1536 on)."""
    m = 1 << (T - 1).bit_length()
    return min(x for x in (m, m // 4 * 3, m // 8 * 5) if x >= T and (x == m or x >= 1536))


@cuda_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("T", ODD_LENGTHS)
def test_fused_kernels_odd_lengths(T, dtype, monkeypatch):
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "fft_fused")
    w, k, g = make(2, 3, T, "cuda", dtype)
    assert rwkv_ops.timex_algorithm(k) == "fft_fused"
    wz = torch.ops.rwkv_ops.timex_forward_keep(w, k, 0.3)[2]  # W's spectra, then k's
    assert wz.shape == (3 * (1 + 2), fused_m(T)) and fused_m(T) % 3 * (fused_m(T) % 5) == 0
    check_on_chip(w, k, g)


# A T for each length that the wide CTAs are built for (M = 512, 1024, 1536, 2048, 2560:
# kWideMinM to kWideMaxM in csrc/rwkv/timex_fft_kernels.cuh), at both ends of 2560's.
WIDE_LENGTHS = [300, 1000, 1100, 2048, 2049, 2560]


@cuda_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fused_wide_ctas(dtype, monkeypatch):
    """The one-CTA kernels on the wide CTAs (RWKV_TIMEX_FUSED_WIDE=1: M / 8 threads of 8 values
    each) and on the 16-value ones (0) at every length that the wide ones are built for: each
    within the on-chip bar (check_on_chip: accuracy, determinism, the eager path's bits), the
    two not the same bits in float32 (other stages, other roundings: the switch took effect).
    auto's choice: the wide CTAs' bits with 512 channels and 1024 rows, the others' with 1024
    channels; any other value raises ValueError naming the variable. CUDA graph capture on the
    wide CTAs."""
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "fft_fused")
    for T in WIDE_LENGTHS:
        w, k, g = make(2, 3, T, "cuda", dtype)
        got = {}
        for wide in ("1", "0"):
            monkeypatch.setenv("RWKV_TIMEX_FUSED_WIDE", wide)
            check_on_chip(w, k, g)
            got[wide] = ours(w, k, g, 0.3)
        if dtype == torch.float32:
            assert not all(torch.equal(a, b) for a, b in zip(got["1"], got["0"])), T
    if dtype == torch.float32:
        for shape, picked in [((2, 512, 2048), "1"), ((2, 1024, 2048), "0")]:
            w, k, g = make(*shape, "cuda", dtype)
            monkeypatch.setenv("RWKV_TIMEX_FUSED_WIDE", picked)
            want = ours(w, k, g, 0.3)
            monkeypatch.setenv("RWKV_TIMEX_FUSED_WIDE", "auto")
            for a, b in zip(ours(w, k, g, 0.3), want):
                assert torch.equal(a, b), shape
    monkeypatch.setenv("RWKV_TIMEX_FUSED_WIDE", "1")
    check_graph_capture((2, 3, 1100), dtype)
    monkeypatch.setenv("RWKV_TIMEX_FUSED_WIDE", "yes")
    w, k, _ = make(2, 3, 1100, "cuda", dtype)
    with pytest.raises(ValueError, match="RWKV_TIMEX_FUSED_WIDE must be"):
        rwkv_ops.timex(w.detach(), k.detach())


@cuda_only
def test_fused_length_switches(monkeypatch):
    """T = 2100 runs on M = 2560, with RWKV_TIMEX_FUSED_RADIX5=0 on 3072, with both switches 0
    on 4096: results within 2e-6 of each other, not the same bits; a backward given another
    length's kept spectra refuses them. CUDA graph capture at M = 2560 and 1536."""
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "fft_fused")
    w, k, g = make(2, 5, 2100, "cuda", torch.float32)
    five = ours(w, k, g, 0.1)
    _, kz, wz = torch.ops.rwkv_ops.timex_forward_keep(w, k, 0.1)
    assert wz.shape == (5 * (1 + 2), 2560)
    for switches, m in [(("RWKV_TIMEX_FUSED_RADIX5",), 3072),
                        (("RWKV_TIMEX_FUSED_RADIX5", "RWKV_TIMEX_FUSED_RADIX3"), 4096)]:
        for name in switches:
            monkeypatch.setenv(name, "0")
        assert torch.ops.rwkv_ops.timex_forward_keep(w, k, 0.1)[2].shape == (5 * (1 + 2), m)
        other = ours(w, k, g, 0.1)
        for name, a, b in zip(["out", "grad_w", "grad_k"], other, five):
            assert max_rel(a, b) < 2e-6 and not torch.equal(a, b), (m, name)
        with pytest.raises(ValueError, match="spectra that timex_forward_keep returned"):
            torch.ops.rwkv_ops.timex_backward_kept(g, w, k, kz, wz)
    monkeypatch.delenv("RWKV_TIMEX_FUSED_RADIX5")
    monkeypatch.delenv("RWKV_TIMEX_FUSED_RADIX3")
    check_graph_capture((2, 5, 2100), torch.float32)
    check_graph_capture((3, 2, 1100), torch.bfloat16)


@needs_sm90
def test_cluster_kernels_odd_channels_and_graph_capture(monkeypatch):
    """B = C = 1 and many channels (more than the wgrad kernel's resident clusters: a cluster
    does several channels; at M = 24576 three CTAs per SM, at 40960 two), misaligned (odd) T,
    M = 49152 where RWKV_TIMEX_CLUSTER_P5=0 skips 40960, local lengths that are powers of two
    alone (RWKV_TIMEX_CLUSTER_ODD_L=0: 40960 as 5 CTAs of 8192, 49152 as 3 of 16384, no
    20480), the Spread scheduling policy (RWKV_TIMEX_CLUSTER_BALANCED=0), and CUDA graph
    capture at T = 40001."""
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "fft_cluster")
    for shape in [(1, 1, 40001), (1, 1, 16411), (2, 300, 17000), (1, 150, 44100),
                  (2, 200, 36001), (1, 1, 32769)]:
        w, k, g = make(*shape, "cuda", torch.float32)
        for name, a, b in zip(["out", "grad_w", "grad_k"], ours(w, k, g, 0.1),
                              reference(w, k, g, 0.1)):
            assert max_rel(a, b) < 2e-6, (shape, name)
    w, k, g = make(2, 3, 39999, "cuda", torch.float32)
    p5 = ours(w, k, g, 0.1)

    def kept_m():  # the cluster length M of the kept spectra
        return torch.ops.rwkv_ops.timex_forward_keep(w.detach(), k.detach(), 0.1)[2].shape[-1]

    assert kept_m() == 40960
    monkeypatch.setenv("RWKV_TIMEX_CLUSTER_P5", "0")
    assert kept_m() == 49152
    for name, a, b in zip(["out", "grad_w", "grad_k"], ours(w, k, g, 0.1), p5):
        assert max_rel(a, b) < 2e-6 and not torch.equal(a, b), name
    monkeypatch.delenv("RWKV_TIMEX_CLUSTER_P5")
    # Local lengths that are powers of two alone (RWKV_TIMEX_CLUSTER_ODD_L=0): M = 40960 as 5
    # CTAs of 8192 instead of 4 of 10240 (the same length, other roundings); 49152 as 3 x 16384
    # instead of 4 x 12288; T = 20000 at 24576 instead of 20480.
    monkeypatch.setenv("RWKV_TIMEX_CLUSTER_ODD_L", "0")
    assert kept_m() == 40960
    for name, a, b in zip(["out", "grad_w", "grad_k"], ours(w, k, g, 0.1), p5):
        assert max_rel(a, b) < 2e-6 and not torch.equal(a, b), name
    for T, odd_m, m in [(44100, 49152, 49152), (20000, 20480, 24576)]:
        w2, k2, g2 = make(1, 2, T, "cuda", torch.float32)
        two = ours(w2, k2, g2, 0.1)
        assert torch.ops.rwkv_ops.timex_forward_keep(w2, k2, 0.1)[2].shape[-1] == m
        monkeypatch.delenv("RWKV_TIMEX_CLUSTER_ODD_L")
        assert torch.ops.rwkv_ops.timex_forward_keep(w2, k2, 0.1)[2].shape[-1] == odd_m
        for name, a, b in zip(["out", "grad_w", "grad_k"], ours(w2, k2, g2, 0.1), two):
            assert max_rel(a, b) < 2e-6 and not torch.equal(a, b), (T, name)
        monkeypatch.setenv("RWKV_TIMEX_CLUSTER_ODD_L", "0")
    monkeypatch.delenv("RWKV_TIMEX_CLUSTER_ODD_L")
    # The Spread scheduling policy (fewer resident clusters at L = 8192: 124 against 132 on the
    # H200, so other clusters do the 200 channels): the same bits.
    w, k, g = make(1, 200, 24000, "cuda", torch.float32)
    balanced = ours(w, k, g, 0.1)
    monkeypatch.setenv("RWKV_TIMEX_CLUSTER_BALANCED", "0")
    for a, b in zip(ours(w, k, g, 0.1), balanced):
        assert torch.equal(a, b)
    monkeypatch.delenv("RWKV_TIMEX_CLUSTER_BALANCED")
    w, k, g = make(1, 2, 40001, "cuda", torch.float32)
    ours(w, k, g, 0.1)
    static = [t.clone() for t in (w, k, g)]
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ours(*static, 0.1)
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        outs = ours(*static, 0.1)
    for t in static:
        t.mul_(0.5)
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(outs, ours(*static, 0.1)):
        assert torch.equal(a, b)


@needs_sm90
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 3, 32768), (1, 2, 65536), (2, 5, 20011), (3, 1, 40001),
                                   (1, 70, 32768), (1, 70, 49152), (2, 90, 22050),
                                   (1, 90, 40960)])
def test_cluster_forward_in_one_kernel(shape, dtype, monkeypatch):
    """The cluster forward as one kernel (W's spectrum and the convolution by the same cluster,
    RWKV_TIMEX_CLUSTER_FORWARD=fused; auto where it takes no more waves), with each setting of
    its L2 prefetch and barriers: the same bits as the spectrum + conv kernels (split), out and
    the spectra of W and k kept for the backward; the backward from them the same bits as the
    op's; float32-accurate against float64 on fresh inputs; a bad value raises."""
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "fft_cluster")
    B, C, T = shape
    w = (torch.randn(C, T, device="cuda") / T**0.5).to(dtype)
    k = torch.randn(B, C, T, device="cuda").to(dtype)
    got = {}
    for setting in [("split", "2", "1"), ("fused", "2", "1"), ("fused", "1", "1"),
                    ("fused", "0", "1"), ("fused", "2", "0"), ("auto", "2", "1")]:
        for var, value in zip(["FORWARD", "PREFETCH", "RELAXED"], setting):
            monkeypatch.setenv(f"RWKV_TIMEX_CLUSTER_{var}", value)
        got[setting] = torch.ops.rwkv_ops.timex_forward_keep(w, k, 0.3)
        assert torch.equal(torch.ops.rwkv_ops.timex_forward(w, k, 0.3), got[setting][0])
    base = got["split", "2", "1"]
    for key, (out, kz, wz) in got.items():
        # W's spectra, then k's (the backward reads them instead of transforming k)
        assert kz.dtype == torch.uint8 and wz.shape == (C * (1 + B), cluster_m(T)), key
        assert torch.equal(out, base[0]) and torch.equal(wz, base[2]), key
        assert torch.equal(kz, base[1]), key  # the twiddle tables
    # The backward from the kept spectra (k's read, not transformed again; the one-pass kernel
    # where C fills the resident clusters, else conv + wgrad): the bits of the ops' own.
    g = torch.randn(B, C, T, device="cuda").to(dtype)
    want_grads = torch.ops.rwkv_ops.timex_backward(g, w, k)
    grads = torch.ops.rwkv_ops.timex_backward_kept(g, w, k, base[1], base[2])
    for a, b in zip(grads, want_grads):
        assert torch.equal(a, b)
    if dtype == torch.float32:
        want = timex_fftconv(w.double(), k.double(), 0.3)
        peer = timex_fftconv(w, k, 0.3)
        assert max_rel(base[0], want) <= max(2 * max_rel(peer, want), 1e-6)
    monkeypatch.setenv("RWKV_TIMEX_CLUSTER_FORWARD", "both")
    with pytest.raises(ValueError, match="RWKV_TIMEX_CLUSTER_FORWARD must be"):
        torch.ops.rwkv_ops.timex_forward(w, k, 0.3)


HALVES_H = 32768  # timex_fft_fused.h kHalvesH


# Every dtype at few channels; more channels than resident clusters in float32.
HALVES_CASES = [(shape, dtype) for shape in [(2, 3, 32769), (1, 1, 40001), (3, 2, 49153),
                                             (1, 2, 65535), (2, 3, 65536)]
                for dtype in (torch.float32, torch.bfloat16, torch.float16)]
HALVES_CASES.append(((1, 150, 65536), torch.float32))


@needs_sm90
@pytest.mark.parametrize("shape,dtype", HALVES_CASES)
def test_cluster_halves(shape, dtype, monkeypatch):
    """Rows of 32768 < T <= 65536 as two halves on 2-CTA clusters (RWKV_TIMEX_CLUSTER_HALVES=on;
    timex_fft_cluster_halves.cuh): out and both gradients against float64 (float32: within 2x
    PyTorch's float32 FFT convolution; half types: HALF_TOL), deterministic, the forward
    with the spectra per channel and split to the bit, the backward from either's kept spectra
    (W's and k's halves', (C + B C, 2, H)) and eager autograd to the bit of the ops; more
    channels than resident clusters at C = 150."""
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "fft_cluster")
    monkeypatch.setenv("RWKV_TIMEX_CLUSTER_HALVES", "on")
    B, C, T = shape
    w, k, g = make(B, C, T, "cuda", dtype)
    want = reference(w, k, g, 0.3)
    got = ours(w, k, g, 0.3)
    if dtype == torch.float32:
        w32, k32 = (t.detach().clone().requires_grad_() for t in (w, k))
        out = timex_fftconv(w32, k32, 0.3)
        peer = [out.detach(), *torch.autograd.grad(out, [w32, k32], g)]
        for name, e, p in zip(["out", "grad_w", "grad_k"], errors(got, want), errors(peer, want)):
            assert e <= 2 * p and e < 2e-6, (name, e, p)
    else:
        for name, a, b in zip(["out", "grad_w", "grad_k"], got, want):
            assert a.dtype == dtype and rel_err(a, b) < HALF_TOL[dtype], (name, rel_err(a, b))
    for a, b in zip(ours(w, k, g, 0.3), got):
        assert torch.equal(a, b)
    for mode in ("fused", "split"):
        monkeypatch.setenv("RWKV_TIMEX_CLUSTER_FORWARD", mode)
        out, kz, wz = torch.ops.rwkv_ops.timex_forward_keep(w, k, 0.3)
        assert torch.equal(out, got[0]), mode
        # W's spectra [W0, Wf] per channel, then k's [K0, K1] per row, for the backward
        assert kz.dtype == torch.uint8 and wz.shape == (C * (1 + B), 2, HALVES_H), mode
        grads = torch.ops.rwkv_ops.timex_backward_kept(g, w, k, kz, wz)  # k's read, not made
        for a, b in zip(grads, got[1:]):
            assert torch.equal(a, b), mode
    wg, kg = (t.clone().requires_grad_() for t in (w, k))
    out = rwkv_ops.timex(wg, kg, 0.3)
    for a, b in zip([out, *torch.autograd.grad(out, [wg, kg], g)], got):
        assert torch.equal(a, b)


@needs_sm90
def test_cluster_halves_choice_kept_spectra_and_capture(monkeypatch):
    """auto takes the halves at (1, 64, 65536) (one wave of 2-CTA clusters against three of
    4-CTA ones), not at (1, 8, 65536) nor T <= 49152; spectra kept by one layout and used
    after RWKV_TIMEX_CLUSTER_HALVES changed are recomputed (the right gradients, not a
    misread); a bad value raises; CUDA graph capture."""
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "auto")
    for (B, C, T), halves in [((1, 64, 65536), True), ((1, 8, 65536), False),
                              ((1, 64, 49152), False), ((1, 200, 60000), True)]:
        k = torch.zeros(B, C, T, device="cuda")
        w = torch.zeros(C, T, device="cuda")
        wz = torch.ops.rwkv_ops.timex_forward_keep(w, k, 0.0)[2]
        assert (wz.dim() == 3) == halves, (B, C, T)
    w, k, g = make(1, 3, 50001, "cuda", torch.float32)
    want = reference(w, k, g, 0.1)
    for first, then in (("on", "off"), ("off", "on")):
        monkeypatch.setenv("RWKV_TIMEX_CLUSTER_HALVES", first)
        wg, kg = (t.clone().requires_grad_() for t in (w, k))
        out = rwkv_ops.timex(wg, kg, 0.1)
        monkeypatch.setenv("RWKV_TIMEX_CLUSTER_HALVES", then)
        grads = torch.autograd.grad(out, [wg, kg], g)
        for name, a, b in zip(["out", "grad_w", "grad_k"], [out, *grads], want):
            assert max_rel(a, b) < 2e-6, (first, then, name)
    monkeypatch.setenv("RWKV_TIMEX_CLUSTER_HALVES", "yes")
    with pytest.raises(ValueError, match="RWKV_TIMEX_CLUSTER_HALVES must be"):
        torch.ops.rwkv_ops.timex_forward(w, k, 0.1)
    monkeypatch.setenv("RWKV_TIMEX_CLUSTER_HALVES", "on")
    check_graph_capture((1, 3, 50001), torch.float32)
