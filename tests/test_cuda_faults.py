"""Faults: allocations that fail, and calls from several threads at once.

Out of memory (CUDA). Each case is one op call on buffers of a few hundred MB, on every path
that allocates on its own: the LLTM sequence forward and backward (persistent and fallback),
TimeX forward and backward (fused FFT: spectra, output, wgrad scratch; library FFT:
packed spectra, cuFFT's out-of-place results and workspace), the LLTM cell (small and cuBLAS
paths), padding (the backward's split workspace). The GPU is filled with ballast tensors until
only `leave` bytes are free, for leave = 0 and fractions of what the call needs (measured),
so that the failure hits each of the call's allocations in turn. The contract:
  1. the call raises a RuntimeError (test_out_of_memory_raises_torch_oom), never crashes:
     torch's own ops raise torch.OutOfMemoryError (a RuntimeError), which the stable ABI
     cannot carry across its boundary (only RuntimeError, ValueError, IndexError); from
     torch 2.13 on the message is the allocator's "CUDA out of memory ...";
  2. it leaks nothing: torch.cuda.memory_allocated() is back to its value before the call;
  3. the process goes on: with the ballast freed, the same call succeeds and gives the same
     bits as before the faults (test_out_of_memory_leaves_nothing_and_recovers, which accepts
     any RuntimeError for the fault so that 2 and 3 are checked whatever 1 finds).
Through the stable ABI an allocation failure inside the op (aoti_torch_empty_strided,
torch_call_dispatcher) comes back as an error code and is rethrown by
csrc/common/stable_error.h's check as std::runtime_error: Python sees RuntimeError, with the
allocator's text only on torch >= 2.13 (torch_exception_get_what_without_backtrace). (The
stable headers' own check formatted its message through a locale that crashes on the GPU
machine's torch 2.11: these tests found that segmentation fault.)
On the CPU (no GPU needed): an impossible allocation inside each op raises RuntimeError
(what torch.empty raises on the CPU), and the next call works.

Threads (CUDA, and the CPU): several Python threads call the ops at once, each on its own
CUDA stream, and every result equals bit for bit the same call made alone, one after
another: the sequence (persistent and fallback; per-call plans and cluster launch attributes),
TimeX's fused FFT (a twiddle table per device and length, made by the first call) and library
FFT (cuFFT plans, kept spectra through autograd), the direct TimeX kernels, the LLTM cell
(small and cuBLAS paths), padding. The
paths are forced per phase (the environment variables are process-wide) and mixed in an
"auto" phase where the shapes pick different paths at once.
"""

import os
import random
import threading
import zlib

import pytest
import torch
from conftest import DEVICES

import lltm
import padding_ops
import rwkv_ops

HAS_CUDA = torch.cuda.is_available()
cuda_only = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")


def randn(gen, *shape, device="cuda", dtype=torch.float32, scale=1.0):
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(device, dtype)


class Call:
    """One op call: make(gen, device) -> inputs (made before the ballast), run(*inputs) ->
    tuple of outputs; env: path variables."""

    def __init__(self, name, make, run, env=None):
        self.name, self.make, self.run, self.env = name, make, run, env or {}

    def __repr__(self):
        return self.name


def seq_forward_call(path, T, B, F, S, dtype=torch.float32):
    def make(gen, device):
        return [randn(gen, T, B, F, device=device, dtype=dtype),
                randn(gen, 3 * S, S + F, device=device, dtype=dtype, scale=S**-0.5),
                randn(gen, 3 * S, device=device, dtype=dtype, scale=0.1),
                randn(gen, B, S, device=device, dtype=dtype, scale=0.5),
                randn(gen, B, S, device=device, dtype=dtype, scale=0.5)]

    return Call(f"seq-forward-{path}-{str(dtype)[6:]}-{(T, B, F, S)}", make,
                lambda *a: torch.ops.lltm.lltm_sequence_forward(*a),
                {"LLTM_SEQUENCE_PATH": path})


def seq_backward_call(path, T, B, F, S, dtype=torch.float32):
    fwd = seq_forward_call(path, T, B, F, S, dtype)

    def make(gen, device):
        args = fwd.make(gen, device)
        with env_vars(fwd.env):
            hs, cells, gates = torch.ops.lltm.lltm_sequence_forward(*args)
        return [randn(gen, T + 1, B, S, device=device, dtype=dtype),
                randn(gen, B, S, device=device, dtype=dtype), args[0], args[1], hs, cells, gates]

    return Call(f"seq-backward-{path}-{str(dtype)[6:]}-{(T, B, F, S)}", make,
                lambda *a: torch.ops.lltm.lltm_sequence_backward(*a, [True] * 3),
                {"LLTM_SEQUENCE_PATH": path})


def timex_forward_call(algo, B, C, T, dtype=torch.float32):
    def make(gen, device):
        return [randn(gen, C, T, device=device, dtype=dtype, scale=T**-0.5),
                randn(gen, B, C, T, device=device, dtype=dtype)]

    return Call(f"timex-forward-{algo}-{str(dtype)[6:]}-{(B, C, T)}", make,
                lambda w, k: (torch.ops.rwkv_ops.timex_forward(w, k, 0.25),),
                {"RWKV_TIMEX_ALGO": algo})


def timex_backward_call(algo, B, C, T, dtype=torch.float32):
    def make(gen, device):
        return [randn(gen, B, C, T, device=device, dtype=dtype),
                randn(gen, C, T, device=device, dtype=dtype, scale=T**-0.5),
                randn(gen, B, C, T, device=device, dtype=dtype)]

    return Call(f"timex-backward-{algo}-{str(dtype)[6:]}-{(B, C, T)}", make,
                lambda g, w, k: torch.ops.rwkv_ops.timex_backward(g, w, k),
                {"RWKV_TIMEX_ALGO": algo})


def timex_autograd_call(algo, B, C, T, dtype=torch.float32):
    """rwkv_ops.timex with autograd: on the library path the forward keeps the spectra of k and
    w for the backward (per-call state)."""
    def make(gen, device):
        return timex_backward_call(algo, B, C, T, dtype).make(gen, device)

    def run(g, w, k):
        w, k = w.detach().requires_grad_(), k.detach().requires_grad_()
        out = rwkv_ops.timex(w, k, 0.25)
        return (out.detach(), *torch.autograd.grad(out, [w, k], g))

    return Call(f"timex-autograd-{algo}-{str(dtype)[6:]}-{(B, C, T)}", make, run,
                {"RWKV_TIMEX_ALGO": algo})


def cell_forward_call(path, B, F, S, dtype=torch.float32):
    def make(gen, device):
        return [randn(gen, B, F, device=device, dtype=dtype),
                randn(gen, 3 * S, S + F, device=device, dtype=dtype, scale=(S + F)**-0.5),
                randn(gen, 3 * S, device=device, dtype=dtype),
                randn(gen, B, S, device=device, dtype=dtype),
                randn(gen, B, S, device=device, dtype=dtype)]

    return Call(f"cell-forward-{path}-{(B, F, S)}", make, lambda *a: torch.ops.lltm.lltm_forward(*a),
                {"LLTM_CUDA_PATH": path})


def cell_backward_call(path, B, F, S, dtype=torch.float32):
    fwd = cell_forward_call(path, B, F, S, dtype)

    def make(gen, device):
        args = fwd.make(gen, device)
        with env_vars(fwd.env):
            new_h, new_cell, X, gates = torch.ops.lltm.lltm_forward(*args)
        return [randn(gen, B, S, device=device, dtype=dtype),
                randn(gen, B, S, device=device, dtype=dtype), new_cell, gates, X, args[1]]

    return Call(f"cell-backward-{path}-{(B, F, S)}", make,
                lambda *a: torch.ops.lltm.lltm_backward(*a, [True] * 4),
                {"LLTM_CUDA_PATH": path})


def padding_forward_call(shape, pad, shift):
    return Call(f"tile_pad-forward{tuple(shape)}", lambda gen, device: [
        randn(gen, *shape, device=device)], lambda x: (padding_ops.tile_pad(x, pad, shift),))


def padding_backward_call(shape, pad, shift):
    left, right, top, bottom = pad
    out = (*shape[:-2], shape[-2] + top + bottom, shape[-1] + left + right)
    return Call(f"tile_pad-backward{tuple(shape)}", lambda gen, device: [
        randn(gen, *out, device=device)],
        lambda gy: (torch.ops.padding_ops.tile_pad_backward(gy, pad, shift),))


class env_vars:
    """Sets (value None: unsets) environment variables for a block."""

    def __init__(self, values):
        self.values = values

    def __enter__(self):
        self.old = {k: os.environ.get(k) for k in self.values}
        for k, v in self.values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def __exit__(self, *exc):
        for k, v in self.old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        return False


# ---- Out of memory (CUDA) ------------------------------------------------------------------

# A few hundred MB per call: the fractions of `leave` land between its allocations.
OOM_CALLS = [
    seq_forward_call("persistent", 128, 2048, 16, 256),
    seq_backward_call("persistent", 128, 2048, 16, 256),
    seq_forward_call("fallback", 128, 2048, 16, 256),
    seq_backward_call("fallback", 128, 2048, 16, 256),
    timex_forward_call("fft", 64, 64, 16384),
    timex_backward_call("fft", 64, 64, 16384),
    timex_forward_call("fft_library", 64, 32, 8000),
    timex_backward_call("fft_library", 64, 32, 8000),
    timex_autograd_call("fft_library", 64, 32, 8000),
    timex_backward_call("direct", 64, 16, 2048),
    cell_forward_call("small", 2048, 512, 1024),
    cell_backward_call("small", 2048, 512, 1024),
    cell_forward_call("cublas", 8192, 512, 1024),
    cell_backward_call("cublas", 8192, 512, 1024),
    padding_forward_call((64, 512, 512), (100, 100, 100, 100), 3),
    padding_backward_call((8, 64, 64), (1000, 1000, 1000, 1000), 7),
]


def ballast_leaving(leave):
    """Tensors that fill the GPU until about `leave` bytes are free (driver free memory, after
    emptying torch's cache); returns them and the free bytes measured."""
    torch.cuda.empty_cache()
    chunks = []
    step = 1 << 30
    while True:
        free = torch.cuda.mem_get_info()[0]
        extra = free - leave
        if extra < (4 << 20):
            break
        n = min(step, extra - (2 << 20)) // (2 << 20) * (2 << 20)
        if n <= 0:
            break
        try:
            chunks.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            step //= 2
            if step < (2 << 20):
                break
    return chunks, torch.cuda.mem_get_info()[0]


def same_bits(got, want):
    return len(got) == len(want) and all(
        a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(got, want))


def measured_need(call, inputs):
    """Bytes the call allocates at its peak beyond what is allocated before it, and its
    outputs (after a warm-up call: cuBLAS handles and workspaces, cuFFT plans exist)."""
    with env_vars(call.env):
        call.run(*inputs)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        outs = call.run(*inputs)
        torch.cuda.synchronize()
        need = torch.cuda.max_memory_allocated() - before
    return need, [o.clone() for o in outs]


@cuda_only
@pytest.mark.parametrize("call", OOM_CALLS, ids=repr)
def test_out_of_memory_raises_torch_oom(call):
    """Contract 1 (module docstring): a CUDA allocation failure inside the op surfaces as
    torch.OutOfMemoryError, as it does from torch's own ops."""
    inputs = call.make(torch.Generator().manual_seed(0), "cuda")
    need, _ = measured_need(call, inputs)
    ballast, free = ballast_leaving(0)
    try:
        with env_vars(call.env):
            try:
                call.run(*inputs)
                raised = None
            except Exception as e:  # noqa: BLE001
                raised = (type(e), str(e).splitlines()[0][:300] if str(e) else "")
    finally:
        del ballast
        torch.cuda.empty_cache()
    print(f"\n{call}: needs {need / 2**20:.0f} MiB, {free / 2**20:.0f} MiB left free: raised "
          f"{raised[0].__name__ if raised else 'nothing'}: {raised[1] if raised else ''}")
    if raised is None:  # the ballast leaves a few MiB (allocator granularity): small calls fit
        pytest.skip(f"{call} fit in the {free / 2**20:.0f} MiB the ballast leaves free")
    # What the stable ABI can carry: a RuntimeError (torch.OutOfMemoryError is one), never a
    # crash; from torch 2.13 on it carries the allocator's text, before that the failing call.
    assert issubclass(raised[0], RuntimeError), (
        f"{call}: raised {raised[0].__name__} ({raised[1]}), not a RuntimeError")
    if tuple(map(int, torch.__version__.split("+")[0].split(".")[:2])) >= (2, 13):
        assert "out of memory" in raised[1].lower(), f"{call}: {raised[1]}"


@cuda_only
@pytest.mark.parametrize("call", OOM_CALLS, ids=repr)
def test_out_of_memory_leaves_nothing_and_recovers(call):
    """Contracts 2 and 3 (module docstring), with the failure at each of the call's
    allocations in turn (leave = 0 and fractions of the call's measured need)."""
    inputs = call.make(torch.Generator().manual_seed(0), "cuda")
    need, want = measured_need(call, inputs)
    failures = []
    for fraction in (0.0, 0.2, 0.4, 0.6, 0.8, 0.95):
        ballast, free = ballast_leaving(int(need * fraction))
        before = torch.cuda.memory_allocated()
        error = None
        try:
            with env_vars(call.env):
                try:
                    call.run(*inputs)
                except (torch.OutOfMemoryError, RuntimeError) as e:
                    error = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
            torch.cuda.synchronize()
            after = torch.cuda.memory_allocated()
        finally:
            del ballast
            torch.cuda.empty_cache()
        if error is not None:
            failures.append(fraction)
            # after < before: tensors of earlier tests freed meanwhile (a garbage collection
            # during the call), not a leak.
            assert after <= before, (
                f"{call}: {after - before} bytes still allocated after the failure with "
                f"{free / 2**20:.0f} MiB free ({error})")
        # The process goes on: the same call, with the memory back, gives the same bits.
        with env_vars(call.env):
            again = call.run(*inputs)
        torch.cuda.synchronize()
        assert same_bits(list(again), want), f"{call}: results differ after a fault"
        del again
    print(f"\n{call}: needs {need / 2**20:.0f} MiB; failed with free = "
          f"{', '.join(f'{f:.0%}' for f in failures)} of that; no leak, recovered")
    if not failures:  # as above: the call fit in what the ballast leaves
        pytest.skip(f"{call} fit in the memory the ballast leaves free")
    assert 0.0 in failures, f"{call}: did not fail with no memory free"


def _always_overcommits():
    try:
        with open("/proc/sys/vm/overcommit_memory") as f:
            return f.read().strip() == "1"
    except OSError:
        return False


@pytest.mark.skipif(_always_overcommits(), reason="vm.overcommit_memory=1: the kernel grants "
                    "any allocation and kills the process when it is written (the GPU machine)")
def test_impossible_allocation_raises_and_next_call_works_cpu():
    """On the CPU: sizes that no machine has (expanded inputs, so nothing is allocated before
    the op) make the op's own allocation fail: RuntimeError (as torch.empty on the CPU), and
    the next call works."""
    big = 2**22
    cases = [
        ("lltm_sequence", lambda: torch.ops.lltm.lltm_sequence_forward(
            torch.zeros(1, 1, 1).expand(big, big, 1), torch.zeros(12, 5), torch.zeros(12),
            torch.zeros(1, 4).expand(big, 4), torch.zeros(1, 4).expand(big, 4))),
        ("timex", lambda: torch.ops.rwkv_ops.timex_forward(
            torch.zeros(1, 1).expand(big, 2**20), torch.zeros(1, 1, 1).expand(4, big, 2**20),
            0.0)),
        ("tile_pad", lambda: padding_ops.tile_pad(torch.zeros(1, 1), (big, 0, big, 0))),
    ]
    for name, fn in cases:
        with pytest.raises(RuntimeError):
            fn()
    x = torch.randn(3, 2, 4, dtype=torch.float64)
    w = torch.randn(6, 6, dtype=torch.float64)
    out, _ = lltm.lltm_sequence(x, w, torch.zeros(6, dtype=torch.float64),
                                torch.zeros(2, 2, dtype=torch.float64),
                                torch.zeros(2, 2, dtype=torch.float64))
    assert torch.isfinite(out).all()
    assert torch.isfinite(rwkv_ops.timex(torch.randn(2, 5), torch.randn(1, 2, 5))).all()


# ---- Threads -------------------------------------------------------------------------------

def phase_calls(phase, device):
    """(call, inputs) pairs of one phase: the paths it forces (None: auto), small sizes."""
    gen = torch.Generator().manual_seed(zlib.crc32(phase.encode()))
    if phase == "auto":
        # The shapes pick different paths at once (on an H100: persistent for float32 S = 32,
        # fallback for float64; fused FFT at T = 4096 float32, library for float64 and for
        # T = 20000, direct at T = 100; the cell's small path and its cuBLAS path at B = 5000).
        calls = [seq_forward_call(None, 12, 6, 8, 32), seq_backward_call(None, 12, 6, 8, 32),
                 seq_backward_call(None, 12, 6, 8, 32, torch.float64),
                 timex_backward_call(None, 3, 4, 4096), timex_forward_call(None, 3, 4, 4096),
                 timex_backward_call(None, 3, 4, 4096, torch.float64),
                 timex_autograd_call(None, 2, 3, 20000), timex_backward_call(None, 5, 3, 100),
                 cell_backward_call(None, 64, 16, 32), cell_backward_call(None, 5000, 8, 8),
                 padding_forward_call((3, 17, 33), (5, 6, 7, 8), -3),
                 padding_backward_call((8, 5), (300, 200, 150, 100), 7)]
    else:
        seq, fft, cell = {"forced-a": ("persistent", "fft", "small"),
                          "forced-b": ("fallback", "fft_library", "cublas")}[phase]
        calls = [seq_forward_call(seq, 12, 6, 8, 32), seq_backward_call(seq, 12, 6, 8, 32),
                 seq_backward_call(seq, 7, 37, 3, 129, torch.bfloat16),
                 timex_forward_call(fft, 3, 4, 8192), timex_backward_call(fft, 3, 4, 8192),
                 timex_backward_call(fft, 2, 3, 1000, torch.bfloat16),
                 timex_autograd_call(fft, 2, 3, 3000), cell_forward_call(cell, 40, 7, 21),
                 cell_backward_call(cell, 40, 7, 21),
                 padding_backward_call((4, 3), (200, 150, 100, 120), 7)]
    names = [c.name for c in calls]
    assert len(set(names)) == len(names), names
    env = {}
    if phase != "auto":
        env = {"LLTM_SEQUENCE_PATH": seq, "RWKV_TIMEX_ALGO": fft, "LLTM_CUDA_PATH": cell}
    else:
        env = {"LLTM_SEQUENCE_PATH": None, "RWKV_TIMEX_ALGO": None, "LLTM_CUDA_PATH": None}
    if device == "cpu":  # the CPU has one sequence path and one cell path
        env["LLTM_SEQUENCE_PATH"] = env["LLTM_CUDA_PATH"] = None
    with env_vars(env):
        pairs = [(c, c.make(gen, device)) for c in calls]
    return env, pairs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("phase", ["forced-a", "forced-b", "auto"])
def test_threads_on_own_streams_match_sequential_calls(device, phase):
    """The phase's paths are set process-wide around the whole test (the calls' own path
    variables are not used here: threads share the environment)."""
    env, pairs = phase_calls(phase, device)
    if device == "cuda" and phase == "forced-a":
        # The persistent kernels need sm_90; elsewhere the phase would only raise.
        try:
            with env_vars(env):
                pairs[0][0].run(*pairs[0][1])
        except ValueError as e:
            pytest.skip(f"persistent path unsupported here: {str(e)[:100]}")
    threads, rounds = (6, 3) if device == "cuda" else (3, 2)
    with env_vars(env):
        want = {c.name: [o.clone() for o in c.run(*inputs)] for c, inputs in pairs}
        if device == "cuda":
            torch.cuda.synchronize()
        errors = []
        start = threading.Barrier(threads)

        def worker(seed):
            order = list(range(len(pairs)))
            random.Random(seed).shuffle(order)
            stream = torch.cuda.Stream() if device == "cuda" else None
            try:
                start.wait()
                for _ in range(rounds):
                    results = []
                    if stream is not None:
                        with torch.cuda.stream(stream):
                            for i in order:
                                results.append((i, pairs[i][0].run(*pairs[i][1])))
                        stream.synchronize()
                    else:
                        for i in order:
                            results.append((i, pairs[i][0].run(*pairs[i][1])))
                    for i, outs in results:
                        name = pairs[i][0].name
                        if not same_bits([o for o in outs], want[name]):
                            errors.append(f"thread {seed}: {name} differs from the sequential call")
            except Exception as e:  # noqa: BLE001
                errors.append(f"thread {seed}: {type(e).__name__}: {str(e)[:200]}")

        pool = [threading.Thread(target=worker, args=(s,)) for s in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    assert not errors, "\n".join(errors[:10])
