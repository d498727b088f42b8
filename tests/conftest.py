import os
import shutil
import subprocess

import pytest
import torch
from torch.utils.cpp_extension import include_paths

from torch_fused_ops._build import target_version_macro

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def not_a_path_case(item):
    """Whether item is a forced-CUDA-path combination that does not exist: the seq_path
    fixture of test_lltm_sequence.py (and the files that import it) forces "cta",
    "persistent" or "step" only on CUDA tensors, only in tests not marked auto_path_only, and
    "cta" only up to the module's CTA_MAX_STATE."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    path = params.get("seq_path", "auto")
    if path == "auto":
        return False
    if params.get("device", "cuda") != "cuda" or item.get_closest_marker("auto_path_only"):
        return True
    return path == "cta" and params.get("S", 0) > getattr(item.module, "CTA_MAX_STATE", 128)


def pytest_collection_modifyitems(config, items):
    # Combinations a parametrised test does not have are left out (deselected), not skipped.
    dropped = [item for item in items if not_a_path_case(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not not_a_path_case(item)]


def rel_err(out, ref):
    """||out - ref|| / ||ref|| in float64 (0 when both are zero)."""
    out, ref = out.double(), ref.double().to(out.device)
    denom = ref.norm().item()
    diff = (out - ref).norm().item()
    return diff / denom if denom > 0 else diff


TESTS = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(os.path.dirname(TESTS), "csrc")


def emulation_test(fn):
    """A test that compiles kernel headers from csrc/ as host C++ (g++, C++20) and runs the
    kernels on the CPU: marked `emulation`, since it tests the source tree rather than an
    installed build (.ci/build_wheel.sh leaves these out of its runs against the wheel; the
    source-tree run of tests/run.sh has them)."""
    no_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20)")
    return pytest.mark.emulation(no_gxx(fn))


# Thread-block clusters (the LLTM sequence's cluster kernels, TimeX's fft_cluster): sm_90 and
# newer. A hardware condition, decided before the test runs, so that a path that raises on
# hardware that has them fails instead of skipping.
needs_sm90 = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
    reason="needs an sm_90 or newer GPU (thread-block clusters)")


def run_emulator(source, tmp_path):
    """Builds a C++ program that runs CUDA kernels on the CPU (tests/cuda_emulation.h) and
    runs it; it prints a line per configuration and exits non-zero on any failure."""
    path = tmp_path / "emulate.cpp"
    path.write_text(source)
    binary = tmp_path / "emulate"
    # The kernels' headers compile as the extension compiles them: stable ABI of MIN_TORCH.
    flags = [f"-I{p}" for p in include_paths()] + [f"-I{CSRC}", f"-I{TESTS}",
                                                    target_version_macro()]
    build = subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", *flags, str(path), "-o",
                            str(binary)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    # A hang still fails, after 20 minutes. Not 5: the op path's run takes about 100 s alone on
    # CI's two cores, and took more than 300 s beside a wheel's build (as .ci/run once ran them).
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout
