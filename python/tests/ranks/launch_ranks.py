"""launch_ranks.py - one rank started by a real launcher (tests/test_launchers.py).

    launch_ranks.py from_env      ringcc.Comm.from_env() alone
    launch_ranks.py with_torch    torch.distributed.init_process_group
                                  (gloo, env://) first, then Comm.from_env()
                                  in the same process: both meet through
                                  torchrun's one TCPStore

Checks the rank and size against the launcher's RANK/WORLD_SIZE, runs an
allreduce and an allgather whose exact results are known, and prints
"launch ok rank R of N"; any mismatch exits 1.
"""

import os
import sys

import numpy as np

import ringcc


def main(mode):
    want_rank = int(os.environ["RANK"])
    want_size = int(os.environ["WORLD_SIZE"])
    if mode == "with_torch":
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo")
        t = torch.tensor([want_rank + 1.0])
        dist.all_reduce(t)
        assert t.item() == want_size * (want_size + 1) / 2, t
    with ringcc.Comm.from_env(timeout=60) as comm:
        if (comm.rank, comm.size) != (want_rank, want_size):
            print(f"from_env gave rank {comm.rank} of {comm.size}; torchrun "
                  f"says {want_rank} of {want_size}")
            return 1
        n = comm.size
        x = np.arange(1031, dtype=np.int64) + (comm.rank + 1) * 100000
        out = comm.allreduce(x)
        want = np.arange(1031, dtype=np.int64) * n + n * (n + 1) // 2 * 100000
        if not np.array_equal(out, want):
            bad = int(np.nonzero(out != want)[0][0])
            print(f"allreduce: element {bad} is {out[bad]}, expected {want[bad]}")
            return 1
        ranks = np.full(n, -1, dtype=np.int32)
        comm.allgather(np.array([comm.rank], dtype=np.int32), ranks)
        if not np.array_equal(ranks, np.arange(n, dtype=np.int32)):
            print(f"allgather of ranks: {ranks}")
            return 1
    if mode == "with_torch":
        dist.destroy_process_group()
    print(f"launch ok rank {want_rank} of {want_size}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
