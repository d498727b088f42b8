"""The wheel's GPU targets and build facts (torch_fused_ops/_build.py): target list parsing,
which GPU a build covers, the version tag, the torch check at import, `python -m
torch_fused_ops info` (and its alias `python -m lltm info`), and on a GPU the error a build
without this GPU's architecture gives."""

import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

import lltm
import torch_fused_ops
from torch_fused_ops import _build
from torch_fused_ops.__main__ import find_cuobjdump, targets_in_library

CSRC = Path(__file__).resolve().parent.parent / "csrc"
# The wheels' targets by CUDA major version (13: the +cu130 wheel, 12: the +cu12 wheel).
WHEEL_TARGETS = {major: _build.parse_arch_list("all", major) for major in _build.WHEELS}


@pytest.mark.parametrize("text, cubins, ptx", [
    ("9.0", ["sm_90"], []),
    ("8.6;9.0+PTX", ["sm_86", "sm_90"], ["compute_90"]),
    ("7.5 8.0, 9.0a;10.0f", ["sm_75", "sm_80", "sm_90a", "sm_100f"], []),
    ("12.1+PTX;12.1", ["sm_121"], ["compute_121"]),
])
def test_parse_arch_list(text, cubins, ptx):
    assert _build.parse_arch_list(text) == (cubins, ptx)


@pytest.mark.parametrize("text", ["9", "sm_90", "9.0+ptx", "Hopper", "", " ; "])
def test_parse_arch_list_rejects(text):
    with pytest.raises(ValueError, match="TORCH_CUDA_ARCH_LIST"):
        _build.parse_arch_list(text)


def test_all_needs_a_cuda_major_with_a_wheel():
    for major in (None, 11, 14):
        with pytest.raises(ValueError, match="TORCH_CUDA_ARCH_LIST=all: no wheel target list"):
            _build.parse_arch_list("all", major)


def test_gencode_flags():
    assert _build.gencode_flags(["sm_90a", "sm_120"], ["compute_120"]) == [
        "-gencode=arch=compute_90a,code=sm_90a",
        "-gencode=arch=compute_120,code=[sm_120,compute_120]",
    ]
    assert _build.gencode_flags(["sm_90"], []) == ["-gencode=arch=compute_90,code=sm_90"]
    # One PTX per band: the band's PTX target at or below a cubin, else its oldest cubin.
    assert _build.gencode_flags(["sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
                                ["compute_86"]) == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_86,code=[sm_86,compute_86]",
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_100,code=[sm_100,sm_120]",
    ]


@pytest.mark.parametrize("major", sorted(_build.WHEELS))
def test_gencode_flags_of_the_wheels(major):
    """Every target of a wheel is made exactly once, cubins from PTX of their own band and
    no newer than themselves; the fronts run once per band (and for the PTX target)."""
    cubins, ptx = WHEEL_TARGETS[major]
    made = []
    for flag in _build.gencode_flags(cubins, ptx):
        source, _, codes = flag.removeprefix("-gencode=arch=").partition(",code=")
        for code in codes.strip("[]").split(","):
            made.append(code)
            if code.startswith("sm_"):
                assert _build._band(source) == _build._band(code)
                assert _build._split(source)[:2] <= _build._split(code)[:2]
            else:
                assert code == source
    assert sorted(made) == sorted(cubins + ptx)
    assert len(_build.gencode_flags(cubins, ptx)) == {13: 5, 12: 3}[major]


@pytest.mark.parametrize("major", sorted(_build.WHEELS))
def test_wheel_list(major):
    cubins, ptx = WHEEL_TARGETS[major]
    assert _build.parse_arch_list(_build.wheel_arch_list(major)) == (cubins, ptx)
    assert cubins == sorted(cubins, key=_build._split)  # oldest to newest
    assert ptx == ["compute_" + cubins[-1][3:]]  # PTX of the newest target
    assert cubins[0] == f"sm_{_build.WHEELS[major]['oldest_sm']}"


def test_wheel_lists_are_the_agreed_ones():
    # CUDA 13 (nvcc 13.0) dropped Volta; torch's CUDA 12 builds (cu126, cu128) keep sm_70, and
    # nvcc 12.4, the CUDA 12 wheel's compiler, ends at Hopper.
    assert WHEEL_TARGETS[13] == (["sm_75", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90",
                                  "sm_100", "sm_103", "sm_110", "sm_120", "sm_121"],
                                 ["compute_121"])
    assert WHEEL_TARGETS[12] == (["sm_70", "sm_72", "sm_75", "sm_80", "sm_86", "sm_87", "sm_89",
                                  "sm_90"], ["compute_90"])


def nvccs():
    """Every nvcc to check the lists against: the system's (13.0), CUDA_HOME's, and the CUDA 12
    toolkit .ci/build_wheel.sh assembles (build/cuda12) where it exists."""
    found = {}
    for path in ("/usr/local/cuda/bin/nvcc", os.path.join(os.environ.get("CUDA_HOME", "/-"), "bin",
                                                          "nvcc"),
                 str(Path(__file__).resolve().parent.parent / "build" / "cuda12" / "bin" / "nvcc")):
        if os.access(path, os.X_OK):
            found[os.path.realpath(path)] = path
    return sorted(found.values())


@pytest.mark.skipif(not nvccs(), reason="no nvcc")
@pytest.mark.parametrize("nvcc", nvccs())
def test_wheel_list_is_every_sm_that_nvcc_compiles_from_the_oldest(nvcc):
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    major = int(re.search(r"release (\d+)\.", version).group(1))
    if major not in _build.WHEELS:
        pytest.skip(f"{nvcc} is CUDA {major}: no wheel for it")
    codes = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True).stdout.split()
    oldest = _build.WHEELS[major]["oldest_sm"]
    plain = [c for c in codes if re.fullmatch(r"sm_\d+", c) and int(c[3:]) >= oldest]
    assert sorted(plain) == sorted(WHEEL_TARGETS[major][0]), (
        f"update WHEELS[{major}] in torch_fused_ops/_build.py")


@pytest.mark.parametrize("cubins, ptx, capability, expected", [
    (["sm_80"], [], (8, 6), "sm_80 machine code"),
    (["sm_80", "sm_86"], [], (8, 9), "sm_86 machine code"),
    (["sm_80", "sm_86"], [], (9, 0), None),            # another major: no machine code
    (["sm_80"], ["compute_80"], (9, 0), "compute_80 PTX"),
    (["sm_90"], ["compute_90"], (8, 9), None),          # PTX runs only on newer GPUs
    (["sm_90a"], [], (9, 0), "sm_90a machine code"),
    (["sm_100a"], ["compute_100a"], (10, 3), None),      # arch-specific: that SM only
    (["sm_100f"], [], (10, 3), "sm_100f machine code"),
    (["sm_100"], [], (11, 0), None),
    (["sm_120"], [], (12, 1), "sm_120 machine code"),
])
def test_coverage(cubins, ptx, capability, expected):
    got = _build.coverage(cubins, ptx, capability)
    assert got == expected if expected is None else got.startswith(expected)


@pytest.mark.parametrize("capability", [(7, 5), (8, 0), (8, 6), (8, 7), (8, 9), (9, 0),
                                        (10, 0), (10, 3), (11, 0), (12, 0), (12, 1)])
def test_cuda13_wheel_runs_machine_code_on_every_gpu_from_turing(capability):
    how = _build.coverage(*WHEEL_TARGETS[13], capability)
    assert how == f"sm_{capability[0]}{capability[1]} machine code"


@pytest.mark.parametrize("capability", [(7, 0), (7, 2), (7, 5), (8, 0), (8, 6), (8, 7), (8, 9),
                                        (9, 0)])
def test_cuda12_wheel_runs_machine_code_from_volta_to_hopper(capability):
    how = _build.coverage(*WHEEL_TARGETS[12], capability)
    assert how == f"sm_{capability[0]}{capability[1]} machine code"


@pytest.mark.parametrize("capability", [(10, 0), (10, 1), (10, 3), (12, 0), (12, 1)])
def test_cuda12_wheel_runs_blackwell_by_hopper_ptx(capability):
    assert _build.coverage(*WHEEL_TARGETS[12], capability).startswith("compute_90 PTX")


def test_wheels_cover_future_gpus_by_ptx_only():
    assert "PTX" in _build.coverage(*WHEEL_TARGETS[13], (13, 0))
    assert "PTX" in _build.coverage(*WHEEL_TARGETS[12], (13, 0))
    assert _build.coverage(*WHEEL_TARGETS[13], (7, 0)) is None  # Volta: nvcc 13 dropped it
    assert _build.coverage(*WHEEL_TARGETS[12], (6, 1)) is None  # Pascal: torch's cu12x dropped it


def test_version_tag():
    # The tag names the CUDA the kernels link, not a torch: one build serves torch >= MIN_TORCH.
    assert _build.local_tag("13.0") == "cu130"
    # The CUDA 12 wheel, whichever CUDA 12 torch or nvcc built it: it serves cu126, cu128, ...
    assert _build.local_tag("12.8") == _build.local_tag("12.4") == "cu12"
    assert _build.local_tag("11.8") == "cu118"  # a source build for a major without a wheel
    assert _build.local_tag(None) == "cpu"
    assert _build.wheel_name(12) == "torch_fused_ops-0.1.0+cu12-cp310-abi3-linux_x86_64.whl"
    assert _build.wheel_name(13) == "torch_fused_ops-0.1.0+cu130-cp310-abi3-linux_x86_64.whl"
    assert _build.release("2.12.0a0+git1234") == "2.12.0"


def test_target_version_macro():
    assert _build.MIN_TORCH == (2, 10)
    assert _build.target_version_macro() == "-DTORCH_TARGET_VERSION=0x020a000000000000"
    assert _build.target_version_macro((2, 13)) == "-DTORCH_TARGET_VERSION=0x020d000000000000"


def fake_facts(cuda_version, version="0.1.0+test"):
    return types.SimpleNamespace(VERSION=version, TORCH_VERSION="2.14.1",
                                 CUDA_VERSION=cuda_version, CUBINS=[], PTX=[])


@pytest.mark.parametrize("running_torch, built_cuda, running_cuda, says", [
    ("2.9.1+cu130", "13.0", "13.0", "torch 2.9.1+cu130 is installed"),
    ("1.13.0", None, None, "torch 1.13.0 is installed"),
    (None, "13.0", "12.8", "uses CUDA 12.8"),
])
def test_unusable_torch_is_one_clear_import_error(monkeypatch, running_torch, built_cuda,
                                                  running_cuda, says):
    monkeypatch.setattr(_build, "build_facts", lambda: fake_facts(built_cuda))
    monkeypatch.setattr(torch, "__version__", running_torch or torch.__version__)
    monkeypatch.setattr(torch.version, "cuda", running_cuda)
    with pytest.raises(ImportError) as err:
        _build.check_torch()
    message = str(err.value)
    assert "torch-fused-ops 0.1.0+test needs torch >= 2.10" in message and says in message
    assert message.count(". ") == 0 and message.endswith(".")  # one sentence


@pytest.mark.parametrize("built_cuda, running_torch, running_cuda, wheel", [
    ("13.0", "2.10.0+cu128", "12.8", "torch_fused_ops-0.1.0+cu12-cp310-abi3-linux_x86_64.whl"),
    ("13.0", "2.12.0+cu126", "12.6", "torch_fused_ops-0.1.0+cu12-cp310-abi3-linux_x86_64.whl"),
    ("12.4", "2.14.1+cu130", "13.0", "torch_fused_ops-0.1.0+cu130-cp310-abi3-linux_x86_64.whl"),
    ("12.4", "2.11.0", "13.2", "torch_fused_ops-0.1.0+cu130-cp310-abi3-linux_x86_64.whl"),
])
def test_cuda_mismatch_names_the_wheel_that_torch_needs(monkeypatch, built_cuda, running_torch,
                                                        running_cuda, wheel):
    tag = _build.local_tag(built_cuda)
    monkeypatch.setattr(_build, "build_facts", lambda: fake_facts(built_cuda, f"0.1.0+{tag}"))
    monkeypatch.setattr(torch, "__version__", running_torch)
    monkeypatch.setattr(torch.version, "cuda", running_cuda)
    with pytest.raises(ImportError) as err:
        _build.check_torch()
    message = str(err.value)
    assert f"this is the +{tag} build; your torch needs the CUDA {running_cuda.split('.')[0]} " \
        f"wheel {wheel}, or a build from source" in message
    assert f"installed torch {running_torch} uses CUDA {running_cuda}" in message
    assert message.count(". ") == 0 and message.endswith(".")  # one sentence


def test_cuda_major_without_a_wheel_says_so(monkeypatch):
    monkeypatch.setattr(_build, "build_facts", lambda: fake_facts("13.0", "0.1.0+cu130"))
    monkeypatch.setattr(torch, "__version__", "2.20.0+cu141")
    monkeypatch.setattr(torch.version, "cuda", "14.1")
    with pytest.raises(ImportError, match="no wheel is built for CUDA 14: build from source"):
        _build.check_torch()


@pytest.mark.parametrize("built_cuda, running_torch, running_cuda", [
    ("13.0", "2.10.0+cu130", "13.0"), ("13.0", "2.11.0+cu130", "13.2"),
    ("13.0", "2.13.0+cpu", None), ("13.0", "2.15.0", "13.0"),
    ("12.4", "2.10.0+cu128", "12.8"), ("12.4", "2.12.0+cu126", "12.6"),
    ("12.4", "2.13.0+cpu", None), ("12.4", "2.14.1+cu129", "12.9"),
])
def test_every_torch_from_the_minimum_passes(monkeypatch, built_cuda, running_torch,
                                             running_cuda):
    monkeypatch.setattr(_build, "build_facts", lambda: fake_facts(built_cuda))
    monkeypatch.setattr(torch, "__version__", running_torch)
    monkeypatch.setattr(torch.version, "cuda", running_cuda)
    _build.check_torch()


facts = _build.build_facts()


@pytest.mark.skipif(facts is None, reason="libraries built before build facts existed")
def test_build_facts_describe_this_build():
    assert facts.VERSION == lltm.__version__ == torch_fused_ops.__version__
    assert facts.VERSION.endswith("+" + _build.local_tag(facts.CUDA_VERSION))
    assert _build._minor_tuple(facts.TORCH_VERSION) >= _build.MIN_TORCH
    if facts.CUDA_VERSION:
        assert facts.CUBINS
    tool = find_cuobjdump()
    if tool is None or not facts.CUDA_VERSION or not torch.version.cuda:
        return  # the machine code itself is checked where cuobjdump is (.ci/build_wheel.sh)
    for family in ("lltm", "rwkv_ops", "padding_ops"):
        library = __import__(f"{family}._C_cuda", fromlist=["_C_cuda"]).__file__
        elf, ptx = targets_in_library(tool, library)
        assert sorted(elf) == sorted(facts.CUBINS), family
        assert sorted(p.replace("sm_", "compute_") for p in ptx) == sorted(facts.PTX), family


# Without build facts (libraries copied without the generated _build_info.py, as onto the
# lent GPU machine) info cannot know the targets and reports the GPU as not covered: exit 1.
@pytest.mark.skipif(facts is None, reason="libraries without build facts (_build_info.py)")
@pytest.mark.parametrize("module", ["torch_fused_ops", "lltm"])
def test_info_command(module):
    here = str(Path(lltm.__file__).resolve().parent.parent)  # where `lltm` was imported from
    run = subprocess.run([sys.executable, "-m", module, "info"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": here}, cwd=Path(__file__).parent,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert f"torch-fused-ops {lltm.__version__}" in out
    assert f"Python {sys.version.split()[0]}, torch {torch.__version__}" in out
    assert "runs on:       torch >= 2.10 (LibTorch stable ABI)" in out
    for family in ("lltm", "rwkv_ops", "padding_ops"):
        assert f"{family}:" in out
    if facts is not None and facts.CUBINS:
        assert _build.describe(facts.CUBINS, facts.PTX) in out
    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        major, minor = torch.cuda.get_device_capability(i)
        assert re.search(rf"GPU cuda:{i}: .*, sm_{major}{minor}: covered \(", out), out


# ---- On a GPU ---------------------------------------------------------------------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
def test_every_family_passes_the_kernel_image_check():
    import padding_ops
    import rwkv_ops

    x = torch.randn(2, 3, device="cuda")
    out = lltm.lltm_cell(x, torch.randn(12, 7, device="cuda"), torch.randn(12, device="cuda"),
                         torch.randn(2, 4, device="cuda"), torch.randn(2, 4, device="cuda"))
    assert out[0].shape == (2, 4)
    assert rwkv_ops.timex(torch.randn(3, 5, device="cuda"),
                          torch.randn(2, 3, 5, device="cuda")).shape == (2, 3, 5)
    assert padding_ops.tile_pad(x, (1, 1, 1, 1)).shape == (4, 5)
    torch.cuda.synchronize()


PROBE_CU = r"""
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "common/kernel_image.cuh"

fused_ops::Tensor check(fused_ops::Tensor t) {
  fused_ops::check_kernel_image(t);
  return torch::stable::empty_like(t);
}
STABLE_TORCH_LIBRARY(NAMESPACE, m) { m.def("check(Tensor t) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(NAMESPACE, CUDA, m) { m.impl("check", TORCH_BOX(&check)); }
"""


def build_probe(directory, arch):
    """kernel_image.cuh's check, compiled for sm_<arch> only, as the stable-ABI op
    torch.ops.fused_ops_probe_<arch>.check."""
    from torch.utils.cpp_extension import load

    namespace = f"fused_ops_probe_{arch}"
    (directory / "probe.cu").write_text(PROBE_CU.replace("NAMESPACE", namespace))
    load(name=namespace, sources=[str(directory / "probe.cu")], is_python_module=False,
         extra_include_paths=[str(CSRC)], build_directory=str(directory),
         extra_cflags=[_build.target_version_macro()],
         extra_cuda_cflags=[f"-gencode=arch=compute_{arch},code=sm_{arch}",
                            _build.target_version_macro(), "-DUSE_CUDA"])
    return getattr(torch.ops, namespace)


@cuda
def test_uncovered_gpu_gets_the_build_from_source_message(tmp_path):
    """Builds csrc/common/kernel_image.cuh for an architecture that cannot run on this GPU
    (sm_75, or sm_80 on a Turing GPU): its check must raise the package's message."""
    major, minor = torch.cuda.get_device_capability()
    probe = build_probe(tmp_path, "80" if major == 7 else "75")
    x = torch.ones(1, device="cuda")
    for _ in range(2):  # a failed check is not cached as passed
        with pytest.raises(RuntimeError) as err:
            probe.check(x)
        message = str(err.value)
        assert "torch-fused-ops was built for" in message
        assert f"this GPU (cuda:{x.device.index}, " in message
        assert f") is sm_{major}{minor}, which none of them covers" in message
        assert f"TORCH_CUDA_ARCH_LIST={major}.{minor} pip install --no-build-isolation" in message
    assert (x + 1).item() == 2  # the CUDA context is still usable
