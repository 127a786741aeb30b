"""launcher.py - runs one test job: n processes, each a rank, each running
a script from tests/ranks/ with the launchers' variables set.

Every rank gets RINGCC_RANK/NRANKS/ROOT/SECRET (Comm.from_env) and RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (torch's env://), on
ports picked free on 127.0.0.1. The job passes when every rank exits 0;
otherwise, or when it outlives `timeout`, every rank is killed and the
assertion shows each rank's exit status and output.
"""

import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time

import ringcc

RANKS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ranks")
# The package the test process imported (a checkout's python/ or an
# installed one) is the one the ranks import.
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(
    ringcc.__file__)))


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """What a finished job left: per rank its exit status and output."""

    def __init__(self, returncodes, outputs, seconds):
        self.returncodes = returncodes
        self.outputs = outputs
        self.seconds = seconds

    def lines(self, rank, prefix):
        """Lines of rank's output that start with prefix (prefix removed)."""
        return [line[len(prefix):].strip()
                for line in self.outputs[rank].splitlines()
                if line.startswith(prefix)]


def _describe(job, why):
    parts = [why]
    for rank, (rc, out) in enumerate(zip(job.returncodes, job.outputs)):
        tail = "\n".join(out.splitlines()[-60:])
        parts.append(f"--- rank {rank}: exit {rc}\n{tail}")
    return "\n".join(parts)


def run_ranks(n, script, *args, timeout=180, env=None, expect_ok=True):
    """Runs tests/ranks/<script> as n ranks; returns a Job. With
    expect_ok, any non-zero exit fails the test with every rank's output."""
    base = dict(os.environ)
    base.update({
        "RINGCC_NRANKS": str(n), "RINGCC_ROOT": f"127.0.0.1:{free_port()}",
        "RINGCC_SECRET": secrets.token_hex(16), "WORLD_SIZE": str(n),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
        "LOCAL_WORLD_SIZE": str(n), "RINGCC_CUDA_DEVICE": "none",
        "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(
            [PACKAGE_PARENT, os.path.dirname(RANKS_DIR)]
            + ([base["PYTHONPATH"]] if base.get("PYTHONPATH") else [])),
    })
    base.update(env or {})
    procs, files = [], []
    cmd = [sys.executable, os.path.join(RANKS_DIR, script)] + [str(a)
                                                              for a in args]
    start = time.monotonic()
    for rank in range(n):
        rank_env = dict(base, RINGCC_RANK=str(rank), RANK=str(rank),
                        LOCAL_RANK=str(rank))
        out = tempfile.TemporaryFile(mode="w+")
        files.append(out)
        procs.append(subprocess.Popen(cmd, env=rank_env, stdout=out,
                                      stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL))
    deadline = start + timeout
    timed_out = False
    for p in procs:
        left = deadline - time.monotonic()
        try:
            p.wait(timeout=max(left, 0.1))
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    if timed_out:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait()
    outputs = []
    for f in files:
        f.seek(0)
        outputs.append(f.read())
        f.close()
    job = Job([p.returncode for p in procs], outputs, time.monotonic() - start)
    if timed_out:
        raise AssertionError(_describe(job, f"{script} {args}: timed out after "
                                            f"{timeout} s"))
    if expect_ok and any(rc != 0 for rc in job.returncodes):
        raise AssertionError(_describe(job, f"{script} {args}: a rank failed"))
    return job
