"""TimeX's algorithms (direct Toeplitz kernels, FFT convolution), each forced through
RWKV_TIMEX_ALGO, against float64 references, and the choice between them."""

import pytest
import torch
from conftest import DEVICES, rel_err

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
# The crossover lengths of the "auto" choice (csrc/rwkv/timex.cpp, timex_choice.h).
CROSSOVER = {("cpu", torch.float32): 512, ("cpu", torch.float64): 256,
             ("cuda", torch.float32): 256, ("cuda", torch.float64): 256}
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
    # The library FFT keeps the spectra of k and W; the fused and cluster kernels the spectra
    # of W and then k, and as kz (bytes) the cluster kernels their twiddle tables, the fused
    # kernels none (their backward reads the device's table).
    algo = rwkv_ops.timex_algorithm(k)
    assert (kz.numel() > 0) == (algo in ("fft_library", "fft_cluster"))
    assert (kz.dtype == torch.uint8) == (algo in ("fft_fused", "fft_cluster"))
    assert (wz.numel() > 0) == (algo in ("fft_library", "fft_fused", "fft_cluster"))
    if algo == "fft_library":
        with pytest.raises(ValueError, match="spectra that timex_forward_keep returned"):
            torch.ops.rwkv_ops.timex_backward_kept(g, w.detach(), k.detach(), kz[1:], wz)
    if algo == "fft_fused":  # W's spectra and k's, M = 1024
        assert wz.shape == (5 * (1 + 3), 1024) and wz.dtype == torch.complex64
    if algo == "fft_cluster":  # W's spectra and k's, M = 20480
        assert wz.shape == (5 * (1 + 3), 20480) and wz.dtype == torch.complex64
    if algo in ("fft_fused", "fft_cluster"):
        with pytest.raises(ValueError, match="spectra that timex_forward_keep returned"):
            torch.ops.rwkv_ops.timex_backward_kept(g, w.detach(), k.detach(), kz, wz[1:])
    if algo == "fft_cluster":
        with pytest.raises(ValueError, match="kz must be the twiddle tables"):
            torch.ops.rwkv_ops.timex_backward_kept(g, w.detach(), k.detach(), kz[1:], wz)
    if algo == "fft_fused":  # a table of another length is refused
        with pytest.raises(ValueError, match="kz must be the twiddle tables"):
            torch.ops.rwkv_ops.timex_backward_kept(g, w.detach(), k.detach(),
                                                   torch.zeros(5, dtype=torch.uint8,
                                                               device=device), wz)
    if algo in ("fft_fused", "fft_cluster"):
        # Without the tables (an empty kz) the backward makes them: the same bits.
        grads = torch.ops.rwkv_ops.timex_backward_kept(g, w.detach(), k.detach(), kz[:0], wz)
        for a, b in zip(grads, want[1:]):
            assert torch.equal(a, b)
    if algo == "fft_fused":  # W's spectra alone (k's transformed again): the same bits
        grads = torch.ops.rwkv_ops.timex_backward_kept(g, w.detach(), k.detach(), kz, wz[:5])
        for a, b in zip(grads, want[1:]):
            assert torch.equal(a, b)


# ---- bfloat16 / float16 direct kernels on tensor cores (timex_tc_*.cuh, sm_80 and newer) ----

# Bounds on the relative error (2-norm) against float64 on the same rounded inputs.
HALF_TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}
HALF_SHAPES = [(1, 1, 1), (1, 1, 300), (2, 1, 1024), (3, 5, 261), (5, 3, 777), (17, 3, 1000),
               (20, 2, 136), (33, 2, 520), (9, 4, 2050), (4, 3, 4100), (16, 3, 768),
               (17, 3, 1100), (16, 2, 1102)]


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
@pytest.mark.parametrize("shape", [(8, 3, 1188), (5, 2, 777), (1, 1, 300), (2, 3, 1025),
                                   (6, 2, 2368), (4, 3, 2369), (2, 2, 4848), (1, 2, 4849),
                                   (8, 600, 700)])
def test_cuda_half_direct_split_and_chunked(dtype, shape, monkeypatch):
    """Up to 8 rows the Toeplitz products run the split kernel where its staged rows fit 48 KiB
    (T <= 2368 from 3 rows, 4848 up to 2; timex_tc_toeplitz_split.cuh), the chunked one past
    it and with RWKV_TIMEX_DIRECT_SPLIT=0: both within HALF_TOL of float64 and of each other,
    each deterministic. (8, 600, 700): a block per row group (1200 of them, more than the
    resident blocks), else the tiles dealt over several."""
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "direct")
    w, k, g = make(*shape, "cuda", dtype)
    want = reference(w, k, g, 0.3)
    runs = {}
    for split in ("1", "0"):
        monkeypatch.setenv("RWKV_TIMEX_DIRECT_SPLIT", split)
        runs[split] = ours(w, k, g, 0.3)
        for name, a, b in zip(["out", "grad_w", "grad_k"], runs[split], want):
            assert rel_err(a, b) < HALF_TOL[dtype], (split, name, shape)
        for a, b in zip(runs[split], ours(w, k, g, 0.3)):
            assert torch.equal(a, b), (split, shape)
    for name, a, b in zip(["out", "grad_w", "grad_k"], runs["1"], runs["0"]):
        assert rel_err(a, b) < HALF_TOL[dtype], (name, shape)


@cuda_only
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("B", [17, 5])
def test_cuda_half_direct_copy_units(dtype, B, monkeypatch):
    """Forced direct: rows staged 16, 8, 4 or 2 bytes at a time (timex_tc_launch.cuh
    staging_unit: T = 1104 with the storage 0, 4, 2 or 1 elements off 16 bytes) give the same
    bits, in the chunked Toeplitz kernel (17 rows) and the split one (5)."""
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "direct")
    C, T = 3, 1104
    w, k, g = make(B, C, T, "cuda", dtype)
    want = ours(w, k, g, 0.3)
    for off in (4, 2, 1):
        def shifted(x):
            buf = torch.empty(x.numel() + off, device="cuda", dtype=dtype)
            return buf[off:].view(x.shape).copy_(x.detach())
        k_off, g_off = shifted(k), shifted(g)
        assert k_off.data_ptr() % 16 == 2 * off % 16
        got = ours(w, k_off, g_off, 0.3)
        for name, a, b in zip(["out", "grad_w", "grad_k"], got, want):
            assert torch.equal(a, b), (name, off)


@cuda_only
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_half_direct_graph_capture(dtype, monkeypatch):
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "direct")
    check_graph_capture((3, 4, 1000), dtype)


@cuda_only
def test_cuda_float32_crossover_by_rows(monkeypatch):
    """auto in float32 (timex_choice.h takes_direct, f32_direct_max_t): the direct kernels up
    to T = 256 at any rows (B C) but one batch row of at most 512 channels (up to 192), the
    fused FFT after."""
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "auto")
    for (B, C, T), want in [((2, 256, 256), "direct"), ((2, 256, 257), "fft_fused"),
                            ((1, 256, 192), "direct"), ((1, 256, 193), "fft_fused"),
                            ((1, 512, 193), "fft_fused"), ((1, 513, 256), "direct"),
                            ((2, 3, 641), "fft_fused"), ((1, 1, 193), "fft_fused"),
                            ((3, 7000, 256), "direct"), ((3, 7000, 257), "fft_fused")]:
        k = torch.empty(B, C, T, device="cuda")
        assert rwkv_ops.timex_algorithm(k) == want, (B, C, T)


@cuda_only
def test_cuda_half_crossover_by_channels(monkeypatch):
    """auto up to T = 1024 in the half types (timex_choice.h half_direct_max_t): the direct
    kernels with at most 128 channels; from 9 rows up to 1024 (float16 from 16 rows or up to
    256 channels) or 896; float16 with 4 to 8 rows of up to 256 channels and 8 rows of up to
    512 up to 1024, with 4 to 8 rows of up to 1024 up to 768 (8 rows of up to 256 channels at
    any T, the others at even T); with up to 8 rows and at most
    512 channels up to 768 (256 at B = 1, 640 at B = 2 and 3), else up to 256 (B = 1: 128,
    none past 1024 channels); the fused FFT after (fft_tc's cases: tests/test_rwkv_fft_tc.py).
    Past 1024 (half_split_direct) up to 1280 with 4 to 8 rows of up to 256 channels, 8 rows of
    up to 512 (bfloat16: 4 to 8 rows of up to 512). The extensions of this kernel's range
    (run 54) hold at even T only: odd rows are staged element by element; at odd T bfloat16
    up to 512 channels where fft_tc runs (tc_faster: 512 channels or 8 rows; run 55)."""
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "auto")
    f16, bf16 = torch.float16, torch.bfloat16
    for dtype, (B, C, T), want in [
            (f16, (1, 1024, 128), "direct"), (f16, (1, 1024, 129), "fft_fused"),
            (f16, (1, 2048, 64), "fft_fused"), (f16, (2, 1024, 256), "direct"),
            (f16, (4, 1024, 1024), "fft_fused"), (f16, (4, 512, 768), "direct"),
            (f16, (4, 512, 769), "fft_fused"), (f16, (1, 512, 256), "direct"),
            (f16, (1, 512, 257), "fft_fused"), (f16, (2, 512, 640), "direct"),
            (f16, (2, 512, 641), "fft_fused"), (f16, (3, 256, 641), "fft_fused"),
            (f16, (8, 256, 1024), "direct"), (f16, (8, 512, 1024), "direct"),
            (f16, (8, 513, 768), "direct"), (f16, (8, 513, 769), "fft_fused"),
            (f16, (7, 256, 1024), "direct"), (f16, (7, 257, 769), "fft_fused"),
            (f16, (4, 1024, 768), "direct"), (f16, (4, 1025, 768), "fft_fused"),
            (f16, (3, 1024, 768), "fft_fused"), (bf16, (8, 512, 769), "fft_tc"),
            (f16, (8, 512, 1280), "direct"), (f16, (8, 512, 1281), "fft_fused"),
            (f16, (8, 513, 1100), "fft_fused"), (f16, (4, 256, 1280), "direct"),
            (f16, (4, 257, 1100), "fft_fused"), (f16, (3, 256, 1100), "fft_fused"),
            (f16, (9, 256, 1100), "fft_fused"), (bf16, (4, 512, 1100), "direct"),
            (bf16, (4, 513, 1100), "fft_tc"), (bf16, (8, 512, 1281), "fft_tc"),
            (f16, (4, 256, 1021), "fft_fused"), (f16, (8, 512, 1023), "fft_fused"),
            (f16, (8, 256, 1023), "direct"), (f16, (4, 1024, 767), "fft_fused"),
            (f16, (8, 512, 1187), "fft_fused"), (bf16, (4, 512, 1257), "direct"),
            (bf16, (8, 257, 1101), "direct"), (bf16, (8, 256, 1101), "direct"),
            (bf16, (4, 511, 1101), "fft_fused"), (bf16, (3, 512, 1101), "fft_fused"),
            (bf16, (8, 513, 1187), "fft_tc"),
            (f16, (6, 256, 1252), "direct"),
            (f16, (12, 512, 896), "direct"), (f16, (12, 512, 897), "fft_fused"),
            (f16, (12, 256, 1024), "direct"), (f16, (16, 2048, 1024), "direct"),
            (f16, (8, 256, 768), "direct"), (f16, (1, 128, 1024), "direct"),
            (f16, (2, 2048, 300), "fft_fused"), (bf16, (4, 1024, 300), "fft_fused"),
            (bf16, (1, 1024, 257), "fft_fused"), (bf16, (2, 600, 512), "fft_fused"),
            (bf16, (3, 512, 640), "direct"), (bf16, (3, 512, 641), "fft_fused"),
            (bf16, (1, 300, 257), "fft_fused"), (bf16, (2, 512, 512), "direct")]:
        k = torch.empty(B, C, T, device="cuda", dtype=dtype)
        assert rwkv_ops.timex_algorithm(k) == want, (dtype, B, C, T)


@cuda_only
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_half_crossover(dtype, monkeypatch):
    """auto at 3 channels: the tensor-core direct kernels up to T = 1024, with 4 to 8 rows at
    even T up to 1280 (the split Toeplitz kernel: half_split_direct), or from B = 16 on at T a
    multiple of 8 up to 1408 (1280 in bfloat16, whose FFT there runs on tensor cores;
    timex_choice.h takes_direct) and at T a multiple of 4 up to 1280 (bfloat16: 1152, up to 512
    channels), the FFT after: the fused kernels, in bfloat16 (at these 3 channels) from B = 8
    (B = 2 past T = 1536) the tensor-core FFT (fastest_fft); both agree within the dtype's
    bound on each side."""
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "auto")
    batched_fft = "fft_tc" if dtype == torch.bfloat16 else "fft_fused"
    for B, T, algo in ((2, 1024, "direct"), (1, 1025, "fft_fused"), (2, 1025, "fft_fused"),
                       (3, 1026, "fft_fused"), (4, 1026, "direct"), (4, 1025, "fft_fused"),
                       (2, 1537, batched_fft), (7, 1188, "direct"), (7, 1187, "fft_fused"),
                       (8, 1280, "direct"), (4, 1282, "fft_fused"),
                       (8, 1281, batched_fft), (16, 1280, "direct"),
                       (16, 1408, "direct" if dtype == torch.float16 else batched_fft),
                       (16, 1536, batched_fft), (16, 1537, batched_fft),
                       (16, 1100, "direct"), (16, 1156, "direct" if dtype == torch.float16
                                               else batched_fft),
                       (16, 1284, batched_fft), (16, 1102, batched_fft)):
        w, k, g = make(B, 3, T, "cuda", dtype)
        assert rwkv_ops.timex_algorithm(k) == algo, (B, T)
        auto = ours(w, k, g, 0.2)
        monkeypatch.setenv("RWKV_TIMEX_ALGO", "fft" if algo == "direct" else "direct")
        other = ours(w, k, g, 0.2)
        monkeypatch.setenv("RWKV_TIMEX_ALGO", "auto")
        for a, b in zip(auto, other):
            assert rel_err(a, b) < 2 * HALF_TOL[dtype], (B, T)
