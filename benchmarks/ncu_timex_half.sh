#!/usr/bin/env bash
# Nsight Compute on the bfloat16 TimeX direct kernels (csrc/rwkv/timex_tc_*.cuh: the Toeplitz
# products and grad_w) at a shape given as B C T (default 16 512 1024), forced direct: one
# forward + backward after a warm-up call. Prints the details page (speed of light,
# occupancy, warp stalls, shared-memory bank conflicts) and writes the report to $OUT_DIR
# (default build/ncu_timex_half). Clock control off, as the lent machines require.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${OUT_DIR:-build/ncu_timex_half}"
mkdir -p "$OUT_DIR"
B=${1:-16} C=${2:-512} T=${3:-1024}
METRICS=l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,smsp__inst_executed_pipe_tensor.sum
for r in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait \
         not_selected selected dispatch_stall no_instruction; do
  METRICS+=",smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
done
RWKV_TIMEX_ALGO=direct ncu --clock-control none --profile-from-start off \
  -k regex:'_half_kernel' --section SpeedOfLight --section Occupancy --section LaunchStats \
  --section WarpStateStats --metrics "$METRICS" -f -o "$OUT_DIR/timex_half" \
  "${PY:-python3}" - "$B" "$C" "$T" <<'PYEOF'
import sys

import torch

import rwkv_ops  # noqa: F401  (registers the ops)

B, C, T = (int(x) for x in sys.argv[1:4])
w = (torch.randn(C, T, device="cuda") / T**0.5).bfloat16()
k, g = (torch.randn(B, C, T, device="cuda").bfloat16() for _ in range(2))
for profile in (False, True):
    if profile:
        torch.cuda.cudart().cudaProfilerStart()
    torch.ops.rwkv_ops.timex_forward(w, k, 0.0)
    torch.ops.rwkv_ops.timex_backward(g, w, k)
    torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
PYEOF
ncu -i "$OUT_DIR/timex_half.ncu-rep" --page details
