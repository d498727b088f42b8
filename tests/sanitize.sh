#!/usr/bin/env bash
# Runs tests/sanitize.py (every CUDA kernel, forward and backward, on boundary shapes) under
# compute-sanitizer's memcheck, racecheck, initcheck and synccheck; one log per run and a
# one-line summary per run; exit status 1 if any run reported an error or failed a check.
#
#   tests/sanitize.sh [LOG_DIR]        (default: $OUT, else build/sanitize)
#   SANITIZE_TOOLS="memcheck initcheck" tests/sanitize.sh     # a subset of the tools
#
# Settings, and why:
# - PYTORCH_NO_CUDA_MEMORY_CACHING=1: every tensor is its own cudaMalloc, so memcheck sees
#   the real bounds of each allocation (with the caching allocator an overrun into the rest
#   of a cached block goes unseen) and initcheck sees fresh memory per tensor.
# - memcheck, initcheck and synccheck check every kernel that runs (ours and the few of
#   torch's and cuBLAS's: copies, cat, addmm), with --check-api-memory-access yes (the
#   default: memcpy and memset bounds too). initcheck must see every kernel: with a kernel
#   filter it does not see the writes of the unchecked kernels (cuBLAS's GEMM output, which
#   the LLTM cuBLAS path's pointwise kernels read) and reports their reads as uninitialised.
# - racecheck runs once per family, filtered with --kernel-name kns=<namespace> (padding_ops,
#   rwkv, lltm: a substring of each of our kernels' names) to our kernels: cuBLAS's GEMM
#   kernels are outside our control and racecheck of them costs minutes. A filtered run
#   still runs the other kernels, unchecked.
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
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
echo "sanitize: $("$CS" --version | tail -1); logs in $LOG_DIR"

status=0
for tool in ${SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}; do
  case "$tool" in
    memcheck|initcheck|synccheck) runs="all" ;;
    racecheck) runs="padding rwkv lltm" ;;
    *) echo "sanitize: unknown tool $tool" >&2; exit 2 ;;
  esac
  for family in $runs; do
    args=(--tool "$tool" --error-exitcode 1 --print-limit 10)
    case "$family" in
      padding) args+=(--kernel-name kns=padding_ops) ;;
      rwkv) args+=(--kernel-name kns=rwkv) ;;
      lltm) args+=(--kernel-name kns=lltm) ;;
    esac
    [ "$tool" = racecheck ] && args+=(--racecheck-report all)
    log="$LOG_DIR/$tool-$family.log"
    start=$(date +%s)
    "$CS" "${args[@]}" "$PY" tests/sanitize.py --family "$family" >"$log" 2>&1
    rc=$?
    summary="$(grep -E '(ERROR|RACECHECK) SUMMARY' "$log" | tail -n 1 | sed 's/^========= //')"
    checks="$(grep -E '^sanitize: .* checks ok' "$log" | tail -n 1)"
    if [ -z "$checks" ] && [ "$rc" -eq 0 ]; then rc=1; fi  # the script did not finish
    printf '%-9s %-7s rc=%s  %s  [%s]  %ss  %s\n' "$tool" "$family" "$rc" \
      "${summary:-no summary line}" "${checks:-checks did not finish}" \
      "$(( $(date +%s) - start ))" "$log"
    [ "$rc" -ne 0 ] && status=1
  done
done
echo "sanitize: $([ $status -eq 0 ] && echo 'all runs clean' || echo 'FAILED (see the logs)')"
exit $status
