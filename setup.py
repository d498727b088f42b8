"""Build torch-fused-ops: one compiled library per operator family.

Each family's sources live in csrc/<folder>/: *.cpp holds the schema, the input checks
and the CPU kernels; *.cu holds the CUDA kernels and their registration. The CUDA files
are compiled whenever torch is a CUDA build and a CUDA toolkit is found, even on a
machine without a GPU (set TORCH_CUDA_ARCH_LIST there); otherwise the CPU build is made.
FUSED_OPS_CPU_ONLY=1 forces the CPU build. MAX_JOBS bounds the parallel compile jobs.
"""

import os
from pathlib import Path

import torch
from setuptools import find_packages, setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

ROOT = Path(__file__).resolve().parent
# Python package -> source folder under csrc/.
FAMILIES = {"lltm": "lltm", "rwkv_ops": "rwkv", "padding_ops": "padding"}


def build_cuda() -> bool:
    if os.environ.get("FUSED_OPS_CPU_ONLY", "0") == "1":
        return False
    return torch.version.cuda is not None and CUDA_HOME is not None


def extensions():
    cuda = build_cuda()
    cxx = ["-O3"]
    nvcc = ["-O3", "--expt-relaxed-constexpr", "-lineinfo"]
    exts = []
    for package, folder in FAMILIES.items():
        src_dir = ROOT / "csrc" / folder
        sources = sorted(src_dir.glob("*.cpp"))
        if not sources:
            continue
        if cuda:
            sources += sorted(src_dir.glob("*.cu"))
        kwargs = dict(
            name=f"{package}._C",
            sources=[str(s.relative_to(ROOT)) for s in sources],
            include_dirs=[str(ROOT / "csrc")],
            extra_compile_args={"cxx": cxx, "nvcc": nvcc} if cuda else {"cxx": cxx},
            # abi3 (torch defines Py_LIMITED_API): the ops are reached through torch.ops,
            # not pybind, so one build serves every CPython the wheel tag admits.
            py_limited_api=True,
        )
        exts.append(CUDAExtension(**kwargs) if cuda else CppExtension(**kwargs))
    return exts


setup(
    packages=find_packages(include=["lltm", "lltm_cuda", "lltm_cpp", "rwkv_ops", "padding_ops"]),
    ext_modules=extensions(),
    cmdclass={"build_ext": BuildExtension},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
