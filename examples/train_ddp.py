"""train_ddp.py - train a small model with DistributedDataParallel over the
torch.distributed backend "ringcc" (CPU tensors).

    pip install ./python torch
    torchrun --nproc-per-node 4 examples/train_ddp.py            # ringcc
    torchrun --nproc-per-node 4 examples/train_ddp.py --backend gloo

Each rank trains on its own random batches of a synthetic regression task
(learn y = x @ W for a fixed W); DDP averages the gradients, so every rank
keeps the same parameters. Rank 0 prints the loss and the time per step;
at the end every rank checks that its parameters equal rank 0's.
"""

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import ringcc.torch  # noqa: F401 - registers the "ringcc" backend


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="ringcc")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--hidden", type=int, default=512)
    args = ap.parse_args()

    dist.init_process_group(args.backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial model on every rank
    target = torch.randn(64, 16)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(
        nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 16)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    torch.manual_seed(1 + rank)  # a different data stream per rank
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        x = torch.randn(128, 64)
        loss = nn.functional.mse_loss(model(x), x @ target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and (step % 50 == 0 or step == 1):
            ms = (time.perf_counter() - start) / step * 1e3
            print(f"[{args.backend}] step {step:4d}  loss {loss.item():.4f}  "
                  f"{ms:.2f} ms/step", flush=True)

    # DDP keeps the replicas equal: check it against rank 0's copy.
    flat = torch.cat([p.detach().view(-1) for p in model.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, 0)
    same = torch.equal(flat, ref)
    print(f"rank {rank}: parameters {'equal to' if same else 'DIFFER from'} "
          f"rank 0's")
    dist.destroy_process_group()
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
