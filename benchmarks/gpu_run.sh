#!/usr/bin/env bash
# One call on a GPU machine: build against its torch, run the whole test suite, then the
# benchmark of the chosen families (default: all), writing the tables to $RESULTS
# (default benchmarks/results) and logs to $LOGS (default build/gpu_logs). On the lent H100:
#   FUSED_OPS_COMMIT=<sha> benchmarks/gpu_run.sh [--family NAME ...]
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS="${LOGS:-build/gpu_logs}"
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv \
  | tee "$LOGS/gpu.txt"
tests/run.sh -rs 2>&1 | tee "$LOGS/pytest.log" | tail -n 25
cp build/build.log "$LOGS/" 2>/dev/null
python3 -m benchmarks --device cuda --out "${RESULTS:-benchmarks/results}" "$@" 2>&1 | tee "$LOGS/bench.log"
