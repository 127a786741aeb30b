"""shrink_ranks.py - one rank of the shrink test (tests/test_torch_backend.py).

    shrink_ranks.py NKILL

A training loop that goes on after ranks die (torchft-style): a small
model on the "ringcc" backend, gradients averaged with the group's
allreduce. At step 5 the last NKILL ranks kill themselves (SIGKILL). Every
other rank's allreduce raises; it then calls shrink() on its group
(ProcessGroupRingcc.shrink: ringcc_comm_shrink on the survivors), redoes
the step on the new group and trains 10 more steps. It prints "RAISED ...",
"SHRUNK <rank> <size>" and at the end "PARAMS <max difference between the
survivors' parameters>" (0: every survivor holds the same model) and
"DONE <steps>", and exits 0.
"""

import datetime
import os
import signal
import sys

import torch
import torch.distributed as dist

import ringcc.torch  # noqa: F401

NKILL = int(sys.argv[1])


def ringcc_group():
    """The ProcessGroupRingcc behind the default group."""
    pg = dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device("cpu"))
    assert isinstance(backend, ringcc.torch.ProcessGroupRingcc), backend
    return backend


def average(pg, tensors):
    for t in tensors:
        pg.allreduce([t]).wait()
        t /= pg.size()


def main():
    dist.init_process_group("ringcc",
                            timeout=datetime.timedelta(seconds=30))
    n, r = dist.get_world_size(), dist.get_rank()
    pg = ringcc_group()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step, after = 0, 0
    while after < 10:
        if step == 5 and r >= n - NKILL:
            os.kill(os.getpid(), signal.SIGKILL)
        gen = torch.Generator().manual_seed(1000 * step + r)
        x = torch.randn(8, 16, generator=gen)
        opt.zero_grad()
        model(x).square().mean().backward()
        try:
            average(pg, [p.grad for p in model.parameters()])
        except Exception as e:  # noqa: BLE001 - a lost rank
            print(f"RAISED {type(e).__name__}: {e}".replace("\n", " | "))
            new = pg.shrink()
            print(f"SHRUNK {new.rank()} {new.size()}")
            pg = new
            continue  # the same step again, on the survivors
        opt.step()
        step += 1
        after += pg.size() < n
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    lo = flat.clone()
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.MIN
    pg.allreduce([lo], opts).wait()
    mx = dist.AllreduceOptions()
    mx.reduceOp = dist.ReduceOp.MAX
    hi = flat.clone()
    pg.allreduce([hi], mx).wait()
    print(f"PARAMS {float((hi - lo).abs().max())}")
    print(f"DONE {step}")
    os._exit(0)  # the old group's peers are gone: no teardown to wait for


if __name__ == "__main__":
    main()
