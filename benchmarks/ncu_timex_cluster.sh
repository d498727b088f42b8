#!/usr/bin/env bash
# Nsight Compute on TimeX's FFT conv kernels, float32 forward: the one-CTA kernel at
# (1, 1024, 16384) and the thread-block-cluster kernels at (1, 512, 32768) (P = 2) and
# (1, 256, 65536) (P = 4): the same number of CTAs of the same size, so their per-CTA costs
# compare. Each shape runs twice unprofiled, then once between cudaProfilerStart/Stop. Writes
# the report and a CSV of its details page to $1 (default build/ncu_timex). Clock control
# off, as the lent machines require.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-build/ncu_timex}"
mkdir -p "$OUT_DIR"
ncu --clock-control none --profile-from-start off --target-processes all -k regex:conv_kernel \
  --section SpeedOfLight --section Occupancy --section LaunchStats \
  --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
  -f -o "$OUT_DIR/timex" "${PY:-python3}" - <<'PYEOF'
import torch

import rwkv_ops

for B, C, T in [(1, 1024, 16384), (1, 512, 32768), (1, 256, 65536)]:
    w = torch.randn(C, T, device="cuda") / T**0.5
    k = torch.randn(B, C, T, device="cuda")
    for _ in range(2):
        rwkv_ops.timex(w, k)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    rwkv_ops.timex(w, k)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
PYEOF
ncu --import "$OUT_DIR/timex.ncu-rep" --csv --page details > "$OUT_DIR/timex.csv"
echo "ncu: $OUT_DIR/timex.ncu-rep, $OUT_DIR/timex.csv"
