"""The tutorial API: lltm_cpp / lltm_cuda in the C++/CUDA extension tutorial's own client
code, against the tutorial's pure-Python LLTM, timed the way the tutorial's benchmark times
them.

The tutorial's module (weights (3S, F+S), bias (1, 3S)) around an autograd.Function that
calls `forward` and `backward` of a drop-in module (written here in this package's words);
its benchmark's measurement: the module's forward on inputs that require grad (as its
script makes them), then `(new_h.sum() + new_cell.sum()).backward()`, each timed
separately on the wall clock (after a device synchronisation on CUDA), medians over
alternating rounds of every variant. float32 and float64, at the tutorial's size (batch 16,
32 features, state 128) and one larger size. Each variant's outputs and parameter
gradients are checked against float64 first (a wrong answer is a row marked MISMATCH).
The tutorial's own compiled extension is a row where a build of it is importable under the
module name in FUSED_OPS_TUTORIAL_EXT (its C++ module, built outside this repository under
another name, since `lltm_cpp` is this package's; CPU tensors only, as it dispatches on
nothing); elsewhere ANCHORS.md's measurement stands: at or behind the pure-Python LLTM.
"""

import copy
import importlib
import math
import os
import statistics
import time

import torch

import lltm
import lltm_cpp
import lltm_cuda
from benchmarks.report import failure, fmt, progress, speedup, wanted
from lltm.reference import lltm_cell_reference

SIZES = [(16, 32, 128), (64, 256, 512)]  # (batch, features, state)
QUICK_SIZES = [(16, 32, 128)]
DTYPES = [torch.float32, torch.float64]
ROUNDS = 10
TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-10}


class PythonLLTM(torch.nn.Module):
    """The tutorial's pure-Python LLTM (its module layout: bias (1, 3S))."""

    def __init__(self, features, state):
        super().__init__()
        self.weights = torch.nn.Parameter(torch.empty(3 * state, features + state))
        self.bias = torch.nn.Parameter(torch.empty(1, 3 * state))
        stdv = 1.0 / math.sqrt(state)
        for p in self.parameters():
            p.data.uniform_(-stdv, stdv)

    def forward(self, input, state):  # lltm.reference is the tutorial's Python forward
        return lltm_cell_reference(input, self.weights, self.bias, *state)


def client_function(module, n_grads):
    """The tutorial client's autograd.Function around a drop-in module."""

    class LLTMFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, input, weights, bias, old_h, old_cell):
            outputs = module.forward(input, weights, bias, old_h, old_cell)
            new_h, new_cell = outputs[:2]
            ctx.save_for_backward(*(outputs[1:] + [weights]))
            return new_h, new_cell

        @staticmethod
        def backward(ctx, grad_h, grad_cell):
            grads = module.backward(grad_h.contiguous(), grad_cell.contiguous(),
                                    *ctx.saved_tensors)
            d_old_h, d_input, d_weights, d_bias, d_old_cell = grads[:n_grads][:5]
            return d_input, d_weights, d_bias, d_old_h, d_old_cell

    return LLTMFunction


class ClientLLTM(PythonLLTM):
    """The tutorial's extension module: the same parameters, the Function's apply."""

    def __init__(self, features, state, function):
        super().__init__(features, state)
        self.function = function

    def forward(self, input, state):
        return self.function.apply(input, self.weights, self.bias, *state)


class PackageLLTM(PythonLLTM):
    """This package's lltm.lltm_cell with the tutorial's (1, 3S) bias flattened."""

    def forward(self, input, state):
        return lltm.lltm_cell(input, self.weights, self.bias.view(-1), *state)


def variants(features, state, device, dtype):
    """(row name, role, module): each with the eager module's parameters, on device and dtype."""
    base = PythonLLTM(features, state)
    compiled = PythonLLTM(features, state)
    rows = [
        ("eager PyTorch (the tutorial's pure-Python LLTM)", "eager", base),
        ("torch.compile of it", "compile", compiled),
        ("torch-fused-ops: tutorial client + lltm_cpp", "ours",
         ClientLLTM(features, state, client_function(lltm_cpp, 5))),
        ("torch-fused-ops: tutorial client + lltm_cuda", "ours",
         ClientLLTM(features, state, client_function(lltm_cuda, 6))),
        ("torch-fused-ops: lltm.lltm_cell", "other", PackageLLTM(features, state)),
    ]
    name = os.environ.get("FUSED_OPS_TUTORIAL_EXT")
    if name and device == "cpu":
        try:
            module = importlib.import_module(name)
            rows.append(("the tutorial's own C++ extension", "peer",
                         ClientLLTM(features, state, client_function(module, 5))))
        except ImportError as exc:
            progress(f"FUSED_OPS_TUTORIAL_EXT={name}: {exc}; no row for it")
    for _, _, rnn in rows[1:]:
        rnn.load_state_dict(base.state_dict())
    for _, _, rnn in rows:
        rnn.to(device, dtype)
    rows[1] = (rows[1][0], rows[1][1], torch.compile(compiled))
    return rows


def check(rnn, ref, inputs):
    """Max relative error of outputs and parameter gradients against float64."""
    errs = []
    outs = rnn(inputs[0], inputs[1:])
    rnn.zero_grad()
    (outs[0].sum() + outs[1].sum()).backward()
    ref64 = copy.deepcopy(ref).double()  # Module.double() converts in place
    ref64.zero_grad()
    want = ref64(inputs[0].detach().double(), tuple(t.detach().double() for t in inputs[1:]))
    (want[0].sum() + want[1].sum()).backward()
    pairs = list(zip(outs, want)) + [(p.grad, q.grad) for p, q in
                                       zip(rnn.parameters(), ref64.parameters())]
    for g, w in pairs:
        errs.append(((g.double() - w).norm() / w.norm().clamp_min(1e-30)).item())
    return max(errs)


def time_rounds(models, inputs, device, reps, rounds):
    """The tutorial benchmark's two timings per call, alternating rounds: (fwd, bwd) ms."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    x, h, c = inputs
    samples = [([], []) for _ in models]
    for rnn in models:  # warm-up
        for _ in range(10):
            new_h, new_cell = rnn(x, (h, c))
            (new_h.sum() + new_cell.sum()).backward()
    for _ in range(rounds):
        for k, rnn in enumerate(models):
            for _ in range(reps):
                rnn.zero_grad()
                sync()
                t0 = time.perf_counter()
                new_h, new_cell = rnn(x, (h, c))
                sync()
                t1 = time.perf_counter()
                (new_h.sum() + new_cell.sum()).backward()
                sync()
                t2 = time.perf_counter()
                samples[k][0].append((t1 - t0) * 1e3)
                samples[k][1].append((t2 - t1) * 1e3)
    return [(statistics.median(f), statistics.median(b)) for f, b in samples]


def run(device, quick=False, cases=None):
    rows, figures = [], []
    reps = 20 if quick else 200
    rounds = 2 if quick else ROUNDS
    labelled = [(f"({b}, {f}, {s}) {str(dtype).removeprefix('torch.')}", (b, f, s), dtype)
                for b, f, s in (QUICK_SIZES if quick else SIZES) for dtype in DTYPES]
    labelled = [item for item in labelled if wanted(item[0], cases)]
    for number, (label, (batch, features, state), dtype) in enumerate(labelled, 1):
        progress(f"lltm_tutorial on {device}: case {number}/{len(labelled)} {label}")
        torch.manual_seed(0)
        named = variants(features, state, device, dtype)
        base = named[0][2]
        inputs = [torch.randn(batch, n) for n in (features, state, state)]
        inputs = [t.to(device, dtype).requires_grad_() for t in inputs]
        timed, checks = [], {}
        for name, role, rnn in named:
            try:
                err = check(rnn, base, inputs)
                checks[name] = "ok" if err < TOLERANCE[dtype] else f"MISMATCH ({err:.1e})"
                timed.append((name, role, rnn))
            except Exception as exc:  # the row says what happened; the run goes on
                checks[name] = failure(exc)
        times = time_rounds([rnn for _, _, rnn in timed], inputs, device, reps, rounds)
        by_name = {name: t for (name, _, _), t in zip(timed, times)}
        eager = by_name.get(named[0][0], (None, None))
        compiled = by_name.get(named[1][0], (None, None))
        for name, role, _ in named:
            fwd, bwd = by_name.get(name, (None, None))
            rows.append([label, name, fmt(fwd), fmt(bwd), speedup(eager[0], fwd),
                         speedup(eager[1], bwd), speedup(compiled[0], fwd),
                         speedup(compiled[1], bwd), checks[name]])
            figures.append({"case": label, "variant": name, "role": role,
                            "ok": checks[name] == "ok", "check": checks[name],
                            "fwd_ms": fwd, "bwd_ms": bwd})
    header = ["(B, F, S) dtype", "variant", "fwd ms", "bwd ms", "fwd vs eager", "bwd vs eager",
              "fwd vs compile", "bwd vs compile", "check"]
    notes = ["the tutorial benchmark's measurement: wall time of the module's forward (inputs "
             "and states requiring grad), then of (new_h.sum() + new_cell.sum()).backward() "
             "(gradients of the inputs, states and parameters), each after a "
             "device synchronisation; medians of alternating rounds; vs eager / vs compile: the "
             "pure-Python LLTM's time (eager, torch.compile) over the row's (>1: the row is "
             "faster)"]
    return header, rows, notes, figures
