"""train_ranks.py - one rank of the training test (tests/test_training.py).

    train_ranks.py ddp STEPS     DistributedDataParallel
    train_ranks.py fsdp STEPS    FSDP2 (fully_shard)

The same small model, from the same seed, on the same batches, trained
twice in one job: over the "ringcc" default group and over a "gloo" group
of the same ranks. Every step's loss and, at the end, every parameter are
compared. Prints "LOSSES bitwise|close|DIFFER ..." and "PARAMS ..." lines
and exits 1 on DIFFER. bitwise: every bit equal (what to expect where both
libraries add the ranks' contributions in the same order, as at n = 2,
where a + b = b + a). close: within 1e-6 relative, the bound where the
orders differ (n = 4: each step's sum may differ in its last bit, and 50
steps of SGD with momentum carry that on): for losses element by element,
for a parameter tensor max|ringcc - gloo| <= 1e-6 * max|gloo| (an element
near zero has no meaningful relative difference of its own).
"""

import datetime
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import ringcc.torch  # noqa: F401

MODE, STEPS = sys.argv[1], int(sys.argv[2])
REL = 1e-6


def make_model():
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 64),
                         nn.Tanh(), nn.Linear(64, 10))


def batches(rank):
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(16, 32, generator=g),
             torch.randint(0, 10, (16,), generator=g)) for _ in range(STEPS)]


def train(group, rank):
    model = make_model()
    if MODE == "ddp":
        model = nn.parallel.DistributedDataParallel(model,
                                                    process_group=group)
    else:
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import fully_shard
        mesh = DeviceMesh.from_group(group, "cpu")
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for x, y in batches(rank):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().clone())
    params = []
    for p in model.parameters():
        p = p.detach()
        if hasattr(p, "full_tensor"):  # FSDP2: a sharded DTensor
            p = p.full_tensor()
        params.append(p.clone())
    return torch.stack(losses), params


def compare(a, b, per_element):
    """'bitwise', 'close' or 'DIFFER', and the relative difference: per
    element (losses) or against the tensor's largest magnitude (params)."""
    if torch.equal(a.view(torch.int32), b.view(torch.int32)):
        return "bitwise", 0.0
    diff = (a - b).abs()
    if per_element:
        rel = (diff / b.abs().clamp_min(1e-30)).max().item()
    else:
        rel = (diff.max() / b.abs().max().clamp_min(1e-30)).item()
    return ("close" if rel <= REL else "DIFFER"), rel


def main():
    dist.init_process_group("ringcc", timeout=datetime.timedelta(seconds=300))
    n, r = dist.get_world_size(), dist.get_rank()
    gloo = dist.new_group(list(range(n)), backend="gloo")
    ringcc_losses, ringcc_params = train(dist.group.WORLD, r)
    gloo_losses, gloo_params = train(gloo, r)
    verdict, rel = compare(ringcc_losses, gloo_losses, True)
    print(f"LOSSES {verdict} max_rel={rel:.3g} steps={len(ringcc_losses)} "
          f"first={ringcc_losses[0].item():.6f} "
          f"last={ringcc_losses[-1].item():.6f}")
    worst, worst_rel = "bitwise", 0.0
    for a, b in zip(ringcc_params, gloo_params):
        v, rel = compare(a, b, False)
        worst_rel = max(worst_rel, rel)
        if v == "DIFFER" or (v == "close" and worst == "bitwise"):
            worst = v
    print(f"PARAMS {worst} max_rel={worst_rel:.3g} tensors={len(gloo_params)}")
    if ringcc_losses[-1] >= ringcc_losses[0]:
        print("LOSS did not go down")
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if "DIFFER" in (verdict, worst) else 0)


if __name__ == "__main__":
    main()
