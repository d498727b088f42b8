#!/usr/bin/env bash
# Builds one CUDA wheel (CUDA 13 by default, --cuda 12 for the other) for every GPU target of
# that CUDA major version's list (WHEELS in torch_fused_ops/_build.py), checks with cuobjdump
# that each CUDA library holds machine code for each target and the PTX, that the CUDA
# libraries need that major's CUDA runtime (libcudart.so.13 / .12) and that no library imports a
# symbol outside the LibTorch stable ABI; installs the wheel into a virtual environment with
# torch and runs the test suite against the installed wheel (not the source tree), then
# `python -m torch_fused_ops info`; then, for CUDA 13, the same with a second torch release
# (SECOND_TORCH): one wheel, several torch releases. Needs no GPU; with one, the CUDA tests
# run too. Ends with one SUMMARY line per torch tested (also in OUT/summary.txt).
#
#   .ci/build_wheel.sh [--cuda 13|12] [--system-site-packages] [--build-only | --wheel FILE]
#
#   --cuda 13               (default) nvcc 13.0 (CUDA_HOME, else /usr/local/cuda) against the
#                           build Python of .ci/setup.sh (torch 2.14.1+cu130): the +cu130 wheel.
#   --cuda 12               nvcc 12.4 from .ci/cuda12_toolkit.sh (in build/cuda12, or
#                           CUDA12_HOME) against torch CUDA12_TORCH (default 2.10.0, the
#                           declared minimum, a CUDA 12.8 build) in a fresh virtual environment,
#                           which then also runs the tests (it holds only torch and the build
#                           tools; the build runs from a copy of the sources): the +cu12 wheel.
#   --system-site-packages  the fresh venv sees the system's torch and test tools and pip
#                           runs offline (a GPU machine whose torch cannot be downloaded);
#                           by default torch==<the built-with release> is pip-installed.
#   --build-only            stop after the build and the checks of the wheel's contents.
#   --wheel FILE            skip the build: check, install and test this wheel.
#   The wheel is left in dist/ and in OUT.
#   OUT                     folder for the logs and the wheel (default build/wheel/cuda<major>).
#   FUSED_OPS_WHEEL_ARCHS   targets, in TORCH_CUDA_ARCH_LIST syntax (default "all", the wheel's
#                           list). A TORCH_CUDA_ARCH_LIST already in the environment is ignored:
#                           GPU machine images often set one (the H100's sets 9.0a), and the
#                           wheel's targets must not depend on where it is built.
#   MAX_JOBS                parallel compile jobs (default: the number of cores).
#   SECOND_TORCH            CUDA 13 only: the second torch release the wheel is tested with
#                           (default 2.13.0, a CPU build: the CPU libraries must load without
#                           CUDA; "none" skips it; --system-site-packages skips it too).
set -euo pipefail

# All in one function: bash parses it whole before running, so editing this file while it
# runs cannot change what runs.
main() {
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SYSTEM_SITE=0
WHEEL=""
BUILD_ONLY=0
CUDA_MAJOR=13
while [ $# -gt 0 ]; do
  case "$1" in
    --cuda) CUDA_MAJOR="$2"; shift ;;
    --system-site-packages) SYSTEM_SITE=1 ;;
    --build-only) BUILD_ONLY=1 ;;
    --wheel) WHEEL="$(realpath "$2")"; shift ;;
    *) echo "build_wheel: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
  shift
done
case "$CUDA_MAJOR" in
  12|13) ;;
  *) echo "build_wheel: --cuda $CUDA_MAJOR: wheels exist for CUDA 13 and 12" >&2; exit 2 ;;
esac
OUT="${OUT:-$ROOT/build/wheel/cuda$CUDA_MAJOR}"
OUT="$(mkdir -p "$OUT" && cd "$OUT" && pwd)"
exec > >(tee "$OUT/build_wheel.log") 2>&1
: >"$OUT/summary.txt"
fail() { echo "build_wheel: FAILED: $*" >&2; exit 1; }
step() { echo; echo "== $* ($(date -u +%H:%M:%S))"; }

export TORCH_CUDA_ARCH_LIST="${FUSED_OPS_WHEEL_ARCHS:-all}"
export MAX_JOBS="${MAX_JOBS:-$(nproc)}"
export FUSED_OPS_NO_BUILD=1
WORK="$(mktemp -d "${TMPDIR:-/tmp}/fused-ops-wheel.XXXXXX")"
BUILD_VENV=""
if [ "$CUDA_MAJOR" = 13 ]; then
  # shellcheck disable=SC1091
  source "$ROOT/.ci/setup.sh"  # the build Python (torch, ninja), CUDA_HOME, CUDA_INC_PATH, MAX_JOBS
else
  step "CUDA 12 toolkit and build environment"
  export CUDA_HOME="${CUDA12_HOME:-$ROOT/build/cuda12}"
  unset CUDA_INC_PATH  # the stable-ABI sources include no cuBLAS/cuSPARSE header
  "$ROOT/.ci/cuda12_toolkit.sh" "$CUDA_HOME" || fail "CUDA 12 toolkit (.ci/cuda12_toolkit.sh)"
  if [ "$SYSTEM_SITE" = 1 ]; then
    PY=python3
  else
    BUILD_VENV="$WORK/venv-built-with"
    start=$(date +%s)
    python3 -m venv "$BUILD_VENV"
    "$BUILD_VENV/bin/python" -m pip install -q "torch==${CUDA12_TORCH:-2.10.0}" "setuptools>=64" \
      wheel ninja || fail "pip install torch==${CUDA12_TORCH:-2.10.0}"
    echo "build_wheel: build environment (torch ${CUDA12_TORCH:-2.10.0}) in $(( $(date +%s) - start )) s"
    PY="$BUILD_VENV/bin/python"
  fi
fi
cd "$ROOT"
"$PY" - "$CUDA_MAJOR" <<'EOF' || fail "the build Python's torch cannot build the CUDA $CUDA_MAJOR wheel"
import sys, torch
assert torch.version.cuda, "a CPU-only torch cannot build the CUDA wheel"
major = int(torch.version.cuda.split(".")[0])
assert major == int(sys.argv[1]), f"torch {torch.__version__} is CUDA {torch.version.cuda}, not {sys.argv[1]}"
EOF
[ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ] || fail "no nvcc (set CUDA_HOME)"
"$CUDA_HOME/bin/nvcc" --version | grep -q "release $CUDA_MAJOR\\." \
  || fail "$CUDA_HOME/bin/nvcc is not CUDA $CUDA_MAJOR: $("$CUDA_HOME/bin/nvcc" --version | tail -n 2 | head -n 1)"

# The targets, read from the one place that states them.
read -r CUBINS PTX OLDEST < <("$PY" - "$TORCH_CUDA_ARCH_LIST" "$CUDA_MAJOR" <<'EOF'
import runpy, sys
b = runpy.run_path("torch_fused_ops/_build.py")
cubins, ptx = b["parse_arch_list"](sys.argv[1], int(sys.argv[2]))
print(",".join(cubins), ",".join(ptx) or "-", b["WHEELS"][int(sys.argv[2])]["oldest_sm"])
EOF
)
[ -n "${CUBINS:-}" ] || fail "cannot read the targets from TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST"
echo "build_wheel: targets $CUBINS, PTX $PTX (TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST)"
echo "build_wheel: $("$CUDA_HOME/bin/nvcc" --version | tail -n 1)"
# The list must keep up with nvcc: every plain sm_XY from the oldest supported one it compiles.
NEWER=$("$CUDA_HOME/bin/nvcc" --list-gpu-code | grep -E '^sm_[0-9]+$' \
  | awk -F_ -v have=",$CUBINS," -v oldest="$OLDEST" '$2 >= oldest && index(have, "," $0 ",") == 0' \
  | tr '\n' ' ')
if [ "$TORCH_CUDA_ARCH_LIST" = all ] && [ -n "$NEWER" ]; then
  echo "build_wheel: WARNING: this nvcc also compiles $NEWER- add them to WHEELS[$CUDA_MAJOR] in torch_fused_ops/_build.py"
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
WHEEL_SIZE="$(du -h "$WHEEL" | cut -f1)"
echo "build_wheel: wheel $(basename "$WHEEL") ($WHEEL_SIZE)"

step "check the wheel's tags, metadata and machine code"
TORCH_RELEASE="$("$PY" -c 'import torch, re; print(re.match(r"\d+\.\d+\.\d+", torch.__version__)[0])')"
TAG="$("$PY" -c 'import runpy, torch; print(runpy.run_path("torch_fused_ops/_build.py")["local_tag"](torch.version.cuda))')"
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
for c in "$CUDA_HOME/bin/cuobjdump" "$SITE"/nvidia/*/bin/cuobjdump; do
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
# The CUDA runtime of this major version and no other (torch loads it: libcudart.so.13 next to
# a cu13 torch, libcudart.so.12 next to a cu12 one); the CPU libraries need none.
for lib in "$WORK"/unpacked/*/_C*.so; do
  cudart="$(readelf -d "$lib" | sed -n 's/.*Shared library: \[\(libcudart[^]]*\)\].*/\1/p' | tr '\n' ' ')"
  case "$(basename "$lib")" in
    _C_cuda*) [ "$cudart" = "libcudart.so.$CUDA_MAJOR " ] || fail "$lib needs '$cudart', not libcudart.so.$CUDA_MAJOR" ;;
    *) [ -z "$cudart" ] || fail "$lib (a CPU library) needs $cudart" ;;
  esac
done
echo "ok: every _C_cuda library NEEDs libcudart.so.$CUDA_MAJOR, no _C library a CUDA runtime"
if [ "$BUILD_ONLY" = 1 ]; then
  echo; echo "build_wheel: PASSED (build and contents): $(basename "$WHEEL")${BUILD_S:+, built in ${BUILD_S} s}"
  rm -rf "$WORK"
  return 0
fi

# Installs the wheel next to torch==$1 in a fresh virtual environment (for CUDA 12's built-with
# torch: the build's own, fresh too) and runs the test suite against it from outside the source
# tree; appends the SUMMARY line to OUT/summary.txt.
test_wheel_with_torch() {
  local torch_release="$1" label="$2"
  step "install into a fresh virtual environment with torch $torch_release"
  local venv="$WORK/venv-$label"
  if [ "$label" = built-with ] && [ -n "$BUILD_VENV" ]; then
    "$venv/bin/python" -m pip install -q "$WHEEL[test]"  # next to the build's torch
  elif [ "$SYSTEM_SITE" = 1 ]; then
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
  # Left out, as they test the source tree rather than the wheel: tests/test_benchmarks.py (it
  # runs benchmarks/, not part of the wheel, with the source tree on PYTHONPATH) and the
  # `emulation` tests (they compile csrc/ headers as host C++ themselves; tests/run.sh runs
  # them; about 2.5 minutes of each run on the 2-core CI machine).
  local start rc=0
  start=$(date +%s)
  "$venv/bin/python" -m pytest "$ROOT/tests" -q -p no:cacheprovider -m "not emulation" \
    --ignore="$ROOT/tests/test_benchmarks.py" --junitxml="$OUT/pytest_wheel_$label.xml" || rc=$?
  local took=$(( $(date +%s) - start ))
  echo "build_wheel: tests with torch $torch_release took $took s, pytest exit code $rc"
  "$venv/bin/python" - "$OUT/pytest_wheel_$label.xml" "$(basename "$WHEEL")" "$WHEEL_SIZE" \
    "$CUBINS" "$PTX" "$took" "$rc" >>"$OUT/summary.txt" <<'PYEOF' || true
import sys, torch, xml.etree.ElementTree as ET
xml, wheel, size, cubins, ptx, took, rc = sys.argv[1:]
n = {k: 0 for k in ("tests", "failures", "errors", "skipped")}
for suite in ET.parse(xml).getroot().iter("testsuite"):
    for k in n:
        n[k] += int(suite.get(k, 0))
passed = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
print(f"build_wheel: SUMMARY: {wheel} ({size}; machine code {cubins.replace(',', ' ')}; PTX "
      f"{ptx.replace(',', ' ')}) with torch {torch.__version__} (CUDA {torch.version.cuda or '-'}): "
      f"{passed} passed, {n['failures'] + n['errors']} failed, {n['skipped']} skipped in {took} s "
      f"(pytest exit code {rc})")
PYEOF
  tail -n 1 "$OUT/summary.txt"
  [ "$rc" = 0 ] || fail "test suite against the wheel with torch $torch_release (pytest exit code $rc)"

  step "python -m torch_fused_ops info (torch $torch_release)"
  "$venv/bin/python" -m torch_fused_ops info | tee "$OUT/info_$label.txt"
  cd "$ROOT"
  rm -rf "$venv"  # a CUDA torch is 3-6 GB: the next test's venv need not sit beside this one
}

test_wheel_with_torch "$TORCH_RELEASE" built-with
[ "$CUDA_MAJOR" = 13 ] || SECOND_TORCH=none  # the CUDA 12 wheel's torch is the minimum itself
SECOND_TORCH="${SECOND_TORCH:-2.13.0}"
if [ "$SYSTEM_SITE" = 0 ] && [ "$SECOND_TORCH" != none ] && [ "$SECOND_TORCH" != "$TORCH_RELEASE" ]; then
  test_wheel_with_torch "$SECOND_TORCH" second
fi
echo
cat "$OUT/summary.txt"
echo "build_wheel: PASSED: $(basename "$WHEEL")${BUILD_S:+, built in ${BUILD_S} s}; logs in $OUT"
rm -rf "$WORK"
}

main "$@"
exit
