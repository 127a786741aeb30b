"""torch_allreduce.py - torch.distributed all_reduce and a DDP step, backend
"ringcc" against "gloo", side by side in one job (a benchmark, not a test).

    python3 python/benchmarks/torch_allreduce.py [--n 4] [--reps 5]
        [--min 8] [--max 64M] [--factor 8] [--ddp-steps 6] [--out DIR]

It starts --n ranks of itself on this host (torch's env:// variables), each
with the default group on "ringcc" and a "gloo" group of the same ranks.
For every size (CPU float32, 8 B to 64 MiB) it times batches of synchronous
dist.all_reduce calls, alternating ringcc and gloo batch by batch (--reps
batches each), and reports the median batch: time per call (the slowest
rank's) and bus bandwidth (bytes / time x 2(n-1)/n, as nccl-tests). Then a
DDP training step of a ~25 M-parameter MLP, alternating the two backends
step by step. Last, the Python layer's cost per call at 8 B: the backend's
all_reduce, the NumPy binding's Comm.allreduce and a bare ctypes call, next
to ringcc-bench's 8 B figure (build/bin/ringcc-bench under ringcc-run) when
the checkout has it. Results: a table on stdout and in DIR (default
build/python-bench/).
"""

import argparse
import datetime
import json
import os
import re
import secrets
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def parse_size(text):
    text = text.upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text[:-1] if mult > 1 else text) * mult)


def human(nbytes):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes // size} {unit}"
    return f"{nbytes} B"


# ---- one rank ----------------------------------------------------------------

def timed_batch(fn, iters, group_for_max):
    import torch
    import torch.distributed as dist
    dist.barrier(group=group_for_max)
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    took = torch.tensor([(time.perf_counter() - start) / iters],
                        dtype=torch.float64)
    dist.all_reduce(took, op=dist.ReduceOp.MAX, group=group_for_max)
    return took.item()


def worker(args):
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    import ringcc
    import ringcc.torch  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group("ringcc")
    n, rank = dist.get_world_size(), dist.get_rank()
    groups = {"ringcc": dist.group.WORLD,
              "gloo": dist.new_group(list(range(n)), backend="gloo")}
    results = {"n": n, "sizes": [], "ddp": {}, "layer": {}}
    sizes, size = [], parse_size(args.min)
    while size < parse_size(args.max):
        sizes.append(size)
        size *= args.factor
    sizes.append(parse_size(args.max))  # the largest size always runs
    for size in sizes:
        count = max(size // 4, 1)
        iters = int(min(300, max(3, (32 << 20) // max(size, 1))))
        samples = {"ringcc": [], "gloo": []}
        tensors = {name: torch.ones(count) for name in samples}
        for name in samples:  # warm-up
            for _ in range(2):
                dist.all_reduce(tensors[name], group=groups[name])
        for _ in range(args.reps):
            for name in ("ringcc", "gloo"):
                t, g = tensors[name], groups[name]
                samples[name].append(timed_batch(
                    lambda t=t, g=g: dist.all_reduce(t, group=g), iters,
                    groups["gloo"]))
        results["sizes"].append({
            "bytes": count * 4, "iters": iters,
            **{name: statistics.median(v) for name, v in samples.items()},
            **{name + "_all": v for name, v in samples.items()}})

    # DDP: ~25 M parameters, a small batch, steps alternating backends.
    torch.manual_seed(0)

    def mlp():
        return nn.Sequential(nn.Linear(2048, 4096), nn.ReLU(),
                             nn.Linear(4096, 2048), nn.ReLU(),
                             nn.Linear(2048, 4096))
    models = {name: nn.parallel.DistributedDataParallel(
        mlp(), process_group=groups[name]) for name in groups}
    params = sum(p.numel() for p in models["gloo"].parameters())
    opts = {name: torch.optim.SGD(m.parameters(), lr=1e-3)
            for name, m in models.items()}
    x = torch.randn(16, 2048)
    steps = {"ringcc": [], "gloo": []}
    for i in range(args.ddp_steps + 1):
        for name in ("ringcc", "gloo") if i % 2 else ("gloo", "ringcc"):
            def step(name=name):
                models[name](x).square().mean().backward()
                opts[name].step()
                opts[name].zero_grad()
            took = timed_batch(step, 1, groups["gloo"])
            if i:  # the first step of each builds DDP's buckets
                steps[name].append(took)
    results["ddp"] = {"params": params,
                      **{k: statistics.median(v) for k, v in steps.items()},
                      **{k + "_all": v for k, v in steps.items()}}

    # The Python layer at 8 B: backend, NumPy binding, bare ctypes.
    from ringcc._lib import lib
    comm = groups["ringcc"]._comm
    t = torch.ones(2)
    a, b = np.ones(2, np.float32), np.empty(2, np.float32)
    fns = {
        "backend all_reduce": lambda: dist.all_reduce(t),
        "ringcc.Comm.allreduce": lambda: comm.allreduce(a, b),
        "ctypes ringcc_allreduce": lambda: lib.ringcc_allreduce(
            a.ctypes.data, b.ctypes.data, 2, 8, 0, comm.handle, None),
    }
    layer = {name: [] for name in fns}
    for _ in range(args.reps):
        for name, fn in fns.items():
            layer[name].append(timed_batch(fn, 300, groups["gloo"]))
    results["layer"] = {k: statistics.median(v) for k, v in layer.items()}
    if rank == 0:
        print("RESULTS " + json.dumps(results), flush=True)
    dist.barrier(group=groups["gloo"])
    dist.destroy_process_group()


# ---- the launcher ------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def c_bench_8b(n):
    run = os.path.join(ROOT, "build", "bin", "ringcc-run")
    bench = os.path.join(ROOT, "build", "bin", "ringcc-bench")
    if not (os.path.exists(run) and os.path.exists(bench)):
        return None
    out = subprocess.run([run, "-np", str(n), bench, "-b", "8", "-e", "8"],
                         capture_output=True, text=True, timeout=120).stdout
    for line in out.splitlines():
        m = re.match(r"\[0\]\s+8\s+2\s+float32\s+sum\s+-1\s+([\d.]+)", line)
        if m:
            return float(m.group(1)) * 1e-6
    return None


def launch(args):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), WORLD_SIZE=str(args.n),
               RINGCC_CUDA_DEVICE="none", OMP_NUM_THREADS="1")
    env.setdefault("RINGCC_SECRET", secrets.token_hex(16))
    cmd = [sys.executable, os.path.abspath(__file__), "--worker"] + \
        sys.argv[1:]
    procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r),
                                            LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, text=True)
             for r in range(args.n)]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        sys.exit(f"a rank failed: {[p.returncode for p in procs]}\n{outs}")
    line = next(l for l in outs[0].splitlines() if l.startswith("RESULTS "))
    return json.loads(line[len("RESULTS "):])


def report(res, args, c8):
    import torch
    n = res["n"]
    factor = 2 * (n - 1) / n
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    lines = [f"# torch.distributed all_reduce, CPU float32, n = {n}, {now}, "
             f"torch {torch.__version__}; batches alternate ringcc/gloo, "
             f"median of {args.reps} each",
             f"{'size':>9} {'ringcc us':>11} {'gloo us':>11} "
             f"{'ringcc GB/s':>12} {'gloo GB/s':>10} {'busbw x':>8} "
             f"{'time x':>7}"]
    for s in res["sizes"]:
        rc, gl = s["ringcc"], s["gloo"]
        lines.append(
            f"{human(s['bytes']):>9} {rc * 1e6:>11.1f} {gl * 1e6:>11.1f} "
            f"{s['bytes'] / rc * factor / 1e9:>12.3f} "
            f"{s['bytes'] / gl * factor / 1e9:>10.3f} {gl / rc:>8.2f} "
            f"{rc / gl:>7.2f}")
    d = res["ddp"]
    lines.append(f"# DDP step, {d['params'] / 1e6:.1f} M parameters, batch "
                 f"16: ringcc {d['ringcc'] * 1e3:.1f} ms, gloo "
                 f"{d['gloo'] * 1e3:.1f} ms (median of {len(d['gloo_all'])} "
                 f"alternating steps; ringcc/gloo = "
                 f"{d['ringcc'] / d['gloo']:.2f})")
    lines.append("# Python layer at 8 B (n = %d, median per call):" % n)
    for name, sec in res["layer"].items():
        lines.append(f"#   {name:<26} {sec * 1e6:8.1f} us")
    if c8 is not None:
        lines.append(f"#   {'ringcc-bench (C), 8 B':<26} {c8 * 1e6:8.1f} us")
    text = "\n".join(lines)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = os.path.join(args.out, f"torch_allreduce-n{n}-{stamp}")
    with open(path + ".txt", "w") as f:
        f.write(text + "\n")
    with open(path + ".json", "w") as f:
        json.dump(res, f, indent=1)
    print(f"# written: {path}.txt and .json")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--min", default="8")
    ap.add_argument("--max", default="64M")
    ap.add_argument("--factor", type=int, default=8)
    ap.add_argument("--ddp-steps", type=int, default=6)
    ap.add_argument("--out", default=os.path.join(ROOT, "build",
                                                  "python-bench"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    res = launch(args)
    report(res, args, c_bench_8b(args.n))


if __name__ == "__main__":
    main()
