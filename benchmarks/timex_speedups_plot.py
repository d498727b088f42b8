"""The TimeX speedup plot from a table that benchmarks.timex_speedups wrote: per (B, C, T) and
dtype, a bar for the GPU busy-time ratio (FFT conv / ours, forward + both gradients: what the
host does not move) and a dot for the wall-time ratio of the same calls.

    python -m benchmarks.timex_speedups_plot TABLE.md OUT.png [--title TEXT]
"""

import argparse
import re

ROW = re.compile(r"^\| (\w+) \| (\([\d, ]+\)) \| (\w+) \| [^|]+\| [\d.]+ / [\d.]+ = ([\d.]+)x \|"
                 r"[^|]+\|[^|]+\| [\d.]+x / ([\d.]+)x \|")


def read_table(path):
    """{dtype: {shape: (algorithm, GPU ratio, wall ratio)}} from the table's rows."""
    rows = {}
    for line in open(path):
        m = ROW.match(line)
        if m:
            dtype, shape, algo, gpu, wall = m.groups()
            rows.setdefault(dtype, {})[shape] = (algo, float(gpu), float(wall))
    return rows


def plot(rows, out, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = list(dict.fromkeys(s for d in rows.values() for s in d))
    dtypes = list(rows)
    width = 0.8 / len(dtypes)
    fig, ax = plt.subplots(figsize=(max(8.0, 0.9 * len(shapes) + 2), 5.5))
    for j, dtype in enumerate(dtypes):
        xs = [i - 0.4 + width * (j + 0.5) for i, s in enumerate(shapes) if s in rows[dtype]]
        vals = [rows[dtype][s] for s in shapes if s in rows[dtype]]
        ax.bar(xs, [v[1] for v in vals], width, color=f"C{j}", label=f"{dtype}: GPU time")
        ax.plot(xs, [v[2] for v in vals], "o", color="black", markersize=3,
                label="wall time (forward + backward calls)" if j == 0 else None)
    ax.axhline(4.0, color="gray", linewidth=0.8, linestyle="--")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([s.replace(", ", ",\n", 1) for s in shapes], fontsize=7)
    ax.set_xlabel("(B, C, T)")
    ax.set_ylabel("FFT convolution's time / ours\n(forward + both gradients; >1: we are faster)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table")
    parser.add_argument("out")
    parser.add_argument("--title", default="RWKV TimeX against the FFT convolution")
    args = parser.parse_args(argv)
    rows = read_table(args.table)
    if not rows:
        raise SystemExit(f"no timex_speedups rows in {args.table}")
    plot(rows, args.out, args.title)


if __name__ == "__main__":
    main()
