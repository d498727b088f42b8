# Sourced by tests/run.sh and benchmarks/run.sh: makes a Python with torch available and
# builds this package in place (editable). Safe to run again: it reuses what it built.
# FUSED_OPS_NO_BUILD=1: the environment only, no build.
#
# - If `python3` already has torch (a GPU machine with its own torch), that torch is used.
#   Otherwise a virtual environment .venv is made with torch 2.14.1 (the CUDA 13.0 build).
# - The CUDA kernels are compiled when torch is a CUDA build, nvcc is found and a GPU is
#   visible (for its SM targets), or when TORCH_CUDA_ARCH_LIST names targets; without a GPU
#   and without that list the build is CPU-only (FUSED_OPS_CPU_ONLY=1): kernels that cannot
#   run here are not worth their compile time (CI compiles every target in its wheels).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [ -z "${VIRTUAL_ENV:-}" ] && ! python3 -c "import torch" 2>/dev/null; then
  if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
  fi
  # shellcheck disable=SC1091
  source .venv/bin/activate
fi
PY=python
command -v "$PY" >/dev/null || PY=python3
if ! "$PY" -c "import torch, pytest, numpy, ninja, hypothesis, matplotlib" 2>/dev/null; then
  "$PY" -m pip install -q "setuptools>=64" wheel ninja pytest numpy expecttest hypothesis matplotlib \
    "$("$PY" -c 'import torch' 2>/dev/null && echo setuptools || echo torch==2.14.1)"
fi

export MAX_JOBS="${MAX_JOBS:-2}"
if [ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDA_HOME=/usr/local/cuda  # /usr/local/bin/nvcc is a wrapper that misleads torch
fi
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ -d "$SITE/nvidia/cu13/include" ] && [ ! -f "${CUDA_HOME:-/nonexistent}/include/cusparse.h" ]; then
  export CUDA_INC_PATH="$SITE/nvidia/cu13/include"  # cuBLAS/cuSPARSE headers ATen includes
fi
if [ -z "${TORCH_CUDA_ARCH_LIST:-}" ] && ! "$PY" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  export FUSED_OPS_CPU_ONLY="${FUSED_OPS_CPU_ONLY:-1}"
fi

if [ "${FUSED_OPS_NO_BUILD:-0}" = 1 ]; then
  return 0  # the environment only (.ci/build_wheel.sh builds a wheel instead)
fi
echo "setup: $("$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'), CUDA_HOME=${CUDA_HOME:-none}, TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-auto}, FUSED_OPS_CPU_ONLY=${FUSED_OPS_CPU_ONLY:-0}"
start=$(date +%s)
mkdir -p build
if ! "$PY" setup.py -q build_ext --inplace >build/build.log 2>&1; then
  tail -n 60 build/build.log >&2
  echo "setup: build failed (full log: build/build.log)" >&2
  exit 1
fi
echo "setup: build took $(( $(date +%s) - start )) s (log: build/build.log)"
# An editable install of this tree into the environment (once), so that the packages import
# from anywhere in it; the libraries are the in-place build's (no second build).
if ! (cd / && "$PY" -c "import lltm, sys; sys.exit(not lltm.__file__.startswith('$ROOT/'))") 2>/dev/null; then
  FUSED_OPS_REGISTER_ONLY=1 "$PY" -m pip install -q --no-build-isolation --no-deps -e . \
    >>build/build.log 2>&1 || { tail -n 20 build/build.log >&2; echo "setup: pip install -e failed" >&2; exit 1; }
  echo "setup: installed this tree (editable) into $("$PY" -c 'import sys; print(sys.prefix)')"
fi
