#!/bin/bash
# device call 1: build, step tests (float32 new), float32 path sweep against cuDNN
set -x
export MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0 FUSED_OPS_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo 6fa2676)
mkdir -p $OUT/r
( time bash -c 'source .ci/setup.sh' ) > $OUT/r/build.txt 2>&1 || { tail -50 $OUT/r/build.txt; exit 1; }
PY=python; [ -x .venv/bin/python ] && PY=.venv/bin/python
timeout 200 $PY -m pytest tests/test_lltm_sequence_step.py -q -n 8 -x > $OUT/r/test_step.txt 2>&1; tail -5 $OUT/r/test_step.txt
timeout 150 $PY -m pytest tests/test_lltm_sequence.py tests/test_lltm_sequence_float32.py tests/test_lltm_sequence_sizes.py -q -n 8 -k "step" > $OUT/r/test_forced.txt 2>&1; tail -5 $OUT/r/test_forced.txt
timeout 230 $PY -m benchmarks.lltm_sequence_paths --dtypes float32 --rounds 3 \
  --variants auto persistent step-big step-small fallback \
  --sizes 1024,4,64,1024 128,128,128,512 128,256,128,384 128,256,128,512 32,256,256,1024 64,256,64,1024 128,64,512,512 128,64,128,256 256,16,32,128 \
  --md $OUT/r/sweep.md > $OUT/r/sweep.txt 2>&1; cat $OUT/r/sweep.txt | tail -60
cd $OUT && tar czf r.tgz r && rm -rf r
