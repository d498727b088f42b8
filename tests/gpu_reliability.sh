#!/usr/bin/env bash
# Issue 25's GPU battery in one script: compute-sanitizer per tool and family, the probes
# behind the known sanitizer reports, the property tests on CUDA, the tensors past 2^31
# elements, the out-of-memory and thread tests. Writes OUTDIR/summary.txt (the lines that
# matter from every stage; appended to when OUTDIR is reused) and OUTDIR/logs-STAGES.tar.gz
# (every log of the call); nothing else.
#
#   tests/gpu_reliability.sh OUTDIR [STAGE ...]
#
# Stages (default: all but build, in this order; about 20 minutes on an H100):
#   info        versions, GPU, compute-sanitizer --version and --help            (seconds)
#   build       only when asked: pip install --no-build-isolation -e . if the CUDA ops are
#               missing (into the Python that runs the script)
#   sanitize    tests/sanitize.sh: 4 tools x 6 families, per-tool budgets       (~7.5 min)
#   probe       tests/sanitize_probe.py: 14 initcheck experiments, one run each
#               (probe-initcheck, ~4 min), then NaN poisoning, the kernels of the
#               library-free cases, NaN/inf placement (probe-plain, ~2 min)
#   properties  hypothesis tests on CPU and CUDA (test_properties_paths.py,
#               test_properties.py)                                             (~4 min)
#   large       FUSED_OPS_LARGE=1: TimeX FFT paths and the LLTM sequence past 2^31 (needs
#               62 GiB free for the largest; each test states its memory)       (~3 min)
#   faults      out-of-memory faults and threads on their own streams           (~3 min)
# Each stage runs under a time limit (STAGE_TIMEOUT, default 570 s), so that one call of a
# 10-minute runner never overruns one stage: on such a runner, one call per group, e.g.
#   tests/gpu_reliability.sh "$OUT" info build          (build: as long as it takes)
#   tests/gpu_reliability.sh "$OUT" sanitize            (~7.5 min)
#   tests/gpu_reliability.sh "$OUT" probe               (~6 min)
#   tests/gpu_reliability.sh "$OUT" properties large    (~7 min)
#   tests/gpu_reliability.sh "$OUT" faults              (~3 min)
#
# Settings: PYTHON (default python3); SANITIZE_* (tests/sanitize.sh); LARGE_FILTER (pytest -k
# expression of the large stage; default the new FFT and sequence tests, "large" runs all);
# FUSED_OPS_HYPOTHESIS_EXAMPLES (examples per property test). Without hypothesis installed,
# the property tests skip, unless its wheels are carried in build/wheels (no index needed):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --platform manylinux2014_x86_64 --implementation cp -d build/wheels \
#     hypothesis==6.170.17 sortedcontainers==2.4.0
# they are then installed into build/pydeps, which goes on PYTHONPATH.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ $# -lt 1 ]; then
  sed -n '2,30p' "${BASH_SOURCE[0]}"
  exit 2
fi
OUTDIR="$1"
shift
STAGES="${*:-info sanitize probe properties large faults}"
mkdir -p "$OUTDIR"
OUTDIR="$(cd "$OUTDIR" && pwd)"
LOGS="$OUTDIR/logs"
mkdir -p "$LOGS"
SUMMARY="$OUTDIR/summary.txt"
PY="${PYTHON:-python3}"
export PYTHON="$PY" PYTHONUNBUFFERED=1
STAGE_TIMEOUT="${STAGE_TIMEOUT:-570}"
# hypothesis: the Python's own, else wheels carried in build/wheels installed into
# build/pydeps (a folder of its own, put on PYTHONPATH; the Python's packages stay as they are).
if ! "$PY" -c "import hypothesis" 2>/dev/null; then
  if ls build/wheels/hypothesis-*.whl >/dev/null 2>&1 && [ ! -d build/pydeps/hypothesis ]; then
    "$PY" -m pip install -q --no-index --find-links build/wheels --target build/pydeps \
      hypothesis >/dev/null 2>&1 || echo "gpu_reliability: installing build/wheels failed"
  fi
  [ -d build/pydeps ] && export PYTHONPATH="$ROOT/build/pydeps${PYTHONPATH:+:$PYTHONPATH}"
fi

say() { echo "$*" | tee -a "$SUMMARY"; }
section() { say ""; say "== $1 ($(date -u +%H:%M:%S)) =="; }
run_stage() {  # name, command...: the command's output to logs/NAME.log, its status noted
  local name="$1"
  shift
  local start=$(date +%s)
  timeout -k 30 "$STAGE_TIMEOUT" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  local note=""
  { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && note=" (TIMEOUT after ${STAGE_TIMEOUT}s)"
  say "[$name: exit $rc$note, $(( $(date +%s) - start ))s, log logs/$name.log]"
  return $rc
}
pytest_summary() {  # the outcome lines of a pytest log
  grep -E "^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) |^=+ .*(passed|failed|error|skipped).* =+$" \
    "$1" | sed 's/^/  /' | tee -a "$SUMMARY"
}

say "gpu_reliability: stages: $STAGES; $(date -u '+%Y-%m-%d %H:%M UTC'); $(git rev-parse --short HEAD 2>/dev/null) on $(git rev-parse --abbrev-ref HEAD 2>/dev/null)"

for stage in $STAGES; do
  case "$stage" in
    info)
      section info
      {
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
        "$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
        "$PY" -c "import hypothesis; print('hypothesis', hypothesis.__version__)" 2>/dev/null \
          || echo "hypothesis: not installed (property tests will skip)"
        "${COMPUTE_SANITIZER:-compute-sanitizer}" --version | tail -1
      } 2>&1 | tee -a "$SUMMARY"
      "${COMPUTE_SANITIZER:-compute-sanitizer}" --help >"$LOGS/compute-sanitizer-help.txt" 2>&1
      ;;
    build)
      section build
      if "$PY" -c "import torch, lltm, rwkv_ops, padding_ops; assert torch.ops.lltm.lltm_sequence_forward.default.has_kernel_for_dispatch_key('CUDA')" 2>/dev/null; then
        say "build: the CUDA ops load; not rebuilt"
      else
        run_stage build env MAX_JOBS="${MAX_JOBS:-16}" "$PY" -m pip install --no-build-isolation -e .
        tail -3 "$LOGS/build.log" | tee -a "$SUMMARY"
      fi
      ;;
    sanitize)
      section "sanitize (compute-sanitizer; cases and the tool's error count per tool and family)"
      run_stage sanitize tests/sanitize.sh "$LOGS/sanitize"
      [ -f "$LOGS/sanitize/summary.txt" ] && sed 's/^/  /' "$LOGS/sanitize/summary.txt" | tee -a "$SUMMARY"
      ;;
    probe|probe-initcheck|probe-plain)
      if [ "$stage" != probe-plain ]; then
        section "probe: initcheck, one experiment per run (tests/sanitize_probe.py initcheck)"
        say "  (reports counted by compute-sanitizer; 'reports in' names the first kernels reported)"
        for exp in "read bfloat16 6,64,128,256" "zeroed bfloat16 6,64,128,256" \
                   "mm bfloat16 6,64,128,256" "op bfloat16 6,64,128,256" \
                   "op-f0 bfloat16 6,64,128,256" "op-fallback bfloat16 6,64,128,256" \
                   "read bfloat16 4,8,16,512" "op bfloat16 4,8,16,512" \
                   "read bfloat16 3,5,7,9" "op bfloat16 3,5,7,9" \
                   "read float16 6,64,128,256" "op float16 6,64,128,256" \
                   "read float32 6,64,128,256" "op float32 6,64,128,256"; do
          read -r step dtype shape <<<"$exp"
          log="$LOGS/probe-initcheck-$step-$dtype-${shape//,/x}.log"
          start=$(date +%s)
          PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout -k 10 "${PROBE_TIMEOUT:-100}" \
            "${COMPUTE_SANITIZER:-compute-sanitizer}" --tool initcheck --print-limit 20 \
            "$PY" tests/sanitize_probe.py initcheck "$step" "$dtype" "$shape" >"$log" 2>&1
          rc=$?
          printf '  %-12s %-9s %-13s rc=%-3s %3ss  %s\n' "$step" "$dtype" "$shape" "$rc" \
            "$(( $(date +%s) - start ))" "$("$PY" tests/sanitize.py --summarize "$log" \
            | sed 's/^checks=0 ok=0 failed=0 skipped=0 //')" | tee -a "$SUMMARY"
        done
      fi
      if [ "$stage" != probe-initcheck ]; then
        section "probe: NaN-poisoned memory (caching allocator on)"
        run_stage probe-nan "$PY" tests/sanitize_probe.py nan
        grep "^probe:" "$LOGS/probe-nan.log" | sed 's/^/  /' | tee -a "$SUMMARY"
        section "probe: kernels of the library-free sanitize cases (racecheck's configuration)"
        run_stage probe-kernels "$PY" tests/sanitize_probe.py kernels
        grep -E "^probe: [a-z_]+: |case failed" "$LOGS/probe-kernels.log" | sed 's/^/  /' | tee -a "$SUMMARY"
        section "probe: where the CUDA TimeX algorithms put NaN and inf"
        run_stage probe-nonfinite "$PY" tests/sanitize_probe.py nonfinite
        grep "^probe:" "$LOGS/probe-nonfinite.log" | sed 's/^/  /' | tee -a "$SUMMARY"
      fi
      ;;
    properties)
      section "properties (hypothesis, CPU and CUDA)"
      run_stage properties "$PY" -m pytest -p no:cacheprovider -rA -q \
        tests/test_properties_paths.py tests/test_properties.py -k "not baseline" \
        --hypothesis-show-statistics
      pytest_summary "$LOGS/properties.log"
      grep -E "^tests/.*::|passing, [0-9]+ failing" "$LOGS/properties.log" | sed 's/^/  /' | tee -a "$SUMMARY"
      ;;
    large)
      section "large: past 2^31 elements (FUSED_OPS_LARGE=1)"
      run_stage large env FUSED_OPS_LARGE=1 "$PY" -m pytest -p no:cacheprovider -rA -s -q \
        tests/test_cuda_large.py -k "${LARGE_FILTER:-past_2pow31 and (fft or sequence) or past_limit}"
      grep -E "past 2\^31:|past_limit|on cuda: norm-wise|small" "$LOGS/large.log" | grep -v "^PASSED\|^FAILED" | sed 's/^/  /' | tee -a "$SUMMARY"
      pytest_summary "$LOGS/large.log"
      ;;
    faults)
      section "faults: out of memory, threads"
      run_stage faults "$PY" -m pytest -p no:cacheprovider -rA -s -q tests/test_cuda_faults.py
      grep -E "MiB" "$LOGS/faults.log" | grep -v "^PASSED\|^FAILED" | sed 's/^/  /' | tee -a "$SUMMARY"
      pytest_summary "$LOGS/faults.log"
      ;;
    *)
      say "unknown stage $stage (info build sanitize probe properties large faults)"
      ;;
  esac
done
TARBALL="logs-$(echo "$STAGES" | tr ' ' '-').tar.gz"
tar -czf "$OUTDIR/$TARBALL" -C "$OUTDIR" logs && rm -rf "$LOGS"
say ""
say "gpu_reliability: done $(date -u +%H:%M:%S); every log in $TARBALL"
