"""torch_p2p.py - torch.distributed batch_isend_irecv and async all_reduce,
backend "ringcc" against "gloo", side by side in one job (a benchmark, not
a test).

    python3 python/benchmarks/torch_p2p.py [--n 2] [--size 16M] [--reps 7]

Starts --n ranks of itself on this host (torch's env:// variables), each
with the default group on "ringcc" and a "gloo" group of the same ranks.
Times, alternating the backends rep by rep (medians of the slowest rank):
  - batch_isend_irecv of --size bytes to the next rank and from the previous
    one, each rank's send first in the list (ringcc runs the batch as one
    ringcc group); GB/s is the bytes one rank sends per second;
  - dist.isend/irecv of the same (ringcc's tagged channels: a thread and a
    communicator per peer and direction);
  - four async_op=True all_reduce calls of --size / 4 bytes each, then wait
    on all (ringcc's worker thread).
"""

import argparse
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time


from torch_allreduce import parse_size  # noqa: E402 - this folder


def worker(args):
    import torch
    import torch.distributed as dist
    import ringcc.torch  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group("ringcc")
    n, r = dist.get_world_size(), dist.get_rank()
    groups = {"ringcc": dist.group.WORLD,
              "gloo": dist.new_group(list(range(n)), backend="gloo")}
    count = parse_size(args.size) // 4
    nxt, prv = (r + 1) % n, (r - 1) % n
    s = torch.arange(count, dtype=torch.float32) + r
    t = torch.empty(count)

    def batch(g):
        ops = [dist.P2POp(dist.isend, s, nxt, g), dist.P2POp(dist.irecv, t, prv, g)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()

    def pairs(g):
        ws = [dist.isend(s, nxt, group=g), dist.irecv(t, prv, group=g)]
        for w in ws:
            w.wait()

    xs = [torch.ones(count // 4) for _ in range(4)]

    def async_ar(g):
        for w in [dist.all_reduce(x, group=g, async_op=True) for x in xs]:
            w.wait()

    def timed(fn, g):
        dist.barrier(group=groups["gloo"])
        t0 = time.perf_counter()
        fn(g)
        took = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(took, op=dist.ReduceOp.MAX, group=groups["gloo"])
        return took.item()

    out = {}
    for what, fn in (("batch_isend_irecv", batch), ("isend/irecv", pairs),
                     ("4 async all_reduce", async_ar)):
        samples = {"ringcc": [], "gloo": []}
        for name in samples:
            fn(groups[name])  # warm-up
        for i in range(args.reps):
            for name in ("ringcc", "gloo") if i % 2 else ("gloo", "ringcc"):
                samples[name].append(timed(fn, groups[name]))
        if what == "batch_isend_irecv":
            if not torch.equal(t, torch.arange(count, dtype=torch.float32) + prv):
                raise SystemExit(f"rank {r}: batch_isend_irecv gave wrong data")
        out[what] = {k: statistics.median(v) for k, v in samples.items()}
    if r == 0:
        size = parse_size(args.size)
        print(f"n={n}, {size >> 20} MiB per message, medians of {args.reps} "
              "(slowest rank), ms:")
        for what, m in out.items():
            gbs = {k: size / v / 1e9 for k, v in m.items()}
            print(f"  {what:20s} ringcc {m['ringcc'] * 1e3:8.2f} "
                  f"({gbs['ringcc']:.2f} GB/s)   gloo {m['gloo'] * 1e3:8.2f} "
                  f"({gbs['gloo']:.2f} GB/s)   gloo/ringcc "
                  f"{m['gloo'] / m['ringcc']:.2f}x")
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--size", default="16M")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               WORLD_SIZE=str(args.n), RINGCC_CUDA_DEVICE="none",
               OMP_NUM_THREADS="1")
    env.setdefault("RINGCC_SECRET", secrets.token_hex(16))
    cmd = [sys.executable, os.path.abspath(__file__), "--worker",
           "--size", args.size, "--reps", str(args.reps)]
    procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
             for r in range(args.n)]
    sys.exit(max(p.wait() for p in procs))


if __name__ == "__main__":
    main()
