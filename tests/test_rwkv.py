import pytest
import torch
from conftest import DEVICES, emulation_test, rel_err, run_emulator

import rwkv_ops
from rwkv_ops.reference import timex_conv1d, timex_formula

cuda_only = pytest.mark.skipif("cuda" not in DEVICES, reason="needs a CUDA GPU")

# (B, C, T): T = 1, odd, prime, 769, 1000, multiples of 4; B = 1, 3; C = 1.
SHAPES = [(1, 1, 1), (2, 3, 1), (3, 2, 7), (1, 4, 13), (2, 1, 31), (3, 5, 64), (4, 2, 97),
          (1, 2, 769), (2, 1, 1000), (5, 3, 128)]


def make(B, C, T, device, dtype=torch.float64, requires_grad=True):
    w = torch.randn(C, T, device=device, dtype=dtype) / T**0.5
    k = torch.randn(B, C, T, device=device, dtype=dtype)
    return w.requires_grad_(requires_grad), k.requires_grad_(requires_grad)


def out_and_grads(fn, w, k, grad, eps):
    out = fn(w, k, eps)
    return [out, *torch.autograd.grad(out, [w, k], grad)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("reference", [timex_formula, timex_conv1d])
def test_matches_reference_float64(device, shape, reference):
    w, k = make(*shape, device)
    eps = 0.37 if shape[2] % 2 else 0.0
    grad = torch.randn_like(k)
    got = out_and_grads(rwkv_ops.timex, w, k, grad, eps)
    want = out_and_grads(reference, w, k, grad, eps)
    for name, g, x in zip(["out", "grad_w", "grad_k"], got, want):
        assert g.shape == x.shape and g.dtype == x.dtype, name
        torch.testing.assert_close(g, x, rtol=1e-10, atol=1e-11, msg=name)


def test_float32_against_float64(device):
    # Covers every batch-size tile configuration of the CUDA kernels (B <= 4, <= 8, <= 16,
    # more) with T neither a multiple of 4 nor of the tile sizes.
    for B, C, T in [(1, 5, 150), (3, 9, 77), (6, 4, 130), (12, 3, 99), (33, 2, 141)]:
        w, k = make(B, C, T, device)
        grad = torch.randn_like(k)
        want = out_and_grads(timex_conv1d, w, k, grad, 0.25)
        w32, k32 = (t.detach().float().requires_grad_() for t in (w, k))
        got = out_and_grads(rwkv_ops.timex, w32, k32, grad.float(), 0.25)
        for g, x in zip(got, want):
            assert g.dtype == torch.float32
            assert rel_err(g, x) < 2e-6, (B, C, T)


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 5), (3, 2, 9)])
def test_gradcheck(device, shape):
    w, k = make(*shape, device)
    assert torch.autograd.gradcheck(lambda w, k: rwkv_ops.timex(w, k, 0.5), (w, k))


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 5), (3, 2, 9)])
def test_gradgradcheck(device, shape):
    # timex_backward has its own derivatives (TimeX products again), so second derivatives
    # (create_graph=True, Hessian-vector products, gradient penalties) are exact.
    w, k = make(*shape, device)
    assert torch.autograd.gradgradcheck(lambda w, k: rwkv_ops.timex(w, k, 0.5), (w, k))


def test_double_backward_matches_formula(device):
    w, k = make(2, 3, 13, device)
    v = torch.randn_like(k)

    def grad_norm(fn):  # a gradient penalty: differentiates the gradients again
        grads = torch.autograd.grad((fn(w, k) * v).sum(), (w, k), create_graph=True)
        penalty = sum((g * g).sum() for g in grads)
        return torch.autograd.grad(penalty, (w, k))

    for g, x in zip(grad_norm(rwkv_ops.timex), grad_norm(timex_formula)):
        assert x.abs().max() > 0
        torch.testing.assert_close(g, x)


def test_only_one_gradient(device):
    w, k = make(2, 3, 11, device)
    out = rwkv_ops.timex(w, k.detach())
    (grad_w,) = torch.autograd.grad(out.sum(), [w])
    (want,) = torch.autograd.grad(timex_formula(w, k.detach()).sum(), [w])
    torch.testing.assert_close(grad_w, want)
    out = rwkv_ops.timex(w.detach(), k)
    (grad_k,) = torch.autograd.grad(out.sum(), [k])
    (want,) = torch.autograd.grad(timex_formula(w.detach(), k).sum(), [k])
    torch.testing.assert_close(grad_k, want)
    assert not rwkv_ops.timex(w.detach(), k.detach()).requires_grad


def test_non_contiguous_inputs(device):
    B, C, T = 3, 4, 21
    w, k = make(B, C, T, device, requires_grad=False)
    w_nc = w.t().contiguous().t()  # column-major
    k_nc = k.transpose(0, 2).contiguous().transpose(0, 2)
    k_strided = torch.randn(B, C, 2 * T, device=device, dtype=torch.float64)[:, :, ::2]
    for ww, kk in [(w_nc, k_nc), (w_nc, k_strided), (w, k.permute(1, 0, 2).contiguous().permute(1, 0, 2))]:
        assert not (ww.is_contiguous() and kk.is_contiguous())
        ww, kk = ww.requires_grad_(), kk.requires_grad_()
        grad = torch.randn(B, C, T, device=device, dtype=torch.float64).transpose(0, 1).contiguous().transpose(0, 1)
        got = out_and_grads(rwkv_ops.timex, ww, kk, grad, 0.1)
        want = out_and_grads(timex_formula, ww, kk, grad, 0.1)
        for g, x in zip(got, want):
            torch.testing.assert_close(g, x)


@pytest.mark.parametrize("shape", [(0, 3, 5), (2, 0, 5), (2, 3, 0)])
def test_empty(device, shape):
    w, k = make(*shape, device)
    out = rwkv_ops.timex(w, k, 1.0)
    assert out.shape == shape
    grad_w, grad_k = torch.autograd.grad(out.sum(), [w, k])
    assert grad_w.shape == w.shape and grad_k.shape == k.shape
    assert grad_w.abs().sum() == 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_types_against_float64(device, dtype):
    # Tolerance rule: the kernel's relative error against float64 is at most 2x that of the
    # same computation in plain PyTorch at this precision (the Toeplitz-matrix einsum, run by
    # the GPU's or CPU's GEMM), plus 1e-3 of slack for the output's own rounding.
    # On CUDA: the FMA kernel (4, 3, 50) and the tensor-core tiles for 9-16, 17+ and <= 4 rows.
    for B, C, T in [(4, 3, 50), (9, 2, 133), (20, 2, 130), (3, 2, 300)]:
        w, k = make(B, C, T, device)
        grad = torch.randn_like(k)
        exact = out_and_grads(timex_formula, w, k, grad, 0.5)
        w_lo, k_lo = (t.detach().to(dtype).requires_grad_() for t in (w, k))
        got = out_and_grads(rwkv_ops.timex, w_lo, k_lo, grad.to(dtype), 0.5)
        plain = out_and_grads(timex_formula, w_lo, k_lo, grad.to(dtype), 0.5)
        for g, p, x in zip(got, plain, exact):
            assert g.dtype == dtype
            assert rel_err(g, x) <= 2 * rel_err(p, x) + 1e-3


def test_module_uses_last_columns(device):
    torch.manual_seed(0)
    layer = rwkv_ops.TimeX(4, 40, eps=0.2).to(device, torch.float64)
    assert layer.w.shape == (4, 40) and layer.w.abs().max() <= 40**-0.5
    k = torch.randn(3, 4, 25, device=device, dtype=torch.float64, requires_grad=True)
    out = layer(k)
    torch.testing.assert_close(out, timex_formula(layer.w[:, 15:], k, 0.2))
    grad = torch.randn_like(out)
    grad_w, grad_k = torch.autograd.grad(out, [layer.w, k], grad)
    assert grad_w.shape == (4, 40)
    assert grad_w[:, :15].abs().sum() == 0  # unused columns get no gradient
    w_used = layer.w.detach()[:, 15:].clone().requires_grad_()
    want_w, want_k = torch.autograd.grad(timex_formula(w_used, k, 0.2), [w_used, k], grad)
    torch.testing.assert_close(grad_w[:, 15:], want_w)
    torch.testing.assert_close(grad_k, want_k)
    # T == max_len uses all of w; T == 0 works; T > max_len is refused.
    k_full = torch.randn(2, 4, 40, device=device, dtype=torch.float64)
    torch.testing.assert_close(layer(k_full), timex_formula(layer.w, k_full, 0.2))
    assert layer(k_full[:, :, :0]).shape == (2, 4, 0)
    with pytest.raises(ValueError, match="max_len=40"):
        layer(torch.randn(2, 4, 41, device=device, dtype=torch.float64))


def test_compile_fullgraph(device):
    torch.manual_seed(0)
    layer = rwkv_ops.TimeX(6, 32).to(device)

    def step(k, w2):
        return layer(k).relu() + rwkv_ops.timex(w2, k, 1.5) * 2

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)
    k = torch.randn(3, 6, 20, device=device, requires_grad=True)
    w2 = torch.randn(6, 20, device=device, requires_grad=True)
    want = step(k, w2)
    got = compiled(k, w2)
    torch.testing.assert_close(got, want)
    grad = torch.randn_like(want)
    want_grads = torch.autograd.grad(want, [k, w2, layer.w], grad)
    got_grads = torch.autograd.grad(got, [k, w2, layer.w], grad)
    for g, x in zip(got_grads, want_grads):
        torch.testing.assert_close(g, x)


def test_eager_fast_path_matches_op(device):
    # Eager timex runs the op's autograd formula through a plain autograd.Function (host
    # time); the op itself (what compile, export and fake tensors take) through
    # register_autograd. One formula, so the results are bitwise equal, double backward too.
    torch.manual_seed(0)
    w, k = make(3, 4, 17, device, dtype=torch.float32)
    grad = torch.randn_like(k)
    fast, op = rwkv_ops.timex(w, k, 0.5), torch.ops.rwkv_ops.timex_forward(w, k, 0.5)
    assert "Generated" not in type(fast.grad_fn).__name__
    assert "Generated" in type(op.grad_fn).__name__
    assert torch.equal(fast, op)
    for wrt in ([w, k], [w], [k]):
        got = torch.autograd.grad(fast, wrt, grad, retain_graph=True, create_graph=True)
        want = torch.autograd.grad(op, wrt, grad, retain_graph=True, create_graph=True)
        for g, x in zip(got, want):
            assert torch.equal(g, x)
        gg = [torch.randn_like(g) for g in got]
        got2 = torch.autograd.grad(got, [w, k], gg, allow_unused=True)
        want2 = torch.autograd.grad(want, [w, k], gg, allow_unused=True)
        for g, x in zip(got2, want2):
            assert (g is None and x is None) or torch.equal(g, x)
    with torch.no_grad():
        fast = rwkv_ops.timex(w, k, 0.5)
    assert not fast.requires_grad and torch.equal(fast, op)
    compiled = torch.compile(rwkv_ops.timex, fullgraph=True)
    got = torch.autograd.grad(compiled(w, k, 0.5), [w, k], grad)
    want = torch.autograd.grad(op, [w, k], grad)
    for g, x in zip(got, want):
        torch.testing.assert_close(g, x)


def test_opcheck(device):
    w, k = make(3, 4, 17, device)
    torch.library.opcheck(torch.ops.rwkv_ops.timex_forward.default, (w, k, 0.5))
    torch.library.opcheck(torch.ops.rwkv_ops.timex_forward.default, (w, k))
    grad = torch.randn_like(k)
    torch.library.opcheck(torch.ops.rwkv_ops.timex_backward.default, (grad, w.detach(), k.detach()))
    # With inputs that require grad: the backward op's own autograd formula.
    torch.library.opcheck(torch.ops.rwkv_ops.timex_backward.default, (grad.requires_grad_(), w, k))


def test_backward_op_matches_autograd(device):
    w, k = make(2, 3, 23, device)
    grad = torch.randn_like(k)
    grad_w, grad_k = torch.ops.rwkv_ops.timex_backward(grad, w.detach(), k.detach())
    want_w, want_k = torch.autograd.grad(timex_formula(w, k), [w, k], grad)
    torch.testing.assert_close(grad_w, want_w)
    torch.testing.assert_close(grad_k, want_k)


def bad(device, B=2, C=3, T=5, **overrides):
    w, k = make(B, C, T, device, requires_grad=False)
    args = dict(w=w, k=k)
    args.update(overrides)
    return args


@pytest.mark.parametrize(
    "make_args, exc, pattern",
    [
        (lambda d: bad(d, w=torch.randn(3, 5, 1, device=d, dtype=torch.float64)), ValueError, "w must be a 2-D tensor"),
        (lambda d: bad(d, w=torch.randn(15, device=d, dtype=torch.float64)), ValueError, "w must be a 2-D tensor"),
        (lambda d: bad(d, k=torch.randn(3, 5, device=d, dtype=torch.float64)), ValueError, "k must be a 3-D tensor"),
        (lambda d: bad(d, w=torch.randn(4, 5, device=d, dtype=torch.float64)), ValueError, r"w.shape\[0\] must be 3 \(channels"),
        (lambda d: bad(d, w=torch.randn(3, 6, device=d, dtype=torch.float64)), ValueError, r"w.shape\[1\] must be 5 \(length"),
        (lambda d: bad(d, w=torch.randn(3, 5, device=d, dtype=torch.float32)), ValueError, "w has dtype Float but k has dtype Double"),
        (lambda d: {n: t.long() for n, t in bad(d).items()}, ValueError, "k must be a floating-point tensor"),
    ],
)
def test_bad_inputs(device, make_args, exc, pattern):
    with pytest.raises(exc, match=pattern):
        rwkv_ops.timex(**make_args(device))


def test_bad_backward_inputs(device):
    w, k = make(2, 3, 5, device, requires_grad=False)
    with pytest.raises(ValueError, match=r"grad_out.shape\[2\] must be 5"):
        torch.ops.rwkv_ops.timex_backward(torch.randn(2, 3, 4, device=device, dtype=torch.float64), w, k)
    with pytest.raises(ValueError, match="grad_out has dtype Float but k has dtype Double"):
        torch.ops.rwkv_ops.timex_backward(torch.randn(2, 3, 5, device=device), w, k)
    with pytest.raises(ValueError, match="grad_out must be a 3-D tensor"):
        torch.ops.rwkv_ops.timex_backward(torch.randn(6, 5, device=device, dtype=torch.float64), w, k)


@cuda_only
def test_mixed_devices_raise():
    w, k = make(2, 3, 5, "cuda", requires_grad=False)
    with pytest.raises(RuntimeError, match="w is on cpu but k is on cuda"):
        rwkv_ops.timex(w.cpu(), k)
    with pytest.raises(RuntimeError, match="w is on cuda:0 but k is on cpu"):
        rwkv_ops.timex(w, k.cpu())
    with pytest.raises(RuntimeError, match="grad_out is on cpu but k is on cuda"):
        torch.ops.rwkv_ops.timex_backward(k.cpu(), w, k)


# ---- CUDA: tile edges, long T, alignment, determinism --------------------------------

# Partial tiles in every dimension: B around the batch tiles (4, 8, 16, 32), C around the
# channel groups (2, 4, 8), T around the time tiles (128, 256, 512; float32 with few rows:
# the tensor-core kernel from T = 257) and not a multiple of 4.
CUDA_SHAPES = [(1, 9, 129), (3, 17, 255), (1, 5, 257), (4, 3, 513), (5, 3, 257), (8, 10, 384),
               (9, 5, 130), (17, 3, 131), (33, 2, 300), (65, 3, 70), (40, 1, 513)]


@cuda_only
@pytest.mark.parametrize("shape", CUDA_SHAPES + [(2, 3, 4100), (20, 2, 4100)])
def test_cuda_tiles_and_long_t_against_conv1d(shape, monkeypatch):
    monkeypatch.setenv("RWKV_TIMEX_ALGO", "direct")  # the direct kernels' tiles (auto: FFT at 4100)
    w, k = make(*shape, "cuda")
    grad = torch.randn_like(k)
    want = out_and_grads(timex_conv1d, w, k, grad, 0.5)
    got64 = out_and_grads(rwkv_ops.timex, w, k, grad, 0.5)
    for g, x in zip(got64, want):
        torch.testing.assert_close(g, x, rtol=1e-10, atol=1e-10)
    w32, k32 = (t.detach().float().requires_grad_() for t in (w, k))
    got32 = out_and_grads(rwkv_ops.timex, w32, k32, grad.float(), 0.5)
    for g, x in zip(got32, want):
        assert rel_err(g, x) < 5e-6, shape


@cuda_only
def test_cuda_misaligned_storage():
    # Same values at a 4-byte offset: no 16-byte vector copies; T % 4 == 0 otherwise allows them.
    B, C, T = 6, 5, 136
    w, k = make(B, C, T, "cuda", dtype=torch.float32, requires_grad=False)
    base = torch.empty(B * C * T + 1, device="cuda")
    k_off = base[1:].view(B, C, T).copy_(k)
    assert k_off.data_ptr() % 16 != 0
    grad = torch.randn_like(k)
    g_off = torch.empty(B * C * T + 1, device="cuda")[1:].view(B, C, T).copy_(grad)
    torch.testing.assert_close(rwkv_ops.timex(w, k_off, 0.1), rwkv_ops.timex(w, k, 0.1), rtol=0, atol=0)
    for g, x in zip(torch.ops.rwkv_ops.timex_backward(g_off, w, k_off),
                    torch.ops.rwkv_ops.timex_backward(grad, w, k)):
        torch.testing.assert_close(g, x, rtol=0, atol=0)


@cuda_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_cuda_backward_is_deterministic(dtype):
    w, k = make(20, 16, 700, "cuda", dtype=dtype, requires_grad=False)
    grad = torch.randn_like(k)
    first = torch.ops.rwkv_ops.timex_backward(grad, w, k)
    for _ in range(3):
        again = torch.ops.rwkv_ops.timex_backward(grad, w, k)
        for a, b in zip(first, again):
            assert torch.equal(a, b)
    out = rwkv_ops.timex(w, k)
    assert torch.equal(out, rwkv_ops.timex(w, k))


@cuda_only
def test_cuda_uses_current_stream():
    w, k = make(4, 8, 300, "cuda", dtype=torch.float32, requires_grad=False)
    want = rwkv_ops.timex(w, k)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        k2 = k * 1.0  # produced on the side stream
        got = rwkv_ops.timex(w, k2)
        grads = torch.ops.rwkv_ops.timex_backward(got, w, k2)
    stream.synchronize()
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_second_gpu():
    w, k = make(3, 5, 77, "cuda:1")
    grad = torch.randn_like(k)
    got = out_and_grads(rwkv_ops.timex, w, k, grad, 0.2)
    want = out_and_grads(timex_formula, w, k, grad, 0.2)
    for g, x in zip(got, want):
        assert g.device == torch.device("cuda:1")
        torch.testing.assert_close(g, x)


# ---- The CUDA kernels' index arithmetic, checked without a GPU --------------------------


EMULATOR = r"""
// Runs the CUDA kernels of csrc/rwkv/timex_kernels.cuh on the CPU (tests/cuda_emulation.h)
// and checks outputs, both gradients and untouched guard elements against a float64
// reference for the configurations that timex_cuda.cu picks by batch size.
#include <cstdio>

#include "cuda_emulation.h"
#include "timex_reference.h"

#define TIMEX_EMULATE
#define TIMEX_DEVICE inline
#define TIMEX_KERNEL(threads, min_blocks) void
#define TIMEX_SHARED_BYTES(name) unsigned char* name = emu_smem
#define TIMEX_SYNC() emu_barrier->arrive_and_wait()
#include "rwkv/timex_kernels.cuh"

using namespace rwkv::kernels;

std::mt19937 rng(1234);
int failures = 0;

// B, C, T; eps; offset = elements by which k, g, out, grad_k are shifted (misalignment).
// tensor_cores: also run the tensor-core kernels (slow to emulate: every mma.sync
// meets its warp at a barrier), in the tile shapes listed below.
template <typename S>
void check(int B, int C, int T, double eps, int offset, double tol, bool tensor_cores = false) {
  using acc_t = std::conditional_t<std::is_same_v<S, double>, double, float>;
  const size_t n = size_t(B) * C * T;
  auto in = timex_inputs<S>(rng, B, C, T, eps, offset, 4);
  auto &w = in.w, &k = in.k, &g = in.g;
  const S *kp = in.kp, *gp = in.gp;
  const auto &out_ref = in.out_ref, &gk_ref = in.gk_ref, &gw_ref = in.gw_ref;
  const S guard = static_cast<S>(777.0);
  bool guards = true;
  std::vector<S> out(k.size(), guard), gk(k.size(), guard), gw(size_t(C) * T, guard);
  const bool vec = std::is_same_v<S, acc_t> && T % 4 == 0 && offset % 4 == 0;
  const bool vec_w = std::is_same_v<S, acc_t> && T % 4 == 0;
  Tiles<acc_t>::toeplitz(B, [&](auto cfg) {
    using Cfg = decltype(cfg);
    const int blocks = cdiv(C, Cfg::NC) * cdiv(B, Cfg::BB) * cdiv(T, Cfg::TT);
    launch(blocks, Cfg::THREADS, Cfg::SMEM_BYTES, [&] {
      toeplitz_kernel<S, Cfg, true>(w.data(), kp, out.data() + offset, B, C, T, acc_t(eps),
                                    vec_w, vec, vec);
    });
    launch(blocks, Cfg::THREADS, Cfg::SMEM_BYTES, [&] {
      toeplitz_kernel<S, Cfg, false>(w.data(), gp, gk.data() + offset, B, C, T, acc_t(0),
                                     vec_w, vec, vec);
    });
  });
  // Where asked (not float64): the tensor-core kernels too (five tile shapes, Tiles' choice).
  std::vector<S> out2(k.size(), guard), gk2(k.size(), guard);
  double e4 = 0, e5 = 0;
  if constexpr (!std::is_same_v<S, double>) {
    if (tensor_cores) {
      auto tc = [&](auto cfg) {
        using Cfg = decltype(cfg);
        const int blocks = C * cdiv(B, Cfg::BB) * cdiv(T, Cfg::TT);
        std::fill(out2.begin(), out2.end(), guard);
        std::fill(gk2.begin(), gk2.end(), guard);
        launch(blocks, Cfg::THREADS, Cfg::SMEM_BYTES, [&] {
          toeplitz_tc_kernel<S, Cfg, true>(w.data(), kp, out2.data() + offset, B, C, T,
                                           float(eps), vec_w, vec);
        });
        launch(blocks, Cfg::THREADS, Cfg::SMEM_BYTES, [&] {
          toeplitz_tc_kernel<S, Cfg, false>(w.data(), gp, gk2.data() + offset, B, C, T, 0.f,
                                            vec_w, vec);
        });
        std::vector<double> o2, dk2;
        guards &= unpad_outputs(out2, gk2, offset, n, guard, o2, dk2);
        e4 = std::max(e4, rel_err(o2, out_ref));
        e5 = std::max(e5, rel_err(dk2, gk_ref));
      };
      tc(ToeplitzTCConfig<1, 4, 32, 4>{});
      tc(ToeplitzTCConfig<2, 2, 16, 4>{});
      tc(ToeplitzTCConfig<2, 2, 16, 4, 4>{});  // time folds: 4 rows x 4 folds
      tc(ToeplitzTCConfig<1, 1, 32, 4, 2>{});  // 4 rows x 2 folds, one warp
      tc(ToeplitzTCConfig<4, 2, 64, 8, 8>{});  // Tiles' choice for B <= 4 (if T > 256)
      Tiles<float>::toeplitz_tc(B, T, tc);
    }
  }
  Tiles<acc_t>::wgrad(B, [&](auto cfg) {
    using Cfg = decltype(cfg);
    launch(cdiv(C, Cfg::NCH) * cdiv(T, Cfg::ST), Cfg::THREADS, Cfg::SMEM_BYTES,
           [&] { wgrad_kernel<S, Cfg>(gp, kp, gw.data(), B, C, T, vec); });
  });
  std::vector<double> o, dk, dw(gw.size());
  guards &= unpad_outputs(out, gk, offset, n, guard, o, dk);
  for (size_t i = 0; i < gw.size(); ++i) dw[i] = as_double(gw[i]);
  const double e1 = rel_err(o, out_ref), e2 = rel_err(dk, gk_ref), e3 = rel_err(dw, gw_ref);
  const bool ok = e1 < tol && e2 < tol && e3 < tol && e4 < tol && e5 < tol && guards;
  failures += !ok;
  char tc_errors[64] = "";
  if (tensor_cores) {
    std::snprintf(tc_errors, sizeof tc_errors, "; tensor cores: out %.1e grad_k %.1e", e4, e5);
  }
  std::printf("%s %zu-byte B=%d C=%d T=%d offset=%d vec=%d: out %.1e grad_k %.1e grad_w %.1e%s%s\n",
              ok ? "ok  " : "FAIL", sizeof(S), B, C, T, offset, int(vec), e1, e2, e3, tc_errors,
              guards ? "" : " (wrote outside the output)");
}

int main() {
  // Every float configuration (B <= 4, 8, 16, more; grad_w rows 1, 2, 4, 8, 16), partial
  // tiles in B, C and T, T % 4 == 0 or not, aligned or not.
  check<float>(1, 3, 1, 0.5, 0, 2e-6);
  check<float>(2, 9, 37, 0.5, 0, 2e-6, true);
  check<float>(3, 17, 260, 0.0, 0, 2e-6);
  check<float>(4, 9, 132, 0.0, 1, 2e-6, true);
  check<float>(7, 10, 300, 0.25, 0, 2e-6);
  check<float>(8, 3, 129, 0.25, 2, 2e-6);
  check<float>(13, 5, 260, -1.0, 0, 2e-6);
  check<float>(33, 3, 257, 0.1, 0, 2e-6);
  check<float>(40, 2, 384, 0.1, 0, 2e-6);
  check<float>(20, 2, 70, 0.1, 0, 2e-6, true);
  check<float>(5, 2, 300, 0.1, 0, 2e-6, true);
  check<double>(5, 9, 70, 0.3, 0, 1e-12);
  check<double>(6, 3, 132, 0.3, 0, 1e-12);
  check<c10::Half>(6, 9, 100, 0.3, 0, 2e-3);
  check<c10::BFloat16>(20, 3, 68, 0.3, 0, 1e-2);
  std::printf("%d failures\n", failures);
  return failures != 0;
}
"""


@emulation_test
def test_cuda_kernels_emulated_on_cpu(tmp_path):
    """Compiles csrc/rwkv/timex_kernels.cuh as host C++ (a thread per CUDA thread, a barrier
    per __syncthreads, synchronous copies) and runs the configurations timex_cuda.cu picks,
    so that tiling, staging and register-window index errors fail here, GPU or not."""
    run_emulator(EMULATOR, tmp_path)


def test_python_arguments_of_the_wrong_kind(device):
    w, k = make(2, 3, 5, device, requires_grad=False)
    with pytest.raises(TypeError, match=r"timex: k must be a torch.Tensor, got list \[\[1.0\]\]"):
        rwkv_ops.timex(w, [[1.0]])
    with pytest.raises(TypeError, match="timex: w must be a torch.Tensor, got NoneType"):
        rwkv_ops.timex(None, k)
    for eps in ["a", None, True, [0.0]]:
        with pytest.raises(TypeError, match=f"timex: eps must be a real number .*, got {type(eps).__name__}"):
            rwkv_ops.timex(w, k, eps=eps)
    with pytest.raises(TypeError, match="TimeX: k must be a torch.Tensor, got tuple"):
        rwkv_ops.TimeX(3, 5)((1, 2))
