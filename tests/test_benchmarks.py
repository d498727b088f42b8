"""The Quickstart benchmark: `python -m benchmarks --quick --device cpu --out DIR` runs every
family, checks every variant against its reference (this package's rows must be "ok"),
prints progress lines and writes one table and one plot per family plus benchmarks.json.
It runs in a subprocess, as a user runs it (about 20 s to 2 min on 2 cores, most of it
torch.compile warming up). Also: a wrong or failing variant becomes a MISMATCH row and
the run goes on; the case filter and the input rotation; the Taichi kernels (where taichi
is importable) against the references."""

import importlib.util
import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch

from benchmarks import bench_lltm, bench_padding, report, timing
from padding_ops.reference import tile_pad_reference
from rwkv_ops.reference import timex_conv1d

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = ["lltm", "lltm_sequence", "lltm_tutorial", "padding", "rwkv"]


def png_size(path):
    """(width, height) of a valid PNG file: signature, then an IHDR chunk whose CRC holds."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    (crc,) = struct.unpack(">I", data[29:33])
    assert crc == zlib.crc32(data[12:29]), f"{path}: IHDR checksum"
    assert data.endswith(b"IEND\xaeB`\x82"), f"{path}: truncated"
    return struct.unpack(">II", data[16:24])


def test_quick_benchmark_runs_and_checks(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--device", "cpu", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for family in FAMILIES:  # per-case progress lines, with the elapsed time
        assert f"s] {family} on cpu: case 1/" in run.stderr, run.stderr[-2000:]
    record = json.loads((tmp_path / "benchmarks.json").read_text())
    assert sorted(r["family"] for r in record["results"]) == FAMILIES
    env = record["environment"]
    assert env["torch"] == torch.__version__
    assert env["commit"] and env["package"] and env["cpu_count"]
    plots = importlib.util.find_spec("matplotlib") is not None
    for result in record["results"]:
        family = result["family"]
        # One figure per row, with the numbers of the row.
        assert len(result["figures"]) == len(result["rows"]), family
        ours = [f for f in result["figures"] if f["role"] == "ours"]
        assert ours and all(f["ok"] and f["fwd_ms"] > 0 for f in ours), f"{family}: {ours}"
        # Each family's peers, eager and compiled (TimeX's: the FFT convolution).
        peers = ("fft", "fft_compile") if family == "rwkv" else ("eager", "compile")
        assert set(peers) <= {f["role"] for f in result["figures"]}, family
        table = (tmp_path / f"{family}_cpu.md").read_text()
        rows = [[c.strip() for c in line.strip().strip("|").split("|")]
                for line in table.splitlines() if line.startswith("|")]
        header = rows[0]
        columns = ("vs FFT conv", "vs compiled FFT conv") if family == "rwkv" else ("vs eager",
                                                                                 "vs compile")
        assert all(c in " ".join(header) for c in columns), header
        # The variant's column: the second, or the one headed "variant" (a dtype column may
        # come first).
        variant = header.index("variant") if "variant" in header else 1
        mine = [r for r in rows if r[variant].startswith("torch-fused-ops")]
        assert mine, f"{family}: no row for this package"
        for r in mine:
            assert r[-1].startswith("ok"), f"{family}: {r}"
        png = tmp_path / f"{family}_cpu.png"
        if plots:
            assert result["plot"] == png.name
            width, height = png_size(png)
            assert width >= 400 and height >= 300
        else:
            assert "matplotlib" in result["plot"] and not png.exists()


def test_wrong_and_failing_variants_are_mismatch_rows(monkeypatch):
    """A variant with a wrong answer and one that raises each give a MISMATCH row with the
    reason, and the other rows are still checked and timed."""
    real = bench_padding.variants

    def broken(*args):
        out = dict(real(*args))
        _, good, _ = out["torch-fused-ops"]
        out["torch.compile(published)"] = ("compile", lambda x: good(x) * 1.5, True)
        out["raises"] = ("other", lambda x: (_ for _ in ()).throw(ValueError("boom | x")), True)
        return {k: out[k] for k in ("torch-fused-ops", "published formulation",
                                    "torch.compile(published)", "raises")}

    monkeypatch.setattr(bench_padding, "variants", broken)
    header, rows, notes, figures = bench_padding.run_cases(
        [("tiny", (2, 3, 4, 5), (1, 6, 2, 9), 3)], "cpu", quick=True, use_taichi=False)
    checks = {r[1]: r[-1] for r in rows}
    assert checks["torch-fused-ops"] == "ok" and checks["published formulation"] == "ok"
    assert checks["torch.compile(published)"].startswith("MISMATCH (fwd equal: False")
    assert checks["raises"] == "MISMATCH (raised ValueError: boom / x)"
    ok = {f["variant"]: f["ok"] for f in figures}
    assert ok == {"torch-fused-ops": True, "published formulation": True,
                  "torch.compile(published)": False, "raises": False}
    timed = {f["variant"]: f["fwd_ms"] for f in figures}
    assert timed["torch.compile(published)"] > 0 and timed["raises"] is None


def test_lltm_variant_failing_while_timed(monkeypatch):
    """A variant that passes the check and then raises while its steps are timed (in the
    alternating rounds) gets a MISMATCH row with the reason; the others are still timed."""
    real, calls = bench_lltm.lltm.lltm_cell, [0]

    def flaky(*args):
        calls[0] += 1
        if calls[0] > 25:  # after the check and the forward's timing
            raise ValueError("boom")
        return real(*args)

    monkeypatch.setattr(bench_lltm.lltm, "lltm_cell", flaky)
    header, rows, notes, figures = bench_lltm.run("cpu", quick=True)
    checks = {r[1]: r[-1] for r in rows}
    assert checks["torch-fused-ops"] == "MISMATCH (raised ValueError: boom)"
    steps = {f["variant"]: f["step_ms"] for f in figures}
    assert steps["torch-fused-ops"] is None
    assert steps["eager PyTorch"] > 0 and steps["torch.compile"] > 0


def test_medians_ms_alternates_rounds():
    order = []
    fns = [lambda i: order.append(("a", i)), lambda i: order.append(("b", i))]
    timing.medians_ms(fns, "cpu", warmup=1, reps=6, rounds=3)
    timed = order[2:]  # after one warm-up call each
    assert [name for name, _ in timed] == ["a", "a", "b", "b"] * 3
    assert [i for name, i in timed if name == "a"] == list(range(1, 7))


def test_case_filter_and_input_rotation():
    assert report.wanted("(16, 32, 128)", ["16,32,128"])
    assert report.wanted("brick wall (1/16 pad)", ["Brick Wall"])
    assert not report.wanted("small batch", ["brick"])
    assert report.wanted("anything", None)
    made = []
    sets = timing.input_sets(lambda: made.append(1) or len(made), 1, "cpu")
    assert sets == list(range(1, timing.MAX_SETS + 1))  # tiny inputs: the most sets
    assert len(timing.input_sets(lambda: 0, timing.CPU_CACHE_BYTES, "cpu")) == 2
    assert len(timing.input_sets(lambda: 0, 10 * timing.CPU_CACHE_BYTES, "cpu")) == 1


def test_taichi_kernels_match_references(device):
    pytest.importorskip("taichi")
    from benchmarks import taichi_kernels

    if taichi_kernels.setup(device) is None:
        pytest.fail(taichi_kernels.reason)
    for shape, pad, shift in [((5, 7), (9, 11, 13, 3), -4), ((2, 3, 4, 6), (1, 2, 3, 4), 2),
                              ((1, 1), (2, 0, 0, 5), 1)]:
        x = torch.randn(shape, device=device)
        y = taichi_kernels.tile_pad(x, pad, shift)
        assert torch.equal(y, tile_pad_reference(x, pad, shift)), (shape, pad, shift)
    for B, C, T in [(2, 3, 17), (1, 2, 1), (3, 5, 64)]:
        w, k = torch.randn(C, T, device=device), torch.randn(B, C, T, device=device)
        got = taichi_kernels.timex(w, k, 0.25).double()
        want = timex_conv1d(w.double(), k.double(), 0.25)
        assert ((got - want).norm() / want.norm()).item() < 1e-5, (B, C, T)


def test_report_emit_prints_and_writes(tmp_path, capsys):
    """report.emit: the scripts' one way to print their tables and write them to --out."""
    text = "| a | b |\n| --- | --- |\n| 1 | 2 |\n"
    report.emit(text, str(tmp_path / "t.md"))
    assert (tmp_path / "t.md").read_text() == text
    assert capsys.readouterr().out == text + "\n"
    report.emit("no file\n")
    assert capsys.readouterr().out == "no file\n\n"


def test_union_length_counts_overlapping_kernels_once():
    """The sequence table's GPU busy time: kernels that run at once count once."""
    assert timing.union_length([]) == 0
    assert timing.union_length([(5, 20), (0, 10), (30, 40)]) == 30
    assert timing.union_length([(0, 10), (2, 3)]) == 10  # one inside another
    assert timing.union_length([(0, 1), (1, 2)]) == 2  # back to back


def test_timex_speedups_option_parsers():
    """timex_speedups' --cpus (as `taskset -c`) and --compare ("NAME:VAR=VALUE,...") parsers."""
    from benchmarks.timex_speedups import parse_compare, parse_cpus

    assert parse_cpus("2") == {2}
    assert parse_cpus("0-3,6") == {0, 1, 2, 3, 6}
    assert parse_compare(["split:RWKV_TIMEX_CLUSTER_FORWARD=split,RWKV_TIMEX_ALGO=fft", "none:"]) \
        == {"split": {"RWKV_TIMEX_CLUSTER_FORWARD": "split", "RWKV_TIMEX_ALGO": "fft"},
            "none": {}}
    assert parse_compare(None) == {}
