"""Build checks: every op of every family has a CPU kernel, and a CUDA kernel whenever the
build could compile one (a CUDA torch plus a CUDA toolkit, as in CI), GPU present or not.
This is what keeps a .cu file that silently dropped out of the build from landing."""

import importlib
import os
import shutil
import subprocess

import pytest
import torch
from torch.utils.cpp_extension import CUDA_HOME

FAMILIES = {"lltm": "lltm", "rwkv_ops": "rwkv_ops", "padding_ops": "padding_ops"}


def ops_of(namespace):
    return [n for n in torch._C._dispatch_get_all_op_names() if n.startswith(namespace + "::")]


def built_families():
    names = []
    for package, namespace in FAMILIES.items():
        try:
            importlib.import_module(f"{package}._C")
        except ImportError:
            continue  # a family whose sources do not exist yet builds no library
        names.append(namespace)
    return names


def test_lltm_is_built():
    assert "lltm" in built_families()


@pytest.mark.parametrize("namespace", built_families())
def test_every_op_has_cpu_kernel(namespace):
    ops = ops_of(namespace)
    assert ops, f"no ops registered under torch.ops.{namespace}"
    for name in ops:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU"), name


cuda_build_expected = (
    torch.version.cuda is not None
    and CUDA_HOME is not None
    and os.environ.get("FUSED_OPS_CPU_ONLY", "0") != "1"
)


@pytest.mark.skipif(not cuda_build_expected, reason="CPU-only torch or no CUDA toolkit: CPU build")
@pytest.mark.parametrize("namespace", built_families())
def test_every_op_has_cuda_kernel(namespace):
    for name in ops_of(namespace):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "CUDA"), (
            f"{name} has no CUDA kernel although torch {torch.__version__} and nvcc "
            f"({CUDA_HOME}) were there to build one"
        )


openmp_build_expected = torch.backends.openmp.is_available() and os.uname().sysname == "Linux"


@pytest.mark.skipif(not openmp_build_expected, reason="torch without OpenMP, or not Linux")
@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs readelf (binutils)")
@pytest.mark.parametrize("namespace", built_families())
def test_cpu_kernels_use_torchs_openmp(namespace):
    """at::parallel_for runs in parallel only in code compiled with OpenMP (without it, on
    one thread, silently): each library must link the OpenMP runtime, and the process must
    hold one copy of it, torch's (two runtimes would each start a full thread pool)."""
    library = importlib.import_module(f"{namespace}._C").__file__
    dynamic = subprocess.run(["readelf", "-d", library], capture_output=True, text=True,
                             check=True).stdout
    assert "[libgomp.so.1]" in dynamic, f"{library} does not link libgomp: built without -fopenmp"
    with open("/proc/self/maps") as maps:
        runtimes = {line.split()[-1] for line in maps if "libgomp" in line or "libomp" in line}
    assert len(runtimes) == 1, runtimes
