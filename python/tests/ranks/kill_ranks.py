"""kill_ranks.py - one rank of the failure test (tests/test_torch_backend.py).

    kill_ranks.py TIMEOUT kill|stop

DDP training on the "ringcc" backend with a TIMEOUT-second process-group
timeout; at step 5 the last rank kills itself (SIGKILL: the library sees
the peer die) or stops (SIGSTOP: it looks alive, only the deadline can
tell). Every other rank must raise a Python exception carrying the
library's message within the timeout, instead of hanging: it prints
"RAISED <seconds> <message>", checks that a later operation's Work and
future raise too, and exits 0 (rank 0 first kills a stopped rank).
"""

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import ringcc.torch  # noqa: F401

TIMEOUT = float(sys.argv[1])
MODE = sys.argv[2]


def main():
    dist.init_process_group("ringcc",
                            timeout=datetime.timedelta(seconds=TIMEOUT))
    n, r = dist.get_world_size(), dist.get_rank()
    pids = [torch.zeros(1, dtype=torch.int64) for _ in range(n)]
    dist.all_gather(pids, torch.tensor([os.getpid()]))
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 8)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    killed_at = None
    for step in range(1000):
        if step == 5 and r == n - 1:
            os.kill(os.getpid(), signal.SIGKILL if MODE == "kill"
                    else signal.SIGSTOP)
        if step == 5:
            killed_at = time.monotonic()
        x = torch.randn(32, 64)
        try:
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        except Exception as e:  # noqa: BLE001 - what the test looks for
            took = time.monotonic() - killed_at if killed_at else -1
            print(f"RAISED {took:.2f} {type(e).__name__}: {e}".replace(
                "\n", " | "))
            if MODE == "stop" and r == 0:
                os.kill(int(pids[n - 1]), signal.SIGKILL)
            break
    else:
        print("NO EXCEPTION after 1000 steps")
        sys.exit(1)
    # The group stays failed: a later operation fails through wait() and
    # through its future, with a message.
    w = dist.all_reduce(torch.ones(4), async_op=True)
    for name, fn in (("wait", w.wait), ("future", w.get_future().wait)):
        try:
            fn()
            print(f"LATER {name}: no exception")
            sys.exit(1)
        except Exception as e:  # noqa: BLE001
            print(f"LATER {name} raised: {e}".replace("\n", " | ")[:300])
    sys.stdout.flush()
    os._exit(0)  # skip destroy_process_group: a peer is gone


if __name__ == "__main__":
    main()
