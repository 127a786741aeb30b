"""torch_alltoallv.py - torch.distributed all_to_all_single with split sizes
(MoE token dispatch), backend "ringcc" against "gloo", side by side in one
job (a benchmark, not a test).

    python3 python/benchmarks/torch_alltoallv.py [--n 4] [--reps 5]
        [--sizes 1M,16M] [--batch-bytes 256M] [--old-batches] [--out DIR]

It starts --n ranks of itself on this host, each with the default group on
"ringcc" and a "gloo" group of the same ranks. For every size S (the bytes
one rank sends, CPU float32) rank i sends rank j rows of 256 floats in the
proportion ((i + j) mod n) (ringcc-bench's uneven rule: some splits empty,
the largest about 2 S/n). It times batches of dist.all_to_all_single,
alternating the two backends batch by batch (--reps batches each). A
batch is a barrier (gloo), one untimed call of the backend, then as many
timed calls as move --batch-bytes per rank (3 to 50: 16 calls at 16 MiB by
default). Where ranks outnumber cores they leave the barrier milliseconds
apart, and the first call after it waits for the last; before 2026-12-06
that call was timed, in batches of 4 calls at 16 MiB, which put about a
quarter of that wait into every call of the faster backend (--old-batches
measures that way again: no untimed call, 64 MiB a batch). It reports
the median batch's time per call (the slowest rank's) and the
ratio gloo / ringcc. A third column, "direct", times the same exchange on
the ringcc group's own communicator through the Python binding
(Comm.alltoallv, no torch.distributed, no worker thread): ringcc/direct is
what the torch layer adds. Results: a table on stdout and
DIR/alltoallv.json (default build/python-bench/).
"""

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_allreduce import ROOT, free_port, parse_size  # noqa: E402

ROW = 256  # floats per row
KINDS = ("ringcc", "gloo", "direct")


def splits(n, rows, i):
    """Rows rank i sends each rank: about rows in all, by ((i+j) mod n)."""
    if n == 1:
        return [rows]
    return [2 * rows * ((i + j) % n) // (n * (n - 1)) for j in range(n)]


def worker(args):
    import torch
    import torch.distributed as dist

    import ringcc.torch  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group("ringcc")
    n, rank = dist.get_world_size(), dist.get_rank()
    groups = {"ringcc": dist.group.WORLD,
              "gloo": dist.new_group(list(range(n)), backend="gloo")}
    results = []
    for size in [parse_size(s) for s in args.sizes.split(",")]:
        rows = max(size // 4 // ROW, 1)
        send = splits(n, rows, rank)
        recv = [splits(n, rows, i)[rank] for i in range(n)]
        inp = torch.arange(sum(send) * ROW, dtype=torch.float32).view(-1, ROW)
        outs = {k: torch.empty(sum(recv), ROW) for k in KINDS}
        comm = groups["ringcc"]._comm  # the group's communicator
        sc, rc = [c * ROW for c in send], [c * ROW for c in recv]

        def call(k):
            if k == "direct":
                comm.alltoallv(inp, outs[k], sc, rc)
            else:
                dist.all_to_all_single(outs[k], inp, recv, send,
                                       group=groups[k])
        for k in KINDS:  # warm-up, and all agree
            call(k)
        for k in KINDS[1:]:
            if not torch.equal(outs["ringcc"], outs[k]):
                raise SystemExit(f"rank {rank}: ringcc and {k} differ at "
                                 f"{size}")
        batch = (64 << 20) if args.old_batches else args.batch_bytes
        iters = max(3, min(50, batch // max(size, 1)))
        samples = {k: [] for k in KINDS}
        for rep in range(args.reps):
            for k in (KINDS if rep % 2 else KINDS[::-1]):
                dist.barrier(group=groups["gloo"])
                if not args.old_batches:
                    call(k)  # untimed: the ranks leave the barrier apart
                t0 = time.perf_counter()
                for _ in range(iters):
                    call(k)
                took = torch.tensor([(time.perf_counter() - t0) / iters],
                                    dtype=torch.float64)
                dist.all_reduce(took, op=dist.ReduceOp.MAX,
                                group=groups["gloo"])
                samples[k].append(took.item())
        results.append({"bytes": sum(splits(n, rows, 0)) * ROW * 4,
                        "iters": iters,
                        **{k: statistics.median(v) for k, v in samples.items()},
                        **{k + "_all": v for k, v in samples.items()}})
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "alltoallv.json"), "w") as f:
            json.dump({"n": n, "results": results}, f, indent=1)
        print(f"torch all_to_all_single with splits, n = {n}, CPU float32, "
              f"median of {args.reps} batches (load {os.getloadavg()[0]:.1f})")
        print("| bytes sent per rank | ringcc (ms) | gloo (ms) | gloo/ringcc "
              "| direct (ms) | ringcc/direct | calls a batch |")
        print("|---|---|---|---|---|---|---|")
        for r in results:
            print(f"| {r['bytes']} | {r['ringcc'] * 1e3:.2f} | "
                  f"{r['gloo'] * 1e3:.2f} | {r['gloo'] / r['ringcc']:.2f} | "
                  f"{r['direct'] * 1e3:.2f} | "
                  f"{r['ringcc'] / r['direct']:.2f} | {r['iters']} |")
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--sizes", default="1M,16M")
    ap.add_argument("--batch-bytes", type=parse_size, default=256 << 20,
                    help="calls per batch: this many bytes sent per rank "
                         "(3 to 50 calls)")
    ap.add_argument("--old-batches", action="store_true",
                    help="as before 2026-12-06: the first call after the "
                         "barrier timed, 64 MiB a batch")
    ap.add_argument("--out", default=os.path.join(ROOT, "build",
                                                  "python-bench"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    env = dict(os.environ, MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), WORLD_SIZE=str(args.n),
               RINGCC_SECRET=secrets.token_hex(16), OMP_NUM_THREADS="1")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker",
           "--reps", str(args.reps), "--sizes", args.sizes, "--out", args.out,
           "--batch-bytes", str(args.batch_bytes)] + \
        (["--old-batches"] if args.old_batches else [])
    procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r),
                                            LOCAL_RANK=str(r)))
             for r in range(args.n)]
    sys.exit(max(p.wait() for p in procs))


if __name__ == "__main__":
    main()
