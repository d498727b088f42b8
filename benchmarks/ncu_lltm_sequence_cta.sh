#!/usr/bin/env bash
# Nsight Compute on the cta path's forward recurrence kernel, one call on a GPU machine after
# the build, at (T, B, F, S) (default 256 8 32 96, float32). It runs a few times unprofiled,
# then once between cudaProfilerStart/Stop, which is all that ncu profiles. Prints the details
# page (duration, issue activity, warp stall reasons) and writes the report to $OUT_DIR
# (default build/ncu). Clock control off, as the lent machines require.
#   benchmarks/ncu_lltm_sequence_cta.sh [T B F S [dtype]]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${OUT_DIR:-build/ncu}"
mkdir -p "$OUT_DIR"
PY="${PY:-python3}"
SIZE=("${1:-256}" "${2:-8}" "${3:-32}" "${4:-96}")
DTYPE="${5:-float32}"
LLTM_SEQUENCE_PATH=cta \
  ncu --clock-control none --profile-from-start off --kernel-name regex:forward \
    --section SpeedOfLight --section LaunchStats --section SchedulerStats \
    --section WarpStateStats --section InstructionStats \
    -f -o "$OUT_DIR/cta_forward" "$PY" - "${SIZE[@]}" "$DTYPE" <<'PYEOF' >/dev/null
import sys

import torch

import lltm

T, B, F, S = (int(v) for v in sys.argv[1:5])
dtype = getattr(torch, sys.argv[5])
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(T, B, F, device="cuda", generator=g).to(dtype)
w = ((torch.rand(3 * S, S + F, device="cuda", generator=g) * 2 - 1) / S**0.5).to(dtype)
b = ((torch.rand(3 * S, device="cuda", generator=g) * 2 - 1) / S**0.5).to(dtype)
h0 = torch.randn(B, S, device="cuda", generator=g).to(dtype) * 0.5
c0 = torch.randn(B, S, device="cuda", generator=g).to(dtype) * 0.5
for _ in range(3):
    lltm.lltm_sequence(x, w, b, h0, c0)
torch.cuda.synchronize()
torch.cuda.profiler.start()
lltm.lltm_sequence(x, w, b, h0, c0)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
PYEOF
echo "== forward, (T, B, F, S) = (${SIZE[*]}), $DTYPE"
ncu --import "$OUT_DIR/cta_forward.ncu-rep" --page details --print-units base 2>/dev/null \
  | grep -E "forward|Duration|SM Frequency|Executed Ipc|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Executed Instructions  |Registers Per|Block Size|Grid Size" || true
# Stall reasons: average warps stalled per issued instruction, the non-negligible ones.
ncu --import "$OUT_DIR/cta_forward.ncu-rep" --page raw --print-units base 2>/dev/null \
  | grep -E "smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active.ratio" \
  | awk '$NF + 0 >= 0.05' || true
