"""Brick padding: this package against plain-PyTorch formulations and torch.compile of them.

Variants, each checked against the int64 reference (forward exactly, backward against a
float64 reference) before it is timed:
- torch-fused-ops: padding_ops.tile_pad (one kernel forward; backward without atomics).
- published formulation: written here in the spirit of the public demo: float coordinate
  grids, floor/mod arithmetic on them, then a gather (many small kernels, large temporaries).
- torch.compile of the published formulation.
- integer gather: index tensors precomputed once outside the timed call, then x[..., ri, ci].
- torch.compile of the integer gather.
- F.pad(mode="circular"), where shift == 0 (the only case it covers).
- Taichi (forward only), where taichi is importable: benchmarks/taichi_kernels.py.
A variant that gives a wrong answer or raises is a row marked MISMATCH; the run goes on.

"fwd" is one call; "bwd" is torch.autograd.grad of a kept forward (the backward alone).
On CUDA also: output GB/s against the measured copy (read + write) and write-only fill
bandwidths, kernel launches per call (profiler), and peak memory allocated during a call
above what was allocated before it (the output or gradient included).
"""

import torch
import torch.nn.functional as F

import padding_ops
from benchmarks import taichi_kernels
from benchmarks.report import failure, fmt, pair, progress, speedup, wanted
from benchmarks.timing import copy_bandwidth_gbs, cuda_kernels, input_sets, median_ms, peak_mib
from padding_ops.reference import tile_pad_indices, tile_pad_reference

# (name, input shape, pad=(left, right, top, bottom), shift)
BRICK = ("brick wall", (48, 32), (4096, 4096, 2048, 2048), 10)  # output 4144 x 8224
CASES = {
    "cuda": [BRICK,
             ("batch", (64, 3, 224, 224), (16, 16, 16, 16), 7),
             ("batch, shift 0", (64, 3, 224, 224), (16, 16, 16, 16), 0)],
    "cpu": [("brick wall (1/4 pad)", (48, 32), (1024, 1024, 512, 512), 10),
            ("batch of 8", (8, 3, 224, 224), (16, 16, 16, 16), 7),
            ("batch of 8, shift 0", (8, 3, 224, 224), (16, 16, 16, 16), 0)],
}
QUICK_CASES = [("brick wall (1/16 pad)", (48, 32), (256, 256, 128, 128), 10),
               ("small batch", (4, 3, 64, 64), (16, 16, 16, 16), 7),
               ("small batch, shift 0", (4, 3, 64, 64), (16, 16, 16, 16), 0)]
GRAD_TOLERANCE = 1e-5  # relative error of float32 gradients against float64
# The public implementations at the brick-wall size on the H100 (shared/ANCHORS.md), ms.
ANCHOR_PUBLISHED_MS, ANCHOR_TAICHI_KERNEL_MS = 9.106, 0.053


def published_formulation(x, pad, shift):
    """Brick padding the way the public demo writes it in PyTorch: float grids of output
    coordinates, band = floor(row / H), source = (row - band*H, (col - band*shift) mod W)
    in float arithmetic (exact only while H*W < 2^24), then a gather."""
    left, right, top, bottom = pad
    H, W = x.shape[-2:]
    rows = torch.arange(H + top + bottom, device=x.device, dtype=torch.float32) - top
    cols = torch.arange(W + left + right, device=x.device, dtype=torch.float32) - left
    yy, xx = torch.meshgrid(rows, cols, indexing="ij")
    band = torch.floor(yy / H)
    src_y = yy - band * H
    src_x = torch.remainder(xx - band * shift, W)
    flat = (src_y * W + src_x).long()
    return x.flatten(-2)[..., flat]


def integer_gather(x, ri, ci):
    return x[..., ri, ci]


def fill_bandwidth_gbs(nbytes=1 << 30):
    """Write-only bandwidth of Tensor.fill_ on a large buffer, in GB/s."""
    buf = torch.empty(nbytes // 4, device="cuda", dtype=torch.float32)
    ms = median_ms(lambda i: buf.fill_(1.0), "cuda", warmup=3, reps=20)
    return nbytes / (ms * 1e-3) / 1e9


def variants(shape, pad, shift, device, taichi):
    """name -> (role, forward function of x, whether it has a backward)."""
    ri, ci = tile_pad_indices(shape[-2], shape[-1], pad, shift, device)
    published_compiled = torch.compile(published_formulation, dynamic=False)
    gather_compiled = torch.compile(integer_gather, dynamic=False)
    out = {
        "torch-fused-ops": ("ours", lambda x: padding_ops.tile_pad(x, pad, shift), True),
        "published formulation": ("eager", lambda x: published_formulation(x, pad, shift), True),
        "torch.compile(published)": ("compile", lambda x: published_compiled(x, pad, shift), True),
        "integer gather": ("other", lambda x: integer_gather(x, ri, ci), True),
        "torch.compile(integer gather)": ("other", lambda x: gather_compiled(x, ri, ci), True),
    }
    if shift == 0 and len(shape) in (3, 4) and max(pad) <= min(shape[-2:]):
        out["F.pad circular"] = ("other", lambda x: F.pad(x, pad, mode="circular"), True)
    if taichi is not None:
        out["Taichi (forward only)"] = ("taichi", lambda x: taichi_kernels.tile_pad(x, pad, shift),
                                        False)
    return out


def run(device, quick=False, cases=None, use_taichi=True):
    """cases: substrings of the case names to run (None: all)."""
    # The backward is timed by re-running it on a kept graph (retain_graph=True), which
    # compiled backwards allow only without donated buffers.
    chosen = [c for c in (QUICK_CASES if quick else CASES[device]) if wanted(c[0], cases)]
    with torch._dynamo.config.patch(cache_size_limit=64), \
            torch._functorch.config.patch(donated_buffer=False):
        return run_cases(chosen, device, quick, use_taichi)


def run_cases(cases, device, quick, use_taichi=True):
    reps = 10 if quick else 50
    rows, notes, figures = [], [], []
    cuda = device == "cuda"
    copy_bw = fill_bw = None
    if cuda:
        copy_bw, fill_bw = copy_bandwidth_gbs(), fill_bandwidth_gbs()
        notes.append(f"measured bandwidths: device-to-device copy {copy_bw:.0f} GB/s (read + write "
                     f"counted), write-only fill (Tensor.fill_) {fill_bw:.0f} GB/s")
    taichi = taichi_kernels.setup(device) if use_taichi else None
    if use_taichi and taichi is None:
        notes.append(taichi_kernels.reason)
    elif taichi is not None:
        notes.append("Taichi: one parallel loop over output pixels, integer floor division "
                     "and modulo; " + taichi_kernels.NOTE)
    for number, (name, shape, pad, shift) in enumerate(cases, 1):
        progress(f"padding on {device}: case {number}/{len(cases)} {name}")
        left, right, top, bottom = pad
        out_shape = (*shape[:-2], shape[-2] + top + bottom, shape[-1] + left + right)
        out_bytes = 4 * torch.Size(out_shape).numel()
        in_bytes = 4 * torch.Size(shape).numel()
        sets = input_sets(lambda: (torch.randn(shape, device=device),  # noqa: B023
                                   torch.randn(out_shape, device=device)),  # noqa: B023
                          in_bytes + out_bytes, device)
        xs, grads = [x for x, _ in sets], [g for _, g in sets]
        want_y = tile_pad_reference(xs[0], pad, shift)
        x64 = xs[0].double().requires_grad_()
        (want_g,) = torch.autograd.grad(tile_pad_reference(x64, pad, shift), x64, grads[0].double())
        del x64
        timed = {}
        for vname, (role, fn, has_bwd) in variants(shape, pad, shift, device, taichi).items():
            try:
                timed[vname] = measure(fn, has_bwd, xs, grads, want_y, want_g, device, reps)
            except Exception as exc:  # the row says what happened; the run goes on
                timed[vname] = {"check": failure(exc), "fwd": None, "bwd": None}
            timed[vname]["role"] = role
            if cuda:
                torch.cuda.empty_cache()
        eager, compiled = timed["published formulation"], timed["torch.compile(published)"]
        for k, (vname, r) in enumerate(timed.items()):
            gbs = out_bytes / (r["fwd"] * 1e-3) / 1e9 if r["fwd"] else None
            rows.append([
                name if k == 0 else "", vname, fmt(r["fwd"], 4), fmt(r["bwd"], 4),
                *([fmt(gbs, 0), percent(gbs, copy_bw), percent(gbs, fill_bw)] if cuda else []),
                pair(r.get("fwd_kernels"), r.get("bwd_kernels"), "g"),
                pair(r.get("fwd_peak"), r.get("bwd_peak"), ".1f"),
                f"{speedup(eager['fwd'], r['fwd'])} / {speedup(eager['bwd'], r['bwd'])}",
                f"{speedup(compiled['fwd'], r['fwd'])} / {speedup(compiled['bwd'], r['bwd'])}",
                r["check"],
            ])
            figures.append({"case": name, "variant": vname, "role": r["role"],
                            "ok": r["check"] == "ok", "check": r["check"],
                            "shape": list(shape), "pad": list(pad), "shift": shift,
                            "fwd_ms": r["fwd"], "bwd_ms": r["bwd"], "out_gbs": gbs,
                            **{key: r.get(key) for key in ("fwd_kernels", "bwd_kernels",
                                                           "fwd_kernel_ms", "bwd_kernel_ms",
                                                           "fwd_peak", "bwd_peak")}})
        label = f"{name}: {tuple(shape)} pad {pad} shift {shift} -> {out_shape[-2]}x{out_shape[-1]}"
        is_brick = (name, shape, pad, shift) == BRICK
        if timed["torch-fused-ops"]["fwd"] is not None:
            notes += case_notes(label, out_bytes, timed, fill_bw, cuda, in_bytes, is_brick)
    header = ["case", "variant", "fwd ms", "bwd ms"]
    if cuda:
        header += ["out GB/s", "% copy", "% fill"]
    header += ["kernels fwd / bwd", "peak MiB fwd / bwd", "vs eager (fwd / bwd)",
               "vs compile (fwd / bwd)", f"check (fwd exact, bwd rel err < {GRAD_TOLERANCE:g})"]
    notes.append("vs eager / vs compile: time of the published formulation / of "
                 "torch.compile(published) over the row's time (>1: the row is faster); "
                 "peak MiB: allocated during one call above what was allocated before it")
    return header, rows, notes, figures


def percent(gbs, floor):
    return "n/a" if gbs is None or not floor else f"{100 * gbs / floor:.0f}%"


def measure(fn, has_bwd, xs, grads, want_y, want_g, device, reps):
    y = fn(xs[0])
    fwd_ok = torch.equal(y, want_y)
    del y
    err = None
    if has_bwd:
        leaf = xs[0].detach().requires_grad_()
        (g,) = torch.autograd.grad(fn(leaf), leaf, grads[0])
        err = ((g.double() - want_g).norm() / want_g.norm()).item()
        del g
    if fwd_ok and (err is None or err < GRAD_TOLERANCE):
        check = "ok"
    else:
        bwd = "" if err is None else f", bwd rel err {err:.1e}"
        check = f"MISMATCH (fwd equal: {fwd_ok}{bwd})"

    def fwd(i):
        return fn(xs[i % len(xs)])

    r = {"check": check, "fwd": median_ms(fwd, device, reps=reps), "bwd": None}
    calls = [("fwd", fwd)]
    if has_bwd:
        leaves = [x.detach().requires_grad_() for x in xs]
        outs = [fn(leaf) for leaf in leaves]

        def bwd(i):
            k = i % len(xs)
            return torch.autograd.grad(outs[k], leaves[k], grads[k], retain_graph=True)

        r["bwd"] = median_ms(bwd, device, warmup=3, reps=max(10, reps // 2))
        calls.append(("bwd", bwd))
    if device == "cuda":
        for kind, call in calls:
            kernels = cuda_kernels(call)
            # None where the profiler saw no kernel (Taichi, if its launches escape it)
            r[f"{kind}_kernels"] = sum(n for n, _ in kernels.values()) or None
            r[f"{kind}_kernel_ms"] = sum(t for _, t in kernels.values()) or None
            r[f"{kind}_peak"] = peak_mib(call)
    return r


def case_notes(label, out_bytes, timed, fill_bw, cuda, in_bytes, is_brick):
    ours = timed["torch-fused-ops"]
    published = timed["published formulation"]["fwd"]
    times = 0.0 if published is None else published / ours["fwd"]
    others = [(r["fwd"], n) for n, r in timed.items() if n != "torch-fused-ops" and r["fwd"]]
    line = (f"{label}: torch-fused-ops forward {ours['fwd']:.4f} ms"
            + ("" if published is None
               else f", {times:.0f}x faster than the published formulation"))
    if others:
        best_ms, best = min(others)
        line += f"; fastest alternative {best} {best_ms:.4f} ms ({best_ms / ours['fwd']:.2f}x ours)"
    line += f"; backward {ours['bwd']:.4f} ms = {ours['bwd'] / ours['fwd']:.2f}x our forward"
    if not cuda:
        return [line]
    gbs = out_bytes / (ours["fwd"] * 1e-3) / 1e9
    kernel_gbs = out_bytes / (ours["fwd_kernel_ms"] * 1e-3) / 1e9
    extra_fwd = ours["fwd_peak"] - out_bytes / 2**20
    extra_bwd = ours["bwd_peak"] - in_bytes / 2**20
    line += (f"; forward kernel alone (profiler) {ours['fwd_kernel_ms']:.4f} ms = "
             f"{kernel_gbs:.0f} GB/s = {100 * kernel_gbs / fill_bw:.0f}% of fill; backward "
             f"kernels {ours['bwd_kernel_ms']:.4f} ms ({ours['bwd_kernels']:g} launches); peak "
             f"memory beyond the output {extra_fwd:.2f} MiB (fwd), beyond the input-sized "
             f"gradient {extra_bwd:.2f} MiB (bwd)")
    if not is_brick:
        return [line]
    verdict = [  # the targets at the brick-wall size
        (">= 100x faster than the published formulation (ours, this run)", times >= 100),
        (f">= 100x under ANCHORS' published {ANCHOR_PUBLISHED_MS} ms",
         100 * ours["fwd"] <= ANCHOR_PUBLISHED_MS),
        (f"faster than ANCHORS' Taichi kernel alone ({ANCHOR_TAICHI_KERNEL_MS} ms)",
         ours["fwd"] < ANCHOR_TAICHI_KERNEL_MS),
        *([("faster than the Taichi row of this run",
            ours["fwd"] < timed["Taichi (forward only)"]["fwd"])]
          if (timed.get("Taichi (forward only)") or {}).get("fwd") else []),
        (">= 85% of fill bandwidth", gbs >= 0.85 * fill_bw),
        ("faster than torch.compile(integer gather)",
         ours["fwd"] < (timed["torch.compile(integer gather)"]["fwd"] or 0.0)),
        ("backward within 3x of forward", ours["bwd"] <= 3 * ours["fwd"]),
        ("forward peak <= output + 1 MiB", extra_fwd <= 1.0),
        ("backward peak <= gradient + 64 MiB", extra_bwd < 64.0),
    ]
    return [line, "brick-wall targets: " + "; ".join(
        f"{what}: {'PASS' if ok else 'FAIL'}" for what, ok in verdict)]
