#!/usr/bin/env bash
# Nsight Compute on the tensor-core FFT kernels (fft_tc): one forward + both gradients,
# bfloat16, forced fft_tc, at each shape given as B,C,T (default 16,512,2500 and 16,512,8192),
# after the build (RWKV_TIMEX_ALGO is set here). Writes to $OUT_DIR (default build/ncu): the
# report, the details page as text (throughputs, occupancy, warp stalls) and, per kernel, the
# SASS lines with the most stall samples (ncu_top_stalls.py). Clock control off, as the lent
# machines require.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${OUT_DIR:-build/ncu}"
mkdir -p "$OUT_DIR"
PY="${PY:-python3}"
SHAPES="${*:-16,512,2500 16,512,8192}"
for shape in $SHAPES; do
  tag="tc_${shape//,/_}"
  RWKV_TIMEX_ALGO=fft_tc SHAPE="$shape" ncu --clock-control none --profile-from-start off \
    --target-processes all --set full --import-source no \
    -f -o "$OUT_DIR/$tag" "$PY" - <<'PYEOF'
import os

import torch

import rwkv_ops

B, C, T = (int(v) for v in os.environ["SHAPE"].split(","))
w = (torch.randn(C, T, device="cuda") / T**0.5).bfloat16().requires_grad_()
k = torch.randn(B, C, T, device="cuda").bfloat16().requires_grad_()
g = torch.randn(B, C, T, device="cuda").bfloat16()
assert rwkv_ops.timex_algorithm(k) == "fft_tc", rwkv_ops.timex_algorithm(k)


def work():
    rwkv_ops.timex(w, k).backward(g)


for _ in range(3):
    work()
torch.cuda.synchronize()
torch.cuda.profiler.start()
work()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
PYEOF
  ncu --import "$OUT_DIR/$tag.ncu-rep" --page details > "$OUT_DIR/$tag.txt"
  ncu --import "$OUT_DIR/$tag.ncu-rep" --page source --csv --print-source sass \
    > "$OUT_DIR/$tag.sass.csv" 2> "$OUT_DIR/$tag.sass.err" || true
done
echo "ncu: $OUT_DIR"
