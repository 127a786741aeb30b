"""bench.py - `python3 -m ringcc.bench`: a collective benchmark of the Python
binding, in ringcc-bench's (nccl-tests') format.

    build/bin/ringcc-run -np 4 python3 -m ringcc.bench -b 8 -e 64M -f 2

Sizes go up from -b, times -f, while <= -e (nccl-tests' meaning); --coll
picks the collective (-c is nccl-tests' check count, not taken here).

One row per size: size (bytes), count, type, redop, root, time (us, the
slowest rank's mean per call), algbw and busbw (GB/s, nccl-tests' factors),
and #wrong: every element of the last result is checked against the value
every rank can compute (inputs are small integers). The communicator comes
from the environment (ringcc-run, mpirun, srun, torchrun variables).
"""

import argparse
import sys
import time

import numpy as np

import ringcc

COLLECTIVES = ["allreduce", "reduce_scatter", "allgather", "bcast", "reduce",
               "alltoall"]


def parse_size(text):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    unit = text[-1] if text and text[-1] in units else ""
    return int(float(text[:-1] if unit else text) * units[unit])


def bus_factor(coll, n):
    if coll == "allreduce":
        return 2 * (n - 1) / n
    if coll in ("reduce_scatter", "allgather", "alltoall"):
        return (n - 1) / n
    return 1.0


def setup(coll, comm, count, dtype):
    """(run, check): run() makes one call; check() counts wrong elements."""
    n, r = comm.size, comm.rank
    base = (np.arange(count, dtype=np.int64) % 7).astype(dtype)
    if coll == "allreduce":
        x, out = base + r, np.empty(count, dtype)
        want = base * n + n * (n - 1) // 2
        return (lambda: comm.allreduce(x, out)), (lambda: out != want)
    if coll == "reduce_scatter":
        per = count // n
        x, out = np.tile(base[:per] + r, n), np.empty(per, dtype)
        want = base[:per] * n + n * (n - 1) // 2
        return (lambda: comm.reduce_scatter(x, out)), (lambda: out != want)
    if coll == "allgather":
        per = count // n
        x, out = base[:per] + r, np.empty(per * n, dtype)
        want = np.concatenate([base[:per] + q for q in range(n)])
        return (lambda: comm.allgather(x, out)), (lambda: out != want)
    if coll == "bcast":
        buf = base + r
        want = base + 0
        return (lambda: comm.bcast(buf, 0)), (lambda: buf != want)
    if coll == "reduce":
        x, out = base + r, np.empty(count, dtype)
        want = base * n + n * (n - 1) // 2

        def check():
            return out != want if r == 0 else np.zeros(0, bool)
        return (lambda: comm.reduce(x, out, root=0)), check
    per = count // n  # alltoall: block j of rank q is base + 10q + j
    x = np.concatenate([base[:per] + 10 * r + j for j in range(n)])
    out = np.empty(per * n, dtype)
    want = np.concatenate([base[:per] + 10 * q + r for q in range(n)])
    return (lambda: comm.alltoall(x, out)), (lambda: out != want)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m ringcc.bench",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("-b", "--minbytes", default="8")
    ap.add_argument("-e", "--maxbytes", default="64M")
    ap.add_argument("-f", "--stepfactor", type=int, default=2)
    ap.add_argument("--coll", "--collective", dest="collective",
                    default="allreduce", choices=COLLECTIVES)
    ap.add_argument("-d", "--datatype", default="float32",
                    choices=["float32", "float64", "int32", "int64"])
    ap.add_argument("-n", "--iters", type=int, default=0,
                    help="calls per size (default: by size, 20 to 1000)")
    ap.add_argument("-w", "--warmup", type=int, default=5)
    args = ap.parse_args(argv)

    dtype = np.dtype(args.datatype)
    with ringcc.Comm.from_env() as comm:
        n, r = comm.size, comm.rank
        if r == 0:
            print(f"# ringcc {ringcc.__version__} (Python binding, "
                  f"{ringcc.library_path}), {n} ranks, {args.collective}")
            print(f"#{'size':>12} {'count':>12} {'type':>8} {'redop':>6} "
                  f"{'root':>5} {'time(us)':>10} {'algbw(GB/s)':>12} "
                  f"{'busbw(GB/s)':>12} {'#wrong':>7}")
        size = parse_size(args.minbytes)
        wrong_total = 0
        busbws = []
        while size <= parse_size(args.maxbytes):
            count = max(size // dtype.itemsize, 1)
            if args.collective in ("reduce_scatter", "allgather", "alltoall"):
                count = max(count // n, 1) * n
            run, check = setup(args.collective, comm, count, dtype)
            iters = args.iters or int(min(1000, max(20, (1 << 28) //
                                                    max(size, 1) // 16)))
            for _ in range(args.warmup):
                run()
            comm.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                run()
            took = np.array([(time.perf_counter() - start) / iters])
            comm.allreduce(took, op="max")
            wrong = np.array([int(np.count_nonzero(check()))], np.int64)
            comm.allreduce(wrong)
            wrong_total += int(wrong[0])
            nbytes = count * dtype.itemsize
            algbw = nbytes / took[0] / 1e9
            busbws.append(algbw * bus_factor(args.collective, n))
            if r == 0:
                redop = "sum" if args.collective in (
                    "allreduce", "reduce_scatter", "reduce") else "none"
                root = 0 if args.collective in ("bcast", "reduce") else -1
                print(f" {nbytes:>12} {count:>12} {dtype.name:>8} {redop:>6} "
                      f"{root:>5} {took[0] * 1e6:>10.2f} {algbw:>12.3f} "
                      f"{algbw * bus_factor(args.collective, n):>12.3f} "
                      f"{int(wrong[0]):>7}", flush=True)
            size *= args.stepfactor
        comm.barrier()
    if r == 0:
        print(f"# Out of bounds values : {wrong_total} "
              f"{'FAILED' if wrong_total else 'OK'}")
        print(f"# Avg bus bandwidth    : "
              f"{sum(busbws) / len(busbws) if busbws else 0:g}")
    return 1 if wrong_total else 0


if __name__ == "__main__":
    sys.exit(main())
