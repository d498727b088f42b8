"""Smoke test of the Quickstart benchmark: `python -m benchmarks --quick --device cpu` runs
every family, checks every variant against its reference (this package's rows must be
"ok") and writes one table per family plus benchmarks.json.
It runs in a subprocess, as a user runs it (about 30 s to 2 min on 2 cores, most of it
torch.compile warming up)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = ["lltm", "padding", "rwkv"]


def test_quick_benchmark_runs_and_checks(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--device", "cpu", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    record = json.loads((tmp_path / "benchmarks.json").read_text())
    assert sorted(r["family"] for r in record["results"]) == FAMILIES
    assert record["environment"]["torch"] == __import__("torch").__version__
    for family in FAMILIES:
        table = (tmp_path / f"{family}_cpu.md").read_text()
        rows = [[c.strip() for c in line.strip().strip("|").split("|")]
                for line in table.splitlines() if line.startswith("|")]
        ours = [r for r in rows if r[1].startswith("torch-fused-ops")]
        assert ours, f"{family}: no row for this package"
        for r in ours:
            assert r[-1].startswith("ok"), f"{family}: {r}"
