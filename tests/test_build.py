"""Build checks: every op of every family has a CPU kernel, and a CUDA kernel whenever the
build compiled CUDA (as CI's wheels do), GPU present or not (this keeps a .cu file that
silently dropped out of the build from landing); and every library stays on the LibTorch
stable ABI, the CPU ones loadable without CUDA."""

import importlib
import importlib.util
import os
import re
import shutil
import subprocess

import pytest
import torch

try:
    from torch_fused_ops import _build_info as build_info
except ImportError:  # libraries copied without the generated build facts
    build_info = None

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


# Whether this build compiled CUDA, as setup.py recorded it (CUDA_VERSION is None for a CPU-only
# build: FUSED_OPS_CPU_ONLY=1, or .ci/setup.sh with no GPU and no TORCH_CUDA_ARCH_LIST), not
# as the environment the tests happen to run in suggests; without the recorded facts, whether
# any CUDA library was built. The CUDA libraries load only under a CUDA torch.
if build_info is not None:
    cuda_built = build_info.CUDA_VERSION is not None
else:
    cuda_built = any(importlib.util.find_spec(f"{package}._C_cuda") is not None
                     for package in FAMILIES)
cuda_build_expected = cuda_built and torch.version.cuda is not None


@pytest.mark.skipif(not cuda_build_expected,
                    reason="CPU-only build, or a CUDA build under a CPU-only torch")
@pytest.mark.parametrize("namespace", built_families())
def test_every_op_has_cuda_kernel(namespace):
    for name in ops_of(namespace):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "CUDA"), (
            f"{name} has no CUDA kernel although this build compiled CUDA kernels"
        )


def libraries():
    """Every compiled library of the built families: <package>._C and, where built, _C_cuda."""
    found = []
    for family in built_families():
        found.append(importlib.import_module(f"{family}._C").__file__)
        spec = importlib.util.find_spec(f"{family}._C_cuda")
        if spec is not None:
            found.append(spec.origin)
    return found


# What a library on the LibTorch stable ABI may take from outside itself: torch's C shims
# (aoti_torch_*, torch_*), the limited Python API, and the C/C++/CUDA runtimes (their symbols
# are versioned: memcpy@GLIBC_2.14, __cxa_throw@CXXABI_1.3, cudaLaunchKernel@libcudart.so.13;
# a few of libstdc++'s std:: symbols come unversioned: _ZNSt..., _ZNKSt...).
# A mangled ATen/c10/torch C++ symbol (_ZN2at..., _ZN3c10..., _ZN5torch...) would tie the
# library to the one torch release it was built against.
STABLE_SYMBOL = re.compile(
    r"^(aoti_torch_\w+|torch_\w+|_?Py\w+|_ZN?K?St\w+|\w+@(GLIBC|GLIBCXX|CXXABI|GCC|libcudart)\S*)$"
)


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils)")
@pytest.mark.parametrize("library", libraries(), ids=os.path.basename)
def test_libraries_use_only_the_stable_abi(library):
    out = subprocess.run(["nm", "-D", "--undefined-only", library], capture_output=True,
                         text=True, check=True).stdout
    # "                 U aoti_torch_empty_strided", "                 w __gmon_start__"
    strong = [line.split()[-1] for line in out.splitlines() if line.split()[0] == "U"]
    outside = [name for name in strong if not STABLE_SYMBOL.match(name)]
    assert not outside, f"{library} imports symbols outside the stable ABI: {outside[:20]}"


@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs readelf (binutils)")
@pytest.mark.parametrize("library", libraries(), ids=os.path.basename)
def test_cpu_libraries_need_no_cuda(library):
    """<package>._C loads under a CPU-only torch: it must not need libtorch_cuda, libc10_cuda
    or the CUDA runtime (those belong to _C_cuda, loaded only under a CUDA torch), nor
    libtorch_python (whose C++ API changes with every release)."""
    needed = subprocess.run(["readelf", "-d", library], capture_output=True, text=True,
                            check=True).stdout
    assert "libtorch_python" not in needed, library
    if os.path.basename(library).startswith("_C."):
        for cuda_lib in ("libtorch_cuda", "libc10_cuda", "libcudart"):
            assert cuda_lib not in needed, f"{library} needs {cuda_lib}"
