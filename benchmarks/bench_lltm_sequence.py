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
"""

import torch

import lltm
from benchmarks.report import failure, fmt, pair, plot_loglog, progress, speedup, wanted
from benchmarks.timing import call_stats, input_sets, median_ms, medians_ms
from lltm.reference import lltm_cell_reference

SIZES = {
    "cuda": [(64, 16, 32, 128), (256, 16, 32, 128), (1024, 16, 32, 128), (128, 64, 128, 256),
             (32, 256, 256, 1024), (128, 64, 512, 512)],
    "cpu": [(64, 16, 32, 128), (256, 16, 32, 128)],
}
QUICK_SIZES = {"cuda": [(16, 16, 32, 128)], "cpu": [(4, 4, 8, 16)]}
# float32 against float64 (TF32 off): the gradients through hundreds of steps are the
# ill-conditioned part (tests/test_lltm_sequence.py: plain PyTorch float32 is off by 1.6e-4
# at T = 300).
TOLERANCE = 1e-3
MAX_COMPILE_T = 128  # torch.compile unrolls the loop: compile time grows with T (T = 256 took over 100 s on the H100 host)
ROUNDS = 5


def make_set(T, B, F, S, device):
    """One input set: the five LLTM leaves (requiring grad) and the gradients of output, h_n
    and c_n."""
    scale = S**-0.5
    leaves = [torch.randn(T, B, F, device=device),
              torch.empty(3 * S, S + F, device=device).uniform_(-scale, scale),
              torch.empty(3 * S, device=device).uniform_(-scale, scale),
              torch.randn(B, S, device=device), torch.randn(B, S, device=device)]
    grads = (torch.randn(T, B, S, device=device), torch.randn(B, S, device=device),
             torch.randn(B, S, device=device))
    return [t.requires_grad_() for t in leaves], grads


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

    def __init__(self, F, S, device):
        self.module = torch.nn.LSTM(F, S).to(device)

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
        module64.load_state_dict(self.module.state_dict())
        leaves64 = [t.detach().double().requires_grad_() for t in sets[0][0]]
        want = self.results(module64, leaves64, [g.double() for g in sets[0][1]])
        return max_rel_err(self.results(self.module, *sets[0]), want)


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


def variants(T, B, F, S, device, sets):
    """{name: (role, fwd(i), step(i), check() -> rel err)}."""
    out = {}

    def plain(fn):
        return (lambda i: fn(*sets[i % len(sets)][0]),
                lambda i: results_of(fn, *sets[i % len(sets)]))

    leaves64 = [t.detach().double().requires_grad_() for t in sets[0][0]]
    want = results_of(cell_loop(lltm_cell_reference), leaves64, [g.double() for g in sets[0][1]])

    def checker(fn):
        return lambda: max_rel_err(results_of(fn, *sets[0]), want)

    eager = cell_loop(lltm_cell_reference)
    out["torch-fused-ops LLTMLayer"] = ("ours", *plain(fused_layer), checker(fused_layer))
    ours_loop = cell_loop(lltm.lltm_cell)
    out["torch-fused-ops cell, Python loop"] = ("other", *plain(ours_loop), checker(ours_loop))
    out["eager loop (tutorial cell)"] = ("eager", *plain(eager), checker(eager))
    if device == "cuda":
        def graph_variant():
            fwd = cuda_graphed(eager, *sets[0], backward=False)
            step = cuda_graphed(eager, *sets[0], backward=True)
            return fwd, step, lambda: max_rel_err(step(0), want)
        try:
            out["eager loop, one CUDA graph"] = ("other", *graph_variant())
        except Exception as exc:  # capture can fail; the row says why
            out["eager loop, one CUDA graph"] = ("other", None, None, failure(exc))
    if T <= MAX_COMPILE_T:
        compiled = torch.compile(eager)
        out["torch.compile(eager loop)"] = ("compile", *plain(compiled), checker(compiled))
    else:
        out["torch.compile(eager loop)"] = ("compile", None, None,
                                            f"not run (T > {MAX_COMPILE_T}: unrolled loop)")
    lstm = Lstm(F, S, device)
    lname = "torch.nn.LSTM (" + ("cuDNN" if device == "cuda" else "oneDNN") + ")"
    out[lname] = ("lstm",
                  lambda i: lstm.fwd(lstm.module, *[sets[i % len(sets)][0][k] for k in (0, 3, 4)]),
                  lambda i: lstm.results(lstm.module, *sets[i % len(sets)]),
                  lambda: lstm.check(sets))
    return out


def run(device, quick=False, cases=None):
    """cases: substrings of the "(T, B, F, S)" labels to run (None: all)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sizes = [s for s in (QUICK_SIZES if quick else SIZES)[device] if wanted(str(s), cases)]
    reps = 5 if quick else 30
    min_s = None if quick else 0.5
    rows, notes, figures = [], [], []
    notes.append("fwd+bwd: forward and the gradients of input, h0, c0 and every parameter; "
                 "us/step: fwd+bwd microseconds per step; launches and peak MiB: kernels run "
                 "and memory allocated (above what was allocated before) in one fwd / fwd+bwd")
    for number, (T, B, F, S) in enumerate(sizes, 1):
        size = f"({T}, {B}, {F}, {S})"
        progress(f"lltm_sequence on {device}: case {number}/{len(sizes)} {size}")
        size_bytes = 4 * (T * B * F + 3 * S * (S + F) + T * B * S + 4 * B * S)
        sets = input_sets(lambda: make_set(T, B, F, S, device), size_bytes, device)  # noqa: B023
        timed = {}
        for name, (role, fwd, step, check) in variants(T, B, F, S, device, sets).items():
            r = {"role": role, "fwd": None, "step": None, "err": None, "step_fn": step}
            timed[name] = r
            if fwd is None:
                r["check"] = check
                continue
            try:
                r["err"] = check()
                r["check"] = ("ok" if r["err"] < TOLERANCE
                              else f"MISMATCH ({r['err']:.1e})")
                r["fwd"] = median_ms(fwd, device, reps=reps, min_s=min_s)
                r["fwd_kernels"], r["fwd_peak"] = call_stats(fwd, device)
                r["step_kernels"], r["step_peak"] = call_stats(step, device)
            except Exception as exc:  # the row says what happened; the run goes on
                r["check"], r["err"] = failure(exc), None
        alike = [r for r in timed.values() if r["err"] is not None]
        try:
            steps = medians_ms([r["step_fn"] for r in alike], device, reps=reps, min_s=min_s,
                               rounds=1 if quick else ROUNDS)
            for r, ms in zip(alike, steps):
                r["step"] = ms
        except Exception as exc:
            progress(f"alternating timing failed ({failure(exc)}); one variant at a time")
            for r in alike:
                try:
                    r["step"] = median_ms(r["step_fn"], device, reps=reps, min_s=min_s)
                except Exception as exc2:  # noqa: PERF203
                    r["check"] = failure(exc2)
        base = {role: next((r["step"] for r in timed.values() if r["role"] == role), None)
                for role in ("eager", "compile", "lstm")}
        for name, r in timed.items():
            per_step = r["step"] * 1e3 / T if r["step"] else None
            rows.append([size, name, fmt(r["fwd"]), fmt(r["step"]), fmt(per_step, 1),
                         pair(r.get("fwd_kernels"), r.get("step_kernels"), "g"),
                         pair(r.get("fwd_peak"), r.get("step_peak"), ".1f"),
                         speedup(base["eager"], r["step"]), speedup(base["compile"], r["step"]),
                         speedup(base["lstm"], r["step"]), r["check"]])
            figures.append({"case": size, "variant": name,
                            "role": "other" if r["role"] == "lstm" else r["role"],
                            "ok": r["check"] == "ok", "check": r["check"], "T": T, "B": B,
                            "F": F, "S": S, "rel_err": r["err"], "fwd_ms": r["fwd"],
                            "step_ms": r["step"], "step_us_per_step": per_step,
                            **{key: r.get(key) for key in ("fwd_kernels", "step_kernels",
                                                           "fwd_peak", "step_peak")}})
        ours, lstm = timed["torch-fused-ops LLTMLayer"], base["lstm"]
        if ours["fwd"] and ours["step"] and lstm:
            lstm_fwd = next(r["fwd"] for r in timed.values() if r["role"] == "lstm")
            notes.append(f"{size}: LLTMLayer fwd {ours['fwd']:.3f} ms vs nn.LSTM "
                         f"{fmt(lstm_fwd)} ms ({speedup(lstm_fwd, ours['fwd'])}); fwd+bwd "
                         f"{ours['step']:.3f} vs {lstm:.3f} ms ({speedup(lstm, ours['step'])})")
    header = ["(T, B, F, S)", "variant", "fwd ms", "fwd+bwd ms", "us/step (fwd+bwd)",
              "launches fwd / fwd+bwd", "peak MiB fwd / fwd+bwd", "fwd+bwd vs eager",
              "fwd+bwd vs compile", "fwd+bwd vs nn.LSTM", f"check (rel err < {TOLERANCE:g})"]
    return header, rows, notes, figures


# The family's second plot (benchmarks/__main__.py): file suffix and what it shows.
EXTRA_PLOT = ("per_step", "time per step")


def plot_extra(path, title, figures):
    """Microseconds per step (forward + backward) against T, one line per variant and
    (B, F, S); log-log. Returns None, or why no plot was written."""
    lines = {}
    for f in figures:
        if f.get("step_us_per_step"):
            key = f"{f['variant']}, (B, F, S) = ({f['B']}, {f['F']}, {f['S']})"
            lines.setdefault(key, []).append((f["T"], f["step_us_per_step"]))
    return plot_loglog(path, title, lines, "T (steps)", "microseconds per step, forward + backward")
