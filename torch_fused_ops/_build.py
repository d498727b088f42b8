"""GPU targets, build facts and the library loader of torch-fused-ops (all three op families
are built together and loaded the same way).

This file is the one place that states the wheel's SM targets and the oldest torch it runs
on. setup.py loads it by path (without importing the package) to turn TORCH_CUDA_ARCH_LIST
into nvcc flags, to set the stable-ABI target version and to write the build facts
(torch_fused_ops/_build_info.py, generated, git-ignored); .ci/build_wheel.sh reads the
target list from it; `python -m torch_fused_ops info`, the import-time torch check and every
family's loader use it. It imports nothing outside the standard library at module level.
"""

import importlib
import importlib.util
import re

BASE_VERSION = "0.1.0"

# The libraries use only the LibTorch stable ABI (torch/csrc/stable, torch/headeronly) as of
# this release: they are compiled with TORCH_TARGET_VERSION set to it, so that an API added
# later fails at compile time, and one build loads on this release and every newer one.
MIN_TORCH = (2, 10)


def target_version_macro(min_torch=MIN_TORCH):
    """-DTORCH_TARGET_VERSION for torch/csrc/stable/version.h: major in bits 56-63, minor
    in bits 48-55 (2.10 -> 0x020a000000000000)."""
    major, minor = min_torch
    return f"-DTORCH_TARGET_VERSION=0x{(major << 56) | (minor << 48):016x}"

# The wheels, one per CUDA major version (a library built by nvcc X links libcudart.so.X and
# so loads only next to a torch built for CUDA X): the local version tag and the SM targets.
# Each list holds machine code for every plain sm_XY its nvcc compiles from the oldest GPU
# torch's builds of that major still support, plus PTX of the newest, which the driver
# JIT-compiles on newer GPUs. .ci/build_wheel.sh builds both; TORCH_CUDA_ARCH_LIST=all
# means the list of the CUDA major a build compiles for.
#
# CUDA 13 (nvcc 13.0, against torch 2.14.1+cu130): sm_75 up (CUDA 13 dropped Volta): Turing,
# Ampere, Ada, Hopper, Blackwell, with the Jetson/Thor parts 8.7, 8.8, 11.0.
# CUDA 12 (nvcc 12.4, against torch 2.10.0+cu128): sm_70 up (torch's cu126 and cu128 builds
# keep Volta): Volta, Xavier (7.2), Turing, Ampere, Orin (8.7), Ada, Hopper. Tagged by the
# major alone ("cu12", not "cu124" or "cu128"): it serves every CUDA 12 torch alike (cu126,
# cu128, cu129). nvcc 12.4 is the newest CUDA 12 nvcc any package registry reachable from
# CI has (PyPI's nvidia-cuda-nvcc-cu12 ships ptxas but no nvcc; Debian has 12.4): it knows no
# Blackwell target, so sm_100/sm_103/sm_120/sm_121 run the compute_90 PTX, JIT-compiled by
# the driver on first use (cached by it afterwards).
WHEELS = {
    13: {"tag": "cu130", "arch_list": "7.5;8.0;8.6;8.7;8.8;8.9;9.0;10.0;10.3;11.0;12.0;12.1+PTX",
         "oldest_sm": 75},
    12: {"tag": "cu12", "arch_list": "7.0;7.2;7.5;8.0;8.6;8.7;8.9;9.0+PTX", "oldest_sm": 70},
}


def cuda_major(cuda_version):
    """"12.8" -> 12; None -> None."""
    return int(str(cuda_version).split(".")[0]) if cuda_version else None


def wheel_arch_list(major):
    """The wheel's targets for CUDA major version `major`, in TORCH_CUDA_ARCH_LIST syntax."""
    if major not in WHEELS:
        raise ValueError(
            f"TORCH_CUDA_ARCH_LIST=all: no wheel target list for CUDA {major} (lists exist for "
            f"CUDA {', '.join(map(str, sorted(WHEELS)))}); name the targets, e.g. 9.0"
        )
    return WHEELS[major]["arch_list"]


def wheel_name(major):
    """The file name of the wheel for CUDA major version `major` (as .ci/build_wheel.sh
    builds it on Linux x86-64)."""
    return f"torch_fused_ops-{BASE_VERSION}+{WHEELS[major]['tag']}-cp310-abi3-linux_x86_64.whl"


_ITEM = re.compile(r"^(\d+)\.(\d)([af]?)(\+PTX)?$")


def parse_arch_list(text, major=None):
    """TORCH_CUDA_ARCH_LIST syntax -> (cubins, ptx): "8.6;9.0a;12.0+PTX" gives
    (["sm_86", "sm_90a", "sm_120"], ["compute_120"]). "all" means the wheel's list for CUDA
    major version `major` (WHEELS). Items are separated by ';', ',' or spaces; each is
    MAJOR.MINOR, optionally with an arch-specific suffix a/f, optionally +PTX."""
    if text.strip() == "all":
        text = wheel_arch_list(major)
    cubins, ptx = [], []
    for item in re.split(r"[;,\s]+", text.strip()):
        if not item:
            continue
        m = _ITEM.match(item)
        if not m:
            raise ValueError(
                f"TORCH_CUDA_ARCH_LIST: cannot read {item!r}; expected items like 8.6, 9.0a or "
                "12.0+PTX separated by ';', or 'all' (the wheel's list for the CUDA major "
                "version of the build)"
            )
        name = f"{m.group(1)}{m.group(2)}{m.group(3)}"
        if f"sm_{name}" not in cubins:
            cubins.append(f"sm_{name}")
        if m.group(4) and f"compute_{name}" not in ptx:
            ptx.append(f"compute_{name}")
    if not cubins:
        raise ValueError("TORCH_CUDA_ARCH_LIST is empty")
    return cubins, ptx


def _band(target):
    """The targets whose machine code is compiled from one PTX: one band per major version
    below 10, one for Blackwell's majors (10, 11, 12) together."""
    return min(_split(target)[0], 10)


def gencode_flags(cubins, ptx):
    """nvcc flags for the targets: machine code (SASS) per cubin, PTX text per ptx.

    nvcc's front end (cicc, source to PTX) takes about two thirds of a target's compile time
    and runs once per virtual architecture, ptxas (PTX to SASS) once per cubin. So the plain
    cubins of a band (_band) share one PTX: that of the band's newest PTX target at or below
    them, else of the band's oldest cubin (arch-specific a/f cubins keep their own). This is
    what the sources allow: their device code changes only at 8.0 (bfloat16/float16 MMAs) and
    9.0 (thread-block clusters), each a band's start. Measured on every .cu file (nvcc -ptx;
    comments, .version/.target lines and internal-name hashes aside): with nvcc 13.0 the PTX
    for 8.6 to 8.9 equals 8.0's, and 10.3 to 12.1 equal 10.0's or differ from it (and in
    timex_fft_fused.cu 8.6 from 8.0) only in NVVM's scheduling: instruction order and which
    index arithmetic it recomputes (inspected: timex_fft_fused.cu, tile_pad_cuda.cu); 9.0 and
    10.0 differ from their predecessors in the code itself. With nvcc 12.4 (the heaviest
    four files) 7.2 and 7.5 equal 7.0's and 8.6 to 8.9 equal 8.0's. ptxas still compiles
    each cubin for its own GPU, so the wheels hold machine code of every target with the
    fronts run 5 times instead of 12 (cu130) and 3 instead of 8 (cu12)."""
    groups = {}  # virtual architecture -> the codes nvcc makes from its PTX
    for c in cubins:
        cap, suffix = _split(c)[:2], _split(c)[2]
        if suffix:
            source = f"compute_{c[3:]}"
        else:
            mine = [p for p in ptx
                    if not _split(p)[2] and _band(p) == _band(c) and _split(p)[:2] <= cap]
            peers = [o for o in cubins if not _split(o)[2] and _band(o) == _band(c)]
            source = (max(mine, key=_split) if mine
                      else "compute_" + min(peers, key=_split)[3:])
        groups.setdefault(source, []).append(c)
    for p in ptx:
        groups.setdefault(p, []).append(p)
    flags = []
    for source, codes in groups.items():
        code = codes[0] if len(codes) == 1 else "[" + ",".join(codes) + "]"
        flags.append(f"-gencode=arch={source},code={code}")
    return flags


def describe(cubins, ptx):
    """"sm_75, sm_80 (+PTX compute_80)" """
    text = ", ".join(cubins)
    return text + (f" (+PTX {', '.join(ptx)})" if ptx else "")


def _split(target):
    """"sm_90a" -> (9, 0, "a"); "compute_121" -> (12, 1, "")."""
    digits = re.search(r"_(\d+)([af]?)$", target)
    num = digits.group(1)
    return int(num[:-1]), int(num[-1]), digits.group(2)


def coverage(cubins, ptx, capability):
    """How a GPU of compute capability (major, minor) runs these targets: the target that
    serves it and how ("sm_86 machine code", "compute_120 PTX, JIT-compiled ..."), or
    None when nothing does. A plain sm_XY cubin runs on sm_XZ for Z >= Y (same major);
    an arch-specific sm_XYa only on sm_XY; a family sm_XYf on sm_XZ, Z >= Y; PTX of
    compute_XY on any GPU of capability >= X.Y (the driver compiles it on first use)."""
    major, minor = capability
    best = None
    for c in cubins:
        cmaj, cmin, suffix = _split(c)
        ok = cmaj == major and (cmin == minor if suffix == "a" else cmin <= minor)
        if ok and (best is None or _split(best)[1] < cmin):
            best = c
    if best is not None:
        return f"{best} machine code"
    for p in sorted(ptx, key=_split, reverse=True):
        pmaj, pmin, suffix = _split(p)
        if not suffix and (pmaj, pmin) <= (major, minor):
            return f"{p} PTX, JIT-compiled by the driver on first use"
    return None


def release(version):
    """"2.11.0+cu130" -> "2.11.0"; "2.12.0a0+git1234" -> "2.12.0"."""
    m = re.match(r"^(\d+\.\d+\.\d+)", version)
    return m.group(1) if m else version


def local_tag(cuda_version):
    """The wheel's local version label: WHEELS' tag of the CUDA major version ("cu130",
    "cu12"), "cu<version>" for a major without a wheel, or "cpu" without CUDA. It names no
    torch: one build serves every torch from MIN_TORCH on (of that CUDA major version)."""
    if not cuda_version:
        return "cpu"
    major = cuda_major(cuda_version)
    return WHEELS[major]["tag"] if major in WHEELS else "cu" + cuda_version.replace(".", "")


def _minor_tuple(version):
    return tuple(int(x) for x in release(version).split(".")[:2])


def build_facts():
    """The generated module torch_fused_ops._build_info, or None in an unbuilt tree."""
    try:
        from torch_fused_ops import _build_info
    except ImportError:
        return None
    return _build_info


def check_torch():
    """Raise ImportError, in one sentence, when the running torch cannot load the libraries:
    older than MIN_TORCH (the stable-ABI functions they call would be missing), or a CUDA
    build of torch whose CUDA major version differs from the one the CUDA kernels link; the
    sentence names the wheel that torch needs (WHEELS), or says none exists."""
    import torch

    minimum = ".".join(map(str, MIN_TORCH))
    facts = build_facts()
    version = getattr(facts, "VERSION", BASE_VERSION)
    source = "(pip install --no-build-isolation <checkout>)"
    if _minor_tuple(torch.__version__) < MIN_TORCH:
        raise ImportError(
            f"torch-fused-ops {version} needs torch >= {minimum} but torch {torch.__version__} "
            "is installed: install a torch that matches or rebuild this package from source "
            f"against your torch {source}."
        )
    built = cuda_major(getattr(facts, "CUDA_VERSION", None))
    running = cuda_major(torch.version.cuda)
    if built is None or running is None or built == running:
        return
    if running in WHEELS:
        remedy = (f"your torch needs the CUDA {running} wheel {wheel_name(running)}, or a build "
                  f"from source against it {source}")
    else:
        remedy = (f"no wheel is built for CUDA {running}: build from source against your "
                  f"torch {source}")
    raise ImportError(
        f"torch-fused-ops {version} needs torch >= {minimum} built for CUDA {built} but the "
        f"installed torch {torch.__version__} uses CUDA {torch.version.cuda}: this is the "
        f"+{version.partition('+')[2] or local_tag(facts.CUDA_VERSION)} build; {remedy}."
    )


def load_library(package):
    """Loads <package>._C (the schemas and the CPU kernels: torch.ops.<package>.*) after
    check_torch(), and <package>._C_cuda (the CUDA kernels) where it was built and the running
    torch has CUDA; a CPU-only torch runs the CPU kernels of a CUDA build. A missing or
    unloadable library is one ImportError that says how to rebuild."""
    check_torch()
    import torch

    names = [f"{package}._C"]
    if torch.version.cuda and importlib.util.find_spec(f"{package}._C_cuda") is not None:
        names.append(f"{package}._C_cuda")
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ImportError(
                f"{name}, a compiled library of torch-fused-ops, is missing or cannot load "
                f"with torch {torch.__version__}; rebuild with "
                f"`pip install --no-build-isolation -e .`: {e}"
            ) from e
