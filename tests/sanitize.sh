#!/usr/bin/env bash
# Runs tests/sanitize.py (every CUDA kernel of the package, forward and backward, on boundary
# shapes, each checked against float64) under compute-sanitizer's memcheck, racecheck,
# initcheck and synccheck: one run and one log per tool and family, a summary line per run
# (cases run, the tool's error count, the kernels the reports name), the same lines in
# LOG_DIR/summary.txt; exit status 1 if a run reported an error, failed a check, did not
# finish, or was skipped.
#
#   tests/sanitize.sh [LOG_DIR]                    (default: $OUT, else build/sanitize)
#   SANITIZE_TOOLS="memcheck initcheck"            a subset of the tools (default: all four)
#   SANITIZE_FAMILIES="lltm_seq rwkv_fft"          a subset of the families (tests/sanitize.py)
#   SANITIZE_ARGS="--dtypes float32 --case T=1\b"  more filters for tests/sanitize.py (split at
#                                                  spaces: a --case regex writes one as .)
#   SANITIZE_BUDGET_<TOOL>=seconds                 wall time for all of a tool's runs
#                                                  (defaults: memcheck 90, racecheck 120,
#                                                  initcheck 130, synccheck 70: 7 minutes)
#
# Time: each tool has a budget, a wall-time limit for all of its runs. The families run in
# order of priority, newest first (lltm_seq, rwkv_fft, rwkv_fft_library, then the older
# lltm_cell, rwkv_direct, padding, whose kernels earlier runs found clean); a run still going
# when the budget is spent is stopped (its log shows how far it got: "TIMEOUT", checks=N), and
# the runs after it are skipped (SKIPPED lines). Raise a budget or narrow SANITIZE_FAMILIES /
# SANITIZE_ARGS to cover the rest.
#
# Settings, and why:
# - PYTORCH_NO_CUDA_MEMORY_CACHING=1: every tensor is its own cudaMalloc, so memcheck sees
#   the real bounds of each allocation (with the caching allocator an overrun into the rest
#   of a cached block goes unseen) and initcheck sees fresh memory per tensor.
# - memcheck, initcheck and synccheck check every kernel that runs (ours, and torch's,
#   cuBLAS's and cuFFT's on the paths that use them), API memory accesses included
#   (--check-api-memory-access yes, the default: cudaMemcpy2DAsync and memset bounds).
#   initcheck must see every kernel: with a kernel filter it does not see the writes of the
#   unchecked kernels and reports their reads as uninitialised. Known report: see
#   tests/sanitize_probe.py (bfloat16 GEMM output written with TMA stores on Hopper).
# - racecheck: the library-free cases (tests/sanitize.py --library-free: only this package's
#   kernels and torch's copy and fill kernels run) in every dtype, then the cases that call
#   cuBLAS or cuFFT in float32 and float64 only (--library-dtypes float32,float64), filtered to
#   this package's kernels (--kernel-name kns=<namespace>; racecheck of cuBLAS's and cuFFT's
#   own kernels costs minutes). racecheck aborts ("The Sanitizer failed to handle a hardware
#   exception", then CUBLAS_STATUS_EXECUTION_FAILED) in cuBLAS's bfloat16 GEMMs on Hopper,
#   filter or not, so the library cases of the half types are left out, and the library-free
#   ones run first (an abort in a library case leaves their results in the log). Every kernel
#   of the package that has shared memory (the persistent sequence kernels and the column sum,
#   the fused and direct TimeX kernels, the cell's small-path kernels, padding's reduce) runs
#   in a library-free case in every dtype it takes (the sequence's through F = 0 and the bias
#   gradient alone). What racecheck does not see: the half-type runs of the kernels that only
#   run beside a library (the sequence fallback's step and add kernels, the library FFT's
#   pack, product and crop passes, the cell's cuBLAS-path pointwise kernels); none of them
#   uses shared memory, so there is nothing in them for racecheck to check.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
LOG_DIR="${1:-${OUT:-build/sanitize}}"
mkdir -p "$LOG_DIR"
PY="${PYTHON:-python3}"
CS="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")}"
if [ ! -x "$CS" ]; then
  echo "sanitize: compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2
  exit 2
fi
TOOLS="${SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}"
FAMILIES="${SANITIZE_FAMILIES:-lltm_seq rwkv_fft rwkv_fft_library lltm_cell rwkv_direct padding}"
read -r -a EXTRA <<<"${SANITIZE_ARGS:-}"
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
SUMMARY="$LOG_DIR/summary.txt"
echo "sanitize: $("$CS" --version | tail -1); logs in $LOG_DIR" | tee "$SUMMARY"

budget() {
  case "$1" in
    memcheck) echo "${SANITIZE_BUDGET_MEMCHECK:-90}" ;;
    racecheck) echo "${SANITIZE_BUDGET_RACECHECK:-120}" ;;
    initcheck) echo "${SANITIZE_BUDGET_INITCHECK:-130}" ;;
    synccheck) echo "${SANITIZE_BUDGET_SYNCCHECK:-70}" ;;
  esac
}
STARTUP=15  # a run left with less than this is skipped (the start-up alone takes about that)

namespace() {
  case "$1" in
    lltm_*) echo lltm ;;
    rwkv_*) echo rwkv ;;
    padding) echo padding_ops ;;
  esac
}

status=0
for tool in $TOOLS; do
  case "$tool" in
    memcheck|racecheck|initcheck|synccheck) ;;
    *) echo "sanitize: unknown tool $tool" >&2; exit 2 ;;
  esac
  # The runs of this tool (one per family) and their case counts.
  runs=()
  counts=()
  total=0
  for family in $FAMILIES; do
    sel=(--family "$family" ${EXTRA[@]+"${EXTRA[@]}"})
    [ "$tool" = racecheck ] && sel+=(--library-dtypes float32,float64)
    # A bad filter (an argument tests/sanitize.py refuses) stops here: its runs would check
    # nothing and report clean.
    if ! n="$("$PY" tests/sanitize.py "${sel[@]}" --count 2>"$LOG_DIR/count.err")"; then
      echo "sanitize: tests/sanitize.py ${sel[*]} --count failed: $(tail -1 "$LOG_DIR/count.err")" \
        | tee -a "$SUMMARY" >&2
      exit 2
    fi
    [ "$n" -gt 0 ] 2>/dev/null || continue
    runs+=("$family")
    counts+=("$n")
    total=$((total + n))
  done
  if [ "${#runs[@]}" -eq 0 ]; then  # the filters match no case of any family: nothing checked
    printf '%-26s no case matches SANITIZE_FAMILIES and SANITIZE_ARGS\n' "$tool" | tee -a "$SUMMARY"
    status=1
  fi
  tool_start=$(date +%s)
  tool_budget=$(budget "$tool")
  for i in "${!runs[@]}"; do
    family="${runs[$i]}"
    n="${counts[$i]}"
    remaining=$(( tool_budget - ($(date +%s) - tool_start) ))
    share=$remaining
    name="$tool-$family"
    log="$LOG_DIR/$name.log"
    if [ "$remaining" -lt "$STARTUP" ]; then
      printf '%-26s cases=%-3s SKIPPED (the %s budget of %ss is spent)\n' "$name" "$n" "$tool" \
        "$tool_budget" | tee -a "$SUMMARY"
      status=1
      continue
    fi
    sel=(--family "$family" ${EXTRA[@]+"${EXTRA[@]}"})
    args=(--tool "$tool" --error-exitcode 1 --print-limit 200)
    if [ "$tool" = racecheck ]; then
      sel+=(--library-dtypes float32,float64)
      args+=(--racecheck-report all --kernel-name "kns=$(namespace "$family")")
    fi
    start=$(date +%s)
    timeout -k 20 "$share" "$CS" "${args[@]}" "$PY" tests/sanitize.py "${sel[@]}" >"$log" 2>&1
    rc=$?
    took=$(( $(date +%s) - start ))
    line="$("$PY" tests/sanitize.py --summarize "$log")"
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      line="TIMEOUT after ${share}s: $line"
    fi
    printf '%-26s cases=%-3s rc=%-3s %4ss  %s\n' "$name" "$n" "$rc" "$took" "$line" \
      | tee -a "$SUMMARY"
    [ "$rc" -ne 0 ] && status=1
  done
done
echo "sanitize: $([ $status -eq 0 ] && echo 'all runs clean' || echo 'NOT CLEAN (see the logs)')" \
  | tee -a "$SUMMARY"
exit $status
