#!/usr/bin/env bash
# Nsight Compute on TimeX's float32 cluster forward past T = 16384 (issue 29), as the eager
# training path runs it (timex_forward_keep): the split form (cluster_spectrum_kernel, then
# cluster_conv_kernel) against the one-kernel form (cluster_forward_kernel), at (1, 512, 32768)
# (clusters of 2 CTAs) and (1, 256, 65536) (4 CTAs). Each case runs twice unprofiled, then once
# between cudaProfilerStart/Stop. Writes the report, a CSV of its details page and a short
# summary to $1 (default build/ncu_timex_forward). Clock control off, as the lent machines
# require.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-build/ncu_timex_forward}"
mkdir -p "$OUT_DIR"
# Extra metrics: DRAM bytes, L2 hit rate and the stall reasons per issued instruction.
METRICS=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct
for r in barrier long_scoreboard short_scoreboard mio_throttle membar wait lg_throttle; do
  METRICS+=",smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
done
ncu --clock-control none --profile-from-start off --target-processes all \
  -k regex:'cluster_(forward|conv|spectrum)_kernel' \
  --section SpeedOfLight --section Occupancy --section WarpStateStats \
  --section MemoryWorkloadAnalysis --section SchedulerStats \
  --metrics "$METRICS" \
  -f -o "$OUT_DIR/timex_forward" "${PY:-python3}" - <<'PYEOF'
import os

import torch

import rwkv_ops  # noqa: F401  (registers the ops)

os.environ["RWKV_TIMEX_ALGO"] = "fft_cluster"
for B, C, T in [(1, 512, 32768), (1, 256, 65536)]:
    w = torch.randn(C, T, device="cuda") / T**0.5
    k = torch.randn(B, C, T, device="cuda")
    for mode in ["split", "fused"]:
        os.environ["RWKV_TIMEX_CLUSTER_FORWARD"] = mode
        for _ in range(2):
            torch.ops.rwkv_ops.timex_forward_keep(w, k, 0.0)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        torch.ops.rwkv_ops.timex_forward_keep(w, k, 0.0)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
PYEOF
ncu --import "$OUT_DIR/timex_forward.ncu-rep" --csv --page details > "$OUT_DIR/timex_forward.csv"
"${PY:-python3}" - "$OUT_DIR/timex_forward.csv" <<'PYEOF' | tee "$OUT_DIR/summary.txt"
import csv
import sys

WANT = ["Duration", "Compute (SM) Throughput", "Memory Throughput", "DRAM Throughput",
        "dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_sector_hit_rate.pct",
        "Achieved Occupancy", "Issue Slots Busy", "Warp Cycles Per Issued Instruction",
        "L1/TEX Hit Rate", "L2 Hit Rate", "Mem Busy", "Max Bandwidth"]
rows = {}
for row in csv.DictReader(open(sys.argv[1])):
    key = (row["ID"], row["Kernel Name"].split("(")[0][:60], row["Grid Size"])
    name = row["Metric Name"]
    if name in WANT or name.startswith("smsp__average_warps_issue_stalled"):
        name = name.replace("smsp__average_warps_issue_stalled_", "stall_")
        rows.setdefault(key, []).append(f"{name}={row['Metric Value']}"
                                        f"{row['Metric Unit']}")
for key, vals in rows.items():
    print(" ".join(key), "|", "; ".join(vals))
PYEOF
