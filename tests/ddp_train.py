"""Example: train a small sequence model built from this package's ops with
torch.nn.parallel.DistributedDataParallel.

The model: an LLTM cell unrolled over the T time steps of the input (lltm.LLTM), its hidden
states (B, S, T) mixed over time by a TimeX layer (rwkv_ops.TimeX), and a linear head on
the last step. The task (synthetic, made from a seed): is the sum over time of feature 0
positive? Every rank draws the same global batch and trains on its own slice.

    torchrun --nproc_per_node N tests/ddp_train.py [--steps 50] [--device cuda|cpu]

cuda: one GPU per rank (cuda:LOCAL_RANK), NCCL; cpu: gloo. --check-grads: after the first
backward, every rank compares its (all-reduced) gradients with a single-process run of the
same model on the whole global batch, prints the largest difference and exits with status
1 if a gradient differs by more than the stated tolerance.
"""

import argparse
import os
import sys

# The GPU machines need NVLink multicast off (NVLS in NCCL, multicast in symmetric memory).
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

try:  # the installed package; from a source checkout with an in-place build, that tree
    import lltm  # noqa: E402
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import lltm  # noqa: E402
import rwkv_ops  # noqa: E402

# Gradient check tolerance (float64): DDP averages the ranks' gradients, which sums in a
# different order from the single-process run; nothing else differs.
RTOL, ATOL = 1e-9, 1e-12


class SequenceModel(torch.nn.Module):
    def __init__(self, features, state, max_len, classes=2):
        super().__init__()
        self.state = state
        self.cell = lltm.LLTM(features, state)
        self.timex = rwkv_ops.TimeX(state, max_len)
        self.head = torch.nn.Linear(state, classes)

    def forward(self, x):  # x (B, T, features) -> logits (B, classes)
        B, T, _ = x.shape
        h = x.new_zeros(B, self.state)
        c = x.new_zeros(B, self.state)
        hs = []
        for t in range(T):
            h, c = self.cell(x[:, t], (h, c))
            hs.append(h)
        mixed = self.timex(torch.stack(hs, dim=2))  # (B, state, T)
        return self.head(mixed[:, :, -1])


def make_model(args, device, dtype):
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    return SequenceModel(args.features, args.state, args.time).to(device, dtype)


def global_batch(args, step, device, dtype):
    gen = torch.Generator().manual_seed(args.seed * 1000 + step)
    x = torch.randn(args.batch * args.world, args.time, args.features, generator=gen,
                    dtype=torch.float64)
    y = (x[:, :, 0].sum(1) > 0).long()
    return x.to(device, dtype), y.to(device)


def check_grads(args, ddp_model, device, dtype):
    """This rank's DDP gradients against one process on the concatenated batch."""
    ref = make_model(args, device, dtype)
    x, y = global_batch(args, 0, device, dtype)
    F.cross_entropy(ref(x), y).backward()
    worst = 0.0
    ok = True
    for (name, p), q in zip(ddp_model.module.named_parameters(), ref.parameters()):
        diff = (p.grad - q.grad).abs()
        worst = max(worst, diff.max().item())
        if not torch.allclose(p.grad, q.grad, rtol=RTOL, atol=ATOL):
            ok = False
            print(f"rank {args.rank}: gradient of {name} differs by up to {diff.max().item():.3e}",
                  flush=True)
    print(f"rank {args.rank}: gradients after one step on {args.world} ranks vs one process on "
          f"the concatenated batch: max |diff| {worst:.3e} (rtol {RTOL}, atol {ATOL}): "
          f"{'ok' if ok else 'MISMATCH'}", flush=True)
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"],
                        default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=16, help="per rank")
    parser.add_argument("--time", type=int, default=12)
    parser.add_argument("--features", type=int, default=8)
    parser.add_argument("--state", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--check-grads", action="store_true",
                        help="compare the first step's gradients with one process (float64)")
    args = parser.parse_args()
    dtype = torch.float64 if args.check_grads else getattr(torch, args.dtype)

    if args.device == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    args.rank, args.world = dist.get_rank(), dist.get_world_size()

    model = torch.nn.parallel.DistributedDataParallel(
        make_model(args, device, dtype), device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    ok = True
    for step in range(args.steps):
        x, y = global_batch(args, step, device, dtype)
        mine = slice(args.rank * args.batch, (args.rank + 1) * args.batch)
        loss = F.cross_entropy(model(x[mine]), y[mine])
        opt.zero_grad()
        loss.backward()
        if step == 0 and args.check_grads:
            ok = check_grads(args, model, device, dtype)
        opt.step()
        if args.rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print(f"step {step}: loss {loss.item():.4f} (rank 0's slice)", flush=True)
    # Every rank must hold the same parameters after training.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    first = flat.clone()
    dist.broadcast(first, 0)
    if not torch.equal(flat, first):
        print(f"rank {args.rank}: parameters differ from rank 0's", flush=True)
        ok = False
    dist.destroy_process_group()
    # Exit without C++ static destructors: torch's distributed runtime was seen to abort in
    # its teardown ("terminate called without an active exception", 1 run in 10 on the
    # 2-core CPU machine) after every check here had passed and printed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if ok else 1)


if __name__ == "__main__":
    main()
