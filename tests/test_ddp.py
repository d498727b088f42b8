"""DistributedDataParallel with this package's ops: tests/ddp_train.py launched with torchrun
on 2 ranks; after one step every rank's gradients must equal those of a single process on
the concatenated batch (float64, rtol 1e-9, atol 1e-12: only the summation order differs),
and after a few steps every rank must hold the same parameters. On the CPU with gloo (CI);
on 2 GPUs with NCCL when the machine has them."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def launch(device, nproc=2, steps=3, timeout=240):
    # The ranks import the package this test process imported (the source tree's in-place
    # build or an installed wheel), not whatever the checkout holds.
    import lltm

    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
               OMP_NUM_THREADS="1", PYTHONPATH=str(Path(lltm.__file__).resolve().parent.parent))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", str(ROOT / "tests" / "ddp_train.py"),
           f"--device={device}", f"--steps={steps}", "--check-grads",
           "--batch=4", "--time=6", "--features=5", "--state=7"]
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    for rank in range(nproc):
        assert f"rank {rank}: gradients after one step on {nproc} ranks" in out, out[-4000:]
        assert f"rank {rank}: gradients" in out and "MISMATCH" not in out, out[-4000:]
    return out


def test_ddp_gloo_two_ranks_cpu():
    launch("cpu")


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="needs two CUDA devices")
def test_ddp_nccl_two_gpus():
    launch("cuda")
