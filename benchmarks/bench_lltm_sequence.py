"""LLTM over a sequence: this package's one-op layer against the ways a user would otherwise
run the LLTM (or an LSTM) over T steps.

Variants, each on the same (T, B, F, S): this package's LLTMLayer (lltm.lltm_sequence, one
op forward and one backward); this package's cell called in a Python loop; the tutorial's
eager cell (lltm/reference.py) in a Python loop; that eager loop captured whole in one CUDA
graph, forward and forward + backward each (GPU only); torch.compile of the eager loop (only
up to MAX_COMPILE_T steps: it unrolls the loop); and torch.nn.LSTM (cuDNN on a GPU, oneDNN on
a CPU), 4 gates, so 4/3 of the LLTM's GEMM work. "fwd" is one forward with every input
requiring grad (as in training); "fwd+bwd" adds the gradients of the input, both initial
states and the parameters (torch.autograd.grad, so nothing accumulates). Every variant is
checked against float64 before it is timed (nn.LSTM against a float64 copy of itself; a wrong
answer or an exception is a row marked MISMATCH and the run goes on); timed calls rotate over
several input sets (timing.input_sets); the fwd+bwd times of the variants are taken in
alternating rounds. On CUDA each row has its launches and peak memory per call. Besides the
speedup plot, <out>/lltm_sequence_<device>_per_step.png plots microseconds per step against T.

On the CPU every size runs in float32, bfloat16 and float16 (this package's layer, the eager
loop and nn.LSTM in each; the cell loop and torch.compile in float32 only); on CUDA float32,
or the dtypes given (`python -m benchmarks --dtype bfloat16 ...`). float32 rows are checked
against float64 within TOLERANCE; half-type rows within twice the eager loop's own error in
that dtype (DESIGN.md's rule; HALF_FLOOR where the eager loop happens to be closer).

On CUDA each row also has its GPU kernel time per step (the GPU's busy time in one fwd+bwd,
the union of the profiler's kernel intervals, so that kernels running at once count once,
divided by T), and in bfloat16 and float16 FlashRNN's fused LSTM kernel
(pip `flashrnn`, backend "cuda_fused", JIT-compiled per shape at its first call) is a peer
where flashrnn is importable: one head of width S, its input projection nn.Linear(F, 4S)
included, zero initial states (its API's default), checked against its own pure-PyTorch
"vanilla" backend in float32 on the same parameters. Its device-information extension does not
build on CUDA 13 (it reads cudaDeviceProp fields CUDA 13 removed), so the four properties it
asks for come from torch here. It runs at FLASHRNN_SIZES only (each shape costs about a minute
of compilation).

LLTM_SEQ_ROLES=ours,lstm,flashrnn (roles: ours, other, eager, compile, lstm, flashrnn) keeps
only those variants: a short run against the peers (the half types' tolerance then falls back
to HALF_FLOOR, the eager loop's error being unmeasured).
"""

import importlib
import importlib.util
import os
import sys

import torch

import lltm
from benchmarks.report import failure, fmt, pair, plot_loglog, progress, speedup, wanted
from benchmarks.timing import call_stats, cuda_busy_ms, input_sets, median_ms, medians_ms
from lltm.reference import lltm_cell_reference

SIZES = {
    "cuda": [(64, 16, 32, 128), (256, 16, 32, 128), (1024, 16, 32, 128), (256, 8, 32, 64),
             (256, 8, 32, 96), (128, 64, 128, 256), (32, 256, 256, 1024), (128, 64, 512, 512)],
    "cpu": [(64, 16, 32, 128), (256, 16, 32, 128), (128, 64, 128, 256), (32, 4, 64, 64),
            (128, 32, 64, 192)],
}
DTYPES = {"cuda": [torch.float32], "cpu": [torch.float32, torch.bfloat16, torch.float16]}
# FlashRNN's fused kernel against its float32 vanilla backend (forward output), by dtype.
FLASHRNN_TOLERANCE = {torch.bfloat16: 3e-2, torch.float16: 5e-3}
FLASHRNN_SIZES = [(256, 16, 32, 128), (128, 64, 128, 256), (128, 64, 512, 512)]
HALF_FLOOR = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
QUICK_SIZES = {"cuda": [(16, 16, 32, 128)], "cpu": [(4, 4, 8, 16)]}
# float32 against float64 (TF32 off): the gradients through hundreds of steps are the
# ill-conditioned part (tests/test_lltm_sequence.py: plain PyTorch float32 is off by 1.6e-4
# at T = 300).
TOLERANCE = 1e-3
MAX_COMPILE_T = 128  # torch.compile unrolls the loop: compile time grows with T (T = 256 took over 100 s on the H100 host)
MAX_COMPILE_T_CPU = 64  # on the 2-core CPU machine T = 128 takes minutes to compile
ROUNDS = 5


def make_set(T, B, F, S, device, dtype=torch.float32):
    """One input set: the five LLTM leaves (requiring grad) and the gradients of output, h_n
    and c_n, drawn in float32 and rounded to dtype."""
    scale = S**-0.5
    leaves = [torch.randn(T, B, F, device=device),
              torch.empty(3 * S, S + F, device=device).uniform_(-scale, scale),
              torch.empty(3 * S, device=device).uniform_(-scale, scale),
              torch.randn(B, S, device=device), torch.randn(B, S, device=device)]
    grads = (torch.randn(T, B, S, device=device), torch.randn(B, S, device=device),
             torch.randn(B, S, device=device))
    return ([t.to(dtype).requires_grad_() for t in leaves], tuple(g.to(dtype) for g in grads))


def cell_loop(cell):
    """The LLTM over a sequence as a Python loop over one cell function."""
    def run(x, weights, bias, h, c):
        outs = []
        for t in range(x.shape[0]):
            h, c = cell(x[t], weights, bias, h, c)
            outs.append(h)
        return torch.stack(outs), h, c
    return run


def fused_layer(x, weights, bias, h0, c0):
    output, (h_n, c_n) = lltm.lltm_sequence(x, weights, bias, h0, c0)
    return output, h_n, c_n


def results_of(fn, leaves, grads):
    outs = fn(*leaves)
    return [*outs, *torch.autograd.grad(outs, leaves, grads)]


def max_rel_err(got, want):
    return max(((g.double() - w.double()).norm() / w.double().norm().clamp_min(1e-30)).item()
               for g, w in zip(got, want))


class Lstm:
    """torch.nn.LSTM on the same sizes: (output, h_n, c_n) and the gradients of the input,
    both initial states and its parameters."""

    def __init__(self, F, S, device, dtype=torch.float32):
        self.module = torch.nn.LSTM(F, S).to(device, dtype)

    def fwd(self, module, x, h0, c0):
        output, (h, c) = module(x, (h0[None], c0[None]))
        return output, h[0], c[0]

    def results(self, module, leaves, grads):
        x, _, _, h0, c0 = leaves
        outs = self.fwd(module, x, h0, c0)
        wrt = [x, h0, c0, *module.parameters()]
        return [*outs, *torch.autograd.grad(outs, wrt, grads)]

    def check(self, sets):
        module64 = torch.nn.LSTM(self.module.input_size, self.module.hidden_size).to(
            sets[0][0][0].device, torch.float64)
        module64.load_state_dict({k: v.double() for k, v in self.module.state_dict().items()})
        leaves64 = [t.detach().double().requires_grad_() for t in sets[0][0]]
        want = self.results(module64, leaves64, [g.double() for g in sets[0][1]])
        return max_rel_err(self.results(self.module, *sets[0]), want)


def _flashrnn_module():
    """flashrnn's kernel module with the device properties it asks its own (CUDA-13-broken)
    extension for supplied from torch; None where flashrnn is not importable."""
    if importlib.util.find_spec("flashrnn") is None:
        return None
    # The module itself from sys.modules: the package rebinds the name `flashrnn` to its
    # function, so attribute access (and `import ... as`) would not reach the module.
    frnn = sys.modules.get("flashrnn.flashrnn.flashrnn") or importlib.import_module(
        "flashrnn.flashrnn.flashrnn")

    def gpu_info(device_id):
        p = torch.cuda.get_device_properties(device_id)
        return {"maxThreadsPerBlock": p.max_threads_per_block,
                "regsPerMultiprocessor": p.regs_per_multiprocessor,
                "multiProcessorCount": p.multi_processor_count,
                "sharedMemPerBlockOptin": p.shared_memory_per_block_optin}
    frnn.get_gpu_info = gpu_info
    return frnn


class FlashRnn:
    """FlashRNN's LSTM (one head of width S) on the same sizes: output (T, B, S) and the
    gradients of the input and its parameters (projection, R, b)."""

    def __init__(self, F, S, device, dtype):
        self.frnn = _flashrnn_module()
        self.S, self.dtype = S, dtype
        self.proj = torch.nn.Linear(F, 4 * S).to(device, dtype)
        scale = S**-0.5
        self.R = torch.empty(4, 1, S, S, device=device).uniform_(-scale, scale).to(dtype)
        self.b = torch.empty(4, 1, S, device=device).uniform_(-scale, scale).to(dtype)
        self.R.requires_grad_()
        self.b.requires_grad_()

    def params(self):
        return [*self.proj.parameters(), self.R, self.b]

    def fwd(self, x, backend="cuda_fused", params=None):
        proj_w, proj_b, R, b = params or self.params()
        T, B, _ = x.shape
        wx = torch.nn.functional.linear(x, proj_w, proj_b)
        wx = wx.transpose(0, 1).reshape(B, T, 4, 1, self.S)
        dname = str(wx.dtype).replace("torch.", "")
        h, _ = self.frnn.flashrnn(wx, R, b, function="lstm", backend=backend, dtype=dname)
        h = h[0, :, -T:, 0]  # (states, B, T or T + 1, heads, S): the hidden states of the steps
        return h.transpose(0, 1)

    def results(self, leaves, grads):
        x = leaves[0]
        out = self.fwd(x)
        return [out, *torch.autograd.grad(out, [x, *self.params()], grads[0])]

    def check(self, sets):
        x = sets[0][0][0].detach().float()
        want = self.fwd(x, "vanilla", [p.detach().float() for p in self.params()])
        got = self.fwd(sets[0][0][0].detach()).float()
        return ((got - want).norm() / want.norm()).item()


def cuda_graphed(fn, leaves, grads, backward):
    """fn (forward, or forward + every gradient) captured in one CUDA graph on static copies of
    the inputs; the returned function replays it and returns the static outputs."""
    static = [t.detach().clone().requires_grad_() for t in leaves]

    def body():
        return results_of(fn, static, grads) if backward else list(fn(*static))

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm-up outside the graph (cuBLAS workspaces, autograd state)
            body()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = body()

    def replay(i):
        graph.replay()
        return out
    return replay


def variants(T, B, F, S, device, sets, dtype=torch.float32):
    """{name: (role, fwd(i), step(i), check() -> rel err)}; the cell loop, the CUDA graph and
    torch.compile in float32 only."""
    out = {}
    full = dtype == torch.float32
    max_compile_t = MAX_COMPILE_T if device == "cuda" else MAX_COMPILE_T_CPU

    def plain(fn):
        return (lambda i: fn(*sets[i % len(sets)][0]),
                lambda i: results_of(fn, *sets[i % len(sets)]))

    leaves64 = [t.detach().double().requires_grad_() for t in sets[0][0]]
    want = results_of(cell_loop(lltm_cell_reference), leaves64, [g.double() for g in sets[0][1]])

    def checker(fn):
        return lambda: max_rel_err(results_of(fn, *sets[0]), want)

    eager = cell_loop(lltm_cell_reference)
    out["torch-fused-ops LLTMLayer"] = ("ours", *plain(fused_layer), checker(fused_layer))
    if full:
        ours_loop = cell_loop(lltm.lltm_cell)
        out["torch-fused-ops cell, Python loop"] = ("other", *plain(ours_loop),
                                                    checker(ours_loop))
    out["eager loop (tutorial cell)"] = ("eager", *plain(eager), checker(eager))
    if device == "cuda" and full:
        def graph_variant():
            fwd = cuda_graphed(eager, *sets[0], backward=False)
            step = cuda_graphed(eager, *sets[0], backward=True)
            return fwd, step, lambda: max_rel_err(step(0), want)
        try:
            out["eager loop, one CUDA graph"] = ("other", *graph_variant())
        except Exception as exc:  # capture can fail; the row says why
            out["eager loop, one CUDA graph"] = ("other", None, None, failure(exc))
    if not full:
        pass
    elif T <= max_compile_t:
        compiled = torch.compile(eager)
        out["torch.compile(eager loop)"] = ("compile", *plain(compiled), checker(compiled))
    else:
        out["torch.compile(eager loop)"] = ("compile", None, None,
                                            f"not run (T > {max_compile_t}: unrolled loop)")
    lstm = Lstm(F, S, device, dtype)
    lname = "torch.nn.LSTM (" + ("cuDNN" if device == "cuda" else "oneDNN") + ")"
    out[lname] = ("lstm",
                  lambda i: lstm.fwd(lstm.module, *[sets[i % len(sets)][0][k] for k in (0, 3, 4)]),
                  lambda i: lstm.results(lstm.module, *sets[i % len(sets)]),
                  lambda: lstm.check(sets))
    if (device == "cuda" and dtype in FLASHRNN_TOLERANCE and (T, B, F, S) in FLASHRNN_SIZES
            and _flashrnn_module() is not None):
        frnn = FlashRnn(F, S, device, dtype)
        out["FlashRNN fused LSTM"] = ("flashrnn",
                                      lambda i: frnn.fwd(sets[i % len(sets)][0][0]),
                                      lambda i: frnn.results(*sets[i % len(sets)]),
                                      lambda: frnn.check(sets))
    roles = os.environ.get("LLTM_SEQ_ROLES")
    if roles:
        keep = set(roles.split(",")) | {"ours"}
        out = {name: v for name, v in out.items() if v[0] in keep}
    return out


def tolerance(dtype, eager_err):
    """The check of a row in dtype: TOLERANCE in float32 (and float64); for a half type twice
    the eager loop's own error in that dtype, or HALF_FLOOR where that is smaller."""
    if dtype not in HALF_FLOOR:
        return TOLERANCE
    return max(2 * (eager_err or 0.0), HALF_FLOOR[dtype])


def run(device, quick=False, cases=None, dtypes=None):
    """cases: substrings of the "(T, B, F, S)" labels to run (None: all); dtypes: names of the
    dtypes to run (None: DTYPES[device])."""
    dtypes = [getattr(torch, d) for d in dtypes] if dtypes else DTYPES[device]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sizes = [s for s in (QUICK_SIZES if quick else SIZES)[device] if wanted(str(s), cases)]
    reps = 5 if quick else 30
    min_s = None if quick else 0.5
    # A call of seconds (the half-type eager loop and nn.LSTM at the largest CPU size) gets
    # fewer repeats, at least 3 in each of the ROUNDS rounds.
    budget_s = None if quick or device == "cuda" else 2.0
    rows, notes, figures = [], [], []
    notes.append("fwd+bwd: forward and the gradients of input, h0, c0 and every parameter; "
                 "us/step: fwd+bwd microseconds per step; launches and peak MiB: kernels run "
                 "and memory allocated (above what was allocated before) in one fwd / fwd+bwd")
    notes.append(f"fwd and fwd+bwd: medians, the variants of a row group timed in {ROUNDS} "
                 "alternating rounds; half-type rows checked against twice the eager loop's "
                 "error in that dtype (the eager loop's check: its own error)")
    for number, (T, B, F, S) in enumerate(sizes, 1):
        for dtype in dtypes:
            dname = str(dtype).replace("torch.", "")
            size = f"({T}, {B}, {F}, {S})"
            progress(f"lltm_sequence on {device}: case {number}/{len(sizes)} {size} {dname}")
            size_bytes = 4 * (T * B * F + 3 * S * (S + F) + T * B * S + 4 * B * S)
            sets = input_sets(lambda: make_set(T, B, F, S, device, dtype),  # noqa: B023
                              size_bytes, device)
            found = variants(T, B, F, S, device, sets, dtype)
            timed = {}
            # The eager loop first: its error sets the half types' tolerance.
            order = sorted(found, key=lambda n: found[n][0] != "eager")
            limit = None
            for name in order:
                role, fwd, step, check = found[name]
                r = {"role": role, "fwd": None, "step": None, "err": None, "step_fn": step,
                     "fwd_fn": fwd}
                timed[name] = r
                if fwd is None:
                    r["check"] = check
                    continue
                try:
                    r["err"] = check()
                    if limit is None:
                        limit = tolerance(dtype, r["err"] if role == "eager" else None)
                    if role == "flashrnn":  # its own function, against its float32 backend
                        ok = r["err"] < FLASHRNN_TOLERANCE[dtype]
                    else:
                        ok = role == "eager" and dtype in HALF_FLOOR or r["err"] < limit
                    r["check"] = "ok" if ok else f"MISMATCH ({r['err']:.1e})"
                    r["fwd_kernels"], r["fwd_peak"] = call_stats(fwd, device)
                    r["step_kernels"], r["step_peak"] = call_stats(step, device)
                    if device == "cuda":  # GPU busy time of one fwd+bwd, all kernels
                        r["gpu_ms"] = cuda_busy_ms(step)
                except Exception as exc:  # the row says what happened; the run goes on
                    r["check"], r["err"] = failure(exc), None
            timed = {name: timed[name] for name in found}  # the table's order
            alike = [r for r in timed.values() if r["err"] is not None]
            for key in ("fwd", "step"):
                fns = [r[f"{key}_fn"] for r in alike]
                try:
                    times = medians_ms(fns, device, reps=reps, budget_s=budget_s, min_s=min_s,
                                       rounds=1 if quick else ROUNDS)
                except Exception as exc:
                    progress(f"alternating timing failed ({failure(exc)}); one at a time")
                    times = []
                    for r, fn in zip(alike, fns):
                        try:
                            times.append(median_ms(fn, device, reps=reps, min_s=min_s))
                        except Exception as exc2:  # noqa: PERF203
                            r["check"] = failure(exc2)
                            times.append(None)
                for r, ms in zip(alike, times):
                    r[key] = ms
            base = {role: next((r["step"] for r in timed.values() if r["role"] == role), None)
                    for role in ("eager", "compile", "lstm")}
            lstm_fwd = next((r["fwd"] for r in timed.values() if r["role"] == "lstm"), None)
            frnn = next((r for r in timed.values() if r["role"] == "flashrnn"), {})
            for name, r in timed.items():
                per_step = r["step"] * 1e3 / T if r["step"] else None
                gpu_step = r["gpu_ms"] * 1e3 / T if r.get("gpu_ms") else None
                rows.append([size, dname, name, fmt(r["fwd"]), fmt(r["step"]), fmt(per_step, 1),
                             fmt(gpu_step, 2),
                             pair(r.get("fwd_kernels"), r.get("step_kernels"), "g"),
                             pair(r.get("fwd_peak"), r.get("step_peak"), ".1f"),
                             speedup(base["eager"], r["step"]),
                             speedup(base["compile"], r["step"]),
                             speedup(lstm_fwd, r["fwd"]), speedup(base["lstm"], r["step"]),
                             pair_text(speedup(frnn.get("fwd"), r["fwd"]),
                                       speedup(frnn.get("step"), r["step"])),
                             r["check"]])
                figures.append({"case": f"{size} {dname}", "variant": name, "dtype": dname,
                                "role": ("other" if r["role"] in ("lstm", "flashrnn")
                                         else r["role"]),
                                "ok": r["check"] == "ok", "check": r["check"], "T": T, "B": B,
                                "F": F, "S": S, "rel_err": r["err"], "fwd_ms": r["fwd"],
                                "step_ms": r["step"], "step_us_per_step": per_step,
                                "gpu_us_per_step": gpu_step,
                                **{key: r.get(key) for key in ("fwd_kernels", "step_kernels",
                                                               "fwd_peak", "step_peak")}})
            ours, lstm = timed["torch-fused-ops LLTMLayer"], base["lstm"]
            if ours["fwd"] and ours["step"] and lstm and lstm_fwd:
                notes.append(f"{size} {dname}: LLTMLayer fwd {ours['fwd']:.3f} ms vs nn.LSTM "
                             f"{fmt(lstm_fwd)} ms ({speedup(lstm_fwd, ours['fwd'])}); fwd+bwd "
                             f"{ours['step']:.3f} vs {lstm:.3f} ms "
                             f"({speedup(lstm, ours['step'])})"
                             + (f"; FlashRNN fused {fmt(frnn.get('fwd'))} / "
                                f"{fmt(frnn.get('step'))} ms" if frnn else ""))
    header = ["(T, B, F, S)", "dtype", "variant", "fwd ms", "fwd+bwd ms", "us/step (fwd+bwd)",
              "GPU us/step (fwd+bwd kernels, busy time)",
              "launches fwd / fwd+bwd", "peak MiB fwd / fwd+bwd", "fwd+bwd vs eager",
              "fwd+bwd vs compile", "fwd vs nn.LSTM", "fwd+bwd vs nn.LSTM",
              "fwd / fwd+bwd vs FlashRNN",
              f"check (rel err; float32 < {TOLERANCE:g})"]
    return header, rows, notes, figures


# The family's second plot (benchmarks/__main__.py): file suffix and what it shows.
EXTRA_PLOT = ("per_step", "time per step")


def plot_extra(path, title, figures):
    """Microseconds per step (forward + backward) against T, one line per variant and
    (B, F, S); log-log. Returns None, or why no plot was written."""
    lines = {}
    for f in figures:
        if f.get("step_us_per_step"):
            key = (f"{f['variant']} {f.get('dtype', 'float32')}, (B, F, S) = "
                   f"({f['B']}, {f['F']}, {f['S']})")
            lines.setdefault(key, []).append((f["T"], f["step_us_per_step"]))
    return plot_loglog(path, title, lines, "T (steps)", "microseconds per step, forward + backward")


def pair_text(a, b):
    """'a / b' of two formatted figures, or 'n/a' where neither exists."""
    return "n/a" if a == "n/a" and b == "n/a" else f"{a} / {b}"
