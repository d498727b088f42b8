"""TimeX's algorithms (direct Toeplitz kernels, FFT convolution), each forced through
RWKV_TIMEX_ALGO, against float64 references, and the choice between them."""

import pytest
import torch
from conftest import DEVICES, needs_sm90, rel_err

import rwkv_ops
from rwkv_ops.reference import timex_conv1d, timex_fftconv

cuda_only = pytest.mark.skipif("cuda" not in DEVICES, reason="needs a CUDA GPU")

# Forced algorithms per device: on the CPU "fft" and "fft_library" are the same path. On CUDA
# "fft_fused" (one CTA per row, T <= 16384), "fft_cluster" (a thread-block cluster per row,
# T <= 65536, sm_90; below 16384 at the cost of M = 32768) and "fft_tc" (tensor cores, half
# types, T <= 8192: tests/test_rwkv_fft_tc.py) run where they can, else "fft".
ALGOS = {"cpu": ["direct", "fft"],
         "cuda": ["direct", "fft", "fft_library", "fft_fused", "fft_cluster", "fft_tc"]}
CASES = [(d, a) for d in DEVICES for a in ALGOS[d]]
# The crossover lengths of the "auto" choice (csrc/rwkv/timex.cpp, timex_cuda.cu).
CROSSOVER = {("cpu", torch.float32): 512, ("cpu", torch.float64): 256,
             ("cuda", torch.float32): 640, ("cuda", torch.float64): 256}
LENGTHS = [1, 2, 63, 64, 65, 1000, 1100, 4096, 4097, 10007, 16384, 65536]


@pytest.fixture(params=CASES, ids=[f"{d}-{a}" for d, a in CASES])
def forced(request, monkeypatch):
    device, algo = request.param
    monkeypatch.setenv("RWKV_TIMEX_ALGO", algo)
    return device, algo


def make(B, C, T, device, dtype=torch.float64):
    gen = torch.Generator().manual_seed(B * 1000003 + C * 1009 + T)
    w = torch.randn(C, T, generator=gen, dtype=torch.float64) / T**0.5
    k = torch.randn(B, C, T, generator=gen, dtype=torch.float64)
    g = torch.randn(B, C, T, generator=gen, dtype=torch.float64)
    return [t.to(device, dtype) for t in (w, k, g)]


def reference(w, k, g, eps):
    """out, grad_w, grad_k in float64 (conv1d up to T = 4096, the float64 FFT above)."""
    w64, k64 = (t.detach().double().requires_grad_() for t in (w, k))
    fn = timex_conv1d if k.shape[-1] <= 4096 else timex_fftconv
    out = fn(w64, k64, eps)
    return [out.detach(), *torch.autograd.grad(out, [w64, k64], g.double())]


def ours(w, k, g, eps):
    return [torch.ops.rwkv_ops.timex_forward(w, k, eps),
            *torch.ops.rwkv_ops.timex_backward(g, w, k)]


def max_rel(got, want):
    """max |got - want| / max |want|: every element counts, not only the norm."""
    got, want = got.double().to(want.device), want
    scale = want.abs().max().item()
    return (got - want).abs().max().item() / (scale if scale > 0 else 1.0)


@pytest.mark.parametrize("T", LENGTHS)
def test_float32_against_float64(forced, T):
    device, algo = forced
    shapes = [(1, 1, T), (3, 5, T)] if T <= 16384 else [(1, 1, T), (3, 1, T)]
    for shape in shapes:
        w, k, g = make(*shape, device, torch.float32)
        want = reference(w, k, g, 0.3)
        got = ours(w, k, g, 0.3)
        for name, a, b in zip(["out", "grad_w", "grad_k"], got, want):
            assert a.dtype == torch.float32 and a.shape == b.shape, name
            # 2e-6 (the FFT's bound) elementwise; the direct kernels' sums of T float products
            # grow as sqrt(T) ulps: 1e-5 relative at T = 65536 in the norm.
            err = max_rel(a, b) if algo != "direct" else rel_err(a, b)
            assert err < (2e-6 if algo != "direct" else 1e-5), (name, shape, err)


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 7), (3, 2, 65), (2, 3, 1000), (1, 2, 4097)])
def test_float64_matches_reference(forced, shape):
    device, _ = forced
    w, k, g = make(*shape, device)
    for a, b in zip(ours(w, k, g, 0.3), reference(w, k, g, 0.3)):
        torch.testing.assert_close(a, b.to(device), rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("T", [65, 4097])
def test_half_types(forced, dtype, tol, T):
    device, _ = forced
    w, k, g = make(3, 5, T, device, dtype)
    for a, b in zip(ours(w, k, g, 0.3), reference(w, k, g, 0.3)):
        assert a.dtype == dtype
        assert rel_err(a, b) < tol


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 5), (3, 2, 33)])
def test_gradcheck(forced, shape):
    device, _ = forced
    w, k, _ = make(*shape, device)
    w.requires_grad_()
    k.requires_grad_()
    assert torch.autograd.gradcheck(lambda w, k: rwkv_ops.timex(w, k, 0.5), (w, k))
    assert torch.autograd.gradgradcheck(lambda w, k: rwkv_ops.timex(w, k, 0.5), (w, k))


def test_opcheck(forced):
    device, _ = forced
    w, k, g = make(3, 4, 300, device)
    torch.library.opcheck(torch.ops.rwkv_ops.timex_forward.default, (w, k, 0.5))
    torch.library.opcheck(torch.ops.rwkv_ops.timex_backward.default, (g, w, k))


def test_deterministic_at_long_t(forced):
    device, _ = forced
    w, k, g = make(4, 3, 16384, device, torch.float32)
    first = ours(w, k, g, 0.1)
    for _ in range(2):
        for a, b in zip(ours(w, k, g, 0.1), first):
            assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_algorithms_agree_at_the_crossover(device, dtype, monkeypatch):
    crossover = CROSSOVER[device, dtype]
    for T in (crossover, crossover + 1):
        w, k, g = make(2, 3, T, device, dtype)
        results = {}
        for algo in ("direct", "fft", "auto"):
            monkeypatch.setenv("RWKV_TIMEX_ALGO", algo)
            results[algo] = ours(w, k, g, 0.2)
        tol = 3e-6 if dtype == torch.float32 else 1e-12
        for a, b in zip(results["direct"], results["fft"]):
            assert rel_err(a, b) < tol, T
        # auto is the direct kernels up to the crossover, the FFT after it.
        monkeypatch.setenv("RWKV_TIMEX_ALGO", "auto")
        assert (rwkv_ops.timex_algorithm(k) == "direct") == (T <= crossover)
        picked = results["direct" if T <= crossover else "fft"]
        for a, b in zip(results["auto"], picked):
            assert torch.equal(a, b), T


def test_compile_fullgraph_and_module_at_long_t(forced):
    device, _ = forced
    torch.manual_seed(0)
    layer = rwkv_ops.TimeX(3, 5000, eps=0.25).to(device)  # w sliced to the last T columns
    k = torch.randn(2, 3, 4100, device=device, requires_grad=True)

    def step(k):
        return layer(k).square().sum()

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)
    want = reference(layer.w[:, -4100:], k, torch.ones_like(k), 0.25)
    got_loss = compiled(k)
    gw, gk = torch.autograd.grad(got_loss, [layer.w, k])
    out = layer(k)
    assert max_rel(out.detach(), want[0]) < 2e-6 or rel_err(out, want[0]) < 1e-5
    grad = 2 * out.detach()
    want = reference(layer.w[:, -4100:], k, grad, 0.25)
    assert torch.equal(gw[:, :900], torch.zeros_like(gw[:, :900]))  # columns not used
    assert rel_err(gw[:, 900:], want[1]) < 1e-5 and rel_err(gk, want[2]) < 1e-5


def check_graph_capture(shape, dtype):
    """ours() on shape (B, C, T) captured in a CUDA graph (after a warm-up outside it, so that
    plans and workspaces exist) and replayed on new inputs: the replay gives the eager call's
    bits on those inputs, which differ from the first inputs' results."""
    w, k, g = make(*shape, "cuda", dtype)
    want = ours(w, k, g, 0.1)  # warm-up: plans and workspaces exist before the capture
    static = [t.clone() for t in (w, k, g)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ours(*static, 0.1)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = ours(*static, 0.1)
    for t, src in zip(static, make(*shape, "cuda", dtype)):
        t.copy_(src * 0.5)
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(outs, ours(*static, 0.1)):
        assert torch.equal(a, b)
    for a, b in zip(outs, want):  # out is eps + linear: grads halve, out - eps halves
        assert not torch.equal(a, b)


@cuda_only
@pytest.mark.parametrize("algo", ALGOS["cuda"])
def test_cuda_graph_capture(algo, monkeypatch):
    monkeypatch.setenv("RWKV_TIMEX_ALGO", algo)
    check_graph_capture((2, 3, 8192), torch.float32)


def test_forced_algorithm_is_reported(forced):
    device, algo = forced
    k = torch.randn(2, 3, 5000, device=device)
    got = rwkv_ops.timex_algorithm(k)
    if algo == "direct":
        assert got == "direct"
    elif device == "cpu" or algo == "fft_library":
        assert got == "fft_library"
    elif algo == "fft_cluster" and torch.cuda.get_device_capability(k.device)[0] >= 9:
        assert got == "fft_cluster"
    else:
        assert got in ("fft_fused", "fft_library")
    if device == "cuda" and algo in ("fft", "fft_fused", "fft_cluster"):
        # Past one CTA: the cluster kernels up to T = 65536 (their M, cluster_m, is within 3/2
        # of the library's 2^a 3^b 5^c 7^d at every such T), past it the library.
        sm90 = torch.cuda.get_device_capability()[0] >= 9
        for T, cluster in [(16385, True), (20000, True), (22050, True), (24577, True),
                           (32768, True), (32769, True), (40000, True), (44100, True),
                           (49153, True), (60000, True), (65536, True), (65537, False)]:
            long = torch.empty(1, 1, T, device=device)
            want = sm90 and (cluster or (algo == "fft_cluster" and T <= 65536))
            assert rwkv_ops.timex_algorithm(long) == ("fft_cluster" if want else "fft_library"), T


def test_bad_algorithm_value(device, monkeypatch):
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "fastest")
    w, k, _ = make(1, 2, 8, device)
    with pytest.raises(ValueError, match="RWKV_TIMEX_ALGO must be"):
        torch.ops.rwkv_ops.timex_forward(w, k, 0.0)


def test_eager_training_path_keeps_spectra(forced):
    """Eager timex with grad keeps the library FFT's spectra for the backward
    (timex_forward_keep / timex_backward_kept): the same bits as the ops' own path."""
    device, algo = forced
    w, k, g = make(3, 5, 1000, device, torch.float32)
    w.requires_grad_()
    k.requires_grad_()
    out = rwkv_ops.timex(w, k, 0.3)
    got = [out, *torch.autograd.grad(out, [w, k], g)]
    want = ours(w.detach(), k.detach(), g, 0.3)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    _, kz, wz = torch.ops.rwkv_ops.timex_forward_keep(w.detach(), k.detach(), 0.3)
    # The library FFT keeps the spectra of k and W; the fused and cluster kernels their
    # twiddle tables (bytes) and W's spectra.
    algo = rwkv_ops.timex_algorithm(k)
    assert (kz.numel() > 0) == (algo in ("fft_library", "fft_fused", "fft_cluster"))
    assert (kz.dtype == torch.uint8) == (algo in ("fft_fused", "fft_cluster"))
    assert (wz.numel() > 0) == (algo in ("fft_library", "fft_fused", "fft_cluster"))
    if algo == "fft_library":
        with pytest.raises(ValueError, match="spectra that timex_forward_keep returned"):
            torch.ops.rwkv_ops.timex_backward_kept(g, w.detach(), k.detach(), kz[1:], wz)
    if algo == "fft_fused":
        assert wz.shape == (5, 1024) and wz.dtype == torch.complex64
    if algo == "fft_cluster":  # W's spectra and k's, M = 24576
        assert wz.shape == (5 * (1 + 3), 24576) and wz.dtype == torch.complex64
    if algo in ("fft_fused", "fft_cluster"):
        with pytest.raises(ValueError, match="spectra that timex_forward_keep returned"):
            torch.ops.rwkv_ops.timex_backward_kept(g, w.detach(), k.detach(), kz, wz[1:])
        with pytest.raises(ValueError, match="kz must be the twiddle tables"):
            torch.ops.rwkv_ops.timex_backward_kept(g, w.detach(), k.detach(), kz[1:], wz)
        # Without the tables (an empty kz) the backward makes them: the same bits.
        grads = torch.ops.rwkv_ops.timex_backward_kept(g, w.detach(), k.detach(), kz[:0], wz)
        for a, b in zip(grads, want[1:]):
            assert torch.equal(a, b)


@cuda_only
@pytest.mark.parametrize("shape", [(2, 300, 16384), (5, 60, 16384), (3, 400, 4097),
                                   (16, 7, 1024), (1, 1, 999)])
def test_fused_backward_work_splits(shape, monkeypatch):
    """The one-CTA backward kernel (csrc/rwkv/timex_fft_backward.cuh) in each of its work
    splits on the H100: more channels than resident CTAs (a CTA loops over channels), b in
    uneven ranges (5 rows in 2 items: partial sums and the reduce launch), one row per item,
    B = C = 1 at odd T. float32-accurate against float64 (at most 2x the error of PyTorch's
    float32 FFT convolution, and within 2e-6), deterministic, and the eager path (W's spectra
    kept from the forward) the same bits as the ops."""
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "fft_fused")
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
    wg, kg = (t.clone().requires_grad_() for t in (w, k))
    out = rwkv_ops.timex(wg, kg, 0.2)
    for a, b in zip([out, *torch.autograd.grad(out, [wg, kg], g)], got):
        assert torch.equal(a, b)


# Rows past one CTA's shared memory (T > 16384): the thread-block-cluster kernels (forced; auto
# takes them too, up to T = 65536), in every dtype they take, at odd, prime and power-of-two
# lengths: each cluster length M (cluster_m) at its shortest and longest T and between.
LONG_LENGTHS = [16385, 16411, 20000, 24576, 24577, 32768, 32771, 40960, 40961, 44100, 49152,
                49153, 65536]
HALF_TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}  # rel. error vs float64, same inputs


def errors(got, want):
    return [max_rel(a, b) for a, b in zip(got, want)]


def cluster_m(T):
    """The cluster kernels' row length for T (timex_fft_cluster.cu: cluster_length): 3 or
    5 x 8192, 2, 3 or 4 x 16384, the shortest >= T."""
    return next(m for m in (24576, 32768, 40960, 49152, 65536) if T <= m)


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
    within HALF_TOL; deterministic; eager autograd (W's spectra kept from the forward) the same
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


# The one-CTA kernels' lengths M = 3 x 2^k and 5 x 2^k (a last stage of radix 3, 5, 6 or 10:
# 1536 for 1024 < T <= 1536, 2560 for 2048 < T <= 2560, ..., 10240 and 12288 past 8192), each
# at its shortest and longest T.
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
    wz = torch.ops.rwkv_ops.timex_forward_keep(w, k, 0.3)[2]
    assert wz.shape == (3, fused_m(T)) and fused_m(T) % 3 * (fused_m(T) % 5) == 0
    check_on_chip(w, k, g)


@cuda_only
def test_fused_length_switches(monkeypatch):
    """T = 2100 runs on M = 2560, with RWKV_TIMEX_FUSED_RADIX5=0 on 3072, with both switches 0
    on 4096: results within 2e-6 of each other, not the same bits; a backward given another
    length's kept spectra refuses them."""
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "fft_fused")
    w, k, g = make(2, 5, 2100, "cuda", torch.float32)
    five = ours(w, k, g, 0.1)
    _, kz, wz = torch.ops.rwkv_ops.timex_forward_keep(w, k, 0.1)
    assert wz.shape == (5, 2560)
    for switches, m in [(("RWKV_TIMEX_FUSED_RADIX5",), 3072),
                        (("RWKV_TIMEX_FUSED_RADIX5", "RWKV_TIMEX_FUSED_RADIX3"), 4096)]:
        for name in switches:
            monkeypatch.setenv(name, "0")
        assert torch.ops.rwkv_ops.timex_forward_keep(w, k, 0.1)[2].shape == (5, m)
        other = ours(w, k, g, 0.1)
        for name, a, b in zip(["out", "grad_w", "grad_k"], other, five):
            assert max_rel(a, b) < 2e-6 and not torch.equal(a, b), (m, name)
        with pytest.raises(ValueError, match="spectra that timex_forward_keep returned"):
            torch.ops.rwkv_ops.timex_backward_kept(g, w, k, kz, wz)


@needs_sm90
def test_cluster_kernels_odd_channels_and_graph_capture(monkeypatch):
    """B = C = 1 and many channels (more than the wgrad kernel's resident clusters: a
    cluster does several channels; at M = 24576 and 40960 three CTAs per SM), misaligned (odd)
    T, M = 49152 where RWKV_TIMEX_CLUSTER_P5=0 skips 40960, the Spread scheduling policy
    (RWKV_TIMEX_CLUSTER_BALANCED=0), and CUDA graph capture at T = 40001."""
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
    # The Spread scheduling policy (fewer resident clusters at L = 8192: 124 against 132 on the
    # H200, so other clusters do the 200 channels): the same bits.
    w, k, g = make(1, 200, 20000, "cuda", torch.float32)
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


# ---- bfloat16 / float16 direct kernels on tensor cores (timex_tc_*.cuh, sm_80 and newer) ----

# Bounds on the relative error (2-norm) against float64 on the same rounded inputs.
HALF_TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}
HALF_SHAPES = [(1, 1, 1), (1, 1, 300), (2, 1, 1024), (3, 5, 261), (5, 3, 777), (17, 3, 1000),
               (20, 2, 136), (33, 2, 520), (9, 4, 2050), (4, 3, 4100), (16, 3, 768)]


@cuda_only
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", HALF_SHAPES)
def test_cuda_half_direct_against_float64(dtype, shape, monkeypatch):
    """Forced direct: out, grad_w and grad_k within HALF_TOL of float64 and within 2x the
    error of plain PyTorch (conv1d) in the same dtype; the backward bitwise deterministic.
    Odd B, C and T (element-wise staging), B = C = 1, each batch-size configuration."""
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "direct")
    w, k, g = make(*shape, "cuda", dtype)
    want = reference(w, k, g, 0.3)
    got = ours(w, k, g, 0.3)
    w_lo, k_lo = (t.detach().clone().requires_grad_() for t in (w, k))
    plain_out = timex_conv1d(w_lo, k_lo, 0.3)
    plain = [plain_out, *torch.autograd.grad(plain_out, [w_lo, k_lo], g)]
    for name, a, p, b in zip(["out", "grad_w", "grad_k"], got, plain, want):
        assert a.dtype == dtype and a.shape == b.shape, name
        err = rel_err(a, b)
        assert err < HALF_TOL[dtype], (name, shape, err)
        assert err <= 2 * rel_err(p, b) + 1e-3, (name, shape, err, rel_err(p, b))
    again = ours(w, k, g, 0.3)
    for a, b in zip(got, again):
        assert torch.equal(a, b)


@cuda_only
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_half_direct_graph_capture(dtype, monkeypatch):
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "direct")
    check_graph_capture((3, 4, 1000), dtype)


@cuda_only
def test_cuda_float32_crossover_by_rows(monkeypatch):
    """auto in float32 (timex_cuda.cu takes_direct): the direct kernels up to T = 640 with at
    most 256 rows (B C), up to 256 with any."""
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "auto")
    for (B, C, T), want in [((1, 256, 640), "direct"), ((1, 257, 640), "fft_fused"),
                            ((2, 3, 641), "fft_fused"), ((1, 257, 300), "fft_fused"),
                            ((3, 7000, 256), "direct"), ((3, 7000, 257), "fft_fused")]:
        k = torch.empty(B, C, T, device="cuda")
        assert rwkv_ops.timex_algorithm(k) == want, (B, C, T)


@cuda_only
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_half_crossover(dtype, monkeypatch):
    """auto: the tensor-core direct kernels up to T = 1024, or 1536 from B = 16 on at T a
    multiple of 8 (timex_cuda.cu takes_direct), the FFT after: the fused kernels, in bfloat16 from B = 4 (B
    = 2 past T = 1536) the tensor-core FFT (fastest_fft); both agree within the dtype's bound
    on each side."""
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "auto")
    batched_fft = "fft_tc" if dtype == torch.bfloat16 else "fft_fused"
    for B, T, algo in ((2, 1024, "direct"), (1, 1025, "fft_fused"), (2, 1025, "fft_fused"),
                       (4, 1025, batched_fft), (2, 1537, batched_fft),
                       (7, 1025, batched_fft), (16, 1536, "direct"), (16, 1537, batched_fft),
                       (16, 1100, batched_fft)):
        w, k, g = make(B, 3, T, "cuda", dtype)
        assert rwkv_ops.timex_algorithm(k) == algo, (B, T)
        auto = ours(w, k, g, 0.2)
        monkeypatch.setenv("RWKV_TIMEX_ALGO", "fft" if algo == "direct" else "direct")
        other = ours(w, k, g, 0.2)
        monkeypatch.setenv("RWKV_TIMEX_ALGO", "auto")
        for a, b in zip(auto, other):
            assert rel_err(a, b) < 2 * HALF_TOL[dtype], (B, T)
