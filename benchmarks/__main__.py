"""One benchmark command: `python -m benchmarks [--family NAME] [--device cpu|cuda] [--quick]`.

Prints a markdown table per family and device; with --out DIR also writes them there.
"""

import argparse
import datetime
import json
import os
import subprocess

import torch

from benchmarks import bench_lltm, bench_padding, bench_rwkv
from benchmarks.timing import environment

FAMILIES = {"lltm": bench_lltm, "rwkv": bench_rwkv, "padding": bench_padding}


def markdown(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join("" if c is None else str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES),
                        help="family to run (repeatable); default: all")
    parser.add_argument("--device", action="append", choices=["cpu", "cuda"],
                        help="device to run on (repeatable); default: cpu and, if present, cuda")
    parser.add_argument("--quick", action="store_true", help="smallest sizes, few repeats")
    parser.add_argument("--out", help="directory to write the markdown tables and "
                        "benchmarks.json (every table, note and the environment) to")
    args = parser.parse_args()
    devices = args.device or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    env = environment()
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = os.environ.get("FUSED_OPS_COMMIT", "unknown")  # a copy without .git
    stamp = datetime.date.today().isoformat()
    record = {"date": stamp, "commit": commit, "environment": env, "quick": args.quick,
              "results": []}
    for family in args.family or sorted(FAMILIES):
        for device in devices:
            print(f"[{family} on {device}] running...", flush=True)
            header, rows, notes = FAMILIES[family].run(device, quick=args.quick)
            where = env.get("device", "CPU") if device == "cuda" else f"CPU ({os.cpu_count()} cores)"
            text = (f"## {family} on {where}\n\n{stamp}, torch {env['torch']}, CUDA "
                    f"{env['cuda']}, commit {commit}; medians in ms\n\n{markdown(header, rows)}\n")
            if notes:
                text += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
            print(text, flush=True)
            record["results"].append({"family": family, "device": device, "header": header,
                                      "rows": rows, "notes": notes})
            if args.out:
                os.makedirs(args.out, exist_ok=True)
                with open(os.path.join(args.out, f"{family}_{device}.md"), "w") as f:
                    f.write(text)
                with open(os.path.join(args.out, "benchmarks.json"), "w") as f:
                    json.dump(record, f, indent=1, default=str)


if __name__ == "__main__":
    main()
