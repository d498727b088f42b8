#!/usr/bin/env bash
# Builds the CUDA wheel for every GPU target of WHEEL_ARCH_LIST (torch_fused_ops/_build.py), checks
# with cuobjdump that each CUDA library holds machine code for each target and the PTX, and that
# no library imports a symbol outside the LibTorch stable ABI; installs the wheel into a fresh
# virtual environment and runs the test suite against the installed wheel (not the source
# tree), then `python -m torch_fused_ops info`; then does the same with a second torch release
# (SECOND_TORCH): one wheel, several torch releases. Needs no GPU; with one, the CUDA tests
# run too.
#
#   .ci/build_wheel.sh [--system-site-packages] [--build-only | --wheel FILE]
#
#   --system-site-packages  the fresh venv sees the system's torch and test tools and pip
#                           runs offline (a GPU machine whose torch cannot be downloaded);
#                           by default torch==<the built-with release> is pip-installed.
#   --build-only            stop after the build and the checks of the wheel's contents.
#   --wheel FILE            skip the build: check, install and test this wheel.
#   The wheel is left in dist/ and in OUT.
#   OUT                     folder for the logs and the wheel (default build/wheel).
#   FUSED_OPS_WHEEL_ARCHS   targets, in TORCH_CUDA_ARCH_LIST syntax (default "all", the wheel's
#                           list). A TORCH_CUDA_ARCH_LIST already in the environment is ignored:
#                           GPU machine images often set one (the H100's sets 9.0a), and the
#                           wheel's targets must not depend on where it is built.
#   MAX_JOBS                parallel compile jobs (default: the number of cores).
#   SECOND_TORCH            the second torch release the wheel is tested with (default 2.13.0,
#                           a CPU build: the CPU libraries must load without CUDA; "none"
#                           skips it; --system-site-packages skips it too).
set -euo pipefail

# All in one function: bash parses it whole before running, so editing this file while it
# runs cannot change what runs.
main() {
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SYSTEM_SITE=0
WHEEL=""
BUILD_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --system-site-packages) SYSTEM_SITE=1 ;;
    --build-only) BUILD_ONLY=1 ;;
    --wheel) WHEEL="$(realpath "$2")"; shift ;;
    *) echo "build_wheel: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
  shift
done
OUT="$(mkdir -p "${OUT:-$ROOT/build/wheel}" && cd "${OUT:-$ROOT/build/wheel}" && pwd)"
exec > >(tee "$OUT/build_wheel.log") 2>&1
fail() { echo "build_wheel: FAILED: $*" >&2; exit 1; }
step() { echo; echo "== $* ($(date -u +%H:%M:%S))"; }

export TORCH_CUDA_ARCH_LIST="${FUSED_OPS_WHEEL_ARCHS:-all}"
export MAX_JOBS="${MAX_JOBS:-$(nproc)}"
export FUSED_OPS_NO_BUILD=1
# shellcheck disable=SC1091
source "$ROOT/.ci/setup.sh"  # the build Python (torch, ninja), CUDA_HOME, CUDA_INC_PATH, MAX_JOBS
cd "$ROOT"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/fused-ops-wheel.XXXXXX")"
"$PY" -c 'import torch; assert torch.version.cuda, "a CPU-only torch cannot build the CUDA wheel"' \
  || fail "the build Python's torch has no CUDA"
[ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ] || fail "no nvcc (set CUDA_HOME)"

# The targets, read from the one place that states them.
read -r CUBINS PTX < <("$PY" - "$TORCH_CUDA_ARCH_LIST" <<'EOF'
import runpy, sys
b = runpy.run_path("torch_fused_ops/_build.py")
cubins, ptx = b["parse_arch_list"](sys.argv[1])
print(",".join(cubins), ",".join(ptx) or "-")
EOF
)
[ -n "${CUBINS:-}" ] || fail "cannot read the targets from TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST"
echo "build_wheel: targets $CUBINS, PTX $PTX (TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST)"
echo "build_wheel: $("$CUDA_HOME/bin/nvcc" --version | tail -n 1)"
# The list must keep up with nvcc: every plain sm_XY >= 75 it can compile.
NEWER=$("$CUDA_HOME/bin/nvcc" --list-gpu-code | grep -E '^sm_[0-9]+$' \
  | awk -F_ -v have=",$CUBINS," '$2 >= 75 && index(have, "," $0 ",") == 0' | tr '\n' ' ')
if [ "$TORCH_CUDA_ARCH_LIST" = all ] && [ -n "$NEWER" ]; then
  echo "build_wheel: WARNING: this nvcc also compiles $NEWER- add them to WHEEL_ARCH_LIST in torch_fused_ops/_build.py"
fi

if [ -z "$WHEEL" ]; then
  step "build (MAX_JOBS=$MAX_JOBS, $(nproc) cores; log: $OUT/wheel_build.log)"
  # From a copy of the sources: the build can neither pick up nor overwrite the in-place
  # (editable) build's objects, libraries and build facts.
  mkdir -p "$WORK/src"
  tar -C "$ROOT" -c --exclude=./.git --exclude=./.venv --exclude=./build --exclude=./dist \
    --exclude='*.so' --exclude='*.egg-info' --exclude=__pycache__ --exclude=./csrc/common/build_targets.h \
    --exclude=./torch_fused_ops/_build_info.py . | tar -C "$WORK/src" -x
  start=$(date +%s)
  "$PY" -m pip wheel -v --no-build-isolation --no-deps -w "$WORK/dist" "$WORK/src" \
    >"$OUT/wheel_build.log" 2>&1 || { tail -n 80 "$OUT/wheel_build.log"; fail "wheel build"; }
  BUILD_S=$(( $(date +%s) - start ))
  echo "build_wheel: build took ${BUILD_S} s ($(( BUILD_S / 60 )) min $(( BUILD_S % 60 )) s)"
  WHEEL="$(ls "$WORK"/dist/torch_fused_ops-*.whl)"
  mkdir -p "$ROOT/dist" && cp "$WHEEL" "$ROOT/dist/" && cp "$WHEEL" "$OUT/"
fi
echo "build_wheel: wheel $(basename "$WHEEL") ($(du -h "$WHEEL" | cut -f1))"

step "check the wheel's tags, metadata and machine code"
TORCH_RELEASE="$("$PY" -c 'import torch, re; print(re.match(r"\d+\.\d+\.\d+", torch.__version__)[0])')"
TAG="$("$PY" -c 'import torch; print("cu" + torch.version.cuda.replace(".", ""))')"
MIN_TORCH="$("$PY" -c 'import runpy; print(".".join(map(str, runpy.run_path("torch_fused_ops/_build.py")["MIN_TORCH"])))')"
case "$(basename "$WHEEL")" in
  torch_fused_ops-*+"$TAG"-cp310-abi3-*.whl) echo "ok: name has +$TAG and the abi3 tag cp310-abi3" ;;
  *) fail "wheel name $(basename "$WHEEL") lacks +$TAG or cp310-abi3" ;;
esac
mkdir -p "$WORK/unpacked" && (cd "$WORK/unpacked" && "$PY" -m zipfile -e "$WHEEL" .)
grep -qx "Requires-Dist: torch>=$MIN_TORCH" "$WORK"/unpacked/*.dist-info/METADATA \
  || fail "METADATA does not require torch>=$MIN_TORCH: $(grep Requires-Dist "$WORK"/unpacked/*.dist-info/METADATA)"
echo "ok: METADATA requires torch>=$MIN_TORCH (no pin to the torch it was built with)"

CUOBJDUMP="$(command -v cuobjdump || true)"
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
for c in "$CUDA_HOME/bin/cuobjdump" "$SITE/nvidia/cu13/bin/cuobjdump"; do
  [ -z "$CUOBJDUMP" ] && [ -x "$c" ] && CUOBJDUMP="$c"
done
if [ -z "$CUOBJDUMP" ] && [ "$SYSTEM_SITE" = 0 ]; then
  "$PY" -m pip install -q nvidia-cuda-cuobjdump && CUOBJDUMP="$SITE/nvidia/cu13/bin/cuobjdump"
fi
[ -x "$CUOBJDUMP" ] || fail "cuobjdump not found (CUDA toolkit, or pip install nvidia-cuda-cuobjdump)"
export PATH="$(dirname "$CUOBJDUMP"):$PATH"  # for `python -m torch_fused_ops info` and the tests too
# Every family library: each listed sm_XY as machine code (ELF), the PTX targets as PTX,
# nothing else (no target that the list does not state), and every .cu file (one fatbin
# each) for every target: each target appears equally often.
"$PY" - "$CUOBJDUMP" "$CUBINS" "$PTX" "$WORK/unpacked" <<'EOF' || fail "machine code check"
import collections, pathlib, re, subprocess, sys
tool, cubins, ptx, root = sys.argv[1], sys.argv[2].split(","), sys.argv[3], pathlib.Path(sys.argv[4])
ptx = [] if ptx == "-" else ptx.split(",")
libs = sorted(root.glob("*/_C_cuda*.so"))
families = {"lltm", "rwkv_ops", "padding_ops"}
assert {p.parent.name for p in libs} == families, libs
assert {p.parent.name for p in root.glob("*/_C.*so")} == families
ok = True
for lib in libs:
    for flag, want, kind in (("--list-elf", cubins, "cubin"), ("--list-ptx", ptx, "ptx")):
        out = subprocess.run([tool, flag, str(lib)], capture_output=True, text=True).stdout
        # "ELF file    1: _C.abi3.1.sm_90.cubin", "PTX file    1: _C.abi3.1.sm_121.ptx"
        got = collections.Counter(re.findall(r"\.(sm_\w+?)\." + kind, out))
        want = [w.replace("compute_", "sm_") for w in want]
        missing = [w for w in want if not got[w]]
        extra = sorted(set(got) - set(want))
        uneven = len({got[w] for w in want}) > 1
        name = f"{lib.parent.name}/{lib.name}"
        if missing or extra or uneven:
            ok = False
            print(f"FAIL {name} {kind}: missing {missing}, not listed {extra}, per target {dict(got)}")
        else:
            print(f"ok: {name}: {kind} for {', '.join(want) or 'none'} ({got[want[0]] if want else 0} each)")
sys.exit(0 if ok else 1)
EOF
grep -q "CUBINS = \[" "$WORK"/unpacked/torch_fused_ops/_build_info.py || fail "torch_fused_ops/_build_info.py missing from the wheel"
# The stable ABI, checked on the binaries: every undefined symbol is a torch C shim
# (aoti_torch_*, torch_*), limited Python API, or C/C++/CUDA runtime (versioned, or std::); a mangled
# ATen/c10/torch C++ symbol would tie the wheel to the torch it was built against.
for lib in "$WORK"/unpacked/*/_C*.so; do
  bad="$(nm -D --undefined-only "$lib" | awk '$1 == "U" {print $2}' \
    | grep -Ev '^(aoti_torch_[A-Za-z0-9_]+|torch_[A-Za-z0-9_]+|_?Py[A-Za-z0-9_]+|_ZN?K?St[A-Za-z0-9_]+|[A-Za-z0-9_]+@(GLIBC|GLIBCXX|CXXABI|GCC|libcudart)[^ ]*)$' || true)"
  [ -z "$bad" ] || fail "$lib imports symbols outside the stable ABI: $(echo "$bad" | head -n 10 | tr '\n' ' ')"
  echo "ok: ${lib#"$WORK"/unpacked/}: $(nm -D --undefined-only "$lib" | grep -cE ' (aoti_)?torch_') torch C-shim imports, nothing from ATen/c10"
done
if [ "$BUILD_ONLY" = 1 ]; then
  echo; echo "build_wheel: PASSED (build and contents): $(basename "$WHEEL")${BUILD_S:+, built in ${BUILD_S} s}"
  rm -rf "$WORK"
  return 0
fi

# Installs the wheel next to torch==$1 in a fresh virtual environment and runs the test suite
# against it from outside the source tree.
test_wheel_with_torch() {
  local torch_release="$1" label="$2"
  step "install into a fresh virtual environment with torch $torch_release"
  local venv="$WORK/venv-$label"
  if [ "$SYSTEM_SITE" = 1 ]; then
    # pip, like torch, comes from the system's site-packages (some system Pythons lack ensurepip).
    "$PY" -m venv --system-site-packages --without-pip "$venv"
    # Where $PY is itself a virtual environment (the GPU machine's python3 is), its packages are
    # not the "system" ones a new venv sees: a .pth file appends them after the venv's own.
    "$PY" -c 'import sysconfig as s; p = s.get_paths(); print("\n".join(dict.fromkeys([p["purelib"], p["platlib"]])))' \
      >"$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/outer_env.pth"
    "$venv/bin/python" -m pip install -q --no-index --no-deps "$WHEEL"  # the system's torch
  else
    "$PY" -m venv "$venv"
    "$venv/bin/python" -m pip install -q "torch==$torch_release" setuptools ninja  # ninja, setuptools: tests that compile
    "$venv/bin/python" -m pip install -q "$WHEEL[test]"
  fi
  "$venv/bin/python" -m pip list 2>/dev/null | grep -Ei "^(torch|torch-fused-ops|pytest) " || true

  step "test suite against the installed wheel, torch $torch_release"
  mkdir -p "$WORK/run" && cd "$WORK/run"
  # From outside the source tree: `import lltm` must resolve to the venv's site-packages.
  "$venv/bin/python" - "$venv" <<'PYEOF' || fail "the tests would not import the installed wheel"
import os, sys, torch, torch_fused_ops, lltm, rwkv_ops, padding_ops
print(f"torch {torch.__version__} (CUDA {torch.version.cuda})")
for m in (torch_fused_ops, lltm, rwkv_ops, padding_ops):
    print(f"{m.__name__}.__file__ = {m.__file__}")
    assert os.path.realpath(m.__file__).startswith(os.path.realpath(sys.argv[1])), m.__file__
PYEOF
  # tests/test_benchmarks.py is left out: it runs benchmarks/ (not part of the wheel) with the
  # source tree on PYTHONPATH, so it would test the source tree.
  local start rc=0
  start=$(date +%s)
  "$venv/bin/python" -m pytest "$ROOT/tests" -q -p no:cacheprovider \
    --ignore="$ROOT/tests/test_benchmarks.py" --junitxml="$OUT/pytest_wheel_$label.xml" || rc=$?
  echo "build_wheel: tests with torch $torch_release took $(( $(date +%s) - start )) s, pytest exit code $rc"
  [ "$rc" = 0 ] || fail "test suite against the wheel with torch $torch_release (pytest exit code $rc)"

  step "python -m torch_fused_ops info (torch $torch_release)"
  "$venv/bin/python" -m torch_fused_ops info | tee "$OUT/info_$label.txt"
  cd "$ROOT"
}

test_wheel_with_torch "$TORCH_RELEASE" built-with
SECOND_TORCH="${SECOND_TORCH:-2.13.0}"
if [ "$SYSTEM_SITE" = 0 ] && [ "$SECOND_TORCH" != none ] && [ "$SECOND_TORCH" != "$TORCH_RELEASE" ]; then
  test_wheel_with_torch "$SECOND_TORCH" second
fi
echo
echo "build_wheel: PASSED: $(basename "$WHEEL")${BUILD_S:+, built in ${BUILD_S} s}; logs in $OUT"
rm -rf "$WORK"
}

main "$@"
exit
