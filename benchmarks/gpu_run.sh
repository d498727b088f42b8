#!/usr/bin/env bash
# One call on a GPU machine: build against its torch, run the whole test suite, then the
# full benchmark on CUDA (arguments go to `python -m benchmarks`; default: every family),
# writing tables, plots and benchmarks.json to $RESULTS (default benchmarks/results) and
# logs to $LOGS (default build/gpu_logs). SKIP_TESTS=1 skips the test suite, SKIP_BENCH=1
# the benchmark. Taichi rows appear where taichi is importable (see README: wheels in .whl).
# On the lent H100:
#   FUSED_OPS_COMMIT=<sha> benchmarks/gpu_run.sh [--family NAME ...]
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS="${LOGS:-build/gpu_logs}"
RESULTS="${RESULTS:-benchmarks/results}"
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv \
  | tee "$LOGS/gpu.txt"
# shellcheck disable=SC1091
source .ci/setup.sh  # builds (or reuses the build); sets PY; exits on a failed build
set +eu  # setup.sh turns errexit on; a failing test must not stop the benchmark
cp build/build.log "$LOGS/" 2>/dev/null
if [ -z "${SKIP_TESTS:-}" ]; then
  "$PY" -m pytest tests -q -rs 2>&1 | tee "$LOGS/pytest.log" | tail -n 25
fi
if [ -z "${SKIP_BENCH:-}" ]; then
  start=$(date +%s)
  "$PY" -m benchmarks --device cuda --out "$RESULTS" "$@" 2>&1 | tee "$LOGS/bench.log"
  echo "benchmark took $(( $(date +%s) - start )) s" | tee -a "$LOGS/bench.log"
fi
