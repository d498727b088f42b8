"""One benchmark command over every operator family and device:

    python -m benchmarks [--family NAME ...] [--device cpu|cuda ...] [--case TEXT ...]
                         [--quick] [--no-taichi] [--out DIR]

For each family (lltm, lltm_sequence, lltm_tutorial, padding, rwkv) and device (default: cpu, and cuda
where present) it times this package, eager PyTorch, torch.compile of the same code and, where taichi
is importable, Taichi (padding and TimeX forwards), after checking each against a
float64 or exact reference (a wrong answer is a row marked MISMATCH; the run goes on).
Prints a markdown table per family and device, and progress lines on stderr. With --out
it also writes <family>_<device>.md, <family>_<device>.png (speedup of this package over
eager, torch.compile and Taichi, by size; needs matplotlib) and benchmarks.json (every
figure, table and note, and the environment: device, torch, CUDA, driver, package
version, git commit).
"""

import argparse
import datetime
import inspect
import json
import os

import torch

from benchmarks import (bench_lltm, bench_lltm_sequence, bench_padding, bench_rwkv, bench_tutorial,
                        report)
from benchmarks.timing import environment

FAMILIES = {"lltm": bench_lltm, "lltm_sequence": bench_lltm_sequence,
            "lltm_tutorial": bench_tutorial, "rwkv": bench_rwkv, "padding": bench_padding}
# The times each family's plot shows: (figure key, panel title).
PLOTTED = {
    "lltm": [("fwd_ms", "forward"), ("step_ms", "training step (forward + all gradients)")],
    "lltm_sequence": [("fwd_ms", "forward"), ("step_ms", "forward + backward (all gradients)")],
    "lltm_tutorial": [("fwd_ms", "forward"), ("bwd_ms", "backward (parameters' gradients)")],
    "rwkv": [("fwd_ms", "forward"), ("total_ms", "forward + backward")],
    "padding": [("fwd_ms", "forward"), ("bwd_ms", "backward")],
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES),
                        help="family to run (repeatable); default: all")
    parser.add_argument("--device", action="append", choices=["cpu", "cuda"],
                        help="device to run on (repeatable); default: cpu and, if present, cuda")
    parser.add_argument("--case", action="append", metavar="TEXT",
                        help="run only the cases whose label contains TEXT (repeatable; "
                        "case, spaces and parentheses ignored), e.g. --case 16,32,128 "
                        "--case 'brick wall'")
    parser.add_argument("--quick", action="store_true", help="smallest sizes, few repeats (CI)")
    parser.add_argument("--dtype", action="append", choices=["float32", "bfloat16", "float16"],
                        help="dtype to run (repeatable) in the families that take one "
                        "(lltm_sequence); default: each family's own")
    parser.add_argument("--no-taichi", action="store_true",
                        help="leave the Taichi rows out even where taichi is importable")
    parser.add_argument("--out", help="directory to write the tables, plots and benchmarks.json to")
    args = parser.parse_args(argv)
    devices = args.device or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if "cuda" in devices and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    env = environment()
    stamp = datetime.date.today().isoformat()
    record = {"date": stamp, "commit": env["commit"], "environment": env, "quick": args.quick,
              "cases": args.case, "results": []}
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    for family in args.family or sorted(FAMILIES):
        for device in devices:
            report.progress(f"{family} on {device}: started")
            options = {} if family.startswith("lltm") else {"use_taichi": not args.no_taichi}
            if args.dtype and "dtypes" in inspect.signature(FAMILIES[family].run).parameters:
                options["dtypes"] = args.dtype
            header, rows, notes, figures = FAMILIES[family].run(
                device, quick=args.quick, cases=args.case, **options)
            where = (env.get("device", "GPU") if device == "cuda"
                     else f"CPU ({os.cpu_count()} cores)")
            text = (f"## {family} on {where}\n\n{stamp}, torch {env['torch']}, CUDA "
                    f"{env['cuda']}, commit {env['commit']}; medians in ms\n\n"
                    f"{report.markdown(header, rows)}\n")
            if not rows:
                notes = [f"no {family} case matches --case {' / '.join(args.case or [])}"] + notes
            if notes:
                text += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
            plot_note = None
            if args.out:
                png = os.path.join(args.out, f"{family}_{device}.png")
                plot_note = report.plot(png, f"{family}: torch-fused-ops speedup by size\n{where}, "
                                        f"torch {env['torch']}, {stamp}", figures, PLOTTED[family])
                if plot_note:
                    report.progress(f"{family} on {device}: {plot_note}")
                else:
                    text += f"\n![{family} on {device}]({family}_{device}.png)\n"
                extra = getattr(FAMILIES[family], "EXTRA_PLOT", None)
                if extra:  # a family's second plot: time per step, time against T
                    name = f"{family}_{device}_{extra[0]}.png"
                    note = FAMILIES[family].plot_extra(
                        os.path.join(args.out, name), f"{family}: {extra[1]}, {where}", figures)
                    text += f"\n![{extra[1]}]({name})\n" if note is None else f"\n- {note}\n"
            print(text, flush=True)
            report.progress(f"{family} on {device}: done, {len(rows)} rows")
            record["results"].append({"family": family, "device": device, "header": header,
                                      "rows": rows, "notes": notes, "figures": figures,
                                      "plot": plot_note or f"{family}_{device}.png"})
            if args.out:
                with open(os.path.join(args.out, f"{family}_{device}.md"), "w") as f:
                    f.write(text)
                with open(os.path.join(args.out, "benchmarks.json"), "w") as f:
                    json.dump(record, f, indent=1, default=str)
    mismatches = sum(not f["ok"] for r in record["results"] for f in r["figures"])
    report.progress(f"all done; {mismatches} row(s) marked MISMATCH" if mismatches else "all done")


if __name__ == "__main__":
    main()
