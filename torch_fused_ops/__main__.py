"""`python -m torch_fused_ops info` (alias: `python -m lltm info`): what this torch-fused-ops build is and whether it runs on this GPU.

Prints the package version, the torch and CUDA it was built with, the GPU targets compiled
into the libraries (from the build facts, and read back from the libraries with cuobjdump
where that tool is found), the running Python and torch, and for each visible GPU its
architecture and whether the build covers it. Exit code 1 when a visible GPU is not covered.
"""

import glob
import importlib
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig

import torch

from torch_fused_ops import _build

FAMILIES = ("lltm", "rwkv_ops", "padding_ops")


def find_cuobjdump():
    candidates = [shutil.which("cuobjdump")]
    cuda_home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    candidates.append(os.path.join(cuda_home, "bin", "cuobjdump"))
    purelib = sysconfig.get_paths()["purelib"]
    # nvidia/cu13/bin (CUDA 13 wheels), nvidia/cuda_cuobjdump/bin (CUDA 12 wheels)
    candidates += glob.glob(os.path.join(purelib, "nvidia", "*", "bin", "cuobjdump"))
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def targets_in_library(tool, path):
    """(cubin architectures, PTX architectures) that cuobjdump lists in a library."""
    found = []
    for flag, kind in (("--list-elf", "cubin"), ("--list-ptx", "ptx")):
        out = subprocess.run([tool, flag, path], capture_output=True, text=True).stdout
        found.append(sorted(set(re.findall(r"\.(sm_\w+?)\." + kind, out)), key=_sm_order))
    return found


def _sm_order(name):
    digits = re.search(r"\d+", name).group(0)
    return (int(digits[:-1]), int(digits[-1]), name)


def info():
    facts = _build.build_facts()
    lines = []
    if facts is None:
        lines.append(f"torch-fused-ops {_build.BASE_VERSION} (no build facts: a tree built "
                     "before they existed; rebuild to record them)")
        cubins, ptx = [], []
    else:
        cubins, ptx = list(facts.CUBINS), list(facts.PTX)
        lines += [
            f"torch-fused-ops {facts.VERSION}",
            f"built with:    torch {facts.TORCH_VERSION}, "
            f"CUDA {facts.CUDA_VERSION or '- (CPU-only build)'}, on {facts.BUILD_DATE}",
            f"runs on:       torch >= {'.'.join(map(str, _build.MIN_TORCH))} (LibTorch stable ABI)",
            f"GPU targets:   {_build.describe(cubins, ptx) if cubins else 'none (CPU-only build)'}",
        ]
    tool = find_cuobjdump() if cubins else None
    for family in FAMILIES:
        importlib.import_module(family)  # loads its libraries (and checks the torch)
        lines.append(f"  {family + ':':13}{importlib.import_module(f'{family}._C').__file__}")
        spec = importlib.util.find_spec(f"{family}._C_cuda")
        if spec is not None:
            lines.append(f"  {'':13}{spec.origin}")
            if tool:
                elf, text = targets_in_library(tool, spec.origin)
                lines.append(f"  {'':13}cuobjdump: machine code {', '.join(elf) or 'none'}; "
                             "PTX " + (", ".join(p.replace("sm_", "compute_") for p in text)
                                       or "none"))
    if cubins and not tool:
        lines.append("  (cuobjdump not found: the targets above are the build facts)")
    lines.append(f"running:       Python {platform.python_version()}, torch {torch.__version__}"
                 f", CUDA {torch.version.cuda or '-'}")
    uncovered = 0
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        lines.append("GPUs:          none visible")
    for i in range(count):
        major, minor = torch.cuda.get_device_capability(i)
        how = _build.coverage(cubins, ptx, (major, minor))
        verdict = f"covered ({how})" if how else (
            f"NOT covered: build from source with TORCH_CUDA_ARCH_LIST={major}.{minor} "
            "pip install --no-build-isolation <a torch-fused-ops checkout>")
        uncovered += how is None
        name = torch.cuda.get_device_name(i)
        lines.append(f"GPU cuda:{i}:    {name}, sm_{major}{minor}: {verdict}")
    print("\n".join(lines))
    return 1 if uncovered else 0


def main(argv):
    if argv != ["info"]:
        print("usage: python -m torch_fused_ops info", file=sys.stderr)
        return 2
    return info()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
