"""What the benchmark prints and writes besides timings: progress lines, case selection,
markdown tables, the check column of a failed variant, and the speedup plots.

Each family's run() returns, next to its table, one "figure" per row: a dict with the
row's case, variant, role ("ours", "eager", "compile", "fft", "fft_compile", "taichi",
"floor" or "other"),
whether its check passed, and its numbers (times in ms, launches, peak MiB; None where
not measured). The plots and the JSON file are made from those.
"""

import re
import sys
import time

from benchmarks.timing import PEAK_FP32_TFLOPS

START = time.monotonic()
# Roles an alternative plays, in plot order, with the label of its bars.
ALTERNATIVES = {"eager": "eager PyTorch", "compile": "torch.compile",
                "fft": "FFT conv (PyTorch)", "fft_compile": "torch.compile(FFT conv)",
                "taichi": "Taichi"}


def progress(text):
    """One progress line on stderr, with the seconds since the run started."""
    print(f"[{time.monotonic() - START:6.1f} s] {text}", file=sys.stderr, flush=True)


def _squash(text):
    return re.sub(r"[\s()]", "", text).lower()


def wanted(label, patterns):
    """Whether a case runs: always without patterns, else when one pattern is a substring
    of its label, ignoring case, spaces and parentheses ("16,32,128" picks "(16, 32, 128)")."""
    return not patterns or any(_squash(p) in _squash(label) for p in patterns)


def emit(text, path=None):
    """Print a script's finished text (its tables) and, where a path is given, write it there."""
    print(text)
    if path:
        with open(path, "w") as f:
            f.write(text)


def markdown(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join("n/a" if c is None else str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def failure(exc):
    """The check column of a variant that raised: the run goes on, the row says why."""
    first = (str(exc).strip().splitlines() or [""])[0][:160].replace("|", "/")
    return f"MISMATCH (raised {type(exc).__name__}: {first})"


def speedup(base_ms, ms):
    """base_ms / ms as "1.23x"; "n/a" where either is missing."""
    if base_ms is None or ms is None or ms <= 0:
        return "n/a"
    return f"{base_ms / ms:.2f}x"


def pair(a, b, spec):
    """"a / b" with n/a for a missing one; "n/a" when both are missing."""
    if a is None and b is None:
        return "n/a"
    return " / ".join("n/a" if v is None else format(v, spec) for v in (a, b))


def fmt(value, digits=3):
    return "n/a" if value is None else f"{value:.{digits}f}"


def plot(path, title, figures, metrics):
    """Writes a PNG: one panel per (key, label) in metrics; per case, bars of
    alternative time / torch-fused-ops time for each alternative role present.
    Returns None, or why no plot was written (matplotlib missing, nothing to plot)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"matplotlib not importable ({exc}): no plot"
    cases = list(dict.fromkeys(f["case"] for f in figures))
    ours = {f["case"]: f for f in figures if f["role"] == "ours"}
    panels = []
    for key, label in metrics:
        bars = {}  # role -> [(case index, speedup, check ok)]
        for f in figures:
            mine = ours.get(f["case"], {})
            if (f["role"] in ALTERNATIVES and f.get(key) is not None
                    and mine.get(key) and mine.get("ok")):
                bars.setdefault(f["role"], []).append(
                    (cases.index(f["case"]), f[key] / mine[key], f["ok"]))
        if bars:
            panels.append((label, bars))
    if not panels:
        return "nothing to plot (no case with torch-fused-ops and an alternative both timed)"
    panel_width = max(6.0, 1.6 * len(cases) + 2)
    fig, axes = plt.subplots(1, len(panels), figsize=(panel_width * len(panels), 5), squeeze=False)
    for ax, (label, bars) in zip(axes[0], panels):
        roles = [r for r in ALTERNATIVES if r in bars]
        width = 0.8 / len(roles)
        values = [v for r in roles for _, v, _ in bars[r]]
        for j, role in enumerate(roles):
            xs = [i - 0.4 + width * (j + 0.5) for i, _, _ in bars[role]]
            ys = [v for _, v, _ in bars[role]]
            drawn = ax.bar(xs, ys, width, label=f"over {ALTERNATIVES[role]}", color=f"C{j}")
            for bar, (_, v, ok) in zip(drawn, bars[role]):
                if not ok:
                    bar.set_hatch("//")
                ax.annotate(times(v) + ("" if ok else " MISMATCH"),
                            (bar.get_x() + bar.get_width() / 2, v), ha="center",
                            va="bottom", fontsize=7, rotation=90 if not ok else 0)
        if max(values) / min(values) > 20:
            ax.set_yscale("log")
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels([_wrap(c) for c in cases], fontsize=8)
        ax.set_xlabel("case (size)")
        ax.set_ylabel("speedup of torch-fused-ops\n"
                      "(alternative time / our time; >1: we are faster)")
        ax.set_title(label)
        ax.set_ylim(top=ax.get_ylim()[1] * (3 if ax.get_yscale() == "log" else 1.15))
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def times(v):
    """A speedup for a bar label: 1234x, 56x, 7.8x, 0.12x."""
    return f"{v:.0f}x" if v >= 10 else f"{v:.2g}x"


def _wrap(label, width=18):
    """Breaks a long case label over lines at spaces."""
    words, lines = label.split(" "), [""]
    for w in words:
        if lines[-1] and len(lines[-1]) + 1 + len(w) > width:
            lines.append(w)
        else:
            lines[-1] = f"{lines[-1]} {w}".strip()
    return "\n".join(lines)


def rate(tflops, device):
    """A TFLOP/s cell: with the fraction of the float32 FMA peak on the GPU."""
    if tflops is None:
        return "n/a"
    if device != "cuda":
        return f"{tflops:.3g}"
    return f"{tflops:.1f} ({100 * tflops / PEAK_FP32_TFLOPS:.0f}%)"


def plot_loglog(path, title, lines, xlabel, ylabel):
    """One log-log line per label: lines = {label: [(x, y), ...]}; this package's lines
    solid, the others dashed. Returns None, or why no plot was written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"matplotlib not importable ({exc}): no plot {path}"
    if not lines:
        return f"nothing to plot in {path}"
    fig, ax = plt.subplots(figsize=(9, 6))
    for i, (label, points) in enumerate(lines.items()):
        points = sorted(points)
        ax.plot([x for x, _ in points], [y for _, y in points], marker="os^vD<>"[i % 7],
                color=f"C{i % 10}", linestyle="-" if "torch-fused-ops" in label else "--",
                label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
