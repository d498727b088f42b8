#!/usr/bin/env bash
# Nsight Compute on the kernels that bound the open GPU targets, one call on a GPU machine
# after the build (benchmarks/gpu_run.sh): the TimeX forward at (32, 768, 768) and the LLTM
# small-path kernels at (256, 256, 1024), float32. Each is run a few times unprofiled, then
# once between cudaProfilerStart/Stop, which is all that ncu profiles. Writes the report and
# a CSV of its details page (throughputs, occupancy, warp stall reasons) to $1 (default
# build/ncu). Clock control off, as the lent machines require.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-build/ncu}"
mkdir -p "$OUT_DIR"
PY="${PY:-python3}"
ncu --clock-control none --profile-from-start off --target-processes all \
  --section SpeedOfLight --section Occupancy --section LaunchStats \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section SchedulerStats --section WarpStateStats \
  -f -o "$OUT_DIR/kernels" "$PY" - <<'EOF'
import torch

import lltm
import rwkv_ops
from benchmarks.bench_lltm import make_set, results_of

torch.backends.cuda.matmul.allow_tf32 = False
w = torch.randn(768, 768, device="cuda") / 768**0.5
k = torch.randn(32, 768, 768, device="cuda")
leaves, grads = make_set(256, 256, 1024, "cuda")


def work():
    rwkv_ops.timex(w, k)
    results_of(lltm.lltm_cell, leaves, grads)


for _ in range(3):
    work()
torch.cuda.synchronize()
torch.cuda.profiler.start()
work()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
EOF
ncu --import "$OUT_DIR/kernels.ncu-rep" --csv --page details > "$OUT_DIR/kernels.csv"
echo "ncu: $OUT_DIR/kernels.ncu-rep, $OUT_DIR/kernels.csv"
