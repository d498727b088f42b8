"""TimeX's FFT convolution on tensor cores ("fft_tc": csrc/rwkv/timex_fft_tc*.cuh, bfloat16 and
float16, T <= 16384) on the GPU, forced through RWKV_TIMEX_ALGO: against float64 on the same
rounded inputs at lengths across every transform length N (the powers of two from 2048 to 32768,
2560, 3072, 6144, 12288, 20480, 24576, 28672) and each outer radix, odd and prime T, B = C = 1,
odd B (a pair of one row); every work split of its backward; determinism, CUDA graph capture,
torch.compile, the spectra kept from forward to backward, and auto's choice.
tests/test_rwkv_fft_tc_emulation.py runs the same kernels on the CPU."""

import pytest
import torch
from conftest import rel_err

import rwkv_ops
from rwkv_ops.reference import timex_conv1d, timex_fftconv

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

HALF = [torch.bfloat16, torch.float16]
HALF_TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}  # rel. error vs float64, same inputs
# (B, C, T): N = 2048 (outer radix 8) up to T = 1024, 2560 (10) to 1280, 3072 (12) to 1536,
# 4096 (16) to 2048, 6144 (24) to 3072, 8192 (2) to 4096, 12288 (3) to 6144, 16384 (4) to
# 8192, 20480 (5) to 10240, 24576 (6) to 12288, 28672 (7) to 14336, 32768 (8) to 16384 (Z's
# planes off chip in the backward from 28672); each at its longest T and past the last, odd and
# prime T, T % 8 = 4 and 6 (rows read 4 and 2 elements at a time), B = C = 1.
SHAPES = [(1, 1, 1), (2, 3, 7), (3, 5, 300), (2, 4, 1024), (1, 1, 1025), (2, 3, 1280),
          (3, 2, 1300), (2, 2, 1536), (1, 2, 1537), (4, 3, 2048), (5, 2, 2053), (2, 2, 2502),
          (2, 2, 3072), (1, 1, 3073), (2, 3, 4096), (3, 2, 4099), (2, 2, 6144), (1, 2, 7919),
          (2, 2, 8192), (1, 1, 8193), (2, 2, 10240), (1, 2, 10241), (2, 2, 12288), (3, 2, 12289),
          (2, 1, 14336), (1, 2, 14337), (2, 2, 16384)]


@pytest.fixture
def tc(monkeypatch):
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "fft_tc")


def make(B, C, T, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed + B * 1000003 + C * 1009 + T)
    w = torch.randn(C, T, generator=gen, dtype=torch.float64) / T**0.5
    k = torch.randn(B, C, T, generator=gen, dtype=torch.float64)
    g = torch.randn(B, C, T, generator=gen, dtype=torch.float64)
    return [t.to("cuda", dtype) for t in (w, k, g)]


def ours(w, k, g, eps):
    return [torch.ops.rwkv_ops.timex_forward(w, k, eps),
            *torch.ops.rwkv_ops.timex_backward(g, w, k)]


def grads_of(fn, w, k, g, eps):
    w, k = (t.detach().clone().requires_grad_() for t in (w, k))
    out = fn(w, k, eps)
    return [out.detach(), *torch.autograd.grad(out, [w, k], g.to(out.dtype))]


# The error's bound over plain PyTorch's in the same dtype (conv1d, against float64), and an
# absolute allowance for the shortest rows, where one rounding decides either error: 2e-4, and
# one ulp of the dtype (its eps) for rows of T < 8 (an output of a product or a few, which
# plain PyTorch may round exactly: float16 at (1, 1, 1) read one ulp, 6.6e-4, against 1.7e-5).
# Measured at SHAPES from T = 300 on (H200, benchmarks/results/issue29_runs/run41 (a)):
# bfloat16 1.02-1.14x, within the package's 2x; float16 1.77-4.57x (2.49-5.20x before the
# scaled DFT constants, kDftScale): the float16 planes round every pass, which float16's own
# output rounding does not hide (auto leaves float16 to fft_fused, csrc/rwkv/timex_choice.h
# fastest_fft), so its bound here says how far forcing fft_tc in float16 goes.
OVER_PLAIN = {torch.bfloat16: 2.0, torch.float16: 5.0}


def allowance(dtype, T):
    return max(2e-4, torch.finfo(dtype).eps) if T < 8 else 2e-4


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("shape", SHAPES)
def test_against_float64(tc, dtype, shape):
    """out, grad_w, grad_k within the dtype's bound of float64 on the same rounded inputs and
    within OVER_PLAIN of plain PyTorch's error in that dtype (conv1d); bitwise the same on a
    second call."""
    w, k, g = make(*shape, dtype)
    assert rwkv_ops.timex_algorithm(k) == "fft_tc"
    got = ours(w, k, g, 0.3)
    want = grads_of(timex_conv1d if shape[2] <= 4096 else timex_fftconv,
                    w.double(), k.double(), g.double(), 0.3)
    plain = grads_of(timex_conv1d, w, k, g, 0.3)
    for name, a, p, b in zip(["out", "grad_w", "grad_k"], got, plain, want):
        assert a.dtype == dtype and a.shape == b.shape, name
        err = rel_err(a, b)
        assert err < HALF_TOL[dtype], (name, shape, err)
        bound = OVER_PLAIN[dtype] * rel_err(p, b) + allowance(dtype, shape[2])
        assert err <= bound, (name, shape, err, rel_err(p, b))
    for a, b in zip(ours(w, k, g, 0.3), got):
        assert torch.equal(a, b)


# (dtype, scale of k, of w, of g): every output within the dtype's normal range.
MAGNITUDES = [(torch.bfloat16, 1e-30, 1.0, 1e30), (torch.bfloat16, 1e30, 1e-20, 1e-10),
              (torch.bfloat16, 1e-39, 1e10, 1e25),  # k all subnormal: its scale past 2^126
              (torch.bfloat16, 1e20, 1e10, 1e-25), (torch.float16, 1e-3, 1.0, 1e3),
              (torch.float16, 10.0, 1.0, 10.0)]


@pytest.mark.parametrize("dtype,sk,sw,sg", MAGNITUDES)
def test_input_magnitudes(tc, dtype, sk, sw, sg):
    """The planes are float16 for both types: each row pair, W's spectrum and grad_w's sum are
    scaled by powers of two, so inputs far outside float16's range (bfloat16 from its
    subnormals to 1e30) keep their accuracy: nothing overflows or flushes to zero on the way."""
    w, k, g = make(2, 2, 3000, torch.float64)
    w, k, g = (w * sw).to(dtype), (k * sk).to(dtype), (g * sg).to(dtype)
    got = ours(w, k, g, 0.0)
    want = grads_of(timex_fftconv, w.double(), k.double(), g.double(), 0.0)
    for name, a, b in zip(["out", "grad_w", "grad_k"], got, want):
        assert torch.isfinite(a).all(), name
        assert rel_err(a, b) < HALF_TOL[dtype], (name, rel_err(a, b))


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("T", [1500, 2048, 6144, 10000, 12288, 13000, 16384])
def test_unbalanced_pairs(tc, dtype, T):
    """A pair of batch rows shares one complex transform, each row scaled by its own power of
    two: a row 2^10 smaller than its partner (in k, or in g) keeps its own accuracy, every row
    of out and grad_k within the dtype's bound of its own largest value (with one scale per
    pair the emulation gave 0.36 in grad_k), grad_w within it of its largest."""
    w, k, g = make(4, 3, T, torch.float64)
    k[1::2] *= 2.0**-10
    g[0::2] *= 2.0**-10
    w, k, g = (t.to(dtype) for t in (w, k, g))
    got = ours(w, k, g, 0.0)
    want = grads_of(timex_fftconv, w.double(), k.double(), g.double(), 0.0)
    for name, a, b in zip(["out", "grad_w", "grad_k"], got, want):
        err = ((a.double() - b).abs().amax(-1) / b.abs().amax(-1)).max().item()
        assert err < HALF_TOL[dtype], (name, err)


@pytest.mark.parametrize("shape", [(9, 2, 2048), (7, 1, 8192), (2, 3000, 500), (40, 1, 1000),
                                   (1, 700, 8192), (9, 2, 16000), (3, 300, 12000),
                                   (3, 300, 16384), (2, 300, 13000)])
def test_backward_work_splits(tc, shape):
    """The backward kernel's work splits: a channel's pairs in several items (partial sums, the
    reduce launch; an odd B leaves a pair of one row), more channels than resident CTAs (each
    CTA loops over channels), one pair per channel; at N = 32768 and 28672 (Z's copy in shared
    memory, at 32768 its last quarter in each CTA's scratch) split and looping: grads within
    bfloat16's bound and deterministic."""
    w, k, g = make(*shape, torch.bfloat16)
    got = ours(w, k, g, 0.1)
    want = grads_of(timex_fftconv, w.double(), k.double(), g.double(), 0.1)
    for name, a, b in zip(["out", "grad_w", "grad_k"], got, want):
        assert rel_err(a, b) < HALF_TOL[torch.bfloat16], (shape, name, rel_err(a, b))
    for a, b in zip(ours(w, k, g, 0.1), got):
        assert torch.equal(a, b)


@pytest.mark.parametrize("shape", [(9, 2, 2500), (1, 700, 3000), (6, 300, 2049), (9, 2, 4500),
                                   (2, 200, 6000)])
def test_backward_acc_places(tc, monkeypatch, shape):
    """The backward's running sum in shared memory (RWKV_TIMEX_TC_ACC=smem, auto's choice at N =
    6144, and at 12288 from B = 3, where an SM holds 512 threads of it) or in global memory: the
    same sums in the same order, so bitwise the same gradients, within bfloat16's bound; split (the
    sums copied out to the reduce launch), looping over channels, one pair per channel; a bad value
    raises."""
    w, k, g = make(*shape, torch.bfloat16)
    want = grads_of(timex_fftconv, w.double(), k.double(), g.double(), 0.0)
    got = {}
    for place in ("smem", "global"):
        monkeypatch.setenv("RWKV_TIMEX_TC_ACC", place)
        got[place] = torch.ops.rwkv_ops.timex_backward(g, w, k)
    for a, b, c in zip(got["smem"], got["global"], want[1:]):
        assert torch.equal(a, b)
        assert rel_err(a, c) < HALF_TOL[torch.bfloat16], (shape, rel_err(a, c))
    monkeypatch.setenv("RWKV_TIMEX_TC_ACC", "shared")
    with pytest.raises(ValueError, match="RWKV_TIMEX_TC_ACC must be"):
        torch.ops.rwkv_ops.timex_backward(g, w, k)


def check_nonfinite_rows(w, k, g, dtype, shape):
    """out[b, c] and grad_k[b, c] are finite wherever the definition's are (w[c] and k[b, c],
    resp. g[b, c], finite: the op's row contract, tests/test_properties_paths.py) and there
    close to the float64 reference, and non-finite where they are not; grad_w[c] likewise
    (g[:, c] and k[:, c] finite)."""
    got = ours(w, k, g, 0.1)
    clean = [t.double().nan_to_num(0.0, 0.0, 0.0) for t in (w, k, g)]
    want = grads_of(timex_fftconv, *clean, 0.1)
    fin_w, fin_k, fin_g = (torch.isfinite(t).all(-1) for t in (w, k, g))
    rows = {"out": fin_w[None] & fin_k, "grad_w": (fin_g & fin_k).all(0),
            "grad_k": fin_w[None] & fin_g}
    for name, a, b in zip(["out", "grad_w", "grad_k"], got, want):
        ok = rows[name]
        assert torch.isfinite(a[ok]).all(), (name, shape)
        assert not torch.isfinite(a[~ok]).any(), (name, shape)  # the FFT's whole-row contract
        assert rel_err(a[ok], b[ok]) < HALF_TOL[dtype], (name, shape)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("shape", [(2, 3, 3000), (3, 3, 5000), (4, 3, 12289), (2, 3, 16384)])
def test_nonfinite_stays_in_its_row(tc, dtype, shape):
    """A pair's two rows share one complex transform, which mixes them: where one holds inf or
    NaN, the kernels take each row through its own (check_nonfinite_rows). NaN in k[1, 0], inf
    in g[0, 2], NaN in w[1] (from N = 28672 on paired with w[0] in the spectrum kernel's
    transform)."""
    B, C, T = shape
    w, k, g = make(B, C, T, dtype)
    k[1, 0, T // 3] = float("nan")
    g[0, 2, T // 2] = float("inf")
    w[1, T // 5] = float("nan")
    check_nonfinite_rows(w, k, g, dtype, shape)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("shape", [(3, 5, 5000), (1, 5, 8000), (3, 5, 12289), (5, 5, 16384)])
def test_nonfinite_in_last_rows_of_odd_batch(tc, dtype, shape):
    """Where B is odd, the conv kernel pairs the last rows of channels 2j and 2j + 1 in one
    transform, and the backward takes the last row's g and k through one: NaN in w[1] (its
    spectrum kept out of the pair with channel 0's row), NaN in k[B-1, 2] (channel 3's row
    then alone), inf in g[B-1, 3] and NaN in k[B-1, 4] (g and k of one row apart again; channel
    4 the odd C's last, alone in the conv)."""
    B, C, T = shape
    w, k, g = make(B, C, T, dtype)
    w[1, T // 5] = float("nan")
    k[B - 1, 2, T // 3] = float("nan")
    g[B - 1, 3, T // 2] = float("inf")
    k[B - 1, 4, T // 7] = float("nan")
    check_nonfinite_rows(w, k, g, dtype, shape)


@pytest.mark.parametrize("shape", [(3, 2, 12289), (2, 512, 5000), (9, 2, 2500), (1, 3, 16384),
                                   (4, 64, 1500)])
def test_overlapped_launch(tc, monkeypatch, shape):
    """The conv and backward kernels launched to overlap the spectrum kernel's last wave
    (programmatic dependent launch on sm_90, RWKV_TIMEX_TC_PDL=1, the default) or after it: the
    same bits, call after call (a read of a spectrum still being written would show as a
    difference, as a version that let those loads move above the wait did at (3, 2, 12289) on
    its second call); a bad value raises."""
    w, k, g = make(*shape, torch.bfloat16)
    got = {}
    for pdl in ("0", "1"):
        monkeypatch.setenv("RWKV_TIMEX_TC_PDL", pdl)
        got[pdl] = [ours(w, k, g, 0.1) for _ in range(3)]
    for run in got["1"] + got["0"][1:]:
        for a, b in zip(run, got["0"][0]):
            assert torch.equal(a, b), shape
    monkeypatch.setenv("RWKV_TIMEX_TC_PDL", "on")
    with pytest.raises(ValueError, match="RWKV_TIMEX_TC_PDL must be"):
        ours(w, k, g, 0.1)


@pytest.mark.parametrize("dtype", HALF)
def test_graph_capture(tc, dtype):
    """Captured in a CUDA graph and replayed on new inputs: the eager call's bits."""
    w, k, g = make(3, 4, 5000, dtype)
    ours(w, k, g, 0.1)  # warm-up outside the capture
    static = [t.clone() for t in (w, k, g)]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = ours(*static, 0.1)
    for t, src in zip(static, make(3, 4, 5000, dtype, seed=1)):
        t.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(outs, ours(*static, 0.1)):
        assert torch.equal(a, b)


def test_kept_spectra_and_compile(tc):
    """Eager training keeps W's spectra (wz: (C, N) int32, two float16 an entry) and exponents
    (kz: (C,) int32) from the forward for the backward: the ops' bits; kept tensors of the
    wrong shape raise ValueError; torch.compile(fullgraph) gives the same results."""
    w, k, g = make(3, 5, 1500, torch.bfloat16)
    want = ours(w, k, g, 0.3)
    wg, kg = (t.clone().requires_grad_() for t in (w, k))
    out = rwkv_ops.timex(wg, kg, 0.3)
    for a, b in zip([out, *torch.autograd.grad(out, [wg, kg], g)], want):
        assert torch.equal(a, b)
    out, kz, wz = torch.ops.rwkv_ops.timex_forward_keep(w, k, 0.3)
    assert kz.shape == (5,) and kz.dtype == torch.int32
    assert wz.shape == (5, 3072) and wz.dtype == torch.int32
    for a, b in zip(torch.ops.rwkv_ops.timex_backward_kept(g, w, k, kz, wz), want[1:]):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="spectra and exponents that timex_forward_keep"):
        torch.ops.rwkv_ops.timex_backward_kept(g, w, k, kz, wz[1:])
    with pytest.raises(ValueError, match="spectra and exponents that timex_forward_keep"):
        torch.ops.rwkv_ops.timex_backward_kept(g, w, k, kz[1:], wz)
    torch._dynamo.reset()
    step = torch.compile(lambda w, k: rwkv_ops.timex(w, k, 0.3), fullgraph=True)
    wg, kg = (t.clone().requires_grad_() for t in (w, k))
    out = step(wg, kg)
    for a, b in zip([out, *torch.autograd.grad(out, [wg, kg], g)], want):
        assert torch.equal(a, b)


def test_forced_where_it_cannot_run(tc):
    """Forced past its reach (float32, float64, T > 16384) the op runs the fastest other FFT."""
    for dtype, T in ((torch.float32, 1000), (torch.float64, 1000), (torch.bfloat16, 16385)):
        k = torch.empty(2, 3, T, device="cuda", dtype=dtype)
        assert rwkv_ops.timex_algorithm(k) != "fft_tc", (dtype, T)


def test_auto_choice(monkeypatch):
    """auto (timex_choice.h fastest_fft): the tensor-core FFT for bfloat16 past the direct
    kernels' reach (from B = 16: 1280 at T % 8 == 0, 1152 at T % 4 == 0 up to C = 512) up to
    T = 16384, where it measured faster (tc_faster): from B = 2, but with B = 3 up to T = 4096
    only for 2560 < T <= 3072, for 1024 < T <= 1536 (the fused kernels' M = 1536) below C = 512
    only from B = 8 (or B = 2 past 1280), for 3072 < T <= 4096 from B = 4 (B = 2 from C = 256),
    with B = 1 past 8192 from C = 512, and up to T = 1024 past the direct kernels' reach
    (half_direct_max_t) only from T = 513, and with 4 to 8 rows past 1280 or at odd T above
    512 channels (the direct kernels up to 1280 at even T, and at odd T up to 512 channels
    where fft_tc would run: half_split_direct); the fused kernels else, for float16 (their
    error is the FFT conv's) and for float32; past T = 16384 not fft_tc."""
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "auto")
    for dtype, B, T, want in [(torch.bfloat16, 16, 1537, "fft_tc"),
                              (torch.bfloat16, 32, 8192, "fft_tc"),
                              (torch.bfloat16, 16, 16384, "fft_tc"),
                              (torch.float16, 32, 8192, "fft_fused"),
                              (torch.bfloat16, 3, 4096, "fft_fused"),
                              (torch.bfloat16, 8, 1025, "direct"),
                              (torch.bfloat16, 4, 1025, "fft_fused"),
                              (torch.bfloat16, 8, 1026, "direct"),
                              (torch.bfloat16, 8, 1282, "fft_tc"),
                              (torch.bfloat16, 8, 4096, "fft_tc"),
                              (torch.bfloat16, 1, 2048, "fft_fused"),
                              (torch.bfloat16, 2, 1025, "fft_fused"),
                              (torch.bfloat16, 3, 1536, "fft_fused"),
                              (torch.bfloat16, 4, 1100, "direct"),
                              (torch.bfloat16, 4, 1281, "fft_fused"),
                              (torch.bfloat16, 2, 1537, "fft_tc"),
                              (torch.bfloat16, 3, 2048, "fft_fused"),
                              (torch.bfloat16, 3, 2561, "fft_tc"),
                              (torch.bfloat16, 3, 2560, "fft_fused"),
                              (torch.bfloat16, 2, 2049, "fft_tc"),
                              (torch.bfloat16, 1, 3072, "fft_fused"),
                              (torch.bfloat16, 2, 3072, "fft_tc"),
                              (torch.bfloat16, 3, 3073, "fft_fused"),
                              (torch.bfloat16, 4, 3073, "fft_tc"),
                              (torch.bfloat16, 1, 6144, "fft_fused"),
                              (torch.bfloat16, 2, 4097, "fft_tc"),
                              (torch.bfloat16, 1, 6145, "fft_fused"),
                              (torch.bfloat16, 1, 8192, "fft_fused"),
                              (torch.bfloat16, 1, 8193, "fft_fused"),
                              (torch.bfloat16, 2, 6145, "fft_tc"),
                              (torch.bfloat16, 4, 8192, "fft_tc"),
                              (torch.bfloat16, 2, 8193, "fft_tc"),
                              (torch.bfloat16, 1, 12288, "fft_fused"),
                              (torch.bfloat16, 1, 9000, "fft_fused"),
                              (torch.bfloat16, 1, 12289, "fft_fused"),
                              (torch.bfloat16, 2, 12289, "fft_tc"),
                              (torch.bfloat16, 4, 12289, "fft_tc"),
                              (torch.bfloat16, 3, 14337, "fft_tc"),
                              (torch.bfloat16, 5, 14337, "fft_tc"),
                              (torch.bfloat16, 5, 4096, "fft_tc"),
                              (torch.bfloat16, 6, 3073, "fft_tc"),
                              (torch.bfloat16, 7, 4096, "fft_tc"),
                              (torch.bfloat16, 2, 16384, "fft_tc"),
                              (torch.bfloat16, 4, 16384, "fft_tc"),
                              (torch.bfloat16, 16, 1280, "direct"),
                              (torch.bfloat16, 16, 1288, "fft_tc"),
                              (torch.bfloat16, 16, 1536, "fft_tc"),
                              (torch.float16, 16, 1408, "direct"),
                              (torch.float16, 16, 1416, "fft_fused"),
                              (torch.bfloat16, 16, 1100, "direct"),
                              (torch.bfloat16, 16, 1156, "fft_tc"),
                              (torch.float16, 16, 1100, "direct"),
                              (torch.float16, 16, 1276, "direct"),
                              (torch.float16, 16, 1284, "fft_fused"),
                              (torch.float16, 16, 1102, "fft_fused"),
                              (torch.float16, 15, 1100, "fft_fused"),
                              (torch.float16, 32, 1152, "direct"),
                              (torch.bfloat16, 8, 1024, "direct"),
                              (torch.float32, 16, 4096, "fft_fused")]:
        k = torch.empty(B, 2, T, device="cuda", dtype=dtype)
        assert rwkv_ops.timex_algorithm(k) == want, (dtype, B, T)
    for B, C, T, want in [(1, 512, 12289, "fft_tc"), (1, 1024, 16384, "fft_tc"),
                          (1, 511, 16384, "fft_fused"), (1, 512, 12288, "fft_tc"),
                          (1, 128, 12288, "fft_fused"), (1, 511, 9000, "fft_fused"),
                          (1, 512, 9000, "fft_tc"), (2, 256, 3073, "fft_tc"),
                          (2, 2048, 4096, "fft_tc"), (2, 255, 4096, "fft_fused"),
                          (3, 1024, 4096, "fft_fused"), (2, 256, 1100, "fft_fused"),
                          (2, 256, 1281, "fft_tc"), (2, 512, 1025, "fft_tc"),
                          (4, 255, 1536, "fft_fused"), (4, 512, 1100, "direct"),
                          (4, 512, 1281, "fft_tc"), (4, 1024, 1100, "fft_tc"),
                          (4, 512, 1101, "direct"), (8, 300, 1279, "direct"),
                          (4, 1024, 1101, "fft_tc"), (2, 512, 1101, "fft_tc"),
                          (3, 2048, 1200, "fft_fused"), (8, 256, 1300, "fft_tc"),
                          (16, 512, 1100, "direct"), (16, 513, 1100, "fft_tc"),
                          (16, 512, 1102, "fft_tc"), (4, 1024, 256, "direct"),
                          (4, 1024, 512, "fft_fused"), (4, 1024, 513, "fft_tc"),
                          (3, 1024, 1024, "fft_fused"), (2, 512, 512, "direct"),
                          (2, 512, 513, "fft_tc"), (16, 1024, 896, "direct"),
                          (16, 1024, 897, "fft_tc"), (12, 512, 768, "direct"),
                          (12, 512, 769, "fft_tc"), (8, 256, 768, "direct"),
                          (8, 256, 769, "fft_tc"), (1, 128, 1024, "direct"),
                          (1, 2048, 1024, "fft_fused")]:
        k = torch.empty(B, C, T, device="cuda", dtype=torch.bfloat16)
        assert rwkv_ops.timex_algorithm(k) == want, (B, C, T)
    k = torch.empty(16, 2, 16385, device="cuda", dtype=torch.bfloat16)
    assert rwkv_ops.timex_algorithm(k) != "fft_tc"
